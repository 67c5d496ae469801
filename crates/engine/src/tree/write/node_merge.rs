//! Node merges: an underfull node joins a neighbour under the same parent
//! (the left one survives, so the leaf chain stays intact).

use super::Step;
use super::split::{Content, NewNode, Plan, children_of, leaf_entries};
use crate::tree::Tree;
use crate::tree::build::{Child, interior_item_len};
use crate::tree::node::Lid;

impl Tree {
    /// Tries to merge `content` (of `node`, child `idx` of `parent`) with a
    /// neighbour. On success the parent is locked, the merged node is planned
    /// and (first replaced index, its parent entry) is returned; otherwise the
    /// content comes back unchanged.
    pub(super) fn try_merge<'a>(
        &self,
        plan: &mut Plan<'a>,
        parent: Step,
        siblings: &[Child<'a>],
        idx: usize,
        node: Step,
        content: Content<'a>,
    ) -> Result<(usize, Child<'a>), Content<'a>> {
        let cap = content.capacity(self);
        let bytes = content.bytes(self);
        // Prefer the right neighbour (this node survives), else the left one
        // (it survives): the survivor is always the left node, so no leaf
        // outside the parent ever points at the removed one.
        let (left_idx, other_idx) = if idx + 1 < siblings.len() {
            (idx, idx + 1)
        } else if idx > 0 {
            (idx - 1, idx)
        } else {
            return Err(content);
        };
        let other_lid = siblings[if other_idx == idx {
            left_idx
        } else {
            other_idx
        }]
        .lid;
        let Some(obuf) = self.pages.get(other_lid) else {
            return Err(content);
        };
        let ostate = obuf.load_state();
        let other_content = match &content {
            Content::Leaf(_) => Content::Leaf(leaf_entries(obuf)),
            Content::Interior(_, l) => Content::Interior(children_of(obuf), *l),
        };
        let obytes = other_content.bytes(self);
        let sep_bytes = interior_item_len(siblings[other_idx].key);
        // Merged nodes stay under three quarters full so the next few writes
        // do not split them again; a node with nothing in it (an empty leaf,
        // an interior node left with one child) merges whenever it fits, so
        // empty nodes and one-child parents go away.
        let limit = if bytes == 0 { cap } else { cap * 3 / 4 };
        if bytes + obytes + sep_bytes > limit {
            return Err(content);
        }
        let held_before = plan.held.len();
        if !plan.held.try_lock(obuf, ostate) || !self.lock(plan, parent) {
            plan.held.unlock_from(held_before);
            return Err(content);
        }
        // Entries of the other node were read before the lock; the lock's
        // compare-and-swap on the same state proves they are unchanged.
        let (left, right_c, left_step, right_buf) = if other_idx == idx + 1 {
            (content, other_content, node, obuf)
        } else {
            (
                other_content,
                content,
                Step {
                    buf: obuf,
                    state: ostate,
                    lid: other_lid,
                },
                node.buf,
            )
        };
        let merged = match (left, right_c) {
            (Content::Leaf(mut a), Content::Leaf(b)) => {
                a.extend(b);
                Content::Leaf(a)
            }
            (Content::Interior(mut a, l), Content::Interior(mut b, _)) => {
                b[0].key = siblings[other_idx].key;
                a.extend(b);
                Content::Interior(a, l)
            }
            _ => unreachable!("siblings share a level"),
        };
        let right_lid = siblings[other_idx].lid;
        let right_link = if merged.level() == 0 {
            Lid(right_buf.header().link)
        } else {
            Lid::NONE
        };
        plan.nodes.push(NewNode {
            lid: left_step.lid,
            content: merged,
            replaces: Some(left_step.buf),
            right: right_link,
        });
        plan.kills.push((right_lid, right_buf));
        Ok((
            left_idx,
            Child {
                key: siblings[left_idx].key,
                lid: left_step.lid,
            },
        ))
    }
}
