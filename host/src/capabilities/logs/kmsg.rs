//! The kernel ring buffer through `/dev/kmsg`: its record format
//! (`<prio>,<seq>,<usec>,<flags>[,...];<message>` then ` KEY=value`
//! continuation lines; Documentation/ABI/testing/dev-kmsg), and a reader that
//! follows it.
//!
//! One `read(2)` of the device returns one whole record; a regular file in the
//! same format (the tests' stand-in, where a test may not flood the machine's
//! real ring buffer) is read in chunks and split at record lines, and polled
//! at its end. That is the only difference between the two. When the ring
//! buffer overwrote records before they were read, the device answers EPIPE
//! once; either way the gap shows as a jump in sequence numbers.

use super::backend::{Batch, Entry, Followed, Following, Line, Position};
use crate::capabilities::error::CapError;
use crate::text::cut;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tend_rules::logs::{MAX_FIELD, MAX_FIELDS, MAX_MESSAGE};
use tokio::sync::mpsc;

/// The longest record read: the kernel's own is at most 8 KiB, and a
/// stand-in file's longer lines are cut.
const RECORD: usize = 16 * 1024;

/// One record, parsed. None for a line that is not a record.
pub fn parse(record: &str, boot: &str) -> Option<Line> {
    let mut lines = record.split('\n').filter(|l| !l.is_empty());
    let (header, message) = lines.next()?.split_once(';')?;
    let mut fields = header.split(',');
    let prio: u32 = fields.next()?.parse().ok()?;
    let seq: u64 = fields.next()?.parse().ok()?;
    let usec: u64 = fields.next()?.parse().ok()?;
    let fields = lines
        .filter_map(|l| l.strip_prefix(' ')?.split_once('='))
        .take(MAX_FIELDS)
        .map(|(k, v)| (cut(unescape(k), MAX_FIELD), cut(unescape(v), MAX_FIELD)))
        .collect();
    Some(Line {
        position: Position::Kernel {
            boot: boot.to_string(),
            seq,
        },
        entry: Entry {
            source: crate::wit::logs::Source::Kernel,
            cursor: Position::Kernel {
                boot: boot.to_string(),
                seq,
            }
            .cursor(),
            boot_id: boot.to_string(),
            monotonic_us: usec,
            realtime_us: None,
            priority: (prio & 7) as u8,
            facility: (prio >> 3).min(255) as u8,
            unit: None,
            identifier: None,
            message: cut(unescape(message), MAX_MESSAGE),
            fields,
        },
    })
}

/// The kernel escapes unprintable bytes as `\xNN`; printable ones come back,
/// control characters stay escaped (a plugin's text is inert).
fn unescape(text: &str) -> String {
    if !text.contains("\\x") {
        return tend_rules::text::inert(text).into_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("\\x") {
        out.push_str(&rest[..at]);
        let hex = rest.get(at + 2..at + 4);
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(byte) if byte.is_ascii_graphic() || byte == b' ' => {
                out.push(byte as char);
                rest = &rest[at + 4..];
            }
            _ => {
                out.push_str("\\x");
                rest = &rest[at + 2..];
            }
        }
    }
    out.push_str(rest);
    tend_rules::text::inert(&out).into_owned()
}

/// The kernel log at `path`: `/dev/kmsg`, or a file in its format.
pub struct Kmsg {
    pub path: PathBuf,
}

/// An open kernel log: records one at a time.
struct Records {
    file: File,
    device: bool,
    /// What one `read(2)` fills, allocated once.
    chunk: Box<[u8]>,
    buffer: Vec<u8>,
    /// Complete records split from the last chunk, not yet taken.
    ready: std::collections::VecDeque<String>,
}

enum Next {
    Record(String),
    /// Nothing more now.
    End,
    /// Records were overwritten before they were read.
    Overrun,
}

impl Records {
    fn open(path: &Path) -> Result<Records, CapError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)
            .map_err(|e| {
                CapError::Unavailable(format!(
                    "cannot open the kernel log {}: {e}; set [host.logs] kernel-path, or run tend as root",
                    path.display()
                ))
            })?;
        let device = file
            .metadata()
            .is_ok_and(|m| m.file_type().is_char_device());
        Ok(Records {
            file,
            device,
            chunk: vec![0; RECORD].into_boxed_slice(),
            buffer: Vec::new(),
            ready: Default::default(),
        })
    }

    fn next(&mut self) -> Result<Next, CapError> {
        if let Some(record) = self.ready.pop_front() {
            return Ok(Next::Record(record));
        }
        match self.file.read(&mut self.chunk) {
            Ok(0) => Ok(Next::End),
            Ok(n) => {
                let chunk = std::mem::take(&mut self.chunk);
                self.split(&chunk[..n]);
                self.chunk = chunk;
                Ok(self.ready.pop_front().map_or(Next::End, Next::Record))
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(Next::End),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PIPE.raw_os_error()) => {
                Ok(Next::Overrun)
            }
            Err(e) => Err(CapError::Unavailable(format!(
                "reading the kernel log: {e}"
            ))),
        }
    }

    /// A device read is one record; a file's chunk holds whole records
    /// (a record line and its ` KEY=value` lines) and maybe part of one.
    fn split(&mut self, chunk: &[u8]) {
        if self.device {
            self.ready
                .push_back(String::from_utf8_lossy(chunk).into_owned());
            return;
        }
        self.buffer.extend_from_slice(chunk);
        let Some(end) = self.buffer.iter().rposition(|&b| b == b'\n') else {
            self.buffer.truncate(RECORD);
            return;
        };
        let text = String::from_utf8_lossy(&self.buffer[..=end]).into_owned();
        self.buffer.drain(..=end);
        for line in text.split_inclusive('\n') {
            match self.ready.back_mut() {
                Some(record) if line.starts_with(' ') => record.push_str(line),
                _ => self.ready.push_back(line.to_string()),
            }
        }
    }

    /// Wait for more: poll the device, or a moment at a file's end.
    fn wait(&self) {
        if self.device {
            let mut fds = [rustix::event::PollFd::new(
                &self.file,
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 250_000_000,
            };
            let _ = rustix::event::poll(&mut fds, Some(&timeout));
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What a reader does with each record after `after`: lines and the gaps
/// between them, by sequence numbers.
struct Sequence<'a> {
    boot: &'a str,
    after: Option<Position>,
    last: Option<u64>,
}

impl Sequence<'_> {
    fn take(&mut self, record: &str) -> Vec<Followed> {
        let Some(line) = parse(record, self.boot) else {
            return vec![];
        };
        let Position::Kernel { seq, .. } = line.position else {
            return vec![];
        };
        if !line.position.is_after(self.after.as_ref()) {
            return vec![];
        }
        let expected = self.last.map(|l| l + 1).or_else(|| match &self.after {
            Some(Position::Kernel { boot, seq }) if boot == self.boot => Some(seq + 1),
            _ => None,
        });
        self.last = Some(seq);
        let mut out = vec![];
        if let Some(expected) = expected.filter(|&e| seq > e) {
            out.push(Followed::Gap(seq - expected));
        }
        out.push(Followed::Line(Box::new(line)));
        out
    }
}

impl Kmsg {
    pub fn read(
        &self,
        boot: &str,
        after: Option<&Position>,
        scan: usize,
    ) -> Result<Batch, CapError> {
        let mut records = Records::open(&self.path)?;
        let mut sequence = Sequence {
            boot,
            after: after.cloned(),
            last: None,
        };
        let mut batch = Batch::default();
        // Only lines after the cursor count toward `scan`: the ring buffer
        // itself bounds the records before it.
        while batch.lines.len() < scan {
            match records.next()? {
                Next::Record(record) => {
                    for item in sequence.take(&record) {
                        match item {
                            Followed::Line(line) => batch.lines.push(*line),
                            Followed::Gap(n) => batch.gap += n,
                        }
                    }
                }
                Next::Overrun => continue,
                Next::End => break,
            }
        }
        Ok(batch)
    }

    pub fn follow(&self, boot: String, after: Option<Position>) -> Result<Following, CapError> {
        let mut records = Records::open(&self.path)?;
        let (sender, lines) = mpsc::channel(512);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("tend-kmsg".into())
            .spawn(move || {
                let mut sequence = Sequence {
                    boot: &boot,
                    after,
                    last: None,
                };
                while !stopped.load(Ordering::Relaxed) {
                    match records.next() {
                        Ok(Next::Record(record)) => {
                            for item in sequence.take(&record) {
                                if sender.blocking_send(item).is_err() {
                                    return;
                                }
                            }
                        }
                        Ok(Next::Overrun) => {}
                        Ok(Next::End) => records.wait(),
                        Err(e) => {
                            tracing::warn!("{e}; the kernel log is followed again later");
                            return;
                        }
                    }
                }
            })
            .map_err(|e| {
                CapError::Unavailable(format!("cannot start the kernel log reader: {e}"))
            })?;
        Ok(Following {
            lines,
            stop: Box::new(StopOnDrop(stop)),
        })
    }
}

struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_gives_priority_facility_sequence_time_and_continuations() {
        let line = parse(
            "6,193,294215,-;acpi PNP0A08:00: _OSC: OS supports\n SUBSYSTEM=acpi\n DEVICE=+acpi:PNP0A08:00\n",
            "b0",
        )
        .unwrap();
        assert_eq!(
            line.position,
            Position::Kernel {
                boot: "b0".into(),
                seq: 193
            }
        );
        let entry = line.entry;
        assert_eq!((entry.priority, entry.facility), (6, 0));
        assert_eq!(entry.monotonic_us, 294215);
        assert_eq!(entry.message, "acpi PNP0A08:00: _OSC: OS supports");
        assert_eq!(
            entry.fields,
            [
                ("SUBSYSTEM".to_string(), "acpi".to_string()),
                ("DEVICE".to_string(), "+acpi:PNP0A08:00".to_string())
            ]
        );
        assert_eq!(entry.cursor, "k1;b=b0;s=193");
    }

    #[test]
    fn a_user_record_has_its_facility_and_escapes_stay_inert() {
        let line = parse("14,347,59650573749,-;tend\\x20test \\x1b[2J\\x0a", "b").unwrap();
        assert_eq!((line.entry.priority, line.entry.facility), (6, 1));
        assert_eq!(line.entry.message, "tend test \\x1b[2J\\x0a");
    }

    #[test]
    fn what_is_not_a_record_is_skipped_and_huge_messages_are_cut() {
        for junk in ["", "no header", "x,1,2,-;m", "6,1;m"] {
            assert!(parse(junk, "b").is_none(), "{junk}");
        }
        let long = format!("3,1,1,-;{}", "x".repeat(100_000));
        assert!(parse(&long, "b").unwrap().entry.message.len() <= MAX_MESSAGE);
    }

    fn file_with(records: &str) -> (tempfile::TempDir, Kmsg) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kmsg");
        std::fs::write(&path, records).unwrap();
        (dir, Kmsg { path })
    }

    #[test]
    fn a_read_after_a_cursor_skips_what_was_read_and_counts_what_was_lost() {
        let (_dir, kmsg) =
            file_with("6,1,10,-;one\n 6,9,9,-;x\n6,2,20,-;two\n SUBSYSTEM=a\n6,7,70,-;seven\n");
        let all = kmsg.read("b", None, 100).unwrap();
        let seqs: Vec<_> = all.lines.iter().map(|l| l.entry.message.clone()).collect();
        assert_eq!(seqs, ["one", "two", "seven"]);
        assert_eq!(all.gap, 4, "3 to 6 were overwritten");
        let after = Position::Kernel {
            boot: "b".into(),
            seq: 1,
        };
        let rest = kmsg.read("b", Some(&after), 100).unwrap();
        assert_eq!(rest.lines.len(), 2);
        let old_boot = Position::Kernel {
            boot: "a".into(),
            seq: 99,
        };
        assert_eq!(
            kmsg.read("b", Some(&old_boot), 100).unwrap().lines.len(),
            3,
            "a cursor of another boot reads this boot from its start"
        );
    }

    #[tokio::test]
    async fn following_a_file_sees_records_appended_later() {
        let (_dir, kmsg) = file_with("6,1,10,-;old\n");
        let after = Position::Kernel {
            boot: "b".into(),
            seq: 1,
        };
        let mut following = kmsg.follow("b".into(), Some(after)).unwrap();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&kmsg.path)
            .unwrap();
        std::io::Write::write_all(&mut file, b"3,2,20,-;new\n").unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), following.lines.recv())
            .await
            .unwrap()
            .unwrap();
        let Followed::Line(line) = got else {
            panic!("{got:?}")
        };
        assert_eq!(line.entry.message, "new");
    }
}
