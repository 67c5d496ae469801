//! memcached's text-protocol authentication (its `-Y` option), served when
//! the default user needs a password (`requirepass`, or an ACL file that
//! gives it one): until a connection authenticates, every line is refused
//! with `CLIENT_ERROR unauthenticated` and nothing runs. It authenticates
//! with a `set` whose data is `<user> <password>` (any key, flags and
//! exptime): any enabled ACL user, `default` with `requirepass` among them.
//! The replies follow memcached 1.6's `proto_text.c`
//! (`process_request_ascii` before authentication).

use super::binary::{BinCmd, BinRequest};
use super::error::McError;
use super::parse::words;

/// Longest authenticating data block read; a longer one is skipped unread
/// and refused (memcached reads it whole).
const MAX_AUTH_DATA: usize = 1024;
/// Longest line read before authentication (memcached: 1024, then close).
const MAX_UNAUTH_LINE: usize = 1024;

/// What the start of an unauthenticated connection's input holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AuthStep<'a> {
    /// Not a whole line (or block) yet.
    Incomplete,
    /// A line past the limit without a newline: close.
    Close,
    /// Refused with this error; `consumed` bytes used, the next `swallow`
    /// skipped unread.
    Refused {
        err: McError,
        consumed: usize,
        swallow: usize,
    },
    /// A whole authenticating `set`, `consumed` bytes long.
    Credentials {
        user: &'a [u8],
        pass: &'a [u8],
        consumed: usize,
    },
}

/// Parses the start of an unauthenticated connection's input.
pub(crate) fn parse(input: &[u8]) -> AuthStep<'_> {
    let Some(nl) = input.iter().position(|&b| b == b'\n') else {
        return if input.len() > MAX_UNAUTH_LINE {
            AuthStep::Close
        } else {
            AuthStep::Incomplete
        };
    };
    let line = &input[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let toks: Vec<&[u8]> = words(line).take(6).collect();
    let refused = |err, swallow| AuthStep::Refused {
        err,
        consumed: nl + 1,
        swallow,
    };
    let size = toks
        .get(4)
        .and_then(|t| std::str::from_utf8(t).ok()?.parse::<u32>().ok());
    let (true, Some(size)) = (toks.len() >= 5 && toks[0] == b"set", size) else {
        return refused(McError::Unauthenticated, 0);
    };
    let size = size as usize;
    if size > MAX_AUTH_DATA {
        return refused(McError::AuthFormat, size + 2);
    }
    let start = nl + 1;
    let Some(block) = input.get(start..start + size + 2) else {
        return AuthStep::Incomplete;
    };
    let consumed = start + size + 2;
    if &block[size..] != b"\r\n" {
        return AuthStep::Refused {
            err: McError::AuthTermination,
            consumed,
            swallow: 0,
        };
    }
    let mut creds = words(&block[..size]);
    match (creds.next(), creds.next()) {
        (Some(user), Some(pass)) => AuthStep::Credentials {
            user,
            pass,
            consumed,
        },
        _ => AuthStep::Refused {
            err: McError::AuthFormat,
            consumed,
            swallow: 0,
        },
    }
}

/// Whether `user` and `pass` authenticate one of the server's users (the
/// ACL users RESP's AUTH knows: `default` with `requirepass`, or any other
/// enabled user). A failure is counted, logged in ACL LOG and, rate-limited,
/// in the server log with the client's address.
pub(crate) fn check(
    cx: &crate::turn::Cx<'_>,
    user: &[u8],
    pass: &[u8],
) -> Option<std::sync::Arc<crate::state::acl::User>> {
    let acl = &cx.shared.acl;
    let name = String::from_utf8_lossy(user);
    if let Some(u) = acl.authenticate(&name, pass) {
        return Some(u);
    }
    let info = format!("id={} addr={} user={name}", cx.client.id, cx.client.addr);
    acl.deny(crate::state::acl::Denied::Auth, false, "auth", &name, info);
    cx.shared.auth_failures.warn(
        &format!("memcached authentication of user '{name}' failed"),
        &cx.client.addr.to_string(),
    );
    None
}

impl super::Memcache {
    /// The binary protocol's SASL commands: PLAIN, checked as the text
    /// protocol's authenticating `set` is. A server without a password has
    /// no SASL (memcached without `-S`): unknown command.
    pub(super) fn sasl(
        &mut self,
        cx: &crate::turn::Cx<'_>,
        req: &BinRequest<'_>,
        out: &mut Vec<u8>,
    ) {
        use super::binary::{Status, packet};
        if !cx.shared.acl.default_requires_auth() {
            return super::binary::cmd::refuse(cx, out, req.head, &McError::UnknownCommand);
        }
        let authenticated = match req.cmd {
            BinCmd::SaslAuth { mech, data }
                if mech == super::binary::cmd::SASL_MECHS.as_bytes() =>
            {
                super::binary::cmd::sasl_plain(data).and_then(|(user, p)| check(cx, user, p))
            }
            _ => None,
        };
        match req.cmd {
            BinCmd::SaslListMechs => {
                let mechs = super::binary::cmd::SASL_MECHS.as_bytes();
                packet(out, req.head, Status::Success, 0, &[], &[], mechs);
            }
            BinCmd::SaslAuth { .. } if authenticated.is_some() => {
                if let Some(u) = authenticated {
                    *cx.client.live.user.lock() = u.name.clone();
                    self.user.set(u, &cx.shared.acl);
                }
                self.authenticated = true;
                packet(
                    out,
                    req.head,
                    Status::Success,
                    0,
                    &[],
                    &[],
                    b"Authenticated",
                );
            }
            _ => {
                tracing::debug!(
                    client = cx.client.id,
                    "memcached SASL authentication failed"
                );
                super::binary::cmd::refuse(cx, out, req.head, &McError::AuthFailure);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authenticating_set_and_its_refusals() {
        assert_eq!(
            parse(b"set a 0 0 10\r\ndefault pw\r\nget k\r\n"),
            AuthStep::Credentials {
                user: b"default",
                pass: b"pw",
                consumed: 26
            }
        );
        assert_eq!(parse(b"set a 0 0 10\r\ndefault"), AuthStep::Incomplete);
        assert_eq!(parse(b"get k"), AuthStep::Incomplete);
        let refused = |err, consumed, swallow| AuthStep::Refused {
            err,
            consumed,
            swallow,
        };
        assert_eq!(parse(b"get k\r\n"), refused(McError::Unauthenticated, 7, 0));
        assert_eq!(parse(b"mn\r\n"), refused(McError::Unauthenticated, 4, 0));
        assert_eq!(
            parse(b"set a 0 0\r\n"),
            refused(McError::Unauthenticated, 11, 0)
        );
        assert_eq!(
            parse(b"set a 0 0 x\r\n"),
            refused(McError::Unauthenticated, 13, 0)
        );
        assert_eq!(
            parse(b"set a 0 0 2\r\nab\r\n"),
            refused(McError::AuthFormat, 17, 0)
        );
        assert_eq!(
            parse(b"set a 0 0 2\r\nabcd"),
            refused(McError::AuthTermination, 17, 0)
        );
        assert_eq!(
            parse(b"set a 0 0 5000\r\n"),
            refused(McError::AuthFormat, 16, 5002)
        );
        assert_eq!(parse(&[b'x'; 2000]), AuthStep::Close);
    }
}
