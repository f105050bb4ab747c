//! The `kube` capability end to end: the real `tend`, the real `chaos` plugin
//! (its kube-label, kube-list, kube-watch and kube-call modes), the fake
//! Kubernetes API server (tests/peers/kube-apiserver.py) over HTTP, and real
//! kubectl to look at what tend did. Grants narrowed to the node's own Node,
//! Events aggregated, watch triggers, one shared watch, reads served from the
//! watch cache, plans by the API server's dry run, leader election for
//! cluster-scope plugins, and `tend rbac`. Every wait is on a condition with a
//! deadline.

use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tend_e2e::{
    Daemon, KubeApi, Kubectl, Sandbox, free_port, metric, plugin_status, status, tend_bin,
    wait_until, workspace_root,
};

const WITHIN: Duration = Duration::from_secs(20);
/// What the test itself sends as User-Agent, to tell its requests from tend's.
const TEST_AGENT: &str = "tend-e2e-test";

/// `[host]` lines: `listen` (when given) and `[host.kube]` with the kubeconfig
/// [`KubeApi::grant_rbac`] writes for the tend of `sandbox`.
fn kube_host(api: &KubeApi, sandbox: &Sandbox, listen: Option<u16>) -> String {
    let listen = listen.map_or(String::new(), |p| format!("listen = \"127.0.0.1:{p}\"\n"));
    format!("{listen}{}", api.host_kube(sandbox))
}

/// One chaos plugin: `[plugins.NAME]` with `extra` lines (interval, scope),
/// its kube `grant` (a TOML array, or none) and its config (TOML lines).
fn chaos(name: &str, extra: &str, grant: Option<&str>, config: &str) -> String {
    let grant = grant.map_or(String::new(), |g| {
        format!("[plugins.{name}.grants]\nkube = {g}\n")
    });
    format!("[plugins.{name}]\n{extra}{grant}[plugins.{name}.config]\n{config}\n")
}

fn node_manifest(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{kubernetes.io/hostname: {name}}}\n"
    )
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "watched"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    })
}

/// A request from the test (User-Agent [`TEST_AGENT`]): (status, JSON).
fn call(api: &KubeApi, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let (code, text) = api
        .call_raw(
            method,
            path,
            "application/json",
            &body,
            Some(TEST_AGENT),
            Duration::from_secs(30),
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn create_node(api: &KubeApi, name: &str) {
    let (code, body) = call(
        api,
        "POST",
        "/api/v1/nodes",
        Some(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})),
    );
    assert_eq!(code, 201, "create node {name}: {body}");
}

fn epoch_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// An RFC 3339 time (tend's run times, a Lease's renewTime) as seconds since the epoch.
fn rfc3339_secs(text: &str) -> f64 {
    epoch_secs(humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}")))
}

fn reconciles(port: u16, name: &str) -> u64 {
    plugin_status(port, name)["reconciles"]
        .as_u64()
        .unwrap_or(0)
}

fn leader(port: u16) -> Value {
    status(port)["leader"].clone()
}

fn leading(port: u16) -> bool {
    leader(port)["leading"] == true
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Wait until `port`'s daemon has loaded every plugin (`/readyz`).
fn wait_ready(port: u16) {
    wait_until(WITHIN, "/readyz", || {
        matches!(tend_e2e::http_get(port, "/readyz"), Ok((200, _)))
    });
}

#[test]
fn a_node_plugin_labels_only_its_own_node_and_its_repeated_event_is_counted() {
    let api = KubeApi::start();
    let kubectl = Kubectl::version("1.33", &api);
    for node in ["node-1", "node-2"] {
        let out = kubectl.apply(&node_manifest(node), &[]);
        assert!(out.success(), "{}", out.stderr);
    }
    let node2_before = kubectl.json(&["get", "node", "node-2"]);

    let sandbox = Sandbox::new();
    sandbox
        .add_plugin("chaos", "labeler")
        .add_plugin("chaos", "intruder");
    // Both may read and patch only $NODE, which is node-1 here.
    let grant =
        r#"[{ group = "", resource = "nodes", verbs = ["get", "patch"], names = ["$NODE"] }]"#;
    let label = |node: &str| {
        format!(
            "mode = \"kube-label\"\nnode = \"{node}\"\nkey = \"tend.dev/tended\"\nvalue = \"yes\""
        )
    };
    let plugins = chaos("labeler", "", Some(grant), &label("node-1"))
        + &chaos("intruder", "", Some(grant), &label("node-2"));
    sandbox.config_on_node("node-1", &kube_host(&api, &sandbox, None), &plugins);
    api.grant_rbac(&sandbox);

    let out = sandbox.tend(&["reconcile", "labeler"]);
    assert!(out.success, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("labeler: healthy: labeled node-1 tend.dev/tended=yes"),
        "{}",
        out.stdout
    );
    let node1 = kubectl.json(&["get", "node", "node-1"]);
    assert_eq!(
        node1["metadata"]["labels"]["tend.dev/tended"], "yes",
        "{node1:#}"
    );
    assert_eq!(
        node1["metadata"]["labels"]["kubernetes.io/hostname"], "node-1",
        "a merge patch keeps the other labels"
    );

    // node-2 is not this node: denied, with what to add, and left alone.
    let out = sandbox.tend(&["reconcile", "intruder"]);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains(
            "denied: no kube grant allows patch nodes named node-2: add { resource = \"nodes\", verbs = [\"patch\"], names = [\"node-2\"] } to [plugins.intruder.grants] kube"
        ),
        "{said}"
    );
    let node2 = kubectl.json(&["get", "node", "node-2"]);
    assert_eq!(
        node2["metadata"]["resourceVersion"], node2_before["metadata"]["resourceVersion"],
        "node-2 changed: {node2:#}"
    );
    assert!(node2["metadata"]["labels"].get("tend.dev/tended").is_none());

    // The Event is what kubectl shows: about node-1, in "default" (a Node is
    // cluster-scoped), reason LabelApplied.
    let table = kubectl.ok(&["get", "events", "-A"]);
    let row = table
        .lines()
        .find(|l| l.contains("LabelApplied"))
        .unwrap_or_else(|| panic!("no LabelApplied event in:\n{table}"));
    for want in [
        "default",
        "Normal",
        "node/node-1",
        "set tend.dev/tended=yes",
    ] {
        assert!(row.contains(want), "{want:?} missing from {row:?}");
    }
    let core = kubectl.json(&["get", "events", "-A"]);
    let ours: Vec<&Value> = core["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "LabelApplied")
        .collect();
    assert_eq!(ours.len(), 1, "{core:#}");
    assert_eq!(ours[0]["involvedObject"]["kind"], "Node");
    assert_eq!(ours[0]["involvedObject"]["name"], "node-1");
    assert_eq!(ours[0]["involvedObject"]["uid"], node1["metadata"]["uid"]);

    // The same reconcile again: the Event's series count goes up, no new Event.
    let out = sandbox.tend(&["reconcile", "labeler"]);
    assert!(out.success, "{}{}", out.stdout, out.stderr);
    let (code, events) = call(&api, "GET", "/apis/events.k8s.io/v1/events", None);
    assert_eq!(code, 200, "{events}");
    let ours: Vec<&Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "LabelApplied")
        .collect();
    assert_eq!(ours.len(), 1, "one aggregated Event: {events:#}");
    let event = ours[0];
    assert_eq!(event["metadata"]["namespace"], "default");
    assert_eq!(event["regarding"]["name"], "node-1");
    assert_eq!(event["regarding"]["kind"], "Node");
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["note"], "set tend.dev/tended=yes");
    assert_eq!(event["series"]["count"], 2, "{event:#}");
    // Nothing was emitted about node-2.
    assert!(
        !events.to_string().contains("\"node-2\""),
        "an event about node-2: {events:#}"
    );
}

#[test]
fn a_watched_pod_deletion_reconciles_the_plugin_at_once() {
    let api = KubeApi::start();
    let kubectl = Kubectl::version("1.33", &api);
    let port = free_port();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "pod-watcher");
    // No interval: only startup and the watch wake it.
    sandbox.config_on_node(
        "node-1",
        &kube_host(&api, &sandbox, Some(port)),
        &chaos(
            "pod-watcher",
            "",
            Some(r#"[{ resource = "pods", namespaces = ["default"], verbs = ["list", "watch"] }]"#),
            "mode = \"kube-watch\"",
        ),
    );
    api.grant_rbac(&sandbox);
    let _daemon = sandbox.daemon();
    let watcher = |what: &str, want: &dyn Fn(&Value) -> bool| -> Value {
        tend_e2e::wait_for_plugin(port, "pod-watcher", what, |p| {
            p["last"].is_object() && want(p)
        })
    };
    watcher("its startup reconcile", &|p| p["reconciles"] == 1);
    wait_until(WITHIN, "tend's watch on pods in default", || {
        api.open_watches("pods") == 1
    });

    let mut latencies = Vec::new();
    for i in 0..10 {
        let name = format!("watched-{i}");
        let subject = format!("kube:pods/default/{name}");
        let before = reconciles(port, "pod-watcher");
        if i == 0 {
            // JSON is YAML: kubectl applies it as a manifest.
            let out = kubectl.apply(&pod(&name).to_string(), &[]);
            assert!(out.success(), "{}", out.stderr);
        } else {
            let (code, body) = call(
                &api,
                "POST",
                "/api/v1/namespaces/default/pods",
                Some(&pod(&name)),
            );
            assert_eq!(code, 201, "{body}");
        }
        let created = watcher("the reconcile of the new pod", &|p| {
            p["reconciles"].as_u64().unwrap() > before
                && p["last"]["message"].as_str().unwrap().contains(&subject)
        });
        let after_create = created["reconciles"].as_u64().unwrap();

        let sent = SystemTime::now();
        let (code, body) = call(
            &api,
            "DELETE",
            &format!("/api/v1/namespaces/default/pods/{name}"),
            None,
        );
        assert_eq!(code, 200, "{body}");
        let deleted = watcher("the reconcile of the deleted pod", &|p| {
            p["reconciles"].as_u64().unwrap() > after_create
                && p["last"]["triggers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t == subject.as_str())
        });
        assert!(
            deleted["last"]["message"]
                .as_str()
                .unwrap()
                .contains(&subject),
            "{deleted:#}"
        );
        // The run's time is when it ended (ms): an upper bound of the latency.
        let latency = rfc3339_secs(deleted["last"]["time"].as_str().unwrap()) - epoch_secs(sent);
        assert!(
            latency < 1.0,
            "deletion {i} reconciled {latency:.3}s after the DELETE"
        );
        latencies.push(latency.max(0.0));
    }
    latencies.sort_by(f64::total_cmp);
    eprintln!(
        "watch (pod DELETE) -> reconcile end: p50 {:.1} ms, max {:.1} ms over {} deletions: {:?}",
        percentile(&latencies, 0.5) * 1000.0,
        latencies.last().unwrap() * 1000.0,
        latencies.len(),
        latencies
            .iter()
            .map(|l| format!("{:.0}ms", l * 1000.0))
            .collect::<Vec<_>>()
    );
    // Still the one watch, however many changes came through it.
    assert_eq!(api.open_watches("pods"), 1, "{:#}", api.watches());
}

#[test]
fn ten_plugins_watching_nodes_share_one_watch() {
    let api = KubeApi::start();
    create_node(&api, "n-0");
    let port = free_port();
    let sandbox = Sandbox::new();
    let names: Vec<String> = (1..=10).map(|i| format!("w{i}")).collect();
    let mut plugins = String::new();
    for name in &names {
        sandbox.add_plugin("chaos", name);
        plugins += &chaos(
            name,
            "",
            Some(r#"[{ resource = "nodes", verbs = ["get", "list", "watch"] }]"#),
            "mode = \"kube-watch\"",
        );
    }
    sandbox.config_on_node("n-0", &kube_host(&api, &sandbox, Some(port)), &plugins);
    api.grant_rbac(&sandbox);
    let _daemon = sandbox.daemon();
    wait_ready(port);
    wait_until(WITHIN, "a watch on nodes", || {
        api.open_watches("nodes") >= 1
    });

    // A new Node wakes all ten, through that one watch.
    create_node(&api, "n-1");
    for name in &names {
        tend_e2e::wait_for_plugin(port, name, "the new node's trigger", |p| {
            p["last"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("kube:nodes/n-1"))
        });
    }
    // Over a few seconds, never more than one watch on nodes.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let watches = api.watches();
        let on_nodes: Vec<&Value> = watches["watches"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["resource"] == "nodes")
            .collect();
        assert_eq!(on_nodes.len(), 1, "{watches:#}");
        assert_eq!(
            on_nodes[0]["count"], 1,
            "ten plugins, one watch: {watches:#}"
        );
        assert_eq!(on_nodes[0]["namespace"], "", "{watches:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(metric(port, "tend_kube_watches"), Some(1.0));
    let watches = api.watches();
    eprintln!("watches with ten node watchers: {watches}");
}

#[test]
fn a_reconcile_reading_cached_objects_makes_no_api_request() {
    let api = KubeApi::start();
    create_node(&api, "c-1");
    create_node(&api, "c-2");
    let port = free_port();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "lister");
    sandbox.config_on_node(
        "c-1",
        &kube_host(&api, &sandbox, Some(port)),
        &chaos(
            "lister",
            "interval = \"1s\"\n",
            Some(r#"[{ resource = "nodes", verbs = ["list"] }]"#),
            "mode = \"kube-list\"\napi-version = \"v1\"\nkind = \"Node\"",
        ),
    );
    api.grant_rbac(&sandbox);
    let daemon = sandbox.daemon();
    // Warm: the first list started the cache (discovery, the reflector's list
    // and its watch); the second read nothing new.
    let warm = tend_e2e::wait_for_plugin(port, "lister", "two cached lists", |p| {
        p["reconciles"].as_u64().unwrap_or(0) >= 2
    });
    assert_eq!(
        warm["last"]["message"], "listed 2 Node: c-1, c-2",
        "{warm:#}"
    );
    assert_eq!(api.open_watches("nodes"), 1);
    let seq = api.request_seq();
    let requests = metric(port, "tend_kube_api_requests_total").expect("the kube request metric");
    let runs = reconciles(port, "lister");

    let tend_requests = |since: u64| -> Vec<Value> {
        api.requests_since(since)
            .into_iter()
            .filter(|r| r["userAgent"] != TEST_AGENT)
            .collect()
    };
    // A change reaches the cache through the watch: the next reads see it.
    tend_e2e::wait_for_plugin(port, "lister", "a cached reconcile", |p| {
        p["reconciles"].as_u64().unwrap() > runs
    });
    create_node(&api, "c-3");
    let seen = tend_e2e::wait_for_plugin(port, "lister", "the new node in a cached list", |p| {
        p["last"]["message"] == "listed 3 Node: c-1, c-2, c-3"
    });
    let seen_at = seen["reconciles"].as_u64().unwrap();
    tend_e2e::wait_for_plugin(port, "lister", "more cached reconciles", |p| {
        p["reconciles"].as_u64().unwrap() >= seen_at + 2
    });
    let done = reconciles(port, "lister");
    assert!(done >= runs + 4, "{runs} -> {done}");
    let made = tend_requests(seq);
    assert!(
        made.is_empty(),
        "tend sent requests during {} cached reconciles: {made:#?}",
        done - runs
    );
    assert_eq!(
        metric(port, "tend_kube_api_requests_total"),
        Some(requests),
        "tend_kube_api_requests_total moved during cached reconciles"
    );
    // And the one long watch is still open (it was not reopened).
    assert_eq!(api.open_watches("nodes"), 1);
    eprintln!(
        "{} reconciles from the cache, 0 API requests (tend_kube_api_requests_total {requests})",
        done - runs
    );
    drop(daemon);
}

/// A plugin granted only `patch` on its own Node: `tend plan` sends the
/// patch as the API server's dry run, so the plan answers what the real run
/// does (not `denied`, as when a plan answered with a `get`), shows the
/// server's object diff, and changes nothing.
#[test]
fn a_planned_patch_is_the_servers_dry_run_under_the_same_grant() {
    let api = KubeApi::start();
    let kubectl = Kubectl::version("1.33", &api);
    let out = kubectl.apply(&node_manifest("node-1"), &[]);
    assert!(out.success(), "{}", out.stderr);
    let before = kubectl.json(&["get", "node", "node-1"]);
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "labeler");
    let grant = r#"[{ resource = "nodes", verbs = ["patch"], names = ["$NODE"] }]"#;
    let config = "mode = \"kube-call\"\nop = \"patch\"\napi-version = \"v1\"\nkind = \"Node\"\nname = \"node-1\"\npatch-type = \"merge\"\nbody = '{\"metadata\": {\"labels\": {\"tend.dev/planned\": \"yes\"}}}'";
    sandbox.config_on_node(
        "node-1",
        &kube_host(&api, &sandbox, None),
        &chaos("labeler", "", Some(grant), config),
    );
    api.grant_rbac(&sandbox);
    let rv = api.resource_version();
    let mut watch = api.watch(&format!("/api/v1/nodes?watch=1&resourceVersion={rv}"));
    assert_eq!(watch.status, 200);

    let plan = sandbox.tend(&["plan", "labeler"]);
    assert!(plan.success, "{}{}", plan.stdout, plan.stderr);
    assert!(
        plan.stdout.contains("labeler: healthy: ok"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout
            .contains("would kube.patch nodes/node-1 (merge patch, "),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout
            .contains("      --- nodes/node-1\n      +++ nodes/node-1\n"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout
            .contains("      +      \"tend.dev/planned\": \"yes\""),
        "the label the patch would set, from the server's dry run: {}",
        plan.stdout
    );
    let patches: Vec<Value> = api
        .requests_since(0)
        .into_iter()
        .filter(|r| r["verb"] == "patch")
        .collect();
    assert_eq!(patches.len(), 1, "{patches:#?}");
    assert_eq!(patches[0]["query"]["dryRun"], "All", "{patches:#?}");
    let after = kubectl.json(&["get", "node", "node-1"]);
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(
        after["metadata"]["labels"], before["metadata"]["labels"],
        "a plan changes nothing"
    );
    assert_eq!(api.resource_version(), rv, "no resourceVersion bump");

    let real = sandbox.tend(&["reconcile", "labeler"]);
    assert!(real.success, "{}{}", real.stdout, real.stderr);
    assert!(
        real.stdout.contains("labeler: healthy: ok"),
        "the plan's answer: {}",
        real.stdout
    );
    assert!(
        real.stdout.contains("did kube.patch nodes/node-1"),
        "{}",
        real.stdout
    );
    // The first watch event since the plan is the real patch: the plan sent none.
    let event = watch.next(WITHIN).expect("the real patch's event");
    assert_eq!(event["type"], "MODIFIED", "{event:#}");
    assert_eq!(
        event["object"]["metadata"]["labels"]["tend.dev/planned"], "yes",
        "{event:#}"
    );
}

/// One `tend run` of the leader-election test: node-name `node`, a
/// cluster-scope and a node-scope chaos plugin, each every second.
/// The daemon first: a tuple drops in field order, and the daemon prints its
/// log from the sandbox when a test fails, so the sandbox must outlive it.
fn elector(api: &KubeApi, node: &str) -> (Daemon, u16, Sandbox) {
    let plugins = chaos(
        "cluster-job",
        "scope = \"cluster\"\ninterval = \"1s\"\n",
        None,
        "mode = \"ok\"",
    ) + &chaos("node-job", "interval = \"1s\"\n", None, "mode = \"ok\"");
    replica(api, node, "", &["cluster-job", "node-job"], &plugins)
}

/// One `tend run` of a leader-election test: node-name `node`, `[host]`
/// lines `host` beside the election's, the chaos plugins `names` configured
/// by `plugins`.
fn replica(
    api: &KubeApi,
    node: &str,
    host: &str,
    names: &[&str],
    plugins: &str,
) -> (Daemon, u16, Sandbox) {
    let port = free_port();
    let sandbox = Sandbox::new();
    for name in names {
        sandbox.add_plugin("chaos", name);
    }
    let host = kube_host(api, &sandbox, Some(port))
        + "[host.leader-election]\nnamespace = \"kube-system\"\nname = \"tend\"\nlease-duration = \"6s\"\nrenew-deadline = \"4s\"\nretry-period = \"1s\"\n"
        + host;
    sandbox.config_on_node(node, &host, plugins);
    api.grant_rbac(&sandbox);
    let daemon = sandbox.daemon();
    (daemon, port, sandbox)
}

fn lease(api: &KubeApi) -> Value {
    let (code, lease) = call(
        api,
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/tend",
        None,
    );
    assert_eq!(code, 200, "{lease}");
    lease
}

#[test]
fn only_the_lease_holder_runs_cluster_plugins_and_it_steps_down_before_the_lease_lapses() {
    let (lease_duration, renew_deadline, retry) = (6.0, 4.0, 1.0);
    let api = KubeApi::start();
    let a = elector(&api, "a");
    let b = elector(&api, "b");
    wait_until(WITHIN, "a leader", || leading(a.1) || leading(b.1));
    // (node name, daemon, port, sandbox) of the first holder and of the follower.
    let (first, second) = match leading(a.1) {
        true => (("a", a), ("b", b)),
        false => (("b", b), ("a", a)),
    };
    let (first_node, (first_daemon, first_port, _first_sandbox)) = first;
    let (second_node, (daemon, port, _second_sandbox)) = second;
    let first_id = format!("{first_node}/{}", first_daemon.pid());
    let second_id = format!("{second_node}/{}", daemon.pid());
    eprintln!("{first_id} leads; {second_id} follows");

    // Both running: only the holder's cluster plugin runs; both node plugins do.
    tend_e2e::wait_for_plugin(
        first_port,
        "cluster-job",
        "the leader's cluster reconciles",
        |p| p["reconciles"].as_u64().unwrap_or(0) >= 3,
    );
    wait_until(WITHIN, "both node plugins to run", || {
        reconciles(first_port, "node-job") >= 3 && reconciles(port, "node-job") >= 3
    });
    assert_eq!(
        reconciles(port, "cluster-job"),
        0,
        "the follower ran its cluster plugin"
    );
    let follower = leader(port);
    assert_eq!(follower["leading"], false, "{follower:#}");
    assert_eq!(follower["holder"], first_id.as_str(), "{follower:#}");
    assert_eq!(follower["identity"], second_id.as_str(), "{follower:#}");
    assert_eq!(follower["lease"], "kube-system/tend", "{follower:#}");
    let held = leader(first_port);
    assert_eq!(held["identity"], first_id.as_str(), "{held:#}");
    assert_eq!(lease(&api)["spec"]["holderIdentity"], first_id.as_str());
    let why = tend_e2e::http_get(port, "/status/cluster-job").unwrap().1;
    assert!(why.contains("holding the Lease kube-system/tend"), "{why}");

    // kill -9 the holder: the follower takes over once the Lease has gone
    // unrenewed for lease-duration, and reconciles its cluster plugin at once.
    let killed_at = epoch_secs(SystemTime::now());
    drop(first_daemon); // SIGKILL
    let last_renew = rfc3339_secs(lease(&api)["spec"]["renewTime"].as_str().unwrap());
    wait_until(Duration::from_secs(15), "the follower to take over", || {
        leading(port)
    });
    let took_over = epoch_secs(SystemTime::now());
    let (since_kill, since_renew) = (took_over - killed_at, took_over - last_renew);
    eprintln!(
        "takeover: {since_kill:.2}s after kill -9, {since_renew:.2}s after the dead holder's last renewal (lease-duration {lease_duration}s, retry-period {retry}s)"
    );
    assert!(
        since_renew >= lease_duration,
        "took the Lease {since_renew:.2}s after its last renewal, before it lapsed"
    );
    // One retry period for the follower to see that last renewal, one for its
    // round to come around once lease-duration has passed (client-go's rule).
    assert!(
        since_renew <= lease_duration + 2.0 * retry + 0.5,
        "took over {since_renew:.2}s after the last renewal"
    );
    let taken = lease(&api);
    assert_eq!(
        taken["spec"]["holderIdentity"],
        second_id.as_str(),
        "{taken:#}"
    );
    assert_eq!(taken["spec"]["leaseTransitions"], 1, "{taken:#}");
    // Becoming leader reconciles the cluster plugins at once (trigger "leader").
    daemon.wait_for_log(
        Duration::from_secs(5),
        &["reconcile{plugin=cluster-job trigger=", "leader"],
    );
    tend_e2e::wait_for_plugin(
        port,
        "cluster-job",
        "cluster reconciles on the new leader",
        |p| p["reconciles"].as_u64().unwrap_or(0) >= 3,
    );

    // Cut the new holder off the API server (the only tend left: everyone's
    // requests hang): it stops leading, and its cluster plugin, within
    // renew-deadline (+ one retry), before its Lease could lapse for anyone
    // else; its node plugin keeps running.
    let renewed = rfc3339_secs(lease(&api)["spec"]["renewTime"].as_str().unwrap());
    let cut = epoch_secs(SystemTime::now());
    api.blackhole(60.0, None);
    let node_runs = reconciles(port, "node-job");
    wait_until(
        Duration::from_secs(15),
        "the cut-off holder to stop leading",
        || !leading(port),
    );
    let stopped = epoch_secs(SystemTime::now());
    let state = leader(port);
    // Its last renewal was at `renewed` or later (before the cut).
    let (since_cut, since_renewal) = (stopped - cut, stopped - renewed);
    eprintln!(
        "step-down: {since_cut:.2}s after the blackhole began, at most {since_renewal:.2}s after its last renewal (renew-deadline {renew_deadline}s, lease-duration {lease_duration}s): {state}"
    );
    assert!(
        state["note"].as_str().unwrap().contains("could not renew"),
        "{state:#}"
    );
    assert!(
        since_cut <= renew_deadline + retry + 0.5,
        "stopped leading {since_cut:.2}s after the cut"
    );
    assert!(
        since_renewal < lease_duration,
        "stopped {since_renewal:.2}s after its last renewal: the Lease could have lapsed first"
    );
    // Its cluster plugin stops (one in flight is cut), its node plugin does not.
    let cluster_runs = reconciles(port, "cluster-job");
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        reconciles(port, "cluster-job"),
        cluster_runs,
        "the cluster plugin ran after the host stopped leading"
    );
    assert!(
        reconciles(port, "node-job") >= node_runs + 4,
        "the node plugin stopped while the API was cut off"
    );
    assert!(!leading(port));

    // The partition heals: it still holds the Lease, renews, and leads again.
    api.end_blackhole();
    wait_until(WITHIN, "leading again after the partition", || {
        leading(port)
    });
    tend_e2e::wait_for_plugin(port, "cluster-job", "cluster reconciles again", |p| {
        p["reconciles"].as_u64().unwrap_or(0) > cluster_runs
    });
    drop(daemon);
}

/// Hole 2 of issue 15, from the elector's side: a third writer (the test,
/// standing in for a plugin with a `leases` grant) hands the Lease to the
/// follower. The holder stops at once; the follower does not start on a
/// record it did not write; at no poll do both lead; whoever takes the Lease
/// once the forged record has lapsed (client-go's expiry) leads next.
#[test]
fn a_lease_handed_to_the_follower_by_a_third_writer_never_makes_two_leaders() {
    let (lease_duration, retry) = (6.0, 1.0);
    let api = KubeApi::start();
    let a = elector(&api, "a");
    let b = elector(&api, "b");
    wait_until(WITHIN, "a leader", || leading(a.1) || leading(b.1));
    let (holder, follower) = match leading(a.1) {
        true => (a.1, b.1),
        false => (b.1, a.1),
    };
    let holder_id = leader(holder)["identity"].clone();
    wait_until(WITHIN, "the follower to see the holder", || {
        leader(follower)["holder"] == holder_id
    });
    // Read once the follower has published a round: before, its identity is
    // empty, and a record forged with an empty holder is a released Lease.
    let follower_id = leader(follower)["identity"].clone();

    let mut forged = lease(&api);
    forged["spec"]["holderIdentity"] = follower_id.clone();
    forged["spec"]["renewTime"] =
        json!(humantime::format_rfc3339_micros(SystemTime::now()).to_string());
    let (code, body) = call(
        &api,
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/tend",
        Some(&forged),
    );
    assert_eq!(code, 200, "{body}");
    let forged_at = Instant::now();
    let transitions = body["spec"]["leaseTransitions"].as_i64().unwrap_or(0);

    // Poll both until someone has led again for 3 s.
    let (mut holder_stopped, mut led_again, mut follower_distrusted) = (None, None, false);
    let mut last = (Value::Null, Value::Null);
    while led_again.is_none_or(|t: f64| forged_at.elapsed().as_secs_f64() < t + 3.0) {
        let elapsed = forged_at.elapsed().as_secs_f64();
        assert!(
            elapsed < 20.0,
            "nobody led again within 20 s of the forgery (holder stopped at {holder_stopped:?} s, led again at {led_again:?} s); last seen: {:#} {:#}",
            last.0,
            last.1
        );
        // Paced like every other wait: a busy poll of two debug daemons
        // competes with the electors and the API fake on two cores.
        std::thread::sleep(Duration::from_millis(20));
        let (h, f) = (leader(holder), leader(follower));
        let (h_leads, f_leads) = (h["leading"] == true, f["leading"] == true);
        let (h_identity, f_identity) = (&h["identity"], &f["identity"]);
        assert!(
            !(h_leads && f_leads),
            "both lead {elapsed:.2}s after the forgery: {h:#} {f:#}"
        );
        if holder_stopped.is_none() && !h_leads {
            holder_stopped = Some(elapsed);
            eprintln!(
                "the holder stopped {elapsed:.2}s after the forgery: {}",
                h["note"]
            );
        }
        if led_again.is_none() && holder_stopped.is_some() && (h_leads || f_leads) {
            led_again = Some(elapsed);
            let who = if h_leads { &h_identity } else { &f_identity };
            eprintln!("{who} leads {elapsed:.2}s after the forgery");
        }
        if led_again.is_none() && f["note"].as_str().unwrap().contains("not written by it") {
            follower_distrusted = true;
        }
        last = (h, f);
    }
    let (stopped, again) = (holder_stopped.unwrap(), led_again.unwrap());
    assert!(
        stopped <= retry + 0.5,
        "the holder stopped {stopped:.2}s after the forgery"
    );
    assert!(
        follower_distrusted,
        "the follower never said it distrusts the record"
    );
    // Each saw the forged record within a retry period of the write, so nobody
    // may take it before lease-duration has passed since the write.
    assert!(
        again >= lease_duration && again <= lease_duration + 2.0 * retry + 1.0,
        "led again {again:.2}s after the forgery"
    );
    let taken = lease(&api);
    let winner = if leading(holder) {
        &holder_id
    } else {
        &follower_id
    };
    assert_eq!(&taken["spec"]["holderIdentity"], winner, "{taken:#}");
    assert_eq!(
        taken["spec"]["leaseTransitions"],
        transitions + 1,
        "{taken:#}"
    );
    drop(a);
    drop(b);
}

#[test]
fn tend_rbac_prints_the_deploy_examples() {
    let deploy = workspace_root().join("examples/deploy");
    for scope in ["node", "cluster"] {
        let output = Command::new(tend_bin())
            .args(["rbac", "-c"])
            .arg(deploy.join(format!("{scope}-config.toml")))
            .env("TEND_LOG", "warn")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let expected = std::fs::read_to_string(deploy.join(format!("rbac-{scope}.yaml"))).unwrap();
        assert_eq!(
            String::from_utf8(output.stdout).unwrap(),
            expected,
            "tend rbac -c examples/deploy/{scope}-config.toml differs from rbac-{scope}.yaml"
        );
    }
}

/// A list served by a watch cache answers `unavailable` while the cache's
/// watch has been failing for longer than its grace (10 s), never the stale
/// Node list; once the API server answers again, the cache lists anew and
/// serves what changed meanwhile.
#[test]
fn a_cache_whose_watch_fails_answers_unavailable_then_serves_again() {
    let api = KubeApi::start();
    create_node(&api, "n-1");
    create_node(&api, "n-2");
    let port = free_port();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "lister");
    sandbox.config_on_node(
        "n-1",
        &kube_host(&api, &sandbox, Some(port)),
        &chaos(
            "lister",
            "interval = \"1s\"\n",
            Some(r#"[{ resource = "nodes", verbs = ["list", "watch"] }]"#),
            "mode = \"kube-list\"\napi-version = \"v1\"\nkind = \"Node\"",
        ),
    );
    api.grant_rbac(&sandbox);
    let _daemon = sandbox.daemon();
    tend_e2e::wait_for_plugin(port, "lister", "a cached list", |p| {
        p["last"]["message"] == "listed 2 Node: n-1, n-2"
    });
    wait_until(WITHIN, "tend's watch on nodes", || {
        api.open_watches("nodes") == 1
    });

    // tend's requests fail (503) and its watch ends; the test's are answered.
    let failing_from = Instant::now();
    api.outage(120.0, Some("tend/"));
    create_node(&api, "n-3");
    let refused = tend_e2e::wait_for_plugin(port, "lister", "the list refused", |p| {
        p["last"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("the watch of nodes has been failing since"))
    });
    let refused_after = failing_from.elapsed();
    let message = refused["last"]["message"].as_str().unwrap();
    eprintln!("refused {refused_after:?} into the outage: {message}");
    assert!(
        message.contains("unavailable") && message.contains("cached contents are not served"),
        "{refused:#}"
    );
    assert!(message.contains("503 ServiceUnavailable"), "{message}");
    assert!(
        refused_after >= Duration::from_secs(10),
        "refused {refused_after:?} into the outage, within the grace"
    );
    // Not served stale on any later reconcile of the outage either.
    let runs = reconciles(port, "lister");
    let again = tend_e2e::wait_for_plugin(port, "lister", "reconciles during the outage", |p| {
        p["reconciles"].as_u64().unwrap() >= runs + 2
    });
    assert!(
        again["last"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("has been failing since")),
        "{again:#}"
    );

    api.end_outage();
    tend_e2e::wait_for_plugin(port, "lister", "the list served again", |p| {
        p["last"]["message"] == "listed 3 Node: n-1, n-2, n-3"
    });
}

/// A budget spent by the leader stays spent after a fail-over: the leader
/// shares its ledger in the Lease (annotation tend.dev/budgets) right after
/// the spend, and the replica taking the Lease over merges it before its
/// first cluster reconcile, so it refuses the same deletion as
/// `budget-exhausted` within the same hour instead of spending the budget again.
#[test]
fn a_budget_spent_by_the_leader_stays_spent_after_a_fail_over() {
    spend_then_fail_over(None);
}

/// The attack of issue 25 (hole 3): after the leader's one deletion of a
/// 1-per-hour budget, a second cluster plugin writes 250 new files with
/// 250-byte names, each a spend of another budget, newer than the deletion
/// and together more than the whole Lease share (64 KiB) in clear. Each
/// budget has its own share, so the deletion stays in the Lease, and the
/// replica taking over after a kill -9 refuses a second deletion as it does
/// without the writer.
#[test]
fn another_budgets_flood_cannot_push_a_spend_out_of_the_lease_before_a_fail_over() {
    spend_then_fail_over(Some(250));
}

/// The shared ledgers in the Lease, parsed (`{}` when none).
fn shared_budgets(api: &KubeApi) -> Value {
    let annotations = lease(api)["metadata"]["annotations"].clone();
    let text = annotations["tend.dev/budgets"].as_str().unwrap_or("{}");
    assert!(text.len() <= 64 * 1024, "{} bytes shared", text.len());
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Two replicas with a 1-per-hour budget `deletes` on kube.delete (a
/// cluster `reaper` deleting the ConfigMap "doomed") and a large budget
/// `writes` on files.write. The leader deletes once; with `flood`, a cluster
/// `writer` then writes that many new files; the leader is killed, and the
/// replica taking over must refuse to delete "doomed" (created again) inside
/// the hour.
fn spend_then_fail_over(flood: Option<u32>) {
    let api = KubeApi::start();
    let configmaps = "/api/v1/namespaces/default/configmaps";
    let doomed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "doomed"}});
    let (code, body) = call(&api, "POST", configmaps, Some(&doomed));
    assert_eq!(code, 201, "{body}");
    let budgets = "[host.budgets.deletes]\noperations = [\"kube.delete\"]\nmax = 1\nper = \"1h\"\n\
                   [host.budgets.writes]\noperations = [\"files.write\"]\nmax = 100000\nper = \"1h\"\n";
    let reaper = chaos(
        "reaper",
        "scope = \"cluster\"\ninterval = \"1s\"\n",
        Some(r#"[{ resource = "configmaps", namespaces = ["default"], verbs = ["delete"] }]"#),
        "mode = \"kube-call\"\nop = \"delete\"\napi-version = \"v1\"\nkind = \"ConfigMap\"\nnamespace = \"default\"\nname = \"doomed\"",
    );
    let out = tempfile::tempdir().unwrap();
    let start = |node: &str| {
        let dir = out.path().join(node);
        std::fs::create_dir_all(&dir).unwrap();
        let (names, plugins) = match flood {
            None => (vec!["reaper"], reaper.clone()),
            Some(count) => (
                vec!["reaper", "writer"],
                reaper.clone()
                    + &format!(
                        "[plugins.writer]\nscope = \"cluster\"\ninterval = \"1s\"\n\
                         [plugins.writer.grants]\nfiles = [{{ path = \"{d}\", write = true }}]\n\
                         [plugins.writer.config]\nmode = \"flood\"\ndir = \"{d}\"\ncount = {count}\nname-len = 250\n",
                        d = dir.display()
                    ),
            ),
        };
        (replica(&api, node, budgets, &names, &plugins), dir)
    };
    let (a, a_dir) = start("a");
    let (b, b_dir) = start("b");
    wait_until(WITHIN, "a leader", || leading(a.1) || leading(b.1));
    // Daemons first: each prints its log from its sandbox when a test fails.
    let ((holder, holder_port, _holder_sandbox), holder_dir, (follower, port, _sandbox)) =
        match leading(a.1) {
            true => (a, a_dir, b),
            false => (b, b_dir, a),
        };
    let exhausted = |p: &Value| {
        p["last"]["message"].as_str().is_some_and(|m| {
            m.starts_with("budget-exhausted: ")
                && m.contains("budget \"deletes\" allows 1 of kube.delete per 1h")
        })
    };

    // The leader deletes once, then its budget refuses; its Lease says so.
    tend_e2e::wait_for_plugin(
        holder_port,
        "reaper",
        "the leader's budget spent",
        exhausted,
    );
    let exists = || call(&api, "GET", &format!("{configmaps}/doomed"), None).0 == 200;
    assert!(!exists(), "the leader's one deletion");
    let deleted_at = shared_budgets(&api)["deletes"][0][0]
        .as_u64()
        .unwrap_or_else(|| panic!("the deletion is shared: {:#}", lease(&api)));
    if let Some(count) = flood {
        // The flood: the writer's files removed, its next reconciles write
        // them anew, each a spend newer than the deletion.
        std::fs::remove_dir_all(&holder_dir).unwrap();
        std::fs::create_dir_all(&holder_dir).unwrap();
        wait_until(WITHIN, "the flood in the Lease", || {
            let writes = shared_budgets(&api)["writes"].clone();
            let newer = writes.as_array().map_or(0, |spends| {
                spends
                    .iter()
                    .filter(|s| s[0].as_u64().is_some_and(|at| at > deleted_at))
                    .count()
            });
            newer >= count as usize
        });
        let in_clear = 20 + holder_dir.display().to_string().len() + 1 + 250;
        assert!(
            count as usize * in_clear > 64 * 1024,
            "the flood outweighs the whole Lease share in clear"
        );
        let shared = shared_budgets(&api);
        assert_eq!(
            shared["deletes"][0][0], deleted_at,
            "the deletion is still shared after the flood: {shared:#}"
        );
    }
    let (code, body) = call(&api, "POST", configmaps, Some(&doomed));
    assert_eq!(code, 201, "{body}");

    // kill -9 the leader: the follower takes over and refuses the same deletion.
    let dead = format!("{}", holder.pid());
    drop(holder);
    wait_until(Duration::from_secs(15), "the follower to take over", || {
        leading(port)
    });
    let holder_now = lease(&api)["spec"]["holderIdentity"].clone();
    assert!(
        holder_now.as_str().is_some_and(|h| !h.ends_with(&dead)),
        "{holder_now}"
    );
    let refused = tend_e2e::wait_for_plugin(port, "reaper", "the new leader's reconcile", |p| {
        p["reconciles"].as_u64().unwrap_or(0) >= 2
    });
    assert!(exhausted(&refused), "{refused:#}");
    assert!(exists(), "the new leader spent the budget again");
    let budgets = status(port)["budgets"].clone();
    let deletes = budgets
        .as_array()
        .and_then(|b| b.iter().find(|b| b["name"] == "deletes"))
        .unwrap_or_else(|| panic!("{budgets:#}"));
    assert_eq!(deletes["used"], 1, "{deletes:#}");
    assert_eq!(shared_budgets(&api)["deletes"][0][0], deleted_at);
    drop(follower);
}

/// kube-rs's watcher behind the shared cache survives a 410: the fake keeps
/// only 5 events, tend's watch goes silent while 20 changes happen, then is
/// cut; resuming from its old resourceVersion gets 410 Expired, the reflector
/// lists again, and the next deletion still reconciles the plugin.
#[test]
fn the_watch_cache_survives_410_gone_and_triggers_again() {
    let api = KubeApi::start_with(&["--history", "5"]);
    let port = free_port();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "pod-watcher");
    sandbox.config_on_node(
        "node-1",
        &kube_host(&api, &sandbox, Some(port)),
        &chaos(
            "pod-watcher",
            "",
            Some(r#"[{ resource = "pods", namespaces = ["default"], verbs = ["list", "watch"] }]"#),
            "mode = \"kube-watch\"",
        ),
    );
    api.grant_rbac(&sandbox);
    let _daemon = sandbox.daemon();
    tend_e2e::wait_for_plugin(port, "pod-watcher", "its startup reconcile", |p| {
        p["reconciles"] == 1
    });
    wait_until(WITHIN, "tend's watch on pods", || {
        api.open_watches("pods") == 1
    });

    let seq = api.request_seq();
    api.blackhole(30.0, Some("tend/"));
    for i in 0..20 {
        let (code, body) = call(
            &api,
            "POST",
            "/api/v1/namespaces/default/pods",
            Some(&pod(&format!("quiet-{i}"))),
        );
        assert_eq!(code, 201, "{body}");
    }
    api.compact();
    api.end_blackhole();
    // Told its resourceVersion is gone (410 Expired), the reflector lists again.
    wait_until(WITHIN, "tend to list pods again after the 410", || {
        api.requests_since(seq).iter().any(|r| {
            r["verb"] == "list"
                && r["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("tend/"))
        })
    });
    wait_until(WITHIN, "tend's watch on pods again", || {
        api.open_watches("pods") == 1
    });

    let before = reconciles(port, "pod-watcher");
    let (code, body) = call(
        &api,
        "DELETE",
        "/api/v1/namespaces/default/pods/quiet-7",
        None,
    );
    assert_eq!(code, 200, "{body}");
    tend_e2e::wait_for_plugin(
        port,
        "pod-watcher",
        "the reconcile of the deletion after the 410",
        |p| {
            p["reconciles"].as_u64().unwrap() > before
                && p["last"]["triggers"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t == "kube:pods/default/quiet-7"))
        },
    );
}
