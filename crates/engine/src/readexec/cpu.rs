//! The CPU backend: requests advance as interleaved state machines. Each
//! step of a request ends by prefetching what its next step will touch (a
//! node's header, log directory and top shortcut line; its group line; a
//! segment and the log items whose fingerprint matches), then moves on to
//! another request, so the memory waits of up to `window` requests overlap
//! instead of adding up (Honeycomb 4.1-4.2: many requests in flight,
//! executed out of order).
//!
//! Every level is searched in stages, the root included. Searched on the
//! spot, the root and level-2 nodes missed the first-level cache (leaves
//! stream through it) and their dependent loads stalled each request: at
//! 10 M keys `find_segment` called from that direct descent held 12% of
//! the samples of a batched RANGE, and loading a level-1 node's entry and
//! header there another 8%. The page-table entries of the root's children
//! are a handful and stay cached, so those children are resolved at once;
//! level-1 nodes (hundreds) and leaves (100 K at 10 M keys) miss on their
//! entries, so they get a Node stage that loads the entry prefetched a step
//! before. The gain is smaller than those shares (2-4%, see
//! docs/experiments.md, "The upper levels"): the waits move to the
//! line-fill buffers.

use std::ops::Bound;

use super::{BatchResults, ReadBackend, ReadRequest, TreeView};
use crate::config::LINE_BYTES;
use crate::tree::Tree;
use crate::tree::node::{
    Lid, NODE_LEARNED, NodePtr, ShortcutBlock, key_fp, log_dir_entry, prefetch, prefetch_range,
    shortcut_base,
};
use crate::tree::read::{
    SegSearch, WalkFrom, confirm_tie, find_group, find_in_group_tied, interior_child,
    leaf_get_matches, learned_window, log_fp_matches, published_leaf, segment_lower_bound, settle,
};
use crate::types::Now;

/// Requests in flight per thread unless configured otherwise.
pub const DEFAULT_WINDOW: usize = 32;

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
    /// The page-table entry of a leaf or a level-1 node was prefetched:
    /// load it, prefetch the node's first lines. (Entries further up stay
    /// cached: see the module doc.)
    Node,
    /// Header, log directory and top line are (nearly) in cache: pick the
    /// version and the group, prefetch the group line (or, in a node with
    /// one group, find the segment and prefetch it), and a GET's log items
    /// whose fingerprint matches.
    Head,
    /// A node with a top line: its group line is (nearly) in cache; find
    /// the segment in it, prefetch the segment.
    Group,
    /// Search the segment: go to the child, or answer at the leaf.
    Segment,
}

#[derive(Clone, Copy)]
struct Flight<'a> {
    req: usize,
    key: &'a [u8],
    /// The node whose page-table entry the Node stage loads.
    lid: Lid,
    /// Its level (known from its parent's before its header is read).
    level: u8,
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
        let tree = view.tree();
        let now = &Now::at(now_ms);
        // A lone request has no memory waits to overlap with: the plain
        // path answers it without a flight's stages and their prefetches
        // (a pipeline of one, as a client that waits for each reply sends).
        if let [only] = requests {
            if !out.answered(0) {
                answer_directly(tree, rv, now, 0, only, out);
            }
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
                if out.answered(i) {
                    continue;
                }
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

/// A flight for request `req` seeking `key`, at the root.
fn start<'a>(tree: &Tree, rv: u64, req: usize, key: &'a [u8]) -> Flight<'a> {
    let node = tree.resolve(Lid::ROOT, rv);
    let level = node.header().level;
    prefetch_range(node, 0, head_bytes_at(level));
    Flight {
        req,
        key,
        lid: Lid::ROOT,
        level,
        node,
        stage: Stage::Head,
        matches: 0,
        seg: None,
        tied: false,
        group: 0,
    }
}

/// The first bytes of a node at `level` that a search reads before it
/// knows which group line it needs: the header, a leaf's log directory,
/// and the top line (group 0's line when there is only one group). The
/// group line comes a stage later: prefetching a level-1 node's whole head
/// (ten lines) spent line-fill buffers on lines the search never reads.
#[inline]
fn head_bytes_at(level: u8) -> usize {
    shortcut_base(level) + LINE_BYTES
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
            f.node = tree.pages().get(f.lid).expect("reachable LID is mapped");
            prefetch_range(f.node, 0, head_bytes_at(f.level));
            f.stage = Stage::Head;
            false
        }
        Stage::Head => at_head(rv, requests, f),
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
                // Leaves and level-1 nodes are too many for their
                // page-table entries to stay cached: prefetch the entry,
                // load it next step. The child's level comes from its
                // parent's, not from its header, which is what the next
                // prefetch is for.
                let below = h.level - 1;
                if below <= 1 {
                    if let Some(slot) = tree.pages().slot_addr(child) {
                        prefetch(slot);
                    }
                    (f.lid, f.level, f.stage) = (child, below, Stage::Node);
                } else {
                    f.node = tree.pages().get(child).expect("reachable LID is mapped");
                    prefetch_range(f.node, 0, head_bytes_at(below));
                    (f.lid, f.level, f.stage) = (child, below, Stage::Head);
                }
                return false;
            }
            answer_at_leaf(tree, rv, now, &requests[f.req], f, buf, seg, out);
            true
        }
    }
}

/// `step` at a node's head line: an older version if this one is too
/// new, else the search of its shortcut block (and, at a leaf, a GET's log
/// lines asked for). Inlined: it is the read loop's most frequent stage.
#[inline(always)]
fn at_head(rv: u64, requests: &[ReadRequest<'_>], f: &mut Flight<'_>) -> bool {
    if f.node.version() > rv {
        f.node = f
            .node
            .old()
            .expect("old-version chain reaches every live read version");
        prefetch_range(f.node, 0, head_bytes_at(f.node.header().level));
        return false;
    }
    let (buf, nlog) = published_leaf(f.node);
    let h = f.node.header();
    if h.flags & NODE_LEARNED != 0 {
        // The model line came with the head: its window is the
        // segment, with no group line between.
        let kp = SegSearch::new(h, f.key, false).kp;
        (f.seg, f.tied) = (learned_window(buf, h, kp), false);
        if let Some((from, to)) = f.seg {
            prefetch_range(f.node, from, to);
        }
        f.stage = Stage::Segment;
        return false;
    }
    let s = SegSearch::deferring(h, f.key);
    let group = find_group(buf, h, &s);
    let sc = ShortcutBlock::of(h);
    // The group lines were not prefetched (only the top line): ask
    // for the one the search needs and finish it next step.
    let wait_group = sc.has_top() && group.is_some();
    if wait_group {
        f.group = group.unwrap_or(0);
        prefetch(f.node.as_raw().wrapping_add(sc.group_line(f.group)));
    } else {
        (f.seg, f.tied) = group.map_or((None, false), |g| find_in_group_tied(buf, h, &s, g));
        if let Some((from, to)) = f.seg {
            prefetch_range(f.node, from, to);
        }
    }
    if h.level == 0
        && let ReadRequest::Get(key) = requests[f.req]
    {
        prefetch_log_matches(f, buf, nlog, key);
    }
    f.stage = if wait_group {
        Stage::Group
    } else {
        Stage::Segment
    };
    false
}

/// A GET at its leaf: finds the log directory entries whose fingerprint
/// matches its key and asks for their items.
#[inline(always)]
fn prefetch_log_matches(f: &mut Flight<'_>, buf: &[u8], nlog: usize, key: &[u8]) {
    f.matches = log_fp_matches(buf, nlog, key_fp(key));
    let mut m = f.matches;
    while m != 0 {
        let e = log_dir_entry(buf, m.trailing_zeros() as usize);
        prefetch(f.node.as_raw().wrapping_add(e.at as usize));
        m &= m - 1;
    }
}

/// Answers a flight's request `request` at its leaf (published bytes
/// `buf`), where its segment search found `seg`.
#[inline(always)]
#[expect(
    clippy::too_many_arguments,
    reason = "a request's version, clock, flight, leaf, segment and result place"
)]
fn answer_at_leaf(
    tree: &Tree,
    rv: u64,
    now: &Now,
    request: &ReadRequest<'_>,
    f: &Flight<'_>,
    buf: &'static [u8],
    seg: Option<(usize, usize)>,
    out: &mut BatchResults,
) {
    out.begin(f.req);
    match *request {
        ReadRequest::Get(key) => {
            if let Some(it) = leaf_get_matches(buf, f.matches, seg, key, rv)
                && it.is_live(now)
            {
                out.push(f.req, &it);
            }
        }
        ReadRequest::Range(r) => {
            // The segment search already done here tells where in the leaf
            // the walk starts.
            let at = segment_lower_bound(buf, f.node.header(), seg, f.key);
            answer_range(tree, rv, now, f.node, at, f.req, r, out);
        }
    }
}

/// Answers range request `req` (`r`) from sorted offset `at` of `leaf`,
/// where the flight's search of the leaf found its start. Kept out of the
/// stage loop, which stays small (inlined, the batched 3-item RANGE was no
/// faster: 6.16-6.49 against 6.21-6.58 M/s, three alternating rounds).
#[inline(never)]
#[expect(
    clippy::too_many_arguments,
    reason = "a walk's version, clock, start point and result place"
)]
fn answer_range(
    tree: &Tree,
    rv: u64,
    now: &Now,
    leaf: NodePtr,
    at: usize,
    req: usize,
    r: &crate::types::Range,
    out: &mut BatchResults,
) {
    let (start, end) = r.bounds();
    let limit = r.limit.unwrap_or(usize::MAX);
    let mut seen = 0;
    if limit > 0 && !crate::tree::scan::empty_bounds(start, end) {
        let from = WalkFrom::Offset(at);
        tree.scan_from_leaf(leaf, rv, now, start, end, from, |it| {
            out.push(req, &it);
            seen += 1;
            seen < limit
        });
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use crate::readexec::{BatchResults, ReadRequest};
    use crate::tree::node::Lid;
    use crate::{Config, Range, Store};

    /// Flights search every level in stages; children of nodes two or more
    /// levels up are resolved at once, the others through a Node stage. A
    /// tree four levels deep takes every one of those paths.
    #[test]
    fn batches_equal_plain_reads_in_a_deep_tree() {
        let store = Store::new(Config::with_node_size(1024)).unwrap();
        let mut rng = StdRng::seed_from_u64(4);
        let key = |i: u32| format!("{:08x}", i.wrapping_mul(0x9E37_79B9)).into_bytes();
        for i in 0..60_000 {
            store.put(&key(i), &i.to_le_bytes()).unwrap();
        }
        let root = store.tree().pages().get(Lid::ROOT).unwrap();
        assert!(
            root.header().level >= 3,
            "root level {}",
            root.header().level
        );
        let mut out = BatchResults::new();
        for _ in 0..50 {
            let keys: Vec<Vec<u8>> = (0..64).map(|_| key(rng.random_range(0..70_000))).collect();
            let ranges: Vec<Range> = keys
                .iter()
                .map(|k| {
                    Range::new(Bound::Included(k.clone()), Bound::Unbounded)
                        .with_limit(rng.random_range(1..40))
                })
                .collect();
            let mut reqs: Vec<ReadRequest<'_>> = keys.iter().map(|k| ReadRequest::Get(k)).collect();
            reqs.extend(ranges.iter().map(ReadRequest::Range));
            store.read_batch(&reqs, &mut out).unwrap();
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(out.value(i), store.get(k).unwrap().as_deref());
            }
            for (i, r) in ranges.iter().enumerate() {
                let mut plain = Vec::new();
                store
                    .scan(r, |it| {
                        plain.push((it.key.to_vec(), it.value.to_vec()));
                        true
                    })
                    .unwrap();
                let batched: Vec<_> = out
                    .items(keys.len() + i)
                    .map(|it| (it.key.to_vec(), it.value.to_vec()))
                    .collect();
                assert_eq!(batched, plain);
            }
        }
    }
}
