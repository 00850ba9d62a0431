//! py/gpu_resample — `_core.gpu_resample_check` (tests) and `_core.nvrtc_probe` (`trdata info`): the GPU
//! resampler ([`crate::cuda::resample_gpu`]) against the CPU fused writer on the same decoded pixels.
//!
//! For each (JPEG bytes, SampleKey) the check (a) decodes the sample's window at full size (DCT 8/8) on the CPU
//! with the worker's decoder, (b) runs the CPU fused writer ([`SamplePipeline::process`] at 8/8) → the expected
//! bytes, (c) uploads the same decoded window (with a padded pitch) to the GPU and runs [`GpuResampler`] over the
//! batch (in two runs on two streams, so the resampler's buffer reuse and cross-stream ordering are exercised)
//! into an output buffer pre-filled with a sentinel → the GPU bytes. Both come back; equal bytes mean the
//! kernels, the descriptors and the output tables are exact. The taps come from [`SamplePipeline::prepare_gpu`],
//! the function the GPU decode path uses.

use std::path::PathBuf;

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use super::errors::IntoPyResult;
use crate::augment::{
    Channels, DctScaling, GpuAxis, GpuPlan, Layout, Normalize, OutputSpec, SampleKey, SamplePipeline, WorkerScratch,
};
use crate::config;
use crate::cuda::nvrtc;
use crate::cuda::resample_gpu::{AxisTaps, GpuResampler, GpuSample, OutputFormat};
use crate::cuda::{DeviceMemory, GpuContext, Stream};
use crate::error::{SampleError, TrdataError};

/// Adds the functions to the `_core` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(nvrtc_probe, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_resample_check, m)?)
}

/// `{"found": path | None, "version": (major, minor) | None, "tried": [(path, outcome)]}` (the search order of
/// [`crate::cuda::nvrtc`]; `extra` = Python's wheel paths).
#[pyfunction]
#[pyo3(signature = (extra))]
fn nvrtc_probe<'py>(py: Python<'py>, extra: Vec<String>) -> PyResult<Bound<'py, PyDict>> {
    let extra: Vec<PathBuf> = extra.into_iter().map(PathBuf::from).collect();
    let probe = py.detach(|| nvrtc::probe(&extra));
    let d = PyDict::new(py);
    d.set_item("found", probe.found.as_ref().map(|(p, _)| p.clone()))?;
    d.set_item("version", probe.found.as_ref().map(|(_, v)| *v))?;
    d.set_item("tried", probe.tried)?;
    Ok(d)
}

/// The GPU resampler's view of a plan's axis.
fn axis(a: GpuAxis<'_>) -> AxisTaps<'_> {
    AxisTaps { start: a.start, k: a.k, taps: a.taps as u32, win0: a.win0, win1: a.win1 }
}

/// A decoded window on the host, as uploaded: rows `pitch` bytes apart (padded beyond 3 · w).
struct Window {
    pixels: Vec<u8>,
    pitch: usize,
    x0: u32,
    y0: u32,
    w: u32,
    h: u32,
}

/// Everything the CPU side produced: expected bytes, per-sample plans and windows.
struct CpuSide {
    pipeline: SamplePipeline,
    expected: Vec<u8>,
    plans: Vec<GpuPlan>,
    windows: Vec<Window>,
}

fn cpu_side(files: &[Vec<u8>], keys: &[SampleKey], pipeline: SamplePipeline) -> crate::error::Result<CpuSide> {
    let sb = pipeline.sample_bytes();
    let mut scratch = WorkerScratch::new()?;
    let mut expected = vec![0u8; files.len() * sb];
    let (mut plans, mut windows) = (Vec::new(), Vec::new());
    for (i, (bytes, &key)) in files.iter().zip(keys).enumerate() {
        let failed = |error| {
            TrdataError::Decode(SampleError { path: PathBuf::from(format!("<file {i}>")), index: i as u64, error })
        };
        pipeline.process(&mut scratch, bytes, key, &mut expected[i * sb..(i + 1) * sb]).map_err(failed)?;
        // The header's size, as the worker's decoder reads it (the GPU path reads it the same way).
        let (w, h) = {
            let mut d = crate::decode::Decoder::new()?;
            let info = d.read_header(bytes).map_err(failed)?;
            (info.width, info.height)
        };
        let mut plan = GpuPlan::default();
        pipeline.prepare_gpu(w, h, key, &mut plan).map_err(failed)?;
        let r = scratch.decode_gpu_window(bytes, &plan).map_err(failed)?;
        // A pitch that is not 3 · width (and not a multiple of 4), so the kernels' use of it is checked.
        let pitch = r.stride + 7;
        let mut pixels = vec![0u8; pitch * r.height as usize];
        for (row, dst) in pixels.chunks_exact_mut(pitch).enumerate() {
            dst[..r.stride].copy_from_slice(&r.pixels[row * r.stride..(row + 1) * r.stride]);
        }
        windows.push(Window { pixels, pitch, x0: r.x0, y0: r.y0, w: r.width, h: r.height });
        plans.push(plan);
    }
    Ok(CpuSide { pipeline, expected, plans, windows })
}

/// The GPU side: upload the windows, run the resampler (first half of the batch on one stream, the rest on
/// another), copy the output back. Returns (bytes, compile info dict entries, device bytes held).
fn gpu_side(
    cpu: &CpuSide,
    device: u32,
    extra: &[PathBuf],
) -> crate::error::Result<(Vec<u8>, crate::cuda::resample_gpu::CompileInfo, usize)> {
    let lib = nvrtc::open_required(extra)?;
    let ctx = GpuContext::open(device)?;
    let (lut, elem_bytes) = cpu.pipeline.output_table_bytes();
    let (out_h, out_w) = cpu.pipeline.output_hw();
    let format = OutputFormat {
        lut,
        elem_bytes,
        nchw: cpu.pipeline.output().layout == Layout::Nchw,
        out_h: out_h as u32,
        out_w: out_w as u32,
    };
    let mut resampler = GpuResampler::new(&ctx, &lib, format)?;
    // Every window at a 256-byte aligned offset of one allocation.
    let offsets: Vec<usize> = cpu
        .windows
        .iter()
        .scan(0usize, |at, w| {
            let o = *at;
            *at = (o + w.pixels.len()).next_multiple_of(256);
            Some(o)
        })
        .collect();
    let total = cpu.windows.last().map_or(1, |w| offsets[offsets.len() - 1] + w.pixels.len());
    let src = DeviceMemory::alloc(&ctx, total)?;
    for (w, &o) in cpu.windows.iter().zip(&offsets) {
        src.copy_from_host(o, &w.pixels)?;
    }
    let sb = cpu.pipeline.sample_bytes();
    let n = cpu.windows.len();
    let out = DeviceMemory::alloc(&ctx, n * sb)?;
    // A sentinel, so that a byte the kernels never write cannot match by accident (the expected bytes are
    // compared in full).
    out.copy_from_host(0, &vec![0xA5u8; n * sb])?;
    let samples: Vec<GpuSample<'_>> = cpu
        .plans
        .iter()
        .zip(&cpu.windows)
        .zip(&offsets)
        .enumerate()
        .map(|(i, ((p, w), &o))| GpuSample {
            src: src.ptr() + o as u64,
            src_pitch: w.pitch,
            src_x0: w.x0,
            src_y0: w.y0,
            src_w: w.w,
            src_h: w.h,
            x: axis(p.x()),
            y: axis(p.y()),
            vertical_first: p.vertical_first(),
            dst: out.ptr() + (i * sb) as u64,
        })
        .collect();
    let (a, b) = (Stream::new_non_blocking(&ctx)?, Stream::new_non_blocking(&ctx)?);
    let half = n / 2;
    resampler.run(&a, &samples[..half])?;
    resampler.run(&b, &samples[half..])?;
    a.synchronize()?;
    b.synchronize()?;
    let mut got = vec![0u8; n * sb];
    out.copy_range_to_host(0, &mut got)?;
    let device_bytes = resampler.device_bytes();
    Ok((got, resampler.compile_info().clone(), device_bytes))
}

/// CPU fused writer vs GPU resampler (module docs): sample `i` is `files[i]` with key `keys[i]` = (seed, epoch,
/// index), through `transforms` (the loader's tuples), `normalize` ((mean, std) as the loader takes it),
/// `dtype` and `layout` (RGB output) → `(cpu bytes, gpu bytes, info)`, both uint8 arrays of `n · sample_bytes`;
/// `info` holds per-sample `vertical_first`, `flip`, `window` (x0, y0, x1, y1) and `taps` (x, y), and the build:
/// `nvrtc`, `nvrtc_version`, `arch`, `compile_ms`, `load_ms`, `cubin_bytes`, `device_bytes`.
#[pyfunction]
#[pyo3(signature = (files, transforms, keys, normalize, dtype, layout, device, extra))]
#[allow(clippy::too_many_arguments)]
#[allow(clippy::type_complexity)]
fn gpu_resample_check<'py>(
    py: Python<'py>,
    files: Vec<Vec<u8>>,
    transforms: Vec<Bound<'py, PyTuple>>,
    keys: Vec<(u64, u64, u64)>,
    normalize: Option<(Vec<f64>, Vec<f64>)>,
    dtype: String,
    layout: String,
    device: u32,
    extra: Vec<String>,
) -> PyResult<(Bound<'py, PyArray1<u8>>, Bound<'py, PyArray1<u8>>, Bound<'py, PyDict>)> {
    if files.len() != keys.len() || files.is_empty() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "one key per file is required ({} files, {} keys)",
            files.len(),
            keys.len()
        )));
    }
    let specs = transforms.iter().map(super::ops::parse_transform).collect::<PyResult<Vec<_>>>()?;
    let output = OutputSpec {
        dtype: config::DTYPE.parse(&dtype).py_err()?,
        layout: config::LAYOUT.parse(&layout).py_err()?,
        normalize: normalize.map(|(m, s)| Normalize::from_user(&m, &s, Channels::Rgb)).transpose().py_err()?,
        pad_to: None,
    };
    let keys: Vec<SampleKey> = keys.into_iter().map(|(seed, epoch, index)| SampleKey { seed, epoch, index }).collect();
    let extra: Vec<PathBuf> = extra.into_iter().map(PathBuf::from).collect();
    let (cpu, got, build, device_bytes) = py
        .detach(|| {
            let pipeline = SamplePipeline::with_channels(specs, output, Channels::Rgb)?
                .with_dct_scaling(DctScaling::MinRatio(1e9))?;
            pipeline.gpu_support()?;
            let cpu = cpu_side(&files, &keys, pipeline)?;
            let (got, build, device_bytes) = gpu_side(&cpu, device, &extra)?;
            Ok::<_, TrdataError>((cpu, got, build, device_bytes))
        })
        .py_err()?;
    let info = PyDict::new(py);
    info.set_item("vertical_first", cpu.plans.iter().map(GpuPlan::vertical_first).collect::<Vec<_>>())?;
    info.set_item("flip", cpu.plans.iter().map(|p| p.flips().0).collect::<Vec<_>>())?;
    let window = |p: &GpuPlan| {
        let w = p.window();
        (w.x0, w.y0, w.x1, w.y1)
    };
    info.set_item("window", cpu.plans.iter().map(window).collect::<Vec<_>>())?;
    info.set_item("taps", cpu.plans.iter().map(|p| (p.x().taps, p.y().taps)).collect::<Vec<_>>())?;
    info.set_item(
        "signed",
        cpu.plans.iter().map(|p| p.x().k.iter().chain(p.y().k).any(|&k| k < 0)).collect::<Vec<_>>(),
    )?;
    info.set_item("nvrtc", build.nvrtc_path)?;
    info.set_item("nvrtc_version", build.nvrtc_version)?;
    info.set_item("arch", build.arch)?;
    info.set_item("compile_ms", build.compile_ms)?;
    info.set_item("load_ms", build.load_ms)?;
    info.set_item("cubin_bytes", build.cubin_bytes)?;
    info.set_item("device_bytes", device_bytes)?;
    Ok((PyArray1::from_vec(py, cpu.expected), PyArray1::from_vec(py, got), info))
}
