//! Per-sample steps for Python: `_core.Step(fn, name)` wraps a callable `fn(pixels, seed) -> pixels` (the
//! package's `trdata.PythonStep` builds it: torch/numpy seeding and the tensor layout are its part) as the core's
//! `ImageStep` (augment/ops/step.rs). The worker that runs the step attaches to the interpreter, hands it a
//! uint8 (H, W, C) numpy copy of the image, and copies the returned array back after checking it.

use crate::augment::ops::{ImageStep, StepRef};
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use std::sync::Arc;

/// A Python callable as a core step; a spec value (`("python_step", {"step": Step})`).
#[pyclass(frozen, module = "trdata._core")]
pub struct Step {
    pub(super) inner: StepRef,
}

#[pymethods]
impl Step {
    #[new]
    fn new(fun: Py<PyAny>, name: String) -> Self {
        Self { inner: StepRef(Arc::new(PyStep { fun, name })) }
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.0.name().to_string()
    }
}

struct PyStep {
    fun: Py<PyAny>,
    name: String,
}

impl ImageStep for PyStep {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, pixels: &mut [u8], (h, w, c): (usize, usize, usize), seed: u64) -> Result<(), String> {
        // Never attaches to an interpreter that is shutting down (the thread would hang there).
        Python::try_attach(|py| -> PyResult<Result<(), String>> {
            let image = PyArray1::from_slice(py, pixels).reshape([h, w, c])?;
            let out = self.fun.bind(py).call1((image, seed))?;
            let Ok(array) = out.cast::<PyArrayDyn<u8>>() else {
                return Ok(Err(format!("returned {}, not a uint8 array", out.get_type().name()?)));
            };
            if array.shape() != [h, w, c] {
                return Ok(Err(format!(
                    "returned an image of shape {:?} for one of ({h}, {w}, {c}): a Python step must keep the size",
                    array.shape()
                )));
            }
            let readonly = array.readonly();
            let Ok(data) = readonly.as_slice() else { return Ok(Err("returned a non-contiguous array".into())) };
            pixels.copy_from_slice(data);
            Ok(Ok(()))
        })
        .unwrap_or_else(|| Ok(Err("the Python interpreter is shutting down".into())))
        .unwrap_or_else(|e| Err(e.to_string()))
    }
}
