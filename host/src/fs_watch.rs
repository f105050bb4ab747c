//! Debounced file watching (notify): editors and `cp` write in several steps
//! and atomic renames arrive as several events; callers get one batch of
//! changed paths once things have been quiet for a moment, or at once when a
//! file was renamed into place (it is whole: nothing more will be written).

use notify::{RecursiveMode, Watcher};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// Creations, modifications, removals, and a file closed after writing (the
/// surest sign a `cp` is done); not plain opens and reads.
fn is_change(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    match kind {
        notify::EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        notify::EventKind::Access(_) => false,
        _ => true,
    }
}

/// A rename's arrival: the way operators and kubelet land a whole file.
fn is_whole(kind: &notify::EventKind) -> bool {
    use notify::event::{ModifyKind, RenameMode};
    matches!(
        kind,
        notify::EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both))
    )
}

/// Watching stops when this is dropped.
pub struct Watch {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watch `paths` and call `on_batch` with every changed path, `quiet` after the
/// last event of a burst, or as soon as a file is renamed into place. Paths that cannot be watched are reported and skipped;
/// `ignore` drops paths that are not changes (for example temp files).
pub fn debounced(
    paths: &BTreeSet<(PathBuf, bool)>,
    quiet: Duration,
    ignore: fn(&std::path::Path) -> bool,
    on_batch: impl Fn(BTreeSet<PathBuf>) + Send + 'static,
) -> notify::Result<Watch> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && is_change(&event.kind)
        {
            let whole = is_whole(&event.kind);
            for path in event.paths.into_iter().filter(|p| !ignore(p)) {
                let _ = tx.send((path, whole));
            }
        }
    })?;
    for (path, recursive) in paths {
        let mode = if *recursive {
            RecursiveMode::Recursive
        } else {
            RecursiveMode::NonRecursive
        };
        if let Err(e) = watcher.watch(path, mode) {
            tracing::warn!(path = %path.display(), "cannot watch: {e}");
        }
    }
    let task = tokio::spawn(async move {
        while let Some((first, mut whole)) = rx.recv().await {
            let mut batch = BTreeSet::from([first]);
            while !whole && let Ok(Some((path, w))) = tokio::time::timeout(quiet, rx.recv()).await {
                batch.insert(path);
                whole = w;
            }
            on_batch(batch);
        }
    });
    Ok(Watch {
        _watcher: watcher,
        task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_renamed_into_place_is_reported_without_the_quiet_time() {
        let dir = tempfile::tempdir().unwrap();
        let watched = dir.path().join("plugins");
        std::fs::create_dir(&watched).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let quiet = Duration::from_secs(60);
        let paths = BTreeSet::from([(watched.clone(), false)]);
        let _watch = debounced(
            &paths,
            quiet,
            |_| false,
            move |batch| {
                let _ = tx.send(batch);
            },
        )
        .unwrap();
        let staging = dir.path().join("p.staging");
        std::fs::write(&staging, b"whole").unwrap();
        std::fs::rename(&staging, watched.join("p.wasm")).unwrap();
        let batch = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a batch well before the 60 s quiet time")
            .unwrap();
        assert!(batch.contains(&watched.join("p.wasm")), "{batch:?}");
    }

    #[tokio::test]
    async fn writes_wait_for_the_quiet_time() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let paths = BTreeSet::from([(dir.path().to_path_buf(), false)]);
        let _watch = debounced(
            &paths,
            Duration::from_secs(60),
            |_| false,
            move |batch| {
                let _ = tx.send(batch);
            },
        )
        .unwrap();
        std::fs::write(dir.path().join("p.wasm"), b"half").unwrap();
        let early = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await;
        assert!(
            early.is_err(),
            "a write is batched only after the quiet time: {early:?}"
        );
    }
}
