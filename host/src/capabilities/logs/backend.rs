//! The logs backend: where a line sits in its source (a [`Position`], shown to
//! plugins as an opaque cursor), and the reader trait the real sources
//! (`/dev/kmsg`, `journalctl`) and the fake implement.

use crate::capabilities::error::CapError;
use std::cmp::Ordering;
use tend_rules::logs::Source;
use tokio::sync::mpsc;

pub use crate::wit::logs::{Entry, Matched, Page};

/// Where a line sits in its source: the kernel's sequence number within a
/// boot, or journald's sequence number within its sequence-number ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    Kernel {
        boot: String,
        seq: u64,
    },
    Journal {
        boot: String,
        seqnum_id: String,
        seq: u64,
        /// journald's own cursor, handed to `journalctl --after-cursor`.
        cursor: String,
    },
}

impl Position {
    /// The cursor a plugin sees and hands back.
    pub fn cursor(&self) -> String {
        match self {
            Position::Kernel { boot, seq } => format!("k1;b={boot};s={seq}"),
            Position::Journal { cursor, .. } => cursor.clone(),
        }
    }

    /// The position a cursor names, or why it names none.
    pub fn parse(source: Source, cursor: &str) -> Result<Position, CapError> {
        tend_rules::logs::check_cursor(cursor)?;
        let field = |key: &str| {
            cursor
                .split(';')
                .find_map(|part| part.strip_prefix(key)?.strip_prefix('='))
        };
        let wrong = || {
            CapError::Invalid(format!(
                "cursor {cursor:?} is not a {} cursor: pass back a cursor `read` or `matches` gave for this source",
                source.name()
            ))
        };
        match source {
            Source::Kernel if cursor.starts_with("k1;") => Ok(Position::Kernel {
                boot: field("b").ok_or_else(wrong)?.to_string(),
                seq: field("s").and_then(|s| s.parse().ok()).ok_or_else(wrong)?,
            }),
            Source::Journal if cursor.starts_with("s=") => Ok(Position::Journal {
                boot: field("b").ok_or_else(wrong)?.to_string(),
                seqnum_id: field("s").ok_or_else(wrong)?.to_string(),
                seq: field("i")
                    .and_then(|i| u64::from_str_radix(i, 16).ok())
                    .ok_or_else(wrong)?,
                cursor: cursor.to_string(),
            }),
            _ => Err(wrong()),
        }
    }

    pub fn boot(&self) -> &str {
        match self {
            Position::Kernel { boot, .. } | Position::Journal { boot, .. } => boot,
        }
    }

    /// How `self` stands to `other` when both are of one boot and one
    /// sequence; none when they cannot be compared (another boot, a journal
    /// whose sequence started again).
    pub fn order(&self, other: &Position) -> Option<Ordering> {
        match (self, other) {
            (Position::Kernel { boot: a, seq: x }, Position::Kernel { boot: b, seq: y })
                if a == b =>
            {
                Some(x.cmp(y))
            }
            (
                Position::Journal {
                    seqnum_id: a,
                    seq: x,
                    ..
                },
                Position::Journal {
                    seqnum_id: b,
                    seq: y,
                    ..
                },
            ) if a == b => Some(x.cmp(y)),
            _ => None,
        }
    }

    /// Whether a line at `self` comes after `cursor` (a cursor of another
    /// boot or sequence is behind every line of this one).
    pub fn is_after(&self, cursor: Option<&Position>) -> bool {
        cursor.is_none_or(|c| self.order(c) != Some(Ordering::Less) && self != c)
    }
}

/// A line read from a source, with its position.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub position: Position,
    pub entry: Entry,
}

/// What a followed source sends.
#[derive(Debug, Clone, PartialEq)]
pub enum Followed {
    Line(Box<Line>),
    /// Lines lost before they were read (the kernel ring buffer overwritten).
    Gap(u64),
}

/// Lines read at once: oldest first, with the lines lost between the
/// position asked for and the first.
#[derive(Debug, Default)]
pub struct Batch {
    pub lines: Vec<Line>,
    pub gap: u64,
}

/// A source being followed: lines arrive on `lines` until it is dropped,
/// which stops the reader (and ends a `journalctl` child).
pub struct Following {
    pub lines: mpsc::Receiver<Followed>,
    pub stop: Box<dyn Send>,
}

/// The node's log sources. Blocking: the host calls them off the async
/// runtime's worker threads.
pub trait LogReader: Send + Sync + 'static {
    /// Up to `scan` lines of `source` after `after` (the oldest of this boot
    /// when none, or when `after` is of another boot), oldest first.
    fn read(
        &self,
        source: Source,
        after: Option<&Position>,
        scan: usize,
    ) -> Result<Batch, CapError>;
    /// The position of the newest line now, if any.
    fn tail(&self, source: Source) -> Result<Option<Position>, CapError>;
    /// Every line after `after`, as it is written.
    fn follow(&self, source: Source, after: Option<Position>) -> Result<Following, CapError>;
}

/// The WIT's name of a source.
pub fn wit_source(source: Source) -> crate::wit::logs::Source {
    match source {
        Source::Kernel => crate::wit::logs::Source::Kernel,
        Source::Journal => crate::wit::logs::Source::Journal,
    }
}

/// The rules' name of a WIT source.
pub fn rules_source(source: crate::wit::logs::Source) -> Source {
    match source {
        crate::wit::logs::Source::Kernel => Source::Kernel,
        crate::wit::logs::Source::Journal => Source::Journal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_the_other_source() {
        let kernel = Position::Kernel {
            boot: "abc".into(),
            seq: 42,
        };
        assert_eq!(
            Position::parse(Source::Kernel, &kernel.cursor()).unwrap(),
            kernel
        );
        let journald = "s=ba37c62f;i=1f;b=c220efc9;m=186a0;t=1e8480;x=39d4";
        let journal = Position::parse(Source::Journal, journald).unwrap();
        assert!(matches!(&journal, Position::Journal { seq: 31, boot, .. } if boot == "c220efc9"));
        assert_eq!(journal.cursor(), journald);
        assert!(Position::parse(Source::Journal, &kernel.cursor()).is_err());
        assert!(Position::parse(Source::Kernel, journald).is_err());
        assert!(Position::parse(Source::Kernel, "k1;b=x").is_err());
        assert!(Position::parse(Source::Journal, "--file=/etc/shadow").is_err());
    }

    #[test]
    fn a_line_is_after_a_cursor_of_its_sequence_or_of_another_boot() {
        let at = |boot: &str, seq| Position::Kernel {
            boot: boot.into(),
            seq,
        };
        assert!(at("a", 5).is_after(Some(&at("a", 4))));
        assert!(!at("a", 4).is_after(Some(&at("a", 4))));
        assert!(!at("a", 3).is_after(Some(&at("a", 4))));
        assert!(at("b", 1).is_after(Some(&at("a", 4))), "a new boot");
        assert!(at("a", 0).is_after(None));
    }
}
