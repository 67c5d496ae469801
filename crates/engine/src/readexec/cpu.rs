//! The CPU backend: requests advance as interleaved state machines. Each
//! step of a request ends by prefetching what its next step will touch (a
//! page-table entry, a node's header and shortcut block, a segment and the
//! log block), then moves on to another request, so the memory waits of up
//! to `window` requests overlap instead of adding up (Honeycomb 4.1-4.2: many
//! requests in flight, executed out of order).

use std::ops::Bound;

use super::{BatchResults, ReadBackend, ReadRequest, TreeView, bounds};
use crate::tree::node::{Lid, NodePtr, state_size};
use crate::tree::read::{find_segment, interior_child, leaf_get_in, published};
use crate::tree::{Now, Tree};

/// Requests in flight per thread unless configured otherwise.
pub const DEFAULT_WINDOW: usize = 16;

/// Executes batches on the calling thread with up to `window` requests in
/// flight.
#[derive(Debug, Clone, Copy)]
pub struct CpuBackend {
    window: usize,
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend {
            window: DEFAULT_WINDOW,
        }
    }
}

impl CpuBackend {
    /// A backend with `window` requests in flight (at least 1).
    pub fn with_window(window: usize) -> CpuBackend {
        CpuBackend {
            window: window.max(1),
        }
    }
}

#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Prefetches the cache lines of `[from, to)` of a buffer.
#[inline(always)]
fn prefetch_range(base: NodePtr, from: usize, to: usize) {
    let mut at = from & !63;
    while at < to {
        prefetch(base.as_raw().wrapping_add(at));
        at += 64;
    }
}

/// Bytes of a node's header and shortcut block.
fn head_span(tree: &Tree) -> usize {
    crate::config::HEADER_BYTES + tree.g.shortcut_bytes
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
    /// The page-table entry of `lid` was prefetched: load it, prefetch the
    /// node's header and shortcut block.
    Node,
    /// Header and shortcuts are (nearly) in cache: pick the version, find the
    /// segment, prefetch it (and a leaf's log block).
    Shortcuts,
    /// Search the segment: go to the child, or answer at the leaf.
    Segment,
}

#[derive(Clone, Copy)]
struct Flight<'a> {
    req: usize,
    key: &'a [u8],
    lid: Lid,
    node: NodePtr,
    stage: Stage,
    /// The segment the Shortcuts stage found, for the Segment stage.
    seg: Option<(usize, usize)>,
}

/// How a request descends (None: executed directly, not interleaved).
fn seek_key<'a>(r: &ReadRequest<'a>) -> Option<&'a [u8]> {
    match r {
        ReadRequest::Get(k) => Some(k),
        ReadRequest::Range(r) if !r.reverse && !r.floor_start => match &r.start {
            Bound::Included(k) | Bound::Excluded(k) => Some(k),
            Bound::Unbounded => Some(&[]),
        },
        ReadRequest::Range(_) => None,
    }
}

impl ReadBackend for CpuBackend {
    fn execute(
        &self,
        view: TreeView<'_>,
        rv: u64,
        now_ms: u64,
        requests: &[ReadRequest<'_>],
        out: &mut BatchResults,
    ) {
        let tree = view.tree;
        let now = &Now::at(now_ms);
        let mut next = 0;
        let mut flights: Vec<Flight<'_>> = Vec::with_capacity(self.window);
        // Takes the next interleavable request into a flight; answers the
        // others (reverse and floor-start ranges) directly on the way.
        let launch = |next: &mut usize, out: &mut BatchResults| -> Option<Flight<'_>> {
            while *next < requests.len() {
                let i = *next;
                *next += 1;
                match seek_key(&requests[i]) {
                    Some(key) => {
                        if let Some(slot) = tree.pages.slot_addr(Lid::ROOT) {
                            prefetch(slot);
                        }
                        return Some(Flight {
                            req: i,
                            key,
                            lid: Lid::ROOT,
                            node: NodePtr::dangling(),
                            stage: Stage::Node,
                            seg: None,
                        });
                    }
                    None => {
                        let ReadRequest::Range(r) = requests[i] else {
                            unreachable!()
                        };
                        out.begin(i);
                        tree.visit_range(r, rv, now, &mut |it| {
                            out.push(i, &it);
                            true
                        });
                    }
                }
            }
            None
        };
        while flights.len() < self.window {
            match launch(&mut next, out) {
                Some(f) => flights.push(f),
                None => break,
            }
        }
        let mut i = 0;
        while !flights.is_empty() {
            if i >= flights.len() {
                i = 0;
            }
            let done = step(tree, rv, now, requests, &mut flights[i], out);
            if done {
                match launch(&mut next, out) {
                    Some(f) => flights[i] = f,
                    None => {
                        flights.swap_remove(i);
                        continue;
                    }
                }
            }
            i += 1;
        }
    }
}

/// Advances one request by one stage. True when it is answered.
fn step(
    tree: &Tree,
    rv: u64,
    now: &Now,
    requests: &[ReadRequest<'_>],
    f: &mut Flight<'_>,
    out: &mut BatchResults,
) -> bool {
    match f.stage {
        Stage::Node => {
            f.node = tree.pages.get(f.lid).expect("reachable LID is mapped");
            prefetch_range(f.node, 0, head_span(tree));
            f.stage = Stage::Shortcuts;
            false
        }
        Stage::Shortcuts => {
            if f.node.version() > rv {
                f.node = f
                    .node
                    .old()
                    .expect("old-version chain reaches every live read version");
                prefetch_range(f.node, 0, head_span(tree));
                return false;
            }
            let buf = published(f.node);
            let h = f.node.header();
            f.seg = find_segment(buf, h, f.key, false);
            if let Some((from, to)) = f.seg {
                prefetch_range(f.node, from, to);
            }
            if h.level == 0 {
                prefetch_range(
                    f.node,
                    h.sorted_end as usize,
                    state_size(f.node.load_state()),
                );
            }
            f.stage = Stage::Segment;
            false
        }
        Stage::Segment => {
            if !f.node.is_leaf() {
                let child = interior_child(f.node, published(f.node), f.seg, f.key);
                f.lid = child;
                if let Some(slot) = tree.pages.slot_addr(child) {
                    prefetch(slot);
                }
                f.stage = Stage::Node;
                return false;
            }
            out.begin(f.req);
            match requests[f.req] {
                ReadRequest::Get(key) => {
                    if let Some(it) = leaf_get_in(f.node, published(f.node), f.seg, key, rv) {
                        if it.is_live(now) {
                            out.push(f.req, &it);
                        }
                    }
                }
                ReadRequest::Range(r) => {
                    let (start, end) = bounds(r);
                    let limit = r.limit.unwrap_or(usize::MAX);
                    let mut seen = 0;
                    if limit > 0 && !crate::tree::scan::empty_bounds(start, end) {
                        let req = f.req;
                        tree.scan_from_leaf(f.node, rv, now, start, end, &mut |it| {
                            out.push(req, &it);
                            seen += 1;
                            seen < limit
                        });
                    }
                }
            }
            true
        }
    }
}
