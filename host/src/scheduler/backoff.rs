//! Exponential backoff after failed reconciles: 1 s doubling to 5 min, with
//! ±20 % jitter so plugins failing together do not retry in lockstep.

use std::time::Duration;

pub const INITIAL: Duration = Duration::from_secs(1);
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Default, Clone)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// Record a failure; returns how long to wait before the next reconcile.
    pub fn fail(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let base = INITIAL
            .saturating_mul(1 << (self.failures - 1).min(16))
            .min(MAX);
        base.mul_f64(0.8 + 0.4 * fastrand::f64()).min(MAX)
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn succeed(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_one_second_up_to_five_minutes_with_jitter() {
        let mut backoff = Backoff::default();
        let delays: Vec<Duration> = (0..12).map(|_| backoff.fail()).collect();
        for (i, delay) in delays.iter().enumerate().take(8) {
            let base = INITIAL * (1 << i);
            assert!(
                *delay >= base.mul_f64(0.8) && *delay <= base.mul_f64(1.2),
                "{i}: {delay:?}"
            );
        }
        assert!(delays[11] <= MAX && delays[11] >= MAX.mul_f64(0.8));
        backoff.succeed();
        assert!(backoff.fail() <= INITIAL.mul_f64(1.2));
    }
}
