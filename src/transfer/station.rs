//! The station (docs/design/protocols.md "Station"): workers write samples into batch buffers, the consumer takes full
//! buffers in batch order, and buffers come back when Python drops the last view of them.
//!
//! State (all under one mutex; waits on two condvars, every wait also woken by stop/close/poison):
//! - `ring`: K slots. Slot i serves batches b ≡ i (mod K); `slot.batch` is the batch it is filling now.
//!   A slot is *writeable* when it has a buffer and is not ready; *ready* when all rows(b) rows completed.
//! - `pool`: free buffers; `allocated` counts buffers ever allocated (≤ `max_buffers`).
//!
//! Transitions (who moves them):
//! - worker `acquire(b)`: waits until ring[b mod K] is writeable for batch b → clone of the buffer.
//! - worker `complete(b, err)`: filled += 1 (first error kept); filled == rows(b) → ready, wake consumer.
//! - consumer `take(b)`: waits until ring[b mod K] is ready for b, moves the buffer out into a `BatchLease`
//!   (ownership passes to Python: the ring never touches it again), advances the slot to b + K and refills
//!   it from the pool (or a new allocation while allocated < max_buffers), waking the workers.
//! - lease drop `release(buf)`: the buffer goes to the lowest-batch slot that has none, else to the pool.
//! - `begin_epoch(shape, first)`: rewinds the slots to batches first..first+K (slot i gets the smallest
//!   b ≥ first with b ≡ i mod K, so the ring invariant holds from the start); only called when no worker is
//!   inside an epoch. `first` > 0 is an exact mid-epoch resume: batches before it are never produced.
//! - `stop` (cancel the epoch), `close` (loader closing), `poison` (a worker died): every waiter returns.
//!
//! Why moving buffers into leases: a batch Python still holds can never be rewritten, whatever the user
//! does; holding more than `max_buffers − K` batches makes the producer wait, and a consumer that would
//! wait for a buffer only Python can free gets `Take::AllBuffersHeld` instead of a hang.
//! Memory ordering: the mutex orders every row write (before `complete`) before the consumer's `take`.

use crate::error::{SampleError, TrdataError};
use crate::staging::{BatchBuffer, BatchLayout};
use crate::stats::Stats;
use crate::sync::{Arc, Condvar, Mutex, lock};
use std::time::{Duration, Instant};

/// Rows per batch and batch count of the running epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochShape {
    /// Batches in the epoch.
    pub batches: u64,
    /// Rows of a full batch.
    pub batch_size: u64,
    /// Total rows (sequence numbers) of the epoch; the last batch may be short.
    pub total_rows: u64,
}

impl EpochShape {
    fn rows(&self, b: u64) -> u64 {
        (self.total_rows - b * self.batch_size).min(self.batch_size)
    }
}

#[derive(Debug)]
struct Slot {
    batch: u64,
    buffer: Option<Arc<BatchBuffer>>,
    filled: u64,
    ready: bool,
    error: Option<SampleError>,
}

#[derive(Debug)]
struct Inner {
    ring: Vec<Slot>,
    pool: Vec<Arc<BatchBuffer>>,
    allocated: usize,
    shape: EpochShape,
    stopped: bool,
    closed: bool,
    poison: Option<TrdataError>,
}

/// Result of a consumer's `take`.
#[derive(Debug)]
pub enum Take {
    /// The batch, and the first sample error recorded in it (policy `raise`).
    Ready(BatchLease, Option<SampleError>),
    /// Not ready within the timeout; call again (lets the caller check signals).
    Timeout,
    /// Every buffer is held by Python and the batch needs one: waiting would never end.
    AllBuffersHeld { held: usize },
    /// A worker died (`TrdataError::Worker`) or a buffer could not be allocated (`TrdataError::Memory`).
    Poisoned(TrdataError),
    /// The loader was closed or the epoch stopped.
    Stopped,
}

/// The host station of one engine.
#[derive(Debug)]
pub struct Station {
    inner: Mutex<Inner>,
    workers_cv: Condvar,
    consumer_cv: Condvar,
    layout: BatchLayout,
    max_buffers: usize,
    stats: Arc<Stats>,
}

impl Station {
    /// A station with a ring of `depth` ≥ 2 slots for batches of `layout`, allocating at most
    /// `max_buffers` ≥ depth buffers (lazily: none until the first epoch).
    pub fn new(layout: BatchLayout, depth: usize, max_buffers: usize, stats: Arc<Stats>) -> Self {
        assert!(depth >= 2 && max_buffers >= depth, "station needs depth ≥ 2 and max_buffers ≥ depth");
        let ring =
            (0..depth).map(|i| Slot { batch: i as u64, buffer: None, filled: 0, ready: false, error: None }).collect();
        let shape = EpochShape { batches: 0, batch_size: layout.rows() as u64, total_rows: 0 };
        Self {
            inner: Mutex::new(Inner {
                ring,
                pool: Vec::new(),
                allocated: 0,
                shape,
                stopped: true,
                closed: false,
                poison: None,
            }),
            workers_cv: Condvar::new(),
            consumer_cv: Condvar::new(),
            layout,
            max_buffers,
            stats,
        }
    }

    /// A free buffer: from the pool, else a new allocation below the cap, else None. An allocation the system
    /// refuses poisons the station with `TrdataError::Memory` (every waiter returns; the consumer raises it).
    fn spare(&self, inner: &mut Inner) -> Option<Arc<BatchBuffer>> {
        let buf = match inner.pool.pop() {
            Some(buf) => buf,
            None if inner.allocated < self.max_buffers => match BatchBuffer::new(self.layout) {
                Ok(buf) => {
                    inner.allocated += 1;
                    Stats::add(&self.stats.buffers_allocated, 1);
                    Arc::new(buf)
                }
                Err(e) => {
                    inner.poison.get_or_insert(e);
                    return None;
                }
            },
            None => return None,
        };
        buf.reset_claims();
        Some(buf)
    }

    /// Rewind the ring for a new epoch whose first produced batch is `first_batch` (0, or the resume point
    /// of an interrupted epoch). The caller guarantees no worker is inside the previous epoch.
    pub fn begin_epoch(&self, shape: EpochShape, first_batch: u64) {
        assert!(shape.batch_size as usize == self.layout.rows(), "epoch batch size differs from the layout");
        assert!(first_batch <= shape.batches, "first batch {first_batch} beyond the epoch's {}", shape.batches);
        let mut g = lock(&self.inner);
        g.shape = shape;
        g.stopped = false;
        // A worker panic fails its epoch (the consumer got `Poisoned`); the pool rebuilt that worker's scratch,
        // so the next epoch starts clean.
        g.poison = None;
        let k = g.ring.len();
        for i in 0..k {
            let inner = &mut *g;
            let slot = &mut inner.ring[i];
            // Smallest b ≥ first_batch with b ≡ i (mod K).
            let batch = first_batch + ((i as u64 + k as u64 - first_batch % k as u64) % k as u64);
            slot.batch = batch;
            slot.filled = 0;
            slot.ready = false;
            slot.error = None;
            if batch >= shape.batches {
                if let Some(b) = slot.buffer.take() {
                    inner.pool.push(b);
                }
            } else if let Some(b) = &slot.buffer {
                b.reset_claims();
            }
        }
        for i in 0..k {
            if g.ring[i].batch < shape.batches && g.ring[i].buffer.is_none() {
                let spare = self.spare(&mut g);
                g.ring[i].buffer = spare;
            }
        }
        drop(g);
        self.workers_cv.notify_all();
    }

    /// Worker: wait until batch `b` can be written; None when the epoch was stopped or the loader closed.
    pub fn acquire(&self, b: u64) -> Option<Arc<BatchBuffer>> {
        let mut g = lock(&self.inner);
        let t0 = Instant::now();
        let mut waited = false;
        loop {
            if g.stopped || g.closed || g.poison.is_some() {
                return None;
            }
            let k = g.ring.len() as u64;
            let slot = &g.ring[(b % k) as usize];
            if slot.batch == b
                && !slot.ready
                && let Some(buf) = &slot.buffer
            {
                if waited {
                    Stats::add_since(&self.stats.worker_wait_ns, t0);
                }
                return Some(Arc::clone(buf));
            }
            waited = true;
            g = self.workers_cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Worker: one row of batch `b` is written (or failed with `error`).
    pub fn complete(&self, b: u64, error: Option<SampleError>) {
        let mut g = lock(&self.inner);
        let k = g.ring.len() as u64;
        let rows = g.shape.rows(b);
        let slot = &mut g.ring[(b % k) as usize];
        assert_eq!(slot.batch, b, "completion for a batch the slot is not filling");
        slot.filled += 1;
        if slot.error.is_none() {
            slot.error = error;
        }
        if slot.filled == rows {
            slot.ready = true;
            drop(g);
            self.consumer_cv.notify_all();
        }
    }

    /// Consumer: take batch `b` (batches are taken in order), waiting at most `timeout`.
    pub fn take(this: &Arc<Self>, b: u64, timeout: Duration) -> Take {
        let mut g = lock(&this.inner);
        let t0 = Instant::now();
        loop {
            if let Some(p) = &g.poison {
                return Take::Poisoned(p.clone());
            }
            if g.closed || g.stopped {
                return Take::Stopped;
            }
            let k = g.ring.len() as u64;
            let slot = &g.ring[(b % k) as usize];
            assert_eq!(slot.batch, b, "batches must be taken in order");
            if slot.ready {
                break;
            }
            if slot.buffer.is_none() {
                return Take::AllBuffersHeld { held: g.allocated };
            }
            let elapsed = t0.elapsed();
            if elapsed >= timeout {
                Stats::add_since(&this.stats.consumer_wait_ns, t0);
                return Take::Timeout;
            }
            g = this.consumer_cv.wait_timeout(g, timeout - elapsed).unwrap_or_else(|p| p.into_inner()).0;
        }
        Stats::add_since(&this.stats.consumer_wait_ns, t0);
        let inner = &mut *g;
        let k = inner.ring.len() as u64;
        let rows = inner.shape.rows(b);
        let batches = inner.shape.batches;
        let slot = &mut inner.ring[(b % k) as usize];
        let buffer = slot.buffer.take().expect("a ready slot holds its buffer");
        let error = slot.error.take();
        slot.batch = b + k;
        slot.filled = 0;
        slot.ready = false;
        if slot.batch < batches {
            let spare = this.spare(inner);
            inner.ring[(b % k) as usize].buffer = spare;
        }
        drop(g);
        this.workers_cv.notify_all();
        Stats::add(&this.stats.batches, 1);
        let lease = BatchLease {
            station: Arc::clone(this),
            buffer: Some(buffer),
            batch: b,
            rows: rows as usize,
            pid: std::process::id(),
        };
        Take::Ready(lease, error)
    }

    fn release(&self, buffer: Arc<BatchBuffer>) {
        let mut g = lock(&self.inner);
        let batches = g.shape.batches;
        let target = g.ring.iter_mut().filter(|s| s.buffer.is_none() && s.batch < batches).min_by_key(|s| s.batch);
        match target {
            Some(slot) => {
                buffer.reset_claims();
                slot.buffer = Some(buffer);
            }
            None => g.pool.push(buffer),
        }
        drop(g);
        self.workers_cv.notify_all();
        self.consumer_cv.notify_all();
    }

    /// Cancel the running epoch: workers and the consumer return from their waits.
    pub fn stop(&self) {
        lock(&self.inner).stopped = true;
        self.workers_cv.notify_all();
        self.consumer_cv.notify_all();
    }

    /// True once the epoch was stopped or the station closed (for waits outside the station that must end with
    /// the epoch: the partial cache's, source/block_cache.rs).
    pub fn is_stopped(&self) -> bool {
        let g = lock(&self.inner);
        g.stopped || g.closed
    }

    /// Close for good.
    pub fn close(&self) {
        let mut g = lock(&self.inner);
        g.closed = true;
        g.stopped = true;
        drop(g);
        self.workers_cv.notify_all();
        self.consumer_cv.notify_all();
    }

    /// A worker died: every waiter returns and the consumer reports `message` (as `TrdataError::Worker`).
    pub fn poison(&self, message: String) {
        self.fail(TrdataError::Worker(message));
    }

    /// The epoch cannot go on: every waiter returns and the consumer reports `error` (the first one wins).
    pub fn fail(&self, error: TrdataError) {
        let mut g = lock(&self.inner);
        g.poison.get_or_insert(error);
        drop(g);
        self.workers_cv.notify_all();
        self.consumer_cv.notify_all();
    }

    /// Buffers allocated so far.
    pub fn buffers_allocated(&self) -> usize {
        lock(&self.inner).allocated
    }

    /// True once `close` ran.
    pub fn is_closed(&self) -> bool {
        lock(&self.inner).closed
    }
}

/// A published batch owned by Python: the buffer returns to the station when this is dropped.
#[derive(Debug)]
pub struct BatchLease {
    station: Arc<Station>,
    buffer: Option<Arc<BatchBuffer>>,
    /// Batch number within the epoch.
    pub batch: u64,
    /// Rows in this batch.
    pub rows: usize,
    /// Process that took the batch: a lease dropped in a fork child must not touch the station's lock (a
    /// parent thread may have held it at fork time, and it would never be released in the child).
    pid: u32,
}

impl BatchLease {
    /// The buffer (valid for the lease's lifetime).
    pub fn buffer(&self) -> &BatchBuffer {
        self.buffer.as_deref().expect("lease holds its buffer until drop")
    }
}

impl Drop for BatchLease {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            std::mem::forget(self.buffer.take()); // fork child: the parent's memory, leaked rather than locked
            return;
        }
        if let Some(b) = self.buffer.take() {
            self.station.release(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::Arc;

    /// Run one epoch: `workers` threads with static claiming fill `batches` batches of `rows` rows (row value =
    /// sequence number), the consumer takes them in order holding `hold` leases at a time.
    pub(crate) fn run_epoch(station: &Arc<Station>, workers: usize, shape: EpochShape, hold: usize) -> Vec<Vec<u8>> {
        run_epoch_from(station, workers, shape, hold, 0)
    }

    /// `run_epoch` resumed at batch `first` (workers skip the sequence numbers of earlier batches).
    pub(crate) fn run_epoch_from(
        station: &Arc<Station>,
        workers: usize,
        shape: EpochShape,
        hold: usize,
        first: u64,
    ) -> Vec<Vec<u8>> {
        station.begin_epoch(shape, first);
        let mut handles = Vec::new();
        for j in 0..workers {
            let st = Arc::clone(station);
            handles.push(crate::sync::thread_spawn(move || {
                let mut seq = j as u64;
                while seq < first * shape.batch_size {
                    seq += workers as u64;
                }
                while seq < shape.total_rows {
                    let b = seq / shape.batch_size;
                    let Some(buf) = st.acquire(b) else { return };
                    let mut w = buf.claim_row((seq % shape.batch_size) as usize);
                    w.image(0).fill(seq as u8);
                    w.set_meta(seq as i64, seq as i64);
                    drop(buf);
                    st.complete(b, None);
                    seq += workers as u64;
                }
            }));
        }
        let mut out = Vec::new();
        let mut held = std::collections::VecDeque::new();
        for b in first..shape.batches {
            let lease = loop {
                match Station::take(station, b, Duration::from_secs(5)) {
                    Take::Ready(l, None) => break l,
                    Take::Timeout => continue,
                    other => panic!("unexpected {other:?}"),
                }
            };
            out.push(lease.buffer().images(lease.rows).to_vec());
            held.push_back(lease);
            if held.len() > hold {
                held.pop_front();
            }
        }
        for h in handles {
            h.join().unwrap();
        }
        out
    }

    fn layout(rows: usize) -> BatchLayout {
        BatchLayout::new(rows, 3)
    }

    fn expected(shape: EpochShape) -> Vec<Vec<u8>> {
        (0..shape.batches)
            .map(|b| {
                let rows = shape.rows(b);
                (b * shape.batch_size..b * shape.batch_size + rows).flat_map(|s| [s as u8; 3]).collect()
            })
            .collect()
    }

    #[cfg(not(feature = "loom"))]
    #[test]
    fn stress_many_workers_and_epochs() {
        for (workers, rows, total, depth, hold) in
            [(1, 4, 37u64, 2, 0), (3, 5, 101, 2, 1), (8, 7, 333, 3, 4), (16, 1, 50, 2, 0)]
        {
            let stats = Arc::new(Stats::default());
            let st = Arc::new(Station::new(layout(rows), depth, depth + hold + 1, stats));
            let shape = EpochShape { batches: total.div_ceil(rows as u64), batch_size: rows as u64, total_rows: total };
            for _ in 0..5 {
                assert_eq!(run_epoch(&st, workers, shape, hold), expected(shape));
            }
            assert!(st.buffers_allocated() <= depth + hold + 1);
        }
    }

    /// Resume at every batch boundary (including 0 and the end), interleaved with full epochs on the same
    /// station: the ring starts at the first batch and delivers exactly the remaining batches' bytes.
    #[cfg(not(feature = "loom"))]
    #[test]
    fn resume_at_every_first_batch() {
        for (workers, rows, total, depth, hold) in [(1, 4, 37u64, 2, 0), (3, 5, 101, 3, 1), (4, 1, 9, 2, 0)] {
            let st = Arc::new(Station::new(layout(rows), depth, depth + hold + 1, Arc::new(Stats::default())));
            let shape = EpochShape { batches: total.div_ceil(rows as u64), batch_size: rows as u64, total_rows: total };
            for first in 0..=shape.batches {
                let want = expected(shape)[first as usize..].to_vec();
                assert_eq!(run_epoch_from(&st, workers, shape, hold, first), want, "first batch {first}");
                assert_eq!(run_epoch(&st, workers, shape, hold), expected(shape));
            }
        }
    }

    #[cfg(not(feature = "loom"))]
    #[test]
    fn holding_every_buffer_is_reported_not_a_hang() {
        let st = Arc::new(Station::new(layout(1), 2, 2, Arc::new(Stats::default())));
        let shape = EpochShape { batches: 4, batch_size: 1, total_rows: 4 };
        st.begin_epoch(shape, 0);
        let fill = |b: u64| {
            let buf = st.acquire(b).unwrap();
            buf.claim_row(0).image(0).fill(1);
            drop(buf);
            st.complete(b, None);
        };
        fill(0);
        fill(1);
        let Take::Ready(l0, _) = Station::take(&st, 0, Duration::from_secs(1)) else { panic!() };
        let Take::Ready(l1, _) = Station::take(&st, 1, Duration::from_secs(1)) else { panic!() };
        assert!(matches!(Station::take(&st, 2, Duration::from_millis(10)), Take::AllBuffersHeld { held: 2 }));
        drop(l0);
        fill(2);
        assert!(matches!(Station::take(&st, 2, Duration::from_secs(1)), Take::Ready(..)));
        drop(l1);
    }

    /// A batch buffer the system cannot allocate (1 PiB here) is a typed `Memory` error for the consumer and
    /// a clean exit for the workers — before, `BatchBuffer::new` aborted the process.
    #[cfg(not(feature = "loom"))]
    #[test]
    fn refused_allocation_poisons_with_a_memory_error() {
        let huge = BatchLayout::new(4, 1 << 48);
        let st = Arc::new(Station::new(huge, 2, 4, Arc::new(Stats::default())));
        st.begin_epoch(EpochShape { batches: 3, batch_size: 4, total_rows: 12 }, 0);
        assert!(st.acquire(0).is_none(), "a worker must not wait for a buffer that cannot exist");
        match Station::take(&st, 0, Duration::from_secs(5)) {
            Take::Poisoned(TrdataError::Memory { bytes, what }) => {
                assert!(bytes >= 4 << 48, "{bytes}");
                assert!(what.contains("batch buffer"), "{what}");
            }
            other => panic!("expected a memory error, got {other:?}"),
        }
        assert_eq!(st.buffers_allocated(), 0);
    }

    #[cfg(not(feature = "loom"))]
    #[test]
    fn stop_and_close_wake_every_waiter() {
        let st = Arc::new(Station::new(layout(2), 2, 4, Arc::new(Stats::default())));
        st.begin_epoch(EpochShape { batches: 10, batch_size: 2, total_rows: 20 }, 0);
        let st2 = Arc::clone(&st);
        let worker = std::thread::spawn(move || st2.acquire(5)); // waits: batch 5 not in the ring
        std::thread::sleep(Duration::from_millis(20));
        assert!(matches!(Station::take(&st, 0, Duration::from_millis(10)), Take::Timeout));
        st.stop();
        assert!(worker.join().unwrap().is_none());
        assert!(matches!(Station::take(&st, 0, Duration::from_secs(5)), Take::Stopped));
        st.close();
        assert!(st.is_closed());
    }

    /// Model check: every interleaving of 2 workers and the consumer over 3 batches of 2 rows with a ring of 2
    /// delivers the right bytes and terminates. Run: cargo test --lib --features loom station_loom
    #[cfg(feature = "loom")]
    #[test]
    fn station_loom() {
        // A preemption bound of 3 keeps the search to minutes while covering every schedule with up to three
        // forced context switches (most concurrency bugs need two; Musuvathi & Qadeer, PLDI'07).
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let st = Arc::new(Station::new(layout(2), 2, 2, Arc::new(Stats::default())));
            let shape = EpochShape { batches: 3, batch_size: 2, total_rows: 5 };
            assert_eq!(run_epoch(&st, 2, shape, 0), expected(shape));
        });
    }

    /// The same model for an exact mid-epoch resume: the ring starts at batch 1 of 4, with a held lease.
    #[cfg(feature = "loom")]
    #[test]
    fn station_loom_resume() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let st = Arc::new(Station::new(layout(2), 2, 3, Arc::new(Stats::default())));
            let shape = EpochShape { batches: 4, batch_size: 2, total_rows: 7 };
            assert_eq!(run_epoch_from(&st, 2, shape, 1, 1), expected(shape)[1..].to_vec());
        });
    }
}
