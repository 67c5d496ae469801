//! The shortcut block (Honeycomb's ShortcutBlock): groups of up to six
//! shortcuts, one group per cache line, and a top line before them when
//! there is more than one group.

use super::header::{Header, shortcut_base};
use super::{rd_u16, rd_u64};
use crate::config::{LINE_BYTES, SHORTCUTS_PER_LINE};

/// The shortcut block of a node with `n` shortcuts: where its lines are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ShortcutBlock {
    pub base: usize,
    pub n: usize,
}

impl ShortcutBlock {
    pub(crate) fn of(h: &Header) -> ShortcutBlock {
        ShortcutBlock {
            base: shortcut_base(h.level),
            n: h.nshortcuts as usize,
        }
    }

    /// Groups of shortcuts (lines after the top line, if any).
    pub(crate) fn groups(&self) -> usize {
        self.n.div_ceil(SHORTCUTS_PER_LINE)
    }

    /// Whether a top line precedes the groups (more than one group).
    pub(crate) fn has_top(&self) -> bool {
        self.n > SHORTCUTS_PER_LINE
    }

    /// Offset of group `g`'s line.
    pub(crate) fn group_line(&self, g: usize) -> usize {
        self.base + if self.has_top() { LINE_BYTES } else { 0 } + g * LINE_BYTES
    }

    /// Shortcuts in group `g`.
    pub(crate) fn group_len(&self, g: usize) -> usize {
        (self.n - g * SHORTCUTS_PER_LINE).min(SHORTCUTS_PER_LINE)
    }

    /// Group `g`'s line decoded in one read: its prefixes, and the
    /// sorted-block offsets of its segments followed by the group's end
    /// (so segment `i` runs from `offsets[i]` to `offsets[i + 1]`, for `i`
    /// below `group_len`). Entries past `group_len` are meaningless.
    #[inline]
    pub(crate) fn group(&self, buf: &[u8], g: usize) -> GroupLine {
        let at = self.group_line(g);
        let line: &[u8; LINE_BYTES] = buf[at..at + LINE_BYTES].try_into().expect("a whole line");
        let word = |i: usize| u64::from_le_bytes(line[i * 8..i * 8 + 8].try_into().expect("8"));
        let half = |at: usize| u16::from_le_bytes([line[at], line[at + 1]]);
        GroupLine {
            prefixes: std::array::from_fn(word),
            offsets: std::array::from_fn(|i| half(SHORTCUTS_PER_LINE * 8 + i * 2)),
        }
    }

    /// The top line's prefixes (entries past `groups` are meaningless).
    #[inline]
    pub(crate) fn top_prefixes(&self, buf: &[u8]) -> [u64; crate::config::MAX_SHORTCUT_GROUPS] {
        let line = &buf[self.base..self.base + crate::config::MAX_SHORTCUT_GROUPS * 8];
        std::array::from_fn(|i| rd_u64(line, i * 8))
    }

    /// Shortcut `i`: (8-byte key prefix, sorted-block offset).
    pub(crate) fn get(&self, buf: &[u8], i: usize) -> (u64, usize) {
        let line = self.group_line(i / SHORTCUTS_PER_LINE);
        let s = i % SHORTCUTS_PER_LINE;
        (
            rd_u64(buf, line + s * 8),
            rd_u16(buf, line + SHORTCUTS_PER_LINE * 8 + s * 2) as usize,
        )
    }

    /// Writes every shortcut (and the top line) into `out`, the bytes of
    /// an unpublished buffer from offset 0; `sorted_end` ends the last
    /// segment.
    pub(crate) fn write(
        &self,
        out: &mut [u8],
        prefixes: &[u64],
        offsets: &[usize],
        sorted_end: usize,
    ) {
        debug_assert_eq!(prefixes.len(), self.n);
        for g in 0..self.groups() {
            let end = offsets
                .get((g + 1) * SHORTCUTS_PER_LINE)
                .copied()
                .unwrap_or(sorted_end);
            let at = self.group_line(g) + GROUP_END_AT;
            out[at..at + 2].copy_from_slice(&(end as u16).to_le_bytes());
        }
        for (i, (&pre, &off)) in prefixes.iter().zip(offsets).enumerate() {
            let line = self.group_line(i / SHORTCUTS_PER_LINE);
            let s = i % SHORTCUTS_PER_LINE;
            out[line + s * 8..line + s * 8 + 8].copy_from_slice(&pre.to_le_bytes());
            let at = line + SHORTCUTS_PER_LINE * 8 + s * 2;
            out[at..at + 2].copy_from_slice(&(off as u16).to_le_bytes());
            if self.has_top() && s == 0 {
                let t = self.base + (i / SHORTCUTS_PER_LINE) * 8;
                out[t..t + 8].copy_from_slice(&pre.to_le_bytes());
            }
        }
    }
}

/// One group line, decoded (`ShortcutBlock::group`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupLine {
    pub prefixes: [u64; SHORTCUTS_PER_LINE],
    /// Segment starts, then the group's end.
    pub offsets: [u16; SHORTCUTS_PER_LINE + 1],
}

/// Offset in a group line of its end offset (after six prefixes and six
/// offsets).
const GROUP_END_AT: usize = SHORTCUTS_PER_LINE * 10;
const _: () = assert!(GROUP_END_AT + 2 <= LINE_BYTES);
// `GroupLine::offsets` reads the group end as the entry after the last offset.
const _: () = assert!(GROUP_END_AT == SHORTCUTS_PER_LINE * 8 + SHORTCUTS_PER_LINE * 2);
