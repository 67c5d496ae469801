//! WAIT on a single node: no replicas, so 0 at once whatever it asks for
//! (a cluster's WAIT is `crates/cli/tests/wait_command.rs`); Redis's
//! argument errors, in its order.

use std::time::{Duration, Instant};

use crate::wire::*;

#[test]
fn wait_on_a_single_node_answers_zero_at_once() {
    let s = server();
    let mut c = s.connect();
    c.ok("WAIT 0 0", &int(0));
    c.ok("SET k v", OK);
    let started = Instant::now();
    // No replica exists, nor can one join: nothing to wait for, even
    // with no time limit.
    c.ok("WAIT 1 0", &int(0));
    c.ok("WAIT 3 100000", &int(0));
    c.ok("WAIT -1 5", &int(0));
    assert!(started.elapsed() < Duration::from_secs(5));
    c.ok("WAIT x 0", NOT_INT);
    c.ok("WAIT 1.5 0", NOT_INT);
    c.ok(
        "WAIT 0 x",
        &err("ERR timeout is not an integer or out of range"),
    );
    c.ok(
        "WAIT 0 1.5",
        &err("ERR timeout is not an integer or out of range"),
    );
    c.ok("WAIT 0 -1", &err("ERR timeout is negative"));
    // The count is checked before the timeout.
    c.ok("WAIT x -1", NOT_INT);
    c.ok("WAIT 0", &arity("wait"));
    c.ok("WAIT 0 0 0", &arity("wait"));
    c.ok("MULTI", OK);
    c.ok("WAIT 1 0", "+QUEUED\r\n");
    c.ok("EXEC", "*1\r\n:0\r\n");
}
