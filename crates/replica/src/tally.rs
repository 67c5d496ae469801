//! How many ops and results this process turned into bytes and back
//! (`INFO cluster`). A write is meant to cross each hop once: encoded where
//! it is decided, decoded where the log applies it, and its result encoded
//! and decoded only when it answers a forwarded write. These counts let a
//! test, and an operator, see that it does.

use std::sync::atomic::{AtomicU64, Ordering};

static OPS_ENCODED: AtomicU64 = AtomicU64::new(0);
static OPS_DECODED: AtomicU64 = AtomicU64::new(0);
static RESULTS_ENCODED: AtomicU64 = AtomicU64::new(0);
static RESULTS_DECODED: AtomicU64 = AtomicU64::new(0);

/// The process's codec counts since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CodecTally {
    /// Ops encoded for a log entry or a forwarded batch.
    pub ops_encoded: u64,
    /// Ops decoded from a log entry or a forwarded batch.
    pub ops_decoded: u64,
    /// Results encoded to answer a forwarded batch.
    pub results_encoded: u64,
    /// Results decoded from a forwarded batch's answer.
    pub results_decoded: u64,
}

/// The counts so far.
pub fn codec_tally() -> CodecTally {
    CodecTally {
        ops_encoded: OPS_ENCODED.load(Ordering::Relaxed),
        ops_decoded: OPS_DECODED.load(Ordering::Relaxed),
        results_encoded: RESULTS_ENCODED.load(Ordering::Relaxed),
        results_decoded: RESULTS_DECODED.load(Ordering::Relaxed),
    }
}

pub(crate) fn ops_encoded(n: usize) {
    OPS_ENCODED.fetch_add(n as u64, Ordering::Relaxed);
}

pub(crate) fn ops_decoded(n: usize) {
    OPS_DECODED.fetch_add(n as u64, Ordering::Relaxed);
}

pub(crate) fn results_encoded(n: usize) {
    RESULTS_ENCODED.fetch_add(n as u64, Ordering::Relaxed);
}

pub(crate) fn results_decoded(n: usize) {
    RESULTS_DECODED.fetch_add(n as u64, Ordering::Relaxed);
}
