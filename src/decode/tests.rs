//! Decoder tests on the real files of `../shared/data/edge-cases` (skipped with a note when the data is absent).

use super::*;
use crate::rng::SampleRng;

use crate::test_data::data_dir;

fn edge(name: &str) -> Option<Vec<u8>> {
    let d = data_dir("edge-cases")?;
    Some(std::fs::read(d.join(name)).unwrap_or_else(|e| panic!("{name}: {e}")))
}

/// Expected outcome of every file of the edge-case folder: `Ok((w, h))` or the error kind.
fn expected(name: &str) -> Option<std::result::Result<(u32, u32), ImageErrorKind>> {
    use ImageErrorKind::*;
    Some(match name {
        "README.txt" => Err(UnknownFormat),
        "truncated_progressive__truncated_jpeg.jpg" | "truncated_baseline_ultrahdr__ultrahdr.jpg" => Err(Corrupt),
        "arithmetic_coded__testimgari.jpg" | "ycc420_oddsize__testorig.jpg" | "png_gray__testorig.png" => {
            Ok((227, 149))
        }
        "cmyk_ycck__pil_sample_cmyk.jpg"
        | "ycc444_adobe__pil_sample_rgb.jpg"
        | "restart_markers_dri13__rgb.jpg"
        | "corrupt_app14_truncated__truncated_app14.jpg" => Ok((100, 100)),
        "corrupt_junk_between_markers__junk_jpeg_header.jpg" => Ok((1024, 768)),
        n if n.starts_with("exif_orient") && n.contains("_photo__Landscape_") => {
            let k: u32 = n["exif_orient".len()..].chars().next()?.to_digit(10)?;
            // Stored pixel order, EXIF orientation NOT applied: 5..8 are stored portrait.
            if k >= 5 { Ok((1200, 1800)) } else { Ok((1800, 1200)) }
        }
        "exif_orient8_2x1__orientation_rectangle.jpg" => Ok((2, 1)),
        n if n.starts_with("exif_orient") && n.contains("hopper_orientation") => Ok((128, 128)),
        "extreme_aspect_284x25__image01980.jpg" => Ok((284, 25)),
        "gray__hopper_gray.jpg"
        | "png_rgb__hopper.png"
        | "sof1_16bit_qtables__hopper_16bit_qtables.jpg"
        | "ycc420_ref__hopper.jpg" => Ok((128, 128)),
        "imagenet_png_disguised_as_jpeg__n02105855_2933.JPEG" => Ok((213, 189)),
        "large_12mp_422__42_IndexError.jpg" => Ok((4032, 3024)),
        "mpo_stereo_2frames__frozenpond.mpo" | "ycc422_camera__canon-ixus.jpg" => Ok((640, 480)),
        "png_rgba__transparent.png" => Ok((200, 150)),
        "precision12bit__monkey12.jpg" => Ok((149, 227)),
        "progressive420__app13-multiple.jpg" => Ok((256, 160)),
        "progressive422_camera__32-lens_data.jpeg" => Ok((200, 133)),
        "progressive444_big_icc__icc_profile_big.jpg" => Ok((425, 250)),
        "tiny_1x1_color__xmp_padded.jpg" | "tiny_1x1_gray__jfif_unit_cm.jpg" => Ok((1, 1)),
        "tiny_8x8__exif_gps.jpg" => Ok((8, 8)),
        "ycc440__Panasonic_DMC-FZ30.jpg" => Ok((100, 75)),
        "ycc444_camera__nikon-e950.jpg" => Ok((800, 600)),
        _ => return None,
    })
}

#[test]
fn every_edge_case_decodes_or_fails_with_the_right_kind() {
    let Some(dir) = data_dir("edge-cases") else {
        return;
    };
    let mut d = Decoder::new().unwrap();
    let mut out = Vec::new();
    let mut seen = 0;
    let mut names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    for name in names {
        let name = name.to_string_lossy().into_owned();
        let bytes = std::fs::read(dir.join(&name)).unwrap();
        let got = d.decode_full_rgb(&bytes, &mut out);
        match expected(&name) {
            Some(Ok((w, h))) => {
                let (gw, gh) = got.unwrap_or_else(|e| panic!("{name}: expected {w}x{h}, got {e}"));
                assert_eq!((gw, gh), (w, h), "{name}");
                assert_eq!(out.len(), 3 * w as usize * h as usize, "{name}: RGB8 buffer size");
                let info = d.read_header(&bytes).unwrap();
                assert_eq!((info.width, info.height), (w, h), "{name}: header");
                seen += 1;
            }
            Some(Err(kind)) => {
                let e = got.expect_err(&name);
                assert_eq!(e.kind, kind, "{name}: {e}");
                seen += 1;
            }
            // A file added later: it must decode or fail with a typed error, never panic.
            None => eprintln!("NOTE: {name} has no expectation; got {:?}", got.map_err(|e| e.kind)),
        }
    }
    // 46 in the shared tier, 37 in the committed one (35 real files, README, the 12 MP stand-in).
    assert!(seen >= 37, "only {seen} edge cases checked");
}

#[test]
fn empty_unknown_and_garbage_are_typed() {
    let mut d = Decoder::new().unwrap();
    let mut out = Vec::new();
    let kind = |d: &mut Decoder, b: &[u8], out: &mut Vec<u8>| d.decode_full_rgb(b, out).unwrap_err().kind;
    assert_eq!(kind(&mut d, b"", &mut out), ImageErrorKind::Empty);
    assert_eq!(kind(&mut d, b"GIF89a\x01\x00\x01\x00", &mut out), ImageErrorKind::Corrupt);
    assert_eq!(kind(&mut d, b"RIFF\x04\0\0\0WAVE", &mut out), ImageErrorKind::UnknownFormat);
    assert_eq!(kind(&mut d, b"\xff\xd8", &mut out), ImageErrorKind::UnknownFormat);
    assert_eq!(kind(&mut d, b"\xff\xd8\xff\xe0garbage garbage", &mut out), ImageErrorKind::Corrupt);
    let mut png = pngdec::PNG_MAGIC.to_vec();
    png.extend_from_slice(b"\0\0\0\x0dIHDR\0\0\0\x10\0\0\0\x10\x08\x02\0\0\0garbage");
    assert_eq!(kind(&mut d, &png, &mut out), ImageErrorKind::Corrupt);
    assert_eq!(kind(&mut d, &pngdec::PNG_MAGIC, &mut out), ImageErrorKind::Corrupt);
    // Every prefix of a real JPEG either decodes or fails typed (no panic, no hang).
    if let Some(bytes) = edge("ycc420_oddsize__testorig.jpg") {
        for n in (0..bytes.len()).step_by(97) {
            let _ = d.decode_full_rgb(&bytes[..n], &mut out);
            let _ = d.decode_window(&bytes[..n], 4, PixelWindow { x0: 3, y0: 5, x1: 50, y1: 40 });
        }
        assert_eq!(kind(&mut d, &bytes[..bytes.len() / 2], &mut out), ImageErrorKind::Corrupt);
    }
}

#[test]
fn pixel_limit_rejects_before_decoding() {
    let (Some(jpg), Some(png)) = (edge("ycc420_ref__hopper.jpg"), edge("png_rgb__hopper.png")) else {
        return;
    };
    let mut d = Decoder::new().unwrap();
    assert_eq!(d.limits().max_pixels, DEFAULT_MAX_PIXELS);
    d.set_limits(DecodeLimits { max_pixels: 128 * 128 - 1, ..d.limits() }).unwrap();
    let mut out = Vec::new();
    for b in [&jpg, &png] {
        assert_eq!(d.read_header(b).unwrap_err().kind, ImageErrorKind::TooLarge);
        assert_eq!(d.decode_full_rgb(b, &mut out).unwrap_err().kind, ImageErrorKind::TooLarge);
        assert_eq!(
            d.decode_window(b, 8, PixelWindow { x0: 0, y0: 0, x1: 8, y1: 8 }).unwrap_err().kind,
            ImageErrorKind::TooLarge
        );
    }
    d.set_limits(DecodeLimits { max_pixels: 128 * 128, ..d.limits() }).unwrap();
    assert_eq!(d.decode_full_rgb(&jpg, &mut out).unwrap(), (128, 128));
}

#[test]
fn gray_becomes_rgb_with_equal_channels() {
    let mut d = Decoder::new().unwrap();
    let mut out = Vec::new();
    for name in ["gray__hopper_gray.jpg", "png_gray__testorig.png", "tiny_1x1_gray__jfif_unit_cm.jpg"] {
        let Some(b) = edge(name) else { return };
        let info = d.read_header(&b).unwrap();
        d.decode_full_rgb(&b, &mut out).unwrap();
        assert!(out.chunks_exact(3).all(|p| p[0] == p[1] && p[1] == p[2]), "{name}");
        if info.format == ImageFormat::Jpeg {
            assert_eq!((info.colorspace, info.subsampling), (ColorSpace::Gray, Subsampling::Gray));
        }
    }
}

#[test]
fn cmyk_matches_pillow() {
    let (Some(cmyk), Some(rgb)) = (edge("cmyk_ycck__pil_sample_cmyk.jpg"), edge("ycc444_adobe__pil_sample_rgb.jpg"))
    else {
        return;
    };
    let mut d = Decoder::new().unwrap();
    assert!(matches!(d.read_header(&cmyk).unwrap().colorspace, ColorSpace::Cmyk | ColorSpace::Ycck));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    d.decode_full_rgb(&cmyk, &mut a).unwrap();
    d.decode_full_rgb(&rgb, &mut b).unwrap();
    // Pillow 13's `Image.open(f).convert('RGB')` of the CMYK file: channel sums and pixels.
    let sums = (0..3).map(|c| a.iter().skip(c).step_by(3).map(|&v| u64::from(v)).sum::<u64>()).collect::<Vec<_>>();
    assert_eq!(sums, [302_320, 54_440, 73_861]);
    let px = |x: usize, y: usize| &a[3 * (y * 100 + x)..3 * (y * 100 + x) + 3];
    assert_eq!(px(0, 0), [255, 13, 25]);
    assert_eq!(px(50, 50), [1, 4, 5]);
    // The same picture stored as YCbCr: Pillow's two decodes are 31.0 dB apart.
    assert!(psnr(&a, &b) > 30.0, "CMYK vs RGB version: {:.1} dB", psnr(&a, &b));
}

#[test]
fn twelve_bit_decodes_to_eight() {
    let Some(b) = edge("precision12bit__monkey12.jpg") else {
        return;
    };
    let mut d = Decoder::new().unwrap();
    let info = d.read_header(&b).unwrap();
    assert_eq!(info.precision, 12);
    let mut full = Vec::new();
    d.decode_full_rgb(&b, &mut full).unwrap();
    let mean = full.iter().map(|&v| f64::from(v)).sum::<f64>() / full.len() as f64;
    assert!((60.0..140.0).contains(&mean), "mean {mean}: 12-bit samples not scaled to 8 bits");
    // ROI + scaling work for 12-bit too.
    let r = d.decode_window(&b, 4, PixelWindow { x0: 10, y0: 20, x1: 40, y1: 60 }).unwrap();
    assert_eq!((r.scale_eighths, r.scaled_width, r.scaled_height), (4, 75, 114));
}

#[test]
fn rgba_png_drops_alpha_like_pillow() {
    let Some(b) = edge("png_rgba__transparent.png") else {
        return;
    };
    let mut d = Decoder::new().unwrap();
    let mut out = Vec::new();
    d.decode_full_rgb(&b, &mut out).unwrap();
    let sums = (0..3).map(|c| out.iter().skip(c).step_by(3).map(|&v| u64::from(v)).sum::<u64>()).collect::<Vec<_>>();
    assert_eq!(sums, [1_001_338, 769_721, 793_263]); // Pillow: convert('RGB')
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let mse = a.iter().zip(b).map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2)).sum::<f64>() / a.len() as f64;
    if mse == 0.0 { 99.0 } else { 10.0 * (255.0f64 * 255.0 / mse).log10() }
}

/// Compare `window` of a region decode against the same window of `reference` (a whole-image decode at the same
/// scale, `ref_w` pixels wide).
fn assert_window_equal(name: &str, r: &DecodedRegion<'_>, reference: &[u8], ref_w: u32, w: PixelWindow) {
    assert!(r.x0 <= w.x0 && r.y0 <= w.y0, "{name}: region {r:?} does not start before {w:?}");
    assert!(w.x1 <= r.x0 + r.width && w.y1 <= r.y0 + r.height, "{name}: region {r:?} does not cover {w:?}");
    for y in w.y0..w.y1 {
        let got = &r.row(y - r.y0)[3 * (w.x0 - r.x0) as usize..3 * (w.x1 - r.x0) as usize];
        let off = 3 * (y as usize * ref_w as usize + w.x0 as usize);
        let want = &reference[off..off + 3 * (w.x1 - w.x0) as usize];
        assert!(
            got == want,
            "{name}: row {y} of window {w:?} differs from the full decode (scale {})",
            r.scale_eighths
        );
    }
}

const ROI_FILES: [&str; 12] = [
    "ycc420_oddsize__testorig.jpg",
    "ycc422_camera__canon-ixus.jpg",
    "ycc440__Panasonic_DMC-FZ30.jpg",
    "ycc444_camera__nikon-e950.jpg",
    "gray__hopper_gray.jpg",
    "progressive420__app13-multiple.jpg",
    "progressive422_camera__32-lens_data.jpeg",
    "cmyk_ycck__pil_sample_cmyk.jpg",
    "precision12bit__monkey12.jpg",
    "restart_markers_dri13__rgb.jpg",
    "arithmetic_coded__testimgari.jpg",
    "extreme_aspect_284x25__image01980.jpg",
];

fn random_window(rng: &mut SampleRng, w: u32, h: u32) -> PixelWindow {
    let x0 = rng.below(u64::from(w)) as u32;
    let y0 = rng.below(u64::from(h)) as u32;
    let x1 = x0 + 1 + rng.below(u64::from(w - x0)) as u32;
    let y1 = y0 + 1 + rng.below(u64::from(h - y0)) as u32;
    PixelWindow { x0, y0, x1, y1 }
}

#[test]
fn roi_at_scale_one_equals_full_decode_window_bit_exactly() {
    let mut d = Decoder::new().unwrap();
    let mut full = Vec::new();
    for name in ROI_FILES {
        let Some(b) = edge(name) else { return };
        let (w, h) = d.decode_full_rgb(&b, &mut full).unwrap();
        let mut rng = SampleRng::new(7, 0, w.into(), 0);
        for _ in 0..40 {
            let win = random_window(&mut rng, w, h);
            let r = d.decode_window(&b, 8, win).unwrap();
            assert_eq!((r.scaled_width, r.scaled_height), (w, h));
            assert_window_equal(name, &r, &full, w, win);
        }
    }
}

#[test]
fn roi_at_dct_scales_equals_scaled_full_decode_window() {
    let mut d = Decoder::new().unwrap();
    for name in ROI_FILES {
        let Some(b) = edge(name) else { return };
        for m in [1u8, 2, 3, 4, 6] {
            let whole = d.decode_window(&b, m, PixelWindow { x0: 0, y0: 0, x1: u32::MAX, y1: u32::MAX }).unwrap();
            let (sw, sh) = (whole.scaled_width, whole.scaled_height);
            assert_eq!((whole.x0, whole.y0, whole.width, whole.height), (0, 0, sw, sh), "{name} m={m}");
            let reference = whole.pixels.to_vec();
            let mut rng = SampleRng::new(8, u64::from(m), sw.into(), 0);
            for _ in 0..20 {
                let win = random_window(&mut rng, sw, sh);
                let r = d.decode_window(&b, m, win).unwrap();
                assert_eq!(r.scale_eighths, m);
                assert_window_equal(name, &r, &reference, sw, win);
            }
        }
    }
}

/// The region `decode_window` returns around the window augment asks for: covering it, left edge on the scaled iMCU
/// grid (`tj3SetCroppingRegion` requires it), clamped at the image's corners instead of failing.
#[test]
fn decode_window_covers_aligns_and_clamps() {
    let Some(b) = edge("large_12mp_422__42_IndexError.jpg") else {
        return;
    };
    let mut d = Decoder::new().unwrap();
    // A 1000×900 crop at (1001.5, 700.25) → 224×224: 2/8 keeps it ≥ 224, 1/8 does not. At 2/8 it spans
    // (250.375, 175.0625) + 250×225 scaled pixels; with the bilinear margin (3 px) augment asks for this window.
    let m = choose_scale_eighths(1000.0, 900.0, 224, 224, 1.0);
    assert_eq!(m, 2);
    let win = PixelWindow { x0: 247, y0: 172, x1: 504, y1: 404 };
    let r = d.decode_window(&b, m, win).unwrap();
    assert_eq!(r.scale_eighths, 2);
    assert!(r.x0 <= win.x0 && r.y0 <= win.y0, "{r:?} starts after {win:?}");
    assert!(win.x1 <= r.x0 + r.width && win.y1 <= r.y0 + r.height, "{r:?} ends before {win:?}");
    // Left edge aligned to the scaled iMCU (4:2:2 → 16 px, at 2/8 → 4 px); 247 is not.
    assert_eq!(r.x0 % 4, 0);
    // A window at the top-left corner starts at 0; one running past the bottom-right corner is clamped to the
    // image, not an error.
    let r = d.decode_window(&b, 8, PixelWindow { x0: 0, y0: 0, x1: 12, y1: 12 }).unwrap();
    assert_eq!((r.scale_eighths, r.x0, r.y0), (8, 0, 0));
    let (w, h) = (r.scaled_width, r.scaled_height);
    let r = d.decode_window(&b, 8, PixelWindow { x0: w - 12, y0: h - 12, x1: w + 100, y1: u32::MAX }).unwrap();
    assert_eq!((r.x0 + r.width, r.y0 + r.height), (w, h));
}

#[test]
fn scale_choice() {
    assert_eq!(choose_scale_eighths(448.0, 448.0, 224, 224, 1.0), 4);
    assert_eq!(choose_scale_eighths(447.0, 448.0, 224, 224, 1.0), 8, "4/8 would give 223.5 < 224");
    assert_eq!(choose_scale_eighths(1792.0, 1800.0, 224, 224, 1.0), 1);
    assert_eq!(choose_scale_eighths(1791.0, 1800.0, 224, 224, 1.0), 2);
    assert_eq!(choose_scale_eighths(896.0, 896.0, 224, 224, 2.0), 4);
    assert_eq!(choose_scale_eighths(100.0, 100.0, 224, 224, 1.0), 8, "upsampling decodes at full size");
    assert_eq!(choose_scale_eighths(700.0, 3000.0, 224, 224, 1.0), 4, "both dimensions must stay large enough");
}

#[test]
fn mcu_width_table_matches_libjpeg_turbo() {
    for (i, s) in [
        Subsampling::S444,
        Subsampling::S422,
        Subsampling::S420,
        Subsampling::Gray,
        Subsampling::S440,
        Subsampling::S411,
        Subsampling::S441,
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(Subsampling::from_tj(i as i32), s);
        // turbojpeg.h: `static const int tjMCUWidth[TJ_NUMSAMP] = { 8, 16, 16, 8, 8, 32, 8 };` (header-only,
        // so it cannot be linked against and is restated here).
        assert_eq!(s.mcu_width(), Some([8, 16, 16, 8, 8, 32, 8][i]), "{s:?}");
    }
}

#[test]
fn no_state_leaks_between_images() {
    let Some(dir) = data_dir("edge-cases") else {
        return;
    };
    let reference = |name: &str| {
        let mut d = Decoder::new().unwrap();
        let mut out = Vec::new();
        d.decode_full_rgb(&std::fs::read(dir.join(name)).unwrap(), &mut out).map(|_| out)
    };
    let mut d = Decoder::new().unwrap();
    let mut out = Vec::new();
    let order = [
        "precision12bit__monkey12.jpg",
        "truncated_progressive__truncated_jpeg.jpg",
        "cmyk_ycck__pil_sample_cmyk.jpg",
        "png_rgba__transparent.png",
        "ycc420_oddsize__testorig.jpg",
        "gray__hopper_gray.jpg",
        "README.txt",
        "large_12mp_422__42_IndexError.jpg",
        "tiny_1x1_color__xmp_padded.jpg",
        "ycc440__Panasonic_DMC-FZ30.jpg",
    ];
    for (i, name) in order.iter().enumerate() {
        // Leave a scaled, cropped decode behind before each full decode.
        let _ = d.decode_window(
            &std::fs::read(dir.join(order[(i + 3) % order.len()])).unwrap(),
            2,
            PixelWindow { x0: 17, y0: 9, x1: 60, y1: 33 },
        );
        let got = d.decode_full_rgb(&std::fs::read(dir.join(name)).unwrap(), &mut out).map(|_| out.clone());
        assert_eq!(got.map_err(|e| e.kind), reference(name).map_err(|e| e.kind), "{name}");
    }
}

fn imagenet_files() -> Option<Vec<std::path::PathBuf>> {
    let root = data_dir("imagenet-sample")?;
    let mut files = Vec::new();
    let mut stack = vec![root];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p)
            } else if p.extension().is_some_and(|e| matches!(e.to_str(), Some("JPEG" | "jpeg" | "jpg" | "png"))) {
                files.push(p)
            }
        }
    }
    files.sort();
    Some(files)
}

/// The marker walk and the limits keep every real file decodable: the 1,000 ImageNet-sample images decode, and
/// the scan counts of real files justify `DEFAULT_MAX_SCANS` (progressive files have ~10 scans).
#[test]
fn scan_counts_of_real_files() {
    let (Some(files), Some(edge)) = (imagenet_files(), data_dir("edge-cases")) else {
        return;
    };
    let mut d = Decoder::new().unwrap();
    let mut out = Vec::new();
    let mut max_scans = 0;
    for f in &files {
        let b = std::fs::read(f).unwrap();
        d.decode_full_rgb(&b, &mut out).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        if sniff_format(&b) == Ok(ImageFormat::Jpeg) {
            max_scans = max_scans.max(markers::walk_jpeg(&b).unwrap().scans);
        }
    }
    assert!(files.len() >= 200, "{} files", files.len()); // 1,000 shared, 200 generated
    for e in std::fs::read_dir(edge).unwrap() {
        let b = std::fs::read(e.unwrap().path()).unwrap();
        if let Ok(st) = markers::walk_jpeg(&b) {
            max_scans = max_scans.max(st.scans);
        }
    }
    eprintln!("most scans in a real file: {max_scans}");
    assert!((10..=DEFAULT_MAX_SCANS / 5).contains(&max_scans), "{max_scans}");
}

/// Measurement (run with `cargo test --release --lib marker_walk_cost -- --ignored --nocapture`): the marker
/// walk's cost per image against a full decode, on the ImageNet sample. Prints; asserts nothing about time.
#[test]
#[ignore]
fn marker_walk_cost() {
    let Some(files) = imagenet_files() else {
        return;
    };
    let data: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let jpegs: Vec<&Vec<u8>> = data.iter().filter(|b| sniff_format(b) == Ok(ImageFormat::Jpeg)).collect();
    let bytes: usize = jpegs.iter().map(|b| b.len()).sum();
    let reps = 20;
    let t = std::time::Instant::now();
    let mut scans = 0u64;
    for _ in 0..reps {
        for b in &jpegs {
            scans += u64::from(std::hint::black_box(markers::walk_jpeg(b)).unwrap().scans);
        }
    }
    let walk_ns = t.elapsed().as_nanos() as f64 / (reps * jpegs.len()) as f64;
    // The header-path check for tables-only streams, and how many real files borrow tables (each costs one
    // handle renewal per decode).
    let t = std::time::Instant::now();
    for _ in 0..reps {
        for b in &jpegs {
            assert!(!std::hint::black_box(markers::ends_before_scan(b)));
        }
    }
    let ebs_ns = t.elapsed().as_nanos() as f64 / (reps * jpegs.len()) as f64;
    let borrowing = jpegs.iter().filter(|b| markers::walk_jpeg(b).unwrap().borrows_tables).count();
    eprintln!("ends_before_scan: {ebs_ns:.0} ns/image; {borrowing} of {} files borrow tables", jpegs.len());
    let mut d = Decoder::new().unwrap();
    let mut out = Vec::new();
    let t = std::time::Instant::now();
    for b in &jpegs {
        d.decode_full_rgb(b, &mut out).unwrap();
    }
    let dec_ns = t.elapsed().as_nanos() as f64 / jpegs.len() as f64;
    eprintln!(
        "marker walk: {:.1} us/image ({:.2} GB/s, {} images, avg {} KB, {scans} scans), full decode {:.0} us/image \
         -> walk = {:.2}% of a full decode",
        walk_ns / 1e3,
        bytes as f64 / (walk_ns * jpegs.len() as f64),
        jpegs.len(),
        bytes / jpegs.len() / 1024,
        dec_ns / 1e3,
        100.0 * walk_ns / dec_ns
    );
}

/// `exif_transpose`: the real orientation files (`exif_orient<k>_…`: k in the name, 0 = an invalid tag) report
/// their oriented size and orientation, decode whole in oriented order, and every window of an oriented decode —
/// ROI and DCT scaling included — holds exactly the pixels of the whole oriented image at that scale.
#[test]
fn exif_orientation_is_applied_on_request_and_windows_map_through_it() {
    let Some(dir) = data_dir("edge-cases") else {
        return;
    };
    let mut plain = Decoder::new().unwrap();
    let mut ex = Decoder::with_limits(DecodeLimits { exif_transpose: true, ..Default::default() }).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("exif_orient"))
        .collect();
    names.sort();
    assert!(names.len() >= 9, "{names:?}");
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |n: u32| {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((rng >> 33) % u64::from(n.max(1))) as u32
    };
    let (mut stored, mut oriented) = (Vec::new(), Vec::new());
    for name in &names {
        let k = u64::from(name["exif_orient".len()..].chars().next().unwrap().to_digit(10).unwrap());
        let want = Orientation::from_exif(k);
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let (w, h) = plain.decode_full_rgb(&bytes, &mut stored).unwrap();
        assert_eq!(plain.read_header(&bytes).unwrap().orientation, Orientation::Normal, "{name}: off by default");
        let info = ex.read_header(&bytes).unwrap();
        assert_eq!(info.orientation, want, "{name}");
        assert_eq!((info.width, info.height), want.oriented_size(w, h), "{name}");
        let (ow, oh) = ex.decode_full_rgb(&bytes, &mut oriented).unwrap();
        assert_eq!((ow, oh), (info.width, info.height), "{name}");
        for y in 0..oh {
            for x in 0..ow {
                let s = want.stored_rect(exif::Rect { x0: x, y0: y, x1: x + 1, y1: y + 1 }, w, h);
                let (a, b) = (3 * (y * ow + x) as usize, 3 * (s.y0 * w + s.x0) as usize);
                assert_eq!(oriented[a..a + 3], stored[b..b + 3], "{name} at ({x}, {y})");
            }
        }
        for m in [8u8, 4, 2, 1] {
            let (sw, sh) = info.scaled_size(m);
            let whole = ex.decode_window(&bytes, m, PixelWindow { x0: 0, y0: 0, x1: sw, y1: sh }).unwrap();
            assert_eq!((whole.x0, whole.y0, whole.width, whole.height), (0, 0, sw, sh), "{name} m={m}");
            assert_eq!((whole.scaled_width, whole.scaled_height), (sw, sh), "{name} m={m}");
            let reference = whole.pixels.to_vec();
            if m == 8 {
                assert_eq!(reference, oriented, "{name}: the full-scale window is the whole oriented image");
            }
            for _ in 0..6 {
                let (x0, y0) = (next(sw), next(sh));
                let win = PixelWindow { x0, y0, x1: x0 + 1 + next(sw - x0), y1: y0 + 1 + next(sh - y0) };
                let r = ex.decode_window(&bytes, m, win).unwrap();
                assert!(r.x0 <= win.x0 && win.x1 <= r.x0 + r.width, "{name} m={m}: {win:?} in {r:?}");
                assert!(r.y0 <= win.y0 && win.y1 <= r.y0 + r.height, "{name} m={m}: {win:?} in {r:?}");
                for y in win.y0..win.y1 {
                    let row = r.row(y - r.y0);
                    let at = 3 * (win.x0 - r.x0) as usize;
                    let len = 3 * (win.x1 - win.x0) as usize;
                    let full = 3 * (y * sw + win.x0) as usize;
                    assert_eq!(row[at..at + len], reference[full..full + len], "{name} m={m} {win:?} row {y}");
                }
            }
        }
    }
}
