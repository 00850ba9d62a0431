//! The stream half of DLPack (docs/design/protocols.md "Buffer lifetime", GPU batches): the hook the GPU path plugs
//! into. CPU exports have no stream order: their bytes are complete when the batch is published (the
//! station's mutex orders every row write before `take`), so a consumer may read them at once.
//!
//! Device slots (`transfer/ring.rs`, `SlotLease`) follow this protocol, through [`StreamOrder`]:
//! 1. `__dlpack__(stream=s)` → [`ConsumerStream::parse`] decodes `s` by the array-API rules for CUDA.
//! 2. Making the managed tensor calls [`StreamOrder::consumer_waits`]: enqueue `cuStreamWaitEvent(s,
//!    copy_done)` so the consumer's work on `s` starts after our H2D copy, without blocking the host.
//!    If it fails, no capsule is made and the error reaches the caller.
//! 3. The consumer's tensor dies → the DLPack deleter (any thread, maybe without the GIL, maybe during
//!    interpreter shutdown) calls [`StreamOrder::consumer_released`]: record an event on `s`; the slot
//!    is handed back to the ring only once that event completed (the consumer's kernels reading it are
//!    done). Then the deleter drops the export's owner (the slot lease).

use super::ExportError;
use super::dlpack::Device;
use std::num::NonZeroUsize;
use std::sync::Arc;

/// The `stream` argument of `__dlpack__`, decoded for the producer's device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerStream {
    /// Host memory: no stream (`stream=None` on a CPU export).
    Host,
    /// `stream=-1`: the consumer asks us not to synchronize at all.
    Unsynchronized,
    /// CUDA's legacy default stream (`stream=None` or `1` on a CUDA export).
    CudaLegacyDefault,
    /// CUDA's per-thread default stream (`stream=2`).
    CudaPerThreadDefault,
    /// A `CUstream` / `cudaStream_t` handle (any other positive value).
    Cuda(NonZeroUsize),
}

impl ConsumerStream {
    /// Decode `stream` for an export on `device`. CPU exports accept `None` and `-1`; CUDA exports follow
    /// the array-API table (0 is ambiguous and refused).
    pub fn parse(device: Device, stream: Option<i64>) -> Result<Self, ExportError> {
        let bad = |why: &str| ExportError::Stream(format!("stream={stream:?} {why}"));
        match device {
            Device::Cpu => match stream {
                None => Ok(ConsumerStream::Host),
                Some(-1) => Ok(ConsumerStream::Unsynchronized),
                Some(_) => Err(bad("is not valid for a CPU tensor (use None)")),
            },
            Device::Cuda(_) => match stream {
                None | Some(1) => Ok(ConsumerStream::CudaLegacyDefault),
                Some(2) => Ok(ConsumerStream::CudaPerThreadDefault),
                Some(-1) => Ok(ConsumerStream::Unsynchronized),
                Some(0) => Err(bad("is ambiguous for CUDA (use 1 for the legacy default stream, 2 for per-thread)")),
                Some(s) if s > 2 => Ok(ConsumerStream::Cuda(NonZeroUsize::new(s as usize).expect("s > 2"))),
                Some(_) => Err(bad("is not a CUDA stream")),
            },
        }
    }
}

/// The producer's half of the stream contract for device memory. Implemented by the GPU path's device
/// slots; CPU exports attach none.
pub trait StreamOrder: Send + Sync + 'static {
    /// Make `stream` wait (on the device, not the host) until the exported memory is ready, e.g.
    /// `cuStreamWaitEvent(stream, copy_done)`. Runs while the capsule is made, with the GIL held: must not
    /// block on the host.
    fn consumer_waits(&self, stream: ConsumerStream) -> Result<(), ExportError>;

    /// The consumer's tensor died: record an event on `stream` and reuse the memory only after it
    /// completed. Runs in the DLPack deleter — any thread, maybe without the GIL, maybe during interpreter
    /// shutdown — so it must not call Python and must not block. It has no caller to report to: a failure
    /// (event not recorded) must keep the slot out of the ring for good rather than risk reusing it early.
    fn consumer_released(&self, stream: ConsumerStream);
}

/// A stream order bound to the consumer's stream, carried by an export into its managed tensor.
#[derive(Clone)]
pub struct StreamBinding {
    pub(super) order: Arc<dyn StreamOrder>,
    pub(super) stream: ConsumerStream,
}

impl std::fmt::Debug for StreamBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamBinding").field("stream", &self.stream).finish_non_exhaustive()
    }
}
