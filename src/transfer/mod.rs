//! transfer — the station that moves filled batch buffers from the workers to the consumer (and, on the
//! GPU path, through host-to-device copies). `station` is the host half: ring, leases, shutdown.

pub mod cuda;
pub mod gpu;
pub mod station;

pub use station::{BatchLease, EpochShape, Station, Take};
