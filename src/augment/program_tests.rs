//! program tests: the compiled program's stages on real pixel arrays — ops after the fused prefix equal the same
//! kernels applied to the prefix's output; folded and unfolded flips agree; the identity prefix + RandomCrop
//! (the CIFAR recipe); per-sample determinism; compile errors name the op.

use super::kernels::PadMode;
use super::ops::{EraseValue, OpSpec};
use super::*;
use crate::source::PixelArray;

const U8_NHWC: OutputSpec = OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, normalize: None };

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
        vec![TransformSpec::CenterCrop { height: 30, width: 36 }, op(OpSpec::RandomInvert { p: 1.0 })],
        &a,
        1,
        key(1),
    );
    assert!(base.iter().zip(&inv).all(|(b, i)| *i == 255 - *b));
    // Never: p = 0 leaves the fused output unchanged (but goes through the uint8 stage).
    let never = run(
        vec![TransformSpec::CenterCrop { height: 30, width: 36 }, op(OpSpec::RandomInvert { p: 0.0 })],
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
        let folded = run(vec![rrc.clone(), op(OpSpec::VerticalFlip { p: 1.0 })], &a, i, key(i as u64));
        let late = run(
            vec![rrc.clone(), op(OpSpec::RandomInvert { p: 0.0 }), op(OpSpec::VerticalFlip { p: 1.0 })],
            &a,
            i,
            key(i as u64),
        );
        let none = run(vec![rrc.clone()], &a, i, key(i as u64));
        assert_eq!(folded, late, "sample {i}");
        let row = 24 * 3;
        assert_eq!(&folded[..row], &none[19 * row..], "sample {i}: first row = last row unflipped");
        let hflip = run(
            vec![rrc.clone(), op(OpSpec::RandomInvert { p: 0.0 }), TransformSpec::RandomHorizontalFlip { p: 1.0 }],
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
        op(OpSpec::RandomCrop {
            height: 32,
            width: 32,
            padding: [4; 4],
            pad_if_needed: false,
            fill: vec![0.0],
            mode: PadMode::Constant,
        }),
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
            &mut super::program::op_rng(k, 0),
            (32, 32, 3),
        )
        .unwrap();
        let super::ops::Drawn::Crop { top, left, .. } = d else { panic!("{d:?}") };
        let (top, left) = (top as i64 - 4, left as i64 - 4);
        let flipped = super::program::op_rng(k, 1).uniform() < 0.5;
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
    let e = err(vec![op(OpSpec::RandomInvert { p: 1.5 })]);
    assert!(e.contains("invalid p: 1.5 must be in [0, 1] (RandomInvert at transforms[0])"), "{e}");
    let e = err(vec![op(OpSpec::RandomInvert { p: 0.5 })]);
    assert!(e.contains("must fix the output size"), "{e}");
    let e = err(vec![
        TransformSpec::CenterCrop { height: 8, width: 8 },
        op(OpSpec::RandomInvert { p: 0.5 }),
        TransformSpec::CenterCrop { height: 4, width: 4 },
    ]);
    assert!(e.contains("CenterCrop at transforms[2] must come before the pixel ops"), "{e}");
    let e = err(vec![
        TransformSpec::CenterCrop { height: 8, width: 8 },
        op(OpSpec::RandomErasing {
            p: 0.5,
            scale: (0.02, 0.33),
            ratio: (0.3, 3.3),
            value: EraseValue::Values(vec![300.0]),
        }),
    ]);
    assert!(e.contains("invalid value: [300.0] must be in [0, 255]"), "{e}");
    let e = err(vec![
        TransformSpec::CenterCrop { height: 8, width: 8 },
        op(OpSpec::GaussianBlur { kx: 4, ky: 3, sigma: (0.1, 2.0) }),
    ]);
    assert!(e.contains("invalid kernel_size: (4, 3) must be odd"), "{e}");
}

#[test]
fn every_op_runs_on_gray_and_rgb_and_is_deterministic() {
    let all = vec![
        op(OpSpec::Pad { padding: [1, 2, 3, 4], fill: vec![10.0, 20.0, 30.0], mode: PadMode::Constant }),
        op(OpSpec::Pad { padding: [2, 2, 2, 2], fill: vec![0.0], mode: PadMode::Reflect }),
        op(OpSpec::RandomCrop {
            height: 30,
            width: 30,
            padding: [0; 4],
            pad_if_needed: true,
            fill: vec![0.0],
            mode: PadMode::Edge,
        }),
        op(OpSpec::VerticalFlip { p: 0.5 }),
        op(OpSpec::ColorJitter {
            brightness: Some((0.6, 1.4)),
            contrast: Some((0.6, 1.4)),
            saturation: Some((0.6, 1.4)),
            hue: Some((-0.1, 0.1)),
        }),
        op(OpSpec::RandomGrayscale { p: 0.5 }),
        op(OpSpec::GaussianBlur { kx: 5, ky: 3, sigma: (0.1, 2.0) }),
        op(OpSpec::GaussianNoise { mean: 0.0, sigma: 0.1, clip: true }),
        op(OpSpec::RandomErasing { p: 1.0, scale: (0.02, 0.33), ratio: (0.3, 3.3), value: EraseValue::Random }),
        op(OpSpec::RandomAutocontrast { p: 0.5 }),
        op(OpSpec::RandomEqualize { p: 0.5 }),
        op(OpSpec::RandomSolarize { threshold: 128.0, p: 0.5 }),
        op(OpSpec::RandomPosterize { bits: 3, p: 0.5 }),
        op(OpSpec::RandomAdjustSharpness { sharpness_factor: 2.0, p: 0.5 }),
        op(OpSpec::RandomInvert { p: 0.5 }),
        op(OpSpec::Grayscale { num_output_channels: 3 }),
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
