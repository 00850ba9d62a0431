//! source/packed — the packed dataset file (`trdata.pack` writes it, `trdata.Packed` reads it): one file of
//! records in large aligned blocks, a fixed-width index and the class names, read by the workers like any other
//! source (source → plan → worker → decode). This file is the one home of its byte layout: the constants, the
//! header/index/metadata encoders ([`PackWriter`]) and decoders ([`PackedIndex`]), and the reader
//! ([`PackedFile`], `full` or `partial`). The tooling that fills a pack (decode, resize, re-encode, parallel,
//! atomic publication) is `src/pack/`.
//!
//! Learnt from the seed's DTS (blocks read whole, a per-epoch block permutation then a shuffle inside a buffer
//! of blocks, full and partial modes), FFCV's .beton (fixed-width metadata table, pages, quasi-random order), MDS
//! (index read once, shards verified by hash) and WebDataset (sequential reads of large units).
//!
//! # Byte layout (version 1, little-endian)
//!
//! ```text
//! offset 0     header, 4096 bytes (written last: a file whose header is zeros was never finished)
//!   0  magic        8  b"TRDPACK\0"
//!   8  version      u32 = 1
//!  12  header_bytes u32 = 4096
//!  16  records      u64  N, 1 ..= 2^32 - 1
//!  24  blocks       u64  B, 1 ..= N
//!  32  block_bytes  u64  target block size the writer used, 4096 ..= 2^30
//!  40  data_offset  u64  = 4096
//!  48  data_bytes   u64  multiple of 4096
//!  56  index_offset u64  = data_offset + data_bytes
//!  64  index_bytes  u64  = 32·N
//!  72  blocks_offset u64 = align4096(index_offset + index_bytes)
//!  80  blocks_bytes u64  = 24·B
//!  88  meta_offset  u64  = align4096(blocks_offset + blocks_bytes)
//!  96  meta_bytes   u64  ≤ 64 MiB
//! 104  file_bytes   u64  = meta_offset + meta_bytes, the file's exact length
//! 112  index_crc    u32  CRC32C of the index section
//! 116  blocks_crc   u32  CRC32C of the blocks section
//! 120  meta_crc     u32  CRC32C of the metadata section
//! 124  reserved     zeros up to 4092
//! 4092 header_crc   u32  CRC32C of header bytes 0..4092
//! data: B blocks, each at a 4096-aligned offset; a block holds its records back to back (record order = index
//!   order = the source's order) and is zero-padded to the next 4096 boundary. A record larger than block_bytes
//!   gets a block of its own; otherwise a block's records total at most block_bytes.
//! index: N rows of 32 bytes (memory-mappable, 4096-aligned):
//!   0 offset u64 (absolute) · 8 len u32 (≥ 1, ≤ 2^30) · 12 crc32c u32 (of the record's bytes) · 16 label i64 ·
//!   24 width u16 · 26 height u16 (0 when unknown or above 65535) · 28 format u8 · 29 subsampling u8 ·
//!   30 flags u8 · 31 channels u8
//! blocks: B rows of 24 bytes: offset u64 · bytes u64 (used, without padding) · first_record u32 · records u32
//! meta: UTF-8 JSON (packed_json.rs): {"format": "trdata.pack", "version": 1, "classes": [...],
//!   "options": {"short_side", "max_side", "quality" (int or null), "source": str, "block_bytes": int},
//!   "writer": "trdata <version>"}
//! ```
//!
//! Formats: 0 unknown, 1 jpeg, 2 png, 3 webp, 4 gif, 5 tiff, 6 bmp, 7 pnm, 8 raw (uint8 pixels,
//! height × width × channels, channels 1 or 3). Subsampling: 0 n/a, 1 4:4:4, 2 4:2:2, 3 4:2:0, 4 gray, 5 4:4:0,
//! 6 4:1:1, 7 4:4:1, 8 unknown. Flags: 1 progressive, 2 CMYK/YCCK, 4 lossless, 8 not 8-bit, 16 the header could
//! not be read when packed (the record fails at decode time, as its source file did). These fields let a
//! reader plan ROI decode and route GPU-decodable records without touching the payload.
//!
//! Version 2 adds, after the metadata, the extras section (per-record extra fields: captions, JSON, arrays) and
//! its header fields at 128..156; its layout and checks are in `packed_extras.rs`. A pack without extras is
//! version 1.
//!
//! # What is checked, and when
//! At open, before anything is allocated from a size in the file: the length (≥ 4096; truncated files and
//! files with bytes appended are refused because `file_bytes` is the exact length), the magic, the header CRC, the
//! version, every count and offset against the fixed layout above (so no section can be larger than the file),
//! then the CRCs of the index, blocks and metadata sections, then their structure: blocks in order, aligned,
//! inside the data region and not overlapping; records inside their block, in order, with known formats and raw
//! sizes that match; class names distinct and, when there are names, every label one of them ([`check_classes`]).
//! Any failure is a `SourceError` naming the file. Every record read is CRC32C-checked
//! (hardware-accelerated, ~1 % of a decode; one home, [`PackedIndex::check_record`]): a flipped byte is
//! `ImageErrorKind::Corrupt` naming the record, never garbage pixels. Bytes damaged on their way (a bad link, a
//! faulty proxy) are not the file's: partial mode checks every record of a block when it is fetched, before the
//! block enters the memory or the disk cache, and reads a failing block again from the store (up to
//! [`BLOCK_REFETCHES`] times: [`block_fetch`]); full mode reads a record that fails once more from the store, its
//! own range, as does an extras read. Only a record that fails every fresh read is the sample's error; each read
//! made again counts in `storage_refetches`.
//!
//! # Modes
//! - `full`: the data region is read into memory once at open (one allocation, `Memory` error if it does not fit;
//!   the read itself prefaults every page; NUMA placement is first touch by the opening thread — the workers may
//!   sit on another node); records are served as slices of it, no copy.
//! - `partial`: blocks are read whole (one `ObjectReader::read_range`: a pread, or one ranged GET with its retries:
//!   `block_fetch`, the one fetch step) into a [`BlockCache`] shared by all workers and bounded by `cache_bytes`
//!   (default (`window_blocks` + max(2 × the CPUs this process may use, `prefetch_blocks`)) × the largest block;
//!   at least (`window_blocks` + `prefetch_blocks`) × the largest block). The plan (plan/mod.rs) orders records
//!   so that workers move through windows of `window_blocks` blocks ([`Dataset::block_structure`]); a loader
//!   hands the cache each epoch's block order ([`BlockSchedule`]), so the cache fetches the next
//!   `prefetch_blocks` blocks of the order in the background (URLs and local files alike: tasks on the storage
//!   runtime's blocking pool) and evicts the block needed furthest in the future. Memory: block bytes alive ≤
//!   `cache_bytes` + readers × the largest block (block_cache.rs has the protocol and the bound).

use super::block_cache::BlockCache;
use super::block_cache::FetchBlock;
use super::packed_extras::{
    EXTRAS_ROW_BYTES, EXTRAS_VERSION, Entry, ExtraKind, ExtrasIndex, ExtrasWriter, decode_record,
};
use super::packed_json::{self as json, Json};
use super::{BlockStructure, Dataset, ImageStore, ReadCtx, SampleBytes, StoreBytes, fingerprint, storage_stats};
use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use crate::param::{Choice, IntParam};
use crate::storage::disk_cache::{BlockKey, DiskCache};
use crate::storage::{Location, ObjectReader, StorageOptions};
use std::ffi::OsString;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// The file's first 8 bytes.
pub const MAGIC: [u8; 8] = *b"TRDPACK\0";
/// The layout version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the header.
pub const HEADER_BYTES: u64 = 4096;
/// Alignment of blocks and sections (a page: blocks are read and mapped whole).
pub const ALIGN_BYTES: u64 = 4096;
/// Size of one index row.
pub const INDEX_ROW_BYTES: u64 = 32;
/// Size of one blocks-table row.
pub const BLOCK_ROW_BYTES: u64 = 24;
/// Default target size of a block: large sequential reads, ~70 ImageNet JPEGs.
pub const DEFAULT_BLOCK_BYTES: u64 = 8 << 20;
/// Largest record (the loader's `MAX_FILE_BYTES` for a file).
pub const MAX_RECORD_BYTES: u64 = 1 << 30;
/// Largest metadata section (class names of even huge label sets fit).
pub const MAX_META_BYTES: u64 = 64 << 20;
/// Default `window_blocks` of partial mode: 16 × 8 MiB = 128 MiB shuffled together.
/// Most bytes of the extras region one read of [`PackedFile::extras_field`] takes (a larger record alone).
pub const EXTRAS_SCAN_BYTES: u64 = 64 << 20;
pub const DEFAULT_WINDOW_BLOCKS: u32 = 16;

/// `block_bytes` (the writer's target block size).
pub const BLOCK_BYTES: IntParam = IntParam::new("block_bytes", 4096, 1 << 30);
/// `window_blocks` (partial mode: blocks shuffled together).
pub const WINDOW_BLOCKS: IntParam = IntParam::new("window_blocks", 1, 1 << 20);
/// `cache_bytes` (partial mode: bytes of blocks kept in memory); must also hold window_blocks + prefetch_blocks
/// of the file's largest blocks (checked in `open`, once the blocks are known).
pub const CACHE_BYTES: IntParam = IntParam::new("cache_bytes", 4096, 1 << 50);
/// `prefetch_blocks` (partial mode: blocks fetched ahead of the furthest block asked for, in the plan's order).
pub const PREFETCH_BLOCKS: IntParam = IntParam::new("prefetch_blocks", 0, 1024);
/// Default `prefetch_blocks`: the window (`window_blocks`, at most 1024), or what an explicit `cache_bytes` leaves
/// beside the window if that is less. A window's records are shuffled together, so the workers entering a window
/// ask for all its blocks at once: only a read-ahead of a whole window has the next one fetched while this one is
/// decoded. Measured (benches/peers/streaming.py, 20 ms per GET, 1 Gbit/s, 2 workers): 4 blocks → 0.49× the local
/// file's rate, 12 → 0.59×, 16 (the window) → 0.90×, the link's limit.
pub fn default_prefetch_blocks(window: u32, cache_bytes: Option<u64>, largest_block: u64) -> u32 {
    let fits = cache_bytes.map_or(u64::MAX, |c| (c / largest_block.max(1)).saturating_sub(u64::from(window)));
    u64::from(window).min(fits).min(PREFETCH_BLOCKS.max as u64) as u32
}

/// Partial mode's parameters as the user gave them (None = default), checked by [`PackedFile::open_at`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartialOptions {
    /// `window_blocks`: blocks shuffled together.
    pub window_blocks: Option<i128>,
    /// `cache_bytes`: the cache's byte bound.
    pub cache_bytes: Option<i128>,
    /// `prefetch_blocks`: the read-ahead.
    pub prefetch_blocks: Option<i128>,
}

/// Partial mode's parameters, their ranges checked ([`PartialOptions::checked`]; None = default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartialParams {
    /// Blocks shuffled together.
    pub window: u32,
    prefetch: Option<u32>,
    cache_bytes: Option<u64>,
}

impl PartialOptions {
    /// The ranges checked (before anything is read).
    pub fn checked(&self) -> Result<PartialParams> {
        Ok(PartialParams {
            window: WINDOW_BLOCKS.check(self.window_blocks.unwrap_or(i128::from(DEFAULT_WINDOW_BLOCKS)))?,
            prefetch: self.prefetch_blocks.map(|v| PREFETCH_BLOCKS.check(v)).transpose()?,
            cache_bytes: self.cache_bytes.map(|v| CACHE_BYTES.check(v)).transpose()?,
        })
    }
}

impl PartialParams {
    /// (prefetch_blocks, cache_bytes) for blocks of at most `largest` bytes ([`default_prefetch_blocks`]; cache
    /// default (window + max(2 × usable CPUs, prefetch)) × `largest`), the cache's minimum (window + prefetch
    /// largest blocks) checked: `what` names the largest block in the error.
    pub fn sized(&self, largest: u64, what: &str) -> Result<(u32, u64)> {
        let window = self.window;
        let prefetch = self.prefetch.unwrap_or_else(|| default_prefetch_blocks(window, self.cache_bytes, largest));
        let minimum = u64::from(window + prefetch) * largest;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        let cache_bytes =
            self.cache_bytes.unwrap_or(minimum.max((u64::from(window) + (2 * cpus).max(prefetch.into())) * largest));
        if cache_bytes < minimum {
            return Err(TrdataError::config(
                CACHE_BYTES.name,
                format!(
                    "{cache_bytes} must be at least {minimum}: (window_blocks {window} + prefetch_blocks {prefetch}) × \
                     {what} ({largest} bytes), or every window's blocks would be read again for most of their records"
                ),
            ));
        }
        Ok((prefetch, cache_bytes))
    }
}

/// How a packed file is held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackedMode {
    /// The data region read into memory once.
    Full,
    /// Blocks streamed through a bounded cache, in the plan's block order.
    Partial,
}

/// `mode` values of `trdata.Packed`.
pub const MODE: Choice<PackedMode> =
    Choice { name: "mode", values: &[("full", PackedMode::Full), ("partial", PackedMode::Partial)] };

/// Container format of a record (index byte 28).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordFormat {
    /// Not recognised when packed (the bytes are kept; decoding them fails as it did for the source).
    Unknown,
    /// JPEG.
    Jpeg,
    /// PNG.
    Png,
    /// WebP.
    WebP,
    /// GIF.
    Gif,
    /// TIFF.
    Tiff,
    /// BMP.
    Bmp,
    /// Netpbm.
    Pnm,
    /// Raw uint8 pixels, height × width × channels.
    Raw,
}

const FORMATS: [(RecordFormat, &str); 9] = [
    (RecordFormat::Unknown, "unknown"),
    (RecordFormat::Jpeg, "jpeg"),
    (RecordFormat::Png, "png"),
    (RecordFormat::WebP, "webp"),
    (RecordFormat::Gif, "gif"),
    (RecordFormat::Tiff, "tiff"),
    (RecordFormat::Bmp, "bmp"),
    (RecordFormat::Pnm, "pnm"),
    (RecordFormat::Raw, "raw"),
];

impl RecordFormat {
    /// The index byte.
    pub fn code(self) -> u8 {
        FORMATS.iter().position(|(f, _)| *f == self).unwrap_or(0) as u8
    }

    /// The format of index byte `code`, if known.
    pub fn from_code(code: u8) -> Option<Self> {
        FORMATS.get(usize::from(code)).map(|(f, _)| *f)
    }

    /// Lower-case name (`packed_info`'s "formats").
    pub fn name(self) -> &'static str {
        FORMATS.iter().find(|(f, _)| *f == self).map_or("unknown", |(_, n)| n)
    }
}

/// Names of the subsampling codes (index byte 29), by code.
pub const SUBSAMPLING_NAMES: [&str; 9] = ["", "444", "422", "420", "gray", "440", "411", "441", "unknown"];

/// Flag bit: progressive JPEG.
pub const FLAG_PROGRESSIVE: u8 = 1;
/// Flag bit: CMYK or YCCK JPEG.
pub const FLAG_CMYK: u8 = 2;
/// Flag bit: lossless JPEG (no DCT scaling, no ROI).
pub const FLAG_LOSSLESS: u8 = 4;
/// Flag bit: not 8 bits per sample (12-bit JPEG).
pub const FLAG_HIGH_PRECISION: u8 = 8;
/// Flag bit: the header could not be read when packed.
pub const FLAG_UNREADABLE: u8 = 16;
const KNOWN_FLAGS: u8 = 31;

/// What the index says about a record besides where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMeta {
    /// Width in pixels (0 = unknown or above 65535).
    pub width: u16,
    /// Height in pixels (0 = unknown or above 65535).
    pub height: u16,
    /// Container format.
    pub format: RecordFormat,
    /// Subsampling code ([`SUBSAMPLING_NAMES`]).
    pub subsampling: u8,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// Channels (raw: 1 or 3; encoded: 3, or 1 for gray; 0 unknown).
    pub channels: u8,
}

impl RecordMeta {
    /// Raw pixels of `height × width × channels`.
    pub fn raw(height: u16, width: u16, channels: u8) -> Self {
        Self { width, height, format: RecordFormat::Raw, subsampling: 0, flags: 0, channels }
    }

    /// Whether nvJPEG-style GPU decoding can take the record: a baseline or progressive 8-bit lossy JPEG in
    /// YCbCr/gray with a named subsampling.
    pub fn gpu_decodable(&self) -> bool {
        self.format == RecordFormat::Jpeg
            && self.flags & (FLAG_CMYK | FLAG_LOSSLESS | FLAG_HIGH_PRECISION | FLAG_UNREADABLE) == 0
            && (1..=7).contains(&self.subsampling)
    }
}

/// One index row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexRow {
    /// Absolute file offset of the record.
    pub offset: u64,
    /// Record length in bytes.
    pub len: u32,
    /// CRC32C of the record's bytes.
    pub crc32c: u32,
    /// Label.
    pub label: i64,
    /// Size, format, subsampling, flags.
    pub meta: RecordMeta,
}

impl IndexRow {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.crc32c.to_le_bytes());
        out.extend_from_slice(&self.label.to_le_bytes());
        out.extend_from_slice(&self.meta.width.to_le_bytes());
        out.extend_from_slice(&self.meta.height.to_le_bytes());
        out.extend_from_slice(&[self.meta.format.code(), self.meta.subsampling, self.meta.flags, self.meta.channels]);
    }

    fn decode(b: &[u8], i: usize) -> std::result::Result<Self, String> {
        let format =
            RecordFormat::from_code(b[28]).ok_or_else(|| format!("record {i} has unknown format {}", b[28]))?;
        Ok(Self {
            offset: le64(b, 0),
            len: le32(b, 8),
            crc32c: le32(b, 12),
            label: le64(b, 16) as i64,
            meta: RecordMeta {
                width: u16::from_le_bytes([b[24], b[25]]),
                height: u16::from_le_bytes([b[26], b[27]]),
                format,
                subsampling: b[29],
                flags: b[30],
                channels: b[31],
            },
        })
    }
}

/// One row of the blocks table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRow {
    /// Absolute, 4096-aligned offset.
    pub offset: u64,
    /// Bytes used by its records (the padding after them excluded).
    pub bytes: u64,
    /// Index of its first record.
    pub first_record: u32,
    /// Number of its records (≥ 1).
    pub records: u32,
}

impl BlockRow {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.bytes.to_le_bytes());
        out.extend_from_slice(&self.first_record.to_le_bytes());
        out.extend_from_slice(&self.records.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Self {
        Self { offset: le64(b, 0), bytes: le64(b, 8), first_record: le32(b, 16), records: le32(b, 20) }
    }
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn align_up(x: u64) -> Option<u64> {
    x.checked_add(ALIGN_BYTES - 1).map(|v| v / ALIGN_BYTES * ALIGN_BYTES)
}

/// The decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackHeader {
    /// Layout version.
    pub version: u32,
    /// N.
    pub records: u64,
    /// B.
    pub blocks: u64,
    /// The writer's target block size.
    pub block_bytes: u64,
    /// Bytes of the data region (from offset 4096).
    pub data_bytes: u64,
    /// Offset of the index.
    pub index_offset: u64,
    /// Offset of the blocks table.
    pub blocks_offset: u64,
    /// Offset of the metadata.
    pub meta_offset: u64,
    /// Length of the metadata.
    pub meta_bytes: u64,
    /// Exact file length.
    pub file_bytes: u64,
    /// CRC32C of the index.
    pub index_crc: u32,
    /// CRC32C of the blocks table.
    pub blocks_crc: u32,
    /// CRC32C of the metadata.
    pub meta_crc: u32,
    /// Where the extras are (version 2; None in version 1).
    pub extras: Option<ExtrasHeader>,
}

/// The header fields of the extras section (packed_extras.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtrasHeader {
    /// Offset of the extras index.
    pub index_offset: u64,
    /// Offset of the extras data.
    pub offset: u64,
    /// Length of the extras data.
    pub bytes: u64,
    /// CRC32C of the extras index.
    pub index_crc: u32,
}

impl ExtrasHeader {
    /// Where the extras sections of `records` records with `bytes` bytes of extras start after a file whose other
    /// sections end at `end`; None on overflow.
    fn after(end: u64, records: u64, bytes: u64, index_crc: u32) -> Option<Self> {
        let index_offset = align_up(end)?;
        let offset = index_offset.checked_add(records.checked_mul(EXTRAS_ROW_BYTES)?)?;
        offset.checked_add(bytes)?;
        Some(Self { index_offset, offset, bytes, index_crc })
    }

    /// Where the file ends.
    fn end(&self) -> u64 {
        self.offset + self.bytes
    }
}

impl PackHeader {
    /// Index section length.
    pub fn index_bytes(&self) -> u64 {
        self.records * INDEX_ROW_BYTES
    }

    /// Blocks section length.
    pub fn blocks_bytes(&self) -> u64 {
        self.blocks * BLOCK_ROW_BYTES
    }

    /// The sections' positions for N records, B blocks, a data region and a metadata section of these sizes:
    /// (index_offset, blocks_offset, meta_offset, file_bytes), None on overflow.
    fn layout(records: u64, blocks: u64, data_bytes: u64, meta_bytes: u64) -> Option<(u64, u64, u64, u64)> {
        let index_offset = HEADER_BYTES.checked_add(data_bytes)?;
        let blocks_offset = align_up(index_offset.checked_add(records.checked_mul(INDEX_ROW_BYTES)?)?)?;
        let meta_offset = align_up(blocks_offset.checked_add(blocks.checked_mul(BLOCK_ROW_BYTES)?)?)?;
        Some((index_offset, blocks_offset, meta_offset, meta_offset.checked_add(meta_bytes)?))
    }

    /// The 4096 header bytes, CRC included.
    pub fn encode(&self) -> Vec<u8> {
        let mut h = Vec::with_capacity(HEADER_BYTES as usize);
        h.extend_from_slice(&MAGIC);
        h.extend_from_slice(&self.version.to_le_bytes());
        h.extend_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
        for v in [
            self.records,
            self.blocks,
            self.block_bytes,
            HEADER_BYTES,
            self.data_bytes,
            self.index_offset,
            self.index_bytes(),
            self.blocks_offset,
            self.blocks_bytes(),
            self.meta_offset,
            self.meta_bytes,
            self.file_bytes,
        ] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        for v in [self.index_crc, self.blocks_crc, self.meta_crc] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        if let Some(e) = self.extras {
            h.resize(128, 0);
            for v in [e.index_offset, e.offset, e.bytes] {
                h.extend_from_slice(&v.to_le_bytes());
            }
            h.extend_from_slice(&e.index_crc.to_le_bytes());
        }
        h.resize(HEADER_BYTES as usize - 4, 0);
        let crc = crc32c::crc32c(&h);
        h.extend_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decode and check the header (`head` = the file's first bytes, up to 4096) of a file of `file_len` bytes:
    /// every rule of "What is checked" that needs no section bytes. The message says what is wrong.
    pub fn decode(head: &[u8], file_len: u64) -> std::result::Result<Self, String> {
        if !head.starts_with(&MAGIC) {
            if head.len() >= 8 && head[..8].iter().all(|&b| b == 0) {
                return Err("is an unfinished trdata pack (its header was never written: the writer was \
                            interrupted); pack again"
                    .into());
            }
            let shown: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
            return Err(format!(
                "is not a trdata pack file (it starts with {}, not the magic \"TRDPACK\\0\")",
                if shown.is_empty() { "nothing: it is empty".to_string() } else { shown.join(" ") }
            ));
        }
        if (head.len() as u64) < HEADER_BYTES || file_len < HEADER_BYTES {
            return Err(format!("is truncated: {file_len} bytes, shorter than the {HEADER_BYTES}-byte header"));
        }
        let stored = le32(head, HEADER_BYTES as usize - 4);
        let crc = crc32c::crc32c(&head[..HEADER_BYTES as usize - 4]);
        if stored != crc {
            return Err(format!("has a damaged header (CRC32C {crc:08x}, stored {stored:08x})"));
        }
        let version = le32(head, 8);
        if version != FORMAT_VERSION && version != EXTRAS_VERSION {
            return Err(format!(
                "is pack format version {version}; this trdata reads versions {FORMAT_VERSION} and \
                 {EXTRAS_VERSION} (upgrade trdata, or pack the dataset again)"
            ));
        }
        let f = |i: usize| le64(head, 16 + 8 * i);
        let (records, blocks, block_bytes, data_offset, data_bytes) = (f(0), f(1), f(2), f(3), f(4));
        let (index_offset, index_bytes, blocks_offset, blocks_bytes) = (f(5), f(6), f(7), f(8));
        let (meta_offset, meta_bytes, file_bytes) = (f(9), f(10), f(11));
        let bad = |what: String| Err(format!("has an inconsistent header: {what}"));
        if le32(head, 12) as u64 != HEADER_BYTES || data_offset != HEADER_BYTES {
            return bad(format!("header size {} / data offset {data_offset}, not {HEADER_BYTES}", le32(head, 12)));
        }
        if records == 0 || records > u64::from(u32::MAX) {
            return bad(format!("{records} records (must be 1 ..= 2**32 - 1)"));
        }
        if blocks == 0 || blocks > records {
            return bad(format!("{blocks} blocks for {records} records"));
        }
        if !(BLOCK_BYTES.min as u64..=BLOCK_BYTES.max as u64).contains(&block_bytes) {
            return bad(format!("block size {block_bytes}"));
        }
        if data_bytes % ALIGN_BYTES != 0 || data_bytes < blocks * ALIGN_BYTES {
            return bad(format!("data region of {data_bytes} bytes for {blocks} aligned blocks"));
        }
        if meta_bytes > MAX_META_BYTES {
            return bad(format!("metadata of {meta_bytes} bytes (at most {MAX_META_BYTES})"));
        }
        let mut want = Self::layout(records, blocks, data_bytes, meta_bytes);
        let extras = (version == EXTRAS_VERSION).then(|| ExtrasHeader {
            index_offset: le64(head, 128),
            offset: le64(head, 136),
            bytes: le64(head, 144),
            index_crc: le32(head, 152),
        });
        if let (Some(e), Some(w)) = (extras, want.as_mut()) {
            // version 2: the extras index and data follow the metadata, and end the file
            let placed = ExtrasHeader::after(w.3, records, e.bytes, e.index_crc);
            if placed != Some(e) {
                return bad(format!("extras at {e:?} do not follow the metadata ending at {}", w.3));
            }
            w.3 = e.end();
        }
        let got = (index_offset, blocks_offset, meta_offset, file_bytes);
        if want != Some(got) || index_bytes != records * INDEX_ROW_BYTES || blocks_bytes != blocks * BLOCK_ROW_BYTES {
            return bad(format!(
                "sections at {got:?} (index {index_bytes} bytes, blocks {blocks_bytes} bytes) do not follow the \
                 layout {want:?}"
            ));
        }
        if file_len < file_bytes {
            return Err(format!("is truncated: {file_len} bytes, its header says {file_bytes}"));
        }
        if file_len > file_bytes {
            return Err(format!(
                "has {} bytes after its end ({file_len} bytes, its header says {file_bytes})",
                file_len - file_bytes
            ));
        }
        Ok(Self {
            version,
            records,
            blocks,
            block_bytes,
            data_bytes,
            index_offset,
            blocks_offset,
            meta_offset,
            meta_bytes,
            file_bytes,
            index_crc: le32(head, 112),
            blocks_crc: le32(head, 116),
            meta_crc: le32(head, 120),
            extras,
        })
    }
}

/// The write options recorded in the metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PackOptions {
    /// Records re-encoded with the short side resized to this (when larger).
    pub short_side: Option<u32>,
    /// Records re-encoded with the long side resized to this (when larger).
    pub max_side: Option<u32>,
    /// JPEG quality of re-encoded records (None: the source's bytes are kept).
    pub quality: Option<u8>,
    /// The kind of source packed ("files", "spans", "bytes", "arrays", "packed").
    pub source: String,
    /// The packed source's identity (`Dataset::identity`), the pack's own: a checkpoint taken over the source
    /// resumes over its pack and the other way round. Empty in a pack of a trdata that did not record it.
    pub identity: String,
}

/// The metadata section: class names and write options.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PackMeta {
    /// Class names (bytes, as the source had them).
    pub classes: Vec<OsString>,
    /// How the records were written.
    pub options: PackOptions,
    /// The extra fields' names (version 2; empty in version 1).
    pub extras: Vec<String>,
}

impl PackMeta {
    /// The JSON text of the metadata section (`block_bytes` is the writer's).
    pub fn to_json(&self, block_bytes: u64) -> String {
        let version = if self.extras.is_empty() { FORMAT_VERSION } else { EXTRAS_VERSION };
        let mut s = format!("{{\"format\": \"trdata.pack\", \"version\": {version}, \"classes\": [");
        let list = |s: &mut String, items: &mut dyn Iterator<Item = &[u8]>| {
            for (i, c) in items.enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                json::write_str(s, c);
            }
        };
        list(&mut s, &mut self.classes.iter().map(|c| c.as_bytes()));
        if !self.extras.is_empty() {
            s.push_str("], \"extras\": [");
            list(&mut s, &mut self.extras.iter().map(|c| c.as_bytes()));
        }
        let opt = |v: Option<u32>| v.map_or("null".to_string(), |v| v.to_string());
        let o = &self.options;
        s.push_str(&format!(
            "], \"options\": {{\"short_side\": {}, \"max_side\": {}, \"quality\": {}, \"source\": ",
            opt(o.short_side),
            opt(o.max_side),
            opt(o.quality.map(u32::from))
        ));
        json::write_str(&mut s, o.source.as_bytes());
        s.push_str(", \"identity\": ");
        json::write_str(&mut s, o.identity.as_bytes());
        s.push_str(&format!(
            ", \"block_bytes\": {block_bytes}}}, \"writer\": \"trdata {}\"}}",
            env!("CARGO_PKG_VERSION")
        ));
        s
    }

    /// Parse the metadata section.
    pub fn from_json(text: &[u8]) -> std::result::Result<Self, String> {
        let v = json::parse(text)?;
        if v.get("format") != Some(&Json::Str(b"trdata.pack".to_vec())) {
            return Err("metadata is not a trdata.pack object".into());
        }
        let Some(Json::Array(names)) = v.get("classes") else { return Err("metadata has no class list".into()) };
        let classes = names
            .iter()
            .map(|n| match n {
                Json::Str(b) => Ok(OsString::from_vec(b.clone())),
                _ => Err("a class name is not a string".to_string()),
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let o = v.get("options");
        let int = |key: &str, max: i128| -> std::result::Result<Option<u32>, String> {
            match o.and_then(|o| o.get(key)) {
                None | Some(Json::Null) => Ok(None),
                Some(Json::Int(i)) if (1..=max).contains(i) => Ok(Some(*i as u32)),
                Some(other) => Err(format!("metadata option {key} = {other:?} is out of range")),
            }
        };
        let text = |key: &str| match o.and_then(|o| o.get(key)) {
            Some(Json::Str(s)) => String::from_utf8_lossy(s).into_owned(),
            _ => String::new(),
        };
        let (source, identity) = (text("source"), text("identity"));
        let extras = match v.get("extras") {
            None => Vec::new(),
            Some(Json::Array(names)) => names
                .iter()
                .map(|n| match n {
                    Json::Str(b) => String::from_utf8(b.clone()).map_err(|_| "an extra field name is not UTF-8".into()),
                    _ => Err("an extra field name is not a string".to_string()),
                })
                .collect::<std::result::Result<Vec<_>, _>>()?,
            Some(_) => return Err("metadata's extras is not a list".into()),
        };
        Ok(Self {
            extras,
            classes,
            options: PackOptions {
                short_side: int("short_side", 65_535)?,
                max_side: int("max_side", 65_535)?,
                quality: int("quality", 100)?.map(|q| q as u8),
                source,
                identity,
            },
        })
    }
}

/// The class rule of a pack, checked by the writer before any work and by the reader at open: class names are
/// distinct (torchvision's `class_to_idx` would silently collapse two), and when there are names every label
/// names one of them (`0 <= label < len(classes)`), as `classes[label]` must work. Without names, labels are
/// whatever the source held.
pub fn check_classes(classes: &[OsString], labels: impl Iterator<Item = i64>) -> std::result::Result<(), String> {
    let mut seen = std::collections::HashMap::with_capacity(classes.len());
    for (i, c) in classes.iter().enumerate() {
        if let Some(first) = seen.insert(c.as_os_str(), i) {
            return Err(format!("has class name {c:?} twice (classes {first} and {i}): class names must be distinct"));
        }
    }
    if classes.is_empty() {
        return Ok(());
    }
    let n = classes.len() as i64;
    match labels.enumerate().find(|&(_, l)| !(0..n).contains(&l)) {
        Some((i, l)) => Err(format!("has label {l} at record {i}, outside the {n} classes (0 ..= {})", n - 1)),
        None => Ok(()),
    }
}

/// Writes the layout to `out` (a file, or memory in tests and the fuzz target): records in order, then
/// [`finish`](Self::finish) writes the index, the blocks table, the metadata and — last — the header. Until the
/// header is written the first 4096 bytes are zeros, so an interrupted write never looks like a pack.
#[derive(Debug)]
pub struct PackWriter<W: Write + Seek> {
    out: W,
    block_bytes: u64,
    pos: u64,
    rows: Vec<IndexRow>,
    blocks: Vec<BlockRow>,
    open: Option<BlockRow>,
    /// The extras of the records so far, once any record had some (packed_extras.rs).
    extras: Option<ExtrasWriter>,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl<W: Write + Seek> PackWriter<W> {
    /// Start a pack at the current position 0 of `out` with blocks of about `block_bytes` (BLOCK_BYTES' range).
    pub fn new(mut out: W, block_bytes: u64) -> io::Result<Self> {
        if !(BLOCK_BYTES.min as u64..=BLOCK_BYTES.max as u64).contains(&block_bytes) {
            return Err(invalid(format!("block size {block_bytes}")));
        }
        out.write_all(&[0u8; HEADER_BYTES as usize])?;
        Ok(Self { out, block_bytes, pos: HEADER_BYTES, rows: Vec::new(), blocks: Vec::new(), open: None, extras: None })
    }

    /// Records written so far.
    pub fn records(&self) -> usize {
        self.rows.len()
    }

    /// Bytes written so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    fn pad(&mut self) -> io::Result<()> {
        let padded = align_up(self.pos).ok_or_else(|| invalid("file too large".into()))?;
        let zeros = [0u8; ALIGN_BYTES as usize];
        self.out.write_all(&zeros[..(padded - self.pos) as usize])?;
        self.pos = padded;
        Ok(())
    }

    fn close_block(&mut self) -> io::Result<()> {
        if let Some(b) = self.open.take() {
            self.blocks.push(b);
            self.pad()?;
        }
        Ok(())
    }

    /// Append one record (1 ..= 2^30 bytes) with its label and index fields.
    pub fn push(&mut self, bytes: &[u8], label: i64, meta: RecordMeta) -> io::Result<()> {
        let len = bytes.len() as u64;
        if len == 0 || len > MAX_RECORD_BYTES {
            return Err(invalid(format!("a record of {len} bytes (must be 1 ..= {MAX_RECORD_BYTES})")));
        }
        if self.rows.len() >= u32::MAX as usize {
            return Err(invalid("more than 2**32 - 1 records".into()));
        }
        if self.open.is_some_and(|b| b.bytes + len > self.block_bytes) {
            self.close_block()?;
        }
        let first = self.rows.len() as u32;
        let block = self.open.get_or_insert(BlockRow { offset: self.pos, bytes: 0, first_record: first, records: 0 });
        block.bytes += len;
        block.records += 1;
        self.out.write_all(bytes)?;
        self.rows.push(IndexRow { offset: self.pos, len: len as u32, crc32c: crc32c::crc32c(bytes), label, meta });
        self.pos += len;
        Ok(())
    }

    /// Give the last record pushed its extra fields: (name, kind, value) (packed_extras.rs). Records without
    /// a call have none; the first call makes the file a version 2 pack.
    pub fn push_extras(&mut self, values: &[(String, ExtraKind, Vec<u8>)]) -> io::Result<()> {
        let Some(last) = self.rows.len().checked_sub(1) else {
            return Err(invalid("extras before any record".into()));
        };
        let extras = self.extras.get_or_insert_default();
        if extras.records() > last {
            return Err(invalid(format!("record {last} was given extras twice")));
        }
        extras.pad_to(last);
        extras.push(values)
    }

    /// Write the index, blocks table and metadata (with the extra fields' names, if any record had extras) and
    /// the extras, then the header at offset 0; flush. Returns the output and the header (the caller syncs and
    /// publishes the file).
    pub fn finish(mut self, meta: &PackMeta) -> io::Result<(W, PackHeader)> {
        if self.rows.is_empty() {
            return Err(invalid("a pack needs at least one record".into()));
        }
        self.close_block()?;
        let data_bytes = self.pos - HEADER_BYTES;
        let mut index = Vec::with_capacity(self.rows.len() * INDEX_ROW_BYTES as usize);
        for r in &self.rows {
            r.encode(&mut index);
        }
        let mut blocks = Vec::with_capacity(self.blocks.len() * BLOCK_ROW_BYTES as usize);
        for b in &self.blocks {
            b.encode(&mut blocks);
        }
        if let Some(e) = self.extras.as_mut() {
            e.pad_to(self.rows.len());
        }
        let meta =
            PackMeta { extras: self.extras.as_ref().map_or_else(Vec::new, |e| e.names().to_vec()), ..meta.clone() };
        let meta_text = meta.to_json(self.block_bytes).into_bytes();
        if meta_text.len() as u64 > MAX_META_BYTES {
            return Err(invalid(format!("metadata of {} bytes (class names too long)", meta_text.len())));
        }
        let (records, nblocks) = (self.rows.len() as u64, self.blocks.len() as u64);
        let (index_offset, blocks_offset, meta_offset, file_bytes) =
            PackHeader::layout(records, nblocks, data_bytes, meta_text.len() as u64)
                .ok_or_else(|| invalid("file too large".into()))?;
        self.out.write_all(&index)?;
        self.pos += index.len() as u64;
        self.pad()?;
        self.out.write_all(&blocks)?;
        self.pos += blocks.len() as u64;
        self.pad()?;
        self.out.write_all(&meta_text)?;
        self.pos += meta_text.len() as u64;
        debug_assert_eq!((self.pos, index_offset), (file_bytes, HEADER_BYTES + data_bytes));
        let _ = (blocks_offset, meta_offset);
        let mut extras_header = None;
        if let Some(e) = self.extras.take() {
            let placed =
                ExtrasHeader::after(file_bytes, records, 0, 0).ok_or_else(|| invalid("file too large".into()))?;
            let (index, bytes) = e.sections(placed.offset);
            self.pad()?;
            self.out.write_all(&index)?;
            self.out.write_all(bytes)?;
            self.pos += (index.len() + bytes.len()) as u64;
            let h = ExtrasHeader { bytes: bytes.len() as u64, index_crc: crc32c::crc32c(&index), ..placed };
            debug_assert_eq!(self.pos, h.end());
            extras_header = Some(h);
        }
        let header = PackHeader {
            version: if extras_header.is_some() { EXTRAS_VERSION } else { FORMAT_VERSION },
            extras: extras_header,
            records,
            blocks: nblocks,
            block_bytes: self.block_bytes,
            data_bytes,
            index_offset,
            blocks_offset,
            meta_offset,
            meta_bytes: meta_text.len() as u64,
            file_bytes: extras_header.map_or(file_bytes, |e| e.end()),
            index_crc: crc32c::crc32c(&index),
            blocks_crc: crc32c::crc32c(&blocks),
            meta_crc: crc32c::crc32c(&meta_text),
        };
        self.out.seek(SeekFrom::Start(0))?;
        self.out.write_all(&header.encode())?;
        self.out.flush()?;
        Ok((self.out, header))
    }
}

/// Header, index, blocks table and metadata of a pack, checked (everything but the data region).
#[derive(Debug, Clone)]
pub struct PackedIndex {
    /// The header.
    pub header: PackHeader,
    /// One row per record.
    pub rows: Vec<IndexRow>,
    /// One row per block.
    pub blocks: Vec<BlockRow>,
    /// Class names and write options.
    pub meta: PackMeta,
    /// The extra fields' names and one row per record (version 2).
    pub extras: Option<ExtrasIndex>,
}

impl PackHeader {
    /// Extras index section: (offset, length); (0, 0) in version 1.
    pub fn extras_index(&self) -> (u64, u64) {
        self.extras.map_or((0, 0), |e| (e.index_offset, self.records * EXTRAS_ROW_BYTES))
    }
}

impl PackedIndex {
    /// Parse a whole pack held in memory (tests, the fuzz target). Errors are the messages `open` reports.
    pub fn from_bytes(file: &[u8]) -> std::result::Result<Self, String> {
        let header = PackHeader::decode(&file[..file.len().min(HEADER_BYTES as usize)], file.len() as u64)?;
        // decode checked file_bytes == file.len() and the layout: every range below lies inside `file`.
        let at = |off: u64, len: u64| &file[off as usize..(off + len) as usize];
        Self::from_sections(
            header,
            at(header.index_offset, header.index_bytes()),
            at(header.blocks_offset, header.blocks_bytes()),
            at(header.meta_offset, header.meta_bytes),
            at(header.extras_index().0, header.extras_index().1),
        )
    }

    /// Read and check the pack at `path` (not its data region). Errors are `SourceError`s naming the file.
    pub fn open(path: &Path) -> Result<Self> {
        Self::read(&ObjectReader::open_local(path)?)
    }

    /// Read and check the pack behind `reader` (a local file or an object; not its data region). Errors are
    /// `SourceError`s naming it.
    pub fn read(reader: &ObjectReader) -> Result<Self> {
        let fail = |message: String| reader.source_error(message);
        let io_fail = |e: ImageError| fail(format!("cannot be read: {}", e.message));
        let len = reader.size();
        let mut head = Vec::new();
        reader.read_range(0, len.min(HEADER_BYTES), HEADER_BYTES, &mut head).map_err(io_fail)?;
        let header = PackHeader::decode(&head, len).map_err(fail)?;
        // n ≤ the object's length (checked by decode); read in parts, so that memory follows the bytes that
        // actually arrive, not a size a server claims.
        let read = |off: u64, n: u64| reader.read_growing(off, n).map_err(io_fail);
        let index = read(header.index_offset, header.index_bytes())?;
        let blocks = read(header.blocks_offset, header.blocks_bytes())?;
        let meta = read(header.meta_offset, header.meta_bytes)?;
        let extras = read(header.extras_index().0, header.extras_index().1)?;
        Self::from_sections(header, &index, &blocks, &meta, &extras).map_err(fail)
    }

    fn from_sections(
        header: PackHeader,
        index: &[u8],
        blocks: &[u8],
        meta: &[u8],
        extras_index: &[u8],
    ) -> std::result::Result<Self, String> {
        for (name, bytes, stored) in [
            ("index", index, header.index_crc),
            ("blocks table", blocks, header.blocks_crc),
            ("metadata", meta, header.meta_crc),
            ("extras index", extras_index, header.extras.map_or(crc32c::crc32c(&[]), |e| e.index_crc)),
        ] {
            let crc = crc32c::crc32c(bytes);
            if crc != stored {
                return Err(format!("has a damaged {name} (CRC32C {crc:08x}, stored {stored:08x})"));
            }
        }
        let bad = |what: String| format!("has an inconsistent index: {what}");
        let meta = PackMeta::from_json(meta).map_err(|e| format!("has unreadable metadata: {e}"))?;
        let blocks: Vec<BlockRow> = blocks.chunks_exact(BLOCK_ROW_BYTES as usize).map(BlockRow::decode).collect();
        let rows = index
            .chunks_exact(INDEX_ROW_BYTES as usize)
            .enumerate()
            .map(|(i, b)| IndexRow::decode(b, i))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(bad)?;
        let data_end = HEADER_BYTES + header.data_bytes;
        let (mut next_record, mut prev_end) = (0u64, HEADER_BYTES);
        for (bi, b) in blocks.iter().enumerate() {
            let end = b.offset.checked_add(b.bytes);
            if b.offset % ALIGN_BYTES != 0 || b.offset < prev_end || end.is_none_or(|e| e > data_end) || b.bytes == 0 {
                return Err(bad(format!(
                    "block {bi} at {} (+{}) is unaligned, overlapping or outside the data",
                    b.offset, b.bytes
                )));
            }
            if u64::from(b.first_record) != next_record || b.records == 0 {
                return Err(bad(format!("block {bi} starts at record {} (expected {next_record})", b.first_record)));
            }
            let last = u64::from(b.first_record) + u64::from(b.records);
            if last > header.records || (b.records > 1 && b.bytes > header.block_bytes) {
                return Err(bad(format!("block {bi} holds {} records in {} bytes", b.records, b.bytes)));
            }
            let mut at = b.offset;
            let first = b.first_record as usize;
            for (i, r) in rows.iter().enumerate().take(last as usize).skip(first) {
                let len = u64::from(r.len);
                if r.offset != at || len == 0 || len > MAX_RECORD_BYTES || at + len > b.offset + b.bytes {
                    return Err(bad(format!("record {i} at {} (+{len}) does not follow in block {bi}", r.offset)));
                }
                at += len;
                let m = &r.meta;
                if m.flags & !KNOWN_FLAGS != 0 || usize::from(m.subsampling) >= SUBSAMPLING_NAMES.len() {
                    return Err(bad(format!(
                        "record {i} has unknown flags {} / subsampling {}",
                        m.flags, m.subsampling
                    )));
                }
                if m.format == RecordFormat::Raw {
                    let want = u64::from(m.width) * u64::from(m.height) * u64::from(m.channels);
                    if !(m.channels == 1 || m.channels == 3) || m.width == 0 || m.height == 0 || want != len {
                        return Err(bad(format!(
                            "raw record {i} of {len} bytes is not {}×{}×{}",
                            m.height, m.width, m.channels
                        )));
                    }
                }
            }
            if at != b.offset + b.bytes {
                return Err(bad(format!("block {bi} has {} bytes after its records", b.offset + b.bytes - at)));
            }
            next_record = last;
            prev_end = b.offset + b.bytes;
        }
        if next_record != header.records {
            return Err(bad(format!("blocks hold {next_record} records, the header says {}", header.records)));
        }
        check_classes(&meta.classes, rows.iter().map(|r| r.label))?;
        let extras = match header.extras {
            None if meta.extras.is_empty() => None,
            None => return Err("has extra field names in a version 1 file".into()),
            Some(e) => Some(
                ExtrasIndex::from_section(extras_index, meta.extras.clone(), header.records, e.offset, e.bytes)
                    .map_err(|m| format!("has inconsistent extras: {m}"))?,
            ),
        };
        Ok(Self { header, rows, blocks, meta, extras })
    }

    /// Record `i`'s bytes checked against the CRC32C its index row stores: the one home of the record check
    /// (a reader's [`PackedFile::record`], a fetched or disk-cached block's [`Self::check_block`]). A mismatch is
    /// `Corrupt` naming the record and its byte range.
    pub fn check_record(&self, i: usize, bytes: &[u8]) -> std::result::Result<(), ImageError> {
        let row = &self.rows[i];
        let crc = crc32c::crc32c(bytes);
        if crc == row.crc32c {
            return Ok(());
        }
        Err(ImageError::new(
            ImageErrorKind::Corrupt,
            format!(
                "packed record {i} fails its CRC32C check (read {crc:08x}, stored {:08x}): the file is damaged at \
                 bytes {}..{}",
                row.crc32c,
                row.offset,
                row.offset + u64::from(row.len)
            ),
        ))
    }

    /// Every record of block `k` in `block` (the block's `bytes` bytes from its offset) checked with
    /// [`Self::check_record`]: the first that fails, if any. A fetched block passes this before it is admitted to
    /// the memory or the disk cache ([`block_fetch`]).
    pub fn check_block(&self, k: usize, block: &[u8]) -> std::result::Result<(), ImageError> {
        let b = &self.blocks[k];
        if block.len() as u64 != b.bytes {
            return Err(ImageError::new(
                ImageErrorKind::Corrupt,
                format!("block {k} is {} bytes, not {}", block.len(), b.bytes),
            ));
        }
        let first = b.first_record as usize;
        for (i, row) in self.rows.iter().enumerate().skip(first).take(b.records as usize) {
            let at = (row.offset - b.offset) as usize; // inside the block: checked at open
            self.check_record(i, &block[at..at + row.len as usize])?;
        }
        Ok(())
    }

    /// Block holding record `i`.
    pub fn block_of(&self, i: usize) -> usize {
        self.blocks.partition_point(|b| b.first_record as usize <= i) - 1
    }

    /// First record of each block, then N (what the plan needs for block order).
    pub fn block_starts(&self) -> Vec<u32> {
        let mut s: Vec<u32> = self.blocks.iter().map(|b| b.first_record).collect();
        s.push(self.header.records as u32);
        s
    }
}

/// Recompute the section CRCs and the header CRC of a whole pack in memory, whatever its fields say (as far as
/// the sections lie inside `file`). For the fuzz target and the tests: a crafted file then passes the CRC checks
/// and reaches the structural ones. Returns false when the header cannot be located.
pub fn reseal(file: &mut [u8]) -> bool {
    if file.len() < HEADER_BYTES as usize {
        return false;
    }
    let crc_of = |file: &[u8], off_at: usize, len_at: usize| -> u32 {
        let (off, len) = (le64(file, off_at) as usize, le64(file, len_at) as usize);
        match off.checked_add(len) {
            Some(end) if end <= file.len() => crc32c::crc32c(&file[off..end]),
            _ => 0,
        }
    };
    let crcs = [crc_of(file, 56, 64), crc_of(file, 72, 80), crc_of(file, 88, 96)];
    for (k, c) in crcs.iter().enumerate() {
        file[112 + 4 * k..116 + 4 * k].copy_from_slice(&c.to_le_bytes());
    }
    if le32(file, 8) == EXTRAS_VERSION {
        let (off, len) = (le64(file, 128) as usize, (le64(file, 16) * EXTRAS_ROW_BYTES) as usize);
        let crc =
            off.checked_add(len).filter(|&end| end <= file.len()).map_or(0, |end| crc32c::crc32c(&file[off..end]));
        file[152..156].copy_from_slice(&crc.to_le_bytes());
    }
    let h = HEADER_BYTES as usize - 4;
    let crc = crc32c::crc32c(&file[..h]);
    file[h..h + 4].copy_from_slice(&crc.to_le_bytes());
    true
}

/// Where a packed file's records live in memory.
#[derive(Debug)]
enum PackedData {
    Full(Vec<u8>),
    Partial(BlockCache),
}

/// An open packed file: its index plus its records in memory (`full`) or behind a block cache (`partial`).
#[derive(Debug)]
pub struct PackedFile {
    reader: ObjectReader,
    index: std::sync::Arc<PackedIndex>,
    data: PackedData,
    window_blocks: u32,
    block_starts: Vec<u32>,
    /// Full mode: the extras region, read at open (partial mode reads a record's extras when asked).
    extras_data: Option<Vec<u8>>,
    /// Partial mode: the local disk cache beneath the block cache (`cache_dir`; storage/disk_cache.rs).
    disk: Option<std::sync::Arc<DiskCache>>,
}

/// `n` bytes of the pack from `offset` (inside the file: checked at open), for full mode: a `Memory` error if
/// they do not fit.
fn read_whole(reader: &ObjectReader, offset: u64, n: u64, what: &str) -> Result<Vec<u8>> {
    let what = format!("the {what} of {} (mode='full'; mode='partial' streams them)", reader.name().display());
    reader.read_region(offset, n, &what)
}

/// Fresh reads of a block whose records fail their CRC32Cs ([`block_fetch`]) before the failure is theirs.
pub const BLOCK_REFETCHES: u32 = 2;

/// The partial cache's fetch step (block_cache.rs's [`FetchBlock`]): the one place a block is fetched, whether a
/// reader or the read-ahead asks. Block k comes from the local disk cache when it holds it whole and its records
/// pass their CRC32Cs (`cache_dir`, storage/disk_cache.rs: an entry that fails is removed), else it is read whole
/// with one `read_range` (a pread, or one ranged GET with its retries; errors name the block). Its records are
/// checked ([`PackedIndex::check_block`]) before it goes to the memory cache or the disk: a block that fails is
/// read again from the store, up to [`BLOCK_REFETCHES`] times (counted in `storage_refetches`), so bytes damaged
/// on the wire cost a read, never a sample, and are never shared through the disk. A block that still fails is
/// handed to the memory cache as read (its intact records stay readable; the bad one fails its CRC when read, the
/// sample's error) and never written to disk.
fn block_fetch(
    reader: &ObjectReader,
    index: &std::sync::Arc<PackedIndex>,
    disk: Option<std::sync::Arc<DiskCache>>,
) -> FetchBlock {
    let (reader, index) = (reader.clone(), std::sync::Arc::clone(index));
    std::sync::Arc::new(move |k, mut buf| {
        let block = index.blocks[k as usize];
        let intact = |bytes: &[u8]| index.check_block(k as usize, bytes).is_ok();
        let key = disk.as_ref().map(|_| BlockKey::of(&reader, block.offset, block.bytes));
        if let (Some(d), Some(key)) = (&disk, &key)
            && let Some(bytes) = d.get_checked(key, &intact)
        {
            return Ok(bytes);
        }
        for attempt in 0..=BLOCK_REFETCHES {
            if attempt > 0 {
                reader.count_refetch();
            }
            reader
                .read_range(block.offset, block.bytes, block.bytes, &mut buf)
                .map_err(|e| ImageError::new(e.kind, format!("block {k}: {}", e.message)))?;
            if intact(&buf) {
                if let (Some(d), Some(key)) = (&disk, &key) {
                    d.put(key, &buf);
                }
                break;
            }
        }
        Ok(buf)
    })
}

impl PackedFile {
    /// Open the local file `path` in `mode` ([`open_at`](Self::open_at)).
    pub fn open(path: &Path, mode: PackedMode, partial: PartialOptions) -> Result<Self> {
        Self::open_at(&Location::local(path), &StorageOptions::default(), mode, partial)
    }

    /// Open the pack at `location` (a local path or a URL, read with `options`) in `mode`. The `partial` options
    /// (`window_blocks`, default [`DEFAULT_WINDOW_BLOCKS`]; `prefetch_blocks`, default
    /// [`default_prefetch_blocks`]; `cache_bytes`, default (window + max(2 × usable CPUs, prefetch)) × the largest
    /// block) matter in partial mode only but are checked in both: their ranges before anything is read, the
    /// cache's minimum (window + prefetch largest blocks) once the blocks table is.
    pub fn open_at(
        location: &Location,
        options: &StorageOptions,
        mode: PackedMode,
        partial: PartialOptions,
    ) -> Result<Self> {
        Self::open_with_disk(location, options, mode, partial, None)
    }

    /// [`Self::open_at`] with `disk` (from [`DiskCache::from_params`], which refuses one in full mode) beneath
    /// the partial mode's block cache: a block missing from memory is looked up there before it is fetched, and
    /// admitted after ([`block_fetch`]).
    pub fn open_with_disk(
        location: &Location,
        options: &StorageOptions,
        mode: PackedMode,
        partial: PartialOptions,
        disk: Option<DiskCache>,
    ) -> Result<Self> {
        let disk = disk.map(std::sync::Arc::new);
        let params = partial.checked()?;
        let window = params.window;
        let reader = ObjectReader::open(location, options)?;
        let index = std::sync::Arc::new(PackedIndex::read(&reader)?);
        let largest = index.blocks.iter().map(|b| b.bytes).max().unwrap_or(1).max(1);
        let (prefetch, cache_bytes) =
            params.sized(largest, &format!("the largest block of {}", reader.name().display()))?;
        let data = match mode {
            PackedMode::Full => {
                PackedData::Full(read_whole(&reader, HEADER_BYTES, index.header.data_bytes, "records")?)
            }
            PackedMode::Partial => PackedData::Partial(BlockCache::new(
                cache_bytes,
                prefetch,
                index.blocks.iter().map(|b| b.bytes).collect(),
                block_fetch(&reader, &index, disk.clone()),
            )),
        };
        let block_starts = index.block_starts();
        let extras_data = match (mode, index.header.extras) {
            (PackedMode::Full, Some(e)) => Some(read_whole(&reader, e.offset, e.bytes, "extras")?),
            _ => None,
        };
        Ok(Self { reader, index, data, window_blocks: window, block_starts, extras_data, disk })
    }

    /// The disk cache (None without `cache_dir`).
    pub fn disk_cache(&self) -> Option<&DiskCache> {
        self.disk.as_deref()
    }

    /// What its bytes are read through (the location, the counters).
    pub fn reader(&self) -> &ObjectReader {
        &self.reader
    }

    /// The file, or the URL of the object (how messages name it).
    pub fn path(&self) -> &Path {
        self.reader.name()
    }

    /// Header, index and metadata.
    pub fn index(&self) -> &PackedIndex {
        &self.index
    }

    /// Full or partial.
    pub fn mode(&self) -> PackedMode {
        match self.data {
            PackedData::Full(_) => PackedMode::Full,
            PackedData::Partial(_) => PackedMode::Partial,
        }
    }

    /// Blocks shuffled together in partial mode.
    pub fn window_blocks(&self) -> u32 {
        self.window_blocks
    }

    /// First record of each block, then N.
    pub fn block_starts(&self) -> &[u32] {
        &self.block_starts
    }

    /// The partial mode's cache (None in full mode).
    pub fn cache(&self) -> Option<&BlockCache> {
        match &self.data {
            PackedData::Partial(c) => Some(c),
            PackedData::Full(_) => None,
        }
    }

    /// Record `i`'s bytes, CRC-checked (`Corrupt` naming the record on a mismatch). In partial mode the read
    /// counts in the cache's schedule (block_cache.rs): call it once per read the plan makes; a wait for the
    /// block ends with an error once `stopping()` says the reader's epoch is over.
    pub fn record(&self, i: usize, stopping: &dyn Fn() -> bool) -> std::result::Result<StoreBytes<'_>, ImageError> {
        self.read_record(i, true, stopping)
    }

    /// [`Self::record`] for a read the plan did not schedule (a Mosaic's partner): in partial mode it leaves the
    /// cache's counts alone (`BlockCache::get_outside_plan`).
    pub fn record_outside_plan(
        &self,
        i: usize,
        stopping: &dyn Fn() -> bool,
    ) -> std::result::Result<StoreBytes<'_>, ImageError> {
        self.read_record(i, false, stopping)
    }

    /// Count the plan's read of record `i` made with [`Self::record_outside_plan`] (a Mosaic row's own record,
    /// counted once its parts are all read: block_cache.rs); nothing in full mode.
    pub fn count_planned_read(&self, i: usize) {
        if let PackedData::Partial(cache) = &self.data {
            cache.count_read(self.index.block_of(i) as u32);
        }
    }

    fn read_record(
        &self,
        i: usize,
        counted: bool,
        stopping: &dyn Fn() -> bool,
    ) -> std::result::Result<StoreBytes<'_>, ImageError> {
        let row = &self.index.rows[i];
        match &self.data {
            PackedData::Full(data) => {
                let at = (row.offset - HEADER_BYTES) as usize; // inside the data region: checked at open
                let bytes = &data[at..at + row.len as usize];
                match self.index.check_record(i, bytes) {
                    Ok(()) => Ok(StoreBytes::Slice(bytes)),
                    // Read at open, perhaps damaged on the wire: once more from the store, its own range.
                    Err(e) => self.reread(row.offset, row.len, row.crc32c).map(StoreBytes::Owned).ok_or(e),
                }
            }
            PackedData::Partial(cache) => {
                // The block was checked when fetched (block_fetch, refetched when damaged): a record that fails
                // here failed every fresh read.
                let b = self.index.block_of(i);
                let arc =
                    if counted { cache.get(b as u32, stopping) } else { cache.get_outside_plan(b as u32, stopping) }?;
                let at = (row.offset - self.index.blocks[b].offset) as usize;
                let bytes = StoreBytes::Block(arc, at..at + row.len as usize);
                self.index.check_record(i, &bytes)?;
                Ok(bytes)
            }
        }
    }

    /// The `len` bytes at `offset` (a record, or a record's extras, whose CRC32C is `crc`) read again from the
    /// store after the copy at hand failed its CRC32C (read at open in full mode, or by a single `read_range`):
    /// Some when the new copy passes. Counted in `storage_refetches`; a read that fails is None (the caller's
    /// CRC error stands).
    fn reread(&self, offset: u64, len: u32, crc: u32) -> Option<Vec<u8>> {
        self.reader.count_refetch();
        let mut buf = Vec::new();
        self.reader.read_range(offset, u64::from(len), u64::from(len), &mut buf).ok()?;
        (crc32c::crc32c(&buf) == crc).then_some(buf)
    }

    /// Record `i`'s extra fields, (field, kind, value) in field order (field: an index into
    /// `index().extras.names`), CRC- and structure-checked (`Corrupt` naming the record); empty for a record
    /// without extras or a pack without any.
    pub fn extras(&self, i: usize) -> std::result::Result<Vec<(u16, ExtraKind, Vec<u8>)>, ImageError> {
        let (Some(ix), Some(e)) = (&self.index.extras, self.index.header.extras) else { return Ok(Vec::new()) };
        let row = ix.rows[i];
        let (mut read, mut again) = (Vec::new(), None);
        let bytes = match &self.extras_data {
            Some(data) => {
                let at = (row.offset - e.offset) as usize; // inside the region: checked at open
                &data[at..at + row.len as usize]
            }
            None => {
                self.reader.read_range(row.offset, u64::from(row.len), u64::from(row.len), &mut read)?;
                &read[..]
            }
        };
        let bytes = self.or_reread(bytes, row.offset, row.len, row.crc32c, &mut again);
        let entries = Self::checked_extras(i, bytes, row.crc32c, ix.names.len())?;
        Ok(entries.into_iter().map(|(f, k, v)| (f, k, v.to_vec())).collect())
    }

    /// Every record's value of the extra field `field` (None where a record lacks it), each record CRC- and
    /// structure-checked as [`Self::extras`] checks it. The region is read once, in order, in reads of at most
    /// [`EXTRAS_SCAN_BYTES`] (plus one record): a detection pack's boxes at open cost a few ranged GETs, not one
    /// per record. The error names the record.
    pub fn extras_field(&self, field: u16) -> std::result::Result<Vec<Option<Vec<u8>>>, (usize, ImageError)> {
        self.extras_field_in(field, EXTRAS_SCAN_BYTES)
    }

    /// [`Self::extras_field`] in reads of at most `scan_bytes` (plus one record).
    fn extras_field_in(
        &self,
        field: u16,
        scan_bytes: u64,
    ) -> std::result::Result<Vec<Option<Vec<u8>>>, (usize, ImageError)> {
        let (Some(ix), Some(e)) = (&self.index.extras, self.index.header.extras) else {
            return Ok(vec![None; self.index.rows.len()]);
        };
        let mut out = Vec::with_capacity(ix.rows.len());
        let mut buf = Vec::new();
        let mut i = 0;
        while i < ix.rows.len() {
            // rows follow each other with no gap (checked at open): records i..j are one contiguous span
            let start = ix.rows[i].offset;
            let mut j = i + 1;
            while j < ix.rows.len() && ix.rows[j].offset + u64::from(ix.rows[j].len) - start <= scan_bytes {
                j += 1;
            }
            let len = ix.rows[j - 1].offset + u64::from(ix.rows[j - 1].len) - start;
            let span: &[u8] = match &self.extras_data {
                Some(data) => &data[(start - e.offset) as usize..(start - e.offset + len) as usize],
                None => {
                    self.reader.read_range(start, len, len, &mut buf).map_err(|err| (i, err))?;
                    &buf[..]
                }
            };
            for (k, row) in ix.rows[i..j].iter().enumerate() {
                let at = (row.offset - start) as usize;
                let mut again = None;
                let bytes =
                    self.or_reread(&span[at..at + row.len as usize], row.offset, row.len, row.crc32c, &mut again);
                let entries =
                    Self::checked_extras(i + k, bytes, row.crc32c, ix.names.len()).map_err(|err| (i + k, err))?;
                out.push(entries.into_iter().find(|(f, _, _)| *f == field).map(|(_, _, v)| v.to_vec()));
            }
            i = j;
        }
        Ok(out)
    }

    /// `bytes` (a record's extras at `offset`, `len` bytes, CRC32C `crc`) when they pass their CRC32C; else
    /// [`Self::reread`]'s new copy, kept in `again`, when it passes; else `bytes` (whose check then fails).
    fn or_reread<'b>(
        &self,
        bytes: &'b [u8],
        offset: u64,
        len: u32,
        crc: u32,
        again: &'b mut Option<Vec<u8>>,
    ) -> &'b [u8] {
        if crc32c::crc32c(bytes) == crc {
            return bytes;
        }
        *again = self.reread(offset, len, crc);
        again.as_deref().unwrap_or(bytes)
    }

    /// Record `i`'s extras bytes checked against their CRC and parsed into entries (`Corrupt` naming the record).
    fn checked_extras(
        i: usize,
        bytes: &[u8],
        crc32c: u32,
        fields: usize,
    ) -> std::result::Result<Vec<Entry<'_>>, ImageError> {
        let corrupt = |what: String| {
            ImageError::new(
                ImageErrorKind::Corrupt,
                format!("the extras of packed record {i} {what}: the file is damaged"),
            )
        };
        let crc = crc32c::crc32c(bytes);
        if crc != crc32c {
            return Err(corrupt(format!("fail their CRC32C check (read {crc:08x}, stored {crc32c:08x})")));
        }
        decode_record(bytes, fields).map_err(|m| corrupt(format!("are malformed ({m})")))
    }
}

impl ImageStore for PackedFile {
    fn kind(&self) -> &'static str {
        "packed"
    }

    fn len(&self) -> usize {
        self.index.rows.len()
    }

    /// `file#i`.
    fn sample_name(&self, i: usize) -> std::path::PathBuf {
        let mut name = self.path().as_os_str().to_os_string();
        name.push(format!("#{i}"));
        std::path::PathBuf::from(name)
    }

    /// Record `i`, CRC-checked by [`Self::record`] (a damaged record is `Corrupt` naming it, never garbage
    /// pixels): encoded records straight from the file's memory or the cached block, raw records as pixels of
    /// the size the index gives.
    fn read<'s>(&'s self, i: usize, how: &ReadCtx<'_>, _buf: &mut Vec<u8>) -> Result<SampleBytes<'s>, ImageError> {
        let bytes = if how.planned { self.record(i, how.stopping) } else { self.record_outside_plan(i, how.stopping) }?;
        let m = self.index.rows[i].meta;
        let sample = SampleBytes::held(bytes);
        Ok(if m.format == RecordFormat::Raw {
            sample.as_pixels((u32::from(m.height), u32::from(m.width), m.channels))
        } else {
            sample
        })
    }

    /// The identity of the source it was packed from when stored, else the CRC of its index.
    fn identity(&self, _labels: &[i64]) -> String {
        let stored = &self.index.meta.options.identity;
        if !stored.is_empty() {
            return stored.clone(); // its source's: a checkpoint moves between a source and its pack
        }
        fingerprint(self.kind(), |add| add(&self.index.header.index_crc.to_le_bytes()))
    }

    /// 1 for a pack of gray pixel arrays (a packed MNIST stays gray); encoded records are RGB like files.
    fn natural_channels(&self) -> u8 {
        let gray_raw = |r: &IndexRow| r.meta.format == RecordFormat::Raw && r.meta.channels == 1;
        if self.index.rows.iter().all(gray_raw) { 1 } else { 3 }
    }

    /// When the index lists raw records of one known size only.
    fn uniform_size(&self) -> Option<(u32, u32)> {
        let rows = &self.index.rows;
        let first = rows.first()?.meta;
        let same = |m: &RecordMeta| m.format == RecordFormat::Raw && (m.height, m.width) == (first.height, first.width);
        (first.height > 0 && first.width > 0 && rows.iter().all(|r| same(&r.meta)))
            .then(|| (u32::from(first.height), u32::from(first.width)))
    }

    fn io_stats(&self) -> Vec<(&'static str, u64)> {
        let s = self.reader.stats();
        let mut out = storage_stats(&s);
        out.push(("storage_refetches", s.refetches));
        if let Some(c) = self.cache().map(BlockCache::stats) {
            out.extend(c.named());
        }
        if let Some(d) = self.disk_cache().map(DiskCache::stats) {
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

    fn block_structure(&self) -> Option<BlockStructure<'_>> {
        (self.mode() == PackedMode::Partial)
            .then(|| BlockStructure { block_starts: self.block_starts(), window_blocks: self.window_blocks() })
    }

    fn block_cache(&self) -> Option<&BlockCache> {
        self.cache()
    }

    fn count_planned_read(&self, i: usize) {
        PackedFile::count_planned_read(self, i);
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
    Ok(Dataset::new(file, labels, classes))
}

#[cfg(test)]
#[path = "packed_tests.rs"]
mod tests;
