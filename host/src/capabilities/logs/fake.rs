//! The fake log sources: lines a test writes, kept in memory, followed as
//! they are written.

use super::backend::{Batch, Entry, Followed, Following, Line, LogReader, Position};
use crate::capabilities::error::CapError;
use std::sync::Mutex;
use tend_rules::logs::Source;
use tokio::sync::mpsc;

/// The fakes' boot, host and SDK alike (see `tend_rules::logs::fake_cursor`).
pub const FAKE_BOOT: &str = "fake";

#[derive(Default)]
pub struct FakeLogs {
    lines: Mutex<Vec<(Source, Line)>>,
    followers: Mutex<Vec<(Source, mpsc::Sender<Followed>)>>,
}

impl FakeLogs {
    /// Write `message` to `source` (a journal line with `unit` and `identifier`).
    pub fn write(
        &self,
        source: Source,
        priority: u8,
        unit: Option<&str>,
        identifier: Option<&str>,
        message: &str,
    ) {
        let mut lines = self.lines.lock().unwrap();
        let seq = lines.iter().filter(|(s, _)| *s == source).count() as u64 + 1;
        let position = match source {
            Source::Kernel => Position::Kernel {
                boot: FAKE_BOOT.into(),
                seq,
            },
            Source::Journal => Position::Journal {
                boot: FAKE_BOOT.into(),
                seqnum_id: "fake".into(),
                seq,
                cursor: tend_rules::logs::fake_cursor(source, seq),
            },
        };
        let line = Line {
            entry: Entry {
                source: super::backend::wit_source(source),
                cursor: position.cursor(),
                boot_id: FAKE_BOOT.into(),
                monotonic_us: seq,
                realtime_us: None,
                priority,
                facility: if source == Source::Kernel { 0 } else { 3 },
                unit: unit.map(str::to_string),
                identifier: identifier.map(str::to_string),
                message: message.to_string(),
                fields: vec![],
            },
            position,
        };
        self.followers.lock().unwrap().retain(|(s, sender)| {
            *s != source
                || sender
                    .try_send(Followed::Line(Box::new(line.clone())))
                    .is_ok()
        });
        lines.push((source, line));
    }
}

impl LogReader for FakeLogs {
    fn read(
        &self,
        source: Source,
        after: Option<&Position>,
        scan: usize,
    ) -> Result<Batch, CapError> {
        let lines = self.lines.lock().unwrap();
        Ok(Batch {
            lines: lines
                .iter()
                .filter(|(s, l)| *s == source && l.position.is_after(after))
                .take(scan)
                .map(|(_, l)| l.clone())
                .collect(),
            gap: 0,
        })
    }

    fn tail(&self, source: Source) -> Result<Option<Position>, CapError> {
        let lines = self.lines.lock().unwrap();
        Ok(lines
            .iter()
            .rev()
            .find(|(s, _)| *s == source)
            .map(|(_, l)| l.position.clone()))
    }

    fn follow(&self, source: Source, after: Option<Position>) -> Result<Following, CapError> {
        let (sender, lines) = mpsc::channel(1 << 16);
        let written = self.lines.lock().unwrap();
        for (_, line) in written
            .iter()
            .filter(|(s, l)| *s == source && l.position.is_after(after.as_ref()))
        {
            let _ = sender.try_send(Followed::Line(Box::new(line.clone())));
        }
        self.followers.lock().unwrap().push((source, sender));
        Ok(Following {
            lines,
            stop: Box::new(()),
        })
    }
}
