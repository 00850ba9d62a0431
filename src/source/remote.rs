//! source/remote — samples that are objects behind URLs: one object per image (`trdata.ImageFolder` over a
//! bucket prefix, `trdata.FileList` of URLs) or byte ranges of tar shards (`trdata.WebDataset` over URLs). The
//! bytes come from storage/objects.rs (GETs on the I/O runtime, retried, conditional on the listed ETag).
//!
//! # Read-ahead
//! A worker that blocked on one GET per sample would keep only `workers` requests in flight, far too few for an
//! object store's latency (tens of ms per GET). So the worker tells the store which samples it will read next
//! ([`ImageStore::read_ahead`]: the next [`READ_AHEAD`] indices of its claimed sequence, from the plan) and the
//! store starts their GETs at once as tasks on the runtime; [`ImageStore::read`] of a started sample waits for
//! its task, of any other sample (a skip-policy replacement) reads it now. The started reads live in a queue
//! of the calling thread (a thread-local: each worker owns its own, nothing is shared or locked), at most
//! [`READ_AHEAD`] long, keyed by (store, index); [`end_read_ahead`] drops what the thread started and no
//! longer needs (end of an epoch's job, an early stop). So GETs in flight ≤ workers × READ_AHEAD, and memory
//! held by finished reads ≤ workers × READ_AHEAD samples. Order and bytes do not depend on it: a read-ahead
//! only moves when a GET happens, never what a sample's bytes are.
//!
//! # Folders
//! [`object_folder`] lists a prefix and applies torchvision's ImageFolder rules to the keys (image_folder.rs's
//! [`is_image_file_name`] and [`python_name_cmp`]): classes are the first-level "folders" (key prefixes up to a
//! `/`) sorted as Python sorts names; samples class by class, by (folder path, file name) as `sorted(os.walk)`
//! gives them; objects directly under the prefix are not samples; a class without any image is an error.

use super::image_folder::{is_image_file_name, python_name_cmp};
use super::{Dataset, ImageStore, ReadCtx, SampleBytes, name_identity, storage_stats};
use crate::error::{ImageError, Result, TrdataError};
use crate::storage::objects::{ObjectSet, ObjectSpec, PendingRead};
use crate::storage::{Location, StorageOptions, StorageStats, list};
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsStr;
use std::path::PathBuf;

/// Reads a worker starts ahead of the sample it is on.
pub const READ_AHEAD: usize = 16;

/// Sample `i` is object `file[i]` whole (files) or `len[i]` bytes at `offset[i]` of it (shard members).
#[derive(Debug)]
enum Layout {
    Files,
    Spans { file: Vec<u32>, offset: Vec<u64>, len: Vec<u64> },
}

/// Samples that are objects or byte ranges of objects (module docs).
#[derive(Debug)]
pub struct RemoteStore {
    set: std::sync::Arc<ObjectSet>,
    layout: Layout,
}

thread_local! {
    /// This thread's started reads: (store identity, sample index, the read).
    static AHEAD: RefCell<VecDeque<(usize, usize, PendingRead)>> = const { RefCell::new(VecDeque::new()) };
}

impl RemoteStore {
    fn id(&self) -> usize {
        self as *const Self as usize
    }

    fn what(&self, i: usize) -> (usize, Option<(u64, u64)>) {
        match &self.layout {
            Layout::Files => (i, None),
            Layout::Spans { file, offset, len } => (file[i] as usize, Some((offset[i], len[i]))),
        }
    }

    /// The counters of every read so far.
    pub fn stats(&self) -> StorageStats {
        self.set.stats()
    }
}

impl ImageStore for RemoteStore {
    /// Whether the samples are shard members (`"spans"`) or whole objects (`"files"`).
    fn kind(&self) -> &'static str {
        match self.layout {
            Layout::Files => "files",
            Layout::Spans { .. } => "spans",
        }
    }

    fn len(&self) -> usize {
        match &self.layout {
            Layout::Files => self.set.len(),
            Layout::Spans { file, .. } => file.len(),
        }
    }

    /// How errors name sample `i`: its URL, or `shard-url@offset+len` (as local shards).
    fn sample_name(&self, i: usize) -> PathBuf {
        let (k, range) = self.what(i);
        match range {
            None => PathBuf::from(self.set.url(k)),
            Some((offset, len)) => PathBuf::from(format!("{}@{offset}+{len}", self.set.url(k))),
        }
    }

    /// Sample `i`'s bytes into `buf`, at most `max_bytes`: the read this thread started for it, else a read now.
    fn read<'s>(&'s self, i: usize, how: &ReadCtx<'_>, buf: &mut Vec<u8>) -> Result<SampleBytes<'s>, ImageError> {
        let id = self.id();
        let started = AHEAD.with(|q| {
            let mut q = q.borrow_mut();
            let at = q.iter().position(|(s, j, _)| *s == id && *j == i)?;
            q.remove(at).map(|(_, _, p)| p)
        });
        let (k, range) = self.what(i);
        match started {
            Some(p) => p.wait(buf),
            None => self.set.read(k, range, how.max_bytes, buf),
        }?;
        Ok(SampleBytes::in_buffer())
    }

    fn identity(&self, labels: &[i64]) -> String {
        name_identity(self, labels)
    }

    fn io_stats(&self) -> Vec<(&'static str, u64)> {
        storage_stats(&self.stats())
    }

    fn reads_ahead(&self) -> bool {
        true
    }

    /// Start the reads of `indices` (this thread's next samples) that are not started yet, up to [`READ_AHEAD`]
    /// in this thread's queue.
    fn read_ahead(&self, indices: &mut dyn Iterator<Item = usize>, max_bytes: u64) {
        let id = self.id();
        AHEAD.with(|q| {
            let mut q = q.borrow_mut();
            for i in indices {
                if q.len() >= READ_AHEAD {
                    break;
                }
                if q.iter().any(|(s, j, _)| *s == id && *j == i) {
                    continue;
                }
                let (k, range) = self.what(i);
                q.push_back((id, i, self.set.start(k, range, max_bytes)));
            }
        });
    }

    fn end_read_ahead(&self) {
        end_read_ahead();
    }
}

/// Drop the reads this thread started and did not use (their tasks finish and their bytes go).
pub fn end_read_ahead() {
    AHEAD.with(|q| q.borrow_mut().clear());
}

/// The `root` parameter's name (ImageFolder's prefix).
const ROOT: &str = "root";

/// The `paths` parameter's name.
const PATHS: &str = "paths";

/// A dataset of whole objects (`trdata.FileList` of URLs, `trdata.ImageFolder` over a prefix): one spec and one
/// label per sample; URLs checked here, objects read when their sample is.
pub fn object_files(specs: Vec<ObjectSpec>, labels: Vec<i64>, options: &StorageOptions) -> Result<Dataset> {
    if specs.is_empty() || specs.len() > u32::MAX as usize || labels.len() != specs.len() {
        return Err(TrdataError::config(
            PATHS,
            format!(
                "{} URLs must be at least one, fewer than 2**32, with one label each ({} labels)",
                specs.len(),
                labels.len()
            ),
        ));
    }
    let set = ObjectSet::new(PATHS, specs, options)?;
    let store = RemoteStore { set: std::sync::Arc::new(set), layout: Layout::Files };
    Ok(Dataset::new(store, labels, Vec::new()))
}

/// A dataset of byte ranges of objects (`trdata.WebDataset` over URLs): `shards` with the size and ETag their
/// index was built from (a read of a shard that changed since is an error, never another version's bytes), then
/// per sample (shard, offset, len) and a label.
pub fn object_spans(
    shards: Vec<ObjectSpec>,
    file: Vec<u32>,
    offset: Vec<u64>,
    len: Vec<u64>,
    labels: Vec<i64>,
    options: &StorageOptions,
) -> Result<Dataset> {
    let n = labels.len();
    if n == 0 || n > u32::MAX as usize || file.len() != n || offset.len() != n || len.len() != n {
        return Err(TrdataError::config(
            "shards",
            format!("{n} samples must be at least one, fewer than 2**32, with one span each"),
        ));
    }
    if let Some(i) = (0..n).find(|&i| file[i] as usize >= shards.len()) {
        return Err(TrdataError::config("shards", format!("span {i} must name one of the {} shards", shards.len())));
    }
    let set = ObjectSet::new("shards", shards, options)?;
    let store = RemoteStore { set: std::sync::Arc::new(set), layout: Layout::Spans { file, offset, len } };
    Ok(Dataset::new(store, labels, Vec::new()))
}

/// The objects of an ImageFolder under `prefix` (module docs, "Folders"): (specs, labels, classes). A prefix
/// with no class folder, or a class without an image, is a `SourceError` naming the prefix.
pub fn object_folder(prefix: &Location, options: &StorageOptions) -> Result<(Vec<ObjectSpec>, Vec<i64>, Vec<String>)> {
    let listed = list::list_prefix(ROOT, prefix, options)?;
    folder_layout(&listed, &prefix.name())
}

/// [`object_folder`]'s rules applied to a listing of the prefix `name`.
fn folder_layout(listed: &[list::Listed], name: &std::path::Path) -> Result<(Vec<ObjectSpec>, Vec<i64>, Vec<String>)> {
    let fail = |m: String| TrdataError::Source { path: name.to_path_buf(), message: m };
    // class → [(folder below the class, file name, object)]
    let mut classes: BTreeMap<String, Vec<(String, String, usize)>> = BTreeMap::new();
    for (k, obj) in listed.iter().enumerate() {
        let Some((class, rest)) = obj.relative.split_once('/') else { continue }; // a file at the root
        if class.is_empty() {
            continue;
        }
        let files = classes.entry(class.to_string()).or_default();
        let (dir, file) = rest.rsplit_once('/').unwrap_or(("", rest));
        if file.is_empty() || !is_image_file_name(OsStr::new(file)) {
            continue; // a "folder" marker object (key ending in /), or not an image
        }
        files.push((dir.to_string(), file.to_string(), k));
    }
    let mut names: Vec<String> = classes.keys().cloned().collect();
    names.sort_by(|a, b| python_name_cmp(a.as_bytes(), b.as_bytes()));
    if names.is_empty() {
        return Err(fail(
            "no class folders found (ImageFolder expects <prefix>/<class>/<image>; is the prefix right?)".into(),
        ));
    }
    let empty: Vec<&str> = names.iter().filter(|c| classes[*c].is_empty()).map(String::as_str).collect();
    if !empty.is_empty() {
        return Err(fail(format!("found no valid file for the classes {}", empty.join(", "))));
    }
    let (mut specs, mut labels) = (Vec::new(), Vec::new());
    for (label, class) in names.iter().enumerate() {
        let files = classes.get_mut(class).expect("listed above");
        // sorted(os.walk(...)): folders by their path string ("" = the class folder itself, first), then names
        files.sort_by(|a, b| {
            let dir = |d: &str| if d.is_empty() { String::new() } else { format!("/{d}") };
            python_name_cmp(dir(&a.0).as_bytes(), dir(&b.0).as_bytes())
                .then_with(|| python_name_cmp(a.1.as_bytes(), b.1.as_bytes()))
        });
        for (_, _, k) in files.iter() {
            let o = &listed[*k];
            specs.push(ObjectSpec { url: o.url.clone(), size: Some(o.size), e_tag: o.e_tag.clone() });
            labels.push(label as i64);
        }
    }
    Ok((specs, labels, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(keys: &[&str]) -> Vec<list::Listed> {
        keys.iter()
            .map(|k| list::Listed {
                url: format!("s3://b/root/{k}"),
                relative: (*k).to_string(),
                size: k.len() as u64,
                e_tag: Some(format!("\"{k}\"")),
            })
            .collect()
    }

    #[test]
    fn a_listed_prefix_follows_torchvisions_folder_rules() {
        // keys in the store's (byte) order; torchvision walks "dog" before "dog/a b" before "dog/a/…"
        let keys = [
            "README.md",
            "cat/1.JPG",
            "cat/0.jpg",
            "cat/notes.txt",
            "dog/a/x.png",
            "dog/a b/y.png",
            "dog/a/sub/w.png",
            "dog/z.jpeg",
            "dog/",
            "Zebra/q.webp",
        ];
        let (specs, labels, classes) = folder_layout(&listed(&keys), std::path::Path::new("s3://b/root/")).unwrap();
        assert_eq!(classes, ["Zebra", "cat", "dog"]);
        let rel: Vec<&str> = specs.iter().map(|s| s.url.strip_prefix("s3://b/root/").unwrap()).collect();
        assert_eq!(
            rel,
            ["Zebra/q.webp", "cat/0.jpg", "cat/1.JPG", "dog/z.jpeg", "dog/a/x.png", "dog/a b/y.png", "dog/a/sub/w.png"]
        );
        assert_eq!(labels, [0, 1, 1, 2, 2, 2, 2]);
        assert_eq!((specs[1].size, specs[1].e_tag.as_deref()), (Some(9), Some("\"cat/0.jpg\"")));
    }

    #[test]
    fn an_empty_prefix_or_an_empty_class_is_a_source_error_naming_the_prefix() {
        let root = std::path::Path::new("s3://b/root/");
        for (keys, why) in [(&["a.jpg"][..], "no class folders"), (&["c/x.jpg", "d/readme.txt"][..], "classes d")] {
            match folder_layout(&listed(keys), root) {
                Err(TrdataError::Source { path, message }) => {
                    assert_eq!(path, root);
                    assert!(message.contains(why), "{message}");
                }
                other => panic!("expected a SourceError, got {other:?}"),
            }
        }
    }
}
