//! The ACL command, and the permission check every command passes before
//! it runs (`check`): its command or subcommand, and the keys its key
//! specs name, against each of the user's selectors (Redis's
//! `ACLCheckAllUserCommandPerm`). Here beside the table because both read
//! it, as COMMAND does.

use crate::resp::cmd::acl::{client_info, noperm};
use crate::resp::cmd::{Ctx, Spec, eq_ic, parse_i64};
use crate::resp::error::{CmdError, CmdResult};
use crate::state::acl::{Acl, Denied, User};

/// The permission check before a command runs. Err: NOPERM (the denial
/// logged and counted), or a connection whose user was deleted.
pub(crate) fn check(cx: &mut Ctx<'_, '_>, spec: &'static Spec) -> CmdResult {
    let acl = &cx.shared.acl;
    // The common case (every command, every key) without touching the
    // user's reference count: this runs before every command.
    let user = match cx.conn.user.current(acl) {
        None => {
            // Its user was deleted: closed without a reply, as Redis does.
            cx.close = true;
            return Err(CmdError::Closed);
        }
        Some(u) if u.unrestricted() => return Ok(()),
        Some(u) => u.clone(),
    };
    match decide(acl, &user, spec, cx.args) {
        Ok(()) => Ok(()),
        Err((why, object)) => {
            let info = client_info(cx, &user.name);
            acl.deny(why, cx.conn.multi.is_some(), &object, &user.name, info);
            Err(CmdError::Other(noperm(why, &object)))
        }
    }
}

/// At EXEC: each queued command is checked again, as Redis does, since
/// the user's rules may have changed since it was queued; one no longer
/// allowed is answered, in its place in EXEC's reply, with why.
pub(crate) fn recheck_queued(cx: &mut Ctx<'_, '_>) {
    let acl = &cx.shared.acl;
    let Some(user) = cx.conn.user.current(acl).cloned() else {
        return;
    };
    if user.unrestricted() {
        return;
    }
    let Some(multi) = cx.conn.multi.as_mut() else {
        return;
    };
    if !multi.recheck() {
        // An EXEC run again after it parked: checked (and logged) once.
        return;
    }
    let mut denied = Vec::new();
    for (i, (spec, args)) in multi.queued().enumerate() {
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        if let Err((why, object)) = decide(acl, &user, spec, &args) {
            denied.push((i, why, object));
        }
    }
    for (i, why, object) in denied {
        let info = client_info(cx, &user.name);
        acl.deny(why, true, &object, &user.name, info);
        let reason = match why {
            Denied::Key => "no permission to touch the specified keys",
            _ => "no permission to execute the command or subcommand",
        };
        if let Some(m) = cx.conn.multi.as_mut() {
            m.deny(
                i,
                format!(
                    "NOPERM ACLs rules changed between the moment the transaction was \
                     accumulated and the EXEC call. This command is no longer allowed for the \
                     following reason: {reason}"
                ),
            );
        }
    }
}

/// Whether `user` may run `args` (its command is `spec`): Ok, or why not
/// and the object (the command's full name, or the key) to log.
fn decide(acl: &Acl, user: &User, spec: &Spec, args: &[&[u8]]) -> Result<(), (Denied, String)> {
    let c = acl.catalog();
    let Some(mut id) = c.id(spec.name) else {
        return Ok(());
    };
    let mut first = 1;
    if !c.subs[id].is_empty()
        && let Some(sub) = args.get(1)
        && let Some(s) = c.id(&format!("{}|{}", spec.name, String::from_utf8_lossy(sub)))
    {
        id = s;
        first = 2;
    }
    let keys = super::key_positions(&c.names[id], args).unwrap_or_default();
    // Redis's choice of the error to report: the command if no selector
    // runs it, else the last key no selector could use.
    let mut worst: Option<(Denied, usize)> = None;
    for s in user.all_selectors() {
        if !spec.no_auth && !s.allows_command(id, args.get(first).copied()) {
            worst = worst.or(Some((Denied::Command, 0)));
            continue;
        }
        let refused = keys.iter().find(|(i, need)| !s.allows_key(args[*i], *need));
        match refused {
            None => return Ok(()),
            Some(&(i, _)) => {
                if worst.is_none_or(|(w, at)| w == Denied::Command || at < i) {
                    worst = Some((Denied::Key, i));
                }
            }
        }
    }
    Err(match worst {
        Some((Denied::Key, i)) => (Denied::Key, String::from_utf8_lossy(args[i]).into_owned()),
        _ => (Denied::Command, c.names[id].clone()),
    })
}

fn text(a: &[u8]) -> String {
    String::from_utf8_lossy(a).into_owned()
}

/// A change of the users (`node::acl::change`): its answer, or None
/// with the connection parked until the change ends.
fn change_users(
    cx: &mut Ctx<'_, '_>,
    decide: impl Fn(&Acl) -> Result<(String, u64), String> + Send + 'static,
) -> Result<Option<u64>, CmdError> {
    match crate::node::acl::change(cx.shared, cx.parking, decide) {
        Some(answer) => answer.map(Some).map_err(CmdError::err),
        None => {
            cx.parked = true;
            Ok(None)
        }
    }
}

pub(crate) fn acl(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let sub = text(cx.args[1]).to_ascii_lowercase();
    let n = cx.args.len();
    let full = format!("acl|{sub}");
    match super::docs::find(&full) {
        None => {
            return Err(CmdError::err(format!(
                "unknown subcommand '{}'. Try ACL HELP.",
                text(cx.args[1])
            )));
        }
        Some(e)
            if !(if e.doc.arity > 0 {
                n as i32 == e.doc.arity
            } else {
                n as i32 >= -e.doc.arity
            }) =>
        {
            return Err(CmdError::Arity(full));
        }
        Some(_) => {}
    }
    let acl = &cx.shared.acl;
    match (sub.as_str(), n) {
        ("setuser", 3..) => {
            let name = text(cx.args[2]);
            let rules: Vec<String> = cx.args[3..].iter().map(|a| text(a)).collect();
            if change_users(cx, move |acl| Ok((acl.set_user_text(&name, &rules)?, 0)))?.is_some() {
                cx.r.ok();
            }
        }
        ("deluser", 3..) => {
            let names: Vec<String> = cx.args[2..].iter().map(|a| text(a)).collect();
            let gone = change_users(cx, move |acl| {
                acl.del_users_text(&names).map(|(n, text)| (text, n as u64))
            })?;
            if let Some(n) = gone {
                cx.r.int(n as i64);
            }
        }
        ("getuser", 3) => getuser(cx)?,
        ("list", 2) => {
            let lines = acl.lines();
            cx.r.array(lines.len());
            for l in lines {
                cx.r.bulk_str(&l);
            }
        }
        ("users", 2) => {
            let names = acl.names();
            cx.r.array(names.len());
            for u in names {
                cx.r.bulk_str(&u);
            }
        }
        ("whoami", 2) => match cx.conn.user.current(acl) {
            Some(u) => {
                let name = u.name.clone();
                cx.r.bulk_str(&name);
            }
            None => cx.r.null(),
        },
        ("load", 2) => {
            if change_users(cx, |acl| Ok((acl.file_text()?, 0)))?.is_some() {
                cx.r.ok();
            }
        }
        ("save", 2) => {
            acl.save().map_err(CmdError::err)?;
            cx.r.ok();
        }
        ("cat", 2) => {
            let cats = crate::state::acl::catalog::CATEGORIES;
            cx.r.array(cats.len());
            for c in cats {
                cx.r.bulk_str(c);
            }
        }
        ("cat", 3) => {
            let name = text(cx.args[2]);
            let Some(bit) = crate::state::acl::catalog::category(&name) else {
                let shown: String = name.chars().take(128).collect();
                return Err(CmdError::err(format!("Unknown category '{shown}'")));
            };
            let c = acl.catalog();
            let names: Vec<&String> = (0..c.len())
                .filter(|&i| c.cats[i] & bit != 0)
                .map(|i| &c.names[i])
                .collect();
            cx.r.array(names.len());
            for name in names {
                cx.r.bulk_str(name);
            }
        }
        ("genpass", 2 | 3) => genpass(cx)?,
        ("log", 2 | 3) => log(cx)?,
        ("dryrun", 4..) => dryrun(cx)?,
        ("help", 2) => crate::resp::cmd::help_reply(&mut cx.r, HELP),
        _ => {
            return Err(CmdError::err(format!(
                "unknown subcommand or wrong number of arguments for '{}'. Try ACL HELP.",
                text(cx.args[1])
            )));
        }
    }
    Ok(())
}

const HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
];

fn getuser(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let acl = &cx.shared.acl;
    let Some(u) = acl.user(&text(cx.args[2])) else {
        cx.r.null();
        return Ok(());
    };
    let c = acl.catalog();
    cx.r.map(6);
    cx.r.bulk_str("flags");
    let flags = u.flags();
    cx.r.set(flags.len());
    for f in flags {
        cx.r.bulk_str(f);
    }
    cx.r.bulk_str("passwords");
    cx.r.array(u.passwords.len());
    for p in &u.passwords {
        cx.r.bulk_str(p);
    }
    cx.r.bulk_str("commands");
    cx.r.bulk_str(&u.root.command_rules(c));
    cx.r.bulk_str("keys");
    cx.r.bulk_str(&u.root.keys_text());
    cx.r.bulk_str("channels");
    cx.r.bulk_str(&u.root.channels_text());
    cx.r.bulk_str("selectors");
    cx.r.array(u.selectors.len());
    for s in &u.selectors {
        cx.r.map(3);
        cx.r.bulk_str("commands");
        cx.r.bulk_str(&s.command_rules(c));
        cx.r.bulk_str("keys");
        cx.r.bulk_str(&s.keys_text());
        cx.r.bulk_str("channels");
        cx.r.bulk_str(&s.channels_text());
    }
    Ok(())
}

fn genpass(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let bits = match cx.args.get(2) {
        None => 256,
        Some(a) => parse_i64(a).ok_or(CmdError::NotInteger)?,
    };
    if !(1..=4096).contains(&bits) {
        return Err(CmdError::err(
            "ACL GENPASS argument must be the number of bits for the output password, a \
             positive number up to 4096",
        ));
    }
    let chars = (bits as usize).div_ceil(4);
    let mut bytes = vec![0u8; chars.div_ceil(2)];
    getrandom_fill(&mut bytes)?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    cx.r.bulk_str(&hex[..chars]);
    Ok(())
}

/// Random bytes from the kernel.
fn getrandom_fill(buf: &mut [u8]) -> CmdResult {
    use std::io::Read as _;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .map_err(|e| CmdError::err(format!("cannot read random bytes: {e}")))
}

fn log(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let acl = &cx.shared.acl;
    let count = match cx.args.get(2) {
        None => 10,
        Some(a) if eq_ic(a, "reset") => {
            acl.log_reset();
            cx.r.ok();
            return Ok(());
        }
        Some(a) => parse_i64(a).ok_or(CmdError::NotInteger)?.max(0) as usize,
    };
    let entries = acl.log_entries(count);
    cx.r.array(entries.len());
    for (e, age) in entries {
        cx.r.map(7);
        cx.r.bulk_str("count");
        cx.r.int(e.count as i64);
        cx.r.bulk_str("reason");
        cx.r.bulk_str(e.reason);
        cx.r.bulk_str("context");
        cx.r.bulk_str(e.context);
        cx.r.bulk_str("object");
        cx.r.bulk_str(&e.object);
        cx.r.bulk_str("username");
        cx.r.bulk_str(&e.username);
        cx.r.bulk_str("age-seconds");
        cx.r.double(age);
        cx.r.bulk_str("client-info");
        cx.r.bulk_str(&e.client_info);
    }
    Ok(())
}

fn dryrun(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let acl = &cx.shared.acl;
    let name = text(cx.args[2]);
    let Some(user) = acl.user(&name) else {
        return Err(CmdError::err(format!("User '{name}' not found")));
    };
    let line = &cx.args[3..];
    let Some(spec) = super::lookup(line[0]) else {
        return Err(CmdError::err(format!(
            "Command '{}' not found",
            text(line[0])
        )));
    };
    if !spec.arity_ok(line.len()) {
        return Err(CmdError::err(format!(
            "wrong number of arguments for '{}' command",
            spec.name
        )));
    }
    match decide(acl, &user, spec, line) {
        Ok(()) => cx.r.ok(),
        Err((Denied::Key, key)) => cx.r.bulk_str(&format!(
            "This user has no permissions to access the '{key}' key"
        )),
        Err((_, cmd)) => cx.r.bulk_str(&format!(
            "This user has no permissions to run the '{cmd}' command"
        )),
    }
    Ok(())
}
