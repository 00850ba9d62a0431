//! gpu_decode/rows — the transfer thread's part of the GPU decode path, and the one interface transfer/ uses:
//! [`GpuRows`] starts the engine's path (the resample kernels and [`GpuDecode`]), and per batch collects the
//! decoded windows, writes the batch's GPU rows into its device slot on the copy stream (one resample launch; the
//! CPU fallback's rows copied in) and releases the batch's arena. transfer/engine.rs calls it between the slab's
//! H2D copy and the slot's copy event (queue.rs, "Protocol").

// gpu_decode/ is an unsafe-allowed room (docs/design/architecture.md "House style"): the fallback rows' H2D copies
// below, each with its SAFETY line.
#![allow(unsafe_code)]

use super::path::GpuDecode;
use super::route::Share;
use super::task::{CpuFallback, Decoded};
use crate::cuda::nvjpeg::Nvjpeg;
use crate::cuda::nvrtc::Nvrtc;
use crate::cuda::resample_gpu::{GpuResampler, GpuSample, OutputFormat};
use crate::cuda::{GpuContext, Stream};
use crate::error::{Result, SampleError};
use crate::staging::{BatchBuffer, BatchLayout};
use crate::stats::{GpuCounters, Stats};
use crate::sync::Arc;
use std::time::Duration;

/// A row the CPU fallback made: (row, label, dataset index, targets and extras), for the batch's host-side
/// vectors.
pub type Patch = (usize, i64, i64, crate::sample::RowFields);
/// What the GPU decode path of an engine needs.
#[derive(Clone)]
pub struct GpuDecodeSetup {
    /// libnvjpeg.
    pub nvjpeg: std::sync::Arc<Nvjpeg>,
    /// libnvrtc (compiles the resample kernel).
    pub nvrtc: std::sync::Arc<Nvrtc>,
    /// The GPU share and whether it follows the load.
    pub share: Share,
    /// The output the kernel writes (the CPU writer's table, layout and size).
    pub format: OutputFormat,
    /// Bytes of one decode arena (one per batch in flight).
    pub arena_bytes: usize,
}

impl std::fmt::Debug for GpuDecodeSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDecodeSetup").field("share", &self.share).field("arena_bytes", &self.arena_bytes).finish()
    }
}

/// The decoded windows of one batch (every GPU task of it, decoded or to fall back), as the transfer thread
/// collected them; empty when the batch has none.
#[derive(Debug, Default)]
pub struct BatchWindows(Vec<Decoded>);

/// The transfer thread's part of the GPU decode path: the decode queue, the kernels, the one-row buffer of the CPU
/// fallback.
pub struct GpuRows {
    decode: std::sync::Arc<GpuDecode>,
    resampler: GpuResampler,
    fallback_row: Option<BatchBuffer>,
    /// The loader's counters (`samples` counts the rows the GPU made).
    stats: Arc<Stats>,
}

impl std::fmt::Debug for GpuRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuRows").field("decode", &self.decode).finish_non_exhaustive()
    }
}

impl GpuRows {
    /// Start engine `local_engine`'s GPU decode path on `ctx`'s GPU: compile the resample kernel (an error of the
    /// loader's start when it does not build) and start the decode threads with `arenas` arenas (host ring depth
    /// + 1, queue.rs "arenas").
    pub fn start(
        ctx: &std::sync::Arc<GpuContext>,
        setup: &GpuDecodeSetup,
        local_engine: usize,
        arenas: usize,
        counters: std::sync::Arc<GpuCounters>,
        stats: Arc<Stats>,
    ) -> Result<Self> {
        let resampler = GpuResampler::new(ctx, &setup.nvrtc, setup.format.clone())?;
        let decode = std::sync::Arc::new(GpuDecode::start(
            std::sync::Arc::clone(&setup.nvjpeg),
            std::sync::Arc::clone(ctx),
            local_engine,
            setup.share,
            arenas,
            setup.arena_bytes,
            counters,
        )?);
        Ok(Self { decode, resampler, fallback_row: None, stats })
    }

    /// The path the workers route samples to.
    pub fn decode(&self) -> &std::sync::Arc<GpuDecode> {
        &self.decode
    }

    /// A new epoch (queue.rs protocol: no worker and no kernel of the old epoch runs now).
    pub fn reset(&self) {
        self.decode.reset();
    }

    /// Wait until every task of batch `b` has an outcome and take them; `None` when `aborted` says so.
    pub fn wait_batch(&self, b: u64, aborted: impl Fn() -> bool) -> Option<BatchWindows> {
        self.decode.wait_batch(b, aborted).map(BatchWindows)
    }

    /// Batch `b`'s windows are no longer read (its kernels completed or never ran): free its arena.
    pub fn release(&self, b: u64) {
        self.decode.release(b);
    }

    /// The auto controller, after one batch (controller.rs).
    pub fn adjust(&self, starved: bool, cpu_wait: Duration, gpu_wait: Duration) {
        self.decode.adjust(starved, cpu_wait, gpu_wait);
    }

    /// Stop and join the decode threads (path.rs `close`); idempotent.
    pub fn close(&self) {
        self.decode.close();
    }

    /// Write a batch's GPU rows into the device slot at `slot_ptr` (laid out as `layout`) on the copy stream: one
    /// resample launch for every decoded window, and the CPU fallback (`fallback`: mod.rs docs) for each task the
    /// GPU could not decode, whose row, label and index are copied in (`patches` records the label/index and the
    /// row's targets for the host-side vectors; `error` keeps the first sample error, as the station does).
    ///
    /// # Safety
    /// `slot_ptr` is a device allocation of `layout.total_bytes()` on this path's GPU that nothing else writes
    /// and that stays allocated until the work enqueued on `stream` completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn finish(
        &mut self,
        fallback: &dyn CpuFallback,
        windows: &BatchWindows,
        slot_ptr: u64,
        layout: BatchLayout,
        stream: &Stream,
        error: &mut Option<SampleError>,
        patches: &mut Vec<Patch>,
    ) -> Result<()> {
        let decoded = &windows.0;
        let (images, row_bytes) = (slot_ptr + layout.view_offset(0) as u64, layout.view_bytes(0));
        let samples: Vec<GpuSample<'_>> = decoded
            .iter()
            .filter_map(|d| {
                let (src, pitch) = *d.at.as_ref().ok()?;
                let t = &d.task;
                Some(GpuSample {
                    src: src as u64,
                    src_pitch: pitch,
                    src_x0: t.roi.x,
                    src_y0: t.roi.y,
                    src_w: t.roi.w,
                    src_h: t.roi.h,
                    x: t.x.view(),
                    y: t.y.view(),
                    vertical_first: t.vertical_first,
                    dst: images + (t.row * row_bytes) as u64,
                })
            })
            .collect();
        if !samples.is_empty() {
            self.resampler.run(stream, &samples)?;
            Stats::add(&self.stats.samples, samples.len() as u64);
        }
        for d in decoded.iter().filter(|d| d.at.is_err()) {
            if self.fallback_row.is_none() {
                self.fallback_row = Some(BatchBuffer::new(BatchLayout::new(1, row_bytes))?);
            }
            let buf = self.fallback_row.as_ref().expect("just made");
            buf.reset_claims();
            let (outcome, written, label) = {
                let mut w = buf.claim_row(0);
                let outcome = fallback.produce(d.task.index, &mut w);
                let written = *outcome.as_ref().unwrap_or(&d.task.index);
                let label = fallback.label(written);
                w.set_meta(label, written as i64);
                (outcome, written, label)
            };
            if let Err(e) = outcome {
                error.get_or_insert(e);
            }
            let l = buf.layout();
            let row = d.task.row;
            // SAFETY: indices_offset() + 8 ≤ the one-row slab's length.
            let index_src = unsafe { buf.slab_ptr().add(l.indices_offset()) };
            let copies = [
                (images + (row * row_bytes) as u64, buf.view_ptr(0), row_bytes),
                (slot_ptr + (layout.labels_offset() + row * 8) as u64, buf.slab_ptr(), 8),
                (slot_ptr + (layout.indices_offset() + row * 8) as u64, index_src, 8),
            ];
            for (dst, src, len) in copies {
                // SAFETY: `src` lies in the one-row buffer (alive, not written until the synchronize below); `dst` is
                // the row's image/label/index inside the slot's allocation (row < rows of `layout`; the allocation
                // is `finish`'s contract).
                unsafe { stream.copy_htod_async(dst, src, len) }?;
            }
            stream.synchronize()?; // the one-row buffer is rewritten by the next fallback
            let fields = buf.take_fields(1).pop().unwrap_or_default();
            patches.push((row, label, written as i64, fields));
        }
        Ok(())
    }
}
