//! stage2 — the geometric ops placed after a pixel op (`Resize`, `CenterCrop`, `RandomResizedCrop`; program
//! stage 2, see [`super::program`]), run on the uint8 image in the worker's scratch through the fused pass's own
//! resampler. [`super::program`]'s `run_op` calls [`apply_stage2`] for them (every other op goes to
//! [`super::ops::apply`]).

use super::Layout;
use super::kernels::{self, Frame, PadMode};
use super::ops::{Drawn, OpScratch, OpSpec};
use super::resample::{Job, OutputLut};
use super::resize::{Axis, Filter, Resample, center_crop_start};
use super::simd::{self, Simd};

/// Run a stage-2 geometric op (`Resize`, `CenterCrop`, `RandomResizedCrop` after a pixel op) on the uint8 image,
/// with torchvision v2's semantics on uint8 tensors: CenterCrop pads with zeros where the crop is larger and
/// takes the banker's-rounded centre; Resize and RandomResizedCrop resample through the fused pass's own kernels
/// (`resample.rs`, Pillow's coefficients, horizontal pass first as torch's uint8 kernel) — torch quantises the
/// same weights to ≤ 15 bits where Pillow uses 22, so about 1–2 % of pixels differ by ±1; `bicubic` with
/// `antialias=False` is torch's a = -0.75 kernel there but Pillow's a = -0.5 here (PSNR, not ±1). `nearest` is
/// torch's tensor rule (`floor(dst · in/out)` in f32), exactly.
pub fn apply_stage2(op: &OpSpec, drawn: &Drawn, frame: &mut Frame, scratch: &mut OpScratch) {
    let (h, w) = (frame.h, frame.w);
    match (op, drawn) {
        (OpSpec::CenterCrop { height, width }, _) => {
            let (oh, ow) = (*height as usize, *width as usize);
            let y0 = center_crop_start(h as i64, oh as i64) as isize;
            let x0 = center_crop_start(w as i64, ow as i64) as isize;
            let n = h * w * frame.c;
            kernels::pad_crop(
                &frame.buf[..n],
                (h, w, frame.c),
                &mut scratch.spare,
                (oh, ow),
                (y0, x0),
                PadMode::Constant,
                &[0; 3],
            );
            std::mem::swap(&mut frame.buf, &mut scratch.spare);
            (frame.h, frame.w) = (oh, ow);
        }
        (OpSpec::Resize { resample, .. }, _) => {
            let out = op.output_hw(Some((h, w))).unwrap_or((h, w));
            resize_box(frame, scratch, (0, 0, h, w), out, *resample);
        }
        (OpSpec::RandomResizedCrop { height, width, resample, .. }, Drawn::Box { top, left, h: ch, w: cw }) => {
            let b = (*top as usize, *left as usize, *ch as usize, *cw as usize);
            resize_box(frame, scratch, b, (*height as usize, *width as usize), *resample);
        }
        (op, drawn) => unreachable!("{} was drawn {drawn:?}, which its sample() never returns", op.name()),
    }
}

/// Crop `(top, left, h, w)` of `frame` and resize it to `(oh, ow)` into the spare buffer, then swap.
fn resize_box(
    frame: &mut Frame,
    scratch: &mut OpScratch,
    (top, left, bh, bw): (usize, usize, usize, usize),
    (oh, ow): (usize, usize),
    resample: Resample,
) {
    let c = frame.c;
    let (h, w) = (frame.h, frame.w);
    let n_out = oh * ow * c;
    scratch.spare.clear();
    scratch.spare.resize(n_out, 0);
    if resample.filter == Filter::Nearest {
        // torch's uint8 "nearest": src = min(floor(f32(dst) · f32(in / out)), in - 1).
        let sy = (bh as f64 / oh as f64) as f32;
        let sx = (bw as f64 / ow as f64) as f32;
        let stride = w * c;
        for oy in 0..oh {
            let y = top + (((oy as f32) * sy).floor() as usize).min(bh - 1);
            let src = &frame.buf[y * stride..(y + 1) * stride];
            let dst = &mut scratch.spare[oy * ow * c..(oy + 1) * ow * c];
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
        let r = &mut scratch.resize;
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
                dst: &mut scratch.spare[..n_out],
            },
        );
    }
    std::mem::swap(&mut frame.buf, &mut scratch.spare);
    (frame.h, frame.w) = (oh, ow);
}
