//! source/tfrecord — TensorFlow's TFRecord files, read natively: the record framing (an index of the records of a
//! file, each record's CRCs) and the `tf.train.Example` protobuf inside a record, walked by hand (no protobuf
//! crate, no generated code). Not yet a source: a store over these functions (which key is the image, which the
//! label) is the next piece. docs/design/formats-research.md §5 holds the facts this file follows.
//!
//! ```text
//! a file: records back to back, nothing between them, nothing after the last
//! one record: length u64 LE · masked_crc32c(the 8 length bytes) u32 LE · data[length] · masked_crc32c(data) u32 LE
//! masked_crc32c(b) = ((c >> 15) | (c << 17)) + 0xa282ead8 mod 2^32, c = CRC-32C (Castagnoli) of b
//!
//! Example  { Features features = 1 }
//! Features { map<string, Feature> feature = 1 }            map entry: key = 1, value = 2
//! Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3 } }
//! BytesList { repeated bytes value = 1 }   FloatList { repeated float value = 1 }   Int64List { repeated int64 value = 1 }
//! ```
//!
//! # Untrusted bytes
//! Every file and record is hostile until read. Nothing here panics, recurses on the input or allocates before the
//! length that asks for it is checked against the bytes that remain and the [`Limits`]; every error is a
//! [`TfRecordError`] naming the record and the byte.
//! - Framing ([`index_records`]): the length's CRC is checked before the length is trusted; a length above
//!   [`Limits::max_record_bytes`], a record that ends past the file, a cut tail and more than
//!   [`Limits::max_records`] records are refused. The index reads 12 bytes per record and skips the data: a
//!   record's data CRC is checked when the record is read ([`RecordIndex::read`], [`check_record`]).
//! - Protobuf ([`parse_example`]): the wire rules of protobuf. A varint is at most 10 bytes and fits 64 bits (the
//!   10th byte at most 1); a tag fits 32 bits, its field number is not 0; unknown fields of wire types varint,
//!   64-bit, length-delimited and 32-bit are skipped, groups (wire types 3, 4) and wire types 6, 7 are refused. A
//!   known field number with another wire type than its own is an unknown field, as protobuf's parsers read it.
//!   Repeated scalars are read packed and unpacked; a packed float list's length is a multiple of 4. Nesting is
//!   the schema's four messages, walked by a fixed function per message: unknown fields are skipped, never
//!   entered, so no input nests deeper. A feature name is UTF-8 (a proto3 `string`).
//! - Merging, as protobuf merges: a message field seen twice merges (two `features` fields give one map); in a
//!   map, the last entry of a key wins (it replaces the earlier one, whole); a map entry without key has the
//!   empty key, one without value the [`Feature::Unset`] value; in a `Feature`, the lists of one kind seen twice
//!   concatenate, and a list of another kind replaces what was there (a `oneof`).
//! - Counts: map entries read (duplicates included) at most [`Limits::max_features`], values read at most
//!   [`Limits::max_values`] (all lists of the record together). Every value costs at least one byte of the
//!   record, so what a parse keeps is bounded by its input: bytes values and names by their own length, numbers
//!   by 8 bytes of `Vec` per value.

use crate::error::{ImageError, ImageErrorKind};
use std::collections::BTreeMap;
use std::fmt;
use std::io;

/// Bytes of a record's head: the length u64 and its masked CRC u32.
pub const HEAD_BYTES: u64 = 12;
/// Bytes of framing around a record's data: its head and the data's masked CRC.
pub const FRAME_BYTES: u64 = 16;
/// The constant added to a rotated CRC-32C (TensorFlow's `kMaskDelta`).
pub const MASK_DELTA: u32 = 0xa282_ead8;
/// The longest varint (a 64-bit value in 7-bit groups).
const MAX_VARINT_BYTES: usize = 10;

/// What a reader accepts from one file and one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest record data, in bytes (at most `u32::MAX`: a larger value is taken as `u32::MAX`).
    pub max_record_bytes: u64,
    /// Most records in one file.
    pub max_records: u64,
    /// Most feature map entries read from one record (duplicates included).
    pub max_features: usize,
    /// Most values read from one record's lists, all features together.
    pub max_values: usize,
}

impl Default for Limits {
    /// 64 MiB records, 2^32 - 1 records a file, 4096 features and 2^22 values a record.
    fn default() -> Self {
        Self { max_record_bytes: 64 << 20, max_records: u64::from(u32::MAX), max_features: 4096, max_values: 1 << 22 }
    }
}

/// Why a TFRecord file or record cannot be read. `record` is the record's number (from 0) in its file, `offset` a
/// byte offset in the file (framing) or in the record's data (protobuf).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TfRecordError {
    /// Reading the file failed (or returned fewer bytes than asked).
    Io {
        /// The record being read.
        record: u64,
        /// Where the read started.
        offset: u64,
        /// The I/O error, in words.
        message: String,
    },
    /// A record's length does not match its CRC: the file is not a TFRecord file, or is damaged there.
    LengthCrc {
        /// The record.
        record: u64,
        /// The record's start.
        offset: u64,
        /// The masked CRC stored.
        stored: u32,
        /// The masked CRC of the length bytes.
        computed: u32,
    },
    /// A record's data does not match its CRC.
    DataCrc {
        /// The masked CRC stored.
        stored: u32,
        /// The masked CRC of the data.
        computed: u32,
    },
    /// The file ends inside a record.
    Truncated {
        /// The record.
        record: u64,
        /// The record's start.
        offset: u64,
        /// Bytes the record needs from its start.
        need: u64,
        /// Bytes the file has from there.
        have: u64,
    },
    /// Above a limit: a record's length ([`Limits::max_record_bytes`]) or the file's records
    /// ([`Limits::max_records`]).
    TooLarge {
        /// The record.
        record: u64,
        /// The record's start.
        offset: u64,
        /// What is counted ("record bytes", "records").
        what: &'static str,
        /// How many there are (at least).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A record's data is not a valid `tf.train.Example` (or exceeds [`Limits::max_features`] or
    /// [`Limits::max_values`]).
    Protobuf {
        /// Byte offset in the record's data.
        offset: u64,
        /// What is wrong, in words.
        what: String,
    },
    /// An error of one record's data ([`Self::DataCrc`], [`Self::Protobuf`]), placed in its file.
    InRecord {
        /// The record.
        record: u64,
        /// The offset of its data in the file.
        offset: u64,
        /// What is wrong with it.
        error: Box<TfRecordError>,
    },
}

impl TfRecordError {
    /// This error (of a record's data) placed at `record`, whose data starts at byte `offset` of its file.
    pub fn in_record(self, record: u64, offset: u64) -> Self {
        Self::InRecord { record, offset, error: Box::new(self) }
    }
}

impl fmt::Display for TfRecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { record, offset, message } => {
                write!(f, "TFRecord record {record}: cannot read at byte {offset}: {message}")
            }
            Self::LengthCrc { record, offset, stored, computed } => write!(
                f,
                "TFRecord record {record} at byte {offset}: the length's CRC is {stored:#010x}, its bytes give \
                 {computed:#010x} (not a TFRecord file, or damaged)"
            ),
            Self::DataCrc { stored, computed } => {
                write!(f, "the data's CRC is {stored:#010x}, its bytes give {computed:#010x}")
            }
            Self::Truncated { record, offset, need, have } => write!(
                f,
                "TFRecord record {record} at byte {offset} needs {need} bytes, the file has {have} from there \
                 (cut short)"
            ),
            Self::TooLarge { record, offset, what, size, limit } => {
                write!(f, "TFRecord record {record} at byte {offset}: {size} {what}, the limit is {limit}")
            }
            Self::Protobuf { offset, what } => write!(f, "not a tf.train.Example at byte {offset}: {what}"),
            Self::InRecord { record, offset, error } => {
                write!(f, "TFRecord record {record} (data at byte {offset}): {error}")
            }
        }
    }
}

impl std::error::Error for TfRecordError {}

impl From<TfRecordError> for ImageError {
    /// A sample's failure: [`ImageErrorKind::Io`] when the file could not be read, else
    /// [`ImageErrorKind::Corrupt`].
    fn from(e: TfRecordError) -> Self {
        let kind = match &e {
            TfRecordError::Io { .. } => ImageErrorKind::Io,
            _ => ImageErrorKind::Corrupt,
        };
        ImageError::new(kind, e.to_string())
    }
}

/// TFRecord's masked CRC-32C of `bytes`.
pub fn masked_crc(bytes: &[u8]) -> u32 {
    let c = crc32c::crc32c(bytes);
    c.rotate_right(15).wrapping_add(MASK_DELTA) // ((c >> 15) | (c << 17)) + delta
}

/// `data` framed as one TFRecord record appended to `out` (length, its masked CRC, the data, its masked CRC), as
/// TensorFlow's writer frames it: what tests and the fuzz target build files with.
pub fn frame_record(data: &[u8], out: &mut Vec<u8>) {
    let len = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
}

/// `data` matches its stored masked CRC `crc`, or [`TfRecordError::DataCrc`].
pub fn check_record(data: &[u8], crc: u32) -> Result<(), TfRecordError> {
    let computed = masked_crc(data);
    if computed == crc { Ok(()) } else { Err(TfRecordError::DataCrc { stored: crc, computed }) }
}

/// The records of one file: where each one's data starts and how long it is, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordIndex {
    /// Per record: the data's offset in the file and its length (its CRC follows it).
    pub offsets: Vec<(u64, u32)>,
}

impl RecordIndex {
    /// Record `record`'s data, its CRC checked, read with `read` (as [`index_records`] reads) in one read of the
    /// data and its CRC. `None` when the index has no such record.
    pub fn read<R>(&self, read: &mut R, record: usize) -> Option<Result<Vec<u8>, TfRecordError>>
    where
        R: FnMut(u64, usize) -> io::Result<Vec<u8>>,
    {
        let &(offset, len) = self.offsets.get(record)?;
        let want = len as usize + 4;
        let io = |message: String| TfRecordError::Io { record: record as u64, offset, message };
        Some(match read(offset, want) {
            Err(e) => Err(io(e.to_string())),
            Ok(b) if b.len() != want => Err(io(format!("{} bytes read, {want} asked", b.len()))),
            Ok(mut b) => {
                let crc = u32::from_le_bytes([b[want - 4], b[want - 3], b[want - 2], b[want - 1]]);
                b.truncate(len as usize);
                check_record(&b, crc).map(|()| b).map_err(|e| e.in_record(record as u64, offset))
            }
        })
    }
}

/// The records of a file of `file_len` bytes, whose bytes `read(offset, len)` returns (exactly `len` of them, else
/// an I/O error): one 12-byte read per record, its length's CRC checked before the length is used, the data
/// skipped. Refuses a length above [`Limits::max_record_bytes`], a record ending past the file, a cut tail and more
/// than [`Limits::max_records`] records. An empty file has no records.
pub fn index_records<R>(read: &mut R, file_len: u64, limits: &Limits) -> Result<RecordIndex, TfRecordError>
where
    R: FnMut(u64, usize) -> io::Result<Vec<u8>>,
{
    let max_len = limits.max_record_bytes.min(u64::from(u32::MAX));
    let mut offsets = Vec::new();
    let mut at = 0u64;
    let mut record = 0u64;
    while at < file_len {
        let have = file_len - at;
        if record >= limits.max_records {
            let limit = limits.max_records;
            return Err(TfRecordError::TooLarge { record, offset: at, what: "records", size: record + 1, limit });
        }
        if have < HEAD_BYTES {
            return Err(TfRecordError::Truncated { record, offset: at, need: HEAD_BYTES, have });
        }
        let io = |message: String| TfRecordError::Io { record, offset: at, message };
        let head = read(at, HEAD_BYTES as usize).map_err(|e| io(e.to_string()))?;
        let Ok(head) = <[u8; HEAD_BYTES as usize]>::try_from(head.as_slice()) else {
            return Err(io(format!("{} bytes read, {HEAD_BYTES} asked", head.len())));
        };
        let [l0, l1, l2, l3, l4, l5, l6, l7, c0, c1, c2, c3] = head;
        let stored = u32::from_le_bytes([c0, c1, c2, c3]);
        let computed = masked_crc(&head[..8]);
        if stored != computed {
            return Err(TfRecordError::LengthCrc { record, offset: at, stored, computed });
        }
        let len = u64::from_le_bytes([l0, l1, l2, l3, l4, l5, l6, l7]);
        if len > max_len {
            let what = "record bytes";
            return Err(TfRecordError::TooLarge { record, offset: at, what, size: len, limit: max_len });
        }
        let need = len + FRAME_BYTES; // no overflow: len ≤ u32::MAX
        if need > have {
            return Err(TfRecordError::Truncated { record, offset: at, need, have });
        }
        offsets.push((at + HEAD_BYTES, len as u32));
        at += need;
        record += 1;
    }
    Ok(RecordIndex { offsets })
}

/// [`index_records`] over a file held in memory.
pub fn index_bytes(file: &[u8], limits: &Limits) -> Result<RecordIndex, TfRecordError> {
    index_records(&mut slice_reader(file), file.len() as u64, limits)
}

/// A reader over bytes in memory, as [`index_records`] and [`RecordIndex::read`] call it.
pub fn slice_reader(file: &[u8]) -> impl FnMut(u64, usize) -> io::Result<Vec<u8>> + '_ {
    move |offset, len| {
        usize::try_from(offset)
            .ok()
            .and_then(|a| file.get(a..a.checked_add(len)?))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "past the end of the bytes"))
    }
}

/// One feature's values.
#[derive(Debug, Clone, PartialEq)]
pub enum Feature {
    /// A `BytesList`.
    Bytes(Vec<Vec<u8>>),
    /// An `Int64List`.
    Int64(Vec<i64>),
    /// A `FloatList`.
    Float(Vec<f32>),
    /// A `Feature` whose kind is not set (a valid, empty message).
    Unset,
}

/// A `tf.train.Example`: feature name → values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Example {
    /// The features, by name.
    pub features: BTreeMap<String, Feature>,
}

/// A protobuf wire type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    Varint,
    I64,
    Len,
    I32,
}

/// A reader of one message's bytes; `base` is the offset of `buf` in the record, for errors.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Cursor<'a> {
    fn error(&self, at: usize, what: impl Into<String>) -> TfRecordError {
        TfRecordError::Protobuf { offset: (self.base + at) as u64, what: what.into() }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, TfRecordError> {
        let start = self.pos;
        let mut v = 0u64;
        for i in 0..MAX_VARINT_BYTES {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(self.error(start, "a varint is cut short"));
            };
            self.pos += 1;
            // The 10th byte holds bit 63 only: more is a value past 64 bits or an 11th byte.
            if i == MAX_VARINT_BYTES - 1 && b > 1 {
                return Err(self.error(start, "a varint does not fit 64 bits (or is longer than 10 bytes)"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.error(start, "a varint is longer than 10 bytes")) // not reached: the 10th byte ends it
    }

    /// The next field's number and wire type.
    fn tag(&mut self) -> Result<(u32, Wire), TfRecordError> {
        let at = self.pos;
        let tag = self.varint()?;
        let Ok(tag) = u32::try_from(tag) else { return Err(self.error(at, "a tag does not fit 32 bits")) };
        let field = tag >> 3;
        if field == 0 {
            return Err(self.error(at, "field number 0"));
        }
        let wire = match tag & 7 {
            0 => Wire::Varint,
            1 => Wire::I64,
            2 => Wire::Len,
            5 => Wire::I32,
            3 | 4 => return Err(self.error(at, format!("field {field} is a group (refused)"))),
            w => return Err(self.error(at, format!("field {field} has wire type {w}"))),
        };
        Ok((field, wire))
    }

    fn take(&mut self, n: usize, what: &str) -> Result<Cursor<'a>, TfRecordError> {
        let left = self.buf.len() - self.pos;
        if n > left {
            return Err(self.error(self.pos, format!("{what} says {n} bytes, {left} remain")));
        }
        let sub = Cursor { buf: &self.buf[self.pos..self.pos + n], pos: 0, base: self.base + self.pos };
        self.pos += n;
        Ok(sub)
    }

    /// A length-delimited field's bytes (its length read and checked against what remains).
    fn len_delimited(&mut self) -> Result<Cursor<'a>, TfRecordError> {
        let at = self.pos;
        let n = self.varint()?;
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        self.take(n, "a length-delimited field").map_err(|e| match e {
            TfRecordError::Protobuf { what, .. } => self.error(at, what),
            e => e,
        })
    }

    fn skip(&mut self, wire: Wire) -> Result<(), TfRecordError> {
        match wire {
            Wire::Varint => self.varint().map(drop),
            Wire::I64 => self.take(8, "a 64-bit field").map(drop),
            Wire::I32 => self.take(4, "a 32-bit field").map(drop),
            Wire::Len => self.len_delimited().map(drop),
        }
    }
}

/// The counts a parse has spent against its [`Limits`].
struct Budget<'l> {
    limits: &'l Limits,
    features: usize,
    values: usize,
}

impl Budget<'_> {
    fn values(&mut self, n: usize, c: &Cursor<'_>, at: usize) -> Result<(), TfRecordError> {
        self.values = self.values.saturating_add(n);
        if self.values > self.limits.max_values {
            let max = self.limits.max_values;
            return Err(c.error(at, format!("more than {max} values in the record")));
        }
        Ok(())
    }
}

/// Parse one record's data as a `tf.train.Example`, under the rules of this module's docs (protobuf's wire and
/// merge rules; the last map entry of a name wins).
pub fn parse_example(data: &[u8], limits: &Limits) -> Result<Example, TfRecordError> {
    let mut c = Cursor { buf: data, pos: 0, base: 0 };
    let mut budget = Budget { limits, features: 0, values: 0 };
    let mut ex = Example::default();
    while !c.done() {
        match c.tag()? {
            (1, Wire::Len) => {
                let mut features = c.len_delimited()?;
                parse_features(&mut features, &mut ex.features, &mut budget)?;
            }
            (_, wire) => c.skip(wire)?,
        }
    }
    Ok(ex)
}

fn parse_features(
    c: &mut Cursor<'_>,
    map: &mut BTreeMap<String, Feature>,
    budget: &mut Budget<'_>,
) -> Result<(), TfRecordError> {
    while !c.done() {
        let at = c.pos;
        match c.tag()? {
            (1, Wire::Len) => {
                budget.features += 1;
                if budget.features > budget.limits.max_features {
                    let max = budget.limits.max_features;
                    return Err(c.error(at, format!("more than {max} features in the record")));
                }
                let mut entry = c.len_delimited()?;
                let (key, value) = parse_entry(&mut entry, budget)?;
                map.insert(key, value);
            }
            (_, wire) => c.skip(wire)?,
        }
    }
    Ok(())
}

/// One map entry: its key (UTF-8) and its value.
fn parse_entry(c: &mut Cursor<'_>, budget: &mut Budget<'_>) -> Result<(String, Feature), TfRecordError> {
    let mut key: &[u8] = b"";
    let mut key_at = 0;
    let mut value = Feature::Unset;
    while !c.done() {
        match c.tag()? {
            (1, Wire::Len) => {
                let k = c.len_delimited()?;
                key = k.buf;
                key_at = k.base;
            }
            (2, Wire::Len) => {
                let mut v = c.len_delimited()?;
                parse_feature(&mut v, &mut value, budget)?;
            }
            (_, wire) => c.skip(wire)?,
        }
    }
    match std::str::from_utf8(key) {
        Ok(k) => Ok((k.to_owned(), value)),
        Err(e) => Err(TfRecordError::Protobuf {
            offset: (key_at + e.valid_up_to()) as u64,
            what: "a feature name is not UTF-8".into(),
        }),
    }
}

/// A `Feature` message merged into `value` (a list of the same kind extends it, another kind replaces it).
fn parse_feature(c: &mut Cursor<'_>, value: &mut Feature, budget: &mut Budget<'_>) -> Result<(), TfRecordError> {
    while !c.done() {
        match c.tag()? {
            (kind @ 1..=3, Wire::Len) => {
                let mut list = c.len_delimited()?;
                let same =
                    matches!((kind, &*value), (1, Feature::Bytes(_)) | (2, Feature::Float(_)) | (3, Feature::Int64(_)));
                if !same {
                    *value = match kind {
                        1 => Feature::Bytes(Vec::new()),
                        2 => Feature::Float(Vec::new()),
                        _ => Feature::Int64(Vec::new()),
                    };
                }
                match value {
                    Feature::Bytes(v) => parse_bytes_list(&mut list, v, budget)?,
                    Feature::Float(v) => parse_float_list(&mut list, v, budget)?,
                    Feature::Int64(v) => parse_int64_list(&mut list, v, budget)?,
                    Feature::Unset => {}
                }
            }
            (_, wire) => c.skip(wire)?,
        }
    }
    Ok(())
}

fn parse_bytes_list(c: &mut Cursor<'_>, out: &mut Vec<Vec<u8>>, budget: &mut Budget<'_>) -> Result<(), TfRecordError> {
    while !c.done() {
        let at = c.pos;
        match c.tag()? {
            (1, Wire::Len) => {
                let v = c.len_delimited()?;
                budget.values(1, c, at)?;
                out.push(v.buf.to_vec());
            }
            (_, wire) => c.skip(wire)?,
        }
    }
    Ok(())
}

fn parse_float_list(c: &mut Cursor<'_>, out: &mut Vec<f32>, budget: &mut Budget<'_>) -> Result<(), TfRecordError> {
    let f32_of = |b: &[u8]| f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    while !c.done() {
        let at = c.pos;
        match c.tag()? {
            (1, Wire::I32) => {
                let v = c.take(4, "a float")?;
                budget.values(1, c, at)?;
                out.push(f32_of(v.buf));
            }
            (1, Wire::Len) => {
                let v = c.len_delimited()?;
                if v.buf.len() % 4 != 0 {
                    return Err(c.error(at, format!("a packed float list of {} bytes", v.buf.len())));
                }
                budget.values(v.buf.len() / 4, c, at)?;
                out.reserve(v.buf.len() / 4);
                out.extend(v.buf.chunks_exact(4).map(f32_of));
            }
            (_, wire) => c.skip(wire)?,
        }
    }
    Ok(())
}

fn parse_int64_list(c: &mut Cursor<'_>, out: &mut Vec<i64>, budget: &mut Budget<'_>) -> Result<(), TfRecordError> {
    while !c.done() {
        let at = c.pos;
        match c.tag()? {
            (1, Wire::Varint) => {
                let v = c.varint()?;
                budget.values(1, c, at)?;
                out.push(v as i64);
            }
            (1, Wire::Len) => {
                let mut packed = c.len_delimited()?;
                // Each varint ends at a byte below 0x80: their count bounds the values before any is kept.
                let n = packed.buf.iter().filter(|&&b| b < 0x80).count();
                budget.values(n, c, at)?;
                out.reserve(n);
                while !packed.done() {
                    out.push(packed.varint()? as i64);
                }
            }
            (_, wire) => c.skip(wire)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference writer's masked CRC of 8 zero bytes (formats-research.md §5).
    const ZERO_LENGTH_CRC: [u8; 4] = [0x29, 0x03, 0x98, 0x07];
    /// The reference encoding of `{"image/encoded": b"\xff\xd8xyz", "image/class/label": [7]}` (protobuf 7.36.2).
    const REFERENCE_EXAMPLE: &str = "0a380a1a0a0d696d6167652f656e636f64656412090a070a05ffd878797a0a1a0a11696d6167652f\
                                     636c6173732f6c6162656c12051a030a0107";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    // A tiny protobuf encoder (the reference writer's layout; `packed` picks the form of repeated scalars).
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn field_len(field: u32, bytes: &[u8], out: &mut Vec<u8>) {
        varint(u64::from((field << 3) | 2), out);
        varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    }

    fn encode_feature(f: &Feature, packed: bool) -> Vec<u8> {
        let mut list = Vec::new();
        let kind = match f {
            Feature::Bytes(v) => {
                v.iter().for_each(|b| field_len(1, b, &mut list));
                1
            }
            Feature::Float(v) if packed => {
                let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                field_len(1, &b, &mut list);
                2
            }
            Feature::Float(v) => {
                for x in v {
                    list.push((1 << 3) | 5);
                    list.extend_from_slice(&x.to_le_bytes());
                }
                2
            }
            Feature::Int64(v) if packed => {
                let mut b = Vec::new();
                v.iter().for_each(|&x| varint(x as u64, &mut b));
                field_len(1, &b, &mut list);
                3
            }
            Feature::Int64(v) => {
                for &x in v {
                    list.push(1 << 3);
                    varint(x as u64, &mut list);
                }
                3
            }
            Feature::Unset => return Vec::new(),
        };
        let mut out = Vec::new();
        field_len(kind, &list, &mut out);
        out
    }

    fn encode_example(ex: &Example, packed: bool) -> Vec<u8> {
        let mut features = Vec::new();
        for (k, f) in &ex.features {
            let mut entry = Vec::new();
            field_len(1, k.as_bytes(), &mut entry);
            field_len(2, &encode_feature(f, packed), &mut entry);
            field_len(1, &entry, &mut features);
        }
        let mut out = Vec::new();
        field_len(1, &features, &mut out);
        out
    }

    fn frame(records: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        records.iter().for_each(|r| frame_record(r, &mut out));
        out
    }

    /// Floats compared by their bits (NaNs included).
    fn bits(ex: &Example) -> Vec<(String, Feature, Vec<u32>)> {
        ex.features
            .iter()
            .map(|(k, f)| match f {
                Feature::Float(v) => (k.clone(), Feature::Float(vec![]), v.iter().map(|x| x.to_bits()).collect()),
                f => (k.clone(), f.clone(), vec![]),
            })
            .collect()
    }

    fn reference() -> Example {
        let mut ex = Example::default();
        ex.features.insert("image/encoded".into(), Feature::Bytes(vec![b"\xff\xd8xyz".to_vec()]));
        ex.features.insert("image/class/label".into(), Feature::Int64(vec![7]));
        ex
    }

    fn all_records(file: &[u8]) -> Result<Vec<Example>, TfRecordError> {
        let limits = Limits::default();
        let ix = index_bytes(file, &limits)?;
        let mut read = slice_reader(file);
        (0..ix.offsets.len())
            .map(|i| {
                let data = ix.read(&mut read, i).unwrap()?;
                parse_example(&data, &limits).map_err(|e| e.in_record(i as u64, ix.offsets[i].0))
            })
            .collect()
    }

    #[test]
    fn the_reference_writers_bytes_read_as_written() {
        assert_eq!(masked_crc(&[0; 8]).to_le_bytes(), ZERO_LENGTH_CRC);
        let data = hex(REFERENCE_EXAMPLE);
        assert_eq!(parse_example(&data, &Limits::default()).unwrap(), reference());
        // The test encoder writes the reference's bytes (in the reference's order: insertion, not key order).
        let mut features = Vec::new();
        for key in ["image/encoded", "image/class/label"] {
            let mut entry = Vec::new();
            field_len(1, key.as_bytes(), &mut entry);
            field_len(2, &encode_feature(&reference().features[key], true), &mut entry);
            field_len(1, &entry, &mut features);
        }
        let mut whole = Vec::new();
        field_len(1, &features, &mut whole);
        assert_eq!(whole, data);
    }

    #[test]
    fn a_framed_file_indexes_and_reads_back() {
        let a = hex(REFERENCE_EXAMPLE);
        let file = frame(&[&a, b"", &a]);
        // An empty record's head is the 8 zero bytes and the reference's CRC of them.
        let second = FRAME_BYTES as usize + a.len();
        assert_eq!(file[second..second + 12], [&[0u8; 8][..], &ZERO_LENGTH_CRC].concat()[..]);
        let ix = index_bytes(&file, &Limits::default()).unwrap();
        let n = a.len() as u64;
        assert_eq!(ix.offsets, vec![(12, n as u32), (n + 28, 0), (n + 44, n as u32)]);
        let exs = all_records(&file).unwrap();
        assert_eq!(exs, vec![reference(), Example::default(), reference()]);
        assert!(ix.read(&mut slice_reader(&file), 3).is_none());
        assert_eq!(index_bytes(b"", &Limits::default()).unwrap(), RecordIndex::default());
    }

    #[test]
    fn framing_errors_name_the_record_and_the_byte() {
        let a = hex(REFERENCE_EXAMPLE);
        let file = frame(&[&a, &a]);
        let second = (FRAME_BYTES as usize + a.len()) as u64;
        let limits = Limits::default();
        let mut bad = file.clone();
        bad[second as usize] ^= 1;
        let e = index_bytes(&bad, &limits).unwrap_err();
        assert!(matches!(e, TfRecordError::LengthCrc { record: 1, offset, .. } if offset == second), "{e:?}");
        assert!(e.to_string().contains("record 1") && e.to_string().contains(&format!("byte {second}")), "{e}");

        let e = index_bytes(&file[..file.len() - 1], &limits).unwrap_err();
        let need = a.len() as u64 + 16;
        assert_eq!(e, TfRecordError::Truncated { record: 1, offset: second, need, have: need - 1 });
        let e = index_bytes(&file[..second as usize + 5], &limits).unwrap_err();
        assert_eq!(e, TfRecordError::Truncated { record: 1, offset: second, need: 12, have: 5 });

        let small = Limits { max_record_bytes: a.len() as u64 - 1, ..limits };
        let e = index_bytes(&file, &small).unwrap_err();
        assert!(matches!(e, TfRecordError::TooLarge { record: 0, offset: 0, what: "record bytes", .. }), "{e:?}");
        let one = Limits { max_records: 1, ..limits };
        let e = index_bytes(&file, &one).unwrap_err();
        assert!(matches!(e, TfRecordError::TooLarge { record: 1, what: "records", .. }), "{e:?}");

        // A length whose CRC is right but which is huge: refused by the limit before anything is read for it.
        let mut huge = (u64::MAX).to_le_bytes().to_vec();
        huge.extend_from_slice(&masked_crc(&huge).to_le_bytes());
        let e = index_bytes(&huge, &limits).unwrap_err();
        assert!(matches!(e, TfRecordError::TooLarge { size: u64::MAX, .. }), "{e:?}");
        let e = index_bytes(&huge, &Limits { max_record_bytes: u64::MAX, ..limits }).unwrap_err();
        assert!(matches!(e, TfRecordError::TooLarge { limit, .. } if limit == u64::from(u32::MAX)), "{e:?}");

        // A data byte flipped: the index is fine, the read names the record and the data's offset.
        let mut bad = file.clone();
        bad[second as usize + 20] ^= 0x40;
        let ix = index_bytes(&bad, &limits).unwrap();
        let e = ix.read(&mut slice_reader(&bad), 1).unwrap().unwrap_err();
        assert!(
            matches!(&e, TfRecordError::InRecord { record: 1, offset, error }
            if *offset == second + 12 && matches!(**error, TfRecordError::DataCrc { .. })),
            "{e:?}"
        );
        assert!(e.to_string().starts_with(&format!("TFRecord record 1 (data at byte {})", second + 12)), "{e}");
        assert_eq!(ImageError::from(e).kind, ImageErrorKind::Corrupt);

        // A reader that fails or returns short.
        let mut failing = |_: u64, _: usize| -> io::Result<Vec<u8>> { Err(io::Error::other("gone")) };
        let e = index_records(&mut failing, 100, &limits).unwrap_err();
        assert!(matches!(&e, TfRecordError::Io { record: 0, offset: 0, message } if message == "gone"), "{e:?}");
        assert_eq!(ImageError::from(e).kind, ImageErrorKind::Io);
        let mut short = |_: u64, n: usize| -> io::Result<Vec<u8>> { Ok(vec![0; n - 1]) };
        assert!(matches!(index_records(&mut short, 100, &limits), Err(TfRecordError::Io { .. })));
    }

    #[test]
    #[allow(clippy::manual_rotate)] // the formula as the format's writers spell it
    fn check_record_uses_the_masked_crc() {
        let c = crc32c::crc32c(b"abc");
        let masked = ((c >> 15) | (c << 17)).wrapping_add(0xa282ead8);
        assert_eq!(check_record(b"abc", masked), Ok(()));
        assert_eq!(check_record(b"abc", c), Err(TfRecordError::DataCrc { stored: c, computed: masked }));
    }

    #[test]
    fn packed_and_unpacked_lists_read_the_same() {
        let mut ex = Example::default();
        ex.features.insert("b".into(), Feature::Bytes(vec![vec![], b"x".to_vec(), vec![0; 300]]));
        ex.features.insert("i".into(), Feature::Int64(vec![0, -1, i64::MIN, i64::MAX, 1 << 40]));
        ex.features.insert("f".into(), Feature::Float(vec![0.0, -1.5, f32::INFINITY, 3.25e-20]));
        ex.features.insert("u".into(), Feature::Unset);
        ex.features.insert("".into(), Feature::Int64(vec![]));
        for packed in [true, false] {
            assert_eq!(parse_example(&encode_example(&ex, packed), &Limits::default()).unwrap(), ex);
        }
        // -1 as an int64 varint is 10 bytes, the last 0x01.
        let mut b = Vec::new();
        varint(-1i64 as u64, &mut b);
        assert_eq!(b.len(), 10);
        assert_eq!(b[9], 1);
    }

    #[test]
    fn merging_follows_protobuf() {
        let limits = Limits::default();
        let one = |k: &str, f: Feature| {
            let mut ex = Example::default();
            ex.features.insert(k.into(), f);
            encode_example(&ex, true)
        };
        // Two Example.features fields merge; the last entry of a key wins, whole.
        let data = [
            one("a", Feature::Int64(vec![1, 2])),
            one("b", Feature::Bytes(vec![b"x".to_vec()])),
            one("a", Feature::Float(vec![1.0])),
        ]
        .concat();
        let ex = parse_example(&data, &limits).unwrap();
        assert_eq!(ex.features["a"], Feature::Float(vec![1.0]));
        assert_eq!(ex.features["b"], Feature::Bytes(vec![b"x".to_vec()]));

        // Inside one Feature: lists of one kind concatenate, another kind replaces.
        let feature = |parts: &[Feature]| {
            let v: Vec<u8> = parts.iter().flat_map(|f| encode_feature(f, false)).collect();
            let mut entry = Vec::new();
            field_len(1, b"k", &mut entry);
            field_len(2, &v, &mut entry);
            let mut fs = Vec::new();
            field_len(1, &entry, &mut fs);
            let mut out = Vec::new();
            field_len(1, &fs, &mut out);
            parse_example(&out, &limits).unwrap().features.remove("k").unwrap()
        };
        let i = |v: &[i64]| Feature::Int64(v.to_vec());
        assert_eq!(feature(&[i(&[1]), i(&[2, 3])]), i(&[1, 2, 3]));
        assert_eq!(feature(&[i(&[1]), Feature::Float(vec![2.0]), i(&[3])]), i(&[3]));
        assert_eq!(feature(&[]), Feature::Unset);

        // An entry without key or value.
        let mut fs = Vec::new();
        field_len(1, &[], &mut fs);
        let mut out = Vec::new();
        field_len(1, &fs, &mut out);
        assert_eq!(parse_example(&out, &limits).unwrap().features[""], Feature::Unset);
    }

    #[test]
    fn unknown_fields_are_skipped_and_bad_wire_refused() {
        let limits = Limits::default();
        let base = hex(REFERENCE_EXAMPLE);
        // Unknown fields of each wire type, before and after, at the top level.
        let mut data = vec![2 << 3, 0x96, 0x01, (3 << 3) | 1, 1, 2, 3, 4, 5, 6, 7, 8, (4 << 3) | 5, 1, 2, 3, 4];
        field_len(9, b"junk", &mut data);
        data.extend_from_slice(&base);
        // Field 1 with a wrong wire type is unknown too.
        data.extend_from_slice(&[1 << 3, 5]);
        assert_eq!(parse_example(&data, &limits).unwrap(), reference());

        let refused = |bytes: &[u8], offset: u64, what: &str| {
            let e = parse_example(bytes, &limits).unwrap_err();
            match &e {
                TfRecordError::Protobuf { offset: o, what: w } => {
                    assert_eq!((*o, w.contains(what)), (offset, true), "{e:?}")
                }
                _ => panic!("{e:?}"),
            }
        };
        refused(&[(5 << 3) | 3], 0, "group");
        refused(&[(5 << 3) | 4], 0, "group");
        refused(&[(5 << 3) | 6], 0, "wire type 6");
        refused(&[0], 0, "field number 0");
        refused(&[0x80; 11], 0, "longer than 10 bytes");
        refused(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02], 0, "64 bits");
        refused(&[0x80, 0x80, 0x80, 0x80, 0x10], 0, "tag does not fit");
        refused(&[0x0a, 0x05, 1], 1, "says 5 bytes, 1 remain");
        refused(&[0x0a], 1, "cut short");
        refused(&[0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 1, "remain");
        // A packed float list of 3 bytes, at its tag (data offset 8).
        let mut fl = Vec::new();
        field_len(1, &[0, 0, 0], &mut fl);
        let mut f = Vec::new();
        field_len(2, &fl, &mut f);
        let mut entry = Vec::new();
        field_len(2, &f, &mut entry);
        let mut fs = Vec::new();
        field_len(1, &entry, &mut fs);
        let mut out = Vec::new();
        field_len(1, &fs, &mut out);
        refused(&out, 8, "packed float list of 3 bytes");
        // A feature name that is not UTF-8, at its bad byte.
        let mut entry = Vec::new();
        field_len(1, b"ab\xff", &mut entry);
        let mut fs = Vec::new();
        field_len(1, &entry, &mut fs);
        let mut out = Vec::new();
        field_len(1, &fs, &mut out);
        refused(&out, 8, "not UTF-8");
    }

    #[test]
    fn feature_and_value_counts_are_bounded() {
        let mut ex = Example::default();
        for i in 0..10 {
            ex.features.insert(format!("f{i}"), Feature::Int64(vec![i; 10]));
        }
        let data = encode_example(&ex, true);
        let ok = Limits { max_features: 10, max_values: 100, ..Limits::default() };
        assert_eq!(parse_example(&data, &ok).unwrap(), ex);
        let e = parse_example(&data, &Limits { max_features: 9, ..ok }).unwrap_err();
        assert!(e.to_string().contains("more than 9 features"), "{e}");
        let e = parse_example(&data, &Limits { max_values: 99, ..ok }).unwrap_err();
        assert!(e.to_string().contains("more than 99 values"), "{e}");
        let e = parse_example(&encode_example(&ex, false), &Limits { max_values: 99, ..ok }).unwrap_err();
        assert!(e.to_string().contains("more than 99 values"), "{e}");
    }

    #[test]
    fn every_truncation_is_an_error_or_the_records_before_it() {
        let a = hex(REFERENCE_EXAMPLE);
        let mut ex = reference();
        ex.features.insert("image/bbox".into(), Feature::Float(vec![0.25, 0.5]));
        let b = encode_example(&ex, false);
        let file = frame(&[&a, &b, b""]);
        let ends = [0, a.len() + 16, a.len() + b.len() + 32, file.len()];
        for cut in 0..file.len() {
            match all_records(&file[..cut]) {
                Ok(exs) => {
                    let k = ends.iter().position(|&e| e == cut).unwrap_or_else(|| panic!("cut {cut} read"));
                    assert_eq!(exs.len(), k);
                }
                Err(e) => assert!(!ends.contains(&cut), "cut {cut}: {e}"),
            }
        }
        for data in [&a, &b] {
            for cut in 1..data.len() {
                assert!(parse_example(&data[..cut], &Limits::default()).is_err(), "cut {cut}");
            }
        }
    }

    #[test]
    fn every_flipped_byte_of_a_file_is_caught_and_nothing_panics() {
        let a = hex(REFERENCE_EXAMPLE);
        let file = frame(&[&a, b"", &a]);
        for at in 0..file.len() {
            for mask in [0x01, 0x80, 0xff, 0x5a] {
                let mut bad = file.clone();
                bad[at] ^= mask;
                // CRC-32C catches every error inside 32 bits: each flip is refused, by the framing or a CRC.
                assert!(all_records(&bad).is_err(), "byte {at} ^ {mask:#x}");
            }
        }
        // The Example alone, flipped: an error or a valid parse.
        for at in 0..a.len() {
            for mask in 1..=255u8 {
                let mut bad = a.clone();
                bad[at] ^= mask;
                let _ = parse_example(&bad, &Limits::default());
            }
        }
    }

    /// Bytes the parse keeps, with numbers counted at one byte per value: never more than its input.
    fn kept(ex: &Example) -> usize {
        ex.features
            .iter()
            .map(|(k, f)| {
                k.len()
                    + match f {
                        Feature::Bytes(v) => v.iter().map(|b| b.len().max(1)).sum(),
                        Feature::Int64(v) => v.len(),
                        Feature::Float(v) => v.len(),
                        Feature::Unset => 0,
                    }
            })
            .sum()
    }

    fn cases(default: u32) -> u32 {
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
    }

    fn feature() -> impl Strategy<Value = Feature> {
        prop_oneof![
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..6), 0..4).prop_map(Feature::Bytes),
            proptest::collection::vec(any::<i64>(), 0..5).prop_map(Feature::Int64),
            proptest::collection::vec(any::<f32>(), 0..5).prop_map(Feature::Float),
        ]
    }

    fn example() -> impl Strategy<Value = Example> {
        proptest::collection::btree_map(".{0,6}", feature(), 0..5).prop_map(|features| Example { features })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(2000), ..ProptestConfig::default() })]

        /// Any bytes: an Example whose kept bytes are bounded by the input, or an error; never a panic.
        #[test]
        fn parse_example_takes_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..96)) {
            if let Ok(ex) = parse_example(&data, &Limits::default()) {
                prop_assert!(kept(&ex) <= data.len());
            }
        }

        /// Valid encodings with random edits (bytes replaced, inserted, cut): an error or a bounded parse.
        #[test]
        fn edited_examples_never_panic(
            ex in example(),
            packed in any::<bool>(),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..4),
        ) {
            let mut data = encode_example(&ex, packed);
            for (at, byte, op) in edits {
                let at = at % (data.len() + 1);
                match op {
                    0 if at < data.len() => data[at] = byte,
                    1 => data.insert(at, byte),
                    _ => data.truncate(at),
                }
            }
            if let Ok(ex) = parse_example(&data, &Limits::default()) {
                prop_assert!(kept(&ex) <= data.len());
            }
        }

        /// Encode, parse: the same Example (packed and unpacked), also framed in a file.
        #[test]
        fn examples_round_trip(ex in example(), packed in any::<bool>()) {
            let data = encode_example(&ex, packed);
            let back = parse_example(&data, &Limits::default()).unwrap();
            prop_assert_eq!(bits(&back), bits(&ex));
            let file = frame(&[&data, &data]);
            let exs = all_records(&file).unwrap();
            prop_assert_eq!(exs.len(), 2);
            prop_assert_eq!(bits(&exs[1]), bits(&ex));
        }

        /// Any bytes as a file: records inside the file, back to back, ending at its end; or an error.
        #[test]
        fn index_takes_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..96), framed in any::<bool>()) {
            // Half the inputs are framed records (valid CRCs) with random tails, so the checks behind the
            // length CRC are reached.
            let file = if framed { [frame(&[&data[..data.len() / 2]]), data[data.len() / 2..].to_vec()].concat() } else { data };
            if let Ok(ix) = index_bytes(&file, &Limits::default()) {
                let mut at = 0u64;
                for &(o, n) in &ix.offsets {
                    prop_assert_eq!(o, at + HEAD_BYTES);
                    at = o + u64::from(n) + 4;
                }
                prop_assert_eq!(at, file.len() as u64);
                prop_assert!(ix.offsets.len() <= file.len() / FRAME_BYTES as usize);
                let mut read = slice_reader(&file);
                for i in 0..ix.offsets.len() {
                    if let Ok(d) = ix.read(&mut read, i).unwrap() {
                        let _ = parse_example(&d, &Limits::default());
                    }
                }
            }
        }
    }
}
