//! The `conditions` capability attacked: a hostile plugin (the test-only
//! `chaos` plugin's `condition` and `condition-flood` modes), a hostile book
//! planted in the state directory, and a hostile API server (the fake,
//! tests/peers/kube-apiserver.py, blackholed). The real `tend`; the fake
//! counts what tend really wrote. Each test fails if the hole is there.
//! Every wait is on a condition with a deadline.

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tend_e2e::{
    Daemon, KubeApi, Sandbox, free_port, http_get, kubelet_conditions, metric, plugin_status,
    wait_until,
};

/// A flood's reconciles under a loaded CI machine.
const FLOOD_WITHIN: Duration = Duration::from_secs(120);
const WITHIN: Duration = Duration::from_secs(30);
const NODE: &str = "e2e-node";

fn host(api: &KubeApi, sandbox: &Sandbox, port: u16) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\n[host.conditions]\nheartbeat = \"5m\"\n{}",
        api.host_kube(sandbox)
    )
}

/// A chaos plugin `name` granted `grant` (a TOML array), in mode `mode`
/// with `config` (TOML lines).
fn chaos(name: &str, grant: &str, mode: &str, config: &str) -> String {
    format!(
        "[plugins.{name}]\ninterval = \"24h\"\n[plugins.{name}.grants]\nconditions = {grant}\n[plugins.{name}.config]\nmode = \"{mode}\"\n{config}\n"
    )
}

/// One `set` of `condition` with `reason`.
fn set(name: &str, grant: &str, condition: &str, reason: &str) -> String {
    chaos(
        name,
        grant,
        "condition",
        &format!(
            "op = \"set\"\ncondition = \"{condition}\"\nreason = \"{reason}\"\nmessage = \"m\""
        ),
    )
}

/// `count` calls of `op` on FloodProblem each reconcile, again after 100 ms.
fn flood(op: &str, count: u32, ttl: &str) -> String {
    chaos(
        "flooder",
        r#"[{ condition = "FloodProblem", taint-on = { effect = "NoSchedule" } }]"#,
        "condition-flood",
        &format!(
            "op = \"{op}\"\ncondition = \"FloodProblem\"\ncount = {count}\nrequeue-ms = 100\n{ttl}"
        ),
    )
}

fn node(api: &KubeApi) -> Value {
    let (status, node) = api.call("GET", &format!("/api/v1/nodes/{NODE}"), None);
    assert_eq!(status, 200, "{node}");
    node
}

fn condition(node: &Value, kind: &str) -> Option<Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
}

fn taint_keys(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .map(|taints| {
            taints
                .iter()
                .filter_map(|t| t["key"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The kubelet's conditions are exactly as the kubelet wrote them.
fn assert_kubelets_untouched(api: &KubeApi) {
    let node = node(api);
    for kubelet in kubelet_conditions().as_array().unwrap() {
        let kind = kubelet["type"].as_str().unwrap();
        assert_eq!(
            condition(&node, kind).as_ref(),
            Some(kubelet),
            "{kind} is the kubelet's: {node:#}"
        );
    }
}

fn start(sandbox: &Sandbox, port: u16) -> Daemon {
    let daemon = sandbox.daemon();
    wait_until(WITHIN, "/readyz", || {
        matches!(http_get(port, "/readyz"), Ok((200, _)))
    });
    daemon
}

fn reconciles(port: u16, plugin: &str) -> u64 {
    plugin_status(port, plugin)["reconciles"]
        .as_u64()
        .unwrap_or(0)
}

fn status_writes(api: &KubeApi) -> usize {
    api.writes_to(&format!("/api/v1/nodes/{NODE}/status"))
}

/// Writes to the Node itself (taints), not its status.
fn taint_writes(api: &KubeApi) -> usize {
    api.writes_to(&format!("/api/v1/nodes/{NODE}")) - status_writes(api)
}

/// A held condition as a book entry: shown as it says, written as shown.
fn planted(owner: &str, reason: &str) -> Value {
    let shown = json!({ "active": false, "reason": reason, "message": "planted", "since": 1 });
    json!({
        "owner": owner, "now": shown, "ttl": null, "expires": null,
        "taint": "NoExecute", "written": shown, "orphaned": false,
    })
}

#[test]
fn a_planted_book_never_writes_nor_removes_a_kubelet_condition_and_a_plan_holds_nothing() {
    let api = KubeApi::start();
    api.seed_node(NODE);
    // An admin's taints: tend.dev/ is Tend's prefix (documented), any other is not.
    let taints = json!({ "spec": { "taints": [
        { "key": "example.com/keep", "effect": "NoSchedule" },
        { "key": "example.com/valued", "value": "v", "effect": "NoExecute" },
    ] } });
    let (code, body) = api
        .call_raw(
            "PATCH",
            &format!("/api/v1/nodes/{NODE}"),
            "application/merge-patch+json",
            &taints.to_string(),
            None,
            Duration::from_secs(30),
        )
        .unwrap();
    assert_eq!(code, 200, "{body}");
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "mallory");
    let port = free_port();
    let grant = r#"["MalloryProblem"]"#;
    sandbox.config_with_host(
        &host(&api, &sandbox, port),
        &set("mallory", grant, "MalloryProblem", "Mine"),
    );
    api.grant_rbac(&sandbox);
    // The book says mallory (a configured plugin) holds the kubelet's types
    // and Tend wrote them: orphans, which a removal would `$patch: delete`.
    std::fs::create_dir_all(sandbox.path("state")).unwrap();
    let book = json!({
        "conditions": {
            "Ready": planted("mallory", "Planted"),
            "DiskPressure": planted("mallory", "Planted"),
            "Ready ": planted("mallory", "Planted"),
            "Escape": planted("mallory", "Bad\u{1b}[2J"),
        },
        "last_write": 1,
        "taints": { "Ready": "NoExecute" },
    });
    std::fs::write(sandbox.path("state/conditions.json"), book.to_string()).unwrap();

    let daemon = start(&sandbox, port);
    wait_until(WITHIN, "MalloryProblem True on the Node", || {
        condition(&node(&api), "MalloryProblem").is_some_and(|c| c["status"] == "True")
    });
    wait_until(WITHIN, "the book saved", || {
        std::fs::read_to_string(sandbox.path("state/conditions.json"))
            .is_ok_and(|b| b.contains("MalloryProblem"))
    });
    assert_kubelets_untouched(&api);
    let shown = node(&api);
    let types: Vec<&str> = shown["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(
        types.len(),
        6,
        "the kubelet's five and mallory's: {types:?}"
    );
    assert!(
        !types.contains(&"Escape") && !types.contains(&"Ready "),
        "{types:?}"
    );
    assert_eq!(
        taint_keys(&shown),
        ["example.com/keep", "example.com/valued"],
        "only Tend's prefix is Tend's"
    );
    let saved = std::fs::read_to_string(sandbox.path("state/conditions.json")).unwrap();
    assert!(
        !saved.contains("\"Ready") && !saved.contains("DiskPressure"),
        "{saved}"
    );
    drop(daemon);

    // A plan of a clear, and of a renewal, holds nothing and writes nothing.
    let before = std::fs::read_to_string(sandbox.path("state/conditions.json")).unwrap();
    let writes = api.writes_to(&format!("/api/v1/nodes/{NODE}"));
    for config in [
        chaos(
            "mallory",
            grant,
            "condition",
            "op = \"clear\"\ncondition = \"MalloryProblem\"\nreason = \"Fine\"\nmessage = \"m\"",
        ),
        chaos(
            "mallory",
            grant,
            "condition",
            "op = \"set\"\ncondition = \"MalloryProblem\"\nreason = \"Mine\"\nmessage = \"m\"\nttl = 60",
        ),
    ] {
        sandbox.config_with_host(&host(&api, &sandbox, port), &config);
        let plan = sandbox.tend(&["plan", "mallory"]);
        assert!(plan.success, "{}{}", plan.stdout, plan.stderr);
        assert_eq!(
            std::fs::read_to_string(sandbox.path("state/conditions.json")).unwrap(),
            before,
            "a plan holds nothing: {}",
            plan.stdout
        );
    }
    assert_eq!(api.writes_to(&format!("/api/v1/nodes/{NODE}")), writes);
    assert_eq!(
        condition(&node(&api), "MalloryProblem").unwrap()["status"],
        "True"
    );
}

/// A flooder started in `op` mode (`count` calls a reconcile, `ttl` a TOML
/// line or ""), its first report on the Node, with the daemon and the
/// status writes and reconciles counted from there. Each flood test starts
/// its own: after another mode, a change the writer holds back (up to
/// `MIN_CHANGE_GAP`) may or may not land, and a count across modes would
/// count it or not (stop 47's CI counted it).
fn flooding(op: &str, count: u32, ttl: &str) -> (KubeApi, Sandbox, u16, Daemon) {
    let api = KubeApi::start();
    api.seed_node(NODE);
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "flooder");
    let port = free_port();
    sandbox.config_with_host(&host(&api, &sandbox, port), &flood(op, count, ttl));
    api.grant_rbac(&sandbox);
    let daemon = start(&sandbox, port);
    wait_until(WITHIN, "FloodProblem on the Node", || {
        condition(&node(&api), "FloodProblem").is_some()
    });
    (api, sandbox, port, daemon)
}

#[test]
fn a_flood_of_flips_is_one_status_write_a_gap() {
    // 300 calls a reconcile, every 100 ms: set and clear in turn.
    let (api, _sandbox, port, daemon) = flooding("flip", 300, "");
    let (status0, taints0, runs0) = (
        status_writes(&api),
        taint_writes(&api),
        reconciles(port, "flooder"),
    );
    let began = Instant::now();
    // Each reconcile journals 256 changes through the gate (fsynced): on a
    // loaded machine 8 of them may take longer than 20 s.
    wait_until(FLOOD_WITHIN, "20 s and 8 reconciles of flipping", || {
        began.elapsed() >= Duration::from_secs(20) && reconciles(port, "flooder") >= runs0 + 8
    });
    let flips = reconciles(port, "flooder") - runs0;
    let message = plugin_status(port, "flooder")["last"]["message"].to_string();
    assert!(
        message.contains("budget-exhausted"),
        "the gate's 256 mutations a reconcile: {message}"
    );
    let status = status_writes(&api) - status0;
    let taints = taint_writes(&api) - taints0;
    let most = began.elapsed().as_secs() as usize / 10 + 2;
    eprintln!(
        "{flips} reconciles of 256 flips in {:?}: {status} status writes, {taints} taint writes",
        began.elapsed()
    );
    assert!(
        status <= most,
        "{status} status writes for {flips} reconciles of flips: at most {most}"
    );
    assert!(taints <= most, "{taints} taint writes: at most {most}");
    assert_kubelets_untouched(&api);
    drop(daemon);
}

#[test]
fn a_message_changing_every_call_rides_on_the_heartbeat() {
    // A new message each call ("flood RUN-I"), the status and reason the same.
    let (api, _sandbox, port, daemon) = flooding("message", 200, "");
    let first = condition(&node(&api), "FloodProblem").unwrap();
    let status0 = status_writes(&api);
    let runs0 = reconciles(port, "flooder");
    let began = Instant::now();
    // Past the 10 s a held-back change waits (MIN_CHANGE_GAP), so a message
    // change treated as any other change would have been written by then.
    wait_until(
        FLOOD_WITHIN,
        "12 s and 8 more reconciles of new messages",
        || began.elapsed() >= Duration::from_secs(12) && reconciles(port, "flooder") >= runs0 + 8,
    );
    // The first report was written at once; the messages since wait for the
    // heartbeat (5 min).
    assert_eq!(
        status_writes(&api) - status0,
        0,
        "message-only changes ride on the heartbeat"
    );
    assert_eq!(
        condition(&node(&api), "FloodProblem").unwrap(),
        first,
        "the Node still shows the first message"
    );
    assert!(
        first["message"].as_str().unwrap().starts_with("flood "),
        "{first}"
    );
    assert_kubelets_untouched(&api);
    drop(daemon);
}

#[test]
fn a_ttl_renewed_every_reconcile_writes_nothing() {
    // 50 renewals a reconcile of a 10 s TTL, for twice the TTL: each moves
    // the expiry and nothing the Node shows; without them it would expire.
    // (A 1 s TTL expired between the reconciles of a loaded machine, and an
    // expiry is a change the Node must show.)
    let (api, _sandbox, port, daemon) = flooding("renew", 50, "ttl = 10");
    let status0 = status_writes(&api);
    let runs0 = reconciles(port, "flooder");
    let began = Instant::now();
    wait_until(
        FLOOD_WITHIN,
        "20 s and 8 more reconciles of renewals",
        || began.elapsed() >= Duration::from_secs(20) && reconciles(port, "flooder") >= runs0 + 8,
    );
    assert_eq!(status_writes(&api) - status0, 0, "renewals write nothing");
    assert_eq!(
        condition(&node(&api), "FloodProblem").unwrap()["status"],
        "True"
    );
    assert_kubelets_untouched(&api);
    drop(daemon);
}

#[test]
fn a_blackholed_api_server_never_holds_a_plugins_reconcile_and_the_writer_catches_up() {
    let api = KubeApi::start();
    api.seed_node(NODE);
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "flooder");
    let port = free_port();
    sandbox.config_with_host(&host(&api, &sandbox, port), &flood("flip", 3, ""));
    api.grant_rbac(&sandbox);
    let daemon = start(&sandbox, port);
    wait_until(WITHIN, "FloodProblem on the Node", || {
        condition(&node(&api), "FloodProblem").is_some()
    });
    // Every request of tend hangs: the writer's too.
    api.blackhole(12.0, Some("tend/"));
    let runs0 = reconciles(port, "flooder");
    let began = Instant::now();
    wait_until(
        Duration::from_secs(10),
        "reconciles while the API is silent",
        || reconciles(port, "flooder") >= runs0 + 5,
    );
    assert!(began.elapsed() < Duration::from_secs(10));
    let message = plugin_status(port, "flooder")["last"]["message"].to_string();
    assert!(
        message.contains("3 ok"),
        "each set and clear returned ok: {message}"
    );
    api.end_blackhole();

    // The writer is not stuck: the last report reaches the Node, and the
    // failures were retried with a backoff, not spun.
    sandbox.config_with_host(&host(&api, &sandbox, port), &flood("flip", 2, ""));
    wait_until(WITHIN, "FloodProblem False, as the last clear said", || {
        condition(&node(&api), "FloodProblem").is_some_and(|c| c["status"] == "False")
    });
    let failures = metric(port, "tend_conditions_write_failures_total").unwrap_or(0.0);
    assert!(
        failures <= 5.0,
        "{failures} failed writes: a backoff, not a spin"
    );
    drop(daemon);
}

#[test]
fn a_condition_follows_its_grant_across_reloads_renames_and_disabling() {
    let api = KubeApi::start();
    api.seed_node(NODE);
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "alpha");
    sandbox.add_plugin("chaos", "beta");
    sandbox.add_plugin("chaos", "gamma");
    let port = free_port();
    let moved = r#"[{ condition = "MovedProblem", taint-on = { effect = "NoSchedule" } }]"#;
    let other = r#"["OtherProblem"]"#;
    let config = |alpha: &str, beta: &str| {
        sandbox.config_with_host(&host(&api, &sandbox, port), &format!("{alpha}{beta}"));
    };
    let shows = |reason: &str| {
        let reason = reason.to_string();
        let api = &api;
        move || {
            let node = node(api);
            condition(&node, "MovedProblem").is_some_and(|c| c["reason"] == reason.as_str())
                && taint_keys(&node).contains(&"tend.dev/MovedProblem".to_string())
        }
    };
    config(
        &set("alpha", moved, "MovedProblem", "Alpha"),
        &set("beta", other, "OtherProblem", "Beta"),
    );
    api.grant_rbac(&sandbox);
    let daemon = start(&sandbox, port);
    wait_until(WITHIN, "alpha's MovedProblem", shows("Alpha"));

    // The type moves to beta: alpha's report is removed, beta's lands.
    config(
        &set("alpha", other, "OtherProblem", "Alpha"),
        &set("beta", moved, "MovedProblem", "Beta"),
    );
    wait_until(WITHIN, "beta's MovedProblem", shows("Beta"));
    wait_until(WITHIN, "alpha's OtherProblem", || {
        condition(&node(&api), "OtherProblem").is_some_and(|c| c["reason"] == "Alpha")
    });

    // Renamed (beta -> gamma): the same type, a new owner's report.
    config(
        &set("alpha", other, "OtherProblem", "Alpha"),
        &set("gamma", moved, "MovedProblem", "Gamma"),
    );
    wait_until(WITHIN, "gamma's MovedProblem", shows("Gamma"));

    // Disabled: removed, with its taint; enabled again: only a new report shows it.
    let disabled = set("gamma", moved, "MovedProblem", "Gamma").replacen(
        "interval",
        "enabled = false\ninterval",
        1,
    );
    config(&set("alpha", other, "OtherProblem", "Alpha"), &disabled);
    wait_until(WITHIN, "gamma's condition and taint removed", || {
        let node = node(&api);
        condition(&node, "MovedProblem").is_none()
            && !taint_keys(&node).contains(&"tend.dev/MovedProblem".to_string())
    });
    config(
        &set("alpha", other, "OtherProblem", "Alpha"),
        &set("gamma", moved, "MovedProblem", "Again"),
    );
    wait_until(WITHIN, "gamma's MovedProblem again", shows("Again"));
    assert_kubelets_untouched(&api);
    drop(daemon);
}

#[test]
fn a_message_at_or_over_the_bound_reaches_the_node_bounded_and_inert() {
    let api = KubeApi::start();
    api.seed_node(NODE);
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "mallory");
    let port = free_port();
    let grant = r#"["MalloryProblem"]"#;
    // `message` as TOML escapes: the plugin sends the characters they name.
    let report = |reason: &str, message: &str| {
        chaos(
            "mallory",
            grant,
            "condition",
            &format!(
                "op = \"set\"\ncondition = \"MalloryProblem\"\nreason = \"{reason}\"\nmessage = \"{message}\""
            ),
        )
    };
    let smiles = |n: usize| "\\U0001F600".repeat(n);
    sandbox.config_with_host(&host(&api, &sandbox, port), &report("Exact", &smiles(256)));
    api.grant_rbac(&sandbox);
    let daemon = start(&sandbox, port);
    let shown = |reason: &str| {
        let mut found = None;
        wait_until(WITHIN, &format!("the {reason} report on the Node"), || {
            found = condition(&node(&api), "MalloryProblem").filter(|c| c["reason"] == reason);
            found.is_some()
        });
        found.unwrap()["message"].as_str().unwrap().to_string()
    };
    // Exactly 1024 bytes of 4-byte characters: as sent.
    assert_eq!(shown("Exact"), "\u{1F600}".repeat(256));

    // 1023 bytes with control characters, and a 4-byte character where the
    // inert text is cut: bounded, inert, cut at a character boundary.
    let hostile = format!("\\u001b[2J\\u0007\\r\\n{}", smiles(254));
    sandbox.config_with_host(&host(&api, &sandbox, port), &report("Escapes", &hostile));
    let message = shown("Escapes");
    assert!(message.len() <= 1024, "{} bytes", message.len());
    assert!(
        !message.chars().any(|c| c.is_control()),
        "inert: {message:?}"
    );
    assert!(
        message.starts_with("\\u{1b}[2J\\u{7}\\r\\n\u{1F600}"),
        "{message:?}"
    );
    assert!(message.contains("cut"), "{message:?}");

    // Over the bound: refused, nothing written.
    let writes = status_writes(&api);
    sandbox.config_with_host(
        &host(&api, &sandbox, port),
        &report("Over", &format!("x{}", smiles(256))),
    );
    let runs = reconciles(port, "mallory");
    wait_until(WITHIN, "the refused report's reconcile", || {
        reconciles(port, "mallory") > runs
    });
    let outcome = plugin_status(port, "mallory")["last"]["message"].to_string();
    assert!(outcome.contains("invalid"), "{outcome}");
    assert_eq!(status_writes(&api), writes);
    assert_eq!(
        condition(&node(&api), "MalloryProblem").unwrap()["reason"],
        "Escapes"
    );
    drop(daemon);
}
