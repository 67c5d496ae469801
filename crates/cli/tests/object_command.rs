//! OBJECT against a redis-server: the encodings of values SET stores (by
//! their shape: int, embstr, raw), nil for a missing key, and the errors
//! (arity, unknown subcommand, FREQ without an LFU policy) as Redis words
//! them. REFCOUNT, IDLETIME and the help text are combkv's own where it
//! tracks less than Redis (see `resp/cmd/object.rs`), checked here too.

mod support;

use support::resp::{Beside, Value};

#[test]
fn encodings_and_errors_match_redis() {
    // The servers are bound too: they stop when the test ends.
    let Some(Beside {
        redis: _redis,
        combkv: _combkv,
        mut r,
        mut c,
    }) = Beside::start()
    else {
        return;
    };
    let embstr_max = "e".repeat(44);
    let raw = "r".repeat(45);
    let big = "b".repeat(5000);
    let values: &[(&str, &str)] = &[
        ("small", "7"),
        ("negative", "-5"),
        ("max", "9223372036854775807"),
        ("min", "-9223372036854775808"),
        ("too_big", "9223372036854775808"),
        ("twenty_digits", "12345678901234567890"),
        ("leading_zero", "007"),
        ("plus", "+1"),
        ("space", " 1"),
        ("float", "1.5"),
        ("empty", ""),
        ("word", "hello"),
        ("embstr_max", &embstr_max),
        ("raw", &raw),
        ("big", &big),
    ];
    for cl in [&mut r, &mut c] {
        for (key, value) in values {
            assert_eq!(cl.cmd(&["SET", key, value]), Value::Simple("OK".into()));
        }
        // INCR and INCRBYFLOAT leave an int and a short text.
        assert_eq!(cl.cmd(&["INCR", "counter"]), Value::Int(1));
        cl.cmd(&["INCRBYFLOAT", "fl", "2.5"]);
    }
    let mut steps: Vec<Vec<&str>> = values
        .iter()
        .map(|(key, _)| vec!["OBJECT", "ENCODING", key])
        .collect();
    let fixed: &[&[&str]] = &[
        &["OBJECT", "ENCODING", "counter"],
        &["OBJECT", "ENCODING", "fl"],
        &["OBJECT", "encoding", "nope"],
        &["OBJECT", "REFCOUNT", "nope"],
        &["OBJECT", "IDLETIME", "nope"],
        &["OBJECT", "FREQ", "nope"],
        // No LFU policy: Redis's error, which is combkv's too.
        &["OBJECT", "FREQ", "word"],
        // Not a shared integer: one reference in both.
        &["OBJECT", "REFCOUNT", "word"],
        &["OBJECT", "REFCOUNT", "negative"],
        &["OBJECT"],
        &["OBJECT", "ENCODING"],
        &["OBJECT", "ENCODING", "word", "extra"],
        &["OBJECT", "REFCOUNT", "word", "extra"],
        &["OBJECT", "IDLETIME"],
        &["OBJECT", "FREQ", "a", "b"],
        &["OBJECT", "HELP", "x"],
        &["OBJECT", "FOO"],
        &["OBJECT", "FOO", "word"],
        &["OBJECT", "HELP"],
    ];
    steps.extend(fixed.iter().map(|s| s.to_vec()));
    for step in &steps {
        let theirs = r.cmd(step);
        // combkv answers HELP as Redis 7.2 words it (INFO says 7.2.0).
        let theirs = match theirs {
            Value::Array(lines) => Value::Array(
                lines
                    .into_iter()
                    .map(|l| match l {
                        Value::Simple(s) if s == "    Prints this help." => {
                            Value::Simple("    Print this help.".into())
                        }
                        other => other,
                    })
                    .collect(),
            ),
            other => other,
        };
        assert_eq!(c.cmd(step), theirs, "{step:?}");
    }
    // Redis shares the integers 0 to 9999; combkv keeps each value once
    // per key.
    assert_eq!(
        r.cmd(&["OBJECT", "REFCOUNT", "small"]),
        Value::Int(i64::from(i32::MAX))
    );
    assert_eq!(c.cmd(&["OBJECT", "REFCOUNT", "small"]), Value::Int(1));
    // Redis has an access clock; combkv refuses rather than make one up.
    assert!(matches!(
        r.cmd(&["OBJECT", "IDLETIME", "word"]),
        Value::Int(_)
    ));
    match c.cmd(&["OBJECT", "IDLETIME", "word"]) {
        Value::Error(e) => assert!(e.starts_with("ERR idle time not tracked"), "{e}"),
        other => panic!("OBJECT IDLETIME: {other}"),
    }
}
