//! WebP/GIF/TIFF/BMP/Netpbm decode (`decode_full_rgb` and `decode_window`) on arbitrary bytes: the first input byte
//! picks the format whose magic is prepended (unless the data already starts with a recognised one).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

thread_local! {
    static DECODER: std::cell::RefCell<trdata::decode::Decoder> = std::cell::RefCell::new(common::decoder());
}

const MAGICS: [&[u8]; 7] = [b"RIFF\0\0\0\0WEBPVP8", b"GIF89a", b"II*\0", b"MM\0*", b"BM", b"P6\n", b"P5\n"];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let owned;
    let bytes = if trdata::decode::sniff_format(data).is_ok() {
        data
    } else {
        owned = [MAGICS[usize::from(pick) % MAGICS.len()], rest].concat();
        &owned[..]
    };
    DECODER.with(|d| common::decode_whole_both_ways(&mut d.borrow_mut(), bytes));
});
