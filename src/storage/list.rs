//! storage/list — the objects under a prefix of a bucket (`s3://bucket/train/`): every key below it (recursive),
//! with its size and ETag, in the store's order (lexicographic by key for S3, GCS and Azure). One listing is a
//! series of paged requests; a transient fault restarts it from the beginning under the room's retry rules
//! (a listing is small next to the data it names), so a listing is whole or an error, never a part.

use super::remote::{ForkSafeClient, StoreRecipe, classify, retrying, runtime, store_options};
use super::{Location, RetryPolicy, StorageCounters, StorageOptions};
use crate::error::{Result, TrdataError};
use futures_util::StreamExt;
use object_store::ObjectStoreScheme;

/// Most objects one listing returns (sources hold fewer than 2^32 samples).
pub const MAX_LISTED: usize = u32::MAX as usize;

/// One object found under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its URL (scheme, bucket, key).
    pub url: String,
    /// Its key relative to the prefix (no leading `/`).
    pub relative: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its ETag, when the store gives one.
    pub e_tag: Option<String>,
}

/// Every object under `prefix` (a URL from [`Location::parse_prefix`]), read with `options`. A missing bucket or
/// refused credentials are a `SourceError` naming the prefix; an empty prefix is an empty list (the caller says
/// what it expected). A local path is a `ConfigError` naming `parameter`.
pub fn list_prefix(parameter: &str, prefix: &Location, options: &StorageOptions) -> Result<Vec<Listed>> {
    let Location::Url { scheme, url } = prefix else {
        return Err(TrdataError::config(
            parameter,
            format!(
                "{} must be the URL of a bucket prefix (s3://bucket/prefix/, gs://, az://)",
                prefix.name().display()
            ),
        ));
    };
    let policy = RetryPolicy::from_options(options)?;
    let source = |message: String| TrdataError::Source { path: url.as_str().into(), message };
    let recipe = StoreRecipe {
        scheme: *scheme,
        url: url.clone(),
        options: store_options(*scheme, options)?,
        timeout: policy.timeout,
    };
    let client = ForkSafeClient::new(recipe)?;
    let store = client.get().map_err(|e| source(e.message))?;
    let (_, path) = ObjectStoreScheme::parse(url).map_err(|e| source(format!("is not a bucket URL: {e}")))?;
    let base = {
        let mut b = url.clone();
        b.set_path("");
        b.to_string().trim_end_matches('/').to_string()
    };
    let prefix_key = path.as_ref().to_string();
    let rt = runtime().map_err(&source)?;
    let counters = StorageCounters::default();
    let listed = retrying(&policy, &counters, || {
        rt.block_on(async {
            let mut out = Vec::new();
            let mut stream = store.list(if prefix_key.is_empty() { None } else { Some(&path) });
            while let Some(meta) = stream.next().await {
                let meta = meta.map_err(classify)?;
                if out.len() >= MAX_LISTED {
                    return Err(super::remote::Fault::Permanent(format!("lists more than {MAX_LISTED} objects")));
                }
                let key = meta.location.as_ref().to_string();
                let relative = key.strip_prefix(&prefix_key).unwrap_or(&key).trim_start_matches('/').to_string();
                out.push(Listed { url: format!("{base}/{key}"), relative, size: meta.size, e_tag: meta.e_tag });
            }
            Ok(out)
        })
    })
    .map_err(|m| source(format!("cannot be listed: {m}")))?;
    Ok(listed)
}
