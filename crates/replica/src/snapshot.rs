//! Snapshot files: the state machine at one applied log id, as a checkpoint
//! of the store taken from an MVCC pin while apply goes on.
//!
//! A file is `CKVRSNP1`, a header record, then one record per item, then an
//! end record holding the item count; each record is `[length: u32 LE]
//! [CRC-32: u32 LE][payload]`. The header carries the snapshot's meta
//! (last log id, membership), the store's version clock and the entry clock
//! at that point, so that a node that installs it goes on giving writes the
//! same versions as every other replica. Items are written in key order,
//! expired ones included (expiry is judged against each entry's clock on
//! apply, so a replica must keep what the others keep).

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use combkv::{Item, Version};
use openraft::{BasicNode, SnapshotMeta};
use serde::{Deserialize, Serialize};

use crate::ranges::{Bounds, RangeMap};
use crate::types::NodeId;

const MAGIC: &[u8; 8] = b"CKVRSNP1";
/// The largest record a reader accepts (a key, a 64 MiB value and framing).
const MAX_RECORD_BYTES: usize = 80 << 20;

/// What a snapshot file says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub meta: SnapshotMeta<NodeId, BasicNode>,
    /// The store's version clock: the newest version any write took.
    pub clock: u64,
    /// The clock of the last entry applied before the snapshot.
    pub now_ms: u64,
    /// Every id that was a voter in a membership applied up to the
    /// snapshot: a node that installs it refuses those ids for a new node
    /// as the others do (ids are never reused). Last, so that files from
    /// before it read as [`HeaderV1`].
    pub ever_voters: Vec<NodeId>,
    /// The cluster settings applied up to the snapshot (name, value).
    /// Last, so that files from before it read as [`HeaderV2`].
    pub settings: Vec<(String, Vec<u8>)>,
    /// The range map, in the group that keeps it. So that files from
    /// before it read as [`HeaderV3`].
    pub ranges: Option<RangeMap>,
    /// The bounds of the group's range, once it has split (none: the
    /// whole keyspace). Last, so that files from before it read as
    /// [`HeaderV4`]; since [`Bounds::retired`], files from before read as
    /// [`HeaderV5`].
    pub bounds: Option<Bounds>,
}

/// The header of files written before merges ([`Bounds::retired`], the
/// map's ranges merging).
#[derive(Deserialize)]
struct HeaderV5 {
    meta: SnapshotMeta<NodeId, BasicNode>,
    clock: u64,
    now_ms: u64,
    ever_voters: Vec<NodeId>,
    settings: Vec<(String, Vec<u8>)>,
    ranges: Option<RangeMapV1>,
    bounds: Option<BoundsV1>,
}

/// [`RangeMap`] before merges (no range merging).
#[derive(Deserialize)]
struct RangeMapV1 {
    ranges: std::collections::BTreeMap<Vec<u8>, crate::ranges::RangeDesc>,
    next_id: crate::ranges::RangeId,
    generation: u64,
}

impl RangeMapV1 {
    fn into_map(self) -> RangeMap {
        RangeMap::from_parts(self.ranges, self.next_id, self.generation)
    }
}

/// [`Bounds`] before [`Bounds::retired`]: no range was retired then.
#[derive(Deserialize)]
struct BoundsV1 {
    id: crate::ranges::RangeId,
    #[serde(with = "serde_bytes")]
    start: Vec<u8>,
    #[serde(with = "serde_bytes")]
    end: Option<Vec<u8>>,
    epoch: crate::ranges::Epoch,
}

/// The header of files written before [`Header::bounds`].
#[derive(Deserialize)]
struct HeaderV4 {
    meta: SnapshotMeta<NodeId, BasicNode>,
    clock: u64,
    now_ms: u64,
    ever_voters: Vec<NodeId>,
    settings: Vec<(String, Vec<u8>)>,
    ranges: Option<RangeMapV1>,
}

/// The header of files written before [`Header::ranges`].
#[derive(Deserialize)]
struct HeaderV3 {
    meta: SnapshotMeta<NodeId, BasicNode>,
    clock: u64,
    now_ms: u64,
    ever_voters: Vec<NodeId>,
    settings: Vec<(String, Vec<u8>)>,
}

/// The header of files written before [`Header::settings`].
#[derive(Deserialize)]
struct HeaderV2 {
    meta: SnapshotMeta<NodeId, BasicNode>,
    clock: u64,
    now_ms: u64,
    ever_voters: Vec<NodeId>,
}

/// The header of files written before [`Header::ever_voters`]: postcard
/// is no self-describing format, so such a header fails to read as a
/// [`Header`] and is read as this.
#[derive(Deserialize)]
struct HeaderV1 {
    meta: SnapshotMeta<NodeId, BasicNode>,
    clock: u64,
    now_ms: u64,
}

/// `bytes` read as a `T` that takes all of them: a header of one version
/// must not read as a shorter one of another (postcard is no
/// self-describing format, and would read a prefix).
fn exactly<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Option<T> {
    match postcard::take_from_bytes::<T>(bytes) {
        Ok((t, [])) => Some(t),
        _ => None,
    }
}

impl Header {
    /// A header of this version or of any before it, each older one
    /// brought forward one version at a time.
    fn decode(bytes: &[u8]) -> Option<Header> {
        let v1 = || exactly::<HeaderV1>(bytes);
        let v2 = || exactly::<HeaderV2>(bytes).or_else(|| v1().map(HeaderV2::from));
        let v3 = || exactly::<HeaderV3>(bytes).or_else(|| v2().map(HeaderV3::from));
        let v4 = || exactly::<HeaderV4>(bytes).or_else(|| v3().map(HeaderV4::from));
        let v5 = || exactly::<HeaderV5>(bytes).or_else(|| v4().map(HeaderV5::from));
        exactly::<Header>(bytes).or_else(|| v5().map(Header::from))
    }
}

impl From<HeaderV1> for HeaderV2 {
    fn from(h: HeaderV1) -> HeaderV2 {
        // The voters of the snapshot's membership are the ones it knows.
        let ever_voters = h.meta.last_membership.membership().voter_ids().collect();
        HeaderV2 {
            meta: h.meta,
            clock: h.clock,
            now_ms: h.now_ms,
            ever_voters,
        }
    }
}

impl From<HeaderV2> for HeaderV3 {
    fn from(h: HeaderV2) -> HeaderV3 {
        HeaderV3 {
            meta: h.meta,
            clock: h.clock,
            now_ms: h.now_ms,
            ever_voters: h.ever_voters,
            settings: Vec::new(),
        }
    }
}

impl From<HeaderV3> for HeaderV4 {
    fn from(h: HeaderV3) -> HeaderV4 {
        HeaderV4 {
            meta: h.meta,
            clock: h.clock,
            now_ms: h.now_ms,
            ever_voters: h.ever_voters,
            settings: h.settings,
            ranges: None,
        }
    }
}

impl From<HeaderV4> for HeaderV5 {
    fn from(h: HeaderV4) -> HeaderV5 {
        HeaderV5 {
            meta: h.meta,
            clock: h.clock,
            now_ms: h.now_ms,
            ever_voters: h.ever_voters,
            settings: h.settings,
            ranges: h.ranges,
            bounds: None,
        }
    }
}

impl From<HeaderV5> for Header {
    fn from(h: HeaderV5) -> Header {
        Header {
            meta: h.meta,
            clock: h.clock,
            now_ms: h.now_ms,
            ever_voters: h.ever_voters,
            settings: h.settings,
            ranges: h.ranges.map(RangeMapV1::into_map),
            bounds: h.bounds.map(|b| Bounds {
                id: b.id,
                start: b.start,
                end: b.end,
                epoch: b.epoch,
                retired: false,
            }),
        }
    }
}

/// The file name of a snapshot.
pub(crate) fn file_name(meta: &SnapshotMeta<NodeId, BasicNode>) -> String {
    format!("snapshot-{}.snap", meta.snapshot_id)
}

/// Writes a snapshot file: the header, then `items` (in key order), then the
/// end record; synced before it returns.
pub(crate) struct Writer {
    out: BufWriter<File>,
    items: u64,
    path: PathBuf,
}

impl Writer {
    pub(crate) fn create(path: &Path, header: &Header) -> io::Result<Writer> {
        let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
        out.write_all(MAGIC)?;
        let head = postcard::to_stdvec(header).map_err(io::Error::other)?;
        record(&mut out, &head)?;
        Ok(Writer {
            out,
            items: 0,
            path: path.to_path_buf(),
        })
    }

    pub(crate) fn item(
        &mut self,
        key: &[u8],
        value: &[u8],
        version: u64,
        expiry: u64,
        flags: u32,
    ) -> io::Result<()> {
        let mut buf = Vec::with_capacity(key.len() + value.len() + 28);
        buf.push(1);
        buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
        buf.extend_from_slice(key);
        buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
        buf.extend_from_slice(value);
        buf.extend_from_slice(&version.to_le_bytes());
        buf.extend_from_slice(&expiry.to_le_bytes());
        buf.extend_from_slice(&flags.to_le_bytes());
        record(&mut self.out, &buf)?;
        self.items += 1;
        Ok(())
    }

    /// Ends the file and makes it durable.
    pub(crate) fn finish(mut self) -> io::Result<PathBuf> {
        let mut end = vec![2];
        end.extend_from_slice(&self.items.to_le_bytes());
        record(&mut self.out, &end)?;
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(self.path)
    }
}

fn record(out: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    out.write_all(&(payload.len() as u32).to_le_bytes())?;
    out.write_all(&crc32fast::hash(payload).to_le_bytes())?;
    out.write_all(payload)
}

fn bad(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("snapshot {}: {what}", path.display()),
    )
}

/// Reads a snapshot file record by record, checking every checksum and the
/// item count at the end.
pub(crate) struct Reader {
    input: BufReader<File>,
    path: PathBuf,
    items: u64,
    done: bool,
}

impl Reader {
    pub(crate) fn open(path: &Path) -> io::Result<(Reader, Header)> {
        let mut input = BufReader::with_capacity(1 << 20, File::open(path)?);
        let mut magic = [0u8; 8];
        input.read_exact(&mut magic)?;
        if &magic != MAGIC {
            return Err(bad(path, "not a snapshot file"));
        }
        let mut r = Reader {
            input,
            path: path.to_path_buf(),
            items: 0,
            done: false,
        };
        let head = r.record()?;
        let header = Header::decode(&head).ok_or_else(|| bad(path, "bad header"))?;
        Ok((r, header))
    }

    fn record(&mut self) -> io::Result<Vec<u8>> {
        let mut h = [0u8; 8];
        self.input
            .read_exact(&mut h)
            .map_err(|_| bad(&self.path, "truncated"))?;
        let len = u32::from_le_bytes(h[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(h[4..].try_into().expect("4 bytes"));
        if len > MAX_RECORD_BYTES {
            return Err(bad(&self.path, "a record claims too many bytes"));
        }
        let mut payload = vec![0u8; len];
        self.input
            .read_exact(&mut payload)
            .map_err(|_| bad(&self.path, "truncated"))?;
        if crc32fast::hash(&payload) != crc {
            return Err(bad(&self.path, "a record fails its checksum"));
        }
        Ok(payload)
    }

    /// The next item, `None` after the last (whose count is checked).
    pub(crate) fn next_item(&mut self) -> io::Result<Option<Item>> {
        if self.done {
            return Ok(None);
        }
        let rec = self.record()?;
        let bad_item = || bad(&self.path, "a malformed item");
        match rec.first() {
            Some(1) => {
                let mut at = 1;
                let mut take = |n: usize| -> io::Result<&[u8]> {
                    let s = rec.get(at..at + n).ok_or_else(bad_item)?;
                    at += n;
                    Ok(s)
                };
                let klen = u32::from_le_bytes(take(4)?.try_into().expect("4")) as usize;
                let key = take(klen)?.to_vec();
                let vlen = u32::from_le_bytes(take(4)?.try_into().expect("4")) as usize;
                let value = take(vlen)?.to_vec();
                let version = u64::from_le_bytes(take(8)?.try_into().expect("8"));
                let expiry = u64::from_le_bytes(take(8)?.try_into().expect("8"));
                let flags = u32::from_le_bytes(take(4)?.try_into().expect("4"));
                if at != rec.len() {
                    return Err(bad_item());
                }
                self.items += 1;
                Ok(Some(Item {
                    key: key.into(),
                    value: value.into(),
                    version: Version(version),
                    expires_at_ms: (expiry != 0).then_some(expiry),
                    flags,
                }))
            }
            Some(2) if rec.len() == 9 => {
                let n = u64::from_le_bytes(rec[1..].try_into().expect("8"));
                if n != self.items {
                    return Err(bad(&self.path, "the item count does not match"));
                }
                self.done = true;
                Ok(None)
            }
            _ => Err(bad(&self.path, "an unknown record")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use openraft::{LogId, Membership, StoredMembership};

    use super::*;

    fn meta() -> SnapshotMeta<NodeId, BasicNode> {
        let nodes: BTreeMap<NodeId, BasicNode> = (1..=4)
            .map(|id| (id, BasicNode::new(format!("127.0.0.1:700{id}"))))
            .collect();
        let membership = Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes);
        let at = LogId::new(openraft::CommittedLeaderId::new(3, 1), 90);
        SnapshotMeta {
            last_log_id: Some(at),
            last_membership: StoredMembership::new(Some(at), membership),
            snapshot_id: "s".into(),
        }
    }

    /// A file written before the header knew its voters still loads: its
    /// membership's voters (not the learner) stand for them.
    #[test]
    fn a_header_from_before_ever_voters_reads_with_its_membership_voters() {
        #[derive(Serialize)]
        struct Old {
            meta: SnapshotMeta<NodeId, BasicNode>,
            clock: u64,
            now_ms: u64,
        }
        let old = postcard::to_stdvec(&Old {
            meta: meta(),
            clock: 7,
            now_ms: 11,
        })
        .unwrap();
        let h = Header::decode(&old).unwrap();
        assert_eq!((h.meta, h.clock, h.now_ms), (meta(), 7, 11));
        assert_eq!(h.ever_voters, vec![1, 2, 3]);
    }

    #[test]
    fn a_header_keeps_its_ever_voters() {
        let h = Header {
            meta: meta(),
            clock: 7,
            now_ms: 11,
            ever_voters: vec![1, 2, 3, 5],
            settings: vec![(
                "acl".into(),
                b"user default on nopass ~* &* +@all\n".to_vec(),
            )],
            ranges: Some(crate::ranges::RangeMap::new(vec![1, 2, 3])),
            bounds: Some(crate::ranges::Bounds::whole(4)),
        };
        let bytes = postcard::to_stdvec(&h).unwrap();
        assert_eq!(Header::decode(&bytes), Some(h));
    }

    #[test]
    fn a_header_from_before_range_maps_reads_with_none() {
        #[derive(Serialize)]
        struct V3 {
            meta: SnapshotMeta<NodeId, BasicNode>,
            clock: u64,
            now_ms: u64,
            ever_voters: Vec<NodeId>,
            settings: Vec<(String, Vec<u8>)>,
        }
        let old = V3 {
            meta: meta(),
            clock: 7,
            now_ms: 11,
            ever_voters: vec![1, 2],
            settings: vec![("acl".into(), b"x".to_vec())],
        };
        let h = Header::decode(&postcard::to_stdvec(&old).unwrap()).unwrap();
        assert_eq!((h.clock, h.ever_voters.len(), h.settings.len()), (7, 2, 1));
        assert_eq!(h.ranges, None);
    }

    /// A range map as files from before merges hold it (`RangeMapV1`).
    #[derive(Serialize)]
    struct OldMap {
        ranges: BTreeMap<Vec<u8>, crate::ranges::RangeDesc>,
        next_id: u64,
        generation: u64,
    }

    impl OldMap {
        fn of(map: &RangeMap, generation: u64) -> OldMap {
            OldMap {
                ranges: map.ranges().map(|r| (r.start.clone(), r.clone())).collect(),
                next_id: map.next_id(),
                generation,
            }
        }
    }

    #[test]
    fn a_header_from_before_bounds_reads_its_map_and_no_bounds() {
        #[derive(Serialize)]
        struct V4 {
            meta: SnapshotMeta<NodeId, BasicNode>,
            clock: u64,
            now_ms: u64,
            ever_voters: Vec<NodeId>,
            settings: Vec<(String, Vec<u8>)>,
            ranges: Option<OldMap>,
        }
        let map = RangeMap::new(vec![1, 2, 3]);
        let old = V4 {
            meta: meta(),
            clock: 7,
            now_ms: 11,
            ever_voters: vec![1, 2],
            settings: vec![("acl".into(), b"x".to_vec())],
            ranges: Some(OldMap::of(&map, 5)),
        };
        let h = Header::decode(&postcard::to_stdvec(&old).unwrap()).unwrap();
        assert_eq!((h.clock, h.ever_voters.len(), h.settings.len()), (7, 2, 1));
        let read = h.ranges.expect("its range map");
        assert_eq!(
            read.ranges().collect::<Vec<_>>(),
            map.ranges().collect::<Vec<_>>()
        );
        assert_eq!(read.next_id(), map.next_id());
        assert!(!read.is_merging(0));
        assert_eq!(h.bounds, None);
    }

    #[test]
    fn a_header_from_before_settings_reads_with_none() {
        #[derive(Serialize)]
        struct V2 {
            meta: SnapshotMeta<NodeId, BasicNode>,
            clock: u64,
            now_ms: u64,
            ever_voters: Vec<NodeId>,
        }
        let old = V2 {
            meta: meta(),
            clock: 7,
            now_ms: 11,
            ever_voters: vec![1, 2],
        };
        let h = Header::decode(&postcard::to_stdvec(&old).unwrap()).unwrap();
        assert_eq!((h.clock, h.now_ms, h.ever_voters), (7, 11, vec![1, 2]));
        assert!(h.settings.is_empty());
    }

    /// A header written before bounds could be retired reads with its
    /// bounds, live; one written now keeps a retired range retired.
    #[test]
    fn a_header_from_before_retired_ranges_reads_its_bounds_live() {
        #[derive(Serialize)]
        struct OldBounds {
            id: u64,
            #[serde(with = "serde_bytes")]
            start: Vec<u8>,
            #[serde(with = "serde_bytes")]
            end: Option<Vec<u8>>,
            epoch: crate::ranges::Epoch,
        }
        #[derive(Serialize)]
        struct V5 {
            meta: SnapshotMeta<NodeId, BasicNode>,
            clock: u64,
            now_ms: u64,
            ever_voters: Vec<NodeId>,
            settings: Vec<(String, Vec<u8>)>,
            ranges: Option<OldMap>,
            bounds: Option<OldBounds>,
        }
        let epoch = crate::ranges::Epoch {
            version: 3,
            conf_ver: 1,
        };
        let old = V5 {
            meta: meta(),
            clock: 7,
            now_ms: 11,
            ever_voters: vec![1, 2],
            settings: Vec::new(),
            // Group 0's: a map, and bounds from the empty key (which a
            // reader that took a prefix would misread as a merging range
            // and no bounds).
            ranges: Some(OldMap::of(&RangeMap::new(vec![1, 2, 3]), 0)),
            bounds: Some(OldBounds {
                id: 0,
                start: Vec::new(),
                end: Some(b"t".to_vec()),
                epoch,
            }),
        };
        let h = Header::decode(&postcard::to_stdvec(&old).unwrap()).unwrap();
        assert_eq!(h.ranges, Some(RangeMap::new(vec![1, 2, 3])));
        let live = Bounds {
            id: 0,
            start: Vec::new(),
            end: Some(b"t".to_vec()),
            epoch,
            retired: false,
        };
        assert_eq!(h.bounds.as_ref(), Some(&live));
        assert_eq!((h.clock, h.now_ms), (7, 11));
        let mut now = h.clone();
        now.bounds = Some(Bounds {
            retired: true,
            ..live
        });
        let back = Header::decode(&postcard::to_stdvec(&now).unwrap()).unwrap();
        assert_eq!(back, now);
    }
}
