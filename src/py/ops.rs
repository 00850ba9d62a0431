//! The binding of the program's ops (augment/ops/): Python's `Transform._spec()` tuples of the ops beyond the
//! four classic transforms become core values ([`Arg`]) that the core parses; `_core.sample_op` returns what an
//! op draws for one sample (the tests compare those distributions with torchvision's); the ops' defaults
//! (`Op::DEFAULTS`) join `_core.DEFAULTS`.

use super::args::int_arg;
use super::errors::{IntoPyResult, to_py};
use crate::augment;
use crate::augment::ops::{Arg, DefaultValue, OpSpec, RandomApply, RandomChoice, RandomOrder, Site};
use crate::augment::{SampleKey, TransformSpec, program};
use crate::error::TrdataError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// A Python value as a core [`Arg`] (None, bool, int, float, str, tuple/list of those).
fn arg(v: &Bound<'_, PyAny>) -> PyResult<Arg> {
    Ok(if v.is_none() {
        Arg::None
    } else if v.is_instance_of::<PyBool>() {
        Arg::Bool(v.extract()?)
    } else if v.is_instance_of::<PyInt>() {
        Arg::Int(v.extract::<i128>().unwrap_or(i128::MAX))
    } else if v.is_instance_of::<PyFloat>() {
        Arg::Num(v.extract()?)
    } else if v.is_instance_of::<PyString>() {
        Arg::Str(v.extract()?)
    } else if v.is_instance_of::<PyTuple>() || v.is_instance_of::<PyList>() {
        Arg::List(v.try_iter()?.map(|i| arg(&i?)).collect::<PyResult<_>>()?)
    } else {
        return Err(to_py(TrdataError::config("transforms", format!("{v} is not a spec value"))));
    })
}

/// `("kind", args…)` of a kind `OpSpec::is_kind` knows → the core's spec.
pub fn parse_op(kind: &str, t: &Bound<'_, PyTuple>) -> PyResult<TransformSpec> {
    let args = t.iter().skip(1).map(|v| arg(&v)).collect::<PyResult<Vec<_>>>()?;
    OpSpec::from_args(kind, &args).map(TransformSpec::Op).py_err()
}

/// `("resampled", interpolation, antialias, <resize tuple>)` (Resize/RandomResizedCrop with a filter other than
/// antialiased bilinear) → `TransformSpec::Resampled`; the interpolation's values are the core's choice table.
pub fn parse_resampled(t: &Bound<'_, PyTuple>) -> PyResult<TransformSpec> {
    use crate::augment::geometry::{RESIZE_INTERPOLATION, Resample};
    let interp = t.get_item(1)?;
    let filter = match interp.extract::<String>() {
        Ok(s) => RESIZE_INTERPOLATION.parse(&s).py_err()?,
        Err(_) => return Err(to_py(RESIZE_INTERPOLATION.error(&interp.to_string()))),
    };
    let antialias: bool = t.get_item(2)?.extract()?;
    let inner = parse_transform(t.get_item(3)?.cast::<PyTuple>()?)?;
    Ok(TransformSpec::Resampled { resample: Resample { filter, antialias }, inner: Box::new(inner) })
}

/// What the op of `spec` (a `_spec()` tuple, any transform: a geometric one as its stage-2 op, a container its own
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

/// Translate one transform tuple (`Transform._spec()`) into the core's spec; its values are checked by the
/// core when the pipeline is compiled (augment/geometry.rs).
pub(super) fn parse_transform(t: &Bound<'_, PyTuple>) -> PyResult<TransformSpec> {
    let kind: String = t.get_item(0)?.extract()?;
    let u = |i: usize| -> PyResult<u32> { int_arg(&t.get_item(i)?, &augment::geometry::SIZE) };
    let f = |i: usize| -> PyResult<f64> { t.get_item(i)?.extract() };
    Ok(match kind.as_str() {
        "random_resized_crop" => TransformSpec::RandomResizedCrop {
            height: u(1)?,
            width: u(2)?,
            scale: (f(3)?, f(4)?),
            ratio: (f(5)?, f(6)?),
        },
        "resize_shorter" => TransformSpec::ResizeShorter { shorter: u(1)? },
        "resize" => TransformSpec::ResizeExact { height: u(1)?, width: u(2)? },
        "resize_keep_ratio" => TransformSpec::ResizeKeepRatio { height: u(1)?, width: u(2)?, longest: f(3)? },
        "center_crop" => TransformSpec::CenterCrop { height: u(1)?, width: u(2)? },
        "horizontal_flip" => TransformSpec::RandomHorizontalFlip { p: f(1)? },
        "resampled" => return parse_resampled(t),
        "random_apply" | "random_choice" | "random_order" => return parse_container(&kind, t),
        other if OpSpec::is_kind(other) => return parse_op(other, t),
        other => return Err(to_py(TrdataError::config("transforms", format!("unknown transform {other:?}")))),
    })
}

/// `("random_apply", (inner specs…), p)`, `("random_choice", (inner specs…), p or None)`,
/// `("random_order", (inner specs…))` → the container op; each inner spec is parsed like a top-level one and
/// becomes its stage-2 op (containers always run on the uint8 image). Values are checked by the core when the
/// program is compiled (`OpSpec::check`).
fn parse_container(kind: &str, t: &Bound<'_, PyTuple>) -> PyResult<TransformSpec> {
    let list = t.get_item(1)?;
    let mut transforms = Vec::new();
    for (i, item) in list.try_iter()?.enumerate() {
        let item = item?;
        let spec = parse_transform(item.cast::<PyTuple>()?)?;
        // The site here only names the op in an `interpolation` message; the compile checks again in place.
        transforms.push(program::stage2_op(&spec, Site::top(0).child(i)).py_err()?);
    }
    Ok(TransformSpec::Op(match kind {
        "random_apply" => OpSpec::RandomApply(RandomApply { transforms, p: t.get_item(2)?.extract()? }),
        "random_choice" => {
            let p = t.get_item(2)?;
            let p: Vec<f64> = if p.is_none() { vec![1.0; transforms.len()] } else { p.extract()? };
            OpSpec::RandomChoice(RandomChoice { transforms, p })
        }
        _ => OpSpec::RandomOrder(RandomOrder { transforms }),
    }))
}

/// Register `sample_op`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sample_op, m)?)
}
