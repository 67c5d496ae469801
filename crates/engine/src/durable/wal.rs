//! The write-ahead log: records appended in version order to an in-memory
//! buffer, written to size-bounded segment files by one flusher thread that
//! group-commits them (one write and one fdatasync for everything buffered).
//!
//! - A write takes its version and appends its record under one mutex
//!   (`VersionLog::next_version`, called with the leaf lock held), so the
//!   log is in version order, and for one key in the order writes took
//!   effect.
//! - `Always`: the flusher raises the clock's limit to the newest version
//!   its fsync covered; the read version never passes the limit, so no
//!   reader sees a write before it is durable, and a writer that waits for
//!   its release waits for its fsync. Every version is taken under the
//!   mutex, so the write version read when the buffer is taken covers
//!   exactly the records in it (versions without records too).
//! - `EverySec`: written every 10 ms, fsynced once a second; `None`:
//!   written every 10 ms, never fsynced (the OS decides). Neither holds back
//!   visibility; both bound the buffer (writers wait above 64 MiB).
//! - A failed write or fsync poisons the log and the clock: the flusher
//!   stops, the store refuses writes, and what was not made durable is
//!   never acknowledged (with `Always`, never visible).
//!
//! Concurrency primitives here are parking_lot's and std's directly: this
//! layer does file I/O on its own threads and is tested with real threads
//! and the fault-injecting storage, not under shuttle.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::Durability;
use super::deletes::DeleteLog;
use super::error::{IoError, WalError};
use super::file::{Storage, WritableFile};
use super::record::{self, Record};
use crate::tree::version::VersionClock;
use crate::tree::{LogEntry, VersionLog};
use crate::types::DurationHistogram;

/// Buffered bytes above which `EverySec`/`None` writers wait for the flusher.
const MAX_BUFFERED_BYTES: usize = 64 << 20;
/// How often `EverySec`/`None` write the buffer out.
const WRITE_INTERVAL: Duration = Duration::from_millis(10);
/// How often the flusher looks at the checkpoint triggers when idle.
const IDLE_WAKE: Duration = Duration::from_millis(100);

/// A segment file and the versions it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentMeta {
    pub seq: u64,
    /// Every record in the segment has a version above this.
    pub start_version: u64,
    pub bytes: u64,
}

/// The log recovery leaves for `Wal::open` to continue.
#[derive(Debug, Clone, Default)]
pub(crate) struct Existing {
    /// Its segments, oldest first.
    pub segments: Vec<SegmentMeta>,
    /// The version floor: versions up to it may have been handed out by
    /// records a cut dropped; the clock jumps above it (0: none).
    pub floor: u64,
    /// The keys deleted since the loaded checkpoint (replayed deletes).
    pub deletes: Arc<DeleteLog>,
}

#[derive(Debug, Default)]
struct Buffer {
    bytes: Vec<u8>,
    records: u64,
    /// The highest version a waiter needs durable.
    wanted: u64,
    /// The highest version that must be synced whatever the mode says
    /// (`sync_through`).
    forced: u64,
}

/// Counters for `PersistenceStats`.
#[derive(Debug, Default)]
pub(crate) struct WalCounters {
    pub fsyncs: AtomicU64,
    /// Each fsync's duration (one per group commit, not per write).
    pub fsync_durations: DurationHistogram,
    pub records: AtomicU64,
    /// The flusher's rounds (each takes the buffer, writes it, and syncs
    /// it if the mode says so).
    pub rounds: AtomicU64,
    pub bytes_written: AtomicU64,
    /// Bytes written since the last checkpoint's snapshot.
    pub bytes_since_checkpoint: AtomicU64,
}

/// The log. Shared by the tree (as its `VersionLog`), the store and the
/// flusher thread.
pub(crate) struct Wal {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    /// The durability mode (`Durability` as `mode_code` writes it): set at
    /// open, switched by `set_mode` while writers go on.
    mode: AtomicU8,
    segment_bytes: u64,
    clock: Arc<VersionClock>,
    buffer: Mutex<Buffer>,
    /// The flusher waits here for work.
    wake: Condvar,
    /// Versions `<= durable` are in the log on disk (`Always`, `EverySec`
    /// after its fsync) or written to the OS (`None`, `EverySec` between
    /// fsyncs: see `written`).
    durable: AtomicU64,
    /// Versions `<= written` have been handed to the OS.
    written: AtomicU64,
    /// Waiters for `durable`/`written` block here (with `buffer`).
    progress: Condvar,
    failure: Mutex<Option<WalError>>,
    failed: AtomicBool,
    stopping: AtomicBool,
    /// The flusher has exited: nothing more becomes durable.
    exited: AtomicBool,
    pub(crate) segments: Mutex<Vec<SegmentMeta>>,
    pub(crate) counters: WalCounters,
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The keys of logged deletes, for delta runs.
    pub(crate) deletes: Arc<DeleteLog>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .field("mode", &self.mode())
            .field("durable", &self.durable.load(Ordering::Relaxed))
            .finish()
    }
}

/// Called by the flusher after each round; returns nothing. The store
/// passes its checkpoint trigger.
pub(crate) type Tick = Box<dyn Fn(&Wal) + Send + Sync>;

impl Wal {
    /// Opens a fresh segment after the existing ones (`old`, in order) and
    /// starts the flusher. The clock's write version is the recovered
    /// version, the fresh segment's start version. The clock then jumps to
    /// the version floor if that is above: those versions have no records
    /// (a cut dropped them, and the floor file keeps them from being
    /// reused). Every version `<=` the clock's is then durable.
    pub(crate) fn open(
        dir: PathBuf,
        storage: Arc<dyn Storage>,
        mode: Durability,
        segment_bytes: u64,
        clock: Arc<VersionClock>,
        old: Existing,
        tick: Tick,
    ) -> std::io::Result<Arc<Wal>> {
        let recovered = clock.write_version();
        let seq = old.segments.last().map_or(1, |s| s.seq + 1);
        let file = Self::create_segment(&*storage, &dir, seq, recovered)?;
        let mut segments = old.segments;
        segments.push(SegmentMeta {
            seq,
            start_version: recovered,
            bytes: record::HEADER_BYTES as u64,
        });
        let start = recovered.max(old.floor);
        clock.reset_to(start);
        if mode == Durability::Always {
            clock.set_limit(start);
        }
        let wal = Arc::new(Wal {
            dir,
            storage,
            mode: AtomicU8::new(mode_code(mode)),
            segment_bytes: segment_bytes.max(record::HEADER_BYTES as u64 + 1),
            clock,
            buffer: Mutex::new(Buffer::default()),
            wake: Condvar::new(),
            durable: AtomicU64::new(start),
            written: AtomicU64::new(start),
            progress: Condvar::new(),
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            exited: AtomicBool::new(false),
            segments: Mutex::new(segments),
            counters: WalCounters::default(),
            flusher: Mutex::new(None),
            deletes: old.deletes,
        });
        let w = Arc::clone(&wal);
        let handle = std::thread::Builder::new()
            .name("combkv-wal".into())
            .spawn(move || w.run(file, tick))?;
        *wal.flusher.lock() = Some(handle);
        Ok(wal)
    }

    fn create_segment(
        storage: &dyn Storage,
        dir: &std::path::Path,
        seq: u64,
        start: u64,
    ) -> std::io::Result<Box<dyn WritableFile>> {
        let path = dir.join(record::segment_name(seq));
        let mut f = storage.create(&path)?;
        f.write_all(&record::encode_header(record::WAL_MAGIC, seq, start))?;
        f.sync_data()?;
        storage.sync_dir(dir)?;
        Ok(f)
    }

    pub(crate) fn mode(&self) -> Durability {
        match self.mode.load(Ordering::Acquire) {
            0 => Durability::Always,
            1 => Durability::EverySec,
            _ => Durability::None,
        }
    }

    /// Switches the durability mode while writers go on. The log and its
    /// writer are the same in every mode; only when a write is fsynced,
    /// acknowledged and made visible differs.
    ///
    /// To `Always`: every version handed out before the switch stays
    /// visible (the read limit is set at the last one, which no reader has
    /// passed: versions are taken under the buffer's lock, held here), the
    /// ones after it become visible once fsynced, and this returns once
    /// everything written before the switch is fsynced too. From `Always`:
    /// the read limit is lifted and writers waiting for an fsync are let
    /// go, their records written as the new mode says. Err: the log
    /// failed.
    pub(crate) fn set_mode(&self, to: Durability) -> Result<(), WalError> {
        let settle = {
            let mut b = self.buffer.lock();
            if let Some(cause) = self.failure() {
                return Err(cause);
            }
            let from = self.mode();
            self.mode.store(mode_code(to), Ordering::Release);
            let settle = if to == Durability::Always && from != Durability::Always {
                let upto = self.clock.write_version();
                self.clock.set_limit(upto);
                b.wanted = b.wanted.max(upto);
                Some(upto)
            } else {
                if from == Durability::Always && to != Durability::Always {
                    self.clock.set_limit(u64::MAX);
                }
                None
            };
            // The flusher takes the new mode (and what to fsync) now, and
            // writers waiting for an fsync look again.
            self.wake.notify_one();
            self.progress.notify_all();
            settle
        };
        match settle {
            Some(upto) => self.wait_durable(upto),
            None => Ok(()),
        }
    }

    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The cause, once the log has failed.
    pub(crate) fn failure(&self) -> Option<WalError> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.failure.lock().clone()
    }

    /// Whether writes may proceed: Err(cause) after a failure or shutdown.
    /// `EverySec`/`None` writers wait here while the buffer is over its bound.
    pub(crate) fn admit(&self) -> Result<(), WalError> {
        if let Some(cause) = self.failure() {
            return Err(cause);
        }
        if self.stopping.load(Ordering::Acquire) {
            return Err(WalError::ShutDown);
        }
        if self.mode() != Durability::Always {
            let mut b = self.buffer.lock();
            while b.bytes.len() > MAX_BUFFERED_BYTES && !self.failed.load(Ordering::Acquire) {
                self.wake.notify_one();
                self.progress.wait_for(&mut b, IDLE_WAKE);
            }
        }
        Ok(())
    }

    /// Waits until version `v`'s record is as durable as the mode promises
    /// before acknowledgement (`Always`: on disk). Err(cause) if the log
    /// failed first.
    pub(crate) fn wait_durable(&self, v: u64) -> Result<(), WalError> {
        if self.mode() != Durability::Always {
            return self.written_or_failed(v);
        }
        self.wait_synced(v, false)
    }

    /// Waits until version `v`'s record is on disk, in any mode: under
    /// `EverySec` and `None` the flusher syncs once now. A checkpoint
    /// written at advancing versions needs this for the versions it holds.
    pub(crate) fn sync_through(&self, v: u64) -> Result<(), WalError> {
        self.wait_synced(v, true)
    }

    /// Waits for the fsync covering `v`; `forced`: whatever the mode (else
    /// a switch away from `Always` meanwhile ends the wait with the new
    /// mode's promise).
    fn wait_synced(&self, v: u64, forced: bool) -> Result<(), WalError> {
        if self.durable.load(Ordering::Acquire) >= v {
            return Ok(());
        }
        let mut b = self.buffer.lock();
        b.wanted = b.wanted.max(v);
        if forced {
            b.forced = b.forced.max(v);
        }
        self.wake.notify_one();
        loop {
            if self.durable.load(Ordering::Acquire) >= v {
                return Ok(());
            }
            if let Some(cause) = self.failure() {
                return Err(cause);
            }
            if !forced && self.mode() != Durability::Always {
                // Switched away while waiting (`set_mode`): the new mode's
                // promise.
                return self.written_or_failed(v);
            }
            if self.exited.load(Ordering::Acquire) {
                return Err(WalError::ShutDown);
            }
            self.progress.wait_for(&mut b, IDLE_WAKE);
        }
    }

    /// `EverySec`'s and `None`'s promise before acknowledgement: nothing,
    /// unless the log failed before `v` was handed to the OS.
    fn written_or_failed(&self, v: u64) -> Result<(), WalError> {
        if let Some(cause) = self.failure()
            && v > self.written.load(Ordering::Acquire)
        {
            return Err(cause);
        }
        Ok(())
    }

    /// Versions up to this are durable.
    pub(crate) fn durable_version(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    fn fail(&self, cause: WalError) {
        let mut f = self.failure.lock();
        if f.is_none() {
            *f = Some(cause);
        }
        drop(f);
        self.failed.store(true, Ordering::Release);
        self.clock.poison();
        let _b = self.buffer.lock();
        self.progress.notify_all();
    }

    /// Writes everything buffered, fsyncs it and stops the flusher.
    pub(crate) fn shutdown(&self) -> Result<(), WalError> {
        self.stopping.store(true, Ordering::Release);
        {
            let _b = self.buffer.lock();
            self.wake.notify_one();
        }
        if let Some(h) = self.flusher.lock().take() {
            let _ = h.join();
        }
        match self.failure() {
            Some(cause) => Err(cause),
            None => Ok(()),
        }
    }

    /// The flusher: waits for work, takes the buffer, writes it, syncs it
    /// as the mode says, publishes progress, rotates segments.
    fn run(&self, file: Box<dyn WritableFile>, tick: Tick) {
        self.flush_loop(file, tick);
        self.exited.store(true, Ordering::Release);
        let _b = self.buffer.lock();
        self.progress.notify_all();
    }

    fn flush_loop(&self, mut file: Box<dyn WritableFile>, tick: Tick) {
        let mut last_sync = Instant::now();
        let mut spare = Vec::new();
        loop {
            let (bytes, records, upto, stop, forced) = {
                let mut b = self.buffer.lock();
                loop {
                    let stop = self.stopping.load(Ordering::Acquire);
                    let durable = self.durable.load(Ordering::Acquire);
                    // A waiter's fsync is owed only under `Always`: after a
                    // switch away, this round would not sync it, and
                    // waking for it again at once would spin (a forced
                    // sync is owed in every mode).
                    let needed = b.forced > durable
                        || (self.mode() == Durability::Always && b.wanted > durable);
                    if stop || needed {
                        break;
                    }
                    if self.mode() != Durability::Always {
                        // Write every interval, or at once when a writer
                        // waits for room.
                        self.wake.wait_for(&mut b, WRITE_INTERVAL);
                        break;
                    }
                    // Idle: write what sessions left behind, run the tick.
                    if self.wake.wait_for(&mut b, IDLE_WAKE).timed_out() {
                        break;
                    }
                }
                std::mem::swap(&mut b.bytes, &mut spare);
                let records = std::mem::take(&mut b.records);
                // Every version is taken under this mutex, so the records of
                // all versions up to `upto` are in `spare` or written before.
                (
                    std::mem::take(&mut spare),
                    records,
                    self.clock.write_version(),
                    self.stopping.load(Ordering::Acquire),
                    b.forced > self.durable.load(Ordering::Acquire),
                )
            };
            self.counters.rounds.fetch_add(1, Ordering::Relaxed);
            let sync = stop
                || forced
                || match self.mode() {
                    Durability::Always => true,
                    Durability::EverySec => last_sync.elapsed() >= Duration::from_secs(1),
                    Durability::None => false,
                };
            if let Err(e) = self.write_out(&mut file, &bytes, upto, sync) {
                self.fail(WalError::Write(IoError::new("write-ahead log", e)));
                return;
            }
            if sync {
                last_sync = Instant::now();
            }
            self.counters.records.fetch_add(records, Ordering::Relaxed);
            spare = bytes;
            spare.clear();
            {
                let _b = self.buffer.lock();
                self.progress.notify_all();
            }
            if stop {
                return;
            }
            match self.maybe_rotate(file, upto, sync) {
                Ok(f) => file = f,
                Err(e) => {
                    self.fail(WalError::Rotate(IoError::new("write-ahead log segment", e)));
                    return;
                }
            }
            tick(self);
        }
    }

    fn write_out(
        &self,
        file: &mut Box<dyn WritableFile>,
        bytes: &[u8],
        upto: u64,
        sync: bool,
    ) -> std::io::Result<()> {
        if !bytes.is_empty() {
            file.write_all(bytes)?;
            let n = bytes.len() as u64;
            self.counters.bytes_written.fetch_add(n, Ordering::Relaxed);
            self.counters
                .bytes_since_checkpoint
                .fetch_add(n, Ordering::Relaxed);
            if let Some(s) = self.segments.lock().last_mut() {
                s.bytes += n;
            }
        }
        self.written.fetch_max(upto, Ordering::AcqRel);
        if sync && (!bytes.is_empty() || self.durable.load(Ordering::Acquire) < upto) {
            self.sync(&mut **file)?;
            self.durable.fetch_max(upto, Ordering::AcqRel);
            if self.mode() == Durability::Always {
                // Raised only: a switch to `Always` (`set_mode`) may have
                // set it past this round's versions already.
                self.clock.raise_limit(upto);
            }
        }
        Ok(())
    }

    /// fdatasyncs the segment, counted and timed.
    fn sync(&self, file: &mut dyn WritableFile) -> std::io::Result<()> {
        let started = Instant::now();
        file.sync_data()?;
        self.counters.fsync_durations.observe(started.elapsed());
        self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Starts a new segment when the current one is full. Records never span
    /// segments; the old segment is synced first (unless this round, `synced`,
    /// did), so a later segment never holds data while an earlier one is
    /// torn. Judged by the round, not the mode, which may have switched
    /// since the round wrote.
    fn maybe_rotate(
        &self,
        mut file: Box<dyn WritableFile>,
        upto: u64,
        synced: bool,
    ) -> std::io::Result<Box<dyn WritableFile>> {
        let (seq, bytes) = {
            let s = self.segments.lock();
            let last = s.last().expect("a current segment");
            (last.seq, last.bytes)
        };
        if bytes < self.segment_bytes {
            return Ok(file);
        }
        if !synced {
            self.sync(&mut *file)?;
        }
        let next = Self::create_segment(&*self.storage, &self.dir, seq + 1, upto)?;
        self.segments.lock().push(SegmentMeta {
            seq: seq + 1,
            start_version: upto,
            bytes: record::HEADER_BYTES as u64,
        });
        Ok(next)
    }

    /// Removes segments every record of which is at or below `version`
    /// (never the current one). Returns how many went.
    pub(crate) fn remove_segments_upto(&self, version: u64) -> std::io::Result<usize> {
        let doomed: Vec<SegmentMeta> = {
            let s = self.segments.lock();
            s.windows(2)
                .filter(|w| w[1].start_version <= version)
                .map(|w| w[0].clone())
                .collect()
        };
        for seg in &doomed {
            self.storage
                .remove(&self.dir.join(record::segment_name(seg.seq)))?;
            self.segments.lock().retain(|s| s.seq != seg.seq);
        }
        if !doomed.is_empty() {
            self.storage.sync_dir(&self.dir)?;
        }
        Ok(doomed.len())
    }
}

impl VersionLog for Wal {
    fn next_version(&self, clock: &VersionClock, entry: Option<LogEntry<'_>>) -> u64 {
        let mut b = self.buffer.lock();
        let v = clock.next();
        if let Some(e) = entry {
            let rec = match e {
                LogEntry::Put {
                    key,
                    value,
                    expiry,
                    flags,
                } => Record::Put {
                    version: v,
                    key,
                    value,
                    expiry,
                    client_flags: flags,
                },
                LogEntry::Delete { key } => {
                    self.deletes.record(v, key);
                    Record::Delete { version: v, key }
                }
                LogEntry::Clear => {
                    self.deletes.lose_upto(v);
                    Record::Clear { version: v }
                }
                LogEntry::GroupBegin => Record::GroupBegin { version: v },
                LogEntry::GroupEnd { begin } => Record::GroupEnd { version: v, begin },
            };
            record::encode_record(&mut b.bytes, &rec);
            b.records += 1;
        }
        v
    }
}

/// `Wal::mode`'s encoding.
fn mode_code(mode: Durability) -> u8 {
    match mode {
        Durability::Always => 0,
        Durability::EverySec => 1,
        Durability::None => 2,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::durable::{DurableConfig, FaultyStorage};
    use crate::{Config, Store};

    /// A writer that waited for an fsync under `Always` leaves its wish
    /// (`wanted`) behind when the mode switches to `None`, which never
    /// syncs on its own: the flusher must not take it as work and spin
    /// (it did, a core's worth, until the mode changed again).
    #[test]
    fn an_fsync_wanted_before_a_switch_to_none_does_not_spin_the_flusher() {
        let fs = FaultyStorage::new(1);
        let cfg = DurableConfig {
            mode: Durability::None,
            storage: Arc::new(fs.clone()),
            ..DurableConfig::new("/data")
        };
        let (store, _) = Store::open(Config::default(), cfg).unwrap();
        store.put(b"k", b"v").unwrap();
        let wal = Arc::clone(&store.durable_for_tests().unwrap().wal);
        let written = wal.clock.write_version();
        {
            // What a waiter registered just before the switch leaves.
            let mut b = wal.buffer.lock();
            b.wanted = written;
            assert!(b.wanted > wal.durable_version());
            wal.wake.notify_one();
        }
        std::thread::sleep(Duration::from_millis(50));
        let before = wal.counters.rounds.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(200));
        let rounds = wal.counters.rounds.load(Ordering::Relaxed) - before;
        // A round every 10 ms (`WRITE_INTERVAL`) is about 20; spinning,
        // hundreds of thousands.
        assert!(rounds < 200, "{rounds} flusher rounds in 200 ms");
        // A sync asked for in any mode is still done.
        wal.sync_through(written).unwrap();
        assert!(wal.durable_version() >= written);
    }
}
