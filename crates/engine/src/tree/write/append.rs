//! The fast path (Honeycomb 3.4): the item appended to the locked leaf's
//! log block, published with its size, log count and unlock in one store.

use super::lock::LockedLeaf;
use super::lookup::Lookup;
use super::{WriteOp, fault, log_entry};
use crate::tree::Tree;
use crate::tree::build::{out_of_line, own_value};
use crate::tree::node::{
    ITEM_DUP, ITEM_REPLACES, ITEM_TOMBSTONE, LOG_META_DUP, LOG_META_EXTERNAL, LOG_META_HINT,
    LOG_META_REPLACES, LOG_META_TOMBSTONE, LogDirEntry, NodePtr, ValueRef, encode_item, item_len,
    key_fp, state_appended, state_log_count, state_size,
};
use crate::tree::version::WriteVersion;

impl Tree {
    /// Fast path: appends the item to the locked leaf `leaf` (buffer
    /// `buf`) log block, takes the write version and unlocks in one store;
    /// the caller completes the version. Err gives the lock back if the
    /// log is full.
    pub(super) fn append(
        &self,
        buf: NodePtr,
        leaf: LockedLeaf,
        key: &[u8],
        op: &WriteOp<'_>,
        look: &Lookup,
        logged: bool,
    ) -> Result<WriteVersion<'_>, LockedLeaf> {
        let g = &self.g;
        let state = leaf.state();
        let (value, expiry, cflags, tomb) = match op {
            WriteOp::Put {
                value,
                expiry,
                flags,
            } => (&value[..], *expiry, *flags, 0),
            WriteOp::Delete => (&[][..], 0, 0, ITEM_TOMBSTONE),
            WriteOp::Noop => unreachable!("no-op writes return early"),
        };
        let size = state_size(state);
        let sorted_end = buf.header().sorted_end as usize;
        let external = out_of_line(g, ValueRef::Inline(value));
        let len = item_len(
            key.len(),
            value.len(),
            external,
            0,
            expiry != 0,
            cflags != 0,
            true,
        );
        debug_assert!(len <= g.max_item, "key and value limits keep items small");
        let nlog = state_log_count(state);
        if size + len > buf.capacity(g)
            || size - sorted_end + len > g.log_bytes
            || nlog >= crate::config::LOG_DIR_MAX
        {
            return Err(leaf);
        }
        let (bp, replaces, hint, dup) = (look.backptr, look.replaces, look.hint, look.dup);
        let flags = tomb
            | if replaces { ITEM_REPLACES } else { 0 }
            | if dup && !replaces { ITEM_DUP } else { 0 };
        let (value, added) = own_value(g, ValueRef::Inline(value));
        // A long value's allocation: counted until the last buffer that
        // references it is freed (`NodePtr::free`). A sharded add, not a
        // shared line.
        if added != 0 {
            self.shared.counter.external_bytes.add(added as i64);
        }
        // SAFETY: the leaf is locked by this thread and `size` is its published
        // size, so no reader looks at `[size, size + len)` (node invariant 2).
        let out = unsafe { buf.bytes_mut(size, size + len) };
        encode_item(
            out,
            flags,
            key,
            value,
            0,
            expiry,
            cflags,
            Some((bp, hint as u8)),
        );
        let meta = hint as u8
            | if replaces { LOG_META_REPLACES } else { 0 }
            | if dup && !replaces { LOG_META_DUP } else { 0 }
            | if tomb != 0 { LOG_META_TOMBSTONE } else { 0 }
            | if matches!(value, ValueRef::External(..)) {
                LOG_META_EXTERNAL
            } else {
                0
            };
        debug_assert!(hint as u8 <= LOG_META_HINT);
        let entry = LogDirEntry {
            at: size as u16,
            bp: bp as u16,
            fp: key_fp(key),
            meta,
        };
        // SAFETY: the leaf is locked by this thread and `nlog` is its
        // published log count.
        unsafe { buf.write_log_dir_entry(nlog, entry) };
        let v = self.next_version(log_entry(key, op, logged));
        fault::point("append");
        out[7..15].copy_from_slice(&v.get().to_le_bytes());
        leaf.publish_append(state_appended(state, size + len));
        Ok(v)
    }
}
