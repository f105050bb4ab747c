//! Staged rollouts end to end: six real `tend` daemons on one machine, each
//! a node of the project's Kubernetes API fake (tests/peers/kube-apiserver.py,
//! held to kubectl in tests/e2e/kube_fake.rs) with the RBAC `tend rbac`
//! renders and a ServiceAccount token, sharing one config text as a
//! DaemonSet's ConfigMap does (the node's name from `NODE_NAME`). Each runs
//! the real `chaos` plugin; a change of its settings is a new revision. One
//! of them leads (the election Lease) and judges; every node reads the
//! rollout Lease and publishes its report on its node Lease, which the test
//! reads on the API server. Every wait is on a condition with a deadline.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tend_e2e::{Daemon, KubeApi, Sandbox, wait_until};

const NAMESPACE: &str = "tend-system";
const NODES: usize = 6;

/// The config every node shares, chaos answering as `chaos` says.
fn config(kubeconfig: &std::path::Path, chaos: &str) -> String {
    format!(
        "[host]\nplugins-dir = \"plugins\"\nstate-dir = \"state\"\ncache-dir = \"{cache}\"\n[host.kube]\nkubeconfig = \"{kubeconfig}\"\n[host.leader-election]\nnamespace = \"{NAMESPACE}\"\nname = \"tend-leader\"\nlease-duration = \"3s\"\nrenew-deadline = \"2s\"\nretry-period = \"500ms\"\n[host.fleet]\nnamespace = \"{NAMESPACE}\"\nliveness = \"4s\"\nrenew-every = \"1s\"\npublish-every = \"1s\"\n[host.fleet.rollout]\nsteps = [\"1\", \"50%\", \"100%\"]\nbake = \"3s\"\npatience = \"1m\"\nmin-runs = 3\nmargin = 0.3\npoll = \"500ms\"\n[plugins.worker]\nfile = \"plugins/chaos.wasm\"\ninterval = \"200ms\"\n[plugins.worker.config]\n{chaos}\n",
        cache = tend_e2e::workspace_root()
            .join("target/e2e-cache")
            .display(),
        kubeconfig = kubeconfig.display(),
    )
}

struct Fleet {
    api: KubeApi,
    sandboxes: Vec<Sandbox>,
    daemons: Vec<Option<Daemon>>,
}

impl Fleet {
    /// Six nodes n0..n5, every one running `chaos`, started.
    fn start(chaos: &str) -> Fleet {
        let api = KubeApi::start();
        for i in 0..NODES {
            api.seed_node(&format!("n{i}"));
        }
        let sandboxes: Vec<Sandbox> = (0..NODES).map(|_| Sandbox::new()).collect();
        let mut fleet = Fleet {
            api,
            sandboxes,
            daemons: vec![],
        };
        for sandbox in &fleet.sandboxes {
            sandbox.add_plugin("chaos", "chaos");
        }
        fleet.apply(chaos);
        fleet.api.grant_rbac(&fleet.sandboxes[0]);
        fleet.daemons = (0..NODES).map(|i| Some(fleet.daemon(i))).collect();
        fleet
    }

    fn daemon(&self, i: usize) -> Daemon {
        self.sandboxes[i].daemon_with_env(&[("NODE_NAME", &format!("n{i}"))])
    }

    /// A new ConfigMap: every node's config file replaced, as kubelet does.
    fn apply(&self, chaos: &str) {
        let kubeconfig = self.sandboxes[0].path("kubeconfig");
        for sandbox in &self.sandboxes {
            let tmp = sandbox.path(".tend.toml.new");
            std::fs::write(&tmp, config(&kubeconfig, chaos)).unwrap();
            std::fs::rename(&tmp, sandbox.path("tend.toml")).unwrap();
        }
    }

    /// What each node runs, by its report.
    fn running(&self) -> BTreeMap<String, Value> {
        (0..NODES)
            .filter_map(|i| {
                let node = format!("n{i}");
                Some((node.clone(), self.api.node_report(NAMESPACE, &node)?))
            })
            .collect()
    }

    fn on(&self, revision: &str) -> BTreeSet<String> {
        self.running()
            .into_iter()
            .filter(|(_, r)| r["revision"] == revision)
            .map(|(n, _)| n)
            .collect()
    }

    /// The rollout as the leader published it.
    fn rollout(&self) -> Option<Value> {
        let path =
            format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/tend-rollout");
        let (code, lease) = self.api.call("GET", &path, None);
        if code == 404 {
            return None;
        }
        assert_eq!(code, 200, "{lease}");
        let text = lease["metadata"]["annotations"]["tend.dev/rollout"].as_str()?;
        Some(serde_json::from_str(text).unwrap())
    }

    fn state(&self) -> (String, String) {
        let rollout = self.rollout().unwrap_or_default();
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        (text(&rollout["revision"]), text(&rollout["state"]))
    }

    /// Waits until every node asks for a new revision (other than `old`),
    /// which it names.
    fn desired_other_than(&self, old: &str) -> String {
        let mut desired = String::new();
        wait_until(
            Duration::from_secs(60),
            "every node asks for the new revision",
            || {
                let asked: BTreeSet<String> = self
                    .running()
                    .values()
                    .map(|r| {
                        r["desired"]
                            .as_str()
                            .or(r["revision"].as_str())
                            .unwrap_or("")
                            .to_string()
                    })
                    .collect();
                match asked.into_iter().collect::<Vec<_>>().as_slice() {
                    [one] if one != old && !one.is_empty() => {
                        desired = one.clone();
                        true
                    }
                    _ => false,
                }
            },
        );
        desired
    }

    /// Stop every tend, start them again, and wait until every node that
    /// reported before (and kept its state) reports from its new process.
    fn restart_all(&mut self) {
        let kept = |n: &str| {
            let i: usize = n[1..].parse().unwrap();
            self.sandboxes[i].path("state").exists()
        };
        let before: BTreeMap<String, String> = self
            .running()
            .into_iter()
            .filter(|(n, _)| kept(n))
            .map(|(n, r)| (n, r["process"].as_str().unwrap_or_default().to_string()))
            .collect();
        self.daemons.clear();
        self.daemons = (0..NODES).map(|i| Some(self.daemon(i))).collect();
        wait_until(
            Duration::from_secs(60),
            "every restarted node reports",
            || {
                let running = self.running();
                before.keys().all(|n| {
                    running
                        .get(n)
                        .is_some_and(|r| r["process"].as_str() != Some(before[n].as_str()))
                })
            },
        );
    }

    /// Waits until every node has renewed its node Lease since now: a new
    /// report, or the same one again while its plugin backs off after
    /// failures (1 s doubling: runs too far apart to wait on).
    fn next_renewals(&self) {
        let renewed = |node: &str| {
            let path = format!(
                "/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/tend-node-{node}"
            );
            let (_, lease) = self.api.call("GET", &path, None);
            lease["spec"]["renewTime"].as_str().map(str::to_string)
        };
        let nodes: Vec<String> = (0..NODES).map(|i| format!("n{i}")).collect();
        let now: Vec<Option<String>> = nodes.iter().map(|n| renewed(n)).collect();
        wait_until(Duration::from_secs(10), "every node's next renewal", || {
            nodes.iter().zip(&now).all(|(n, then)| renewed(n) != *then)
        });
    }

    /// Waits until every node has reported more runs than now.
    fn next_reports(&self) {
        let runs = |r: &Value| r["counters"]["runs"].as_u64().unwrap_or(0);
        let now: BTreeMap<String, u64> = self
            .running()
            .iter()
            .map(|(n, r)| (n.clone(), runs(r)))
            .collect();
        wait_until(Duration::from_secs(10), "every node's next report", || {
            self.running().iter().all(|(n, r)| runs(r) > now[n])
        });
    }
}

/// The first revision: every node runs it, the leader adopts it as stable.
fn stable_start(fleet: &Fleet) -> String {
    let mut stable = String::new();
    wait_until(
        Duration::from_secs(60),
        "the first revision is stable on every node",
        || {
            let (revision, state) = fleet.state();
            stable = revision;
            state == "done" && fleet.on(&stable).len() == NODES
        },
    );
    stable
}

/// A revision whose plugin panics on every run reaches one node only, is
/// rolled back within its first bake (the node gives it up on its own after
/// three traps, and the leader fails it), and stays failed: the same
/// ConfigMap applied again, and every tend restarted with it on disk, runs
/// the stable revision still, from what each node saved. A good revision
/// afterwards widens step by step to every node, and a node that took it
/// never goes back; restarted, every node runs it.
#[test]
fn a_trapping_revision_stops_at_one_node_and_a_good_one_reaches_every_node() {
    let mut fleet = Fleet::start("mode = \"outcome\"\ntext = \"fine\"");
    let a = stable_start(&fleet);

    fleet.apply("mode = \"panic\"");
    let b = fleet.desired_other_than(&a);
    let mut most_on_b = 0;
    wait_until(
        Duration::from_secs(30),
        "the trapping revision fails",
        || {
            most_on_b = most_on_b.max(fleet.on(&b).len());
            fleet.state() == (b.clone(), "failed".into())
        },
    );
    let failed = fleet.rollout().unwrap();
    assert_eq!(most_on_b, 1, "on one node at most: {failed}");
    assert_eq!(failed["failed"], serde_json::json!([b]), "{failed}");
    let reason = failed["reason"].as_str().unwrap();
    assert!(
        reason.contains("reverted it on its own")
            || reason.contains("fails more than the stable nodes"),
        "{reason}"
    );
    wait_until(
        Duration::from_secs(10),
        "every node on the stable revision",
        || fleet.on(&a).len() == NODES,
    );

    // Applied again, and every tend restarted: still failed, still stable.
    fleet.apply("mode = \"panic\"");
    // n5 comes back as a new node (its state gone): it holds only what its
    // files ask for, the failed revision, so it runs nothing and reports
    // nothing.
    fleet.daemons[5].take();
    std::fs::remove_dir_all(fleet.sandboxes[5].path("state")).unwrap();
    fleet.restart_all();
    wait_until(
        Duration::from_secs(30),
        "the new node reports nothing",
        || fleet.api.node_report(NAMESPACE, "n5").is_none(),
    );
    for _ in 0..3 {
        fleet.next_reports();
        let running = fleet.running();
        assert_eq!(running.len(), NODES - 1, "{running:?}");
        assert!(
            running
                .values()
                .all(|r| r["revision"] == a.as_str() && r["desired"] == b.as_str()),
            "{running:?}"
        );
        assert_eq!(fleet.state(), (b.clone(), "failed".into()));
    }

    fleet.apply("mode = \"outcome\"\ntext = \"better\"");
    let c = fleet.desired_other_than(&b);
    assert_ne!(c, a);
    let mut took: BTreeSet<String> = BTreeSet::new();
    let mut steps = BTreeSet::new();
    wait_until(
        Duration::from_secs(90),
        "the good revision is stable",
        || {
            let on_c = fleet.on(&c);
            assert!(
                took.is_subset(&on_c),
                "a node went back: {took:?} then {on_c:?}"
            );
            took = on_c;
            let rollout = fleet.rollout().unwrap();
            steps.insert(rollout["step"].as_u64().unwrap());
            rollout["state"] == "done" && rollout["stable"] == c.as_str()
        },
    );
    assert!(steps.len() >= 2, "step by step: {steps:?}");
    wait_until(
        Duration::from_secs(10),
        "every node on the good revision",
        || fleet.on(&c).len() == NODES,
    );
    fleet.restart_all();
    fleet.next_reports();
    assert_eq!(fleet.on(&c).len(), NODES, "{:?}", fleet.running());
}

/// The leader cut off from the API server (its requests hang, as in a
/// partition) widens nothing: it cannot write, and another tend leads only
/// after the Lease lapses and then bakes the step again from its own start.
/// Once the partition ends, the rollout goes on to every node.
#[test]
fn a_blackholed_leader_widens_nothing_and_the_rollout_resumes_afterwards() {
    let fleet = Fleet::start("mode = \"outcome\"\ntext = \"fine\"");
    let a = stable_start(&fleet);
    fleet.apply("mode = \"outcome\"\ntext = \"better\"");
    let c = fleet.desired_other_than(&a);
    wait_until(Duration::from_secs(30), "the first step begins", || {
        fleet.state() == (c.clone(), "rolling".into())
    });
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/tend-leader");
    let holder = fleet.api.call("GET", &path, None).1["spec"]["holderIdentity"]
        .as_str()
        .unwrap()
        .to_string();
    let node = holder.split('/').next().unwrap().to_string();
    // Every client of that tend: its fleet's and its election's.
    fleet.api.blackhole(8.0, Some(&format!("({node}")));
    let cut_off = std::time::Instant::now();
    // A bake is 3 s and the election Lease lapses after 3 s: no step may
    // widen in the first 5 s, whoever leads.
    while cut_off.elapsed() < Duration::from_secs(5) {
        let rollout = fleet.rollout().unwrap();
        assert_eq!(
            rollout["step"], 0,
            "widened while the leader was cut off: {rollout}"
        );
        assert_eq!(rollout["state"], "rolling", "{rollout}");
        std::thread::yield_now();
    }
    wait_until(
        Duration::from_secs(90),
        "the rollout goes on to every node",
        || {
            let rollout = fleet.rollout().unwrap();
            rollout["state"] == "done"
                && rollout["stable"] == c.as_str()
                && fleet.on(&c).len() == NODES
        },
    );
}

/// Failures the stable nodes share (the plugin's input is gone on every
/// node, whatever it runs) pause the rollout: nothing widens, nothing is
/// rolled back, the candidate's node keeps it, no revision is failed. Once
/// the input is back, an operator's `tend rollout resume` goes on to every
/// node.
#[test]
fn failures_the_stable_nodes_share_pause_the_rollout_without_a_rollback() {
    let signal = tempfile::tempdir().unwrap();
    let path = signal.path().join("signal");
    std::fs::write(&path, "up").unwrap();
    let reader = |name: &str| {
        format!(
            "mode = \"read\"\npath = \"{path}\"\n[plugins.{name}.grants]\nfiles = [{{ path = \"{dir}\" }}]\n",
            path = path.display(),
            dir = signal.path().display()
        )
    };
    let fleet = Fleet::start(&reader("worker"));
    let a = stable_start(&fleet);
    // The leader sees the quiet fleet for over a bake first: its baseline.
    for _ in 0..8 {
        fleet.next_reports();
    }
    // The candidate runs a second reader, no riskier than the first.
    let second = format!(
        "{}[plugins.second]\nfile = \"plugins/chaos.wasm\"\ninterval = \"200ms\"\n[plugins.second.config]\n{}",
        reader("worker"),
        reader("second")
    );
    fleet.apply(&second);
    let b = fleet.desired_other_than(&a);
    wait_until(Duration::from_secs(30), "the first step begins", || {
        fleet.state() == (b.clone(), "rolling".into())
    });
    std::fs::remove_file(&path).unwrap();
    let mut seen = BTreeSet::new();
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(Duration::from_secs(30), "the rollout pauses", || {
            seen.insert(format!("{:?}", fleet.rollout()));
            fleet.state() == (b.clone(), "paused".into())
        })
    }));
    assert!(waited.is_ok(), "the rollout never paused: {seen:#?}");
    let paused = fleet.rollout().unwrap();
    let reason = paused["reason"].as_str().unwrap();
    assert!(
        reason.contains("the stable nodes degrade as well"),
        "{reason}"
    );
    assert_eq!(paused["failed"], serde_json::json!([]), "{paused}");
    // Nothing widens and nothing is rolled back: the candidate's nodes
    // (its first step's, unless a loaded machine let it widen first) keep it.
    fleet.next_renewals();
    let kept = fleet.on(&b);
    assert!(!kept.is_empty() && kept.len() < NODES, "{kept:?}");
    for _ in 0..3 {
        fleet.next_renewals();
        assert_eq!(fleet.on(&b), kept);
        assert_eq!(fleet.rollout().unwrap()["step"], paused["step"]);
        assert_eq!(fleet.state(), (b.clone(), "paused".into()));
        assert!(fleet.running().values().all(|r| r["reverted"].is_null()));
    }
    std::fs::write(&path, "up").unwrap();
    let resumed = fleet.sandboxes[0].tend_with_env(&["rollout", "resume"], &[("NODE_NAME", "n0")]);
    assert!(resumed.success, "{}{}", resumed.stdout, resumed.stderr);
    wait_until(
        Duration::from_secs(90),
        "the rollout goes on to every node",
        || fleet.state() == (b.clone(), "done".into()) && fleet.on(&b).len() == NODES,
    );
}
