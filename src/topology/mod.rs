//! topology — which CPUs this process may use, how they group into NUMA nodes, which node a GPU
//! hangs off, and (binding.rs) the binding plans built from that.
//!
//! Pipeline position: consulted once, before the worker pool starts (worker pinning) and before
//! staging memory is allocated (NUMA-local slabs). Nothing here is on the per-sample path.
//!
//! ```text
//! detect() ──► Topology { numa_nodes, allowed_cpus, source }
//!                 │                       gpu_numa_node("0000:17:00.0") ──► Option<node>
//!                 ▼                                   │
//!   binding::worker_plan(&topo, mode, workers, &engine_nodes) ◄┘  (pure: unit-tested on synthetic values)
//!                 │
//!                 ▼
//!   pin_current_thread(&cpus) / prefer_memory_node(node)   (the only syscalls that change state)
//! ```
//!
//! Sources, best first: hwloc (cargo feature `hwloc`, statically linked, see scripts/build-hwloc.sh),
//! then Linux sysfs (`/sys/devices/system/node`, `/sys/bus/pci/devices/*/numa_node`) plus
//! `sched_getaffinity`. Detection never fails: on any error the result is one node holding every
//! allowed CPU (`source == "fallback"`). A GPU whose NUMA node is `-1` (seen on the GPU test box,
//! a single-node VM) or unknown yields `None`, and the plans then fall back to all allowed CPUs.
//!
//! Invariants:
//! - detected `allowed_cpus` are sorted, deduplicated, and never empty (a rank's `cpus` share replaces
//!   them in the order given: `Topology::with_share`);
//! - every plan only ever names CPUs in `allowed_cpus` (pinning outside the affinity mask fails
//!   with EINVAL, and a cgroup-restricted container must not be pinned outside its cpuset);
//! - node CPU lists are what the OS reports for the node (not intersected with the affinity
//!   mask); plans intersect.

#![allow(unsafe_code)]

use std::fmt::Write as _;
use std::path::Path;

pub mod binding;
#[cfg(feature = "hwloc")]
mod hwloc;
mod sysfs;

pub use binding::{PinMode, engine_cpus, loader_topology, numa_recommended, staging_placement, worker_plan};

/// One NUMA node: its OS index and the CPUs the OS lists for it (possibly none, e.g. a
/// memory-only CXL/HBM node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaNode {
    /// OS (kernel) index of the node, as in `/sys/devices/system/node/node<N>`.
    pub os_index: u32,
    /// Logical CPU ids of the node, sorted ascending.
    pub cpus: Vec<usize>,
}

/// CPUs and NUMA nodes of this machine as seen by this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// NUMA nodes sorted by `os_index`; never empty.
    pub numa_nodes: Vec<NumaNode>,
    /// CPUs this process may run on (affinity mask ∩ online CPUs), sorted; never empty when detected. A rank's
    /// `cpus` share replaces it, in the user's order ([`Topology::with_share`]).
    pub allowed_cpus: Vec<usize>,
    /// Where the information came from: `"hwloc"`, `"sysfs"` or `"fallback"` (detection failed,
    /// one node with all allowed CPUs).
    pub source: &'static str,
}

impl Topology {
    /// A single-node topology holding `allowed_cpus` (sorted and deduplicated here). Used as the
    /// fallback and handy for tests.
    pub fn single_node(allowed_cpus: Vec<usize>, source: &'static str) -> Self {
        let mut cpus = allowed_cpus;
        cpus.sort_unstable();
        cpus.dedup();
        if cpus.is_empty() {
            cpus.push(0);
        }
        Topology { numa_nodes: vec![NumaNode { os_index: 0, cpus: cpus.clone() }], allowed_cpus: cpus, source }
    }

    /// The node with OS index `os_index`, if present.
    pub fn node(&self, os_index: u32) -> Option<&NumaNode> {
        self.numa_nodes.iter().find(|n| n.os_index == os_index)
    }

    /// The NUMA node that lists `cpu`, if any.
    pub fn node_of_cpu(&self, cpu: usize) -> Option<u32> {
        self.numa_nodes.iter().find(|n| n.cpus.binary_search(&cpu).is_ok()).map(|n| n.os_index)
    }

    /// The allowed CPUs of node `os_index` (node CPUs ∩ `allowed_cpus`); empty when the node
    /// is unknown, memory-only, or entirely outside the affinity mask.
    pub fn allowed_cpus_of_node(&self, os_index: u32) -> Vec<usize> {
        self.node(os_index).map(|n| intersect_sorted(&n.cpus, &self.allowed_cpus)).unwrap_or_default()
    }

    /// Number of nodes that have at least one allowed CPU (what matters for binding).
    pub fn nodes_with_allowed_cpus(&self) -> usize {
        self.numa_nodes.iter().filter(|n| !intersect_sorted(&n.cpus, &self.allowed_cpus).is_empty()).count()
    }

    /// Restores the invariants after construction from raw data: sorted/deduplicated lists,
    /// nodes sorted by index, a non-empty allowed set and at least one node.
    fn normalized(mut self) -> Self {
        self.allowed_cpus.sort_unstable();
        self.allowed_cpus.dedup();
        for n in &mut self.numa_nodes {
            n.cpus.sort_unstable();
            n.cpus.dedup();
        }
        self.numa_nodes.sort_by_key(|n| n.os_index);
        self.numa_nodes.dedup_by_key(|n| n.os_index);
        if self.allowed_cpus.is_empty() {
            // No affinity information at all: trust the nodes, else CPU 0.
            self.allowed_cpus = self.numa_nodes.iter().flat_map(|n| n.cpus.iter().copied()).collect();
            self.allowed_cpus.sort_unstable();
            self.allowed_cpus.dedup();
        }
        if self.numa_nodes.is_empty() || self.allowed_cpus.is_empty() {
            return Topology::single_node(self.allowed_cpus, "fallback");
        }
        self
    }
}

/// Detects the machine topology. Never fails (see the module docs for the fallback order).
///
/// The affinity part is the *process's* mask (`sched_getaffinity(getpid())`, i.e. the main
/// thread's), so a worker that already pinned itself does not shrink what later plans see.
pub fn detect() -> Topology {
    let allowed = current_affinity().unwrap_or_default();
    #[cfg(feature = "hwloc")]
    {
        if let Some(t) = hwloc::detect(&allowed) {
            return t;
        }
    }
    sysfs::detect(Path::new(sysfs::SYSFS_ROOT), allowed)
}

/// NUMA node of the PCI device `pci_bus_id` (e.g. a GPU's `"0000:17:00.0"`; an 8-digit domain
/// as printed by nvidia-smi and upper-case hex are accepted). `None` when the id does not parse,
/// the device is not visible, or the platform reports `-1` / no locality.
pub fn gpu_numa_node(pci_bus_id: &str) -> Option<u32> {
    let id = PciBusId::parse(pci_bus_id)?;
    #[cfg(feature = "hwloc")]
    {
        if let Some(node) = hwloc::pci_numa_node(&id) {
            return Some(node);
        }
    }
    sysfs::pci_numa_node(Path::new(sysfs::SYSFS_ROOT), &id)
}

/// Pins the calling thread to `cpus` (any subset of the allowed CPUs). Returns `false` (and
/// changes nothing) when `cpus` is empty or the kernel refuses, e.g. a CPU outside the
/// cgroup/affinity mask.
pub fn pin_current_thread(cpus: &[usize]) -> bool {
    let Some(mask) = CpuMask::from_cpus(cpus) else {
        return false;
    };
    // SAFETY: `mask.words` is a live, initialized buffer of exactly `mask.size_bytes()` bytes;
    // the kernel only reads it. pid 0 = the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, mask.size_bytes(), mask.words.as_ptr().cast::<libc::cpu_set_t>()) };
    rc == 0
}

/// Makes the kernel prefer NUMA node `node` for the calling thread's future page allocations
/// (`set_mempolicy(MPOL_PREFERRED)`: falls back to other nodes rather than failing when the node
/// is full). Call it on the thread that allocates and first touches staging memory, before the
/// allocation. Returns `false` if the kernel refuses (no NUMA support, seccomp/gVisor, bad node).
pub fn prefer_memory_node(node: u32) -> bool {
    const MPOL_PREFERRED: libc::c_int = 1;
    let Some(mask) = CpuMask::from_cpus(&[node as usize]) else {
        return false;
    };
    // maxnode counts bits; the kernel reads maxnode-1 bits (historic off-by-one), so pass one more.
    let maxnode = (mask.words.len() * u64::BITS as usize + 1) as libc::c_ulong;
    // SAFETY: the nodemask pointer refers to `mask.words`, valid for `maxnode - 1` bits, and
    // set_mempolicy only reads it; it affects only the calling thread's policy.
    let rc = unsafe { libc::syscall(libc::SYS_set_mempolicy, MPOL_PREFERRED, mask.words.as_ptr(), maxnode) };
    rc == 0
}

/// Resets the calling thread's memory policy to the system default (local allocation).
pub fn reset_memory_policy() -> bool {
    const MPOL_DEFAULT: libc::c_int = 0;
    // SAFETY: MPOL_DEFAULT takes no nodemask (NULL, maxnode 0); affects only this thread.
    let rc = unsafe {
        libc::syscall(libc::SYS_set_mempolicy, MPOL_DEFAULT, std::ptr::null::<libc::c_ulong>(), 0 as libc::c_ulong)
    };
    rc == 0
}

/// The affinity mask of this process (main thread), sorted. `None` if the kernel refuses.
pub fn current_affinity() -> Option<Vec<usize>> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    affinity_of(pid)
}

/// The affinity mask of the calling thread, sorted. `None` if the kernel refuses.
pub fn current_thread_affinity() -> Option<Vec<usize>> {
    affinity_of(0)
}

fn affinity_of(pid: libc::pid_t) -> Option<Vec<usize>> {
    // Start at glibc's 1024-bit cpu_set_t and grow: the kernel answers EINVAL when the buffer is
    // smaller than its nr_cpu_ids, which happens on very large machines.
    let mut words = 1024 / u64::BITS as usize;
    while words <= 1 << 16 {
        let mut buf = vec![0u64; words];
        let size = words * std::mem::size_of::<u64>();
        // SAFETY: `buf` is a live, writable buffer of exactly `size` bytes; the raw syscall
        // writes at most `size` bytes and returns how many it wrote.
        let rc = unsafe { libc::syscall(libc::SYS_sched_getaffinity, pid, size, buf.as_mut_ptr()) };
        if rc > 0 {
            let cpus = mask_to_cpus(&buf);
            return (!cpus.is_empty()).then_some(cpus);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return None;
        }
        words *= 2;
    }
    None
}

fn mask_to_cpus(words: &[u64]) -> Vec<usize> {
    let mut cpus = Vec::new();
    for (i, &w) in words.iter().enumerate() {
        let mut w = w;
        while w != 0 {
            let bit = w.trailing_zeros() as usize;
            cpus.push(i * u64::BITS as usize + bit);
            w &= w - 1;
        }
    }
    cpus
}

/// A bit mask sized for the largest CPU (or node) id, for the affinity/mempolicy syscalls.
struct CpuMask {
    words: Vec<u64>,
}

impl CpuMask {
    /// `None` for an empty set or absurd ids (> 1<<20), which no kernel accepts.
    fn from_cpus(cpus: &[usize]) -> Option<Self> {
        let max = *cpus.iter().max()?;
        if max > 1 << 20 {
            return None;
        }
        // At least 1024 bits: some kernels reject masks shorter than their cpumask size.
        let nwords = (max / u64::BITS as usize + 1).max(1024 / u64::BITS as usize);
        let mut words = vec![0u64; nwords];
        for &c in cpus {
            words[c / u64::BITS as usize] |= 1 << (c % u64::BITS as usize);
        }
        Some(CpuMask { words })
    }

    fn size_bytes(&self) -> usize {
        self.words.len() * std::mem::size_of::<u64>()
    }
}

// ---------------------------------------------------------------------------------------------
// PCI bus ids
// ---------------------------------------------------------------------------------------------

/// A parsed PCI address (domain:bus:device.function).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciBusId {
    /// PCI domain (segment); 16 bits on most systems, up to 32 with VMD.
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number (0..32).
    pub device: u8,
    /// Function number (0..8).
    pub function: u8,
}

impl PciBusId {
    /// Parses `"dddd:bb:dd.f"`, `"dddddddd:bb:dd.f"` (nvidia-smi) or `"bb:dd.f"` (domain 0);
    /// hex digits in any case, surrounding whitespace ignored.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        let (head, function) = s.rsplit_once('.')?;
        let mut parts: Vec<&str> = head.split(':').collect();
        let device = parts.pop()?;
        let bus = parts.pop()?;
        let domain = match parts.as_slice() {
            [] => "0",
            [d] => d,
            _ => return None,
        };
        let hex_ok =
            |t: &str, max_len: usize| !t.is_empty() && t.len() <= max_len && t.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex_ok(domain, 8) || !hex_ok(bus, 2) || !hex_ok(device, 2) || !hex_ok(function, 1) {
            return None;
        }
        let id = PciBusId {
            domain: u32::from_str_radix(domain, 16).ok()?,
            bus: u8::from_str_radix(bus, 16).ok()?,
            device: u8::from_str_radix(device, 16).ok()?,
            function: u8::from_str_radix(function, 16).ok()?,
        };
        (id.device < 32 && id.function < 8).then_some(id)
    }

    /// The canonical sysfs form, `"0000:17:00.0"`.
    pub fn to_sysfs_string(&self) -> String {
        format!("{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }
}

/// Canonical form of a PCI bus id (`"0000:17:00.0"`), or `None` if it does not parse.
pub fn normalize_pci_bus_id(s: &str) -> Option<String> {
    PciBusId::parse(s).map(|id| id.to_sysfs_string())
}

// ---------------------------------------------------------------------------------------------
// CPU lists ("0-3,8,10-11")
// ---------------------------------------------------------------------------------------------

/// Parses a kernel CPU list (`"0-3,8,10-11"`, also `"0-7:2"` strides); `None` on malformed
/// input. Empty input is an empty list. The result is sorted and deduplicated.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (range, stride) = match part.split_once(':') {
            Some((r, st)) => (r, st.parse::<usize>().ok().filter(|&x| x > 0)?),
            None => (part, 1),
        };
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (a.trim().parse::<usize>().ok()?, b.trim().parse::<usize>().ok()?),
            None => {
                let v = range.parse::<usize>().ok()?;
                (v, v)
            }
        };
        if hi < lo || hi - lo > 1 << 20 {
            return None;
        }
        out.extend((lo..=hi).step_by(stride));
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Formats a sorted CPU list compactly (`[0,1,2,3,8]` → `"0-3,8"`).
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if end == start {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

fn intersect_sorted(a: &[usize], b: &[usize]) -> Vec<usize> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

/// Memory this process may use, in bytes: `MemTotal` of `/proc/meminfo`, lowered by a cgroup v2 `memory.max`
/// limit when one is set. None when neither can be read (then no construction-time memory check is made).
pub fn usable_memory_bytes() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| meminfo_total_bytes(&m));
    let limit = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok().and_then(|s| s.trim().parse::<u64>().ok());
    match (total, limit) {
        (Some(t), Some(l)) => Some(t.min(l)),
        (t, l) => t.or(l),
    }
}

/// `MemTotal:  24576000 kB` → bytes.
fn meminfo_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

#[cfg(test)]
mod tests;
