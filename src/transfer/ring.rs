//! transfer/ring — one GPU's ring of device slots and the hand-off of filled slots to the consumer
//! (docs/design/protocols.md "Station", "Buffer lifetime"). [`engine`](super::engine) is the producer that fills slots;
//! `export/` turns a [`SlotLease`] into DLPack tensors.
//!
//! State (one mutex [`RingShared::state`], two condvars; every wait is also woken by stop/close):
//! - slots: `free` (FIFO, each carrying the release events of its previous batch's consumers) + `allocated`
//!   of at most `cap` (= `device_slots + max_held_batches`). The producer takes a free slot, or allocates one
//!   below `cap`, or waits on `producer_cv` with `waiting_for_slot` set.
//! - publication: `ready` holds published batches (or the epoch's end / its failure) in batch order; the
//!   consumer ([`RingShared::next`]) pops it in the caller's time slices. If `ready` is empty while the
//!   producer waits for a slot and every slot is held by the consumer, waiting could never end: it gets
//!   [`DeviceNext::AllSlotsHeld`] instead of a hang (as the host station's `AllBuffersHeld`).
//! - epochs are generations: `epoch_gen` is bumped by begin/stop/close; a batch of an old generation is never
//!   published (`publish` drops it), and every producer wait re-checks the generation (`aborted`).
//! - slot lease ([`SlotLease`], shared by the batch's DLPack exports): [`SlotLease::wait_copy_on`] makes a
//!   consumer stream wait for the slot's copy; [`SlotLease::record_release_on`] records a pooled event on the
//!   consumer's stream, kept with the lease; when the last owner drops, the slot and its release events go
//!   back to `free` and the producer is woken. A release event that cannot be recorded leaks the slot (never
//!   reused: the consumer's reads cannot be ordered before a rewrite).
//!
//! Memory ordering: all state is under the mutex; a slot's bytes are complete before publication (the
//! producer synchronizes the copy event first) and device-side through the consumer stream's wait.
//!
//! The protocol is [`RingCore`], generic over slot and batch and free of CUDA, on the `sync` shim: loom
//! model-checks it (`make test-loom`: in-order delivery through recycled slots, "all slots held" reported
//! instead of waited for, a stopped epoch giving way to the next); [`RingShared`] adds the device context.

// transfer/ is an unsafe-allowed module (docs/design/architecture.md "House style"): the stream calls below take raw consumer streams.
#![allow(unsafe_code)]

use crate::cuda::{self, CUdeviceptr, CUstream, DeviceMemory, Event, GpuContext};
use crate::error::{Result, SampleError, TrdataError};
use crate::staging::BatchLayout;
use crate::stats::{GpuCounters, Stats};
use crate::sync::{Arc, AtomicBool, Condvar, Mutex, Ordering, lock};
use crate::transfer::EpochShape;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One device slot: a batch-sized allocation and its copy event.
pub(super) struct Slot {
    pub(super) mem: std::sync::Arc<DeviceMemory>,
    pub(super) copy_done: Event,
    /// Release events of the consumers of the slot's previous batch.
    pub(super) released: Vec<Event>,
}

/// What the consumer receives next, in batch order.
pub(super) enum Published<B> {
    Batch(B),
    Failed(TrdataError),
    End,
}

/// The ring's state: slots of type `S` (device allocations in production, plain values in the loom model)
/// and published batches of type `B`.
pub(super) struct RingState<S, B> {
    free: VecDeque<S>,
    allocated: usize,
    cap: usize,
    ready: VecDeque<Published<B>>,
    /// Epoch generation: bumped by begin/stop/close.
    epoch_gen: u64,
    /// Pending epoch command for generation `epoch_gen`: (shape, first batch).
    command: Option<(EpochShape, u64)>,
    /// Generation whose start the producer acknowledged.
    begun: u64,
    waiting_for_slot: bool,
    closed: bool,
}

impl<S, B> RingState<S, B> {
    /// True when a producer working for generation `epoch_gen` must give up (stopped, superseded or closed).
    pub(super) fn aborted(&self, epoch_gen: u64) -> bool {
        self.closed || self.epoch_gen != epoch_gen
    }

    /// Drain what was published but not consumed (drop it outside the lock: slot leases take it).
    fn drain_ready(&mut self) -> Vec<Published<B>> {
        self.ready.drain(..).collect()
    }
}

/// Outcome of one wait of the producer.
pub(super) enum Wait<T> {
    Got(T),
    Aborted,
}

/// The ring's protocol (module doc): one mutex, the consumer's and the producer's condvars. Generic over the
/// slot and batch types and free of CUDA, so loom model-checks exactly this code (tests below).
pub(super) struct RingCore<S, B> {
    pub(super) state: Mutex<RingState<S, B>>,
    /// Wakes the consumer and `begin`.
    consumer_cv: Condvar,
    /// Wakes the producer (transfer thread).
    producer_cv: Condvar,
}

impl<S, B> RingCore<S, B> {
    /// An empty ring of at most `cap` slots.
    pub(super) fn new(cap: usize) -> Self {
        Self {
            state: Mutex::new(RingState {
                free: VecDeque::new(),
                allocated: 0,
                cap,
                ready: VecDeque::new(),
                epoch_gen: 0,
                command: None,
                begun: 0,
                waiting_for_slot: false,
                closed: false,
            }),
            consumer_cv: Condvar::new(),
            producer_cv: Condvar::new(),
        }
    }

    /// Consumer: start an epoch (a new generation: anything published before is dropped) and wait until the
    /// producer acknowledged it (`acknowledge`). Err when the ring is closed.
    pub(super) fn begin(&self, shape: EpochShape, first_batch: u64) -> Result<()> {
        let mut g = lock(&self.state);
        let stale = g.drain_ready();
        g.epoch_gen += 1;
        let epoch_gen = g.epoch_gen;
        g.command = Some((shape, first_batch));
        self.producer_cv.notify_all();
        while g.begun < epoch_gen && !g.closed {
            g = self.consumer_cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        let closed = g.closed;
        drop(g);
        drop(stale); // slot leases lock the state: drop them outside it
        if closed { Err(TrdataError::Closed("the loader is closed".into())) } else { Ok(()) }
    }

    /// Consumer: cancel the running epoch (the producer abandons it at its next check); `close` also ends the
    /// producer's command loop for good.
    pub(super) fn stop(&self, close: bool) {
        let stale = {
            let mut g = lock(&self.state);
            g.epoch_gen += 1;
            g.command = None;
            g.closed |= close;
            g.drain_ready()
        };
        drop(stale);
        self.producer_cv.notify_all();
        self.consumer_cv.notify_all();
    }

    /// Producer: wait for the command of a generation newer than `seen`; None once the ring is closed.
    pub(super) fn next_command(&self, seen: &mut u64) -> Option<(u64, EpochShape, u64)> {
        let mut g = lock(&self.state);
        loop {
            if g.closed {
                return None;
            }
            if g.epoch_gen > *seen {
                *seen = g.epoch_gen; // taken, or a stop without a new epoch
                if let Some((shape, first)) = g.command.take() {
                    return Some((g.epoch_gen, shape, first));
                }
                continue;
            }
            g = self.producer_cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Producer: generation `epoch_gen` is ready to publish (its host station is rewound); wakes `begin`.
    pub(super) fn acknowledge(&self, epoch_gen: u64) {
        let mut g = lock(&self.state);
        g.begun = g.begun.max(epoch_gen);
        drop(g);
        self.consumer_cv.notify_all();
    }

    /// Producer: publish `p` for generation `epoch_gen`, unless that generation was aborted.
    pub(super) fn publish(&self, epoch_gen: u64, p: Published<B>) {
        let mut g = lock(&self.state);
        if g.aborted(epoch_gen) {
            drop(g);
            drop(p);
            return;
        }
        g.ready.push_back(p);
        drop(g);
        self.consumer_cv.notify_all();
    }

    /// Producer: a free slot, or a new one from `alloc` below `cap`, or a wait for the consumer to release one.
    pub(super) fn acquire(&self, epoch_gen: u64, alloc: impl FnOnce() -> Result<S>) -> Result<Wait<S>> {
        let mut g = lock(&self.state);
        loop {
            if g.aborted(epoch_gen) {
                g.waiting_for_slot = false;
                return Ok(Wait::Aborted);
            }
            if let Some(slot) = g.free.pop_front() {
                g.waiting_for_slot = false;
                return Ok(Wait::Got(slot));
            }
            if g.allocated < g.cap {
                g.allocated += 1;
                g.waiting_for_slot = false;
                drop(g);
                let made = alloc();
                if made.is_err() {
                    lock(&self.state).allocated -= 1;
                }
                return made.map(Wait::Got);
            }
            if !g.waiting_for_slot {
                g.waiting_for_slot = true;
                self.consumer_cv.notify_all(); // a consumer may now detect "all slots held"
            }
            g = self.producer_cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Batches published and not yet taken by the consumer (0: the consumer is waiting or about to: the loader
    /// is the bottleneck; the GPU decode controller reads it).
    pub(super) fn ready_len(&self) -> usize {
        lock(&self.state).ready.len()
    }

    /// Any side: a slot is free again (its lease dropped, or its copy completed but the batch is not published).
    pub(super) fn return_slot(&self, slot: S) {
        lock(&self.state).free.push_back(slot);
        self.producer_cv.notify_all();
    }

    /// Consumer: the next published batch, waiting at most `timeout`.
    pub(super) fn next(&self, timeout: Duration) -> Result<DeviceNext<B>> {
        let t0 = Instant::now();
        let mut g = lock(&self.state);
        loop {
            if let Some(p) = g.ready.pop_front() {
                drop(g);
                self.producer_cv.notify_all();
                return match p {
                    Published::Batch(b) => Ok(DeviceNext::Batch(b)),
                    Published::Failed(e) => Err(e),
                    Published::End => Ok(DeviceNext::End),
                };
            }
            if g.closed || g.command.is_none() && g.begun < g.epoch_gen {
                return Ok(DeviceNext::End);
            }
            if g.waiting_for_slot && g.free.is_empty() && g.allocated >= g.cap {
                return Ok(DeviceNext::AllSlotsHeld { held: g.allocated });
            }
            let elapsed = t0.elapsed();
            if elapsed >= timeout {
                return Ok(DeviceNext::Timeout);
            }
            g = self.consumer_cv.wait_timeout(g, timeout - elapsed).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

/// The ring of one GPU: the protocol core over device slots, plus the device context and pooled events.
pub(super) struct RingShared {
    pub(super) core: RingCore<Slot, DeviceBatch>,
    pub(super) ctx: std::sync::Arc<GpuContext>,
    pub(super) ordinal: u32,
    /// Recycled release events (re-recording after the wait was enqueued is allowed: a wait binds to the
    /// record current at enqueue time).
    pub(super) events: Mutex<Vec<Event>>,
    pub(super) counters: std::sync::Arc<GpuCounters>,
}

impl RingShared {
    pub(super) fn new(
        ctx: std::sync::Arc<GpuContext>,
        ordinal: u32,
        cap: usize,
        counters: std::sync::Arc<GpuCounters>,
    ) -> Self {
        Self { core: RingCore::new(cap), ctx, ordinal, events: Mutex::new(Vec::new()), counters }
    }

    /// A slot for the next copy (allocated on the device below `cap`). `h2d_wait_slot_ns` counts the wait for a
    /// released slot only, not the allocation of a new one.
    pub(super) fn acquire_slot(&self, layout: BatchLayout, epoch_gen: u64) -> Result<Wait<Slot>> {
        let t0 = Instant::now();
        let mut allocating = None;
        let got = self.core.acquire(epoch_gen, || {
            allocating = Some(Instant::now());
            Stats::add(&self.counters.device_slots_allocated, 1);
            let mem = DeviceMemory::alloc(&self.ctx, layout.total_bytes())?;
            Ok(Slot { mem: std::sync::Arc::new(mem), copy_done: Event::new(&self.ctx)?, released: Vec::new() })
        });
        let waited = allocating.unwrap_or_else(Instant::now).duration_since(t0);
        Stats::add(&self.counters.h2d_wait_slot_ns, waited.as_nanos() as u64);
        got
    }

    /// The next device batch, waiting at most `timeout` (timed: the GPU path's starvation meter).
    pub(super) fn next(&self, timeout: Duration) -> Result<DeviceNext> {
        let t0 = Instant::now();
        let next = self.core.next(timeout);
        Stats::add_since(&self.counters.device_wait_ns, t0);
        next
    }
}

/// One batch on the device, as the consumer gets it.
pub struct DeviceBatch {
    /// The slot (shared by every DLPack export of the batch).
    pub lease: std::sync::Arc<SlotLease>,
    /// Labels of every row (also on the device, at offset 0 of the slot).
    pub labels: Vec<i64>,
    /// Dataset indices of every row.
    pub indices: Vec<i64>,
    /// The first sample error of the batch (policy `raise`).
    pub error: Option<SampleError>,
    /// Each row's targets and extras (sample/), taken from the host rows (host memory: the consumer takes them).
    pub fields: Vec<crate::sample::RowFields>,
}

impl std::fmt::Debug for DeviceBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBatch").field("lease", &self.lease).finish_non_exhaustive()
    }
}

/// What the consumer's `next` returns.
#[derive(Debug)]
pub enum DeviceNext<B = DeviceBatch> {
    /// A batch on the device.
    Batch(B),
    /// Nothing within the timeout.
    Timeout,
    /// The epoch is over (or was stopped).
    End,
    /// Every device slot is held by the consumer and the next batch needs one.
    AllSlotsHeld {
        /// Slots allocated.
        held: usize,
    },
}

/// A device slot holding one published batch; returns to the ring when the last owner drops, carrying the
/// consumers' release events.
pub struct SlotLease {
    shared: Arc<RingShared>,
    slot: Mutex<Option<Slot>>,
    ptr: CUdeviceptr,
    layout: BatchLayout,
    leak: AtomicBool,
    /// Batch number within the epoch.
    pub batch: u64,
    /// Rows in the batch.
    pub rows: usize,
    /// Process that received the batch: dropped in a fork child, the lease touches no lock (see `Drop`).
    pid: u32,
}

impl std::fmt::Debug for SlotLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotLease")
            .field("ordinal", &self.shared.ordinal)
            .field("batch", &self.batch)
            .field("rows", &self.rows)
            .finish()
    }
}

/// Which part of a slot an export views.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotPart {
    /// The images of a loader without views (view 0's block: rows × view bytes from the 256-aligned image
    /// offset).
    Images,
    /// The images of view `k` (its block: rows × view k's bytes from its 256-aligned offset; `View(0)` is
    /// `Images`).
    View(usize),
    /// The labels (rows × int64 at offset 0).
    Labels,
}

impl SlotLease {
    /// Lease `slot`, whose copy of batch `batch` (`rows` rows) completed, to the consumer.
    pub(super) fn new(shared: Arc<RingShared>, slot: Slot, layout: BatchLayout, batch: u64, rows: usize) -> Self {
        let ptr = slot.mem.ptr();
        Self {
            shared,
            slot: Mutex::new(Some(slot)),
            ptr,
            layout,
            leak: AtomicBool::new(false),
            batch,
            rows,
            pid: std::process::id(),
        }
    }

    /// Device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.shared.ordinal
    }

    /// (device address, bytes) of `part`.
    pub fn part(&self, part: SlotPart) -> (CUdeviceptr, usize) {
        match part {
            SlotPart::Images => self.part(SlotPart::View(0)),
            SlotPart::View(k) => (self.ptr + self.layout.view_offset(k) as u64, self.rows * self.layout.view_bytes(k)),
            SlotPart::Labels => (self.ptr + self.layout.labels_offset() as u64, self.rows * 8),
        }
    }

    /// Make work enqueued later on `stream` wait for this slot's H2D copy (device-side; the host never blocks).
    ///
    /// # Safety
    /// `stream` must be a live stream of this lease's device, or one of the special handles
    /// `CU_STREAM_LEGACY` (1) / `CU_STREAM_PER_THREAD` (2).
    pub unsafe fn wait_copy_on(&self, stream: CUstream) -> Result<()> {
        let g = lock(&self.slot);
        let slot = g.as_ref().expect("a live lease holds its slot");
        // SAFETY: the caller guarantees `stream` (see # Safety); `copy_done` is this slot's live event.
        unsafe { cuda::wait_event_raw(&self.shared.ctx, stream, &slot.copy_done) }
    }

    /// Record a release event on `stream`: the slot is rewritten only after the work enqueued on `stream` so
    /// far completed. If no event can be recorded, the slot is leaked for good when the lease drops.
    ///
    /// # Safety
    /// As [`wait_copy_on`](Self::wait_copy_on): `stream` must still be live (or a special handle).
    pub unsafe fn record_release_on(&self, stream: CUstream) {
        let ev = lock(&self.shared.events).pop().map(Ok).unwrap_or_else(|| Event::new(&self.shared.ctx));
        // SAFETY: the caller guarantees `stream` (see # Safety).
        let recorded = ev.and_then(|ev| unsafe { ev.record_raw(stream) }.map(|()| ev));
        match recorded {
            Ok(ev) => {
                if let Some(slot) = lock(&self.slot).as_mut() {
                    slot.released.push(ev);
                }
            }
            Err(_) => self.leak.store(true, Ordering::Relaxed),
        }
    }
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            // A fork child: a parent thread may have held these locks at fork time, and CUDA is unusable here.
            // Leak the slot (its memory belongs to the parent's context) instead of hanging; `get_mut` needs no lock.
            std::mem::forget(self.slot.get_mut().unwrap_or_else(|p| p.into_inner()).take());
            return;
        }
        let Some(slot) = lock(&self.slot).take() else { return };
        if self.leak.load(Ordering::Relaxed) {
            // The consumer's reads cannot be ordered before a rewrite: keep the memory out of use for good.
            std::mem::forget(slot.mem);
            return;
        }
        self.shared.core.return_slot(slot);
    }
}

/// The ring's protocol under loom (`make test-loom`): the production `RingCore`, with numbered slots instead of
/// device memory and no copies. loom's `wait_timeout` never times out, so a lost wakeup is a reported deadlock,
/// not a slow test.
#[cfg(all(test, feature = "loom"))]
mod loom_tests {
    use super::*;
    use crate::sync::thread_spawn;

    type Core = RingCore<u32, Lease>;

    /// A published batch: like `SlotLease`, it gives its slot back when dropped (by the consumer, or by
    /// `publish`/`stop` when its generation was abandoned).
    struct Lease {
        core: Arc<Core>,
        batch: u64,
        slot: u32,
    }

    impl std::fmt::Debug for Lease {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Lease(batch {}, slot {})", self.batch, self.slot)
        }
    }

    impl Drop for Lease {
        fn drop(&mut self) {
            self.core.return_slot(self.slot);
        }
    }

    /// The transfer thread's loop: take a command, acknowledge it, fill a slot per batch and publish it.
    fn producer(core: Arc<Core>) {
        let mut seen = 0;
        let mut made = 0u32;
        while let Some((epoch_gen, shape, first)) = core.next_command(&mut seen) {
            core.acknowledge(epoch_gen);
            for b in first..shape.batches {
                let got = core.acquire(epoch_gen, || {
                    made += 1;
                    Ok(made)
                });
                let Ok(Wait::Got(slot)) = got else { break };
                core.publish(epoch_gen, Published::Batch(Lease { core: Arc::clone(&core), batch: b, slot }));
            }
            core.publish(epoch_gen, Published::End);
        }
    }

    fn shape(batches: u64) -> EpochShape {
        EpochShape { batches, batch_size: 1, total_rows: batches }
    }

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(f);
    }

    /// A ring of `cap` slots with its producer thread running.
    fn start(cap: usize) -> (Arc<Core>, loom::thread::JoinHandle<()>) {
        let core = Arc::new(Core::new(cap));
        let producer = thread_spawn({
            let core = Arc::clone(&core);
            move || producer(core)
        });
        (core, producer)
    }

    /// Consume the running epoch to its end, dropping each batch (its slot goes back); the batch numbers seen.
    fn drain(core: &Core) -> Vec<u64> {
        let mut got = Vec::new();
        loop {
            match core.next(Duration::from_secs(1)).unwrap() {
                DeviceNext::Batch(lease) => got.push(lease.batch),
                DeviceNext::End => return got,
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn ring_loom_delivers_every_batch_in_order_through_recycled_slots() {
        model(|| {
            let (core, producer) = start(2);
            core.begin(shape(3), 0).unwrap();
            assert_eq!(drain(&core), [0, 1, 2]);
            core.stop(true);
            producer.join().unwrap();
        });
    }

    #[test]
    fn ring_loom_all_slots_held_is_reported_not_waited_for() {
        model(|| {
            let (core, producer) = start(1);
            core.begin(shape(2), 0).unwrap();
            let held = match core.next(Duration::from_secs(1)).unwrap() {
                DeviceNext::Batch(lease) if lease.batch == 0 => lease,
                other => panic!("unexpected {other:?}"),
            };
            // The one slot is held: the next batch can never come, and the consumer is told so.
            assert!(matches!(core.next(Duration::from_secs(1)).unwrap(), DeviceNext::AllSlotsHeld { held: 1 }));
            core.stop(true);
            drop(held);
            producer.join().unwrap();
        });
    }

    #[test]
    fn ring_loom_a_stopped_epoch_gives_way_to_the_next() {
        model(|| {
            let (core, producer) = start(1);
            core.begin(shape(3), 0).unwrap();
            core.stop(false); // cancelled at once: the producer abandons it wherever it is
            core.begin(shape(1), 0).unwrap();
            // Only the new epoch's batch is delivered (the old generation's batches are never published).
            assert_eq!(drain(&core), [0]);
            core.stop(true);
            producer.join().unwrap();
        });
    }
}
