//! Hardening tests of the decoder on bytes built at test time (no data folder needed): failures never poison the
//! handle, decode-bomb budgets, the truncation rule, lossless JPEG, and a proptest smoke of every entry point that
//! the cargo-fuzz targets (`fuzz/`) exercise for longer.

use super::*;
use crate::synthetic::encode::JpegEncoder;
use crate::test_data::pattern;

fn gray_of(rgb: &[u8]) -> Vec<u8> {
    rgb.chunks_exact(3).map(|p| p[1]).collect()
}

pub(super) fn jpeg(w: u32, h: u32, seed: u32, sub: Subsampling, progressive: bool) -> Vec<u8> {
    let mut e = JpegEncoder::new().unwrap();
    e.set_progressive(progressive).unwrap();
    let px = pattern(w, h, seed);
    let px = if sub == Subsampling::Gray { gray_of(&px) } else { px };
    e.encode(&px, w, h, 90, sub).unwrap()
}

/// The fixed good images of the poisoning tests: baseline 4:2:0, 4:4:4, gray, progressive 4:2:0.
fn good_images() -> Vec<Vec<u8>> {
    vec![
        jpeg(67, 45, 1, Subsampling::S420, false),
        jpeg(40, 33, 2, Subsampling::S444, false),
        jpeg(31, 50, 3, Subsampling::Gray, false),
        jpeg(64, 48, 4, Subsampling::S420, true),
    ]
}

/// What a fresh decoder gives for `bytes`: the full decode and a scaled window decode.
fn outputs(d: &mut Decoder, bytes: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut full = Vec::new();
    d.decode_full_rgb(bytes, &mut full).unwrap();
    let r = d.decode_window(bytes, 4, PixelWindow { x0: 5, y0: 3, x1: 20, y1: 17 }).unwrap();
    (full, r.pixels.to_vec())
}

/// Offset of the first marker `code` (`FF code`) found by walking segments from SOI (header part only).
fn find_segment(bytes: &[u8], code: u8) -> Option<usize> {
    let mut pos = 2;
    while pos + 4 <= bytes.len() {
        if bytes[pos] != 0xFF {
            return None;
        }
        if bytes[pos + 1] == code {
            return Some(pos);
        }
        if bytes[pos + 1] == 0xDA {
            return None;
        }
        pos += 2 + usize::from(u16::from_be_bytes([bytes[pos + 2], bytes[pos + 3]]));
    }
    None
}

/// The header-level hostile variants (truncated, forged and absurd headers), built from a good JPEG.
fn named_hostile(good: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let sof = find_segment(good, 0xC0).expect("baseline SOF0");
    let dht = find_segment(good, 0xC4).expect("DHT");
    let mut out = Vec::new();
    let mut b = good.to_vec();
    b[sof + 5..sof + 9].copy_from_slice(&[0, 0, 0, 0]);
    out.push(("zero dimensions", b));
    let mut b = good.to_vec();
    b[sof + 5..sof + 9].copy_from_slice(&[0xFF, 0xF0, 0xFF, 0xF0]);
    out.push((">65500 dimensions", b));
    let mut b = good.to_vec();
    b[sof + 11] = 0x00; // first component's sampling factors
    out.push(("zero sampling factors", b));
    let mut b = good.to_vec();
    b[sof + 9] = 7; // 7 components in a SOF sized for 3
    out.push(("SOF with 7 components", b));
    let mut b = good.to_vec();
    b[dht + 5] ^= 0x40; // bit flip in the first Huffman table's code counts
    out.push(("bit-flipped DHT", b));
    let mut b = good.to_vec();
    b.truncate(dht + 12);
    out.push(("truncated DHT", b));
    let mut b = good.to_vec();
    b.truncate(sof + 7);
    out.push(("truncated SOF", b));
    let mut b = good[..sof].to_vec();
    b.extend_from_slice(&[0xFF, 0x4A, 0x13, 0x37, 0xFF, 0xFF, 0x00]);
    b.extend_from_slice(&good[sof..]);
    out.push(("garbage marker", b));
    out
}

#[test]
fn a_failed_header_or_decode_never_changes_the_next_image() {
    let goods = good_images();
    let mut fresh = Decoder::new().unwrap();
    let reference: Vec<_> = goods.iter().map(|g| outputs(&mut fresh, g)).collect();
    let mut d = Decoder::new().unwrap();
    for (name, bad) in named_hostile(&goods[0]) {
        for (g, want) in goods.iter().zip(&reference) {
            // Both entry points on the hostile bytes, then the good image must decode exactly as on a fresh handle.
            let _ = d.read_header(&bad);
            let r = d.decode_window(&bad, 8, PixelWindow { x0: 0, y0: 0, x1: 16, y1: 16 }).map(|_| ());
            assert!(r.is_err(), "{name} should fail");
            let _ = d.read_header(&bad);
            assert_eq!(&outputs(&mut d, g), want, "good image after {name}");
        }
    }
    assert!(d.handle_resets() > 0);
}

mod props {
    use super::super::table_state_tests::{all_segments, full_outcome, header_outcome, strip, window_outcome};
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Mutation {
        /// Flip bit `bit` of byte `pos` (taken modulo the header length: up to the first SOS + 64 bytes).
        HeaderBitFlip { pos: usize, bit: u8 },
        /// Keep only the first `keep` per-mille of the file.
        Truncate { keep: u16 },
        /// Insert garbage (0xFF-led bytes) at a header position.
        MarkerGarbage { pos: usize, junk: Vec<u8> },
        /// Overwrite a header byte with a value.
        HeaderByte { pos: usize, value: u8 },
        /// One of the named header cases.
        Named(usize),
        /// Remove every DQT (`false`) or DHT (`true`) segment, anywhere in the file.
        StripTables { huffman: bool },
        /// Remove the `i`-th segment (modulo their count) of the whole file, between-scan segments included.
        DropSegment(usize),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            (any::<usize>(), 0u8..8).prop_map(|(pos, bit)| Mutation::HeaderBitFlip { pos, bit }),
            (0u16..1000).prop_map(|keep| Mutation::Truncate { keep }),
            (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8)).prop_map(|(pos, mut junk)| {
                junk.insert(0, 0xFF);
                Mutation::MarkerGarbage { pos, junk }
            }),
            (any::<usize>(), any::<u8>()).prop_map(|(pos, value)| Mutation::HeaderByte { pos, value }),
            (0usize..8).prop_map(Mutation::Named),
            any::<bool>().prop_map(|huffman| Mutation::StripTables { huffman }),
            any::<usize>().prop_map(Mutation::DropSegment),
        ]
    }

    fn header_len(b: &[u8]) -> usize {
        find_segment(b, 0xDA).map_or(b.len(), |p| (p + 64).min(b.len()))
    }

    fn apply(base: &[u8], m: &Mutation) -> Vec<u8> {
        let hl = header_len(base).max(3);
        let mut b = base.to_vec();
        match m {
            Mutation::HeaderBitFlip { pos, bit } => b[2 + pos % (hl - 2)] ^= 1 << bit,
            Mutation::Truncate { keep } => b.truncate(base.len() * usize::from(*keep) / 1000),
            Mutation::MarkerGarbage { pos, junk } => {
                let at = 2 + pos % (hl - 2);
                b.splice(at..at, junk.iter().copied());
            }
            Mutation::HeaderByte { pos, value } => b[2 + pos % (hl - 2)] = *value,
            Mutation::Named(i) => {
                let named = named_hostile(base);
                b = named[i % named.len()].1.clone();
            }
            Mutation::StripTables { huffman } => b = strip(base, if *huffman { 0xC4 } else { 0xDB }),
            Mutation::DropSegment(i) => {
                let segs = all_segments(base);
                let (_, s, e) = segs[i % segs.len()];
                b.drain(s..e);
            }
        }
        b
    }

    /// Predecessors for the table-state property: images whose tables differ from the mutation bases' (other
    /// qualities, optimized Huffman tables, arithmetic coding).
    fn predecessors() -> Vec<Vec<u8>> {
        let mut e = JpegEncoder::new().unwrap();
        let mut out = vec![e.encode(&pattern(40, 30, 21), 40, 30, 25, Subsampling::S420).unwrap()];
        e.set_progressive(true).unwrap();
        out.push(e.encode(&pattern(48, 32, 22), 48, 32, 70, Subsampling::S444).unwrap());
        e.set_progressive(false).unwrap();
        e.set_arithmetic(true).unwrap();
        out.push(e.encode(&pattern(24, 40, 23), 24, 40, 97, Subsampling::S422).unwrap());
        out
    }

    /// Fresh tables: any mutated file (tables stripped, segments dropped, header bytes changed, truncated...)
    /// decodes to the same outcome — header, window, full decode: pixels and damage flag, or error kind and
    /// message — on a fresh decoder and after different predecessors on used ones. `PROPTEST_CASES` cases (256 by
    /// default; a long run sets more); prints how many inputs borrowed tables.
    #[test]
    fn same_outcome_after_any_predecessor() {
        use proptest::test_runner::{Config, TestRunner};
        let goods = good_images();
        let preds = predecessors();
        let borrowing = std::cell::Cell::new(0usize);
        let cases = std::cell::Cell::new(0usize);
        let t = std::time::Instant::now();
        let strategy = (0usize..4, mutation(), 1u8..=8, 0u32..60, 0u32..40, 0usize..3, 0usize..3);
        let mut runner = TestRunner::new(Config { failure_persistence: None, ..Config::default() });
        let r = runner.run(&strategy, |(base, m, scale, x, y, first, second)| {
            // The named cases need a baseline SOF0 (bases 0–2); the others take the progressive base 3 too.
            let base = if matches!(m, Mutation::Named(_)) { base % 3 } else { base };
            let bad = apply(&goods[base], &m);
            let win = PixelWindow { x0: x, y0: y, x1: x + 17, y1: y + 13 };
            let run =
                |d: &mut Decoder| (header_outcome(d, &bad), window_outcome(d, &bad, scale, win), full_outcome(d, &bad));
            let want = run(&mut Decoder::new().unwrap());
            let mut a = Decoder::new().unwrap();
            full_outcome(&mut a, &preds[first]);
            prop_assert_eq!(&run(&mut a), &want);
            let mut b = Decoder::new().unwrap();
            full_outcome(&mut b, &goods[(base + 1) % goods.len()]);
            full_outcome(&mut b, &preds[second]);
            let _ = b.decode_window(&preds[first], 2, PixelWindow { x0: 0, y0: 0, x1: 8, y1: 8 });
            prop_assert_eq!(&run(&mut b), &want);
            cases.set(cases.get() + 1);
            if markers::walk_jpeg(&bad).is_ok_and(|st| st.borrows_tables) {
                borrowing.set(borrowing.get() + 1);
            }
            Ok(())
        });
        if let Err(e) = r {
            panic!("{e}");
        }
        eprintln!(
            "same_outcome_after_any_predecessor: {} inputs ({} borrowing tables) in {:.1} s",
            cases.get(),
            borrowing.get(),
            t.elapsed().as_secs_f64()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Decoder state never survives a failure: random hostile variants of real JPEGs interleaved with fixed good images on ONE
        /// decoder; the good images' bytes never change vs a fresh decoder.
        #[test]
        fn hostile_jpegs_never_change_good_images(
            steps in proptest::collection::vec((0usize..3, mutation(), 1u8..=8, 0u32..80, 0u32..60, 0usize..4), 1..6)
        ) {
            let goods = good_images();
            let mut fresh = Decoder::new().unwrap();
            let reference: Vec<_> = goods.iter().map(|g| outputs(&mut fresh, g)).collect();
            let mut d = Decoder::new().unwrap();
            // Baseline good images as mutation bases (the named cases need SOF0).
            for (base, m, scale, x, y, g) in steps {
                let bad = apply(&goods[base], &m);
                let _ = d.read_header(&bad);
                let _ = d.decode_window(&bad, scale, PixelWindow { x0: x, y0: y, x1: x + 24, y1: y + 24 });
                let mut sink = Vec::new();
                let _ = d.decode_full_rgb(&bad, &mut sink);
                prop_assert_eq!(&outputs(&mut d, &goods[g]), &reference[g]);
            }
        }

        /// Smoke of the fuzz targets' entry points on arbitrary bytes (prefixed with each format's magic): no panic, and a
        /// decoded region always has the size it reports.
        #[test]
        fn arbitrary_bytes_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..400),
            magic in 0usize..8, scale in 1u8..=8, x in 0u32..64, y in 0u32..64
        ) {
            // JPEG, PNG, and the formats of other.rs (WebP's RIFF size is left to the body).
            let magics: [&[u8]; 8] = [
                &[0xFF, 0xD8, 0xFF], &pngdec::PNG_MAGIC, b"RIFF\0\0\0\0WEBPVP8", b"GIF89a", b"II*\0", b"MM\0*",
                b"BM", b"P6\n",
            ];
            let mut bytes = magics[magic].to_vec();
            bytes.extend_from_slice(&body);
            let _ = markers::walk_jpeg(&bytes);
            let mut d = Decoder::new().unwrap();
            let _ = d.read_header(&bytes);
            if let Ok(r) = d.decode_window(&bytes, scale, PixelWindow { x0: x, y0: y, x1: x + 9, y1: y + 9 }) {
                prop_assert!(r.pixels.len() >= r.stride * r.height as usize);
            }
        }

        /// The marker walk on mutated real JPEGs: never panics, and a prefix of a complete JPEG that cuts its
        /// EOI off is always reported truncated.
        #[test]
        fn marker_walk_on_prefixes(g in 0usize..4, cut in 0usize..100_000) {
            let goods = good_images();
            let b = &goods[g];
            let full = markers::walk_jpeg(b).unwrap();
            let cut = cut % full.end;
            prop_assert!(markers::walk_jpeg(&b[..cut]).is_err());
        }
    }
}

#[test]
fn truncated_jpeg_is_corrupt_for_every_crop() {
    let w = 256;
    let h = 192;
    for progressive in [false, true] {
        let good = jpeg(w, h, 9, Subsampling::S420, progressive);
        let cut = &good[..good.len() * 3 / 4];
        let mut d = Decoder::new().unwrap();
        for (scale, y0) in [(8, 0), (8, h - 16), (1, 0), (4, 0), (2, 20)] {
            let win = PixelWindow { x0: 0, y0: y0 * u32::from(scale) / 8, x1: 16, y1: y0 * u32::from(scale) / 8 + 8 };
            let e = d.decode_window(cut, scale, win).unwrap_err();
            assert_eq!(e.kind, ImageErrorKind::Corrupt, "{e}");
            assert!(e.message.contains("truncated"), "{e}");
            // The complete file decodes at the same window.
            d.decode_window(&good, scale, win).unwrap();
        }
        let mut out = Vec::new();
        assert_eq!(d.decode_full_rgb(cut, &mut out).unwrap_err().kind, ImageErrorKind::Corrupt);
    }
}

/// Insert an APP1 segment holding a complete small JPEG (an EXIF-style thumbnail) right after SOI.
fn with_thumbnail(main: &[u8], thumb: &[u8]) -> Vec<u8> {
    let mut payload = b"Exif\0\0".to_vec();
    payload.extend_from_slice(thumb);
    let len = u16::try_from(payload.len() + 2).unwrap();
    let mut b = main[..2].to_vec();
    b.extend_from_slice(&[0xFF, 0xE1]);
    b.extend_from_slice(&len.to_be_bytes());
    b.extend_from_slice(&payload);
    b.extend_from_slice(&main[2..]);
    b
}

#[test]
fn an_exif_thumbnail_eoi_does_not_count() {
    let main = jpeg(200, 120, 11, Subsampling::S420, false);
    let thumb = jpeg(16, 16, 12, Subsampling::S420, false);
    let whole = with_thumbnail(&main, &thumb);
    let mut d = Decoder::new().unwrap();
    let mut out = Vec::new();
    assert_eq!(d.decode_full_rgb(&whole, &mut out).unwrap(), (200, 120));
    let cut = &whole[..whole.len() - main.len() / 3];
    let e = d.decode_window(cut, 8, PixelWindow { x0: 0, y0: 0, x1: 8, y1: 8 }).unwrap_err();
    assert_eq!(e.kind, ImageErrorKind::Corrupt);
}

/// A progressive JPEG whose last scan is repeated `extra` more times (the scan-count time bomb).
fn many_scans(extra: usize) -> Vec<u8> {
    let base = jpeg(64, 64, 5, Subsampling::S420, true);
    // The last SOS: scan backwards for FF DA.
    let last_sos = (0..base.len() - 1).rev().find(|&i| base[i] == 0xFF && base[i + 1] == 0xDA).unwrap();
    let eoi = base.len() - 2;
    assert_eq!(&base[eoi..], &[0xFF, 0xD9]);
    let mut b = base[..eoi].to_vec();
    for _ in 0..extra {
        b.extend_from_slice(&base[last_sos..eoi]);
    }
    b.extend_from_slice(&[0xFF, 0xD9]);
    b
}

#[test]
fn scan_limit_refuses_scan_bombs_before_decoding() {
    let mut d = Decoder::new().unwrap();
    let bomb = many_scans(2000);
    assert_eq!(markers::walk_jpeg(&bomb).unwrap().scans, 2010);
    let e = d.decode_window(&bomb, 8, PixelWindow { x0: 0, y0: 0, x1: 8, y1: 8 }).unwrap_err();
    assert_eq!(e.kind, ImageErrorKind::TooLarge, "{e}");
    assert!(e.message.contains("scans"), "{e}");
    // A normal 10-scan progressive JPEG passes the default limit and fails a limit of 5.
    let normal = jpeg(64, 64, 5, Subsampling::S420, true);
    assert_eq!(markers::walk_jpeg(&normal).unwrap().scans, 10);
    let mut out = Vec::new();
    d.decode_full_rgb(&normal, &mut out).unwrap();
    d.set_limits(DecodeLimits { max_scans: 5, ..DecodeLimits::default() }).unwrap();
    let e = d.decode_full_rgb(&normal, &mut out).unwrap_err();
    assert_eq!(e.kind, ImageErrorKind::TooLarge, "{e}");
    assert!(e.message.contains("scans"), "{e}");
}

#[test]
fn memory_budget_refuses_large_progressive_coefficient_buffers() {
    // 2048×1536 progressive 4:4:4: ~18 MiB of coefficients (2 bytes × 3 components × pixels).
    let p = jpeg(2048, 1536, 6, Subsampling::S444, true);
    let mut d = Decoder::with_limits(DecodeLimits { max_memory_bytes: 8 << 20, ..DecodeLimits::default() }).unwrap();
    let e = d.decode_window(&p, 1, PixelWindow { x0: 0, y0: 0, x1: 8, y1: 8 }).unwrap_err();
    assert_eq!(e.kind, ImageErrorKind::TooLarge, "{e}");
    assert!(e.message.contains("memory"), "{e}");
    // The same file under the default budget decodes, on the same (recovered) decoder.
    d.set_limits(DecodeLimits::default()).unwrap();
    d.decode_window(&p, 1, PixelWindow { x0: 0, y0: 0, x1: 8, y1: 8 }).unwrap();
}

fn png_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut c = (data.len() as u32).to_be_bytes().to_vec();
    c.extend_from_slice(kind);
    c.extend_from_slice(data);
    let mut crc_in = kind.to_vec();
    crc_in.extend_from_slice(data);
    c.extend_from_slice(&crc32(&crc_in).to_be_bytes());
    c
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
        }
    }
    !c
}

/// IHDR claiming `w × h` RGBA16 + a tiny (stored, empty) IDAT + IEND: the 82-byte PNG bomb.
fn png_bomb(w: u32, h: u32) -> Vec<u8> {
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[16, 6, 0, 0, 0]);
    let mut b = pngdec::PNG_MAGIC.to_vec();
    b.extend(png_chunk(b"IHDR", &ihdr));
    b.extend(png_chunk(b"IDAT", &[0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]));
    b.extend(png_chunk(b"IEND", &[]));
    b
}

#[test]
fn png_bomb_is_refused_without_allocating() {
    let bomb = png_bomb(10_000, 10_000);
    assert!(bomb.len() < 100, "{}", bomb.len());
    let mut d = Decoder::new().unwrap();
    let e = d.decode_window(&bomb, 8, PixelWindow { x0: 0, y0: 0, x1: 8, y1: 8 }).unwrap_err();
    assert_eq!(e.kind, ImageErrorKind::Corrupt, "{e}");
    assert!(d.scratch_bytes() < 1 << 20, "scratch grew to {} bytes", d.scratch_bytes());
}

#[test]
fn outlier_scratch_is_released_and_steady_state_allocates_nothing() {
    let small = jpeg(120, 90, 7, Subsampling::S420, false);
    let big = jpeg(3600, 2600, 8, Subsampling::S420, false); // 28 MB of RGB
    let limits = DecodeLimits { max_retained_scratch_bytes: 8 << 20, ..DecodeLimits::default() };
    let mut d = Decoder::with_limits(limits).unwrap();
    let full = PixelWindow { x0: 0, y0: 0, x1: u32::MAX, y1: u32::MAX };
    d.decode_window(&small, 8, full).unwrap();
    let steady = d.scratch_bytes();
    d.decode_window(&small, 8, full).unwrap();
    assert_eq!(d.scratch_bytes(), steady, "steady state must not allocate");
    d.decode_window(&big, 8, full).unwrap();
    assert!(d.scratch_bytes() > 8 << 20);
    d.decode_window(&small, 8, full).unwrap();
    assert!(d.scratch_bytes() <= steady, "outlier kept: {} bytes", d.scratch_bytes());
}

#[test]
fn lossless_8bit_jpegs_decode_exactly() {
    let (w, h) = (37, 23);
    let rgb = pattern(w, h, 13);
    let gray = gray_of(&rgb);
    let mut e = JpegEncoder::new().unwrap();
    let mut d = Decoder::new().unwrap();
    let mut out = Vec::new();
    for psv in [1, 4, 7] {
        let j = e.encode_lossless(&gray, w, h, Subsampling::Gray, psv).unwrap();
        let info = d.read_header(&j).unwrap();
        assert!(info.lossless && info.precision == 8);
        assert_eq!(d.decode_full_rgb(&j, &mut out).unwrap(), (w, h));
        let expect: Vec<u8> = gray.iter().flat_map(|&g| [g, g, g]).collect();
        assert_eq!(out, expect, "gray psv {psv}");
        // Crop-driven path too (lossless decodes whole).
        let r = d.decode_window(&j, 2, PixelWindow { x0: 3, y0: 3, x1: 9, y1: 9 }).unwrap();
        assert_eq!((r.width, r.height, r.scale_eighths), (w, h, 8));
        assert_eq!(r.pixels, &expect[..]);
        let j = e.encode_lossless(&rgb, w, h, Subsampling::S444, psv).unwrap();
        assert_eq!(d.decode_full_rgb(&j, &mut out).unwrap(), (w, h));
        assert_eq!(out, rgb, "rgb psv {psv}");
    }
}

/// A valid 8-bit RGB PNG of `w × h` (stored rows, zlib-compressed by a minimal stored-block writer).
fn png_rgb8(w: u32, h: u32, seed: u32) -> (Vec<u8>, Vec<u8>) {
    let px = pattern(w, h, seed);
    let mut raw = Vec::new();
    for row in px.chunks_exact(3 * w as usize) {
        raw.push(0);
        raw.extend_from_slice(row);
    }
    // zlib stream of stored deflate blocks (≤ 65535 bytes each) + Adler-32.
    let mut z = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65535).collect();
    for (i, b) in blocks.iter().enumerate() {
        z.push(u8::from(i + 1 == blocks.len()));
        let n = b.len() as u16;
        z.extend_from_slice(&n.to_le_bytes());
        z.extend_from_slice(&(!n).to_le_bytes());
        z.extend_from_slice(b);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &x in &raw {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    z.extend_from_slice(&((b << 16) | a).to_be_bytes());
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut f = pngdec::PNG_MAGIC.to_vec();
    f.extend(png_chunk(b"IHDR", &ihdr));
    f.extend(png_chunk(b"IDAT", &z));
    f.extend(png_chunk(b"IEND", &[]));
    (f, px)
}

#[test]
fn png_failures_leave_no_state() {
    let (good, px) = png_rgb8(23, 17, 3);
    let mut d = Decoder::new().unwrap();
    let mut out = Vec::new();
    assert_eq!(d.decode_full_rgb(&good, &mut out).unwrap(), (23, 17));
    assert_eq!(out, px);
    let mut hostile = vec![png_bomb(10_000, 10_000), good[..good.len() / 2].to_vec()];
    let mut flipped = good.clone();
    flipped[40] ^= 0x10; // inside IDAT: CRC mismatch / bad deflate
    hostile.push(flipped);
    for bad in &hostile {
        assert!(d.decode_window(bad, 8, PixelWindow { x0: 0, y0: 0, x1: 4, y1: 4 }).is_err());
        let r = d.decode_window(&good, 8, PixelWindow { x0: 0, y0: 0, x1: 4, y1: 4 }).unwrap();
        assert_eq!(r.pixels, &px[..]);
    }
}
