//! Time as plugins need it: the wall clock (WASI's, which `SystemTime` reads
//! on wasm32-wasip2; a wall clock because timers kept in `state` outlive the
//! process) and durations written for operators.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `duration` in whole seconds, rounded up, as operators write it: "4m 12s".
pub fn human_duration(duration: Duration) -> String {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    humantime::format_duration(Duration::from_secs(seconds)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_up_to_whole_seconds() {
        assert_eq!(human_duration(Duration::from_millis(252_001)), "4m 13s");
        assert_eq!(human_duration(Duration::from_secs(600)), "10m");
        assert_eq!(human_duration(Duration::ZERO), "0s");
        assert!(wall_clock_ms() > 1_700_000_000_000);
    }
}
