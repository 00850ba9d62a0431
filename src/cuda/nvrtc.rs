//! nvrtc — NVIDIA's run-time CUDA compiler, loaded at run time, turning trdata's kernel sources
//! (`src/cuda/kernels/*.cu`) into a CUBIN for the exact GPU in use. Used by the GPU resample path
//! ([`super::resample_gpu`]); a platform room beside the driver, below the data path.
//!
//! **Why a CUBIN, not PTX** (docs/design/gpu-decode.md §0.8, §7): the build host has no nvcc/toolkit, so nothing can be
//! compiled into the wheel; and PTX emitted by a newer NVRTC (e.g. 13.2 from the pip wheels) can carry a PTX ISA
//! version the installed driver (580 = CUDA 13.0 on the GPU box) cannot JIT, while a CUBIN built for the device's
//! own `sm_XY` is loaded as is, with no JIT. The kernels are integer code, so no `--use_fast_math`-style option is
//! passed: nothing in them may be reassociated or approximated.
//!
//! **Loading.** Nothing links libnvrtc: the wheel must import on machines without it. [`candidates`] lists where
//! to look, first hit wins, in this documented order:
//! 1. `$TRDATA_NVRTC` (a file path), when set;
//! 2. the paths the caller passes (Python, `trdata/_nvrtc.py`, passes `<sys.path entry>/nvidia/cu13/lib/
//!    libnvrtc.so.13` — torch's `cuda-toolkit[nvrtc]` wheel — and `nvidia/cuda_nvrtc/lib/libnvrtc.so.12`, the
//!    CUDA 12 wheel, for every `sys.path` entry);
//! 3. the CUDA toolkit: `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`, `/usr/local/cuda/targets/x86_64-linux/lib`,
//!    and the same under every `/usr/local/cuda-*` (newest first);
//! 4. the loader's own search (`libnvrtc.so.13`, then `.so.12`: `LD_LIBRARY_PATH`, ld.so.cache).
//!
//! A library that opens but lacks a symbol is skipped with the reason, never a panic. Every candidate's outcome
//! is kept ([`NvrtcProbe`]) for `trdata info`. libnvrtc needs its `libnvrtc-builtins` next to it, which it finds
//! through its own `RUNPATH` (`$ORIGIN`), so opening it by absolute path is enough.
//!
//! NVRTC needs no GPU: a CUBIN for any supported architecture can be produced anywhere (the tests compile the
//! kernels for sm_90 on the build host).

use std::ffi::{CString, c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use libloading::Library;

use crate::error::{Result, TrdataError};

type NvrtcResult = c_int;
type Program = *mut std::ffi::c_void;

/// The NVRTC entry points trdata calls (resolved once when the library is opened).
struct Fns {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult,
    create_program: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> NvrtcResult,
    compile_program: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> NvrtcResult,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    log: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    cubin_size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    cubin: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    destroy_program: unsafe extern "C" fn(*mut Program) -> NvrtcResult,
}

/// An opened libnvrtc.
pub struct Nvrtc {
    fns: Fns,
    /// Where it was found.
    pub path: String,
    /// (major, minor) from `nvrtcVersion`.
    pub version: (i32, i32),
    // Declared last so the function pointers above are dropped before the library is unloaded.
    _lib: Library,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc").field("path", &self.path).field("version", &self.version).finish()
    }
}

/// What the search found (for `trdata info`).
#[derive(Debug, Clone)]
pub struct NvrtcProbe {
    /// The library that loaded, if any: path and (major, minor).
    pub found: Option<(String, (i32, i32))>,
    /// Every candidate tried, in order, with what happened (`"loaded"` or why not).
    pub tried: Vec<(String, String)>,
}

/// The sonames tried in every toolkit folder and, last, through the dynamic loader's own search.
const SONAMES: [&str; 2] = ["libnvrtc.so.13", "libnvrtc.so.12"];

/// The search order of the module docs (`cuda/libsearch.rs`): `$TRDATA_NVRTC`, then `extra`, then the toolkit
/// folders, then the bare sonames (which the dynamic loader resolves).
pub fn candidates(extra: &[PathBuf]) -> Vec<PathBuf> {
    super::libsearch::candidates("TRDATA_NVRTC", &SONAMES, extra)
}

/// Every Nvrtc this process loaded, kept until it ends (`cuda/libsearch.rs`).
static LOADED: super::libsearch::Kept<Nvrtc> = super::libsearch::Kept::new();

/// Search `candidates(extra)` and open the first library that has every symbol trdata needs.
pub fn open(extra: &[PathBuf]) -> (Option<Arc<Nvrtc>>, NvrtcProbe) {
    let (lib, tried) = LOADED.open_first(candidates(extra), open_one);
    let found = lib.as_ref().map(|l| (l.path.clone(), l.version));
    (lib, NvrtcProbe { found, tried })
}

/// [`open`] for a caller that must compile kernels: no library is a CudaError naming NVRTC and listing what was
/// tried.
pub fn open_required(extra: &[PathBuf]) -> Result<Arc<Nvrtc>> {
    let (lib, probe) = open(extra);
    lib.ok_or_else(|| {
        let tried: Vec<String> = probe.tried.iter().map(|(p, why)| format!("{p}: {why}")).collect();
        TrdataError::Cuda {
            call: "nvrtc".to_owned(),
            message: format!(
                "the GPU resample kernels need libnvrtc, which was not found (tried {}); install torch's \
                 cuda-toolkit[nvrtc] wheel or set TRDATA_NVRTC",
                tried.join("; ")
            ),
        }
    })
}

/// [`open`] for its report: what `trdata info` shows (the library it finds stays loaded, as every one does).
pub fn probe(extra: &[PathBuf]) -> NvrtcProbe {
    open(extra).1
}

/// The function pointer `name` of `lib`, typed as the caller's field.
fn symbol<T: Copy>(lib: &Library, name: &str) -> std::result::Result<T, String> {
    let c_name = format!("{name}\0");
    // SAFETY: every `T` this is called with is the C signature nvrtc.h (CUDA 12/13) declares for `name`; the
    // copied pointer is only called while `lib` is alive (it is stored next to the pointers in `Nvrtc`).
    unsafe { lib.get::<T>(c_name.as_bytes()) }.map(|s| *s).map_err(|_| format!("missing symbol {name}"))
}

fn open_one(path: &Path) -> std::result::Result<Nvrtc, String> {
    // SAFETY: loading a shared library runs its initializers; libnvrtc's do no device work (it is a compiler).
    // The path is a candidate the user or the search order named.
    let lib = unsafe { Library::new(path) }.map_err(|e| format!("cannot open: {e}"))?;
    let fns = Fns {
        version: symbol(&lib, "nvrtcVersion")?,
        create_program: symbol(&lib, "nvrtcCreateProgram")?,
        compile_program: symbol(&lib, "nvrtcCompileProgram")?,
        log_size: symbol(&lib, "nvrtcGetProgramLogSize")?,
        log: symbol(&lib, "nvrtcGetProgramLog")?,
        cubin_size: symbol(&lib, "nvrtcGetCUBINSize")?,
        cubin: symbol(&lib, "nvrtcGetCUBIN")?,
        destroy_program: symbol(&lib, "nvrtcDestroyProgram")?,
    };
    let (mut major, mut minor) = (0 as c_int, 0 as c_int);
    // SAFETY: both out-pointers are valid, writable c_ints.
    let st = unsafe { (fns.version)(&mut major, &mut minor) };
    if st != 0 {
        return Err(format!("nvrtcVersion failed with {}", result_name(st)));
    }
    Ok(Nvrtc { fns, path: path.display().to_string(), version: (major, minor), _lib: lib })
}

/// nvrtc.h's `nvrtcResult` names, for messages.
fn result_name(r: NvrtcResult) -> String {
    let name = match r {
        0 => "NVRTC_SUCCESS",
        1 => "NVRTC_ERROR_OUT_OF_MEMORY",
        2 => "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
        3 => "NVRTC_ERROR_INVALID_INPUT",
        4 => "NVRTC_ERROR_INVALID_PROGRAM",
        5 => "NVRTC_ERROR_INVALID_OPTION",
        6 => "NVRTC_ERROR_COMPILATION",
        7 => "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
        8 => "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
        9 => "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
        10 => "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
        11 => "NVRTC_ERROR_INTERNAL_ERROR",
        _ => "unknown nvrtcResult",
    };
    format!("{name} ({r})")
}

/// `TrdataError::Cuda` naming the NVRTC call.
fn nvrtc_error(call: &str, message: impl Into<String>) -> TrdataError {
    TrdataError::Cuda { call: call.to_owned(), message: message.into() }
}

/// Destroys the program when dropped (on every exit of [`compile_cubin`]).
struct ProgramGuard<'a> {
    lib: &'a Nvrtc,
    prog: Program,
}

impl Drop for ProgramGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: `prog` was created by nvrtcCreateProgram and is destroyed once, here.
        unsafe { (self.lib.fns.destroy_program)(&mut self.prog) };
    }
}

/// Compile CUDA C++ `source` (named `name` in messages, e.g. `"resample.cu"`) for `sm_{major}{minor}` and return
/// the CUBIN. A compile failure is a CudaError (`nvrtcCompileProgram`) whose message holds NVRTC's log; the log
/// of a successful compile (warnings) is dropped.
pub fn compile_cubin(lib: &Nvrtc, source: &str, name: &str, arch: (u32, u32)) -> Result<Vec<u8>> {
    let f = &lib.fns;
    let src = CString::new(source).map_err(|_| nvrtc_error("nvrtcCreateProgram", "the source holds a NUL byte"))?;
    let c_name = CString::new(name).map_err(|_| nvrtc_error("nvrtcCreateProgram", "the name holds a NUL byte"))?;
    let mut prog: Program = std::ptr::null_mut();
    // SAFETY: `src` and `c_name` are NUL-terminated and outlive the call; no headers (0, null, null).
    let st =
        unsafe { (f.create_program)(&mut prog, src.as_ptr(), c_name.as_ptr(), 0, std::ptr::null(), std::ptr::null()) };
    if st != 0 {
        return Err(nvrtc_error("nvrtcCreateProgram", result_name(st)));
    }
    let guard = ProgramGuard { lib, prog };
    let options = [format!("--gpu-architecture=sm_{}{}", arch.0, arch.1), "--std=c++17".to_owned()];
    let options = options
        .into_iter()
        .map(CString::new)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|_| nvrtc_error("nvrtcCompileProgram", "an option holds a NUL byte"))?;
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: the program is live; `option_ptrs` holds `len` NUL-terminated strings that outlive the call.
    let st = unsafe { (f.compile_program)(guard.prog, option_ptrs.len() as c_int, option_ptrs.as_ptr()) };
    if st != 0 {
        let log = program_log(lib, guard.prog);
        return Err(nvrtc_error(
            "nvrtcCompileProgram",
            format!("{} compiling {name} for sm_{}{}:\n{log}", result_name(st), arch.0, arch.1),
        ));
    }
    let mut size = 0usize;
    // SAFETY: the program compiled; `size` is a valid out-pointer.
    let st = unsafe { (f.cubin_size)(guard.prog, &mut size) };
    if st != 0 {
        return Err(nvrtc_error("nvrtcGetCUBINSize", result_name(st)));
    }
    if size == 0 {
        return Err(nvrtc_error("nvrtcGetCUBINSize", "NVRTC produced no CUBIN (was a virtual architecture asked?)"));
    }
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` is writable for `size` bytes, the size NVRTC reported for this program.
    let st = unsafe { (f.cubin)(guard.prog, cubin.as_mut_ptr().cast::<c_char>()) };
    if st != 0 {
        return Err(nvrtc_error("nvrtcGetCUBIN", result_name(st)));
    }
    Ok(cubin)
}

/// The program's compile log (empty when NVRTC cannot give it).
fn program_log(lib: &Nvrtc, prog: Program) -> String {
    let mut size = 0usize;
    // SAFETY: the program is live; `size` is a valid out-pointer.
    if unsafe { (lib.fns.log_size)(prog, &mut size) } != 0 || size == 0 {
        return String::new();
    }
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` is writable for `size` bytes (the log size, NUL included).
    if unsafe { (lib.fns.log)(prog, buf.as_mut_ptr().cast::<c_char>()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The library the tests compile with, if this machine has one (`TRDATA_NVRTC` or the search order), else None
/// with a note on stderr (the test then checks nothing more).
#[cfg(test)]
pub(crate) fn test_nvrtc() -> Option<Arc<Nvrtc>> {
    let (lib, probe) = open(&[]);
    if lib.is_none() {
        eprintln!("NOTE: no NVRTC here (set TRDATA_NVRTC to compile the kernels); tried: {:?}", probe.tried);
    }
    lib
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_order_is_override_then_callers_paths_then_toolkit_then_sonames() {
        let extra = vec![PathBuf::from("/nowhere/wheel/libnvrtc.so.13"), PathBuf::from("/nowhere/libnvrtc.so.12")];
        let c = candidates(&extra);
        assert_eq!(c[c.len() - 2], PathBuf::from("libnvrtc.so.13"));
        assert_eq!(c[c.len() - 1], PathBuf::from("libnvrtc.so.12"));
        let first = c.iter().position(|p| p == &extra[0]).expect("caller's path listed");
        let second = c.iter().position(|p| p == &extra[1]).expect("caller's path listed");
        assert!(first < second, "the caller's order is kept: {c:?}");
        // Only the override may come before the caller's paths.
        let over = std::env::var_os("TRDATA_NVRTC").filter(|v| !v.is_empty());
        assert_eq!(first, usize::from(over.is_some()), "{c:?}");
        if let Some(v) = over {
            assert_eq!(c[0], PathBuf::from(v));
        }
        // Everything between the caller's paths and the bare sonames is an existing toolkit file.
        for p in &c[second + 1..c.len() - 2] {
            assert!(p.is_absolute() && p.exists(), "{p:?}");
            assert!(SONAMES.iter().any(|s| p.ends_with(s)), "{p:?}");
        }
    }

    #[test]
    fn toolkit_folders_come_newest_version_first() {
        let dir = std::env::temp_dir().join(format!("trdata-nvrtc-roots-{}", std::process::id()));
        for v in ["cuda-9.2", "cuda-12.4", "cuda-13.0", "cuda-12.10", "not-cuda"] {
            std::fs::create_dir_all(dir.join(v)).unwrap();
        }
        let roots = super::super::libsearch::toolkit_roots(&dir);
        let names: Vec<String> = roots.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(names, ["cuda", "cuda-13.0", "cuda-12.10", "cuda-12.4", "cuda-9.2"]);
    }

    #[test]
    fn a_file_that_is_not_a_library_or_lacks_a_symbol_is_skipped_with_its_reason() {
        let dir = std::env::temp_dir().join(format!("trdata-nvrtc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("libnvrtc.so.13");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let why = open_one(&fake).unwrap_err();
        assert!(why.starts_with("cannot open"), "{why}");
        // A library without NVRTC's symbols (libc) is skipped naming the first missing one.
        assert_eq!(open_one(Path::new("libc.so.6")).unwrap_err(), "missing symbol nvrtcVersion");
        // The search records both outcomes when nothing before them loads (no override set).
        if std::env::var_os("TRDATA_NVRTC").is_none() {
            let p = probe(&[fake.clone(), PathBuf::from("libc.so.6")]);
            let row = |path: &str| p.tried.iter().find(|(t, _)| t == path).cloned().expect("tried");
            assert!(row(&fake.display().to_string()).1.starts_with("cannot open"));
            assert_eq!(row("libc.so.6").1, "missing symbol nvrtcVersion");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_compile_error_is_a_cuda_error_carrying_nvrtcs_log() {
        let Some(lib) = test_nvrtc() else { return };
        let bad = "extern \"C\" __global__ void k(int* p) { p[0] = undeclared_name; }";
        let err = compile_cubin(&lib, bad, "bad.cu", (9, 0)).unwrap_err();
        let TrdataError::Cuda { call, message } = &err else { panic!("{err:?}") };
        assert_eq!(call, "nvrtcCompileProgram");
        assert!(message.contains("NVRTC_ERROR_COMPILATION") && message.contains("undeclared_name"), "{message}");
        assert!(message.contains("bad.cu"), "{message}");
    }

    #[test]
    fn a_small_kernel_compiles_to_an_elf_cubin_for_sm_90() {
        let Some(lib) = test_nvrtc() else { return };
        assert!(lib.version.0 >= 12, "{:?}", lib.version);
        let src = "extern \"C\" __global__ void add_one(int* p) { p[threadIdx.x] += 1; }";
        let cubin = compile_cubin(&lib, src, "add_one.cu", (9, 0)).unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF", "a CUBIN is an ELF image");
        assert!(cubin.windows(7).any(|w| w == b"add_one"), "the kernel's symbol is in the image");
    }
}
