//! transfer — moves filled batch buffers from the workers to the consumer: `station` is the host half
//! (ring of host buffers, leases, shutdown) that every loader uses; on the GPU path, `engine` is one
//! device's transfer thread (H2D copies of the station's batches) and `ring` its device slots, their
//! publication to the consumer and their leases. When the GPU decode path is on, the transfer thread drives it
//! per batch through `gpu_decode::GpuRows` (the room before this one), its only view of that room.

pub mod engine;
pub mod ring;
pub mod station;

pub use engine::{GpuEngine, GpuEngineConfig};
pub use ring::{DeviceBatch, DeviceNext, SlotLease, SlotPart};
pub use station::{BatchLease, EpochShape, Station, Take};
