//! torchvision ImageFolder: `root/<class>/**/<file>` with classes sorted by name, files sorted by path,
//! label = class position. Class folders are scanned in parallel on a local rayon pool (never the global
//! pool: its threads would inherit a pinned worker's affinity if it were first touched from one).

use super::{Dataset, SampleRef};
use crate::error::{Result, TrdataError};
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// Extensions accepted by `image_folder`, compared case-insensitively.
pub const IMAGE_EXTENSIONS: [&str; 3] = ["jpg", "jpeg", "png"];

fn has_image_extension(p: &Path) -> bool {
    p.extension().and_then(|e| e.to_str()).is_some_and(|e| IMAGE_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)))
}

fn io_error(path: &Path, e: std::io::Error) -> TrdataError {
    TrdataError::Source { path: path.to_path_buf(), message: e.to_string() }
}

/// Files below `dir` (recursively, following symlinks like os.walk(followlinks=True)), sorted.
fn walk(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> Result<()> {
    if depth > 64 {
        return Err(TrdataError::Source {
            path: dir.to_path_buf(),
            message: "directory nesting deeper than 64 (symlink loop?)".into(),
        });
    }
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).map_err(|e| io_error(dir, e))?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out, depth + 1)?;
        } else if has_image_extension(&p) && p.is_file() {
            out.push(p);
        }
    }
    Ok(())
}

/// Build an ImageFolder dataset rooted at `root`.
pub fn image_folder(root: &Path) -> Result<Dataset> {
    let meta = std::fs::metadata(root).map_err(|e| io_error(root, e))?;
    if !meta.is_dir() {
        return Err(TrdataError::Source { path: root.to_path_buf(), message: "not a directory".into() });
    }
    let mut classes: Vec<(String, PathBuf)> = std::fs::read_dir(root)
        .map_err(|e| io_error(root, e))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok().map(|n| (n, e.path())))
        .collect();
    classes.sort();
    if classes.is_empty() {
        return Err(TrdataError::Source { path: root.to_path_buf(), message: "no class folders found".into() });
    }
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("trdata-scan{i}"))
        .build()
        .map_err(|e| TrdataError::Worker(format!("cannot start the folder-scan pool: {e}")))?;
    let per_class: Vec<Result<Vec<PathBuf>>> = pool.install(|| {
        classes
            .par_iter()
            .map(|(_, dir)| {
                let mut files = Vec::new();
                walk(dir, &mut files, 0)?;
                Ok(files)
            })
            .collect()
    });
    let mut samples = Vec::new();
    for (label, files) in per_class.into_iter().enumerate() {
        for path in files? {
            samples.push(SampleRef { path, label: label as i64 });
        }
    }
    if samples.is_empty() {
        return Err(TrdataError::Source {
            path: root.to_path_buf(),
            message: format!("no files with extensions {IMAGE_EXTENSIONS:?} in {} class folders", classes.len()),
        });
    }
    Ok(Dataset { samples, classes: classes.into_iter().map(|(n, _)| n).collect() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("trdata-src-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn classes_sorted_extensions_case_insensitive() {
        let root = tmpdir("sorted");
        for (c, f) in [("b", "x.JPG"), ("a", "z.jpeg"), ("a", "y.png"), ("a", "notes.txt"), ("c", "sub/deep.Jpg")] {
            let p = root.join(c).join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"x").unwrap();
        }
        let ds = image_folder(&root).unwrap();
        assert_eq!(ds.classes, ["a", "b", "c"]);
        let got: Vec<(String, i64)> =
            ds.samples.iter().map(|s| (s.path.strip_prefix(&root).unwrap().display().to_string(), s.label)).collect();
        assert_eq!(
            got,
            [("a/y.png".into(), 0), ("a/z.jpeg".into(), 0), ("b/x.JPG".into(), 1), ("c/sub/deep.Jpg".into(), 2)]
        );
    }

    #[test]
    fn empty_and_missing_roots_are_errors() {
        let root = tmpdir("empty");
        assert!(matches!(image_folder(&root), Err(TrdataError::Source { .. })));
        std::fs::create_dir_all(root.join("cls")).unwrap();
        let e = image_folder(&root).unwrap_err().to_string();
        assert!(e.contains("no files"), "{e}");
        assert!(matches!(image_folder(&root.join("missing")), Err(TrdataError::Source { .. })));
    }
}
