//! The diff and the record's transitions, without a host: a small simulated
//! node decides what the runner would observe (whether a path or unit exists).

use super::*;
use crate::config::{Config, desired as resolve};
use serde_json::json;

const DIR: &str = "/etc/systemd/system";

fn desired(declaration: serde_json::Value) -> Desired {
    let mut config: Config = serde_json::from_value(declaration).unwrap();
    let inline = config.inline("unit-applier").unwrap().unwrap();
    resolve(&config, inline).unwrap()
}

/// Two owned units: a depends on /etc/app/a.conf, b has a drop-in.
fn base() -> serde_json::Value {
    json!({
        "files": [
            {"path": "/etc/app/a.conf", "content": "a=1\n"},
            {"path": "/etc/app/shared.conf", "content": "s=1\n"},
        ],
        "units": [
            {"name": "a.service", "content": "[Service]\nExecStart=/a\n", "files": ["/etc/app/a.conf", "/etc/app/shared.conf"]},
            {"name": "b.service", "content": "[Service]\nExecStart=/b\n", "files": ["/etc/app/shared.conf"],
             "drop-ins": [{"name": "10-env.conf", "content": "[Service]\nEnvironment=B=1\n"}]},
        ],
    })
}

/// Set `value` at a JSON pointer of `decl`.
fn with(mut decl: serde_json::Value, pointer: &str, value: serde_json::Value) -> serde_json::Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    match decl.pointer_mut(parent).unwrap() {
        serde_json::Value::Object(map) => {
            map.insert(key.to_string(), value);
        }
        other => other[key.parse::<usize>().unwrap()] = value,
    }
    decl
}

/// What the runner would find on the node for paths and units it meets for
/// the first time.
#[derive(Default)]
struct Node {
    /// Units systemd knows already: (enabled, running).
    units: BTreeMap<String, (bool, bool)>,
    /// Paths something else wrote.
    paths: BTreeSet<String>,
}

impl Node {
    /// The runner's part of a step, without the host call.
    fn begin(&self, applied: &mut Applied, step: &Step, desired: &Desired) {
        match step {
            Step::Track { unit, own, enable } => {
                let rec = match (own, self.units.get(unit)) {
                    (false, _) => AppliedUnit::default(),
                    (true, None) => AppliedUnit {
                        own: true,
                        created: true,
                        ..AppliedUnit::default()
                    },
                    (true, Some((enabled, running))) => AppliedUnit {
                        own: true,
                        created: false,
                        enabled: *enable && *enabled,
                        started: *enable && *running,
                    },
                };
                applied.track(unit, rec);
            }
            Step::Write { path, new, .. } => {
                applied.begin(step, desired, *new && !self.paths.contains(path))
            }
            _ => applied.begin(step, desired, false),
        }
    }

    /// Apply steps one at a time, diffing again after each, as the runner
    /// does; the actions performed.
    fn converge(&self, applied: &mut Applied, desired: &Desired) -> Vec<String> {
        let mut actions = Vec::new();
        for _ in 0..1000 {
            let plan = diff(applied, desired).unwrap();
            let Some(step) = plan.steps.first() else {
                return actions;
            };
            self.begin(applied, step, desired);
            if step.acts() {
                actions.push(step.to_string());
            }
            applied.finish(step, desired);
        }
        panic!("no convergence: {applied:?}");
    }
}

fn applied(decl: serde_json::Value) -> Applied {
    let mut applied = Applied::default();
    Node::default().converge(&mut applied, &desired(decl));
    applied
}

fn actions(applied: &Applied, decl: serde_json::Value) -> Vec<String> {
    diff(applied, &desired(decl)).unwrap().actions()
}

#[test]
fn a_first_apply_writes_everything_reloads_once_then_enables_and_starts() {
    let plan = diff(&Applied::default(), &desired(base())).unwrap();
    assert_eq!(
        plan.actions(),
        [
            "write /etc/app/a.conf",
            "write /etc/app/shared.conf",
            &format!("write {DIR}/a.service"),
            &format!("write {DIR}/b.service"),
            &format!("write {DIR}/b.service.d/10-env.conf"),
            "daemon-reload",
            "enable a.service",
            "enable b.service",
            "start a.service",
            "start b.service",
        ]
    );
    assert!(
        plan.restarts().is_empty(),
        "new units are started, not restarted"
    );
    // The plan as diffed once is what applying it step by step does.
    let mut record = Applied::default();
    assert_eq!(
        Node::default().converge(&mut record, &desired(base())),
        plan.actions()
    );
    assert!(!record.interrupted());
    assert!(
        record
            .units
            .values()
            .all(|u| u.created && u.enabled && u.started)
    );
    assert!(
        record
            .files
            .values()
            .all(|f| f.created && f.digest.is_some())
    );
}

#[test]
fn nothing_changed_means_an_empty_plan() {
    let record = applied(base());
    assert!(diff(&record, &desired(base())).unwrap().is_empty());
    // Through JSON (as stored in state) too.
    let stored: Applied = serde_json::from_slice(&serde_json::to_vec(&record).unwrap()).unwrap();
    assert!(diff(&stored, &desired(base())).unwrap().is_empty());
}

#[test]
fn a_changed_file_restarts_exactly_its_dependents_without_a_daemon_reload() {
    let record = applied(base());
    let only_a = with(base(), "/files/0/content", json!("a=2\n"));
    assert_eq!(
        actions(&record, only_a),
        ["write /etc/app/a.conf", "restart a.service"]
    );
    let shared = with(base(), "/files/1/content", json!("s=2\n"));
    assert_eq!(
        actions(&record, shared),
        [
            "write /etc/app/shared.conf",
            "restart a.service",
            "restart b.service"
        ]
    );
    let mode = with(base(), "/files/0/mode", json!(0o600));
    assert_eq!(
        actions(&record, mode),
        ["write /etc/app/a.conf", "restart a.service"]
    );
}

#[test]
fn an_owner_change_alone_is_recorded_and_restarts_nothing() {
    let record = applied(base());
    let owned = with(base(), "/files/0/owner", json!("app"));
    assert_eq!(actions(&record, owned.clone()), ["write /etc/app/a.conf"]);
    let mut record = record;
    Node::default().converge(&mut record, &desired(owned.clone()));
    assert_eq!(
        record.files["/etc/app/a.conf"].owner.as_deref(),
        Some("app")
    );
    assert!(diff(&record, &desired(owned)).unwrap().is_empty());
}

#[test]
fn unit_files_and_drop_ins_reload_then_restart_their_unit() {
    let record = applied(base());
    let unit = with(
        base(),
        "/units/0/content",
        json!("[Service]\nExecStart=/a2\n"),
    );
    assert_eq!(
        actions(&record, unit),
        [
            &format!("write {DIR}/a.service"),
            "daemon-reload",
            "restart a.service"
        ]
    );
    let drop_in = with(
        base(),
        "/units/1/drop-ins/0/content",
        json!("[Service]\nEnvironment=B=2\n"),
    );
    assert_eq!(
        actions(&record, drop_in),
        [
            &format!("write {DIR}/b.service.d/10-env.conf"),
            "daemon-reload",
            "restart b.service"
        ]
    );
    let added = with(
        base(),
        "/units/0/drop-ins",
        json!([{"name": "20-x.conf", "content": "[Unit]\n"}]),
    );
    assert_eq!(
        actions(&record, added),
        [
            &format!("write {DIR}/a.service.d/20-x.conf"),
            "daemon-reload",
            "restart a.service"
        ]
    );
    let removed = with(base(), "/units/1/drop-ins", json!([]));
    assert_eq!(
        actions(&record, removed),
        [
            &format!("remove {DIR}/b.service.d/10-env.conf"),
            "daemon-reload",
            "restart b.service"
        ]
    );
}

#[test]
fn a_removed_unit_is_stopped_disabled_and_deleted_and_its_files_go_last() {
    let record = applied(base());
    let decl = json!({
        "files": [{"path": "/etc/app/shared.conf", "content": "s=1\n"}],
        "units": [base()["units"][1].clone()],
    });
    let plan = diff(&record, &desired(decl.clone())).unwrap();
    assert_eq!(
        plan.actions(),
        [
            "stop a.service",
            "disable a.service",
            &format!("remove {DIR}/a.service"),
            "daemon-reload",
            "remove /etc/app/a.conf",
        ]
    );
    assert_eq!(
        plan.steps.last(),
        Some(&Step::Forget {
            unit: "a.service".into()
        })
    );
    let mut record = record;
    Node::default().converge(&mut record, &desired(decl.clone()));
    assert!(!record.units.contains_key("a.service"));
    assert!(!record.files.contains_key("/etc/app/a.conf"));
    assert!(diff(&record, &desired(decl)).unwrap().is_empty());
}

#[test]
fn units_and_files_not_created_by_unit_applier_are_never_stopped_or_deleted() {
    // foreign.service and /etc/app/a.conf existed before the first apply.
    let node = Node {
        units: [("foreign.service".to_string(), (true, true))].into(),
        paths: [
            "/etc/app/a.conf".to_string(),
            format!("{DIR}/foreign.service"),
        ]
        .into(),
    };
    let decl = with(
        base(),
        "/units/0",
        json!({"name": "foreign.service", "content": "[Service]\nExecStart=/f\n", "files": ["/etc/app/a.conf"]}),
    );
    let mut record = Applied::default();
    let first = node.converge(&mut record, &desired(decl.clone()));
    // Adopted while running and enabled: its new unit file restarts it.
    assert!(
        first.contains(&"restart foreign.service".to_string()),
        "{first:?}"
    );
    assert!(
        !first.contains(&"start foreign.service".to_string()),
        "{first:?}"
    );
    assert!(
        !first.contains(&"enable foreign.service".to_string()),
        "{first:?}"
    );
    let rec = &record.units["foreign.service"];
    assert!(!rec.created && rec.started && rec.enabled);
    assert!(!record.files["/etc/app/a.conf"].created);

    // Removed from the declaration: forgotten, not stopped, disabled or deleted.
    let decl =
        json!({"units": [base()["units"][1].clone()], "files": [base()["files"][1].clone()]});
    let plan = diff(&record, &desired(decl.clone())).unwrap();
    assert_eq!(plan.actions(), Vec::<String>::new());
    assert!(plan.steps.contains(&Step::Remove {
        path: "/etc/app/a.conf".into(),
        delete: false,
        restarts: vec![],
        reload: false
    }));
    node.converge(&mut record, &desired(decl.clone()));
    assert!(!record.units.contains_key("foreign.service"));
    assert!(diff(&record, &desired(decl)).unwrap().is_empty());
}

#[test]
fn an_unowned_unit_gets_only_drop_ins_and_restarts() {
    let node = Node {
        units: [("kubelet.service".to_string(), (true, true))].into(),
        ..Node::default()
    };
    let decl = json!({
        "files": [{"path": "/etc/kubernetes/kubelet.conf", "content": "v=1\n"}],
        "units": [{"name": "kubelet.service", "own": false, "files": ["/etc/kubernetes/kubelet.conf"],
                   "drop-ins": [{"name": "50-tend.conf", "content": "[Service]\n"}]}],
    });
    let mut record = Applied::default();
    assert_eq!(
        node.converge(&mut record, &desired(decl.clone())),
        [
            "write /etc/kubernetes/kubelet.conf",
            &format!("write {DIR}/kubelet.service.d/50-tend.conf"),
            "daemon-reload",
            "restart kubelet.service",
        ]
    );
    let changed = with(decl.clone(), "/files/0/content", json!("v=2\n"));
    assert_eq!(
        actions(&record, changed),
        [
            "write /etc/kubernetes/kubelet.conf",
            "restart kubelet.service"
        ]
    );
    // Leaving the declaration: its drop-in goes, the unit restarts without it;
    // never stopped or disabled.
    let gone = json!({"files": [decl["files"][0].clone()]});
    assert_eq!(
        node.converge(&mut record, &desired(gone.clone())),
        [
            &format!("remove {DIR}/kubelet.service.d/50-tend.conf"),
            "daemon-reload",
            "restart kubelet.service",
        ]
    );
    assert!(record.units.is_empty());
}

#[test]
fn the_enable_flag_enables_and_starts_or_stops_and_disables() {
    let off = with(base(), "/units/1/enable", json!(false));
    let first = Node::default().converge(&mut Applied::default(), &desired(off.clone()));
    for verb in ["enable", "start", "restart"] {
        assert!(!first.contains(&format!("{verb} b.service")), "{first:?}");
    }
    let mut record = applied(base());
    assert_eq!(
        Node::default().converge(&mut record, &desired(off.clone())),
        ["stop b.service", "disable b.service"]
    );
    // A file change does not restart a disabled unit.
    let changed = with(off.clone(), "/files/1/content", json!("s=2\n"));
    assert_eq!(
        actions(&record, changed),
        ["write /etc/app/shared.conf", "restart a.service"]
    );
    assert_eq!(
        actions(&record, base()),
        ["enable b.service", "start b.service"]
    );
}

#[test]
fn a_restart_owed_to_a_unit_that_is_now_stopped_or_gone_is_dropped() {
    let mut record = applied(base());
    record.restart.insert("b.service".into());
    let off = with(base(), "/units/1/enable", json!(false));
    assert_eq!(
        actions(&record, off.clone()),
        ["stop b.service", "disable b.service"]
    );
    Node::default().converge(&mut record, &desired(off));
    assert!(record.restart.is_empty());

    let mut record = applied(base());
    record.restart.insert("gone.service".into());
    let plan = diff(&record, &desired(base())).unwrap();
    assert_eq!(
        plan.steps,
        [Step::SkipRestart {
            unit: "gone.service".into()
        }]
    );
}

#[test]
fn owned_units_unit_applier_created_cannot_turn_unowned() {
    let record = applied(base());
    let decl = json!({"units": [{"name": "a.service", "own": false}]});
    let refused = diff(&record, &desired(decl)).unwrap_err();
    assert!(
        refused.0.contains("cannot become own = false"),
        "{refused:?}"
    );
}

#[test]
fn jittered_restarts_come_after_the_others() {
    let mut decl = with(base(), "/files/1/content", json!("s=2\n"));
    decl["jitter"] = json!({"window-ms": 1000, "units": ["a.service"]});
    let record = applied(base());
    assert_eq!(
        actions(&record, decl),
        [
            "write /etc/app/shared.conf",
            "restart b.service",
            "restart a.service"
        ]
    );
}

#[test]
fn a_new_unit_dir_moves_the_unit_files() {
    let record = applied(base());
    let decl = {
        let mut d = base();
        d["unit-dir"] = json!("/run/systemd/system");
        d
    };
    let plan = actions(&record, decl);
    assert!(
        plan.contains(&"write /run/systemd/system/a.service".to_string()),
        "{plan:?}"
    );
    assert!(
        plan.contains(&format!("remove {DIR}/a.service")),
        "{plan:?}"
    );
    assert_eq!(plan.iter().filter(|a| *a == "daemon-reload").count(), 1);
    assert!(plan.contains(&"restart a.service".to_string()));
    assert!(plan.contains(&"restart b.service".to_string()));
}

/// Interrupt the apply of every change at every step (before the step, and,
/// for writes and removals, after the host call but before it was recorded),
/// then resume from the record: the outcome is the same and every restart
/// happens exactly once.
#[test]
fn an_apply_interrupted_anywhere_resumes_with_each_restart_exactly_once() {
    let changes = [
        with(base(), "/files/1/content", json!("s=2\n")),
        with(
            with(
                base(),
                "/units/0/content",
                json!("[Service]\nExecStart=/a2\n"),
            ),
            "/files/1/content",
            json!("s=3\n"),
        ),
        with(base(), "/units/1/drop-ins", json!([])),
        json!({"files": [base()["files"][1].clone()], "units": [base()["units"][1].clone()]}),
    ];
    for change in changes {
        let target = desired(change.clone());
        let mut reference = applied(base());
        let expected = Node::default().converge(&mut reference, &target);
        let total = diff(&applied(base()), &target).unwrap().steps.len();
        for crash_at in 0..total {
            for after_call in [false, true] {
                let mut record = applied(base());
                let mut done = Vec::new();
                for _ in 0..crash_at {
                    let step = diff(&record, &target).unwrap().steps[0].clone();
                    Node::default().begin(&mut record, &step, &target);
                    if step.acts() {
                        done.push(step.to_string());
                    }
                    record.finish(&step, &target);
                }
                let step = diff(&record, &target).unwrap().steps[0].clone();
                let idempotent = matches!(step, Step::Write { .. } | Step::Remove { .. });
                if after_call && idempotent {
                    // The file was written (or removed); the process died
                    // before recording it.
                    Node::default().begin(&mut record, &step, &target);
                    done.push(step.to_string());
                }
                // Through JSON, as the next process reads it.
                let mut record: Applied =
                    serde_json::from_slice(&serde_json::to_vec(&record).unwrap()).unwrap();
                done.extend(Node::default().converge(&mut record, &target));
                assert_eq!(record, reference, "{change} crash at {crash_at}");
                for unit in ["a.service", "b.service"] {
                    let restart = format!("restart {unit}");
                    assert_eq!(
                        done.iter().filter(|a| **a == restart).count(),
                        expected.iter().filter(|a| **a == restart).count(),
                        "{change} crash at {crash_at} ({after_call}): {done:?}"
                    );
                }
                if !(after_call && idempotent) {
                    assert_eq!(done, expected, "{change} crash at {crash_at}");
                }
            }
        }
    }
}

#[test]
fn a_changed_declaration_during_an_interrupted_apply_is_folded_in() {
    // Crash after writing a.conf (a's restart owed), then a leaves the
    // declaration: it is stopped instead of restarted.
    let mut record = applied(base());
    let target = desired(with(base(), "/files/0/content", json!("a=2\n")));
    let step = diff(&record, &target).unwrap().steps[0].clone();
    Node::default().begin(&mut record, &step, &target);
    assert_eq!(record.restart, ["a.service".to_string()].into());
    let without_a =
        json!({"files": [base()["files"][1].clone()], "units": [base()["units"][1].clone()]});
    let done = Node::default().converge(&mut record, &desired(without_a));
    assert!(!done.contains(&"restart a.service".to_string()), "{done:?}");
    assert!(done.contains(&"stop a.service".to_string()), "{done:?}");
    assert!(record.restart.is_empty());
}

#[test]
fn a_declaration_reverted_during_an_interrupted_write_or_removal_is_written_again() {
    // Killed after writing a=2 (or after removing a.conf), before recording
    // it; the declaration goes back to a=1: the file is written again and
    // a.service restarted, since the node may hold a=2 (or nothing).
    let old = desired(base());
    for change in [
        with(base(), "/files/0/content", json!("a=2\n")),
        json!({"files": [base()["files"][1].clone()], "units": [base()["units"][1].clone()]}),
    ] {
        let mut record = applied(base());
        let target = desired(change.clone());
        loop {
            let step = diff(&record, &target).unwrap().steps[0].clone();
            Node::default().begin(&mut record, &step, &target);
            if step.to_string().ends_with("/etc/app/a.conf") {
                break;
            }
            record.finish(&step, &target);
        }
        let plan = diff(&record, &old).unwrap();
        assert!(
            plan.actions()
                .contains(&"write /etc/app/a.conf".to_string()),
            "{change}: {plan:?}"
        );
        Node::default().converge(&mut record, &old);
        assert_eq!(record.files, applied(base()).files, "{change}");
    }
}

#[test]
fn digests_are_sha256() {
    assert_eq!(
        digest(""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}
