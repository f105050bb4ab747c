//! File-change triggers: notify watches the configured paths; events are
//! debounced (editors and `cp` write in several steps) and each plugin whose
//! watch path contains a changed file gets one `file` trigger per path.

use super::Triggers;
use crate::runtime::Trigger;
use notify::{RecursiveMode, Watcher};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// Quiet time after the last event before triggers are sent.
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// A path whose changes trigger a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchPath {
    pub plugin: String,
    pub path: PathBuf,
}

/// Keeps the watch alive; dropping it stops watching.
pub struct FileWatch {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watch every path (recursively) and trigger its plugin on changes. A path
/// that does not exist is reported and skipped.
pub fn start(paths: Vec<WatchPath>, triggers: Triggers) -> notify::Result<FileWatch> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && !matches!(event.kind, notify::EventKind::Access(_))
        {
            for path in event.paths.into_iter().filter(|p| !is_atomic_write_temp(p)) {
                let _ = tx.send(path);
            }
        }
    })?;
    let roots: BTreeSet<&PathBuf> = paths.iter().map(|w| &w.path).collect();
    for root in roots {
        if let Err(e) = watcher.watch(root, RecursiveMode::Recursive) {
            tracing::warn!(path = %root.display(), "cannot watch: {e}");
        }
    }
    let task = tokio::spawn(dispatch(rx, paths, triggers));
    Ok(FileWatch {
        _watcher: watcher,
        task,
    })
}

/// The temp files of the host's own atomic writes (`.NAME.tend-N.tmp`): their
/// rename lands on the real name, which is reported.
fn is_atomic_write_temp(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.') && n.ends_with(".tmp") && n.contains(".tend-"))
}

async fn dispatch(
    mut rx: mpsc::UnboundedReceiver<PathBuf>,
    paths: Vec<WatchPath>,
    triggers: Triggers,
) {
    while let Some(first) = rx.recv().await {
        let mut changed = BTreeSet::from([first]);
        while let Ok(Some(path)) = tokio::time::timeout(DEBOUNCE, rx.recv()).await {
            changed.insert(path);
        }
        for path in &changed {
            for watch in paths.iter().filter(|w| path.starts_with(&w.path)) {
                triggers.send(&watch.plugin, Trigger::file(path));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn own_temp_files_are_not_changes() {
        assert!(is_atomic_write_temp(Path::new(
            "/c/docker.io/.hosts.toml.tend-42.tmp"
        )));
        assert!(!is_atomic_write_temp(Path::new("/c/docker.io/hosts.toml")));
        assert!(!is_atomic_write_temp(Path::new("/c/.hidden")));
    }
}
