//! Learned search of interior nodes (DPA-Store sections 2.1 and 3.1.1): a
//! piecewise-linear model from a key's 8-byte prefix to its item's index,
//! with an error bound, in place of the top line of the shortcut block.
//!
//! A node gets a model only when its items all have one length (fixed-size
//! keys: then an item's index gives its offset) and the window the model
//! leaves to scan is no larger than a shortcut segment: such a search
//! reads the model line and the window instead of the top line, a group
//! line and a segment. Any other node keeps its shortcut search
//! (`Config::learned_search` turns the option on; a node's `NODE_LEARNED`
//! flag says it has a model). The shortcuts stay valid below the model
//! line: group lines and the last segment are still read through them.
//!
//! Why the window holds the answer. The prediction `P(x)` of a prefix `x`
//! is non-decreasing in `x`: within a piece it rounds a non-negative slope
//! times `x - x0` (f64 conversion, products and floors keep order),
//! clamped to the piece's index range, and a later piece starts where the
//! one before it ends. (Two pieces may start at one prefix, when a run of
//! tied prefixes is longer than the error allows; a search then always
//! takes the later one, and the error is measured with that choice.) The build measures `e = max |P(x_i) - i|` over the
//! node's own items with the same arithmetic a search uses. For a key with
//! prefix `x`, the last item `t` with key `<=` (or `<`) it lies between
//! `L`, the last item with a prefix below `x`, and `U`, the last with a
//! prefix `<= x` (prefixes decide unless they tie). Item `L + 1` has a
//! prefix `>= x`, so `P(x) <= P(x_{L+1}) <= L + 1 + e`, hence
//! `L >= P(x) - e - 1`; and `U <= P(x_U) + e <= P(x) + e` (or, with no item
//! at `x`, `U = L <= P(x_L) + e <= P(x) + e`). So `t` is in
//! `[P(x) - e - 1, P(x) + e]`, or no item qualifies at all.

use super::header::shortcut_base;
use super::{Header, rd_u16, rd_u64};
use crate::config::LINE_BYTES;

/// Most pieces a model line holds: a 4-byte head, then 14 bytes a piece.
pub(crate) const MAX_PIECES: usize = 4;
const PIECE_BYTES: usize = 14;
const HEAD_BYTES: usize = 4;
const _: () = assert!(HEAD_BYTES + MAX_PIECES * PIECE_BYTES <= LINE_BYTES);
/// Largest error bound a model may have (one byte).
const MAX_ERR: usize = 255;

/// One piece: keys with prefix `>= x0` (and below the next piece's) are
/// predicted at `i0 + round(slope * (x - x0))`, at most the next piece's
/// first index (rounded to the nearest index).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Piece {
    x0: u64,
    slope: f32,
    i0: u16,
}

/// A node's model: its pieces, error bound, item length and item count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Model {
    pieces: [Piece; MAX_PIECES],
    n_pieces: usize,
    pub err: usize,
    pub item_len: usize,
    pub n: usize,
}

impl Model {
    /// The predicted index of prefix `x`.
    #[inline(always)]
    fn predict(&self, x: u64) -> usize {
        let ps = &self.pieces[..self.n_pieces];
        let j = ps.iter().rposition(|p| p.x0 <= x).unwrap_or(0);
        let end = ps.get(j + 1).map_or(self.n - 1, |q| q.i0 as usize);
        on_piece(ps[j], end, x)
    }

    /// The items whose range holds the answer for prefix `x`: (first,
    /// last) index, inclusive.
    #[cfg(test)]
    pub(crate) fn window(&self, x: u64) -> (usize, usize) {
        let p = self.predict(x);
        (
            p.saturating_sub(self.err + 1),
            (p + self.err).min(self.n - 1),
        )
    }

    /// Fits a model to `xs`, the prefixes of a node's items in order (all
    /// of length `item_len`), with an error bound of at most `max_err`:
    /// for each target bound from 0 up, greedy pieces (each as long as
    /// some slope keeps every item in it within the target: the "shrinking
    /// cone"), then the bound measured as a search computes it. None with
    /// fewer than two items, or when no target fits in `MAX_PIECES` pieces
    /// within `max_err`.
    pub(crate) fn fit(xs: &[u64], item_len: usize, max_err: usize) -> Option<Model> {
        let n = xs.len();
        if n < 2 || n > u16::MAX as usize {
            return None;
        }
        for target in 0..=max_err.min(MAX_ERR) {
            let Some((pieces, n_pieces)) = greedy(xs, target as f64) else {
                continue;
            };
            let mut m = Model {
                pieces,
                n_pieces,
                err: 0,
                item_len,
                n,
            };
            m.err = xs
                .iter()
                .enumerate()
                .map(|(i, &x)| m.predict(x).abs_diff(i))
                .max()
                .unwrap_or(0);
            if m.err <= max_err.min(MAX_ERR) {
                return Some(m);
            }
        }
        None
    }

    /// Writes the model line (`LINE_BYTES` bytes).
    pub(crate) fn write(&self, out: &mut [u8]) {
        out[..LINE_BYTES].fill(0);
        out[0] = self.n_pieces as u8;
        out[1] = self.err as u8;
        out[2..4].copy_from_slice(&(self.item_len as u16).to_le_bytes());
        for (j, p) in self.pieces[..self.n_pieces].iter().enumerate() {
            let at = HEAD_BYTES + j * PIECE_BYTES;
            out[at..at + 8].copy_from_slice(&p.x0.to_le_bytes());
            out[at + 8..at + 12].copy_from_slice(&p.slope.to_le_bytes());
            out[at + 12..at + 14].copy_from_slice(&p.i0.to_le_bytes());
        }
    }

    /// The model's own invariants: pieces start at ascending indexes (the
    /// first at 0) and non-decreasing prefixes, and the bound is within
    /// the byte it is stored in.
    #[cfg(test)]
    pub(crate) fn well_formed(&self) -> bool {
        let ps = &self.pieces[..self.n_pieces];
        ps.first().is_some_and(|p| p.i0 == 0)
            && ps
                .windows(2)
                .all(|w| w[0].i0 < w[1].i0 && w[0].x0 <= w[1].x0)
            && ps
                .iter()
                .all(|p| (p.i0 as usize) < self.n && p.slope >= 0.0)
            && self.err <= MAX_ERR
    }

    /// Reads the model line of a node flagged `NODE_LEARNED` (header `h`,
    /// published bytes `buf`).
    #[cfg(test)]
    pub(crate) fn of(buf: &[u8], h: &Header) -> Model {
        Model::read(buf, h.level, h.nitems as usize)
    }

    /// Reads the model line of a node at `level` with `n` items.
    #[cfg(test)]
    fn read(buf: &[u8], level: u8, n: usize) -> Model {
        let at = shortcut_base(level);
        let line = &buf[at..at + LINE_BYTES];
        let mut pieces = [Piece {
            x0: 0,
            slope: 0.0,
            i0: 0,
        }; MAX_PIECES];
        let n_pieces = (line[0] as usize).clamp(1, MAX_PIECES);
        for (j, p) in pieces.iter_mut().enumerate().take(n_pieces) {
            let o = HEAD_BYTES + j * PIECE_BYTES;
            *p = Piece {
                x0: rd_u64(line, o),
                slope: f32::from_le_bytes(line[o + 8..o + 12].try_into().expect("4 bytes")),
                i0: rd_u16(line, o + 12),
            };
        }
        Model {
            pieces,
            n_pieces,
            err: line[1] as usize,
            item_len: rd_u16(line, 2) as usize,
            n,
        }
    }
}

/// The prediction of piece `p` (whose index range ends at `end`) for
/// prefix `x`: the one arithmetic both the fit (measuring the bound) and
/// the search use.
#[inline(always)]
fn on_piece(p: Piece, end: usize, x: u64) -> usize {
    let d = x.saturating_sub(p.x0) as f64;
    // Rounded to the nearest index (a floor of the value plus a half: still
    // non-decreasing), so that float error in an exact fit does not cost an
    // index.
    let off = (f64::from(p.slope) * d + 0.5).floor();
    // `as` saturates: a huge offset is clamped to the piece's end.
    (p.i0 as usize).saturating_add(off as usize).min(end)
}

/// `Model::window` read straight from a learned node's model line (header
/// `h`, published bytes `buf`), decoding only the piece it needs: (first,
/// last, item length). The search's hot path.
#[inline(always)]
pub(crate) fn line_window(buf: &[u8], h: &Header, x: u64) -> (usize, usize, usize) {
    let at = shortcut_base(h.level);
    let line: &[u8; LINE_BYTES] = buf[at..at + LINE_BYTES].try_into().expect("a whole line");
    window_of_line(line, h.nitems as usize, x)
}

/// `line_window` for a model line of a node with `n` items.
#[inline(always)]
fn window_of_line(line: &[u8; LINE_BYTES], n: usize, x: u64) -> (usize, usize, usize) {
    let k = (line[0] as usize).clamp(1, MAX_PIECES);
    let (err, item_len) = (line[1] as usize, rd_u16(line, 2) as usize);
    let x0 = |j: usize| rd_u64(line, HEAD_BYTES + j * PIECE_BYTES);
    let mut j = 0;
    for i in 1..k {
        if x0(i) <= x {
            j = i;
        }
    }
    let o = HEAD_BYTES + j * PIECE_BYTES;
    let piece = Piece {
        x0: x0(j),
        slope: f32::from_le_bytes(line[o + 8..o + 12].try_into().expect("4 bytes")),
        i0: rd_u16(line, o + 12),
    };
    let end = if j + 1 < k {
        rd_u16(line, o + PIECE_BYTES + 12) as usize
    } else {
        n - 1
    };
    let p = on_piece(piece, end, x);
    (p.saturating_sub(err + 1), (p + err).min(n - 1), item_len)
}

/// Pieces for `xs` within `target` items each: a piece starts at an item
/// and takes the following ones while some slope through its start keeps
/// them all within `target` of their index. None past `MAX_PIECES`.
fn greedy(xs: &[u64], target: f64) -> Option<([Piece; MAX_PIECES], usize)> {
    debug_assert!(xs.is_sorted(), "a node's prefixes ascend");
    let n = xs.len();
    let mut pieces = [Piece {
        x0: 0,
        slope: 0.0,
        i0: 0,
    }; MAX_PIECES];
    let (mut count, mut s) = (0, 0);
    while s < n {
        if count == MAX_PIECES {
            return None;
        }
        let (mut lo, mut hi) = (0.0f64, f64::INFINITY);
        let mut e = s + 1;
        while e < n {
            let (dx, di) = ((xs[e] - xs[s]) as f64, (e - s) as f64);
            if dx == 0.0 {
                // Predicted at the piece's start whatever the slope.
                if di > target {
                    break;
                }
            } else {
                let (a, b) = (lo.max((di - target) / dx), hi.min((di + target) / dx));
                if a > b {
                    break;
                }
                (lo, hi) = (a, b);
            }
            e += 1;
        }
        let slope = if hi.is_finite() { (lo + hi) / 2.0 } else { lo };
        pieces[count] = Piece {
            x0: xs[s],
            slope: slope as f32,
            i0: s as u16,
        };
        count += 1;
        s = e;
    }
    Some((pieces, count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The window of every prefix, present or not, holds the last index
    /// whose prefix is `<=` it and the last whose prefix is `<` it.
    fn check(xs: &[u64], queries: &[u64]) -> Result<(), TestCaseError> {
        let Some(m) = Model::fit(xs, 18, 255) else {
            return Ok(());
        };
        let all = xs.iter().copied().chain(queries.iter().copied());
        let mut line = [0u8; LINE_BYTES];
        m.write(&mut line);
        for x in all.chain(xs.iter().map(|x| x.wrapping_add(1))) {
            let (lo, hi) = m.window(x);
            // The search reads the line itself, and must agree.
            prop_assert_eq!(window_of_line(&line, xs.len(), x), (lo, hi, 18));
            let le = xs.partition_point(|&p| p <= x);
            let lt = xs.partition_point(|&p| p < x);
            // The answer lies between the last below and the last at x.
            for t in [lt, le] {
                if t > 0 {
                    prop_assert!(
                        lo < t && t - 1 <= hi,
                        "x {x}: index {} outside {lo}..={hi} (err {})",
                        t - 1,
                        m.err
                    );
                }
            }
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn the_window_holds_the_answer_for_dense_keys(start in any::<u32>(), step in 1u64..1000, n in 2usize..400) {
            let xs: Vec<u64> = (0..n as u64).map(|i| ((start as u64) << 32) + i * step).collect();
            let m = Model::fit(&xs, 18, 0).unwrap();
            prop_assert_eq!(m.n_pieces, 1, "dense keys fit one line");
            check(&xs, &[0, u64::MAX])?;
        }

        #[test]
        fn the_window_holds_the_answer_for_any_keys(
            mut xs in proptest::collection::vec(any::<u64>(), 2..300),
            queries in proptest::collection::vec(any::<u64>(), 0..50),
        ) {
            xs.sort_unstable();
            check(&xs, &queries)?;
        }

        #[test]
        fn the_window_holds_the_answer_for_clustered_keys_with_ties(
            clusters in proptest::collection::vec((any::<u64>(), 1usize..40, 0u64..3), 1..8),
            queries in proptest::collection::vec(any::<u64>(), 0..50),
        ) {
            let mut xs: Vec<u64> = clusters
                .iter()
                .flat_map(|&(base, len, step)| (0..len as u64).map(move |i| base.saturating_add(i * step)))
                .collect();
            xs.sort_unstable();
            check(&xs, &queries)?;
        }
    }

    #[test]
    fn a_model_line_reads_back_as_written() {
        let xs: Vec<u64> = (0..100u64).map(|i| i * i * 1000).collect();
        let m = Model::fit(&xs, 26, 255).unwrap();
        let mut line = vec![0u8; 64 + 64];
        m.write(&mut line[64..]);
        // An interior node's model line follows its header.
        assert_eq!(Model::read(&line, 1, 100), m);
    }
}
