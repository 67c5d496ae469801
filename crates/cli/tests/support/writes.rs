//! Writers that remember what the server acknowledged, and the check that
//! a restarted server still has all of it (the kill -9 tests).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// What the clients were told: key -> acknowledged value; plus, per
/// counter, the highest acknowledged INCR result.
#[derive(Default)]
pub struct Acked {
    pub values: BTreeMap<String, String>,
    /// Keys whose last write was sent but not acknowledged: the old or the
    /// new state may survive (None: a DEL).
    pub in_flight: BTreeMap<String, Option<String>>,
    pub counter: i64,
    pub deleted: Vec<String>,
}

/// Three clients writing `c<cycle>-t<t>-<i>` keys (SET, overwrites, DEL,
/// INCR counter) to the RESP port until the server goes away.
pub fn spawn_writers(acked: &Arc<Mutex<Acked>>, port: u16, cycle: usize) -> Vec<JoinHandle<()>> {
    (0..3)
        .map(|t| {
            let acked = acked.clone();
            std::thread::spawn(move || write_until_gone(&acked, port, cycle, t))
        })
        .collect()
}

fn write_until_gone(acked: &Mutex<Acked>, port: u16, cycle: usize, t: usize) {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let Ok(mut con) = client.get_connection() else {
        return;
    };
    for i in 0u64.. {
        if write_one(acked, &mut con, cycle, t, i).is_err() {
            // The server is gone: this write stays in flight.
            return;
        }
    }
}

/// Client `t`'s write number `i`: a SET of `c<cycle>-t<t>-<i>` (now and
/// then overwriting an earlier key), a DEL of the key before, or an INCR of
/// `counter`, recorded in `acked` once answered. Unanswered (Err), it stays
/// in flight.
pub fn write_one(
    acked: &Mutex<Acked>,
    con: &mut redis::Connection,
    cycle: usize,
    t: usize,
    i: u64,
) -> redis::RedisResult<()> {
    let key = format!("c{cycle}-t{t}-{i}");
    // Overwrite an earlier key now and then, so recovery must keep the
    // newest value, not the first.
    let key = if i % 7 == 3 {
        format!("c{cycle}-t{t}-{}", i / 2)
    } else {
        key
    };
    let value = format!("v{cycle}-{t}-{i}");
    let victim = format!("c{cycle}-t{t}-{}", i.saturating_sub(1));
    let del = i % 13 == 6;
    let (target, after) = if del {
        (victim.clone(), None)
    } else {
        (key.clone(), Some(value.clone()))
    };
    acked
        .lock()
        .unwrap()
        .in_flight
        .insert(target.clone(), after.clone());
    if i % 11 == 5 {
        redis::cmd("INCR")
            .arg("counter")
            .query::<i64>(con)
            .map(|n| {
                let mut a = acked.lock().unwrap();
                a.counter = a.counter.max(n);
            })?;
    } else if del {
        redis::cmd("DEL").arg(&victim).query::<i64>(con).map(|_| {
            let mut a = acked.lock().unwrap();
            a.values.remove(&victim);
            a.deleted.push(victim);
        })?;
    } else {
        redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .query::<()>(con)
            .map(|_| {
                let mut a = acked.lock().unwrap();
                a.values.insert(key.clone(), value.clone());
            })?;
    }
    acked.lock().unwrap().in_flight.remove(&target);
    Ok(())
}

/// Asserts that the server behind `con` has every acknowledged write (an
/// in-flight one may or may not have happened). Returns the number of
/// values checked.
pub fn assert_all_acked(a: &Acked, con: &mut redis::Connection, ctx: &str) -> usize {
    let mut checked = 0;
    for (k, v) in &a.values {
        let got: Option<String> = redis::cmd("GET").arg(k).query(con).unwrap();
        let alt = a.in_flight.get(k);
        assert!(
            got.as_ref() == Some(v) || alt.is_some_and(|alt| *alt == got),
            "{ctx}: acknowledged {k}={v} came back as {got:?}"
        );
        checked += 1;
    }
    for k in &a.deleted {
        if a.values.contains_key(k) {
            continue;
        }
        let got: Option<String> = redis::cmd("GET").arg(k).query(con).unwrap();
        assert!(
            got.is_none() || a.in_flight.contains_key(k),
            "{ctx}: acknowledged DEL {k} undone ({got:?})"
        );
    }
    let counter: Option<i64> = redis::cmd("GET").arg("counter").query(con).unwrap();
    assert!(
        counter.unwrap_or(0) >= a.counter,
        "{ctx}: counter {counter:?} below acknowledged {}",
        a.counter
    );
    checked
}

/// After a repair dropped acknowledged writes on purpose: every key the
/// server has is one a client wrote, with a value written to it; then the
/// model becomes what the server has.
pub fn adopt_server_state(a: &mut Acked, con: &mut redis::Connection, ctx: &str) {
    let keys: Vec<String> = a
        .values
        .keys()
        .chain(a.deleted.iter())
        .chain(a.in_flight.keys())
        .cloned()
        .collect();
    let mut values = BTreeMap::new();
    for k in keys {
        let got: Option<String> = redis::cmd("GET").arg(&k).query(con).unwrap();
        if let Some(v) = got {
            // Values name the key's writer: v<cycle>-<t>-<i> for c<cycle>-t<t>-...
            let mut parts = k.trim_start_matches('c').splitn(2, "-t");
            let (c, t) = (parts.next().unwrap(), parts.next().unwrap_or(""));
            let t = t.split('-').next().unwrap_or("");
            assert!(
                v.starts_with(&format!("v{c}-{t}-")),
                "{ctx}: {k} holds {v}, which no client wrote to it"
            );
            values.insert(k, v);
        }
    }
    a.values = values;
    a.deleted.retain(|k| !a.values.contains_key(k));
    a.in_flight.clear();
    let counter: Option<i64> = redis::cmd("GET").arg("counter").query(con).unwrap();
    a.counter = counter.unwrap_or(0);
}
