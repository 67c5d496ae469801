//! The data directory's lock: one process at a time writes a directory.
//!
//! Two processes writing the same log and checkpoints lose acknowledged
//! writes: each hands out versions from its own clock, and on the next
//! start recovery finds the records of one interleaved with the other's
//! and cuts the log at the first that does not follow. So whatever opens a
//! directory for writing (a durable store, `combkv check --repair`, a
//! cluster node for the files under `cluster/`) first takes an exclusive,
//! non-blocking `flock(2)` on the file `LOCK` in it, and holds it until it
//! is done, or, for a server, for the life of the process. A second one
//! fails at once with [`DirInUse`], naming the holder's pid, which the
//! holder writes into the file after taking the lock.
//!
//! An advisory `flock` rather than a pid file checked for liveness: the
//! kernel drops it with the holder's last descriptor, however the holder
//! ends (`kill -9` included), so a crash never leaves a stale lock behind,
//! and a reused pid can never look like a live holder. Rather than a
//! `fcntl` record lock, which a process loses when it closes *any*
//! descriptor of the file.
//!
//! Read-only `combkv check` takes no lock (see `check`).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

use super::error::IoError;

/// The lock file's name in a data directory. It holds the pid of the
/// process that holds (or last held) the lock, and is never removed:
/// removing it would let a newcomer lock a new file while the holder still
/// holds the old one.
pub const LOCK_FILE: &str = "LOCK";

/// A held lock on a data directory; dropping it releases it (and so does
/// the holder's exit, however it ends).
pub struct DirLock {
    _held: Box<dyn fmt::Debug + Send + Sync>,
}

impl fmt::Debug for DirLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DirLock").field(&self._held).finish()
    }
}

impl DirLock {
    /// Takes the lock on `dir` on the real file system, creating the
    /// directory if it is missing: what a process that writes files under
    /// `dir` without a durable store (a cluster node) holds.
    pub fn acquire(dir: &Path) -> Result<DirLock, LockError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| LockError::Io(IoError::new("creating the data directory", e)))?;
        lock_file(dir)
    }

    /// A lock held by `guard` (a storage other than the real file system
    /// says what holding one means; dropping the guard releases it).
    pub fn from_guard(guard: impl fmt::Debug + Send + Sync + 'static) -> DirLock {
        DirLock {
            _held: Box::new(guard),
        }
    }

    /// A lock that excludes no one: for a storage no other process can
    /// reach, which has no one to exclude.
    pub fn unshared() -> DirLock {
        DirLock::from_guard("unshared storage")
    }
}

/// Another process holds the directory's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirInUse {
    /// The data directory whose lock is held.
    pub dir: PathBuf,
    /// The holder's pid, as it wrote it into the lock file (None if it has
    /// not written it yet, or the file cannot be read).
    pub pid: Option<u32>,
}

impl fmt::Display for DirInUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "data directory {} is in use by ", self.dir.display())?;
        match self.pid {
            Some(pid) => write!(f, "process {pid}")?,
            None => f.write_str("another process")?,
        }
        write!(
            f,
            " (it holds {}: a server, or check --repair, runs on it)",
            self.dir.join(LOCK_FILE).display()
        )
    }
}

impl std::error::Error for DirInUse {}

/// Why a data directory could not be locked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockError {
    /// Another process holds it.
    InUse(DirInUse),
    /// Opening or locking the lock file failed.
    Io(IoError),
}

impl LockError {
    /// The directory does not exist (opening its lock file found no
    /// directory to create it in).
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, LockError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::InUse(d) => d.fmt(f),
            LockError::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LockError::InUse(_) => None,
            LockError::Io(e) => Some(e.io_error()),
        }
    }
}

/// The lock file of an existing directory, locked, with this process's pid
/// written into it. Fails with `NotFound` if `dir` does not exist.
pub(crate) fn lock_file(dir: &Path) -> Result<DirLock, LockError> {
    let path = dir.join(LOCK_FILE);
    let what = || format!("locking {}", path.display());
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| LockError::Io(IoError::new(what(), e)))?;
    loop {
        let e = match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => break,
            Err(errno) => io::Error::from(errno),
        };
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => {
                return Err(LockError::InUse(DirInUse {
                    dir: dir.to_path_buf(),
                    pid: holder_pid(&file),
                }));
            }
            _ => return Err(LockError::Io(IoError::new(what(), e))),
        }
    }
    // The pid line first, then the length: a reader that comes in between
    // sees this pid on the first line, never an empty file. Not synced: it
    // only names the holder for an error message, and a crash ends the
    // holding anyway.
    let line = format!("{}\n", std::process::id());
    file.write_all_at(line.as_bytes(), 0)
        .and_then(|()| file.set_len(line.len() as u64))
        .map_err(|e| LockError::Io(IoError::new(what(), e)))?;
    Ok(DirLock::from_guard(HeldFile { _file: file, path }))
}

/// The pid on the lock file's first line.
fn holder_pid(file: &File) -> Option<u32> {
    let mut text = String::new();
    // Read through a second handle to the same open file: `read` moves the
    // shared offset, which nothing else uses (the pid is written at 0).
    (&*file).read_to_string(&mut text).ok()?;
    text.lines().next()?.trim().parse().ok()
}

/// The open, locked lock file: closing it (dropping it) releases the lock.
struct HeldFile {
    /// Held for its descriptor, which holds the lock.
    _file: File,
    path: PathBuf,
}

impl fmt::Debug for HeldFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "flock on {}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("combkv-lock-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_second_lock_is_refused_with_the_holders_pid_until_the_first_is_dropped() {
        let dir = temp_dir("second");
        let held = DirLock::acquire(&dir).unwrap();
        let text = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        // flock excludes a second open file description in the same
        // process as it does another process.
        let refused = DirLock::acquire(&dir).unwrap_err();
        assert_eq!(
            refused,
            LockError::InUse(DirInUse {
                dir: dir.clone(),
                pid: Some(std::process::id()),
            })
        );
        let msg = refused.to_string();
        assert!(!msg.contains('\n'), "{msg}");
        assert!(
            msg.contains(&format!("in use by process {}", std::process::id())),
            "{msg}"
        );
        drop(held);
        let again = DirLock::acquire(&dir).unwrap();
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_longer_stale_pid_is_overwritten_whole() {
        let dir = temp_dir("stale");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(LOCK_FILE), "4294967295\nleft over\n").unwrap();
        let held = DirLock::acquire(&dir).unwrap();
        let text = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        drop(held);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_directory_is_not_found_without_creating_it() {
        let dir = temp_dir("missing");
        let e = lock_file(&dir).unwrap_err();
        assert!(e.is_not_found(), "{e:?}");
        assert!(!dir.exists());
    }
}
