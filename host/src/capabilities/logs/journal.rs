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
use crate::text::cut;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use tend_rules::logs::{MAX_FIELD, MAX_FIELDS, MAX_MESSAGE};
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
    // Kernel lines the journal carries are the kernel source's: a journal
    // grant (`identifiers = ["*"]`) must not read them without `kernel = true`.
    if get("_TRANSPORT").as_deref() == Some("kernel") {
        return None;
    }
    let number = |key: &str| get(key).and_then(|v| v.parse::<u64>().ok());
    let shown = |v: &str| cut(tend_rules::text::inert(v).into_owned(), MAX_FIELD);
    let user_fields = fields
        .iter()
        .filter(|(k, _)| {
            !k.starts_with('_')
                && !matches!(
                    k.as_str(),
                    "MESSAGE" | "PRIORITY" | "SYSLOG_FACILITY" | "SYSLOG_IDENTIFIER"
                )
        })
        .filter_map(|(k, v)| Some((shown(k), shown(&text(v)?))))
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
        unit: get("_SYSTEMD_UNIT").as_deref().map(shown),
        identifier: get("SYSLOG_IDENTIFIER").as_deref().map(shown),
        message: cut(
            tend_rules::text::inert(&get("MESSAGE").unwrap_or_default()).into_owned(),
            MAX_MESSAGE,
        ),
        fields: user_fields,
    };
    Some(Line { position, entry })
}

/// What [`next_line`] read.
#[derive(Debug, PartialEq)]
enum Read {
    /// A line, in the buffer.
    Line,
    /// A line longer than [`LINE`] bytes, skipped whole (a lost line).
    TooLong,
    End,
}

/// The next line of `reader` up to [`LINE`] bytes into `line`.
fn next_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<Read> {
    line.clear();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(Read::End);
        }
        let (part, done) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (&available[..at], Some(at + 1)),
            None => (available, None),
        };
        if line.len() + part.len() > LINE {
            too_long = true;
            line.clear();
        } else {
            line.extend_from_slice(part);
        }
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(if too_long { Read::TooLong } else { Read::Line });
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
            // Without --no-tail, --follow starts at the last 10 entries.
            command.args(["--follow", "--no-tail"]);
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
        let program = self.program.display().to_string();
        (self.command(boot, after, follow).spawn()).map_err(|e| cannot_run(&program, e))
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
        for _ in 0..scan {
            match next_line(&mut reader, &mut line) {
                Ok(Read::Line) => batch.lines.extend(parse(&line)),
                Ok(Read::TooLong) => batch.gap += 1,
                Ok(Read::End) | Err(_) => break,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        Ok(batch)
    }

    /// The newest entry's position: only its cursor is printed, and read
    /// within the line bound.
    pub fn tail(&self, boot: &str) -> Result<Option<Position>, CapError> {
        let mut command = self.command(boot, None, false);
        command.args(["--lines=1", "--output-fields=__CURSOR"]);
        let program = self.program.display().to_string();
        let mut child = command.spawn().map_err(|e| cannot_run(&program, e))?;
        let mut reader = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = Vec::new();
        let mut newest = None;
        while let Ok(read) = next_line(&mut reader, &mut line) {
            match read {
                Read::Line => newest = parse(&line).map(|l| l.position).or(newest),
                Read::TooLong => {}
                Read::End => break,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        Ok(newest)
    }

    /// Follow the journal: the child is spawned by the thread that reads it
    /// and lives as long (its parent-death signal is that thread's), and
    /// killed when the answer is dropped.
    pub fn follow(&self, boot: &str, after: Option<Position>) -> Result<Following, CapError> {
        let mut command = self.command(boot, after.as_ref(), true);
        let program = self.program.display().to_string();
        let (sender, lines) = mpsc::channel(512);
        let (spawned, started) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("tend-journal".into())
            .spawn(move || {
                let mut child = match command.spawn() {
                    Ok(child) => child,
                    Err(e) => {
                        let _ = spawned.send(Err(cannot_run(&program, e)));
                        return;
                    }
                };
                let stdout = child.stdout.take().expect("piped");
                let child = std::sync::Arc::new(std::sync::Mutex::new(child));
                let _ = spawned.send(Ok(KillOnDrop(child.clone())));
                forward(BufReader::new(stdout), after, &sender);
                let _ = child.lock().unwrap().wait();
            })
            .map_err(|e| CapError::Unavailable(format!("cannot start the journal reader: {e}")))?;
        let stop = started
            .recv()
            .map_err(|_| CapError::Unavailable("the journal reader ended at once".into()))??;
        Ok(Following {
            lines,
            stop: Box::new(stop),
        })
    }
}

/// Every entry after `after` from a following `journalctl` to `sender`; a
/// line over the bound is a lost line (a gap of one).
fn forward(mut reader: impl BufRead, after: Option<Position>, sender: &mpsc::Sender<Followed>) {
    let mut line = Vec::new();
    loop {
        let item = match next_line(&mut reader, &mut line) {
            Ok(Read::Line) => match parse(&line) {
                Some(read) if read.position.is_after(after.as_ref()) => {
                    Followed::Line(Box::new(read))
                }
                _ => continue,
            },
            Ok(Read::TooLong) => Followed::Gap(1),
            Ok(Read::End) | Err(_) => return,
        };
        if sender.blocking_send(item).is_err() {
            return;
        }
    }
}

fn cannot_run(program: &str, error: std::io::Error) -> CapError {
    CapError::Unavailable(format!(
        "cannot run {program} to read the journal: {error}; install systemd's journalctl or set [host.logs] journalctl"
    ))
}

struct KillOnDrop(std::sync::Arc<std::sync::Mutex<Child>>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // The reading thread reaps it.
        let _ = self.0.lock().unwrap().kill();
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
    fn kernel_lines_are_the_kernel_sources_and_escapes_cannot_outgrow_the_bounds() {
        let kernel = br#"{"__CURSOR":"s=a;i=1;b=b;m=1;t=1;x=1","_TRANSPORT":"kernel","SYSLOG_IDENTIFIER":"kernel","MESSAGE":"oom"}"#;
        assert!(
            parse(kernel).is_none(),
            "identifiers = [\"*\"] is not kernel = true"
        );
        let escapes = r"\u001b".repeat(5000);
        let json = format!(
            r#"{{"__CURSOR":"s=a;i=1;b=b;m=1;t=1;x=1","MESSAGE":"{escapes}","K\u001bEY":"{escapes}"}}"#
        );
        let entry = parse(json.as_bytes()).unwrap().entry;
        assert!(
            entry.message.len() <= MAX_MESSAGE,
            "{}",
            entry.message.len()
        );
        let (key, value) = &entry.fields[0];
        assert!(!key.chars().any(char::is_control) && value.len() <= MAX_FIELD);
    }

    #[test]
    fn a_line_longer_than_the_bound_is_skipped_whole() {
        let text = format!("{}\nshort\n", "x".repeat(LINE + 10));
        let mut reader = BufReader::with_capacity(1024, text.as_bytes());
        let mut line = Vec::new();
        assert_eq!(next_line(&mut reader, &mut line).unwrap(), Read::TooLong);
        assert_eq!(next_line(&mut reader, &mut line).unwrap(), Read::Line);
        assert_eq!(line, b"short");
        assert_eq!(next_line(&mut reader, &mut line).unwrap(), Read::End);
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
