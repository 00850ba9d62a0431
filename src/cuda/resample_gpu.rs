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
//!    ([`plan_batch`]): one 112-byte descriptor per sample, then every sample's taps (`i32`), and each sample's
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

use super::driver::{DeviceMemory, Event, GpuContext, PinnedHost, Stream, cuda_error, grown};
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
const DESC_BYTES: usize = 112;

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
    /// Column taps: one per output column of the sample, at most the format's `out_w` (a narrower sample is
    /// written at the left of its output, zero bytes beyond: `pad_to`'s canvas).
    pub x: AxisTaps<'a>,
    /// Row taps: one per output row of the sample, at most the format's `out_h` (zero rows below).
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

/// One sample's geometry, as the kernels read it (`struct Desc` of resample.cu, 112 bytes, native endian).
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
    /// The sample's own output size (its taps per axis), at most the format's.
    own_w: u32,
    own_h: u32,
}

impl Desc {
    /// The C struct's bytes, field by field in declaration order (4 × u64, 20 × u32 with the padding word).
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
            self.own_w,
            self.own_h,
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
        let axis = |name: &str, a: &AxisTaps<'_>, most: u32| -> Result<u32> {
            if a.start.is_empty() || a.start.len() > most as usize {
                return Err(bad(format!("{name} has {} outputs, the format 1 to {most}", a.start.len())));
            }
            let n = a.start.len() as u32;
            if a.taps == 0 || a.k.len() as u64 != u64::from(n) * u64::from(a.taps) {
                return Err(bad(format!("{name} has {} weights for {n} outputs × {} taps", a.k.len(), a.taps)));
            }
            if a.win0 >= a.win1 || a.win1 > i32::MAX as u32 {
                return Err(bad(format!("{name} window [{}, {}) is empty or too large", a.win0, a.win1)));
            }
            if let Some(o) =
                a.start.iter().position(|&st| st < a.win0 || u64::from(st) + u64::from(a.taps) > u64::from(a.win1))
            {
                return Err(bad(format!(
                    "{name} output {o} reads [{}, +{}) outside its window [{}, {})",
                    a.start[o], a.taps, a.win0, a.win1
                )));
            }
            Ok(n)
        };
        let own_w = axis("x", &s.x, ow)?;
        let own_h = axis("y", &s.y, oh)?;
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
            if s.vertical_first { (s.x.win1 - s.x.win0, own_h) } else { (own_w, s.y.win1 - s.y.win0) };
        let x_start = taps_elems;
        let x_k = x_start + u64::from(own_w);
        let y_start = x_k + s.x.k.len() as u64;
        let y_k = y_start + u64::from(own_h);
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
            own_w,
            own_h,
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
        // `values` drives the zip: when it ends, no word of the next sample has been consumed.
        for (v, d) in values.zip(&mut words) {
            d.copy_from_slice(&v.to_ne_bytes());
        }
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
    host: Option<PinnedHost>,
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
// PinnedHost's pointer is owned memory.
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
        self.lut.len()
            + self.staging.as_ref().map_or(0, DeviceMemory::len)
            + self.inter.as_ref().map_or(0, DeviceMemory::len)
    }

    /// Bytes of pinned host memory held (the staging block's source).
    pub fn pinned_bytes(&self) -> usize {
        self.host.as_ref().map_or(0, PinnedHost::size)
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
        if self.host.as_ref().is_none_or(|h| h.size() < layout.staging_bytes) {
            self.host = None;
            self.host = Some(PinnedHost::alloc(&self.ctx, grown(layout.staging_bytes))?);
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
        unsafe { stream.copy_htod_async(staging, host.ptr(), layout.staging_bytes)? };
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

#[cfg(test)]
mod tests {
    //! Without a GPU: the kernel source compiles through NVRTC for sm_90 (when a libnvrtc is found), the batch
    //! layout refuses what it must, and the kernels — compiled as host C++ and run over an emulated launch grid
    //! with the very staging bytes `run` would upload — give the CPU fused writer's bytes on real JPEGs. The
    //! GPU itself is exercised by tests/cuda/test_gpu_resample.py.

    use super::*;
    use crate::augment::resize::{Filter, Resample};
    use crate::augment::{
        DType, DctScaling, GpuPlan, Layout, Normalize, OutputSpec, SampleKey, SamplePipeline, TransformSpec,
        WorkerScratch,
    };
    use crate::cuda::nvrtc::test_nvrtc;
    use crate::decode::Subsampling;
    use crate::synthetic::encode::JpegEncoder;

    #[test]
    fn the_resample_kernels_compile_to_a_cubin_for_sm_90() {
        let Some(lib) = test_nvrtc() else { return };
        let cubin = match compile_cubin(&lib, RESAMPLE_SOURCE, "resample.cu", (9, 0)) {
            Ok(c) => c,
            Err(e) => panic!("resample.cu does not compile with NVRTC {:?}:\n{e}", lib.version),
        };
        assert_eq!(&cubin[..4], b"\x7fELF", "a CUBIN is an ELF image");
        for name in ["trdata_resample_pass1", "trdata_resample_pass2"] {
            assert!(cubin.windows(name.len()).any(|w| w == name.as_bytes()), "{name} is in the image");
        }
    }

    /// A sample whose every field is valid for a 4×3 output over a 10×8 image decoded whole at (0, 0).
    struct Fixture {
        xs: Vec<u32>,
        xk: Vec<i32>,
        ys: Vec<u32>,
        yk: Vec<i32>,
    }

    impl Fixture {
        fn new() -> Self {
            Self { xs: vec![0, 2, 4, 6], xk: vec![1 << 21; 8], ys: vec![0, 3, 5], yk: vec![1 << 21; 6] }
        }

        fn sample(&self) -> GpuSample<'_> {
            GpuSample {
                src: 0x1000,
                src_pitch: 30,
                src_x0: 0,
                src_y0: 0,
                src_w: 10,
                src_h: 8,
                x: AxisTaps { start: &self.xs, k: &self.xk, taps: 2, win0: 0, win1: 8 },
                y: AxisTaps { start: &self.ys, k: &self.yk, taps: 2, win0: 0, win1: 7 },
                vertical_first: false,
                dst: 0x2000,
            }
        }
    }

    fn format(elem_bytes: u32) -> OutputFormat {
        OutputFormat { lut: vec![0; 768 * elem_bytes as usize], elem_bytes, nchw: true, out_h: 3, out_w: 4 }
    }

    fn refused(samples: &[GpuSample<'_>], f: &OutputFormat) -> String {
        match plan_batch(samples, f) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn the_batch_layout_checks_every_sample_before_anything_is_allocated() {
        let fx = Fixture::new();
        let ok = fx.sample();
        let f = format(4);
        let l = plan_batch(&[ok, ok], &f).unwrap();
        // Descriptors, then per sample 4 + 8 + 3 + 6 taps entries.
        assert_eq!(l.staging_bytes, 2 * DESC_BYTES + 2 * 21 * 4);
        assert_eq!((l.descs[1].x_start, l.descs[1].x_k, l.descs[1].y_start, l.descs[1].y_k), (21, 25, 33, 36));
        // Horizontal first: the intermediate is the window's 7 rows × 4 output columns.
        assert_eq!((l.descs[0].inter_w, l.descs[0].inter_h, l.descs[1].inter), (4, 7, 84));
        assert_eq!(l.inter_bytes, 168);
        assert_eq!((l.grid1, l.grid2), ((1, 2, 2), (1, 1, 2)));
        let vf = GpuSample { vertical_first: true, ..ok };
        let l = plan_batch(&[vf], &f).unwrap();
        assert_eq!((l.descs[0].inter_w, l.descs[0].inter_h), (8, 3), "vertical first: out_h rows × window columns");

        // A sample smaller than the format (pad_to's canvas): its own size in the descriptor, its intermediate
        // only as wide as its own columns.
        let (xs2, xk2) = ([0u32, 2], [1 << 21; 4]);
        let narrow = GpuSample { x: AxisTaps { start: &xs2, k: &xk2, ..ok.x }, ..ok };
        let l = plan_batch(&[narrow, ok], &f).unwrap();
        assert_eq!((l.descs[0].own_w, l.descs[0].own_h, l.descs[0].inter_w), (2, 3, 2));
        assert_eq!((l.descs[1].own_w, l.descs[1].x_start), (4, 2 + 4 + 3 + 6));
        assert_eq!(l.grid2, (1, 1, 2), "pass 2 covers the whole format (the zeros too)");

        let (ys_long, yk_long) = ([0u32, 3, 5, 5], [1 << 21; 8]);
        let cases: Vec<(GpuSample<'_>, &str)> = vec![
            (
                GpuSample { y: AxisTaps { start: &ys_long, k: &yk_long, ..ok.y }, ..ok },
                "y has 4 outputs, the format 1 to 3",
            ),
            (GpuSample { y: AxisTaps { start: &[], k: &[], ..ok.y }, ..ok }, "y has 0 outputs"),
            (GpuSample { x: AxisTaps { taps: 3, ..ok.x }, ..ok }, "x has 8 weights for 4 outputs × 3 taps"),
            (GpuSample { x: AxisTaps { win1: 7, ..ok.x }, ..ok }, "x output 3 reads [6, +2) outside its window [0, 7)"),
            (GpuSample { x: AxisTaps { win0: 8, ..ok.x }, ..ok }, "x window [8, 8) is empty"),
            (GpuSample { src_w: 7, ..ok }, "does not hold the taps' window"),
            (GpuSample { src_x0: 1, ..ok }, "does not hold the taps' window"),
            (GpuSample { src_h: 6, ..ok }, "does not hold the taps' window"),
            (GpuSample { src_pitch: 29, ..ok }, "pitch 29 is below 3 × width 10"),
            (GpuSample { dst: 0x2002, ..ok }, "not aligned to 4 bytes"),
            (GpuSample { src: 0, ..ok }, "null source"),
        ];
        for (s, want) in cases {
            let msg = refused(&[ok, s], &f);
            assert!(msg.contains("sample 1:") && msg.contains(want), "{want:?} not in {msg:?}");
        }
        // u16 elements only need 2-byte alignment.
        assert!(plan_batch(&[GpuSample { dst: 0x2002, ..ok }], &format(2)).is_ok());
    }

    #[test]
    fn a_batch_above_the_caps_is_a_typed_error_not_an_allocation() {
        let fx = Fixture::new();
        let ok = fx.sample();
        // One sample whose row window is 2 billion rows: its intermediate alone is 24 GB.
        let tall = GpuSample { src_h: 2_000_000_000, y: AxisTaps { win1: 2_000_000_000, ..ok.y }, ..ok };
        match plan_batch(&[tall], &format(1)) {
            Err(TrdataError::Memory { bytes, what }) => {
                assert_eq!(bytes, 3 * 4 * 2_000_000_000);
                assert!(what.contains("intermediate"), "{what}");
            }
            other => panic!("{other:?}"),
        }
        let many = vec![ok; MAX_SAMPLES + 1];
        assert!(refused(&many, &format(1)).contains("above the launch limit"));
        // Fine just below the intermediate cap (in rows), refused just above it.
        let rows = (MAX_INTERMEDIATE_BYTES / 12) as u32;
        let at = GpuSample { src_h: rows, y: AxisTaps { win1: rows, ..ok.y }, ..ok };
        assert!(plan_batch(&[at], &format(1)).is_ok());
        let above = GpuSample { src_h: rows + 1, y: AxisTaps { win1: rows + 1, ..ok.y }, ..ok };
        assert!(matches!(plan_batch(&[above], &format(1)), Err(TrdataError::Memory { .. })));
    }

    #[test]
    fn the_output_format_is_checked() {
        let bad = |f: OutputFormat| f.check().unwrap_err().to_string();
        assert!(bad(OutputFormat { elem_bytes: 3, ..format(1) }).contains("1, 2 or 4"));
        assert!(bad(OutputFormat { lut: vec![0; 767], ..format(1) }).contains("3 × 256 × 1"));
        assert!(bad(OutputFormat { out_w: 0, ..format(1) }).contains("empty"));
        assert!(format(2).check().is_ok());
    }

    #[test]
    fn a_descriptor_is_written_field_by_field_in_the_c_structs_order() {
        let d = Desc {
            src: 1,
            src_pitch: 2,
            dst: 3,
            inter: 4,
            src_x0: 5,
            inter_h: 21,
            vertical_first: 19,
            own_w: 22,
            own_h: 23,
            ..Desc::default()
        };
        let mut b = [0xAAu8; DESC_BYTES];
        d.write(&mut b);
        let u64_at = |i: usize| u64::from_ne_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        let u32_at = |i: usize| u32::from_ne_bytes(b[32 + 4 * i..36 + 4 * i].try_into().unwrap());
        assert_eq!((u64_at(0), u64_at(1), u64_at(2), u64_at(3)), (1, 2, 3, 4));
        assert_eq!((u32_at(0), u32_at(14), u32_at(16), u32_at(17), u32_at(18), u32_at(19)), (5, 19, 21, 22, 23, 0));
        // The kernel source agrees on the size.
        assert!(RESAMPLE_SOURCE.contains(&format!("sizeof(struct Desc) == {DESC_BYTES}")));
    }

    #[test]
    fn prepare_gpu_refuses_pixel_ops_and_gray_output_and_fills_a_full_scale_plan() {
        let rrc =
            TransformSpec::RandomResizedCrop { height: 64, width: 48, scale: (0.08, 1.0), ratio: (0.75, 4.0 / 3.0) };
        let out = OutputSpec { dtype: DType::U8, layout: Layout::Nchw, normalize: None, pad_to: None };
        let key = SampleKey { seed: 3, epoch: 0, index: 9 };
        let mut plan = GpuPlan::default();
        let ops = vec![
            rrc.clone(),
            TransformSpec::Op(crate::augment::ops::OpSpec::RandomInvert(crate::augment::ops::RandomInvert { p: 0.5 })),
        ];
        let pipe = SamplePipeline::new(ops, out).unwrap();
        assert!(pipe.gpu_support().unwrap_err().to_string().contains("no pixel ops"));
        let e = pipe.prepare_gpu(640, 480, key, &mut plan).unwrap_err();
        assert_eq!(e.kind, crate::error::ImageErrorKind::Unsupported);
        let gray = SamplePipeline::with_channels(vec![rrc.clone()], out, crate::augment::Channels::Gray).unwrap();
        assert!(gray.gpu_support().unwrap_err().to_string().contains("RGB only"));
        let pipe = SamplePipeline::new(vec![rrc], out).unwrap();
        assert!(pipe.prepare_gpu(0, 480, key, &mut plan).is_err());
        pipe.prepare_gpu(640, 480, key, &mut plan).unwrap();
        // The plan is at full scale: the window lies in the 640x480 image and holds every tap.
        let (x, y, w) = (plan.x(), plan.y(), plan.window());
        assert_eq!((x.start.len(), y.start.len()), (48, 64));
        assert!(w.x1 <= 640 && w.y1 <= 480 && w.x0 < w.x1 && w.y0 < w.y1, "{w:?}");
        assert!(x.start.iter().all(|&s| s >= w.x0 && s + x.taps as u32 <= w.x1));
        assert_eq!(plan.image_size(), (640, 480));
        // Same key, same plan: it depends on (seed, epoch, index) only.
        let mut again = GpuPlan::default();
        pipe.prepare_gpu(640, 480, key, &mut again).unwrap();
        assert_eq!((again.x().start, again.y().k, again.window()), (x.start, y.k, w));
    }

    // ---- The kernels on the host -------------------------------------------------------------------------------

    /// resample.cu as host C++: CUDA's qualifiers become nothing, the built-in indices become globals, and two
    /// entry points run a kernel over every (block, thread) of a grid, one at a time.
    const EMULATION_PRELUDE: &str = r#"
struct trdata_emu_dim3 { unsigned int x, y, z; };
static trdata_emu_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
"#;
    const EMULATION_LAUNCHERS: &str = r#"
#define TRDATA_EMU_GRID(call)                                                                       \
    blockDim = {bx, by, 1}; gridDim = {gx, gy, gz};                                                  \
    for (unsigned z = 0; z < gz; ++z) for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x) \
        for (unsigned ty = 0; ty < by; ++ty) for (unsigned tx = 0; tx < bx; ++tx) {                     \
            blockIdx = {x, y, z}; threadIdx = {tx, ty, 0}; call; }
extern "C" void emu_pass1(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          const struct Desc* d, const int* taps, unsigned char* inter) {
    TRDATA_EMU_GRID(trdata_resample_pass1(d, taps, inter))
}
extern "C" void emu_pass2(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          const struct Desc* d, const int* taps, const unsigned char* inter,
                          const unsigned char* lut, unsigned eb, unsigned nchw, unsigned ow, unsigned oh) {
    TRDATA_EMU_GRID(trdata_resample_pass2(d, taps, inter, lut, eb, nchw, ow, oh))
}
"#;

    type Pass1 = unsafe extern "C" fn(u32, u32, u32, u32, u32, *const u8, *const i32, *mut u8);
    type Pass2 =
        unsafe extern "C" fn(u32, u32, u32, u32, u32, *const u8, *const i32, *const u8, *const u8, u32, u32, u32, u32);

    /// The kernels compiled by the host's C++ compiler (None, with a note, when there is none).
    struct Emulated {
        pass1: Pass1,
        pass2: Pass2,
        _lib: libloading::Library,
    }

    fn emulated_kernels() -> Option<Emulated> {
        let dir = std::env::temp_dir().join(format!("trdata-emu-resample-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("resample_emu.cpp");
        let so = dir.join("libresample_emu.so");
        std::fs::write(&src, format!("{EMULATION_PRELUDE}\n{RESAMPLE_SOURCE}\n{EMULATION_LAUNCHERS}")).unwrap();
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_owned());
        let out = std::process::Command::new(&cxx)
            .args(["-std=c++17", "-O2", "-Wall", "-Werror", "-Wno-unused-function", "-shared", "-fPIC"])
            .arg(&src)
            .arg("-o")
            .arg(&so)
            .output();
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                eprintln!("NOTE: no C++ compiler ({cxx}: {e}); the emulated kernel test checks nothing");
                return None;
            }
        };
        assert!(
            out.status.success(),
            "resample.cu does not compile as host C++:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // SAFETY: the library was just built from resample.cu + the launchers above; its initializers are the
        // C++ runtime's.
        let lib = unsafe { libloading::Library::new(&so) }.unwrap();
        // SAFETY: the symbols are the `extern "C"` launchers above, with exactly these signatures.
        let (pass1, pass2) =
            unsafe { (*lib.get::<Pass1>(b"emu_pass1\0").unwrap(), *lib.get::<Pass2>(b"emu_pass2\0").unwrap()) };
        let _ = std::fs::remove_dir_all(&dir);
        Some(Emulated { pass1, pass2, _lib: lib })
    }

    fn jpeg(w: u32, h: u32, seed: u32, sub: Subsampling) -> Vec<u8> {
        let rgb = crate::test_data::pattern(w, h, seed);
        let pixels: Vec<u8> = if sub == Subsampling::Gray { rgb.chunks_exact(3).map(|p| p[1]).collect() } else { rgb };
        JpegEncoder::new().unwrap().encode(&pixels, w, h, 90, sub).unwrap()
    }

    /// 8-byte aligned zeroed bytes (the staging block holds u64 fields; outputs hold up to 4-byte elements).
    fn aligned(len: usize) -> Vec<u64> {
        vec![0u64; len.div_ceil(8) + 1]
    }

    fn bytes_of(v: &mut [u64]) -> &mut [u8] {
        // SAFETY: any u64 storage is valid as bytes; the length is the slice's in bytes.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 8) }
    }

    fn axis(a: crate::augment::GpuAxis<'_>) -> AxisTaps<'_> {
        AxisTaps { start: a.start, k: a.k, taps: a.taps as u32, win0: a.win0, win1: a.win1 }
    }

    /// What the emulation covered, so the test can insist both pass orders, flips and signed taps occurred.
    #[derive(Default, Debug)]
    struct Seen {
        samples: usize,
        vertical_first: [bool; 2],
        flip: [bool; 2],
        signed: bool,
        padding: bool,
    }

    /// CPU fused writer vs the emulated kernels for every key of `keys` on `files`, in one batch per (dtype,
    /// layout), on `pad_to`'s canvas when given: 0 differing bytes.
    #[allow(clippy::too_many_arguments)]
    fn check_pipeline(
        emu: &Emulated,
        transforms: Vec<TransformSpec>,
        pad_to: Option<(usize, usize)>,
        files: &[Vec<u8>],
        keys: &[SampleKey],
        seen: &mut Seen,
        narrow_grid: bool,
    ) {
        let imagenet = Normalize { mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225] };
        for (dtype, normalize) in [
            (DType::U8, None),
            (DType::F32, Some(imagenet)),
            (DType::F16, Some(imagenet)),
            (DType::BF16, Some(imagenet)),
            (DType::F32, None),
        ] {
            for layout in [Layout::Nchw, Layout::Nhwc] {
                let output = OutputSpec { dtype, layout, normalize, pad_to };
                let pipe = SamplePipeline::new(transforms.clone(), output)
                    .unwrap()
                    .with_dct_scaling(DctScaling::MinRatio(1e9))
                    .unwrap();
                let mut scratch = WorkerScratch::new().unwrap();
                let sb = pipe.sample_bytes();
                let (oh, ow) = pipe.output_hw();
                let n = files.len() * keys.len();
                let mut expected = vec![0u8; n * sb];
                // Non-zero garbage: the kernels must write every byte of each sample, the canvas's zeros too.
                let mut got = aligned(n * sb);
                got.fill(0x5A5A_5A5A_5A5A_5A5A);
                let got_base = bytes_of(&mut got).as_mut_ptr() as u64;
                // Decoded windows, each with an odd pitch (3·w + 5) to exercise `src_pitch`.
                let mut plans: Vec<GpuPlan> = Vec::new();
                let mut windows: Vec<(Vec<u8>, usize, u32, u32, u32, u32)> = Vec::new();
                for (fi, bytes) in files.iter().enumerate() {
                    for (ki, &key) in keys.iter().enumerate() {
                        let i = fi * keys.len() + ki;
                        pipe.process(&mut scratch, bytes, key, &mut expected[i * sb..(i + 1) * sb]).unwrap();
                        let (w, h) = {
                            let mut d = crate::decode::Decoder::new().unwrap();
                            let info = d.read_header(bytes).unwrap();
                            (info.width, info.height)
                        };
                        let mut plan = GpuPlan::default();
                        pipe.prepare_gpu(w, h, key, &mut plan).unwrap();
                        let r = scratch.decode_gpu_window(bytes, &plan).unwrap();
                        let pitch = r.stride + 5;
                        let mut px = vec![0u8; pitch * r.height as usize];
                        for row in 0..r.height {
                            px[row as usize * pitch..][..r.stride]
                                .copy_from_slice(&r.pixels[row as usize * r.stride..][..r.stride]);
                        }
                        windows.push((px, pitch, r.x0, r.y0, r.width, r.height));
                        seen.vertical_first[usize::from(plan.vertical_first())] = true;
                        seen.flip[usize::from(plan.flips().0)] = true;
                        seen.signed |= plan.x().k.iter().chain(plan.y().k).any(|&k| k < 0);
                        seen.padding |= plan
                            .x()
                            .k
                            .chunks(plan.x().taps)
                            .chain(plan.y().k.chunks(plan.y().taps))
                            .any(|c| c.iter().all(|&k| k == 0));
                        plans.push(plan);
                    }
                }
                seen.samples += n;
                let samples: Vec<GpuSample<'_>> = plans
                    .iter()
                    .zip(&windows)
                    .enumerate()
                    .map(|(i, (p, (px, pitch, x0, y0, w, h)))| {
                        // Samples are written in reverse order, so that a wrong blockIdx.z cannot go unnoticed.
                        GpuSample {
                            src: px.as_ptr() as u64,
                            src_pitch: *pitch,
                            src_x0: *x0,
                            src_y0: *y0,
                            src_w: *w,
                            src_h: *h,
                            x: axis(p.x()),
                            y: axis(p.y()),
                            vertical_first: p.vertical_first(),
                            dst: got_base + ((n - 1 - i) * sb) as u64,
                        }
                    })
                    .collect();
                let (lut, eb) = pipe.output_table_bytes();
                assert_eq!(eb as usize, dtype.size_bytes());
                let format = OutputFormat {
                    lut,
                    elem_bytes: eb,
                    nchw: layout == Layout::Nchw,
                    out_h: oh as u32,
                    out_w: ow as u32,
                };
                format.check().unwrap();
                let layout_ = plan_batch(&samples, &format).unwrap();
                let mut staging = aligned(layout_.staging_bytes);
                write_staging(&samples, &layout_, bytes_of(&mut staging));
                let mut inter = vec![0xA5u8; layout_.inter_bytes];
                let base = bytes_of(&mut staging).as_ptr();
                // SAFETY: base + descriptors is 4-aligned (112·n bytes after an 8-aligned start).
                let taps = unsafe { base.add(DESC_BYTES * n) }.cast::<i32>();
                let (g1, g2) = if narrow_grid {
                    ((layout_.grid1.0, 1, layout_.grid1.2), (layout_.grid2.0, 2, layout_.grid2.2))
                } else {
                    (layout_.grid1, layout_.grid2)
                };
                // SAFETY: every pointer in the descriptors is a live host buffer of this function (the windows,
                // `got`), `inter` holds `inter_bytes`, the table 3·256·eb bytes; plan_batch checked the bounds.
                unsafe {
                    (emu.pass1)(g1.0, g1.1, g1.2, BLOCK.0, BLOCK.1, base, taps, inter.as_mut_ptr());
                    (emu.pass2)(
                        g2.0,
                        g2.1,
                        g2.2,
                        BLOCK.0,
                        BLOCK.1,
                        base,
                        taps,
                        inter.as_ptr(),
                        format.lut.as_ptr(),
                        eb,
                        u32::from(format.nchw),
                        ow as u32,
                        oh as u32,
                    );
                }
                let got = &bytes_of(&mut got)[..n * sb];
                for i in 0..n {
                    let (e, g) = (&expected[i * sb..(i + 1) * sb], &got[(n - 1 - i) * sb..(n - i) * sb]);
                    let diff = e.iter().zip(g).filter(|(a, b)| a != b).count();
                    assert_eq!(
                        diff,
                        0,
                        "sample {i} ({dtype:?}, {layout:?}, {:?}): {diff} of {sb} bytes differ; plan {:?} vf={}",
                        transforms,
                        plans[i].window(),
                        plans[i].vertical_first()
                    );
                }
            }
        }
    }

    #[test]
    fn the_kernels_emulated_on_the_host_give_the_cpu_fused_writers_bytes() {
        let Some(emu) = emulated_kernels() else { return };
        let files = vec![
            jpeg(500, 375, 1, Subsampling::S420),
            jpeg(333, 500, 2, Subsampling::S444),
            jpeg(640, 427, 3, Subsampling::S422),
            jpeg(300, 260, 4, Subsampling::Gray),
        ];
        let keys: Vec<SampleKey> = (0..6).map(|i| SampleKey { seed: 11, epoch: i / 3, index: i * 7 + 1 }).collect();
        let rrc = TransformSpec::RandomResizedCrop {
            height: 224,
            width: 224,
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
        };
        let flip = TransformSpec::RandomHorizontalFlip { p: 0.5 };
        let resampled = |filter, antialias, inner: TransformSpec| TransformSpec::Resampled {
            resample: Resample { filter, antialias },
            inner: Box::new(inner),
        };
        let mut seen = Seen::default();
        check_pipeline(&emu, vec![rrc.clone(), flip.clone()], None, &files, &keys, &mut seen, false);
        assert!(seen.vertical_first[0] && seen.vertical_first[1], "both pass orders occur: {seen:?}");
        assert!(seen.flip[0] && seen.flip[1], "flipped and plain samples occur: {seen:?}");
        // Eval: Resize(256) + CenterCrop(224), bilinear and bicubic (signed taps); a grid shorter than the image
        // (the kernels' row loop).
        let eval = |r: Option<(Filter, bool)>| {
            let resize = TransformSpec::ResizeShorter { shorter: 256 };
            let resize = match r {
                Some((f, a)) => resampled(f, a, resize),
                None => resize,
            };
            vec![resize, TransformSpec::CenterCrop { height: 224, width: 224 }]
        };
        let one_key = &keys[..1];
        check_pipeline(&emu, eval(None), None, &files, one_key, &mut seen, true);
        check_pipeline(&emu, eval(Some((Filter::Bicubic, true))), None, &files, one_key, &mut seen, false);
        assert!(seen.signed, "bicubic gives negative weights: {seen:?}");
        // Nearest; an upscale without antialias; a CenterCrop beyond the image (zero padding outputs).
        check_pipeline(
            &emu,
            vec![resampled(Filter::Nearest, false, TransformSpec::ResizeExact { height: 120, width: 100 })],
            None,
            &files,
            one_key,
            &mut seen,
            false,
        );
        check_pipeline(
            &emu,
            vec![
                resampled(Filter::Bilinear, false, TransformSpec::ResizeExact { height: 700, width: 530 }),
                flip.clone(),
            ],
            None,
            &files,
            &keys[..2],
            &mut seen,
            false,
        );
        check_pipeline(
            &emu,
            vec![TransformSpec::CenterCrop { height: 400, width: 360 }],
            None,
            &files,
            one_key,
            &mut seen,
            false,
        );
        assert!(seen.padding, "padding outputs occur: {seen:?}");
        // pad_to (detection's batches of images at their own sizes): each image, flipped or not, at the top left
        // of the canvas, zeros elsewhere; and a resize smaller than the canvas.
        check_pipeline(&emu, vec![flip.clone()], Some((512, 656)), &files, &keys[..3], &mut seen, false);
        check_pipeline(
            &emu,
            vec![TransformSpec::ResizeExact { height: 300, width: 250 }, flip],
            Some((320, 304)),
            &files,
            &keys[..2],
            &mut seen,
            false,
        );
        eprintln!("emulated kernels equal the CPU fused writer on {} samples: {seen:?}", seen.samples);
    }
}
