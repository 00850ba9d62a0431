//! transfer — moves filled batch buffers from the workers to the consumer: `station` is the host half
//! (ring of host buffers, leases, shutdown) that every loader uses; on the GPU path, `engine` is one
//! device's transfer thread (H2D copies of the station's batches) and `ring` its device slots, their
//! publication to the consumer and their leases; `gpu_decode` is the GPU decode path beside the CPU workers
//! (nvJPEG decode thread, routing, arenas, the resample kernels' inputs).

pub mod engine;
pub mod gpu_decode;
pub mod ring;
pub mod station;

pub use engine::{GpuDecodeSetup, GpuEngine, GpuEngineConfig};
pub use gpu_decode::{CpuFallback, GpuDecode, GpuTask, Share};
pub use ring::{DeviceBatch, DeviceNext, SlotLease, SlotPart};
pub use station::{BatchLease, EpochShape, Station, Take};
