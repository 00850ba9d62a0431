//! Tests of `gpu_eligible.rs`: every committed fixture (and `../shared/data/edge-cases` when present) classified
//! with the reason its name says, cross-checked with libjpeg-turbo's own header read; JPEGs of every subsampling
//! written by the crate's encoder; header edits, one rule at a time; a proptest fuzz whose oracle is
//! libjpeg-turbo (header facts agree, and a complete eligible file decodes without a fatal error); and an
//! `#[ignore]` report on the ImageNet sample (counts and µs per call).

use std::cell::Cell;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

use super::gpu_eligible::walk_header;
use super::*;
use crate::synthetic::encode::JpegEncoder;
use crate::test_data::pattern;

const NO_LIMIT: usize = usize::MAX;

fn fixtures(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures").join(sub)
}

/// `<shared data>/<sub>` only when the real shared data is there (no generated fallback: that is the extra tier).
fn shared(sub: &str) -> Option<PathBuf> {
    let root = std::env::var_os("TRDATA_TEST_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("shared").join("data"));
    let d = root.join(sub);
    d.is_dir().then_some(d)
}

fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_none_or(|e| e != "txt"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    v.sort();
    v
}

/// A decoder whose pixel limit admits every size `gpu_eligible` accepts (16384² = 268 MP), so that its header
/// read is libjpeg-turbo's answer and not the default 100 MP budget.
fn oracle() -> Decoder {
    let max_pixels = u64::from(GPU_MAX_DIMENSION).pow(2);
    Decoder::with_limits(DecodeLimits { max_pixels, ..DecodeLimits::default() }).unwrap()
}

/// libjpeg-turbo's header read agrees with an eligible answer: same size and subsampling, YCbCr (or gray) 8-bit
/// baseline, not progressive, not lossless.
fn agrees_with_libjpeg(d: &mut Decoder, bytes: &[u8], j: GpuJpeg) -> Result<(), String> {
    let info =
        d.read_header(bytes).map_err(|e| format!("eligible {j:?}, but libjpeg-turbo's header read fails: {e}"))?;
    let want_cs = if j.subsampling == Subsampling::Gray { ColorSpace::Gray } else { ColorSpace::YCbCr };
    let same = info.format == ImageFormat::Jpeg
        && (info.width, info.height) == (j.width, j.height)
        && info.subsampling == j.subsampling
        && info.colorspace == want_cs
        && info.precision == 8
        && !info.progressive
        && !info.lossless;
    if same { Ok(()) } else { Err(format!("eligible {j:?}, libjpeg-turbo reads {info:?}")) }
}

/// For the refusals libjpeg-turbo can see in its header, it sees the same thing.
fn refusal_agrees_with_libjpeg(d: &mut Decoder, bytes: &[u8], why: Ineligible) -> Result<(), String> {
    let info = d.read_header(bytes);
    let ok = match (why, &info) {
        (Ineligible::NotJpeg, Ok(i)) => i.format != ImageFormat::Jpeg,
        (Ineligible::NotJpeg, Err(_)) => true,
        (Ineligible::Progressive, Ok(i)) => i.progressive,
        (Ineligible::Lossless, Ok(i)) => i.lossless,
        (Ineligible::Cmyk, Ok(i)) => matches!(i.colorspace, ColorSpace::Cmyk | ColorSpace::Ycck),
        (Ineligible::Precision, Ok(i)) => i.precision != 8,
        (Ineligible::RgbCoded, Ok(i)) => i.colorspace == ColorSpace::Rgb || i.colorspace == ColorSpace::YCbCr,
        (Ineligible::Sampling, Ok(i)) => !matches!(
            i.subsampling,
            Subsampling::S444 | Subsampling::S422 | Subsampling::S420 | Subsampling::S440 | Subsampling::Gray
        ),
        // Truncated before the first scan: libjpeg cannot read the header either.
        (Ineligible::Truncated, r) => r.is_err(),
        // Only the last two bytes decide; the CPU path then finds the truncation (or ignores the trailer).
        (Ineligible::NoEndMarker, _) => !bytes.ends_with(&[0xFF, 0xD9]),
        _ => true,
    };
    if ok { Ok(()) } else { Err(format!("refused as {why:?}, libjpeg-turbo reads {info:?}")) }
}

/// What a file's name says `gpu_eligible` answers: the subsampling, or the reason.
type Expect = Result<Subsampling, Ineligible>;

/// Edge-case files (`<category>__<source name>`; README.txt of the folder describes each).
fn expected_edge_case(name: &str) -> Expect {
    use Ineligible::*;
    use Subsampling::*;
    let category = name.split("__").next().unwrap();
    match category {
        "arithmetic_coded" => Err(Arithmetic),
        "cmyk_ycck" => Err(Cmyk),
        // APP14 shortened to 11 bytes leaves its transform byte between segments; junk after a COM segment.
        "corrupt_app14_truncated" | "corrupt_junk_between_markers" => Err(ExtraneousBytes),
        // Orientation 0 is invalid: Pillow (and the CPU path) leave the image as stored.
        "exif_orient0_photo" | "exif_orient1_photo" => Ok(S420),
        c if c.starts_with("exif_orient") => Err(Orientation),
        "extreme_aspect_284x25" => Ok(S444),
        "gray" | "tiny_1x1_gray" => Ok(Gray),
        "imagenet_png_disguised_as_jpeg" | "png_gray" | "png_rgb" | "png_rgba" => Err(NotJpeg),
        "large_12mp_422" => Err(RestartInterval),
        // The first frame of the MPO is a plain baseline JPEG.
        "mpo_stereo_2frames" => Ok(S422),
        "precision12bit" => Err(Precision),
        "progressive420" | "progressive422_camera" | "progressive444_big_icc" | "truncated_progressive" => {
            Err(Progressive)
        }
        "restart_markers_dri13" | "ycc444_adobe" | "ycc444_camera" => Err(RestartInterval),
        "sof1_16bit_qtables" => Err(ExtendedSequential),
        // The truncated Ultra HDR file ends inside its entropy data: its header is complete, its EOI missing.
        "truncated_baseline_ultrahdr" => Err(NoEndMarker),
        "tiny_1x1_color" | "tiny_8x8" | "ycc420_oddsize" | "ycc420_ref" => Ok(S420),
        "ycc422_camera" => Ok(S422),
        "ycc440" => Ok(S440),
        _ => panic!("no expectation for edge case {name}: add one"),
    }
}

/// Pillow-written files (`<expected>__<what>.jpg`, scripts/make_pillow_jpeg_fixtures.py).
fn expected_by_prefix(name: &str) -> Expect {
    let prefix = name.split("__").next().unwrap();
    if let Some(s) = GPU_SUBSAMPLINGS.into_iter().find(|s| prefix == format!("s{}", s.as_str()) || prefix == s.as_str())
    {
        return Ok(s);
    }
    match Ineligible::ALL.into_iter().find(|r| r.as_str() == prefix) {
        Some(r) => Err(r),
        None => panic!("file name {name} does not start with an expected outcome"),
    }
}

fn check_files(files: &[(String, Vec<u8>)], expect: fn(&str) -> Expect) -> usize {
    let mut d = oracle();
    let mut failures = Vec::new();
    for (name, bytes) in files {
        let simple = gpu_eligible(bytes, NO_LIMIT).map(|j| j.subsampling);
        if simple != expect(name) {
            failures.push(format!("{name}: got {simple:?}, expected {:?}", expect(name)));
            continue;
        }
        // The header walk's answer (the EOI rule aside) is cross-checked against libjpeg-turbo.
        let got = walk_header(bytes, NO_LIMIT);
        let cross = match got {
            Ok((j, end)) => agrees_with_libjpeg(&mut d, bytes, j).and_then(|()| {
                // The answer depends only on the bytes up to the end of the first scan header.
                let head = walk_header(&bytes[..end], NO_LIMIT);
                if head == got { Ok(()) } else { Err(format!("header alone gives {head:?}")) }
            }),
            Err(why) => refusal_agrees_with_libjpeg(&mut d, bytes, why),
        };
        if let Err(e) = cross {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    files.len()
}

#[test]
fn committed_fixtures_are_classified_as_their_names_say() {
    let edge = files_in(&fixtures("edge-cases"));
    let pillow = files_in(&fixtures("pillow-jpeg"));
    assert!(edge.len() >= 35 && pillow.len() >= 13, "fixtures missing: {} + {}", edge.len(), pillow.len());
    check_files(&edge, expected_edge_case);
    check_files(&pillow, expected_by_prefix);
    // The reasons the brief names all occur among real files.
    let reasons: Vec<Ineligible> =
        edge.iter().chain(&pillow).filter_map(|(_, b)| gpu_eligible(b, NO_LIMIT).err()).collect();
    for r in [
        Ineligible::Progressive,
        Ineligible::Cmyk,
        Ineligible::NotJpeg,
        Ineligible::Precision,
        Ineligible::Arithmetic,
        Ineligible::RgbCoded,
        Ineligible::RestartInterval,
        Ineligible::Orientation,
    ] {
        assert!(reasons.contains(&r), "{r:?}");
    }
}

/// The larger tier: the 46 files of ../shared/data/edge-cases (skipped with a note when absent).
#[test]
fn shared_edge_cases_are_classified_as_their_names_say() {
    let Some(dir) = shared("edge-cases") else {
        eprintln!("NOTE: ../shared/data/edge-cases is absent; only the committed fixtures were checked");
        return;
    };
    let n = check_files(&files_in(&dir), expected_edge_case);
    assert!(n >= 46, "{n} files");
}

fn encode_with(w: u32, h: u32, sub: Subsampling, setup: impl FnOnce(&mut JpegEncoder)) -> Vec<u8> {
    let mut e = JpegEncoder::new().unwrap();
    setup(&mut e);
    let px = pattern(w, h, w ^ (h << 8));
    let px = if sub == Subsampling::Gray { px.chunks_exact(3).map(|p| p[1]).collect() } else { px };
    e.encode(&px, w, h, 90, sub).unwrap()
}

fn encode(w: u32, h: u32, sub: Subsampling) -> Vec<u8> {
    encode_with(w, h, sub, |_| {})
}

const ENCODER_LAYOUTS: [(Subsampling, Subsampling); 5] = [
    (Subsampling::S444, Subsampling::S444),
    (Subsampling::S422, Subsampling::S422),
    (Subsampling::S420, Subsampling::S420),
    (Subsampling::S440, Subsampling::S440),
    (Subsampling::Gray, Subsampling::Gray),
];

#[test]
fn encoder_written_jpegs_of_each_subsampling() {
    let mut d = oracle();
    for (sub, want) in ENCODER_LAYOUTS {
        for (w, h) in [(1, 1), (17, 9), (64, 48), (227, 149), (GPU_MAX_DIMENSION, 8), (8, GPU_MAX_DIMENSION)] {
            let b = encode(w, h, sub);
            let j = gpu_eligible(&b, NO_LIMIT);
            assert_eq!(j, Ok(GpuJpeg { width: w, height: h, subsampling: want }), "{sub:?} {w}x{h}");
            agrees_with_libjpeg(&mut d, &b, j.unwrap()).unwrap();
            // The size limit is inclusive.
            assert!(gpu_eligible(&b, b.len()).is_ok());
            assert_eq!(gpu_eligible(&b, b.len() - 1), Err(Ineligible::FileTooLarge));
        }
        for (w, h) in [(GPU_MAX_DIMENSION + 1, 8), (8, GPU_MAX_DIMENSION + 1)] {
            assert_eq!(gpu_eligible(&encode(w, h, sub), NO_LIMIT), Err(Ineligible::Dimensions), "{sub:?} {w}x{h}");
        }
        let prog = encode_with(40, 24, sub, |e| e.set_progressive(true).unwrap());
        assert_eq!(gpu_eligible(&prog, NO_LIMIT), Err(Ineligible::Progressive), "{sub:?}");
        for progressive in [false, true] {
            let arith = encode_with(40, 24, sub, |e| {
                e.set_arithmetic(true).unwrap();
                e.set_progressive(progressive).unwrap();
            });
            assert_eq!(gpu_eligible(&arith, NO_LIMIT), Err(Ineligible::Arithmetic), "{sub:?}");
        }
        let restart = encode_with(40, 24, sub, |e| e.set_restart_blocks(1).unwrap());
        assert_eq!(gpu_eligible(&restart, NO_LIMIT), Err(Ineligible::RestartInterval), "{sub:?}");
    }
    let s411 = encode(64, 16, Subsampling::S411);
    assert_eq!(gpu_eligible(&s411, NO_LIMIT), Err(Ineligible::Sampling));
    assert_eq!(oracle().read_header(&s411).unwrap().subsampling, Subsampling::S411);
    for sub in [Subsampling::S444, Subsampling::Gray] {
        let px = pattern(24, 16, 5);
        let px = if sub == Subsampling::Gray { px[..24 * 16].to_vec() } else { px };
        let lossless = JpegEncoder::new().unwrap().encode_lossless(&px, 24, 16, sub, 1).unwrap();
        assert_eq!(gpu_eligible(&lossless, NO_LIMIT), Err(Ineligible::Lossless));
    }
}

/// Header segments of a JPEG up to and including the first SOS: (marker, offset of its FF, offset past it).
fn segments(b: &[u8]) -> Vec<(u8, usize, usize)> {
    let mut out = Vec::new();
    let mut pos = 2;
    loop {
        assert_eq!(b[pos], 0xFF, "test helper wants a clean header");
        let m = b[pos + 1];
        let end = pos + 2 + usize::from(u16::from_be_bytes([b[pos + 2], b[pos + 3]]));
        out.push((m, pos, end));
        if m == 0xDA {
            return out;
        }
        pos = end;
    }
}

fn segment(marker: u8, payload: &[u8]) -> Vec<u8> {
    let mut s = vec![0xFF, marker];
    s.extend_from_slice(&u16::try_from(payload.len() + 2).unwrap().to_be_bytes());
    s.extend_from_slice(payload);
    s
}

/// `b` with `insert` placed at byte `at`.
fn spliced(b: &[u8], at: usize, remove: usize, insert: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    v.splice(at..at + remove, insert.iter().copied());
    v
}

fn find(b: &[u8], marker: u8) -> (usize, usize) {
    segments(b).into_iter().find(|s| s.0 == marker).map(|s| (s.1, s.2)).unwrap()
}

fn without_jfif(b: &[u8]) -> Vec<u8> {
    let (s, e) = find(b, 0xE0);
    spliced(b, s, e - s, &[])
}

fn adobe(transform: u8) -> Vec<u8> {
    segment(0xEE, &[b'A', b'd', b'o', b'b', b'e', 0, 100, 0, 0, 0, 0, transform])
}

/// A minimal little-endian EXIF block whose IFD0 holds Orientation = `k` (SHORT).
fn exif_orientation(k: u16) -> Vec<u8> {
    let mut p = b"Exif\0\0II*\0\x08\0\0\0\x01\0\x12\x01\x03\0\x01\0\0\0".to_vec();
    p.extend_from_slice(&k.to_le_bytes());
    p.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    segment(0xE1, &p)
}

#[test]
fn each_header_rule_on_its_own() {
    use Ineligible::*;
    let mut d = oracle();
    let good = encode(48, 32, Subsampling::S420);
    let gray = encode(48, 32, Subsampling::Gray);
    let ok = Ok(GpuJpeg { width: 48, height: 32, subsampling: Subsampling::S420 });
    assert_eq!(gpu_eligible(&good, NO_LIMIT), ok);
    let after_soi = |b: &[u8], seg: &[u8]| spliced(b, 2, 0, seg);

    // Colour transform (libjpeg-turbo: JFIF wins over Adobe; without JFIF, transform 0 is RGB).
    assert_eq!(gpu_eligible(&after_soi(&good, &adobe(0)), NO_LIMIT), Err(RgbCoded));
    let rgb = after_soi(&without_jfif(&good), &adobe(0));
    assert_eq!(gpu_eligible(&rgb, NO_LIMIT), Err(RgbCoded));
    assert_eq!(d.read_header(&rgb).unwrap().colorspace, ColorSpace::Rgb, "libjpeg-turbo decodes it as RGB");
    assert_eq!(gpu_eligible(&after_soi(&without_jfif(&good), &adobe(1)), NO_LIMIT), ok);
    assert_eq!(gpu_eligible(&after_soi(&good, &adobe(2)), NO_LIMIT), Err(AdobeTransform));
    // Gray: the transform is irrelevant.
    assert!(gpu_eligible(&after_soi(&gray, &adobe(0)), NO_LIMIT).is_ok());
    // An APP14 too short to hold a transform is not an Adobe marker (libjpeg ignores it too).
    let short = segment(0xEE, b"Adobe\0\x64\0\0\0\0");
    assert_eq!(gpu_eligible(&after_soi(&without_jfif(&good), &short), NO_LIMIT), ok);
    // Component ids 'R','G','B' without JFIF or Adobe markers: libjpeg-turbo guesses RGB.
    let mut ids = without_jfif(&good);
    let (sof, _) = find(&ids, 0xC0);
    let (sos, _) = find(&ids, 0xDA);
    for (i, id) in b"RGB".iter().enumerate() {
        ids[sof + 10 + 3 * i] = *id;
        ids[sos + 5 + 2 * i] = *id;
    }
    assert_eq!(gpu_eligible(&ids, NO_LIMIT), Err(RgbCoded));
    assert_eq!(d.read_header(&ids).unwrap().colorspace, ColorSpace::Rgb);

    // Restart interval.
    assert_eq!(gpu_eligible(&after_soi(&good, &segment(0xDD, &[0, 0])), NO_LIMIT), ok);
    assert_eq!(gpu_eligible(&after_soi(&good, &segment(0xDD, &[0, 7])), NO_LIMIT), Err(RestartInterval));
    assert_eq!(gpu_eligible(&after_soi(&good, &segment(0xDD, &[0, 0, 7])), NO_LIMIT), Err(Malformed));

    // EXIF orientation, as the CPU path reads it: 0 and 9 are "as stored", like 1.
    for (k, want) in [(1, ok), (0, ok), (9, ok), (6, Err(Orientation)), (3, Err(Orientation)), (8, Err(Orientation))] {
        assert_eq!(gpu_eligible(&after_soi(&good, &exif_orientation(k)), NO_LIMIT), want, "orientation {k}");
    }

    // Tables.
    let wide = segment(0xDB, &[[0x10u8].as_slice(), &[0u8, 3].repeat(64)].concat());
    assert_eq!(gpu_eligible(&after_soi(&good, &wide), NO_LIMIT), Err(NonBaselineTables));
    let short_dqt = segment(0xDB, &[0u8; 40]);
    assert_eq!(gpu_eligible(&after_soi(&good, &short_dqt), NO_LIMIT), Err(Malformed));
    let no_dht: Vec<u8> = {
        let mut v = good.clone();
        for (m, s, e) in segments(&good).into_iter().rev() {
            if m == 0xC4 {
                v.drain(s..e);
            }
        }
        v
    };
    assert_eq!(gpu_eligible(&no_dht, NO_LIMIT), Err(MissingTable));
    assert!(d.read_header(&no_dht).is_ok(), "libjpeg-turbo would use its default tables");
    let no_dqt: Vec<u8> = {
        let mut v = good.clone();
        for (m, s, e) in segments(&good).into_iter().rev() {
            if m == 0xDB {
                v.drain(s..e);
            }
        }
        v
    };
    assert_eq!(gpu_eligible(&no_dqt, NO_LIMIT), Err(MissingTable));
    // A fresh handle: libjpeg keeps the tables of earlier images on a handle (abbreviated streams), so a used
    // decoder would decode this file with the last image's quantization tables.
    let fresh = || Decoder::new().unwrap();
    assert!(fresh().decode_full_rgb(&no_dqt, &mut Vec::new()).is_err(), "libjpeg-turbo needs the table too");

    // Huffman tables libjpeg-turbo rejects when it builds them: over-subscribed code lengths, DC symbol > 15.
    let (dht, _) = find(&good, 0xC4);
    let mut over = good.clone();
    let counts = dht + 5; // FF C4 len(2) Tc/Th, then 16 counts
    let l = (1..16).find(|&i| over[counts + i] >= 1).unwrap();
    over[counts + l] -= 1;
    over[counts] += 1; // a second 1-bit code when a longer one exists: the code space overflows
    assert_eq!(gpu_eligible(&over, NO_LIMIT), Err(Malformed));
    assert!(fresh().decode_full_rgb(&over, &mut Vec::new()).is_err(), "libjpeg-turbo rejects it too");
    let mut dc16 = good.clone();
    assert_eq!(dc16[dht + 4] >> 4, 0, "first table of the first DHT is a DC table");
    dc16[dht + 5 + 16] = 16;
    assert_eq!(gpu_eligible(&dc16, NO_LIMIT), Err(Malformed));
    assert!(fresh().decode_full_rgb(&dc16, &mut Vec::new()).is_err(), "libjpeg-turbo rejects it too");

    // Frame.
    let (sof, sof_end) = find(&good, 0xC0);
    let mut p12 = good.clone();
    p12[sof + 4] = 12;
    assert_eq!(gpu_eligible(&p12, NO_LIMIT), Err(Precision));
    let mut sof1 = good.clone();
    sof1[sof + 1] = 0xC1;
    assert_eq!(gpu_eligible(&sof1, NO_LIMIT), Err(ExtendedSequential));
    let mut zero = good.clone();
    zero[sof + 5..sof + 7].copy_from_slice(&[0, 0]);
    assert_eq!(gpu_eligible(&zero, NO_LIMIT), Err(Dimensions));
    let mut s411 = good.clone();
    s411[sof + 11] = 0x41;
    assert_eq!(gpu_eligible(&s411, NO_LIMIT), Err(Sampling));
    let mut chroma21 = good.clone();
    chroma21[sof + 14] = 0x21;
    assert_eq!(gpu_eligible(&chroma21, NO_LIMIT), Err(Sampling));
    let mut zero_factor = good.clone();
    zero_factor[sof + 11] = 0x02;
    assert_eq!(gpu_eligible(&zero_factor, NO_LIMIT), Err(Malformed));
    let twice = spliced(&good, sof_end, 0, &good[sof..sof_end]);
    assert_eq!(gpu_eligible(&twice, NO_LIMIT), Err(Malformed));
    assert_eq!(gpu_eligible(&spliced(&good, sof, sof_end - sof, &[]), NO_LIMIT), Err(Malformed), "scan before frame");

    // Scan.
    let (sos, sos_end) = find(&good, 0xDA);
    let one = [&good[sos..sos + 2], &[0, 8, 1], &good[sos + 5..sos + 7], &[0, 63, 0]].concat();
    assert_eq!(gpu_eligible(&spliced(&good, sos, sos_end - sos, &one), NO_LIMIT), Err(MultiScan));
    let mut ss = good.clone();
    ss[sos_end - 3] = 1;
    assert_eq!(gpu_eligible(&ss, NO_LIMIT), Err(Malformed));
    let mut swapped = good.clone();
    swapped.swap(sos + 7, sos + 9);
    assert_eq!(gpu_eligible(&swapped, NO_LIMIT), Err(Malformed), "components out of frame order");
    let mut table2 = good.clone();
    table2[sos + 6] = 0x02;
    assert_eq!(gpu_eligible(&table2, NO_LIMIT), Err(NonBaselineTables));

    // Marker structure: fill bytes are fine, junk and stray markers are not.
    assert_eq!(gpu_eligible(&spliced(&good, sos, 0, &[0xFF, 0xFF]), NO_LIMIT), ok);
    assert_eq!(gpu_eligible(&spliced(&good, sos, 0, &[0x00, 0x17]), NO_LIMIT), Err(ExtraneousBytes));
    assert_eq!(gpu_eligible(&spliced(&good, sos, 0, &[0xFF, 0xD3]), NO_LIMIT), Err(UnexpectedMarker));
    assert_eq!(gpu_eligible(&spliced(&good, sos, 0, &[0xFF, 0xD9]), NO_LIMIT), Err(UnexpectedMarker));
    assert_eq!(gpu_eligible(&spliced(&good, sos, 0, &segment(0xFE, b"comment")), NO_LIMIT), ok);
    assert_eq!(gpu_eligible(&spliced(&good, sos, 0, &segment(0xEF, b"app15")), NO_LIMIT), ok);
    assert_eq!(gpu_eligible(&spliced(&good, sos, 0, &segment(0xCC, &[0, 0x11])), NO_LIMIT), Err(Arithmetic));
    assert_eq!(gpu_eligible(&spliced(&good, sos, 0, &[0xFF, 0xE0, 0, 1]), NO_LIMIT), Err(Malformed));
    assert_eq!(gpu_eligible(b"\x89PNG\r\n\x1a\n", NO_LIMIT), Err(NotJpeg));
    assert_eq!(gpu_eligible(b"", NO_LIMIT), Err(NotJpeg));
    // NotJpeg is said before FileTooLarge (a big PNG is counted as a PNG).
    assert_eq!(gpu_eligible(b"\x89PNG\r\n\x1a\n", 4), Err(NotJpeg));

    // Truncation: every cut before the end of the first scan header is Truncated, every later one lacks the EOI;
    // the whole file is eligible, and so is nothing with data after its EOI.
    let (_, end) = walk_header(&good, NO_LIMIT).unwrap();
    assert_eq!(end, sos_end);
    for cut in 2..good.len() {
        let r = gpu_eligible(&good[..cut], NO_LIMIT);
        if cut < end {
            assert_eq!(r, Err(Truncated), "cut {cut}")
        } else {
            assert_eq!(r, Err(NoEndMarker), "cut {cut}")
        }
    }
    assert_eq!(gpu_eligible(&good, NO_LIMIT), ok);
    assert_eq!(gpu_eligible(&[&good[..], b"trailer"].concat(), NO_LIMIT), Err(NoEndMarker));
    assert_eq!(gpu_eligible(&good[..1], NO_LIMIT), Err(NotJpeg));
}

/// Found by `cargo fuzz run gpu_eligible` (first version of its oracle): a valid header and first scan followed
/// by a second SOS with a bogus component id. Eligible (later scans are not read), libjpeg-turbo reads the header,
/// its decode of the whole file fails at the *second* scan header, and the first scan alone decodes.
#[test]
fn a_bad_second_scan_is_not_a_header_failure() {
    let good = encode(48, 32, Subsampling::S420);
    let eoi = good.len() - 2;
    let bad =
        [&good[..eoi], &segment(0xDA, &[4, 67, 0, 77, 0, 89, 0, 75, 0, 0, 63, 0]), &[0x12, 0x34, 0xFF, 0xD9]].concat();
    let (j, end) = walk_header(&bad, NO_LIMIT).unwrap();
    let mut d = oracle();
    agrees_with_libjpeg(&mut d, &bad, j).unwrap();
    let e = d.decode_full_rgb(&bad, &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("SOS"), "{e}");
    assert_eq!(first_scan_only(&bad, end), good);
    assert!(d.decode_full_rgb(&first_scan_only(&bad, end), &mut Vec::new()).is_ok());
}

#[test]
fn names_and_indices_are_stable_and_distinct() {
    for (i, r) in Ineligible::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
        assert!(!r.as_str().is_empty() && r.as_str().bytes().all(|c| c.is_ascii_lowercase() || c == b'_'));
        assert_eq!(r.to_string(), r.describe());
        assert!(Ineligible::ALL[..i].iter().all(|o| o.as_str() != r.as_str()), "{r:?}");
    }
    for (i, s) in GPU_SUBSAMPLINGS.iter().enumerate() {
        assert_eq!(s.index(), i);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Fuzz: random mutations of real headers, synthetic headers and random segments; libjpeg-turbo is the oracle.

/// Fuzz bases: encoder-written JPEGs of each layout and small real files (EXIF, Adobe, DRI, XMP, odd sizes).
fn fuzz_bases() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = ENCODER_LAYOUTS
        .iter()
        .enumerate()
        .map(|(i, (sub, _))| encode(40 + 9 * i as u32, 24 + 5 * i as u32, *sub))
        .collect();
    for name in [
        "ycc420_oddsize__testorig.jpg",
        "tiny_8x8__exif_gps.jpg",
        "tiny_1x1_gray__jfif_unit_cm.jpg",
        "ycc440__Panasonic_DMC-FZ30.jpg",
        "restart_markers_dri13__rgb.jpg",
        "exif_orient6__hopper_orientation_6.jpg",
        "sof1_16bit_qtables__hopper_16bit_qtables.jpg",
    ] {
        v.push(std::fs::read(fixtures("edge-cases").join(name)).unwrap());
    }
    for name in ["rgb_coded__keep_rgb_adobe_transform0.jpg", "orientation__xmp_orientation_3.jpg"] {
        v.push(std::fs::read(fixtures("pillow-jpeg").join(name)).unwrap());
    }
    v
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Flip bit `bit` of a header byte (position taken modulo the header length).
    HeaderBitFlip { pos: usize, bit: u8 },
    /// Overwrite a header byte.
    HeaderByte { pos: usize, value: u8 },
    /// Keep the first `keep` ‰ of the header region, or of the file.
    Truncate { keep: u16, whole: bool },
    /// Insert bytes (often FF-led) at a header position.
    Insert { pos: usize, junk: Vec<u8> },
    /// Insert a whole segment (marker + length + payload) before a header segment.
    Segment { before: usize, marker: u8, payload: Vec<u8> },
    /// Remove a header segment.
    Remove { index: usize },
    /// Overwrite a byte of the SOF segment (precision, size, component count, ids, sampling, tables).
    Sof { offset: usize, value: u8 },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let interesting_markers =
        prop_oneof![Just(0xC0u8), Just(0xC4), Just(0xDB), Just(0xDD), Just(0xE1), Just(0xEE), Just(0xDA), any::<u8>()];
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(pos, bit)| Mutation::HeaderBitFlip { pos, bit }),
        (any::<usize>(), any::<u8>()).prop_map(|(pos, value)| Mutation::HeaderByte { pos, value }),
        (0u16..1000, any::<bool>()).prop_map(|(keep, whole)| Mutation::Truncate { keep, whole }),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..6), any::<bool>()).prop_map(
            |(pos, mut junk, ff)| {
                if ff {
                    junk.insert(0, 0xFF);
                }
                Mutation::Insert { pos, junk }
            }
        ),
        (any::<usize>(), interesting_markers, proptest::collection::vec(any::<u8>(), 0..24))
            .prop_map(|(before, marker, payload)| Mutation::Segment { before, marker, payload }),
        any::<usize>().prop_map(|index| Mutation::Remove { index }),
        (0usize..18, any::<u8>()).prop_map(|(offset, value)| Mutation::Sof { offset, value }),
    ]
}

/// Header segments found by a forgiving walk (stops at anything unexpected): (marker, start, end).
fn loose_segments(b: &[u8]) -> Vec<(u8, usize, usize)> {
    let mut out = Vec::new();
    let mut pos = 2;
    while pos + 4 <= b.len() && b[pos] == 0xFF && b[pos + 1] != 0xFF {
        let end = pos + 2 + usize::from(u16::from_be_bytes([b[pos + 2], b[pos + 3]]));
        if end > b.len() {
            break;
        }
        out.push((b[pos + 1], pos, end));
        if b[pos + 1] == 0xDA {
            break;
        }
        pos = end;
    }
    out
}

fn apply(mut b: Vec<u8>, m: &Mutation) -> Vec<u8> {
    let segs = loose_segments(&b);
    let header_end = segs.last().map_or(b.len(), |s| s.2).clamp(3, b.len().max(3));
    let at = |pos: usize| 2 + pos % (header_end - 2).max(1);
    if b.len() < 3 {
        return b;
    }
    match m {
        Mutation::HeaderBitFlip { pos, bit } => {
            let i = at(*pos).min(b.len() - 1);
            b[i] ^= 1 << bit;
        }
        Mutation::HeaderByte { pos, value } => {
            let i = at(*pos).min(b.len() - 1);
            b[i] = *value;
        }
        Mutation::Truncate { keep, whole } => {
            let base = if *whole { b.len() } else { header_end };
            b.truncate(base * usize::from(*keep) / 1000);
        }
        Mutation::Insert { pos, junk } => {
            let i = at(*pos).min(b.len());
            b.splice(i..i, junk.iter().copied());
        }
        Mutation::Segment { before, marker, payload } => {
            let i = if segs.is_empty() { 2 } else { segs[before % segs.len()].1 };
            b.splice(i..i, segment(*marker, payload));
        }
        Mutation::Remove { index } => {
            if !segs.is_empty() {
                let (_, s, e) = segs[index % segs.len()];
                b.drain(s..e);
            }
        }
        Mutation::Sof { offset, value } => {
            if let Some(&(_, s, e)) = segs.iter().find(|s| matches!(s.0, 0xC0..=0xC3)) {
                let i = s + 4 + offset;
                if i < e {
                    b[i] = *value;
                }
            }
        }
    }
    b
}

/// A header built from parameters, with real tables and the entropy data of a real file behind it: reaches the
/// eligible side with many sizes, sampling factors and markers the mutations rarely produce.
#[derive(Debug, Clone)]
struct Synth {
    base: usize,
    sof: u8,
    precision: u8,
    factors: Vec<(u8, u8)>,
    width: u16,
    height: u16,
    rgb_ids: bool,
    jfif: bool,
    adobe: Option<u8>,
    restart: Option<u16>,
    orientation: Option<u16>,
    all_in_scan: bool,
}

fn synth() -> impl Strategy<Value = Synth> {
    use proptest::option::weighted;
    let factor = prop_oneof![4 => Just(1u8), 3 => Just(2u8), 1 => 0u8..16];
    let random_factors = prop_oneof![2 => Just(1usize), 6 => Just(3), 1 => 0usize..6]
        .prop_flat_map(move |n| proptest::collection::vec((factor.clone(), factor.clone()), n));
    // The layouts that matter (the five eligible ones, 4:1:1, 4:1:0, 4:4:4 written with 2×2 everywhere), or any.
    let layouts: Vec<Vec<(u8, u8)>> = [(1, 1), (2, 1), (2, 2), (1, 2), (4, 1), (4, 2)]
        .into_iter()
        .map(|l| vec![l, (1, 1), (1, 1)])
        .chain([vec![(1, 1)], vec![(2, 2), (2, 2), (2, 2)], vec![(2, 2)]])
        .collect();
    let factors = prop_oneof![3 => proptest::sample::select(layouts), 1 => random_factors];
    let dim = prop_oneof![6 => 1u16..300, 1 => Just(0u16), 1 => 16380u16..16390, 1 => any::<u16>()];
    (
        (0usize..5, prop_oneof![12 => Just(0xC0u8), 1 => Just(0xC1), 1 => Just(0xC2), 1 => Just(0xC9)]),
        prop_oneof![12 => Just(8u8), 1 => Just(12), 1 => any::<u8>()],
        factors,
        (dim.clone(), dim),
        (weighted(0.1, Just(true)).prop_map(|o| o.is_some()), any::<bool>()),
        weighted(0.2, prop_oneof![Just(0u8), Just(1), Just(2), any::<u8>()]),
        weighted(0.15, prop_oneof![Just(0u16), any::<u16>()]),
        weighted(0.2, 0u16..10),
        prop_oneof![8 => Just(true), 1 => Just(false)],
    )
        .prop_map(
            |((base, sof), precision, factors, (width, height), (rgb_ids, jfif), adobe, restart, orientation, all)| {
                Synth {
                    base,
                    sof,
                    precision,
                    factors,
                    width,
                    height,
                    rgb_ids,
                    jfif,
                    adobe,
                    restart,
                    orientation,
                    all_in_scan: all,
                }
            },
        )
}

/// The bytes of a [`Synth`]: its header, then the DHT segments and entropy data (to EOI) of encoder base `base`.
fn build(s: &Synth, bases: &[Vec<u8>]) -> Vec<u8> {
    let base = &bases[s.base % ENCODER_LAYOUTS.len()];
    let segs = segments(base);
    let mut b = vec![0xFF, 0xD8];
    if s.jfif {
        b.extend(segment(0xE0, b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0"));
    }
    if let Some(k) = s.orientation {
        b.extend(exif_orientation(k));
    }
    if let Some(t) = s.adobe {
        b.extend(adobe(t));
    }
    b.extend(segment(0xDB, &[[0u8].as_slice(), &[1; 64], &[1], &[2; 64]].concat()));
    for &(m, st, e) in &segs {
        if m == 0xC4 {
            b.extend_from_slice(&base[st..e]);
        }
    }
    if let Some(r) = s.restart {
        b.extend(segment(0xDD, &r.to_be_bytes()));
    }
    let nf = s.factors.len();
    let ids: Vec<u8> = (0..nf).map(|i| if s.rgb_ids && nf == 3 { b"RGB"[i] } else { i as u8 + 1 }).collect();
    let mut sof = vec![s.precision];
    sof.extend_from_slice(&s.height.to_be_bytes());
    sof.extend_from_slice(&s.width.to_be_bytes());
    sof.push(nf as u8);
    for (i, (h, v)) in s.factors.iter().enumerate() {
        sof.extend_from_slice(&[ids[i], (h << 4) | (v & 15), u8::from(i > 0)]);
    }
    b.extend(segment(s.sof, &sof));
    let ns = if s.all_in_scan { nf } else { 1.min(nf) };
    let mut sos = vec![ns as u8];
    for (i, id) in ids.iter().enumerate().take(ns) {
        sos.extend_from_slice(&[*id, if i == 0 { 0x00 } else { 0x11 }]);
    }
    sos.extend_from_slice(&[0, 63, 0]);
    b.extend(segment(0xDA, &sos));
    let (_, _, sos_end) = *segs.last().unwrap();
    b.extend_from_slice(&base[sos_end..]);
    b
}

thread_local! {
    /// Inputs checked, how many were eligible, and of those how many were decoded (shows the oracle was reached);
    /// per test thread, so parallel tests do not mix their counts.
    static FUZZ_COUNTS: [Cell<usize>; 3] = const { [Cell::new(0), Cell::new(0), Cell::new(0)] };
}

fn count(i: usize) {
    FUZZ_COUNTS.with(|c| c[i].set(c[i].get() + 1));
}

/// The header up to `end` (just past the first SOS header), the first scan's entropy-coded data (up to the next
/// marker that is not RSTn, or the end of the data), and an EOI: what the eligibility rules speak about. Later
/// scans and markers are not read by `gpu_eligible`, so a failure in them is not a header failure.
fn first_scan_only(b: &[u8], end: usize) -> Vec<u8> {
    let mut stop = b.len();
    let mut i = end;
    while i + 1 < b.len() {
        if b[i] == 0xFF && !matches!(b[i + 1], 0x00 | 0xD0..=0xD7 | 0xFF) {
            stop = i;
            break;
        }
        i += 1;
    }
    [&b[..stop], &[0xFF, 0xD9][..]].concat()
}

/// The properties of one fuzz input: no panic; when eligible, the answer depends only on the bytes up to the end
/// of the first scan header (that prefix gives the same answer, one byte less is Truncated), libjpeg-turbo's
/// header read agrees, and the header with its first scan (at most 1 MP) decodes without a fatal error.
fn check(b: &[u8], d: &mut Decoder) -> Result<(), TestCaseError> {
    count(0);
    let Ok((j, end)) = walk_header(b, NO_LIMIT) else { return Ok(()) };
    count(1);
    prop_assert!(end <= b.len());
    prop_assert_eq!(walk_header(&b[..end], NO_LIMIT), Ok((j, end)));
    prop_assert_eq!(walk_header(&b[..end - 1], NO_LIMIT), Err(Ineligible::Truncated));
    agrees_with_libjpeg(d, b, j).map_err(TestCaseError::fail)?;
    if u64::from(j.width) * u64::from(j.height) <= 1 << 20 {
        let mut out = Vec::new();
        if let Err(e) = d.decode_full_rgb(&first_scan_only(b, end), &mut out) {
            return Err(TestCaseError::fail(format!("eligible {j:?} but the decode fails: {e}")));
        }
        count(2);
    }
    Ok(())
}

/// Run `test` for `PROPTEST_CASES` cases (256 in the suite; a long fuzz run sets more).
fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>) {
    let counts = || FUZZ_COUNTS.with(|c| c.iter().map(Cell::get).collect::<Vec<_>>());
    let before = counts();
    let t = std::time::Instant::now();
    let mut runner = TestRunner::new(ProptestConfig {
        max_shrink_iters: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{name}: {e}");
    }
    let c: Vec<usize> = counts().iter().zip(before).map(|(c, b)| c - b).collect();
    eprintln!(
        "{name}: {} inputs in {:.1} s, {} eligible, {} of them decoded",
        c[0],
        t.elapsed().as_secs_f64(),
        c[1],
        c[2]
    );
}

#[test]
fn fuzz_mutated_real_headers() {
    let bases = fuzz_bases();
    let n = bases.len();
    let d = std::cell::RefCell::new(oracle());
    fuzz("mutated headers", (0..n, proptest::collection::vec(mutation(), 1..4)), |(i, ms)| {
        let b = ms.iter().fold(bases[i].clone(), apply);
        check(&b, &mut d.borrow_mut())
    });
}

#[test]
fn fuzz_synthetic_headers() {
    let bases = fuzz_bases();
    let d = std::cell::RefCell::new(oracle());
    fuzz("synthetic headers", (synth(), proptest::option::weighted(0.25, mutation())), |(s, m)| {
        let b = m.iter().fold(build(&s, &bases), apply);
        check(&b, &mut d.borrow_mut())
    });
}

#[test]
fn fuzz_random_segments_and_bytes() {
    let d = std::cell::RefCell::new(oracle());
    let seg = (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..40));
    let input = prop_oneof![
        proptest::collection::vec(seg, 0..8).prop_map(|segs| {
            let mut b = vec![0xFF, 0xD8];
            for (m, p) in segs {
                b.extend(segment(m, &p));
            }
            b
        }),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(|body| [&[0xFF, 0xD8][..], &body].concat()),
        proptest::collection::vec(any::<u8>(), 0..64),
    ];
    fuzz("random segments", input, |b| check(&b, &mut d.borrow_mut()));
}

// ---------------------------------------------------------------------------------------------------------------

fn imagenet_files() -> Option<Vec<PathBuf>> {
    let root = shared("imagenet-sample")?;
    let mut files = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e != "txt") {
                files.push(p);
            }
        }
    }
    files.sort();
    Some(files)
}

/// Report (run with `cargo test --release --lib gpu_eligible_imagenet_report -- --ignored --nocapture`): on the
/// 1,000-file ImageNet sample, how many files are eligible per subsampling and why the others are not, the
/// mean cost of a call, and that every eligible file agrees with libjpeg-turbo's header. Prints; asserts the
/// agreement, nothing about time.
#[test]
#[ignore]
fn gpu_eligible_imagenet_report() {
    let Some(files) = imagenet_files() else {
        eprintln!("NOTE: ../shared/data/imagenet-sample is absent");
        return;
    };
    let data: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let max_file_bytes = 8 << 20;
    let mut per_sub = [0usize; GPU_SUBSAMPLINGS.len()];
    let mut per_reason = [0usize; Ineligible::ALL.len()];
    let mut d = oracle();
    for (f, b) in files.iter().zip(&data) {
        match gpu_eligible(b, max_file_bytes) {
            Ok(j) => {
                per_sub[j.subsampling.index()] += 1;
                agrees_with_libjpeg(&mut d, b, j).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            }
            Err(r) => {
                per_reason[r.index()] += 1;
                eprintln!("  {}: {r}", f.display());
            }
        }
    }
    let reps = 200;
    let t = std::time::Instant::now();
    let mut eligible = 0usize;
    for _ in 0..reps {
        for b in &data {
            eligible +=
                usize::from(std::hint::black_box(gpu_eligible(std::hint::black_box(b), max_file_bytes)).is_ok());
        }
    }
    let call_ns = t.elapsed().as_nanos() as f64 / (reps * data.len()) as f64;
    let t = std::time::Instant::now();
    for _ in 0..reps / 10 {
        for b in &data {
            let _ = std::hint::black_box(markers::walk_jpeg(std::hint::black_box(b)));
        }
    }
    let walk_ns = t.elapsed().as_nanos() as f64 / (reps / 10 * data.len()) as f64;
    let subs: Vec<String> = GPU_SUBSAMPLINGS.iter().map(|s| format!("{} {}", s, per_sub[s.index()])).collect();
    let reasons: Vec<String> = Ineligible::ALL
        .iter()
        .filter(|r| per_reason[r.index()] > 0)
        .map(|r| format!("{} {}", r.as_str(), per_reason[r.index()]))
        .collect();
    eprintln!(
        "gpu_eligible on {} files: eligible {} ({}), CPU {} ({}); {:.3} us/call (mean over {} x {} calls), \
         walk_jpeg (whole-file marker walk) {:.2} us/file",
        data.len(),
        eligible / reps,
        subs.join(", "),
        data.len() - eligible / reps,
        if reasons.is_empty() { "none".to_string() } else { reasons.join(", ") },
        call_ns / 1e3,
        reps,
        data.len(),
        walk_ns / 1e3
    );
}
