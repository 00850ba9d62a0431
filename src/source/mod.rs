//! source — where samples come from, the first stage of the pipeline (**source** → plan → decode → …): a
//! [`Dataset`] built once per loader (an [`ImageStore`] of images + one label each) and the bytes of one sample
//! read by a worker ([`Dataset::read`], the one read of every store: the worker's row, a Mosaic's partners and the
//! packer all call it).
//!
//! A store is one file behind the [`ImageStore`] trait: `files` (ImageFolder, FileList), `blobs` (encoded images
//! in memory: Bytes), `pixels` (raw pixels: Arrays), `spans` (members of tar shards: WebDataset), `packed` (packed
//! files: format, reader and block cache), `remote` (objects behind URLs) and `external` (samples made on demand
//! by code outside the core: a user's Python dataset). A new store is its own file implementing the trait, plus
//! its binding constructor (py/source.rs); nothing else matches on the kind of store.
//! `image_folder` follows torchvision's ImageFolder rules, except that a directory reached by several (symlinked)
//! paths is entered once; `files` takes explicit lists; `read_sample` reads one regular file, bounded. Paths
//! and class names stay bytes (`PathBuf`/`OsString`) end to end: Linux file names need not be UTF-8, and the
//! Python side sees them as `os.fsdecode` strings.

pub mod annotations;
mod blobs;
mod block_cache;
pub mod braces;
pub mod external;
mod files;
pub mod formats;
mod image_folder;
pub mod litdata;
pub mod mds;
pub mod packed;
pub mod packed_extras;
mod packed_json;
pub mod parquet;
mod pixels;
mod read;
pub mod records;
#[cfg(test)]
mod records_tests;
pub mod remote;
mod shard_index;
mod spans;
pub mod tfrecord;

pub use blobs::{Blobs, bytes};
pub use block_cache::{BlockBytes, BlockCache, BlockSchedule, CacheStats};
pub use external::{ExternalImage, ExternalSample, ExternalStore, Reader, external};
pub use files::{Files, check_file_list, file_list};
pub use image_folder::{IMAGE_EXTENSIONS, image_folder, image_folder_cancellable, is_image_file_name, python_name_cmp};
pub use packed::{PackedFile, PackedMode, PartialOptions, packed_dataset, packed_dataset_at};
pub use pixels::{PixelArray, arrays};
pub use read::{describe as describe_file_type, open_regular, read_sample, read_span, undecoded_format};
pub use records::{
    Catalogue, Columns, LabelColumn, Opener, RecordFiles, RecordFormat, Unit, UnitBuilder, Value, record_dataset,
};
pub use remote::{RemoteStore, object_files, object_folder, object_spans};
pub use spans::{Spans, spans};

use crate::error::{ImageError, ImageErrorKind};
use crate::sync::Arc;
use std::any::Any;
use std::ffi::OsString;
use std::path::PathBuf;

/// The `labels` parameter's name (its rule: one label per sample, checked by each store's constructor).
const LABELS: &str = "labels";
/// The `shards` parameter's name (WebDataset's; its rules: [`spans()`] and braces.rs).
const SHARDS: &str = "shards";

/// Samples at each end of the dataset that [`Dataset::identity`] looks at.
pub const IDENTITY_SAMPLES: usize = 4;

/// How a store's read is made ([`ImageStore::read`]).
pub struct ReadCtx<'a> {
    /// The epoch of the row the read is for (an external store keys what else its read returned by it).
    pub epoch: u64,
    /// The most bytes a sample may have (a larger file or object is refused before it is read whole).
    pub max_bytes: u64,
    /// The plan's read of this sample (true), or a read the plan did not schedule (a Mosaic's partner): a partial
    /// pack's block cache counts only the first kind (block_cache.rs).
    pub planned: bool,
    /// Whether the reader's epoch is over (a wait for a block ends with an error then).
    pub stopping: &'a dyn Fn() -> bool,
}

/// Bytes a store holds or fetched: a slice of its memory (an in-memory store, a full pack), a cached block kept
/// alive while it is used (a partial pack), or bytes read again after the copy at hand failed its CRC32C.
#[derive(Debug)]
pub enum StoreBytes<'a> {
    /// A slice of the store's memory.
    Slice(&'a [u8]),
    /// A partial pack's block and the record's range in it.
    Block(Arc<BlockBytes>, std::ops::Range<usize>),
    /// Bytes read for this sample alone.
    Owned(Vec<u8>),
}

impl std::ops::Deref for StoreBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            StoreBytes::Slice(s) => s,
            StoreBytes::Block(b, r) => &b.bytes()[r.clone()],
            StoreBytes::Owned(v) => v,
        }
    }
}

/// (height, width, channels) of raw uint8 pixels, row-major (channels 1 or 3, checked by the store).
pub type PixelShape = (u32, u32, u8);

/// One raw image: `height × width × channels` uint8 pixels, row-major and contiguous.
#[derive(Debug, Clone, Copy)]
pub struct RawImage<'a> {
    /// The pixels.
    pub pixels: &'a [u8],
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
    /// 1 (gray) or 3 (RGB).
    pub channels: u8,
}

/// What one read of a sample gave ([`Dataset::read`]): its bytes, held by the store or left in the reader's
/// buffer (files, objects, a Python dataset's output), and whether they are an encoded image or raw pixels.
/// The buffer is the caller's, not borrowed by this value, so a caller may still use it after a failed read.
#[derive(Debug)]
pub struct SampleBytes<'s> {
    /// The store's bytes; None: the reader's buffer holds them.
    held: Option<StoreBytes<'s>>,
    /// Raw pixels of this shape; None: an encoded image.
    pixels: Option<PixelShape>,
}

impl<'s> SampleBytes<'s> {
    /// Encoded bytes the store holds.
    pub fn held(bytes: StoreBytes<'s>) -> Self {
        Self { held: Some(bytes), pixels: None }
    }

    /// Encoded bytes left in the reader's buffer.
    pub fn in_buffer() -> Self {
        Self { held: None, pixels: None }
    }

    /// The same bytes as raw pixels of `shape`.
    pub fn as_pixels(self, shape: PixelShape) -> Self {
        Self { pixels: Some(shape), ..self }
    }

    /// The sample's bytes, given the reader's buffer the read was made with.
    pub fn bytes<'b>(&'b self, buf: &'b [u8]) -> &'b [u8] {
        self.held.as_deref().unwrap_or(buf)
    }

    /// The raw image, when the bytes are pixels (None: an encoded image to decode).
    pub fn raw<'b>(&'b self, buf: &'b [u8]) -> Option<RawImage<'b>> {
        let (height, width, channels) = self.pixels?;
        Some(RawImage { pixels: self.bytes(buf), height, width, channels })
    }

    /// The shape of raw pixels (None: an encoded image).
    pub fn pixel_shape(&self) -> Option<PixelShape> {
        self.pixels
    }
}

/// `Any` for every store, so a binding that knows a store's type may reach it ([`Dataset::store_as`]).
pub trait AsAny: Any + Send + Sync {
    /// This store as `Any`.
    fn as_any(&self) -> &dyn Any;
    /// This store as `Any`, mutably.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Send + Sync> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Where the samples' images live: one kind of store per file of this room (module docs). Called from every
/// worker thread at once, for any indices.
pub trait ImageStore: AsAny + std::fmt::Debug {
    /// The kind of store as checkpoints and pack metadata record it: "files" (an image folder or a file list,
    /// local or behind URLs), "spans" (WebDataset), "bytes", "arrays", "packed", "dataset".
    fn kind(&self) -> &'static str;

    /// Number of images.
    fn len(&self) -> usize;

    /// True when there are none (never, for a store made by its constructor).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How errors name sample `i`: its file, its member, `<memory>[i]`, …
    fn sample_name(&self, i: usize) -> PathBuf;

    /// Sample `i`'s bytes: held by the store, or read into `buf` (which the caller keeps between reads, so a
    /// worker reads without allocating once it has grown). An error is the sample's, under the loader's
    /// `on_error`.
    fn read<'s>(&'s self, i: usize, how: &ReadCtx<'_>, buf: &mut Vec<u8>) -> Result<SampleBytes<'s>, ImageError>;

    /// What [`Dataset::identity`] records of this store, given the dataset's `labels` (that method's docs say
    /// what for each store). [`name_identity`] and [`content_identity`] are the two common forms.
    fn identity(&self, labels: &[i64]) -> String;

    /// Sample `i`'s label when the store learns labels by reading (a Python dataset: the label its last read
    /// returned); None when the dataset's labels are known before any read.
    fn read_label(&self, _i: usize) -> Option<i64> {
        None
    }

    /// Whether labels come with each read (then [`Self::read_label`] is Some for every index).
    fn labels_come_with_reads(&self) -> bool {
        false
    }

    /// Channels of the images as the store holds them (see [`Dataset::natural_channels`]).
    fn natural_channels(&self) -> u8 {
        3
    }

    /// (height, width) of every image when the store says they share one size without reading one.
    fn uniform_size(&self) -> Option<(u32, u32)> {
        None
    }

    /// The counters of the store's storage reads ([`Dataset::io_stats`] names them); empty when it reads none.
    fn io_stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// The block structure the plan must follow (see [`Dataset::block_structure`]).
    fn block_structure(&self) -> Option<BlockStructure<'_>> {
        None
    }

    /// A partial pack's block cache.
    fn block_cache(&self) -> Option<&BlockCache> {
        None
    }

    /// Count the plan's read of sample `i` made with `planned: false` (a Mosaic row's own sample) or not made
    /// (a sample known bad under `skip`): a partial pack's cache counts it (block_cache.rs).
    fn count_planned_read(&self, _i: usize) {}

    /// Whether the store starts reads ahead of the worker ([`Self::read_ahead`]; objects behind URLs).
    fn reads_ahead(&self) -> bool {
        false
    }

    /// Start the reads of `indices` (this thread's next samples), each at most `max_bytes` (source/remote.rs).
    fn read_ahead(&self, _indices: &mut dyn Iterator<Item = usize>, _max_bytes: u64) {}

    /// Drop the reads this thread started and no longer needs (end of a worker's job).
    fn end_read_ahead(&self) {}
}

/// The first and last [`IDENTITY_SAMPLES`] indices of `n` samples, each once.
fn sampled(n: usize) -> impl Iterator<Item = usize> {
    let head = n.min(IDENTITY_SAMPLES);
    (0..head).chain(n.saturating_sub(IDENTITY_SAMPLES).max(head)..n)
}

/// "<kind> <crc>": the CRC32C of what `feed` adds, each part length-prefixed.
pub fn fingerprint(kind: &str, feed: impl FnOnce(&mut dyn FnMut(&[u8]))) -> String {
    let mut crc = 0u32;
    feed(&mut |bytes: &[u8]| {
        crc = crc32c::crc32c_append(crc, &(bytes.len() as u64).to_le_bytes());
        crc = crc32c::crc32c_append(crc, bytes);
    });
    format!("{kind} {crc:08x}")
}

/// The identity of a store of named samples (files, shard members, objects): the sampled samples' names without
/// their root (a file's class folder and name; a member's shard name, offset and size: the dataset may move) and
/// labels.
pub fn name_identity(store: &dyn ImageStore, labels: &[i64]) -> String {
    let keep = if store.kind() == "spans" { 1 } else { 2 };
    fingerprint(store.kind(), |add| {
        for i in sampled(store.len()) {
            let name = store.sample_name(i);
            let bytes = name.as_os_str().as_encoded_bytes();
            let cut = bytes.iter().enumerate().rev().filter(|(_, b)| **b == b'/').nth(keep - 1);
            add(&bytes[cut.map_or(0, |(k, _)| k + 1)..]);
            add(&labels[i].to_le_bytes());
        }
    })
}

/// The identity of a store held in memory: `head` (a shape), then the sampled samples' contents' CRCs and labels.
pub fn content_identity<'a>(
    kind: &str,
    head: &[u8],
    len: usize,
    content: impl Fn(usize) -> &'a [u8],
    labels: &[i64],
) -> String {
    fingerprint(kind, |add| {
        if !head.is_empty() {
            add(head);
        }
        for i in sampled(len) {
            add(&crc32c::crc32c(content(i)).to_le_bytes());
            add(&labels[i].to_le_bytes());
        }
    })
}

/// The block structure a source asks the plan to follow (partial packed files): block k holds records
/// `block_starts[k] .. block_starts[k + 1]`, and records are shuffled within windows of `window_blocks` blocks.
#[derive(Debug, Clone, Copy)]
pub struct BlockStructure<'a> {
    /// First record of each block, then N.
    pub block_starts: &'a [u32],
    /// Blocks shuffled together.
    pub window_blocks: u32,
}

/// An indexed collection of samples: dataset index i is `store`'s image i with label [`Dataset::label`]`(i)`.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The images.
    pub store: std::sync::Arc<dyn ImageStore>,
    /// One label per image, in index order, as the source knows them before any read (an external store's are
    /// zeros: its labels come with each read, see [`Dataset::label`]).
    pub labels: Vec<i64>,
    /// Class names (ImageFolder: folder names, bytes as on disk) or empty.
    pub classes: Vec<OsString>,
    /// Each image's boxes (a detection source): the ops whose draw depends on them (RandomIoUCrop) read them.
    pub boxes: Option<Arc<annotations::BoxTable>>,
    /// Each image's (width, height) as its source declares them (a detection or segmentation source: the sizes
    /// its annotations were made for, read when the source was made). The worker that decodes image i checks
    /// its true size against them ([`check_declared_size`]): targets are placed for the declared size.
    pub sizes: Option<Arc<[(u32, u32)]>>,
}

impl Dataset {
    /// A dataset of `store` with its labels and class names, and no annotations.
    pub fn new(store: impl ImageStore, labels: Vec<i64>, classes: Vec<OsString>) -> Self {
        Self { store: std::sync::Arc::new(store), labels, classes, boxes: None, sizes: None }
    }

    /// The store as its concrete type `T`, when it is one (a binding's view of the store it made).
    pub fn store_as<T: ImageStore>(&self) -> Option<&T> {
        (*self.store).as_any().downcast_ref()
    }

    /// The store as its concrete type `T`, mutably, when it is one and not shared (tests that edit a source).
    pub fn store_as_mut<T: ImageStore>(&mut self) -> Option<&mut T> {
        std::sync::Arc::get_mut(&mut self.store)?.as_any_mut().downcast_mut()
    }

    /// Sample `i`'s bytes (the one read of every store: [`ImageStore::read`]).
    pub fn read<'s>(&'s self, i: usize, how: &ReadCtx<'_>, buf: &mut Vec<u8>) -> Result<SampleBytes<'s>, ImageError> {
        self.store.read(i, how, buf)
    }

    /// The size (width, height) the source declares for image `i`, if it declares sizes.
    pub fn declared_size(&self, i: usize) -> Option<(u32, u32)> {
        self.sizes.as_ref().map(|s| s[i])
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when there are no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The label of sample `i`: the source's, or for an external store the one its last read returned.
    pub fn label(&self, i: usize) -> i64 {
        self.store.read_label(i).unwrap_or_else(|| self.labels[i])
    }

    /// The labels when the source knows them all before reading a sample (None for an external store).
    pub fn known_labels(&self) -> Option<&[i64]> {
        (!self.store.labels_come_with_reads()).then_some(&self.labels[..])
    }

    /// Channels of this dataset's images as the source holds them: 1 when every image is gray by construction
    /// (raw gray pixels: MNIST and its kin, and a pack of them), 3 otherwise (encoded images, which torchvision's
    /// ImageFolder converts to RGB whatever they hold). A loader's `channels=None` outputs this many
    /// (`config::default::channels`).
    pub fn natural_channels(&self) -> u8 {
        self.store.natural_channels()
    }

    /// How errors name sample `i`: its file, or `<memory>[i]` for an in-memory store.
    pub fn sample_name(&self, i: usize) -> PathBuf {
        self.store.sample_name(i)
    }

    /// The order the plan follows besides the samples, for checkpoints: "samples", or for a partial pack
    /// "blocks=B window=W" (a checkpoint saved over one block structure must not continue over another).
    pub fn order_fingerprint(&self) -> String {
        match self.block_structure() {
            None => "samples".to_string(),
            Some(b) => format!("blocks={} window={}", b.block_starts.len(), b.window_blocks),
        }
    }

    /// What a checkpoint records of the source it was taken over (`LoaderState::source`), so that a checkpoint is
    /// refused over another source of the same length: "<kind> <fingerprint>", the kind being the user's source
    /// ([`ImageStore::kind`]) and the fingerprint a CRC32C of, per store:
    /// - a packed file: the identity of the source it was packed from, stored in its metadata (so a checkpoint
    ///   moves between a source and its pack, and a pack of a pack keeps it); in a pack of a trdata that did not
    ///   store it, its index's CRC (every record's position, size, CRC and label). Either is the file's content,
    ///   wherever it lies: a checkpoint over `s3://…/train.trd` resumes over a local copy;
    /// - files and shard members: the first and last [`IDENTITY_SAMPLES`] samples' names without their root (a
    ///   file's class folder and name; a member's shard name, offset and size: the dataset may move) and labels
    ///   ([`name_identity`]);
    /// - bytes and arrays: those samples' contents' CRCs and labels (and the arrays' image shape:
    ///   [`content_identity`]);
    /// - a Python dataset: its class (`Reader::identity`); its samples are not read for this.
    ///
    /// Cheap (a few samples, or one number of the pack's header), and so a check against mistakes, not a proof:
    /// two sources that agree on these samples pass.
    pub fn identity(&self) -> String {
        self.store.identity(&self.labels)
    }

    /// The block cache of a partial pack (None for any other source).
    pub fn block_cache(&self) -> Option<&BlockCache> {
        self.store.block_cache()
    }

    /// The counters of the source's storage reads and of its block cache, as `Loader.stats()` and the source's
    /// `storage_stats` show them (the one home of these names): `storage_requests` (GETs or preads, retries
    /// included), `storage_bytes` (bytes delivered), `storage_retries`, `storage_failures` (reads failed for
    /// good); a pack adds `storage_refetches` (reads made again because their bytes failed the records'
    /// CRC32Cs: source/packed.rs); a partial pack adds `storage_wait_ns` (time readers waited for blocks not there yet),
    /// `storage_inflight_bytes` (fetches in flight now), `cache_hits`, `cache_misses` (fetches started by reads; with
    /// `cache_prefetched_blocks`: every block fetched), `cache_prefetched_blocks`, `cache_evictions` and `cache_bytes`
    /// (resident now), and with a disk cache its `disk_*` counters. Empty for a source that is not read from
    /// storage (in memory, local image files).
    pub fn io_stats(&self) -> Vec<(&'static str, u64)> {
        self.store.io_stats()
    }

    /// The block structure the plan must follow to read this source block by block (partial packed files);
    /// None when any order reads equally well.
    pub fn block_structure(&self) -> Option<BlockStructure<'_>> {
        self.store.block_structure()
    }
}

/// The storage counters every store read from storage shows ([`Dataset::io_stats`]).
pub fn storage_stats(s: &crate::storage::StorageStats) -> Vec<(&'static str, u64)> {
    vec![
        ("storage_requests", s.requests),
        ("storage_bytes", s.bytes),
        ("storage_retries", s.retries),
        ("storage_failures", s.failures),
    ]
}

/// A `Target` error when an image decodes at `got` (width, height) and its source declares another size: its
/// boxes, masks and maps were made for the declared one (a COCO file's `width`/`height`, an image replaced after
/// the source was made), so the sample cannot be trained on as it is.
pub fn check_declared_size(got: (u32, u32), declared: Option<(u32, u32)>) -> std::result::Result<(), ImageError> {
    match declared {
        Some(want) if want != got => Err(ImageError::new(
            ImageErrorKind::Target,
            format!(
                "the image is {}x{} but its source declares {}x{} (the size its annotations were made for): the \
                 annotation file's width/height are wrong, or the image was replaced after the source was made",
                got.0, got.1, want.0, want.1
            ),
        )),
        _ => Ok(()),
    }
}

/// The parameter a constructor's `ConfigError` names (the stores' tests).
#[cfg(test)]
pub(crate) fn config_parameter(r: crate::error::Result<Dataset>) -> String {
    match r {
        Err(crate::error::TrdataError::Config { parameter, .. }) => parameter,
        other => panic!("expected a ConfigError, got {other:?}"),
    }
}
