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

/// A dataset from explicit paths and labels (same length, at least one sample). Files are not opened here:
/// a missing file is reported (or skipped) when its sample is decoded, like any other bad input.
pub fn file_list(paths: Vec<PathBuf>, labels: Vec<i64>) -> Result<Dataset> {
    if paths.len() != labels.len() {
        return Err(TrdataError::config(
            "labels",
            format!("{} labels for {} paths; they must have the same length", labels.len(), paths.len()),
        ));
    }
    if paths.is_empty() {
        return Err(TrdataError::config("paths", "the file list is empty"));
    }
    if paths.len() > u32::MAX as usize {
        return Err(TrdataError::config("paths", "more than 2^32 samples"));
    }
    let samples = paths.into_iter().zip(labels).map(|(path, label)| SampleRef { path, label }).collect();
    Ok(Dataset { samples, classes: Vec::new() })
}
