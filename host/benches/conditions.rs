//! NodeConditions as operators run them: the release `tend`, the real
//! problem-detector (and chaos, holding one condition), a kernel log file in
//! the `/dev/kmsg` record format, and the project's Kubernetes API fake (its
//! watch shows when a condition is visible). Line written -> condition visible
//! in the API (p50, p99); API writes a node an hour at steady state and under
//! a storm of matching lines; RSS with problem-detector and every built-in
//! plugin loaded. Needs `cargo xtask plugins` and the venv (`cargo xtask test`
//! or `cargo xtask demo` makes it).
//!
//!   cargo bench -p tend --bench conditions

#[allow(dead_code)]
mod landing;
use landing::{settle, start_with_host};
use std::time::{Duration, Instant};
use tend_e2e::{KubeApi, Sandbox, append_kmsg, node_condition, rss_kib, time_until};

const NODE: &str = "e2e-node";
/// The heartbeat of the measured daemon: short, so an hour is measured in
/// seconds and scaled (writes a heartbeat times heartbeats an hour).
const HEARTBEAT_S: u64 = 2;
/// The built-in plugins besides problem-detector, loaded (compiled, instantiated
/// for their reconciles) with an empty config.
const BUILT_INS: [&str; 7] = [
    "mirror-gate",
    "unit-doctor",
    "unit-applier",
    "ipam-sweeper",
    "pull-guard",
    "node-reaper",
    "secgroup-guard",
];

/// Conditions the latency is measured on, one a line: each line's condition
/// goes from unreported to True, a status change written at once (one
/// condition flipping back and forth would meet its 10 s change gap).
const PROBES: u32 = 24;

fn plugins() -> String {
    let probes: Vec<String> = (0..PROBES).map(|i| format!("\"Probe{i}\"")).collect();
    let mut text = format!(
        r#"[plugins.problem-detector]
interval = "24h"
[plugins.problem-detector.grants]
conditions = [{{ condition = "KernelDeadlock", taint-on = {{ effect = "NoSchedule" }} }}, {}]
kube = [{{ resource = "nodes", verbs = ["get"], names = ["$NODE"] }}]
[plugins.problem-detector.grants.logs]
kernel = true
[[plugins.problem-detector.grants.logs.watch]]
rule = "task-hung"
source = "kernel"
pattern = 'task storm/[\S ]+:\w+ blocked for more than \w+ seconds\.'
burst = 1000
per-minute = 60000
"#,
        probes.join(", ")
    );
    let mut rules = vec![];
    for i in 0..PROBES {
        text += &format!(
            "[[plugins.problem-detector.grants.logs.watch]]\nrule = \"probe-{i}\"\nsource = \"kernel\"\npattern = 'task probe{i}:\\d+ blocked for more than'\n"
        );
        rules.push(format!(
            "{{ watch = \"probe-{i}\", condition = \"Probe{i}\", reason = \"TaskHung\" }}"
        ));
    }
    text += &format!(
        "[plugins.problem-detector.config]\nextra-rules = [{}]\n",
        rules.join(", ")
    );
    text += r#"[plugins.holder]
interval = "1s"
[plugins.holder.grants]
conditions = ["HolderProblem"]
[plugins.holder.config]
mode = "condition"
op = "set"
condition = "HolderProblem"
reason = "Held"
message = "the same report every second"
"#;
    for name in BUILT_INS {
        text += &format!("[plugins.{name}]\ninterval = \"24h\"\n");
    }
    text
}

fn main() {
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("TEND_BIN", env!("CARGO_BIN_EXE_tend")) };
    let api = KubeApi::start();
    api.seed_node(NODE);
    let sandbox = Sandbox::new();
    let log = sandbox.path("kmsg");
    std::fs::write(
        sandbox.path("boot_id"),
        "0f5e3c7d9a0b4c1d8e2f3a4b5c6d7e8f\n",
    )
    .unwrap();
    std::fs::write(&log, "").unwrap();
    sandbox.add_plugin("problem-detector", "problem-detector");
    sandbox.add_plugin("chaos", "holder");
    for name in BUILT_INS {
        sandbox.add_plugin(name, name);
    }
    let host = format!(
        "[host.logs]\nkernel-path = \"{}\"\nboot-id-path = \"{}\"\n[host.conditions]\nheartbeat = \"{HEARTBEAT_S}s\"\n{}",
        log.display(),
        sandbox.path("boot_id").display(),
        api.host_kube(&sandbox)
    );
    // The RBAC `tend rbac` renders, with a token of its ServiceAccount.
    sandbox.config_with_host(&host, &plugins());
    api.grant_rbac(&sandbox);
    // The first start compiles and caches the plugins; the measured one loads
    // them from the cache, as a node's daemon does after its first start.
    let (filling, port) = start_with_host(&sandbox, &host, &plugins(), "warn");
    for name in BUILT_INS.iter().chain(&["problem-detector", "holder"]) {
        settle(port, name);
    }
    drop(filling);
    let (daemon, port) = start_with_host(&sandbox, &host, &plugins(), "warn");
    for name in BUILT_INS.iter().chain(&["problem-detector", "holder"]) {
        settle(port, name);
    }
    // The follower has started (its cursors saved): a line written before
    // would be the past, which a new rule does not match.
    time_until(Duration::from_secs(30), "the rules' cursors", || {
        std::fs::read_to_string(sandbox.path("state/logs/problem-detector.json")).is_ok()
    });
    let pid = daemon.pid();
    let mut seq = 1;

    println!("== kernel line written -> condition visible in the API (its watch) ==");
    let mut watch = api.watch(&format!(
        "/api/v1/nodes?watch=1&resourceVersion={}",
        api.resource_version()
    ));
    let mut latencies = vec![];
    for i in 0..PROBES {
        let written = Instant::now();
        seq = append_kmsg(
            &log,
            seq,
            3,
            std::iter::once(format!(
                "INFO: task probe{i}:9 blocked for more than 120 seconds."
            )),
        );
        let kind = format!("Probe{i}");
        watch.until(Duration::from_secs(10), "the condition set", |event| {
            node_condition(&event["object"], &kind).is_some_and(|c| c["status"] == "True")
        });
        latencies.push(written.elapsed());
        std::thread::sleep(Duration::from_millis(200));
    }
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let n = latencies.len();
    println!(
        "p50 {:.1} ms   p99 {:.1} ms   max {:.1} ms   ({n} lines, each its own condition; kmsg file read, match, reconcile, strategic merge patch, the API server's watch event)",
        ms(latencies[n / 2]),
        ms(latencies[n * 99 / 100]),
        ms(latencies[n - 1])
    );

    println!("\n== API writes of the Node at steady state (one condition renewed every second) ==");
    let node_path = format!("/api/v1/nodes/{NODE}");
    let window = Duration::from_secs(30);
    let before = api.writes_to(&node_path);
    std::thread::sleep(window);
    let steady = api.writes_to(&node_path) - before;
    let per_beat = steady as f64 / (window.as_secs() / HEARTBEAT_S) as f64;
    println!(
        "{steady} writes in {}s with a {HEARTBEAT_S}s heartbeat: {per_beat:.2} a heartbeat, so {:.1} an hour with the default 5m heartbeat",
        window.as_secs(),
        per_beat * 12.0
    );

    println!(
        "\n== the same under a storm of matching lines (10 a second, each renewing KernelDeadlock) =="
    );
    let before = api.writes_to(&node_path);
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < window {
        seq = append_kmsg(
            &log,
            seq,
            3,
            std::iter::once(format!(
                "INFO: task storm/{i}:1:9 blocked for more than 120 seconds."
            )),
        );
        i += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let stormy = api.writes_to(&node_path) - before;
    println!(
        "{i} lines: {stormy} writes in {}s ({:.2} a heartbeat; the first is KernelDeadlock's False -> True)",
        window.as_secs(),
        stormy as f64 / (window.as_secs() / HEARTBEAT_S) as f64
    );

    println!(
        "\nRSS with problem-detector, chaos and every built-in plugin loaded: {} KiB",
        rss_kib(pid)
    );
}
