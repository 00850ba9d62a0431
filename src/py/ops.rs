//! The binding of the transforms' specs and the program's ops (augment/ops/): Python's `Transform._spec()` is
//! `("kind", {name: value, …})` — the kind, then the parameters by name (torchvision's names, or the core's where
//! torchvision has none), a container's `transforms` being specs themselves. The binding converts it whole into
//! core values ([`Arg`]) and the core parses it, once (`TransformSpec::parse`, `OpSpec::from_args`): a missing
//! parameter, an unknown one and a wrong type are ConfigErrors naming the parameter. `_core.sample_op` returns
//! what an op draws for one sample (the tests compare those distributions with torchvision's); the ops' defaults
//! (`Op::DEFAULTS`) join `_core.DEFAULTS`.

use super::args::shown_int;
use super::errors::{IntoPyResult, to_py};
use crate::augment::ops::{Arg, DefaultValue, OpSpec, Site};
use crate::augment::{SampleKey, TransformSpec, program};
use crate::error::TrdataError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// A Python value as a core [`Arg`] (None, bool, int, float, str, tuple/list of those, dict of str to those).
/// An int beyond 128 bits is kept as its shown form (`Arg::BigInt`), which every range refuses.
pub(super) fn arg(v: &Bound<'_, PyAny>) -> PyResult<Arg> {
    Ok(if v.is_none() {
        Arg::None
    } else if v.is_instance_of::<PyBool>() {
        Arg::Bool(v.extract()?)
    } else if v.is_instance_of::<PyInt>() {
        v.extract::<i128>().map_or_else(|_| Arg::BigInt(shown_int(v)), Arg::Int)
    } else if v.is_instance_of::<PyFloat>() {
        Arg::Num(v.extract()?)
    } else if v.is_instance_of::<PyString>() {
        Arg::Str(v.extract()?)
    } else if v.is_instance_of::<PyTuple>() || v.is_instance_of::<PyList>() {
        Arg::List(v.try_iter()?.map(|i| arg(&i?)).collect::<PyResult<_>>()?)
    } else if let Ok(d) = v.cast::<PyDict>() {
        let mut params = Vec::with_capacity(d.len());
        for (k, value) in d.iter() {
            let Ok(name) = k.extract::<String>() else {
                return Err(to_py(TrdataError::config("transforms", format!("{k} is not a parameter name"))));
            };
            params.push((name, arg(&value)?));
        }
        Arg::Map(params)
    } else if let Ok(step) = v.cast::<super::step::Step>() {
        Arg::Step(step.get().inner.clone())
    } else {
        return Err(to_py(TrdataError::config("transforms", format!("{v} is not a spec value"))));
    })
}

/// What the op of `spec` (a `_spec()`, `("kind", {name: value})`, of any transform: a geometric one as its stage-2 op, a container its own
/// decision), at list position `position`, draws for sample (seed, epoch, index)
/// on a `height × width × channels` image: `[]` when it skips, `[1.0]` when it applies without parameters, else
/// its parameters (`augment::ops::Drawn::to_vec`).
#[pyfunction]
#[pyo3(signature = (spec, *, seed, epoch, index, position, height, width, channels))]
#[allow(clippy::too_many_arguments)]
fn sample_op(
    spec: &Bound<'_, PyTuple>,
    seed: u64,
    epoch: u64,
    index: u64,
    position: usize,
    height: usize,
    width: usize,
    channels: usize,
) -> PyResult<Vec<f64>> {
    let op = program::stage2_op(&parse_transform(spec)?, Site::top(position)).py_err()?;
    program::sample_op(&op, position, SampleKey { seed, epoch, index }, (height, width, channels)).py_err()
}

/// The ops' defaults (`Class.parameter` keys, each op's `Op::DEFAULTS`), added to `_core.DEFAULTS`.
pub fn add_defaults(d: &Bound<'_, PyDict>) -> PyResult<()> {
    for (key, value) in OpSpec::defaults() {
        match *value {
            DefaultValue::Num(v) => d.set_item(key, v)?,
            DefaultValue::Int(v) => d.set_item(key, v)?,
            DefaultValue::Bool(v) => d.set_item(key, v)?,
            DefaultValue::Str(v) => d.set_item(key, v)?,
            DefaultValue::Pair(a, b) => d.set_item(key, (a, b))?,
        }
    }
    Ok(())
}

/// Translate one spec (`Transform._spec()`, `("kind", {name: value, …})`) into the core's; its values are
/// checked by the core when the pipeline is compiled (augment/geometry.rs, `OpSpec::check`).
pub(super) fn parse_transform(t: &Bound<'_, PyTuple>) -> PyResult<TransformSpec> {
    TransformSpec::parse(&arg(t.as_any())?).py_err()
}

/// Register `sample_op`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sample_op, m)?)
}
