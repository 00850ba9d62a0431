//! Runtime instruction-set dispatch for the resample stage ([`resample::run`]) and the pixel-stage kernels
//! ([`super::kernels`], [`super::warp`], the noise generator [`super::normal`]; through [`run`]).
//!
//! We ship one portable wheel built for baseline x86-64 (SSE2), but the vertical pass is ~4.8× faster with AVX2
//! (native 32-bit multiplies on 8 lanes). So the same Rust source is compiled twice: once for the baseline and once
//! inside a `#[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt,f16c")]` wrapper (x86-64-v3), into which
//! every kernel is `#[inline(always)]`d so that LLVM autovectorizes it for AVX2. The path is chosen once per process
//! ([`Simd::detect`]): AVX2 when the CPU has every one of those features, unless `TRDATA_SIMD=baseline` is set.
//!
//! Both paths give bit-identical output: the dispatched code is integer fixed-point only (the float coefficient
//! and normalize tables are computed outside it, by baseline code), and Rust never contracts float mul+add into
//! FMA on its own anyway. Test: `augment::tests::simd_paths_are_bit_identical`.
//!
//! The pixel-stage kernels go through [`run`]: a closure that calls `#[inline(always)]` kernel bodies, executed
//! either directly (baseline) or inside a `#[target_feature]` function, so the same source again becomes two
//! copies. Their float arithmetic stays bit-identical across the copies because it only uses operations that
//! are correctly rounded on every path: `+ - * /`, `sqrt`, `floor`/`round_ties_even` and `mul_add` (a true
//! fused multiply-add everywhere: the FMA instruction on x86-64-v3, an exact software fma on the baseline, which
//! is why the baseline is slow on the torchvision `fma` steps and the dispatch matters); never an approximate
//! reciprocal or a library `ln`/`cos` whose result could depend on the instruction set. Test:
//! `augment::kernels::tests::simd_paths_give_the_same_bytes`, and scripts/kernel_golden.py run under
//! `TRDATA_SIMD=baseline`.
//!
//! On other architectures only the baseline exists.

#![allow(unsafe_code)]

use std::sync::OnceLock;

use super::resample::{self, Job};

/// Which compiled copy of the resample kernels to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Simd {
    /// Compiled for the crate's target (SSE2 on x86-64).
    Baseline,
    /// x86-64-v3: AVX2 + FMA + BMI1/2 + LZCNT + POPCNT + F16C. Only ever constructed by [`Simd::detect`] after
    /// runtime detection of all of them (or by `Simd::available` in tests, same check).
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Simd {
    /// The best path this CPU supports, ignoring `TRDATA_SIMD`.
    pub(crate) fn available() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("bmi1")
                && std::is_x86_feature_detected!("bmi2")
                && std::is_x86_feature_detected!("lzcnt")
                && std::is_x86_feature_detected!("popcnt")
                && std::is_x86_feature_detected!("f16c")
            {
                return Self::Avx2;
            }
        }
        Self::Baseline
    }

    /// The process-wide choice: [`Simd::available`], or the baseline when `TRDATA_SIMD=baseline` (read once,
    /// on first use).
    pub(crate) fn detect() -> Self {
        static CHOICE: OnceLock<Simd> = OnceLock::new();
        *CHOICE.get_or_init(|| match std::env::var("TRDATA_SIMD") {
            Ok(v) if v.eq_ignore_ascii_case("baseline") => Self::Baseline,
            _ => Self::available(),
        })
    }
}

/// Run the resample stage of one sample on the `simd` path.
#[inline]
pub(crate) fn resample(simd: Simd, job: Job<'_>) {
    match simd {
        Simd::Baseline => run_baseline(job),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::Avx2` is only constructed by `Simd::available` after `is_x86_feature_detected!` returned
        // true for every feature `run_avx2` enables (avx2, fma, bmi1, bmi2, lzcnt, popcnt, f16c), so the CPU
        // executing this supports all instructions the function may contain.
        Simd::Avx2 => unsafe { run_avx2(job) },
    }
}

#[inline(never)]
fn run_baseline(job: Job<'_>) {
    resample::run(job);
}

/// Same source as `run_baseline`, compiled for x86-64-v3.
///
/// # Safety
/// The CPU must support every enabled feature (see `Simd::available`).
/// (`unsafe fn` rather than a safe `#[target_feature]` fn to keep the crate's MSRV at 1.85.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt,f16c")]
#[inline(never)]
unsafe fn run_avx2(job: Job<'_>) {
    resample::run(job);
}

#[cfg(test)]
thread_local! {
    /// A test's choice of path for [`run`] on this thread (`None`: [`Simd::detect`]).
    static FORCED: std::cell::Cell<Option<Simd>> = const { std::cell::Cell::new(None) };
}

/// Run the kernels on this thread through `simd` until the next call (tests comparing the two paths).
#[cfg(test)]
pub(crate) fn force(simd: Option<Simd>) {
    FORCED.with(|f| f.set(simd));
}

/// The path the kernels take on this thread: a test's [`force`]d one, else [`Simd::detect`].
#[inline(always)]
pub(crate) fn current() -> Simd {
    #[cfg(test)]
    if let Some(s) = FORCED.with(|f| f.get()) {
        return s;
    }
    Simd::detect()
}

/// Dispatchers for the pixel-stage kernels: `name(args)` runs the `#[inline(always)]` body `path(args)` on the
/// [`current`] path; on x86-64-v3 the body is inlined into a `#[target_feature]` copy. (A generic
/// `run(f, args)` would not do: rustc calls a closure or fn item through a shim it does not inline into the
/// `#[target_feature]` function, so the body would stay baseline code — measured, not guessed.)
macro_rules! kernels {
    ($($(#[$doc:meta])* $name:ident => $body:path, $args:ty => $ret:ty;)*) => {$(
        $(#[$doc])*
        #[inline]
        pub(crate) fn $name(args: $args) -> $ret {
            /// The body compiled for x86-64-v3.
            ///
            /// # Safety
            /// The CPU must support every enabled feature (see `Simd::available`).
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt,f16c")]
            #[inline(never)]
            unsafe fn avx2(args: $args) -> $ret {
                $body(args)
            }
            match $crate::augment::simd::current() {
                $crate::augment::simd::Simd::Baseline => $body(args),
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Simd::Avx2` is only constructed by `Simd::available` after `is_x86_feature_detected!`
                // returned true for every feature `avx2` enables, so the CPU supports all of its instructions.
                $crate::augment::simd::Simd::Avx2 => unsafe { avx2(args) },
            }
        }
    )*};
}
/// The dispatcher macro for the kernels' own files ([`super::kernels`], [`super::warp`] invoke it).
pub(crate) use kernels;

/// Hand-written AVX2 forms of the pixel kernels whose autovectorized code is slow: the RGB kernels that need a
/// per-pixel gray (stride-3 deinterleave, which LLVM turns into scalar inserts and stack spills) and the per-byte
/// blends that the baseline applies through a 256-entry table (a load per byte). Each computes exactly the
/// scalar kernel's f32 steps — the same `*`, `mul_add` (`vfmadd`, a true fused multiply-add like the scalar
/// `mul_add`), `floor` and truncating cast of a value clamped to [0, 255] — on 8 lanes at a time, so the bytes
/// are the scalar kernel's (tests: `augment::kernels::tests`, `simd_paths_give_the_same_bytes` and the oracle
/// tests next to it). Each returns how many leading bytes it processed (whole blocks); the caller finishes the
/// tail with the scalar body. On any other path they process nothing and return 0.
pub(crate) mod fast {
    use super::{Simd, current};

    /// `trunc(clamp(fma(c, om, x · r), 0, 255))` on every byte `x` of `data`'s leading whole 32-byte blocks
    /// (`_blend` with a per-image constant `c`; brightness is `c = om = 0`, since `fma(0, 0, y) = y` exactly).
    #[inline]
    pub(crate) fn blend_bytes(data: &mut [u8], c: f32, r: f32, om: f32) -> usize {
        match current() {
            Simd::Baseline => 0,
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Simd::Avx2` is only constructed after runtime detection of AVX2 and FMA (see
            // `Simd::available`), the features `x86::blend_bytes` enables.
            Simd::Avx2 => unsafe { super::x86::blend_bytes(data, c, r, om) },
        }
    }

    /// Saturation's blend of each byte of RGB `data` with its pixel's `floor(gray)`, on the leading whole
    /// 16-pixel (48-byte) blocks.
    #[inline]
    pub(crate) fn saturation(data: &mut [u8], r: f32, om: f32) -> usize {
        match current() {
            Simd::Baseline => 0,
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `blend_bytes`: AVX2 and FMA were detected at runtime.
            Simd::Avx2 => unsafe { super::x86::saturation(data, r, om) },
        }
    }

    /// Σ `floor(gray)` over the leading whole 16-pixel blocks of RGB `data`: (sum, bytes done).
    #[inline]
    pub(crate) fn gray_sum(data: &[u8]) -> (u64, usize) {
        match current() {
            Simd::Baseline => (0, 0),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `blend_bytes`: AVX2 and FMA were detected at runtime.
            Simd::Avx2 => unsafe { super::x86::gray_sum(data) },
        }
    }

    /// The bilinear RGB warp's per-pixel work ([`super::super::warp::warp_bilinear`] with 3 channels: floor,
    /// weights, the four taps' loads, the sums, the fill path, rounding and the byte write) for the output
    /// pixels whose source coordinates are `ix`/`iy`, into `out` (3 bytes a pixel), in whole 8-pixel blocks;
    /// `src` is the `h × w` RGB image. Stops at the first block holding a coordinate outside ±2^24 or a NaN
    /// (the scalar body's saturating casts handle those) and returns the pixels done.
    #[inline]
    pub(crate) fn warp_bilinear_rgb(
        src: &[u8],
        (h, w): (usize, usize),
        (ix, iy): (&[f32], &[f32]),
        fill: Option<[f32; 3]>,
        out: &mut [u8],
    ) -> usize {
        // i32 byte offsets, a 4-byte load per tap, and the scalar body's bounds
        let fits = h.checked_mul(w).and_then(|p| p.checked_mul(3)).is_some_and(|n| n <= src.len())
            && src.len() >= 4
            && src.len() <= i32::MAX as usize;
        match current() {
            Simd::Baseline => 0,
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `blend_bytes`: AVX2 and FMA were detected at runtime. `x86::warp_bilinear_rgb` needs
            // `h·w·3 <= src.len()`, `4 <= src.len() <= i32::MAX`, and `h, w >= 1` (checked here).
            Simd::Avx2 if fits && h > 0 && w > 0 => unsafe {
                super::x86::warp_bilinear_rgb(src, (h, w), (ix, iy), fill, out)
            },
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => 0,
        }
    }
}

/// The AVX2 bodies of [`fast`]. Pointer reads and writes stay inside the slices: every block access is at
/// `i..i + BLOCK` with `i + BLOCK <= len`.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `pshufb` masks that gather plane `ch` (0 R, 1 G, 2 B) of 16 interleaved RGB pixels from the 16-byte
    /// chunk `k` of their 48 bytes: lane `p` takes byte `3p + ch - 16k` when it lies in the chunk, else 0x80
    /// (zero).
    const fn deinterleave_mask(ch: usize, k: usize) -> [u8; 16] {
        let mut m = [0x80u8; 16];
        let mut p = 0;
        while p < 16 {
            let g = 3 * p + ch;
            if g >= 16 * k && g < 16 * k + 16 {
                m[p] = (g - 16 * k) as u8;
            }
            p += 1;
        }
        m
    }

    /// The inverse: byte `j` of output chunk `k` (interleaved index `g = 16k + j`) takes lane `g / 3` of plane
    /// `ch` when `g % 3 == ch`, else zero.
    const fn interleave_mask(ch: usize, k: usize) -> [u8; 16] {
        let mut m = [0x80u8; 16];
        let mut j = 0;
        while j < 16 {
            let g = 16 * k + j;
            if g % 3 == ch {
                m[j] = (g / 3) as u8;
            }
            j += 1;
        }
        m
    }

    const DE: [[[u8; 16]; 3]; 3] = {
        let mut t = [[[0u8; 16]; 3]; 3];
        let mut ch = 0;
        while ch < 3 {
            let mut k = 0;
            while k < 3 {
                t[ch][k] = deinterleave_mask(ch, k);
                k += 1;
            }
            ch += 1;
        }
        t
    };

    const IN: [[[u8; 16]; 3]; 3] = {
        let mut t = [[[0u8; 16]; 3]; 3];
        let mut ch = 0;
        while ch < 3 {
            let mut k = 0;
            while k < 3 {
                t[ch][k] = interleave_mask(ch, k);
                k += 1;
            }
            ch += 1;
        }
        t
    };

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn mask(m: &[u8; 16]) -> __m128i {
        // SAFETY: `m` is 16 readable bytes; `loadu` has no alignment requirement.
        unsafe { _mm_loadu_si128(m.as_ptr().cast()) }
    }

    /// 16 interleaved RGB pixels (`chunks`: their 48 bytes) → the R, G and B planes (16 bytes each).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn deinterleave(chunks: [__m128i; 3]) -> [__m128i; 3] {
        std::array::from_fn(|ch| {
            let part = |k: usize| _mm_shuffle_epi8(chunks[k], mask(&DE[ch][k]));
            _mm_or_si128(_mm_or_si128(part(0), part(1)), part(2))
        })
    }

    /// The inverse of [`deinterleave`].
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn interleave(planes: [__m128i; 3]) -> [__m128i; 3] {
        std::array::from_fn(|k| {
            let part = |ch: usize| _mm_shuffle_epi8(planes[ch], mask(&IN[ch][k]));
            _mm_or_si128(_mm_or_si128(part(0), part(1)), part(2))
        })
    }

    /// The low 8 bytes of `v` as 8 f32 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn widen8(v: __m128i) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
    }

    /// 16 bytes → (lanes 0..8, lanes 8..16) as f32.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn widen16(v: __m128i) -> [__m256; 2] {
        [widen8(v), widen8(_mm_srli_si128::<8>(v))]
    }

    /// `trunc(clamp(v, 0, 255))` as i32 lanes (the scalar `clamp(0.0, 255.0) as u8`: `max` then `min`, then
    /// the truncating conversion, exact on [0, 255]).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn to_i32(v: __m256) -> __m256i {
        _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(255.0)))
    }

    /// Two vectors of 8 i32 lanes in [0, 255] → their 16 bytes in lane order.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn pack16(lo: __m256i, hi: __m256i) -> __m128i {
        // packus interleaves the 128-bit halves: [lo0-3 hi0-3 | lo4-7 hi4-7]; the permute restores lane order
        let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(lo, hi));
        _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w))
    }

    /// `floor(gray)` in f32 of the pixels whose planes are given (the scalar `gray_f32(..).floor()`).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn gray_floor(r: __m256, g: __m256, b: __m256) -> __m256 {
        let t = _mm256_mul_ps(r, _mm256_set1_ps(0.2989));
        let t = _mm256_fmadd_ps(g, _mm256_set1_ps(0.587), t);
        _mm256_floor_ps(_mm256_fmadd_ps(b, _mm256_set1_ps(0.114), t))
    }

    /// Load the three 16-byte chunks of a 48-byte block.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn load48(block: &[u8]) -> [__m128i; 3] {
        assert!(block.len() >= 48);
        // SAFETY: the three 16-byte reads lie within `block` (checked above); `loadu` is unaligned.
        std::array::from_fn(|k| unsafe { _mm_loadu_si128(block.as_ptr().add(16 * k).cast()) })
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn blend_bytes(data: &mut [u8], c: f32, r: f32, om: f32) -> usize {
        let (cv, rv, omv) = (_mm256_set1_ps(c), _mm256_set1_ps(r), _mm256_set1_ps(om));
        let blend = |x: __m256| to_i32(_mm256_fmadd_ps(cv, omv, _mm256_mul_ps(x, rv)));
        let n = data.len() / 32 * 32;
        for block in data[..n].chunks_exact_mut(32) {
            // SAFETY: `block` is 32 bytes; unaligned load.
            let v = unsafe { _mm256_loadu_si256(block.as_ptr().cast()) };
            let [a, b] = widen16(_mm256_castsi256_si128(v));
            let [cc, d] = widen16(_mm256_extracti128_si256::<1>(v));
            let lo = pack16(blend(a), blend(b));
            let hi = pack16(blend(cc), blend(d));
            // SAFETY: `block` is 32 writable bytes; unaligned store.
            unsafe { _mm256_storeu_si256(block.as_mut_ptr().cast(), _mm256_set_m128i(hi, lo)) };
        }
        n
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn saturation(data: &mut [u8], r: f32, om: f32) -> usize {
        let (rv, omv) = (_mm256_set1_ps(r), _mm256_set1_ps(om));
        let n = data.len() / 48 * 48;
        for block in data[..n].chunks_exact_mut(48) {
            let planes = deinterleave(load48(block));
            let [r0, r1] = widen16(planes[0]);
            let [g0, g1] = widen16(planes[1]);
            let [b0, b1] = widen16(planes[2]);
            let (gr0, gr1) = (gray_floor(r0, g0, b0), gray_floor(r1, g1, b1));
            let blend = |x: __m256, gray: __m256| to_i32(_mm256_fmadd_ps(gray, omv, _mm256_mul_ps(x, rv)));
            let out = [
                pack16(blend(r0, gr0), blend(r1, gr1)),
                pack16(blend(g0, gr0), blend(g1, gr1)),
                pack16(blend(b0, gr0), blend(b1, gr1)),
            ];
            for (k, v) in interleave(out).into_iter().enumerate() {
                // SAFETY: bytes 16k..16k + 16 of the 48-byte `block`; unaligned store.
                unsafe { _mm_storeu_si128(block.as_mut_ptr().add(16 * k).cast(), v) };
            }
        }
        n
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gray_sum(data: &[u8]) -> (u64, usize) {
        let n = data.len() / 48 * 48;
        let mut total = 0u64;
        // i32 lanes gain at most 2 · 254 per block: flushed every 2^16 blocks, far from overflow
        for part in data[..n].chunks(48 << 16) {
            let mut acc = _mm256_setzero_si256();
            for block in part.chunks_exact(48) {
                let planes = deinterleave(load48(block));
                let [r0, r1] = widen16(planes[0]);
                let [g0, g1] = widen16(planes[1]);
                let [b0, b1] = widen16(planes[2]);
                let s = _mm256_add_epi32(
                    _mm256_cvttps_epi32(gray_floor(r0, g0, b0)),
                    _mm256_cvttps_epi32(gray_floor(r1, g1, b1)),
                );
                acc = _mm256_add_epi32(acc, s);
            }
            let mut lanes = [0u32; 8];
            // SAFETY: `lanes` is 32 writable bytes; unaligned store.
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc) };
            total += lanes.iter().map(|&v| u64::from(v)).sum::<u64>();
        }
        (total, n)
    }

    /// `pshufb` mask packing the low 3 bytes of each of the 4 dwords of a 128-bit lane into its first 12 bytes.
    const PACK3: [i8; 16] = [0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1];

    /// # Safety
    /// The CPU must support AVX2 and FMA; `h, w >= 1`, `h·w·3 <= src.len()` and `4 <= src.len() <= i32::MAX`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn warp_bilinear_rgb(
        src: &[u8],
        (h, w): (usize, usize),
        (ix, iy): (&[f32], &[f32]),
        fill: Option<[f32; 3]>,
        out: &mut [u8],
    ) -> usize {
        let n = ix.len().min(iy.len()).min(out.len() / 3) / 8 * 8;
        let (one, zero, lim) = (_mm256_set1_ps(1.0), _mm256_setzero_ps(), _mm256_set1_ps(16_777_216.0));
        let (wi, hi) = (_mm256_set1_epi32(w as i32), _mm256_set1_epi32(h as i32));
        let (neg1, one_i) = (_mm256_set1_epi32(-1), _mm256_set1_epi32(1));
        let stride = _mm256_set1_epi32((w * 3) as i32);
        // the last offset a 4-byte load may start at
        let last = _mm256_set1_epi32((src.len() - 4) as i32);
        let byte = _mm256_set1_epi32(0xff);
        let fills = fill.map(|f| f.map(|v| _mm256_set1_ps(v)));
        let pack3 = {
            // SAFETY: `PACK3` is 16 readable bytes; unaligned load.
            let m = unsafe { _mm_loadu_si128(PACK3.as_ptr().cast()) };
            _mm256_set_m128i(m, m)
        };
        let gather_order = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);
        let mut i = 0;
        while i < n {
            // SAFETY: `i + 8 <= n <= ix.len(), iy.len()`; unaligned loads.
            let (x, y) = unsafe { (_mm256_loadu_ps(ix.as_ptr().add(i)), _mm256_loadu_ps(iy.as_ptr().add(i))) };
            let (fx, fy) = (_mm256_floor_ps(x), _mm256_floor_ps(y));
            // |floor| <= 2^24 on every lane (ordered compares: a NaN fails), so the i32 conversions are exact
            // and `+ 1` cannot overflow: the scalar body's i64 casts give the same integers
            let ok = _mm256_and_ps(
                _mm256_and_ps(
                    _mm256_cmp_ps::<_CMP_LE_OQ>(fx, lim),
                    _mm256_cmp_ps::<_CMP_GE_OQ>(fx, _mm256_sub_ps(zero, lim)),
                ),
                _mm256_and_ps(
                    _mm256_cmp_ps::<_CMP_LE_OQ>(fy, lim),
                    _mm256_cmp_ps::<_CMP_GE_OQ>(fy, _mm256_sub_ps(zero, lim)),
                ),
            );
            if _mm256_movemask_ps(ok) != 0xff {
                break;
            }
            let (wx, ny) = (_mm256_sub_ps(x, fx), _mm256_sub_ps(y, fy));
            let (ex, sy) = (_mm256_sub_ps(one, wx), _mm256_sub_ps(one, ny));
            let (x0, y0) = (_mm256_cvttps_epi32(fx), _mm256_cvttps_epi32(fy));
            let (x1, y1) = (_mm256_add_epi32(x0, one_i), _mm256_add_epi32(y0, one_i));
            let inside =
                |v: __m256i, side: __m256i| _mm256_and_si256(_mm256_cmpgt_epi32(v, neg1), _mm256_cmpgt_epi32(side, v));
            let clamp = |v: __m256i, side: __m256i| {
                _mm256_min_epi32(_mm256_max_epi32(v, _mm256_setzero_si256()), _mm256_sub_epi32(side, one_i))
            };
            let (inx0, inx1, iny0, iny1) = (inside(x0, wi), inside(x1, wi), inside(y0, hi), inside(y1, hi));
            let col = |v: __m256i| {
                let c = clamp(v, wi);
                _mm256_add_epi32(_mm256_add_epi32(c, c), c)
            };
            let row = |v: __m256i| _mm256_mullo_epi32(clamp(v, hi), stride);
            let (cx0, cx1, ry0, ry1) = (col(x0), col(x1), row(y0), row(y1));
            let taps = [
                (_mm256_and_si256(iny0, inx0), _mm256_mul_ps(sy, ex), _mm256_add_epi32(ry0, cx0)),
                (_mm256_and_si256(iny0, inx1), _mm256_mul_ps(sy, wx), _mm256_add_epi32(ry0, cx1)),
                (_mm256_and_si256(iny1, inx0), _mm256_mul_ps(ny, ex), _mm256_add_epi32(ry1, cx0)),
                (_mm256_and_si256(iny1, inx1), _mm256_mul_ps(ny, wx), _mm256_add_epi32(ry1, cx1)),
            ];
            let (mut acc, mut m) = ([zero; 3], zero);
            for (inside, wt, off) in taps {
                // an outside tap: weight +0.0 (the scalar `if inside { wt } else { 0.0 }`) at a clamped address
                let wt = _mm256_and_ps(wt, _mm256_castsi256_ps(inside));
                // the pixel's 3 bytes as the low bytes of a 4-byte load; the image's last pixel (offset
                // `len - 3` when the slice ends with it) is loaded one byte early and shifted down
                let at = _mm256_min_epi32(off, last);
                let shift = _mm256_slli_epi32::<3>(_mm256_sub_epi32(off, at));
                // SAFETY: every lane's offset `at` is in [0, len - 4] (clamped coordinates give offsets >= 0,
                // `min` caps them), so each 4-byte read lies within `src`.
                let px = unsafe { _mm256_i32gather_epi32::<1>(src.as_ptr().cast(), at) };
                let px = _mm256_srlv_epi32(px, shift);
                for (ch, a) in acc.iter_mut().enumerate() {
                    let v = _mm256_and_si256(_mm256_srlv_epi32(px, _mm256_set1_epi32(8 * ch as i32)), byte);
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(_mm256_cvtepi32_ps(v), wt));
                }
                m = _mm256_add_ps(m, wt);
            }
            let res: [__m256i; 3] = std::array::from_fn(|ch| {
                let r = match fills {
                    None => acc[ch],
                    Some(f) => _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(acc[ch], f[ch]), m), f[ch]),
                };
                to_i32(_mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(r))
            });
            let rgb0 = _mm256_or_si256(res[0], _mm256_slli_epi32::<8>(res[1]));
            let rgb = _mm256_or_si256(rgb0, _mm256_slli_epi32::<16>(res[2]));
            let packed = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(rgb, pack3), gather_order);
            let mut tmp = [0u8; 32];
            // SAFETY: `tmp` is 32 writable bytes; unaligned store.
            unsafe { _mm256_storeu_si256(tmp.as_mut_ptr().cast(), packed) };
            out[3 * i..3 * i + 24].copy_from_slice(&tmp[..24]);
            i += 8;
        }
        i
    }
}
