//! HELP subcommands: Redis's lines, in Redis's shape (a header naming the
//! command, a pair of lines per subcommand, `HELP` last), compared with a
//! real redis-server where combkv has every subcommand Redis lists. combkv
//! answers as Redis 7.2, whose closing line says "Print this help." where
//! the 7.0 server beside it says "Prints".

use crate::peer::{redis, replies};
use crate::wire::*;

/// Commands whose HELP lists exactly Redis's subcommands.
const SAME_AS_REDIS: [&str; 5] = ["ACL", "CONFIG", "LATENCY", "OBJECT", "SLOWLOG"];

#[test]
fn config_and_slowlog_answer_help() {
    let s = server();
    let mut c = s.connect();
    let help = c.q("CONFIG HELP");
    assert!(
        help.starts_with(
            "*11\r\n+CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n\
             +GET <pattern>\r\n"
        ),
        "{help}"
    );
    assert!(
        help.ends_with("+HELP\r\n+    Print this help.\r\n"),
        "{help}"
    );
    let help = c.q("SLOWLOG HELP");
    assert!(
        help.starts_with("*12\r\n+SLOWLOG <subcommand> [<arg> [value] [opt] ...]."),
        "{help}"
    );
    c.ok("CONFIG HELP x", &arity("config|help"));
    c.ok("SLOWLOG HELP x", &arity("slowlog|help"));
    // Documented, so COMMAND DOCS and ACL rules know them.
    let docs = c.q("COMMAND DOCS config");
    assert!(docs.contains("config|help"), "{docs}");
    c.ok("ACL SETUSER u -config|help -slowlog|help", "+OK\r\n");
}

#[test]
fn help_lines_are_redis_lines() {
    let Some(redis) = redis() else {
        return;
    };
    let s = server();
    let ours = s.server().resp_addr().unwrap();
    let cmds: Vec<Vec<&str>> = SAME_AS_REDIS.iter().map(|c| vec![*c, "HELP"]).collect();
    let theirs = replies(redis.1, &cmds);
    for ((cmd, ours), theirs) in cmds.iter().zip(replies(ours, &cmds)).zip(theirs) {
        let theirs = theirs.replace("+    Prints this help.\r\n", "+    Print this help.\r\n");
        assert_eq!(ours, theirs, "{cmd:?}");
    }
}
