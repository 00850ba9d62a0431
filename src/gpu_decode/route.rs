//! gpu_decode/route — which samples go to the GPU (mod.rs, "Routing"): the share ([`Share`]: fixed, or moved by
//! controller.rs) and each sample's own draw against it, and which files the path takes at all ([`eligible`]:
//! decode/'s header walk with the path's file size bound); worker/ asks per sample, before it decodes anything.

use crate::decode::{GpuJpeg, Ineligible};

/// Files above this size go to the CPU path (the GPU path keeps a copy of each file until it is decoded).
pub const MAX_GPU_FILE_BYTES: usize = 16 << 20;

/// Whether the GPU decode path takes `bytes` (`decode::gpu_eligible` with [`MAX_GPU_FILE_BYTES`]): its size and
/// chroma layout, or why not.
pub fn eligible(bytes: &[u8]) -> Result<GpuJpeg, Ineligible> {
    crate::decode::gpu_eligible(bytes, MAX_GPU_FILE_BYTES)
}

/// How the GPU share is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Share {
    /// Fixed.
    Fixed(f64),
    /// Moved by the controller, starting at the given value.
    Auto(f64),
}

/// Whether sample (seed, epoch, index), whose file is eligible, goes to the GPU at share `p`: its own draw
/// `SampleRng(seed, epoch, index, OP_DECODE_ROUTE)` below `p` (mod.rs, "Routing").
pub fn draw(p: f64, seed: u64, epoch: u64, index: u64) -> bool {
    p >= 1.0 || (p > 0.0 && crate::rng::SampleRng::new(seed, epoch, index, crate::rng::OP_DECODE_ROUTE).uniform() < p)
}
