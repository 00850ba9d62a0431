//! external — samples made by code outside the core: a user's map-style dataset (`Loader(MyDataset())`, the
//! binding in `py/source.rs`). The core knows only how many samples there are; sample i's image and its label
//! exist once a worker has asked for them ([`Reader::read`]), on the worker's own thread, exactly when the plan
//! says (exactly once per sample per epoch, sharded, resumable, like every other store).
//!
//! Labels protocol: [`ExternalStore::read`] stores the label it got into `labels[i]` before returning, and the
//! worker that read sample i is the one that writes its batch row (worker/pool.rs `run_job`: `produce`, then
//! `Dataset::label` of the index it wrote), so the label it loads is the one its own read stored (program order,
//! one thread). A second reader of the same index (a skip-policy replacement candidate read by two workers)
//! stores the same value for a deterministic dataset; the packer hands a record from its producer thread to the
//! writer through a channel, which orders the store before the load. Relaxed atomics suffice for all three.

use super::{Dataset, ImageStore, ReadCtx, SampleBytes, fingerprint};
use crate::error::{ImageError, ImageErrorKind, Result as TrResult, TrdataError};
use crate::sync::{AtomicU64, Ordering};
use std::fmt;
use std::path::PathBuf;

/// What a [`Reader`] put in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExternalImage {
    /// An encoded image file (JPEG, PNG, …), decoded by the core as a file would be.
    Encoded,
    /// Raw uint8 pixels, row-major `height × width × channels` (channels 1 or 3), checked by the reader.
    Pixels {
        /// Rows.
        height: u32,
        /// Columns.
        width: u32,
        /// 1 (gray) or 3 (RGB).
        channels: u8,
    },
}

impl ExternalImage {
    /// The raw pixels of an `(h, w, c)` image as a reader found them, checked before anything is copied: each
    /// side 1..=65535 and 1 or 3 channels (the rules of `trdata.Arrays`), at most `max_bytes` in all.
    pub fn pixels(h: usize, w: usize, c: usize, max_bytes: u64) -> Result<Self, ImageError> {
        let side = |d: usize| (1..=65_535).contains(&d);
        if !side(h) || !side(w) || (c != 1 && c != 3) {
            return Err(ImageError::new(
                ImageErrorKind::Dataset,
                format!("an image array of shape ({h}, {w}, {c}) must have sides 1..=65535 and 1 or 3 channels"),
            ));
        }
        if (h * w * c) as u64 > max_bytes {
            return Err(ImageError::new(
                ImageErrorKind::TooLarge,
                format!("an image array of shape ({h}, {w}, {c}) is over the {max_bytes}-byte sample limit"),
            ));
        }
        // sides ≤ 65535 and 1 or 3 channels: the casts are exact
        Ok(ExternalImage::Pixels { height: h as u32, width: w as u32, channels: c as u8 })
    }
}

/// One sample as the external code gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExternalSample {
    /// What the buffer holds.
    pub image: ExternalImage,
    /// The sample's class index.
    pub label: i64,
}

/// Code that makes sample `i` on demand. Called from the loader's worker threads, concurrently for different
/// indices: an implementation takes whatever lock its language needs (the binding attaches to Python).
pub trait Reader: Send + Sync {
    /// Put sample `i`'s image into `buf` (cleared by the callee) and say what it is, for a row of `epoch` (the
    /// binding keys what else the read returned — extras — by it). An error is the sample's (named by the
    /// caller) and follows the loader's `on_error`.
    fn read(&self, i: usize, epoch: u64, buf: &mut Vec<u8>) -> Result<ExternalSample, ImageError>;

    /// What identifies the samples in a checkpoint ([`Dataset::identity`](super::Dataset::identity)) without
    /// reading them: the binding's is the Python dataset's class. Empty when nothing does.
    fn identity(&self) -> &str {
        ""
    }
}

/// N samples made by a [`Reader`], with the label each read returned (the protocol in the module docs).
pub struct ExternalStore {
    reader: Box<dyn Reader>,
    /// Per sample: the bits of the i64 label its last read returned (0 before any read).
    labels: Vec<AtomicU64>,
}

impl fmt::Debug for ExternalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ExternalStore({} samples)", self.labels.len())
    }
}

impl ExternalStore {
    /// A store of `len` samples read by `reader` (`len` checked by [`super::external`]).
    fn new(reader: Box<dyn Reader>, len: usize) -> Self {
        Self { reader, labels: (0..len).map(|_| AtomicU64::new(0)).collect() }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// The reader's [`Reader::identity`].
    pub fn identity(&self) -> &str {
        self.reader.identity()
    }

    /// True when there are none (never, for a store made by [`super::external`]).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Read sample `i` for a row of `epoch` into `buf`, keeping its label for [`Self::label`].
    pub fn read(&self, i: usize, epoch: u64, buf: &mut Vec<u8>) -> Result<ExternalImage, ImageError> {
        let sample = self.reader.read(i, epoch, buf)?;
        self.labels[i].store(sample.label as u64, Ordering::Relaxed);
        Ok(sample.image)
    }

    /// The label sample `i`'s last read returned.
    pub fn label(&self, i: usize) -> i64 {
        self.labels[i].load(Ordering::Relaxed) as i64
    }
}

impl ImageStore for ExternalStore {
    fn kind(&self) -> &'static str {
        "dataset"
    }

    fn len(&self) -> usize {
        self.labels.len()
    }

    fn sample_name(&self, i: usize) -> PathBuf {
        PathBuf::from(format!("<dataset>[{i}]"))
    }

    fn read<'s>(&'s self, i: usize, how: &ReadCtx<'_>, buf: &mut Vec<u8>) -> Result<SampleBytes<'s>, ImageError> {
        Ok(match ExternalStore::read(self, i, how.epoch, buf)? {
            ExternalImage::Encoded => SampleBytes::in_buffer(),
            ExternalImage::Pixels { height, width, channels } => {
                SampleBytes::in_buffer().as_pixels((height, width, channels))
            }
        })
    }

    fn identity(&self, _labels: &[i64]) -> String {
        fingerprint(self.kind(), |add| add(self.reader.identity().as_bytes()))
    }

    fn read_label(&self, i: usize) -> Option<i64> {
        Some(self.label(i))
    }

    fn labels_come_with_reads(&self) -> bool {
        true
    }
}

/// The `dataset` parameter's name (`trdata.DatasetSource(dataset)`; its rules: [`external`]).
const DATASET: &str = "dataset";

/// A dataset of `len` samples made on demand by `reader` (a Python map-style dataset): at least one sample and
/// fewer than 2^32, as every source.
pub fn external(reader: Box<dyn Reader>, len: usize) -> TrResult<Dataset> {
    if len == 0 || len > u32::MAX as usize {
        return Err(TrdataError::config(
            DATASET,
            format!("a dataset of {len} samples must have at least one and fewer than 2**32"),
        ));
    }
    Ok(Dataset::new(ExternalStore::new(reader, len), vec![0; len], Vec::new()))
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::source::{Dataset, external};

    /// Sample i: i×i gray pixels labelled -i, and an error at 3.
    struct Squares;

    impl Reader for Squares {
        fn read(&self, i: usize, _epoch: u64, buf: &mut Vec<u8>) -> Result<ExternalSample, ImageError> {
            if i == 3 {
                return Err(ImageError::new(ImageErrorKind::Dataset, "no 3"));
            }
            buf.clear();
            buf.resize(i * i, i as u8);
            let image = ExternalImage::Pixels { height: i as u32, width: i as u32, channels: 1 };
            Ok(ExternalSample { image, label: -(i as i64) })
        }
    }

    #[test]
    fn labels_come_with_each_read_and_errors_keep_none() {
        let ds: Dataset = external(Box::new(Squares), 5).unwrap();
        let store = ds.store_as::<ExternalStore>().expect("external");
        assert_eq!((ds.len(), ds.known_labels(), ds.natural_channels()), (5, None, 3));
        assert_eq!(ds.sample_name(4).to_str(), Some("<dataset>[4]"));
        let mut buf = vec![9; 100];
        assert_eq!(store.read(4, 0, &mut buf).unwrap(), ExternalImage::Pixels { height: 4, width: 4, channels: 1 });
        assert_eq!((buf.len(), ds.label(4), ds.label(2)), (16, -4, 0));
        assert_eq!(store.read(3, 0, &mut buf).unwrap_err().kind, ImageErrorKind::Dataset);
        assert_eq!(ds.label(3), 0);
    }

    #[test]
    fn pixel_images_are_checked_before_anything_is_copied() {
        let ok = ExternalImage::pixels(2, 3, 3, 18).unwrap();
        assert_eq!(ok, ExternalImage::Pixels { height: 2, width: 3, channels: 3 });
        for (h, w, c) in [(0, 3, 3), (2, 65_536, 1), (2, 3, 2), (2, 3, 4)] {
            assert_eq!(ExternalImage::pixels(h, w, c, u64::MAX).unwrap_err().kind, ImageErrorKind::Dataset);
        }
        assert_eq!(ExternalImage::pixels(2, 3, 3, 17).unwrap_err().kind, ImageErrorKind::TooLarge);
    }

    #[test]
    fn a_dataset_needs_one_to_2_pow_32_minus_1_samples() {
        for n in [0, 1 << 32] {
            match external(Box::new(Squares), n) {
                Err(TrdataError::Config { parameter, .. }) => assert_eq!(parameter, "dataset"),
                other => panic!("{other:?}"),
            }
        }
    }
}
