//! The binding of the batch ops (python/trdata/batch.py: MixUp, CutMix, RandomChoice, BatchRandomErasing): their
//! `_spec()`s (`("kind", {name: value, …})`, read by name as the transforms' are: src/py/ops.rs) are checked by
//! the core's rules (rng.rs for alpha, num_classes and the batch_ops list;
//! augment/ops/erase.rs for RandomErasing's p/scale/ratio) and drawn from the batch streams of rng.rs. Python applies
//! the drawn values to the batch on its device (numpy or torch); no pixel passes through here.

use super::errors::IntoPyResult;
use super::source::NativeSource;
use crate::augment::ops::{Arg, Args, Drawn, EraseValue, HorizontalFlip, OpSpec, RandomErasing};
use crate::error::TrdataError;
use crate::rng::{self, BatchInput, SampleRng};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// A batch op as the core sees it (the `_spec()`, types already translated by python/trdata/batch.py).
enum BatchOp {
    MixUp {
        alpha: f64,
        num_classes: Option<u64>,
    },
    CutMix {
        alpha: f64,
        num_classes: Option<u64>,
    },
    /// YOLO's MixUp for detection: with probability `p`, one r ~ Beta(α, α) per batch; targets concatenated.
    DetectionMixUp {
        alpha: f64,
        p: f64,
    },
    Choice {
        ops: Vec<BatchOp>,
        p: Option<Vec<f64>>,
    },
    Erasing {
        op: OpSpec,
        noise: bool,
    },
}

impl BatchOp {
    /// `("kind", {name: value, …})` (`_spec()`, converted whole) → the op; parameters are read by name through the
    /// core's [`Args`] (a missing, unknown or mistyped one is a ConfigError naming it), as the transforms' specs.
    fn parse(spec: &Arg) -> Result<Self, TrdataError> {
        let malformed = || TrdataError::config("batch_ops", format!("{spec:?} must be a (kind, {{name: value}}) spec"));
        let Arg::List(v) = spec else { return Err(malformed()) };
        let [Arg::Str(kind), Arg::Map(params)] = v.as_slice() else { return Err(malformed()) };
        let a = Args::new(kind, params)?;
        let num_classes = || match a.get("num_classes")? {
            Arg::None => Ok(None),
            Arg::Int(v) => u64::try_from(*v)
                .map(Some)
                .map_err(|_| TrdataError::config("num_classes", format!("{v} must be in 0..=2**64 - 1"))),
            other => Err(TrdataError::config("num_classes", format!("{other:?} must be an int or None"))),
        };
        let op = match kind.as_str() {
            "mixup" => BatchOp::MixUp { alpha: a.num("alpha")?, num_classes: num_classes()? },
            "cutmix" => BatchOp::CutMix { alpha: a.num("alpha")?, num_classes: num_classes()? },
            "detection_mixup" => BatchOp::DetectionMixUp { alpha: a.num("alpha")?, p: a.num("p")? },
            "random_choice" => {
                let ops = match a.get("ops")? {
                    Arg::List(ops) => ops.iter().map(BatchOp::parse).collect::<Result<_, _>>()?,
                    other => {
                        return Err(TrdataError::config("batch_ops", format!("{other:?} must be a list of specs")));
                    }
                };
                BatchOp::Choice { ops, p: if a.is_none("p")? { None } else { Some(a.nums("p")?) } }
            }
            "batch_random_erasing" => {
                // The fill is in the batch's own units (after normalize), any number: torchvision accepts any
                // `value`; p/scale/ratio are RandomErasing's, checked by augment/ops/erase.rs with a neutral fill.
                let op = OpSpec::RandomErasing(RandomErasing {
                    p: a.num("p")?,
                    scale: a.pair("scale")?,
                    ratio: a.pair("ratio")?,
                    value: EraseValue::Values(vec![0.0]),
                });
                BatchOp::Erasing { op, noise: matches!(a.get("value")?, Arg::Str(_)) }
            }
            other => return Err(TrdataError::config("batch_ops", format!("{other:?} is no batch op"))),
        };
        a.finish()?;
        Ok(op)
    }

    fn name(&self) -> &'static str {
        match self {
            BatchOp::MixUp { .. } => "MixUp",
            BatchOp::CutMix { .. } => "CutMix",
            BatchOp::DetectionMixUp { .. } => "DetectionMixUp",
            BatchOp::Choice { .. } => "RandomChoice",
            BatchOp::Erasing { .. } => "BatchRandomErasing",
        }
    }

    /// Check against the core's rules; the soft labels' class count (None: labels stay as they are).
    fn check(&self, input: &BatchInput, whence: &str) -> Result<Option<u32>, TrdataError> {
        match self {
            BatchOp::MixUp { alpha, num_classes } | BatchOp::CutMix { alpha, num_classes } => {
                rng::check_alpha(*alpha, whence)?;
                let blends = matches!(self, BatchOp::MixUp { .. });
                rng::check_batch_op_input(input, blends, false, true, *num_classes, whence)
            }
            BatchOp::DetectionMixUp { alpha, p } => {
                rng::check_alpha(*alpha, whence)?;
                // p's one rule is the transforms' (augment/ops: a probability), said for this op
                OpSpec::HorizontalFlip(HorizontalFlip { p: *p })
                    .check(0)
                    .map_err(|e| in_op(e, "RandomHorizontalFlip", whence))?;
                Ok(None) // labels stay; the targets are concatenated (python/trdata/batch_ops.py)
            }
            BatchOp::Choice { ops, p } => {
                rng::check_batch_ops_len(ops.len(), 1, whence)?;
                rng::check_choice_weights(p.as_deref(), ops.len(), whence)?;
                let mut classes = None;
                // python/trdata/batch.py refuses a RandomChoice inside a RandomChoice (a type rule).
                for (j, op) in ops.iter().enumerate() {
                    let at = whence.split_once(" at ").map_or(whence, |(_, at)| at); // "batch_ops[i]"
                    let k = op.check(input, &format!("{} at {at}.ops[{j}]", op.name()))?;
                    classes = classes.or(k); // labels of a choice become soft if any of its ops mixes them
                }
                Ok(classes)
            }
            BatchOp::Erasing { op, noise } => {
                op.check(0).map_err(|e| in_op(e, "RandomErasing", whence))?;
                rng::check_batch_op_input(input, false, *noise, false, None, whence)
            }
        }
    }

    /// The op's draws for one batch (see `batch_op_draw`).
    fn draw(&self, rng: &mut SampleRng, key: (u64, u64, u64, usize), rows: usize, hw: (u64, u64), out: &mut Vec<f64>) {
        match self {
            BatchOp::MixUp { alpha, .. } => out.push(rng::mixup_lam(rng, *alpha)),
            BatchOp::DetectionMixUp { alpha, p } => {
                let gate = rng.uniform() < *p;
                out.extend([f64::from(u8::from(gate)), rng::mixup_lam(rng, *alpha)]);
            }
            BatchOp::CutMix { alpha, .. } => {
                let (lam, y1, y2, x1, x2) = rng::cutmix_box(rng, *alpha, hw.0, hw.1);
                out.extend([lam, y1 as f64, y2 as f64, x1 as f64, x2 as f64]);
            }
            BatchOp::Choice { ops, p } => {
                let p = rng::check_choice_weights(p.as_deref(), ops.len(), "").unwrap_or_default();
                let j = rng::choose(rng, &p);
                out.push(j as f64);
                let (seed, epoch, batch, position) = key;
                let mut member = rng::batch_rng(seed, epoch, batch, position, j + 1);
                ops[j].draw(&mut member, key, rows, hw, out);
            }
            BatchOp::Erasing { op, .. } => {
                let hwc = (hw.0 as usize, hw.1 as usize, 1);
                for _ in 0..rows {
                    match op.sample(rng, hwc) {
                        Ok(Drawn::Erase { top, left, h, w }) => out.extend([top, left, h, w].map(f64::from)),
                        _ => out.extend([0.0; 4]),
                    }
                }
                let noise_seed = rng.next_u64();
                out.extend([(noise_seed >> 32) as f64, (noise_seed & 0xFFFF_FFFF) as f64]);
            }
        }
    }
}

/// A transform rule's error `e` (checked as `op` at transforms[0]) said for the batch op at `whence`.
fn in_op(e: TrdataError, op: &str, whence: &str) -> TrdataError {
    match e {
        TrdataError::Config { parameter, message } => TrdataError::Config {
            parameter,
            message: message.replace(&format!("({op} at transforms[0])"), &format!("({whence})")),
        },
        other => other,
    }
}

/// Check the batch op `spec` at `batch_ops[position]` against the loader's output (`float_images`: a float
/// dtype; `classes`: the source's class count with int labels; `target_shape`: S of float targets (N, *S)).
/// Returns the class count of the soft labels it makes (None when it leaves labels alone).
#[pyfunction]
#[pyo3(signature = (spec, position, *, float_images, classes, target_shape, source = None))]
fn batch_op_check(
    spec: &Bound<'_, PyTuple>,
    position: usize,
    float_images: bool,
    classes: Option<u64>,
    target_shape: Option<Vec<u64>>,
    source: Option<PyRef<'_, NativeSource>>,
) -> PyResult<Option<u32>> {
    let op = BatchOp::parse(&super::ops::arg(spec.as_any())?).py_err()?;
    let labels = source.as_ref().and_then(|s| s.dataset.known_labels()).unwrap_or(&[]);
    let input = BatchInput { float_images, classes, target_shape, labels };
    op.check(&input, &format!("{} at batch_ops[{position}]", op.name())).py_err()
}

/// Check the length of a `batch_ops` list.
#[pyfunction]
#[pyo3(signature = (len, views = 1))]
fn batch_ops_check_len(len: usize, views: usize) -> PyResult<()> {
    rng::check_batch_ops_len(len, 0, "batch_ops").and_then(|()| rng::check_batch_ops_views(len, views)).py_err()
}

/// What the batch op `spec` at `batch_ops[position]` draws for global batch `batch` of `epoch` on a batch of
/// `rows` images of `height × width`: MixUp `[lam]`; DetectionMixUp `[gate (1 or 0), r]`; CutMix `[lam_adjusted, y1, y2, x1, x2]`; RandomChoice
/// `[j, *draws of op j]`; BatchRandomErasing `rows × [top, left, h, w]` (h = w = 0: not erased) followed by the
/// noise seed's high and low 32 bits.
#[pyfunction]
#[pyo3(signature = (spec, *, seed, epoch, batch, position, rows, height, width))]
#[allow(clippy::too_many_arguments)]
fn batch_op_draw(
    spec: &Bound<'_, PyTuple>,
    seed: u64,
    epoch: u64,
    batch: u64,
    position: usize,
    rows: usize,
    height: u64,
    width: u64,
) -> PyResult<Vec<f64>> {
    let op = BatchOp::parse(&super::ops::arg(spec.as_any())?).py_err()?;
    if height == 0 || width == 0 || position > rng::MAX_BATCH_OPS {
        return Err(pyo3::exceptions::PyValueError::new_err("batch_op_draw: empty image or position beyond the list"));
    }
    let mut out = Vec::new();
    let mut r = rng::batch_rng(seed, epoch, batch, position, 0);
    op.draw(&mut r, (seed, epoch, batch, position), rows, (height, width), &mut out);
    Ok(out)
}

/// The 64-bit seed of `batch_transform`'s generator for global batch `batch` of `epoch`.
#[pyfunction]
#[pyo3(signature = (*, seed, epoch, batch))]
fn batch_seed(seed: u64, epoch: u64, batch: u64) -> u64 {
    rng::batch_seed(seed, epoch, batch)
}

/// The batch ops' defaults (`Class.parameter` keys), added to `_core.DEFAULTS`.
fn add_defaults(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let d = m.getattr("DEFAULTS")?;
    d.set_item("MixUp.alpha", 1.0)?;
    d.set_item("CutMix.alpha", 1.0)?;
    d.set_item("DetectionMixUp.alpha", 32.0)?;
    d.set_item("DetectionMixUp.p", 1.0)?;
    Ok(())
}

/// Register the batch-op functions and defaults.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(batch_op_check, m)?)?;
    m.add_function(wrap_pyfunction!(batch_ops_check_len, m)?)?;
    m.add_function(wrap_pyfunction!(batch_op_draw, m)?)?;
    m.add_function(wrap_pyfunction!(batch_seed, m)?)?;
    add_defaults(m)
}
