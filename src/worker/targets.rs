//! worker/targets — a row's targets made by the worker that makes its pixels (sample/mod.rs): read from the
//! loader's target store, moved by the row's [`TargetPlan`] (the geometry the pixels follow: the same seed,
//! epoch, index and image size), and set on the row beside its image.
//!
//! Made before the image is decoded, so that a record that cannot be read or moved fails the sample before its
//! pixels are made or handed to the GPU (whose write could not be taken back): the row then follows `on_error`
//! as a bad image does. The size the plan replays is the record's declared one, the size the decode checks the
//! image against (`source::check_declared_size`): an image of another size fails its decode, so a row's targets
//! never follow a geometry its pixels did not.
//!
//! The row's extras are read before its pixels too, unless the image's own read makes them (a Python dataset's
//! third item: taken after it) ([`row_extras`]); a Mosaic row's are its own sample's.

use super::{EpochJob, WorkContext};
use crate::augment::SampleKey;
use crate::augment::mosaic::Partners;
use crate::augment::targets::TargetPlan;
use crate::error::{ImageError, ImageErrorKind};
use crate::sample::{RowExtras, RowTargets, TargetStore, merge_mosaic, move_record};

fn plan_error(store: &dyn TargetStore, i: usize, message: String) -> ImageError {
    ImageError::new(ImageErrorKind::Target, format!("{}: {message}", store.name(i)))
}

/// Row `key.index`'s targets, when the loader has a target store; the failing sample's index with the error
/// otherwise (a Mosaic partner's record can fail its row).
pub(super) fn row_targets(job: &EpochJob, key: SampleKey) -> Result<Option<RowTargets>, (u64, ImageError)> {
    let ctx: &WorkContext = &job.ctx;
    let Some(store) = ctx.targets.as_deref() else { return Ok(None) };
    let pipeline = ctx.pipeline.first();
    let (program, channels) = (pipeline.program(), pipeline.channels().count());
    let i = key.index as usize;
    let Some(stage) = &program.mosaic else {
        let record = store.read(i).map_err(|e| (key.index, e))?;
        let boxes = ctx.dataset.boxes.as_ref().map(|t| t.of(i));
        let plan = TargetPlan::replay(program, key, record.size, channels, boxes)
            .map_err(|m| (key.index, plan_error(store, i, m)))?;
        return move_record(&plan, &record, &store.name(i)).map(Some).map_err(|e| (key.index, e));
    };
    let partners = Partners::of(ctx.dataset.len() as u64, job.plan.windows());
    let parts = stage.indices(&stage.draw(key, partners), key.index);
    let records = parts.iter().map(|&j| store.read(j as usize).map_err(|e| (j, e))).collect::<Result<Vec<_>, _>>()?;
    let sizes: Vec<(u32, u32)> = records.iter().map(|r| r.size).collect();
    let plan = TargetPlan::replay_mosaic(program, key, partners, &sizes, channels)
        .map_err(|m| (key.index, plan_error(store, i, m)))?;
    merge_mosaic(&plan, &records, &store.name(i)).map(Some).map_err(|e| (key.index, e))
}

/// Row `key.index`'s extras, when the loader has an extras store read at this point: before the pixels
/// (`after_pixels` false) or after them (sample/extras.rs `ExtrasStore::after_pixels`).
pub(super) fn row_extras(job: &EpochJob, key: SampleKey, after_pixels: bool) -> Result<Option<RowExtras>, ImageError> {
    match job.ctx.extras.as_deref() {
        Some(store) if store.after_pixels() == after_pixels => store.read(key.index as usize, key.epoch).map(Some),
        _ => Ok(None),
    }
}
