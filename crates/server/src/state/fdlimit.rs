//! File descriptors for `maxclients`: at start the soft `RLIMIT_NOFILE` is
//! raised toward what `maxclients` and the server's own descriptors need, up
//! to the hard limit; where that is not enough, `maxclients` is lowered to
//! fit, with a warning (as Redis does in `adjustOpenFilesLimit`). Without
//! this a server whose limit is below `maxclients` runs out of descriptors
//! while it still accepts clients, and `accept` fails with `EMFILE`.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Descriptors kept free beside the server's own: log and checkpoint files
/// being rotated, `/proc` reads, a metrics scrape, the reply a refused
/// client gets (it is accepted, answered and closed).
pub(crate) const RESERVE: u64 = 32;

/// Descriptors the server holds whatever its clients: standard streams,
/// the listeners (RESP, memcached, its UDP socket, metrics), each event
/// loop's poll and waker, the acceptor's, and the store's open files.
pub(crate) fn own_needs(threads: usize, durable: bool) -> u64 {
    let stdio = 3;
    let listeners = 4;
    let loops = 2 * threads as u64 + 2;
    // The log, its directory, a checkpoint being written or read.
    let store = if durable { 8 } else { 0 };
    stdio + listeners + loops + store + RESERVE
}

/// What the limit became and what `maxclients` must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fitted {
    /// The soft limit in force after the attempt to raise it.
    pub limit: u64,
    /// The hard limit (the most an unprivileged process may raise to).
    pub hard: u64,
    /// `maxclients` as asked for, or lowered to fit `limit`.
    pub maxclients: usize,
}

/// The current soft and hard `RLIMIT_NOFILE` (`u64::MAX`: unlimited).
fn get() -> Option<(u64, u64)> {
    // rlim_t is u64 on Linux; RLIM_INFINITY is u64::MAX.
    getrlimit(Resource::RLIMIT_NOFILE).ok()
}

/// Sets the soft limit, keeping the hard one. False if refused.
fn set_soft(soft: u64, hard: u64) -> bool {
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).is_ok()
}

/// Raises the soft limit toward `maxclients + own` and returns what
/// `maxclients` fits under the limit then in force. `None` where the
/// limits cannot be read (no change is made).
pub(crate) fn fit(maxclients: usize, own: u64) -> Option<Fitted> {
    let (soft, hard) = get()?;
    let want = (maxclients as u64).saturating_add(own);
    let mut limit = soft;
    if soft < want {
        // Try the whole need first, then the hard limit (some systems
        // refuse a soft limit above a cap below an unlimited hard one).
        let target = want.min(hard);
        if set_soft(target, hard) {
            limit = target;
        } else if let Some((now, _)) = get() {
            limit = now;
        }
    }
    let fits = limit.saturating_sub(own);
    let maxclients = if fits < maxclients as u64 {
        fits as usize
    } else {
        maxclients
    };
    Some(Fitted {
        limit,
        hard,
        maxclients,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A need within the limits changes nothing; one beyond the hard limit
    /// lowers maxclients to what fits.
    #[test]
    fn maxclients_fits_the_descriptor_limit() {
        let (_, hard) = get().unwrap();
        let own = own_needs(2, false);
        let small = fit(10, own).unwrap();
        assert_eq!(small.maxclients, 10);
        assert!(small.limit >= 10 + own);
        if hard < u64::MAX / 2 {
            let huge = fit(usize::MAX / 2, own).unwrap();
            assert_eq!(huge.limit, hard);
            assert_eq!(huge.maxclients as u64, hard - own);
        }
    }
}
