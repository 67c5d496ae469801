use super::*;

const LIM: Limits = Limits {
    max_key_len: 250,
    max_value_len: 1024,
    max_request_bytes: 1 << 20,
    max_body: usize::MAX,
};

/// A request packet: header, extras, key, value.
fn packet_of(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let body = extras.len() + key.len() + value.len();
    let mut p = vec![REQUEST_MAGIC, opcode];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.push(extras.len() as u8);
    p.extend_from_slice(&[0, 0, 0]);
    p.extend_from_slice(&(body as u32).to_be_bytes());
    p.extend_from_slice(&0xdead_beef_u32.to_be_bytes());
    p.extend_from_slice(&cas.to_be_bytes());
    p.extend_from_slice(extras);
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}

fn parsed(p: &[u8]) -> (BinRequest<'_>, usize) {
    match parse(p, &LIM) {
        BinParsed::Request(r, n) => (r, n),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_set_waits_for_its_whole_body_then_reads_extras_key_value() {
    let mut extras = 7u32.to_be_bytes().to_vec();
    extras.extend_from_slice(&60u32.to_be_bytes());
    let p = packet_of(opcode::SETQ, &extras, b"key", b"value", 42);
    for cut in 0..p.len() {
        assert!(
            matches!(parse(&p[..cut], &LIM), BinParsed::Incomplete),
            "{cut}"
        );
    }
    let (r, n) = parsed(&p);
    assert_eq!(n, p.len());
    assert!(r.quiet);
    assert_eq!(r.head.opaque, 0xdead_beef);
    assert_eq!(
        r.cmd,
        BinCmd::Store {
            cmd: StoreCmd::Set,
            key: b"key",
            flags: 7,
            exptime: 60,
            cas: 42,
            data: b"value",
        }
    );
}

#[test]
fn arithmetic_reads_delta_initial_and_the_no_create_expiry() {
    let mut extras = 5u64.to_be_bytes().to_vec();
    extras.extend_from_slice(&9u64.to_be_bytes());
    extras.extend_from_slice(&u32::MAX.to_be_bytes());
    let p = packet_of(opcode::DECREMENT, &extras, b"n", b"", 0);
    let (r, _) = parsed(&p);
    assert!(!r.quiet);
    assert_eq!(
        r.cmd,
        BinCmd::Arith {
            incr: false,
            key: b"n",
            delta: 5,
            initial: 9,
            exptime: None,
            cas: 0,
        }
    );
}

#[test]
fn quiet_and_key_variants_of_get() {
    for (op, quiet, with_key) in [
        (opcode::GET, false, false),
        (opcode::GETQ, true, false),
        (opcode::GETK, false, true),
        (opcode::GETKQ, true, true),
    ] {
        let p = packet_of(op, &[], b"k", b"", 0);
        let (r, _) = parsed(&p);
        assert_eq!(r.quiet, quiet);
        assert_eq!(
            r.cmd,
            BinCmd::Get {
                key: b"k",
                with_key
            }
        );
    }
}

#[test]
fn a_malformed_header_closes_with_invalid_arguments() {
    // A get with extras, a get without a key, a noop with a body, a set
    // without its extras, and lengths that do not add up.
    let bad = [
        packet_of(opcode::GET, &[0; 4], b"k", b"", 0),
        packet_of(opcode::GET, &[], b"", b"", 0),
        packet_of(opcode::NOOP, &[], b"", b"x", 0),
        packet_of(opcode::SET, &[], b"k", b"v", 0),
        packet_of(opcode::INCREMENT, &[0; 8], b"k", b"", 0),
    ];
    for p in &bad {
        match parse(p, &LIM) {
            BinParsed::Close(Some((_, Status::InvalidArguments))) => {}
            other => panic!("{other:?}"),
        }
    }
    let mut p = packet_of(opcode::GET, &[], b"key", b"", 0);
    p[11] = 2; // body length 2 < key length 3
    assert!(matches!(
        parse(&p, &LIM),
        BinParsed::Close(Some((_, Status::InvalidArguments)))
    ));
    let long = vec![b'k'; MEMCACHED_MAX_KEY + 1];
    assert!(matches!(
        parse(&packet_of(opcode::GET, &[], &long, b"", 0), &LIM),
        BinParsed::Close(Some((_, Status::InvalidArguments)))
    ));
    // Not a request at all: closed without a reply.
    let mut p = packet_of(opcode::NOOP, &[], b"", b"", 0);
    p[0] = 0x81;
    assert!(matches!(parse(&p, &LIM), BinParsed::Close(None)));
}

#[test]
fn an_unknown_opcode_or_a_large_value_is_answered_and_its_body_skipped() {
    let p = packet_of(0x50, &[1, 2], b"k", b"vvv", 0);
    match parse(&p[..HEADER_LEN], &LIM) {
        BinParsed::Error {
            status: Status::UnknownCommand,
            consumed: HEADER_LEN,
            swallow: 6,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    // Refused from the header alone: the 2,000-byte value is never buffered.
    let big = packet_of(opcode::SET, &[0; 8], b"k", &[b'v'; 2000], 0);
    match parse(&big[..HEADER_LEN], &LIM) {
        BinParsed::Error {
            status: Status::TooLarge,
            consumed: HEADER_LEN,
            swallow: 2009,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    let small_memory = Limits {
        max_body: 100,
        max_value_len: 1 << 20,
        ..LIM
    };
    let big = packet_of(opcode::APPEND, &[], b"k", &[b'v'; BIG_BODY], 0);
    assert!(matches!(
        parse(&big[..HEADER_LEN], &small_memory),
        BinParsed::Error {
            status: Status::OutOfMemory,
            ..
        }
    ));
}

#[test]
fn responses_carry_the_header_fields_in_network_order() {
    let mut out = Vec::new();
    let head = Head {
        opcode: opcode::GETK,
        opaque: 0x0102_0304,
    };
    packet(
        &mut out,
        head,
        Status::Success,
        9,
        &[0, 0, 0, 5],
        b"ab",
        b"xyz",
    );
    assert_eq!(
        out,
        [
            &[0x81, 0x0c, 0, 2, 4, 0, 0, 0, 0, 0, 0, 9, 1, 2, 3, 4][..],
            &[0, 0, 0, 0, 0, 0, 0, 9],
            &[0, 0, 0, 5],
            b"ab",
            b"xyz",
        ]
        .concat()
    );
    out.clear();
    error(&mut out, head, Status::KeyExists);
    assert_eq!(&out[6..8], &[0, 2]);
    assert_eq!(&out[HEADER_LEN..], b"Data exists for key.");
}

#[test]
fn sasl_plain_splits_identity_user_and_password() {
    use super::cmd::sasl_plain;
    assert_eq!(
        sasl_plain(b"\0default\0secret"),
        Some((&b"default"[..], &b"secret"[..]))
    );
    assert_eq!(
        sasl_plain(b"admin\0default\0pa\0ss"),
        Some((&b"default"[..], &b"pa\0ss"[..]))
    );
    assert_eq!(sasl_plain(b"default secret"), None);
}
