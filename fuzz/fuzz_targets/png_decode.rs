//! PNG decode (`decode_full_rgb` and `decode_window`) on arbitrary bytes after the PNG signature.
#![no_main]

use libfuzzer_sys::fuzz_target;

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
    DECODER.with(|d| common::decode_whole_both_ways(&mut d.borrow_mut(), bytes));
});
