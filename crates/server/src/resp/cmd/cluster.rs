//! ROLE, WAIT and CLUSTER: a node's place in its cluster, what its
//! followers hold, and the cluster's administration (`docs/cluster.md`).
//! `combkv cluster ...` sends these.

use combkv_replica::{ClusterError, Role};

use super::Ctx;
use crate::cluster::{Change, Cluster};
use crate::node::park::Waited;
use crate::resp::error::{CmdError, CmdResult};
use crate::resp::reply::Reply;

/// ROLE in Redis's shape: a leader is a `master` with its followers'
/// matched indexes as offsets; a follower is a `slave` of the leader.
/// Nodes are named by the RESP address they published (the Raft address
/// until they have). A single node is a `master` without followers.
pub(super) fn role(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let Some(c) = cx.shared.cluster() else {
        cx.r.array(3);
        cx.r.bulk_str("master");
        cx.r.int(0);
        cx.r.array(0);
        return Ok(());
    };
    let s = c.status();
    if s.role == Role::Leader {
        cx.r.array(3);
        cx.r.bulk_str("master");
        cx.r.int(s.commit_index as i64);
        cx.r.array(s.followers.len());
        for (id, matched, _) in &s.followers {
            let addr = client_addr(c, &s, *id).unwrap_or_default();
            let (host, port) = addr.rsplit_once(':').unwrap_or((&addr, ""));
            cx.r.array(3);
            cx.r.bulk_str(host);
            cx.r.bulk_str(port);
            cx.r.bulk_str(&matched.to_string());
        }
        return Ok(());
    }
    let leader = s.leader.and_then(|l| client_addr(c, &s, l));
    let (host, port) = match &leader {
        Some(a) => a.rsplit_once(':').unwrap_or((a.as_str(), "")),
        None => ("", ""),
    };
    cx.r.array(5);
    cx.r.bulk_str("slave");
    cx.r.bulk_str(host);
    cx.r.int(port.parse().unwrap_or(0));
    cx.r.bulk_str(if leader.is_some() {
        "connected"
    } else {
        "connect"
    });
    cx.r.int(s.applied_index as i64);
    Ok(())
}

/// How long `CLUSTER ADD` waits for the new node to catch up, unless told.
const ADD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// CLUSTER INIT id=host:port,... | ADD id host:port [seconds] | REMOVE id |
/// STATUS | RANGES | SPLIT key [FORCE] | MERGE key [FORCE].
pub(super) fn cluster(cx: &mut Ctx<'_, '_>) -> CmdResult {
    // A cluster node whose Raft log is still being opened: its status
    // says so (`raft_role:loading`); nothing else can be done yet.
    if cx.shared.config.clustered() && cx.shared.cluster().is_none() {
        if crate::resp::cmd::eq_ic(cx.args[1], "status") && cx.args.len() == 2 {
            let out = status_text(cx.shared, None);
            cx.r.verbatim(&out);
            return Ok(());
        }
        return Err(CmdError::Loading);
    }
    let Some(c) = cx.shared.cluster() else {
        return Err(CmdError::err(
            "this server is not a cluster node (start it with --node-id and --raft-addr)",
        ));
    };
    let sub = String::from_utf8_lossy(cx.args[1]).to_ascii_lowercase();
    let text = |i: usize| String::from_utf8_lossy(cx.args[i]).into_owned();
    match (sub.as_str(), cx.args.len()) {
        ("status", 2) => {
            let out = status_text(cx.shared, Some(c));
            cx.r.verbatim(&out);
        }
        ("init", 3) => {
            let members = crate::config::parse_peers(&text(2)).map_err(CmdError::err)?;
            if !members.iter().any(|(id, _)| *id == c.id()) {
                return Err(CmdError::err(format!(
                    "the members must include this node (id {})",
                    c.id()
                )));
            }
            let members = members
                .into_iter()
                .map(|(id, a)| (id, a.to_string()))
                .collect();
            return change(cx, c, Change::Init(members));
        }
        ("add", 4 | 5) => {
            let id = node_id(&text(2))?;
            let addr: std::net::SocketAddr = text(3)
                .parse()
                .map_err(|e| CmdError::err(format!("bad address '{}': {e}", text(3))))?;
            let within = match cx.args.get(4) {
                None => ADD_TIMEOUT,
                Some(_) => text(4)
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
                    .map(std::time::Duration::from_secs_f64)
                    .ok_or_else(|| {
                        CmdError::err(format!(
                            "bad timeout '{}' (seconds, above 0, at most a day)",
                            text(4)
                        ))
                    })?,
            };
            let addr = addr.to_string();
            return change(cx, c, Change::Add { id, addr, within });
        }
        ("remove", 3) => {
            let id = node_id(&text(2))?;
            return change(cx, c, Change::Remove(id));
        }
        ("ranges", 2) => {
            let out = ranges_text(c);
            cx.r.verbatim(&out);
        }
        ("split" | "merge", 3 | 4) => {
            let force = match cx.args.get(3) {
                None => false,
                Some(a) if a.eq_ignore_ascii_case(b"force") => true,
                Some(_) => {
                    return Err(CmdError::err(format!(
                        "bad CLUSTER {} option '{}' (FORCE is the only one)",
                        sub.to_ascii_uppercase(),
                        text(3)
                    )));
                }
            };
            let key = cx.args[2].to_vec();
            let what = match sub.as_str() {
                "split" => Change::Split { key, force },
                _ => Change::Merge { key, force },
            };
            return change(cx, c, what);
        }
        ("help", 2) => help(&mut cx.r),
        _ => {
            return Err(CmdError::err(format!(
                "unknown CLUSTER subcommand or wrong number of arguments for '{sub}' \
                 (try CLUSTER HELP)"
            )));
        }
    }
    Ok(())
}

/// Carries out a change to the cluster without holding the event loop:
/// the connection parks until the change ends (an add waits for its node
/// to catch up), and the command, run again, answers OK, or the range id
/// a split made or a merge took away.
fn change(cx: &mut Ctx<'_, '_>, c: &Cluster, change: Change) -> CmdResult {
    let Some(changed) = crate::node::park::change(cx.parking, c, change) else {
        cx.parked = true;
        return Ok(());
    };
    match changed.map_err(|e| admin_error(c, e))? {
        Some(id) => cx.r.int(id as i64),
        None => cx.r.ok(),
    }
    Ok(())
}

/// CLUSTER HELP's lines, one per subcommand, each starting with its
/// syntax (COMMAND DOCS documents every one of them: a test checks).
const HELP: [&str; 7] = [
    "CLUSTER STATUS: this node's role, term, indexes, members and followers.",
    "CLUSTER INIT id=host:port,...: forms a new cluster of these voters (this node one).",
    "CLUSTER ADD id host:port [seconds]: on the leader, adds a node: a learner, which must \
     catch up within the seconds (30) or is removed again, then a voter. Ids in use or \
     of removed voters are refused.",
    "CLUSTER REMOVE id: on the leader, removes a node; a voter's id is never used again.",
    "CLUSTER RANGES: the ranges the keyspace is cut into, a line each: id, bounds, epoch, \
     replicas, leader, and the keys and bytes of those this node holds.",
    "CLUSTER SPLIT key [FORCE]: splits the range holding the key there, the key starting \
     a new range; answers the new range's id. Refused while a snapshot pins the range, \
     unless FORCE (the new range then takes the pins, and keeps the store it was split \
     from held until the snapshot ends).",
    "CLUSTER MERGE key [FORCE]: merges the range holding the key with the range after it \
     (both on the same nodes); answers the id of the range merged away. Refused while a \
     snapshot pins either range, unless FORCE (the snapshot's reads of the merged range are \
     then refused).",
];

fn help(r: &mut Reply<'_>) {
    r.array(HELP.len());
    for l in HELP {
        r.bulk_str(l);
    }
}

fn node_id(s: &str) -> Result<u64, CmdError> {
    s.parse()
        .ok()
        .filter(|&id| id > 0)
        .ok_or_else(|| CmdError::err(format!("bad node id '{s}' (a number above 0)")))
}

/// CLUSTER STATUS: INFO replication's fields, then (once the Raft log is
/// open) a line per member and the retired ids.
fn status_text(shared: &crate::state::Shared, c: Option<&Cluster>) -> String {
    let mut out = String::new();
    for (name, value) in crate::node::info::replication_fields(shared) {
        out.push_str(&format!("{name}:{value}\r\n"));
    }
    let Some(c) = c else {
        return out;
    };
    let status = c.status();
    for (id, addr, voter) in status.nodes {
        let kind = if voter { "voter" } else { "learner" };
        out.push_str(&format!("member:id={id},addr={addr},{kind}\r\n"));
    }
    let retired: Vec<String> = status.retired.iter().map(u64::to_string).collect();
    out.push_str(&format!("retired_ids:{}\r\n", retired.join(",")));
    out
}

/// CLUSTER RANGES: a line per range of the map, in key order. The leader,
/// keys, bytes and load are this node's replica's, where the map names one
/// here (load `-` where splits by load are off: nothing is counted).
fn ranges_text(c: &Cluster) -> String {
    let Some(map) = c.range_map() else {
        return "ranges:0 (the cluster is not formed yet)\r\n".into();
    };
    let mut out = format!("ranges:{}\r\n", map.len());
    for r in map.ranges() {
        out.push_str(&r.to_string());
        // What this node's replica knows: its leader, keys, bytes and load.
        if let Some(replica) = c.range_replica(r.id) {
            let leader = replica
                .status()
                .leader
                .map_or_else(|| "none".into(), |l| l.to_string());
            let store = replica.current_store();
            let m = store.memory();
            let load = replica
                .requests_per_sec()
                .map_or_else(|| "-".into(), |n| n.to_string());
            out.push_str(&format!(
                " leader {leader} keys {} bytes {} load {load}",
                store.len(),
                m.node_bytes + m.value_bytes
            ));
        }
        out.push_str("\r\n");
    }
    out
}

/// Where a client reaches node `id`: its published RESP address, else
/// its Raft address.
fn client_addr(c: &Cluster, s: &combkv_replica::Status, id: u64) -> Option<String> {
    crate::node::peers::resp_addr(c, id)
        .or_else(|| s.nodes.iter().find(|n| n.0 == id).map(|n| n.1.clone()))
}

fn admin_error(c: &Cluster, e: ClusterError) -> CmdError {
    match e {
        ClusterError::NotLeader {
            leader: Some(id),
            addr: Some(addr),
        } => CmdError::err(match crate::node::peers::resp_addr(c, id) {
            Some(resp) => {
                format!("not the leader; send this to node {id} at {resp} (Raft address {addr})")
            }
            None => format!("not the leader; send this to node {id} (Raft address {addr})"),
        }),
        other => CmdError::err(other.to_string()),
    }
}

/// Redis's refusal of WAIT on a replica, and the reason on a combkv node
/// that is not the leader: only the leader knows what its followers hold.
const WAIT_NOT_LEADER: &str = "WAIT cannot be used with replica instances: only the leader \
     tracks what its followers hold; send WAIT to the leader";

/// WAIT numreplicas timeout: how many followers hold this connection's
/// writes. On a cluster's leader, the voters besides it whose matched log
/// index reaches the connection's last write (the commit index if it
/// wrote nothing), waiting up to `timeout` ms (0: no limit) for
/// `numreplicas` of them without holding the event loop: the connection
/// parks (`park`) and the command runs again once the count lands. Inside
/// EXEC it answers the count at once, as Redis does where a client may
/// not block. A single node has no replicas and none can join it: 0 at
/// once.
pub(super) fn wait(cx: &mut Ctx<'_, '_>) -> CmdResult {
    let want = cx.int(1)?;
    let timeout_ms = super::parse_i64(cx.args[2])
        .ok_or_else(|| CmdError::err("timeout is not an integer or out of range"))?;
    if timeout_ms < 0 {
        return Err(CmdError::err("timeout is negative"));
    }
    let Some(c) = cx.shared.cluster() else {
        cx.r.int(0);
        return Ok(());
    };
    let timeout = (timeout_ms > 0).then(|| std::time::Duration::from_millis(timeout_ms as u64));
    let waited = match cx.parking {
        Some(p) if cx.txn.is_none() => p.wait_replicas(c, want, timeout),
        // Inside EXEC (or with no parking): the count as it stands.
        _ => Waited::Now(c.replicas_at(c.commit_index())),
    };
    match waited {
        Waited::Now(Some(n)) => cx.r.int(n as i64),
        Waited::Now(None) => return Err(CmdError::err(WAIT_NOT_LEADER)),
        Waited::Parked => cx.parked = true,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::HELP;
    use crate::resp::cmd::table::{acl_catalog, docs};

    /// Every subcommand CLUSTER HELP names is documented with the arity
    /// its syntax gives (so COMMAND DOCS lists it), and ACL rules can name
    /// it (`-cluster|split`): the ACL catalog is built from the docs.
    #[test]
    fn every_cluster_subcommand_is_documented_and_named_by_acl_rules() {
        let catalog = acl_catalog();
        for line in HELP {
            let (syntax, _) = line.split_once(": ").expect("a syntax, then a colon");
            let words: Vec<&str> = syntax.split(' ').collect();
            let name = format!("cluster|{}", words[1].to_ascii_lowercase());
            let doc = docs::find(&name)
                .unwrap_or_else(|| panic!("{name} has no docs"))
                .doc;
            let required = words.iter().filter(|w| !w.starts_with('[')).count();
            let optional = words.len() > required;
            let arity = if optional {
                -(required as i64)
            } else {
                required as i64
            };
            assert_eq!(i64::from(doc.arity), arity, "{name}");
            assert!(catalog.id(&name).is_some(), "{name}");
        }
    }
}
