//! The core's one JSON lexer (json/), which the COCO parser and the packed metadata reader both read with, on
//! hostile bytes. Two readers of every input must agree: the iterative skipper (what the COCO parser runs over
//! every value it does not keep) and a pull walk with the calls a schema parser makes (every number valued, every
//! string unescaped under both surrogate policies): both refuse, or both end at the same byte. Nothing may panic;
//! every number is valued as `str::parse` values it (Python's `float()`), with its `i64` value when it is an
//! integer literal; every kept string is UTF-8 (byte escapes aside) and its limit exact. The same properties run
//! as proptests in the crate (src/json/tests.rs) where cargo-fuzz is not installed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trdata::json::{Lexer, MAX_DEPTH, Surrogates, UnescapeError, check_utf8};

fn skip(text: &[u8]) -> Option<usize> {
    check_utf8(text).ok()?;
    let mut lx = Lexer::new(text);
    lx.skip_value(0).ok()?;
    lx.ws();
    Some(lx.i)
}

fn check_string(lx: &Lexer<'_>, (a, b, esc): (usize, usize, bool)) {
    let strict = lx.unescape(a, b, esc, usize::MAX, Surrogates::Refuse);
    let bytes = lx.unescape(a, b, esc, usize::MAX, Surrogates::ByteEscape);
    match &strict {
        Ok(v) => {
            assert!(std::str::from_utf8(v).is_ok());
            assert_eq!(bytes.as_ref(), Ok(v));
            if !v.is_empty() {
                assert_eq!(lx.unescape(a, b, esc, v.len() - 1, Surrogates::Refuse), Err(UnescapeError::TooLong));
            }
        }
        Err(e) => assert!(matches!(e, UnescapeError::LoneSurrogate(_))),
    }
}

fn walk(lx: &mut Lexer<'_>, depth: usize) -> Option<()> {
    if depth >= MAX_DEPTH {
        return None;
    }
    let at = lx.peek_at();
    match lx.peek()? {
        b'{' => {
            lx.i += 1;
            let mut first = true;
            while let Some(span) = lx.next_key(&mut first).ok()? {
                check_string(lx, span);
                walk(lx, depth + 1)?;
            }
        }
        b'[' => {
            lx.i += 1;
            let mut first = true;
            while lx.next_elem(&mut first).ok()? {
                walk(lx, depth + 1)?;
            }
        }
        b'"' => {
            let span = lx.string_span().ok()?;
            check_string(lx, span);
        }
        b'-' | b'0'..=b'9' => {
            let n = lx.number().ok()?;
            let token = std::str::from_utf8(&lx.s[at..lx.i]).unwrap();
            if token != "-Infinity" {
                let want: f64 = token.parse().unwrap();
                let want = if n.is_int && want == 0.0 { 0.0 } else { want };
                assert_eq!(n.f.to_bits(), want.to_bits(), "{token}");
                assert_eq!(n.is_int, !token.contains(['.', 'e', 'E']), "{token}");
                assert_eq!(n.int, if n.is_int { token.parse::<i64>().ok() } else { None }, "{token}");
            }
        }
        b't' => lx.literal(b"true").ok()?,
        b'f' => lx.literal(b"false").ok()?,
        b'n' => lx.literal(b"null").ok()?,
        b'N' => lx.literal(b"NaN").ok()?,
        b'I' => lx.literal(b"Infinity").ok()?,
        _ => return None,
    }
    Some(())
}

fuzz_target!(|data: &[u8]| {
    let walked = check_utf8(data).ok().and_then(|()| {
        let mut lx = Lexer::new(data);
        walk(&mut lx, 0)?;
        lx.ws();
        Some(lx.i)
    });
    assert_eq!(skip(data), walked);
});
