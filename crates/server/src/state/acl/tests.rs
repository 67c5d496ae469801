//! The ACL table's rules against Redis's semantics: a described user is
//! the same user when its description is applied again, whatever rules
//! made it; passwords hash as Redis's do; the ACL file loads all or nothing.

use proptest::prelude::*;

use super::catalog::Catalog;
use super::user::{User, hash_password};
use super::{Acl, READ, WRITE};

fn catalog() -> Catalog {
    Catalog::new([
        ("get", vec!["@read", "@string", "@fast"]),
        ("set", vec!["@write", "@string", "@slow"]),
        ("del", vec!["@write", "@keyspace", "@slow"]),
        ("keys", vec!["@read", "@keyspace", "@dangerous", "@slow"]),
        ("client", vec!["@slow"]),
        ("client|id", vec!["@connection", "@slow"]),
        (
            "client|kill",
            vec!["@admin", "@dangerous", "@connection", "@slow"],
        ),
        (
            "flushall",
            vec!["@write", "@keyspace", "@dangerous", "@slow"],
        ),
        ("select", vec!["@fast", "@connection"]),
    ])
}

/// Rules a user may be given, valid and not.
fn rule() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("on".to_string()),
        Just("off".to_string()),
        Just("nopass".to_string()),
        Just("resetpass".to_string()),
        "[a-c]{1,3}".prop_map(|p| format!(">{p}")),
        "[a-c]{1,3}".prop_map(|p| format!("<{p}")),
        Just("allkeys".to_string()),
        Just("resetkeys".to_string()),
        "[a-c*]{1,3}".prop_map(|p| format!("~{p}")),
        "[a-c*]{1,3}".prop_map(|p| format!("%R~{p}")),
        "[a-c*]{1,3}".prop_map(|p| format!("%W~{p}")),
        Just("allchannels".to_string()),
        Just("resetchannels".to_string()),
        "[a-c]{1,2}".prop_map(|p| format!("&{p}")),
        prop::sample::select(vec![
            "+@all",
            "-@all",
            "allcommands",
            "nocommands",
            "+@read",
            "-@read",
            "+@write",
            "-@dangerous",
            "+@connection",
            "+get",
            "-get",
            "+set",
            "-keys",
            "+client",
            "-client",
            "+client|id",
            "-client|kill",
            "+select|0",
            "+select|1",
            "+flushall",
            "reset",
            "clearselectors",
            "(+get ~a*)",
            "(-@all %R~b)",
        ])
        .prop_map(String::from),
    ]
}

/// A user rebuilt from its own description.
fn redescribed(u: &User, c: &Catalog) -> User {
    let text = u.describe(c);
    let args: Vec<String> = text.split(' ').map(String::from).collect();
    let rules = super::user::merge_selector_args(&args).unwrap();
    let mut v = User::new(&u.name, c);
    for r in &rules {
        v.apply(c, r)
            .unwrap_or_else(|e| panic!("{r} of {text:?}: {e:?}"));
    }
    v
}

proptest! {
    #[test]
    fn a_description_rebuilds_the_same_user(rules in prop::collection::vec(rule(), 0..12)) {
        let c = catalog();
        let mut u = User::new("u", &c);
        for r in &rules {
            let _ = u.apply(&c, r);
        }
        let v = redescribed(&u, &c);
        prop_assert_eq!(v.describe(&c), u.describe(&c));
        for (a, b) in u.all_selectors().zip(v.all_selectors()) {
            for id in 0..c.len() {
                for arg in [None, Some(&b"0"[..]), Some(&b"1"[..])] {
                    prop_assert_eq!(a.allows_command(id, arg), b.allows_command(id, arg));
                }
            }
            for key in [&b"a"[..], b"ab", b"b", b"c*"] {
                for need in [READ, WRITE, READ | WRITE] {
                    prop_assert_eq!(a.allows_key(key, need), b.allows_key(key, need));
                }
            }
        }
        prop_assert_eq!(u.accepts(b"a"), v.accepts(b"a"));
    }
}

#[test]
fn rules_apply_as_redis_applies_them() {
    let c = catalog();
    let mut u = User::new("u", &c);
    assert_eq!(u.describe(&c), "off resetchannels -@all");
    // With keys denied, @read holds as many denied as allowed here: no
    // category fits better than the single command (Redis's best fit).
    for r in [
        "on",
        ">pw",
        "~k:*",
        "%R~r:*",
        "+@read",
        "-keys",
        "+client|id",
        "+select|0",
    ] {
        u.apply(&c, r).unwrap();
    }
    assert_eq!(
        u.describe(&c),
        format!(
            "on #{} ~k:* %R~r:* resetchannels -@all +get +client|id +select|0",
            hash_password(b"pw")
        )
    );
    let id = |n: &str| c.id(n).unwrap();
    assert!(u.root.allows_command(id("get"), None));
    assert!(!u.root.allows_command(id("keys"), None));
    assert!(!u.root.allows_command(id("set"), None));
    assert!(u.root.allows_command(id("client|id"), None));
    assert!(!u.root.allows_command(id("client|kill"), None));
    assert!(u.root.allows_command(id("select"), Some(b"0")));
    assert!(!u.root.allows_command(id("select"), Some(b"1")));
    assert!(u.root.allows_key(b"r:1", READ) && !u.root.allows_key(b"r:1", WRITE));
    assert!(u.root.allows_key(b"k:1", READ | WRITE));
    assert!(u.accepts(b"pw") && !u.accepts(b"pW"));
    // Errors, each Redis's.
    let err = |u: &mut User, r: &str| u.apply(&c, r).unwrap_err().text();
    assert_eq!(
        err(&mut u, "+nosuch"),
        "Unknown command or category name in ACL"
    );
    assert_eq!(
        err(&mut u, "+@nosuch"),
        "Unknown command or category name in ACL"
    );
    assert_eq!(err(&mut u, "bogus"), "Syntax error");
    assert_eq!(err(&mut u, "%X~a"), "Syntax error");
    assert!(err(&mut u, "#abc").starts_with("The password hash must be"));
    assert!(err(&mut u, "<nope").starts_with("The password you are trying to remove"));
    assert_eq!(
        err(&mut u, "+client|id|x"),
        "Allowing first-arg of a subcommand is not supported"
    );
    // Redis commands combkv lacks: accepted, allowing nothing (an ACL file
    // written for Redis loads).
    let before = u.describe(&c);
    for r in [
        "-debug",
        "+eval",
        "+client|pause",
        "-client|pause",
        "+debug|object",
    ] {
        u.apply(&c, r).unwrap_or_else(|e| panic!("{r}: {e:?}"));
    }
    assert_eq!(u.describe(&c), before);
    assert_eq!(
        err(&mut u, "+client|nosuch"),
        "Unknown command or category name in ACL"
    );
    u.apply(&c, "allkeys").unwrap();
    assert!(err(&mut u, "~x").starts_with("Adding a pattern after the * pattern"));
}

#[test]
fn passwords_are_redis_sha256_hex() {
    // echo -n "foobar" | sha256sum
    assert_eq!(
        hash_password(b"foobar"),
        "c3ab8ff13720e8ad9047dd39466b3c8974e592c2fa383d4a3960714caef0c4f2"
    );
}

#[test]
fn an_acl_file_loads_all_or_nothing() {
    let acl = Acl::new(catalog(), Some("secret"), None).unwrap();
    assert!(acl.default_requires_auth());
    assert!(acl.authenticate("default", b"secret").is_some());
    let good = "user default on nopass ~* &* +@all\nuser app on >pw ~app:* +get\n";
    acl.load_text(good, "users.acl").unwrap();
    assert_eq!(acl.names(), ["app", "default"]);
    assert!(!acl.default_requires_auth());
    let bad = "user x on +get\nuser y on +nosuch\nnot a user line\n";
    let err = acl.load_text(bad, "users.acl").unwrap_err();
    assert!(
        err.contains("users.acl:2: Error in applying operation '+nosuch'"),
        "{err}"
    );
    assert!(
        err.contains("users.acl:3 should start with user keyword"),
        "{err}"
    );
    assert!(err.ends_with("no change to the previously active ACL rules was performed"));
    assert_eq!(acl.names(), ["app", "default"], "unchanged");
    // Without a default line the default user is the built-in one.
    acl.load_text("user app on >pw +get\n", "f").unwrap();
    assert!(acl.user("default").unwrap().nopass);
    let text = acl.to_text();
    acl.load_text(&text, "f").unwrap();
    assert_eq!(acl.to_text(), text);
}
