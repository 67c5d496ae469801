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

use std::mem::MaybeUninit;
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
/// If `bytes` are the bytes of the [`ReceivedValue`] this thread offered
/// ([`ReceivedValue::offer`]), that allocation is taken as it is: no copy.
pub(crate) fn create(bytes: &[u8]) -> *const u8 {
    let p = adopt(bytes).unwrap_or_else(|| copy(bytes));
    HELD.fetch_add(1, Ordering::Relaxed);
    CREATED.with(|c| c.set(c.get() + bytes.len() as u64));
    p
}

/// `create`'s copy: a new allocation with word 0 set to one buffer.
fn copy(bytes: &[u8]) -> *const u8 {
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
    into_value_ptr(arc)
}

/// Gives up `arc`'s strong count to the buffer that references it: the
/// address of its value bytes.
fn into_value_ptr(arc: Arc<[AtomicU64]>) -> *const u8 {
    let raw = Arc::into_raw(arc);
    raw.cast::<AtomicU64>().wrapping_add(1).cast::<u8>()
}

/// The offered allocation, if `bytes` are exactly its value bytes and no
/// buffer references it: word 0 goes from 0 to 1 (one buffer) and the
/// offer's strong count becomes the buffer's. Otherwise the offer stays.
fn adopt(bytes: &[u8]) -> Option<*const u8> {
    let (arc, len) = OFFERED.with(|o| o.take())?;
    let mine = len == bytes.len()
        && ptr::eq(value_bytes(&arc, len).as_ptr(), bytes.as_ptr())
        // A value a buffer references already (offered again after it
        // was taken) is copied: word 0 counts each buffer once.
        && arc[0]
            .compare_exchange(0, 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
    if !mine {
        OFFERED.with(|o| o.set(Some((arc, len))));
        return None;
    }
    ADOPTED.fetch_add(1, Ordering::Relaxed);
    Some(into_value_ptr(arc))
}

thread_local! {
    /// The value this thread offered to the next write that stores its
    /// bytes out of line (`ReceivedValue::offer`), and its length.
    static OFFERED: std::cell::Cell<Option<(Arc<[AtomicU64]>, usize)>> =
        const { std::cell::Cell::new(None) };
}

/// Offered values a write took instead of copying them (tests and
/// statistics: [`adopted_values_global`]).
static ADOPTED: AtomicUsize = AtomicUsize::new(0);

/// How many values offered with [`ReceivedValue::offer`] the store took as they
/// were, without copying them, in this process so far.
pub fn adopted_values_global() -> usize {
    ADOPTED.load(Ordering::Relaxed)
}

/// The `len` value bytes of an allocation: from word 1.
fn value_bytes(arc: &Arc<[AtomicU64]>, len: usize) -> &[u8] {
    debug_assert!(words(len) <= arc.len());
    // SAFETY: the allocation holds `words(len)` words, the value's `len`
    // bytes from word 1 (`words` rounds up); nothing writes them while a
    // shared `&Arc` exists (a `ValueBuf` writes only through its unique
    // `&mut`, and stored values are never written).
    unsafe { std::slice::from_raw_parts(arc.as_ptr().add(1).cast::<u8>(), len) }
}

/// A large value being received (a client's bulk string read from its
/// socket), in an allocation laid out as the store keeps out-of-line
/// values: once full ([`ValueBuf::finish`]) and offered, a write stores it
/// without copying it. Its bytes are not zeroed first (a pass over the
/// whole value, as dear as the copy it saves): they are written by the
/// socket's reads (`read_from`) or copied in, and only a reader that needs
/// a slice to write into (`fill_with`) has the rest zeroed first.
#[derive(Debug)]
pub struct ValueBuf {
    /// Unique until `finish`. Word 0 (no buffer references it) and the
    /// last word (the padding after the value) are written when it is
    /// made; the value's bytes `0..filled` are written, and so are
    /// `0..zeroed`.
    arc: Arc<[MaybeUninit<AtomicU64>]>,
    len: usize,
    filled: usize,
    zeroed: usize,
}

impl ValueBuf {
    /// Room for a value of `len` bytes, none of them filled.
    pub fn new(len: usize) -> ValueBuf {
        let n = words(len);
        let mut arc = Arc::<[AtomicU64]>::new_uninit_slice(n);
        let slots = Arc::get_mut(&mut arc).expect("a new Arc is unique");
        // SAFETY: the slice holds `n >= 1` words; word 0 and word `n - 1`
        // are in it (the same word when the value is empty).
        unsafe {
            let base = slots.as_mut_ptr();
            ptr::write(base.add(n - 1).cast::<u64>(), 0);
            ptr::write(base.cast::<u64>(), 0);
        }
        ValueBuf {
            arc,
            len,
            filled: 0,
            zeroed: 0,
        }
    }

    /// The value's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes still to fill.
    pub fn remaining(&self) -> usize {
        self.len - self.filled
    }

    /// The address of the value's first unfilled byte, and how many follow.
    fn unfilled_ptr(&mut self) -> (*mut u8, usize) {
        let words = Arc::get_mut(&mut self.arc).expect("a ValueBuf is unique until finished");
        // Within the allocation: the value's `len` bytes start at word 1
        // and `words(len)` rounds up.
        let at = words
            .as_mut_ptr()
            .wrapping_add(1)
            .cast::<u8>()
            .wrapping_add(self.filled);
        (at, self.len - self.filled)
    }

    /// Appends bytes received already; as many as there is room for.
    /// Returns how many were taken.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> usize {
        let (at, room) = self.unfilled_ptr();
        let n = bytes.len().min(room);
        // SAFETY: `at` starts `room` bytes of the unique allocation that
        // nothing else borrows (`unfilled_ptr` took `&mut self`); `n` is
        // within them, and `bytes` is another object.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), at, n) };
        self.filled += n;
        n
    }

    /// One `read(2)` of the file (a socket) into the unfilled part, with
    /// no pass over it first. Returns the bytes read (0: end of file).
    pub fn read_from(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        let (at, room) = self.unfilled_ptr();
        // SAFETY: the kernel writes at most `room` bytes from `at`, all
        // inside the unique allocation (`unfilled_ptr`); the count it
        // returns is how many it wrote, and only those are counted filled.
        let n = unsafe { libc::read(fd.as_raw_fd(), at.cast(), room) };
        let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
        self.filled += n.min(room);
        Ok(n.min(room))
    }

    /// Fills with `read`, which is handed the unfilled part (zeroed first,
    /// once) and says how many bytes it wrote at its start (a count past
    /// the part is taken as all of it). Returns `read`'s answer.
    pub fn fill_with<E>(
        &mut self,
        read: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let (at, room) = self.unfilled_ptr();
        let zeroed = self.zeroed.saturating_sub(self.filled);
        // SAFETY: `at..at + room` is the unique allocation's unfilled part
        // (`unfilled_ptr`); what is not written yet is zeroed here, so the
        // slice is made over written bytes only, and it borrows `self`.
        let unfilled = unsafe {
            ptr::write_bytes(at.add(zeroed), 0, room - zeroed);
            std::slice::from_raw_parts_mut(at, room)
        };
        self.zeroed = self.len;
        let n = read(unfilled)?.min(room);
        self.filled += n;
        Ok(n)
    }

    /// The full value, to read and to offer; `Err(self)` if bytes are
    /// still missing.
    pub fn finish(self) -> Result<ReceivedValue, ValueBuf> {
        if self.filled < self.len {
            return Err(self);
        }
        // SAFETY: every word is written: word 0 and the last word when the
        // buffer was made, and every byte of the value in between (filled).
        let arc = unsafe { self.arc.assume_init() };
        Ok(ReceivedValue { arc, len: self.len })
    }
}

/// A received large value ([`ValueBuf::finish`]): its bytes, shared, never
/// written again.
#[derive(Debug, Clone)]
pub struct ReceivedValue {
    arc: Arc<[AtomicU64]>,
    len: usize,
}

impl ReceivedValue {
    /// The value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        value_bytes(&self.arc, self.len)
    }

    /// Offers the value to the writes this thread makes while the guard
    /// lives: the first one that stores exactly these bytes (the slice
    /// [`ReceivedValue::as_bytes`] returns, not a copy of it) out of line takes
    /// this allocation instead of copying them. One offer per thread at a
    /// time: a new one replaces it, and dropping either guard ends it.
    pub fn offer(&self) -> ValueOffer<'_> {
        OFFERED.with(|o| o.set(Some((Arc::clone(&self.arc), self.len))));
        ValueOffer {
            _value: std::marker::PhantomData,
        }
    }
}

/// While it lives, a [`ReceivedValue`] is offered to this thread's writes.
#[derive(Debug)]
pub struct ValueOffer<'a> {
    _value: std::marker::PhantomData<&'a ReceivedValue>,
}

impl ValueOffer<'_> {
    /// Whether a write took the offered value (stored it without a copy).
    pub fn taken(&self) -> bool {
        OFFERED.with(|o| {
            let offered = o.take();
            let taken = offered.is_none();
            o.set(offered);
            taken
        })
    }
}

impl Drop for ValueOffer<'_> {
    fn drop(&mut self) {
        drop(OFFERED.with(|o| o.take()));
    }
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
        value_bytes(&self.arc, self.len)
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

    /// A value received in pieces into a `ValueBuf`.
    fn received(bytes: &[u8]) -> ReceivedValue {
        let mut buf = ValueBuf::new(bytes.len());
        let (head, tail) = bytes.split_at(bytes.len() / 3);
        assert_eq!(buf.extend_from_slice(head), head.len());
        let mut rest = tail;
        while !rest.is_empty() {
            // A reader that claims more than the room is held to it.
            let n = buf
                .fill_with(|room| {
                    let n = room.len().min(rest.len()).min(1000);
                    room[..n].copy_from_slice(&rest[..n]);
                    Ok::<_, ()>(if n == room.len() { n + 5 } else { n })
                })
                .unwrap();
            rest = &rest[n..];
        }
        assert_eq!(buf.remaining(), 0);
        assert_eq!(
            buf.extend_from_slice(b"more"),
            0,
            "a full buffer takes no more"
        );
        buf.finish().expect("full")
    }

    #[test]
    fn an_offered_value_is_taken_without_a_copy_only_for_its_own_bytes() {
        for len in [1usize, 7, 8, 9, 4099, 100_003] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let v = received(&bytes);
            assert_eq!(v.as_bytes(), &bytes[..]);
            let offer = v.offer();
            // The same bytes elsewhere, or a part of them, are copied.
            let elsewhere = create(&bytes);
            assert_ne!(elsewhere, v.as_bytes().as_ptr());
            let part = create(&v.as_bytes()[..len - 1]);
            assert_ne!(part, v.as_bytes().as_ptr());
            assert!(!offer.taken());
            // Its own bytes: the allocation itself, referenced by one buffer.
            let p = create(v.as_bytes());
            assert_eq!(p, v.as_bytes().as_ptr());
            assert!(offer.taken());
            drop(offer);
            // SAFETY: each pointer is live until its one buffer's release.
            unsafe {
                assert_eq!(std::slice::from_raw_parts(p, len), &bytes[..]);
                // Offered again while a buffer holds it: copied, so that
                // word 0 counts each buffer once.
                let again = v.offer();
                let copy = create(v.as_bytes());
                assert_ne!(copy, p);
                assert!(!again.taken());
                drop(again);
                assert!(release(copy, len));
                assert!(release(elsewhere, len));
                assert!(release(part, len - 1));
                share(p, len);
                assert!(!release(p, len), "another buffer still holds it");
                assert!(release(p, len), "the last buffer");
            }
            // The receiver's handle outlives the store's buffers.
            assert_eq!(v.as_bytes(), &bytes[..]);
        }
    }

    #[test]
    fn a_value_is_finished_only_when_full_and_an_offer_ends_with_its_guard() {
        let mut buf = ValueBuf::new(10);
        assert_eq!(buf.extend_from_slice(b"0123456789abc"), 10);
        let mut short = ValueBuf::new(10);
        short.extend_from_slice(b"012345678");
        let short = short.finish().expect_err("a byte is missing");
        assert_eq!(short.remaining(), 1);
        let v = buf.finish().expect("full");
        assert_eq!(v.as_bytes(), b"0123456789");
        drop(v.offer());
        let p = create(v.as_bytes());
        assert_ne!(p, v.as_bytes().as_ptr(), "no offer after the guard");
        // SAFETY: `p`'s one buffer gives it up.
        assert!(unsafe { release(p, 10) });
    }

    #[test]
    fn a_value_read_from_a_socket_and_a_slice_in_turns_holds_every_byte_in_order() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let bytes: Vec<u8> = (0..70_001u32).map(|i| (i % 251) as u8).collect();
        let (mut tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut buf = ValueBuf::new(bytes.len());
        let mut at = buf.extend_from_slice(&bytes[..10]);
        let mut from_socket = true;
        while buf.remaining() > 0 {
            let piece = &bytes[at..(at + 3001).min(bytes.len())];
            tx.write_all(piece).unwrap();
            // Read in turns: straight from the socket, then through a slice.
            from_socket = !from_socket;
            let n = if from_socket {
                buf.read_from(rx.as_fd()).unwrap()
            } else {
                buf.fill_with(|room| std::io::Read::read(&mut &rx, room))
                    .unwrap()
            };
            assert_eq!(n, piece.len(), "one read takes the piece sent");
            at += n;
        }
        // A read with no room reads nothing, and past the end nothing is
        // taken.
        tx.write_all(b"after").unwrap();
        assert_eq!(buf.read_from(rx.as_fd()).unwrap(), 0);
        let v = buf.finish().expect("full");
        assert_eq!(v.as_bytes(), &bytes[..]);
    }
}
