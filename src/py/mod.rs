//! py — the only PyO3 code: the private `trdata._core` module. Python's public API lives in python/trdata/.
#![allow(unsafe_code)] // PyO3's macros expand to unsafe blocks.

mod annot;
mod args;
mod batch;
mod bench;
mod errors;
mod gpu;
mod gpu_resample;
mod info;
mod loader;
mod nvjpeg;
mod ops;
mod pack;
mod source;
mod step;
mod storage;
mod targets;
mod wait;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<loader::NativeLoader>()?;
    m.add_class::<loader::BatchLeaseHandle>()?;
    m.add_class::<source::NativeSource>()?;
    m.add_class::<step::Step>()?;
    m.add_class::<gpu::DeviceTensorHandle>()?;
    m.add_function(wrap_pyfunction!(loader::scan_image_folder, m)?)?;
    m.add_function(wrap_pyfunction!(loader::check_file_list, m)?)?;
    m.add("CHOICES", loader::choices_dict(m.py())?)?;
    m.add("DEFAULTS", loader::defaults_dict(m.py())?)?;
    // a file, an encoded blob or a pixel array of one sample: at most this many bytes (sources/dataset.py)
    m.add("MAX_SAMPLE_BYTES", crate::worker::MAX_FILE_BYTES)?;
    m.add("MAX_EXTRA_BYTES", crate::source::packed_extras::MAX_EXTRA_BYTES)?;
    info::register(m)?;
    ops::register(m)?;
    bench::register(m)?;
    pack::register(m)?;
    storage::register(m)?;
    annot::register(m)?;
    batch::register(m)?;
    nvjpeg::register(m)?;
    gpu_resample::register(m)?;
    Ok(())
}
