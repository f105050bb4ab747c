//! The real log sources: the kernel ring buffer and the journal of this node.

use super::backend::{Batch, Following, LogReader, Position};
use super::journal::Journalctl;
use super::kmsg::Kmsg;
use crate::capabilities::error::CapError;
use std::path::PathBuf;
use tend_rules::logs::Source;

pub struct RealLogs {
    pub kmsg: Kmsg,
    pub journal: Journalctl,
    pub boot_id_path: PathBuf,
}

impl LogReader for RealLogs {
    /// The boot ID as the journal writes it: 32 hexadecimal digits.
    fn boot_id(&self) -> String {
        std::fs::read_to_string(&self.boot_id_path)
            .unwrap_or_default()
            .trim()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(64)
            .collect()
    }

    fn read(
        &self,
        source: Source,
        after: Option<&Position>,
        scan: usize,
    ) -> Result<Batch, CapError> {
        let boot = self.boot_id();
        match source {
            Source::Kernel => self.kmsg.read(&boot, after, scan),
            Source::Journal => self.journal.read(&boot, after, scan),
        }
    }

    fn tail(&self, source: Source) -> Result<Option<Position>, CapError> {
        let boot = self.boot_id();
        match source {
            Source::Kernel => Ok(self
                .kmsg
                .read(&boot, None, usize::MAX)?
                .lines
                .pop()
                .map(|l| l.position)),
            Source::Journal => self.journal.tail(&boot),
        }
    }

    fn follow(&self, source: Source, after: Option<Position>) -> Result<Following, CapError> {
        let boot = self.boot_id();
        match source {
            Source::Kernel => self.kmsg.follow(boot, after),
            Source::Journal => self.journal.follow(&boot, after),
        }
    }
}
