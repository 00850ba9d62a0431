//! Shared by the fuzz targets: a decoder with budgets small enough that a fuzzer-made header cannot make one run
//! allocate hundreds of MB or take seconds (the budgets themselves are what `DecodeLimits` tests check).

use trdata::decode::{DecodeLimits, Decoder};

pub fn decoder() -> Decoder {
    Decoder::with_limits(DecodeLimits {
        max_pixels: 1 << 22,
        max_scans: 100,
        max_memory_bytes: 64 << 20,
        max_retained_scratch_bytes: 8 << 20,
        exif_transpose: false,
    })
    .expect("decoder")
}

/// Both whole-image entry points on `bytes` with `decoder` (formats decoded whole: PNG and those of `other.rs`):
/// no panic, and every success has the size it reports.
#[allow(dead_code)] // not every target includes a whole-image format
pub fn decode_whole_both_ways(decoder: &mut Decoder, bytes: &[u8]) {
    let mut out = Vec::new();
    if let Ok((w, h)) = decoder.decode_full_rgb(bytes, &mut out) {
        assert_eq!(out.len(), 3 * w as usize * h as usize);
    }
    let window = trdata::decode::PixelWindow { x0: 0, y0: 0, x1: 4, y1: 4 };
    if let Ok(r) = decoder.decode_window(bytes, 8, window) {
        assert_eq!(r.pixels.len(), r.stride * r.height as usize);
    }
}
