//! The fleet as nodes run it: fleet members of the release `tend` library,
//! many in this process, each a node talking real HTTP to the project's
//! Kubernetes API fake (tests/peers/kube-apiserver.py, one Python process)
//! with the RBAC `tend rbac` renders and a ServiceAccount token, 100 Ready
//! Nodes seeded. Measured: API requests a node makes at steady state (no
//! ticket wanted), ticket acquire latency p50/p99 with 50 nodes contending
//! for a 5 % budget, and the time and memory to read and add up 1,000 nodes'
//! published revision reports (what `tend rollout status` and a rollout's
//! verdict read); the rollout leader's poll judging 1,000 nodes (time, CPU,
//! memory); how long an abort takes to reach 100 nodes watching the rollout
//! Lease, and what those watches ask of the API server meanwhile. Needs the
//! venv (`cargo xtask test` or `cargo xtask demo` makes it).
//!
//!   cargo bench -p tend --bench fleet

use std::sync::Arc;
use std::time::{Duration, Instant};
use tend::config::Config;
use tend::fleet::Fleet;
use tend::fleet::kube::KubeFleet;
use tend::fleet::revision::{Running, tally};
use tend::fleet::settings::FleetSettings;
use tend::fleet::store::FleetStore;
use tend_e2e::{KubeApi, Sandbox};

const NAMESPACE: &str = "tend-system";
const NODES: usize = 100;
/// Renewals in the steady-state measurement, `RENEW_S` apart.
const RENEW_S: u64 = 3;
const RENEWALS: u64 = 10;
/// Nodes contending for tickets, and for how long.
const CONTENDERS: usize = 50;
const CONTENTION: Duration = Duration::from_secs(60);
/// Node Leases whose reports are read and added up.
const REPORTERS: usize = 1000;

fn host(api: &KubeApi, sandbox: &Sandbox) -> String {
    format!(
        "{}[host.leader-election]\nnamespace = \"{NAMESPACE}\"\nname = \"tend-leader\"\n[host.fleet]\nnamespace = \"{NAMESPACE}\"\nliveness = \"30s\"\nrenew-every = \"{RENEW_S}s\"\nretry-every = \"2s\"\npublish-every = \"30s\"\n[host.fleet.classes.runtime-restart]\noperations = [\"files.write\"]\nshare = 0.05\n[host.fleet.classes.runtime-restart.settle]\nready-for = \"200ms\"\n[host.fleet.rollout]\n",
        api.host_kube(sandbox)
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// This process's peak RSS so far (KiB).
fn peak_rss_kib() -> u64 {
    tend_e2e::peak_rss_kib(std::process::id())
}

/// Fleet members n0.. of `count` nodes, each renewing and settling until
/// dropped.
struct Members(Vec<(Arc<Fleet>, tokio::task::JoinHandle<()>)>);

impl Members {
    fn start(
        settings: &FleetSettings,
        kubeconfig: &Option<std::path::PathBuf>,
        count: usize,
    ) -> Members {
        Members(
            (0..count)
                .map(|i| {
                    let running = Arc::new(Running::default());
                    running.set(Some("r-00000000000000aa".into()));
                    let fleet = tend::fleet::member(
                        &format!("n{i}"),
                        settings.clone(),
                        kubeconfig.clone(),
                        Some(running),
                    );
                    let task = tokio::spawn(fleet.clone().run());
                    (fleet, task)
                })
                .collect(),
        )
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for (_, task) in &self.0 {
            task.abort();
        }
    }
}

async fn steady_state(
    api: &KubeApi,
    settings: &FleetSettings,
    kubeconfig: &Option<std::path::PathBuf>,
) {
    let nodes = 10;
    let running = Members::start(settings, kubeconfig, nodes);
    // Counted from when each has renewed (and published) once.
    let deadline = Instant::now() + Duration::from_secs(30);
    while running
        .0
        .iter()
        .any(|(fleet, _)| fleet.status().renewed == "never")
    {
        assert!(
            Instant::now() < deadline,
            "no first renewal of every member in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    api.reset_requests();
    tokio::time::sleep(Duration::from_secs(RENEW_S * RENEWALS)).await;
    let requests = api.requests();
    drop(running);
    let total = requests["total"].as_u64().unwrap() as f64;
    let per_renewal = total / nodes as f64 / RENEWALS as f64;
    println!(
        "steady state: {per_renewal:.2} requests a node a renewal ({}): {:.1} a node a minute with the default renew-every (30 s)",
        requests["counts"],
        per_renewal * 2.0
    );
}

async fn contention(settings: &FleetSettings, kubeconfig: &Option<std::path::PathBuf>) {
    let members = Members::start(settings, kubeconfig, CONTENDERS);
    let until = Instant::now() + CONTENTION;
    let tasks: Vec<_> = members
        .0
        .iter()
        .map(|(fleet, _)| {
            let fleet = fleet.clone();
            tokio::spawn(async move {
                let mut acquired = vec![];
                let mut refused = vec![];
                // A plugin writing once a second, as the e2e race does.
                while Instant::now() < until {
                    let holding = fleet.status().classes[0].holding;
                    let started = Instant::now();
                    let admitted = fleet.admit("files.write", false).await.is_ok();
                    match (holding, admitted) {
                        (false, true) => acquired.push(started.elapsed()),
                        (_, false) => refused.push(started.elapsed()),
                        (true, true) => {}
                    }
                    // Jittered, so the contenders do not move in lockstep.
                    tokio::time::sleep(Duration::from_millis(1000 + fastrand::u64(..100))).await;
                }
                (acquired, refused)
            })
        })
        .collect();
    let mut acquired = vec![];
    let mut refused = vec![];
    for task in tasks {
        let (a, r) = task.await.unwrap();
        acquired.extend(a);
        refused.extend(r);
    }
    drop(members);
    acquired.sort();
    refused.sort();
    println!(
        "contention ({CONTENDERS} nodes, 5 tickets, {} s): {} tickets acquired, p50 {} / p99 {}; {} refusals, p50 {} / p99 {} (most answered from memory for retry-every)",
        CONTENTION.as_secs(),
        acquired.len(),
        ms(percentile(&acquired, 0.5)),
        ms(percentile(&acquired, 0.99)),
        refused.len(),
        ms(percentile(&refused, 0.5)),
        ms(percentile(&refused, 0.99)),
    );
}

async fn reports(api: &KubeApi, settings: &FleetSettings, kubeconfig: &Option<std::path::PathBuf>) {
    for i in 0..REPORTERS {
        let node = format!("r{i}");
        let report = serde_json::json!({
            "revision": format!("r-{:016x}", i % 3),
            "process": "00ff",
            "counters": {"runs": 1000 + i, "errors": i % 7, "traps": i % 11, "mutations": 40}
        });
        api.plant_node_lease(NAMESPACE, &node, &report.to_string(), true);
    }
    let store = KubeFleet::new(settings, "reader".into(), kubeconfig.clone());
    // The first read also connects.
    store.reports().await.unwrap();
    let before = peak_rss_kib();
    let mut times = vec![];
    let mut last = None;
    for _ in 0..5 {
        let started = Instant::now();
        let read = store.reports().await.unwrap();
        let added = tally(&read);
        times.push(started.elapsed());
        last = Some(added);
    }
    times.sort();
    let added = last.unwrap();
    let counted: u64 = added.revisions.values().map(|r| r.nodes).sum();
    assert!(counted >= REPORTERS as u64, "{added:?}");
    println!(
        "{REPORTERS} reports read and added up ({counted} node Leases with reports): median {} (min {}), peak RSS {} KiB -> {} KiB",
        ms(times[2]),
        ms(times[0]),
        before,
        peak_rss_kib()
    );
}

/// The rollout leader judging `REPORTERS` nodes that all run revision A and
/// ask for B: the first poll starts B's first step, the next ones judge it
/// (every Node and node Lease read, the window's samples compared).
async fn leader(api: &KubeApi, settings: &FleetSettings, kubeconfig: &Option<std::path::PathBuf>) {
    use tend::fleet::rollout_leader::RolloutLeader;
    let (a, b) = ("r-00000000000000aa", "r-00000000000000bb");
    for i in 0..REPORTERS {
        let node = format!("s{i}");
        api.seed_node(&node);
        let report = serde_json::json!({
            "revision": a, "process": "00ff", "desired": b,
            "counters": {"runs": 1000 + i, "errors": i % 7}
        });
        api.plant_node_lease(NAMESPACE, &node, &report.to_string(), true);
    }
    let stable = serde_json::json!({
        "revision": a, "stable": a, "step": 0, "state": "done", "reason": "planted"
    });
    let lease = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "tend-rollout", "annotations": {"tend.dev/rollout": stable.to_string()}},
        "spec": {}
    });
    let (code, body) = api.call(
        "POST",
        &format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"),
        Some(&lease),
    );
    assert_eq!(code, 201, "{body}");
    let store = KubeFleet::new(settings, "leader".into(), kubeconfig.clone());
    let rollout = settings.rollout.clone().expect("[host.fleet.rollout]");
    let mut leader = RolloutLeader::new(rollout.rules, rollout.steps);
    let started = leader
        .poll(&store, tokio::time::Instant::now())
        .await
        .unwrap();
    let state = started.rollout.as_ref().map(|r| r.state);
    assert_eq!(
        state,
        Some(tend::fleet::rollout::State::Rolling),
        "{started:?}"
    );
    let me = std::process::id();
    tend_e2e::reset_peak_rss(me);
    let rss = peak_rss_kib();
    let ticks = tend_e2e::cpu_ticks(me);
    let mut times = vec![];
    for _ in 0..5 {
        let began = Instant::now();
        leader
            .poll(&store, tokio::time::Instant::now())
            .await
            .unwrap();
        times.push(began.elapsed());
    }
    let cpu_ms = (tend_e2e::cpu_ticks(me) - ticks) * 10 / 5;
    times.sort();
    println!(
        "the rollout leader judging {REPORTERS} nodes ({} Nodes, {} node Leases read each poll): median {} a poll (min {}), {cpu_ms} ms of CPU a poll in this process (the client's side), peak RSS {rss} KiB -> {} KiB",
        NODES + REPORTERS,
        2 * REPORTERS + 50,
        ms(times[2]),
        ms(times[0]),
        peak_rss_kib()
    );
}

/// `WATCHERS` nodes watch the rollout Lease; an abort is written; how long
/// until every one has it, and how many requests the watches made over a
/// quiet half minute before.
async fn abort_reaches_watchers(
    api: &KubeApi,
    settings: &FleetSettings,
    kubeconfig: &Option<std::path::PathBuf>,
) {
    use futures_util::StreamExt;
    const WATCHERS: usize = 100;
    const QUIET: Duration = Duration::from_secs(30);
    let mut streams = vec![];
    for i in 0..WATCHERS {
        let store = KubeFleet::new(settings, format!("w{i}"), kubeconfig.clone());
        let mut changes = store.rollout_changes().await.unwrap().boxed();
        // The listing first: the rollout as it is.
        changes.next().await.unwrap().unwrap();
        streams.push(changes);
    }
    api.reset_requests();
    tokio::time::sleep(QUIET).await;
    let quiet = api.requests()["total"].as_u64().unwrap();
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/tend-rollout");
    let (_, mut lease) = api.call("GET", &path, None);
    let text = lease["metadata"]["annotations"]["tend.dev/rollout"]
        .as_str()
        .unwrap()
        .to_string();
    let mut rollout: serde_json::Value = serde_json::from_str(&text).unwrap();
    rollout["state"] = "failed".into();
    rollout["cuts"] = serde_json::json!({});
    lease["metadata"]["annotations"]["tend.dev/rollout"] = rollout.to_string().into();
    let written = Instant::now();
    let (code, body) = api.call("PUT", &path, Some(&lease));
    assert_eq!(code, 200, "{body}");
    let mut arrived = vec![];
    for stream in &mut streams {
        loop {
            let text = stream.next().await.unwrap().unwrap().unwrap_or_default();
            if text.contains("\"failed\"") {
                arrived.push(written.elapsed());
                break;
            }
        }
    }
    arrived.sort();
    println!(
        "an abort reaches {WATCHERS} nodes watching the rollout Lease: p50 {} / last {}; the watches made {quiet} requests in a quiet {} s ({:.2} a node a minute)",
        ms(percentile(&arrived, 0.5)),
        ms(arrived[WATCHERS - 1]),
        QUIET.as_secs(),
        quiet as f64 / WATCHERS as f64 * 60.0 / QUIET.as_secs_f64()
    );
}

fn main() {
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("TEND_BIN", env!("CARGO_BIN_EXE_tend")) };
    let api = KubeApi::start();
    for i in 0..NODES {
        api.seed_node(&format!("n{i}"));
    }
    let sandbox = Sandbox::new();
    sandbox.config_on_node("n0", &host(&api, &sandbox), "");
    api.grant_rbac(&sandbox);
    let config = Config::load(&sandbox.path("tend.toml")).unwrap();
    let settings = config.host.fleet.clone().expect("[host.fleet]");
    let kubeconfig = config.host.capabilities.kube.kubeconfig.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        steady_state(&api, &settings, &kubeconfig).await;
        contention(&settings, &kubeconfig).await;
        reports(&api, &settings, &kubeconfig).await;
        leader(&api, &settings, &kubeconfig).await;
        abort_reaches_watchers(&api, &settings, &kubeconfig).await;
    });
}
