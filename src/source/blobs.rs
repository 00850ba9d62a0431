//! source/blobs — encoded images held in memory (`trdata.Bytes`): sample i is `blobs[i]`, read in place.

use super::{Dataset, ImageStore, LABELS, ReadCtx, SampleBytes, StoreBytes, content_identity};
use crate::error::{ImageError, Result, TrdataError};
use std::path::PathBuf;

/// Encoded images in memory, one per sample.
#[derive(Debug, Clone)]
pub struct Blobs(pub Vec<Vec<u8>>);

impl ImageStore for Blobs {
    fn kind(&self) -> &'static str {
        "bytes"
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn sample_name(&self, i: usize) -> PathBuf {
        PathBuf::from(format!("<memory>[{i}]"))
    }

    fn read<'s>(&'s self, i: usize, _how: &ReadCtx<'_>, _buf: &mut Vec<u8>) -> Result<SampleBytes<'s>, ImageError> {
        Ok(SampleBytes::held(StoreBytes::Slice(&self.0[i])))
    }

    fn identity(&self, labels: &[i64]) -> String {
        content_identity(self.kind(), &[], self.0.len(), |i| &self.0[i], labels)
    }
}

/// The `blobs` parameter's name (its rules: [`bytes`]).
const BLOBS: &str = "blobs";

/// A dataset of encoded images held in memory (`trdata.Bytes`): one label per blob, at least one blob.
pub fn bytes(blobs: Vec<Vec<u8>>, labels: Vec<i64>) -> Result<Dataset> {
    if blobs.is_empty() || blobs.len() > u32::MAX as usize {
        return Err(TrdataError::config(
            BLOBS,
            format!("{} blobs must be at least one and fewer than 2**32", blobs.len()),
        ));
    }
    if labels.len() != blobs.len() {
        return Err(TrdataError::config(
            LABELS,
            format!("{} labels must be one per blob ({} blobs)", labels.len(), blobs.len()),
        ));
    }
    Ok(Dataset::new(Blobs(blobs), labels, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::source::config_parameter as param;

    #[test]
    fn blobs_need_one_label_each_and_at_least_one_blob() {
        let ok = bytes(vec![vec![1], vec![2, 3]], vec![0, 1]).unwrap();
        assert_eq!((ok.len(), ok.sample_name(0)), (2, PathBuf::from("<memory>[0]")));
        assert_eq!(param(bytes(vec![], vec![])), "blobs");
        assert_eq!(param(bytes(vec![vec![1]], vec![])), "labels");
    }
}
