//! stage2 — the resampler of the geometric ops placed after a pixel op (`Resize`, `RandomResizedCrop`; program
//! stage 2, see [`super::program`]): a box of the uint8 image in the worker's scratch resized through the fused
//! pass's own kernels. The ops themselves (arguments, check, draw) are in `ops/geometric.rs`, which calls
//! [`resize_box`].

use super::Layout;
use super::kernels::Frame;
use super::resample::{Job, OutputLut, ResampleScratch};
use super::resize::{Axis, Filter, Resample};
use super::simd::{self, Simd};

/// Crop `(top, left, h, w)` of `frame` and resize it to `(oh, ow)` into `spare`, then swap, with torchvision v2's
/// semantics on uint8 tensors: through the fused pass's own kernels (`resample.rs`, Pillow's coefficients,
/// horizontal pass first as torch's uint8 kernel) — torch quantises the same weights to ≤ 15 bits where Pillow
/// uses 22, so about 1–2 % of pixels differ by ±1; `bicubic` with `antialias=False` is torch's a = -0.75 kernel
/// there but Pillow's a = -0.5 here (PSNR, not ±1). `nearest` is torch's tensor rule (`floor(dst · in/out)` in
/// f32), exactly. (CenterCrop pads with zeros where the crop is larger and takes the banker's-rounded centre:
/// `ops/geometric.rs`.)
pub(crate) fn resize_box(
    frame: &mut Frame,
    spare: &mut Vec<u8>,
    r: &mut ResampleScratch,
    (top, left, bh, bw): (usize, usize, usize, usize),
    (oh, ow): (usize, usize),
    resample: Resample,
) {
    let c = frame.c;
    let (h, w) = (frame.h, frame.w);
    let n_out = oh * ow * c;
    spare.clear();
    spare.resize(n_out, 0);
    if resample.filter == Filter::Nearest {
        // torch's uint8 "nearest": src = min(floor(f32(dst) · f32(in / out)), in - 1).
        let sy = (bh as f64 / oh as f64) as f32;
        let sx = (bw as f64 / ow as f64) as f32;
        let stride = w * c;
        for oy in 0..oh {
            let y = top + (((oy as f32) * sy).floor() as usize).min(bh - 1);
            let src = &frame.buf[y * stride..(y + 1) * stride];
            let dst = &mut spare[oy * ow * c..(oy + 1) * ow * c];
            for ox in 0..ow {
                let x = left + (((ox as f32) * sx).floor() as usize).min(bw - 1);
                dst[ox * c..(ox + 1) * c].copy_from_slice(&src[x * c..(x + 1) * c]);
            }
        }
    } else {
        let ax = |lo: usize, len: usize, out_n: usize| Axis {
            out_n,
            start: 0,
            resized: out_n as i64,
            scale: len as f64 / out_n as f64,
            lo: lo as i64,
            hi: (lo + len) as i64,
            resample,
        };
        r.x.compute(&ax(left, bw, ow), 8, w as u32, w as u32, false);
        r.y.compute(&ax(top, bh, oh), 8, h as u32, h as u32, false);
        simd::resample(
            Simd::detect(),
            Job {
                pixels: &frame.buf[..h * w * c],
                stride: w * c,
                region_x0: 0,
                region_y0: 0,
                src_channels: c,
                out_channels: c,
                window: &mut r.window,
                x: &mut r.x,
                y: &mut r.y,
                inter: &mut r.inter,
                wide: &mut r.wide,
                row: &mut r.row,
                lut: &OutputLut::U8,
                layout: Layout::Nhwc,
                out_w: ow,
                out_h: oh,
                // torch's uint8 kernel runs the horizontal pass first.
                vertical_first: false,
                dst: &mut spare[..n_out],
            },
        );
    }
    std::mem::swap(&mut frame.buf, spare);
    (frame.h, frame.w) = (oh, ow);
}
