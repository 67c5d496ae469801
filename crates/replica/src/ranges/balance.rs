//! Placing replicas by the bytes they hold: once every range has its
//! replicas and no node holds two more than another (`next_placement`),
//! the meta group's leader evens out the bytes the nodes hold, as PD
//! balances TiKV stores by the size of their regions. Ranges split by
//! size are of similar sizes, but ranges written unevenly, merged, or
//! split by load are not: by count alone a node could hold many times
//! another's memory.
//!
//! Each step is between two nodes, the pair with the widest gap in bytes
//! that has one, and keeps every node's count of replicas, so that
//! `next_placement` has nothing to undo: a *swap* (a range of the heavier
//! node goes to the lighter, a smaller one of the lighter's comes back),
//! or, where the heavier holds one replica more than the lighter, a
//! *move* of one range. Of those, the one whose bytes moved come nearest
//! half the gap between the two, and only those that move at most half
//! of it (the heavier node stays the heavier, so sizes a little off
//! cannot undo the step) and at least a quarter of [`MIN_GAP`]: each step
//! lowers the sum of the squares of the nodes' bytes, so with sizes that
//! hold still the steps end. A gap under a fifth of the nodes' mean
//! bytes, or under [`MIN_GAP`], is left alone: sizes change with every
//! write, and a move costs a snapshot of the range.

use std::collections::BTreeMap;

use super::map::{RangeDesc, RangeId, RangeMap};
use crate::types::NodeId;

/// A gap in bytes between two nodes smaller than this is not worth a move.
pub const MIN_GAP: u64 = 8 << 20;

/// The next step toward nodes holding similar bytes: one range's new
/// voters (a move) or two ranges' (a swap, to be placed together), or
/// none (a placement or merge under way, a range's size unknown, the
/// nodes close enough, or no range that narrows the gap). `sizes` holds
/// each range's bytes, as its leader counts them (range 0, on every
/// member, is left out); `merge_bytes` is the size under which two
/// neighbours merge (0: never): a range lined up on its neighbour's
/// nodes, small enough with it to merge, is waiting to merge and stays
/// where it is.
pub fn next_byte_move(
    map: &RangeMap,
    nodes: &[NodeId],
    replicas: usize,
    sizes: &BTreeMap<RangeId, u64>,
    merge_bytes: u64,
) -> Vec<(RangeId, Vec<NodeId>)> {
    plan(map, nodes, replicas, sizes, merge_bytes).unwrap_or_default()
}

fn plan(
    map: &RangeMap,
    nodes: &[NodeId],
    replicas: usize,
    sizes: &BTreeMap<RangeId, u64>,
    merge_bytes: u64,
) -> Option<Vec<(RangeId, Vec<NodeId>)>> {
    let replicas = replicas.min(nodes.len());
    let ranges: Vec<&RangeDesc> = map.ranges().filter(|r| r.id != 0).collect();
    if replicas == 0 || ranges.is_empty() {
        return None;
    }
    let mut held: BTreeMap<NodeId, (usize, u64)> = nodes.iter().map(|&n| (n, (0, 0))).collect();
    for r in &ranges {
        // A move under way, a replica to add or drop: not settled.
        if !r.learners.is_empty() || r.voters.len() != replicas || map.is_merging(r.id) {
            return None;
        }
        let size = *sizes.get(&r.id)?;
        for v in &r.voters {
            let (count, bytes) = held.get_mut(v)?;
            *count += 1;
            *bytes += size;
        }
    }
    let counts = held.values().map(|h| h.0);
    if counts.clone().max()? > counts.min()? + 1 {
        return None;
    }
    let mean = held.values().map(|h| h.1).sum::<u64>() / held.len() as u64;
    let least_gap = MIN_GAP.max(mean / 5);
    let waiting_to_merge = |i: usize| {
        let with = |j: usize| {
            ranges.get(j).is_some_and(|n| {
                same_nodes(&n.voters, &ranges[i].voters)
                    && sizes[&n.id].saturating_add(sizes[&ranges[i].id]) < merge_bytes
            })
        };
        with(i + 1) || (i > 0 && with(i - 1))
    };
    // The ranges that may leave `a` for `b`, with their sizes.
    let movable = |a: NodeId, b: NodeId| -> Vec<(&RangeDesc, u64)> {
        ranges
            .iter()
            .enumerate()
            .filter(|(i, r)| {
                r.voters.contains(&a) && !r.voters.contains(&b) && !waiting_to_merge(*i)
            })
            .map(|(_, r)| (*r, sizes[&r.id]))
            .collect()
    };
    // Pairs of nodes far enough apart, the widest gap first: the first
    // with a step that narrows it takes it.
    let mut pairs: Vec<(u64, NodeId, NodeId)> = Vec::new();
    for (&a, &(_, a_bytes)) in &held {
        for (&b, &(_, b_bytes)) in &held {
            if a_bytes >= b_bytes.saturating_add(least_gap) {
                pairs.push((a_bytes - b_bytes, a, b));
            }
        }
    }
    pairs.sort_by_key(|&(gap, a, b)| (std::cmp::Reverse(gap), a, b));
    let (from, to, r, t) = pairs.into_iter().find_map(|(gap, from, to)| {
        let (out, back) = (movable(from, to), movable(to, from));
        // (bytes moved, the range going, the range coming back).
        let mut steps: Vec<(u64, &RangeDesc, Option<&RangeDesc>)> = Vec::new();
        if held[&from].0 == held[&to].0 + 1 {
            steps.extend(out.iter().map(|&(r, s)| (s, r, None)));
        }
        for &(r, s) in &out {
            for &(t, u) in back.iter().filter(|&&(_, u)| u < s) {
                steps.push((s - u, r, Some(t)));
            }
        }
        // A step moves at most half the gap, so the heavier stays the
        // heavier: sizes move with writes and reclamation, and a step that
        // turned the pair round could be undone by the next with sizes a
        // little off. Nor less than a quarter of `MIN_GAP`: many small
        // steps would cost more than they even out.
        let (_, r, t) = steps
            .into_iter()
            .filter(|&(moved, _, _)| moved * 2 <= gap && moved * 4 >= MIN_GAP)
            // Nearest half the gap; a move before a swap (one snapshot,
            // not two).
            .min_by_key(|&(moved, _, t)| ((moved * 2).abs_diff(gap), t.is_some()))?;
        Some((from, to, r, t))
    })?;
    let swap = |r: &RangeDesc, a: NodeId, b: NodeId| {
        let mut voters: Vec<NodeId> = r.voters.iter().copied().filter(|&v| v != a).collect();
        voters.push(b);
        voters.sort_unstable();
        (r.id, voters)
    };
    let mut plan = vec![swap(r, from, to)];
    if let Some(t) = t {
        plan.push(swap(t, to, from));
    }
    Some(plan)
}

fn same_nodes(a: &[NodeId], b: &[NodeId]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ranges::map::{MapChange, next_placement};

    const MIB: u64 = 1 << 20;

    /// `ranges` ranges after range 0, placed on three of `nodes` nodes by
    /// the count rule until it settles.
    fn placed(ranges: usize, nodes: u64) -> (RangeMap, Vec<NodeId>) {
        let all: Vec<NodeId> = (1..=nodes).collect();
        let mut map = RangeMap::new(all.clone());
        for i in 0..ranges {
            let last = map.ranges().last().unwrap().clone();
            map.apply(&MapChange::Split {
                range: last.id,
                epoch: last.epoch,
                at: format!("k{i:03}").into_bytes(),
                new_id: map.next_id(),
            })
            .unwrap();
        }
        while let Some((id, voters)) = next_placement(&map, &all, 3) {
            replace(&mut map, id, voters);
        }
        (map, all)
    }

    fn replace(map: &mut RangeMap, id: RangeId, voters: Vec<NodeId>) {
        let epoch = map.get(id).unwrap().epoch;
        map.apply(&MapChange::Replicas {
            range: id,
            epoch,
            voters,
            learners: vec![],
        })
        .unwrap();
    }

    /// Each node's (replicas, bytes).
    fn held(map: &RangeMap, all: &[NodeId], sizes: &BTreeMap<RangeId, u64>) -> Vec<(usize, u64)> {
        all.iter()
            .map(|n| {
                map.ranges()
                    .filter(|r| r.id != 0 && r.voters.contains(n))
                    .fold((0, 0), |(c, b), r| (c + 1, b + sizes[&r.id]))
            })
            .collect()
    }

    fn squares(map: &RangeMap, all: &[NodeId], sizes: &BTreeMap<RangeId, u64>) -> u128 {
        held(map, all, sizes)
            .iter()
            .map(|h| u128::from(h.1 / MIB).pow(2))
            .sum()
    }

    /// Ranges of very different sizes on three to seven nodes: the steps
    /// end; each moves one replica of one or two ranges, keeps every
    /// node's count of replicas within one of the others (the count rule
    /// has nothing to do after any of them) and lowers the sum of the
    /// squares of the nodes' bytes; with many ranges, the nodes end
    /// within the gap left alone, or half as far apart as they began.
    #[test]
    fn steps_by_bytes_end_with_nodes_close_in_bytes() {
        for nodes in [3u64, 4, 5, 6, 7] {
            for ranges in [5usize, 9, 16, 23, 40] {
                let (mut map, all) = placed(ranges, nodes);
                // Sizes from 16 MiB to 800 MiB.
                let sizes: BTreeMap<RangeId, u64> = map
                    .ranges()
                    .filter(|r| r.id != 0)
                    .map(|r| (r.id, 16 * MIB * (1 + r.id * 37 % 50)))
                    .collect();
                let spread = |map: &RangeMap| {
                    let h = held(map, &all, &sizes);
                    let bytes = h.iter().map(|h| h.1);
                    bytes.clone().max().unwrap() - bytes.min().unwrap()
                };
                let (before, mut steps) = (spread(&map), 0);
                loop {
                    let plan = next_byte_move(&map, &all, 3, &sizes, 0);
                    if plan.is_empty() {
                        break;
                    }
                    assert!(plan.len() <= 2);
                    let counts = |map: &RangeMap| {
                        held(map, &all, &sizes)
                            .iter()
                            .map(|h| h.0)
                            .collect::<Vec<_>>()
                    };
                    let (was, sum) = (counts(&map), squares(&map, &all, &sizes));
                    for (id, voters) in plan.clone() {
                        let old = map.get(id).unwrap().voters.clone();
                        assert_eq!(voters.len(), 3);
                        assert_eq!(voters.iter().filter(|v| !old.contains(v)).count(), 1);
                        replace(&mut map, id, voters);
                    }
                    if plan.len() == 2 {
                        assert_eq!(counts(&map), was, "a swap keeps the counts");
                    }
                    assert_eq!(
                        next_placement(&map, &all, 3),
                        None,
                        "the count rule undoes it"
                    );
                    assert!(squares(&map, &all, &sizes) < sum, "{plan:?}");
                    steps += 1;
                    assert!(steps < 500, "no end to the steps");
                }
                let after = spread(&map);
                // Few ranges, each a large part of a node's bytes, leave gaps no
                // step narrows; many even out.
                if nodes > 3 && ranges >= 16 {
                    let h = held(&map, &all, &sizes);
                    let mean = h.iter().map(|h| h.1).sum::<u64>() / nodes;
                    assert!(
                        after < MIN_GAP.max(mean / 5) || after * 2 < before,
                        "{nodes} nodes, {ranges} ranges: {before} -> {after}: {h:?}"
                    );
                    assert!(before < MIN_GAP.max(mean / 5) || steps > 0);
                }
                if nodes == 3 {
                    assert_eq!(steps, 0, "three nodes hold every range");
                }
            }
        }
    }

    /// Five nodes, sixteen ranges placed by count, one range holding most
    /// of the bytes: the nodes holding it give others away. Nothing moves
    /// while a range's size is unknown or a move is under way.
    #[test]
    fn one_heavy_range_moves_others_away_from_its_nodes() {
        let (map, all) = placed(16, 5);
        let mut sizes: BTreeMap<RangeId, u64> = map
            .ranges()
            .filter(|r| r.id != 0)
            .map(|r| (r.id, 16 * MIB))
            .collect();
        assert!(
            next_byte_move(&map, &all, 3, &sizes, 0).is_empty(),
            "even sizes"
        );
        let heavy = map.ranges().nth(3).unwrap().clone();
        sizes.insert(heavy.id, 400 * MIB);
        let plan = next_byte_move(&map, &all, 3, &sizes, 0);
        let (id, voters) = plan.first().cloned().expect("a step");
        let moved = map.get(id).unwrap().clone();
        let from = *moved.voters.iter().find(|v| !voters.contains(v)).unwrap();
        let to = *voters.iter().find(|v| !moved.voters.contains(v)).unwrap();
        assert!(
            heavy.voters.contains(&from),
            "off a node holding the heavy range"
        );
        assert!(!heavy.voters.contains(&to));
        assert_ne!(id, heavy.id, "the heavy range is more than the gap");
        // One range's size unknown: nothing.
        let mut partial = sizes.clone();
        partial.remove(&id);
        assert!(next_byte_move(&map, &all, 3, &partial, 0).is_empty());
        // A move under way (a learner): nothing.
        let mut moving = map.clone();
        moving
            .apply(&MapChange::Replicas {
                range: id,
                epoch: moved.epoch,
                voters: moved.voters.clone(),
                learners: vec![to],
            })
            .unwrap();
        assert!(next_byte_move(&moving, &all, 3, &sizes, 0).is_empty());
    }

    /// Four nodes, five ranges: node 4 holds one replica fewer and far
    /// fewer bytes. Ranges 1 and 2 are the large ones, side by side on
    /// the same nodes: one of them goes to node 4, unless they are small
    /// enough together to merge, when they stay lined up.
    #[test]
    fn a_range_waiting_to_merge_stays() {
        let all: Vec<NodeId> = vec![1, 2, 3, 4];
        let mut map = RangeMap::new(all.clone());
        for at in ["b", "c", "d", "e", "f"] {
            let last = map.ranges().last().unwrap().clone();
            map.apply(&MapChange::Split {
                range: last.id,
                epoch: last.epoch,
                at: at.as_bytes().to_vec(),
                new_id: map.next_id(),
            })
            .unwrap();
        }
        let ids: Vec<RangeId> = map.ranges().map(|r| r.id).filter(|&id| id != 0).collect();
        let place = [[1, 2, 3], [1, 2, 3], [1, 2, 4], [1, 3, 4], [2, 3, 4]];
        for (&id, voters) in ids.iter().zip(place) {
            replace(&mut map, id, voters.to_vec());
        }
        assert_eq!(next_placement(&map, &all, 3), None);
        let sizes: BTreeMap<RangeId, u64> = ids
            .iter()
            .zip([100, 100, 10, 10, 10])
            .map(|(&id, mib)| (id, mib * MIB))
            .collect();
        // (Moved alone, range 1 or 2 would take node 4 past the others: it
        // goes in a swap for a small one.)
        let plan = next_byte_move(&map, &all, 3, &sizes, 0);
        assert_eq!(plan.len(), 2, "{plan:?}");
        assert!(plan[0].0 == ids[0] || plan[0].0 == ids[1], "{plan:?}");
        assert!(plan[0].1.contains(&4));
        assert!(next_byte_move(&map, &all, 3, &sizes, 300 * MIB).is_empty());
    }
}
