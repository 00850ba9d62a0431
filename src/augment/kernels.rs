//! kernels — the pixel ops' arithmetic on a uint8 HWC image (C = 1 or 3), the middle stage of a compiled program
//! (see [`super::program`]): after the fused ROI/DCT decode + resample has produced the crop, before the final
//! normalize/cast/layout write.
//!
//! Each kernel takes its parameters as plain numbers (a factor, a threshold, a box), never an RNG, so that the
//! per-op sampling ([`super::ops`]) and later the auto-augment policies (which pick magnitudes from their own
//! tables) call the same code. The arithmetic is torchvision v2's on uint8 tensors, step for step
//! (/work/notes/tv_ops.md §11–17): float steps in f32, `fma` exactly where torch computes `add_(…, alpha=…)`,
//! truncation where torch casts to uint8 and round-half-to-even where it calls `round_()`. A port that rounds
//! or skips the fma differs from torchvision on ~1 % of pixels (measured in the spec), which is why each step is
//! spelled out rather than "simplified".

pub(super) mod normal;

use super::simd::fast;
use crate::rng::SampleRng;

/// A uint8 image in HWC order: `h` rows of `w` pixels of `c` interleaved channels (1 or 3).
#[derive(Debug)]
pub struct ImageMut<'a> {
    /// `h * w * c` bytes.
    pub data: &'a mut [u8],
    /// Rows.
    pub h: usize,
    /// Pixels per row.
    pub w: usize,
    /// Channels per pixel (1 or 3).
    pub c: usize,
}

/// torchvision's grayscale value of one RGB pixel in f32: `fma(b, 0.114, fma(g, 0.587, r · 0.2989))` (weights
/// sum to 0.9999, so white is 254.97, truncated to 254 — as torchvision).
#[inline(always)]
pub fn gray_f32(r: u8, g: u8, b: u8) -> f32 {
    f32::from(b).mul_add(0.114, f32::from(g).mul_add(0.587, f32::from(r) * 0.2989))
}

/// `_blend(x, other, ratio)`: `trunc(clamp(fma(other, f32(1 - ratio), x · f32(ratio)), 0, 255))` (`1 - ratio`
/// taken in f64 then rounded, as Python computes it before torch sees it).
#[inline(always)]
fn blend(x: u8, other: f32, ratio: f32, one_minus: f32) -> u8 {
    other.mul_add(one_minus, f32::from(x) * ratio).clamp(0.0, 255.0) as u8
}

/// The two f32 factors of `_blend` for a ratio given as a Python float.
fn blend_factors(ratio: f64) -> (f32, f32) {
    (ratio as f32, (1.0 - ratio) as f32)
}

/// Pixels per block of the RGB kernels: 8 pixels (24 bytes) become 8-lane f32 rows that the compiler keeps in
/// vector registers (one AVX2 register per quantity on the x86-64-v3 path, see [`super::simd`]).
const LANES: usize = 8;

/// A 256-entry table `x ↦ f(x)` for the ops whose output byte depends only on the input byte and per-image
/// constants: the table is computed with the op's own arithmetic, so applying it is exact by construction.
#[inline(always)]
fn lut(f: impl Fn(u8) -> u8) -> [u8; 256] {
    std::array::from_fn(|x| f(x as u8))
}

/// Apply a 256-entry table to every byte.
#[inline(always)]
fn apply_lut(data: &mut [u8], lut: &[u8; 256]) {
    for v in data.iter_mut() {
        *v = lut[usize::from(*v)];
    }
}

/// `floor(gray)` of 8 interleaved RGB pixels (`p.len() == 24`), each lane as [`gray_f32`].
#[inline(always)]
fn gray_floor_block(p: &[u8]) -> [f32; LANES] {
    let p: &[u8; 3 * LANES] = p.try_into().expect("a block of 8 RGB pixels");
    let mut g = [0f32; LANES];
    for (i, gi) in g.iter_mut().enumerate() {
        *gi = gray_f32(p[3 * i], p[3 * i + 1], p[3 * i + 2]).floor();
    }
    g
}

/// `adjust_brightness(f)`: `trunc(clamp(x · f32(f), 0, 255))`, through a table.
/// On the AVX2 path the bytes are computed directly, 32 at a time ([`super::simd::fast::blend_bytes`]:
/// `fma(0, 0, x · f) = x · f` exactly); the table finishes the tail and serves the baseline.
pub fn brightness(img: &mut ImageMut<'_>, factor: f64) {
    let f = factor as f32;
    let done = fast::blend_bytes(img.data, 0.0, f, 0.0);
    let t = lut(|x| (f32::from(x) * f).clamp(0.0, 255.0) as u8);
    apply_lut(&mut img.data[done..], &t);
}

/// `adjust_saturation(f)`: blend with the per-pixel `floor(gray)`; gray images are unchanged.
pub fn saturation(img: &mut ImageMut<'_>, factor: f64) {
    if img.c != 3 {
        return;
    }
    let (r, om) = blend_factors(factor);
    let done = fast::saturation(img.data, r, om);
    dispatch::saturation((&mut img.data[done..], r, om));
}

#[inline(always)]
pub(super) fn saturation_body((data, r, om): (&mut [u8], f32, f32)) {
    let mut blocks = data.chunks_exact_mut(3 * LANES);
    for p in &mut blocks {
        let g = gray_floor_block(p);
        // each byte against its pixel's gray: the 24 lanes of the block, gray widened 8 → 24
        let gg: [f32; 3 * LANES] = std::array::from_fn(|i| g[i / 3]);
        for (v, &gv) in p.iter_mut().zip(&gg) {
            *v = blend(*v, gv, r, om);
        }
    }
    for p in blocks.into_remainder().chunks_exact_mut(3) {
        let g = gray_f32(p[0], p[1], p[2]).floor();
        for v in p.iter_mut() {
            *v = blend(*v, g, r, om);
        }
    }
}

/// `adjust_contrast(f)`: blend with the mean of the image's `floor(gray)` (the channel itself when gray), one
/// scalar for the whole image (summed exactly, divided in f64, rounded to f32: matches torch's f32 mean); the
/// blend with a per-image constant is a table on the baseline, computed 32 bytes at a time on AVX2 ([`fast::blend_bytes`]).
pub fn contrast(img: &mut ImageMut<'_>, factor: f64) {
    let n = img.h * img.w;
    if n == 0 {
        return;
    }
    let sum: u64 = if img.c == 3 {
        let (head, done) = fast::gray_sum(img.data);
        head + dispatch::gray_sum((&img.data[done..],))
    } else {
        img.data.iter().map(|&v| u64::from(v)).sum()
    };
    let mean = (sum as f64 / n as f64) as f32;
    let (r, om) = blend_factors(factor);
    let done = fast::blend_bytes(img.data, mean, r, om);
    let t = lut(|x| blend(x, mean, r, om));
    apply_lut(&mut img.data[done..], &t);
}

/// Σ `trunc(gray)` over the RGB pixels of `data`.
#[inline(always)]
pub(super) fn gray_sum((data,): (&[u8],)) -> u64 {
    let mut blocks = data.chunks_exact(3 * LANES);
    // per-lane u32 partial sums: ≤ 254 per pixel, so a lane overflows only after 16 M blocks; flushed every
    // 65 536 blocks to stay far from it
    let mut total = 0u64;
    let mut acc = [0u32; LANES];
    let mut k = 0u32;
    for p in &mut blocks {
        let g = gray_floor_block(p);
        for (a, gv) in acc.iter_mut().zip(g) {
            *a += gv as u32;
        }
        k += 1;
        if k == 1 << 16 {
            total += acc.iter().map(|&a| u64::from(a)).sum::<u64>();
            (acc, k) = ([0; LANES], 0);
        }
    }
    total += acc.iter().map(|&a| u64::from(a)).sum::<u64>();
    total + blocks.remainder().chunks_exact(3).map(|p| gray_f32(p[0], p[1], p[2]) as u64).sum::<u64>()
}

/// `adjust_hue(h)` for `h` in [-0.5, 0.5]: RGB → HSV in f32, hue shifted modulo 1, back to RGB, then torch's
/// float→uint8 conversion (`× 255.999`, truncated). Gray images are unchanged.
pub fn hue(img: &mut ImageMut<'_>, hue_factor: f64) {
    if img.c != 3 {
        return;
    }
    let hf = hue_factor as f32;
    dispatch::hue((&mut *img.data, hf));
}

#[inline(always)]
pub(super) fn hue_body((data, hf): (&mut [u8], f32)) {
    let mut blocks = data.chunks_exact_mut(3 * LANES);
    for p in &mut blocks {
        // deinterleave into lanes, run the lanes through one vectorizable loop, interleave back
        let (mut r, mut g, mut b) = ([0u8; LANES], [0u8; LANES], [0u8; LANES]);
        for i in 0..LANES {
            (r[i], g[i], b[i]) = (p[3 * i], p[3 * i + 1], p[3 * i + 2]);
        }
        let mut o = [[0u8; 3]; LANES];
        for i in 0..LANES {
            o[i] = hue_px(r[i], g[i], b[i], hf);
        }
        p.copy_from_slice(o.as_flattened());
    }
    for p in blocks.into_remainder().chunks_exact_mut(3) {
        let o = hue_px(p[0], p[1], p[2], hf);
        p.copy_from_slice(&o);
    }
}

/// One pixel of [`hue`], branch-free (selects instead of `if`, so the pixel loop vectorizes) and with torch's
/// `%`/`remainder` written out for the ranges they see here (exact, see the comments), not through `fmod`.
#[inline(always)]
fn hue_px(r: u8, g: u8, b: u8, hf: f32) -> [u8; 3] {
    let k255 = 1.0f32 / 255.0;
    let sixth = 1.0f32 / 6.0;
    let to_u8 = 255.0f32 + 1.0 - 1e-3;
    let (r, g, b) = (f32::from(r) * k255, f32::from(g) * k255, f32::from(b) * k255);
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    let eqc = maxc == minc;
    let cr = maxc - minc;
    let s = cr / if eqc { 1.0 } else { maxc };
    let crd = if eqc { 1.0 } else { cr };
    let (rc, gc, bc) = ((maxc - r) / crd, (maxc - g) / crd, (maxc - b) / crd);
    let hr = if maxc == r { bc - gc } else { 0.0 };
    let hg = if maxc == g && maxc != r { (rc + 2.0) - bc } else { 0.0 };
    let hb = if maxc != g && maxc != r { (gc + 4.0) - rc } else { 0.0 };
    // `x % 1.0` for x = h/6 + 1 in [5/6, 11/6]: x - 1 is exact there (Sterbenz), as fmod's result is
    let x = (hr + hg + hb) * sixth + 1.0;
    let h = if x >= 1.0 { x - 1.0 } else { x };
    // `(h + hf).rem_euclid(1.0)` for h + hf in [-0.5, 1.5): fmod is the identity or an exact `- 1`, then a
    // negative remainder gets `+ 1.0` (rounded, as rem_euclid does)
    let y = h + hf;
    let m = if y >= 1.0 { y - 1.0 } else { y };
    let h = if m < 0.0 { m + 1.0 } else { m };
    let v = maxc;
    let h6 = h * 6.0;
    let fi = h6.floor();
    let f = h6 - fi;
    // h ∈ [0, 1] (a negative remainder + 1 may round up to 1): i ∈ 0..=6, and 6 is sector 0
    let i = fi as i32;
    let i = if i >= 6 { i - 6 } else { i };
    let pp = (v * (1.0 - s)).clamp(0.0, 1.0);
    let q = (v * (1.0 - s * f)).clamp(0.0, 1.0);
    let t = (v * (1.0 - s + s * f)).clamp(0.0, 1.0);
    let o0 = if i == 0 || i == 5 {
        v
    } else if i == 1 {
        q
    } else if i == 4 {
        t
    } else {
        pp
    };
    let o1 = if i == 0 {
        t
    } else if i == 1 || i == 2 {
        v
    } else if i == 3 {
        q
    } else {
        pp
    };
    let o2 = if i == 0 || i == 1 {
        pp
    } else if i == 2 {
        t
    } else if i == 5 {
        q
    } else {
        v
    };
    [(o0 * to_u8) as u8, (o1 * to_u8) as u8, (o2 * to_u8) as u8]
}

/// `rgb_to_grayscale` kept at the image's channel count: each RGB pixel becomes `trunc(gray)` in all three
/// channels (torchvision's `num_output_channels=3`; with 1 the program's image is 1-channel already when the
/// loader outputs gray). Gray images are unchanged.
pub fn grayscale(img: &mut ImageMut<'_>) {
    if img.c != 3 {
        return;
    }
    dispatch::grayscale((&mut *img.data,));
}

#[inline(always)]
pub(super) fn grayscale_body((data,): (&mut [u8],)) {
    let mut blocks = data.chunks_exact_mut(3 * LANES);
    for p in &mut blocks {
        let g = gray_floor_block(p); // ≥ 0, so floor is the truncation torch's cast does
        let gg: [u8; 3 * LANES] = std::array::from_fn(|i| g[i / 3] as u8);
        p.copy_from_slice(&gg);
    }
    for p in blocks.into_remainder().chunks_exact_mut(3) {
        let g = gray_f32(p[0], p[1], p[2]) as u8;
        p.fill(g);
    }
}

/// `255 - x`.
pub fn invert(img: &mut ImageMut<'_>) {
    for v in img.data.iter_mut() {
        *v = !*v;
    }
}

/// `x >= threshold ? 255 - x : x` (compared in f32, so a fractional threshold 128.5 inverts from 129 up): the
/// f32 comparison decides, once per image, the first byte value that inverts; the pixel loop compares bytes.
pub fn solarize(img: &mut ImageMut<'_>, threshold: f64) {
    let t = threshold as f32;
    let Some(first) = (0..=255u8).find(|&v| f32::from(v) >= t) else { return };
    for v in img.data.iter_mut() {
        *v = if *v >= first { 255 - *v } else { *v };
    }
}

/// `x < 128 ? min(x + add, 255) : x` (timm's `solarize_add`, Pillow's `ImageOps._lut`: one table per image).
pub fn solarize_add(img: &mut ImageMut<'_>, add: u32) {
    let lut: [u8; 256] = std::array::from_fn(|v| if v < 128 { (v as u32 + add).min(255) as u8 } else { v as u8 });
    for v in img.data.iter_mut() {
        *v = lut[usize::from(*v)];
    }
}

/// Keep the top `bits` bits (0 → black, 8 → unchanged).
pub fn posterize(img: &mut ImageMut<'_>, bits: u32) {
    if bits >= 8 {
        return;
    }
    let mask = ((1u32 << bits) - 1) << (8 - bits);
    let mask = mask as u8;
    for v in img.data.iter_mut() {
        *v &= mask;
    }
}

/// Per channel: stretch [min, max] to [0, 255] (`trunc(clamp((x - min) / ((max - min) / 255), 0, 255))`, torch
/// divides by the f32 scale); constant channels are unchanged. One pass finds every channel's range, one pass
/// applies the per-channel tables.
pub fn autocontrast(img: &mut ImageMut<'_>) {
    let c = img.c;
    let (mn, mx) = channel_ranges(img.data, c);
    let mut luts = [[0u8; 256]; 3];
    for ch in 0..c {
        let (lo, hi) = (mn[ch], mx[ch]);
        luts[ch] = if lo >= hi {
            lut(|x| x)
        } else {
            let inv = (f32::from(hi) - f32::from(lo)) * (1.0f32 / 255.0);
            let lof = f32::from(lo);
            lut(|x| ((f32::from(x) - lof) / inv).clamp(0.0, 255.0) as u8)
        };
    }
    apply_channel_luts(img.data, c, &luts);
}

/// Per-channel (min, max) of interleaved `c`-channel bytes: lane-wise min/max over 48-byte blocks (48 is a
/// multiple of 1 and 3, so lane `i` always holds channel `i % c`), then folded per channel.
fn channel_ranges(data: &[u8], c: usize) -> ([u8; 3], [u8; 3]) {
    const B: usize = 48;
    let (mut lo, mut hi) = ([255u8; B], [0u8; B]);
    let mut blocks = data.chunks_exact(B);
    for blk in &mut blocks {
        for i in 0..B {
            lo[i] = lo[i].min(blk[i]);
            hi[i] = hi[i].max(blk[i]);
        }
    }
    let (mut mn, mut mx) = ([255u8; 3], [0u8; 3]);
    for i in 0..B {
        mn[i % c] = mn[i % c].min(lo[i]);
        mx[i % c] = mx[i % c].max(hi[i]);
    }
    for (i, &v) in blocks.remainder().iter().enumerate() {
        mn[i % c] = mn[i % c].min(v);
        mx[i % c] = mx[i % c].max(v);
    }
    (mn, mx)
}

/// Byte `i` of interleaved `c`-channel data through `luts[i % c]`.
fn apply_channel_luts(data: &mut [u8], c: usize, luts: &[[u8; 256]; 3]) {
    if c == 1 {
        apply_lut(data, &luts[0]);
        return;
    }
    for p in data.chunks_exact_mut(3) {
        p[0] = luts[0][usize::from(p[0])];
        p[1] = luts[1][usize::from(p[1])];
        p[2] = luts[2][usize::from(p[2])];
    }
}

/// Per-channel histogram equalization, Pillow's and torchvision's LUT: `step = (N - hist[last nonzero]) // 255`,
/// `lut[k] = min(255, (cum[k-1] + step // 2) // step)`; a channel with `step == 0` is unchanged. One pass
/// counts every channel, one pass applies the tables.
pub fn equalize(img: &mut ImageMut<'_>) {
    let c = img.c;
    let n = (img.h * img.w) as u64;
    let mut hists = [[0u64; 256]; 3];
    if c == 1 {
        // two interleaved histograms halve the store-to-load chains of runs of equal bytes
        let mut pair = [[0u64; 256]; 2];
        let mut it = img.data.chunks_exact(2);
        for p in &mut it {
            pair[0][usize::from(p[0])] += 1;
            pair[1][usize::from(p[1])] += 1;
        }
        for &v in it.remainder() {
            pair[0][usize::from(v)] += 1;
        }
        for k in 0..256 {
            hists[0][k] = pair[0][k] + pair[1][k];
        }
    } else {
        for p in img.data.chunks_exact(3) {
            hists[0][usize::from(p[0])] += 1;
            hists[1][usize::from(p[1])] += 1;
            hists[2][usize::from(p[2])] += 1;
        }
    }
    let mut luts = [[0u8; 256]; 3];
    for ch in 0..c {
        let hist = &hists[ch];
        let last = hist.iter().rposition(|&h| h != 0).unwrap_or(0);
        let step = (n - hist[last]) / 255;
        if step == 0 {
            luts[ch] = lut(|x| x);
            continue;
        }
        let mut cum = 0u64;
        for k in 1..256 {
            cum += hist[k - 1];
            luts[ch][k] = ((cum + step / 2) / step).min(255) as u8;
        }
    }
    apply_channel_luts(img.data, c, &luts);
}

/// `adjust_sharpness(f)`: the interior is blended with the 3×3 smoothing `[[1,1,1],[1,5,1],[1,1,1]]/13`
/// (rounded half-to-even) as `fma(blur - x, f32(1 - f), x)`; the 1-pixel border ring is unchanged; images of
/// height or width ≤ 2 are unchanged. `src` is a copy of the input (the blur reads unmodified neighbours).
pub fn sharpness(img: &mut ImageMut<'_>, src: &mut Vec<u8>, factor: f64) {
    let (h, w, c) = (img.h, img.w, img.c);
    if h <= 2 || w <= 2 {
        return;
    }
    src.clear();
    src.extend_from_slice(img.data);
    let om = (1.0 - factor) as f32;
    dispatch::sharpness((&mut *img.data, &src[..], (h, w, c), om));
}

/// [`sharpness`]'s interior: per row, the nine neighbour rows as slices of the interior's length, so the loop
/// over the row's bytes has no bounds checks and vectorizes; each output sums its taps in conv2d's order.
#[inline(always)]
pub(super) fn sharpness_body((dst, src, (h, w, c), om): (&mut [u8], &[u8], (usize, usize, usize), f32)) {
    let (k1, k5) = (1.0f32 / 13.0, 5.0f32 / 13.0);
    let stride = w * c;
    let n = stride - 2 * c;
    for y in 1..h - 1 {
        let row = |yy: usize| {
            let r = &src[yy * stride..(yy + 1) * stride];
            (&r[..n], &r[c..c + n], &r[2 * c..2 * c + n])
        };
        let (a0, a1, a2) = row(y - 1);
        let (b0, b1, b2) = row(y);
        let (d0, d1, d2) = row(y + 1);
        let out = &mut dst[y * stride + c..y * stride + c + n];
        for j in 0..n {
            let f = |v: &[u8]| f32::from(v[j]);
            let mut acc = 0.0f32;
            acc += f(a0) * k1;
            acc += f(a1) * k1;
            acc += f(a2) * k1;
            acc += f(b0) * k1;
            acc += f(b1) * k5;
            acc += f(b2) * k1;
            acc += f(d0) * k1;
            acc += f(d1) * k1;
            acc += f(d2) * k1;
            let blur = acc.round_ties_even().clamp(0.0, 255.0);
            let v = f(b1);
            out[j] = (blur - v).mul_add(om, v).clamp(0.0, 255.0) as u8;
        }
    }
}

/// torchvision's 1-D Gaussian kernel of `k` taps (f32): `x = linspace(-(k-1)/2, (k-1)/2, k)`,
/// `softmax(-0.5 (x/σ)²)`.
pub fn gaussian_kernel(k: usize, sigma: f64) -> Vec<f32> {
    let sigma = sigma as f32;
    let half = (k as f32 - 1.0) * 0.5;
    let e: Vec<f32> = (0..k).map(|i| (i as f32 - half) / sigma).map(|x| -0.5 * x * x).collect();
    let m = e.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let ex: Vec<f32> = e.iter().map(|v| (v - m).exp()).collect();
    let s: f32 = ex.iter().sum();
    ex.iter().map(|v| v / s).collect()
}

/// Index `i` (may be outside `[0, n)`) reflected as torch's "reflect" padding (edge not repeated); for pads
/// wider than the image (torch refuses those) the reflection repeats, so every index lands inside.
#[inline]
pub fn reflect_index(i: isize, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let m = i.rem_euclid(period);
    (if m < n as isize { m } else { period - m }) as usize
}

/// `gaussian_blur(kernel (kx, ky), σ)`: reflect padding, convolution in f32, round half-to-even. Separable
/// (a horizontal pass into `tmp`, then vertical) where torchvision convolves with the 2-D outer product: the
/// same weights, summed in another order, so a rare pixel differs by 1 (torchvision's own conv does as much,
/// see the spec §14.3).
pub fn gaussian_blur(img: &mut ImageMut<'_>, tmp: &mut Vec<f32>, kx: &[f32], ky: &[f32]) {
    let (h, w, c) = (img.h, img.w, img.c);
    if h == 0 || w == 0 {
        return;
    }
    let stride = w * c;
    let padded = (w + 2 * (kx.len() / 2)) * c;
    tmp.clear();
    tmp.resize(h * stride + padded + stride, 0.0);
    dispatch::gaussian_blur((&mut *img.data, &mut tmp[..], (h, w, c), kx, ky));
}

/// [`gaussian_blur_body`]'s arguments: image bytes, scratch, (h, w, c), horizontal and vertical taps.
pub(super) type BlurArgs<'a> = (&'a mut [u8], &'a mut [f32], (usize, usize, usize), &'a [f32], &'a [f32]);

/// [`gaussian_blur`]'s two passes. `tmp`: the horizontal result (`h · w · c`), then one reflect-padded source
/// row, then one accumulator row. The border is handled once per row (the padded row; the vertical pass picks
/// its source rows by reflection before the inner loop), so the inner loops are plain multiply-adds over a row
/// — `acc[j] += src[j + t·c] · k[t]` tap after tap, the same per-output order as the scalar sum — and vectorize.
#[inline(always)]
pub(super) fn gaussian_blur_body((data, tmp, (h, w, c), kx, ky): BlurArgs<'_>) {
    let stride = w * c;
    let (rx, ry) = (kx.len() / 2, ky.len() / 2);
    let (plane, rest) = tmp.split_at_mut(h * stride);
    let (pad, acc) = rest.split_at_mut((w + 2 * rx) * c);
    let acc = &mut acc[..stride];
    for y in 0..h {
        let row = &data[y * stride..(y + 1) * stride];
        for (px, p) in pad.chunks_exact_mut(c).enumerate() {
            let sx = reflect_index(px as isize - rx as isize, w);
            for (o, &v) in p.iter_mut().zip(&row[sx * c..sx * c + c]) {
                *o = f32::from(v);
            }
        }
        let out = &mut plane[y * stride..(y + 1) * stride];
        out.fill(0.0);
        for (t, &k) in kx.iter().enumerate() {
            for (o, &v) in out.iter_mut().zip(&pad[t * c..t * c + stride]) {
                *o += v * k;
            }
        }
    }
    for y in 0..h {
        acc.fill(0.0);
        for (t, &k) in ky.iter().enumerate() {
            let yy = reflect_index(y as isize + t as isize - ry as isize, h);
            for (a, &v) in acc.iter_mut().zip(&plane[yy * stride..(yy + 1) * stride]) {
                *a += v * k;
            }
        }
        for (o, &a) in data[y * stride..(y + 1) * stride].iter_mut().zip(acc.iter()) {
            *o = a.round_ties_even().clamp(0.0, 255.0) as u8;
        }
    }
}

/// `GaussianNoise(mean, sigma, clip)` on uint8 (torchvision 0.29): per byte
/// `trunc(fma(N(0,1), f32(sigma·255), f32(mean·255)))` added in int16, clamped to [0, 255] when `clip`, else
/// wrapped modulo 256. The normals come from [`normal::NormalStream`], keyed by the op's stream `rng`.
pub fn gaussian_noise(img: &mut ImageMut<'_>, rng: &mut SampleRng, (mean, sigma): (f64, f64), clip: bool) {
    let mut stream = normal::NormalStream::new(rng);
    let (m, s) = ((mean * 255.0) as f32, (sigma * 255.0) as f32);
    dispatch::gaussian_noise((&mut *img.data, &mut stream, (m, s), clip));
}

#[inline(always)]
pub(super) fn gaussian_noise_body(
    (data, stream, (m, s), clip): (&mut [u8], &mut normal::NormalStream, (f32, f32), bool),
) {
    let mut z = [0f32; normal::BATCH];
    for chunk in data.chunks_mut(normal::BATCH) {
        stream.next_batch(&mut z);
        for (v, &zz) in chunk.iter_mut().zip(&z) {
            let noise = s.mul_add(zz, m) as i16; // `.to(int16)` truncates toward zero
            let out = i32::from(*v) + i32::from(noise);
            *v = if clip { out.clamp(0, 255) as u8 } else { out as u8 };
        }
    }
}

/// RandomErasing with `value="random"`: every byte of the `eh × ew` box at (`top`, `left`) becomes
/// `clamp(round_half_even(255 · N(0,1)), 0, 255)` (normals in [0, 1] units, written in pixel units; see
/// `OpSpec::RandomErasing`), the normals from [`normal::NormalStream`] keyed by `rng`.
pub fn erase_random(img: &mut ImageMut<'_>, (top, left, eh, ew): (usize, usize, usize, usize), rng: &mut SampleRng) {
    let mut stream = normal::NormalStream::new(rng);
    let (c, stride) = (img.c, img.w * img.c);
    dispatch::erase_random((&mut *img.data, &mut stream, (top, left * c, eh, ew * c), stride));
}

#[inline(always)]
pub(super) fn erase_random_body(
    (data, stream, (top, x0, eh, n), stride): (
        &mut [u8],
        &mut normal::NormalStream,
        (usize, usize, usize, usize),
        usize,
    ),
) {
    let mut z = [0f32; normal::BATCH];
    for y in top..top + eh {
        for chunk in data[y * stride + x0..y * stride + x0 + n].chunks_mut(normal::BATCH) {
            stream.next_batch(&mut z);
            for (e, &zz) in chunk.iter_mut().zip(&z) {
                *e = (255.0 * zz).round_ties_even().clamp(0.0, 255.0) as u8;
            }
        }
    }
}

/// Mirror left-right.
pub fn flip_horizontal(img: &mut ImageMut<'_>) {
    let (w, c) = (img.w, img.c);
    for row in img.data.chunks_exact_mut(w * c) {
        for x in 0..w / 2 {
            for ch in 0..c {
                row.swap(x * c + ch, (w - 1 - x) * c + ch);
            }
        }
    }
}

/// Mirror top-bottom.
pub fn flip_vertical(img: &mut ImageMut<'_>) {
    let stride = img.w * img.c;
    let h = img.h;
    for y in 0..h / 2 {
        let (top, bottom) = img.data.split_at_mut((h - 1 - y) * stride);
        top[y * stride..(y + 1) * stride].swap_with_slice(&mut bottom[..stride]);
    }
}

/// How [`pad_crop`] fills outside the source (torchvision `padding_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    /// A constant per-channel value (`fill`).
    Constant,
    /// Repeat the edge pixel.
    Edge,
    /// Mirror without repeating the edge (`[2,1 | 0,1,2,3 | 2,1]`).
    Reflect,
    /// Mirror repeating the edge (`[1,0 | 0,1,2,3 | 3,2]`).
    Symmetric,
}

/// Source index of padded index `i` (`i` relative to the source's first pixel; may be outside `[0, n)`); `None`
/// for a constant fill. Reflect/symmetric pads wider than the image (torchvision raises) repeat the mirroring.
#[inline]
fn pad_index(i: isize, n: usize, mode: PadMode) -> Option<usize> {
    if (0..n as isize).contains(&i) {
        return Some(i as usize);
    }
    match mode {
        PadMode::Constant => None,
        PadMode::Edge => Some(i.clamp(0, n as isize - 1) as usize),
        PadMode::Reflect => Some(reflect_index(i, n)),
        PadMode::Symmetric => {
            let period = 2 * n as isize;
            let m = i.rem_euclid(period);
            Some((if m < n as isize { m } else { period - 1 - m }) as usize)
        }
    }
}

/// Pad by (`left`, `top`) before the image (conceptually, with `mode` and `fill`) and take the `out_h × out_w`
/// window starting at padded (`top0`, `left0`), i.e. source rows from `top0 - top`: torchvision's `pad` followed
/// by `crop` in one pass into `dst` (which is resized to `out_h * out_w * c`).
#[allow(clippy::too_many_arguments)]
pub fn pad_crop(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    dst: &mut Vec<u8>,
    (out_h, out_w): (usize, usize),
    (y0, x0): (isize, isize),
    mode: PadMode,
    fill: &[u8; 3],
) {
    dst.clear();
    dst.resize(out_h * out_w * c, 0);
    let stride = w * c;
    // The columns whose source is inside the image, [lo, hi): one copy per row; the rest is fill (constant) or
    // mirrored/clamped pixels, taken one by one (pads are narrow; a zoom-out's canvas is mostly fill).
    let lo = (-x0).clamp(0, out_w as isize) as usize;
    let hi = (w as isize - x0).clamp(lo as isize, out_w as isize) as usize;
    let fill_row: Vec<u8> = fill[..c].iter().copied().cycle().take(out_w * c).collect();
    for oy in 0..out_h {
        let row = &mut dst[oy * out_w * c..(oy + 1) * out_w * c];
        let Some(sy) = (if h == 0 || w == 0 { None } else { pad_index(y0 + oy as isize, h, mode) }) else {
            row.copy_from_slice(&fill_row);
            continue;
        };
        let src_row = &src[sy * stride..(sy + 1) * stride];
        if hi > lo {
            let sx0 = (x0 + lo as isize) as usize; // inside the image
            row[lo * c..hi * c].copy_from_slice(&src_row[sx0 * c..(sx0 + hi - lo) * c]);
        }
        for ox in (0..lo).chain(hi..out_w) {
            let px = &mut row[ox * c..(ox + 1) * c];
            match pad_index(x0 + ox as isize, w, mode) {
                Some(sx) => px.copy_from_slice(&src_row[sx * c..(sx + 1) * c]),
                None => px.copy_from_slice(&fill[..c]),
            }
        }
    }
}

/// Overwrite the `eh × ew` box at (`top`, `left`) with `value` (one byte per channel).
pub fn erase(img: &mut ImageMut<'_>, (top, left, eh, ew): (usize, usize, usize, usize), value: &[u8; 3]) {
    let c = img.c;
    let stride = img.w * c;
    for y in top..top + eh {
        for px in img.data[y * stride + left * c..y * stride + (left + ew) * c].chunks_exact_mut(c) {
            px.copy_from_slice(&value[..c]);
        }
    }
}

/// The current image of a program: `buf[..h*w*c]`.
#[derive(Debug, Default)]
pub struct Frame {
    /// Pixels (HWC); may be longer than the image (grown to the largest sample).
    pub buf: Vec<u8>,
    /// Rows.
    pub h: usize,
    /// Columns.
    pub w: usize,
    /// Channels (1 or 3).
    pub c: usize,
}

impl Frame {
    /// The image as a kernel view.
    pub fn view(&mut self) -> ImageMut<'_> {
        let n = self.h * self.w * self.c;
        ImageMut { data: &mut self.buf[..n], h: self.h, w: self.w, c: self.c }
    }
}

/// The kernels' dispatchers ([`super::simd`]'s `kernels!`): each runs its `_body` on the CPU's best path.
// The macro's `#[target_feature]` copy and its call are written (with their SAFETY comments) in simd.rs; only the
// expansion lands here, next to the bodies it inlines.
#[allow(unsafe_code)]
mod dispatch {
    use super as k;

    super::super::simd::kernels! {
        /// [`k::saturation`]'s pixel loop.
        saturation => k::saturation_body, (&mut [u8], f32, f32) => ();
        /// [`k::contrast`]'s Σ gray.
        gray_sum => k::gray_sum, (&[u8],) => u64;
        /// [`k::grayscale`]'s pixel loop.
        grayscale => k::grayscale_body, (&mut [u8],) => ();
        /// [`k::sharpness`]'s interior.
        sharpness => k::sharpness_body, (&mut [u8], &[u8], (usize, usize, usize), f32) => ();
        /// [`k::gaussian_blur`]'s passes.
        gaussian_blur => k::gaussian_blur_body, k::BlurArgs<'_> => ();
        /// [`k::gaussian_noise`]'s byte loop (normal generation included).
        gaussian_noise => k::gaussian_noise_body, (&mut [u8], &mut k::normal::NormalStream, (f32, f32), bool) => ();
        /// [`k::erase_random`]'s byte loop (normal generation included).
        erase_random => k::erase_random_body,
            (&mut [u8], &mut k::normal::NormalStream, (usize, usize, usize, usize), usize) => ();
        /// [`k::hue`]'s pixel loop.
        hue => k::hue_body, (&mut [u8], f32) => ();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn img(data: &mut [u8], h: usize, w: usize, c: usize) -> ImageMut<'_> {
        ImageMut { data, h, w, c }
    }

    /// Every dispatched kernel gives the same bytes on the baseline and the AVX2 path (textured images, both
    /// channel counts, sizes that leave partial blocks and chunks).
    #[test]
    fn simd_paths_give_the_same_bytes() {
        use super::super::simd::{self, Simd};
        use super::super::warp::{self, GridMap, Interp};
        if Simd::available() == Simd::Baseline {
            eprintln!("NOTE: no AVX2 path on this CPU; test skipped");
            return;
        }
        let textured = |h: usize, w: usize, c: usize| -> Vec<u8> {
            (0..h * w * c)
                .map(|i| ((i * 7919) ^ ((i >> 3) * 31)).wrapping_mul(2_654_435_761) as u8 / 2 + (i % 97) as u8)
                .collect()
        };
        let run_all = |h: usize, w: usize, c: usize| -> Vec<Vec<u8>> {
            let src = textured(h, w, c);
            let mut outs = Vec::new();
            let mut each = |f: &dyn Fn(&mut ImageMut<'_>, &mut Vec<u8>)| {
                let mut d = src.clone();
                let mut spare = Vec::new();
                f(&mut img(&mut d, h, w, c), &mut spare);
                outs.push(d);
                outs.push(spare);
            };
            each(&|i, _| saturation(i, 1.7));
            each(&|i, _| saturation(i, 0.3));
            each(&|i, _| contrast(i, 0.4));
            each(&|i, _| contrast(i, 1.6));
            each(&|i, _| brightness(i, 0.6));
            each(&|i, _| brightness(i, 1.45));
            each(&|i, _| hue(i, 0.23));
            each(&|i, _| hue(i, -0.5));
            each(&|i, _| grayscale(i));
            each(&|i, s| sharpness(i, s, 2.5));
            each(&|i, _| gaussian_blur(i, &mut Vec::new(), &gaussian_kernel(7, 1.3), &gaussian_kernel(3, 0.7)));
            each(&|i, _| gaussian_noise(i, &mut SampleRng::new(1, 2, 3, 4), (0.1, 0.3), false));
            each(&|i, _| erase_random(i, (0, 0, i.h, i.w), &mut SampleRng::new(1, 2, 3, 4)));
            let m = warp::inverse_affine([0.0, 0.0], 23.0, [1.0, -2.0], 1.1, [7.0, -3.0]);
            let (st, en) =
                warp::perspective_points(h, w, [1, 0, w as i64 - 3, 2, w as i64 - 1, h as i64 - 2, 0, h as i64 - 1]);
            for map in [GridMap::Affine(m), GridMap::Perspective(warp::perspective_coeffs(st, en).unwrap())] {
                for interp in [Interp::Nearest, Interp::Bilinear] {
                    for fill in [None, Some([0.0; 3]), Some([10.5, 99.0, 300.0])] {
                        each(&|i, s| warp::warp(i.data, (h, w, c), s, (h + 3, w - 1), &map, interp, fill));
                    }
                }
            }
            outs
        };
        for (h, w, c) in [(37, 45, 3), (64, 70, 3), (9, 13, 1), (5, 150, 1)] {
            simd::force(Some(Simd::Baseline));
            let base = run_all(h, w, c);
            simd::force(Some(Simd::available()));
            let fast = run_all(h, w, c);
            simd::force(None);
            for (k, (a, b)) in base.iter().zip(&fast).enumerate() {
                assert_eq!(a, b, "kernel output {k} at {h}×{w}×{c}");
            }
        }
    }

    /// The AVX2 blocks of [`fast`] against the scalar kernels kept as the oracle (the baseline path): every RGB
    /// colour (all 2^24, in 48-byte blocks and a tail) through saturation and contrast's Σ gray at a sweep of
    /// factors, and every byte value through the per-byte blend (brightness, contrast's table) at 3,001
    /// factors × a sweep of means.
    #[test]
    fn fast_kernels_equal_the_scalar_oracle() {
        use super::super::simd::{self, Simd};
        if Simd::available() == Simd::Baseline {
            eprintln!("NOTE: no AVX2 path on this CPU; test skipped");
            return;
        }
        let on = |path: Simd, f: &mut dyn FnMut()| {
            simd::force(Some(path));
            f();
            simd::force(None);
        };
        // every colour once, plus 5 pixels of tail (not a whole block)
        let mut all: Vec<u8> = (0..1u32 << 24).flat_map(|v| [(v >> 16) as u8, (v >> 8) as u8, v as u8]).collect();
        all.extend_from_slice(&[255, 255, 255, 0, 0, 0, 1, 2, 3, 254, 1, 128, 7, 7, 8]);
        let n = all.len() / 3;
        let (mut s_base, mut s_fast) = (0, 0);
        on(Simd::Baseline, &mut || s_base = dispatch::gray_sum((&all[..],)));
        on(Simd::available(), &mut || {
            let (head, done) = fast::gray_sum(&all);
            assert_eq!(done, all.len() / 48 * 48);
            s_fast = head + dispatch::gray_sum((&all[done..],));
        });
        assert_eq!(s_base, s_fast);
        for factor in [0.0, 0.3, 0.7, 0.9999, 1.0, 1.3, 1.87, 2.0] {
            let (mut base, mut quick) = (all.clone(), all.clone());
            on(Simd::Baseline, &mut || saturation(&mut img(&mut base, 1, n, 3), factor));
            on(Simd::available(), &mut || saturation(&mut img(&mut quick, 1, n, 3), factor));
            assert!(base == quick, "saturation({factor})");
        }
        let bytes: Vec<u8> = (0..=255u8).chain(0..=255u8).chain([3, 200, 255]).collect();
        for i in 0..=3000u32 {
            let factor = f64::from(i) / 1000.0;
            let f = factor as f32;
            let mut quick = bytes.clone();
            on(Simd::available(), &mut || brightness(&mut img(&mut quick, 1, bytes.len(), 1), factor));
            for (&x, &q) in bytes.iter().zip(&quick) {
                assert_eq!(q, (f32::from(x) * f).clamp(0.0, 255.0) as u8, "brightness({factor}) of {x}");
            }
            let (r, om) = blend_factors(factor);
            for mean in [0.0f32, 0.5, 17.25, 100.0, 127.996, 254.0] {
                let mut quick = bytes.clone();
                on(Simd::available(), &mut || {
                    let done = fast::blend_bytes(&mut quick, mean, r, om);
                    assert_eq!(done, bytes.len() / 32 * 32);
                });
                for (&x, &q) in bytes[..512].iter().zip(&quick) {
                    assert_eq!(q, blend(x, mean, r, om), "blend({factor}, mean {mean}) of {x}");
                }
            }
        }
    }

    #[test]
    fn white_grays_to_254_as_torchvision() {
        let mut d = [255u8; 3];
        grayscale(&mut img(&mut d, 1, 1, 3));
        assert_eq!(d, [254; 3]);
    }

    #[test]
    fn pad_modes_follow_torch_index_patterns() {
        // 1×4 row [0,1,2,3] padded by 2 on each side.
        let src = [0u8, 1, 2, 3];
        let mut dst = Vec::new();
        let mut run = |mode| {
            pad_crop(&src, (1, 4, 1), &mut dst, (1, 8), (0, -2), mode, &[9, 9, 9]);
            dst.clone()
        };
        assert_eq!(run(PadMode::Constant), [9, 9, 0, 1, 2, 3, 9, 9]);
        assert_eq!(run(PadMode::Edge), [0, 0, 0, 1, 2, 3, 3, 3]);
        assert_eq!(run(PadMode::Reflect), [2, 1, 0, 1, 2, 3, 2, 1]);
        assert_eq!(run(PadMode::Symmetric), [1, 0, 0, 1, 2, 3, 3, 2]);
    }

    #[test]
    fn equalize_leaves_a_constant_channel_and_posterize_zero_is_black() {
        let mut d = [7u8; 12];
        equalize(&mut img(&mut d, 2, 2, 3));
        assert_eq!(d, [7; 12]);
        posterize(&mut img(&mut d, 2, 2, 3), 0);
        assert_eq!(d, [0; 12]);
    }

    #[test]
    fn flips_are_involutions() {
        let orig: Vec<u8> = (0..5 * 3 * 3).map(|v| v as u8).collect();
        let mut d = orig.clone();
        flip_vertical(&mut img(&mut d, 3, 5, 3));
        assert_ne!(d, orig);
        assert_eq!(&d[..15], &orig[30..]);
        flip_vertical(&mut img(&mut d, 3, 5, 3));
        flip_horizontal(&mut img(&mut d, 3, 5, 3));
        assert_eq!(&d[..3], &orig[12..15]);
        flip_horizontal(&mut img(&mut d, 3, 5, 3));
        assert_eq!(d, orig);
    }

    /// `pad_crop` by its definition, one pixel at a time.
    fn pad_crop_by_pixel(
        src: &[u8],
        (h, w, c): (usize, usize, usize),
        (out_h, out_w): (usize, usize),
        (y0, x0): (isize, isize),
        mode: PadMode,
        fill: &[u8; 3],
    ) -> Vec<u8> {
        let mut dst = Vec::with_capacity(out_h * out_w * c);
        for oy in 0..out_h {
            for ox in 0..out_w {
                let sy = if h == 0 { None } else { pad_index(y0 + oy as isize, h, mode) };
                let sx = if w == 0 { None } else { pad_index(x0 + ox as isize, w, mode) };
                match (sy, sx) {
                    (Some(sy), Some(sx)) => dst.extend_from_slice(&src[(sy * w + sx) * c..(sy * w + sx + 1) * c]),
                    _ => dst.extend_from_slice(&fill[..c]),
                }
            }
        }
        dst
    }

    proptest::proptest! {
        #[test]
        fn pad_crop_copies_rows_as_the_per_pixel_definition(
            h in 0usize..9, w in 0usize..9, c in prop_oneof![Just(1usize), Just(3usize)],
            out_h in 0usize..14, out_w in 0usize..14, y0 in -12isize..12, x0 in -12isize..12,
            mode in 0u8..4, seed in any::<u64>(),
        ) {
            let mode = [PadMode::Constant, PadMode::Edge, PadMode::Reflect, PadMode::Symmetric][mode as usize];
            if mode != PadMode::Constant && (h == 0 || w == 0) {
                return Ok(()); // nothing to mirror
            }
            let src: Vec<u8> = (0..h * w * c).map(|i| (seed.wrapping_mul(i as u64 + 1) >> 13) as u8).collect();
            let fill = [7, 8, 9];
            let mut dst = Vec::new();
            pad_crop(&src, (h, w, c), &mut dst, (out_h, out_w), (y0, x0), mode, &fill);
            proptest::prop_assert_eq!(dst, pad_crop_by_pixel(&src, (h, w, c), (out_h, out_w), (y0, x0), mode, &fill));
        }
    }
}
