//! pack — tooling beside the data path (like `synthetic`): writes any dataset into one packed file
//! (source/packed.rs holds the byte layout and the reader) and verifies packed files. Nothing on the training
//! path depends on it; `trdata.pack(...)`, `trdata.Packed.verify` and the CLI call it through `py/pack.rs`.
//!
//! ```text
//! Dataset ─► (`workers` threads) read source bytes ─► [re-encode: decode ─► antialiased resize ─► tj3 JPEG 4:2:0
//!            at quality Q] ─► header fields ─► reorder buffer (≤ IN_FLIGHT_BYTES) ─► in order ─► PackWriter ─►
//!            <dst>.tmp.<pid>.<random> ─► rename
//! ```
//!
//! **Records.** Without re-encoding a record is the source's bytes, unchanged, in the source's order, so a
//! reproducible loader over the pack yields byte-identical batches to one over the source (raw pixels of
//! `Arrays` are stored raw). Bytes whose header cannot be read (a corrupt file in an ImageFolder) are still
//! stored, flagged and reported as warnings: the loader then fails on them exactly as on the source file. A file
//! that cannot be read at all (missing, unreadable, too large) fails the pack, naming it. With re-encoding
//! (`short_side`, `max_side` or `quality` given) every image is decoded to RGB (Pillow-exact decoders), resized
//! only when larger — short side to `short_side`, or long side to `max_side`, the other side by torchvision's
//! `Resize` rule (`int(size · long / short)`) — with the loader's resampler (Pillow's antialiased bilinear,
//! bit-exact at full decode scale: DCT scaling is off), then encoded as baseline 4:2:0 JPEG at `quality`
//! (default 90). An image that does not decode fails the pack, naming it.
//!
//! **Parallel, in order, bounded.** Records are produced by `workers` threads, each with its own decoder,
//! resampler scratch and encoder (reused, no allocation per record in steady state), and written in index order by
//! the calling thread: the file does not depend on the thread count. Finished records wait in a reorder buffer
//! bounded in bytes ([`IN_FLIGHT_BYTES`]): memory is at most that plus one record per thread, whatever the
//! records' sizes (protocol at [`produce_in_order`]).
//!
//! **Destination.** Checked before any work ([`check_destination`]): it must name a file in an existing directory
//! and be absent or a regular file. A directory, a device node, a FIFO or a socket at `dst` is refused — the
//! rename would replace it (`trdata pack SRC /dev/null` as root would replace the system's `/dev/null`). Class
//! names must be distinct and every label one of them (`source::packed::check_classes`, also checked on open).
//!
//! **Atomic.** Everything is written to a temporary sibling `<dst>.tmp.<pid>.<random>` (dst's name cut to fit
//! NAME_MAX), created with `O_EXCL`
//! (two packs to one dst — threads of a process, or processes sharing a PID in different PID namespaces — never
//! share one) and `flock`ed for the writer's lifetime; the header (with the magic) last, then fsync, `rename(2)`
//! onto dst — only if the temporary path still names this writer's file — and fsync of the directory. Two packs
//! to one dst both succeed and dst is whole: the one that renamed last. Any error, a cancel or a panic removes the
//! temp file (a drop guard); a killed process leaves only the temp file — never a file at dst, and never one with a
//! header — and a later pack to the same dst removes temp files that are unlocked and older than a minute
//! ([`remove_stale_temps`]): a PID says nothing across PID namespaces, a lock does.

use crate::augment::{DType, DctScaling, Layout, OutputSpec, SampleKey, SamplePipeline, TransformSpec, WorkerScratch};
use crate::decode::{ColorSpace, DecodeLimits, Decoder, ImageFormat, ImageInfo, Subsampling};
use crate::error::{ImageError, ImageErrorKind, Result, SampleError, TrdataError};
use crate::param::IntParam;
use crate::plan::claim::WORKERS;
use crate::source::packed::{
    BLOCK_BYTES, DEFAULT_BLOCK_BYTES, FLAG_CMYK, FLAG_HIGH_PRECISION, FLAG_LOSSLESS, FLAG_PROGRESSIVE, FLAG_UNREADABLE,
    PackMeta, PackOptions, PackWriter, PackedIndex, RecordFormat, RecordMeta, check_classes,
};
use crate::source::packed_extras::{ExtraKind, RESERVED_PREFIX};
use crate::source::{Dataset, ReadCtx, SampleBytes, check_declared_size, describe_file_type};
use crate::synthetic::encode::JpegEncoder;
use rayon::prelude::*;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::BufWriter;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// `short_side`: the short side of re-encoded images (when larger).
pub const SHORT_SIDE: IntParam = IntParam::new("short_side", 1, 65_535);
/// `max_side`: the long side of re-encoded images (when larger).
pub const MAX_SIDE: IntParam = IntParam::new("max_side", 1, 65_535);
/// `quality`: JPEG quality of re-encoded images.
pub const QUALITY: IntParam = IntParam::new("quality", 1, 100);
/// Quality of re-encoded images when resizing without a quality.
pub const DEFAULT_QUALITY: u8 = 90;
/// Largest source file read (as the loader's `MAX_FILE_BYTES`).
const MAX_SOURCE_BYTES: u64 = crate::source::packed::MAX_RECORD_BYTES;

/// How to pack, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackConfig {
    /// Re-encode with the short side resized to this (when larger).
    pub short_side: Option<u32>,
    /// Re-encode with the long side resized to this (when larger).
    pub max_side: Option<u32>,
    /// Re-encode at this quality (`Some` whenever re-encoding).
    pub quality: Option<u8>,
    /// Threads producing records.
    pub workers: usize,
    /// Target block size.
    pub block_bytes: u64,
    /// Class names stored in the file.
    pub classes: Vec<OsString>,
    /// The source's annotations ride along as `target.*` extras (a detection source): no resize, and only then
    /// may extras use the reserved prefix ([`RESERVED_PREFIX`]).
    pub targets: bool,
}

impl PackConfig {
    /// Check the user's values (as Python ints, None = default): at most one of `short_side`/`max_side`; any of
    /// the three turns re-encoding on, with quality 90 unless given. Workers default to the usable CPUs.
    pub fn new(
        short_side: Option<i128>,
        max_side: Option<i128>,
        quality: Option<i128>,
        workers: Option<i128>,
        block_bytes: Option<i128>,
        classes: Vec<OsString>,
    ) -> Result<Self> {
        let short_side = short_side.map(|v| SHORT_SIDE.check::<u32>(v)).transpose()?;
        let max_side = max_side.map(|v| MAX_SIDE.check::<u32>(v)).transpose()?;
        if let (Some(s), Some(m)) = (short_side, max_side) {
            return Err(TrdataError::config(
                MAX_SIDE.name,
                format!("{m} must be None when short_side={s} is given: images are resized by one side"),
            ));
        }
        let quality = quality.map(|v| QUALITY.check::<u8>(v)).transpose()?;
        let quality = quality.or((short_side.is_some() || max_side.is_some()).then_some(DEFAULT_QUALITY));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as i128;
        let workers = WORKERS.check::<usize>(workers.unwrap_or(cpus.min(WORKERS.max)))?;
        let block_bytes = BLOCK_BYTES.check::<u64>(block_bytes.unwrap_or(i128::from(DEFAULT_BLOCK_BYTES)))?;
        Ok(Self { short_side, max_side, quality, workers, block_bytes, classes, targets: false })
    }

    /// The same, for a source whose annotations are packed with it (`target.*` extras, in the pixels of its
    /// images): a resize would leave them behind, so `short_side`/`max_side` are refused.
    pub fn with_targets(mut self, targets: bool) -> Result<Self> {
        if targets
            && let Some((p, v)) = self.short_side.map(|v| (SHORT_SIDE, v)).or(self.max_side.map(|v| (MAX_SIDE, v)))
        {
            return Err(TrdataError::config(
                p.name,
                format!(
                    "{v}: a detection source's annotations are in the pixels of its images, which a resize would move; \
                     pack it without resizing (only a quality)"
                ),
            ));
        }
        self.targets = targets;
        Ok(self)
    }

    /// Whether records are decoded and re-encoded.
    pub fn reencodes(&self) -> bool {
        self.quality.is_some()
    }

    /// The size of an image of `w × h` after the resize rule (only ever smaller; never 0).
    pub fn target_size(&self, w: u32, h: u32) -> (u32, u32) {
        let (short, long) = (w.min(h), w.max(h));
        let (new_short, new_long) = match (self.short_side, self.max_side) {
            (Some(n), _) if short > n => (n, (u64::from(n) * u64::from(long) / u64::from(short)) as u32),
            (None, Some(m)) if long > m => ((u64::from(m) * u64::from(short) / u64::from(long)).max(1) as u32, m),
            _ => return (w, h),
        };
        if w <= h { (new_short, new_long) } else { (new_long, new_short) }
    }
}

/// What a pack did.
#[derive(Debug, Clone, PartialEq)]
pub struct PackSummary {
    /// Records written.
    pub records: u64,
    /// Bytes read from the source.
    pub bytes_in: u64,
    /// Size of the packed file.
    pub bytes_out: u64,
    /// Wall time.
    pub seconds: f64,
    /// (record, message) of records stored although their header could not be read.
    pub warnings: Vec<(u64, String)>,
    /// The most bytes of finished records held at once waiting to be written (≤ the in-flight budget plus one
    /// record per thread).
    pub peak_buffered_bytes: u64,
}

/// One record ready to be written.
struct Produced {
    bytes: Vec<u8>,
    meta: RecordMeta,
    bytes_in: u64,
    warning: Option<String>,
}

/// Per-thread state of the producers: decoders, resampler scratch and pipelines by output size, the encoder.
struct Producer {
    header: Decoder,
    decoder: Decoder,
    scratch: WorkerScratch,
    pipelines: HashMap<(u32, u32), SamplePipeline>,
    encoder: JpegEncoder,
    buf: Vec<u8>,
    rgb: Vec<u8>,
}

impl Producer {
    fn new() -> Result<Self> {
        // Headers are only read (no pixels): no pixel budget, so a huge but valid image keeps its size fields.
        let header = Decoder::with_limits(DecodeLimits { max_pixels: u64::MAX, ..DecodeLimits::default() })?;
        let encoder =
            JpegEncoder::new().map_err(|e| TrdataError::Worker(format!("cannot create a JPEG encoder: {e}")))?;
        Ok(Self {
            header,
            decoder: Decoder::new()?,
            scratch: WorkerScratch::new()?,
            pipelines: HashMap::new(),
            encoder,
            buf: Vec::new(),
            rgb: Vec::new(),
        })
    }

    /// Pillow's `resize((w, h), BILINEAR)` as a loader pipeline: uint8 HWC, full-scale decode.
    fn pipeline(pipelines: &mut HashMap<(u32, u32), SamplePipeline>, w: u32, h: u32) -> Result<&SamplePipeline> {
        if !pipelines.contains_key(&(w, h)) {
            if pipelines.len() > 256 {
                pipelines.clear(); // bounded: ImageNet has a few hundred distinct sizes
            }
            let spec = OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, normalize: None, pad_to: None };
            let p = SamplePipeline::new(vec![TransformSpec::ResizeExact { height: h, width: w }], spec)?
                .with_dct_scaling(DctScaling::MinRatio(1e9))?; // never DCT-scale: bit-exact with Pillow
            pipelines.insert((w, h), p);
        }
        Ok(&pipelines[&(w, h)])
    }

    fn produce(&mut self, ds: &Dataset, i: usize, cfg: &PackConfig) -> std::result::Result<Produced, ImageError> {
        // The source bytes (or raw pixels) of record i: the store's one read.
        let how = ReadCtx { epoch: 0, max_bytes: MAX_SOURCE_BYTES, planned: true, stopping: &|| false };
        let mut warning = None;
        self.buf.clear(); // non-empty after a failed read: this read's bytes
        let sample = match ds.read(i, &how, &mut self.buf) {
            Ok(sample) => sample,
            // A recognised format trdata does not decode (AVIF…): kept, failing at load time as the file did.
            Err(e) if e.kind == ImageErrorKind::Unsupported && !self.buf.is_empty() => {
                warning = Some(e.to_string());
                SampleBytes::in_buffer()
            }
            Err(e) => return Err(e),
        };
        let bytes = sample.bytes(&self.buf);
        let raw = sample.pixel_shape().map(|(h, w, c)| (w, h, c));
        let bytes_in = bytes.len() as u64;
        if bytes.is_empty() {
            return Err(ImageError::new(ImageErrorKind::Empty, "file is empty (0 bytes): nothing to pack"));
        }
        // the targets a pack stores were made for the size the source declares: an image of another size is
        // this record's error, as it is the loader's (source::check_declared_size)
        let declared = ds.declared_size(i);
        if !cfg.reencodes() {
            let meta = match raw {
                Some((w, h, c)) => {
                    check_declared_size((w, h), declared)?;
                    RecordMeta::raw(h as u16, w as u16, c)
                }
                None => match self.header.read_header(bytes) {
                    Ok(info) => {
                        check_declared_size((info.width, info.height), declared)?;
                        meta_of(&info)
                    }
                    Err(e) => {
                        warning.get_or_insert_with(|| e.to_string());
                        RecordMeta {
                            width: 0,
                            height: 0,
                            format: RecordFormat::Unknown,
                            subsampling: 0,
                            flags: FLAG_UNREADABLE,
                            channels: 0,
                        }
                    }
                },
            };
            return Ok(Produced { bytes: bytes.to_vec(), meta, bytes_in, warning });
        }
        // Re-encode: RGB at the target size, then baseline 4:2:0 JPEG.
        let key = SampleKey { seed: 0, epoch: 0, index: i as u64 }; // Resize draws nothing
        let (w, h) = match raw {
            Some((w, h, _)) => (w, h),
            None => {
                let info = self.header.read_header(bytes)?;
                // The header decoder has no pixel budget (it keeps a huge image's size fields); the decode does,
                // but only after the output buffer below is allocated. A 100-byte PNG claiming 65535x65535
                // with max_side=65535 made that buffer 12.9 GB (an abort under a memory limit): the decoder's
                // own budget is checked here, on the header, first.
                let max_pixels = self.decoder.limits().max_pixels;
                let pixels = u64::from(info.width) * u64::from(info.height);
                if pixels > max_pixels {
                    return Err(ImageError::new(
                        ImageErrorKind::TooLarge,
                        format!(
                            "{}x{} = {pixels} pixels exceeds the limit of {max_pixels} pixels",
                            info.width, info.height
                        ),
                    ));
                }
                (info.width, info.height)
            }
        };
        check_declared_size((w, h), declared)?;
        let (tw, th) = cfg.target_size(w, h);
        let mut rgb = std::mem::take(&mut self.rgb);
        rgb.clear();
        rgb.resize(3 * tw as usize * th as usize, 0);
        let done = match sample.raw(&self.buf) {
            Some(image) => {
                let p = Self::pipeline(&mut self.pipelines, tw, th).map_err(config_to_image)?;
                p.process_raw(&mut self.scratch, image, key, &mut rgb).map(|_| ())
            }
            None if (tw, th) == (w, h) => self.decoder.decode_full_rgb(bytes, &mut rgb).map(|_| ()),
            None => {
                let p = Self::pipeline(&mut self.pipelines, tw, th).map_err(config_to_image)?;
                p.process(&mut self.scratch, bytes, key, &mut rgb).map(|_| ())
            }
        };
        let encoded = done.and_then(|()| {
            self.encoder
                .encode(&rgb, tw, th, cfg.quality.unwrap_or(DEFAULT_QUALITY), Subsampling::S420)
                .map_err(|e| ImageError::new(ImageErrorKind::Corrupt, e.to_string()))
        });
        self.rgb = rgb;
        let meta = RecordMeta {
            width: tw as u16,
            height: th as u16,
            format: RecordFormat::Jpeg,
            subsampling: 3,
            flags: 0,
            channels: 3,
        };
        Ok(Produced { bytes: encoded?, meta, bytes_in, warning: None })
    }
}

fn config_to_image(e: TrdataError) -> ImageError {
    ImageError::new(ImageErrorKind::TooLarge, e.to_string())
}

/// Index fields of an image from its header.
fn meta_of(info: &ImageInfo) -> RecordMeta {
    let format = match info.format {
        ImageFormat::Jpeg => RecordFormat::Jpeg,
        ImageFormat::Png => RecordFormat::Png,
        ImageFormat::WebP => RecordFormat::WebP,
        ImageFormat::Gif => RecordFormat::Gif,
        ImageFormat::Tiff => RecordFormat::Tiff,
        ImageFormat::Bmp => RecordFormat::Bmp,
        ImageFormat::Pnm => RecordFormat::Pnm,
    };
    let jpeg = info.format == ImageFormat::Jpeg;
    let subsampling = if !jpeg {
        0
    } else {
        match info.subsampling {
            Subsampling::S444 => 1,
            Subsampling::S422 => 2,
            Subsampling::S420 => 3,
            Subsampling::Gray => 4,
            Subsampling::S440 => 5,
            Subsampling::S411 => 6,
            Subsampling::S441 => 7,
            Subsampling::Unknown => 8,
        }
    };
    let mut flags = 0;
    if info.progressive {
        flags |= FLAG_PROGRESSIVE;
    }
    if matches!(info.colorspace, ColorSpace::Cmyk | ColorSpace::Ycck) {
        flags |= FLAG_CMYK;
    }
    if jpeg && info.lossless {
        flags |= FLAG_LOSSLESS;
    }
    if info.precision != 8 {
        flags |= FLAG_HIGH_PRECISION;
    }
    let side = |v: u32| u16::try_from(v).unwrap_or(0);
    let channels = if info.colorspace == ColorSpace::Gray || info.subsampling == Subsampling::Gray { 1 } else { 3 };
    RecordMeta { width: side(info.width), height: side(info.height), format, subsampling, flags, channels }
}

thread_local! {
    /// The decoder of a verify thread.
    static VERIFIER: RefCell<Option<Decoder>> = const { RefCell::new(None) };
}

/// `check(decoder)` with this verify thread's decoder (made on first use); every one of `records` bad when no
/// decoder can be made.
fn with_verifier(
    records: std::ops::Range<u64>,
    check: impl FnOnce(&mut Decoder) -> Vec<(u64, String)>,
) -> Vec<(u64, String)> {
    VERIFIER.with(|cell| {
        let mut slot = cell.borrow_mut();
        match slot.as_mut() {
            Some(d) => check(d),
            None => match Decoder::new() {
                Ok(d) => check(slot.insert(d)),
                Err(e) => records.map(|r| (r, format!("no decoder: {e}"))).collect(),
            },
        }
    })
}

/// Check `dst` before any work (module docs, "Destination"): a path that names a file (not `""`, `/`, `..` or a
/// path ending in `/`), in an existing directory, and either absent or a regular file (through symlinks). A
/// directory, a device node, a FIFO or a socket at `dst` is refused: publishing would replace it with a regular
/// file (`trdata pack SRC /dev/null` as root would replace the system's `/dev/null`).
pub fn check_destination(dst: &Path) -> Result<()> {
    let bad = |why: String| TrdataError::config(DESTINATION, format!("{:?} {why}", dst.as_os_str()));
    let bytes = dst.as_os_str().as_encoded_bytes();
    if bytes.is_empty() {
        return Err(bad("is empty: name the packed file to write".into()));
    }
    if bytes.ends_with(b"/") || dst.file_name().is_none() || dst.ends_with("..") || dst.ends_with(".") {
        return Err(bad("names a directory, not a file to write".into()));
    }
    let dir = match dst.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(bad(format!("is in {:?}, which is not a directory", dir.as_os_str()))),
        Err(e) => return Err(bad(format!("is in {:?}, which cannot be used: {e}", dir.as_os_str()))),
    }
    match fs::metadata(dst) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(m) => Err(bad(format!(
            "is {}: only a new path or an existing regular file is replaced by a pack",
            describe_file_type(m.file_type())
        ))),
        // Absent, or a dangling symlink (the link itself is replaced): fine.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(bad(format!("cannot be examined: {e}"))),
    }
}

/// The parameter naming the destination (`trdata.pack(source, path)`).
pub const DESTINATION: &str = "path";

/// A temporary file older than this whose lock can be taken is stale (its writer died). The age closes the
/// window between a writer's `O_EXCL` create and its lock, and spares writers of trdata versions that did not
/// lock as long as they write.
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// Tries at a fresh temporary name before giving up (each collision is a 2^-64 event, or a hostile directory).
const TEMP_NAME_TRIES: u32 = 64;

/// The temp file of a pack in progress (module docs, "Atomic"): `<dst>.tmp.<pid>.<16 hex digits>`, created
/// with `O_EXCL` so that two writers — threads of one process, or processes sharing a PID in different PID
/// namespaces — never share one, and locked (`flock`, exclusive) for as long as this writer holds `file`, so
/// that no cleaner takes it for stale. Removed on drop unless published.
struct TempFile {
    path: PathBuf,
    /// The handle that holds the lock (the writer writes through a duplicate of it).
    file: File,
    published: bool,
}

impl TempFile {
    fn create(dst: &Path) -> Result<Self> {
        let mut last = None;
        for _ in 0..TEMP_NAME_TRIES {
            let path = temp_path(dst, std::process::id(), random_u64());
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => {
                    // A cleaner that took the lock first (it may, between create and lock) never removes a file
                    // this young and lets go at once. A file system without flock: the file is never cleaned
                    // by others (they remove only what they could lock), only by this writer's drop.
                    let _ = file.lock();
                    return Ok(Self { path, file, published: false });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(io_fail(dst, "create the temporary file beside it", e)),
            }
        }
        let e = last.unwrap_or_else(|| std::io::Error::other("no name tried"));
        Err(io_fail(dst, "find a free temporary name beside it", e))
    }

    /// Move this file onto `dst` — only if the temporary path still names the file this writer wrote (same
    /// device and inode as its handle): a file someone put in its place is never published.
    fn publish(mut self, dst: &Path) -> Result<()> {
        let ours = self.file.metadata().map_err(|e| io_fail(dst, "examine the temporary file", e))?;
        match fs::symlink_metadata(&self.path) {
            Ok(there) if there.dev() == ours.dev() && there.ino() == ours.ino() => {}
            _ => {
                return Err(io_fail(
                    dst,
                    "publish the packed file",
                    std::io::Error::other(format!("its temporary file {:?} was removed or replaced", self.path)),
                ));
            }
        }
        fs::rename(&self.path, dst).map_err(|e| io_fail(dst, "move the finished file into place", e))?;
        self.published = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.published {
            // Remove only our own file: if the path now names another (replaced under us), leave it.
            let ours = self.file.metadata().ok().map(|m| (m.dev(), m.ino()));
            let there = fs::symlink_metadata(&self.path).ok().map(|m| (m.dev(), m.ino()));
            if ours.is_some() && ours == there {
                let _ = fs::remove_file(&self.path);
            }
        }
    }
}

/// 64 random bits for a temporary name: std's `RandomState` is seeded from the OS's randomness once per thread
/// and advanced for each new state; the clock and a process-wide counter are mixed in. Uniqueness does not rest
/// on it (`O_EXCL` does); it only makes collisions, and so retries, rare.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.write_u32(std::process::id());
    h.finish()
}

/// The longest file name most Linux file systems take (`NAME_MAX`).
const NAME_MAX_BYTES: usize = 255;
/// The longest suffix [`temp_path`] adds: `.tmp.` + a u32 PID (10 digits) + `.` + 16 hex digits.
const TEMP_SUFFIX_MAX_BYTES: usize = 5 + 10 + 1 + 16;

/// The part of dst's file name a temporary name starts with, followed by `.tmp.`: the whole name, or its first
/// `NAME_MAX_BYTES - TEMP_SUFFIX_MAX_BYTES` bytes when the name is longer (a 230-byte dst name is a valid file,
/// but `<dst>.tmp.<pid>.<random>` would pass NAME_MAX and its create fail with ENAMETOOLONG). The same stem for
/// every writer and cleaner of one dst; a dead writer's temporary of another long dst sharing the stem may be
/// cleaned too, which is harmless (it is stale garbage either way).
fn temp_prefix(dst: &Path) -> OsString {
    use std::os::unix::ffi::OsStrExt;
    let name = dst.file_name().map(|n| n.as_bytes()).unwrap_or_default();
    let stem = &name[..name.len().min(NAME_MAX_BYTES - TEMP_SUFFIX_MAX_BYTES)];
    let mut prefix = std::ffi::OsStr::from_bytes(stem).to_os_string();
    prefix.push(".tmp.");
    prefix
}

/// `<dst>.tmp.<pid>.<random, 16 hex digits>` (dst's name cut to fit NAME_MAX: [`temp_prefix`]), in dst's
/// directory.
fn temp_path(dst: &Path, pid: u32, random: u64) -> PathBuf {
    let mut name = temp_prefix(dst);
    name.push(format!("{pid}.{random:016x}"));
    dst.with_file_name(name)
}

/// Remove temporary files of `dst` left by writers that died — names exactly of this version's form
/// ([`temp_path`]: `<dst>.tmp.<pid>.<16 hex digits>`) or of older versions' (`<dst>.tmp.<pid>`): a regular file
/// is removed only when its exclusive lock can be taken (a live writer holds it, whatever PID namespace it runs
/// in) and it is older than [`STALE_AFTER`]. Anything else — a live writer's file, a young file, a file system
/// without locks, a symlink or another kind of file, and a user's own `<dst>.tmp.backup` or
/// `<dst>.tmp.notes.txt` (any `<dst>.tmp.*` was removed) — is left alone.
fn remove_stale_temps(dst: &Path) {
    let (Some(dir), Some(name)) = (dst.parent(), dst.file_name()) else { return };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let prefix = temp_prefix(dst).into_encoded_bytes();
    let mut old_prefix = name.to_os_string();
    old_prefix.push(".tmp.");
    let old_prefix = old_prefix.into_encoded_bytes();
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let n = e.file_name();
        let n = n.as_encoded_bytes();
        let ours = n.strip_prefix(&prefix[..]).is_some_and(is_pid_and_random);
        let older = n.strip_prefix(&old_prefix[..]).is_some_and(is_pid);
        if ours || older {
            remove_if_stale(&e.path());
        }
    }
}

/// A u32 PID in decimal, as [`temp_path`] writes it.
fn is_pid(s: &[u8]) -> bool {
    std::str::from_utf8(s).is_ok_and(|t| t.bytes().all(|b| b.is_ascii_digit()) && t.parse::<u32>().is_ok())
}

/// `<pid>.<16 lowercase hex digits>`, as [`temp_path`] writes it.
fn is_pid_and_random(s: &[u8]) -> bool {
    match s.len().checked_sub(17) {
        Some(dot) if s[dot] == b'.' => {
            is_pid(&s[..dot]) && s[dot + 1..].iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
        }
        _ => false,
    }
}

/// [`remove_stale_temps`] for one candidate.
fn remove_if_stale(path: &Path) {
    let Ok(link) = fs::symlink_metadata(path) else { return };
    if !link.is_file() {
        return;
    }
    // O_NONBLOCK|O_NOFOLLOW: a FIFO or a link swapped in after the check neither blocks nor is followed.
    let Ok(file) = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW).open(path) else {
        return;
    };
    let Ok(meta) = file.metadata() else { return };
    if meta.dev() != link.dev() || meta.ino() != link.ino() || !meta.is_file() {
        return;
    }
    if file.try_lock().is_err() {
        return; // held by a live writer, or no locks here: cannot tell, keep it
    }
    let old = meta.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|age| age >= STALE_AFTER);
    // Still the same file at the path while we hold its lock: remove it, then let go.
    let same = fs::symlink_metadata(path).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino());
    if old && same {
        let _ = fs::remove_file(path);
    }
}

fn io_fail(path: &Path, what: &str, e: std::io::Error) -> TrdataError {
    TrdataError::Source { path: path.to_path_buf(), message: format!("cannot {what}: {e}") }
}

/// Bytes of finished records a pack holds in memory waiting for their turn to be written (module docs,
/// "Parallel, in order"): producers take no new record while this many are waiting.
pub const IN_FLIGHT_BYTES: u64 = 256 << 20;

/// Records produced and not yet written, keyed by index: the reorder buffer between the producers and the
/// writer (protocol in [`produce_in_order`]).
#[derive(Default)]
struct Reorder {
    ready: BTreeMap<usize, Result<Produced>>,
    /// Bytes of the records in `ready`, and the most there ever were.
    bytes: u64,
    peak_bytes: u64,
    /// Set by the writer when it stops (done, failed or cancelled): producers take no more records.
    stop: bool,
}

/// The shared state of one pack's producers and writer.
struct Pipeline {
    state: Mutex<Reorder>,
    /// Signalled when a record is added to `ready`: the writer waits on it.
    produced: Condvar,
    /// Signalled when records leave `ready` or `stop` is set: producers waiting for room wait on it.
    drained: Condvar,
    /// The next record index to produce.
    next: AtomicUsize,
    budget_bytes: u64,
}

impl Pipeline {
    fn lock(&self) -> MutexGuard<'_, Reorder> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.drained.notify_all();
    }
}

/// Sets `stop` when the writer leaves, however it leaves (an error, a cancel, a panic): producers then finish
/// the record in hand and exit, and the thread scope can join them.
struct StopOnDrop<'a>(&'a Pipeline);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Produce records `0..n` on `workers` threads and hand them to `write` in index order on the calling thread.
///
/// Protocol. A producer waits until the bytes in `ready` are below the budget (or `stop`), then claims the next
/// index (`next.fetch_add`), produces it without the lock, inserts the result (a record or its error) and
/// signals `produced`. The writer takes index w from `ready` when it is there (signalling `drained`), else waits
/// on `produced`. No deadlock: every index below `next` is either in `ready`, written, or in a producer's hands
/// (which inserts it whatever the budget); if w is not in `ready` and not in hand, then w ≥ `next`, so `ready` is
/// empty and producers may claim. Memory: at most the budget plus one record per producer (the ones in hand,
/// each ≤ the largest record). A panic while producing becomes that record's error (the writer would otherwise
/// wait for it forever). `progress(done)` is called every `PROGRESS_EVERY` records; false cancels. Returns the
/// peak of the bytes in `ready`.
fn produce_in_order(
    ds: &Dataset,
    cfg: &PackConfig,
    dst: &Path,
    budget_bytes: u64,
    progress: &(dyn Fn(u64) -> bool + Sync),
    mut write: impl FnMut(usize, Produced) -> Result<()>,
) -> Result<u64> {
    const PROGRESS_EVERY: usize = 64;
    let n = ds.len();
    let pipe = Pipeline {
        state: Mutex::new(Reorder::default()),
        produced: Condvar::new(),
        drained: Condvar::new(),
        next: AtomicUsize::new(0),
        budget_bytes,
    };
    std::thread::scope(|scope| {
        let _stop = StopOnDrop(&pipe);
        for t in 0..cfg.workers.min(n) {
            let pipe = &pipe;
            std::thread::Builder::new()
                .name(format!("trdata-pack{t}"))
                .spawn_scoped(scope, move || producer_loop(pipe, ds, cfg, n))
                .map_err(|e| TrdataError::Worker(format!("cannot start the pack threads: {e}")))?;
        }
        for w in 0..n {
            let record = {
                let mut s = pipe.lock();
                loop {
                    if let Some(r) = s.ready.remove(&w) {
                        s.bytes -= r.as_ref().map_or(0, |p| p.bytes.len() as u64);
                        break r;
                    }
                    s = pipe.produced.wait(s).unwrap_or_else(|e| e.into_inner());
                }
            };
            pipe.drained.notify_all();
            write(w, record?)?;
            let done = w + 1;
            if (done % PROGRESS_EVERY == 0 || done == n) && !progress(done as u64) {
                return Err(cancel_error(dst));
            }
        }
        Ok(pipe.lock().peak_bytes)
    })
}

/// One producer thread of [`produce_in_order`] (protocol there).
fn producer_loop(pipe: &Pipeline, ds: &Dataset, cfg: &PackConfig, n: usize) {
    let mut producer = None;
    loop {
        {
            let mut s = pipe.lock();
            while !s.stop && s.bytes >= pipe.budget_bytes {
                s = pipe.drained.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            if s.stop {
                return;
            }
        }
        let i = pipe.next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            return;
        }
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let p = match &mut producer {
                Some(p) => p,
                None => producer.insert(Producer::new()?),
            };
            p.produce(ds, i, cfg)
                .map_err(|error| TrdataError::Decode(SampleError { path: ds.sample_name(i), index: i as u64, error }))
        }));
        let made = made.unwrap_or_else(|_| {
            producer = None; // its state may be half-updated
            Err(TrdataError::Worker(format!("the pack thread panicked producing record {i}")))
        });
        let mut s = pipe.lock();
        s.bytes += made.as_ref().map_or(0, |p| p.bytes.len() as u64);
        s.peak_bytes = s.peak_bytes.max(s.bytes);
        s.ready.insert(i, made);
        drop(s);
        pipe.produced.notify_one();
    }
}

/// Write `ds` into the packed file `dst` (module docs). `progress(done)` is called as records are written and
/// once more just before the finished file is published; returning false cancels (no file is left). Returns
/// what was done.
pub fn pack(
    ds: &Dataset,
    dst: &Path,
    cfg: &PackConfig,
    progress: &(dyn Fn(u64) -> bool + Sync),
) -> Result<PackSummary> {
    pack_with_budget(ds, dst, cfg, IN_FLIGHT_BYTES, None, progress)
}

/// Record `i`'s extra fields, (name, kind, value), asked for once per record, in record order, after the record
/// was read (a Python dataset's extras arrive with its read).
pub type ExtrasOf<'a> = dyn Fn(usize) -> Result<Vec<(String, ExtraKind, Vec<u8>)>> + 'a;

/// [`pack`], storing each record's extra fields as `extras(i)` gives them (a version 2 pack when any record has
/// some; source/packed_extras.rs).
pub fn pack_with_extras(
    ds: &Dataset,
    dst: &Path,
    cfg: &PackConfig,
    extras: &ExtrasOf<'_>,
    progress: &(dyn Fn(u64) -> bool + Sync),
) -> Result<PackSummary> {
    pack_with_budget(ds, dst, cfg, IN_FLIGHT_BYTES, Some(extras), progress)
}

/// [`pack`] with the in-flight byte budget given (tests use a small one).
pub(crate) fn pack_with_budget(
    ds: &Dataset,
    dst: &Path,
    cfg: &PackConfig,
    budget_bytes: u64,
    extras: Option<&ExtrasOf<'_>>,
    progress: &(dyn Fn(u64) -> bool + Sync),
) -> Result<PackSummary> {
    let t0 = Instant::now();
    check_destination(dst)?;
    let classes_rule = |labels: &mut dyn Iterator<Item = i64>| {
        check_classes(&cfg.classes, labels).map_err(|m| TrdataError::config("classes", m))
    };
    classes_rule(&mut ds.known_labels().unwrap_or(&[]).iter().copied())?;
    let n = ds.len();
    remove_stale_temps(dst);
    let tmp = TempFile::create(dst)?;
    let write_fail = |e| io_fail(dst, "write the packed file", e);
    let out = tmp.file.try_clone().map_err(write_fail)?;
    let mut writer = PackWriter::new(BufWriter::with_capacity(4 << 20, out), cfg.block_bytes).map_err(write_fail)?;
    let (mut bytes_in, mut warnings) = (0u64, Vec::new());
    let peak_buffered_bytes = produce_in_order(ds, cfg, dst, budget_bytes, progress, |i, r| {
        writer.push(&r.bytes, ds.label(i), r.meta).map_err(write_fail)?;
        if let Some(values) = extras.map(|f| f(i)).transpose()?.filter(|v| !v.is_empty()) {
            if let Some((name, _, _)) = values.iter().find(|(n, _, _)| !cfg.targets && n.starts_with(RESERVED_PREFIX)) {
                return Err(TrdataError::config(
                    "extras",
                    format!(
                        "the field name {name:?} of sample {i} starts with {RESERVED_PREFIX:?}, reserved for a \
                         detection source's annotations"
                    ),
                ));
            }
            writer.push_extras(&values).map_err(|e| TrdataError::config("extras", e.to_string()))?;
        }
        bytes_in += r.bytes_in;
        if let Some(w) = r.warning {
            warnings.push((i as u64, format!("{}: {w}", ds.sample_name(i).display())));
        }
        Ok(())
    })?;
    // An external dataset's labels exist once read: checked now, before anything is published.
    if ds.known_labels().is_none() {
        classes_rule(&mut (0..n).map(|i| ds.label(i)))?;
    }
    let meta = PackMeta {
        classes: cfg.classes.clone(),
        options: PackOptions {
            short_side: cfg.short_side,
            max_side: cfg.max_side,
            quality: cfg.quality,
            source: ds.store.kind().to_string(),
            identity: ds.identity(),
        },
        extras: Vec::new(), // the writer's, from the records' extras
    };
    let (out, header) = writer.finish(&meta).map_err(write_fail)?;
    let file = out.into_inner().map_err(|e| write_fail(e.into_error()))?;
    file.sync_all().map_err(write_fail)?;
    drop(file);
    // A cancel that came after the last record (Ctrl-C while the index was written or the file synced, which
    // can take long for a large pack) is honoured: nothing is published, the temporary is removed.
    if !progress(n as u64) {
        return Err(cancel_error(dst));
    }
    // dst was checked before the work, which can take hours: a FIFO, socket or device node made at dst since
    // (or a symlink to one) would be replaced by the rename. Checked again, the window is the rename's.
    check_destination(dst)?;
    tmp.publish(dst)?;
    // The rename is durable once the directory is synced (best effort: some file systems refuse).
    if let Some(dir) = dst.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(PackSummary {
        records: n as u64,
        bytes_in,
        bytes_out: header.file_bytes,
        seconds: t0.elapsed().as_secs_f64(),
        warnings,
        peak_buffered_bytes,
    })
}

fn cancel_error(dst: &Path) -> TrdataError {
    TrdataError::Source { path: dst.to_path_buf(), message: "packing was cancelled; no file was written".into() }
}

/// Check every record of the pack at `path`: its CRC32C and, for encoded records, a full decode (default
/// limits). Header, index and metadata problems are the error; bad records are returned as (record, message),
/// in record order. `workers` threads (default: usable CPUs) read whole blocks; `progress(done)` after each
/// block, false cancels.
pub fn verify(
    path: &Path,
    workers: Option<i128>,
    progress: &(dyn Fn(u64) -> bool + Sync),
) -> Result<Vec<(u64, String)>> {
    verify_at(&crate::storage::ObjectReader::open_local(path)?, workers, progress)
}

/// [`verify`] of a pack opened as `reader` (a local file or an object behind a URL: storage/).
pub fn verify_at(
    reader: &crate::storage::ObjectReader,
    workers: Option<i128>,
    progress: &(dyn Fn(u64) -> bool + Sync),
) -> Result<Vec<(u64, String)>> {
    let path = reader.name();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as i128;
    let workers = WORKERS.check::<usize>(workers.unwrap_or(cpus.min(WORKERS.max)))?;
    let index = PackedIndex::read(reader)?;
    let threads = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .thread_name(|i| format!("trdata-verify{i}"))
        .build()
        .map_err(|e| TrdataError::Worker(format!("cannot start the verify threads: {e}")))?;
    let done = AtomicU64::new(0);
    let cancelled = AtomicBool::new(false);
    let bad: Vec<Vec<(u64, String)>> = threads.install(|| {
        index
            .blocks
            .par_iter()
            .map(|b| {
                let records = b.first_record as u64..u64::from(b.first_record) + u64::from(b.records);
                if cancelled.load(Ordering::Relaxed) {
                    return Vec::new();
                }
                let mut buf = Vec::new();
                if let Err(e) = reader.read_range(b.offset, b.bytes, b.bytes, &mut buf) {
                    return records.map(|r| (r, format!("block cannot be read: {e}"))).collect();
                }
                let bad = with_verifier(records.clone(), |decoder| {
                    let mut out = Vec::new();
                    let mut bad = Vec::new();
                    for r in records.clone() {
                        let row = &index.rows[r as usize];
                        let at = (row.offset - b.offset) as usize;
                        let bytes = &buf[at..at + row.len as usize];
                        let crc = crc32c::crc32c(bytes);
                        if crc != row.crc32c {
                            bad.push((r, format!("CRC32C mismatch (read {crc:08x}, stored {:08x})", row.crc32c)));
                        } else if row.meta.format != RecordFormat::Raw
                            && let Err(e) = decoder.decode_full_rgb(bytes, &mut out)
                        {
                            bad.push((r, format!("does not decode: {e}")));
                        }
                    }
                    bad
                });
                let now = done.fetch_add(u64::from(b.records), Ordering::Relaxed) + u64::from(b.records);
                if !progress(now) {
                    cancelled.store(true, Ordering::Relaxed);
                }
                bad
            })
            .collect()
    });
    if cancelled.load(Ordering::Relaxed) {
        return Err(TrdataError::Source { path: path.to_path_buf(), message: "verification was cancelled".into() });
    }
    Ok(bad.into_iter().flatten().collect())
}

/// Check every sample of `ds` (a record source: Parquet, MDS, LitData, TFRecord; any dataset) on `workers`
/// threads (default: usable CPUs): its read (a unit that cannot be read, a record whose CRC fails, a null image)
/// and a full decode. Samples are taken unit by unit where the source has units (each unit read once). Returns
/// (sample, message naming it) for each bad sample.
pub fn verify_dataset(
    ds: &Dataset,
    workers: Option<i128>,
    progress: &(dyn Fn(u64) -> bool + Sync),
) -> Result<Vec<(u64, String)>> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as i128;
    let workers = WORKERS.check::<usize>(workers.unwrap_or(cpus.min(WORKERS.max)))?;
    let n = ds.len() as u32;
    let starts: Vec<u32> = match ds.block_structure() {
        Some(b) => b.block_starts.to_vec(),
        None => (0..n).step_by(64).chain([n]).collect(),
    };
    let threads = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .thread_name(|i| format!("trdata-verify{i}"))
        .build()
        .map_err(|e| TrdataError::Worker(format!("cannot start the verify threads: {e}")))?;
    let (done, cancelled) = (AtomicU64::new(0), AtomicBool::new(false));
    let bad: Vec<Vec<(u64, String)>> = threads.install(|| {
        starts
            .par_windows(2)
            .map(|w| {
                if cancelled.load(Ordering::Relaxed) {
                    return Vec::new();
                }
                let how = ReadCtx { epoch: 0, max_bytes: MAX_SOURCE_BYTES, planned: false, stopping: &|| false };
                let bad = with_verifier(u64::from(w[0])..u64::from(w[1]), |decoder| {
                    let (mut buf, mut out, mut bad) = (Vec::new(), Vec::new(), Vec::new());
                    for i in w[0]..w[1] {
                        let name = ds.sample_name(i as usize);
                        let checked = ds.read(i as usize, &how, &mut buf).and_then(|got| {
                            if got.pixel_shape().is_some() {
                                return Ok(());
                            }
                            decoder.decode_full_rgb(got.bytes(&buf), &mut out).map(|_| ())
                        });
                        if let Err(e) = checked {
                            bad.push((u64::from(i), format!("{}: {e}", name.display())));
                        }
                    }
                    bad
                });
                let now = done.fetch_add(u64::from(w[1] - w[0]), Ordering::Relaxed) + u64::from(w[1] - w[0]);
                if !progress(now) {
                    cancelled.store(true, Ordering::Relaxed);
                }
                bad
            })
            .collect()
    });
    if cancelled.load(Ordering::Relaxed) {
        return Err(TrdataError::Source { path: ds.sample_name(0), message: "verification was cancelled".into() });
    }
    Ok(bad.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests;
