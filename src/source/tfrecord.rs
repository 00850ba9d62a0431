//! source/tfrecord — TensorFlow's TFRecord files as a record source (kind "tfrecord"): the record framing, read
//! natively (an index of each file's records, both CRCs of every record), and the `tf.train.Example` protobuf
//! inside a record, decoded by `prost` through five hand-written message structs ([`pb`]: no build script, no
//! protoc). The store (records.rs) reads *units*: runs of consecutive records of about 8 MiB of decoded bytes.
//! docs/design/formats-research.md §5 holds the facts this file follows.
//!
//! ```text
//! a file: records back to back, nothing between them, nothing after the last
//! one record: length u64 LE · masked_crc32c(the 8 length bytes) u32 LE · data[length] · masked_crc32c(data) u32 LE
//! masked_crc32c(b) = ((c >> 15) | (c << 17)) + 0xa282ead8 mod 2^32, c = CRC-32C (Castagnoli) of b
//! a sidecar index (`<file>.tfindex` or `<file>.index`, the `tfrecord` package's tfrecord2idx): text lines
//!   "<record start> <record bytes incl. the 16 framing bytes>\n"
//!
//! Example  { Features features = 1 }
//! Features { map<string, Feature> feature = 1 }            map entry: key = 1, value = 2
//! Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3 } }
//! BytesList { repeated bytes value = 1 }   FloatList { repeated float value = 1 }   Int64List { repeated int64 value = 1 }
//! ```
//!
//! # A sample
//! One record is one sample, named `file#n` (its number in its file). Its image is the first value of the bytes
//! feature `image_column` (default `image/encoded`, else `image`: whichever the first record has); its label the
//! first value of the int64 feature `label_column` (default `image/class/label`, else `label`; a record without
//! it, or with an empty list, has -1); its extras the other features (by default every feature of the first
//! record but the image and the label, in name order). An extra is [`Value::Null`] when the record lacks it;
//! a list of one value is that value (`Bytes`, `Int`, `Float`), any other count a [`Value::List`]. Bytes stay
//! [`Value::Bytes`], text or not: TensorFlow stores strings as bytes and has no way to say which they are.
//! Labels are taken as stored: the TPU ImageNet converters write 1-based labels.
//!
//! # Untrusted bytes
//! Every file and record is hostile until read. Nothing here panics or allocates before the length that asks
//! for it is checked against the bytes that remain and the [`Limits`].
//! - Framing ([`index_records`]): the length's CRC is checked before the length is trusted; a length above
//!   [`Limits::max_record_bytes`], a record that ends past the file, a cut tail and more than
//!   [`Limits::max_records`] records are refused (a `SourceError` naming the file, the record and the byte).
//!   The scan reads the 12-byte heads and skips the data.
//! - A sidecar index is checked against the file: its entries tile the file from byte 0 to its end, each at least
//!   16 bytes, each record's data within the length limit; its size is capped before it is read. Each record's
//!   head is checked again when its unit is read (length equal to the index's, length CRC).
//! - Reading a unit ([`RecordFormat::decode_unit`]): per record the head (its length CRC, the length the index
//!   holds) and the data's CRC; a record that fails either is one bad sample (`Corrupt`, naming `file#record`),
//!   not its unit.
//! - Protobuf ([`parse_example`]): prost's decoder (wire types, varints of at most 10 bytes, lengths within the
//!   bytes that remain, UTF-8 map keys, recursion limit 100) on a record already capped at
//!   [`Limits::max_record_bytes`]. prost merges as protobuf does: a message field seen twice merges, the last
//!   map entry of a key wins, a `oneof` seen with another kind is replaced, repeated scalars are read packed and
//!   unpacked, unknown fields (groups included) are skipped. Its memory is a constant factor of the record's
//!   bytes (a `Vec<u8>` of 24 bytes per bytes value of at least 2 bytes, 8 bytes per int of at least 1 byte);
//!   the features ([`Limits::max_features`]) and values ([`Limits::max_values`]) a record yields are then
//!   counted and refused past their limits.
//! - A unit's decoded size is bounded at open from the record lengths alone ([`record_bound`]): an extra can
//!   take up to 9 bytes per byte of its record (an int packed in one byte is 9 bytes in the decoded block).

use super::packed::DEFAULT_BLOCK_BYTES;
use super::records::{
    Catalogue, Columns, EXTRAS, IMAGE_COLUMN, LABEL_COLUMN, LabelColumn, MESSAGE_BYTES, RecordFormat, Unit,
    UnitBuilder, Value, cut_message, table_bytes,
};
use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use crate::storage::{Location, ObjectReader, StorageOptions};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Bytes of a record's head: the length u64 and its masked CRC u32.
pub const HEAD_BYTES: u64 = 12;
/// Bytes of framing around a record's data: its head and the data's masked CRC.
pub const FRAME_BYTES: u64 = 16;
/// The constant added to a rotated CRC-32C (TensorFlow's `kMaskDelta`).
pub const MASK_DELTA: u32 = 0xa282_ead8;

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
        /// What is wrong, in words (prost's message: the field path and the fault).
        what: String,
    },
    /// A record's head does not match what its file's index (a sidecar) says, or lies outside its unit.
    Framing {
        /// The record.
        record: u64,
        /// The record's start.
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
            Self::Protobuf { what } => write!(f, "not a tf.train.Example: {what}"),
            Self::Framing { record, offset, what } => write!(f, "TFRecord record {record} at byte {offset}: {what}"),
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

impl Feature {
    /// Values it holds.
    fn count(&self) -> usize {
        match self {
            Feature::Bytes(v) => v.len(),
            Feature::Int64(v) => v.len(),
            Feature::Float(v) => v.len(),
            Feature::Unset => 0,
        }
    }

    /// What kind of list it is, in words.
    fn kind_name(&self) -> &'static str {
        match self {
            Feature::Bytes(_) => "a bytes list",
            Feature::Int64(_) => "an int64 list",
            Feature::Float(_) => "a float list",
            Feature::Unset => "an empty feature",
        }
    }

    /// As an extra: one value is that value, another count a list (module docs).
    fn value(&self) -> Value {
        fn one_or_list<T>(v: &[T], f: impl Fn(&T) -> Value) -> Value {
            match v {
                [x] => f(x),
                v => Value::List(v.iter().map(f).collect()),
            }
        }
        match self {
            Feature::Bytes(v) => one_or_list(v, |b| Value::Bytes(b.clone())),
            Feature::Int64(v) => one_or_list(v, |&x| Value::Int(x)),
            Feature::Float(v) => one_or_list(v, |&x| Value::Float(f64::from(x))),
            Feature::Unset => Value::Null,
        }
    }
}

/// A `tf.train.Example`: feature name → values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Example {
    /// The features, by name.
    pub features: BTreeMap<String, Feature>,
}

/// The five messages of `tf.train.Example` (tensorflow/core/example/{example,feature}.proto, proto3, package
/// `tensorflow`), written by hand for prost's derive: the wire format is these tags and types, nothing else.
pub mod pb {
    use std::collections::BTreeMap;

    /// `message Example { Features features = 1; }`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Example {
        /// The features (absent: none).
        #[prost(message, optional, tag = "1")]
        pub features: Option<Features>,
    }

    /// `message Features { map<string, Feature> feature = 1; }`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Features {
        /// The features by name.
        #[prost(btree_map = "string, message", tag = "1")]
        pub feature: BTreeMap<String, Feature>,
    }

    /// `message Feature { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Feature {
        /// The list it holds (None: unset).
        #[prost(oneof = "Kind", tags = "1, 2, 3")]
        pub kind: Option<Kind>,
    }

    /// `Feature.kind`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        /// `bytes_list = 1`.
        #[prost(message, tag = "1")]
        BytesList(BytesList),
        /// `float_list = 2`.
        #[prost(message, tag = "2")]
        FloatList(FloatList),
        /// `int64_list = 3`.
        #[prost(message, tag = "3")]
        Int64List(Int64List),
    }

    /// `message BytesList { repeated bytes value = 1; }`
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct BytesList {
        /// The values.
        #[prost(bytes = "vec", repeated, tag = "1")]
        pub value: Vec<Vec<u8>>,
    }

    /// `message FloatList { repeated float value = 1 [packed = true]; }` (unpacked values are read too).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct FloatList {
        /// The values.
        #[prost(float, repeated, tag = "1")]
        pub value: Vec<f32>,
    }

    /// `message Int64List { repeated int64 value = 1 [packed = true]; }` (unpacked values are read too).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Int64List {
        /// The values.
        #[prost(int64, repeated, tag = "1")]
        pub value: Vec<i64>,
    }
}

/// Parse one record's data as a `tf.train.Example` with prost (module docs: its rules and bounds), then refuse
/// more features than [`Limits::max_features`] or values than [`Limits::max_values`].
pub fn parse_example(data: &[u8], limits: &Limits) -> std::result::Result<Example, TfRecordError> {
    use prost::Message;
    let protobuf = |what: String| TfRecordError::Protobuf { what };
    if data.len() as u64 > limits.max_record_bytes {
        return Err(protobuf(format!("{} bytes, the limit is {}", data.len(), limits.max_record_bytes)));
    }
    let decoded = pb::Example::decode(data).map_err(|e| protobuf(e.to_string()))?;
    let map = decoded.features.map(|f| f.feature).unwrap_or_default();
    if map.len() > limits.max_features {
        return Err(protobuf(format!("more than {} features in the record", limits.max_features)));
    }
    let mut values = 0usize;
    let mut features = BTreeMap::new();
    for (name, f) in map {
        let f = match f.kind {
            None => Feature::Unset,
            Some(pb::Kind::BytesList(l)) => Feature::Bytes(l.value),
            Some(pb::Kind::FloatList(l)) => Feature::Float(l.value),
            Some(pb::Kind::Int64List(l)) => Feature::Int64(l.value),
        };
        values = values.saturating_add(f.count());
        features.insert(name, f);
    }
    if values > limits.max_values {
        return Err(protobuf(format!("more than {} values in the record", limits.max_values)));
    }
    Ok(Example { features })
}

// ---------------------------------------------------------------------------------------------------------------
// The source.

/// The features the image is looked for under when `image_column` is not given, in order.
pub const IMAGE_KEYS: [&str; 2] = ["image/encoded", "image"];
/// The features the label is looked for under when `label_column` is not given, in order.
pub const LABEL_KEYS: [&str; 2] = ["image/class/label", "label"];
/// The suffixes of a record file's sidecar index (`<file><suffix>`), tried in order.
pub const SIDECARS: [&str; 2] = [".tfindex", ".index"];
/// Records of the first file tried at open for its feature names before the source is refused.
const FIRST_RECORDS_TRIED: usize = 16;

/// The most bytes a record of `len` data bytes may add to its unit's decoded block when `fields` extras are
/// read: its image (at most its bytes) and its extras (their values take at most twice the bytes the record's
/// protobuf gives them: `records::encode_value`; a byte per absent field), a bad record's message, its table row.
pub fn record_bound(len: u32, fields: usize) -> u64 {
    let len = u64::from(len);
    let content = if fields == 0 { len } else { 2 * len + fields as u64 };
    content + MESSAGE_BYTES + table_bytes(1) - table_bytes(0)
}

/// The TFRecord format of one source: each file's record index and the features that make a sample.
#[derive(Debug)]
struct TfRecordFormat {
    /// Per file: its name (for errors) and its records.
    files: Vec<(PathBuf, RecordIndex)>,
    /// The image's feature.
    image: String,
    /// The label's feature (None: every label -1).
    label: Option<String>,
    /// The extras' features.
    fields: Vec<String>,
    limits: Limits,
}

impl TfRecordFormat {
    /// Record `n` of file `file` (data at `data_at`, `len` bytes, per the index) from its unit's bytes: its head
    /// and both CRCs checked.
    fn record<'b>(
        &self,
        unit: &Unit,
        bytes: &'b [u8],
        n: u64,
        (data_at, len): (u64, u32),
    ) -> std::result::Result<&'b [u8], TfRecordError> {
        let head_at = data_at.checked_sub(HEAD_BYTES).and_then(|h| h.checked_sub(unit.offset));
        let end = data_at.checked_add(u64::from(len) + 4).and_then(|e| e.checked_sub(unit.offset));
        let (Some(head_at), Some(end)) = (head_at, end) else {
            return Err(TfRecordError::Framing { record: n, offset: data_at, what: "lies outside its unit".into() });
        };
        let slice = usize::try_from(head_at).ok().zip(usize::try_from(end).ok()).and_then(|(a, e)| bytes.get(a..e));
        let Some(frame) = slice else {
            return Err(TfRecordError::Framing { record: n, offset: data_at, what: "lies outside its unit".into() });
        };
        let (head, rest) = frame.split_at(HEAD_BYTES as usize);
        let stored = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        let computed = masked_crc(&head[..8]);
        let offset = data_at - HEAD_BYTES;
        if stored != computed {
            return Err(TfRecordError::LengthCrc { record: n, offset, stored, computed });
        }
        let stated = u64::from_le_bytes([head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7]]);
        if stated != u64::from(len) {
            return Err(TfRecordError::Framing {
                record: n,
                offset,
                what: format!("its head says {stated} bytes where the index says {len}"),
            });
        }
        let (data, crc) = rest.split_at(len as usize);
        check_record(data, u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]))
            .map_err(|e| e.in_record(n, data_at))?;
        Ok(data)
    }

    /// One parsed record's sample into `out` (a bad sample when its image or label cannot be read).
    fn sample(
        &self,
        ex: &Example,
        name: &dyn Fn() -> String,
        out: &mut UnitBuilder,
    ) -> std::result::Result<(), ImageError> {
        let bad =
            |message: String| ImageError::new(ImageErrorKind::Corrupt, cut_message(format!("{}: {message}", name())));
        let image = match ex.features.get(&self.image) {
            Some(Feature::Bytes(v)) if !v.is_empty() => &v[0],
            Some(f) => {
                return out.bad(bad(format!("its image feature {:?} is {} with no bytes", self.image, f.kind_name())));
            }
            None => return out.bad(bad(format!("has no image feature {:?}", self.image))),
        };
        let label = match self.label.as_ref().map(|k| (k, ex.features.get(k))) {
            None | Some((_, None | Some(Feature::Unset))) => -1,
            Some((_, Some(Feature::Int64(v)))) => v.first().copied().unwrap_or(-1),
            Some((k, Some(f))) => return out.bad(bad(format!("its label feature {k:?} is {}", f.kind_name()))),
        };
        let extras: Vec<Value> =
            self.fields.iter().map(|k| ex.features.get(k).map_or(Value::Null, Feature::value)).collect();
        out.image(image, label, &extras)
    }
}

impl RecordFormat for TfRecordFormat {
    fn kind(&self) -> &'static str {
        "tfrecord"
    }

    fn decode_unit(&self, unit: &Unit, bytes: &Bytes, out: &mut UnitBuilder) -> std::result::Result<(), ImageError> {
        let (path, index) = self
            .files
            .get(unit.file as usize)
            .ok_or_else(|| ImageError::new(ImageErrorKind::Corrupt, "a unit of no file"))?;
        for k in 0..u64::from(unit.samples) {
            let n = unit.first + k;
            let name = || format!("{}#{n}", path.display());
            let Some(&at) = usize::try_from(n).ok().and_then(|n| index.offsets.get(n)) else {
                return Err(ImageError::new(ImageErrorKind::Corrupt, format!("{}: no such record", name())));
            };
            let parsed = self
                .record(unit, bytes, n, at)
                .and_then(|data| parse_example(data, &self.limits).map_err(|e| e.in_record(n, at.0)));
            match parsed {
                Ok(ex) => self.sample(&ex, &name, out)?,
                Err(e) => {
                    let e = ImageError::from(e);
                    out.bad(ImageError::new(e.kind, cut_message(format!("{}: {}", name(), e.message))))?
                }
            }
        }
        Ok(())
    }
}

/// The record files of `locations`: a local directory stands for its files (sorted by name; hidden files and
/// sidecar indexes left out), anything else for itself.
fn record_files(locations: &[Location]) -> Result<Vec<Location>> {
    let mut out = Vec::new();
    for loc in locations {
        match loc {
            Location::Local(dir) if dir.is_dir() => {
                let source = |m: String| TrdataError::Source { path: dir.clone(), message: m };
                let entries = std::fs::read_dir(dir).map_err(|e| source(format!("cannot be listed: {e}")))?;
                let mut names = Vec::new();
                for entry in entries {
                    let entry = entry.map_err(|e| source(format!("cannot be listed: {e}")))?;
                    let name = entry.file_name();
                    let text = name.to_string_lossy();
                    if text.starts_with('.') || SIDECARS.iter().any(|s| text.ends_with(s)) {
                        continue;
                    }
                    if entry.path().is_file() {
                        names.push(name);
                    }
                }
                if names.is_empty() {
                    return Err(source("holds no record files".into()));
                }
                names.sort();
                out.extend(names.into_iter().map(|n| Location::Local(dir.join(n))));
            }
            loc => out.push(loc.clone()),
        }
    }
    Ok(out)
}

/// The sidecar index of `file` (module docs), checked against it; None when it has none.
fn sidecar(file: &ObjectReader, storage: &StorageOptions, limits: &Limits) -> Result<Option<RecordIndex>> {
    for suffix in SIDECARS {
        let side = match file.location() {
            Location::Local(p) => {
                let mut s = p.as_os_str().to_owned();
                s.push(suffix);
                let p = PathBuf::from(s);
                if !p.is_file() {
                    continue;
                }
                Location::Local(p)
            }
            Location::Url { scheme, url } => {
                let mut url = url.clone();
                url.set_path(&format!("{}{suffix}", url.path()));
                Location::Url { scheme: *scheme, url }
            }
            other => {
                let text = format!("{}{suffix}", other.name().to_string_lossy());
                match Location::parse("paths", std::path::Path::new(&text)) {
                    Ok(l) => l,
                    Err(_) => continue,
                }
            }
        };
        let reader = match ObjectReader::open(&side, storage) {
            Ok(r) => r,
            Err(e) if side.is_remote() => {
                let _ = e; // an object that is not there: no sidecar
                continue;
            }
            Err(e) => return Err(e),
        };
        return parse_sidecar(&reader, file.size(), limits).map(Some);
    }
    Ok(None)
}

/// Bytes of a sidecar line at most (two 20-digit numbers, a space, a newline).
const SIDECAR_LINE_BYTES: u64 = 42;

/// A sidecar index read from `side`, checked against a record file of `file_len` bytes.
fn parse_sidecar(side: &ObjectReader, file_len: u64, limits: &Limits) -> Result<RecordIndex> {
    let most_records = (file_len / FRAME_BYTES).min(limits.max_records);
    let cap = most_records.saturating_add(1).saturating_mul(SIDECAR_LINE_BYTES).min(1 << 30);
    if side.size() > cap {
        return Err(side.source_error(format!(
            "a sidecar index of {} bytes for a record file of {file_len} bytes (at most {cap})",
            side.size()
        )));
    }
    let text = side.read_growing(0, side.size()).map_err(|e| side.source_error(e.message))?;
    let max_len = limits.max_record_bytes.min(u64::from(u32::MAX));
    let mut offsets = Vec::new();
    let mut at = 0u64;
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let bad = |why: String| side.source_error(format!("sidecar line {}: {why}", i + 1));
        let number = |s: &[u8]| -> Option<u64> {
            (!s.is_empty() && s.len() <= 20 && s.iter().all(u8::is_ascii_digit))
                .then(|| std::str::from_utf8(s).ok()?.parse().ok())
                .flatten()
        };
        let mut parts = line.split(|&b| b == b' ').filter(|p| !p.is_empty());
        let (Some(start), Some(size), None) =
            (parts.next().and_then(number), parts.next().and_then(number), parts.next())
        else {
            return Err(bad(format!("{:?} is not two numbers", String::from_utf8_lossy(line))));
        };
        if start != at {
            return Err(bad(format!("a record at byte {start} where the one before ends at {at}")));
        }
        if size < FRAME_BYTES || size - FRAME_BYTES > max_len {
            return Err(bad(format!("a record of {size} bytes (16 to {} with its framing)", max_len + FRAME_BYTES)));
        }
        let end = start.checked_add(size).filter(|&e| e <= file_len);
        let Some(end) = end else {
            return Err(bad(format!("a record at byte {start} of {size} bytes ends past the file's {file_len}")));
        };
        if offsets.len() as u64 >= most_records {
            return Err(bad(format!("more than {most_records} records")));
        }
        offsets.push((start + HEAD_BYTES, (size - FRAME_BYTES) as u32));
        at = end;
    }
    if at != file_len {
        return Err(side.source_error(format!("the sidecar index ends at byte {at}, the record file at {file_len}")));
    }
    Ok(RecordIndex { offsets })
}

/// The records of `file` from one scan of its 12-byte heads (read ahead in windows: 4 KiB locally, 256 KiB from
/// a store, so a store is asked once for many small records).
fn scan(file: &ObjectReader, limits: &Limits) -> Result<RecordIndex> {
    let window: u64 = if file.location().is_remote() { 256 << 10 } else { 4 << 10 };
    let size = file.size();
    let mut buf = Vec::new();
    let mut buf_at = 0u64;
    let mut read = |offset: u64, len: usize| -> io::Result<Vec<u8>> {
        let len64 = len as u64;
        let inside = offset >= buf_at && offset.saturating_add(len64) <= buf_at + buf.len() as u64;
        if !inside {
            let n = window.max(len64).min(size.saturating_sub(offset));
            file.read_range(offset, n, n, &mut buf).map_err(|e| io::Error::other(e.message))?;
            buf_at = offset;
        }
        let a = (offset - buf_at) as usize;
        buf.get(a..a + len)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "short read"))
    };
    index_records(&mut read, size, limits).map_err(|e| file.source_error(e.to_string()))
}

/// The units of file `file` (index `index`): runs of consecutive records whose decoded bound
/// ([`record_bound`]) stays within [`DEFAULT_BLOCK_BYTES`] (at least one record each).
fn units_of(file: u32, index: &RecordIndex, fields: usize) -> Vec<Unit> {
    let offsets = &index.offsets;
    let mut units = Vec::new();
    let mut k = 0;
    while k < offsets.len() {
        let start = k;
        let (mut bound, mut len) = (table_bytes(0), 0u64);
        while k < offsets.len() {
            let b = record_bound(offsets[k].1, fields);
            if k > start && bound + b > DEFAULT_BLOCK_BYTES {
                break;
            }
            bound += b;
            len += u64::from(offsets[k].1) + FRAME_BYTES;
            k += 1;
        }
        units.push(Unit {
            file,
            offset: offsets[start].0 - HEAD_BYTES,
            len,
            samples: (k - start) as u32,
            first: start as u64,
            inflate: None,
            decoded_bytes: bound,
            tag: 0,
        });
    }
    units
}

/// The first record of `files` that reads and parses (of the first [`FIRST_RECORDS_TRIED`] records): how the
/// source learns the feature names.
fn first_example(files: &[(ObjectReader, RecordIndex)], limits: &Limits) -> Result<Example> {
    let mut last = None;
    for (reader, index) in files {
        for (n, &(at, len)) in index.offsets.iter().enumerate().take(FIRST_RECORDS_TRIED) {
            let mut buf = Vec::new();
            let got = reader
                .read_range(at, u64::from(len) + 4, u64::from(len) + 4, &mut buf)
                .map_err(|e| TfRecordError::Io { record: n as u64, offset: at, message: e.message })
                .and_then(|()| {
                    let (data, crc) = buf.split_at(len as usize);
                    check_record(data, u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]))
                        .and_then(|()| parse_example(data, limits))
                        .map_err(|e| e.in_record(n as u64, at))
                });
            match got {
                Ok(ex) => return Ok(ex),
                Err(e) => last = Some(reader.source_error(e.to_string())),
            }
        }
        if !index.offsets.is_empty() {
            break;
        }
    }
    Err(last.unwrap_or_else(|| TrdataError::Source {
        path: files.first().map_or_else(PathBuf::new, |(r, _)| r.name().to_path_buf()),
        message: "the TFRecord files hold no records".into(),
    }))
}

/// The features of the first record, in words (for errors).
fn listing(ex: &Example) -> String {
    let names: Vec<String> = ex.features.iter().map(|(k, f)| format!("{k:?} ({})", f.kind_name())).collect();
    names.join(", ")
}

/// Which features make a sample: (image, label, extras), checked against the first record's features.
fn choose(columns: &Columns, first: &Example, name: &Path) -> Result<(String, Option<String>, Vec<String>)> {
    let has = |k: &str, kind: fn(&Feature) -> bool| first.features.get(k).is_some_and(kind);
    let is_bytes = |f: &Feature| matches!(f, Feature::Bytes(_));
    let is_int = |f: &Feature| matches!(f, Feature::Int64(_));
    let at = name.display();
    let image = match &columns.image {
        Some(k) if has(k, is_bytes) => k.clone(),
        Some(k) => {
            return Err(TrdataError::config(
                IMAGE_COLUMN,
                format!("{k:?} is not a bytes feature of {at}'s first record (its features: {})", listing(first)),
            ));
        }
        None => match IMAGE_KEYS.iter().find(|k| has(k, is_bytes)) {
            Some(k) => (*k).to_string(),
            None => {
                return Err(TrdataError::config(
                    IMAGE_COLUMN,
                    format!(
                        "{at}'s first record has no bytes feature \"image/encoded\" or \"image\": name the image's \
                         (its features: {})",
                        listing(first)
                    ),
                ));
            }
        },
    };
    let label = match &columns.label {
        LabelColumn::Absent => None,
        LabelColumn::Default => LABEL_KEYS.iter().find(|k| has(k, is_int)).map(|k| (*k).to_string()),
        LabelColumn::Named(k) if has(k, is_int) => Some(k.clone()),
        LabelColumn::Named(k) => {
            return Err(TrdataError::config(
                LABEL_COLUMN,
                format!("{k:?} is not an int64 feature of {at}'s first record (its features: {})", listing(first)),
            ));
        }
    };
    let extras = match &columns.extras {
        None => first.features.keys().filter(|k| **k != image && Some(*k) != label.as_ref()).cloned().collect(),
        Some(list) => {
            if let Some(k) = list.iter().find(|k| !first.features.contains_key(*k)) {
                return Err(TrdataError::config(
                    EXTRAS,
                    format!("{k:?} is not a feature of {at}'s first record (its features: {})", listing(first)),
                ));
            }
            list.clone()
        }
    };
    Ok((image, label, extras))
}

/// Open TFRecord files as a record source (module docs): `files` are record files or local directories of them
/// (sorted), each indexed from its sidecar or one scan of its heads, its features chosen from the first record.
pub fn open(
    files: &[Location],
    storage: &StorageOptions,
    columns: &Columns,
) -> Result<(Catalogue, Box<dyn RecordFormat>)> {
    let limits = Limits::default();
    let mut opened = Vec::new();
    for loc in record_files(files)? {
        let reader = ObjectReader::open(&loc, storage)?;
        let index = match sidecar(&reader, storage, &limits)? {
            Some(index) => index,
            None => scan(&reader, &limits)?,
        };
        opened.push((reader, index));
    }
    let first = first_example(&opened, &limits)?;
    let name = opened.first().map_or_else(PathBuf::new, |(r, _)| r.name().to_path_buf());
    let (image, label, fields) = choose(columns, &first, &name)?;
    let mut units = Vec::new();
    for (k, (_, index)) in opened.iter().enumerate() {
        units.extend(units_of(k as u32, index, fields.len()));
    }
    let (readers, indexes): (Vec<ObjectReader>, Vec<RecordIndex>) = opened.into_iter().unzip();
    let format = TfRecordFormat {
        files: readers.iter().map(|r| r.name().to_path_buf()).zip(indexes).collect(),
        image,
        label,
        fields: fields.clone(),
        limits,
    };
    Ok((Catalogue { files: readers, units, fields, classes: Vec::new() }, Box::new(format)))
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
        assert_eq!(parse_example(&data, &limits).unwrap(), reference());
        // A group (wire types 3 and 4) of an unknown field is skipped whole, as protobuf skips it.
        let mut grouped = vec![(5 << 3) | 3, 1 << 3, 7, (5 << 3) | 4];
        grouped.extend_from_slice(&base);
        assert_eq!(parse_example(&grouped, &limits).unwrap(), reference());

        let refused = |bytes: &[u8], what: &str| {
            let e = parse_example(bytes, &limits).unwrap_err();
            match &e {
                TfRecordError::Protobuf { what: w } => assert!(w.contains(what), "{e:?} lacks {what:?}"),
                _ => panic!("{e:?}"),
            }
            assert!(e.to_string().starts_with("not a tf.train.Example: "), "{e}");
        };
        // Field 1 with another wire type than its own.
        refused(&[1 << 3, 5], "wire type");
        refused(&[(5 << 3) | 3], "");
        refused(&[(5 << 3) | 4], "end group");
        refused(&[(5 << 3) | 6], "wire type");
        refused(&[0], "tag");
        refused(&[0x80; 11], "varint");
        refused(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02], "varint");
        refused(&[0x80, 0x80, 0x80, 0x80, 0x10], "");
        refused(&[0x0a, 0x05, 1], "underflow");
        refused(&[0x0a], "");
        refused(&[0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], "");
        // A packed float list of 3 bytes.
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
        refused(&out, "");
        // A feature name that is not UTF-8.
        let mut entry = Vec::new();
        field_len(1, b"ab\xff", &mut entry);
        let mut fs = Vec::new();
        field_len(1, &entry, &mut fs);
        let mut out = Vec::new();
        field_len(1, &fs, &mut out);
        refused(&out, "UTF-8");
        // A record past the length limit is refused before prost sees it.
        let small = Limits { max_record_bytes: 3, ..limits };
        let e = parse_example(&base, &small).unwrap_err();
        assert!(e.to_string().contains("the limit is 3"), "{e}");
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

    // ---- the source, on files written by the `tfrecord` package (tests/data/formats/make_fixtures.py) ----

    use crate::source::records::{Columns, LabelColumn, Value};
    use crate::source::records_tests::{copy_dir, fixture, image, mutate, open_with, read_all, short};

    fn list(v: Vec<Value>) -> Value {
        Value::List(v)
    }

    #[test]
    fn the_fixtures_read_as_the_writer_wrote_them() {
        let dir = fixture("tfrecord");
        let ds = open_with(open, &[&dir], &Columns::default()).unwrap();
        let store = ds.store_as::<crate::source::records::RecordFiles>().unwrap();
        assert_eq!(store.catalogue().fields, ["image/bbox", "image/filename", "image/size"]);
        let got = read_all(&ds);
        let f = |x: f32| Value::Float(f64::from(x));
        let b = |s: &str| Value::Bytes(s.as_bytes().to_vec());
        let i = |v: &[i64]| list(v.iter().map(|&x| Value::Int(x)).collect());
        let want = [
            ("train-00000.tfrecord#0", "red.jpg", 1, vec![list(vec![f(0.25), f(0.5)]), b("red.jpg"), i(&[8, 6])]),
            ("train-00000.tfrecord#1", "green.png", 2, vec![f(0.75), b("green.png"), i(&[4, 5])]),
            ("train-00000.tfrecord#2", "blue.jpg", -1, vec![list(vec![]), Value::Null, i(&[5, 7])]),
            (
                "train-00001.tfrecord#0",
                "grey.jpg",
                4,
                vec![list(vec![f(1.0), f(2.0), f(3.0)]), b("grey.jpg"), i(&[3, 3])],
            ),
            ("train-00001.tfrecord#1", "red.jpg", 5, vec![f(0.5), b("red.jpg"), i(&[8, 6])]),
        ];
        assert_eq!(got.len(), want.len());
        for ((name, read), (wname, wimage, wlabel, wextras)) in got.into_iter().zip(want) {
            assert_eq!(short(&name), wname);
            let (bytes, shape, label, extras) = read.unwrap();
            assert_eq!((bytes, shape, label), (image(wimage), None, wlabel), "{name}");
            assert_eq!(extras, wextras, "{name}");
        }

        // Named columns; no label; a file given alone (with its sidecar).
        let cols = Columns {
            image: Some("image/encoded".into()),
            label: LabelColumn::Absent,
            extras: Some(vec!["image/filename".into()]),
        };
        let ds = open_with(open, &[&dir.join("train-00001.tfrecord")], &cols).unwrap();
        let got = read_all(&ds);
        let (bytes, _, label, extras) = got[0].1.clone().unwrap();
        assert_eq!((bytes, label, extras), (image("grey.jpg"), -1, vec![b("grey.jpg")]));
        assert_eq!(got.len(), 2);

        // Columns that the first record lacks or holds with another type.
        let config = |cols: Columns, parameter: &str| match open_with(open, &[&dir], &cols) {
            Err(TrdataError::Config { parameter: p, message }) => {
                assert_eq!(p, parameter, "{message}");
                assert!(message.contains("train-00000.tfrecord"), "{message}");
            }
            other => panic!("{other:?}"),
        };
        config(Columns { image: Some("image/size".into()), ..Columns::default() }, IMAGE_COLUMN);
        config(Columns { label: LabelColumn::Named("image/filename".into()), ..Columns::default() }, LABEL_COLUMN);
        config(Columns { extras: Some(vec!["nope".into()]), ..Columns::default() }, EXTRAS);
    }

    fn source_error(r: Result<crate::source::Dataset>) -> (PathBuf, String) {
        match r {
            Err(TrdataError::Source { path, message }) => (path, message),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_lying_sidecar_is_refused_or_costs_its_records() {
        let dir = copy_dir(&fixture("tfrecord"), "tfrecord-sidecar");
        let side = dir.join("train-00001.tfrecord.tfindex");
        let file = dir.join("train-00001.tfrecord");
        for (text, what) in [
            ("0 491\n491 784\n", "ends at byte 1275"),
            ("0 491\n492 784\n", "line 2: a record at byte 492"),
            ("0 491\n491 785\n1276 16\n", "ends past"),
            ("0 15\n", "a record of 15 bytes"),
            ("0 491 7\n", "not two numbers"),
            ("0 -491\n", "not two numbers"),
            ("0 99999999999999999999999\n", "not two numbers"),
        ] {
            std::fs::write(&side, text).unwrap();
            let (path, message) = source_error(open_with(open, &[&file], &Columns::default()));
            assert_eq!(path, side, "{message}");
            assert!(message.contains(what), "{text:?}: {message}");
        }
        // One entry for the whole file: it tiles the file, but the head of its record says otherwise when read
        // (the file comes second: the first record, which names the features, is the other file's).
        std::fs::write(&side, "0 1276\n").unwrap();
        let first = dir.join("train-00000.tfrecord");
        let ds = open_with(open, &[&first, &file], &Columns::default()).unwrap();
        let got = read_all(&ds);
        assert_eq!(got.len(), 4);
        let e = got[3].1.clone().unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::Corrupt);
        assert!(e.message.contains("train-00001.tfrecord#0") && e.message.contains("index says 1260"), "{e:?}");
        // Alone, the file has no record that reads: refused at open.
        let (path, message) = source_error(open_with(open, &[&file], &Columns::default()));
        assert!(path == file && message.contains("record 0"), "{message}");
        // Without the sidecar: the scan.
        std::fs::remove_file(&side).unwrap();
        assert_eq!(read_all(&open_with(open, &[&file], &Columns::default()).unwrap()).len(), 2);
    }

    #[test]
    fn a_bad_record_is_one_bad_sample_and_bad_framing_refuses_the_file() {
        let dir = copy_dir(&fixture("tfrecord"), "tfrecord-bad");
        let path = dir.join("train-00000.tfrecord");
        let good = std::fs::read(&path).unwrap();
        let ix = index_bytes(&good, &Limits::default()).unwrap();
        // A byte of record 1's data flipped: its data CRC fails; records 0 and 2 read.
        let mut bad = good.clone();
        bad[ix.offsets[1].0 as usize + 30] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        let got = read_all(&open_with(open, &[&path], &Columns::default()).unwrap());
        assert!(got[0].1.is_ok() && got[2].1.is_ok());
        let e = got[1].1.clone().unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::Corrupt);
        assert!(e.message.contains("train-00000.tfrecord#1") && e.message.contains("CRC"), "{e:?}");

        // A cut file and a head whose CRC fails: the scan refuses the file, naming the record and the byte.
        std::fs::write(&path, &good[..good.len() - 3]).unwrap();
        let (p, message) = source_error(open_with(open, &[&path], &Columns::default()));
        assert_eq!(p, path);
        assert!(message.contains("record 2") && message.contains("cut short"), "{message}");
        let mut bad = good.clone();
        bad[ix.offsets[1].0 as usize - 12] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let (_, message) = source_error(open_with(open, &[&path], &Columns::default()));
        assert!(message.contains("record 1") && message.contains("length's CRC"), "{message}");

        // A record whose data CRC holds but which is not an Example: one bad sample.
        let mut file = Vec::new();
        frame_record(&encode_example(&reference(), true), &mut file);
        frame_record(&[0x0a, 0x05, 1], &mut file);
        std::fs::write(&path, &file).unwrap();
        let got = read_all(&open_with(open, &[&path], &Columns::default()).unwrap());
        assert_eq!(got[0].1.clone().unwrap().0, b"\xff\xd8xyz");
        let e = got[1].1.clone().unwrap_err();
        assert!(e.message.contains("#1") && e.message.contains("tf.train.Example"), "{e:?}");

        // No records at all.
        std::fs::write(&path, b"").unwrap();
        let (_, message) = source_error(open_with(open, &[&path], &Columns::default()));
        assert!(message.contains("no records"), "{message}");
    }

    #[test]
    fn units_are_runs_of_records_within_the_decoded_bound() {
        let mb = 3 << 20;
        let ix = RecordIndex { offsets: (0..5u64).map(|k| (12 + k * (mb + 16), mb as u32)).collect() };
        let units = units_of(7, &ix, 0);
        let runs: Vec<(u64, u64, u32, u64)> = units.iter().map(|u| (u.offset, u.len, u.samples, u.first)).collect();
        let frame = mb + 16;
        assert_eq!(runs, vec![(0, 2 * frame, 2, 0), (2 * frame, 2 * frame, 2, 2), (4 * frame, frame, 1, 4)]);
        assert!(units.iter().all(|u| u.file == 7 && u.decoded_bytes <= DEFAULT_BLOCK_BYTES));
        assert_eq!(units[0].decoded_bytes, 2 * record_bound(mb as u32, 0) + table_bytes(0));
        // With extras, each record may decode to twice its bytes: one 3 MiB record a unit (two are past 8 MiB).
        let units = units_of(0, &ix, 2);
        assert_eq!(units.len(), 5);
        assert_eq!(units[0].decoded_bytes, 2 * mb + 2 + MESSAGE_BYTES + table_bytes(1));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(300), ..ProptestConfig::default() })]

        /// The fixture files with random edits (bytes replaced, inserted, cut; in a record file or the
        /// sidecar): the source opens with a typed error or reads every sample to its bytes or a typed error.
        #[test]
        fn edited_fixture_files_never_panic(
            which in 0usize..3,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..4), 1..4),
        ) {
            let names = ["train-00000.tfrecord", "train-00001.tfrecord", "train-00001.tfrecord.tfindex"];
            let dir = copy_dir(&fixture("tfrecord"), "tfrecord-prop");
            let path = dir.join(names[which]);
            let mut data = std::fs::read(&path).unwrap();
            mutate(&mut data, &edits);
            std::fs::write(&path, &data).unwrap();
            match open_with(open, &[&dir], &Columns::default()) {
                Ok(ds) => {
                    for (_, r) in read_all(&ds) {
                        if let Err(e) = r {
                            prop_assert!(matches!(e.kind, ImageErrorKind::Corrupt | ImageErrorKind::TooLarge), "{e:?}");
                        }
                    }
                }
                Err(e) => prop_assert!(matches!(e, TrdataError::Source { .. } | TrdataError::Config { .. }), "{e:?}"),
            }
        }
    }
}
