//! A hostile plugin against the node capabilities, each test written as the
//! attack of issue 15, against the real `tend` and the real peers: containerd
//! 1.6 (tests/peers/containerd.sh) and systemd 252 (tests/peers/systemd.sh).
//! Both peers need root; without it, or without a peer's packages, the tests
//! fail (the peers' start says what is missing) rather than pass unchecked.
//!
//! - CRI: sandbox ids by prefix are refused before the runtime; a removal
//!   scoped to NOTREADY sandboxes of one namespace cannot remove a READY
//!   sandbox of another; the journal and budgets see the resolved pod.
//! - systemd: enabling a granted unit whose `[Install]` links ungranted units
//!   (`Alias=`, `Also=`, `RequiredBy=`) is refused before anything is linked,
//!   whatever links exist already (one to another unit, an alias of the
//!   victim itself); 50 daemon-reloads in one reconcile reach systemd once.
//! - metrics: a plugin naming its series after the host's families cannot
//!   make `/metrics` declare one twice (`promtool check metrics` passes).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tend_e2e::*;

const WITHIN: Duration = Duration::from_secs(30);

/// The chaos plugin with `grants`, `host` lines and its `config`.
fn chaos(sandbox: &Sandbox, host: &str, grants: &str, config: &str) {
    sandbox.add_plugin("chaos", "chaos").config_with_host(
        host,
        &format!(
            "[plugins.chaos]\n[plugins.chaos.grants]\n{grants}\n[plugins.chaos.config]\n{config}\n"
        ),
    );
}

/// `tend reconcile chaos`: what it printed (the outcome message included).
fn reconcile(sandbox: &Sandbox) -> String {
    let out = sandbox.tend(&["reconcile", "chaos"]);
    assert!(
        out.success,
        "tend reconcile chaos failed: {}{}",
        out.stdout, out.stderr
    );
    out.stdout
}

fn quoted(items: &[&str]) -> String {
    let items: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
    format!("[{}]", items.join(", "))
}

fn sandbox_state(peer: &ContainerdPeer, id: &str) -> Option<SandboxState> {
    peer.sandboxes()
        .into_iter()
        .find(|s| s.id == id)
        .map(|s| s.state)
}

fn cri_mutations(sandbox: &Sandbox) -> Vec<serde_json::Value> {
    journal(sandbox)
        .into_iter()
        .filter(|e| e["capability"] == "cri")
        .collect()
}

#[test]
fn sandbox_ids_by_prefix_are_refused_and_budgets_see_the_whole_sandbox() {
    let peer = ContainerdPeer::start();
    let victim = peer.run_sandbox("coredns-xyz", "kube-system", "uid-victim", 0);
    let sandbox = Sandbox::new();
    let host = format!(
        "[host.cri]\nendpoint = \"{}\"\n[host.budgets.sandbox-stops]\noperations = [\"cri.stop-pod-sandbox\"]\nmax = 10\nper = \"1h\"\nmin-interval-per-target = \"1h\"\n",
        peer.endpoint()
    );
    let grants = "cri = { read = true, operations = [\"stop-pod-sandbox\"] }";
    let stop = |ids: &[&str]| {
        chaos(
            &sandbox,
            &host,
            grants,
            &format!(
                "mode = \"cri-sandboxes\"\nop = \"stop\"\nids = {}",
                quoted(ids)
            ),
        );
        reconcile(&sandbox)
    };

    // The attack: three prefixes of one id, each a "new target" for the budget.
    let prefixes = [&victim[..10], &victim[..11], &victim[..12]];
    let out = stop(&prefixes);
    for prefix in prefixes {
        assert!(
            out.contains(&format!(
                "{prefix}: invalid: cri sandbox id \"{prefix}\": expected the full id"
            )),
            "{out}"
        );
    }
    assert_eq!(
        sandbox_state(&peer, &victim),
        Some(SandboxState::Ready),
        "no prefix reached containerd"
    );
    assert!(
        cri_mutations(&sandbox).is_empty(),
        "refused before the gate"
    );

    // By its full id: stopped once, journaled as the pod; the second stop of
    // the same sandbox meets the budget's min-interval-per-target.
    let out = stop(&[&victim, &victim]);
    assert!(out.contains(&format!("{victim}: ok")), "{out}");
    assert!(out.contains("budget-exhausted"), "{out}");
    assert_eq!(sandbox_state(&peer, &victim), Some(SandboxState::NotReady));
    let target = format!("kube-system/coredns-xyz (sandbox {victim})");
    let mutations = cri_mutations(&sandbox);
    assert!(!mutations.is_empty(), "the stop is journaled");
    assert!(
        mutations.iter().all(|e| e["target"] == target.as_str()),
        "{mutations:?}"
    );
    let stopped = mutations.iter().filter(|e| e["result"] == "ok").count();
    assert_eq!(stopped, 1, "{mutations:?}");
}

#[test]
fn a_removal_scoped_to_notready_sandboxes_of_one_namespace_removes_nothing_else() {
    let peer = ContainerdPeer::start();
    let apiserver = peer.run_sandbox("kube-apiserver-node", "kube-system", "uid-api", 0);
    let ready_web = peer.run_sandbox("web-0", "default", "uid-web", 0);
    let orphan = peer.run_sandbox("job-1", "default", "uid-job", 0);
    let other_orphan = peer.run_sandbox("dns-old", "kube-system", "uid-dns", 0);
    peer.stop_sandbox(&orphan);
    peer.stop_sandbox(&other_orphan);
    let sandbox = Sandbox::new();
    chaos(
        &sandbox,
        &format!("[host.cri]\nendpoint = \"{}\"\n", peer.endpoint()),
        "cri = { read = true, operations = [\"remove-pod-sandbox\"], namespaces = [\"default\"], states = [\"notready\"] }",
        &format!(
            "mode = \"cri-sandboxes\"\nop = \"remove\"\nids = {}",
            quoted(&[&apiserver, &ready_web, &other_orphan, &orphan])
        ),
    );
    let out = reconcile(&sandbox);
    assert!(
        out.contains(&format!(
            "{apiserver}: denied: cri remove-pod-sandbox of kube-system/kube-apiserver-node (sandbox {apiserver}) is not granted"
        )),
        "{out}"
    );
    assert!(
        out.contains("add \"kube-system\" to namespaces in [plugins.chaos.grants] cri"),
        "{out}"
    );
    assert!(
        out.contains(&format!("{ready_web}: denied: cri remove-pod-sandbox of default/web-0 (sandbox {ready_web}) is not granted: the sandbox is READY")),
        "{out}"
    );
    assert!(out.contains(&format!("{orphan}: ok")), "{out}");
    let left: Vec<(String, SandboxState)> = peer
        .sandboxes()
        .into_iter()
        .map(|s| (s.id, s.state))
        .collect();
    assert_eq!(
        left,
        [
            (apiserver.clone(), SandboxState::Ready),
            (ready_web.clone(), SandboxState::Ready),
            (other_orphan.clone(), SandboxState::NotReady)
        ],
        "only the NOTREADY sandbox of default was removed"
    );
    let mutations = cri_mutations(&sandbox);
    let targets: Vec<&str> = mutations
        .iter()
        .map(|e| e["target"].as_str().unwrap())
        .collect();
    assert!(!targets.is_empty());
    assert!(
        targets
            .iter()
            .all(|t| *t == format!("default/job-1 (sandbox {orphan})")),
        "{targets:?}"
    );
}

/// Every symlink below `dir`, as (path relative to `dir`, target).
fn links(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut found = vec![];
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                let rel = path.strip_prefix(dir).unwrap().display().to_string();
                found.push((rel, std::fs::read_link(&path).unwrap()));
            } else if meta.is_dir() {
                pending.push(path);
            }
        }
    }
    found.sort();
    found
}

fn service(install: &str) -> String {
    format!(
        "[Unit]\nDescription=tend e2e\n[Service]\nExecStart=/bin/sleep 1000\n[Install]\n{install}\n"
    )
}

#[test]
fn enabling_a_granted_unit_cannot_link_ungranted_units() {
    let peer = SystemdPeer::start();
    let units = peer.units_dir();
    // The peer's /etc/systemd/system, where enable makes its links.
    let etc = peer.dir().join("etc-systemd");
    std::fs::write(
        units.join("victim.service"),
        service("WantedBy=peer.target"),
    )
    .unwrap();
    std::fs::write(units.join("other.service"), service("WantedBy=peer.target")).unwrap();
    std::fs::write(
        units.join("tend-alias.service"),
        service("WantedBy=peer.target\nAlias=evil-alias.service\nAlso=victim.service"),
    )
    .unwrap();
    std::fs::write(
        units.join("tend-takeover.service"),
        service("WantedBy=peer.target\nAlias=taken.service\nAlso=victim.service"),
    )
    .unwrap();
    std::fs::write(
        units.join("tend-plain.service"),
        service("WantedBy=peer.target"),
    )
    .unwrap();
    // RequiredBy= an ungranted unit: a granted stop would then stop it too.
    std::fs::write(
        units.join("tend-required.service"),
        service("RequiredBy=victim.service"),
    )
    .unwrap();
    // An operator's link the hostile unit's Alias= wants to take over.
    std::os::unix::fs::symlink(units.join("other.service"), etc.join("taken.service")).unwrap();
    let before = links(&etc);
    let sandbox = Sandbox::new();
    let enable = |unit: &str| {
        chaos(
            &sandbox,
            &format!("[host.systemd]\nbus = \"{}\"\n", peer.bus_address()),
            "systemd = { units = [\"tend-*.service\"], operations = [\"enable\"] }",
            &format!("mode = \"unit-files\"\nop = \"enable\"\nunits = [\"{unit}\"]"),
        );
        reconcile(&sandbox)
    };

    // Alias= and Also= name ungranted units: refused from the plan, before
    // systemd is asked, so there is nothing to roll back.
    let out = enable("tend-alias.service");
    assert!(
        out.contains("denied: systemd enable of tend-alias.service would link"),
        "{out}"
    );
    assert!(
        out.contains("to units in [plugins.chaos.grants] systemd"),
        "{out}"
    );
    assert!(!out.contains("rolled back"), "{out}");
    assert_eq!(links(&etc), before, "no link made");

    // An Alias= onto an operator's link: refused before enable could try.
    let out = enable("tend-takeover.service");
    assert!(
        out.contains("denied: systemd enable of tend-takeover.service would link"),
        "{out}"
    );
    assert!(out.contains("unit taken.service"), "{out}");
    assert_eq!(
        links(&etc),
        before,
        "the operator's taken.service still points at other.service"
    );
    assert_eq!(
        std::fs::read_link(etc.join("taken.service")).unwrap(),
        units.join("other.service")
    );

    // Becoming a dependency of an ungranted unit: refused, nothing linked.
    let out = enable("tend-required.service");
    assert!(
        out.contains("denied: systemd enable of tend-required.service would link"),
        "{out}"
    );
    assert!(
        out.contains("a dependency of victim.service (RequiredBy="),
        "{out}"
    );
    assert_eq!(links(&etc), before, "no victim.service.requires link");

    // A unit whose links are all granted is enabled as before.
    let out = enable("tend-plain.service");
    assert!(out.contains("ok"), "{out}");
    let mut expected = before.clone();
    expected.push((
        "peer.target.wants/tend-plain.service".into(),
        units.join("tend-plain.service"),
    ));
    expected.sort();
    assert_eq!(links(&etc), expected);
    // Refused before the gate: the only enable journaled is the granted one.
    let enables: Vec<(String, String)> = journal(&sandbox)
        .into_iter()
        .filter(|e| e["operation"] == "enable")
        .map(|e| {
            let field = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (field("target"), field("result"))
        })
        .filter(|(_, result)| !result.is_empty())
        .collect();
    assert_eq!(
        enables,
        [("tend-plain.service".to_string(), "ok".to_string())],
        "{enables:?}"
    );
}

/// Issue 25, hole 1: a granted unit with `Also=victim.service`, while a link
/// exists already: one to another unit, or an alias of the victim itself
/// (which a rollback's disable would have removed too, so the old code left
/// the victim enabled). Refused before enabling: the victim stays disabled
/// and no link is made or removed.
#[test]
fn an_also_of_an_ungranted_unit_is_refused_before_anything_is_linked() {
    for (existing, points_to) in [
        ("other-alias.service", "other.service"),
        ("victim-alias.service", "victim.service"),
    ] {
        let peer = SystemdPeer::start();
        let units = peer.units_dir();
        let etc = peer.dir().join("etc-systemd");
        for unit in ["victim.service", "other.service"] {
            std::fs::write(units.join(unit), service("WantedBy=peer.target")).unwrap();
        }
        std::fs::write(
            units.join("tend-a.service"),
            service("WantedBy=peer.target\nAlso=victim.service"),
        )
        .unwrap();
        std::os::unix::fs::symlink(units.join(points_to), etc.join(existing)).unwrap();
        let before = links(&etc);
        let victim_state = peer.unit_property("victim.service", "UnitFileState");
        let sandbox = Sandbox::new();
        chaos(
            &sandbox,
            &format!("[host.systemd]\nbus = \"{}\"\n", peer.bus_address()),
            "systemd = { units = [\"tend-*.service\"], operations = [\"enable\"] }",
            "mode = \"unit-files\"\nop = \"enable\"\nunits = [\"tend-a.service\"]",
        );
        let out = reconcile(&sandbox);
        assert!(
            out.contains("denied: systemd enable of tend-a.service would also enable victim.service (Also= in the [Install] section of tend-a.service)"),
            "{existing}: {out}"
        );
        assert!(
            out.contains("add \"victim.service\" to units in [plugins.chaos.grants] systemd"),
            "{out}"
        );
        assert_eq!(links(&etc), before, "{existing}: no link made or removed");
        assert!(
            !etc.join("peer.target.wants")
                .join("victim.service")
                .exists()
        );
        assert!(
            !etc.join("peer.target.wants")
                .join("tend-a.service")
                .exists()
        );
        assert_eq!(
            peer.unit_property("victim.service", "UnitFileState"),
            victim_state,
            "{existing}: the victim's enablement is unchanged"
        );
        assert_eq!(
            peer.unit_property("tend-a.service", "UnitFileState"),
            "disabled"
        );
        assert!(
            journal(&sandbox).iter().all(|e| e["operation"] != "enable"),
            "nothing reached the gate"
        );
    }
}

#[test]
fn fifty_daemon_reloads_in_one_reconcile_reach_systemd_once() {
    let peer = SystemdPeer::start();
    let reloads = || peer.console().matches("Reloading.").count();
    let at_start = reloads();
    let sandbox = Sandbox::new();
    chaos(
        &sandbox,
        &format!("[host.systemd]\nbus = \"{}\"\n", peer.bus_address()),
        "systemd = { units = [\"tend-*.service\"], operations = [\"daemon-reload\"] }",
        "mode = \"daemon-reloads\"\ncount = 50",
    );
    for round in 1..=2 {
        let out = reconcile(&sandbox);
        assert!(
            out.contains("1 ok, errors: {\"budget-exhausted\": 49}"),
            "{out}"
        );
        assert!(out.contains("at most one per reconcile"), "{out}");
        wait_until(WITHIN, "systemd to log its reload", || {
            reloads() >= at_start + round
        });
        assert_eq!(
            reloads(),
            at_start + round,
            "one reload per reconcile reached systemd"
        );
    }
}

#[test]
fn metric_names_of_host_families_cannot_break_the_scrape() {
    let sandbox = Sandbox::new();
    let port = free_port();
    // A plugin that fails to load makes the host declare tend_plugin_load_errors_total too.
    std::fs::write(sandbox.path("plugins/broken.wasm"), b"not a component").unwrap();
    sandbox.add_plugin("chaos", "chaos").config_with_host(
        &format!("listen = \"127.0.0.1:{port}\""),
        &format!(
            "[plugins.broken]\n[plugins.chaos]\ninterval = \"1h\"\n[plugins.chaos.config]\nmode = \"metric-names\"\ngauges = {}\ncounters = {}\n",
            quoted(&["state", "last_success_timestamp_seconds", "load_errors_total", "reconcile_duration_seconds_bucket", "plugins_loaded"]),
            quoted(&["load_errors", "reconciles", "state"]),
        ),
    );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "chaos", "the hostile names", |p| {
        p["last"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("plugins_loaded: ok"))
    });
    let message = plugin_status(port, "chaos")["last"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        message,
        "state: invalid; last_success_timestamp_seconds: invalid; load_errors_total: invalid; reconcile_duration_seconds_bucket: invalid; plugins_loaded: ok; load_errors: invalid; reconciles: ok; state: ok"
    );
    wait_until(WITHIN, "the broken plugin's load error", || {
        http_get(port, "/metrics")
            .is_ok_and(|(_, m)| m.contains("tend_plugin_load_errors_total{plugin=\"broken\"}"))
    });
    let (status, metrics) = http_get(port, "/metrics").unwrap();
    assert_eq!(status, 200);
    for family in [
        "tend_plugin_state",
        "tend_plugin_last_success_timestamp_seconds",
        "tend_plugin_load_errors_total",
    ] {
        assert_eq!(
            metrics.matches(&format!("# TYPE {family} ")).count(),
            1,
            "{family} declared once:\n{metrics}"
        );
    }
    assert!(
        metrics.contains("tend_plugin_plugins_loaded{plugin=\"chaos\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tend_plugin_state_total{plugin=\"chaos\"} 1\n"),
        "{metrics}"
    );
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus) must be installed: cargo xtask installs it");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}\n{metrics}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(daemon.terminate(Duration::from_secs(10)));
}
