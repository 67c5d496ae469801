//! Redis's latency monitor: events that took at least
//! `latency-monitor-threshold` milliseconds (`command`, `fast-command`,
//! `expire-cycle`), each with its last 160 samples, one a second (the
//! slowest in that second), and its all-time maximum. LATENCY LATEST,
//! HISTORY, RESET and DOCTOR read it.

use std::collections::{BTreeMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// Samples kept per event (Redis's `LATENCY_TS_LEN`).
const SAMPLES: usize = 160;

/// One event's samples: (unix seconds, milliseconds), oldest first.
#[derive(Debug, Default, Clone)]
pub struct Event {
    pub samples: VecDeque<(u64, u64)>,
    pub max: u64,
}

#[derive(Debug, Default)]
pub struct LatencyMonitor {
    events: Mutex<BTreeMap<&'static str, Event>>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl LatencyMonitor {
    /// `event` took `ms` milliseconds (already found at or over the
    /// threshold). Within one second only the slowest sample is kept.
    pub fn record(&self, event: &'static str, ms: u64) {
        let now = now_secs();
        let mut events = self.events.lock();
        let e = events.entry(event).or_default();
        e.max = e.max.max(ms);
        match e.samples.back_mut() {
            Some((t, latency)) if *t == now => *latency = (*latency).max(ms),
            _ => {
                e.samples.push_back((now, ms));
                if e.samples.len() > SAMPLES {
                    e.samples.pop_front();
                }
            }
        }
    }

    /// Every event's (name, last sample's time, its latency, max).
    pub fn latest(&self) -> Vec<(&'static str, u64, u64, u64)> {
        self.events
            .lock()
            .iter()
            .filter_map(|(name, e)| e.samples.back().map(|(t, ms)| (*name, *t, *ms, e.max)))
            .collect()
    }

    /// One event's samples, oldest first (none for an unknown event).
    pub fn history(&self, event: &str) -> Vec<(u64, u64)> {
        self.events
            .lock()
            .get(event)
            .map(|e| e.samples.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Forgets the named events (every one when `names` is empty); how
    /// many there were.
    pub fn reset(&self, names: &[String]) -> usize {
        let mut events = self.events.lock();
        if names.is_empty() {
            let n = events.len();
            events.clear();
            return n;
        }
        names
            .iter()
            .filter(|n| events.remove(n.as_str()).is_some())
            .count()
    }

    pub fn events(&self) -> BTreeMap<&'static str, Event> {
        self.events.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_a_second_the_slowest_and_a_max() {
        let m = LatencyMonitor::default();
        m.record("command", 5);
        m.record("command", 9);
        m.record("command", 3);
        m.record("fast-command", 1);
        let h = m.history("command");
        assert!(h.len() <= 2, "{h:?}");
        assert_eq!(h.iter().map(|s| s.1).max(), Some(9));
        let latest = m.latest();
        assert_eq!(latest.len(), 2);
        assert_eq!(latest[0].0, "command");
        assert_eq!(latest[0].3, 9);
        assert!(m.history("nothing").is_empty());
        assert_eq!(m.reset(&["nothing".into()]), 0);
        assert_eq!(m.reset(&["fast-command".into()]), 1);
        assert_eq!(m.reset(&[]), 1);
        assert!(m.latest().is_empty());
    }
}
