//! source/spans — byte spans of local files: the image members of tar shards (`trdata.WebDataset`). Sample i is
//! `len[i]` bytes at `offset[i]` of `files[file[i]]`, read with one bounded [`read_span`].

use super::{Dataset, ImageStore, ReadCtx, SHARDS, SampleBytes, name_identity, read_span};
use crate::error::{ImageError, Result, TrdataError};
use std::path::PathBuf;

/// Image `i` is `len[i]` bytes at `offset[i]` of `files[file[i]]`.
#[derive(Debug, Clone)]
pub struct Spans {
    /// The shard files.
    pub files: Vec<PathBuf>,
    /// Per image: index into `files`.
    pub file: Vec<u32>,
    /// Per image: byte offset of the member's data.
    pub offset: Vec<u64>,
    /// Per image: the member's size in bytes.
    pub len: Vec<u64>,
}

impl ImageStore for Spans {
    fn kind(&self) -> &'static str {
        "spans"
    }

    fn len(&self) -> usize {
        self.file.len()
    }

    fn sample_name(&self, i: usize) -> PathBuf {
        let mut name = self.files[self.file[i] as usize].clone().into_os_string();
        name.push(format!("@{}+{}", self.offset[i], self.len[i]));
        PathBuf::from(name)
    }

    fn read<'s>(&'s self, i: usize, how: &ReadCtx<'_>, buf: &mut Vec<u8>) -> Result<SampleBytes<'s>, ImageError> {
        read_span(&self.files[self.file[i] as usize], self.offset[i], self.len[i], how.max_bytes, buf)?;
        Ok(SampleBytes::in_buffer())
    }

    fn identity(&self, labels: &[i64]) -> String {
        name_identity(self, labels)
    }
}

/// A dataset of byte spans of files (`trdata.WebDataset`: tar members): one (file, offset, len) and one label per
/// image, every file index valid (whether a span lies inside its file is checked when read; an empty span is one
/// bad sample then, `ImageErrorKind::Empty` under the loader's `on_error`, as an empty file is).
pub fn spans(
    files: Vec<PathBuf>,
    file: Vec<u32>,
    offset: Vec<u64>,
    len: Vec<u64>,
    labels: Vec<i64>,
) -> Result<Dataset> {
    let n = labels.len();
    if n == 0 || n > u32::MAX as usize || file.len() != n || offset.len() != n || len.len() != n {
        return Err(TrdataError::config(
            SHARDS,
            format!("{n} samples must be at least one, fewer than 2**32, with one span each"),
        ));
    }
    if let Some(i) = (0..n).find(|&i| file[i] as usize >= files.len()) {
        return Err(TrdataError::config(SHARDS, format!("span {i} must name one of the {} files", files.len())));
    }
    Ok(Dataset::new(Spans { files, file, offset, len }, labels, Vec::new()))
}
