//! source/litdata — LitData datasets (`litdata.optimize`'s chunks) as a record source (kind "litdata"): a folder
//! or URL prefix holding `index.json` and its chunks. docs/design/formats-research.md §4 holds the facts this
//! file follows.
//!
//! ```text
//! index.json: {"chunks": [{"chunk_bytes": the file's size, "chunk_size": items, "filename"}, ...],
//!              "config": {"item_loader": "PyTreeLoader", "encryption": null, "compression": null | "zstd[:N]",
//!                         "compression_level": null | "chunk" | "batch" | "sample", "data_format": [serializer
//!                         per leaf], "data_spec": "<JSON pytree spec: a dict of leaves, its keys a JSON list in
//!                         'context'>"}}
//! chunk (uncompressed; "sample": each item's bytes one zstd frame):
//!   u32 n · u32 offsets[n + 1] (from the chunk's start) · items
//! "chunk" (`*.zstd.bin`): that chunk compressed whole (chunk_bytes is then its inflated size)
//! "batch" (litdata's default for zstd; framed_zstd.py `pack_framed_zstd`), all little-endian:
//!   "LDFZ01\0\0" · u16 version 1 · u16 flags 0 · u32 n · u32 k (items per frame) · u32 frames = ceil(n / k)
//!   u32 offsets[n + 1]: items' offsets in the frames' inflated bytes put end to end (offsets[0] = 0)
//!   per frame j: u32 first item (j·k) · u32 items (k, the last fewer) · u64 file offset · u32 bytes ·
//!                u32 inflated bytes (= offsets[first + items] - offsets[first])
//!   the frames, back to back to the file's end: frame j inflates to items first.. of the plain item bytes
//! item: u32 size per leaf (every leaf) · the leaves' bytes, in the spec's order
//! ```
//!
//! # Units
//! Uncompressed and "sample" chunks: runs of items of about [`DEFAULT_BLOCK_BYTES`] decoded (one ranged read
//! each); "batch": runs of whole frames (one ranged read of consecutive frames, each inflated alone); "chunk":
//! the whole file, inflated.
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
//! ("batch"/"sample" only with zstd), `data_format` and the spec's leaves agree, chunk file names are plain names
//! (no `/`, no `..`), items at most 2^32 - 1 together, `chunk_bytes` at most 2^32 - 1. An uncompressed,
//! "batch" or "sample" chunk's file must be `chunk_bytes` long (`SourceError` naming the chunk otherwise).
//! Its offset table is read and checked at open (count = `chunk_size`, first offset past the table,
//! non-decreasing, last = `chunk_bytes`). "batch": the directory is read and checked at open (magic, version 1,
//! flags 0, n = `chunk_size`, frames = ceil(n / k), offsets from 0 non-decreasing, frame j holds exactly items
//! j·k.., frames start right after the directory and each right after the one before, non-empty, the last
//! ending at the file's end, each frame's inflated size equal to its items' span); a frame is inflated capped at
//! that size and must give exactly it, else its items fail (`Corrupt`, naming the chunk, item and frame).
//! "sample": each item's zstd frame header is read at open (one read of at most 18 bytes per item) and must
//! declare its content size (≤ 2^32 - 1): that bounds the unit, and the item's inflate is capped at it and must
//! give exactly it, else that item fails. A "chunk" chunk is read whole (its file at most a zstd bound of
//! `chunk_bytes`), inflated to exactly `chunk_bytes` (records.rs) and its table checked then. Per item: the
//! sizes fit and add up to the item exactly, each leaf's bytes are its serializer's (8 for int/float, 1 for bool,
//! UTF-8 text, a numpy header that fits); an item that fails is one bad sample. A unit's decoded bound is the
//! inflated (or plain) bytes of its items (twice when the image is also an extra, nine times with array extras)
//! plus a row, an error message and 9 bytes a leaf per item.

use super::packed::DEFAULT_BLOCK_BYTES;
use super::packed_json::{self, Json};
use super::records::{
    Catalogue, Codec, Columns, EXTRAS, IMAGE_COLUMN, Inflate, LABEL_COLUMN, LabelColumn, RecordFormat, Unit,
    UnitBuilder, Value, inflate, table_bytes,
};
use super::shard_index::{self, Fields, MESSAGE_BYTES, check_table, child, cut_message};
use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use crate::storage::{Location, ObjectReader, StorageOptions};
use bytes::Bytes;
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

/// The magic that opens a framed ("batch") chunk.
const FRAMED_MAGIC: &[u8; 8] = b"LDFZ01\0\0";

/// Bytes of a framed chunk's prefix (magic, version, flags, items, frame rows, frames).
const PREFIX_BYTES: u64 = 24;
/// Bytes of one frame's row in a framed chunk's directory.
const FRAME_BYTES: u64 = 24;

/// Bytes of a zstd frame header at most (what [`frame_size`] reads of an item).
const ZSTD_HEADER_BYTES: u64 = 18;

/// One zstd frame of a framed chunk: items `first..first + items`, `len` bytes at `offset` in the file that
/// inflate to exactly `raw` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Frame {
    first: u32,
    items: u32,
    offset: u64,
    len: u32,
    raw: u32,
}

/// How a chunk's items lie in its file (module docs).
#[derive(Debug)]
enum Layout {
    /// Uncompressed: the offset table (from the file's start).
    Plain(Vec<u32>),
    /// compression_level "chunk": the file is the chunk compressed whole (its table read once inflated).
    Whole,
    /// compression_level "batch": the items' offsets in the frames' inflated bytes put end to end (the first 0),
    /// and the frames.
    Batch { offsets: Vec<u32>, frames: Vec<Frame> },
    /// compression_level "sample": the offset table (from the file's start; each item one zstd frame) and each
    /// item's inflated size (its frame header's content size).
    Sample { offsets: Vec<u32>, sizes: Vec<u32> },
}

/// The LitData format of one source.
#[derive(Debug)]
struct LitDataFormat {
    /// Per chunk file: its name and its layout.
    chunks: Vec<(PathBuf, Layout)>,
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

    fn decode_unit(&self, unit: &Unit, bytes: &Bytes, out: &mut UnitBuilder) -> std::result::Result<(), ImageError> {
        let (path, layout) =
            self.chunks.get(unit.file as usize).ok_or_else(|| ImageError::new(ImageErrorKind::Corrupt, "no chunk"))?;
        let corrupt = |m: String| ImageError::new(ImageErrorKind::Corrupt, format!("{}: {m}", path.display()));
        let named = |n: u64, e: ImageError| {
            ImageError::new(e.kind, cut_message(format!("{}#{n}: {}", path.display(), e.message)))
        };
        // The bytes of items `from..to` of `offsets` less `base`, within `bytes`.
        let slice = |bytes: &'_ [u8], offsets: &[u32], n: u64, base: u64| -> Option<std::ops::Range<usize>> {
            let n = usize::try_from(n).ok()?;
            let (a, b) = (*offsets.get(n)?, *offsets.get(n.checked_add(1)?)?);
            let a = usize::try_from(u64::from(a).checked_sub(base)?).ok()?;
            let b = usize::try_from(u64::from(b).checked_sub(base)?).ok()?;
            bytes.get(a..b).map(|_| a..b)
        };
        let inflated;
        let (offsets, base): (&[u32], u64) = match layout {
            Layout::Plain(t) => (t, unit.offset),
            Layout::Whole => {
                let n = u64::from(unit.samples);
                let header = 4 * (n + 2);
                let head = bytes.get(..header.min(bytes.len() as u64) as usize).unwrap_or_default();
                inflated = check_table(head, n, header, bytes.len() as u64).map_err(corrupt)?;
                (&inflated, 0)
            }
            Layout::Sample { offsets, sizes } => {
                for n in unit.first..unit.first + u64::from(unit.samples) {
                    let (Some(range), Some(&raw_len)) = (slice(bytes, offsets, n, unit.offset), sizes.get(n as usize))
                    else {
                        return Err(corrupt(format!("item {n} lies outside its unit")));
                    };
                    let item = inflate(&bytes[range], Inflate { codec: Codec::Zstd, raw_len: u64::from(raw_len) })
                        .map_err(|e| ImageError::new(e.kind, format!("its zstd frame: {}", e.message)))
                        .and_then(|raw| self.item(&raw, out));
                    if let Err(e) = item {
                        out.bad(named(n, e))?;
                    }
                }
                return Ok(());
            }
            Layout::Batch { offsets, frames } => {
                let mut j = frames.partition_point(|f| u64::from(f.first) < unit.first);
                let mut done = 0u64;
                while done < u64::from(unit.samples) {
                    let Some(f) = frames.get(j).filter(|f| u64::from(f.first) == unit.first + done) else {
                        return Err(corrupt(format!("no frame starts at item {}", unit.first + done)));
                    };
                    let at = f.offset.checked_sub(unit.offset).and_then(|a| usize::try_from(a).ok());
                    let Some(data) = at.and_then(|a| bytes.get(a..a.checked_add(f.len as usize)?)) else {
                        return Err(corrupt(format!("frame {j} lies outside its unit")));
                    };
                    let items = u64::from(f.first)..u64::from(f.first) + u64::from(f.items);
                    match inflate(data, Inflate { codec: Codec::Zstd, raw_len: u64::from(f.raw) }) {
                        Err(e) => {
                            for n in items {
                                out.bad(named(
                                    n,
                                    ImageError::new(e.kind.clone(), format!("its frame {j}: {}", e.message)),
                                ))?;
                            }
                        }
                        Ok(raw) => {
                            let base = u64::from(offsets[f.first as usize]);
                            for n in items {
                                let Some(range) = slice(&raw, offsets, n, base) else {
                                    return Err(corrupt(format!("item {n} lies outside its frame {j}")));
                                };
                                if let Err(e) = self.item(&raw[range], out) {
                                    out.bad(named(n, e))?;
                                }
                            }
                        }
                    }
                    done += u64::from(f.items);
                    j += 1;
                }
                return Ok(());
            }
        };
        for n in unit.first..unit.first + u64::from(unit.samples) {
            let Some(range) = slice(bytes, offsets, n, base) else {
                return Err(corrupt(format!("item {n} lies outside its unit")));
            };
            if let Err(e) = self.item(&bytes[range], out) {
                out.bad(named(n, e))?;
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

/// How the chunks are compressed (`compression_level`; with no compression, `Chunk`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Chunk,
    Batch,
    Sample,
}

/// An uncompressed or framed chunk's file must be `chunk_bytes` long.
fn check_size(reader: &ObjectReader, c: &Chunk) -> Result<()> {
    if reader.size() != c.bytes {
        return Err(reader.source_error(format!("has {} bytes where the index says {}", reader.size(), c.bytes)));
    }
    Ok(())
}

/// `0..n` cut into runs whose bounds (`bound(i)` each, plus [`table_bytes`]) stay within
/// [`DEFAULT_BLOCK_BYTES`], each run at least one.
fn runs(n: usize, bound: impl Fn(usize) -> u64) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < n {
        let start = i;
        let mut total = table_bytes(0);
        while i < n {
            let b = bound(i);
            if i > start && total + b > DEFAULT_BLOCK_BYTES {
                break;
            }
            total += b;
            i += 1;
        }
        out.push(start..i);
    }
    out
}

/// A framed chunk's directory (module docs), checked against `items` (the index's `chunk_size`) and the file's
/// size: the items' offsets in the inflated bytes and the frames, which tile the items and the file after the
/// directory in order.
fn read_framed(reader: &ObjectReader, items: u64) -> std::result::Result<(Vec<u32>, Vec<Frame>), String> {
    let size = reader.size();
    if size < PREFIX_BYTES {
        return Err(format!("has {size} bytes, too few for a framed zstd chunk's {PREFIX_BYTES}-byte header"));
    }
    let prefix = reader.read_growing(0, PREFIX_BYTES).map_err(|e| e.message)?;
    parse_framed(&prefix, items, size, |len| reader.read_growing(0, len).map_err(|e| e.message))
}

/// [`read_framed`] on bytes: `prefix` (at least [`PREFIX_BYTES`]), `read(len)` the file's first `len` bytes
/// (called once `len` is known to fit the file).
fn parse_framed(
    prefix: &[u8],
    items: u64,
    size: u64,
    read: impl FnOnce(u64) -> std::result::Result<Vec<u8>, String>,
) -> std::result::Result<(Vec<u32>, Vec<Frame>), String> {
    let word = |b: &[u8], at: usize| b.get(at..at + 4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    let short = || "its framed zstd header is cut short".to_string();
    if prefix.get(..8) != Some(FRAMED_MAGIC.as_slice()) {
        return Err("does not start with LDFZ01 (compression_level \"batch\" says framed zstd)".into());
    }
    let half = |at: usize| prefix.get(at..at + 2).map(|w| u16::from_le_bytes([w[0], w[1]]));
    let (version, flags) = (half(8).ok_or_else(short)?, half(10).ok_or_else(short)?);
    if (version, flags) != (1, 0) {
        return Err(format!("is framed zstd of version {version}, flags {flags} (version 1, flags 0 is read)"));
    }
    let (n, rows, count) =
        (word(prefix, 12).ok_or_else(short)?, word(prefix, 16).ok_or_else(short)?, word(prefix, 20).ok_or_else(short)?);
    if u64::from(n) != items || n == 0 {
        return Err(format!("holds {n} items where the index says {items}"));
    }
    if rows == 0 || count != n.div_ceil(rows) {
        return Err(format!("has {count} frames of {rows} items for {n} items"));
    }
    let table_at = PREFIX_BYTES + 4 * (u64::from(n) + 1);
    let end = table_at + FRAME_BYTES * u64::from(count);
    if end > size {
        return Err(format!("its framed zstd directory of {end} bytes runs past its {size} bytes"));
    }
    let head = read(end)?;
    if (head.len() as u64) < end {
        return Err(short());
    }
    let mut offsets = Vec::new();
    offsets.try_reserve_exact(n as usize + 1).map_err(|_| "too many items".to_string())?;
    for i in 0..=n as usize {
        let o = word(&head, PREFIX_BYTES as usize + 4 * i).ok_or_else(short)?;
        let before = offsets.last().copied().unwrap_or(0);
        if (i == 0 && o != 0) || o < before {
            return Err(format!("item {i} starts at inflated byte {o}, before the one before it ({before})"));
        }
        offsets.push(o);
    }
    let mut frames = Vec::with_capacity(count as usize);
    let mut cursor = end;
    for j in 0..count {
        let at = (table_at + FRAME_BYTES * u64::from(j)) as usize;
        let w = |k: usize| word(&head, at + 4 * k).ok_or_else(short);
        let (first, len, raw) = (w(0)?, w(4)?, w(5)?);
        let offset = u64::from(w(2)?) | (u64::from(w(3)?) << 32);
        let want = (u64::from(j) * u64::from(rows), u64::from(rows).min(u64::from(n) - u64::from(j) * u64::from(rows)));
        let frame_items = w(1)?;
        if (u64::from(first), u64::from(frame_items)) != want {
            return Err(format!("its frame {j} holds items {first}+{frame_items} where {}+{} are due", want.0, want.1));
        }
        if offset != cursor || len == 0 || offset + u64::from(len) > size {
            return Err(format!(
                "its frame {j} lies at bytes {offset}+{len}, not right after the one before it (byte {cursor}) \
                 inside its {size} bytes"
            ));
        }
        let last = (first + frame_items) as usize;
        let span = offsets[last] - offsets[first as usize];
        if raw != span || raw == 0 {
            return Err(format!("its frame {j} inflates to {raw} bytes where its items' offsets span {span}"));
        }
        cursor = offset + u64::from(len);
        frames.push(Frame { first, items: frame_items, offset, len, raw });
    }
    if cursor != size {
        return Err(format!("its frames end at byte {cursor} where it has {size} bytes"));
    }
    Ok((offsets, frames))
}

/// Each item's inflated size in a "sample" chunk: the content size its zstd frame's header declares (read at
/// open: one read of at most [`ZSTD_HEADER_BYTES`] per item), which its inflate is then held to.
fn frame_sizes(reader: &ObjectReader, offsets: &[u32]) -> Result<Vec<u32>> {
    let mut sizes = Vec::new();
    sizes
        .try_reserve_exact(offsets.len().saturating_sub(1))
        .map_err(|_| reader.source_error("too many items".into()))?;
    let mut head = Vec::new();
    for (i, w) in offsets.windows(2).enumerate() {
        let len = u64::from(w[1] - w[0]).min(ZSTD_HEADER_BYTES);
        reader
            .read_range(u64::from(w[0]), len, ZSTD_HEADER_BYTES, &mut head)
            .map_err(|e| reader.source_error(format!("item {i}: {}", e.message)))?;
        sizes.push(content_size(&head).map_err(|m| reader.source_error(format!("item {i}: {m}")))?);
    }
    Ok(sizes)
}

/// The content size a zstd frame header declares (at most 2^32 - 1).
fn content_size(head: &[u8]) -> std::result::Result<u32, String> {
    match zstd::zstd_safe::get_frame_content_size(head) {
        Ok(Some(n)) => u32::try_from(n).map_err(|_| format!("its zstd frame declares {n} bytes (2**32 - 1 at most)")),
        Ok(None) => Err("its zstd frame does not declare its size".into()),
        Err(_) => Err("is not a zstd frame".into()),
    }
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
    let level = match f.opt_str(config.get("compression_level"), at)? {
        None | Some("chunk") => Level::Chunk,
        Some("batch") => Level::Batch,
        Some("sample") => Level::Sample,
        Some(level) => {
            return Err(f.error(at, format!("has compression_level {level:?}; chunk, batch or sample is read")));
        }
    };
    if level != Level::Chunk && codec.is_none() {
        return Err(f.error(at, format!("has compression_level {level:?} without zstd compression")));
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
        let layout = match (codec, level) {
            (Some(codec), Level::Chunk) => {
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
                Layout::Whole
            }
            (_, Level::Batch) => {
                check_size(&reader, c)?;
                let (offsets, frames) = read_framed(&reader, c.items).map_err(|m| reader.source_error(m))?;
                let bound = |f: &Frame| factor * u64::from(f.raw) + u64::from(f.items) * per_item;
                for run in runs(frames.len(), |j| bound(&frames[j])) {
                    let (a, b) = (&frames[run.start], &frames[run.end - 1]);
                    let items: u64 = frames[run.clone()].iter().map(|f| u64::from(f.items)).sum();
                    units.push(Unit {
                        file,
                        offset: a.offset,
                        len: b.offset + u64::from(b.len) - a.offset,
                        samples: items as u32,
                        first: u64::from(a.first),
                        inflate: None,
                        decoded_bytes: table_bytes(0) + frames[run].iter().map(bound).sum::<u64>(),
                        tag: k as u64,
                    });
                }
                Layout::Batch { offsets, frames }
            }
            (_, level) => {
                check_size(&reader, c)?;
                let header = 4 * (c.items + 2);
                if header > c.bytes {
                    return Err(reader.source_error(format!(
                        "{} items need {header} bytes of table; the chunk has {}",
                        c.items, c.bytes
                    )));
                }
                let head = reader.read_growing(0, header).map_err(|e| reader.source_error(e.message))?;
                let offsets = check_table(&head, c.items, header, c.bytes).map_err(|m| reader.source_error(m))?;
                let sizes = match level {
                    Level::Sample => Some(frame_sizes(&reader, &offsets)?),
                    _ => None,
                };
                let size = |i: usize| match &sizes {
                    Some(s) => u64::from(s[i]),
                    None => u64::from(offsets[i + 1] - offsets[i]),
                };
                for run in runs(c.items as usize, |i| factor * size(i) + per_item) {
                    let (a, b) = (u64::from(offsets[run.start]), u64::from(offsets[run.end]));
                    units.push(Unit {
                        file,
                        offset: a,
                        len: b - a,
                        samples: run.len() as u32,
                        first: run.start as u64,
                        inflate: None,
                        decoded_bytes: table_bytes(0) + run.map(|i| factor * size(i) + per_item).sum::<u64>(),
                        tag: k as u64,
                    });
                }
                match sizes {
                    Some(sizes) => Layout::Sample { offsets, sizes },
                    None => Layout::Plain(offsets),
                }
            }
        };
        tables.push((name, layout));
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
    use crate::source::records_tests::{copy_dir, fixture, image, mutate, open_with, read_all, short};
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
        for (sub, ext, per_chunk) in [
            ("plain", "bin", 2),
            ("zstd", "zstd.bin", 2),
            ("batch", "bin", 2),
            ("batch2", "bin", 3),
            ("sample", "bin", 2),
        ] {
            let dir = fixture(&format!("litdata/{sub}"));
            for path in [dir.clone(), dir.join("index.json")] {
                let ds = open_with(open, &[&path], &Columns::default()).unwrap();
                let store = ds.store_as::<RecordFiles>().unwrap();
                assert_eq!(store.catalogue().fields, ["name", "score", "flag", "raw", "vec"]);
                let got = read_all(&ds);
                assert_eq!(got.len(), 3, "{sub}");
                for (k, (name, r)) in got.into_iter().enumerate() {
                    let want = if k < per_chunk {
                        format!("chunk-0-0.{ext}#{k}")
                    } else {
                        format!("chunk-0-1.{ext}#{}", k - per_chunk)
                    };
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
            ("\"compression_level\": null", "\"compression_level\": \"frames\"", "compression_level \"frames\""),
            ("\"compression_level\": null", "\"compression_level\": \"batch\"", "without zstd compression"),
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

    /// `dir`'s `file` with the u32 at `at` set to `value`.
    fn set_word(dir: &Path, file: &str, at: usize, value: u32) {
        let p = dir.join(file);
        let mut b = std::fs::read(&p).unwrap();
        b[at..at + 4].copy_from_slice(&value.to_le_bytes());
        std::fs::write(&p, &b).unwrap();
    }

    fn word(dir: &Path, file: &str, at: usize) -> u32 {
        u32::from_le_bytes(std::fs::read(dir.join(file)).unwrap()[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn framed_chunks_are_read_frame_by_frame() {
        // batch2: one chunk of 3 items in frames of 2: prefix 24 · offsets 4 × 4 · 2 frames × 24 = 88 bytes.
        let dir = fixture("litdata/batch2");
        let ds = open_with(open, &[&dir], &Columns::default()).unwrap();
        let units = &ds.store_as::<RecordFiles>().unwrap().catalogue().units;
        assert_eq!(units.len(), 1, "two small frames make one unit");
        assert_eq!((units[0].offset, units[0].len, units[0].samples, units[0].first), (88, 1021 - 88, 3, 0));
        let reader = ObjectReader::open(&Location::local(dir.join("chunk-0-0.bin")), &StorageOptions::default());
        let (offsets, frames) = read_framed(&reader.unwrap(), 3).unwrap();
        assert_eq!((offsets[0], frames.len(), frames[1].first, frames[1].items), (0, 2, 2, 1));
        assert_eq!(frames[1].offset, frames[0].offset + u64::from(frames[0].len));
        assert_eq!(frames.iter().map(|f| f.raw).sum::<u32>(), offsets[3]);
        // Sample-level zstd: units over the file's own table, bounds from the frames' content sizes.
        let ds = open_with(open, &[&fixture("litdata/sample")], &Columns::default()).unwrap();
        let units = &ds.store_as::<RecordFiles>().unwrap().catalogue().units;
        assert_eq!(units.iter().map(|u| (u.offset, u.samples)).collect::<Vec<_>>(), [(16, 2), (12, 1)]);
    }

    #[test]
    fn a_framed_chunk_that_lies_is_refused_or_costs_its_frame() {
        let file = "chunk-0-0.bin";
        // The directory (checked at open): magic, counts, offsets, frames.
        let frame = |j: usize, field: usize| 40 + 24 * j + 4 * field;
        for (at, value, what) in [
            (0usize, u32::from_le_bytes(*b"XDFZ"), "does not start with LDFZ01"),
            (8, 2, "version 2"),
            (12, 4, "holds 4 items where the index says 3"),
            (20, 3, "has 3 frames of 2 items"),
            (32, 0x100, "before the one before it"),
            (frame(1, 0), 1, "its frame 1 holds items 1+1 where 2+1 are due"),
            (frame(1, 2), 0, "its frame 1 lies at bytes 0+"),
            (frame(1, 3), 1, "its frame 1 lies at bytes"),
            (frame(0, 5), 7, "its frame 0 inflates to 7 bytes where its items' offsets span"),
        ] {
            let dir = copy_dir(&fixture("litdata/batch2"), "litdata-framed");
            set_word(&dir, file, at, value);
            let (path, message) = source_error(open_with(open, &[&dir], &Columns::default()));
            assert!(path == dir.join(file) && message.contains(what), "{at}: {message}");
        }
        // A length that runs past the file, a file cut short (with its index, or not, told).
        let dir = copy_dir(&fixture("litdata/batch2"), "litdata-framed");
        set_word(&dir, file, frame(1, 4), word(&dir, file, frame(1, 4)) + 1);
        assert!(source_error(open_with(open, &[&dir], &Columns::default())).1.contains("inside its 1021 bytes"));
        for index_told in [false, true] {
            let dir = copy_dir(&fixture("litdata/batch2"), "litdata-framed");
            let p = dir.join(file);
            std::fs::write(&p, &std::fs::read(&p).unwrap()[..1000]).unwrap();
            if index_told {
                edit_index(&dir, "\"chunk_bytes\": 1021", "\"chunk_bytes\": 1000");
            }
            let (_, message) = source_error(open_with(open, &[&dir], &Columns::default()));
            let what = if index_told { "inside its 1000 bytes" } else { "has 1000 bytes where the index says 1021" };
            assert!(message.contains(what), "{message}");
        }
        // A frame that inflates to one byte more or fewer than its row (and its items' offsets) say: its items
        // fail, the other frame's read.
        for delta in [1i64, -1] {
            let dir = copy_dir(&fixture("litdata/batch2"), "litdata-framed");
            let last = word(&dir, file, 24 + 12);
            set_word(&dir, file, 24 + 12, (i64::from(last) + delta) as u32);
            set_word(&dir, file, frame(1, 5), (i64::from(word(&dir, file, frame(1, 5))) + delta) as u32);
            let got = read_all(&open_with(open, &[&dir], &Columns::default()).unwrap());
            assert!(got[0].1.is_ok() && got[1].1.is_ok());
            let e = got[2].1.clone().unwrap_err();
            assert!(e.kind == ImageErrorKind::Corrupt && e.message.contains("chunk-0-0.bin#2: its frame 1"), "{e:?}");
            assert!(e.message.contains("inflates to"), "{e:?}");
        }
        // Frame bytes that are not zstd: that frame's items fail.
        let dir = copy_dir(&fixture("litdata/batch2"), "litdata-framed");
        set_word(&dir, file, 88, 0);
        let got = read_all(&open_with(open, &[&dir], &Columns::default()).unwrap());
        for (_, r) in &got[..2] {
            let e = r.clone().unwrap_err();
            assert!(e.kind == ImageErrorKind::Corrupt && e.message.contains("its frame 0"), "{e:?}");
        }
        assert_eq!(got[2].1.clone().unwrap().0, image(JPEGS[2]));
    }

    #[test]
    fn a_sample_level_chunk_that_lies_is_refused_or_costs_its_item() {
        let file = "chunk-0-0.bin";
        // Item 0's frame (at byte 16) declares two bytes of content size at 21 (value + 256): one more or fewer
        // than it inflates to fails that item alone.
        for delta in [1i32, -1] {
            let dir = copy_dir(&fixture("litdata/sample"), "litdata-sample");
            let p = dir.join(file);
            let mut b = std::fs::read(&p).unwrap();
            assert_eq!((&b[16..20], b[20]), (&[0x28, 0xb5, 0x2f, 0xfd][..], 0x60), "one frame, 2-byte size");
            b[21] = (i32::from(b[21]) + delta) as u8;
            std::fs::write(&p, &b).unwrap();
            let got = read_all(&open_with(open, &[&dir], &Columns::default()).unwrap());
            let e = got[0].1.clone().unwrap_err();
            assert!(
                e.kind == ImageErrorKind::Corrupt && e.message.contains("chunk-0-0.bin#0: its zstd frame"),
                "{e:?}"
            );
            assert!(got[1].1.is_ok() && got[2].1.is_ok());
        }
        // An item that is not a zstd frame, offsets that lie: refused at open.
        let second = word(&fixture("litdata/sample"), file, 8) as usize;
        for (at, value, what) in [(second, 0, "item 1: is not a zstd frame"), (4, 4, "inside its 16-byte header")] {
            let dir = copy_dir(&fixture("litdata/sample"), "litdata-sample");
            set_word(&dir, file, at, value);
            let (path, message) = source_error(open_with(open, &[&dir], &Columns::default()));
            assert!(path == dir.join(file) && message.contains(what), "{message}");
        }
        // A frame of another size in its place (offsets kept true): its declared size is what it is held to.
        let dir = copy_dir(&fixture("litdata/sample"), "litdata-sample");
        let p = dir.join("chunk-0-1.bin");
        let b = std::fs::read(&p).unwrap();
        let item = zstd::bulk::decompress(&b[12..], 1 << 20).unwrap();
        let mut e = zstd::bulk::Compressor::new(3).unwrap();
        e.include_contentsize(false).unwrap();
        let mut out = b[..12].to_vec();
        let frame = e.compress(&item).unwrap();
        out.extend_from_slice(&frame);
        out[8..12].copy_from_slice(&(12 + frame.len() as u32).to_le_bytes());
        std::fs::write(&p, &out).unwrap();
        edit_index(&dir, "\"chunk_bytes\": 394", &format!("\"chunk_bytes\": {}", out.len()));
        let (_, message) = source_error(open_with(open, &[&dir], &Columns::default()));
        assert!(message.contains("item 0: its zstd frame does not declare its size"), "{message}");
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
            which in 0usize..9,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..4), 1..4),
        ) {
            let (sub, file) = [
                ("plain", "index.json"), ("plain", "chunk-0-0.bin"), ("plain", "chunk-0-1.bin"),
                ("zstd", "index.json"), ("zstd", "chunk-0-0.zstd.bin"),
                ("batch2", "index.json"), ("batch2", "chunk-0-0.bin"), ("batch", "chunk-0-1.bin"),
                ("sample", "chunk-0-0.bin"),
            ][which];
            let dir = copy_dir(&fixture(&format!("litdata/{sub}")), "litdata-prop");
            let path = dir.join(file);
            let mut data = std::fs::read(&path).unwrap();
            mutate(&mut data, &edits);
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
