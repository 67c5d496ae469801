//! The write-ahead log's segment files in a test's fault-injecting file
//! system, shared by the durability and corruption tests.

use std::path::{Path, PathBuf};

use combkv::durable::{FaultyStorage, Storage};

/// The `wal-*.log` files in `dir`, in log order.
pub fn segments(fs: &FaultyStorage, dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs
        .list(Path::new(dir))
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("wal-") && n.ends_with(".log"))
        .map(|n| Path::new(dir).join(n))
        .collect();
    v.sort();
    v
}
