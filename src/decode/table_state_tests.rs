//! libjpeg keeps the DQT/DHT tables of earlier images in its handle; these tests prove that a [`Decoder`] gives
//! every image the tables a fresh handle would (module docs, "Fresh tables"): the same file decodes to the same
//! result — pixels, damage flag, or error kind and message — on a fresh decoder and after any other images.
//! Every input is built here: real JPEGs from the crate's encoder (baseline with libjpeg's standard Huffman
//! tables, progressive with optimized ones, other qualities = other quantization tables, arithmetic, lossless)
//! with their DQT or DHT segments cut out.

use super::markers::code::{DHT, DQT};
use super::*;
use crate::synthetic::encode::JpegEncoder;
use crate::test_data::pattern;

/// Encode the test pattern with the given knobs.
fn encode(w: u32, h: u32, seed: u32, sub: Subsampling, quality: u8, progressive: bool, arith: bool) -> Vec<u8> {
    let mut e = JpegEncoder::new().unwrap();
    e.set_progressive(progressive).unwrap();
    e.set_arithmetic(arith).unwrap();
    let px = pattern(w, h, seed);
    let px = if sub == Subsampling::Gray { px.chunks_exact(3).map(|p| p[1]).collect() } else { px };
    e.encode(&px, w, h, quality, sub).unwrap()
}

fn lossless(w: u32, h: u32, seed: u32, sub: Subsampling) -> Vec<u8> {
    let px = pattern(w, h, seed);
    let px = if sub == Subsampling::Gray { px.chunks_exact(3).map(|p| p[1]).collect() } else { px };
    JpegEncoder::new().unwrap().encode_lossless(&px, w, h, sub, 1).unwrap()
}

/// Every segment of a JPEG as `(marker, start, end)`, the ones between progressive scans included (walks the
/// entropy-coded data to the next real marker).
pub(super) fn all_segments(b: &[u8]) -> Vec<(u8, usize, usize)> {
    let mut out = Vec::new();
    let mut pos = 2;
    while pos + 1 < b.len() && b[pos] == 0xFF {
        let m = b[pos + 1];
        match m {
            0xFF => {
                pos += 1;
                continue;
            }
            0xD9 => break,
            0x01 | 0xD0..=0xD7 => {
                pos += 2;
                continue;
            }
            _ => {}
        }
        let Some(l) = b.get(pos + 2..pos + 4) else { break };
        let end = (pos + 2 + usize::from(u16::from_be_bytes([l[0], l[1]]))).min(b.len());
        out.push((m, pos, end));
        pos = end;
        if m == 0xDA {
            while pos + 1 < b.len() && (b[pos] != 0xFF || matches!(b[pos + 1], 0x00 | 0xD0..=0xD7 | 0xFF)) {
                pos += 1;
            }
        }
    }
    out
}

/// `b` without any segment of marker `code` (anywhere in the file).
pub(super) fn strip(b: &[u8], code: u8) -> Vec<u8> {
    let mut v = b.to_vec();
    for (m, s, e) in all_segments(b).into_iter().rev() {
        if m == code {
            v.drain(s..e);
        }
    }
    v
}

/// How one decode ended: pixels (with the region's placement and the damage flag) or the error's kind and message.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    Pixels { pixels: Vec<u8>, at: [u32; 4], scale: u8, damaged: bool },
    Error(ImageErrorKind, String),
}

pub(super) fn window_outcome(d: &mut Decoder, bytes: &[u8], scale: u8, win: PixelWindow) -> Outcome {
    match d.decode_window(bytes, scale, win) {
        Ok(r) => {
            let (at, scale, pixels) = ([r.x0, r.y0, r.width, r.height], r.scale_eighths, r.pixels.to_vec());
            Outcome::Pixels { pixels, at, scale, damaged: d.last_decode_damaged() }
        }
        Err(e) => Outcome::Error(e.kind, e.message),
    }
}

pub(super) fn full_outcome(d: &mut Decoder, bytes: &[u8]) -> Outcome {
    let mut out = Vec::new();
    match d.decode_full_rgb(bytes, &mut out) {
        Ok((w, h)) => Outcome::Pixels { pixels: out, at: [0, 0, w, h], scale: 8, damaged: d.last_decode_damaged() },
        Err(e) => Outcome::Error(e.kind, e.message),
    }
}

pub(super) fn header_outcome(
    d: &mut Decoder,
    bytes: &[u8],
) -> std::result::Result<ImageInfo, (ImageErrorKind, String)> {
    d.read_header(bytes).map_err(|e| (e.kind, e.message))
}

/// Images with tables unlike the stripped files': other qualities (quantization), optimized Huffman tables
/// (progressive), arithmetic coding, lossless, gray, 4:4:4.
fn predecessors() -> Vec<(&'static str, Vec<u8>)> {
    use Subsampling as S;
    vec![
        ("baseline q20 4:2:0", encode(48, 40, 11, S::S420, 20, false, false)),
        ("progressive q75 4:4:4", encode(56, 32, 12, S::S444, 75, true, false)),
        ("progressive q40 gray", encode(33, 47, 13, S::Gray, 40, true, false)),
        ("baseline q98 4:2:2", encode(64, 24, 14, S::S422, 98, false, false)),
        ("arithmetic q60 4:2:0", encode(40, 40, 15, S::S420, 60, false, true)),
        ("lossless gray", lossless(24, 20, 16, S::Gray)),
    ]
}

/// Decode `bytes` every way (header, full, two windows) on a fresh decoder and after each predecessor on a used
/// one; all must agree. Returns the fresh outcomes (header, full).
fn same_on_every_handle(
    name: &str,
    bytes: &[u8],
) -> (std::result::Result<ImageInfo, (ImageErrorKind, String)>, Outcome) {
    let windows =
        [(8, PixelWindow { x0: 0, y0: 0, x1: 64, y1: 64 }), (4, PixelWindow { x0: 5, y0: 3, x1: 20, y1: 17 })];
    let run = |d: &mut Decoder| {
        let h = header_outcome(d, bytes);
        let full = full_outcome(d, bytes);
        let w: Vec<Outcome> = windows.iter().map(|&(m, win)| window_outcome(d, bytes, m, win)).collect();
        (h, full, w)
    };
    let want = run(&mut Decoder::new().unwrap());
    let preds = predecessors();
    let mut used = Decoder::new().unwrap(); // one decoder through all predecessors: the worker's situation
    for (pname, pred) in &preds {
        let mut d = Decoder::new().unwrap();
        for dec in [&mut d, &mut used] {
            full_outcome(dec, pred);
            let _ = dec.decode_window(pred, 4, PixelWindow { x0: 1, y0: 1, x1: 9, y1: 9 });
            assert!(run(dec) == want, "{name} after {pname} differs from a fresh decoder");
        }
    }
    (want.0, want.1)
}

#[test]
fn missing_quantization_tables_fail_on_every_handle() {
    use Subsampling as S;
    for (name, good) in [
        ("baseline", encode(64, 48, 1, S::S420, 90, false, false)),
        ("progressive", encode(64, 48, 2, S::S444, 85, true, false)),
        ("arithmetic", encode(64, 48, 3, S::S420, 90, false, true)),
    ] {
        let no_dqt = strip(&good, DQT);
        assert!(no_dqt.len() < good.len() - 64, "{name}: DQT removed");
        let (header, full) = same_on_every_handle(name, &no_dqt);
        // The header does not need the tables; the decode does (Pillow: "Quantization table 0x00 was not defined"
        // as well).
        assert!(header.is_ok(), "{name}: {header:?}");
        match full {
            Outcome::Error(ImageErrorKind::Corrupt, m) => assert!(m.contains("Quantization table"), "{name}: {m}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn missing_huffman_tables_use_the_standard_ones_in_sequential_files_and_fail_elsewhere() {
    use Subsampling as S;
    // Baseline files written without optimization carry exactly libjpeg's standard tables: without their DHT
    // they must decode to the same pixels (what a fresh handle and Pillow do), whatever came before.
    for (name, good) in [
        ("baseline 4:2:0", encode(64, 48, 4, S::S420, 90, false, false)),
        ("baseline gray", encode(40, 56, 5, S::Gray, 70, false, false)),
        ("baseline 4:4:4", encode(72, 40, 6, S::S444, 95, false, false)),
    ] {
        let no_dht = strip(&good, DHT);
        assert!(no_dht.len() < good.len() - 100, "{name}: DHT removed");
        let (_, full) = same_on_every_handle(name, &no_dht);
        assert_eq!(full, full_outcome(&mut Decoder::new().unwrap(), &good), "{name}: standard tables");
    }
    // Progressive and lossless decoders have no default tables.
    for (name, good) in
        [("progressive", encode(64, 48, 7, S::S420, 90, true, false)), ("lossless", lossless(32, 24, 8, S::S444))]
    {
        let no_dht = strip(&good, DHT);
        let (_, full) = same_on_every_handle(name, &no_dht);
        match full {
            Outcome::Error(ImageErrorKind::Corrupt, m) => assert!(m.contains("Huffman table"), "{name}: {m}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn the_raw_handle_really_keeps_tables_across_images() {
    // The premise, on libjpeg-turbo itself: a used tj3 handle decodes a file without DQT (with the previous
    // image's tables), a fresh one refuses it. If this ever stops holding, the renewal is no longer needed.
    let good = encode(64, 48, 9, Subsampling::S420, 90, false, false);
    let no_dqt = strip(&good, DQT);
    let mut dst = vec![0u8; 64 * 48 * 3];
    let mut decode = |tj: &mut jpeg::TjDecompressor, b: &[u8]| {
        tj.read_header(b).map_err(|_| ())?;
        tj.decompress8(b, &mut dst, 64 * 3, 48, tj::TJPF_TJPF_RGB).map_err(|_| ())
    };
    let mut fresh = jpeg::TjDecompressor::new().unwrap();
    assert!(decode(&mut fresh, &no_dqt).is_err());
    let mut used = jpeg::TjDecompressor::new().unwrap();
    decode(&mut used, &good).unwrap();
    assert!(decode(&mut used, &no_dqt).is_ok(), "libjpeg kept the previous image's quantization tables");
}

#[test]
fn files_with_their_own_tables_never_renew_the_handle() {
    use Subsampling as S;
    let mut d = Decoder::new().unwrap();
    let mut files: Vec<Vec<u8>> = predecessors().into_iter().map(|(_, b)| b).collect();
    files.push(encode(64, 48, 1, S::S420, 90, true, true)); // progressive arithmetic
    files.push(lossless(16, 16, 2, S::S444));
    for f in &files {
        assert!(!markers::walk_jpeg(f).unwrap().borrows_tables);
        assert!(matches!(full_outcome(&mut d, f), Outcome::Pixels { .. }));
        d.decode_window(f, 2, PixelWindow { x0: 0, y0: 0, x1: 8, y1: 8 }).unwrap();
    }
    assert_eq!(d.table_renewals(), 0, "the common path creates no handle");
    // And a borrowing file does renew (once per decode call).
    let no_dht = strip(&files[0], DHT);
    full_outcome(&mut d, &no_dht);
    assert_eq!(d.table_renewals(), 1);
}

#[test]
fn tables_defined_after_the_scan_that_uses_them_do_not_count() {
    // Move the DQT segments from the header to just before EOI: the scan finds no table (fresh: error), and a used
    // handle must not decode it with the previous image's.
    let good = encode(64, 48, 10, Subsampling::S420, 90, false, false);
    let dqts: Vec<u8> =
        all_segments(&good).iter().filter(|s| s.0 == DQT).flat_map(|&(_, s, e)| good[s..e].to_vec()).collect();
    let mut late = strip(&good, DQT);
    let eoi = late.len() - 2;
    late.splice(eoi..eoi, dqts);
    assert!(markers::walk_jpeg(&late).unwrap().borrows_tables);
    let (_, full) = same_on_every_handle("late DQT", &late);
    assert!(matches!(full, Outcome::Error(ImageErrorKind::Corrupt, _)), "{full:?}");
}

#[test]
fn a_tables_only_datastream_is_an_error_whatever_came_before() {
    // SOI + the tables of a real file + EOI: libjpeg's abbreviated table specification. tj3DecompressHeader loads
    // the tables and reports the previous image's size as this file's.
    let good = encode(64, 48, 11, Subsampling::S420, 90, false, false);
    let mut tables = good[..2].to_vec();
    for (m, s, e) in all_segments(&good) {
        if m == DQT || m == DHT {
            tables.extend_from_slice(&good[s..e]);
        }
    }
    tables.extend_from_slice(&[0xFF, 0xD9]);
    assert!(markers::ends_before_scan(&tables));
    assert!(!markers::ends_before_scan(&good));
    let (header, full) = same_on_every_handle("tables only", &tables);
    assert!(matches!(&header, Err((ImageErrorKind::Corrupt, m)) if m.contains("tables-only")), "{header:?}");
    assert!(matches!(full, Outcome::Error(ImageErrorKind::Corrupt, _)));
    // The tables it loaded do not reach a later file that lacks them.
    let no_dqt = strip(&good, DQT);
    let mut d = Decoder::new().unwrap();
    let _ = d.read_header(&tables);
    assert!(matches!(full_outcome(&mut d, &no_dqt), Outcome::Error(..)));
}

#[test]
fn ends_before_scan_follows_libjpeg_lengths() {
    // APPn/COM with a length below 2 skip nothing more in libjpeg, so the EOI after them is still reached.
    assert!(markers::ends_before_scan(&[0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x00, 0xFF, 0xD9]));
    assert!(markers::ends_before_scan(&[0xFF, 0xD8, 0xFF, 0xFE, 0x00, 0x04, 0xAA, 0xBB, 0xFF, 0xFF, 0xD9]));
    // Junk before a marker is skipped (with a warning tj3DecompressHeader then ignores); a header cut short gets
    // libjpeg's inserted EOI.
    assert!(markers::ends_before_scan(&[0xFF, 0xD8, 0x12, 0xFF, 0xD9]));
    assert!(markers::ends_before_scan(&[0xFF, 0xD8, 0xFF, 0xE0, 0x00]));
    assert!(markers::ends_before_scan(&[0xFF, 0xD8, 0xFF]));
    // A DQT with a bad length or a reserved marker is a libjpeg error, not a tables-only stream; an SOS is a scan.
    assert!(!markers::ends_before_scan(&[0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x01, 0xFF, 0xD9]));
    assert!(!markers::ends_before_scan(&[0xFF, 0xD8, 0xFF, 0x4A, 0x00, 0x02, 0xFF, 0xD9]));
    assert!(!markers::ends_before_scan(&[0xFF, 0xD8, 0x00, 0xFF, 0xDA, 0x00]));
    // Every prefix of a real file that cuts it before its first SOS is one; the whole file is not.
    let good = encode(32, 24, 12, Subsampling::S420, 80, false, false);
    let sos = all_segments(&good).iter().find(|s| s.0 == 0xDA).unwrap().1;
    for cut in 2..=sos {
        assert!(markers::ends_before_scan(&good[..cut]), "cut {cut}");
    }
    assert!(!markers::ends_before_scan(&good[..sos + 2]));
}
