//! sd_notify when run as a `Type=notify` systemd service: READY after the
//! first load pass, STOPPING on shutdown, watchdog pings when WATCHDOG_USEC is
//! set. Without NOTIFY_SOCKET every call is a no-op.

use sd_notify::NotifyState;
use std::time::Duration;

pub fn ready() {
    notify(&[NotifyState::Ready, NotifyState::Status("plugins loaded")]);
}

pub fn stopping() {
    notify(&[NotifyState::Stopping]);
}

fn notify(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_some()
        && let Err(e) = sd_notify::notify(states)
    {
        tracing::warn!("sd_notify failed: {e}");
    }
}

/// Ping the watchdog at half its interval, if systemd asked for one.
pub fn spawn_watchdog() -> Option<tokio::task::JoinHandle<()>> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    let period = Duration::from_micros(usec) / 2;
    Some(tokio::spawn(async move {
        let mut ticker = tokio::time::interval(period);
        loop {
            ticker.tick().await;
            notify(&[NotifyState::Watchdog]);
        }
    }))
}
