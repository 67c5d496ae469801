//! AUTH, the user a connection runs as, and the ACL pieces commands use
//! without the command table: the range check of RANGE, FLOOR and CEIL,
//! and NOPERM's words. The ACL command and the check every command passes
//! read the table, and live beside it (`table::acl`).

use super::Ctx;
use crate::resp::error::{CmdError, CmdResult};
use crate::state::acl::{Denied, READ, WRITE};

pub(crate) fn client_info(cx: &Ctx<'_, '_>, user: &str) -> String {
    format!(
        "id={} addr={} name={} user={user}",
        cx.client.id,
        cx.client.addr,
        cx.client.name.as_deref().unwrap_or("")
    )
}

pub(crate) fn noperm(why: Denied, object: &str) -> String {
    match why {
        Denied::Command => {
            format!("NOPERM this user has no permissions to run the '{object}' command")
        }
        Denied::Key => {
            "NOPERM this user has no permissions to access one of the keys used as arguments".into()
        }
        _ => "NOPERM this user has no permissions to access one of the channels used as arguments"
            .into(),
    }
}

/// For commands that read a range of keys (RANGE, FLOOR, CEIL ...): the
/// user may read every key from `start` to `end` (None: unbounded) with
/// one pattern, or the command is refused (never filtered). A pattern
/// `prefix*` (no other wildcard) covers the range when both bounds start
/// with `prefix`; `*` covers any range.
pub(crate) fn check_range(
    cx: &mut Ctx<'_, '_>,
    start: Option<&[u8]>,
    end: Option<&[u8]>,
) -> CmdResult {
    let acl = &cx.shared.acl;
    let user = match cx.conn.user.current(acl) {
        None => return Err(CmdError::err("your user was deleted")),
        Some(u) if u.unrestricted() || u.all_selectors().any(|s| s.allkeys) => return Ok(()),
        Some(u) => u.clone(),
    };
    if user
        .all_selectors()
        .any(|s| s.key_patterns(READ).any(|p| pattern_covers(p, start, end)))
    {
        return Ok(());
    }
    let object = String::from_utf8_lossy(start.unwrap_or(b"-")).into_owned();
    let info = client_info(cx, &user.name);
    acl.deny(
        Denied::Key,
        cx.conn.multi.is_some(),
        &object,
        &user.name,
        info,
    );
    Err(CmdError::Other(noperm(Denied::Key, &object)))
}

/// Whether every key from `start` to `end` (None: unbounded) matches the
/// glob `p`: `*` matches all; `prefix*` (no other wildcard, no escape)
/// covers a range whose two bounds both start with `prefix`, since every
/// key between two such keys starts with it too. Any other pattern covers
/// no range (a range of one key is checked as a key).
pub(crate) fn pattern_covers(p: &str, start: Option<&[u8]>, end: Option<&[u8]>) -> bool {
    if p == "*" {
        return true;
    }
    let Some(prefix) = p.strip_suffix('*') else {
        return false;
    };
    if prefix.is_empty()
        || prefix
            .bytes()
            .any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
    {
        return false;
    }
    let has = |b: Option<&[u8]>| b.is_some_and(|b| b.starts_with(prefix.as_bytes()));
    has(start) && has(end)
}

fn wrongpass() -> CmdError {
    CmdError::Other("WRONGPASS invalid username-password pair or user is disabled.".into())
}

/// Authenticates the connection as `user` (AUTH, HELLO AUTH); a failure
/// is logged, counted and logged to the server log with the address.
pub(super) fn authenticate(cx: &mut Ctx<'_, '_>, user: &[u8], pass: &[u8]) -> CmdResult {
    let name = String::from_utf8_lossy(user).into_owned();
    let acl = &cx.shared.acl;
    match acl.authenticate(&name, pass) {
        Some(u) => {
            *cx.client.live.user.lock() = u.name.clone();
            cx.conn.user.set(u, acl);
            cx.conn.authenticated = true;
            Ok(())
        }
        None => {
            let info = client_info(cx, &name);
            let object = String::from_utf8_lossy(cx.args[0]).into_owned();
            acl.deny(Denied::Auth, cx.conn.multi.is_some(), &object, &name, info);
            cx.shared.auth_failures.warn(
                &format!("authentication of user '{name}' failed"),
                &cx.client.addr.to_string(),
            );
            Err(wrongpass())
        }
    }
}

pub(super) fn auth(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let (user, pass) = match cx.args {
        [_, pass] => {
            if cx.shared.acl.default_user().nopass {
                return Err(CmdError::err(
                    "AUTH <password> called without any password configured for the default \
                     user. Are you sure your configuration is correct?",
                ));
            }
            (&b"default"[..], *pass)
        }
        [_, user, pass] => (*user, *pass),
        _ => return Err(CmdError::Syntax),
    };
    authenticate(cx, user, pass)?;
    cx.r.ok();
    Ok(())
}

/// Key positions with the permission each needs (READ for an `access`
/// key spec, WRITE for `insert`, `delete` or `update`).
pub(crate) fn need_of(flags: &str) -> u8 {
    let mut need = 0;
    for f in flags.split_whitespace() {
        match f {
            "access" => need |= READ,
            "insert" | "delete" | "update" => need |= WRITE,
            _ => {}
        }
    }
    need
}

#[cfg(test)]
mod tests {
    use super::pattern_covers;

    #[test]
    fn a_pattern_covers_a_range_only_if_every_key_between_matches() {
        let k = |s: &'static str| Some(s.as_bytes());
        assert!(pattern_covers("*", None, None));
        assert!(pattern_covers("user:*", k("user:a"), k("user:z")));
        assert!(pattern_covers("user:*", k("user:"), k("user:\u{7f}")));
        assert!(!pattern_covers("user:*", k("user:a"), None));
        assert!(!pattern_covers("user:*", k("user"), k("user:z")));
        assert!(!pattern_covers("user:*", k("user:a"), k("users")));
        assert!(!pattern_covers("u?er:*", k("user:a"), k("user:b")));
        assert!(!pattern_covers("user:*:x", k("user:a"), k("user:b")));
        assert!(!pattern_covers("user:a", k("user:a"), k("user:a")));
        assert!(!pattern_covers("u\\*:*", k("u*:a"), k("u*:b")));
    }
}
