//! The storage the durability layer writes through: a small trait over the
//! few file operations it needs, the real file system behind it, and an
//! in-memory file system that injects faults and simulates crashes (what
//! survives a crash is exactly what was synced, plus a random prefix of what
//! was not).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::error::IoError;
use super::lock::{DirInUse, DirLock, LockError};

/// Names (not paths) of the files in a directory, as `Storage::list`
/// returns them.
pub type FileNames = Vec<String>;

/// The file operations of the durability layer. Every method is a possible
/// failure point; `sync_data` and `sync_dir` are the sync points.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates `dir` and any missing parents (`std::fs::create_dir_all`).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names (not paths) of the files in `dir`.
    fn list(&self, dir: &Path) -> io::Result<FileNames>;
    /// Names of everything in `dir`, directories and links included (a
    /// backup refuses a directory that holds anything). The default is
    /// `list`, for a storage that holds files only.
    fn list_all(&self, dir: &Path) -> io::Result<FileNames> {
        self.list(dir)
    }
    /// Creates `path` empty (truncating it if it exists) for appending.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;
    /// Replaces what `path` holds (creating it) with `buf`, neither synced
    /// nor atomic: after a crash the file may hold the old bytes, the new,
    /// or a mix of them. For small records that are checked when read and
    /// whose loss costs nothing (the Raft log's commit point and synced
    /// length): rewriting one in place spares the file system the inode a
    /// new file and a rename cost. The default writes a new file under the
    /// name.
    fn overwrite(&self, path: &Path, buf: &[u8]) -> io::Result<()> {
        self.create(path)?.write_all(buf)
    }
    /// Opens `path` for reading from its start.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>>;
    /// Fills `buf` from `path` at byte `offset`: an error if the file ends
    /// first. Reads what was written, synced or not (the Raft log serves
    /// entries from its segments while it appends to them).
    fn read_at(&self, path: &Path, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// The size of `path` in bytes.
    fn len(&self, path: &Path) -> io::Result<u64>;
    /// Cuts `path` to `len` bytes and syncs it.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to` if it exists (atomic on a
    /// POSIX file system; durable only after `sync_dir`).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file `path` (durable only after `sync_dir`).
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// fdatasync of the file at `path`, by its name: every byte written to
    /// it so far, through any handle, is durable when it returns Ok (the
    /// Raft log's node journal syncs the segments it covered this way
    /// before it drops them from the journal). On Linux a write-back error
    /// already reported to another handle is not reported again: a caller
    /// relying on it must hear of the other handles' failed syncs.
    fn sync_file(&self, path: &Path) -> io::Result<()>;
    /// Takes the lock of the existing directory `dir` (`lock::DirLock`):
    /// refused with `LockError::InUse` while another holder has it.
    /// The default excludes no one, for a storage that no other process
    /// can reach; the real file system takes a `flock`, and
    /// `FaultyStorage` keeps track of its holders.
    fn lock_dir(&self, dir: &Path) -> Result<DirLock, LockError> {
        let _ = dir;
        Ok(DirLock::unshared())
    }
}

/// A file open for appending.
pub trait WritableFile: Send + fmt::Debug {
    /// Writes `buf` at the file's write position (its end, unless
    /// [`zero_to`](WritableFile::zero_to) made it longer), which moves on.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// fdatasync: every byte written so far is durable when it returns Ok.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Extends the file with written zeros up to `len` bytes and syncs them,
    /// leaving the write position where it is; nothing if the file is
    /// already that long. Writes into such a region overwrite allocated
    /// blocks and leave the file's size alone, so a sync after them has no
    /// metadata to write: on ext4 it costs about a third less (see the
    /// Raft log, which uses it). A sync point.
    fn zero_to(&mut self, len: u64) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct FsStorage;

#[derive(Debug)]
struct FsFile(std::fs::File);

impl WritableFile for FsFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        io::Write::write_all(&mut self.0, buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn zero_to(&mut self, len: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut at = self.0.metadata()?.len();
        if at >= len {
            return Ok(());
        }
        // Real zeros, not `set_len`: a hole or an unwritten extent would
        // make each later write allocate, and each sync write metadata.
        let zeros = vec![0u8; (1 << 20).min((len - at) as usize)];
        while at < len {
            let n = zeros.len().min((len - at) as usize);
            self.0.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        self.0.sync_data()
    }
}

impl Storage for FsStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<FileNames> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            if e.file_type()?.is_file()
                && let Some(name) = e.file_name().to_str()
            {
                out.push(name.to_string());
            }
        }
        out.sort();
        Ok(out)
    }
    fn list_all(&self, dir: &Path) -> io::Result<FileNames> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir)? {
            out.push(e?.file_name().to_string_lossy().into_owned());
        }
        out.sort();
        Ok(out)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(FsFile(f)))
    }
    fn overwrite(&self, path: &Path, buf: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)?;
        f.write_all_at(buf, 0)?;
        if f.metadata()?.len() > buf.len() as u64 {
            f.set_len(buf.len() as u64)?;
        }
        Ok(())
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        let f = std::fs::File::open(path)?;
        Ok(Box::new(io::BufReader::with_capacity(1 << 20, f)))
    }
    fn read_at(&self, path: &Path, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        std::fs::File::open(path)?.read_exact_at(buf, offset)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.set_len(len)?;
        f.sync_all()
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        // fdatasync through a read-only handle flushes the inode's pages
        // whoever wrote them.
        std::fs::File::open(path)?.sync_data()
    }
    fn lock_dir(&self, dir: &Path) -> Result<DirLock, LockError> {
        super::lock::lock_file(dir)
    }
}

// ---- fault injection ----------------------------------------------------

/// An in-memory file system for crash and fault tests.
///
/// Each file has its bytes and the length that is durable (synced); each
/// directory entry is durable once its directory is synced. A *crash*
/// keeps the durable namespace and, per file, the synced bytes plus a
/// random prefix of the unsynced ones (a torn write). After a crash every
/// operation fails until `restart`, which makes the crash image current.
#[derive(Debug, Clone, Default)]
pub struct FaultyStorage {
    inner: Arc<Mutex<Faulty>>,
}

#[derive(Debug, Default)]
struct MemFile {
    data: Vec<u8>,
    /// The write position: `data.len()` unless `zero_to` zeroed beyond it.
    written: usize,
    /// Bytes up to here are durable.
    synced: usize,
    /// Zeros up to here were synced by `zero_to`: after a crash the file
    /// is at least this long, zeros where nothing durable was written.
    zeroed: usize,
}

impl MemFile {
    fn with(data: Vec<u8>) -> MemFile {
        let n = data.len();
        MemFile {
            data,
            written: n,
            synced: n,
            zeroed: 0,
        }
    }

    /// Writes `buf` at the write position.
    fn write(&mut self, buf: &[u8]) {
        let end = self.written + buf.len();
        if end > self.data.len() {
            self.data.resize(end, 0);
        }
        self.data[self.written..end].copy_from_slice(buf);
        self.written = end;
    }
}

#[derive(Debug, Default)]
struct Faulty {
    files: HashMap<u64, MemFile>,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    next_id: u64,
    /// Bumped by `restart`: handles of an earlier life fail.
    generation: u64,
    syncs: u64,
    writes: u64,
    crash_at_sync: Option<u64>,
    fail_sync_at: Option<u64>,
    fail_write_at: Option<u64>,
    crashed: Option<Image>,
    seed: u64,
    /// Held directory locks: the generation that took each (a crash ends
    /// the process that held it, so a restart finds it free) and the
    /// holder's token.
    locks: BTreeMap<PathBuf, (u64, u64)>,
    next_lock: u64,
}

#[derive(Debug)]
struct Image {
    files: HashMap<u64, MemFile>,
    names: BTreeMap<PathBuf, u64>,
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected {what} failure"))
}

impl Faulty {
    fn live(&self, generation: u64) -> io::Result<()> {
        if self.crashed.is_some() || generation != self.generation {
            return Err(io::Error::other("storage crashed"));
        }
        Ok(())
    }

    fn rand(&mut self) -> u64 {
        // splitmix64: deterministic per seed.
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Counts a sync point; Err if this one fails or crashes.
    fn sync_point(&mut self) -> io::Result<()> {
        self.syncs += 1;
        if self.crash_at_sync == Some(self.syncs) {
            self.crash();
            return Err(injected("crash at sync"));
        }
        if self.fail_sync_at == Some(self.syncs) {
            return Err(injected("sync"));
        }
        Ok(())
    }

    fn crash(&mut self) {
        let names = self.durable_names.clone();
        let mut files = HashMap::new();
        for &id in names.values() {
            if files.contains_key(&id) {
                continue;
            }
            let (written, synced) = match self.files.get(&id) {
                Some(f) => (f.written, f.synced.min(f.written)),
                None => continue,
            };
            let extra = if written > synced {
                (self.rand() % (written - synced + 1) as u64) as usize
            } else {
                0
            };
            let f = &self.files[&id];
            let keep = synced + extra;
            // What was written survives up to `keep`; past it, the synced
            // zeros of `zero_to` (what those writes overwrote).
            let mut data = f.data[..keep].to_vec();
            if f.zeroed > keep {
                data.resize(f.zeroed, 0);
            }
            files.insert(id, MemFile::with(data));
        }
        self.crashed = Some(Image { files, names });
    }
}

#[derive(Debug)]
struct MemHandle {
    fs: Arc<Mutex<Faulty>>,
    id: u64,
    generation: u64,
}

impl WritableFile for MemHandle {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut fs = self.fs.lock();
        fs.live(self.generation)?;
        fs.writes += 1;
        if fs.fail_write_at == Some(fs.writes) {
            // A failed write may still have written a part.
            let part = buf.len() / 2;
            if let Some(f) = fs.files.get_mut(&self.id) {
                f.write(&buf[..part]);
            }
            return Err(injected("write"));
        }
        let f = fs.files.get_mut(&self.id).ok_or(io::ErrorKind::NotFound)?;
        f.write(buf);
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        let mut fs = self.fs.lock();
        fs.live(self.generation)?;
        fs.sync_point()?;
        let f = fs.files.get_mut(&self.id).ok_or(io::ErrorKind::NotFound)?;
        f.synced = f.written;
        Ok(())
    }
    fn zero_to(&mut self, len: u64) -> io::Result<()> {
        let mut fs = self.fs.lock();
        fs.live(self.generation)?;
        let len = len as usize;
        let f = fs.files.get_mut(&self.id).ok_or(io::ErrorKind::NotFound)?;
        if f.data.len() >= len {
            return Ok(());
        }
        f.data.resize(len, 0);
        // A crash at this sync point keeps no new zeros: the file's durable
        // length is what it was.
        fs.sync_point()?;
        let f = fs.files.get_mut(&self.id).ok_or(io::ErrorKind::NotFound)?;
        f.synced = f.written;
        f.zeroed = len;
        Ok(())
    }
}

impl FaultyStorage {
    /// An empty file system; `seed` drives the torn-write lengths.
    pub fn new(seed: u64) -> FaultyStorage {
        let s = FaultyStorage::default();
        s.inner.lock().seed = seed;
        s
    }

    /// Sync points passed so far (in this life).
    pub fn syncs(&self) -> u64 {
        self.inner.lock().syncs
    }

    /// The `n`th sync point from now crashes instead (1 = the next one).
    pub fn crash_at_sync(&self, n: u64) {
        let mut fs = self.inner.lock();
        fs.crash_at_sync = Some(fs.syncs + n);
    }

    /// The `n`th sync point from now fails once (the storage stays up).
    pub fn fail_sync_at(&self, n: u64) {
        let mut fs = self.inner.lock();
        fs.fail_sync_at = Some(fs.syncs + n);
    }

    /// The `n`th file write from now fails once, after writing half its bytes.
    pub fn fail_write_at(&self, n: u64) {
        let mut fs = self.inner.lock();
        fs.fail_write_at = Some(fs.writes + n);
    }

    /// Crashes now.
    pub fn crash(&self) {
        self.inner.lock().crash();
    }

    /// True once a crash has happened and before `restart`.
    pub fn has_crashed(&self) -> bool {
        self.inner.lock().crashed.is_some()
    }

    /// Comes back after a crash with what survived it; handles opened
    /// before fail from now on. Also clears pending fault injections.
    pub fn restart(&self) {
        let mut fs = self.inner.lock();
        if let Some(img) = fs.crashed.take() {
            fs.files = img.files;
            fs.names = img.names.clone();
            fs.durable_names = img.names;
        }
        fs.generation += 1;
        fs.syncs = 0;
        fs.writes = 0;
        fs.crash_at_sync = None;
        fs.fail_sync_at = None;
        fs.fail_write_at = None;
    }

    /// The bytes of a file (tests corrupt files with `put_file`).
    pub fn file(&self, path: &Path) -> Option<Vec<u8>> {
        let fs = self.inner.lock();
        let id = fs.names.get(path)?;
        Some(fs.files[id].data.clone())
    }

    /// Replaces a file's bytes, durably.
    pub fn put_file(&self, path: &Path, data: Vec<u8>) {
        let mut fs = self.inner.lock();
        let id = match fs.names.get(path) {
            Some(&id) => id,
            None => {
                fs.next_id += 1;
                let id = fs.next_id;
                fs.names.insert(path.to_path_buf(), id);
                id
            }
        };
        fs.durable_names.insert(path.to_path_buf(), id);
        fs.files.insert(id, MemFile::with(data));
    }
}

impl Storage for FaultyStorage {
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        let fs = self.inner.lock();
        let g = fs.generation;
        fs.live(g)
    }
    fn list(&self, dir: &Path) -> io::Result<FileNames> {
        let fs = self.inner.lock();
        fs.live(fs.generation)?;
        Ok(fs
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect())
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let mut fs = self.inner.lock();
        fs.live(fs.generation)?;
        fs.next_id += 1;
        let id = fs.next_id;
        fs.files.insert(id, MemFile::default());
        fs.names.insert(path.to_path_buf(), id);
        Ok(Box::new(MemHandle {
            fs: Arc::clone(&self.inner),
            id,
            generation: fs.generation,
        }))
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        let fs = self.inner.lock();
        fs.live(fs.generation)?;
        let id = fs.names.get(path).ok_or(io::ErrorKind::NotFound)?;
        Ok(Box::new(io::Cursor::new(fs.files[id].data.clone())))
    }
    fn read_at(&self, path: &Path, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let fs = self.inner.lock();
        fs.live(fs.generation)?;
        let id = fs.names.get(path).ok_or(io::ErrorKind::NotFound)?;
        let data = &fs.files[id].data;
        let from = usize::try_from(offset).unwrap_or(usize::MAX);
        let bytes = from
            .checked_add(buf.len())
            .and_then(|end| data.get(from..end))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(bytes);
        Ok(())
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        let fs = self.inner.lock();
        fs.live(fs.generation)?;
        let id = fs.names.get(path).ok_or(io::ErrorKind::NotFound)?;
        Ok(fs.files[id].data.len() as u64)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut fs = self.inner.lock();
        fs.live(fs.generation)?;
        fs.sync_point()?;
        let id = *fs.names.get(path).ok_or(io::ErrorKind::NotFound)?;
        let f = fs.files.get_mut(&id).expect("named files exist");
        f.data.truncate(len as usize);
        *f = MemFile::with(std::mem::take(&mut f.data));
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut fs = self.inner.lock();
        fs.live(fs.generation)?;
        let id = fs.names.remove(from).ok_or(io::ErrorKind::NotFound)?;
        fs.names.insert(to.to_path_buf(), id);
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut fs = self.inner.lock();
        fs.live(fs.generation)?;
        fs.names.remove(path).ok_or(io::ErrorKind::NotFound)?;
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut fs = self.inner.lock();
        fs.live(fs.generation)?;
        fs.sync_point()?;
        let in_dir = |p: &PathBuf| p.parent() == Some(dir);
        fs.durable_names.retain(|p, _| !in_dir(p));
        let now: Vec<(PathBuf, u64)> = fs
            .names
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, &id)| (p.clone(), id))
            .collect();
        fs.durable_names.extend(now);
        Ok(())
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        let mut fs = self.inner.lock();
        fs.live(fs.generation)?;
        let id = *fs.names.get(path).ok_or(io::ErrorKind::NotFound)?;
        fs.sync_point()?;
        let f = fs.files.get_mut(&id).expect("named files exist");
        f.synced = f.written;
        Ok(())
    }
    fn lock_dir(&self, dir: &Path) -> Result<DirLock, LockError> {
        let mut fs = self.inner.lock();
        let generation = fs.generation;
        fs.live(generation)
            .map_err(|e| LockError::Io(IoError::new("locking the data directory", e)))?;
        if fs.locks.get(dir).is_some_and(|&(g, _)| g == generation) {
            return Err(LockError::InUse(DirInUse {
                dir: dir.to_path_buf(),
                pid: Some(std::process::id()),
            }));
        }
        fs.next_lock += 1;
        let token = fs.next_lock;
        fs.locks.insert(dir.to_path_buf(), (generation, token));
        Ok(DirLock::from_guard(FaultyLock {
            fs: Arc::clone(&self.inner),
            dir: dir.to_path_buf(),
            token,
        }))
    }
}

/// A `FaultyStorage` directory lock; dropping it releases it.
#[derive(Debug)]
struct FaultyLock {
    fs: Arc<Mutex<Faulty>>,
    dir: PathBuf,
    token: u64,
}

impl Drop for FaultyLock {
    fn drop(&mut self) {
        let mut fs = self.fs.lock();
        // Only its own: after a restart another holder may have it.
        if fs
            .locks
            .get(&self.dir)
            .is_some_and(|&(_, t)| t == self.token)
        {
            fs.locks.remove(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(s: &dyn Storage, p: &Path) -> Vec<u8> {
        let mut out = Vec::new();
        s.open_read(p).unwrap().read_to_end(&mut out).unwrap();
        out
    }

    /// Runs `check` on the real file system and on the fault model, each
    /// with a fresh directory `combkv-<name>-<pid>` under the temporary one.
    fn on_both(name: &str, check: impl Fn(&dyn Storage, &Path)) {
        let dir = std::env::temp_dir().join(format!("combkv-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let fs_storage: Arc<dyn Storage> = Arc::new(FsStorage);
        let mem: Arc<dyn Storage> = Arc::new(FaultyStorage::new(1));
        for s in [fs_storage, mem] {
            s.create_dir_all(&dir).unwrap();
            check(&*s, &dir);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Writes after `zero_to` overwrite the zeros from the write position,
    /// on the real file system and in the fault model alike.
    #[test]
    fn writes_overwrite_zeroed_space() {
        on_both("zero-to", |s, dir| {
            let p = dir.join("f");
            let mut f = s.create(&p).unwrap();
            f.write_all(b"abc").unwrap();
            f.zero_to(10).unwrap();
            f.write_all(b"de").unwrap();
            f.zero_to(4).unwrap();
            f.sync_data().unwrap();
            assert_eq!(read(s, &p), b"abcde\0\0\0\0\0");
            f.write_all(b"fghijklm").unwrap();
            assert_eq!(read(s, &p), b"abcdefghijklm");
            assert_eq!(s.len(&p).unwrap(), 13);
        });
    }

    /// `overwrite` leaves exactly the new bytes, shorter or longer than the
    /// old, and creates a file that is absent, on both file systems.
    #[test]
    fn overwrite_leaves_exactly_the_new_bytes() {
        on_both("overwrite", |s, dir| {
            let p = dir.join("f");
            s.overwrite(&p, b"abcdef").unwrap();
            assert_eq!(read(s, &p), b"abcdef");
            s.overwrite(&p, b"xy").unwrap();
            assert_eq!(read(s, &p), b"xy");
            s.overwrite(&p, b"0123456789").unwrap();
            assert_eq!(read(s, &p), b"0123456789");
            assert_eq!(s.list(dir).unwrap(), vec!["f".to_string()]);
        });
    }

    /// `read_at` reads what was written, before any sync, from any offset;
    /// a range past the end is an error, on both file systems.
    #[test]
    fn read_at_reads_written_bytes_anywhere() {
        on_both("read-at", |s, dir| {
            let p = dir.join("f");
            let mut f = s.create(&p).unwrap();
            f.write_all(b"abcdef").unwrap();
            f.zero_to(16).unwrap();
            f.write_all(b"gh").unwrap();
            let mut buf = [0u8; 4];
            s.read_at(&p, 3, &mut buf).unwrap();
            assert_eq!(&buf, b"defg");
            s.read_at(&p, 12, &mut buf).unwrap();
            assert_eq!(&buf, b"\0\0\0\0");
            assert!(s.read_at(&p, 14, &mut buf).is_err());
        });
    }

    /// A crash keeps a zeroed file's synced zeros, what was synced over
    /// them, and a prefix of what was not; never zeros that were not synced.
    #[test]
    fn a_crash_keeps_synced_zeros_and_a_prefix_of_the_writes() {
        for seed in 0..50 {
            let s = FaultyStorage::new(seed);
            let dir = Path::new("/d");
            let p = dir.join("f");
            let mut f = s.create(&p).unwrap();
            s.sync_dir(dir).unwrap();
            f.write_all(b"ab").unwrap();
            f.zero_to(8).unwrap();
            f.write_all(b"cd").unwrap();
            f.sync_data().unwrap();
            f.write_all(b"efgh").unwrap();
            // A crash at `zero_to`'s own sync point keeps none of its zeros.
            let mut g = s.create(&dir.join("g")).unwrap();
            s.sync_dir(dir).unwrap();
            g.write_all(b"x").unwrap();
            s.crash_at_sync(1);
            assert!(g.zero_to(16).is_err());
            s.restart();
            let data = read(&s, &p);
            assert_eq!(data.len(), 8, "seed {seed}: {data:?}");
            assert_eq!(&data[..4], b"abcd");
            let tail = &data[4..];
            let kept = tail.iter().take_while(|&&b| b != 0).count();
            assert_eq!(&tail[..kept], &b"efgh"[..kept], "seed {seed}");
            assert!(tail[kept..].iter().all(|&b| b == 0), "seed {seed}");
            assert!(read(&s, &dir.join("g")).len() <= 1);
        }
    }
}
