//! The slow log: requests slower than `slowlog-log-slower-than` microseconds,
//! newest first, at most `slowlog-max-len` of them (Redis's SLOWLOG).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

/// One logged request.
#[derive(Debug, Clone)]
pub struct SlowEntry {
    pub id: u64,
    pub unix_secs: u64,
    pub duration_us: u64,
    /// The first arguments, each cut to 128 bytes (Redis keeps 32 args).
    pub args: Vec<Vec<u8>>,
    pub client_addr: String,
    pub client_name: String,
}

#[derive(Debug)]
pub struct SlowLog {
    max_len: AtomicUsize,
    slower_than_us: AtomicI64,
    inner: Mutex<(u64, VecDeque<SlowEntry>)>,
}

/// Arguments kept per entry, and bytes kept per argument.
const MAX_ARGS: usize = 32;
const MAX_ARG_BYTES: usize = 128;

impl SlowLog {
    pub fn new(max_len: usize, slower_than_us: i64) -> SlowLog {
        SlowLog {
            max_len: AtomicUsize::new(max_len),
            slower_than_us: AtomicI64::new(slower_than_us),
            inner: Mutex::new((0, VecDeque::new())),
        }
    }

    /// CONFIG SET slowlog-max-len / slowlog-log-slower-than: a shorter
    /// log drops its oldest entries now.
    pub fn set_limits(&self, max_len: usize, slower_than_us: i64) {
        self.slower_than_us.store(slower_than_us, Relaxed);
        self.max_len.store(max_len, Relaxed);
        self.inner.lock().1.truncate(max_len);
    }

    /// (slowlog-max-len, slowlog-log-slower-than) in use.
    pub fn limits(&self) -> (usize, i64) {
        (
            self.max_len.load(Relaxed),
            self.slower_than_us.load(Relaxed),
        )
    }

    /// True if a request that took `d` belongs in the log.
    pub fn wants(&self, d: Duration) -> bool {
        let slower_than = self.slower_than_us.load(Relaxed);
        slower_than >= 0 && d.as_micros() as i64 >= slower_than
    }

    pub fn record(&self, d: Duration, args: &[&[u8]], client_addr: &str, client_name: &str) {
        let max_len = self.max_len.load(Relaxed);
        if !self.wants(d) || max_len == 0 {
            return;
        }
        let mut kept: Vec<Vec<u8>> = Vec::new();
        for (i, a) in args.iter().enumerate() {
            if i == MAX_ARGS - 1 && args.len() > MAX_ARGS {
                kept.push(format!("... ({} more arguments)", args.len() - i).into_bytes());
                break;
            }
            if a.len() > MAX_ARG_BYTES {
                let mut v = a[..MAX_ARG_BYTES].to_vec();
                v.extend_from_slice(
                    format!("... ({} more bytes)", a.len() - MAX_ARG_BYTES).as_bytes(),
                );
                kept.push(v);
            } else {
                kept.push(a.to_vec());
            }
        }
        let unix_secs = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut g = self.inner.lock();
        let id = g.0;
        g.0 += 1;
        g.1.push_front(SlowEntry {
            id,
            unix_secs,
            duration_us: d.as_micros() as u64,
            args: kept,
            client_addr: client_addr.to_string(),
            client_name: client_name.to_string(),
        });
        g.1.truncate(max_len);
    }

    /// The newest `n` entries.
    pub fn get(&self, n: usize) -> Vec<SlowEntry> {
        self.inner.lock().1.iter().take(n).cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.inner.lock().1.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reset(&self) {
        self.inner.lock().1.clear();
    }
}

/// Times commands for the slow log with one clock read per command, not
/// two: a command's time runs from the end of the one before it in the same
/// turn (its parse included, a few hundred nanoseconds) or from its own
/// start if it is the turn's first. A clock read was 3% of a pipelined
/// SET's samples.
#[derive(Debug, Default)]
pub(crate) struct Laps {
    last: Option<Instant>,
}

impl Laps {
    /// Marks a command's start (reads the clock only if no lap is open).
    pub(crate) fn start(&mut self) {
        if self.last.is_none() {
            self.last = Some(Instant::now());
        }
    }

    /// Closes the open lap without timing it: the next `start` reads the
    /// clock afresh.
    pub(crate) fn restart(&mut self) {
        self.last = None;
    }

    /// The time since the open lap began; the next lap begins now.
    pub(crate) fn lap(&mut self) -> Duration {
        let now = Instant::now();
        let took = self.last.map_or(Duration::ZERO, |t| now - t);
        self.last = Some(now);
        took
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_newest_first_and_bounds_length_and_arguments() {
        let log = SlowLog::new(2, 0);
        let long = vec![b'x'; 300];
        log.record(Duration::from_micros(5), &[b"get", b"a"], "c", "");
        log.record(Duration::from_micros(6), &[b"set", &long], "c", "n");
        log.record(Duration::from_micros(7), &[b"del", b"b"], "c", "");
        let e = log.get(10);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].args[0], b"del");
        assert_eq!(e[0].id, 2);
        assert!(e[1].args[1].ends_with(b"... (172 more bytes)"));
        log.reset();
        assert!(log.is_empty());
        let off = SlowLog::new(10, -1);
        off.record(Duration::from_secs(1), &[b"get"], "c", "");
        assert!(off.is_empty());
    }
}
