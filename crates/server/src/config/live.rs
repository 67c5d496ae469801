//! The settings that may change while the server runs (CONFIG SET), each
//! parsed as the config file parses it, and CONFIG REWRITE: the file the
//! server started from, with those settings as they are now, its comments
//! and layout kept.

use std::path::Path;

use super::{ByteSize, ServerConfig};

/// What CONFIG SET changes while serving (`requirepass` is the default
/// user's password; the TLS files are loaded and checked before they are
/// used by new connections; `hot-cache-entries` gives each event loop a
/// new, empty cache of that size at its next turn; `durability` switches
/// the log's mode, every mode writing the same log, and is refused on a
/// cluster node, whose Raft log's sync policy is set at start). Every
/// other setting needs a restart: listeners, the data directory, the
/// store's geometry, threads, cluster settings.
pub const LIVE_SETTINGS: &[&str] = &[
    "maxmemory",
    "maxclients",
    "requirepass",
    "log-level",
    "max-request-bytes",
    "max-reply-bytes",
    "client-output-hard-limit",
    "max-total-query-bytes",
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "latency-monitor-threshold",
    "hot-cache-entries",
    "durability",
    "tls-cert-file",
    "tls-key-file",
    "tls-ca-cert-file",
    "tls-auth-clients",
];

fn bytes(value: &str) -> Result<ByteSize, String> {
    value.parse()
}

fn path(value: &str) -> Option<std::path::PathBuf> {
    (!value.is_empty()).then(|| value.into())
}

fn number<T: std::str::FromStr>(value: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("argument couldn't be parsed into an integer: '{value}'"))
}

impl ServerConfig {
    /// Sets live setting `name` (lowercase) from its text. Err: why the
    /// value or the name is refused. The whole configuration is checked
    /// afterwards (`validate`), as at start.
    pub fn set_live(&mut self, name: &str, value: &str) -> Result<(), String> {
        match name {
            "maxmemory" => self.maxmemory = bytes(value)?,
            "maxclients" => self.maxclients = number(value)?,
            "requirepass" => {
                self.requirepass = (!value.is_empty()).then(|| value.to_string());
            }
            "log-level" => self.log_level = value.to_ascii_lowercase(),
            "max-request-bytes" => self.max_request_bytes = bytes(value)?,
            "max-reply-bytes" => self.max_reply_bytes = bytes(value)?,
            "client-output-hard-limit" => self.client_output_hard_limit = bytes(value)?,
            "max-total-query-bytes" => self.max_total_query_bytes = bytes(value)?,
            "slowlog-log-slower-than" => self.slowlog_log_slower_than = number(value)?,
            "slowlog-max-len" => self.slowlog_max_len = number(value)?,
            "latency-monitor-threshold" => self.latency_monitor_threshold = number(value)?,
            "hot-cache-entries" => self.hot_cache_entries = number(value)?,
            "durability" => self.durability = Some(value.to_ascii_lowercase().parse()?),
            "tls-cert-file" => self.tls_cert_file = path(value),
            "tls-key-file" => self.tls_key_file = path(value),
            "tls-ca-cert-file" => self.tls_ca_cert_file = path(value),
            "tls-auth-clients" => self.tls_auth_clients = value.parse()?,
            _ => {
                return Err(if self.params().iter().any(|(n, _)| *n == name) {
                    "not changeable while serving: change the config file or flags and restart"
                        .to_string()
                } else {
                    "Unknown option or number of arguments for CONFIG SET".to_string()
                });
            }
        }
        Ok(())
    }

    /// The live settings' values as CONFIG GET writes them.
    fn live_values(&self) -> Vec<(&'static str, String)> {
        self.params()
            .into_iter()
            .filter(|(n, _)| LIVE_SETTINGS.contains(n))
            .collect()
    }
}

/// CONFIG REWRITE: writes `now`'s live settings into the TOML file the
/// server started from, keeping everything else in it as it is (comments,
/// order, other settings). A setting the file does not name is added only
/// if it differs from what the server started with. The file is replaced
/// whole (written beside it, then renamed), so a crash leaves the old one
/// or the new one.
pub fn rewrite(path: &Path, started: &ServerConfig, now: &ServerConfig) -> Result<(), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| format!("config file {}: {e}", path.display()))?;
    let before = started.live_values();
    for (name, value) in now.live_values() {
        let named = doc.contains_key(name);
        let changed = before.iter().any(|(n, v)| *n == name && *v != value);
        if !named && !changed {
            continue;
        }
        doc[name] = toml_value(name, &value);
    }
    let tmp = path.with_extension("rewrite.tmp");
    std::fs::write(&tmp, doc.to_string())
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot write config file {}: {e}", path.display())
        })
}

/// A setting's value as the file writes it: numbers as numbers, the rest
/// as strings.
fn toml_value(name: &str, value: &str) -> toml_edit::Item {
    let numeric = !matches!(name, "requirepass" | "log-level") && !name.starts_with("tls-");
    match value.parse::<i64>() {
        Ok(n) if numeric => toml_edit::value(n),
        _ => toml_edit::value(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_settings_parse_as_the_file_does_and_others_are_refused() {
        let mut c = ServerConfig::default();
        c.set_live("maxmemory", "2mb").unwrap();
        assert_eq!(c.maxmemory, ByteSize(2 << 20));
        c.set_live("slowlog-log-slower-than", "-1").unwrap();
        assert_eq!(c.slowlog_log_slower_than, -1);
        c.set_live("requirepass", "").unwrap();
        assert_eq!(c.requirepass, None);
        c.set_live("hot-cache-entries", "4096").unwrap();
        assert_eq!(c.hot_cache_entries, 4096);
        c.set_live("durability", "EverySec").unwrap();
        assert_eq!(c.durability, Some(crate::config::DurabilityMode::Everysec));
        assert!(c.set_live("durability", "sometimes").is_err());
        assert!(c.set_live("maxclients", "many").is_err());
        assert!(c.set_live("maxmemory", "3 apples").is_err());
        let why = c.set_live("data-dir", "/x").unwrap_err();
        assert!(why.contains("not changeable while serving"), "{why}");
        let why = c.set_live("no-such-thing", "1").unwrap_err();
        assert!(why.contains("Unknown option"), "{why}");
        for name in LIVE_SETTINGS {
            assert!(
                c.params().iter().any(|(n, _)| n == name),
                "{name} is a CONFIG GET name"
            );
        }
    }

    #[test]
    fn rewrite_keeps_comments_and_other_settings() {
        let dir = std::env::temp_dir().join(format!("combkv-rewrite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("combkv.toml");
        let text = "# the cache node\nresp = \"127.0.0.1:7000\" # port for apps\n\
                    maxmemory = \"1gb\"\n\n# slow requests\nslowlog-max-len = 10\n";
        std::fs::write(&path, text).unwrap();
        let started = ServerConfig::from_file(&path).unwrap();
        let mut now = started.clone();
        now.set_live("maxmemory", "2gb").unwrap();
        now.set_live("maxclients", "77").unwrap();
        rewrite(&path, &started, &now).unwrap();
        let out = std::fs::read_to_string(&path).unwrap();
        assert!(
            out.starts_with("# the cache node\nresp = \"127.0.0.1:7000\" # port for apps\n"),
            "{out}"
        );
        assert!(
            out.contains("# slow requests\nslowlog-max-len = 10\n"),
            "{out}"
        );
        assert!(
            out.contains(&format!("maxmemory = {}", 2u64 << 30)),
            "{out}"
        );
        assert!(out.contains("maxclients = 77"), "{out}");
        // Unchanged and not in the file: not written.
        assert!(!out.contains("max-reply-bytes"), "{out}");
        let again = ServerConfig::from_file(&path).unwrap();
        assert_eq!(again.maxmemory, ByteSize(2 << 30));
        assert_eq!(again.maxclients, 77);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
