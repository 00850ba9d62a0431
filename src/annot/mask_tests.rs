//! Tests of annot/mask: pycocotools' own outputs (tests/fixtures/coco_masks.json, written by
//! scripts/make_coco_mask_fixtures.py), a literal port of `rleFrPoly` as the reference of the column-skipping
//! walk, and properties (windows, string round trips, hostile input never panics).

use super::*;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------------------------
// A small JSON reader for the fixture (the crate has no JSON dependency; the file is ours).
// ---------------------------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Json {
    Null,
    Bool,
    Num(String),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    fn at(&self, key: &str) -> &Json {
        self.get(key).unwrap_or_else(|| panic!("no key {key:?}"))
    }
    fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(a) => a,
            other => panic!("not an array: {other:?}"),
        }
    }
    fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }
    /// The number exactly as written, parsed by Rust's correctly rounded `f64` parser (Python writes `repr`).
    fn f64(&self) -> f64 {
        match self {
            Json::Num(s) => s.parse().unwrap(),
            other => panic!("not a number: {other:?}"),
        }
    }
    fn u32(&self) -> u32 {
        match self {
            Json::Num(s) => s.parse().unwrap(),
            other => panic!("not an integer: {other:?}"),
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    p: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.p < self.s.len() && self.s[self.p].is_ascii_whitespace() {
            self.p += 1;
        }
    }
    fn eat(&mut self, c: u8) {
        self.ws();
        assert_eq!(self.s[self.p], c, "at byte {}", self.p);
        self.p += 1;
    }
    fn value(&mut self) -> Json {
        self.ws();
        match self.s[self.p] {
            b'{' => {
                self.p += 1;
                let mut kv = Vec::new();
                self.ws();
                if self.s[self.p] == b'}' {
                    self.p += 1;
                    return Json::Obj(kv);
                }
                loop {
                    self.ws();
                    let Json::Str(k) = self.value() else { panic!("key") };
                    self.eat(b':');
                    kv.push((k, self.value()));
                    self.ws();
                    self.p += 1;
                    if self.s[self.p - 1] == b'}' {
                        return Json::Obj(kv);
                    }
                }
            }
            b'[' => {
                self.p += 1;
                let mut a = Vec::new();
                self.ws();
                if self.s[self.p] == b']' {
                    self.p += 1;
                    return Json::Arr(a);
                }
                loop {
                    a.push(self.value());
                    self.ws();
                    self.p += 1;
                    if self.s[self.p - 1] == b']' {
                        return Json::Arr(a);
                    }
                }
            }
            b'"' => {
                self.p += 1;
                let mut out = Vec::new();
                while self.s[self.p] != b'"' {
                    if self.s[self.p] == b'\\' {
                        // The fixture's strings are ASCII: only the one-character escapes occur.
                        self.p += 1;
                        out.push(match self.s[self.p] {
                            b'n' => b'\n',
                            b't' => b'\t',
                            c @ (b'"' | b'\\' | b'/') => c,
                            c => panic!("escape \\{} in the fixture", c as char),
                        });
                    } else {
                        out.push(self.s[self.p]);
                    }
                    self.p += 1;
                }
                self.p += 1;
                Json::Str(String::from_utf8(out).unwrap())
            }
            b't' => {
                self.p += 4;
                Json::Bool
            }
            b'f' => {
                self.p += 5;
                Json::Bool
            }
            b'n' => {
                self.p += 4;
                Json::Null
            }
            _ => {
                let start = self.p;
                while self.p < self.s.len() && matches!(self.s[self.p], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    self.p += 1;
                }
                Json::Num(String::from_utf8(self.s[start..self.p].to_vec()).unwrap())
            }
        }
    }
}

fn fixture() -> Json {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/coco_masks.json");
    let bytes = std::fs::read(path).unwrap();
    Parser { s: &bytes, p: 0 }.value()
}

/// Our result against pycocotools' (string, size, area, bbox, a window of the decoded mask).
fn check_out(name: &str, rle: &Rle, out: &Json) {
    let size = out.at("size").arr();
    assert_eq!((rle.h, rle.w), (size[0].u32(), size[1].u32()), "{name}: size");
    assert_eq!(String::from_utf8(rle_to_string(rle)).unwrap(), out.at("rle").str(), "{name}: RLE string");
    assert_eq!(area(rle), out.at("area").u32(), "{name}: area");
    let bbox: Vec<f64> = out.at("bbox").arr().iter().map(Json::f64).collect();
    assert_eq!(to_bbox(rle).to_vec(), bbox, "{name}: bbox");
    let win = out.at("window").arr();
    let (x0, y0, cw, ch) = (win[0].u32(), win[1].u32(), win[2].u32(), win[3].u32());
    let n = (cw * ch) as usize;
    let want: Vec<u8> = win[4]
        .str()
        .chars()
        .flat_map(|d| {
            let v = d.to_digit(16).unwrap() as u8;
            [v >> 3 & 1, v >> 2 & 1, v >> 1 & 1, v & 1]
        })
        .take(n)
        .collect();
    let mut got = vec![7u8; n];
    decode_window(rle, x0, y0, cw, ch, &mut got).unwrap();
    assert_eq!(got, want, "{name}: window {cw}×{ch} at ({x0}, {y0})");
}

#[test]
fn pycocotools_fixture_bit_exact() {
    let doc = fixture();
    let cases = doc.at("cases").arr();
    assert!(cases.len() >= 700, "the fixture lost cases: {}", cases.len());
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for (i, c) in cases.iter().enumerate() {
        let kind = c.at("kind").str();
        let name = format!("case {i} ({kind})");
        let size = |c: &Json| {
            let s = c.at("size").arr();
            [s[0].u32(), s[1].u32()]
        };
        let got = match kind {
            "poly" => {
                let polys: Vec<Vec<f64>> =
                    c.at("polys").arr().iter().map(|p| p.arr().iter().map(Json::f64).collect()).collect();
                to_rle(&Segmentation::Polygons(polys), c.at("h").u32(), c.at("w").u32())
            }
            "counts" => to_rle(
                &Segmentation::Counts { size: size(c), counts: c.at("counts").arr().iter().map(Json::u32).collect() },
                c.at("h").u32(),
                c.at("w").u32(),
            ),
            "string" => {
                let seg = Segmentation::Compressed { size: size(c), counts: c.at("string").str().as_bytes().to_vec() };
                // The canvas given does not matter for an RLE: it has its own size.
                to_rle(&seg, 1, 1)
            }
            "merge" => {
                let [h, w] = size(c);
                let parts: Vec<Rle> = c
                    .at("parts")
                    .arr()
                    .iter()
                    .map(|p| Rle { h, w, counts: p.arr().iter().map(Json::u32).collect() })
                    .collect();
                merge(&parts)
            }
            other => panic!("{name}: unknown kind {other}"),
        };
        match c.get("error") {
            Some(e) => {
                let err = got.expect_err(&format!("{name}: pycocotools raised {}, we accepted", e.str()));
                assert_eq!(err.kind, MaskErrorKind::Unsupported, "{name}: {err}");
                *seen.entry(format!("{kind} error")).or_default() += 1;
            }
            None => {
                let rle = got.unwrap_or_else(|e| panic!("{name}: {e}"));
                rle.validate().unwrap();
                check_out(&name, &rle, c.at("out"));
                *seen.entry(kind.to_string()).or_default() += 1;
            }
        }
    }
    for (k, min) in [("poly", 400), ("poly error", 10), ("counts", 50), ("string", 50), ("merge", 30)] {
        assert!(seen.get(k).copied().unwrap_or(0) >= min, "too few {k} cases: {seen:?}");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The reference: rleFrPoly as C writes it, every walk point materialised.
// ---------------------------------------------------------------------------------------------------------------

fn reference_fr_poly(xy: &[f64], h: u32, w: u32) -> Rle {
    let k = xy.len() / 2;
    let scale = 5.0;
    let mut x: Vec<i64> = (0..k).map(|j| (scale * xy[2 * j] + 0.5) as i64).collect();
    let mut y: Vec<i64> = (0..k).map(|j| (scale * xy[2 * j + 1] + 0.5) as i64).collect();
    if k > 0 {
        x.push(x[0]);
        y.push(y[0]);
    }
    let (mut u, mut v) = (Vec::new(), Vec::new());
    for j in 0..k {
        let (mut xs, mut xe, mut ys, mut ye) = (x[j], x[j + 1], y[j], y[j + 1]);
        let dx = (xe - xs).abs();
        let dy = (ys - ye).abs();
        let flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
        if flip {
            std::mem::swap(&mut xs, &mut xe);
            std::mem::swap(&mut ys, &mut ye);
        }
        let s = if dx >= dy { (ye - ys) as f64 / dx as f64 } else { (xe - xs) as f64 / dy as f64 };
        if dx >= dy {
            for d in 0..=dx {
                let t = if flip { dx - d } else { d };
                u.push(t + xs);
                v.push((ys as f64 + s * t as f64 + 0.5) as i64);
            }
        } else {
            for d in 0..=dy {
                let t = if flip { dy - d } else { d };
                v.push(t + ys);
                u.push((xs as f64 + s * t as f64 + 0.5) as i64);
            }
        }
    }
    let mut a = Vec::new();
    for j in 1..u.len() {
        if u[j] != u[j - 1] {
            let xd = if u[j] < u[j - 1] { u[j] } else { u[j] - 1 } as f64;
            let xd = (xd + 0.5) / scale - 0.5;
            if xd.floor() != xd || xd < 0.0 || xd > f64::from(w - 1) {
                continue;
            }
            let yd = if v[j] < v[j - 1] { v[j] } else { v[j - 1] } as f64;
            let mut yd = (yd + 0.5) / scale - 0.5;
            if yd < 0.0 {
                yd = 0.0;
            } else if yd > f64::from(h) {
                yd = f64::from(h);
            }
            let yd = yd.ceil();
            a.push((xd as i64 * i64::from(h) + yd as i64) as u32);
        }
    }
    Rle { h, w, counts: runs_from_boundaries(a, u64::from(h) * u64::from(w)) }
}

/// A canonical RLE (the only zero-length run is a leading one) from a 0/1 column-major mask.
fn encode_col_major(bits: &[u8], h: u32, w: u32) -> Rle {
    let mut counts = Vec::new();
    let (mut p, mut c) = (0u8, 0u32);
    for &b in bits {
        if b != p {
            counts.push(c);
            c = 0;
            p = b;
        }
        c += 1;
    }
    counts.push(c);
    Rle { h, w, counts }
}

fn arb_rle() -> impl Strategy<Value = Rle> {
    (1u32..24, 1u32..24).prop_flat_map(|(h, w)| {
        prop::collection::vec(prop_oneof![3 => Just(0u8), 2 => Just(1u8)], (h * w) as usize)
            .prop_map(move |bits| encode_col_major(&bits, h, w))
    })
}

/// An RLE with zero-length runs anywhere (what an uncompressed RLE from a file may hold).
fn arb_loose_rle() -> impl Strategy<Value = Rle> {
    (1u32..20, 1u32..20).prop_flat_map(|(h, w)| {
        let hw = h * w;
        prop::collection::vec(0..=hw, 0..12).prop_map(move |mut cuts| {
            cuts.sort_unstable();
            let mut counts = Vec::new();
            let mut p = 0;
            for c in cuts.into_iter().chain([hw]) {
                counts.push(c - p);
                p = c;
            }
            Rle { h, w, counts }
        })
    })
}

fn arb_coord() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => -20.0f64..80.0,
        2 => (-100i32..400).prop_map(|v| f64::from(v) / 10.0), // 0.1 grid: rounding ties of 5x + .5
        1 => (-60i32..60).prop_map(f64::from),
        1 => -3000.0f64..3000.0,
    ]
}

fn arb_polygon() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(arb_coord(), 0..24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn polygon_walk_equals_the_literal_port(xy in arb_polygon(), h in 1u32..70, w in 1u32..70) {
        let got = rle_from_polygon(&xy, h, w).unwrap();
        prop_assert_eq!(&got, &reference_fr_poly(&xy, h, w));
        got.validate().unwrap();
    }

    #[test]
    fn polygon_walk_equals_the_literal_port_steep(
        pts in prop::collection::vec((-40.0f64..40.0, -2000.0f64..2000.0), 0..8), h in 1u32..50, w in 1u32..50,
        transpose in any::<bool>(),
    ) {
        // Long steep and long shallow edges: the binary search over t and the skipped columns.
        let xy: Vec<f64> =
            pts.iter().flat_map(|&(a, b)| if transpose { [b, a] } else { [a, b] }).collect();
        prop_assert_eq!(rle_from_polygon(&xy, h, w).unwrap(), reference_fr_poly(&xy, h, w));
    }

    #[test]
    fn window_is_the_slice_of_the_whole(rle in arb_rle(), a in any::<u32>(), b in any::<u32>(),
                                        c in any::<u32>(), d in any::<u32>()) {
        let full = decode(&rle).unwrap();
        let (h, w) = (rle.h, rle.w);
        let x0 = a % w;
        let y0 = b % h;
        let cw = c % (w - x0 + 1);
        let ch = d % (h - y0 + 1);
        let mut out = vec![9u8; (cw * ch) as usize];
        decode_window(&rle, x0, y0, cw, ch, &mut out).unwrap();
        for y in 0..ch {
            for x in 0..cw {
                prop_assert_eq!(out[(y * cw + x) as usize], full[((y0 + y) * w + x0 + x) as usize]);
            }
        }
    }

    #[test]
    fn loose_window_is_the_slice_of_the_whole(rle in arb_loose_rle()) {
        // decode against a plain column-major expansion of the runs (the definition), zero runs included.
        let mut col = Vec::new();
        for (i, &n) in rle.counts.iter().enumerate() {
            col.extend(std::iter::repeat_n((i % 2) as u8, n as usize));
        }
        let full = decode(&rle).unwrap();
        for x in 0..rle.w {
            for y in 0..rle.h {
                prop_assert_eq!(full[(y * rle.w + x) as usize], col[(x * rle.h + y) as usize]);
            }
        }
    }

    #[test]
    fn string_round_trip(rle in prop_oneof![arb_rle(), arb_loose_rle()]) {
        let s = rle_to_string(&rle);
        prop_assert_eq!(rle_from_string(&s, rle.h, rle.w).unwrap(), rle);
    }

    #[test]
    fn string_of_arbitrary_bytes_never_panics(s in prop::collection::vec(any::<u8>(), 0..40),
                                             h in 0u32..40, w in 0u32..40) {
        if let Ok(r) = rle_from_string(&s, h, w) {
            r.validate().unwrap();
            prop_assert_eq!(rle_to_string(&r).len() <= s.len(), true);
        }
    }

    #[test]
    fn string_of_alphabet_bytes_never_panics(s in prop::collection::vec(48u8..=111, 0..40),
                                            h in 1u32..40, w in 1u32..40) {
        if let Ok(r) = rle_from_string(&s, h, w) {
            r.validate().unwrap();
            // A valid string's canonical re-encoding decodes to the same runs.
            prop_assert_eq!(rle_from_string(&rle_to_string(&r), h, w).unwrap(), r);
        }
    }

    #[test]
    fn polygons_of_any_f64_never_panic(
        polys in prop::collection::vec(prop::collection::vec(prop_oneof![
            any::<f64>(), Just(f64::NAN), Just(f64::INFINITY), Just(-1e300), Just(4.29e8), Just(-2.147e8),
            -1e9f64..1e9, arb_coord(),
        ], 0..12), 0..4),
        h in 0u32..100, w in 0u32..100,
    ) {
        if let Ok(r) = to_rle(&Segmentation::Polygons(polys.clone()), h, w) {
            r.validate().unwrap();
            prop_assert_eq!((r.h, r.w), (h, w));
        }
        for p in &polys {
            if let Ok(r) = rle_from_polygon(p, h, w) {
                r.validate().unwrap();
            }
        }
    }

    #[test]
    fn tournament_union_equals_left_to_right_merge(
        rles in (1u32..16, 1u32..16).prop_flat_map(|(h, w)| prop::collection::vec(
            prop::collection::vec(prop_oneof![4 => Just(0u8), 1 => Just(1u8)], (h * w) as usize)
                .prop_map(move |bits| encode_col_major(&bits, h, w)), 1..9)),
    ) {
        prop_assert_eq!(union_canonical(rles.clone()).unwrap(), merge(&rles).unwrap());
    }

    #[test]
    fn merge_is_the_union(parts in (1u32..12, 1u32..12).prop_flat_map(|(h, w)| {
        prop::collection::vec(arb_loose_rle_of(h, w), 1..5)
    })) {
        let Ok(m) = merge(&parts) else {
            // Only where rleMerge itself does not give the union (two zero-length runs meet).
            prop_assert!(parts.iter().any(|r| r.counts.iter().skip(1).any(|&c| c == 0) || r.counts.len() > 1
                && r.counts[0] == 0));
            return Ok(());
        };
        m.validate().unwrap();
        let masks: Vec<Vec<u8>> = parts.iter().map(|r| decode(r).unwrap()).collect();
        let union: Vec<u8> = (0..masks[0].len()).map(|i| masks.iter().any(|m| m[i] == 1) as u8).collect();
        prop_assert_eq!(decode(&m).unwrap(), union);
    }

    #[test]
    fn bbox_and_area_match_the_mask(rle in arb_rle()) {
        let m = decode(&rle).unwrap();
        let ones: Vec<(u32, u32)> = (0..rle.h)
            .flat_map(|y| (0..rle.w).map(move |x| (x, y)))
            .filter(|&(x, y)| m[(y * rle.w + x) as usize] == 1)
            .collect();
        prop_assert_eq!(area(&rle) as usize, ones.len());
        let bb = to_bbox(&rle);
        if ones.is_empty() {
            prop_assert_eq!(bb, [0.0; 4]);
        } else {
            let x0 = ones.iter().map(|p| p.0).min().unwrap();
            let x1 = ones.iter().map(|p| p.0).max().unwrap();
            let spans_columns = x0 != x1;
            // rleToBbox: a run that crosses a column boundary makes the box full height.
            let (y0, y1) = (ones.iter().map(|p| p.1).min().unwrap(), ones.iter().map(|p| p.1).max().unwrap());
            prop_assert_eq!(bb[0], f64::from(x0));
            prop_assert_eq!(bb[2], f64::from(x1 - x0 + 1));
            if !spans_columns {
                prop_assert_eq!([bb[1], bb[3]], [f64::from(y0), f64::from(y1 - y0 + 1)]);
            } else {
                prop_assert!(bb[1] <= f64::from(y0) && bb[1] + bb[3] >= f64::from(y1 + 1));
            }
        }
    }
}

fn arb_loose_rle_of(h: u32, w: u32) -> impl Strategy<Value = Rle> {
    let hw = h * w;
    prop::collection::vec(0..=hw, 0..10).prop_map(move |mut cuts| {
        cuts.sort_unstable();
        let mut counts = Vec::new();
        let mut p = 0;
        for c in cuts.into_iter().chain([hw]) {
            counts.push(c - p);
            p = c;
        }
        Rle { h, w, counts }
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Hostile input and the documented choices
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn sizes_are_checked_before_anything() {
    for (h, w) in [(0, 5), (5, 0), (MAX_MASK_SIDE + 1, 1), (1, u32::MAX), (MAX_MASK_SIDE, MAX_MASK_SIDE)] {
        assert_eq!(rle_from_polygon(&[0.0; 6], h, w).unwrap_err().kind, MaskErrorKind::Size, "{h}×{w}");
        assert_eq!(rle_from_string(b"0", h, w).unwrap_err().kind, MaskErrorKind::Size);
        let seg = Segmentation::Counts { size: [h, w], counts: vec![0] };
        assert_eq!(to_rle(&seg, 10, 10).unwrap_err().kind, MaskErrorKind::Size);
        let r = Rle { h, w, counts: vec![h.wrapping_mul(w)] };
        assert_eq!(decode(&r).unwrap_err().kind, MaskErrorKind::Size);
    }
    // The largest allowed mask is fine to describe (not decoded here: 256 MiB).
    let r = rle_from_polygon(&[0.0, 0.0, 100.0, 0.0, 0.0, 100.0], 16384, 16384).unwrap();
    assert_eq!(r.counts.iter().map(|&c| u64::from(c)).sum::<u64>(), MAX_MASK_PIXELS);
}

#[test]
fn counts_must_cover_the_canvas_exactly() {
    let seg = |counts: Vec<u32>| Segmentation::Counts { size: [3, 4], counts };
    assert!(to_rle(&seg(vec![2, 3, 7]), 99, 99).is_ok());
    // The canvas passed in is ignored, as frUncompressedRLE ignores it: the RLE keeps its own size.
    assert_eq!((to_rle(&seg(vec![12]), 99, 99).unwrap().h, to_rle(&seg(vec![12]), 99, 99).unwrap().w), (3, 4));
    for bad in [vec![2, 3, 6], vec![2, 3, 8], vec![], vec![u32::MAX, 13]] {
        assert_eq!(to_rle(&seg(bad.clone()), 3, 4).unwrap_err().kind, MaskErrorKind::Counts, "{bad:?}");
    }
    // decode_window refuses a hand-made RLE that does not cover its canvas, and windows outside it.
    let mut out = [0u8; 4];
    let short = Rle { h: 2, w: 2, counts: vec![1, 1] };
    assert_eq!(decode_window(&short, 0, 0, 2, 2, &mut out).unwrap_err().kind, MaskErrorKind::Counts);
    let ok = Rle { h: 2, w: 2, counts: vec![1, 3] };
    assert_eq!(decode_window(&ok, 1, 0, 2, 2, &mut out).unwrap_err().kind, MaskErrorKind::Window);
    assert_eq!(decode_window(&ok, 0, 0, 2, 1, &mut out).unwrap_err().kind, MaskErrorKind::Window);
    assert_eq!(decode_window(&ok, u32::MAX, u32::MAX, 2, 2, &mut out).unwrap_err().kind, MaskErrorKind::Window);
    decode_window(&ok, 0, 0, 2, 2, &mut out).unwrap();
    assert_eq!(out, [0, 1, 1, 1]); // column-major runs, row-major output
}

#[test]
fn compressed_strings_are_checked() {
    // "Ri0" is not 12 runs of a 3×4: it is one value cut off ('R' has the continuation bit).
    assert_eq!(rle_from_string(b"R", 3, 4).unwrap_err().kind, MaskErrorKind::Encoding);
    assert_eq!(rle_from_string(b"2\x003<", 3, 4).unwrap_err().kind, MaskErrorKind::Encoding);
    assert_eq!(rle_from_string(b"2 3<", 3, 4).unwrap_err().kind, MaskErrorKind::Encoding);
    assert_eq!(rle_from_string(b"2p", 3, 4).unwrap_err().kind, MaskErrorKind::Encoding);
    // Seven bytes for one value: more than any count of a mask within bounds needs.
    assert_eq!(rle_from_string(b"PPPPPP0", 3, 4).unwrap_err().kind, MaskErrorKind::Encoding);
    assert_eq!(rle_from_string(b"PPPPP0", 3, 4).unwrap_err().kind, MaskErrorKind::Counts); // 0 … but then short
    assert_eq!(rle_from_string(b"PPPPP0<", 3, 4).unwrap().counts, vec![0, 12]); // redundant zero bytes are fine
    // Negative or too large values, and sums other than h·w.
    assert_eq!(rle_from_string(b"O", 3, 4).unwrap_err().kind, MaskErrorKind::Counts); // -1
    assert_eq!(rle_from_string(b"=", 3, 4).unwrap_err().kind, MaskErrorKind::Counts); // 13
    assert_eq!(rle_from_string(b"23", 3, 4).unwrap_err().kind, MaskErrorKind::Counts);
    assert_eq!(rle_from_string(b"", 3, 4).unwrap_err().kind, MaskErrorKind::Counts);
    assert_eq!(rle_from_string(b"237", 3, 4).unwrap(), Rle { h: 3, w: 4, counts: vec![2, 3, 7] });
    // Deltas from the fourth value on: [2, 3, 4, 3] is "2", "3", "4", 3 - 3 = "0".
    let r = Rle { h: 3, w: 4, counts: vec![2, 3, 4, 3] };
    assert_eq!(rle_to_string(&r), b"2340");
    assert_eq!(rle_from_string(b"2340", 3, 4).unwrap(), r);
}

#[test]
fn frpyobjects_choices_by_the_first_polygon() {
    let tri = vec![1.0, 1.0, 9.5, 2.0, 4.0, 8.0];
    let polys = |p: Vec<Vec<f64>>| to_rle(&Segmentation::Polygons(p), 10, 12);
    for bad in [vec![], vec![vec![1.0, 2.0, 5.0, 6.0], tri.clone()], vec![vec![]], vec![vec![1.0, 2.0]; 5]] {
        assert_eq!(polys(bad.clone()).unwrap_err().kind, MaskErrorKind::Unsupported, "{bad:?}");
    }
    let one = polys(vec![tri.clone()]).unwrap();
    // Later polygons of any length; fewer than 3 points add nothing, an odd last number is dropped.
    for extra in [vec![], vec![3.0], vec![3.0, 3.0], vec![3.0, 3.0, 7.0, 7.0], vec![3.0, 3.0, 7.0, 7.0, 1.0]] {
        assert_eq!(polys(vec![tri.clone(), extra]).unwrap(), one);
    }
    let mut odd = tri.clone();
    odd.push(100.0);
    assert_eq!(polys(vec![odd]).unwrap(), one);
    let mut odd_nan = tri.clone();
    odd_nan.push(f64::NAN); // never read, as in C
    assert_eq!(polys(vec![odd_nan]).unwrap(), one);
    // Five numbers are "polygons" (two points: an empty mask).
    assert_eq!(polys(vec![vec![1.0, 2.0, 8.0, 4.0, 5.0]]).unwrap().counts, vec![120]);
}

#[test]
fn hostile_polygons_are_refused_not_run() {
    let seg = |p: Vec<Vec<f64>>| to_rle(&Segmentation::Polygons(p), 600, 800);
    for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300, 2.2e8, -2.2e8] {
        let e = seg(vec![vec![0.0, 0.0, v, 5.0, 5.0, 9.0]]).unwrap_err();
        assert_eq!(e.kind, MaskErrorKind::Coordinate, "{v}");
    }
    // Just inside the coordinate bound: long edges, but only the canvas' columns are walked.
    let t = std::time::Instant::now();
    let r = seg(vec![vec![-2.1e8, -2.1e8, 2.1e8, 3.0, 2.0e8, 2.1e8, 5.0, 1.0e8]]).unwrap();
    r.validate().unwrap();
    assert!(t.elapsed().as_secs_f64() < 1.0, "{:?}", t.elapsed());
    assert_eq!(seg(vec![vec![1.0; 6]; MAX_POLYGONS + 1]).unwrap_err().kind, MaskErrorKind::TooLarge);
    assert_eq!(seg(vec![vec![1.0; MAX_POLYGON_COORDS + 2]]).unwrap_err().kind, MaskErrorKind::TooLarge);
    // A zigzag over the whole width, many times: more boundary points than the budget (together).
    let zig: Vec<f64> = (0..1000).flat_map(|i| [if i % 2 == 0 { -10.0 } else { 810.0 }, i as f64 * 0.1]).collect();
    assert_eq!(seg(vec![zig.clone(); 2]).unwrap_err().kind, MaskErrorKind::TooLarge);
    // One of them is within it, and agrees with the literal port.
    assert_eq!(rle_from_polygon(&zig, 600, 800).unwrap(), reference_fr_poly(&zig, 600, 800));
}

#[test]
fn bbox_quirks_of_pycocotools() {
    // Foreground runs all empty: C's unsigned wrap-around (the fixture has pycocotools saying so too).
    let r = Rle { h: 3, w: 4, counts: vec![12, 0] };
    assert_eq!(to_bbox(&r), [4.0, 3.0, 4294967293.0, 4294967294.0]);
    assert_eq!(area(&r), 0);
    assert_eq!(to_bbox(&Rle { h: 3, w: 4, counts: vec![12] }), [0.0; 4]);
    // Never panics on nonsense.
    assert_eq!(to_bbox(&Rle { h: 0, w: 4, counts: vec![1, 2] }), [0.0; 4]);
    let _ = to_bbox(&Rle { h: 1, w: 1, counts: vec![u32::MAX, u32::MAX, 5, 7] });
    let _ = area(&Rle { h: 1, w: 1, counts: vec![0, u32::MAX, 0, u32::MAX] });
}

#[test]
fn merge_refuses_what_c_would_hang_on() {
    let a = Rle { h: 2, w: 2, counts: vec![1, 3] };
    assert_eq!(merge(&[]).unwrap_err().kind, MaskErrorKind::Unsupported);
    assert_eq!(merge(&[a.clone(), Rle { h: 4, w: 1, counts: vec![4] }]).unwrap_err().kind, MaskErrorKind::Size);
    // Runs summing differently: rleMerge's loop would never end.
    assert_eq!(merge(&[a.clone(), Rle { h: 2, w: 2, counts: vec![1, 1] }]).unwrap_err().kind, MaskErrorKind::Counts);
    assert_eq!(merge(std::slice::from_ref(&a)).unwrap(), a);
    // Zero-length runs of both inputs at the start: pycocotools returns {'counts': b'0'} for these two, and
    // never returns when a third input follows.
    let p = |counts: Vec<u32>| Rle { h: 1, w: 2, counts };
    let stuck = [p(vec![0, 0, 0, 1, 0, 0, 1, 0, 0]), p(vec![0, 0, 2, 0]), p(vec![0, 1, 1])];
    assert_eq!(merge(&stuck[..2]).unwrap_err().kind, MaskErrorKind::Counts);
    assert_eq!(merge(&stuck).unwrap_err().kind, MaskErrorKind::Counts);
    assert_eq!(merge_pair(&[0], &[0, 2]), None); // the loop C never leaves
    // Zero-length runs in one input only are kept, as C keeps them.
    assert_eq!(merge(&[p(vec![0, 0, 1, 0, 1]), p(vec![2])]).unwrap().counts, vec![0, 0, 1, 0, 1]);
}

#[test]
fn polygons_at_the_budget_take_milliseconds() {
    // Steep edges over every column of the widest canvas, up to the boundary-point budget; and a polygon of
    // coordinates near the bound whose edges are 1e9 grid steps long. A walk over every point (what C does)
    // would take seconds or run out of memory.
    let edges = (MAX_POLYGON_CROSSINGS / 32770) as usize;
    let steep: Vec<f64> = (0..edges).flat_map(|i| [if i % 2 == 0 { -10.0 } else { 32778.0 }, i as f64 * 1e5]).collect();
    let huge: Vec<f64> = (0..edges).flat_map(|i| [if i % 2 == 0 { -1e8 } else { 1e8 }, i as f64 * 1e5 - 2e6]).collect();
    for xy in [steep, huge] {
        let t = std::time::Instant::now();
        let r = rle_from_polygon(&xy, 8192, 32768).unwrap();
        assert!(t.elapsed().as_secs_f64() < 2.0, "{:?} for {} runs", t.elapsed(), r.counts.len());
    }
    // One more edge over every column is over the budget.
    let over: Vec<f64> = (0..edges + 2).flat_map(|i| [if i % 2 == 0 { -10.0 } else { 32778.0 }, i as f64]).collect();
    assert_eq!(rle_from_polygon(&over, 8192, 32768).unwrap_err().kind, MaskErrorKind::TooLarge);
}
