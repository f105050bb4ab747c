use super::*;
use crate::capabilities::files::FakeFiles;
use crate::capabilities::testing::{call, call_journaled};
use crate::journal::{self, Filter};

const EXISTING: &str = "/etc/containerd/certs.d/quay.io/hosts.toml";
const NEW: &str = "/etc/containerd/certs.d/docker.io/hosts.toml";

fn files_with(call: Arc<Call>) -> (PluginFiles, Arc<FakeFiles>) {
    let (backend, fake) = PluginFiles::fake();
    fake.put(EXISTING, b"operator's\n");
    let grants = vec![FileGrant {
        path: "/etc/containerd/certs.d".into(),
        write: true,
    }];
    (
        PluginFiles::for_call(&backend, &grants, &Default::default(), &call),
        fake,
    )
}

fn files(dry_run: bool) -> (PluginFiles, Arc<FakeFiles>) {
    files_with(call("mirror-gate", dry_run))
}

#[tokio::test]
async fn real_writes_pass_the_gate_and_unchanged_writes_are_no_mutation() {
    let (files, fake) = files(false);
    assert!(files.write(NEW.into(), b"x".to_vec(), None).await.unwrap());
    assert!(!files.write(NEW.into(), b"x".to_vec(), None).await.unwrap());
    assert_eq!(fake.get(NEW).unwrap(), b"x");
    assert_eq!(fake.actions(), [format!("write {NEW}")]);
    let recorded = files.call.gate.mutations();
    assert_eq!(
        recorded.len(),
        1,
        "an unchanged write is not a mutation: {recorded:?}"
    );
    assert_eq!(
        recorded[0].describe(),
        format!("did files.write {NEW} (new file, 1 bytes, mode 644)")
    );
}

#[tokio::test]
async fn dry_run_plans_with_a_diff_and_performs_nothing() {
    let (files, fake) = files(true);
    assert!(
        files
            .write(NEW.into(), b"x\n".to_vec(), None)
            .await
            .unwrap()
    );
    assert!(
        !files
            .write(EXISTING.into(), b"operator's\n".to_vec(), None)
            .await
            .unwrap()
    );
    assert!(
        files
            .write(EXISTING.into(), b"mine\n".to_vec(), None)
            .await
            .unwrap()
    );
    assert!(files.remove(EXISTING.into()).await.unwrap());
    assert!(
        !files
            .remove("/etc/containerd/certs.d/none".into())
            .await
            .unwrap()
    );
    assert!(fake.actions().is_empty(), "a plan performs nothing");
    assert_eq!(fake.get(EXISTING).unwrap(), b"operator's\n");
    let planned = files.call.gate.mutations();
    assert_eq!(planned.len(), 3, "{planned:?}");
    assert!(planned.iter().all(|m| m.dry_run));
    assert_eq!(planned[0].detail, "new file, 2 bytes, mode 644");
    let diff = planned[1].diff.as_deref().unwrap();
    assert!(diff.contains("-operator's\n+mine\n"), "{diff}");
    assert_eq!(
        planned[2].describe(),
        format!("would files.remove {EXISTING} (11 bytes)")
    );
}

#[tokio::test]
async fn ungranted_and_root_operations_are_refused_before_the_backend() {
    let (files, fake) = files(false);
    let err = files
        .write("/etc/passwd".into(), b"x".to_vec(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, CapError::Denied(_)), "{err}");
    let err = files
        .remove("/etc/containerd/certs.d".into())
        .await
        .unwrap_err();
    assert!(matches!(err, CapError::Invalid(_)), "{err}");
    assert!(fake.actions().is_empty());
    assert!(files.call.gate.mutations().is_empty());
}

#[tokio::test]
async fn a_failed_mutation_is_journaled_with_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let (files, fake) = files_with(call_journaled("p", false, dir.path(), vec![]));
    fake.fail_mutations_with(Some(CapError::Unavailable("disk on fire".into())));
    let err = files.remove(EXISTING.into()).await.unwrap_err();
    assert_eq!(err.kind(), "unavailable");
    files.call.gate.sync().await;
    let (entries, _) = journal::read(dir.path(), &Filter::default()).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].result, "unavailable: disk on fire");
}
