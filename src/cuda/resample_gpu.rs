//! resample_gpu — the GPU half of the fused writer: Pillow's separable antialiased resample, flip, normalize,
//! cast and layout for a batch of samples decoded into device memory (nvJPEG's windows), written straight into
//! their rows of the batch's device slot. The kernels are `kernels/resample.cu`, compiled once per
//! [`GpuResampler`] by NVRTC ([`super::nvrtc`]) to a CUBIN for the device and loaded with the driver API.
//!
//! Pipeline position: a platform room (`cuda/`) below the data path; it knows nothing of transforms. The caller
//! (the GPU decode path, and `_core.gpu_resample_check`) computes each sample's taps with the CPU path's own code
//! (`SamplePipeline::prepare_gpu`) and the output table (`SamplePipeline::output_table_bytes`) and hands them
//! over as [`AxisTaps`] and [`OutputFormat`]; given the same decoded pixels the result equals the CPU fused
//! writer's byte for byte (the kernel source says why).
//!
//! **Protocol of [`GpuResampler::run`]** (one call per batch, on the caller's stream):
//! 1. validate every sample against the format and its own window, and lay the batch out on the host
//!    ([`plan_batch`]): one 104-byte descriptor per sample, then every sample's taps (`i32`), and each sample's
//!    place in the 8-bit intermediate buffer; nothing is allocated before the sizes are checked against the caps
//!    ([`MAX_INTERMEDIATE_BYTES`], [`MAX_STAGING_BYTES`], [`MAX_SAMPLES`]);
//! 2. host-wait the `staged` event of the previous run (its H2D copy has read the pinned staging buffer), then
//!    write this batch's descriptors and taps into that pinned buffer (grown when needed);
//! 3. if a device buffer must grow, host-wait the previous run's `done` event first (its kernels may still read
//!    the old one); then make `stream` wait on `done` on the device, so this run's copy and kernels never
//!    overwrite buffers the previous run (perhaps on another stream) still reads;
//! 4. `cuMemcpyHtoDAsync` the staging buffer to the device, record `staged`; launch pass 1 (grid = (columns,
//!    rows, sample)) into the intermediate and pass 2 (grid = (out_w, out_h, sample)) into the samples' `dst`;
//!    record `done`.
//!
//! So the caller owns only the ordering of its own buffers: the decoded windows must be complete before the
//! work enqueued on `stream` starts (record the decode's event and make `stream` wait on it), and must stay
//! alive, like the `dst` rows, until `stream` passed this run (synchronize, or an event recorded after it).
//! The resampler's own staging needs nothing from the caller (steps 2-3).
//!
//! Every driver call runs inside [`GpuContext::scoped`] and under `catch_unwind` (module rule 2 of `cuda/`).

use std::ffi::{CStr, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{result, sys};

use super::driver::{DeviceMemory, Event, GpuContext, Stream, cuda_error};
use super::nvrtc::{Nvrtc, compile_cubin};
use crate::error::{Result, TrdataError};

/// The kernels' source (plain CUDA C, no includes).
pub const RESAMPLE_SOURCE: &str = include_str!("kernels/resample.cu");

/// Most samples one [`GpuResampler::run`] takes: the launch grid's z dimension (the driver's limit is 65,535).
pub const MAX_SAMPLES: usize = 65_535;
/// The largest 8-bit intermediate of one batch (bytes): the sum over samples of pass 1's output (rows of the
/// filter window × output width × 3, or output height × window width × 3). A batch above it is a
/// `TrdataError::Memory` instead of an unbounded device allocation: split the batch.
pub const MAX_INTERMEDIATE_BYTES: u64 = 1 << 30;
/// The largest descriptor + taps block of one batch (bytes), likewise (a 224² RandomResizedCrop of a 4,000-pixel
/// crop needs ~70 KiB per sample).
pub const MAX_STAGING_BYTES: u64 = 256 << 20;

/// Threads per block (x: columns, y: rows) of both passes.
const BLOCK: (u32, u32) = (64, 4);
/// The driver's limit on grid.y; taller images loop (grid-stride) inside the kernels.
const MAX_GRID_Y: u64 = 65_535;
/// Bytes of one [`Desc`] (the kernel source has the same `static_assert`).
const DESC_BYTES: usize = 104;

/// One axis' taps, as the CPU path's `AxisCoeffs` computes them (flip applied, output order): output `o` reads
/// pixels `start[o] .. start[o] + taps` of the image (full-scale image pixels, not rebased) with weights
/// `k[o * taps ..][..taps]` (Pillow's 22-bit fixed point; all zero for a padding output).
#[derive(Debug, Clone, Copy)]
pub struct AxisTaps<'a> {
    /// First pixel of each output's taps.
    pub start: &'a [u32],
    /// Weights, `taps` per output.
    pub k: &'a [i32],
    /// Taps per output (the same for every output, ≥ 1).
    pub taps: u32,
    /// Union of all taps: `[win0, win1)`.
    pub win0: u32,
    /// End of the union.
    pub win1: u32,
}

/// One sample of a batch for the GPU resampler.
#[derive(Debug, Clone, Copy)]
pub struct GpuSample<'a> {
    /// Decoded window: interleaved RGB u8 at `src` (device), `src_pitch` bytes per row, whose top-left pixel is
    /// image pixel (`src_x0`, `src_y0`) and which is `src_w` × `src_h` pixels. It must contain both axes'
    /// windows (`[x.win0, x.win1) × [y.win0, y.win1)`).
    pub src: sys::CUdeviceptr,
    /// Bytes per row of `src` (≥ 3 · `src_w`).
    pub src_pitch: usize,
    /// Image column of `src`'s first pixel.
    pub src_x0: u32,
    /// Image row of `src`'s first pixel.
    pub src_y0: u32,
    /// Width of the decoded window (pixels).
    pub src_w: u32,
    /// Height of the decoded window (pixels).
    pub src_h: u32,
    /// Column taps: `x.start.len()` must be the format's `out_w`.
    pub x: AxisTaps<'a>,
    /// Row taps: `y.start.len()` must be the format's `out_h`.
    pub y: AxisTaps<'a>,
    /// Pass order of the CPU fused writer for this sample (`SamplePipeline::prepare_gpu` says it): the 8-bit
    /// intermediate rounds differently in the two orders, so it must be the same to be bit-exact.
    pub vertical_first: bool,
    /// Where the sample's output goes: its row in the batch slot (device), `3 · out_h · out_w · elem_bytes`
    /// bytes, aligned to `elem_bytes`.
    pub dst: sys::CUdeviceptr,
}

/// What every sample of a batch becomes (fixed for a resampler's life, like the loader's output).
#[derive(Debug, Clone)]
pub struct OutputFormat {
    /// 3 channels × 256 entries × `elem_bytes`: channel `c`'s entry `v` is the output element (its bytes as the
    /// host writes them) of the 8-bit value `v` (the CPU `OutputLut`'s values; identity for uint8).
    pub lut: Vec<u8>,
    /// Bytes per element: 1 (uint8), 2 (float16/bfloat16 bits), 4 (float32 bits).
    pub elem_bytes: u32,
    /// Channels first ([3, H, W] per sample) or last ([H, W, 3]).
    pub nchw: bool,
    /// Output height.
    pub out_h: u32,
    /// Output width.
    pub out_w: u32,
}

impl OutputFormat {
    /// Bytes of one sample's output.
    pub fn sample_bytes(&self) -> u64 {
        3 * u64::from(self.out_h) * u64::from(self.out_w) * u64::from(self.elem_bytes)
    }

    fn check(&self) -> Result<()> {
        if ![1, 2, 4].contains(&self.elem_bytes) {
            return Err(resample_error(format!("elem_bytes must be 1, 2 or 4, not {}", self.elem_bytes)));
        }
        if self.lut.len() != 3 * 256 * self.elem_bytes as usize {
            return Err(resample_error(format!(
                "the output table must hold 3 × 256 × {} bytes, not {}",
                self.elem_bytes,
                self.lut.len()
            )));
        }
        if self.out_h == 0 || self.out_w == 0 {
            return Err(resample_error(format!("output size {}x{} is empty", self.out_w, self.out_h)));
        }
        Ok(())
    }
}

/// How the kernels were built (for `trdata info` and the test binding).
#[derive(Debug, Clone)]
pub struct CompileInfo {
    /// The libnvrtc used.
    pub nvrtc_path: String,
    /// Its (major, minor).
    pub nvrtc_version: (i32, i32),
    /// The device's compute capability, compiled for as `sm_{major}{minor}`.
    pub arch: (u32, u32),
    /// Wall time of the NVRTC compile.
    pub compile_ms: f64,
    /// Wall time of `cuModuleLoadData` + function lookups.
    pub load_ms: f64,
    /// Size of the CUBIN.
    pub cubin_bytes: usize,
}

/// `TrdataError::Cuda` for a batch or format the resampler refuses (names the API, not a driver call).
fn resample_error(message: impl Into<String>) -> TrdataError {
    cuda_error("GpuResampler", message.into())
}

/// `call`'s result as a Result naming it.
fn check(call: &str, r: sys::CUresult) -> Result<()> {
    r.result().map_err(|e| cuda_error(call, e))
}

/// Run `f` (driver calls) with panics turned into errors: cudarc looks every driver symbol up on first use and
/// panics when one is missing (module rule 2).
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(cuda_error(what, "the CUDA driver panicked (a symbol missing from this driver?)")))
}

/// One sample's geometry, as the kernels read it (`struct Desc` of resample.cu, 104 bytes, native endian).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Desc {
    src: u64,
    src_pitch: u64,
    dst: u64,
    /// Byte offset of the sample's intermediate in the intermediate buffer.
    inter: u64,
    src_x0: u32,
    src_y0: u32,
    src_w: u32,
    src_h: u32,
    /// Element offsets into the taps block.
    x_start: u32,
    x_k: u32,
    y_start: u32,
    y_k: u32,
    x_taps: u32,
    y_taps: u32,
    x_win0: u32,
    x_win1: u32,
    y_win0: u32,
    y_win1: u32,
    vertical_first: u32,
    inter_w: u32,
    inter_h: u32,
}

impl Desc {
    /// The C struct's bytes, field by field in declaration order (4 × u64, 18 × u32 with the padding word).
    fn write(&self, out: &mut [u8]) {
        let words64 = [self.src, self.src_pitch, self.dst, self.inter];
        let words32 = [
            self.src_x0,
            self.src_y0,
            self.src_w,
            self.src_h,
            self.x_start,
            self.x_k,
            self.y_start,
            self.y_k,
            self.x_taps,
            self.y_taps,
            self.x_win0,
            self.x_win1,
            self.y_win0,
            self.y_win1,
            self.vertical_first,
            self.inter_w,
            self.inter_h,
            0,
        ];
        let (a, b) = out[..DESC_BYTES].split_at_mut(32);
        for (d, w) in a.chunks_exact_mut(8).zip(words64) {
            d.copy_from_slice(&w.to_ne_bytes());
        }
        for (d, w) in b.chunks_exact_mut(4).zip(words32) {
            d.copy_from_slice(&w.to_ne_bytes());
        }
    }
}

/// The host-side layout of one batch ([`plan_batch`]): descriptors, where the taps go, the sizes of the staging
/// block and the intermediate, and both launch grids. Pure data (no device): the tests run it through an
/// emulation of the kernels.
#[derive(Debug, Clone)]
struct BatchLayout {
    descs: Vec<Desc>,
    /// Bytes of the staging block: descriptors, then every sample's taps as `i32`.
    staging_bytes: usize,
    /// Bytes of the intermediate buffer the batch needs.
    inter_bytes: usize,
    /// Pass 1's grid (x: intermediate columns, y: rows, z: samples) and pass 2's (x: out_w, y: out_h, z).
    grid1: (u32, u32, u32),
    grid2: (u32, u32, u32),
}

/// Validate `samples` against `format` and their own windows, and lay the batch out (protocol step 1). Every
/// size is checked against the caps before anything is allocated; every index the kernels compute stays inside
/// the buffer it reads or writes when these checks pass.
fn plan_batch(samples: &[GpuSample<'_>], format: &OutputFormat) -> Result<BatchLayout> {
    if samples.len() > MAX_SAMPLES {
        return Err(resample_error(format!(
            "{} samples in one batch, above the launch limit of {MAX_SAMPLES}",
            samples.len()
        )));
    }
    let (ow, oh) = (format.out_w, format.out_h);
    let eb = u64::from(format.elem_bytes);
    let mut descs = Vec::with_capacity(samples.len());
    let (mut taps_elems, mut inter_bytes) = (0u64, 0u64);
    let (mut max_w1, mut max_h1) = (1u64, 1u64);
    for (i, s) in samples.iter().enumerate() {
        let bad = |why: String| resample_error(format!("sample {i}: {why}"));
        let axis = |name: &str, a: &AxisTaps<'_>, n: u32| -> Result<()> {
            if a.start.len() != n as usize {
                return Err(bad(format!("{name} has {} outputs, the format {n}", a.start.len())));
            }
            if a.taps == 0 || a.k.len() as u64 != u64::from(n) * u64::from(a.taps) {
                return Err(bad(format!("{name} has {} weights for {n} outputs × {} taps", a.k.len(), a.taps)));
            }
            if a.win0 >= a.win1 || a.win1 > i32::MAX as u32 {
                return Err(bad(format!("{name} window [{}, {}) is empty or too large", a.win0, a.win1)));
            }
            if let Some(o) = a.start.iter().position(|&st| st < a.win0 || u64::from(st) + u64::from(a.taps) > u64::from(a.win1)) {
                return Err(bad(format!(
                    "{name} output {o} reads [{}, +{}) outside its window [{}, {})",
                    a.start[o], a.taps, a.win0, a.win1
                )));
            }
            Ok(())
        };
        axis("x", &s.x, ow)?;
        axis("y", &s.y, oh)?;
        if s.src == 0 || s.dst == 0 {
            return Err(bad("null source or destination".to_owned()));
        }
        if s.dst % eb != 0 {
            return Err(bad(format!("destination {:#x} is not aligned to {eb} bytes", s.dst)));
        }
        let inside = |w0: u32, w1: u32, o: u32, len: u32| o <= w0 && u64::from(w1) <= u64::from(o) + u64::from(len);
        if !inside(s.x.win0, s.x.win1, s.src_x0, s.src_w) || !inside(s.y.win0, s.y.win1, s.src_y0, s.src_h) {
            return Err(bad(format!(
                "the decoded window ({}, {}) + {}x{} does not hold the taps' window [{}, {}) x [{}, {})",
                s.src_x0, s.src_y0, s.src_w, s.src_h, s.x.win0, s.x.win1, s.y.win0, s.y.win1
            )));
        }
        if (s.src_pitch as u64) < 3 * u64::from(s.src_w) {
            return Err(bad(format!("pitch {} is below 3 × width {}", s.src_pitch, s.src_w)));
        }
        let (inter_w, inter_h) =
            if s.vertical_first { (s.x.win1 - s.x.win0, oh) } else { (ow, s.y.win1 - s.y.win0) };
        let x_start = taps_elems;
        let x_k = x_start + u64::from(ow);
        let y_start = x_k + s.x.k.len() as u64;
        let y_k = y_start + u64::from(oh);
        taps_elems = y_k + s.y.k.len() as u64;
        if taps_elems > u64::from(u32::MAX) {
            return Err(resample_error("the batch's taps exceed 2^32 entries: split the batch"));
        }
        descs.push(Desc {
            src: s.src,
            src_pitch: s.src_pitch as u64,
            dst: s.dst,
            inter: inter_bytes,
            src_x0: s.src_x0,
            src_y0: s.src_y0,
            src_w: s.src_w,
            src_h: s.src_h,
            x_start: x_start as u32,
            x_k: x_k as u32,
            y_start: y_start as u32,
            y_k: y_k as u32,
            x_taps: s.x.taps,
            y_taps: s.y.taps,
            x_win0: s.x.win0,
            x_win1: s.x.win1,
            y_win0: s.y.win0,
            y_win1: s.y.win1,
            vertical_first: u32::from(s.vertical_first),
            inter_w,
            inter_h,
        });
        inter_bytes += 3 * u64::from(inter_w) * u64::from(inter_h);
        if inter_bytes > MAX_INTERMEDIATE_BYTES {
            return Err(TrdataError::Memory {
                what: format!(
                    "the GPU resample's 8-bit intermediate of {} samples (cap {MAX_INTERMEDIATE_BYTES} bytes: split \
                     the batch)",
                    i + 1
                ),
                bytes: inter_bytes,
            });
        }
        max_w1 = max_w1.max(u64::from(inter_w));
        max_h1 = max_h1.max(u64::from(inter_h));
    }
    let staging = (DESC_BYTES * samples.len()) as u64 + 4 * taps_elems;
    if staging > MAX_STAGING_BYTES {
        return Err(TrdataError::Memory {
            what: format!("the GPU resample's descriptors and taps (cap {MAX_STAGING_BYTES} bytes: split the batch)"),
            bytes: staging,
        });
    }
    let grid = |w: u64, h: u64| {
        let gx = w.div_ceil(u64::from(BLOCK.0)) as u32; // ≤ 2^32 / 64
        let gy = h.div_ceil(u64::from(BLOCK.1)).min(MAX_GRID_Y) as u32;
        (gx, gy, samples.len() as u32)
    };
    Ok(BatchLayout {
        descs,
        staging_bytes: staging as usize,
        inter_bytes: inter_bytes as usize,
        grid1: grid(max_w1, max_h1),
        grid2: grid(u64::from(ow), u64::from(oh)),
    })
}

/// Write the staging block of `layout` (descriptors, then each sample's x starts, x weights, y starts, y
/// weights) into `out` (`layout.staging_bytes` long).
fn write_staging(samples: &[GpuSample<'_>], layout: &BatchLayout, out: &mut [u8]) {
    let (descs, taps) = out[..layout.staging_bytes].split_at_mut(DESC_BYTES * samples.len());
    for (d, chunk) in layout.descs.iter().zip(descs.chunks_exact_mut(DESC_BYTES)) {
        d.write(chunk);
    }
    let mut words = taps.chunks_exact_mut(4);
    for s in samples {
        let values = s.x.start.iter().map(|&v| v as i32).chain(s.x.k.iter().copied());
        let values = values.chain(s.y.start.iter().map(|&v| v as i32)).chain(s.y.k.iter().copied());
        for (d, v) in (&mut words).zip(values) {
            d.copy_from_slice(&v.to_ne_bytes());
        }
    }
}

/// Page-locked host memory (`cuMemHostAlloc`), freed on drop: the staging block's source, so that its H2D copy
/// is truly asynchronous.
struct PinnedBuffer {
    ptr: *mut u8,
    len: usize,
    ctx: Arc<GpuContext>,
}

impl PinnedBuffer {
    fn alloc(ctx: &Arc<GpuContext>, len: usize) -> Result<Self> {
        let len = len.max(1);
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer; flags 0 = plain page-locked memory of the current context.
        ctx.scoped(|| check("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut p, len, 0) }))?;
        Ok(Self { ptr: p.cast::<u8>(), len, ctx: Arc::clone(ctx) })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is a live allocation of `len` bytes owned by self; &mut self makes the borrow unique, and
        // the device reads it only between the owner's copy and its `staged` event, which the owner waits for
        // before calling this again.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        let p = self.ptr.cast::<c_void>();
        // SAFETY: allocated by cuMemHostAlloc and freed once; the owner waited for the copy reading it.
        let _ = self.ctx.scoped(|| check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(p) }));
    }
}

/// The GPU resampler of one engine: the compiled module and its two kernels, the output table on the device,
/// and grown-and-reused buffers (pinned staging, device staging, 8-bit intermediate). Not shared between threads
/// (`Send`, so the engine's decode thread can own it). See the module docs for the protocol of [`Self::run`].
pub struct GpuResampler {
    ctx: Arc<GpuContext>,
    module: sys::CUmodule,
    pass1: sys::CUfunction,
    pass2: sys::CUfunction,
    format: OutputFormat,
    lut: DeviceMemory,
    host: Option<PinnedBuffer>,
    staging: Option<DeviceMemory>,
    inter: Option<DeviceMemory>,
    /// Recorded after the last staging copy: the pinned buffer may be rewritten once it completed.
    staged: Event,
    /// Recorded after the last pass 2: the device buffers may be rewritten (or freed) once it completed.
    done: Event,
    /// Whether `staged`/`done` were recorded at least once.
    ran: bool,
    info: CompileInfo,
}

impl std::fmt::Debug for GpuResampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuResampler").field("format", &self.format).field("info", &self.info).finish()
    }
}

// SAFETY: the module and function handles belong to a context, not a thread; every use makes that context
// current (`scoped`) and goes through &mut self (one thread at a time). The other fields are Send already, and
// PinnedBuffer's pointer is owned memory.
unsafe impl Send for GpuResampler {}

impl GpuResampler {
    /// Compile the kernels for `ctx`'s device with `nvrtc`, load them, and upload `format`'s table. Fails with a
    /// CudaError naming the call (the NVRTC log included for a compile error) or a refused format.
    pub fn new(ctx: &Arc<GpuContext>, nvrtc: &Nvrtc, format: OutputFormat) -> Result<Self> {
        format.check()?;
        let arch = super::probe()
            .devices()
            .get(ctx.ordinal() as usize)
            .map(|d| d.compute_capability)
            .ok_or_else(|| cuda_error("cuDeviceGetAttribute", format!("no device cuda:{}", ctx.ordinal())))?;
        let t0 = Instant::now();
        let cubin = compile_cubin(nvrtc, RESAMPLE_SOURCE, "resample.cu", arch)?;
        let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
        let lut = DeviceMemory::alloc(ctx, format.lut.len())?;
        let (staged, done) = (Event::new(ctx)?, Event::new(ctx)?);
        let t1 = Instant::now();
        let (module, pass1, pass2) = ctx.scoped(|| {
            guarded("cuModuleLoadData", || {
                // SAFETY: `lut` is a live device allocation of `format.lut.len()` bytes (made above for it).
                unsafe { result::memcpy_htod_sync(lut.ptr(), &format.lut) }
                    .map_err(|e| cuda_error("cuMemcpyHtoD", e))?;
                let mut module: sys::CUmodule = std::ptr::null_mut();
                // SAFETY: `cubin` is a complete ELF image from NVRTC, alive for the call (the driver copies it).
                check("cuModuleLoadData", unsafe { sys::cuModuleLoadData(&mut module, cubin.as_ptr().cast()) })?;
                let get = |name: &CStr| -> Result<sys::CUfunction> {
                    let mut f: sys::CUfunction = std::ptr::null_mut();
                    // SAFETY: `module` was just loaded; `name` is NUL-terminated.
                    check("cuModuleGetFunction", unsafe { sys::cuModuleGetFunction(&mut f, module, name.as_ptr()) })?;
                    Ok(f)
                };
                match (get(c"trdata_resample_pass1"), get(c"trdata_resample_pass2")) {
                    (Ok(a), Ok(b)) => Ok((module, a, b)),
                    (Err(e), _) | (_, Err(e)) => {
                        // SAFETY: loaded above, unloaded once (no function of it is kept).
                        unsafe { sys::cuModuleUnload(module) };
                        Err(e)
                    }
                }
            })
        })?;
        let info = CompileInfo {
            nvrtc_path: nvrtc.path.clone(),
            nvrtc_version: nvrtc.version,
            arch,
            compile_ms,
            load_ms: t1.elapsed().as_secs_f64() * 1e3,
            cubin_bytes: cubin.len(),
        };
        // Nothing fails after the module is loaded: Drop unloads it from here on.
        Ok(Self {
            ctx: Arc::clone(ctx),
            module,
            pass1,
            pass2,
            format,
            lut,
            host: None,
            staging: None,
            inter: None,
            staged,
            done,
            ran: false,
            info,
        })
    }

    /// How the kernels were built.
    pub fn compile_info(&self) -> &CompileInfo {
        &self.info
    }

    /// The output format.
    pub fn format(&self) -> &OutputFormat {
        &self.format
    }

    /// Bytes of device memory held (table, staging block, intermediate), for stats.
    pub fn device_bytes(&self) -> usize {
        self.lut.len() + self.staging.as_ref().map_or(0, DeviceMemory::len) + self.inter.as_ref().map_or(0, DeviceMemory::len)
    }

    /// Bytes of pinned host memory held (the staging block's source).
    pub fn pinned_bytes(&self) -> usize {
        self.host.as_ref().map_or(0, |h| h.len)
    }

    /// Enqueue both passes for all `samples` on `stream` (one launch per pass for the whole batch; grid.z =
    /// sample). Returns once the work is enqueued. The caller keeps every sample's `src` and `dst` alive and
    /// orders the decode before `stream` (module docs); the resampler's own staging is safe to reuse at the next
    /// call whatever stream it comes on (it waits for its own events). A refused batch (a sample that does not
    /// fit the format or its window, or sizes above the caps) is an error before anything is enqueued.
    pub fn run(&mut self, stream: &Stream, samples: &[GpuSample<'_>]) -> Result<()> {
        if samples.is_empty() {
            return Ok(());
        }
        let layout = plan_batch(samples, &self.format)?;
        let ctx = Arc::clone(&self.ctx);
        ctx.scoped(|| guarded("GpuResampler::run", || self.enqueue(stream, samples, &layout)))
    }

    fn enqueue(&mut self, stream: &Stream, samples: &[GpuSample<'_>], layout: &BatchLayout) -> Result<()> {
        // Step 2: the pinned block is free once the previous copy completed.
        if self.ran {
            self.staged.synchronize()?;
        }
        if self.host.as_ref().is_none_or(|h| h.len < layout.staging_bytes) {
            self.host = None;
            self.host = Some(PinnedBuffer::alloc(&self.ctx, grown(layout.staging_bytes))?);
        }
        let Some(host) = self.host.as_mut() else { return Err(resample_error("staging buffer missing")) };
        write_staging(samples, layout, host.as_mut_slice());
        // Step 3: growing frees a buffer the previous kernels may still read.
        let grow_staging = self.staging.as_ref().is_none_or(|m| m.len() < layout.staging_bytes);
        let grow_inter = self.inter.as_ref().is_none_or(|m| m.len() < layout.inter_bytes);
        if (grow_staging || grow_inter) && self.ran {
            self.done.synchronize()?;
        }
        if grow_staging {
            self.staging = None;
            self.staging = Some(DeviceMemory::alloc(&self.ctx, grown(layout.staging_bytes))?);
        }
        if grow_inter {
            self.inter = None;
            let want = grown(layout.inter_bytes).min(MAX_INTERMEDIATE_BYTES as usize).max(layout.inter_bytes);
            self.inter = Some(DeviceMemory::alloc(&self.ctx, want)?);
        }
        if self.ran {
            stream.wait_event(&self.done)?;
        }
        let (staging, inter) = match (&self.staging, &self.inter) {
            (Some(s), Some(i)) => (s.ptr(), i.ptr()),
            _ => return Err(resample_error("device buffers missing")),
        };
        // Step 4.
        // SAFETY: the pinned block holds `staging_bytes` written bytes and is not rewritten before `staged`
        // completes (step 2 of the next run); the device block is at least that long (grown above).
        unsafe { stream.copy_htod_async(staging, host.ptr, layout.staging_bytes)? };
        self.staged.record(stream)?;
        let mut descs = staging;
        let mut taps = staging + (DESC_BYTES * samples.len()) as u64;
        let mut inter_ptr = inter;
        let mut lut = self.lut.ptr();
        let (mut eb, mut nchw) = (self.format.elem_bytes, u32::from(self.format.nchw));
        let (mut ow, mut oh) = (self.format.out_w, self.format.out_h);
        let mut args1: [*mut c_void; 3] =
            [(&raw mut descs).cast(), (&raw mut taps).cast(), (&raw mut inter_ptr).cast()];
        let mut args2: [*mut c_void; 8] = [
            (&raw mut descs).cast(),
            (&raw mut taps).cast(),
            (&raw mut inter_ptr).cast(),
            (&raw mut lut).cast(),
            (&raw mut eb).cast(),
            (&raw mut nchw).cast(),
            (&raw mut ow).cast(),
            (&raw mut oh).cast(),
        ];
        for (f, grid, args, call) in [
            (self.pass1, layout.grid1, args1.as_mut_ptr(), "cuLaunchKernel(trdata_resample_pass1)"),
            (self.pass2, layout.grid2, args2.as_mut_ptr(), "cuLaunchKernel(trdata_resample_pass2)"),
        ] {
            // SAFETY: `f` is a function of our loaded module; `args` points to one pointer per kernel parameter,
            // each to a live local of the parameter's C type (u64 device pointers, u32 scalars), read by the
            // driver during the call; every index the kernel computes was bounds-checked by `plan_batch`.
            let rc = unsafe {
                sys::cuLaunchKernel(
                    f,
                    grid.0,
                    grid.1,
                    grid.2,
                    BLOCK.0,
                    BLOCK.1,
                    1,
                    0,
                    stream.raw(),
                    args,
                    std::ptr::null_mut(),
                )
            };
            check(call, rc)?;
        }
        self.done.record(stream)?;
        self.ran = true;
        Ok(())
    }
}

/// A buffer size with headroom (grown buffers are reused by later, slightly larger batches).
fn grown(len: usize) -> usize {
    len.saturating_add(len / 4).next_multiple_of(1 << 16)
}

impl Drop for GpuResampler {
    fn drop(&mut self) {
        // The device buffers and the module must outlive the last run's kernels.
        if self.ran {
            let _ = self.done.synchronize();
            let _ = self.staged.synchronize();
        }
        let module = self.module;
        let _ = self.ctx.scoped(|| {
            guarded("cuModuleUnload", || {
                // SAFETY: loaded in `new`, unloaded once; no launch uses it after this.
                check("cuModuleUnload", unsafe { sys::cuModuleUnload(module) })
            })
        });
    }
}
