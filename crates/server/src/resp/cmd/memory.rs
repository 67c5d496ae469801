//! MEMORY USAGE, STATS, DOCTOR and HELP: Redis 7.0's replies, from what
//! combkv counts (`Store::memory`, `Store::item_memory`, the clients'
//! buffers). `redis-cli --memkeys` and `--bigkeys` read MEMORY USAGE.

use super::{Ctx, eq_ic, parse_i64, unknown_subcommand};
use crate::resp::error::{CmdError, CmdResult};

/// MEMORY HELP: Redis 7.0's lines for the subcommands combkv has.
const MEMORY_HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
];

pub(super) fn memory(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let sub = cx.args[1];
    let arity = |n: usize, name: &str| -> CmdResult {
        if cx.args.len() != n {
            return Err(CmdError::Arity(format!("memory|{name}")));
        }
        Ok(())
    };
    if eq_ic(sub, "usage") {
        if cx.args.len() < 3 {
            return Err(CmdError::Arity("memory|usage".into()));
        }
        usage(cx)
    } else if eq_ic(sub, "stats") {
        arity(2, "stats")?;
        stats(cx);
        Ok(())
    } else if eq_ic(sub, "doctor") {
        arity(2, "doctor")?;
        let text = doctor(&Figures::now(cx));
        cx.r.verbatim(&text);
        Ok(())
    } else if eq_ic(sub, "help") {
        arity(2, "help")?;
        super::help_reply(&mut cx.r, MEMORY_HELP);
        Ok(())
    } else {
        Err(unknown_subcommand(sub, "MEMORY"))
    }
}

/// MEMORY USAGE key [SAMPLES count]: the bytes the store holds for the
/// key (`Store::item_memory`); nil for a missing key. A value has no
/// nested parts to sample, so SAMPLES is checked, as Redis checks it, and
/// changes nothing.
fn usage(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let mut j = 3;
    while j < cx.args.len() {
        if eq_ic(cx.args[j], "samples") && j + 1 < cx.args.len() {
            let n = parse_i64(cx.args[j + 1]).ok_or(CmdError::NotInteger)?;
            if n < 0 {
                return Err(CmdError::Syntax);
            }
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    match cx.keyspace().item_memory(cx.args[2])? {
        Some(bytes) => cx.r.int(bytes as i64),
        None => cx.r.null(),
    }
    Ok(())
}

/// The figures STATS and DOCTOR report, Redis's names in comments.
struct Figures {
    /// `peak.allocated`
    peak: u64,
    /// `total.allocated`: the store's data and the clients' buffers, what
    /// INFO `used_memory` and `maxmemory` count.
    total: u64,
    /// `startup.allocated`: the store when the server started.
    startup: u64,
    /// `clients.normal`
    clients: u64,
    /// `keys.count`
    keys: u64,
    /// The process's resident size.
    rss: u64,
    connected: u64,
}

impl Figures {
    fn now(cx: &Ctx<'_, '_>) -> Figures {
        use std::sync::atomic::Ordering::Relaxed;
        let s = cx.shared;
        let clients = s.client_buffers();
        let total = cx.store().memory().total() + clients;
        Figures {
            peak: s.used_memory_peak.load(Relaxed).max(total),
            total,
            startup: s.startup_memory,
            clients,
            keys: cx.store().len(),
            rss: s.used_memory_rss.load(Relaxed),
            connected: s.clients.load(Relaxed) as u64,
        }
    }

    fn overhead(&self) -> u64 {
        self.startup + self.clients
    }

    /// What the data took since the start (Redis's `net_usage`).
    fn net(&self) -> u64 {
        self.total.saturating_sub(self.startup)
    }

    fn dataset(&self) -> u64 {
        self.total.saturating_sub(self.overhead())
    }

    /// Redis keeps its ratios as C floats.
    fn ratio(a: u64, b: u64) -> f64 {
        if b == 0 {
            0.0
        } else {
            f64::from(a as f32 / b as f32)
        }
    }
}

/// MEMORY STATS: Redis 7.0's fields, in its order, for the figures combkv
/// has (no allocator statistics, no per-database hash tables: combkv's
/// keys are in one ordered tree, whose structure is `startup.allocated`
/// and then part of `dataset.bytes`).
fn stats(cx: &mut Ctx<'_, '_>) {
    let f = Figures::now(cx);
    let ints: [(&str, u64); 10] = [
        ("peak.allocated", f.peak),
        ("total.allocated", f.total),
        ("startup.allocated", f.startup),
        ("replication.backlog", 0),
        ("clients.slaves", 0),
        ("clients.normal", f.clients),
        ("overhead.total", f.overhead()),
        ("keys.count", f.keys),
        (
            "keys.bytes-per-key",
            f.net().checked_div(f.keys).unwrap_or(0),
        ),
        ("dataset.bytes", f.dataset()),
    ];
    cx.r.map(ints.len() + 4);
    for (name, v) in ints {
        cx.r.bulk_str(name);
        cx.r.int(v as i64);
    }
    cx.r.bulk_str("dataset.percentage");
    cx.r.double(Figures::ratio(f.dataset() * 100, f.net()));
    cx.r.bulk_str("peak.percentage");
    cx.r.double(Figures::ratio(f.total * 100, f.peak));
    cx.r.bulk_str("fragmentation");
    cx.r.double(Figures::ratio(f.rss, f.total));
    cx.r.bulk_str("fragmentation.bytes");
    cx.r.int(f.rss as i64 - f.total as i64);
}

const EMPTY: &str = "Hi Sam, this instance is empty or is using very little memory, my issues \
    detector can't be used in these conditions. Please, leave for your mission on Earth and fill \
    it with some data. The new Sam and I will be back to our programming as soon as I finished \
    rebooting.\n";
const FINE: &str = "Hi Sam, I can't find any memory issue in your instance. I can only account \
    for what occurs on this base.\n";
const PEAK: &str = " * Peak memory: In the past this instance used more than 150% the memory \
    that is currently using. The allocator is normally not able to release memory after a peak, \
    so you can expect to see a big fragmentation ratio, however this is actually harmless and is \
    only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is currently \
    bigger than expected, the memory will be used as soon as you fill the Redis instance with \
    more data. If the memory peak was only occasional and you want to try to reclaim memory, \
    please try the MEMORY PURGE command, otherwise the only other option is to shutdown and \
    restart the instance.\n\n";
const FRAG: &str = " * High total RSS: This instance has a memory fragmentation and RSS \
    overhead greater than 1.4 (this means that the Resident Set Size of the Redis process is much \
    larger than the sum of the logical allocations Redis performed). This problem is usually due \
    either to a large peak memory (check if there is a peak memory entry above in the report) or \
    may result from a workload that causes the allocator to fragment memory a lot. If the \
    problem is a large peak memory, then there is no issue. Otherwise, make sure you are using \
    the Jemalloc allocator and not the default libc malloc. Note: The currently used allocator \
    is \"libc\".\n\n";
const CLIENTS: &str = " * Big client buffers: The clients output buffers in this instance are \
    greater than 200K per client (on average). This may result from different causes, like \
    Pub/Sub clients subscribed to channels bot not receiving data fast enough, so that data piles \
    on the Redis instance output buffer, or clients sending commands with large replies or very \
    large sequences of commands in the same pipeline. Please use the CLIENT LIST command in order \
    to investigate the issue if it causes problems in your instance, or to understand better why \
    certain clients are using a big amount of memory.\n\n";

/// MEMORY DOCTOR: Redis 7.0's report and its tests for what combkv
/// measures: under 5 MiB is too little to judge; a peak over 150% of now;
/// a resident size over 1.4 times the data and 10 MiB more; clients'
/// buffers over 200 KiB each on average.
fn doctor(f: &Figures) -> String {
    if f.total < 5 << 20 {
        return EMPTY.to_string();
    }
    let big_peak = Figures::ratio(f.peak, f.total) > 1.5;
    let high_frag =
        Figures::ratio(f.rss, f.total) > 1.4 && f.rss.saturating_sub(f.total) > 10 << 20;
    let big_clients = f.clients / f.connected.max(1) > 200 << 10;
    if !(big_peak || high_frag || big_clients) {
        return FINE.to_string();
    }
    let mut s =
        String::from("Sam, I detected a few issues in this Redis instance memory implants:\n\n");
    for (found, text) in [(big_peak, PEAK), (high_frag, FRAG), (big_clients, CLIENTS)] {
        if found {
            s.push_str(text);
        }
    }
    s.push_str("I'm here to keep you safe, Sam. I want to help you.\n");
    s
}

#[cfg(test)]
mod tests {
    use super::{Figures, doctor};

    fn figures(total: u64, peak: u64, rss: u64, clients: u64) -> Figures {
        Figures {
            peak,
            total,
            startup: 1 << 20,
            clients,
            keys: 10,
            rss,
            connected: 1,
        }
    }

    #[test]
    fn the_doctor_reports_what_redis_reports() {
        assert!(
            doctor(&figures(1 << 20, 1 << 20, 1 << 20, 0))
                .starts_with("Hi Sam, this instance is empty")
        );
        assert!(doctor(&figures(8 << 20, 8 << 20, 9 << 20, 0)).starts_with("Hi Sam, I can't find"));
        let r = doctor(&figures(8 << 20, 20 << 20, 40 << 20, 1 << 20));
        assert!(r.starts_with("Sam, I detected a few issues"), "{r}");
        assert!(r.contains(" * Peak memory:") && r.contains(" * High total RSS:"));
        assert!(r.contains(" * Big client buffers:"));
        assert!(r.ends_with("I'm here to keep you safe, Sam. I want to help you.\n"));
    }

    #[test]
    fn ratios_are_c_floats() {
        assert_eq!(Figures::ratio(1, 0), 0.0);
        assert_eq!(Figures::ratio(1, 3), f64::from(1.0f32 / 3.0));
    }
}
