//! COMPARE: combkv's conditions for a transaction, in the spirit of etcd's
//! Txn compares (`docs/protocol.md`, "COMPARE").
//!
//! ```text
//! COMPARE key VERSION <op> <n>            the key's item version (0: absent)
//! COMPARE key VALUE <op> <bytes>          its value, bytewise (absent: fails)
//! COMPARE RANGE <start> <end> COUNT <op> <n>        live items in the range
//! COMPARE RANGE <start> <end> MAXVERSION <op> <n>   their newest version (0: none)
//! ```
//!
//! `<op>` is `=`, `!=`, `<`, `<=`, `>` or `>=`; range bounds as RANGE's.
//! Queued after MULTI (before the transaction's other data commands), each
//! becomes an [`Op::Check`] of its transaction: EXEC applies the
//! transaction only if every check holds at that moment, as one atomic
//! step, else answers a null array (as for a changed WATCHed key). Alone it
//! answers 1 or 0: the check evaluated as one step.

use std::borrow::Cow;
use std::ops::Bound;

use combkv::op::{Check, CmpOp, Op, Outcome};

use super::{Ctx, eq_ic, ordered, parse_i64};
use crate::resp::error::{CmdError, CmdResult};

fn cmp_op(a: &[u8]) -> Result<CmpOp, CmdError> {
    Ok(match a {
        b"=" | b"==" => CmpOp::Eq,
        b"!=" => CmpOp::Ne,
        b"<" => CmpOp::Lt,
        b"<=" => CmpOp::Le,
        b">" => CmpOp::Gt,
        b">=" => CmpOp::Ge,
        _ => {
            return Err(CmdError::err(format!(
                "unknown comparison '{}' (=, !=, <, <=, >, >=)",
                String::from_utf8_lossy(a)
            )));
        }
    })
}

fn count(a: &[u8]) -> Result<u64, CmdError> {
    match parse_i64(a) {
        Some(n) if n >= 0 => Ok(n as u64),
        _ => Err(CmdError::NotInteger),
    }
}

fn as_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(Vec::as_slice)
}

pub(super) fn compare(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let a = cx.args;
    // The range form has 7 arguments, the key form 5 (a key may be named
    // RANGE).
    let spec;
    let check = match a.len() {
        5 if eq_ic(a[2], "version") => Check::Version {
            key: a[1],
            op: cmp_op(a[3])?,
            version: count(a[4])?,
        },
        5 if eq_ic(a[2], "value") => Check::Value {
            key: a[1],
            op: cmp_op(a[3])?,
            value: a[4],
        },
        7 if eq_ic(a[1], "range") => {
            spec = ordered::parse_range(&a[2..4], cx.store().max_key_len())?;
            // Bounds that admit no key (`+` as start, `-` as end) compare
            // as an empty range: [x, x) holds nothing, whatever is stored.
            const NOTHING: (Bound<&[u8]>, Bound<&[u8]>) =
                (Bound::Included(b"\0"), Bound::Excluded(b"\0"));
            let (start, end) = if spec.empty {
                NOTHING
            } else {
                (as_slice(&spec.range.start), as_slice(&spec.range.end))
            };
            let (op, n) = (cmp_op(a[5])?, count(a[6])?);
            if eq_ic(a[4], "count") {
                Check::Count { start, end, op, n }
            } else if eq_ic(a[4], "maxversion") {
                Check::MaxVersion {
                    start,
                    end,
                    op,
                    version: n,
                }
            } else {
                return Err(CmdError::Syntax);
            }
        }
        5 | 7 => return Err(CmdError::Syntax),
        _ => return Err(CmdError::Arity("compare".into())),
    };
    let op = Op::Check(check);
    if cx.txn.is_some() {
        // Inside EXEC: a condition of the transaction. A transaction whose
        // checks fail answers a null array, so one that replies holds.
        return cx.write(&op, |cx, _| {
            cx.r.int(1);
            Ok(())
        });
    }
    let alone = Op::Txn {
        watch: Cow::Borrowed(&[]),
        ops: Cow::Owned(vec![op]),
    };
    cx.write(&alone, |cx, o| {
        match o {
            Outcome::Txn { results: Some(_) } => cx.r.int(1),
            Outcome::Txn { results: None } => cx.r.int(0),
            other => unreachable!("a transaction's outcome: {other:?}"),
        }
        Ok(())
    })
}
