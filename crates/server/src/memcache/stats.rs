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
        ("curr_items", shared.current_store().len().to_string()),
        ("total_items", mc.total_items.get().to_string()),
        ("evictions", "0".to_string()),
    ]);
    lines
}
