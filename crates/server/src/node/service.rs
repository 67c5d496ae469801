//! What the node tells a service manager (systemd's `sd_notify`, a no-op
//! when it was not started by one): `READY=1` once it serves, how far
//! loading has got (with more start-up time asked for, so a long recovery
//! is not killed by `TimeoutStartSec`), and a watchdog ping on every tick
//! until its storage fails, so that `WatchdogSec=` restarts a node that
//! only a restart can repair.

use std::time::Duration;

use sd_notify::NotifyState;

use crate::state::Shared;

/// Ticks between loading reports (a second at housekeeping's pace).
const REPORT_EVERY: u64 = 10;

fn notify(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("cannot notify the service manager (NOTIFY_SOCKET): {e}");
    }
}

pub(crate) fn ready() {
    notify(&[NotifyState::Ready, NotifyState::Status("serving")]);
}

pub(crate) fn loading(shared: &Shared, tick: u64) {
    if !tick.is_multiple_of(REPORT_EVERY) {
        return;
    }
    let status = shared.readiness.describe();
    // Two reports' worth, so that one late tick is no timeout.
    let extend = Duration::from_secs(2 * REPORT_EVERY / 10 + 8).as_micros() as u32;
    notify(&[
        NotifyState::Status(&status),
        NotifyState::ExtendTimeoutUsec(extend),
    ]);
}

pub(crate) fn failed(why: &str) {
    notify(&[NotifyState::Status(&format!("failed: {why}"))]);
}

/// Pings the watchdog, at a quarter of its period, if it is on.
pub(crate) fn watchdog(tick: u64) {
    let Some(period) = sd_notify::watchdog_enabled() else {
        return;
    };
    let every = (period.as_millis() as u64 / 4 / 100).max(1);
    if tick.is_multiple_of(every) {
        notify(&[NotifyState::Watchdog]);
    }
}
