//! Shared by the fuzz targets: a decoder with budgets small enough that a fuzzer-made header cannot make one run
//! allocate hundreds of MB or take seconds (the budgets themselves are what `DecodeLimits` tests check).

use trdata::decode::{DecodeLimits, Decoder};

pub fn decoder() -> Decoder {
    Decoder::with_limits(DecodeLimits {
        max_pixels: 1 << 22,
        max_scans: 100,
        max_memory_bytes: 64 << 20,
        max_retained_scratch_bytes: 8 << 20,
    })
    .expect("decoder")
}
