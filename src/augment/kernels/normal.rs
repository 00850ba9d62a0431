//! normal — N(0, 1) draws in bulk for the per-element random ops of the pixel stage (GaussianNoise,
//! RandomErasing(value="random")), which draw one normal per byte: 150 k per 224² image, where the op stream's
//! scalar Box–Muller (two f64 uniforms, `ln`, `cos`, `sqrt` per draw through libm) cost ~8 ms.
//!
//! The stream: a 64-bit key taken from the op's own [`SampleRng`] (so the draws still depend only on (seed,
//! epoch, sample, op)), then Philox4x32-10 blocks with counter `(block, NORMAL_TAG, 0, 0)`, 8 blocks at a time in
//! lanes that vectorize. Each 32-bit word pair gives two normals by Box–Muller with both halves:
//! `u1 = (a >> 8 + 1) / 2²⁴ ∈ (0, 1]`, `u2 = (b >> 8) / 2²⁴ ∈ [0, 1)`, `R = √(−2 ln u1)`, angle `θ = u2 · π/2`
//! in the first quadrant and the quadrant from two spare low bits of `a` (the signs of cos and sin: a uniform
//! angle on the full circle), so `z0 = ±R cos θ`, `z1 = ±R sin θ`. `ln`, `sin` and `cos` are Cephes' f32
//! polynomials (max error ~1e-7 relative on these ranges), written with `+ − ×` and bit operations only, so the
//! baseline and AVX2 copies ([`super::super::simd`]) give the same bits. The 24-bit `u1` bounds |z| by
//! √(2 ln 2²⁴) = 5.77 (a tail of 8·10⁻⁹ cut, below one 8-bit level for any σ ≤ 0.17 noise). Tests: the
//! statistical ones below (moments, KS against Φ, tails, pair correlation) and the Python KS test of
//! GaussianNoise against torchvision's.

use crate::rng::SampleRng;

/// Counter word 1 of the normal blocks (ASCII "NORM"), so the blocks never alias another use of the same key.
const NORMAL_TAG: u32 = 0x4E4F_524D;
/// Philox blocks computed together (one 8-lane vector per word on the AVX2 path).
const BLOCKS: usize = 8;
/// Normals per refill: 4 words per block, one normal per word.
pub(crate) const BATCH: usize = 4 * BLOCKS;

/// A source of N(0, 1) f32 draws for one op of one sample.
#[derive(Debug, Clone)]
pub(crate) struct NormalStream {
    key: [u32; 2],
    block: u32,
}

impl NormalStream {
    /// Key the stream with 64 bits of `rng` (the op's stream, which moves on by two words).
    pub(crate) fn new(rng: &mut SampleRng) -> Self {
        Self { key: [rng.next_u32(), rng.next_u32()], block: 0 }
    }

    /// The next [`BATCH`] normals.
    #[inline(always)]
    pub(crate) fn next_batch(&mut self, out: &mut [f32; BATCH]) {
        let mut words = [[0u32; BLOCKS]; 4];
        let ctr: [u32; BLOCKS] = std::array::from_fn(|i| self.block.wrapping_add(i as u32));
        philox_lanes(ctr, self.key, &mut words);
        self.block = self.block.wrapping_add(BLOCKS as u32);
        // words (0, 1) and (2, 3) of each block are the pairs
        for p in 0..2 {
            let (a, b) = (&words[2 * p], &words[2 * p + 1]);
            let (lo, hi) = out[2 * p * BLOCKS..(2 * p + 2) * BLOCKS].split_at_mut(BLOCKS);
            for i in 0..BLOCKS {
                (lo[i], hi[i]) = box_muller(a[i], b[i]);
            }
        }
    }
}

/// Philox4x32-10 of `BLOCKS` counters `(ctr[i], NORMAL_TAG, 0, 0)` under `key`, word-major (`out[word][lane]`),
/// the lanes as plain arrays so the rounds vectorize. Bit-identical to [`crate::rng::philox4x32_10`] (tested).
#[inline(always)]
fn philox_lanes(ctr: [u32; BLOCKS], key: [u32; 2], out: &mut [[u32; BLOCKS]; 4]) {
    const M0: u64 = 0xD251_1F53;
    const M1: u64 = 0xCD9E_8D57;
    let (mut c0, mut c1, mut c2, mut c3) = (ctr, [NORMAL_TAG; BLOCKS], [0u32; BLOCKS], [0u32; BLOCKS]);
    let (mut k0, mut k1) = (key[0], key[1]);
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(0x9E37_79B9);
            k1 = k1.wrapping_add(0xBB67_AE85);
        }
        for i in 0..BLOCKS {
            let p0 = M0 * u64::from(c0[i]);
            let p1 = M1 * u64::from(c2[i]);
            let (hi0, lo0, hi1, lo1) = ((p0 >> 32) as u32, p0 as u32, (p1 >> 32) as u32, p1 as u32);
            (c0[i], c1[i], c2[i], c3[i]) = (hi1 ^ c1[i] ^ k0, lo1, hi0 ^ c3[i] ^ k1, lo0);
        }
    }
    *out = [c0, c1, c2, c3];
}

/// Two normals from two words (module docs).
#[inline(always)]
fn box_muller(a: u32, b: u32) -> (f32, f32) {
    const TWO_M24: f32 = 1.0 / 16_777_216.0;
    let u1 = ((a >> 8) + 1) as f32 * TWO_M24; // (0, 1], exact
    let u2 = (b >> 8) as f32 * TWO_M24; // [0, 1), exact
    let r = (-2.0 * ln(u1)).sqrt();
    let (s, c) = sin_cos_quadrant(u2 * std::f32::consts::FRAC_PI_2);
    let z0 = r * c;
    let z1 = r * s;
    // bits 0 and 1 of `a` (unused by u1) pick the quadrant: the signs of cos and sin
    (if a & 1 == 0 { z0 } else { -z0 }, if a & 2 == 0 { z1 } else { -z1 })
}

/// Natural log of `x` in (0, 1] (Cephes `logf`: exponent split, mantissa in [√½, √2), degree-9 polynomial).
#[inline(always)]
fn ln(x: f32) -> f32 {
    let bits = x.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 126;
    let m = f32::from_bits((bits & 0x807f_ffff) | 0x3f00_0000); // [0.5, 1)
    let small = m < std::f32::consts::FRAC_1_SQRT_2;
    e -= i32::from(small);
    let m = if small { m + m - 1.0 } else { m - 1.0 };
    let z = m * m;
    let mut y = 7.037_683_6e-2f32;
    for k in [
        -1.151_461e-1f32,
        1.167_699_9e-1,
        -1.242_014_1e-1,
        1.424_932_3e-1,
        -1.666_805_8e-1,
        2.000_071_4e-1,
        -2.499_999_4e-1,
        3.333_333e-1,
    ] {
        y = y * m + k;
    }
    let ef = e as f32;
    let y = y * m * z + ef * -2.121_944_4e-4 - 0.5 * z;
    m + y + ef * 0.693_359_4
}

/// (sin θ, cos θ) for θ in [0, π/2] (Cephes `sinf`/`cosf` polynomials around π/4: θ = π/4 + x, |x| ≤ π/4).
#[inline(always)]
fn sin_cos_quadrant(theta: f32) -> (f32, f32) {
    let x = theta - std::f32::consts::FRAC_PI_4;
    let z = x * x;
    let sx = ((-1.951_529_6e-4f32 * z + 8.332_161e-3) * z - 1.666_665_5e-1) * z * x + x;
    let cx = ((2.443_315_7e-5f32 * z - 1.388_731_6e-3) * z + 4.166_664_6e-2) * z * z - 0.5 * z + 1.0;
    let h = std::f32::consts::FRAC_1_SQRT_2;
    ((sx + cx) * h, (cx - sx) * h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::philox4x32_10;

    fn draws(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = SampleRng::new(seed, 0, 0, 0x100);
        let mut s = NormalStream::new(&mut rng);
        let mut out = Vec::with_capacity(n);
        let mut b = [0f32; BATCH];
        while out.len() < n {
            s.next_batch(&mut b);
            out.extend_from_slice(&b);
        }
        out.truncate(n);
        out
    }

    /// Φ(x) through erfc (W. J. Cody's rational approximations are overkill here: Abramowitz–Stegun 7.1.26 has
    /// |error| < 1.5e-7, far below the KS critical value 1.36/√n ≈ 1.4e-3 at n = 10⁶).
    fn phi(x: f64) -> f64 {
        let z = x.abs() / std::f64::consts::SQRT_2;
        let t = 1.0 / (1.0 + 0.327_591_1 * z);
        let poly =
            t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
        let erfc = poly * (-z * z).exp();
        if x >= 0.0 { 1.0 - 0.5 * erfc } else { 0.5 * erfc }
    }

    #[test]
    fn philox_lanes_are_philox() {
        let key = [0x1234_5678, 0x9abc_def0];
        let ctr: [u32; BLOCKS] = std::array::from_fn(|i| 1000 + i as u32);
        let mut out = [[0u32; BLOCKS]; 4];
        philox_lanes(ctr, key, &mut out);
        for i in 0..BLOCKS {
            let want = philox4x32_10([ctr[i], NORMAL_TAG, 0, 0], key);
            assert_eq!([out[0][i], out[1][i], out[2][i], out[3][i]], want);
        }
    }

    #[test]
    fn ln_and_sin_cos_are_accurate() {
        for k in 1..=(1u32 << 16) {
            let x = k as f32 / 65_536.0;
            let err = (f64::from(ln(x)) - f64::from(x).ln()).abs();
            assert!(err <= 2e-7 * f64::from(x).ln().abs().max(1.0), "ln({x}) off by {err}");
        }
        let tiny = 1.0f32 / 16_777_216.0;
        assert!((f64::from(ln(tiny)) - f64::from(tiny).ln()).abs() < 2e-6);
        for k in 0..=4096 {
            let t = k as f32 / 4096.0 * std::f32::consts::FRAC_PI_2;
            let (s, c) = sin_cos_quadrant(t);
            assert!((f64::from(s) - f64::from(t).sin()).abs() < 3e-7, "sin({t})");
            assert!((f64::from(c) - f64::from(t).cos()).abs() < 3e-7, "cos({t})");
        }
    }

    #[test]
    fn draws_are_standard_normal() {
        let n = 1 << 20;
        let z = draws(n, 42);
        let nf = n as f64;
        let mean = z.iter().map(|&v| f64::from(v)).sum::<f64>() / nf;
        let var = z.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / nf;
        let m4 = z.iter().map(|&v| f64::from(v).powi(4)).sum::<f64>() / nf;
        // 5σ bounds of the sample moments of N(0,1): se(mean) = 1/√n, se(var) = √(2/n), se(m4) = √(96/n)
        assert!(mean.abs() < 5.0 / nf.sqrt(), "mean {mean}");
        assert!((var - 1.0).abs() < 5.0 * (2.0 / nf).sqrt(), "var {var}");
        assert!((m4 - 3.0).abs() < 5.0 * (96.0 / nf).sqrt(), "4th moment {m4}");
        // KS against Φ at α = 0.001 (critical 1.95/√n)
        let mut s: Vec<f64> = z.iter().map(|&v| f64::from(v)).collect();
        s.sort_by(f64::total_cmp);
        let d = s
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let f = phi(x);
                (f - i as f64 / nf).abs().max(((i + 1) as f64 / nf - f).abs())
            })
            .fold(0.0, f64::max);
        assert!(d < 1.95 / nf.sqrt(), "KS {d}");
        // tails: P(|Z| > 2) = 0.0455003, P(|Z| > 3) = 0.0026998, within 5 binomial σ
        for (t, p) in [(2.0, 0.045_500_26), (3.0, 0.002_699_8)] {
            let k = s.iter().filter(|&&x| x.abs() > t).count() as f64;
            let sd = (nf * p * (1.0 - p)).sqrt();
            assert!((k - nf * p).abs() < 5.0 * sd, "P(|Z| > {t}): {} vs {p}", k / nf);
        }
        // the two halves of a pair and neighbouring draws are uncorrelated (5σ of a correlation: 5/√n)
        for lag in [1usize, BLOCKS, 2 * BLOCKS] {
            let c = z.windows(lag + 1).map(|w| f64::from(w[0]) * f64::from(w[lag])).sum::<f64>() / nf;
            assert!(c.abs() < 5.0 / nf.sqrt(), "lag-{lag} correlation {c}");
        }
        // signs: both quadrants' bits used, so each sign half the time
        let pos = z.iter().filter(|&&v| v > 0.0).count() as f64;
        assert!((pos - nf / 2.0).abs() < 5.0 * (nf / 4.0).sqrt());
    }

    #[test]
    fn streams_depend_on_the_op_stream_only() {
        assert_eq!(draws(100, 1), draws(100, 1));
        assert_ne!(draws(100, 1), draws(100, 2));
    }
}
