//! The time unit-doctor judges by: the SDK's wall clock, behind a trait so
//! tests can set the time.

/// Wall-clock time in milliseconds since the Unix epoch.
pub trait Clock {
    fn now_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        tend_sdk::wall_clock_ms()
    }
}
