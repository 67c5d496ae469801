//! Connection and server commands: PING ECHO HELLO AUTH SELECT QUIT INFO
//! CONFIG TIME SLOWLOG SAVE BGSAVE LASTSAVE SHUTDOWN (COMMAND is
//! `command`, CLIENT `client`).

use std::time::{SystemTime, UNIX_EPOCH};

use super::{Ctx, eq_ic, parse_i64, unknown_subcommand};
use crate::node::settings;
use crate::resp::error::{CmdError, CmdResult};
use crate::resp::glob;

pub(super) fn ping(cx: &mut Ctx<'_, '_>) -> CmdResult {
    match cx.args.len() {
        1 => cx.r.simple("PONG"),
        2 => cx.r.bulk(cx.args[1]),
        _ => return Err(CmdError::Arity("ping".into())),
    }
    Ok(())
}

pub(super) fn echo(cx: &mut Ctx<'_, '_>) -> CmdResult {
    cx.r.bulk(cx.args[1]);
    Ok(())
}

pub(super) fn quit(cx: &mut Ctx<'_, '_>) -> CmdResult {
    cx.r.ok();
    cx.close = true;
    Ok(())
}

pub(super) fn select(cx: &mut Ctx<'_, '_>) -> CmdResult {
    match cx.int(1)? {
        0 => {
            cx.r.ok();
            Ok(())
        }
        _ => Err(CmdError::err("DB index is out of range")),
    }
}

pub(super) fn hello(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let mut resp3 = cx.conn.resp3;
    let mut i = 1;
    if let Some(v) = cx.args.get(1) {
        resp3 = match parse_i64(v) {
            Some(2) => false,
            Some(3) => true,
            Some(_) => {
                return Err(CmdError::Other(
                    "NOPROTO unsupported protocol version".into(),
                ));
            }
            None => {
                return Err(CmdError::err(
                    "Protocol version is not an integer or out of range",
                ));
            }
        };
        i = 2;
    }
    let mut auth: Option<(&[u8], &[u8])> = None;
    let mut name: Option<&[u8]> = None;
    while i < cx.args.len() {
        let opt = cx.args[i];
        if eq_ic(opt, "auth") && i + 2 < cx.args.len() {
            auth = Some((cx.args[i + 1], cx.args[i + 2]));
            i += 3;
        } else if eq_ic(opt, "setname") && i + 1 < cx.args.len() {
            // Checked here, before AUTH, as Redis does.
            if !super::client::valid_name(cx.args[i + 1]) {
                return Err(super::client::name_error());
            }
            name = Some(cx.args[i + 1]);
            i += 2;
        } else {
            return Err(CmdError::err(format!(
                "Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    if let Some((u, p)) = auth {
        super::acl::authenticate(cx, u, p)?;
    }
    if !cx.conn.authenticated {
        return Err(CmdError::Other(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time"
                .into(),
        ));
    }
    if let Some(n) = name {
        super::client::set_name(cx, n);
    }
    cx.conn.resp3 = resp3;
    cx.r.resp3 = resp3;
    cx.r.map(7);
    cx.r.bulk_str("server");
    cx.r.bulk_str("combkv");
    cx.r.bulk_str("version");
    cx.r.bulk_str(env!("CARGO_PKG_VERSION"));
    cx.r.bulk_str("proto");
    cx.r.int(if resp3 { 3 } else { 2 });
    cx.r.bulk_str("id");
    cx.r.int(cx.client.id as i64);
    cx.r.bulk_str("mode");
    cx.r.bulk_str("standalone");
    cx.r.bulk_str("role");
    cx.r.bulk_str("master");
    cx.r.bulk_str("modules");
    cx.r.array(0);
    Ok(())
}

/// CONFIG HELP: Redis's lines (7.0's and 7.2's alike).
const CONFIG_HELP: &[&str] = &[
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file.",
    "HELP",
];

/// SLOWLOG HELP: Redis's lines (7.0's and 7.2's alike).
const SLOWLOG_HELP: &[&str] = &[
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
];

pub(super) fn config(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let sub = cx.args[1];
    if eq_ic(sub, "help") {
        if cx.args.len() != 2 {
            return Err(CmdError::Arity("config|help".into()));
        }
        super::help_reply(&mut cx.r, CONFIG_HELP);
        Ok(())
    } else if eq_ic(sub, "get") {
        if cx.args.len() < 3 {
            return Err(CmdError::Arity("config|get".into()));
        }
        let now = settings::effective(cx.shared);
        let mut params = now.params();
        params.extend(now.redis_params());
        let hits: Vec<&(&str, String)> = params
            .iter()
            .filter(|(name, _)| {
                cx.args[2..]
                    .iter()
                    .any(|p| glob::matches_nocase(p, name.as_bytes()))
            })
            .collect();
        cx.r.map(hits.len());
        for (name, value) in hits {
            cx.r.bulk_str(name);
            cx.r.bulk_str(value);
        }
        Ok(())
    } else if eq_ic(sub, "set") {
        config_set(cx)
    } else if eq_ic(sub, "rewrite") {
        if cx.args.len() != 2 {
            return Err(CmdError::Arity("config|rewrite".into()));
        }
        settings::rewrite(cx.shared).map_err(|e| {
            tracing::warn!("CONFIG REWRITE failed: {e}");
            CmdError::err(e)
        })?;
        tracing::info!("CONFIG REWRITE: the config file now holds the settings in use");
        cx.r.ok();
        Ok(())
    } else if eq_ic(sub, "resetstat") {
        if cx.args.len() != 2 {
            return Err(CmdError::Arity("config|resetstat".into()));
        }
        cx.shared.reset_stats();
        cx.r.ok();
        Ok(())
    } else {
        Err(unknown_subcommand(sub, "CONFIG"))
    }
}

/// CONFIG SET name value [name value ...]: every pair of one call or none
/// (as Redis); a name given twice is refused.
fn config_set(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let args = &cx.args[2..];
    if args.is_empty() || !args.len().is_multiple_of(2) {
        return Err(CmdError::Arity("config|set".into()));
    }
    let mut pairs: Vec<(String, String)> = Vec::with_capacity(args.len() / 2);
    for pair in args.chunks(2) {
        let name = String::from_utf8_lossy(pair[0]).to_ascii_lowercase();
        if pairs.iter().any(|(n, _)| *n == name) {
            return Err(CmdError::err(format!(
                "CONFIG SET failed (possibly related to argument '{name}') - duplicate parameter"
            )));
        }
        pairs.push((name, String::from_utf8_lossy(pair[1]).into_owned()));
    }
    let Some(set) = settings::set(cx.shared, cx.parking, &pairs) else {
        // Parked on the cluster's password change: run again once it lands.
        cx.parked = true;
        return Ok(());
    };
    set.map_err(|(name, why)| {
        CmdError::err(format!(
            "CONFIG SET failed (possibly related to argument '{name}') - {why}"
        ))
    })?;
    cx.r.ok();
    Ok(())
}

/// MONITOR: from now on the connection is sent every command the server
/// runs (`state/monitor.rs`), after this `+OK`.
pub(super) fn monitor(cx: &mut Ctx<'_, '_>) -> CmdResult {
    cx.shared
        .monitors
        .add(std::sync::Arc::clone(&cx.client.live));
    cx.r.ok();
    Ok(())
}

pub(super) fn time(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    cx.r.array(2);
    cx.r.bulk_str(&d.as_secs().to_string());
    cx.r.bulk_str(&d.subsec_micros().to_string());
    Ok(())
}

pub(super) fn slowlog(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let sub = cx.args[1];
    let log = &cx.shared.slowlog;
    if eq_ic(sub, "help") {
        if cx.args.len() != 2 {
            return Err(CmdError::Arity("slowlog|help".into()));
        }
        super::help_reply(&mut cx.r, SLOWLOG_HELP);
    } else if eq_ic(sub, "get") {
        if cx.args.len() > 3 {
            return Err(CmdError::err(format!(
                "unknown subcommand or wrong number of arguments for '{}'. Try SLOWLOG HELP.",
                String::from_utf8_lossy(sub)
            )));
        }
        let n = match cx.args.get(2) {
            None => 10,
            Some(raw) => match parse_i64(raw) {
                Some(-1) => usize::MAX,
                Some(n) if n >= 0 => n as usize,
                _ => {
                    return Err(CmdError::err("count should be greater than or equal to -1"));
                }
            },
        };
        let entries = log.get(n);
        cx.r.array(entries.len());
        for e in entries {
            cx.r.array(6);
            cx.r.int(e.id as i64);
            cx.r.int(e.unix_secs as i64);
            cx.r.int(e.duration_us as i64);
            cx.r.array(e.args.len());
            for a in &e.args {
                cx.r.bulk(a);
            }
            cx.r.bulk_str(&e.client_addr);
            cx.r.bulk_str(&e.client_name);
        }
    } else if eq_ic(sub, "len") {
        if cx.args.len() != 2 {
            return Err(CmdError::Arity("slowlog|len".into()));
        }
        cx.r.int(log.len() as i64);
    } else if eq_ic(sub, "reset") {
        if cx.args.len() != 2 {
            return Err(CmdError::Arity("slowlog|reset".into()));
        }
        log.reset();
        cx.r.ok();
    } else {
        return Err(unknown_subcommand(sub, "SLOWLOG"));
    }
    Ok(())
}

pub(super) fn info(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let sections: Vec<String> = cx.args[1..]
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .collect();
    let text = crate::node::info::render(cx.shared, &sections);
    cx.r.verbatim(&text);
    Ok(())
}

pub(super) fn save(cx: &mut Ctx<'_, '_>) -> CmdResult {
    crate::node::admin::save(cx.shared)?;
    cx.r.ok();
    Ok(())
}

/// BACKUP directory: a full checkpoint of one snapshot into `directory`
/// (created if missing, refused unless empty; relative to the server's
/// working directory), answered once it is written and synced. Writers go
/// on meanwhile; this connection's event loop waits, as for SAVE.
pub(super) fn backup(cx: &mut Ctx<'_, '_>) -> CmdResult {
    use std::os::unix::ffi::OsStrExt;
    let arg = &cx.args[1];
    if arg.is_empty() {
        return Err(CmdError::err("BACKUP needs a directory"));
    }
    let dir = std::path::Path::new(std::ffi::OsStr::from_bytes(arg));
    crate::node::admin::backup(cx.shared, dir)?;
    cx.r.ok();
    Ok(())
}

/// LOADBACKUP directory: writes every item of the backup in `directory`
/// (on the node's host) into the node's store, which must be empty,
/// through the write path (a cluster's log); answers the items written.
/// On a single node this connection's event loop waits meanwhile; on a
/// cluster node the connection parks while the log takes the batches.
pub(super) fn loadbackup(cx: &mut Ctx<'_, '_>) -> CmdResult {
    use std::os::unix::ffi::OsStrExt;
    let arg = &cx.args[1];
    if arg.is_empty() {
        return Err(CmdError::err("LOADBACKUP needs a directory"));
    }
    let dir = std::path::Path::new(std::ffi::OsStr::from_bytes(arg));
    let Some(n) = crate::node::admin::load_backup(cx.shared, cx.parking, dir) else {
        cx.parked = true;
        return Ok(());
    };
    cx.r.int(n? as i64);
    Ok(())
}

/// SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]: stops the server as
/// SIGTERM does (every connection's received requests are answered, the
/// log flushed). SAVE takes a checkpoint first; a failed one refuses the
/// shutdown with Redis's text. NOW and FORCE change nothing (there is no
/// wait to skip); ABORT has no shutdown in progress to stop. Like Redis,
/// it answers nothing: the connection closes.
pub(super) fn shutdown(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let (mut save, mut nosave, mut abort) = (false, false, false);
    for a in &cx.args[1..] {
        if eq_ic(a, "save") {
            save = true;
        } else if eq_ic(a, "nosave") {
            nosave = true;
        } else if eq_ic(a, "abort") {
            abort = true;
        } else if !(eq_ic(a, "now") || eq_ic(a, "force")) {
            return Err(CmdError::Syntax);
        }
    }
    if (save && nosave) || (abort && cx.args.len() > 2) {
        return Err(CmdError::Syntax);
    }
    if abort {
        return Err(CmdError::err("No shutdown in progress."));
    }
    if save && let Err(e) = crate::node::admin::save(cx.shared) {
        tracing::error!(
            "SHUTDOWN SAVE: the checkpoint failed, not shutting down: {}",
            CmdError::from(e).line()
        );
        return Err(CmdError::err("Errors trying to SHUTDOWN. Check logs."));
    }
    tracing::info!(client = cx.client.id, "SHUTDOWN: stopping");
    cx.shared.stop();
    cx.close = true;
    Ok(())
}

pub(super) fn bgsave(cx: &mut Ctx<'_, '_>) -> CmdResult {
    match &cx.args[1..] {
        [] => {}
        [s] if eq_ic(s, "schedule") => {}
        _ => return Err(CmdError::Syntax),
    }
    if crate::node::admin::bgsave(cx.shared)? {
        cx.r.simple("Background saving started");
    } else {
        cx.r.simple("Background saving scheduled");
    }
    Ok(())
}

pub(super) fn lastsave(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let t = cx
        .shared
        .last_save_unix
        .load(std::sync::atomic::Ordering::Relaxed);
    cx.r.int(t as i64);
    Ok(())
}

/// `DEBUG PANIC` (debug builds only; see `table::lookup_request`): a bug
/// inside a command handler, on request.
#[cfg(debug_assertions)]
pub(super) fn debug(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let sub = cx.args[1];
    if eq_ic(sub, "panic") {
        panic!("DEBUG PANIC: a command handler panicked on request");
    }
    Err(unknown_subcommand(sub, "DEBUG"))
}
