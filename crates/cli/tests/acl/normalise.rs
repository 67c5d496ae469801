//! How two replies that must differ are made comparable (see acl.rs).

use crate::support::resp::Client;
use crate::support::resp::Value;

/// Which of the names in `reply` (an array) the server at `addr` knows as
/// commands or subcommands (COMMAND INFO).
pub fn known(addr: std::net::SocketAddr, reply: &Value) -> Vec<String> {
    let Value::Array(names) = reply else {
        return Vec::new();
    };
    let names: Vec<String> = names.iter().filter_map(Value::text).collect();
    let mut args = vec!["COMMAND", "INFO"];
    args.extend(names.iter().map(String::as_str));
    match Client::connect(addr).cmd(&args) {
        Value::Array(infos) => names
            .into_iter()
            .zip(infos)
            .filter(|(_, info)| matches!(info, Value::Array(_)))
            .map(|(n, _)| n)
            .collect(),
        _ => Vec::new(),
    }
}

/// `v` with `f` applied to every string in it (simple, bulk, nested).
pub fn map_text(v: Value, f: &dyn Fn(&str) -> String) -> Value {
    let each = |items: Vec<Value>| items.into_iter().map(|i| map_text(i, f)).collect();
    match v {
        Value::Simple(t) => Value::Simple(f(&t)),
        Value::Bulk(b) => Value::Bulk(f(&String::from_utf8_lossy(&b)).into_bytes()),
        Value::Array(items) => Value::Array(each(items)),
        Value::Set(items) => Value::Set(each(items)),
        Value::Map(pairs) => Value::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (map_text(k, f), map_text(v, f)))
                .collect(),
        ),
        other => other,
    }
}

/// Redis 7.0 describes a user's commands as `+@all`/`-@all`, its category
/// rules, then the single commands that still differ in the order of its
/// command table's hash, which is seeded at random per process
/// (`+@read +set -get` one run, `+@read -get +set` the next). Each run of
/// single-command rules (`+get`, `-acl|list`, never `+@cat`) is sorted
/// here, per line; a run never names a command twice, so sorting keeps
/// its meaning.
pub fn sort_command_rules(text: &str) -> String {
    let is_single = |t: &str| {
        let t = t.trim_start_matches('(').trim_end_matches(')');
        (t.starts_with('+') || t.starts_with('-')) && !t[1..].starts_with('@')
    };
    let line = |l: &str| {
        let mut out: Vec<String> = Vec::new();
        let mut run: Vec<&str> = Vec::new();
        let flush = |run: &mut Vec<&str>, out: &mut Vec<String>| {
            // A selector's closing parenthesis stays at the run's end.
            let close = run.last().is_some_and(|t| t.ends_with(')'));
            let mut names: Vec<&str> = run.iter().map(|t| t.trim_end_matches(')')).collect();
            names.sort();
            out.extend(names.iter().map(|n| n.to_string()));
            if close && let Some(last) = out.last_mut() {
                last.push(')');
            }
            run.clear();
        };
        for t in l.split(' ') {
            if is_single(t) && !t.starts_with('(') {
                run.push(t);
            } else {
                flush(&mut run, &mut out);
                out.push(t.to_string());
            }
        }
        flush(&mut run, &mut out);
        out.join(" ")
    };
    text.split('\n').map(line).collect::<Vec<_>>().join("\n")
}

/// The fields an ACL LOG entry has whose values depend on when and from
/// where: dropped before comparing.
pub const LOG_VOLATILE: &[&str] = &[
    "age-seconds",
    "client-info",
    "entry-id",
    "timestamp-created",
    "timestamp-last-updated",
];

/// An ACL LOG reply (RESP2 flat arrays or RESP3 maps) without the
/// volatile fields.
pub fn log(v: Value) -> Value {
    let keep = |k: &Value| !k.text().is_some_and(|k| LOG_VOLATILE.contains(&k.as_str()));
    let entry = |e: Value| match e {
        Value::Array(flat) => {
            let mut out = Vec::new();
            let mut it = flat.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                if keep(&k) {
                    out.extend([k, v]);
                }
            }
            Value::Array(out)
        }
        Value::Map(pairs) => Value::Map(pairs.into_iter().filter(|(k, _)| keep(k)).collect()),
        other => other,
    };
    match v {
        Value::Array(entries) => Value::Array(entries.into_iter().map(entry).collect()),
        other => other,
    }
}

/// A HELLO reply with `id`, `version` and `server` (combkv names itself)
/// replaced by placeholders.
pub fn hello(v: Value) -> Value {
    let blank = |k: &Value, v: Value| match k.text().as_deref() {
        Some("id") => Value::Simple("<id>".into()),
        Some("version") => Value::Simple("<version>".into()),
        Some("server") => Value::Simple("<server>".into()),
        _ => v,
    };
    match v {
        Value::Map(pairs) => Value::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (k.clone(), blank(&k, v)))
                .collect(),
        ),
        Value::Array(flat) => {
            let mut out = Vec::new();
            let mut it = flat.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                let v = blank(&k, v);
                out.extend([k, v]);
            }
            Value::Array(out)
        }
        other => other,
    }
}

/// A GENPASS reply as its type, length and whether it is lowercase hex.
pub fn genpass(v: &Value) -> String {
    match v {
        Value::Bulk(b) => {
            let hex = b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
            format!(
                "bulk of {} {}",
                b.len(),
                if hex {
                    "hex digits"
                } else {
                    "bytes, not all hex"
                }
            )
        }
        other => other.to_string(),
    }
}

/// The `acl_access_denied_*` lines of an INFO reply, in order.
pub fn acl_stats(v: &Value) -> Vec<String> {
    match v.text() {
        Some(text) => text
            .lines()
            .filter(|l| l.starts_with("acl_access_denied_"))
            .map(String::from)
            .collect(),
        None => vec![v.to_string()],
    }
}

/// An array of names as a sorted list; with `only`, just those names.
pub fn sorted_names(v: &Value, only: Option<&[String]>) -> String {
    let Value::Array(items) = v else {
        return v.to_string();
    };
    let mut names: Vec<String> = items
        .iter()
        .map(|i| i.text().unwrap_or_else(|| i.to_string()))
        .collect();
    if let Some(only) = only {
        names.retain(|n| only.contains(n));
    }
    names.sort();
    format!("{names:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorting_command_rules_keeps_categories_and_selectors_in_place() {
        assert_eq!(
            sort_command_rules(
                "user u on ~k* resetchannels -@all +@read +set -get (~s* -@all +set +del)"
            ),
            "user u on ~k* resetchannels -@all +@read +set -get (~s* -@all +del +set)"
        );
        assert_eq!(
            sort_command_rules("-@all +acl|whoami +acl|cat\n+@all -@write -set +get"),
            "-@all +acl|cat +acl|whoami\n+@all -@write +get -set"
        );
    }
}
