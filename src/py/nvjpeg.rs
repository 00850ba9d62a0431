//! py/nvjpeg — `_core.nvjpeg_probe` and `_core.nvjpeg_decode`: what libnvjpeg the search finds (for `trdata
//! info`) and a one-image GPU decode (for the tests and benches that compare GPU and CPU decodes); the GPU decode
//! path's arena size (`_core.gpu_decode_arena_bytes`, for tests that check its memory bound). Python
//! (`trdata/_nvjpeg.py`) supplies the wheel paths it derives from `sys.path`; the search order is
//! [`crate::cuda::nvjpeg`]'s.

use std::path::PathBuf;

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::errors::IntoPyResult;
use crate::cuda::{self, GpuContext, nvjpeg};

/// Adds the nvJPEG functions to the `_core` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(nvjpeg_probe, m)?)?;
    m.add_function(wrap_pyfunction!(nvjpeg_decode, m)?)?;
    m.add_function(wrap_pyfunction!(nvjpeg_decode_batches, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_decode_arena_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_eligible, m)?)
}

/// Whether the GPU decode path takes `data` (`gpu_decode::eligible`: `decode::gpu_eligible` with the path's file size limit):
/// `(width, height, subsampling)` or the reason's short name (tests and tools: why a file goes to the CPU).
#[pyfunction]
fn gpu_eligible<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    match crate::gpu_decode::eligible(data) {
        Ok(j) => Ok((j.width, j.height, j.subsampling.as_str()).into_pyobject(py)?.into_any()),
        Err(why) => Ok(why.as_str().into_pyobject(py)?.into_any()),
    }
}

/// Bytes of one GPU decode arena for batches of `batch_size` (`gpu_decode::arena_bytes`; a GPU loader
/// allocates at most prefetch + 1 of them per GPU).
#[pyfunction]
fn gpu_decode_arena_bytes(batch_size: usize) -> usize {
    crate::gpu_decode::arena_bytes(batch_size)
}

fn paths(extra: Vec<String>) -> Vec<PathBuf> {
    extra.into_iter().map(PathBuf::from).collect()
}

/// `{"found": path | None, "version": (major, minor, patch) | None, "tried": [(path, outcome)], "hardware":
/// (engines, cores per engine) | None, "hardware_error": str | None}`; hardware facts come from GPU 0 when
/// CUDA is available.
#[pyfunction]
#[pyo3(signature = (extra))]
fn nvjpeg_probe<'py>(py: Python<'py>, extra: Vec<String>) -> PyResult<Bound<'py, PyDict>> {
    let extra = paths(extra);
    let (probe, hardware) = py.detach(|| {
        let (lib, probe) = nvjpeg::open(&extra);
        let hardware = match (&lib, cuda::probe().is_available()) {
            (Some(lib), true) => GpuContext::open(0).and_then(|ctx| lib.hardware_info(&ctx)).map_err(|e| e.to_string()),
            (Some(_), false) => Err("no CUDA device".to_owned()),
            (None, _) => Ok(None),
        };
        (probe, hardware)
    });
    let d = PyDict::new(py);
    d.set_item("found", probe.found.as_ref().map(|(p, _)| p.clone()))?;
    d.set_item("version", probe.found.as_ref().map(|(_, v)| *v))?;
    d.set_item("tried", probe.tried)?;
    match hardware {
        Ok(h) => {
            d.set_item("hardware", h)?;
            d.set_item("hardware_error", None::<String>)?;
        }
        Err(e) => {
            d.set_item("hardware", None::<(u32, u32)>)?;
            d.set_item("hardware_error", e)?;
        }
    }
    Ok(d)
}

/// Decode one JPEG on GPU `device` with nvJPEG (hardware engines when `hardware` and present, else the CUDA
/// backend) → `(pixels uint8 of shape (h·w·3,), height, width, backend)`.
#[pyfunction]
#[pyo3(signature = (data, device, hardware, extra))]
fn nvjpeg_decode<'py>(
    py: Python<'py>,
    data: Vec<u8>,
    device: u32,
    hardware: bool,
    extra: Vec<String>,
) -> PyResult<(Bound<'py, PyArray1<u8>>, usize, usize, &'static str)> {
    let extra = paths(extra);
    let (h, w, pixels, backend) = py
        .detach(|| {
            let lib = nvjpeg::open_required(&extra)?;
            let ctx = GpuContext::open(device)?;
            nvjpeg::decode_rgb(&lib, &ctx, &data, hardware)
        })
        .py_err()?;
    let name = match backend {
        nvjpeg::Backend::Hardware => "hardware",
        nvjpeg::Backend::Cuda => "cuda",
    };
    Ok((PyArray1::from_vec(py, pixels), h, w, name))
}

/// `nvjpeg_decode_batches`' result: (seconds, decoded, {reason: count}, (check, submit, wait) seconds).
type BatchesResult = (f64, usize, std::collections::BTreeMap<String, usize>, (f64, f64, f64));

/// The GPU decode ceiling (benches): decode `files` in batches of `batch` with one [`nvjpeg::BatchDecoder`],
/// `rounds` times over, each image whole or (with `roi_fraction` f) its centred region of f × the sides →
/// `(seconds, decoded, {reason: count}, (check, submit, wait) seconds)`; the first round is a warm-up and not
/// timed. `interpolate`: interpolated chroma upsampling (see `BatchDecoder::new`).
#[pyfunction]
#[pyo3(signature = (files, device, hardware, batch, rounds, roi_fraction, extra, interpolate = true))]
#[allow(clippy::too_many_arguments)]
fn nvjpeg_decode_batches(
    py: Python<'_>,
    files: Vec<Vec<u8>>,
    device: u32,
    hardware: bool,
    batch: usize,
    rounds: usize,
    roi_fraction: Option<f64>,
    extra: Vec<String>,
    interpolate: bool,
) -> PyResult<BatchesResult> {
    let extra = paths(extra);
    py.detach(|| {
        let lib = nvjpeg::open_required(&extra)?;
        let ctx = GpuContext::open(device)?;
        let mut dec = nvjpeg::BatchDecoder::new(lib, ctx, hardware, interpolate, 1 << 31)?;
        let rois: Vec<Option<nvjpeg::Roi>> = files
            .iter()
            .map(|f| {
                let f_roi = roi_fraction?;
                let (w, h) = dec.dimensions(f).ok()?;
                let (w, h) = (w as u32, h as u32);
                let (rw, rh) = (((w as f64) * f_roi).max(1.0) as u32, ((h as f64) * f_roi).max(1.0) as u32);
                Some(nvjpeg::Roi { x: (w - rw) / 2, y: (h - rh) / 2, w: rw, h: rh })
            })
            .collect();
        let (mut decoded, mut refused) = (0usize, std::collections::BTreeMap::new());
        let mut start = std::time::Instant::now();
        for round in 0..rounds.max(1) + 1 {
            if round == 1 {
                start = std::time::Instant::now();
                decoded = 0;
                refused.clear();
                dec.timing = nvjpeg::DecodeTiming::default();
            }
            for (chunk, roi) in files.chunks(batch.max(1)).zip(rois.chunks(batch.max(1))) {
                let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
                for placed in dec.decode(&refs, roi)? {
                    match placed {
                        Ok(_) => decoded += 1,
                        Err(why) => *refused.entry(why).or_insert(0) += 1,
                    }
                }
            }
        }
        let t = dec.timing;
        let phases = (t.check_ns as f64 * 1e-9, t.submit_ns as f64 * 1e-9, t.wait_ns as f64 * 1e-9);
        Ok((start.elapsed().as_secs_f64(), decoded, refused, phases))
    })
    .py_err()
}
