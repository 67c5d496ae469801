//! CONFIG SET and CONFIG REWRITE: settings changed while serving, each
//! checked as at start (the whole configuration, with the change, must
//! pass `ServerConfig::validate`), all of one call or none.
//!
//! Settings are per node, as Redis's are, except `requirepass`: it is the
//! default user's password, and the users are the cluster's (through the
//! log, as ACL SETUSER).

use crate::config::ServerConfig;
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
/// configuration they make is valid; changes nothing otherwise.
pub(crate) fn set(shared: &Shared, pairs: &[(String, String)]) -> Result<(), Refused> {
    let now = effective(shared);
    let mut next = now.clone();
    for (name, value) in pairs {
        next.set_live(name, value).map_err(|e| (name.clone(), e))?;
    }
    let first = || pairs[0].0.clone();
    next.validate().map_err(|e| (first(), e))?;
    if next.maxclients > now.maxclients {
        fits_descriptors(shared, next.maxclients).map_err(|e| ("maxclients".into(), e))?;
    }
    let tls = |c: &ServerConfig| TlsFiles {
        cert: c.tls_cert_file.clone(),
        key: c.tls_key_file.clone(),
        ca: c.tls_ca_cert_file.clone(),
        auth: c.tls_auth_clients,
    };
    let tls_changed = tls(&next) != tls(&now);
    if tls_changed {
        // The new files must load before anything changes.
        shared.tls.replace(tls(&next)).map_err(|e| (first(), e))?;
    }
    if let Err(e) = shared.live.apply(&next) {
        if tls_changed {
            let _ = shared.tls.replace(tls(&now));
        }
        return Err(("log-level".into(), e));
    }
    if next.requirepass != now.requirepass
        && let Err(e) = set_requirepass(shared, next.requirepass.as_deref())
    {
        // Nothing else of this call stays either.
        let _ = shared.live.apply(&now);
        if tls_changed {
            let _ = shared.tls.replace(tls(&now));
        }
        return Err(("requirepass".into(), e));
    }
    shared
        .slowlog
        .set_limits(next.slowlog_max_len, next.slowlog_log_slower_than);
    let names: Vec<&str> = pairs.iter().map(|(n, _)| n.as_str()).collect();
    tracing::info!("CONFIG SET: {} changed", names.join(", "));
    Ok(())
}

/// Redis's `requirepass`: the default user's passwords become exactly
/// this one (`resetpass >pass`), or none needed (`nopass`).
fn set_requirepass(shared: &Shared, pass: Option<&str>) -> Result<(), String> {
    let rules = match pass {
        Some(p) => vec!["resetpass".to_string(), format!(">{p}")],
        None => vec!["resetpass".to_string(), "nopass".to_string()],
    };
    let text = shared.acl.set_user_text("default", &rules)?;
    crate::node::acl::commit(shared, &text)
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
