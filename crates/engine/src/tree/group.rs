//! Atomic groups (docs/design.md, "Atomic groups"): several writes made
//! visible at once. The clock does the releasing (`VersionClock` groups);
//! this is the tree's side: opening a group, bracketing it in the log with
//! GROUP_BEGIN and GROUP_END records, and closing it on every way out.

use super::version::{GroupHold, VersionClock};
use super::{LogEntry, Tree};

/// An open atomic group: from [`Tree::open_group`] until [`Group::close`],
/// the read version stays below every version taken meanwhile. Each write
/// of the group is an ordinary [`Tree::write`]; the caller reports the
/// version each one's answer rests on ([`Group::extend`]).
///
/// Dropping a group without closing it (a write refused midway by a
/// shutdown or a log failure, or a panic) must not let it become visible in
/// part; with a log, its GROUP_BEGIN has no end, so recovery cuts the log
/// there and nothing after it may be acknowledged. Its span is then closed
/// for good and the clock poisoned, as after a log failure: the store stays
/// readable at the state before the group, and waits for later writes give
/// up. Without a log a dropped group (only a panic drops one) is closed
/// normally: there is nothing to recover, and the store keeps serving.
#[must_use = "a group holds the read version back until it is closed"]
pub(crate) struct Group<'t> {
    tree: &'t Tree,
    clock: &'t VersionClock,
    hold: Option<GroupHold<'t>>,
    /// The version of the group's GROUP_BEGIN record (with a log).
    begin: Option<u64>,
    /// The newest version the group's answers rest on so far.
    last: u64,
}

impl std::fmt::Debug for Group<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("begin", &self.begin)
            .field("last", &self.last)
            .finish()
    }
}

impl Tree {
    /// Opens an atomic group once the previous one is closed (groups take
    /// turns). With a log, the group is bracketed there too, so that
    /// recovery brings it back whole or not at all.
    pub(crate) fn open_group(&self) -> Group<'_> {
        let mut group = Group {
            tree: self,
            clock: &self.clock,
            hold: Some(self.clock.open_group()),
            begin: None,
            last: 0,
        };
        if self.log.is_some() {
            group.begin = Some(self.next_version(Some(LogEntry::GroupBegin)).complete());
        }
        group
    }
}

impl Group<'_> {
    /// Extends the group's span to `v`, the version a write of the group
    /// rests on: every version its writes took, and every version their
    /// decisions saw. A delete that found its key already deleted by
    /// another writer saw that write, whose version may be above all of the
    /// group's and not complete yet; released before it, the group would be
    /// seen without it.
    pub(crate) fn extend(&mut self, v: u64) {
        self.last = self.last.max(v);
    }

    /// Ends the group (with a log, by its GROUP_END record) and hands the
    /// turn on. Returns the version the group's acknowledgement waits for;
    /// the caller waits for it without holding the turn.
    pub(crate) fn close(mut self) -> u64 {
        if let Some(begin) = self.begin {
            let end = self.tree.next_version(Some(LogEntry::GroupEnd { begin }));
            self.last = end.complete();
        }
        if let Some(hold) = self.hold.take() {
            self.clock.close_group(hold, self.last);
        }
        self.last
    }
}

impl Drop for Group<'_> {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            if self.begin.is_some() {
                self.clock.poison();
                self.clock.close_group(hold, u64::MAX);
            } else {
                // Memory only: nothing to recover; keep serving.
                self.clock.close_group(hold, self.last);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::sync::Arc;

    use crate::tree::version::VersionClock;
    use crate::tree::write::tests::{get, put, tree, within_bound};
    use crate::tree::write::{WriteMode, WriteOp};
    use crate::tree::{LogEntry, Tree, VersionLog};

    /// A log that records nothing: the tree behaves as a durable store's.
    #[derive(Debug)]
    struct NullLog;

    impl VersionLog for NullLog {
        fn next_version(&self, clock: &VersionClock, _entry: Option<LogEntry<'_>>) -> u64 {
            clock.next()
        }
    }

    /// Opens a group, writes `k1`, then panics in the decision of its
    /// write to `k2`.
    fn a_group_whose_second_write_panics(tree: &Tree) {
        let died = catch_unwind(AssertUnwindSafe(|| {
            let mut group = tree.open_group();
            group.extend(put(tree, b"k1", b"group"));
            let mode = WriteMode {
                now: None,
                logged: true,
            };
            tree.write(b"k2", mode, |_| -> (WriteOp<'static>, ()) {
                panic!("a write of the group panics")
            });
        }));
        assert!(died.is_err());
    }

    /// Without a log there is nothing to recover: the group is closed as it
    /// stands, its first write released, and writing goes on.
    #[test]
    fn a_group_unwinding_in_memory_is_closed_and_writes_go_on() {
        let tree = tree();
        put(&tree, b"k2", b"before");
        a_group_whose_second_write_panics(&tree);
        let t = Arc::clone(&tree);
        within_bound("writes after the group", move || {
            let v = put(&t, b"k2", b"after");
            assert!(t.wait_released(v));
            // The next group takes its turn.
            let mut group = t.open_group();
            group.extend(put(&t, b"k3", b"next group"));
            assert!(t.wait_released(group.close()));
        });
        assert_eq!(get(&tree, b"k1").as_deref(), Some(&b"group"[..]));
        assert_eq!(get(&tree, b"k2").as_deref(), Some(&b"after"[..]));
    }

    /// With a log, the group's GROUP_BEGIN has no end: the clock is
    /// poisoned, as after a log failure. Readers stay at the state before
    /// the group, and waits for later writes give up at once instead of
    /// waiting for a release that never comes.
    #[test]
    fn a_group_unwinding_with_a_log_poisons_the_clock() {
        let mut tree = Tree::new(crate::config::Geometry::new(1024));
        tree.set_log(Arc::new(NullLog));
        let tree = Arc::new(tree);
        put(&tree, b"k2", b"before");
        a_group_whose_second_write_panics(&tree);
        assert!(tree.clock.is_poisoned());
        assert_eq!(get(&tree, b"k1"), None, "part of a failed group is visible");
        let t = Arc::clone(&tree);
        let released = within_bound("a write after the group", move || {
            let v = put(&t, b"k2", b"after");
            t.wait_released(v)
        });
        assert!(
            !released,
            "a write after a failed logged group was acknowledged"
        );
        assert_eq!(get(&tree, b"k2").as_deref(), Some(&b"before"[..]));
    }
}
