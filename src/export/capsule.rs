//! DLPack capsules (the Python half of the exchange; built with the `python` feature).
//!
//! Capsule protocol (DLPack Python spec): `__dlpack__` returns a PyCapsule named "dltensor" (legacy) or
//! "dltensor_versioned" holding a managed tensor. A consumer that takes the tensor renames the capsule to
//! "used_dltensor[_versioned]" and from then on owns it (it calls the deleter when its tensor dies). Our
//! capsule destructor therefore calls the deleter only if the name is unchanged — a capsule that was
//! never consumed (dropped, or a consumer failed before renaming) frees its tensor and returns the
//! buffer; a consumed one frees nothing. The destructor touches no module or interpreter state besides
//! the capsule itself, so it is safe during interpreter shutdown too.

use super::ExportError;
use super::dlpack::{DLManagedTensor, DLManagedTensorVersioned, LEGACY_CAPSULE_NAME, VERSIONED_CAPSULE_NAME};
use super::managed::ManagedTensor;
use super::tensor::TensorExport;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use std::ffi::CStr;

impl From<ExportError> for PyErr {
    fn from(e: ExportError) -> Self {
        match e {
            ExportError::Stream(_) => PyValueError::new_err(e.to_string()),
            _ => PyBufferError::new_err(e.to_string()),
        }
    }
}

/// Wrap `export` in a DLPack capsule: versioned ("dltensor_versioned") or legacy ("dltensor").
pub fn into_capsule<'py>(py: Python<'py>, export: TensorExport, versioned: bool) -> PyResult<Bound<'py, PyCapsule>> {
    let managed = ManagedTensor::new(export, versioned)?;
    let name: &'static CStr = managed.capsule_name();
    let destructor: ffi::PyCapsule_Destructor =
        if versioned { destroy_capsule::<DLManagedTensorVersioned> } else { destroy_capsule::<DLManagedTensor> };
    // SAFETY: the GIL is held (`py`); the pointer is non-null and stays valid until its deleter runs; the
    // name is a 'static C string, as PyCapsule requires (it keeps the pointer, not a copy).
    let capsule = unsafe { ffi::PyCapsule_New(managed.as_ptr(), name.as_ptr(), Some(destructor)) };
    if capsule.is_null() {
        // `managed` still owns the tensor: dropping it runs the deleter (the buffer returns).
        return Err(PyErr::fetch(py));
    }
    // The capsule owns the tensor now (its destructor or a consumer deletes it).
    let _ = managed.into_raw();
    // SAFETY: `capsule` is a new, non-null reference to a PyCapsule that we own.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule).cast_into_unchecked() })
}

/// The capsule name a managed tensor of flavour `T` is born with.
trait Flavour {
    const NAME: &'static CStr;
    /// # Safety
    /// `p` points at a live managed tensor of this flavour.
    unsafe fn deleter(p: *mut Self) -> Option<unsafe extern "C" fn(*mut Self)>;
}

impl Flavour for DLManagedTensor {
    const NAME: &'static CStr = LEGACY_CAPSULE_NAME;
    unsafe fn deleter(p: *mut Self) -> Option<unsafe extern "C" fn(*mut Self)> {
        // SAFETY: the caller guarantees `p` is live.
        unsafe { (*p).deleter }
    }
}

impl Flavour for DLManagedTensorVersioned {
    const NAME: &'static CStr = VERSIONED_CAPSULE_NAME;
    unsafe fn deleter(p: *mut Self) -> Option<unsafe extern "C" fn(*mut Self)> {
        // SAFETY: the caller guarantees `p` is live.
        unsafe { (*p).deleter }
    }
}

/// Capsule destructor: delete the tensor unless a consumer took it (renamed the capsule).
unsafe extern "C" fn destroy_capsule<T: Flavour>(capsule: *mut ffi::PyObject) {
    // SAFETY: CPython calls capsule destructors with the GIL held and `capsule` alive. PyCapsule_IsValid
    // neither raises nor clears a pending exception (it may run while one is set, e.g. during unwinding
    // or interpreter shutdown); it is true only if the name is still our original one, i.e. no consumer
    // took ownership — then the pointer is our live managed tensor and nobody else will delete it.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, T::NAME.as_ptr()) != 1 {
            return; // consumed ("used_…"): the consumer owns the tensor and calls its deleter
        }
        let p = ffi::PyCapsule_GetPointer(capsule, T::NAME.as_ptr()).cast::<T>();
        if p.is_null() {
            return;
        }
        if let Some(deleter) = T::deleter(p) {
            deleter(p);
        }
    }
}
