//! json — the one JSON reader of the core: a lexer over the bytes of a JSON text, read in place (no tree, nothing
//! allocated but the strings a caller keeps), with the grammar of Python's `json` (what the files trdata reads
//! were written and are read with elsewhere). A room of the platform layer (pure functions of bytes). Its two
//! users build on the same cursor:
//! - annot/coco.rs: COCO annotation files, a schema-directed pull parser that keeps only the fields it knows and
//!   skips everything else with [`Lexer::skip_value`];
//! - source/packed_json.rs: a packed file's metadata section, a small tree of the subset it writes.
//!
//! # Untrusted bytes
//! Every input is hostile until read: no method panics, recurses or allocates in proportion to the input, and every
//! error is a [`SyntaxError`] at a byte offset ([`line_column`] turns it into a place a person can find).
//! - The text must be UTF-8 ([`check_utf8`], once for the whole text: string contents are then slices of it);
//!   control characters in strings are refused, escapes are checked as Python checks them (`\uXXXX` with four hex
//!   digits; a lone surrogate escape is a valid token, refused only where a string is kept, [`Lexer::unescape`]).
//! - Nesting: [`Lexer::skip_value`] is iterative (a bit per level) and refuses more than [`MAX_DEPTH`] levels; a
//!   caller that recurses (a tree) bounds its own depth below that.
//! - Numbers: Python's grammar (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`, no leading zeros, no `+`, no
//!   bare `.`), valued as Python's `float()` values them (correctly rounded; overflow is ±inf), with the integer
//!   value of an integer literal that fits `i64`. `NaN`, `Infinity` and `-Infinity`, which Python's `json` reads,
//!   are accepted where a value is skipped and by [`Lexer::number`] (`-Infinity`); a caller that keeps a value
//!   refuses what it cannot hold.
//! - Strings kept by a caller are bounded while they are unescaped ([`Lexer::unescape`]'s `limit`).

/// Deepest nesting of lists/objects [`Lexer::skip_value`] accepts (Python's `json` gives up near 1000, at a depth
/// that depends on its stack). The skipper is iterative: this costs no stack.
pub const MAX_DEPTH: usize = 512;

/// Not JSON (what Python's `json` refuses too): what is wrong, at which byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// Byte offset of the failure in the text.
    pub at: usize,
    /// What is wrong, in words ("expected ',' or ']' in a list, found the number 2").
    pub what: String,
}

/// The result of a lexer step.
pub type LexResult<T> = std::result::Result<T, SyntaxError>;

fn syntax(at: usize, what: impl Into<String>) -> SyntaxError {
    SyntaxError { at, what: what.into() }
}

/// The whole text is UTF-8, or the syntax error at the first byte that is not.
pub fn check_utf8(s: &[u8]) -> LexResult<()> {
    std::str::from_utf8(s).map(|_| ()).map_err(|e| syntax(e.valid_up_to(), "bytes that are not UTF-8"))
}

/// The 1-based line and column of byte `at` (clamped to the text).
pub fn line_column(s: &[u8], at: usize) -> (usize, usize) {
    let at = at.min(s.len());
    let before = &s[..at];
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let column = 1 + at - before.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    (line, column)
}

/// Up to 40 bytes of `s[a..b]` as text, for messages.
pub fn snippet(s: &[u8], a: usize, b: usize) -> String {
    let b = b.min(s.len());
    let a = a.min(b);
    let cut = (b - a).min(40);
    let mut t = String::from_utf8_lossy(&s[a..a + cut]).into_owned();
    if cut < b - a {
        t.push('…');
    }
    t
}

/// `10^k` for the exact fast path (every one exactly representable).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

/// The common number forms, `-?[0-9]+(\.[0-9]+)?` with at most 18 digits (COCO's coordinates, boxes, areas),
/// valued exactly (Clinger's fast path), with the index after them; `None` for anything else, which the general
/// [`Lexer::number`] then reads (or refuses).
#[inline(always)]
pub fn simple_number(s: &[u8], at: usize) -> Option<(f64, usize)> {
    let neg = s.get(at) == Some(&b'-');
    let start = at + usize::from(neg);
    let mut j = start;
    let mut m: u64 = 0;
    while let Some(&c) = s.get(j) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        if j - start == 18 {
            return None;
        }
        m = m * 10 + u64::from(d);
        j += 1;
    }
    let digits = j - start;
    if digits == 0 || (digits > 1 && s[start] == b'0') {
        return None;
    }
    let mut frac = 0;
    if s.get(j) == Some(&b'.') {
        j += 1;
        let f0 = j;
        while let Some(&c) = s.get(j) {
            let d = c.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            if digits + (j - f0) == 18 {
                return None;
            }
            m = m * 10 + u64::from(d);
            j += 1;
        }
        frac = j - f0;
        if frac == 0 {
            return None;
        }
    }
    if matches!(s.get(j), Some(b'e' | b'E')) || m > 1 << 53 {
        return None;
    }
    if frac == 0 && m == 0 {
        return Some((0.0, j)); // "-0" is Python's int 0: +0.0
    }
    let v = m as f64 / POW10[frac];
    Some((if neg { -v } else { v }, j))
}

/// A number token: its value as Python's `float()` reads it, and as an integer when it is an integer literal
/// that fits `i64`.
#[derive(Debug, Clone, Copy)]
pub struct Num {
    /// The value as Python's `float(json.loads(token))`: correctly rounded, ±inf past f64's range, `-0` is +0.0.
    pub f: f64,
    /// The value of an integer literal (no fraction, no exponent) that fits `i64`.
    pub int: Option<i64>,
    /// Whether the token is an integer literal (no fraction, no exponent), whatever its size.
    pub is_int: bool,
}

/// What a lone surrogate escape (`\ud800` without its pair, or a lone `\udcXX`) becomes in [`Lexer::unescape`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surrogates {
    /// Refused: the string is kept as UTF-8 text, which cannot hold one.
    Refuse,
    /// Python's `surrogateescape`: a lone `\udc80`..`\udcff` is the raw byte 0x80..0xff (how bytes that are not
    /// UTF-8, a Linux file name's, travel through JSON; packed metadata writes them so); any other is refused.
    ByteEscape,
}

/// Why [`Lexer::unescape`] refused a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnescapeError {
    /// The unescaped bytes would be more than the limit.
    TooLong,
    /// A lone surrogate escape (its code unit) that the policy refuses.
    LoneSurrogate(u32),
}

fn hex4(h: &[u8]) -> Option<u32> {
    let t = std::str::from_utf8(h.get(..4)?).ok()?;
    u32::from_str_radix(t, 16).ok()
}

/// The cursor over a JSON text: `i` is the next byte to read. Its methods read one token or one container step
/// and leave the cursor after it; a caller walks the structure with [`next_elem`](Self::next_elem) and
/// [`next_key`](Self::next_key) and reads or skips each value.
#[derive(Debug, Clone)]
pub struct Lexer<'a> {
    /// The text (UTF-8: see [`check_utf8`]).
    pub s: &'a [u8],
    /// The cursor: the offset of the next byte to read.
    pub i: usize,
}

impl<'a> Lexer<'a> {
    /// A cursor at the start of `s`. The caller checks `s` with [`check_utf8`] first when it keeps strings.
    pub fn new(s: &'a [u8]) -> Self {
        Self { s, i: 0 }
    }

    /// Skip whitespace (JSON's four bytes).
    #[inline]
    pub fn ws(&mut self) {
        while let Some(&b) = self.s.get(self.i) {
            if b == b' ' || b == b'\n' || b == b'\r' || b == b'\t' {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    /// Skip whitespace, then the next byte (not consumed), `None` at the end.
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    /// Skip whitespace, then the cursor.
    #[inline]
    pub fn peek_at(&mut self) -> usize {
        self.ws();
        self.i
    }

    /// What the value at `at` is, for "must be …, found …" messages.
    pub fn found(&self, at: usize) -> String {
        let s = self.s;
        let token = |n: usize| snippet(s, at, at + n);
        match s.get(at) {
            None => "the end of the file".into(),
            Some(b'{') => "an object".into(),
            Some(b'[') => "a list".into(),
            Some(b'"') => {
                let end = s[at + 1..].iter().position(|&b| b == b'"').map_or(s.len(), |p| at + 2 + p);
                format!("the string {}", snippet(s, at, end))
            }
            Some(b't' | b'f') => format!("the boolean {}", token(5).trim_end_matches(|c: char| !c.is_alphabetic())),
            Some(b'n') => "null".into(),
            Some(b'N' | b'I') => {
                let end = s[at..].iter().position(|b| !b.is_ascii_alphanumeric()).map_or(s.len(), |p| at + p);
                format!("{} (not a finite number)", snippet(s, at, end))
            }
            Some(b'-' | b'0'..=b'9') => {
                let end = s[at + 1..]
                    .iter()
                    .position(
                        |b| !matches!(b, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-' | b'a'..=b'z' | b'A'..=b'Z'),
                    )
                    .map_or(s.len(), |p| at + 1 + p);
                format!("the number {}", snippet(s, at, end))
            }
            Some(_) => format!("{:?}", token(1)),
        }
    }

    /// The literal `lit` (`true`, `null`, `NaN`, …) at the cursor, consumed; otherwise a syntax error.
    pub fn literal(&mut self, lit: &[u8]) -> LexResult<()> {
        if self.s[self.i..].starts_with(lit) {
            self.i += lit.len();
            Ok(())
        } else {
            Err(syntax(self.i, format!("expected a JSON value, found {:?}", snippet(self.s, self.i, self.i + 8))))
        }
    }

    /// The string at the cursor (which is at its `"`): the span of its contents and whether it has escapes.
    /// Escapes are checked (Python's rules: `\uXXXX` with 4 hex digits, lone surrogates allowed); control
    /// characters are refused.
    pub fn string_span(&mut self) -> LexResult<(usize, usize, bool)> {
        let s = self.s;
        let open = self.i;
        let start = open + 1;
        let mut j = start;
        let mut esc = false;
        loop {
            let Some(&b) = s.get(j) else {
                return Err(syntax(open, "a string is not closed (truncated file?)"));
            };
            match b {
                b'"' => {
                    self.i = j + 1;
                    return Ok((start, j, esc));
                }
                b'\\' => {
                    esc = true;
                    match s.get(j + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => j += 2,
                        Some(b'u') => {
                            if s.get(j + 2..j + 6).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                j += 6;
                            } else {
                                return Err(syntax(j, "\\u in a string must be followed by 4 hex digits"));
                            }
                        }
                        None => return Err(syntax(open, "a string is not closed (truncated file?)")),
                        Some(_) => {
                            return Err(syntax(j, format!("invalid escape {:?} in a string", snippet(s, j, j + 2))));
                        }
                    }
                }
                0..=0x1f => {
                    return Err(syntax(
                        j,
                        format!("control character 0x{b:02x} in a string (JSON requires it escaped)"),
                    ));
                }
                _ => j += 1,
            }
        }
    }

    /// The contents of a string span ([`string_span`](Self::string_span)'s), unescaped, at most `limit` bytes
    /// (checked as it grows, so the allocation is bounded by the limit); a lone surrogate escape is what
    /// `surrogates` says. The result is UTF-8 when the text is, apart from [`Surrogates::ByteEscape`]'s bytes.
    pub fn unescape(
        &self,
        a: usize,
        b: usize,
        esc: bool,
        limit: usize,
        surrogates: Surrogates,
    ) -> std::result::Result<Vec<u8>, UnescapeError> {
        let raw = &self.s[a..b];
        if !esc {
            if raw.len() > limit {
                return Err(UnescapeError::TooLong);
            }
            return Ok(raw.to_vec());
        }
        let mut out = Vec::with_capacity(raw.len().min(limit));
        let mut k = 0;
        while k < raw.len() {
            let c = raw[k];
            if c != b'\\' {
                out.push(c);
                k += 1;
            } else {
                match raw.get(k + 1) {
                    Some(b'u') => {
                        let u = hex4(raw.get(k + 2..).unwrap_or_default()).unwrap_or(0xFFFF_FFFF);
                        k += 6;
                        let ch = if (0xD800..0xDC00).contains(&u) {
                            match (raw.get(k..k + 2), raw.get(k + 2..).and_then(hex4)) {
                                (Some(b"\\u"), Some(lo)) if (0xDC00..0xE000).contains(&lo) => {
                                    k += 6;
                                    char::from_u32(0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00))
                                }
                                _ => None,
                            }
                        } else if surrogates == Surrogates::ByteEscape && (0xDC80..0xDD00).contains(&u) {
                            out.push((u - 0xDC00) as u8); // surrogateescape: one raw byte
                            if out.len() > limit {
                                return Err(UnescapeError::TooLong);
                            }
                            continue;
                        } else {
                            char::from_u32(u)
                        };
                        let Some(ch) = ch else {
                            return Err(UnescapeError::LoneSurrogate(u));
                        };
                        out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                    }
                    Some(&e) => {
                        out.push(match e {
                            b'b' => 8,
                            b'f' => 12,
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            other => other, // " \ /
                        });
                        k += 2;
                    }
                    None => k += 1,
                }
            }
            if out.len() > limit {
                return Err(UnescapeError::TooLong);
            }
        }
        Ok(out)
    }

    /// After a list's `[`: whether an element follows (the cursor is then at it), or the list ended (`]` read).
    /// `first` starts true for each list.
    #[inline(always)]
    pub fn next_elem(&mut self, first: &mut bool) -> LexResult<bool> {
        let c = self.peek();
        if *first {
            *first = false;
            if c == Some(b']') {
                self.i += 1;
                return Ok(false);
            }
            return Ok(true);
        }
        match c {
            Some(b',') => {
                self.i += 1;
                self.ws();
                Ok(true)
            }
            Some(b']') => {
                self.i += 1;
                Ok(false)
            }
            None => Err(syntax(self.i, "the file ends inside a list (truncated?)")),
            Some(_) => Err(syntax(self.i, format!("expected ',' or ']' in a list, found {}", self.found(self.i)))),
        }
    }

    /// A `"key":` at the cursor: the span of the key's contents and whether it has escapes (as
    /// [`string_span`](Self::string_span)); the cursor is then at the value.
    #[inline(always)]
    pub fn key(&mut self) -> LexResult<(usize, usize, bool)> {
        if self.s.get(self.i) != Some(&b'"') {
            return Err(syntax(
                self.i,
                format!("expected a key (a string in double quotes), found {}", self.found(self.i)),
            ));
        }
        let span = self.string_span()?;
        if self.peek() != Some(b':') {
            return Err(syntax(self.i, format!("expected ':' after a key, found {}", self.found(self.i))));
        }
        self.i += 1;
        self.ws();
        Ok(span)
    }

    /// After an object's `{`: the next key ([`key`](Self::key)'s span; the cursor is then at its value), or
    /// `None` when the object ended (`}` read). `first` starts true for each object.
    #[inline(always)]
    pub fn next_key(&mut self, first: &mut bool) -> LexResult<Option<(usize, usize, bool)>> {
        let c = self.peek();
        if *first {
            *first = false;
            if c == Some(b'}') {
                self.i += 1;
                return Ok(None);
            }
        } else {
            match c {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                }
                Some(b'}') => {
                    self.i += 1;
                    return Ok(None);
                }
                None => return Err(syntax(self.i, "the file ends inside an object (truncated?)")),
                Some(_) => {
                    return Err(syntax(
                        self.i,
                        format!("expected ',' or '}}' in an object, found {}", self.found(self.i)),
                    ));
                }
            }
        }
        self.key().map(Some)
    }

    /// Skip the value at the cursor (which sits in containers `depth` deep), checking its syntax as Python's `json`
    /// would (`NaN`, `Infinity`, `-Infinity` and overflowing numbers included), allocating nothing; at most
    /// [`MAX_DEPTH`] levels in all.
    pub fn skip_value(&mut self, depth: usize) -> LexResult<()> {
        // Bit d of `stack`: whether the container at local depth d is an object.
        let mut stack = [0u64; MAX_DEPTH.div_ceil(64)];
        let mut d = 0usize;
        'value: loop {
            let at = self.i;
            match self.peek() {
                Some(c @ (b'{' | b'[')) => {
                    if depth + d >= MAX_DEPTH {
                        return Err(syntax(self.i, format!("lists/objects nested deeper than {MAX_DEPTH} levels")));
                    }
                    let obj = c == b'{';
                    if obj {
                        stack[d / 64] |= 1 << (d % 64);
                    } else {
                        stack[d / 64] &= !(1 << (d % 64));
                    }
                    d += 1;
                    self.i += 1;
                    let close = if obj { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.i += 1;
                        d -= 1;
                    } else {
                        if obj {
                            self.key()?;
                        }
                        continue 'value;
                    }
                }
                Some(b'"') => {
                    self.string_span()?;
                }
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                Some(b'N') => self.literal(b"NaN")?,
                Some(b'I') => self.literal(b"Infinity")?,
                Some(b'-' | b'0'..=b'9') => {
                    self.number()?;
                }
                None => return Err(syntax(at, "the file ends where a value should be (truncated?)")),
                Some(_) => return Err(syntax(self.i, format!("expected a JSON value, found {}", self.found(self.i)))),
            }
            // After a value: close containers until one continues with ','.
            loop {
                if d == 0 {
                    return Ok(());
                }
                let obj = stack[(d - 1) / 64] & (1 << ((d - 1) % 64)) != 0;
                match self.peek() {
                    Some(b',') => {
                        self.i += 1;
                        self.ws();
                        if obj {
                            self.key()?;
                        }
                        continue 'value;
                    }
                    Some(b'}') if obj => {
                        self.i += 1;
                        d -= 1;
                    }
                    Some(b']') if !obj => {
                        self.i += 1;
                        d -= 1;
                    }
                    None => return Err(syntax(self.i, "the file ends inside a list or object (truncated?)")),
                    Some(_) => {
                        let want = if obj { "',' or '}' in an object" } else { "',' or ']' in a list" };
                        return Err(syntax(self.i, format!("expected {want}, found {}", self.found(self.i))));
                    }
                }
            }
        }
    }

    /// The number at the cursor (`-`, a digit, or `-Infinity`), with Python's grammar
    /// (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`), valued as Python's `float()` would (overflow: ±inf).
    #[inline]
    pub fn number(&mut self) -> LexResult<Num> {
        let s = self.s;
        let start = self.i;
        let mut j = start;
        let neg = s.get(j) == Some(&b'-');
        if neg {
            j += 1;
        }
        let mut m: u64 = 0; // the first 19 significant digits
        let mut nd: u32 = 0; // how many significant digits m holds
        let mut e10: i64 = 0; // value = m × 10^e10 (when `exact`)
        let mut exact = true; // no nonzero digit was dropped
        match s.get(j) {
            Some(b'0') => j += 1,
            Some(b'1'..=b'9') => {
                while let Some(&c @ b'0'..=b'9') = s.get(j) {
                    if nd < 19 {
                        m = m * 10 + u64::from(c - b'0');
                        nd += 1;
                    } else {
                        e10 += 1;
                        exact &= c == b'0';
                    }
                    j += 1;
                }
            }
            Some(b'I') if neg => {
                if s[j..].starts_with(b"Infinity") {
                    self.i = j + 8;
                    return Ok(Num { f: f64::NEG_INFINITY, int: None, is_int: false });
                }
                return Err(syntax(start, format!("invalid number {:?}", snippet(s, start, j + 8))));
            }
            _ => return Err(syntax(start, format!("invalid number {:?}", snippet(s, start, j + 1)))),
        }
        let mut is_int = true;
        if s.get(j) == Some(&b'.') {
            is_int = false;
            j += 1;
            if !matches!(s.get(j), Some(b'0'..=b'9')) {
                return Err(syntax(
                    start,
                    format!("invalid number {:?}: a digit must follow '.'", snippet(s, start, j + 1)),
                ));
            }
            while let Some(&c @ b'0'..=b'9') = s.get(j) {
                if m == 0 && c == b'0' {
                    e10 -= 1;
                } else if nd < 19 {
                    m = m * 10 + u64::from(c - b'0');
                    nd += 1;
                    e10 -= 1;
                } else {
                    exact &= c == b'0';
                }
                j += 1;
            }
        }
        if matches!(s.get(j), Some(b'e' | b'E')) {
            is_int = false;
            j += 1;
            let eneg = match s.get(j) {
                Some(b'-') => {
                    j += 1;
                    true
                }
                Some(b'+') => {
                    j += 1;
                    false
                }
                _ => false,
            };
            if !matches!(s.get(j), Some(b'0'..=b'9')) {
                return Err(syntax(
                    start,
                    format!("invalid number {:?}: a digit must follow the exponent", snippet(s, start, j + 1)),
                ));
            }
            let mut ev: i64 = 0;
            while let Some(&c @ b'0'..=b'9') = s.get(j) {
                if ev < 1_000_000_000 {
                    ev = ev * 10 + i64::from(c - b'0');
                }
                j += 1;
            }
            e10 += if eneg { -ev } else { ev };
        }
        self.i = j;
        let f = if m == 0 {
            0.0
        } else if exact && m <= 1 << 53 && (-22..=22).contains(&e10) {
            // Clinger's fast path: both operands exact, one rounding — the correctly rounded value.
            let v = m as f64;
            if e10 >= 0 { v * POW10[e10 as usize] } else { v / POW10[(-e10) as usize] }
        } else {
            let t = std::str::from_utf8(&s[start..j]).unwrap_or("x");
            match t.parse::<f64>() {
                Ok(v) => v.abs(),
                Err(_) => return Err(syntax(start, format!("unreadable number {:?}", snippet(s, start, j)))),
            }
        };
        // An integer literal is a Python int: "-0" is 0, whose float is +0.0.
        let f = if neg && !(is_int && m == 0) { -f } else { f };
        let int = if is_int && exact {
            let mag = if e10 == 0 {
                Some(m)
            } else {
                u32::try_from(e10).ok().and_then(|e| 10u64.checked_pow(e)).and_then(|p| m.checked_mul(p))
            };
            mag.and_then(|v| i64::try_from(if neg { -i128::from(v) } else { i128::from(v) }).ok())
        } else {
            None
        };
        Ok(Num { f, int, is_int })
    }
}

#[cfg(test)]
mod tests;
