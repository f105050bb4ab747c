//! The systemd journal through `journalctl --output=json`, supervised by the
//! host (see docs/design.md, "Reading the journal": systemd's own reader,
//! whatever journal format and compression the node writes, with no C library
//! linked into the host and its crashes outside it).
//!
//! One JSON object a line; a value is a string, an array of bytes when it is
//! not printable UTF-8, or an array of those when the field repeats. `--all`
//! keeps long values (the host bounds them itself); lines longer than
//! [`LINE`] are skipped whole.

use super::backend::{Batch, Entry, Followed, Following, Line, Position};
use crate::capabilities::error::CapError;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use tend_rules::logs::{MAX_FIELD, MAX_FIELDS, MAX_MESSAGE, bounded};
use tokio::sync::mpsc;

/// The longest JSON line read.
const LINE: usize = 256 * 1024;

/// `journalctl` and the journal it reads.
pub struct Journalctl {
    pub program: PathBuf,
    /// `--directory`: a journal other than the system's (a test peer's).
    pub directory: Option<PathBuf>,
}

/// The text of a journal value: a string, or bytes (lossy), or the first of
/// a repeated field.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) if items.iter().all(Value::is_u64) => Some(
            String::from_utf8_lossy(
                &items
                    .iter()
                    .filter_map(|b| b.as_u64().map(|b| b as u8))
                    .collect::<Vec<_>>(),
            )
            .into_owned(),
        ),
        Value::Array(items) => items.first().and_then(text),
        _ => None,
    }
}

/// One JSON line of `journalctl -o json`, as a line. None when it is not an
/// entry (no cursor, no boot).
pub fn parse(json: &[u8]) -> Option<Line> {
    let Value::Object(fields) = serde_json::from_slice(json).ok()? else {
        return None;
    };
    let get = |key: &str| fields.get(key).and_then(text);
    let cursor = get("__CURSOR")?;
    let position = Position::parse(tend_rules::logs::Source::Journal, &cursor).ok()?;
    let number = |key: &str| get(key).and_then(|v| v.parse::<u64>().ok());
    let shown = |v: String| tend_rules::text::inert(&bounded(&v, MAX_FIELD)).into_owned();
    let user_fields = fields
        .iter()
        .filter(|(k, _)| {
            !k.starts_with('_')
                && !matches!(
                    k.as_str(),
                    "MESSAGE" | "PRIORITY" | "SYSLOG_FACILITY" | "SYSLOG_IDENTIFIER"
                )
        })
        .filter_map(|(k, v)| Some((bounded(k, MAX_FIELD), shown(text(v)?))))
        .take(MAX_FIELDS)
        .collect();
    let entry = Entry {
        source: crate::wit::logs::Source::Journal,
        cursor: position.cursor(),
        boot_id: position.boot().to_string(),
        monotonic_us: number("__MONOTONIC_TIMESTAMP").unwrap_or(0),
        realtime_us: number("__REALTIME_TIMESTAMP"),
        priority: number("PRIORITY").unwrap_or(6).min(7) as u8,
        facility: number("SYSLOG_FACILITY").unwrap_or(3).min(255) as u8,
        unit: get("_SYSTEMD_UNIT").map(shown),
        identifier: get("SYSLOG_IDENTIFIER").map(shown),
        message: tend_rules::text::inert(&bounded(
            &get("MESSAGE").unwrap_or_default(),
            MAX_MESSAGE,
        ))
        .into_owned(),
        fields: user_fields,
    };
    Some(Line { position, entry })
}

/// The next line of `reader` up to [`LINE`] bytes; a longer one is skipped
/// whole. None at the end.
fn next_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<Option<()>> {
    loop {
        line.clear();
        let mut too_long = false;
        loop {
            let available = reader.fill_buf()?;
            if available.is_empty() {
                return Ok(None);
            }
            let (part, done) = match available.iter().position(|&b| b == b'\n') {
                Some(at) => (&available[..at], Some(at + 1)),
                None => (available, None),
            };
            if line.len() + part.len() > LINE {
                too_long = true;
            } else {
                line.extend_from_slice(part);
            }
            let used = done.unwrap_or(available.len());
            reader.consume(used);
            if done.is_some() {
                break;
            }
        }
        if !too_long {
            return Ok(Some(()));
        }
    }
}

impl Journalctl {
    /// `journalctl` reading entries after `after` (this boot's first when none
    /// or of another boot), following or not.
    fn command(&self, boot: &str, after: Option<&Position>, follow: bool) -> Command {
        let mut command = Command::new(&self.program);
        command.args(["--output=json", "--all", "--no-pager", "--quiet"]);
        if let Some(directory) = &self.directory {
            command.arg(format!("--directory={}", directory.display()));
        }
        match after {
            Some(position) if position.boot() == boot => {
                command.arg(format!("--after-cursor={}", position.cursor()));
            }
            _ => {
                command.arg("--boot=0");
            }
        }
        if follow {
            command.arg("--follow");
        }
        command
            .env_clear()
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // SAFETY: only async-signal-safe work between fork and exec: one prctl,
        // so a journalctl never outlives a tend killed with SIGKILL.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))
                .map_err(std::io::Error::from)
            });
        }
        command
    }

    fn spawn(&self, boot: &str, after: Option<&Position>, follow: bool) -> Result<Child, CapError> {
        self.command(boot, after, follow).spawn().map_err(|e| {
            CapError::Unavailable(format!(
                "cannot run {} to read the journal: {e}; install systemd's journalctl or set [host.logs] journalctl",
                self.program.display()
            ))
        })
    }

    pub fn read(
        &self,
        boot: &str,
        after: Option<&Position>,
        scan: usize,
    ) -> Result<Batch, CapError> {
        let mut child = self.spawn(boot, after, false)?;
        let mut reader = BufReader::new(child.stdout.take().expect("piped"));
        let mut batch = Batch::default();
        let mut line = Vec::new();
        let mut scanned = 0;
        while scanned < scan && next_line(&mut reader, &mut line).ok().flatten().is_some() {
            scanned += 1;
            if let Some(read) = parse(&line) {
                batch.lines.push(read);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        Ok(batch)
    }

    pub fn tail(&self, boot: &str) -> Result<Option<Position>, CapError> {
        let mut command = self.command(boot, None, false);
        command.arg("--lines=1");
        let output = command.output().map_err(|e| {
            CapError::Unavailable(format!("cannot run {}: {e}", self.program.display()))
        })?;
        Ok(output
            .stdout
            .split(|&b| b == b'\n')
            .rev()
            .find_map(parse)
            .map(|l| l.position))
    }

    pub fn follow(&self, boot: &str, after: Option<Position>) -> Result<Following, CapError> {
        let mut child = self.spawn(boot, after.as_ref(), true)?;
        let stdout = child.stdout.take().expect("piped");
        let (sender, lines) = mpsc::channel(1024);
        std::thread::Builder::new()
            .name("tend-journal".into())
            .spawn(move || {
                let mut reader = BufReader::new(stdout);
                let mut line = Vec::new();
                while let Ok(Some(())) = next_line(&mut reader, &mut line) {
                    let Some(read) = parse(&line) else { continue };
                    if !read.position.is_after(after.as_ref()) {
                        continue;
                    }
                    if sender
                        .blocking_send(Followed::Line(Box::new(read)))
                        .is_err()
                    {
                        return;
                    }
                }
            })
            .map_err(|e| CapError::Unavailable(format!("cannot start the journal reader: {e}")))?;
        Ok(Following {
            lines,
            stop: Box::new(KillOnDrop(child)),
        })
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENTRY: &str = r#"{"__CURSOR":"s=ab;i=2a;b=b0;m=1;t=2;x=3","__REALTIME_TIMESTAMP":"1700000000000000","__MONOTONIC_TIMESTAMP":"5000","_BOOT_ID":"b0","PRIORITY":"3","SYSLOG_FACILITY":"3","SYSLOG_IDENTIFIER":"containerd","_SYSTEMD_UNIT":"containerd.service","MESSAGE":"failed\u001b[2J","CODE_LINE":"12","_PID":"7"}"#;

    #[test]
    fn an_entry_gives_its_fields_inert_and_its_cursor() {
        let line = parse(ENTRY.as_bytes()).unwrap();
        assert!(matches!(line.position, Position::Journal { seq: 42, .. }));
        let entry = line.entry;
        assert_eq!(entry.cursor, "s=ab;i=2a;b=b0;m=1;t=2;x=3");
        assert_eq!(entry.boot_id, "b0");
        assert_eq!((entry.priority, entry.facility), (3, 3));
        assert_eq!(entry.unit.as_deref(), Some("containerd.service"));
        assert_eq!(entry.identifier.as_deref(), Some("containerd"));
        assert_eq!(entry.message, "failed\\u{1b}[2J");
        assert_eq!(entry.realtime_us, Some(1_700_000_000_000_000));
        assert_eq!(entry.fields, [("CODE_LINE".to_string(), "12".to_string())]);
    }

    #[test]
    fn binary_and_repeated_values_are_read_and_junk_is_skipped() {
        let line = parse(br#"{"__CURSOR":"s=a;i=1;b=b;m=1;t=1;x=1","MESSAGE":[104,105],"SYSLOG_IDENTIFIER":["a","b"]}"#).unwrap();
        assert_eq!(line.entry.message, "hi");
        assert_eq!(line.entry.identifier.as_deref(), Some("a"));
        for junk in [
            &b"not json"[..],
            b"[]",
            br#"{"MESSAGE":"no cursor"}"#,
            br#"{"__CURSOR":"--x"}"#,
        ] {
            assert!(parse(junk).is_none());
        }
    }

    #[test]
    fn a_line_longer_than_the_bound_is_skipped_whole() {
        let text = format!("{}\nshort\n", "x".repeat(LINE + 10));
        let mut reader = BufReader::with_capacity(1024, text.as_bytes());
        let mut line = Vec::new();
        assert!(next_line(&mut reader, &mut line).unwrap().is_some());
        assert_eq!(line, b"short");
        assert!(next_line(&mut reader, &mut line).unwrap().is_none());
    }

    #[test]
    fn journalctl_resumes_after_the_cursor_of_this_boot_and_reads_a_new_boot_whole() {
        let journalctl = Journalctl {
            program: "journalctl".into(),
            directory: Some("/j".into()),
        };
        let at = Position::parse(
            tend_rules::logs::Source::Journal,
            "s=a;i=1;b=b0;m=1;t=1;x=1",
        )
        .unwrap();
        let args = |boot: &str| -> Vec<String> {
            journalctl
                .command(boot, Some(&at), true)
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        assert!(args("b0").contains(&"--after-cursor=s=a;i=1;b=b0;m=1;t=1;x=1".to_string()));
        assert!(args("b0").contains(&"--directory=/j".to_string()));
        assert!(
            args("b1").contains(&"--boot=0".to_string()),
            "{:?}",
            args("b1")
        );
    }
}
