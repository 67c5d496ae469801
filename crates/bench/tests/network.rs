//! The network bench, small: every workload against redis-server and
//! memcached (installed beforehand by `scripts/peers install`),
//! and a fake server that loses writes, which must fail the run.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use combkv_bench::generator::Distribution;
use combkv_bench::net::resp::{self, Frame};
use combkv_bench::net::server::Server;
use combkv_bench::record::Shape;
use combkv_bench::target::TargetKind;
use combkv_bench::workload::Workload;
use combkv_bench::ycsb::{RunSpec, Stop, run_one};

fn spec(workload: Workload, target: TargetKind) -> RunSpec {
    RunSpec {
        workload,
        target,
        records: 2000,
        stop: Stop::Ops(5000),
        threads: 2,
        distribution: workload.default_distribution(),
        shape: Shape::default(),
        read_pct: 95,
        seed: 11,
        connections: 2,
        pipeline: 8,
        server_bin: None,
        hot_cache: None,
    }
}

/// Whether redis-server and memcached are installed. `scripts/test`
/// installs them (`scripts/peers install`) before any test runs; a test
/// never runs a package manager. Missing peers fail the test, unless
/// `COMBKV_SKIP_PEERS` is set, which skips it with a note.
fn peers_installed() -> bool {
    let out = std::process::Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/peers"))
        .args(["check", "redis", "memcached"])
        .output()
        .expect("running scripts/peers check");
    if out.status.success() {
        return true;
    }
    let why = String::from_utf8_lossy(&out.stderr);
    if std::env::var_os("COMBKV_SKIP_PEERS").is_some() {
        eprintln!("SKIPPED (COMBKV_SKIP_PEERS is set): {}", why.trim());
        return false;
    }
    panic!(
        "{}; `scripts/test` installs them first, or set COMBKV_SKIP_PEERS=1 to skip this test",
        why.trim()
    );
}

#[test]
fn every_workload_passes_on_redis_and_memcached() {
    if !peers_installed() {
        return;
    }
    for t in [TargetKind::Redis, TargetKind::Memcached] {
        for w in Workload::ALL {
            let s = spec(w, t);
            if let Some(why) = t.skips(w) {
                let e = run_one(&s, false).unwrap_err();
                assert!(e.0.contains(why), "{e}");
                continue;
            }
            let r = run_one(&s, false).unwrap_or_else(|e| panic!("{w}/{t}: {e}"));
            assert_eq!(r.ops, 5000, "{w}/{t}");
            let c = r.op_counts;
            let total = c.read + c.update + c.insert + c.scan + c.rmw + c.cloud_range;
            assert_eq!(total, 5000, "{w}/{t}: {c:?}");
            assert!(r.p50_us <= r.p99_us && r.p99_us <= r.max_us, "{r:?}");
            assert_eq!(r.raw_bytes_per_record, 32.0);
            assert_eq!((r.connections, r.pipeline), (Some(2), Some(8)));
            assert!(r.rss_after_load_bytes > 0);
        }
    }
}

#[test]
fn variable_sizes_and_deep_pipelines_pass_on_redis() {
    if !peers_installed() {
        return;
    }
    for (w, d) in [
        (Workload::F, Distribution::Zipfian),
        (Workload::E, Distribution::Uniform),
        (Workload::Cloud, Distribution::Zipfian),
    ] {
        let s = RunSpec {
            distribution: d,
            shape: Shape {
                key_size: "16..64".parse().unwrap(),
                value_size: "8..2048".parse().unwrap(),
            },
            read_pct: 50,
            connections: 3,
            pipeline: 64,
            stop: Stop::Secs(0.2),
            ..spec(w, TargetKind::Redis)
        };
        let r = run_one(&s, false).unwrap_or_else(|e| panic!("{w}/{d}: {e}"));
        assert!(r.ops > 0);
    }
}

/// A RESP server on a HashMap that, once `lose_after` SETs have arrived,
/// answers every 20th SET with +OK but keeps the old value.
fn lossy_server(lose_after: u64) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let map = Arc::new(Mutex::new((HashMap::<Vec<u8>, Vec<u8>>::new(), 0u64)));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let map = Arc::clone(&map);
            std::thread::spawn(move || serve(stream.unwrap(), &map, lose_after));
        }
    });
    addr
}

type Shared = Mutex<(HashMap<Vec<u8>, Vec<u8>>, u64)>;

fn serve(mut s: TcpStream, map: &Shared, lose_after: u64) {
    let (mut buf, mut out) = (Vec::new(), Vec::new());
    let mut chunk = [0u8; 65536];
    loop {
        let n = match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut at = 0;
        // Commands are arrays of bulk strings, the same frames as replies.
        while let Some((Frame::Array(args), used)) = resp::parse(&buf[at..]).unwrap() {
            let args: Vec<&[u8]> = args
                .map(|f| match f {
                    Frame::Bulk(b) => b,
                    other => panic!("argument {other}"),
                })
                .collect();
            let mut m = map.lock().unwrap();
            match args[0] {
                b"PING" => out.extend_from_slice(b"+PONG\r\n"),
                b"GET" => match m.0.get(args[1]) {
                    Some(v) => resp::arg(&mut out, v),
                    None => out.extend_from_slice(b"$-1\r\n"),
                },
                b"SET" => {
                    m.1 += 1;
                    if m.1 <= lose_after || !m.1.is_multiple_of(20) {
                        m.0.insert(args[1].to_vec(), args[2].to_vec());
                    }
                    out.extend_from_slice(b"+OK\r\n");
                }
                other => panic!("unexpected command {:?}", String::from_utf8_lossy(other)),
            }
            drop(m);
            at += used;
        }
        buf.drain(..at);
        s.write_all(&out).unwrap();
        out.clear();
    }
}

#[test]
fn a_lost_update_over_the_network_fails_the_run() {
    let s = RunSpec {
        records: 200,
        stop: Stop::Ops(20_000),
        ..spec(Workload::A, TargetKind::CombkvResp)
    };
    let addr = lossy_server(200);
    let server = Server::external(addr, std::process::id());
    let err = combkv_bench::net::run_on(&s, false, server).unwrap_err();
    assert!(err.0.contains("must see an update in"), "{err}");
    // The same server before it starts losing writes passes.
    let addr = lossy_server(u64::MAX);
    let server = Server::external(addr, std::process::id());
    combkv_bench::net::run_on(&s, false, server).unwrap();
}

/// The combkv start path (`--server-bin`, free ports, PING, SIGTERM) with a
/// stand-in for `combkv serve`: a script that takes its flags and runs
/// redis-server on the RESP address (no RANGE there, so workload a only).
#[test]
fn combkv_serve_is_started_pinged_and_stopped() {
    if !peers_installed() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("combkv-bench-standin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("combkv");
    std::fs::write(
        &bin,
        r#"#!/bin/sh
[ "$1" = serve ] || exit 2
[ "$2" = --resp ] && [ "$4" = --memcached ] && [ "$6" = --durability ] && [ "$7" = none ] || exit 3
port=${3##*:}
exec redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no
"#,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = RunSpec {
        server_bin: Some(bin.clone()),
        ..spec(Workload::A, TargetKind::CombkvResp)
    };
    let r = run_one(&s, false).unwrap();
    assert_eq!(r.ops, 5000);
    assert!(r.bytes_per_record > 0.0, "{r:?}");
    // A binary that is not there is named in the error.
    let s = RunSpec {
        server_bin: Some(dir.join("missing")),
        ..s
    };
    let e = run_one(&s, false).unwrap_err();
    assert!(e.0.contains("no combkv binary at"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
