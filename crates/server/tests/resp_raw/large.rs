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
