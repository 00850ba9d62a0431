//! source/files — encoded image files read by the workers on demand (`trdata.ImageFolder`, `trdata.FileList`):
//! sample i is the file `paths[i]`, read whole and bounded by [`read_sample`] (regular files only).

use super::{Dataset, ImageStore, LABELS, ReadCtx, SampleBytes, name_identity, read_sample};
use crate::error::{ImageError, Result, TrdataError};
use std::path::PathBuf;

/// Encoded image files, one per sample.
#[derive(Debug, Clone, Default)]
pub struct Files(pub Vec<PathBuf>);

impl ImageStore for Files {
    fn kind(&self) -> &'static str {
        "files"
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn sample_name(&self, i: usize) -> PathBuf {
        self.0[i].clone()
    }

    fn read<'s>(&'s self, i: usize, how: &ReadCtx<'_>, buf: &mut Vec<u8>) -> Result<SampleBytes<'s>, ImageError> {
        read_sample(&self.0[i], how.max_bytes, buf)?;
        Ok(SampleBytes::in_buffer())
    }

    fn identity(&self, labels: &[i64]) -> String {
        name_identity(self, labels)
    }
}

/// The `paths` parameter's name (its rules: [`check_file_list`]).
const PATHS: &str = "paths";

/// Check an explicit file list before any file is opened: at least one path and below 2^32 of them, each
/// non-empty and without NUL (which no OS path holds), and `num_labels` = one label per path. The one place
/// these rules are written: `trdata.FileList` calls it when made (through the binding), [`file_list`] again.
pub fn check_file_list(paths: &[PathBuf], num_labels: usize) -> Result<()> {
    if paths.is_empty() {
        return Err(TrdataError::config(PATHS, "[] must list at least one file"));
    }
    if paths.len() > u32::MAX as usize {
        return Err(TrdataError::config(PATHS, format!("{} paths must be fewer than 2**32", paths.len())));
    }
    if let Some((i, p)) = paths
        .iter()
        .enumerate()
        .find(|(_, p)| p.as_os_str().is_empty() || p.as_os_str().as_encoded_bytes().contains(&0))
    {
        return Err(TrdataError::config(
            PATHS,
            format!("{p:?} (element {i}) must be a non-empty path without NUL characters"),
        ));
    }
    if num_labels != paths.len() {
        return Err(TrdataError::config(
            LABELS,
            format!("{num_labels} labels must be one per path ({} paths)", paths.len()),
        ));
    }
    Ok(())
}

/// A dataset from explicit paths and labels (checked by [`check_file_list`]). Files are not opened here: a
/// missing file is reported (or skipped) when its sample is decoded, like any other bad input.
pub fn file_list(paths: Vec<PathBuf>, labels: Vec<i64>) -> Result<Dataset> {
    check_file_list(&paths, labels.len())?;
    Ok(Dataset::new(Files(paths), labels, Vec::new()))
}
