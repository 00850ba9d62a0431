//! trdata — the input pipeline that keeps GPUs fed.
//!
//! ```text
//! source ─► plan ─► decode ─► augment (+ sample: targets) ─► staging ─► gpu_decode ─► transfer ─► export ─► py
//! (files)  (epoch  (ROI +    (fused     (pinned    (nvJPEG      (station,   (DLPack   (numpy/torch)
//!           order,  DCT       RRC/flip/  slabs,     queue,       H2D engine, owners,
//!           claims) scaling)  normalize) NUMA)      resample     slot ring)  capsules)
//!                                                   into slots)
//!                  └──── worker: pinned threads claim samples and run decode ─► augment ─► staging ────┘
//!                        (or route a sample to gpu_decode, whose rows the transfer thread finishes)
//! ```
//!
//! Rooms, in dependency order (a room imports only rooms before it; `layering_tests.rs` enforces it):
//! - platform and shared primitives: `error`, `param` (a parameter's rule and its one error wording), `sync`
//!   (loom shim), `stats` (counters), `rng` (Philox, for the
//!   plan's shuffle and every augmentation draw), `topology` (NUMA, affinity, binding plans), `cuda` (driver
//!   API, dynamically loaded), `json` (the one JSON lexer: Python's grammar, bounded, in place), `annot` (detection/segmentation annotations: COCO files, masks from polygons and
//!   RLE, checked before anything is allocated from them);
//! - where bytes live: `storage` (a local path or a URL — s3://, gs://, az://, http(s):// — read by byte ranges,
//!   with retries, deadlines and counters; fork-safe);
//! - the data path: `source` → `plan` → `decode` → `augment` → `sample` (a sample's targets: read from their
//!   store, moved with the row's geometry, gathered per batch as ragged columns) → `staging` → `gpu_decode` (the GPU decode path:
//!   routing, the decode queue and threads, the resample into device slots; transfer/ sees only its `GpuRows` and
//!   `CpuFallback`) → `transfer` → `worker` (the pool that runs decode/augment into staging slots, or routes a
//!   sample to gpu_decode, and publishes them through the station) → `export`;
//! - assembly: `config` (every parameter validated and spelled once) → `loader` (lifecycle, epochs, resume);
//! - beside the path: `synthetic` (dataset painter and encoder for benches and tests), `pack` (writes and verifies
//!   packed files; their layout and reader are `source/packed.rs`) and `py` (PyO3 only).
//!
//! Crate-wide invariants:
//! - every sample of an epoch is produced exactly once per engine plan position (plan + claiming);
//! - a sample's pixels depend only on (seed, epoch, dataset index), never on worker/thread count;
//! - memory handed to Python is never rewritten while a view of it lives (staging + transfer leases);
//! - one bad file never harms another: decoder state does not survive a failure (decode/jpeg.rs recreates the
//!   handle), and the skip policy's replacement depends on (seed, epoch, index) only (worker/skip.rs `produce`);
//! - every size that comes from a header or from the user is checked before it is allocated: a typed error
//!   (`ConfigError` at construction, `TooLarge`/`Corrupt` per file, `Memory` at run time), never an abort;
//! - only regular files are read, and never more than a bound (source/read.rs);
//! - `unsafe` lives only in decode/, staging/, topology/, cuda/ (the driver and nvJPEG, both opened at run time),
//!   gpu_decode/ (rows.rs: the CPU fallback rows' H2D copies), transfer/, export/, py/, augment/simd.rs (runtime
//!   AVX2 dispatch of the resample and pixel kernels; its `kernels!` macro expands next to the kernel bodies, in
//!   the `dispatch` modules of augment/kernels.rs and augment/warp.rs, which allow exactly that) and synthetic/encode.rs (the libjpeg-turbo encoder of the test
//!   and benchmark data), each block with a SAFETY note; outside the library only the integration test
//!   tests/decode_memory.rs (its counting global allocator).

#![deny(unsafe_code)]

// Rooms (rustfmt keeps them sorted; the dependency order is above).
pub mod annot;
pub mod augment;
pub mod config;
pub mod cuda;
pub mod decode;
pub mod error;
pub mod export;
pub mod gpu_decode;
pub mod json;
pub mod loader;
pub mod pack;
pub mod param;
pub mod plan;
pub mod rng;
pub mod sample;
pub mod source;
pub mod staging;
pub mod stats;
pub mod storage;
pub mod sync;
pub mod synthetic;
pub mod topology;
pub mod transfer;
pub mod worker;

#[cfg(test)]
mod layering_tests;
#[cfg(test)]
mod test_data;

#[cfg(feature = "python")]
mod py;

pub use error::{ImageError, ImageErrorKind, Result, SampleError, TrdataError};
