//! File-change triggers: each plugin whose `watch` path contains a changed file
//! gets one `file` trigger per path, after the debounce.

use super::TriggerSource;
use crate::config::Config;
use crate::fs_watch::{Watch, debounced};
use crate::scheduler::{Trigger, Triggers, trigger};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Quiet time after the last event before triggers are sent.
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// Watches every enabled plugin's `watch` paths (recursively).
#[derive(Default)]
pub struct FileSource {
    watch: Option<Watch>,
}

impl TriggerSource for FileSource {
    fn update(&mut self, config: &Config, triggers: &Triggers) {
        let paths: Vec<(String, PathBuf)> = config
            .enabled_plugins()
            .flat_map(|p| p.watch.iter().map(|w| (p.name.clone(), w.clone())))
            .collect();
        self.watch = None;
        if paths.is_empty() {
            return;
        }
        let roots: BTreeSet<(PathBuf, bool)> =
            paths.iter().map(|(_, p)| (p.clone(), true)).collect();
        let triggers = triggers.clone();
        self.watch = debounced(&roots, DEBOUNCE, is_atomic_write_temp, move |changed| {
            for path in &changed {
                for (plugin, _) in paths.iter().filter(|(_, w)| path.starts_with(w)) {
                    triggers.send(
                        plugin,
                        Trigger::with_subject(trigger::FILE, path.display().to_string()),
                    );
                }
            }
        })
        .inspect_err(|e| tracing::error!("cannot watch files for triggers: {e}"))
        .ok();
    }

    fn waits_on(&self, config: &Config, plugin: &str) -> Vec<String> {
        config
            .plugins
            .get(plugin)
            .map(|p| {
                p.watch
                    .iter()
                    .map(|w| format!("file changes under {}", w.display()))
                    .collect()
            })
            .unwrap_or_default()
    }
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
