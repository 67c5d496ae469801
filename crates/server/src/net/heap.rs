//! glibc's heap, tuned for large values and trimmed once a second.
//!
//! By default glibc serves every allocation above 128 KiB with an `mmap` of
//! its own and unmaps it on `free`, so each large value the store keeps
//! (and each large input or output buffer) starts on fresh pages: the
//! kernel faults and zeroes every page of it before the value's bytes are
//! copied in. A SET of 1 MB spent more than half of its server time there
//! (`perf record` in docs/benchmarks.md, "Large values"). Served from the
//! arenas instead, a freed value's pages are reused by the next one while
//! they stay mapped; the housekeeping thread's `trim` gives whatever is
//! still free back once a second, so the resident size follows the data
//! down as before.

/// Allocations up to this size come from the arenas (glibc's largest
/// mmap threshold on 64-bit targets, `HEAP_MAX_SIZE / 2`): larger ones,
/// rare, keep a mapping of their own.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 32 << 20;
/// Free memory at the top of an arena that `free` leaves mapped: the
/// once-a-second `trim` returns it, not each `free` of a large value.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: libc::c_int = 256 << 20;

/// Sets the thresholds above, once at start, before the event loops
/// allocate. A refused setting (another libc) leaves glibc's default.
pub(crate) fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt has no preconditions; it only changes how glibc's
    // malloc chooses between its arenas and `mmap` from now on.
    unsafe {
        if libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1
            || libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1
        {
            tracing::warn!("glibc refused the large-value heap thresholds; keeping its defaults");
        }
    }
}

/// Gives the heap's free memory back to the system. glibc keeps what
/// buffers and values freed in its arenas, resident, until it is trimmed.
/// Not for `maxmemory` (which counts what the store holds, not the
/// resident size), but so that the resident size follows the data down
/// too (`docs/experiments.md`, "Giving memory back", compares this with
/// jemalloc and mimalloc).
pub(crate) fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only releases free
    // memory of glibc's heap.
    unsafe {
        libc::malloc_trim(0);
    }
}
