//! augment tests: torchvision semantics, Pillow exactness against an independent reference, determinism, dtypes and
//! layouts, steady-state memory; plus an `#[ignore]`d throughput report.

use std::path::PathBuf;

use super::geometry::{center_crop_start, resize_shorter, rrc_params};
use super::*;
use crate::decode::Decoder;
use crate::error::ImageErrorKind;
use crate::rng;

use crate::test_data::data_dir;

/// Files of the ImageNet sample (sorted), at most `n`.
fn imagenet(n: usize) -> Vec<PathBuf> {
    let Some(root) = data_dir("imagenet-sample") else {
        return Vec::new();
    };
    let mut v = Vec::new();
    let mut classes: Vec<_> =
        std::fs::read_dir(root).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    classes.sort();
    for c in classes {
        let mut files: Vec<_> = std::fs::read_dir(c).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        v.extend(files);
    }
    v.truncate(n);
    v
}

fn edge_files() -> Vec<PathBuf> {
    let Some(d) = data_dir("edge-cases") else {
        return Vec::new();
    };
    let mut v: Vec<_> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

const U8_NHWC: OutputSpec = OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, normalize: None, pad_to: None };
const IMAGENET_NORM: Normalize = Normalize { mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225] };
/// `trdata.MNIST_NORM` as the core holds it for gray output (one value, on every channel).
const MNIST_NORM: Normalize = Normalize { mean: [0.1307; 3], std: [0.3081; 3] };
/// DCT scaling that never scales: no M/8 < 8 keeps a crop `f64::MAX` times the output size, so every sample
/// decodes at full size (bit-exact with Pillow, slowest) — the references below are full-size decodes.
const FULL_SIZE: DctScaling = DctScaling::MinRatio(f64::MAX);

fn key(index: u64) -> SampleKey {
    SampleKey { seed: 42, epoch: 3, index }
}

fn run(
    p: &SamplePipeline,
    s: &mut WorkerScratch,
    bytes: &[u8],
    k: SampleKey,
) -> std::result::Result<Vec<u8>, ImageError> {
    let mut dst = vec![0xAB; p.sample_bytes()];
    p.process(s, bytes, k, &mut dst)?;
    Ok(dst)
}

fn rrc(h: u32, w: u32) -> TransformSpec {
    TransformSpec::RandomResizedCrop { height: h, width: w, scale: default::RRC_SCALE, ratio: default::RRC_RATIO }
}
fn center(h: u32, w: u32) -> TransformSpec {
    TransformSpec::CenterCrop { height: h, width: w }
}
fn flip(p: f64) -> TransformSpec {
    TransformSpec::RandomHorizontalFlip { p }
}

// ---------------------------------------------------------------------------------------------------------------
// An independent, literal reference: torchvision ops applied one after the other to a whole RGB8 image, with
// Pillow's resize written out the straightforward way (f64 weights → 22-bit ints, 8-bit intermediate).

#[derive(Clone)]
struct Img {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Img {
    fn at(&self, x: usize, y: usize, c: usize) -> u8 {
        self.px[3 * (y * self.w + x) + c]
    }
    fn flipped(&self) -> Img {
        let mut px = vec![0; self.px.len()];
        for y in 0..self.h {
            for x in 0..self.w {
                for c in 0..3 {
                    px[3 * (y * self.w + x) + c] = self.at(self.w - 1 - x, y, c);
                }
            }
        }
        Img { px, ..*self }
    }
    /// torchvision crop with zero padding where the window leaves the image.
    fn crop(&self, top: i64, left: i64, h: usize, w: usize) -> Img {
        let mut px = vec![0; 3 * h * w];
        for y in 0..h {
            for x in 0..w {
                let (sx, sy) = (left + x as i64, top + y as i64);
                if sx >= 0 && sy >= 0 && (sx as usize) < self.w && (sy as usize) < self.h {
                    for c in 0..3 {
                        px[3 * (y * w + x) + c] = self.at(sx as usize, sy as usize, c);
                    }
                }
            }
        }
        Img { w, h, px }
    }
    fn center_crop(&self, h: usize, w: usize) -> Img {
        self.crop(center_crop_start(self.h as i64, h as i64), center_crop_start(self.w as i64, w as i64), h, w)
    }
}

fn pillow_coeffs(in_size: usize, out_size: usize) -> Vec<(usize, Vec<i64>)> {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filterscale;
    (0..out_size)
        .map(|xx| {
            let center = (xx as f64 + 0.5) * scale;
            let xmin = ((center - support + 0.5) as i64).max(0);
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64);
            let w: Vec<f64> = (xmin..xmax)
                .map(|x| {
                    let t = ((x as f64 - center + 0.5) / filterscale).abs();
                    if t < 1.0 { 1.0 - t } else { 0.0 }
                })
                .collect();
            let ww: f64 = w.iter().sum();
            (xmin as usize, w.iter().map(|v| (0.5 + v / ww * f64::from(1 << 22)) as i64).collect())
        })
        .collect()
}

fn resize_h(img: &Img, ow: usize) -> Img {
    let k = pillow_coeffs(img.w, ow);
    let mut px = vec![0; 3 * ow * img.h];
    for y in 0..img.h {
        for (x, (x0, ws)) in k.iter().enumerate() {
            for c in 0..3 {
                let s: i64 =
                    (1 << 21) + ws.iter().enumerate().map(|(t, w)| i64::from(img.at(x0 + t, y, c)) * w).sum::<i64>();
                px[3 * (y * ow + x) + c] = (s >> 22).clamp(0, 255) as u8;
            }
        }
    }
    Img { w: ow, h: img.h, px }
}

fn resize_v(img: &Img, oh: usize) -> Img {
    let k = pillow_coeffs(img.h, oh);
    let mut px = vec![0; 3 * img.w * oh];
    for (y, (y0, ws)) in k.iter().enumerate() {
        for x in 0..img.w {
            for c in 0..3 {
                let s: i64 =
                    (1 << 21) + ws.iter().enumerate().map(|(t, w)| i64::from(img.at(x, y0 + t, c)) * w).sum::<i64>();
                px[3 * (y * img.w + x) + c] = (s >> 22).clamp(0, 255) as u8;
            }
        }
    }
    Img { w: img.w, h: oh, px }
}

/// Pillow 13 `img.resize((ow, oh), BILINEAR)`.
fn pillow_resize(img: &Img, ow: usize, oh: usize) -> Img {
    let vfirst = geometry::pillow_vertical_first(img.w as i64, img.h as i64, ow as i64, oh as i64);
    if vfirst { resize_h(&resize_v(img, oh), ow) } else { resize_v(&resize_h(img, ow), oh) }
}

/// Whole-image decode, `None` for files that do not decode.
fn decode(bytes: &[u8]) -> Option<Img> {
    let mut d = Decoder::new().unwrap();
    let mut px = Vec::new();
    let (w, h) = d.decode_full_rgb(bytes, &mut px).ok()?;
    Some(Img { w: w as usize, h: h as usize, px })
}

fn max_abs_diff(a: &[u8], b: &[u8]) -> u8 {
    a.iter().zip(b).map(|(x, y)| x.abs_diff(*y)).max().unwrap_or(0)
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let mse = a.iter().zip(b).map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2)).sum::<f64>() / a.len() as f64;
    if mse == 0.0 { 99.0 } else { 10.0 * (255.0f64 * 255.0 / mse).log10() }
}

fn png_bytes(img: &Img) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = png::Encoder::new(&mut out, img.w as u32, img.h as u32);
    e.set_color(png::ColorType::Rgb);
    e.set_depth(png::BitDepth::Eight);
    let mut w = e.write_header().unwrap();
    w.write_image_data(&img.px).unwrap();
    drop(w);
    out
}

/// A smooth-plus-texture synthetic image (so that ±1 rounding differences would show).
fn synthetic(w: usize, h: usize, seed: u32) -> Img {
    let mut px = Vec::with_capacity(3 * w * h);
    let mut r = rng::SampleRng::new(u64::from(seed), 0, 0, 0);
    for y in 0..h {
        for x in 0..w {
            let base = (x * 255 / w.max(1)) as u32 + (y * 97 / h.max(1)) as u32;
            for c in 0..3u32 {
                px.push(((base + c * 40 + (r.next_u32() % 23)) % 256) as u8);
            }
        }
    }
    Img { w, h, px }
}

// ---------------------------------------------------------------------------------------------------------------

#[test]
fn deterministic_pipelines_equal_pillow_reference_bit_exactly() {
    type Reference = fn(&Img) -> Img;
    let cases: Vec<(Vec<TransformSpec>, Reference)> = vec![
        (vec![TransformSpec::ResizeShorter { shorter: 256 }, center(224, 224)], |i| {
            let (rw, rh) = resize_shorter(i.w as u32, i.h as u32, 256);
            pillow_resize(i, rw as usize, rh as usize).center_crop(224, 224)
        }),
        (vec![TransformSpec::ResizeShorter { shorter: 96 }, flip(1.0), center(80, 90)], |i| {
            let (rw, rh) = resize_shorter(i.w as u32, i.h as u32, 96);
            pillow_resize(i, rw as usize, rh as usize).flipped().center_crop(80, 90)
        }),
        (vec![TransformSpec::ResizeExact { height: 100, width: 150 }], |i| pillow_resize(i, 150, 100)),
        (vec![TransformSpec::ResizeExact { height: 61, width: 64 }, center(80, 67), flip(1.0)], |i| {
            pillow_resize(i, 64, 61).center_crop(80, 67).flipped()
        }),
        (vec![center(99, 101)], |i| i.center_crop(99, 101)),
        (vec![flip(1.0), center(99, 101)], |i| i.flipped().center_crop(99, 101)),
        (vec![center(300, 333)], |i| i.center_crop(300, 333)),
    ];
    let mut files = edge_files();
    files.extend(imagenet(40));
    if files.is_empty() {
        return;
    }
    let mut s = WorkerScratch::new().unwrap();
    let mut checked = 0;
    for (transforms, reference) in &cases {
        let p = SamplePipeline::new(transforms.clone(), U8_NHWC).unwrap().with_dct_scaling(FULL_SIZE).unwrap();
        for f in &files {
            let bytes = std::fs::read(f).unwrap();
            let Some(img) = decode(&bytes) else { continue };
            let want = reference(&img);
            let got = run(&p, &mut s, &bytes, key(0)).unwrap();
            assert!(got == want.px, "{transforms:?} on {}: max |diff| {}", f.display(), max_abs_diff(&got, &want.px));
            checked += 1;
        }
    }
    assert!(checked > 300, "{checked}");
}

#[test]
fn random_resized_crop_equals_reference_within_rounding() {
    let files: Vec<_> = edge_files().into_iter().chain(imagenet(20)).collect();
    let mut s = WorkerScratch::new().unwrap();
    let mut d = Decoder::new().unwrap();
    let p = SamplePipeline::new(vec![rrc(64, 48), flip(0.5)], U8_NHWC).unwrap().with_dct_scaling(FULL_SIZE).unwrap();
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let Ok(info) = d.read_header(&bytes) else {
            continue;
        };
        if info.width * info.height > 4_000_000 {
            continue; // the literal reference is slow
        }
        let Some(img) = decode(&bytes) else { continue };
        for i in 0..4 {
            let k = key(i);
            let plan = p.plan(info.width, info.height, k);
            let (left, top) = (plan.x.lo, plan.y.lo);
            let (cw, ch) = ((plan.x.hi - plan.x.lo) as usize, (plan.y.hi - plan.y.lo) as usize);
            let mut want = pillow_resize(&img.crop(top, left, ch, cw), 48, 64);
            if plan.flip {
                want = want.flipped();
            }
            let got = run(&p, &mut s, &bytes, k).unwrap();
            // The pass order may differ from Pillow's for random crops (speed), which moves the 8-bit
            // intermediate's rounding by at most one.
            assert!(max_abs_diff(&got, &want.px) <= 1, "{}: key {i}", f.display());
        }
    }
}

#[test]
fn rrc_params_stay_inside_the_image_and_depend_only_on_the_key() {
    let sizes = [(1, 1), (2, 1), (1, 2), (284, 25), (25, 284), (500, 375), (4032, 3024), (5000, 10), (3, 7000)];
    let log = |r: (f64, f64)| (r.0.ln(), r.1.ln());
    for (scale, ratio) in [
        ((0.08, 1.0), (0.75, 4.0 / 3.0)),
        ((0.5, 0.5), (1.0, 1.0)),
        ((2.0, 3.0), (0.75, 1.33)),
        ((0.01, 1.0), (0.1, 10.0)),
    ] {
        for &(w, h) in &sizes {
            let mut distinct = std::collections::HashSet::new();
            for i in 0..300u64 {
                let k = SampleKey { seed: 9, epoch: i % 3, index: i };
                let (top, left, ch, cw) = rrc_params(w, h, scale, log(ratio), ratio, k);
                assert!(top >= 0 && left >= 0 && ch >= 1 && cw >= 1, "{w}x{h} {k:?}");
                assert!(top + ch <= i64::from(h) && left + cw <= i64::from(w), "{w}x{h} {k:?}: {top} {left} {ch} {cw}");
                assert_eq!((top, left, ch, cw), rrc_params(w, h, scale, log(ratio), ratio, k), "not deterministic");
                distinct.insert((top, left, ch, cw));
            }
            let aspect = f64::from(w.max(h)) / f64::from(w.min(h));
            if w * h >= 10_000 && aspect < 2.0 && scale.0 < scale.1 && scale.1 <= 1.0 {
                assert!(distinct.len() > 100, "{w}x{h}: only {} distinct crops", distinct.len());
            }
        }
    }
    // Scale > 1 never fits: torchvision's fallback is the central crop, clamped to the ratio range.
    let r43 = (0.75, 4.0 / 3.0);
    assert_eq!(rrc_params(500, 375, (2.0, 3.0), log(r43), r43, key(0)), (0, 0, 375, 500));
    let r = (0.75, 1.33);
    assert_eq!(rrc_params(500, 375, (2.0, 3.0), log(r), r, key(0)), (0, 0, 375, 499)); // round(498.75)
    assert_eq!(rrc_params(1000, 100, (2.0, 3.0), log(r), r, key(0)), (0, 433, 100, 133));
    assert_eq!(rrc_params(100, 1000, (2.0, 3.0), log(r), r, key(0)), (433, 0, 133, 100));
}

#[test]
fn torchvision_rounding_rules() {
    assert_eq!(resize_shorter(500, 375, 256), (341, 256));
    assert_eq!(resize_shorter(375, 500, 256), (256, 341));
    assert_eq!(resize_shorter(320, 685, 256), (256, 548));
    assert_eq!(resize_shorter(284, 25, 256), (2908, 256));
    // int(round(x / 2.0)) with Python's round-half-to-even.
    assert_eq!(center_crop_start(257, 224), 16); // 16.5 → 16
    assert_eq!(center_crop_start(259, 224), 18); // 17.5 → 18
    assert_eq!(center_crop_start(256, 224), 16);
    assert_eq!(center_crop_start(224, 224), 0);
    // Larger crop: zero padding of (crop - len) // 2 before the image.
    assert_eq!(center_crop_start(100, 224), -62);
    assert_eq!(center_crop_start(101, 224), -61);
}

#[test]
fn invalid_transform_lists_are_config_errors_naming_the_parameter() {
    let param = |t: Vec<TransformSpec>, o: OutputSpec| match SamplePipeline::new(t, o) {
        Err(TrdataError::Config { parameter, message }) => {
            assert!(!message.is_empty());
            parameter
        }
        other => panic!("expected a config error, got {other:?}"),
    };
    assert_eq!(param(vec![rrc(0, 224)], U8_NHWC), "size");
    assert_eq!(param(vec![TransformSpec::ResizeShorter { shorter: 0 }, center(1, 1)], U8_NHWC), "size");
    assert_eq!(param(vec![TransformSpec::ResizeExact { height: 5, width: 0 }], U8_NHWC), "size");
    assert_eq!(param(vec![center(224, 0)], U8_NHWC), "size");
    assert_eq!(param(vec![TransformSpec::ResizeShorter { shorter: 256 }], U8_NHWC), "transforms");
    assert_eq!(param(vec![], U8_NHWC), "transforms");
    assert_eq!(param(vec![flip(0.5)], U8_NHWC), "transforms");
    // Geometric ops after the folded ones run on the uint8 image (program.rs); only a size left open is refused.
    let late = SamplePipeline::new(vec![center(224, 224), TransformSpec::ResizeShorter { shorter: 256 }], U8_NHWC);
    assert_eq!(late.unwrap().output_hw(), (256, 256));
    assert_eq!(SamplePipeline::new(vec![rrc(224, 224), center(200, 200)], U8_NHWC).unwrap().output_hw(), (200, 200));
    let open = vec![TransformSpec::ResizeShorter { shorter: 256 }, TransformSpec::ResizeShorter { shorter: 128 }];
    assert_eq!(param(open, U8_NHWC), "transforms");
    assert_eq!(param(vec![rrc(224, 224), flip(1.5)], U8_NHWC), "p");
    let bad_scale = TransformSpec::RandomResizedCrop { height: 8, width: 8, scale: (0.5, 0.1), ratio: (1.0, 1.0) };
    assert_eq!(param(vec![bad_scale], U8_NHWC), "scale");
    let bad_ratio = TransformSpec::RandomResizedCrop { height: 8, width: 8, scale: (0.1, 0.5), ratio: (0.0, 1.0) };
    assert_eq!(param(vec![bad_ratio], U8_NHWC), "ratio");
    // scale is a fraction of the image area: above 1 the crop never fits (the binding refused it before the core
    // did; now the core's rule is the only one).
    let big_scale = TransformSpec::RandomResizedCrop { height: 8, width: 8, scale: (0.5, 1.5), ratio: (1.0, 1.0) };
    assert_eq!(param(vec![big_scale], U8_NHWC), "scale");
    assert_eq!(param(vec![center(65_537, 8)], U8_NHWC), "size");
    let e = SamplePipeline::new(vec![rrc(224, 224), flip(1.5)], U8_NHWC).unwrap_err().to_string();
    assert_eq!(e, "invalid p: 1.5 must be in [0, 1] (RandomHorizontalFlip at transforms[1])");
    let e = SamplePipeline::new(vec![center(0, 8)], U8_NHWC).unwrap_err().to_string();
    assert_eq!(e, "invalid size: (0, 8) must be in 1..=65536 (CenterCrop at transforms[0])");
    let u8_norm = OutputSpec { normalize: Some(IMAGENET_NORM), ..U8_NHWC };
    assert_eq!(param(vec![rrc(224, 224)], u8_norm), "normalize");
    let zero_std = OutputSpec {
        dtype: DType::F32,
        layout: Layout::Nchw,
        normalize: Some(Normalize { std: [1.0, 0.0, 1.0], ..IMAGENET_NORM }),
        pad_to: None,
    };
    assert_eq!(param(vec![rrc(224, 224)], zero_std), "normalize");
    let p = SamplePipeline::new(vec![rrc(224, 224)], U8_NHWC).unwrap();
    assert!(matches!(p.with_dct_scaling(DctScaling::MinRatio(0.0)), Err(TrdataError::Config { .. })));
}

#[test]
fn shapes_bytes_and_defaults() {
    let f16 = OutputSpec { dtype: DType::F16, layout: Layout::Nchw, normalize: Some(IMAGENET_NORM), pad_to: None };
    let p = SamplePipeline::new(vec![flip(0.5), rrc(224, 160)], f16).unwrap();
    assert_eq!(p.output_hw(), (224, 160));
    assert_eq!(p.sample_shape(), [3, 224, 160]);
    assert_eq!(p.sample_bytes(), 3 * 224 * 160 * 2);
    assert_eq!(p.output(), f16);
    assert_eq!(p.dct_scaling(), DctScaling::RANDOM_CROP_DEFAULT);
    let e = SamplePipeline::new(vec![TransformSpec::ResizeExact { height: 32, width: 48 }], U8_NHWC).unwrap();
    assert_eq!((e.output_hw(), e.sample_shape(), e.sample_bytes()), ((32, 48), [32, 48, 3], 32 * 48 * 3));
    assert_eq!(e.dct_scaling(), DctScaling::DETERMINISTIC_DEFAULT);
}

#[test]
fn dtypes_and_layouts_are_the_same_pixels() {
    let files = imagenet(8);
    let Some(f) = files.first() else { return };
    let bytes = std::fs::read(f).unwrap();
    let t = vec![rrc(40, 56), flip(0.5)];
    let mut s = WorkerScratch::new().unwrap();
    let base = run(&SamplePipeline::new(t.clone(), U8_NHWC).unwrap(), &mut s, &bytes, key(5)).unwrap();
    let (h, w) = (40, 56);
    let hwc = |y: usize, x: usize, c: usize| base[3 * (y * w + x) + c];
    let u8_chw = run(
        &SamplePipeline::new(t.clone(), OutputSpec { layout: Layout::Nchw, ..U8_NHWC }).unwrap(),
        &mut s,
        &bytes,
        key(5),
    )
    .unwrap();
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let idx = |y: usize, x: usize, c: usize| match layout {
            Layout::Nchw => (c * h + y) * w + x,
            Layout::Nhwc => 3 * (y * w + x) + c,
        };
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for normalize in [None, Some(IMAGENET_NORM)] {
                let spec = OutputSpec { dtype, layout, normalize, pad_to: None };
                let out = run(&SamplePipeline::new(t.clone(), spec).unwrap(), &mut s, &bytes, key(5)).unwrap();
                for y in 0..h {
                    for x in 0..w {
                        for c in 0..3 {
                            let v = f32::from(hwc(y, x, c)) / 255.0;
                            let v = normalize.map_or(v, |n| (v - n.mean[c]) / n.std[c]);
                            let i = idx(y, x, c);
                            let got_bits = match dtype {
                                DType::F32 => u32::from_ne_bytes(out[4 * i..4 * i + 4].try_into().unwrap()),
                                _ => u32::from(u16::from_ne_bytes(out[2 * i..2 * i + 2].try_into().unwrap())),
                            };
                            let want_bits = match dtype {
                                DType::F32 => v.to_bits(),
                                DType::F16 => u32::from(half::f16::from_f32(v).to_bits()),
                                _ => u32::from(half::bf16::from_f32(v).to_bits()),
                            };
                            assert_eq!(got_bits, want_bits, "{spec:?} at ({y},{x},{c})");
                        }
                        if layout == Layout::Nchw {
                            for c in 0..3 {
                                assert_eq!(u8_chw[(c * h + y) * w + x], hwc(y, x, c));
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn flip_mirrors_the_output_exactly() {
    let files = imagenet(6);
    if files.is_empty() {
        return;
    }
    let mut s = WorkerScratch::new().unwrap();
    for t in
        [vec![rrc(50, 37)], vec![TransformSpec::ResizeShorter { shorter: 64 }, center(48, 61)], vec![center(120, 97)]]
    {
        let plain = SamplePipeline::new(t.clone(), U8_NHWC).unwrap();
        let mut with_flip = t.clone();
        with_flip.push(flip(1.0));
        let flipped = SamplePipeline::new(with_flip, U8_NHWC).unwrap();
        let (h, w) = plain.output_hw();
        for f in &files {
            let bytes = std::fs::read(f).unwrap();
            let a = Img { w, h, px: run(&plain, &mut s, &bytes, key(1)).unwrap() };
            let b = run(&flipped, &mut s, &bytes, key(1)).unwrap();
            assert!(a.flipped().px == b, "{t:?} {}", f.display());
        }
    }
    // p = 0 never flips; p = 0.5 flips about half of the samples, depending on the key only.
    let p0 = SamplePipeline::new(vec![rrc(8, 8), flip(0.0)], U8_NHWC).unwrap();
    let p5 = SamplePipeline::new(vec![rrc(8, 8), flip(0.5)], U8_NHWC).unwrap();
    let n = (0..2000).filter(|&i| p5.plan(500, 375, key(i)).flip).count();
    assert!((900..1100).contains(&n), "{n}");
    assert!((0..200).all(|i| !p0.plan(500, 375, key(i)).flip));
    assert!((0..200).all(|i| p5.plan(500, 375, key(i)) == p5.plan(500, 375, key(i))));
}

#[test]
fn synthetic_padding_and_mirroring_follow_torchvision() {
    // A PNG whose mirror image is known exactly: flips before a crop mirror the crop window (odd margins show
    // it), CenterCrop larger than the image pads with zeros, Resize((h, w)) to the same size is the identity.
    let img = synthetic(37, 22, 1);
    let bytes = png_bytes(&img);
    let mut s = WorkerScratch::new().unwrap();
    let cases: Vec<(Vec<TransformSpec>, Img)> = vec![
        (vec![center(10, 14)], img.center_crop(10, 14)),
        (vec![flip(1.0), center(10, 14)], img.flipped().center_crop(10, 14)),
        (vec![center(10, 14), flip(1.0)], img.center_crop(10, 14).flipped()),
        (vec![flip(1.0), center(10, 14), flip(1.0)], img.flipped().center_crop(10, 14).flipped()),
        (vec![center(31, 50)], img.center_crop(31, 50)),
        (vec![flip(1.0), center(31, 50)], img.flipped().center_crop(31, 50)),
        (vec![TransformSpec::ResizeExact { height: 22, width: 37 }], img.clone()),
        (vec![TransformSpec::ResizeShorter { shorter: 22 }, center(22, 37)], img.clone()),
    ];
    for (t, want) in cases {
        let p = SamplePipeline::new(t.clone(), U8_NHWC).unwrap();
        assert!(run(&p, &mut s, &bytes, key(0)).unwrap() == want.px, "{t:?}");
    }
    // Padding is normalized zero, like torchvision's pad-then-Normalize.
    let f32n = OutputSpec { dtype: DType::F32, layout: Layout::Nchw, normalize: Some(IMAGENET_NORM), pad_to: None };
    let p = SamplePipeline::new(vec![center(40, 40)], f32n).unwrap();
    let out = run(&p, &mut s, &bytes, key(0)).unwrap();
    let v = f32::from_ne_bytes(out[0..4].try_into().unwrap());
    assert_eq!(v, (0.0 - 0.485) / 0.229);
}

#[test]
fn samples_depend_only_on_the_key() {
    let files = imagenet(12);
    if files.is_empty() {
        return;
    }
    let spec = OutputSpec { dtype: DType::BF16, layout: Layout::Nchw, normalize: Some(IMAGENET_NORM), pad_to: None };
    let p = SamplePipeline::new(vec![rrc(96, 96), flip(0.5)], spec).unwrap();
    let mut fresh_each = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let mut s = WorkerScratch::new().unwrap();
        fresh_each.push(run(&p, &mut s, &std::fs::read(f).unwrap(), key(i as u64)).unwrap());
    }
    // One long-lived scratch, files in reverse order, interleaved with other work.
    let mut s = WorkerScratch::new().unwrap();
    let other =
        SamplePipeline::new(vec![TransformSpec::ResizeShorter { shorter: 300 }, center(250, 250)], U8_NHWC).unwrap();
    for (i, f) in files.iter().enumerate().rev() {
        let b = std::fs::read(f).unwrap();
        let _ = run(&other, &mut s, &b, key(99)).unwrap();
        assert!(run(&p, &mut s, &b, key(i as u64)).unwrap() == fresh_each[i], "{}", f.display());
        let next_epoch = run(&p, &mut s, &b, SampleKey { epoch: 4, ..key(i as u64) }).unwrap();
        assert!(next_epoch != fresh_each[i], "another epoch draws another crop");
    }
}

#[test]
fn every_edge_case_goes_through_the_pipelines_or_fails_typed() {
    let files = edge_files();
    let mut s = WorkerScratch::new().unwrap();
    let f16 = OutputSpec { dtype: DType::F16, layout: Layout::Nchw, normalize: Some(IMAGENET_NORM), pad_to: None };
    let pipes = [
        SamplePipeline::new(vec![rrc(224, 224), flip(0.5)], f16).unwrap(),
        SamplePipeline::new(vec![TransformSpec::ResizeShorter { shorter: 256 }, center(224, 224)], U8_NHWC).unwrap(),
        SamplePipeline::new(vec![center(224, 224)], f16).unwrap(),
    ];
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy();
        for p in &pipes {
            for i in 0..3 {
                match p.process(&mut s, &bytes, key(i), &mut vec![0; p.sample_bytes()]) {
                    Ok(_) => {}
                    Err(e) => {
                        let ok = match e.kind {
                            ImageErrorKind::UnknownFormat => name == "README.txt",
                            ImageErrorKind::Corrupt => name.starts_with("truncated_"),
                            _ => false,
                        };
                        assert!(ok, "{name}: unexpected {e}");
                    }
                }
            }
        }
    }
}

#[test]
fn failed_samples_leave_dst_untouched() {
    let p = SamplePipeline::new(vec![rrc(8, 8)], U8_NHWC).unwrap();
    let mut s = WorkerScratch::new().unwrap();
    let mut dst = vec![7u8; p.sample_bytes()];
    assert_eq!(p.process(&mut s, b"", key(0), &mut dst).unwrap_err().kind, ImageErrorKind::Empty);
    assert_eq!(
        p.process(&mut s, b"\xff\xd8\xff\xdb junk", key(0), &mut dst).unwrap_err().kind,
        ImageErrorKind::Corrupt
    );
    assert!(dst.iter().all(|&v| v == 7));
    let mut small =
        WorkerScratch::with_limits(crate::decode::DecodeLimits { max_pixels: 10, ..Default::default() }).unwrap();
    let png = png_bytes(&synthetic(4, 3, 0));
    assert_eq!(p.process(&mut small, &png, key(0), &mut dst).unwrap_err().kind, ImageErrorKind::TooLarge);
}

#[test]
fn scratch_stops_growing_in_steady_state() {
    let files: Vec<Vec<u8>> = imagenet(60).iter().map(|f| std::fs::read(f).unwrap()).collect();
    if files.is_empty() {
        return;
    }
    let spec = OutputSpec { dtype: DType::F16, layout: Layout::Nchw, normalize: Some(IMAGENET_NORM), pad_to: None };
    let p = SamplePipeline::new(vec![rrc(224, 224), flip(0.5)], spec).unwrap();
    let mut s = WorkerScratch::new().unwrap();
    let mut dst = vec![0; p.sample_bytes()];
    let gray_spec = OutputSpec { normalize: Some(MNIST_NORM), ..spec };
    let gray = SamplePipeline::with_channels(vec![rrc(224, 224), flip(0.5)], gray_spec, Channels::Gray).unwrap();
    let mut gray_dst = vec![0; gray.sample_bytes()];
    let caps = |s: &WorkerScratch| {
        let r = &s.resample;
        let v = (r.inter.capacity(), r.wide.capacity(), r.row.capacity(), r.window.capacity());
        (v, r.x.k.capacity(), r.y.k.capacity())
    };
    for (i, f) in files.iter().enumerate() {
        p.process(&mut s, f, key(i as u64), &mut dst).unwrap();
        gray.process(&mut s, f, key(i as u64), &mut gray_dst).unwrap();
    }
    let warm = caps(&s);
    for (i, f) in files.iter().enumerate() {
        p.process(&mut s, f, key(i as u64), &mut dst).unwrap();
        gray.process(&mut s, f, key(i as u64), &mut gray_dst).unwrap();
    }
    assert_eq!(caps(&s), warm, "same samples again must not grow any buffer");
}

/// Pillow parity proxy on the whole ImageNet sample: the default eval pipeline (DCT scaling kept ≥ 2× the output)
/// against the full-size decode, which equals Pillow bit for bit (tests above and tests/test_pillow_parity.py).
#[test]
fn eval_dct_scaling_stays_above_35_db_on_the_imagenet_sample() {
    let files = imagenet(usize::MAX);
    if files.is_empty() {
        return;
    }
    let t = vec![TransformSpec::ResizeShorter { shorter: 256 }, center(224, 224)];
    let fast = SamplePipeline::new(t.clone(), U8_NHWC).unwrap();
    let exact = SamplePipeline::new(t, U8_NHWC).unwrap().with_dct_scaling(FULL_SIZE).unwrap();
    let mut s = WorkerScratch::new().unwrap();
    let mut worst = (99.0f64, PathBuf::new());
    for f in &files {
        let b = std::fs::read(f).unwrap();
        let q = psnr(&run(&fast, &mut s, &b, key(0)).unwrap(), &run(&exact, &mut s, &b, key(0)).unwrap());
        if q < worst.0 {
            worst = (q, f.clone());
        }
    }
    eprintln!("eval, default DCT scaling vs exact: worst {:.2} dB ({})", worst.0, worst.1.display());
    assert!(worst.0 >= 35.0, "{:.2} dB on {}", worst.0, worst.1.display());
}

/// The AVX2 copy of the resample kernels (`simd`) writes exactly the bytes of the baseline copy, for every dtype,
/// layout, pass order and DCT scale. Skipped (passes trivially) on CPUs without AVX2.
#[test]
fn simd_paths_are_bit_identical() {
    let best = super::simd::Simd::available();
    if best == super::simd::Simd::Baseline {
        eprintln!("NOTE: no AVX2 path on this CPU; test skipped");
        return;
    }
    let files: Vec<_> = edge_files().into_iter().chain(imagenet(24)).collect();
    let transforms = [
        vec![rrc(224, 224), flip(0.5)],
        vec![rrc(37, 61), flip(0.5)],
        vec![TransformSpec::ResizeShorter { shorter: 256 }, center(224, 224)],
        vec![TransformSpec::ResizeShorter { shorter: 73 }, center(64, 45)],
    ];
    let mut s = WorkerScratch::new().unwrap();
    let mut checked = 0;
    for t in &transforms {
        for dct in [None, Some(FULL_SIZE)] {
            for layout in [Layout::Nchw, Layout::Nhwc] {
                for (dtype, normalize) in [
                    (DType::U8, None),
                    (DType::F16, Some(IMAGENET_NORM)),
                    (DType::F32, Some(IMAGENET_NORM)),
                    (DType::BF16, None),
                ] {
                    let spec = OutputSpec { dtype, layout, normalize, pad_to: None };
                    let mut p = SamplePipeline::new(t.clone(), spec).unwrap();
                    if let Some(d) = dct {
                        p = p.with_dct_scaling(d).unwrap();
                    }
                    let base = p.clone().with_simd(super::simd::Simd::Baseline);
                    let fast = p.with_simd(best);
                    for (i, f) in files.iter().enumerate() {
                        let bytes = std::fs::read(f).unwrap();
                        let k = key(i as u64);
                        let a = run(&base, &mut s, &bytes, k);
                        let b = run(&fast, &mut s, &bytes, k);
                        match (a, b) {
                            (Ok(a), Ok(b)) => {
                                assert!(a == b, "{} {t:?} {spec:?} dct {dct:?}: paths differ", f.display());
                                checked += 1;
                            }
                            (Err(a), Err(b)) => assert_eq!(a.kind, b.kind),
                            (a, b) => panic!("{}: {a:?} vs {b:?}", f.display()),
                        }
                    }
                }
            }
        }
    }
    // Gray output (RGB sources converted to luma on the way in): one layout (they are the same bytes), u8 and a
    // normalized float.
    for t in &transforms {
        for dct in [None, Some(FULL_SIZE)] {
            for (dtype, normalize) in [(DType::U8, None), (DType::F32, Some(MNIST_NORM))] {
                let spec = OutputSpec { dtype, layout: Layout::Nchw, normalize, pad_to: None };
                let mut p = SamplePipeline::with_channels(t.clone(), spec, Channels::Gray).unwrap();
                if let Some(d) = dct {
                    p = p.with_dct_scaling(d).unwrap();
                }
                let base = p.clone().with_simd(super::simd::Simd::Baseline);
                let fast = p.with_simd(best);
                for (i, f) in files.iter().enumerate() {
                    let bytes = std::fs::read(f).unwrap();
                    match (run(&base, &mut s, &bytes, key(i as u64)), run(&fast, &mut s, &bytes, key(i as u64))) {
                        (Ok(a), Ok(b)) => {
                            assert!(a == b, "{} {t:?} gray {spec:?} dct {dct:?}: paths differ", f.display());
                            checked += 1;
                        }
                        (Err(a), Err(b)) => assert_eq!(a.kind, b.kind),
                        (a, b) => panic!("{}: {a:?} vs {b:?}", f.display()),
                    }
                }
            }
        }
    }
    eprintln!("{checked} samples identical on both paths");
}

/// Per-thread throughput on the ImageNet sample (`cargo test --release --lib augment::tests::throughput -- --ignored
/// --nocapture`): (a) full decode, (b) the whole pipeline RandomResizedCrop(224) + flip + normalize → f16 NCHW,
/// (c) eval Resize(256) + CenterCrop(224) → f16 NCHW; (b) and (c) split their time into decode (header, geometry,
/// taps and the ROI + DCT-scaled decode of the crop, as `process` times it) and resample/write.
#[test]
#[ignore = "timing report, not a test; run with --ignored --nocapture"]
fn throughput() {
    use std::time::Instant;
    let files: Vec<Vec<u8>> = imagenet(usize::MAX).iter().map(|f| std::fs::read(f).unwrap()).collect();
    if files.is_empty() {
        return;
    }
    let reps = 3;
    let n = (reps * files.len()) as f64;
    let mut s = WorkerScratch::new().unwrap();
    let mut out = Vec::new();
    let spec = OutputSpec { dtype: DType::F16, layout: Layout::Nchw, normalize: Some(IMAGENET_NORM), pad_to: None };
    let train = SamplePipeline::new(vec![rrc(224, 224), flip(0.5)], spec).unwrap();
    let eval =
        SamplePipeline::new(vec![TransformSpec::ResizeShorter { shorter: 256 }, center(224, 224)], spec).unwrap();
    let mut dst = vec![0; train.sample_bytes()];
    // Warm up (page cache, scratch growth).
    for (i, f) in files.iter().enumerate() {
        train.process(&mut s, f, key(i as u64), &mut dst).unwrap();
    }
    let t = Instant::now();
    for _ in 0..reps {
        for f in &files {
            s.decoder().decode_full_rgb(f, &mut out).unwrap();
        }
    }
    let a = n / t.elapsed().as_secs_f64();
    let mut timing = |p: &SamplePipeline| {
        let (mut dec, mut aug) = (0u64, 0u64);
        let t = Instant::now();
        for r in 0..reps {
            for (i, f) in files.iter().enumerate() {
                let tm =
                    p.process(&mut s, f, SampleKey { seed: 1, epoch: r as u64, index: i as u64 }, &mut dst).unwrap();
                dec += tm.decode_ns;
                aug += tm.augment_ns;
            }
        }
        (n / t.elapsed().as_secs_f64(), dec as f64 / n / 1e3, aug as f64 / n / 1e3)
    };
    let b = timing(&train);
    let c = timing(&eval);
    let gray_spec = OutputSpec { normalize: Some(MNIST_NORM), ..spec };
    let gray = SamplePipeline::with_channels(vec![rrc(224, 224), flip(0.5)], gray_spec, Channels::Gray).unwrap();
    let mut gray_dst = vec![0; gray.sample_bytes()];
    let d = {
        let (mut dec, mut aug) = (0u64, 0u64);
        let t = Instant::now();
        for r in 0..reps {
            for (i, f) in files.iter().enumerate() {
                let k = SampleKey { seed: 1, epoch: r as u64, index: i as u64 };
                let tm = gray.process(&mut s, f, k, &mut gray_dst).unwrap();
                dec += tm.decode_ns;
                aug += tm.augment_ns;
            }
        }
        (n / t.elapsed().as_secs_f64(), dec as f64 / n / 1e3, aug as f64 / n / 1e3)
    };
    eprintln!(
        "per-thread throughput on {} ImageNet-sample JPEGs x {reps} (resample path {:?}):",
        files.len(),
        super::simd::Simd::detect()
    );
    eprintln!("  (a) full decode (decode_full_rgb)             {a:8.1} img/s");
    eprintln!(
        "  (b) RRC224+flip+normalize -> f16 NCHW         {:8.1} img/s  (decode {:.0} us + resample/write {:.0} us)",
        b.0, b.1, b.2
    );
    eprintln!(
        "  (c) Resize256+CenterCrop224 -> f16 NCHW       {:8.1} img/s  (decode {:.0} us + resample/write {:.0} us)",
        c.0, c.1, c.2
    );
    eprintln!(
        "  (d) as (b), channels=1 (luma) -> f16          {:8.1} img/s  (decode {:.0} us + luma/resample {:.0} us)",
        d.0, d.1, d.2
    );
}

/// Kernel timings in isolation (min of several runs, robust to a busy machine): one 350×350 → 224×224 sample.
#[test]
#[ignore = "timing report, not a test; run with --ignored --nocapture"]
fn kernel_timing() {
    use super::geometry::Axis;
    use super::resample::{AxisCoeffs, OutputLut, horizontal_row, horizontal_row_wide, vertical, write_row};
    use std::time::Instant;
    let (cin, out) = (350usize, 224usize);
    let axis = Axis {
        out_n: out,
        start: 0,
        resized: out as i64,
        scale: cin as f64 / out as f64,
        lo: 0,
        hi: cin as i64,
        resample: Default::default(),
    };
    let (mut x, mut y) = (AxisCoeffs::default(), AxisCoeffs::default());
    x.compute(&axis, 8, cin as u32, cin as u32, false);
    y.compute(&axis, 8, cin as u32, cin as u32, false);
    let img = synthetic(cin, cin, 3).px;
    let spec = OutputSpec { dtype: DType::F16, layout: Layout::Nchw, normalize: Some(IMAGENET_NORM), pad_to: None };
    let lut = OutputLut::new(&spec);
    let mut dst = vec![0u8; 3 * out * out * 2];
    let (mut vline, mut row) = (vec![0u8; 3 * cin], vec![0u8; 3 * out]);
    let best = |f: &mut dyn FnMut()| {
        (0..7)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..20 {
                    f();
                }
                t.elapsed().as_secs_f64() / 20.0 * 1e6
            })
            .fold(f64::MAX, f64::min)
    };
    let v = best(&mut || {
        for i in 0..out {
            vertical(&img, y.start[i] as usize * 3 * cin, 3 * cin, &y.k[i * y.taps..(i + 1) * y.taps], &mut vline);
        }
    });
    let h = best(&mut || {
        for _ in 0..out {
            horizontal_row::<3>(&vline, &x, &mut row);
        }
    });
    let mut wide = vec![0u32; 3 * cin];
    let vw = best(&mut || {
        for i in 0..out {
            vertical(&img, y.start[i] as usize * 3 * cin, 3 * cin, &y.k[i * y.taps..(i + 1) * y.taps], &mut wide);
        }
    });
    let mut row2 = vec![0u8; 3 * out];
    let hw = best(&mut || {
        for _ in 0..out {
            horizontal_row_wide::<3>(&wide, &x, &mut row2);
        }
    });
    assert_eq!(row, row2, "both horizontal kernels give the same bytes");
    let w = best(&mut || {
        for i in 0..out {
            write_row::<3>(&lut, Layout::Nchw, &row, i, out, &mut dst);
        }
    });
    eprintln!(
        "{cin}->{out}, taps {}x{}: vertical {v:.0} us (u32 out {vw:.0} us), horizontal {h:.0} us (wide {hw:.0} us), \
         f16 NCHW write {w:.0} us",
        x.taps, y.taps
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Channels: gray output (Pillow's convert("L") of the crop window, then the same resampling), gray sources.

/// Pillow's `convert("L")` of a whole RGB image, written from libImaging/Convert.c's `L24` macro.
fn luma(img: &Img) -> Vec<u8> {
    img.px
        .chunks_exact(3)
        .map(|p| ((19595 * u32::from(p[0]) + 38470 * u32::from(p[1]) + 7471 * u32::from(p[2]) + 32768) >> 16) as u8)
        .collect()
}

/// A gray image as RGB with three equal channels (resampling it resamples the gray image, channel by channel).
fn widened(gray: &[u8], w: usize, h: usize) -> Img {
    Img { w, h, px: gray.iter().flat_map(|&v| [v, v, v]).collect() }
}

/// Channel 0 of an interleaved RGB image.
fn channel0(img: &Img) -> Vec<u8> {
    img.px.chunks_exact(3).map(|p| p[0]).collect()
}

fn gray_pipeline(t: Vec<TransformSpec>, o: OutputSpec) -> SamplePipeline {
    SamplePipeline::with_channels(t, o, Channels::Gray).unwrap()
}

/// Gray output equals torchvision's `[Grayscale(), Resize(…), CenterCrop(…)]` on Pillow — `convert("L")`, then
/// the resize and crops on the L image — bit for bit at full-size decode, on real files (JPEG 4:2:0/4:4:4, gray,
/// CMYK, PNG with alpha, …) and on a synthetic PNG (so the test never depends on ../shared alone).
#[test]
fn gray_output_equals_pillow_convert_l_then_resize_bit_exactly() {
    type Reference = fn(&Img) -> Img;
    let cases: Vec<(Vec<TransformSpec>, Reference)> = vec![
        (vec![TransformSpec::ResizeShorter { shorter: 96 }, center(80, 90)], |i| {
            let (rw, rh) = resize_shorter(i.w as u32, i.h as u32, 96);
            pillow_resize(i, rw as usize, rh as usize).center_crop(80, 90)
        }),
        (vec![TransformSpec::ResizeExact { height: 61, width: 64 }, center(80, 67), flip(1.0)], |i| {
            pillow_resize(i, 64, 61).center_crop(80, 67).flipped()
        }),
        (vec![TransformSpec::ResizeExact { height: 300, width: 20 }], |i| pillow_resize(i, 20, 300)),
        (vec![flip(1.0), center(99, 101)], |i| i.flipped().center_crop(99, 101)),
    ];
    let mut files: Vec<Vec<u8>> =
        edge_files().into_iter().chain(imagenet(12)).map(|f| std::fs::read(f).unwrap()).collect();
    files.push(png_bytes(&synthetic(173, 131, 4)));
    let mut s = WorkerScratch::new().unwrap();
    let mut checked = 0;
    for (transforms, reference) in &cases {
        let p = gray_pipeline(transforms.clone(), U8_NHWC).with_dct_scaling(FULL_SIZE).unwrap();
        assert_eq!(p.sample_bytes(), p.output_hw().0 * p.output_hw().1);
        for bytes in &files {
            let Some(img) = decode(bytes) else { continue };
            let want = channel0(&reference(&widened(&luma(&img), img.w, img.h)));
            let got = run(&p, &mut s, bytes, key(0)).unwrap();
            assert!(got == want, "{transforms:?}: max |diff| {}", max_abs_diff(&got, &want));
            checked += 1;
        }
    }
    assert!(checked >= 4 * 20 || edge_files().is_empty(), "{checked}");
}

/// Random crops in gray: the luma of the crop window, resampled, within the ±1 of the pass order (as RGB); and
/// torchvision's other order, resize RGB then `convert("L")`, within ±2 of it.
#[test]
fn gray_random_crops_equal_the_reference_within_rounding() {
    let mut files: Vec<Vec<u8>> = imagenet(10).iter().map(|f| std::fs::read(f).unwrap()).collect();
    files.push(png_bytes(&synthetic(211, 157, 9)));
    let mut s = WorkerScratch::new().unwrap();
    let mut d = Decoder::new().unwrap();
    let t = vec![rrc(64, 48), flip(0.5)];
    let gray = gray_pipeline(t.clone(), U8_NHWC).with_dct_scaling(FULL_SIZE).unwrap();
    let rgb = SamplePipeline::new(t, U8_NHWC).unwrap().with_dct_scaling(FULL_SIZE).unwrap();
    for bytes in &files {
        let info = d.read_header(bytes).unwrap();
        let img = decode(bytes).unwrap();
        let l = widened(&luma(&img), img.w, img.h);
        for i in 0..4 {
            let k = key(i);
            let plan = gray.plan(info.width, info.height, k);
            assert_eq!(plan, rgb.plan(info.width, info.height, k), "channels never change the geometry");
            let (left, top) = (plan.x.lo, plan.y.lo);
            let (cw, ch) = ((plan.x.hi - plan.x.lo) as usize, (plan.y.hi - plan.y.lo) as usize);
            let mut want = pillow_resize(&l.crop(top, left, ch, cw), 48, 64);
            if plan.flip {
                want = want.flipped();
            }
            let got = run(&gray, &mut s, bytes, k).unwrap();
            assert!(max_abs_diff(&got, &channel0(&want)) <= 1, "key {i}");
            let rgb_then_l = luma(&Img { w: 48, h: 64, px: run(&rgb, &mut s, bytes, k).unwrap() });
            assert!(max_abs_diff(&got, &rgb_then_l) <= 2, "key {i}");
        }
    }
}

/// Raw pixels (`trdata.Arrays`): a gray array passes through unchanged for gray output and is widened for RGB
/// output; an RGB array converts as its PNG does (the file path and the raw path give the same bytes).
#[test]
fn gray_and_rgb_pixel_arrays_follow_the_file_path() {
    use crate::source::PixelArray;
    let (w, h) = (45usize, 37usize);
    let rgb_img = synthetic(w, h, 2);
    let gray_px = luma(&synthetic(w, h, 5));
    let gray = PixelArray { data: gray_px.clone(), height: h as u32, width: w as u32, channels: 1 };
    let rgb = PixelArray { data: rgb_img.px.clone(), height: h as u32, width: w as u32, channels: 3 };
    let mut s = WorkerScratch::new().unwrap();
    let f32n = OutputSpec { dtype: DType::F32, layout: Layout::Nchw, normalize: Some(MNIST_NORM), pad_to: None };
    for t in [vec![rrc(24, 20), flip(0.5)], vec![center(h as u32, w as u32)], vec![center(50, 30), flip(1.0)]] {
        for spec in [U8_NHWC, f32n] {
            let g = gray_pipeline(t.clone(), spec);
            let c = SamplePipeline::new(t.clone(), spec).unwrap();
            for i in 0..6 {
                let k = key(i);
                let px = |s: &mut WorkerScratch, p: &SamplePipeline, a: &PixelArray| {
                    let mut dst = vec![0xAB; p.sample_bytes()];
                    p.process_pixels(s, a, 0, k, &mut dst).unwrap();
                    dst
                };
                let gray_out = px(&mut s, &g, &gray);
                // the same gray pixels as an RGB PNG: luma of (v, v, v) is v
                let from_png = run(&g, &mut s, &png_bytes(&widened(&gray_px, w, h)), k).unwrap();
                assert!(gray_out == from_png, "{t:?} {spec:?}");
                // RGB output of a gray array: three copies of the gray output
                let wide = px(&mut s, &c, &gray);
                let b = spec.dtype.size_bytes();
                match spec.layout {
                    Layout::Nchw => assert!(wide.chunks_exact(gray_out.len()).all(|plane| plane == gray_out)),
                    Layout::Nhwc => assert!(
                        wide.chunks_exact(3 * b)
                            .zip(gray_out.chunks_exact(b))
                            .all(|(p, v)| p.chunks_exact(b).all(|c| c == v))
                    ),
                }
                // an RGB array in gray: as its PNG
                let from_png = run(&g, &mut s, &png_bytes(&rgb_img), k).unwrap();
                assert!(px(&mut s, &g, &rgb) == from_png, "{t:?} {spec:?}");
            }
        }
    }
    // A full-size centre crop of a gray array is the identity.
    let id = gray_pipeline(vec![center(h as u32, w as u32)], U8_NHWC);
    let mut dst = vec![0; id.sample_bytes()];
    id.process_pixels(&mut s, &gray, 0, key(0), &mut dst).unwrap();
    assert_eq!(dst, gray_px);
}

/// One channel in every dtype: the u8 result through `ToTensor` + `Normalize` arithmetic, the same bytes in
/// NCHW and NHWC ((1, H, W) and (H, W, 1) are one memory layout); shapes and sizes say 1.
#[test]
fn gray_dtypes_layouts_and_shapes() {
    let bytes = png_bytes(&synthetic(90, 70, 3));
    let t = vec![rrc(40, 56), flip(0.5)];
    let mut s = WorkerScratch::new().unwrap();
    let u8_out = run(&gray_pipeline(t.clone(), U8_NHWC), &mut s, &bytes, key(5)).unwrap();
    assert_eq!(u8_out.len(), 40 * 56);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for normalize in [None, Some(MNIST_NORM)] {
            let outs: Vec<Vec<u8>> = [Layout::Nchw, Layout::Nhwc]
                .map(|layout| {
                    let p = gray_pipeline(t.clone(), OutputSpec { dtype, layout, normalize, pad_to: None });
                    let want = match layout {
                        Layout::Nchw => [1, 40, 56],
                        Layout::Nhwc => [40, 56, 1],
                    };
                    assert_eq!((p.sample_shape(), p.sample_bytes()), (want, 40 * 56 * dtype.size_bytes()));
                    run(&p, &mut s, &bytes, key(5)).unwrap()
                })
                .to_vec();
            assert_eq!(outs[0], outs[1], "{dtype:?}");
            for (i, &v) in u8_out.iter().enumerate() {
                let x = f32::from(v) / 255.0;
                let x = normalize.map_or(x, |n| (x - 0.1307) / n.std[0]);
                let b = dtype.size_bytes();
                let got = &outs[0][i * b..(i + 1) * b];
                let want = match dtype {
                    DType::F32 => x.to_ne_bytes().to_vec(),
                    DType::F16 => half::f16::from_f32(x).to_ne_bytes().to_vec(),
                    _ => half::bf16::from_f32(x).to_ne_bytes().to_vec(),
                };
                assert_eq!(got, &want[..], "{dtype:?} {normalize:?} at {i}");
            }
        }
    }
}

/// normalize with gray output: one value each (broadcast), never a 3-value (RGB) preset; RGB output takes 1 or 3.
#[test]
fn normalize_values_must_match_the_channels() {
    let param = |r: Result<Normalize>| match r {
        Err(TrdataError::Config { parameter, message }) => format!("{parameter}: {message}"),
        other => panic!("expected a config error, got {other:?}"),
    };
    let mnist = Normalize::from_user(&[0.1307], &[0.3081], Channels::Gray).unwrap();
    assert_eq!(mnist, Normalize { mean: [0.1307; 3], std: [0.3081; 3] });
    assert_eq!(Normalize::from_user(&[0.1307], &[0.3081], Channels::Rgb).unwrap(), mnist);
    // 0–255 units work in gray too
    let u255 = Normalize::from_user(&[33.3285], &[78.5655], Channels::Gray).unwrap();
    assert!((u255.mean[0] - 0.1307).abs() < 1e-6 && (u255.std[2] - 0.3081).abs() < 1e-6);
    let imagenet = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
    assert!(Normalize::from_user(&imagenet.0, &imagenet.1, Channels::Rgb).is_ok());
    assert!(Normalize::from_user(&[0.5], &imagenet.1, Channels::Rgb).is_ok());
    let e = param(Normalize::from_user(&imagenet.0, &imagenet.1, Channels::Gray));
    assert!(
        e.starts_with(
            "normalize: mean=[0.485, 0.456, 0.406] std=[0.229, 0.224, 0.225] must have 1 value each with channels=1"
        ),
        "{e}"
    );
    assert!(param(Normalize::from_user(&[0.5], &[0.2, 0.2, 0.2], Channels::Gray)).starts_with("normalize: "));
    for (m, sd) in [(&[][..], &[0.2][..]), (&[0.5, 0.5], &[0.2]), (&[0.5; 4], &[0.2; 4])] {
        assert!(param(Normalize::from_user(m, sd, Channels::Rgb)).contains("must have 1 or 3 values each"));
    }
    // A Normalize built by hand with three different values cannot reach a gray pipeline either.
    let f32n = OutputSpec { dtype: DType::F32, layout: Layout::Nchw, normalize: Some(IMAGENET_NORM), pad_to: None };
    match SamplePipeline::with_channels(vec![rrc(8, 8)], f32n, Channels::Gray) {
        Err(TrdataError::Config { parameter, .. }) => assert_eq!(parameter, "normalize"),
        other => panic!("{other:?}"),
    }
    assert!(
        SamplePipeline::with_channels(
            vec![rrc(8, 8)],
            OutputSpec { normalize: Some(MNIST_NORM), ..f32n },
            Channels::Gray
        )
        .is_ok()
    );
}

/// The 1-channel kernels against Pillow's plain loop (`horizontal_row::<1>`), every tap count the dispatch has.
#[test]
fn gray_horizontal_kernels_equal_the_plain_loop() {
    use super::geometry::Axis;
    use super::resample::{AxisCoeffs, horizontal_row, horizontal_row_wide};
    let line = luma(&synthetic(400, 1, 6));
    for out in [400usize, 300, 200, 133, 100, 57, 40, 9] {
        let n = line.len();
        let axis = Axis {
            out_n: out,
            start: 0,
            resized: out as i64,
            scale: n as f64 / out as f64,
            lo: 0,
            hi: n as i64,
            resample: Default::default(),
        };
        for flip in [false, true] {
            let mut c = AxisCoeffs::default();
            c.compute(&axis, 8, n as u32, n as u32, flip);
            let (mut want, mut got) = (vec![0u8; out], vec![0u8; out]);
            horizontal_row::<1>(&line, &c, &mut want);
            let wide: Vec<u32> = line.iter().map(|&v| u32::from(v)).collect();
            horizontal_row_wide::<1>(&wide, &c, &mut got);
            assert_eq!(got, want, "{n}->{out} taps {}", c.taps);
        }
    }
}
