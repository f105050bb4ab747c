//! The steps of a reconcile that need no component: what `record` writes into
//! the table, the metrics and the log for a report made up here.

use super::*;
use crate::capabilities::{CallCount, CapError};
use crate::daemon::table::PluginEntry;
use crate::runtime::Health;
use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

fn config(name: &str) -> PluginConfig {
    PluginConfig {
        name: name.into(),
        enabled: true,
        file: format!("/plugins/{name}.wasm").into(),
        oci: None,
        interval: None,
        watch: vec![],
        grants: Default::default(),
        limits: Default::default(),
        capability_limits: Default::default(),
        scope: Default::default(),
        config_json: "{}".into(),
    }
}

/// A table holding `plugin` in `state`, after `failures` failed runs.
fn table(plugin: &str, state: Lifecycle, failures: u32) -> RwLock<PluginTable> {
    let mut entry = PluginEntry::new(config(plugin));
    entry.state = state;
    entry.failures = failures;
    let mut table = PluginTable::default();
    table.plugins.insert(plugin.into(), entry);
    RwLock::new(table)
}

fn ran(plugin: &str) -> Ran {
    Ran {
        plugin: plugin.into(),
        digest: "sha256:abc".into(),
        compiler: Compiler::Cranelift,
        triggers: vec!["interval".into()],
        log: LogLimits::default(),
    }
}

fn write(target: &str, result: &str) -> Mutation {
    Mutation {
        capability: "files",
        operation: "write",
        target: target.into(),
        detail: "12 bytes".into(),
        diff: Some("+secret contents".into()),
        dry_run: false,
        result: result.into(),
    }
}

fn report(result: Result<Outcome, Failure>, mutations: Vec<Mutation>) -> ReconcileReport {
    ReconcileReport {
        result,
        mutations,
        elapsed: Duration::from_millis(40),
        logs_dropped: 0,
        calls: vec![CallCount {
            capability: "files",
            operation: "read",
            result: "ok",
            count: 3,
        }],
        tape: None,
    }
}

fn healthy(message: &str, requeue_after: Option<Duration>) -> Result<Outcome, Failure> {
    Ok(Outcome {
        health: Health::Healthy,
        message: message.into(),
        requeue_after,
    })
}

#[test]
fn a_success_marks_the_plugin_ready_and_keeps_its_last_run_without_diffs() {
    let table = table("a", Lifecycle::Failing, 2);
    let metrics = Metrics::new();
    let requeue = Some(Duration::from_secs(5));
    let report = report(healthy("all fine", requeue), vec![write("/etc/x", "ok")]);

    let result = record(&table, &metrics, ran("a"), report);

    assert_eq!(
        result,
        RunResult {
            ok: true,
            requeue_after: requeue,
            refused: false,
        }
    );
    let table = table.read().unwrap();
    let entry = &table.plugins["a"];
    assert_eq!(entry.state, Lifecycle::Ready);
    assert_eq!((entry.reconciles, entry.failures), (1, 0));
    assert_eq!(entry.recent.len(), 1);
    assert!(entry.refusals.is_empty());
    let last = entry.last.as_ref().expect("the last run is kept");
    assert_eq!(last.plugin, "a");
    assert_eq!(last.digest, "sha256:abc");
    assert_eq!(last.triggers, ["interval"]);
    assert_eq!(last.health, Some(Health::Healthy));
    assert_eq!(last.message, "all fine");
    assert_eq!(last.elapsed_ms, 40.0);
    assert_eq!(last.mutations.len(), 1);
    assert_eq!(
        last.mutations[0].diff, None,
        "/status holds no file contents"
    );
}

#[test]
fn a_success_is_counted_with_its_mutations_calls_and_time() {
    let table = table("a", Lifecycle::Ready, 0);
    let metrics = Metrics::new();
    record(
        &table,
        &metrics,
        ran("a"),
        report(healthy("ok", None), vec![write("/etc/x", "ok")]),
    );
    assert_eq!(metrics.reconciles.with_label_values(&["a", "ok"]).get(), 1);
    assert_eq!(
        metrics
            .reconcile_seconds
            .with_label_values(&["a"])
            .get_sample_count(),
        1
    );
    let mutations = metrics
        .mutations
        .with_label_values(&["a", "files", "write", "ok"]);
    assert_eq!(mutations.get(), 1);
    let calls = metrics
        .capability_calls
        .with_label_values(&["a", "files", "read", "ok"]);
    assert_eq!(calls.get(), 3);
    let (_, now_ms) = Entry::now();
    let last_success = metrics.last_success.with_label_values(&["a"]).get();
    assert!(
        (now_ms / 1000).abs_diff(last_success as u64) <= 1,
        "{last_success}"
    );
}

#[test]
fn a_trap_counts_a_failure_and_marks_the_plugin_failing() {
    let table = table("a", Lifecycle::Ready, 1);
    let metrics = Metrics::new();
    let trap = Err(Failure::Trap("the plugin panicked: boom".into()));

    let result = record(&table, &metrics, ran("a"), report(trap, vec![]));

    assert_eq!(
        result,
        RunResult {
            ok: false,
            requeue_after: None,
            refused: false,
        }
    );
    let table = table.read().unwrap();
    let entry = &table.plugins["a"];
    assert_eq!(entry.state, Lifecycle::Failing);
    assert_eq!((entry.reconciles, entry.failures), (1, 2));
    let last = entry.last.as_ref().unwrap();
    assert_eq!(last.health, None);
    assert_eq!(last.message, "trapped: the plugin panicked: boom");
    assert_eq!(
        metrics.reconciles.with_label_values(&["a", "trap"]).get(),
        1
    );
    assert_eq!(metrics.traps.with_label_values(&["a", "trap"]).get(), 1);
    assert_eq!(
        metrics.last_success.with_label_values(&["a"]).get(),
        0,
        "no success to date"
    );
}

#[test]
fn each_failure_has_its_result_label_and_only_host_stops_are_traps() {
    let plugin = || "p".to_string();
    let cases = [
        (healthy("", None), ("ok", None)),
        (
            Err(Failure::Plugin(CapError::Invalid("bad config".into()))),
            ("error", None),
        ),
        (Err(Failure::Host("no instance".into())), ("error", None)),
        (
            Err(Failure::Trap("unreachable".into())),
            ("trap", Some("trap")),
        ),
        (
            Err(Failure::Deadline {
                plugin: plugin(),
                limit: Duration::from_secs(1),
            }),
            ("deadline", Some("deadline")),
        ),
        (
            Err(Failure::Memory {
                plugin: plugin(),
                limit: "64 MiB".into(),
            }),
            ("memory", Some("memory")),
        ),
    ];
    for (result, expected) in cases {
        assert_eq!(result_label(&result), expected, "{result:?}");
    }
}

#[test]
fn a_plugin_not_yet_ready_keeps_its_lifecycle() {
    for state in [
        Lifecycle::Loading,
        Lifecycle::Disabled,
        Lifecycle::LoadError,
    ] {
        let table = table("a", state, 0);
        let failed = Err(Failure::Host("gone".into()));
        record(&table, &Metrics::new(), ran("a"), report(failed, vec![]));
        let table = table.read().unwrap();
        assert_eq!(table.plugins["a"].state, state);
        assert_eq!(table.plugins["a"].failures, 1);
    }
}

#[test]
fn budget_refusals_are_noted_apart_from_mutations() {
    let table = table("a", Lifecycle::Ready, 0);
    let metrics = Metrics::new();
    let refused = write("/etc/y", "budget-exhausted: files.write: 10 per hour spent");
    record(
        &table,
        &metrics,
        ran("a"),
        report(healthy("", None), vec![write("/etc/x", "ok"), refused]),
    );
    let table = table.read().unwrap();
    let entry = &table.plugins["a"];
    assert_eq!((entry.recent.len(), entry.refusals.len()), (1, 1));
    assert!(
        entry.refusals[0]
            .mutation
            .starts_with("refused files.write /etc/y")
    );
    let refusals = metrics
        .mutations
        .with_label_values(&["a", "files", "write", "refused"]);
    assert_eq!(refusals.get(), 1);
}

#[test]
fn a_plugin_removed_during_its_run_is_counted_but_not_added_back() {
    let table = RwLock::new(PluginTable::default());
    let metrics = Metrics::new();
    let result = record(
        &table,
        &metrics,
        ran("gone"),
        report(healthy("", None), vec![]),
    );
    assert!(result.ok);
    assert!(table.read().unwrap().plugins.is_empty());
    assert_eq!(
        metrics.reconciles.with_label_values(&["gone", "ok"]).get(),
        1
    );
}

/// Collects what the host logs while `f` runs.
fn logged(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = buffer.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

#[test]
fn what_the_host_logs_for_a_plugin_spends_its_log_budget_per_minute() {
    // The budget is per plugin name and process-wide: a name of its own.
    let plugin = "runner-test-log-budget";
    let table = table(plugin, Lifecycle::Ready, 0);
    let mut ran = ran(plugin);
    ran.log.lines_per_minute = 2;
    let mutations = ["/a", "/b", "/c"].map(|t| write(t, "ok")).to_vec();
    let report = report(healthy("the plugin's own words", None), mutations);

    let log = logged(|| {
        record(&table, &Metrics::new(), ran, report);
    });

    assert!(log.contains("did files.write /a"), "{log}");
    assert!(log.contains("did files.write /b"), "{log}");
    assert!(!log.contains("/c"), "over the budget: {log}");
    assert!(log.contains("unlogged=1"), "{log}");
    assert!(!log.contains("the plugin's own words"), "{log}");
    assert!(log.contains("(22 bytes not logged"), "{log}");
}

#[test]
fn plugin_text_in_the_outcome_line_is_made_inert() {
    let plugin = "runner-test-inert";
    let table = table(plugin, Lifecycle::Ready, 0);
    let failed = Err(Failure::Plugin(CapError::Other(
        "fine\nFAKE host line".into(),
    )));
    let log = logged(|| {
        record(&table, &Metrics::new(), ran(plugin), report(failed, vec![]));
    });
    assert!(log.contains("reconcile failed"), "{log}");
    assert!(log.contains("fine\\nFAKE host line"), "{log}");
}

#[test]
fn nothing_is_fetched_for_a_plugin_without_a_component() {
    let table = table("a", Lifecycle::Loading, 0);
    let table = table.read().unwrap();
    assert!(table.plugins["a"].compiled.is_none());
    assert!(fetch(&table, "a").is_none(), "still loading");
    assert!(fetch(&table, "unknown").is_none(), "not configured");
}

#[test]
fn a_reconcile_counts_for_the_revision_it_started_under_and_only_while_it_runs() {
    let running = Running::default();
    running.set(Some("r-000000000000000a".into()));
    let mut counted = report(
        Err(Failure::Memory {
            plugin: "a".into(),
            limit: "64 MiB".into(),
        }),
        vec![
            write("/etc/a", "ok"),
            write("/etc/b", "ok 3 bytes"),
            write("/etc/c", "budget-exhausted: 20 of 20 used"),
            write("/etc/d", "error: disk full"),
        ],
    );
    counted.calls.push(CallCount {
        capability: "kube",
        operation: "get",
        result: "denied",
        count: 2,
    });
    count_under_revision(&running, Some("r-000000000000000a"), &counted);
    let deadline = report(
        Err(Failure::Deadline {
            plugin: "a".into(),
            limit: Duration::from_secs(1),
        }),
        vec![],
    );
    count_under_revision(&running, Some("r-000000000000000a"), &deadline);
    count_under_revision(
        &running,
        Some("r-000000000000000a"),
        &report(healthy("ok", None), vec![]),
    );
    let c = running.report().unwrap().counters;
    assert_eq!(
        (c.runs, c.traps, c.timeouts, c.errors),
        (3, 1, 1, 0),
        "out of memory is a trap"
    );
    assert_eq!((c.mutations, c.refusals, c.denials), (2, 1, 2));
    // A run of the old revision ending after the new one came counts for neither.
    running.set(Some("r-000000000000000b".into()));
    count_under_revision(&running, Some("r-000000000000000a"), &deadline);
    count_under_revision(&running, None, &deadline);
    assert_eq!(running.report().unwrap().counters.runs, 0);
}

#[test]
fn a_plugin_error_after_a_budgets_refusal_is_waiting_not_failing_but_a_trap_is_failing() {
    let refused = || {
        vec![write(
            "/etc/x",
            "budget-exhausted: fleet budget restarts: n1 (holds a ticket)",
        )]
    };
    let error = || {
        Err(Failure::Plugin(CapError::BudgetExhausted(
            "fleet budget restarts".into(),
        )))
    };
    let metrics = Metrics::new();

    let table = table("a", Lifecycle::Ready, 0);
    let waiting = record(&table, &metrics, ran("a"), report(error(), refused()));
    assert!(!waiting.ok && waiting.refused, "{waiting:?}");

    let trap = Err(Failure::Trap("the plugin panicked: boom".into()));
    let trapped = record(&table, &metrics, ran("a"), report(trap, refused()));
    assert!(
        !trapped.refused,
        "a trap is a fault whatever it was refused before"
    );

    let plain = record(
        &table,
        &metrics,
        ran("a"),
        report(error(), vec![write("/etc/x", "ok")]),
    );
    assert!(!plain.refused);
}
