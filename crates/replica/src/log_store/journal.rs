//! The node's journal: one write and one fsync for the appends of every
//! Raft group a node hosts.
//!
//! A node hosting many ranges hosts many Raft logs, and each synced its own
//! segment for every append: with 16 ranges a write round carried a few
//! writes, and the node made 1.8 fsyncs per SET where one group makes 0.16
//! (`docs/experiments.md`, "One journal per node"). With the journal, a
//! log's appends are still written to its own segment, but not synced
//! there: the same records go into the journal, and whoever commits first
//! writes everything queued by every log and syncs the journal once (group
//! commit across groups; the committing threads take turns: the node's log
//! writer, `writer`, for every log's appends, and the caller of a
//! truncation or of a log's first record). An append is reported flushed
//! only once its journal record is synced.
//!
//! The segments are synced later: each by its log a second after its
//! appends (so that what the log records as synced keeps up), and all at
//! once when the journal file has grown past [`ROTATE_BYTES`]: a new one
//! is begun, every segment written under the old one is synced by name,
//! and only then is the old journal file removed. So every append whose
//! segment bytes may not be durable has its record in a journal file that
//! is still there.
//!
//! On a node's start, before any log opens, the journal is read and every
//! log's records are written again into its segments where they are missing
//! (`LogStore::replay_journal`): entries a log already holds with the same
//! log id are left alone, a different one is cut with all after it and
//! replaced, a truncation is done again. A log begun in an empty directory
//! first commits a *fresh* record, so that the records of an earlier log
//! in the same directory (a replica removed, then hosted again) are never
//! replayed into it. A log whose directory holds no segment is not
//! replayed into (its replica was removed).
//!
//! A journal file is a sequence of frames `[length: u32 LE][CRC-32 of the
//! length and body: u32 LE][body]`, zeros after them (the file is zeroed
//! ahead of its writes as segments are, so that a sync writes no
//! metadata). A body is `[kind: u8][key length: u16 LE][key][rest]`: the
//! key names the log (its directory, relative to the node's), and the rest
//! is, by kind, the log's segment records (entries), the index a
//! truncation removed from (u64 LE), or nothing (fresh).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use combkv::durable::frame::{self, Framing};
use combkv::durable::{Storage, WritableFile};
use parking_lot::{Condvar, Mutex, MutexGuard};

use super::segment;
use super::writer::LogWriter;

/// A turn that would take the journal file past this many bytes retires it
/// first: its segments synced, then it is removed. Its records are a copy of the
/// logs' latest appends, so this (and the zeroing ahead) is what the
/// journal adds to a node's disk; each retirement syncs every segment
/// written under the file (most already synced by their logs, a second
/// after their appends).
pub(crate) const ROTATE_BYTES: u64 = 4 << 20;

/// The journal file is zeroed this far ahead of its writes (see the
/// segments' `ZERO_AHEAD_BYTES`).
const ZERO_AHEAD_BYTES: u64 = 1 << 20;

/// A body claiming more than this is damage (a log's append is framed in
/// pieces of at most [`PIECE_BYTES`] of records, each record at most
/// `segment::MAX_RECORD_BYTES`).
const MAX_BODY: usize = (1 << 31) - 1;
const PIECE_BYTES: usize = 64 << 20;

const FRAMING: Framing = Framing {
    checksum_covers_length: true,
    max_body: MAX_BODY,
};

const ENTRIES: u8 = 1;
const TRUNCATE: u8 = 2;
const FRESH: u8 = 3;

/// The journal's directory inside the node's.
pub(crate) const JOURNAL_DIR: &str = "journal";

fn file_name(number: u64) -> String {
    format!("journal-{number:020}.jnl")
}

fn file_number(name: &str) -> Option<u64> {
    name.strip_prefix("journal-")?
        .strip_suffix(".jnl")
        .filter(|d| d.len() == 20)?
        .parse()
        .ok()
}

/// What a log commits to the journal.
pub(crate) enum Op<'a> {
    /// Segment records written to `segment` (the segment open after them:
    /// one closed meanwhile was synced when it closed).
    Entries {
        segment: &'a Path,
        records: &'a [&'a [u8]],
    },
    /// Every entry from this index on was removed.
    Truncate(u64),
    /// The log begins empty here: records before this one are another's.
    Fresh,
}

/// A log's changes read back from the journal, in the order they were
/// committed, since its last fresh record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Replay {
    /// Segment records (whole, each checksummed).
    Entries(Vec<u8>),
    /// Every entry from this index on was removed.
    Truncate(u64),
}

/// The node's journal (see the module's doc).
pub struct Journal {
    storage: Arc<dyn Storage>,
    /// The node's directory: keys are logs' directories relative to it.
    base: PathBuf,
    dir: PathBuf,
    queue: Mutex<Queue>,
    /// Signalled when a commit's turn at the file ends.
    turned: Condvar,
    file: Mutex<Writer>,
    /// See [`ROTATE_BYTES`].
    rotate_bytes: u64,
    fsyncs: Arc<combkv::DurationHistogram>,
    /// The thread that does the file work of the logs journaled here.
    log_writer: LogWriter,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// Frames waiting for the next turn at the file.
#[derive(Default)]
struct Queue {
    frames: Vec<u8>,
    /// Segments the waiting frames' records went to.
    segments: BTreeSet<PathBuf>,
    /// Commits queued so far, and how many of them are durable.
    queued: u64,
    durable: u64,
    /// A commit is writing and syncing: the others wait for its turn.
    writing: bool,
    /// After a failed write or sync nothing more is taken.
    failed: Option<String>,
}

struct Writer {
    file: Box<dyn WritableFile>,
    number: u64,
    bytes: u64,
    zeroed: u64,
    /// Segments with records in this file, synced before it is removed.
    segments: BTreeSet<PathBuf>,
}

impl Journal {
    /// Opens the journal of the node whose directory is `base`: replays
    /// every log's records into its segments, then removes the files read
    /// and begins a new one. Returns the journal and the entries replayed.
    pub fn open(
        storage: Arc<dyn Storage>,
        base: &Path,
    ) -> Result<(Arc<Journal>, u64), super::OpenError> {
        Self::open_rotating(storage, base, ROTATE_BYTES)
    }

    /// [`Journal::open`], retiring a file past `rotate_bytes` (tests).
    pub(crate) fn open_rotating(
        storage: Arc<dyn Storage>,
        base: &Path,
        rotate_bytes: u64,
    ) -> Result<(Arc<Journal>, u64), super::OpenError> {
        let dir = base.join(JOURNAL_DIR);
        storage.create_dir_all(&dir)?;
        storage.sync_dir(base)?;
        let mut numbers: Vec<u64> = storage
            .list(&dir)?
            .iter()
            .filter_map(|n| file_number(n))
            .collect();
        numbers.sort_unstable();
        let mut logs: BTreeMap<String, Vec<Replay>> = BTreeMap::new();
        for (i, &n) in numbers.iter().enumerate() {
            let path = dir.join(file_name(n));
            read_file(&*storage, &path, i + 1 == numbers.len(), &mut logs)?;
        }
        let mut replayed = 0;
        for (key, ops) in logs {
            let log = base.join(&key);
            let has_segment = match storage.list(&log) {
                Ok(names) => names.iter().any(|n| segment::segment_first(n).is_some()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(e) => return Err(e.into()),
            };
            if has_segment && !ops.is_empty() {
                replayed += super::LogStore::replay_journal(Arc::clone(&storage), &log, ops)?;
            }
        }
        // Every log holds what the old files had, synced: they go, before
        // the next file is begun (a torn tail of the last file read must
        // never be left as an earlier file's, which would be corruption).
        // Oldest first, each removal durable before the next: a later file
        // left alone replays to the same outcome, an earlier one alone
        // would not (its records would undo a later file's truncation).
        let number = numbers.last().map_or(1, |n| n + 1);
        for n in numbers {
            storage.remove(&dir.join(file_name(n)))?;
            storage.sync_dir(&dir)?;
        }
        let file = storage.create(&dir.join(file_name(number)))?;
        storage.sync_dir(&dir)?;
        let journal = Journal {
            storage,
            base: base.to_path_buf(),
            dir,
            queue: Mutex::new(Queue::default()),
            turned: Condvar::new(),
            file: Mutex::new(Writer {
                file,
                number,
                bytes: 0,
                zeroed: 0,
                segments: BTreeSet::new(),
            }),
            rotate_bytes,
            fsyncs: Arc::new(combkv::DurationHistogram::new()),
            log_writer: LogWriter::new(),
        };
        Ok((Arc::new(journal), replayed))
    }

    /// The key of the log in `dir`.
    pub(crate) fn key(&self, dir: &Path) -> String {
        dir.strip_prefix(&self.base)
            .unwrap_or(dir)
            .to_string_lossy()
            .into_owned()
    }

    /// Stops the journal for good: every commit from now on fails. A log
    /// whose own sync of its segment failed calls it: the segment's pages
    /// may have been dropped, and a retirement's sync by name would not
    /// hear of it (Linux reports a write-back error once), so the journal
    /// must keep every record it has. One failure stops every log of the
    /// node, as a failed sync of the journal itself does.
    pub(crate) fn fail(&self, why: &str) {
        let mut queue = self.queue.lock();
        if queue.failed.is_none() {
            tracing::error!("raft log journal stopped: {why}");
            queue.failed = Some(why.to_string());
        }
        self.turned.notify_all();
    }

    /// How long each sync of the journal took.
    pub fn fsync_durations(&self) -> combkv::HistogramSnapshot {
        self.fsyncs.snapshot()
    }

    /// The node's log writer (see [`LogWriter`]).
    pub(crate) fn writer(&self) -> &LogWriter {
        &self.log_writer
    }

    /// Commits `op` of the log `key`: returns once it is durable, with
    /// everything committed before it.
    pub(crate) fn commit(&self, key: &str, op: Op<'_>) -> io::Result<()> {
        let ticket = self.enqueue(key, op)?;
        self.wait(ticket)
    }

    /// Queues `op` of the log `key` for the next turn at the file, without
    /// waiting for it: durable once [`Journal::wait`] for the ticket
    /// returned (or for a later one) returns Ok.
    pub(crate) fn enqueue(&self, key: &str, op: Op<'_>) -> io::Result<u64> {
        let mut queue = self.queue.lock();
        if let Some(why) = &queue.failed {
            return Err(failed_earlier(why));
        }
        encode(&mut queue, key, op)?;
        queue.queued += 1;
        Ok(queue.queued)
    }

    /// Returns once what was queued up to `ticket` is durable, taking a
    /// turn at the file if none is under way.
    pub(crate) fn wait(&self, ticket: u64) -> io::Result<()> {
        let mut queue = self.queue.lock();
        loop {
            if queue.durable >= ticket {
                return Ok(());
            }
            if let Some(why) = &queue.failed {
                return Err(failed_earlier(why));
            }
            if queue.writing {
                self.turned.wait(&mut queue);
                continue;
            }
            self.take_turn(&mut queue);
        }
    }

    /// Writes and syncs everything queued, the queue unlocked meanwhile so
    /// that commits go on queueing behind this turn.
    fn take_turn(&self, queue: &mut MutexGuard<'_, Queue>) {
        queue.writing = true;
        let frames = std::mem::take(&mut queue.frames);
        let segments = std::mem::take(&mut queue.segments);
        let upto = queue.queued;
        // A panic while writing fails the journal instead of leaving the
        // turn taken for good, every log waiting on it.
        let r = MutexGuard::unlocked(queue, || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.write(&frames, segments)
            }))
            .unwrap_or_else(|_| Err(io::Error::other("a panic while writing")))
        });
        queue.writing = false;
        match r {
            Ok(()) => queue.durable = upto,
            Err(e) => {
                tracing::error!("raft log journal: {e}");
                queue.failed = Some(e.to_string());
            }
        }
        // The buffer is reused by the next turn.
        if queue.frames.is_empty() {
            let mut frames = frames;
            frames.clear();
            queue.frames = frames;
        }
        self.turned.notify_all();
    }

    fn write(&self, frames: &[u8], segments: BTreeSet<PathBuf>) -> io::Result<()> {
        let mut w = self.file.lock();
        if w.bytes > 0 && w.bytes + frames.len() as u64 > self.rotate_bytes {
            self.rotate(&mut w)?;
        }
        w.segments.extend(segments);
        let end = w.bytes + frames.len() as u64;
        if end > w.zeroed {
            let to = end + ZERO_AHEAD_BYTES;
            w.file.zero_to(to)?;
            w.zeroed = to;
        }
        w.file.write_all(frames)?;
        let began = Instant::now();
        w.file.sync_data()?;
        self.fsyncs.observe(began.elapsed());
        w.bytes = end;
        Ok(())
    }

    /// Begins the next journal file, syncs every segment written under the
    /// current one, then removes it.
    fn rotate(&self, w: &mut Writer) -> io::Result<()> {
        let next = w.number + 1;
        let file = self.storage.create(&self.dir.join(file_name(next)))?;
        self.storage.sync_dir(&self.dir)?;
        for path in std::mem::take(&mut w.segments) {
            match self.storage.sync_file(&path) {
                // Removed since (truncated or purged away, durably, or its
                // replica deleted): nothing of it to keep.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                r => r?,
            }
        }
        // A log whose own sync failed meanwhile (`Journal::fail`): its
        // segment's pages may be gone, and the syncs above would not say
        // so. (One whose failure is told after this check is the window
        // left: a write-back error and a retirement in the same instant.)
        if let Some(why) = &self.queue.lock().failed {
            return Err(failed_earlier(why));
        }
        self.storage.remove(&self.dir.join(file_name(w.number)))?;
        self.storage.sync_dir(&self.dir)?;
        *w = Writer {
            file,
            number: next,
            bytes: 0,
            zeroed: 0,
            segments: BTreeSet::new(),
        };
        Ok(())
    }
}

fn failed_earlier(why: &str) -> io::Error {
    io::Error::other(format!("the Raft log journal failed earlier: {why}"))
}

/// Frames `op` of log `key` onto the queue.
fn encode(queue: &mut Queue, key: &str, op: Op<'_>) -> io::Result<()> {
    let key_len = u16::try_from(key.len())
        .map_err(|_| io::Error::other(format!("a log key of {} bytes", key.len())))?;
    let head = |out: &mut Vec<u8>, kind: u8| {
        let start = FRAMING.begin(out);
        out.push(kind);
        out.extend_from_slice(&key_len.to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        start
    };
    let out = &mut queue.frames;
    match op {
        Op::Fresh => {
            let start = head(out, FRESH);
            FRAMING.finish(out, start);
        }
        Op::Truncate(since) => {
            let start = head(out, TRUNCATE);
            out.extend_from_slice(&since.to_le_bytes());
            FRAMING.finish(out, start);
        }
        Op::Entries { segment, records } => {
            // Pieces of whole records, so that no body is too long: a
            // record is at most `segment::MAX_RECORD_BYTES` and its header,
            // far below `MAX_BODY`, whatever an append holds.
            let mut start = None;
            for blob in records {
                for r in whole_records(blob) {
                    if let Some(s) = start
                        && out.len() - s + r.len() > PIECE_BYTES
                    {
                        FRAMING.finish(out, s);
                        start = None;
                    }
                    if start.is_none() {
                        start = Some(head(out, ENTRIES));
                    }
                    out.extend_from_slice(r);
                }
            }
            if let Some(s) = start {
                FRAMING.finish(out, s);
            }
            // Most commits name the segment the last one did.
            if !queue.segments.contains(segment) {
                queue.segments.insert(segment.to_path_buf());
            }
        }
    }
    Ok(())
}

/// The records of `blob` (segment records, each `[length][checksum]
/// [payload]`), one slice each.
fn whole_records(blob: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = blob;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let len = rest.get(..4).map_or(rest.len(), |b| {
            u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize
        });
        let (r, after) = rest.split_at((segment::RECORD_HEADER_BYTES + len).min(rest.len()));
        rest = after;
        Some(r)
    })
}

/// Reads the frames of one journal file into `logs`. It stops at the
/// first frame that is not whole and valid: in the last file a torn tail
/// (never synced, so never acknowledged; a frame damaged after its sync
/// reads the same, as in a log's last segment above what it recorded
/// synced). An earlier file was synced whole before the next was begun
/// (and the torn tail of the last one read at a start is removed before a
/// next one is), so a bad frame there is corruption.
fn read_file(
    storage: &dyn Storage,
    path: &Path,
    last: bool,
    logs: &mut BTreeMap<String, Vec<Replay>>,
) -> Result<(), super::OpenError> {
    let mut bytes = Vec::new();
    storage.open_read(path)?.read_to_end(&mut bytes)?;
    let mut at = 0;
    while at < bytes.len() {
        let head = &bytes[at..bytes.len().min(at + frame::HEADER_BYTES)];
        if head.iter().all(|&b| b == 0) {
            break;
        }
        let body = match FRAMING.decode(&bytes[at..]) {
            Ok(body) => body,
            Err(e) if last => {
                tracing::warn!(
                    "raft log journal {}: cut at byte {at} ({e:?}): a write a crash cut short",
                    path.display()
                );
                break;
            }
            Err(e) => {
                return Err(super::OpenError::Corrupt {
                    file: path.display().to_string(),
                    offset: at as u64,
                    what: format!("{e:?} in a journal file that was synced whole"),
                });
            }
        };
        let corrupt = |what: &str| super::OpenError::Corrupt {
            file: path.display().to_string(),
            offset: at as u64,
            what: what.to_string(),
        };
        let (&kind, rest) = body
            .split_first()
            .ok_or_else(|| corrupt("an empty frame"))?;
        let key_len = rest
            .get(..2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
            .ok_or_else(|| corrupt("a frame without its key"))?;
        let key = rest
            .get(2..2 + key_len)
            .and_then(|k| std::str::from_utf8(k).ok())
            .ok_or_else(|| corrupt("a frame whose key does not read"))?
            .to_string();
        let rest = &rest[2 + key_len..];
        let ops = logs.entry(key).or_default();
        match kind {
            ENTRIES => ops.push(Replay::Entries(rest.to_vec())),
            TRUNCATE => {
                let since = rest
                    .try_into()
                    .map(u64::from_le_bytes)
                    .map_err(|_| corrupt("a truncation without its index"))?;
                ops.push(Replay::Truncate(since));
            }
            FRESH => ops.clear(),
            k => return Err(corrupt(&format!("a frame of unknown kind {k}"))),
        }
        at += frame::HEADER_BYTES + body.len();
    }
    Ok(())
}
