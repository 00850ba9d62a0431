//! The one error map: core `TrdataError` → the Python `trdata.errors` hierarchy
//! (ConfigError(ValueError), DecodeError naming file and sample, CudaError naming the call, WorkerError).

use crate::error::TrdataError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn build(py: Python<'_>, class: &str, message: String, kwargs: Option<Bound<'_, PyDict>>) -> PyResult<PyErr> {
    let cls = py.import("trdata.errors")?.getattr(class)?;
    Ok(PyErr::from_value(cls.call((message,), kwargs.as_ref())?))
}

/// Convert a core error into the matching Python exception.
pub fn to_py(e: TrdataError) -> PyErr {
    Python::attach(|py| {
        let message = e.to_string();
        let made = match &e {
            TrdataError::Config { parameter, .. } => {
                let kw = PyDict::new(py);
                kw.set_item("parameter", parameter).and_then(|_| build(py, "ConfigError", message, Some(kw)))
            }
            TrdataError::Decode(s) => {
                let kw = PyDict::new(py);
                kw.set_item("path", s.path.as_os_str())
                    .and_then(|_| kw.set_item("index", s.index))
                    .and_then(|_| kw.set_item("kind", format!("{:?}", s.error.kind)))
                    .and_then(|_| build(py, "DecodeError", message, Some(kw)))
            }
            TrdataError::Source { path, .. } => {
                let kw = PyDict::new(py);
                kw.set_item("path", path.as_os_str()).and_then(|_| build(py, "SourceError", message, Some(kw)))
            }
            TrdataError::Worker(_) => build(py, "WorkerError", message, None),
            TrdataError::Cuda { call, .. } => {
                let kw = PyDict::new(py);
                kw.set_item("call", call).and_then(|_| build(py, "CudaError", message, Some(kw)))
            }
            TrdataError::Closed(_) => build(py, "LoaderClosedError", message, None),
            TrdataError::Memory { .. } => build(py, "OutOfMemoryError", message, None),
        };
        made.unwrap_or_else(|import_failure| import_failure)
    })
}

/// `?`-friendly conversion for core results.
pub trait IntoPyResult<T> {
    /// Map the error through `to_py`.
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, TrdataError> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
