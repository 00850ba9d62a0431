//! Class names from a Parquet file's `huggingface` key-value metadata (what `datasets` writes:
//! `{"info": {"features": {"<label>": {"names": [...], "_type": "ClassLabel"}}}}`), read with the core's JSON
//! lexer: only the path to the label's feature is followed, everything else skipped (iteratively, nesting capped
//! by the lexer); at most [`MAX_CLASSES`] names of at most [`MAX_CLASS_NAME_BYTES`] bytes, from a text of at most
//! [`MAX_HF_JSON_BYTES`].

use super::{MAX_CLASS_NAME_BYTES, MAX_CLASSES, MAX_HF_JSON_BYTES};
use crate::error::Result;
use crate::json::{self, LexResult, Lexer, Surrogates, SyntaxError};
use crate::storage::ObjectReader;
use parquet::file::metadata::ParquetMetaData;

/// Class names of `label` in a `huggingface` metadata JSON text (`info.features.<label>` of `_type`
/// `ClassLabel`), None when it declares none.
pub fn class_names(text: &[u8], label: &str) -> std::result::Result<Option<Vec<String>>, String> {
    if text.len() > MAX_HF_JSON_BYTES {
        return Err(format!("its huggingface metadata of {} bytes is over {MAX_HF_JSON_BYTES}", text.len()));
    }
    let err = |e: SyntaxError| format!("its huggingface metadata JSON: {} at byte {}", e.what, e.at);
    json::check_utf8(text).map_err(err)?;
    let mut lx = Lexer::new(text);
    lx.ws();
    let found = enter(&mut lx, "info", 0).map_err(err)?
        && enter(&mut lx, "features", 1).map_err(err)?
        && enter(&mut lx, label, 2).map_err(err)?;
    if !found {
        return Ok(None);
    }
    class_label(&mut lx).map_err(err)
}

/// The object at the cursor (`depth` deep): move to the value of `key`, true; false when it has none or is no
/// object.
fn enter(lx: &mut Lexer<'_>, key: &str, depth: usize) -> LexResult<bool> {
    if lx.peek() != Some(b'{') {
        return Ok(false);
    }
    lx.i += 1;
    let mut first = true;
    while let Some((a, b, esc)) = lx.next_key(&mut first)? {
        if lx.unescape(a, b, esc, key.len(), Surrogates::Refuse).is_ok_and(|k| k == key.as_bytes()) {
            return Ok(true);
        }
        lx.skip_value(depth + 1)?;
    }
    Ok(false)
}

/// A feature object at the cursor: its names when its `_type` is `ClassLabel`.
fn class_label(lx: &mut Lexer<'_>) -> LexResult<Option<Vec<String>>> {
    if lx.peek() != Some(b'{') {
        return Ok(None);
    }
    lx.i += 1;
    let (mut is_class_label, mut names) = (false, None);
    let mut first = true;
    let fail = |at: usize, what: &str| SyntaxError { at, what: what.to_string() };
    while let Some((a, b, esc)) = lx.next_key(&mut first)? {
        let key = lx.unescape(a, b, esc, 16, Surrogates::Refuse).unwrap_or_default();
        let at = lx.peek_at();
        match key.as_slice() {
            b"_type" if lx.peek() == Some(b'"') => {
                let (a, b, esc) = lx.string_span()?;
                is_class_label = lx.unescape(a, b, esc, 16, Surrogates::Refuse).is_ok_and(|t| t == b"ClassLabel");
            }
            b"names" if lx.peek() == Some(b'[') => {
                lx.i += 1;
                let mut list = Vec::new();
                let mut first = true;
                while lx.next_elem(&mut first)? {
                    let at = lx.peek_at();
                    if lx.peek() != Some(b'"') {
                        return Err(fail(at, "a class name that is not a string"));
                    }
                    if list.len() >= MAX_CLASSES {
                        return Err(fail(at, "more class names than the limit"));
                    }
                    let (a, b, esc) = lx.string_span()?;
                    let name = lx
                        .unescape(a, b, esc, MAX_CLASS_NAME_BYTES, Surrogates::Refuse)
                        .map_err(|_| fail(at, "a class name too long or with a lone surrogate"))?;
                    list.push(String::from_utf8(name).map_err(|_| fail(at, "a class name that is not UTF-8"))?);
                }
                names = Some(list);
            }
            _ => {
                let _ = at;
                lx.skip_value(4)?;
            }
        }
    }
    Ok(if is_class_label { names } else { None })
}

/// The class names a file's `huggingface` metadata declares for `label`.
pub(super) fn file_classes(r: &ObjectReader, meta: &ParquetMetaData, label: &str) -> Result<Vec<String>> {
    let kv = meta.file_metadata().key_value_metadata();
    let Some(text) = kv.and_then(|kv| kv.iter().find(|k| k.key == "huggingface")).and_then(|k| k.value.as_ref()) else {
        return Ok(Vec::new());
    };
    Ok(class_names(text.as_bytes(), label).map_err(|m| r.source_error(m))?.unwrap_or_default())
}
