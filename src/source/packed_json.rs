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
//! CRC), a small tree built on the core's one JSON lexer (json/, which COCO files are read with too): nesting is
//! limited to [`MAX_DEPTH`] (no stack overflow), numbers must be integers that fit `i64` or `u64`, the text must be
//! valid UTF-8 (strings may carry the escapes above), and errors say at which byte parsing failed.

use std::collections::BTreeMap;

use crate::json::{self, LexResult, Lexer, Surrogates, SyntaxError, UnescapeError};

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

/// Parse one JSON value that spans all of `text` (surrounding whitespace allowed), with the core's JSON lexer
/// (json/); errors say what is wrong and at which byte.
pub fn parse(text: &[u8]) -> Result<Json, String> {
    let err = |e: SyntaxError| format!("metadata JSON: {} at byte {}", e.what, e.at);
    json::check_utf8(text).map_err(err)?;
    let mut lx = Lexer::new(text);
    let v = value(&mut lx, 0).map_err(err)?;
    lx.ws();
    if lx.i != text.len() {
        return Err(err(SyntaxError { at: lx.i, what: "trailing bytes after the JSON value".into() }));
    }
    Ok(v)
}

fn fail<T>(at: usize, what: impl Into<String>) -> LexResult<T> {
    Err(SyntaxError { at, what: what.into() })
}

/// The contents of a string span (the lexer's), as bytes: `\udcXX` escapes restored to byte 0xXX, other lone
/// surrogates refused. No length limit: the section's size bounds it.
fn bytes(lx: &Lexer<'_>, (a, b, esc): (usize, usize, bool)) -> LexResult<Vec<u8>> {
    lx.unescape(a, b, esc, usize::MAX, Surrogates::ByteEscape).or_else(|e| match e {
        UnescapeError::LoneSurrogate(u) => fail(a - 1, format!("lone surrogate escape \\u{u:04x}")),
        UnescapeError::TooLong => fail(a - 1, "string too long"),
    })
}

/// An integer token at the cursor: one that fits `i64` or `u64` (the metadata has no other numbers).
fn integer(lx: &mut Lexer<'_>) -> LexResult<Json> {
    let at = lx.i;
    let n = lx.number()?;
    if !n.is_int {
        return fail(at, "only integers are used in the metadata");
    }
    // An integer literal (Python's grammar: an optional '-', then digits without a leading zero) of at most 20
    // digits fits i128; the others are out of range anyway.
    let text = std::str::from_utf8(&lx.s[at..lx.i]).unwrap_or_default();
    match text.parse::<i128>() {
        Ok(v) if text.len() <= 21 && (i128::from(i64::MIN)..=i128::from(u64::MAX)).contains(&v) => Ok(Json::Int(v)),
        _ => fail(at, "integer out of the 64-bit range"),
    }
}

/// The value at the cursor, `depth` containers deep (recursive: [`MAX_DEPTH`] bounds the stack).
fn value(lx: &mut Lexer<'_>, depth: usize) -> LexResult<Json> {
    if depth > MAX_DEPTH {
        return fail(lx.i, "nesting deeper than 16 levels");
    }
    let at = lx.peek_at();
    match lx.peek() {
        None => fail(at, "unexpected end"),
        Some(b'{') => {
            lx.i += 1;
            let mut map = BTreeMap::new();
            let mut first = true;
            while let Some(span) = lx.next_key(&mut first)? {
                let key = bytes(lx, span)?;
                let v = value(lx, depth + 1)?;
                map.insert(key, v);
            }
            Ok(Json::Object(map))
        }
        Some(b'[') => {
            lx.i += 1;
            let mut items = Vec::new();
            let mut first = true;
            while lx.next_elem(&mut first)? {
                items.push(value(lx, depth + 1)?);
            }
            Ok(Json::Array(items))
        }
        Some(b'"') => {
            let span = lx.string_span()?;
            Ok(Json::Str(bytes(lx, span)?))
        }
        Some(b't') => lx.literal(b"true").map(|()| Json::Bool(true)),
        Some(b'f') => lx.literal(b"false").map(|()| Json::Bool(false)),
        Some(b'n') => lx.literal(b"null").map(|()| Json::Null),
        Some(b'-' | b'0'..=b'9') => integer(lx),
        Some(_) => fail(at, format!("expected a JSON value, found {}", lx.found(at))),
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

    #[test]
    fn numbers_follow_jsons_grammar_as_python_reads_it() {
        // Leading zeros are not JSON (Python's json: "Expecting ',' delimiter"); the writer never writes them.
        for bad in [&b"007"[..], b"[01]", b"-01", b"{\"v\": 00}"] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse(b"[0, -0, 10]").unwrap(), Json::Array(vec![Json::Int(0), Json::Int(0), Json::Int(10)]));
    }
}
