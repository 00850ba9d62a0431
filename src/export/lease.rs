//! Batch leases as DLPack owners: every export of a CPU batch owns one `Arc<BatchLease>` clone, so the
//! buffer returns to the station only when the Python handle and every consumer tensor are gone.

use super::tensor::{Device, ExportOwner};
use crate::transfer::BatchLease;
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
        self.rows * self.buffer().layout().sample_bytes
    }
}
