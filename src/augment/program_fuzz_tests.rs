//! program fuzz: arbitrary transform lists through the compile path ([`super::compile`] via
//! [`SamplePipeline::with_channels`]) and, for every list that compiles, through stage 1–3 on small and odd-sized
//! images. Guards the promise of the pipeline's configuration surface: a hostile list (every op, extreme values —
//! 0, 1, `MAX_SIDE ± 1`, `u32::MAX`, NaN/±inf/negative floats, empty and huge fill vectors, containers nested
//! past the limit and wider than it, any order) is either refused with a `ConfigError` or runs on every sample
//! without a panic, and the worker's scratch never grows past the bound the compiled sizes declare.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::super::geometry::{Filter, Resample};
use super::super::kernels::PadMode;
use super::super::ops::{EraseValue, MAX_SIDE, OpSpec, ResizeTo};
use super::super::policy::{AaPolicy, PolicyKind};
use super::super::warp::Interp;
use super::super::*;
use crate::source::PixelArray;

/// Sizes: mostly small (so that compiled programs can run), with the edges of every size rule.
fn size(wild: u32) -> BoxedStrategy<u32> {
    if wild == 0 {
        return (1u32..12).boxed();
    }
    prop_oneof![
        6 => 1u32..12,
        2 => Just(0u32),
        1 => 12u32..300,
        wild => prop_oneof![Just(MAX_SIDE - 1), Just(MAX_SIDE), Just(MAX_SIDE + 1), Just(u32::MAX), any::<u32>()],
    ]
    .boxed()
}

/// Reals: the edges (NaN, ±inf, -0, negative, huge) and ordinary values in the usual ranges.
fn real(wild: u32) -> BoxedStrategy<f64> {
    if wild == 0 {
        return prop_oneof![4 => 0.0f64..=1.0, 1 => prop_oneof![Just(0.0), Just(1.0), Just(0.5)]].boxed();
    }
    prop_oneof![
        4 => 0.0f64..=1.0,
        2 => prop_oneof![Just(0.0), Just(1.0), Just(0.5), Just(-0.0), Just(255.0), Just(256.0)],
        wild => prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY), Just(-1.0), Just(1e300),
                         Just(-1e-300), Just(f64::MIN_POSITIVE)],
        wild => -400.0f64..400.0,
    ]
    .boxed()
}

fn pair(wild: u32) -> BoxedStrategy<(f64, f64)> {
    let sorted = (real(wild), real(wild)).prop_map(|(a, b)| if a <= b { (a, b) } else { (b, a) });
    if wild == 0 {
        return sorted.boxed();
    }
    prop_oneof![3 => sorted, wild => (real(wild), real(wild))].boxed()
}

/// Fill vectors: empty, 1–4 values, or a thousand.
fn fill(wild: u32) -> BoxedStrategy<Vec<f64>> {
    if wild == 0 {
        let v = prop_oneof![Just(0.0), 0.0f64..255.0];
        return prop_oneof![proptest::collection::vec(v.clone(), 1), proptest::collection::vec(v, 3)].boxed();
    }
    prop_oneof![
        6 => proptest::collection::vec(real(wild), 1..=4),
        wild => Just(Vec::new()),
        wild => proptest::collection::vec(real(wild), 1000),
    ]
    .boxed()
}

fn opt_fill(wild: u32) -> impl Strategy<Value = Option<Vec<f64>>> {
    proptest::option::of(fill(wild))
}

fn padding(wild: u32) -> BoxedStrategy<[u32; 4]> {
    if wild == 0 {
        return [0u32..4, 0u32..4, 0u32..4, 0u32..4].boxed();
    }
    prop_oneof![4 => [0u32..4, 0u32..4, 0u32..4, 0u32..4], wild => [size(wild), size(wild), size(wild), size(wild)]]
        .boxed()
}

fn pad_mode() -> impl Strategy<Value = PadMode> {
    prop_oneof![Just(PadMode::Constant), Just(PadMode::Edge), Just(PadMode::Reflect), Just(PadMode::Symmetric)]
}

fn interp() -> impl Strategy<Value = Interp> {
    prop_oneof![Just(Interp::Nearest), Just(Interp::Bilinear)]
}

fn resample() -> impl Strategy<Value = Resample> {
    (prop_oneof![Just(Filter::Nearest), Just(Filter::Bilinear), Just(Filter::Bicubic)], any::<bool>())
        .prop_map(|(filter, antialias)| Resample { filter, antialias })
}

fn center(wild: u32) -> impl Strategy<Value = Option<[f64; 2]>> {
    proptest::option::of((real(wild), real(wild)).prop_map(|(x, y)| [x * 8.0, y * 8.0]))
}

/// Small counts with the policy bounds' edges.
fn count(wild: u32) -> BoxedStrategy<u32> {
    if wild == 0 {
        return (1u32..4).boxed();
    }
    prop_oneof![6 => 0u32..6, wild => prop_oneof![Just(999u32), Just(1000), Just(1001), Just(u32::MAX)]].boxed()
}

/// Every leaf op (no containers).
fn leaf_op(wild: u32) -> impl Strategy<Value = OpSpec> {
    prop_oneof![
        (padding(wild), fill(wild), pad_mode()).prop_map(|(padding, fill, mode)| OpSpec::Pad(ops::Pad {
            padding,
            fill,
            mode
        })),
        (size(wild), size(wild), padding(wild), any::<bool>(), fill(wild), pad_mode()).prop_map(
            |(height, width, padding, pad_if_needed, fill, mode)| OpSpec::RandomCrop(ops::RandomCrop {
                height,
                width,
                padding,
                pad_if_needed,
                fill,
                mode
            })
        ),
        real(wild).prop_map(|p| OpSpec::HorizontalFlip(ops::HorizontalFlip { p })),
        real(wild).prop_map(|p| OpSpec::VerticalFlip(ops::VerticalFlip { p })),
        (
            proptest::option::of(pair(wild)),
            proptest::option::of(pair(wild)),
            proptest::option::of(pair(wild)),
            proptest::option::of(pair(wild).prop_map(|(a, b)| (a - 0.5, b - 0.5)))
        )
            .prop_map(|(brightness, contrast, saturation, hue)| OpSpec::ColorJitter(ops::ColorJitter {
                brightness,
                contrast,
                saturation,
                hue
            })),
        count(wild).prop_map(move |n| OpSpec::Grayscale(ops::Grayscale {
            num_output_channels: if wild == 0 { 1 + 2 * (n % 2) } else { n }
        })),
        real(wild).prop_map(|p| OpSpec::RandomGrayscale(ops::RandomGrayscale { p })),
        (
            prop_oneof![4 => (0u32..8).prop_map(|k| 2 * k + 1), 1 => size(wild)],
            prop_oneof![4 => (0u32..8).prop_map(|k| 2 * k + 1), 1 => size(wild)],
            pair(wild)
        )
            .prop_map(|(kx, ky, sigma)| OpSpec::GaussianBlur(ops::GaussianBlur { kx, ky, sigma })),
        (real(wild), real(wild), any::<bool>())
            .prop_map(|(mean, sigma, clip)| OpSpec::GaussianNoise(ops::GaussianNoise { mean, sigma, clip })),
        (
            real(wild),
            pair(wild),
            pair(wild),
            prop_oneof![3 => fill(wild).prop_map(EraseValue::Values), 1 => Just(EraseValue::Random)]
        )
            .prop_map(|(p, scale, ratio, value)| OpSpec::RandomErasing(ops::RandomErasing {
                p,
                scale,
                ratio,
                value
            })),
        real(wild).prop_map(|p| OpSpec::RandomAutocontrast(ops::RandomAutocontrast { p })),
        real(wild).prop_map(|p| OpSpec::RandomEqualize(ops::RandomEqualize { p })),
        (real(wild), real(wild))
            .prop_map(|(t, p)| OpSpec::RandomSolarize(ops::RandomSolarize { threshold: t * 255.0, p })),
        (count(wild), real(wild)).prop_map(|(bits, p)| OpSpec::RandomPosterize(ops::RandomPosterize { bits, p })),
        (real(wild), real(wild)).prop_map(|(f, p)| OpSpec::RandomAdjustSharpness(ops::RandomAdjustSharpness {
            sharpness_factor: f * 3.0,
            p
        })),
        real(wild).prop_map(|p| OpSpec::RandomInvert(ops::RandomInvert { p })),
        (pair(wild), interp(), any::<bool>(), center(wild), opt_fill(wild)).prop_map(
            |(d, interp, expand, center, fill)| {
                OpSpec::RandomRotation(ops::RandomRotation {
                    degrees: (d.0 * 360.0, d.1 * 360.0),
                    interp,
                    expand,
                    center,
                    fill,
                })
            }
        ),
        (
            pair(wild),
            proptest::option::of(pair(wild)),
            proptest::option::of(pair(wild)),
            proptest::collection::vec(real(wild).prop_map(|v| v * 89.0), 0..=5).prop_map(move |mut v| {
                if wild == 0 {
                    v.truncate(v.len() / 2 * 2);
                    for r in v.chunks_exact_mut(2) {
                        r.sort_by(f64::total_cmp);
                    }
                }
                v
            }),
            interp(),
            opt_fill(wild),
            center(wild)
        )
            .prop_map(|(d, translate, scale, shear, interp, fill, center)| OpSpec::RandomAffine(
                ops::RandomAffine {
                    degrees: (d.0 * 180.0, d.1 * 180.0),
                    translate,
                    scale,
                    shear,
                    interp,
                    fill,
                    center
                }
            )),
        (real(wild), real(wild), interp(), opt_fill(wild)).prop_map(|(distortion_scale, p, interp, fill)| {
            OpSpec::RandomPerspective(ops::RandomPerspective { distortion_scale, p, interp, fill })
        }),
        (policy_kind(wild), interp(), opt_fill(wild)).prop_map(|(kind, interp, fill)| OpSpec::Policy(ops::Policy {
            kind,
            interp,
            fill
        })),
        (
            prop_oneof![
                size(wild).prop_map(ResizeTo::Shorter),
                (size(wild), size(wild)).prop_map(|(h, w)| ResizeTo::Exact(h, w))
            ],
            prop_oneof![3 => Just(None), wild => proptest::option::of(size(wild))],
            resample()
        )
            .prop_map(|(size, max_size, resample)| OpSpec::Resize(ops::Resize { size, max_size, resample })),
        (size(wild), size(wild)).prop_map(|(height, width)| OpSpec::CenterCrop(ops::CenterCrop { height, width })),
        (size(wild), size(wild), pair(wild), pair(wild), resample()).prop_map(
            |(height, width, scale, ratio, resample)| {
                OpSpec::RandomResizedCrop(ops::RandomResizedCrop {
                    height,
                    width,
                    scale,
                    ratio: (ratio.0 * 2.0, ratio.1 * 2.0),
                    resample,
                })
            }
        ),
    ]
}

fn policy_kind(wild: u32) -> impl Strategy<Value = PolicyKind> {
    prop_oneof![
        prop_oneof![Just(AaPolicy::ImageNet), Just(AaPolicy::Cifar10), Just(AaPolicy::Svhn)]
            .prop_map(PolicyKind::AutoAugment),
        (count(wild), count(wild), prop_oneof![3 => 2u32..40, 1 => count(wild)])
            .prop_map(|(num_ops, magnitude, bins)| PolicyKind::RandAugment { num_ops, magnitude, bins }),
        prop_oneof![3 => 2u32..40, 1 => count(wild)].prop_map(|bins| PolicyKind::TrivialAugmentWide { bins }),
        (count(wild), count(wild), prop_oneof![4 => -2i32..4, wild => any::<i32>()], real(wild), any::<bool>())
            .prop_map(|(severity, width, depth, alpha, all_ops)| PolicyKind::AugMix {
                severity,
                width,
                depth,
                alpha,
                all_ops
            }),
    ]
}

/// Any op: leaves, and containers of them nested up to 5 deep (the limit is 3), mostly narrow, sometimes wider
/// than [`super::super::ops::MAX_CONTAINER_OPS`] or empty.
fn any_op(wild: u32) -> impl Strategy<Value = OpSpec> {
    leaf_op(wild).prop_recursive(if wild == 0 { 2 } else { 5 }, 96, 4, move |inner| {
        let list = prop_oneof![
            8 => proptest::collection::vec(inner.clone(), 1..4),
            wild => Just(Vec::new()),
            wild => proptest::collection::vec(inner.clone(), 65..=66),
        ];
        prop_oneof![
            (list.clone(), real(wild))
                .prop_map(|(transforms, p)| OpSpec::RandomApply(ops::RandomApply { transforms, p })),
            (list.clone(), proptest::collection::vec(real(wild), 0..5)).prop_map(move |(transforms, mut p)| {
                // Mostly one weight per op (the rule is then about the values), sometimes a wrong count.
                if wild == 0 || p.len() % 2 == 0 {
                    p.resize(transforms.len(), 1.0);
                }
                OpSpec::RandomChoice(ops::RandomChoice { transforms, p })
            }),
            list.prop_map(|transforms| OpSpec::RandomOrder(ops::RandomOrder { transforms })),
        ]
    })
}

/// Any transform of the list, including the foldable ones and `Resampled` around anything.
fn transform(wild: u32) -> impl Strategy<Value = TransformSpec> {
    let folded = prop_oneof![
        (size(wild), size(wild), pair(wild), pair(wild)).prop_map(|(height, width, scale, ratio)| {
            TransformSpec::RandomResizedCrop { height, width, scale, ratio: (ratio.0 * 2.0, ratio.1 * 2.0) }
        }),
        size(wild).prop_map(|shorter| TransformSpec::ResizeShorter { shorter }),
        (size(wild), size(wild)).prop_map(|(height, width)| TransformSpec::ResizeExact { height, width }),
        (size(wild), size(wild)).prop_map(|(height, width)| TransformSpec::CenterCrop { height, width }),
        real(wild).prop_map(|p| TransformSpec::RandomHorizontalFlip { p }),
    ];
    let plain = prop_oneof![3 => folded, 4 => any_op(wild).prop_map(TransformSpec::Op)];
    prop_oneof![
        8 => plain.clone(),
        1 => (resample(), plain).prop_map(|(resample, inner)| TransformSpec::Resampled { resample, inner: Box::new(inner) }),
    ]
}

/// The largest (height, width) any stage-2 frame of `op` can take on an input of `hw` — the declared bound the
/// run is held to (`None` side: the op's size depends on the sample beyond what the list fixes, bounded by
/// `MAX_SIDE`, which the program refuses to exceed per sample). Returns the output size.
fn walk(op: &OpSpec, hw: (usize, usize), peak: &mut (usize, usize)) -> (usize, usize) {
    let grow = |peak: &mut (usize, usize), (h, w): (usize, usize)| *peak = (peak.0.max(h), peak.1.max(w));
    let out = match op {
        OpSpec::RandomApply(ops::RandomApply { transforms, .. }) => {
            transforms.iter().fold(hw, |hw, t| walk(t, hw, peak))
        }
        OpSpec::RandomChoice(ops::RandomChoice { transforms, .. }) => {
            transforms.iter().map(|t| walk(t, hw, peak)).last().unwrap_or(hw)
        }
        OpSpec::RandomOrder(ops::RandomOrder { transforms }) => {
            // Any order: every op sees its input's size (they all keep it), so one walk each covers them.
            for t in transforms {
                walk(t, hw, peak);
            }
            hw
        }
        OpSpec::RandomRotation(ops::RandomRotation { expand: true, .. }) => {
            // The turned image's bounding box: at most h + w on each side (+1 for rounding).
            let d = hw.0 + hw.1 + 1;
            grow(peak, (d, d));
            // What follows sees an angle-dependent size: bound it by the per-sample limit.
            (MAX_SIDE as usize, MAX_SIDE as usize)
        }
        op => op.output_hw(Some(hw)).unwrap_or((MAX_SIDE as usize, MAX_SIDE as usize)),
    };
    let out = (out.0.min(MAX_SIDE as usize), out.1.min(MAX_SIDE as usize));
    grow(peak, out);
    out
}

/// Bytes the worker's scratch retains (every buffer that grows with the image).
fn retained_bytes(s: &WorkerScratch) -> usize {
    let p = &s.program;
    s.resample.retained_bytes() + p.frame.buf.capacity() + p.ops.retained_bytes()
}

/// The images every compiled list runs on: 1×1, 1×N, N×1, 2×3, 3×700 and a 17×23, gray and RGB.
fn images() -> Vec<PixelArray> {
    let mut v = Vec::new();
    for (h, w) in [(1, 1), (1, 9), (9, 1), (2, 3), (3, 700), (17, 23)] {
        for channels in [1u8, 3] {
            let n = h * w * usize::from(channels);
            let data = (0..n).map(|i| ((i * 37 + (i / 7) * 11) % 251) as u8).collect();
            v.push(PixelArray { data, height: h as u32, width: w as u32, channels });
        }
    }
    v
}

/// What the runs covered (printed at the end of each test, for the report): lists refused, compiled, compiled
/// but over [`RUN_BUDGET_ELEMS`], samples run, samples refused at run time.
static COUNTS: [std::sync::atomic::AtomicUsize; 5] = [const { std::sync::atomic::AtomicUsize::new(0) }; 5];

fn count_up(i: usize) {
    COUNTS[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// A frame of more elements than this is not run (the list compiled; running it would only test the memory of
/// the machine): 16 M elements.
const RUN_BUDGET_ELEMS: usize = 1 << 24;

fn check_list(
    transforms: Vec<TransformSpec>,
    gray: bool,
    float: bool,
    images: &[PixelArray],
) -> std::result::Result<(), TestCaseError> {
    let channels = if gray { Channels::Gray } else { Channels::Rgb };
    let output = if float {
        OutputSpec {
            dtype: DType::F32,
            layout: Layout::Nchw,
            normalize: Some(Normalize { mean: [0.5; 3], std: [0.25; 3] }),
            pad_to: None,
        }
    } else {
        OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, normalize: None, pad_to: None }
    };
    let p = match SamplePipeline::with_channels(transforms.clone(), output, channels) {
        Ok(p) => p,
        Err(TrdataError::Config { parameter, message }) => {
            prop_assert!(!parameter.is_empty() && !message.is_empty());
            count_up(0);
            if std::env::var_os("FUZZ_SHOW").is_some() {
                eprintln!("REFUSED {parameter}: {message}");
            }
            return Ok(());
        }
        Err(e) => return Err(TestCaseError::fail(format!("{transforms:?}: not a config error: {e}"))),
    };
    count_up(1);
    let (oh, ow) = p.output_hw();
    prop_assert!((1..=MAX_SIDE as usize).contains(&oh) && (1..=MAX_SIDE as usize).contains(&ow));
    let c = channels.count();
    for a in images {
        for index in 0..3u64 {
            let key = SampleKey { seed: 11, epoch: index % 2, index };
            let plan = p.plan(a.width, a.height, key);
            let start = (plan.y.out_n, plan.x.out_n);
            let mut peak = (start.0.max(a.height as usize), start.1.max(a.width as usize));
            let end = p.program().ops.iter().fold(start, |hw, (_, op)| walk(op, hw, &mut peak));
            if !p.program().ops.is_empty() {
                prop_assert_eq!(end.0.min(oh), oh, "{:?}", transforms);
            }
            let peak_elems = peak.0 * peak.1 * c.max(usize::from(a.channels));
            if peak_elems > RUN_BUDGET_ELEMS || p.sample_bytes() > RUN_BUDGET_ELEMS * 4 {
                count_up(2);
                return Ok(());
            }
            let mut s = WorkerScratch::new().unwrap();
            let mut dst = vec![0xA5u8; p.sample_bytes()];
            // A sample may be refused (a RandomCrop larger than the padded image, as torchvision raises): then
            // `dst` is untouched. It must never panic (proptest reports a panic as a failure with the input).
            match p.process_pixels(&mut s, a, 0, key, &mut dst) {
                Ok(_) => count_up(3),
                Err(_) => {
                    count_up(4);
                    prop_assert!(dst.iter().all(|&b| b == 0xA5), "a refused sample leaves dst untouched");
                }
            }
            // The declared bound: every buffer in bytes per element of the largest frame (u8 frame, u8 spare,
            // f32 planes and the resize's wide intermediates), plus the fixed-size tables.
            let bound = 24 * peak.0 * peak.1 * 3 + (1 << 16);
            let got = retained_bytes(&s);
            prop_assert!(
                got <= bound,
                "{transforms:?} on {}×{}×{}: scratch {got} B > bound {bound} B",
                a.height,
                a.width,
                a.channels
            );
        }
    }
    Ok(())
}

/// Run `test` on `strategy` for `PROPTEST_CASES` cases (256 in the suite; a long run sets more), on a thread
/// with a large stack: the generators of nested containers recurse deeper than a test thread's 2 MiB allow (the
/// code under test does not; it runs with the same stack either way).
fn fuzz<S: Strategy>(
    strategy: impl FnOnce() -> S + Send + 'static,
    test: impl Fn(S::Value) -> std::result::Result<(), TestCaseError> + Send + 'static,
) {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || {
            let config = ProptestConfig { max_shrink_iters: 4000, ..ProptestConfig::default() };
            let mut runner = proptest::test_runner::TestRunner::new(config);
            if let Err(e) = runner.run(&strategy(), test) {
                panic!("{e}");
            }
        })
        .expect("spawn the fuzz thread")
        .join()
        .expect("the fuzz run passes");
    let c: Vec<usize> = COUNTS.iter().map(|c| c.load(std::sync::atomic::Ordering::Relaxed)).collect();
    eprintln!(
        "fuzz (both tests so far): refused {}, compiled {}, over budget {}, samples run {}, samples refused {}",
        c[0], c[1], c[2], c[3], c[4]
    );
}

/// Lists of 0–6 arbitrary transforms, any order.
#[test]
fn any_transform_list_compiles_to_a_config_error_or_runs_within_its_bound() {
    let lists = || (proptest::collection::vec(transform(1), 0..6), any::<bool>(), any::<bool>());
    fuzz(lists, |(transforms, gray, float)| check_list(transforms, gray, float, &images()));
}

/// A fixed-size prefix, then arbitrary ops: most of these compile, so the run path is what is fuzzed.
#[test]
fn ops_after_a_crop_run_within_their_bound() {
    let lists = || {
        (
            (1u32..20, 1u32..20),
            prop_oneof![3 => proptest::collection::vec(any_op(0), 1..5), 1 => proptest::collection::vec(any_op(1), 1..3)],
            proptest::option::of((1u32..20, 1u32..20)),
            any::<bool>(),
        )
    };
    fuzz(lists, |((h, w), ops, tail, gray)| {
        let mut t = vec![TransformSpec::CenterCrop { height: h, width: w }];
        t.extend(ops.into_iter().map(TransformSpec::Op));
        if let Some((th, tw)) = tail {
            t.push(TransformSpec::CenterCrop { height: th, width: tw });
        }
        check_list(t, gray, false, &images())
    });
}

/// Found by the fuzz's size walk: an intermediate larger than `MAX_SIDE` compiled when a later crop fixed a small
/// output (tens of GB per worker on the first sample); now refused naming the op, and a size the list does not
/// fix refuses the sample instead of allocating it.
#[test]
fn oversized_intermediates_are_refused_at_compile_or_per_sample() {
    let pad =
        |v| TransformSpec::Op(OpSpec::Pad(ops::Pad { padding: [v; 4], fill: vec![0.0], mode: PadMode::Constant }));
    let cc = |h, w| TransformSpec::CenterCrop { height: h, width: w };
    let invert = TransformSpec::Op(OpSpec::RandomInvert(ops::RandomInvert { p: 1.0 }));
    let nested = TransformSpec::Op(OpSpec::RandomApply(ops::RandomApply {
        transforms: vec![
            OpSpec::Pad(ops::Pad { padding: [40_000; 4], fill: vec![0.0], mode: PadMode::Constant }),
            OpSpec::CenterCrop(ops::CenterCrop { height: 2, width: 2 }),
        ],
        p: 0.5,
    }));
    for (t, op) in [
        (vec![cc(1, 1), pad(65_536), cc(1, 1)], "Pad at transforms[1]"),
        (
            vec![cc(2, 2), invert.clone(), TransformSpec::ResizeExact { height: 4, width: 65_536 }, pad(1), cc(1, 1)],
            "Pad at transforms[3]",
        ),
        (vec![cc(2, 2), nested], "Pad at transforms[1].transforms[0]"),
    ] {
        match program::compile(&t) {
            Err(TrdataError::Config { parameter, message }) => {
                assert_eq!(parameter, "transforms", "{t:?}");
                assert!(message.contains(op) && message.contains("at most 65536"), "{message}");
            }
            other => panic!("{t:?} compiled: {other:?}"),
        }
    }
    // The sizes depend on the sample: each sample is refused (no allocation), the pipeline stays usable.
    let a = PixelArray { data: vec![7; 3 * 700 * 3], height: 3, width: 700, channels: 3 };
    for t in [
        vec![pad(40_000), cc(1, 1)],
        vec![invert.clone(), TransformSpec::ResizeShorter { shorter: 65_536 }, cc(1, 1)],
        vec![invert, TransformSpec::ResizeShorter { shorter: 1_000 }, cc(1, 1)],
    ] {
        let p = SamplePipeline::new(
            t.clone(),
            OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, normalize: None, pad_to: None },
        )
        .unwrap();
        let mut s = WorkerScratch::new().unwrap();
        let mut dst = vec![1; p.sample_bytes()];
        let e = p.process_pixels(&mut s, &a, 0, SampleKey { seed: 0, epoch: 0, index: 0 }, &mut dst).unwrap_err();
        assert!(e.to_string().contains("sides must be at most 65536"), "{t:?}: {e}");
        assert_eq!(dst, [1; 3], "a refused sample leaves dst untouched");
        assert!(retained_bytes(&s) < 1 << 24, "{t:?}");
    }
}
