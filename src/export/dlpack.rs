//! The DLPack C ABI (dlpack.h v1.x), written out by hand so the crate keeps its own PyO3 version.
//!
//! Only what a producer needs: the device/dtype/tensor structs, both managed-tensor flavours and the
//! flag bits. Layouts are checked against the C header's sizes and offsets at compile time (64-bit
//! targets), because a wrong field order here corrupts memory in the consumer, not in us.

use std::ffi::{CStr, c_void};

/// ABI major version of [`DLManagedTensorVersioned`] (dlpack.h `DLPACK_MAJOR_VERSION`).
pub const DLPACK_MAJOR_VERSION: u32 = 1;
/// The minor version we declare. 0: nothing of ours needs a later minor (1.1 only added dtype codes), so
/// any consumer that accepts 1.x accepts our capsules.
pub const DLPACK_MINOR_VERSION: u32 = 0;

/// Capsule name of a legacy [`DLManagedTensor`]; consumers rename it to [`USED_LEGACY_CAPSULE_NAME`].
pub const LEGACY_CAPSULE_NAME: &CStr = c"dltensor";
/// Name a consumer gives a legacy capsule it took ownership of.
pub const USED_LEGACY_CAPSULE_NAME: &CStr = c"used_dltensor";
/// Capsule name of a [`DLManagedTensorVersioned`].
pub const VERSIONED_CAPSULE_NAME: &CStr = c"dltensor_versioned";
/// Name a consumer gives a versioned capsule it took ownership of.
pub const USED_VERSIONED_CAPSULE_NAME: &CStr = c"used_dltensor_versioned";

/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the consumer must not write through the tensor.
pub const FLAG_READ_ONLY: u64 = 1 << 0;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the producer copied the data for this export (`copy=True`).
pub const FLAG_IS_COPIED: u64 = 1 << 1;
/// `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED` (v1.1; never set by us).
pub const FLAG_IS_SUBBYTE_TYPE_PADDED: u64 = 1 << 2;

/// `DLDeviceType` (a C enum, hence `int32`): the subset we name.
pub type DLDeviceType = i32;
/// `kDLCPU`: host memory.
pub const KDL_CPU: DLDeviceType = 1;
/// `kDLCUDA`: CUDA device memory.
pub const KDL_CUDA: DLDeviceType = 2;

/// `DLDataTypeCode` values (stored in [`DLDataType::code`], a `uint8_t`).
pub const KDL_INT: u8 = 0;
/// Unsigned integer.
pub const KDL_UINT: u8 = 1;
/// IEEE float.
pub const KDL_FLOAT: u8 = 2;
/// bfloat16 (brain float).
pub const KDL_BFLOAT: u8 = 4;

/// `DLPackVersion`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLPackVersion {
    /// Major version (ABI-breaking).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

/// `DLDevice`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDevice {
    /// A `DLDeviceType` (`KDL_*`).
    pub device_type: DLDeviceType,
    /// Device ordinal (0 for host memory).
    pub device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDataType {
    /// A `DLDataTypeCode`.
    pub code: u8,
    /// Bits per element (per lane).
    pub bits: u8,
    /// Vector lanes (1 for scalars).
    pub lanes: u16,
}

/// `DLTensor`: a borrowed view; shape and strides are counted in elements.
#[repr(C)]
#[derive(Debug)]
pub struct DLTensor {
    /// Base pointer of the data (plus `byte_offset`).
    pub data: *mut c_void,
    /// Where the data lives.
    pub device: DLDevice,
    /// Number of dimensions.
    pub ndim: i32,
    /// Element type.
    pub dtype: DLDataType,
    /// `ndim` extents.
    pub shape: *mut i64,
    /// `ndim` strides in elements (NULL would mean compact row-major; we always fill them).
    pub strides: *mut i64,
    /// Offset of the first element from `data`, in bytes.
    pub byte_offset: u64,
}

/// `DLManagedTensor` (legacy, capsule name "dltensor").
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The view.
    pub dl_tensor: DLTensor,
    /// Producer context (ours points at the allocation that holds shape, strides and the owner).
    pub manager_ctx: *mut c_void,
    /// Called once by whoever owns the tensor last; frees everything behind `manager_ctx`.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// `DLManagedTensorVersioned` (DLPack ≥ 1.0, capsule name "dltensor_versioned").
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// ABI version of this struct.
    pub version: DLPackVersion,
    /// Producer context.
    pub manager_ctx: *mut c_void,
    /// Called once by whoever owns the tensor last.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// `FLAG_*` bits.
    pub flags: u64,
    /// The view.
    pub dl_tensor: DLTensor,
}

// The C header's layout on LP64 (x86_64, aarch64): a mismatch must fail the build, not a consumer.
/// Where exported memory lives (the DLPack `DLDevice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// Ordinary host memory (`kDLCPU`): the CPU batches of today.
    Cpu,
    /// Memory of CUDA device `ordinal` (`kDLCUDA`): the GPU path's device slots.
    Cuda(u32),
}

impl Device {
    /// The DLPack device.
    pub fn dl(self) -> DLDevice {
        match self {
            Device::Cpu => DLDevice { device_type: KDL_CPU, device_id: 0 },
            Device::Cuda(ordinal) => DLDevice { device_type: KDL_CUDA, device_id: ordinal as i32 },
        }
    }

    /// True when the host can read the memory directly (what `copy=True` needs).
    pub fn host_accessible(self) -> bool {
        matches!(self, Device::Cpu)
    }
}

#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<DLDevice>() == 8);
    assert!(size_of::<DLDataType>() == 4);
    assert!(offset_of!(DLTensor, device) == 8);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, strides) == 32);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLTensor>() == 48);
    assert!(offset_of!(DLManagedTensor, manager_ctx) == 48);
    assert!(offset_of!(DLManagedTensor, deleter) == 56);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(offset_of!(DLManagedTensorVersioned, manager_ctx) == 8);
    assert!(offset_of!(DLManagedTensorVersioned, deleter) == 16);
    assert!(offset_of!(DLManagedTensorVersioned, flags) == 24);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
    // `Option<extern fn>` is a nullable function pointer, like the C field.
    assert!(size_of::<Option<unsafe extern "C" fn(*mut DLManagedTensor)>>() == 8);
};
