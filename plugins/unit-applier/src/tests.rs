//! unit-applier against the SDK's in-memory fakes.

use super::*;
use serde_json::{Value, json};
use std::cell::Cell;
use std::time::Duration;
use tend_sdk::testing::FakeHost;
use tend_sdk::{
    DirEntry, Error, Files, Health, JobResult, Level, Metadata, State, Systemd, UnitStatus,
};

const DIR: &str = "/etc/systemd/system";
const CONF: &str = "/etc/app/a.conf";
const NOW: u64 = 1_700_000_000_000;

fn host() -> FakeHost {
    let host = FakeHost::named("unit-applier");
    host.files.grant(DIR, true);
    host.files.grant("/etc/app", true);
    host.systemd.grant(
        &["*.service"],
        &[
            "restart",
            "start",
            "stop",
            "enable",
            "disable",
            "daemon-reload",
        ],
    );
    host
}

/// Two units and a config file only a.service depends on.
fn declaration() -> Value {
    json!({
        "files": [{"path": CONF, "content": "a=1\n", "mode": 0o640}],
        "units": [
            {"name": "a.service", "content": "[Service]\nExecStart=/bin/a\n", "files": [CONF]},
            {"name": "b.service", "content": "[Service]\nExecStart=/bin/b\n",
             "drop-ins": [{"name": "10-env.conf", "content": "[Service]\nEnvironment=B=1\n"}]},
        ],
    })
}

/// `value` with `new` at a JSON pointer (an object key may be new).
fn set(mut value: Value, pointer: &str, new: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    match value.pointer_mut(parent).unwrap() {
        Value::Object(map) => {
            map.insert(key.to_string(), new);
        }
        other => other[key.parse::<usize>().unwrap()] = new,
    }
    value
}

fn context(config: &Value) -> Context {
    Context::new("unit-applier", &config.to_string())
}

fn reconcile_at(host: &dyn Host, config: &Value, now_ms: u64) -> Outcome {
    run(&context(config), host, now_ms).unwrap()
}

fn reconcile(host: &dyn Host, config: &Value) -> Outcome {
    reconcile_at(host, config, NOW)
}

/// The systemd actions after the first `from`.
fn actions_since(host: &FakeHost, from: usize) -> Vec<String> {
    host.systemd.actions()[from..].to_vec()
}

fn count(host: &FakeHost, action: &str) -> usize {
    host.systemd
        .actions()
        .iter()
        .filter(|a| *a == action)
        .count()
}

fn text(host: &FakeHost, path: &str) -> Option<String> {
    host.files
        .get(path)
        .map(|bytes| String::from_utf8(bytes).unwrap())
}

#[test]
fn a_first_apply_writes_the_files_and_enables_and_starts_the_units() {
    let host = host();
    let outcome = reconcile(&host, &declaration());
    assert_eq!(outcome.health, Health::Healthy, "{}", outcome.message);
    assert_eq!(outcome.message, "applied: 1 files, 2 units");
    assert_eq!(
        host.systemd.actions(),
        [
            "daemon-reload",
            "enable a.service",
            "enable b.service",
            "start a.service",
            "start b.service"
        ]
    );
    assert_eq!(text(&host, CONF).as_deref(), Some("a=1\n"));
    assert_eq!(host.files().metadata(CONF).unwrap().unwrap().mode, 0o640);
    assert_eq!(
        text(&host, &format!("{DIR}/a.service")).as_deref(),
        Some("[Service]\nExecStart=/bin/a\n")
    );
    assert!(text(&host, &format!("{DIR}/b.service.d/10-env.conf")).is_some());
    for unit in ["a.service", "b.service"] {
        let status = host.systemd().status(unit).unwrap();
        assert_eq!(status.active_state, "active");
    }
    assert_eq!(host.state.list_keys("").unwrap(), ["applied"]);
}

#[test]
fn changing_only_a_depended_on_file_restarts_exactly_that_unit() {
    let host = host();
    reconcile(&host, &declaration());
    let before = host.systemd.actions().len();
    let changed = set(declaration(), "/files/0/content", json!("a=2\n"));
    let outcome = reconcile(&host, &changed);
    assert_eq!(
        outcome.message,
        "applied: 1 files, 1 units (restarted: a.service)"
    );
    assert_eq!(actions_since(&host, before), ["restart a.service"]);
    assert_eq!(text(&host, CONF).as_deref(), Some("a=2\n"));
}

#[test]
fn changing_nothing_does_nothing_at_all() {
    let host = host();
    reconcile(&host, &declaration());
    let actions = host.systemd.actions();
    let state = host.state.get("applied").unwrap();
    let logs = host.log_lines().len();
    let outcome = reconcile(&host, &declaration());
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(outcome.message, "nothing to do");
    assert_eq!(
        host.systemd.actions(),
        actions,
        "no daemon-reload, no restart"
    );
    assert_eq!(host.state.get("applied").unwrap(), state);
    assert_eq!(host.log_lines().len(), logs);
}

#[test]
fn a_unit_file_change_reloads_and_restarts_only_that_unit() {
    let host = host();
    reconcile(&host, &declaration());
    let before = host.systemd.actions().len();
    let changed = set(
        declaration(),
        "/units/1/drop-ins/0/content",
        json!("[Service]\nEnvironment=B=2\n"),
    );
    reconcile(&host, &changed);
    assert_eq!(
        actions_since(&host, before),
        ["daemon-reload", "restart b.service"]
    );
}

#[test]
fn a_removed_unit_is_stopped_disabled_and_deleted() {
    let host = host();
    reconcile(&host, &declaration());
    let before = host.systemd.actions().len();
    let without_b = set(declaration(), "/units", json!([declaration()["units"][0]]));
    let outcome = reconcile(&host, &without_b);
    assert_eq!(outcome.message, "applied: 0 files, 1 units");
    assert_eq!(
        actions_since(&host, before),
        ["stop b.service", "disable b.service", "daemon-reload"]
    );
    assert_eq!(
        host.files.paths(),
        [CONF.to_string(), format!("{DIR}/a.service")]
    );
    assert!(
        host.files()
            .metadata(&format!("{DIR}/b.service.d"))
            .unwrap()
            .is_none(),
        "the drop-in directory went too"
    );
    assert_eq!(
        host.systemd().status("b.service").unwrap().active_state,
        "inactive"
    );
    // Removing the file too: deleted, nothing restarted.
    let bare =
        json!({"units": [{"name": "a.service", "content": "[Service]\nExecStart=/bin/a\n"}]});
    let before = host.systemd.actions().len();
    reconcile(&host, &bare);
    assert_eq!(actions_since(&host, before), Vec::<String>::new());
    assert_eq!(host.files.paths(), [format!("{DIR}/a.service")]);
}

#[test]
fn units_and_files_unit_applier_did_not_create_are_left_alone() {
    let host = host();
    let foreign = format!("{DIR}/foreign.service");
    host.files
        .put(&foreign, b"[Service]\nExecStart=/bin/foreign\n");
    host.systemd.set_unit("foreign.service", "active");
    host.files.put("/etc/app/operator.conf", b"mine\n");

    // Not declared: never touched, whatever the declaration does.
    reconcile(&host, &declaration());
    reconcile(&host, &json!({}));
    assert!(
        host.systemd
            .actions()
            .iter()
            .all(|a| !a.contains("foreign")),
        "{:?}",
        host.systemd.actions()
    );
    assert_eq!(host.files.paths(), ["/etc/app/operator.conf", &foreign]);

    // Declared, then dropped: adopted (its unit file rewritten and the unit
    // restarted), then left in place, running and enabled.
    let adopt = json!({
        "files": [{"path": "/etc/app/operator.conf", "content": "ours\n"}],
        "units": [{"name": "foreign.service", "content": "[Service]\nExecStart=/bin/ours\n",
                   "files": ["/etc/app/operator.conf"]}],
    });
    let before = host.systemd.actions().len();
    reconcile(&host, &adopt);
    assert_eq!(
        actions_since(&host, before),
        [
            "daemon-reload",
            "enable foreign.service",
            "restart foreign.service"
        ]
    );
    let before = host.systemd.actions().len();
    let outcome = reconcile(&host, &json!({}));
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(actions_since(&host, before), Vec::<String>::new());
    assert!(host.files.get(&foreign).is_some());
    assert!(host.files.get("/etc/app/operator.conf").is_some());
    assert_eq!(
        host.systemd()
            .status("foreign.service")
            .unwrap()
            .active_state,
        "active"
    );
}

#[test]
fn for_an_unowned_unit_only_its_drop_ins_are_managed() {
    let host = host();
    let unit = format!("{DIR}/kubelet.service");
    host.files
        .put(&unit, b"[Service]\nExecStart=/usr/bin/kubelet\n");
    host.systemd.set_unit("kubelet.service", "active");
    let config = json!({"units": [{"name": "kubelet.service", "own": false,
        "drop-ins": [{"name": "50-tend.conf", "content": "[Service]\nEnvironment=V=2\n"}]}]});
    let outcome = reconcile(&host, &config);
    assert_eq!(
        outcome.message,
        "applied: 0 files, 1 units (restarted: kubelet.service)"
    );
    assert_eq!(
        host.systemd.actions(),
        ["daemon-reload", "restart kubelet.service"]
    );
    reconcile(&host, &json!({}));
    assert_eq!(
        host.systemd.actions(),
        [
            "daemon-reload",
            "restart kubelet.service",
            "daemon-reload",
            "restart kubelet.service"
        ],
        "never stopped, disabled, enabled or started"
    );
    assert_eq!(host.files.paths(), [unit]);
}

#[test]
fn an_unowned_unit_that_is_not_running_is_not_started() {
    let host = host();
    let config = json!({"units": [{"name": "kubelet.service", "own": false,
        "drop-ins": [{"name": "50-tend.conf", "content": "[Service]\n"}]}]});
    let outcome = reconcile(&host, &config);
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(host.systemd.actions(), ["daemon-reload"]);
    assert!(
        host.log_lines()
            .iter()
            .any(|(_, line)| line.contains("kubelet.service is not running")),
        "{:?}",
        host.log_lines()
    );
    assert_eq!(
        reconcile(&host, &config).message,
        "nothing to do",
        "the skipped restart is not owed any more"
    );
}

#[test]
fn a_failure_mid_apply_resumes_with_each_restart_exactly_once() {
    let host = host();
    reconcile(&host, &declaration());
    let before = host.systemd.actions().len();
    let changed = set(
        set(declaration(), "/files/0/content", json!("a=2\n")),
        "/units/1/content",
        json!("[Service]\nExecStart=/bin/b2\n"),
    );
    // The bus goes away after the files are written, before the restarts.
    host.systemd
        .fail_with(Some(Error::Unavailable("the bus went away".into())));
    let outcome = reconcile(&host, &changed);
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome
            .message
            .starts_with("daemon-reload failed: unavailable: the bus went away; 3 step(s) left"),
        "{}",
        outcome.message
    );
    assert_eq!(outcome.requeue_after_ms, Some(5_000));
    assert_eq!(text(&host, CONF).as_deref(), Some("a=2\n"));
    // Still down: the backoff grows.
    let outcome = reconcile(&host, &changed);
    assert_eq!(outcome.requeue_after_ms, Some(10_000));

    host.systemd.fail_with(None);
    let outcome = reconcile(&host, &changed);
    assert_eq!(outcome.health, Health::Healthy, "{}", outcome.message);
    assert_eq!(
        outcome.message,
        "applied: 0 files, 2 units (restarted: a.service, b.service); resumed an interrupted apply"
    );
    assert_eq!(
        actions_since(&host, before),
        ["daemon-reload", "restart a.service", "restart b.service"]
    );
    assert_eq!(reconcile(&host, &changed).message, "nothing to do");
}

/// A host whose mutations (file writes and removals, systemd jobs and calls)
/// "crash" at number `crash_at`: before the call, or right after it took
/// effect (kill -9 before the plugin recorded it). Every start and restart
/// moves the unit's ActiveEnterTimestamp, as systemd does.
struct Crashing<'a> {
    inner: &'a FakeHost,
    crash_at: usize,
    after: bool,
    calls: Cell<usize>,
    clock: Cell<u64>,
}

impl Crashing<'_> {
    fn mutate<T>(&self, call: impl FnOnce() -> tend_sdk::Result<T>) -> tend_sdk::Result<T> {
        let n = self.calls.get();
        self.calls.set(n + 1);
        let crash = Err(Error::Unavailable("crashed".into()));
        if n == self.crash_at && !self.after {
            return crash;
        }
        let result = call()?;
        if n == self.crash_at {
            return crash;
        }
        Ok(result)
    }

    fn job(
        &self,
        unit: &str,
        call: impl FnOnce() -> tend_sdk::Result<JobResult>,
    ) -> tend_sdk::Result<JobResult> {
        self.mutate(|| {
            let result = call()?;
            let mut status = self.inner.systemd.status(unit)?;
            self.clock.set(self.clock.get() + 1);
            status.active_enter_ms = Some(self.clock.get());
            self.inner.systemd.put_unit(status);
            Ok(result)
        })
    }
}

impl Host for Crashing<'_> {
    fn log(&self, level: Level, message: &str) {
        self.inner.log(level, message)
    }
    fn state(&self) -> &dyn State {
        &self.inner.state
    }
    fn files(&self) -> &dyn Files {
        self
    }
    fn systemd(&self) -> &dyn Systemd {
        self
    }
}

impl Files for Crashing<'_> {
    fn read(&self, path: &str) -> tend_sdk::Result<Vec<u8>> {
        self.inner.files.read(path)
    }
    fn write(&self, path: &str, contents: &[u8], mode: Option<u32>) -> tend_sdk::Result<bool> {
        self.mutate(|| self.inner.files.write(path, contents, mode))
    }
    fn remove(&self, path: &str) -> tend_sdk::Result<bool> {
        self.mutate(|| self.inner.files.remove(path))
    }
    fn list(&self, path: &str) -> tend_sdk::Result<Vec<DirEntry>> {
        self.inner.files.list(path)
    }
    fn metadata(&self, path: &str) -> tend_sdk::Result<Option<Metadata>> {
        self.inner.files.metadata(path)
    }
}

impl Systemd for Crashing<'_> {
    fn status(&self, unit: &str) -> tend_sdk::Result<UnitStatus> {
        self.inner.systemd.status(unit)
    }
    fn list_units(&self, patterns: &[&str]) -> tend_sdk::Result<Vec<UnitStatus>> {
        self.inner.systemd.list_units(patterns)
    }
    fn start(&self, unit: &str) -> tend_sdk::Result<JobResult> {
        self.job(unit, || self.inner.systemd.start(unit))
    }
    fn stop(&self, unit: &str) -> tend_sdk::Result<JobResult> {
        self.mutate(|| self.inner.systemd.stop(unit))
    }
    fn restart(&self, unit: &str) -> tend_sdk::Result<JobResult> {
        self.job(unit, || self.inner.systemd.restart(unit))
    }
    fn reload_or_restart(&self, unit: &str) -> tend_sdk::Result<JobResult> {
        self.job(unit, || self.inner.systemd.reload_or_restart(unit))
    }
    fn try_restart(&self, unit: &str) -> tend_sdk::Result<JobResult> {
        self.job(unit, || self.inner.systemd.try_restart(unit))
    }
    fn reset_failed(&self, unit: &str) -> tend_sdk::Result<()> {
        self.mutate(|| self.inner.systemd.reset_failed(unit))
    }
    fn enable(&self, units: &[&str]) -> tend_sdk::Result<()> {
        self.mutate(|| self.inner.systemd.enable(units))
    }
    fn disable(&self, units: &[&str]) -> tend_sdk::Result<()> {
        self.mutate(|| self.inner.systemd.disable(units))
    }
    fn daemon_reload(&self) -> tend_sdk::Result<()> {
        self.mutate(|| self.inner.systemd.daemon_reload())
    }
}

/// Crash at every mutation of an apply (before it, and right after it took
/// effect), then reconcile again: the files and units end as without the
/// crash, and every restart happened exactly once.
#[test]
fn a_crash_at_any_point_resumes_with_each_restart_exactly_once() {
    let changes = [
        // A depended-on file and a unit file: two restarts after a reload.
        set(
            set(declaration(), "/files/0/content", json!("a=2\n")),
            "/units/1/content",
            json!("[Service]\nExecStart=/bin/b2\n"),
        ),
        // A unit removed, one added, the file changed.
        json!({
            "files": [{"path": CONF, "content": "a=3\n"}],
            "units": [declaration()["units"][0], {"name": "c.service", "content": "[Service]\n"}],
        }),
    ];
    for change in changes {
        let reference = host();
        reconcile(&reference, &declaration());
        let from = reference.systemd.actions().len();
        let counting = Crashing {
            inner: &reference,
            crash_at: usize::MAX,
            after: false,
            calls: Cell::new(0),
            clock: Cell::new(0),
        };
        assert_eq!(reconcile(&counting, &change).health, Health::Healthy);
        let expected = actions_since(&reference, from);
        let mutations = counting.calls.get();
        assert!(
            mutations > expected.len(),
            "file writes and removals count too"
        );
        for crash_at in 0..mutations {
            for after in [false, true] {
                let host = host();
                reconcile(&host, &declaration());
                let from = host.systemd.actions().len();
                let crashing = Crashing {
                    inner: &host,
                    crash_at,
                    after,
                    calls: Cell::new(0),
                    clock: Cell::new(0),
                };
                let first = reconcile(&crashing, &change);
                let again = reconcile(&crashing, &change);
                let case =
                    format!("{change} crash at {crash_at} (after: {after}): {first:?} {again:?}");
                assert_eq!(first.health, Health::Degraded, "{case}");
                assert_eq!(again.health, Health::Healthy, "{case}");
                assert_eq!(host.files.paths(), reference.files.paths(), "{case}");
                for path in host.files.paths() {
                    assert_eq!(host.files.get(&path), reference.files.get(&path), "{case}");
                }
                let done = actions_since(&host, from);
                for unit in ["a.service", "b.service", "c.service"] {
                    let restart = format!("restart {unit}");
                    let times =
                        |actions: &[String]| actions.iter().filter(|a| **a == restart).count();
                    assert_eq!(times(&done), times(&expected), "{case}: {done:?}");
                }
                assert_eq!(
                    reconcile(&crashing, &change).message,
                    "nothing to do",
                    "{case}"
                );
                // Everything it wrote is still known as its own: an empty
                // declaration leaves nothing behind.
                reconcile(&host, &json!({}));
                assert_eq!(host.files.paths(), Vec::<String>::new(), "{case}");
            }
        }
    }
}

#[test]
fn a_restart_cut_off_without_evidence_that_it_happened_is_issued_again() {
    let host = host();
    reconcile(&host, &declaration());
    // The record of a process killed while restarting a.service: the
    // restart is owed and in flight, and a.service's ActiveEnterTimestamp
    // has not moved since.
    let mut record: diff::Applied = host.state().get_json("applied").unwrap().unwrap();
    record.restart.insert("a.service".into());
    record.in_flight = Some(diff::InFlight {
        unit: "a.service".into(),
        active_enter_ms: None,
    });
    host.state().set_json("applied", &record).unwrap();
    let before = host.systemd.actions().len();
    reconcile(&host, &declaration());
    assert_eq!(actions_since(&host, before), ["restart a.service"]);

    // With evidence (the timestamp moved), it is not issued again.
    record.in_flight = Some(diff::InFlight {
        unit: "a.service".into(),
        active_enter_ms: Some(1),
    });
    host.state().set_json("applied", &record).unwrap();
    host.systemd.put_unit(UnitStatus {
        active_enter_ms: Some(2),
        ..host.systemd().status("a.service").unwrap()
    });
    let outcome = reconcile(&host, &declaration());
    assert_eq!(
        outcome.message,
        "applied: 0 files, 1 units (restarted: a.service); resumed an interrupted apply"
    );
    assert_eq!(host.systemd.actions().len(), before + 1);
}

#[test]
fn a_dry_run_makes_the_same_calls_for_the_host_to_plan() {
    let real = host();
    reconcile(&real, &declaration());
    let dry = host();
    let mut ctx = context(&declaration());
    ctx.dry_run = true;
    let outcome = run(&ctx, &dry, NOW).unwrap();
    assert_eq!(outcome.message, "applied: 1 files, 2 units");
    assert_eq!(dry.systemd.actions(), real.systemd.actions());
    assert_eq!(dry.files.paths(), real.files.paths());
}

#[test]
fn jittered_restarts_wait_a_fixed_offset_per_node_then_happen_once() {
    let window = 600_000;
    let offset = apply::Jitter::for_node("test-node", window).offset;
    assert!(!offset.is_zero());
    assert_eq!(apply::Jitter::for_node("test-node", window).offset, offset);
    assert_ne!(apply::Jitter::for_node("node-b", window).offset, offset);
    assert!(apply::Jitter::for_node("node-b", window).offset < Duration::from_millis(window));

    let with_jitter = |decl: Value| {
        let mut decl = decl;
        decl["jitter"] = json!({"window-ms": window, "units": ["a.service"]});
        decl
    };
    let host = host();
    reconcile(&host, &with_jitter(declaration()));
    let before = host.systemd.actions().len();
    let changed = with_jitter(set(declaration(), "/files/0/content", json!("a=2\n")));
    let outcome = reconcile_at(&host, &changed, NOW);
    assert_eq!(outcome.health, Health::Progressing, "{}", outcome.message);
    assert_eq!(
        outcome.requeue_after_ms.map(Duration::from_millis),
        Some(offset)
    );
    assert!(
        outcome.message.starts_with("waiting ") && outcome.message.contains("to restart a.service"),
        "{}",
        outcome.message
    );
    assert_eq!(
        text(&host, CONF).as_deref(),
        Some("a=2\n"),
        "files are written at once"
    );
    assert_eq!(actions_since(&host, before), Vec::<String>::new());
    // An early reconcile (another trigger) keeps waiting for the same moment.
    let early = reconcile_at(&host, &changed, NOW + offset.as_millis() as u64 - 1);
    assert_eq!(early.requeue_after_ms, Some(1));
    let due = reconcile_at(&host, &changed, NOW + offset.as_millis() as u64);
    assert_eq!(due.health, Health::Healthy, "{}", due.message);
    assert_eq!(actions_since(&host, before), ["restart a.service"]);
    // The next change waits again, from its own start.
    let again = with_jitter(set(declaration(), "/files/0/content", json!("a=3\n")));
    let later = NOW + 10 * window;
    assert_eq!(
        reconcile_at(&host, &again, later)
            .requeue_after_ms
            .map(Duration::from_millis),
        Some(offset)
    );

    // A dry run does not wait: it shows the restart and says it would wait.
    let dry = FakeHost::named("unit-applier");
    dry.files.grant(DIR, true);
    dry.files.grant("/etc/app", true);
    dry.systemd.grant(
        &["*.service"],
        &[
            "restart",
            "start",
            "stop",
            "enable",
            "disable",
            "daemon-reload",
        ],
    );
    reconcile(&dry, &with_jitter(declaration()));
    let mut ctx = context(&changed);
    ctx.dry_run = true;
    let outcome = run(&ctx, &dry, NOW).unwrap();
    assert_eq!(outcome.health, Health::Healthy);
    assert!(
        outcome.message.contains("the restart of a.service waits"),
        "{}",
        outcome.message
    );
    assert_eq!(count(&dry, "restart a.service"), 1);
}

#[test]
fn a_declaration_file_is_read_through_files_and_never_missing_means_empty() {
    let host = host();
    host.files.grant("/etc/tend", false);
    let config = json!({"declaration-file": "/etc/tend/units.toml"});
    let outcome = reconcile(&host, &config);
    assert_eq!(outcome.health, Health::Progressing);
    assert!(
        outcome.message.contains("/etc/tend/units.toml"),
        "{}",
        outcome.message
    );
    assert!(host.systemd.actions().is_empty());

    host.files.put(
        "/etc/tend/units.toml",
        b"[[files]]\npath = \"/etc/app/a.conf\"\ncontent = \"a=1\\n\"\nmode = 0o600\n\n[[units]]\nname = \"a.service\"\ncontent = \"[Service]\\n\"\nfiles = [\"/etc/app/a.conf\"]\n",
    );
    let outcome = reconcile(&host, &config);
    assert_eq!(outcome.message, "applied: 1 files, 1 units");
    assert_eq!(host.files().metadata(CONF).unwrap().unwrap().mode, 0o600);

    // The file disappearing removes nothing.
    host.files.grant("/etc/tend", true);
    host.files().remove("/etc/tend/units.toml").unwrap();
    let before = host.systemd.actions().len();
    assert_eq!(reconcile(&host, &config).health, Health::Progressing);
    assert_eq!(host.systemd.actions().len(), before);
    assert!(host.files.get(CONF).is_some());

    host.files.put("/etc/tend/units.toml", b"[[unitz]]\n");
    let err = run(&context(&config), &host, NOW).unwrap_err();
    assert!(
        matches!(&err, Error::Invalid(m) if m.contains("unitz")),
        "{err}"
    );
}

#[test]
fn an_ungranted_unit_degrades_naming_the_grant_and_nothing_else_breaks() {
    let host = FakeHost::named("unit-applier");
    host.files.grant(DIR, true);
    host.files.grant("/etc/app", true);
    host.systemd.grant(
        &["a.service"],
        &["restart", "start", "enable", "daemon-reload"],
    );
    let outcome = reconcile(&host, &declaration());
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome
            .message
            .starts_with("track b.service failed: denied: no systemd grant covers unit b.service"),
        "{}",
        outcome.message
    );
    assert!(
        outcome
            .message
            .contains("[plugins.unit-applier.grants] systemd"),
        "{}",
        outcome.message
    );
    assert!(
        outcome
            .requeue_after_ms
            .map(Duration::from_millis)
            .is_some()
    );
    assert!(host.systemd.actions().is_empty());
}

#[test]
fn a_failed_job_degrades_until_the_next_change() {
    let host = host();
    host.systemd.job_result("b.service", JobResult::Failed);
    let outcome = reconcile(&host, &declaration());
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome.message.ends_with("start b.service: job failed"),
        "{}",
        outcome.message
    );
    let outcome = reconcile(&host, &declaration());
    assert_eq!(outcome.health, Health::Degraded);
    assert_eq!(
        outcome.message,
        "nothing to do; the last apply left: start b.service: job failed"
    );
    assert_eq!(count(&host, "start b.service"), 1, "not retried in a loop");
    host.systemd.job_result("b.service", JobResult::Done);
    let fixed = set(
        declaration(),
        "/units/1/content",
        json!("[Service]\nExecStart=/bin/b2\n"),
    );
    let outcome = reconcile(&host, &fixed);
    assert_eq!(outcome.health, Health::Healthy, "{}", outcome.message);
}

#[test]
fn an_owner_is_recorded_with_a_warning() {
    let host = host();
    let config = set(declaration(), "/files/0/owner", json!("app:app"));
    reconcile(&host, &config);
    assert!(
        host.log_lines()
            .iter()
            .any(|(level, line)| *level == Level::Warn
                && line.contains("owner app:app recorded, not applied"))
    );
}

#[test]
fn bad_config_is_invalid() {
    let host = host();
    let err = run(&context(&json!({"unitz": []})), &host, NOW).unwrap_err();
    assert!(
        matches!(&err, Error::Invalid(m) if m.contains("unitz")),
        "{err}"
    );
    let err = run(
        &context(&json!({"units": [{"name": "a.service"}]})),
        &host,
        NOW,
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Invalid(m) if m.contains("needs content")),
        "{err}"
    );
    assert!(host.systemd.actions().is_empty());
}

#[test]
fn a_restart_still_running_after_an_interruption_is_waited_for_not_issued_again() {
    let host = host();
    reconcile(&host, &declaration());
    // Killed right after queueing the restart: systemd is still running the
    // job (activating), so ActiveEnterTimestamp has not moved yet.
    let mut record: diff::Applied = host.state().get_json("applied").unwrap().unwrap();
    record.restart.insert("a.service".into());
    record.in_flight = Some(diff::InFlight {
        unit: "a.service".into(),
        active_enter_ms: Some(1),
    });
    host.state().set_json("applied", &record).unwrap();
    host.systemd.put_unit(UnitStatus {
        active_state: "activating".into(),
        active_enter_ms: Some(1),
        ..host.systemd().status("a.service").unwrap()
    });
    let before = host.systemd.actions().len();
    let outcome = reconcile(&host, &declaration());
    assert_eq!(
        actions_since(&host, before),
        Vec::<String>::new(),
        "no second restart"
    );
    assert_eq!(outcome.requeue_after_ms, Some(200), "it looks again soon");

    // The job finished: the timestamp moved, the restart counts as done.
    host.systemd.put_unit(UnitStatus {
        active_state: "active".into(),
        active_enter_ms: Some(2),
        ..host.systemd().status("a.service").unwrap()
    });
    let outcome = reconcile(&host, &declaration());
    assert_eq!(actions_since(&host, before), Vec::<String>::new());
    assert!(
        outcome.message.contains("resumed an interrupted apply"),
        "{}",
        outcome.message
    );
}
