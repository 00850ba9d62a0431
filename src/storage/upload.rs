//! storage/upload — a finished local file copied to an object (`trdata.pack(source, "s3://bucket/train.trd")`):
//! a multipart upload (object_store's `put_multipart` through `WriteMultipart`, parts of [`PART_BYTES`], at most
//! [`PARTS_IN_FLIGHT`] at once). Atomic: the stores publish a multipart object only when the upload completes,
//! so nothing appears at the key before that; on any error or a cancel (`progress` returns false: Ctrl-C) the upload is aborted (its parts deleted) before the error is returned, naming the URL. A process
//! killed mid-upload leaves an incomplete upload the store holds until its lifecycle rule removes it (S3's
//! `AbortIncompleteMultipartUpload`), never an object at the key.
//!
//! Retries: a part is a buffer object_store holds, so its retries are object_store's (the [`RetryPolicy`]'s
//! count and backoff, the `timeout` per request); reads keep trdata's own loop (remote.rs).
//!
//! Plain HTTP URLs are read-only: a pack to one is a `ConfigError` ([`check_target`], before any work).

use super::remote::{Scheme, StoreRecipe, runtime, store_options};
use super::{Location, RetryPolicy, StorageOptions};
use crate::error::{Result, TrdataError};
use object_store::{BackoffConfig, ObjectStoreExt, ObjectStoreScheme, RetryConfig, WriteMultipart};
use std::io::Read;
use std::path::Path;
use std::time::Duration;

/// Size of one part (S3 takes 5 MiB to 5 GiB; GCS and Azure any).
pub const PART_BYTES: usize = 8 << 20;
/// Parts uploading at once.
pub const PARTS_IN_FLIGHT: usize = 4;

/// Check that `location` (the user's `parameter`) can be written, before any work: a URL of a store that takes
/// uploads (not plain HTTP), with `options` valid for it. A local path is fine here (the packer checks it), but
/// not with options.
pub fn check_target(parameter: &str, location: &Location, options: &StorageOptions) -> Result<()> {
    let Location::Url { scheme, url } = location else {
        if !options.is_empty() {
            return Err(TrdataError::config(
                super::STORAGE_OPTIONS,
                format!("apply to URLs (s3://, gs://, az://), not the local path {}", location.name().display()),
            ));
        }
        return Ok(());
    };
    if *scheme == Scheme::Http {
        return Err(TrdataError::config(
            parameter,
            format!(
                "{:?} is a plain HTTP(S) URL, which trdata reads but cannot write: pack to s3://, gs:// or az://",
                url.as_str()
            ),
        ));
    }
    RetryPolicy::from_options(options)?;
    store_options(*scheme, options)?;
    Ok(())
}

/// How often a cancel is looked for while the last parts upload.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// Upload the local file `file` to `location` (a URL that passed [`check_target`] for `parameter`) as one
/// multipart upload (module docs). `progress(bytes_sent)` is called after each part is handed over; false cancels
/// (the upload is aborted). Returns the bytes uploaded.
pub fn upload_file(
    parameter: &str,
    file: &Path,
    location: &Location,
    options: &StorageOptions,
    progress: &dyn Fn(u64) -> bool,
) -> Result<u64> {
    check_target(parameter, location, options)?;
    let Location::Url { scheme, url } = location else {
        return Err(TrdataError::config(parameter, format!("{} is not a URL to upload to", location.name().display())));
    };
    let fail = |message: String| TrdataError::Source { path: url.as_str().into(), message };
    let policy = RetryPolicy::from_options(options)?;
    let recipe = StoreRecipe {
        scheme: *scheme,
        url: url.clone(),
        options: store_options(*scheme, options)?,
        timeout: policy.timeout,
    };
    let retry = RetryConfig {
        max_retries: policy.max_retries as usize,
        retry_timeout: Duration::from_secs(3600),
        backoff: BackoffConfig { init_backoff: policy.init_backoff, max_backoff: policy.max_backoff, base: 2.0 },
    };
    let store = recipe.build_with(retry)?;
    let (_, path) = ObjectStoreScheme::parse(url).map_err(|e| fail(format!("is not an object URL: {e}")))?;
    let mut src = std::fs::File::open(file)
        .map_err(|e| TrdataError::Source { path: file.to_path_buf(), message: format!("cannot be read: {e}") })?;
    let rt = runtime().map_err(&fail)?;
    rt.block_on(async {
        let upload = store.put_multipart(&path).await.map_err(|e| fail(format!("cannot start the upload: {e}")))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut buf = vec![0u8; PART_BYTES];
        let mut sent = 0u64;
        let cancelled = || fail("the upload was cancelled; nothing was written at the key".into());
        let outcome: Result<()> = async {
            loop {
                let n = read_full(&mut src, &mut buf).map_err(|e| TrdataError::Source {
                    path: file.to_path_buf(),
                    message: format!("cannot be read: {e}"),
                })?;
                if n == 0 {
                    return Ok(());
                }
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(|e| fail(format!("a part failed to upload: {e}")))?;
                writer.write(&buf[..n]);
                sent += n as u64;
                if !progress(sent) {
                    return Err(cancelled());
                }
            }
        }
        .await;
        // The parts still in flight: a cancel is honoured until the last of them is up (the completion is then
        // one request). `join_next` under `wait_for_capacity` is cancel-safe, so the timeout only looks up.
        let outcome = match outcome {
            Ok(()) => loop {
                match tokio::time::timeout(CANCEL_POLL, writer.wait_for_capacity(0)).await {
                    Ok(r) => break r.map_err(|e| fail(format!("a part failed to upload: {e}"))),
                    Err(_) if !progress(sent) => break Err(cancelled()),
                    Err(_) => {}
                }
            },
            e => e,
        };
        match outcome {
            Ok(()) => {
                writer
                    .finish()
                    .await
                    .map_err(|e| fail(format!("the upload did not complete (nothing was written at the key): {e}")))?;
                Ok(sent)
            }
            Err(e) => {
                let _ = writer.abort().await; // best effort: the error is the user's news
                Err(e)
            }
        }
    })
}

/// Fill `buf` from `r` (fewer bytes only at the end of the file).
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
