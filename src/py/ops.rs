//! The binding of the program's ops (augment/ops.rs): Python's `Transform._spec()` tuples of the ops beyond the
//! four classic transforms become core values ([`Arg`]) that the core parses; `_core.sample_op` returns what an
//! op draws for one sample (the tests compare those distributions with torchvision's); the ops' defaults join
//! `_core.DEFAULTS`.

use super::args::int_arg;
use super::errors::{IntoPyResult, to_py};
use crate::augment;
use crate::augment::ops::{Arg, OpSpec, RandomApply, RandomChoice, RandomOrder, Site};
use crate::augment::{SampleKey, TransformSpec, default, program};
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

/// The ops' defaults (`Class.parameter` keys), added to `_core.DEFAULTS`.
pub fn add_defaults(d: &Bound<'_, PyDict>) -> PyResult<()> {
    for cls in [
        "RandomVerticalFlip",
        "RandomErasing",
        "RandomAutocontrast",
        "RandomEqualize",
        "RandomSolarize",
        "RandomPosterize",
        "RandomAdjustSharpness",
        "RandomInvert",
    ] {
        d.set_item(format!("{cls}.p"), default::GATE_P)?;
    }
    d.set_item("RandomGrayscale.p", default::GRAYSCALE_P)?;
    d.set_item("Grayscale.num_output_channels", default::GRAYSCALE_CHANNELS)?;
    d.set_item("GaussianBlur.sigma", default::BLUR_SIGMA)?;
    d.set_item("GaussianNoise.mean", default::NOISE_MEAN)?;
    d.set_item("GaussianNoise.sigma", default::NOISE_SIGMA)?;
    d.set_item("GaussianNoise.clip", default::NOISE_CLIP)?;
    d.set_item("RandomErasing.scale", default::ERASING_SCALE)?;
    d.set_item("RandomErasing.ratio", default::ERASING_RATIO)?;
    d.set_item("RandomErasing.value", default::ERASING_VALUE)?;
    d.set_item("Pad.fill", default::FILL)?;
    d.set_item("Pad.padding_mode", default::PADDING_MODE)?;
    use crate::augment::ops::default as g;
    for cls in ["RandomRotation", "RandomAffine"] {
        d.set_item(format!("{cls}.interpolation"), g::NEAREST)?;
        d.set_item(format!("{cls}.fill"), g::WARP_FILL)?;
    }
    d.set_item("RandomPerspective.interpolation", g::BILINEAR)?;
    d.set_item("RandomPerspective.fill", g::WARP_FILL)?;
    d.set_item("RandomPerspective.distortion_scale", g::DISTORTION_SCALE)?;
    d.set_item("RandomPerspective.p", g::PERSPECTIVE_P)?;
    d.set_item("AutoAugment.policy", g::AA_POLICY)?;
    for cls in ["AutoAugment", "RandAugment", "TrivialAugmentWide"] {
        d.set_item(format!("{cls}.interpolation"), g::NEAREST)?;
    }
    d.set_item("RandAugment.num_ops", g::RA_NUM_OPS)?;
    d.set_item("RandAugment.magnitude", g::RA_MAGNITUDE)?;
    d.set_item("RandAugment.num_magnitude_bins", g::MAGNITUDE_BINS)?;
    d.set_item("TrivialAugmentWide.num_magnitude_bins", g::MAGNITUDE_BINS)?;
    d.set_item("AugMix.severity", g::AUGMIX_SEVERITY)?;
    d.set_item("AugMix.mixture_width", g::AUGMIX_WIDTH)?;
    d.set_item("AugMix.chain_depth", g::AUGMIX_DEPTH)?;
    d.set_item("AugMix.alpha", g::AUGMIX_ALPHA)?;
    d.set_item("AugMix.all_ops", g::AUGMIX_ALL_OPS)?;
    d.set_item("AugMix.interpolation", g::BILINEAR)?;
    d.set_item("RandomApply.p", default::GATE_P)?;
    for cls in ["Resize", "RandomResizedCrop"] {
        d.set_item(format!("{cls}.interpolation"), g::BILINEAR)?;
        d.set_item(format!("{cls}.antialias"), true)?;
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
