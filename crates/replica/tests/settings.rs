//! Cluster settings (the ACL table is one) are the same on a node that
//! applied their entries, on a node that installed a snapshot instead, and
//! on a node that restarted from its snapshot; an entry of ops beside them
//! still applies as ops, and a setting answers no results.

use std::collections::BTreeMap;
use std::path::Path;

use combkv_replica::codec::{decode_setting, encode_setting, is_setting};
use combkv_replica::{Batch, StateMachine, TypeConfig};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};

fn entry(index: u64, ops: Vec<u8>) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Batch { now_ms: 1, ops }),
    }
}

fn open(dir: &Path) -> StateMachine {
    StateMachine::open(combkv::Config::default(), dir, None).unwrap()
}

#[test]
fn a_setting_is_told_apart_from_ops() {
    let s = encode_setting("acl", b"user default on nopass ~* &* +@all\n");
    assert!(is_setting(&s));
    let (name, value) = decode_setting(&s).unwrap().unwrap();
    assert_eq!(
        (name.as_str(), value.as_slice()),
        ("acl", &b"user default on nopass ~* &* +@all\n"[..])
    );
    let mut ops = Vec::new();
    combkv_replica::codec::encode_ops(&[], &mut ops);
    assert!(!is_setting(&ops) && decode_setting(&ops).is_none());
    // A setting cut short is refused, never half applied.
    assert!(decode_setting(&s[..s.len() - 1]).unwrap().is_err());
    // To a reader of ops it is an empty list with trailing bytes.
    assert!(combkv_replica::codec::decode_ops(&s).is_err());
}

#[tokio::test]
async fn settings_survive_a_snapshot_install_and_a_restart() {
    let root = std::env::temp_dir().join(format!("combkv-settings-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut sm = open(&root.join("a"));
    let mut seen = sm.settings();
    let mut put = Vec::new();
    combkv_replica::codec::encode_ops(
        &[combkv::op::Op::Put {
            key: b"k",
            value: b"v",
            expiry: combkv::Expiry::Never,
            flags: combkv::Flags::Keep,
            cond: combkv::op::Cond::Any,
            return_old: false,
        }],
        &mut put,
    );
    let applied = sm
        .apply([
            entry(1, encode_setting("acl", b"one")),
            entry(2, put),
            entry(3, encode_setting("acl", b"two")),
            entry(4, encode_setting("other", b"x")),
        ])
        .await
        .unwrap();
    assert_eq!(
        applied.iter().map(|a| a.results.len()).collect::<Vec<_>>(),
        [0, 1, 0, 0]
    );
    let want = BTreeMap::from([
        ("acl".to_string(), b"two".to_vec()),
        ("other".to_string(), b"x".to_vec()),
    ]);
    assert!(seen.has_changed().unwrap());
    assert_eq!(*seen.borrow_and_update(), want);
    assert!(sm.store().get().get(b"k").unwrap().is_some());

    let snap = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let mut other = open(&root.join("b"));
    let other_seen = other.settings();
    let mut receiving = other.begin_receiving_snapshot().await.unwrap();
    let mut data = snap.snapshot;
    tokio::io::copy(&mut *data, &mut *receiving).await.unwrap();
    other.install_snapshot(&snap.meta, receiving).await.unwrap();
    assert_eq!(*other_seen.borrow(), want, "after installing the snapshot");

    drop(sm);
    assert_eq!(
        *open(&root.join("a")).settings().borrow(),
        want,
        "after a restart"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A conditional setting applies only where the setting still holds the
/// value it expects (none, or the one it was decided from), answering one
/// result: applied, or refused with the setting unchanged.
#[tokio::test]
async fn a_conditional_setting_applies_only_over_the_value_it_expects() {
    use combkv_replica::codec::{SETTING_CHANGED, SettingIf, encode_setting_if};
    let root = std::env::temp_dir().join(format!("combkv-settings-if-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut sm = open(&root);
    let seen = sm.settings();
    let change = |expect: Option<&[u8]>, value: &[u8]| {
        encode_setting_if(&SettingIf {
            name: "acl".into(),
            expect: expect.map(<[u8]>::to_vec),
            value: value.to_vec(),
        })
    };
    let applied = sm
        .apply([
            entry(1, change(None, b"one")),
            entry(2, change(None, b"two")),
            entry(3, change(Some(b"two"), b"three")),
            entry(4, change(Some(b"one"), b"four")),
        ])
        .await
        .unwrap();
    let results: Vec<Result<(), String>> = applied
        .iter()
        .map(|a| {
            assert_eq!(a.results.len(), 1);
            a.results[0].as_ref().map(drop).map_err(|e| e.to_string())
        })
        .collect();
    let changed = Err(format!("invalid configuration: {SETTING_CHANGED}"));
    assert_eq!(results, [Ok(()), changed.clone(), changed, Ok(())]);
    assert_eq!(
        seen.borrow().get("acl").map(Vec::as_slice),
        Some(&b"four"[..])
    );
    let _ = std::fs::remove_dir_all(&root);
}
