//! Micro-benchmark of the pixel-stage kernels alone (no decode, no loader): each op's `sample` + `apply` on a
//! fixed uint8 HWC image, the way a worker runs them, µs per image (median of rounds, each round the mean of
//! many samples so the per-sample draws vary as in training). benches/micro/ops.py measures the same ops end to end
//! through the Loader; this is the fast inner loop for optimising one kernel.
//!
//!     cargo run --release --example kernel_bench -- [--size 224] [--rgb raw.rgb H W] [--only name,…]
//!
//! Without `--rgb` the image is a textured synthetic one (gradients + hash noise, so the histogram ops have
//! work); `--rgb` reads raw interleaved RGB bytes (e.g. a crop dumped by scripts/kernel_golden.py).

use std::time::Instant;

use trdata::augment::ops::{self, Arg, OpScratch, OpSpec};
use trdata::rng::SampleRng;

fn spec(kind: &str, args: &[(&str, Arg)]) -> OpSpec {
    let args: Vec<(String, Arg)> = args.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    let op = OpSpec::from_args(kind, &args).unwrap_or_else(|e| panic!("{kind}: {e}"));
    op.check(0).unwrap_or_else(|e| panic!("{kind}: {e}"));
    op
}

fn num(v: f64) -> Arg {
    Arg::Num(v)
}
fn pair(a: f64, b: f64) -> Arg {
    Arg::List(vec![Arg::Num(a), Arg::Num(b)])
}
fn s(v: &str) -> Arg {
    Arg::Str(v.into())
}

fn cases() -> Vec<(&'static str, OpSpec)> {
    use Arg::{Bool, Int, None as N};
    let jit = |b: Arg, c: Arg, s_: Arg, h: Arg| {
        spec("color_jitter", &[("brightness", b), ("contrast", c), ("saturation", s_), ("hue", h)])
    };
    let p1 = || ("p", num(1.0));
    let blur =
        |k: i128| spec("gaussian_blur", &[("kernel_size", Arg::List(vec![Int(k), Int(k)])), ("sigma", pair(0.1, 2.0))]);
    let erase = |value: Arg| {
        spec(
            "random_erasing",
            &[("p", num(1.0)), ("scale", pair(0.02, 0.33)), ("ratio", pair(0.3, 3.3)), ("value", value)],
        )
    };
    let rotate = |interp: &str| {
        spec(
            "random_rotation",
            &[
                ("degrees", pair(-30.0, 30.0)),
                ("interpolation", s(interp)),
                ("expand", Bool(false)),
                ("center", N),
                ("fill", num(0.0)),
            ],
        )
    };
    let affine = |interp: &str| {
        spec(
            "random_affine",
            &[
                ("degrees", pair(-15.0, 15.0)),
                ("translate", pair(0.1, 0.1)),
                ("scale", pair(0.9, 1.1)),
                ("shear", pair(-10.0, 10.0)),
                ("interpolation", s(interp)),
                ("fill", num(0.0)),
                ("center", N),
            ],
        )
    };
    vec![
        ("brightness", jit(pair(0.6, 1.4), N, N, N)),
        ("contrast", jit(N, pair(0.6, 1.4), N, N)),
        ("saturation", jit(N, N, pair(0.6, 1.4), N)),
        ("hue", jit(N, N, N, pair(-0.1, 0.1))),
        ("jitter-all", jit(pair(0.6, 1.4), pair(0.6, 1.4), pair(0.6, 1.4), pair(-0.1, 0.1))),
        ("grayscale", spec("grayscale", &[("num_output_channels", Int(3))])),
        ("blur5", blur(5)),
        ("blur23", blur(23)),
        ("noise", spec("gaussian_noise", &[("mean", num(0.0)), ("sigma", num(0.1)), ("clip", Bool(true))])),
        ("erase", erase(Int(0))),
        ("erase-random", erase(s("random"))),
        ("autocontrast", spec("random_autocontrast", &[p1()])),
        ("equalize", spec("random_equalize", &[p1()])),
        ("solarize", spec("random_solarize", &[("threshold", num(128.0)), p1()])),
        ("posterize", spec("random_posterize", &[("bits", Int(4)), p1()])),
        ("sharpness", spec("random_adjust_sharpness", &[("sharpness_factor", num(2.0)), p1()])),
        ("invert", spec("random_invert", &[p1()])),
        ("rotate-nearest", rotate("nearest")),
        ("rotate-bilinear", rotate("bilinear")),
        ("affine-nearest", affine("nearest")),
        ("affine-bilinear", affine("bilinear")),
        (
            "perspective",
            spec(
                "random_perspective",
                &[("distortion_scale", num(0.5)), p1(), ("interpolation", s("bilinear")), ("fill", num(0.0))],
            ),
        ),
        ("AA", spec("auto_augment", &[("policy", s("imagenet")), ("interpolation", s("nearest")), ("fill", N)])),
        (
            "RA-m9",
            spec(
                "rand_augment",
                &[
                    ("num_ops", Int(2)),
                    ("magnitude", Int(9)),
                    ("num_magnitude_bins", Int(31)),
                    ("interpolation", s("nearest")),
                    ("fill", N),
                ],
            ),
        ),
        (
            "TA",
            spec(
                "trivial_augment_wide",
                &[("num_magnitude_bins", Int(31)), ("interpolation", s("nearest")), ("fill", N)],
            ),
        ),
        (
            "AugMix",
            spec(
                "augmix",
                &[
                    ("severity", Int(3)),
                    ("mixture_width", Int(3)),
                    ("chain_depth", Int(-1)),
                    ("alpha", num(1.0)),
                    ("all_ops", Bool(true)),
                    ("interpolation", s("bilinear")),
                    ("fill", N),
                ],
            ),
        ),
    ]
}

fn synthetic(h: usize, w: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(h * w * 3);
    for y in 0..h {
        for x in 0..w {
            let n = ((x * 73_856_093) ^ (y * 19_349_663)).wrapping_mul(0x9E37_79B9) >> 24;
            v.extend([(x * 255 / w + n % 40) as u8, (y * 200 / h + n % 30) as u8, ((x + y) % 256) as u8]);
        }
    }
    v
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut size = 224usize;
    let mut img: Option<(Vec<u8>, usize, usize)> = None;
    let mut only: Vec<String> = Vec::new();
    let mut rounds = 7usize;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--size" => {
                size = args[i + 1].parse().expect("--size N");
                i += 2;
            }
            "--rgb" => {
                let (h, w): (usize, usize) = (args[i + 2].parse().expect("H"), args[i + 3].parse().expect("W"));
                let data = std::fs::read(&args[i + 1]).expect("read --rgb file");
                assert_eq!(data.len(), h * w * 3, "--rgb file must hold H*W*3 bytes");
                img = Some((data, h, w));
                i += 4;
            }
            "--only" => {
                only = args[i + 1].split(',').map(String::from).collect();
                i += 2;
            }
            "--rounds" => {
                rounds = args[i + 1].parse().expect("--rounds N");
                i += 2;
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let (src, h, w) = img.unwrap_or_else(|| (synthetic(size, size), size, size));
    let per_round = (200 * 224 * 224 / (h * w)).max(20);
    println!("{:18} {:>9}   ({h}×{w}×3, median of {rounds} rounds of {per_round} samples)", "op", "µs/img");
    for (name, op) in cases() {
        if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        let mut frame = ops::Frame::default();
        let mut scratch = OpScratch::default();
        let mut times = Vec::new();
        let mut idx = 0u64;
        for _ in 0..rounds {
            let t = Instant::now();
            for _ in 0..per_round {
                frame.buf.clear();
                frame.buf.extend_from_slice(&src);
                (frame.h, frame.w, frame.c) = (h, w, 3);
                let mut rng = SampleRng::new(1, 0, idx, 0x100);
                idx += 1;
                let drawn = op.sample(&mut rng, (h, w, 3)).expect("sample");
                ops::apply(&op, &drawn, &mut frame, &mut scratch, &mut rng);
            }
            times.push(t.elapsed().as_secs_f64() / per_round as f64);
        }
        // the copy of the source into the frame is part of each sample; subtract it
        let t = Instant::now();
        for _ in 0..per_round {
            frame.buf.clear();
            frame.buf.extend_from_slice(std::hint::black_box(&src));
        }
        let copy = t.elapsed().as_secs_f64() / per_round as f64;
        times.sort_by(f64::total_cmp);
        println!("{name:18} {:9.1}", (times[rounds / 2] - copy) * 1e6);
    }
}
