//! The containerd test peer itself (tests/peers/containerd.sh and the
//! harness's `ContainerdPeer`): real pod sandboxes over CRI, real pulls from
//! its registry, a pull that hangs behind the stalling proxy, a port that drops
//! SYNs, and a stop that leaves nothing behind. Needs root, and
//! fails without it (CI runs as root).

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tend_e2e::*;

fn connect(port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), timeout)
}

#[test]
fn sandboxes_pulls_stalls_syn_drops_and_a_clean_stop() {
    let started = Instant::now();
    let peer = ContainerdPeer::start();
    eprintln!("containerd peer started in {:?}", started.elapsed());
    assert!(peer.endpoint().starts_with("unix://"));
    assert!(peer.image_present(ContainerdPeer::PAUSE_IMAGE));
    assert!(peer.image_present(ContainerdPeer::BUSYBOX_IMAGE));

    // Two sandboxes of one pod: attempt 0 stopped, attempt 1 running.
    let uid = "6f1c1b0e-5b8a-4c41-9d34-0c1f2e7a9b01";
    let first = peer.run_sandbox("web", "default", uid, 0);
    peer.stop_sandbox(&first);
    let second = peer.run_sandbox("web", "default", uid, 1);
    let sandboxes = peer.sandboxes();
    assert_eq!(sandboxes.len(), 2, "{sandboxes:?}");
    let by_id = |id: &str| sandboxes.iter().find(|s| s.id == id).unwrap().clone();
    let (a, b) = (by_id(&first), by_id(&second));
    assert_eq!((a.attempt, a.state), (0, SandboxState::NotReady), "{a:?}");
    assert_eq!((b.attempt, b.state), (1, SandboxState::Ready), "{b:?}");
    assert!(
        sandboxes
            .iter()
            .all(|s| s.uid == uid && s.name == "web" && s.namespace == "default")
    );
    // The running sandbox's pause process is the peer's (its cgroup); left
    // running for stop to remove.
    // runc's start returns once the pause process may exec, not once it has.
    let processes = peer.processes();
    wait_until(Duration::from_secs(10), "the pause process", || {
        processes.list().iter().any(|p| p.ends_with(": /pause"))
    });
    let running = processes.list();
    assert!(
        running
            .iter()
            .any(|p| p.contains("containerd-shim-runc-v2")),
        "{running:#?}"
    );
    assert!(!processes.mounts().is_empty());

    // A pull through the stalling proxy does not complete: the manifest comes
    // through, the 4 MB layer never does. The client gives up at its deadline.
    let image = peer.stalled_big_image();
    let asked = Instant::now();
    let error = peer
        .pull_within(&image, Duration::from_secs(3))
        .expect_err("a pull through the stalling proxy completed");
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_secs(3),
        "gave up after {waited:?}: {error}"
    );
    // tonic enforces the deadline itself (Cancelled), or containerd does.
    assert!(
        matches!(
            error.code(),
            tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
        ),
        "{error}"
    );
    assert!(!peer.image_present(&image));
    assert!(
        peer.stall_proxy_log()
            .contains("stall /v2/exp/big/blobs/sha256:")
    );
    // containerd cancels the fetch, and the proxy sees the client go away.
    wait_until(
        Duration::from_secs(20),
        "the proxy to see the pull go",
        || peer.stall_proxy_log().contains("client went away"),
    );

    // A pull from the registry completes, the image is there, and removal works.
    let image = peer.big_image();
    let image_ref = peer
        .pull(&image)
        .unwrap_or_else(|e| panic!("pull {image}: {e}"));
    assert!(image_ref.starts_with("sha256:"), "{image_ref}");
    assert!(peer.image_present(&image));
    assert!(
        peer.registry_log()
            .contains("GET /v2/exp/big/blobs/sha256:")
    );
    peer.remove_image(&image);
    assert!(!peer.image_present(&image));

    // Dropped SYNs: a connect to the registry's port times out; once accepted
    // again it connects.
    let port = peer.registry_port();
    connect(port, Duration::from_secs(2)).expect("the registry does not accept");
    let dropping = drop_syns(port);
    let error =
        connect(port, Duration::from_millis(500)).expect_err("connected through a SYN drop");
    assert_eq!(error.kind(), std::io::ErrorKind::TimedOut, "{error}");
    dropping.accept_syns();
    connect(port, Duration::from_secs(2)).expect("no connect after accept_syns");
    // And the guard removes its rule when dropped.
    let dropping = drop_syns(port);
    assert!(connect(port, Duration::from_millis(300)).is_err());
    drop(dropping);
    connect(port, Duration::from_secs(2)).expect("no connect after the guard was dropped");
    let rules = std::process::Command::new("iptables")
        .args(["-w", "10", "-S", "INPUT"])
        .output()
        .unwrap();
    let rules = String::from_utf8_lossy(&rules.stdout);
    assert!(
        !rules.contains(&format!("tend-e2e-syn-drop:{}:{port}:", std::process::id())),
        "{rules}"
    );

    // Stop (one sandbox still runs): nothing of the peer is left.
    let dir = peer.dir().to_path_buf();
    let stopping = Instant::now();
    drop(peer);
    eprintln!("containerd peer stopped in {:?}", stopping.elapsed());
    assert_eq!(processes.list(), Vec::<String>::new());
    assert_eq!(processes.mounts(), Vec::<String>::new());
    assert_eq!(processes.cgroups(), Vec::<std::path::PathBuf>::new());
    assert!(!dir.exists());
}

/// Two peers side by side, the second with a certs.d of the test's own: each
/// sees only its own sandboxes, stopping one leaves the other running, and a
/// docker.io pull mirrored to the registry (as mirror-gate configures it)
/// reaches the registry with containerd's `?ns=docker.io`.
#[test]
fn two_peers_side_by_side_and_a_mirrored_docker_io_pull() {
    let certs = tempfile::tempdir().unwrap();
    let (one, two) = std::thread::scope(|s| {
        let one = s.spawn(ContainerdPeer::start);
        let two = s.spawn(|| ContainerdPeer::start_with_certs_dir(certs.path()));
        (one.join().unwrap(), two.join().unwrap())
    });
    assert_ne!(one.endpoint(), two.endpoint());
    assert_eq!(two.certs_dir(), certs.path());

    // The peer wrote hosts.toml for its own registry and proxy only.
    let mut written: Vec<String> = std::fs::read_dir(certs.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    let mut expected = vec![two.registry(), two.stall_proxy()];
    expected.sort();
    assert_eq!(written, expected);

    let in_one = one.run_sandbox("api", "kube-system", "uid-one", 0);
    let in_two = two.run_sandbox("api", "kube-system", "uid-two", 0);
    assert_eq!(
        one.sandboxes().iter().map(|s| &s.id).collect::<Vec<_>>(),
        [&in_one]
    );
    assert_eq!(
        two.sandboxes().iter().map(|s| &s.id).collect::<Vec<_>>(),
        [&in_two]
    );

    // docker.io mirrored to the registry, as mirror-gate writes it; no upstream
    // is reachable, so the pull succeeds only through the mirror.
    let image = "docker.io/library/pause:3.9";
    assert!(!two.image_present(image));
    std::fs::create_dir_all(certs.path().join("docker.io")).unwrap();
    std::fs::write(
        certs.path().join("docker.io/hosts.toml"),
        format!(
            "server = \"https://registry-1.docker.io\"\n\n[host.\"{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            two.registry_endpoint()
        ),
    )
    .unwrap();
    two.pull(image)
        .unwrap_or_else(|e| panic!("pull {image}: {e}"));
    assert!(two.image_present(image));
    let log = two.registry_log();
    assert!(
        log.contains("/v2/library/pause/manifests/3.9?ns=docker.io"),
        "no mirrored request in the registry's log:\n{log}"
    );

    // Stopping one leaves the other and its sandbox running.
    let processes_one = one.processes();
    drop(one);
    assert_eq!(processes_one.list(), Vec::<String>::new());
    let sandboxes = two.sandboxes();
    assert_eq!(sandboxes.len(), 1);
    assert_eq!(sandboxes[0].state, SandboxState::Ready);
    assert!(
        two.processes()
            .list()
            .iter()
            .any(|p| p.ends_with(": /pause"))
    );
    let processes_two = two.processes();
    drop(two);
    assert_eq!(processes_two.list(), Vec::<String>::new());
    assert_eq!(processes_two.mounts(), Vec::<String>::new());
    // The test's certs.d is the test's again: the peer removed its own hosts.toml
    // and left docker.io's in place.
    let left: Vec<String> = std::fs::read_dir(certs.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["docker.io"]);
    assert!(certs.path().join("docker.io/hosts.toml").exists());
}
