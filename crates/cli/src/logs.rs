//! The server's logs: to stderr, as text (colour only on a terminal) or
//! JSON lines, at `log-level` for combkv's own events (`RUST_LOG`, where
//! set, replaces the filter whole).
//!
//! openraft's own events show below combkv's level (`log_filter`), and
//! of its errors, those a running cluster meets as a matter of course are
//! left out unless the level is `debug` or `trace` (`routine_raft_error`):
//! a call to a peer that failed (a node down or cut off, a range's replica
//! not started there yet, appends withheld while a leadership is handed
//! over, which spreading leaders does after every restart), a vote or a
//! leadership check a peer did not answer, and the "cannot initialize"
//! the forming node meets at each restart. Each repeated several times a
//! second while it lasted, at ERROR, where log alerts look; combkv's
//! health watch reports a peer that does not answer once, as a warning
//! that says what to do. openraft's storage errors and its fatal ones
//! always show.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::{Level, Metadata};
use tracing_subscriber::filter::{FilterFn, filter_fn};

/// The filter for `log-level`: combkv's own at that level, openraft's
/// below it (its state dumps are for debugging a cluster, and its
/// warnings repeat several times a second while a follower is down).
fn log_filter(level: &str) -> String {
    let raft = match level {
        "trace" => "trace",
        "debug" => "info",
        _ => "error",
    };
    format!("{level},openraft={raft}")
}

/// Whether openraft's routine errors are left out at `level`.
fn quiet_at(level: &str) -> bool {
    !matches!(level, "debug" | "trace")
}

/// Whether `meta` is one of openraft's errors that are routine in a
/// running cluster (see the module's documentation), told apart by the
/// module that logs it and a field only it carries there (openraft
/// 0.9's events).
fn routine_raft_error(meta: &Metadata<'_>) -> bool {
    if *meta.level() != Level::ERROR {
        return false;
    }
    let has = |name: &str| meta.fields().field(name).is_some();
    match meta.target() {
        // `RPCError`: a call to a follower failed. Its storage error,
        // beside it, names its field `error`.
        "openraft::replication" => has("err"),
        // A vote or a leadership confirmation that one peer did not
        // answer ("fail to join task", also per peer, has no `error`).
        "openraft::core::raft_core" => has("target") && has("error"),
        // "Can not initialize": the cluster is formed already.
        "openraft::engine::engine_impl" => has("last_log_id"),
        _ => false,
    }
}

/// Leaves out openraft's routine errors while `quiet` holds. Its answer
/// is cached per event site: `quiet` changes only with a new level,
/// whose filter reload rebuilds that cache.
fn routine_filter(quiet: Arc<AtomicBool>) -> FilterFn<impl Fn(&Metadata<'_>) -> bool> {
    filter_fn(move |meta| !(quiet.load(Ordering::Relaxed) && routine_raft_error(meta)))
}

/// Installs the logger (see the module's documentation); CONFIG SET
/// log-level swaps its filter while serving.
pub(crate) fn init(level: &str, format: &str) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, fmt, reload};
    let from_env = EnvFilter::try_from_default_env().ok();
    let quiet = Arc::new(AtomicBool::new(from_env.is_none() && quiet_at(level)));
    let filter = from_env.unwrap_or_else(|| EnvFilter::new(log_filter(level)));
    let (filter, handle) = reload::Layer::new(filter);
    let registry = tracing_subscriber::registry().with(filter);
    let routine = routine_filter(Arc::clone(&quiet));
    if format == "json" {
        registry
            .with(
                fmt::layer()
                    .json()
                    .with_writer(std::io::stderr)
                    .with_filter(routine),
            )
            .init();
    } else {
        registry
            .with(
                fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                    .with_filter(routine),
            )
            .init();
    }
    combkv_server::on_log_level(Box::new(move |level| {
        // Before the reload, which rebuilds the cached answers.
        quiet.store(quiet_at(level), Ordering::Relaxed);
        handle
            .reload(EnvFilter::new(log_filter(level)))
            .map_err(|e| format!("cannot change the log filter: {e}"))
    }));
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Mutex;

    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// What a logger wrote.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// openraft's events as it logs them (target, fields), each with a
    /// text to find it by.
    fn emit_raft_errors() {
        tracing::error!(target: "openraft::replication", err = "withheld", "RPCError");
        tracing::error!(target: "openraft::replication", error = "disk", "storage: replication");
        tracing::error!(target: "openraft::core::raft_core", target = "2", error = "timeout", "vote");
        tracing::error!(target: "openraft::core::raft_core", error = "gone", "fatal: quit");
        tracing::error!(target: "openraft::engine::engine_impl", last_log_id = "T1", "initialize");
        tracing::warn!(target: "openraft::replication", err = "slow", "a warning");
        tracing::error!(target: "combkv", err = "x", "combkv's own");
    }

    /// What a logger with the routine filter (`quiet` or not) writes of
    /// `emit_raft_errors`.
    fn logged(quiet: bool) -> String {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .with_filter(routine_filter(Arc::new(AtomicBool::new(quiet)))),
        );
        tracing::subscriber::with_default(subscriber, || {
            // The other test's answers for the same event sites are cached.
            tracing::callsite::rebuild_interest_cache();
            emit_raft_errors();
        });
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    /// At the default levels openraft's routine errors are left out, its
    /// storage and fatal errors, its other events and combkv's own kept;
    /// at debug every one shows.
    #[test]
    fn routine_raft_errors_show_only_when_debugging() {
        let quiet = logged(true);
        for kept in [
            "storage: replication",
            "fatal: quit",
            "a warning",
            "combkv's own",
        ] {
            assert!(quiet.contains(kept), "{kept} left out:\n{quiet}");
        }
        for routine in ["RPCError", "vote", "initialize"] {
            assert!(!quiet.contains(routine), "{routine} shown:\n{quiet}");
        }
        let debugging = logged(false);
        for line in ["RPCError", "vote", "initialize", "storage: replication"] {
            assert!(debugging.contains(line), "{line} left out:\n{debugging}");
        }
        assert!(quiet_at("notice") && quiet_at("warning") && !quiet_at("debug"));
    }
}
