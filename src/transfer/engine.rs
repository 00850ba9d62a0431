//! transfer/engine — the GPU half of the station (docs/design/protocols.md "Station", "Buffer lifetime", "Topology"):
//! one [`GpuEngine`] per device moves the host station's filled, pinned batches into its ring of device
//! slots ([`ring`](super::ring): slots, publication, leases) and publishes them to the consumer as
//! [`DeviceBatch`]es.
//!
//! Threads and state (one mutex `RingShared::state`, two condvars; every wait is also woken by stop/close):
//! - transfer thread `trdata-h2d{g}` (bound to device g's NUMA node when known, pinning scope entered, so
//!   the station's lazily allocated host slabs are pinned and node-local): waits for an epoch command →
//!   `Station::begin_epoch` → for b in 0..batches: `Station::take(b)` (50 ms slices, checks the epoch
//!   generation) → wait for a free device slot (or allocate one below `cap`) → `cuStreamWaitEvent(copy,
//!   released_i)` for every consumer release event of the slot's previous batch (device-side: the CPU
//!   never waits for the training loop) → record the engine's timing event `copy_start` → one
//!   `cuMemcpyHtoDAsync` of the slab's used bytes → record the timing event `copy_end` → record the slot's
//!   copy event → `cuEventSynchronize` it (this thread only) → `cuEventElapsedTime(copy_start, copy_end)`
//!   → drop the host lease (the host buffer goes back to the workers now) → push the batch onto `ready`
//!   and wake the consumer.
//! - consumer (`next`): waits on `ready` in the caller's slices. If `ready` is empty while the transfer
//!   thread waits for a slot and every slot is held by the consumer, waiting could never end: it gets
//!   `AllSlotsHeld` instead of a hang (as the host station's `AllBuffersHeld`).
//! - slot lease ([`SlotLease`], shared by the batch's DLPack exports): `consumer_waits(s)` =
//!   `cuStreamWaitEvent(s, copy_done)`; `consumer_released(s)` = record a pooled event on s, kept with the
//!   lease; when the last owner drops, the slot and its release events go back to `free` (FIFO) and the
//!   transfer thread is woken. A release event that cannot be recorded leaks the slot (never reused).
//! - epochs are generations: `begin_epoch` bumps `epoch_gen` (which aborts a running epoch loop at its next
//!   check) and waits for the thread's acknowledgement that the station was rewound; batches of an old
//!   generation are never published. `stop` bumps `epoch_gen` too; `close` wakes everything and joins.
//!
//! Copy timers (in [`GpuCounters`]): `h2d_ns` is host wall time from enqueuing a batch's slot waits and
//! copy to the copy event's completion, so it *includes* the device-side wait for the slot's previous
//! consumers to release it (inside a training loop that is most of it: the copy stream idles until the
//! consumer's kernels reading the slot finish). `h2d_copy_ns` is the copy alone, timed on the device by
//! two timing events recorded on the copy stream right before and right after `cuMemcpyHtoDAsync` (after
//! the waits), so `h2d_copy_ns ≤ h2d_ns`. The timing events are the engine's (one pair, reused per batch);
//! consumers only ever wait on the slot's untimed `copy_done` event.
//!
//! Memory ordering: all state is under the mutex; the copy's completion is established by
//! `cuEventSynchronize` before publication, and device-side by the consumer stream's wait.

// transfer/ is an unsafe-allowed module (docs/design/architecture.md "House style"): the H2D copy below, with its SAFETY line.
#![allow(unsafe_code)]

use super::ring::{DeviceBatch, DeviceNext, Published, RingShared, SlotLease, Wait};
use crate::cuda::{Event, GpuContext, Stream};
use crate::error::{Result, TrdataError};
use crate::gpu_decode::{CpuFallback, GpuRows};
use crate::staging::{BatchLayout, PinningScope};
use crate::stats::{GpuCounters, Stats};
use crate::sync::{Arc, Mutex, lock};
use crate::topology;
use crate::transfer::{EpochShape, Station, Take};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Slice of the transfer thread's waits on the host station (it re-checks stop/close in between).
const TAKE_SLICE: Duration = Duration::from_millis(50);

/// Configuration of one GPU engine.
#[derive(Debug, Clone)]
pub struct GpuEngineConfig {
    /// Device ordinal (`cuda:N`).
    pub ordinal: u32,
    /// Engine index within this process (names the thread `trdata-h2d{d}`).
    pub local_engine: usize,
    /// Host batch layout.
    pub layout: BatchLayout,
    /// Host ring depth (`prefetch`, ≥ 2: config.rs checks it).
    pub host_depth: usize,
    /// Device ring depth (`device_slots`, ≥ 2: config.rs checks it): slots the transfer thread may fill ahead
    /// of the consumer.
    pub device_slots: usize,
    /// Batches the consumer may hold beyond the device ring before the transfer thread waits.
    pub max_held_batches: usize,
    /// Where to bind the transfer thread (and so the host staging): NUMA node and its CPUs.
    pub placement: Option<(u32, Vec<usize>)>,
}

/// The transfer thread's copy stream and its pair of timing events around each copy (reused: the thread
/// synchronizes each copy before the next one records them again).
struct CopyStream {
    stream: Stream,
    copy_start: Event,
    copy_end: Event,
}

impl CopyStream {
    fn new(ctx: &std::sync::Arc<GpuContext>) -> Result<Self> {
        Ok(Self {
            // High priority, for the GPU decode path's resample kernels (gpu_decode/rows.rs; a plain copy does not
            // care).
            stream: Stream::new_high_priority(ctx)?,
            copy_start: Event::new_timing(ctx)?,
            copy_end: Event::new_timing(ctx)?,
        })
    }
}

/// One GPU's transfer engine: host station + transfer thread + device slot ring.
pub struct GpuEngine {
    shared: Arc<RingShared>,
    station: Arc<Station>,
    thread: Option<JoinHandle<()>>,
    /// The CPU fallback of the running epoch's GPU rows (set by `begin_epoch`, read by the transfer thread).
    fallback: std::sync::Arc<Mutex<Option<std::sync::Arc<dyn CpuFallback>>>>,
}

impl std::fmt::Debug for GpuEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuEngine").field("ordinal", &self.shared.ordinal).finish_non_exhaustive()
    }
}

impl GpuEngine {
    /// Create the host station on `ctx`'s device (the primary context, opened by the caller) and start the
    /// transfer thread; `gpu_rows` is the engine's GPU decode path when on (gpu_decode/rows.rs, started by the
    /// caller on `ctx`), which the transfer thread drives per batch.
    pub fn start(
        cfg: GpuEngineConfig,
        ctx: std::sync::Arc<GpuContext>,
        gpu_rows: Option<GpuRows>,
        stats: Arc<Stats>,
        counters: std::sync::Arc<GpuCounters>,
    ) -> Result<Self> {
        // The transfer thread holds at most one host lease at a time: depth + 1 buffers suffice.
        let station = Arc::new(Station::new(cfg.layout, cfg.host_depth, cfg.host_depth + 1, Arc::clone(&stats)));
        let cap = cfg.device_slots + cfg.max_held_batches;
        let shared = Arc::new(RingShared::new(std::sync::Arc::clone(&ctx), cfg.ordinal, cap, counters));
        let copy = CopyStream::new(&ctx)?;
        let fallback: std::sync::Arc<Mutex<Option<std::sync::Arc<dyn CpuFallback>>>> =
            std::sync::Arc::new(Mutex::new(None));
        let (sh, st, fb) = (Arc::clone(&shared), Arc::clone(&station), std::sync::Arc::clone(&fallback));
        let layout = cfg.layout;
        let placement = cfg.placement.clone();
        let thread = std::thread::Builder::new()
            .name(format!("trdata-h2d{}", cfg.local_engine))
            .spawn(move || transfer_main(sh, st, copy, layout, placement, gpu_rows, fb))
            .map_err(|e| TrdataError::Worker(format!("cannot spawn transfer thread: {e}")))?;
        Ok(Self { shared, station, thread: Some(thread), fallback })
    }

    /// The host station the workers fill.
    pub fn station(&self) -> &Arc<Station> {
        &self.station
    }

    /// Device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.shared.ordinal
    }

    /// Start an epoch: the transfer thread rewinds the station (allocating its pinned slabs on first use)
    /// and then copies batches first_batch.. as they fill. Returns once the station is rewound. The caller guarantees
    /// no worker is inside a previous epoch (`Station::stop` + pool idle).
    ///
    /// `first_batch` > 0 resumes an interrupted epoch there (the station's ring starts at it).
    ///
    /// `fallback` makes the GPU rows the GPU could not decode on the CPU (the epoch's worker code).
    pub fn begin_epoch(
        &self,
        shape: EpochShape,
        first_batch: u64,
        fallback: Option<std::sync::Arc<dyn CpuFallback>>,
    ) -> Result<()> {
        *lock(&self.fallback) = fallback;
        self.shared.core.begin(shape, first_batch)
    }

    /// Cancel the running epoch: the transfer thread abandons it at its next check.
    pub fn stop(&self) {
        self.shared.core.stop(false);
        self.station.stop();
    }

    /// The next device batch, waiting at most `timeout`.
    pub fn next(&self, timeout: Duration) -> Result<DeviceNext> {
        self.shared.next(timeout)
    }

    /// (free, total) device memory of this engine's device.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        self.shared.ctx.mem_info()
    }

    /// Stop for good and join the transfer thread; idempotent. Published batches stay valid until dropped.
    pub fn close(&mut self) {
        self.shared.core.stop(true);
        self.station.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join(); // the thread closed the GPU decode path on its way out (`transfer_main`)
        }
    }
}

impl Drop for GpuEngine {
    fn drop(&mut self) {
        self.close();
    }
}

fn transfer_main(
    shared: Arc<RingShared>,
    station: Arc<Station>,
    copy: CopyStream,
    layout: BatchLayout,
    placement: Option<(u32, Vec<usize>)>,
    mut gpu_rows: Option<GpuRows>,
    fallback: std::sync::Arc<Mutex<Option<std::sync::Arc<dyn CpuFallback>>>>,
) {
    // Bind before anything is allocated: the station's slabs are allocated (and first touched) by this
    // thread, so they land on the GPU's node. Unknown node or a refused binding → run unbound.
    if let Some((node, cpus)) = &placement {
        let _ = topology::pin_current_thread(cpus);
        let _ = topology::prefer_memory_node(*node);
    }
    let _pinning = PinningScope::enter(std::sync::Arc::clone(&shared.ctx));
    let mut seen = 0u64;
    while let Some((epoch_gen, shape, first_batch)) = shared.core.next_command(&mut seen) {
        station.begin_epoch(shape, first_batch);
        if let Some(g) = &gpu_rows {
            g.reset(); // no worker and no kernel of the old epoch runs now (gpu_decode/queue.rs protocol)
        }
        let fb = lock(&fallback).clone();
        shared.core.acknowledge(epoch_gen);
        let gpu = gpu_rows.as_mut().zip(fb);
        if let Err(e) = run_epoch(&shared, &station, &copy, layout, shape, first_batch, epoch_gen, gpu) {
            shared.core.publish(epoch_gen, Published::Failed(e));
        }
    }
    // Closed: stop and join the GPU decode threads, after this thread's last wait for them (gpu_decode/path.rs
    // `close`; workers that still submit only queue).
    if let Some(g) = &gpu_rows {
        g.close();
    }
}

#[allow(clippy::too_many_arguments)]
fn run_epoch(
    shared: &Arc<RingShared>,
    station: &Arc<Station>,
    copy: &CopyStream,
    layout: BatchLayout,
    shape: EpochShape,
    first_batch: u64,
    epoch_gen: u64,
    mut gpu: Option<(&mut GpuRows, std::sync::Arc<dyn CpuFallback>)>,
) -> Result<()> {
    let counters = &shared.counters;
    for b in first_batch..shape.batches {
        let t_host = Instant::now();
        let (lease, error) = loop {
            if lock(&shared.core.state).aborted(epoch_gen) {
                return Ok(());
            }
            match Station::take(station, b, TAKE_SLICE) {
                Take::Ready(lease, error) => break (lease, error),
                Take::Timeout => continue,
                Take::Stopped => return Ok(()),
                Take::Poisoned(e) => return Err(e),
                Take::AllBuffersHeld { held } => {
                    return Err(TrdataError::Worker(format!("transfer thread found all {held} host buffers held")));
                }
            }
        };
        let cpu_wait = t_host.elapsed();
        Stats::add_since(&counters.h2d_wait_host_ns, t_host);
        // The batch's GPU rows: every task of b was submitted before its row completed (gpu_decode/queue.rs
        // protocol).
        let t_gpu = Instant::now();
        let decoded = match &gpu {
            None => Default::default(),
            Some((g, _)) => {
                let Some(d) = g.wait_batch(b, || lock(&shared.core.state).aborted(epoch_gen)) else {
                    return Ok(());
                };
                d
            }
        };
        let gpu_wait = t_gpu.elapsed();
        Stats::add(&counters.decode_gpu_wait_ns, gpu_wait.as_nanos() as u64);
        let mut error = error;
        if b == first_batch && !lease.buffer().is_pinned() {
            Stats::add(&counters.unpinned_host_buffers, 1);
        }
        let Wait::Got(mut slot) = shared.acquire_slot(layout, epoch_gen)? else { return Ok(()) };
        let rows = lease.rows;
        let bytes = lease.buffer().used_bytes(rows);
        let mut patches: Vec<crate::gpu_decode::Patch> = Vec::new();
        let t0 = Instant::now();
        let stream = &copy.stream;
        let copied = (|| -> Result<()> {
            for ev in slot.released.drain(..) {
                stream.wait_event(&ev)?;
                lock(&shared.events).push(ev);
            }
            // Timed after the waits: the stream reaches copy_start only once the slot is released.
            copy.copy_start.record(stream)?;
            // SAFETY: the host lease keeps the slab alive and out of the workers' hands until after the
            // synchronize below; the slot's allocation holds layout.total_bytes() ≥ bytes.
            unsafe { stream.copy_htod_async(slot.mem.ptr(), lease.buffer().slab_ptr(), bytes) }?;
            copy.copy_end.record(stream)?;
            if let Some((g, fb)) = gpu.as_mut() {
                // After the copy on the same stream: the copy carried the GPU rows' unwritten host bytes.
                let t = Instant::now();
                // SAFETY: the slot's allocation holds layout.total_bytes() and stays this thread's (the slot is
                // not returned or published) until after copy_done is synchronized below, or it is leaked.
                unsafe { g.finish(fb.as_ref(), &decoded, slot.mem.ptr(), layout, stream, &mut error, &mut patches) }?;
                Stats::add_since(&counters.decode_gpu_finish_ns, t);
            }
            slot.copy_done.record(stream)?;
            slot.copy_done.synchronize()
        })();
        if let Some((g, _)) = &gpu {
            g.release(b); // the kernels reading b's arena completed (or never ran)
        }
        if let Err(e) = copied {
            // The slot's state is unknown (a copy may be in flight): drop it from the ring.
            std::mem::forget(slot.mem);
            return Err(e);
        }
        Stats::add_since(&counters.h2d_ns, t0);
        // copy_end precedes copy_done on the same stream, so both timing events have completed.
        let copy_ms = match Event::elapsed_ms(&copy.copy_start, &copy.copy_end) {
            Ok(ms) => ms,
            Err(e) => {
                // The copy did complete: the slot is reusable, only the measurement failed.
                shared.core.return_slot(slot);
                return Err(e);
            }
        };
        Stats::add(&counters.h2d_copy_ns, (f64::from(copy_ms) * 1e6) as u64);
        Stats::add(&counters.h2d_bytes, bytes as u64);
        Stats::add(&counters.h2d_batches, 1);
        let (mut labels, mut indices) = lease.buffer().labels_and_indices(rows);
        let mut fields = lease.buffer().take_fields(rows);
        for (row, label, index, row_fields) in patches {
            (labels[row], indices[row], fields[row]) = (label, index, row_fields);
        }
        drop(lease); // host buffer back to the workers as soon as the copy is done
        if let Some((g, _)) = &gpu {
            // Starved: nothing published is waiting for the consumer (and it did not keep the slots busy).
            let starved = shared.core.ready_len() == 0;
            g.adjust(starved, cpu_wait, gpu_wait);
        }
        let slot_lease = std::sync::Arc::new(SlotLease::new(Arc::clone(shared), slot, layout, b, rows));
        shared
            .core
            .publish(epoch_gen, Published::Batch(DeviceBatch { lease: slot_lease, labels, indices, error, fields }));
    }
    shared.core.publish(epoch_gen, Published::End);
    Ok(())
}
