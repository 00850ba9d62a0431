//! CUDA probing: is there a driver, which devices, where do they sit on the PCI bus.
//!
//! Order of calls, each one guarded: `is_culib_present()` (dlopen test, no panic possible) →
//! `cuDriverGetVersion` (works before `cuInit`) → `cuInit(0)` → per device: name, total memory,
//! PCI bus id, compute capability. Any error or cudarc panic turns into
//! [`CudaProbe::Unavailable`] with the reason; nothing here panics or aborts.
//!
//! Side effect: a successful probe initializes the driver in this process (`cuInit`). That is what
//! every CUDA user does first, but it means a process that forks afterwards cannot use CUDA in the
//! child (a driver rule, not ours).

use std::ffi::{CStr, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use cudarc::driver::{DriverError, result, sys};

use crate::topology;

/// One CUDA device as the driver reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaDevice {
    /// Driver ordinal (after `CUDA_VISIBLE_DEVICES` remapping), as used by torch (`cuda:N`).
    pub ordinal: u32,
    /// Marketing name, e.g. `"NVIDIA H200"`.
    pub name: String,
    /// PCI address in sysfs form, e.g. `"0000:00:06.0"` (empty if the driver did not say).
    pub pci_bus_id: String,
    /// Total device memory in bytes.
    pub total_memory_bytes: u64,
    /// Compute capability (major, minor), e.g. (9, 0) for Hopper.
    pub compute_capability: (u32, u32),
    /// NUMA node of the device (see [`topology::gpu_numa_node`]); `None` when unknown (`-1`).
    pub numa_node: Option<u32>,
}

/// Result of [`probe()`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudaProbe {
    /// No usable CUDA: no driver library, driver too old for the bindings, `cuInit` failed, or
    /// no device visible. `reason` says which, in words fit for a user.
    Unavailable {
        /// Why CUDA cannot be used here.
        reason: String,
    },
    /// The driver works and at least one device is visible.
    Available {
        /// `cuDriverGetVersion`: 1000·major + 10·minor, e.g. 13000 for CUDA 13.0.
        driver_version: u32,
        /// Visible devices in ordinal order; never empty.
        devices: Vec<CudaDevice>,
    },
}

impl CudaProbe {
    /// Whether at least one device is usable.
    pub fn is_available(&self) -> bool {
        matches!(self, CudaProbe::Available { .. })
    }

    /// The visible devices (empty when unavailable).
    pub fn devices(&self) -> &[CudaDevice] {
        match self {
            CudaProbe::Available { devices, .. } => devices,
            CudaProbe::Unavailable { .. } => &[],
        }
    }

    /// Driver version as `"major.minor"` (e.g. `"13.0"`), if known.
    pub fn driver_version_string(&self) -> Option<String> {
        match self {
            CudaProbe::Available { driver_version, .. } => {
                Some(format!("{}.{}", driver_version / 1000, (driver_version % 1000) / 10))
            }
            CudaProbe::Unavailable { .. } => None,
        }
    }
}

/// Whether the CUDA driver library can be loaded. Safe to call anywhere, never panics; does not
/// initialize the driver.
pub fn driver_present() -> bool {
    // SAFETY: is_culib_present only tries `dlopen` on the candidate names (and drops the handle);
    // it dereferences nothing and has no preconditions. Loading libcuda runs its initializers,
    // which is the intended effect of probing for it.
    catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
}

/// Probes the CUDA driver and devices once per process (later calls return the cached result:
/// the visible device set cannot change after `cuInit`). Never panics.
pub fn probe() -> CudaProbe {
    static PROBE: OnceLock<CudaProbe> = OnceLock::new();
    PROBE.get_or_init(probe_uncached).clone()
}

fn probe_uncached() -> CudaProbe {
    if !driver_present() {
        return CudaProbe::Unavailable {
            reason: "the CUDA driver library (libcuda.so.1) was not found: no NVIDIA driver on this \
                     machine, or it is not on the loader path"
                .to_owned(),
        };
    }
    match catch_unwind(AssertUnwindSafe(probe_driver)) {
        Ok(Ok(found)) => found,
        Ok(Err(reason)) => CudaProbe::Unavailable { reason },
        Err(panic) => CudaProbe::Unavailable {
            reason: format!(
                "the CUDA driver is present but could not be used (the driver may be older than \
                 CUDA 13.0, which these bindings need): {}",
                panic_message(&*panic)
            ),
        },
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

fn describe(call: &str, e: DriverError) -> String {
    format!("{call} failed: {e}")
}

/// The guarded part: returns `Err(reason)` for driver errors; may panic inside cudarc (caught by
/// the caller).
fn probe_driver() -> Result<CudaProbe, String> {
    let mut version: c_int = 0;
    // SAFETY: `version` is a valid, writable c_int for the duration of the call;
    // cuDriverGetVersion may be called before cuInit.
    unsafe { sys::cuDriverGetVersion(&mut version) }.result().map_err(|e| describe("cuDriverGetVersion", e))?;
    let driver_version = u32::try_from(version).unwrap_or(0);

    result::init().map_err(|e| match e.0 {
        sys::CUresult::CUDA_ERROR_NO_DEVICE => format!(
            "the CUDA driver {}.{} is installed but no GPU is visible (cuInit: \
             CUDA_ERROR_NO_DEVICE; check CUDA_VISIBLE_DEVICES)",
            driver_version / 1000,
            (driver_version % 1000) / 10
        ),
        _ => describe("cuInit", e),
    })?;
    let count = result::device::get_count().map_err(|e| describe("cuDeviceGetCount", e))?;
    if count <= 0 {
        return Err("the CUDA driver reports 0 devices".to_owned());
    }

    let mut devices = Vec::with_capacity(count as usize);
    for ordinal in 0..count {
        let dev = result::device::get(ordinal).map_err(|e| describe("cuDeviceGet", e))?;
        let name = result::device::get_name(dev).map_err(|e| describe("cuDeviceGetName", e))?;
        // SAFETY: `dev` was just returned by cuDeviceGet for a valid ordinal.
        let total = unsafe { result::device::total_mem(dev) }.map_err(|e| describe("cuDeviceTotalMem", e))?;
        let attr = |a: sys::CUdevice_attribute| {
            // SAFETY: `dev` is a valid device handle from cuDeviceGet.
            unsafe { result::device::get_attribute(dev, a) }.map_or(0, |v| u32::try_from(v).unwrap_or(0))
        };
        let cc = (
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        );
        let pci_bus_id = pci_bus_id(dev).unwrap_or_default();
        let numa_node = if pci_bus_id.is_empty() { None } else { topology::gpu_numa_node(&pci_bus_id) };
        devices.push(CudaDevice {
            ordinal: ordinal as u32,
            name,
            pci_bus_id,
            total_memory_bytes: total as u64,
            compute_capability: cc,
            numa_node,
        });
    }
    Ok(CudaProbe::Available { driver_version, devices })
}

/// `cuDeviceGetPCIBusId`, normalized to sysfs form (the driver prints e.g. `"0000:00:06.0"` or
/// `"00000000:17:00.0"` depending on version).
fn pci_bus_id(dev: sys::CUdevice) -> Option<String> {
    let mut buf = [0 as c_char; 64];
    // SAFETY: `buf` is writable for its full length, which is what we pass; the driver writes a
    // NUL-terminated string of at most `len` bytes. `dev` is a valid device handle.
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, dev) }.result().ok()?;
    buf[buf.len() - 1] = 0; // belt and braces: always terminated
    // SAFETY: `buf` is NUL-terminated (forced above) and outlives the borrow.
    let raw = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
    topology::normalize_pci_bus_id(&raw).or(Some(raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_never_panics_and_is_consistent() {
        let p = probe();
        match &p {
            CudaProbe::Unavailable { reason } => {
                assert!(!reason.is_empty());
                assert!(p.devices().is_empty());
                assert!(p.driver_version_string().is_none());
            }
            CudaProbe::Available { devices, driver_version } => {
                assert!(!devices.is_empty());
                assert!(*driver_version > 0);
                for (i, d) in devices.iter().enumerate() {
                    assert_eq!(d.ordinal as usize, i);
                    assert!(d.total_memory_bytes > 0);
                }
            }
        }
        // Cached: same answer, no second cuInit.
        assert_eq!(probe(), p);
        assert_eq!(driver_present(), !matches!(&p, CudaProbe::Unavailable { reason } if reason.contains("not found")));
    }

    #[test]
    fn version_string_formats_major_minor() {
        let p = CudaProbe::Available { driver_version: 13000, devices: vec![] };
        assert_eq!(p.driver_version_string().as_deref(), Some("13.0"));
        let p = CudaProbe::Available { driver_version: 12090, devices: vec![] };
        assert_eq!(p.driver_version_string().as_deref(), Some("12.9"));
    }
}
