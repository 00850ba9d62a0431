//! The transfer stage's leases as DLPack owners. The leases live next to what they lease (`transfer::station`
//! for host batches, `transfer::ring` for device slots); this file only says how an export owns them:
//! - every export of a CPU batch owns one `Arc<BatchLease>` clone (through a [`HostView`] for one view of a
//!   multi-view batch), so the buffer returns to the station only when the Python handle and every consumer
//!   tensor are gone;
//! - every export of a GPU batch owns a [`DeviceView`] (an `Arc<SlotLease>` clone + the part it views), and
//!   the slot lease keeps the stream protocol of stream.rs ([`StreamOrder`]).

use super::ExportError;
use super::dlpack::Device;
use super::stream::{ConsumerStream, StreamOrder};
use super::tensor::ExportOwner;
use crate::cuda::{CUdeviceptr, CUstream};
use crate::transfer::{BatchLease, SlotLease, SlotPart};
use std::ffi::c_void;
use std::sync::Arc;

// SAFETY: a BatchLease keeps its buffer out of the station's ring until it is dropped (station protocol:
// the ring never touches a leased buffer), so the `rows` published images stay valid and are not
// rewritten while any clone of the Arc lives. Host memory → Device::Cpu. The last drop runs
// `Station::release`: a short mutex section and condvar notifications, no GIL, no unbounded wait.
unsafe impl ExportOwner for Arc<BatchLease> {
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn data_ptr(&self) -> *mut c_void {
        self.buffer().images_ptr().cast_mut().cast()
    }
    fn len_bytes(&self) -> usize {
        self.rows * self.buffer().layout().view_bytes(0)
    }
}

/// A DLPack owner viewing one view's block of a host batch (a loader with `views=`: one tensor per view, all
/// sharing the batch's lease).
#[derive(Debug)]
pub struct HostView {
    lease: Arc<BatchLease>,
    view: usize,
}

impl HostView {
    /// View `view`'s images of `lease` (panics unless `view` < the layout's views: the binding builds one
    /// per view of the layout).
    pub fn new(lease: Arc<BatchLease>, view: usize) -> Self {
        assert!(view < lease.buffer().layout().views(), "view {view} outside the batch layout");
        Self { lease, view }
    }

    /// Start of the view's block (also what `__array_interface__` reports).
    pub fn ptr(&self) -> *const u8 {
        self.lease.buffer().view_ptr(self.view)
    }
}

// SAFETY: as for `Arc<BatchLease>` above — the lease keeps the whole buffer out of the ring while any clone
// lives; the view's `rows` images lie inside it (BatchLayout::view_offset + rows · view_bytes ≤ total_bytes,
// rows ≤ layout rows). Dropping runs at most `Station::release` (short mutex section, no GIL).
unsafe impl ExportOwner for HostView {
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn data_ptr(&self) -> *mut c_void {
        self.ptr().cast_mut().cast()
    }
    fn len_bytes(&self) -> usize {
        self.lease.rows * self.lease.buffer().layout().view_bytes(self.view)
    }
}

/// The CUstream a consumer stream names (None: nothing to order: host memory, or `stream=-1`).
fn stream_handle(stream: ConsumerStream) -> Option<CUstream> {
    match stream {
        ConsumerStream::CudaLegacyDefault => Some(1usize as CUstream), // CU_STREAM_LEGACY
        ConsumerStream::CudaPerThreadDefault => Some(2usize as CUstream), // CU_STREAM_PER_THREAD
        ConsumerStream::Cuda(h) => Some(h.get() as CUstream),
        ConsumerStream::Host | ConsumerStream::Unsynchronized => None,
    }
}

/// Device slots follow the stream protocol of stream.rs: the consumer's stream waits on the slot's copy when
/// a capsule is made, and the deleter records a release event on it before the lease can drop.
impl StreamOrder for SlotLease {
    fn consumer_waits(&self, stream: ConsumerStream) -> Result<(), ExportError> {
        let Some(s) = stream_handle(stream) else { return Ok(()) };
        // SAFETY: `s` is the consumer's stream from `__dlpack__(stream=…)`, which the DLPack protocol requires to
        // be a live stream on this device, or a special default-stream handle that stream_handle produced.
        unsafe { self.wait_copy_on(s) }.map_err(|e| ExportError::StreamOrder(e.to_string()))
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
        let Some(s) = stream_handle(stream) else { return };
        // SAFETY: `s` is a special handle or the raw stream the consumer passed to `__dlpack__`. DLPack does not
        // promise that stream outlives the tensor: a consumer that destroys its stream before freeing the tensor
        // breaks this (documented on `Loader`: keep the stream alive while its tensors live, as torch does).
        unsafe { self.record_release_on(s) }
    }
}

/// A DLPack owner viewing one part of a device slot.
pub struct DeviceView {
    lease: Arc<SlotLease>,
    ptr: CUdeviceptr,
    len: usize,
}

impl DeviceView {
    /// View `part` of `lease`.
    pub fn new(lease: Arc<SlotLease>, part: SlotPart) -> Self {
        let (ptr, len) = lease.part(part);
        Self { lease, ptr, len }
    }
}

// SAFETY: the view holds an Arc of the slot lease; while any clone lives the slot is not in the ring's free
// list, so the transfer thread never rewrites it, and its DeviceMemory (an Arc inside the slot) is not freed.
// `ptr..ptr+len` lies inside that allocation (SlotLease::part, rows ≤ layout rows). Dropping the last clone
// pushes the slot back under a short mutex: no GIL, no unbounded wait.
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
