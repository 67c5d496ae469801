//! Reads that must see one version of the store: an MGET, inline (what
//! telnet sends) or multibulk, sees an MSET of the same keys entirely or not
//! at all, while another client writes them concurrently.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use combkv_server::ServerConfig;

use crate::wire::*;

const KEYS: usize = 20;
/// MGETs of each form checked; the first failure ends the test.
const READS: usize = 3_000;
/// MSETs the writer keeps in flight, so its event loop stays busy.
const WRITE_DEPTH: usize = 8;

fn key(i: usize) -> String {
    format!("k{}", i + 1)
}

/// The values of an MGET reply, in key order (`None` for a null).
fn values(reply: &[u8]) -> Vec<Option<String>> {
    let text = String::from_utf8(reply.to_vec()).expect("utf-8 reply");
    let mut lines = text.split("\r\n");
    let head = lines.next().expect("array header");
    assert_eq!(head, format!("*{KEYS}"), "MGET reply: {text:?}");
    let mut out = Vec::new();
    while let Some(l) = lines.next() {
        match l {
            "$-1" => out.push(None),
            l if l.starts_with('$') => out.push(lines.next().map(str::to_string)),
            "" => {}
            other => panic!("unexpected line {other:?} in {text:?}"),
        }
    }
    assert_eq!(out.len(), KEYS, "MGET reply: {text:?}");
    out
}

/// An MGET of every key, inline or multibulk, sees one MSET of them whole
/// (or none): every value the same. Two event loops, so the writer's MSETs
/// run on one core while the reader's MGETs run on the other. Reading each
/// key at its own version (what an inline MGET once did) tears within a
/// few hundred reads here.
#[test]
fn inline_and_multibulk_mget_see_an_mset_whole() {
    let s = TestServer::start(ServerConfig {
        threads: 2,
        ..config()
    });
    let keys: Vec<String> = (0..KEYS).map(key).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let mut c = s.connect();
        let (keys, stop) = (keys.clone(), stop.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut round = 0u64;
            let mut in_flight = 0;
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                round += 1;
                let value = format!("r{round}");
                let mut args: Vec<&[u8]> = vec![b"MSET"];
                for k in &keys {
                    args.push(k.as_bytes());
                    args.push(value.as_bytes());
                }
                c.send(&encode(&args));
                in_flight += 1;
                if in_flight == WRITE_DEPTH {
                    for _ in 0..in_flight {
                        assert_eq!(c.reply(), OK.as_bytes());
                    }
                    in_flight = 0;
                }
            }
            for _ in 0..in_flight {
                assert_eq!(c.reply(), OK.as_bytes());
            }
            round
        })
    };
    let mut c = s.connect();
    let inline = format!("MGET {}\r\n", keys.join(" "));
    let key_args: Vec<&[u8]> = keys.iter().map(String::as_bytes).collect();
    let multibulk = encode(&[&[&b"MGET"[..]], &key_args[..]].concat());
    let mut seen_writes = 0;
    let mut torn = None;
    'reads: for _ in 0..READS {
        for (form, request) in [("inline", inline.as_bytes()), ("multibulk", &multibulk)] {
            c.send(request);
            let got = values(&c.reply());
            let present: Vec<&String> = got.iter().flatten().collect();
            if !present.is_empty() {
                seen_writes += 1;
            }
            let whole = present.is_empty()
                || (present.len() == KEYS && present.iter().all(|v| *v == present[0]));
            if !whole {
                torn = Some(format!("{form} MGET saw a torn MSET: {got:?}"));
                break 'reads;
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    let rounds = writer.join().expect("writer");
    if let Some(t) = torn {
        panic!("{t}");
    }
    assert!(
        seen_writes > READS,
        "only {seen_writes} reads saw an MSET ({rounds} written)"
    );
}
