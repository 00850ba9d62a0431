//! storage/objects — many objects read concurrently: the images of a bucket prefix (one object per image) or the
//! members of tar shards (byte ranges of a few objects). Reads run as tasks on the room's runtime, so a worker
//! can start the reads of the samples it will need next ([`ObjectSet::start`]) and wait for each when it gets
//! there ([`PendingRead::wait`]): more GETs in flight than there are workers, with the same rules as a single
//! read.
//!
//! Each read is a GET (of the whole object, or of a byte range) under the same rules as `remote.rs`'s reads —
//! one attempt per request under the `timeout` deadline, transient faults (connection, timeout, 5xx, 408/429, a
//! short body) retried with the [`RetryPolicy`]'s exponential backoff and jitter, everything else permanent at
//! once (`remote::classify` and `remote::after_failure` are the one classification and retry rule). What is known of an object when the set is made (its
//! size and ETag, from a listing or a HEAD) is checked on every read: the GET carries the ETag as If-Match, and an
//! answer whose ETag or size differs (a store that ignores If-Match) is a permanent error ("changed since it was
//! listed"), never bytes of another version. A
//! size is checked against the caller's limit before the buffer is allocated.
//!
//! Clients: one per bucket or host ([`ForkSafeClient`]: rebuilt in a forked child, the room's docs). A task
//! started in a process that forks is simply never waited for in the child (its worker threads do not exist
//! there); the child starts its own tasks on its own runtime.

use super::remote::{Fault, ForkSafeClient, StoreRecipe, after_failure, check_e_tag, classify, runtime, store_options};
use super::{Location, RetryPolicy, StorageCounters, StorageOptions, StorageStats};
use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStoreScheme};
use std::collections::HashMap;
use std::sync::Arc;

/// One object of a set: its client, key, URL (how messages name it), and what was known of it when listed.
#[derive(Debug)]
struct Entry {
    client: u32,
    path: ObjectPath,
    url: String,
    size: Option<u64>,
    e_tag: Option<String>,
}

/// What the user knows of an object when naming it: its URL and, when listed or opened, its size and ETag.
#[derive(Debug, Clone)]
pub struct ObjectSpec {
    /// The object's URL.
    pub url: String,
    /// Its size when listed (None: unknown, taken from each GET).
    pub size: Option<u64>,
    /// Its ETag when listed (None: reads are not conditional).
    pub e_tag: Option<String>,
}

/// A set of objects behind URLs (any mix of buckets or hosts of the stores storage/ reads), read concurrently.
#[derive(Debug)]
pub struct ObjectSet {
    clients: Vec<ForkSafeClient>,
    entries: Vec<Entry>,
    policy: RetryPolicy,
    counters: StorageCounters,
}

impl ObjectSet {
    /// The objects `specs` (URLs checked as [`Location::parse`] does, naming `parameter`) read with `options`:
    /// a client per bucket or host, built now (a bad option is a `ConfigError` naming `storage_options`).
    pub fn new(parameter: &str, specs: Vec<ObjectSpec>, options: &StorageOptions) -> Result<Self> {
        let policy = RetryPolicy::from_options(options)?;
        let mut bases: HashMap<String, u32> = HashMap::new();
        let (mut clients, mut entries) = (Vec::new(), Vec::with_capacity(specs.len()));
        for spec in specs {
            let location = Location::parse(parameter, std::path::Path::new(&spec.url))?;
            let Location::Url { scheme, url } = location else {
                return Err(TrdataError::config(parameter, format!("{:?} must be a URL (s3://, gs://, …)", spec.url)));
            };
            let (_, path) = ObjectStoreScheme::parse(&url)
                .map_err(|e| TrdataError::config(parameter, format!("{:?} is not an object URL: {e}", spec.url)))?;
            // One client per bucket/host: a URL's part up to its path (abfs's container is in the user part).
            let base = format!("{}@{}", url.username(), &url[..url::Position::BeforePath]);
            let client = match bases.get(&base) {
                Some(&c) => c,
                None => {
                    let recipe = StoreRecipe {
                        scheme,
                        url: url.clone(),
                        options: store_options(scheme, options)?,
                        timeout: policy.timeout,
                    };
                    clients.push(ForkSafeClient::new(recipe)?);
                    let c = (clients.len() - 1) as u32;
                    bases.insert(base, c);
                    c
                }
            };
            entries.push(Entry { client, path, url: url.to_string(), size: spec.size, e_tag: spec.e_tag });
        }
        Ok(Self { clients, entries, policy, counters: StorageCounters::default() })
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True without objects.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Object `k`'s URL.
    pub fn url(&self, k: usize) -> &str {
        &self.entries[k].url
    }

    /// Object `k`'s size when listed, if known.
    pub fn size(&self, k: usize) -> Option<u64> {
        self.entries[k].size
    }

    /// The counters of every read so far.
    pub fn stats(&self) -> StorageStats {
        self.counters.snapshot()
    }

    /// Start reading object `k` (whole, or `range` = (offset, len) of it), at most `limit_bytes`, as a task on
    /// the runtime; [`PendingRead::wait`] gives the bytes. Never blocks.
    pub fn start(self: &Arc<Self>, k: usize, range: Option<(u64, u64)>, limit_bytes: u64) -> PendingRead {
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(m) => return PendingRead(Err(Some(ImageError::new(ImageErrorKind::Io, m)))),
        };
        let set = Arc::clone(self);
        PendingRead(Ok(rt.spawn(async move { set.read_async(k, range, limit_bytes).await })))
    }

    /// Object `k` (or `range` of it) into `buf`, blocking: [`Self::start`] then wait.
    pub fn read(
        self: &Arc<Self>,
        k: usize,
        range: Option<(u64, u64)>,
        limit_bytes: u64,
        buf: &mut Vec<u8>,
    ) -> Result<(), ImageError> {
        self.start(k, range, limit_bytes).wait(buf)
    }

    /// The read with its retries (the module docs), counted.
    async fn read_async(&self, k: usize, range: Option<(u64, u64)>, limit_bytes: u64) -> Result<Vec<u8>, ImageError> {
        let result = self.read_retrying(k, range, limit_bytes).await;
        match &result {
            Ok(b) => self.counters.delivered(b.len()),
            Err(_) => self.counters.failure(),
        }
        result
    }

    async fn read_retrying(&self, k: usize, range: Option<(u64, u64)>, limit: u64) -> Result<Vec<u8>, ImageError> {
        let e = &self.entries[k];
        let io = |m: String| ImageError::new(ImageErrorKind::Io, m);
        let what = match range {
            Some((offset, len)) => format!("bytes {offset}..{}: ", offset.saturating_add(len)),
            None => String::new(),
        };
        if let Some((offset, len)) = range {
            if len > limit {
                return Err(ImageError::new(
                    ImageErrorKind::TooLarge,
                    format!("{what}a read of {len} bytes exceeds the limit of {limit} bytes"),
                ));
            }
            if let Some(size) = e.size
                && offset.checked_add(len).is_none_or(|end| end > size)
            {
                return Err(ImageError::new(
                    ImageErrorKind::Corrupt,
                    format!("{what}lies past the end of the {size}-byte object"),
                ));
            }
            if len == 0 {
                return Ok(Vec::new());
            }
        }
        let client = self.clients[e.client as usize].get()?;
        let policy = &self.policy;
        let mut k = 0u32;
        loop {
            self.counters.request();
            let attempt = tokio::time::timeout(policy.timeout, self.get_once(&*client, e, range, limit)).await;
            let fault = match attempt {
                Ok(Ok(Ok(bytes))) => return Ok(bytes),
                Ok(Ok(Err(e))) => return Err(ImageError::new(e.kind, format!("{what}{}", e.message))),
                Ok(Err(f)) => f,
                Err(_) => Fault::Transient(format!("no complete answer within {:?}", policy.timeout)),
            };
            match after_failure(policy, &self.counters, k, fault) {
                Err(m) => return Err(io(format!("{what}{m}"))),
                Ok(backoff) => {
                    tokio::time::sleep(backoff).await;
                    k += 1;
                }
            }
        }
    }

    /// One GET: Ok(Ok(bytes)) in full, Ok(Err(e)) a permanent error of the data (too large), Err(fault).
    async fn get_once(
        &self,
        client: &dyn object_store::ObjectStore,
        e: &Entry,
        range: Option<(u64, u64)>,
        limit: u64,
    ) -> std::result::Result<std::result::Result<Vec<u8>, ImageError>, Fault> {
        let mut options = GetOptions::new().with_if_match(e.e_tag.as_deref());
        if let Some((offset, len)) = range {
            options = options.with_range(Some(GetRange::Bounded(offset..offset + len)));
        }
        let got = client.get_opts(&e.path, options).await.map_err(classify)?;
        check_e_tag(e.e_tag.as_deref(), got.meta.e_tag.as_deref(), &e.url, "it was listed")?;
        if let Some(size) = e.size
            && got.meta.size != size
        {
            return Err(Fault::Permanent(format!(
                "the object is now {} bytes, {size} when it was listed: it changed since",
                got.meta.size
            )));
        }
        let want = match range {
            Some((_, len)) => len,
            None => got.meta.size,
        };
        if want > limit {
            return Ok(Err(ImageError::new(
                ImageErrorKind::TooLarge,
                format!("the object of {want} bytes exceeds the limit of {limit} bytes"),
            )));
        }
        let Ok(want) = usize::try_from(want) else {
            return Ok(Err(ImageError::new(ImageErrorKind::TooLarge, format!("cannot allocate {want} bytes"))));
        };
        let mut buf = Vec::new();
        if buf.try_reserve_exact(want).is_err() {
            return Ok(Err(ImageError::new(ImageErrorKind::TooLarge, format!("cannot allocate {want} bytes"))));
        }
        let mut body = got.into_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(classify)?;
            if buf.len() + chunk.len() > want {
                return Err(Fault::Permanent(format!("the server sent more than the {want} bytes asked for")));
            }
            buf.extend_from_slice(&chunk);
        }
        if buf.len() < want {
            return Err(Fault::Transient(format!("short body: {} of {want} bytes", buf.len())));
        }
        Ok(Ok(buf))
    }
}

/// A read started by [`ObjectSet::start`]. Dropping it lets the task finish and its bytes go.
#[derive(Debug)]
pub struct PendingRead(std::result::Result<tokio::task::JoinHandle<Result<Vec<u8>, ImageError>>, Option<ImageError>>);

impl PendingRead {
    /// Wait for the read (blocking this thread, which must not be one of the runtime's) and move its bytes into
    /// `buf`.
    pub fn wait(self, buf: &mut Vec<u8>) -> Result<(), ImageError> {
        buf.clear();
        let handle = match self.0 {
            Ok(h) => h,
            Err(e) => return Err(e.unwrap_or_else(|| ImageError::new(ImageErrorKind::Io, "no runtime"))),
        };
        let rt = runtime().map_err(|m| ImageError::new(ImageErrorKind::Io, m))?;
        match rt.block_on(handle) {
            Ok(Ok(bytes)) => {
                *buf = bytes;
                Ok(())
            }
            Ok(Err(e)) => Err(e),
            Err(join) => Err(ImageError::new(ImageErrorKind::Io, format!("the read task failed: {join}"))),
        }
    }
}
