//! What every record's value may be, so that each read can be checked.
//!
//! Each record has a slot: whether it is present, whether a bench write to
//! it is in flight, and the update counter of its last completed write. The
//! bench serialises its own writes to one record through the slot (a writer
//! holds the slot's write bit from before its target write until after), so
//! the counters a target stores for a record only ever grow. A read that
//! started when the slot said `lo` and ended when it said `hi` (plus one if a
//! write was in flight) must return a counter in `lo..=hi`: anything older
//! was overwritten before the read began, anything newer was never written.
//!
//! Inserted records are numbered from `initial` up. An inserter claims a
//! number, writes it, then marks it present; [`Model::acked`] is the length
//! of the prefix of present records, the limit that readers draw below (as
//! YCSB's AcknowledgedCounterGenerator), so a read never asks for a record
//! whose insert may not have finished.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Slots per lazily allocated chunk.
const CHUNK_BITS: u32 = 16;
const CHUNK: u64 = 1 << CHUNK_BITS;
/// Most chunks: 2^30 records, far above what a run can insert.
const CHUNKS_MAX: usize = 1 << 14;

const PRESENT: u64 = 1 << 63;
const WRITING: u64 = 1 << 62;
const COUNTER: u64 = u32::MAX as u64;

/// The verification model of one run.
#[derive(Debug)]
pub struct Model {
    chunks: Box<[OnceLock<Box<[AtomicU64]>>]>,
    initial: u64,
    next: AtomicU64,
    acked: AtomicU64,
}

/// A value that the model says its key never had at that time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// The value is not any value of the key (wrong key, torn, wrong length).
    Malformed,
    /// A well-formed value at `got`, outside the allowed `lo..=hi`.
    Counter { got: u32, lo: u32, hi: u32 },
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Malformed => f.write_str("a value this key never has"),
            Mismatch::Counter { got, lo, hi } => write!(
                f,
                "the value at update {got}, but the read must see an update in {lo}..={hi}"
            ),
        }
    }
}

/// Checks a decoded counter (`None`: malformed) against the window.
pub fn check_counter(got: Option<u32>, lo: u32, hi: u32) -> Result<(), Mismatch> {
    match got {
        None => Err(Mismatch::Malformed),
        Some(c) if c < lo || c > hi => Err(Mismatch::Counter { got: c, lo, hi }),
        Some(_) => Ok(()),
    }
}

impl Model {
    /// Records `0..initial` present at counter 0.
    pub fn new(initial: u64) -> Self {
        Model {
            chunks: (0..CHUNKS_MAX).map(|_| OnceLock::new()).collect(),
            initial,
            next: AtomicU64::new(initial),
            acked: AtomicU64::new(initial),
        }
    }

    /// Records loaded before the run.
    pub fn initial(&self) -> u64 {
        self.initial
    }

    #[inline]
    fn slot(&self, i: u64) -> &AtomicU64 {
        let chunk = (i >> CHUNK_BITS) as usize;
        assert!(
            chunk < CHUNKS_MAX,
            "record {i} is past the model's capacity"
        );
        let c = self.chunks[chunk].get_or_init(|| (0..CHUNK).map(|_| AtomicU64::new(0)).collect());
        &c[(i & (CHUNK - 1)) as usize]
    }

    /// Whether the slot state `s` of record `i` says it is present.
    #[inline]
    fn present(&self, i: u64, s: u64) -> bool {
        i < self.initial || s & PRESENT != 0
    }

    /// Records `0..acked()` are all present.
    #[inline]
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }

    /// The lowest counter a read of record `i` starting now may return.
    #[inline]
    pub fn read_begin(&self, i: u64) -> u32 {
        (self.slot(i).load(Ordering::Acquire) & COUNTER) as u32
    }

    /// The highest counter a read of record `i` ending now may return.
    #[inline]
    pub fn read_end(&self, i: u64) -> u32 {
        let s = self.slot(i).load(Ordering::Acquire);
        (s & COUNTER) as u32 + u32::from(s & WRITING != 0)
    }

    /// Takes record `i`'s write bit (waiting for another bench writer) and
    /// returns its current counter. Pair with [`Model::write_end`].
    #[inline]
    pub fn write_begin(&self, i: u64) -> u32 {
        let mut spins = 0u32;
        loop {
            if let Some(c) = self.try_write_begin(i) {
                return c;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // The holder may be descheduled: with as many threads as
                // cores, spinning would only delay it.
                std::thread::yield_now();
            }
        }
    }

    /// Takes record `i`'s write bit if no other bench write holds it, and
    /// returns its current counter; `None` if it is held. A pipelining
    /// client uses this: it may itself hold the bit through a request still
    /// in flight, so it must not wait for it.
    #[inline]
    pub fn try_write_begin(&self, i: u64) -> Option<u32> {
        let slot = self.slot(i);
        loop {
            let s = slot.load(Ordering::Relaxed);
            if s & WRITING != 0 {
                return None;
            }
            if slot
                .compare_exchange_weak(s, s | WRITING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                assert!(self.present(i, s), "write to absent record {i}");
                return Some((s & COUNTER) as u32);
            }
        }
    }

    /// Releases record `i`'s write bit, recording `counter` as written.
    #[inline]
    pub fn write_end(&self, i: u64, counter: u32) {
        let slot = self.slot(i);
        let s = slot.load(Ordering::Relaxed);
        debug_assert!(s & WRITING != 0);
        slot.store((s & PRESENT) | u64::from(counter), Ordering::Release);
    }

    /// Claims the number of a new record to insert.
    #[inline]
    pub fn insert_begin(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Marks record `i` (claimed by [`Model::insert_begin`]) as inserted at
    /// counter 0, and moves [`Model::acked`] over every record now present.
    pub fn insert_end(&self, i: u64) {
        self.slot(i).store(PRESENT, Ordering::Release);
        loop {
            let a = self.acked.load(Ordering::Acquire);
            if a >= self.next.load(Ordering::Acquire)
                || !self.present(a, self.slot(a).load(Ordering::Acquire))
            {
                return;
            }
            // Losing the race means another thread moved it; look again.
            let _ = self
                .acked
                .compare_exchange(a, a + 1, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::key_hash;
    use crate::record::Shape;

    #[test]
    fn window_follows_writes() {
        let m = Model::new(10);
        assert_eq!((m.read_begin(3), m.read_end(3)), (0, 0));
        let c = m.write_begin(3);
        assert_eq!(c, 0);
        assert_eq!(m.try_write_begin(3), None, "the bit is held");
        // In flight: a read may see the old or the new value.
        assert_eq!((m.read_begin(3), m.read_end(3)), (0, 1));
        m.write_end(3, c + 1);
        assert_eq!((m.read_begin(3), m.read_end(3)), (1, 1));
        assert!(check_counter(Some(1), 1, 1).is_ok());
        assert_eq!(
            check_counter(Some(0), 1, 1),
            Err(Mismatch::Counter {
                got: 0,
                lo: 1,
                hi: 1
            })
        );
        assert_eq!(check_counter(None, 0, 5), Err(Mismatch::Malformed));
    }

    #[test]
    fn acked_waits_for_every_earlier_insert() {
        let m = Model::new(5);
        let (a, b, c) = (m.insert_begin(), m.insert_begin(), m.insert_begin());
        assert_eq!((a, b, c), (5, 6, 7));
        m.insert_end(b);
        m.insert_end(c);
        assert_eq!(m.acked(), 5);
        m.insert_end(a);
        assert_eq!(m.acked(), 8);
        // Inserted records live past the first chunk too.
        for _ in 8..CHUNK + 10 {
            let i = m.insert_begin();
            m.insert_end(i);
        }
        assert_eq!(m.acked(), CHUNK + 10);
        assert_eq!(m.write_begin(CHUNK + 3), 0);
        m.write_end(CHUNK + 3, 1);
        assert_eq!(m.read_begin(CHUNK + 3), 1);
    }

    /// The check a read goes through, fed bad reads: a stale value, a value
    /// from the future, another key's value and a corrupted value.
    #[test]
    fn bad_reads_are_caught() {
        let shape = Shape::default();
        let m = Model::new(100);
        let h = key_hash(7);
        for c in 0..3 {
            let old = m.write_begin(7);
            assert_eq!(old, c);
            m.write_end(7, c + 1);
        }
        let (lo, hi) = (m.read_begin(7), m.read_end(7));
        let (mut v, mut scratch) = (Vec::new(), Vec::new());
        let decode = |v: &[u8], s: &mut Vec<u8>| shape.decode_value(h, v, s);
        shape.value_into(h, 3, &mut v);
        assert!(check_counter(decode(&v, &mut scratch), lo, hi).is_ok());
        shape.value_into(h, 2, &mut v);
        assert!(matches!(
            check_counter(decode(&v, &mut scratch), lo, hi),
            Err(Mismatch::Counter { got: 2, .. })
        ));
        shape.value_into(h, 4, &mut v);
        assert!(check_counter(decode(&v, &mut scratch), lo, hi).is_err());
        shape.value_into(key_hash(8), 3, &mut v);
        assert_eq!(
            check_counter(decode(&v, &mut scratch), lo, hi),
            Err(Mismatch::Malformed)
        );
        shape.value_into(h, 3, &mut v);
        v[12] ^= 1;
        assert_eq!(
            check_counter(decode(&v, &mut scratch), lo, hi),
            Err(Mismatch::Malformed)
        );
    }
}
