//! The CRI plugins end to end: the real `tend`, the real `ipam-sweeper` and
//! `pull-guard` plugins, a real containerd 1.6 with its registry and stalling
//! proxy (tests/peers/containerd.sh, [`ContainerdPeer`]) and, for pull-guard's
//! runtime restart, a real systemd (tests/peers/systemd.sh). Needs root
//! (runc, mounts, cgroups, namespaces), and fails without it (CI runs as root).
//!
//! The peer's sandboxes are hostNetwork: no CNI plugin runs, so nothing
//! allocates them IPs. The tests write host-local's allocation files
//! themselves, byte for byte as host-local's disk store does, naming the ids
//! of real sandboxes: a leaked allocation is exactly such a file whose CNI DEL
//! never came.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tend_e2e::*;

const WITHIN: Duration = Duration::from_secs(30);

/// A sandbox id no runtime knows (64 hex digits, as containerd's are).
const UNKNOWN: &str = "0badc0ffee0ddf00d0badc0ffee0ddf00d0badc0ffee0ddf00d0badc0ffee0dd";

/// One host-local network directory, `<networks-dir>/<name>/`, as host-local's
/// disk store keeps it: one file per allocated IP, named after the IP, holding
/// `<container id>\r\n<ifname>`; its `lock`; `last_reserved_ip.0`.
struct Network {
    name: String,
    dir: PathBuf,
}

impl Network {
    fn new(networks_dir: &Path, name: &str) -> Network {
        let dir = networks_dir.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("lock"), "").unwrap();
        Network {
            name: name.into(),
            dir,
        }
    }

    /// What host-local's Reserve writes when it hands `ip` to `sandbox`.
    fn allocate(&self, ip: &str, sandbox: &str) {
        std::fs::write(self.path(ip), format!("{sandbox}\r\neth0")).unwrap();
        std::fs::write(self.dir.join("last_reserved_ip.0"), ip).unwrap();
    }

    fn path(&self, ip: &str) -> PathBuf {
        self.dir.join(ip)
    }

    fn holds(&self, ip: &str) -> bool {
        self.path(ip).exists()
    }

    /// host-local's own files (every name that is not an IP), with their
    /// contents and modification times: no sweeper may touch them.
    fn bookkeeping(&self) -> Vec<(String, Vec<u8>, SystemTime)> {
        let mut files: Vec<_> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .parse::<std::net::IpAddr>()
                    .is_err()
            })
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                    e.metadata().unwrap().modified().unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    }

    /// "10.85.0.7 (cbr0, sandbox 4f1c2a9b8d3e gone)", as the sweeper names an orphan.
    fn orphan(&self, ip: &str, sandbox: &str, why: &str) -> String {
        format!("{ip} ({}, sandbox {} {why})", self.name, &sandbox[..12])
    }
}

/// tend.toml with ipam-sweeper: `listen` on `port` (None: no daemon), the CRI
/// at `endpoint`, `grants` (lines of its grants table), `grace`, `interval`.
fn sweeper(
    sandbox: &Sandbox,
    port: Option<u16>,
    endpoint: &str,
    grants: &str,
    networks_dir: &Path,
    grace: &str,
    interval: &str,
) {
    let listen = port.map_or(String::new(), |p| format!("listen = \"127.0.0.1:{p}\"\n"));
    sandbox
        .add_plugin("ipam-sweeper", "ipam-sweeper")
        .config_with_host(
            &format!("{listen}[host.cri]\nendpoint = \"{endpoint}\""),
            &format!(
                "[plugins.ipam-sweeper]\ninterval = \"{interval}\"\n[plugins.ipam-sweeper.grants]\n{grants}\n[plugins.ipam-sweeper.config]\nnetworks-dir = \"{}\"\ngrace = \"{grace}\"\n",
                networks_dir.display()
            ),
        );
}

/// What ipam-sweeper needs: its networks dir writable, CRI reads.
fn sweeper_grants(networks_dir: &Path) -> String {
    format!(
        "files = [{{ path = \"{}\", write = true }}]\ncri = {{ read = true }}",
        networks_dir.display()
    )
}

fn message(status: &serde_json::Value) -> String {
    status["last"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Wait until `name` has run at least `n` reconciles; its /status entry.
fn after_passes(port: u16, name: &str, n: u64) -> serde_json::Value {
    wait_for_plugin(port, name, &format!("{n} reconciles"), |p| {
        p["reconciles"].as_u64() >= Some(n)
    })
}

/// The files `tend journal` shows as really removed (not planned, not refused).
fn removed(sandbox: &Sandbox) -> Vec<serde_json::Value> {
    journal(sandbox)
        .into_iter()
        .filter(|e| e["capability"] == "files" && e["operation"] == "remove")
        .filter(|e| e["dry_run"] == false && e["result"] == "ok")
        .collect()
}

#[test]
fn ipam_sweeper_releases_the_ips_of_dead_and_unknown_sandboxes_after_the_grace() {
    let peer = ContainerdPeer::start();
    let sandbox = Sandbox::new();
    let port = free_port();
    // One pod whose first sandbox died: the kubelet made attempt 1, and attempt
    // 0's IP leaked (its CNI DEL never came).
    let uid = "2a7e5c1d-0b4f-4e8a-9c61-5d3f7b9e1a01";
    let old = peer.run_sandbox("web", "default", uid, 0);
    peer.stop_sandbox(&old);
    let new = peer.run_sandbox("web", "default", uid, 1);
    let states: Vec<_> = peer
        .sandboxes()
        .into_iter()
        .map(|s| (s.id, s.state))
        .collect();
    assert_eq!(
        states,
        [
            (old.clone(), SandboxState::NotReady),
            (new.clone(), SandboxState::Ready)
        ]
    );
    let networks = sandbox.path("networks");
    let net = Network::new(&networks, "cbr0");
    net.allocate("10.85.0.2", &old);
    net.allocate("10.85.0.3", &new);
    // And an IP whose sandbox the runtime never heard of (gone long ago).
    net.allocate("10.85.0.4", UNKNOWN);
    let bookkeeping = net.bookkeeping();
    assert_eq!(bookkeeping.len(), 2, "{bookkeeping:?}");
    sweeper(
        &sandbox,
        Some(port),
        peer.endpoint(),
        &sweeper_grants(&networks),
        &networks,
        "2s",
        "1h",
    );
    let daemon = sandbox.daemon();

    // The first pass sees both orphans and only starts their grace.
    let first = wait_for_plugin(port, "ipam-sweeper", "its first pass", |p| {
        p["reconciles"] == 1
    });
    let (at_first_pass, first_ms) = (
        ["10.85.0.2", "10.85.0.3", "10.85.0.4"].map(|ip| net.holds(ip)),
        epoch_ms(first["last"]["time"].as_str().unwrap()),
    );
    let text = message(&first);
    assert!(
        text.starts_with(
            "3 allocation(s) in 1 network(s), 2 sandbox(es); 2 orphaned IP(s) waiting out the 2s grace: "
        ),
        "{text}"
    );
    assert!(
        text.contains(&net.orphan("10.85.0.2", &old, "not ready")),
        "{text}"
    );
    assert!(
        text.contains(&net.orphan("10.85.0.4", UNKNOWN, "gone")),
        "{text}"
    );
    assert!(!text.contains("10.85.0.3"), "{text}");
    assert_eq!(first["last"]["health"], "progressing");
    assert_eq!(
        at_first_pass, [true; 3],
        "nothing released at the first pass"
    );

    // The sweeper asked to run again when the grace ends: both are released
    // then, the READY sandbox's IP is kept.
    wait_until(WITHIN, "the two orphans released", || {
        !net.holds("10.85.0.2") && !net.holds("10.85.0.4")
    });
    let second = wait_for_plugin(port, "ipam-sweeper", "its second pass", |p| {
        p["reconciles"] == 2
    });
    let text = message(&second);
    assert!(text.contains("released 2 IP(s): "), "{text}");
    assert!(
        text.contains(&net.orphan("10.85.0.2", &old, "not ready")),
        "{text}"
    );
    assert!(
        text.contains(&net.orphan("10.85.0.4", UNKNOWN, "gone")),
        "{text}"
    );
    assert_eq!(second["last"]["triggers"][0], "requeue");
    assert_eq!(second["last"]["health"], "healthy");
    assert!(
        net.holds("10.85.0.3"),
        "the READY sandbox's IP was released"
    );
    assert_eq!(
        net.bookkeeping(),
        bookkeeping,
        "host-local's lock or last_reserved_ip.0 touched"
    );

    // Through the gate: journaled as files.remove, and not before the grace.
    let removals = removed(&sandbox);
    let mut targets: Vec<&str> = removals
        .iter()
        .map(|e| e["target"].as_str().unwrap())
        .collect();
    targets.sort();
    let expected = [net.path("10.85.0.2"), net.path("10.85.0.4")];
    assert_eq!(
        targets,
        expected
            .iter()
            .map(|p| p.to_str().unwrap())
            .collect::<Vec<_>>()
    );
    // The orphans were first seen during the first pass, which ended at first_ms.
    let first_elapsed = first["last"]["elapsed_ms"].as_f64().unwrap() as i64;
    for removal in &removals {
        let after = removal["time_ms"].as_i64().unwrap() + first_elapsed - first_ms as i64;
        assert!(
            after >= 2000,
            "released {after} ms after the orphan was first seen: {removal}"
        );
        eprintln!(
            "released {} about {after} ms after first seen",
            removal["target"]
        );
    }

    // A pass now finds only the kept allocation and changes nothing.
    let out = sandbox.tend(&["reconcile", "ipam-sweeper"]);
    assert!(
        out.stdout
            .contains("ipam-sweeper: healthy: 1 allocation(s) in 1 network(s), 2 sandbox(es) ("),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains("no changes"), "{}", out.stdout);
    assert_eq!(removed(&sandbox).len(), 2);
    assert!(daemon.terminate(Duration::from_secs(10)));
}

#[test]
fn ipam_sweeper_releases_nothing_while_the_runtime_cannot_be_listed() {
    let peer = ContainerdPeer::start();
    let sandbox = Sandbox::new();
    let port = free_port();
    let live = peer.run_sandbox("api", "default", "7c0d3e55-1f2a-4b9e-8d47-6a5b4c3d2e01", 0);
    let networks = sandbox.path("networks");
    let net = Network::new(&networks, "cbr0");
    net.allocate("10.85.0.2", &live);
    net.allocate("10.85.0.3", UNKNOWN);
    // A socket file nobody listens on: the runtime is down.
    let down = sandbox.path("down.sock");
    drop(std::os::unix::net::UnixListener::bind(&down).unwrap());
    let down_endpoint = format!("unix://{}", down.display());
    sweeper(
        &sandbox,
        Some(port),
        &down_endpoint,
        &sweeper_grants(&networks),
        &networks,
        "1s",
        "1s",
    );
    let daemon = sandbox.daemon();
    // Passes spanning three graces: an empty answer read as "no pods" would
    // have released both IPs by now.
    let status = after_passes(port, "ipam-sweeper", 4);
    let text = message(&status);
    assert!(
        text.starts_with(&format!(
            "released nothing: listing pod sandboxes failed: unavailable: the container runtime at {down_endpoint} did not answer"
        )),
        "{text}"
    );
    assert!(text.contains("[host.cri] endpoint"), "{text}");
    assert_eq!(status["last"]["health"], "degraded");
    assert!(net.holds("10.85.0.2") && net.holds("10.85.0.3"));
    assert!(journal(&sandbox).is_empty(), "{:?}", journal(&sandbox));
    assert!(daemon.terminate(Duration::from_secs(10)));

    // The same node with the runtime answering: the unknown sandbox's IP goes
    // after its grace, the live one's stays.
    sweeper(
        &sandbox,
        Some(port),
        peer.endpoint(),
        &sweeper_grants(&networks),
        &networks,
        "1s",
        "1s",
    );
    let daemon = sandbox.daemon();
    wait_until(WITHIN, "the unknown sandbox's IP released", || {
        !net.holds("10.85.0.3")
    });
    assert!(net.holds("10.85.0.2"));
    assert_eq!(removed(&sandbox).len(), 1);
    assert!(daemon.terminate(Duration::from_secs(10)));
}

#[test]
fn ipam_sweeper_aborts_when_two_ready_sandboxes_share_a_pod_uid() {
    let peer = ContainerdPeer::start();
    let sandbox = Sandbox::new();
    let port = free_port();
    let uid = "9e8d7c6b-5a49-4382-a1b0-c9d8e7f6a501";
    let a = peer.run_sandbox("db", "default", uid, 0);
    let b = peer.run_sandbox("db", "default", uid, 1);
    let networks = sandbox.path("networks");
    let net = Network::new(&networks, "cbr0");
    net.allocate("10.85.0.2", &a);
    net.allocate("10.85.0.3", &b);
    net.allocate("10.85.0.4", UNKNOWN);
    sweeper(
        &sandbox,
        Some(port),
        peer.endpoint(),
        &sweeper_grants(&networks),
        &networks,
        "1s",
        "1s",
    );
    let daemon = sandbox.daemon();
    // Passes spanning three graces: without the check the unknown sandbox's
    // IP would be gone by now.
    let status = after_passes(port, "ipam-sweeper", 4);
    let text = message(&status);
    let (ab, ba) = (format!("{a}, {b}"), format!("{b}, {a}"));
    let shared = format!("aborted, released nothing: pod uid {uid} has READY sandboxes ");
    assert!(
        text == format!("{shared}{ab}") || text == format!("{shared}{ba}"),
        "{text}"
    );
    assert_eq!(status["last"]["health"], "degraded");
    assert!(
        ["10.85.0.2", "10.85.0.3", "10.85.0.4"]
            .iter()
            .all(|ip| net.holds(ip))
    );
    assert!(journal(&sandbox).is_empty());

    // The second sandbox stops: no longer ambiguous. Its IP and the unknown
    // one's are released after the grace, the READY one's kept.
    peer.stop_sandbox(&b);
    wait_until(
        WITHIN,
        "the orphans released once the pod is unambiguous",
        || !net.holds("10.85.0.3") && !net.holds("10.85.0.4"),
    );
    assert!(net.holds("10.85.0.2"));
    assert_eq!(removed(&sandbox).len(), 2);
    assert!(daemon.terminate(Duration::from_secs(10)));
}

#[test]
fn tend_plan_lists_the_ip_releases_without_doing_them() {
    let peer = ContainerdPeer::start();
    let sandbox = Sandbox::new();
    let gone = peer.run_sandbox("job", "batch", "3b2a1908-7f6e-4d5c-b4a3-928170f6e501", 0);
    peer.remove_sandbox(&gone);
    let live = peer.run_sandbox("api", "default", "4c3b2a19-8f7e-4d6c-a5b4-a39281706f01", 0);
    let networks = sandbox.path("networks");
    let net = Network::new(&networks, "cbr0");
    net.allocate("10.85.0.2", &gone);
    net.allocate("10.85.0.3", &live);
    sweeper(
        &sandbox,
        None,
        peer.endpoint(),
        &sweeper_grants(&networks),
        &networks,
        "2s",
        "1h",
    );
    // A real pass starts the orphan's grace.
    let out = sandbox.tend(&["reconcile", "ipam-sweeper"]);
    assert!(out.success, "{}{}", out.stdout, out.stderr);
    let orphan = net.orphan("10.85.0.2", &gone, "gone");
    assert!(
        out.stdout.contains(&format!(
            "1 orphaned IP(s) waiting out the 2s grace: {orphan}"
        )),
        "{}",
        out.stdout
    );
    // Once it has passed, a plan lists the release and the file removal.
    let mut plan = None;
    wait_until(WITHIN, "a plan that releases the orphan", || {
        let out = sandbox.tend(&["plan", "ipam-sweeper"]);
        let due = out.stdout.contains("would release 1 IP(s)");
        plan = Some(out);
        due
    });
    let plan = plan.unwrap();
    assert!(plan.success, "{}{}", plan.stdout, plan.stderr);
    assert!(
        plan.stdout
            .contains(&format!("would release 1 IP(s): {orphan}")),
        "{}",
        plan.stdout
    );
    let path = net.path("10.85.0.2");
    assert!(
        plan.stdout
            .contains(&format!("would files.remove {}", path.display())),
        "{}",
        plan.stdout
    );
    assert!(!plan.stdout.contains("10.85.0.3"), "{}", plan.stdout);
    assert!(
        net.holds("10.85.0.2") && net.holds("10.85.0.3"),
        "a plan released an IP"
    );
    assert!(removed(&sandbox).is_empty());
    // The journal has the removal as planned only.
    let planned: Vec<_> = journal(&sandbox)
        .into_iter()
        .filter(|e| e["operation"] == "remove" && e["dry_run"] == true)
        .collect();
    assert!(!planned.is_empty(), "the plan was not journaled");
    assert!(
        planned
            .iter()
            .all(|e| e["target"] == path.to_str().unwrap()),
        "{planned:?}"
    );
    // The plan kept nothing of what it did: a second plan plans the same.
    let again = sandbox.tend(&["plan", "ipam-sweeper"]);
    assert!(
        again
            .stdout
            .contains(&format!("would release 1 IP(s): {orphan}")),
        "{}",
        again.stdout
    );
    // And the real pass does it.
    let out = sandbox.tend(&["reconcile", "ipam-sweeper"]);
    assert!(
        out.stdout.contains(&format!("released 1 IP(s): {orphan}")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains(&format!("did files.remove {}", path.display())),
        "{}",
        out.stdout
    );
    assert!(!net.holds("10.85.0.2") && net.holds("10.85.0.3"));
    assert_eq!(removed(&sandbox).len(), 1);
}

/// tend.toml with pull-guard: the CRI at `endpoint`, `extra_host` lines of
/// [host] before it, `grants` and `config` (lines of their tables), a
/// reconcile `timeout`.
fn pull_guard(
    sandbox: &Sandbox,
    extra_host: &str,
    endpoint: &str,
    timeout: &str,
    grants: &str,
    config: &str,
) {
    sandbox
        .add_plugin("pull-guard", "pull-guard")
        .config_with_host(
            &format!("{extra_host}[host.cri]\nendpoint = \"{endpoint}\""),
            &format!(
                "[plugins.pull-guard]\ninterval = \"1h\"\n[plugins.pull-guard.limits]\ntimeout = \"{timeout}\"\n[plugins.pull-guard.grants]\n{grants}\n[plugins.pull-guard.config]\n{config}\n"
            ),
        );
}

const PULL_GRANTS: &str =
    "cri = { read = true, operations = [\"pull-image\"], images = [\"127.0.0.1:*/exp/*\"] }";

/// The journal's CRI pulls (paired: intent time, final result).
fn pulls(sandbox: &Sandbox) -> Vec<serde_json::Value> {
    journal(sandbox)
        .into_iter()
        .filter(|e| e["capability"] == "cri" && e["operation"] == "pull-image")
        .collect()
}

/// The registry's access log lines of containerd's requests containing `what`
/// (the peer pushed its images there with skopeo).
fn containerd_fetches(peer: &ContainerdPeer, what: &str) -> Vec<String> {
    peer.registry_log()
        .lines()
        .filter(|l| l.contains(what) && l.contains("\"containerd/"))
        .map(str::to_string)
        .collect()
}

#[test]
fn ungranted_cri_calls_are_denied_and_say_what_to_grant() {
    let peer = ContainerdPeer::start();
    let sandbox = Sandbox::new();
    let networks = sandbox.path("networks");
    let net = Network::new(&networks, "cbr0");
    net.allocate("10.85.0.4", UNKNOWN);
    let files_only = format!(
        "files = [{{ path = \"{}\", write = true }}]",
        networks.display()
    );
    sweeper(
        &sandbox,
        None,
        peer.endpoint(),
        &files_only,
        &networks,
        "1s",
        "1h",
    );
    let out = sandbox.tend(&["reconcile", "ipam-sweeper"]);
    assert!(
        out.stdout.contains("ipam-sweeper: degraded: released nothing: listing pod sandboxes failed: denied: cri list-pod-sandboxes is not granted: set read = true in [plugins.ipam-sweeper.grants] cri"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert!(net.holds("10.85.0.4"));

    // CRI reads granted, the networks dir read-only: the release is denied,
    // once the grace has passed, and said so.
    let read_only = format!(
        "files = [{{ path = \"{}\" }}]\ncri = {{ read = true }}",
        networks.display()
    );
    sweeper(
        &sandbox,
        None,
        peer.endpoint(),
        &read_only,
        &networks,
        "1s",
        "1h",
    );
    let mut last = String::new();
    wait_until(WITHIN, "the release refused", || {
        last = sandbox.tend(&["reconcile", "ipam-sweeper"]).stdout;
        last.contains("refused: ")
    });
    let orphan = net.orphan("10.85.0.4", UNKNOWN, "gone");
    assert!(last.contains("ipam-sweeper: degraded: "), "{last}");
    assert!(
        last.contains(&format!("refused: {orphan}: denied: ")),
        "{last}"
    );
    assert!(last.contains("set write = true"), "{last}");
    assert!(net.holds("10.85.0.4"));
    assert!(removed(&sandbox).is_empty());

    // pull-guard: an image no `images` pattern covers is not pulled.
    let image = peer.big_image();
    let config = format!("images = [\"{image}\"]\npull-timeout = \"30s\"");
    pull_guard(
        &sandbox,
        "",
        peer.endpoint(),
        "60s",
        "cri = { read = true, operations = [\"pull-image\"], images = [\"127.0.0.1:*/other/*\"] }",
        &config,
    );
    let out = sandbox.tend(&["reconcile", "pull-guard"]);
    assert!(
        out.stdout.contains(&format!(
            "{image} not pulled: denied: no cri images pattern covers {image}: add \"{image}\""
        )),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stdout
            .contains("to images in [plugins.pull-guard.grants] cri"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("pull-guard: degraded: "),
        "{}",
        out.stdout
    );
    // Nor without the pull-image operation.
    pull_guard(
        &sandbox,
        "",
        peer.endpoint(),
        "60s",
        "cri = { read = true, images = [\"127.0.0.1:*/exp/*\"] }",
        &config,
    );
    let out = sandbox.tend(&["reconcile", "pull-guard"]);
    assert!(
        out.stdout.contains(&format!(
            "{image} not pulled: denied: cri pull-image of {image} is not granted: add \"pull-image\" to operations in [plugins.pull-guard.grants] cri"
        )),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert!(!peer.image_present(&image));
    assert_eq!(
        containerd_fetches(&peer, "/v2/exp/big/"),
        Vec::<String>::new()
    );
    // Refused before the gate: nothing journaled.
    assert!(journal(&sandbox).is_empty(), "{:?}", journal(&sandbox));
}

#[test]
fn pull_guard_pre_pulls_an_absent_image_and_says_containerd_1_6_has_no_deadline_setting() {
    let peer = ContainerdPeer::start();
    let sandbox = Sandbox::new();
    let image = peer.big_image();
    assert!(!peer.image_present(&image));
    pull_guard(
        &sandbox,
        "",
        peer.endpoint(),
        "60s",
        PULL_GRANTS,
        &format!("images = [\"{image}\"]\npull-timeout = \"30s\""),
    );
    let out = sandbox.tend(&["reconcile", "pull-guard"]);
    assert!(out.success, "{}{}", out.stdout, out.stderr);
    // runtime-config.version = "auto": the version comes from CRI.
    assert!(
        out.stdout
            .contains("pull-guard: healthy: containerd 1.6.20"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(
            "has no image_pull_progress_timeout setting (it came with 1.7): relying on pre-pulls; images: "
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("{image} pulled in ")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("did cri.pull-image {image}")),
        "{}",
        out.stdout
    );
    assert!(peer.image_present(&image));
    assert!(!containerd_fetches(&peer, "GET /v2/exp/big/blobs/sha256:").is_empty());
    let journaled = pulls(&sandbox);
    assert_eq!(journaled.len(), 1, "{journaled:?}");
    assert!(
        journaled[0]["result"]
            .as_str()
            .unwrap()
            .starts_with("ok sha256:"),
        "{journaled:?}"
    );
    assert_eq!(journaled[0]["detail"], "timeout 30s");

    // Present now: not pulled again.
    let out = sandbox.tend(&["reconcile", "pull-guard"]);
    assert!(
        out.stdout.contains(&format!("images: {image} present")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("no changes"), "{}", out.stdout);
    assert_eq!(pulls(&sandbox).len(), 1);
}

#[test]
fn a_stalled_pull_is_cut_at_the_pull_timeout_and_retried_with_backoff_while_other_plugins_run() {
    let peer = ContainerdPeer::start();
    let sandbox = Sandbox::new();
    let port = free_port();
    // A fresh peer never pulled exp/big: its 4 MB layer is not in the store,
    // so the pull through the proxy hangs on it.
    let image = peer.stalled_big_image();
    assert!(!peer.image_present(&image) && !peer.image_present(&peer.big_image()));
    sandbox.add_plugin("chaos", "ticker");
    pull_guard(
        &sandbox,
        &format!("listen = \"127.0.0.1:{port}\"\n"),
        peer.endpoint(),
        "10s",
        PULL_GRANTS,
        &format!(
            "images = [\"{image}\"]\npull-timeout = \"3s\"\nretry-backoff = {{ initial = \"2s\", max = \"8s\" }}\n[plugins.ticker]\ninterval = \"1s\"\n[plugins.ticker.config]\nmode = \"ok\""
        ),
    );
    let daemon = sandbox.daemon();

    // Three attempts: each failed at the pull's deadline, the wait doubling.
    for (attempt, next) in [(1, "2s"), (2, "4s"), (3, "8s")] {
        let status = wait_for_plugin(port, "pull-guard", &format!("attempt {attempt}"), |p| {
            message(p).contains(&format!("(attempt {attempt}, "))
        });
        let text = message(&status);
        assert!(
            text.contains(&format!(
                "images: {image} failed (attempt {attempt}, next try in {next}: timeout: "
            )),
            "{text}"
        );
        assert_eq!(status["last"]["health"], "degraded");
    }
    assert!(!peer.image_present(&image));
    assert!(
        peer.stall_proxy_log()
            .contains("stall /v2/exp/big/blobs/sha256:")
    );

    // From the journal's own lines: when each pull started and was cut.
    let lines = journal_lines(&sandbox, "pull-guard");
    let time_of = |id: &serde_json::Value, phase: &str| {
        lines
            .iter()
            .find(|l| l["id"] == *id && l["phase"] == phase)
            .map(|l| l["time_ms"].as_u64().unwrap())
    };
    let attempts: Vec<(u64, u64, String)> = lines
        .iter()
        .filter(|l| l["phase"] == "intent" && l["operation"] == "pull-image")
        .filter_map(|l| {
            let result = lines
                .iter()
                .find(|r| r["id"] == l["id"] && r["phase"] == "result")?;
            Some((
                time_of(&l["id"], "intent")?,
                time_of(&l["id"], "result")?,
                result["result"].as_str().unwrap().to_string(),
            ))
        })
        .take(3)
        .collect();
    assert_eq!(attempts.len(), 3, "{lines:#?}");
    let took: Vec<u64> = attempts.iter().map(|(s, e, _)| e - s).collect();
    let waits: Vec<u64> = attempts.windows(2).map(|w| w[1].0 - w[0].1).collect();
    eprintln!("stalled pulls cut after {took:?} ms; retried after {waits:?} ms");
    for (_, _, result) in &attempts {
        assert!(result.starts_with("timeout"), "{result}");
    }
    assert!(
        took.iter().all(|t| (3000..4500).contains(t)),
        "each pull cut at its 3 s deadline: {took:?}"
    );
    assert!(
        (2000..3500).contains(&waits[0]) && (4000..5500).contains(&waits[1]),
        "retried after 2 s, then 4 s: {waits:?}"
    );

    // Meanwhile the other plugin kept its 1 s interval, during every pull.
    let ticks = daemon.times_of(&["plugin=ticker", "healthy"]);
    for (start, end, _) in &attempts {
        let (start, end) = (*start as f64 / 1000.0, *end as f64 / 1000.0);
        let during = ticks.iter().filter(|t| **t > start && **t < end).count();
        assert!(
            during >= 2,
            "{during} ticker runs during a 3 s pull: {ticks:?}"
        );
    }
    let ticker = plugin_status(port, "ticker");
    assert_eq!(ticker["last"]["health"], "healthy");
    assert!(ticker["reconciles"].as_u64().unwrap() >= 12, "{ticker:#}");
    // containerd itself gave the fetch up at the deadline, not only tend.
    wait_until(WITHIN, "the proxy to see the pulls go", || {
        peer.stall_proxy_log().matches("client went away").count() >= 3
    });
    assert!(daemon.terminate(Duration::from_secs(20)));
}

/// A long-running unit that counts its starts in `count`: containerd's stand-in.
fn runtime_unit(peer: &SystemdPeer, unit: &str, count: &Path) {
    peer.counting_unit(unit, count);
    peer.manager(&["StartUnit", "ss", unit, "replace"]);
    peer.wait_for_unit(unit, "ActiveState", "active", WITHIN);
}

/// A containerd 1.7 config file (version 2) with the operator's comments.
const RUNTIME_CONFIG: &str = r#"# containerd config, managed by hand
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  image_pull_progress_timeout = "1m0s" # too short for the big images
"#;

#[test]
fn pull_guard_raises_the_progress_deadline_and_restarts_the_runtime_once() {
    let peer = SystemdPeer::start();
    let sandbox = Sandbox::new();
    let port = free_port();
    let unit = "tend-containerd.service";
    let count = sandbox.path("containerd.count");
    runtime_unit(&peer, unit, &count);
    assert_eq!(starts(&count), 1);
    let entered = peer.unit_property(unit, "ActiveEnterTimestamp");
    let etc = sandbox.path("etc/containerd");
    std::fs::create_dir_all(&etc).unwrap();
    let config_path = etc.join("config.toml");
    std::fs::write(&config_path, RUNTIME_CONFIG).unwrap();
    let shown = config_path.display().to_string();
    // No CRI: the version is given, as for a containerd 1.7 (the test's is 1.6).
    let configure = |listen: &str| {
        sandbox
            .add_plugin("pull-guard", "pull-guard")
            .config_with_host(
                &format!("{listen}[host.systemd]\nbus = \"{}\"", peer.bus_address()),
                &format!(
                    "[plugins.pull-guard]\ninterval = \"1s\"\n[plugins.pull-guard.grants]\nfiles = [{{ path = \"{}\", write = true }}]\nsystemd = {{ units = [\"{unit}\"], operations = [\"restart\"] }}\n[plugins.pull-guard.config]\nprogress-timeout = \"10m\"\nruntime-config = {{ path = \"{shown}\", unit = \"{unit}\", version = \"1.7\" }}\n",
                    etc.display()
                ),
            );
    };
    configure("");

    // A plan shows the edit (as a diff) and the restart, and does neither.
    let plan = sandbox.tend(&["plan", "pull-guard"]);
    assert!(plan.success, "{}{}", plan.stdout, plan.stderr);
    assert!(
        plan.stdout.contains(&format!(
            "would raise image_pull_progress_timeout from 1m0s to 10m0s in {shown}; would restart {unit}"
        )),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains(&format!("would files.write {shown}")),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout
            .contains("-  image_pull_progress_timeout = \"1m0s\" # too short for the big images"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout
            .contains("+  image_pull_progress_timeout = \"10m0s\" # too short for the big images"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout
            .contains(&format!("would systemd.restart {unit}")),
        "{}",
        plan.stdout
    );
    assert_eq!(
        std::fs::read_to_string(&config_path).unwrap(),
        RUNTIME_CONFIG
    );
    assert_eq!(starts(&count), 1, "a plan restarted the runtime");
    assert_eq!(peer.unit_property(unit, "ActiveEnterTimestamp"), entered);

    // The daemon raises it at once and restarts the runtime, once.
    configure(&format!("listen = \"127.0.0.1:{port}\"\n"));
    let daemon = sandbox.daemon();
    let first = wait_for_plugin(port, "pull-guard", "its first reconcile", |p| {
        p["reconciles"] == 1
    });
    assert_eq!(
        message(&first),
        format!(
            "raised image_pull_progress_timeout from 1m0s to 10m0s in {shown}; restarted {unit}"
        )
    );
    assert_eq!(first["last"]["health"], "healthy");
    peer.wait_for_unit(unit, "ActiveState", "active", WITHIN);
    assert_eq!(starts(&count), 2);
    assert_ne!(peer.unit_property(unit, "ActiveEnterTimestamp"), entered);
    // Only the value changed: the comments, the layout and the rest stay.
    assert_eq!(
        std::fs::read_to_string(&config_path).unwrap(),
        RUNTIME_CONFIG.replace("\"1m0s\"", "\"10m0s\"")
    );

    // Later reconciles (1 s interval) find it right and restart nothing.
    let later = after_passes(port, "pull-guard", 4);
    assert_eq!(
        message(&later),
        format!("image_pull_progress_timeout = \"10m0s\" in {shown} is at least 10m")
    );
    assert!(later["last"]["mutations"].as_array().unwrap().is_empty());
    assert_eq!(starts(&count), 2, "restarted more than once");
    let (done, planned): (Vec<_>, Vec<_>) = journal(&sandbox)
        .into_iter()
        .partition(|e| e["dry_run"] == false);
    // The plan's edit and restart are in the journal as planned, nothing more.
    let planned: Vec<(&str, &str)> = planned
        .iter()
        .map(|e| {
            (
                e["capability"].as_str().unwrap(),
                e["operation"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(planned, [("files", "write"), ("systemd", "restart")]);
    let restarts: Vec<_> = done
        .iter()
        .filter(|e| e["capability"] == "systemd")
        .collect();
    assert_eq!(restarts.len(), 1, "{done:?}");
    assert_eq!(restarts[0]["operation"], "restart");
    assert_eq!(restarts[0]["target"], unit);
    assert_eq!(restarts[0]["result"], "ok");
    let writes: Vec<_> = done.iter().filter(|e| e["capability"] == "files").collect();
    assert_eq!(writes.len(), 1, "{done:?}");
    assert!(daemon.terminate(Duration::from_secs(10)));
}
