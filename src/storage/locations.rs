//! storage/locations — the rules for a source's paths as a whole, checked once here when a source is made:
//! every path is a local path or every one is a URL (a source reads from one kind of place), each URL is checked
//! ([`Location::parse`]), and `storage_options` come only with URLs. Sources whose files Python reads
//! (annotations, the classic datasets' formats) take local paths only: [`local_only`] says to pack them first.

use super::{Location, STORAGE_OPTIONS, StorageOptions};
use crate::error::{Result, TrdataError};
use std::path::PathBuf;

/// Check `paths` (the user's `parameter`) with `options`: all local or all URLs (each URL valid: an object, or
/// with `prefixes` a bucket prefix to list), and options only for URLs. Returns whether they are URLs.
pub fn check_locations(parameter: &str, paths: &[PathBuf], options: &StorageOptions, prefixes: bool) -> Result<bool> {
    let mut first: Option<(usize, bool)> = None;
    for (i, p) in paths.iter().enumerate() {
        let location = if prefixes { Location::parse_prefix(parameter, p)? } else { Location::parse(parameter, p)? };
        let remote = location.is_remote();
        match first {
            None => first = Some((i, remote)),
            Some((j, r)) if r != remote => {
                let (local, url) = if remote { (j, i) } else { (i, j) };
                return Err(TrdataError::config(
                    parameter,
                    format!(
                        "mixes local paths and URLs ({:?}, element {local}, and {:?}, element {url}): one source \
                         reads from one kind of place",
                        paths[local], paths[url]
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    let remote = first.is_some_and(|(_, r)| r);
    if !remote && !options.is_empty() {
        return Err(TrdataError::config(
            STORAGE_OPTIONS,
            "apply to URLs (s3://, gs://, az://, http(s)://), and the paths are local".to_string(),
        ));
    }
    Ok(remote)
}

/// A source that reads its files in Python (`source`, e.g. "CocoDetection") refuses a URL in `parameter` and any
/// `storage_options`: a `ConfigError` that says to pack the data first.
pub fn local_only(source: &str, parameter: &str, path: &std::path::Path, options_given: bool) -> Result<()> {
    let is_url =
        path.to_str().is_some_and(|s| Location::parse(parameter, path).map_or(s.contains("://"), |l| l.is_remote()));
    if !is_url && !options_given {
        return Ok(());
    }
    let (name, what) = if is_url {
        (parameter, format!("{:?} is a URL", path))
    } else {
        (STORAGE_OPTIONS, "storage_options were given".to_string())
    };
    Err(TrdataError::config(
        name,
        format!(
            "{what}, but {source} reads local files only: pack it first (trdata.pack({source}(...), \
             \"s3://bucket/x.trd\"), then trdata.Packed(\"s3://bucket/x.trd\")) or copy the files locally"
        ),
    ))
}

/// Whether a key or path holds glob characters (`*`, `?`, `[`).
fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// `locations` with every pattern replaced by the files it names, in order, each pattern's files sorted: an `hf://`
/// pattern by the Hub's listing of one commit ([`super::hf::expand_locations`]), a bucket URL whose key holds
/// `*`, `?`, `[…]` or `**` by a listing of its literal prefix matched with the same glob rules (`*` within a
/// `/`-separated part, `**` across parts). A pattern that names nothing is a `SourceError` naming it; every other
/// location goes on as it is (local globs are the Python side's, as Python's `glob` has them).
pub fn expand_patterns(parameter: &str, locations: &[Location], options: &StorageOptions) -> Result<Vec<Location>> {
    let mut out = Vec::with_capacity(locations.len());
    for location in super::hf::expand_locations(parameter, locations, options)? {
        let Location::Url { url, .. } = &location else {
            out.push(location);
            continue;
        };
        let key = url.path().trim_start_matches('/').to_string();
        if !has_glob(&key) {
            out.push(location);
            continue;
        }
        let literal = key.find(['*', '?', '[']).map_or(0, |k| key[..k].rfind('/').map_or(0, |s| s + 1));
        let mut prefix = url.clone();
        prefix.set_path(&key[..literal]);
        let prefix = Location::parse_prefix(parameter, std::path::Path::new(prefix.as_str()))?;
        let pattern = &key[literal..];
        let mut found: Vec<_> = super::list::list_prefix(parameter, &prefix, options)?
            .into_iter()
            .filter(|o| super::hf::glob_match(pattern, &o.relative))
            .map(|o| o.url)
            .collect();
        if found.is_empty() {
            return Err(TrdataError::Source {
                path: url.as_str().into(),
                message: "the pattern names no object".into(),
            });
        }
        found.sort();
        for u in found {
            out.push(Location::parse(parameter, std::path::Path::new(&u))?);
        }
    }
    Ok(out)
}
