//! Device batches for Python: `DeviceTensorHandle` is the DLPack producer of one part (images or labels)
//! of a GPU slot. `__dlpack__(stream=s)` makes s wait on the slot's copy event; the capsule's deleter
//! records a release event on s, and the slot is rewritten only after it (transfer/ring.rs protocol).

use crate::augment::DType;
use crate::export::DeviceView;
use crate::export::{Device, DlpackRequest, ElementType, StreamOrder, TensorExport, into_capsule};
use crate::transfer::{SlotLease, SlotPart};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// One tensor (images or labels) of a batch living in a CUDA device slot. Dropped in a process other than
/// the one that made it (a fork child), the lease is leaked: returning the slot would lock the parent's
/// engine, whose mutex a parent thread may have held at fork time.
#[pyclass(module = "trdata._core", frozen)]
pub struct DeviceTensorHandle {
    lease: ManuallyDrop<Arc<SlotLease>>,
    pid: u32,
    part: SlotPart,
    shape: Vec<usize>,
    elem: ElementType,
    dtype_name: &'static str,
}

impl DeviceTensorHandle {
    /// The images of `lease` (shape [rows, ...sample_shape], dtype `dtype`).
    pub fn images(lease: Arc<SlotLease>, sample_shape: [usize; 3], dtype: DType) -> Self {
        let shape = vec![lease.rows, sample_shape[0], sample_shape[1], sample_shape[2]];
        let dtype_name = crate::config::DTYPE.name_of(dtype);
        Self {
            lease: ManuallyDrop::new(lease),
            pid: std::process::id(),
            part: SlotPart::Images,
            shape,
            elem: ElementType::from(dtype),
            dtype_name,
        }
    }

    /// The images of view `view` of a multi-view batch (`views=`; shape [rows, ...that view's sample shape]).
    pub fn view_images(lease: Arc<SlotLease>, view: usize, sample_shape: [usize; 3], dtype: DType) -> Self {
        let mut h = Self::images(lease, sample_shape, dtype);
        h.part = SlotPart::View(view);
        h
    }

    /// The int64 labels of `lease`.
    pub fn labels(lease: Arc<SlotLease>) -> Self {
        let shape = vec![lease.rows];
        Self {
            lease: ManuallyDrop::new(lease),
            pid: std::process::id(),
            part: SlotPart::Labels,
            shape,
            elem: ElementType::I64,
            dtype_name: "int64",
        }
    }

    fn device(&self) -> Device {
        Device::Cuda(self.lease.ordinal())
    }
}

impl Drop for DeviceTensorHandle {
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            // SAFETY: dropped exactly once, here; never used again.
            unsafe { ManuallyDrop::drop(&mut self.lease) }
        }
    }
}

#[pymethods]
impl DeviceTensorHandle {
    /// DLPack export on the GPU (zero-copy). `stream`: the consumer's CUDA stream (None/1 legacy default,
    /// 2 per-thread default, -1 no synchronization, else a `cudaStream_t`); it is made to wait for the H2D
    /// copy. `max_version` ≥ (1, 0) → versioned capsule, else legacy. `dl_device` must be ours; `copy=True`
    /// is refused (BufferError).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>,
        max_version: Option<(i64, i64)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let plan = DlpackRequest { stream, max_version, dl_device, copy }.plan(self.device())?;
        let view = DeviceView::new(Arc::clone(&self.lease), self.part);
        let order: Arc<dyn StreamOrder> = Arc::clone(&self.lease) as Arc<dyn StreamOrder>;
        let export = TensorExport::new(view, self.elem, &self.shape, None)?.with_stream_order(order, plan.stream);
        into_capsule(py, export, plan.versioned)
    }

    /// (2, ordinal) = kDLCUDA on this device.
    fn __dlpack_device__(&self) -> (i32, i32) {
        let d = self.device().dl();
        (d.device_type, d.device_id)
    }

    /// Element type ('uint8', 'float16', 'bfloat16', 'float32' or 'int64').
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype_name
    }

    /// Shape of the tensor.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// Batch number within its epoch.
    #[getter]
    fn batch(&self) -> u64 {
        self.lease.batch
    }

    /// CUDA device ordinal.
    #[getter]
    fn device_index(&self) -> u32 {
        self.lease.ordinal()
    }
}
