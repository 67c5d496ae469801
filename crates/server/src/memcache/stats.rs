//! memcached's `stats` reply. Its counters and the delayed `flush_all`
//! timer, which the listener's connections share, are
//! `crate::state::memcache`.

use std::sync::atomic::Ordering;

use crate::state::memcache::unix_ms;
use crate::state::{Shared, Stats};

/// The version `version` and `stats` report: a memcached version the meta
/// protocol exists in, tagged with combkv's own.
pub const VERSION: &str = concat!("1.6.0-combkv-", env!("CARGO_PKG_VERSION"));

/// CPU time of this process (user, system), as memcached prints them.
fn rusage() -> (String, String) {
    crate::state::shared::cpu_times(false)
}

/// The general-purpose `stats` reply (ends with `END`).
pub fn write_stats(shared: &Shared, out: &mut Vec<u8>) {
    use std::io::Write as _;
    for (name, value) in stat_lines(shared) {
        let _ = write!(out, "STAT {name} {value}\r\n");
    }
    out.extend_from_slice(b"END\r\n");
}

/// The general-purpose statistics, named and ordered as memcached's
/// `stats` lists them (the text reply and the binary protocol's `stat`).
pub fn stat_lines(shared: &Shared) -> Vec<(&'static str, String)> {
    let s = &shared.stats;
    let mc = &shared.memcache.stats;
    let (ru_user, ru_system) = rusage();
    let now_s = unix_ms() / 1000;
    let mut lines: Vec<(&'static str, String)> = vec![
        ("pid", std::process::id().to_string()),
        ("uptime", shared.uptime().as_secs().to_string()),
        ("time", now_s.to_string()),
        ("version", VERSION.to_string()),
        (
            "pointer_size",
            (8 * std::mem::size_of::<usize>()).to_string(),
        ),
        ("rusage_user", ru_user),
        ("rusage_system", ru_system),
        ("max_connections", shared.live.maxclients().to_string()),
        (
            "curr_connections",
            shared.clients.load(Ordering::Relaxed).to_string(),
        ),
        (
            "total_connections",
            Stats::get(&s.connections_received).to_string(),
        ),
        (
            "rejected_connections",
            Stats::get(&s.connections_rejected).to_string(),
        ),
    ];
    for (name, c) in mc.all() {
        if name != "total_items" {
            lines.push((name, c.get().to_string()));
        }
    }
    // memcached's `bytes`: what its items take, here what the store holds.
    let used = shared.current_store().memory().total();
    lines.extend([
        ("bytes_read", Stats::get(&s.net_input_bytes).to_string()),
        ("bytes_written", Stats::get(&s.net_output_bytes).to_string()),
        ("limit_maxbytes", shared.live.maxmemory().to_string()),
        ("threads", shared.config.thread_count().to_string()),
        ("bytes", used.to_string()),
        ("curr_items", shared.keys().to_string()),
        ("total_items", mc.total_items.get().to_string()),
        ("evictions", "0".to_string()),
    ]);
    lines
}

/// Writes `STAT <name> <value>` lines and `END`.
fn write_lines<N: std::fmt::Display>(out: &mut Vec<u8>, lines: &[(N, String)]) {
    use std::io::Write as _;
    for (name, value) in lines {
        let _ = write!(out, "STAT {name} {value}\r\n");
    }
    out.extend_from_slice(b"END\r\n");
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

/// `stats settings`: memcached's names for the settings combkv has, with
/// its values. Settings of machinery combkv lacks (slab sizes, the LRU
/// maintainer, extstore) are left out rather than made up; `evictions` is
/// off because a store over `maxmemory` refuses writes instead of evicting,
/// `lru_crawler` is off because there is none (`lru_crawler metadump` is
/// served without it).
pub fn settings_lines(shared: &Shared) -> Vec<(&'static str, String)> {
    use crate::config::Listen;
    let c = &shared.config;
    let port = |l: Listen| match l {
        Listen::At(a) => a.port(),
        Listen::Off => 0,
    };
    let inter = match c.memcached {
        Listen::At(a) => a.ip().to_string(),
        Listen::Off => "NULL".to_string(),
    };
    let auth = shared.acl.default_requires_auth();
    vec![
        ("maxbytes", shared.live.maxmemory().to_string()),
        ("maxconns", shared.live.maxclients().to_string()),
        ("tcpport", port(c.memcached).to_string()),
        ("udpport", port(c.memcached_udp).to_string()),
        ("inter", inter),
        // `verbosity` is accepted and changes nothing.
        ("verbosity", "0".to_string()),
        ("evictions", "off".to_string()),
        ("num_threads", c.thread_count().to_string()),
        ("cas_enabled", yes_no(true)),
        ("binding_protocol", "auto-negotiate".to_string()),
        ("auth_enabled_sasl", yes_no(auth)),
        ("auth_enabled_ascii", yes_no(auth)),
        (
            "item_size_max",
            shared.current_store().max_value_len().to_string(),
        ),
        // A connection past `maxconns` is answered and closed at once.
        ("maxconns_fast", yes_no(true)),
        ("shutdown_command", yes_no(c.memcached_shutdown)),
        ("flush_enabled", yes_no(true)),
        ("dump_enabled", yes_no(true)),
        ("lru_crawler", yes_no(false)),
        ("idle_timeout", "0".to_string()),
        ("ssl_enabled", yes_no(c.tls_memcached != Listen::Off)),
    ]
}

/// The binary protocol's `stat <group>` groups beside the general one and
/// `reset` (memcached serves `conns` over text only).
pub fn group_lines(shared: &Shared, group: &[u8]) -> Option<Vec<(String, String)>> {
    let owned = |v: Vec<(&'static str, String)>| v.into_iter().map(|(n, v)| (n.to_string(), v));
    Some(match group {
        b"settings" => owned(settings_lines(shared)).collect(),
        b"items" => items_lines(shared),
        b"slabs" => slabs_lines(shared),
        b"sizes" => vec![("sizes_status".to_string(), "disabled".to_string())],
        _ => return None,
    })
}

pub fn write_settings(shared: &Shared, out: &mut Vec<u8>) {
    write_lines(out, &settings_lines(shared));
}

/// `stats items`. combkv has no slab classes: every item is reported in
/// one class, class 1, with what is known of it: how many (`number`), the
/// bytes the store holds for them (`mem_requested`), and `outofmemory`
/// (stores refused for `maxmemory`). The oldest item's age is not kept
/// (`age` 0), and nothing is ever evicted. An empty store lists no class,
/// as memcached lists only classes that hold items.
pub fn items_lines(shared: &Shared) -> Vec<(String, String)> {
    let store = shared.current_store();
    let number = store.len();
    if number == 0 {
        return Vec::new();
    }
    let oom = shared.memcache.stats.store_no_memory.get();
    [
        ("number", number),
        ("age", 0),
        ("mem_requested", store.memory().total()),
        ("evicted", 0),
        ("evicted_nonzero", 0),
        ("evicted_time", 0),
        ("outofmemory", oom),
    ]
    .into_iter()
    .map(|(n, v)| (format!("items:1:{n}"), v.to_string()))
    .collect()
}

pub fn write_items(shared: &Shared, out: &mut Vec<u8>) {
    write_lines(out, &items_lines(shared));
}

/// `stats slabs`: the one class of `stats items`, with the hit counters of
/// `stats` (every item is in it, so they are the class's), `used_chunks`
/// one per item, and `total_malloced` the bytes the store holds. Chunk and
/// page geometry is not reported: combkv has none.
pub fn slabs_lines(shared: &Shared) -> Vec<(String, String)> {
    let store = shared.current_store();
    let number = store.len();
    let mc = &shared.memcache.stats;
    let mut lines = Vec::new();
    if number > 0 {
        let class = [
            ("used_chunks", number),
            ("get_hits", mc.get_hits.get()),
            ("cmd_set", mc.cmd_set.get()),
            ("delete_hits", mc.delete_hits.get()),
            ("incr_hits", mc.incr_hits.get()),
            ("decr_hits", mc.decr_hits.get()),
            ("cas_hits", mc.cas_hits.get()),
            ("cas_badval", mc.cas_badval.get()),
            ("touch_hits", mc.touch_hits.get()),
        ];
        lines.extend(class.map(|(n, v)| (format!("1:{n}"), v.to_string())));
    }
    lines.push((
        "active_slabs".to_string(),
        u64::from(number > 0).to_string(),
    ));
    lines.push((
        "total_malloced".to_string(),
        store.memory().total().to_string(),
    ));
    lines
}

pub fn write_slabs(shared: &Shared, out: &mut Vec<u8>) {
    write_lines(out, &slabs_lines(shared));
}

/// `stats sizes`: combkv keeps no item size histogram, which memcached
/// reports as its size tracking being off.
pub fn write_sizes(out: &mut Vec<u8>) {
    write_lines(out, &[("sizes_status", "disabled".to_string())]);
}

/// `stats conns`: each open memcached connection (TCP, TLS) by its client
/// id where memcached names its descriptor, with its peer (`addr`), its own
/// end (`listen_addr`), its state and the seconds since its last request.
/// A connection is either running a request (the one asking) or waiting
/// for one; memcached's other states (reading a value, writing) pass
/// within one turn here and are not seen. The listening sockets memcached
/// also lists are left out: they have no client id.
pub fn conns_lines(shared: &Shared, me: u64) -> Vec<(String, String)> {
    let clients: Vec<_> = shared
        .client_registry
        .lock()
        .values()
        .filter(|c| c.protocol == "memcached")
        .cloned()
        .collect();
    let mut lines = Vec::new();
    for c in clients {
        let id = c.id;
        lines.push((format!("{id}:addr"), format!("tcp:{}", c.addr)));
        if let Some(l) = c.laddr {
            lines.push((format!("{id}:listen_addr"), format!("tcp:{l}")));
        }
        let state = if id == me {
            "conn_parse_cmd"
        } else {
            "conn_waiting"
        };
        lines.push((format!("{id}:state"), state.to_string()));
        lines.push((
            format!("{id}:secs_since_last_cmd"),
            c.idle().as_secs().to_string(),
        ));
    }
    lines
}

pub fn write_conns(shared: &Shared, me: u64, out: &mut Vec<u8>) {
    write_lines(out, &conns_lines(shared, me));
}
