//! The rules of `log` (always granted): a byte budget per reconcile. Pure.

/// Bytes of log text one reconcile may emit; the rest is dropped and counted.
pub const MAX_LOG_BYTES: usize = 64 * 1024;

/// What one reconcile has logged and dropped so far.
#[derive(Debug, Default)]
pub struct LogBudget {
    used: usize,
    dropped: usize,
}

impl LogBudget {
    /// Spend for a line of `len` bytes; false (and counted) when it does not fit.
    pub fn admit(&mut self, len: usize) -> bool {
        if self.used + len > MAX_LOG_BYTES {
            self.dropped += 1;
            return false;
        }
        self.used += len;
        true
    }

    pub fn dropped(&self) -> usize {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_beyond_the_budget_is_dropped_and_counted() {
        let mut budget = LogBudget::default();
        let kept = (0..100).filter(|_| budget.admit(1024)).count();
        assert_eq!(kept, MAX_LOG_BYTES / 1024);
        assert_eq!(budget.dropped(), 100 - kept);
    }
}
