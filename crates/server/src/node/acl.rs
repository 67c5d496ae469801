//! Changes to the users (ACL SETUSER, DELUSER, LOAD; `requirepass`) take
//! effect here: on a single node at once; on a cluster node through the
//! log, so that every node enforces the same users. The whole table
//! travels as the ACL file's text (a cluster setting named `acl`), and
//! each node puts it in place as it applies the entry, after a restart or
//! a snapshot install too; the node that proposed it also puts it in place
//! before it answers, so its client sees the change at once.
//!
//! On a cluster node the change waits for a log round (up to the request
//! timeout without a quorum), so an ACL command's connection parks
//! meanwhile, as a write's does (CONFIG SET's `requirepass` too: the call
//! applies its other parameters once it lands, `node::settings`). A change is
//! decided from the table the log holds and applies only if the log still
//! holds that table, else it is decided again from the newer one: two
//! clients changing users at once, through one node or two, both get
//! their change.

use std::sync::{Arc, Weak};

use crate::cluster::Change;
use crate::node::park::{self, Parking};
use crate::state::Shared;
use crate::state::acl::Acl;

/// The cluster setting that carries the ACL table.
const SETTING: &str = "acl";

/// Changes the users: `decide` makes the new table (`Acl::to_text`'s
/// form) and the command's answer from the table in place, or refuses.
/// None: the connection parked (`parking`), and the command, run again
/// once the change ends, finds its answer here.
pub(crate) fn change(
    shared: &Shared,
    parking: Option<Parking<'_>>,
    decide: impl Fn(&Acl) -> Result<(String, u64), String> + Send + 'static,
) -> Option<Result<u64, String>> {
    // A change made before the node's log is open would be replaced by
    // the table the log holds; until it has caught up with the log, its
    // connections cannot park.
    if shared.config.clustered() && (shared.cluster().is_none() || shared.readiness.loading()) {
        return Some(Err(
            "the node is still loading; change users once it serves".into(),
        ));
    }
    let Some(c) = shared.cluster() else {
        return Some(decide(&shared.acl).and_then(|(text, n)| {
            shared.acl.replace(&text)?;
            Ok(n)
        }));
    };
    let acl = Arc::clone(&shared.acl);
    let change = Change::Setting {
        name: SETTING,
        // Until the log holds a table, the one the configuration gave.
        decide: Box::new(move |logged| {
            let (text, n) = match logged {
                Some(t) => decide(&acl.with_table(&String::from_utf8_lossy(t))?),
                None => decide(&acl),
            }?;
            Ok((text.into_bytes(), Some(n)))
        }),
    };
    let changed = park::change(parking, c, change)?;
    Some(changed.map(|n| n.unwrap_or(0)).map_err(|e| match e {
        combkv_replica::ClusterError::Refused(why) => why,
        e => format!("the ACL change did not commit: {e}"),
    }))
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
