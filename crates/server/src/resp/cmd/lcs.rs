//! LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]: the longest
//! common subsequence of two values, by Redis's dynamic programme, so the
//! string and the match ranges are the ones Redis answers (where several
//! subsequences are longest, which one is a property of the walk back).

use super::{Ctx, eq_ic};
use crate::resp::error::{CmdError, CmdResult};

/// What LCS answers.
#[derive(Debug, Default)]
struct Options {
    len: bool,
    idx: bool,
    min_match_len: u64,
    with_match_len: bool,
}

pub(super) fn lcs(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let mut o = Options::default();
    let mut i = 3;
    while i < cx.args.len() {
        let a = cx.args[i];
        if eq_ic(a, "idx") {
            o.idx = true;
        } else if eq_ic(a, "len") {
            o.len = true;
        } else if eq_ic(a, "withmatchlen") {
            o.with_match_len = true;
        } else if eq_ic(a, "minmatchlen") && i + 1 < cx.args.len() {
            o.min_match_len = cx.int(i + 1)?.max(0) as u64;
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if o.idx && o.len {
        return Err(CmdError::err(
            "If you want both the length and indexes, please just use IDX.",
        ));
    }
    // Absent keys read as empty strings.
    let a = cx.get_with(cx.args[1], |it| it.map(|it| it.value.to_vec()))?;
    let b = cx.get_with(cx.args[2], |it| it.map(|it| it.value.to_vec()))?;
    let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
    // The table is transient memory of one request: bounded as a request
    // is (Redis bounds it by proto-max-bulk-len).
    let cells = (a.len() as u64 + 1).saturating_mul(b.len() as u64 + 1);
    if cells.saturating_mul(4) > cx.shared.live.max_request_bytes() {
        return Err(CmdError::err(
            "Insufficient memory, transient memory for LCS exceeds max-request-bytes",
        ));
    }
    let m = Lcs::new(&a, &b);
    if o.len {
        cx.r.int(i64::from(m.len()));
        return Ok(());
    }
    let (common, ranges) = m.walk_back(o.min_match_len);
    if !o.idx {
        cx.r.bulk(&common);
        return Ok(());
    }
    cx.r.map(2);
    cx.r.bulk_str("matches");
    cx.r.array(ranges.len());
    for r in &ranges {
        cx.r.array(2 + usize::from(o.with_match_len));
        cx.r.array(2);
        cx.r.int(i64::from(r.a.0));
        cx.r.int(i64::from(r.a.1));
        cx.r.array(2);
        cx.r.int(i64::from(r.b.0));
        cx.r.int(i64::from(r.b.1));
        if o.with_match_len {
            cx.r.int(i64::from(r.a.1 - r.a.0 + 1));
        }
    }
    cx.r.bulk_str("len");
    cx.r.int(i64::from(m.len()));
    Ok(())
}

/// A run of matching bytes: first and last index in each value.
#[derive(Debug, PartialEq, Eq)]
struct Range {
    a: (u32, u32),
    b: (u32, u32),
}

/// The table: `at(i, j)` is the LCS length of `a[..i]` and `b[..j]`.
struct Lcs<'a> {
    a: &'a [u8],
    b: &'a [u8],
    dp: Vec<u32>,
}

impl<'a> Lcs<'a> {
    fn new(a: &'a [u8], b: &'a [u8]) -> Lcs<'a> {
        let w = b.len() + 1;
        let mut dp = vec![0u32; (a.len() + 1) * w];
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                dp[i * w + j] = if a[i - 1] == b[j - 1] {
                    dp[(i - 1) * w + j - 1] + 1
                } else {
                    dp[(i - 1) * w + j].max(dp[i * w + j - 1])
                };
            }
        }
        Lcs { a, b, dp }
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.dp[i * (self.b.len() + 1) + j]
    }

    fn len(&self) -> u32 {
        self.at(self.a.len(), self.b.len())
    }

    /// The common subsequence, and its runs of at least `min` bytes from
    /// the last to the first, walking back as Redis does (on a tie, along
    /// `b`).
    fn walk_back(&self, min: u64) -> (Vec<u8>, Vec<Range>) {
        let mut common = vec![0u8; self.len() as usize];
        let mut left = common.len();
        let mut ranges = Vec::new();
        let mut run: Option<Range> = None;
        let (mut i, mut j) = (self.a.len(), self.b.len());
        while i > 0 && j > 0 {
            let mut emit = false;
            if self.a[i - 1] == self.b[j - 1] {
                common[left - 1] = self.a[i - 1];
                left -= 1;
                let (ai, bj) = (i as u32 - 1, j as u32 - 1);
                match &mut run {
                    // Contiguous with the run: extend it backward.
                    Some(r) if r.a.0 == ai + 1 && r.b.0 == bj + 1 => {
                        r.a.0 = ai;
                        r.b.0 = bj;
                    }
                    Some(_) => emit = true,
                    None => {
                        run = Some(Range {
                            a: (ai, ai),
                            b: (bj, bj),
                        })
                    }
                }
                if run.as_ref().is_some_and(|r| r.a.0 == 0 || r.b.0 == 0) {
                    emit = true;
                }
                i -= 1;
                j -= 1;
            } else {
                if self.at(i - 1, j) > self.at(i, j - 1) {
                    i -= 1;
                } else {
                    j -= 1;
                }
                emit = run.is_some();
            }
            if emit
                && let Some(r) = run.take()
                && u64::from(r.a.1 - r.a.0 + 1) >= min
            {
                ranges.push(r);
            }
        }
        (common, ranges)
    }
}

#[cfg(test)]
mod tests {
    use super::{Lcs, Range};

    fn ranges(a: &[u8], b: &[u8], min: u64) -> Vec<((u32, u32), (u32, u32))> {
        let (_, r) = Lcs::new(a, b).walk_back(min);
        r.into_iter().map(|Range { a, b }| (a, b)).collect()
    }

    #[test]
    fn redis_examples() {
        // The command reference's examples.
        let (a, b) = (b"ohmytext".as_slice(), b"mynewtext".as_slice());
        let m = Lcs::new(a, b);
        assert_eq!(m.len(), 6);
        assert_eq!(m.walk_back(0).0, b"mytext");
        assert_eq!(ranges(a, b, 0), [((4, 7), (5, 8)), ((2, 3), (0, 1))]);
        assert_eq!(ranges(a, b, 4), [((4, 7), (5, 8))]);
        // Redis's tests (`tests/unit/type/string.tcl`).
        let rna1 = b"CACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTTCGTCCGGGTGTG";
        let rna2 = b"ATTAAAGGTTTATACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTT";
        let m = Lcs::new(rna1, rna2);
        assert_eq!(m.len(), 227);
        let (common, _) = m.walk_back(0);
        assert_eq!(&common[..], &b"ACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTT"[..]);
        assert_eq!(
            ranges(rna1, rna2, 0),
            [
                ((238, 238), (239, 239)),
                ((236, 236), (238, 238)),
                ((229, 230), (236, 237)),
                ((224, 224), (235, 235)),
                ((1, 222), (13, 234))
            ]
        );
        assert_eq!(ranges(rna1, rna2, 5), [((1, 222), (13, 234))]);
        // Empty and absent values.
        assert_eq!(Lcs::new(b"", b"abc").len(), 0);
        assert_eq!(Lcs::new(b"abc", b"").walk_back(0).1, []);
    }
}
