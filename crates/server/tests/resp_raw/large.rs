//! Large values: SET and GET of 1 MB and 8 MB bulk strings that arrive in
//! many writes cut at awkward places (inside a length line, between its
//! CR and LF, next to the data's CRLF), pipelined with small commands; and
//! a declared length past `max-request-bytes`.

use std::io::Write;
use std::time::Duration;

use combkv_server::ByteSize;

use crate::wire::*;

/// A server that takes values up to 16 MiB.
fn large_server() -> TestServer {
    let mut c = config();
    c.max_value_bytes = ByteSize(16 << 20);
    c.max_request_bytes = ByteSize(16 << 20);
    TestServer::start(c)
}

/// `len` bytes that are not all alike, with CR, LF and `$` among them, so
/// that a reply cut or shifted by one byte cannot compare equal.
fn value(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match i % 4099 {
                0 => b'\r',
                1 => b'\n',
                2 => b'$',
                _ => x as u8,
            }
        })
        .collect()
}

/// Where to cut `input` besides every `chunk` bytes: around each
/// multibulk header (count and length lines: after the `$` or `*`, inside
/// the digits, between CR and LF) and around each bulk string's closing
/// CRLF.
fn awkward_cuts(input: &[u8]) -> Vec<usize> {
    let mut cuts = Vec::new();
    let mut at = 0;
    while at < input.len() {
        // A request: `*N\r\n` then N times `$L\r\n<L bytes>\r\n`.
        let line =
            |from: usize| from + input[from..].windows(2).position(|w| w == b"\r\n").unwrap();
        let end = line(at);
        let n: usize = std::str::from_utf8(&input[at + 1..end])
            .unwrap()
            .parse()
            .unwrap();
        cuts.extend([at + 1, end, end + 1]);
        at = end + 2;
        for _ in 0..n {
            let end = line(at);
            let len: usize = std::str::from_utf8(&input[at + 1..end])
                .unwrap()
                .parse()
                .unwrap();
            cuts.extend([at + 1, at + 2, end, end + 1]);
            let data_end = end + 2 + len;
            cuts.extend([end + 2, data_end - 1, data_end, data_end + 1]);
            at = data_end + 2;
        }
    }
    cuts
}

/// Sends `input` in pieces: cut at every awkward place and every `chunk`
/// bytes, with a pause after each awkward cut so that the server reads the
/// pieces apart.
fn send_cut(mut out: std::net::TcpStream, input: Vec<u8>, chunk: usize) {
    let awkward = awkward_cuts(&input);
    let mut cuts: Vec<usize> = awkward.clone();
    cuts.extend((chunk..input.len()).step_by(chunk));
    cuts.push(input.len());
    cuts.sort_unstable();
    cuts.dedup();
    let mut from = 0;
    for cut in cuts {
        if cut <= from {
            continue;
        }
        out.write_all(&input[from..cut]).expect("send a piece");
        from = cut;
        if awkward.binary_search(&cut).is_ok() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn bulk_reply(v: &[u8]) -> Vec<u8> {
    let mut r = format!("${}\r\n", v.len()).into_bytes();
    r.extend_from_slice(v);
    r.extend_from_slice(b"\r\n");
    r
}

#[test]
fn large_values_cut_anywhere_and_pipelined_come_back_exactly() {
    let s = large_server();
    let one = value(1 << 20, 1);
    let eight = value(8 << 20, 2);
    let requests: Vec<Vec<&[u8]>> = vec![
        vec![b"PING"],
        vec![b"SET", b"one", &one],
        vec![b"GET", b"missing"],
        vec![b"SET", b"eight", &eight],
        vec![b"INCR", b"n"],
        vec![b"GET", b"one"],
        vec![b"SET", b"small", b"v"],
        vec![b"GET", b"eight"],
        vec![b"STRLEN", b"eight"],
        vec![b"GET", b"small"],
        // Overwrites: the reply is the newest value, whole.
        vec![b"SET", b"one", &eight[..(1 << 20) + 3]],
        vec![b"GET", b"one"],
    ];
    let input: Vec<u8> = requests.iter().flat_map(|r| encode(r)).collect();
    let want: Vec<Vec<u8>> = vec![
        b"+PONG\r\n".to_vec(),
        OK.into(),
        NIL.into(),
        OK.into(),
        int(1).into(),
        bulk_reply(&one),
        OK.into(),
        bulk_reply(&eight),
        int(8 << 20).into(),
        bulk("v").into(),
        OK.into(),
        bulk_reply(&eight[..(1 << 20) + 3]),
    ];
    // Pieces of 1 byte short of 16 KiB (the server's read size) and of
    // 100 KB: the cuts fall everywhere in its buffer.
    for chunk in [16 * 1024 - 1, 100_000] {
        let mut c = s.connect();
        let sender = c.sender();
        let sent = input.clone();
        let writer = std::thread::spawn(move || send_cut(sender, sent, chunk));
        for (i, w) in want.iter().enumerate() {
            let got = c.reply();
            assert!(
                got == *w,
                "chunk {chunk}, reply {i}: {} bytes, want {} (starts {:?})",
                got.len(),
                w.len(),
                String::from_utf8_lossy(&got[..got.len().min(40)])
            );
        }
        writer.join().expect("the sender finished");
        c.ok("DEL n", &int(1));
    }
}

#[test]
fn a_bulk_longer_than_max_request_bytes_is_refused_and_changes_nothing() {
    let mut config = config();
    config.max_request_bytes = ByteSize(1 << 20);
    config.max_value_bytes = ByteSize(4 << 20);
    let s = TestServer::start(config);
    let mut c = s.connect();
    c.ok("SET k old", OK);
    // The header alone is refused: nothing waits for the body, and the
    // requests before it are answered first.
    let mut bad = s.connect();
    bad.send(b"*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048577\r\n");
    assert_eq!(bad.reply_str(), "+PONG\r\n");
    assert_eq!(
        bad.reply_str(),
        err("ERR Protocol error: invalid bulk length")
    );
    bad.expect_closed();
    // A length within the limit, cut inside its header, is taken.
    let fits = value((1 << 20) - 64, 3);
    let mut ok = s.connect();
    let input = encode(&[b"SET", b"fits", &fits]);
    send_cut(ok.sender(), input, 4096);
    assert_eq!(ok.reply_str(), OK);
    c.ok("GET k", &bulk("old"));
    assert_eq!(c.cmd(&[b"GET", b"fits"]), bulk_reply(&fits));
}

/// A counter of INFO's `stats` section.
fn stat(c: &mut Conn, name: &str) -> u64 {
    let info = c.q("INFO stats");
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {name} in INFO: {info}"));
    line.trim().parse().expect("a counter")
}

/// `mem_clients_normal` (every client's input and output buffers) once
/// it settles at or below `at_most` (the server sees a close on its own
/// schedule); panics if it does not within the reply timeout.
fn client_buffers_fall_to(c: &mut Conn, at_most: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info = c.q("INFO memory");
        let now: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("mem_clients_normal:"))
            .expect("mem_clients_normal in INFO")
            .trim()
            .parse()
            .unwrap();
        if now <= at_most {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "client buffers stay at {now} bytes"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_large_value_in_small_pieces_is_stored_without_a_copy_and_read_back_exactly() {
    let s = large_server();
    let mut c = s.connect();
    let v = value(1 << 20, 4);
    // 1,000-byte pieces, a pause every 64: the server reads the value in
    // many reads, the first one the header and a little data.
    let input = encode(&[b"SET", b"big", &v]);
    let mut out = c.sender();
    for (i, piece) in input.chunks(1000).enumerate() {
        out.write_all(piece).unwrap();
        if i % 64 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(c.reply_str(), OK);
    assert_eq!(c.cmd(&[b"GET", b"big"]), bulk_reply(&v));
    let mut info = s.connect();
    assert_eq!(stat(&mut info, "large_values_received"), 1);
    assert_eq!(stat(&mut info, "large_values_stored_uncopied"), 1);
    // Values below the threshold arrive in the input as before.
    let small = value(32 * 1024 - 1, 5);
    assert_eq!(c.cmd(&[b"SET", b"small", &small]), OK.as_bytes());
    assert_eq!(c.cmd(&[b"GET", b"small"]), bulk_reply(&small));
    assert_eq!(stat(&mut info, "large_values_received"), 1);
}

#[test]
fn pipelined_large_sets_then_gets_each_come_back_exactly() {
    let s = large_server();
    let mut c = s.connect();
    let values: Vec<Vec<u8>> = (0..6)
        .map(|i| value((1 << 20) + i * 7, 10 + i as u64))
        .collect();
    let keys: Vec<String> = (0..values.len()).map(|i| format!("k{i}")).collect();
    let mut input = Vec::new();
    for (k, v) in keys.iter().zip(&values) {
        input.extend(encode(&[b"SET", k.as_bytes(), v]));
    }
    for k in &keys {
        input.extend(encode(&[b"GET", k.as_bytes()]));
    }
    // One writer, as fast as the socket takes it: requests follow each
    // other inside the server's reads.
    let sender = c.sender();
    let writer = std::thread::spawn(move || {
        let mut sender = sender;
        sender.write_all(&input).unwrap();
    });
    for _ in &keys {
        assert_eq!(c.reply_str(), OK);
    }
    for v in &values {
        assert_eq!(c.reply(), bulk_reply(v));
    }
    writer.join().unwrap();
    // Each value whose header the server read before most of its data
    // (the input is read 16 KiB at a time: all, in practice).
    let received = stat(&mut c, "large_values_received");
    assert!(
        (1..=values.len() as u64).contains(&received),
        "{received} values received"
    );
    assert_eq!(stat(&mut c, "large_values_stored_uncopied"), received);
}

#[test]
fn a_received_value_a_command_does_not_store_whole_is_copied() {
    let s = large_server();
    let mut c = s.connect();
    let v = value(200_000, 6);
    // APPEND stores the old value and the new one together; MSET's second
    // large value arrives in the input (one value per request has a
    // buffer of its own); inside MULTI the command is queued with a copy.
    // (MSET last: its second value, read into the input, grows it.)
    c.ok("SET a x", OK);
    let mut input = encode(&[b"MULTI"]);
    input.extend(encode(&[b"SET", b"q", &v[2..]]));
    input.extend(encode(&[b"EXEC"]));
    input.extend(encode(&[b"APPEND", b"a", &v]));
    input.extend(encode(&[b"MSET", b"m1", &v, b"m2", &v[1..]]));
    send_cut(c.sender(), input, 4000);
    assert_eq!(c.reply_str(), OK);
    assert_eq!(c.reply_str(), "+QUEUED\r\n");
    assert_eq!(c.reply_str(), "*1\r\n+OK\r\n");
    assert_eq!(c.reply_str(), int(1 + v.len() as i64));
    assert_eq!(c.reply_str(), OK);
    let mut want = b"x".to_vec();
    want.extend_from_slice(&v);
    assert_eq!(c.cmd(&[b"GET", b"a"]), bulk_reply(&want));
    assert_eq!(c.cmd(&[b"GET", b"m1"]), bulk_reply(&v));
    assert_eq!(c.cmd(&[b"GET", b"m2"]), bulk_reply(&v[1..]));
    assert_eq!(c.cmd(&[b"GET", b"q"]), bulk_reply(&v[2..]));
    // MSET's first value is stored as it was received.
    assert_eq!(stat(&mut c, "large_values_received"), 3);
    assert_eq!(stat(&mut c, "large_values_stored_uncopied"), 1);
}

#[test]
fn a_received_value_without_its_crlf_closes_and_stores_nothing() {
    let s = large_server();
    let mut c = s.connect();
    let v = value(100_000, 7);
    let mut input = encode(&[b"SET", b"k", &v]);
    let n = input.len();
    input[n - 2] = b'x';
    let mut bad = s.connect();
    bad.send(&input);
    assert_eq!(
        bad.reply_str(),
        err("ERR Protocol error: invalid bulk length")
    );
    bad.expect_closed();
    c.ok("EXISTS k", &int(0));
    // A client that leaves inside its value gives its buffer back.
    let input = encode(&[b"SET", b"k", &value(2 << 20, 8)]);
    let mut gone = s.connect();
    gone.send(&input[..input.len() / 3]);
    let mut header_only = s.connect();
    header_only.send(&input[..40]);
    c.ok("PING", "+PONG\r\n");
    drop(gone);
    drop(header_only);
    client_buffers_fall_to(&mut c, 256 * 1024);
    c.ok("EXISTS k", &int(0));
}

#[test]
fn large_gets_read_slowly_come_back_exactly_between_other_replies() {
    let s = large_server();
    let mut c = s.connect();
    let big = value(6 << 20, 20);
    let mid = value(200_000, 21);
    assert_eq!(c.cmd(&[b"SET", b"big", &big]), OK.as_bytes());
    assert_eq!(c.cmd(&[b"SET", b"mid", &mid]), OK.as_bytes());
    let before = stat(&mut c, "large_values_sent_uncopied");
    // Pipelined: more than the socket holds, so the server's writes stop
    // part-way through a value and go on when the client reads again.
    let requests: Vec<Vec<&[u8]>> = vec![
        vec![b"GET", b"big"],
        vec![b"PING"],
        vec![b"GET", b"mid"],
        vec![b"GET", b"missing"],
        vec![b"GET", b"big"],
        vec![b"ECHO", b"end"],
    ];
    let input: Vec<u8> = requests.iter().flat_map(|r| encode(r)).collect();
    let mut want = bulk_reply(&big);
    want.extend(b"+PONG\r\n");
    want.extend(bulk_reply(&mid));
    want.extend(NIL.as_bytes());
    want.extend(bulk_reply(&big));
    want.extend(bulk("end").as_bytes());
    let mut slow = s.connect();
    slow.send(&input);
    // Reads in small pieces with pauses: the server finds the socket full
    // many times.
    let mut got = Vec::with_capacity(want.len());
    let mut stream = slow.sender();
    let mut piece = vec![0u8; 7919];
    let mut reads = 0;
    while got.len() < want.len() {
        let n = std::io::Read::read(&mut stream, &mut piece).expect("read the replies");
        assert!(n > 0, "closed after {} of {} bytes", got.len(), want.len());
        got.extend_from_slice(&piece[..n]);
        reads += 1;
        if reads % 50 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    assert!(got == want, "{} bytes back, want {}", got.len(), want.len());
    // One value per turn goes out from the store's bytes; at least the
    // first GET's did.
    let sent = stat(&mut c, "large_values_sent_uncopied") - before;
    assert!((1..=3).contains(&sent), "{sent} values sent uncopied");
    // The connection goes on as usual.
    slow.ok("PING", "+PONG\r\n");
}

#[test]
fn a_client_that_leaves_before_its_large_reply_is_read_costs_nothing_after() {
    let s = large_server();
    let mut c = s.connect();
    let big = value(8 << 20, 22);
    assert_eq!(c.cmd(&[b"SET", b"big", &big]), OK.as_bytes());
    let mut gone = s.connect();
    let mut input = encode(&[b"GET", b"big"]);
    input.extend(encode(&[b"GET", b"big"]));
    gone.send(&input);
    std::thread::sleep(Duration::from_millis(50));
    drop(gone);
    // Overwritten while a reply may still hold the old value.
    let new = value(8 << 20, 23);
    assert_eq!(c.cmd(&[b"SET", b"big", &new]), OK.as_bytes());
    assert_eq!(c.cmd(&[b"GET", b"big"]), bulk_reply(&new));
    client_buffers_fall_to(&mut c, 256 * 1024);
}
