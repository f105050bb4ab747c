//! A hostile plugin against the Kubernetes capability's resource bounds, each
//! test written as the attack: the real `tend`, the `chaos` plugin's kube load
//! modes, the fake API server (tests/peers/kube-apiserver.py), which counts
//! what tend really sent. Watch caches are charged to the plugin that starts
//! them, requests wait for tokens, discovery misses are cached, Event floods
//! collapse, and tend's memory stays bounded. Every wait is on a condition
//! with a deadline.

use serde_json::{Value, json};
use std::time::Duration;
use tend_e2e::{Daemon, KubeApi, Sandbox, free_port, metric, wait_for_plugin, wait_until};

const WITHIN: Duration = Duration::from_secs(30);

/// `[host]` lines: the daemon's port and `[host.kube]` with the kubeconfig
/// [`KubeApi::grant_rbac`] writes for the tend of `sandbox`, with `kube` lines.
fn kube_host(api: &KubeApi, sandbox: &Sandbox, port: u16, kube: &str) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\n{}{kube}",
        api.host_kube(sandbox)
    )
}

/// One chaos plugin: `[plugins.NAME]` with `extra` lines, its kube grant, its
/// limits (TOML lines) and its config (TOML lines).
fn chaos(name: &str, extra: &str, grant: &str, limits: &str, config: &str) -> String {
    format!(
        "[plugins.{name}]\n{extra}[plugins.{name}.grants]\nkube = {grant}\n[plugins.{name}.limits]\n{limits}\n[plugins.{name}.config]\n{config}\n"
    )
}

fn start(api: &KubeApi, sandbox: &Sandbox, port: u16, kube: &str, plugins: &str) -> Daemon {
    sandbox.config_on_node("node-1", &kube_host(api, sandbox, port, kube), plugins);
    api.grant_rbac(sandbox);
    sandbox.daemon()
}

/// Requests tend sent (its User-Agent says "tend/") after `seq`.
fn tends_requests(api: &KubeApi, seq: u64) -> Vec<Value> {
    api.requests_since(seq)
        .into_iter()
        .filter(|r| {
            r["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("tend/"))
        })
        .collect()
}

fn create(api: &KubeApi, path: &str, object: Value) {
    let (code, body) = api.call("POST", path, Some(&object));
    assert_eq!(code, 201, "POST {path}: {body}");
}

fn message(port: u16, plugin: &str) -> String {
    tend_e2e::plugin_status(port, plugin)["last"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The count before "ok" in a chaos tally ("12 ok, errors: ...").
fn oks(message: &str) -> u64 {
    message
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("not a tally: {message}"))
}

#[test]
fn one_plugins_many_selectors_cannot_starve_another_plugins_watch_trigger() {
    let api = KubeApi::start();
    create(
        &api,
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}),
    );
    let port = free_port();
    let sandbox = Sandbox::new();
    sandbox
        .add_plugin("chaos", "hoarder")
        .add_plugin("chaos", "pod-watcher");
    // The host runs at most 16 caches, the hoarder's own quota is 16 (the default).
    let kube = "caches = 16\n";
    let hoarder = chaos(
        "hoarder",
        "",
        r#"[{ resource = "configmaps", namespaces = ["default"], verbs = ["list"] }]"#,
        "kube-qps = 200\nkube-burst = 200",
        "mode = \"kube-list-many\"\napi-version = \"v1\"\nkind = \"ConfigMap\"\nnamespace = \"default\"\ncount = 70",
    );
    let _daemon = start(&api, &sandbox, port, kube, &hoarder);
    let done = wait_for_plugin(port, "hoarder", "its 70 lists", |p| p["last"].is_object());
    assert!(
        message(port, "hoarder").starts_with("70 ok"),
        "every list answered: {done:#}"
    );
    assert_eq!(api.open_watches("configmaps"), 16, "{:#}", api.watches());
    assert_eq!(metric(port, "tend_kube_plugin_caches"), Some(16.0));
    // 54 lists beyond the quota were read directly, and said so.
    assert_eq!(metric(port, "tend_kube_direct_lists_total"), Some(54.0));

    // A watch trigger added later still gets its cache, in place of an idle list cache.
    let watcher = chaos(
        "pod-watcher",
        "",
        r#"[{ resource = "pods", namespaces = ["default"], verbs = ["list", "watch"] }]"#,
        "",
        "mode = \"kube-watch\"",
    );
    sandbox.config_on_node(
        "node-1",
        &kube_host(&api, &sandbox, port, kube),
        &(hoarder + &watcher),
    );
    api.grant_rbac(&sandbox);
    wait_for_plugin(port, "pod-watcher", "its startup reconcile", |p| {
        p["reconciles"] == 1
    });
    wait_until(WITHIN, "tend's watch of pods", || {
        api.open_watches("pods") == 1
    });
    assert_eq!(metric(port, "tend_kube_cache_evictions_total"), Some(1.0));
    assert!(api.open_watches("configmaps") <= 15, "{:#}", api.watches());
    create(
        &api,
        "/api/v1/namespaces/default/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"},
               "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}),
    );
    let fired = wait_for_plugin(port, "pod-watcher", "the trigger of the new pod", |p| {
        p["last"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("kube:pods/default/w")
    });
    assert!(fired["reconciles"].as_u64().unwrap() >= 2, "{fired:#}");
}

#[test]
fn a_thousand_gets_in_one_reconcile_are_held_to_the_request_rate() {
    let api = KubeApi::start();
    create(
        &api,
        "/api/v1/nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}),
    );
    let port = free_port();
    let sandbox = Sandbox::new();
    sandbox
        .add_plugin("chaos", "getter")
        .add_plugin("chaos", "neighbour");
    let get = |kind: &str, name: &str, count: u32| {
        format!(
            "mode = \"kube-get-many\"\napi-version = \"v1\"\nkind = \"{kind}\"\nname = \"{name}\"\ncount = {count}"
        )
    };
    // The defaults: 5 requests a second and a burst of 10 per plugin; a 4 s
    // reconcile. Both in the elector's scope: one tend is one ServiceAccount.
    let plugins = chaos(
        "getter",
        "scope = \"cluster\"\n",
        r#"[{ resource = "nodes", verbs = ["get"], names = ["$NODE"] }]"#,
        "timeout = \"4s\"",
        &get("Node", "node-1", 1000),
    ) + &chaos(
        "neighbour",
        "scope = \"cluster\"\ninterval = \"1s\"\n",
        r#"[{ resource = "namespaces", verbs = ["get"], names = ["default"] }]"#,
        "",
        &get("Namespace", "default", 3),
    );
    let kube = "[host.leader-election]\nnamespace = \"kube-system\"\nname = \"tend\"\nlease-duration = \"6s\"\nrenew-deadline = \"4s\"\nretry-period = \"1s\"\n";
    let seq = api.request_seq();
    let _daemon = start(&api, &sandbox, port, kube, &plugins);
    let done = wait_for_plugin(port, "getter", "its 1000 gets", |p| p["last"].is_object());
    let said = message(port, "getter");
    let made = tends_requests(&api, seq);
    let getters = made
        .iter()
        .filter(|r| r["verb"] == "get" && r["resource"] == "nodes")
        .count();
    eprintln!(
        "1000 gets in a 4 s reconcile: {getters} reached the API server; the plugin saw: {said}"
    );
    assert!(oks(&said) <= 10 + 5 * 4 + 1, "{said}");
    assert!(oks(&said) >= 10, "{said}");
    assert!(
        getters <= 10 + 5 * 4 + 1,
        "{getters} gets in ~4 s: {done:#}"
    );
    assert!(
        said.contains("\"timeout\"")
            && said.contains("raise [plugins.getter.limits] kube-qps (now 5)"),
        "{said}"
    );
    assert!(metric(port, "tend_kube_rate_waits_total").unwrap() >= 10.0);
    // The elector renewed its Lease all along, and the neighbour's own bucket served it.
    wait_until(WITHIN, "the leader", || {
        tend_e2e::status(port)["leader"]["leading"] == true
    });
    let renewals = tends_requests(&api, seq)
        .iter()
        .filter(|r| {
            r["resource"] == "leases.coordination.k8s.io"
                && (r["verb"] == "update" || r["verb"] == "patch")
        })
        .count();
    assert!(renewals >= 2, "{renewals} Lease renewals during the flood");
    wait_for_plugin(port, "neighbour", "a reconcile after the flood", |p| {
        p["reconciles"].as_u64().unwrap_or(0) >= 3
    });
    assert_eq!(message(port, "neighbour"), "3 ok, errors: {}; first: ");
}

#[test]
fn gets_of_three_hundred_unknown_kinds_cost_a_couple_of_discovery_requests() {
    let api = KubeApi::start();
    let port = free_port();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "prober");
    let plugins = chaos(
        "prober",
        "",
        r#"[{ resource = "nodes", verbs = ["get"] }]"#,
        "",
        "mode = \"kube-get-many\"\napi-version = \"v1\"\nkind = \"Widget\"\nname = \"w\"\ncount = 300\ndistinct-kinds = true",
    );
    let seq = api.request_seq();
    let _daemon = start(&api, &sandbox, port, "", &plugins);
    wait_for_plugin(port, "prober", "its 300 gets", |p| p["last"].is_object());
    let said = message(port, "prober");
    assert!(
        said.starts_with("0 ok, errors: {\"not-found\": 300}"),
        "{said}"
    );
    let discovery: Vec<Value> = tends_requests(&api, seq)
        .into_iter()
        .filter(|r| r["path"].as_str().unwrap().starts_with("/api") && r["verb"] == "nonresource")
        .collect();
    eprintln!(
        "300 gets of unknown kinds: {} discovery requests",
        discovery.len()
    );
    assert!(discovery.len() <= 2, "{discovery:#?}");
    assert!(metric(port, "tend_kube_discovery_misses_cached_total").unwrap() >= 299.0);
}

#[test]
fn an_event_flood_makes_at_most_a_burst_of_events_about_one_object() {
    let api = KubeApi::start();
    create(
        &api,
        "/api/v1/nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}),
    );
    let port = free_port();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "flooder");
    // No request rate in the way: the Event bound alone holds the flood.
    let kube = "qps = 5000\nburst = 5000\n";
    let plugins = chaos(
        "flooder",
        "",
        r#"[{ resource = "nodes", verbs = ["get"], names = ["$NODE"] }]"#,
        "kube-qps = 5000\nkube-burst = 5000",
        "mode = \"kube-event-flood\"\napi-version = \"v1\"\nkind = \"Node\"\nname = \"node-1\"\ncount = 256\nrequeue-ms = 1000",
    );
    let _daemon = start(&api, &sandbox, port, kube, &plugins);
    let flooded = wait_for_plugin(port, "flooder", "four floods of 256 Events", |p| {
        p["reconciles"].as_u64().unwrap_or(0) >= 4
    });
    assert!(
        message(port, "flooder").starts_with("256 ok"),
        "the plugin sees no error: {flooded:#}"
    );
    let (code, events) = api.call("GET", "/apis/events.k8s.io/v1/events", None);
    assert_eq!(code, 200, "{events}");
    let floods: Vec<&Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "Flood")
        .collect();
    eprintln!("{} Flood Events after 4 x 256 emits", floods.len());
    assert!(floods.len() <= 26, "{} Events: {events:#}", floods.len());
    let combined: Vec<&&Value> = floods
        .iter()
        .filter(|e| {
            e["note"]
                .as_str()
                .unwrap()
                .starts_with("(combined from similar events): ")
        })
        .collect();
    assert_eq!(combined.len(), 1, "one Event combines the rest");
    let count = combined[0]["series"]["count"].as_u64().unwrap_or(1);
    assert!(count >= 3 * 256, "series.count {count}");
    assert!(metric(port, "tend_kube_events_combined_total").unwrap() >= 3.0 * 256.0);
}

/// VmRSS of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn sixty_four_caches_of_large_config_maps_keep_tends_memory_bounded() {
    let api = KubeApi::start();
    // 16 ConfigMaps of 256 KiB: 4 MiB a cache, 256 MiB for 64 caches unbounded.
    for i in 0..16 {
        create(
            &api,
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("big-{i}")},
                   "data": {"blob": "x".repeat(256 << 10)}}),
        );
    }
    let port = free_port();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "hoarder");
    let plugins = chaos(
        "hoarder",
        "",
        r#"[{ resource = "configmaps", namespaces = ["default"], verbs = ["list"] }]"#,
        // Its cache count is no bound here: its bytes (kube-cache-bytes, 32 MiB by default) are.
        "kube-caches = 64\nkube-qps = 200\nkube-burst = 200\nread-per-reconcile = \"1GiB\"\nmemory = \"256MiB\"\ntimeout = \"120s\"",
        "mode = \"kube-list-many\"\napi-version = \"v1\"\nkind = \"ConfigMap\"\nnamespace = \"default\"\ncount = 64",
    );
    let daemon = start(&api, &sandbox, port, "", &plugins);
    wait_until(WITHIN, "the daemon", || {
        metric(port, "tend_kube_watches").is_some()
    });
    let before = rss_kib(daemon.pid());
    let done = wait_for_plugin(port, "hoarder", "its 64 lists", |p| p["last"].is_object());
    assert!(message(port, "hoarder").starts_with("64 ok"), "{done:#}");
    let after = rss_kib(daemon.pid());
    let cached = metric(port, "tend_kube_plugin_cache_bytes").unwrap();
    let caches = metric(port, "tend_kube_plugin_caches").unwrap();
    eprintln!(
        "64 lists of 16 x 256 KiB ConfigMaps: tend RSS {} -> {} MiB; {caches} caches of {:.1} MiB charged to the plugin; {} direct lists",
        before / 1024,
        after / 1024,
        cached / f64::from(1 << 20),
        metric(port, "tend_kube_direct_lists_total").unwrap_or(0.0)
    );
    assert!(
        cached <= f64::from(32 << 20) + f64::from(5 << 20),
        "{cached} bytes cached"
    );
    assert!(caches < 64.0, "the byte bound stopped new caches");
    assert!(metric(port, "tend_kube_direct_lists_total").unwrap() >= 50.0);
    // Growth, not an absolute size (a debug build's own size varies): what the
    // lists asked to hold is 256 MiB, what the bounds allow 37 MiB.
    assert!(
        after.saturating_sub(before) < 96 * 1024,
        "tend's RSS grew {} -> {} MiB",
        before / 1024,
        after / 1024
    );
}
