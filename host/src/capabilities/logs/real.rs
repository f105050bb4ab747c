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

impl RealLogs {
    /// The boot ID as the journal writes it (32 hexadecimal digits); a
    /// cursor means nothing without it, so an unreadable one is an error.
    fn boot(&self) -> Result<String, CapError> {
        let text = std::fs::read_to_string(&self.boot_id_path).unwrap_or_default();
        let boot: String = text
            .trim()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(64)
            .collect();
        if boot.is_empty() {
            return Err(CapError::Unavailable(format!(
                "cannot read this boot's ID from {}: set [host.logs] boot-id-path",
                self.boot_id_path.display()
            )));
        }
        Ok(boot)
    }
}

impl LogReader for RealLogs {
    fn read(
        &self,
        source: Source,
        after: Option<&Position>,
        scan: usize,
    ) -> Result<Batch, CapError> {
        let boot = self.boot()?;
        match source {
            Source::Kernel => self.kmsg.read(&boot, after, scan),
            Source::Journal => self.journal.read(&boot, after, scan),
        }
    }

    fn tail(&self, source: Source) -> Result<Option<Position>, CapError> {
        let boot = self.boot()?;
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
        let boot = self.boot()?;
        match source {
            Source::Kernel => self.kmsg.follow(boot, after),
            Source::Journal => self.journal.follow(&boot, after),
        }
    }
}
