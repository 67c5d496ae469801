//! What the fuzz smoke tests share: a counting global allocator (each test
//! binary installs it) and a small seeded random number generator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts this thread's heap use: live bytes and their peak (how much a
/// call held at most), and bytes ever requested (whether it allocated at
/// all). Thread-local, so tests running beside each other do not mix.
pub struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
}

fn note(delta: isize, requested: usize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
    let _ = ALLOCATED.try_with(|a| a.set(a.get() + requested));
}

// SAFETY: every call is forwarded to `System` unchanged; the counters are
// const-initialised thread locals without destructors, so counting cannot
// allocate or re-enter the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size() as isize, l.size());
        // SAFETY: the caller's contract is `System.alloc`'s.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        note(-(l.size() as isize), 0);
        // SAFETY: `p` came from `System` with this layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note(new as isize - l.size() as isize, new);
        // SAFETY: as for `dealloc`; `new` is the caller's.
        unsafe { System.realloc(p, l, new) }
    }
}

/// Runs `f` and returns its result and the most heap it held at once
/// beyond what was live before.
pub fn peak_alloc<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, (peak - base).max(0) as usize)
}

/// Bytes this thread has requested from the allocator so far.
pub fn allocated() -> usize {
    ALLOCATED.with(Cell::get)
}

/// xorshift64*: small, seeded, reproducible.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}
