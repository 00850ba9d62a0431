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
