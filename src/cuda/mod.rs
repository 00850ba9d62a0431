//! cuda — the CUDA driver API, reached through cudarc with *dynamic loading*: nothing is
//! linked at build time and `libcuda.so` is opened on first use, so the wheel imports and runs
//! (CPU batches) on machines without a GPU or driver.
//!
//! Pipeline position: a platform room beside `topology/`, below the data path: `staging/` pins host
//! memory with it, `transfer/` copies staged batches to the device and records events with it, and
//! `export/` enqueues the consumer's stream waits with it. `trdata info` reads [`probe()`].
//!
//! Files: `driver` (contexts, streams, events, device memory), `probe` (what the machine has), and the GPU decode
//! path's libraries, loaded at run time like the driver — `libsearch` (their one search order, and the registry
//! that keeps each loaded library until the process ends), [`nvjpeg`]
//! (libnvjpeg: hardware batched ROI decode), [`nvrtc`] (libnvrtc: compiles `kernels/resample.cu` to a CUBIN) and
//! [`resample_gpu`] (the resample kernels' launcher); `gpu_decode/` drives them.
//!
//! Rules for everything in this module, because cudarc turns "not there" into panics:
//! 1. Call [`probe()`] (or [`driver_present()`]) before any other cudarc call. cudarc's
//!    `culib()` panics when libcuda cannot be loaded, and every driver symbol is looked up with
//!    `expect`, so a missing library or a driver older than the bindings (`cuda-13000`) would
//!    otherwise panic.
//! 2. Driver calls that can hit such a lookup run under `catch_unwind` and become errors; a panic
//!    must never cross into Python (PanicException is a BaseException) or abort a worker.
//! 3. Contexts are the device's *primary* context (`cuDevicePrimaryCtxRetain`), shared with
//!    PyTorch/CuPy in the same process.

#![allow(unsafe_code)]

mod driver;
mod libsearch;
pub mod nvjpeg;
pub mod nvrtc;
mod probe;
pub mod resample_gpu;

/// Raw driver types the GPU path passes around (stream and device-pointer handles).
pub use cudarc::driver::sys::{CUdeviceptr, CUstream};
pub use driver::{
    DeviceMemory, Event, GpuContext, HostRegistration, Stream, check_device, cuda_error, device_numa_node,
    wait_event_raw,
};
pub use probe::{CudaDevice, CudaProbe, driver_present, probe};
