//! openraft's own storage conformance suite, run on combkv's Raft log and
//! state machine: every behaviour openraft relies on (log reads after
//! truncation and purge, membership lookups, vote persistence, applying
//! entries, snapshots) as openraft's authors test it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use combkv_replica::{LogOptions, LogStore, StateMachine, TypeConfig};
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};

/// Builds each test's log and state machine in a directory of its own; the
/// guard removes it when the test is done.
struct Builder {
    root: PathBuf,
    next: AtomicU64,
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl StoreBuilder<TypeConfig, LogStore, StateMachine, Dir> for Builder {
    async fn build(&self) -> Result<(Dir, LogStore, StateMachine), StorageError<u64>> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let dir = self.root.join(n.to_string());
        let storage: Arc<dyn combkv::durable::Storage> = Arc::new(combkv::durable::FsStorage);
        // Odd-numbered stores are node 7's, which leads none of the suite's
        // entries: their appends run in the caller, as a follower's do.
        let options = LogOptions {
            own_id: (n % 2 == 1).then_some(7),
            ..LogOptions::default()
        };
        let (log, _) = LogStore::open(storage, &dir.join("log"), options)
            .unwrap_or_else(|e| panic!("opening the log in {}: {e}", dir.display()));
        let sm = StateMachine::open(combkv::Config::default(), &dir.join("snapshots"), None)
            .unwrap_or_else(|e| panic!("opening the state machine in {}: {e}", dir.display()));
        Ok((Dir(dir), log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    let root = std::env::temp_dir().join(format!("combkv-conformance-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let builder = Builder {
        root: root.clone(),
        next: AtomicU64::new(0),
    };
    let r = Suite::test_all(builder);
    let _ = std::fs::remove_dir_all(&root);
    r.unwrap();
}
