//! py/info — `_core.machine_info()`: what this machine and this build offer the loader (CPUs,
//! NUMA topology, JPEG SIMD, CUDA devices, default worker binding), as a plain dict for
//! `trdata info` (python/trdata/_info.py formats it) and for bug reports.
//!
//! Gathering runs detached from the interpreter: the CUDA probe may `dlopen` the driver and call
//! `cuInit`, which can take a second on a cold GPU machine.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::config;
use crate::cuda::{self, CudaProbe};
use crate::topology::{self, Topology};

/// Adds `machine_info()` to the `_core` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(machine_info, m)?)
}

/// Facts gathered without the interpreter attached.
struct MachineFacts {
    topology: Topology,
    cuda: CudaProbe,
    cpu: CpuFacts,
}

/// CPU model and the vector extensions that matter for JPEG decode and the fused augment pass.
struct CpuFacts {
    model: Option<String>,
    sse2: bool,
    avx2: bool,
    avx512f: bool,
    avx512bw: bool,
}

impl CpuFacts {
    fn detect() -> Self {
        // std's detection is CPUID plus the OS's XSAVE state (XGETBV), the same test
        // libjpeg-turbo makes before choosing its AVX2 code, and it works in sandboxes where
        // /proc/cpuinfo is synthetic. /proc/cpuinfo only supplies the model name.
        #[cfg(target_arch = "x86_64")]
        let (sse2, avx2, avx512f, avx512bw) = (
            std::arch::is_x86_feature_detected!("sse2"),
            std::arch::is_x86_feature_detected!("avx2"),
            std::arch::is_x86_feature_detected!("avx512f"),
            std::arch::is_x86_feature_detected!("avx512bw"),
        );
        #[cfg(not(target_arch = "x86_64"))]
        let (sse2, avx2, avx512f, avx512bw) = (false, false, false, false);
        let model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        });
        CpuFacts { model, sse2, avx2, avx512f, avx512bw }
    }
}

/// What libjpeg-turbo will pick at run time. Its x86-64 dispatcher (simd/x86_64/jsimd.c) uses
/// AVX2 kernels when CPUID+XGETBV allow it and SSE2 otherwise (it has no AVX-512 code), unless
/// JSIMD_FORCESSE2 / JSIMD_FORCEAVX2 / JSIMD_FORCENONE = 1 say otherwise, applied in that order.
fn jpeg_simd_expected(cpu: &CpuFacts, built_with_simd: bool) -> String {
    if !built_with_simd {
        return "none (library built without SIMD)".to_owned();
    }
    if !cfg!(target_arch = "x86_64") {
        return "unknown on this architecture".to_owned();
    }
    let forced = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    let (mut sse2, mut avx2) = (cpu.sse2, cpu.avx2);
    let mut note = String::new();
    if forced("JSIMD_FORCESSE2") {
        avx2 = false;
        note = " (JSIMD_FORCESSE2=1)".to_owned();
    }
    if forced("JSIMD_FORCEAVX2") {
        sse2 = false;
        note = " (JSIMD_FORCEAVX2=1)".to_owned();
    }
    if forced("JSIMD_FORCENONE") {
        return "none (JSIMD_FORCENONE=1)".to_owned();
    }
    match (avx2, sse2) {
        (true, true) => format!("avx2, sse2 fallback{note}"),
        (true, false) => format!("avx2 only{note}"),
        (false, true) => format!("sse2{note}"),
        (false, false) => format!("none{note}"),
    }
}

/// Describes this machine and build: CPUs, NUMA topology, JPEG SIMD, CUDA devices and the
/// default worker binding. Never raises for missing hardware; facts that cannot be known are
/// `None` or carry a reason.
#[pyfunction]
fn machine_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let facts =
        py.detach(|| MachineFacts { topology: topology::detect(), cuda: cuda::probe(), cpu: CpuFacts::detect() });
    let MachineFacts { topology: topo, cuda: probe, cpu } = facts;

    let info = PyDict::new(py);
    info.set_item("version", env!("CARGO_PKG_VERSION"))?;

    let build = PyDict::new(py);
    build.set_item("profile", env!("TRDATA_BUILD_PROFILE"))?;
    build.set_item("target", env!("TRDATA_BUILD_TARGET"))?;
    let mut features = vec!["python"];
    if cfg!(feature = "hwloc") {
        features.push("hwloc");
    }
    build.set_item("features", features)?;
    info.set_item("build", build)?;

    // --- CPUs and topology
    let cpus = PyDict::new(py);
    cpus.set_item("model", cpu.model.as_deref())?;
    cpus.set_item("allowed", topo.allowed_cpus.clone())?;
    cpus.set_item("allowed_count", topo.allowed_cpus.len())?;
    cpus.set_item("allowed_list", topology::format_cpu_list(&topo.allowed_cpus))?;
    cpus.set_item("available_parallelism", std::thread::available_parallelism().map_or(0, |n| n.get()))?;
    let flags = PyDict::new(py);
    flags.set_item("sse2", cpu.sse2)?;
    flags.set_item("avx2", cpu.avx2)?;
    flags.set_item("avx512f", cpu.avx512f)?;
    flags.set_item("avx512bw", cpu.avx512bw)?;
    cpus.set_item("flags", flags)?;
    info.set_item("cpus", cpus)?;

    let topo_d = PyDict::new(py);
    topo_d.set_item("source", topo.source)?;
    let nodes = PyList::empty(py);
    for n in &topo.numa_nodes {
        let d = PyDict::new(py);
        d.set_item("os_index", n.os_index)?;
        d.set_item("cpus", n.cpus.clone())?;
        d.set_item("cpu_list", topology::format_cpu_list(&n.cpus))?;
        d.set_item("allowed_cpus", topo.allowed_cpus_of_node(n.os_index))?;
        nodes.append(d)?;
    }
    topo_d.set_item("numa_nodes", nodes)?;
    info.set_item("topology", topo_d)?;

    // --- JPEG
    let simd_built = match env!("TRDATA_JPEG_SIMD_BUILT") {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    };
    let jpeg = PyDict::new(py);
    jpeg.set_item(
        "library",
        if env!("TRDATA_JPEG_SOURCE") == "vendor" {
            "libjpeg-turbo (TurboJPEG 3 API), built from the sources bundled in turbojpeg-sys, static"
        } else {
            "libjpeg-turbo (TurboJPEG 3 API), external (TURBOJPEG_SOURCE)"
        },
    )?;
    jpeg.set_item("version", env!("TRDATA_JPEG_VERSION"))?;
    jpeg.set_item("source", env!("TRDATA_JPEG_SOURCE"))?;
    jpeg.set_item("simd_built", simd_built)?;
    jpeg.set_item(
        "simd_expected",
        match simd_built {
            Some(b) => jpeg_simd_expected(&cpu, b),
            None => "unknown (build did not record it)".to_owned(),
        },
    )?;
    jpeg.set_item(
        "note",
        "libjpeg-turbo cannot be asked which SIMD path it runs: 'simd_built' comes from the \
         jconfig.h of this build (WITH_SIMD), 'simd_expected' from its documented dispatch rule \
         (AVX2 if the CPU/OS allow it, else SSE2; no AVX-512 code) and the JSIMD_FORCE* variables",
    )?;
    info.set_item("jpeg", jpeg)?;

    // --- CUDA
    let cuda_d = PyDict::new(py);
    cuda_d.set_item("available", probe.is_available())?;
    cuda_d.set_item("driver_version", probe.driver_version_string())?;
    cuda_d.set_item(
        "reason",
        match &probe {
            CudaProbe::Unavailable { reason } => Some(reason.as_str()),
            CudaProbe::Available { .. } => None,
        },
    )?;
    let devices = PyList::empty(py);
    for dev in probe.devices() {
        let d = PyDict::new(py);
        d.set_item("ordinal", dev.ordinal)?;
        d.set_item("name", &dev.name)?;
        d.set_item("pci_bus_id", &dev.pci_bus_id)?;
        d.set_item("total_memory_bytes", dev.total_memory_bytes)?;
        d.set_item("compute_capability", dev.compute_capability)?;
        d.set_item("numa_node", dev.numa_node)?;
        devices.append(d)?;
    }
    cuda_d.set_item("devices", devices)?;
    info.set_item("cuda", cuda_d)?;

    // --- Worker binding: one engine per visible GPU, or one CPU engine.
    let engine_nodes: Vec<Option<u32>> = probe.devices().iter().map(|d| d.numa_node).collect();
    // The Loader's own plan functions (topology/binding.rs), so this reports what a Loader does.
    let numa = topology::numa_recommended(&topo, &engine_nodes);
    let binding = PyDict::new(py);
    binding.set_item("default_mode", config::PIN.name_of(config::default::PIN))?;
    binding.set_item("numa_recommended", numa)?;
    binding.set_item("engine_numa_nodes", engine_nodes.clone())?;
    binding.set_item(
        "reason",
        if numa {
            "several NUMA nodes and every GPU's node is known: pin='numa' runs the workers of GPU g on g's node"
        } else if topo.nodes_with_allowed_cpus() <= 1 {
            "one NUMA node with allowed CPUs: worker w pinned to allowed CPU w mod n"
        } else {
            "a GPU's NUMA node is unknown (or no GPU): worker w pinned to allowed CPU w mod n"
        },
    )?;
    // CPUs the workers of each engine use under pin='numa' (all allowed CPUs where the node is unknown).
    let engine_cpus: Vec<String> = if engine_nodes.is_empty() {
        vec![topology::format_cpu_list(&topology::engine_cpus(&topo, None))]
    } else {
        engine_nodes.iter().map(|&n| topology::format_cpu_list(&topology::engine_cpus(&topo, n))).collect()
    };
    binding.set_item("engine_cpus", engine_cpus)?;
    info.set_item("binding", binding)?;

    Ok(info)
}
