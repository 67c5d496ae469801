//! `Op::Txn`: order, reads of the transaction's own writes, refusals,
//! watches, and isolation and atomicity against concurrent writers and
//! readers.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::{Config, Error, Range, Store};

fn set<'a>(key: &'a [u8], value: &'a [u8]) -> Op<'a> {
    Op::Put {
        key,
        value,
        expiry: Expiry::Never,
        flags: Flags::NONE,
        cond: Cond::Any,
        return_old: false,
    }
}

fn incr(key: &[u8]) -> Op<'_> {
    Op::Incr {
        key,
        arith: Arith::Signed(1),
        on_missing: OnMissing::Empty,
        cond: Cond::Any,
        expiry: Expiry::Keep,
    }
}

fn read<'a>(keys: &'a [&'a [u8]]) -> Op<'a> {
    Op::Read {
        keys: Cow::Borrowed(keys),
    }
}

fn txn<'a>(watch: Vec<Watch<'a>>, ops: Vec<Op<'a>>) -> Op<'a> {
    Op::Txn {
        watch: Cow::Owned(watch),
        ops: Cow::Owned(ops),
    }
}

fn results(o: Outcome) -> Vec<Result<Outcome, Error>> {
    match o {
        Outcome::Txn { results: Some(r) } => r,
        other => panic!("not an applied transaction: {other:?}"),
    }
}

fn read_values(r: &Result<Outcome, Error>) -> Vec<Option<Vec<u8>>> {
    match r {
        Ok(Outcome::Read { items }) => items
            .iter()
            .map(|it| it.as_ref().map(|it| it.value.to_vec()))
            .collect(),
        other => panic!("not a read: {other:?}"),
    }
}

#[test]
fn a_transaction_applies_in_order_and_reads_its_own_writes() {
    let s = Store::new(Config::default()).unwrap();
    s.put(b"a", b"old").unwrap();
    let out = s
        .apply(&txn(
            vec![],
            vec![
                read(&[b"a", b"b"]),
                set(b"a", b"new"),
                set(b"b", b"x"),
                incr(b"n"),
                incr(b"n"),
                read(&[b"a", b"b", b"n"]),
            ],
        ))
        .unwrap();
    let r = results(out);
    assert_eq!(r.len(), 6);
    assert_eq!(read_values(&r[0]), [Some(b"old".to_vec()), None]);
    assert!(matches!(
        r[4],
        Ok(Outcome::Incr {
            number: Number::Signed(2),
            ..
        })
    ));
    assert_eq!(
        read_values(&r[5]),
        [
            Some(b"new".to_vec()),
            Some(b"x".to_vec()),
            Some(b"2".to_vec())
        ]
    );
    assert_eq!(s.get(b"a").unwrap().unwrap().as_ref(), b"new");
    assert_eq!(s.get(b"n").unwrap().unwrap().as_ref(), b"2");
}

#[test]
fn a_refused_op_reports_its_error_and_the_others_apply() {
    let s = Store::new(Config::default()).unwrap();
    s.put(b"text", b"abc").unwrap();
    let out = s
        .apply(&txn(
            vec![],
            vec![
                set(b"a", b"1"),
                incr(b"text"),
                Op::Clear,
                set(b"", b"empty key"),
                set(b"b", b"2"),
            ],
        ))
        .unwrap();
    let r = results(out);
    assert!(r[0].is_ok());
    assert_eq!(r[1], Err(Error::NotAnInteger));
    assert!(matches!(r[2], Err(Error::NotInTransaction(_))));
    assert_eq!(r[3], Err(Error::KeyEmpty));
    assert!(r[4].is_ok());
    assert_eq!(s.get(b"a").unwrap().unwrap().as_ref(), b"1");
    assert_eq!(s.get(b"b").unwrap().unwrap().as_ref(), b"2");
    assert_eq!(s.get(b"text").unwrap().unwrap().as_ref(), b"abc");
}

/// MSETNX inside MULTI: an inner transaction whose watches decide within
/// the outer one, seeing the outer one's earlier writes.
#[test]
fn a_transaction_inside_one_checks_its_watches_at_its_place() {
    let s = Store::new(Config::default()).unwrap();
    let absent = |key| Watch { key, version: None };
    let out = s
        .apply(&txn(
            vec![],
            vec![
                set(b"x", b"1"),
                txn(vec![absent(b"x")], vec![set(b"y", b"no")]),
                txn(vec![absent(b"z")], vec![set(b"z", b"yes")]),
            ],
        ))
        .unwrap();
    let r = results(out);
    assert_eq!(r[1], Ok(Outcome::Txn { results: None }));
    assert!(matches!(&r[2], Ok(Outcome::Txn { results: Some(inner) }) if inner.len() == 1));
    assert_eq!(s.get(b"y").unwrap(), None);
    assert_eq!(s.get(b"z").unwrap().unwrap().as_ref(), b"yes");
}

#[test]
fn a_read_op_outside_a_transaction_is_refused() {
    let s = Store::new(Config::default()).unwrap();
    assert!(matches!(
        s.apply(&read(&[b"a"])),
        Err(Error::NotInTransaction(_))
    ));
}

#[test]
fn a_changed_watched_key_aborts_the_whole_transaction() {
    let s = Store::new(Config::default()).unwrap();
    let v1 = s.put(b"w", b"1").unwrap();
    let watch = |version| {
        vec![
            Watch { key: b"w", version },
            Watch {
                key: b"absent",
                version: None,
            },
        ]
    };
    // Unchanged: applied.
    let out = s
        .apply(&txn(watch(Some(v1)), vec![set(b"t", b"1")]))
        .unwrap();
    assert_eq!(results(out).len(), 1);
    // Written again (even with the same value): aborted, nothing applied.
    s.put(b"w", b"1").unwrap();
    let out = s
        .apply(&txn(watch(Some(v1)), vec![set(b"t", b"2")]))
        .unwrap();
    assert_eq!(out, Outcome::Txn { results: None });
    assert_eq!(s.get(b"t").unwrap().unwrap().as_ref(), b"1");
    // A watched absent key that appeared: aborted.
    let v2 = s.get_item(b"w").unwrap().unwrap().version;
    s.put(b"absent", b"now here").unwrap();
    let out = s
        .apply(&txn(watch(Some(v2)), vec![set(b"t", b"3")]))
        .unwrap();
    assert_eq!(out, Outcome::Txn { results: None });
    // Deleted: aborted too.
    let out = s
        .apply(&txn(
            vec![Watch {
                key: b"w",
                version: None,
            }],
            vec![set(b"t", b"4")],
        ))
        .unwrap();
    assert_eq!(out, Outcome::Txn { results: None });
    assert_eq!(s.get(b"t").unwrap().unwrap().as_ref(), b"1");
}

/// Read-modify-write through WATCH: every increment lands exactly once
/// however the threads interleave, which needs the watch check and the
/// write to be one isolated step.
#[test]
fn watched_read_modify_write_loses_no_update() {
    let s = Arc::new(Store::new(Config::default()).unwrap());
    const THREADS: usize = 8;
    const EACH: usize = 2000;
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let mut retries = 0;
                for _ in 0..EACH {
                    loop {
                        let cur = s.get_item(b"counter").unwrap();
                        let n: u64 = cur.as_ref().map_or(0, |it| {
                            std::str::from_utf8(&it.value).unwrap().parse().unwrap()
                        });
                        let next = (n + 1).to_string();
                        let op = txn(
                            vec![Watch {
                                key: b"counter",
                                version: cur.map(|it| it.version),
                            }],
                            vec![set(b"counter", next.as_bytes())],
                        );
                        match s.apply(&op).unwrap() {
                            Outcome::Txn { results: Some(_) } => break,
                            Outcome::Txn { results: None } => retries += 1,
                            other => panic!("{other:?}"),
                        }
                    }
                }
                retries
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let total = (THREADS * EACH).to_string();
    assert_eq!(
        s.get(b"counter").unwrap().unwrap().as_ref(),
        total.as_bytes()
    );
}

/// Transactions move one unit between two keys, read both, and write
/// their sum as a third, while plain writers hammer a fourth key and
/// scanners read everything: every scan sees the three keys agree (no
/// partial transaction), and every transaction read a consistent pair.
#[test]
fn no_reader_sees_part_of_a_transaction_and_no_writer_gets_between_its_ops() {
    let s = Arc::new(Store::new(Config::default()).unwrap());
    s.put(b"a", b"0").unwrap();
    s.put(b"b", b"0").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let scanners: Vec<_> = (0..2)
        .map(|_| {
            let (s, stop) = (Arc::clone(&s), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut scans = 0;
                while !stop.load(Ordering::Relaxed) {
                    let mut seen = std::collections::BTreeMap::new();
                    s.scan(&Range::all(), |it| {
                        seen.insert(it.key.to_vec(), it.value.to_vec());
                        true
                    })
                    .unwrap();
                    let num = |k: &[u8]| -> i64 {
                        seen.get(k)
                            .map_or(0, |v| std::str::from_utf8(v).unwrap().parse().unwrap())
                    };
                    assert_eq!(num(b"a"), num(b"b"), "a scan saw part of a transaction");
                    scans += 1;
                }
                scans
            })
        })
        .collect();
    let noise = {
        let (s, stop) = (Arc::clone(&s), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                s.put(b"noise", i.to_string().as_bytes()).unwrap();
                i += 1;
            }
        })
    };
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                for _ in 0..5000 {
                    let out = s
                        .apply(&txn(
                            vec![],
                            vec![incr(b"a"), read(&[b"a", b"b"]), incr(b"b")],
                        ))
                        .unwrap();
                    let r = results(out);
                    let pair = read_values(&r[1]);
                    let a: i64 = std::str::from_utf8(pair[0].as_ref().unwrap())
                        .unwrap()
                        .parse()
                        .unwrap();
                    let b: i64 = std::str::from_utf8(pair[1].as_ref().unwrap())
                        .unwrap()
                        .parse()
                        .unwrap();
                    assert_eq!(a, b + 1, "another write got between a transaction's ops");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    noise.join().unwrap();
    for sc in scanners {
        assert!(sc.join().unwrap() > 0);
    }
    assert_eq!(s.get(b"a").unwrap().unwrap().as_ref(), b"20000");
    assert_eq!(s.get(b"b").unwrap().unwrap().as_ref(), b"20000");
}

fn mv<'a>(from: &'a [u8], to: &'a [u8], replace: bool, keep_source: bool) -> Op<'a> {
    Op::Move {
        from,
        to,
        replace,
        keep_source,
    }
}

#[test]
fn move_renames_and_copies_with_expiry_and_flags() {
    let s = Store::new(Config::default()).unwrap();
    let at = crate::now_ms() + 100_000;
    s.apply(&Op::Put {
        key: b"src",
        value: b"v",
        expiry: Expiry::AtMs(at),
        flags: Flags::Set(7),
        cond: Cond::Any,
        return_old: false,
    })
    .unwrap();
    let status = |op: &Op<'_>| s.apply(op).unwrap().status();
    // COPY: the source stays; without REPLACE an existing target stays.
    assert_eq!(status(&mv(b"src", b"copy", false, true)), Status::Done);
    assert_eq!(status(&mv(b"src", b"copy", false, true)), Status::Present);
    let copy = s.get_item(b"copy").unwrap().unwrap();
    assert_eq!(
        (copy.value.as_ref(), copy.expires_at_ms, copy.flags),
        (&b"v"[..], Some(at), 7)
    );
    // RENAME over an existing key; RENAMENX refused by one.
    s.put(b"dst", b"old").unwrap();
    assert_eq!(status(&mv(b"src", b"dst", false, false)), Status::Present);
    assert_eq!(status(&mv(b"src", b"dst", true, false)), Status::Done);
    assert_eq!(s.get(b"src").unwrap(), None);
    let moved = s.get_item(b"dst").unwrap().unwrap();
    assert_eq!(
        (moved.value.as_ref(), moved.expires_at_ms, moved.flags),
        (&b"v"[..], Some(at), 7)
    );
    // A missing source; the same key.
    assert_eq!(status(&mv(b"nothing", b"x", true, false)), Status::Missing);
    assert_eq!(status(&mv(b"dst", b"dst", true, false)), Status::Done);
    assert_eq!(status(&mv(b"dst", b"dst", false, false)), Status::Present);
    assert_eq!(s.get(b"dst").unwrap().unwrap().as_ref(), b"v");
    // Inside a transaction, after the transaction's own write.
    let out = s
        .apply(&txn(
            vec![],
            vec![
                set(b"a", b"fresh"),
                mv(b"a", b"b", true, false),
                read(&[b"a", b"b"]),
            ],
        ))
        .unwrap();
    let r = results(out);
    assert_eq!(
        r[1],
        Ok(Outcome::Move {
            status: Status::Done
        })
    );
    assert_eq!(read_values(&r[2]), [None, Some(b"fresh".to_vec())]);
}

#[test]
fn checks_gate_the_whole_transaction() {
    use std::ops::Bound;
    let s = Store::new(Config::default()).unwrap();
    let va = s.put(b"a", b"1").unwrap().get();
    s.put(b"b", b"2").unwrap();
    let vc = s.put(b"c", b"3").unwrap().get();
    s.put(b"x", b"outside").unwrap();
    let range = |op, n| {
        Op::Check(Check::Count {
            start: Bound::Included(&b"a"[..]),
            end: Bound::Excluded(&b"d"[..]),
            op,
            n,
        })
    };
    let newest = |op, version| {
        Op::Check(Check::MaxVersion {
            start: Bound::Included(&b"a"[..]),
            end: Bound::Excluded(&b"d"[..]),
            op,
            version,
        })
    };
    let version = |key, op, version| Op::Check(Check::Version { key, op, version });
    let value = |key, op, value| Op::Check(Check::Value { key, op, value });
    let applied = |checks: Vec<Op<'static>>| {
        let mut ops = checks;
        ops.push(incr(b"n"));
        match s.apply(&txn(vec![], ops)).unwrap() {
            Outcome::Txn { results: Some(r) } => {
                assert!(r[..r.len() - 1].iter().all(|c| *c == Ok(Outcome::Check)));
                true
            }
            Outcome::Txn { results: None } => false,
            other => panic!("{other:?}"),
        }
    };
    assert!(applied(vec![
        version(b"a", CmpOp::Eq, va),
        version(b"nokey", CmpOp::Eq, 0),
        value(b"b", CmpOp::Eq, b"2"),
        value(b"b", CmpOp::Lt, b"3"),
        range(CmpOp::Eq, 3),
        newest(CmpOp::Eq, vc),
        newest(CmpOp::Le, vc),
    ]));
    assert_eq!(s.get(b"n").unwrap().unwrap().as_ref(), b"1");
    for failing in [
        version(b"a", CmpOp::Gt, va),
        version(b"nokey", CmpOp::Ne, 0),
        value(b"nokey", CmpOp::Ne, b"anything"),
        value(b"b", CmpOp::Ge, b"3"),
        range(CmpOp::Gt, 3),
        newest(CmpOp::Lt, vc),
    ] {
        assert!(
            !applied(vec![version(b"a", CmpOp::Eq, va), failing.clone()]),
            "{failing:?}"
        );
    }
    assert_eq!(
        s.get(b"n").unwrap().unwrap().as_ref(),
        b"1",
        "a failed check applied ops"
    );
    // A write in the range since: MaxVersion sees it; a delete: Count does.
    s.put(b"b", b"22").unwrap();
    assert!(!applied(vec![newest(CmpOp::Le, vc)]));
    s.delete(b"b").unwrap();
    assert!(!applied(vec![range(CmpOp::Eq, 3)]));
    // A check after another op is refused; a check alone is refused.
    let out = s
        .apply(&txn(vec![], vec![incr(b"n"), version(b"a", CmpOp::Eq, va)]))
        .unwrap();
    assert!(matches!(&results(out)[1], Err(Error::NotInTransaction(_))));
    assert!(matches!(
        s.apply(&version(b"a", CmpOp::Eq, va)),
        Err(Error::NotInTransaction(_))
    ));
}

#[test]
fn a_scan_inside_a_transaction_sees_its_earlier_writes() {
    let s = Store::new(Config::default()).unwrap();
    s.put(b"k1", b"one").unwrap();
    s.put(b"k3", b"three").unwrap();
    let scan = |range: Range, what, max_bytes| Op::Scan {
        range: Cow::Owned(range),
        what,
        max_bytes,
    };
    let all = Range::all();
    let out = s
        .apply(&txn(
            vec![],
            vec![
                set(b"k2", b"two"),
                Op::Delete {
                    key: b"k3",
                    cond: Cond::Any,
                    return_old: false,
                },
                scan(all.clone(), ScanWhat::Items, u64::MAX),
                scan(
                    all.clone().reversed().with_limit(1),
                    ScanWhat::Keys,
                    u64::MAX,
                ),
                scan(all.clone(), ScanWhat::Count, 0),
                // Stops once past the budget, the item that passes it kept.
                scan(all.clone(), ScanWhat::Items, 4),
            ],
        ))
        .unwrap();
    let r = results(out);
    let items = |r: &Result<Outcome, Error>| match r {
        Ok(Outcome::Scan { items, count }) => (
            items
                .iter()
                .map(|it| (it.key.to_vec(), it.value.to_vec()))
                .collect::<Vec<_>>(),
            *count,
        ),
        other => panic!("not a scan: {other:?}"),
    };
    let kv = |k: &[u8], v: &[u8]| (k.to_vec(), v.to_vec());
    assert_eq!(
        items(&r[2]),
        (vec![kv(b"k1", b"one"), kv(b"k2", b"two")], 2)
    );
    assert_eq!(items(&r[3]), (vec![kv(b"k2", b"")], 1));
    assert_eq!(items(&r[4]), (vec![], 2));
    assert_eq!(items(&r[5]), (vec![kv(b"k1", b"one")], 1));
    // Only inside a transaction.
    assert!(matches!(
        s.apply(&scan(all, ScanWhat::Count, 0)),
        Err(Error::NotInTransaction(_))
    ));
}
