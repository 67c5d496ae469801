//! CONFIG SET and CONFIG REWRITE: settings changed while serving, each
//! checked as at start (the whole configuration, with the change, must
//! pass `ServerConfig::validate`), all of one call or none.
//!
//! Settings are per node, as Redis's are, except `requirepass`: it is the
//! default user's password, and the users are the cluster's (through the
//! log, as ACL SETUSER); and `durability`, which a cluster node refuses:
//! its writes are made durable by the Raft log, whose sync policy every
//! node is started with.
//!
//! On a cluster node a call that changes `requirepass` checks everything
//! first, then changes the password through the log while its connection
//! parks (a log round, up to the request timeout without a quorum, that
//! its event loop's other clients do not wait for), and applies the rest
//! once the password has committed: run again then, the call finds the
//! change's answer (`node::acl::change`).

use crate::config::{DurabilityMode, ServerConfig};
use crate::node::park::Parking;
use crate::state::Shared;
use crate::state::tls::TlsFiles;

/// The configuration in use now: what the server started with, with the
/// live settings as they are.
pub(crate) fn effective(shared: &Shared) -> ServerConfig {
    let mut c = shared.live.overlay(&shared.config);
    (c.slowlog_max_len, c.slowlog_log_slower_than) = shared.slowlog.limits();
    let files = shared.tls.files();
    c.tls_cert_file = files.cert;
    c.tls_key_file = files.key;
    c.tls_ca_cert_file = files.ca;
    c.tls_auth_clients = files.auth;
    c
}

/// A refused CONFIG SET: the setting it names, and why.
pub(crate) type Refused = (String, String);

/// Applies `pairs` (lowercase names, values) if every one parses and the
/// configuration they make is valid; changes nothing otherwise. None: the
/// connection parked on a cluster node's change of `requirepass` (see the
/// module's documentation).
pub(crate) fn set(
    shared: &Shared,
    parking: Option<Parking<'_>>,
    pairs: &[(String, String)],
) -> Option<Result<(), Refused>> {
    let now = effective(shared);
    let mut next = now.clone();
    for (name, value) in pairs {
        if let Err(e) = next.set_live(name, value) {
            return Some(Err((name.clone(), e)));
        }
    }
    let first = || pairs[0].0.clone();
    if let Err(e) = next.validate() {
        return Some(Err((first(), e)));
    }
    if next.maxclients > now.maxclients
        && let Err(e) = fits_descriptors(shared, next.maxclients)
    {
        return Some(Err(("maxclients".into(), e)));
    }
    if next.requirepass != now.requirepass && shared.cluster().is_some() {
        // What could still fail is checked before the password changes:
        // once it has committed, the rest must apply.
        if next.durability_mode() != now.durability_mode() {
            return Some(Err(("durability".into(), DURABILITY_ON_A_CLUSTER.into())));
        }
        if tls_files(&next) != tls_files(&now)
            && let Err(e) = tls_files(&next).load()
        {
            return Some(Err((first(), e)));
        }
        if let Err(e) = set_requirepass(shared, parking, next.requirepass.as_deref())? {
            return Some(Err(("requirepass".into(), e)));
        }
    }
    Some(apply(shared, pairs, &now, &next))
}

/// [`set`]'s changes, checked: applied in turn, the ones made undone if
/// a later one fails. A cluster node's password has changed already.
fn apply(
    shared: &Shared,
    pairs: &[(String, String)],
    now: &ServerConfig,
    next: &ServerConfig,
) -> Result<(), Refused> {
    let first = || pairs[0].0.clone();
    let (was, will) = (now.durability_mode(), next.durability_mode());
    // First of the changes that act: if it fails nothing has changed, and
    // if a later one fails it is switched back.
    if will != was {
        switch_durability(shared, was, will).map_err(|e| ("durability".into(), e))?;
    }
    let undo_durability = || {
        if will != was {
            let _ = switch_durability(shared, will, was);
        }
    };
    let tls_changed = tls_files(next) != tls_files(now);
    if tls_changed {
        // The new files must load before anything changes.
        shared
            .tls
            .replace(tls_files(next))
            .map_err(|e| (first(), e))?;
    }
    if let Err(e) = shared.live.apply(next) {
        if tls_changed {
            let _ = shared.tls.replace(tls_files(now));
        }
        undo_durability();
        return Err(("log-level".into(), e));
    }
    if next.requirepass != now.requirepass
        && shared.cluster().is_none()
        && let Some(Err(e)) = set_requirepass(shared, None, next.requirepass.as_deref())
    {
        // Nothing else of this call stays either.
        let _ = shared.live.apply(now);
        if tls_changed {
            let _ = shared.tls.replace(tls_files(now));
        }
        undo_durability();
        return Err(("requirepass".into(), e));
    }
    shared
        .slowlog
        .set_limits(next.slowlog_max_len, next.slowlog_log_slower_than);
    let names: Vec<&str> = pairs.iter().map(|(n, _)| n.as_str()).collect();
    tracing::info!("CONFIG SET: {} changed", names.join(", "));
    Ok(())
}

/// The TLS settings of `c`.
fn tls_files(c: &ServerConfig) -> TlsFiles {
    TlsFiles {
        cert: c.tls_cert_file.clone(),
        key: c.tls_key_file.clone(),
        ca: c.tls_ca_cert_file.clone(),
        auth: c.tls_auth_clients,
    }
}

/// Why a cluster node refuses CONFIG SET durability.
const DURABILITY_ON_A_CLUSTER: &str = "not changeable on a cluster node: writes are made \
    durable by the Raft log, whose sync policy each node is started with; change it in every \
    node's config and restart them one at a time";

/// CONFIG SET durability: the store's log switches mode while writers go
/// on (`Store::set_durability`: every mode writes the same log through the
/// same writer; only when it is fsynced, and a write acknowledged and made
/// visible, differs). A switch to `always` returns once everything written
/// before it is fsynced; a switch to a weaker mode is logged at WARN, since
/// writes acknowledged from then on may be lost in a crash. Without a data
/// directory there is no log (the start-up checks refuse any mode but
/// `none`); on a cluster node it is refused.
fn switch_durability(
    shared: &Shared,
    from: DurabilityMode,
    to: DurabilityMode,
) -> Result<(), String> {
    if shared.cluster().is_some() {
        return Err(DURABILITY_ON_A_CLUSTER.into());
    }
    shared
        .current_store()
        .set_durability(to.engine())
        .map_err(|e| format!("cannot switch the log to {}: {e}", to.as_str()))?;
    if to.risk() > from.risk() {
        tracing::warn!(
            "durability lowered from {} to {}: writes acknowledged from now on may be lost \
             in a crash (up to about a second of them with everysec)",
            from.as_str(),
            to.as_str()
        );
    } else {
        tracing::info!(
            "durability raised from {} to {}",
            from.as_str(),
            to.as_str()
        );
    }
    Ok(())
}

/// Redis's `requirepass`: the default user's passwords become exactly
/// this one (`resetpass >pass`), or none needed (`nopass`). None: parked
/// (`node::acl::change`).
fn set_requirepass(
    shared: &Shared,
    parking: Option<Parking<'_>>,
    pass: Option<&str>,
) -> Option<Result<(), String>> {
    let rules = match pass {
        Some(p) => vec!["resetpass".to_string(), format!(">{p}")],
        None => vec!["resetpass".to_string(), "nopass".to_string()],
    };
    let changed = crate::node::acl::change(shared, parking, move |acl| {
        Ok((acl.set_user_text("default", &rules)?, 0))
    })?;
    Some(changed.map(drop))
}

/// More clients need more descriptors: the soft limit is raised if it can
/// be (as at start), or the change is refused with what would fit, as
/// Redis refuses it.
fn fits_descriptors(shared: &Shared, maxclients: usize) -> Result<(), String> {
    use crate::state::fdlimit;
    let c = &shared.config;
    let own = fdlimit::own_needs(c.thread_count(), c.data_dir.is_some());
    match fdlimit::fit(maxclients, own) {
        Some(f) if f.maxclients < maxclients => Err(format!(
            "The operating system is not able to handle the specified number of clients, \
             try with {}",
            f.maxclients
        )),
        _ => Ok(()),
    }
}

/// CONFIG REWRITE: the live settings into the file the server started
/// from.
pub(crate) fn rewrite(shared: &Shared) -> Result<(), String> {
    let Some(path) = &shared.config.config_file else {
        return Err("The server is running without a config file".into());
    };
    crate::config::rewrite(path, &shared.config, &effective(shared))
}
