//! `Decoder::read_header` on arbitrary bytes (JPEG and PNG headers), twice on one decoder: the second answer must
//! equal the first (a failure leaves no state behind).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

thread_local! {
    static DECODER: std::cell::RefCell<trdata::decode::Decoder> = std::cell::RefCell::new(common::decoder());
}

fuzz_target!(|data: &[u8]| {
    DECODER.with(|d| {
        let mut d = d.borrow_mut();
        let a = d.read_header(data).map_err(|e| e.kind);
        let b = d.read_header(data).map_err(|e| e.kind);
        assert_eq!(a, b, "read_header is not a function of the bytes");
    });
});
