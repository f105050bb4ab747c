use super::*;
use crate::capabilities::limits::Limits;
use crate::journal::{self, Filter};
use std::time::Duration;

fn budgets(max: u32) -> Arc<Budgets> {
    let rule = BudgetRule {
        name: "removals".into(),
        operations: vec!["files.remove".into()],
        max,
        per: Duration::from_secs(600),
        min_interval_per_target: Duration::ZERO,
    };
    crate::capabilities::testing::budgets_in_memory(vec![rule])
}

fn gate(dir: &std::path::Path, dry_run: bool, budgets: Arc<Budgets>) -> Gate {
    let caller = Caller {
        plugin: "p".into(),
        digest: "sha256:d".into(),
        triggers: vec!["manual".into()],
        dry_run,
        cluster: false,
    };
    Gate::new(
        caller,
        Limits::default(),
        Some(Arc::new(Journal::open(dir).unwrap())),
        budgets,
        None,
    )
}

fn remove(target: &str) -> Intent {
    Intent {
        capability: "files",
        operation: "remove",
        target: target.into(),
        detail: String::new(),
        diff: None,
    }
}

fn journaled(dir: &std::path::Path) -> Vec<(String, String)> {
    let (entries, _) = journal::read(dir, &Filter::default()).unwrap();
    entries.into_iter().map(|e| (e.target, e.result)).collect()
}

#[tokio::test]
async fn the_intent_is_durable_before_the_mutation_and_the_result_after() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), false, budgets(10));
    let Admission::Go(permit) = gate.admit(remove("/a"), None).await.unwrap() else {
        panic!("a real run performs")
    };
    // While the mutation runs, the journal already holds it, without a result.
    assert_eq!(journaled(dir.path()), [("/a".into(), INTERRUPTED.into())]);
    permit.finish("ok".into());
    gate.sync().await;
    assert_eq!(journaled(dir.path()), [("/a".into(), "ok".into())]);
    assert_eq!(gate.mutations()[0].describe(), "did files.remove /a");
}

#[tokio::test]
async fn a_permit_dropped_unfinished_is_journaled_as_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), false, budgets(10));
    let admitted = gate.admit(remove("/a"), None).await.unwrap();
    drop(admitted);
    let mutations = gate.mutations();
    assert_eq!(mutations[0].result, INTERRUPTED);
    assert_eq!(journaled(dir.path()), [("/a".into(), INTERRUPTED.into())]);
}

#[tokio::test]
async fn over_budget_is_refused_journaled_and_never_admitted() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), false, budgets(1));
    assert!(matches!(
        gate.admit(remove("/a"), None).await,
        Ok(Admission::Go(_))
    ));
    let err = gate.admit(remove("/b"), None).await.err().unwrap();
    assert_eq!(err.kind(), "budget-exhausted");
    let entries = journaled(dir.path());
    assert_eq!(entries.len(), 2);
    assert!(
        entries[1]
            .1
            .starts_with("budget-exhausted: [budget] budget \"removals\""),
        "{entries:?}"
    );
    assert!(
        gate.mutations()[1]
            .describe()
            .starts_with("refused files.remove /b")
    );
}

#[tokio::test]
async fn a_dry_run_plans_checks_budgets_and_spends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let shared = budgets(1);
    let plan = gate(dir.path(), true, shared.clone());
    assert!(matches!(
        plan.admit(remove("/a"), None).await,
        Ok(Admission::Planned)
    ));
    let err = plan.admit(remove("/b"), None).await.err().unwrap();
    assert!(
        err.to_string()
            .contains("1 planned earlier in this dry run"),
        "{err}"
    );
    let described: Vec<String> = plan.mutations().iter().map(Mutation::describe).collect();
    assert_eq!(described[0], "would files.remove /a");
    assert!(
        described[1].starts_with("refused files.remove /b"),
        "{described:?}"
    );
    // Nothing was spent: a real run still has the whole budget.
    let real = gate(dir.path(), false, shared);
    assert!(matches!(
        real.admit(remove("/a"), None).await,
        Ok(Admission::Go(_))
    ));
}

#[tokio::test]
async fn a_reconcile_records_at_most_its_limit_of_mutations() {
    let dir = tempfile::tempdir().unwrap();
    let caller = Caller {
        plugin: "flood".into(),
        dry_run: false,
        cluster: false,
        ..Caller::default()
    };
    let limits = Limits {
        mutations: 3,
        ..Limits::default()
    };
    let journal = Arc::new(Journal::open(dir.path()).unwrap());
    let gate = Gate::new(caller, limits, Some(journal), budgets(100), None);
    for i in 0..3 {
        let Admission::Go(permit) = gate.admit(remove(&format!("/{i}")), None).await.unwrap()
        else {
            panic!()
        };
        permit.finish("ok".into());
    }
    let err = gate.admit(remove("/3"), None).await.err().unwrap();
    assert!(
        err.to_string()
            .contains("raise [plugins.flood.limits] mutations (now 3)"),
        "{err}"
    );
    assert_eq!(
        gate.mutations().len(),
        3,
        "the refusal is not recorded again"
    );
}

#[tokio::test]
async fn journal_bytes_per_reconcile_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        journal_per_reconcile: crate::units::ByteSize(4096),
        ..Limits::default()
    };
    let journal = Arc::new(Journal::open(dir.path()).unwrap());
    let gate = Gate::new(Caller::default(), limits, Some(journal), budgets(100), None);
    let long = format!("/{}", "x".repeat(1500));
    assert!(gate.admit(remove(&long), None).await.is_ok());
    let err = gate.admit(remove(&long), None).await.err().unwrap();
    assert!(err.to_string().contains("journal-per-reconcile"), "{err}");
}

#[tokio::test]
async fn settle_waits_for_a_mutation_still_running() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), false, budgets(10));
    let Admission::Go(permit) = gate.admit(remove("/slow"), None).await.unwrap() else {
        panic!()
    };
    assert!(
        !gate.settle(Duration::from_millis(20)).await,
        "still running"
    );
    let finisher = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        permit.finish("ok".into());
    });
    assert!(gate.settle(Duration::from_secs(5)).await);
    finisher.await.unwrap();
    assert_eq!(gate.mutations()[0].result, "ok");
}

/// An answer that says more than "ok" in the journal.
struct Job(&'static str);

impl Performed for Job {
    fn journal_result(&self) -> String {
        format!("job {}", self.0)
    }
}

#[tokio::test]
async fn mutate_journals_what_the_backend_answers() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), false, budgets(10));
    let answer = gate
        .mutate(remove("/a"), Ok(Job("planned")), |_permit| async {
            Ok(Job("failed"))
        })
        .await;
    assert_eq!(answer.unwrap().0, "failed");
    let refused = gate
        .mutate(remove("/b"), Ok(()), |_permit| async {
            Err(CapError::Unavailable("the bus is gone".into()))
        })
        .await;
    assert!(refused.is_err());
    gate.sync().await;
    assert_eq!(
        journaled(dir.path()),
        [
            ("/a".into(), "job failed".into()),
            ("/b".into(), "unavailable: the bus is gone".into())
        ]
    );
}

#[tokio::test]
async fn a_dry_run_answers_the_planned_answer_without_performing() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), true, budgets(10));
    let answer = gate
        .mutate(remove("/a"), Ok(true), |_permit| async {
            panic!("a dry run performs nothing")
        })
        .await;
    assert!(answer.unwrap());
    assert!(gate.mutations()[0].dry_run);
}

#[tokio::test]
async fn a_mutation_cut_off_mid_way_is_journaled_as_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), false, budgets(10));
    // Cut off once the mutation really runs (its intent journaled), however
    // long the fsync before it takes.
    let (running, is_running) = tokio::sync::oneshot::channel();
    let stalled = gate.mutate(remove("/a"), Ok(()), |_permit| {
        running.send(()).unwrap();
        std::future::pending()
    });
    tokio::select! {
        _ = stalled => panic!("a pending mutation cannot finish"),
        _ = is_running => {}
    }
    assert_eq!(gate.mutations()[0].result, INTERRUPTED);
}

#[tokio::test]
async fn work_carrying_its_permit_journals_its_own_result_after_a_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), false, budgets(10));
    let (started, wait) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let write = gate.mutate(remove("/a"), Ok(()), |permit| {
        let work = permit.travels_with(move || {
            started.send(()).unwrap();
            released.recv().unwrap();
            Ok(())
        });
        async { tokio::task::spawn_blocking(work).await.unwrap() }
    });
    let cut_off = tokio::time::timeout(Duration::from_millis(50), write).await;
    assert!(cut_off.is_err(), "the reconcile was cut off");
    wait.recv().unwrap();
    assert!(gate.mutations().is_empty(), "the work still runs");
    release.send(()).unwrap();
    assert!(gate.settle(Duration::from_secs(5)).await);
    assert_eq!(gate.mutations()[0].result, "ok");
}

#[test]
fn an_entry_built_from_an_intent_keeps_the_line_format() {
    let caller = Caller {
        plugin: "p".into(),
        digest: "sha256:d".into(),
        triggers: vec!["file:/etc/x".into()],
        dry_run: false,
        cluster: false,
    };
    let intent = Intent {
        capability: "files",
        operation: "write",
        target: "/etc/x".into(),
        detail: "new file, 3 bytes".into(),
        diff: Some("+abc".into()),
    };
    let mut entry = journal_entry(&caller, &intent, "run-0", Phase::Intent, String::new());
    let (_, now) = Entry::now();
    assert!(now.abs_diff(entry.time_ms) < 60_000, "stamped now");
    assert!(entry.time.ends_with('Z'), "{}", entry.time);
    entry.time = "2025-01-02T03:04:05.678Z".into();
    entry.time_ms = 1_735_787_045_678;
    let line = concat!(
        r#"{"id":"run-0","phase":"intent","time":"2025-01-02T03:04:05.678Z","#,
        r#""time_ms":1735787045678,"plugin":"p","digest":"sha256:d","#,
        r#""triggers":["file:/etc/x"],"capability":"files","operation":"write","#,
        r#""target":"/etc/x","detail":"new file, 3 bytes","dry_run":false,"result":""}"#,
        "\n"
    );
    assert_eq!(
        Journal::line(&entry),
        line,
        "the diff is for plans, not the journal"
    );
}

/// A state write answered to the plugin, its commit in the test's hands.
async fn pending_state_write(gate: &Gate) -> tokio::sync::oneshot::Sender<Result<(), CapError>> {
    let (committed, finished) = tokio::sync::oneshot::channel();
    gate.keep_pending(Commit::pending(finished)).await;
    committed
}

/// A mutation of `target` on its own task, and whether it was performed.
fn spawn_remove(
    gate: &Gate,
    target: &'static str,
) -> (
    tokio::task::JoinHandle<Result<(), CapError>>,
    Arc<AtomicBool>,
) {
    let performed = Arc::new(AtomicBool::new(false));
    let mutation = tokio::spawn({
        let (gate, performed) = (gate.clone(), performed.clone());
        async move {
            gate.mutate(remove(target), Ok(()), |_permit| async move {
                performed.store(true, Ordering::SeqCst);
                Ok(())
            })
            .await
        }
    });
    (mutation, performed)
}

/// Wait (with a deadline) until the journal holds `lines` lines.
async fn journal_holds(dir: &std::path::Path, lines: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while journaled(dir).len() < lines {
        assert!(
            std::time::Instant::now() < deadline,
            "the journal holds {:?}",
            journaled(dir)
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn effects_wait_for_the_state_writes_before_them_while_their_intents_are_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), false, budgets(10));
    let committed = pending_state_write(&gate).await;
    // Two at once (as `http.send-all` makes them): both wait.
    let (first, first_performed) = spawn_remove(&gate, "/a");
    let (second, second_performed) = spawn_remove(&gate, "/b");
    // The intents reach the journal while the commit is pending...
    journal_holds(dir.path(), 2).await;
    // ...and neither effect runs before it is durable.
    let (mut first, mut second) = (first, second);
    assert!(
        tokio::time::timeout(Duration::from_millis(100), &mut first)
            .await
            .is_err()
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(100), &mut second)
            .await
            .is_err()
    );
    assert!(!first_performed.load(Ordering::SeqCst) && !second_performed.load(Ordering::SeqCst));
    committed.send(Ok(())).unwrap();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert!(first_performed.load(Ordering::SeqCst) && second_performed.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_waiter_cut_off_leaves_the_commit_for_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let gate = gate(dir.path(), false, budgets(10));
    let committed = pending_state_write(&gate).await;
    let cut_off = tokio::time::timeout(Duration::from_millis(10), gate.durable()).await;
    assert!(cut_off.is_err(), "the commit is pending");
    committed
        .send(Err(CapError::Unavailable("state store: disk full".into())))
        .unwrap();
    let lost = gate.durable().await.unwrap_err();
    assert!(lost.to_string().contains("disk full"), "{lost}");
}

#[tokio::test]
async fn a_state_write_never_made_durable_refuses_its_effect_and_every_later_one() {
    let dir = tempfile::tempdir().unwrap();
    let shared = budgets(1);
    let gate = gate(dir.path(), false, shared.clone());
    let committed = pending_state_write(&gate).await;
    // Lost while the first effect waits for it, its intent journaled.
    let (first, performed) = spawn_remove(&gate, "/a");
    journal_holds(dir.path(), 1).await;
    committed
        .send(Err(CapError::Unavailable("state store: disk full".into())))
        .unwrap();
    let refusals = [
        first.await.unwrap().unwrap_err(),
        // Refused before it spends anything.
        gate.mutate(remove("/b"), Ok(()), |_permit| async {
            panic!("performed after a lost state write")
        })
        .await
        .unwrap_err(),
    ];
    assert!(!performed.load(Ordering::SeqCst));
    for err in &refusals {
        assert!(
            err.to_string().contains("could not be made durable (unavailable: state store: disk full); this and every later effect"),
            "{err}"
        );
    }
    assert!(
        gate.durable().await.is_err(),
        "the reconcile's end sees it too"
    );
    gate.sync().await;
    let entries = journaled(dir.path());
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(
        entries
            .iter()
            .all(|(_, result)| result.contains("could not be made durable"))
    );
    // The budget's one removal was given back.
    let next = super::Gate::new(Caller::default(), Limits::default(), None, shared, None);
    assert!(matches!(
        next.admit(remove("/c"), None).await,
        Ok(Admission::Go(_))
    ));
}

#[tokio::test]
async fn an_intent_that_cannot_be_journaled_is_refused_and_refunded() {
    let dir = tempfile::tempdir().unwrap();
    let shared = budgets(1);
    let gate = gate(dir.path(), false, shared.clone());
    let journal_dir = dir.path().join("journal");
    // The journal's directory gone, a file in its place: no append can land.
    std::fs::remove_dir_all(&journal_dir).unwrap();
    std::fs::write(&journal_dir, "").unwrap();
    let err = gate
        .mutate(remove("/a"), Ok(()), |_permit| async {
            panic!("performed unjournaled")
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unavailable", "{err}");
    assert!(
        err.to_string().starts_with(&format!(
            "unavailable: cannot journal files.remove /a in {}: ",
            journal_dir.display()
        )) && err
            .to_string()
            .ends_with("nothing was done (Tend does not act unrecorded)"),
        "{err}"
    );
    let next = super::Gate::new(Caller::default(), Limits::default(), None, shared, None);
    assert!(matches!(
        next.admit(remove("/b"), None).await,
        Ok(Admission::Go(_))
    ));
}
