//! Our own reader of the Thrift compact protocol, for the two places where the `parquet` crate must not see
//! bytes before we have looked at them: the footer (its schema is rebuilt by recursion without a depth bound,
//! and its row-group and column-chunk lists size the memory its metadata takes) and the page headers of a
//! column chunk (an `uncompressed_page_size` is allocated as it stands).
//!
//! # Compact protocol (what is read here)
//! ```text
//! field header: one byte, high nibble = id delta (0: a zigzag varint i16 id follows), low nibble = type;
//!               type 0 = STOP (end of the struct)
//! types: 1 true · 2 false (the value is the type) · 3 i8 (1 byte) · 4 i16 · 5 i32 · 6 i64 (zigzag varints)
//!        7 double (8 bytes) · 8 binary (varint length + bytes) · 9 list · 10 set (byte: size<<4 | elem type,
//!        size 15: a varint size follows; bools in lists are 1 byte each) · 11 map (varint size, then a byte
//!        key<<4 | value type when the size is not 0) · 12 struct (fields until STOP)
//! ```
//! What is checked: varints of at most 10 bytes, every length and element count against the bytes left (each
//! element takes at least one byte, so no loop runs longer than the input), nesting at most [`MAX_DEPTH`]
//! (iteration of the skipper is bounded by that recursion), i32 fields in range. Nothing here allocates in
//! proportion to the input.

/// Deepest nesting of structs/lists/maps we walk (the Parquet metadata uses 5; the crate's own skip depth is 64).
pub const MAX_DEPTH: u32 = 32;

/// Compact type ids.
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const I8: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

/// A cursor over compact-protocol bytes; errors are words with the byte offset.
#[derive(Debug)]
pub struct Compact<'a> {
    b: &'a [u8],
    /// The offset of the next byte.
    pub i: usize,
}

/// The result of a step: a message saying what is wrong and where.
pub type Step<T> = Result<T, String>;

impl<'a> Compact<'a> {
    /// A cursor at the start of `b`.
    pub fn new(b: &'a [u8]) -> Self {
        Self { b, i: 0 }
    }

    fn left(&self) -> usize {
        self.b.len() - self.i
    }

    fn byte(&mut self) -> Step<u8> {
        let v = *self.b.get(self.i).ok_or_else(|| format!("Thrift data ends at byte {}", self.i))?;
        self.i += 1;
        Ok(v)
    }

    fn skip_bytes(&mut self, n: u64) -> Step<()> {
        if n > self.left() as u64 {
            return Err(format!("a length of {n} at byte {} runs past the {} bytes left", self.i, self.left()));
        }
        self.i += n as usize;
        Ok(())
    }

    /// An unsigned varint (at most 10 bytes).
    pub fn varint(&mut self) -> Step<u64> {
        let at = self.i;
        let mut v = 0u64;
        for k in 0..10 {
            let c = self.byte()?;
            v |= u64::from(c & 0x7f) << (7 * k);
            if c & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!("a varint longer than 10 bytes at byte {at}"))
    }

    /// A zigzag varint.
    pub fn zigzag(&mut self) -> Step<i64> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    /// A zigzag varint that must fit i32.
    pub fn i32(&mut self) -> Step<i32> {
        let at = self.i;
        i32::try_from(self.zigzag()?).map_err(|_| format!("an i32 out of range at byte {at}"))
    }

    /// The next field header of a struct: `(type, id)`, or None at its STOP.
    pub fn field(&mut self, last: &mut i16) -> Step<Option<(u8, i16)>> {
        let h = self.byte()?;
        let ty = h & 0x0f;
        if ty == 0 {
            return Ok(None);
        }
        let delta = h >> 4;
        let id = if delta == 0 {
            let at = self.i;
            i16::try_from(self.zigzag()?).map_err(|_| format!("a field id out of range at byte {at}"))?
        } else {
            last.checked_add(i16::from(delta)).ok_or_else(|| format!("a field id out of range at byte {}", self.i))?
        };
        *last = id;
        Ok(Some((ty, id)))
    }

    /// A list/set header: `(element type, count)`, the count checked against the bytes left.
    pub fn list(&mut self) -> Step<(u8, u64)> {
        let h = self.byte()?;
        let n = match h >> 4 {
            15 => self.varint()?,
            n => u64::from(n),
        };
        if n > self.left() as u64 {
            return Err(format!("a list of {n} elements at byte {} in {} bytes", self.i, self.left()));
        }
        Ok((h & 0x0f, n))
    }

    /// Skip one value of compact type `ty` nested `depth` deep.
    pub fn skip(&mut self, ty: u8, depth: u32) -> Step<()> {
        if depth > MAX_DEPTH {
            return Err(format!("Thrift values nested deeper than {MAX_DEPTH} at byte {}", self.i));
        }
        match ty {
            BOOL_TRUE | BOOL_FALSE => Ok(()),
            I8 => self.byte().map(drop),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.skip_bytes(8),
            BINARY => {
                let n = self.varint()?;
                self.skip_bytes(n)
            }
            LIST | SET => {
                let (et, n) = self.list()?;
                for _ in 0..n {
                    self.skip_elem(et, depth + 1)?;
                }
                Ok(())
            }
            MAP => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                if n > self.left() as u64 {
                    return Err(format!("a map of {n} entries at byte {} in {} bytes", self.i, self.left()));
                }
                let kv = self.byte()?;
                for _ in 0..n {
                    self.skip_elem(kv >> 4, depth + 1)?;
                    self.skip_elem(kv & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            STRUCT => {
                let mut last = 0;
                while let Some((t, _)) = self.field(&mut last)? {
                    self.skip(t, depth + 1)?;
                }
                Ok(())
            }
            t => Err(format!("unknown Thrift type {t} at byte {}", self.i)),
        }
    }

    /// Skip one element of a list/set/map (a bool there takes a byte).
    fn skip_elem(&mut self, ty: u8, depth: u32) -> Step<()> {
        if ty == BOOL_TRUE || ty == BOOL_FALSE {
            return self.byte().map(drop);
        }
        self.skip(ty, depth)
    }

    /// An i32 field's value (`ty` must be I32).
    fn i32_field(&mut self, ty: u8, what: &str) -> Step<i32> {
        if ty != I32 {
            return Err(format!("{what} has Thrift type {ty}, not i32"));
        }
        self.i32()
    }
}

/// What [`walk_footer`] counted in a footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FooterShape {
    /// Schema elements.
    pub elements: u64,
    /// Deepest nesting of the schema tree (the root is depth 1).
    pub depth: u64,
    /// Row groups.
    pub row_groups: u64,
    /// Column chunks over all row groups.
    pub chunks: u64,
}

/// Limits [`walk_footer`] enforces.
#[derive(Debug, Clone, Copy)]
pub struct FooterLimits {
    /// Most schema elements.
    pub elements: u64,
    /// Deepest schema nesting.
    pub depth: u64,
    /// Most row groups.
    pub row_groups: u64,
    /// Most column chunks in all.
    pub chunks: u64,
}

/// Walk a `FileMetaData` struct (field 2 `schema: list<SchemaElement>` with `num_children` as field 5, field 4
/// `row_groups: list<RowGroup>` with `columns: list<ColumnChunk>` as field 1), checking its schema's nesting and
/// its counts against `limits` before the crate decodes it. The schema tree is the crate's: the elements in
/// depth-first order, each group followed by its `num_children` children.
pub fn walk_footer(b: &[u8], limits: &FooterLimits) -> Step<FooterShape> {
    let mut c = Compact::new(b);
    let mut shape = FooterShape::default();
    let mut last = 0;
    while let Some((ty, id)) = c.field(&mut last)? {
        match (id, ty) {
            (2, LIST) => {
                let (et, n) = c.list()?;
                if n > limits.elements {
                    return Err(format!("a schema of {n} elements (the limit is {})", limits.elements));
                }
                shape.elements = n;
                if n > 0 && et != STRUCT {
                    return Err(format!("schema elements of Thrift type {et}"));
                }
                // Children left to see in each open group, innermost last (at most `limits.depth` deep).
                let mut open: Vec<u64> = Vec::new();
                for _ in 0..n {
                    while open.last() == Some(&0) {
                        open.pop();
                    }
                    if let Some(top) = open.last_mut() {
                        *top -= 1;
                    }
                    let children = schema_children(&mut c)?;
                    let depth = open.len() as u64 + 1;
                    if depth > limits.depth {
                        return Err(format!("a schema nested deeper than {} levels", limits.depth));
                    }
                    shape.depth = shape.depth.max(depth);
                    if children > 0 {
                        open.push(children);
                    }
                }
            }
            (4, LIST) => {
                let (et, n) = c.list()?;
                if n > limits.row_groups {
                    return Err(format!("{n} row groups (the limit is {})", limits.row_groups));
                }
                shape.row_groups = n;
                if n > 0 && et != STRUCT {
                    return Err(format!("row groups of Thrift type {et}"));
                }
                for _ in 0..n {
                    let mut last = 0;
                    while let Some((ty, id)) = c.field(&mut last)? {
                        if (id, ty) == (1, LIST) {
                            let (et, k) = c.list()?;
                            shape.chunks = shape.chunks.saturating_add(k);
                            if shape.chunks > limits.chunks {
                                return Err(format!("more than {} column chunks", limits.chunks));
                            }
                            for _ in 0..k {
                                c.skip_elem(et, 2)?;
                            }
                        } else {
                            c.skip(ty, 1)?;
                        }
                    }
                }
            }
            _ => c.skip(ty, 0)?,
        }
    }
    Ok(shape)
}

/// One `SchemaElement` struct: its `num_children` (field 5; 0 when absent), the rest skipped.
fn schema_children(c: &mut Compact<'_>) -> Step<u64> {
    let mut last = 0;
    let mut children = 0u64;
    while let Some((ty, id)) = c.field(&mut last)? {
        if id == 5 {
            let n = c.i32_field(ty, "num_children")?;
            children = u64::try_from(n).map_err(|_| format!("num_children {n} is negative"))?;
        } else {
            c.skip(ty, 1)?;
        }
    }
    Ok(children)
}

/// Parquet page types (`PageType`).
pub const DATA_PAGE: i32 = 0;
/// An index page (never written; skipped by readers).
pub const INDEX_PAGE: i32 = 1;
/// A dictionary page.
pub const DICTIONARY_PAGE: i32 = 2;
/// A version-2 data page.
pub const DATA_PAGE_V2: i32 = 3;

/// The fields of a `PageHeader` that bound what reading its page costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHead {
    /// Bytes of the header itself.
    pub header_len: u64,
    /// Field 1.
    pub page_type: i32,
    /// Field 2.
    pub uncompressed: i32,
    /// Field 3.
    pub compressed: i32,
    /// `num_values` of the data page header (field 5 or 8, its field 1), 0 for other pages.
    pub num_values: i32,
}

/// The page header at the start of `b` (fields 1, 2, 3 required; the data page header's `num_values`).
pub fn page_header(b: &[u8]) -> Step<PageHead> {
    let mut c = Compact::new(b);
    let mut last = 0;
    let (mut page_type, mut uncompressed, mut compressed, mut num_values) = (None, None, None, 0);
    while let Some((ty, id)) = c.field(&mut last)? {
        match id {
            1 => page_type = Some(c.i32_field(ty, "the page type")?),
            2 => uncompressed = Some(c.i32_field(ty, "uncompressed_page_size")?),
            3 => compressed = Some(c.i32_field(ty, "compressed_page_size")?),
            5 | 8 if ty == STRUCT => {
                let mut last = 0;
                while let Some((ty, id)) = c.field(&mut last)? {
                    if id == 1 {
                        num_values = c.i32_field(ty, "num_values")?;
                    } else {
                        c.skip(ty, 2)?;
                    }
                }
            }
            _ => c.skip(ty, 1)?,
        }
    }
    let missing = |what: &str| format!("a page header without its {what}");
    Ok(PageHead {
        header_len: c.i as u64,
        page_type: page_type.ok_or_else(|| missing("type"))?,
        uncompressed: uncompressed.ok_or_else(|| missing("uncompressed_page_size"))?,
        compressed: compressed.ok_or_else(|| missing("compressed_page_size"))?,
        num_values,
    })
}
