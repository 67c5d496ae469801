//! The CPU backend: requests advance as interleaved state machines. Each
//! step of a request ends by prefetching what its next step will touch (a
//! node's header, log directory and shortcut block; a segment and the log
//! items whose fingerprint matches), then moves on to another request, so the
//! memory waits of up to `window` requests overlap instead of adding up
//! (Honeycomb 4.1-4.2: many requests in flight, executed out of order).
//!
//! Nodes two or more levels up are a handful and stay cached: a request
//! searches them on the spot when it starts, with no prefetch and no stage
//! of its own (80 fewer instructions per GET at 200 K keys than giving the
//! root its stages, at the same speed at 10 M keys). An interior child's
//! page-table entry is loaded directly, not prefetched a step ahead:
//! interior nodes are few enough for their entries to stay cached, and a
//! stage fewer per level is worth more. A leaf's entry misses (profiled at
//! 10 M keys), so leaves get the extra stage.

use std::ops::Bound;

use super::{BatchResults, ReadBackend, ReadRequest, TreeView, bounds};
use crate::config::LINE_BYTES;
use crate::tree::node::{
    Lid, NodePtr, Shortcuts, head_bytes, key_fp, log_dir_entry, prefetch, prefetch_range,
    shortcut_base,
};
use crate::tree::read::{
    SegSearch, WalkFrom, confirm_tie, find_group, find_in_group_tied, interior_child,
    leaf_get_matches, log_fp_matches, published, published_leaf, route, segment_lower_bound,
    settle,
};
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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
    /// The page-table entry of a leaf was prefetched: load it, prefetch the
    /// leaf's first lines. (Interior children skip this stage: see the
    /// module doc.)
    Node,
    /// Header, log directory and shortcuts are (nearly) in cache: pick the
    /// version, find the segment, prefetch it (and a GET's log items whose
    /// fingerprint matches).
    Head,
    /// A leaf with a top line: its group line is (nearly) in cache; find
    /// the segment in it, prefetch the segment.
    Group,
    /// Search the segment: go to the child, or answer at the leaf.
    Segment,
}

#[derive(Clone, Copy)]
struct Flight<'a> {
    req: usize,
    key: &'a [u8],
    /// The leaf whose page-table entry the Node stage loads.
    lid: Lid,
    node: NodePtr,
    stage: Stage,
    /// A GET's log directory entries whose fingerprint matches its key,
    /// found once at the leaf (bit i: entry i).
    matches: u32,
    /// The segment the Head stage found, for the Segment stage.
    seg: Option<(usize, usize)>,
    /// `seg` was accepted on a prefix tie without reading the tied key
    /// (`SegSearch::deferring`): the Segment stage confirms it.
    tied: bool,
    /// The shortcut group a leaf's Head stage found, for the Group stage.
    group: usize,
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
        // A lone request has no memory waits to overlap with: the plain
        // path answers it without a flight's stages and their prefetches
        // (a pipeline of one, as a client that waits for each reply sends).
        if let [only] = requests {
            answer_directly(tree, rv, now, 0, only, out);
            return;
        }
        let mut next = 0;
        let mut flights: Vec<Flight<'_>> = Vec::with_capacity(self.window);
        // Takes the next interleavable request into a flight; answers the
        // others (reverse and floor-start ranges) directly on the way.
        let launch = |next: &mut usize, out: &mut BatchResults| -> Option<Flight<'_>> {
            while *next < requests.len() {
                let i = *next;
                *next += 1;
                match seek_key(&requests[i]) {
                    Some(key) => return Some(start(tree, rv, i, key)),
                    None => answer_directly(tree, rv, now, i, &requests[i], out),
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

/// Answers request `i` on the plain read path, not interleaved.
fn answer_directly(
    tree: &Tree,
    rv: u64,
    now: &Now,
    i: usize,
    request: &ReadRequest<'_>,
    out: &mut BatchResults,
) {
    out.begin(i);
    match request {
        ReadRequest::Get(key) => {
            if let Some(it) = tree.get_at(key, rv).filter(|it| it.is_live(now)) {
                out.push(i, &it);
            }
        }
        ReadRequest::Range(r) => {
            tree.visit_range(r, rv, now, &mut |it| {
                out.push(i, &it);
                true
            });
        }
    }
}

/// A flight for request `req` seeking `key`: nodes two or more levels up
/// are a handful and stay in cache, so they are searched on the spot, with
/// no prefetch and no stage of their own; the flight starts at the first
/// node below them (a level-1 node, or a leaf in a small tree).
fn start<'a>(tree: &Tree, rv: u64, req: usize, key: &'a [u8]) -> Flight<'a> {
    let mut node = tree.resolve(Lid::ROOT, rv);
    let mut level = node.header().level;
    let mut lid = Lid::ROOT;
    while level >= 2 {
        lid = route(node, published(node), key);
        level -= 1;
        node = tree.resolve(lid, rv);
    }
    prefetch_range(node, 0, head_bytes_at(tree, level));
    Flight {
        req,
        key,
        lid,
        node,
        stage: Stage::Head,
        matches: 0,
        seg: None,
        tied: false,
        group: 0,
    }
}

/// The first bytes of a node at `level` that a search reads before it
/// knows which group line it needs: a leaf's header, log directory and top
/// line (its group line comes a stage later; the top line is group 0's when
/// there is only one group), an interior node's whole head (upper levels
/// stay cached, and a stage fewer is worth more there).
#[inline]
fn head_bytes_at(tree: &Tree, level: u8) -> usize {
    if level == 0 {
        shortcut_base(0) + LINE_BYTES
    } else {
        head_bytes(&tree.g)
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
            prefetch_range(f.node, 0, head_bytes_at(tree, 0));
            f.stage = Stage::Head;
            false
        }
        Stage::Head => {
            if f.node.version() > rv {
                f.node = f
                    .node
                    .old()
                    .expect("old-version chain reaches every live read version");
                prefetch_range(f.node, 0, head_bytes_at(tree, f.node.header().level));
                return false;
            }
            let (buf, nlog) = published_leaf(f.node);
            let h = f.node.header();
            let s = SegSearch::deferring(h, f.key);
            let group = find_group(buf, h, &s);
            let sc = Shortcuts::of(h);
            // A leaf's group lines were not prefetched (only the top line):
            // ask for the one the search needs and finish it next step.
            let wait_group = h.level == 0 && sc.has_top() && group.is_some();
            if wait_group {
                f.group = group.unwrap_or(0);
                prefetch(f.node.as_raw().wrapping_add(sc.group_line(f.group)));
            } else {
                (f.seg, f.tied) =
                    group.map_or((None, false), |g| find_in_group_tied(buf, h, &s, g));
                if let Some((from, to)) = f.seg {
                    prefetch_range(f.node, from, to);
                }
            }
            if h.level == 0 {
                if let ReadRequest::Get(key) = requests[f.req] {
                    f.matches = log_fp_matches(buf, nlog, key_fp(key));
                    let mut m = f.matches;
                    while m != 0 {
                        let e = log_dir_entry(buf, m.trailing_zeros() as usize);
                        prefetch(f.node.as_raw().wrapping_add(e.at as usize));
                        m &= m - 1;
                    }
                }
            }
            f.stage = if wait_group {
                Stage::Group
            } else {
                Stage::Segment
            };
            false
        }
        Stage::Group => {
            let (buf, _) = published_leaf(f.node);
            let h = f.node.header();
            let s = SegSearch::deferring(h, f.key);
            (f.seg, f.tied) = find_in_group_tied(buf, h, &s, f.group);
            if let Some((from, to)) = f.seg {
                prefetch_range(f.node, from, to);
            }
            f.stage = Stage::Segment;
            false
        }
        Stage::Segment => {
            let (buf, _) = published_leaf(f.node);
            let h = f.node.header();
            let seg = if f.tied {
                confirm_tie(buf, h, f.key, f.seg)
            } else {
                f.seg
            };
            let seg = settle(buf, h, f.key, seg);
            if !f.node.is_leaf() {
                let child = interior_child(f.node, buf, seg, f.key);
                f.lid = child;
                // The child's level from its parent's (in cache), not from
                // its header, which is what this prefetch is for.
                let level_below = f.node.header().level - 1;
                if level_below == 0 {
                    // Leaves are too many for their page-table entries to
                    // stay cached: prefetch the entry, load it next step.
                    if let Some(slot) = tree.pages.slot_addr(child) {
                        prefetch(slot);
                    }
                    f.stage = Stage::Node;
                } else {
                    // Only `start` descends through levels above 1.
                    debug_assert_eq!(level_below, 1, "levels above 1 are searched in `start`");
                    f.node = tree.pages.get(child).expect("reachable LID is mapped");
                    prefetch_range(f.node, 0, head_bytes(&tree.g));
                    f.stage = Stage::Head;
                }
                return false;
            }
            out.begin(f.req);
            match requests[f.req] {
                ReadRequest::Get(key) => {
                    if let Some(it) = leaf_get_matches(buf, f.matches, seg, key, rv) {
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
                        // The segment search already done here tells where
                        // in the leaf the walk starts.
                        let at = segment_lower_bound(buf, h, seg, f.key);
                        let from = WalkFrom::Offset(at);
                        tree.scan_from_leaf(f.node, rv, now, start, end, from, &mut |it| {
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
