//! The truncation/scan-count marker walk on arbitrary bytes: no panic, `end` within the data, and every prefix
//! that cuts the EOI off is reported as an error (the truncation rule depends only on the bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use trdata::decode::markers::walk_jpeg;

fuzz_target!(|data: &[u8]| {
    let owned;
    let bytes = if data.starts_with(&[0xFF, 0xD8]) {
        data
    } else {
        owned = [&[0xFF, 0xD8][..], data].concat();
        &owned[..]
    };
    if let Ok(st) = walk_jpeg(bytes) {
        assert!(st.end >= 4 && st.end <= bytes.len());
        assert_eq!(&bytes[st.end - 2..st.end], &[0xFF, 0xD9]);
        // The walk stops at the first EOI: the prefix up to it gives the same answer, one byte less fails.
        assert_eq!(walk_jpeg(&bytes[..st.end]), Ok(st));
        assert!(walk_jpeg(&bytes[..st.end - 1]).is_err());
    }
});
