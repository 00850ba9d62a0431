//! step — a per-sample step written outside the core (a Python callable: `trdata.PythonStep`, a `v2.Lambda`, a
//! torchvision op trdata does not compile), run at its position in the program on the uint8 image, the native ops
//! before and after it staying native. The core sees an [`ImageStep`]: the binding (`py/step.rs`) attaches to the
//! interpreter, hands it the image and a seed, and copies back what it returns.
//!
//! Randomness: the step gets one u64 seed drawn from its own op stream (seed, epoch, index, position), so a
//! reproducible loader stays reproducible if the step draws only from the generators the binding seeds with it.
//! Size: a step keeps the image's (height, width, channels) — the program's size walk counts on it; a step that
//! changes it fails the sample, naming the sizes. (`std::sync::Arc`, not the loom-swappable one: a shared
//! immutable handle, no protocol.)

use super::{Arg, Args, Drawn, Op, OpScratch, undrawn};
use crate::augment::kernels::Frame;
use crate::augment::site::Site;
use crate::error::{Result, TrdataError};
use crate::rng::SampleRng;
use std::fmt;
use std::sync::Arc;

/// Code that transforms one uint8 HWC image in place of the core (implemented by the binding).
pub trait ImageStep: Send + Sync {
    /// What messages call it (the callable's name).
    fn name(&self) -> &str;

    /// Transform `pixels` (`h × w × c`, HWC) with randomness from `seed`; the result must have the same shape
    /// and is written back into `pixels`. An error is the sample's.
    fn run(&self, pixels: &mut [u8], hwc: (usize, usize, usize), seed: u64) -> std::result::Result<(), String>;
}

/// A shared [`ImageStep`] as a spec value ([`Arg::Step`]) and in the program; equal when it is the same step.
#[derive(Clone)]
pub struct StepRef(pub Arc<dyn ImageStep>);

impl fmt::Debug for StepRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Step({})", self.0.name())
    }
}

impl PartialEq for StepRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// `trdata.PythonStep(fn)` (and what `from_torchvision` makes of the ops it does not compile).
#[derive(Debug, Clone, PartialEq)]
pub struct PythonStep {
    /// The step.
    pub step: StepRef,
}

impl Op for PythonStep {
    const KINDS: &'static [&'static str] = &["python_step"];

    fn parse(a: &Args<'_>) -> Result<Self> {
        match a.get("step")? {
            Arg::Step(step) => Ok(PythonStep { step: step.clone() }),
            other => Err(TrdataError::config("step", format!("{other:?} must be a step made by the binding"))),
        }
    }

    fn name(&self) -> &'static str {
        "PythonStep"
    }

    fn check(&self, _: &str, _: Site) -> Result<()> {
        Ok(())
    }

    fn sample(&self, _: &mut SampleRng, _: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(Drawn::Apply)
    }

    fn apply(&self, drawn: &Drawn, _: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {
        undrawn("PythonStep (a step can fail: Op::run)", drawn)
    }

    /// Run the step on `frame` with a seed drawn from the op's stream `rng`.
    fn run(
        &self,
        _: &Drawn,
        frame: &mut Frame,
        _: &mut OpScratch,
        rng: &mut SampleRng,
        site: Site,
    ) -> std::result::Result<(), String> {
        let hwc = (frame.h, frame.w, frame.c);
        let n = frame.h * frame.w * frame.c;
        let seed = rng.next_u64();
        self.step.0.run(&mut frame.buf[..n], hwc, seed).map_err(|m| format!("{} at {site}: {m}", self.step.0.name()))
    }
}
