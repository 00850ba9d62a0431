//! source/braces — webdataset's shard patterns (`trdata.WebDataset("train-{000000..000127}.tar")`): the grammar
//! of the `braceexpand` package, which webdataset calls, written out here (tests/test_storage_urls.py compares
//! the two on the same patterns):
//!
//! - `{A..B}` / `{A..B..S}`: integers from A to B (either direction, negative too) by step |S| (0 = 1),
//!   zero-padded to the longer end's width when either end other than `0`/`-0` starts with `0` or `-0`
//!   (`{07..10}` → 07 08 09 10);
//! - `{a..e}` / `{a..e..S}`: letters, through `A..Za..z`;
//! - `{x,y,…}`: alternatives (an empty one too: `x{,.bak}`), braces nested inside;
//! - anything else in braces (`{x}`, `{}`) stays literal around its expanded content; a backslash escapes the
//!   next character and is removed from the names; unbalanced braces are a `ConfigError`;
//! - `::` separates patterns (webdataset's `expand_urls`), expanded one after the other.
//!
//! Names are the product of the parts, in order. More than [`MAX_SHARDS`] names is a `ConfigError` before they
//! are made (a `{0..999999999}` typo would otherwise fill memory before any shard is opened).

use crate::error::{Result, TrdataError};

/// Most shard names one pattern may expand to.
pub const MAX_SHARDS: usize = 1_000_000;

const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Every shard name `pattern` (the user's `shards`) stands for, in order (module docs).
pub fn expand_shards(pattern: &str) -> Result<Vec<String>> {
    let bad = |why: String| TrdataError::config(super::SHARDS, format!("{pattern:?} {why}"));
    let mut out = Vec::new();
    for part in pattern.split("::") {
        let chars: Vec<char> = part.chars().collect();
        let names = parts(&chars).map_err(|e| bad(e.to_string()))?;
        if out.len() + names.len() > MAX_SHARDS {
            return Err(bad(format!("expands to more than {MAX_SHARDS} shard names")));
        }
        out.extend(names.into_iter().map(|n| unescape(&n)));
    }
    Ok(out)
}

enum Refused {
    Unbalanced,
    TooMany,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unbalanced => write!(f, "has unbalanced braces"),
            Self::TooMany => write!(f, "expands to more than {MAX_SHARDS} shard names"),
        }
    }
}

type Expanded = std::result::Result<Vec<String>, Refused>;

/// `\x` → `x` (a trailing backslash stays), applied once to each finished name, as braceexpand does.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        match (c, it.peek()) {
            ('\\', Some(&next)) if next != '\n' => {
                out.push(next);
                it.next();
            }
            _ => out.push(c),
        }
    }
    out
}

/// The names of a pattern: the product of its literal runs and brace expressions (escapes kept).
fn parts(p: &[char]) -> Expanded {
    let mut items: Vec<Vec<String>> = Vec::new();
    let (mut start, mut pos, mut depth) = (0usize, 0usize, 0i64);
    while pos < p.len() {
        match p[pos] {
            '\\' => {
                pos += 2;
                continue;
            }
            '{' => {
                if depth == 0 && pos > start {
                    items.push(vec![p[start..pos].iter().collect()]);
                    start = pos;
                }
                depth += 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    let expr = &p[start + 1..pos];
                    match expression(expr)? {
                        Some(alternatives) => items.push(alternatives),
                        None => {
                            items.push(vec!["{".into()]);
                            items.push(parts(expr)?);
                            items.push(vec!["}".into()]);
                        }
                    }
                    start = pos + 1;
                }
            }
            _ => {}
        }
        pos += 1;
    }
    if depth != 0 {
        return Err(Refused::Unbalanced);
    }
    if start < pos.min(p.len()) {
        items.push(vec![p[start..].iter().collect()]);
    }
    product(items)
}

fn product(items: Vec<Vec<String>>) -> Expanded {
    let mut total = 1usize;
    for i in &items {
        total = total.saturating_mul(i.len());
    }
    if total > MAX_SHARDS {
        return Err(Refused::TooMany);
    }
    let mut out = vec![String::new()];
    for alternatives in items {
        out = out.iter().flat_map(|prefix| alternatives.iter().map(move |a| format!("{prefix}{a}"))).collect();
    }
    Ok(out)
}

/// A range or a list of alternatives; None for anything else (literal braces).
fn expression(expr: &[char]) -> std::result::Result<Option<Vec<String>>, Refused> {
    let text: String = expr.iter().collect();
    if let Some(r) = int_range(&text)? {
        return Ok(Some(r));
    }
    if let Some(r) = char_range(&text) {
        return Ok(Some(r));
    }
    alternatives(expr)
}

/// `A..B[..S]` split, or None.
fn range_fields(text: &str) -> Option<(&str, &str, Option<&str>)> {
    let mut it = text.splitn(3, "..");
    let (a, b) = (it.next()?, it.next()?);
    let step = it.next();
    Some((a, b, step))
}

fn int_field(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn step_field(step: Option<&str>) -> Option<Option<u64>> {
    match step {
        None => Some(None),
        Some(s) if int_field(s) => Some(Some(s.trim_start_matches('-').parse::<u64>().unwrap_or(u64::MAX))),
        Some(_) => None,
    }
}

fn int_range(text: &str) -> std::result::Result<Option<Vec<String>>, Refused> {
    let Some((a, b, step)) = range_fields(text) else { return Ok(None) };
    let Some(step) = step_field(step) else { return Ok(None) };
    if !int_field(a) || !int_field(b) {
        return Ok(None);
    }
    let padded = [a, b].iter().any(|s| *s != "0" && *s != "-0" && (s.starts_with('0') || s.starts_with("-0")));
    let width = if padded { a.len().max(b.len()) } else { 0 };
    let (Ok(start), Ok(end)) = (a.parse::<i128>(), b.parse::<i128>()) else { return Err(Refused::TooMany) };
    let step = i128::from(step.filter(|&s| s != 0).unwrap_or(1));
    if (end - start).abs() / step + 1 > MAX_SHARDS as i128 {
        return Err(Refused::TooMany);
    }
    let pad = |i: i128| {
        let digits = i.unsigned_abs().to_string();
        let sign = if i < 0 { "-" } else { "" };
        let fill = width.saturating_sub(digits.len() + sign.len());
        format!("{sign}{}{digits}", "0".repeat(fill))
    };
    let mut out = Vec::new();
    let mut i = start;
    if start < end {
        while i <= end {
            out.push(pad(i));
            i += step;
        }
    } else {
        while i >= end {
            out.push(pad(i));
            i -= step;
        }
    }
    Ok(Some(out))
}

fn char_range(text: &str) -> Option<Vec<String>> {
    let (a, b, step) = range_fields(text)?;
    let step = step_field(step)?;
    let letter = |s: &str| (s.len() == 1 && s.as_bytes()[0].is_ascii_alphabetic()).then(|| s.as_bytes()[0]);
    let (a, b) = (letter(a)?, letter(b)?);
    let pos = |c: u8| ALPHABET.iter().position(|&x| x == c).expect("a letter") as i64;
    let (start, end) = (pos(a), pos(b));
    let step = step.filter(|&s| s != 0).unwrap_or(1).min(ALPHABET.len() as u64) as i64;
    let mut out = Vec::new();
    let mut i = start;
    if start < end {
        while i <= end {
            out.push((ALPHABET[i as usize] as char).to_string());
            i += step;
        }
    } else {
        while i >= end {
            out.push((ALPHABET[i as usize] as char).to_string());
            i -= step;
        }
    }
    Some(out)
}

/// `a,b,…` at depth 0, each expanded; None without a top-level comma or with unbalanced braces.
fn alternatives(seq: &[char]) -> std::result::Result<Option<Vec<String>>, Refused> {
    let mut pieces: Vec<&[char]> = Vec::new();
    let (mut start, mut pos, mut depth) = (0usize, 0usize, 0i64);
    while pos < seq.len() {
        match seq[pos] {
            '\\' => {
                pos += 2;
                continue;
            }
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                pieces.push(&seq[start..pos]);
                start = pos + 1;
            }
            _ => {}
        }
        pos += 1;
    }
    if depth != 0 || pieces.is_empty() {
        return Ok(None);
    }
    pieces.push(&seq[start.min(seq.len())..]);
    let mut out = Vec::new();
    for piece in pieces {
        out.extend(parts(piece)?);
        if out.len() > MAX_SHARDS {
            return Err(Refused::TooMany);
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_expand_as_braceexpand_does() {
        let e = |p: &str| expand_shards(p).unwrap();
        assert_eq!(e("t-{000..002}.tar"), ["t-000.tar", "t-001.tar", "t-002.tar"]);
        assert_eq!(e("{a,b}/x{1..2}"), ["a/x1", "a/x2", "b/x1", "b/x2"]);
        assert_eq!(e("x{,.bak}"), ["x", "x.bak"]);
        assert_eq!(e("{-01..1}"), ["-01", "000", "001"]);
        assert_eq!(e("{e..a..2}"), ["e", "c", "a"]);
        assert_eq!(e(r"{1\{2,3}"), ["1{2", "3"]);
        assert_eq!(e("a{b{c,d}e}f"), ["a{bce}f", "a{bde}f"]);
        assert_eq!(e("{}"), ["{}"]);
        assert_eq!(e("a::b{1,2}"), ["a", "b1", "b2"]);
        for bad in ["x{1,2", "{0..99999999}", "{0..999}{0..999}{0..9}"] {
            assert!(matches!(expand_shards(bad), Err(TrdataError::Config { parameter, .. }) if parameter == "shards"));
        }
    }
}
