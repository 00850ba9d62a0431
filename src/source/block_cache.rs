//! The block cache of a packed file in `partial` mode (source/packed.rs): the workers of every loader over the
//! file share it, so each block is read once per window however many workers decode its records.
//!
//! Protocol. An entry is `Loading` (one worker is reading the block, outside the lock) or `Ready` (the bytes, in
//! an `Arc`). A worker asking for block b:
//! - `Ready` → clones the `Arc` (the block stays alive while the worker decodes from it, even if evicted);
//! - `Loading` → waits on the condvar until the loader publishes (the loader always ends the `Loading` state,
//!   also when it fails or panics: [`LoadingGuard`]), then looks again;
//! - absent → evicts `Ready` entries while the cache holds `capacity` entries, marks b `Loading`, reads it
//!   without the lock, publishes `Ready` (or removes the entry on error; waiters then load it themselves and
//!   see their own error) and wakes the waiters.
//!
//! Eviction takes the `Ready` block that is **furthest behind**: the smallest order key, (epoch, rank of the
//! block in that epoch's block order), kept as the largest key it was asked for with. Blocks of a finished window
//! go first; a block of the next window (asked for by a worker running ahead) stays.
//!
//! Memory bound: at most `capacity` Ready entries once a block is published (the publish evicts back down to it;
//! only while every entry is `Loading` can a new entry go past it, and a `Loading` entry has no bytes yet), plus
//! blocks evicted but still held by a worker (each worker holds at most one block while it decodes). So block
//! buffers alive ≤ `capacity + readers`, each at most max(block_bytes, largest record) bytes.
//! `live_blocks` counts every block buffer alive (dropped with its last `Arc`); the tests check the bound with it.

use crate::error::ImageError;
use crate::sync::{Arc, AtomicUsize, Condvar, Mutex, Ordering, lock};
use std::collections::HashMap;

/// Order key of a block request: (epoch, rank of the block in the epoch's block order). Smaller = further behind.
pub type OrderKey = (u64, u32);

/// One block's bytes, counted in its cache's `live_blocks` until dropped.
#[derive(Debug)]
pub struct BlockBytes {
    bytes: Box<[u8]>,
    live: Arc<AtomicUsize>,
}

impl BlockBytes {
    /// The block's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for BlockBytes {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
enum Entry {
    Loading,
    Ready { block: Arc<BlockBytes>, key: OrderKey },
}

/// A bounded cache of whole blocks shared by threads (see the module docs for the protocol and the bound).
#[derive(Debug)]
pub struct BlockCache {
    capacity: usize,
    entries: Mutex<HashMap<u32, Entry>>,
    published: Condvar,
    live: Arc<AtomicUsize>,
    peak_live: AtomicUsize,
    reads: AtomicUsize,
}

/// Ends a `Loading` entry whatever happens to its loader (error, panic): waiters never wait for nobody.
struct LoadingGuard<'a> {
    cache: &'a BlockCache,
    block: u32,
    armed: bool,
}

impl Drop for LoadingGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            lock(&self.cache.entries).remove(&self.block);
            self.cache.published.notify_all();
        }
    }
}

impl BlockCache {
    /// An empty cache of at most `capacity` (≥ 1) entries.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            entries: Mutex::new(HashMap::new()),
            published: Condvar::new(),
            live: Arc::new(AtomicUsize::new(0)),
            peak_live: AtomicUsize::new(0),
            reads: AtomicUsize::new(0),
        }
    }

    /// The entry bound.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Block buffers alive now (cached or held by a reader).
    pub fn live_blocks(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// The most block buffers that were alive at once.
    pub fn peak_live_blocks(&self) -> usize {
        self.peak_live.load(Ordering::Relaxed)
    }

    /// Blocks read from the file so far (misses).
    pub fn reads(&self) -> usize {
        self.reads.load(Ordering::Relaxed)
    }

    /// Block `block`, read by `load` if it is not cached; `key` says how far along the reader is (eviction).
    pub fn get(
        &self,
        block: u32,
        key: OrderKey,
        load: impl FnOnce() -> Result<Box<[u8]>, ImageError>,
    ) -> Result<Arc<BlockBytes>, ImageError> {
        let mut entries = lock(&self.entries);
        loop {
            match entries.get_mut(&block) {
                Some(Entry::Ready { block, key: k }) => {
                    *k = (*k).max(key);
                    return Ok(Arc::clone(block));
                }
                Some(Entry::Loading) => {
                    entries = self.published.wait(entries).unwrap_or_else(|p| p.into_inner());
                }
                None => break,
            }
        }
        // Room for the new entry; when every entry is being read there is nothing to evict now (the publish
        // below evicts once they are Ready).
        Self::evict_down_to(&mut entries, self.capacity - 1, u32::MAX);
        entries.insert(block, Entry::Loading);
        drop(entries);
        let mut guard = LoadingGuard { cache: self, block, armed: true };
        let bytes = load()?; // the guard removes the entry and wakes the waiters
        self.reads.fetch_add(1, Ordering::Relaxed);
        let now = self.live.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak_live.fetch_max(now, Ordering::Relaxed);
        let arc = Arc::new(BlockBytes { bytes, live: Arc::clone(&self.live) });
        guard.armed = false;
        let mut entries = lock(&self.entries);
        entries.insert(block, Entry::Ready { block: Arc::clone(&arc), key });
        // Entries added while all others were Loading may exceed the capacity: back to it, so that cached
        // blocks never exceed `capacity` (the bound in the module docs).
        Self::evict_down_to(&mut entries, self.capacity, block);
        drop(entries);
        self.published.notify_all();
        Ok(arc)
    }

    /// Evict Ready entries, furthest behind first, until at most `len` entries remain or only Loading entries
    /// (and `keep`) are left.
    fn evict_down_to(entries: &mut HashMap<u32, Entry>, len: usize, keep: u32) {
        while entries.len() > len {
            let victim = entries
                .iter()
                .filter_map(|(b, e)| match e {
                    Entry::Ready { key, .. } if *b != keep => Some((*key, *b)),
                    _ => None,
                })
                .min();
            let Some((_, b)) = victim else { return };
            entries.remove(&b);
        }
    }
}

#[cfg(all(test, not(trdata_loom)))]
mod tests {
    use super::*;
    use crate::error::ImageErrorKind;

    fn bytes_of(b: u32) -> Box<[u8]> {
        vec![b as u8; 64].into_boxed_slice()
    }

    #[test]
    fn hits_do_not_reload_and_the_furthest_behind_block_is_evicted() {
        let c = BlockCache::new(2);
        let calls = AtomicUsize::new(0);
        let load = |b: u32| {
            calls.fetch_add(1, Ordering::Relaxed);
            Ok(bytes_of(b))
        };
        assert_eq!(c.get(5, (0, 0), || load(5)).unwrap().bytes()[0], 5);
        assert_eq!(c.get(5, (0, 0), || load(5)).unwrap().bytes()[0], 5);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        c.get(7, (0, 1), || load(7)).unwrap();
        c.get(9, (0, 2), || load(9)).unwrap(); // evicts 5 (rank 0)
        assert_eq!(c.live_blocks(), 2);
        c.get(7, (0, 1), || load(7)).unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 3, "7 stayed cached");
        c.get(5, (1, 3), || load(5)).unwrap(); // next epoch: evicts 7 (key (0, 1)), not 9
        c.get(9, (0, 2), || load(9)).unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn a_failed_load_leaves_no_entry_and_the_next_caller_retries() {
        let c = BlockCache::new(4);
        let e = c.get(1, (0, 0), || Err(ImageError::new(ImageErrorKind::Io, "boom"))).unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::Io);
        assert_eq!(c.get(1, (0, 0), || Ok(bytes_of(1))).unwrap().bytes()[0], 1);
        // A panicking loader does not leave a Loading entry behind either.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.get(2, (0, 0), || panic!("loader panic"))));
        assert!(r.is_err());
        assert_eq!(c.get(2, (0, 0), || Ok(bytes_of(2))).unwrap().bytes()[0], 2);
    }

    /// Many real threads asking for blocks in a sliding window: every answer has the right bytes, no block is
    /// read twice while it is cached or being read, and live buffers never exceed capacity + threads.
    #[test]
    fn many_threads_stay_within_the_bound() {
        let threads = 8;
        let c = std::sync::Arc::new(BlockCache::new(6));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let c = std::sync::Arc::clone(&c);
                std::thread::spawn(move || {
                    for step in 0..400u32 {
                        let b = step / 4 + (step * 7 + t) % 5; // a window of 5 blocks moving forward
                        let got = c.get(b, (0, b), || Ok(bytes_of(b))).unwrap();
                        assert!(got.bytes().iter().all(|&x| x == b as u8));
                        assert!(c.live_blocks() <= c.capacity() + threads as usize);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(c.peak_live_blocks() <= 6 + threads as usize, "peak {}", c.peak_live_blocks());
        assert!(c.live_blocks() <= 6);
        assert!(c.reads() >= 104, "every one of the 104 blocks was read at least once");
    }
}
