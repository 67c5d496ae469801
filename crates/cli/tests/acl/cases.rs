//! The command sequences `acl.rs` sends to redis-server and combkv alike.
//! Connection 0 is the default user's (the admin); others log in as the
//! case says. Cases that share a pair of servers delete their users at
//! their end.

use crate::{Action, Case, Cmp, Step, c, case, cmp};

/// SHA-256 of "x", for the `#hash` and `!hash` rules.
const HASH_X: &str = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881";

/// Sets user `u` with `rules`, reads it back both ways, deletes it.
fn rules_case(rules: &str) -> Case {
    case(
        &format!("SETUSER u {rules}"),
        vec![
            c(0, &format!("ACL SETUSER u {rules}")),
            c(0, "ACL GETUSER u"),
            c(0, "ACL LIST"),
            c(0, "ACL DELUSER u"),
        ],
    )
}

/// Every rule kind, alone and in the combinations whose order matters.
pub fn setuser_rules() -> Vec<Case> {
    let hash_rules = [
        format!("#{HASH_X}"),
        format!(">x #{HASH_X}"),
        format!(">x !{HASH_X}"),
    ];
    let rules = [
        "",
        "on",
        "off",
        "on >p1",
        "on >p1 >p2",
        "on >p1 >p2 <p1",
        ">p1 >p1",
        "nopass",
        ">p1 nopass",
        "nopass >p1",
        ">p1 resetpass",
        "nopass resetpass",
        "+get",
        "+get -get",
        "+@all -get",
        "-@all +get +set -set",
        "+@read",
        "+@read -@write",
        "+@all -@dangerous",
        "+@string -incr",
        // Not "+@hash": Redis writes it back because it has hash commands;
        // combkv has none, so the rule allows nothing and reads back as
        // `-@all` (combkv_only.rs checks that).
        "+set +get",
        "+get +set -get +get",
        "+@read +get",
        "+@read -@read",
        "+get +@read",
        "-get +@read",
        "+@read -get",
        "+@read +set",
        "+@write +get -set",
        "+@all -@write +set",
        "+config|get",
        "+@all -config|set",
        "+config|get -config",
        "+acl|whoami +acl|cat",
        "allcommands",
        "nocommands",
        "+get nocommands",
        "allcommands -get",
        "~k*",
        "~k* ~j?",
        "~k* ~k*",
        "%R~r*",
        "%W~w*",
        "%RW~x*",
        "%R~a* %W~a*",
        "~k* %R~k*",
        "allkeys",
        "~k* allkeys",
        "allkeys ~k*",
        "~k* resetkeys",
        "allkeys resetkeys ~a",
        "&ch",
        "&ch* &x",
        "allchannels",
        "&c resetchannels",
        "allchannels &c",
        "on >p1 +get ~k* reset",
        "reset on nopass allkeys allcommands allchannels",
        "on >p1 ~k* %R~r* &c +@read -get +set",
        "(+get ~k*)",
        "on >p1 +get ~k* (+set ~s*)",
        "(+get ~k*) clearselectors",
        "+get ~k* (+set ~s*) reset",
    ];
    let mut cases: Vec<Case> = hash_rules.iter().map(|r| rules_case(r)).collect();
    cases.extend(rules.iter().map(|r| rules_case(r)));
    // The same user changed twice: the second SETUSER adds to the first.
    cases.push(case(
        "SETUSER twice",
        vec![
            c(0, "ACL SETUSER u on >p1 +get ~k*"),
            c(0, "ACL SETUSER u -get +set %W~w* >p2"),
            c(0, "ACL GETUSER u"),
            c(0, "ACL LIST"),
            c(0, "ACL DELUSER u"),
        ],
    ));
    // A selector may also come as several arguments: Redis joins them.
    let args = ["ACL", "SETUSER", "u", "on", "(+get", "~k*)"];
    cases.push(case(
        "selector split over arguments",
        vec![
            Step {
                action: Action::Cmd {
                    conn: 0,
                    args: args.map(String::from).to_vec(),
                },
                cmp: Cmp::Exact,
            },
            c(0, "ACL GETUSER u"),
            c(0, "ACL DELUSER u"),
        ],
    ));
    cases.push(case(
        "the default user",
        vec![c(0, "ACL GETUSER default"), c(0, "ACL LIST")],
    ));
    cases
}

/// Rules Redis refuses (and a few odd ones Redis 7.0 takes): the error
/// text, and nothing changed.
pub fn setuser_errors() -> Vec<Case> {
    let bad = [
        "bogus",
        "+nosuchcmd",
        "-nosuchcmd",
        "+@nosuchcat",
        "-@nosuchcat",
        "#abc",
        "!abc",
        "#2D711642B726B04401627CA9FBAC32F5C8530FB1903CC4DB02258717921A488Z",
        "<nothere",
        "%X~k",
        "%~k",
        "+get|sub",
        "+config|nosuch",
        "-config|get",
        "on >p1 bogus",
        "(+get",
        "+get)",
    ];
    let mut cases: Vec<Case> = bad
        .iter()
        .map(|rules| {
            case(
                &format!("refused SETUSER u {rules}"),
                vec![
                    c(0, &format!("ACL SETUSER u {rules}")),
                    c(0, "ACL GETUSER u"),
                    c(0, "ACL USERS"),
                    // Redis 7.0 takes `+get|sub` (a first-argument rule).
                    // It also takes `%R` as an empty read pattern `%R~`, a
                    // quirk left out here on purpose.
                    c(0, "ACL DELUSER u"),
                ],
            )
        })
        .collect();
    // A refused change to an existing user leaves it as it was.
    cases.push(case(
        "refused change keeps the user",
        vec![
            c(0, "ACL SETUSER u on >p1 +get ~k*"),
            c(0, "ACL SETUSER u -get +nosuchcmd"),
            c(0, "ACL GETUSER u"),
            c(0, "ACL DELUSER u"),
        ],
    ));
    cases.push(case(
        "arity and unknown subcommands",
        vec![
            c(0, "ACL"),
            c(0, "ACL NOSUCH"),
            c(0, "ACL SETUSER"),
            c(0, "ACL GETUSER"),
            c(0, "ACL GETUSER nosuch"),
            c(0, "ACL GETUSER a b"),
            c(0, "ACL WHOAMI extra"),
            c(0, "ACL USERS extra"),
            c(0, "ACL LIST extra"),
            c(0, "ACL SAVE"),
            c(0, "ACL LOAD"),
        ],
    ));
    cases
}

/// AUTH and HELLO with users, wrong passwords, disabled users, and the
/// default user with and without a password.
pub fn auth() -> Vec<Case> {
    vec![
        case(
            "AUTH with users",
            vec![
                c(0, "ACL SETUSER alice on >p1 +@all ~*"),
                c(0, "ACL SETUSER bob off >p2 +@all ~*"),
                c(1, "ACL WHOAMI"),
                c(1, "AUTH alice wrong"),
                c(1, "ACL WHOAMI"),
                c(1, "AUTH alice p1"),
                c(1, "ACL WHOAMI"),
                c(1, "AUTH bob p2"),
                c(1, "AUTH nobody x"),
                c(1, "ACL WHOAMI"),
                c(1, "AUTH p1"),
                c(1, "AUTH"),
                c(1, "AUTH a b c"),
                c(0, "ACL SETUSER nop on nopass +@all ~*"),
                c(1, "AUTH nop anything"),
                c(1, "ACL WHOAMI"),
                c(0, "ACL SETUSER nop resetpass"),
                c(1, "AUTH nop anything"),
                c(1, "ACL WHOAMI"),
                cmp(2, "HELLO 3 AUTH alice p1", Cmp::Hello),
                c(2, "ACL WHOAMI"),
                c(2, "ACL GETUSER alice"),
                c(2, "ACL LIST"),
                c(3, "HELLO 3 AUTH alice bad"),
                c(3, "HELLO 3 AUTH alice"),
                c(3, "ACL WHOAMI"),
                cmp(3, "HELLO 2 AUTH alice p1", Cmp::Hello),
                c(3, "ACL WHOAMI"),
                cmp(0, "ACL LOG", Cmp::Log),
            ],
        ),
        case(
            "the default user with a password, then off",
            vec![
                c(0, "ACL SETUSER alice on >p1 +@all ~*"),
                c(0, "ACL SETUSER default >secret"),
                c(0, "ACL LIST"),
                c(0, "ACL WHOAMI"),
                c(4, "PING"),
                c(4, "ACL WHOAMI"),
                c(4, "GET k"),
                c(4, "AUTH wrong"),
                c(4, "AUTH default wrong"),
                c(4, "AUTH secret"),
                c(4, "ACL WHOAMI"),
                c(5, "HELLO 3"),
                cmp(5, "HELLO 3 AUTH default secret", Cmp::Hello),
                c(0, "ACL SETUSER default off"),
                c(0, "PING"),
                c(6, "PING"),
                c(6, "AUTH secret"),
                c(6, "AUTH alice p1"),
                c(6, "ACL WHOAMI"),
                cmp(6, "ACL LOG", Cmp::Log),
                c(6, "ACL SETUSER default on nopass"),
                c(7, "PING"),
                c(7, "ACL WHOAMI"),
                c(7, "AUTH x"),
            ],
        ),
    ]
}

/// ACL USERS, DELUSER (which closes the deleted user's connections), WHOAMI.
pub fn users() -> Vec<Case> {
    vec![case(
        "users and deluser",
        vec![
            c(0, "ACL USERS"),
            c(0, "ACL SETUSER carol"),
            c(0, "ACL SETUSER alice on >p1 +@all ~*"),
            c(0, "ACL SETUSER bob on >p2 +@all ~*"),
            c(0, "ACL USERS"),
            c(1, "AUTH alice p1"),
            c(1, "PING"),
            c(2, "AUTH bob p2"),
            c(0, "ACL DELUSER alice nosuch bob"),
            c(0, "ACL DELUSER default"),
            c(0, "ACL DELUSER carol default"),
            c(0, "ACL DELUSER"),
            c(0, "ACL USERS"),
            c(1, "PING"),
            c(2, "ACL WHOAMI"),
            c(0, "ACL GETUSER alice"),
            c(0, "ACL DELUSER carol"),
            c(0, "ACL USERS"),
            c(0, "ACL WHOAMI"),
        ],
    )]
}

/// ACL CAT, ACL GENPASS and ACL HELP.
pub fn cat_genpass_help() -> Vec<Case> {
    let mut steps = vec![
        c(0, "ACL CAT"),
        c(0, "ACL CAT nosuch"),
        c(0, "ACL CAT read write"),
    ];
    for cat in [
        "keyspace",
        "read",
        "write",
        "string",
        "admin",
        "fast",
        "slow",
        "dangerous",
        "connection",
        "transaction",
        "READ",
    ] {
        steps.push(cmp(0, &format!("ACL CAT {cat}"), Cmp::Category));
    }
    let mut genpass = vec![cmp(0, "ACL GENPASS", Cmp::Genpass)];
    for bits in ["1", "4", "5", "32", "64", "255", "256", "4096"] {
        genpass.push(cmp(0, &format!("ACL GENPASS {bits}"), Cmp::Genpass));
    }
    for bad in ["0", "-1", "4097", "abc", "1 2"] {
        genpass.push(c(0, &format!("ACL GENPASS {bad}")));
    }
    vec![
        case("ACL CAT", steps),
        case("ACL GENPASS", genpass),
        case("ACL HELP", vec![c(0, "ACL HELP"), c(0, "ACL HELP extra")]),
    ]
}

/// ACL DRYRUN: command and key verdicts as a string, errors as errors.
pub fn dryrun() -> Vec<Case> {
    let mut steps = vec![c(
        0,
        "ACL SETUSER alice on >p1 +get +set +mget +config|get ~k* %R~r* %W~w*",
    )];
    for cmd in [
        "get k1",
        "get r1",
        "set r1 v",
        "get w1",
        "set w1 v",
        "set k1 v",
        "mget k1 r1",
        "mget k1 w1",
        "mget r1 x",
        "del k1",
        "config get maxmemory",
        "config set maxmemory 0",
        "get",
        "nosuchcmd x",
    ] {
        steps.push(c(0, &format!("ACL DRYRUN alice {cmd}")));
    }
    steps.extend([c(0, "ACL DRYRUN nosuch get k"), c(0, "ACL DRYRUN alice")]);
    vec![case("ACL DRYRUN", steps)]
}

/// NOPERM for commands and keys (read and write patterns), then the ACL
/// LOG they leave, its counts, its length argument and its reset.
pub fn noperm_and_log() -> Vec<Case> {
    let user =
        "ACL SETUSER alice on >p1 +get +set +mget +mset +acl|whoami +config|get ~k* %R~r* %W~w*";
    let mut steps = vec![c(0, user), c(1, "AUTH alice p1")];
    for cmd in [
        "GET k1",
        "SET k1 v",
        "GET r1",
        "SET r1 v",
        "GET w1",
        "SET w1 v",
        "GET x",
        "MGET k1 r1",
        "MGET k1 w1",
        "MSET k1 a w1 b",
        "MSET k1 a r1 b",
        "DEL k1",
        "INCR k1",
        "KEYS *",
        "FLUSHALL",
        "CONFIG GET maxmemory",
        "CONFIG SET maxmemory 0",
        "ACL WHOAMI",
        "ACL LIST",
        "ACL SETUSER alice +@all",
        "GET w1",
        "GET w1",
    ] {
        steps.push(c(1, cmd));
    }
    steps.extend([
        cmp(0, "ACL LOG", Cmp::Log),
        cmp(5, "HELLO 3", Cmp::Hello),
        cmp(5, "ACL LOG 2", Cmp::Log),
        cmp(0, "ACL LOG 2", Cmp::Log),
        cmp(0, "ACL LOG 0", Cmp::Log),
        c(0, "ACL LOG -1"),
        c(0, "ACL LOG x"),
        c(0, "ACL LOG RESET"),
        c(0, "ACL LOG"),
        c(1, "DEL k1"),
        cmp(0, "ACL LOG", Cmp::Log),
    ]);
    let selectors = vec![
        c(
            0,
            "ACL SETUSER bob on >p2 +get ~k* (+set ~s*) (%R~r* +get +mget)",
        ),
        c(2, "AUTH bob p2"),
        c(2, "GET k1"),
        c(2, "SET s1 v"),
        c(2, "GET r1"),
        c(2, "SET k1 v"),
        c(2, "GET s1"),
        c(2, "MGET k1 r1"),
        c(2, "MGET r1"),
        c(2, "SET r1 v"),
        c(0, "ACL DRYRUN bob set s1 v"),
        c(0, "ACL DRYRUN bob set k1 v"),
        c(0, "ACL DRYRUN bob mget k1 r1"),
        cmp(0, "ACL LOG 3", Cmp::Log),
        cmp(3, "HELLO 3", Cmp::Hello),
        c(3, "ACL GETUSER bob"),
    ];
    vec![
        case("NOPERM and ACL LOG", steps),
        case("permissions from selectors", selectors),
    ]
}

/// MULTI/EXEC: commands refused as they are queued abort the EXEC; a
/// permission taken away between queueing and EXEC is checked at EXEC.
pub fn multi() -> Vec<Case> {
    vec![case(
        "MULTI with refused commands",
        vec![
            c(
                0,
                "ACL SETUSER alice on >p1 +multi +exec +discard +get +set ~k*",
            ),
            c(1, "AUTH alice p1"),
            c(1, "MULTI"),
            c(1, "GET k1"),
            c(1, "DEL k1"),
            c(1, "EXEC"),
            c(1, "MULTI"),
            c(1, "SET k1 v"),
            c(1, "SET x v"),
            c(1, "EXEC"),
            c(1, "MULTI"),
            c(1, "SET k1 v"),
            c(1, "GET k1"),
            c(0, "ACL SETUSER alice -get"),
            c(1, "EXEC"),
            c(1, "MULTI"),
            c(1, "SET k2 v"),
            c(0, "ACL SETUSER alice resetkeys ~j*"),
            c(1, "EXEC"),
            cmp(0, "ACL LOG", Cmp::Log),
        ],
    )]
}

/// aclfile: SAVE writes the same text, LOAD replaces the users or, for a
/// file with a bad line, changes nothing and says which line.
pub fn aclfile() -> Vec<Case> {
    let write = |text: &str| Step {
        action: Action::WriteFile(text.to_string()),
        cmp: Cmp::Exact,
    };
    let read = Step {
        action: Action::ReadFile,
        cmp: Cmp::Exact,
    };
    vec![case(
        "aclfile SAVE and LOAD",
        vec![
            c(0, "ACL LIST"),
            c(0, "ACL SETUSER alice on >p1 +get ~k* %R~r* &c"),
            c(0, "ACL SETUSER bob off"),
            c(0, "ACL SAVE"),
            read.clone(),
            c(0, "ACL DELUSER alice bob"),
            c(0, "ACL LOAD"),
            c(0, "ACL LIST"),
            write("user default on nopass ~* &* +@all\nuser carol on >c1 +@read ~c*\n"),
            c(0, "ACL LOAD"),
            c(0, "ACL USERS"),
            c(0, "ACL LIST"),
            c(2, "AUTH carol c1"),
            c(2, "GET c1"),
            c(2, "GET d1"),
            write("user default on nopass ~* &* +@all\nuser dave on +nosuch\n"),
            c(0, "ACL LOAD"),
            c(0, "ACL LIST"),
            write("user default on nopass ~* &* +@all\nnonsense line\n"),
            c(0, "ACL LOAD"),
            write("user default on nopass ~* &* +@all\nuser dave on\nuser dave off\n"),
            c(0, "ACL LOAD"),
            write("user dave on nopass +@all ~*\n"),
            c(0, "ACL LOAD"),
            c(0, "ACL LIST"),
            // carol is gone: her connection's fate after the LOAD.
            c(2, "PING"),
            c(0, "ACL WHOAMI"),
            c(0, "ACL SAVE"),
            read,
        ],
    )]
}

/// `requirepass` given at start is the default user's password.
pub fn requirepass() -> Vec<Case> {
    vec![case(
        "requirepass",
        vec![
            c(0, "PING"),
            c(0, "AUTH wrong"),
            c(0, "AUTH secret"),
            c(0, "ACL LIST"),
            c(0, "ACL GETUSER default"),
            c(1, "AUTH default secret"),
            c(1, "ACL WHOAMI"),
            c(0, "ACL SETUSER alice on >p1 +@all ~*"),
            c(2, "AUTH alice p1"),
            c(2, "ACL WHOAMI"),
            c(3, "HELLO 3 AUTH default wrong"),
            cmp(3, "HELLO 3 AUTH default secret", Cmp::Hello),
            cmp(0, "ACL LOG", Cmp::Log),
        ],
    )]
}

/// Key permissions follow each command's key specs as Redis 7 reads them:
/// ACCESS needs a read pattern; INSERT, DELETE and UPDATE a write one; a
/// key spec with neither (EXISTS, TTL, TYPE) is allowed by any pattern
/// that matches; SET needs read only with GET (its flags vary with its
/// arguments).
pub fn key_specs() -> Vec<Case> {
    let mut steps = vec![
        c(0, "SET r1 a"),
        c(0, "SET w1 b"),
        c(0, "ACL SETUSER alice on >p1 +@all ~k* %R~r* %W~w*"),
        c(1, "AUTH alice p1"),
    ];
    for cmd in [
        "EXISTS r1",
        "EXISTS w1",
        "EXISTS x",
        "TTL w1",
        "PTTL w1",
        "TYPE w1",
        "TOUCH w1",
        "STRLEN w1",
        "STRLEN r1",
        "GETRANGE w1 0 1",
        "GETRANGE r1 0 1",
        "SET w1 v GET",
        "SET r1 v GET",
        "SET k1 v GET",
        "SET w1 v",
        "SETNX w2 v",
        "GETSET w1 v",
        "GETDEL w1",
        "GETEX r1",
        "GETEX w1 PERSIST",
        "APPEND w1 x",
        "INCR w3",
        "DEL r1",
        "DEL w3",
        "UNLINK k1 r1",
        "COPY r1 w2",
        "COPY w1 r2",
        "COPY r1 k2",
        "RENAME r1 w4",
        "RENAME w2 k3",
        "MSET w1 a w2 b",
        "MSET w1 a r2 b",
        "MGET r1 k1",
        "MGET r1 w1",
        "EXPIRE w1 100",
        "EXPIRE r1 100",
        "PERSIST w1",
        "LCS r1 k1",
        "LCS r1 w1",
        "DBSIZE",
        "KEYS r*",
        "SETRANGE w1 0 x",
        "SETBIT w1 0 1",
        "GETBIT w1 0",
        "BITCOUNT r1",
    ] {
        steps.push(c(1, cmd));
    }
    steps.push(cmp(0, "ACL LOG", Cmp::Log));
    vec![case("key specs", steps)]
}

/// Which refusal wins when several apply: unknown command and arity come
/// before NOAUTH, NOAUTH before NOPERM; EXEC and DISCARD refused inside a
/// transaction; a user without @dangerous.
pub fn check_order() -> Vec<Case> {
    vec![
        case(
            "order of checks",
            vec![
                c(0, "ACL SETUSER alice on >p1 +get +multi ~k*"),
                c(0, "ACL SETUSER default >secret"),
                c(1, "NOSUCHCMD x"),
                c(1, "GET"),
                c(1, "GET k1"),
                c(1, "ACL SETUSER x"),
                c(1, "AUTH alice p1"),
                c(1, "NOSUCHCMD x"),
                c(1, "GET"),
                c(1, "SET"),
                c(1, "SET x v"),
                c(1, "MULTI"),
                c(1, "GET k1"),
                c(1, "EXEC"),
                c(1, "GET k1"),
                c(1, "DISCARD"),
                c(1, "GET k1"),
                cmp(0, "ACL LOG", Cmp::Log),
                c(0, "ACL SETUSER default nopass"),
            ],
        ),
        case(
            "a user without @dangerous",
            vec![
                c(0, "ACL SETUSER carol on >p3 +@all -@dangerous ~*"),
                c(0, "ACL GETUSER carol"),
                c(2, "AUTH carol p3"),
                c(2, "SET k v"),
                c(2, "FLUSHALL"),
                c(2, "KEYS *"),
                c(2, "CONFIG GET maxmemory"),
                c(2, "ACL WHOAMI"),
                c(2, "ACL LOG"),
                c(2, "ACL CAT"),
                cmp(3, "HELLO 3", Cmp::Hello),
                c(3, "ACL GETUSER carol"),
            ],
        ),
    ]
}

/// Changes to a connected user: `off`, a new password and `reset` act on
/// its open connection as Redis's do; the ACL LOG keeps its newest 128
/// entries (`acl-log-max-len`).
pub fn changes_and_log_length() -> Vec<Case> {
    let mut steps = vec![
        c(0, "ACL SETUSER alice on >p1 +@all ~*"),
        c(1, "AUTH alice p1"),
        c(0, "ACL SETUSER alice >p2 <p1"),
        c(1, "PING"),
        c(0, "ACL SETUSER alice off"),
        c(1, "PING"),
        c(1, "ACL WHOAMI"),
        c(2, "AUTH alice p2"),
        c(0, "ACL SETUSER alice reset"),
        c(1, "PING"),
        c(0, "ACL SETUSER bob on >p3 +get"),
        c(3, "AUTH bob p3"),
    ];
    for i in 0..130 {
        steps.push(c(3, &format!("GET key{i}")));
    }
    steps.push(cmp(0, "ACL LOG 200", Cmp::Log));
    vec![case("changes to a connected user, the log's length", steps)]
}
