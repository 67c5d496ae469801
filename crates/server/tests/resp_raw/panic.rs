//! A bug inside a command handler (a panic, on request: `DEBUG PANIC`,
//! which only debug builds have) costs its own connection and nothing
//! else: that client gets `-ERR internal error; closing connection` and is
//! closed; the event loop, the store and the other clients carry on.

use crate::wire::*;

#[test]
fn a_panicking_command_closes_its_connection_and_others_carry_on() {
    // One event loop: the clients share it with the panicking one.
    let s = server();
    let mut a = s.connect();
    let mut b = s.connect();
    b.ok("SET k before", OK);
    // A write, the panic, and a request after it, in one pipeline: the
    // write's reply was written before the panic and still leaves; the
    // request after it is never answered.
    let pipeline = [
        encode(&[b"SET", b"k", b"from-a"]),
        encode(&[b"DEBUG", b"PANIC"]),
        encode(&[b"GET", b"k"]),
    ]
    .concat();
    a.send(&pipeline);
    assert_eq!(a.reply_str(), OK);
    assert_eq!(a.reply_str(), "-ERR internal error; closing connection\r\n");
    a.expect_closed();
    // The other client writes and reads the same key, on the same loop.
    b.ok("GET k", &bulk("from-a"));
    for i in 0..200 {
        let v = format!("v{i}");
        b.ok(&format!("SET k {v}"), OK);
        b.ok("GET k", &bulk(&v));
        b.ok("MGET k k", &bulks(&[&v, &v]));
    }
    // New connections are served too, and may panic again.
    let mut c = s.connect();
    c.ok("GET k", &bulk("v199"));
    c.ok(
        "DEBUG NOPE",
        "-ERR unknown subcommand 'NOPE'. Try DEBUG HELP.\r\n",
    );
    assert_eq!(
        c.cmd(&[b"DEBUG", b"PANIC"]),
        b"-ERR internal error; closing connection\r\n"
    );
    c.expect_closed();
    b.ok("INCR n", &int(1));
    b.ok("GET k", &bulk("v199"));
}
