//! sample/extras — a sample's extra fields (captions, JSON, arrays), read by the worker that makes its row (before
//! its pixels, or after them where the image's own read makes them: `ExtrasStore::after_pixels`). A
//! store's `read(i, epoch)` is sample `i`'s extras as one opaque value of the host language ([`RowExtras`]):
//! the core carries it in the row's slot beside the targets and hands it to the consumer untouched; what it
//! holds is the binding's business (py/targets.rs: a dict of field name → value, read from the source's files,
//! shards or pack by the worker, decoded there). A read that fails is the sample's error under `on_error`.
//!
//! A record store (Parquet, MDS, LitData, TFRecord: source/records.rs) reads its extras natively: its rows are
//! an `ExtrasStore` here ([`RecordRows`]), each row's values a `NativeExtras` inside the same [`RowExtras`] (the
//! binding makes them a dict); the slot, the batch and the consumer's side need no other change.

use crate::error::ImageError;
use crate::source::records::RecordRows;

/// One row's extras, as the store made them: a value of the host language the core never looks into.
pub struct RowExtras(pub Box<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for RowExtras {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RowExtras(..)")
    }
}

/// A source's extras, one value per sample.
pub trait ExtrasStore: Send + Sync + std::fmt::Debug {
    /// Sample `i`'s extras as epoch `epoch`'s read of it made them (a Python dataset returns them with its image);
    /// an error names the file (or `file#record`) and the field.
    fn read(&self, i: usize, epoch: u64) -> Result<RowExtras, ImageError>;

    /// Whether the values are made by the image's own read (a Python dataset's third item), so the worker takes
    /// them after the pixels; such a store only hands over what the read kept and does not fail. Every other
    /// store is read before the pixels, as a target store is: a read that fails fails the sample before its
    /// pixels are made or handed to the GPU (whose write could not be taken back).
    fn after_pixels(&self) -> bool {
        false
    }
}

impl ExtrasStore for RecordRows {
    fn read(&self, i: usize, _epoch: u64) -> Result<RowExtras, ImageError> {
        RecordRows::read(self, i).map(|v| RowExtras(Box::new(v)))
    }
}
