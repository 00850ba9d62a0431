//! source/parquet — images in Parquet files (the Hugging Face Hub's datasets, anything pyarrow writes), read
//! through the record store (records.rs): one unit per row group, its chosen columns read whole in one ranged
//! read and decoded by the `parquet` crate's page decoders (no arrow), with our own checks in front of it.
//!
//! # Layout (what is read)
//! ```text
//! "PAR1" · column chunks (pages: thrift PageHeader + body, per leaf per row group) · FileMetaData (thrift)
//!        · metadata length u32 LE · "PAR1"           ("PARE": an encrypted footer, refused)
//! ```
//! Columns ([`Columns`]):
//! - the image (default `image`): Hugging Face's struct `optional group image { optional binary bytes;
//!   optional binary path (STRING); }` (leaf `image.bytes`: the row's def level at its maximum = bytes present;
//!   the struct present but its bytes null = a bad sample, `Unsupported` "given by path, not embedded"; the
//!   struct null = a bad sample, `Corrupt`), or any plain BYTE_ARRAY column (null: `Corrupt`). Not repeated.
//! - the label (default `label`, INT32/INT64, not repeated; null = -1): absent from the files with
//!   [`LabelColumn::Default`] = every label -1. Class names come from the `huggingface` key-value metadata
//!   (`info.features.<label>` when its `_type` is `ClassLabel`: its `names`); then a label outside
//!   `-1..len(names)` makes its sample bad (`Corrupt`).
//! - extras ([`Columns::extras`] None: every other top-level column we can read, skipping the rest without an
//!   error; named ones must be readable, else a `ConfigError`): a BYTE_ARRAY leaf with a STRING/ENUM/JSON
//!   (UTF8) annotation is [`Value::Text`] (not UTF-8: the sample is bad, `Corrupt`), other BYTE_ARRAY and
//!   FIXED_LEN_BYTE_ARRAY [`Value::Bytes`], INT32/INT64 [`Value::Int`] (UINT_32 as unsigned; UINT_64 past
//!   `i64::MAX` wraps), FLOAT/DOUBLE [`Value::Float`], BOOLEAN [`Value::Bool`], null [`Value::Null`]. A list (a
//!   group or repeated leaf with one leaf below it and one repeated level: `list<element>`, or a legacy
//!   `repeated` primitive) is [`Value::List`] of those (a null list `Null`, a null element `Null`). Structs,
//!   maps, lists of structs or of lists, and INT96 are skipped by default and refused when named. A named extra
//!   may also be a leaf's dotted path (`meta.width`, not repeated).
//! - Every file must hold the chosen columns with the same physical types and nesting as the first (else a
//!   `ConfigError` naming the file), and the same class names.
//!
//! # Units
//! One per row group with rows: the byte span from the first to the last byte of the chosen leaves' chunks
//! (unchosen chunks between them are read too), `samples` = its rows, `first` = the rows before it in its file,
//! `tag` = the row group's index. `decoded_bytes` = Σ `total_uncompressed_size` of the chosen chunks + rows ×
//! (16 + 256 × extras leaves) + [`records::table_bytes`]: the image bytes and each extras value must fit in
//! that, so a dictionary-encoded column whose values repeat more than the bound allows (a long text repeated on
//! every row, or the same image on many rows) fails its unit as `TooLarge`.
//!
//! # Checked, before the crate sees the bytes
//! At open (each a `SourceError` naming the file, and the row group where there is one): both magics, footer
//! length ≤ size − 12 and ≤ [`MAX_FOOTER_BYTES`], no encrypted footer; our own walk of the footer's thrift
//! (thrift.rs: schema nesting ≤ [`MAX_SCHEMA_DEPTH`], ≤ [`MAX_SCHEMA_ELEMENTS`] elements, ≤ [`MAX_ROW_GROUPS`] row
//! groups, ≤ [`MAX_CHUNKS`] column chunks, every length inside the footer), then the crate's decoder under
//! `catch_unwind` (statistics skipped); row groups with `num_rows` ≥ 0, Σ rows < 2^32; each chosen chunk: in
//! this file (no `file_path`), offsets and sizes ≥ 0, inside the file before its footer, ≤ [`MAX_CHUNK_BYTES`],
//! a codec of UNCOMPRESSED/SNAPPY/ZSTD/LZ4_RAW (others refused, naming codec, column and file); the unit's span
//! ≤ [`MAX_SPAN_BYTES`].
//! At decode (errors fail the unit: `Corrupt`, `TooLarge`, naming file, row group and column): every page header
//! of each chosen chunk walked by us (known type, sizes ≥ 0, the page inside the chunk, uncompressed ≤
//! [`MAX_PAGE_BYTES`], Σ uncompressed ≤ the chunk's declared uncompressed size, Σ values ≤ rows × 256 + that
//! size); the crate reads only inside the unit's span (our [`ChunkReader`] refuses anything else); physical types
//! checked before the typed readers (which panic on a mismatch); def/rep levels inside `0..=max`; values read ==
//! present levels; records read == the row group's rows. The crate's page and level decoders still panic on
//! some corrupt pages (an assertion in its bit reader, found by the proptest): each leaf's read runs under
//! `catch_unwind`, such a panic is that column's `Corrupt` error.
//!
//! The unit's bytes are copied once into a `Bytes` (the crate's readers need owned, shared bytes); pages of
//! uncompressed chunks are then slices of it, and each image is copied once more into the decoded block.

mod decode;
mod hf;
#[cfg(test)]
mod tests;
pub mod thrift;

pub use hf::class_names;

use super::records::{self, Catalogue, Columns, EXTRAS, IMAGE_COLUMN, LABEL_COLUMN, LabelColumn, RecordFormat, Unit};
use crate::error::{ImageError, Result, TrdataError};
use crate::storage::{Location, ObjectReader, StorageOptions};
use parquet::basic::{Compression, ConvertedType, LogicalType, Repetition, Type as PhysicalType};
use parquet::file::metadata::{
    ColumnChunkMetaData, ParquetMetaData, ParquetMetaDataOptions, ParquetMetaDataReader, ParquetStatisticsPolicy,
};
use parquet::file::properties::ReaderProperties;
use parquet::schema::types::{SchemaDescriptor, Type as SchemaType};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

/// Largest footer (thrift `FileMetaData`) read.
pub const MAX_FOOTER_BYTES: u64 = 64 << 20;
/// Deepest schema nesting (the root is level 1; Hugging Face's image is 2 deep under it).
pub const MAX_SCHEMA_DEPTH: u64 = 64;
/// Most schema elements (columns and groups).
pub const MAX_SCHEMA_ELEMENTS: u64 = 100_000;
/// Most row groups in one file.
pub const MAX_ROW_GROUPS: u64 = 100_000;
/// Most column chunks in one file (row groups × leaves): bounds the memory of its decoded metadata.
pub const MAX_CHUNKS: u64 = 1 << 20;
/// Largest chosen column chunk.
pub const MAX_CHUNK_BYTES: u64 = 1 << 30;
/// Largest unit span (one ranged read).
pub const MAX_SPAN_BYTES: u64 = 2 << 30;
/// Largest page, uncompressed.
pub const MAX_PAGE_BYTES: u64 = 256 << 20;
/// Bytes each extras leaf may add per row to the decoded bound, beyond its chunk's uncompressed size.
pub const EXTRA_BYTES_PER_ROW: u64 = 256;
/// Bytes each row may add to the decoded bound for its label and bookkeeping.
pub const ROW_BYTES: u64 = 16;
/// Largest `huggingface` metadata JSON read for class names.
pub const MAX_HF_JSON_BYTES: usize = 16 << 20;
/// Most class names.
pub const MAX_CLASSES: usize = 1 << 20;
/// Longest class name (bytes).
pub const MAX_CLASS_NAME_BYTES: usize = 4096;

/// The default image column.
const DEFAULT_IMAGE: &str = "image";
/// The default label column.
const DEFAULT_LABEL: &str = "label";

/// How one chosen leaf's values become a sample's parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The image's bytes; `hf`: the `bytes` leaf of Hugging Face's image struct.
    Image { hf: bool },
    /// The label (INT32/INT64).
    Label,
    /// UTF-8 text.
    Text,
    /// Bytes (BYTE_ARRAY, FIXED_LEN_BYTE_ARRAY).
    Bytes,
    /// An integer; `unsigned32`: an INT32 annotated unsigned.
    Int { unsigned32: bool },
    /// FLOAT/DOUBLE.
    Float,
    /// BOOLEAN.
    Bool,
}

/// A chosen leaf, as the first file declares it (every file must declare it the same).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leaf {
    /// Its dotted path (`image.bytes`).
    path: String,
    /// Its path's parts.
    parts: Vec<String>,
    /// Its physical type.
    physical: PhysicalType,
    /// Its levels.
    max_def: i16,
    max_rep: i16,
    /// For the image struct: the def level at which the struct is present. For a list (max_rep 1): the def
    /// level at which an element exists (the repeated node's level). Otherwise `max_def`.
    present_def: i16,
    /// What its values are.
    kind: Kind,
}

/// The columns read, and where each file has them.
#[derive(Debug)]
struct Chosen {
    image: Leaf,
    label: Option<Leaf>,
    /// (field name, leaf) per extra.
    extras: Vec<(String, Leaf)>,
}

/// One opened file: its metadata and the column index of each chosen leaf.
#[derive(Debug)]
struct FileMeta {
    name: PathBuf,
    meta: ParquetMetaData,
    /// Column (leaf) indices: image, label, extras (in [`Chosen`]'s order).
    image: usize,
    label: Option<usize>,
    extras: Vec<usize>,
}

/// The Parquet [`RecordFormat`] (module docs).
pub struct Parquet {
    chosen: Chosen,
    files: Vec<FileMeta>,
    /// Number of class names (labels are checked against it when not 0).
    classes: usize,
    props: Arc<ReaderProperties>,
}

impl std::fmt::Debug for Parquet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parquet").field("chosen", &self.chosen).field("files", &self.files.len()).finish()
    }
}

/// A codec's name for messages.
fn codec_name(c: Compression) -> &'static str {
    match c {
        Compression::UNCOMPRESSED => "UNCOMPRESSED",
        Compression::SNAPPY => "SNAPPY",
        Compression::GZIP(_) => "GZIP",
        Compression::LZO => "LZO",
        Compression::BROTLI(_) => "BROTLI",
        Compression::LZ4 => "LZ4 (Hadoop)",
        Compression::ZSTD(_) => "ZSTD",
        Compression::LZ4_RAW => "LZ4_RAW",
    }
}

/// Check the footer of a whole file held in memory (what [`open`] does through ranged reads): its tail, our
/// walk of its thrift, then the crate's decoder under `catch_unwind`. For the fuzz target and tests.
pub fn decode_footer_bytes(file: &[u8]) -> std::result::Result<ParquetMetaData, String> {
    let size = file.len() as u64;
    let tail: [u8; 8] = file.get(file.len().saturating_sub(8)..).and_then(|t| t.try_into().ok()).unwrap_or([0; 8]);
    let len = footer_len(size, &tail, file.get(..4).unwrap_or_default())?;
    decode_metadata(&file[(size - 8 - len) as usize..(size - 8) as usize])
}

/// The footer length a file's first 4 and last 8 bytes declare, checked against its size.
fn footer_len(size: u64, tail: &[u8; 8], head: &[u8]) -> std::result::Result<u64, String> {
    if size < 12 {
        return Err(format!("{size} bytes is too short for a Parquet file (at least 12)"));
    }
    if &tail[4..] == b"PARE" {
        return Err("its footer is encrypted (PARE): encrypted Parquet files are not supported".into());
    }
    if &tail[4..] != b"PAR1" || head != b"PAR1" {
        return Err("not a Parquet file: it must begin and end with the magic PAR1 (truncated?)".into());
    }
    let len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if len > size - 12 {
        return Err(format!("its footer length {len} is more than the file's {size} bytes allow (truncated?)"));
    }
    if len > MAX_FOOTER_BYTES {
        return Err(format!("its footer of {len} bytes is over the {MAX_FOOTER_BYTES}-byte limit"));
    }
    Ok(len)
}

/// Our walk of the footer's thrift, then the crate's decoder (statistics skipped) under `catch_unwind`.
fn decode_metadata(buf: &[u8]) -> std::result::Result<ParquetMetaData, String> {
    let limits = thrift::FooterLimits {
        elements: MAX_SCHEMA_ELEMENTS,
        depth: MAX_SCHEMA_DEPTH,
        row_groups: MAX_ROW_GROUPS,
        chunks: MAX_CHUNKS,
    };
    thrift::walk_footer(buf, &limits).map_err(|e| format!("its footer cannot be read: {e}"))?;
    let options = ParquetMetaDataOptions::new()
        .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_encoding_stats_policy(ParquetStatisticsPolicy::SkipAll);
    std::panic::catch_unwind(|| ParquetMetaDataReader::decode_metadata_with_options(buf, Some(&options)))
        .map_err(|_| "its footer cannot be read: the Parquet decoder panicked".to_string())?
        .map_err(|e| format!("its footer cannot be read: {e}"))
}

/// Read and decode one file's footer.
fn read_footer(r: &ObjectReader) -> Result<ParquetMetaData> {
    let size = r.size();
    let io = |e: ImageError| r.source_error(format!("cannot be read: {}", e.message));
    if size < 12 {
        return Err(r.source_error(format!("{size} bytes is too short for a Parquet file (at least 12)")));
    }
    let mut tail = Vec::new();
    r.read_range(size - 8, 8, 8, &mut tail).map_err(io)?;
    let mut head = Vec::new();
    r.read_range(0, 4, 4, &mut head).map_err(io)?;
    let tail: [u8; 8] = tail.as_slice().try_into().map_err(|_| r.source_error("a short read".into()))?;
    let len = footer_len(size, &tail, &head).map_err(|m| r.source_error(m))?;
    let buf = r.read_growing(size - 8 - len, len).map_err(io)?;
    decode_metadata(&buf).map_err(|m| r.source_error(m))
}

/// The repetition of each node on `parts`' path from the root's children down (None: no such path).
fn path_nodes<'a>(root: &'a SchemaType, parts: &[String]) -> Option<Vec<&'a SchemaType>> {
    let mut at = root;
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        if !at.is_group() {
            return None;
        }
        at = at.get_fields().iter().find(|f| f.name() == p)?;
        out.push(at);
    }
    Some(out)
}

/// The def level after each node of a path (optional and repeated nodes each add one).
fn def_levels(nodes: &[&SchemaType]) -> Vec<i16> {
    let mut d = 0i16;
    nodes
        .iter()
        .map(|n| {
            let info = n.get_basic_info();
            if info.has_repetition() && info.repetition() != Repetition::REQUIRED {
                d = d.saturating_add(1);
            }
            d
        })
        .collect()
}

/// Whether a BYTE_ARRAY leaf holds text.
fn is_text(t: &SchemaType) -> bool {
    let info = t.get_basic_info();
    matches!(info.logical_type_ref(), Some(LogicalType::String | LogicalType::Enum | LogicalType::Json))
        || matches!(info.converted_type(), ConvertedType::UTF8 | ConvertedType::ENUM | ConvertedType::JSON)
}

/// The kind of an extras leaf of physical type `p` (None: not one we read).
fn value_kind(t: &SchemaType) -> Option<Kind> {
    Some(match t.get_physical_type() {
        PhysicalType::BOOLEAN => Kind::Bool,
        PhysicalType::INT32 => Kind::Int {
            unsigned32: matches!(t.get_basic_info().logical_type_ref(), Some(LogicalType::Integer(i)) if !i.is_signed)
                || matches!(
                    t.get_basic_info().converted_type(),
                    ConvertedType::UINT_8 | ConvertedType::UINT_16 | ConvertedType::UINT_32
                ),
        },
        PhysicalType::INT64 => Kind::Int { unsigned32: false },
        PhysicalType::FLOAT | PhysicalType::DOUBLE => Kind::Float,
        PhysicalType::BYTE_ARRAY if is_text(t) => Kind::Text,
        PhysicalType::BYTE_ARRAY | PhysicalType::FIXED_LEN_BYTE_ARRAY => Kind::Bytes,
        PhysicalType::INT96 => return None,
    })
}

/// The leaf at `parts` in `schema` (None: not a leaf there).
fn leaf_at(schema: &SchemaDescriptor, parts: &[String]) -> Option<(usize, Leaf)> {
    let i = schema.columns().iter().position(|c| c.path().parts() == parts)?;
    let c = schema.column(i);
    let nodes = path_nodes(schema.root_schema(), parts)?;
    let defs = def_levels(&nodes);
    // The def level at the (single) repeated node, else the leaf's.
    let present_def = nodes
        .iter()
        .zip(&defs)
        .find(|(n, _)| n.get_basic_info().has_repetition() && n.get_basic_info().repetition() == Repetition::REPEATED)
        .map_or(c.max_def_level(), |(_, d)| *d);
    Some((
        i,
        Leaf {
            path: c.path().string(),
            parts: parts.to_vec(),
            physical: c.physical_type(),
            max_def: c.max_def_level(),
            max_rep: c.max_rep_level(),
            present_def,
            kind: Kind::Bytes,
        },
    ))
}

/// Every leaf's dotted path, for messages.
fn leaf_names(schema: &SchemaDescriptor) -> String {
    let names: Vec<String> = schema.columns().iter().take(64).map(|c| c.path().string()).collect();
    let more = schema.num_columns().saturating_sub(64);
    if more > 0 { format!("{} and {more} more", names.join(", ")) } else { names.join(", ") }
}

/// The image leaf `name` names in `schema` (module docs).
fn choose_image(schema: &SchemaDescriptor, name: &str, file: &str) -> Result<(usize, Leaf)> {
    let root = schema.root_schema();
    let refuse = |why: String| TrdataError::config(IMAGE_COLUMN, format!("{file}: {why}"));
    let top = root.get_fields().iter().find(|f| f.name() == name);
    let (parts, hf) = match top {
        Some(t) if t.is_group() => {
            if !t.get_fields().iter().any(|f| f.name() == "bytes" && f.is_primitive()) {
                return Err(refuse(format!(
                    "the column {name:?} is a struct without a binary `bytes` field (not Hugging Face's Image)"
                )));
            }
            (vec![name.to_string(), "bytes".to_string()], true)
        }
        Some(_) => (vec![name.to_string()], false),
        None => (name.split('.').map(str::to_string).collect(), false),
    };
    let Some((i, mut leaf)) = leaf_at(schema, &parts) else {
        return Err(refuse(format!("no column {name:?}; its columns are {}", leaf_names(schema))));
    };
    if leaf.physical != PhysicalType::BYTE_ARRAY || leaf.max_rep != 0 {
        return Err(refuse(format!(
            "the column {} is {:?}{}, not a binary column of one image per row",
            leaf.path,
            leaf.physical,
            if leaf.max_rep > 0 { " repeated" } else { "" }
        )));
    }
    if hf {
        // The struct's own def level: one less than the leaf's when `bytes` is optional.
        let nodes = path_nodes(root, &parts).unwrap_or_default();
        leaf.present_def = def_levels(&nodes).first().copied().unwrap_or(0);
    }
    leaf.kind = Kind::Image { hf };
    Ok((i, leaf))
}

/// The label leaf (None: no labels).
fn choose_label(schema: &SchemaDescriptor, label: &LabelColumn, file: &str) -> Result<Option<(usize, Leaf)>> {
    let name = match label {
        LabelColumn::Absent => return Ok(None),
        LabelColumn::Default => DEFAULT_LABEL,
        LabelColumn::Named(n) => n.as_str(),
    };
    let parts: Vec<String> = name.split('.').map(str::to_string).collect();
    let Some((i, mut leaf)) = leaf_at(schema, &parts) else {
        if *label == LabelColumn::Default {
            return Ok(None);
        }
        return Err(TrdataError::config(
            LABEL_COLUMN,
            format!("{file}: no column {name:?}; its columns are {}", leaf_names(schema)),
        ));
    };
    if !matches!(leaf.physical, PhysicalType::INT32 | PhysicalType::INT64) || leaf.max_rep != 0 {
        return Err(TrdataError::config(
            LABEL_COLUMN,
            format!(
                "{file}: the column {} is {:?}{}, not an integer per row (pass label_column=None for no labels)",
                leaf.path,
                leaf.physical,
                if leaf.max_rep > 0 { " repeated" } else { "" }
            ),
        ));
    }
    leaf.kind = Kind::Label;
    Ok(Some((i, leaf)))
}

/// The extras leaf of top-level field or leaf path `name`, or why it cannot be read.
fn extra_leaf(schema: &SchemaDescriptor, name: &str) -> std::result::Result<(usize, Leaf), String> {
    let root = schema.root_schema();
    let parts: Vec<String> = match root.get_fields().iter().find(|f| f.name() == name) {
        Some(t) => {
            // A top-level field: a primitive, or a group with exactly one leaf below it (a list).
            let mut at: &SchemaType = t;
            let mut parts = vec![name.to_string()];
            while at.is_group() {
                match at.get_fields() {
                    [one] => {
                        parts.push(one.name().to_string());
                        at = one;
                    }
                    _ => return Err(format!("the column {name:?} is a struct (nested columns are not read)")),
                }
            }
            parts
        }
        None => name.split('.').map(str::to_string).collect(),
    };
    let (i, mut leaf) = leaf_at(schema, &parts).ok_or_else(|| format!("no column {name:?}"))?;
    let t = schema.column(i).self_type_ptr();
    leaf.kind =
        value_kind(&t).ok_or_else(|| format!("the column {name:?} is {:?}, which is not read", leaf.physical))?;
    if leaf.max_rep > 1 {
        return Err(format!("the column {name:?} is a list of lists"));
    }
    if leaf.max_rep == 1 && parts.len() > 1 && !root.get_fields().iter().any(|f| f.name() == name) {
        return Err(format!("the leaf {name:?} lies inside a list"));
    }
    if leaf.max_rep == 1 && !is_list_shape(root, &parts) {
        return Err(format!("the column {name:?} is a list of structs"));
    }
    Ok((i, leaf))
}

/// Whether the path's groups are a list of one leaf: every group on it has exactly one child.
fn is_list_shape(root: &SchemaType, parts: &[String]) -> bool {
    path_nodes(root, parts).is_some_and(|nodes| nodes.iter().all(|n| !n.is_group() || n.get_fields().len() == 1))
}

/// The extras: the named ones, or every other readable top-level column.
fn choose_extras(
    schema: &SchemaDescriptor,
    extras: &Option<Vec<String>>,
    skip: &[&str],
    file: &str,
) -> Result<Vec<(String, usize, Leaf)>> {
    match extras {
        Some(names) => names
            .iter()
            .map(|n| {
                extra_leaf(schema, n).map(|(i, l)| (n.clone(), i, l)).map_err(|why| {
                    TrdataError::config(EXTRAS, format!("{file}: {why}; its columns are {}", leaf_names(schema)))
                })
            })
            .collect(),
        None => Ok(schema
            .root_schema()
            .get_fields()
            .iter()
            .filter(|f| !skip.contains(&f.name()))
            .filter_map(|f| extra_leaf(schema, f.name()).ok().map(|(i, l)| (f.name().to_string(), i, l)))
            .collect()),
    }
}

/// The leaf `want` in another file's schema, which must be declared the same.
fn locate(schema: &SchemaDescriptor, want: &Leaf, parameter: &str, file: &str) -> Result<usize> {
    match leaf_at(schema, &want.parts) {
        Some((i, got))
            if (got.physical, got.max_def, got.max_rep) == (want.physical, want.max_def, want.max_rep)
                && (want.max_rep == 0 || got.present_def == want.present_def) =>
        {
            Ok(i)
        }
        Some((_, got)) => Err(TrdataError::config(
            parameter,
            format!(
                "{file}: the column {} is {:?} (levels def {} rep {}) where the first file's is {:?} (def {} rep {}): \
                 every file must have the same columns",
                want.path, got.physical, got.max_def, got.max_rep, want.physical, want.max_def, want.max_rep
            ),
        )),
        None => Err(TrdataError::config(
            parameter,
            format!("{file}: no column {} (the first file has it); its columns are {}", want.path, leaf_names(schema)),
        )),
    }
}

/// A chosen chunk's checks at open (module docs): its (start, len) in the file.
fn check_chunk(r: &ObjectReader, rg: usize, cc: &ColumnChunkMetaData) -> Result<(u64, u64)> {
    let path = cc.column_path().string();
    let bad = |m: String| r.source_error(format!("row group {rg}, column {path}: {m}"));
    if cc.file_path().is_some() {
        return Err(bad("its data lies in another file (file_path), which is not supported".into()));
    }
    let c = cc.compression();
    if !matches!(c, Compression::UNCOMPRESSED | Compression::SNAPPY | Compression::ZSTD(_) | Compression::LZ4_RAW) {
        return Err(bad(format!(
            "compressed with {}, which is not read (UNCOMPRESSED, SNAPPY, ZSTD and LZ4_RAW are): rewrite the file \
             with snappy or zstd",
            codec_name(c)
        )));
    }
    let start = cc.dictionary_page_offset().unwrap_or(cc.data_page_offset());
    let (len, raw) = (cc.compressed_size(), cc.uncompressed_size());
    if start < 4 || cc.data_page_offset() < start || len <= 0 || raw < 0 {
        return Err(bad(format!(
            "impossible offsets or sizes (start {start}, data page {}, {len} bytes, {raw} uncompressed)",
            cc.data_page_offset()
        )));
    }
    let (start, len) = (start as u64, len as u64);
    let end = start.checked_add(len).filter(|&e| e <= r.size().saturating_sub(8));
    if end.is_none() || cc.data_page_offset() as u64 >= start + len {
        return Err(bad(format!("bytes {start}..+{len} lie outside the file's {} bytes of data", r.size())));
    }
    if len > MAX_CHUNK_BYTES {
        return Err(bad(format!("a chunk of {len} bytes is over the {MAX_CHUNK_BYTES}-byte limit")));
    }
    Ok((start, len))
}

/// The units of one file (module docs); `total` counts rows over all files.
fn file_units(k: usize, r: &ObjectReader, f: &FileMeta, leaves: usize, total: &mut u64) -> Result<Vec<Unit>> {
    let mut units = Vec::new();
    let mut first = 0u64;
    let cols: Vec<usize> = std::iter::once(f.image).chain(f.label).chain(f.extras.iter().copied()).collect();
    let ncols = f.meta.file_metadata().schema_descr().num_columns();
    for (g, rg) in f.meta.row_groups().iter().enumerate() {
        let rows = rg.num_rows();
        if rows < 0 {
            return Err(r.source_error(format!("row group {g} has {rows} rows")));
        }
        let rows = rows as u64;
        *total = total.saturating_add(rows);
        if *total >= 1 << 32 {
            return Err(r.source_error(format!("more than 2**32 - 1 rows (row group {g})")));
        }
        if rg.columns().len() != ncols {
            return Err(r.source_error(format!(
                "row group {g} has {} column chunks where the schema has {ncols} columns",
                rg.columns().len()
            )));
        }
        if rows == 0 {
            continue;
        }
        let (mut lo, mut hi, mut raw) = (u64::MAX, 0u64, 0u64);
        for &c in &cols {
            let cc = rg.column(c);
            let (start, len) = check_chunk(r, g, cc)?;
            lo = lo.min(start);
            hi = hi.max(start + len);
            raw = raw.saturating_add(cc.uncompressed_size() as u64);
        }
        let len = hi - lo;
        if len > MAX_SPAN_BYTES {
            return Err(r.source_error(format!(
                "row group {g}: its chosen columns span {len} bytes, over the {MAX_SPAN_BYTES}-byte limit of one \
                 read (rewrite with smaller row groups)"
            )));
        }
        let per_row = ROW_BYTES + EXTRA_BYTES_PER_ROW * leaves as u64;
        let decoded_bytes =
            raw.saturating_add(rows.saturating_mul(per_row)).saturating_add(records::table_bytes(rows as u32));
        units.push(Unit {
            file: k as u32,
            offset: lo,
            len,
            samples: rows as u32,
            first,
            inflate: None,
            decoded_bytes,
            tag: g as u64,
        });
        first += rows;
    }
    Ok(units)
}

/// Open Parquet `files` (local paths or URLs) for `columns` (module docs): the [`records::Opener`] of Parquet.
pub fn open(
    files: &[Location],
    storage: &StorageOptions,
    columns: &Columns,
) -> Result<(Catalogue, Box<dyn RecordFormat>)> {
    if files.is_empty() {
        return Err(TrdataError::config("paths", "no Parquet files"));
    }
    let mut readers = Vec::with_capacity(files.len());
    let mut metas = Vec::with_capacity(files.len());
    for loc in files {
        let r = ObjectReader::open(loc, storage)?;
        metas.push(read_footer(&r)?);
        readers.push(r);
    }
    let name0 = readers[0].name().display().to_string();
    let schema0 = metas[0].file_metadata().schema_descr();
    let image_name = columns.image.as_deref().unwrap_or(DEFAULT_IMAGE);
    let (_, image) = choose_image(schema0, image_name, &name0)?;
    let label = choose_label(schema0, &columns.label, &name0)?.map(|(_, l)| l);
    let label_top = label.as_ref().map(|l| l.parts[0].as_str());
    let skip: Vec<&str> = std::iter::once(image.parts[0].as_str()).chain(label_top).collect();
    let extras: Vec<(String, Leaf)> =
        choose_extras(schema0, &columns.extras, &skip, &name0)?.into_iter().map(|(n, _, l)| (n, l)).collect();
    let chosen = Chosen { image, label, extras };
    let classes = match &chosen.label {
        Some(l) => hf::file_classes(&readers[0], &metas[0], &l.path)?,
        None => Vec::new(),
    };
    let mut out = Vec::with_capacity(files.len());
    for (r, meta) in readers.iter().zip(metas) {
        let name = r.name().display().to_string();
        let schema = meta.file_metadata().schema_descr();
        let image = locate(schema, &chosen.image, IMAGE_COLUMN, &name)?;
        let label = match &chosen.label {
            Some(l) => Some(locate(schema, l, LABEL_COLUMN, &name)?),
            None if columns.label == LabelColumn::Default && leaf_at(schema, &[DEFAULT_LABEL.into()]).is_some() => {
                return Err(TrdataError::config(
                    LABEL_COLUMN,
                    format!(
                        "{name} has a column `label` that the first file lacks: every file must have the same columns"
                    ),
                ));
            }
            None => None,
        };
        let extras = chosen.extras.iter().map(|(_, l)| locate(schema, l, EXTRAS, &name)).collect::<Result<Vec<_>>>()?;
        if let Some(l) = &chosen.label {
            let mine = hf::file_classes(r, &meta, &l.path)?;
            if mine != classes {
                return Err(TrdataError::config(
                    LABEL_COLUMN,
                    format!(
                        "{name} declares {} class names for {} where the first file declares {}: every file must \
                         have the same classes",
                        mine.len(),
                        l.path,
                        classes.len()
                    ),
                ));
            }
        }
        out.push(FileMeta { name: r.name().to_path_buf(), meta, image, label, extras });
    }
    let mut units = Vec::new();
    let mut total = 0u64;
    for (k, (r, f)) in readers.iter().zip(&out).enumerate() {
        units.extend(file_units(k, r, f, chosen.extras.len(), &mut total)?);
    }
    if units.is_empty() {
        return Err(TrdataError::config("paths", format!("the {} Parquet files hold no rows", files.len())));
    }
    let fields = chosen.extras.iter().map(|(n, _)| n.clone()).collect();
    let catalogue = Catalogue { files: readers, units, fields, classes: classes.iter().map(OsString::from).collect() };
    let props = Arc::new(ReaderProperties::builder().set_backward_compatible_lz4(false).build());
    let format = Parquet { chosen, files: out, classes: classes.len(), props };
    Ok((catalogue, Box::new(format)))
}
