//! `annot::mask` on hostile segmentations. The first byte picks the form, the next four the sides (two big-endian
//! u16: small mostly, up to 32767, or beyond the bounds), the rest is the segmentation:
//! - a compressed string (the bytes as they are, or mapped into pycocotools' alphabet 48..=111);
//! - polygons (coordinates from 8 raw bytes — NaN, infinities, huge — or from 2 bytes on a 0.1 grid, where the
//!   ×5 rounding ties sit; a 0xFF byte starts the next polygon);
//! - uncompressed counts (2 bytes each), merged with a second RLE made from the same bytes.
//!
//! Whatever happens: no panic, no hang, no allocation beyond the documented bounds; every `Ok` RLE is valid
//! (runs sum to h·w); a string survives `rle_to_string` → `rle_from_string`; a window of the mask equals that
//! slice of the whole mask; a merge is the union of the masks; polygons of small coordinates give what a literal
//! port of `rleFrPoly` gives.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trdata::annot::mask::{
    Rle, Segmentation, area, decode, decode_window, merge, rle_from_polygon, rle_from_string, rle_to_string, to_bbox,
    to_rle,
};

fuzz_target!(|data: &[u8]| {
    let [mode, a, b, c, d, rest @ ..] = data else { return };
    let side = |hi: u8, lo: u8| {
        let v = u32::from(u16::from_be_bytes([hi, lo]));
        match hi >> 6 {
            0 | 1 => v % 40,      // small, 0 included
            2 => v & 0x7fff,      // up to MAX_MASK_SIDE - 1 (h·w is still bounded)
            _ => v << 2 | v >> 8, // beyond the bounds too
        }
    };
    let (h, w) = (side(*a, *b), side(*c, *d));
    match mode % 4 {
        0 => check(rle_from_string(rest, h, w), true),
        1 => {
            let s: Vec<u8> = rest.iter().map(|&x| 48 + x % 64).collect();
            check(rle_from_string(&s, h, w), true)
        }
        2 => polygons(*mode, rest, h, w),
        _ => counts(rest, h, w),
    }
});

/// The checks every successful RLE must pass (the whole-mask ones only while the mask is small).
fn check(r: Result<Rle, trdata::annot::mask::MaskError>, round_trip: bool) {
    let Ok(r) = r else { return };
    r.validate().expect("an Ok RLE is valid");
    let _ = (area(&r), to_bbox(&r));
    if round_trip {
        assert_eq!(rle_from_string(&rle_to_string(&r), r.h, r.w).as_ref(), Ok(&r));
    }
    if u64::from(r.h) * u64::from(r.w) > 1 << 16 {
        return;
    }
    let full = decode(&r).unwrap();
    assert_eq!(area(&r) as usize, full.iter().filter(|&&v| v == 1).count());
    let (x0, y0) = (r.w / 3, r.h / 4);
    let (cw, ch) = (r.w - x0 - r.w / 5, r.h - y0 - r.h / 7);
    let mut out = vec![0u8; (cw * ch) as usize];
    decode_window(&r, x0, y0, cw, ch, &mut out).unwrap();
    for y in 0..ch {
        for x in 0..cw {
            assert_eq!(out[(y * cw + x) as usize], full[((y0 + y) * r.w + x0 + x) as usize]);
        }
    }
}

fn polygons(mode: u8, rest: &[u8], h: u32, w: u32) {
    let raw = mode & 0x10 != 0;
    let mut polys: Vec<Vec<f64>> = vec![Vec::new()];
    let mut i = 0;
    while i < rest.len() {
        if rest[i] == 0xFF {
            polys.push(Vec::new());
            i += 1;
            continue;
        }
        let poly = polys.last_mut().unwrap();
        if raw && i + 8 <= rest.len() {
            poly.push(f64::from_le_bytes(rest[i..i + 8].try_into().unwrap()));
            i += 8;
        } else if i + 2 <= rest.len() {
            poly.push(f64::from(i16::from_le_bytes([rest[i], rest[i + 1]])) / 10.0);
            i += 2;
        } else {
            break;
        }
    }
    // The oracle materialises every walk point: only for few, small coordinates.
    let small = |p: &[f64]| p.len() <= 64 && p.iter().all(|v| v.abs() <= 2000.0);
    let result = to_rle(&Segmentation::Polygons(polys.clone()), h, w);
    if let Ok(r) = &result {
        assert_eq!((r.h, r.w), (h, w));
    }
    check(result, true);
    for p in &polys {
        let r = rle_from_polygon(p, h, w);
        if small(p)
            && let Ok(r) = &r
        {
            assert_eq!(r, &reference_fr_poly(p, h, w), "{p:?} on {h}×{w}");
        }
        check(r, false);
    }
}

fn counts(rest: &[u8], h: u32, w: u32) {
    let all: Vec<u32> = rest.chunks_exact(2).map(|c| u32::from(u16::from_le_bytes([c[0], c[1]]))).collect();
    let seg = Segmentation::Counts { size: [h, w], counts: all.clone() };
    let Ok(first) = to_rle(&seg, 1, 1) else { return };
    check(Ok(first.clone()), true);
    // A second RLE of the same size: the same runs, rotated by one pixel of background.
    let mut other = first.counts.clone();
    if other.len() >= 2 && other[1] > 0 {
        other[0] += 1;
        other[1] -= 1;
    }
    let second = Rle { h, w, counts: other };
    if u64::from(h) * u64::from(w) > 1 << 16 {
        return;
    }
    if let Ok(m) = merge(&[first.clone(), second.clone()]) {
        check(Ok(m.clone()), true);
        let (a, b, u) = (decode(&first).unwrap(), decode(&second).unwrap(), decode(&m).unwrap());
        assert!(a.iter().zip(&b).zip(&u).all(|((&x, &y), &z)| z == (x | y)), "merge is not the union");
    }
}

/// `rleFrPoly` as C writes it, every walk point materialised (the oracle for small coordinates).
fn reference_fr_poly(xy: &[f64], h: u32, w: u32) -> Rle {
    let k = xy.len() / 2;
    let mut x: Vec<i64> = (0..k).map(|j| (5.0 * xy[2 * j] + 0.5) as i64).collect();
    let mut y: Vec<i64> = (0..k).map(|j| (5.0 * xy[2 * j + 1] + 0.5) as i64).collect();
    if k > 0 {
        x.push(x[0]);
        y.push(y[0]);
    }
    let (mut u, mut v) = (Vec::new(), Vec::new());
    for j in 0..k {
        let (mut xs, mut xe, mut ys, mut ye) = (x[j], x[j + 1], y[j], y[j + 1]);
        let (dx, dy) = ((xe - xs).abs(), (ys - ye).abs());
        let flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
        if flip {
            std::mem::swap(&mut xs, &mut xe);
            std::mem::swap(&mut ys, &mut ye);
        }
        let s = if dx >= dy { (ye - ys) as f64 / dx as f64 } else { (xe - xs) as f64 / dy as f64 };
        for d in 0..=dx.max(dy) {
            let t = if flip { dx.max(dy) - d } else { d };
            if dx >= dy {
                u.push(t + xs);
                v.push((ys as f64 + s * t as f64 + 0.5) as i64);
            } else {
                v.push(t + ys);
                u.push((xs as f64 + s * t as f64 + 0.5) as i64);
            }
        }
    }
    let mut a = Vec::new();
    for j in 1..u.len() {
        if u[j] == u[j - 1] {
            continue;
        }
        let xd = (if u[j] < u[j - 1] { u[j] } else { u[j] - 1 } as f64 + 0.5) / 5.0 - 0.5;
        if xd.floor() != xd || xd < 0.0 || xd > f64::from(w - 1) {
            continue;
        }
        let yd = (if v[j] < v[j - 1] { v[j] } else { v[j - 1] } as f64 + 0.5) / 5.0 - 0.5;
        let yd = if yd < 0.0 {
            0.0
        } else if yd > f64::from(h) {
            f64::from(h)
        } else {
            yd
        }
        .ceil();
        a.push((xd as i64 * i64::from(h) + yd as i64) as u32);
    }
    a.push(h * w);
    a.sort_unstable();
    let mut p = 0;
    for e in a.iter_mut() {
        (*e, p) = (*e - p, *e);
    }
    let mut b = vec![a[0]];
    let mut j = 1;
    while j < a.len() {
        if a[j] > 0 {
            b.push(a[j]);
            j += 1;
        } else {
            j += 1;
            if j < a.len() {
                *b.last_mut().unwrap() += a[j];
                j += 1;
            }
        }
    }
    Rle { h, w, counts: b }
}
