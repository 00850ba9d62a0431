//! Thin RAII wrappers over the CUDA driver calls the GPU path needs: the device's primary context, a
//! non-blocking copy stream, events, device allocations, page-locked host buffers, host-memory registration
//! and the raw async copy. Every failure becomes `TrdataError::Cuda { call, .. }` naming the driver call.
//!
//! Current-context discipline: the primary context is shared with torch, and torch's runtime reads
//! the calling thread's *current* context to decide which device is "current". So every call here
//! runs inside [`GpuContext::scoped`], which makes our context current and puts the previous one
//! back afterwards — a deleter running on a torch thread must not switch that thread's device.
//!
//! Only call these after [`super::probe()`] said CUDA is available (module rule 1): then the library
//! is loaded and every symbol resolved, so cudarc cannot panic inside them.

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::{CudaContext, DriverError, result, sys};

use super::probe::{CudaProbe, probe};
use crate::error::{Result, TrdataError};

/// `TrdataError::Cuda` naming `call`.
pub fn cuda_error(call: &str, e: impl std::fmt::Display) -> TrdataError {
    TrdataError::Cuda { call: call.to_owned(), message: e.to_string() }
}

fn check(call: &'static str, r: std::result::Result<(), DriverError>) -> Result<()> {
    r.map_err(|e| cuda_error(call, e))
}

/// Check that CUDA device `ordinal` exists, without creating a context (used at Loader construction).
pub fn check_device(ordinal: u32) -> Result<()> {
    match probe() {
        CudaProbe::Unavailable { reason } => Err(cuda_error("cuInit", format!("CUDA is not available: {reason}"))),
        CudaProbe::Available { devices, .. } if ordinal as usize >= devices.len() => Err(cuda_error(
            "cuDeviceGet",
            format!("device cuda:{ordinal} does not exist ({} visible device(s))", devices.len()),
        )),
        CudaProbe::Available { .. } => Ok(()),
    }
}

/// NUMA node of device `ordinal` as probed (None when unknown or CUDA is absent).
pub fn device_numa_node(ordinal: u32) -> Option<u32> {
    probe().devices().get(ordinal as usize).and_then(|d| d.numa_node)
}

/// The primary context of one device (retained; released when the last clone drops).
pub struct GpuContext {
    ctx: ManuallyDrop<Arc<CudaContext>>,
    ordinal: u32,
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext").field("ordinal", &self.ordinal).finish()
    }
}

/// Restores the thread's previous current context when dropped.
struct CurrentGuard {
    previous: Option<sys::CUcontext>,
    changed: bool,
}

impl CurrentGuard {
    fn enter(ctx: sys::CUcontext) -> Result<Self> {
        let previous = result::ctx::get_current().map_err(|e| cuda_error("cuCtxGetCurrent", e))?;
        let changed = previous != Some(ctx);
        if changed {
            // SAFETY: `ctx` is a retained primary context (kept alive by the GpuContext that called us).
            unsafe { result::ctx::set_current(ctx) }.map_err(|e| cuda_error("cuCtxSetCurrent", e))?;
        }
        Ok(Self { previous, changed })
    }
}

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        if self.changed {
            // SAFETY: `previous` was current on this thread a moment ago (or null = none), so it is a
            // context someone keeps alive; setting null just unbinds.
            let _ = unsafe { result::ctx::set_current(self.previous.unwrap_or(std::ptr::null_mut())) };
        }
    }
}

impl GpuContext {
    /// Retain device `ordinal`'s primary context (the one torch uses). The calling thread's current
    /// context is left as it was.
    pub fn open(ordinal: u32) -> Result<Arc<Self>> {
        check_device(ordinal)?;
        let previous = result::ctx::get_current().map_err(|e| cuda_error("cuCtxGetCurrent", e))?;
        let made = catch_unwind(AssertUnwindSafe(|| CudaContext::new(ordinal as usize)))
            .map_err(|_| {
                cuda_error("cuDevicePrimaryCtxRetain", "the CUDA driver panicked (bindings newer than the driver?)")
            })?
            .map_err(|e| cuda_error("cuDevicePrimaryCtxRetain", e));
        // CudaContext::new made its context current; put the caller's back.
        // SAFETY: `previous` was current on this thread before the call (or null).
        let _ = unsafe { result::ctx::set_current(previous.unwrap_or(std::ptr::null_mut())) };
        Ok(Arc::new(Self { ctx: ManuallyDrop::new(made?), ordinal }))
    }

    /// Device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// Run `f` with this context current, restoring the thread's previous context afterwards.
    pub fn scoped<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let _guard = CurrentGuard::enter(self.ctx.cu_ctx())?;
        f()
    }

    /// (free, total) device memory in bytes (`cuMemGetInfo`).
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        self.scoped(|| {
            let (mut free, mut total) = (0usize, 0usize);
            // SAFETY: both out-pointers are valid, writable usizes; our context is current.
            check("cuMemGetInfo", unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) }.result())?;
            Ok((free, total))
        })
    }
}

impl Drop for GpuContext {
    fn drop(&mut self) {
        // cudarc's CudaContext::drop binds the context to this thread before releasing it; keep the
        // caller's current context (this may run in a DLPack deleter on a torch thread).
        let previous = result::ctx::get_current().ok().flatten();
        // SAFETY: `ctx` is not used after this point (we are in drop).
        unsafe { ManuallyDrop::drop(&mut self.ctx) };
        // SAFETY: `previous` was current before the release; if it was our primary context, torch still
        // retains it (the primary context outlives our release while anyone holds it), else it is another
        // live context.
        let _ = unsafe { result::ctx::set_current(previous.unwrap_or(std::ptr::null_mut())) };
    }
}

/// A non-blocking stream of one context (destroyed on drop).
#[derive(Debug)]
pub struct Stream {
    raw: sys::CUstream,
    ctx: Arc<GpuContext>,
}

// SAFETY: a CUstream handle may be used from any thread; we always make its context current first.
unsafe impl Send for Stream {}
// SAFETY: as above; the driver serializes calls on one stream internally.
unsafe impl Sync for Stream {}

impl Stream {
    /// `cuStreamCreate(CU_STREAM_NON_BLOCKING)`: no implicit sync with the legacy default stream, so our
    /// copies never wait for the training loop's kernels on stream 0 (and vice versa).
    pub fn new_non_blocking(ctx: &Arc<GpuContext>) -> Result<Self> {
        Self::create(ctx, false)
    }

    /// [`Self::new_non_blocking`] at the device's highest stream priority: its kernels are scheduled before those
    /// of normal-priority streams (the training loop's) whenever both wait for SMs. For the GPU decode path's
    /// short kernels, which a busy model would otherwise delay by whole kernels.
    pub fn new_high_priority(ctx: &Arc<GpuContext>) -> Result<Self> {
        Self::create(ctx, true)
    }

    fn create(ctx: &Arc<GpuContext>, high: bool) -> Result<Self> {
        let raw = ctx.scoped(|| {
            let mut s: sys::CUstream = std::ptr::null_mut();
            let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
            let (mut least, mut greatest) = (0, 0);
            if high {
                // SAFETY: valid out-pointers; our context is current.
                let rc = unsafe { sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) };
                check("cuCtxGetStreamPriorityRange", rc.result())?;
            }
            // SAFETY: `s` is a valid out-pointer; our context is current; `greatest` is in the device's range
            // (0 = the default priority when `high` is false).
            let rc = unsafe { sys::cuStreamCreateWithPriority(&mut s, flags, greatest) };
            check("cuStreamCreateWithPriority", rc.result())?;
            Ok(s)
        })?;
        Ok(Self { raw, ctx: Arc::clone(ctx) })
    }

    /// The raw handle.
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// `cuStreamWaitEvent(self, event)`: later work on this stream starts after `event` (device side).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        // SAFETY: self.raw is this Stream's own live handle, created in self.ctx.
        unsafe { wait_event_raw(&self.ctx, self.raw, event) }
    }

    /// `cuStreamSynchronize`: wait until every operation enqueued on this stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: self.raw is this Stream's own live handle, created in self.ctx (made current by scoped).
        self.ctx.scoped(|| check("cuStreamSynchronize", unsafe { result::stream::synchronize(self.raw) }))
    }

    /// `cuMemcpyHtoDAsync(dst, src, bytes)` on this stream.
    ///
    /// # Safety
    /// `src` must stay valid and unmodified until the copy completed (synchronize an event recorded after
    /// it), and `dst..dst+bytes` must lie inside a live device allocation of this context.
    pub unsafe fn copy_htod_async(&self, dst: sys::CUdeviceptr, src: *const u8, bytes: usize) -> Result<()> {
        self.ctx.scoped(|| {
            // SAFETY: forwarded from the caller's contract; the stream belongs to the current context.
            check(
                "cuMemcpyHtoDAsync",
                unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast::<c_void>(), bytes, self.raw) }.result(),
            )
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: created by cuStreamCreate and destroyed once; pending work completes before the driver
        // frees the stream's resources.
        let _ = self.ctx.scoped(|| check("cuStreamDestroy", unsafe { result::stream::destroy(raw) }));
    }
}

/// `cuStreamWaitEvent(stream, event)` with `ctx` current (so the special handles 0x1 = legacy default
/// and 0x2 = per-thread default stream mean *this* context's streams).
///
/// # Safety
/// `stream` must be a live stream of `ctx` or one of the special handles 0x1/0x2 (a DLPack consumer's
/// promise for the stream it passes to `__dlpack__`).
pub unsafe fn wait_event_raw(ctx: &GpuContext, stream: sys::CUstream, event: &Event) -> Result<()> {
    ctx.scoped(|| {
        // SAFETY: `event` is a live event of this context (Event owns it); `stream` is a live stream handle
        // of this context or one of the documented special handles (the caller's contract, as DLPack's).
        check("cuStreamWaitEvent", unsafe {
            result::stream::wait_event(stream, event.raw, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
        })
    })
}

/// An event of one context. [`Event::new`] creates it with timing disabled (the cheapest kind, for ordering
/// and waiting); [`Event::new_timing`] keeps timing on, for [`Event::elapsed_ms`].
#[derive(Debug)]
pub struct Event {
    raw: sys::CUevent,
    ctx: Arc<GpuContext>,
}

// SAFETY: CUevent handles may be used from any thread; calls make the owning context current.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// `cuEventCreate(CU_EVENT_DISABLE_TIMING)`.
    pub fn new(ctx: &Arc<GpuContext>) -> Result<Self> {
        let raw = ctx.scoped(|| {
            result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                .map_err(|e| cuda_error("cuEventCreate", e))
        })?;
        Ok(Self { raw, ctx: Arc::clone(ctx) })
    }

    /// `cuEventCreate(CU_EVENT_DEFAULT)`: a timing event (records a GPU timestamp; costs more than
    /// [`Event::new`]'s, so only for measurements).
    pub fn new_timing(ctx: &Arc<GpuContext>) -> Result<Self> {
        let raw = ctx.scoped(|| {
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(|e| cuda_error("cuEventCreate", e))
        })?;
        Ok(Self { raw, ctx: Arc::clone(ctx) })
    }

    /// `cuEventElapsedTime(start, end)`: milliseconds between two completed timing events
    /// ([`Event::new_timing`]) of the same context. Fails (`CUDA_ERROR_INVALID_HANDLE`) if either was created
    /// with timing disabled, (`CUDA_ERROR_NOT_READY`) if either has not completed yet.
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32> {
        let (s, e) = (start.raw, end.raw);
        end.ctx.scoped(|| {
            // SAFETY: both handles were created by cuEventCreate and are live (owned by the borrowed Events);
            // the driver checks the timing flag, completion and context itself and reports them as errors.
            unsafe { result::event::elapsed(s, e) }.map_err(|err| cuda_error("cuEventElapsedTime", err))
        })
    }

    /// `cuEventRecord(self, stream)`.
    ///
    /// # Safety
    /// `stream` must be a live stream of this event's context or a special handle (0x1, 0x2).
    pub unsafe fn record_raw(&self, stream: sys::CUstream) -> Result<()> {
        let raw = self.raw;
        // SAFETY: forwarded from the caller; the event is live (owned).
        self.ctx.scoped(|| check("cuEventRecord", unsafe { result::event::record(raw, stream) }))
    }

    /// `cuEventRecord(self, stream)` on one of our streams.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        // SAFETY: `stream` is a live Stream (borrowed) of a context; callers pass streams of this context.
        unsafe { self.record_raw(stream.raw) }
    }

    /// `cuEventSynchronize`: block the calling thread until the event completed.
    pub fn synchronize(&self) -> Result<()> {
        let raw = self.raw;
        // SAFETY: the event is live (owned).
        self.ctx.scoped(|| check("cuEventSynchronize", unsafe { result::event::synchronize(raw) }))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: created by cuEventCreate and destroyed once. Destroying a recorded but incomplete event is
        // allowed: the driver releases it once the device reached it, and waits already enqueued on it stay
        // valid.
        let _ = self.ctx.scoped(|| check("cuEventDestroy", unsafe { result::event::destroy(raw) }));
    }
}

/// A device allocation (`cuMemAlloc`), freed on drop.
#[derive(Debug)]
pub struct DeviceMemory {
    ptr: sys::CUdeviceptr,
    len: usize,
    ctx: Arc<GpuContext>,
}

// SAFETY: a device address is plain data usable from any thread; freeing makes its context current.
unsafe impl Send for DeviceMemory {}
// SAFETY: as above; &DeviceMemory only reads ptr/len.
unsafe impl Sync for DeviceMemory {}

impl DeviceMemory {
    /// Allocate `len` ≥ 1 bytes on the context's device.
    pub fn alloc(ctx: &Arc<GpuContext>, len: usize) -> Result<Self> {
        let len = len.max(1);
        // SAFETY: malloc_sync only writes the new pointer; our context is current.
        let ptr = ctx.scoped(|| unsafe { result::malloc_sync(len) }.map_err(|e| cuda_error("cuMemAlloc", e)))?;
        Ok(Self { ptr, len, ctx: Arc::clone(ctx) })
    }

    /// Device address.
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ctx.ordinal
    }

    /// Copy `src` to byte `offset` of this allocation (`cuMemcpyHtoD`, synchronous).
    pub fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<()> {
        if offset.checked_add(src.len()).is_none_or(|end| end > self.len) {
            return Err(cuda_error(
                "cuMemcpyHtoD",
                format!("{} bytes at {offset} written to a {}-byte allocation", src.len(), self.len),
            ));
        }
        self.ctx.scoped(|| {
            // SAFETY: `src` is readable for its length, and offset..offset+len lies inside this live allocation
            // (checked above).
            check("cuMemcpyHtoD", unsafe { result::memcpy_htod_sync(self.ptr + offset as u64, src) })
        })
    }

    /// Copy `dst.len()` bytes starting at byte `offset` of this allocation to host memory (`cuMemcpyDtoH`,
    /// synchronous).
    pub fn copy_range_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        if offset.checked_add(dst.len()).is_none_or(|end| end > self.len) {
            return Err(cuda_error(
                "cuMemcpyDtoH",
                format!("{} bytes at {offset} asked of a {}-byte allocation", dst.len(), self.len),
            ));
        }
        self.ctx.scoped(|| {
            // SAFETY: `dst` is writable for its length, and offset..offset+len lies inside this live allocation
            // (checked above).
            check("cuMemcpyDtoH", unsafe { result::memcpy_dtoh_sync(dst, self.ptr + offset as u64) })
        })
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        let ptr = self.ptr;
        // SAFETY: allocated by cuMemAlloc and freed once; owners drop us only after every reader's release
        // event was waited on (transfer/ring.rs protocol), and cuMemFree synchronizes with pending device work anyway.
        let _ = self.ctx.scoped(|| check("cuMemFree", unsafe { result::free_sync(ptr) }));
    }
}

/// Page-locked host memory (`cuMemHostAlloc`), freed on drop: the source of a truly asynchronous H2D copy (the
/// GPU resampler's staging block, the nvJPEG decoders' bitstreams).
#[derive(Debug)]
pub struct PinnedHost {
    ptr: *mut u8,
    len: usize,
    ctx: Arc<GpuContext>,
}

// SAFETY: owned page-locked memory, usable from any thread; freeing makes its context current.
unsafe impl Send for PinnedHost {}

impl PinnedHost {
    /// Allocate `len` ≥ 1 page-locked bytes in `ctx`.
    pub fn alloc(ctx: &Arc<GpuContext>, len: usize) -> Result<Self> {
        let len = len.max(1);
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer; flags 0 = plain page-locked memory of the current context.
        ctx.scoped(|| check("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut p, len, 0) }.result()))?;
        Ok(Self { ptr: p.cast::<u8>(), len, ctx: Arc::clone(ctx) })
    }

    /// Host address.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Bytes.
    pub fn size(&self) -> usize {
        self.len
    }

    /// The whole buffer, writable. The owner must not call this while a device copy still reads it (it waits for
    /// that copy's event or stream first).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is a live allocation of `len` bytes owned by self; &mut self makes the borrow unique, and
        // the device reads it only between the owner's copy and its event, which the owner waits for before
        // calling this again.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        let p = self.ptr.cast::<c_void>();
        // SAFETY: allocated by cuMemHostAlloc and freed once; the owner waited for the copies reading it.
        let _ = self.ctx.scoped(|| check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(p) }.result()));
    }
}

/// Grow-and-reuse size for a buffer that must hold `len` bytes: 25 % headroom (grown buffers are reused by later,
/// slightly larger batches), whole 64 KiB.
pub fn grown(len: usize) -> usize {
    len.saturating_add(len / 4).next_multiple_of(1 << 16)
}

/// Page-locks an existing host range for DMA (`cuMemHostRegister`, flag PORTABLE: pinned for every
/// context, so any device may copy from it). Unregistered on drop.
#[derive(Debug)]
pub struct HostRegistration {
    ptr: *mut c_void,
    ctx: Arc<GpuContext>,
}

// SAFETY: the registration is a process-wide driver state keyed by address; unregistering from any thread
// with the context current is allowed.
unsafe impl Send for HostRegistration {}
// SAFETY: no interior state besides the address.
unsafe impl Sync for HostRegistration {}

impl HostRegistration {
    /// Register `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be a live host allocation that outlives the registration (drop this first).
    pub unsafe fn register(ctx: &Arc<GpuContext>, ptr: *mut u8, len: usize) -> Result<Self> {
        let p = ptr.cast::<c_void>();
        ctx.scoped(|| {
            // SAFETY: forwarded from the caller (live range); our context is current.
            check(
                "cuMemHostRegister",
                unsafe { sys::cuMemHostRegister_v2(p, len, sys::CU_MEMHOSTREGISTER_PORTABLE) }.result(),
            )
        })?;
        Ok(Self { ptr: p, ctx: Arc::clone(ctx) })
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        let p = self.ptr;
        // SAFETY: `p` was registered by `register` and is unregistered once, before its memory is freed.
        let _ = self.ctx.scoped(|| check("cuMemHostUnregister", unsafe { sys::cuMemHostUnregister(p) }.result()));
    }
}
