//! What the log keeps in memory: the log id of every entry it holds (what
//! openraft asks about, and what a read from a segment is checked
//! against), and a cache of recent entries bounded in bytes, which also
//! holds every entry not yet written to a segment.

use std::collections::{BTreeMap, VecDeque};

use openraft::CommittedLeaderId;

use crate::types::{Entry, LogId, NodeId};

/// The log ids of the entries the log holds: the leader of each, by index.
/// A gap (an index no entry was appended at; openraft never makes one, its
/// storage test suite does) holds `None`.
#[derive(Debug, Default)]
pub(crate) struct LogIds {
    /// The index of `leaders[0]`.
    first: u64,
    leaders: VecDeque<Option<CommittedLeaderId<NodeId>>>,
}

impl LogIds {
    /// The index after the last entry held (`first` when none is).
    pub(crate) fn end(&self) -> u64 {
        self.first + self.leaders.len() as u64
    }

    pub(crate) fn len(&self) -> usize {
        self.leaders.iter().filter(|l| l.is_some()).count()
    }

    pub(crate) fn get(&self, index: u64) -> Option<LogId> {
        let at = usize::try_from(index.checked_sub(self.first)?).ok()?;
        let leader = (*self.leaders.get(at)?)?;
        Some(LogId::new(leader, index))
    }

    pub(crate) fn last(&self) -> Option<LogId> {
        self.get(self.end().checked_sub(1)?)
    }

    /// Appends `id`. An entry at an index already held replaces it and
    /// every entry after it, as in a Raft log (openraft truncates first).
    pub(crate) fn push(&mut self, id: LogId) {
        self.truncate(id.index);
        if self.leaders.is_empty() {
            self.first = id.index;
        }
        while self.end() < id.index {
            self.leaders.push_back(None);
        }
        self.leaders.push_back(Some(id.leader_id));
    }

    /// Drops the entries from `since` on.
    pub(crate) fn truncate(&mut self, since: u64) {
        let keep = since.saturating_sub(self.first) as usize;
        self.leaders.truncate(keep);
        while self.leaders.back().is_some_and(|l| l.is_none()) {
            self.leaders.pop_back();
        }
    }

    /// Drops the entries up to `upto`.
    pub(crate) fn purge(&mut self, upto: u64) {
        let drop = ((upto + 1).saturating_sub(self.first) as usize).min(self.leaders.len());
        self.leaders.drain(..drop);
        self.first += drop as u64;
        while self.leaders.front().is_some_and(|l| l.is_none()) {
            self.leaders.pop_front();
            self.first += 1;
        }
        if self.leaders.is_empty() {
            self.first = self.first.max(upto + 1);
        }
    }
}

/// What each cached entry costs besides its record's bytes: the map's node
/// share and the entry's own fields. Counted so that many small entries
/// cannot hold far more memory than the limit says.
const ENTRY_OVERHEAD: u64 = (std::mem::size_of::<(u64, Cached)>() + 32) as u64;

/// Entries kept in memory: every entry not yet written to a segment (the
/// leader's replication reads its own appends at once), and the most
/// recent written ones up to a limit in bytes; older ones are read from
/// their segments.
#[derive(Debug)]
pub(crate) struct Cache {
    entries: BTreeMap<u64, Cached>,
    /// The cost of `entries` (records plus [`ENTRY_OVERHEAD`] each).
    bytes: u64,
    limit: u64,
}

#[derive(Debug)]
struct Cached {
    entry: Entry,
    bytes: u64,
    /// The append that brought it (see [`Cache::written`]).
    append: u64,
    /// In a segment: it may be evicted.
    written: bool,
}

impl Cache {
    pub(crate) fn new(limit: u64) -> Cache {
        Cache {
            entries: BTreeMap::new(),
            bytes: 0,
            limit,
        }
    }

    /// The cost of what is cached now.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// How many entries are cached now.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Caches `entry`, whose record is `record_bytes` long, brought by
    /// append number `append`; it stays at least until written.
    pub(crate) fn insert(&mut self, entry: Entry, record_bytes: usize, append: u64) {
        let bytes = record_bytes as u64 + ENTRY_OVERHEAD;
        let index = entry.log_id.index;
        let old = self.entries.insert(
            index,
            Cached {
                entry,
                bytes,
                append,
                written: false,
            },
        );
        self.bytes += bytes;
        if let Some(old) = old {
            self.bytes -= old.bytes;
        }
    }

    /// The cached entry at `index` and the bytes its record takes.
    pub(crate) fn get(&self, index: u64) -> Option<(&Entry, u64)> {
        self.entries
            .get(&index)
            .map(|c| (&c.entry, c.bytes - ENTRY_OVERHEAD))
    }

    /// Notes that append number `append` wrote the entries at `indexes`,
    /// and evicts the oldest written entries while over the limit. An
    /// entry at one of them brought by a later append (after a truncation)
    /// is not that append's and stays unwritten.
    pub(crate) fn written(&mut self, append: u64, indexes: impl IntoIterator<Item = u64>) {
        for i in indexes {
            if let Some(c) = self.entries.get_mut(&i)
                && c.append == append
            {
                c.written = true;
            }
        }
        while self.bytes > self.limit {
            let Some(first) = self.entries.first_entry() else {
                break;
            };
            // Unwritten entries are the newest: none older is evictable.
            if !first.get().written {
                break;
            }
            self.bytes -= first.remove().bytes;
        }
    }

    /// Drops the entries from `since` on.
    pub(crate) fn truncate(&mut self, since: u64) {
        let dropped = self.entries.split_off(&since);
        self.bytes -= dropped.values().map(|c| c.bytes).sum::<u64>();
    }

    /// Drops the entries up to `upto`.
    pub(crate) fn purge(&mut self, upto: u64) {
        let keep = self.entries.split_off(&(upto + 1));
        let dropped = std::mem::replace(&mut self.entries, keep);
        self.bytes -= dropped.values().map(|c| c.bytes).sum::<u64>();
    }
}
