//! storage/hf — `hf://datasets/<org>/<name>[@<revision>]/<path or glob>`: files of a Hugging Face Hub dataset
//! repository, found with the Hub's own APIs and read by ranged GETs of their resolve URLs, under the room's
//! retry rules and counters.
//!
//! # Grammar ([`HfPattern::parse`], no network)
//! `hf://datasets/<org>/<name>[@<revision>]/<path>` as `huggingface_hub`'s `hf://` URIs: the `datasets/` prefix is
//! required (models, spaces, … are not read yet); the id is exactly two segments (`org/name`, each 1–96 of
//! `[A-Za-z0-9_.-]`, no `--`/`..`, not starting or ending with `-`/`.`); an `@` counts only right after the name
//! (deeper it is part of the path); a revision matching `refs/convert/<word>` or `refs/pr/<digits>` is taken whole
//! (slashes included: `@refs/convert/parquet/default/train/*.parquet`), any other ends at the next `/`; the
//! revision is percent-decoded (`refs%2Fconvert%2Fparquet`); default `main`. The path is a glob: `*` and `?`
//! within a segment, `[...]` classes (`!`/`^` negate, ranges), `**` as a whole segment for any number of
//! segments (zero included). No empty, `.` or `..` segment, no leading or trailing `/`.
//!
//! # Endpoint, token
//! Endpoint: `storage_options['hf_endpoint']`, else `HF_ENDPOINT`, else `https://huggingface.co`. Token:
//! `storage_options['hf_token']`, else `HF_TOKEN` (or the legacy `HUGGING_FACE_HUB_TOKEN`), else the file
//! `HF_TOKEN_PATH` (default `$HF_HOME/token`, `HF_HOME` default `$XDG_CACHE_HOME/huggingface` or
//! `~/.cache/huggingface`), stripped, empty = none ([`token_from_env`]). The token goes as `authorization: Bearer`
//! to the endpoint's origin only: never to another host a redirect or a listing's next link names (reqwest drops it
//! on a cross-origin redirect; our requests add it only when the URL's origin is the endpoint's).
//!
//! # Expansion ([`expand`])
//! 1. The revision is resolved to a commit once (`GET {endpoint}/api/datasets/{org}/{name}/revision/{rev}`, its
//!    JSON `sha`, else the `X-Repo-Commit` header; 40 or 64 hex digits), so every listing and read sees one
//!    snapshot: the files' URLs are `{endpoint}/datasets/{org}/{name}/resolve/{commit}/{path}`.
//! 2. The longest literal folder of the glob is listed (`GET .../tree/{commit}/{folder}?recursive=true&
//!    expand=false`), following `Link: <…>; rel="next"` pages. Checked: at most [`MAX_PAGES`] pages of at most
//!    [`MAX_PAGE_BYTES`] each, [`MAX_ENTRIES`] entries in all, a next link on the endpoint's origin only; every
//!    entry is an object with a string `type`, a `path` of at most [`MAX_PATH_BYTES`] bytes that lies under the
//!    folder and has no empty, `.` or `..` segment nor a leading `/`, and for a file an integer `size` (`lfs.size`
//!    when given); a path listed twice is refused. A folder the Hub does not have (404) lists nothing.
//! 3. The files whose path matches the glob, sorted by path; none is a `SourceError` naming the pattern.
//!
//! # Reads ([`HfObject`], behind `ObjectReader` as `Location::Hf`)
//! The size is the listing's: no HEAD (a HEAD through the Hub's 302 lands on a file store URL presigned for GET).
//! Each read is one ranged GET of the resolve URL that follows at most [`MAX_REDIRECTS`] redirects (never from
//! https down to http). The answer must be `206` with `Content-Range: bytes a-b/size` equal to what was asked
//! and the listed size (a `200` with the whole file, another range or another size is permanent), no content
//! encoding, and exactly the bytes asked for (a short body is retried, a longer one is permanent). 408, 429 and
//! 5xx answers and transport faults are retried under the [`RetryPolicy`]; a 429 or 503 waits what the answer says
//! (`RateLimit: …;r=0;t=N`, else `Retry-After: N` seconds), at most [`MAX_RETRY_AFTER`], instead of the backoff.
//! 401/403 (token), 404 and other statuses are permanent. Every attempt counts as a request, every retry as a
//! retry ([`super::StorageStats`]). The listing and revision requests retry the same way.
//!
//! # Fork safety
//! One HTTP client per process, tagged with the pid that built it and built again in a forked child (the
//! parent's is leaked, never dropped: the room's docs).

use super::remote::{Fault, after_failure, runtime};
use super::{Location, RetryPolicy, STORAGE_OPTIONS, StorageCounters, StorageOptions};
use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use crate::json::{self, Lexer, Surrogates};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The Hub's endpoint when neither `hf_endpoint` nor `HF_ENDPOINT` names another.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// Most pages of one listing.
pub const MAX_PAGES: u32 = 10_000;
/// Most entries (files and folders) of one listing.
pub const MAX_ENTRIES: usize = 1_000_000;
/// Most bytes of one listing page (the Hub sends at most 1000 entries, a few hundred KiB).
pub const MAX_PAGE_BYTES: u64 = 64 << 20;
/// Most bytes of the revision API's answer.
pub const MAX_REVISION_BYTES: u64 = 16 << 20;
/// Longest path in a repository (and longest pattern).
pub const MAX_PATH_BYTES: usize = 4096;
/// Most segments of a glob (bounds the matcher's work per listed path).
pub const MAX_GLOB_SEGMENTS: usize = 64;
/// Longest revision.
pub const MAX_REVISION_BYTES_TEXT: usize = 256;
/// Longest wait a 429/503 answer can ask for.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Most redirects one request follows.
pub const MAX_REDIRECTS: usize = 5;
/// Most bytes read of a token file.
const MAX_TOKEN_FILE_BYTES: u64 = 64 << 10;
/// The keys of `storage_options` an hf:// source takes.
pub const HF_KEYS: [&str; 6] =
    ["hf_endpoint", "hf_token", "max_retries", "retry_init_backoff", "retry_max_backoff", "timeout"];

/// An `hf://` pattern, parsed and checked ([`HfPattern::parse`]); nothing is asked of the Hub yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfPattern {
    /// The pattern as the user wrote it (how errors name it).
    pub text: String,
    /// The dataset's id, `org/name`.
    pub repo: String,
    /// The revision (a branch, tag, commit or `refs/convert/parquet`), percent-decoded; `main` by default.
    pub revision: String,
    /// The path or glob inside the repository (no leading `/`).
    pub path: String,
}

/// One file of a Hub dataset, found by [`expand`]: open it with `ObjectReader::open(&Location::Hf(file), &options)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfFile {
    /// Its resolve URL, pinned to the commit: `{endpoint}/datasets/{org}/{name}/resolve/{commit}/{path}`.
    pub url: String,
    /// Its path in the repository.
    pub path: String,
    /// Its size in bytes (the listing's).
    pub size: u64,
    /// The dataset's id, `org/name`.
    pub repo: String,
    /// The commit the revision resolved to.
    pub commit: String,
}

impl HfFile {
    /// How messages name it: `hf://datasets/{org}/{name}@{commit}/{path}`.
    pub fn name(&self) -> String {
        format!("hf://datasets/{}@{}/{}", self.repo, self.commit, self.path)
    }
}

impl HfPattern {
    /// `text` (the user's `parameter`) as an `hf://` pattern (the module docs' grammar); a bad one is a
    /// `ConfigError` naming `parameter`.
    pub fn parse(parameter: &str, text: &str) -> Result<Self> {
        let bad = |why: &str| TrdataError::config(parameter, format!("{text:?} {why}"));
        const FORM: &str = "hf://datasets/<org>/<name>[@<revision>]/<path or glob>";
        let rest = text.strip_prefix("hf://").ok_or_else(|| bad(&format!("must be {FORM}")))?;
        if text.len() > MAX_PATH_BYTES + 512 {
            return Err(bad("is too long"));
        }
        if text.chars().any(char::is_control) {
            return Err(bad("must not contain control characters"));
        }
        let (kind, rest) = rest.split_once('/').unwrap_or((rest, ""));
        match kind {
            "datasets" => {}
            "models" | "spaces" | "kernels" | "buckets" => {
                return Err(bad(&format!("names a {kind} repository: only datasets are read ({FORM})")));
            }
            _ => return Err(bad(&format!("must name a dataset: {FORM} (models are not read)"))),
        }
        let single = || bad(&format!("names a repository with one segment: a dataset's id is <org>/<name> ({FORM})"));
        let (org, rest) = rest.split_once('/').ok_or_else(single)?;
        if org.contains('@') {
            return Err(single()); // `squad@main/x`: a revision after a one-segment id
        }
        let end = rest.find(['@', '/']).unwrap_or(rest.len());
        let (name, mut rest) = rest.split_at(end);
        if name.is_empty() {
            return Err(single());
        }
        for segment in [org, name] {
            check_id_segment(segment)
                .map_err(|why| bad(&format!("has the repository id segment {segment:?}: {why}")))?;
        }
        let revision = match rest.strip_prefix('@') {
            None => "main".to_string(),
            Some(r) => {
                let take = special_ref_len(r).unwrap_or_else(|| r.find('/').unwrap_or(r.len()));
                let (raw, after) = r.split_at(take);
                rest = after;
                let revision = unquote(raw).ok_or_else(|| bad("has a revision that is not UTF-8 once decoded"))?;
                if revision.is_empty() || revision.len() > MAX_REVISION_BYTES_TEXT {
                    return Err(bad("has an empty or overlong revision after '@'"));
                }
                if revision.chars().any(char::is_control) {
                    return Err(bad("has a revision with control characters"));
                }
                revision
            }
        };
        let path = rest.strip_prefix('/').unwrap_or(rest);
        if path.is_empty() {
            return Err(bad(&format!("must name files after the repository, e.g. data/train-*.parquet ({FORM})")));
        }
        check_repo_path(path)
            .map_err(|why| bad(&format!("has the path {path:?}, which {why} (a folder's files: folder/**)")))?;
        if path.split('/').count() > MAX_GLOB_SEGMENTS {
            return Err(bad(&format!("has more than {MAX_GLOB_SEGMENTS} path segments")));
        }
        Ok(Self { text: text.to_string(), repo: format!("{org}/{name}"), revision, path: path.to_string() })
    }

    /// Whether the path has glob characters (`*`, `?`, `[`).
    pub fn is_glob(&self) -> bool {
        self.path.contains(['*', '?', '['])
    }

    /// The folder listed for it: the segments before the first one with glob characters (for a plain path,
    /// its parent); empty for the repository's root.
    pub fn folder(&self) -> &str {
        let segments: Vec<&str> = self.path.split('/').collect();
        let literal = segments.iter().take_while(|s| !s.contains(['*', '?', '['])).count();
        let n = literal.min(segments.len() - 1);
        let len = segments[..n].iter().map(|s| s.len() + 1).sum::<usize>();
        &self.path[..len.saturating_sub(1)]
    }
}

/// A segment of a repository id, as the Hub allows it.
fn check_id_segment(s: &str) -> std::result::Result<(), &'static str> {
    if s.is_empty() || s.len() > 96 {
        return Err("must have 1 to 96 characters");
    }
    if !s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
        return Err("may hold only letters, digits, '-', '_' and '.'");
    }
    if s.contains("--") || s.contains("..") {
        return Err("must not contain '--' or '..'");
    }
    if s.starts_with(['-', '.']) || s.ends_with(['-', '.']) {
        return Err("must not start or end with '-' or '.'");
    }
    Ok(())
}

/// A path inside a repository (a listed one or a glob): not empty, at most [`MAX_PATH_BYTES`], no leading `/`,
/// no empty, `.` or `..` segment, no control character or backslash.
fn check_repo_path(p: &str) -> std::result::Result<(), &'static str> {
    if p.is_empty() || p.len() > MAX_PATH_BYTES {
        return Err("is empty or longer than 4096 bytes");
    }
    if p.starts_with('/') {
        return Err("starts with '/'");
    }
    if p.chars().any(|c| c.is_control() || c == '\\') {
        return Err("holds a control character or a backslash");
    }
    if p.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        return Err("has an empty, '.' or '..' segment");
    }
    Ok(())
}

/// The length of a revision taken whole: `refs/convert/<[\w.-]+>` or `refs/pr/<digits>` at the start of `r`.
fn special_ref_len(r: &str) -> Option<usize> {
    let run = |t: &str, ok: fn(char) -> bool| t.find(|c: char| !ok(c)).unwrap_or(t.len());
    if let Some(t) = r.strip_prefix("refs/convert/") {
        let n = run(t, |c| c.is_alphanumeric() || matches!(c, '_' | '.' | '-'));
        return (n > 0).then_some("refs/convert/".len() + n);
    }
    if let Some(t) = r.strip_prefix("refs/pr/") {
        let n = run(t, |c| c.is_ascii_digit());
        return (n > 0).then_some("refs/pr/".len() + n);
    }
    None
}

/// Percent-decoding as Python's `unquote` (a `%` not followed by two hex digits stays as it is); None when the
/// bytes are not UTF-8.
fn unquote(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |k: usize| b.get(k).and_then(|c| (*c as char).to_digit(16));
        match (b[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Percent-encoding as Python's `quote`: letters, digits and `_.-~` stay, `/` too when `keep_slash`.
fn quote(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'~') || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether `path` matches the glob `pattern` (the module docs' rules). Work is bounded by the segments of both.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let ps: Vec<&str> = pattern.split('/').collect();
    let ss: Vec<&str> = path.split('/').collect();
    let ns = ss.len();
    // next[j]: ps[i+1..] matches ss[j..]; row[j]: ps[i..] matches ss[j..].
    let mut next = vec![false; ns + 1];
    next[ns] = true;
    for p in ps.iter().rev() {
        let mut row = vec![false; ns + 1];
        for j in (0..=ns).rev() {
            row[j] = if *p == "**" {
                next[j] || (j < ns && row[j + 1])
            } else {
                j < ns && next[j + 1] && segment_match(p, ss[j])
            };
        }
        next = row;
    }
    next[0]
}

/// One segment against one glob segment: `*`, `?`, `[...]` (an unclosed `[` is itself).
fn segment_match(pattern: &str, s: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = s.chars().collect();
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < s.len() {
        if p.get(i) == Some(&'*') {
            while p.get(i) == Some(&'*') {
                i += 1;
            }
            star = Some((i, j));
            continue;
        }
        if i < p.len() {
            let (ok, after) = match_one(&p, i, s[j]);
            if ok {
                i = after;
                j += 1;
                continue;
            }
        }
        match star {
            Some((si, sj)) => {
                i = si;
                j = sj + 1;
                star = Some((si, sj + 1));
            }
            None => return false,
        }
    }
    while p.get(i) == Some(&'*') {
        i += 1;
    }
    i == p.len()
}

/// Whether the pattern item at `p[i]` (not `*`) matches `c`, and the index after the item.
fn match_one(p: &[char], i: usize, c: char) -> (bool, usize) {
    match p[i] {
        '?' => (true, i + 1),
        '[' => {
            let mut k = i + 1;
            let negate = matches!(p.get(k), Some('!' | '^'));
            if negate {
                k += 1;
            }
            let start = k;
            if p.get(k) == Some(&']') {
                k += 1;
            }
            let Some(end) = p[k.min(p.len())..].iter().position(|&x| x == ']').map(|e| k + e) else {
                return (c == '[', i + 1); // unclosed: a literal '['
            };
            let class = &p[start..end];
            let mut hit = false;
            let mut m = 0;
            while m < class.len() {
                if m + 2 < class.len() && class[m + 1] == '-' {
                    hit |= class[m] <= c && c <= class[m + 2];
                    m += 3;
                } else {
                    hit |= class[m] == c;
                    m += 1;
                }
            }
            (hit != negate, end + 1)
        }
        x => (x == c, i + 1),
    }
}

/// The token the environment gives (`get` reads a variable): `HF_TOKEN` (or, when unset or empty, the legacy
/// `HUGGING_FACE_HUB_TOKEN`), stripped; else the first 64 KiB of the token file (`HF_TOKEN_PATH`, else
/// `$HF_HOME/token`, `HF_HOME` defaulting to `$XDG_CACHE_HOME/huggingface` or `~/.cache/huggingface`), stripped.
/// Empty is none.
pub fn token_from_env(get: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let clean = |s: String| Some(s.trim().to_string()).filter(|t| !t.is_empty());
    let var = |k: &str| get(k).filter(|v| !v.is_empty());
    if let Some(t) = var("HF_TOKEN").or_else(|| var("HUGGING_FACE_HUB_TOKEN")) {
        return clean(t);
    }
    let home = get("HOME").unwrap_or_default();
    let expand = |p: String| match p.strip_prefix("~/") {
        Some(rest) => format!("{home}/{rest}"),
        None => p,
    };
    let path = var("HF_TOKEN_PATH").map(expand).unwrap_or_else(|| {
        let hf_home = var("HF_HOME").map(expand).unwrap_or_else(|| {
            let cache = var("XDG_CACHE_HOME").map(expand).unwrap_or_else(|| format!("{home}/.cache"));
            format!("{cache}/huggingface")
        });
        format!("{hf_home}/token")
    });
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path).ok()?.take(MAX_TOKEN_FILE_BYTES).read_to_string(&mut text).ok()?;
    clean(text)
}

/// Where the Hub is and how to ask it: from `storage_options` and the environment.
#[derive(Debug, Clone)]
pub(super) struct HfConfig {
    /// The endpoint (no trailing `/`).
    endpoint: url::Url,
    token: Option<String>,
    policy: RetryPolicy,
}

impl HfConfig {
    /// The configuration `options` and the environment (`get`) give: only [`HF_KEYS`] are accepted.
    pub(super) fn new(options: &StorageOptions, get: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        for (key, _) in options.iter() {
            if !HF_KEYS.contains(&key) {
                return Err(TrdataError::config(
                    STORAGE_OPTIONS,
                    format!("{key:?} is not an option of hf:// URLs (they take {})", HF_KEYS.join(", ")),
                ));
            }
        }
        let policy = RetryPolicy::from_options(options)?;
        let (text, parameter) = match options.get("hf_endpoint") {
            Some(v) => (v.trim().to_string(), format!("{STORAGE_OPTIONS}['hf_endpoint']")),
            None => match get("HF_ENDPOINT").filter(|v| !v.trim().is_empty()) {
                Some(v) => (v.trim().to_string(), "HF_ENDPOINT".to_string()),
                None => (DEFAULT_ENDPOINT.to_string(), "HF_ENDPOINT".to_string()),
            },
        };
        let bad = |why: String| TrdataError::config(&parameter, format!("{text:?} {why}"));
        let endpoint = url::Url::parse(text.trim_end_matches('/')).map_err(|e| bad(format!("is not a URL ({e})")))?;
        if !matches!(endpoint.scheme(), "http" | "https") || endpoint.host_str().is_none_or(str::is_empty) {
            return Err(bad("must be an http(s):// URL with a host".into()));
        }
        if endpoint.query().is_some() || endpoint.fragment().is_some() || !endpoint.username().is_empty() {
            return Err(bad("must not have credentials, a query or a fragment".into()));
        }
        let token = match options.get("hf_token") {
            Some(t) => Some(t.trim().to_string()).filter(|t| !t.is_empty()),
            None => token_from_env(get),
        };
        if token.as_deref().is_some_and(|t| t.chars().any(|c| c.is_control() || c == ' ')) {
            return Err(TrdataError::config(
                STORAGE_OPTIONS,
                "the Hugging Face token has spaces or control characters",
            ));
        }
        Ok(Self { endpoint, token, policy })
    }

    /// The endpoint as text, no trailing `/`.
    fn base(&self) -> String {
        self.endpoint.as_str().trim_end_matches('/').to_string()
    }

    /// Whether `url` is on the endpoint's origin (scheme, host, port): the only one the token goes to.
    fn is_hub(&self, url: &url::Url) -> bool {
        url.scheme() == self.endpoint.scheme()
            && url.host_str() == self.endpoint.host_str()
            && url.port_or_known_default() == self.endpoint.port_or_known_default()
    }
}

/// Limits of a listing (the constants, smaller in tests).
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) pages: u32,
    pub(super) entries: usize,
    pub(super) page_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self { pages: MAX_PAGES, entries: MAX_ENTRIES, page_bytes: MAX_PAGE_BYTES }
    }
}

/// The files of `pattern` (an `hf://` pattern given as `parameter`), read with `options` and the environment
/// (the module docs): the revision resolved to a commit, the folder listed, the glob matched, sorted by path. A bad
/// pattern or option is a `ConfigError`; an unreachable Hub, a refused token, a bad answer or no match is a
/// `SourceError` naming the pattern.
pub fn expand(parameter: &str, pattern: &str, options: &StorageOptions) -> Result<Vec<HfFile>> {
    let pattern = HfPattern::parse(parameter, pattern)?;
    let config = HfConfig::new(options, &|k| std::env::var(k).ok())?;
    expand_with(&pattern, &config, Limits::default())
}

/// `locations` with every [`Location::HfPattern`] replaced by the files it expands to ([`expand`]: each
/// pattern's files sorted by path, as [`Location::Hf`]), the others kept as they are, in order: what a source of
/// many files calls on its locations before opening each with `ObjectReader::open`.
pub fn expand_locations(parameter: &str, locations: &[Location], options: &StorageOptions) -> Result<Vec<Location>> {
    let mut out = Vec::with_capacity(locations.len());
    for location in locations {
        match location {
            Location::HfPattern(p) => out.extend(expand(parameter, &p.text, options)?.into_iter().map(Location::Hf)),
            other => out.push(other.clone()),
        }
    }
    Ok(out)
}

/// [`expand`]'s work, with the configuration and limits given.
pub(super) fn expand_with(pattern: &HfPattern, config: &HfConfig, limits: Limits) -> Result<Vec<HfFile>> {
    let source = |m: String| TrdataError::Source { path: pattern.text.clone().into(), message: m };
    let counters = StorageCounters::default();
    let commit = resolve_commit(config, &pattern.repo, &pattern.revision, &counters)
        .map_err(|m| source(format!("cannot resolve the revision {:?} of {}: {m}", pattern.revision, pattern.repo)))?;
    let folder = pattern.folder();
    let listed = list_tree(config, &pattern.repo, &commit, folder, limits, &counters)
        .map_err(|m| source(format!("cannot be listed: {m}")))?;
    let mut files: Vec<HfFile> = listed
        .into_iter()
        .filter(|(path, _)| glob_match(&pattern.path, path))
        .map(|(path, size)| HfFile {
            url: format!("{}/datasets/{}/resolve/{commit}/{}", config.base(), pattern.repo, quote(&path, true)),
            path,
            size,
            repo: pattern.repo.clone(),
            commit: commit.clone(),
        })
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    if files.is_empty() {
        return Err(source(format!(
            "no file of {}@{} (commit {commit}) matches {:?} (a folder's files: folder/**)",
            pattern.repo, pattern.revision, pattern.path
        )));
    }
    Ok(files)
}

/// Why one request failed: the fault, the wait the answer asked for, its status.
struct Failure {
    fault: Fault,
    wait: Option<Duration>,
    status: Option<u16>,
}

fn permanent(m: impl Into<String>) -> Failure {
    Failure { fault: Fault::Permanent(m.into()), wait: None, status: None }
}

fn transient(m: impl Into<String>) -> Failure {
    Failure { fault: Fault::Transient(m.into()), wait: None, status: None }
}

/// Run `once` until it succeeds, fails for good or the retries are spent (the room's rule, `after_failure`),
/// sleeping the wait an answer asked for (capped) or else the policy's backoff.
fn attempts<T>(
    policy: &RetryPolicy,
    counters: &StorageCounters,
    mut once: impl FnMut() -> std::result::Result<T, Failure>,
) -> std::result::Result<T, String> {
    let mut k = 0u32;
    loop {
        counters.request();
        match once() {
            Ok(v) => return Ok(v),
            Err(Failure { fault, wait, .. }) => {
                let backoff = after_failure(policy, counters, k, fault)?;
                std::thread::sleep(wait.map_or(backoff, |w| w.min(MAX_RETRY_AFTER)));
                k += 1;
            }
        }
    }
}

/// `fut` on the runtime under the policy's deadline.
fn run<T>(
    policy: &RetryPolicy,
    fut: impl std::future::Future<Output = std::result::Result<T, Failure>>,
) -> std::result::Result<T, Failure> {
    let rt = runtime().map_err(permanent)?;
    let timeout = policy.timeout;
    rt.block_on(async {
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(transient(format!("no complete answer within {timeout:?}"))),
        }
    })
}

/// This process's HTTP client: (pid that built it, the client).
static CLIENT: Mutex<Option<(u32, reqwest::Client)>> = Mutex::new(None);

/// The HTTP client of this process (built on first use and again in a forked child: the module docs).
fn client() -> std::result::Result<reqwest::Client, Failure> {
    let pid = std::process::id();
    let mut slot = CLIENT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((p, c)) = &*slot
        && *p == pid
    {
        return Ok(c.clone());
    }
    if let Some(inherited) = slot.take() {
        std::mem::forget(inherited);
    }
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        let downgrade =
            attempt.previous().last().is_some_and(|p| p.scheme() == "https") && attempt.url().scheme() != "https";
        if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else if downgrade {
            attempt.error("a redirect from https:// to plain http://")
        } else {
            attempt.follow()
        }
    });
    let rt = runtime().map_err(permanent)?;
    let _in_runtime = rt.enter();
    let c = reqwest::Client::builder()
        .redirect(policy)
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| permanent(format!("cannot build the HTTP client: {e}")))?;
    *slot = Some((pid, c.clone()));
    Ok(c)
}

/// One GET of `url` (with `range` = (offset, len)): the token when `url` is the Hub's, redirects followed. A
/// success status gives the answer; any other is a [`Failure`] (module docs: which are retried and how long).
async fn get(
    config: &HfConfig,
    url: &str,
    range: Option<(u64, u64)>,
) -> std::result::Result<reqwest::Response, Failure> {
    let parsed = url::Url::parse(url).map_err(|e| permanent(format!("bad URL {url:?}: {e}")))?;
    let mut req = client()?.get(parsed.clone()).header(reqwest::header::ACCEPT_ENCODING, "identity");
    if let Some(token) = &config.token
        && config.is_hub(&parsed)
    {
        req = req.bearer_auth(token);
    }
    if let Some((offset, len)) = range {
        req = req.header(reqwest::header::RANGE, format!("bytes={offset}-{}", offset + len - 1));
    }
    let resp = req.send().await.map_err(|e| {
        let redirect = e.is_redirect();
        let text = error_chain(&e.without_url());
        if redirect { permanent(format!("bad redirect: {text}")) } else { transient(text) }
    })?;
    let status = resp.status().as_u16();
    if resp.status().is_success() {
        return Ok(resp);
    }
    let wait = if matches!(status, 429 | 503) { server_wait(resp.headers()) } else { None };
    let fault = match status {
        401 | 403 => Fault::Permanent(format!(
            "access denied (HTTP {status}): check the token (storage_options['hf_token'], HF_TOKEN or the token \
             file) and that it may read this dataset (gated datasets need their conditions accepted)"
        )),
        404 => Fault::Permanent("not found (HTTP 404)".to_string()),
        408 | 429 | 500..=599 => Fault::Transient(format!("HTTP {status}")),
        _ => Fault::Permanent(format!("unexpected answer HTTP {status}")),
    };
    Err(Failure { fault, wait, status: Some(status) })
}

/// An error and its sources, in one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// The wait a 429/503 answer asks for: `RateLimit: …;r=0;t=N` (the IETF draft the Hub sends), else
/// `Retry-After: N` (seconds; an HTTP date is not read).
fn server_wait(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(v) = headers.get("ratelimit").and_then(|v| v.to_str().ok()) {
        let param = |name: &str| {
            v.split([';', ',']).filter_map(|p| p.trim().strip_prefix(name)).find_map(|x| x.trim().parse::<u64>().ok())
        };
        if param("r=") == Some(0)
            && let Some(t) = param("t=")
        {
            return Some(Duration::from_secs(t.min(MAX_RETRY_AFTER.as_secs())));
        }
    }
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(|s| Duration::from_secs(s.min(MAX_RETRY_AFTER.as_secs())))
}

/// The whole body of `resp`, at most `cap` bytes (a larger declared or sent body is permanent).
async fn body_capped(mut resp: reqwest::Response, cap: u64) -> std::result::Result<Vec<u8>, Failure> {
    if resp.content_length().is_some_and(|n| n > cap) {
        return Err(permanent(format!("an answer larger than {cap} bytes")));
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transient(error_chain(&e.without_url())))? {
        if out.len() as u64 + chunk.len() as u64 > cap {
            return Err(permanent(format!("an answer larger than {cap} bytes")));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// A commit id: 40 (SHA-1) or 64 (SHA-256) hex digits.
fn is_commit(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The commit `revision` of `repo` is at now.
fn resolve_commit(
    config: &HfConfig,
    repo: &str,
    revision: &str,
    counters: &StorageCounters,
) -> std::result::Result<String, String> {
    let url = format!("{}/api/datasets/{repo}/revision/{}?expand=sha", config.base(), quote(revision, false));
    attempts(&config.policy, counters, || {
        run(&config.policy, async {
            let resp = get(config, &url, None).await?;
            let header = resp.headers().get("x-repo-commit").and_then(|v| v.to_str().ok()).map(str::to_string);
            let body = body_capped(resp, MAX_REVISION_BYTES).await?;
            let sha = parse_revision(&body).map_err(|m| permanent(format!("bad answer of the revision API: {m}")))?;
            let sha =
                sha.or(header).ok_or_else(|| permanent("the answer names no commit (no \"sha\", no X-Repo-Commit)"))?;
            if !is_commit(&sha) {
                return Err(permanent(format!(
                    "the answer's commit {:?} is not a commit id",
                    json::snippet(sha.as_bytes(), 0, 80)
                )));
            }
            Ok(sha.to_ascii_lowercase())
        })
    })
}

/// The `sha` of the revision API's JSON object, if it has one (not yet checked as a commit id).
pub fn parse_revision(body: &[u8]) -> std::result::Result<Option<String>, String> {
    let err = |e: json::SyntaxError| format!("{} at byte {}", e.what, e.at);
    json::check_utf8(body).map_err(err)?;
    let mut lx = Lexer::new(body);
    if lx.peek() != Some(b'{') {
        return Err(format!("expected a JSON object, found {}", lx.found(lx.i)));
    }
    lx.i += 1;
    let (mut first, mut sha) = (true, None);
    while let Some(span) = lx.next_key(&mut first).map_err(err)? {
        if key_is(&lx, span, "sha") {
            sha = Some(string(&mut lx, 128).map_err(|m| format!("\"sha\": {m}"))?);
        } else {
            lx.skip_value(1).map_err(err)?;
        }
    }
    lx.ws();
    if lx.i != body.len() {
        return Err(format!("trailing bytes at byte {}", lx.i));
    }
    Ok(sha)
}

/// Whether the key at `span` is `name` (escapes decoded).
fn key_is(lx: &Lexer<'_>, (a, b, esc): (usize, usize, bool), name: &str) -> bool {
    if !esc {
        return &lx.s[a..b] == name.as_bytes();
    }
    lx.unescape(a, b, esc, 64, Surrogates::Refuse).is_ok_and(|k| k == name.as_bytes())
}

/// The string at the cursor, at most `limit` bytes.
fn string(lx: &mut Lexer<'_>, limit: usize) -> std::result::Result<String, String> {
    let at = lx.peek_at();
    if lx.peek() != Some(b'"') {
        return Err(format!("expected a string, found {}", lx.found(at)));
    }
    let (a, b, esc) = lx.string_span().map_err(|e| format!("{} at byte {}", e.what, e.at))?;
    let bytes = lx.unescape(a, b, esc, limit, Surrogates::Refuse).map_err(|e| match e {
        json::UnescapeError::TooLong => format!("a string longer than {limit} bytes at byte {at}"),
        json::UnescapeError::LoneSurrogate(u) => format!("a lone surrogate \\u{u:04x} at byte {at}"),
    })?;
    String::from_utf8(bytes).map_err(|_| format!("a string that is not UTF-8 at byte {at}"))
}

/// The non-negative integer at the cursor.
fn uint(lx: &mut Lexer<'_>) -> std::result::Result<u64, String> {
    let at = lx.peek_at();
    if !matches!(lx.peek(), Some(b'-' | b'0'..=b'9')) {
        return Err(format!("expected a size (an integer), found {}", lx.found(at)));
    }
    let n = lx.number().map_err(|e| format!("{} at byte {}", e.what, e.at))?;
    match n.int {
        Some(v) if n.is_int && v >= 0 => Ok(v as u64),
        _ => Err(format!("a size that is not a non-negative 64-bit integer at byte {at}")),
    }
}

/// One entry of a tree page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    /// A file (else a folder).
    pub is_file: bool,
    /// Its path (checked: not empty, at most [`MAX_PATH_BYTES`], no leading `/`, no empty, `.` or `..` segment).
    pub path: String,
    /// A file's size (`lfs.size` when given, else `size`).
    pub size: Option<u64>,
}

/// The entries of one page of the tree API (a JSON list of objects), at most `max_entries`; an error says what
/// is wrong and where. Never panics, whatever the bytes (fuzzed: fuzz/fuzz_targets/hf_listing.rs).
pub fn parse_tree_page(body: &[u8], max_entries: usize) -> std::result::Result<Vec<TreeEntry>, String> {
    let err = |e: json::SyntaxError| format!("{} at byte {}", e.what, e.at);
    json::check_utf8(body).map_err(err)?;
    let mut lx = Lexer::new(body);
    if lx.peek() != Some(b'[') {
        return Err(format!("expected a JSON list of entries, found {}", lx.found(lx.i)));
    }
    lx.i += 1;
    let (mut out, mut first) = (Vec::new(), true);
    while lx.next_elem(&mut first).map_err(err)? {
        if out.len() >= max_entries {
            return Err(format!("more than {max_entries} entries"));
        }
        let at = lx.peek_at();
        if lx.peek() != Some(b'{') {
            return Err(format!("entry {}: expected an object, found {}", out.len(), lx.found(at)));
        }
        lx.i += 1;
        let (mut kind, mut path, mut size, mut lfs_size) = (None, None, None, None);
        let mut f = true;
        let field = |name: &str, m: String| format!("entry {} (byte {at}), {name:?}: {m}", out.len());
        while let Some(span) = lx.next_key(&mut f).map_err(err)? {
            if key_is(&lx, span, "type") {
                kind = Some(string(&mut lx, 64).map_err(|m| field("type", m))?);
            } else if key_is(&lx, span, "path") {
                path = Some(string(&mut lx, MAX_PATH_BYTES).map_err(|m| field("path", m))?);
            } else if key_is(&lx, span, "size") {
                size = Some(uint(&mut lx).map_err(|m| field("size", m))?);
            } else if key_is(&lx, span, "lfs") && lx.peek() == Some(b'{') {
                lx.i += 1;
                let mut g = true;
                while let Some(span) = lx.next_key(&mut g).map_err(err)? {
                    if key_is(&lx, span, "size") {
                        lfs_size = Some(uint(&mut lx).map_err(|m| field("lfs.size", m))?);
                    } else {
                        lx.skip_value(3).map_err(err)?;
                    }
                }
            } else {
                lx.skip_value(2).map_err(err)?;
            }
        }
        let kind = kind.ok_or_else(|| field("type", "missing".into()))?;
        let path = path.ok_or_else(|| field("path", "missing".into()))?;
        check_repo_path(&path)
            .map_err(|why| field("path", format!("{:?} {why}", json::snippet(path.as_bytes(), 0, 80))))?;
        let is_file = match kind.as_str() {
            "file" => true,
            "directory" => false,
            other => return Err(field("type", format!("{other:?} is neither \"file\" nor \"directory\""))),
        };
        let size = lfs_size.or(size);
        if is_file && size.is_none() {
            return Err(field("size", "missing for a file".into()));
        }
        out.push(TreeEntry { is_file, path, size });
    }
    lx.ws();
    if lx.i != body.len() {
        return Err(format!("trailing bytes after the list at byte {}", lx.i));
    }
    Ok(out)
}

/// The `rel="next"` target of a `Link` header (as written: the caller resolves and checks it).
pub fn next_link(value: &str) -> Option<String> {
    let mut rest = value;
    while let Some(open) = rest.find('<') {
        let close = open + rest[open..].find('>')?;
        let target = &rest[open + 1..close];
        let params_end = rest[close..].find('<').map_or(rest.len(), |k| close + k);
        let params = &rest[close + 1..params_end];
        let is_next = params.split(';').any(|p| {
            let p = p.trim().trim_end_matches(',').trim();
            p.strip_prefix("rel=")
                .is_some_and(|v| v.trim_matches('"').split_ascii_whitespace().any(|r| r.eq_ignore_ascii_case("next")))
        });
        if is_next {
            return Some(target.to_string());
        }
        rest = &rest[params_end..];
    }
    None
}

/// The files (path, size) under `folder` of `repo` at `commit`: every page, checked (the module docs).
fn list_tree(
    config: &HfConfig,
    repo: &str,
    commit: &str,
    folder: &str,
    limits: Limits,
    counters: &StorageCounters,
) -> std::result::Result<Vec<(String, u64)>, String> {
    let folder_part = if folder.is_empty() { String::new() } else { format!("/{}", quote(folder, false)) };
    let mut url =
        format!("{}/api/datasets/{repo}/tree/{commit}{folder_part}?recursive=true&expand=false", config.base());
    let (mut files, mut entries, mut seen) = (Vec::new(), 0usize, std::collections::HashSet::new());
    for page in 0.. {
        if page >= limits.pages {
            return Err(format!("more than {} pages", limits.pages));
        }
        let remaining = limits.entries - entries;
        let got = attempts(&config.policy, counters, || {
            run(&config.policy, async {
                let resp = match get(config, &url, None).await {
                    Ok(r) => r,
                    // A folder the commit does not have: nothing under it.
                    Err(Failure { status: Some(404), .. }) if page == 0 => return Ok((Vec::new(), None)),
                    Err(f) => return Err(f),
                };
                let next = resp.headers().get(reqwest::header::LINK).and_then(|v| v.to_str().ok()).and_then(next_link);
                let body = body_capped(resp, limits.page_bytes).await?;
                let list = parse_tree_page(&body, remaining).map_err(|m| permanent(format!("page {page}: {m}")))?;
                Ok((list, next))
            })
        })?;
        let (list, next) = got;
        entries += list.len();
        for e in list {
            let inside = folder.is_empty() || e.path.strip_prefix(folder).is_some_and(|r| r.starts_with('/'));
            if !inside {
                return Err(format!("page {page} lists {:?}, outside the folder {folder:?}", e.path));
            }
            if !seen.insert(e.path.clone()) {
                return Err(format!("page {page} lists {:?} a second time", e.path));
            }
            if e.is_file {
                files.push((e.path, e.size.unwrap_or(0)));
            }
        }
        let Some(next) = next else { break };
        let base = url::Url::parse(&url).map_err(|e| e.to_string())?;
        let target = base.join(&next).map_err(|e| format!("page {page}: a bad next link {next:?}: {e}"))?;
        if !config.is_hub(&target) {
            return Err(format!(
                "page {page}: the next link {:?} leaves the Hub's host",
                target.origin().ascii_serialization()
            ));
        }
        url = target.to_string();
    }
    Ok(files)
}

/// One Hub file opened for reads (module docs, "Reads"): its size is the listing's.
#[derive(Debug)]
pub(super) struct HfObject {
    file: HfFile,
    config: HfConfig,
}

impl HfObject {
    /// `file` with `options` and the environment: only the configuration is checked, nothing is asked.
    pub(super) fn open(file: &HfFile, options: &StorageOptions) -> Result<Self> {
        let config = HfConfig::new(options, &|k| std::env::var(k).ok())?;
        Self::with_config(file, config)
    }

    /// `file` with `config`.
    pub(super) fn with_config(file: &HfFile, config: HfConfig) -> Result<Self> {
        if url::Url::parse(&file.url).is_err() {
            return Err(TrdataError::Source { path: file.name().into(), message: format!("bad URL {:?}", file.url) });
        }
        Ok(Self { file: file.clone(), config })
    }

    /// The size from the listing.
    pub(super) fn size(&self) -> u64 {
        self.file.size
    }

    /// The commit its URL is pinned to.
    pub(super) fn commit(&self) -> &str {
        &self.file.commit
    }

    /// Fill `buf` (not empty) with the bytes at `offset` (inside the size: checked by the caller).
    pub(super) fn read_at(
        &self,
        offset: u64,
        buf: &mut [u8],
        counters: &StorageCounters,
    ) -> std::result::Result<(), ImageError> {
        let want = buf.len();
        let len = want as u64;
        let size = self.file.size;
        attempts(&self.config.policy, counters, || {
            run(&self.config.policy, async {
                let mut resp = get(&self.config, &self.file.url, Some((offset, len))).await?;
                if resp.status().as_u16() != 206 {
                    return Err(permanent(format!(
                        "the server answered a range request with HTTP {} (the whole file?), not 206",
                        resp.status().as_u16()
                    )));
                }
                let encoding = resp.headers().get(reqwest::header::CONTENT_ENCODING).and_then(|v| v.to_str().ok());
                if encoding.is_some_and(|e| !e.eq_ignore_ascii_case("identity")) {
                    return Err(permanent(format!("the answer is encoded ({})", encoding.unwrap_or_default())));
                }
                let range = resp.headers().get(reqwest::header::CONTENT_RANGE).and_then(|v| v.to_str().ok());
                check_content_range(range, offset, len, size).map_err(permanent)?;
                let mut at = 0usize;
                while let Some(chunk) = resp.chunk().await.map_err(|e| transient(error_chain(&e.without_url())))? {
                    let end = at + chunk.len();
                    if end > want {
                        return Err(permanent(format!("the server sent more than the {want} bytes asked for")));
                    }
                    buf[at..end].copy_from_slice(&chunk);
                    at = end;
                }
                if at < want {
                    return Err(transient(format!("short body: {at} of {want} bytes")));
                }
                Ok(())
            })
        })
        .map_err(|m| ImageError::new(ImageErrorKind::Io, m))
    }
}

/// `Content-Range: bytes a-b/total` must be the range asked for, of a file of the listed size.
fn check_content_range(value: Option<&str>, offset: u64, len: u64, size: u64) -> std::result::Result<(), String> {
    let v = value.ok_or("a 206 answer without Content-Range")?;
    let parsed = v.trim().strip_prefix("bytes ").and_then(|r| {
        let (span, total) = r.split_once('/')?;
        let (a, b) = span.split_once('-')?;
        Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?, total.trim()))
    });
    let Some((a, b, total)) = parsed else { return Err(format!("a malformed Content-Range {v:?}")) };
    if a != offset || b.checked_add(1) != offset.checked_add(len) {
        return Err(format!("the server sent bytes {a}-{b}, not the {offset}-{} asked for", offset + len - 1));
    }
    if total != "*" && total.parse::<u64>().ok() != Some(size) {
        return Err(format!("the file is now {total} bytes, {size} when it was listed: it changed since"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
