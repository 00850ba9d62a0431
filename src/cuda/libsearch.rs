//! cuda/libsearch — where the run-time-loaded CUDA libraries (libnvjpeg: `nvjpeg.rs`, libnvrtc: `nvrtc.rs`) are
//! looked for, one search order for both (each module documents it for its library):
//! 1. the override variable (`$TRDATA_NVJPEG`, `$TRDATA_NVRTC`: a file path), when set;
//! 2. the paths the caller passes (Python's wheel copies on `sys.path`);
//! 3. the CUDA toolkit: `$CUDA_HOME/lib64`, then `/usr/local/cuda` and every `/usr/local/cuda-*` (highest version
//!    first), each with `lib64` and `targets/x86_64-linux/lib`;
//! 4. the bare sonames, which the dynamic loader resolves (`LD_LIBRARY_PATH`, ld.so.cache).
//!
//! The first candidate that opens and has every symbol wins; every candidate's outcome is kept for `trdata info`.
//!
//! A library that loaded stays loaded until the process ends ([`Kept`]): later searches that reach the same path
//! get the same instance, and nothing is unloaded when the last loader using it closes. libnvjpeg links the CUDA
//! runtime statically, which registers its kernels with the driver on first use; unloading it under a live
//! context, and loading it again for the next loader, is not a sequence CUDA supports (cudarc keeps the driver
//! the same way, in a static; torch never unloads its libraries).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
    mut open_one: impl FnMut(&Path) -> Result<T, String>,
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

/// The libraries of one kind this process has loaded, by candidate path; never emptied (see the module docs).
pub struct Kept<T>(Mutex<Vec<(PathBuf, Arc<T>)>>);

impl<T> Kept<T> {
    /// None loaded yet (for a `static`).
    pub const fn new() -> Self {
        Self(Mutex::new(Vec::new()))
    }

    /// [`open_first`], where a candidate this process already loaded is that same instance again.
    pub fn open_first(
        &self,
        candidates: Vec<PathBuf>,
        open_one: impl Fn(&Path) -> Result<T, String>,
    ) -> (Option<Arc<T>>, Vec<(String, String)>) {
        // One search at a time: two loaders starting at once must not both load (and then keep) a library.
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        open_first(candidates, |path| {
            if let Some((_, lib)) = kept.iter().find(|(p, _)| p == path) {
                return Ok(Arc::clone(lib));
            }
            let lib = Arc::new(open_one(path)?);
            kept.push((path.to_path_buf(), Arc::clone(&lib)));
            Ok(lib)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_library_is_loaded_once_per_path_and_kept() {
        let kept: Kept<String> = Kept::new();
        let opened = AtomicUsize::new(0);
        let open_one = |p: &Path| {
            if p.ends_with("missing.so") {
                return Err("cannot open: no such file".to_owned());
            }
            opened.fetch_add(1, Ordering::SeqCst);
            Ok(p.display().to_string())
        };
        let search = |names: &[&str]| kept.open_first(names.iter().map(PathBuf::from).collect(), open_one);
        let (a, tried) = search(&["/x/missing.so", "/x/a.so"]);
        assert_eq!(tried.iter().map(|t| t.1.as_str()).collect::<Vec<_>>(), ["cannot open: no such file", "loaded"]);
        let (b, _) = search(&["/x/missing.so", "/x/a.so"]);
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!(Arc::ptr_eq(&a, &b), "the same path gives the same instance");
        assert_eq!(opened.load(Ordering::SeqCst), 1);
        // A failure is not kept (tried again), another path is a second library; dropping every user unloads
        // nothing (the registry still holds them).
        let (c, _) = search(&["/x/c.so"]);
        assert!(!Arc::ptr_eq(&a, c.as_ref().unwrap()));
        drop((a, b, c));
        let kept_now = || kept.0.lock().unwrap().len();
        assert_eq!((kept_now(), opened.load(Ordering::SeqCst)), (2, 2));
        let (none, tried) = search(&["/x/missing.so"]);
        assert!(none.is_none() && tried.len() == 1 && kept_now() == 2);
    }
}
