//! What the command table says of a command ([`Spec`]) and how it takes
//! part in a turn ([`Kind`]): the types the table is made of, which the
//! commands that read the table (MULTI's queueing) see without the table.

use super::Ctx;
use super::batch::BatchRead;
use crate::resp::error::CmdResult;
use crate::turn::Class;

/// A command's handler.
pub(crate) type Handler = fn(&mut Ctx<'_, '_>) -> CmdResult;

/// What a command does to the store, which decides its place in a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Touches no stored data: connection and server state.
    Control,
    /// Reads the store by itself.
    Read,
    /// A read the read engine answers in batches (when its arguments
    /// allow: see [`BatchRead::plan`]).
    BatchRead(BatchRead),
    /// Writes through the turn's session.
    Write,
}

impl Kind {
    /// The pipeline's class of a request of this kind that was not batched.
    pub(crate) fn class(self) -> Class {
        match self {
            Kind::Control => Class::Control,
            Kind::Read | Kind::BatchRead(_) => Class::Read,
            Kind::Write => Class::Write,
        }
    }
}

/// A command's table entry. `arity` as Redis gives it: n > 0 exactly n
/// arguments (the name included), n < 0 at least -n.
#[derive(Debug)]
pub(crate) struct Spec {
    pub name: &'static str,
    pub arity: i32,
    pub kind: Kind,
    /// Refused above `maxmemory` (Redis's `denyoom`): writes that can add
    /// data. Deletes, expiries and FLUSHALL free memory and stay allowed.
    pub denyoom: bool,
    /// Allowed before AUTH.
    pub no_auth: bool,
    /// Refused inside MULTI (Redis's `no-multi`; here also SCAN, whose
    /// cursor is server state, SNAPSHOT, SAVE, BGSAVE, FLUSHALL and
    /// CLUSTER).
    pub no_multi: bool,
    /// Runs at once inside MULTI instead of being queued (EXEC, DISCARD,
    /// MULTI, WATCH, QUIT).
    pub in_multi_now: bool,
    /// A read when its key is its only argument (GETEX without options):
    /// classed as a read then, so that it passes the read gate and comes
    /// after the connection's own writes before it, as GET does.
    pub read_bare: bool,
    pub first_key: i32,
    pub last_key: i32,
    pub summary: &'static str,
    pub group: &'static str,
    pub(super) handler: Handler,
}

impl Spec {
    /// `n` arguments (the name included) fit the arity.
    #[inline]
    pub(crate) fn arity_ok(&self, n: usize) -> bool {
        let n = n as i64;
        let a = i64::from(self.arity);
        if a > 0 { n == a } else { n >= -a }
    }

    /// The pipeline's class of a request of `n` arguments (the name
    /// included) that was not batched.
    #[inline]
    pub(crate) fn class_of(&self, n: usize) -> Class {
        if self.read_bare && n == 2 {
            Class::Read
        } else {
            self.kind.class()
        }
    }

    /// A write (COMMAND's `write` flag; `readonly` otherwise).
    pub(crate) fn writes(&self) -> bool {
        self.kind == Kind::Write
    }
}
