//! File-change triggers: each plugin whose `watch` path contains a changed file
//! gets one `file` trigger per path, after the debounce.

use super::Triggers;
use crate::runtime::Trigger;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Quiet time after the last event before triggers are sent.
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// A path whose changes trigger a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchPath {
    pub plugin: String,
    pub path: PathBuf,
}

pub type FileWatch = crate::watch::Watch;

/// Watch every path (recursively) and trigger its plugin on changes. A path
/// that does not exist is reported and skipped.
pub fn start(paths: Vec<WatchPath>, triggers: Triggers) -> notify::Result<FileWatch> {
    let roots: BTreeSet<(PathBuf, bool)> = paths.iter().map(|w| (w.path.clone(), true)).collect();
    crate::watch::debounced(&roots, DEBOUNCE, is_atomic_write_temp, move |changed| {
        for path in &changed {
            for watch in paths.iter().filter(|w| path.starts_with(&w.path)) {
                triggers.send(&watch.plugin, Trigger::file(path));
            }
        }
    })
}

/// The temp files of the host's own atomic writes (`.NAME.tend-N.tmp`): their
/// rename lands on the real name, which is reported.
pub fn is_atomic_write_temp(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.') && n.ends_with(".tmp") && n.contains(".tend-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_temp_files_are_not_changes() {
        assert!(is_atomic_write_temp(Path::new(
            "/c/docker.io/.hosts.toml.tend-42.tmp"
        )));
        assert!(!is_atomic_write_temp(Path::new("/c/docker.io/hosts.toml")));
        assert!(!is_atomic_write_temp(Path::new("/c/.hidden")));
    }
}
