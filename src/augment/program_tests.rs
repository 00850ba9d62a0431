//! program tests: the compiled program's stages on real pixel arrays — ops after the fused prefix equal the same
//! kernels applied to the prefix's output; folded and unfolded flips agree; the identity prefix + RandomCrop
//! (the CIFAR recipe); per-sample determinism; compile errors name the op.

use super::geometry::{Filter, Resample};
use super::kernels::PadMode;
use super::ops::{Drawn, EraseValue, OpSpec, ResizeTo, Site};
use super::*;
use crate::source::PixelArray;

const U8_NHWC: OutputSpec = OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, normalize: None, pad_to: None };

fn key(index: u64) -> SampleKey {
    SampleKey { seed: 7, epoch: 1, index }
}

/// A deterministic, textured RGB array of `n` images.
fn array(n: usize, h: usize, w: usize) -> PixelArray {
    let data = (0..n * h * w * 3).map(|i| ((i * 37 + (i / 7) * 11) % 251) as u8).collect();
    PixelArray { data, height: h as u32, width: w as u32, channels: 3 }
}

fn run(t: Vec<TransformSpec>, a: &PixelArray, i: usize, k: SampleKey) -> Vec<u8> {
    let p = SamplePipeline::new(t, U8_NHWC).unwrap();
    let mut s = WorkerScratch::new().unwrap();
    let mut dst = vec![0; p.sample_bytes()];
    p.process_pixels(&mut s, a, i, k, &mut dst).unwrap();
    dst
}

fn op(o: OpSpec) -> TransformSpec {
    TransformSpec::Op(o)
}

#[test]
fn pixel_ops_after_the_prefix_transform_its_output() {
    let a = array(2, 40, 50);
    let base = run(vec![TransformSpec::CenterCrop { height: 30, width: 36 }], &a, 1, key(1));
    let inv = run(
        vec![
            TransformSpec::CenterCrop { height: 30, width: 36 },
            op(OpSpec::RandomInvert(ops::RandomInvert { p: 1.0 })),
        ],
        &a,
        1,
        key(1),
    );
    assert!(base.iter().zip(&inv).all(|(b, i)| *i == 255 - *b));
    // Never: p = 0 leaves the fused output unchanged (but goes through the uint8 stage).
    let never = run(
        vec![
            TransformSpec::CenterCrop { height: 30, width: 36 },
            op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.0 })),
        ],
        &a,
        1,
        key(1),
    );
    assert_eq!(base, never);
}

#[test]
fn folded_and_pixel_stage_flips_agree() {
    let a = array(3, 33, 47);
    let rrc = TransformSpec::RandomResizedCrop { height: 20, width: 24, scale: (0.3, 1.0), ratio: (0.75, 1.33) };
    for i in 0..3 {
        let folded =
            run(vec![rrc.clone(), op(OpSpec::VerticalFlip(ops::VerticalFlip { p: 1.0 }))], &a, i, key(i as u64));
        let late = run(
            vec![
                rrc.clone(),
                op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.0 })),
                op(OpSpec::VerticalFlip(ops::VerticalFlip { p: 1.0 })),
            ],
            &a,
            i,
            key(i as u64),
        );
        let none = run(vec![rrc.clone()], &a, i, key(i as u64));
        assert_eq!(folded, late, "sample {i}");
        let row = 24 * 3;
        assert_eq!(&folded[..row], &none[19 * row..], "sample {i}: first row = last row unflipped");
        let hflip = run(
            vec![
                rrc.clone(),
                op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.0 })),
                TransformSpec::RandomHorizontalFlip { p: 1.0 },
            ],
            &a,
            i,
            key(i as u64),
        );
        assert_eq!(&hflip[..3], &none[row - 3..row], "sample {i}");
    }
}

#[test]
fn random_crop_with_padding_on_the_identity_prefix() {
    // CIFAR's recipe: RandomCrop(32, padding=4) + flip on 32×32 arrays.
    let a = array(4, 32, 32);
    let t = vec![
        op(OpSpec::RandomCrop(ops::RandomCrop {
            height: 32,
            width: 32,
            padding: [4; 4],
            pad_if_needed: false,
            fill: vec![0.0],
            mode: PadMode::Constant,
        })),
        TransformSpec::RandomHorizontalFlip { p: 0.5 },
    ];
    let p = SamplePipeline::new(t.clone(), U8_NHWC).unwrap();
    assert_eq!(p.output_hw(), (32, 32));
    let mut shifted = 0;
    for i in 0..4 {
        let k = key(i as u64);
        let out = run(t.clone(), &a, i, k);
        assert_eq!(out, run(t.clone(), &a, i, k), "same key, same bytes");
        let d = super::ops::OpSpec::sample(
            match &t[0] {
                TransformSpec::Op(o) => o,
                _ => unreachable!(),
            },
            &mut super::program::op_rng(k, Site::top(0)),
            (32, 32, 3),
        )
        .unwrap();
        let super::ops::Drawn::Crop { top, left, .. } = d else { panic!("{d:?}") };
        let (top, left) = (top as i64 - 4, left as i64 - 4);
        let flipped = super::program::op_rng(k, Site::top(1)).uniform() < 0.5;
        shifted += usize::from(top != 0 || left != 0);
        let img = a.image(i);
        for y in 0..32i64 {
            for x in 0..32i64 {
                let sx = if flipped { 31 - x } else { x };
                let (yy, xx) = (y + top, sx + left);
                let want = if (0..32).contains(&yy) && (0..32).contains(&xx) {
                    &img[(yy * 32 + xx) as usize * 3..][..3]
                } else {
                    &[0u8, 0, 0][..]
                };
                assert_eq!(&out[(y * 32 + x) as usize * 3..][..3], want, "sample {i} at ({y}, {x})");
            }
        }
    }
    assert!(shifted > 0);
}

#[test]
fn compile_errors_name_the_op_and_parameter() {
    let err = |t: Vec<TransformSpec>| SamplePipeline::new(t, U8_NHWC).unwrap_err().to_string();
    let e = err(vec![op(OpSpec::RandomInvert(ops::RandomInvert { p: 1.5 }))]);
    assert!(e.contains("invalid p: 1.5 must be in [0, 1] (RandomInvert at transforms[0])"), "{e}");
    let e = err(vec![op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.5 }))]);
    assert!(e.contains("must fix the output size"), "{e}");
    // A crop or resize after a pixel op runs on the uint8 image (it used to be refused).
    let late = SamplePipeline::new(
        vec![
            TransformSpec::CenterCrop { height: 8, width: 8 },
            op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.5 })),
            TransformSpec::CenterCrop { height: 4, width: 4 },
        ],
        U8_NHWC,
    )
    .unwrap();
    assert_eq!(late.output_hw(), (4, 4));
    let e = err(vec![
        TransformSpec::CenterCrop { height: 8, width: 8 },
        op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.5 })),
        TransformSpec::CenterCrop { height: 0, width: 4 },
    ]);
    assert!(e.contains("invalid size: (0, 4) must be in 1..=65536 (CenterCrop at transforms[2])"), "{e}");
    let e = err(vec![
        TransformSpec::CenterCrop { height: 8, width: 8 },
        op(OpSpec::RandomErasing(ops::RandomErasing {
            p: 0.5,
            scale: (0.02, 0.33),
            ratio: (0.3, 3.3),
            value: EraseValue::Values(vec![300.0]),
        })),
    ]);
    assert!(e.contains("invalid value: [300.0] must be in [0, 255]"), "{e}");
    let e = err(vec![
        TransformSpec::CenterCrop { height: 8, width: 8 },
        op(OpSpec::GaussianBlur(ops::GaussianBlur { kx: 4, ky: 3, sigma: (0.1, 2.0) })),
    ]);
    assert!(e.contains("invalid kernel_size: (4, 3) must be odd"), "{e}");
}

#[test]
fn every_op_runs_on_gray_and_rgb_and_is_deterministic() {
    let all = vec![
        op(OpSpec::Pad(ops::Pad { padding: [1, 2, 3, 4], fill: vec![10.0, 20.0, 30.0], mode: PadMode::Constant })),
        op(OpSpec::Pad(ops::Pad { padding: [2, 2, 2, 2], fill: vec![0.0], mode: PadMode::Reflect })),
        op(OpSpec::RandomCrop(ops::RandomCrop {
            height: 30,
            width: 30,
            padding: [0; 4],
            pad_if_needed: true,
            fill: vec![0.0],
            mode: PadMode::Edge,
        })),
        op(OpSpec::VerticalFlip(ops::VerticalFlip { p: 0.5 })),
        op(OpSpec::ColorJitter(ops::ColorJitter {
            brightness: Some((0.6, 1.4)),
            contrast: Some((0.6, 1.4)),
            saturation: Some((0.6, 1.4)),
            hue: Some((-0.1, 0.1)),
        })),
        op(OpSpec::RandomGrayscale(ops::RandomGrayscale { p: 0.5 })),
        op(OpSpec::GaussianBlur(ops::GaussianBlur { kx: 5, ky: 3, sigma: (0.1, 2.0) })),
        op(OpSpec::GaussianNoise(ops::GaussianNoise { mean: 0.0, sigma: 0.1, clip: true })),
        op(OpSpec::RandomErasing(ops::RandomErasing {
            p: 1.0,
            scale: (0.02, 0.33),
            ratio: (0.3, 3.3),
            value: EraseValue::Random,
        })),
        op(OpSpec::RandomAutocontrast(ops::RandomAutocontrast { p: 0.5 })),
        op(OpSpec::RandomEqualize(ops::RandomEqualize { p: 0.5 })),
        op(OpSpec::RandomSolarize(ops::RandomSolarize { threshold: 128.0, p: 0.5 })),
        op(OpSpec::RandomPosterize(ops::RandomPosterize { bits: 3, p: 0.5 })),
        op(OpSpec::RandomAdjustSharpness(ops::RandomAdjustSharpness { sharpness_factor: 2.0, p: 0.5 })),
        op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.5 })),
        op(OpSpec::Grayscale(ops::Grayscale { num_output_channels: 3 })),
    ];
    let mut t = vec![TransformSpec::CenterCrop { height: 20, width: 24 }];
    t.extend(all);
    let a = array(2, 28, 26);
    for channels in [Channels::Rgb, Channels::Gray] {
        let p = SamplePipeline::with_channels(t.clone(), U8_NHWC, channels).unwrap();
        assert_eq!(p.output_hw(), (30, 30));
        let mut s = WorkerScratch::new().unwrap();
        let mut d1 = vec![0; p.sample_bytes()];
        let mut d2 = vec![1; p.sample_bytes()];
        p.process_pixels(&mut s, &a, 1, key(5), &mut d1).unwrap();
        p.process_pixels(&mut s, &a, 1, key(5), &mut d2).unwrap();
        assert_eq!(d1, d2);
    }
}

/// The compiled program's stage-2 ops (what [`SamplePipeline::program`] holds after the prefix).
fn stage2(t: &[TransformSpec]) -> Vec<OpSpec> {
    SamplePipeline::new(t.to_vec(), U8_NHWC).unwrap().program().ops.iter().map(|(_, o)| o.clone()).collect()
}

#[test]
fn the_prefix_folds_the_longest_supported_run_and_the_rest_runs_on_the_uint8_image() {
    let cc = |h, w| TransformSpec::CenterCrop { height: h, width: w };
    let rrc = TransformSpec::RandomResizedCrop { height: 20, width: 20, scale: (0.3, 1.0), ratio: (0.75, 1.33) };
    // [RandomResizedCrop, Resize((h, w))]: the crop folds, the second resize runs in stage 2.
    let ops = stage2(&[rrc.clone(), TransformSpec::ResizeExact { height: 10, width: 12 }]);
    assert!(matches!(ops.as_slice(), [OpSpec::Resize(ops::Resize { size: ResizeTo::Exact(10, 12), .. })]), "{ops:?}");
    // [Resize(int), pixel op, CenterCrop]: nothing fixes the size before the pixel op, so the resize runs in stage
    // 2 too (same semantics, on the uint8 image).
    let t = vec![
        TransformSpec::ResizeShorter { shorter: 16 },
        op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.5 })),
        cc(12, 12),
    ];
    let p = SamplePipeline::new(t.clone(), U8_NHWC).unwrap();
    assert_eq!(p.program().prefix.geometry, super::geometry::Geometry::Identity);
    assert_eq!(p.output_hw(), (12, 12));
    // Flips right after the folded ops fold with them.
    let ops = stage2(&[cc(8, 8), TransformSpec::RandomHorizontalFlip { p: 0.5 }, cc(4, 4)]);
    assert!(matches!(ops.as_slice(), [OpSpec::CenterCrop(ops::CenterCrop { height: 4, width: 4 })]), "{ops:?}");
}

#[test]
fn a_stage2_resize_equals_the_fused_one_when_pillow_also_runs_horizontal_first() {
    // 40×50 → 20×24: Pillow 13 runs the horizontal pass first here (20 ≤ 2·26), as torch's uint8 kernel does, so
    // the stage-2 resize (same coefficients) must give the fused pass's bytes exactly, for every filter.
    let a = array(2, 40, 50);
    for filter in [Filter::Bilinear, Filter::Bicubic] {
        for antialias in [true, false] {
            let r = Resample { filter, antialias };
            let exact = TransformSpec::ResizeExact { height: 20, width: 24 };
            let fused = TransformSpec::Resampled { resample: r, inner: Box::new(exact.clone()) };
            let late = vec![op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.0 })), fused.clone()];
            assert!(matches!(stage2(&late)[1], OpSpec::Resize(ops::Resize { resample, .. }) if resample == r));
            for i in 0..2 {
                assert_eq!(run(vec![fused.clone()], &a, i, key(3)), run(late.clone(), &a, i, key(3)), "{r:?}");
            }
        }
    }
}

#[test]
fn stage2_center_crop_pads_with_zeros_and_rounds_like_torchvision() {
    let a = array(1, 7, 9);
    // 6×6 of 7×9 after a p=0 op: top = round(0.5) = 0, left = round(1.5) = 2 (half to even).
    let out = run(
        vec![op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.0 })), TransformSpec::CenterCrop { height: 6, width: 6 }],
        &a,
        0,
        key(0),
    );
    let img = a.image(0);
    for y in 0..6 {
        assert_eq!(&out[y * 18..(y + 1) * 18], &img[y * 27 + 6..y * 27 + 24], "row {y}");
    }
    // 9×11 of 7×9: one zero row/column before (pad (9-7)//2 = 1), one after.
    let out = run(
        vec![
            op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.0 })),
            TransformSpec::CenterCrop { height: 9, width: 11 },
        ],
        &a,
        0,
        key(0),
    );
    assert!(out[..33].iter().all(|&v| v == 0) && out[8 * 33..].iter().all(|&v| v == 0));
    assert_eq!(&out[33 + 3..33 + 30], &img[..27]);
}

#[test]
fn stage2_random_resized_crop_resizes_the_drawn_box() {
    // The draw is the op's own stream; cropping that box and resizing it exactly (Resize((h, w)) of a centre crop
    // of the box's size is the same arithmetic when the box is the whole image) — here: scale (1, 1) and ratio
    // = the image's aspect make the box the whole image, so RandomResizedCrop must equal Resize((h, w)).
    let a = array(2, 30, 40);
    let rrc =
        TransformSpec::RandomResizedCrop { height: 15, width: 16, scale: (1.0, 1.0), ratio: (4.0 / 3.0, 4.0 / 3.0) };
    let rs = TransformSpec::ResizeExact { height: 15, width: 16 };
    let pre = op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.0 }));
    for i in 0..2 {
        assert_eq!(
            run(vec![pre.clone(), rrc.clone()], &a, i, key(9)),
            run(vec![pre.clone(), rs.clone()], &a, i, key(9))
        );
    }
    // A real draw: the box lies in the image and the output has the op's size.
    let o = OpSpec::RandomResizedCrop(ops::RandomResizedCrop {
        height: 15,
        width: 16,
        scale: (0.08, 1.0),
        ratio: (0.75, 1.33),
        resample: Resample::default(),
    });
    for i in 0..200 {
        let d = o.sample(&mut super::program::op_rng(key(i), Site::top(1)), (30, 40, 3)).unwrap();
        let Drawn::Box { top, left, h, w } = d else { panic!("{d:?}") };
        assert!(h >= 1 && w >= 1 && top + h <= 30 && left + w <= 40, "{d:?}");
    }
}

#[test]
fn containers_run_their_ops_on_their_own_streams() {
    let a = array(3, 24, 24);
    let cc = TransformSpec::CenterCrop { height: 20, width: 20 };
    let inv = OpSpec::RandomInvert(ops::RandomInvert { p: 1.0 });
    let base = |i| run(vec![cc.clone()], &a, i, key(i as u64));
    let with = |o: OpSpec, i| run(vec![cc.clone(), op(o)], &a, i, key(i as u64));
    for i in 0..3 {
        let inverted: Vec<u8> = base(i).iter().map(|v| 255 - v).collect();
        assert_eq!(with(OpSpec::RandomApply(ops::RandomApply { transforms: vec![inv.clone()], p: 1.0 }), i), inverted);
        assert_eq!(with(OpSpec::RandomApply(ops::RandomApply { transforms: vec![inv.clone()], p: 0.0 }), i), base(i));
        // Two inverts cancel; a choice between identical ops is that op.
        let twice = OpSpec::RandomApply(ops::RandomApply { transforms: vec![inv.clone(), inv.clone()], p: 1.0 });
        assert_eq!(with(twice, i), base(i));
        let choice =
            OpSpec::RandomChoice(ops::RandomChoice { transforms: vec![inv.clone(), inv.clone()], p: vec![1.0, 3.0] });
        assert_eq!(with(choice, i), inverted);
        // A zero weight is never picked.
        let never = OpSpec::RandomChoice(ops::RandomChoice {
            transforms: vec![inv.clone(), OpSpec::RandomInvert(ops::RandomInvert { p: 0.0 })],
            p: vec![0.0, 1.0],
        });
        assert_eq!(with(never, i), base(i));
        // Flip and invert commute: any order gives the same.
        let flip = OpSpec::HorizontalFlip(ops::HorizontalFlip { p: 1.0 });
        let order = OpSpec::RandomOrder(ops::RandomOrder { transforms: vec![flip.clone(), inv.clone()] });
        let flipped_inv =
            with(OpSpec::RandomApply(ops::RandomApply { transforms: vec![flip, inv.clone()], p: 1.0 }), i);
        assert_eq!(with(order, i), flipped_inv);
    }
    // An op inside a container draws from its own stream, not the container's nor a top-level op's at the same
    // position: noise inside RandomApply(p=1) differs from the same noise at the top level.
    let noise = OpSpec::GaussianNoise(ops::GaussianNoise { mean: 0.0, sigma: 0.2, clip: true });
    let top = with(noise.clone(), 1);
    let nested = with(OpSpec::RandomApply(ops::RandomApply { transforms: vec![noise.clone()], p: 1.0 }), 1);
    assert_ne!(top, nested);
    assert_eq!(
        nested,
        with(OpSpec::RandomApply(ops::RandomApply { transforms: vec![noise], p: 1.0 }), 1),
        "deterministic"
    );
}

#[test]
fn container_draws_follow_their_weights() {
    let k = |i| key(i);
    let inv = OpSpec::RandomInvert(ops::RandomInvert { p: 1.0 });
    let choice = OpSpec::RandomChoice(ops::RandomChoice {
        transforms: vec![inv.clone(), inv.clone(), inv.clone()],
        p: vec![1.0, 0.0, 3.0],
    });
    let mut counts = [0usize; 3];
    let n = 20_000u64;
    for i in 0..n {
        let Drawn::Pick(j) = choice.sample(&mut super::program::op_rng(k(i), Site::top(0)), (4, 4, 3)).unwrap() else {
            panic!()
        };
        counts[j as usize] += 1;
    }
    assert_eq!(counts[1], 0);
    // 1/4 expected; 5 σ of a binomial(20000, 0.25) is ≈ 306.
    assert!((counts[0] as f64 - n as f64 / 4.0).abs() < 306.0, "{counts:?}");
    let order = OpSpec::RandomOrder(ops::RandomOrder { transforms: vec![inv.clone(), inv.clone(), inv] });
    let mut perms = std::collections::HashMap::new();
    for i in 0..6000 {
        let d = order.sample(&mut super::program::op_rng(k(i), Site::top(0)), (4, 4, 3)).unwrap();
        *perms.entry(d.to_vec().iter().map(|&v| v as u8).collect::<Vec<_>>()).or_insert(0usize) += 1;
    }
    // All 6 permutations, each ≈ 1000 (5 σ ≈ 144).
    assert_eq!(perms.len(), 6, "{perms:?}");
    assert!(perms.values().all(|&c| (c as f64 - 1000.0).abs() < 144.0), "{perms:?}");
}

#[test]
fn nested_sites_have_distinct_streams() {
    let mut seen = std::collections::HashSet::new();
    for p in 0..1024 {
        assert!(seen.insert(Site::top(p).stream()));
    }
    for p in [0usize, 1, 5, 1023] {
        for a in 0..64 {
            let s = Site::top(p).child(a);
            assert!(seen.insert(s.stream()), "{s}");
            for b in [0usize, 1, 63] {
                let s2 = s.child(b);
                assert!(seen.insert(s2.stream()), "{s2}");
                for c in [0usize, 7, 63] {
                    assert!(seen.insert(s2.child(c).stream()), "{}", s2.child(c));
                }
            }
        }
    }
    for fixed in [crate::rng::OP_RANDOM_RESIZED_CROP, crate::rng::OP_HORIZONTAL_FLIP, crate::rng::OP_PLAN_SHUFFLE] {
        assert!(!seen.contains(&fixed));
    }
    assert_eq!(Site::top(3).child(1).child(2).to_string(), "transforms[3].transforms[1].transforms[2]");
}

#[test]
fn containers_whose_branches_differ_in_size_are_refused() {
    let err = |t: Vec<TransformSpec>| SamplePipeline::new(t, U8_NHWC).unwrap_err().to_string();
    let cc = |h, w| TransformSpec::CenterCrop { height: h, width: w };
    let crop = |h| OpSpec::CenterCrop(ops::CenterCrop { height: h, width: h });
    let inv = OpSpec::RandomInvert(ops::RandomInvert { p: 0.5 });
    let e = err(vec![cc(20, 20), op(OpSpec::RandomApply(ops::RandomApply { transforms: vec![crop(10)], p: 0.5 }))]);
    assert!(e.starts_with("invalid transforms:") && e.contains("RandomApply at transforms[1]"), "{e}");
    assert!(e.contains("(20, 20)") && e.contains("(10, 10)"), "{e}");
    let e = err(vec![
        cc(20, 20),
        op(OpSpec::RandomChoice(ops::RandomChoice { transforms: vec![inv.clone(), crop(10)], p: vec![1.0, 1.0] })),
    ]);
    assert!(
        e.contains("RandomChoice at transforms[1]") && e.contains("transforms[1].transforms[1] gives (10, 10)"),
        "{e}"
    );
    let e =
        err(vec![cc(20, 20), op(OpSpec::RandomOrder(ops::RandomOrder { transforms: vec![inv.clone(), crop(10)] }))]);
    assert!(e.contains("RandomOrder at transforms[1]"), "{e}");
    // Same size in every branch is fine, also when a branch resizes to the size it already has.
    let ok = vec![
        cc(20, 20),
        op(OpSpec::RandomChoice(ops::RandomChoice { transforms: vec![inv.clone(), crop(20)], p: vec![1.0, 1.0] })),
    ];
    assert_eq!(SamplePipeline::new(ok, U8_NHWC).unwrap().output_hw(), (20, 20));
    // Values inside are checked with the nested site named; empty lists, bad weights and deep nesting refused.
    let e = err(vec![
        cc(20, 20),
        op(OpSpec::RandomApply(ops::RandomApply {
            transforms: vec![OpSpec::RandomInvert(ops::RandomInvert { p: 2.0 })],
            p: 0.5,
        })),
    ]);
    assert!(e.contains("invalid p: 2 must be in [0, 1] (RandomInvert at transforms[1].transforms[0])"), "{e}");
    let e = err(vec![cc(20, 20), op(OpSpec::RandomApply(ops::RandomApply { transforms: vec![], p: 0.5 }))]);
    assert!(e.contains("invalid transforms: a list of 0 must hold 1 to 64 transforms"), "{e}");
    let e = err(vec![
        cc(20, 20),
        op(OpSpec::RandomChoice(ops::RandomChoice { transforms: vec![inv.clone()], p: vec![-1.0] })),
    ]);
    assert!(e.contains("invalid p: [-1.0] must be None or one weight per transform"), "{e}");
    let mut deep = inv.clone();
    for _ in 0..4 {
        deep = OpSpec::RandomApply(ops::RandomApply { transforms: vec![deep], p: 0.5 });
    }
    let e = err(vec![cc(20, 20), op(deep)]);
    assert!(e.contains("must be nested at most 3 containers deep"), "{e}");
}

#[test]
fn a_leading_random_crop_folds_and_gives_the_pixel_ops_bytes() {
    let rc = |padding: [u32; 4], pad_if_needed: bool, fill: f64| {
        op(OpSpec::RandomCrop(ops::RandomCrop {
            height: 24,
            width: 30,
            padding,
            pad_if_needed,
            fill: vec![fill],
            mode: PadMode::Constant,
        }))
    };
    // Folds: pad_if_needed (never fails), zero fill; a flip before it (p = 0 here) keeps it at position 1.
    let folded = |c: TransformSpec| vec![TransformSpec::RandomHorizontalFlip { p: 0.0 }, c];
    let unfolded = |c: TransformSpec| vec![op(OpSpec::RandomInvert(ops::RandomInvert { p: 0.0 })), c];
    for (h, w) in [(40, 50), (20, 50), (10, 12), (24, 30)] {
        let a = array(3, h, w);
        for c in [rc([0; 4], true, 0.0), rc([3, 1, 2, 5], true, 0.5), rc([30; 4], false, 0.0)] {
            let p = SamplePipeline::new(folded(c.clone()), U8_NHWC).unwrap();
            assert!(matches!(p.program().prefix.geometry, super::geometry::Geometry::RandomCrop { pos: 1, .. }));
            assert!(p.program().ops.is_empty());
            for i in 0..3 {
                let k = key(i as u64 + 11);
                assert_eq!(run(folded(c.clone()), &a, i, k), run(unfolded(c.clone()), &a, i, k), "{h}x{w} {c:?}");
            }
        }
    }
    // Stays a pixel op: it could fail (no pad_if_needed, small padding) or pads with something else than zeros.
    for c in [rc([4; 4], false, 0.0), rc([0; 4], true, 7.0)] {
        let p = SamplePipeline::new(folded(c), U8_NHWC).unwrap();
        assert_eq!(p.program().prefix.geometry, super::geometry::Geometry::Identity);
        assert_eq!(p.program().ops.len(), 1);
    }
}
