//! nvjpeg — NVIDIA's nvJPEG, loaded at run time (issue 11's first step: find it, say what it offers, decode a
//! JPEG with it so the GPU/CPU decode difference can be measured). The batched GPU decode path beside the CPU
//! workers builds on this; the plan, with its sources, is docs/gpu_decode.md.
//!
//! Pipeline position: a platform room beside the driver (`cuda/`), below the data path. `trdata info` reads
//! [`probe`]; `_core.nvjpeg_decode` (tests, benches) calls [`Nvjpeg::decode_rgb`].
//!
//! **Loading.** Nothing links libnvjpeg: the wheel must import on machines without it. [`candidates`] lists where
//! to look, first hit wins, in this documented order:
//! 1. `$TRDATA_NVJPEG` (a file path), when set;
//! 2. the paths the caller passes (Python passes the `nvidia-nvjpeg` wheel's `nvidia/cu13/lib/libnvjpeg.so.13`
//!    and torchvision's bundled `torchvision.libs/libnvjpeg*.so*` of every `sys.path` entry);
//! 3. the CUDA toolkit: `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`, `/usr/local/cuda/targets/x86_64-linux/lib`,
//!    and the same under every `/usr/local/cuda-*`;
//! 4. the loader's own search (`libnvjpeg.so.13`, then `.so.12`: `LD_LIBRARY_PATH`, ld.so.cache).
//!
//! A library that opens but lacks a symbol is skipped with the reason, never a panic. Every candidate's outcome
//! is kept for `trdata info`.
//!
//! **Calls.** nvJPEG links its own static CUDA runtime, which adopts the context current on the calling thread:
//! every call that touches the device runs inside [`GpuContext::scoped`] (the device's primary context, shared
//! with torch). Handles and states are created and destroyed in the same call here ([`Nvjpeg::decode_rgb`]), so
//! a failed decode leaves nothing behind to poison the next one.

use std::ffi::{c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use libloading::Library;

use super::driver::{DeviceMemory, GpuContext, Stream, cuda_error};
use crate::error::{Result, TrdataError};

type Status = c_int;
type Handle = *mut c_void;
type State = *mut c_void;

/// `nvjpegImage_t` (nvjpeg.h: `NVJPEG_MAX_COMPONENT` = 4 planes, pitches in bytes).
#[repr(C)]
struct Image {
    channel: [*mut u8; 4],
    pitch: [usize; 4],
}

const BACKEND_DEFAULT: c_int = 0;
const BACKEND_HARDWARE: c_int = 3;
const OUTPUT_RGBI: c_int = 5;
/// `NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION`: interpolated ("fancy") chroma upsampling, what libjpeg-turbo
/// (the CPU path) does by default, so the two decodes agree as closely as they can.
const FLAG_UPSAMPLING_WITH_INTERPOLATION: c_uint = 1 << 5;
/// nvjpeg.h's `NVJPEG_STATUS_ARCH_MISMATCH`: this GPU has no hardware JPEG engine.
const STATUS_ARCH_MISMATCH: Status = 7;
/// The largest side accepted for a decode here (checked before any allocation; JPEG's own limit is 65,535).
const MAX_SIDE: usize = 65_535;
/// The largest decoded image accepted (bytes), so a header cannot make us allocate without bound.
const MAX_PIXELS_BYTES: usize = 1 << 31;

/// The nvJPEG entry points trdata calls (resolved once when the library is opened).
struct Fns {
    get_property: unsafe extern "C" fn(c_int, *mut c_int) -> Status,
    create_ex: unsafe extern "C" fn(c_int, *mut c_void, *mut c_void, c_uint, *mut Handle) -> Status,
    destroy: unsafe extern "C" fn(Handle) -> Status,
    state_create: unsafe extern "C" fn(Handle, *mut State) -> Status,
    state_destroy: unsafe extern "C" fn(State) -> Status,
    get_image_info:
        unsafe extern "C" fn(Handle, *const u8, usize, *mut c_int, *mut c_int, *mut c_int, *mut c_int) -> Status,
    batched_initialize: unsafe extern "C" fn(Handle, State, c_int, c_int, c_int) -> Status,
    decode_batched:
        unsafe extern "C" fn(Handle, State, *const *const u8, *const usize, *mut Image, *mut c_void) -> Status,
    /// Absent before CUDA 11.x's hardware backend; `None` = unknown.
    hardware_info: Option<unsafe extern "C" fn(Handle, *mut c_uint, *mut c_uint) -> Status>,
}

/// An opened libnvjpeg.
pub struct Nvjpeg {
    fns: Fns,
    /// Where it was found.
    pub path: String,
    /// (major, minor, patch) from `nvjpegGetProperty`.
    pub version: (i32, i32, i32),
    // Declared last so the function pointers above are dropped before the library is unloaded.
    _lib: Library,
}

impl std::fmt::Debug for Nvjpeg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvjpeg").field("path", &self.path).field("version", &self.version).finish()
    }
}

/// What the search found (for `trdata info`).
#[derive(Debug, Clone)]
pub struct NvjpegProbe {
    /// The library that loaded, if any.
    pub found: Option<(String, (i32, i32, i32))>,
    /// Every candidate tried, in order, with what happened (`"loaded"` or why not).
    pub tried: Vec<(String, String)>,
}

/// The search order of the module docs: `$TRDATA_NVJPEG`, then `extra`, then the toolkit folders, then the
/// bare sonames (which the dynamic loader resolves).
pub fn candidates(extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("TRDATA_NVJPEG").filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
    }
    out.extend(extra.iter().cloned());
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(home) = std::env::var_os("CUDA_HOME").filter(|p| !p.is_empty()) {
        dirs.push(Path::new(&home).join("lib64"));
    }
    let mut roots = vec![PathBuf::from("/usr/local/cuda")];
    if let Ok(entries) = std::fs::read_dir("/usr/local") {
        let mut versioned: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("cuda-")))
            .collect();
        versioned.sort();
        versioned.reverse(); // newest toolkit first
        roots.extend(versioned);
    }
    for root in roots {
        dirs.push(root.join("lib64"));
        dirs.push(root.join("targets/x86_64-linux/lib"));
    }
    for dir in dirs {
        for soname in ["libnvjpeg.so.13", "libnvjpeg.so.12"] {
            let p = dir.join(soname);
            if p.exists() && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out.push(PathBuf::from("libnvjpeg.so.13"));
    out.push(PathBuf::from("libnvjpeg.so.12"));
    out
}

/// Search `candidates(extra)` and open the first library that has every symbol trdata needs.
pub fn open(extra: &[PathBuf]) -> (Option<Arc<Nvjpeg>>, NvjpegProbe) {
    let mut tried = Vec::new();
    for path in candidates(extra) {
        let shown = path.display().to_string();
        match open_one(&path) {
            Ok(lib) => {
                tried.push((shown, "loaded".to_owned()));
                let found = Some((lib.path.clone(), lib.version));
                return (Some(Arc::new(lib)), NvjpegProbe { found, tried });
            }
            Err(why) => tried.push((shown, why)),
        }
    }
    (None, NvjpegProbe { found: None, tried })
}

/// [`open`] for a caller that must decode on the GPU: no library is a ConfigError naming `decode` and listing
/// what was tried.
pub fn open_required(extra: &[PathBuf]) -> Result<Arc<Nvjpeg>> {
    let (lib, probe) = open(extra);
    lib.ok_or_else(|| {
        let tried: Vec<String> = probe.tried.iter().map(|(p, why)| format!("{p}: {why}")).collect();
        TrdataError::config("decode", format!("needs libnvjpeg, which was not found (tried {})", tried.join("; ")))
    })
}

/// [`open`] without keeping the library: what `trdata info` shows.
pub fn probe(extra: &[PathBuf]) -> NvjpegProbe {
    open(extra).1
}

/// The function pointer `name` of `lib`, typed as the caller's field.
fn symbol<T: Copy>(lib: &Library, name: &str) -> std::result::Result<T, String> {
    let c_name = format!("{name}\0");
    // SAFETY: every `T` this is called with is the C signature nvjpeg.h (CUDA 12/13) declares for `name`; the
    // copied pointer is only called while `lib` is alive (it is stored next to the pointers in `Nvjpeg`).
    unsafe { lib.get::<T>(c_name.as_bytes()) }.map(|s| *s).map_err(|_| format!("missing symbol {name}"))
}

fn open_one(path: &Path) -> std::result::Result<Nvjpeg, String> {
    // SAFETY: loading a shared library runs its initializers; libnvjpeg's only set up its static CUDA runtime
    // state lazily (no device work at load). The path is a candidate the user or the search order named.
    let lib = unsafe { Library::new(path) }.map_err(|e| format!("cannot open: {e}"))?;
    let fns = Fns {
        get_property: symbol(&lib, "nvjpegGetProperty")?,
        create_ex: symbol(&lib, "nvjpegCreateEx")?,
        destroy: symbol(&lib, "nvjpegDestroy")?,
        state_create: symbol(&lib, "nvjpegJpegStateCreate")?,
        state_destroy: symbol(&lib, "nvjpegJpegStateDestroy")?,
        get_image_info: symbol(&lib, "nvjpegGetImageInfo")?,
        batched_initialize: symbol(&lib, "nvjpegDecodeBatchedInitialize")?,
        decode_batched: symbol(&lib, "nvjpegDecodeBatched")?,
        // An absent symbol is an older library, not an error.
        hardware_info: symbol(&lib, "nvjpegGetHardwareDecoderInfo").ok(),
    };
    let mut v = [0 as c_int; 3];
    for (i, slot) in v.iter_mut().enumerate() {
        // SAFETY: `slot` is a valid, writable c_int; libraryPropertyType 0/1/2 = major/minor/patch.
        let st = unsafe { (fns.get_property)(i as c_int, slot) };
        if st != 0 {
            return Err(format!("nvjpegGetProperty failed with status {st}"));
        }
    }
    Ok(Nvjpeg { fns, path: path.display().to_string(), version: (v[0], v[1], v[2]), _lib: lib })
}

/// Which nvJPEG backend decoded (reported with each decode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The GPU's hardware JPEG engines (`NVJPEG_BACKEND_HARDWARE`).
    Hardware,
    /// nvJPEG's CUDA backend (`NVJPEG_BACKEND_DEFAULT`).
    Cuda,
}

/// An nvJPEG handle for one call, destroyed on drop (so no state outlives a failure).
struct HandleGuard<'a> {
    nv: &'a Nvjpeg,
    raw: Handle,
}

impl Drop for HandleGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from nvjpegCreateEx and is destroyed exactly once, here.
        unsafe { (self.nv.fns.destroy)(self.raw) };
    }
}

/// A decode state, destroyed on drop.
struct StateGuard<'a> {
    nv: &'a Nvjpeg,
    raw: State,
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from nvjpegJpegStateCreate and is destroyed exactly once, before its handle
        // (declaration order in the callers).
        unsafe { (self.nv.fns.state_destroy)(self.raw) };
    }
}

/// nvjpeg.h's status names, for messages.
fn status_name(status: Status) -> &'static str {
    match status {
        1 => "NOT_INITIALIZED",
        2 => "INVALID_PARAMETER",
        3 => "BAD_JPEG",
        4 => "JPEG_NOT_SUPPORTED",
        5 => "ALLOCATOR_FAILURE",
        6 => "EXECUTION_FAILED",
        7 => "ARCH_MISMATCH",
        8 => "INTERNAL_ERROR",
        9 => "IMPLEMENTATION_NOT_SUPPORTED",
        10 => "INCOMPLETE_BITSTREAM",
        _ => "unknown status",
    }
}

fn nv_error(call: &str, status: Status) -> TrdataError {
    cuda_error(call, format!("NVJPEG_STATUS_{} ({status})", status_name(status)))
}

impl Nvjpeg {
    /// `nvjpegCreateEx(backend)`; `Ok(None)` when the hardware backend is absent on this GPU.
    fn handle(&self, backend: Backend) -> Result<Option<HandleGuard<'_>>> {
        let (code, flags) = match backend {
            Backend::Hardware => (BACKEND_HARDWARE, FLAG_UPSAMPLING_WITH_INTERPOLATION),
            Backend::Cuda => (BACKEND_DEFAULT, FLAG_UPSAMPLING_WITH_INTERPOLATION),
        };
        let mut raw: Handle = std::ptr::null_mut();
        // SAFETY: null allocators select nvJPEG's defaults; `raw` is a valid out-pointer.
        let st = unsafe { (self.fns.create_ex)(code, std::ptr::null_mut(), std::ptr::null_mut(), flags, &mut raw) };
        match st {
            0 => Ok(Some(HandleGuard { nv: self, raw })),
            STATUS_ARCH_MISMATCH if backend == Backend::Hardware => Ok(None),
            _ => Err(nv_error("nvjpegCreateEx", st)),
        }
    }

    /// The GPU's hardware decoder: `Ok(Some((engines, cores per engine)))`, `Ok(None)` when it has none (or
    /// the library cannot say). Runs in `ctx`.
    pub fn hardware_info(&self, ctx: &GpuContext) -> Result<Option<(u32, u32)>> {
        ctx.scoped(|| {
            let Some(h) = self.handle(Backend::Hardware)? else { return Ok(None) };
            let Some(info) = self.fns.hardware_info else { return Ok(None) };
            let (mut engines, mut cores) = (0 as c_uint, 0 as c_uint);
            // SAFETY: `h.raw` is a live hardware handle; both out-pointers are valid.
            let st = unsafe { info(h.raw, &mut engines, &mut cores) };
            if st != 0 {
                return Err(nv_error("nvjpegGetHardwareDecoderInfo", st));
            }
            Ok(Some((engines, cores)))
        })
    }

    /// Decode one JPEG to interleaved RGB on the GPU of `ctx` and copy it back: `(height, width, pixels, backend)`.
    /// The hardware engines are used when `prefer_hardware` and the GPU has them, else the CUDA backend. Sizes
    /// from the header are checked before anything is allocated; every handle, state and buffer of the call is
    /// released before it returns, on success or failure.
    pub fn decode_rgb(
        &self,
        ctx: &Arc<GpuContext>,
        jpeg: &[u8],
        prefer_hardware: bool,
    ) -> Result<(usize, usize, Vec<u8>, Backend)> {
        ctx.scoped(|| {
            let mut backend = if prefer_hardware { Backend::Hardware } else { Backend::Cuda };
            let h = match self.handle(backend)? {
                Some(h) => h,
                None => {
                    backend = Backend::Cuda;
                    self.handle(backend)?.ok_or_else(|| nv_error("nvjpegCreateEx", STATUS_ARCH_MISMATCH))?
                }
            };
            let (mut comps, mut css) = (0 as c_int, 0 as c_int);
            let (mut ws, mut hs) = ([0 as c_int; 4], [0 as c_int; 4]);
            // SAFETY: `jpeg` is a live slice of the length passed; the out-pointers are valid (4 ints each).
            let st = unsafe {
                (self.fns.get_image_info)(
                    h.raw,
                    jpeg.as_ptr(),
                    jpeg.len(),
                    &mut comps,
                    &mut css,
                    ws.as_mut_ptr(),
                    hs.as_mut_ptr(),
                )
            };
            if st != 0 {
                return Err(nv_error("nvjpegGetImageInfo", st));
            }
            let (w, hgt) = (usize::try_from(ws[0]).unwrap_or(0), usize::try_from(hs[0]).unwrap_or(0));
            if w == 0 || hgt == 0 || w > MAX_SIDE || hgt > MAX_SIDE || w * hgt * 3 > MAX_PIXELS_BYTES {
                return Err(cuda_error("nvjpegGetImageInfo", format!("image size {w}x{hgt} is out of range")));
            }
            let len = w * hgt * 3;
            let mut state: State = std::ptr::null_mut();
            // SAFETY: `h.raw` is live; `state` is a valid out-pointer.
            let st = unsafe { (self.fns.state_create)(h.raw, &mut state) };
            if st != 0 {
                return Err(nv_error("nvjpegJpegStateCreate", st));
            }
            let state = StateGuard { nv: self, raw: state };
            let out = DeviceMemory::alloc(ctx, len)?;
            let stream = Stream::new_non_blocking(ctx)?;
            // SAFETY: handle and state are live; batch of 1, one CPU thread, interleaved RGB.
            let st = unsafe { (self.fns.batched_initialize)(h.raw, state.raw, 1, 1, OUTPUT_RGBI) };
            if st != 0 {
                return Err(nv_error("nvjpegDecodeBatchedInitialize", st));
            }
            let mut image = Image { channel: [std::ptr::null_mut(); 4], pitch: [0; 4] };
            image.channel[0] = out.ptr() as *mut u8;
            image.pitch[0] = w * 3;
            let data = [jpeg.as_ptr()];
            let lengths = [jpeg.len()];
            // SAFETY: one input of `lengths[0]` live bytes; `image` points at `out`, which holds h·w·3 bytes with
            // pitch w·3; the stream belongs to the current context. Everything stays alive until the stream is
            // synchronized below.
            let st = unsafe {
                (self.fns.decode_batched)(
                    h.raw,
                    state.raw,
                    data.as_ptr(),
                    lengths.as_ptr(),
                    &mut image,
                    stream.raw() as *mut c_void,
                )
            };
            let synced = stream.synchronize();
            if st != 0 {
                return Err(nv_error("nvjpegDecodeBatched", st));
            }
            synced?;
            let mut pixels = vec![0u8; len];
            out.copy_to_host(&mut pixels)?;
            Ok((hgt, w, pixels, backend))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_order_starts_with_the_override_then_the_callers_paths_and_ends_with_sonames() {
        let extra = vec![PathBuf::from("/nowhere/wheel/libnvjpeg.so.13")];
        let c = candidates(&extra);
        assert!(c.contains(&extra[0]));
        assert_eq!(c[c.len() - 2], PathBuf::from("libnvjpeg.so.13"));
        assert_eq!(c[c.len() - 1], PathBuf::from("libnvjpeg.so.12"));
        let pos = c.iter().position(|p| p == &extra[0]).unwrap();
        assert!(c[..pos].iter().all(|p| std::env::var_os("TRDATA_NVJPEG").is_some_and(|v| p == Path::new(&v))));
    }

    #[test]
    fn a_file_that_is_not_a_library_is_skipped_with_its_reason() {
        let dir = std::env::temp_dir().join(format!("trdata-nvjpeg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("libnvjpeg.so.13");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let p = probe(std::slice::from_ref(&fake));
        let row = p.tried.iter().find(|(path, _)| path == &fake.display().to_string()).expect("tried");
        assert!(row.1.starts_with("cannot open"), "{row:?}");
        // A library without nvJPEG's symbols (libc) is skipped naming the first missing one.
        let libc = PathBuf::from("libc.so.6");
        let p = probe(std::slice::from_ref(&libc));
        let row = p.tried.iter().find(|(path, _)| path == "libc.so.6").expect("tried");
        assert_eq!(row.1, "missing symbol nvjpegGetProperty");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
