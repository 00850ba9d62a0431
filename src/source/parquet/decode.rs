//! The decoding of one unit (a row group's chosen chunks, module docs of parquet/): our walk of each chunk's page
//! headers, then the crate's page and column readers over the unit's bytes, then one sample per row.

use super::{EXTRA_BYTES_PER_ROW, Kind, Leaf, MAX_PAGE_BYTES, Parquet, thrift};
use crate::error::{ImageError, ImageErrorKind};
use crate::source::records::{RecordFormat, Unit, UnitBuilder, Value};
use bytes::{Buf, Bytes};
use parquet::column::reader::{ColumnReader, ColumnReaderImpl, get_column_reader};
use parquet::data_type::{ByteArray, DataType, FixedLenByteArray};
use parquet::file::metadata::{ColumnChunkMetaData, RowGroupMetaData};
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::serialized_reader::SerializedPageReader;
use std::sync::Arc;

/// The unit's bytes as the crate's [`ChunkReader`]: file offsets `offset..offset + bytes.len()`, anything
/// outside an error.
#[derive(Debug)]
pub(super) struct Span {
    pub(super) bytes: Bytes,
    pub(super) offset: u64,
}

impl Span {
    fn range(&self, start: u64, len: u64) -> parquet::errors::Result<std::ops::Range<usize>> {
        let end = start.checked_add(len);
        match (start.checked_sub(self.offset), end.and_then(|e| e.checked_sub(self.offset))) {
            (Some(a), Some(b)) if b <= self.bytes.len() as u64 => Ok(a as usize..b as usize),
            _ => Err(parquet::errors::ParquetError::General(format!(
                "bytes {start}..+{len} lie outside the row group's span {}..+{}",
                self.offset,
                self.bytes.len()
            ))),
        }
    }
}

impl Length for Span {
    fn len(&self) -> u64 {
        self.offset + self.bytes.len() as u64
    }
}

impl ChunkReader for Span {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let r = self.range(start, 0)?;
        Ok(self.bytes.slice(r.start..).reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        Ok(self.bytes.slice(self.range(start, length as u64)?))
    }
}

/// One leaf's values for a row group: def and rep levels (empty when its max is 0) and the non-null values.
#[derive(Debug)]
struct LeafData {
    defs: Vec<i16>,
    reps: Vec<i16>,
    vals: Vals,
}

/// Typed values.
#[derive(Debug)]
enum Vals {
    Bool(Vec<bool>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bytes(Vec<ByteArray>),
    Fixed(Vec<FixedLenByteArray>),
}

impl Vals {
    fn len(&self) -> usize {
        match self {
            Vals::Bool(v) => v.len(),
            Vals::I32(v) => v.len(),
            Vals::I64(v) => v.len(),
            Vals::F32(v) => v.len(),
            Vals::F64(v) => v.len(),
            Vals::Bytes(v) => v.len(),
            Vals::Fixed(v) => v.len(),
        }
    }

    /// Value `k` as a [`Value`] of `kind` (`k` < len), or why the sample is bad.
    fn value(&self, k: usize, kind: Kind) -> std::result::Result<Value, String> {
        if k >= self.len() {
            return Err(format!("has no value {k} (it read {})", self.len()));
        }
        Ok(match self {
            Vals::Bool(v) => Value::Bool(v[k]),
            Vals::I32(v) if matches!(kind, Kind::Int { unsigned32: true }) => Value::Int(i64::from(v[k] as u32)),
            Vals::I32(v) => Value::Int(i64::from(v[k])),
            Vals::I64(v) => Value::Int(v[k]),
            Vals::F32(v) => Value::Float(f64::from(v[k])),
            Vals::F64(v) => Value::Float(v[k]),
            Vals::Bytes(v) if kind == Kind::Text => Value::Text(
                std::str::from_utf8(v[k].data()).map_err(|_| "holds text that is not UTF-8".to_string())?.to_string(),
            ),
            Vals::Bytes(v) => Value::Bytes(v[k].data().to_vec()),
            Vals::Fixed(v) => Value::Bytes(v[k].data().to_vec()),
        })
    }

    /// Value `k` as an integer (labels).
    fn int(&self, k: usize) -> i64 {
        match self {
            Vals::I32(v) => v.get(k).map_or(-1, |&x| i64::from(x)),
            Vals::I64(v) => v.get(k).copied().unwrap_or(-1),
            _ => -1,
        }
    }
}

/// Def levels, rep levels, values and the number of records read.
type Levels<V> = (Vec<i16>, Vec<i16>, Vec<V>, usize);

/// Read every record of one typed leaf: `rows` records, and nothing after them.
fn read_typed<T: DataType>(
    mut r: ColumnReaderImpl<T>,
    rows: usize,
    leaf: &Leaf,
) -> parquet::errors::Result<Levels<T::T>> {
    let (mut defs, mut reps, mut vals) = (Vec::new(), Vec::new(), Vec::new());
    let (want_def, want_rep) = (leaf.max_def > 0, leaf.max_rep > 0);
    let mut got = 0usize;
    loop {
        let ask = if got < rows { rows - got } else { 1 }; // past the rows: one more, which must not exist
        let (n, _, _) = r.read_records(
            ask,
            if want_def { Some(&mut defs) } else { None },
            if want_rep { Some(&mut reps) } else { None },
            &mut vals,
        )?;
        if n == 0 || got >= rows {
            got += n;
            break;
        }
        got += n;
    }
    Ok((defs, reps, vals, got))
}

impl Parquet {
    /// Walk chunk `cc`'s page headers in the unit's bytes (module docs).
    pub(super) fn check_pages(span: &Span, cc: &ColumnChunkMetaData, rows: u64) -> std::result::Result<(), ImageError> {
        let corrupt = |m: String| ImageError::new(ImageErrorKind::Corrupt, m);
        let (start, len) = cc.byte_range(); // checked at open
        let r = span.range(start, len).map_err(|e| corrupt(e.to_string()))?;
        let chunk = &span.bytes[r];
        let declared = cc.uncompressed_size().max(0) as u64;
        let max_values = rows.saturating_mul(EXTRA_BYTES_PER_ROW).saturating_add(declared);
        let (mut at, mut raw, mut values) = (0usize, 0u64, 0u64);
        while at < chunk.len() {
            let h = thrift::page_header(&chunk[at..]).map_err(|e| corrupt(format!("page header at byte {at}: {e}")))?;
            if !matches!(
                h.page_type,
                thrift::DATA_PAGE | thrift::INDEX_PAGE | thrift::DICTIONARY_PAGE | thrift::DATA_PAGE_V2
            ) {
                return Err(corrupt(format!("a page of unknown type {} at byte {at}", h.page_type)));
            }
            if h.compressed < 0 || h.uncompressed < 0 || h.num_values < 0 {
                return Err(corrupt(format!(
                    "a page at byte {at} with negative sizes ({} compressed, {} uncompressed, {} values)",
                    h.compressed, h.uncompressed, h.num_values
                )));
            }
            let end = (at as u64).saturating_add(h.header_len).saturating_add(h.compressed as u64);
            if end > chunk.len() as u64 {
                return Err(corrupt(format!(
                    "a page at byte {at} of {} bytes runs past the chunk's {} bytes",
                    h.compressed,
                    chunk.len()
                )));
            }
            let too_large = |m: String| ImageError::new(ImageErrorKind::TooLarge, m);
            if h.uncompressed as u64 > MAX_PAGE_BYTES {
                return Err(too_large(format!(
                    "a page of {} bytes uncompressed is over the {MAX_PAGE_BYTES}-byte limit",
                    h.uncompressed
                )));
            }
            raw += h.uncompressed as u64;
            if raw > declared {
                return Err(too_large(format!(
                    "its pages inflate to more than the {declared} bytes its chunk declares uncompressed"
                )));
            }
            values += h.num_values as u64;
            if values > max_values {
                return Err(too_large(format!("its pages hold more than {max_values} values for {rows} rows")));
            }
            at = end as usize;
        }
        Ok(())
    }

    /// Read one leaf of row group `rg` (column `col`) for `rows` rows.
    fn read_leaf(
        &self,
        span: &Arc<Span>,
        rg: &RowGroupMetaData,
        col: usize,
        leaf: &Leaf,
        rows: usize,
    ) -> std::result::Result<LeafData, ImageError> {
        let corrupt = |m: String| ImageError::new(ImageErrorKind::Corrupt, m);
        let cc = rg.column(col);
        let descr = cc.column_descr_ptr();
        if descr.physical_type() != leaf.physical {
            return Err(corrupt(format!("its type is {:?}, not {:?}", descr.physical_type(), leaf.physical)));
        }
        Self::check_pages(span, cc, rows as u64)?;
        // The crate's page and level decoders still panic on some corrupt pages (an assertion in its bit
        // reader): such a panic is this column's corrupt data, named as such.
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let pages =
                SerializedPageReader::new_with_properties(Arc::clone(span), cc, rows, None, Arc::clone(&self.props))
                    .map_err(|e| corrupt(e.to_string()))?;
            let reader = get_column_reader(descr, Box::new(pages));
            let parquet_err = |e: parquet::errors::ParquetError| corrupt(e.to_string());
            macro_rules! typed {
                ($r:expr, $variant:ident) => {{
                    let (defs, reps, vals, got) = read_typed($r, rows, leaf).map_err(parquet_err)?;
                    (defs, reps, Vals::$variant(vals), got)
                }};
            }
            Ok(match reader {
                ColumnReader::BoolColumnReader(r) => typed!(r, Bool),
                ColumnReader::Int32ColumnReader(r) => typed!(r, I32),
                ColumnReader::Int64ColumnReader(r) => typed!(r, I64),
                ColumnReader::FloatColumnReader(r) => typed!(r, F32),
                ColumnReader::DoubleColumnReader(r) => typed!(r, F64),
                ColumnReader::ByteArrayColumnReader(r) => typed!(r, Bytes),
                ColumnReader::FixedLenByteArrayColumnReader(r) => typed!(r, Fixed),
                ColumnReader::Int96ColumnReader(_) => return Err(corrupt("INT96 is not read".into())),
            })
        }));
        let (defs, reps, vals, got) = read.unwrap_or_else(|_| {
            Err(corrupt("its pages cannot be decoded (the parquet crate panicked on them)".into()))
        })?;
        if got != rows {
            return Err(corrupt(format!("holds {got} rows where its row group declares {rows}")));
        }
        if let Some(d) = defs.iter().find(|&&d| !(0..=leaf.max_def).contains(&d)) {
            return Err(corrupt(format!("a definition level {d} outside 0..={}", leaf.max_def)));
        }
        if let Some(p) = reps.iter().find(|&&p| !(0..=leaf.max_rep).contains(&p)) {
            return Err(corrupt(format!("a repetition level {p} outside 0..={}", leaf.max_rep)));
        }
        let present = match (leaf.max_def, leaf.max_rep) {
            (0, 0) => rows,
            (0, _) => reps.len(),
            (max, _) => defs.iter().filter(|&&d| d == max).count(),
        };
        if leaf.max_rep == 0 && leaf.max_def > 0 && defs.len() != rows {
            return Err(corrupt(format!("{} definition levels for {rows} rows", defs.len())));
        }
        if leaf.max_rep > 0 && (reps.len() != defs.len() || reps.first().is_some_and(|&p| p != 0)) {
            return Err(corrupt(format!("{} repetition levels for {} definition levels", reps.len(), defs.len())));
        }
        if vals.len() != present {
            return Err(corrupt(format!("{} values where its levels say {present}", vals.len())));
        }
        Ok(LeafData { defs, reps, vals })
    }

    /// An extras leaf's value per row; a row whose value is bad gets its error in `bad`.
    fn extra_values(
        d: &LeafData,
        leaf: &Leaf,
        rows: usize,
        name: &str,
        bad: &mut [Option<ImageError>],
    ) -> std::result::Result<Vec<Value>, ImageError> {
        let mut out = Vec::with_capacity(rows);
        let mut k = 0usize; // next value
        let note = |r: usize, m: String, bad: &mut [Option<ImageError>]| {
            bad[r].get_or_insert_with(|| ImageError::new(ImageErrorKind::Corrupt, format!("the column {name} {m}")));
        };
        if leaf.max_rep == 0 {
            for r in 0..rows {
                let present = leaf.max_def == 0 || d.defs[r] == leaf.max_def;
                if present {
                    out.push(d.vals.value(k, leaf.kind).unwrap_or_else(|m| {
                        note(r, m, bad);
                        Value::Null
                    }));
                    k += 1;
                } else {
                    out.push(Value::Null);
                }
            }
            return Ok(out);
        }
        // A list: a record starts at each repetition level 0.
        let levels = if leaf.max_def > 0 { d.defs.len() } else { d.reps.len() };
        let mut row: Option<Value> = None;
        for j in 0..levels {
            let def = if leaf.max_def > 0 { d.defs[j] } else { 0 };
            if d.reps[j] == 0 {
                if let Some(v) = row.take() {
                    out.push(v);
                }
                row = Some(if def + 1 < leaf.present_def { Value::Null } else { Value::List(Vec::new()) });
            }
            let r = out.len();
            if def >= leaf.present_def {
                let v = if def == leaf.max_def {
                    k += 1;
                    d.vals.value(k - 1, leaf.kind).unwrap_or_else(|m| {
                        note(r, m, bad);
                        Value::Null
                    })
                } else {
                    Value::Null
                };
                match &mut row {
                    Some(Value::List(items)) => items.push(v),
                    _ => {
                        return Err(ImageError::new(
                            ImageErrorKind::Corrupt,
                            format!("the column {name}: an element of a null list"),
                        ));
                    }
                }
            }
        }
        out.extend(row);
        if out.len() != rows {
            return Err(ImageError::new(
                ImageErrorKind::Corrupt,
                format!("the column {name} holds {} lists for {rows} rows", out.len()),
            ));
        }
        Ok(out)
    }

    fn decode(&self, unit: &Unit, bytes: &Bytes, out: &mut UnitBuilder) -> std::result::Result<(), ImageError> {
        let f = &self.files[unit.file as usize];
        let g = unit.tag as usize;
        let rg = f.meta.row_groups().get(g).ok_or_else(|| ImageError::new(ImageErrorKind::Corrupt, "no row group"))?;
        let rows = unit.samples as usize;
        let span = Arc::new(Span { bytes: bytes.clone(), offset: unit.offset });
        fn named(leaf: &Leaf) -> impl Fn(ImageError) -> ImageError + '_ {
            move |e| ImageError::new(e.kind, format!("column {}: {}", leaf.path, e.message))
        }
        let c = &self.chosen;
        let image = self.read_leaf(&span, rg, f.image, &c.image, rows).map_err(named(&c.image))?;
        let labels = match (&c.label, f.label) {
            (Some(l), Some(col)) => Some(self.read_leaf(&span, rg, col, l, rows).map_err(named(l))?),
            _ => None,
        };
        let mut bad: Vec<Option<ImageError>> = vec![None; rows];
        let mut extras = Vec::with_capacity(c.extras.len());
        for ((name, leaf), &col) in c.extras.iter().zip(&f.extras) {
            let d = self.read_leaf(&span, rg, col, leaf, rows).map_err(named(leaf))?;
            extras.push(Self::extra_values(&d, leaf, rows, name, &mut bad)?.into_iter());
        }
        let Vals::Bytes(images) = &image.vals else {
            return Err(ImageError::new(ImageErrorKind::Corrupt, "the image column is not binary"));
        };
        let (mut k, mut kl) = (0usize, 0usize);
        let mut row_extras = Vec::with_capacity(extras.len());
        for (r, bad) in bad.into_iter().enumerate() {
            row_extras.clear();
            row_extras.extend(extras.iter_mut().map(|e| e.next().unwrap_or(Value::Null)));
            let label = match (&labels, &c.label) {
                (Some(d), Some(l)) if l.max_def == 0 || d.defs.get(r) == Some(&l.max_def) => {
                    kl += 1;
                    d.vals.int(kl - 1)
                }
                _ => -1,
            };
            let def = if c.image.max_def == 0 { 0 } else { image.defs.get(r).copied().unwrap_or(0) };
            let bytes = if c.image.max_def == 0 || def == c.image.max_def {
                k += 1;
                images.get(k - 1).map(|b| b.data())
            } else {
                None
            };
            let problem = if let Some(e) = bad {
                Some(e)
            } else if bytes.is_none() {
                Some(match c.image.kind {
                    Kind::Image { hf: true } if def >= c.image.present_def => ImageError::new(
                        ImageErrorKind::Unsupported,
                        format!("the image is given by path, not embedded (column {})", c.image.path),
                    ),
                    _ => {
                        ImageError::new(ImageErrorKind::Corrupt, format!("the image is null (column {})", c.image.path))
                    }
                })
            } else if self.classes > 0 && !(-1..self.classes as i64).contains(&label) {
                Some(ImageError::new(
                    ImageErrorKind::Corrupt,
                    format!("its label {label} is outside the {} class names", self.classes),
                ))
            } else {
                None
            };
            match (problem, bytes) {
                (None, Some(b)) => out.image(b, label, &row_extras)?,
                (e, _) => {
                    let e = e.unwrap_or_else(|| ImageError::new(ImageErrorKind::Corrupt, "no image"));
                    let at = format!("{} row {}", f.name.display(), unit.first + r as u64);
                    out.bad(ImageError::new(e.kind, format!("{at}: {}", e.message)))?
                }
            }
        }
        Ok(())
    }
}

impl RecordFormat for Parquet {
    fn kind(&self) -> &'static str {
        "parquet"
    }

    fn decode_unit(&self, unit: &Unit, bytes: &Bytes, out: &mut UnitBuilder) -> std::result::Result<(), ImageError> {
        let f = &self.files[unit.file as usize];
        self.decode(unit, bytes, out)
            .map_err(|e| ImageError::new(e.kind, format!("{} row group {}: {}", f.name.display(), unit.tag, e.message)))
    }
}
