//! storage — where a source's bytes are, beneath the first stage of the pipeline (**storage** → source → plan →
//! …): a [`Location`] (a local path or a URL: `s3://`, `gs://`, `az://`/`abfs://`, `http(s)://`) parsed and
//! checked once, and an [`ObjectReader`] that reads byte ranges of it, blocking, with the same rules whether the
//! bytes come from a disk or a bucket. The plan, claiming, resume and reproducibility never know which: a source
//! asks for `read_range(offset, len)` and gets exactly `len` bytes or a typed error naming the location.
//!
//! - Local files (`local.rs`): opened once (non-blocking open, regular files only, as source/read.rs), then
//!   `pread` at any offset from any thread.
//! - Objects (`remote.rs`): Apache's `object_store` (S3, GCS, Azure, plain HTTP with Range), driven by one tokio
//!   runtime started on first use. Credentials come from the standard environment variables (`AWS_*`,
//!   `GOOGLE_*`, `AZURE_*`, through object_store's `from_env` builders) overridden by the user's
//!   `storage_options` (object_store's key names: `aws_endpoint`, `aws_access_key_id`, `aws_region`,
//!   `aws_allow_http`, …, plus trdata's own retry keys, [`StorageOptions`]).
//! - Hugging Face Hub datasets (`hf/`): `hf://datasets/<org>/<name>[@<revision>]/<glob>` expanded to files of
//!   one commit with the Hub's APIs ([`hf::expand`]), each read as [`Location::Hf`] by ranged GETs that follow
//!   the Hub's redirect to its file store (own requests: the answer's Retry-After/RateLimit are honoured).
//! - A local disk cache of blocks (`disk_cache.rs`, `cache_dir`/`cache_disk_bytes`): beneath a streamed source's
//!   memory cache, shared by the processes of a node, checked (CRC32C) before anything it holds is used.
//!
//! # Faults (remote)
//! Every GET is one attempt under a deadline (`timeout`, default 30 s); a timeout, a reset or refused
//! connection, a 5xx (503 SlowDown included), a 408/429 or a body shorter than asked for is retried after an
//! exponential backoff with jitter (`retry_init_backoff` · 2^k, at most `retry_max_backoff`, times a random
//! factor in [0.5, 1)), up to `max_retries` times; a short body is never used. Anything else is permanent at
//! once: 404 (missing bucket or key), 401/403 (credentials), 412 (the object changed: reads carry the ETag seen
//! at open as If-Match), an answer whose ETag differs from the one seen at open (a server that ignores If-Match:
//! "the object … changed since the source was opened (ETag a → b)"), a reported size that differs from the size
//! at open. Errors name the URL and the byte
//! range; the source adds the block, and the loader's `on_error` treats a failed read like any bad sample.
//!
//! # Fork safety
//! The runtime and each object's client are tagged with the process id that built them. A reader used in
//! another process (a loader made after `fork()`, a torch DataLoader worker) sees the pid change and builds a
//! fresh runtime and client; the inherited ones are leaked, never dropped: their threads do not exist in the
//! child, and dropping a runtime joins its threads (a hang). The locks guarding them are held only to clone an
//! `Arc` or to build, so a fork cannot inherit one held across a request.
//!
//! # Counters
//! Each reader counts its GETs, the bytes they returned and the retries ([`StorageCounters`]); a source
//! exposes them, and `Loader.stats()` shows them (`Dataset::io_stats`, the one home of their names).

pub mod disk_cache;
pub mod hf;
pub mod list;
pub mod local;
pub mod locations;
pub mod objects;
mod remote;
pub mod upload;

use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use crate::param::IntParam;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use remote::Scheme;

/// `storage_options`' name in errors.
pub const STORAGE_OPTIONS: &str = "storage_options";
/// `max_retries` (storage_options): retries of one read after its first attempt.
pub const MAX_RETRIES: IntParam = IntParam::new("storage_options['max_retries']", 0, 100);
/// Default `max_retries`.
pub const DEFAULT_MAX_RETRIES: u32 = 10;
/// Default first backoff.
pub const DEFAULT_INIT_BACKOFF: Duration = Duration::from_millis(100);
/// Default longest backoff.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(15);
/// Default deadline of one request (headers and body).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a source's bytes live: a local file or an object behind a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A path on a local (or network-mounted) file system.
    Local(PathBuf),
    /// An object: its scheme and URL (no credentials, query or fragment: refused when parsed).
    Url {
        /// Which store serves it.
        scheme: Scheme,
        /// The URL as parsed.
        url: url::Url,
    },
    /// A file of a Hugging Face Hub dataset, found by [`hf::expand`] (its URL pinned to a commit, its size).
    Hf(hf::HfFile),
    /// An `hf://` pattern as the user wrote it, checked ([`hf::HfPattern::parse`]) but not expanded: opening it
    /// expands it and requires exactly one file ([`ObjectReader::open`]); a source of many files calls
    /// [`hf::expand_locations`] (or [`hf::expand`]) and opens each file as [`Location::Hf`].
    HfPattern(hf::HfPattern),
}

impl Location {
    /// A local path, taken as it is.
    pub fn local(path: impl Into<PathBuf>) -> Self {
        Self::Local(path.into())
    }

    /// `text` as the user gave it for `parameter`: a URL when it starts with `scheme://` (checked: a supported
    /// scheme, a bucket or host, a key, no credentials, query or fragment; `file://` is a local path; `hf://` is
    /// an [`hf::HfPattern`], its grammar checked), else a local path. A bad URL is a `ConfigError` naming
    /// `parameter`.
    pub fn parse(parameter: &str, text: &Path) -> Result<Self> {
        let Some(s) = text.to_str().filter(|s| looks_like_url(s)) else { return Ok(Self::Local(text.to_path_buf())) };
        if s.starts_with("hf://") {
            return hf::HfPattern::parse(parameter, s).map(Self::HfPattern);
        }
        let bad = |why: String| TrdataError::config(parameter, format!("{s:?} {why}"));
        let url = url::Url::parse(s).map_err(|e| bad(format!("is not a valid URL ({e})")))?;
        if url.scheme() == "file" {
            if url.host_str().is_some_and(|h| !h.is_empty() && h != "localhost") {
                return Err(bad("must be a file:///absolute/path URL without a host".into()));
            }
            return url.to_file_path().map(Self::Local).map_err(|()| bad("is not a local file path".into()));
        }
        if !SCHEMES.contains(&url.scheme()) {
            return Err(bad(format!(
                "has the unsupported scheme {:?} (supported: s3://, gs://, az://, abfs://, http://, https://, hf://, file://)",
                url.scheme()
            )));
        }
        let scheme = Scheme::of(&url).ok_or_else(|| bad("is not the URL of an object".into()))?;
        // abfs(s)://container@account.dfs.core.windows.net/… names the container as a user: no secret.
        let user_is_container = matches!(url.scheme(), "abfs" | "abfss");
        if (!url.username().is_empty() && !user_is_container) || url.password().is_some() {
            return Err(bad("must not carry credentials (they would show in every message naming it): pass them in \
                 storage_options or the environment"
                .into()));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad("must not have a query or a fragment".into()));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(bad("must name a bucket or host".into()));
        }
        let key = url.path().trim_start_matches('/');
        if key.is_empty() || key.ends_with('/') {
            return Err(bad("must name an object (a key after the bucket or host, not a folder)".into()));
        }
        Ok(Self::Url { scheme, url })
    }

    /// A URL that names a folder of objects (`s3://bucket/train/`, `s3://bucket`), for listing (list.rs): the
    /// checks of [`Location::parse`] except that the key may be empty or end with `/`; a local path is `Local`.
    /// Plain HTTP has no listing: `http(s)://` (not a cloud's own URL) is a `ConfigError` naming `parameter`.
    pub fn parse_prefix(parameter: &str, text: &Path) -> Result<Self> {
        let Some(s) = text.to_str().filter(|s| looks_like_url(s)) else { return Ok(Self::Local(text.to_path_buf())) };
        if s.starts_with("hf://") {
            return Err(TrdataError::config(
                parameter,
                format!("{s:?} is an hf:// URL, which names files by a glob, not a folder: e.g. {s}/**"),
            ));
        }
        // The object checks, on the prefix with a key appended (one home for them), then the prefix itself.
        let probe = format!("{}{}x", s, if s.ends_with('/') { "" } else { "/" });
        match Self::parse(parameter, Path::new(&probe)) {
            Ok(Self::Url { scheme: Scheme::Http, .. }) => Err(TrdataError::config(
                parameter,
                format!("{s:?} is a plain HTTP URL, which cannot be listed: give the objects' URLs one by one"),
            )),
            Ok(Self::Url { scheme, .. }) => {
                let url = url::Url::parse(s).map_err(|e| TrdataError::config(parameter, format!("{s:?}: {e}")))?;
                Ok(Self::Url { scheme, url })
            }
            Ok(local) => Ok(local),
            Err(TrdataError::Config { parameter, message }) => {
                Err(TrdataError::Config { parameter, message: message.replace(&probe, s) })
            }
            Err(e) => Err(e),
        }
    }

    /// How messages name it: the path, or the URL.
    pub fn name(&self) -> PathBuf {
        match self {
            Self::Local(p) => p.clone(),
            Self::Url { url, .. } => PathBuf::from(url.as_str()),
            Self::Hf(file) => PathBuf::from(file.name()),
            Self::HfPattern(p) => PathBuf::from(&p.text),
        }
    }

    /// True for an object behind a URL (`hf://` included).
    pub fn is_remote(&self) -> bool {
        !matches!(self, Self::Local(_))
    }
}

/// URL schemes read (besides `file://`).
const SCHEMES: [&str; 10] = ["s3", "s3a", "gs", "az", "abfs", "abfss", "azure", "adl", "http", "https"];

/// `scheme://` at the start (RFC 3986's scheme characters).
fn looks_like_url(s: &str) -> bool {
    let Some((scheme, _)) = s.split_once("://") else { return false };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// The user's `storage_options`: store keys (object_store's names, checked against the location's scheme when
/// the reader is opened) and trdata's retry keys (`max_retries`, `retry_init_backoff`, `retry_max_backoff`;
/// `timeout` is both the client's and the per-request deadline).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageOptions {
    entries: BTreeMap<String, String>,
}

impl StorageOptions {
    /// Options from (key, value) pairs; keys are matched case-insensitively, a key given twice is refused.
    pub fn new<K: AsRef<str>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Result<Self> {
        let mut entries = BTreeMap::new();
        for (k, v) in pairs {
            let key = k.as_ref().trim().to_ascii_lowercase();
            if key.is_empty() {
                return Err(TrdataError::config(STORAGE_OPTIONS, "an empty key is not an option"));
            }
            if entries.insert(key.clone(), v.into()).is_some() {
                return Err(TrdataError::config(STORAGE_OPTIONS, format!("{key:?} is given twice")));
            }
        }
        Ok(Self { entries })
    }

    /// No options.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The (key, value) pairs, keys lower-case.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }
}

/// How a remote read retries (from [`StorageOptions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Backoff before the first retry.
    pub init_backoff: Duration,
    /// Longest backoff.
    pub max_backoff: Duration,
    /// Deadline of one attempt.
    pub timeout: Duration,
}

impl RetryPolicy {
    /// The policy `options` describe (defaults for keys not given); a bad value is a `ConfigError`.
    pub fn from_options(options: &StorageOptions) -> Result<Self> {
        let duration = |key: &str, default: Duration| -> Result<Duration> {
            options.get(key).map_or(Ok(default), |v| {
                let d = humantime::parse_duration(v.trim()).map_err(|e| {
                    TrdataError::config(
                        &format!("{STORAGE_OPTIONS}['{key}']"),
                        format!("{v:?} must be a duration such as \"100ms\" or \"30s\" ({e})"),
                    )
                })?;
                if d.is_zero() || d > Duration::from_secs(24 * 3600) {
                    return Err(TrdataError::config(
                        &format!("{STORAGE_OPTIONS}['{key}']"),
                        format!("{v:?} must be above zero and at most a day"),
                    ));
                }
                Ok(d)
            })
        };
        let max_retries = match options.get("max_retries") {
            None => DEFAULT_MAX_RETRIES,
            Some(v) => MAX_RETRIES.check_shown(v.trim().parse::<i128>().ok(), &format!("{v:?}"))?,
        };
        let init_backoff = duration("retry_init_backoff", DEFAULT_INIT_BACKOFF)?;
        let max_backoff = duration("retry_max_backoff", DEFAULT_MAX_BACKOFF)?.max(init_backoff);
        let timeout = duration("timeout", DEFAULT_TIMEOUT)?;
        Ok(Self { max_retries, init_backoff, max_backoff, timeout })
    }

    /// The backoff before retry `k` (0-based): exponential, capped, with jitter in [0.5, 1).
    pub fn backoff(&self, k: u32) -> Duration {
        let exp = self.init_backoff.as_secs_f64() * 2f64.powi(k.min(62) as i32);
        let capped = exp.min(self.max_backoff.as_secs_f64());
        Duration::from_secs_f64(capped * (0.5 + 0.5 * jitter_unit()))
    }
}

/// A uniform draw in [0, 1) for backoff jitter only (no data depends on it): std's randomly keyed hasher, so
/// processes and threads retrying together spread out. Never used for anything the plan or the pixels see.
fn jitter_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64));
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// A reader's counters (relaxed atomics: statistics, not synchronization).
#[derive(Debug, Default)]
pub struct StorageCounters {
    requests: AtomicU64,
    bytes: AtomicU64,
    retries: AtomicU64,
    failures: AtomicU64,
    refetches: AtomicU64,
}

/// A snapshot of [`StorageCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageStats {
    /// Reads issued (GETs for objects, preads for local files), retries included.
    pub requests: u64,
    /// Bytes delivered to the caller.
    pub bytes: u64,
    /// Attempts that failed and were retried.
    pub retries: u64,
    /// Reads that failed for good (their error went to the caller).
    pub failures: u64,
    /// Reads made again because the bytes delivered failed the checksums their reader holds for them (a packed
    /// file's record CRC32Cs: source/packed.rs), not counted in `retries` (those are the transport's).
    pub refetches: u64,
}

impl StorageCounters {
    fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    fn delivered(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    fn failure(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    fn refetch(&self) {
        self.refetches.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> StorageStats {
        StorageStats {
            requests: self.requests.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            refetches: self.refetches.load(Ordering::Relaxed),
        }
    }
}

#[derive(Debug)]
enum Backend {
    Local(local::LocalObject),
    Remote(Box<remote::RemoteObject>),
    Hf(Box<hf::HfObject>),
}

/// One opened object (a local file or a remote object) of a known, fixed size, read by byte ranges from any
/// thread. Cloning shares it.
#[derive(Debug, Clone)]
pub struct ObjectReader {
    inner: Arc<ReaderInner>,
}

#[derive(Debug)]
struct ReaderInner {
    location: Location,
    name: PathBuf,
    backend: Backend,
    counters: StorageCounters,
}

impl ObjectReader {
    /// Open `location` with `options` (which must be empty for a local path): check the options against the
    /// scheme (`ConfigError` naming `storage_options`), then find the object and its size (a `SourceError`
    /// naming the location: no such file, bucket or key; access denied; not a regular file; unreachable after
    /// the retries). A [`Location::Hf`] file is opened without a request (its size is the listing's); a
    /// [`Location::HfPattern`] is expanded ([`hf::expand`]) and must name exactly one file.
    pub fn open(location: &Location, options: &StorageOptions) -> Result<Self> {
        if let Location::HfPattern(pattern) = location {
            let files = hf::expand("path", &pattern.text, options)?;
            let [file] = files.as_slice() else {
                return Err(TrdataError::Source {
                    path: PathBuf::from(&pattern.text),
                    message: format!(
                        "names {} files where one is read (a source of many files expands it: storage::hf::expand)",
                        files.len()
                    ),
                });
            };
            return Self::open(&Location::Hf(file.clone()), options);
        }
        let name = location.name();
        let counters = StorageCounters::default();
        let backend = match location {
            Location::Local(path) => {
                if !options.is_empty() {
                    return Err(TrdataError::config(
                        STORAGE_OPTIONS,
                        format!(
                            "apply to URLs (s3://, gs://, az://, http(s)://), not the local path {}",
                            path.display()
                        ),
                    ));
                }
                Backend::Local(local::LocalObject::open(path)?)
            }
            Location::Url { scheme, url } => {
                Backend::Remote(Box::new(remote::RemoteObject::open(*scheme, url, options, &counters)?))
            }
            Location::Hf(file) => Backend::Hf(Box::new(hf::HfObject::open(file, options)?)),
            // expanded above: an ObjectReader is never a pattern
            Location::HfPattern(p) => {
                return Err(TrdataError::Source { path: name, message: format!("{:?} is not expanded", p.text) });
            }
        };
        Ok(Self { inner: Arc::new(ReaderInner { location: location.clone(), name, backend, counters }) })
    }

    /// A local file (no options).
    pub fn open_local(path: &Path) -> Result<Self> {
        Self::open(&Location::local(path), &StorageOptions::default())
    }

    /// Where it is.
    pub fn location(&self) -> &Location {
        &self.inner.location
    }

    /// How messages name it (the path or the URL).
    pub fn name(&self) -> &Path {
        &self.inner.name
    }

    /// Its ETag when opened (remote objects whose store gives one; None for a local file).
    pub fn e_tag(&self) -> Option<&str> {
        match &self.inner.backend {
            Backend::Local(_) | Backend::Hf(_) => None,
            Backend::Remote(r) => r.e_tag(),
        }
    }

    /// What says its bytes are the ones seen at open, for caches that outlive the reader (disk_cache.rs):
    /// `etag:<ETag>` for a remote object whose store gives one (empty otherwise), `mtime:<ns>` for a local file,
    /// `commit:<sha>` for a Hub file (its URL is pinned to that commit).
    pub fn version(&self) -> String {
        match &self.inner.backend {
            Backend::Local(l) => format!("mtime:{}", l.mtime_ns()),
            Backend::Hf(h) => format!("commit:{}", h.commit()),
            Backend::Remote(r) => r.e_tag().map_or_else(String::new, |t| format!("etag:{t}")),
        }
    }

    /// Its size in bytes when opened (a remote object that changes size later fails its reads).
    pub fn size(&self) -> u64 {
        match &self.inner.backend {
            Backend::Local(l) => l.size(),
            Backend::Remote(r) => r.size(),
            Backend::Hf(h) => h.size(),
        }
    }

    /// Exactly `len` bytes at `offset` into `buf` (cleared first). The range must lie inside the size at open
    /// and `len` must not exceed `limit_bytes` (checked before anything is allocated). Errors: `Corrupt` when the
    /// range lies past the end (a file truncated since), `TooLarge` over the limit or when the buffer cannot be
    /// allocated, `Io` for a failed read (remote: after the retries), each naming the byte range (the caller
    /// names the location: a sample error carries it as its path, a source error as its file).
    pub fn read_range(&self, offset: u64, len: u64, limit_bytes: u64, buf: &mut Vec<u8>) -> Result<(), ImageError> {
        let result = self.read_range_counted(offset, len, limit_bytes, buf);
        match &result {
            Ok(()) => self.inner.counters.delivered(buf.len()),
            Err(_) => {
                self.inner.counters.failure();
                buf.clear();
            }
        }
        result
    }

    fn read_range_counted(&self, offset: u64, len: u64, limit_bytes: u64, buf: &mut Vec<u8>) -> Result<(), ImageError> {
        let inner = &*self.inner;
        let named = |e: ImageError| {
            ImageError::new(e.kind, format!("bytes {offset}..{}: {}", offset.saturating_add(len), e.message))
        };
        if len > limit_bytes {
            return Err(named(ImageError::new(
                ImageErrorKind::TooLarge,
                format!("a read of {len} bytes exceeds the limit of {limit_bytes} bytes"),
            )));
        }
        if offset.checked_add(len).is_none_or(|end| end > self.size()) {
            return Err(named(ImageError::new(
                ImageErrorKind::Corrupt,
                format!("lies past the end of the {}-byte object", self.size()),
            )));
        }
        let want = usize::try_from(len).map_err(|_| named(too_large(len)))?;
        buf.clear();
        buf.try_reserve_exact(want).map_err(|_| named(too_large(len)))?;
        buf.resize(want, 0);
        if want == 0 {
            return Ok(()); // nothing to ask for (stores refuse an empty range)
        }
        match &inner.backend {
            Backend::Local(l) => {
                inner.counters.request();
                l.read_at(offset, buf)
            }
            Backend::Remote(r) => r.read_at(offset, buf, &inner.counters),
            Backend::Hf(h) => h.read_at(offset, buf, &inner.counters),
        }
        .map_err(named)
    }

    /// `len` bytes at `offset` as a new buffer, read in parts of at most 16 MiB that are appended as they arrive:
    /// memory follows the bytes actually read, not the size a header or a server claims (index sections).
    pub fn read_growing(&self, offset: u64, len: u64) -> Result<Vec<u8>, ImageError> {
        const PART: u64 = 16 << 20;
        if len <= PART {
            let mut out = Vec::new();
            self.read_range(offset, len, len, &mut out)?;
            return Ok(out);
        }
        let (mut out, mut part) = (Vec::new(), Vec::new());
        let mut at = 0;
        while at < len {
            let n = (len - at).min(PART);
            self.read_range(offset + at, n, PART, &mut part)?;
            out.try_reserve(part.len()).map_err(|_| too_large(len))?;
            out.extend_from_slice(&part);
            at += n;
        }
        Ok(out)
    }

    /// `len` bytes at `offset` as a new buffer, for reads of whole regions (`full` mode): the allocation fails
    /// as a `Memory` error naming `what`; remote regions are read in parts by up to 8 threads.
    pub fn read_region(&self, offset: u64, len: u64, what: &str) -> Result<Vec<u8>> {
        let memory = || TrdataError::Memory { what: what.to_string(), bytes: len };
        let n = usize::try_from(len).map_err(|_| memory())?;
        if offset.checked_add(len).is_none_or(|end| end > self.size()) {
            return Err(self.source_error(format!("bytes {offset}..+{len} lie past its end ({} bytes)", self.size())));
        }
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|_| memory())?;
        out.resize(n, 0);
        const PART: usize = 16 << 20;
        let parts = n.div_ceil(PART).max(1);
        let threads = if self.location().is_remote() { parts.min(8) } else { 1 };
        let failed = std::sync::Mutex::new(None);
        std::thread::scope(|s| {
            let chunks: Vec<(usize, &mut [u8])> = out.chunks_mut(PART).enumerate().collect();
            let per = chunks.len().div_ceil(threads).max(1);
            let mut groups: Vec<Vec<(usize, &mut [u8])>> = Vec::new();
            let mut it = chunks.into_iter().peekable();
            while it.peek().is_some() {
                groups.push(it.by_ref().take(per).collect());
            }
            for group in groups {
                let failed = &failed;
                s.spawn(move || {
                    let mut buf = Vec::new();
                    for (k, chunk) in group {
                        let at = offset + (k * PART) as u64;
                        match self.read_range(at, chunk.len() as u64, chunk.len() as u64, &mut buf) {
                            Ok(()) => chunk.copy_from_slice(&buf),
                            Err(e) => {
                                *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                                return;
                            }
                        }
                    }
                });
            }
        });
        match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(self.source_error(format!("cannot be read ({what}): {}", e.message))),
            None => Ok(out),
        }
    }

    /// A `SourceError` naming this object.
    pub fn source_error(&self, message: String) -> TrdataError {
        TrdataError::Source { path: self.inner.name.clone(), message }
    }

    /// Its counters now.
    pub fn stats(&self) -> StorageStats {
        self.inner.counters.snapshot()
    }

    /// Count a read its caller makes again because the bytes of the last one failed their checksum
    /// (`StorageStats::refetches`); the read itself is a `read_range` like any other.
    pub fn count_refetch(&self) {
        self.inner.counters.refetch();
    }
}

/// Run `work` on the storage runtime's blocking pool (started on first use, again in a forked child: "Fork
/// safety"), for blocking reads started ahead (the partial cache's fetches, source/block_cache.rs). Never blocks;
/// Err when the runtime cannot be started.
pub fn spawn_blocking(work: impl FnOnce() + Send + 'static) -> std::result::Result<(), String> {
    remote::runtime()?.spawn_blocking(work);
    Ok(())
}

fn too_large(len: u64) -> ImageError {
    ImageError::new(ImageErrorKind::TooLarge, format!("cannot allocate {len} bytes to read"))
}

#[cfg(test)]
mod tests;
