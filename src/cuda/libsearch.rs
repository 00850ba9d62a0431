//! cuda/libsearch — where the run-time-loaded CUDA libraries (libnvjpeg: `nvjpeg.rs`, libnvrtc: `nvrtc.rs`) are
//! looked for, one search order for both (each module documents it for its library):
//! 1. the override variable (`$TRDATA_NVJPEG`, `$TRDATA_NVRTC`: a file path), when set;
//! 2. the paths the caller passes (Python's wheel copies on `sys.path`);
//! 3. the CUDA toolkit: `$CUDA_HOME/lib64`, then `/usr/local/cuda` and every `/usr/local/cuda-*` (highest version
//!    first), each with `lib64` and `targets/x86_64-linux/lib`;
//! 4. the bare sonames, which the dynamic loader resolves (`LD_LIBRARY_PATH`, ld.so.cache).
//!
//! The first candidate that opens and has every symbol wins; every candidate's outcome is kept for `trdata info`.

use std::path::{Path, PathBuf};

/// The search order above for a library named by `sonames` (newest first) with override variable `env`.
pub fn candidates(env: &str, sonames: &[&str], extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
    }
    for p in extra {
        if !out.contains(p) {
            out.push(p.clone());
        }
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(home) = std::env::var_os("CUDA_HOME").filter(|p| !p.is_empty()) {
        dirs.push(Path::new(&home).join("lib64"));
    }
    for root in toolkit_roots(Path::new("/usr/local")) {
        dirs.push(root.join("lib64"));
        dirs.push(root.join("targets/x86_64-linux/lib"));
    }
    for dir in dirs {
        for soname in sonames {
            let p = dir.join(soname);
            if p.exists() && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out.extend(sonames.iter().map(PathBuf::from));
    out
}

/// `<prefix>/cuda`, then every `<prefix>/cuda-*`, newest (highest version) first.
pub fn toolkit_roots(prefix: &Path) -> Vec<PathBuf> {
    let mut roots = vec![prefix.join("cuda")];
    if let Ok(entries) = std::fs::read_dir(prefix) {
        let mut versioned: Vec<(Vec<u32>, PathBuf)> = entries
            .flatten()
            .map(|e| e.path())
            .filter_map(|p| {
                let name = p.file_name()?.to_str()?;
                let v = name.strip_prefix("cuda-")?;
                // "13.0" → [13, 0]: numeric order, so cuda-13.0 comes before cuda-9.2.
                let key = v.split('.').map(|s| s.parse::<u32>().unwrap_or(0)).collect();
                Some((key, p))
            })
            .collect();
        versioned.sort();
        versioned.reverse();
        roots.extend(versioned.into_iter().map(|(_, p)| p));
    }
    roots
}

/// Try `candidates` in order with `open_one`: the first library that opens, and every candidate's outcome
/// (`"loaded"` or why not).
pub fn open_first<T>(
    candidates: Vec<PathBuf>,
    open_one: impl Fn(&Path) -> Result<T, String>,
) -> (Option<T>, Vec<(String, String)>) {
    let mut tried = Vec::new();
    for path in candidates {
        let shown = path.display().to_string();
        match open_one(&path) {
            Ok(lib) => {
                tried.push((shown, "loaded".to_owned()));
                return (Some(lib), tried);
            }
            Err(why) => tried.push((shown, why)),
        }
    }
    (None, tried)
}
