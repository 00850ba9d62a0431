//! worker/sample — making one row: the sample's one read (`Dataset::read`, whatever the store), its decode and
//! augmentation into every view of the row (augment/views.rs), its targets beside it (targets.rs), a Mosaic's
//! parts (each part read by the same one read), and the routing of an eligible sample to the GPU decode path
//! (gpu_decode/, "Routing"). What happens when a sample fails is the skip policy's (skip.rs).

use super::{EpochJob, MAX_FILE_BYTES, WorkContext, targets};
use crate::augment::mosaic::Partners;
use crate::augment::{DecodePart, SampleKey, SampleTiming, WorkerScratch};
use crate::error::{ImageError, ImageErrorKind, SampleError};
use crate::gpu_decode::{GpuDecode, GpuTask, TaskTaps};
use crate::sample::RowFields;
use crate::source::{ReadCtx, SampleBytes};
use crate::staging::RowWriter;
use crate::stats::Stats;
use std::time::Instant;

/// Where a sample routed to the GPU goes: the engine's GPU decode path and the sample's batch and row.
#[derive(Clone, Copy)]
pub(crate) struct GpuRow<'a> {
    pub(super) gpu: &'a GpuDecode,
    pub(super) batch: u64,
    pub(super) row: usize,
}

/// The one read of a sample, a row's own or a Mosaic's part (`planned` false): the store's read, counted in
/// `read_ns` and `bytes_read`.
fn read<'s>(
    job: &'s EpochJob,
    i: usize,
    planned: bool,
    buf: &mut Vec<u8>,
) -> std::result::Result<SampleBytes<'s>, ImageError> {
    let ctx = &job.ctx;
    let stopping = || job.stopping();
    let how = ReadCtx { epoch: job.plan.epoch, max_bytes: MAX_FILE_BYTES, planned, stopping: &stopping };
    let t0 = Instant::now();
    let sample = ctx.dataset.read(i, &how, buf)?;
    Stats::add_since(&ctx.stats.read_ns, t0);
    Stats::add(&ctx.stats.bytes_read, sample.bytes(buf).len() as u64);
    Ok(sample)
}

/// Read dataset sample `index` once and decode it into every view of `dst` (augment/views.rs), its targets set
/// beside it. A failure is the row's error with the index of the sample whose bytes failed (a Mosaic's part, or
/// the row's own), which the skip policy records as bad (skip.rs).
pub(super) fn attempt_sample(
    job: &EpochJob,
    index: u64,
    scratch: &mut WorkerScratch,
    file_buf: &mut Vec<u8>,
    dst: &mut RowWriter<'_>,
    gpu: Option<GpuRow<'_>>,
) -> std::result::Result<(), (u64, SampleError)> {
    let ctx = &job.ctx;
    let i = index as usize;
    let key = SampleKey { seed: ctx.seed, epoch: job.plan.epoch, index };
    scratch.set_boxes(ctx.dataset.boxes.as_ref().map(|t| t.of(i)));
    scratch.set_declared_size(ctx.dataset.declared_size(i));
    // the row's targets and extras first: a record that fails fails the sample before its pixels are made
    // (targets.rs); extras that the image's read makes come after it
    let fields = targets::row_targets(job, key)
        .and_then(|targets| Ok((targets, targets::row_extras(job, key, false).map_err(|e| (index, e))?)));
    let result = fields.and_then(|(targets, early)| {
        let made = if ctx.pipeline.first().program().mosaic.is_some() {
            mosaic_sample(job, key, scratch, file_buf, dst).map(Some)
        } else {
            one_sample(job, i, key, scratch, file_buf, dst, gpu).map_err(|e| (index, e))
        };
        made.map(|timing| (timing, targets, early))
    });
    let result = result.and_then(|(timing, targets, early)| {
        let extras = match early {
            Some(e) => Some(e),
            None => targets::row_extras(job, key, true).map_err(|e| (index, e))?,
        };
        dst.set_fields(RowFields { targets, extras });
        Ok(timing)
    });
    match result {
        Ok(None) => Ok(()), // the GPU makes it (its count is the transfer thread's)
        Ok(Some(t)) => {
            Stats::add(&ctx.stats.decode_ns, t.decode_ns);
            Stats::add(&ctx.stats.augment_ns, t.augment_ns);
            Stats::add(&ctx.stats.samples, 1);
            Stats::add(&ctx.stats.decode_warnings, u64::from(t.damaged));
            Ok(())
        }
        Err((bad, error)) => {
            // a mosaic's part that failed is named (its file, and which row it was a partner of)
            let error = if bad == index {
                error
            } else {
                ImageError::new(error.kind.clone(), format!("Mosaic partner {bad} of row {index}: {}", error.message))
            };
            Err((bad, SampleError { path: ctx.dataset.sample_name(bad as usize), index, error }))
        }
    }
}

/// A mosaic row (augment/mosaic.rs): the row's image and its three partners read here one at a time by the
/// store's one read, each handed to the pipeline's decode; every part's read counts in `bytes_read`/`read_ns` (a
/// row is one sample in `samples`). A part that fails fails the row as a unit: `on_error` applies to the row
/// (raised, or under `skip` the row replaced by another row's whole mosaic, as any bad row is), the error naming
/// the part's file. Raw pixels are refused per row (the parts are decoded from encoded bytes).
fn mosaic_sample(
    job: &EpochJob,
    key: SampleKey,
    scratch: &mut WorkerScratch,
    file_buf: &mut Vec<u8>,
    dst: &mut RowWriter<'_>,
) -> std::result::Result<SampleTiming, (u64, ImageError)> {
    use crate::augment::views::ViewTargets;
    let ctx = &job.ctx;
    // A partial pack's cache counts the row's planned read once the row is made (skip.rs, `PlannedRead`), so
    // the parts are all read outside the plan (source/block_cache.rs: the window stays needed until then)
    let mut read_part = |j: u64, decode: &mut DecodePart<'_>| {
        let i = j as usize;
        let sample = read(job, i, false, file_buf)?;
        if sample.pixel_shape().is_some() {
            return Err(ImageError::new(
                ImageErrorKind::Unsupported,
                "Mosaic decodes its parts from encoded images; this source holds raw pixels".to_string(),
            ));
        }
        decode(sample.bytes(file_buf), ctx.dataset.declared_size(i))
    };
    // partners from the row's window when the source is read window by window (augment/mosaic.rs)
    let partners = Partners::of(ctx.dataset.len() as u64, job.plan.windows());
    ctx.pipeline.first().process_mosaic(scratch, key, partners, &mut read_part, dst.view_mut(0))
}

/// Read dataset sample `i` (one image, not a mosaic) and decode it into every view of `dst` — or hand its
/// encoded bytes to the GPU (`None` timing: the row's pixels are the GPU's to write) when `gpu` routes it there.
fn one_sample(
    job: &EpochJob,
    i: usize,
    key: SampleKey,
    scratch: &mut WorkerScratch,
    file_buf: &mut Vec<u8>,
    dst: &mut RowWriter<'_>,
    gpu: Option<GpuRow<'_>>,
) -> std::result::Result<Option<SampleTiming>, ImageError> {
    let ctx = &job.ctx;
    let sample = read(job, i, true, file_buf)?;
    if let Some(image) = sample.raw(file_buf) {
        return ctx.pipeline.process_raw(scratch, image, key, dst).map(Some);
    }
    let bytes = sample.bytes(file_buf);
    if let Some(g) = gpu
        && to_gpu(ctx, g, scratch, bytes, key)
    {
        return Ok(None);
    }
    ctx.pipeline.process(scratch, bytes, key, dst).map(Some)
}

/// Route one sample (gpu_decode/, "Routing"): a GPU-eligible file whose draw is below the share
/// becomes a [`GpuTask`] (its crop window and taps computed here by the CPU path's own geometry code) → true.
fn to_gpu(ctx: &WorkContext, g: GpuRow<'_>, scratch: &mut WorkerScratch, bytes: &[u8], key: SampleKey) -> bool {
    let within_limits = |w: u32, h: u32| u64::from(w) * u64::from(h) <= scratch.decode_limits().max_pixels;
    // A size that is not the declared one stays on the CPU path, whose header check makes it the sample's error.
    let declared = ctx.dataset.declared_size(key.index as usize);
    let info = match crate::gpu_decode::eligible(bytes) {
        // Beyond `max_pixels` the CPU path raises TooLarge (or skips): the same outcome either way.
        Ok(info)
            if within_limits(info.width, info.height) && declared.is_none_or(|d| d == (info.width, info.height)) =>
        {
            info
        }
        _ => {
            g.gpu.count_ineligible();
            return false;
        }
    };
    if !g.gpu.route(key.seed, key.epoch, key.index) {
        return false;
    }
    let plan = scratch.gpu_plan();
    if ctx.pipeline.first().prepare_gpu(info.width, info.height, key, plan).is_err() {
        return false; // not for the GPU after all (the loader checked the pipeline: an empty image)
    }
    let w = plan.window();
    g.gpu.submit(GpuTask {
        batch: g.batch,
        row: g.row,
        index: key.index,
        bytes: bytes.to_vec(),
        roi: crate::cuda::nvjpeg::Roi { x: w.x0, y: w.y0, w: w.x1 - w.x0, h: w.y1 - w.y0 },
        x: TaskTaps::from(plan.x()),
        y: TaskTaps::from(plan.y()),
        vertical_first: plan.vertical_first(),
        interpolate: info.subsampling.luma_factors() != Some((1, 1)),
    });
    true
}
