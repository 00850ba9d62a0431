//! gpu_decode — the GPU decode path beside the CPU workers, between staging and transfer (design and sources:
//! docs/design/gpu-decode.md): per GPU engine, two decode threads that decode the crop windows of the samples routed to
//! them with nvJPEG's hardware engines into device arenas — [`DECODERS`] threads `trdata-nvjpg{g}{t}` the 4:4:4
//! and gray files, one `trdata-nvjpg{g}i{t}` the chroma-subsampled ones, with interpolated upsampling
//! (libjpeg-turbo's, which costs the engines 2.6×; 4:4:4 and gray decode identically without it) — and the
//! engine's transfer thread, which resamples them (Pillow's taps, computed on the host by the CPU path's code) straight into the batch's device slot with one
//! kernel launch per pass.
//!
//! Routing (a CPU worker, per sample, [`GpuDecode::route`]): the sample goes to the GPU iff the pipeline can run
//! there (one view, geometry only — no pixel ops —, RGB output), the file is a JPEG nvJPEG's engines take
//! ([`eligible`], decode/'s `gpu_eligible`: baseline, one scan, 4:4:4/4:2:2/4:2:0/4:4:0/gray, no EXIF rotation, …) and the
//! sample's own draw `SampleRng(seed, epoch, index, OP_DECODE_ROUTE)` is below the GPU share. So in reproducible
//! mode (fixed share) the path of a sample is a function of (seed, epoch, index, file bytes): two runs, or runs
//! with different worker counts, route every sample the same way. `decode="auto"` moves the share (fast mode
//! only) by the controller (controller.rs).
//!
//! The protocol of the decode queue is queue.rs's docs, the auto controller's controller.rs's.
//!
//! One direction (lib.rs): a worker routes and submits (`route.rs`, [`GpuDecode`] in `path.rs`), the decode
//! threads decode into the arenas (`queue.rs`, `threads.rs`, `pool.rs`), and the transfer thread collects and
//! finishes each batch's rows in its device slot through [`GpuRows`] (`rows.rs`), the one interface transfer/
//! uses (with [`CpuFallback`], which the worker implements); `layering_tests.rs` enforces it. Files:
//! - `task.rs`: [`GpuTask`] (one routed sample: file, window, taps), its outcome [`Decoded`], [`CpuFallback`];
//! - `route.rs`: which files the path takes ([`eligible`]), [`Share`] and the per-sample routing draw;
//! - `queue.rs`: the decode queue (`DecodeQueue`: submit, take, place, finish, wait, release, reset), free of
//!   CUDA, with its loom models and stress test;
//! - `threads.rs`: the decode threads (`decode_main`: nvJPEG calls into the device arenas) and the arenas' size;
//! - `pool.rs`: decoder reuse (the process-wide pool of closed loaders' nvJPEG decoders);
//! - `controller.rs`: the auto controller of the share (`decode="auto"`, fast mode);
//! - `path.rs`: [`GpuDecode`], one engine's path (start, routing, submit, the transfer thread's calls, close);
//! - `rows.rs`: [`GpuRows`], the transfer thread's part: the resample kernels and the CPU fallback into the slot.

// The files are private: the room's interface is what it re-exports below (workers: `GpuDecode`, `GpuTask`,
// `eligible`; the loader: `GpuRows::start`, its setup and sizes; transfer/: `GpuRows`, `CpuFallback`).
mod controller;
mod path;
mod pool;
mod queue;
mod route;
mod rows;
mod task;
mod threads;

pub use controller::Controller;
pub use path::GpuDecode;
pub use route::{MAX_GPU_FILE_BYTES, Share, eligible};
pub use rows::{BatchWindows, GpuDecodeSetup, GpuRows, Patch};
pub use task::{CpuFallback, Decoded, GpuTask, TaskTaps};
pub use threads::{DECODE_THREADS, arena_bytes};
