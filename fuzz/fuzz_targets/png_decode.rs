//! PNG decode (`decode_full_rgb` and `decode_window`) on arbitrary bytes after the PNG signature.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trdata::decode::PixelWindow;

#[path = "common.rs"]
mod common;

thread_local! {
    static DECODER: std::cell::RefCell<trdata::decode::Decoder> = std::cell::RefCell::new(common::decoder());
}

const MAGIC: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

fuzz_target!(|data: &[u8]| {
    let owned;
    let bytes = if data.starts_with(&MAGIC) {
        data
    } else {
        owned = [&MAGIC[..], data].concat();
        &owned[..]
    };
    DECODER.with(|d| {
        let mut d = d.borrow_mut();
        let mut out = Vec::new();
        if let Ok((w, h)) = d.decode_full_rgb(bytes, &mut out) {
            assert_eq!(out.len(), 3 * w as usize * h as usize);
        }
        if let Ok(r) = d.decode_window(bytes, 8, PixelWindow { x0: 0, y0: 0, x1: 4, y1: 4 }) {
            assert_eq!(r.pixels.len(), r.stride * r.height as usize);
        }
    });
});
