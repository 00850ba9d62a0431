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
    let rot = angle_deg.to_radians();
    let (sx, sy) = (shear_deg[0].to_radians(), shear_deg[1].to_radians());
    let [cx, cy] = center;
    let [tx, ty] = translate;
    let a = (rot - sy).cos() / sy.cos();
    let b = -(a * sx.tan() + rot.sin());
    let c = (rot - sy).sin() / sy.cos();
    let d = rot.cos() - c * sx.tan();
    let mut m = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0];
    m[2] += cx - m[0] * (cx + tx) - m[1] * (cy + ty);
    m[5] += cy - m[3] * (cx + tx) - m[4] * (cy + ty);
    m
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

/// The grid point of each output pixel, in torchvision's f32 arithmetic (sums of exact f64 products of f32
/// values rounded once: the reference that matched torch bit for bit). Plain data, so a warp allocates nothing.
struct Grid {
    /// x-coefficients (of x, y, 1).
    ax: [f64; 3],
    /// y-coefficients (of x, y, 1).
    by: [f64; 3],
    /// Perspective denominator coefficients (g, h); `None` for affine.
    den: Option<[f64; 2]>,
    /// Output pixel (0, 0)'s coordinates (affine: relative to the centre; perspective: pixel centres).
    origin: [f64; 2],
}

impl Grid {
    fn new(map: &GridMap, (h, w): (usize, usize), (oh, ow): (usize, usize)) -> Self {
        match *map {
            GridMap::Affine(m) => {
                let th = m.map(|v| v as f32);
                let (hw, hh) = ((0.5 * w as f64) as f32, (0.5 * h as f64) as f32);
                Grid {
                    ax: [th[0] / hw, th[1] / hw, th[2] / hw].map(f64::from),
                    by: [th[3] / hh, th[4] / hh, th[5] / hh].map(f64::from),
                    den: None,
                    origin: [(1.0 - ow as f64) * 0.5, (1.0 - oh as f64) * 0.5],
                }
            }
            GridMap::Perspective(k) => {
                let (hw, hh) = ((0.5 * ow as f64) as f32, (0.5 * oh as f64) as f32);
                Grid {
                    ax: [k[0] / hw, k[1] / hw, k[2] / hw].map(f64::from),
                    by: [k[3] / hh, k[4] / hh, k[5] / hh].map(f64::from),
                    den: Some([f64::from(k[6]), f64::from(k[7])]),
                    origin: [0.5, 0.5],
                }
            }
        }
    }

    #[inline]
    fn at(&self, ox: usize, oy: usize) -> (f32, f32) {
        let (x, y) = (self.origin[0] + ox as f64, self.origin[1] + oy as f64);
        let gx = (x * self.ax[0] + y * self.ax[1] + self.ax[2]) as f32;
        let gy = (x * self.by[0] + y * self.by[1] + self.by[2]) as f32;
        match self.den {
            None => (gx, gy),
            Some([g, h]) => {
                let g2 = (x * g + y * h + 1.0) as f32;
                (gx / g2 - 1.0, gy / g2 - 1.0)
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
    let (sw, sh) = ((w as f64 / 2.0) as f32, (h as f64 / 2.0) as f32);
    let stride = w * c;
    let grid = Grid::new(map, (h, w), (oh, ow));
    let inside = |yy: i64, xx: i64| (0..h as i64).contains(&yy) && (0..w as i64).contains(&xx);
    let mut acc = [0f32; 3];
    for oy in 0..oh {
        for ox in 0..ow {
            let (gx, gy) = grid.at(ox, oy);
            let ix = (gx + 1.0) * sw - 0.5;
            let iy = (gy + 1.0) * sh - 0.5;
            let mask;
            match interp {
                Interp::Nearest => {
                    let (xx, yy) = (ix.round_ties_even() as i64, iy.round_ties_even() as i64);
                    if inside(yy, xx) {
                        let o = yy as usize * stride + xx as usize * c;
                        for ch in 0..c {
                            acc[ch] = f32::from(src[o + ch]);
                        }
                        mask = 1.0;
                    } else {
                        acc = [0.0; 3];
                        mask = 0.0;
                    }
                }
                Interp::Bilinear => {
                    let (fx, fy) = (ix.floor(), iy.floor());
                    let (x0, y0) = (fx as i64, fy as i64);
                    let (wx, ny) = (ix - fx, iy - fy);
                    let (ex, sy) = (1.0 - wx, 1.0 - ny);
                    let taps =
                        [(y0, x0, sy * ex), (y0, x0 + 1, sy * wx), (y0 + 1, x0, ny * ex), (y0 + 1, x0 + 1, ny * wx)];
                    acc = [0.0; 3];
                    let mut m = 0.0f32;
                    for (yy, xx, wgt) in taps {
                        if inside(yy, xx) {
                            let o = yy as usize * stride + xx as usize * c;
                            for ch in 0..c {
                                acc[ch] += f32::from(src[o + ch]) * wgt;
                            }
                            m += wgt;
                        } else {
                            // An outside tap adds 0·w (kept so the sums round exactly as torch's do).
                            for a in acc.iter_mut().take(c) {
                                *a += 0.0;
                            }
                            m += 0.0;
                        }
                    }
                    mask = m;
                }
            }
            let px = &mut dst[(oy * ow + ox) * c..(oy * ow + ox + 1) * c];
            for ch in 0..c {
                let v = match (fill, interp) {
                    (None, _) => acc[ch],
                    (Some(f), Interp::Nearest) => {
                        if mask < 0.5 {
                            f[ch]
                        } else {
                            acc[ch]
                        }
                    }
                    (Some(f), Interp::Bilinear) => (acc[ch] - f[ch]) * mask + f[ch],
                };
                px[ch] = v.round_ties_even().clamp(0.0, 255.0) as u8;
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
}
