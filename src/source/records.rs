//! source/records — samples that are records in other projects' files: Parquet (the Hugging Face Hub), Mosaic
//! MDS shards, LitData chunks and TFRecord files. One store for all of them ([`RecordFiles`]); each format is
//! its own file (parquet.rs, mds.rs, litdata.rs, tfrecord.rs) that says two things through [`RecordFormat`]:
//! where the samples lie (a [`Catalogue`] of *units* made when the source is opened: a Parquet row group's
//! columns, a run of TFRecord records, an MDS shard or a run of its samples, a LitData chunk) and what a unit's
//! bytes hold ([`RecordFormat::decode_unit`]: each sample's image, label and extra fields).
//!
//! # Reading
//! A unit is the store's block: read whole (one ranged read of its file, local `pread` or one ranged GET with
//! its retries), inflated when the format compresses whole shards ([`Inflate`]: output capped at the size the
//! index declares, checked equal), then decoded once into a *decoded block* that the partial-pack block cache
//! (block_cache.rs) holds: windows of `window_blocks` units are shuffled together, the plan's next units are
//! fetched ahead, eviction follows next use — the machinery, bounds and counters of `Packed(mode="partial")`.
//! A sample's read is a slice of its decoded block (no copy, no parse), its label and extras beside it.
//!
//! Copies and fresh memory are what a unit costs beyond its decode (each fresh page is a fault, and a freed
//! one a TLB flush on every core the process runs on): the format decodes from a shared view of the read buffer
//! (`Bytes`: Parquet's pages are slices of it), that buffer goes back to a small pool of read buffers once the
//! format drops its slices, and the decoded block is written into a buffer an evicted block left (the cache's
//! spares, block_cache.rs "Recycled buffers"), reserved once at its declared bound, so it grows without a copy.
//! An image's bytes are copied once, into the decoded block.
//!
//! # Decoded block (in memory only, made and read here)
//! ```text
//! data:  the samples' image bytes and encoded extras, back to back
//! table: one 48-byte row per sample, in order:
//!   0 status u8 (0 encoded image, 1 raw pixels, 2 bad sample) · 1 error kind u8 (bad) · 2 channels u8 · 3 pad
//!   4 height u32 · 8 width u32 (pixels) · 12 pad u32 · 16 label i64
//!   24 image offset u32 · 28 image len u32 (bad: the error message) · 32 extras offset u32 · 36 extras len u32
//!   40 pad u64
//! tail:  u32 sample count
//! ```
//! Extras are each field of the catalogue's `fields`, in order, as [`Value`]s ([`encode_value`]).
//!
//! A unit whose bytes cannot be read or decoded fails every sample of it with that error (each under the
//! loader's `on_error`); a sample that alone is bad (a record whose CRC fails, an image cell that is null)
//! fails alone. The decoded block must fit the size the catalogue declared for the unit (what the cache
//! reserves for it): a unit that decodes to more is `TooLarge`, never memory past `cache_bytes`.
//!
//! Labels come with the reads (as a Python dataset's do, external.rs): the store keeps the label its read of
//! sample `i` found, and the worker that read it loads it for the row it writes (same thread, program order).

use super::block_cache::{BlockCache, FetchBlock};
use super::packed::PartialOptions;
use super::{BlockStructure, Dataset, ImageStore, PixelShape, ReadCtx, SampleBytes, StoreBytes, fingerprint};
use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use crate::storage::ObjectReader;
use crate::sync::{AtomicU64, Ordering};
use bytes::Bytes;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

/// A format's knowledge of its files (module docs).
pub trait RecordFormat: Send + Sync + std::fmt::Debug + 'static {
    /// The source's kind as checkpoints and errors name it: "parquet", "mds", "litdata", "tfrecord".
    fn kind(&self) -> &'static str;

    /// Unit `unit`'s samples from its bytes (`bytes`: the unit's range of its file, inflated when the unit says
    /// so): exactly `unit.samples` calls of [`UnitBuilder::image`] / [`UnitBuilder::pixels`] /
    /// [`UnitBuilder::bad`], in the samples' order, each image with one extras value per catalogue field. An
    /// error fails the unit's every sample. `bytes` is shared so that a format may hand slices of it to a reader
    /// without a copy (Parquet's pages); the buffer is reused for the next unit once the last slice is dropped.
    fn decode_unit(&self, unit: &Unit, bytes: &Bytes, out: &mut UnitBuilder) -> std::result::Result<(), ImageError>;
}

/// Which of a format's columns (Parquet columns, MDS/LitData fields, tf.train.Example features) make a sample,
/// as the user named them (`image_column=`, `label_column=`, `extras=`); each format's opener checks that the
/// named ones exist and have a type it can read (`ConfigError` naming the parameter and the file).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Columns {
    /// The image's column; None: the format's default (Parquet `image`; MDS/LitData the one jpeg/png/pil/image
    /// column, else `image`; TFRecord `image/encoded`, else `image`).
    pub image: Option<String>,
    /// The label's column.
    pub label: LabelColumn,
    /// The extras' columns; None: every column that is neither the image nor the label.
    pub extras: Option<Vec<String>>,
}

/// The label column the user asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LabelColumn {
    /// The format's default (Parquet/MDS/LitData `label`; TFRecord `image/class/label`, else `label`), or no
    /// labels (every sample -1) when the files have no such column.
    #[default]
    Default,
    /// This column (it must exist).
    Named(String),
    /// No labels: every sample -1.
    Absent,
}

/// The parameter names of [`Columns`].
pub const IMAGE_COLUMN: &str = "image_column";
/// See [`IMAGE_COLUMN`].
pub const LABEL_COLUMN: &str = "label_column";
/// See [`IMAGE_COLUMN`].
pub const EXTRAS: &str = "extras";

/// A format's opener: its files (local paths or URLs, read with the storage options), the columns asked for.
pub type Opener = fn(
    files: &[crate::storage::Location],
    storage: &crate::storage::StorageOptions,
    columns: &Columns,
) -> Result<(Catalogue, Box<dyn RecordFormat>)>;

/// A whole-unit compression (MDS shards, LitData chunks): the unit's bytes are inflated before they are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Zstandard frame(s).
    Zstd,
    /// Snappy raw block (python-snappy's `snappy.compress`).
    Snappy,
    /// gzip stream.
    Gzip,
}

/// How a unit's bytes are inflated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inflate {
    /// The codec.
    pub codec: Codec,
    /// The inflated size the format's index declares (checked: more or fewer bytes are `Corrupt`).
    pub raw_len: u64,
}

/// One unit: what the cache fetches and decodes at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// Index into the catalogue's files.
    pub file: u32,
    /// Byte range in the file.
    pub offset: u64,
    /// Bytes (≥ 1).
    pub len: u64,
    /// Samples it holds (≥ 1).
    pub samples: u32,
    /// The number, within its file, of its first sample (how errors name a sample: `file#n`).
    pub first: u64,
    /// Whole-unit compression.
    pub inflate: Option<Inflate>,
    /// The most bytes its decoded block may take (what the cache reserves): a format's bound from its index
    /// (the inflated or uncompressed size, plus [`table_bytes`]).
    pub decoded_bytes: u64,
    /// The format's own locator (a Parquet row group, …).
    pub tag: u64,
}

/// The most bytes of a bad sample's message a format counts in its decoded-size bound ([`cut_message`]).
pub const MESSAGE_BYTES: u64 = 512;

/// `message` cut to at most [`MESSAGE_BYTES`] bytes (at a character boundary), for [`UnitBuilder::bad`].
pub fn cut_message(mut message: String) -> String {
    let max = MESSAGE_BYTES as usize;
    if message.len() > max {
        let mut at = max - 3;
        while !message.is_char_boundary(at) {
            at -= 1;
        }
        message.truncate(at);
        message.push_str("...");
    }
    message
}

/// Bytes the decoded block's table and tail take for `samples` samples (a format adds them to its bound).
pub fn table_bytes(samples: u32) -> u64 {
    u64::from(samples) * ROW as u64 + 4
}

/// What a format found when its source was opened.
#[derive(Debug)]
pub struct Catalogue {
    /// The files, opened (sizes known).
    pub files: Vec<ObjectReader>,
    /// The units, in sample order (file by file).
    pub units: Vec<Unit>,
    /// The extras' field names, in the order `decode_unit` gives their values.
    pub fields: Vec<String>,
    /// Class names (a Parquet file's ClassLabel names) or empty.
    pub classes: Vec<OsString>,
}

/// One extra field's value (a Parquet cell, an MDS/LitData column, a tf.train.Example feature).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Absent.
    Null,
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// UTF-8 text.
    Text(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<Value>),
}

/// Where `decode_unit` writes a unit's samples (the decoded block, module docs).
#[derive(Debug)]
pub struct UnitBuilder {
    data: Vec<u8>,
    table: Vec<u8>,
    samples: u32,
    fields: usize,
    limit: u64,
}

/// Bytes of one table row.
const ROW: usize = 48;

/// Row status: an encoded image, raw pixels, a bad sample.
const ENCODED: u8 = 0;
const PIXELS: u8 = 1;
const BAD: u8 = 2;

impl UnitBuilder {
    /// A builder for a block of at most `limit` bytes written into `spare` (an empty buffer the cache recycled:
    /// block_cache.rs, "Recycled buffers"). A spare smaller than `capacity` (the largest unit's `limit`) is
    /// dropped for a new buffer of `capacity` bytes, reserved at once: the block then grows without a copy, and
    /// the buffer fits any unit of the store when it is recycled (the pages a block never writes are never
    /// touched: the reservation costs address space, not memory).
    /// (The cache counts `limit` for the block before it is fetched: source/block_cache.rs.)
    fn new(fields: usize, limit: u64, capacity: u64, spare: Vec<u8>) -> std::result::Result<Self, ImageError> {
        let capacity = capacity.max(limit);
        let fits = usize::try_from(capacity).is_ok_and(|n| spare.capacity() >= n);
        let mut data = if fits { spare } else { Vec::new() };
        data.clear();
        usize::try_from(capacity).ok().and_then(|n| data.try_reserve_exact(n).ok()).ok_or_else(|| {
            ImageError::new(
                ImageErrorKind::TooLarge,
                format!("a decoded block of {capacity} bytes cannot be allocated"),
            )
        })?;
        Ok(Self { data, table: Vec::new(), samples: 0, fields, limit })
    }

    /// A sample with an encoded image (JPEG, PNG, …: decoded as a file would be), its label and its extras (one
    /// value per catalogue field).
    pub fn image(&mut self, bytes: &[u8], label: i64, extras: &[Value]) -> std::result::Result<(), ImageError> {
        self.row(ENCODED, 0, (0, 0, 0), label, bytes, extras)
    }

    /// A sample of raw uint8 pixels of `shape` (height, width, channels 1 or 3; the format checked that
    /// `bytes` holds exactly that many).
    pub fn pixels(
        &mut self,
        bytes: &[u8],
        shape: PixelShape,
        label: i64,
        extras: &[Value],
    ) -> std::result::Result<(), ImageError> {
        self.row(PIXELS, 0, shape, label, bytes, extras)
    }

    /// A sample that is bad on its own: reading it fails with `error`.
    pub fn bad(&mut self, error: ImageError) -> std::result::Result<(), ImageError> {
        self.row(BAD, error.kind as u8, (0, 0, 0), 0, error.message.as_bytes(), &[])
    }

    fn row(
        &mut self,
        status: u8,
        kind: u8,
        (h, w, c): PixelShape,
        label: i64,
        image: &[u8],
        extras: &[Value],
    ) -> std::result::Result<(), ImageError> {
        if status != BAD && extras.len() != self.fields {
            return Err(ImageError::new(
                ImageErrorKind::Corrupt,
                format!("{} extras values for {} fields", extras.len(), self.fields),
            ));
        }
        let image_at = self.data.len();
        self.push_data(image)?;
        let extras_at = self.data.len();
        let mut enc = Vec::new();
        for v in extras {
            encode_value(v, &mut enc);
        }
        self.push_data(&enc)?;
        let mut r = [0u8; ROW];
        r[0] = status;
        r[1] = kind;
        r[2] = c;
        r[4..8].copy_from_slice(&h.to_le_bytes());
        r[8..12].copy_from_slice(&w.to_le_bytes());
        r[16..24].copy_from_slice(&label.to_le_bytes());
        // push_data keeps data ≤ limit ≤ u32::MAX
        r[24..28].copy_from_slice(&(image_at as u32).to_le_bytes());
        r[28..32].copy_from_slice(&(image.len() as u32).to_le_bytes());
        r[32..36].copy_from_slice(&(extras_at as u32).to_le_bytes());
        r[36..40].copy_from_slice(&(enc.len() as u32).to_le_bytes());
        self.table.extend_from_slice(&r);
        self.samples += 1;
        self.check_room()
    }

    fn push_data(&mut self, bytes: &[u8]) -> std::result::Result<(), ImageError> {
        self.data.extend_from_slice(bytes);
        self.check_room()
    }

    fn check_room(&self) -> std::result::Result<(), ImageError> {
        let used = (self.data.len() + self.table.len() + 4) as u64;
        if used > self.limit {
            return Err(ImageError::new(
                ImageErrorKind::TooLarge,
                format!("decodes to more than the {} bytes its index declares", self.limit),
            ));
        }
        Ok(())
    }

    /// The decoded block, given that the unit has `samples` samples.
    fn finish(mut self, samples: u32) -> std::result::Result<Vec<u8>, ImageError> {
        if self.samples != samples {
            return Err(ImageError::new(
                ImageErrorKind::Corrupt,
                format!("holds {} samples where its index says {samples}", self.samples),
            ));
        }
        self.data.extend_from_slice(&self.table);
        self.data.extend_from_slice(&samples.to_le_bytes());
        Ok(self.data)
    }
}

/// Append `v` to `out`: tag u8 (0 null, 1 int, 2 float, 3 bool, 4 text, 5 bytes, 6 list, 7 list of ints, 8 list
/// of floats), then i64 / f64 / u8, or u32 length + bytes, or u32 count + values (7: zigzag LEB128 varints; 8:
/// f64s). A non-empty list of ints or of floats takes the compact tags, so a value never takes more than twice the
/// bytes a protobuf or Arrow encoding of it takes (what the formats' decoded-size bounds count on).
pub fn encode_value(v: &Value, out: &mut Vec<u8>) {
    let len = |out: &mut Vec<u8>, n: usize| out.extend_from_slice(&(n as u32).to_le_bytes());
    match v {
        Value::Null => out.push(0),
        Value::Int(x) => {
            out.push(1);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::Float(x) => {
            out.push(2);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::Bool(b) => out.extend_from_slice(&[3, u8::from(*b)]),
        Value::Text(s) => {
            out.push(4);
            len(out, s.len());
            out.extend_from_slice(s.as_bytes());
        }
        Value::Bytes(b) => {
            out.push(5);
            len(out, b.len());
            out.extend_from_slice(b);
        }
        Value::List(items) if !items.is_empty() && items.iter().all(|i| matches!(i, Value::Int(_))) => {
            out.push(7);
            len(out, items.len());
            for item in items {
                if let Value::Int(x) = item {
                    let mut z = ((x << 1) ^ (x >> 63)) as u64;
                    while z >= 0x80 {
                        out.push((z as u8) | 0x80);
                        z >>= 7;
                    }
                    out.push(z as u8);
                }
            }
        }
        Value::List(items) if !items.is_empty() && items.iter().all(|i| matches!(i, Value::Float(_))) => {
            out.push(8);
            len(out, items.len());
            for item in items {
                if let Value::Float(x) = item {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
        Value::List(items) => {
            out.push(6);
            len(out, items.len());
            for item in items {
                encode_value(item, out);
            }
        }
    }
}

/// One value from the front of `b` (what [`encode_value`] wrote), advancing `b`; None when `b` is not one.
pub fn decode_value(b: &mut &[u8]) -> Option<Value> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = b.split_at_checked(n)?;
        *b = rest;
        Some(head)
    }
    fn u32_at(b: &mut &[u8]) -> Option<usize> {
        Some(u32::from_le_bytes(take(b, 4)?.try_into().ok()?) as usize)
    }
    let tag = take(b, 1)?[0];
    Some(match tag {
        0 => Value::Null,
        1 => Value::Int(i64::from_le_bytes(take(b, 8)?.try_into().ok()?)),
        2 => Value::Float(f64::from_le_bytes(take(b, 8)?.try_into().ok()?)),
        3 => Value::Bool(take(b, 1)?[0] != 0),
        4 => {
            let n = u32_at(b)?;
            Value::Text(String::from_utf8(take(b, n)?.to_vec()).ok()?)
        }
        5 => {
            let n = u32_at(b)?;
            Value::Bytes(take(b, n)?.to_vec())
        }
        6 => {
            let n = u32_at(b)?;
            let mut items = Vec::with_capacity(n.min(b.len()));
            for _ in 0..n {
                items.push(decode_value(b)?);
            }
            Value::List(items)
        }
        7 => {
            let n = u32_at(b)?;
            let mut items = Vec::with_capacity(n.min(b.len()));
            for _ in 0..n {
                let (mut z, mut shift) = (0u64, 0u32);
                loop {
                    let byte = take(b, 1)?[0];
                    z |= u64::from(byte & 0x7f).checked_shl(shift)?;
                    if byte & 0x80 == 0 {
                        break;
                    }
                    shift += 7;
                    if shift > 63 {
                        return None;
                    }
                }
                items.push(Value::Int(((z >> 1) as i64) ^ -((z & 1) as i64)));
            }
            Value::List(items)
        }
        8 => {
            let n = u32_at(b)?;
            let mut items = Vec::with_capacity(n.min(b.len() / 8));
            for _ in 0..n {
                items.push(Value::Float(f64::from_le_bytes(take(b, 8)?.try_into().ok()?)));
            }
            Value::List(items)
        }
        _ => return None,
    })
}

/// A decoded block's row `k`.
struct Row {
    status: u8,
    kind: u8,
    shape: PixelShape,
    label: i64,
    image: std::ops::Range<usize>,
    extras: std::ops::Range<usize>,
}

/// Row `k` of the decoded block `b` (made by [`UnitBuilder::finish`], so its ranges lie inside it).
fn row(b: &[u8], k: usize) -> Row {
    let n = u32::from_le_bytes(b[b.len() - 4..].try_into().expect("4 bytes")) as usize;
    let at = b.len() - 4 - (n - k) * ROW;
    let r = &b[at..at + ROW];
    let u32_at = |o: usize| u32::from_le_bytes(r[o..o + 4].try_into().expect("4 bytes")) as usize;
    let (image, extras) = ((u32_at(24), u32_at(28)), (u32_at(32), u32_at(36)));
    Row {
        status: r[0],
        kind: r[1],
        shape: (u32_at(4) as u32, u32_at(8) as u32, r[2]),
        label: i64::from_le_bytes(r[16..24].try_into().expect("8 bytes")),
        image: image.0..image.0 + image.1,
        extras: extras.0..extras.0 + extras.1,
    }
}

/// The error kind a bad row recorded.
fn kind_of(k: u8) -> ImageErrorKind {
    use ImageErrorKind::*;
    [Empty, UnknownFormat, Corrupt, Unsupported, TooLarge, Io, Dataset, Target]
        .into_iter()
        .find(|e| e.clone() as u8 == k)
        .unwrap_or(Corrupt)
}

/// Inflate `raw` with `inflate`, the output capped at its declared size and checked equal to it.
pub fn inflate(raw: &[u8], how: Inflate) -> std::result::Result<Vec<u8>, ImageError> {
    use std::io::Read;
    let want = how.raw_len;
    let corrupt = |m: String| ImageError::new(ImageErrorKind::Corrupt, m);
    let mut out = Vec::new();
    out.try_reserve_exact(usize::try_from(want).map_err(|_| corrupt(format!("{want} inflated bytes")))?)
        .map_err(|_| ImageError::new(ImageErrorKind::TooLarge, format!("{want} inflated bytes cannot be allocated")))?;
    let cap = want + 1; // one byte more than declared shows a lying index
    let got = match how.codec {
        Codec::Zstd => zstd::stream::read::Decoder::new(raw).and_then(|d| d.take(cap).read_to_end(&mut out)),
        Codec::Gzip => flate2::read::GzDecoder::new(raw).take(cap).read_to_end(&mut out),
        Codec::Snappy => match snap::raw::decompress_len(raw) {
            Ok(n) if n as u64 == want => {
                out.resize(n, 0);
                snap::raw::Decoder::new().decompress(raw, &mut out).map_err(std::io::Error::other)
            }
            Ok(n) => return Err(corrupt(format!("snappy data of {n} bytes where the index says {want}"))),
            Err(e) => Err(std::io::Error::other(e)),
        },
    }
    .map_err(|e| corrupt(format!("{:?} data cannot be inflated: {e}", how.codec)))?;
    if got as u64 != want {
        return Err(corrupt(format!("{:?} data inflates to {} bytes where the index says {want}", how.codec, got)));
    }
    Ok(out)
}

/// The store of a record format's files (module docs).
#[derive(Debug)]
pub struct RecordFiles {
    inner: Arc<Inner>,
    labels: Arc<Vec<AtomicU64>>,
    block_starts: Vec<u32>,
    window_blocks: u32,
}

#[derive(Debug)]
struct Inner {
    format: Box<dyn RecordFormat>,
    catalogue: Catalogue,
    cache: BlockCache,
    /// Unit of each sample.
    unit_of: Vec<u32>,
    /// First sample of each unit, then N.
    starts: Vec<u32>,
    /// Read buffers of earlier units, reused (at most [`SPARE_READS`]): a unit's read then writes into pages
    /// it already has rather than faulting in fresh ones (a unit is megabytes; fresh pages cost the kernel a
    /// fault per 4 KiB and, when given back, a TLB flush on every core the process runs on).
    spare: std::sync::Mutex<Vec<Vec<u8>>>,
    /// The largest unit's decoded bound (≤ u32::MAX): every decoded block's buffer is reserved this large, so a
    /// recycled one fits any unit.
    largest_block: u64,
}

/// Read buffers a record store keeps for its next units.
const SPARE_READS: usize = 4;

/// A unit's bytes as the owner of the [`Bytes`] a format decodes from.
struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// The fetch step of a record store's cache: unit k read, inflated and decoded (module docs).
fn fetch_unit(inner: std::sync::Weak<Inner>) -> FetchBlock {
    std::sync::Arc::new(move |k, spare_block| {
        let inner = inner.upgrade().ok_or_else(|| ImageError::new(ImageErrorKind::Io, "the source was closed"))?;
        let unit = &inner.catalogue.units[k as usize];
        let reader = &inner.catalogue.files[unit.file as usize];
        let named = |e: ImageError| {
            ImageError::new(
                e.kind,
                format!("{} unit {k} (bytes {}+{}): {}", inner.format.kind(), unit.offset, unit.len, e.message),
            )
        };
        // (std's mutex, not crate::sync's: this pool is not part of a model-checked protocol)
        let spares = || inner.spare.lock().unwrap_or_else(|p| p.into_inner());
        let spare = || spares().pop().unwrap_or_default();
        let keep = |b: Vec<u8>| {
            let mut spares = spares();
            if spares.len() < SPARE_READS {
                spares.push(b);
            }
        };
        let mut raw = spare();
        reader.read_range(unit.offset, unit.len, unit.len, &mut raw).map_err(named)?;
        let raw = Arc::new(match unit.inflate {
            Some(how) => {
                let inflated = inflate(&raw, how).map_err(named)?;
                keep(raw);
                inflated
            }
            None => raw,
        });
        let limit = unit.decoded_bytes.min(u64::from(u32::MAX));
        let mut out =
            UnitBuilder::new(inner.catalogue.fields.len(), limit, inner.largest_block, spare_block).map_err(named)?;
        let bytes = Bytes::from_owner(Shared(Arc::clone(&raw)));
        let decoded =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.format.decode_unit(unit, &bytes, &mut out)))
                .unwrap_or_else(|_| Err(ImageError::new(ImageErrorKind::Corrupt, "its decoder panicked")));
        drop(bytes);
        if let Ok(b) = Arc::try_unwrap(raw) {
            keep(b); // the format kept no slice of it
        }
        decoded.and_then(|()| out.finish(unit.samples)).map_err(named)
    })
}

impl RecordFiles {
    /// The store over `catalogue` read by `format`, its units cached as partial packs' blocks are
    /// (`partial`'s parameters and defaults are `Packed`'s: source/packed.rs).
    pub fn new(format: Box<dyn RecordFormat>, catalogue: Catalogue, partial: PartialOptions) -> Result<Self> {
        let params = partial.checked()?;
        let window = params.window;
        let units = &catalogue.units;
        let n: u64 = units.iter().map(|u| u64::from(u.samples)).sum();
        if units.is_empty() || n == 0 || n > u64::from(u32::MAX) || units.iter().any(|u| u.samples == 0) {
            return Err(TrdataError::config(
                PATHS,
                format!("{n} {} samples must be at least one and fewer than 2**32", format.kind()),
            ));
        }
        let largest = units.iter().map(|u| u.decoded_bytes).max().unwrap_or(1).max(1);
        let (prefetch, cache_bytes) = params.sized(largest, "the largest unit's decoded size")?;
        let mut starts = Vec::with_capacity(units.len() + 1);
        let mut unit_of = Vec::with_capacity(n as usize);
        for (k, u) in units.iter().enumerate() {
            starts.push(unit_of.len() as u32);
            unit_of.extend(std::iter::repeat_n(k as u32, u.samples as usize));
        }
        starts.push(n as u32);
        let sizes = units.iter().map(|u| u.decoded_bytes).collect();
        let inner = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| Inner {
            format,
            catalogue,
            cache: BlockCache::new(cache_bytes, prefetch, sizes, fetch_unit(weak.clone())),
            unit_of,
            starts,
            spare: std::sync::Mutex::new(Vec::new()),
            largest_block: largest.min(u64::from(u32::MAX)),
        });
        let labels = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
        let block_starts = inner.starts.clone();
        Ok(Self { inner, labels, block_starts, window_blocks: window })
    }

    /// The catalogue the store reads.
    pub fn catalogue(&self) -> &Catalogue {
        &self.inner.catalogue
    }

    /// The format's kind.
    pub fn format_kind(&self) -> &'static str {
        self.inner.format.kind()
    }

    /// The rows of this store's samples' extras, read from the same decoded blocks (sample/extras.rs makes them
    /// an `ExtrasStore`); None without extras fields.
    pub fn extras(&self) -> Option<RecordRows> {
        (!self.inner.catalogue.fields.is_empty())
            .then(|| RecordRows { inner: Arc::clone(&self.inner), fields: self.inner.catalogue.fields.clone().into() })
    }

    /// Sample `i`'s decoded block and row, the block counted as the plan's read when `planned`.
    fn block(
        inner: &Inner,
        i: usize,
        planned: bool,
        stopping: &dyn Fn() -> bool,
    ) -> std::result::Result<(crate::sync::Arc<super::BlockBytes>, Row), ImageError> {
        let u = inner.unit_of[i];
        let block = if planned { inner.cache.get(u, stopping) } else { inner.cache.get_outside_plan(u, stopping) }?;
        let r = row(block.bytes(), i - inner.starts[u as usize] as usize);
        if r.status == BAD {
            let message = String::from_utf8_lossy(&block.bytes()[r.image.clone()]).into_owned();
            return Err(ImageError::new(kind_of(r.kind), message));
        }
        Ok((block, r))
    }
}

impl ImageStore for RecordFiles {
    fn kind(&self) -> &'static str {
        self.inner.format.kind()
    }

    fn len(&self) -> usize {
        self.labels.len()
    }

    /// `file#n`: the sample's number within its file.
    fn sample_name(&self, i: usize) -> PathBuf {
        let inner = &self.inner;
        let u = inner.unit_of[i] as usize;
        let unit = &inner.catalogue.units[u];
        let mut name = inner.catalogue.files[unit.file as usize].name().as_os_str().to_os_string();
        name.push(format!("#{}", unit.first + (i - inner.starts[u] as usize) as u64));
        PathBuf::from(name)
    }

    fn read<'s>(&'s self, i: usize, how: &ReadCtx<'_>, _buf: &mut Vec<u8>) -> Result<SampleBytes<'s>, ImageError> {
        let (block, r) = Self::block(&self.inner, i, how.planned, how.stopping)?;
        self.labels[i].store(r.label as u64, Ordering::Relaxed);
        if r.image.len() as u64 > how.max_bytes {
            return Err(ImageError::new(
                ImageErrorKind::TooLarge,
                format!("an image of {} bytes is over the {}-byte sample limit", r.image.len(), how.max_bytes),
            ));
        }
        let sample = SampleBytes::held(StoreBytes::Block(block, r.image));
        Ok(if r.status == PIXELS { sample.as_pixels(r.shape) } else { sample })
    }

    /// The files' names (without their directories) and sizes, and the number of samples.
    fn identity(&self, _labels: &[i64]) -> String {
        let c = &self.inner.catalogue;
        fingerprint(self.kind(), |add| {
            for f in &c.files {
                add(f.name().file_name().map_or(b"".as_slice(), |n| n.as_encoded_bytes()));
                add(&f.size().to_le_bytes());
            }
            add(&(self.labels.len() as u64).to_le_bytes());
        })
    }

    fn read_label(&self, i: usize) -> Option<i64> {
        Some(self.labels[i].load(Ordering::Relaxed) as i64)
    }

    fn labels_come_with_reads(&self) -> bool {
        true
    }

    fn io_stats(&self) -> Vec<(&'static str, u64)> {
        let mut total = crate::storage::StorageStats::default();
        for f in &self.inner.catalogue.files {
            let s = f.stats();
            total.requests += s.requests;
            total.bytes += s.bytes;
            total.retries += s.retries;
            total.failures += s.failures;
        }
        let c = self.inner.cache.stats();
        let mut out = super::storage_stats(&total);
        out.extend(c.named());
        out
    }

    fn block_structure(&self) -> Option<BlockStructure<'_>> {
        Some(BlockStructure { block_starts: &self.block_starts, window_blocks: self.window_blocks })
    }

    fn block_cache(&self) -> Option<&BlockCache> {
        Some(&self.inner.cache)
    }

    fn count_planned_read(&self, i: usize) {
        self.inner.cache.count_read(self.inner.unit_of[i]);
    }
}

/// One row's extras from a record store: (field, value) pairs in the catalogue's field order, handed to the
/// binding inside [`RowExtras`] (py/targets.rs makes a dict of them).
#[derive(Debug, Clone, PartialEq)]
pub struct NativeExtras {
    /// The catalogue's field names.
    pub fields: Arc<[String]>,
    /// One value per field.
    pub values: Vec<Value>,
}

/// The extras of a [`RecordFiles`] store's samples: read from the sample's decoded block (outside the plan's
/// counts: the image's own read counts it).
#[derive(Debug, Clone)]
pub struct RecordRows {
    inner: Arc<Inner>,
    fields: Arc<[String]>,
}

impl RecordRows {
    /// Sample `i`'s extras: one value per field of the catalogue (a bad sample's error, naming it as its read
    /// does).
    pub fn read(&self, i: usize) -> std::result::Result<NativeExtras, ImageError> {
        let (block, r) = RecordFiles::block(&self.inner, i, false, &|| false)?;
        let mut b = &block.bytes()[r.extras];
        let values = (0..self.fields.len())
            .map(|_| decode_value(&mut b))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ImageError::new(ImageErrorKind::Corrupt, "its extras cannot be read back"))?;
        Ok(NativeExtras { fields: Arc::clone(&self.fields), values })
    }
}

/// A dataset of `format`'s catalogue (labels come with reads; class names from the catalogue).
pub fn record_dataset(format: Box<dyn RecordFormat>, catalogue: Catalogue, partial: PartialOptions) -> Result<Dataset> {
    let classes = catalogue.classes.clone();
    let store = RecordFiles::new(format, catalogue, partial)?;
    let n = store.len();
    Ok(Dataset::new(store, vec![0; n], classes))
}

/// The `paths` parameter's name.
pub const PATHS: &str = "paths";

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::source::packed::DEFAULT_WINDOW_BLOCKS;
    use crate::storage::{Location, StorageOptions};

    /// A toy format: a file of 16-byte records `label i64 · payload [u8; 8]`; a negative label is a bad record;
    /// units of `per_unit` records; one extra field, the record's number as an Int and its payload as Text.
    #[derive(Debug)]
    struct Toy;

    impl RecordFormat for Toy {
        fn kind(&self) -> &'static str {
            "toy"
        }

        fn decode_unit(
            &self,
            unit: &Unit,
            bytes: &Bytes,
            out: &mut UnitBuilder,
        ) -> std::result::Result<(), ImageError> {
            for (k, r) in bytes.chunks(16).enumerate() {
                let label = i64::from_le_bytes(r[..8].try_into().unwrap());
                let extras = [Value::List(vec![
                    Value::Int((unit.first + k as u64) as i64),
                    Value::Text(String::from_utf8_lossy(&r[8..]).into_owned()),
                ])];
                if label < 0 {
                    out.bad(ImageError::new(ImageErrorKind::Corrupt, format!("record {k} is bad")))?;
                } else {
                    out.image(&r[8..], label, &extras)?;
                }
            }
            Ok(())
        }
    }

    fn toy_file(name: &str, labels: &[i64]) -> ObjectReader {
        let path = crate::test_data::fresh_dir(name).join("toy.bin");
        let mut bytes = Vec::new();
        for (i, l) in labels.iter().enumerate() {
            bytes.extend_from_slice(&l.to_le_bytes());
            bytes.extend_from_slice(format!("rec{i:05}").as_bytes());
        }
        std::fs::write(&path, bytes).unwrap();
        ObjectReader::open(&Location::local(path), &StorageOptions::default()).unwrap()
    }

    fn toy(labels: &[i64], per_unit: u32, partial: PartialOptions) -> Result<Dataset> {
        let file = toy_file(&format!("records-toy-{}-{per_unit}", labels.len()), labels);
        let n = labels.len() as u32;
        let units = (0..n.div_ceil(per_unit))
            .map(|k| {
                let samples = per_unit.min(n - k * per_unit);
                Unit {
                    file: 0,
                    offset: u64::from(k * per_unit) * 16,
                    len: u64::from(samples) * 16,
                    samples,
                    first: u64::from(k * per_unit),
                    inflate: None,
                    decoded_bytes: u64::from(samples) * 40 + table_bytes(samples),
                    tag: 0,
                }
            })
            .collect();
        let catalogue = Catalogue { files: vec![file], units, fields: vec!["meta".into()], classes: vec![] };
        record_dataset(Box::new(Toy), catalogue, partial)
    }

    /// A toy dataset's catalogue, to open again with changes.
    fn catalogue_of(ds: &Dataset) -> Catalogue {
        let c = ds.store_as::<RecordFiles>().unwrap().catalogue();
        Catalogue { files: c.files.clone(), units: c.units.clone(), fields: c.fields.clone(), classes: vec![] }
    }

    fn read(ds: &Dataset, i: usize) -> std::result::Result<Vec<u8>, ImageError> {
        let how = ReadCtx { epoch: 0, max_bytes: 1 << 20, planned: true, stopping: &|| false };
        let mut buf = Vec::new();
        let got = ds.read(i, &how, &mut buf)?;
        Ok(got.bytes(&buf).to_vec())
    }

    #[test]
    fn samples_are_slices_of_their_decoded_unit_with_labels_and_extras() {
        let labels: Vec<i64> = (0..10).map(|i| if i == 6 { -1 } else { i * 3 }).collect();
        let ds = toy(&labels, 4, PartialOptions::default()).unwrap();
        assert_eq!((ds.len(), ds.known_labels()), (10, None));
        let store = ds.store_as::<RecordFiles>().unwrap();
        let extras = store.extras().expect("one field");
        let blocks = ds.block_structure().unwrap();
        assert_eq!((blocks.block_starts, blocks.window_blocks), (&[0, 4, 8, 10][..], DEFAULT_WINDOW_BLOCKS));
        for i in (0..10).rev() {
            if i == 6 {
                let e = read(&ds, i).unwrap_err();
                assert_eq!((e.kind, e.message.as_str()), (ImageErrorKind::Corrupt, "record 2 is bad"));
                assert!(extras.read(i).is_err(), "a bad sample has no extras");
                continue;
            }
            assert_eq!(read(&ds, i).unwrap(), format!("rec{i:05}").as_bytes());
            assert_eq!(ds.label(i), i as i64 * 3, "the read's label");
            let native = extras.read(i).unwrap();
            assert_eq!(&*native.fields, &["meta".to_string()]);
            let want = Value::List(vec![Value::Int(i as i64), Value::Text(format!("rec{i:05}"))]);
            assert_eq!(native.values, vec![want]);
        }
        assert!(ds.sample_name(9).to_string_lossy().ends_with("toy.bin#9"));
        let stats: std::collections::HashMap<_, _> = ds.io_stats().into_iter().collect();
        assert_eq!((stats["storage_requests"], stats["storage_bytes"]), (3, 160), "each unit read once");
    }

    #[test]
    fn a_unit_that_decodes_past_its_bound_or_short_fails_whole() {
        let ds = toy(&[1, 2, 3], 3, PartialOptions::default()).unwrap();
        let mut c = catalogue_of(&ds);
        c.units[0].decoded_bytes = 100;
        let tight = record_dataset(Box::new(Toy), c, PartialOptions::default()).unwrap();
        let e = read(&tight, 1).unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::TooLarge, "{e:?}");
        assert!(e.message.contains("toy unit 0") && e.message.contains("100 bytes"), "{e:?}");
        let mut c = catalogue_of(&ds);
        c.units[0].samples = 4;
        let lying = record_dataset(Box::new(Toy), c, PartialOptions::default()).unwrap();
        let e = read(&lying, 0).unwrap_err();
        assert!(e.message.contains("holds 3 samples where its index says 4"), "{e:?}");
    }

    /// Toy, but keeping a view of every other unit's bytes past its decode (that read buffer is not reused).
    #[derive(Debug, Default)]
    struct Hoarder(std::sync::Mutex<Vec<Bytes>>);

    impl RecordFormat for Hoarder {
        fn kind(&self) -> &'static str {
            "toy"
        }

        fn decode_unit(
            &self,
            unit: &Unit,
            bytes: &Bytes,
            out: &mut UnitBuilder,
        ) -> std::result::Result<(), ImageError> {
            if unit.first.is_multiple_of(8) {
                self.0.lock().unwrap().push(bytes.slice(..1));
            }
            Toy.decode_unit(unit, bytes, out)
        }
    }

    #[test]
    fn reused_read_buffers_never_carry_one_units_bytes_into_another() {
        // 38 records in units of 4 (the last of 2), a cache of two units: every pass fetches most units again,
        // into read buffers earlier units of other sizes filled, from 4 threads at once.
        let labels: Vec<i64> = (0..38).collect();
        let tiny = PartialOptions { window_blocks: Some(1), prefetch_blocks: Some(1), ..PartialOptions::default() };
        for hoard in [false, true] {
            let ds = toy(&labels, 4, tiny).unwrap();
            let ds =
                if hoard { record_dataset(Box::new(Hoarder::default()), catalogue_of(&ds), tiny).unwrap() } else { ds };
            std::thread::scope(|s| {
                for t in 0..4usize {
                    let ds = &ds;
                    s.spawn(move || {
                        for pass in 0..3usize {
                            for k in 0..38usize {
                                let i = (k * 7 + t * 11 + pass * 5) % 38;
                                assert_eq!(read(ds, i).unwrap(), format!("rec{i:05}").as_bytes(), "sample {i}");
                                assert_eq!(ds.label(i), i as i64);
                            }
                        }
                    });
                }
            });
            let stats: std::collections::HashMap<_, _> = ds.io_stats().into_iter().collect();
            assert!(stats["storage_requests"] > 10, "units were fetched again: {stats:?}");
        }
    }

    #[test]
    fn parameters_and_counts_are_checked_when_opened() {
        let small = PartialOptions { cache_bytes: Some(100), ..PartialOptions::default() };
        assert_eq!(crate::source::config_parameter(toy(&[1; 8], 4, small)), "cache_bytes");
        let zero = PartialOptions { window_blocks: Some(0), ..PartialOptions::default() };
        assert_eq!(crate::source::config_parameter(toy(&[1; 8], 4, zero)), "window_blocks");
    }

    #[test]
    fn inflate_caps_its_output_at_the_declared_size() {
        use std::io::Write;
        let raw: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let zstd = zstd::bulk::compress(&raw, 3).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&raw).unwrap();
        let gz = gz.finish().unwrap();
        let snappy = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
        for (codec, data) in [(Codec::Zstd, &zstd), (Codec::Gzip, &gz), (Codec::Snappy, &snappy)] {
            let exact = Inflate { codec, raw_len: raw.len() as u64 };
            assert_eq!(inflate(data, exact).unwrap(), raw, "{codec:?}");
            for lie in [raw.len() as u64 - 1, raw.len() as u64 + 1, 10] {
                let e = inflate(data, Inflate { codec, raw_len: lie }).unwrap_err();
                assert_eq!(e.kind, ImageErrorKind::Corrupt, "{codec:?} {lie}: {e:?}");
            }
            let e = inflate(&data[..data.len() / 2], exact).unwrap_err();
            assert_eq!(e.kind, ImageErrorKind::Corrupt, "{codec:?} truncated");
        }
        let e = inflate(b"not zstd", Inflate { codec: Codec::Zstd, raw_len: 1 << 40 }).unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::TooLarge, "a declared size that cannot be allocated");
    }

    proptest::proptest! {
        #[test]
        fn values_round_trip(ints in proptest::collection::vec(proptest::num::i64::ANY, 0..5), text in ".{0,20}", bytes in proptest::collection::vec(0u8.., 0..20)) {
            let v = Value::List(vec![
                Value::Null, Value::Bool(true), Value::Float(1.5), Value::Text(text), Value::Bytes(bytes),
                Value::List(ints.iter().copied().map(Value::Int).collect()),
                Value::List(ints.iter().map(|&i| Value::Float(i as f64 / 3.0)).collect()),
                Value::List(vec![Value::Int(i64::MIN), Value::Int(i64::MAX), Value::Int(-1), Value::Int(0)]),
            ]);
            let mut enc = Vec::new();
            encode_value(&v, &mut enc);
            let mut b = &enc[..];
            proptest::prop_assert_eq!(decode_value(&mut b), Some(v));
            proptest::prop_assert!(b.is_empty());
            for cut in 0..enc.len() {
                let mut short = &enc[..cut];
                proptest::prop_assert_eq!(decode_value(&mut short), None);
            }
        }
    }
}
