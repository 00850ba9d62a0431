//! source/litdata — LitData datasets (`litdata.optimize`'s chunks) as a record source (kind "litdata"): a folder
//! or URL prefix holding `index.json` and its chunks. docs/design/formats-research.md §4 holds the facts this
//! file follows.
//!
//! ```text
//! index.json: {"chunks": [{"chunk_bytes", "chunk_size": items, "filename"}, ...],
//!              "config": {"item_loader": "PyTreeLoader", "encryption": null, "compression": null | "zstd[:N]",
//!                         "compression_level": null | "chunk", "data_format": [serializer per leaf],
//!                         "data_spec": "<JSON pytree spec: a dict of leaves, its keys a JSON list in 'context'>"}}
//! chunk (chunk_bytes long; with compression, the file is that chunk compressed whole, `*.zstd.bin`):
//!   u32 n · u32 offsets[n + 1] (from the chunk's start) · items
//! item: u32 size per leaf (every leaf) · the leaves' bytes, in the spec's order
//! ```
//!
//! # A sample
//! Item `k` of chunk file `f` is named `f#k`. Leaves are named by the spec's dict keys. The image is the leaf
//! `image_column` (default: the one `jpeg`, `pil` or `image:<ext>` leaf, else the leaf `image`): `jpeg`,
//! `image:<ext>` and `bytes` are encoded images, `pil` raw pixels of mode L or RGB. The label: the `int` leaf
//! `label_column` (default `label`, when there is one). Extras: by default every other leaf of `int` (`Int`),
//! `float` (`Float`), `bool` (`Bool`), `str` (`Text`), `bytes` (`Bytes`), `numpy` / `no_header_numpy:<dtype>`
//! (1-D arrays of integers, floats or bools: a `List`); other serializers (pickle, json, tensor, video, …) are
//! never read and refused when named.
//!
//! # Untrusted bytes
//! At open (`SourceError` naming the index): the item loader, encryption and compression are ones read here
//! (`compression_level` "batch"/"sample", framed zstd inside the file, refused by name), `data_format` and the
//! spec's leaves agree, chunk file names are plain names (no `/`, no `..`), items at most 2^32 - 1 together,
//! `chunk_bytes` at most 2^32 - 1. An uncompressed chunk's file must be `chunk_bytes` long and its offset table is
//! read and checked at open (count = `chunk_size`, first offset past the table, non-decreasing, last =
//! `chunk_bytes`); a compressed chunk is read whole (its file at most a zstd bound of `chunk_bytes`), inflated to
//! exactly `chunk_bytes` (records.rs) and its table checked then. Per item: the sizes fit and add up to the item
//! exactly, each leaf's bytes are its serializer's (8 for int/float, 1 for bool, UTF-8 text, a numpy header
//! that fits); an item that fails is one bad sample.

use super::packed::DEFAULT_BLOCK_BYTES;
use super::packed_json::{self, Json};
use super::records::{
    Catalogue, Codec, Columns, EXTRAS, IMAGE_COLUMN, Inflate, LABEL_COLUMN, LabelColumn, RecordFormat, Unit,
    UnitBuilder, Value, table_bytes,
};
use super::shard_index::{self, Fields, MESSAGE_BYTES, check_table, child, cut_message};
use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use crate::storage::{Location, ObjectReader, StorageOptions};
use std::path::PathBuf;

/// Most leaves an item may have.
pub const MAX_LEAVES: usize = 4096;

/// A leaf's serializer, as far as an item reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ser {
    /// `int`: int64.
    Int,
    /// `float`: float64.
    Float,
    /// `bool`: one byte.
    Bool,
    /// `str`: UTF-8.
    Str,
    /// `bytes`.
    Bytes,
    /// `jpeg`, `image:<ext>`: an encoded image.
    Image,
    /// `pil`: a pil cell.
    Pil,
    /// `numpy`: u32 dtype, u32 ndim, u32 dims, data.
    Numpy,
    /// `no_header_numpy:<dtype>`: data of that dtype (1-D).
    NoHeader(u8),
    /// Any other serializer: never read.
    Other,
}

impl Ser {
    fn of(name: &str) -> Ser {
        match name {
            "int" => Ser::Int,
            "float" => Ser::Float,
            "bool" => Ser::Bool,
            "str" => Ser::Str,
            "bytes" => Ser::Bytes,
            "jpeg" => Ser::Image,
            "pil" => Ser::Pil,
            "numpy" => Ser::Numpy,
            n if n.starts_with("image:") => Ser::Image,
            n => match n.strip_prefix("no_header_numpy:").and_then(|d| d.parse::<u8>().ok()) {
                Some(d) => Ser::NoHeader(d),
                None => Ser::Other,
            },
        }
    }

    /// One value or a list of them (what extras take).
    fn is_value(self) -> bool {
        !matches!(self, Ser::Image | Ser::Pil | Ser::Other)
    }

    /// An array (its extras may take 9 bytes per byte).
    fn is_array(self) -> bool {
        matches!(self, Ser::Numpy | Ser::NoHeader(_))
    }
}

/// litdata's numpy dtype numbers (`_NUMPY_DTYPES_MAPPING`) read here: (bytes, kind: 0 int, 1 uint, 2 float,
/// 3 bool).
fn dtype(index: u32) -> Option<(usize, u8)> {
    Some(match index {
        0 => (1, 0),
        1 => (2, 0),
        2 => (4, 0),
        3 => (8, 0),
        4 => (1, 1),
        5 => (2, 1),
        6 => (4, 1),
        7 => (8, 1),
        8 => (2, 2),
        9 => (4, 2),
        10 => (8, 2),
        13 => (1, 3),
        _ => return None,
    })
}

/// A leaf of the items.
#[derive(Debug, Clone)]
struct Leaf {
    name: String,
    serializer: String,
    ser: Ser,
}

/// The LitData format of one source.
#[derive(Debug)]
struct LitDataFormat {
    /// Per chunk file: its name and, uncompressed, its offset table.
    chunks: Vec<(PathBuf, Option<Vec<u32>>)>,
    leaves: Vec<Leaf>,
    image: usize,
    label: Option<usize>,
    extras: Vec<usize>,
}

/// A 1-D array of `n`-byte elements of `kind` (see [`dtype`]) as a list.
fn array(data: &[u8], (n, kind): (usize, u8)) -> std::result::Result<Value, String> {
    if !data.len().is_multiple_of(n) {
        return Err(format!("an array of {} bytes of {n}-byte elements", data.len()));
    }
    let items = data.chunks_exact(n).map(|b| {
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(b);
        let bits = u64::from_le_bytes(w);
        let shift = 64 - 8 * n as u32;
        match (kind, n) {
            (0, _) => Ok(Value::Int(((bits << shift) as i64) >> shift)),
            (1, _) => i64::try_from(bits).map(Value::Int).map_err(|_| "an unsigned value above 2**63 - 1".to_string()),
            (2, 2) => Ok(Value::Float(half::f16::from_bits(bits as u16).to_f64())),
            (2, 4) => Ok(Value::Float(f64::from(f32::from_bits(bits as u32)))),
            (2, _) => Ok(Value::Float(f64::from_bits(bits))),
            _ => Ok(Value::Bool(bits != 0)),
        }
    });
    items.collect::<std::result::Result<Vec<_>, _>>().map(Value::List)
}

/// A leaf's bytes as one value (module docs).
fn value(leaf: &Leaf, cell: &[u8]) -> std::result::Result<Value, ImageError> {
    let bad = |what: String| {
        ImageError::new(ImageErrorKind::Corrupt, format!("its leaf {:?} ({}) {what}", leaf.name, leaf.serializer))
    };
    let fixed = |n: usize| <[u8; 8]>::try_from(cell).map_err(|_| bad(format!("has {} bytes, not {n}", cell.len())));
    Ok(match leaf.ser {
        Ser::Int => Value::Int(i64::from_le_bytes(fixed(8)?)),
        Ser::Float => Value::Float(f64::from_le_bytes(fixed(8)?)),
        Ser::Bool => match cell {
            [b] => Value::Bool(*b != 0),
            _ => return Err(bad(format!("has {} bytes, not 1", cell.len()))),
        },
        Ser::Str => Value::Text(std::str::from_utf8(cell).map_err(|_| bad("is not UTF-8".into()))?.to_string()),
        Ser::Bytes | Ser::Image | Ser::Pil => Value::Bytes(cell.to_vec()),
        Ser::NoHeader(d) => {
            let dt = dtype(u32::from(d)).ok_or_else(|| bad("has a dtype that is not read".into()))?;
            array(cell, dt).map_err(bad)?
        }
        Ser::Numpy => {
            let word = |k: usize| cell.get(4 * k..4 * k + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            let (Some(d), Some(ndim)) = (word(0), word(1)) else { return Err(bad("has no numpy header".into())) };
            if ndim != 1 {
                return Err(ImageError::new(
                    ImageErrorKind::Unsupported,
                    format!("its leaf {:?} is an array of {ndim} dimensions (1 is read)", leaf.name),
                ));
            }
            let dt = dtype(d).ok_or_else(|| bad(format!("has the dtype {d}, which is not read")))?;
            let len = word(2).ok_or_else(|| bad("has no numpy shape".into()))?;
            let data = &cell[12..];
            if u64::from(len) * dt.0 as u64 != data.len() as u64 {
                return Err(bad(format!("says {len} elements and has {} bytes", data.len())));
            }
            array(data, dt).map_err(bad)?
        }
        Ser::Other => return Err(bad("is not read".into())),
    })
}

impl LitDataFormat {
    fn item(&self, bytes: &[u8], out: &mut UnitBuilder) -> std::result::Result<(), ImageError> {
        let corrupt = |m: String| ImageError::new(ImageErrorKind::Corrupt, m);
        let n = self.leaves.len();
        let Some((head, mut body)) = bytes.split_at_checked(4 * n) else {
            return Err(corrupt(format!("an item of {} bytes has no room for its {n} sizes", bytes.len())));
        };
        let mut cells = Vec::with_capacity(n);
        for (leaf, b) in self.leaves.iter().zip(head.chunks_exact(4)) {
            let size = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
            let Some((cell, rest)) = body.split_at_checked(size) else {
                return Err(corrupt(format!("its leaf {:?} of {size} bytes runs past the item's end", leaf.name)));
            };
            cells.push(cell);
            body = rest;
        }
        if !body.is_empty() {
            return Err(corrupt(format!("{} bytes follow its leaves", body.len())));
        }
        let label = match self.label {
            None => -1,
            Some(k) => match value(&self.leaves[k], cells[k])? {
                Value::Int(v) => v,
                _ => return Err(corrupt(format!("its label leaf {:?} is not an int", self.leaves[k].name))),
            },
        };
        let extras = self
            .extras
            .iter()
            .map(|&k| value(&self.leaves[k], cells[k]))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        match self.leaves[self.image].ser {
            Ser::Pil => {
                let (raw, shape) = shard_index::pil(cells[self.image])?;
                out.pixels(raw, shape, label, &extras)
            }
            _ => out.image(cells[self.image], label, &extras),
        }
    }
}

impl RecordFormat for LitDataFormat {
    fn kind(&self) -> &'static str {
        "litdata"
    }

    fn decode_unit(&self, unit: &Unit, bytes: &[u8], out: &mut UnitBuilder) -> std::result::Result<(), ImageError> {
        let (path, table) =
            self.chunks.get(unit.file as usize).ok_or_else(|| ImageError::new(ImageErrorKind::Corrupt, "no chunk"))?;
        let corrupt = |m: String| ImageError::new(ImageErrorKind::Corrupt, format!("{}: {m}", path.display()));
        let inflated;
        let (offsets, base): (&[u32], u64) = match table {
            Some(t) => (t, unit.offset),
            None => {
                let n = u64::from(unit.samples);
                let header = 4 * (n + 2);
                let head = bytes.get(..header.min(bytes.len() as u64) as usize).unwrap_or_default();
                inflated = check_table(head, n, header, bytes.len() as u64).map_err(corrupt)?;
                (&inflated, 0)
            }
        };
        for k in 0..u64::from(unit.samples) {
            let n = unit.first + k;
            let range = usize::try_from(n).ok().and_then(|n| Some((*offsets.get(n)?, *offsets.get(n + 1)?)));
            let slice = range.and_then(|(a, b)| {
                let a = usize::try_from(u64::from(a).checked_sub(base)?).ok()?;
                let b = usize::try_from(u64::from(b).checked_sub(base)?).ok()?;
                bytes.get(a..b)
            });
            let Some(item) = slice else {
                return Err(corrupt(format!("item {n} lies outside its unit")));
            };
            if let Err(e) = self.item(item, out) {
                out.bad(ImageError::new(e.kind, cut_message(format!("{}#{n}: {}", path.display(), e.message))))?;
            }
        }
        Ok(())
    }
}

/// The leaves' names from `data_spec` (a JSON pytree spec: a dict whose children are all leaves).
fn leaf_names(spec: &[u8], leaves: usize) -> std::result::Result<Vec<String>, String> {
    let json = packed_json::parse(spec).map_err(|m| m.replace("metadata JSON", "data_spec"))?;
    let root = match &json {
        Json::Array(a) if a.len() == 2 => &a[1],
        _ => return Err("data_spec is not [protocol, spec]".into()),
    };
    if root.get("type") != Some(&Json::Str(b"builtins.dict".to_vec())) {
        return Err("data_spec is not a dict of leaves (items must be dicts)".into());
    }
    let children = match root.get("children_spec") {
        Some(Json::Array(c)) => c,
        _ => return Err("data_spec's dict has no children_spec".into()),
    };
    let leaf = |c: &Json| c.get("type") == Some(&Json::Null) && c.get("children_spec") == Some(&Json::Array(vec![]));
    if !children.iter().all(leaf) {
        return Err("data_spec's dict holds more than leaves (nested items are not read)".into());
    }
    let context = match root.get("context") {
        Some(Json::Str(s)) => packed_json::parse(s).map_err(|m| m.replace("metadata JSON", "data_spec's context"))?,
        _ => return Err("data_spec's dict has no context".into()),
    };
    let names = match context {
        Json::Array(keys) => keys
            .into_iter()
            .map(|k| match k {
                Json::Str(s) => String::from_utf8(s).map_err(|_| "a key that is not UTF-8".to_string()),
                other => Err(format!("a key {other:?} that is not a string")),
            })
            .collect::<std::result::Result<Vec<_>, _>>()?,
        _ => return Err("data_spec's context is not a list of keys".into()),
    };
    if names.len() != children.len() || names.len() != leaves {
        return Err(format!(
            "data_spec has {} keys and {} leaves, data_format {leaves} serializers",
            names.len(),
            children.len()
        ));
    }
    Ok(names)
}

/// One chunk as the index gives it.
struct Chunk {
    items: u64,
    bytes: u64,
    filename: String,
}

/// Which leaves make a sample: (image, label, extras).
fn choose(request: &Columns, leaves: &[Leaf], at: &str) -> Result<(usize, Option<usize>, Vec<usize>)> {
    let find = |name: &str| leaves.iter().position(|l| l.name == name);
    let listing = || leaves.iter().map(|l| format!("{:?} ({})", l.name, l.serializer)).collect::<Vec<_>>().join(", ");
    let is_image = |l: &Leaf| matches!(l.ser, Ser::Image | Ser::Pil | Ser::Bytes);
    let image = match &request.image {
        Some(name) => find(name).filter(|&k| is_image(&leaves[k])).ok_or_else(|| {
            TrdataError::config(
                IMAGE_COLUMN,
                format!("{name:?} is not a jpeg, image:<ext>, pil or bytes leaf of {at} (its leaves: {})", listing()),
            )
        })?,
        None => {
            let images: Vec<usize> =
                (0..leaves.len()).filter(|&k| matches!(leaves[k].ser, Ser::Image | Ser::Pil)).collect();
            match images[..] {
                [k] => k,
                _ => find("image").filter(|&k| is_image(&leaves[k])).ok_or_else(|| {
                    TrdataError::config(
                        IMAGE_COLUMN,
                        format!(
                            "{at} has no single image leaf, nor an \"image\" leaf: name it (its leaves: {})",
                            listing()
                        ),
                    )
                })?,
            }
        }
    };
    let label = match &request.label {
        LabelColumn::Absent => None,
        LabelColumn::Default => find("label").filter(|&k| leaves[k].ser == Ser::Int),
        LabelColumn::Named(name) => Some(find(name).filter(|&k| leaves[k].ser == Ser::Int).ok_or_else(|| {
            TrdataError::config(
                LABEL_COLUMN,
                format!("{name:?} is not an int leaf of {at} (its leaves: {})", listing()),
            )
        })?),
    };
    let extras = match &request.extras {
        None => (0..leaves.len()).filter(|&k| k != image && Some(k) != label && leaves[k].ser.is_value()).collect(),
        Some(names) => names
            .iter()
            .map(|name| match find(name) {
                Some(k) if leaves[k].ser != Ser::Other => Ok(k),
                Some(k) => Err(TrdataError::config(
                    EXTRAS,
                    format!("{name:?} of {at} has the serializer {:?}, which is not read", leaves[k].serializer),
                )),
                None => Err(TrdataError::config(
                    EXTRAS,
                    format!("{name:?} is not a leaf of {at} (its leaves: {})", listing()),
                )),
            })
            .collect::<Result<Vec<_>>>()?,
    };
    Ok((image, label, extras))
}

/// Open a LitData dataset (module docs): `files[0]` is its folder or URL prefix, or its `index.json`.
pub fn open(
    files: &[Location],
    storage: &StorageOptions,
    columns: &Columns,
) -> Result<(Catalogue, Box<dyn RecordFormat>)> {
    let first = files.first().ok_or_else(|| TrdataError::config("paths", "a LitData dataset needs its folder"))?;
    let (index_at, root) = shard_index::index_location(first);
    let (index, json) = shard_index::read_index(&index_at, storage)?;
    let f = Fields { index: &index };
    let config = f.get(&json, "config", "the index")?;
    let at = "its config";
    match f.opt_str(config.get("item_loader"), at)? {
        None | Some("PyTreeLoader") => {}
        Some(other) => {
            return Err(f.error(at, format!("has the item loader {other:?}; PyTreeLoader's chunks are read")));
        }
    }
    if !matches!(config.get("encryption"), None | Some(Json::Null)) {
        return Err(f.error(at, "says its chunks are encrypted, which is not read"));
    }
    let codec = match f.opt_str(config.get("compression"), at)? {
        None => None,
        Some(c) if c == "zstd" || c.strip_prefix("zstd:").is_some_and(|l| l.parse::<i32>().is_ok()) => {
            Some(Codec::Zstd)
        }
        Some(c) => return Err(f.error(at, format!("has the compression {c:?}; none or zstd is read"))),
    };
    match f.opt_str(config.get("compression_level"), at)? {
        None | Some("chunk") => {}
        Some(level) => {
            return Err(f.error(
                at,
                format!("has compression_level {level:?} (zstd frames inside the chunk), which is not read: write with \"chunk\""),
            ));
        }
    }
    let formats = f.array(f.get(config, "data_format", at)?, at)?;
    if formats.is_empty() || formats.len() > MAX_LEAVES {
        return Err(f.error(at, format!("has {} serializers in data_format", formats.len())));
    }
    let spec = match f.get(config, "data_spec", at)? {
        Json::Str(s) => s,
        _ => return Err(f.error(at, "has a data_spec that is not a string")),
    };
    let names = leaf_names(spec, formats.len()).map_err(|m| f.error(at, m))?;
    let leaves = names
        .into_iter()
        .zip(formats)
        .map(|(name, s)| {
            let serializer = f.str(s, at)?.to_string();
            Ok(Leaf { name, ser: Ser::of(&serializer), serializer })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut chunks = Vec::new();
    let mut total = 0u64;
    for (k, c) in f.array(f.get(&json, "chunks", "the index")?, "its chunks")?.iter().enumerate() {
        let at = format!("chunk {k}");
        let at = at.as_str();
        let items = f.uint(f.get(c, "chunk_size", at)?, u64::from(u32::MAX), at)?;
        total += items;
        if total >= u64::from(u32::MAX) {
            return Err(f.error(at, "brings the items to 2**32 or more"));
        }
        let bytes = f.uint(f.get(c, "chunk_bytes", at)?, u64::from(u32::MAX), at)?;
        let filename = match f.get(c, "filename", at)? {
            Json::Str(b) => shard_index::check_name(b).filter(|n| !n.contains('/')).map(str::to_string),
            _ => None,
        }
        .ok_or_else(|| f.error(at, "has a filename that is not a plain file name"))?;
        chunks.push(Chunk { items, bytes, filename });
    }
    let at = index.name().display().to_string();
    let (image, label, extras) = choose(columns, &leaves, &at)?;
    let factor = if extras.iter().any(|&k| leaves[k].ser.is_array()) { 9 } else { 1 };
    let factor = factor + u64::from(extras.contains(&image));
    let per_item = 9 * leaves.len() as u64 + MESSAGE_BYTES + table_bytes(1) - table_bytes(0);
    let mut readers = Vec::new();
    let mut units = Vec::new();
    let mut tables = Vec::new();
    for (k, c) in chunks.iter().enumerate() {
        let reader = ObjectReader::open(&child(&root, &c.filename), storage)?;
        let file = k as u32;
        let name = reader.name().to_path_buf();
        match codec {
            Some(codec) => {
                let most = c.bytes + c.bytes / 64 + 4096;
                if reader.size() > most {
                    return Err(reader.source_error(format!(
                        "{} bytes of zstd for a chunk of {} bytes (at most {most})",
                        reader.size(),
                        c.bytes
                    )));
                }
                if c.items > 0 {
                    units.push(Unit {
                        file,
                        offset: 0,
                        len: reader.size(),
                        samples: c.items as u32,
                        first: 0,
                        inflate: Some(Inflate { codec, raw_len: c.bytes }),
                        decoded_bytes: factor * c.bytes + c.items * per_item + table_bytes(0),
                        tag: k as u64,
                    });
                }
                tables.push((name, None));
            }
            None => {
                if reader.size() != c.bytes {
                    return Err(reader.source_error(format!(
                        "has {} bytes where the index says {}",
                        reader.size(),
                        c.bytes
                    )));
                }
                let header = 4 * (c.items + 2);
                if header > c.bytes {
                    return Err(reader.source_error(format!(
                        "{} items need {header} bytes of table; the chunk has {}",
                        c.items, c.bytes
                    )));
                }
                let head = reader.read_growing(0, header).map_err(|e| reader.source_error(e.message))?;
                let offsets = check_table(&head, c.items, header, c.bytes).map_err(|m| reader.source_error(m))?;
                let n = c.items as usize;
                let mut i = 0;
                while i < n {
                    let start = i;
                    let mut bound = table_bytes(0);
                    while i < n {
                        let b = factor * u64::from(offsets[i + 1] - offsets[i]) + per_item;
                        if i > start && bound + b > DEFAULT_BLOCK_BYTES {
                            break;
                        }
                        bound += b;
                        i += 1;
                    }
                    let (a, b) = (u64::from(offsets[start]), u64::from(offsets[i]));
                    units.push(Unit {
                        file,
                        offset: a,
                        len: b - a,
                        samples: (i - start) as u32,
                        first: start as u64,
                        inflate: None,
                        decoded_bytes: bound,
                        tag: k as u64,
                    });
                }
                tables.push((name, Some(offsets)));
            }
        }
        readers.push(reader);
    }
    let fields = extras.iter().map(|&k| leaves[k].name.clone()).collect();
    let format = LitDataFormat { chunks: tables, leaves, image, label, extras };
    Ok((Catalogue { files: readers, units, fields, classes: Vec::new() }, Box::new(format)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::records::RecordFiles;
    use crate::source::records_tests::{copy_dir, fixture, image, open_with, read_all, short};
    use proptest::prelude::*;
    use std::path::Path;

    const JPEGS: [&str; 3] = ["red.jpg", "blue.jpg", "grey.jpg"];

    fn expected(k: usize) -> Vec<Value> {
        vec![
            Value::Text(JPEGS[k].into()),
            Value::Float(k as f64 / 8.0),
            Value::Bool(k.is_multiple_of(2)),
            Value::Bytes(vec![7; k]),
            Value::List((0..=k as i64).map(Value::Int).collect()),
        ]
    }

    fn source_error(r: Result<crate::source::Dataset>) -> (PathBuf, String) {
        match r {
            Err(TrdataError::Source { path, message }) => (path, message),
            other => panic!("{other:?}"),
        }
    }

    fn edit_index(dir: &Path, from: &str, to: &str) {
        let p = dir.join("index.json");
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains(from), "{from}");
        std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    }

    #[test]
    fn the_fixtures_read_as_the_writer_wrote_them() {
        for (sub, ext) in [("plain", "bin"), ("zstd", "zstd.bin")] {
            let dir = fixture(&format!("litdata/{sub}"));
            for path in [dir.clone(), dir.join("index.json")] {
                let ds = open_with(open, &[&path], &Columns::default()).unwrap();
                let store = ds.store_as::<RecordFiles>().unwrap();
                assert_eq!(store.catalogue().fields, ["name", "score", "flag", "raw", "vec"]);
                let got = read_all(&ds);
                assert_eq!(got.len(), 3, "{sub}");
                for (k, (name, r)) in got.into_iter().enumerate() {
                    let want = if k < 2 { format!("chunk-0-0.{ext}#{k}") } else { format!("chunk-0-1.{ext}#0") };
                    assert_eq!(short(&name), want);
                    let (bytes, shape, label, extras) = r.unwrap();
                    assert_eq!((bytes, shape, label), (image(JPEGS[k]), None, 20 + k as i64), "{sub} {k}");
                    assert_eq!(extras, expected(k), "{sub} {k}");
                }
            }
        }
        let cols = Columns { image: None, label: LabelColumn::Absent, extras: Some(vec!["label".into()]) };
        let got = read_all(&open_with(open, &[&fixture("litdata/plain")], &cols).unwrap());
        assert_eq!(got[2].1.clone().unwrap().2, -1);
        assert_eq!(got[2].1.clone().unwrap().3, vec![Value::Int(22)]);
        let config = |cols: Columns, parameter: &str| match open_with(open, &[&fixture("litdata/plain")], &cols) {
            Err(TrdataError::Config { parameter: p, message }) => {
                assert_eq!(p, parameter, "{message}");
                assert!(message.contains("index.json"), "{message}");
            }
            other => panic!("{other:?}"),
        };
        config(Columns { image: Some("score".into()), ..Columns::default() }, IMAGE_COLUMN);
        config(Columns { label: LabelColumn::Named("name".into()), ..Columns::default() }, LABEL_COLUMN);
        config(Columns { extras: Some(vec!["nope".into()]), ..Columns::default() }, EXTRAS);
    }

    #[test]
    fn an_index_that_lies_or_asks_for_more_is_refused() {
        for (from, to, what) in [
            ("\"chunk_size\": 2, \"dim\"", "\"chunk_size\": 3, \"dim\"", "holds 2 samples where the index says 3"),
            ("\"chunk_bytes\": 1402", "\"chunk_bytes\": 1401", "has 1402 bytes where the index says 1401"),
            ("\"chunk-0-0.bin\"", "\"../chunk-0-0.bin\"", "chunk 0: has a filename"),
            ("\"chunk-0-1.bin\"", "\"sub/chunk-0-1.bin\"", "chunk 1: has a filename"),
            ("\"PyTreeLoader\"", "\"TokensLoader\"", "item loader \"TokensLoader\""),
            ("\"encryption\": null", "\"encryption\": \"fernet\"", "encrypted"),
            ("\"compression\": null", "\"compression\": \"lz4\"", "compression \"lz4\""),
            ("\"compression_level\": null", "\"compression_level\": \"batch\"", "compression_level \"batch\""),
            ("[\"jpeg\", \"int\",", "[\"jpeg\",", "7 keys and 7 leaves, data_format 6"),
            ("\"chunk_size\": 1,", "\"chunk_size\": 4294967295,", "2**32"),
        ] {
            let dir = copy_dir(&fixture("litdata/plain"), "litdata-lies");
            edit_index(&dir, from, to);
            let (_, message) = source_error(open_with(open, &[&dir], &Columns::default()));
            assert!(message.contains(what), "{to}: {message}");
        }
    }

    #[test]
    fn a_chunk_that_lies_is_refused_or_costs_its_items() {
        // Its offset table.
        for (word, value, what) in
            [(1usize, 8u32, "inside its"), (2, 0, "before the one before"), (3, 1500, "end at byte 1500")]
        {
            let dir = copy_dir(&fixture("litdata/plain"), "litdata-table");
            let p = dir.join("chunk-0-0.bin");
            let mut b = std::fs::read(&p).unwrap();
            b[4 * word..4 * word + 4].copy_from_slice(&value.to_le_bytes());
            std::fs::write(&p, &b).unwrap();
            let (path, message) = source_error(open_with(open, &[&dir], &Columns::default()));
            assert!(path == p && message.contains(what), "{message}");
        }
        // An item whose sizes do not add up, a bool of 2 bytes: one bad sample each.
        let dir = copy_dir(&fixture("litdata/plain"), "litdata-item");
        let p = dir.join("chunk-0-0.bin");
        let mut b = std::fs::read(&p).unwrap();
        let second = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
        b[second] = b[second].wrapping_add(1);
        std::fs::write(&p, &b).unwrap();
        let got = read_all(&open_with(open, &[&dir], &Columns::default()).unwrap());
        assert!(got[0].1.is_ok() && got[2].1.is_ok());
        let e = got[1].1.clone().unwrap_err();
        assert!(e.kind == ImageErrorKind::Corrupt && e.message.contains("chunk-0-0.bin#1"), "{e:?}");

        // A compressed chunk whose index says one byte more or fewer than it inflates to.
        for raw in ["1401", "1403"] {
            let dir = copy_dir(&fixture("litdata/zstd"), "litdata-zstd");
            edit_index(&dir, "\"chunk_bytes\": 1402", &format!("\"chunk_bytes\": {raw}"));
            let got = read_all(&open_with(open, &[&dir], &Columns::default()).unwrap());
            for (_, r) in &got[..2] {
                let e = r.clone().unwrap_err();
                assert!(e.kind == ImageErrorKind::Corrupt && e.message.contains("inflates to"), "{e:?}");
            }
            assert!(got[2].1.is_ok());
        }
    }

    fn cases(default: u32) -> u32 {
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(300), ..ProptestConfig::default() })]

        /// The fixtures with random edits (in the index or a chunk, plain or zstd): a typed error at open, or
        /// every item read or failed with a typed error.
        #[test]
        fn edited_fixtures_never_panic(
            which in 0usize..5,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..4), 1..4),
        ) {
            let (sub, file) = [
                ("plain", "index.json"), ("plain", "chunk-0-0.bin"), ("plain", "chunk-0-1.bin"),
                ("zstd", "index.json"), ("zstd", "chunk-0-0.zstd.bin"),
            ][which];
            let dir = copy_dir(&fixture(&format!("litdata/{sub}")), "litdata-prop");
            let path = dir.join(file);
            let mut data = std::fs::read(&path).unwrap();
            for (at, byte, op) in edits {
                let at = at % (data.len() + 1);
                match op {
                    0 if at < data.len() => data[at] = byte,
                    1 => data.insert(at, byte),
                    2 => data.truncate(at),
                    _ if at < data.len() => data[at] ^= 1 << (byte % 8),
                    _ => {}
                }
            }
            std::fs::write(&path, &data).unwrap();
            match open_with(open, &[&dir], &Columns::default()) {
                Ok(ds) => {
                    for (_, r) in read_all(&ds) {
                        if let Err(e) = r {
                            prop_assert!(matches!(e.kind, ImageErrorKind::Corrupt | ImageErrorKind::TooLarge | ImageErrorKind::Unsupported), "{e:?}");
                        }
                    }
                }
                Err(e) => prop_assert!(matches!(e, TrdataError::Source { .. } | TrdataError::Config { .. }), "{e:?}"),
            }
        }
    }
}
