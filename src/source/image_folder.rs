//! torchvision's ImageFolder, rule for rule (`torchvision/datasets/folder.py`: `find_classes`, `make_dataset`
//! with `IMG_EXTENSIONS` and `allow_empty=False`), so indices, labels and class names equal torchvision's:
//! - classes: the entries of `root` that are directories, symlinks followed (`os.scandir` + `is_dir()`), sorted
//!   the way Python sorts their `str` names: code points of the UTF-8 names decoded with `surrogateescape`
//!   (what `os.fsdecode` gives), which is not byte order for non-UTF-8 names; label = position;
//! - samples: class by class, every directory below the class folder (`os.walk(followlinks=True)`) in the order
//!   of its path string, then the file names in each directory sorted; a file is any entry that is not a
//!   directory (broken links and FIFOs too: they fail when read, like in torchvision) whose name ends with one
//!   of [`IMAGE_EXTENSIONS`], ASCII case-insensitively (`str.lower().endswith`);
//! - no class folder, or a class without any file: a `Source` error (torchvision's `FileNotFoundError`).
//!
//! On purpose unlike torchvision, each directory is entered at most once per class: the walk enters the
//! directories of a class in the order above (by path string, which puts every directory before what lies
//! below it) and skips one whose (device, inode) it has already entered in this class, or that is the dataset
//! root. So a directory reached by several paths (symlinks between siblings, a link to an ancestor, a link
//! loop) has its files listed once, under the first of those paths the walk reaches, and the work stays linear
//! (each distinct directory is listed once). torchvision's `os.walk(followlinks=True)` lists such files once per
//! path that reaches them: twice for a directory also linked from a sibling, and around a cycle (a loop, two
//! siblings linked to each other) until the paths hit the kernel's 40-link limit: 41 times for one loop,
//! practically forever for two. Links are otherwise followed like torchvision follows them: a link to a file
//! is listed (twice when there are two links), a link to a directory not entered yet is entered, and across
//! classes nothing is deduplicated (a class may link to another one and list its files too).
//! An unreadable directory is an error instead of being skipped silently. Names stay bytes (`OsString`) from
//! `readdir` to `open`.
//!
//! Class folders are walked in parallel on a local rayon pool (never the global pool: its threads would
//! inherit a pinned worker's affinity if it were first touched from one); every directory visit checks the
//! `cancel` flag, so the caller can stop the scan of a huge tree at any time.

use super::{Dataset, Files};
use crate::error::{Result, TrdataError};
use rayon::prelude::*;
use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// torchvision's `IMG_EXTENSIONS`: a file belongs to the dataset when its name ends with one of these,
/// compared ASCII case-insensitively. All of them are decoded (JPEG, PNG, PPM/PGM, BMP, TIFF, WebP); a file whose
/// bytes are something else fails when read, naming what it is, so indices and labels stay torchvision's.
pub const IMAGE_EXTENSIONS: [&str; 9] = [".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"];

/// True when `name` ends with one of [`IMAGE_EXTENSIONS`] (case-insensitive), like torchvision's
/// `has_file_allowed_extension`. ASCII folding equals Python's `str.lower()` here: the only non-ASCII
/// characters that lower to ASCII letters (KELVIN SIGN → `k`, `İ` → `i̇`) cannot complete an extension.
pub fn is_image_file_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    IMAGE_EXTENSIONS
        .iter()
        .any(|ext| b.len() >= ext.len() && b[b.len() - ext.len()..].eq_ignore_ascii_case(ext.as_bytes()))
}

/// The code points of `bytes` decoded as Python's `os.fsdecode` does on Linux (UTF-8, `surrogateescape`:
/// each byte of an invalid sequence becomes U+DC80..U+DCFF). Both decoders resume after the maximal invalid
/// subpart, so the sequences agree.
fn python_chars(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .utf8_chunks()
        .flat_map(|c| c.valid().chars().map(u32::from).chain(c.invalid().iter().map(|&b| 0xDC00 + u32::from(b))))
}

/// Python's order of two names given as bytes (`sorted()` of their `os.fsdecode`d `str`).
pub fn python_name_cmp(a: &[u8], b: &[u8]) -> CmpOrdering {
    // Valid UTF-8 compares the same bytewise and by code point; only invalid bytes need decoding.
    match (std::str::from_utf8(a), std::str::from_utf8(b)) {
        (Ok(_), Ok(_)) => a.cmp(b),
        _ => python_chars(a).cmp(python_chars(b)),
    }
}

/// A directory's identity: (device, inode) of the directory itself, symlinks resolved.
type DirId = (u64, u64);

fn dir_id(m: &Metadata) -> DirId {
    (m.dev(), m.ino())
}

fn source_error(path: &Path, message: impl Into<String>) -> TrdataError {
    TrdataError::Source { path: path.to_path_buf(), message: message.into() }
}

fn io_error(path: &Path, e: &std::io::Error) -> TrdataError {
    source_error(path, e.to_string())
}

/// The entries of one directory, split like `os.walk` splits them.
struct Listing {
    /// Entries that are directories (symlinks followed), with their identity.
    subdirs: Vec<(OsString, DirId)>,
    /// Every other entry (regular files, broken links, FIFOs…), names only; the caller filters them.
    files: Vec<OsString>,
}

/// List `dir`. An entry is a directory when it is one after following symlinks; when that cannot be told
/// (broken link, link loop, entry gone) it is a file, as `DirEntry.is_dir()` → False in `os.walk`.
fn list_dir(dir: &Path) -> Result<Listing> {
    let mut out = Listing { subdirs: Vec::new(), files: Vec::new() };
    for entry in std::fs::read_dir(dir).map_err(|e| io_error(dir, &e))? {
        let entry = entry.map_err(|e| io_error(dir, &e))?;
        let dir_meta = match entry.file_type() {
            Ok(ft) if ft.is_dir() => entry.metadata().ok(),
            Ok(ft) if ft.is_symlink() => std::fs::metadata(entry.path()).ok().filter(Metadata::is_dir),
            _ => None,
        };
        match dir_meta {
            Some(m) => out.subdirs.push((entry.file_name(), dir_id(&m))),
            None => out.files.push(entry.file_name()),
        }
    }
    Ok(out)
}

fn check_cancel(cancel: &AtomicBool, path: &Path) -> Result<()> {
    if cancel.load(Ordering::Relaxed) {
        return Err(source_error(path, "folder scan cancelled"));
    }
    Ok(())
}

/// A directory waiting to be entered, ordered by its path as Python orders path strings.
struct Pending {
    path: PathBuf,
    id: DirId,
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        // Reversed: `BinaryHeap` is a max-heap, the walk takes the smallest path first.
        python_name_cmp(other.path.as_os_str().as_bytes(), self.path.as_os_str().as_bytes())
    }
}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path // python_name_cmp is Equal exactly when the bytes are
    }
}

impl Eq for Pending {}

/// The image files below `class_dir` in torchvision's order (directories by path string, then names), each
/// directory entered at most once: one whose identity was already entered in this walk, or that is the
/// dataset root (`root_id`), is skipped.
///
/// Directories are entered smallest path first, from a heap of the subdirectories found so far: a
/// subdirectory's path extends its parent's, so it sorts after it, the heap gives the directories in
/// exactly the order of the finished listing, and the first path to reach a directory is the one that is
/// kept. That choice depends only on the names, never on `readdir` order or timing.
fn walk_class(class_dir: &Path, class_id: DirId, root_id: DirId, cancel: &AtomicBool) -> Result<Vec<PathBuf>> {
    let mut entered: HashSet<DirId> = HashSet::from([root_id]);
    let mut pending = BinaryHeap::from([Pending { path: class_dir.to_path_buf(), id: class_id }]);
    let mut files = Vec::new();
    while let Some(Pending { path, id }) = pending.pop() {
        if !entered.insert(id) {
            continue; // entered already, under a path that sorts first (or the root: an ancestor of all)
        }
        check_cancel(cancel, &path)?;
        let Listing { subdirs, files: mut names } = list_dir(&path)?;
        for (name, sub_id) in subdirs {
            if !entered.contains(&sub_id) {
                pending.push(Pending { path: path.join(name), id: sub_id });
            }
        }
        names.retain(|n| is_image_file_name(n));
        names.sort_by(|a, b| python_name_cmp(a.as_bytes(), b.as_bytes()));
        // Path::join adds '/' exactly like os.path.join.
        files.extend(names.into_iter().map(|n| path.join(n)));
    }
    Ok(files)
}

/// Build an ImageFolder dataset rooted at `root` (torchvision's rules, see the module documentation).
pub fn image_folder(root: &Path) -> Result<Dataset> {
    image_folder_cancellable(root, &AtomicBool::new(false))
}

/// [`image_folder`] that stops with a `Source` error ("folder scan cancelled") soon after `cancel` is set.
pub fn image_folder_cancellable(root: &Path, cancel: &AtomicBool) -> Result<Dataset> {
    let meta = std::fs::metadata(root).map_err(|e| io_error(root, &e))?;
    if !meta.is_dir() {
        return Err(source_error(root, "not a directory"));
    }
    let root_id = dir_id(&meta);
    let mut classes = list_dir(root)?.subdirs;
    classes.sort_by(|a, b| python_name_cmp(a.0.as_bytes(), b.0.as_bytes()));
    if classes.is_empty() {
        return Err(source_error(root, "no class folders found (ImageFolder expects root/<class>/<image>)"));
    }
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("trdata-scan{i}"))
        .build()
        .map_err(|e| TrdataError::Worker(format!("cannot start the folder-scan pool: {e}")))?;
    let per_class: Vec<Result<Vec<PathBuf>>> = pool
        .install(|| classes.par_iter().map(|(name, id)| walk_class(&root.join(name), *id, root_id, cancel)).collect());
    let (mut paths, mut labels) = (Vec::new(), Vec::new());
    let mut empty = Vec::new();
    for (label, (files, (name, _))) in per_class.into_iter().zip(&classes).enumerate() {
        let files = files?;
        if files.is_empty() {
            empty.push(name.to_string_lossy().into_owned());
        }
        labels.extend(std::iter::repeat_n(label as i64, files.len()));
        paths.extend(files);
    }
    if !empty.is_empty() {
        return Err(source_error(
            root,
            format!(
                "found no valid file for the classes {} (no files with extensions {})",
                empty.join(", "),
                IMAGE_EXTENSIONS.join(", ")
            ),
        ));
    }
    if paths.len() > u32::MAX as usize {
        return Err(source_error(root, "more than 2^32 samples"));
    }
    Ok(Dataset::new(Files(paths), labels, classes.into_iter().map(|(n, _)| n).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tmpdir(name: &str) -> PathBuf {
        crate::test_data::fresh_dir(&format!("src-{name}"))
    }

    fn touch(root: &Path, rels: &[&str]) {
        for r in rels {
            let p = root.join(r);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"x").unwrap();
        }
    }

    fn listing(root: &Path, ds: &Dataset) -> Vec<(String, i64)> {
        let Files(paths) = ds.store_as::<Files>().expect("ImageFolder stores files");
        paths.iter().zip(&ds.labels).map(|(p, &l)| (p.strip_prefix(root).unwrap().display().to_string(), l)).collect()
    }

    #[test]
    fn torchvision_order_extensions_and_labels() {
        let root = tmpdir("sorted");
        touch(
            &root,
            &["b/x.JPG", "a/z.jpeg", "a/y.png", "a/notes.txt", "c/sub/deep.Jpg", "c/top.webp", "c/a-b/q.bmp", "c/.tif"],
        );
        let ds = image_folder(&root).unwrap();
        assert_eq!(ds.classes, ["a", "b", "c"]);
        // Directories by path string ("c" < "c/a-b" < "c/sub"), then names: not a depth-first listing.
        assert_eq!(
            listing(&root, &ds),
            [
                ("a/y.png".into(), 0),
                ("a/z.jpeg".into(), 0),
                ("b/x.JPG".into(), 1),
                ("c/.tif".into(), 2),
                ("c/top.webp".into(), 2),
                ("c/a-b/q.bmp".into(), 2),
                ("c/sub/deep.Jpg".into(), 2),
            ]
        );
    }

    #[test]
    fn empty_and_missing_roots_are_errors() {
        let root = tmpdir("empty");
        assert!(matches!(image_folder(&root), Err(TrdataError::Source { .. })));
        std::fs::create_dir_all(root.join("cls")).unwrap();
        touch(&root, &["other/x.jpg", "cls/x.gif"]);
        let e = image_folder(&root).unwrap_err().to_string();
        assert!(e.contains("no valid file for the classes cls (no files with extensions .jpg, .jpeg"), "{e}");
        assert!(matches!(image_folder(&root.join("missing")), Err(TrdataError::Source { .. })));
    }

    #[test]
    fn symlink_cycles_are_entered_once() {
        let root = tmpdir("loops");
        touch(&root, &["a/x.jpg", "a/s/y.jpg", "b/z.jpg"]);
        symlink(".", root.join("a/self")).unwrap();
        symlink("..", root.join("a/s/up")).unwrap();
        symlink("../..", root.join("a/s/root")).unwrap();
        symlink("../../b", root.join("a/s/sib")).unwrap(); // not an ancestor: followed, like torchvision
        let ds = image_folder(&root).unwrap();
        assert_eq!(
            listing(&root, &ds),
            [("a/x.jpg".into(), 0), ("a/s/y.jpg".into(), 0), ("a/s/sib/z.jpg".into(), 0), ("b/z.jpg".into(), 1)]
        );
    }

    #[test]
    fn mutually_linked_siblings_are_entered_once_first_path_wins() {
        let root = tmpdir("mutual");
        touch(&root, &["c1/x/f.jpg", "c1/y/g.jpg"]);
        symlink("../y", root.join("c1/x/toy")).unwrap();
        symlink("../x", root.join("c1/y/tox")).unwrap();
        // Path order: c1/x < c1/x/toy (= y, entered here) < c1/x/toy/tox (= x: skipped) < c1/y (= y: skipped).
        // A walk that only skips ancestors lists both twice (c1/y/g.jpg, c1/y/tox/f.jpg); os.walk loops on.
        let ds = image_folder(&root).unwrap();
        assert_eq!(listing(&root, &ds), [("c1/x/f.jpg".into(), 0), ("c1/x/toy/g.jpg".into(), 0)]);
    }

    #[test]
    fn a_mesh_of_linked_siblings_lists_each_file_once() {
        // d0..d5 each hold one file and link to every other one. A walk that only skips ancestors lists every
        // simple path: 1 + 5 + 5*4 + ... + 5! = 326 per directory, 1,956 files for 6 (109,600 for 8).
        let k = 6;
        let root = tmpdir("mesh");
        for i in 0..k {
            touch(&root, &[&format!("c/d{i}/f{i}.jpg")]);
        }
        for i in 0..k {
            for j in (0..k).filter(|&j| j != i) {
                symlink(format!("../d{j}"), root.join(format!("c/d{i}/to{j}"))).unwrap();
            }
        }
        let ds = image_folder(&root).unwrap();
        let got = listing(&root, &ds);
        // Path order enters d0, then d0/to1 (= d1), d0/to1/to2 (= d2), ... each further path is skipped.
        let mut expected = vec![("c/d0/f0.jpg".to_string(), 0)];
        let mut dir = "c/d0".to_string();
        for j in 1..k {
            dir = format!("{dir}/to{j}");
            expected.push((format!("{dir}/f{j}.jpg"), 0));
        }
        assert_eq!(got, expected);
        // The same listing however the directories were created (readdir order does not matter).
        assert_eq!(listing(&root, &image_folder(&root).unwrap()), expected);
    }

    #[test]
    fn links_to_files_and_to_new_directories_are_still_followed() {
        let root = tmpdir("filelinks");
        touch(&root, &["a/x.jpg", "b/y.jpg"]);
        symlink("x.jpg", root.join("a/x2.jpg")).unwrap(); // a link to a file: listed, like torchvision
        symlink("../b", root.join("a/tob")).unwrap(); // another class: entered within class a
        symlink("../a", root.join("b/toa")).unwrap();
        let ds = image_folder(&root).unwrap();
        assert_eq!(
            listing(&root, &ds),
            [
                ("a/x.jpg".into(), 0),
                ("a/x2.jpg".into(), 0),
                ("a/tob/y.jpg".into(), 0),
                ("b/y.jpg".into(), 1),
                ("b/toa/x.jpg".into(), 1),
                ("b/toa/x2.jpg".into(), 1),
            ]
        );
    }

    #[test]
    fn python_order_of_non_utf8_names() {
        use std::os::unix::ffi::OsStrExt as _;
        // As bytes: 0x80 < 0xC3 ("é") < 0xEE ("\u{e000}") < 0xFF; as Python str: "é" < "\udc80" < "\udcff" < "\ue000".
        let mut names: Vec<&[u8]> = vec![b"\xff", "\u{e000}".as_bytes(), b"\x80x", "é".as_bytes(), b"a", b"caf\xe9"];
        names.sort_by(|a, b| python_name_cmp(a, b));
        assert_eq!(names, [&b"a"[..], b"caf\xe9", "é".as_bytes(), b"\x80x", b"\xff", "\u{e000}".as_bytes()]);
        // A truncated sequence followed by a valid character: the valid one is decoded, not swallowed.
        assert_eq!(python_chars(b"\xe4\xb8\xe4\xb8\xad").collect::<Vec<_>>(), [0xDCE4, 0xDCB8, 0x4E2D]);
        assert!(is_image_file_name(OsStr::from_bytes(b"\xff.JPEG")));
        assert!(!is_image_file_name(OsStr::from_bytes(b"xjpg")));
        assert!(is_image_file_name(OsStr::from_bytes(b".jpg")));
    }

    #[test]
    fn cancel_stops_the_scan() {
        let root = tmpdir("cancel");
        touch(&root, &["a/x.jpg"]);
        let e = image_folder_cancellable(&root, &AtomicBool::new(true)).unwrap_err().to_string();
        assert!(e.contains("cancelled"), "{e}");
    }
}
