//! Reads that cross ranges, at one timestamp (`combkv_replica::PastView`):
//! the reading node takes a timestamp, every range the read touches
//! raises its read floor to it (the ones held here through their local
//! replica, the others at a node that holds them, which reads there), and
//! each is read as of that timestamp: one snapshot of them all, as a read
//! of one store is. A map found out of date, or a range whose held past no
//! longer reaches back to the timestamp (its floor round was slow), takes
//! the read again from the start, at a new timestamp; nothing is handed to
//! the caller before every range has answered. A request that reads more
//! than once across ranges (a floor found, then a scan from it) reads at
//! one timestamp throughout, and so does each run of a parked one (the
//! timestamp is kept with its rounds). A snapshot of a split
//! keyspace is a timestamp every range pinned (`Cluster::snapshot`); reads
//! at it are the same reads, with no floor to raise (`at_snapshot`).

use std::collections::BTreeMap;
use std::sync::Arc;

use combkv::{Error, Result};
use combkv_replica::ranges::{RangeDesc, RangeMap};
use combkv_replica::{At, PAST_GONE, PastView, RemoteItem, RemoteRead, Replica};

use super::{Keyspace, Source, covers};
use crate::cluster::Cluster;
use crate::node::park::{Parking, Retry, parked};

/// How many times a read is taken again at a new timestamp.
const TRIES: usize = 4;
/// The pause before a read is taken again because a range's past did not
/// reach back to its timestamp: the next timestamp is in a later
/// millisecond.
const PAUSE: std::time::Duration = std::time::Duration::from_millis(2);
/// The pause before the later tries: a turn of the nodes' holds (100 ms),
/// after which every range of a node asked holds its past (a read over
/// many ranges after a quiet spell, each range applying its floor after a
/// write stamped above the read's timestamp, finds them all held).
const TURN_PAUSE: std::time::Duration = std::time::Duration::from_millis(110);

/// What one read of a plan found.
pub(super) enum Got {
    /// Its range is held here: read it from the view, as of the timestamp.
    Local(Arc<PastView>, Replica),
    /// Its range was read at another node: these items.
    Remote(Vec<RemoteItem>),
}

/// Runs `plan` (each read: its range, the read as a remote node would run
/// it, and what the caller needs to run it locally) at one timestamp; each
/// read's findings, in plan order. Each range is settled once however many
/// reads it has.
pub(super) fn at_one_timestamp<X>(
    ks: &Keyspace<'_>,
    cluster: &Cluster,
    mut plan: impl FnMut(&RangeMap) -> Result<Vec<(RangeDesc, RemoteRead, X)>>,
) -> Result<Vec<(Got, X)>> {
    with_timestamp(ks, cluster, |at| {
        let map = cluster.shared_range_map();
        settled(ks, cluster, at, plan(&map)?)
    })
}

/// Runs `read` at a timestamp taken for it, again at a new one (up to
/// `TRIES` times) if a map found behind or a range's held past not
/// reaching back made it fail; `read` may settle ranges at its timestamp
/// as often as it needs ([`settled`]), each at the same one. A request
/// that parks keeps its timestamp and its count of tries with its rounds:
/// it reads at the same timestamp when it runs again, every read across
/// ranges of one request reads at one, and its tries are counted over
/// all its runs.
pub(super) fn with_timestamp<T>(
    ks: &Keyspace<'_>,
    cluster: &Cluster,
    mut read: impl FnMut(u64) -> Result<T>,
) -> Result<T> {
    let parking = ks.parking();
    let mut last = None;
    let first = parking.map_or(0, |p| p.tries(Retry::Timestamp));
    for retries in first..TRIES as u64 {
        let at = match parking.and_then(|p| p.read_at()) {
            Some(at) => at,
            None => {
                let at = cluster.read_timestamp();
                if let Some(p) = parking {
                    p.set_read_at(at);
                }
                at
            }
        };
        let pause = match read(at) {
            Ok(found) => {
                cluster.note_read_across(retries);
                return Ok(found);
            }
            Err(Error::WrongRange(why)) => {
                // Parked, the catch-up leaves the timestamp as it is: the
                // run after it reads at it again by the map brought up to
                // date (it was taken after the request began, so that read
                // is as linearizable), and a map found behind once more
                // takes a new one here.
                super::catch_up(cluster, parking)?;
                last = Some(Error::WrongRange(why));
                None
            }
            Err(Error::Unavailable(why)) if why == PAST_GONE => {
                last = Some(Error::Unavailable(why));
                // A replica that began to hold its past just now (a store
                // newly installed, a floor applied after a quiet spell)
                // holds it by the next timestamp; its node's other ranges
                // by the next turn. The new timestamp is taken after that.
                Some(if retries == 0 { PAUSE } else { TURN_PAUSE })
            }
            r => return r,
        };
        if let Some(p) = parking {
            p.tried(Retry::Timestamp);
        }
        if let Some(pause) = pause
            && retries + 1 < TRIES as u64
        {
            // A parked request waits it out in the background (a round
            // that asks nothing), and takes its new timestamp in the run
            // after it.
            match parking {
                Some(p) if p.park_round(cluster, At::Now, Vec::new(), Vec::new(), Some(pause)) => {
                    return Err(parked());
                }
                _ => std::thread::sleep(pause),
            }
        }
    }
    Err(last.unwrap_or_else(|| Error::Unavailable("the read could not settle".into())))
}

/// Runs `plan` at snapshot timestamp `at`, which every range pinned when
/// the snapshot was taken: no floor raised, each range read where a
/// replica holds the pin. A range none of whose replicas holds it any more
/// (a split after the snapshot made it, a replica restarted since) has
/// lost the snapshot: [`Error::NoSuchSnapshot`].
/// A map found behind is brought up to date and the reads planned again.
pub(super) fn at_snapshot<X>(
    ks: &Keyspace<'_>,
    cluster: &Cluster,
    at: u64,
    mut plan: impl FnMut(&RangeMap) -> Result<Vec<(RangeDesc, RemoteRead, X)>>,
) -> Result<Vec<(Got, X)>> {
    super::routed(cluster, ks.parking(), |map| {
        match settle(ks, cluster, at, true, plan(map)?) {
            Err(Error::Unavailable(why)) if why == PAST_GONE => Err(Error::NoSuchSnapshot),
            r => r,
        }
    })
}

/// `reads` settled and run at timestamp `at`, for [`with_timestamp`]'s
/// `read`.
pub(super) fn settled<X>(
    ks: &Keyspace<'_>,
    cluster: &Cluster,
    at: u64,
    reads: Vec<(RangeDesc, RemoteRead, X)>,
) -> Result<Vec<(Got, X)>> {
    settle(ks, cluster, at, false, reads)
}

/// One try of [`at_one_timestamp`] at `at`, or (`pinned`) the reads of
/// [`at_snapshot`].
fn settle<X>(
    ks: &Keyspace<'_>,
    cluster: &Cluster,
    at: u64,
    pinned: bool,
    reads: Vec<(RangeDesc, RemoteRead, X)>,
) -> Result<Vec<(Got, X)>> {
    let settling = prepare(cluster, ks.parking(), at, pinned, &reads)?;
    let answers = ks.wait(
        cluster,
        settling.how(),
        settling.local(),
        settling.remote.clone(),
    )?;
    finish(settling, answers, reads)
}

/// What one try at a timestamp settles: each range once, where it is
/// read, and the reads of those held elsewhere.
struct Settling {
    at: u64,
    pinned: bool,
    sources: BTreeMap<u64, (RangeDesc, Source)>,
    views: BTreeMap<u64, Arc<PastView>>,
    remote: Vec<(u64, Vec<RemoteRead>)>,
}

impl Settling {
    fn how(&self) -> At {
        if self.pinned {
            At::Pinned(self.at)
        } else {
            At::Settle(self.at)
        }
    }

    /// This node's replicas of the ranges read here.
    fn local(&self) -> Vec<Replica> {
        self.sources
            .values()
            .filter_map(|(_, s)| match s {
                Source::Local(_, replica) => Some(replica.clone()),
                Source::Remote(_) => None,
            })
            .collect()
    }
}

/// A try of `reads` at `at` made ready: where each range is read, nothing
/// waited for (but a range's group about to start here, `Keyspace::place`).
fn prepare<X>(
    cluster: &Cluster,
    parking: Option<Parking<'_>>,
    at: u64,
    pinned: bool,
    reads: &[(RangeDesc, RemoteRead, X)],
) -> Result<Settling> {
    // Each range once: where it is read, and (if elsewhere) its reads.
    let mut sources: BTreeMap<u64, (RangeDesc, Source)> = BTreeMap::new();
    let mut views: BTreeMap<u64, Arc<PastView>> = BTreeMap::new();
    let mut remote: BTreeMap<u64, Vec<RemoteRead>> = BTreeMap::new();
    for (desc, read, _) in reads {
        let (_, source) = match sources.entry(desc.id) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let mut source = Keyspace::place(cluster, parking, desc)?;
                // A snapshot's range held here but not pinned here (this
                // replica applied the pin too late): read where it is.
                if pinned && let Source::Local(_, replica) = &source {
                    match replica.pinned_at(at) {
                        Ok(view) => {
                            views.insert(desc.id, Arc::new(view));
                        }
                        Err(Error::Unavailable(why)) if why == PAST_GONE => {
                            source = Source::Remote(desc.id);
                        }
                        Err(e) => return Err(e),
                    }
                }
                e.insert((desc.clone(), source))
            }
        };
        if let Source::Remote(_) = source {
            remote.entry(desc.id).or_default().push(read.clone());
        }
    }
    Ok(Settling {
        at,
        pinned,
        sources,
        views,
        remote: remote.into_iter().collect(),
    })
}

/// A try of `reads` finished from what settling it answered (`answers`,
/// the remote reads' in the order `Settling::remote` gave them): the
/// local ranges read as of the timestamp, each read's findings in order.
fn finish<X>(
    settling: Settling,
    answers: crate::cluster::Settled,
    reads: Vec<(RangeDesc, RemoteRead, X)>,
) -> Result<Vec<(Got, X)>> {
    let Settling {
        at,
        pinned,
        sources,
        mut views,
        remote,
    } = settling;
    let mut answers: BTreeMap<u64, std::vec::IntoIter<Vec<RemoteItem>>> = remote
        .into_iter()
        .map(|(id, _)| id)
        .zip(answers)
        .map(|(id, a)| (id, a.into_iter()))
        .collect();
    // The local views, once settled: a split applied before the floor
    // took keys away from a replica, and the map is then behind it.
    for (id, (desc, source)) in &sources {
        if let Source::Local(_, replica) = source
            && !pinned
        {
            if !covers(&replica.bounds(), desc) {
                return Err(Error::WrongRange(format!(
                    "range {id}: a split applied while the read settled"
                )));
            }
            views.insert(*id, Arc::new(replica.at(at)?));
        }
    }
    let mut out = Vec::with_capacity(reads.len());
    for (desc, _, x) in reads {
        let got = match &sources[&desc.id].1 {
            Source::Local(_, replica) => Got::Local(Arc::clone(&views[&desc.id]), replica.clone()),
            Source::Remote(_) => Got::Remote(
                answers
                    .get_mut(&desc.id)
                    .and_then(Iterator::next)
                    .ok_or_else(|| Error::Unavailable("a remote read went unanswered".into()))?,
            ),
        };
        out.push((got, x));
    }
    Ok(out)
}
