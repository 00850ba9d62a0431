//! source/packed_extras — the extras section of a packed file (layout version 2): per record, the extra fields
//! a source delivered beside its image and target (captions, JSON, arrays, bytes), stored after the metadata so
//! that the data region, the index and the block structure stay exactly those of version 1. A pack without extras
//! is written as version 1, byte for byte what it was.
//!
//! ```text
//! header (source/packed.rs), version 2 only:
//! 128 extras_index_offset u64 = align4096(meta_offset + meta_bytes)
//! 136 extras_offset       u64 = extras_index_offset + 16·N
//! 144 extras_bytes        u64   file_bytes = extras_offset + extras_bytes
//! 152 extras_index_crc    u32   CRC32C of the extras index
//! extras index: N rows of 16 bytes: offset u64 (absolute) · len u32 · crc32c u32 (of the record's extras)
//!   rows follow each other with no gap: row 0 starts at extras_offset, the last ends at the file's end
//! one record's extras: entries back to back, fields strictly increasing (a field the sample lacks is absent):
//!   field u16 (index into the metadata's "extras" names) · kind u8 · len u32 · len bytes
//! metadata: "version": 2 and "extras": [field names], 1 ..= 1024 distinct non-empty names
//! ```
//!
//! Kinds: 1 bytes, 2 text (UTF-8, a Python `str`), 3 JSON text, 4 a `.npy` file (an array). The core checks the
//! structure (rows, CRCs, entries, kinds, sizes); turning the bytes into values (UTF-8, JSON, `.npy` headers) is
//! the Python side's, with the same checks as a WebDataset member of that kind.

use std::collections::HashMap;

/// The layout version of a pack with extras.
pub const EXTRAS_VERSION: u32 = 2;
/// Bytes of one extras index row.
pub const EXTRAS_ROW_BYTES: u64 = 16;
/// Largest value of one field of one sample (as a WebDataset member read for `extras=`).
pub const MAX_EXTRA_BYTES: u64 = 16 << 20;
/// Prefix of the field names that hold a detection source's annotations (python/trdata/sources/packed_targets.py
/// documents the fields); `trdata.pack` refuses it on other sources' extras.
pub const RESERVED_PREFIX: &str = "target.";
/// Most distinct field names in one pack.
pub const MAX_EXTRA_FIELDS: usize = 1024;
/// Longest field name, in bytes.
pub const MAX_FIELD_NAME_BYTES: usize = 256;
/// Most bytes of one record's extras (its index row's `len` is a u32; as a record of the data region).
pub const MAX_RECORD_EXTRAS_BYTES: u64 = 1 << 30;
/// Bytes of an entry's head: field u16 · kind u8 · len u32.
const ENTRY_HEAD_BYTES: usize = 7;

/// What an extra value's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtraKind {
    /// Bytes, delivered as they are.
    Bytes = 1,
    /// UTF-8 text.
    Text = 2,
    /// JSON text.
    Json = 3,
    /// A `.npy` file.
    Npy = 4,
}

impl ExtraKind {
    /// The kind stored as `code`, if any.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Bytes),
            2 => Some(Self::Text),
            3 => Some(Self::Json),
            4 => Some(Self::Npy),
            _ => None,
        }
    }
}

/// One extra value: which field, what it is, its bytes.
pub type Entry<'a> = (u16, ExtraKind, &'a [u8]);

/// One row of the extras index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtrasRow {
    /// Absolute offset of the record's extras.
    pub offset: u64,
    /// Their length (0: the sample has none).
    pub len: u32,
    /// CRC32C of their bytes.
    pub crc32c: u32,
}

impl ExtrasRow {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.crc32c.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Self {
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default());
        Self { offset: u64_at(0), len: u32_at(8), crc32c: u32_at(12) }
    }
}

/// The names rule: 1 ..= [`MAX_EXTRA_FIELDS`] distinct names of 1 ..= [`MAX_FIELD_NAME_BYTES`] bytes.
pub fn check_names(names: &[String]) -> Result<(), String> {
    if names.is_empty() || names.len() > MAX_EXTRA_FIELDS {
        return Err(format!("{} extra fields (a pack holds 1 ..= {MAX_EXTRA_FIELDS})", names.len()));
    }
    let mut seen = std::collections::HashSet::with_capacity(names.len());
    for n in names {
        if n.is_empty() || n.len() > MAX_FIELD_NAME_BYTES {
            return Err(format!("extra field name {n:?} must be 1 ..= {MAX_FIELD_NAME_BYTES} bytes"));
        }
        if !seen.insert(n.as_str()) {
            return Err(format!("extra field name {n:?} appears twice"));
        }
    }
    Ok(())
}

/// Parse one record's extras (`fields` names in the pack): entries in increasing field order, known kinds, each
/// value at most [`MAX_EXTRA_BYTES`], nothing left over. The message says what is wrong.
pub fn decode_record(mut rec: &[u8], fields: usize) -> Result<Vec<Entry<'_>>, String> {
    let mut out = Vec::new();
    let mut last: Option<u16> = None;
    while !rec.is_empty() {
        if rec.len() < ENTRY_HEAD_BYTES {
            return Err(format!("an entry's head is cut short ({} bytes)", rec.len()));
        }
        let field = u16::from_le_bytes([rec[0], rec[1]]);
        let kind = ExtraKind::from_code(rec[2]).ok_or_else(|| format!("field {field} has unknown kind {}", rec[2]))?;
        let len = u32::from_le_bytes([rec[3], rec[4], rec[5], rec[6]]) as usize;
        if usize::from(field) >= fields || last.is_some_and(|l| field <= l) {
            return Err(format!("field {field} is out of order or not one of the {fields} names"));
        }
        if len as u64 > MAX_EXTRA_BYTES || len > rec.len() - ENTRY_HEAD_BYTES {
            return Err(format!("field {field} says {len} bytes, {} remain", rec.len() - ENTRY_HEAD_BYTES));
        }
        out.push((field, kind, &rec[ENTRY_HEAD_BYTES..ENTRY_HEAD_BYTES + len]));
        rec = &rec[ENTRY_HEAD_BYTES + len..];
        last = Some(field);
    }
    Ok(out)
}

/// Collects the extras of a pack being written, record by record, in memory (they are written after the
/// metadata): field names are numbered in the order they first appear.
#[derive(Debug, Default)]
pub struct ExtrasWriter {
    names: Vec<String>,
    by_name: HashMap<String, u16>,
    /// (offset in `bytes`, len, crc) per record so far.
    rows: Vec<ExtrasRow>,
    bytes: Vec<u8>,
}

fn invalid(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, msg)
}

impl ExtrasWriter {
    /// Records with extras rows so far.
    pub fn records(&self) -> usize {
        self.rows.len()
    }

    /// The field names, numbered as stored.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Add record `records()`'s extras: (name, kind, value) with distinct names (any order; stored in field
    /// order). Values over [`MAX_EXTRA_BYTES`], bad names and more than [`MAX_EXTRA_FIELDS`] names are refused.
    pub fn push(&mut self, values: &[(String, ExtraKind, Vec<u8>)]) -> std::io::Result<()> {
        let mut entries: Vec<(u16, ExtraKind, &[u8])> = Vec::with_capacity(values.len());
        for (name, kind, value) in values {
            if value.len() as u64 > MAX_EXTRA_BYTES {
                return Err(invalid(format!(
                    "extra {name:?} of record {} is {} bytes (at most {MAX_EXTRA_BYTES})",
                    self.rows.len(),
                    value.len()
                )));
            }
            let field = match self.by_name.get(name) {
                Some(&f) => f,
                None => {
                    let mut names = self.names.clone();
                    names.push(name.clone());
                    check_names(&names).map_err(invalid)?;
                    let f = self.names.len() as u16;
                    self.names.push(name.clone());
                    self.by_name.insert(name.clone(), f);
                    f
                }
            };
            entries.push((field, *kind, value));
        }
        entries.sort_by_key(|e| e.0);
        if entries.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(invalid(format!("record {} names an extra field twice", self.rows.len())));
        }
        let start = self.bytes.len();
        let need: usize = entries.iter().map(|e| ENTRY_HEAD_BYTES + e.2.len()).sum();
        self.bytes
            .try_reserve(need)
            .map_err(|_| invalid(format!("no memory for {} more bytes of extras ({} held)", need, self.bytes.len())))?;
        for (field, kind, value) in entries {
            self.bytes.extend_from_slice(&field.to_le_bytes());
            self.bytes.push(kind as u8);
            self.bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
            self.bytes.extend_from_slice(value);
        }
        let rec = &self.bytes[start..];
        if rec.len() as u64 > MAX_RECORD_EXTRAS_BYTES {
            return Err(invalid(format!("record {}'s extras total {} bytes", self.rows.len(), rec.len())));
        }
        self.rows.push(ExtrasRow { offset: start as u64, len: rec.len() as u32, crc32c: crc32c::crc32c(rec) });
        Ok(())
    }

    /// Add empty rows (samples without extras) until `records` rows exist.
    pub fn pad_to(&mut self, records: usize) {
        let at = self.bytes.len() as u64;
        while self.rows.len() < records {
            self.rows.push(ExtrasRow { offset: at, len: 0, crc32c: crc32c::crc32c(&[]) });
        }
    }

    /// The extras index (offsets made absolute from `extras_offset`) and the extras bytes.
    pub fn sections(&self, extras_offset: u64) -> (Vec<u8>, &[u8]) {
        let mut index = Vec::with_capacity(self.rows.len() * EXTRAS_ROW_BYTES as usize);
        for r in &self.rows {
            ExtrasRow { offset: r.offset + extras_offset, ..*r }.encode(&mut index);
        }
        (index, &self.bytes)
    }
}

/// The checked extras index of a pack: its field names and one row per record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtrasIndex {
    /// Field names, numbered as stored.
    pub names: Vec<String>,
    /// One row per record.
    pub rows: Vec<ExtrasRow>,
}

impl ExtrasIndex {
    /// Check the index section (`records` rows, already CRC-checked) against the names and the extras region
    /// `extras_offset .. extras_offset + extras_bytes`: rows back to back from its start to its end.
    pub fn from_section(
        index: &[u8],
        names: Vec<String>,
        records: u64,
        extras_offset: u64,
        extras_bytes: u64,
    ) -> Result<Self, String> {
        check_names(&names)?;
        if index.len() as u64 != records * EXTRAS_ROW_BYTES {
            return Err(format!("extras index of {} bytes for {records} records", index.len()));
        }
        let rows: Vec<ExtrasRow> = index.chunks_exact(EXTRAS_ROW_BYTES as usize).map(ExtrasRow::decode).collect();
        let mut at = extras_offset;
        for (i, r) in rows.iter().enumerate() {
            if r.offset != at {
                return Err(format!("extras of record {i} at {} do not follow at {at}", r.offset));
            }
            at += u64::from(r.len);
        }
        if at != extras_offset + extras_bytes {
            return Err(format!("extras rows end at {at}, the region at {}", extras_offset + extras_bytes));
        }
        Ok(Self { names, rows })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn written(records: &[Vec<(String, ExtraKind, Vec<u8>)>]) -> (ExtrasIndex, Vec<u8>) {
        let mut w = ExtrasWriter::default();
        for r in records {
            w.push(r).unwrap();
        }
        let (index, bytes) = w.sections(4096);
        let ix = ExtrasIndex::from_section(&index, w.names().to_vec(), records.len() as u64, 4096, bytes.len() as u64)
            .unwrap();
        (ix, bytes.to_vec())
    }

    #[test]
    fn records_read_back_in_field_order_whatever_order_they_were_given_in() {
        let rec = |pairs: &[(&str, ExtraKind, &[u8])]| -> Vec<(String, ExtraKind, Vec<u8>)> {
            pairs.iter().map(|(n, k, v)| (n.to_string(), *k, v.to_vec())).collect()
        };
        let (ix, bytes) = written(&[
            rec(&[("txt", ExtraKind::Text, b"a cat"), ("json", ExtraKind::Json, b"{\"a\": 1}")]),
            rec(&[]),
            rec(&[
                ("json", ExtraKind::Json, b"[]"),
                ("npy", ExtraKind::Npy, b"\x93NUMPY"),
                ("txt", ExtraKind::Text, b""),
            ]),
        ]);
        assert_eq!(ix.names, ["txt", "json", "npy"]);
        let rec_of = |i: usize| {
            let r = ix.rows[i];
            let at = (r.offset - 4096) as usize;
            decode_record(&bytes[at..at + r.len as usize], ix.names.len()).unwrap()
        };
        assert_eq!(rec_of(0), vec![(0, ExtraKind::Text, &b"a cat"[..]), (1, ExtraKind::Json, &b"{\"a\": 1}"[..])]);
        assert_eq!(rec_of(1), vec![]);
        assert_eq!(
            rec_of(2),
            vec![
                (0, ExtraKind::Text, &b""[..]),
                (1, ExtraKind::Json, &b"[]"[..]),
                (2, ExtraKind::Npy, &b"\x93NUMPY"[..])
            ]
        );
    }

    #[test]
    fn oversized_values_repeated_names_and_too_many_fields_are_refused() {
        let mut w = ExtrasWriter::default();
        let big = vec![0u8; MAX_EXTRA_BYTES as usize + 1];
        assert!(w.push(&[("x".into(), ExtraKind::Bytes, big)]).is_err());
        assert!(w.push(&[("x".into(), ExtraKind::Bytes, vec![1]), ("x".into(), ExtraKind::Bytes, vec![2])]).is_err());
        assert!(w.push(&[("".into(), ExtraKind::Bytes, vec![1])]).is_err());
        let many: Vec<_> = (0..=MAX_EXTRA_FIELDS).map(|i| (format!("f{i}"), ExtraKind::Bytes, vec![])).collect();
        assert!(w.push(&many).is_err());
    }

    #[test]
    fn an_index_with_gaps_or_a_wrong_end_is_refused() {
        let (ix, bytes) = written(&[vec![("t".into(), ExtraKind::Text, b"abc".to_vec())], vec![]]);
        let mut index = Vec::new();
        for r in &ix.rows {
            r.encode(&mut index);
        }
        let n = bytes.len() as u64;
        assert!(ExtrasIndex::from_section(&index, ix.names.clone(), 2, 4096, n).is_ok());
        assert!(ExtrasIndex::from_section(&index, ix.names.clone(), 2, 4096, n + 1).is_err());
        assert!(ExtrasIndex::from_section(&index, ix.names.clone(), 2, 4095, n).is_err());
        assert!(ExtrasIndex::from_section(&index, ix.names.clone(), 3, 4096, n).is_err());
        assert!(ExtrasIndex::from_section(&index, vec![], 2, 4096, n).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// A record's parser takes any bytes: entries it returns lie inside the record, in field order, of
        /// known kinds; nothing panics.
        #[test]
        fn decode_record_takes_any_bytes(rec in proptest::collection::vec(any::<u8>(), 0..64), fields in 0usize..5) {
            if let Ok(entries) = decode_record(&rec, fields) {
                let total: usize = entries.iter().map(|e| ENTRY_HEAD_BYTES + e.2.len()).sum();
                prop_assert_eq!(total, rec.len());
                prop_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
                prop_assert!(entries.iter().all(|e| usize::from(e.0) < fields));
            }
        }
    }
}
