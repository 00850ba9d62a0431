//! The safe description of one export: where the memory lives, what it holds, and who keeps it alive.
//!
//! A [`TensorExport`] can only be built from an [`ExportOwner`], whose (unsafe) contract is that its
//! memory stays valid while it lives; the builder checks that shape × strides × dtype stays inside that
//! memory and is aligned. Everything after that (managed tensor, capsule) is mechanical.

use super::ExportError;
use super::dlpack::{DLDataType, Device, FLAG_IS_COPIED, KDL_BFLOAT, KDL_FLOAT, KDL_INT, KDL_UINT};
use super::stream::{ConsumerStream, StreamBinding, StreamOrder};
use crate::augment::DType;
use std::any::Any;
use std::ffi::c_void;
use std::sync::Arc;

/// Element types we export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementType {
    /// uint8 (`kDLUInt`, 8 bits).
    U8,
    /// IEEE half (`kDLFloat`, 16 bits).
    F16,
    /// bfloat16 (`kDLBfloat`, 16 bits): arrives in torch as `torch.bfloat16`, no reinterpretation.
    BF16,
    /// IEEE single (`kDLFloat`, 32 bits).
    F32,
    /// int64 (`kDLInt`, 64 bits): labels and indices.
    I64,
}

impl ElementType {
    /// The DLPack data type (scalar, one lane).
    pub fn dl(self) -> DLDataType {
        let (code, bits) = match self {
            ElementType::U8 => (KDL_UINT, 8),
            ElementType::F16 => (KDL_FLOAT, 16),
            ElementType::BF16 => (KDL_BFLOAT, 16),
            ElementType::F32 => (KDL_FLOAT, 32),
            ElementType::I64 => (KDL_INT, 64),
        };
        DLDataType { code, bits, lanes: 1 }
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            ElementType::U8 => 1,
            ElementType::F16 | ElementType::BF16 => 2,
            ElementType::F32 => 4,
            ElementType::I64 => 8,
        }
    }
}

impl From<DType> for ElementType {
    fn from(d: DType) -> Self {
        match d {
            DType::U8 => ElementType::U8,
            DType::F16 => ElementType::F16,
            DType::BF16 => ElementType::BF16,
            DType::F32 => ElementType::F32,
        }
    }
}

/// Something that owns exportable memory and keeps it valid while it lives.
///
/// # Safety
/// Implementors guarantee, for as long as the value lives (it may be moved to and dropped on any thread):
/// - `data_ptr()` is non-null and `len_bytes()` bytes from it are valid memory on `device()`, returning
///   the same values on every call, and nobody else reuses that memory for other data meanwhile;
/// - dropping the value never needs the Python GIL, never calls into Python and never blocks unboundedly
///   (it runs inside DLPack deleters: any thread, maybe during interpreter shutdown).
pub unsafe trait ExportOwner: Send + 'static {
    /// Where the memory lives.
    fn device(&self) -> Device;
    /// Start of the memory.
    fn data_ptr(&self) -> *mut c_void;
    /// Length of the memory in bytes.
    fn len_bytes(&self) -> usize;
}

/// A private host copy of exported bytes (`__dlpack__(copy=True)`), 16-byte aligned for every dtype.
#[derive(Debug)]
pub struct HostCopy {
    words: Box<[u128]>,
    len_bytes: usize,
}

impl HostCopy {
    /// Copy `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut words = vec![0u128; bytes.len().div_ceil(16).max(1)].into_boxed_slice();
        // SAFETY: `words` spans ≥ bytes.len() bytes, is freshly allocated (no overlap) and u8 has no
        // alignment requirement.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast::<u8>(), bytes.len()) };
        Self { words, len_bytes: bytes.len() }
    }
}

// SAFETY: the boxed slice is owned, never reallocated, non-null (≥ 1 word) and freed only on drop, which
// is plain deallocation (no GIL, no blocking).
unsafe impl ExportOwner for HostCopy {
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn data_ptr(&self) -> *mut c_void {
        self.words.as_ptr().cast_mut().cast()
    }
    fn len_bytes(&self) -> usize {
        self.len_bytes
    }
}

/// One tensor ready to be handed to a DLPack consumer: a validated view plus the owner that keeps its
/// memory alive (dropped by the managed tensor's deleter), and, for device memory, the stream hook.
pub struct TensorExport {
    pub(super) device: Device,
    pub(super) dtype: ElementType,
    pub(super) shape: Box<[i64]>,
    /// Element strides, always filled (never the NULL "compact" shortcut).
    pub(super) strides: Box<[i64]>,
    pub(super) data: *mut c_void,
    pub(super) flags: u64,
    pub(super) owner: Box<dyn Any + Send>,
    pub(super) order: Option<StreamBinding>,
}

// SAFETY: `data` is only an address inside memory that `owner` (Send) keeps valid; no thread-affine state
// hangs on it, and the stream binding is Send + Sync.
unsafe impl Send for TensorExport {}

impl std::fmt::Debug for TensorExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorExport")
            .field("device", &self.device)
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("strides", &self.strides)
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

impl TensorExport {
    /// View `owner`'s memory as a tensor of `dtype` with `shape`, row-major (C-contiguous) when `strides`
    /// is None, else with the given element strides. Fails when the view would leave the owner's memory,
    /// the data is misaligned for `dtype`, or a dimension does not fit DLPack's int64.
    pub fn new<O: ExportOwner>(
        owner: O,
        dtype: ElementType,
        shape: &[usize],
        strides: Option<&[isize]>,
    ) -> Result<Self, ExportError> {
        let layout = |m: String| ExportError::Layout(m);
        if i32::try_from(shape.len()).is_err() {
            return Err(layout(format!("{} dimensions", shape.len())));
        }
        let shape_i64 = shape
            .iter()
            .map(|&d| i64::try_from(d).map_err(|_| layout(format!("dimension {d} exceeds int64"))))
            .collect::<Result<Box<[i64]>, _>>()?;
        let strides_i64: Box<[i64]> = match strides {
            Some(s) if s.len() != shape.len() => {
                return Err(layout(format!("{} strides for {} dimensions", s.len(), shape.len())));
            }
            Some(s) => s.iter().map(|&v| v as i64).collect(),
            None => {
                let mut out = vec![0i64; shape.len()];
                let mut step: i64 = 1;
                for (o, &d) in out.iter_mut().zip(&shape_i64).rev() {
                    *o = step;
                    step = step.checked_mul(d.max(1)).ok_or_else(|| layout("element count overflows int64".into()))?;
                }
                out.into_boxed_slice()
            }
        };
        // Extent: the lowest and highest element offsets the view can reach must lie inside the owner.
        let elem = dtype.size_bytes() as i128;
        let data = owner.data_ptr();
        if shape_i64.iter().all(|&d| d > 0) {
            let (mut lo, mut hi) = (0i128, 0i128);
            for (&d, &s) in shape_i64.iter().zip(strides_i64.iter()) {
                let reach = (d as i128 - 1) * s as i128;
                if reach < 0 { lo += reach } else { hi += reach }
            }
            let len = owner.len_bytes() as i128;
            if lo < 0 || (hi + 1) * elem > len {
                return Err(layout(format!(
                    "view reaches elements {lo}..={hi} of {elem} bytes, outside the owner's {len} bytes"
                )));
            }
            if data.is_null() || !(data as usize).is_multiple_of(dtype.size_bytes()) {
                return Err(layout(format!("data pointer {data:p} is not aligned to {elem} bytes")));
            }
        }
        Ok(Self {
            device: owner.device(),
            dtype,
            shape: shape_i64,
            strides: strides_i64,
            data,
            flags: 0,
            owner: Box::new(owner),
            order: None,
        })
    }

    /// Where the memory lives.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Element type.
    pub fn dtype(&self) -> ElementType {
        self.dtype
    }

    /// Extents.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// Element strides.
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }

    /// A host copy of this view (`copy=True`): same shape and strides, a fresh owner, the versioned
    /// capsule's IS_COPIED flag set. Only for host-accessible memory; device copies belong to the GPU path.
    pub fn host_copy(&self) -> Result<TensorExport, ExportError> {
        if !self.device.host_accessible() {
            return Err(ExportError::CopyUnsupported(self.device));
        }
        // Bytes from the base to the last reachable element (TensorExport::new rejected negative reach).
        let elem = self.dtype.size_bytes();
        let span = if self.shape.contains(&0) {
            0
        } else {
            let hi: i64 = self.shape.iter().zip(self.strides.iter()).map(|(&d, &s)| (d - 1) * s.max(0)).sum();
            (hi as usize + 1) * elem
        };
        let bytes: &[u8] = if span == 0 {
            &[]
        } else {
            // SAFETY: `new` checked that [data, data + span) lies inside the owner's memory, which the owner
            // (alive: we hold it) keeps valid and host-readable (device checked above).
            unsafe { std::slice::from_raw_parts(self.data.cast::<u8>(), span) }
        };
        let shape: Vec<usize> = self.shape.iter().map(|&d| d as usize).collect();
        let strides: Vec<isize> = self.strides.iter().map(|&s| s as isize).collect();
        let mut copy = TensorExport::new(HostCopy::from_bytes(bytes), self.dtype, &shape, Some(&strides))?;
        copy.flags |= FLAG_IS_COPIED;
        Ok(copy)
    }

    /// Attach the producer's half of the stream contract (device memory): `order.consumer_waits(stream)`
    /// runs when the managed tensor is made, `order.consumer_released(stream)` in its deleter, before the
    /// owner is dropped. Host exports need none.
    pub fn with_stream_order(mut self, order: Arc<dyn StreamOrder>, stream: ConsumerStream) -> Self {
        self.order = Some(StreamBinding { order, stream });
        self
    }
}
