//! ACL: users, their rules as ACL GETUSER and ACL LIST write them back,
//! AUTH and HELLO AUTH as users, and NOPERM for a command, a key, a RANGE
//! outside the user's patterns, with the denials in ACL LOG. The replies
//! are Redis 7.0's, byte for byte, except where noted.

use crate::wire::*;

const NOPERM_KEY: &str =
    "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n";

#[test]
fn users_rules_and_what_they_allow() {
    let s = server();
    let mut admin = s.connect();
    admin.ok("ACL WHOAMI", &bulk("default"));
    admin.ok("ACL USERS", &bulks(&["default"]));
    admin.ok("ACL LIST", &bulks(&["user default on nopass ~* &* +@all"]));
    admin.ok(
        "ACL SETUSER app on >pw ~app:* %R~ro:* +@read +set -keys",
        OK,
    );
    admin.ok("ACL USERS", &bulks(&["app", "default"]));
    admin.ok("ACL GETUSER nobody", NIL);
    let user = admin.q("ACL GETUSER app");
    assert!(
        user.starts_with("*12\r\n$5\r\nflags\r\n*1\r\n$2\r\non\r\n"),
        "{user}"
    );
    assert!(user.contains("$14\r\n~app:* %R~ro:*\r\n"), "{user}");
    admin.ok(
        "ACL SETUSER app +nosuch",
        &err(
            "ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL",
        ),
    );
    admin.ok(
        "ACL DELUSER default",
        &err("ERR The 'default' user cannot be removed"),
    );
    admin.ok("ACL CAT nosuch", &err("ERR Unknown category 'nosuch'"));
    admin.ok(
        "ACL DRYRUN app GET other",
        &bulk("This user has no permissions to access the 'other' key"),
    );
    admin.ok(
        "ACL DRYRUN app DEL app:1",
        &bulk("This user has no permissions to run the 'del' command"),
    );
    admin.ok("ACL DRYRUN app GET app:1", OK);

    let mut app = s.connect();
    app.ok(
        "AUTH app wrong",
        &err("WRONGPASS invalid username-password pair or user is disabled."),
    );
    app.ok("AUTH app pw", OK);
    app.ok(
        "ACL WHOAMI",
        &err("NOPERM this user has no permissions to run the 'acl|whoami' command"),
    );
    app.ok("SET app:1 v", OK);
    app.ok("GET app:1", &bulk("v"));
    app.ok("SET ro:1 v", NOPERM_KEY);
    app.ok("GET ro:1", NIL);
    app.ok("GET other", NOPERM_KEY);
    app.ok(
        "DEL app:1",
        &err("NOPERM this user has no permissions to run the 'del' command"),
    );
    app.ok(
        "KEYS *",
        &err("NOPERM this user has no permissions to run the 'keys' command"),
    );
    // combkv's own range reads: the whole range inside one pattern.
    app.ok("RANGE [app:0 [app:9", &bulks(&["app:1", "v"]));
    app.ok("RANGE [app:0 +", NOPERM_KEY);
    app.ok("RANGE - [app:9", NOPERM_KEY);
    app.ok("FLOOR app:5", NOPERM_KEY);
    // Changes apply to a connected client at its next command.
    admin.ok("ACL SETUSER app -get", OK);
    app.ok(
        "GET app:1",
        &err("NOPERM this user has no permissions to run the 'get' command"),
    );
    let log = admin.q("ACL LOG 1");
    assert!(log.starts_with("*1\r\n*14\r\n$5\r\ncount\r\n:1\r\n$6\r\nreason\r\n$7\r\ncommand\r\n$7\r\ncontext\r\n$8\r\ntoplevel\r\n$6\r\nobject\r\n$3\r\nget\r\n$8\r\nusername\r\n$3\r\napp\r\n"), "{log}");
    admin.ok("ACL LOG RESET", OK);
    admin.ok("ACL LOG", "*0\r\n");
    // A deleted user's connections are closed, without a reply.
    admin.ok("ACL DELUSER app nobody", &int(1));
    app.send(&encode(&[b"PING"]));
    app.expect_closed();
}

#[test]
fn the_default_user_carries_requirepass() {
    let mut cfg = config();
    cfg.requirepass = Some("s3cret".into());
    let s = TestServer::start(cfg);
    let mut c = s.connect();
    c.ok("GET k", &err("NOAUTH Authentication required."));
    c.ok(
        "AUTH default wrong",
        &err("WRONGPASS invalid username-password pair or user is disabled."),
    );
    c.ok("AUTH s3cret", OK);
    c.ok("ACL WHOAMI", &bulk("default"));
    let list = c.q("ACL LIST");
    assert!(
        list.contains("user default on #") && list.contains(" ~* &* +@all"),
        "{list}"
    );
    let mut d = s.connect();
    d.ok(
        "ACL SETUSER reader on >r ~* -@all +get",
        "-NOAUTH Authentication required.\r\n",
    );
    let hello = d.q("HELLO 2 AUTH default s3cret");
    assert!(hello.starts_with("*14\r\n$6\r\nserver\r\n"), "{hello}");
    d.ok(
        "HELLO 2 AUTH default nope",
        &err("WRONGPASS invalid username-password pair or user is disabled."),
    );
    let info = c.q("INFO stats");
    assert!(info.contains("acl_access_denied_auth:2"), "{info}");
}
