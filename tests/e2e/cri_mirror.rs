//! mirror-gate in front of a real containerd: the real `tend`, the real
//! mirror-gate plugin, containerd 1.6's CRI (tests/peers/containerd.sh) whose
//! `registry.config_path` is the certs.d mirror-gate manages, a pull-through
//! registry cache (tests/peers/registry.sh), and iptables making the cache's
//! host go dark (every packet dropped) or refuse new connections (SYNs
//! dropped). Needs root, and fails without it (CI runs as root).
//!
//! Timings are printed (`cargo test ... -- --nocapture`) as they are measured.

use std::path::Path;
use std::time::{Duration, Instant};
use tend_e2e::*;

/// The mirrored image: served by the peer's registry as `library/pause:3.9`.
const IMAGE: &str = "docker.io/library/pause:3.9";
/// The fast settings of these tests (defaults: 10 s, 30 s, 5 s, 2 s).
const WITHDRAW_AFTER: Duration = Duration::from_millis(2000);
const RESTORE_AFTER: Duration = Duration::from_millis(4000);
const PENDING_REQUEUE: Duration = Duration::from_millis(500);
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// mirror-gate's interval; also the host's min-requeue, which bounds PENDING_REQUEUE.
const INTERVAL: Duration = Duration::from_secs(1);
/// What a loaded 2-core CI machine adds to any deadline here.
const SLACK: Duration = Duration::from_secs(2);
/// containerd 1.6 dials a registry host for up to 30 s before it tries the next.
const CONTAINERD_DIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// The value of the sample of `name` whose labels include every `key="value"`.
fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// mirror-gate's metric for docker.io's cache, from tend's `/metrics`.
fn docker_io_metric(port: u16, name: &str) -> Option<f64> {
    let (status, text) = http_get(port, "/metrics").unwrap();
    assert_eq!(status, 200, "{text}");
    metric(
        &text,
        name,
        &[("plugin", "mirror-gate"), ("cache", "docker.io")],
    )
}

const WITHDRAWN_GAUGE: &str = "tend_plugin_cache_withdrawn";
const WITHDRAWN_SECONDS: &str = "tend_plugin_cache_withdrawn_seconds_total";

/// The `[plugins.mirror-gate]` section: one cache per (upstream, endpoint),
/// the test's timings, `extra` lines in its config.
fn mirror_gate(certs: &Path, caches: &[(&str, &str)], interval: &str, extra: &str) -> String {
    let certs = certs.display();
    let mut text = format!(
        "[plugins.mirror-gate]\ninterval = \"{interval}\"\n[plugins.mirror-gate.grants]\nfiles = [{{ path = \"{certs}\", write = true }}]\nhttp = [\"http://127.0.0.1:*/*\"]\n[plugins.mirror-gate.config]\ncerts-dir = \"{certs}\"\nwithdraw-after-ms = {}\nrestore-after-ms = {}\n{extra}",
        WITHDRAW_AFTER.as_millis(),
        RESTORE_AFTER.as_millis(),
    );
    for (upstream, endpoint) in caches {
        text += &format!(
            "[[plugins.mirror-gate.config.caches]]\nupstream = \"{upstream}\"\nendpoint = \"{endpoint}\"\n"
        );
    }
    text
}

/// Poll `condition` every 10 ms until it holds; when it first held. Panics
/// after `within`, naming `what`.
fn when(within: Duration, what: &str, mut condition: impl FnMut() -> bool) -> Instant {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Issue tests 1-4 in one life of a node: docker.io is pulled through the cache
/// only once mirror-gate wrote the mirror; the cache's host goes dark (every
/// packet to its port dropped, SYNs and the probe's pooled keep-alive
/// connection alike) and the mirror is withdrawn within withdraw-after, so a pull
/// fails fast instead of waiting out containerd's 30 s dial (a control pull
/// started while the dead mirror was still in place waits); the cache answers
/// again and the mirror comes back after restore-after, not before; `/metrics`
/// shows all of it.
#[test]
fn a_dead_cache_is_withdrawn_so_pulls_do_not_wait_and_returns_after_restore_after() {
    let started = Instant::now();
    let sandbox = Sandbox::new();
    let certs = sandbox.path("certs.d");
    std::fs::create_dir_all(&certs).unwrap();
    let peer = ContainerdPeer::start_with_certs_dir(&certs);
    let cache = Registry::start_pull_through(&peer.registry_endpoint());
    let hosts = certs.join("docker.io/hosts.toml");
    eprintln!("containerd peer and cache up in {:?}", started.elapsed());

    // 1a. No mirror yet: containerd goes to registry-1.docker.io, which this
    // machine cannot reach, and the pull fails, fast.
    assert!(!hosts.exists());
    assert!(!peer.image_present(IMAGE));
    let asked = Instant::now();
    let error = peer
        .pull_within(IMAGE, Duration::from_secs(60))
        .expect_err("docker.io pulled without a mirror: does this machine reach Docker Hub?");
    let unmirrored = asked.elapsed();
    eprintln!("pull without the mirror failed in {unmirrored:?}: {error}");
    assert!(
        unmirrored < Duration::from_secs(10),
        "a pull without the mirror took {unmirrored:?}: {error}"
    );
    assert!(
        !cache.log().contains("/v2/library/pause/"),
        "the cache was asked without a mirror:\n{}",
        cache.log()
    );

    // 1b. mirror-gate writes the mirror because the cache answers; the same
    // pull now succeeds through the cache.
    let port = free_port();
    sandbox
        .add_plugin("mirror-gate", "mirror-gate")
        .config_with_host(
            &format!("listen = \"127.0.0.1:{port}\""),
            &mirror_gate(
                &certs,
                &[("docker.io", &cache.endpoint())],
                &humantime::format_duration(INTERVAL).to_string(),
                &format!(
                    "pending-requeue-ms = {}\nprobe-timeout-ms = {}\n",
                    PENDING_REQUEUE.as_millis(),
                    PROBE_TIMEOUT.as_millis()
                ),
            ),
        );
    let daemon = sandbox.daemon();
    wait_until(
        Duration::from_secs(30),
        "mirror-gate to write docker.io's hosts.toml",
        || hosts.exists(),
    );
    let written = std::fs::read_to_string(&hosts).unwrap();
    assert!(
        written.contains(&format!("[host.\"{}\"]", cache.endpoint())),
        "{written}"
    );
    let healthy = format!(
        "1 mirror(s) active; docker.io: mirror via {} (healthy)",
        cache.endpoint()
    );
    wait_for_plugin(port, "mirror-gate", "a healthy outcome", |p| {
        p["last"]["message"] == healthy.as_str() && p["last"]["health"] == "healthy"
    });
    assert_eq!(docker_io_metric(port, WITHDRAWN_GAUGE), Some(0.0));
    let asked = Instant::now();
    let image_ref = peer
        .pull(IMAGE)
        .unwrap_or_else(|e| panic!("pull {IMAGE} through the mirror: {e}"));
    eprintln!("pull through the mirror took {:?}", asked.elapsed());
    assert!(image_ref.starts_with("sha256:"), "{image_ref}");
    assert!(peer.image_present(IMAGE));
    let log = cache.log();
    let mirrored = |what: &str| {
        log.lines()
            .any(|l| l.contains(what) && l.contains("?ns=docker.io ") && l.contains("containerd/"))
    };
    assert!(
        mirrored("/v2/library/pause/manifests/3.9?") && mirrored("/v2/library/pause/blobs/sha256:"),
        "containerd's mirrored requests are not in the cache's log:\n{log}"
    );
    assert!(
        peer.registry_log()
            .contains("/v2/library/pause/manifests/3.9"),
        "the cache did not fetch from its remote:\n{}",
        peer.registry_log()
    );

    // 2. The cache's host goes dark: every packet dropped. A control pull starts
    // at once, while the mirror is still in place; mirror-gate withdraws the
    // mirror within withdraw-after (plus one probe), and a pull after that
    // does not wait for containerd's dial timeout. Both pulls really pull.
    // (A host gone dark, not only SYNs dropped: with SYNs alone tend's probe
    // rides its pooled keep-alive connection, which still answers; see
    // a_cache_dropping_syns_is_withdrawn_within_withdraw_after.)
    peer.remove_image(IMAGE);
    assert!(!peer.image_present(IMAGE));
    let control_deadline = Duration::from_secs(12);
    let withdrawal_bound = WITHDRAW_AFTER + INTERVAL + PROBE_TIMEOUT * 2 + SLACK;
    let dropping = drop_packets(cache.port);
    let dropped = Instant::now();
    let (withdrawn, after_withdrawal) = std::thread::scope(|s| {
        let control = s.spawn(|| {
            assert!(hosts.exists(), "withdrawn before the control pull started");
            let asked = Instant::now();
            let result = peer.pull_within(IMAGE, control_deadline);
            (result, asked.elapsed())
        });
        let withdrawn = when(withdrawal_bound, "the mirror's withdrawal", || {
            !hosts.exists()
        });
        eprintln!(
            "mirror withdrawn {:?} after the cache's host went dark (bound {withdrawal_bound:?})",
            withdrawn - dropped
        );
        assert!(
            withdrawn - dropped >= WITHDRAW_AFTER,
            "withdrawn after {:?}, before withdraw-after",
            withdrawn - dropped
        );
        let asked = Instant::now();
        let result = peer.pull_within(IMAGE, CONTAINERD_DIAL_TIMEOUT * 2);
        let after = asked.elapsed();
        eprintln!("pull after the withdrawal returned in {after:?}: {result:?}");
        let (control, waited) = control.join().unwrap();
        eprintln!(
            "control pull with the dead mirror in place: {waited:?} (given up at {control_deadline:?}): {control:?}"
        );
        assert!(
            control.is_err() && waited >= control_deadline,
            "the control pull through the dead mirror returned in {waited:?}: {control:?}"
        );
        (withdrawn, after)
    });
    // As fast as a pull without any mirror (1a): nothing waits on the dead cache.
    assert!(
        after_withdrawal < unmirrored + SLACK,
        "a pull after the withdrawal took {after_withdrawal:?} (without a mirror: {unmirrored:?}): it waited on the dead mirror"
    );
    assert!(!peer.image_present(IMAGE), "nothing reaches docker.io here");
    let status = wait_for_plugin(port, "mirror-gate", "the withdrawal reported", |p| {
        p["last"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("0 mirror(s) active; docker.io: withdrawn "))
    });
    assert_eq!(status["last"]["health"], "degraded", "{status:#}");
    assert!(
        daemon.count(&["docker.io: mirror withdrawn from"]) == 1,
        "{}",
        daemon.log()
    );
    // 4a. The gauge says withdrawn, and the seconds count up while it is.
    wait_until(Duration::from_secs(5), "the withdrawn gauge at 1", || {
        docker_io_metric(port, WITHDRAWN_GAUGE) == Some(1.0)
    });
    wait_until(INTERVAL * 2 + SLACK, "withdrawn seconds counted", || {
        docker_io_metric(port, WITHDRAWN_SECONDS).is_some_and(|s| s > 0.0)
    });

    // 3. The cache answers again: the mirror stays out while it answers for
    // less than restore-after, and comes back once it has for restore-after.
    dropping.accept_syns();
    let recovered = Instant::now();
    assert!(!hosts.exists(), "restored the moment the cache answered");
    let status = wait_for_plugin(port, "mirror-gate", "the cache seen answering", |p| {
        p["last"]["message"].as_str().is_some_and(|m| {
            m.starts_with("0 mirror(s) active; docker.io: withdrawn ")
                && m.contains(" (answering for ")
                && m.ends_with(", restored after 4s)")
        })
    });
    // The first answer is at most a probe old: restore-after is far off.
    assert!(
        !hosts.exists(),
        "restored at {:?} after recovery, with {status:#}",
        recovered.elapsed()
    );
    let restore_bound = RESTORE_AFTER + INTERVAL + PROBE_TIMEOUT * 2 + SLACK;
    let restored = when(restore_bound, "the mirror's restore", || hosts.exists());
    let restore_latency = restored - recovered;
    eprintln!(
        "mirror restored {restore_latency:?} after the cache answered again (restore-after {RESTORE_AFTER:?}, bound {restore_bound:?})"
    );
    // Half a second: a probe's clock is read as its reconcile starts, a moment
    // before the probe's SYN that the cache answers.
    assert!(
        restore_latency + Duration::from_millis(500) >= RESTORE_AFTER,
        "restored {restore_latency:?} after the cache answered again, before restore-after"
    );
    assert_eq!(std::fs::read_to_string(&hosts).unwrap(), written);
    wait_for_plugin(port, "mirror-gate", "the healthy outcome again", |p| {
        p["last"]["message"] == healthy.as_str()
    });

    // 4b. The gauge is back at 0; the counter holds the time it was withdrawn.
    wait_until(Duration::from_secs(5), "the withdrawn gauge at 0", || {
        docker_io_metric(port, WITHDRAWN_GAUGE) == Some(0.0)
    });
    let counted = docker_io_metric(port, WITHDRAWN_SECONDS).unwrap();
    let observed = (restored - withdrawn).as_secs_f64();
    eprintln!("withdrawn seconds counted: {counted} (observed withdrawn for {observed:.3} s)");
    assert!(
        (counted - observed).abs() < 2.0,
        "counted {counted} s withdrawn, observed {observed:.3} s"
    );

    // The restored mirror serves pulls again.
    peer.pull(IMAGE)
        .unwrap_or_else(|e| panic!("pull {IMAGE} through the restored mirror: {e}"));
    assert!(daemon.terminate(Duration::from_secs(10)));
    eprintln!("test took {:?}", started.elapsed());
}

/// Issue test 5: five caches probed at once, four behind ports dropping SYNs;
/// one manual reconcile costs one probe timeout, not four.
#[test]
fn five_caches_four_dead_cost_one_probe_timeout() {
    let probe_timeout = Duration::from_millis(2000);
    let live = Registry::start();
    let dead: Vec<SynDrop> = (0..4).map(|_| drop_syns(free_port())).collect();
    let sandbox = Sandbox::new();
    let certs = sandbox.path("certs.d");
    let endpoints: Vec<(String, String)> =
        std::iter::once(("docker.io".to_string(), live.endpoint()))
            .chain(dead.iter().enumerate().map(|(i, d)| {
                (
                    format!("r{i}.example"),
                    format!("http://127.0.0.1:{}", d.port()),
                )
            }))
            .collect();
    let caches: Vec<(&str, &str)> = endpoints
        .iter()
        .map(|(u, e)| (u.as_str(), e.as_str()))
        .collect();
    let port = free_port();
    // Only the startup reconcile and the manual one: no interval, no requeue
    // in between.
    sandbox
        .add_plugin("mirror-gate", "mirror-gate")
        .config_with_host(
            &format!("listen = \"127.0.0.1:{port}\""),
            &mirror_gate(
                &certs,
                &caches,
                "1h",
                &format!(
                    "pending-requeue-ms = 3600000\nprobe-timeout-ms = {}\n",
                    probe_timeout.as_millis()
                ),
            ),
        );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "mirror-gate", "its startup reconcile", |p| {
        p["reconciles"] == 1
    });
    let asked = Instant::now();
    let run = sandbox.tend(&["reconcile", "mirror-gate"]);
    let wall = asked.elapsed();
    assert!(run.success, "{run:?}");
    let first = run.stdout.lines().next().unwrap_or_default();
    // "mirror-gate: progressing: ... (2004 ms, by the tend daemon at ...)"
    let took = first
        .rsplit_once(" (")
        .and_then(|(_, t)| t.split(' ').next()?.parse::<f64>().ok())
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .unwrap_or_else(|| panic!("no time in {first:?}"));
    eprintln!(
        "five caches, four dropping SYNs, probe-timeout {probe_timeout:?}: reconcile {took:?}, `tend reconcile` {wall:?}"
    );
    assert!(
        first.contains(", by the tend daemon at "),
        "not run by the daemon: {first}"
    );
    assert!(
        first.starts_with(&format!(
            "mirror-gate: progressing: 1 mirror(s) active; docker.io: mirror via {} (healthy)",
            live.endpoint()
        )),
        "{first}"
    );
    for (upstream, endpoint) in &caches[1..] {
        let waiting =
            format!("; waiting for {upstream} (GET {endpoint}/v2/: no response within 2s)");
        assert!(first.contains(&waiting), "{waiting} not in {first}");
    }
    let bound = probe_timeout + Duration::from_millis(1500);
    assert!(
        took >= probe_timeout && took < bound,
        "one reconcile took {took:?}: not one probe timeout ({probe_timeout:?}) but {:.1} of them",
        took.as_secs_f64() / probe_timeout.as_secs_f64()
    );
    assert!(wall < bound, "`tend reconcile` took {wall:?}");
    assert!(daemon.terminate(Duration::from_secs(10)));
}

/// Issue test 6: a hosts.toml mirror-gate did not write stays, for a cache that
/// never answered and for one whose mirror mirror-gate wrote, withdrew and
/// found replaced by the operator's; also when that cache leaves the config.
/// Dead here means connection refused: no root needed.
#[test]
fn operators_hosts_toml_for_a_dead_cache_stays() {
    let sandbox = Sandbox::new();
    let certs = sandbox.path("certs.d");
    let dead = format!("http://127.0.0.1:{}", free_port());
    let ghcr = Registry::start();
    let ghcr_endpoint = ghcr.endpoint();
    let docker_hosts = certs.join("docker.io/hosts.toml");
    let ghcr_hosts = certs.join("ghcr.io/hosts.toml");
    let operators = "server = \"https://registry-1.docker.io\"\n\n[host.\"http://10.0.0.9:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n";
    std::fs::create_dir_all(docker_hosts.parent().unwrap()).unwrap();
    std::fs::write(&docker_hosts, operators).unwrap();
    let port = free_port();
    let extra = format!(
        "pending-requeue-ms = {}\nprobe-timeout-ms = {}\n",
        PENDING_REQUEUE.as_millis(),
        PROBE_TIMEOUT.as_millis()
    );
    let configure = |caches: &[(&str, &str)]| {
        sandbox.config_with_host(
            &format!("listen = \"127.0.0.1:{port}\""),
            &mirror_gate(&certs, caches, "1s", &extra),
        );
    };
    sandbox.add_plugin("mirror-gate", "mirror-gate");
    configure(&[("docker.io", &dead), ("ghcr.io", &ghcr_endpoint)]);
    let daemon = sandbox.daemon();
    wait_until(Duration::from_secs(30), "ghcr.io's mirror", || {
        ghcr_hosts.exists()
    });

    // ghcr.io's cache dies; its mirror is withdrawn; the operator puts a file
    // of their own in its place.
    drop(ghcr);
    wait_until(
        WITHDRAW_AFTER + INTERVAL * 3 + SLACK,
        "ghcr.io's mirror withdrawn",
        || !ghcr_hosts.exists(),
    );
    let operators_ghcr = "server = \"https://ghcr.io\"\n";
    std::fs::write(&ghcr_hosts, operators_ghcr).unwrap();
    // Both caches stay dead for longer than withdraw-after: several reconciles.
    let reconciles = plugin_status(port, "mirror-gate")["reconciles"]
        .as_u64()
        .unwrap();
    let waited = Instant::now();
    let status = wait_for_plugin(port, "mirror-gate", "reconciles past withdraw-after", |p| {
        p["reconciles"].as_u64().unwrap() >= reconciles + 3 && waited.elapsed() > WITHDRAW_AFTER
    });
    let message = status["last"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("0 mirror(s) active; waiting for docker.io (GET ")
            && message.contains("; ghcr.io: withdrawn "),
        "{status:#}"
    );
    assert_eq!(std::fs::read_to_string(&docker_hosts).unwrap(), operators);
    assert_eq!(
        std::fs::read_to_string(&ghcr_hosts).unwrap(),
        operators_ghcr
    );

    // ghcr.io leaves the config: what stands there is not mirror-gate's.
    configure(&[("docker.io", &dead)]);
    wait_for_plugin(port, "mirror-gate", "the config without ghcr.io", |p| {
        p["last"]["message"]
            .as_str()
            .is_some_and(|m| !m.contains("ghcr.io"))
    });
    assert_eq!(
        std::fs::read_to_string(&ghcr_hosts).unwrap(),
        operators_ghcr
    );
    assert_eq!(std::fs::read_to_string(&docker_hosts).unwrap(), operators);
    let journal = journal(&sandbox);
    let removals: Vec<_> = journal
        .iter()
        .filter(|e| e["operation"] == "remove")
        .map(|e| e["target"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        removals,
        [ghcr_hosts.to_str().unwrap()],
        "only the withdrawal of mirror-gate's own ghcr.io file"
    );
    assert!(daemon.terminate(Duration::from_secs(10)));
}

/// Issue test 2 as stated: the cache's port drops SYNs while the cache process
/// lives (a firewall that lets established flows through, a listener whose
/// backlog is full): containerd's new connections hang for its 30 s dial
/// timeout, so mirror-gate must withdraw the mirror within withdraw-after
/// (plus one probe), whatever connection tend's HTTP client kept open.
#[test]
fn a_cache_dropping_syns_is_withdrawn_within_withdraw_after() {
    let cache = Registry::start();
    let sandbox = Sandbox::new();
    let certs = sandbox.path("certs.d");
    let hosts = certs.join("docker.io/hosts.toml");
    let port = free_port();
    sandbox
        .add_plugin("mirror-gate", "mirror-gate")
        .config_with_host(
            &format!("listen = \"127.0.0.1:{port}\""),
            &mirror_gate(
                &certs,
                &[("docker.io", &cache.endpoint())],
                &humantime::format_duration(INTERVAL).to_string(),
                &format!(
                    "pending-requeue-ms = {}\nprobe-timeout-ms = {}\n",
                    PENDING_REQUEUE.as_millis(),
                    PROBE_TIMEOUT.as_millis()
                ),
            ),
        );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "mirror-gate", "two healthy probes", |p| {
        p["reconciles"].as_u64() >= Some(2) && p["last"]["health"] == "healthy"
    });
    assert!(hosts.exists());
    let dropping = drop_syns(cache.port);
    let dropped = Instant::now();
    // What containerd meets: a new connection does not get through.
    let refused = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], cache.port)),
        PROBE_TIMEOUT,
    );
    assert!(refused.is_err(), "connected through the SYN drop");
    let bound = WITHDRAW_AFTER + INTERVAL + PROBE_TIMEOUT * 2 + SLACK;
    let deadline = dropped + bound;
    while hosts.exists() {
        assert!(
            Instant::now() < deadline,
            "the mirror of a cache refusing new connections is still in place {bound:?} after its SYNs were dropped; mirror-gate says {:?}; tend's connections to the cache:\n{}",
            plugin_status(port, "mirror-gate")["last"]["message"],
            established(cache.port)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!(
        "mirror withdrawn {:?} after the cache's SYNs were dropped (bound {bound:?})",
        dropped.elapsed()
    );
    drop(dropping);
    assert!(daemon.terminate(Duration::from_secs(10)));
}

/// `ss`'s established TCP connections to or from `port`, with their processes.
fn established(port: u16) -> String {
    let out = std::process::Command::new("ss")
        .args([
            "-tnpH",
            "state",
            "established",
            &format!("( dport = :{port} or sport = :{port} )"),
        ])
        .output();
    match out {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => format!("(ss: {e})"),
    }
}
