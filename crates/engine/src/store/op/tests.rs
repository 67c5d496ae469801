use super::*;
use crate::{Config, Error, Store};

fn put(key: &[u8], value: &[u8], cond: Cond) -> Op<'static> {
    // Leaked so the op may borrow them for 'static in a test.
    let key: &'static [u8] = Box::leak(key.to_vec().into_boxed_slice());
    let value: &'static [u8] = Box::leak(value.to_vec().into_boxed_slice());
    Op::Put {
        key,
        value,
        expiry: Expiry::Never,
        flags: Flags::Set(0),
        cond,
        return_old: true,
    }
}

#[test]
fn conditions_decide_put_and_delete() {
    let s = Store::new(Config::default()).unwrap();
    let r = s.apply(&put(b"k", b"1", Cond::Present)).unwrap();
    assert_eq!(r.status(), Status::Missing);
    let r = s.apply(&put(b"k", b"1", Cond::Absent)).unwrap();
    assert_eq!(r.status(), Status::Done);
    let v1 = r.version().unwrap();
    let r = s.apply(&put(b"k", b"2", Cond::Absent)).unwrap();
    assert_eq!(r.status(), Status::Present);
    let r = s
        .apply(&put(b"k", b"2", Cond::Version(Version(v1.0 + 100))))
        .unwrap();
    assert_eq!(r.status(), Status::Mismatch);
    let r = s.apply(&put(b"k", b"2", Cond::Version(v1))).unwrap();
    let Outcome::Put { status, old, .. } = r else {
        panic!("{r:?}")
    };
    assert_eq!(status, Status::Done);
    assert_eq!(old.unwrap().value.as_ref(), b"1");
    assert_eq!(s.get(b"k").unwrap().unwrap().as_ref(), b"2");
    let del = Op::Delete {
        key: b"k",
        cond: Cond::Any,
        return_old: true,
    };
    let r = s.apply(&del).unwrap();
    assert!(
        matches!(&r, Outcome::Delete { status: Status::Done, old: Some(o), .. } if o.value.as_ref() == b"2")
    );
    assert_eq!(s.apply(&del).unwrap().status(), Status::Missing);
}

#[test]
fn incr_follows_each_protocols_rules() {
    let s = Store::new(Config::default()).unwrap();
    let incr = |arith, on_missing| Op::Incr {
        key: b"n",
        arith,
        on_missing,
        cond: Cond::Any,
        expiry: Expiry::Keep,
    };
    let r = s.apply(&incr(Arith::Signed(5), OnMissing::Empty)).unwrap();
    assert!(matches!(
        r,
        Outcome::Incr {
            number: Number::Signed(5),
            ..
        }
    ));
    s.put(b"n", &i64::MAX.to_string().into_bytes()).unwrap();
    let e = s.apply(&incr(Arith::Signed(1), OnMissing::Empty));
    assert_eq!(e.unwrap_err(), Error::Overflow);
    s.put(b"n", b"+1").unwrap();
    let e = s.apply(&incr(Arith::Signed(1), OnMissing::Empty));
    assert_eq!(e.unwrap_err(), Error::NotAnInteger, "Redis refuses '+1'");
    let down = Arith::Unsigned {
        delta: 5,
        decrement: true,
    };
    s.put(b"n", b" 3 ").unwrap();
    let r = s.apply(&incr(down, OnMissing::Fail)).unwrap();
    assert!(matches!(
        r,
        Outcome::Incr {
            number: Number::Unsigned(0),
            ..
        }
    ));
    s.put(b"n", &u64::MAX.to_string().into_bytes()).unwrap();
    let up = Arith::Unsigned {
        delta: 2,
        decrement: false,
    };
    let r = s.apply(&incr(up, OnMissing::Fail)).unwrap();
    assert!(matches!(
        r,
        Outcome::Incr {
            number: Number::Unsigned(1),
            ..
        }
    ));
    s.delete(b"n").unwrap();
    let r = s.apply(&incr(up, OnMissing::Fail)).unwrap();
    assert_eq!(r.status(), Status::Missing);
    let create = OnMissing::Create {
        value: b"10",
        expiry: Expiry::Never,
        flags: 9,
    };
    let r = s.apply(&incr(up, create)).unwrap();
    assert!(matches!(
        r,
        Outcome::Incr {
            number: Number::Unsigned(10),
            created: true,
            ..
        }
    ));
}

#[test]
fn expire_conditions_and_past_deadlines() {
    let s = Store::new(Config::default()).unwrap();
    s.put(b"k", b"v").unwrap();
    let at = crate::now_ms() + 60_000;
    let expire = |expiry, when, past| Op::Expire {
        key: b"k",
        expiry,
        when,
        past,
        return_item: true,
    };
    let xx = ExpireWhen {
        xx: true,
        ..ExpireWhen::default()
    };
    let r = s.apply(&expire(Expiry::AtMs(at), xx, false)).unwrap();
    assert_eq!(r.status(), Status::Mismatch, "XX needs an expiry");
    let r = s
        .apply(&expire(Expiry::AtMs(at), ExpireWhen::default(), false))
        .unwrap();
    let Outcome::Expire { item, version, .. } = r else {
        panic!()
    };
    let item = item.unwrap();
    assert_eq!(
        (item.expires_at_ms, Some(item.version)),
        (Some(at), version)
    );
    let gt = ExpireWhen {
        gt: true,
        ..ExpireWhen::default()
    };
    let r = s.apply(&expire(Expiry::AtMs(at - 1), gt, false)).unwrap();
    assert_eq!(r.status(), Status::Mismatch);
    let r = s.apply(&expire(Expiry::Never, gt, false)).unwrap();
    assert_eq!(r.status(), Status::Done, "no expiry is later than any");
    let r = s
        .apply(&expire(Expiry::AtMs(1), ExpireWhen::default(), true))
        .unwrap();
    assert_eq!(r.status(), Status::Done);
    assert_eq!(s.get(b"k").unwrap(), None, "a past deadline deletes");
}

#[test]
fn append_creates_or_fails_on_a_missing_key() {
    let s = Store::new(Config::default()).unwrap();
    let app = |front, on_missing| Op::Append {
        key: b"a",
        value: b"xy",
        front,
        on_missing,
        cond: Cond::Any,
    };
    assert_eq!(
        s.apply(&app(false, OnMissing::Fail)).unwrap().status(),
        Status::Missing
    );
    let r = s.apply(&app(false, OnMissing::Empty)).unwrap();
    assert!(matches!(r, Outcome::Append { len: 2, .. }));
    s.apply(&app(true, OnMissing::Fail)).unwrap();
    assert_eq!(s.get(b"a").unwrap().unwrap().as_ref(), b"xyxy");
    let small = Store::new(Config {
        max_value_len: 3,
        ..Config::default()
    })
    .unwrap();
    let e = small.apply(&app(false, OnMissing::Empty)).unwrap();
    assert!(matches!(e, Outcome::Append { len: 2, .. }));
    let e = small.apply(&app(false, OnMissing::Empty)).unwrap_err();
    assert!(matches!(e, Error::ValueTooLarge { len: 4, max: 3 }));
}

#[test]
fn number_parsers_follow_redis_and_memcached() {
    for (s, want) in [
        (&b"0"[..], Some(0)),
        (b"-1", Some(-1)),
        (b"+1", None),
        (b"01", None),
        (b"-0", None),
        (b" 1", None),
        (b"9223372036854775807", Some(i64::MAX)),
        (b"-9223372036854775808", Some(i64::MIN)),
        (b"9223372036854775808", None),
    ] {
        assert_eq!(parse_signed(s), want, "{:?}", String::from_utf8_lossy(s));
    }
    for (s, want) in [
        (&b"0"[..], Some(0)),
        (b" 12 ", Some(12)),
        (b"+7", Some(7)),
        (b"-1", None),
        (b"1x", None),
        (b"", None),
        (b"18446744073709551615", Some(u64::MAX)),
        (b"18446744073709551616", None),
    ] {
        assert_eq!(parse_unsigned(s), want, "{:?}", String::from_utf8_lossy(s));
    }
}

#[test]
fn a_missing_key_is_created_whatever_the_condition_says() {
    let s = Store::new(Config::default()).unwrap();
    let op = Op::Append {
        key: b"m",
        value: b"tail",
        front: false,
        on_missing: OnMissing::Create {
            value: b"first",
            expiry: Expiry::Never,
            flags: 7,
        },
        cond: Cond::Version(Version(12345)),
    };
    assert_eq!(s.apply(&op).unwrap().status(), Status::Done);
    let it = s.get_item(b"m").unwrap().unwrap();
    assert_eq!((it.value.as_ref(), it.flags), (&b"first"[..], 7));
    // Present now: the condition applies, and fails.
    assert_eq!(s.apply(&op).unwrap().status(), Status::Mismatch);
}

#[test]
fn a_conditional_put_refuses_an_oversized_value_only_when_it_would_write() {
    let s = Store::new(Config {
        max_value_len: 4,
        ..Config::default()
    })
    .unwrap();
    s.put(b"k", b"v").unwrap();
    let nx = Op::Put {
        key: b"k",
        value: b"too long",
        expiry: Expiry::Never,
        flags: Flags::NONE,
        cond: Cond::Absent,
        return_old: true,
    };
    let r = s.apply(&nx).unwrap();
    assert_eq!(r.status(), Status::Present, "the condition fails first");
    let xx = Op::Put {
        key: b"k",
        value: b"too long",
        expiry: Expiry::Never,
        flags: Flags::NONE,
        cond: Cond::Present,
        return_old: true,
    };
    assert!(matches!(
        s.apply(&xx).unwrap_err(),
        Error::ValueTooLarge { len: 8, max: 4 }
    ));
    assert_eq!(s.get(b"k").unwrap().unwrap().as_ref(), b"v");
}

#[test]
fn apply_at_judges_expiry_at_the_ops_clock() {
    let s = Store::new(Config::default()).unwrap();
    let put = Op::Put {
        key: b"t",
        value: b"v",
        expiry: Expiry::AtMs(1_000),
        flags: Flags::NONE,
        cond: Cond::Any,
        return_old: false,
    };
    s.apply_at(&put, 500).unwrap();
    let version = s
        .apply_at(
            &Op::Expire {
                key: b"t",
                expiry: Expiry::AtMs(2_000),
                when: ExpireWhen::default(),
                past: false,
                return_item: false,
            },
            900,
        )
        .unwrap()
        .version()
        .expect("live at 900: its expiry changes");
    // At 2,500 it has expired: absent for an insert, and reaped.
    let insert = Op::Put {
        key: b"t",
        value: b"v",
        expiry: Expiry::AtMs(1_000),
        flags: Flags::NONE,
        cond: Cond::Absent,
        return_old: false,
    };
    let reap = Op::Reap { key: b"t", version };
    assert_eq!(s.apply_at(&reap, 1_999).unwrap().status(), Status::Mismatch);
    assert_eq!(
        s.apply_at(
            &Op::Reap {
                key: b"t",
                version: Version(version.0 + 1)
            },
            2_500
        )
        .unwrap()
        .status(),
        Status::Mismatch
    );
    assert_eq!(s.apply_at(&reap, 2_500).unwrap().status(), Status::Done);
    assert_eq!(s.apply_at(&reap, 2_500).unwrap().status(), Status::Missing);
    assert_eq!(s.apply_at(&insert, 2_500).unwrap().status(), Status::Done);
    // By the wall clock it has long expired: the leader's sweep finds it.
    let items = s.expired_items(100);
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].0, b"t");
}

#[test]
fn set_range_and_set_bit_patch_values_in_place() {
    let s = Store::new(Config::default()).unwrap();
    let len = |o: Outcome| match o {
        Outcome::Append { len, status, .. } => (status, len),
        other => panic!("{other:?}"),
    };
    let range = |key, offset, value| Op::SetRange { key, offset, value };
    // Absent and empty: nothing written.
    assert_eq!(
        len(s.apply(&range(b"r", 5, b"")).unwrap()),
        (Status::Missing, 0)
    );
    assert_eq!(s.get(b"r").unwrap(), None);
    // Absent: zero-padded.
    assert_eq!(
        len(s.apply(&range(b"r", 2, b"ab")).unwrap()),
        (Status::Done, 4)
    );
    assert_eq!(s.get(b"r").unwrap().unwrap().as_ref(), b"\0\0ab");
    // Present: overwritten, grown, its expiry kept.
    let at = crate::now_ms() + 100_000;
    s.expire(b"r", Expiry::AtMs(at)).unwrap();
    assert_eq!(
        len(s.apply(&range(b"r", 3, b"XYZ")).unwrap()),
        (Status::Done, 6)
    );
    let it = s.get_item(b"r").unwrap().unwrap();
    assert_eq!(
        (it.value.as_ref(), it.expires_at_ms),
        (&b"\0\0aXYZ"[..], Some(at))
    );
    assert_eq!(
        len(s.apply(&range(b"r", 0, b"")).unwrap()),
        (Status::Done, 6)
    );
    // Past the value limit: refused, nothing changed.
    let max = s.max_value_len() as u64;
    assert!(matches!(
        s.apply(&range(b"r", max, b"x")),
        Err(Error::ValueTooLarge { .. })
    ));
    assert!(matches!(
        s.apply(&range(b"r", u64::MAX, b"x")),
        Err(Error::ValueTooLarge { .. })
    ));
    assert_eq!(s.get(b"r").unwrap().unwrap().as_ref(), b"\0\0aXYZ");
    // Bits: bit 0 is the top bit of byte 0.
    let bit = |bit, on| match s.apply(&Op::SetBit { key: b"b", bit, on }).unwrap() {
        Outcome::SetBit { old, .. } => old,
        other => panic!("{other:?}"),
    };
    assert!(!bit(0, true));
    assert!(!bit(9, true));
    assert_eq!(s.get(b"b").unwrap().unwrap().as_ref(), [0x80, 0x40]);
    assert!(bit(0, false));
    assert!(!bit(0, false));
    assert_eq!(s.get(b"b").unwrap().unwrap().as_ref(), [0x00, 0x40]);
    assert!(matches!(
        s.apply(&Op::SetBit {
            key: b"b",
            bit: max * 8,
            on: true
        }),
        Err(Error::ValueTooLarge { .. })
    ));
}

#[test]
fn incr_float_adds_exactly_and_keeps_expiry_and_flags() {
    let s = Store::new(Config::default()).unwrap();
    let incr = |key: &'static [u8], by: &'static [u8]| {
        s.apply(&Op::IncrFloat { key, by }).map(|o| match o {
            Outcome::IncrFloat { value, .. } => String::from_utf8(value).unwrap(),
            other => panic!("{other:?}"),
        })
    };
    assert_eq!(incr(b"f", b"10.5").unwrap(), "10.5");
    assert_eq!(incr(b"f", b"0.1").unwrap(), "10.6");
    assert_eq!(incr(b"f", b"-5").unwrap(), "5.6");
    let at = 4_000_000_000_000;
    s.apply(&Op::Put {
        key: b"e",
        value: b"1",
        expiry: Expiry::AtMs(at),
        flags: Flags::Set(7),
        cond: Cond::Any,
        return_old: false,
    })
    .unwrap();
    assert_eq!(incr(b"e", b"1.5e0").unwrap(), "2.5");
    let item = s.get_item(b"e").unwrap().unwrap();
    assert_eq!((item.expires_at_ms, item.flags), (Some(at), 7));
    // Refusals change nothing.
    s.put(b"t", b"one").unwrap();
    assert_eq!(incr(b"t", b"1"), Err(Error::NotAFloat));
    assert_eq!(incr(b"f", b"x"), Err(Error::NotAFloat));
    assert_eq!(incr(b"f", b"inf"), Err(Error::NotFinite));
    assert_eq!(incr(b"n", b"nan"), Err(Error::NotAFloat));
    assert_eq!(s.get(b"t").unwrap().unwrap().as_ref(), b"one");
    assert_eq!(s.get(b"f").unwrap().unwrap().as_ref(), b"5.6");
    assert_eq!(s.get(b"n").unwrap(), None);
}

/// What a node above its memory limit refuses: the writes Redis marks
/// `denyoom` (COPY among them), a transaction holding one, never a delete,
/// an expiry, a RENAME or a read.
#[test]
fn ops_that_may_add_data_are_the_denyoom_writes() {
    let del = Op::Delete {
        key: b"k",
        cond: Cond::Any,
        return_old: false,
    };
    let moved = |keep_source| Op::Move {
        from: b"a",
        to: b"b",
        replace: true,
        keep_source,
    };
    let atomic = |put: bool| {
        let w = if put {
            AtomicWrite::Put {
                key: b"k",
                value: b"v",
                expiry: Expiry::Never,
            }
        } else {
            AtomicWrite::Delete { key: b"k" }
        };
        Op::Atomic(Cow::Owned(vec![AtomicWrite::Delete { key: b"j" }, w]))
    };
    let txn = |ops: Vec<Op<'static>>| Op::Txn {
        watch: Cow::Owned(vec![]),
        ops: Cow::Owned(ops),
    };
    let adds = [
        put(b"k", b"v", Cond::Any),
        Op::Append {
            key: b"k",
            value: b"v",
            front: false,
            on_missing: OnMissing::Empty,
            cond: Cond::Any,
        },
        Op::Incr {
            key: b"k",
            arith: Arith::Signed(1),
            on_missing: OnMissing::Empty,
            cond: Cond::Any,
            expiry: Expiry::Keep,
        },
        Op::SetRange {
            key: b"k",
            offset: 3,
            value: b"v",
        },
        Op::SetBit {
            key: b"k",
            bit: 7,
            on: true,
        },
        Op::IncrFloat {
            key: b"k",
            by: b"1.5",
        },
        moved(true),
        atomic(true),
        txn(vec![del.clone(), put(b"k", b"v", Cond::Any)]),
    ];
    for op in &adds {
        assert!(op.may_add_data(), "{op:?}");
    }
    let adds_nothing = [
        del.clone(),
        moved(false),
        atomic(false),
        Op::Clear,
        Op::Reap {
            key: b"k",
            version: Version(1),
        },
        Op::Expire {
            key: b"k",
            expiry: Expiry::Never,
            when: ExpireWhen::default(),
            past: false,
            return_item: false,
        },
        Op::Read {
            keys: Cow::Owned(vec![&b"k"[..]]),
        },
        txn(vec![del.clone(), moved(false)]),
    ];
    for op in &adds_nothing {
        assert!(!op.may_add_data(), "{op:?}");
    }
}
