//! The metadata section of a packed file (source/packed.rs) is a small UTF-8 JSON object: class names and the
//! write options, readable with `strings`/`jq` and by any JSON parser. This file writes and reads the subset
//! of JSON that section uses — objects, arrays, strings, integers, `true`/`false`/`null` — with no crate:
//! `serde_json` refuses lone surrogates, and they are how a class name that is not UTF-8 survives.
//!
//! Class names are bytes (Linux folder names need not be UTF-8). Valid UTF-8 is written as is; every byte of an
//! invalid sequence is written as the escape `\udcXX`, Python's `surrogateescape` convention (the one
//! `os.fsdecode` uses), so `json.loads` in Python yields exactly the `os.fsdecode` string of the folder name,
//! and [`parse`] turns `\udcXX` back into byte 0xXX.
//!
//! The reader is a parser of untrusted bytes (the section is CRC-checked, but a crafted file can carry any
//! CRC): nesting is limited to [`MAX_DEPTH`] (no stack overflow), numbers must be integers that fit `i64` or
//! `u64`, strings must be valid UTF-8 apart from the escapes above, and errors say at which byte parsing failed.

use std::collections::BTreeMap;

/// Deepest nesting of arrays/objects accepted (the section itself uses 3).
pub const MAX_DEPTH: usize = 16;

/// A parsed JSON value of the subset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer (negative ones fit i64, the others u64).
    Int(i128),
    /// A string as bytes (`\udcXX` escapes restored to byte 0xXX).
    Str(Vec<u8>),
    /// An array.
    Array(Vec<Json>),
    /// An object; a repeated key keeps its last value (as Python's `json`).
    Object(BTreeMap<Vec<u8>, Json>),
}

impl Json {
    /// The value of `key` in an object (None for other values or a missing key).
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(m) => m.get(key.as_bytes()),
            _ => None,
        }
    }
}

/// Append `bytes` as a JSON string literal (quotes included), escaping what JSON requires and every byte of an
/// invalid UTF-8 sequence as `\udcXX`.
pub fn write_str(out: &mut String, bytes: &[u8]) {
    out.push('"');
    let mut rest = bytes;
    while !rest.is_empty() {
        let (valid, bad) = match std::str::from_utf8(rest) {
            Ok(s) => (s, 0),
            Err(e) => {
                let (ok, _) = rest.split_at(e.valid_up_to());
                // `error_len` None: an incomplete sequence at the end; every remaining byte is escaped.
                let bad = e.error_len().unwrap_or(rest.len() - e.valid_up_to());
                (std::str::from_utf8(ok).unwrap_or_default(), bad)
            }
        };
        for c in valid.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        let start = valid.len();
        for b in &rest[start..start + bad] {
            out.push_str(&format!("\\udc{b:02x}"));
        }
        rest = &rest[start + bad..];
    }
    out.push('"');
}

/// Parse one JSON value that spans all of `text` (surrounding whitespace allowed).
pub fn parse(text: &[u8]) -> Result<Json, String> {
    let mut p = Parser { s: text, i: 0 };
    let v = p.value(0)?;
    p.ws();
    if p.i != text.len() {
        return Err(p.err("trailing bytes after the JSON value"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> String {
        format!("metadata JSON: {what} at byte {}", self.i)
    }

    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, lit: &[u8]) -> bool {
        if self.s[self.i..].starts_with(lit) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, String> {
        if depth > MAX_DEPTH {
            return Err(self.err("nesting deeper than 16 levels"));
        }
        self.ws();
        match self.peek() {
            None => Err(self.err("unexpected end")),
            Some(b'{') => {
                self.i += 1;
                let mut map = BTreeMap::new();
                self.ws();
                if self.eat(b"}") {
                    return Ok(Json::Object(map));
                }
                loop {
                    self.ws();
                    if self.peek() != Some(b'"') {
                        return Err(self.err("expected a string key"));
                    }
                    let key = self.string()?;
                    self.ws();
                    if !self.eat(b":") {
                        return Err(self.err("expected ':'"));
                    }
                    let v = self.value(depth + 1)?;
                    map.insert(key, v);
                    self.ws();
                    if self.eat(b",") {
                        continue;
                    }
                    if self.eat(b"}") {
                        return Ok(Json::Object(map));
                    }
                    return Err(self.err("expected ',' or '}'"));
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.eat(b"]") {
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    if self.eat(b",") {
                        continue;
                    }
                    if self.eat(b"]") {
                        return Ok(Json::Array(items));
                    }
                    return Err(self.err("expected ',' or ']'"));
                }
            }
            Some(b'"') => Ok(Json::Str(self.string()?)),
            Some(b't') if self.eat(b"true") => Ok(Json::Bool(true)),
            Some(b'f') if self.eat(b"false") => Ok(Json::Bool(false)),
            Some(b'n') if self.eat(b"null") => Ok(Json::Null),
            Some(b'-' | b'0'..=b'9') => self.integer(),
            Some(_) => Err(self.err("unexpected byte")),
        }
    }

    fn integer(&mut self) -> Result<Json, String> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let digits = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
        if self.i == digits || self.i - digits > 20 {
            return Err(self.err("expected an integer of at most 20 digits"));
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return Err(self.err("only integers are used in the metadata"));
        }
        // ASCII digits with an optional sign, at most 20 digits: fits i128.
        let text = std::str::from_utf8(&self.s[start..self.i]).map_err(|_| self.err("bad integer"))?;
        let v: i128 = text.parse().map_err(|_| self.err("bad integer"))?;
        if v < i128::from(i64::MIN) || v > i128::from(u64::MAX) {
            return Err(self.err("integer out of the 64-bit range"));
        }
        Ok(Json::Int(v))
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let h = self.s.get(self.i..self.i + 4).ok_or_else(|| self.err("truncated \\u escape"))?;
        let t = std::str::from_utf8(h).map_err(|_| self.err("bad \\u escape"))?;
        let v = u32::from_str_radix(t, 16).map_err(|_| self.err("bad \\u escape"))?;
        self.i += 4;
        Ok(v)
    }

    /// A string literal starting at the opening quote, as bytes.
    fn string(&mut self) -> Result<Vec<u8>, String> {
        self.i += 1; // opening quote
        let mut out = Vec::new();
        loop {
            let Some(b) = self.peek() else { return Err(self.err("unterminated string")) };
            match b {
                b'"' => {
                    self.i += 1;
                    break;
                }
                b'\\' => {
                    self.i += 1;
                    let Some(e) = self.peek() else { return Err(self.err("unterminated escape")) };
                    self.i += 1;
                    match e {
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'/' => out.push(b'/'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let u = self.hex4()?;
                            let c = match u {
                                0xDC80..=0xDCFF => {
                                    out.push((u - 0xDC00) as u8); // surrogateescape: one raw byte
                                    continue;
                                }
                                0xD800..=0xDBFF => {
                                    if !self.eat(b"\\u") {
                                        return Err(self.err("lone high surrogate"));
                                    }
                                    let lo = self.hex4()?;
                                    if !(0xDC00..=0xDFFF).contains(&lo) {
                                        return Err(self.err("bad surrogate pair"));
                                    }
                                    0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00)
                                }
                                0xDC00..=0xDFFF => return Err(self.err("lone low surrogate")),
                                u => u,
                            };
                            let c = char::from_u32(c).ok_or_else(|| self.err("bad code point"))?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err(self.err("unknown escape")),
                    }
                }
                0..0x20 => return Err(self.err("control character in a string")),
                _ => {
                    // Copy a run of plain bytes, which must be UTF-8 (raw non-UTF-8 bytes are always escaped).
                    let start = self.i;
                    while self.peek().is_some_and(|b| b != b'"' && b != b'\\' && b >= 0x20) {
                        self.i += 1;
                    }
                    let run = &self.s[start..self.i];
                    if std::str::from_utf8(run).is_err() {
                        return Err(self.err("string is not UTF-8"));
                    }
                    out.extend_from_slice(run);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(bytes: &[u8]) -> Vec<u8> {
        let mut s = String::new();
        write_str(&mut s, bytes);
        match parse(s.as_bytes()).unwrap() {
            Json::Str(b) => b,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn strings_round_trip_including_bytes_that_are_not_utf8() {
        for b in [&b"plain"[..], b"quo\"te\\back", b"tab\tnl\n\x01\x7f", "caf\u{e9} \u{1f600}".as_bytes(), b"\xff\xfe"]
        {
            assert_eq!(round_trip(b), b);
        }
        assert_eq!(round_trip(b"a\xc3"), b"a\xc3"); // truncated sequence at the end
        let mut s = String::new();
        write_str(&mut s, b"x\xffy");
        assert_eq!(s, "\"x\\udcffy\"", "Python's surrogateescape spelling");
    }

    #[test]
    fn objects_arrays_and_integers() {
        let v =
            parse(br#" {"a": [1, -2, 18446744073709551615], "b": {"c": null, "d": true}, "e": "\u00e9\ud83d\ude00"} "#)
                .unwrap();
        assert_eq!(v.get("a"), Some(&Json::Array(vec![Json::Int(1), Json::Int(-2), Json::Int(u64::MAX.into())])));
        assert_eq!(v.get("b").and_then(|b| b.get("d")), Some(&Json::Bool(true)));
        assert_eq!(v.get("e"), Some(&Json::Str("\u{e9}\u{1f600}".as_bytes().to_vec())));
    }

    #[test]
    fn hostile_inputs_are_errors_not_panics() {
        let deep = "[".repeat(100_000);
        for bad in [
            &b""[..],
            b"{",
            b"[1,]",
            b"1.5",
            b"1e3",
            b"123456789012345678901234",
            b"-9223372036854775809",
            b"\"\\ud800\"",
            b"\"\\udc00x\"",
            b"\"\xff\"",
            b"\"a\nb\"",
            b"{\"a\" 1}",
            b"nul",
            b"1 2",
            deep.as_bytes(),
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
