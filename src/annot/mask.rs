//! annot/mask — COCO segmentations to masks, bit-exact with pycocotools.
//!
//! A COCO annotation's `segmentation` comes in three forms ([`Segmentation`]): polygons, uncompressed RLE (a list
//! of run lengths) and compressed RLE (pycocotools' string). All three become one [`Rle`]: the mask of an `h × w`
//! canvas as run lengths over the pixels in column-major order (down the first column, then the next), zeros
//! first — a mask that starts with a one has a leading count of 0. That is pycocotools' `RLE`; the functions
//! here are its `common/maskApi.c` (the version in pycocotools 2.0.11, from github.com/ppwwyyxx/cocoapi),
//! ported expression by expression (same integer and double operations, same order) — except that `rleFrPoly`'s
//! edge walk visits only the pairs of points that can fall on the canvas' columns instead of every point (a
//! literal port in the tests, and pycocotools' own outputs in tests/fixtures/coco_masks.json, say it gives the
//! same RLE):
//!
//! | here                  | maskApi.c        | what                                                       |
//! |-----------------------|------------------|------------------------------------------------------------|
//! | [`rle_from_polygon`]  | `rleFrPoly`      | a polygon's mask: ×5 upsampled edge walk, x-boundary points, sort, runs |
//! | [`rle_from_string`]   | `rleFrString`    | the compressed string (6 bits a byte, bytes 48..=111, deltas from index 3) |
//! | [`rle_to_string`]     | `rleToString`    | back to that string                                         |
//! | [`merge`]             | `rleMerge`       | union                                                       |
//! | [`area`], [`to_bbox`] | `rleArea`, `rleToBbox` | ones, and their bounding box `[x, y, w, h]` as doubles |
//!
//! [`to_rle`] is how a loader gets one annotation's mask, as pycocotools' `COCO.annToRLE` does and torchvision's
//! `wrap_dataset_for_transforms_v2` (`segmentation_to_mask`) does for the first two forms:
//! - polygons: `merge(frPyObjects(polygons, h, w))`, with the canvas `h × w` of the image;
//! - uncompressed RLE: `frPyObjects(rle, h, w)`, which ignores `h, w`: the mask has the RLE's own `size`;
//! - compressed RLE: used as it is, with its own `size` (torchvision's wrapper hands it to `frPyObjects`, which
//!   raises on a string; `annToRLE` takes it as it is, and so do we).
//!
//! An RLE's own size is compared with its image's by the COCO parser (annot/coco.rs refuses a file where they
//! differ, naming the annotation): here any size within the bounds is a mask of that size.
//!
//! [`decode_window`] turns only a window (the crop the augmentation keeps) into a 0/1 row-major mask, walking the
//! runs once: O(runs + window), never the whole canvas. [`decode`] is the whole mask (tests).
//!
//! Input comes from strangers' files, so every size is checked before anything is allocated from it, and where
//! pycocotools would read out of bounds, hang, or compute with undefined C behaviour, we return a [`MaskError`]:
//! - sides: `1 ..= MAX_MASK_SIDE` each, and `h·w ≤ MAX_MASK_PIXELS` (so every C `int`/`uint` expression of
//!   `maskApi.c` stays in range and the compressed string needs at most 6 bytes a count);
//! - counts: at most [`MAX_RLE_COUNTS`], each `≤ h·w`, summing to exactly `h·w` (pycocotools does not check:
//!   a short RLE decodes to uninitialised memory there, a long one is a `ValueError` in `decode`);
//! - compressed strings: at most [`MAX_RLE_STRING_BYTES`], bytes in `48..=111`, no value cut off at the end,
//!   at most 6 bytes a value;
//! - polygons: at most [`MAX_POLYGONS`] polygons and [`MAX_POLYGON_COORDS`] numbers a segmentation; every used
//!   coordinate finite with `|5·x + 0.5| < 2^30` (the C `(int)` cast and the edge lengths stay defined); at most
//!   [`MAX_POLYGON_CROSSINGS`] boundary points on the canvas (counted from the edges before the walk). The walk
//!   itself skips the part of each edge outside the canvas' columns, so a coordinate of 1e8 costs nothing more.
//!   (pycocotools walks every ×5 step and allocates for all of them: a coordinate of 1e8 costs it gigabytes,
//!   and a NaN one — `(int)NaN` is `INT_MIN` on x86 — got the Python process killed when we tried.)
//! - merges where `rleMerge` does not give the union: zero-length runs of both inputs at one position make it
//!   stop early with a truncated RLE, and merging that with a further input never returns.
//!
//! Where pycocotools' behaviour is surprising and we keep it (it is what the training data meant):
//! - `frPyObjects` chooses by the *first* polygon's length: exactly 4 numbers means "a list of boxes" (and then
//!   fails: `frBbox` wants an ndarray), fewer than 4 fails too, an empty list fails; the polygons after the
//!   first may have any length. A polygon of an odd count loses its last number (`int(len(p)/2)` points); a
//!   polygon of fewer than 3 points is an empty mask;
//! - `(int)` truncates toward zero, so `(int)(5·x + .5)` rounds negative coordinates toward zero;
//! - `rleToBbox` of an RLE with foreground runs that are all empty gives `[w, h, 2^32 − w + 1, 2^32 − h + 1]`
//!   (unsigned wrap-around);
//! - `rleMerge` keeps zero-length runs of its inputs (where it terminates).

use std::fmt;

/// One annotation's `segmentation` as a COCO file holds it (the three forms pycocotools reads).
#[derive(Debug, Clone, PartialEq)]
pub enum Segmentation {
    /// A list of polygons, each `[x0, y0, x1, y1, …]` in pixels (COCO's non-crowd form).
    Polygons(Vec<Vec<f64>>),
    /// Uncompressed RLE: `{"size": [h, w], "counts": [n0, n1, …]}` (column-major runs, zeros first; crowd form).
    Counts {
        /// `[h, w]` as the file says.
        size: [u32; 2],
        /// The runs.
        counts: Vec<u32>,
    },
    /// Compressed RLE: `{"size": [h, w], "counts": "…"}` (pycocotools' LEB128-like string).
    Compressed {
        /// `[h, w]` as the file says.
        size: [u32; 2],
        /// The string's bytes.
        counts: Vec<u8>,
    },
}

/// Largest height or width of a mask (32768). Real annotations are far smaller (COCO: ≤ 640); satellite tiles
/// and gigapixel scans are cut before they are annotated.
pub const MAX_MASK_SIDE: u32 = 1 << 15;
/// Largest `h·w` of a mask (2^28, e.g. 16384 × 16384): a whole decoded mask is at most 256 MiB, a run fits in
/// 29 bits, so every compressed count has at most 6 bytes and every C expression of `maskApi.c` is defined.
pub const MAX_MASK_PIXELS: u64 = 1 << 28;
/// Most runs one RLE may have (uncompressed `counts` or decoded from a string): 2^24.
pub const MAX_RLE_COUNTS: usize = 1 << 24;
/// Longest compressed RLE string: 2^26 bytes.
pub const MAX_RLE_STRING_BYTES: usize = 1 << 26;
/// Most polygons in one segmentation: 4096.
pub const MAX_POLYGONS: usize = 1 << 12;
/// Most numbers (x and y) in one segmentation's polygons together, and in one polygon: 2^20.
pub const MAX_POLYGON_COORDS: usize = 1 << 20;
/// Most boundary points one segmentation's polygons may put on the canvas (one per edge crossing of a pixel
/// column, before pairs cancel): 2^20, 4 MiB of positions, tens of milliseconds of work. A simple outline
/// crosses each column about twice: a 4000-pixel-wide object's outline is 8000 of them.
pub const MAX_POLYGON_CROSSINGS: u64 = 1 << 20;
/// `|5·x + 0.5|` must stay below this (2^30 + 1): the ×5 grid coordinate `(int)(5·x + .5)` is then within
/// ±(2^30) and an edge's length fits a C `int`. About ±2.1e8 pixels.
const SCALED_LIMIT: f64 = (1u64 << 30) as f64 + 1.0;

/// What was wrong with a segmentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskErrorKind {
    /// A side is 0 or above [`MAX_MASK_SIDE`], or `h·w` is above [`MAX_MASK_PIXELS`], or a mask that is not
    /// the size of the image it is for (a mosaic part's).
    Size,
    /// A polygon coordinate is not finite or too far out (see the module docs).
    Coordinate,
    /// Above a bound: counts, string bytes, polygons, coordinates or boundary points.
    TooLarge,
    /// The runs do not describe the canvas: a count above `h·w`, or a sum other than `h·w`.
    Counts,
    /// A compressed string that is not one: a byte outside `48..=111`, a value cut off, or longer than 6 bytes.
    Encoding,
    /// A form pycocotools refuses too (a polygon list it takes for boxes, an empty or too short list).
    Unsupported,
    /// A window outside the mask, or an output buffer of the wrong length.
    Window,
}

/// A segmentation that could not become a mask: what kind of problem, and the detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaskError {
    /// The category.
    pub kind: MaskErrorKind,
    /// Human-readable detail (the numbers involved).
    pub message: String,
}

impl MaskError {
    fn new(kind: MaskErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

impl fmt::Display for MaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "COCO mask: {:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for MaskError {}

/// A mask as run lengths, exactly pycocotools' `RLE`: `h × w` pixels in column-major order, `counts[0]` zeros,
/// then `counts[1]` ones, and so on alternating. The functions of this module return only RLEs whose counts
/// sum to `h·w` ([`Rle::validate`]); one built by hand is checked where it is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rle {
    /// Height (rows).
    pub h: u32,
    /// Width (columns).
    pub w: u32,
    /// Runs, zeros first.
    pub counts: Vec<u32>,
}

impl Rle {
    /// Checks the sides against the bounds, the number of runs, and that the runs cover exactly `h·w` pixels.
    pub fn validate(&self) -> Result<(), MaskError> {
        let hw = check_size(self.h, self.w)?;
        if self.counts.len() > MAX_RLE_COUNTS {
            return Err(too_many_counts(self.counts.len()));
        }
        let sum: u64 = self.counts.iter().map(|&c| u64::from(c)).sum();
        if sum != hw {
            return Err(MaskError::new(
                MaskErrorKind::Counts,
                format!("runs sum to {sum}, not h·w = {}·{} = {hw}", self.h, self.w),
            ));
        }
        Ok(())
    }
}

/// `h·w` after checking both sides and the product against the bounds.
fn check_size(h: u32, w: u32) -> Result<u64, MaskError> {
    let hw = u64::from(h) * u64::from(w);
    if h == 0 || w == 0 || h > MAX_MASK_SIDE || w > MAX_MASK_SIDE || hw > MAX_MASK_PIXELS {
        return Err(MaskError::new(
            MaskErrorKind::Size,
            format!("size {h}×{w}: each side must be 1..={MAX_MASK_SIDE} and h·w at most {MAX_MASK_PIXELS}"),
        ));
    }
    Ok(hw)
}

fn too_many_counts(n: usize) -> MaskError {
    MaskError::new(MaskErrorKind::TooLarge, format!("{n} runs, more than {MAX_RLE_COUNTS}"))
}

// ---------------------------------------------------------------------------------------------------------------
// Polygons (rleFrPoly)
// ---------------------------------------------------------------------------------------------------------------

/// One polygon edge after `rleFrPoly`'s swap: the walk goes over `t = 0 ..= len` (backwards when `flip`), the
/// point at `t` is [`Edge::point`].
struct Edge {
    xs: i64,
    ys: i64,
    /// `dx >= dy`: `u = t + xs`, `v = (int)(ys + s·t + .5)`; else `u = (int)(xs + s·t + .5)`, `v = t + ys`.
    shallow: bool,
    flip: bool,
    len: i64,
    s: f64,
}

impl Edge {
    fn new(x0: i64, y0: i64, x1: i64, y1: i64) -> Self {
        // int xs=x[j], xe=x[j+1], ys=y[j], ye=y[j+1]; dx=abs(xe-xs); dy=abs(ys-ye);
        let (mut xs, mut xe, mut ys, mut ye) = (x0, x1, y0, y1);
        let dx = (xe - xs).abs();
        let dy = (ys - ye).abs();
        let flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
        if flip {
            std::mem::swap(&mut xs, &mut xe);
            std::mem::swap(&mut ys, &mut ye);
        }
        let shallow = dx >= dy;
        // s = dx>=dy ? (double)(ye-ys)/dx : (double)(xe-xs)/dy;  (0/0 = NaN for a repeated point: unused)
        let s = if shallow { (ye - ys) as f64 / dx as f64 } else { (xe - xs) as f64 / dy as f64 };
        Edge { xs, ys, shallow, flip, len: if shallow { dx } else { dy }, s }
    }

    /// The walk's point at `t`, as C computes it (`(int)` truncates toward zero; the NaN of a repeated point
    /// only ever sits beside points of the same `u`, so its value is never read).
    fn point(&self, t: i64) -> (i64, i64) {
        if self.shallow {
            (t + self.xs, (self.ys as f64 + self.s * t as f64 + 0.5) as i64)
        } else {
            ((self.xs as f64 + self.s * t as f64 + 0.5) as i64, t + self.ys)
        }
    }

    /// `u` of a steep edge at `t` (monotone in `t`: every step of the expression is a monotone rounding).
    fn u(&self, t: i64) -> i64 {
        self.point(t).0
    }

    fn first(&self) -> (i64, i64) {
        self.point(if self.flip { self.len } else { 0 })
    }

    fn last(&self) -> (i64, i64) {
        self.point(if self.flip { 0 } else { self.len })
    }

    /// The columns `c` whose boundary point `u = 5c + 2` this edge may produce: a superset of those it does.
    fn candidate_columns(&self, w: u32) -> (i64, i64) {
        let (umin, umax) = if self.shallow {
            (self.xs, self.xs + self.len)
        } else {
            let (a, b) = (self.u(0), self.u(self.len));
            (a.min(b), a.max(b))
        };
        // A pair's x is `u1` when u falls, `u1 - 1` when it rises: in [umin, umax - 1] either way. The columns
        // with 5c + 2 in that range: c from ceil((umin - 2) / 5) to floor((umax - 3) / 5).
        let lo = (umin + 2).div_euclid(5).max(0);
        let hi = (umax - 3).div_euclid(5).min(i64::from(w) - 1);
        (lo, hi)
    }

    /// Every consecutive pair of this edge's walk that can give a boundary point, handed to `emit` in walk
    /// order (as `(previous, current)`).
    fn pairs(&self, w: u32, mut emit: impl FnMut((i64, i64), (i64, i64))) {
        if self.len == 0 {
            return;
        }
        let (lo, hi) = self.candidate_columns(w);
        let mut pair = |t: i64| {
            // The pair (t-1, t), in walk order.
            let (a, b) = (self.point(t - 1), self.point(t));
            if self.flip { emit(b, a) } else { emit(a, b) }
        };
        if self.shallow {
            // u = t + xs steps by exactly 1: the pair (t-1, t) has x = xs + t - 1 = 5c + 2.
            for c in lo..=hi {
                let t = 5 * c + 3 - self.xs;
                if t >= 1 && t <= self.len {
                    pair(t);
                }
            }
            return;
        }
        // u is monotone in t: for each column, the pair where it crosses from 5c+2 to 5c+3 (either way), found
        // from the straight line's estimate and checked against the exact expression.
        let increasing = self.u(self.len) >= self.u(0);
        for c in lo..=hi {
            let target = 5 * c + 2;
            let past = |t: i64| if increasing { self.u(t) > target } else { self.u(t) <= target };
            let hint = ((target as f64 + 0.5 - self.xs as f64) / self.s).ceil();
            if let Some(t) = first_past(self.len, hint, past)
                && t >= 1
            {
                pair(t);
            }
        }
    }
}

/// The smallest `t` in `0 ..= len` with `past(t)`, for a monotone `past` (false … false, true … true), searched
/// outwards from `hint` (any value: NaN, infinite or out of range are clamped) by doubling steps, then halving:
/// O(log |answer − hint|) evaluations, O(1) when the hint is close.
fn first_past(len: i64, hint: f64, past: impl Fn(i64) -> bool) -> Option<i64> {
    if !past(len) {
        return None;
    }
    let start = if hint.is_nan() { 0 } else { (hint as i64).clamp(0, len) };
    // Bracket: !past(lo) (or lo = -1) and past(hi).
    let (mut lo, mut hi);
    if past(start) {
        hi = start;
        let mut step = 1;
        loop {
            let l = hi - step;
            if l < 0 {
                lo = -1;
                break;
            }
            if !past(l) {
                lo = l;
                break;
            }
            hi = l;
            step *= 2;
        }
    } else {
        lo = start;
        let mut step = 1;
        loop {
            let h = (lo + step).min(len);
            if past(h) {
                hi = h;
                break;
            }
            lo = h;
            step *= 2;
        }
    }
    while hi - lo > 1 {
        let m = lo + (hi - lo) / 2;
        if past(m) { hi = m } else { lo = m }
    }
    Some(hi)
}

/// `rleFrPoly`'s second loop, for one pair of consecutive walk points: the boundary point it keeps, if any, as
/// the column-major position `x·h + y`.
fn boundary_point(prev: (i64, i64), cur: (i64, i64), h: u32, w: u32) -> Option<u32> {
    let ((u0, v0), (u1, v1)) = (prev, cur);
    if u1 == u0 {
        return None;
    }
    // xd=(double)(u[j]<u[j-1]?u[j]:u[j]-1); xd=(xd+.5)/scale-.5;
    let xd = if u1 < u0 { u1 } else { u1 - 1 } as f64;
    let xd = (xd + 0.5) / 5.0 - 0.5;
    if xd.floor() != xd || xd < 0.0 || xd > f64::from(w - 1) {
        return None;
    }
    // yd=(double)(v[j]<v[j-1]?v[j]:v[j-1]); yd=(yd+.5)/scale-.5; clamp to [0, h]; ceil
    let yd = if v1 < v0 { v1 } else { v0 } as f64;
    let mut yd = (yd + 0.5) / 5.0 - 0.5;
    if yd < 0.0 {
        yd = 0.0;
    } else if yd > f64::from(h) {
        yd = f64::from(h);
    }
    let yd = yd.ceil();
    // a = x*h + y ≤ (w-1)·h + h = h·w ≤ 2^28: no overflow.
    Some(xd as u32 * h + yd as u32)
}

/// The ×5 grid coordinates of a polygon's first `k` points (`(int)(scale*xy+.5)`), closed (`x[k] = x[0]`).
fn scaled_points(xy: &[f64], k: usize) -> Result<(Vec<i64>, Vec<i64>), MaskError> {
    let mut x = Vec::with_capacity(k + 1);
    let mut y = Vec::with_capacity(k + 1);
    for (i, &c) in xy[..2 * k].iter().enumerate() {
        let s = 5.0 * c + 0.5;
        if !s.is_finite() || s.abs() >= SCALED_LIMIT {
            return Err(MaskError::new(
                MaskErrorKind::Coordinate,
                format!("polygon coordinate {i} is {c}: not finite, or beyond ±{:.0}", (SCALED_LIMIT - 1.5) / 5.0),
            ));
        }
        let v = s as i64; // truncation toward zero, as C's (int)
        if i % 2 == 0 { x.push(v) } else { y.push(v) }
    }
    if k > 0 {
        x.push(x[0]);
        y.push(y[0]);
    }
    Ok((x, y))
}

/// `rleFrPoly` with a budget of boundary points shared by one segmentation's polygons.
fn fr_poly(xy: &[f64], h: u32, w: u32, budget: &mut u64) -> Result<Rle, MaskError> {
    let hw = check_size(h, w)?;
    if xy.len() > MAX_POLYGON_COORDS {
        return Err(MaskError::new(
            MaskErrorKind::TooLarge,
            format!("polygon of {} numbers, more than {MAX_POLYGON_COORDS}", xy.len()),
        ));
    }
    let k = xy.len() / 2; // frPoly: int(len(p)/2) points; an odd last number is never read
    let (x, y) = scaled_points(xy, k)?;
    let edges: Vec<Edge> = (0..k).map(|j| Edge::new(x[j], y[j], x[j + 1], y[j + 1])).collect();
    // Count the candidate points before keeping any: one per candidate column per edge, one per edge junction.
    let mut need: u64 = 0;
    for e in &edges {
        let (lo, hi) = e.candidate_columns(w);
        need += (hi - lo + 1).max(0) as u64 + 1;
    }
    if need > *budget {
        return Err(MaskError::new(
            MaskErrorKind::TooLarge,
            format!("polygons cross pixel columns more than {MAX_POLYGON_CROSSINGS} times"),
        ));
    }
    *budget -= need;
    let mut a: Vec<u32> = Vec::with_capacity(need as usize + 1);
    for (j, e) in edges.iter().enumerate() {
        e.pairs(w, |p, q| a.extend(boundary_point(p, q, h, w)));
        // The walk goes on from this edge's last point to the next edge's first (not from the last edge back
        // to the first: the C loop starts at j = 1). Both are the shared vertex: for u ≥ 0 they have the same u
        // and give nothing; kept so that the loop is C's.
        if let Some(next) = edges.get(j + 1) {
            a.extend(boundary_point(e.last(), next.first(), h, w));
        }
    }
    Ok(Rle { h, w, counts: runs_from_boundaries(a, hw) })
}

/// `rleFrPoly`'s last part: the sorted boundary positions (with `h·w` appended) to runs; a position that occurs
/// twice cancels.
fn runs_from_boundaries(mut a: Vec<u32>, hw: u64) -> Vec<u32> {
    a.push(hw as u32);
    a.sort_unstable();
    let mut p = 0;
    for v in a.iter_mut() {
        let t = *v;
        *v -= p;
        p = t;
    }
    let mut b = Vec::with_capacity(a.len());
    b.push(a[0]);
    let mut j = 1;
    while j < a.len() {
        if a[j] > 0 {
            b.push(a[j]);
            j += 1;
        } else {
            j += 1;
            if j < a.len() {
                *b.last_mut().expect("b starts with one run") += a[j];
                j += 1;
            }
        }
    }
    b
}

/// The mask of one polygon `[x0, y0, x1, y1, …]` on an `h × w` canvas: pycocotools' `rleFrPoly` with
/// `k = xy.len() / 2` points (an odd last number is ignored, as `frPoly` does), so fewer than 3 points give an
/// empty mask. Refused: a side out of bounds, more than [`MAX_POLYGON_COORDS`] numbers, a used coordinate that
/// is not finite or beyond ±2.1e8, more than [`MAX_POLYGON_CROSSINGS`] boundary points.
pub fn rle_from_polygon(xy: &[f64], h: u32, w: u32) -> Result<Rle, MaskError> {
    let mut budget = MAX_POLYGON_CROSSINGS;
    fr_poly(xy, h, w, &mut budget)
}

// ---------------------------------------------------------------------------------------------------------------
// Compressed strings (rleFrString, rleToString)
// ---------------------------------------------------------------------------------------------------------------

/// pycocotools' compressed RLE string of `rle` (`rleToString`): each count (from index 3 on, its difference with
/// the count two before) as 5-bit groups, low first, in bytes `48 + group (+ 32 when more follow)`, the last
/// group's bit 4 carrying the sign. Any `Rle` encodes; [`rle_from_string`] takes back those that are valid.
pub fn rle_to_string(rle: &Rle) -> Vec<u8> {
    let c = &rle.counts;
    let mut s = Vec::with_capacity(c.len() * 2);
    for i in 0..c.len() {
        let mut x = i64::from(c[i]);
        if i > 2 {
            x -= i64::from(c[i - 2]);
        }
        loop {
            let mut ch = (x & 0x1f) as u8;
            x >>= 5;
            let more = if ch & 0x10 != 0 { x != -1 } else { x != 0 };
            if more {
                ch |= 0x20;
            }
            s.push(ch + 48);
            if !more {
                break;
            }
        }
    }
    s
}

/// The RLE of a compressed string for an `h × w` mask (`rleFrString`), checked: the size, the length
/// ([`MAX_RLE_STRING_BYTES`]), every byte in `48..=111` (C would stop at a NUL and read past a value cut off at
/// the end), at most 6 bytes a value, every count in `0 ..= h·w` and the sum exactly `h·w`.
pub fn rle_from_string(s: &[u8], h: u32, w: u32) -> Result<Rle, MaskError> {
    let hw = check_size(h, w)?;
    if s.len() > MAX_RLE_STRING_BYTES {
        return Err(MaskError::new(
            MaskErrorKind::TooLarge,
            format!("compressed RLE of {} bytes, more than {MAX_RLE_STRING_BYTES}", s.len()),
        ));
    }
    let enc = |msg: String| MaskError::new(MaskErrorKind::Encoding, msg);
    let mut counts: Vec<u32> = Vec::new();
    let mut sum: u64 = 0;
    let mut p = 0;
    while p < s.len() {
        let start = p;
        let mut x: i64 = 0;
        let mut k = 0;
        loop {
            let Some(&byte) = s.get(p) else {
                return Err(enc(format!("value at byte {start} is cut off by the end of the string")));
            };
            if !(48..=111).contains(&byte) {
                return Err(enc(format!("byte {p} is {byte}, outside 48..=111")));
            }
            if k == 6 {
                return Err(enc(format!("value at byte {start} is longer than 6 bytes")));
            }
            let c = i64::from(byte - 48);
            x |= (c & 0x1f) << (5 * k);
            let more = c & 0x20 != 0;
            p += 1;
            k += 1;
            if !more {
                if c & 0x10 != 0 {
                    x |= -1i64 << (5 * k);
                }
                break;
            }
        }
        let m = counts.len();
        if m > 2 {
            x += i64::from(counts[m - 2]);
        }
        if x < 0 || x as u64 > hw {
            return Err(MaskError::new(
                MaskErrorKind::Counts,
                format!("run {m} (byte {start}) is {x}, outside 0..={hw} for {h}×{w}"),
            ));
        }
        sum += x as u64;
        if sum > hw {
            return Err(MaskError::new(MaskErrorKind::Counts, format!("runs sum past h·w = {hw} at run {m}")));
        }
        if m == MAX_RLE_COUNTS {
            return Err(too_many_counts(m + 1));
        }
        counts.push(x as u32);
    }
    if sum != hw {
        return Err(MaskError::new(MaskErrorKind::Counts, format!("runs sum to {sum}, not h·w = {hw}")));
    }
    Ok(Rle { h, w, counts })
}

// ---------------------------------------------------------------------------------------------------------------
// Merge, area, bbox
// ---------------------------------------------------------------------------------------------------------------

/// `rleMerge`'s loop for two RLEs of the same size (union), zero-length runs kept as C keeps them. `None` where
/// C would never return: a step that consumes nothing and loads nothing (one side exhausted, the other not).
fn merge_pair(a: &[u32], b: &[u32]) -> Option<Vec<u32>> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut ca, mut cb) = (a.first().copied().unwrap_or(0), b.first().copied().unwrap_or(0));
    let (mut v, mut va, mut vb) = (false, false, false);
    let (mut ia, mut ib) = (1, 1);
    let mut cc: u32 = 0;
    let mut ct: u32 = 1;
    while ct > 0 {
        let c = ca.min(cb);
        let loads = (ia, ib);
        cc = cc.wrapping_add(c);
        ct = 0;
        ca -= c;
        if ca == 0 && ia < a.len() {
            ca = a[ia];
            ia += 1;
            va = !va;
        }
        ct = ct.wrapping_add(ca);
        cb -= c;
        if cb == 0 && ib < b.len() {
            cb = b[ib];
            ib += 1;
            vb = !vb;
        }
        ct = ct.wrapping_add(cb);
        let vp = v;
        v = va || vb;
        if v != vp || ct == 0 {
            out.push(cc);
            cc = 0;
        }
        if c == 0 && loads == (ia, ib) && ct > 0 {
            return None;
        }
    }
    Some(out)
}

/// `merge_pair`, or the error for what C does instead of a union there.
fn merge_checked(a: &[u32], b: &[u32], hw: u64) -> Result<Vec<u32>, MaskError> {
    match merge_pair(a, b) {
        Some(out) if out.iter().map(|&c| u64::from(c)).sum::<u64>() == hw => Ok(out),
        _ => Err(MaskError::new(
            MaskErrorKind::Counts,
            "zero-length runs of two inputs meet: pycocotools' rleMerge stops there with a truncated RLE \
             (and loops for ever when it merges that with a further input)",
        )),
    }
}

/// The union of RLEs of one size: pycocotools' `rleMerge` (pairwise from the first, zero-length runs of the
/// inputs kept as C keeps them). Each input is [validated](Rle::validate) first. Where C returns something that
/// is not the union, this is an error: no input or sizes that differ (C: an empty 0×0 RLE), and zero-length runs
/// of both sides at one position (C stops the loop there and returns a truncated RLE; merging that with a
/// further input never ends). Cost: each step is linear in the runs so far, so many inputs cost their number
/// times the runs.
pub fn merge(rles: &[Rle]) -> Result<Rle, MaskError> {
    let Some(first) = rles.first() else {
        return Err(MaskError::new(MaskErrorKind::Unsupported, "merge of no RLEs"));
    };
    for r in rles {
        r.validate()?;
        if (r.h, r.w) != (first.h, first.w) {
            return Err(MaskError::new(
                MaskErrorKind::Size,
                format!("merge of RLEs of sizes {}×{} and {}×{}", first.h, first.w, r.h, r.w),
            ));
        }
    }
    let hw = u64::from(first.h) * u64::from(first.w);
    let mut counts = first.counts.clone();
    for r in &rles[1..] {
        counts = merge_checked(&counts, &r.counts, hw)?;
    }
    Ok(Rle { h: first.h, w: first.w, counts })
}

/// The union of canonical RLEs (no zero-length run but a leading one: what `rleFrPoly` makes) of one size, by
/// pairs in a tournament: O(runs · log n). The union of canonical RLEs is canonical whatever the order, so this
/// is what pycocotools' left-to-right `rleMerge` gives, without its n · runs cost (and two canonical inputs
/// never meet C's early stop: only their first runs can be empty).
fn union_canonical(mut level: Vec<Rle>) -> Result<Rle, MaskError> {
    while level.len() > 1 {
        let mut next = Vec::with_capacity(level.len().div_ceil(2));
        let mut it = level.into_iter();
        while let Some(a) = it.next() {
            match it.next() {
                Some(b) => {
                    let hw = u64::from(a.h) * u64::from(a.w);
                    next.push(Rle { h: a.h, w: a.w, counts: merge_checked(&a.counts, &b.counts, hw)? })
                }
                None => next.push(a),
            }
        }
        level = next;
    }
    level.pop().ok_or_else(|| MaskError::new(MaskErrorKind::Unsupported, "union of no RLEs"))
}

/// Number of ones (`rleArea`: the sum of the odd-indexed runs; C's unsigned wrap-around on an invalid RLE).
pub fn area(rle: &Rle) -> u32 {
    rle.counts.iter().skip(1).step_by(2).fold(0u32, |a, &c| a.wrapping_add(c))
}

/// The ones' bounding box `[x, y, width, height]` as doubles, pycocotools 2.0.11's `rleToBbox` (computed per
/// foreground run; a run that spans columns covers every row). An RLE without a complete (zero, one) pair of
/// runs gives zeros; one whose foreground runs are all empty gives `[w, h, 2^32 − w + 1, 2^32 − h + 1]` (the C
/// unsigned wrap-around). Never panics, whatever the RLE (a 0-row one gives zeros).
pub fn to_bbox(rle: &Rle) -> [f64; 4] {
    let (h, w) = (rle.h, rle.w);
    let m = rle.counts.len() / 2 * 2;
    if m == 0 || h == 0 {
        return [0.0; 4];
    }
    let (mut xs, mut ys, mut xe, mut ye) = (w, h, 0u32, 0u32);
    let mut cc: u32 = 0;
    for (j, &n) in rle.counts[..m].iter().enumerate() {
        let start = cc;
        cc = cc.wrapping_add(n);
        if j % 2 == 0 || n == 0 {
            continue;
        }
        let y_start = start % h;
        let x_start = (start - y_start) / h;
        let end = cc.wrapping_sub(1);
        let y_end = end % h;
        let x_end = (end - y_end) / h;
        xs = xs.min(x_start);
        xe = xe.max(x_end);
        if x_start < x_end {
            ys = 0;
            ye = h - 1;
        } else {
            ys = ys.min(y_start);
            ye = ye.max(y_end);
        }
    }
    [
        f64::from(xs),
        f64::from(ys),
        f64::from(xe.wrapping_sub(xs).wrapping_add(1)),
        f64::from(ye.wrapping_sub(ys).wrapping_add(1)),
    ]
}

// ---------------------------------------------------------------------------------------------------------------
// Segmentation → RLE
// ---------------------------------------------------------------------------------------------------------------

/// One annotation's mask as pycocotools' `COCO.annToRLE` makes it (see the module docs for torchvision):
/// - polygons on the `h × w` canvas: `merge(frPyObjects(polygons, h, w))`. Like `frPyObjects`, the first
///   polygon decides: 5 or more numbers means polygons (the others may have any length); 4 or fewer, or no
///   polygon at all, is refused (pycocotools raises: a 4-number first polygon makes the list "boxes"). Bounded by
///   [`MAX_POLYGONS`], [`MAX_POLYGON_COORDS`] and [`MAX_POLYGON_CROSSINGS`] for the whole segmentation;
/// - uncompressed RLE: its own `size` (`frUncompressedRLE` ignores `h, w`), its runs as they are, validated;
/// - compressed RLE: its own `size`, through [`rle_from_string`].
pub fn to_rle(seg: &Segmentation, h: u32, w: u32) -> Result<Rle, MaskError> {
    match seg {
        Segmentation::Polygons(polys) => {
            check_size(h, w)?;
            let Some(first) = polys.first() else {
                return Err(MaskError::new(
                    MaskErrorKind::Unsupported,
                    "empty polygon list (pycocotools: IndexError in frPyObjects)",
                ));
            };
            if first.len() <= 4 {
                return Err(MaskError::new(
                    MaskErrorKind::Unsupported,
                    format!(
                        "first polygon has {} numbers: pycocotools' frPyObjects needs more than 4 (4 means a list \
                         of boxes, which it then refuses)",
                        first.len()
                    ),
                ));
            }
            if polys.len() > MAX_POLYGONS {
                return Err(MaskError::new(
                    MaskErrorKind::TooLarge,
                    format!("{} polygons, more than {MAX_POLYGONS}", polys.len()),
                ));
            }
            let total: usize = polys.iter().map(Vec::len).sum();
            if total > MAX_POLYGON_COORDS {
                return Err(MaskError::new(
                    MaskErrorKind::TooLarge,
                    format!("polygons of {total} numbers, more than {MAX_POLYGON_COORDS}"),
                ));
            }
            let mut budget = MAX_POLYGON_CROSSINGS;
            let rles = polys.iter().map(|p| fr_poly(p, h, w, &mut budget)).collect::<Result<Vec<_>, _>>()?;
            union_canonical(rles)
        }
        Segmentation::Counts { size: [rh, rw], counts } => {
            check_size(*rh, *rw)?;
            if counts.len() > MAX_RLE_COUNTS {
                return Err(too_many_counts(counts.len()));
            }
            let rle = Rle { h: *rh, w: *rw, counts: counts.clone() };
            rle.validate()?;
            Ok(rle)
        }
        Segmentation::Compressed { size: [rh, rw], counts } => rle_from_string(counts, *rh, *rw),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------------------------

/// The 0/1 mask of the window `[x0, x0 + cw) × [y0, y0 + ch)` of `rle`, row-major (`out[(y - y0)·cw + x - x0]`),
/// without the rest of the canvas: one walk over the runs, O(runs + cw·ch). `out` must hold exactly `cw·ch`
/// bytes; the window must lie inside the mask; the RLE must be [valid](Rle::validate).
pub fn decode_window(rle: &Rle, x0: u32, y0: u32, cw: u32, ch: u32, out: &mut [u8]) -> Result<(), MaskError> {
    rle.validate()?;
    let (x0, y0, cw, ch) = (u64::from(x0), u64::from(y0), u64::from(cw), u64::from(ch));
    let (h, w) = (u64::from(rle.h), u64::from(rle.w));
    if x0 + cw > w || y0 + ch > h || out.len() as u64 != cw * ch {
        return Err(MaskError::new(
            MaskErrorKind::Window,
            format!("window {cw}×{ch} at ({x0}, {y0}) with {} output bytes, for a {}×{} mask", out.len(), rle.w, rle.h),
        ));
    }
    out.fill(0);
    if cw == 0 || ch == 0 {
        return Ok(());
    }
    let cw_us = cw as usize;
    let win_start = x0 * h + y0; // first pixel of the window, column-major
    let win_end = (x0 + cw - 1) * h + y0 + ch; // one past its last
    let mut pos: u64 = 0;
    for (i, &n) in rle.counts.iter().enumerate() {
        let start = pos;
        pos += u64::from(n);
        if i % 2 == 0 || n == 0 || pos <= win_start {
            continue;
        }
        if start >= win_end {
            break;
        }
        // Ones at [start, pos): per column of the window they touch, the rows they cover there.
        let col_first = (start / h).max(x0);
        let col_last = ((pos - 1) / h).min(x0 + cw - 1);
        for col in col_first..=col_last {
            let base = col * h;
            let r0 = start.max(base) - base;
            let r1 = pos.min(base + h) - base;
            let (a, b) = (r0.max(y0), r1.min(y0 + ch));
            let xo = (col - x0) as usize;
            for y in a..b {
                out[(y - y0) as usize * cw_us + xo] = 1;
            }
        }
    }
    Ok(())
}

/// The whole 0/1 mask of a [valid](Rle::validate) RLE, row-major (`h·w` bytes, at most [`MAX_MASK_PIXELS`]).
pub fn decode(rle: &Rle) -> Result<Vec<u8>, MaskError> {
    let hw = check_size(rle.h, rle.w)?;
    rle.validate()?;
    let mut out = vec![0u8; hw as usize];
    decode_window(rle, 0, 0, rle.w, rle.h, &mut out)?;
    Ok(out)
}

#[cfg(test)]
#[path = "mask_tests.rs"]
mod tests;
