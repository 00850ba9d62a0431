//! Philox4x32-10 counter-based RNG (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
//!
//! There is no global RNG in trdata. Every random decision is `philox(counter, key)` with
//! key = seed and counter = (block, op, sample index, epoch), so a sample's augmentation depends only on
//! (seed, epoch, sample index, op) — never on which worker, how many threads or which GPU processed it.

use crate::error::{Result, TrdataError};
use crate::param::IntParam;

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Op index of the epoch-order shuffle (plan), kept apart from per-sample augmentation ops.
pub const OP_PLAN_SHUFFLE: u32 = 0x504C_414E;
/// Op index of the block permutation of a block-structured plan (partial packed files).
pub const OP_PLAN_BLOCKS: u32 = 0x424C_4B53;
/// Op index of the shuffle inside one window of blocks (the window number is the stream's sample index).
pub const OP_PLAN_WINDOW: u32 = 0x5749_4E44;
/// Op index of the replacement choice of the `skip` error policy.
pub const OP_SKIP_REPLACEMENT: u32 = 0x534B_4950;
/// Stream of a sample's decode route (GPU or CPU, gpu_decode/route.rs) — "ROUT".
pub const OP_DECODE_ROUTE: u32 = 0x524F_5554;
/// Op index of RandomResizedCrop's parameter draws.
pub const OP_RANDOM_RESIZED_CROP: u32 = 1;
/// Op index of RandomHorizontalFlip's coin.
pub const OP_HORIZONTAL_FLIP: u32 = 2;
/// Stream of the folded resize's per-sample filter choice (`interpolation='random'`, timm's bilinear/bicubic).
pub const OP_RANDOM_FILTER: u32 = 3;
/// Op index of the compiled program's op at list position `pos` is `OP_BASE + pos` (augment/program.rs): each op
/// draws from its own stream, a function of (seed, epoch, sample index, op position) only. Far from the fixed
/// indices above, so a list position can never alias them.
pub const OP_BASE: u32 = 0x100;

#[inline]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

/// One Philox4x32 block with 10 rounds.
#[inline]
pub fn philox4x32_10(mut ctr: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    for round in 0..10 {
        if round > 0 {
            key[0] = key[0].wrapping_add(W0);
            key[1] = key[1].wrapping_add(W1);
        }
        let (hi0, lo0) = mulhilo(M0, ctr[0]);
        let (hi1, lo1) = mulhilo(M1, ctr[2]);
        ctr = [hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0];
    }
    ctr
}

/// A stream of random numbers for one (seed, epoch, sample, op). Cheap to create; not shared.
#[derive(Debug, Clone)]
pub struct SampleRng {
    key: [u32; 2],
    ctr: [u32; 4],
    buf: [u32; 4],
    used: usize,
}

impl SampleRng {
    /// The stream of `op` for sample `index` in `epoch` under `seed`.
    pub fn new(seed: u64, epoch: u64, index: u64, op: u32) -> Self {
        let key = [seed as u32, (seed >> 32) as u32];
        // Counter words: [block, op, index, epoch ^ index_hi] — the high index bits are folded into the
        // epoch word so datasets above 2^32 samples still get distinct streams.
        let ctr = [0, op, index as u32, (epoch as u32) ^ ((index >> 32) as u32).rotate_left(16)];
        Self { key, ctr, buf: [0; 4], used: 4 }
    }

    /// Next 32 random bits.
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        if self.used == 4 {
            self.buf = philox4x32_10(self.ctr, self.key);
            self.ctr[0] = self.ctr[0].wrapping_add(1);
            self.used = 0;
        }
        let v = self.buf[self.used];
        self.used += 1;
        v
    }

    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        (u64::from(self.next_u32()) << 32) | u64::from(self.next_u32())
    }

    /// Uniform in [0, 1) with 53 bits of precision.
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    #[inline]
    pub fn uniform_range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// A standard normal variate (Box–Muller on two uniforms; the sine half is dropped so that every call costs
    /// the same two draws and the stream position does not depend on call parity).
    #[inline]
    pub fn normal_f32(&mut self) -> f32 {
        let u1 = 1.0 - self.uniform(); // (0, 1]: ln(0) would be -inf
        let u2 = self.uniform();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }

    /// Uniform integer in [0, bound) without modulo bias (Lemire's multiply-shift with rejection).
    #[inline]
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "below(0)");
        loop {
            let x = self.next_u64();
            let m = u128::from(x) * u128::from(bound);
            let low = m as u64;
            if low >= bound.wrapping_neg() % bound {
                return (m >> 64) as u64;
            }
        }
    }

    /// A standard normal variate in f64 (Box–Muller, cosine half only, as [`normal_f32`](Self::normal_f32): two
    /// uniforms per call, so the stream position never depends on call parity).
    #[inline]
    pub fn normal_f64(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]: ln(0) would be -inf
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// ln of a Gamma(shape, 1) variate, `shape > 0` (Marsaglia & Tsang 2000; for shape < 1 the boost
    /// Gamma(a) = Gamma(a + 1) · U^(1/a), taken in log space so that tiny shapes — whose variates underflow an
    /// f64 — still give a finite logarithm instead of 0 and a 0/0 Beta).
    pub fn ln_gamma_variate(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            let u = 1.0 - self.uniform(); // (0, 1]
            return self.ln_gamma_variate(shape + 1.0) + u.ln() / shape;
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal_f64();
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = 1.0 - self.uniform(); // (0, 1]: ln(u) finite
            if u < 1.0 - 0.0331 * x.powi(4) || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
                return d.ln() + v.ln();
            }
        }
    }

    /// A Beta(a, b) variate in [0, 1] (X / (X + Y) of two Gamma variates, computed from their logarithms:
    /// 1 / (1 + e^(ln Y − ln X))), `a, b > 0`.
    pub fn beta(&mut self, a: f64, b: f64) -> f64 {
        let ln_x = self.ln_gamma_variate(a);
        let ln_y = self.ln_gamma_variate(b);
        1.0 / (1.0 + (ln_y - ln_x).exp())
    }
}

// ---- Batch ops (python/trdata/batch.py: MixUp, CutMix, RandomChoice, BatchRandomErasing) -------------------
//
// A batch op runs once per batch, after the batch exists on its device. Its randomness is the stream
// `batch_rng(seed, epoch, batch, position, member)`: `batch` is the global batch number of the epoch (step · G + g
// for G engines, so every engine of every rank draws its own values), `position` the op's place in `batch_ops`,
// `member` 0 for the op itself and j + 1 for the j-th op of a RandomChoice. A batch's draws therefore depend on
// (seed, epoch, batch, position) only — never on worker count, prefetch depth or a resume — so reproducible mode
// stays byte-identical with batch ops. The rules of the batch ops' numbers live here (alpha, num_classes, the
// batch_ops list); RandomErasing's p/scale/ratio keep their one rule in augment/ops/erase.rs.

/// Op index base of the batch ops' streams: `OP_BATCH_BASE + position · 256 + member`, far above the per-sample
/// ops (`OP_BASE + pos`) and the plan's fixed indices, which are keyed by sample index, not batch number.
pub const OP_BATCH_BASE: u32 = 0x4241_0000;
/// The stream of `batch_transform`'s generator seed (`batch_seed`), apart from every op position.
pub const OP_BATCH_TRANSFORM: u32 = 0x4254_5246;
/// Most ops in `batch_ops`, and most ops in one RandomChoice (position and member share the op word's low 16 bits).
pub const MAX_BATCH_OPS: usize = 255;

/// The `alpha` parameter's name (MixUp/CutMix; rule: [`check_alpha`]).
const ALPHA: &str = "alpha";
/// The `batch_ops` parameter's name (rules: [`check_batch_ops_len`], [`check_choice_weights`], [`check_batch_op_input`]).
const BATCH_OPS: &str = "batch_ops";
/// `num_classes` of MixUp/CutMix: the soft labels are (N, num_classes) float32, allocated per batch, so the
/// bound keeps a batch of 1024 rows under 4 GiB.
pub const NUM_CLASSES: IntParam = IntParam::new("num_classes", 1, 1 << 20);

/// The stream of the batch op at `position` of `batch_ops` (`member`: 0 for the op, j + 1 for a RandomChoice's
/// j-th op) on global batch `batch` of `epoch`.
pub fn batch_rng(seed: u64, epoch: u64, batch: u64, position: usize, member: usize) -> SampleRng {
    debug_assert!(position <= MAX_BATCH_OPS && member <= MAX_BATCH_OPS, "checked by check_batch_ops_len");
    SampleRng::new(seed, epoch, batch, OP_BATCH_BASE + ((position as u32) << 8) + member as u32)
}

/// A 64-bit seed for `batch_transform`'s generator of global batch `batch` of `epoch`.
pub fn batch_seed(seed: u64, epoch: u64, batch: u64) -> u64 {
    SampleRng::new(seed, epoch, batch, OP_BATCH_TRANSFORM).next_u64()
}

/// `alpha` of MixUp/CutMix (`whence`: e.g. "MixUp at batch_ops[0]"): Beta(α, α) needs a finite α > 0, as
/// torch's Beta distribution does.
///
/// torchvision holds α in float32, where every α ≤ 2**-150 is 0 (and refused there); here such an α would draw λ
/// from Beta with subnormal parameters, which gives NaN images. So α must be a positive float32 too.
pub fn check_alpha(alpha: f64, whence: &str) -> Result<f64> {
    if !(alpha.is_finite() && alpha > 0.0) {
        Err(TrdataError::config(ALPHA, format!("{alpha} must be finite and > 0 ({whence})")))
    } else if alpha as f32 <= 0.0 {
        Err(TrdataError::config(
            ALPHA,
            format!(
                "{alpha:e} must be at least 2**-149 ≈ 1.4e-45, the smallest positive float32 (torchvision \
                 holds α in float32, where it is 0) ({whence})"
            ),
        ))
    } else {
        Ok(alpha)
    }
}

/// How many ops a `batch_ops` list (or a RandomChoice's list) holds: 1..=[`MAX_BATCH_OPS`] for a RandomChoice
/// (choosing among none has no meaning), 0..= for the list itself.
pub fn check_batch_ops_len(len: usize, min: usize, whence: &str) -> Result<()> {
    if (min..=MAX_BATCH_OPS).contains(&len) {
        Ok(())
    } else {
        Err(TrdataError::config(BATCH_OPS, format!("{len} ops must be {min}..={MAX_BATCH_OPS} ops ({whence})")))
    }
}

/// Batch ops mix or erase one image array per batch: a multi-view loader (`views=`, several arrays of
/// different sizes per batch) takes none (a user's `batch_transform` can treat its views as it wants).
pub fn check_batch_ops_views(len: usize, views: usize) -> Result<()> {
    if len > 0 && views > 1 {
        return Err(TrdataError::config(
            BATCH_OPS,
            format!("{len} ops must be none with {views} views (batch ops act on one image array per batch)"),
        ));
    }
    Ok(())
}

/// RandomChoice's `p`: one finite weight ≥ 0 per op, with a positive sum (torchvision normalizes by the sum);
/// `None` is equal weights. Returns the normalized probabilities.
pub fn check_choice_weights(weights: Option<&[f64]>, ops: usize, whence: &str) -> Result<Vec<f64>> {
    let Some(w) = weights else { return Ok(vec![1.0 / ops as f64; ops]) };
    let sum: f64 = w.iter().sum();
    if w.len() != ops || !w.iter().all(|v| v.is_finite() && *v >= 0.0) || !(sum > 0.0 && sum.is_finite()) {
        return Err(TrdataError::config(
            BATCH_OPS,
            format!("p={w:?} must be one finite weight ≥ 0 per op ({ops}) with a positive sum ({whence})"),
        ));
    }
    Ok(w.iter().map(|v| v / sum).collect())
}

/// What a batch op needs from the batch: MixUp blends pixels, so it needs float images (torchvision's MixUp
/// raises on uint8 — `mixes_pixels`); `value='random'` erasing writes N(0, 1) noise, meaningless in uint8
/// pixels (`noise`); soft labels need a class count: the op's `num_classes`, else the source's `classes`
/// (int labels), else the width K of (N, K) float targets, which must equal a given `num_classes`. Returns the
/// class count the soft labels get (None for an op that leaves labels alone).
pub struct BatchInput<'a> {
    /// The loader's dtype is a float type.
    pub float_images: bool,
    /// Class count of a source with int labels (its `classes`); None when unknown.
    pub classes: Option<u64>,
    /// Shape after N of float targets (N, *S); None for int labels.
    pub target_shape: Option<Vec<u64>>,
    /// The source's int labels as the core delivers them (empty: unknown or float targets). An op that makes
    /// one-hot rows of width k checks them once here, as torch's `one_hot` does per call: every batch's labels are
    /// the source's (padded rows repeat a sample), so no batch needs a check — on CUDA that would be a device
    /// sync per batch, and `one_hot` on CUDA reports a bad class only as a device-side assert.
    pub labels: &'a [i64],
}

/// See [`BatchInput`]; `mixes_labels`: the op makes soft labels (MixUp, CutMix); `num_classes`: the op's own.
pub fn check_batch_op_input(
    input: &BatchInput,
    mixes_pixels: bool,
    noise: bool,
    mixes_labels: bool,
    num_classes: Option<u64>,
    whence: &str,
) -> Result<Option<u32>> {
    let bad = |why: String| Err(TrdataError::config(BATCH_OPS, format!("{why} ({whence})")));
    if (mixes_pixels || noise) && !input.float_images {
        let what = if mixes_pixels { "blends pixels" } else { "writes N(0, 1) noise (value='random')" };
        return bad(format!(
            "uint8 images must be float for an op that {what}: use dtype='float32' (or float16/bfloat16) with \
             normalize, as torchvision's MixUp refuses uint8"
        ));
    }
    if !mixes_labels {
        return Ok(None);
    }
    if let Some(n) = num_classes {
        NUM_CLASSES.check::<u32>(i128::from(n))?;
    }
    let k = match (&input.target_shape, num_classes, input.classes) {
        (Some(shape), given, _) => {
            let [k] = shape[..] else {
                return bad(format!(
                    "float targets of shape (N, {shape:?}) must be (N, num_classes) soft labels to be mixed"
                ));
            };
            if given.is_some_and(|g| g != k) {
                return bad(format!("num_classes={} must equal the targets' width {k}", given.unwrap_or(0)));
            }
            k
        }
        (None, Some(n), Some(c)) if n < c => {
            return bad(format!("num_classes={n} must be ≥ the source's {c} classes (a label would be out of range)"));
        }
        (None, Some(n), _) => n,
        (None, None, Some(c)) => c,
        (None, None, None) => return bad("num_classes=None must be given: the source has no classes".into()),
    };
    let k = NUM_CLASSES.check::<u32>(i128::from(k))?;
    if input.target_shape.is_none() {
        let outside = |&(_, &y): &(usize, &i64)| y < 0 || y >= i64::from(k);
        if let Some((i, &y)) = input.labels.iter().enumerate().find(outside) {
            let more = input.labels.iter().enumerate().skip(i + 1).filter(outside).count();
            let more = if more > 0 { format!(", and {more} more") } else { String::new() };
            let rule = if y < 0 {
                "class values must be non-negative".to_string()
            } else {
                format!("class values must be smaller than num_classes={k}")
            };
            return bad(format!("label {y} (sample {i}{more}) is no class index of its one-hot rows: {rule}"));
        }
    }
    Ok(Some(k))
}

/// torchvision's `float(Beta(α, α).sample(()))`: a float32 value (drawn as a double, rounded to f32 as torch's
/// float32 distribution gives it), as the Python double `float()` makes of it.
pub fn mixup_lam(rng: &mut SampleRng, alpha: f64) -> f64 {
    f64::from(rng.beta(alpha, alpha) as f32)
}

/// CutMix's box of an `height × width` batch, torchvision v2's `make_params` after its `lam`: centre
/// (r_x, r_y) uniform (x first), half sizes `int(0.5·√(1 − λ)·W)` and `…·H` (truncated), clipped to the image;
/// λ adjusted to the clipped box's area. Returns (λ_adjusted, y1, y2, x1, x2).
pub fn cutmix_box(rng: &mut SampleRng, alpha: f64, height: u64, width: u64) -> (f64, u64, u64, u64, u64) {
    let lam = mixup_lam(rng, alpha);
    let r_x = rng.below(width) as i64;
    let r_y = rng.below(height) as i64;
    let r = 0.5 * (1.0 - lam).sqrt();
    let (w, h) = (width as i64, height as i64);
    let rw = (r * width as f64) as i64; // int(): truncation toward 0, r ≥ 0
    let rh = (r * height as f64) as i64;
    let x1 = (r_x - rw).max(0);
    let y1 = (r_y - rh).max(0);
    let x2 = (r_x + rw).min(w);
    let y2 = (r_y + rh).min(h);
    let lam_adj = 1.0 - ((x2 - x1) * (y2 - y1)) as f64 / (w * h) as f64;
    (lam_adj, y1 as u64, y2 as u64, x1 as u64, x2 as u64)
}

/// RandomChoice's pick among ops of normalized probabilities `p` (inverse CDF of one uniform; the last op
/// with p > 0 takes the rounding remainder).
pub fn choose(rng: &mut SampleRng, p: &[f64]) -> usize {
    let u = rng.uniform();
    let mut acc = 0.0;
    for (i, &pi) in p.iter().enumerate() {
        acc += pi;
        if u < acc {
            return i;
        }
    }
    p.iter().rposition(|&v| v > 0.0).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Known-answer vectors of the Random123 distribution (kat_vectors, philox4x32_10).
    #[test]
    fn known_answers() {
        assert_eq!(philox4x32_10([0; 4], [0; 2]), [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]);
        assert_eq!(philox4x32_10([u32::MAX; 4], [u32::MAX; 2]), [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]);
        assert_eq!(
            philox4x32_10([0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344], [0xa409_3822, 0x299f_31d0]),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn streams_differ_by_every_key_part() {
        let base: Vec<u32> = (0..8)
            .map({
                let mut r = SampleRng::new(1, 2, 3, 4);
                move |_| r.next_u32()
            })
            .collect();
        for (s, e, i, o) in [(9, 2, 3, 4), (1, 9, 3, 4), (1, 2, 9, 4), (1, 2, 3, 9), (1, 2, 3 + (1 << 32), 4)] {
            let mut r = SampleRng::new(s, e, i, o);
            let other: Vec<u32> = (0..8).map(|_| r.next_u32()).collect();
            assert_ne!(base, other, "stream ({s},{e},{i},{o}) equals the base stream");
        }
    }

    #[test]
    fn below_is_in_range_and_covers() {
        let mut r = SampleRng::new(7, 0, 0, 0);
        let mut seen = [0u32; 7];
        for _ in 0..7000 {
            let v = r.below(7) as usize;
            seen[v] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800 && c < 1200), "{seen:?}");
    }

    #[test]
    fn beta_moments_match_for_small_and_large_alpha() {
        // mean 1/2 and variance 1/(4(2α+1)) of Beta(α, α); tiny α must not give NaN (0/0 of underflowed gammas)
        for alpha in [0.01, 0.2, 1.0, 5.0] {
            let mut r = SampleRng::new(3, 1, 4, OP_BATCH_BASE);
            let n = 40_000;
            let xs: Vec<f64> = (0..n).map(|_| r.beta(alpha, alpha)).collect();
            assert!(xs.iter().all(|x| (0.0..=1.0).contains(x)), "alpha {alpha}");
            let mean = xs.iter().sum::<f64>() / n as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
            let want = 1.0 / (4.0 * (2.0 * alpha + 1.0));
            assert!((mean - 0.5).abs() < 0.01, "alpha {alpha}: mean {mean}");
            assert!((var - want).abs() < 0.05 * want, "alpha {alpha}: var {var} want {want}");
        }
    }

    #[test]
    fn cutmix_box_is_inside_and_lam_is_the_kept_area() {
        for b in 0..2000 {
            let mut r = batch_rng(1, 0, b, 0, 0);
            let (lam, y1, y2, x1, x2) = cutmix_box(&mut r, 1.0, 7, 13);
            assert!(y1 <= y2 && y2 <= 7 && x1 <= x2 && x2 <= 13);
            assert_eq!(lam, 1.0 - ((y2 - y1) * (x2 - x1)) as f64 / 91.0);
        }
    }

    #[test]
    fn batch_op_rules() {
        assert!(check_alpha(0.0, "").is_err() && check_alpha(f64::INFINITY, "").is_err());
        // float32's zero: 2**-150 rounds to 0 (a tie, to even), the next f64 above it to 2**-149.
        assert!(check_alpha(5e-324, "").is_err() && check_alpha(2f64.powi(-150), "").is_err());
        assert!(check_alpha(2f64.powi(-149), "").is_ok() && check_alpha(1e-40, "").is_ok());
        assert_eq!(check_choice_weights(Some(&[1.0, 3.0]), 2, "").unwrap(), vec![0.25, 0.75]);
        assert!(check_choice_weights(Some(&[0.0, 0.0]), 2, "").is_err());
        assert!(check_choice_weights(Some(&[1.0]), 2, "").is_err());
        let ints = BatchInput { float_images: true, classes: Some(10), target_shape: None, labels: &[] };
        assert_eq!(check_batch_op_input(&ints, true, false, true, None, "").unwrap(), Some(10));
        assert!(check_batch_op_input(&ints, true, false, true, Some(5), "").is_err());
        let u8s = BatchInput { float_images: false, ..ints };
        assert!(check_batch_op_input(&u8s, true, false, true, None, "").is_err());
        assert_eq!(check_batch_op_input(&u8s, false, false, true, None, "").unwrap(), Some(10));
        let soft = BatchInput { float_images: true, classes: None, target_shape: Some(vec![4]), labels: &[] };
        assert_eq!(check_batch_op_input(&soft, true, false, true, None, "").unwrap(), Some(4));
        assert!(check_batch_op_input(&soft, true, false, true, Some(3), "").is_err());
    }
}
