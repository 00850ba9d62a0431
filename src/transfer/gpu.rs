//! transfer/gpu — the GPU half of the station (DESIGN.md §2 "Station", "Buffer lifetime", "Topology"):
//! one [`GpuEngine`] per device moves the host station's filled, pinned batches into a ring of device
//! slots and publishes them to the consumer as [`DeviceBatch`]es.
//!
//! Threads and state (one mutex `GpuShared::state`, two condvars; every wait is also woken by stop/close):
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

// transfer/ is an unsafe-allowed module (DESIGN.md §1): three blocks here, each with its SAFETY line.
#![allow(unsafe_code)]

use crate::error::{Result, SampleError, TrdataError};
use crate::export::{ConsumerStream, Device, ExportError, ExportOwner, StreamOrder};
use crate::staging::{BatchLayout, PinningScope};
use crate::stats::Stats;
use crate::topology::{self, Topology};
use crate::transfer::cuda::{self, CUstream, DeviceMemory, Event, GpuContext, Stream};
use crate::transfer::{EpochShape, Station, Take};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Slice of the transfer thread's waits on the host station (it re-checks stop/close in between).
const TAKE_SLICE: Duration = Duration::from_millis(50);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn add(c: &AtomicU64, v: u64) {
    c.fetch_add(v, Ordering::Relaxed);
}

fn add_since(c: &AtomicU64, t0: Instant) {
    add(c, t0.elapsed().as_nanos() as u64);
}

/// H2D counters of all GPU engines of one loader (merged into `loader.stats()`).
#[derive(Debug, Default)]
pub struct GpuCounters {
    /// Time from issuing a batch's H2D copy to its completion event (transfer threads, host clock). Includes
    /// the copy stream's device-side wait for the slot's previous consumers to release it.
    pub h2d_ns: AtomicU64,
    /// Time of the H2D copies alone (device clock: timing events around `cuMemcpyHtoDAsync`, after the
    /// slot-release waits). Always ≤ `h2d_ns`.
    pub h2d_copy_ns: AtomicU64,
    /// Bytes copied host → device.
    pub h2d_bytes: AtomicU64,
    /// Batches copied (epochs' first batches found unpinned are counted in `unpinned_host_buffers`).
    pub h2d_batches: AtomicU64,
    /// Time transfer threads waited for a filled host batch (workers too slow for the copy engine).
    pub h2d_wait_host_ns: AtomicU64,
    /// Time transfer threads waited for a free device slot (consumer holds / trains slower: good).
    pub h2d_wait_slot_ns: AtomicU64,
    /// Time the consumer waited for a device batch (the GPU-path starvation meter).
    pub device_wait_ns: AtomicU64,
    /// Device slots allocated.
    pub device_slots_allocated: AtomicU64,
    /// Epochs whose first host batch was not page-locked (copies from pageable memory: slower).
    pub unpinned_host_buffers: AtomicU64,
}

impl GpuCounters {
    /// (name, value) pairs; names carry their units.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("h2d_ns", g(&self.h2d_ns)),
            ("h2d_copy_ns", g(&self.h2d_copy_ns)),
            ("h2d_bytes", g(&self.h2d_bytes)),
            ("h2d_batches", g(&self.h2d_batches)),
            ("h2d_wait_host_ns", g(&self.h2d_wait_host_ns)),
            ("h2d_wait_slot_ns", g(&self.h2d_wait_slot_ns)),
            ("device_wait_ns", g(&self.device_wait_ns)),
            ("device_slots_allocated", g(&self.device_slots_allocated)),
            ("unpinned_host_buffers", g(&self.unpinned_host_buffers)),
        ]
    }
}

/// Configuration of one GPU engine.
#[derive(Debug, Clone)]
pub struct GpuEngineConfig {
    /// Device ordinal (`cuda:N`).
    pub ordinal: u32,
    /// Engine index within this process (names the thread `trdata-h2d{d}`).
    pub local_engine: usize,
    /// Host batch layout.
    pub layout: BatchLayout,
    /// Host ring depth (≥ 2).
    pub host_depth: usize,
    /// Device ring depth (≥ 2): slots the transfer thread may fill ahead of the consumer.
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
    fn new(ctx: &Arc<GpuContext>) -> Result<Self> {
        Ok(Self {
            stream: Stream::new_non_blocking(ctx)?,
            copy_start: Event::new_timing(ctx)?,
            copy_end: Event::new_timing(ctx)?,
        })
    }
}

struct Slot {
    mem: Arc<DeviceMemory>,
    copy_done: Event,
    /// Release events of the consumers of the slot's previous batch.
    released: Vec<Event>,
}

enum Published {
    Batch(DeviceBatch),
    Failed(TrdataError),
    End,
}

struct GpuState {
    free: VecDeque<Slot>,
    allocated: usize,
    cap: usize,
    ready: VecDeque<Published>,
    /// Epoch generation: bumped by begin/stop.
    epoch_gen: u64,
    /// Pending epoch command for generation `epoch_gen`.
    command: Option<(EpochShape, u64)>,
    /// Generation whose station rewind the thread acknowledged.
    begun: u64,
    waiting_for_slot: bool,
    closed: bool,
}

struct GpuShared {
    ctx: Arc<GpuContext>,
    ordinal: u32,
    state: Mutex<GpuState>,
    /// Wakes the consumer and `begin_epoch`.
    consumer_cv: Condvar,
    /// Wakes the transfer thread.
    producer_cv: Condvar,
    /// Recycled release events (re-recording after the wait was enqueued is allowed: a wait binds to the
    /// record current at enqueue time).
    events: Mutex<Vec<Event>>,
    counters: Arc<GpuCounters>,
}

/// One batch on the device, as the consumer gets it.
pub struct DeviceBatch {
    /// The slot (shared by every DLPack export of the batch).
    pub lease: Arc<SlotLease>,
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

/// A device slot holding one published batch; returns to the engine's ring when the last owner drops,
/// carrying the consumers' release events.
pub struct SlotLease {
    shared: Arc<GpuShared>,
    slot: Mutex<Option<Slot>>,
    ptr: cuda::CUdeviceptr,
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
    /// Device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.shared.ordinal
    }

    /// (device address, bytes) of `part`.
    pub fn part(&self, part: SlotPart) -> (cuda::CUdeviceptr, usize) {
        match part {
            SlotPart::Images => (self.ptr + self.layout.images_offset() as u64, self.rows * self.layout.sample_bytes),
            SlotPart::Labels => (self.ptr + self.layout.labels_offset() as u64, self.rows * 8),
        }
    }

    fn stream_handle(stream: ConsumerStream) -> Option<CUstream> {
        match stream {
            ConsumerStream::CudaLegacyDefault => Some(1usize as CUstream), // CU_STREAM_LEGACY
            ConsumerStream::CudaPerThreadDefault => Some(2usize as CUstream), // CU_STREAM_PER_THREAD
            ConsumerStream::Cuda(h) => Some(h.get() as CUstream),
            ConsumerStream::Host | ConsumerStream::Unsynchronized => None,
        }
    }
}

impl StreamOrder for SlotLease {
    fn consumer_waits(&self, stream: ConsumerStream) -> std::result::Result<(), ExportError> {
        let Some(s) = Self::stream_handle(stream) else { return Ok(()) };
        let g = lock(&self.slot);
        let slot = g.as_ref().expect("a live lease holds its slot");
        // SAFETY: `s` is the consumer's stream from `__dlpack__(stream=…)`, which the DLPack protocol requires to
        // be a live stream on this device (or a special default-stream handle that stream_handle produced).
        unsafe { cuda::wait_event_raw(&self.shared.ctx, s, &slot.copy_done) }
            .map_err(|e| ExportError::StreamOrder(e.to_string()))
    }

    fn consumer_released(&self, stream: ConsumerStream) {
        // stream=-1: the consumer promised to synchronize itself; nothing to record.
        // stream=2 names the *calling thread's* per-thread default stream, and the deleter may run on another
        // thread than the consumer's: record on the legacy default stream instead, which orders after the work
        // of every blocking stream, every thread's per-thread default stream included.
        let stream = match stream {
            ConsumerStream::CudaPerThreadDefault => ConsumerStream::CudaLegacyDefault,
            other => other,
        };
        let Some(s) = Self::stream_handle(stream) else { return };
        let ev = lock(&self.shared.events).pop().map(Ok).unwrap_or_else(|| Event::new(&self.shared.ctx));
        // SAFETY: `s` is a special handle or the raw stream the consumer passed to `__dlpack__`. DLPack does not
        // promise that stream outlives the tensor: a consumer that destroys its stream before freeing the tensor
        // breaks this (documented on `Loader`: keep the stream alive while its tensors live, as torch does).
        let recorded = ev.and_then(|ev| unsafe { ev.record_raw(s) }.map(|()| ev));
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
        let mut g = lock(&self.shared.state);
        g.free.push_back(slot);
        drop(g);
        self.shared.producer_cv.notify_all();
    }
}

/// A DLPack owner viewing one part of a slot on its device.
pub struct DeviceView {
    lease: Arc<SlotLease>,
    ptr: cuda::CUdeviceptr,
    len: usize,
}

impl DeviceView {
    /// View `part` of `lease`.
    pub fn new(lease: Arc<SlotLease>, part: SlotPart) -> Self {
        let (ptr, len) = lease.part(part);
        Self { lease, ptr, len }
    }
}

// SAFETY: the view holds an Arc of the slot lease; while any clone lives the slot is not in the engine's
// free list, so the transfer thread never rewrites it, and its DeviceMemory (an Arc inside the slot) is not
// freed. `ptr..ptr+len` lies inside that allocation (SlotLease::part, rows ≤ layout rows). Dropping the
// last clone pushes the slot back under a short mutex: no GIL, no unbounded wait.
unsafe impl ExportOwner for DeviceView {
    fn device(&self) -> Device {
        Device::Cuda(self.lease.ordinal())
    }
    fn data_ptr(&self) -> *mut c_void {
        self.ptr as usize as *mut c_void
    }
    fn len_bytes(&self) -> usize {
        self.len
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

/// One GPU's transfer engine: host station + transfer thread + device slot ring.
pub struct GpuEngine {
    shared: Arc<GpuShared>,
    station: crate::sync::Arc<Station>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for GpuEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuEngine").field("ordinal", &self.shared.ordinal).finish_non_exhaustive()
    }
}

impl GpuEngine {
    /// Open the device's primary context, create the host station and start the transfer thread.
    pub fn start(cfg: GpuEngineConfig, stats: crate::sync::Arc<Stats>, counters: Arc<GpuCounters>) -> Result<Self> {
        if cfg.host_depth < 2 || cfg.device_slots < 2 {
            return Err(TrdataError::config("device_slots", "host and device rings need ≥ 2 slots each"));
        }
        let ctx = GpuContext::open(cfg.ordinal)?;
        // The transfer thread holds at most one host lease at a time: depth + 1 buffers suffice.
        let station = crate::sync::Arc::new(Station::new(cfg.layout, cfg.host_depth, cfg.host_depth + 1, stats));
        let shared = Arc::new(GpuShared {
            ctx: Arc::clone(&ctx),
            ordinal: cfg.ordinal,
            state: Mutex::new(GpuState {
                free: VecDeque::new(),
                allocated: 0,
                cap: cfg.device_slots + cfg.max_held_batches,
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
        });
        let copy = CopyStream::new(&ctx)?;
        let (sh, st) = (Arc::clone(&shared), crate::sync::Arc::clone(&station));
        let layout = cfg.layout;
        let placement = cfg.placement.clone();
        let thread = std::thread::Builder::new()
            .name(format!("trdata-h2d{}", cfg.local_engine))
            .spawn(move || transfer_main(sh, st, copy, layout, placement))
            .map_err(|e| TrdataError::Worker(format!("cannot spawn transfer thread: {e}")))?;
        Ok(Self { shared, station, thread: Some(thread) })
    }

    /// The host station the workers fill.
    pub fn station(&self) -> &crate::sync::Arc<Station> {
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
    pub fn begin_epoch(&self, shape: EpochShape, first_batch: u64) -> Result<()> {
        let mut g = lock(&self.shared.state);
        let stale: Vec<Published> = g.ready.drain(..).collect();
        g.epoch_gen += 1;
        let epoch_gen = g.epoch_gen;
        g.command = Some((shape, first_batch));
        self.shared.producer_cv.notify_all();
        while g.begun < epoch_gen && !g.closed {
            g = self.shared.consumer_cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        let closed = g.closed;
        drop(g);
        drop(stale); // slot leases lock the state: drop them outside it
        if closed { Err(TrdataError::Closed("the loader is closed".into())) } else { Ok(()) }
    }

    /// Cancel the running epoch: the transfer thread abandons it at its next check.
    pub fn stop(&self) {
        let mut g = lock(&self.shared.state);
        g.epoch_gen += 1;
        g.command = None;
        let stale: Vec<Published> = g.ready.drain(..).collect();
        drop(g);
        drop(stale);
        self.station.stop();
        self.shared.producer_cv.notify_all();
        self.shared.consumer_cv.notify_all();
    }

    /// The next device batch, waiting at most `timeout`.
    pub fn next(&self, timeout: Duration) -> Result<DeviceNext> {
        let t0 = Instant::now();
        let mut g = lock(&self.shared.state);
        loop {
            if let Some(p) = g.ready.pop_front() {
                drop(g);
                self.shared.producer_cv.notify_all();
                add_since(&self.shared.counters.device_wait_ns, t0);
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
                add_since(&self.shared.counters.device_wait_ns, t0);
                return Ok(DeviceNext::Timeout);
            }
            g = self.shared.consumer_cv.wait_timeout(g, timeout - elapsed).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// (free, total) device memory of this engine's device.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        self.shared.ctx.mem_info()
    }

    /// Stop for good and join the transfer thread; idempotent. Published batches stay valid until dropped.
    pub fn close(&mut self) {
        let stale: Vec<Published> = {
            let mut g = lock(&self.shared.state);
            g.closed = true;
            g.epoch_gen += 1;
            g.ready.drain(..).collect()
        };
        drop(stale);
        self.station.close();
        self.shared.producer_cv.notify_all();
        self.shared.consumer_cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for GpuEngine {
    fn drop(&mut self) {
        self.close();
    }
}

/// Outcome of one wait of the transfer thread.
enum Wait<T> {
    Got(T),
    Aborted,
}

fn transfer_main(
    shared: Arc<GpuShared>,
    station: crate::sync::Arc<Station>,
    copy: CopyStream,
    layout: BatchLayout,
    placement: Option<(u32, Vec<usize>)>,
) {
    // Bind before anything is allocated: the station's slabs are allocated (and first touched) by this
    // thread, so they land on the GPU's node. Unknown node or a refused binding → run unbound.
    if let Some((node, cpus)) = &placement {
        let _ = topology::pin_current_thread(cpus);
        let _ = topology::prefer_memory_node(*node);
    }
    let _pinning = PinningScope::enter(Arc::clone(&shared.ctx));
    let mut seen = 0u64;
    loop {
        let (epoch_gen, shape, first_batch) = {
            let mut g = lock(&shared.state);
            loop {
                if g.closed {
                    return;
                }
                if g.epoch_gen > seen {
                    if let Some((shape, first)) = g.command.take() {
                        break (g.epoch_gen, shape, first);
                    }
                    seen = g.epoch_gen; // a stop without a new epoch
                    continue;
                }
                g = shared.producer_cv.wait(g).unwrap_or_else(|p| p.into_inner());
            }
        };
        seen = epoch_gen;
        station.begin_epoch(shape, first_batch);
        {
            let mut g = lock(&shared.state);
            g.begun = g.begun.max(epoch_gen);
        }
        shared.consumer_cv.notify_all();
        if let Err(e) = run_epoch(&shared, &station, &copy, layout, shape, first_batch, epoch_gen) {
            publish(&shared, epoch_gen, Published::Failed(e));
        }
    }
}

fn aborted(g: &GpuState, epoch_gen: u64) -> bool {
    g.closed || g.epoch_gen != epoch_gen
}

fn publish(shared: &GpuShared, epoch_gen: u64, p: Published) {
    let mut g = lock(&shared.state);
    if aborted(&g, epoch_gen) {
        drop(g);
        drop(p);
        return;
    }
    g.ready.push_back(p);
    drop(g);
    shared.consumer_cv.notify_all();
}

fn run_epoch(
    shared: &Arc<GpuShared>,
    station: &crate::sync::Arc<Station>,
    copy: &CopyStream,
    layout: BatchLayout,
    shape: EpochShape,
    first_batch: u64,
    epoch_gen: u64,
) -> Result<()> {
    let counters = &shared.counters;
    for b in first_batch..shape.batches {
        let t_host = Instant::now();
        let (lease, error) = loop {
            if aborted(&lock(&shared.state), epoch_gen) {
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
        add_since(&counters.h2d_wait_host_ns, t_host);
        if b == first_batch && !lease.buffer().is_pinned() {
            add(&counters.unpinned_host_buffers, 1);
        }
        let Wait::Got(mut slot) = acquire_slot(shared, layout, epoch_gen)? else { return Ok(()) };
        let rows = lease.rows;
        let bytes = lease.buffer().used_bytes(rows);
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
            slot.copy_done.record(stream)?;
            slot.copy_done.synchronize()
        })();
        if let Err(e) = copied {
            // The slot's state is unknown (a copy may be in flight): drop it from the ring.
            std::mem::forget(slot.mem);
            return Err(e);
        }
        add_since(&counters.h2d_ns, t0);
        // copy_end precedes copy_done on the same stream, so both timing events have completed.
        let copy_ms = match Event::elapsed_ms(&copy.copy_start, &copy.copy_end) {
            Ok(ms) => ms,
            Err(e) => {
                // The copy did complete: the slot is reusable, only the measurement failed.
                lock(&shared.state).free.push_back(slot);
                return Err(e);
            }
        };
        add(&counters.h2d_copy_ns, (f64::from(copy_ms) * 1e6) as u64);
        add(&counters.h2d_bytes, bytes as u64);
        add(&counters.h2d_batches, 1);
        let (labels, indices) = lease.buffer().labels_and_indices(rows);
        drop(lease); // host buffer back to the workers as soon as the copy is done
        let ptr = slot.mem.ptr();
        let slot_lease = Arc::new(SlotLease {
            shared: Arc::clone(shared),
            slot: Mutex::new(Some(slot)),
            ptr,
            layout,
            leak: AtomicBool::new(false),
            batch: b,
            rows,
            pid: std::process::id(),
        });
        publish(shared, epoch_gen, Published::Batch(DeviceBatch { lease: slot_lease, labels, indices, error }));
    }
    publish(shared, epoch_gen, Published::End);
    Ok(())
}

fn acquire_slot(shared: &Arc<GpuShared>, layout: BatchLayout, epoch_gen: u64) -> Result<Wait<Slot>> {
    let t0 = Instant::now();
    let mut g = lock(&shared.state);
    loop {
        if aborted(&g, epoch_gen) {
            g.waiting_for_slot = false;
            return Ok(Wait::Aborted);
        }
        if let Some(slot) = g.free.pop_front() {
            g.waiting_for_slot = false;
            drop(g);
            add_since(&shared.counters.h2d_wait_slot_ns, t0);
            return Ok(Wait::Got(slot));
        }
        if g.allocated < g.cap {
            g.allocated += 1;
            g.waiting_for_slot = false;
            drop(g);
            add(&shared.counters.device_slots_allocated, 1);
            let made = DeviceMemory::alloc(&shared.ctx, layout.total_bytes()).and_then(|mem| {
                Ok(Slot { mem: Arc::new(mem), copy_done: Event::new(&shared.ctx)?, released: Vec::new() })
            });
            if made.is_err() {
                lock(&shared.state).allocated -= 1;
            }
            return made.map(Wait::Got);
        }
        if !g.waiting_for_slot {
            g.waiting_for_slot = true;
            shared.consumer_cv.notify_all(); // a consumer may now detect "all slots held"
        }
        g = shared.producer_cv.wait(g).unwrap_or_else(|p| p.into_inner());
    }
}

/// CPUs for each worker under `pin="numa"` (DESIGN.md §2 "Topology"): worker w serves local engine
/// w mod E (the static claiming rule) and runs on the allowed CPUs of that engine's GPU's NUMA node,
/// one CPU per worker, round-robin over the node's CPUs. A GPU whose node is unknown (None, the `-1` of
/// the test box) or has no allowed CPU falls back to the seed's round-robin over all allowed CPUs.
/// Pure: the topology is an argument, so multi-socket layouts are tested synthetically.
pub fn numa_worker_plan(workers: usize, gpu_nodes: &[Option<u32>], topo: &Topology) -> Vec<Option<usize>> {
    let engines = gpu_nodes.len().max(1);
    (0..workers)
        .map(|w| {
            let e = w % engines;
            let j = w / engines;
            let node_cpus =
                gpu_nodes.get(e).copied().flatten().map(|n| topo.allowed_cpus_of_node(n)).unwrap_or_default();
            if !node_cpus.is_empty() {
                // Engines sharing a node interleave over its CPUs instead of stacking on the same ones.
                let sharing: Vec<usize> =
                    (0..engines).filter(|&x| gpu_nodes.get(x).copied().flatten() == gpu_nodes[e]).collect();
                let rank = sharing.iter().position(|&x| x == e).unwrap_or(0);
                let k = j * sharing.len() + rank;
                Some(node_cpus[k % node_cpus.len()])
            } else if topo.allowed_cpus.is_empty() {
                None
            } else {
                Some(topo.allowed_cpus[w % topo.allowed_cpus.len()])
            }
        })
        .collect()
}

/// Where GPU `gpu_node`'s staging thread binds: (node, its allowed CPUs), or None (unknown node, or no
/// allowed CPU there) → allocate unbound, never fail.
pub fn staging_placement(gpu_node: Option<u32>, topo: &Topology) -> Option<(u32, Vec<usize>)> {
    let node = gpu_node?;
    let cpus = topo.allowed_cpus_of_node(node);
    (!cpus.is_empty()).then_some((node, cpus))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::NumaNode;

    /// 2 packages × 2 NUMA nodes × 8 CPUs (node n = CPUs 8n..8n+8), 8 GPUs two per node.
    fn two_socket_four_nodes() -> (Topology, Vec<Option<u32>>) {
        let numa_nodes =
            (0..4u32).map(|n| NumaNode { os_index: n, cpus: (8 * n as usize..8 * n as usize + 8).collect() }).collect();
        let topo = Topology { numa_nodes, allowed_cpus: (0..32).collect(), source: "synthetic" };
        let gpus = (0..8u32).map(|g| Some(g / 2)).collect();
        (topo, gpus)
    }

    #[test]
    fn numa_plan_keeps_each_engines_workers_on_its_gpus_node() {
        let (topo, gpus) = two_socket_four_nodes();
        for workers in [8, 16, 32, 37] {
            let plan = numa_worker_plan(workers, &gpus, &topo);
            assert_eq!(plan.len(), workers);
            for (w, cpu) in plan.iter().enumerate() {
                let cpu = cpu.expect("every worker bound");
                let node = gpus[w % 8].unwrap();
                assert_eq!(topo.node_of_cpu(cpu), Some(node), "worker {w} (engine {}) on cpu {cpu}", w % 8);
            }
            // The two GPUs of a node use disjoint CPUs while the node has enough of them (32 workers = 4 per
            // GPU, 8 per node of 8 CPUs: every CPU used exactly once).
            if workers == 32 {
                let mut used: Vec<usize> = plan.iter().map(|c| c.unwrap()).collect();
                used.sort();
                assert_eq!(used, (0..32).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn unknown_or_cpuless_nodes_fall_back_to_round_robin() {
        let (mut topo, _) = two_socket_four_nodes();
        // GPU 0 reports -1 (None), GPU 1 sits on node 3 whose CPUs are outside the cpuset.
        topo.allowed_cpus = (0..24).collect();
        let gpus = vec![None, Some(3)];
        let plan = numa_worker_plan(6, &gpus, &topo);
        assert_eq!(plan, (0..6).map(|w| Some(w % 24)).collect::<Vec<_>>());
        assert_eq!(staging_placement(None, &topo), None);
        assert_eq!(staging_placement(Some(3), &topo), None);
        assert_eq!(staging_placement(Some(1), &topo), Some((1, (8..16).collect())));
        // No allowed CPUs at all: unbound.
        topo.allowed_cpus.clear();
        assert_eq!(numa_worker_plan(2, &[None], &topo), vec![None, None]);
    }

    #[test]
    fn staging_for_each_gpu_is_placed_on_its_node() {
        let (topo, gpus) = two_socket_four_nodes();
        for (g, node) in gpus.iter().enumerate() {
            let (n, cpus) = staging_placement(*node, &topo).expect("known node");
            assert_eq!(n, g as u32 / 2);
            assert!(cpus.iter().all(|&c| topo.node_of_cpu(c) == Some(n)));
            // Package of the staging node = package of the GPU (nodes 0,1 → package 0; 2,3 → package 1).
            assert_eq!(n / 2, g as u32 / 4);
        }
    }

    #[test]
    fn counters_snapshot_names_units() {
        let c = GpuCounters::default();
        add(&c.h2d_bytes, 5);
        let s = c.snapshot();
        assert!(s.contains(&("h2d_bytes", 5)));
        assert!(s.iter().any(|(k, _)| *k == "h2d_ns"));
        assert!(s.iter().any(|(k, _)| *k == "h2d_copy_ns"));
    }
}
