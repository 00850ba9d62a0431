//! PNG → RGB8 (whole image; PNG has no ROI or DCT scaling). Conversions are exactly Pillow's
//! `Image.open(f).convert('RGB')` (checked against Pillow in `tests/test_decode_hardening.py`):
//! - gray is replicated, alpha is dropped (not composited), palettes and low-bit gray are expanded (1/2/4-bit gray
//!   scaled to 0–255);
//! - 16-bit **gray** (Pillow mode `I;16`) is *clipped*: `min(v, 255)` — a 16-bit gray PNG holding values ≤ 255
//!   keeps them; 16-bit gray+alpha, RGB and RGBA (Pillow unpacks them with `…;16B` raw modes) keep the **high
//!   byte**, `v >> 8`.
//!
//! Memory (decode bombs): the pixel limit is checked on IHDR by the caller. Before allocating, the chunk list is
//! walked (lengths only) to sum the IDAT payload; deflate cannot expand more than 1032:1, so an image whose raw size
//! exceeds `1032 × IDAT bytes` (+ slack) cannot be complete and is `Corrupt` without allocating it (the 82-byte
//! PNG that claims 10000×10000 RGBA16 would otherwise cost 800 MB). The raw scanline buffer must also fit
//! `max_memory_bytes` (`TooLarge`), and the `png` crate's own buffers are capped by the same budget (`png::Limits`).

use std::io::Cursor;

use png::{BitDepth, ColorType, Transformations};

use super::DecodeLimits;

use crate::error::{ImageError, ImageErrorKind};

/// PNG signature.
pub(crate) const PNG_MAGIC: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

fn corrupt(e: impl std::fmt::Display) -> ImageError {
    ImageError::new(ImageErrorKind::Corrupt, format!("PNG: {e}"))
}

/// Width and height from the IHDR chunk (first chunk after the signature), without decoding.
pub(crate) fn png_size(bytes: &[u8]) -> Result<(u32, u32), ImageError> {
    // Signature (8) + length (4) + "IHDR" (4) + width (4) + height (4).
    if bytes.len() < 24 || &bytes[12..16] != b"IHDR" {
        return Err(corrupt("missing IHDR chunk"));
    }
    let w = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    let h = u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
    if w == 0 || h == 0 {
        return Err(corrupt(format!("invalid size {w}x{h}")));
    }
    Ok((w, h))
}

/// Sum of the IDAT chunk payload lengths, walking chunk headers only (no CRC, no inflate). Stops at IEND or at
/// the end of the data (a truncated chunk counts with the bytes present).
fn idat_bytes(bytes: &[u8]) -> u64 {
    let mut pos = 8usize;
    let mut total = 0u64;
    while pos + 8 <= bytes.len() {
        let len = u64::from(u32::from_be_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]]));
        let kind = &bytes[pos + 4..pos + 8];
        let avail = (bytes.len() - pos - 8) as u64;
        if kind == b"IDAT" {
            total += len.min(avail);
        } else if kind == b"IEND" {
            break;
        }
        // length + type + data + CRC; a length past the end ends the walk.
        match usize::try_from(len).ok().and_then(|l| pos.checked_add(12)?.checked_add(l)) {
            Some(next) if next > pos => pos = next,
            _ => break,
        }
    }
    total
}

fn png_failure(e: png::DecodingError, limits: &DecodeLimits) -> ImageError {
    match e {
        png::DecodingError::LimitsExceeded => ImageError::new(
            ImageErrorKind::TooLarge,
            format!("PNG: decoder memory above the budget of {} bytes", limits.max_memory_bytes),
        ),
        e => corrupt(e),
    }
}

/// Deflate's best case is 1032:1 (258-byte matches in 2-bit codes); zlib adds a header, each scanline a filter byte.
const MAX_DEFLATE_RATIO: u64 = 1032;

/// Decode a whole PNG into `out` as packed RGB8 rows (`3 * width` bytes each). `raw` is reusable scratch for the
/// decoder's native output. The caller has checked the pixel limit on `png_size`.
pub(crate) fn decode_png_rgb(
    bytes: &[u8],
    raw: &mut Vec<u8>,
    out: &mut Vec<u8>,
    limits: &DecodeLimits,
) -> Result<(u32, u32), ImageError> {
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    // EXPAND: palette → RGB(A), low-bit gray → 8-bit, tRNS → alpha. 16-bit samples are kept (converted below
    // with Pillow's per-mode rule).
    decoder.set_transformations(Transformations::EXPAND);
    decoder.set_limits(png::Limits { bytes: usize::try_from(limits.max_memory_bytes).unwrap_or(usize::MAX) });
    // Metadata we never use is not inflated: a compressed colour profile or text chunk can be a decompression bomb
    // of its own (a 1 MB iCCP chunk inflating to 1 GiB cost ~256 MiB per worker, capped only by the pixel budget).
    decoder.set_ignore_iccp_chunk(true);
    decoder.set_ignore_text_chunk(true);
    let mut reader = decoder.read_info().map_err(|e| png_failure(e, limits))?;
    let (w, h, source_color) = {
        let info = reader.info();
        (info.width, info.height, info.color_type)
    };
    let size = reader.output_buffer_size().ok_or_else(|| corrupt("image too large for this platform"))?;
    // Raw (pre-filter) data size: output bytes + one filter byte per row (interlaced passes add a few more rows;
    // the slack below covers them and the zlib/deflate framing).
    let needed_compressed = (size as u64 + u64::from(h)) / MAX_DEFLATE_RATIO;
    let have = idat_bytes(bytes);
    if have + 1024 < needed_compressed {
        return Err(corrupt(format!(
            "{w}x{h} needs at least {needed_compressed} bytes of image data, the file has {have} (truncated or lying \
             header)"
        )));
    }
    if size as u64 > limits.max_memory_bytes {
        return Err(ImageError::new(
            ImageErrorKind::TooLarge,
            format!(
                "PNG: {w}x{h} decodes to {size} bytes, above the memory budget of {} bytes",
                limits.max_memory_bytes
            ),
        ));
    }
    if raw.len() < size {
        raw.resize(size, 0);
    }
    let frame = reader.next_frame(&mut raw[..size]).map_err(|e| png_failure(e, limits))?;
    let (color, depth) = (frame.color_type, frame.bit_depth);
    let wide = match depth {
        BitDepth::Eight => false,
        BitDepth::Sixteen => true,
        d => return Err(ImageError::new(ImageErrorKind::Unsupported, format!("PNG: unexpected output depth {d:?}"))),
    };
    let (fw, fh) = (frame.width as usize, frame.height as usize);
    let stride = frame.line_size;
    let n = fw * fh * 3;
    if out.len() < n {
        out.resize(n, 0);
    }
    let channels = match color {
        ColorType::Grayscale => 1,
        ColorType::GrayscaleAlpha => 2,
        ColorType::Rgb => 3,
        ColorType::Rgba => 4,
        ColorType::Indexed => {
            return Err(ImageError::new(ImageErrorKind::Unsupported, "PNG: palette was not expanded"));
        }
    };
    // Pillow: 16-bit gray is mode I;16, converted to L by clipping; every other 16-bit mode keeps the high byte.
    // (A 16-bit gray PNG with tRNS is still I;16 for Pillow: the alpha EXPAND added is dropped, the gray clipped.)
    let clip_gray16 = wide && source_color == ColorType::Grayscale;
    let bps = if wide { 2 } else { 1 };
    for y in 0..fh {
        let src = &raw[y * stride..y * stride + fw * channels * bps];
        let dst = &mut out[y * fw * 3..(y + 1) * fw * 3];
        if wide {
            for (d, px) in dst.chunks_exact_mut(3).zip(src.chunks_exact(channels * 2)) {
                let sample = |c: usize| -> u8 {
                    let v = u16::from_be_bytes([px[2 * c], px[2 * c + 1]]);
                    if clip_gray16 { v.min(255) as u8 } else { (v >> 8) as u8 }
                };
                if channels <= 2 {
                    d.fill(sample(0));
                } else {
                    d.copy_from_slice(&[sample(0), sample(1), sample(2)]);
                }
            }
            continue;
        }
        match channels {
            1 => dst.chunks_exact_mut(3).zip(src).for_each(|(d, &g)| d.fill(g)),
            2 => dst.chunks_exact_mut(3).zip(src.chunks_exact(2)).for_each(|(d, s)| d.fill(s[0])),
            3 => dst.copy_from_slice(src),
            _ => dst.chunks_exact_mut(3).zip(src.chunks_exact(4)).for_each(|(d, s)| d.copy_from_slice(&s[..3])),
        }
    }
    debug_assert_eq!((fw as u32, fh as u32), (w, h));
    Ok((w, h))
}
