//! Debounced file watching (notify): editors and `cp` write in several steps
//! and atomic renames arrive as several events; callers get one batch of
//! changed paths once things have been quiet for a moment.

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
/// last event of a burst. Paths that cannot be watched are reported and skipped;
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
            for path in event.paths.into_iter().filter(|p| !ignore(p)) {
                let _ = tx.send(path);
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
        while let Some(first) = rx.recv().await {
            let mut batch = BTreeSet::from([first]);
            while let Ok(Some(path)) = tokio::time::timeout(quiet, rx.recv()).await {
                batch.insert(path);
            }
            on_batch(batch);
        }
    });
    Ok(Watch {
        _watcher: watcher,
        task,
    })
}
