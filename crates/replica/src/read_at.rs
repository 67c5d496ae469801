//! Reads at a timestamp (`docs/design.md`, "Ranges"): what lets a read
//! that crosses ranges see them all at one moment. The reading node takes
//! a timestamp `at` (the end of its clock's current millisecond); each
//! range raises its read floor to `at` through its log
//! ([`Replica::settle_at`]), so every write after the floor takes a
//! version above `at`, and every write at or below it lies before the
//! floor; once a replica has applied the floor, the store as of version
//! `at` ([`Replica::at`], through the store's held past) is the range at
//! that moment, and stays it. Writes take their versions from the clock of
//! the entry that holds them and are never visible before the wall clock
//! reaches them (`state_machine::timestamps`), so a write acknowledged
//! before the read began lies at or below `at` on every range, and of two
//! writes one acknowledged before the other began, a read sees the second
//! only with the first.

use std::sync::Arc;

use tokio::sync::oneshot;

use combkv::{History, Item, ItemView, Range, Store, Version};

use crate::client::REQUEST_TIMEOUT;
use crate::error::ClusterError;
use crate::past::PAST_GONE;
use crate::replica::Replica;
use crate::rpc::{RemoteAnswer, RemoteItem, RemoteRead};

/// A replica's store as of one timestamp.
#[derive(Debug)]
pub struct PastView {
    store: Arc<Store>,
    history: Arc<History>,
    at: Version,
}

impl PastView {
    /// The live item of `key`.
    pub fn get(&self, key: &[u8]) -> combkv::Result<Option<Item>> {
        self.store.get_at_version(&self.history, self.at, key)
    }

    /// As [`Store::scan`].
    pub fn scan(&self, r: &Range, f: impl FnMut(ItemView<'_>) -> bool) -> combkv::Result<usize> {
        self.store.scan_at_version(&self.history, self.at, r, f)
    }

    /// How many live keys lie from `start` up to `end`.
    pub fn count(&self, start: &[u8], end: Option<&[u8]>) -> combkv::Result<u64> {
        use std::ops::Bound;
        let range = Range::new(
            Bound::Included(start.to_vec()),
            end.map_or(Bound::Unbounded, |e| Bound::Excluded(e.to_vec())),
        );
        let mut n = 0;
        self.scan(&range, |_| {
            n += 1;
            true
        })?;
        Ok(n)
    }
}

impl Replica {
    /// One turn of keeping the store's recent past (`past`): while `split`
    /// (the keyspace is cut into ranges) and reads at a timestamp come to
    /// this replica or (`node_asked`) another of the node's, a new history
    /// hold, else none.
    pub fn keep_past(&self, split: bool, node_asked: bool) {
        self.inner
            .sm
            .past()
            .turn(&self.current_store(), split, node_asked);
    }

    /// Whether a read at a timestamp came to this replica lately.
    pub fn past_asked(&self) -> bool {
        self.inner.sm.past().asked_lately()
    }

    /// How many snapshots' timestamps this replica holds pinned now.
    pub fn snapshot_pins(&self) -> usize {
        self.inner.sm.past().pinned()
    }

    /// Raises the range's read floor to `at` or above through its log
    /// (proposed through the leader as a write is) and waits until this
    /// replica has applied it. Reads that wait at once share one floor,
    /// at the highest timestamp among them (`spawn_floor_loop`): a floor
    /// at or above a read's timestamp serves it alike.
    pub async fn settle_at(&self, at: u64) -> Result<(), ClusterError> {
        let (tx, rx) = oneshot::channel();
        self.inner.floors.queue.lock().push((at, tx));
        self.inner.floors.wake.notify_one();
        match tokio::time::timeout(REQUEST_TIMEOUT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(ClusterError::Stopped),
            Err(_) => Err(ClusterError::NoLeader),
        }
    }

    /// The task that raises the floor for the reads waiting: each round
    /// takes every read queued, proposes one floor at the highest of their
    /// timestamps and answers them all; reads that come meanwhile wait for
    /// the next round.
    pub(crate) fn spawn_floor_loop(&self) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else { return };
                let wake = Arc::clone(&inner.floors.wake);
                drop(inner);
                wake.notified().await;
                let Some(inner) = weak.upgrade() else { return };
                let me = Replica { inner };
                let waiting = std::mem::take(&mut *me.inner.floors.queue.lock());
                let Some(at) = waiting.iter().map(|(at, _)| *at).max() else {
                    continue;
                };
                let r = me.floor_round(at).await;
                for (_, w) in waiting {
                    let _ = w.send(r.clone());
                }
            }
        });
    }

    /// One floor at `at`, applied here.
    async fn floor_round(&self, at: u64) -> Result<(), ClusterError> {
        let now = self.clock_ms();
        let (index, results) = self
            .propose_and_wait(now, crate::codec::encode_floor(at, 0))
            .await?;
        match results.into_iter().next() {
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(ClusterError::Refused(e.to_string())),
            None => {
                return Err(ClusterError::Unknown(
                    "a read floor without a result".into(),
                ));
            }
        }
        if self.wait_applied(index, REQUEST_TIMEOUT).await {
            Ok(())
        } else {
            Err(ClusterError::Unknown(format!(
                "this replica has not applied entry {index} in time"
            )))
        }
    }

    /// The store as of `at`, once [`Replica::settle_at`] has raised the
    /// floor to it; refused with [`PAST_GONE`] when the held past does not
    /// reach back to it.
    pub fn at(&self, at: u64) -> combkv::Result<PastView> {
        let store = self.current_store();
        let past = self.inner.sm.past();
        let held = past.covering(&store, at);
        if held.is_none() {
            // A store no turn has held yet: held from now, so that the
            // read taken again finds it.
            past.start(&store);
        }
        Self::view(held, at)
    }

    /// The store as of snapshot timestamp `at`, where this replica pinned
    /// it as it applied the snapshot's floor; refused with [`PAST_GONE`]
    /// where it did not (it has not applied the floor yet, applied it too
    /// late to pin, or restarted since). A range split off after the pin
    /// is read from the store it was split off (`Past::inherit`).
    pub fn pinned_at(&self, at: u64) -> combkv::Result<PastView> {
        let store = self.current_store();
        let held = self.inner.sm.past().pinned_at(&store, at);
        Self::view(held, at)
    }

    fn view(held: Option<(Arc<Store>, Arc<History>)>, at: u64) -> combkv::Result<PastView> {
        let (store, history) = held.ok_or_else(|| combkv::Error::Unavailable(PAST_GONE.into()))?;
        Ok(PastView {
            store,
            history,
            at: Version(at),
        })
    }
}

impl Replica {
    /// Remote reads (checked against this replica's bounds) at `at`, once
    /// the floor is raised to it, or where a snapshot pinned it
    /// (`pinned`); `ranges` holds each range read's range.
    pub(crate) fn serve_reads_at(
        &self,
        at: u64,
        pinned: bool,
        reads: &[RemoteRead],
        ranges: &[Option<Range>],
    ) -> RemoteAnswer {
        let view = if pinned {
            self.pinned_at(at)
        } else {
            self.at(at)
        };
        let view = view.map_err(|e| e.to_string())?;
        let item = |it: ItemView<'_>| RemoteItem {
            key: it.key.to_vec(),
            value: it.value.to_vec(),
            version: it.version.get(),
            expires_at_ms: it.expires_at_ms,
            flags: it.flags,
        };
        let mut answers = Vec::with_capacity(reads.len());
        for (r, range) in reads.iter().zip(ranges) {
            let items = match (r, range) {
                (RemoteRead::Get(k), _) => {
                    self.note_reads(1, k);
                    let found = view.get(k).map_err(|e| e.to_string())?;
                    found.iter().map(|it| item(it.view())).collect()
                }
                (RemoteRead::Count { start, end }, _) => vec![RemoteItem {
                    key: Vec::new(),
                    value: Vec::new(),
                    version: view
                        .count(start, end.as_deref())
                        .map_err(|e| e.to_string())?,
                    expires_at_ms: None,
                    flags: 0,
                }],
                (RemoteRead::Range { .. }, Some(range)) => {
                    let mut out = Vec::new();
                    view.scan(range, |it| {
                        out.push(item(it));
                        true
                    })
                    .map_err(|e| e.to_string())?;
                    out
                }
                (RemoteRead::Range { .. }, None) => {
                    return Err("a range read without its range".into());
                }
            };
            answers.push(items);
        }
        Ok(answers)
    }
}
