//! Tests of json/: the lexer against what Python's `json` accepts and refuses, both surrogate policies, and
//! property tests: generated JSON texts are walked token by token exactly as the skipper skips them, every strict
//! prefix and every mutation is an error or a value (never a panic), and numbers are valued as `str::parse`.

use super::*;
use proptest::prelude::*;

/// Skip one whole value; the offset after it (trailing whitespace read).
fn skip(text: &[u8]) -> LexResult<usize> {
    check_utf8(text)?;
    let mut lx = Lexer::new(text);
    lx.skip_value(0)?;
    lx.ws();
    Ok(lx.i)
}

/// Read one value with the pull API a schema parser uses (every number valued, every string unescaped under both
/// policies and checked), recursively; the offset after it.
fn walk(lx: &mut Lexer<'_>, depth: usize) -> LexResult<()> {
    if depth >= MAX_DEPTH {
        return Err(SyntaxError { at: lx.i, what: "deep".into() });
    }
    let at = lx.peek_at();
    match lx.peek() {
        Some(b'{') => {
            lx.i += 1;
            let mut first = true;
            while let Some(span) = lx.next_key(&mut first)? {
                check_string(lx, span);
                walk(lx, depth + 1)?;
            }
        }
        Some(b'[') => {
            lx.i += 1;
            let mut first = true;
            while lx.next_elem(&mut first)? {
                walk(lx, depth + 1)?;
            }
        }
        Some(b'"') => {
            let span = lx.string_span()?;
            check_string(lx, span);
        }
        Some(b'-' | b'0'..=b'9') => {
            let n = lx.number()?;
            let token = std::str::from_utf8(&lx.s[at..lx.i]).unwrap();
            if token != "-Infinity" {
                let want: f64 = token.parse().unwrap();
                let want = if n.is_int && want == 0.0 { 0.0 } else { want }; // "-0" is Python's int 0
                assert_eq!(n.f.to_bits(), want.to_bits(), "{token}");
                assert_eq!(n.is_int, !token.contains(['.', 'e', 'E']), "{token}");
                assert_eq!(n.int, if n.is_int { token.parse::<i64>().ok() } else { None }, "{token}");
            }
        }
        Some(b't') => lx.literal(b"true")?,
        Some(b'f') => lx.literal(b"false")?,
        Some(b'n') => lx.literal(b"null")?,
        Some(b'N') => lx.literal(b"NaN")?,
        Some(b'I') => lx.literal(b"Infinity")?,
        None => return Err(SyntaxError { at, what: "end".into() }),
        Some(_) => return Err(SyntaxError { at, what: "value".into() }),
    }
    Ok(())
}

/// A string's contents under both policies: UTF-8 when refused surrogates are refused; the byte escape changes
/// only what `Refuse` refuses; the limit is exact.
fn check_string(lx: &Lexer<'_>, (a, b, esc): (usize, usize, bool)) {
    let strict = lx.unescape(a, b, esc, usize::MAX, Surrogates::Refuse);
    let bytes = lx.unescape(a, b, esc, usize::MAX, Surrogates::ByteEscape);
    match &strict {
        Ok(v) => {
            assert!(std::str::from_utf8(v).is_ok());
            assert_eq!(bytes.as_ref(), Ok(v));
            if !v.is_empty() {
                let short = lx.unescape(a, b, esc, v.len() - 1, Surrogates::Refuse);
                assert_eq!(short, Err(UnescapeError::TooLong));
            }
            assert_eq!(lx.unescape(a, b, esc, v.len(), Surrogates::Refuse).as_ref(), Ok(v));
        }
        Err(e) => assert!(matches!(e, UnescapeError::LoneSurrogate(_)), "{e:?}"),
    }
    assert!(!esc || strict.is_err() || bytes.is_ok());
}

/// The whole text as one value through the pull API: the offset after it.
fn walk_all(text: &[u8]) -> LexResult<usize> {
    check_utf8(text)?;
    let mut lx = Lexer::new(text);
    walk(&mut lx, 0)?;
    lx.ws();
    Ok(lx.i)
}

/// The skipper and the pull walk agree: both refuse, or both end at the same byte.
fn agree(text: &[u8]) -> Option<usize> {
    let (s, w) = (skip(text), walk_all(text));
    assert_eq!(s.as_ref().ok(), w.as_ref().ok(), "{:?}: skip {s:?} walk {w:?}", String::from_utf8_lossy(text));
    s.ok()
}

#[test]
fn what_pythons_json_accepts_and_refuses() {
    for ok in [
        &b"0"[..],
        b"-0",
        b" [1, -2.5e+3, 1E5, 0.0e-0, 1e400, -1e-400, NaN, Infinity, -Infinity] ",
        b"{\"a\": {\"b\": [true, false, null, \"\\ud800\\u00e9\\/\\\\\\\"\\b\\f\\n\\r\\t\"]}, \"\": {}}",
        b"\"caf\xc3\xa9 \xf0\x9f\x98\x80\"",
        b"[[], {}, [[]], {\"a\": []}]",
    ] {
        assert_eq!(agree(ok), Some(ok.len()), "{}", String::from_utf8_lossy(ok));
    }
    for bad in [
        &b""[..],
        b" ",
        b"[1,]",
        b"[1 2]",
        b"{\"a\" 1}",
        b"{a: 1}",
        b"{\"a\": 1,}",
        b"01",
        b"1.",
        b".5",
        b"+1",
        b"1e",
        b"nan",
        b"-NaN",
        b"inf",
        b"True",
        b"nul",
        b"\"a\x01b\"",
        b"\"\\x\"",
        b"\"\\u12G4\"",
        b"\"open",
        b"\"\xff\"",
        b"[",
        b"{\"a\": [}",
    ] {
        let end = agree(bad);
        assert!(end.is_none_or(|e| e < bad.len()), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn errors_say_where_and_what() {
    let e = skip(b"{\n\"info\": [1 2]}").unwrap_err();
    assert_eq!(e.what, "expected ',' or ']' in a list, found the number 2");
    assert_eq!((e.at, line_column(b"{\n\"info\": [1 2]}", e.at)), (13, (2, 12)));
    assert_eq!(
        skip(b"[\"a\", \"caf\xc3").unwrap_err(),
        SyntaxError { at: 10, what: "bytes that are not UTF-8".into() }
    );
    assert_eq!(skip(b"[1, 2").unwrap_err().what, "the file ends inside a list or object (truncated?)");
}

#[test]
fn nesting_is_bounded_without_recursion() {
    for depth in [MAX_DEPTH - 1, MAX_DEPTH, 1_000_000] {
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let r = skip(text.as_bytes());
        if depth <= MAX_DEPTH {
            assert_eq!(r, Ok(text.len()));
        } else {
            assert_eq!(r.unwrap_err().what, "lists/objects nested deeper than 512 levels");
        }
    }
    let objects = format!("{}1{}", "{\"a\":".repeat(200_000), "}".repeat(200_000));
    assert!(skip(objects.as_bytes()).unwrap_err().what.contains("nested deeper"));
}

#[test]
fn lone_surrogates_are_refused_or_bytes_as_the_caller_says() {
    let un = |text: &str, limit: usize, policy: Surrogates| {
        let mut lx = Lexer::new(text.as_bytes());
        let (a, b, esc) = lx.string_span().unwrap();
        lx.unescape(a, b, esc, limit, policy)
    };
    use Surrogates::{ByteEscape, Refuse};
    assert_eq!(un(r#""a\ud83d\ude00\u00e9""#, 9, Refuse), Ok("a\u{1f600}\u{e9}".as_bytes().to_vec()));
    assert_eq!(un(r#""a\ud83d\ude00\u00e9""#, 6, Refuse), Err(UnescapeError::TooLong));
    assert_eq!(un(r#""x\udcffy""#, 9, ByteEscape), Ok(b"x\xffy".to_vec()));
    assert_eq!(un(r#""x\udcffy""#, 9, Refuse), Err(UnescapeError::LoneSurrogate(0xdcff)));
    assert_eq!(un(r#""\udcff\udcff""#, 1, ByteEscape), Err(UnescapeError::TooLong));
    for lone in [r#""\udc7f""#, r#""\ud800""#, r#""\ud800\u0041""#, r#""\udc00x""#] {
        for policy in [Refuse, ByteEscape] {
            assert!(matches!(un(lone, 99, policy), Err(UnescapeError::LoneSurrogate(_))), "{lone} {policy:?}");
        }
    }
    // A pair whose low half is in the escaped-byte range is a character, not a byte.
    assert_eq!(un(r#""\ud800\udc80""#, 9, ByteEscape), Ok("\u{10080}".as_bytes().to_vec()));
}

/// A generated JSON text: values of every kind (numbers in every form, strings with every escape), nested.
fn text() -> impl Strategy<Value = String> {
    let ws = prop_oneof![Just(""), Just(" "), Just("\n\t "), Just("\r\n")];
    let number = "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?";
    let string = prop::collection::vec(
        prop_oneof![
            "[a-zA-Z0-9 é😀]{1,4}".boxed(),
            prop_oneof![
                Just("\\\""),
                Just("\\\\"),
                Just("\\/"),
                Just("\\b"),
                Just("\\f"),
                Just("\\n"),
                Just("\\r"),
                Just("\\t")
            ]
            .prop_map(str::to_string)
            .boxed(),
            (0u32..0x1_0000).prop_map(|u| format!("\\u{u:04x}")).boxed(),
        ],
        0..6,
    )
    .prop_map(|parts| format!("\"{}\"", parts.concat()));
    let leaf = prop_oneof![
        Just("true".to_string()),
        Just("false".to_string()),
        Just("null".to_string()),
        Just("NaN".to_string()),
        Just("-Infinity".to_string()),
        number.prop_map(|s| s),
        string.clone(),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        let ws = ws.clone();
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..6), ws.clone())
                .prop_map(|(items, w)| format!("[{w}{}{w}]", items.join(&format!("{w},{w}")))),
            (prop::collection::vec((string.clone(), inner), 0..6), ws).prop_map(|(items, w)| format!(
                "{{{w}{}{w}}}",
                items.iter().map(|(k, v)| format!("{k}{w}:{w}{v}")).collect::<Vec<_>>().join(",")
            )),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    #[test]
    fn generated_texts_are_read_whole_and_their_prefixes_refused(t in text()) {
        let b = t.as_bytes();
        prop_assert_eq!(agree(b), Some(b.len()), "{}", t);
        for n in 0..b.len() {
            // A prefix is refused, or (a number cut short, `[1` → `1`... only at top level) a shorter value.
            if let Some(end) = agree(&b[..n]) {
                prop_assert!(t.as_bytes()[0].is_ascii_digit() || t.starts_with('-'), "{}: {}", n, t);
                prop_assert_eq!(end, n);
            }
        }
    }

    #[test]
    fn mutated_texts_never_panic(t in text(), muts in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6)) {
        let mut b = t.into_bytes();
        for (at, byte, op) in muts {
            let k = if b.is_empty() { 0 } else { at.index(b.len()) };
            match op {
                0 if !b.is_empty() => b[k] = byte,
                1 => b.insert(k, byte),
                _ if !b.is_empty() => { b.remove(k); }
                _ => b.push(byte),
            }
        }
        agree(&b);
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(prop_oneof![
        any::<u8>(), Just(b'['), Just(b'{'), Just(b'"'), Just(b'\\'), Just(b'u'), Just(b'd'), Just(b'8'), Just(b','),
        Just(b':'), Just(b'0'), Just(b'-'), Just(b'e'), Just(b'.')], 0..64)) {
        agree(&b);
    }
}
