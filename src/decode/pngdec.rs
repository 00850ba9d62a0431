//! PNG → RGB8 (whole image; PNG has no ROI or DCT scaling). Conversions follow Pillow's `.convert('RGB')`:
//! gray is replicated, alpha is dropped (not composited), palettes are expanded, and 16-bit samples keep their high
//! byte (what Pillow does for 16-bit RGB(A); for 16-bit gray Pillow clips I;16 to 255 instead — we scale, which is
//! the only sensible reading of such data).

use std::io::Cursor;

use png::{BitDepth, ColorType, Transformations};

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

/// Decode a whole PNG into `out` as packed RGB8 rows (`3 * width` bytes each). `raw` is reusable scratch for the
/// decoder's native output. The caller has checked the pixel limit on `png_size`.
pub(crate) fn decode_png_rgb(bytes: &[u8], raw: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<(u32, u32), ImageError> {
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    // EXPAND: palette → RGB(A), low-bit gray → 8-bit, tRNS → alpha; STRIP_16: keep the high byte.
    decoder.set_transformations(Transformations::EXPAND | Transformations::STRIP_16);
    // The pixel limit is enforced by the caller; let the decoder allocate what that limit allows.
    decoder.set_limits(png::Limits { bytes: usize::MAX });
    let mut reader = decoder.read_info().map_err(corrupt)?;
    let (w, h) = {
        let info = reader.info();
        (info.width, info.height)
    };
    let size = reader.output_buffer_size().ok_or_else(|| corrupt("image too large for this platform"))?;
    if raw.len() < size {
        raw.resize(size, 0);
    }
    let frame = reader.next_frame(&mut raw[..size]).map_err(corrupt)?;
    let (color, depth) = (frame.color_type, frame.bit_depth);
    if depth != BitDepth::Eight {
        return Err(ImageError::new(ImageErrorKind::Unsupported, format!("PNG: unexpected output depth {depth:?}")));
    }
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
    for y in 0..fh {
        let src = &raw[y * stride..y * stride + fw * channels];
        let dst = &mut out[y * fw * 3..(y + 1) * fw * 3];
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
