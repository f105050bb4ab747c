//! What the host keeps for each watching plugin, in one file each under
//! `<state-dir>/logs/` (mode 0600, replaced atomically): each watch rule's
//! cursor, and the matches the plugin has not taken yet. A match is saved
//! before the plugin is woken for it, so one matched before a `kill -9` is
//! answered once after the restart; a rule resumes after its cursor, so no
//! line is matched twice.

use super::backend::{Entry, Matched};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// The most entries kept for one plugin across its rules.
pub const MAX_PENDING: usize = 256;

/// One plugin's cursors and untaken matches.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Kept {
    /// Each rule's cursor: the last line it looked at.
    pub cursors: BTreeMap<String, String>,
    pub pending: Vec<Matched>,
    /// When it was last saved (the follower's clock), not saved itself.
    #[serde(skip)]
    saved_ms: Option<u64>,
}

impl Kept {
    fn entries(&self) -> usize {
        self.pending.iter().map(|m| m.entries.len()).sum()
    }

    fn rule(&mut self, rule: &str) -> &mut Matched {
        let at = match self.pending.iter().position(|m| m.rule == rule) {
            Some(at) => at,
            None => {
                self.pending.push(Matched {
                    rule: rule.to_string(),
                    entries: vec![],
                    missed: 0,
                    gap: 0,
                });
                self.pending.len() - 1
            }
        };
        &mut self.pending[at]
    }

    /// Keep `entry` for `rule`, or count it missed when the rule already
    /// holds `burst` untaken entries or the plugin [`MAX_PENDING`].
    pub fn add(&mut self, rule: &str, burst: u32, entry: Entry) -> bool {
        let full = self.entries() >= MAX_PENDING;
        let matched = self.rule(rule);
        if full || matched.entries.len() >= burst as usize {
            matched.missed += 1;
            return false;
        }
        matched.entries.push(entry);
        true
    }

    /// Whether progress over unmatched lines is due to be saved.
    pub fn progress_due(&self, now_ms: u64, every: std::time::Duration) -> bool {
        self.saved_ms
            .is_none_or(|at| now_ms.saturating_sub(at) >= every.as_millis() as u64)
    }

    pub fn saved_at(&mut self, now_ms: u64) {
        self.saved_ms = Some(now_ms);
    }

    pub fn miss(&mut self, rule: &str) {
        self.rule(rule).missed += 1;
    }

    pub fn gap(&mut self, rule: &str, lines: u64) {
        let matched = self.rule(rule);
        matched.gap = matched.gap.saturating_add(lines);
    }
}

/// Every watching plugin's [`Kept`], in memory and (for the real host) on disk.
pub struct MatchStore {
    dir: Option<PathBuf>,
    kept: Mutex<BTreeMap<String, Kept>>,
}

impl MatchStore {
    /// The store under `dir` (created with mode 0700), or in memory only.
    pub fn open(dir: Option<PathBuf>) -> std::io::Result<MatchStore> {
        if let Some(dir) = &dir {
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        }
        Ok(MatchStore {
            dir,
            kept: Mutex::default(),
        })
    }

    fn file(&self, plugin: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(format!("{plugin}.json")))
    }

    fn load(&self, plugin: &str) -> Kept {
        let Some(file) = self.file(plugin) else {
            return Kept::default();
        };
        match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(plugin, file = %file.display(), "unreadable logs store, starting again: {e}");
                Kept::default()
            }),
            Err(_) => Kept::default(),
        }
    }

    /// Look at or change `plugin`'s kept state; `save` writes it to disk
    /// before returning (what a wake-up or a take must not lose).
    pub fn with<T>(&self, plugin: &str, save: bool, change: impl FnOnce(&mut Kept) -> T) -> T {
        let mut all = self.kept.lock().unwrap();
        let kept = all
            .entry(plugin.to_string())
            .or_insert_with(|| self.load(plugin));
        let answer = change(kept);
        if save && let Some(file) = self.file(plugin) {
            let bytes = serde_json::to_vec(kept).expect("kept state serializes");
            if let Err(e) = crate::atomic::write(&file, 0o600, &bytes) {
                tracing::error!(plugin, file = %file.display(), "cannot save the logs store: {e}");
            }
        }
        answer
    }

    /// Forget every plugin not in `watching`, on disk too: a plugin disabled
    /// or removed starts from the present when it watches again.
    pub fn retain(&self, watching: &[&str]) {
        let mut all = self.kept.lock().unwrap();
        all.retain(|plugin, _| watching.contains(&plugin.as_str()));
        let Some(dir) = &self.dir else { return };
        let Ok(files) = std::fs::read_dir(dir) else {
            return;
        };
        for file in files.flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            if let Some(plugin) = name.strip_suffix(".json")
                && !watching.contains(&plugin)
            {
                let _ = std::fs::remove_file(file.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(message: &str) -> Entry {
        Entry {
            source: crate::wit::logs::Source::Kernel,
            cursor: "k1;b=b;s=1".into(),
            boot_id: "b".into(),
            monotonic_us: 0,
            realtime_us: None,
            priority: 3,
            facility: 0,
            unit: None,
            identifier: None,
            message: message.into(),
            fields: vec![],
        }
    }

    #[test]
    fn matches_and_cursors_outlive_the_process_and_a_taken_match_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let store = MatchStore::open(Some(dir.path().join("logs"))).unwrap();
        store.with("pd", true, |kept| {
            kept.cursors.insert("hung".into(), "k1;b=b;s=1".into());
            assert!(kept.add("hung", 5, entry("task hung")));
        });
        let mode = std::fs::metadata(dir.path().join("logs/pd.json"))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );

        let again = MatchStore::open(Some(dir.path().join("logs"))).unwrap();
        let pending = again.with("pd", true, |kept| std::mem::take(&mut kept.pending));
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].entries[0].message, "task hung");
        let third = MatchStore::open(Some(dir.path().join("logs"))).unwrap();
        third.with("pd", false, |kept| {
            assert!(kept.pending.is_empty(), "taken once");
            assert_eq!(kept.cursors["hung"], "k1;b=b;s=1");
        });
    }

    #[test]
    fn a_rule_keeps_at_most_its_burst_and_a_plugin_its_bound_the_rest_is_counted() {
        let mut kept = Kept::default();
        assert!(kept.add("a", 2, entry("1")));
        assert!(kept.add("a", 2, entry("2")));
        assert!(!kept.add("a", 2, entry("3")));
        assert_eq!(kept.pending[0].missed, 1);
        for i in 0..MAX_PENDING {
            kept.add(&format!("r{}", i % 50), 1000, entry("x"));
        }
        assert_eq!(kept.entries(), MAX_PENDING);
        assert!(kept.pending.iter().map(|m| m.missed).sum::<u64>() >= 3);
    }

    #[test]
    fn a_plugin_no_longer_watching_is_forgotten_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let store = MatchStore::open(Some(dir.path().to_path_buf())).unwrap();
        for plugin in ["a", "b"] {
            store.with(plugin, true, |kept| kept.miss("r"));
        }
        store.retain(&["a"]);
        assert!(dir.path().join("a.json").exists());
        assert!(!dir.path().join("b.json").exists());
    }
}
