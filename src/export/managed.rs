//! Managed tensors: one heap allocation per export holding the DLPack struct, the shape and strides it
//! points at, the owner and the stream binding. Its deleter frees all of it.
//!
//! Ownership: [`ManagedTensor`] owns the allocation (dropping it runs the deleter) until `into_raw`
//! passes it on — to a capsule, and from the capsule to a consumer, who calls the deleter exactly once.
//! The deleter runs on any thread, with or without the GIL (torch calls it when the last tensor sharing
//! the memory dies, wherever that is): it touches no Python state, only Rust drops, which
//! [`ExportOwner`](super::ExportOwner)'s contract keeps GIL-free and non-blocking.

use super::ExportError;
use super::dlpack::{
    DLManagedTensor, DLManagedTensorVersioned, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION, DLPackVersion, DLTensor,
    LEGACY_CAPSULE_NAME, VERSIONED_CAPSULE_NAME,
};
use super::stream::StreamBinding;
use super::tensor::TensorExport;
use std::any::Any;
use std::ffi::{CStr, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

/// The allocation behind one managed tensor. `tensor` comes first in a `repr(C)` struct, so a pointer to
/// the DLPack struct is a pointer to the whole allocation (the deleter relies on it).
#[repr(C)]
struct Managed<T> {
    tensor: T,
    keep: Keep,
}

/// What the DLPack struct points at or stands for.
struct Keep {
    _shape: Box<[i64]>,
    _strides: Box<[i64]>,
    owner: Option<Box<dyn Any + Send>>,
    order: Option<StreamBinding>,
}

impl Drop for Keep {
    fn drop(&mut self) {
        // The consumer is done: first tell the stream hook (the memory may be reused only after the
        // consumer's stream passed this point), then let the owner go (the lease returns the memory).
        if let Some(b) = self.order.take() {
            b.order.consumer_released(b.stream);
        }
        drop(self.owner.take());
    }
}

/// The deleter of both flavours.
///
/// # Safety
/// `p` is null or a pointer obtained from [`ManagedTensor::into_raw`] of the matching flavour `T`, and
/// this is the only call for it (the DLPack contract: the last owner calls the deleter once).
unsafe extern "C" fn delete_managed<T>(p: *mut T) {
    if p.is_null() {
        return;
    }
    // SAFETY: by the contract above `p` is the start of a live `Box<Managed<T>>` allocation (`tensor` is
    // its first field, repr(C)), released by `Box::into_raw` and not freed yet.
    let boxed = unsafe { Box::from_raw(p.cast::<Managed<T>>()) };
    // A panic must not unwind into the C caller (torch, numpy, CPython); the owners' drops do not panic
    // by contract, and there is nobody to report to from a deleter, so a broken one is contained here.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(boxed)));
}

#[derive(Debug)]
enum Raw {
    Legacy(NonNull<Managed<DLManagedTensor>>),
    Versioned(NonNull<Managed<DLManagedTensorVersioned>>),
}

/// An owned DLPack managed tensor (legacy or versioned). Dropping it runs its deleter.
#[derive(Debug)]
pub struct ManagedTensor {
    raw: Raw,
}

impl ManagedTensor {
    /// Build the managed tensor of `export`: versioned (DLPack 1.0, with flags) or legacy. For device
    /// exports this is where the consumer's stream is made to wait (`StreamOrder::consumer_waits`).
    pub fn new(export: TensorExport, versioned: bool) -> Result<Self, ExportError> {
        let TensorExport { device, dtype, mut shape, mut strides, data, flags, owner, order } = export;
        if let Some(b) = &order {
            // Before anything exists that could reach a consumer: a failure here drops `owner` with no
            // consumer to wait for.
            b.order.consumer_waits(b.stream)?;
        }
        let dl_tensor = DLTensor {
            data,
            device: device.dl(),
            ndim: shape.len() as i32, // TensorExport::new checked it fits
            dtype: dtype.dl(),
            shape: shape.as_mut_ptr(),
            strides: strides.as_mut_ptr(),
            byte_offset: 0,
        };
        // The boxed slices' heap memory does not move when the boxes move into `Keep`.
        let keep = Keep { _shape: shape, _strides: strides, owner: Some(owner), order };
        let raw = if versioned {
            let tensor = DLManagedTensorVersioned {
                version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_managed::<DLManagedTensorVersioned>),
                flags,
                dl_tensor,
            };
            let p = NonNull::from(Box::leak(Box::new(Managed { tensor, keep })));
            // SAFETY: `p` is the allocation just leaked, exclusively ours.
            unsafe { (*p.as_ptr()).tensor.manager_ctx = p.as_ptr().cast() };
            Raw::Versioned(p)
        } else {
            let tensor = DLManagedTensor {
                dl_tensor,
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_managed::<DLManagedTensor>),
            };
            let p = NonNull::from(Box::leak(Box::new(Managed { tensor, keep })));
            // SAFETY: `p` is the allocation just leaked, exclusively ours.
            unsafe { (*p.as_ptr()).tensor.manager_ctx = p.as_ptr().cast() };
            Raw::Legacy(p)
        };
        Ok(Self { raw })
    }

    /// True for a `DLManagedTensorVersioned`.
    pub fn is_versioned(&self) -> bool {
        matches!(self.raw, Raw::Versioned(_))
    }

    /// The capsule name for this flavour ("dltensor" or "dltensor_versioned").
    pub fn capsule_name(&self) -> &'static CStr {
        if self.is_versioned() { VERSIONED_CAPSULE_NAME } else { LEGACY_CAPSULE_NAME }
    }

    /// The tensor view.
    pub fn dl_tensor(&self) -> &DLTensor {
        // SAFETY: the allocation lives until `self` is dropped or released; we only hand out a shared
        // borrow tied to `&self`.
        unsafe {
            match self.raw {
                Raw::Legacy(p) => &(*p.as_ptr()).tensor.dl_tensor,
                Raw::Versioned(p) => &(*p.as_ptr()).tensor.dl_tensor,
            }
        }
    }

    /// (version, flags) of a versioned tensor.
    pub fn version_and_flags(&self) -> Option<(DLPackVersion, u64)> {
        match self.raw {
            Raw::Legacy(_) => None,
            // SAFETY: as in `dl_tensor`.
            Raw::Versioned(p) => unsafe { Some(((*p.as_ptr()).tensor.version, (*p.as_ptr()).tensor.flags)) },
        }
    }

    /// Pointer to the DLPack struct (`DLManagedTensor*` or `DLManagedTensorVersioned*`), still owned by
    /// `self`.
    pub fn as_ptr(&self) -> *mut c_void {
        match self.raw {
            Raw::Legacy(p) => p.as_ptr().cast(),
            Raw::Versioned(p) => p.as_ptr().cast(),
        }
    }

    /// Give up ownership: whoever holds the pointer must call the struct's `deleter` exactly once.
    pub fn into_raw(self) -> *mut c_void {
        let p = self.as_ptr();
        std::mem::forget(self);
        p
    }
}

impl Drop for ManagedTensor {
    fn drop(&mut self) {
        // SAFETY: we still own the allocation (into_raw forgets `self`), and this is its only deletion.
        unsafe {
            match self.raw {
                Raw::Legacy(p) => delete_managed(p.as_ptr().cast::<DLManagedTensor>()),
                Raw::Versioned(p) => delete_managed(p.as_ptr().cast::<DLManagedTensorVersioned>()),
            }
        }
    }
}
