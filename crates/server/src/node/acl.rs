//! Changes to the users (ACL SETUSER, DELUSER, LOAD) take effect here:
//! on a single node at once; on a cluster node through the log, so that
//! every node enforces the same users. The whole table travels as the ACL
//! file's text (a cluster setting named `acl`), and each node puts it in
//! place as it applies the entry, after a restart or a snapshot install
//! too; the node that proposed it also puts it in place before it answers,
//! so its client sees the change at once.

use std::sync::{Arc, Weak};

use crate::state::Shared;

/// The cluster setting that carries the ACL table.
const SETTING: &str = "acl";

/// Puts `text` (`Acl::to_text`'s form) in place, everywhere it must be.
pub(crate) fn commit(shared: &Shared, text: &str) -> Result<(), String> {
    // A change made before the node's log is open would be replaced by
    // the table the log holds.
    if shared.config.clustered() && shared.cluster().is_none() {
        return Err("the node is still loading; change users once it serves".into());
    }
    if let Some(c) = shared.cluster() {
        c.set_setting(SETTING, text.as_bytes())
            .map_err(|e| format!("the ACL change did not commit: {e}"))?;
    }
    shared.acl.replace(text)
}

/// On a cluster node: follows the replicated ACL table. A table the log
/// already holds replaces what the configuration gave (requirepass, the
/// ACL file) when the node starts.
pub(crate) fn follow(shared: &Arc<Shared>) {
    let Some(c) = shared.cluster() else {
        return;
    };
    let weak: Weak<Shared> = Arc::downgrade(shared);
    c.on_setting(SETTING, move |value| {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let text = String::from_utf8_lossy(value);
        match shared.acl.replace(&text) {
            Ok(()) => tracing::info!("ACL table from the cluster's log put in place"),
            // Every node refuses alike: the table in place stays.
            Err(e) => tracing::error!("the cluster's ACL table does not load, kept the old: {e}"),
        }
    });
}
