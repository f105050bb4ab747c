//! The rules of `log` (always granted): lines and bytes per reconcile, and per
//! minute across reconciles (a plugin requeued in a tight loop cannot flood the
//! node's log either). Every line costs at least [`LINE_COST`] bytes, so empty
//! lines are not free. Pure: times are passed in.

use std::time::Duration;

/// What one line costs at least: the host's own framing of it.
pub const LINE_COST: usize = 64;

/// A cap on lines and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogCap {
    pub lines: u32,
    pub bytes: u64,
}

/// Lines and bytes spent against a cap.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Spent {
    lines: u32,
    bytes: u64,
}

impl Spent {
    /// Spend for one line of `len` bytes; false (nothing spent) when it does not fit.
    pub fn admit(&mut self, cap: LogCap, len: usize) -> bool {
        let cost = len.max(LINE_COST) as u64;
        if self.lines >= cap.lines || self.bytes + cost > cap.bytes {
            return false;
        }
        self.lines += 1;
        self.bytes += cost;
        true
    }
}

/// One plugin's spending in the current minute.
#[derive(Debug, Clone, Copy)]
pub struct MinuteWindow<T> {
    started: T,
    spent: Spent,
}

impl<T: Copy + std::ops::Sub<Output = Duration> + PartialOrd> MinuteWindow<T> {
    pub fn new(now: T) -> Self {
        MinuteWindow {
            started: now,
            spent: Spent::default(),
        }
    }

    /// Spend for one line at `now`, starting a new minute when the last is over.
    pub fn admit(&mut self, now: T, cap: LogCap, len: usize) -> bool {
        if now - self.started >= Duration::from_secs(60) {
            *self = MinuteWindow::new(now);
        }
        self.spent.admit(cap, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: LogCap = LogCap {
        lines: 1000,
        bytes: 64 * 1024,
    };

    #[test]
    fn bytes_and_lines_are_both_bounded_and_empty_lines_are_not_free() {
        let mut spent = Spent::default();
        let kept = (0..100).filter(|_| spent.admit(CAP, 1024)).count();
        assert_eq!(kept, 64);
        let mut spent = Spent::default();
        let empty = (0..200_000).filter(|_| spent.admit(CAP, 0)).count();
        assert_eq!(empty, 1000, "at most `lines` lines, however short");
    }

    #[test]
    fn a_minute_window_refills_only_after_a_minute() {
        let t0 = std::time::Instant::now();
        let cap = LogCap {
            lines: 2,
            bytes: 1 << 20,
        };
        let mut window = MinuteWindow::new(t0);
        assert!(window.admit(t0, cap, 1) && window.admit(t0, cap, 1));
        assert!(!window.admit(t0 + Duration::from_secs(59), cap, 1));
        assert!(window.admit(t0 + Duration::from_secs(60), cap, 1));
    }
}
