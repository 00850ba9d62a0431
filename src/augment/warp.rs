//! warp — the grid-sampled geometric pixel ops of a compiled program (RandomRotation, RandomAffine,
//! RandomPerspective, and the policies' ShearX/Y, TranslateX/Y, Rotate): they run in stage 2 of
//! [`super::program`] on the uint8 crop, after the folded ROI/DCT decode + resample and before the final
//! normalize/cast/layout write.
//!
//! The arithmetic is torchvision v2's for uint8 tensors step by step (/work/notes/tv_ops.md §7–10): the inverse
//! affine matrix in f64 (`_get_inverse_affine_matrix`), the normalised sampling grid in f32 (`_affine_grid`,
//! `_perspective_grid`), `grid_sample(align_corners=False, padding_mode="zeros")` in f32 with half-to-even
//! rounding back to uint8, and the fill rule of `_apply_grid_transform`: with `fill=None` the outside is plain
//! zero padding; with any `fill` (torchvision's default `fill=0` of the Random* ops included) a ones-mask is
//! sampled with the same grid and bilinear pixels become `(v - fill)·mask + fill`, so a half-outside border pixel
//! is attenuated twice (`v·m²` for `fill=0`). Porting that gotcha literally is what keeps the borders within ±1
//! of torchvision; a "cleaner" single attenuation differs by up to half a level's worth of brightness there.
//!
//! No allocation per sample: the output goes into the caller's spare buffer (grown once, reused).

use crate::param::Choice;

/// Grid-sample interpolation (torchvision's `InterpolationMode.NEAREST` / `BILINEAR`, the two modes its tensor
/// kernels support for warps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interp {
    /// Nearest source pixel (`rint`, ties to even).
    Nearest,
    /// Bilinear over the 4 neighbours; outside taps count as 0.
    Bilinear,
}

/// The `interpolation` values of the warps (torchvision's `InterpolationMode` values).
pub const WARP_INTERPOLATION: Choice<Interp> =
    Choice { name: "interpolation", values: &[("nearest", Interp::Nearest), ("bilinear", Interp::Bilinear)] };

/// torchvision's `_get_inverse_affine_matrix(center, angle, translate, scale, shear)` (Python doubles): the
/// output → input map `[a, b, c, d, e, f]` about `center` (relative to the image centre), angles in degrees.
pub fn inverse_affine(
    center: [f64; 2],
    angle_deg: f64,
    translate: [f64; 2],
    scale: f64,
    shear_deg: [f64; 2],
) -> [f64; 6] {
    let [a, b, c, d] = rotate_shear(angle_deg, shear_deg);
    let [cx, cy] = center;
    let [tx, ty] = translate;
    let mut m = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0];
    m[2] += cx - m[0] * (cx + tx) - m[1] * (cy + ty);
    m[5] += cy - m[3] * (cx + tx) - m[4] * (cy + ty);
    m
}

/// torchvision's rotation-with-shear matrix `[a, b, c, d]` (`RSS` without the scale, see
/// `_get_inverse_affine_matrix`): `R(angle) · SHy(sy) · SHx(sx)`, angles in degrees.
pub fn rotate_shear(angle_deg: f64, shear_deg: [f64; 2]) -> [f64; 4] {
    let rot = angle_deg.to_radians();
    let (sx, sy) = (shear_deg[0].to_radians(), shear_deg[1].to_radians());
    let a = (rot - sy).cos() / sy.cos();
    let b = -(a * sx.tan() + rot.sin());
    let c = (rot - sy).sin() / sy.cos();
    let d = rot.cos() - c * sx.tan();
    [a, b, c, d]
}

/// torchvision's `_get_perspective_coeffs(start, end)`: the 8 coefficients mapping output points (`end`) to input
/// points (`start`), solved in f64 (Gaussian elimination with partial pivoting; torch's `lstsq` on the exactly
/// determined system agrees to rounding) and rounded to f32 as torchvision does. `None` when the points are
/// degenerate (collinear), where torchvision's solve returns garbage.
pub fn perspective_coeffs(start: [[f64; 2]; 4], end: [[f64; 2]; 4]) -> Option<[f32; 8]> {
    let mut a = [[0f64; 9]; 8];
    for i in 0..4 {
        let ([x2, y2], [x1, y1]) = (start[i], end[i]);
        a[2 * i] = [x1, y1, 1.0, 0.0, 0.0, 0.0, -x2 * x1, -x2 * y1, x2];
        a[2 * i + 1] = [0.0, 0.0, 0.0, x1, y1, 1.0, -y2 * x1, -y2 * y1, y2];
    }
    for col in 0..8 {
        let piv = (col..8).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, piv);
        let pivot_row = a[col];
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (v, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                    *v -= f * p;
                }
            }
        }
    }
    let out: [f32; 8] = std::array::from_fn(|i| (a[i][8] / a[i][i]) as f32);
    out.iter().all(|v| v.is_finite()).then_some(out)
}

/// How output pixels map to input pixels, in torchvision's normalised grid coordinates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GridMap {
    /// `_affine_grid(theta = f32(m))` for the inverse matrix `m` ([`inverse_affine`]).
    Affine([f64; 6]),
    /// `_perspective_grid(coeffs)` ([`perspective_coeffs`]).
    Perspective([f32; 8]),
}

/// The grid point of each output pixel, in torchvision's f32 arithmetic: its `bmm` of the base grid with the
/// rescaled theta is a plain f32 dot product, `(x·a0 + y·a1) + a2` with every product and sum rounded to f32
/// (torch 2.15 on CPU, checked bit for bit against `_affine_grid` / `_perspective_grid`; an f64 sum rounded once
/// differs in the last bit on about a third of the pixels, which moves nearest samples at ties). Plain data, so a
/// warp allocates nothing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Grid {
    /// x-coefficients (of x, y, 1).
    ax: [f32; 3],
    /// y-coefficients (of x, y, 1).
    by: [f32; 3],
    /// Perspective denominator coefficients (g, h); `None` for affine.
    den: Option<[f32; 2]>,
    /// Output pixel (0, 0)'s coordinates (affine: relative to the centre; perspective: pixel centres).
    origin: [f32; 2],
}

impl Grid {
    fn new(map: &GridMap, (h, w): (usize, usize), (oh, ow): (usize, usize)) -> Self {
        match *map {
            GridMap::Affine(m) => {
                let th = m.map(|v| v as f32);
                let (hw, hh) = ((0.5 * w as f64) as f32, (0.5 * h as f64) as f32);
                Grid {
                    ax: [th[0] / hw, th[1] / hw, th[2] / hw],
                    by: [th[3] / hh, th[4] / hh, th[5] / hh],
                    den: None,
                    origin: [((1.0 - ow as f64) * 0.5) as f32, ((1.0 - oh as f64) * 0.5) as f32],
                }
            }
            GridMap::Perspective(k) => {
                let (hw, hh) = ((0.5 * ow as f64) as f32, (0.5 * oh as f64) as f32);
                Grid {
                    ax: [k[0] / hw, k[1] / hw, k[2] / hw],
                    by: [k[3] / hh, k[4] / hh, k[5] / hh],
                    den: Some([k[6], k[7]]),
                    origin: [0.5, 0.5],
                }
            }
        }
    }

    /// The source coordinates `(ix, iy)` (`grid_sample`'s unnormalised, `align_corners=False`) of the `n`
    /// output pixels `ox0..ox0 + n` of row `oy`, into `ix[..n]`, `iy[..n]`: the grid expression of one pixel,
    /// `(x·a0 + y·a1) + a2` in f32 with the row's `y·a1` hoisted (the same value), then `(g + 1)·(side/2) - 0.5`
    /// in f32 — a straight loop that vectorizes. Pixel coordinates are half-integers below 2^23: exact in f32.
    #[inline(always)]
    fn coords(&self, oy: usize, ox0: usize, (sw, sh): (f32, f32), ix: &mut [f32], iy: &mut [f32]) {
        let y = self.origin[1] + oy as f32;
        let (ya, yb) = (y * self.ax[1], y * self.by[1]);
        let x0 = self.origin[0] + ox0 as f32;
        match self.den {
            None => {
                for (i, (px, py)) in ix.iter_mut().zip(iy.iter_mut()).enumerate() {
                    let x = x0 + i as f32;
                    let gx = (x * self.ax[0] + ya) + self.ax[2];
                    let gy = (x * self.by[0] + yb) + self.by[2];
                    *px = (gx + 1.0) * sw - 0.5;
                    *py = (gy + 1.0) * sh - 0.5;
                }
            }
            Some([g, hh]) => {
                let yh = y * hh;
                for (i, (px, py)) in ix.iter_mut().zip(iy.iter_mut()).enumerate() {
                    let x = x0 + i as f32;
                    let gx = (x * self.ax[0] + ya) + self.ax[2];
                    let gy = (x * self.by[0] + yb) + self.by[2];
                    let g2 = (x * g + yh) + 1.0;
                    *px = (gx / g2 - 1.0 + 1.0) * sw - 0.5;
                    *py = (gy / g2 - 1.0 + 1.0) * sh - 0.5;
                }
            }
        }
    }
}

/// Warp `src` (`h × w × c`, uint8 HWC) into `dst` (resized to `oh × ow × c`) through `map` (torchvision's
/// grid + `grid_sample` + fill, see the module docs). `fill`: `None` = zero padding without the mask path;
/// `Some` = torchvision's mask path with this per-channel fill.
#[allow(clippy::too_many_arguments)]
pub fn warp(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    dst: &mut Vec<u8>,
    (oh, ow): (usize, usize),
    map: &GridMap,
    interp: Interp,
    fill: Option<[f32; 3]>,
) {
    dst.clear();
    dst.resize(oh * ow * c, 0);
    if h == 0 || w == 0 {
        return;
    }
    let grid = Grid::new(map, (h, w), (oh, ow));
    let job = WarpJob { src, hwc: (h, w, c), out_hw: (oh, ow), grid, fill };
    match (interp, c) {
        (Interp::Nearest, 3) => dispatch::warp_nearest3((job, &mut dst[..])),
        (Interp::Nearest, _) => dispatch::warp_nearest1((job, &mut dst[..])),
        (Interp::Bilinear, 3) => dispatch::warp_bilinear3((job, &mut dst[..])),
        (Interp::Bilinear, _) => dispatch::warp_bilinear1((job, &mut dst[..])),
    }
}

/// One warp's inputs for the dispatched bodies ([`warp_nearest`], [`warp_bilinear`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct WarpJob<'a> {
    src: &'a [u8],
    hwc: (usize, usize, usize),
    out_hw: (usize, usize),
    grid: Grid,
    fill: Option<[f32; 3]>,
}

/// Output pixels per coordinate chunk (stack arrays: nothing allocated per sample).
const CHUNK: usize = 64;

impl WarpJob<'_> {
    /// `(w/2, h/2)` in f32, as torch computes the unnormalisation.
    fn half_sides(&self) -> (f32, f32) {
        let (h, w, _) = self.hwc;
        ((w as f64 / 2.0) as f32, (h as f64 / 2.0) as f32)
    }

    /// The next chunk of output pixels after `at` (row, column): its coordinates into `ix`/`iy` and its
    /// (first byte in `dst`, pixel count); `None` after the last row. A cursor rather than a closure-taking
    /// helper: the dispatched bodies must contain the whole loop, and rustc does not inline closures into the
    /// `#[target_feature]` copy (measured: floor/rint became library calls).
    #[inline(always)]
    fn next_chunk(
        &self,
        at: &mut (usize, usize),
        ix: &mut [f32; CHUNK],
        iy: &mut [f32; CHUNK],
    ) -> Option<(usize, usize)> {
        let (oh, ow) = self.out_hw;
        let (oy, ox) = *at;
        if oy >= oh || ow == 0 {
            return None;
        }
        let n = CHUNK.min(ow - ox);
        self.grid.coords(oy, ox, self.half_sides(), &mut ix[..n], &mut iy[..n]);
        *at = if ox + n == ow { (oy + 1, 0) } else { (oy, ox + n) };
        Some(((oy * ow + ox) * self.hwc.2, n))
    }
}

/// Nearest: the source pixel at `rint(ix), rint(iy)` (ties to even), or the fill outside. Without the mask
/// path the outside is 0; with it, the mask of an outside pixel is 0 < 0.5 so the fill (rounded half-to-even
/// to a byte) is written — for nearest the mask path reduces to exactly that.
#[inline(always)]
pub(super) fn warp_nearest<const C: usize>((job, dst): (WarpJob<'_>, &mut [u8])) {
    let (h, w, _) = job.hwc;
    let stride = w * C;
    let fill: [u8; 3] = job.fill.map_or([0; 3], |f| f.map(|v| v.round_ties_even().clamp(0.0, 255.0) as u8));
    let fill = &fill[..C];
    let (mut ix, mut iy) = ([0f32; CHUNK], [0f32; CHUNK]);
    let mut at = (0, 0);
    while let Some((off, n)) = job.next_chunk(&mut at, &mut ix, &mut iy) {
        let out = &mut dst[off..off + n * C];
        for ((px, &x), &y) in out.chunks_exact_mut(C).zip(&ix[..n]).zip(&iy[..n]) {
            // saturating casts: NaN → 0 as before, huge values stay outside
            let (xx, yy) = (x.round_ties_even() as i32, y.round_ties_even() as i32);
            if (xx as u32 as usize) < w && (yy as u32 as usize) < h {
                let o = yy as usize * stride + xx as usize * C;
                px.copy_from_slice(&job.src[o..o + C]);
            } else {
                px.copy_from_slice(fill);
            }
        }
    }
}

/// Bilinear: the four taps in torch's order, each `v · weight` added to the channel sums and the weight to the
/// mask; an outside tap adds 0 in torch's sums (`+ 0.0` is a no-op on these non-negative sums), here by giving
/// it weight 0 and a clamped (valid) address. Then zero padding (`round(acc)`) or the mask path
/// (`round((acc - fill)·mask + fill)`). Per chunk: weights and addresses in one vectorized loop, the 4·C loads,
/// then the sums in one vectorized loop per channel.
#[inline(always)]
pub(super) fn warp_bilinear<const C: usize>((job, dst): (WarpJob<'_>, &mut [u8])) {
    let (h, w, _) = job.hwc;
    let stride = w * C;
    let src = job.src;
    let fill = job.fill;
    let (wi, hi) = (w as i64, h as i64);
    let mut wts = [[0f32; CHUNK]; 4];
    let mut offs = [[0usize; CHUNK]; 4];
    let mut vals = [[[0f32; CHUNK]; 4]; C];
    let (mut ix, mut iy) = ([0f32; CHUNK], [0f32; CHUNK]);
    let mut at = (0, 0);
    while let Some((off, n)) = job.next_chunk(&mut at, &mut ix, &mut iy) {
        // the AVX2 form of everything below for RGB (whole 8-pixel blocks; none on the baseline path), the
        // scalar body finishing the rest
        let done = if C == 3 {
            super::simd::fast::warp_bilinear_rgb(src, (h, w), (&ix[..n], &iy[..n]), fill, &mut dst[off..off + n * C])
        } else {
            0
        };
        for i in done..n {
            let (x, y) = (ix[i], iy[i]);
            let (fx, fy) = (x.floor(), y.floor());
            // i64 (saturating casts; NaN → 0 as torch's index math on a NaN grid reads pixel 0); the `+ 1`
            // saturates too, for an infinite coordinate (a perspective whose denominator vanishes)
            let (x0, y0) = (fx as i64, fy as i64);
            let (x1, y1) = (x0.saturating_add(1), y0.saturating_add(1));
            let (wx, ny) = (x - fx, y - fy);
            let (ex, sy) = (1.0 - wx, 1.0 - ny);
            let (inx0, inx1) = ((0..wi).contains(&x0), (0..wi).contains(&x1));
            let (iny0, iny1) = ((0..hi).contains(&y0), (0..hi).contains(&y1));
            let (cx0, cx1) = (x0.clamp(0, wi - 1) as usize, x1.clamp(0, wi - 1) as usize);
            let (cy0, cy1) = (y0.clamp(0, hi - 1) as usize, y1.clamp(0, hi - 1) as usize);
            let taps = [
                (iny0 && inx0, sy * ex, cy0, cx0),
                (iny0 && inx1, sy * wx, cy0, cx1),
                (iny1 && inx0, ny * ex, cy1, cx0),
                (iny1 && inx1, ny * wx, cy1, cx1),
            ];
            for (t, &(inside, wt, yy, xx)) in taps.iter().enumerate() {
                wts[t][i] = if inside { wt } else { 0.0 };
                offs[t][i] = yy * stride + xx * C;
            }
        }
        for t in 0..4 {
            for i in done..n {
                let px = &src[offs[t][i]..offs[t][i] + C];
                for ch in 0..C {
                    vals[ch][t][i] = f32::from(px[ch]);
                }
            }
        }
        let out = &mut dst[off..off + n * C];
        let mut res = [[0u8; CHUNK]; C];
        for ch in 0..C {
            let v = &vals[ch];
            for i in done..n {
                let mut acc = 0.0f32;
                let mut m = 0.0f32;
                for t in 0..4 {
                    acc += v[t][i] * wts[t][i];
                    m += wts[t][i];
                }
                let r = match fill {
                    None => acc,
                    Some(f) => (acc - f[ch]) * m + f[ch],
                };
                res[ch][i] = r.round_ties_even().clamp(0.0, 255.0) as u8;
            }
        }
        for (i, px) in out.chunks_exact_mut(C).enumerate().skip(done) {
            for ch in 0..C {
                px[ch] = res[ch][i];
            }
        }
    }
}

/// `torch.rot90(img, k)` (counter-clockwise quarter turns, k in 1..=3) of `src` into `dst`; returns the new
/// (h, w).
pub fn rot90(src: &[u8], (h, w, c): (usize, usize, usize), dst: &mut Vec<u8>, k: u32) -> (usize, usize) {
    let (oh, ow) = if k % 2 == 1 { (w, h) } else { (h, w) };
    dst.clear();
    dst.resize(oh * ow * c, 0);
    for oy in 0..oh {
        for ox in 0..ow {
            let (sy, sx) = match k {
                1 => (ox, w - 1 - oy),
                2 => (h - 1 - oy, w - 1 - ox),
                _ => (h - 1 - ox, oy),
            };
            let s = (sy * w + sx) * c;
            dst[(oy * ow + ox) * c..(oy * ow + ox + 1) * c].copy_from_slice(&src[s..s + c]);
        }
    }
    (oh, ow)
}

/// torchvision's `_compute_affine_output_size(m, w, h)` for `rotate(expand=True)` (f32 tensor arithmetic):
/// (out_h, out_w).
pub fn expanded_size(m: &[f64; 6], w: usize, h: usize) -> (usize, usize) {
    let th = m.map(|v| v as f32);
    let (hw, hh) = ((0.5 * w as f64) as f32, (0.5 * h as f64) as f32);
    let pts = [(-hw, -hh), (-hw, hh), (hw, hh), (hw, -hh)];
    let (mut mn, mut mx) = ([f32::INFINITY; 2], [f32::NEG_INFINITY; 2]);
    for (x, y) in pts {
        let nx = (f64::from(x) * f64::from(th[0]) + f64::from(y) * f64::from(th[1]) + f64::from(th[2])) as f32;
        let ny = (f64::from(x) * f64::from(th[3]) + f64::from(y) * f64::from(th[4]) + f64::from(th[5])) as f32;
        mn = [mn[0].min(nx), mn[1].min(ny)];
        mx = [mx[0].max(nx), mx[1].max(ny)];
    }
    let (tol, inv_tol) = (1e-4f64 as f32, (1.0 / 1e-4f64) as f32);
    let halfs = [hw, hh];
    let size: [f32; 2] = std::array::from_fn(|i| {
        let cmax = (((mx[i] + halfs[i]) * inv_tol).trunc() * tol).ceil();
        let cmin = (((mn[i] + halfs[i]) * inv_tol).trunc() * tol).floor();
        cmax - cmin
    });
    (size[1].max(0.0) as usize, size[0].max(0.0) as usize)
}

/// `rotate(img, angle, interpolation, expand, center, fill)` of torchvision v2 on `src` into `dst`: the exact
/// quarter-turn fast paths when `center` is None, else the grid. `center` in pixel coordinates (x, y).
/// Returns the output (h, w).
#[allow(clippy::too_many_arguments)]
pub fn rotate(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    dst: &mut Vec<u8>,
    angle_deg: f64,
    interp: Interp,
    expand: bool,
    center: Option<[f64; 2]>,
    fill: Option<[f32; 3]>,
) -> (usize, usize) {
    // Python's `angle % 360` (result in [0, 360), sign of the divisor).
    let mut angle = angle_deg % 360.0;
    if angle < 0.0 {
        angle += 360.0;
    }
    if center.is_none() {
        let quarter = if angle == 0.0 {
            Some(0)
        } else if angle == 180.0 {
            Some(2)
        } else if expand || h == w {
            if angle == 90.0 {
                Some(1)
            } else if angle == 270.0 {
                Some(3)
            } else {
                None
            }
        } else {
            None
        };
        if let Some(k) = quarter {
            if k == 0 {
                dst.clear();
                dst.extend_from_slice(&src[..h * w * c]);
                return (h, w);
            }
            return rot90(src, (h, w, c), dst, k);
        }
    }
    let cf = center.map_or([0.0, 0.0], |[x, y]| [x - w as f64 * 0.5, y - h as f64 * 0.5]);
    let m = inverse_affine(cf, -angle, [0.0, 0.0], 1.0, [0.0, 0.0]);
    let (oh, ow) = if expand { expanded_size(&m, w, h) } else { (h, w) };
    warp(src, (h, w, c), dst, (oh, ow), &GridMap::Affine(m), interp, fill);
    (oh, ow)
}

/// `affine(img, angle, translate, scale, shear, interpolation, fill, center)` of torchvision v2 (output size =
/// input size) on `src` into `dst`.
#[allow(clippy::too_many_arguments)]
pub fn affine(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    dst: &mut Vec<u8>,
    (angle_deg, translate, scale, shear_deg): (f64, [f64; 2], f64, [f64; 2]),
    interp: Interp,
    center: Option<[f64; 2]>,
    fill: Option<[f32; 3]>,
) {
    let cf = center.map_or([0.0, 0.0], |[x, y]| [x - w as f64 * 0.5, y - h as f64 * 0.5]);
    let m = inverse_affine(cf, angle_deg, translate, scale, shear_deg);
    warp(src, (h, w, c), dst, (h, w), &GridMap::Affine(m), interp, fill);
}

/// The perspective's (start, end) corner points of torchvision's `RandomPerspective` for an `h × w` image and
/// the drawn end points `end` (x, y pairs: top-left, top-right, bottom-right, bottom-left).
pub fn perspective_points(h: usize, w: usize, end: [i64; 8]) -> ([[f64; 2]; 4], [[f64; 2]; 4]) {
    let (w1, h1) = (w as f64 - 1.0, h as f64 - 1.0);
    let start = [[0.0, 0.0], [w1, 0.0], [w1, h1], [0.0, h1]];
    let e = end.map(|v| v as f64);
    (start, [[e[0], e[1]], [e[2], e[3]], [e[4], e[5]], [e[6], e[7]]])
}

/// The warps' dispatchers ([`super::simd`]'s `kernels!`).
// The macro's `#[target_feature]` copy and its call are written (with their SAFETY comments) in simd.rs; only the
// expansion lands here, next to the bodies it inlines.
#[allow(unsafe_code)]
mod dispatch {
    use super::{self as wp, WarpJob};

    super::super::simd::kernels! {
        /// [`wp::warp`], nearest, 3 channels.
        warp_nearest3 => wp::warp_nearest::<3>, (WarpJob<'_>, &mut [u8]) => ();
        /// [`wp::warp`], nearest, 1 channel.
        warp_nearest1 => wp::warp_nearest::<1>, (WarpJob<'_>, &mut [u8]) => ();
        /// [`wp::warp`], bilinear, 3 channels.
        warp_bilinear3 => wp::warp_bilinear::<3>, (WarpJob<'_>, &mut [u8]) => ();
        /// [`wp::warp`], bilinear, 1 channel.
        warp_bilinear1 => wp::warp_bilinear::<1>, (WarpJob<'_>, &mut [u8]) => ();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_image_rotated_shows_the_fill_double_attenuation() {
        // tv_ops.md §7.4: 8×8 constant 200 rotated 10° bilinear, first row: fill=None → corner 89, fill=0 → 40.
        let src = [200u8; 64];
        let mut dst = Vec::new();
        rotate(&src, (8, 8, 1), &mut dst, 10.0, Interp::Bilinear, false, None, None);
        assert_eq!(dst[0], 89);
        rotate(&src, (8, 8, 1), &mut dst, 10.0, Interp::Bilinear, false, None, Some([0.0; 3]));
        assert_eq!(dst[0], 40);
    }

    #[test]
    fn quarter_turns_are_exact_and_expand_swaps_the_sides() {
        let src: Vec<u8> = (0..6).collect(); // 2×3 gray: [[0,1,2],[3,4,5]]
        let mut dst = Vec::new();
        // counter-clockwise: the right column becomes the top row
        assert_eq!(rotate(&src, (2, 3, 1), &mut dst, 90.0, Interp::Nearest, true, None, None), (3, 2));
        assert_eq!(dst, [2, 5, 1, 4, 0, 3]);
        assert_eq!(rotate(&src, (2, 3, 1), &mut dst, -180.0, Interp::Nearest, false, None, None), (2, 3));
        assert_eq!(dst, [5, 4, 3, 2, 1, 0]);
        let m = inverse_affine([0.0, 0.0], -30.0, [0.0, 0.0], 1.0, [0.0, 0.0]);
        // torchvision: rotate(zeros(1, 10, 20), 30, expand=True).shape == (1, 20, 24) (corners ±11.16 about the
        // centre 10 → [-1.16, 21.16] → floor/ceil → 24 wide)
        assert_eq!(expanded_size(&m, 20, 10), (20, 24));
    }

    #[test]
    fn identity_perspective_solves_to_the_identity() {
        let (s, e) = perspective_points(30, 40, [0, 0, 39, 0, 39, 29, 0, 29]);
        let k = perspective_coeffs(s, e).unwrap();
        assert_eq!(k, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
        assert!(perspective_coeffs(s, [[0.0, 0.0]; 4]).is_none());
    }

    /// The AVX2 bilinear RGB warp (`simd::fast::warp_bilinear_rgb`) against the scalar body kept as the oracle
    /// (the baseline path): random images of many shapes (the 1-pixel and last-pixel loads included) through
    /// random rotations, shears, translations, scales and perspectives, with fill off, 0 and arbitrary, plus
    /// grids that leave the image entirely or hold NaN (the blocks the fast path hands back to the scalar body).
    #[test]
    fn fast_bilinear_equals_the_scalar_oracle() {
        use super::super::simd::{self, Simd};
        use crate::rng::SampleRng;
        if Simd::available() == Simd::Baseline {
            eprintln!("NOTE: no AVX2 path on this CPU; test skipped");
            return;
        }
        let mut rng = SampleRng::new(7, 0, 0, 0);
        let mut u = |lo: f64, hi: f64| rng.uniform_range(lo, hi);
        let mut cases = 0;
        for k in 0..600 {
            let (h, w) = match k % 6 {
                0 => (1, 1),
                1 => (2, 3),
                2 => (176, 176),
                _ => (u(1.0, 90.0) as usize, u(1.0, 90.0) as usize),
            };
            let src: Vec<u8> = (0..h * w * 3).map(|_| u(0.0, 256.0) as u8).collect();
            let angle = if k % 4 == 0 { 0.0 } else { u(-180.0, 180.0) };
            let translate = [u(-0.6, 0.6) * w as f64, u(-0.6, 0.6) * h as f64];
            let translate = if k % 5 == 0 { translate.map(f64::round) } else { translate };
            let scale = u(0.5, 1.6);
            let shear = if k % 3 == 0 { [0.0, 0.0] } else { [u(-40.0, 40.0), u(-40.0, 40.0)] };
            let center = (k % 7 == 0).then(|| [u(0.0, w as f64), u(0.0, h as f64)]);
            let cf = center.map_or([0.0, 0.0], |[x, y]| [x - w as f64 * 0.5, y - h as f64 * 0.5]);
            let mut maps = vec![GridMap::Affine(inverse_affine(cf, angle, translate, scale, shear))];
            let e = |v: f64, side: usize| (v * side as f64).round() as i64;
            let end = [
                e(u(0.0, 0.3), w),
                e(u(0.0, 0.3), h),
                e(u(0.7, 1.0), w),
                e(u(0.0, 0.3), h),
                e(u(0.7, 1.0), w),
                e(u(0.7, 1.0), h),
                e(u(0.0, 0.3), w),
                e(u(0.7, 1.0), h),
            ];
            let (st, en) = perspective_points(h, w, end);
            // (on tiny images the drawn corners can make the denominator vanish: infinite coordinates)
            maps.extend(perspective_coeffs(st, en).map(GridMap::Perspective));
            if k % 50 == 0 {
                maps.push(GridMap::Affine([1.0, 0.0, 1e9, 0.0, 1.0, -1e9]));
                maps.push(GridMap::Perspective([f32::NAN, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]));
            }
            let fill = [u(0.0, 255.0) as f32, u(-10.0, 300.0) as f32, u(0.0, 255.0).round() as f32];
            let out_hw = if k % 8 == 0 { (u(1.0, 60.0) as usize, u(1.0, 60.0) as usize) } else { (h, w) };
            for map in &maps {
                for fill in [None, Some([0.0; 3]), Some(fill)] {
                    let mut got = [Vec::new(), Vec::new()];
                    for (path, out) in [Simd::Baseline, Simd::Avx2].into_iter().zip(&mut got) {
                        simd::force(Some(path));
                        warp(&src, (h, w, 3), out, out_hw, map, Interp::Bilinear, fill);
                    }
                    simd::force(None);
                    assert_eq!(got[0], got[1], "case {k}: {h}×{w} → {out_hw:?}, {map:?}, fill {fill:?}");
                    cases += 1;
                }
            }
        }
        assert!(cases > 2000, "{cases} cases");
        // the fast path does run: whole blocks in range, stopping at a NaN block
        let src = [7u8; 4 * 4 * 3];
        let (mut ix, iy) = ([1.5f32; 24], [0.25f32; 24]);
        ix[17] = f32::NAN;
        let mut out = [0u8; 24 * 3];
        simd::force(Some(Simd::Avx2));
        let done = simd::fast::warp_bilinear_rgb(&src, (4, 4), (&ix, &iy), None, &mut out);
        simd::force(None);
        assert_eq!(done, 16);
        assert!(out[..48].iter().all(|&v| v == 7) && out[48..].iter().all(|&v| v == 0));
    }
}
