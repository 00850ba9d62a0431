//! source — where samples come from, the first stage of the pipeline (**source** → plan → worker → decode):
//! a list of (path, label) built once per loader, and the bytes of one sample read by a worker.
//! `image_folder` follows torchvision's ImageFolder rules, except that a directory reached by several (symlinked)
//! paths is entered once; `file_list` takes explicit lists; `read_sample` reads one regular file, bounded. Paths
//! and class names stay bytes (`PathBuf`/`OsString`) end to end: Linux file names need not be UTF-8, and the
//! Python side sees them as `os.fsdecode` strings.

mod image_folder;
mod read;

pub use image_folder::{IMAGE_EXTENSIONS, image_folder, image_folder_cancellable, is_image_file_name, python_name_cmp};
pub use read::{read_sample, undecoded_format};

use crate::error::{Result, TrdataError};
use std::ffi::OsString;
use std::path::PathBuf;

/// One sample: a file and its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleRef {
    /// Path of the encoded image.
    pub path: PathBuf,
    /// Class label.
    pub label: i64,
}

/// An indexed collection of samples; dataset index i is `samples[i]`.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// The samples in index order.
    pub samples: Vec<SampleRef>,
    /// Class names (ImageFolder: folder names, bytes as on disk) or empty (file lists).
    pub classes: Vec<OsString>,
}

impl Dataset {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// True when there are no samples.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// The `paths` parameter's name (its rules: [`check_file_list`]).
const PATHS: &str = "paths";
/// The `labels` parameter's name (its rule: one label per path, in [`check_file_list`]).
const LABELS: &str = "labels";

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
    let samples = paths.into_iter().zip(labels).map(|(path, label)| SampleRef { path, label }).collect();
    Ok(Dataset { samples, classes: Vec::new() })
}
