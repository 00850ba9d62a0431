//! WebP, GIF, TIFF, BMP and Netpbm → RGB8 (whole image: none of them has ROI decoding or DCT scaling), with
//! image-rs's crates: `image-webp` (lossy and lossless), `gif`, `tiff` (uncompressed, PackBits, LZW, deflate),
//! and `image` (only its `bmp` and `pnm` decoders). Conversions are Pillow's `Image.open(f).convert('RGB')`
//! (checked against Pillow in `tests/test_formats.py`):
//! - alpha is dropped, not composited; gray is replicated; palettes are looked up;
//! - GIF: the first frame, on a canvas of the logical screen size filled with the frame's transparent index
//!   (or index 0), as Pillow's first frame; palette entries past the palette's end are black; no palette → the
//!   index is the gray level;
//! - TIFF: 16-bit gray (Pillow mode `I;16`) is clipped to 255, 16-bit RGB(A) keeps the high byte (as PNG; RGB
//!   checked on a hand-made file, Pillow writes none);
//!   bilevel (1-bit BlackIsZero) is 0/255; CMYK is converted with Pillow's `cmyk2rgb`. Palette TIFFs (the `tiff`
//!   crate refuses `RGBPalette`), JPEG-in-TIFF, fax, WhiteIsZero, YCbCr, Lab, planar and float samples →
//!   `Unsupported`;
//! - Netpbm: 8-bit (maxval 255) and bitmaps; 16-bit with maxval 65535 (PGM clipped, PPM high byte, as PNG);
//!   other maxvals (which Pillow rescales with its own rounding) → `Unsupported`;
//! - WebP, lossy included: image-webp matched Pillow's libwebp bit for bit on every file measured
//!   (`tests/test_formats.py`).
//!
//! Budgets: the size comes from each crate's header parse and passes the pixel limit before anything is decoded
//! (`Decoder::read_header`); the decoded buffer must fit `max_memory_bytes` (`TooLarge`) and each crate's own
//! memory limit is set to the same budget (`WebPDecoder::set_memory_limit`, `gif::MemoryLimit`, `tiff::Limits`,
//! `image::Limits`). Every crate error is a typed `ImageError` (limits → `TooLarge`, unsupported variants →
//! `Unsupported`, the rest → `Corrupt`). These crates are written not to panic on hostile input, but a panic
//! inside one must not take a worker down: each decode runs under `catch_unwind` and a panic becomes `Corrupt`
//! (the crates hold no state across images; a fresh decoder object is built per image).

use std::io::Cursor;
use std::num::NonZeroU64;
use std::panic::{AssertUnwindSafe, catch_unwind};

use image::ImageDecoder;

use super::{DecodeLimits, ImageFormat, cmyk_to_rgb};

use crate::error::{ImageError, ImageErrorKind};

/// The format of `bytes` if it is one decoded here (magic bytes only).
pub(crate) fn sniff(bytes: &[u8]) -> Option<ImageFormat> {
    let starts = |magic: &[u8]| bytes.starts_with(magic);
    if bytes.len() >= 12 && starts(b"RIFF") && &bytes[8..12] == b"WEBP" {
        return Some(ImageFormat::WebP);
    }
    if starts(b"GIF87a") || starts(b"GIF89a") {
        return Some(ImageFormat::Gif);
    }
    // Little/big-endian TIFF and BigTIFF.
    if starts(b"II*\0") || starts(b"MM\0*") || starts(b"II+\0") || starts(b"MM\0+") {
        return Some(ImageFormat::Tiff);
    }
    // "BM" alone is too weak: also require a known DIB header size (core, V1..V5, OS/2 v2).
    if bytes.len() >= 18 && starts(b"BM") {
        let dib = u32::from_le_bytes([bytes[14], bytes[15], bytes[16], bytes[17]]);
        if matches!(dib, 12 | 16 | 40 | 52 | 56 | 64 | 108 | 124) {
            return Some(ImageFormat::Bmp);
        }
    }
    // Netpbm: "P1".."P6" then whitespace (P1/P4 bitmap, P2/P5 graymap, P3/P6 pixmap).
    if bytes.len() >= 3 && bytes[0] == b'P' && matches!(bytes[1], b'1'..=b'6') && bytes[2].is_ascii_whitespace() {
        return Some(ImageFormat::Pnm);
    }
    None
}

fn name(f: ImageFormat) -> &'static str {
    match f {
        ImageFormat::WebP => "WebP",
        ImageFormat::Gif => "GIF",
        ImageFormat::Tiff => "TIFF",
        ImageFormat::Bmp => "BMP",
        ImageFormat::Pnm => "Netpbm",
        ImageFormat::Jpeg => "JPEG",
        ImageFormat::Png => "PNG",
    }
}

fn err(kind: ImageErrorKind, f: ImageFormat, m: impl std::fmt::Display) -> ImageError {
    ImageError::new(kind, format!("{}: {m}", name(f)))
}

fn corrupt(f: ImageFormat, m: impl std::fmt::Display) -> ImageError {
    err(ImageErrorKind::Corrupt, f, m)
}

fn unsupported(f: ImageFormat, m: impl std::fmt::Display) -> ImageError {
    err(ImageErrorKind::Unsupported, f, m)
}

fn over_budget(f: ImageFormat, limits: &DecodeLimits) -> ImageError {
    err(ImageErrorKind::TooLarge, f, format!("decoder memory above the budget of {} bytes", limits.max_memory_bytes))
}

fn budget_usize(limits: &DecodeLimits) -> usize {
    usize::try_from(limits.max_memory_bytes).unwrap_or(usize::MAX)
}

/// `TooLarge` if a decoded buffer of `bytes` does not fit the memory budget (checked before allocating it).
fn check_buffer(f: ImageFormat, bytes: u64, limits: &DecodeLimits) -> Result<(), ImageError> {
    if bytes > limits.max_memory_bytes {
        return Err(err(
            ImageErrorKind::TooLarge,
            f,
            format!("decodes to {bytes} bytes, above the memory budget of {} bytes", limits.max_memory_bytes),
        ));
    }
    Ok(())
}

/// Run a crate's decode; a panic inside it becomes `Corrupt` (see module docs).
fn guarded<T>(f: ImageFormat, run: impl FnOnce() -> Result<T, ImageError>) -> Result<T, ImageError> {
    catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|_| Err(corrupt(f, "the decoder panicked on this file")))
}

/// Width and height from the header (no pixel decoding). Zero sizes are `Corrupt`.
pub(crate) fn size(f: ImageFormat, bytes: &[u8]) -> Result<(u32, u32), ImageError> {
    let (w, h) = guarded(f, || match f {
        ImageFormat::WebP => Ok(webp_decoder(bytes)?.dimensions()),
        ImageFormat::Gif => {
            let d = gif::DecodeOptions::new().read_info(Cursor::new(bytes)).map_err(gif_failure)?;
            Ok((u32::from(d.width()), u32::from(d.height())))
        }
        ImageFormat::Tiff => {
            tiff::decoder::Decoder::new(Cursor::new(bytes)).and_then(|mut d| d.dimensions()).map_err(tiff_failure)
        }
        ImageFormat::Bmp => Ok(bmp_decoder(bytes)?.dimensions()),
        ImageFormat::Pnm => Ok(pnm_decoder(bytes)?.dimensions()),
        ImageFormat::Jpeg | ImageFormat::Png => Err(unsupported(f, "not decoded here")),
    })?;
    if w == 0 || h == 0 {
        return Err(corrupt(f, format!("invalid size {w}x{h}")));
    }
    Ok((w, h))
}

/// Decode the whole image into `out` as packed RGB8 rows (`3 * width` bytes each); `raw` is reusable scratch for
/// the crate's native output. The caller has checked the pixel limit on [`size`].
pub(crate) fn decode_rgb(
    f: ImageFormat,
    bytes: &[u8],
    raw: &mut Vec<u8>,
    out: &mut Vec<u8>,
    limits: &DecodeLimits,
) -> Result<(u32, u32), ImageError> {
    guarded(f, || match f {
        ImageFormat::WebP => webp_rgb(bytes, raw, out, limits),
        ImageFormat::Gif => gif_rgb(bytes, out, limits),
        ImageFormat::Tiff => tiff_rgb(bytes, out, limits),
        ImageFormat::Bmp => {
            let mut d = bmp_decoder(bytes)?;
            d.set_limits(image_limits(limits)).map_err(|e| image_failure(f, e, limits))?;
            image_rgb(f, d, bytes, raw, out, limits)
        }
        ImageFormat::Pnm => {
            let mut d = pnm_decoder(bytes)?;
            d.set_limits(image_limits(limits)).map_err(|e| image_failure(f, e, limits))?;
            image_rgb(f, d, bytes, raw, out, limits)
        }
        ImageFormat::Jpeg | ImageFormat::Png => Err(unsupported(f, "not decoded here")),
    })
}

/// Grow `v` to `n` bytes (kept across images like the decoder's other scratch) and return that prefix.
fn scratch(v: &mut Vec<u8>, n: usize) -> &mut [u8] {
    if v.len() < n {
        v.resize(n, 0);
    }
    &mut v[..n]
}

/// Packed samples with `channels` per pixel (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA) → RGB8, alpha dropped.
fn expand_to_rgb(src: &[u8], channels: usize, dst: &mut [u8]) {
    match channels {
        1 => dst.chunks_exact_mut(3).zip(src).for_each(|(d, &g)| d.fill(g)),
        2 => dst.chunks_exact_mut(3).zip(src.chunks_exact(2)).for_each(|(d, s)| d.fill(s[0])),
        3 => dst.copy_from_slice(&src[..dst.len()]),
        _ => dst.chunks_exact_mut(3).zip(src.chunks_exact(channels)).for_each(|(d, s)| d.copy_from_slice(&s[..3])),
    }
}

// ---- WebP ----

fn webp_decoder(bytes: &[u8]) -> Result<image_webp::WebPDecoder<Cursor<&[u8]>>, ImageError> {
    image_webp::WebPDecoder::new(Cursor::new(bytes)).map_err(webp_failure)
}

fn webp_failure(e: image_webp::DecodingError) -> ImageError {
    match e {
        image_webp::DecodingError::MemoryLimitExceeded => {
            err(ImageErrorKind::TooLarge, ImageFormat::WebP, "decoder memory above the budget")
        }
        image_webp::DecodingError::UnsupportedFeature(m) => unsupported(ImageFormat::WebP, m),
        e => corrupt(ImageFormat::WebP, e),
    }
}

fn webp_rgb(
    bytes: &[u8],
    raw: &mut Vec<u8>,
    out: &mut Vec<u8>,
    limits: &DecodeLimits,
) -> Result<(u32, u32), ImageError> {
    let f = ImageFormat::WebP;
    let mut d = webp_decoder(bytes)?;
    d.set_memory_limit(budget_usize(limits));
    let (w, h) = d.dimensions();
    let n = d.output_buffer_size().ok_or_else(|| over_budget(f, limits))?;
    check_buffer(f, n as u64, limits)?;
    let channels = if d.has_alpha() { 4 } else { 3 };
    // Animated files: read_image gives the first frame (composited on the canvas, as Pillow's first frame).
    d.read_image(scratch(raw, n)).map_err(webp_failure)?;
    expand_to_rgb(&raw[..n], channels, scratch(out, 3 * w as usize * h as usize));
    Ok((w, h))
}

// ---- GIF ----

fn gif_failure(e: gif::DecodingError) -> ImageError {
    let m = e.to_string();
    if m.contains("memory limit") || m.contains("Memory limit") {
        return err(ImageErrorKind::TooLarge, ImageFormat::Gif, m);
    }
    corrupt(ImageFormat::Gif, m)
}

fn gif_rgb(bytes: &[u8], out: &mut Vec<u8>, limits: &DecodeLimits) -> Result<(u32, u32), ImageError> {
    let f = ImageFormat::Gif;
    let mut opts = gif::DecodeOptions::new();
    opts.set_color_output(gif::ColorOutput::Indexed);
    let budget = NonZeroU64::new(limits.max_memory_bytes).unwrap_or(NonZeroU64::MIN);
    opts.set_memory_limit(gif::MemoryLimit::Bytes(budget));
    let mut d = opts.read_info(Cursor::new(bytes)).map_err(gif_failure)?;
    let (w, h) = (usize::from(d.width()), usize::from(d.height()));
    check_buffer(f, 3 * w as u64 * h as u64, limits)?;
    let global = d.global_palette().map(<[u8]>::to_vec);
    let frame = d.read_next_frame().map_err(gif_failure)?.ok_or_else(|| corrupt(f, "no image in the file"))?;
    let palette = frame.palette.as_deref().or(global.as_deref());
    let colour = |i: u8| -> [u8; 3] {
        match palette {
            Some(p) => p.get(3 * usize::from(i)..3 * usize::from(i) + 3).map_or([0; 3], |c| [c[0], c[1], c[2]]),
            None => [i; 3],
        }
    };
    let dst = scratch(out, 3 * w * h);
    let fill = colour(frame.transparent.unwrap_or(0));
    dst.chunks_exact_mut(3).for_each(|d| d.copy_from_slice(&fill));
    let (fx, fy, fw, fh) =
        (usize::from(frame.left), usize::from(frame.top), usize::from(frame.width), usize::from(frame.height));
    // The part of the frame inside the logical screen (Pillow pastes it there; the rest is cut off).
    for y in 0..fh.min(h.saturating_sub(fy)) {
        let src = &frame.buffer[y * fw..(y + 1) * fw];
        let row = &mut dst[3 * (fy + y) * w..3 * (fy + y + 1) * w];
        for (x, &i) in src.iter().enumerate().take(w.saturating_sub(fx)) {
            row[3 * (fx + x)..3 * (fx + x) + 3].copy_from_slice(&colour(i));
        }
    }
    Ok((w as u32, h as u32))
}

// ---- TIFF ----

fn tiff_failure(e: tiff::TiffError) -> ImageError {
    let f = ImageFormat::Tiff;
    match e {
        tiff::TiffError::LimitsExceeded => err(ImageErrorKind::TooLarge, f, "decoder memory above the budget"),
        tiff::TiffError::UnsupportedError(e) => unsupported(f, e),
        e => corrupt(f, e),
    }
}

fn tiff_rgb(bytes: &[u8], out: &mut Vec<u8>, limits: &DecodeLimits) -> Result<(u32, u32), ImageError> {
    use tiff::ColorType as C;
    use tiff::decoder::DecodingResult as R;
    use tiff::tags::Tag;
    let f = ImageFormat::Tiff;
    let mut tl = tiff::decoder::Limits::default();
    tl.decoding_buffer_size = budget_usize(limits);
    tl.intermediate_buffer_size = budget_usize(limits);
    let mut d = tiff::decoder::Decoder::new(Cursor::new(bytes)).map_err(tiff_failure)?.with_limits(tl);
    let (w, h) = d.dimensions().map_err(tiff_failure)?;
    let color = d.colortype().map_err(tiff_failure)?;
    let tag = |d: &mut tiff::decoder::Decoder<_>, t| d.find_tag_unsigned::<u32>(t).map_err(tiff_failure);
    let photometric = tag(&mut d, Tag::PhotometricInterpretation)?;
    if tag(&mut d, Tag::PlanarConfiguration)? == Some(2) {
        return Err(unsupported(f, "planar (separate planes) samples"));
    }
    if photometric == Some(0) {
        return Err(unsupported(f, "WhiteIsZero photometric interpretation"));
    }
    match tag(&mut d, Tag::Compression)? {
        None | Some(1 | 5 | 8 | 32773 | 32946) => {}
        Some(c) => {
            return Err(unsupported(f, format!("compression {c} (trdata decodes none, LZW, deflate, PackBits)")));
        }
    }
    let (wu, hu) = (w as usize, h as usize);
    let (channels, bits) = match color {
        C::Gray(b) => (1, b),
        C::GrayA(b) => (2, b),
        C::RGB(b) => (3, b),
        C::RGBA(b) => (4, b),
        C::CMYK(b) => (4, b),
        C::Palette(b) => (1, b),
        // Gray plus an extra sample that is not marked as alpha (Pillow writes LA so): the first sample is gray.
        C::Multiband { bit_depth: b, num_samples: 2 } if photometric == Some(1) => (2, b),
        other => return Err(unsupported(f, format!("colour type {other:?}"))),
    };
    if !(bits == 8 || bits == 16 || (bits == 1 && matches!(color, C::Gray(_)))) {
        return Err(unsupported(f, format!("{bits}-bit samples of {color:?}")));
    }
    let samples = (wu * hu) as u64 * channels as u64 * u64::from(bits).div_ceil(8);
    check_buffer(f, samples, limits)?;
    let mut result = R::U8(Vec::new());
    d.read_image_to_buffer(&mut result).map_err(tiff_failure)?;
    let dst = scratch(out, 3 * wu * hu);
    match (&result, color) {
        (R::U8(px), C::Gray(1)) => {
            // Rows are padded to whole bytes; a set bit is white (BlackIsZero).
            let row_bytes = wu.div_ceil(8);
            for (y, row) in dst.chunks_exact_mut(3 * wu).enumerate() {
                let src = px.get(y * row_bytes..(y + 1) * row_bytes).ok_or_else(|| corrupt(f, "short bilevel data"))?;
                for (x, d) in row.chunks_exact_mut(3).enumerate() {
                    d.fill(if src[x / 8] & (0x80 >> (x % 8)) != 0 { 255 } else { 0 });
                }
            }
        }
        (R::U8(px), C::Palette(_)) => {
            // ColorMap: all reds, then all greens, then all blues, 16-bit; Pillow keeps `v // 256`.
            let map = d.get_tag_u16_vec(Tag::ColorMap).map_err(tiff_failure)?;
            let n = map.len() / 3;
            for (dd, &i) in dst.chunks_exact_mut(3).zip(px.iter()) {
                let i = usize::from(i);
                for (c, o) in dd.iter_mut().enumerate() {
                    *o = if i < n { (map[c * n + i] >> 8) as u8 } else { 0 };
                }
            }
        }
        (R::U8(px), C::CMYK(_)) => {
            // Pillow's CMYK (not inverted) → RGB; `cmyk_to_rgb` takes Adobe-inverted samples.
            let inverted: Vec<u8> = px.iter().map(|&v| 255 - v).collect();
            cmyk_to_rgb(&inverted, dst);
        }
        (R::U8(px), _) => expand_to_rgb(px, channels, dst),
        (R::U16(px), _) => {
            // 16-bit gray is Pillow's I;16, clipped; 16-bit RGB(A) keeps the high byte.
            let gray16 = channels <= 2;
            for (dd, s) in dst.chunks_exact_mut(3).zip(px.chunks_exact(channels)) {
                if gray16 {
                    dd.fill(s[0].min(255) as u8);
                } else {
                    for (o, &v) in dd.iter_mut().zip(s) {
                        *o = (v >> 8) as u8;
                    }
                }
            }
        }
        _ => return Err(unsupported(f, format!("sample format of {color:?}"))),
    }
    Ok((w, h))
}

// ---- BMP and Netpbm (through `image`) ----

fn image_failure(f: ImageFormat, e: image::ImageError, limits: &DecodeLimits) -> ImageError {
    match e {
        image::ImageError::Limits(_) => over_budget(f, limits),
        image::ImageError::Unsupported(e) => unsupported(f, e),
        e => corrupt(f, e),
    }
}

fn image_limits(limits: &DecodeLimits) -> image::Limits {
    let mut l = image::Limits::default();
    l.max_alloc = Some(limits.max_memory_bytes);
    l
}

fn bmp_decoder(bytes: &[u8]) -> Result<image::codecs::bmp::BmpDecoder<Cursor<&[u8]>>, ImageError> {
    image::codecs::bmp::BmpDecoder::new(Cursor::new(bytes))
        .map_err(|e| image_failure(ImageFormat::Bmp, e, &DecodeLimits::default()))
}

fn pnm_decoder(bytes: &[u8]) -> Result<image::codecs::pnm::PnmDecoder<Cursor<&[u8]>>, ImageError> {
    image::codecs::pnm::PnmDecoder::new(Cursor::new(bytes))
        .map_err(|e| image_failure(ImageFormat::Pnm, e, &DecodeLimits::default()))
}

fn image_rgb(
    f: ImageFormat,
    d: impl ImageDecoder,
    bytes: &[u8],
    raw: &mut Vec<u8>,
    out: &mut Vec<u8>,
    limits: &DecodeLimits,
) -> Result<(u32, u32), ImageError> {
    use image::ColorType as C;
    let (w, h) = d.dimensions();
    let color = d.color_type();
    if f == ImageFormat::Pnm {
        // Pillow rescales maxvals other than 1 (bitmaps), 255 and 65535 with its own rounding: not matched here.
        let (_, header) = pnm_decoder(bytes)?.into_inner();
        let maxval = header.maximal_sample();
        if !matches!(maxval, 1 | 255 | 65535) {
            return Err(unsupported(f, format!("maxval {maxval} (decoded: 1, 255, 65535)")));
        }
    }
    let n = d.total_bytes();
    check_buffer(f, n, limits)?;
    let n = usize::try_from(n).map_err(|_| over_budget(f, limits))?;
    d.read_image(scratch(raw, n)).map_err(|e| image_failure(f, e, limits))?;
    let dst = scratch(out, 3 * w as usize * h as usize);
    let src = &raw[..n];
    match color {
        C::L8 => expand_to_rgb(src, 1, dst),
        C::La8 => expand_to_rgb(src, 2, dst),
        C::Rgb8 => expand_to_rgb(src, 3, dst),
        C::Rgba8 => expand_to_rgb(src, 4, dst),
        C::L16 | C::Rgb16 => {
            // Native-endian u16 samples: gray is Pillow's I;16 (clipped), RGB keeps the high byte.
            let ch = if color == C::L16 { 1 } else { 3 };
            for (dd, s) in dst.chunks_exact_mut(3).zip(src.chunks_exact(2 * ch)) {
                let v = |c: usize| u16::from_ne_bytes([s[2 * c], s[2 * c + 1]]);
                if ch == 1 {
                    dd.fill(v(0).min(255) as u8);
                } else {
                    for (c, o) in dd.iter_mut().enumerate() {
                        *o = (v(c) >> 8) as u8;
                    }
                }
            }
        }
        other => return Err(unsupported(f, format!("colour type {other:?}"))),
    }
    Ok((w, h))
}
