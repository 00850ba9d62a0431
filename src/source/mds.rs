//! source/mds — Mosaic's MDS datasets (mosaicml-streaming's `MDSWriter`) as a record source (kind "mds"): a
//! folder or URL prefix holding `index.json` and its shards. docs/design/formats-research.md §3 holds the facts
//! this file follows.
//!
//! ```text
//! index.json: {"version": 2, "shards": [{"version": 2, "format": "mds", "samples": n,
//!     "raw_data": {"basename", "bytes"}, "zip_data": null | {"basename", "bytes"}, "compression": null | "zstd[:N]"
//!     | "snappy" | "gz[:N]" | ..., "column_names": [...], "column_encodings": [...], "column_sizes": [...]}, ...]}
//! shard (raw_data.bytes long; compressed whole when zip_data is given):
//!   u32 n · u32 offsets[n + 1] (from the shard's start) · the shard's config JSON · samples
//! sample: u32 size per column whose column_sizes entry is null, then every column's bytes, in column order
//!   (the writer's: names sorted)
//! ```
//!
//! # A sample
//! Sample `k` of shard file `f` is named `f#k`. Its image is the column `image_column` (default: the one `jpeg`,
//! `png` or `pil` column, else the column `image`): `jpeg`/`png`/`bytes` are encoded images, `pil` raw pixels of
//! mode L or RGB (others: a bad sample, `Unsupported`). Its label: the int column `label_column` (default
//! `label`, when there is one). Extras: by default every other column whose encoding is one value (`str`,
//! `bytes`, `json`, `int`, `intN`, `uintN`, `floatN`, `str_int`, `str_float`, `str_decimal`); `str`/`json`/
//! `str_decimal` are `Text`, `bytes` (and any encoding named that is none of these) `Bytes`, integers `Int`
//! (a `uint64` above 2^63 - 1 is a bad sample), floats `Float`. `pkl` is never read (refused when named).
//!
//! # Untrusted bytes
//! The index is checked whole at open (`SourceError` naming it and the shard): version 2, format mds, a known
//! compression (`br` and `bz2` refused by name), a relative basename without `..`, column lists of one length
//! and the first shard's names and encodings, known encodings whose fixed sizes are theirs, samples at most
//! 2^32 - 1 together. An uncompressed shard's file must be `raw_data.bytes` long and its offset table is read and
//! checked at open (count = samples, first offset past the table, non-decreasing, last = the file's size); a
//! compressed shard's file must be `zip_data.bytes` long, is read whole, inflated to exactly `raw_data.bytes`
//! (records.rs) and its table checked when read. Per sample: its header of sizes fits, the sizes add up to the
//! sample's length exactly, `pil` cells are checked (shard_index.rs); a sample that fails is one bad sample.

use super::packed::DEFAULT_BLOCK_BYTES;
use super::packed_json::Json;
use super::records::{
    Catalogue, Codec, Columns, EXTRAS, IMAGE_COLUMN, Inflate, LABEL_COLUMN, LabelColumn, RecordFormat, Unit,
    UnitBuilder, Value, table_bytes,
};
use super::shard_index::{self, Fields, MESSAGE_BYTES, check_name, check_table, child, cut_message};
use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use crate::storage::{Location, ObjectReader, StorageOptions};
use bytes::Bytes;
use std::path::PathBuf;

/// Most columns a shard may have.
pub const MAX_COLUMNS: usize = 4096;
/// Largest shard (its offsets are u32).
pub const MAX_SHARD_BYTES: u64 = u32::MAX as u64;

/// A column's encoding, as far as a sample reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Enc {
    /// Raw bytes.
    Bytes,
    /// UTF-8 text (`str`, `json`, `str_decimal`).
    Text,
    /// Decimal text of an integer.
    StrInt,
    /// Decimal text of a float.
    StrFloat,
    /// A little-endian signed integer of this many bytes (`int` is 8).
    Int(u8),
    /// A little-endian unsigned integer of this many bytes.
    UInt(u8),
    /// An IEEE float of this many bytes (2, 4, 8).
    Float(u8),
    /// An encoded image (`jpeg`, `png`).
    Image,
    /// A `pil` cell.
    Pil,
    /// Python pickle: never read.
    Pickle,
    /// Known, not one value (`ndarray…`, `list[…]`, `jpeg_array`): read as bytes when named.
    Other,
}

impl Enc {
    /// The encoding of a `column_encodings` name (None: not one MDS writes).
    fn of(name: &str) -> Option<Enc> {
        let base = name.split(':').next().unwrap_or("");
        Some(match base {
            "bytes" => Enc::Bytes,
            "str" | "json" | "str_decimal" => Enc::Text,
            "str_int" => Enc::StrInt,
            "str_float" => Enc::StrFloat,
            "int" | "int64" => Enc::Int(8),
            "int8" => Enc::Int(1),
            "int16" => Enc::Int(2),
            "int32" => Enc::Int(4),
            "uint8" => Enc::UInt(1),
            "uint16" => Enc::UInt(2),
            "uint32" => Enc::UInt(4),
            "uint64" => Enc::UInt(8),
            "float16" => Enc::Float(2),
            "float32" => Enc::Float(4),
            "float64" => Enc::Float(8),
            "jpeg" | "png" => Enc::Image,
            "pil" => Enc::Pil,
            "pkl" => Enc::Pickle,
            "ndarray" | "list[pil]" | "list[jpeg]" | "list[png]" | "jpeg_array" => Enc::Other,
            _ => return None,
        })
        .filter(|e| base == name || matches!(e, Enc::Other))
    }

    /// Its fixed size (None: variable, a u32 size in the sample's header).
    fn fixed(self) -> Option<u64> {
        match self {
            Enc::Int(n) | Enc::UInt(n) | Enc::Float(n) => Some(u64::from(n)),
            _ => None,
        }
    }

    /// One value (what extras take by default).
    fn is_value(self) -> bool {
        !matches!(self, Enc::Image | Enc::Pil | Enc::Pickle | Enc::Other)
    }

    /// An integer (what a label may be).
    fn is_int(self) -> bool {
        matches!(self, Enc::Int(_) | Enc::UInt(_))
    }
}

/// A column of the dataset.
#[derive(Debug, Clone, PartialEq)]
struct Column {
    name: String,
    encoding: String,
    enc: Enc,
    /// Fixed size in bytes, or None (variable).
    size: Option<u64>,
}

/// One shard as the index gives it.
#[derive(Debug)]
struct Shard {
    samples: u64,
    /// The file read: zip_data's when compressed, else raw_data's.
    basename: String,
    /// Its size the index declares.
    file_bytes: u64,
    /// raw_data.bytes.
    raw_bytes: u64,
    codec: Option<Codec>,
}

/// The MDS format of one source.
#[derive(Debug)]
struct MdsFormat {
    /// Per shard file: its name and, uncompressed, its offset table.
    shards: Vec<(PathBuf, Option<Vec<u32>>)>,
    columns: Vec<Column>,
    image: usize,
    label: Option<usize>,
    extras: Vec<usize>,
}

impl MdsFormat {
    /// One sample's bytes into `out`.
    fn sample(&self, bytes: &[u8], out: &mut UnitBuilder) -> std::result::Result<(), ImageError> {
        let corrupt = |m: String| ImageError::new(ImageErrorKind::Corrupt, m);
        let vars = self.columns.iter().filter(|c| c.size.is_none()).count();
        let Some((head, mut body)) = bytes.split_at_checked(4 * vars) else {
            return Err(corrupt(format!("a sample of {} bytes has no room for its {vars} sizes", bytes.len())));
        };
        let mut sizes = head.chunks_exact(4).map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
        let mut cells: Vec<&[u8]> = Vec::with_capacity(self.columns.len());
        let mut total = 0u64;
        for c in &self.columns {
            let n = c.size.or_else(|| sizes.next()).unwrap_or(0);
            total += n;
            let Some((cell, rest)) = usize::try_from(n).ok().and_then(|n| body.split_at_checked(n)) else {
                return Err(corrupt(format!("its column {:?} of {n} bytes runs past the sample's end", c.name)));
            };
            cells.push(cell);
            body = rest;
        }
        if !body.is_empty() {
            return Err(corrupt(format!(
                "its columns take {} bytes of a sample of {} bytes",
                total + 4 * vars as u64,
                bytes.len()
            )));
        }
        let label = match self.label {
            None => -1,
            Some(k) => match value(&self.columns[k], cells[k])? {
                Value::Int(v) => v,
                _ => return Err(corrupt(format!("its label column {:?} is not an integer", self.columns[k].name))),
            },
        };
        let extras = self
            .extras
            .iter()
            .map(|&k| value(&self.columns[k], cells[k]))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let image = &self.columns[self.image];
        match image.enc {
            Enc::Pil => {
                let (raw, shape) = shard_index::pil(cells[self.image])?;
                out.pixels(raw, shape, label, &extras)
            }
            _ => out.image(cells[self.image], label, &extras),
        }
    }
}

/// A cell of `c` as one value (module docs).
fn value(c: &Column, cell: &[u8]) -> std::result::Result<Value, ImageError> {
    let bad = |what: &str| {
        ImageError::new(ImageErrorKind::Corrupt, format!("its column {:?} ({}) {what}", c.name, c.encoding))
    };
    let text = || std::str::from_utf8(cell).map_err(|_| bad("is not UTF-8"));
    let le = |n: usize| {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&cell[..n]);
        u64::from_le_bytes(b)
    };
    Ok(match c.enc {
        Enc::Text => Value::Text(text()?.to_string()),
        Enc::StrInt => Value::Int(text()?.trim().parse().map_err(|_| bad("is not an integer"))?),
        Enc::StrFloat => Value::Float(text()?.trim().parse().map_err(|_| bad("is not a number"))?),
        Enc::Int(n) => {
            let n = usize::from(n);
            let shift = 64 - 8 * n as u32;
            Value::Int(((le(n) << shift) as i64) >> shift)
        }
        Enc::UInt(n) => Value::Int(i64::try_from(le(usize::from(n))).map_err(|_| bad("is above 2**63 - 1"))?),
        Enc::Float(2) => Value::Float(half::f16::from_bits(le(2) as u16).to_f64()),
        Enc::Float(4) => Value::Float(f64::from(f32::from_bits(le(4) as u32))),
        Enc::Float(_) => Value::Float(f64::from_bits(le(8))),
        Enc::Pickle => return Err(bad("is a pickle, never read")),
        Enc::Bytes | Enc::Image | Enc::Pil | Enc::Other => Value::Bytes(cell.to_vec()),
    })
}

impl RecordFormat for MdsFormat {
    fn kind(&self) -> &'static str {
        "mds"
    }

    fn decode_unit(&self, unit: &Unit, bytes: &Bytes, out: &mut UnitBuilder) -> std::result::Result<(), ImageError> {
        let (path, table) =
            self.shards.get(unit.file as usize).ok_or_else(|| ImageError::new(ImageErrorKind::Corrupt, "no shard"))?;
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
            let name = || format!("{}#{n}", path.display());
            let range = usize::try_from(n).ok().and_then(|n| Some((*offsets.get(n)?, *offsets.get(n + 1)?)));
            let slice = range.and_then(|(a, b)| {
                let a = usize::try_from(u64::from(a).checked_sub(base)?).ok()?;
                let b = usize::try_from(u64::from(b).checked_sub(base)?).ok()?;
                bytes.get(a..b)
            });
            let Some(sample) = slice else {
                return Err(corrupt(format!("sample {n} lies outside its unit")));
            };
            if let Err(e) = self.sample(sample, out) {
                out.bad(ImageError::new(e.kind, cut_message(format!("{}: {}", name(), e.message))))?;
            }
        }
        Ok(())
    }
}

/// The codec of a shard's `compression` (None: uncompressed).
fn codec(compression: Option<&str>) -> std::result::Result<Option<Codec>, String> {
    let Some(c) = compression else { return Ok(None) };
    match c.split(':').next().unwrap_or("") {
        "zstd" => Ok(Some(Codec::Zstd)),
        "snappy" => Ok(Some(Codec::Snappy)),
        "gz" => Ok(Some(Codec::Gzip)),
        "br" | "bz2" => Err(format!("the compression {c:?} is not read (zstd, snappy and gz are): decompress it")),
        _ => Err(format!("an unknown compression {c:?}")),
    }
}

/// The shards and columns of an index (module docs: what is checked).
fn shards_of(json: &Json, f: &Fields<'_>) -> Result<(Vec<Shard>, Vec<Column>)> {
    if f.uint(f.get(json, "version", "the index")?, u64::MAX, "its version")? != 2 {
        return Err(f.error("the index", "is not version 2"));
    }
    let list = f.array(f.get(json, "shards", "the index")?, "its shards")?;
    let mut shards = Vec::new();
    let mut columns: Option<Vec<Column>> = None;
    let mut total = 0u64;
    for (k, s) in list.iter().enumerate() {
        let at = format!("shard {k}");
        let at = at.as_str();
        if f.uint(f.get(s, "version", at)?, u64::MAX, at)? != 2 {
            return Err(f.error(at, "is not version 2"));
        }
        let format = f.str(f.get(s, "format", at)?, at)?;
        if format != "mds" {
            return Err(f.error(at, format!("has the format {format:?}, not \"mds\"")));
        }
        let samples = f.uint(f.get(s, "samples", at)?, u64::from(u32::MAX), at)?;
        total += samples;
        if total >= u64::from(u32::MAX) {
            return Err(f.error(at, "brings the samples to 2**32 or more"));
        }
        let codec = codec(f.opt_str(s.get("compression"), at)?).map_err(|m| f.error(at, m))?;
        let raw = f.get(s, "raw_data", at)?;
        let raw_bytes = f.uint(f.get(raw, "bytes", at)?, MAX_SHARD_BYTES, at)?;
        let file = match (codec, s.get("zip_data")) {
            (None, _) => raw,
            (Some(_), Some(z @ Json::Object(_))) => z,
            (Some(_), _) => return Err(f.error(at, "is compressed but has no zip_data")),
        };
        let file_bytes = f.uint(f.get(file, "bytes", at)?, u64::MAX, at)?;
        let basename = match f.get(file, "basename", at)? {
            Json::Str(b) => check_name(b).map(str::to_string),
            _ => None,
        }
        .ok_or_else(|| f.error(at, "has a basename that is not a relative name without \"..\""))?;
        let names = f.array(f.get(s, "column_names", at)?, at)?;
        let encodings = f.array(f.get(s, "column_encodings", at)?, at)?;
        let sizes = f.array(f.get(s, "column_sizes", at)?, at)?;
        if names.len() != encodings.len() || names.len() != sizes.len() || names.is_empty() || names.len() > MAX_COLUMNS
        {
            return Err(f.error(
                at,
                format!("has {} column names, {} encodings, {} sizes", names.len(), encodings.len(), sizes.len()),
            ));
        }
        let mut cols = Vec::new();
        for ((n, e), z) in names.iter().zip(encodings).zip(sizes) {
            let name = f.str(n, at)?.to_string();
            let encoding = f.str(e, at)?.to_string();
            let enc = Enc::of(&encoding)
                .ok_or_else(|| f.error(at, format!("column {name:?} has an unknown encoding {encoding:?}")))?;
            let size = match z {
                Json::Null => None,
                z => Some(f.uint(z, MAX_SHARD_BYTES, at)?),
            };
            let fits = match (enc.fixed(), size) {
                (Some(a), Some(b)) => a == b,
                (Some(_), None) => false,
                (None, None) => true,
                (None, Some(_)) => matches!(enc, Enc::Other),
            };
            if !fits {
                return Err(f.error(at, format!("column {name:?} ({encoding}) has the size {size:?}")));
            }
            cols.push(Column { name, encoding, enc, size });
        }
        match &columns {
            None => columns = Some(cols),
            Some(c) if *c == cols => {}
            Some(_) => return Err(f.error(at, "has other columns than shard 0")),
        }
        shards.push(Shard { samples, basename, file_bytes, raw_bytes, codec });
    }
    let columns = columns.ok_or_else(|| f.error("the index", "has no shards"))?;
    Ok((shards, columns))
}

/// Which columns make a sample: (image, label, extras), by index into `columns`.
fn choose(request: &Columns, columns: &[Column], at: &str) -> Result<(usize, Option<usize>, Vec<usize>)> {
    let find = |name: &str| columns.iter().position(|c| c.name == name);
    let listing = || columns.iter().map(|c| format!("{:?} ({})", c.name, c.encoding)).collect::<Vec<_>>().join(", ");
    let is_image = |c: &Column| matches!(c.enc, Enc::Image | Enc::Pil | Enc::Bytes);
    let image = match &request.image {
        Some(name) => find(name).filter(|&k| is_image(&columns[k])).ok_or_else(|| {
            TrdataError::config(
                IMAGE_COLUMN,
                format!("{name:?} is not a jpeg, png, pil or bytes column of {at} (its columns: {})", listing()),
            )
        })?,
        None => {
            let images: Vec<usize> =
                (0..columns.len()).filter(|&k| matches!(columns[k].enc, Enc::Image | Enc::Pil)).collect();
            match images[..] {
                [k] => k,
                _ => find("image").filter(|&k| is_image(&columns[k])).ok_or_else(|| {
                    TrdataError::config(
                        IMAGE_COLUMN,
                        format!("{at} has no single jpeg, png or pil column, nor an \"image\" column: name it (its columns: {})", listing()),
                    )
                })?,
            }
        }
    };
    let label = match &request.label {
        LabelColumn::Absent => None,
        LabelColumn::Default => find("label").filter(|&k| columns[k].enc.is_int()),
        LabelColumn::Named(name) => Some(find(name).filter(|&k| columns[k].enc.is_int()).ok_or_else(|| {
            TrdataError::config(
                LABEL_COLUMN,
                format!("{name:?} is not an integer column of {at} (its columns: {})", listing()),
            )
        })?),
    };
    let extras = match &request.extras {
        None => (0..columns.len()).filter(|&k| k != image && Some(k) != label && columns[k].enc.is_value()).collect(),
        Some(names) => names
            .iter()
            .map(|name| match find(name) {
                Some(k) if columns[k].enc != Enc::Pickle => Ok(k),
                Some(_) => {
                    Err(TrdataError::config(EXTRAS, format!("{name:?} of {at} is a pickle (pkl), which is never read")))
                }
                None => Err(TrdataError::config(
                    EXTRAS,
                    format!("{name:?} is not a column of {at} (its columns: {})", listing()),
                )),
            })
            .collect::<Result<Vec<_>>>()?,
    };
    Ok((image, label, extras))
}

/// The most bytes one sample of `len` bytes adds to its unit's decoded block: its image and extras (at most its
/// bytes, twice when the image is an extra too, plus 9 bytes a column), a bad sample's message, its table row.
fn sample_bound(len: u64, columns: usize, image_in_extras: bool) -> u64 {
    let copies = if image_in_extras { 2 } else { 1 };
    copies * len + 9 * columns as u64 + MESSAGE_BYTES + table_bytes(1) - table_bytes(0)
}

/// Open an MDS dataset (module docs): `files[0]` is its folder or URL prefix, or its `index.json`.
pub fn open(
    files: &[Location],
    storage: &StorageOptions,
    columns: &Columns,
) -> Result<(Catalogue, Box<dyn RecordFormat>)> {
    let first = files.first().ok_or_else(|| TrdataError::config("paths", "an MDS dataset needs its folder"))?;
    let (index_at, root) = shard_index::index_location(first);
    let (index, json) = shard_index::read_index(&index_at, storage)?;
    let f = Fields { index: &index };
    let (shards, cols) = shards_of(&json, &f)?;
    let at = index.name().display().to_string();
    let (image, label, extras) = choose(columns, &cols, &at)?;
    let dup = extras.contains(&image);
    let mut readers = Vec::new();
    let mut units = Vec::new();
    let mut tables = Vec::new();
    for (k, s) in shards.iter().enumerate() {
        let reader = ObjectReader::open(&child(&root, &s.basename), storage)?;
        if reader.size() != s.file_bytes {
            return Err(reader.source_error(format!(
                "has {} bytes where the index says {}",
                reader.size(),
                s.file_bytes
            )));
        }
        let file = k as u32;
        if s.samples == 0 {
            tables.push((reader.name().to_path_buf(), None));
            readers.push(reader);
            continue;
        }
        let header = 4 * (s.samples + 2);
        match s.codec {
            Some(codec) => {
                let bound = s.raw_bytes * if dup { 2 } else { 1 }
                    + s.samples * (sample_bound(0, cols.len(), false) - (table_bytes(1) - table_bytes(0)))
                    + table_bytes(s.samples as u32);
                units.push(Unit {
                    file,
                    offset: 0,
                    len: s.file_bytes,
                    samples: s.samples as u32,
                    first: 0,
                    inflate: Some(Inflate { codec, raw_len: s.raw_bytes }),
                    decoded_bytes: bound,
                    tag: k as u64,
                });
                tables.push((reader.name().to_path_buf(), None));
            }
            None => {
                if header > s.raw_bytes {
                    return Err(reader.source_error(format!(
                        "{} samples need {header} bytes of table; the shard has {}",
                        s.samples, s.raw_bytes
                    )));
                }
                let head = reader.read_growing(0, header).map_err(|e| reader.source_error(e.message))?;
                let offsets = check_table(&head, s.samples, header, s.raw_bytes).map_err(|m| reader.source_error(m))?;
                let mut i = 0usize;
                let n = s.samples as usize;
                while i < n {
                    let start = i;
                    let mut bound = table_bytes(0);
                    while i < n {
                        let b = sample_bound(u64::from(offsets[i + 1] - offsets[i]), cols.len(), dup);
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
                tables.push((reader.name().to_path_buf(), Some(offsets)));
            }
        }
        readers.push(reader);
    }
    let fields = extras.iter().map(|&k| cols[k].name.clone()).collect();
    let format = MdsFormat { shards: tables, columns: cols, image, label, extras };
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
            Value::Text(format!("{{\"k\": {k}}}")),
            Value::Text(JPEGS[k].into()),
            Value::Bytes(vec![k as u8; k]),
            Value::Float(k as f64 / 4.0),
            Value::Int(200 + k as i64),
        ]
    }

    fn source_error(r: Result<crate::source::Dataset>) -> (PathBuf, String) {
        match r {
            Err(TrdataError::Source { path, message }) => (path, message),
            other => panic!("{other:?}"),
        }
    }

    /// `dir/index.json` with `from` replaced by `to` (which must be there).
    fn edit_index(dir: &Path, from: &str, to: &str) {
        let p = dir.join("index.json");
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains(from), "{from}");
        std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    }

    #[test]
    fn the_fixtures_read_as_the_writer_wrote_them() {
        for (sub, shards) in [
            ("plain", ["shard.00000.mds", "shard.00001.mds", "shard.00001.mds"]),
            ("zstd", ["shard.00000.mds.zstd"; 3]),
            ("gz", ["shard.00000.mds.gz"; 3]),
        ] {
            let dir = fixture(&format!("mds/{sub}"));
            for path in [dir.clone(), dir.join("index.json")] {
                let ds = open_with(open, &[&path], &Columns::default()).unwrap();
                let store = ds.store_as::<RecordFiles>().unwrap();
                assert_eq!(store.catalogue().fields, ["meta", "name", "raw", "score", "small"]);
                let got = read_all(&ds);
                assert_eq!(got.len(), 3, "{sub}");
                for (k, (name, r)) in got.into_iter().enumerate() {
                    let first = if sub == "plain" && k == 2 {
                        1
                    } else if sub == "plain" {
                        0
                    } else {
                        k
                    };
                    assert_eq!(short(&name), format!("{}#{first}", shards[k]));
                    let (bytes, shape, label, extras) = r.unwrap();
                    assert_eq!((bytes, shape, label), (image(JPEGS[k]), None, 10 + k as i64), "{sub} {k}");
                    assert_eq!(extras, expected(k), "{sub} {k}");
                }
            }
        }
        // Raw pixels of modes RGB and L.
        let ds = open_with(open, &[&fixture("mds/pil")], &Columns::default()).unwrap();
        let got = read_all(&ds);
        assert_eq!(got[0].1.clone().unwrap(), ((0..18).collect(), Some((2, 3, 3)), 0, vec![]));
        assert_eq!(got[1].1.clone().unwrap(), (vec![1, 2, 3, 4], Some((2, 2, 1)), 1, vec![]));

        // Named columns.
        let cols = Columns {
            image: Some("image".into()),
            label: LabelColumn::Named("small".into()),
            extras: Some(vec!["label".into()]),
        };
        let got = read_all(&open_with(open, &[&fixture("mds/plain")], &cols).unwrap());
        assert_eq!(got[1].1.clone().unwrap().2..got[1].1.clone().unwrap().2 + 1, 201..202);
        assert_eq!(got[1].1.clone().unwrap().3, vec![Value::Int(11)]);
        let config = |cols: Columns, parameter: &str| match open_with(open, &[&fixture("mds/plain")], &cols) {
            Err(TrdataError::Config { parameter: p, message }) => {
                assert_eq!(p, parameter, "{message}");
                assert!(message.contains("index.json"), "{message}");
            }
            other => panic!("{other:?}"),
        };
        config(Columns { image: Some("label".into()), ..Columns::default() }, IMAGE_COLUMN);
        config(Columns { label: LabelColumn::Named("name".into()), ..Columns::default() }, LABEL_COLUMN);
        config(Columns { extras: Some(vec!["nope".into()]), ..Columns::default() }, EXTRAS);
    }

    #[test]
    fn an_index_that_lies_is_refused_naming_the_shard() {
        for (from, to, what) in [
            ("\"samples\": 1,", "\"samples\": 2,", "holds 1 samples where the index says 2"),
            ("\"bytes\": 989", "\"bytes\": 988", "has 989 bytes where the index says 988"),
            ("\"basename\": \"shard.00000.mds\"", "\"basename\": \"../shard.00000.mds\"", "shard 0: has a basename"),
            ("\"basename\": \"shard.00001.mds\"", "\"basename\": \"/etc/passwd\"", "shard 1: has a basename"),
            ("[\"jpeg\", \"int\"", "[\"jpeg\", \"int42\"", "unknown encoding \"int42\""),
            ("[null, 8, null", "[null, 4, null", "column \"label\" (int) has the size Some(4)"),
            ("\"compression\": null", "\"compression\": \"br\"", "\"br\" is not read"),
            ("\"format\": \"mds\"", "\"format\": \"csv\"", "not \"mds\""),
            ("\"samples\": 1,", "\"samples\": 4294967295,", "2**32"),
            ("\"column_names\": [\"image\",", "\"column_names\": [", "6 column names, 7 encodings"),
            ("\"version\": 2}", "\"version\": 3}", "not version 2"),
        ] {
            let dir = copy_dir(&fixture("mds/plain"), "mds-lies");
            edit_index(&dir, from, to);
            let (_, message) = source_error(open_with(open, &[&dir], &Columns::default()));
            assert!(message.contains(what), "{to}: {message}");
        }
        // Not JSON; too deep.
        let dir = copy_dir(&fixture("mds/plain"), "mds-lies");
        std::fs::write(dir.join("index.json"), "{\"version\": 2, \"shards\": [").unwrap();
        let (path, message) = source_error(open_with(open, &[&dir], &Columns::default()));
        assert!(path.ends_with("index.json") && message.contains("index.json"), "{message}");
    }

    #[test]
    fn a_shard_that_lies_is_refused_or_costs_its_samples() {
        // Its offset table: a first offset inside the header, offsets going back, a last one short of the end.
        for (word, value, what) in
            [(1usize, 4u32, "inside its"), (2, 0, "before the one before"), (2, 900, "end at byte 900")]
        {
            let dir = copy_dir(&fixture("mds/plain"), "mds-table");
            let p = dir.join("shard.00000.mds");
            let mut b = std::fs::read(&p).unwrap();
            b[4 * word..4 * word + 4].copy_from_slice(&value.to_le_bytes());
            std::fs::write(&p, &b).unwrap();
            let (path, message) = source_error(open_with(open, &[&dir], &Columns::default()));
            assert!(path == p && message.contains(what), "{message}");
        }
        // A sample whose sizes do not add up: one bad sample, the others read.
        let dir = copy_dir(&fixture("mds/plain"), "mds-sample");
        let p = dir.join("shard.00001.mds");
        let mut b = std::fs::read(&p).unwrap();
        let first = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
        b[first] = b[first].wrapping_add(1); // the image's size
        std::fs::write(&p, &b).unwrap();
        let got = read_all(&open_with(open, &[&dir], &Columns::default()).unwrap());
        assert!(got[0].1.is_ok() && got[2].1.is_ok());
        let e = got[1].1.clone().unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::Corrupt);
        assert!(e.message.contains("shard.00001.mds#0"), "{e:?}");

        // A compressed shard whose index says one byte more or fewer than it inflates to: every sample fails.
        for raw in ["2067", "2069"] {
            let dir = copy_dir(&fixture("mds/zstd"), "mds-zstd");
            edit_index(&dir, "\"bytes\": 2068", &format!("\"bytes\": {raw}"));
            let got = read_all(&open_with(open, &[&dir], &Columns::default()).unwrap());
            for (_, r) in got {
                let e = r.unwrap_err();
                assert!(e.kind == ImageErrorKind::Corrupt && e.message.contains("inflates to"), "{e:?}");
            }
        }
        // A pil cell of another mode: that sample, Unsupported.
        let dir = copy_dir(&fixture("mds/pil"), "mds-pil");
        let p = dir.join("shard.00000.mds");
        let b = std::fs::read(&p).unwrap();
        let at = b.windows(3).position(|w| w == b"RGB").unwrap();
        // (the shard's config JSON has no "RGB": the first is the cell's mode)
        let mut b2 = b.clone();
        b2[at..at + 3].copy_from_slice(b"HSV");
        std::fs::write(&p, &b2).unwrap();
        let got = read_all(&open_with(open, &[&dir], &Columns::default()).unwrap());
        assert_eq!(got[0].1.clone().unwrap_err().kind, ImageErrorKind::Unsupported);
        assert!(got[1].1.is_ok());
    }

    fn cases(default: u32) -> u32 {
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(300), ..ProptestConfig::default() })]

        /// The fixtures with random edits (bytes replaced, inserted, cut, bits flipped; in the index or a
        /// shard, plain, zstd or pil): a typed error at open or every sample read or failed with a typed error.
        #[test]
        fn edited_fixtures_never_panic(
            which in 0usize..6,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..4), 1..4),
        ) {
            let (sub, file) = [
                ("plain", "index.json"), ("plain", "shard.00000.mds"), ("plain", "shard.00001.mds"),
                ("zstd", "index.json"), ("zstd", "shard.00000.mds.zstd"), ("pil", "shard.00000.mds"),
            ][which];
            let dir = copy_dir(&fixture(&format!("mds/{sub}")), "mds-prop");
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
