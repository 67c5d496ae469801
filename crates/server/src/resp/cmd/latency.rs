//! LATENCY: Redis's latency monitor (`state/latency.rs`: LATEST, HISTORY,
//! RESET, DOCTOR, GRAPH) and per-command latency histograms (HISTOGRAM,
//! from the statistics INFO latencystats reads).

use super::{Ctx, eq_ic, unknown_subcommand};
use crate::resp::error::{CmdError, CmdResult};
use crate::state::cmdstats::{BUCKETS, bucket_edge};

const HELP: &[&str] = &[
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
    "HELP",
];

pub(super) fn latency(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let sub = cx.args[1];
    let n = cx.args.len();
    let text = |i: usize| String::from_utf8_lossy(cx.args[i]).into_owned();
    let monitor = &cx.shared.latency;
    if eq_ic(sub, "latest") && n == 2 {
        let latest = monitor.latest();
        cx.r.array(latest.len());
        for (name, time, ms, max) in latest {
            cx.r.array(4);
            cx.r.bulk_str(name);
            cx.r.int(time as i64);
            cx.r.int(ms as i64);
            cx.r.int(max as i64);
        }
    } else if eq_ic(sub, "history") && n == 3 {
        let samples = monitor.history(&text(2));
        cx.r.array(samples.len());
        for (time, ms) in samples {
            cx.r.array(2);
            cx.r.int(time as i64);
            cx.r.int(ms as i64);
        }
    } else if eq_ic(sub, "reset") {
        let names: Vec<String> = (2..n).map(text).collect();
        cx.r.int(monitor.reset(&names) as i64);
    } else if eq_ic(sub, "doctor") && n == 2 {
        cx.r.verbatim(&doctor(cx));
    } else if eq_ic(sub, "graph") && n == 3 {
        let name = text(2);
        let samples = monitor.history(&name);
        if samples.is_empty() {
            return Err(CmdError::err(format!(
                "No samples available for event '{name}'"
            )));
        }
        cx.r.verbatim(&graph(&name, &samples));
    } else if eq_ic(sub, "histogram") {
        histogram(cx)?;
    } else if eq_ic(sub, "help") && n == 2 {
        super::help_reply(&mut cx.r, HELP);
    } else if ["latest", "history", "doctor", "graph", "help"]
        .iter()
        .any(|s| eq_ic(sub, s))
    {
        return Err(CmdError::Arity(format!(
            "latency|{}",
            String::from_utf8_lossy(sub).to_ascii_lowercase()
        )));
    } else {
        return Err(unknown_subcommand(sub, "LATENCY"));
    }
    Ok(())
}

/// LATENCY HISTOGRAM [command ...]: per command (every one with calls
/// when none is named; names combkv lacks are left out), its calls and
/// the cumulative count at each power-of-two microsecond bucket that holds
/// calls, as Redis answers.
fn histogram(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let wanted: Vec<String> = cx.args[2..]
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let all = cx.shared.command_totals(false);
    let chosen: Vec<_> = all
        .iter()
        .filter(|(name, t)| {
            // A container's name asks for its subcommands, as in Redis.
            let named = |w: &String| {
                w == name
                    || name
                        .strip_prefix(w.as_str())
                        .is_some_and(|r| r.starts_with('|'))
            };
            t.calls > 0 && (wanted.is_empty() || wanted.iter().any(named))
        })
        .collect();
    cx.r.map(chosen.len());
    for (name, t) in chosen {
        cx.r.bulk_str(name);
        cx.r.map(2);
        cx.r.bulk_str("calls");
        cx.r.int(t.calls as i64);
        cx.r.bulk_str("histogram_usec");
        // Power-of-two buckets (four log-linear ones each), cumulative,
        // only those where calls end.
        let mut rows = Vec::new();
        let mut seen = 0u64;
        for (i, chunk) in t.buckets.chunks(4).enumerate() {
            let n: u64 = chunk.iter().sum();
            if n > 0 {
                seen += n;
                let edge_us = (bucket_edge(i * 4 + 3) / 1000).max(1);
                rows.push((edge_us, seen));
            }
        }
        debug_assert!(rows.len() <= BUCKETS / 4);
        cx.r.map(rows.len());
        for (edge, count) in rows {
            cx.r.int(edge as i64);
            cx.r.int(count as i64);
        }
    }
    Ok(())
}

/// LATENCY DOCTOR: what the monitor saw, and what to look at.
fn doctor(cx: &Ctx<'_, '_>) -> String {
    let threshold = cx.shared.live.latency_monitor_threshold();
    let events = cx.shared.latency.events();
    let mut out = String::from("Dave, I have observed the system, and here is what I found:\n\n");
    if threshold == 0 {
        out.push_str(
            "The latency monitor is off: CONFIG SET latency-monitor-threshold <milliseconds> \
             turns it on.\n",
        );
        return out;
    }
    if events.is_empty() {
        out.push_str(&format!(
            "No event took {threshold} milliseconds or more. I have no advice.\n"
        ));
        return out;
    }
    for (i, (name, e)) in events.iter().enumerate() {
        let n = e.samples.len().max(1) as u64;
        let avg = e.samples.iter().map(|s| s.1).sum::<u64>() / n;
        out.push_str(&format!(
            "{}. {name}: {} latency spikes (average {avg}ms, worst {}ms).\n",
            i + 1,
            e.samples.len(),
            e.max
        ));
    }
    out.push_str(
        "\nI have a few advices for you:\n\
         - command, fast-command: look at SLOWLOG GET for the requests, and at the \
         machine's CPU: a single event loop serves every client given to it.\n\
         - expire-cycle: many keys expire at once; spread their TTLs.\n",
    );
    out
}

/// LATENCY GRAPH: the samples as columns of `#`, tallest the slowest.
fn graph(name: &str, samples: &[(u64, u64)]) -> String {
    let max = samples.iter().map(|s| s.1).max().unwrap_or(1).max(1);
    let min = samples.iter().map(|s| s.1).min().unwrap_or(0);
    const ROWS: u64 = 4;
    let mut out = format!("{name} - high {max} ms, low {min} ms (all time high {max} ms)\n");
    out.push_str(&"-".repeat(80));
    out.push('\n');
    for row in (1..=ROWS).rev() {
        for s in samples {
            out.push(if s.1 * ROWS >= row * max { '#' } else { ' ' });
        }
        out.push('\n');
    }
    out
}
