//! Tests of `other.rs` on files written at test time by the crates' own encoders (round trips) and tiny hand-made
//! headers (hostile cases). Pillow equality is checked in `tests/test_formats.py`.

use std::io::Cursor;

use super::*;

const W: u32 = 37;
const H: u32 = 23;

/// A deterministic RGB pattern.
fn rgb(w: u32, h: u32) -> Vec<u8> {
    (0..w * h * 3).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

fn webp_lossless(px: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    image_webp::WebPEncoder::new(&mut v).encode(px, W, H, image_webp::ColorType::Rgb8).unwrap();
    v
}

fn tiff(px: &[u8]) -> Vec<u8> {
    let mut c = Cursor::new(Vec::new());
    tiff::encoder::TiffEncoder::new(&mut c).unwrap().write_image::<tiff::encoder::colortype::RGB8>(W, H, px).unwrap();
    c.into_inner()
}

fn with_image_encoder(px: &[u8], bmp: bool) -> Vec<u8> {
    let mut v = Vec::new();
    let t = image::ExtendedColorType::Rgb8;
    if bmp {
        image::codecs::bmp::BmpEncoder::new(&mut v).encode(px, W, H, t).unwrap();
    } else {
        use image::codecs::pnm::{PnmEncoder, PnmSubtype, SampleEncoding};
        PnmEncoder::new(&mut v).with_subtype(PnmSubtype::Pixmap(SampleEncoding::Binary)).encode(px, W, H, t).unwrap();
    }
    v
}

/// A GIF with a fixed palette (index i → (i, 255 - i, i / 2)) and the given indices, plus its expected RGB.
fn gif(indices: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let palette: Vec<u8> = (0..=255u8).flat_map(|i| [i, 255 - i, i / 2]).collect();
    let mut v = Vec::new();
    {
        let mut e = gif::Encoder::new(&mut v, W as u16, H as u16, &palette).unwrap();
        e.write_frame(&gif::Frame::from_indexed_pixels(W as u16, H as u16, indices.to_vec(), None)).unwrap();
    }
    let want = indices.iter().flat_map(|&i| [i, 255 - i, i / 2]).collect();
    (v, want)
}

/// (name, file, expected RGB) for every format decoded by `other.rs`.
fn goods() -> Vec<(&'static str, Vec<u8>, Vec<u8>)> {
    let px = rgb(W, H);
    let (g, gwant) = gif(&px[..(W * H) as usize]);
    vec![
        ("webp", webp_lossless(&px), px.clone()),
        ("tiff", tiff(&px), px.clone()),
        ("bmp", with_image_encoder(&px, true), px.clone()),
        ("ppm", with_image_encoder(&px, false), px.clone()),
        ("gif", g, gwant),
    ]
}

#[test]
fn every_format_round_trips_through_both_entry_points() {
    let mut d = Decoder::new().unwrap();
    for (name, file, want) in goods() {
        let info = d.read_header(&file).unwrap();
        assert_eq!((info.width, info.height), (W, H), "{name}");
        assert!(!info.can_scale() && !info.can_crop(), "{name}");
        let mut out = Vec::new();
        assert_eq!(d.decode_full_rgb(&file, &mut out).unwrap(), (W, H), "{name}");
        assert_eq!(out, want, "{name}");
        let r = d.decode_window(&file, 2, PixelWindow { x0: 3, y0: 4, x1: 9, y1: 9 }).unwrap();
        assert_eq!((r.x0, r.y0, r.width, r.height, r.scale_eighths), (0, 0, W, H, 8), "{name}");
        assert_eq!(r.pixels, &want[..], "{name}");
    }
}

/// Headers claiming absurd sizes: `TooLarge` from the header, before any pixel memory (scratch stays empty).
fn bombs() -> Vec<(&'static str, Vec<u8>)> {
    let mut bmp = b"BM".to_vec();
    bmp.extend_from_slice(&[0; 12]);
    bmp.extend_from_slice(&40u32.to_le_bytes());
    bmp.extend_from_slice(&60_000i32.to_le_bytes());
    bmp.extend_from_slice(&60_000i32.to_le_bytes());
    bmp.extend_from_slice(&1u16.to_le_bytes());
    bmp.extend_from_slice(&24u16.to_le_bytes());
    bmp.extend_from_slice(&[0; 24]);
    let mut gif = b"GIF89a".to_vec();
    // Logical screen 65535 × 65535, no palette; one image descriptor of that size, an empty LZW stream.
    gif.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0, 0]);
    gif.extend_from_slice(&[0x2C, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x08, 0x00, 0x3B]);
    // Little-endian TIFF, one IFD: 100000 × 100000 RGB, one strip of 0 bytes.
    let mut tiff = b"II*\0\x08\0\0\0".to_vec();
    let entries = [(256u16, 4u16, 100_000u32), (257, 4, 100_000), (262, 3, 2), (273, 4, 8), (279, 4, 0)];
    tiff.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for (tag, kind, value) in entries {
        tiff.extend_from_slice(&tag.to_le_bytes());
        tiff.extend_from_slice(&kind.to_le_bytes());
        tiff.extend_from_slice(&1u32.to_le_bytes());
        tiff.extend_from_slice(&value.to_le_bytes());
    }
    tiff.extend_from_slice(&0u32.to_le_bytes());
    // A real lossless WebP whose VP8L header is patched to 16383 × 16383 (14-bit sizes − 1 after the 0x2F signature;
    // not 16384: image-webp 0.2.4 computes `(1 + header) & 0x3FFF`, so a 16384-wide lossless WebP reads as 0 wide
    // and is refused as Corrupt).
    let mut webp = webp_lossless(&rgb(W, H));
    assert_eq!(&webp[12..16], b"VP8L");
    let bits = u32::from_le_bytes([webp[21], webp[22], webp[23], webp[24]]);
    webp[21..25].copy_from_slice(&((bits & !0x0FFF_FFFF) | 0x3FFE | (0x3FFE << 14)).to_le_bytes());
    vec![("bmp", bmp), ("gif", gif), ("tiff", tiff), ("webp", webp), ("ppm", b"P6\n100000 100000\n255\n".to_vec())]
}

#[test]
fn absurd_sizes_are_too_large_without_allocating() {
    let mut d = Decoder::new().unwrap();
    for (name, bomb) in bombs() {
        let e = d.read_header(&bomb).unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::TooLarge, "{name}: {e}");
        let e = d.decode_full_rgb(&bomb, &mut Vec::new()).unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::TooLarge, "{name}: {e}");
        assert_eq!(d.scratch_bytes(), 0, "{name}: scratch allocated for a bomb");
    }
    // Real files of every format over a small pixel limit.
    let mut d = Decoder::with_limits(DecodeLimits { max_pixels: 100, ..DecodeLimits::default() }).unwrap();
    for (name, file, _) in goods() {
        let e = d.decode_full_rgb(&file, &mut Vec::new()).unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::TooLarge, "{name}: {e}");
        assert_eq!(d.scratch_bytes(), 0, "{name}: scratch allocated above the pixel limit");
    }
}

#[test]
fn memory_budget_is_too_large() {
    let limits = DecodeLimits { max_memory_bytes: 1000, ..DecodeLimits::default() };
    let mut d = Decoder::with_limits(limits).unwrap();
    for (name, file, _) in goods() {
        let e = d.decode_full_rgb(&file, &mut Vec::new()).map(|_| name).unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::TooLarge, "{name}: {e}");
    }
}

#[test]
fn truncated_and_garbage_are_typed_and_leave_the_decoder_usable() {
    let mut d = Decoder::new().unwrap();
    let good = goods();
    for (name, file, want) in &good {
        let mut hostile = vec![file[..file.len() / 2].to_vec(), file[..file.len().min(20)].to_vec()];
        let mut junk = file[..file.len().min(30)].to_vec();
        junk.extend((0..200u32).map(|i| (i * 37) as u8));
        hostile.push(junk);
        for bad in hostile {
            let e = d.decode_full_rgb(&bad, &mut Vec::new()).unwrap_err();
            assert!(
                matches!(e.kind, ImageErrorKind::Corrupt | ImageErrorKind::Unsupported | ImageErrorKind::TooLarge),
                "{name}: {e}"
            );
            let mut out = Vec::new();
            d.decode_full_rgb(file, &mut out).unwrap();
            assert_eq!(&out, want, "{name}");
        }
        // A file cut in half is Corrupt (data missing), whatever the format.
        let e = d.decode_full_rgb(&file[..file.len() / 2], &mut Vec::new()).unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::Corrupt, "{name}: {e}");
    }
}

#[test]
fn netpbm_maxvals_pillow_rescales_are_unsupported() {
    let mut d = Decoder::new().unwrap();
    let e = d.decode_full_rgb(b"P5\n2 1\n15\n\x03\x0f", &mut Vec::new()).unwrap_err();
    assert_eq!(e.kind, ImageErrorKind::Unsupported, "{e}");
    let mut out = Vec::new();
    d.decode_full_rgb(b"P5\n2 1\n255\n\x03\xff", &mut out).unwrap();
    assert_eq!(out, [3, 3, 3, 255, 255, 255]);
}
