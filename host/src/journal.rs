//! The durable journal of every mutation: one JSON object per line, one file
//! per plugin (`<state-dir>/journal/<plugin>.jsonl`), each rotated by size on
//! its own, so a plugin that floods the journal rotates out only its own
//! history, and the whole journal stays bounded (plugins x (KEEP + 1) x MAX_BYTES). The mutation gate
//! appends an *intent* (fsynced) before a mutation is performed and its
//! *result* after; a reader pairs them by id, and an intent without a result
//! (the reconcile was cut off, or Tend crashed) reads as interrupted. After a
//! crash the reader skips a torn last line; everything before it is intact.
//!
//! Plans (dry-run entries: `tend plan`, `dry-run = true`) go to a journal of
//! their own, `<state-dir>/journal/plans/<plugin>.jsonl`, rotated at
//! [`PLAN_MAX_BYTES`]: however many plans run, they never rotate a plugin's
//! real history away. `tend journal` reads both.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Size at which a plugin's journal is rotated.
pub const MAX_BYTES: u64 = 4 << 20;
/// Size at which a plugin's plan journal is rotated.
pub const PLAN_MAX_BYTES: u64 = 1 << 20;
/// Rotated files kept per plugin (`<plugin>.jsonl.1` is the newest of them).
pub const KEEP: usize = 2;
/// The folder of the plan journals, inside the journal folder.
const PLANS: &str = "plans";
/// The single journal file of Tend before per-plugin files; still read.
const LEGACY: &str = "journal.jsonl";
/// The journal's schema version (`journal/VERSION`, see [`crate::schema`]).
pub const SCHEMA_VERSION: u64 = 1;

/// The result of a mutation whose call never returned to the plugin.
pub const INTERRUPTED: &str = "interrupted: the reconcile ended (deadline, trap or crash) before this mutation returned; check the target";

/// What a journal line records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// About to be performed (fsynced first); its result follows under the same id.
    Intent,
    /// The result of the intent with the same id.
    Result,
    /// A dry run: recorded, not performed.
    Planned,
    /// Refused by a budget: not performed.
    Refused,
    /// Complete in one line (lines written before intents existed).
    #[default]
    Done,
}

/// One mutation, performed, planned or refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Pairs an intent with its result.
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub phase: Phase,
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    pub time_ms: u64,
    pub plugin: String,
    /// sha256 of the component that asked for it.
    pub digest: String,
    pub triggers: Vec<String>,
    pub capability: String,
    pub operation: String,
    pub target: String,
    pub detail: String,
    pub dry_run: bool,
    /// "ok", "interrupted ...", or the error.
    pub result: String,
}

impl Entry {
    pub fn now() -> (String, u64) {
        let now = SystemTime::now();
        let ms = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        (humantime::format_rfc3339_millis(now).to_string(), ms)
    }
}

pub struct Journal {
    dir: PathBuf,
    max_bytes: u64,
    plan_max_bytes: u64,
    /// Open files by path, appended to under this lock.
    files: Mutex<HashMap<PathBuf, File>>,
}

impl Journal {
    pub fn open(state_dir: &Path) -> io::Result<Journal> {
        Self::with_limits(state_dir, MAX_BYTES, PLAN_MAX_BYTES)
    }

    pub fn with_limit(state_dir: &Path, max_bytes: u64) -> io::Result<Journal> {
        Self::with_limits(state_dir, max_bytes, PLAN_MAX_BYTES)
    }

    /// A journal rotating real history at `max_bytes` and plans at `plan_max_bytes`.
    pub fn with_limits(
        state_dir: &Path,
        max_bytes: u64,
        plan_max_bytes: u64,
    ) -> io::Result<Journal> {
        let dir = state_dir.join("journal");
        // Checked first, so that a newer Tend's journal gets nothing written.
        crate::schema::check_dir("journal", &dir, SCHEMA_VERSION)?;
        crate::atomic::create_private_dir(&dir.join(PLANS))?;
        Ok(Journal {
            dir,
            max_bytes,
            plan_max_bytes,
            files: Mutex::default(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The serialized line of `entry` (with its newline): what appending costs.
    pub fn line(entry: &Entry) -> String {
        let mut line = serde_json::to_string(entry).expect("an entry serializes");
        line.push('\n');
        line
    }

    /// Append `entries` (all of one plugin) to that plugin's file (plans to its
    /// plan file), fsynced when `durable`; rotates a file first when it would
    /// grow past its limit.
    pub fn append(&self, entries: &[Entry], durable: bool) -> io::Result<()> {
        let (plans, real): (Vec<&Entry>, Vec<&Entry>) = entries.iter().partition(|e| e.dry_run);
        if let Some(first) = real.first() {
            self.append_to(&self.dir, self.max_bytes, &first.plugin, &real, durable)?;
        }
        if let Some(first) = plans.first() {
            let dir = self.dir.join(PLANS);
            self.append_to(&dir, self.plan_max_bytes, &first.plugin, &plans, durable)?;
        }
        Ok(())
    }

    fn append_to(
        &self,
        dir: &Path,
        max_bytes: u64,
        plugin: &str,
        entries: &[&Entry],
        durable: bool,
    ) -> io::Result<()> {
        let text: String = entries.iter().map(|e| Journal::line(e)).collect();
        let current = dir.join(format!("{plugin}.jsonl"));
        let mut files = self.files.lock().unwrap();
        let size = std::fs::metadata(&current).map_or(0, |m| m.len());
        if size > 0 && size + text.len() as u64 > max_bytes {
            files.remove(&current);
            rotate(dir, plugin)?;
        }
        if !files.contains_key(&current) {
            let created = !current.exists();
            let mut opened = OpenOptions::new()
                .create(true)
                .append(true)
                .read(true)
                .mode(0o600)
                .open(&current)?;
            if created {
                // Tend's own, whatever the umask narrowed or left.
                opened.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            }
            // A crash can leave a torn last line: end it, so it costs only itself.
            if ends_without_newline(&mut opened)? {
                opened.write_all(b"\n")?;
            }
            // A new file's name must be durable too, or an fsynced intent in it
            // could vanish with the directory entry at a power loss.
            if created {
                File::open(dir)?.sync_all()?;
            }
            files.insert(current.clone(), opened);
        }
        let handle = files.get_mut(&current).expect("opened above");
        handle.write_all(text.as_bytes())?;
        if durable {
            handle.sync_data()?;
        }
        Ok(())
    }

    /// Make everything appended so far for `plugin` durable.
    pub fn sync(&self, plugin: &str) -> io::Result<()> {
        let files = self.files.lock().unwrap();
        let name = format!("{plugin}.jsonl");
        for path in [self.dir.join(&name), self.dir.join(PLANS).join(&name)] {
            if let Some(file) = files.get(&path) {
                file.sync_data()?;
            }
        }
        Ok(())
    }
}

fn ends_without_newline(file: &mut File) -> io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    if file.metadata()?.len() == 0 {
        return Ok(false);
    }
    let mut last = [0u8];
    file.seek(SeekFrom::End(-1))?;
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}

fn rotate(dir: &Path, plugin: &str) -> io::Result<()> {
    let numbered = |n: usize| dir.join(format!("{plugin}.jsonl.{n}"));
    let _ = std::fs::remove_file(numbered(KEEP));
    for n in (1..KEEP).rev() {
        if numbered(n).exists() {
            std::fs::rename(numbered(n), numbered(n + 1))?;
        }
    }
    std::fs::rename(dir.join(format!("{plugin}.jsonl")), numbered(1))?;
    File::open(dir)?.sync_all()
}

/// The plugins with a current journal file in `dir`.
fn plugins_in(dir: &Path) -> io::Result<Vec<String>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let plugin = name.strip_suffix(".jsonl")?;
                (plugin != "journal").then(|| plugin.to_string())
            })
            .collect()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(vec![]),
        Err(e) => Err(e),
    }
}

/// Every journal file, oldest rotation first within each plugin (real
/// history, then plans); the legacy single file first.
fn journal_files(dir: &Path, plugin: Option<&str>) -> io::Result<Vec<PathBuf>> {
    let plans = dir.join(PLANS);
    let mut plugins = plugins_in(dir)?;
    plugins.extend(plugins_in(&plans)?);
    plugins.retain(|p| plugin.is_none_or(|wanted| wanted == p));
    plugins.sort();
    plugins.dedup();
    let mut files: Vec<PathBuf> = (1..=4)
        .rev()
        .map(|n| dir.join(format!("{LEGACY}.{n}")))
        .chain([dir.join(LEGACY)])
        .collect();
    for plugin in plugins {
        for dir in [dir, plans.as_path()] {
            files.extend(
                (1..=KEEP)
                    .rev()
                    .map(|n| dir.join(format!("{plugin}.jsonl.{n}"))),
            );
            files.push(dir.join(format!("{plugin}.jsonl")));
        }
    }
    Ok(files)
}

/// Which entries `tend journal` shows.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub plugin: Option<String>,
    pub since: Option<Duration>,
}

/// Entries oldest first, each intent merged with its result (an intent with
/// none reads as interrupted), and how many unreadable lines were skipped (a
/// torn write at a crash, or a line from a newer Tend).
pub fn read(state_dir: &Path, filter: &Filter) -> io::Result<(Vec<Entry>, usize)> {
    let dir = state_dir.join("journal");
    crate::schema::readable("journal", &dir, SCHEMA_VERSION)?;
    let files = journal_files(&dir, filter.plugin.as_deref())?;
    let cutoff = filter.since.map(|since| {
        SystemTime::now()
            .checked_sub(since)
            .unwrap_or(UNIX_EPOCH)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64
    });
    let mut entries: Vec<Entry> = Vec::new();
    // Intents still waiting for their result: id -> index in `entries`.
    let mut intents: HashMap<String, usize> = HashMap::new();
    let mut skipped = 0;
    for path in files {
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for line in io::BufReader::new(file).split(b'\n') {
            let line = line?;
            if line.is_empty() {
                continue;
            }
            let Ok(mut entry) = serde_json::from_slice::<Entry>(&line) else {
                skipped += 1;
                continue;
            };
            match entry.phase {
                Phase::Result if intents.contains_key(&entry.id) => {
                    let at = intents.remove(&entry.id).expect("checked");
                    entries[at].result = entry.result;
                }
                Phase::Intent => {
                    entry.result = INTERRUPTED.to_string();
                    intents.insert(entry.id.clone(), entries.len());
                    entries.push(entry);
                }
                _ => entries.push(entry),
            }
        }
    }
    // Filter after pairing, so a result never loses its intent to the filter.
    entries.retain(|entry| {
        filter.plugin.as_ref().is_none_or(|p| *p == entry.plugin)
            && cutoff.is_none_or(|c| entry.time_ms >= c)
    });
    // Each plugin's file is in order; merge them by time (stable: ties keep file order).
    entries.sort_by_key(|e| e.time_ms);
    Ok((entries, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(plugin: &str, target: &str, time_ms: u64) -> Entry {
        Entry {
            id: String::new(),
            phase: Phase::Done,
            time: "t".into(),
            time_ms,
            plugin: plugin.into(),
            digest: "sha256:x".into(),
            triggers: vec!["interval".into()],
            capability: "files".into(),
            operation: "write".into(),
            target: target.into(),
            detail: String::new(),
            dry_run: false,
            result: "ok".into(),
        }
    }

    #[test]
    fn lines_written_before_intents_and_per_plugin_files_still_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("journal")).unwrap();
        let old = concat!(
            r#"{"time":"2024-05-06T07:08:09.010Z","time_ms":1714979289010,"plugin":"p","#,
            r#""digest":"sha256:d","triggers":["startup"],"capability":"files","#,
            r#""operation":"write","target":"/etc/x","detail":"","dry_run":false,"result":"ok"}"#,
            "\n"
        );
        std::fs::write(dir.path().join("journal").join(LEGACY), old).unwrap();
        let (entries, skipped) = read(dir.path(), &Filter::default()).unwrap();
        assert_eq!((entries.len(), skipped), (1, 0));
        let entry = &entries[0];
        assert_eq!((entry.phase, entry.id.as_str()), (Phase::Done, ""));
        assert_eq!(
            (entry.target.as_str(), entry.result.as_str()),
            ("/etc/x", "ok")
        );
    }

    #[test]
    fn appends_and_filters_by_plugin_and_age() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let (_, now) = Entry::now();
        journal
            .append(
                &[entry("a", "/old", now - 3_600_000), entry("b", "/x", now)],
                true,
            )
            .unwrap();
        journal.append(&[entry("a", "/new", now)], true).unwrap();
        let (all, skipped) = read(dir.path(), &Filter::default()).unwrap();
        assert_eq!((all.len(), skipped), (3, 0));
        let filter = Filter {
            plugin: Some("a".into()),
            since: Some(Duration::from_secs(60)),
        };
        let (recent, _) = read(dir.path(), &filter).unwrap();
        let targets: Vec<_> = recent.iter().map(|e| e.target.as_str()).collect();
        assert_eq!(targets, ["/new"]);
    }

    #[test]
    fn rotates_by_size_and_reads_across_files_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::with_limit(dir.path(), 1000).unwrap();
        for i in 0..40 {
            journal
                .append(&[entry("a", &format!("/f{i}"), i)], true)
                .unwrap();
        }
        assert!(dir.path().join("journal/a.jsonl.1").exists());
        assert!(
            !dir.path()
                .join(format!("journal/a.jsonl.{}", KEEP + 1))
                .exists()
        );
        let (entries, _) = read(dir.path(), &Filter::default()).unwrap();
        let order: Vec<u64> = entries.iter().map(|e| e.time_ms).collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "oldest first: {order:?}"
        );
        assert_eq!(*order.last().unwrap(), 39);
        assert!(entries.len() < 40, "old rotations are dropped");
    }

    #[test]
    fn a_flooding_plugin_rotates_out_only_its_own_history() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::with_limit(dir.path(), 2000).unwrap();
        journal
            .append(&[entry("quiet", "/precious", 1)], true)
            .unwrap();
        for i in 0..500 {
            journal
                .append(
                    &[entry("loud", &format!("/{}", "x".repeat(100)), 2 + i)],
                    false,
                )
                .unwrap();
        }
        let (entries, _) = read(dir.path(), &Filter::default()).unwrap();
        assert_eq!(entries[0].target, "/precious");
        let total: u64 = std::fs::read_dir(dir.path().join("journal"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum();
        assert!(total <= 2000 * (KEEP as u64 + 1) + 2000, "bounded: {total}");
        let loud = read(
            dir.path(),
            &Filter {
                plugin: Some("loud".into()),
                since: None,
            },
        )
        .unwrap()
        .0;
        assert!(loud.len() < 500 && loud.iter().all(|e| e.plugin == "loud"));
    }

    #[test]
    fn plans_rotate_on_their_own_and_never_evict_real_history() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::with_limits(dir.path(), 2000, 1000).unwrap();
        journal.append(&[entry("p", "/real", 1)], true).unwrap();
        for i in 0..500 {
            let mut plan = entry("p", &format!("/planned-{i}"), 2 + i);
            plan.phase = Phase::Planned;
            plan.dry_run = true;
            journal.append(&[plan], false).unwrap();
        }
        let (entries, _) = read(dir.path(), &Filter::default()).unwrap();
        assert_eq!(entries[0].target, "/real", "the real entry survives");
        let plans = entries.iter().filter(|e| e.dry_run).count();
        assert!(plans > 0 && plans < 500, "plans shown, rotated: {plans}");
        assert_eq!(entries.last().unwrap().target, "/planned-499");
        let real = std::fs::read_to_string(dir.path().join("journal/p.jsonl")).unwrap();
        assert_eq!(real.lines().count(), 1, "no plan in the real history");
        assert!(!dir.path().join("journal/p.jsonl.1").exists());
        let plan_bytes: u64 = std::fs::read_dir(dir.path().join("journal/plans"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(
            plan_bytes <= 1000 * (KEEP as u64 + 1),
            "bounded: {plan_bytes}"
        );
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_the_rest_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        journal
            .append(&[entry("a", "/1", 1), entry("a", "/2", 2)], true)
            .unwrap();
        let path = dir.path().join("journal/a.jsonl");
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"time":"t","time_ms":3,"plug"#).unwrap();
        let (entries, skipped) = read(dir.path(), &Filter::default()).unwrap();
        assert_eq!((entries.len(), skipped), (2, 1));
        // After a restart, appending costs nothing more than the torn line.
        Journal::open(dir.path())
            .unwrap()
            .append(&[entry("a", "/4", 4)], true)
            .unwrap();
        let (entries, skipped) = read(dir.path(), &Filter::default()).unwrap();
        assert_eq!((entries.len(), skipped), (3, 1));
    }

    #[test]
    fn a_journal_gets_its_version_and_a_newer_one_is_neither_written_nor_read() {
        let dir = tempfile::tempdir().unwrap();
        Journal::open(dir.path()).unwrap();
        let version = dir.path().join("journal").join(crate::schema::VERSION_FILE);
        assert_eq!(std::fs::read_to_string(&version).unwrap(), "1\n");
        std::fs::write(&version, "2\n").unwrap();
        std::fs::remove_dir(dir.path().join("journal").join(PLANS)).unwrap();
        let opened = Journal::open(dir.path()).err().unwrap().to_string();
        assert!(
            !dir.path().join("journal").join(PLANS).exists(),
            "a newer journal gets nothing written"
        );
        let read = read(dir.path(), &Filter::default())
            .unwrap_err()
            .to_string();
        for err in [opened, read] {
            assert!(
                err.contains("has schema version 2, written by a newer tend"),
                "{err}"
            );
        }
    }
}
