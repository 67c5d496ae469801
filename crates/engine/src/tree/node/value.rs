//! Out-of-line values: a value longer than the inline limit lives in an
//! allocation of its own, which the node buffers holding its item and the
//! readers it was handed to share.
//!
//! The allocation is an `Arc<[AtomicU64]>`: word 0 counts the node buffers
//! that reference the value, the value's bytes start at word 1 (the last
//! word zero-padded). An item stores the address of those bytes; readers
//! read them in place. The `Arc`'s strong count keeps the allocation alive
//! for buffers and readers alike; word 0 counts only the buffers, so that
//! the store can tell when it stops holding the value (the last buffer
//! that references it is freed: `release`) even while a reader still
//! holds it. That is when `Store::memory` stops counting it: exactly once
//! per value, however many buffers (a leaf and the buffers that replaced
//! it) shared it meanwhile.
//!
//! Words rather than bytes: word 0 is written while buffers and readers
//! share the allocation, which is sound only through a type with interior
//! mutability (`AtomicU64`); a `&[u8]` is made only over the value's own
//! bytes, which nothing writes once the allocation is shared. Core atomics,
//! not `crate::sync`'s: the layout is fixed.

use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Values some buffer of some store in this process references: one per
/// `create`, taken back by the `release` that finds it last. Touched once
/// per value, not per buffer that shares it (a merge shares every value of
/// its leaf). Tests check it returns to zero (`live_external_values_global`).
static HELD: AtomicUsize = AtomicUsize::new(0);

/// See `HELD`.
pub(crate) fn held_globally() -> usize {
    HELD.load(Ordering::SeqCst)
}

thread_local! {
    /// Bytes of the values this thread created since it last reset the
    /// figure (`reset_created`): writers collect garbage by it as well as
    /// by their count, since a replaced 1 MB value weighs what thousands of
    /// small writes do.
    static CREATED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Starts this thread's `created` figure again from zero.
pub(crate) fn reset_created() {
    CREATED.with(|c| c.set(0));
}

/// The bytes of values this thread created since `reset_created`.
pub(crate) fn created() -> u64 {
    CREATED.with(|c| c.get())
}

/// `Arc<[AtomicU64]>`'s data starts after its two counts.
const ARC_COUNTS_BYTES: usize = 2 * std::mem::size_of::<usize>();

/// Words of the allocation of a value of `len` bytes.
#[inline(always)]
fn words(len: usize) -> usize {
    1 + len.div_ceil(8)
}

/// The bytes an out-of-line value of `len` bytes costs: its allocation
/// (the `Arc`'s counts, word 0, the value padded to words). What
/// `Store::memory` counts for it.
pub(crate) fn allocation_bytes(len: usize) -> u64 {
    (ARC_COUNTS_BYTES + 8 * words(len)) as u64
}

/// The allocation whose value bytes start at `p`.
#[inline(always)]
fn allocation(p: *const u8, len: usize) -> *const [AtomicU64] {
    ptr::slice_from_raw_parts(p.cast::<AtomicU64>().wrapping_sub(1), words(len))
}

/// A new allocation holding `bytes`, referenced by one buffer (the caller's,
/// which owns its strong count); returns the address of its value bytes.
pub(crate) fn create(bytes: &[u8]) -> *const u8 {
    let n = words(bytes.len());
    let mut arc = Arc::<[AtomicU64]>::new_uninit_slice(n);
    let slots = Arc::get_mut(&mut arc).expect("a new Arc is unique");
    // SAFETY: the slice holds `n` words (`AtomicU64` is laid out as a
    // `u64`), all written below before `assume_init`: the last word zeroed
    // (the value's padding), word 0 set, then the value copied over words
    // 1.. (within `n * 8` bytes: `words` rounds up).
    let arc = unsafe {
        let base = slots.as_mut_ptr();
        ptr::write(base.add(n - 1).cast::<u64>(), 0);
        ptr::write(base.cast::<u64>(), 1);
        ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(1).cast::<u8>(), bytes.len());
        arc.assume_init()
    };
    HELD.fetch_add(1, Ordering::Relaxed);
    CREATED.with(|c| c.set(c.get() + bytes.len() as u64));
    let raw = Arc::into_raw(arc);
    raw.cast::<AtomicU64>().wrapping_add(1).cast::<u8>()
}

/// Another buffer references the value at `p`: two atomic adds on the
/// allocation's first line, nothing shared beyond it.
///
/// # Safety
/// `p` and `len` name a live value (from `create`) that a buffer the
/// caller keeps reachable references.
#[inline]
pub(crate) unsafe fn share(p: *const u8, len: usize) {
    let a = allocation(p, len);
    // SAFETY: per the contract the allocation is live; word 0 is its first
    // element.
    unsafe {
        (*a.cast::<AtomicU64>()).fetch_add(1, Ordering::Relaxed);
        Arc::increment_strong_count(a);
    }
}

/// A buffer that referenced the value at `p` is freed. True if it was the
/// last buffer to (the store no longer holds the value; readers may).
///
/// # Safety
/// The caller's buffer owns one reference (from `create` or `share`) and
/// gives it up here, once.
#[inline]
pub(crate) unsafe fn release(p: *const u8, len: usize) -> bool {
    let a = allocation(p, len);
    // SAFETY: the caller's reference keeps the allocation alive until the
    // strong count it owns is given back, last.
    unsafe {
        let last = (*a.cast::<AtomicU64>()).fetch_sub(1, Ordering::Relaxed) == 1;
        if last {
            HELD.fetch_sub(1, Ordering::Relaxed);
        }
        Arc::decrement_strong_count(a);
        last
    }
}

/// A reader's handle on the value at `p`: the value's bytes, shared.
///
/// # Safety
/// As for `share`.
pub(crate) unsafe fn to_bytes(p: *const u8, len: usize) -> bytes::Bytes {
    let a = allocation(p, len);
    // SAFETY: per the contract the allocation is live; the new strong count
    // is the reader's.
    let arc = unsafe {
        Arc::increment_strong_count(a);
        Arc::from_raw(a)
    };
    bytes::Bytes::from_owner(Shared { arc, len })
}

/// What a reader's `Bytes` owns: one strong count of the allocation.
struct Shared {
    arc: Arc<[AtomicU64]>,
    len: usize,
}

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the value's `len` bytes start at word 1 and are never
        // written once the allocation is shared; the `Arc` keeps them.
        unsafe {
            std::slice::from_raw_parts(
                Arc::as_ptr(&self.arc)
                    .cast::<AtomicU64>()
                    .add(1)
                    .cast::<u8>(),
                self.len,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_buffer_is_told_even_while_a_reader_holds_the_value() {
        for len in [1usize, 7, 8, 9, 470, 4096, 4099] {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let p = create(&bytes);
            // SAFETY: `p` is live: its first buffer's reference is held
            // until the last `release`.
            unsafe {
                assert_eq!(std::slice::from_raw_parts(p, len), &bytes[..]);
                share(p, len);
                let read = to_bytes(p, len);
                assert!(!release(p, len), "another buffer still holds it");
                assert!(release(p, len), "the last buffer");
                // The reader's copy outlives the buffers.
                assert_eq!(&read[..], &bytes[..]);
                let again = read.clone();
                drop(read);
                assert_eq!(&again[..], &bytes[..]);
            }
            assert!(allocation_bytes(len) >= len as u64 + 24);
        }
    }
}
