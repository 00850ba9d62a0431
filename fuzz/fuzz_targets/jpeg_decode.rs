//! `Decoder::decode_window` with a fuzzer-chosen DCT scale and window (first 5 bytes), then the JPEG bytes (the
//! rest, with an SOI prepended when missing so the fuzzer spends its time past the magic). One decoder is reused
//! across inputs, like a worker; a fixed good JPEG is decoded after each input and must not change.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trdata::decode::PixelWindow;

#[path = "common.rs"]
mod common;

fn good_jpeg() -> Vec<u8> {
    let mut e = trdata::synthetic::encode::JpegEncoder::new().unwrap();
    let px: Vec<u8> = (0..40 * 24 * 3).map(|i| (i * 7 % 251) as u8).collect();
    e.encode(&px, 40, 24, 90, trdata::decode::Subsampling::S420).unwrap()
}

struct State {
    decoder: trdata::decode::Decoder,
    good: Vec<u8>,
    reference: Vec<u8>,
}

thread_local! {
    static STATE: std::cell::RefCell<State> = std::cell::RefCell::new({
        let good = good_jpeg();
        let mut reference = Vec::new();
        common::decoder().decode_full_rgb(&good, &mut reference).unwrap();
        State { decoder: common::decoder(), good, reference }
    });
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let scale = data[0] % 8 + 1;
    let x0 = u32::from(u16::from_le_bytes([data[1], data[2]]));
    let y0 = u32::from(u16::from_le_bytes([data[3], data[4]]));
    let body = &data[5..];
    let owned;
    let bytes = if body.starts_with(&[0xFF, 0xD8, 0xFF]) {
        body
    } else {
        owned = [&[0xFF, 0xD8, 0xFF][..], body].concat();
        &owned[..]
    };
    STATE.with(|s| {
        let s = &mut *s.borrow_mut();
        let win = PixelWindow { x0, y0, x1: x0 + 1 + u32::from(data[1] & 63), y1: y0 + 1 + u32::from(data[3] & 63) };
        if let Ok(r) = s.decoder.decode_window(bytes, scale, win) {
            assert!(r.pixels.len() >= r.stride * r.height as usize);
            assert!(r.x0 + r.width <= r.scaled_width && r.y0 + r.height <= r.scaled_height);
        }
        let mut out = Vec::new();
        s.decoder.decode_full_rgb(&s.good, &mut out).expect("good JPEG after a fuzz input");
        assert!(out == s.reference, "a fuzz input changed the next image's pixels");
    });
});
