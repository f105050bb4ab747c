use super::*;
use crate::capabilities::Mutations;

fn files(dry_run: bool) -> (PluginFiles, Arc<MemoryFiles>, Mutations) {
    let backend = Arc::new(MemoryFiles::default());
    backend.put("/etc/containerd/certs.d/quay.io/hosts.toml", b"operator's");
    let grants = vec![FileGrant {
        path: "/etc/containerd/certs.d".into(),
        write: true,
    }];
    let mutations = Mutations::default();
    let call = CallInfo {
        plugin: "mirror-gate".into(),
        dry_run,
        mutations: mutations.clone(),
    };
    (
        PluginFiles::new(backend.clone(), grants, call),
        backend,
        mutations,
    )
}

#[tokio::test]
async fn real_writes_are_performed_and_recorded() {
    let (files, backend, mutations) = files(false);
    let path = "/etc/containerd/certs.d/docker.io/hosts.toml".to_string();
    assert!(
        files
            .write(path.clone(), b"x".to_vec(), None)
            .await
            .unwrap()
    );
    assert!(
        !files
            .write(path.clone(), b"x".to_vec(), None)
            .await
            .unwrap()
    );
    assert_eq!(backend.get(&path).unwrap(), b"x");
    let recorded = mutations.take();
    assert_eq!(
        recorded.len(),
        1,
        "an unchanged write is not a mutation: {recorded:?}"
    );
    assert!(recorded[0].performed);
    assert_eq!(
        (recorded[0].operation.as_str(), recorded[0].target.as_str()),
        ("write", path.as_str())
    );
}

#[tokio::test]
async fn dry_run_plans_mutations_without_performing_them() {
    let (files, backend, mutations) = files(true);
    let new = "/etc/containerd/certs.d/docker.io/hosts.toml".to_string();
    let existing = "/etc/containerd/certs.d/quay.io/hosts.toml".to_string();
    assert!(files.write(new.clone(), b"x".to_vec(), None).await.unwrap());
    assert!(
        !files
            .write(existing.clone(), b"operator's".to_vec(), None)
            .await
            .unwrap()
    );
    assert!(files.remove(existing.clone()).await.unwrap());
    assert_eq!(backend.get(&new), None);
    assert_eq!(backend.get(&existing).unwrap(), b"operator's");
    let planned = mutations.take();
    assert_eq!(planned.len(), 2, "{planned:?}");
    assert!(planned.iter().all(|m| !m.performed));
    assert!(
        planned[0].detail.starts_with("new file, 1 bytes"),
        "{}",
        planned[0].detail
    );
    assert_eq!(planned[1].operation, "remove");
}

#[tokio::test]
async fn ungranted_and_root_operations_are_refused_before_the_backend() {
    let (files, _, mutations) = files(false);
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
    assert!(mutations.take().is_empty());
}
