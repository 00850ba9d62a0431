//! storage/remote — objects behind URLs, read through Apache's `object_store` on a tokio runtime that starts on
//! first use (see the room's docs for the fault rules and fork safety). object_store's own retries are off: one
//! call is one attempt, so the retry loop here is the only one, counts what it does and applies the same rules to
//! a failed request, a broken body and a short body.

use super::{RetryPolicy, STORAGE_OPTIONS, StorageCounters, StorageOptions};
use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ClientConfigKey, GetOptions, ObjectStore, ObjectStoreExt, ObjectStoreScheme, RetryConfig};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Which store serves a URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Amazon S3 and S3-compatible servers (`s3://bucket/key`; an `https://…amazonaws.com` URL).
    S3,
    /// Google Cloud Storage (`gs://bucket/key`).
    Gcs,
    /// Azure Blob Storage / ADLS Gen2 (`az://`, `abfs://`, `abfss://`, `azure://`, `adl://`; an
    /// `https://….blob.core.windows.net` URL).
    Azure,
    /// Plain HTTP(S) with Range requests (`http://host/path`, `https://host/path`).
    Http,
}

impl Scheme {
    /// The store of `url` (object_store's reading of it), None for a scheme trdata does not read.
    pub fn of(url: &url::Url) -> Option<Self> {
        match ObjectStoreScheme::parse(url).ok()?.0 {
            ObjectStoreScheme::AmazonS3 => Some(Self::S3),
            ObjectStoreScheme::GoogleCloudStorage => Some(Self::Gcs),
            ObjectStoreScheme::MicrosoftAzure => Some(Self::Azure),
            ObjectStoreScheme::Http => Some(Self::Http),
            _ => None,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Self::S3 => "S3",
            Self::Gcs => "GCS",
            Self::Azure => "Azure",
            Self::Http => "HTTP",
        }
    }
}

/// Keys of `storage_options` that are trdata's (the retry loop's), not the store's.
const OWN_KEYS: [&str; 3] = ["max_retries", "retry_init_backoff", "retry_max_backoff"];

/// One process's runtime: (pid that built it, the runtime). Leaked on purpose, never dropped (the docs).
static RUNTIME: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);

/// The runtime of this process, started on first use and again in a forked child.
pub(super) fn runtime() -> std::result::Result<&'static tokio::runtime::Runtime, String> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((p, rt)) = *slot
        && p == pid
    {
        return Ok(rt);
    }
    // A parent's runtime (its threads do not exist here) is left as it is: dropping it would join them.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
    // Its threads run on the process's CPUs, not the CPU of the thread that made them: a loader's workers are
    // pinned one per core and start the partial cache's fetches (storage::spawn_blocking), and a thread inherits
    // its creator's affinity, so a fetch (a record unit's decode: source/records.rs) would share its worker's
    // core while the other cores idle.
    let cpus = crate::topology::current_affinity();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .on_thread_start(move || {
            if let Some(cpus) = &cpus {
                crate::topology::pin_current_thread(cpus);
            }
        })
        // blocking reads started ahead (storage::spawn_blocking: the partial cache's fetches), each holding a
        // thread while its GET or pread and its retries run
        .max_blocking_threads(64)
        .thread_name("trdata-io")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the I/O runtime: {e}"))?;
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(rt));
    *slot = Some((pid, rt));
    Ok(rt)
}

/// Why one attempt failed: worth another attempt, or not.
pub(super) enum Fault {
    Transient(String),
    Permanent(String),
}

/// Classify an object_store error: connection, timeout and body errors, 5xx, 408 and 429 are transient; a
/// missing object, refused credentials, a failed precondition and malformed answers are permanent.
pub(super) fn classify(e: object_store::Error) -> Fault {
    use object_store::Error as E;
    match &e {
        E::NotFound { .. } => Fault::Permanent(format!("no such object (the bucket or the key does not exist): {e}")),
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => {
            Fault::Permanent(format!("access denied (check the credentials: storage_options or the environment): {e}"))
        }
        E::Precondition { .. } | E::NotModified { .. } => {
            Fault::Permanent(format!("changed since it was opened (its ETag no longer matches): {e}"))
        }
        E::Generic { .. } => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(s) = source {
                if s.downcast_ref::<object_store::client::HttpError>().is_some() {
                    return Fault::Transient(e.to_string()); // connect, request, timeout, body
                }
                source = s.source();
            }
            let text = e.to_string();
            let transient_status = text
                .split("status code: ")
                .nth(1)
                .is_some_and(|s| s.starts_with('5') || s.starts_with("408") || s.starts_with("429"));
            if transient_status || text.contains("Server returned error response") {
                Fault::Transient(text) // 5xx, SlowDown, InternalError in a 200 body
            } else {
                Fault::Permanent(text)
            }
        }
        _ => Fault::Permanent(e.to_string()),
    }
}

/// Run `once` until it succeeds, fails permanently or the retries are spent, sleeping the policy's backoff
/// between attempts. Each attempt counts as a request, each retry as a retry.
pub(super) fn retrying<T>(
    policy: &RetryPolicy,
    counters: &StorageCounters,
    mut once: impl FnMut() -> std::result::Result<T, Fault>,
) -> std::result::Result<T, String> {
    let mut k = 0;
    loop {
        counters.request();
        match once() {
            Ok(v) => return Ok(v),
            Err(fault) => {
                std::thread::sleep(after_failure(policy, counters, k, fault)?);
                k += 1;
            }
        }
    }
}

/// The retry rule, for [`retrying`] and for the concurrent reads' loop (objects.rs): after attempt `k` (0-based)
/// failed with `fault`, Err(the message) to give up — a permanent fault, or a transient one past `max_retries` —
/// or Ok(the backoff to sleep before the next attempt), counted as a retry.
pub(super) fn after_failure(
    policy: &RetryPolicy,
    counters: &StorageCounters,
    k: u32,
    fault: Fault,
) -> std::result::Result<Duration, String> {
    match fault {
        Fault::Permanent(m) => Err(m),
        Fault::Transient(m) if k >= policy.max_retries => Err(format!(
            "failed {} time{} (max_retries={}); the last attempt: {m}",
            k + 1,
            if k == 0 { "" } else { "s" },
            policy.max_retries
        )),
        Fault::Transient(_) => {
            counters.retry();
            Ok(policy.backoff(k))
        }
    }
}

/// The ETag check of every GET's answer (remote.rs's reads, objects.rs's): the answer's ETag, when the store
/// sent one, must be `expected` (the one seen when `object` was opened or listed, `since` says which), whatever
/// the store did with If-Match (many HTTP servers ignore it and serve the object as it is now). A weak marker
/// (`W/`) is not a difference. A mismatch is permanent: the bytes are another version's, never to be mixed in.
pub(super) fn check_e_tag(
    expected: Option<&str>,
    got: Option<&str>,
    object: &str,
    since: &str,
) -> std::result::Result<(), Fault> {
    let strong = |t: &str| t.strip_prefix("W/").unwrap_or(t).to_string();
    match (expected, got) {
        (Some(a), Some(b)) if strong(a) != strong(b) => {
            Err(Fault::Permanent(format!("the object {object} changed since {since} (ETag {a} → {b})")))
        }
        _ => Ok(()),
    }
}

/// What the user's options become: the store's (key, value) pairs, validated for its scheme.
pub(super) fn store_options(scheme: Scheme, options: &StorageOptions) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (key, value) in options.iter() {
        if OWN_KEYS.contains(&key) {
            continue;
        }
        let known = match scheme {
            Scheme::S3 => key.parse::<object_store::aws::AmazonS3ConfigKey>().is_ok(),
            Scheme::Gcs => key.parse::<object_store::gcp::GoogleConfigKey>().is_ok(),
            Scheme::Azure => key.parse::<object_store::azure::AzureConfigKey>().is_ok(),
            Scheme::Http => key.parse::<ClientConfigKey>().is_ok(),
        };
        if !known {
            return Err(TrdataError::config(
                STORAGE_OPTIONS,
                format!(
                    "{key:?} is not an option of {} URLs (object_store's names, e.g. aws_endpoint, \
                     aws_access_key_id, aws_region, aws_allow_http, google_service_account, azure_storage_account_name, \
                     timeout, connect_timeout; and trdata's max_retries, retry_init_backoff, retry_max_backoff)",
                    scheme.name()
                ),
            ));
        }
        out.push((key.to_string(), value.to_string()));
    }
    Ok(out)
}

/// How a store is made: everything needed to build its client again in another process.
#[derive(Debug)]
pub(super) struct StoreRecipe {
    pub(super) scheme: Scheme,
    pub(super) url: url::Url,
    pub(super) options: Vec<(String, String)>,
    pub(super) timeout: Duration,
}

impl StoreRecipe {
    /// A client for the recipe's URL: environment first (`from_env`), then the user's options; object_store's
    /// retries off (ours run instead).
    fn build(&self) -> Result<Arc<dyn ObjectStore>> {
        self.build_with(RetryConfig { max_retries: 0, retry_timeout: self.timeout, ..RetryConfig::default() })
    }

    /// [`Self::build`] with object_store's own retries as `no_retries` says (uploads use them: a part is not
    /// streamed into a buffer of ours, so its retries are the client's).
    pub(super) fn build_with(&self, no_retries: RetryConfig) -> Result<Arc<dyn ObjectStore>> {
        let timeout = format!("{}ms", self.timeout.as_millis());
        let user_set = |k: &str| self.options.iter().any(|(key, _)| key == k);
        let fail = |e: object_store::Error| {
            TrdataError::config(
                STORAGE_OPTIONS,
                format!("cannot configure the {} client for {}: {e}", self.scheme.name(), self.url),
            )
        };
        macro_rules! cloud {
            ($builder:ty, $key:ty) => {{
                let mut b = <$builder>::from_env().with_url(self.url.as_str()).with_retry(no_retries);
                if !user_set("timeout") {
                    b = b.with_config(<$key>::Client(ClientConfigKey::Timeout), timeout.clone());
                }
                for (k, v) in &self.options {
                    // checked by store_options: every key parses
                    if let Ok(key) = k.parse::<$key>() {
                        b = b.with_config(key, v.clone());
                    }
                }
                Arc::new(b.build().map_err(fail)?) as Arc<dyn ObjectStore>
            }};
        }
        Ok(match self.scheme {
            Scheme::S3 => cloud!(object_store::aws::AmazonS3Builder, object_store::aws::AmazonS3ConfigKey),
            Scheme::Gcs => cloud!(object_store::gcp::GoogleCloudStorageBuilder, object_store::gcp::GoogleConfigKey),
            Scheme::Azure => cloud!(object_store::azure::MicrosoftAzureBuilder, object_store::azure::AzureConfigKey),
            Scheme::Http => {
                let base = &self.url[..url::Position::BeforePath];
                let mut b = object_store::http::HttpBuilder::new().with_url(base).with_retry(no_retries);
                if !user_set("timeout") {
                    b = b.with_config(ClientConfigKey::Timeout, timeout.clone());
                }
                // The user wrote http:// for this URL: plain HTTP is what they asked for.
                if self.url.scheme() == "http" && !user_set("allow_http") {
                    b = b.with_config(ClientConfigKey::AllowHttp, "true");
                }
                for (k, v) in &self.options {
                    if let Ok(key) = k.parse::<ClientConfigKey>() {
                        b = b.with_config(key, v.clone());
                    }
                }
                Arc::new(b.build().map_err(fail)?) as Arc<dyn ObjectStore>
            }
        })
    }
}

/// A store's client for this process: built from its recipe, tagged with the pid that built it and built again
/// in another process (the parent's is leaked, never dropped: the room's docs, "Fork safety").
#[derive(Debug)]
pub(super) struct ForkSafeClient {
    pub(super) recipe: StoreRecipe,
    slot: Mutex<Option<(u32, Arc<dyn ObjectStore>)>>,
}

impl ForkSafeClient {
    /// A client for `recipe` (built now: a bad configuration is a `ConfigError` here, not at the first read).
    pub(super) fn new(recipe: StoreRecipe) -> Result<Self> {
        let client = recipe.build()?;
        Ok(Self { recipe, slot: Mutex::new(Some((std::process::id(), client))) })
    }

    /// This process's client.
    pub(super) fn get(&self) -> std::result::Result<Arc<dyn ObjectStore>, ImageError> {
        let pid = std::process::id();
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((p, c)) = &*slot
            && *p == pid
        {
            return Ok(Arc::clone(c));
        }
        if let Some(inherited) = slot.take() {
            std::mem::forget(inherited);
        }
        let c = self.recipe.build().map_err(|e| ImageError::new(ImageErrorKind::Io, e.to_string()))?;
        *slot = Some((pid, Arc::clone(&c)));
        Ok(c)
    }
}

/// An object opened at a known size (and ETag, when the store gives one).
#[derive(Debug)]
pub(super) struct RemoteObject {
    client: ForkSafeClient,
    path: ObjectPath,
    policy: RetryPolicy,
    size: u64,
    e_tag: Option<String>,
}

impl RemoteObject {
    /// Check the options, build the client and find the object's size (HEAD, retried as a read is).
    pub(super) fn open(
        scheme: Scheme,
        url: &url::Url,
        options: &StorageOptions,
        counters: &StorageCounters,
    ) -> Result<Self> {
        let policy = RetryPolicy::from_options(options)?;
        let recipe =
            StoreRecipe { scheme, url: url.clone(), options: store_options(scheme, options)?, timeout: policy.timeout };
        let source = |message: String| TrdataError::Source { path: url.as_str().into(), message };
        let (_, path) = ObjectStoreScheme::parse(url).map_err(|e| source(format!("is not an object URL: {e}")))?;
        let client = ForkSafeClient::new(recipe)?;
        let rt = runtime().map_err(&source)?;
        let store = client.get().map_err(|e| source(e.message))?;
        let meta = retrying(&policy, counters, || {
            rt.block_on(async {
                match tokio::time::timeout(policy.timeout, store.head(&path)).await {
                    Ok(r) => r.map_err(classify),
                    Err(_) => Err(Fault::Transient(format!("no answer within {:?}", policy.timeout))),
                }
            })
        })
        .map_err(|m| source(format!("cannot be opened: {m}")))?;
        Ok(Self { client, path, policy, size: meta.size, e_tag: meta.e_tag })
    }

    /// Size at open.
    pub(super) fn size(&self) -> u64 {
        self.size
    }

    /// The ETag at open, when the store gave one.
    pub(super) fn e_tag(&self) -> Option<&str> {
        self.e_tag.as_deref()
    }

    /// Fill `buf` from `offset` (inside the size: checked by the caller): one ranged GET per attempt, the body
    /// streamed into `buf`; a body shorter than asked is retried, never used; a longer one, a different total
    /// size or a changed ETag (refused by the store through If-Match, or an answer's ETag that differs from the
    /// one seen at open: [`check_e_tag`]) is permanent.
    pub(super) fn read_at(
        &self,
        offset: u64,
        buf: &mut [u8],
        counters: &StorageCounters,
    ) -> std::result::Result<(), ImageError> {
        let io = |m: String| ImageError::new(ImageErrorKind::Io, m);
        let client = self.client.get()?;
        let rt = runtime().map_err(io)?;
        let want = buf.len();
        let range = offset..offset + want as u64;
        let timeout = self.policy.timeout;
        retrying(&self.policy, counters, || {
            let fetch = async {
                let options = GetOptions::new().with_range(Some(range.clone())).with_if_match(self.e_tag.as_deref());
                let got = client.get_opts(&self.path, options).await.map_err(classify)?;
                let url = self.client.recipe.url.as_str();
                check_e_tag(self.e_tag.as_deref(), got.meta.e_tag.as_deref(), url, "the source was opened")?;
                if got.meta.size != self.size {
                    return Err(Fault::Permanent(format!(
                        "the object is now {} bytes, {} when opened: it changed since",
                        got.meta.size, self.size
                    )));
                }
                let mut at = 0usize;
                let mut body = got.into_stream();
                while let Some(chunk) = body.next().await {
                    let chunk = chunk.map_err(classify)?;
                    let end = at + chunk.len();
                    if end > want {
                        return Err(Fault::Permanent(format!("the server sent more than the {want} bytes asked for")));
                    }
                    buf[at..end].copy_from_slice(&chunk);
                    at = end;
                }
                if at < want {
                    return Err(Fault::Transient(format!("short body: {at} of {want} bytes")));
                }
                Ok(())
            };
            rt.block_on(async {
                match tokio::time::timeout(timeout, fetch).await {
                    Ok(r) => r,
                    Err(_) => Err(Fault::Transient(format!("no complete answer within {timeout:?}"))),
                }
            })
        })
        .map_err(io)
    }
}
