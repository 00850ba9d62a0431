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
//! (`Decoder::read_header`). Then the decode's peak memory is estimated from the header — every buffer it holds
//! at once: the crate's decoded image, the RGB8 output, the crate's own intermediates (`*_peak_bytes` below say
//! which, from the crates' sources; `tests/decode_memory.rs` measures them with a counting allocator) — and must
//! fit `max_memory_bytes`, or the file is `TooLarge` before anything is allocated. Each crate's own limit is set
//! to the same budget as a second line (`WebPDecoder::set_memory_limit`, `tiff::Limits`, `image::Limits`; GIF
//! decodes into a buffer sized here). Where the crate's layout already is packed RGB8 (opaque WebP, 8-bit RGB
//! TIFF) it decodes straight into the output, without a second copy of the image. Every crate error is a typed `ImageError` (limits → `TooLarge`, unsupported variants →
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

/// `TooLarge` if a decode whose buffers take `bytes` at their peak (see the `*_peak_bytes` estimates) does not fit
/// the memory budget; checked before any of them is allocated.
fn check_memory(f: ImageFormat, bytes: u64, limits: &DecodeLimits) -> Result<(), ImageError> {
    if bytes > limits.max_memory_bytes {
        return Err(err(
            ImageErrorKind::TooLarge,
            f,
            format!(
                "decoding needs about {bytes} bytes of memory (decoded image, RGB output and decoder buffers), above \
                 the memory budget of {} bytes (max_memory_bytes)",
                limits.max_memory_bytes
            ),
        ));
    }
    Ok(())
}

/// TIFF's state besides the image buffers: the strip reader's LZW or deflate tables and window, its read buffer
/// (measured ≤ 80 KB, `tests/decode_memory.rs`).
const TIFF_STATE_BYTES: u64 = 128 << 10;

/// GIF's LZW decoder and read buffer (measured ≤ 40 KB).
const GIF_STATE_BYTES: u64 = 64 << 10;

/// The `image` crate's BMP and Netpbm readers: row buffers, palettes.
const IMAGE_STATE_BYTES: u64 = 64 << 10;

/// The RGB8 output of a `w × h` image.
fn rgb_bytes(w: u32, h: u32) -> u64 {
    3 * u64::from(w) * u64::from(h)
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
        ImageFormat::Gif => gif_rgb(bytes, raw, out, limits),
        ImageFormat::Tiff => tiff_rgb(bytes, raw, out, limits),
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
    check_memory(f, webp_peak_bytes(&mut d, bytes), limits)?;
    // Animated files: read_image gives the first frame (composited on the canvas, as Pillow's first frame).
    if d.has_alpha() {
        d.read_image(scratch(raw, n)).map_err(webp_failure)?;
        expand_to_rgb(&raw[..n], 4, scratch(out, 3 * w as usize * h as usize));
    } else {
        // Opaque: the crate's output is packed RGB8 already.
        d.read_image(scratch(out, n)).map_err(webp_failure)?;
    }
    Ok((w, h))
}

/// Peak memory of a WebP decode (image-webp 0.2.4's `read_image`), from the headers; P = width × height, F = the
/// file's bytes:
/// - the RGB8 output (3P), plus the crate's RGBA output (4P) for a file with alpha;
/// - lossless (VP8L): an ARGB buffer of 4P when the file is opaque (the crate decodes to ARGB, then copies RGB
///   out); the transform and meta-Huffman sub-images (at most P/4 each for the predictor, cross-colour and
///   Huffman-meta images, P/8 for the meta codes: P in all); and the Huffman tables, one set of five per
///   meta code, up to 20 KB a set: they grow with the coded data, 3F (+ the fixed 256 KiB) bounds them for the
///   files libwebp writes (measured: 0.7–3.7F, the most on small photos at method 6), though a hostile file can
///   declare up to 65,536 sets with a few bytes each — a bound this estimate cannot give without decoding the
///   meta-Huffman image;
/// - lossy (VP8): the macroblock-padded Y, U and V planes (1.5 × P rounded up to 16 × 16), the per-macroblock
///   modes (30 bytes per 256 pixels in a vector grown by doubling: P/4 with the growth), and the coded
///   partitions, read whole and copied (measured up to 3.8F: 5F); its alpha plane (ALPH), when
///   lossless-coded, decodes through a 4P ARGB buffer and a P green plane, plus the sub-images: 6P;
/// - animated: the 4P canvas, the first frame's buffer (3 bytes per frame pixel for VP8, 4 for VP8L and
///   VP8+ALPH) and that frame's decode as above (the frame's kind and size come from its ANMF header).
fn webp_peak_bytes(d: &mut image_webp::WebPDecoder<Cursor<&[u8]>>, bytes: &[u8]) -> u64 {
    let (w, h) = d.dimensions();
    let pixels = |w: u32, h: u32| u64::from(w) * u64::from(h);
    let padded = |w: u32, h: u32| u64::from(w.div_ceil(16) * 16) * u64::from(h.div_ceil(16) * 16);
    let p = pixels(w, h);
    let file = bytes.len() as u64;
    let lossless = |p: u64, argb: bool| if argb { 4 * p } else { 0 } + p + 3 * file;
    let lossy =
        |w: u32, h: u32, alpha: bool| 7 * padded(w, h) / 4 + 5 * file + if alpha { 6 * pixels(w, h) } else { 0 };
    let frames = if d.is_animated() {
        // The canvas, then the first frame; a frame whose header cannot be read costs what the largest would.
        let canvas = 4 * p;
        canvas
            + match first_anmf_frame(bytes) {
                Some((fw, fh, [b'V', b'P', b'8', b' '])) => 3 * pixels(fw, fh) + lossy(fw, fh, false),
                Some((fw, fh, [b'V', b'P', b'8', b'L'])) => 4 * pixels(fw, fh) + lossless(pixels(fw, fh), false),
                Some((fw, fh, [b'A', b'L', b'P', b'H'])) => 4 * pixels(fw, fh) + lossy(fw, fh, true),
                _ => 4 * p + lossless(p, false).max(lossy(w, h, true)),
            }
    } else if d.is_lossy() {
        lossy(w, h, d.has_alpha())
    } else {
        lossless(p, !d.has_alpha()) // with alpha, the ARGB buffer is the 4P output below
    };
    let output = if d.has_alpha() { 4 * p } else { 0 }; // opaque: the crate writes the RGB output itself
    rgb_bytes(w, h) + output + frames + WEBP_STATE_BYTES
}

/// image-webp's state besides the buffers above: the colour cache (≤ 8 KB), borders, probabilities, and the
/// Huffman tables of a small lossless file beyond 3F (measured: 3.7F on a 256 × 256 photo at method 6).
const WEBP_STATE_BYTES: u64 = 256 << 10;

/// Width, height and bitstream chunk (`VP8 `, `VP8L` or `ALPH`) of the first ANMF frame of an animated WebP:
/// the ANMF payload is X, Y (3 bytes each), width − 1, height − 1 (3 bytes each), duration (3), flags (1), then
/// the frame's first chunk header.
fn first_anmf_frame(bytes: &[u8]) -> Option<(u32, u32, [u8; 4])> {
    let u24 = |b: &[u8]| u32::from(b[0]) | u32::from(b[1]) << 8 | u32::from(b[2]) << 16;
    let mut pos = 12;
    while let Some(head) = bytes.get(pos..pos + 8) {
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if &head[..4] == b"ANMF" {
            let payload = bytes.get(pos + 8..pos + 8 + 20)?;
            let kind = [payload[16], payload[17], payload[18], payload[19]];
            return Some((u24(&payload[6..9]) + 1, u24(&payload[9..12]) + 1, kind));
        }
        pos = pos.checked_add(8)?.checked_add(len)?.checked_add(len & 1)?;
    }
    None
}

// ---- GIF ----

fn gif_failure(e: gif::DecodingError) -> ImageError {
    let m = e.to_string();
    if m.contains("memory limit") || m.contains("Memory limit") {
        return err(ImageErrorKind::TooLarge, ImageFormat::Gif, m);
    }
    corrupt(ImageFormat::Gif, m)
}

fn gif_rgb(
    bytes: &[u8],
    raw: &mut Vec<u8>,
    out: &mut Vec<u8>,
    limits: &DecodeLimits,
) -> Result<(u32, u32), ImageError> {
    let f = ImageFormat::Gif;
    let mut opts = gif::DecodeOptions::new();
    opts.set_color_output(gif::ColorOutput::Indexed);
    let budget = NonZeroU64::new(limits.max_memory_bytes).unwrap_or(NonZeroU64::MIN);
    opts.set_memory_limit(gif::MemoryLimit::Bytes(budget));
    let mut d = opts.read_info(Cursor::new(bytes)).map_err(gif_failure)?;
    let (w, h) = (usize::from(d.width()), usize::from(d.height()));
    let global = d.global_palette().map(<[u8]>::to_vec);
    // The first frame's descriptor (no pixels yet): its index buffer is sized from it.
    let frame = d.next_frame_info().map_err(gif_failure)?.ok_or_else(|| corrupt(f, "no image in the file"))?;
    let (fx, fy, fw, fh) =
        (usize::from(frame.left), usize::from(frame.top), usize::from(frame.width), usize::from(frame.height));
    let (transparent, local) = (frame.transparent, frame.palette.clone());
    // Peak: the RGB8 output, one index per frame pixel, the LZW decoder's state.
    check_memory(f, rgb_bytes(w as u32, h as u32) + (fw * fh) as u64 + GIF_STATE_BYTES, limits)?;
    let indices = scratch(raw, d.buffer_size());
    d.read_into_buffer(indices).map_err(gif_failure)?;
    let palette = local.as_deref().or(global.as_deref());
    let colour = |i: u8| -> [u8; 3] {
        match palette {
            Some(p) => p.get(3 * usize::from(i)..3 * usize::from(i) + 3).map_or([0; 3], |c| [c[0], c[1], c[2]]),
            None => [i; 3],
        }
    };
    let dst = scratch(out, 3 * w * h);
    let fill = colour(transparent.unwrap_or(0));
    dst.chunks_exact_mut(3).for_each(|d| d.copy_from_slice(&fill));
    // The part of the frame inside the logical screen (Pillow pastes it there; the rest is cut off).
    for y in 0..fh.min(h.saturating_sub(fy)) {
        let src = &indices[y * fw..(y + 1) * fw];
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

fn tiff_rgb(
    bytes: &[u8],
    raw: &mut Vec<u8>,
    out: &mut Vec<u8>,
    limits: &DecodeLimits,
) -> Result<(u32, u32), ImageError> {
    use tiff::ColorType as C;
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
    // The crate's samples, packed (bilevel rows padded to whole bytes): the buffer its `read_image_bytes` fills.
    let row_bytes = (wu as u64 * channels as u64 * u64::from(bits)).div_ceil(8);
    let native = row_bytes * hu as u64;
    // 8-bit RGB is already our layout: decoded straight into the output.
    let direct = color == C::RGB(8);
    // Peak: the RGB output, the crate's samples (unless direct), its strip/tile offset and size tables (two u64
    // per chunk), and the LZW/deflate stream state.
    let chunks = match d.get_chunk_type() {
        tiff::decoder::ChunkType::Strip => d.strip_count(),
        tiff::decoder::ChunkType::Tile => d.tile_count(),
    }
    .map_err(tiff_failure)?;
    let need = rgb_bytes(w, h) + if direct { 0 } else { native } + 16 * u64::from(chunks) + TIFF_STATE_BYTES;
    check_memory(f, need, limits)?;
    let layout = d.image_buffer_layout().map_err(tiff_failure)?;
    if layout.sample_format != tiff::tags::SampleFormat::Uint {
        return Err(unsupported(f, format!("{:?} samples of {color:?}", layout.sample_format)));
    }
    if layout.len as u64 > native.max(rgb_bytes(w, h)) {
        return Err(corrupt(f, format!("sample layout of {} bytes for {w}x{h} {color:?}", layout.len)));
    }
    if direct {
        d.read_image_bytes(scratch(out, layout.len)).map_err(tiff_failure)?;
        return Ok((w, h));
    }
    let px = scratch(raw, layout.len);
    d.read_image_bytes(px).map_err(tiff_failure)?;
    let px = &mut px[..];
    let dst = scratch(out, 3 * wu * hu);
    match (bits, color) {
        (1, _) => {
            // Rows are padded to whole bytes; a set bit is white (BlackIsZero).
            let row_bytes = wu.div_ceil(8);
            for (y, row) in dst.chunks_exact_mut(3 * wu).enumerate() {
                let src = px.get(y * row_bytes..(y + 1) * row_bytes).ok_or_else(|| corrupt(f, "short bilevel data"))?;
                for (x, d) in row.chunks_exact_mut(3).enumerate() {
                    d.fill(if src[x / 8] & (0x80 >> (x % 8)) != 0 { 255 } else { 0 });
                }
            }
        }
        (8, C::Palette(_)) => {
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
        (8, C::CMYK(_)) => {
            // Pillow's CMYK (not inverted) → RGB; `cmyk_to_rgb` takes Adobe-inverted samples: inverted in place.
            px.iter_mut().for_each(|v| *v = 255 - *v);
            cmyk_to_rgb(px, dst);
        }
        (8, _) => expand_to_rgb(px, channels, dst),
        _ => {
            // 16-bit, native-endian samples: gray is Pillow's I;16, clipped; RGB(A) keeps the high byte.
            let gray16 = channels <= 2;
            for (dd, s) in dst.chunks_exact_mut(3).zip(px.chunks_exact(2 * channels)) {
                let v = |c: usize| u16::from_ne_bytes([s[2 * c], s[2 * c + 1]]);
                if gray16 {
                    dd.fill(v(0).min(255) as u8);
                } else {
                    for (c, o) in dd.iter_mut().enumerate() {
                        *o = (v(c) >> 8) as u8;
                    }
                }
            }
        }
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
    // Peak: the RGB output, the crate's samples (unless they are RGB8 already: decoded straight into the
    // output), the reader's row buffers.
    let direct = color == C::Rgb8;
    check_memory(f, rgb_bytes(w, h) + if direct { 0 } else { n } + IMAGE_STATE_BYTES, limits)?;
    let n = usize::try_from(n).map_err(|_| over_budget(f, limits))?;
    if direct {
        d.read_image(scratch(out, n)).map_err(|e| image_failure(f, e, limits))?;
        return Ok((w, h));
    }
    d.read_image(scratch(raw, n)).map_err(|e| image_failure(f, e, limits))?;
    let dst = scratch(out, 3 * w as usize * h as usize);
    let src = &raw[..n];
    match color {
        C::L8 => expand_to_rgb(src, 1, dst),
        C::La8 => expand_to_rgb(src, 2, dst),
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
