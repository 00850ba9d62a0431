//! The containers family: `RandomApply`, `RandomChoice`, `RandomOrder`, each one [`super::Op`] for its own check,
//! output size and decision; the inner ops they select ([`Op::picked`]) run in `program::run_op` (each on the
//! stream of its own [`Site::child`]), so their [`Op::apply`] is never called. The binding builds them from the
//! inner specs (src/py/ops.rs), so they have no spec kind here. For a detection sample's targets a container is
//! what its inner ops are (it leaves the geometry alone if they all do, needs the boxes if one does).

use super::{DefaultValue, bad, check_p, gated, randperm, shown_hw};
use super::{Drawn, MAX_CONTAINER_OPS, MAX_CONTAINER_POSITION, MAX_NESTING, Op, OpScratch, OpSpec, P, TRANSFORMS};
use crate::augment::kernels::Frame;
use crate::augment::site::Site;
use crate::error::Result;
use crate::rng::SampleRng;

/// A container's inner list: 1..=[`MAX_CONTAINER_OPS`] ops (torchvision refuses an empty one), nested at most
/// [`MAX_NESTING`] deep, at a position below [`MAX_CONTAINER_POSITION`] — the bounds [`Site::stream`] needs for
/// distinct streams — and each inner op valid.
fn check_inner(transforms: &[OpSpec], op: &str, pos: Site) -> Result<()> {
    if transforms.is_empty() || transforms.len() > MAX_CONTAINER_OPS {
        return Err(bad(
            TRANSFORMS,
            format!("a list of {}", transforms.len()),
            &format!("hold 1 to {MAX_CONTAINER_OPS} transforms"),
            op,
            pos,
        ));
    }
    if pos.depth() >= MAX_NESTING {
        return Err(bad(TRANSFORMS, op, &format!("be nested at most {MAX_NESTING} containers deep"), op, pos));
    }
    if pos.position() >= MAX_CONTAINER_POSITION {
        return Err(bad(
            TRANSFORMS,
            op,
            &format!("sit in the first {MAX_CONTAINER_POSITION} positions of the list"),
            op,
            pos,
        ));
    }
    for (i, t) in transforms.iter().enumerate() {
        t.check_at(pos.child(i))?;
    }
    Ok(())
}

/// The ops a container selects run in `program::run_op`, never through [`Op::apply`].
fn inner_ops_run_in_program(name: &str) -> ! {
    unreachable!("{name}: containers run in program::run_op (their inner ops need their own streams)")
}

/// `RandomApply(transforms, p)`: one gate draw; when it passes, every inner op in order (each on its own
/// stream, [`Site::child`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomApply {
    /// The inner ops.
    pub transforms: Vec<OpSpec>,
    /// Probability of applying them all.
    pub p: f64,
}

impl Op for RandomApply {
    const KINDS: &'static [&'static str] = &[];
    const DEFAULTS: &'static [(&'static str, DefaultValue)] =
        &[("RandomApply.p", DefaultValue::Num(crate::augment::default::GATE_P))];

    fn name(&self) -> &'static str {
        "RandomApply"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_p(self.p, op, pos)?;
        check_inner(&self.transforms, op, pos)
    }

    fn output_hw_at(&self, hw: Option<(usize, usize)>, pos: Site) -> Result<Option<(usize, usize)>> {
        let out = self.transforms.iter().enumerate().try_fold(hw, |hw, (i, t)| t.output_hw_at(hw, pos.child(i)))?;
        if out != hw {
            return Err(bad(
                TRANSFORMS,
                "the inner list",
                &format!(
                    "keep the size of its input, {}, since the skipped branch does; it gives {}",
                    shown_hw(hw),
                    shown_hw(out)
                ),
                self.name(),
                pos,
            ));
        }
        Ok(out)
    }

    fn oversized(&self, _: (usize, usize)) -> Option<(usize, usize)> {
        None
    }

    fn sample(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(gated(rng, self.p, Drawn::Apply))
    }

    fn apply(&self, _: &Drawn, _: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {
        inner_ops_run_in_program(self.name())
    }

    fn inner(&self) -> Option<&[OpSpec]> {
        Some(&self.transforms)
    }

    fn picked(&self, _: &Drawn) -> Vec<usize> {
        (0..self.transforms.len()).collect()
    }
}

/// `RandomChoice(transforms, p)`: one inner op, picked with probability `p[i] / sum(p)` (torchvision v2
/// normalises `p`; `None` is uniform).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomChoice {
    /// The inner ops.
    pub transforms: Vec<OpSpec>,
    /// Weights (one per op, ≥ 0, positive sum; not yet normalised).
    pub p: Vec<f64>,
}

impl Op for RandomChoice {
    const KINDS: &'static [&'static str] = &[];

    fn name(&self) -> &'static str {
        "RandomChoice"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        let (transforms, p) = (&self.transforms, &self.p);
        check_inner(transforms, op, pos)?;
        let total: f64 = p.iter().sum();
        if p.len() != transforms.len() || !p.iter().all(|v| v.is_finite() && *v >= 0.0) || total <= 0.0 {
            return Err(bad(
                P,
                format!("{p:?}"),
                &format!(
                    "be None or one weight per transform ({}), each finite and ≥ 0, with a positive sum",
                    transforms.len()
                ),
                op,
                pos,
            ));
        }
        Ok(())
    }

    /// The size every branch gives ([`Op::output_hw_at`] refuses lists where they differ).
    fn output_hw(&self, hw: Option<(usize, usize)>) -> Option<(usize, usize)> {
        self.transforms.first().map_or(hw, |t| t.output_hw(hw))
    }

    fn output_hw_at(&self, hw: Option<(usize, usize)>, pos: Site) -> Result<Option<(usize, usize)>> {
        let first = self.transforms[0].output_hw_at(hw, pos.child(0))?;
        for (i, t) in self.transforms.iter().enumerate().skip(1) {
            let out = t.output_hw_at(hw, pos.child(i))?;
            if out != first {
                return Err(bad(
                    TRANSFORMS,
                    "the inner list",
                    &format!(
                        "give one output size whichever is picked: {} gives {}, {} gives {}",
                        pos.child(0),
                        shown_hw(first),
                        pos.child(i),
                        shown_hw(out)
                    ),
                    self.name(),
                    pos,
                ));
            }
        }
        Ok(first)
    }

    fn oversized(&self, _: (usize, usize)) -> Option<(usize, usize)> {
        None
    }

    fn sample(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        // torch.multinomial(p / sum(p), 1): one uniform against the cumulative weights; a zero weight is never
        // picked (the fallback is the last positive one, for a u that rounding put past the end).
        let p = &self.p;
        let total: f64 = p.iter().sum();
        let u = rng.uniform() * total;
        let mut cum = 0.0;
        let last = p.iter().rposition(|&v| v > 0.0).unwrap_or(0);
        let pick = p.iter().position(|&v| {
            cum += v;
            v > 0.0 && u < cum
        });
        Ok(Drawn::Pick(pick.unwrap_or(last) as u32))
    }

    fn apply(&self, _: &Drawn, _: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {
        inner_ops_run_in_program(self.name())
    }

    fn inner(&self) -> Option<&[OpSpec]> {
        Some(&self.transforms)
    }

    fn picked(&self, drawn: &Drawn) -> Vec<usize> {
        match drawn {
            Drawn::Pick(i) => vec![*i as usize],
            _ => Vec::new(),
        }
    }
}

/// `RandomOrder(transforms)`: every inner op, in a random permutation (`torch.randperm`).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomOrder {
    /// The inner ops.
    pub transforms: Vec<OpSpec>,
}

impl Op for RandomOrder {
    const KINDS: &'static [&'static str] = &[];

    fn name(&self) -> &'static str {
        "RandomOrder"
    }

    fn check(&self, op: &str, pos: Site) -> Result<()> {
        check_inner(&self.transforms, op, pos)
    }

    fn output_hw_at(&self, hw: Option<(usize, usize)>, pos: Site) -> Result<Option<(usize, usize)>> {
        for (i, t) in self.transforms.iter().enumerate() {
            let out = t.output_hw_at(hw, pos.child(i))?;
            if out != hw {
                return Err(bad(
                    TRANSFORMS,
                    "the inner list",
                    &format!(
                        "hold ops that keep the size of their input, {} (they run in any order): {} gives {}",
                        shown_hw(hw),
                        pos.child(i),
                        shown_hw(out)
                    ),
                    self.name(),
                    pos,
                ));
            }
        }
        Ok(hw)
    }

    fn oversized(&self, _: (usize, usize)) -> Option<(usize, usize)> {
        None
    }

    fn sample(&self, rng: &mut SampleRng, _hwc: (usize, usize, usize)) -> std::result::Result<Drawn, String> {
        Ok(randperm(rng, self.transforms.len()))
    }

    fn apply(&self, _: &Drawn, _: &mut Frame, _: &mut OpScratch, _: &mut SampleRng) {
        inner_ops_run_in_program(self.name())
    }

    fn inner(&self) -> Option<&[OpSpec]> {
        Some(&self.transforms)
    }

    fn picked(&self, drawn: &Drawn) -> Vec<usize> {
        match drawn {
            Drawn::Order { order, n } => order[..usize::from(*n)].iter().map(|&i| usize::from(i)).collect(),
            _ => Vec::new(),
        }
    }
}
