//! The fused writer: Pillow's antialiased bilinear resampling (`ImagingResample`, `reducing_gap=None`) from the
//! decoded region to the output, with flip, normalize, cast and layout folded in.
//!
//! Exactness: coefficients are computed like Pillow's `precompute_coeffs` (triangle filter, support scaled by the
//! downscale factor, centre `(i + 0.5) · scale`, weights normalized and clamped to the source span) and converted
//! to Pillow's 22-bit fixed point (`normalize_coeffs_8bpc`). The two separable passes round to an 8-bit
//! intermediate in between, like Pillow, in the order the caller picks (Pillow 13's order for deterministic
//! pipelines, see `geometry::pillow_vertical_first`), so at DCT scale 8/8 the uint8 output equals
//! `img.resize(...)` + crop bit for bit. Normalize + cast is a per-channel 256-entry table applied to the 8-bit
//! result (what `ToTensor()` + `Normalize()` compute from a PIL image), so float outputs cost nothing extra and
//! round once.
//!
//! Speed: only the output's own rows/columns get coefficients; every output uses the same number of taps `K`
//! (short filters are shifted and zero-padded), so the inner loops have a compile-time length for K ≤ 8. The
//! vertical pass is a contiguous multiply-add over a row (vectorized; much faster with AVX2, where 32-bit
//! multiplies are native). The horizontal pass gathers, so it stays scalar, but multiplies two channels at once
//! (`(r | g << 32) · k` in a u64, exact because the weights are non-negative) from a line widened to u32.
//! Nothing is allocated once the scratch vectors have grown.
//!
//! Channels: every kernel is compiled for C = 3 (interleaved RGB8) and C = 1 (gray8) through a const generic;
//! when the source's channel count differs from the output's, [`run`] first converts the filter window (the
//! union of the taps, not the whole decoded region) with `color`, so the passes always see the output's format.
//! 1-channel output thus resamples a third of the bytes of RGB.

use super::color;
use super::resize::{Axis, Filter};
use super::{DType, Layout, OutputSpec};

/// Fixed-point precision of the coefficients (Pillow: `32 - 8 - 2`).
const PRECISION_BITS: u32 = 22;
const HALF: i32 = 1 << (PRECISION_BITS - 1);

#[inline(always)]
fn clip8(v: i32) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Pillow's bilinear (triangle) filter.
#[inline]
fn triangle(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 { 1.0 - x } else { 0.0 }
}

/// Pillow's bicubic filter (a = -0.5, `bicubic_filter` in Resample.c).
#[inline]
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

impl ResampleScratch {
    /// Bytes held by the intermediates that grow with the image (see `OpScratch::retained_bytes`).
    #[cfg(test)]
    pub(crate) fn retained_bytes(&self) -> usize {
        self.inter.capacity() + self.wide.capacity() * 4 + self.row.capacity() + self.window.capacity()
    }
}

/// Filter taps of one axis, for every output index in output order (flip already applied).
#[derive(Debug, Default)]
pub(crate) struct AxisCoeffs {
    /// First source index of each output's taps (scaled-image pixels; made region-relative by `rebase`).
    pub start: Vec<u32>,
    /// Fixed-point weights, `taps` per output (zero-padded; all zero for padding outputs).
    pub k: Vec<i32>,
    /// Taps per output (the same for all outputs).
    pub taps: usize,
    /// Some weight is negative (bicubic): the passes must use the signed kernels, not the SWAR ones.
    pub signed: bool,
    /// Union of all taps: `[win0, win1)`.
    pub win0: u32,
    /// End of the union.
    pub win1: u32,
    // Scratch: unpadded taps.
    raw_start: Vec<u32>,
    raw_len: Vec<u32>,
    raw_k: Vec<i32>,
    tmp: Vec<f64>,
}

impl AxisCoeffs {
    /// Compute the taps of `axis` at DCT scale `m`/8, where the scaled image is `scaled_len` pixels and the
    /// original `source_len`. `flip` reverses the output order.
    pub fn compute(&mut self, axis: &Axis, m: u8, source_len: u32, scaled_len: u32, flip: bool) {
        let f = f64::from(m) / 8.0;
        // Clamp span in scaled pixels. At m = 8 it is exactly Pillow's; otherwise the nearest scaled pixels, and
        // `frac` keeps the sub-pixel position of the span's start (so the geometry stays exact).
        let (lo_s, hi_s, frac) = if m == 8 {
            (axis.lo.max(0), axis.hi.min(i64::from(source_len)), 0.0)
        } else {
            let lo_f = axis.lo as f64 * f;
            let lo_s = (lo_f.round() as i64).clamp(0, i64::from(scaled_len) - 1);
            let hi_s = if axis.hi >= i64::from(source_len) {
                i64::from(scaled_len)
            } else {
                ((axis.hi as f64 * f).round() as i64).clamp(lo_s + 1, i64::from(scaled_len))
            };
            (lo_s, hi_s, lo_f - lo_s as f64)
        };
        let span = hi_s - lo_s;
        let scale = axis.scale * f;
        let r = axis.resample;
        let filterscale = if r.antialias { scale.max(1.0) } else { 1.0 };
        let (base_support, filter): (f64, fn(f64) -> f64) = match r.filter {
            Filter::Bicubic => (2.0, bicubic),
            _ => (1.0, triangle), // nearest: 1 tap, chosen below
        };
        let support = base_support * filterscale;
        let ss = 1.0 / filterscale;
        // Nearest (Pillow's `ImagingScaleAffine`): output k reads source `(int)(0.5·scale + k·scale)`, the sum
        // accumulated in doubles one step per output as Pillow does (the last bit of a boundary depends on it).
        let mut nearest_pos = 0.5 * scale;
        let mut nearest_k = 0i64;
        let ksize = (support.ceil() as usize) * 2 + 1;
        let n = axis.out_n;
        let valid = axis.valid();
        self.raw_start.clear();
        self.raw_len.clear();
        self.raw_k.clear();
        self.raw_k.resize(n * ksize, 0);
        self.tmp.resize(ksize, 0.0);
        let (mut win0, mut win1) = (u32::MAX, 0u32);
        let mut max_len = 1usize;
        for o in 0..n {
            let j = if flip { n - 1 - o } else { o };
            if !valid.contains(&j) {
                self.raw_start.push(u32::MAX); // padding: placed by the padding step below
                self.raw_len.push(0);
                continue;
            }
            // Pillow: center = in0 + (xx + 0.5) * scale; xmin = (int)(center - support + 0.5) clamped to 0; ...
            let center = ((axis.start + j as i64) as f64 + 0.5) * scale + frac;
            let (xmin, len) = if r.filter == Filter::Nearest {
                let k = axis.start + j as i64;
                if k < nearest_k {
                    (nearest_pos, nearest_k) = (0.5 * scale, 0);
                }
                while nearest_k < k {
                    nearest_pos += scale;
                    nearest_k += 1;
                }
                self.tmp[0] = 1.0;
                (((nearest_pos + frac) as i64).clamp(0, (span - 1).max(0)), 1usize)
            } else {
                let xmin = ((center - support + 0.5) as i64).max(0);
                let xmax = ((center + support + 0.5) as i64).min(span);
                let len = (xmax - xmin).max(0) as usize;
                for x in 0..len {
                    self.tmp[x] = filter(((x as i64 + xmin) as f64 - center + 0.5) * ss);
                }
                (xmin, len)
            };
            let ww: f64 = self.tmp[..len].iter().sum();
            let kk = &mut self.raw_k[o * ksize..o * ksize + ksize];
            for (k, &w) in kk.iter_mut().zip(&self.tmp[..len]) {
                let w = if ww != 0.0 { w / ww } else { w };
                // normalize_coeffs_8bpc
                *k = if w < 0.0 {
                    (-0.5 + w * f64::from(1u32 << PRECISION_BITS)) as i32
                } else {
                    (0.5 + w * f64::from(1u32 << PRECISION_BITS)) as i32
                };
            }
            let s = (lo_s + xmin) as u32;
            self.raw_start.push(s);
            self.raw_len.push(len as u32);
            if len > 0 {
                win0 = win0.min(s);
                win1 = win1.max(s + len as u32);
                max_len = max_len.max(len);
            }
        }
        self.signed = self.raw_k.iter().any(|&k| k < 0);
        if win0 > win1 {
            // No valid output at all (cannot happen for validated geometry): use pixel 0 of the span.
            win0 = lo_s as u32;
            win1 = win0 + 1;
        }
        // Pad every output to `max_len` taps: shift starts left when they would run past the window's end.
        let taps = max_len.min((win1 - win0) as usize).max(1);
        self.taps = taps;
        self.win0 = win0;
        self.win1 = win1;
        self.start.clear();
        self.k.clear();
        self.k.resize(n * taps, 0);
        for o in 0..n {
            let len = self.raw_len[o] as usize;
            if len == 0 {
                self.start.push(win0);
                continue;
            }
            let s = self.raw_start[o];
            let s2 = s.min(win1 - taps as u32).max(win0);
            let shift = (s - s2) as usize;
            self.start.push(s2);
            let dst = &mut self.k[o * taps..o * taps + taps];
            dst[shift..shift + len].copy_from_slice(&self.raw_k[o * ksize..o * ksize + len]);
        }
    }

    /// Make starts relative to a buffer whose first pixel is scaled-image pixel `origin`.
    pub fn rebase(&mut self, origin: u32) {
        for s in &mut self.start {
            *s -= origin;
        }
    }
}

/// Per-channel output tables: 8-bit resampled value → output element (normalize + cast folded in).
#[derive(Debug, Clone)]
pub(crate) enum OutputLut {
    /// uint8: identity.
    U8,
    /// f16 or bf16 bit patterns.
    Half(Box<[[u16; 256]; 3]>),
    /// f32.
    F32(Box<[[f32; 256]; 3]>),
}

impl OutputLut {
    /// Tables for `spec`: `(v / 255 - mean) / std` in f32 (torchvision's `ToTensor` + `Normalize` arithmetic),
    /// then rounded to nearest-even for f16/bf16.
    pub fn new(spec: &OutputSpec) -> Self {
        let value = |c: usize, v: usize| -> f32 {
            let x = v as f32 / 255.0;
            match spec.normalize {
                Some(n) => (x - n.mean[c]) / n.std[c],
                None => x,
            }
        };
        match spec.dtype {
            DType::U8 => Self::U8,
            DType::F32 => {
                let mut t = Box::new([[0f32; 256]; 3]);
                for (c, row) in t.iter_mut().enumerate() {
                    for (v, e) in row.iter_mut().enumerate() {
                        *e = value(c, v);
                    }
                }
                Self::F32(t)
            }
            DType::F16 | DType::BF16 => {
                let mut t = Box::new([[0u16; 256]; 3]);
                for (c, row) in t.iter_mut().enumerate() {
                    for (v, e) in row.iter_mut().enumerate() {
                        *e = if spec.dtype == DType::F16 {
                            half::f16::from_f32(value(c, v)).to_bits()
                        } else {
                            half::bf16::from_f32(value(c, v)).to_bits()
                        };
                    }
                }
                Self::Half(t)
            }
        }
    }
}

impl OutputLut {
    /// The tables as bytes, channel-major (3 × 256 entries of `elem_bytes` each, each entry the bytes
    /// [`write_row`] writes for that value: native-endian f16/bf16 bits or f32 bits; the identity for uint8), and
    /// `elem_bytes`: what a writer outside this module (the GPU resampler) copies to be byte-identical.
    pub(crate) fn table_bytes(&self) -> (Vec<u8>, u32) {
        match self {
            Self::U8 => ((0..3).flat_map(|_| 0..=255u8).collect(), 1),
            Self::Half(t) => (t.iter().flatten().flat_map(|v| v.to_ne_bytes()).collect(), 2),
            Self::F32(t) => (t.iter().flatten().flat_map(|v| v.to_ne_bytes()).collect(), 4),
        }
    }
}

/// The resampler's working memory, owned by a worker and reused for every sample: both axes' taps, the filter
/// window converted to the output's channels, the intermediate image and the rows ([`Job`] borrows all of it).
/// The fused pass and the stage-2 resizes each own one.
#[derive(Debug, Default)]
pub(crate) struct ResampleScratch {
    pub x: AxisCoeffs,
    pub y: AxisCoeffs,
    pub inter: Vec<u8>,
    pub wide: Vec<u32>,
    pub row: Vec<u8>,
    /// The filter window converted to the output's channels when the source has others (`color`).
    pub window: Vec<u8>,
}

/// Everything the resample stage of one sample needs: the decoded region, both axes' taps (not yet rebased), the
/// worker's scratch, and the output. Run through [`run`] (via `simd::resample`, which picks the instruction set).
pub(crate) struct Job<'a> {
    /// Decoded region's interleaved pixels (`src_channels` bytes each: RGB8 or gray8), `stride` bytes per row,
    /// starting at scaled-image `(x0, y0)`.
    pub pixels: &'a [u8],
    pub stride: usize,
    pub region_x0: u32,
    pub region_y0: u32,
    /// Channels of `pixels`: 3 (RGB) or 1 (gray).
    pub src_channels: usize,
    /// Channels of the output: 3 (RGB) or 1 (gray, Pillow's `convert("L")` of RGB).
    pub out_channels: usize,
    /// Scratch for the filter window converted to the output's channels (used when they differ).
    pub window: &'a mut Vec<u8>,
    pub x: &'a mut AxisCoeffs,
    pub y: &'a mut AxisCoeffs,
    pub inter: &'a mut Vec<u8>,
    pub wide: &'a mut Vec<u32>,
    pub row: &'a mut Vec<u8>,
    pub lut: &'a OutputLut,
    pub layout: Layout,
    pub out_w: usize,
    pub out_h: usize,
    /// Pass order (see `SamplePipeline::process`).
    pub vertical_first: bool,
    pub dst: &'a mut [u8],
}

/// Pixels the two passes read: `pixels` rows of `stride` bytes whose first pixel is scaled-image `(x0, y0)`.
struct Region<'a> {
    pixels: &'a [u8],
    stride: usize,
    x0: u32,
    y0: u32,
}

/// The resample stage of one sample: the channel conversion of the filter window (when the source's channels are
/// not the output's), both passes and the output writes. Integer-only (the float LUT and the coefficients are
/// computed outside), so its result does not depend on the instruction set it is compiled for.
/// `#[inline(always)]` (like every kernel below it) so that `simd`'s wrappers each get their own copy, compiled
/// with their target features.
#[inline(always)]
pub(crate) fn run(job: Job<'_>) {
    let Job {
        pixels,
        stride,
        region_x0,
        region_y0,
        src_channels,
        out_channels,
        window,
        x,
        y,
        inter,
        wide,
        row,
        lut,
        layout,
        out_w,
        out_h,
        vertical_first,
        dst,
    } = job;
    let region = if src_channels == out_channels {
        Region { pixels, stride, x0: region_x0, y0: region_y0 }
    } else {
        // Only the window the taps read is converted (a crop of a large image stays cheap). Pillow's order for
        // `Grayscale` first: convert, then resize (SamplePipeline's docs say why trdata converts first).
        let (w, h) = ((x.win1 - x.win0) as usize, (y.win1 - y.win0) as usize);
        let out_stride = w * out_channels;
        if window.len() < out_stride * h {
            window.resize(out_stride * h, 0);
        }
        let col0 = (x.win0 - region_x0) as usize * src_channels;
        let row0 = (y.win0 - region_y0) as usize;
        for (r, out) in window[..out_stride * h].chunks_exact_mut(out_stride).enumerate() {
            let src = &pixels[(row0 + r) * stride + col0..][..w * src_channels];
            if out_channels == 1 { color::rgb_to_luma(src, out) } else { color::gray_to_rgb(src, out) }
        }
        Region { pixels: &window[..out_stride * h], stride: out_stride, x0: x.win0, y0: y.win0 }
    };
    let passes = Passes { x, y, inter, wide, row, lut, layout, out_w, out_h, vertical_first, dst };
    if out_channels == 1 { passes.run::<1>(region) } else { passes.run::<3>(region) }
}

/// The two passes' taps, scratch and output (a `Job` without its source pixels).
struct Passes<'a> {
    x: &'a mut AxisCoeffs,
    y: &'a mut AxisCoeffs,
    inter: &'a mut Vec<u8>,
    wide: &'a mut Vec<u32>,
    row: &'a mut Vec<u8>,
    lut: &'a OutputLut,
    layout: Layout,
    out_w: usize,
    out_h: usize,
    vertical_first: bool,
    dst: &'a mut [u8],
}

impl Passes<'_> {
    /// Both passes over `region` (`C` interleaved channels per pixel) and the writes into `dst`.
    #[inline(always)]
    fn run<const C: usize>(self, region: Region<'_>) {
        let Passes { x, y, inter, wide, row, lut, layout, out_w: ow, out_h: oh, vertical_first, dst } = self;
        let Region { pixels, stride, x0: region_x0, y0: region_y0 } = region;
        let line = C * ow;
        if row.len() < line {
            row.resize(line, 0);
        }
        let cols = C * (x.win1 - x.win0) as usize;
        if wide.len() < cols {
            wide.resize(cols, 0);
        }
        let col0 = C * (x.win0 - region_x0) as usize;
        x.rebase(x.win0);
        if !vertical_first {
            // Horizontal pass over the rows the vertical taps need → 8-bit intermediate of output width; then the
            // vertical pass row by row, each row written (normalize/cast/layout) straight into dst.
            let nrows = (y.win1 - y.win0) as usize;
            if inter.len() < nrows * line {
                inter.resize(nrows * line, 0);
            }
            let first = (y.win0 - region_y0) as usize;
            let rows = first..first + nrows;
            if x.signed {
                // Negative weights (bicubic) break the SWAR kernels' unsigned lanes: Pillow's plain loop.
                for (r, d) in rows.zip(inter[..nrows * line].chunks_exact_mut(line)) {
                    horizontal_row::<C>(&pixels[r * stride + col0..r * stride + col0 + cols], x, d);
                }
            } else {
                horizontal::<C>(pixels, stride, col0, rows, x, wide, &mut inter[..nrows * line]);
            }
            y.rebase(y.win0);
            let row = &mut row[..line];
            for i in 0..oh {
                let k = &y.k[i * y.taps..(i + 1) * y.taps];
                vertical(inter, y.start[i] as usize * line, line, k, row);
                write_row::<C>(lut, layout, row, i, oh, dst);
            }
        } else {
            // Vertical pass first: per output row, the needed columns of the region → one line of 8-bit values
            // (held widened to u32 for the two-channels-per-multiply horizontal kernel), then the horizontal pass
            // on it → the output row.
            y.rebase(region_y0);
            if x.signed {
                if inter.len() < cols {
                    inter.resize(cols, 0);
                }
                let (vline, row) = (&mut inter[..cols], &mut row[..line]);
                for i in 0..oh {
                    let k = &y.k[i * y.taps..(i + 1) * y.taps];
                    vertical(pixels, y.start[i] as usize * stride + col0, stride, k, vline);
                    horizontal_row::<C>(vline, x, row);
                    write_row::<C>(lut, layout, row, i, oh, dst);
                }
                return;
            }
            let (vline, row) = (&mut wide[..cols], &mut row[..line]);
            for i in 0..oh {
                let k = &y.k[i * y.taps..(i + 1) * y.taps];
                vertical(pixels, y.start[i] as usize * stride + col0, stride, k, vline);
                horizontal_row_wide::<C>(vline, x, row);
                write_row::<C>(lut, layout, row, i, oh, dst);
            }
        }
    }
}

/// Horizontal pass over `rows` source rows of `C` channels: row r's pixels that the (rebased) starts of `c` count
/// from begin at byte `r * stride + col0` of `src`; output rows of `C * out_w` bytes go to `dst`. RGB rows are
/// widened into `wide` first, for the two-channels-per-multiply kernel; gray rows are read as they are.
#[inline(always)]
pub(crate) fn horizontal<const C: usize>(
    src: &[u8],
    stride: usize,
    col0: usize,
    rows: std::ops::Range<usize>,
    c: &AxisCoeffs,
    wide: &mut [u32],
    dst: &mut [u8],
) {
    let line = C * c.start.len();
    let cols = C * (c.win1 - c.win0) as usize;
    let wide = &mut wide[..cols];
    for (r, d) in rows.zip(dst.chunks_exact_mut(line)) {
        let s = &src[r * stride + col0..r * stride + col0 + cols];
        if C == 1 {
            hrow_gray(s, c, d);
        } else {
            for (w, &v) in wide.iter_mut().zip(s) {
                *w = u32::from(v);
            }
            horizontal_row_wide::<C>(wide, c, d);
        }
    }
}

/// Pillow's plain 8-bit horizontal loop (`ImagingResampleHorizontal_8bpc`) over `C` interleaved channels: the
/// reference the fast kernels are checked against in tests, and the kernel of signed (bicubic) taps.
#[inline(always)]
pub(crate) fn horizontal_row<const C: usize>(src: &[u8], c: &AxisCoeffs, dst: &mut [u8]) {
    for ((d, &s), k) in dst.chunks_exact_mut(C).zip(&c.start).zip(c.k.chunks_exact(c.taps)) {
        let s = s as usize * C;
        let mut acc = [HALF; C];
        for (p, &w) in src[s..s + C * c.taps].chunks_exact(C).zip(k) {
            for (a, &v) in acc.iter_mut().zip(p) {
                *a += i32::from(v) * w;
            }
        }
        for (d, a) in d.iter_mut().zip(acc) {
            *d = clip8(a);
        }
    }
}

/// An element the vertical pass can write: the clipped 8-bit value, as `u8` (intermediate in Pillow's format) or
/// as `u32` (the widened line the SWAR horizontal kernel reads).
pub(crate) trait Clipped: Copy {
    /// From a fixed-point accumulator.
    fn clipped(acc: i32) -> Self;
}

impl Clipped for u8 {
    #[inline(always)]
    fn clipped(acc: i32) -> Self {
        clip8(acc)
    }
}

impl Clipped for u32 {
    /// No clamp needed: with non-negative weights summing to 2^22 (+ at most K/2 from rounding) the accumulator of
    /// 8-bit samples stays within [0, 255.5 · 2^22).
    #[inline(always)]
    fn clipped(acc: i32) -> Self {
        debug_assert!((0..256 << PRECISION_BITS).contains(&acc));
        (acc >> PRECISION_BITS) as u32
    }
}

/// Vertical pass for one output row: tap row `t` is `src[offset + t * stride..][..out.len()]`.
#[inline(always)]
pub(crate) fn vertical<O: Clipped>(src: &[u8], offset: usize, stride: usize, k: &[i32], out: &mut [O]) {
    let src = &src[offset..];
    match k.len() {
        1 => vrow::<1, O>(src, stride, k, out),
        2 => vrow::<2, O>(src, stride, k, out),
        3 => vrow::<3, O>(src, stride, k, out),
        4 => vrow::<4, O>(src, stride, k, out),
        5 => vrow::<5, O>(src, stride, k, out),
        6 => vrow::<6, O>(src, stride, k, out),
        7 => vrow::<7, O>(src, stride, k, out),
        8 => vrow::<8, O>(src, stride, k, out),
        9 => vrow::<9, O>(src, stride, k, out),
        10 => vrow::<10, O>(src, stride, k, out),
        11 => vrow::<11, O>(src, stride, k, out),
        12 => vrow::<12, O>(src, stride, k, out),
        _ => vrow_dyn(src, stride, k, out),
    }
}

#[inline(always)]
fn vrow<const K: usize, O: Clipped>(src: &[u8], stride: usize, k: &[i32], out: &mut [O]) {
    let n = out.len();
    let k: [i32; K] = std::array::from_fn(|t| k[t]);
    let r: [&[u8]; K] = std::array::from_fn(|t| &src[t * stride..t * stride + n]);
    for (i, o) in out.iter_mut().enumerate() {
        let mut a = HALF;
        for t in 0..K {
            a += i32::from(r[t][i]) * k[t];
        }
        *o = O::clipped(a);
    }
}

/// Any tap count: tap rows are accumulated one after the other into a block of i32 sums (contiguous, so the
/// loop vectorizes). Integer sums are exact in any order (the partial sums stay within ±255 · Σ|k| < 2^31), so
/// the result is the per-output loop's.
#[inline(always)]
fn vrow_dyn<O: Clipped>(src: &[u8], stride: usize, k: &[i32], out: &mut [O]) {
    const BLOCK: usize = 64;
    for (b, o) in out.chunks_mut(BLOCK).enumerate() {
        let (base, n) = (b * BLOCK, o.len());
        let mut acc = [HALF; BLOCK];
        for (t, &w) in k.iter().enumerate() {
            for (a, &v) in acc[..n].iter_mut().zip(&src[t * stride + base..t * stride + base + n]) {
                *a += i32::from(v) * w;
            }
        }
        for (o, &a) in o.iter_mut().zip(&acc[..n]) {
            *o = O::clipped(a);
        }
    }
}

/// Horizontal pass of one widened line (`u32` per sample, from `vertical::<u32>`) of `C` channels. RGB: two
/// channels per multiply, `(r | g << 32) · k` keeps both sums exact in their 32-bit lanes, because the weights are
/// non-negative (triangle filter) and sum to 2^22, so a lane never exceeds 255 · 2^22 + 2^21 < 2^32.
#[inline(always)]
pub(crate) fn horizontal_row_wide<const C: usize>(src: &[u32], c: &AxisCoeffs, dst: &mut [u8]) {
    if C == 1 {
        return hrow_gray(src, c, dst);
    }
    match c.taps {
        1 => hrow_wide::<1>(src, &c.start, &c.k, dst),
        2 => hrow_wide::<2>(src, &c.start, &c.k, dst),
        3 => hrow_wide::<3>(src, &c.start, &c.k, dst),
        4 => hrow_wide::<4>(src, &c.start, &c.k, dst),
        5 => hrow_wide::<5>(src, &c.start, &c.k, dst),
        6 => hrow_wide::<6>(src, &c.start, &c.k, dst),
        7 => hrow_wide::<7>(src, &c.start, &c.k, dst),
        8 => hrow_wide::<8>(src, &c.start, &c.k, dst),
        t => hrow_wide_dyn(src, &c.start, &c.k, t, dst),
    }
}

/// A gray sample the 1-channel horizontal kernel reads: a byte of a gray row, or a widened `u32` of the
/// vertical-first line.
pub(crate) trait GraySample: Copy {
    /// The 8-bit value as a `u32`.
    fn value(self) -> u32;
}

impl GraySample for u8 {
    #[inline(always)]
    fn value(self) -> u32 {
        u32::from(self)
    }
}

impl GraySample for u32 {
    #[inline(always)]
    fn value(self) -> u32 {
        self
    }
}

/// Horizontal pass of one gray line, one output per accumulator (exact in a `u32` for the reason given at
/// [`horizontal_row_wide`]), tap count a compile-time constant for K ≤ 8.
#[inline(always)]
fn hrow_gray<S: GraySample>(src: &[S], c: &AxisCoeffs, dst: &mut [u8]) {
    match c.taps {
        1 => hrow_gray_k::<1, S>(src, &c.start, &c.k, dst),
        2 => hrow_gray_k::<2, S>(src, &c.start, &c.k, dst),
        3 => hrow_gray_k::<3, S>(src, &c.start, &c.k, dst),
        4 => hrow_gray_k::<4, S>(src, &c.start, &c.k, dst),
        5 => hrow_gray_k::<5, S>(src, &c.start, &c.k, dst),
        6 => hrow_gray_k::<6, S>(src, &c.start, &c.k, dst),
        7 => hrow_gray_k::<7, S>(src, &c.start, &c.k, dst),
        8 => hrow_gray_k::<8, S>(src, &c.start, &c.k, dst),
        t => {
            for ((d, &s), k) in dst.iter_mut().zip(&c.start).zip(c.k.chunks_exact(t)) {
                let px = &src[s as usize..s as usize + t];
                let acc =
                    px.iter().zip(k).fold(HALF as u32, |a, (p, &w)| a.wrapping_add(p.value().wrapping_mul(w as u32)));
                *d = (acc >> PRECISION_BITS).min(255) as u8;
            }
        }
    }
}

#[inline(always)]
fn hrow_gray_k<const K: usize, S: GraySample>(src: &[S], starts: &[u32], k: &[i32], dst: &mut [u8]) {
    for ((d, &s), k) in dst.iter_mut().zip(starts).zip(k.chunks_exact(K)) {
        let px = &src[s as usize..s as usize + K];
        let mut acc = HALF as u32;
        for t in 0..K {
            acc = acc.wrapping_add(px[t].value().wrapping_mul(k[t] as u32));
        }
        *d = (acc >> PRECISION_BITS).min(255) as u8;
    }
}

const HALF2: u64 = (HALF as u64) | ((HALF as u64) << 32);

#[inline(always)]
fn clip_lanes(rg: u64, b: u32, d: &mut [u8]) {
    d[0] = ((rg as u32) >> PRECISION_BITS).min(255) as u8;
    d[1] = (((rg >> 32) as u32) >> PRECISION_BITS).min(255) as u8;
    d[2] = (b >> PRECISION_BITS).min(255) as u8;
}

#[inline(always)]
fn hrow_wide<const K: usize>(src: &[u32], starts: &[u32], k: &[i32], dst: &mut [u8]) {
    for ((d, &s), k) in dst.chunks_exact_mut(3).zip(starts).zip(k.chunks_exact(K)) {
        let s = s as usize * 3;
        let px = &src[s..s + 3 * K];
        let (mut rg, mut b) = (HALF2, HALF as u32);
        for t in 0..K {
            let w = k[t] as u32;
            rg = rg.wrapping_add((u64::from(px[3 * t]) | (u64::from(px[3 * t + 1]) << 32)).wrapping_mul(u64::from(w)));
            b = b.wrapping_add(px[3 * t + 2].wrapping_mul(w));
        }
        clip_lanes(rg, b, d);
    }
}

#[inline(always)]
fn hrow_wide_dyn(src: &[u32], starts: &[u32], k: &[i32], taps: usize, dst: &mut [u8]) {
    for ((d, &s), k) in dst.chunks_exact_mut(3).zip(starts).zip(k.chunks_exact(taps)) {
        let s = s as usize * 3;
        let (mut rg, mut b) = (HALF2, HALF as u32);
        for (p, &w) in src[s..s + 3 * taps].chunks_exact(3).zip(k) {
            let w = w as u32;
            rg = rg.wrapping_add((u64::from(p[0]) | (u64::from(p[1]) << 32)).wrapping_mul(u64::from(w)));
            b = b.wrapping_add(p[2].wrapping_mul(w));
        }
        clip_lanes(rg, b, d);
    }
}

/// Write one output row (`C` interleaved channels, `out_w` pixels) at row `y` of a sample in `layout`, through
/// `lut`. With one channel NCHW and NHWC are the same bytes ((1, H, W) and (H, W, 1)).
#[inline(always)]
pub(crate) fn write_row<const C: usize>(
    lut: &OutputLut,
    layout: Layout,
    row: &[u8],
    y: usize,
    out_h: usize,
    dst: &mut [u8],
) {
    write_row_on::<C>(lut, layout, row, y, (out_h, row.len() / C), dst)
}

/// [`write_row`] into a sample of `(dst_h, dst_w)` pixels (`pad_to`'s canvas) at least as wide as the row: the
/// row's pixels go to the first `out_w` columns of row `y`; the rest is left as it is.
#[inline(always)]
pub(crate) fn write_row_on<const C: usize>(
    lut: &OutputLut,
    layout: Layout,
    row: &[u8],
    y: usize,
    (dst_h, dst_w): (usize, usize),
    dst: &mut [u8],
) {
    let out_w = row.len() / C;
    debug_assert!(out_w <= dst_w && y < dst_h, "the row fits the sample");
    match lut {
        OutputLut::U8 => match layout {
            _ if C == 1 => dst[y * dst_w..y * dst_w + out_w].copy_from_slice(row),
            Layout::Nhwc => dst[y * C * dst_w..y * C * dst_w + C * out_w].copy_from_slice(row),
            Layout::Nchw => {
                for c in 0..C {
                    let at = (c * dst_h + y) * dst_w;
                    for (d, s) in dst[at..at + out_w].iter_mut().zip(row.chunks_exact(C)) {
                        *d = s[c];
                    }
                }
            }
        },
        OutputLut::Half(t) => write_row_lut::<C, 2, u16>(t, layout, row, y, (dst_h, dst_w), dst, u16::to_ne_bytes),
        OutputLut::F32(t) => write_row_lut::<C, 4, f32>(t, layout, row, y, (dst_h, dst_w), dst, f32::to_ne_bytes),
    }
}

#[inline(always)]
fn write_row_lut<const C: usize, const B: usize, E: Copy>(
    t: &[[E; 256]; 3],
    layout: Layout,
    row: &[u8],
    y: usize,
    (dst_h, dst_w): (usize, usize),
    dst: &mut [u8],
    bytes: fn(E) -> [u8; B],
) {
    let out_w = row.len() / C;
    if C == 1 {
        // gray: the first channel's table (a 1-value normalize was given for it)
        let d = &mut dst[y * dst_w * B..(y * dst_w + out_w) * B];
        for (d, &s) in d.chunks_exact_mut(B).zip(row) {
            d.copy_from_slice(&bytes(t[0][usize::from(s)]));
        }
        return;
    }
    match layout {
        Layout::Nhwc => {
            let d = &mut dst[y * C * dst_w * B..(y * dst_w + out_w) * C * B];
            for (d, s) in d.chunks_exact_mut(C * B).zip(row.chunks_exact(C)) {
                for c in 0..C {
                    d[c * B..(c + 1) * B].copy_from_slice(&bytes(t[c][usize::from(s[c])]));
                }
            }
        }
        Layout::Nchw => {
            for (c, tc) in t.iter().enumerate().take(C) {
                let at = (c * dst_h + y) * dst_w;
                let plane = &mut dst[at * B..(at + out_w) * B];
                for (d, s) in plane.chunks_exact_mut(B).zip(row.chunks_exact(C)) {
                    d.copy_from_slice(&bytes(tc[usize::from(s[c])]));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::resize::{Axis, Filter, Resample};
    use super::*;

    fn bicubic_axis(n: usize, out: usize) -> Axis {
        Axis {
            out_n: out,
            start: 0,
            resized: out as i64,
            scale: n as f64 / out as f64,
            lo: 0,
            hi: n as i64,
            resample: Resample { filter: Filter::Bicubic, antialias: true },
        }
    }

    /// The vertical pass of signed (bicubic) taps against Pillow's per-output loop kept as the oracle, for
    /// every scale from upsampling to a 3.5× reduction (4 to 15 taps: the const-K kernels and the blocked
    /// fallback), flipped or not, on rows with 0/255 extremes (which ring the most: the clip is exercised).
    #[test]
    fn signed_vertical_equals_the_per_output_loop() {
        let n = 420usize;
        let line: Vec<u8> = (0..3 * n)
            .map(|i| match (i / 3) % 9 {
                0..=2 => 255,
                3 | 4 => 0,
                _ => ((i * 7919) ^ (i >> 2)).wrapping_mul(2_654_435_761) as u8,
            })
            .collect();
        let mut taps_seen = std::collections::BTreeSet::new();
        for out in [840usize, 421, 400, 311, 224, 210, 180, 150, 141, 120] {
            for flip in [false, true] {
                let mut c = AxisCoeffs::default();
                c.compute(&bicubic_axis(n, out), 8, n as u32, n as u32, flip);
                assert!(c.signed, "{n}->{out}");
                taps_seen.insert(c.taps);
                // `taps` rows of a 3n-byte image, each a shifted copy of the line
                let rows: Vec<u8> = (0..c.taps)
                    .flat_map(|r| line.iter().map(move |&v| v.wrapping_add((r as u8).wrapping_mul(37))))
                    .collect();
                for o in [0, out / 2, out - 1] {
                    let k = &c.k[o * c.taps..(o + 1) * c.taps];
                    let mut got = vec![0u8; 3 * n];
                    vertical(&rows, 0, 3 * n, k, &mut got);
                    let want: Vec<u8> = (0..3 * n)
                        .map(|i| {
                            clip8(k.iter().enumerate().fold(HALF, |a, (t, &w)| a + i32::from(rows[t * 3 * n + i]) * w))
                        })
                        .collect();
                    assert_eq!(got, want, "{n}->{out} taps {} output {o}", c.taps);
                }
            }
        }
        assert!(taps_seen.contains(&4) && taps_seen.iter().any(|&t| t > 12), "{taps_seen:?}");
    }

    /// Timing report: the vertical pass against the per-output loop it replaced beyond 8 taps (min of 7 runs, so
    /// a busy machine does not skew it), bicubic 350 → 224 (7 taps) and 420 → 150 (12 taps).
    #[test]
    #[ignore = "timing report, not a test; run with --release --ignored --nocapture"]
    fn signed_vertical_timing() {
        use std::time::Instant;
        let best = |f: &mut dyn FnMut()| {
            (0..7)
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..200 {
                        f();
                    }
                    t.elapsed().as_secs_f64() / 200.0 * 1e6
                })
                .fold(f64::MAX, f64::min)
        };
        for (n, out) in [(350usize, 224usize), (420, 150)] {
            let mut c = AxisCoeffs::default();
            c.compute(&bicubic_axis(n, out), 8, n as u32, n as u32, false);
            let img: Vec<u8> =
                (0..3 * n * n).map(|i| ((i * 7919) ^ (i >> 5)).wrapping_mul(2_654_435_761) as u8).collect();
            let mut line = vec![0u8; 3 * n];
            let per_output = best(&mut || {
                for o in 0..out {
                    let k = &c.k[o * c.taps..(o + 1) * c.taps];
                    let src = &img[c.start[o] as usize * 3 * n..];
                    for (i, v) in line.iter_mut().enumerate() {
                        *v = clip8(k.iter().enumerate().fold(HALF, |a, (t, &w)| a + i32::from(src[t * 3 * n + i]) * w));
                    }
                }
            });
            let vert = best(&mut || {
                for o in 0..out {
                    let k = &c.k[o * c.taps..(o + 1) * c.taps];
                    vertical(&img, c.start[o] as usize * 3 * n, 3 * n, k, &mut line);
                }
            });
            eprintln!("{n}->{out} ({} taps): per-output loop {per_output:.0} us, vertical() {vert:.0} us", c.taps);
        }
    }
}
