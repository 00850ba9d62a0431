//! `decode::gpu_eligible` on arbitrary bytes (prefixed with SOI when they lack it): no panic, and whenever it says
//! eligible, libjpeg-turbo agrees: its header read succeeds with the same width, height and subsampling, YCbCr (or
//! gray) 8-bit baseline; and the header with its first scan's data and an EOI (what the eligibility rules speak
//! about: later scans and markers are not read) of at most 1 MP decodes without a fatal error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trdata::decode::{ColorSpace, DecodeLimits, Decoder, GPU_MAX_DIMENSION, ImageFormat, Subsampling, gpu_eligible};

thread_local! {
    // The pixel limit admits every size gpu_eligible accepts, so the header read is libjpeg-turbo's answer.
    static DECODER: std::cell::RefCell<Decoder> = std::cell::RefCell::new(
        Decoder::with_limits(DecodeLimits {
            max_pixels: u64::from(GPU_MAX_DIMENSION).pow(2),
            max_memory_bytes: 64 << 20,
            max_retained_scratch_bytes: 8 << 20,
            ..DecodeLimits::default()
        })
        .expect("decoder"),
    );
}

fuzz_target!(|data: &[u8]| {
    let owned;
    let bytes = if data.starts_with(&[0xFF, 0xD8]) {
        data
    } else {
        owned = [&[0xFF, 0xD8][..], data].concat();
        &owned[..]
    };
    let Ok(j) = gpu_eligible(bytes, usize::MAX) else { return };
    DECODER.with(|d| {
        let mut d = d.borrow_mut();
        let info = d.read_header(bytes).unwrap_or_else(|e| panic!("eligible {j:?}, header read fails: {e}"));
        let sub = j.subsampling;
        let cs = if sub == Subsampling::Gray { ColorSpace::Gray } else { ColorSpace::YCbCr };
        assert_eq!(info.format, ImageFormat::Jpeg);
        assert_eq!((info.width, info.height, info.subsampling, info.colorspace), (j.width, j.height, sub, cs));
        assert!(info.precision == 8 && !info.progressive && !info.lossless, "{info:?}");
        if u64::from(j.width) * u64::from(j.height) <= 1 << 20 {
            let mut out = Vec::new();
            if let Err(e) = d.decode_full_rgb(&first_scan_only(bytes), &mut out) {
                panic!("eligible {j:?} but the decode fails: {e}");
            }
        }
    });
});

/// The bytes up to the end of the first scan's entropy-coded data (the next marker that is not RSTn, or the end),
/// then EOI.
fn first_scan_only(b: &[u8]) -> Vec<u8> {
    // Past the first SOS header (eligible bytes have a clean header: segments, optionally FF fill between them).
    let mut pos = 2;
    let mut i = loop {
        while b[pos + 1] == 0xFF {
            pos += 1;
        }
        let next = pos + 2 + usize::from(u16::from_be_bytes([b[pos + 2], b[pos + 3]]));
        if b[pos + 1] == 0xDA {
            break next;
        }
        pos = next;
    };
    let mut stop = b.len();
    while i + 1 < b.len() {
        if b[i] == 0xFF && !matches!(b[i + 1], 0x00 | 0xD0..=0xD7 | 0xFF) {
            stop = i;
            break;
        }
        i += 1;
    }
    [&b[..stop], &[0xFF, 0xD9][..]].concat()
}
