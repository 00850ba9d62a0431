//! nvjpeg — NVIDIA's nvJPEG, loaded at run time (find it, say what it offers, decode a
//! JPEG with it so the GPU/CPU decode difference can be measured). The batched GPU decode path beside the CPU
//! workers builds on this; its design, with its sources, is docs/design/gpu-decode.md.
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
//!
//! **Batched inputs.** [`BatchDecoder`] hands nvJPEG copies of a call's bitstreams in page-locked memory (bounded by
//! [`MAX_PINNED_BITSTREAM_BYTES`]), so that its per-image uploads are asynchronous DMA rather than staged copies that
//! hold the driver's context lock while a training thread launches kernels (docs/design/gpu-decode-log.md §18).

use std::ffi::{c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use libloading::Library;

use super::driver::{DeviceMemory, GpuContext, PinnedHost, Stream, cuda_error, grown};
use crate::error::{Result, TrdataError};

type Status = c_int;
type Handle = *mut c_void;
type State = *mut c_void;
type JpegStream = *mut c_void;
type Params = *mut c_void;

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
    batched_initialize: unsafe extern "C" fn(Handle, State, c_int, c_int, c_int) -> Status,
    decode_batched:
        unsafe extern "C" fn(Handle, State, *const *const u8, *const usize, *mut Image, *mut c_void) -> Status,
    stream_create: unsafe extern "C" fn(Handle, *mut JpegStream) -> Status,
    stream_destroy: unsafe extern "C" fn(JpegStream) -> Status,
    parse_header: unsafe extern "C" fn(Handle, *const u8, usize, JpegStream) -> Status,
    frame_dimensions: unsafe extern "C" fn(JpegStream, *mut c_uint, *mut c_uint) -> Status,
    params_create: unsafe extern "C" fn(Handle, *mut Params) -> Status,
    params_destroy: unsafe extern "C" fn(Params) -> Status,
    params_output: unsafe extern "C" fn(Params, c_int) -> Status,
    params_roi: unsafe extern "C" fn(Params, c_int, c_int, c_int, c_int) -> Status,
    batched_supported_ex: unsafe extern "C" fn(Handle, JpegStream, Params, *mut c_int) -> Status,
    decode_batched_ex: unsafe extern "C" fn(
        Handle,
        State,
        *const *const u8,
        *const usize,
        *mut Image,
        *const Params,
        *mut c_void,
    ) -> Status,
    /// Absent before CUDA 11.x's hardware backend; `None` = unknown.
    hardware_info: Option<unsafe extern "C" fn(Handle, *mut c_uint, *mut c_uint) -> Status>,
    /// `nvjpegDecodeBatchedPreAllocate` (hardware backend; absent in old libraries).
    pre_allocate: Option<unsafe extern "C" fn(Handle, State, c_int, c_int, c_int, c_int, c_int) -> Status>,
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

/// The search order of the module docs (`cuda/libsearch.rs`): `$TRDATA_NVJPEG`, then `extra`, then the toolkit
/// folders, then the bare sonames (which the dynamic loader resolves).
pub fn candidates(extra: &[PathBuf]) -> Vec<PathBuf> {
    super::libsearch::candidates("TRDATA_NVJPEG", &["libnvjpeg.so.13", "libnvjpeg.so.12"], extra)
}

/// Every Nvjpeg this process loaded, kept until it ends (`cuda/libsearch.rs`).
static LOADED: super::libsearch::Kept<Nvjpeg> = super::libsearch::Kept::new();

/// Search `candidates(extra)` and open the first library that has every symbol trdata needs.
pub fn open(extra: &[PathBuf]) -> (Option<Arc<Nvjpeg>>, NvjpegProbe) {
    let (lib, tried) = LOADED.open_first(candidates(extra), open_one);
    let found = lib.as_ref().map(|l| (l.path.clone(), l.version));
    (lib, NvjpegProbe { found, tried })
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

/// [`open`] for its report: what `trdata info` shows (the library it finds stays loaded, as every one does).
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
        batched_initialize: symbol(&lib, "nvjpegDecodeBatchedInitialize")?,
        decode_batched: symbol(&lib, "nvjpegDecodeBatched")?,
        stream_create: symbol(&lib, "nvjpegJpegStreamCreate")?,
        stream_destroy: symbol(&lib, "nvjpegJpegStreamDestroy")?,
        parse_header: symbol(&lib, "nvjpegJpegStreamParseHeader")?,
        frame_dimensions: symbol(&lib, "nvjpegJpegStreamGetFrameDimensions")?,
        params_create: symbol(&lib, "nvjpegDecodeParamsCreate")?,
        params_destroy: symbol(&lib, "nvjpegDecodeParamsDestroy")?,
        params_output: symbol(&lib, "nvjpegDecodeParamsSetOutputFormat")?,
        params_roi: symbol(&lib, "nvjpegDecodeParamsSetROI")?,
        batched_supported_ex: symbol(&lib, "nvjpegDecodeBatchedSupportedEx")?,
        decode_batched_ex: symbol(&lib, "nvjpegDecodeBatchedEx")?,
        // An absent symbol is an older library, not an error.
        hardware_info: symbol(&lib, "nvjpegGetHardwareDecoderInfo").ok(),
        pre_allocate: symbol(&lib, "nvjpegDecodeBatchedPreAllocate").ok(),
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

fn nv_error(call: &str, status: Status) -> TrdataError {
    cuda_error(call, format!("NVJPEG_STATUS_{} ({status})", status_name(status)))
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

/// `status` as a Result naming `call`.
fn ok(call: &str, status: Status) -> Result<()> {
    if status == 0 { Ok(()) } else { Err(nv_error(call, status)) }
}

/// A crop of the image to decode (pixels, in the JPEG's stored orientation); the hardware engines decode only it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roi {
    /// Left column.
    pub x: u32,
    /// Top row.
    pub y: u32,
    /// Width (≥ 1).
    pub w: u32,
    /// Height (≥ 1).
    pub h: u32,
}

/// Where image `i` of a decoded batch lies in [`BatchDecoder`]'s device buffer, or why it was not decoded there
/// (the caller decodes it on the CPU).
pub type Placed = std::result::Result<(usize, usize, usize), String>;

/// A batched nvJPEG decoder bound to one GPU: one handle, one decode state, one stream, one device output buffer
/// that grows to the largest batch (bounded by `max_output_bytes`) and is reused. Not shared between threads
/// (nvJPEG states are per thread); `Send`, so a decode thread can own it.
///
/// Protocol per [`BatchDecoder::decode`] call: parse every header and ask nvJPEG whether it can decode the image
/// (with its ROI) → place the supported ones in the buffer → `nvjpegDecodeBatchedInitialize` for exactly that
/// many → one `nvjpegDecodeBatched(Ex)` → wait on the host for the stream. The host wait is required: the
/// hardware batched decode starts writing when called, not in stream order (docs/design/gpu-decode.md §0.6), so the
/// buffer may be reused only after it. The batch is re-initialized on every call, which is also nvJPEG's rule
/// after a failed batch, so a failure never poisons the next call; a failed batch reports every image as
/// not decoded.
pub struct BatchDecoder {
    nv: Arc<Nvjpeg>,
    ctx: Arc<GpuContext>,
    backend: Backend,
    handle: Handle,
    state: State,
    jstream: JpegStream,
    params: Vec<Params>,
    stream: Stream,
    out: Option<DeviceMemory>,
    max_output_bytes: usize,
    /// Page-locked copy of a call's bitstreams (grown and reused, at most [`MAX_PINNED_BITSTREAM_BYTES`]).
    bitstreams: Option<PinnedHost>,
    /// Nanoseconds spent so far in each phase of [`BatchDecoder::decode`] (benches read them: where a batch's
    /// time goes).
    pub timing: DecodeTiming,
}

/// Most page-locked bytes a [`BatchDecoder`] keeps for its bitstreams; a call whose files add up to more passes
/// them from pageable memory.
///
/// Why the copy (measured on the H200, docs/design/gpu-decode-log.md §18): from pageable memory nvJPEG uploads each
/// bitstream with a staged, host-synchronous `cudaMemcpyAsync` (~50 µs per image while a model trains), and those calls
/// hold the context's driver lock, so the training thread's kernel launches wait behind them (7.8 → 22.5 µs per
/// `cudaLaunchKernel` under ResNet-18, whose GPU then idles ~10 ms per step). From page-locked memory the upload is an
/// asynchronous DMA and the call returns at once.
pub const MAX_PINNED_BITSTREAM_BYTES: usize = 32 << 20;

/// [`BatchDecoder`]'s time per phase, accumulated over its calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct DecodeTiming {
    /// Header parse + `nvjpegDecodeBatchedSupportedEx` of every image.
    pub check_ns: u64,
    /// `nvjpegDecodeBatchedInitialize` + the decode call (host side).
    pub submit_ns: u64,
    /// The host wait for the stream after it.
    pub wait_ns: u64,
}

// SAFETY: the nvJPEG objects are only used through &mut self (one thread at a time), which nvJPEG allows across
// threads (states are per thread *of use*, not of creation); the device objects are Send already.
unsafe impl Send for BatchDecoder {}

impl BatchDecoder {
    /// A decoder on `ctx`'s GPU. `prefer_hardware`: the hardware engines when the GPU has them, else the CUDA
    /// backend (which takes no ROI). `max_output_bytes` bounds the output buffer.
    ///
    /// `interpolate`: `NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION` (libjpeg-turbo's "fancy" chroma upsampling, so
    /// subsampled files decode as on the CPU path: ≥ 85 dB vs Pillow on the H200), which costs the hardware path 2.6×
    /// (4,800 vs 12,670 img/s, docs/design/gpu-decode-log.md §15). 4:4:4 and gray files decode identically either way,
    /// so the GPU path gives them a decoder without it.
    pub fn new(
        nv: Arc<Nvjpeg>,
        ctx: Arc<GpuContext>,
        prefer_hardware: bool,
        interpolate: bool,
        max_output_bytes: usize,
    ) -> Result<Self> {
        let flags = if interpolate { FLAG_UPSAMPLING_WITH_INTERPOLATION } else { 0 };
        // High priority: nvJPEG's own kernels (colour conversion, upsampling) then run between the training
        // loop's instead of after them (measured on the H200: ResNet-18 fed at decode=0.5 9,912 → 10,834 img/s).
        let stream = Stream::new_high_priority(&ctx)?;
        ctx.clone().scoped(|| {
            let mut handle: Handle = std::ptr::null_mut();
            let mut backend = if prefer_hardware { Backend::Hardware } else { Backend::Cuda };
            let code = |b: Backend| if b == Backend::Hardware { BACKEND_HARDWARE } else { BACKEND_DEFAULT };
            let null = std::ptr::null_mut();
            // SAFETY: null allocators select nvJPEG's defaults (the hardware backend does not allocate through
            // custom ones: measured on the H200, they were never called); `handle` is a valid out-pointer.
            let mut st = unsafe { (nv.fns.create_ex)(code(backend), null, null, flags, &mut handle) };
            if st == STATUS_ARCH_MISMATCH && backend == Backend::Hardware {
                backend = Backend::Cuda;
                // SAFETY: as above.
                st = unsafe { (nv.fns.create_ex)(code(backend), null, null, flags, &mut handle) };
            }
            ok("nvjpegCreateEx", st)?;
            let mut me = Self {
                nv: Arc::clone(&nv),
                ctx: Arc::clone(&ctx),
                backend,
                handle,
                state: std::ptr::null_mut(),
                jstream: std::ptr::null_mut(),
                params: Vec::new(),
                stream,
                out: None,
                max_output_bytes,
                bitstreams: None,
                timing: DecodeTiming::default(),
            };
            // From here `me`'s Drop releases whatever was created, on error too.
            // SAFETY: `handle` is live; the out-pointers are fields of `me`.
            ok("nvjpegJpegStateCreate", unsafe { (nv.fns.state_create)(me.handle, &mut me.state) })?;
            // SAFETY: as above.
            ok("nvjpegJpegStreamCreate", unsafe { (nv.fns.stream_create)(me.handle, &mut me.jstream) })?;
            if let (Backend::Hardware, Some(pre)) = (backend, nv.fns.pre_allocate) {
                // Buffers for a batch of 64 windows up to 1024² at once, so that re-initializing per batch does
                // not reallocate (measured on the H200: ResNet-50 fed by decode="gpu" 3,880 → 4,244 img/s).
                // SAFETY: live handle and state of the hardware backend; CSS_444 (0) covers every layout, RGBI.
                let st = unsafe { pre(me.handle, me.state, 64, 1024, 1024, 0, OUTPUT_RGBI) };
                ok("nvjpegDecodeBatchedPreAllocate", st)?;
            }
            Ok(me)
        })
    }

    /// Which backend this decoder runs.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Decode `images` (each with an optional ROI; the CUDA backend ignores none — it refuses a ROI) into the
    /// device buffer as interleaved RGB. Returns one [`Placed`] per image: `(height, width, byte offset)` or the
    /// reason it was not decoded. Header sizes are checked before anything is allocated.
    pub fn decode(&mut self, images: &[&[u8]], rois: &[Option<Roi>]) -> Result<Vec<Placed>> {
        if images.len() != rois.len() {
            return Err(cuda_error("nvjpegDecodeBatched", "one ROI slot per image is required"));
        }
        let ctx = Arc::clone(&self.ctx);
        ctx.scoped(|| self.decode_scoped(images, rois))
    }

    fn ensure_params(&mut self, n: usize) -> Result<()> {
        let f = &self.nv.fns;
        while self.params.len() < n {
            let mut p: Params = std::ptr::null_mut();
            // SAFETY: the handle is live; `p` is a valid out-pointer; pushed so Drop destroys it.
            ok("nvjpegDecodeParamsCreate", unsafe { (f.params_create)(self.handle, &mut p) })?;
            self.params.push(p);
            // SAFETY: `p` was just created.
            ok("nvjpegDecodeParamsSetOutputFormat", unsafe { (f.params_output)(p, OUTPUT_RGBI) })?;
        }
        Ok(())
    }

    fn decode_scoped(&mut self, images: &[&[u8]], rois: &[Option<Roi>]) -> Result<Vec<Placed>> {
        self.ensure_params(images.len())?;
        let t0 = std::time::Instant::now();
        let mut placed: Vec<Placed> = Vec::with_capacity(images.len());
        let mut total = 0usize;
        for (i, (data, roi)) in images.iter().zip(rois).enumerate() {
            match self.check_one(data, *roi, self.params[i]) {
                Ok((h, w)) if total + h * w * 3 <= self.max_output_bytes => {
                    placed.push(Ok((h, w, total)));
                    total += h * w * 3;
                }
                Ok(_) => placed.push(Err("the batch's output buffer is full".to_owned())),
                Err(why) => placed.push(Err(why)),
            }
        }
        self.timing.check_ns += t0.elapsed().as_nanos() as u64;
        if total == 0 {
            return Ok(placed);
        }
        if self.out.as_ref().is_none_or(|m| m.len() < total) {
            self.out = None; // free the old buffer before allocating the larger one
            self.out = Some(DeviceMemory::alloc(&self.ctx, total)?);
        }
        let base = self.out.as_ref().map_or(0, |m| m.ptr()) as usize;
        let targets: Vec<Option<(usize, usize)>> =
            placed.iter().map(|p| p.as_ref().ok().map(|&(_, w, offset)| (base + offset, w * 3))).collect();
        if let Err(why) = self.submit(images, &targets)? {
            for p in placed.iter_mut().filter(|p| p.is_ok()) {
                *p = Err(why.clone());
            }
        }
        Ok(placed)
    }

    /// Decode `images[i]`'s region `rois[i]` as interleaved RGB into device memory at `dst[i]` = (address, row
    /// pitch in bytes), which must hold `roi.h` rows of `roi.w · 3` bytes. Returns per image `Ok(())` or why it was
    /// not decoded (nvJPEG would not take it, or the batch failed: then every image of it), for the caller's CPU
    /// fallback. On return the decode is complete (host-synchronized), so `dst` may be read by any stream.
    pub fn decode_into(
        &mut self,
        images: &[&[u8]],
        rois: &[Roi],
        dst: &[(usize, usize)],
    ) -> Result<Vec<std::result::Result<(), String>>> {
        if images.len() != rois.len() || images.len() != dst.len() {
            return Err(cuda_error("nvjpegDecodeBatchedEx", "one region and one destination per image"));
        }
        let ctx = Arc::clone(&self.ctx);
        ctx.scoped(|| {
            self.ensure_params(images.len())?;
            let t0 = std::time::Instant::now();
            let mut out: Vec<std::result::Result<(), String>> = Vec::with_capacity(images.len());
            let mut targets = Vec::with_capacity(images.len());
            for (i, (data, roi)) in images.iter().zip(rois).enumerate() {
                match self.check_one(data, Some(*roi), self.params[i]) {
                    Ok(_) if dst[i].1 < roi.w as usize * 3 => {
                        out.push(Err(format!("row pitch {} is below {} bytes", dst[i].1, roi.w as usize * 3)));
                        targets.push(None);
                    }
                    Ok(_) => {
                        out.push(Ok(()));
                        targets.push(Some(dst[i]));
                    }
                    Err(why) => {
                        out.push(Err(why));
                        targets.push(None);
                    }
                }
            }
            self.timing.check_ns += t0.elapsed().as_nanos() as u64;
            if let Err(why) = self.submit(images, &targets)? {
                for r in out.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(why.clone());
                }
            }
            Ok(out)
        })
    }

    /// One batched decode of the images that have a target (address, pitch), their params already set by
    /// `check_one` (params[i] belongs to images[i]). `Ok(Err(why))`: nvJPEG failed the batch (the batch is
    /// re-initialized by the next call, so nothing carries over); `Err`: the stream could not be synchronized.
    fn submit(
        &mut self,
        images: &[&[u8]],
        targets: &[Option<(usize, usize)>],
    ) -> Result<std::result::Result<(), String>> {
        let (mut dst, mut srcs, mut lengths, mut params) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, t) in targets.iter().enumerate() {
            let Some((addr, pitch)) = *t else { continue };
            let mut image = Image { channel: [std::ptr::null_mut(); 4], pitch: [0; 4] };
            image.channel[0] = addr as *mut u8;
            image.pitch[0] = pitch;
            dst.push(image);
            srcs.push(images[i]);
            lengths.push(images[i].len());
            params.push(self.params[i]);
        }
        if dst.is_empty() {
            return Ok(Ok(()));
        }
        let data = self.pin_bitstreams(&srcs);
        let f = &self.nv.fns;
        let t1 = std::time::Instant::now();
        let n = c_int::try_from(dst.len()).unwrap_or(c_int::MAX);
        // SAFETY: handle and state are live; RGBI output; one CPU thread.
        let st = unsafe { (f.batched_initialize)(self.handle, self.state, n, 1, OUTPUT_RGBI) };
        let st = if st != 0 {
            st
        } else if self.backend == Backend::Hardware {
            // SAFETY: `data`/`lengths`/`dst`/`params` hold `n` entries each; every destination holds its image's
            // output (h rows at its pitch, checked by the callers against `check_one`'s size); the inputs (the
            // callers' slices or their copies in `self.bitstreams`) stay alive and unchanged until the stream is
            // synchronized below.
            unsafe {
                (f.decode_batched_ex)(
                    self.handle,
                    self.state,
                    data.as_ptr(),
                    lengths.as_ptr(),
                    dst.as_mut_ptr(),
                    params.as_ptr(),
                    self.stream.raw() as *mut c_void,
                )
            }
        } else {
            // SAFETY: as above, without per-image params (the CUDA backend decodes whole images).
            unsafe {
                (f.decode_batched)(
                    self.handle,
                    self.state,
                    data.as_ptr(),
                    lengths.as_ptr(),
                    dst.as_mut_ptr(),
                    self.stream.raw() as *mut c_void,
                )
            }
        };
        let t2 = std::time::Instant::now();
        let synced = self.stream.synchronize();
        let t3 = std::time::Instant::now();
        self.timing.submit_ns += (t2 - t1).as_nanos() as u64;
        self.timing.wait_ns += (t3 - t2).as_nanos() as u64;
        // A failed synchronize stops the decoder (the device state is unknown), whatever nvJPEG answered: checked
        // first, so that it is never reported as a mere refusal of the call's images.
        synced?;
        if st != 0 {
            return Ok(Err(format!("nvjpegDecodeBatched: NVJPEG_STATUS_{} ({st})", status_name(st))));
        }
        Ok(Ok(()))
    }

    /// The addresses nvJPEG reads the call's bitstreams from: copies in the page-locked buffer, so that its
    /// uploads are asynchronous DMA (see [`MAX_PINNED_BITSTREAM_BYTES`]), or the inputs themselves when they add
    /// up to more than that bound or the buffer cannot be allocated (page-locked memory is a limited resource):
    /// the decode is then only slower, never different. The buffer is rewritten only by the next call, after
    /// `submit` has synchronized the stream that read it.
    fn pin_bitstreams(&mut self, srcs: &[&[u8]]) -> Vec<*const u8> {
        let total: usize = srcs.iter().map(|s| s.len()).sum();
        if total <= MAX_PINNED_BITSTREAM_BYTES && self.bitstreams.as_ref().is_none_or(|b| b.size() < total) {
            self.bitstreams = None; // free the old buffer before allocating the larger one
            self.bitstreams = PinnedHost::alloc(&self.ctx, grown(total).min(MAX_PINNED_BITSTREAM_BYTES)).ok();
        }
        match self.bitstreams.as_mut() {
            Some(buf) if total <= buf.size() => {
                let mut rest = buf.as_mut_slice();
                let mut out = Vec::with_capacity(srcs.len());
                for src in srcs {
                    let (head, tail) = std::mem::take(&mut rest).split_at_mut(src.len());
                    head.copy_from_slice(src);
                    out.push(head.as_ptr());
                    rest = tail;
                }
                out
            }
            _ => srcs.iter().map(|s| s.as_ptr()).collect(),
        }
    }

    /// `(width, height)` from `data`'s header (parsed by nvJPEG), checked against the size limits.
    pub fn dimensions(&self, data: &[u8]) -> std::result::Result<(usize, usize), String> {
        let f = &self.nv.fns;
        // SAFETY: `data` is a live slice of the length passed; the handle and JPEG stream are live.
        let st = unsafe { (f.parse_header)(self.handle, data.as_ptr(), data.len(), self.jstream) };
        if st != 0 {
            return Err(format!("header: NVJPEG_STATUS_{} ({st})", status_name(st)));
        }
        let (mut w, mut h) = (0 as c_uint, 0 as c_uint);
        // SAFETY: the stream holds a parsed header; both out-pointers are valid.
        let st = unsafe { (f.frame_dimensions)(self.jstream, &mut w, &mut h) };
        if st != 0 {
            return Err(format!("dimensions: NVJPEG_STATUS_{} ({st})", status_name(st)));
        }
        let (w, h) = (w as usize, h as usize);
        if w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE {
            return Err(format!("image size {w}x{h} is out of range"));
        }
        Ok((w, h))
    }

    /// Parse `data`'s header, set its params (ROI) and ask nvJPEG whether this decoder can take it → the output
    /// (height, width), or why not.
    fn check_one(&self, data: &[u8], roi: Option<Roi>, params: Params) -> std::result::Result<(usize, usize), String> {
        let f = &self.nv.fns;
        let (w, h) = self.dimensions(data)?;
        let (ow, oh) = match roi {
            Some(r) => {
                if self.backend != Backend::Hardware {
                    return Err("the CUDA backend does not decode a region".to_owned());
                }
                let fits =
                    r.w > 0 && r.h > 0 && (r.x as usize + r.w as usize) <= w && (r.y as usize + r.h as usize) <= h;
                if !fits {
                    return Err(format!("region {r:?} is outside the {w}x{h} image"));
                }
                (r.w as usize, r.h as usize)
            }
            None => (w, h),
        };
        if ow * oh * 3 > MAX_PIXELS_BYTES {
            return Err(format!("output {ow}x{oh} is too large"));
        }
        let (x, y, rw, rh) = match roi {
            Some(r) => (r.x as c_int, r.y as c_int, r.w as c_int, r.h as c_int),
            None => (0, 0, -1, -1),
        };
        // SAFETY: `params` is a live params object of this handle; (0, 0, -1, -1) = whole image.
        let st = unsafe { (f.params_roi)(params, x, y, rw, rh) };
        if st != 0 {
            return Err(format!("region: NVJPEG_STATUS_{} ({st})", status_name(st)));
        }
        if self.backend == Backend::Hardware {
            let mut supported: c_int = -1;
            // SAFETY: handle, parsed stream and params are live; `supported` is a valid out-pointer.
            let st = unsafe { (f.batched_supported_ex)(self.handle, self.jstream, params, &mut supported) };
            if st != 0 || supported != 0 {
                return Err(format!("the hardware decoder does not take it (status {st}, answer {supported})"));
            }
        }
        Ok((oh, ow))
    }

    /// Copy `len` bytes at `offset` of the output buffer to the host.
    pub fn copy_out(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let out = self.out.as_ref().ok_or_else(|| cuda_error("cuMemcpyDtoH", "nothing was decoded"))?;
        out.copy_range_to_host(offset, dst)
    }
}

impl Drop for BatchDecoder {
    fn drop(&mut self) {
        let f = &self.nv.fns;
        let _ = self.ctx.scoped(|| {
            for &p in &self.params {
                // SAFETY: each params object was created once by this decoder and is destroyed once, here.
                unsafe { (f.params_destroy)(p) };
            }
            if !self.jstream.is_null() {
                // SAFETY: created once by this decoder, destroyed once.
                unsafe { (f.stream_destroy)(self.jstream) };
            }
            if !self.state.is_null() {
                // SAFETY: created once by this decoder, destroyed once, before its handle.
                unsafe { (f.state_destroy)(self.state) };
            }
            // SAFETY: created by nvjpegCreateEx in `new`, destroyed once, last.
            unsafe { (f.destroy)(self.handle) };
            Ok(())
        });
    }
}

impl Nvjpeg {
    /// The GPU's hardware decoder: `Ok(Some((engines, cores per engine)))`, `Ok(None)` when it has none (or
    /// the library cannot say). Runs in `ctx`.
    pub fn hardware_info(&self, ctx: &GpuContext) -> Result<Option<(u32, u32)>> {
        ctx.scoped(|| {
            let Some(info) = self.fns.hardware_info else { return Ok(None) };
            let mut h: Handle = std::ptr::null_mut();
            let null = std::ptr::null_mut();
            // SAFETY: null allocators select nvJPEG's defaults; `h` is a valid out-pointer.
            let st = unsafe { (self.fns.create_ex)(BACKEND_HARDWARE, null, null, 0, &mut h) };
            if st == STATUS_ARCH_MISMATCH {
                return Ok(None);
            }
            ok("nvjpegCreateEx", st)?;
            let (mut engines, mut cores) = (0 as c_uint, 0 as c_uint);
            // SAFETY: `h` is a live hardware handle; both out-pointers are valid.
            let st = unsafe { info(h, &mut engines, &mut cores) };
            // SAFETY: created above, destroyed once.
            unsafe { (self.fns.destroy)(h) };
            ok("nvjpegGetHardwareDecoderInfo", st)?;
            Ok(Some((engines, cores)))
        })
    }
}

/// Decode one JPEG to interleaved RGB on `ctx`'s GPU and copy it back: `(height, width, pixels, backend)` (a
/// [`BatchDecoder`] of one, made and dropped in the call). An image nvJPEG refuses is a CudaError with its reason.
pub fn decode_rgb(
    nv: &Arc<Nvjpeg>,
    ctx: &Arc<GpuContext>,
    jpeg: &[u8],
    prefer_hardware: bool,
) -> Result<(usize, usize, Vec<u8>, Backend)> {
    let mut dec = BatchDecoder::new(Arc::clone(nv), Arc::clone(ctx), prefer_hardware, true, MAX_PIXELS_BYTES)?;
    let placed = dec.decode(&[jpeg], &[None])?;
    let (h, w, offset) = placed
        .into_iter()
        .next()
        .unwrap_or_else(|| Err("no result".to_owned()))
        .map_err(|why| cuda_error("nvjpegDecodeBatched", why))?;
    let mut pixels = vec![0u8; h * w * 3];
    dec.copy_out(offset, &mut pixels)?;
    Ok((h, w, pixels, dec.backend()))
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
