//! Argument translation of the binding: a Python int of any magnitude → the core's integer type, failing with
//! the core's own rule (`IntParam`) so the message is the one every layer uses. Shared by the loader, the sources
//! and the pack functions; types only, no rules of its own.

use super::errors::to_py;
use crate::error::TrdataError;
use crate::param::IntParam;
use pyo3::conversion::FromPyObjectOwned;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

/// A Python int shown in a message: itself when short, else its first digits and its length (an int beyond
/// `sys.get_int_max_str_digits()` cannot even be turned into a string).
pub(super) fn shown_int(v: &Bound<'_, PyAny>) -> String {
    match v.repr() {
        Ok(r) => {
            let r = r.to_string();
            if r.len() <= 40 { r } else { format!("{}… ({} digits)", &r[..20], r.trim_start_matches('-').len()) }
        }
        Err(_) => "an int of thousands of digits".to_string(),
    }
}

/// Translate an int argument (a Python int of any magnitude; python/trdata made it one) into the core's type
/// `T`. Its range is the core's rule `param`: a value `T` cannot hold is outside it, so it gets that rule's
/// error (never an unnamed OverflowError); any other value is checked by the core where it is used.
pub fn int_arg<'py, T: FromPyObjectOwned<'py>>(v: &Bound<'py, PyAny>, param: &IntParam) -> PyResult<T> {
    // A bool is an int to Python (True == 1) but never a count or a size: `workers=True` is a mistake.
    if !v.is_instance_of::<PyInt>() || v.is_instance_of::<PyBool>() {
        let shown = v.repr().map_or_else(|_| "?".to_string(), |r| r.to_string());
        return Err(to_py(TrdataError::config(param.name, format!("{shown} must be an int"))));
    }
    v.extract::<T>().map_err(|_| to_py(param.error(&shown_int(v))))
}

/// An optional int argument: None keeps `default` (the core's).
pub fn opt_int_arg<'py, T: FromPyObjectOwned<'py>>(
    v: Option<&Bound<'py, PyAny>>,
    param: &IntParam,
    default: T,
) -> PyResult<T> {
    v.map_or(Ok(default), |v| int_arg(v, param))
}
