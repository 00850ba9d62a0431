//! storage/disk_cache — an optional local disk cache of blocks read by ranged reads (`cache_dir`, bounded by
//! `cache_disk_bytes`), beneath a source's memory cache: a block missing from memory is looked up here before it
//! is fetched, and a fetched block is admitted here. It survives restarts, is shared by every loader and process
//! of the node that names the same folder, verifies everything it hands out and cleans up after crashed users.
//! Nothing here is ever waited on for long or fatal: a miss, a damaged entry, a full cache or a failed write
//! (disk full, EACCES) is counted and the caller reads from the network as it would without a cache.
//!
//! # On-disk layout
//!
//! ```text
//! <cache_dir>/trdata-blocks-v1/               everything this module owns (nothing else in cache_dir is touched)
//!   state                                     16 bytes: b"TRDCACH1" · usage u64 LE; flock'd (LOCK_EX) around
//!                                             every change of what the cache holds; never deleted
//!   tmp/<pid>-<seq>.tmp                       an entry being written, flock'd (LOCK_EX) by its writer until it is
//!                                             renamed or removed; its length (set at creation) is its reservation
//!   objects/<fnv(object)>/<fnv(version, size)>/
//!     in-use                                  empty; every process using this object version holds LOCK_SH on it
//!     <offset>-<len>.blk                      one block: header, then the `len` payload bytes
//! ```
//!
//! An object is the URL of a remote object or the path of a local file; its version is what says the bytes are
//! the same ones: the ETag seen at open (remote), the modification time (local), plus the object's size. An
//! entry file (little-endian):
//!
//! ```text
//!  0 magic        8  b"TRDBLK1\0"
//!  8 header_bytes u32 = 56 + object_len + version_len
//! 12 object_len   u32 ≤ 8192 together with version_len
//! 16 version_len  u32
//! 20 payload_crc  u32 CRC32C of the payload
//! 24 object_bytes u64 the object's size at open
//! 32 offset       u64 the block's offset in the object
//! 40 len          u64 the payload's length, ≤ 2^30
//! 48 reserved     u32 = 0
//! 52 header_crc   u32 CRC32C of bytes 0..52 and of the names
//! 56 object bytes, version bytes, then the payload; the file is exactly header_bytes + len bytes
//! ```
//!
//! A [`get`](DiskCache::get) returns a payload only when the header decodes (every size checked before anything is
//! allocated from it, [`EntryHeader::decode`]), names exactly the key asked for (object, version, size, offset,
//! length: the file name is a hash, the header the proof), the file has exactly the length the header says and
//! the payload matches its CRC32C; [`get_checked`](DiskCache::get_checked) also applies the reader's own check of
//! the content (a packed file's record CRC32Cs, which its writers check before a [`put`](DiskCache::put) too: the
//! entry CRC is computed over the bytes as received, so only the reader's check catches bytes damaged on the
//! wire). Anything else is a damaged or foreign entry: it is removed, counted (`disk_corrupt_removed`) and never
//! used.
//!
//! # Multi-process protocol
//!
//! All coordination is by `flock`, which the kernel releases when a process dies, so no lock ever has to be
//! deleted by its owner and a crash never leaves the cache locked.
//!
//! - **State lock.** Every change of what the cache holds (reserving bytes, renaming an entry into place,
//!   removing entries, registering a version, the recovery at open) happens under LOCK_EX on `state`, which holds
//!   the bytes accounted: `state`'s 16 bytes + the live entries + the reservations of live writers. Within a
//!   process a mutex serializes the threads first (flock locks belong to the open file, not to a thread). Work
//!   under it is metadata only (no block is written or read while it is held). A process that forks gets its own
//!   `state` descriptor in the child (the inherited one would share the parent's lock).
//! - **Reads** take no lock: an entry is only ever complete (written to `tmp/`, renamed into place), and one
//!   removed while a reader has it open stays readable through the open descriptor. A reader that finds a damaged
//!   entry removes it under the state lock, only if the path still names the file it read (another process may
//!   have replaced it), and subtracts its length.
//! - **Writes**: under the lock, check that the entry is still absent and that usage + its length ≤
//!   `cache_disk_bytes` (making room, below, or giving up: `disk_rejected`); create `tmp/<pid>-<seq>.tmp`
//!   exclusively, LOCK_EX it, set its length (the reservation) and add the length to usage; unlock. Write header
//!   and payload. Under the lock again: rename into place (or, when another process admitted the same block
//!   meanwhile or the write failed, remove the temp file and give the reservation back). A failed write is
//!   counted (`disk_errors`) and ignored. So the bytes in the folder never exceed usage, and usage never exceeds
//!   `cache_disk_bytes`.
//! - **In use.** A cache registers the versions it reads or writes (under the state lock: LOCK_SH on their
//!   `in-use` file, held until the cache is dropped; the file's modification time is the last registration). A
//!   version is in use while some live process holds that lock; making room tests it with a non-blocking LOCK_EX
//!   under the state lock (so no process can register meanwhile).
//! - **Recovery at open**, under the lock: a temp file whose LOCK_EX can be taken belongs to a dead writer and is
//!   removed (a live writer holds its lock); a file in `objects/` that is not an entry name or `in-use` is
//!   removed; a version folder with no entries and no live user is removed; usage is recounted from the files
//!   that remain (so a process killed between two steps above can leave no drift). Entries are not read at open:
//!   a torn entry (power loss: nothing is fsync'd) fails its length or CRC check when read, and is removed then.
//!
//! # Admission and eviction: never thrash on a cyclic scan
//!
//! An epoch reads every block of a pack once, in an order that changes each epoch: a cyclic scan. LRU (or FIFO)
//! with a cache smaller than the pack evicts each block before the scan comes back to it, so every epoch
//! downloads everything again. Here blocks are **admitted until the cache is full, and a block of a version in
//! use is never evicted to admit another**: with a cache of C bytes over a pack of D > C bytes, every epoch after
//! the first hits C/D of its blocks (the same blocks each epoch), the most any policy without knowledge of the
//! future order gets on a random scan. Room is made only from versions no live process uses, in this order:
//! other versions of the same object (stale: the object changed; removed whole, they can never be read again),
//! then other objects' versions, least recently registered first, entry by entry until the new block fits. When
//! everything cached is in use, the block is not admitted (`disk_rejected`) and is read from the network each
//! epoch. Several processes with different `cache_disk_bytes` over one folder each admit within their own bound.

use super::ObjectReader;
use crate::error::{Result, TrdataError};
use crate::param::IntParam;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// `cache_dir`'s name in errors: the folder of the disk cache.
pub const CACHE_DIR: &str = "cache_dir";
/// `cache_disk_bytes`: the most bytes the disk cache holds (entries with their headers, temp files, its state).
pub const CACHE_DISK_BYTES: IntParam =
    IntParam::new("cache_disk_bytes", 1 << 20, 1 << 60).because(" (bytes on disk: at least 1 MiB)");

/// The folder inside `cache_dir` that holds everything of this layout version.
const LAYOUT_DIR: &str = "trdata-blocks-v1";
const STATE_FILE: &str = "state";
const TMP_DIR: &str = "tmp";
const OBJECTS_DIR: &str = "objects";
const IN_USE_FILE: &str = "in-use";
const STATE_MAGIC: [u8; 8] = *b"TRDCACH1";
/// Length of the `state` file (counted in the usage).
const STATE_BYTES: u64 = 16;
const ENTRY_MAGIC: [u8; 8] = *b"TRDBLK1\0";
/// Fixed part of an entry header (then the names).
pub const FIXED_HEADER_BYTES: usize = 56;
/// Most bytes of object and version names in one header.
pub const MAX_NAME_BYTES: usize = 8192;
/// Largest payload of one entry (the largest block a pack has: a record of at most 1 GiB alone).
pub const MAX_PAYLOAD_BYTES: u64 = 1 << 30;

/// What identifies a cached block: the object and its version, and the byte range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockKey {
    /// The object's URL or the local file's path, as bytes.
    pub object: Vec<u8>,
    /// What says the object's bytes are unchanged: `etag:<ETag>` (remote), `mtime:<ns>` (local), or empty.
    pub version: Vec<u8>,
    /// The object's size at open.
    pub object_bytes: u64,
    /// The block's offset in the object.
    pub offset: u64,
    /// The block's length.
    pub len: u64,
}

impl BlockKey {
    /// The key of `len` bytes at `offset` of what `reader` opened.
    pub fn of(reader: &ObjectReader, offset: u64, len: u64) -> Self {
        Self {
            object: reader.name().as_os_str().as_bytes().to_vec(),
            version: reader.version().into_bytes(),
            object_bytes: reader.size(),
            offset,
            len,
        }
    }

    fn version_dir(&self) -> PathBuf {
        let object = fnv64(&[&self.object]);
        let version = fnv64(&[&self.version, &self.object_bytes.to_le_bytes()]);
        Path::new(OBJECTS_DIR).join(format!("{object:016x}")).join(format!("{version:016x}"))
    }

    fn entry_name(&self) -> String {
        format!("{}-{}.blk", self.offset, self.len)
    }
}

/// FNV-1a (64 bits) of length-prefixed parts: a stable name for a folder (the header, not the name, proves what
/// an entry holds, so a collision costs a miss, never wrong bytes).
fn fnv64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in (part.len() as u64).to_le_bytes().iter().chain(part.iter()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The header of an entry file (the layout is in the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryHeader {
    /// Which block of which object version it holds.
    pub key: BlockKey,
    /// CRC32C of the payload.
    pub payload_crc: u32,
}

/// Why a header does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// The header is `need` bytes long (≤ [`FIXED_HEADER_BYTES`] + [`MAX_NAME_BYTES`]); fewer were given.
    Short {
        /// The header's whole length, checked against the limits.
        need: usize,
    },
    /// Not an entry header, or a damaged one.
    Damaged(&'static str),
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl EntryHeader {
    /// The header's length in bytes.
    pub fn header_bytes(&self) -> usize {
        FIXED_HEADER_BYTES + self.key.object.len() + self.key.version.len()
    }

    /// The header's bytes (names at most [`MAX_NAME_BYTES`] together: checked by the caller).
    pub fn encode(&self) -> Vec<u8> {
        let k = &self.key;
        let mut h = Vec::with_capacity(self.header_bytes());
        h.extend_from_slice(&ENTRY_MAGIC);
        h.extend_from_slice(&(self.header_bytes() as u32).to_le_bytes());
        h.extend_from_slice(&(k.object.len() as u32).to_le_bytes());
        h.extend_from_slice(&(k.version.len() as u32).to_le_bytes());
        h.extend_from_slice(&self.payload_crc.to_le_bytes());
        for v in [k.object_bytes, k.offset, k.len] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&[0; 4]); // header_crc, below
        h.extend_from_slice(&k.object);
        h.extend_from_slice(&k.version);
        let crc = header_crc(&h);
        h[52..56].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// The header at the start of `b`. Every size is checked before it is used: `Short` says how many bytes the
    /// whole header has (never more than [`FIXED_HEADER_BYTES`] + [`MAX_NAME_BYTES`]) when `b` holds fewer;
    /// anything inconsistent is `Damaged`. Bytes after the header are ignored.
    pub fn decode(b: &[u8]) -> std::result::Result<Self, HeaderError> {
        if b.len() < FIXED_HEADER_BYTES {
            return Err(HeaderError::Short { need: FIXED_HEADER_BYTES });
        }
        if b[..8] != ENTRY_MAGIC {
            return Err(HeaderError::Damaged("not a trdata cache entry (magic)"));
        }
        let (header_bytes, object_len, version_len) = (le32(b, 8) as usize, le32(b, 12) as usize, le32(b, 16) as usize);
        if object_len > MAX_NAME_BYTES || version_len > MAX_NAME_BYTES - object_len {
            return Err(HeaderError::Damaged("names longer than the limit"));
        }
        if header_bytes != FIXED_HEADER_BYTES + object_len + version_len {
            return Err(HeaderError::Damaged("header length does not match the names"));
        }
        if b.len() < header_bytes {
            return Err(HeaderError::Short { need: header_bytes });
        }
        if le32(b, 48) != 0 {
            return Err(HeaderError::Damaged("reserved bytes are not zero"));
        }
        let len = le64(b, 40);
        if len > MAX_PAYLOAD_BYTES {
            return Err(HeaderError::Damaged("payload longer than the limit"));
        }
        if header_crc(&b[..header_bytes]) != le32(b, 52) {
            return Err(HeaderError::Damaged("header CRC32C mismatch"));
        }
        let names = &b[FIXED_HEADER_BYTES..header_bytes];
        Ok(Self {
            key: BlockKey {
                object: names[..object_len].to_vec(),
                version: names[object_len..].to_vec(),
                object_bytes: le64(b, 24),
                offset: le64(b, 32),
                len,
            },
            payload_crc: le32(b, 20),
        })
    }
}

/// CRC32C of a header's bytes 0..52 and its names (the CRC field itself left out).
fn header_crc(h: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&h[..52]), &h[FIXED_HEADER_BYTES..])
}

/// A snapshot of a disk cache's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskCacheStats {
    /// Blocks served from disk.
    pub disk_hits: u64,
    /// Blocks asked for and not on disk (or damaged).
    pub disk_misses: u64,
    /// Payload bytes admitted (written and renamed into place).
    pub disk_admitted_bytes: u64,
    /// Blocks not admitted: no room within `cache_disk_bytes` (everything cached is in use).
    pub disk_rejected: u64,
    /// Damaged or foreign entries found by a read and removed.
    pub disk_corrupt_removed: u64,
    /// Failed file operations (disk full, EACCES, …), each ignored: the block came from the network.
    pub disk_errors: u64,
    /// Leftovers of crashed processes removed at open (temp files, stray files, empty versions).
    pub disk_leftovers_removed: u64,
}

#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    admitted_bytes: AtomicU64,
    rejected: AtomicU64,
    corrupt_removed: AtomicU64,
    errors: AtomicU64,
    leftovers_removed: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The `state` file and the process that opened it (a forked child opens its own: see the module docs).
#[derive(Debug)]
struct StateFile {
    pid: u32,
    file: File,
}

/// The state lock held: the usage can be read and changed. Unlocked when dropped.
struct StateLock<'a> {
    state: MutexGuard<'a, StateFile>,
    usage: u64,
}

impl StateLock<'_> {
    /// Write the usage back (the lock stays held).
    fn store(&mut self) -> io::Result<()> {
        let mut b = [0u8; STATE_BYTES as usize];
        b[..8].copy_from_slice(&STATE_MAGIC);
        b[8..].copy_from_slice(&self.usage.to_le_bytes());
        self.state.file.write_all_at(&b, 0)
    }

    fn add(&mut self, n: u64) -> io::Result<()> {
        self.usage = self.usage.saturating_add(n);
        self.store()
    }

    fn sub(&mut self, n: u64) -> io::Result<()> {
        self.usage = self.usage.saturating_sub(n);
        self.store()
    }
}

impl Drop for StateLock<'_> {
    fn drop(&mut self) {
        let _ = self.state.file.unlock();
    }
}

/// An open disk cache over one folder (see the module docs for the layout, the protocol and the policy).
#[derive(Debug)]
pub struct DiskCache {
    root: PathBuf,
    limit_bytes: u64,
    state: Mutex<StateFile>,
    /// The versions this cache uses, each with its `in-use` file held LOCK_SH (released when dropped).
    registered: Mutex<HashMap<PathBuf, File>>,
    counters: Counters,
}

/// Numbers the temp files of this process (all its caches: two caches over one folder must not collide).
static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// A block not admitted because everything that could make room for it is in use.
#[derive(Debug)]
struct NoRoom;

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no room within cache_disk_bytes")
    }
}

impl std::error::Error for NoRoom {}

impl From<NoRoom> for io::Error {
    fn from(e: NoRoom) -> Self {
        io::Error::other(e)
    }
}

/// The error of a cache folder that cannot be used, naming `cache_dir`.
fn dir_error(dir: &Path, what: &str, e: &io::Error) -> TrdataError {
    TrdataError::config(CACHE_DIR, format!("{} {what}: {e}", dir.display()))
}

impl DiskCache {
    /// The cache the user asked for: None without `cache_dir`; `cache_disk_bytes` is required with it and refused
    /// without it (a `ConfigError` naming it), and checked against [`CACHE_DISK_BYTES`]. `streamed` says whether
    /// the reader fetches blocks as it goes (a packed file in partial mode): one that reads everything once at open
    /// (full mode) would never use the cache, so asking for one there is a `ConfigError` naming `cache_dir`.
    pub fn from_params(dir: Option<&Path>, limit_bytes: Option<i128>, streamed: bool) -> Result<Option<Self>> {
        match (dir, limit_bytes) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(TrdataError::config(
                CACHE_DISK_BYTES.name,
                "is the bound of the disk cache and needs cache_dir (the folder of the cache)",
            )),
            (Some(_), None) => Err(TrdataError::config(
                CACHE_DISK_BYTES.name,
                "must be given with cache_dir: the most bytes the disk cache may hold",
            )),
            (Some(_), Some(_)) if !streamed => Err(TrdataError::config(
                CACHE_DIR,
                "applies to mode='partial' (blocks fetched as the epoch goes); mode='full' reads the whole file \
                 once when it is opened",
            )),
            (Some(dir), Some(limit)) => Self::open(dir, limit).map(Some),
        }
    }

    /// Open (creating it when absent) the cache in `dir`, bounded by `limit_bytes` ([`CACHE_DISK_BYTES`]), and
    /// clean what crashed processes left (module docs, "Recovery at open"). A bad limit, or a folder that cannot
    /// be created, written or locked, is a `ConfigError` naming `cache_disk_bytes` or `cache_dir`.
    pub fn open(dir: &Path, limit_bytes: i128) -> Result<Self> {
        let limit_bytes: u64 = CACHE_DISK_BYTES.check(limit_bytes)?;
        if dir.as_os_str().is_empty() {
            return Err(TrdataError::config(CACHE_DIR, "an empty path is not a folder"));
        }
        if let Ok(m) = fs::metadata(dir)
            && !m.is_dir()
        {
            return Err(TrdataError::config(
                CACHE_DIR,
                format!(
                    "{} is {}, not a folder",
                    dir.display(),
                    if m.is_file() { "a file" } else { super::local::describe(m.file_type()) }
                ),
            ));
        }
        let root = dir.join(LAYOUT_DIR);
        for sub in [TMP_DIR, OBJECTS_DIR] {
            fs::create_dir_all(root.join(sub)).map_err(|e| dir_error(dir, "cannot be created", &e))?;
        }
        let file = open_state(&root).map_err(|e| dir_error(dir, "cannot be written", &e))?;
        let cache = Self {
            root,
            limit_bytes,
            state: Mutex::new(StateFile { pid: std::process::id(), file }),
            registered: Mutex::new(HashMap::new()),
            counters: Counters::default(),
        };
        let mut lock = cache.lock().map_err(|e| dir_error(dir, "cannot be locked", &e))?;
        cache.recover(&mut lock).map_err(|e| dir_error(dir, "cannot be cleaned", &e))?;
        drop(lock);
        Ok(cache)
    }

    /// The bound in bytes.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// The folder of this layout inside `cache_dir`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The counters now.
    pub fn stats(&self) -> DiskCacheStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DiskCacheStats {
            disk_hits: get(&c.hits),
            disk_misses: get(&c.misses),
            disk_admitted_bytes: get(&c.admitted_bytes),
            disk_rejected: get(&c.rejected),
            disk_corrupt_removed: get(&c.corrupt_removed),
            disk_errors: get(&c.errors),
            disk_leftovers_removed: get(&c.leftovers_removed),
        }
    }

    /// The state lock (module docs): the process's mutex, then LOCK_EX on `state`, then the usage read from it (an
    /// unreadable state is recounted from the files).
    fn lock(&self) -> io::Result<StateLock<'_>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.pid != std::process::id() {
            // A forked child: the inherited descriptor shares the parent's lock, so open our own.
            *state = StateFile { pid: std::process::id(), file: open_state(&self.root)? };
        }
        state.file.lock()?;
        let mut b = [0u8; STATE_BYTES as usize];
        let read = state.file.read_exact_at(&mut b, 0);
        let mut lock = StateLock { state, usage: le64(&b, 8) };
        if read.is_err() || b[..8] != STATE_MAGIC {
            self.recover(&mut lock)?;
        }
        Ok(lock)
    }

    /// Remove what crashed processes left and recount the usage (under the lock; module docs).
    fn recover(&self, lock: &mut StateLock<'_>) -> io::Result<()> {
        let mut usage = STATE_BYTES;
        let mut removed = 0;
        for entry in fs::read_dir(self.root.join(TMP_DIR))? {
            let path = entry?.path();
            match OpenOptions::new().write(true).open(&path) {
                Ok(f) if f.try_lock().is_ok() => {
                    remove_quietly(&path);
                    removed += 1;
                }
                Ok(f) => usage += f.metadata()?.len(), // a live writer's reservation
                Err(_) => {}                           // gone meanwhile (renamed by its writer)
            }
        }
        for object in fs::read_dir(self.root.join(OBJECTS_DIR))? {
            let object = object?.path();
            for version in read_dir_or_empty(&object) {
                let version = version.path();
                let mut entries = 0;
                for file in read_dir_or_empty(&version) {
                    let name = file.file_name();
                    if name == IN_USE_FILE {
                        continue;
                    }
                    match file.metadata() {
                        Ok(m) if m.is_file() && parse_entry_name(&name).is_some() => {
                            usage += m.len();
                            entries += 1;
                        }
                        _ => {
                            remove_any(&file.path());
                            removed += 1;
                        }
                    }
                }
                if entries == 0 && version_unused(&version) {
                    let _ = fs::remove_dir_all(&version);
                    removed += 1;
                }
            }
            let _ = fs::remove_dir(&object); // only when empty
        }
        bump(&self.counters.leftovers_removed, removed);
        lock.usage = usage;
        lock.store()
    }

    /// Register `version_dir` as in use by this cache (module docs), once.
    fn register(&self, version_dir: &Path) -> io::Result<()> {
        if self.registered.lock().unwrap_or_else(|p| p.into_inner()).contains_key(version_dir) {
            return Ok(());
        }
        let lock = self.lock()?;
        let mut registered = self.registered.lock().unwrap_or_else(|p| p.into_inner());
        if registered.contains_key(version_dir) {
            return Ok(());
        }
        let dir = self.root.join(version_dir);
        fs::create_dir_all(&dir)?;
        let in_use = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(IN_USE_FILE))?;
        // No evictor holds LOCK_EX while we hold the state lock, so this does not block.
        in_use.try_lock_shared().map_err(io::Error::from)?;
        in_use.set_modified(std::time::SystemTime::now())?;
        registered.insert(version_dir.to_path_buf(), in_use);
        drop(lock);
        Ok(())
    }

    /// The block `key` names, when its entry is whole and is exactly that block (module docs); a damaged or
    /// foreign entry is removed and counted. None is a miss.
    pub fn get(&self, key: &BlockKey) -> Option<Vec<u8>> {
        self.get_checked(key, &|_| true)
    }

    /// [`get`](Self::get), and the payload must also pass `intact`, the reader's own check of the block's content
    /// (a packed file's record CRC32Cs): the entry CRC only proves the bytes are the ones admitted, and an entry
    /// admitted by an older writer that did not check them may hold bytes damaged in transit. A payload that fails
    /// it is a damaged entry: removed, counted in `disk_corrupt_removed`, a miss.
    pub fn get_checked(&self, key: &BlockKey, intact: &dyn Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
        let version_dir = key.version_dir();
        if let Err(_e) = self.register(&version_dir) {
            bump(&self.counters.errors, 1);
        }
        let path = self.root.join(&version_dir).join(key.entry_name());
        let found = match File::open(&path) {
            Ok(file) => {
                match read_entry(&file, key).and_then(|b| if intact(&b) { Ok(b) } else { Err(EntryRead::Damaged) }) {
                    Ok(bytes) => Some(bytes),
                    Err(EntryRead::Damaged) => {
                        self.remove_damaged(&path, &file);
                        None
                    }
                    Err(EntryRead::Io) => {
                        bump(&self.counters.errors, 1);
                        None
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(_) => {
                bump(&self.counters.errors, 1);
                None
            }
        };
        bump(if found.is_some() { &self.counters.hits } else { &self.counters.misses }, 1);
        found
    }

    /// Remove the damaged entry at `path` if it is still the file `read` (module docs) and count it.
    fn remove_damaged(&self, path: &Path, read: &File) {
        bump(&self.counters.corrupt_removed, 1);
        let Ok(mut lock) = self.lock() else { return bump(&self.counters.errors, 1) };
        let (Ok(now), Ok(was)) = (fs::symlink_metadata(path), read.metadata()) else { return };
        if (now.dev(), now.ino()) == (was.dev(), was.ino()) && fs::remove_file(path).is_ok() {
            let _ = lock.sub(now.len());
        }
    }

    /// Admit `bytes` as the block `key` names, within `cache_disk_bytes` (module docs: the write protocol and the
    /// policy). The caller has checked the content (what [`get_checked`](Self::get_checked) checks): an entry
    /// is shared by every later run and process, so bytes damaged on the wire must never get here. Never fails: a block that does not fit is counted in `disk_rejected`, a failed write in
    /// `disk_errors`.
    pub fn put(&self, key: &BlockKey, bytes: &[u8]) {
        if let Err(e) = self.try_put(key, bytes) {
            let no_room = e.get_ref().is_some_and(|e| e.is::<NoRoom>());
            bump(if no_room { &self.counters.rejected } else { &self.counters.errors }, 1);
        }
    }

    /// [`put`](Self::put)'s steps; an error carrying [`NoRoom`] = no room within the bound.
    fn try_put(&self, key: &BlockKey, bytes: &[u8]) -> io::Result<()> {
        let header = EntryHeader { key: key.clone(), payload_crc: crc32c::crc32c(bytes) };
        if bytes.len() as u64 != key.len
            || key.len > MAX_PAYLOAD_BYTES
            || key.object.len() + key.version.len() > MAX_NAME_BYTES
        {
            return Err(io::Error::new(ErrorKind::InvalidInput, "not a block this cache can hold"));
        }
        let size = header.header_bytes() as u64 + key.len;
        if STATE_BYTES + size > self.limit_bytes {
            return Err(NoRoom.into());
        }
        let version_dir = key.version_dir();
        self.register(&version_dir)?;
        let path = self.root.join(&version_dir).join(key.entry_name());
        if path.exists() {
            return Ok(()); // another loader or process admitted it
        }
        let tmp = self.root.join(TMP_DIR).join(format!(
            "{}-{}.tmp",
            std::process::id(),
            TMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let file = {
            let mut lock = self.lock()?;
            if path.exists() {
                return Ok(());
            }
            if lock.usage.saturating_add(size) > self.limit_bytes {
                self.make_room(&mut lock, &version_dir, size)?;
            }
            let file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            let reserved = file.try_lock().map_err(io::Error::from).and_then(|()| file.set_len(size));
            if let Err(e) = reserved.and_then(|()| lock.add(size)) {
                remove_quietly(&tmp);
                return Err(e);
            }
            file
        };
        let written = file.write_all_at(&header.encode(), 0).and_then(|()| file.write_all_at(bytes, size - key.len));
        let mut lock = self.lock()?;
        let placed = match written {
            Ok(()) if path.exists() => Ok(false),
            Ok(()) => fs::rename(&tmp, &path).map(|()| true),
            Err(e) => Err(e),
        };
        if !matches!(placed, Ok(true)) {
            remove_quietly(&tmp);
            lock.sub(size)?;
        }
        drop(lock);
        if placed? {
            bump(&self.counters.admitted_bytes, key.len);
        }
        Ok(())
    }

    /// Free room for `size` bytes from versions no live process uses (module docs: stale versions of the same
    /// object first, whole; then other objects', least recently registered first, entry by entry), under the
    /// lock. [`NoRoom`] when that is not enough.
    fn make_room(&self, lock: &mut StateLock<'_>, own: &Path, size: u64) -> io::Result<()> {
        let objects = self.root.join(OBJECTS_DIR);
        let own_object = own.parent().map(|o| self.root.join(o));
        let mut candidates = Vec::new();
        for object in fs::read_dir(&objects)? {
            let object = object?.path();
            let stale = own_object.as_deref() == Some(object.as_path());
            for version in read_dir_or_empty(&object) {
                let path = version.path();
                let used =
                    fs::metadata(path.join(IN_USE_FILE)).and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
                candidates.push((!stale, used, path));
            }
        }
        candidates.sort();
        for (other_object, _, version) in candidates {
            if lock.usage.saturating_add(size) <= self.limit_bytes {
                break;
            }
            // LOCK_EX on in-use fails while any process (this one included) holds LOCK_SH: in use, skip it.
            let in_use = OpenOptions::new().write(true).open(version.join(IN_USE_FILE));
            let _held = match in_use {
                Ok(f) if f.try_lock().is_ok() => Some(f),
                Ok(_) => continue,
                Err(_) => None, // no user ever registered (or a half-removed version): free to go
            };
            let mut left = 0;
            for file in read_dir_or_empty(&version) {
                let name = file.file_name();
                if name == IN_USE_FILE {
                    continue;
                }
                if other_object && lock.usage.saturating_add(size) <= self.limit_bytes {
                    left += 1;
                    continue;
                }
                let len = file.metadata().map_or(0, |m| m.len());
                if fs::remove_file(file.path()).is_ok() {
                    lock.usage = lock.usage.saturating_sub(len);
                }
            }
            if left == 0 {
                let _ = fs::remove_dir_all(&version);
                if let Some(object) = version.parent() {
                    let _ = fs::remove_dir(object);
                }
            }
        }
        lock.store()?;
        if lock.usage.saturating_add(size) > self.limit_bytes {
            return Err(NoRoom.into());
        }
        Ok(())
    }

    /// The bytes of every file in the cache's folder now, counted under the state lock (tests: the bound holds).
    pub fn disk_bytes(&self) -> io::Result<u64> {
        let _lock = self.lock()?;
        let mut total = 0;
        let mut dirs = vec![self.root.clone()];
        while let Some(dir) = dirs.pop() {
            for e in fs::read_dir(&dir)? {
                let e = e?;
                let m = e.metadata()?;
                if m.is_dir() {
                    dirs.push(e.path());
                } else {
                    total += m.len();
                }
            }
        }
        Ok(total)
    }
}

/// Why an entry was not served.
enum EntryRead {
    /// Not exactly the block asked for, or damaged: to be removed.
    Damaged,
    /// The file could not be read (not its content's fault).
    Io,
}

/// The payload of the entry `file` when it is exactly `key`'s block, whole (module docs).
fn read_entry(file: &File, key: &BlockKey) -> std::result::Result<Vec<u8>, EntryRead> {
    let io = |e: io::Error| if e.kind() == ErrorKind::UnexpectedEof { EntryRead::Damaged } else { EntryRead::Io };
    let mut head = vec![0u8; FIXED_HEADER_BYTES];
    file.read_exact_at(&mut head, 0).map_err(io)?;
    let header = match EntryHeader::decode(&head) {
        Err(HeaderError::Short { need }) => {
            head.resize(need, 0); // need ≤ FIXED_HEADER_BYTES + MAX_NAME_BYTES: checked by decode
            file.read_exact_at(&mut head, 0).map_err(io)?;
            EntryHeader::decode(&head)
        }
        other => other,
    }
    .map_err(|_| EntryRead::Damaged)?;
    if header.key != *key {
        return Err(EntryRead::Damaged); // foreign: a hash collision or a file put there by hand
    }
    let at = header.header_bytes() as u64;
    if file.metadata().map_err(io)?.len() != at + key.len {
        return Err(EntryRead::Damaged);
    }
    // key.len is the caller's (the block it asked for), equal to the header's: the allocation is the block's.
    let mut payload = Vec::new();
    payload.try_reserve_exact(key.len as usize).map_err(|_| EntryRead::Io)?;
    payload.resize(key.len as usize, 0);
    file.read_exact_at(&mut payload, at).map_err(io)?;
    if crc32c::crc32c(&payload) != header.payload_crc {
        return Err(EntryRead::Damaged);
    }
    Ok(payload)
}

/// `<offset>-<len>.blk` → (offset, len).
fn parse_entry_name(name: &std::ffi::OsStr) -> Option<(u64, u64)> {
    let (offset, len) = name.to_str()?.strip_suffix(".blk")?.split_once('-')?;
    Some((offset.parse().ok()?, len.parse().ok()?))
}

/// A version folder no live process holds in use (its `in-use` LOCK_EX can be taken, or it has none).
fn version_unused(version: &Path) -> bool {
    match OpenOptions::new().write(true).open(version.join(IN_USE_FILE)) {
        Ok(f) => f.try_lock().is_ok(),
        Err(_) => true,
    }
}

fn open_state(root: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).truncate(false).read(true).write(true).open(root.join(STATE_FILE))
}

fn read_dir_or_empty(dir: &Path) -> impl Iterator<Item = fs::DirEntry> {
    fs::read_dir(dir).into_iter().flatten().flatten()
}

fn remove_quietly(path: &Path) {
    let _ = fs::remove_file(path);
}

fn remove_any(path: &Path) {
    if fs::remove_file(path).is_err() {
        let _ = fs::remove_dir_all(path);
    }
}

#[cfg(test)]
mod tests;
