//! transfer/ring — one GPU's ring of device slots and the hand-off of filled slots to the consumer
//! (DESIGN.md §2 "Station", "Buffer lifetime"). [`engine`](super::engine) is the producer that fills slots;
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

// transfer/ is an unsafe-allowed module (DESIGN.md §1): the stream calls below take raw consumer streams.
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
pub(super) enum Published {
    Batch(DeviceBatch),
    Failed(TrdataError),
    End,
}

pub(super) struct RingState {
    free: VecDeque<Slot>,
    allocated: usize,
    cap: usize,
    ready: VecDeque<Published>,
    /// Epoch generation: bumped by begin/stop/close.
    pub(super) epoch_gen: u64,
    /// Pending epoch command for generation `epoch_gen`: (shape, first batch).
    pub(super) command: Option<(EpochShape, u64)>,
    /// Generation whose station rewind the producer acknowledged.
    pub(super) begun: u64,
    waiting_for_slot: bool,
    pub(super) closed: bool,
}

impl RingState {
    /// True when a producer waiting in generation `epoch_gen` must give up (stopped, superseded or closed).
    pub(super) fn aborted(&self, epoch_gen: u64) -> bool {
        self.closed || self.epoch_gen != epoch_gen
    }

    /// Drain what was published but not consumed (drop it outside the lock: slot leases take it).
    pub(super) fn drain_ready(&mut self) -> Vec<Published> {
        self.ready.drain(..).collect()
    }
}

/// The ring's shared half: the device context, the state and the pooled release events.
pub(super) struct RingShared {
    pub(super) ctx: std::sync::Arc<GpuContext>,
    pub(super) ordinal: u32,
    pub(super) state: Mutex<RingState>,
    /// Wakes the consumer and `begin_epoch`.
    pub(super) consumer_cv: Condvar,
    /// Wakes the producer (transfer thread).
    pub(super) producer_cv: Condvar,
    /// Recycled release events (re-recording after the wait was enqueued is allowed: a wait binds to the
    /// record current at enqueue time).
    pub(super) events: Mutex<Vec<Event>>,
    pub(super) counters: std::sync::Arc<GpuCounters>,
}

/// Outcome of one wait of the producer.
pub(super) enum Wait<T> {
    Got(T),
    Aborted,
}

impl RingShared {
    pub(super) fn new(
        ctx: std::sync::Arc<GpuContext>,
        ordinal: u32,
        cap: usize,
        counters: std::sync::Arc<GpuCounters>,
    ) -> Self {
        Self {
            ctx,
            ordinal,
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
            events: Mutex::new(Vec::new()),
            counters,
        }
    }

    /// Publish `p` for generation `epoch_gen`, unless that generation was aborted.
    pub(super) fn publish(&self, epoch_gen: u64, p: Published) {
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

    /// A free slot, or a new one below `cap`, or a wait for the consumer to release one.
    pub(super) fn acquire_slot(&self, layout: BatchLayout, epoch_gen: u64) -> Result<Wait<Slot>> {
        let t0 = Instant::now();
        let mut g = lock(&self.state);
        loop {
            if g.aborted(epoch_gen) {
                g.waiting_for_slot = false;
                return Ok(Wait::Aborted);
            }
            if let Some(slot) = g.free.pop_front() {
                g.waiting_for_slot = false;
                drop(g);
                Stats::add_since(&self.counters.h2d_wait_slot_ns, t0);
                return Ok(Wait::Got(slot));
            }
            if g.allocated < g.cap {
                g.allocated += 1;
                g.waiting_for_slot = false;
                drop(g);
                Stats::add(&self.counters.device_slots_allocated, 1);
                let made = DeviceMemory::alloc(&self.ctx, layout.total_bytes()).and_then(|mem| {
                    Ok(Slot { mem: std::sync::Arc::new(mem), copy_done: Event::new(&self.ctx)?, released: Vec::new() })
                });
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

    /// Give back a slot whose copy completed but whose batch is not published (e.g. a failed measurement).
    pub(super) fn return_slot(&self, slot: Slot) {
        lock(&self.state).free.push_back(slot);
        self.producer_cv.notify_all();
    }

    /// The next device batch, waiting at most `timeout`.
    pub(super) fn next(&self, timeout: Duration) -> Result<DeviceNext> {
        let t0 = Instant::now();
        let mut g = lock(&self.state);
        loop {
            if let Some(p) = g.ready.pop_front() {
                drop(g);
                self.producer_cv.notify_all();
                Stats::add_since(&self.counters.device_wait_ns, t0);
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
                drop(g);
                Stats::add_since(&self.counters.device_wait_ns, t0);
                return Ok(DeviceNext::Timeout);
            }
            g = self.consumer_cv.wait_timeout(g, timeout - elapsed).unwrap_or_else(|p| p.into_inner()).0;
        }
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
}

impl std::fmt::Debug for DeviceBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBatch").field("lease", &self.lease).finish_non_exhaustive()
    }
}

/// What the consumer's `next` returns.
#[derive(Debug)]
pub enum DeviceNext {
    /// A batch on the device.
    Batch(DeviceBatch),
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
    /// The images (rows × sample_bytes from the 256-aligned image offset).
    Images,
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
            SlotPart::Images => (self.ptr + self.layout.images_offset() as u64, self.rows * self.layout.sample_bytes),
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
        self.shared.return_slot(slot);
    }
}
