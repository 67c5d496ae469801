//! `scripts/peers free-port`: the port it prints is one nobody listens on.

use std::net::TcpListener;

use combkv_bench::net::server::{free_port, peers};

/// A port that a listener holds for the duration of the test, and whether
/// the port after it is free (checked by binding it).
fn held_port_with_free_successor() -> (TcpListener, u16) {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < u16::MAX && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return (l, p);
        }
    }
}

#[test]
fn free_port_skips_a_listening_port() {
    let (_held, p) = held_port_with_free_successor();
    let (a, b) = (p.to_string(), (p + 1).to_string());
    assert!(
        peers(&["free-port", &a, &a]).is_err(),
        "the only port in the range is taken"
    );
    for _ in 0..20 {
        let got = peers(&["free-port", &a, &b]).unwrap();
        assert_eq!(got.trim(), b, "port {p} is listening");
    }
}

#[test]
fn free_port_is_bindable_and_in_the_default_range() {
    for _ in 0..5 {
        let p = free_port().unwrap();
        assert!((20000..=32000).contains(&p), "{p}");
        TcpListener::bind(("127.0.0.1", p)).unwrap_or_else(|e| panic!("port {p}: {e}"));
    }
}

#[test]
fn free_port_refuses_bad_ranges() {
    for args in [["9", "8"], ["0", "10"], ["1", "70000"], ["x", "10"]] {
        assert!(peers(&["free-port", args[0], args[1]]).is_err(), "{args:?}");
    }
}
