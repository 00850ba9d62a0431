//! annot/warp — a sample's targets moved with its image: boxes, keypoints and masks under the geometry the
//! image got (the folded prefix's plan: a source span resized, a window of it taken, mirrors), with torchvision
//! v2's kernels' semantics: boxes as `crop`/`resize`/`horizontal_flip` on `BoundingBoxes` compute them (shifted,
//! scaled, clamped to the canvas, mirrored as `W - x`), keypoints as on `KeyPoints` (not clamped, mirrored as
//! `W - 1 - x`), masks as on `Mask` (nearest: output pixel `j` of a resize from `n` to `m` pixels reads pixel
//! `min(floor(j · (n / m)), n - 1)` with the scale in float32, as ATen's nearest kernel; zeros where the window
//! leaves the image). Only the source pixels the output reads are decoded from a mask's RLE.

use super::mask::{MaskError, Rle, decode_window};

/// One axis of a sample's geometry: output pixel `j` (0 ≤ j < `out`) is pixel `start + j` of the source span
/// `[lo, hi)` resized to `resized` pixels (outside `0..resized`: padding).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AxisMap {
    /// First source pixel of the span.
    pub lo: i64,
    /// End (exclusive) of the span.
    pub hi: i64,
    /// Pixels the span is resized to.
    pub resized: i64,
    /// Index in the resized span of output pixel 0 (negative: padding first).
    pub start: i64,
    /// Output pixels.
    pub out: usize,
    /// The image was mirrored along this axis before the span was resized (a flip placed before the resize):
    /// resized pixel `r` then reads the nearest source pixel of the mirrored span,
    /// `hi - 1 - nearest(resized - 1 - r)`, not `lo + nearest(r)`. The two differ because the nearest rule is not
    /// symmetric; the bilinear pixels and the continuous boxes and keypoints are, so they do not care.
    pub mirror_first: bool,
}

impl AxisMap {
    /// A source coordinate (continuous, pixel edges at integers) in output coordinates, before any mirror.
    pub fn point(&self, x: f64) -> f64 {
        (x - self.lo as f64) * (self.resized as f64 / (self.hi - self.lo) as f64) - self.start as f64
    }

    /// The source pixel output pixel `j` reads (nearest), or None for padding.
    pub fn source_pixel(&self, j: usize) -> Option<i64> {
        let r = self.start + j as i64;
        if r < 0 || r >= self.resized {
            return None;
        }
        let n = self.hi - self.lo;
        if self.mirror_first {
            return Some(self.hi - 1 - nearest_index(self.resized - 1 - r, n, self.resized));
        }
        Some(self.lo + nearest_index(r, n, self.resized))
    }
}

/// ATen's nearest source index for output index `j` of a resize from `n` to `m` pixels: `j` when the sizes are
/// equal, `j / 2` when `m = 2n`, else `min(floor(j · s), n - 1)` with `s = n / m` in float32.
pub fn nearest_index(j: i64, n: i64, m: i64) -> i64 {
    if n == m {
        return j;
    }
    if m == 2 * n {
        return j >> 1;
    }
    let scale = n as f32 / m as f32;
    ((j as f32 * scale).floor() as i64).min(n - 1)
}

/// A sample's geometry: both axes and the mirrors applied to the output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TargetGeometry {
    /// Horizontal axis.
    pub x: AxisMap,
    /// Vertical axis.
    pub y: AxisMap,
    /// Output mirrored left-right.
    pub flip: bool,
    /// Output mirrored top-bottom.
    pub vflip: bool,
    /// The geometry crops: boxes are clamped to the output canvas (torchvision's crop kernels clamp, its resize
    /// kernel does not).
    pub clamp: bool,
}

impl TargetGeometry {
    /// Box `[x1, y1, x2, y2]` (source pixels) in output pixels: mapped, clamped to the output canvas when the
    /// geometry crops, mirrored.
    pub fn boxes(&self, b: [f64; 4]) -> [f64; 4] {
        let (w, h) = (self.x.out as f64, self.y.out as f64);
        let map = |a: &AxisMap, v: f64, n: f64| if self.clamp { a.point(v).clamp(0.0, n) } else { a.point(v) };
        let (mut x1, mut x2) = (map(&self.x, b[0], w), map(&self.x, b[2], w));
        let (mut y1, mut y2) = (map(&self.y, b[1], h), map(&self.y, b[3], h));
        if self.flip {
            (x1, x2) = (w - x2, w - x1);
        }
        if self.vflip {
            (y1, y2) = (h - y2, h - y1);
        }
        [x1, y1, x2, y2]
    }

    /// Keypoint `(x, y)` (source pixels) in output pixels, and whether it lies on the canvas.
    pub fn keypoint(&self, x: f64, y: f64) -> (f64, f64, bool) {
        let (w, h) = (self.x.out as f64, self.y.out as f64);
        let (mut px, mut py) = (self.x.point(x), self.y.point(y));
        if self.flip {
            px = w - 1.0 - px;
        }
        if self.vflip {
            py = h - 1.0 - py;
        }
        (px, py, (0.0..w).contains(&px) && (0.0..h).contains(&py))
    }

    /// A dense label map `src` (`h × w`, row-major, the source image's size) as the output sees it: `out` is
    /// `y.out × x.out`, nearest, `fill` where the output leaves the image.
    pub fn dense(&self, src: &[u8], (h, w): (usize, usize), fill: u8, out: &mut [u8]) {
        let (ow, oh) = (self.x.out, self.y.out);
        assert_eq!(out.len(), ow * oh, "out holds the output map");
        assert_eq!(src.len(), w * h, "src holds the source map");
        let pick = |p: Option<i64>, n: usize| p.filter(|&p| p >= 0 && (p as usize) < n).map(|p| p as usize);
        let cols: Vec<Option<usize>> = (0..ow).map(|j| pick(self.x.source_pixel(j), w)).collect();
        out.fill(fill);
        for i in 0..oh {
            let Some(sy) = pick(self.y.source_pixel(i), h) else { continue };
            let oi = if self.vflip { oh - 1 - i } else { i };
            let row = &src[sy * w..(sy + 1) * w];
            let dst = &mut out[oi * ow..(oi + 1) * ow];
            for (j, c) in cols.iter().enumerate() {
                if let Some(sx) = c {
                    dst[if self.flip { ow - 1 - j } else { j }] = row[*sx];
                }
            }
        }
    }

    /// Each output column's source column (mirror applied; None: padding) and each output row's source row.
    pub fn source_indices(&self) -> (Vec<Option<i64>>, Vec<Option<i64>>) {
        let (ow, oh) = (self.x.out, self.y.out);
        let cols = (0..ow).map(|j| self.x.source_pixel(if self.flip { ow - 1 - j } else { j })).collect();
        let rows = (0..oh).map(|i| self.y.source_pixel(if self.vflip { oh - 1 - i } else { i })).collect();
        (cols, rows)
    }

    /// The mask `rle` (of the source image) as the output sees it: `out` is `y.out × x.out`, row-major, 0/1.
    /// Decodes only the source rows and columns the output reads.
    pub fn mask(&self, rle: &Rle, out: &mut [u8]) -> Result<(), MaskError> {
        let (cols, rows) = self.source_indices();
        gather_mask(rle, &cols, &rows, out)
    }
}

/// `out[i][j]` = the mask `rle`'s pixel (`rows[i]`, `cols[j]`) (row-major, 0/1; 0 where an index is None or
/// off the mask): decodes only the window of source pixels the indices read.
pub fn gather_mask(rle: &Rle, cols: &[Option<i64>], rows: &[Option<i64>], out: &mut [u8]) -> Result<(), MaskError> {
    let (ow, oh) = (cols.len(), rows.len());
    assert_eq!(out.len(), ow * oh, "out holds the output mask");
    // the window of source pixels read (clamped to the mask; pixels outside read as 0)
    let span = |v: &[Option<i64>], n: u32| -> Option<(u32, u32)> {
        let lo = v.iter().flatten().copied().min()?.max(0);
        let hi = v.iter().flatten().copied().max()?.min(i64::from(n) - 1);
        (lo <= hi).then(|| (lo as u32, (hi - lo + 1) as u32))
    };
    out.fill(0);
    let (Some((x0, cw)), Some((y0, ch))) = (span(cols, rle.w), span(rows, rle.h)) else { return Ok(()) };
    let mut window = vec![0u8; cw as usize * ch as usize];
    decode_window(rle, x0, y0, cw, ch, &mut window)?;
    let at = |p: Option<i64>, o: u32, n: u32| {
        p.filter(|&p| p >= i64::from(o) && p < i64::from(o + n)).map(|p| (p - i64::from(o)) as usize)
    };
    let cols: Vec<Option<usize>> = cols.iter().map(|&c| at(c, x0, cw)).collect();
    for (i, r) in rows.iter().enumerate() {
        let Some(sy) = at(*r, y0, ch) else { continue };
        let src = &window[sy * cw as usize..(sy + 1) * cw as usize];
        let dst = &mut out[i * ow..(i + 1) * ow];
        for (d, c) in dst.iter_mut().zip(&cols) {
            if let Some(sx) = c {
                *d = src[*sx];
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(lo: i64, hi: i64, resized: i64, start: i64, out: usize) -> AxisMap {
        AxisMap { lo, hi, resized, start, out, mirror_first: false }
    }

    #[test]
    fn nearest_index_is_atens_rule() {
        // torch.nn.functional.interpolate(mode="nearest") of 5 → 3 reads 0, 1, 3; 3 → 5 reads 0, 0, 1, 1, 2
        assert_eq!((0..3).map(|j| nearest_index(j, 5, 3)).collect::<Vec<_>>(), [0, 1, 3]);
        assert_eq!((0..5).map(|j| nearest_index(j, 3, 5)).collect::<Vec<_>>(), [0, 0, 1, 1, 2]);
        assert_eq!((0..6).map(|j| nearest_index(j, 3, 6)).collect::<Vec<_>>(), [0, 0, 1, 1, 2, 2]);
    }

    #[test]
    fn boxes_crop_resize_clamp_and_mirror() {
        // crop x 10..30 of a 40-wide image resized to 10 (×0.5), then mirrored
        let g = TargetGeometry {
            x: axis(10, 30, 10, 0, 10),
            y: axis(0, 20, 20, 0, 20),
            flip: true,
            vflip: false,
            clamp: true,
        };
        // x 12..40 → 1..15 → clamped 1..10 → mirrored 0..9
        assert_eq!(g.boxes([12.0, 2.0, 40.0, 5.0]), [0.0, 2.0, 9.0, 5.0]);
        let (x, _, on) = g.keypoint(12.0, 3.0);
        assert_eq!((x, on), (8.0, true));
        assert!(!g.keypoint(0.0, 3.0).2);
    }

    #[test]
    fn a_mask_is_the_nearest_sample_of_the_kept_window_only() {
        // a 4×6 mask, columns 2..4 set (column-major runs: 2 zero columns, 2 one columns, 2 zero columns)
        let rle = Rle { h: 4, w: 6, counts: vec![8, 8, 8] };
        // a window x 1..5 (4 columns) resized to 2, y 0..4 resized to 4, padded by one column before
        let g =
            TargetGeometry { x: axis(1, 5, 2, -1, 3), y: axis(0, 4, 4, 0, 4), flip: false, vflip: false, clamp: true };
        let mut out = vec![9u8; 12];
        g.mask(&rle, &mut out).unwrap();
        // output col 0: padding; col 1 → resized 0 → source 1 + 0 = 1 (0); col 2 → resized 1 → source 1 + 2 = 3 (1)
        assert_eq!(out, [0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1]);
        let flipped = TargetGeometry { flip: true, ..g };
        flipped.mask(&rle, &mut out).unwrap();
        assert_eq!(out, [1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0]);
    }
}
