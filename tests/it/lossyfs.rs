//! A FUSE file system that forgets what was never synced, for power-loss tests (the idea of
//! LazyFS, which Jepsen uses, in a form small enough to run inside the test process).
//!
//! One flat directory whose files live in memory twice: what processes see (`current`) and
//! what a disk would still hold after losing power (`durable`). A write changes `current`
//! and remembers the range; `fsync` or `fdatasync` copies the written ranges into
//! `durable`. [`Disk::lose_power`] puts every file back to its durable bytes.
//!
//! Simplifications: creating, removing and truncating a file are durable at once (a real
//! file system may persist such metadata at any moment, so this is one of the states it
//! could come back in), a file extended by a write keeps its new size only once synced, and
//! a write is never torn or reordered. A loss this file system shows is therefore a loss a
//! real disk could show too; it does not find every loss one could.
//!
//! The database and WAL are opened with direct I/O, so every read comes here and sees
//! `current`, and nothing stale survives in the kernel's cache after a power loss. The
//! `-shm` file, which SQLite maps into memory, goes through the page cache as usual (mapping
//! needs it); SQLite rebuilds its contents when the first connection opens the database.
//! Direct I/O also means SQLite cannot memory-map the database, so its readers fall back to
//! `read`: the write path under test is the production one, the read path is not quite.
//!
//! Every handler answers instead of panicking: a panic would leave the kernel's request
//! unanswered and the process that made it hung, and the test with it.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use fuser::{
    FileAttr, FileType, Filesystem, MountOption, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};

const ROOT: u64 = fuser::FUSE_ROOT_ID;
/// Attributes are never cached: sizes change behind the kernel's back at a power loss.
const TTL: Duration = Duration::ZERO;
const FOPEN_DIRECT_IO: u32 = 1 << 0;
const FOPEN_KEEP_CACHE: u32 = 1 << 1;
/// The largest file: what `statfs` reports free. Beyond it a write gets EFBIG.
const MAX_FILE: u64 = 1 << 30;

#[derive(Default)]
struct File {
    name: OsString,
    current: Vec<u8>,
    durable: Vec<u8>,
    /// Byte ranges written since the last sync.
    unsynced: Vec<(usize, usize)>,
    mode: u16,
}

impl File {
    fn sync(&mut self) {
        self.durable.resize(self.current.len(), 0);
        for (start, end) in self.unsynced.drain(..) {
            let end = end.min(self.current.len());
            if start < end {
                self.durable[start..end].copy_from_slice(&self.current[start..end]);
            }
        }
    }
}

#[derive(Default)]
struct State {
    files: HashMap<u64, File>,
    next_ino: u64,
    /// Syncs seen, for the test to show that the code under test asked for them.
    syncs: u64,
}

/// The mounted file system; unmounted when dropped.
pub struct Disk {
    state: Arc<Mutex<State>>,
    _session: fuser::BackgroundSession,
}

impl Disk {
    /// Mounts an empty file system on `mountpoint` (an existing empty directory). Needs
    /// /dev/fuse and the right to mount, which root has.
    pub fn mount(mountpoint: &Path) -> std::io::Result<Disk> {
        let state = Arc::new(Mutex::new(State {
            next_ino: ROOT + 1,
            ..State::default()
        }));
        let owner = std::fs::metadata(mountpoint)?;
        let fs = LossyFs {
            state: state.clone(),
            uid: owner.uid(),
            gid: owner.gid(),
        };
        let options = [
            MountOption::FSName("lossyfs".into()),
            MountOption::DefaultPermissions,
        ];
        let session = fuser::spawn_mount2(fs, mountpoint, &options)?;
        Ok(Disk {
            state,
            _session: session,
        })
    }

    /// Every file goes back to what was last synced: a power loss. Call it only while no
    /// process has the files open (after SIGKILL), as after a real one.
    pub fn lose_power(&self) -> LostBytes {
        let mut state = lock(&self.state);
        let mut lost = LostBytes::default();
        for f in state.files.values_mut() {
            // Bytes that differ, and bytes past the durable end: what a reader will miss.
            let differing = f
                .current
                .iter()
                .zip(&f.durable)
                .filter(|(a, b)| a != b)
                .count();
            let bytes = differing + f.current.len().saturating_sub(f.durable.len());
            lost.files += usize::from(bytes > 0);
            lost.bytes += bytes;
            f.current = f.durable.clone();
            f.unsynced.clear();
        }
        lost
    }

    pub fn syncs(&self) -> u64 {
        lock(&self.state).syncs
    }
}

/// What a power loss threw away.
#[derive(Debug, Default, Clone, Copy)]
pub struct LostBytes {
    pub files: usize,
    pub bytes: usize,
}

struct LossyFs {
    state: Arc<Mutex<State>>,
    /// Files belong to whoever mounted the file system.
    uid: u32,
    gid: u32,
}

impl LossyFs {
    fn attr(&self, ino: u64, f: Option<&File>) -> FileAttr {
        let now = SystemTime::now();
        let (kind, perm, size) = match f {
            Some(f) => (FileType::RegularFile, f.mode, f.current.len() as u64),
            None => (FileType::Directory, 0o755, 0),
        };
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind,
            perm,
            nlink: if f.is_some() { 1 } else { 2 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

/// A handler that panicked leaves its data as it was; carrying on beats hanging the test.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `[start, start + len)` as indexes, if it ends within [`MAX_FILE`].
fn range(start: i64, len: u64) -> Option<(usize, usize)> {
    let start = u64::try_from(start).ok()?;
    let end = start.checked_add(len)?;
    (end <= MAX_FILE).then_some((start as usize, end as usize))
}

/// Direct I/O for everything but SQLite's shared-memory file, which it maps.
fn open_flags(name: &OsStr) -> u32 {
    if name.to_string_lossy().ends_with("-shm") {
        FOPEN_KEEP_CACHE
    } else {
        FOPEN_DIRECT_IO
    }
}

impl Filesystem for LossyFs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let state = lock(&self.state);
        match state.files.iter().find(|(_, f)| f.name == name) {
            Some((ino, f)) if parent == ROOT => reply.entry(&TTL, &self.attr(*ino, Some(f)), 0),
            _ => reply.error(nix::libc::ENOENT),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        let state = lock(&self.state);
        match (ino, state.files.get(&ino)) {
            (ROOT, _) => reply.attr(&TTL, &self.attr(ROOT, None)),
            (_, Some(f)) => reply.attr(&TTL, &self.attr(ino, Some(f))),
            _ => reply.error(nix::libc::ENOENT),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let mut state = lock(&self.state);
        if ino == ROOT {
            return reply.attr(&TTL, &self.attr(ROOT, None));
        }
        let Some(f) = state.files.get_mut(&ino) else {
            return reply.error(nix::libc::ENOENT);
        };
        if let Some(mode) = mode {
            f.mode = (mode & 0o7777) as u16;
        }
        // Truncation is durable at once (see the module's comment).
        if let Some(size) = size {
            let Some((_, size)) = range(0, size) else {
                return reply.error(nix::libc::EFBIG);
            };
            f.current.resize(size, 0);
            f.durable.resize(size, 0);
        }
        reply.attr(&TTL, &self.attr(ino, Some(f)));
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut state = lock(&self.state);
        let found = state
            .files
            .iter()
            .find(|(_, f)| f.name == name)
            .map(|(ino, _)| *ino);
        match found {
            Some(ino) if parent == ROOT => {
                state.files.remove(&ino);
                reply.ok();
            }
            _ => reply.error(nix::libc::ENOENT),
        }
    }

    fn create(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if parent != ROOT {
            return reply.error(nix::libc::ENOENT);
        }
        let mut state = lock(&self.state);
        if state.files.values().any(|f| f.name == name) {
            return reply.error(nix::libc::EEXIST);
        }
        let ino = state.next_ino;
        state.next_ino += 1;
        let file = File {
            name: name.to_owned(),
            mode: (mode & 0o7777) as u16,
            ..File::default()
        };
        reply.created(&TTL, &self.attr(ino, Some(&file)), 0, 0, open_flags(name));
        state.files.insert(ino, file);
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let state = lock(&self.state);
        match state.files.get(&ino) {
            Some(f) => reply.opened(0, open_flags(&f.name)),
            None => reply.error(nix::libc::ENOENT),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let state = lock(&self.state);
        let Some(f) = state.files.get(&ino) else {
            return reply.error(nix::libc::ENOENT);
        };
        let start = usize::try_from(offset).map_or(0, |o| o.min(f.current.len()));
        let end = start.saturating_add(size as usize).min(f.current.len());
        reply.data(&f.current[start..end]);
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let mut state = lock(&self.state);
        let Some(f) = state.files.get_mut(&ino) else {
            return reply.error(nix::libc::ENOENT);
        };
        let Some((start, end)) = range(offset, data.len() as u64) else {
            return reply.error(nix::libc::EFBIG);
        };
        if f.current.len() < end {
            f.current.resize(end, 0);
        }
        f.current[start..end].copy_from_slice(data);
        f.unsynced.push((start, end));
        reply.written(data.len() as u32);
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock: u64, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _data: bool, reply: ReplyEmpty) {
        let mut state = lock(&self.state);
        state.syncs += 1;
        match state.files.get_mut(&ino) {
            Some(f) => {
                f.sync();
                reply.ok();
            }
            None => reply.error(nix::libc::ENOENT),
        }
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        if ino == ROOT {
            reply.opened(0, 0);
        } else {
            reply.error(nix::libc::ENOTDIR);
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        if ino != ROOT {
            return reply.error(nix::libc::ENOTDIR);
        }
        let state = lock(&self.state);
        let mut entries = vec![
            (ROOT, FileType::Directory, OsString::from(".")),
            (ROOT, FileType::Directory, OsString::from("..")),
        ];
        entries.extend(
            state
                .files
                .iter()
                .map(|(ino, f)| (*ino, FileType::RegularFile, f.name.clone())),
        );
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(ino, (i + 1) as i64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _d: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        // 1 GiB free in 4 KiB blocks: room enough for any test.
        reply.statfs(
            262_144, 262_144, 262_144, 1_000_000, 999_000, 4096, 255, 4096,
        );
    }

    fn access(&mut self, _req: &Request<'_>, _ino: u64, _mask: i32, reply: ReplyEmpty) {
        reply.ok();
    }
}
