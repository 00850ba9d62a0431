//! source — where samples come from, the first stage of the pipeline (**source** → plan → decode → …): a
//! [`Dataset`] built once per loader (a [`Store`] of images + one label each) and the bytes of one sample read by
//! a worker. Stores: files (ImageFolder, FileList), encoded blobs in memory (Bytes), raw pixels (Arrays), spans
//! of tar shards (WebDataset), packed files (`packed`: format, reader and block cache) and samples made on demand
//! by code outside the core (`external`: a user's Python dataset).
//! `image_folder` follows torchvision's ImageFolder rules, except that a directory reached by several (symlinked)
//! paths is entered once; `file_list` takes explicit lists; `read_sample` reads one regular file, bounded. Paths
//! and class names stay bytes (`PathBuf`/`OsString`) end to end: Linux file names need not be UTF-8, and the
//! Python side sees them as `os.fsdecode` strings.

pub mod annotations;
mod block_cache;
pub mod braces;
pub mod external;
mod image_folder;
pub mod packed;
pub mod packed_extras;
mod packed_json;
mod read;
pub mod remote;

pub use block_cache::{BlockBytes, BlockCache, BlockSchedule, CacheStats};
pub use external::{ExternalImage, ExternalSample, ExternalStore, Reader};
pub use image_folder::{IMAGE_EXTENSIONS, image_folder, image_folder_cancellable, is_image_file_name, python_name_cmp};
pub use packed::{PackedFile, PackedMode, PartialOptions};
pub use read::{describe as describe_file_type, open_regular, read_sample, read_span, undecoded_format};
pub use remote::{RemoteStore, object_files, object_folder, object_spans};

use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use crate::storage::disk_cache::DiskCache;
use crate::storage::{Location, StorageOptions};
use crate::sync::Arc;
use std::ffi::OsString;
use std::path::PathBuf;

/// Samples at each end of the dataset that [`Dataset::identity`] looks at.
pub const IDENTITY_SAMPLES: usize = 4;

/// Where the samples' images live.
#[derive(Debug, Clone)]
pub enum Store {
    /// Encoded image files, read by the workers on demand (ImageFolder, FileList).
    Files(Vec<PathBuf>),
    /// Encoded images in memory (`trdata.Bytes`).
    Blobs(Vec<Vec<u8>>),
    /// Raw pixels in memory, decoded by nobody (`trdata.Arrays`).
    Pixels(PixelArray),
    /// Byte spans of files: the image members of tar shards (`trdata.WebDataset`).
    Spans(Spans),
    /// The records of a packed file (`trdata.Packed`), CRC-checked on every read.
    Packed(Arc<PackedFile>),
    /// Samples made on demand by code outside the core (a Python map-style dataset), labels known once read.
    External(Arc<ExternalStore>),
    /// Objects behind URLs, or byte ranges of them (ImageFolder/FileList/WebDataset over a bucket; remote.rs).
    Remote(Arc<RemoteStore>),
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

/// N images of `height × width × channels` uint8 pixels, row-major and contiguous (numpy's (N, H, W[, C])).
#[derive(Debug, Clone)]
pub struct PixelArray {
    /// All images, image i at `i * image_bytes()`.
    pub data: Vec<u8>,
    /// Rows per image.
    pub height: u32,
    /// Columns per image.
    pub width: u32,
    /// 1 (gray) or 3 (RGB).
    pub channels: u8,
}

impl PixelArray {
    /// Bytes of one image.
    pub fn image_bytes(&self) -> usize {
        self.height as usize * self.width as usize * usize::from(self.channels)
    }

    /// The pixels of image `i`.
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.image_bytes();
        &self.data[i * n..(i + 1) * n]
    }
}

/// An indexed collection of samples: dataset index i is `store`'s image i with label [`Dataset::label`]`(i)`.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The images.
    pub store: Store,
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
    pub fn new(store: Store, labels: Vec<i64>, classes: Vec<OsString>) -> Self {
        Self { store, labels, classes, boxes: None, sizes: None }
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
        match &self.store {
            Store::External(e) => e.label(i),
            _ => self.labels[i],
        }
    }

    /// The labels when the source knows them all before reading a sample (None for an external store).
    pub fn known_labels(&self) -> Option<&[i64]> {
        (!matches!(self.store, Store::External(_))).then_some(&self.labels[..])
    }

    /// Channels of this dataset's images as the source holds them: 1 when every image is gray by construction
    /// (raw gray pixels: MNIST and its kin), 3 otherwise (encoded images, which torchvision's ImageFolder converts
    /// to RGB whatever they hold). A loader's `channels=None` outputs this many (`config::default::channels`).
    pub fn natural_channels(&self) -> u8 {
        match &self.store {
            Store::Pixels(a) => a.channels,
            // a pack of gray pixel arrays (a packed MNIST) stays gray; encoded records are RGB like files
            Store::Packed(p) => {
                let gray_raw =
                    |r: &packed::IndexRow| r.meta.format == packed::RecordFormat::Raw && r.meta.channels == 1;
                if p.index().rows.iter().all(gray_raw) { 1 } else { 3 }
            }
            Store::Files(_) | Store::Blobs(_) | Store::Spans(_) | Store::External(_) | Store::Remote(_) => 3,
        }
    }

    /// How errors name sample `i`: its file, or `<memory>[i]` for an in-memory store.
    pub fn sample_name(&self, i: usize) -> PathBuf {
        match &self.store {
            Store::Files(paths) => paths[i].clone(),
            Store::Blobs(_) | Store::Pixels(_) => PathBuf::from(format!("<memory>[{i}]")),
            Store::External(_) => PathBuf::from(format!("<dataset>[{i}]")),
            Store::Spans(s) => {
                let mut name = s.files[s.file[i] as usize].clone().into_os_string();
                name.push(format!("@{}+{}", s.offset[i], s.len[i]));
                PathBuf::from(name)
            }
            Store::Remote(r) => r.sample_name(i),
            Store::Packed(p) => {
                let mut name = p.path().as_os_str().to_os_string();
                name.push(format!("#{i}"));
                PathBuf::from(name)
            }
        }
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
    /// ("files" for an image folder or file list, local or behind URLs alike; "spans" for WebDataset; "bytes",
    /// "arrays", "packed", "dataset": `pack::source_kind`'s words) and the fingerprint a CRC32C of, per store:
    /// - a packed file: the identity of the source it was packed from, stored in its metadata (so a checkpoint
    ///   moves between a source and its pack, and a pack of a pack keeps it); in a pack of a trdata that did not
    ///   store it, its index's CRC (every record's position, size, CRC and label). Either is the file's content,
    ///   wherever it lies: a checkpoint over `s3://…/train.trd` resumes over a local copy;
    /// - files and shard members: the first and last [`IDENTITY_SAMPLES`] samples' names without their root (a
    ///   file's class folder and name; a member's shard name, offset and size: the dataset may move) and labels;
    /// - bytes and arrays: those samples' contents' CRCs and labels (and the arrays' image shape);
    /// - a Python dataset: its class (`Reader::identity`); its samples are not read for this.
    ///
    /// Cheap (a few samples, or one number of the pack's header), and so a check against mistakes, not a proof:
    /// two sources that agree on these samples pass.
    pub fn identity(&self) -> String {
        let n = self.len();
        let head = n.min(IDENTITY_SAMPLES);
        let sampled = (0..head).chain(n.saturating_sub(IDENTITY_SAMPLES).max(head)..n);
        let mut crc = 0u32;
        let mut add = |bytes: &[u8]| {
            crc = crc32c::crc32c_append(crc, &(bytes.len() as u64).to_le_bytes());
            crc = crc32c::crc32c_append(crc, bytes);
        };
        let kind = match &self.store {
            Store::Packed(p) => {
                let stored = &p.index().meta.options.identity;
                if !stored.is_empty() {
                    return stored.clone(); // its source's: a checkpoint moves between a source and its pack
                }
                add(&p.index().header.index_crc.to_le_bytes());
                "packed"
            }
            Store::External(e) => {
                add(e.identity().as_bytes());
                "dataset"
            }
            Store::Blobs(blobs) => {
                for i in sampled {
                    add(&crc32c::crc32c(&blobs[i]).to_le_bytes());
                    add(&self.labels[i].to_le_bytes());
                }
                "bytes"
            }
            Store::Pixels(a) => {
                add(&[a.height.to_le_bytes(), a.width.to_le_bytes(), u32::from(a.channels).to_le_bytes()].concat());
                for i in sampled {
                    add(&crc32c::crc32c(a.image(i)).to_le_bytes());
                    add(&self.labels[i].to_le_bytes());
                }
                "arrays"
            }
            Store::Files(_) | Store::Spans(_) | Store::Remote(_) => {
                let spans = matches!(&self.store, Store::Spans(_))
                    || matches!(&self.store, Store::Remote(r) if r.kind() == "spans");
                // A file's class folder and name; a member's shard name (with its offset and size).
                let keep = if spans { 1 } else { 2 };
                for i in sampled {
                    let name = self.sample_name(i);
                    let bytes = name.as_os_str().as_encoded_bytes();
                    let cut = bytes.iter().enumerate().rev().filter(|(_, b)| **b == b'/').nth(keep - 1);
                    add(&bytes[cut.map_or(0, |(k, _)| k + 1)..]);
                    add(&self.labels[i].to_le_bytes());
                }
                if spans { "spans" } else { "files" }
            }
        };
        format!("{kind} {crc:08x}")
    }

    /// The block cache of a partial pack (None for any other source).
    pub fn block_cache(&self) -> Option<&BlockCache> {
        match &self.store {
            Store::Packed(p) => p.cache(),
            _ => None,
        }
    }

    /// The counters of the source's storage reads and of its block cache, as `Loader.stats()` and the source's
    /// `storage_stats` show them (the one home of these names): `storage_requests` (GETs or preads, retries
    /// included), `storage_bytes` (bytes delivered), `storage_retries`, `storage_failures` (reads failed for
    /// good); a pack adds `storage_refetches` (reads made again because their bytes failed the records'
    /// CRC32Cs: source/packed.rs); a partial pack adds `storage_wait_ns` (time readers waited for blocks not there yet),
    /// `storage_inflight_bytes` (fetches in flight now), `cache_hits`, `cache_misses` (fetches started by reads; with
    /// `cache_prefetched_blocks`: every block fetched), `cache_prefetched_blocks`, `cache_evictions` and `cache_bytes` (resident now). Empty for a source
    /// that is not read from storage (in memory, local image files).
    pub fn io_stats(&self) -> Vec<(&'static str, u64)> {
        let s = match &self.store {
            Store::Packed(p) => p.reader().stats(),
            Store::Remote(r) => r.stats(),
            _ => return Vec::new(),
        };
        let mut out = vec![
            ("storage_requests", s.requests),
            ("storage_bytes", s.bytes),
            ("storage_retries", s.retries),
            ("storage_failures", s.failures),
        ];
        if let Store::Packed(_) = &self.store {
            out.push(("storage_refetches", s.refetches));
        }
        if let Some(c) = self.block_cache().map(BlockCache::stats) {
            out.extend([
                ("storage_wait_ns", c.wait_ns),
                ("storage_inflight_bytes", c.inflight_bytes),
                ("cache_hits", c.hits),
                ("cache_misses", c.misses),
                ("cache_prefetched_blocks", c.prefetched),
                ("cache_evictions", c.evictions),
                ("cache_bytes", c.resident_bytes),
            ]);
        }
        if let Store::Packed(p) = &self.store
            && let Some(d) = p.disk_cache().map(DiskCache::stats)
        {
            out.extend([
                ("disk_hits", d.disk_hits),
                ("disk_misses", d.disk_misses),
                ("disk_admitted_bytes", d.disk_admitted_bytes),
                ("disk_rejected", d.disk_rejected),
                ("disk_corrupt_removed", d.disk_corrupt_removed),
                ("disk_errors", d.disk_errors),
                ("disk_leftovers_removed", d.disk_leftovers_removed),
            ]);
        }
        out
    }

    /// The block structure the plan must follow to read this source block by block (partial packed files);
    /// None when any order reads equally well.
    pub fn block_structure(&self) -> Option<BlockStructure<'_>> {
        match &self.store {
            Store::Packed(p) if p.mode() == PackedMode::Partial => {
                Some(BlockStructure { block_starts: p.block_starts(), window_blocks: p.window_blocks() })
            }
            _ => None,
        }
    }
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

/// A dataset of the packed file `path` (`trdata.Packed`; [`packed_dataset_at`] for a URL), opened in `mode` (see
/// [`packed`] for the format and the modes; `partial` as the user gave it, None = default). The header and index
/// are checked here: a foreign, truncated or damaged file or object is a `SourceError` naming it.
pub fn packed_dataset(path: &std::path::Path, mode: PackedMode, partial: PartialOptions) -> Result<Dataset> {
    packed_dataset_at(&Location::local(path), &StorageOptions::default(), mode, partial, None, None)
}

/// [`packed_dataset`] of a local path or a URL (storage/): `options` are the user's `storage_options`;
/// `cache_dir` and `cache_disk_bytes` the disk cache's (storage/disk_cache.rs; partial mode only), checked before
/// the file is opened.
pub fn packed_dataset_at(
    location: &Location,
    options: &StorageOptions,
    mode: PackedMode,
    partial: PartialOptions,
    cache_dir: Option<&std::path::Path>,
    cache_disk_bytes: Option<i128>,
) -> Result<Dataset> {
    let disk = DiskCache::from_params(cache_dir, cache_disk_bytes, mode == PackedMode::Partial)?;
    let file = PackedFile::open_with_disk(location, options, mode, partial, disk)?;
    let labels = file.index().rows.iter().map(|r| r.label).collect();
    let classes = file.index().meta.classes.clone();
    Ok(Dataset::new(Store::Packed(Arc::new(file)), labels, classes))
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
    Ok(Dataset::new(Store::Files(paths), labels, Vec::new()))
}

/// The `dataset` parameter's name (`trdata.DatasetSource(dataset)`; its rules: [`external`]).
const DATASET: &str = "dataset";

/// A dataset of `len` samples made on demand by `reader` (a Python map-style dataset): at least one sample and
/// fewer than 2^32, as every source.
pub fn external(reader: Box<dyn Reader>, len: usize) -> Result<Dataset> {
    if len == 0 || len > u32::MAX as usize {
        return Err(TrdataError::config(
            DATASET,
            format!("a dataset of {len} samples must have at least one and fewer than 2**32"),
        ));
    }
    let store = ExternalStore::new(reader, len);
    Ok(Dataset::new(Store::External(Arc::new(store)), vec![0; len], Vec::new()))
}

/// `blobs` / `images` / `labels` names of the in-memory sources (their rules: [`bytes`], [`arrays`]).
const BLOBS: &str = "blobs";
const IMAGES: &str = "images";
const SHARDS: &str = "shards";

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
    Ok(Dataset::new(Store::Blobs(blobs), labels, Vec::new()))
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
    Ok(Dataset::new(Store::Spans(Spans { files, file, offset, len }), labels, Vec::new()))
}

/// A dataset of raw uint8 pixels (`trdata.Arrays`): `data` holds `count` images of `height × width × channels`
/// (channels 1 or 3), checked against `data.len()` before anything is kept; one label per image.
pub fn arrays(
    data: Vec<u8>,
    count: usize,
    height: u32,
    width: u32,
    channels: usize,
    labels: Vec<i64>,
) -> Result<Dataset> {
    if count == 0 || count > u32::MAX as usize {
        return Err(TrdataError::config(IMAGES, format!("{count} images must be at least one and fewer than 2**32")));
    }
    if height == 0 || width == 0 || height > 65_535 || width > 65_535 {
        return Err(TrdataError::config(IMAGES, format!("{height}×{width} images must be 1..=65535 on each side")));
    }
    if channels != 1 && channels != 3 {
        return Err(TrdataError::config(IMAGES, format!("{channels} channels must be 1 (gray) or 3 (RGB)")));
    }
    let expected = (height as usize).checked_mul(width as usize).and_then(|p| p.checked_mul(channels));
    if expected.and_then(|b| b.checked_mul(count)) != Some(data.len()) {
        return Err(TrdataError::config(
            IMAGES,
            format!("{} bytes must be {count} × {height} × {width} × {channels}", data.len()),
        ));
    }
    if labels.len() != count {
        return Err(TrdataError::config(
            LABELS,
            format!("{} labels must be one per image ({count} images)", labels.len()),
        ));
    }
    let channels = channels as u8; // 1 or 3, checked above
    Ok(Dataset::new(Store::Pixels(PixelArray { data, height, width, channels }), labels, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TrdataError;

    fn param(r: Result<Dataset>) -> String {
        match r {
            Err(TrdataError::Config { parameter, .. }) => parameter,
            other => panic!("expected a ConfigError, got {other:?}"),
        }
    }

    #[test]
    fn arrays_check_every_size_against_the_data_before_keeping_it() {
        let ok = arrays(vec![7; 2 * 3 * 4 * 3], 2, 3, 4, 3, vec![5, 6]).unwrap();
        let Store::Pixels(a) = &ok.store else { panic!("pixels") };
        assert_eq!((a.image_bytes(), a.image(1).len(), ok.len()), (36, 36, 2));
        assert_eq!(ok.sample_name(1), PathBuf::from("<memory>[1]"));
        // sizes that do not match the data, overflow, or are out of range: never trusted
        assert_eq!(param(arrays(vec![0; 10], 2, 3, 4, 3, vec![0, 0])), "images");
        assert_eq!(param(arrays(vec![0; 10], usize::MAX, u32::MAX, u32::MAX, 3, vec![])), "images");
        assert_eq!(param(arrays(vec![0; 24], 2, 3, 4, 2, vec![0, 0])), "images");
        assert_eq!(param(arrays(vec![], 0, 3, 4, 1, vec![])), "images");
        assert_eq!(param(arrays(vec![0; 70_000], 1, 70_000, 1, 1, vec![0])), "images");
        assert_eq!(param(arrays(vec![0; 12], 1, 3, 4, 1, vec![0, 1])), "labels");
    }

    #[test]
    fn blobs_need_one_label_each_and_at_least_one_blob() {
        let ok = bytes(vec![vec![1], vec![2, 3]], vec![0, 1]).unwrap();
        assert_eq!((ok.len(), ok.sample_name(0)), (2, PathBuf::from("<memory>[0]")));
        assert_eq!(param(bytes(vec![], vec![])), "blobs");
        assert_eq!(param(bytes(vec![vec![1]], vec![])), "labels");
    }
}
