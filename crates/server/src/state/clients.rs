//! What CLIENT LIST, CLIENT INFO and CLIENT KILL see of each connection, and
//! CLIENT PAUSE's server-wide state.
//!
//! A connection and the registry share one [`ClientEntry`]: the
//! connection's event loop publishes into it with relaxed atomic stores as
//! it reads, runs commands and writes, so keeping it current takes no lock
//! and touches nothing another connection touches. CLIENT LIST takes the
//! registry's lock only to list the entries. CLIENT KILL marks an entry and
//! posts its token to the owning loop's [`Mailbox`], then wakes that loop,
//! which closes the connection (a connection is only ever touched by its own
//! loop).

use std::net::SocketAddr;
use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// No command yet, or the last one was unknown: CLIENT LIST's `cmd=NULL`.
pub const NO_COMMAND: u32 = u32::MAX;

/// Flag bits of [`ClientEntry::flags`] (CLIENT LIST's `flags=`).
pub const FLAG_NO_EVICT: u8 = 1;
pub const FLAG_NO_TOUCH: u8 = 2;
/// Its next command waits for a CLIENT PAUSE to end (Redis's `b`).
pub const FLAG_BLOCKED: u8 = 4;

/// One connection as the registry sees it.
#[derive(Debug)]
pub struct ClientEntry {
    pub id: u64,
    pub addr: SocketAddr,
    /// The accepted socket's local address (None if the OS would not say).
    pub laddr: Option<SocketAddr>,
    /// On a unix socket: its path (`addr` and `laddr` are then
    /// meaningless and shown as `path:0`, as Redis shows them).
    pub unix: Option<Arc<str>>,
    pub fd: i32,
    pub connected_at: Instant,
    /// The listener: "resp" or "memcached".
    pub protocol: &'static str,
    /// Set by CLIENT SETNAME and HELLO SETNAME (rare; a lock of its own).
    pub name: Mutex<Option<String>>,
    /// The ACL user the connection runs as; set on AUTH.
    pub user: Mutex<String>,
    /// Milliseconds after `connected_at` of the last input read or output
    /// written.
    last_io_ms: AtomicU64,
    /// The last command's index in the command documentation (its full
    /// name, `client|list` for a subcommand), or [`NO_COMMAND`].
    pub cmd: AtomicU32,
    /// Commands queued after MULTI, -1 outside a transaction.
    pub multi: AtomicI64,
    pub multi_mem: AtomicU64,
    /// Unprocessed input bytes and the free room after them.
    pub qbuf: AtomicU64,
    pub qbuf_free: AtomicU64,
    /// The output buffer's capacity, unsent bytes, and the most unsent.
    pub obuf_cap: AtomicU64,
    pub obuf_used: AtomicU64,
    pub obuf_peak: AtomicU64,
    /// Bytes of the input buffer (its whole allocation).
    pub ibuf_cap: AtomicU64,
    pub resp: AtomicU8,
    /// Output waits for the socket (CLIENT LIST's `events=rw`).
    pub writable: AtomicBool,
    pub flags: AtomicU8,
    /// What the connection's own structures take besides its buffers.
    pub fixed_mem: AtomicU64,
    /// CLIENT KILL marked it: its loop closes it, serving nothing more.
    killed: AtomicBool,
    /// Where its event loop hears of a kill, once a loop adopted it.
    home: OnceLock<Home>,
}

/// An event loop's address for a connection: its mailbox and the
/// connection's token there.
#[derive(Debug)]
struct Home {
    mailbox: Arc<Mailbox>,
    token: usize,
}

/// Where an event loop hears, from other threads, which of its connections
/// to close.
#[derive(Debug)]
pub struct Mailbox {
    waker: Arc<mio::Waker>,
    kills: Mutex<Vec<(usize, u64)>>,
    /// MONITOR lines for its connections: (token, client id, bytes).
    monitor_out: Mutex<Vec<(usize, u64, Vec<u8>)>>,
}

impl Mailbox {
    pub fn new(waker: Arc<mio::Waker>) -> Mailbox {
        Mailbox {
            waker,
            kills: Mutex::new(Vec::new()),
            monitor_out: Mutex::new(Vec::new()),
        }
    }

    /// The MONITOR lines posted since the last call.
    pub fn take_monitor_out(&self) -> Vec<(usize, u64, Vec<u8>)> {
        std::mem::take(&mut *self.monitor_out.lock())
    }

    /// The (token, client id) pairs posted since the last call.
    pub fn take_kills(&self) -> Vec<(usize, u64)> {
        std::mem::take(&mut *self.kills.lock())
    }
}

impl ClientEntry {
    pub fn new(
        id: u64,
        addr: SocketAddr,
        laddr: Option<SocketAddr>,
        fd: i32,
        protocol: &'static str,
    ) -> ClientEntry {
        ClientEntry {
            id,
            addr,
            laddr,
            unix: None,
            fd,
            connected_at: Instant::now(),
            protocol,
            name: Mutex::new(None),
            user: Mutex::new("default".into()),
            last_io_ms: AtomicU64::new(0),
            cmd: AtomicU32::new(NO_COMMAND),
            multi: AtomicI64::new(-1),
            multi_mem: AtomicU64::new(0),
            qbuf: AtomicU64::new(0),
            qbuf_free: AtomicU64::new(0),
            obuf_cap: AtomicU64::new(0),
            obuf_used: AtomicU64::new(0),
            obuf_peak: AtomicU64::new(0),
            ibuf_cap: AtomicU64::new(0),
            resp: AtomicU8::new(2),
            writable: AtomicBool::new(false),
            flags: AtomicU8::new(0),
            fixed_mem: AtomicU64::new(std::mem::size_of::<ClientEntry>() as u64),
            killed: AtomicBool::new(false),
            home: OnceLock::new(),
        }
    }

    /// Its event loop adopted it under `token`.
    pub fn settle(&self, mailbox: &Arc<Mailbox>, token: usize) {
        let _ = self.home.set(Home {
            mailbox: Arc::clone(mailbox),
            token,
        });
    }

    /// CLIENT LIST's `addr`.
    pub fn addr_text(&self) -> String {
        match &self.unix {
            Some(path) => format!("{path}:0"),
            None => self.addr.to_string(),
        }
    }

    /// CLIENT LIST's `laddr`.
    pub fn laddr_text(&self) -> String {
        match (&self.unix, self.laddr) {
            (Some(path), _) => format!("{path}:0"),
            (None, Some(a)) => a.to_string(),
            (None, None) => String::new(),
        }
    }

    /// Input was read, or output written, now.
    ///
    /// `now` is the event loop's clock, read once per wakeup rather than
    /// once per read and write (CLIENT LIST counts idle time in seconds).
    #[inline]
    pub fn touch(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.connected_at).as_millis() as u64;
        self.last_io_ms.store(ms, Ordering::Relaxed);
    }

    /// Time since the last input or output (CLIENT LIST's `idle`, Redis's
    /// `lastinteraction`).
    pub fn idle(&self) -> Duration {
        let last = Duration::from_millis(self.last_io_ms.load(Ordering::Relaxed));
        self.connected_at.elapsed().saturating_sub(last)
    }

    pub fn set_flag(&self, flag: u8, on: bool) {
        if on {
            self.flags.fetch_or(flag, Ordering::Relaxed);
        } else {
            self.flags.fetch_and(!flag, Ordering::Relaxed);
        }
    }

    pub fn has_flag(&self, flag: u8) -> bool {
        self.flags.load(Ordering::Relaxed) & flag != 0
    }

    pub fn killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// Marks it killed and has its loop close it. False if it was already.
    pub fn kill(&self) -> bool {
        if self.killed.swap(true, Ordering::AcqRel) {
            return false;
        }
        if let Some(h) = self.home.get() {
            h.mailbox.kills.lock().push((h.token, self.id));
            let _ = h.mailbox.waker.wake();
        }
        true
    }

    /// Hands a MONITOR line to its loop, which writes it to the client.
    pub fn post_monitor(&self, line: &[u8]) {
        if let Some(h) = self.home.get() {
            h.mailbox
                .monitor_out
                .lock()
                .push((h.token, self.id, line.to_vec()));
            let _ = h.mailbox.waker.wake();
        }
    }

    /// Records the output buffer's state after a write or a command.
    #[inline]
    pub fn publish_output(&self, cap: usize, unsent: usize) {
        self.obuf_cap.store(cap as u64, Ordering::Relaxed);
        self.obuf_used.store(unsent as u64, Ordering::Relaxed);
        if unsent as u64 > self.obuf_peak.load(Ordering::Relaxed) {
            self.obuf_peak.store(unsent as u64, Ordering::Relaxed);
        }
    }

    /// Records the input buffer's state.
    #[inline]
    pub fn publish_input(&self, cap: usize, pending: usize, free: usize) {
        self.ibuf_cap.store(cap as u64, Ordering::Relaxed);
        self.qbuf.store(pending as u64, Ordering::Relaxed);
        self.qbuf_free.store(free as u64, Ordering::Relaxed);
    }
}

/// CLIENT PAUSE's state: until when, and whether every command or only
/// writes wait.
#[derive(Debug)]
pub struct Pause {
    base: Instant,
    /// Milliseconds after `base` the pause ends; 0: no pause.
    until_ms: AtomicU64,
    all: AtomicBool,
    /// Connections whose next command waits for the pause to end (INFO
    /// `blocked_clients`).
    held: AtomicUsize,
}

impl Default for Pause {
    fn default() -> Self {
        Pause {
            base: Instant::now(),
            until_ms: AtomicU64::new(0),
            all: AtomicBool::new(false),
            held: AtomicUsize::new(0),
        }
    }
}

/// What a pause holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paused {
    No,
    Writes,
    All,
}

impl Pause {
    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64 + 1
    }

    /// Pauses for `ms` milliseconds from now. As in Redis 7.0, a pause in
    /// force is only ever extended: the later end and the stricter mode
    /// (ALL over WRITE) win.
    pub fn start(&self, ms: u64, all: bool) {
        let now = self.now_ms();
        let current = self.until_ms.load(Ordering::Acquire);
        let active = current > now;
        let all = all || (active && self.all.load(Ordering::Relaxed));
        let until = now.saturating_add(ms).max(current);
        self.all.store(all, Ordering::Relaxed);
        if until > now {
            self.until_ms.store(until, Ordering::Release);
        }
    }

    pub fn stop(&self) {
        self.until_ms.store(0, Ordering::Release);
    }

    /// What is paused now. One load when nothing is (every request asks).
    #[inline]
    pub fn now(&self) -> Paused {
        let until = self.until_ms.load(Ordering::Acquire);
        if until == 0 || until <= self.now_ms() {
            return Paused::No;
        }
        if self.all.load(Ordering::Relaxed) {
            Paused::All
        } else {
            Paused::Writes
        }
    }

    /// A connection's command began, or stopped, waiting for the pause.
    pub fn hold(&self, waiting: bool) {
        if waiting {
            self.held.fetch_add(1, Ordering::Relaxed);
        } else {
            self.held.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Connections waiting for the pause to end.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// How long the pause in force lasts still (None: none is).
    pub fn left(&self) -> Option<Duration> {
        let until = self.until_ms.load(Ordering::Acquire);
        let now = self.now_ms();
        (until > now).then(|| Duration::from_millis(until - now))
    }
}

#[cfg(test)]
mod tests {
    use super::{Pause, Paused};

    #[test]
    fn a_pause_is_only_extended() {
        let p = Pause::default();
        assert_eq!(p.now(), Paused::No);
        p.start(60_000, false);
        assert_eq!(p.now(), Paused::Writes);
        // Shorter: the end stays; ALL: the mode becomes stricter.
        p.start(1, true);
        assert_eq!(p.now(), Paused::All);
        assert!(p.left().unwrap().as_secs() >= 59);
        p.start(60_000, false);
        assert_eq!(p.now(), Paused::All);
        p.stop();
        assert_eq!(p.now(), Paused::No);
        assert_eq!(p.left(), None);
        // A zero timeout starts nothing.
        p.start(0, true);
        assert_eq!(p.now(), Paused::No);
    }

    #[test]
    fn idle_counts_from_the_last_input() {
        let e = super::ClientEntry::new(1, ([127, 0, 0, 1], 1).into(), None, 3, "resp");
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert!(e.idle().as_millis() >= 30);
        e.touch(std::time::Instant::now());
        assert!(e.idle().as_millis() < 30);
    }
}
