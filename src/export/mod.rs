//! export — DLPack structs, capsules, leases and deleters: the last stage before Python
//! (`… ─► transfer ─► export ─► py`). Consumers (torch, numpy, JAX, CuPy) get zero-copy tensors whose
//! memory stays valid exactly as long as they need it.
//!
//! Buffer lifetime protocol (docs/design/protocols.md "Buffer lifetime"):
//! - A published batch is a `BatchLease` behind an `Arc`. The Python handle holds one clone; every
//!   `__dlpack__` call builds a [`TensorExport`] whose owner is another clone (an [`ExportOwner`]).
//! - [`ManagedTensor`] puts the export in one heap allocation (DLPack struct + shape + strides + owner +
//!   stream binding); its deleter frees that allocation, which drops the owner clone. The deleter runs
//!   on any thread, with or without the GIL, at most once — it calls no Python.
//! - [`into_capsule`] (feature `python`) wraps it in a PyCapsule. The capsule destructor deletes the
//!   tensor only if no consumer renamed the capsule (see capsule.rs), so unconsumed capsules never leak
//!   and consumed ones are never freed twice.
//! - The buffer goes back to the station when the last clone drops: handle gone *and* every consumer
//!   tensor gone, in any order, on any thread.
//! - Device memory (the GPU path) adds the stream contract through [`StreamOrder`] (stream.rs): the
//!   consumer's stream waits on our copy event when the capsule is made; the deleter records an event on
//!   it before the owner (the device slot) is released.

#![allow(unsafe_code)]

#[cfg(feature = "python")]
mod capsule;
pub mod dlpack;
mod lease;
mod managed;
mod request;
mod stream;
mod tensor;

#[cfg(feature = "python")]
pub use capsule::into_capsule;
pub use dlpack::Device;
pub use lease::{DeviceView, HostView};
pub use managed::ManagedTensor;
pub use request::{DlpackRequest, ExportPlan};
pub use stream::{ConsumerStream, StreamBinding, StreamOrder};
pub use tensor::{ElementType, ExportOwner, HostCopy, TensorExport};

use std::fmt;

/// Why an export was refused. `Stream` becomes ValueError in Python (a bad argument); the others
/// BufferError (the DLPack spec's "cannot export as requested").
#[derive(Debug)]
pub enum ExportError {
    /// Shape/strides/dtype do not describe memory inside the owner (or do not fit DLPack's types).
    Layout(String),
    /// `dl_device` asked for another device than the one the memory lives on.
    Device {
        /// (device_type, device_id) requested.
        requested: (i32, i32),
        /// Where the memory is.
        ours: Device,
    },
    /// `copy=True` for memory the host cannot copy (device memory; the GPU path will own that copy).
    CopyUnsupported(Device),
    /// An invalid `stream` for the device.
    Stream(String),
    /// The stream hook could not order the consumer after the producer (GPU path).
    StreamOrder(String),
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::Layout(m) => write!(f, "DLPack export: invalid tensor layout: {m}"),
            ExportError::Device { requested, ours } => {
                let d = ours.dl();
                write!(
                    f,
                    "DLPack export: dl_device={requested:?} requested, but the data lives on {ours:?} \
                     ({}, {}) and trdata does not copy across devices",
                    d.device_type, d.device_id
                )
            }
            ExportError::CopyUnsupported(d) => write!(f, "DLPack export: copy=True is not supported for {d:?} memory"),
            ExportError::Stream(m) => write!(f, "DLPack export: {m}"),
            ExportError::StreamOrder(m) => write!(f, "DLPack export: could not order the consumer stream: {m}"),
        }
    }
}

impl std::error::Error for ExportError {}

#[cfg(all(test, not(feature = "loom")))]
mod tests;
