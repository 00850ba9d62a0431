//! The block cache of a packed file in `partial` mode (source/packed.rs): the workers of every loader over the
//! file share it, so each block is fetched once per epoch however many workers decode its records, the blocks the
//! plan needs next are fetched in the background before a worker asks for them (read-ahead), and the blocks kept
//! are the ones needed soonest (eviction by next use, Belady's rule, never LRU).
//!
//! # What the cache knows
//! A loader starting an epoch hands the cache a [`BlockSchedule`] computed from the plan (plan/mod.rs, "Block
//! order"): this epoch's block order, the next epoch's, and how many reads this process makes of each block this
//! epoch (its engines' sequence numbers from the resume point on; sharding, filling and padding included). The
//! cache counts the reads it serves per block, so the **next use** of every block is known:
//! - a block with reads of real rows left this epoch is needed at its rank r in this epoch's order: time r;
//! - with a Mosaic (the schedule's `partner_windows`: augment/mosaic.rs draws a row's partners from its window),
//!   so is a block whose own reads are done but whose window still has reads of real rows left: the window's
//!   rows still to come read their partners from it;
//! - a block whose only reads left are the pad and filling rows' (`reads` − `real_reads`: the plan gives them
//!   the epoch's first positions, and they come last) is needed at the epoch's end: time B (B blocks);
//! - a block whose reads of this epoch are all done is needed at its rank r' in the next epoch's order: time
//!   B + r';
//! - without a schedule (no loader, or a reader outside the plan such as `trdata verify`): never (time ∞).
//!
//! A Mosaic row reads all its parts with [`BlockCache::get_outside_plan`], which leaves the counts alone; the
//! worker counts the row's planned read with [`BlockCache::count_read`] once the row is made (a replacement
//! under `skip` included, whose reads are all outside the plan): the last row of a window cannot close the
//! window (and free its blocks) before reading its partners. A sample already known bad under `skip` is not
//! read, and its planned read is counted the same way, so its window closes. Other reads the schedule did not
//! count (a non-Mosaic skip replacement) only move a block's count early: they change what is fetched when,
//! never which bytes a record has.
//!
//! # Protocol
//! One mutex guards the state: entries (`Loading`: a fetch in flight, its bytes reserved; `Ready`: the bytes in
//! an `Arc`), the failures of this epoch, the schedule with its read counts and the cursor (the furthest rank
//! asked for this epoch). A block is fetched by one task on the storage runtime's blocking pool
//! ([`crate::storage::spawn_blocking`]) that runs the fetch function given at construction (the single "fetch one
//! block" step: a disk cache wraps it) and then publishes: `Loading` → `Ready`, or → absent with the error kept
//! in `failures` (every later reader of the block gets that error, until the next schedule) — also when the fetch
//! panics. Every publish wakes the waiters (condvar `published`). A worker asking for block b:
//! - counts the read, moves the cursor to b's rank;
//! - `Ready` → clones the `Arc` (a hit: the block stays alive while the worker decodes, even if evicted);
//! - `Loading` → waits for a publish, then looks again (its wait is counted in `wait_ns`);
//! - failed this epoch → that error;
//! - absent → makes room (evicts `Ready` entries, latest next use first, until the block's bytes fit in
//!   `cache_bytes`), marks b `Loading`, starts its fetch (a miss) and waits as above. When nothing can be evicted
//!   (every byte is reserved by fetches in flight) it waits for a publish and tries again: fetches finish on
//!   their own (they never wait for a worker), so this wait ends;
//! - then starts the read-ahead: for ranks cursor+1 ..= cursor+`prefetch_blocks` (past this epoch's last rank,
//!   the next epoch's order), each block neither cached, in flight nor failed is fetched when room can be made by
//!   evicting only blocks needed later than it (admission by next use: read-ahead never pushes out a block needed
//!   sooner); the first that does not fit ends the read-ahead.
//!
//! A reader passes `stopping`, true once its loader stopped the epoch or closed; it is checked before every
//! wait, and [`BlockCache::wake_waiters`] (called by the loader after it stopped its stations) wakes every waiter
//! to check it: the readers of that loader return an error at once, never waiting out a fetch's retries and
//! backoff, while another loader's readers over the same file wait on. The fetch task itself finishes in the
//! background and publishes as any fetch does.
//!
//! Loaders over one file at once share the cache and its schedule: the last to start an epoch sets it, and the
//! others' reads count against it. That changes what is fetched when, never a record's bytes.
//!
//! Fork: the state carries the pid that made it; in another process (a forked child) it starts empty — the
//! parent's fetches never publish there.
//!
//! # Memory bound
//! `Ready` + `Loading` bytes ≤ `cache_bytes` at all times (admission evicts first, and waits rather than exceed
//! it). Besides them, a block evicted while a worker decodes from it stays alive until the worker drops it: each
//! reader holds at most one block. So block bytes alive ≤ `cache_bytes` + readers × the largest block, and block
//! buffers alive ≤ `capacity_blocks` (= `cache_bytes` / largest block, rounded down) + readers. `live_blocks`
//! counts every block buffer alive or being fetched (dropped with its last `Arc`); the tests check the bound
//! with it. Beside them the cache keeps at most [`SPARE_BLOCKS`] empty buffers of dropped blocks (next section),
//! each of at most the largest block's capacity.
//!
//! # Recycled buffers
//! A block is megabytes, and fresh memory is not free: each 4 KiB page is a fault when first written, and a
//! buffer given back to the system (glibc maps and unmaps large allocations) costs a TLB flush on every core the
//! process runs on — with 16 workers decoding, a block fetched every few milliseconds. So a dropped block's buffer
//! (its last `Arc` gone: evicted and no reader left) goes to the cache's spares, at most [`SPARE_BLOCKS`], and each
//! fetch is handed the largest spare (emptied) to write into: in steady state every fetch follows an eviction
//! and writes into pages that are already there. A buffer carries no bytes into the next block: it is emptied
//! when kept, and a fetch writes its block from the start (a pack's read resizes it to the block's length; a
//! record unit's decode appends to it).
//!
//! # Fetch counts
//! With a cache of at least `window_blocks` + `prefetch_blocks` blocks and workers inside one window, no block
//! with reads left is ever evicted (finished blocks go first), so epoch 1 fetches every block exactly once, in any
//! thread interleaving. At the end of an epoch the cache holds the finished blocks the next epoch needs first, so
//! epoch 2 fetches about B − C of them (C cached blocks), where LRU would fetch all B again.

use crate::error::{ImageError, ImageErrorKind};
use crate::sync::{Arc, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering, lock};
use std::collections::HashMap;
use std::time::Instant;

/// The fetch step: block k's bytes (a read of the pack, through a disk cache; a record format's decoded unit),
/// written into `spare` when it suits (module docs, "Recycled buffers": an empty buffer an evicted block left, its
/// pages already in memory, or a new one) or returned in a buffer of its own.
pub type FetchBlock = std::sync::Arc<dyn Fn(u32, Vec<u8>) -> Result<Vec<u8>, ImageError> + Send + Sync>;

/// Buffers of dropped blocks a cache keeps for its next fetches (module docs, "Recycled buffers").
pub const SPARE_BLOCKS: usize = 4;

/// The buffers of dropped blocks, at most [`SPARE_BLOCKS`]. (std's mutex, not crate::sync's: the pool is not
/// part of the model-checked protocol; it is locked alone, or inside the state lock when an eviction drops a
/// block, never the other way round.)
#[derive(Debug, Default)]
struct Spares(std::sync::Mutex<Vec<Vec<u8>>>);

impl Spares {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An empty buffer for the next fetch: the largest one kept, or a new one.
    fn take(&self) -> Vec<u8> {
        let mut spares = self.lock();
        let largest = (0..spares.len()).max_by_key(|&i| spares[i].capacity());
        largest.map(|i| spares.swap_remove(i)).unwrap_or_default()
    }

    /// Keep `buf` for a later fetch if fewer than [`SPARE_BLOCKS`] are kept.
    fn keep(&self, mut buf: Vec<u8>) {
        let mut spares = self.lock();
        if spares.len() < SPARE_BLOCKS && buf.capacity() > 0 {
            buf.clear();
            spares.push(buf);
        }
    }

    fn count(&self) -> usize {
        self.lock().len()
    }
}

/// What the plan says about the blocks of the epoch being read (plan/mod.rs, "Block order").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockSchedule {
    /// The epoch.
    pub epoch: u64,
    /// This epoch's block order: rank → block.
    pub order: Vec<u32>,
    /// The next epoch's block order.
    pub next_order: Vec<u32>,
    /// Reads this process makes of each block this epoch.
    pub reads: Vec<u32>,
    /// Some(W) when rows also read their window's other records outside the plan (a Mosaic's partners,
    /// augment/mosaic.rs; windows of W blocks in `order`): a block stays needed while its window has planned
    /// reads left (module docs).
    pub partner_windows: Option<u32>,
    /// The reads of `reads` made by real rows (not the pad and filling rows, which the plan reads at the epoch's
    /// end from its first positions: module docs).
    pub real_reads: Vec<u32>,
}

/// A snapshot of a cache's counters (`Loader.stats()`'s `cache_*` and `storage_wait_ns`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads served by a block cached or in flight (no fetch started for them).
    pub hits: u64,
    /// Fetches started by reads that found their block absent (a read whose block was evicted before it woke
    /// fetches it again and counts twice): `misses` + `prefetched` = blocks fetched.
    pub misses: u64,
    /// Blocks fetched ahead by the read-ahead.
    pub prefetched: u64,
    /// Blocks evicted.
    pub evictions: u64,
    /// Time readers waited for blocks still being fetched.
    pub wait_ns: u64,
    /// Bytes of the fetches in flight now.
    pub inflight_bytes: u64,
    /// Bytes of the blocks cached now.
    pub resident_bytes: u64,
}

impl CacheStats {
    /// The counters as `Loader.stats()` names them (a partial pack's and a record source's `io_stats`).
    pub fn named(&self) -> [(&'static str, u64); 7] {
        [
            ("storage_wait_ns", self.wait_ns),
            ("storage_inflight_bytes", self.inflight_bytes),
            ("cache_hits", self.hits),
            ("cache_misses", self.misses),
            ("cache_prefetched_blocks", self.prefetched),
            ("cache_evictions", self.evictions),
            ("cache_bytes", self.resident_bytes),
        ]
    }
}

/// One block's bytes, counted in its cache's `live_blocks` until dropped; its buffer then goes to the cache's
/// spares.
#[derive(Debug)]
pub struct BlockBytes {
    bytes: Vec<u8>,
    live: Arc<AtomicUsize>,
    spares: std::sync::Arc<Spares>,
}

impl BlockBytes {
    /// The block's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for BlockBytes {
    fn drop(&mut self) {
        self.spares.keep(std::mem::take(&mut self.bytes));
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
enum Entry {
    Loading,
    Ready(Arc<BlockBytes>),
}

/// The schedule with what the cache derives from it.
#[derive(Debug)]
struct Plan {
    s: BlockSchedule,
    rank: Vec<u32>,
    next_rank: Vec<u32>,
    done: Vec<u32>,
    cursor: Option<u64>,
    /// With `partner_windows`: each block's window, and each window's planned reads left.
    window: Vec<u32>,
    window_left: Vec<u64>,
}

impl Plan {
    fn new(s: BlockSchedule) -> Self {
        let inverse = |order: &[u32]| {
            let mut r = vec![u32::MAX; order.len()];
            for (rank, &b) in order.iter().enumerate() {
                r[b as usize] = rank as u32;
            }
            r
        };
        let (rank, next_rank) = (inverse(&s.order), inverse(&s.next_order));
        let done = vec![0; s.reads.len()];
        let (mut window, mut window_left) = (Vec::new(), Vec::new());
        if let Some(w) = s.partner_windows {
            let w = w.max(1) as usize;
            window = rank.iter().map(|&r| (r as usize / w) as u32).collect();
            window_left = vec![0; s.order.len().div_ceil(w)];
            for (b, &reads) in s.real_reads.iter().enumerate() {
                // only real rows keep a window open (pad and filling rows read window 0 at the epoch's end)
                if let Some(left) = window.get(b).and_then(|&k| window_left.get_mut(k as usize)) {
                    *left += u64::from(reads);
                }
            }
        }
        Self { s, rank, next_rank, done, cursor: None, window, window_left }
    }

    /// Count one planned read of block `b`: its reads done, its window's reads left, the cursor.
    fn count(&mut self, b: u32) {
        let Some(d) = self.done.get_mut(b as usize) else { return };
        if self.s.real_reads.get(b as usize).is_some_and(|&real| *d < real)
            && let Some(left) = self.window.get(b as usize).and_then(|&k| self.window_left.get_mut(k as usize))
        {
            *left = left.saturating_sub(1);
        }
        *d += 1;
        let r = u64::from(self.rank[b as usize]);
        self.cursor = Some(self.cursor.map_or(r, |c| c.max(r)));
    }

    /// Block `b`'s window still has planned reads left (only with `partner_windows`).
    fn window_open(&self, b: usize) -> bool {
        self.window.get(b).is_some_and(|&k| self.window_left[k as usize] > 0)
    }

    /// When block `b` is needed next (module docs); u64::MAX when unknown.
    fn next_use(&self, b: u32) -> u64 {
        let b = b as usize;
        let blocks = self.s.order.len() as u64;
        match (self.rank.get(b), self.next_rank.get(b)) {
            (Some(&r), _) if self.s.real_reads.get(b).is_some_and(|&n| self.done[b] < n) || self.window_open(b) => {
                u64::from(r)
            }
            (Some(_), _) if self.done[b] < self.s.reads[b] => blocks,
            (_, Some(&r)) if r != u32::MAX => blocks + u64::from(r),
            _ => u64::MAX,
        }
    }

    /// The block at rank `r` of this epoch's order, continued by the next epoch's.
    fn block_at(&self, r: u64) -> Option<u32> {
        let blocks = self.s.order.len() as u64;
        if r < blocks { Some(self.s.order[r as usize]) } else { self.s.next_order.get((r - blocks) as usize).copied() }
    }
}

#[derive(Debug)]
struct State {
    pid: u32,
    entries: HashMap<u32, Entry>,
    failures: HashMap<u32, ImageError>,
    /// Bytes of Ready + Loading entries.
    used_bytes: u64,
    inflight_bytes: u64,
    plan: Option<Plan>,
    stats: CacheStats,
}

impl State {
    fn empty() -> Self {
        Self {
            pid: std::process::id(),
            entries: HashMap::new(),
            failures: HashMap::new(),
            used_bytes: 0,
            inflight_bytes: 0,
            plan: None,
            stats: CacheStats::default(),
        }
    }

    fn next_use(&self, b: u32) -> u64 {
        self.plan.as_ref().map_or(u64::MAX, |p| p.next_use(b))
    }
}

#[derive(Debug)]
struct Shared {
    cache_bytes: u64,
    prefetch_blocks: u32,
    block_bytes: Vec<u64>,
    largest_block: u64,
    state: Mutex<State>,
    published: Condvar,
    live: Arc<AtomicUsize>,
    peak_live: AtomicUsize,
    spares: std::sync::Arc<Spares>,
}

/// A bounded, plan-aware cache of whole blocks shared by threads (see the module docs for the protocol and the
/// bound).
pub struct BlockCache {
    shared: std::sync::Arc<Shared>,
    fetch: FetchBlock,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache").field("shared", &self.shared).finish_non_exhaustive()
    }
}

impl BlockCache {
    /// An empty cache of at most `cache_bytes` bytes of blocks whose sizes are `block_bytes` (each at most
    /// `cache_bytes`: the caller checks the minimum), reading `prefetch_blocks` ahead, fetching with `fetch`.
    pub fn new(cache_bytes: u64, prefetch_blocks: u32, block_bytes: Vec<u64>, fetch: FetchBlock) -> Self {
        let largest_block = block_bytes.iter().copied().max().unwrap_or(0).max(1);
        Self {
            shared: std::sync::Arc::new(Shared {
                cache_bytes,
                prefetch_blocks,
                block_bytes,
                largest_block,
                state: Mutex::new(State::empty()),
                published: Condvar::new(),
                live: Arc::new(AtomicUsize::new(0)),
                peak_live: AtomicUsize::new(0),
                spares: std::sync::Arc::default(),
            }),
            fetch,
        }
    }

    /// The byte bound.
    pub fn cache_bytes(&self) -> u64 {
        self.shared.cache_bytes
    }

    /// Blocks of the largest size that fit in the byte bound.
    pub fn capacity_blocks(&self) -> u64 {
        self.shared.cache_bytes / self.shared.largest_block
    }

    /// Blocks read ahead of the furthest block asked for.
    pub fn prefetch_blocks(&self) -> u32 {
        self.shared.prefetch_blocks
    }

    /// Block buffers alive now (cached, being fetched, or held by a reader).
    pub fn live_blocks(&self) -> usize {
        self.shared.live.load(Ordering::Relaxed)
    }

    /// The most block buffers that were alive at once.
    pub fn peak_live_blocks(&self) -> usize {
        self.shared.peak_live.load(Ordering::Relaxed)
    }

    /// Buffers of dropped blocks kept for the next fetches (at most [`SPARE_BLOCKS`]).
    pub fn spare_blocks(&self) -> usize {
        self.shared.spares.count()
    }

    /// The counters now.
    pub fn stats(&self) -> CacheStats {
        let st = self.shared.lock_state();
        CacheStats { inflight_bytes: st.inflight_bytes, resident_bytes: st.used_bytes - st.inflight_bytes, ..st.stats }
    }

    /// Follow `schedule` from now on (a loader starting an epoch): read counts start at zero, the failures of
    /// the previous epoch are forgotten.
    pub fn set_schedule(&self, schedule: BlockSchedule) {
        let mut st = self.shared.lock_state();
        st.plan = Some(Plan::new(schedule));
        st.failures.clear();
    }

    /// Wake every reader waiting for a block, to check its `stopping` (module docs).
    pub fn wake_waiters(&self) {
        drop(self.shared.lock_state()); // a reader between its check and its wait holds the lock: none is missed
        self.shared.published.notify_all();
    }

    /// Block `block` for one of the plan's reads: cached, or fetched (module docs, "Protocol"); then the
    /// read-ahead. A wait ends with an error once `stopping()` is true.
    pub fn get(&self, block: u32, stopping: &dyn Fn() -> bool) -> Result<Arc<BlockBytes>, ImageError> {
        self.read(block, true, stopping)
    }

    /// [`Self::get`] for a read the schedule does not count here: a Mosaic's parts (module docs). The block's
    /// count and the cursor stay as they are, so the reads the plan makes still find the block needed.
    pub fn get_outside_plan(&self, block: u32, stopping: &dyn Fn() -> bool) -> Result<Arc<BlockBytes>, ImageError> {
        self.read(block, false, stopping)
    }

    /// Count one of the plan's reads of `block` made with [`Self::get_outside_plan`] (a Mosaic row's own record,
    /// counted once all its parts are read: module docs), then read ahead.
    pub fn count_read(&self, block: u32) {
        let mut st = self.shared.lock_state();
        if let Some(p) = &mut st.plan {
            p.count(block);
        }
        self.read_ahead(&mut st);
    }

    fn read(&self, block: u32, counted: bool, stopping: &dyn Fn() -> bool) -> Result<Arc<BlockBytes>, ImageError> {
        let sh = &*self.shared;
        let mut st = sh.lock_state();
        if counted && let Some(p) = &mut st.plan {
            p.count(block);
        }
        let mut waited: Option<Instant> = None;
        let mut fetched = false;
        let result = loop {
            if let Some(e) = st.failures.get(&block) {
                break Err(e.clone());
            }
            match st.entries.get(&block) {
                Some(Entry::Ready(b)) => {
                    let b = Arc::clone(b);
                    if !fetched {
                        st.stats.hits += 1;
                    }
                    break Ok(b);
                }
                Some(Entry::Loading) => {}
                None => {
                    let size = sh.block_bytes[block as usize];
                    if sh.make_room(&mut st, size, None) {
                        // every fetch a read starts is a miss, also a second one when the block it waited for
                        // was evicted before it woke: misses + prefetched = fetches
                        st.stats.misses += 1;
                        fetched = true;
                        self.start_fetch(&mut st, block);
                    }
                }
            }
            if stopping() {
                break Err(ImageError::new(
                    ImageErrorKind::Io,
                    format!("block {block}: the loader stopped while the block was being read"),
                ));
            }
            waited.get_or_insert_with(Instant::now);
            st = sh.published.wait(st).unwrap_or_else(|p| p.into_inner());
        };
        if let Some(t0) = waited {
            st.stats.wait_ns += t0.elapsed().as_nanos() as u64;
        }
        if result.is_ok() {
            self.read_ahead(&mut st);
        }
        result
    }

    /// Start the fetches of the blocks after the cursor (module docs).
    fn read_ahead(&self, st: &mut MutexGuard<'_, State>) {
        let sh = &*self.shared;
        let Some(cursor) = st.plan.as_ref().and_then(|p| p.cursor) else { return };
        for r in cursor + 1..=cursor + u64::from(sh.prefetch_blocks) {
            let Some(b) = st.plan.as_ref().and_then(|p| p.block_at(r)) else { return };
            if st.entries.contains_key(&b) || st.failures.contains_key(&b) {
                continue;
            }
            let when = st.next_use(b);
            if !sh.make_room(st, sh.block_bytes[b as usize], Some(when)) {
                return;
            }
            st.stats.prefetched += 1;
            self.start_fetch(st, b);
        }
    }

    /// Mark `block` Loading (its bytes reserved: room was made) and start its fetch as a task.
    fn start_fetch(&self, st: &mut State, block: u32) {
        let sh = &self.shared;
        let size = sh.block_bytes[block as usize];
        st.entries.insert(block, Entry::Loading);
        st.used_bytes += size;
        st.inflight_bytes += size;
        let now = sh.live.fetch_add(1, Ordering::Relaxed) + 1;
        sh.peak_live.fetch_max(now, Ordering::Relaxed);
        let (task_shared, fetch) = (std::sync::Arc::clone(sh), std::sync::Arc::clone(&self.fetch));
        let pid = st.pid;
        let started = crate::storage::spawn_blocking(move || {
            let got =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fetch(block, task_shared.spares.take())))
                    .unwrap_or_else(|_| {
                        Err(ImageError::new(ImageErrorKind::Io, format!("block {block}: the read panicked")))
                    });
            task_shared.publish(pid, block, got);
        });
        if let Err(m) = started {
            Shared::settle(st, sh, block, Err(ImageError::new(ImageErrorKind::Io, format!("block {block}: {m}"))));
        }
    }
}

impl Shared {
    /// The state, fresh in a process other than the one that made it (module docs, "Fork").
    fn lock_state(&self) -> MutexGuard<'_, State> {
        let mut st = lock(&self.state);
        if st.pid != std::process::id() {
            let stats = st.stats;
            *st = State { stats, ..State::empty() };
        }
        st
    }

    /// Evict Ready entries, latest next use first, until `size` more bytes fit; with `before` only entries needed
    /// later than `before`. False when they cannot be made to fit (nothing is evicted then).
    fn make_room(&self, st: &mut State, size: u64, before: Option<u64>) -> bool {
        let mut free = self.cache_bytes.saturating_sub(st.used_bytes);
        if free >= size {
            return true;
        }
        let mut victims: Vec<(u64, u32)> = st
            .entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Ready(_)))
            .map(|(&b, _)| (st.next_use(b), b))
            .filter(|&(t, _)| before.is_none_or(|w| t > w))
            .collect();
        victims.sort_unstable_by(|a, b| b.cmp(a));
        let mut n = 0;
        while free < size && n < victims.len() {
            free += self.block_bytes[victims[n].1 as usize];
            n += 1;
        }
        if free < size {
            return false;
        }
        for &(_, b) in &victims[..n] {
            st.entries.remove(&b);
            st.used_bytes -= self.block_bytes[b as usize];
            st.stats.evictions += 1;
        }
        true
    }

    /// A fetch task's end: publish its bytes or its error, wake the waiters.
    fn publish(&self, pid: u32, block: u32, got: Result<Vec<u8>, ImageError>) {
        let mut st = self.lock_state();
        if st.pid == pid {
            Self::settle(&mut st, self, block, got);
        }
        drop(st);
        self.published.notify_all();
    }

    fn settle(st: &mut State, sh: &Shared, block: u32, got: Result<Vec<u8>, ImageError>) {
        let size = sh.block_bytes[block as usize];
        st.inflight_bytes -= size;
        match got {
            Ok(bytes) => {
                let b = Arc::new(BlockBytes {
                    bytes,
                    live: Arc::clone(&sh.live),
                    spares: std::sync::Arc::clone(&sh.spares),
                });
                st.entries.insert(block, Entry::Ready(b));
            }
            Err(e) => {
                st.entries.remove(&block);
                st.used_bytes -= size;
                sh.live.fetch_sub(1, Ordering::Relaxed);
                st.failures.insert(block, e);
            }
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    const SIZE: u64 = 64;

    /// Block b's bytes, appended to `buf` as a record unit's decode appends (a spare that kept bytes would show).
    fn bytes_of(b: u32, mut buf: Vec<u8>) -> Vec<u8> {
        buf.extend(std::iter::repeat_n(b as u8, SIZE as usize));
        buf
    }

    /// A cache of `blocks` blocks of SIZE bytes holding `cached` of them, counting its fetches per block, and in
    /// one more slot (`recycled`) the fetches handed a recycled buffer.
    fn cache(blocks: usize, cached: u64, prefetch: u32) -> (BlockCache, std::sync::Arc<Vec<AtomicU64>>) {
        let calls = std::sync::Arc::new((0..=blocks).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        let c = std::sync::Arc::clone(&calls);
        let fetch: FetchBlock = std::sync::Arc::new(move |b, spare| {
            c[b as usize].fetch_add(1, Ordering::Relaxed);
            if spare.capacity() > 0 {
                c[blocks].fetch_add(1, Ordering::Relaxed);
            }
            Ok(bytes_of(b, spare))
        });
        (BlockCache::new(cached * SIZE, prefetch, vec![SIZE; blocks], fetch), calls)
    }

    /// Fetches counted by [`cache`] (its last slot is `recycled`).
    fn total(calls: &[AtomicU64]) -> u64 {
        calls[..calls.len() - 1].iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Fetches [`cache`] saw handed a recycled buffer.
    fn recycled(calls: &[AtomicU64]) -> u64 {
        calls[calls.len() - 1].load(Ordering::Relaxed)
    }

    fn schedule(epoch: u64, order: Vec<u32>, next_order: Vec<u32>, reads: u32) -> BlockSchedule {
        let n = order.len();
        BlockSchedule {
            epoch,
            order,
            next_order,
            reads: vec![reads; n],
            partner_windows: None,
            real_reads: vec![reads; n],
        }
    }

    /// A shuffled order of `n` blocks for `epoch` (a fixed LCG: the tests' own, not the plan's).
    fn order(n: u32, epoch: u64) -> Vec<u32> {
        let mut o: Vec<u32> = (0..n).collect();
        let mut x = epoch.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        for i in (1..o.len()).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            o.swap(i, (x >> 33) as usize % (i + 1));
        }
        o
    }

    #[test]
    fn hits_do_not_refetch_and_without_a_schedule_nothing_is_read_ahead() {
        let (c, calls) = cache(8, 2, 4);
        assert_eq!(c.get(5, &|| false).unwrap().bytes()[0], 5);
        assert_eq!(c.get(5, &|| false).unwrap().bytes()[0], 5);
        c.get(6, &|| false).unwrap();
        c.get(7, &|| false).unwrap(); // evicts one of 5, 6
        assert_eq!(total(&calls), 3);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.prefetched, s.evictions), (1, 3, 0, 1));
        assert_eq!((s.resident_bytes, s.inflight_bytes), (2 * SIZE, 0));
        assert!(c.live_blocks() <= 2);
    }

    #[test]
    fn the_block_needed_furthest_ahead_is_evicted_and_finished_blocks_go_to_the_next_epochs_rank() {
        // Order 0..6, one read per block; next epoch's order is reversed. Cache of 3, no read-ahead.
        let (c, calls) = cache(6, 3, 0);
        c.set_schedule(schedule(0, (0..6).collect(), (0..6).rev().collect(), 1));
        for b in 0..6 {
            c.get(b, &|| false).unwrap();
        }
        assert_eq!(total(&calls), 6);
        // Blocks 5, 4, 3 were needed first in the next epoch: they stayed (0, 1, 2 were evicted).
        c.set_schedule(schedule(1, (0..6).rev().collect(), (0..6).collect(), 1));
        for b in [5, 4, 3] {
            c.get(b, &|| false).unwrap();
        }
        assert_eq!(total(&calls), 6, "the next epoch's first blocks were cached");
        // With two reads per block, a block read once stays (needed now), the block needed latest goes.
        let (c, calls) = cache(4, 2, 0);
        c.set_schedule(schedule(0, vec![0, 1, 2, 3], vec![0, 1, 2, 3], 2));
        c.get(0, &|| false).unwrap();
        c.get(1, &|| false).unwrap();
        c.get(0, &|| false).unwrap(); // 0 finished: next use 4 + 0; 1 unfinished: next use 1
        c.get(2, &|| false).unwrap(); // evicts 0 (next use 4), keeps 1
        c.get(1, &|| false).unwrap();
        assert_eq!(total(&calls), 3);
    }

    #[test]
    fn a_read_outside_the_plan_leaves_the_blocks_count_so_its_planned_read_still_finds_it() {
        // Two planned reads per block, cache of 2, no read-ahead: 0, 1, a partner's read of 0, 2, then 0's second
        // planned read. Uncounted, 0 is still unfinished (next use 0) when 2 is fetched, so 1 (next use 1) goes
        // and 0's planned read hits; counted, 0 looks finished (next use 4 + 0), goes, and is fetched again.
        for (counted, fetches_of_0) in [(false, 1), (true, 2)] {
            let (c, calls) = cache(4, 2, 0);
            c.set_schedule(schedule(0, vec![0, 1, 2, 3], vec![0, 1, 2, 3], 2));
            c.get(0, &|| false).unwrap();
            c.get(1, &|| false).unwrap();
            if counted { c.get(0, &|| false) } else { c.get_outside_plan(0, &|| false) }.unwrap();
            c.get(2, &|| false).unwrap();
            c.get(0, &|| false).unwrap();
            assert_eq!(calls[0].load(Ordering::Relaxed), fetches_of_0, "counted: {counted}");
        }
    }

    #[test]
    fn a_block_whose_only_reads_left_are_pad_rows_is_needed_at_the_epochs_end() {
        // Blocks 0 and 1 are each read twice, but block 0's second read is a pad row's (the epoch's end): after
        // one read of each, fetching 2 evicts 0, not 1, whose second (real) read comes next and hits.
        let (c, calls) = cache(4, 2, 0);
        let s = BlockSchedule { reads: vec![2, 2, 1, 1], ..schedule(0, vec![0, 1, 2, 3], vec![0, 1, 2, 3], 1) };
        c.set_schedule(BlockSchedule { real_reads: vec![1, 2, 1, 1], ..s });
        for b in [0, 1, 2, 1] {
            c.get(b, &|| false).unwrap();
        }
        assert_eq!((calls[0].load(Ordering::Relaxed), calls[1].load(Ordering::Relaxed)), (1, 1));
        c.get(3, &|| false).unwrap();
        c.get(0, &|| false).unwrap(); // the pad row, last: fetched again
        assert_eq!(calls[0].load(Ordering::Relaxed), 2);
    }

    #[test]
    fn with_partner_windows_a_window_stays_cached_until_its_last_row_has_read_its_partners() {
        // Mosaic rows (parts read outside the plan, the row counted after): order 0..6 in windows of 2, two rows
        // per block, a cache of 3 reading 1 ahead. Window 0's rows run while another worker starts window 1;
        // the last row of window 0 then reads block 0 as a partner. With `partner_windows` block 0 (its own rows
        // done) stays needed while its window has a row left, so the read-ahead of block 3 waits and the partner
        // read hits; without, block 0 looks needed next epoch only, makes room for block 3 and is fetched again.
        for (windows, fetches_of_0) in [(Some(2), 1), (None, 2)] {
            let (c, calls) = cache(6, 3, 1);
            let s = schedule(0, (0..6).collect(), (0..6).collect(), 2);
            c.set_schedule(BlockSchedule { partner_windows: windows, ..s });
            let row = |own: u32, partner: u32| {
                c.get_outside_plan(own, &|| false).unwrap();
                c.get_outside_plan(partner, &|| false).unwrap();
                c.count_read(own);
            };
            row(0, 1);
            row(0, 1);
            row(1, 0); // cursor 1: block 2 read ahead
            wait_for(|| calls[2].load(Ordering::Relaxed) == 1 && c.stats().inflight_bytes == 0);
            c.get_outside_plan(2, &|| false).unwrap(); // window 1's first row, on another worker
            c.count_read(2); // cursor 2: block 3 read ahead if room can be made
            wait_for(|| c.stats().inflight_bytes == 0);
            row(1, 0); // window 0's last row
            assert_eq!(calls[0].load(Ordering::Relaxed), fetches_of_0, "partner_windows {windows:?}");
        }
    }

    #[test]
    fn read_ahead_follows_the_order_into_the_next_epoch_and_never_evicts_a_sooner_block() {
        let (c, calls) = cache(6, 4, 2);
        c.set_schedule(schedule(0, vec![3, 1, 4, 0, 5, 2], vec![2, 0, 1, 3, 4, 5], 1));
        c.get(3, &|| false).unwrap(); // rank 0: 1 and 4 fetched ahead
        wait_for(|| total(&calls) == 3);
        assert_eq!(calls[1].load(Ordering::Relaxed) + calls[4].load(Ordering::Relaxed), 2);
        c.get(1, &|| false).unwrap(); // a hit (or a join); 0 ahead
        c.get(4, &|| false).unwrap();
        c.get(0, &|| false).unwrap();
        c.get(5, &|| false).unwrap(); // rank 4: ahead = 2 (rank 5), then the next epoch's first block, 2 again
        c.get(2, &|| false).unwrap();
        wait_for(|| c.stats().inflight_bytes == 0);
        assert_eq!(total(&calls), 6, "every block once");
        let s = c.stats();
        assert_eq!(s.misses, 1, "{s:?}");
        assert_eq!(s.hits, 5);
        assert_eq!(s.prefetched, 5);
    }

    fn wait_for(done: impl Fn() -> bool) {
        // Fetch tasks run on the runtime: poll their effect with a generous bound, never a timed assertion.
        for _ in 0..2000 {
            if done() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("condition not reached in 10 s");
    }

    #[test]
    fn a_failed_fetch_is_every_readers_error_until_the_next_schedule_and_a_panic_is_one_too() {
        let fail = std::sync::Arc::new(AtomicU64::new(1));
        let f = std::sync::Arc::clone(&fail);
        let fetch: FetchBlock = std::sync::Arc::new(move |b, spare| match (b, f.load(Ordering::Relaxed)) {
            (1, 1) => Err(ImageError::new(ImageErrorKind::Io, "boom")),
            (2, 1) => panic!("fetch panic"),
            _ => Ok(bytes_of(b, spare)),
        });
        let c = BlockCache::new(4 * SIZE, 0, vec![SIZE; 4], fetch);
        assert_eq!(c.get(1, &|| false).unwrap_err().message, "boom");
        assert!(c.get(2, &|| false).unwrap_err().message.contains("panicked"));
        fail.store(0, Ordering::Relaxed);
        assert_eq!(c.get(1, &|| false).unwrap_err().message, "boom", "kept for the epoch");
        c.set_schedule(schedule(1, vec![0, 1, 2, 3], vec![0, 1, 2, 3], 1));
        assert_eq!(c.get(1, &|| false).unwrap().bytes()[0], 1);
        assert_eq!(c.get(2, &|| false).unwrap().bytes()[0], 2);
        assert_eq!(c.live_blocks(), 2);
    }

    #[test]
    fn a_stopping_reader_is_woken_from_a_slow_fetch_and_others_wait_on() {
        let gate = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let g = std::sync::Arc::clone(&gate);
        let fetch: FetchBlock = std::sync::Arc::new(move |b, spare| {
            let (m, cv) = &*g;
            let mut open = m.lock().unwrap();
            while !*open {
                open = cv.wait(open).unwrap();
            }
            Ok(bytes_of(b, spare))
        });
        let c = std::sync::Arc::new(BlockCache::new(4 * SIZE, 0, vec![SIZE; 4], fetch));
        let c2 = std::sync::Arc::clone(&c);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = std::sync::Arc::clone(&stop);
        let reader = std::thread::spawn(move || c2.get(0, &|| s2.load(Ordering::Relaxed)));
        wait_for(|| c.stats().inflight_bytes == SIZE);
        c.wake_waiters(); // not stopping: the reader waits on
        stop.store(true, Ordering::Relaxed);
        c.wake_waiters();
        let e = reader.join().unwrap().unwrap_err();
        assert!(e.message.contains("stopped"), "{}", e.message);
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        wait_for(|| c.stats().inflight_bytes == 0);
        assert_eq!(c.get(0, &|| false).unwrap().bytes()[0], 0, "the background fetch published its block");
    }

    /// Many real threads reading every block of several epochs in the schedule's order, windows of blocks
    /// shuffled among the threads: every answer has the right bytes, buffers alive stay within capacity + readers,
    /// and the fetch counts keep the bounds that hold in any interleaving: the first epoch fetches each block
    /// once, every later epoch at most B − C + window + prefetch + threads.
    #[test]
    fn many_threads_keep_the_bounds_in_any_interleaving() {
        let (blocks, window, prefetch, threads, reads) = (48u32, 4u32, 4u32, 8usize, 8u32);
        for cached in [12u64, 24, 48] {
            let (c, calls) = cache(blocks as usize, cached, prefetch);
            let c = std::sync::Arc::new(c);
            let mut before = 0;
            for epoch in 0..3u64 {
                let ord = order(blocks, epoch);
                c.set_schedule(schedule(epoch, ord.clone(), order(blocks, epoch + 1), reads));
                // The plan's positions: window by window, each block `reads` times, shuffled within the window. The
                // threads meet at the end of each window (as the loader's station keeps workers within a few
                // batches of each other); inside a window any interleaving goes.
                let mut windows = Vec::new();
                for (w, win) in ord.chunks(window as usize).enumerate() {
                    let p: Vec<u32> = win.iter().flat_map(|&b| std::iter::repeat_n(b, reads as usize)).collect();
                    let shuffle = order(p.len() as u32, 100 + w as u64 + 1000 * epoch);
                    windows.push(shuffle.iter().map(|&k| p[k as usize]).collect::<Vec<u32>>());
                }
                let windows = std::sync::Arc::new(windows);
                let barrier = std::sync::Arc::new(std::sync::Barrier::new(threads));
                let handles: Vec<_> = (0..threads)
                    .map(|t| {
                        let (c, windows) = (std::sync::Arc::clone(&c), std::sync::Arc::clone(&windows));
                        let barrier = std::sync::Arc::clone(&barrier);
                        std::thread::spawn(move || {
                            for positions in windows.iter() {
                                for &b in positions.iter().skip(t).step_by(threads) {
                                    let got = c.get(b, &|| false).unwrap();
                                    assert_eq!(got.bytes().len(), SIZE as usize, "a recycled buffer kept bytes");
                                    assert!(got.bytes().iter().all(|&x| x == b as u8));
                                    assert!(c.live_blocks() as u64 <= c.capacity_blocks() + threads as u64);
                                }
                                barrier.wait();
                            }
                        })
                    })
                    .collect();
                for h in handles {
                    h.join().unwrap();
                }
                wait_for(|| c.stats().inflight_bytes == 0);
                let fetched = total(&calls) - before;
                before = total(&calls);
                let bound = u64::from(blocks).saturating_sub(cached) + u64::from(window + prefetch) + threads as u64;
                if epoch == 0 {
                    assert_eq!(fetched, u64::from(blocks), "cache {cached}: epoch 0 fetches each block once");
                } else {
                    assert!(
                        fetched <= bound.min(u64::from(blocks)),
                        "cache {cached}, epoch {epoch}: {fetched} > {bound}"
                    );
                }
            }
            assert!(c.peak_live_blocks() as u64 <= c.capacity_blocks() + threads as u64);
            assert!(c.stats().resident_bytes <= c.cache_bytes());
            // Evicted blocks' buffers were fetched into (every answer above had its own bytes only); a cache
            // that holds every block evicts none. Spares stay at most SPARE_BLOCKS.
            assert_eq!(recycled(&calls) > 0, cached < u64::from(blocks), "cache {cached}");
            assert!(c.spare_blocks() <= SPARE_BLOCKS);
        }
    }

    /// A dropped block's buffer is the next fetch's (emptied), a block a reader still holds is not recycled
    /// under it, and the spares stay at most SPARE_BLOCKS.
    #[test]
    fn an_evicted_blocks_buffer_is_the_next_fetchs_once_no_reader_holds_it() {
        let given = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let g = std::sync::Arc::clone(&given);
        let fetch: FetchBlock = std::sync::Arc::new(move |b, spare: Vec<u8>| {
            g.lock().unwrap().push((b, spare.len(), spare.capacity(), spare.as_ptr() as usize));
            Ok(bytes_of(b, spare))
        });
        let one_block = SIZE;
        let c = BlockCache::new(one_block, 0, vec![SIZE; 16], fetch);
        let at = |b: &Arc<BlockBytes>| b.bytes().as_ptr() as usize;
        let zero = at(&c.get(0, &|| false).unwrap());
        let one = c.get(1, &|| false).unwrap(); // evicts 0, nobody holds it: its buffer is 1's
        assert_eq!((at(&one), one.bytes()), (zero, &[1u8; SIZE as usize][..]));
        let two = c.get(2, &|| false).unwrap(); // evicts 1 while `one` is held: 2 gets a new buffer
        assert_ne!(at(&two), zero);
        assert_eq!(one.bytes(), &[1u8; SIZE as usize][..], "a held block is never written under its reader");
        assert_eq!(c.spare_blocks(), 0);
        drop(one); // now 1's buffer is a spare
        assert_eq!(c.spare_blocks(), 1);
        drop(two);
        let three = c.get(3, &|| false).unwrap(); // evicts 2 (a second spare), takes one of the two
        assert_eq!((c.spare_blocks(), three.bytes()), (1, &[3u8; SIZE as usize][..]));
        let given = given.lock().unwrap().clone();
        assert_eq!(
            given.iter().map(|g| (g.0, g.1, g.2 > 0)).collect::<Vec<_>>(),
            [(0, 0, false), (1, 0, true), (2, 0, false), (3, 0, true)]
        );
        assert_eq!(given[1].3, zero);
        // Many blocks dropped at once: SPARE_BLOCKS of them are kept.
        let held: Vec<_> = (4..12).map(|b| c.get_outside_plan(b, &|| false).unwrap()).collect();
        drop(three);
        drop(held);
        assert_eq!(c.spare_blocks(), SPARE_BLOCKS);
    }
}
