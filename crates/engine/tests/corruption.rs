//! A damaged log: recovery tells a torn tail (cut automatically) from
//! corruption (refused, nothing changed), cuts corruption only when asked
//! to, and never lets a write after the cut reuse a version the dropped
//! data held, on this start or a later one.

mod wal_files;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use combkv::durable::{FaultyStorage, Storage};
use combkv::{Config, DurableConfig, Error, Range, RecoveryReport, Store};

const DIR: &str = "/data";

fn config(fs: &FaultyStorage, segment_bytes: u64, truncate_corrupt: bool) -> DurableConfig {
    DurableConfig {
        wal_segment_bytes: segment_bytes,
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: Duration::from_secs(86_400),
        storage: Arc::new(fs.clone()),
        truncate_corrupt,
        ..DurableConfig::new(DIR)
    }
}

fn open(
    fs: &FaultyStorage,
    segment_bytes: u64,
    truncate_corrupt: bool,
) -> Result<(Store, RecoveryReport), Error> {
    Store::open(
        Config::with_node_size(1024),
        config(fs, segment_bytes, truncate_corrupt),
    )
}

fn key(i: usize) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn segments(fs: &FaultyStorage) -> Vec<std::path::PathBuf> {
    wal_files::segments(fs, DIR)
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// Every file of the directory with its bytes.
fn files(fs: &FaultyStorage) -> Vec<(String, Option<Vec<u8>>)> {
    let mut names = fs.list(Path::new(DIR)).unwrap();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let bytes = fs.file(&Path::new(DIR).join(&n));
            (n, bytes)
        })
        .collect()
}

/// Offsets of the records of a segment (frames: u32 body length | u32 crc |
/// body, after a 32-byte header).
fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut at = 32;
    let mut out = Vec::new();
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        out.push(at);
        at += 8 + len;
    }
    assert_eq!(at, bytes.len(), "whole records");
    out
}

/// Writes keys `0..n` and shuts down. Returns the highest version written.
fn fill(fs: &FaultyStorage, segment_bytes: u64, n: usize) -> u64 {
    let (store, _) = open(fs, segment_bytes, false).unwrap();
    let mut v = 0;
    for i in 0..n {
        v = store
            .put(&key(i), format!("value{i}").as_bytes())
            .unwrap()
            .get();
    }
    store.shutdown().unwrap();
    v
}

/// Writes until the log has three segments holding records (plus the
/// empty one the next open starts), then shuts down. Returns the three and
/// the highest version written.
fn three_segments(fs: &FaultyStorage) -> (Vec<PathBuf>, u64) {
    let (store, _) = open(fs, 1000, false).unwrap();
    let mut v = 0;
    let mut i = 0;
    // Segment 3 starts when segment 2 is full: write a little into it.
    while segments(fs).len() < 3 {
        v = store.put(&key(i), b"some value").unwrap().get();
        i += 1;
    }
    for _ in 0..5 {
        v = store.put(&key(i), b"some value").unwrap().get();
        i += 1;
    }
    store.shutdown().unwrap();
    let segs = segments(fs);
    assert_eq!(segs.len(), 3, "{segs:?}");
    (segs, v)
}

/// Flips one byte inside the record at `at` (a byte of its body, so its
/// frame still reads as whole but its checksum fails).
fn flip(fs: &FaultyStorage, path: &Path, at: usize) {
    let mut bytes = fs.file(path).unwrap();
    bytes[at + 8 + 4] ^= 0x20;
    fs.put_file(path, bytes);
}

fn refused(r: Result<(Store, RecoveryReport), Error>) -> String {
    match r {
        Err(Error::Corrupt(why)) => why,
        Err(e) => panic!("refused for another reason: {e}"),
        Ok((_, report)) => panic!("recovery must refuse a corrupt log; it did: {report}"),
    }
}

/// (a) The first case: one flipped byte in the middle of a
/// segment, valid records after it. Recovery used to cut there and lose
/// every later write silently.
#[test]
fn a_flipped_byte_mid_segment_is_refused_and_nothing_is_changed() {
    let fs = FaultyStorage::new(1);
    fill(&fs, 64 << 20, 200);
    let seg = segments(&fs).remove(0);
    let offsets = record_offsets(&fs.file(&seg).unwrap());
    let bad = offsets[offsets.len() / 2];
    flip(&fs, &seg, bad);
    let before = files(&fs);

    let why = refused(open(&fs, 64 << 20, false));
    assert!(why.contains(&name(&seg)), "{why}");
    assert!(why.contains(&format!("offset {bad}:")), "{why}");
    assert!(why.contains("checksum"), "{why}");
    assert!(why.contains("not a torn tail"), "{why}");
    let after = offsets.len() - offsets.len() / 2 - 1;
    assert!(
        why.contains(&format!("holding {after} well-formed records")),
        "{why}"
    );
    assert!(why.contains("Nothing was changed"), "{why}");
    assert!(why.contains("check --repair"), "{why}");
    assert!(why.contains("--wal-truncate-corrupt"), "{why}");
    assert_eq!(
        before,
        files(&fs),
        "a refused recovery changed the directory"
    );
    // Still refused, still unchanged: nothing was half done.
    refused(open(&fs, 64 << 20, false));
    assert_eq!(before, files(&fs));

    let check = combkv::durable::check::check_with(&fs, Path::new(DIR)).unwrap();
    assert!(check.would_refuse() && !check.is_clean(), "{check}");
    let text = check.to_string();
    assert!(text.contains(&format!("CORRUPT at offset {bad}")), "{text}");
    assert!(text.contains("recovery would REFUSE"), "{text}");
    assert!(text.contains("--repair would cut"), "{text}");
}

/// (b) The second case: damage in the middle one of three
/// segments. Here it is the middle segment's last record, so nothing valid
/// follows it in its own segment: the later segment alone makes it
/// corruption (a segment is synced before the next one starts).
#[test]
fn damage_in_the_middle_of_three_segments_is_refused() {
    let fs = FaultyStorage::new(2);
    let (segs, _) = three_segments(&fs);
    let offsets = record_offsets(&fs.file(&segs[1]).unwrap());
    let bad = *offsets.last().unwrap();
    flip(&fs, &segs[1], bad);
    let before = files(&fs);

    let why = refused(open(&fs, 1000, false));
    assert!(why.contains(&name(&segs[1])), "{why}");
    assert!(why.contains(&format!("offset {bad}:")), "{why}");
    assert!(
        why.contains(&format!("in 1 later segment ({})", name(&segs[2]))),
        "{why}"
    );
    assert_eq!(
        before,
        files(&fs),
        "a refused recovery changed the directory"
    );
}

/// (c) Asked to, recovery cuts the corrupt log, says what it dropped, keeps
/// it as `.discarded` files, and restarts versions above every version the
/// dropped data held, on this start and the next.
#[test]
fn a_requested_cut_reports_what_it_dropped_and_never_reuses_a_version() {
    let fs = FaultyStorage::new(3);
    let (segs, highest) = three_segments(&fs);
    let offsets = record_offsets(&fs.file(&segs[1]).unwrap());
    let bad = offsets[offsets.len() / 2];
    let original = fs.file(&segs[1]).unwrap();
    flip(&fs, &segs[1], bad);
    let damaged = fs.file(&segs[1]).unwrap();
    let third = fs.file(&segs[2]).unwrap();

    let (store, report) = open(&fs, 1000, true).unwrap();
    let cut = report.tail_cut.clone().expect("a cut");
    assert!(cut.corrupt, "{report}");
    assert_eq!(cut.segment, name(&segs[1]));
    assert_eq!(cut.offset, bad as u64);
    assert_eq!(cut.dropped_bytes, (original.len() - bad) as u64);
    assert_eq!(cut.dropped.segments, vec![name(&segs[2])]);
    assert_eq!(
        cut.dropped.bytes,
        (original.len() - bad + third.len()) as u64
    );
    // Every record after the damaged one, in both segments.
    let later = offsets.len() - offsets.len() / 2 - 1 + record_offsets(&third).len();
    assert_eq!(cut.dropped.records, later as u64, "{report}");
    let (_, hi) = cut.dropped.versions.unwrap();
    assert_eq!(hi, highest);
    assert_eq!(cut.dropped.highest_version, highest);
    assert_eq!(report.discarded_segments, vec![name(&segs[2])]);
    assert_eq!(report.version_floor, Some(highest));
    let text = report.to_string();
    assert!(text.contains("corrupt log cut in"), "{text}");
    assert!(text.contains(&format!("..={highest})")), "{text}");
    assert!(text.contains("version floor"), "{text}");
    // Set aside, not deleted: the damaged segment as it was, and the later one.
    let aside = |n: &Path| fs.file(&Path::new(DIR).join(format!("{}.discarded", name(n))));
    assert_eq!(aside(&segs[1]), Some(damaged));
    assert_eq!(aside(&segs[2]), Some(third));
    assert_eq!(fs.file(&segs[1]).unwrap(), original[..bad]);

    // The kept prefix is there, in order; the rest is gone.
    let n = store.range(&Range::all()).unwrap().len();
    assert!(n > 0, "{report}");
    for i in 0..n {
        assert!(store.get(&key(i)).unwrap().is_some());
    }
    assert!(store.get(&key(n)).unwrap().is_none());
    let v = store.put(b"after", b"1").unwrap().get();
    assert!(
        v > highest,
        "version {v} reuses one of the dropped data (<= {highest})"
    );
    store.shutdown().unwrap();
    drop(store);

    // A second restart: the log is clean now, the floor still holds.
    let (store, report) = open(&fs, 1000, false).unwrap();
    assert_eq!(report.tail_cut, None, "{report}");
    assert_eq!(report.version_floor, Some(highest), "{report}");
    assert_eq!(store.get(b"after").unwrap().unwrap(), &b"1"[..]);
    let w = store.put(b"after2", b"2").unwrap().get();
    assert!(w > v && w > highest, "{w}");
    store.shutdown().unwrap();
}

/// (c) When the dropped bytes are the only place the highest versions were
/// (the cut removes a whole later segment and the fresh one the last start
/// made), the floor still holds after a third restart that has no
/// segment from before the cut left.
#[test]
fn the_version_floor_holds_when_the_discarded_segments_were_all_there_was() {
    let fs = FaultyStorage::new(4);
    let (segs, highest) = three_segments(&fs);
    // The first segment's header: nothing of the log is kept.
    let mut bytes = fs.file(&segs[0]).unwrap();
    bytes[3] ^= 1;
    fs.put_file(&segs[0], bytes);
    let why = refused(open(&fs, 1000, false));
    assert!(why.contains("offset 0:"), "{why}");
    let (store, report) = open(&fs, 1000, true).unwrap();
    assert_eq!(store.range(&Range::all()).unwrap().len(), 0, "{report}");
    assert_eq!(report.discarded_segments.len(), 3, "{report}");
    let v = store.put(b"k", b"v").unwrap().get();
    assert!(v > highest, "{v} <= {highest}");
    store.shutdown().unwrap();
    drop(store);
    for _ in 0..2 {
        let (store, report) = open(&fs, 1000, false).unwrap();
        assert_eq!(report.tail_cut, None, "{report}");
        let w = store.put(b"k", b"w").unwrap().get();
        assert!(w > v, "{w} <= {v}");
        store.shutdown().unwrap();
    }
}

/// `combkv check --repair`'s engine side: the same cut, offline; then the
/// store opens without the flag.
#[test]
fn repair_cuts_offline_what_recovery_refuses() {
    let fs = FaultyStorage::new(5);
    let (segs, highest) = three_segments(&fs);
    let offsets = record_offsets(&fs.file(&segs[1]).unwrap());
    let bad = offsets[1];
    flip(&fs, &segs[1], bad);
    refused(open(&fs, 1000, false));
    let rep = combkv::durable::repair_with(&fs, Path::new(DIR)).unwrap();
    let cut = rep.cut.clone().expect("a cut");
    assert!(cut.corrupt && cut.offset == bad as u64, "{rep}");
    assert_eq!(rep.version_floor, Some(highest), "{rep}");
    let text = rep.to_string();
    assert!(text.contains(&name(&segs[1])) && text.contains(&format!("offset {bad}")));
    assert!(text.contains("version floor"), "{text}");
    // Nothing more to do.
    let again = combkv::durable::repair_with(&fs, Path::new(DIR)).unwrap();
    assert_eq!(again.cut, None, "{again}");
    let (store, report) = open(&fs, 1000, false).unwrap();
    assert_eq!(report.tail_cut, None, "{report}");
    assert!(store.put(b"x", b"y").unwrap().get() > highest);
}

/// A crash at any sync point of a requested cut (floor file, copy,
/// renames, truncation, the fresh segment) leaves a directory that the next
/// start cuts again or finds cut, and a write after it still never reuses
/// a dropped version.
#[test]
fn a_crash_during_a_requested_cut_never_reuses_a_version() {
    let damaged = |seed| {
        let fs = FaultyStorage::new(seed);
        let (segs, highest) = three_segments(&fs);
        let offsets = record_offsets(&fs.file(&segs[1]).unwrap());
        flip(&fs, &segs[1], offsets[offsets.len() / 2]);
        (fs, highest)
    };
    let total = {
        let (fs, _) = damaged(6);
        let before = fs.syncs();
        let (store, _) = open(&fs, 1000, true).unwrap();
        drop(store);
        fs.syncs() - before
    };
    assert!(total >= 5, "{total} sync points");
    for k in 1..=total {
        let (fs, highest) = damaged(6);
        fs.crash_at_sync(k);
        if let Ok((store, _)) = open(&fs, 1000, true) {
            drop(store);
        }
        if !fs.has_crashed() {
            fs.crash();
        }
        fs.restart();
        let (store, report) =
            open(&fs, 1000, true).unwrap_or_else(|e| panic!("crash at sync {k} of the cut: {e}"));
        let v = store.put(b"after", b"1").unwrap().get();
        assert!(
            v > highest,
            "crash at sync {k}: {v} <= {highest} ({report})"
        );
    }
}

/// (d) A genuine torn tail is still cut automatically, with every earlier
/// write: a truncated final record, a final record of garbage, and a final
/// record cut short followed by zeros (what a crash on a file system that
/// extends the file before the data lands can leave).
#[test]
fn a_torn_tail_is_still_cut_automatically() {
    type Tear = fn(&mut Vec<u8>, usize);
    let tears: [(&str, Tear); 4] = [
        ("truncated", |b, last| b.truncate(last + 5)),
        ("garbage", |b, last| {
            for (i, x) in b[last + 3..].iter_mut().enumerate() {
                *x = (i as u8).wrapping_mul(151).wrapping_add(7);
            }
        }),
        ("zeros after a partial record", |b, last| {
            b.truncate(last + 11);
            b.extend(std::iter::repeat_n(0u8, 4096));
        }),
        ("a zeroed record", |b, last| {
            b[last..].fill(0);
        }),
    ];
    for (what, tear) in tears {
        let fs = FaultyStorage::new(7);
        fill(&fs, 64 << 20, 100);
        let seg = segments(&fs).remove(0);
        let mut bytes = fs.file(&seg).unwrap();
        let last = *record_offsets(&bytes).last().unwrap();
        tear(&mut bytes, last);
        fs.put_file(&seg, bytes);
        let (store, report) = open(&fs, 64 << 20, false).unwrap_or_else(|e| panic!("{what}: {e}"));
        let cut = report.tail_cut.clone().expect("a cut");
        assert!(!cut.corrupt, "{what}: {report}");
        assert_eq!(cut.offset, last as u64, "{what}: {report}");
        assert_eq!(cut.dropped.records, 0, "{what}: {report}");
        assert_eq!(report.version_floor, None, "{what}: {report}");
        assert_eq!(store.range(&Range::all()).unwrap().len(), 99, "{what}");
        for i in 0..99 {
            assert!(store.get(&key(i)).unwrap().is_some(), "{what}: key {i}");
        }
        assert!(store.get(&key(99)).unwrap().is_none(), "{what}");
    }
}
