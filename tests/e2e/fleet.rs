//! Fleet disruption budgets end to end: many real `tend` daemons on one
//! machine, each a node of the project's Kubernetes API fake
//! (tests/peers/kube-apiserver.py, held to kubectl in tests/e2e/kube_fake.rs),
//! with the RBAC `tend rbac` renders and a ServiceAccount token. Each runs
//! the real `chaos` plugin rewriting a file every reconcile: a `files.write`
//! the config puts in the class `runtime-restart`, so each write needs the
//! class's ticket. The ledger is watched on the API server itself, every
//! version of it. Clocks are moved with libfaketime (Debian's faketime), the
//! wall clock only: what a skewed or a lying clock does to a real tend.
//! Every wait is on a condition with a deadline. Each tend publishes its
//! revision with its renewals every second here (`publish-every`).

use serde_json::Value;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tend_e2e::{Daemon, KubeApi, KubeWatch, Sandbox, http_get, wait_until};

const NAMESPACE: &str = "tend-system";
const CLASS: &str = "runtime-restart";
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn ledger_path() -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/tend-fleet-{CLASS}")
}

/// How the fleet of a test is set up.
struct Shape {
    share: &'static str,
    min: u32,
    liveness: &'static str,
    renew: &'static str,
    /// How often each agent's plugin runs (and so asks for a ticket).
    interval: &'static str,
    ready_for: &'static str,
    retry: &'static str,
    /// Extra lines of the class (windows).
    class_extra: String,
    /// Extra lines of `[host.fleet]` and of the class's settle check.
    fleet_extra: String,
    settle_extra: String,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            share: "0.0",
            min: 1,
            liveness: "4s",
            renew: "1s",
            interval: "1s",
            ready_for: "1h",
            retry: "300ms",
            class_extra: String::new(),
            fleet_extra: String::new(),
            settle_extra: String::new(),
        }
    }
}

/// One tend: its sandbox, the daemon, its HTTP port.
struct Agent {
    sandbox: Sandbox,
    port: u16,
    daemon: Option<Daemon>,
}

impl Agent {
    /// `/status`, or null while the daemon is not listening yet.
    fn status(&self) -> Value {
        match http_get(self.port, "/status") {
            Ok((200, body)) => serde_json::from_str(&body).unwrap(),
            _ => Value::Null,
        }
    }

    /// This node's class, as `/status` shows it.
    fn class(&self) -> Value {
        self.status()["fleet"]["classes"][0].clone()
    }

    /// Whether the plugin's file has been written (a write was admitted).
    fn wrote(&self) -> bool {
        self.sandbox.path("out/count").exists()
    }

    fn kill(&mut self) {
        let daemon = self.daemon.take().expect("running");
        std::process::Command::new("kill")
            .args(["-9", &daemon.pid().to_string()])
            .status()
            .unwrap();
        drop(daemon);
    }
}

/// The host tables of every agent.
fn host(api: &KubeApi, sandbox: &Sandbox, port: u16, shape: &Shape) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\n{kube}[host.fleet]\nnamespace = \"{NAMESPACE}\"\nliveness = \"{liveness}\"\nrenew-every = \"{renew}\"\npublish-every = \"1s\"\nretry-every = \"{retry}\"\n{fleet_extra}[host.fleet.classes.{CLASS}]\noperations = [\"files.write\"]\nshare = {share}\nmin = {min}\n{extra}[host.fleet.classes.{CLASS}.settle]\nready-for = \"{ready_for}\"\n{settle_extra}",
        kube = api.host_kube(sandbox),
        liveness = shape.liveness,
        renew = shape.renew,
        retry = shape.retry,
        share = shape.share,
        min = shape.min,
        extra = shape.class_extra,
        ready_for = shape.ready_for,
        fleet_extra = shape.fleet_extra,
        settle_extra = shape.settle_extra,
    )
}

/// chaos rewriting a file of its own every `interval`: a `files.write` each
/// run, one disruption a run at most (a holder settles between two).
fn plugin(sandbox: &Sandbox, interval: &str) -> String {
    let out = sandbox.path("out");
    std::fs::create_dir_all(&out).unwrap();
    format!(
        "[plugins.restarter]\nfile = \"plugins/chaos.wasm\"\ninterval = \"{interval}\"\n[plugins.restarter.grants]\nfiles = [{{ path = \"{}\", write = true }}]\n[plugins.restarter.config]\nmode = \"disrupt\"\npath = \"{}/count\"\n",
        out.display(),
        out.display()
    )
}

/// `count` agents n0.. (not started), RBAC granted once and shared.
fn agents(api: &KubeApi, count: usize, shape: &Shape) -> Vec<Agent> {
    let agents: Vec<Agent> = (0..count)
        .map(|i| {
            let sandbox = Sandbox::new();
            sandbox.add_plugin("chaos", "chaos");
            let port = tend_e2e::free_port();
            let node = format!("n{i}");
            sandbox.config_on_node(
                &node,
                &host(api, &sandbox, port, shape),
                &plugin(&sandbox, shape.interval),
            );
            Agent {
                sandbox,
                port,
                daemon: None,
            }
        })
        .collect();
    // One ServiceAccount (tend-node) for all: its kubeconfig is shared.
    api.grant_rbac(&agents[0].sandbox);
    for agent in &agents[1..] {
        std::fs::copy(
            agents[0].sandbox.path("kubeconfig"),
            agent.sandbox.path("kubeconfig"),
        )
        .unwrap();
    }
    agents
}

fn start(agent: &mut Agent, env: &[(&str, &str)]) {
    agent.daemon = Some(agent.sandbox.daemon_with_env(env));
}

/// The environment that moves `tend`'s wall clock (not its monotonic one).
fn faketime(spec: &str) -> Vec<(&'static str, String)> {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install Debian's faketime (.ci/run does)"
    );
    vec![
        ("LD_PRELOAD", LIBFAKETIME.to_string()),
        ("FAKETIME", spec.to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
        ("FAKETIME_NO_CACHE", "1".to_string()),
    ]
}

fn env<'a>(pairs: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    pairs.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// The ledger's holders as the API server has them now.
fn holders(api: &KubeApi) -> Vec<String> {
    let (code, lease) = api.call("GET", &ledger_path(), None);
    if code == 404 {
        return vec![];
    }
    assert_eq!(code, 200, "{lease}");
    ledger_holders(&lease)
}

fn ledger_holders(lease: &Value) -> Vec<String> {
    let text = lease["metadata"]["annotations"]["tend.dev/tickets"]
        .as_str()
        .unwrap_or("{}");
    let ledger: Value = serde_json::from_str(text).unwrap();
    ledger["holders"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| h["node"].as_str().unwrap().to_string())
        .collect()
}

fn seed_nodes(api: &KubeApi, count: usize) {
    for i in 0..count {
        api.seed_node(&format!("n{i}"));
    }
}

fn watch_ledger(api: &KubeApi) -> KubeWatch {
    api.watch(&format!(
        "/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases?watch=true&fieldSelector=metadata.name%3Dtend-fleet-{CLASS}"
    ))
}

#[test]
fn fifty_agents_racing_for_five_percent_of_a_hundred_nodes_never_pass_five_holders() {
    let api = KubeApi::start();
    seed_nodes(&api, 100);
    let shape = Shape {
        share: "0.05",
        ready_for: "200ms",
        // A waiting agent asks again every 4 s (its plugin runs every 2 s)
        // and renews every 5 s: with 45 waiting, a freed ticket is taken
        // within about 100 ms all the same, and the 50 tends and the API
        // server (one Python process) take half a core, not all of one,
        // beside the rest of the suite.
        retry: "4s",
        interval: "2s",
        liveness: "30s",
        renew: "5s",
        ..Shape::default()
    };
    let mut agents = agents(&api, 50, &shape);
    let mut watch = watch_ledger(&api);
    for agent in &mut agents {
        start(agent, &[]);
    }
    // Every version of the ledger, as the API server stored it, until 100
    // grants and 45 agents served: one never served would be starved. (250
    // grants took 130 s, the suite's longest test; the share is full within
    // seconds, so 100 grants race as hard, for less of the suite's time.)
    const GRANTS: usize = 100;
    const SERVED: usize = 45;
    let deadline = Instant::now() + Duration::from_secs(400);
    let mut tickets = BTreeSet::new();
    let mut versions = 0;
    let mut most = 0;
    let served = |agents: &[Agent]| agents.iter().filter(|a| a.wrote()).count();
    while tickets.len() < GRANTS || served(&agents) < SERVED {
        assert!(
            Instant::now() < deadline,
            "{} grants in {versions} ledger versions and {} of 50 agents served before the deadline",
            tickets.len(),
            served(&agents)
        );
        let Some(event) = watch.next(Duration::from_secs(30)) else {
            panic!("no ledger change for 30 s after {} grants", tickets.len());
        };
        let lease = &event["object"];
        let held = ledger_holders(lease);
        versions += 1;
        let distinct: BTreeSet<&String> = held.iter().collect();
        assert_eq!(distinct.len(), held.len(), "a node holds twice: {held:?}");
        assert!(
            held.len() <= 5,
            "version {} has {} holders: {held:?}",
            lease["metadata"]["resourceVersion"],
            held.len()
        );
        most = most.max(held.len());
        let text = lease["metadata"]["annotations"]["tend.dev/tickets"]
            .as_str()
            .unwrap_or("{}");
        let ledger: Value = serde_json::from_str(text).unwrap();
        for holder in ledger["holders"].as_array().into_iter().flatten() {
            tickets.insert(holder["ticket"].as_str().unwrap().to_string());
        }
    }
    // The race was real: the share was full at times.
    assert_eq!(most, 5, "never five holders at once");
}

/// A killed holder's ticket frees only once its node Lease stood still for
/// the liveness window; `clocks` moves each agent's wall clock.
fn killed_holder(clocks: [&str; 2]) {
    let api = KubeApi::start();
    seed_nodes(&api, 10);
    let shape = Shape::default();
    let mut agents = agents(&api, 2, &shape);
    let first = faketime(clocks[0]);
    start(&mut agents[0], &env(&first));
    wait_until(Duration::from_secs(30), "n0 holds the ticket", || {
        holders(&api) == ["n0"] && agents[0].wrote()
    });
    let second = faketime(clocks[1]);
    start(&mut agents[1], &env(&second));
    wait_until(Duration::from_secs(30), "n1 is refused", || {
        agents[1].class()["note"]
            .as_str()
            .is_some_and(|n| n.contains("n0 (holds a ticket)"))
    });
    assert!(!agents[1].wrote());
    agents[0].kill();
    let killed = Instant::now();
    // Liveness is 4 s: n1 saw n0's Lease renewed every second until the kill.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(holders(&api), ["n0"], "freed before the liveness window");
    assert!(!agents[1].wrote());
    wait_until(Duration::from_secs(30), "n1 takes the ticket", || {
        holders(&api) == ["n1"]
    });
    let freed = killed.elapsed();
    assert!(
        freed >= Duration::from_millis(2900),
        "freed {freed:?} after the kill"
    );
    wait_until(Duration::from_secs(10), "n1 writes", || agents[1].wrote());
}

#[test]
fn a_killed_holders_ticket_frees_only_after_the_liveness_window() {
    killed_holder(["+0", "+0"]);
}

#[test]
fn an_hour_of_clock_skew_between_agents_changes_nothing() {
    killed_holder(["+1h", "-1h"]);
}

#[test]
fn without_the_api_server_no_ticket_and_tend_plan_and_status_say_why() {
    let api = KubeApi::start();
    seed_nodes(&api, 10);
    let mut agents = agents(&api, 2, &Shape::default());
    api.outage(600.0, Some("tend/"));
    start(&mut agents[0], &[]);
    wait_until(
        Duration::from_secs(30),
        "n0 refused, failing closed",
        || {
            agents[0].class()["note"]
                .as_str()
                .is_some_and(|n| n.contains("fail closed"))
        },
    );
    assert!(!agents[0].wrote());
    api.end_outage();
    wait_until(Duration::from_secs(30), "n0 holds the ticket", || {
        holders(&api) == ["n0"] && agents[0].wrote()
    });
    // n1's plan says which budget refuses and why, and takes nothing.
    let plan = agents[1].sandbox.tend(&["plan"]);
    let said = format!("{}{}", plan.stdout, plan.stderr);
    assert!(
        said.contains("fleet budget runtime-restart: 1 of 10 nodes may be disrupted at once and 1 are: n0 (holds a ticket)"),
        "{said}"
    );
    assert_eq!(holders(&api), ["n0"]);
    start(&mut agents[1], &[]);
    wait_until(Duration::from_secs(30), "n1 refused", || {
        agents[1].class()["note"]
            .as_str()
            .is_some_and(|n| n.contains("n0 (holds a ticket)"))
    });
    let status = agents[1].sandbox.tend(&["status"]);
    assert!(
        status
            .stdout
            .contains("fleet budget runtime-restart (files.write): refused: [budget] fleet budget runtime-restart: 1 of 10 nodes"),
        "{status:?}"
    );
}

#[test]
fn outside_the_maintenance_window_nothing_disruptive_then_it_resumes_in_the_next() {
    let api = KubeApi::start();
    seed_nodes(&api, 10);
    let shape = Shape {
        class_extra: "windows = [{ cron = \"0 2 * * *\", duration = \"1h\", timezone = \"Europe/Berlin\" }]\n".into(),
        ..Shape::default()
    };
    let mut agents = agents(&api, 1, &shape);
    // 01:59:52 in Berlin (UTC+1 in December): the window opens in 8 s.
    let clock = faketime("@2026-12-01 00:59:52");
    let mut env_tz = env(&clock);
    env_tz.push(("TZ", "UTC"));
    start(&mut agents[0], &env_tz);
    wait_until(Duration::from_secs(5), "refused outside the window", || {
        agents[0].class()["note"]
            .as_str()
            .is_some_and(|n| n.contains("outside every maintenance window"))
    });
    assert!(!agents[0].wrote());
    assert!(holders(&api).is_empty());
    wait_until(Duration::from_secs(30), "the write in the window", || {
        agents[0].wrote()
    });
    assert_eq!(holders(&api), ["n0"]);
}

#[test]
fn a_hostile_plugin_cannot_write_the_ledger_or_a_node_lease() {
    let api = KubeApi::start();
    seed_nodes(&api, 3);
    let mut agents = agents(&api, 1, &Shape::default());
    start(&mut agents[0], &[]);
    wait_until(Duration::from_secs(30), "n0 holds the ticket", || {
        holders(&api) == ["n0"]
    });
    agents[0].daemon.take();
    let sandbox = &agents[0].sandbox;
    let grant = r#"[{ group = "coordination.k8s.io", resource = "leases", verbs = ["get", "create", "patch", "delete"] }]"#;
    let call = |op: &str, name: &str| {
        format!(
            "[plugins.hostile-{op}]\nfile = \"plugins/chaos.wasm\"\n[plugins.hostile-{op}.grants]\nkube = {grant}\n[plugins.hostile-{op}.config]\nmode = \"kube-call\"\nop = \"{op}\"\napi-version = \"coordination.k8s.io/v1\"\nkind = \"Lease\"\nnamespace = \"{NAMESPACE}\"\nname = \"{name}\"\nbody = '{{\"metadata\": {{\"name\": \"{name}\"}}, \"spec\": {{\"holderIdentity\": \"hostile\"}}}}'\n"
        )
    };
    let port = agents[0].port;
    let text = host(&api, sandbox, port, &Shape::default())
        .replace(&format!("listen = \"127.0.0.1:{port}\"\n"), "");
    let before = api.call("GET", &ledger_path(), None).1;
    let node_lease =
        format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/tend-node-n0");
    let lease_before = api.call("GET", &node_lease, None).1;
    for (op, name) in [
        ("patch", format!("tend-fleet-{CLASS}")),
        ("delete", "tend-node-n0".to_string()),
        ("create", "tend-rollout".to_string()),
    ] {
        sandbox.config_on_node("n0", &text, &call(op, &name));
        let out = sandbox.tend(&["reconcile", &format!("hostile-{op}")]);
        let said = format!("{}{}", out.stdout, out.stderr);
        assert!(
            said.contains(&format!(
                "denied: {op} leases.coordination.k8s.io in namespace {NAMESPACE} named {name}: it is one of Tend's own fleet Leases"
            )),
            "{said}"
        );
    }
    assert_eq!(api.call("GET", &ledger_path(), None).1, before);
    assert_eq!(api.call("GET", &node_lease, None).1, lease_before);
    let (code, _) = api.call(
        "GET",
        &format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/tend-rollout"),
        None,
    );
    assert_eq!(code, 404);
}

/// The report `node` published on its node Lease, if any.
fn report_of(api: &KubeApi, node: &str) -> Option<Value> {
    api.node_report(NAMESPACE, node)
}

/// A config as a DaemonSet's ConfigMap has it: the same text on every node
/// (the node's name from `NODE_NAME`, one kubeconfig path), chaos answering
/// in `mode`.
fn shared_config(kubeconfig: &std::path::Path, mode: &str) -> String {
    format!(
        "[host]\nplugins-dir = \"plugins\"\nstate-dir = \"state\"\ncache-dir = \"{}\"\n[host.kube]\nkubeconfig = \"{}\"\n[host.fleet]\nnamespace = \"{NAMESPACE}\"\nliveness = \"4s\"\nrenew-every = \"1s\"\npublish-every = \"1s\"\n[host.fleet.classes.{CLASS}]\noperations = [\"files.write\"]\nshare = 0.0\n[plugins.restarter]\nfile = \"plugins/chaos.wasm\"\ninterval = \"1s\"\n[plugins.restarter.config]\nmode = \"{mode}\"\ntext = \"fine\"\n",
        tend_e2e::workspace_root()
            .join("target/e2e-cache")
            .display(),
        kubeconfig.display()
    )
}

/// Each tend publishes the revision it runs (tend's version, its config's
/// and components' digest) on its node Lease, with what its plugins did
/// under it: two nodes with the same ConfigMap and plugins share one, a
/// plugin that panics is another. `tend rollout status` adds them up per
/// revision, leaves out a node that stopped renewing and names what it
/// could not read; a new plugin file is a new revision.
#[test]
fn each_node_publishes_its_revision_and_tend_rollout_status_adds_them_up() {
    let api = KubeApi::start();
    seed_nodes(&api, 3);
    let sandboxes: Vec<Sandbox> = (0..3).map(|_| Sandbox::new()).collect();
    let kubeconfig = sandboxes[0].path("kubeconfig");
    for (i, sandbox) in sandboxes.iter().enumerate() {
        sandbox.add_plugin("chaos", "chaos");
        let mode = if i == 2 { "panic" } else { "outcome" };
        std::fs::write(sandbox.path("tend.toml"), shared_config(&kubeconfig, mode)).unwrap();
    }
    // n2 also serves /status.
    let port = tend_e2e::free_port();
    let text = std::fs::read_to_string(sandboxes[2].path("tend.toml")).unwrap();
    std::fs::write(
        sandboxes[2].path("tend.toml"),
        text.replace(
            "[host]\n",
            &format!("[host]\nlisten = \"127.0.0.1:{port}\"\n"),
        ),
    )
    .unwrap();
    api.grant_rbac(&sandboxes[0]);
    let mut daemons: Vec<Option<Daemon>> = sandboxes
        .iter()
        .enumerate()
        .map(|(i, s)| Some(s.daemon_with_env(&[("NODE_NAME", &format!("n{i}"))])))
        .collect();
    let runs =
        |node: &str| report_of(&api, node).map_or(0, |r| r["counters"]["runs"].as_u64().unwrap());
    wait_until(Duration::from_secs(30), "every node reports runs", || {
        (0..3).all(|i| runs(&format!("n{i}")) >= 2)
    });
    let [n0, n1, n2] = ["n0", "n1", "n2"].map(|n| report_of(&api, n).unwrap());
    let shared = n0["revision"].as_str().unwrap().to_string();
    assert_eq!(
        n1["revision"],
        shared.as_str(),
        "one ConfigMap, one revision"
    );
    assert_ne!(
        n2["revision"],
        shared.as_str(),
        "another config is another revision"
    );
    assert_ne!(n0["process"], n1["process"]);
    assert_eq!(n0["counters"]["traps"], 0, "{n0}");
    assert_eq!(n2["counters"]["traps"], n2["counters"]["runs"], "{n2}");
    // The daemon says the same of itself.
    let status = http_get(port, "/status").unwrap().1;
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["revision"]["revision"], n2["revision"]);
    let shown = sandboxes[2].tend(&["status"]);
    let named = format!("revision {}: ", n2["revision"].as_str().unwrap());
    assert!(shown.stdout.contains(&named), "{}", shown.stdout);

    // Someone else's Leases in the namespace: counted, never added up.
    api.plant_node_lease(
        NAMESPACE,
        "huge",
        &format!("{{\"pad\":\"{}\"}}", "x".repeat(4096)),
        true,
    );
    api.plant_node_lease(
        NAMESPACE,
        "forged",
        r#"{"revision":"r-../../x","process":"00","counters":{"runs":1000000}}"#,
        true,
    );
    // A well-formed report on a Lease nobody renews: stale, not added up.
    api.plant_node_lease(NAMESPACE, "gone", &n2.to_string(), false);
    let rollout = |json: bool| {
        let args: &[&str] = match json {
            true => &["rollout", "status", "--json"],
            false => &["rollout", "status"],
        };
        let out = sandboxes[0].tend_with_env(args, &[("NODE_NAME", "n0")]);
        assert!(out.success, "{}{}", out.stdout, out.stderr);
        out.stdout
    };
    let tally: Value = serde_json::from_str(&rollout(true)).unwrap();
    assert_eq!(tally["revisions"][&shared]["nodes"], 2, "{tally}");
    let bad = &tally["revisions"][n2["revision"].as_str().unwrap()];
    assert_eq!(bad["nodes"], 1, "{tally}");
    assert!(bad["counters"]["traps"].as_u64().unwrap() >= 2, "{tally}");
    assert_eq!(tally["revisions"].as_object().unwrap().len(), 2, "{tally}");
    assert_eq!(tally["unreadable"], 2, "{tally}");
    assert_eq!(tally["stale"], 1, "{tally}");
    let table = rollout(false);
    assert!(table.starts_with("REVISION"), "{table}");
    assert!(table.contains(&shared), "{table}");
    assert!(
        table.contains("2 node Lease(s) with a report tend cannot read"),
        "{table}"
    );

    // n1 stops: once its Lease outlives its 4 s, it is no longer added up.
    drop(daemons[1].take());
    wait_until(Duration::from_secs(20), "n1 counted stale", || {
        let tally: Value = serde_json::from_str(&rollout(true)).unwrap();
        tally["stale"] == 2 && tally["revisions"][&shared]["nodes"] == 1
    });

    // A new component is a new revision, published by the same process.
    let plugin = sandboxes[0].path("plugins/chaos.wasm");
    std::fs::copy(tend_e2e::plugin("chaos-v2"), plugin.with_extension("new")).unwrap();
    std::fs::rename(plugin.with_extension("new"), &plugin).unwrap();
    wait_until(
        Duration::from_secs(30),
        "n0 publishes its new revision",
        || report_of(&api, "n0").is_some_and(|r| r["revision"] != shared.as_str()),
    );
    assert_eq!(report_of(&api, "n0").unwrap()["process"], n0["process"]);
    drop(daemons);
}

/// The settle check's Prometheus alerts, against a real Prometheus whose
/// rule is switched between firing and quiet (its rules reloaded): no
/// ticket is granted while the class's alert fires; a holder keeps its
/// ticket while it fires, whatever its node's readiness; once it is quiet
/// the holder gives the ticket back.
#[test]
fn a_firing_alert_holds_the_next_ticket_and_the_holders_return() {
    let rules_dir = tempfile::tempdir().unwrap();
    let rules = rules_dir.path().join("rules.yml");
    let alert = |expr: &str| {
        std::fs::write(
            &rules,
            format!("groups:\n  - name: tend-test\n    rules:\n      - alert: TendTestAlert\n        expr: {expr}\n"),
        )
        .unwrap();
    };
    alert("vector(1)");
    let prometheus = tend_e2e::peers::prometheus::Prometheus::start(&rules, &[]);
    let firing = |on: bool| {
        wait_until(Duration::from_secs(30), "the alert's state", || {
            let (_, body) = http_get(prometheus.port, "/api/v1/alerts").unwrap();
            body.contains("\"state\":\"firing\"") == on
        })
    };
    firing(true);
    let api = KubeApi::start();
    seed_nodes(&api, 3);
    // A write every 10 s, each keeping the ticket 4 s: the holder still
    // holds when the alert fires again.
    let shape = Shape {
        interval: "10s",
        ready_for: "4s",
        fleet_extra: format!("prometheus = \"http://127.0.0.1:{}\"\n", prometheus.port),
        settle_extra: "alerts = [\"TendTestAlert\"]\n".into(),
        ..Shape::default()
    };
    let mut agents = agents(&api, 1, &shape);
    start(&mut agents[0], &[]);
    wait_until(
        Duration::from_secs(30),
        "a refusal naming the alert",
        || {
            agents[0].class()["note"].as_str().is_some_and(|n| {
                n.contains("alert TendTestAlert firing: no ticket until it is quiet")
            })
        },
    );
    assert!(!agents[0].wrote(), "a write while the alert fired");
    assert!(holders(&api).is_empty());

    alert("vector(1) == 0");
    prometheus.reload();
    firing(false);
    wait_until(Duration::from_secs(30), "a ticket once quiet", || {
        agents[0].wrote()
    });

    // Firing again while n0 holds: it keeps its ticket, Ready or not.
    alert("vector(1)");
    prometheus.reload();
    wait_until(
        Duration::from_secs(30),
        "the holder holds while it fires",
        || {
            agents[0].class()["note"].as_str().is_some_and(|n| {
                n.starts_with(
                    "holding: [health] fleet budget runtime-restart: alert TendTestAlert firing",
                )
            })
        },
    );
    assert_eq!(holders(&api), ["n0"]);
    let log = agents[0].sandbox.path("tend.log");
    let released = || {
        std::fs::read_to_string(&log)
            .unwrap()
            .matches("fleet ticket released")
            .count()
    };
    let before = released();
    alert("vector(1) == 0");
    prometheus.reload();
    wait_until(
        Duration::from_secs(30),
        "the ticket given back once quiet",
        || released() > before,
    );
}
