//! Warnings that a client can cause (a failed handshake, a wrong
//! password) go to the log at most once a second, with the number of
//! those left out since, so that a flood of them cannot flood the log.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// One kind of warning's rate limit.
#[derive(Debug, Default)]
pub struct RateLimited {
    /// When a line was last written, and how many were left out since.
    last: Mutex<(Option<Instant>, u64)>,
}

impl RateLimited {
    /// Logs `what` with the client's address `from`, unless a line was
    /// written less than a second ago.
    pub fn warn(&self, what: &str, from: &str) {
        let now = Instant::now();
        let mut last = self.last.lock();
        if last
            .0
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            last.1 += 1;
            return;
        }
        let skipped = std::mem::replace(&mut last.1, 0);
        last.0 = Some(now);
        drop(last);
        if skipped > 0 {
            tracing::warn!("{what} (client {from}; {skipped} more since the last report)");
        } else {
            tracing::warn!("{what} (client {from})");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_second_with_a_count_of_the_rest() {
        let r = RateLimited::default();
        for _ in 0..5 {
            r.warn("x", "a");
        }
        assert_eq!(r.last.lock().1, 4);
        r.last.lock().0 = Some(Instant::now() - Duration::from_secs(2));
        r.warn("x", "a");
        assert_eq!(r.last.lock().1, 0);
    }
}
