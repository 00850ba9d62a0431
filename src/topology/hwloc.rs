//! Topology from hwloc (hwlocality over a statically linked hwloc 2.9, see
//! scripts/build-hwloc.sh). Every entry point returns `None` when hwloc cannot answer, and the
//! caller then falls back to sysfs; hwlocality panics (it asserts on "impossible" hwloc output)
//! are contained with `catch_unwind` so an odd sandbox (gVisor) degrades instead of aborting.

use std::borrow::Borrow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use hwlocality::Topology as HwTopology;
use hwlocality::bitmap::Bitmap;
use hwlocality::object::TopologyObject;
use hwlocality::object::attributes::PCIDomain;
use hwlocality::object::types::ObjectType;
use hwlocality::topology::builder::TypeFilter;

use super::{NumaNode, PciBusId, Topology, intersect_sorted};

/// Upper bound on set bits we read from a bitmap (hwloc bitmaps can be infinite).
const MAX_IDS: usize = 1 << 16;

fn set_to_vec<S: Borrow<Bitmap>>(set: &S) -> Vec<usize> {
    let set: &Bitmap = set.borrow();
    if set.weight().is_none() {
        return Vec::new(); // infinite set: meaningless as a CPU list
    }
    set.iter_set().take(MAX_IDS).map(usize::from).collect()
}

fn object_cpus(obj: &TopologyObject) -> Vec<usize> {
    obj.cpuset().map(|cs| set_to_vec(&*cs)).unwrap_or_default()
}

/// Nodes and allowed CPUs from hwloc, intersected with the affinity mask `allowed` (empty =
/// unknown).
pub(super) fn detect(allowed: &[usize]) -> Option<Topology> {
    catch_unwind(AssertUnwindSafe(|| detect_inner(allowed))).ok().flatten()
}

fn detect_inner(allowed: &[usize]) -> Option<Topology> {
    let topo = HwTopology::new().ok()?;
    let mut nodes = Vec::new();
    for obj in topo.objects_with_type(ObjectType::NUMANode) {
        let os_index = u32::try_from(obj.os_index()?).ok()?;
        nodes.push(NumaNode { os_index, cpus: object_cpus(obj) });
    }
    if nodes.is_empty() {
        return None;
    }
    // hwloc's allowed set reflects the cgroup cpuset; the affinity mask (taskset, a launcher's
    // binding) can be narrower. Use both; if they disagree completely trust the affinity mask,
    // since that is what sched_setaffinity will accept.
    let hw_allowed = set_to_vec(&*topo.allowed_cpuset());
    let allowed_cpus = match (allowed.is_empty(), hw_allowed.is_empty()) {
        (true, _) => hw_allowed,
        (false, true) => allowed.to_vec(),
        (false, false) => {
            let both = intersect_sorted(allowed, &hw_allowed);
            if both.is_empty() { allowed.to_vec() } else { both }
        }
    };
    let t = Topology { numa_nodes: nodes, allowed_cpus, source: "hwloc" }.normalized();
    (t.source == "hwloc").then_some(t)
}

/// The topology with I/O objects (PCI devices), loaded once: it walks all of /sys/bus/pci, which
/// takes tens of milliseconds.
fn io_topology() -> Option<&'static HwTopology> {
    static IO_TOPOLOGY: OnceLock<Option<HwTopology>> = OnceLock::new();
    IO_TOPOLOGY
        .get_or_init(|| {
            catch_unwind(|| HwTopology::builder().with_io_type_filter(TypeFilter::KeepImportant).ok()?.build().ok())
                .ok()
                .flatten()
        })
        .as_ref()
}

/// The NUMA node hwloc places PCI device `id` under, when that placement is specific: the device's
/// first non-I/O ancestor covers exactly one node and not the whole machine. `None` = no specific
/// answer from hwloc (device not found, attached at machine level, several nodes); the caller then
/// asks sysfs, which also keeps the sysfs semantics (`numa_node == -1` → unknown) on single-node
/// machines.
pub(super) fn pci_numa_node(id: &PciBusId) -> Option<u32> {
    catch_unwind(|| {
        let topo = io_topology()?;
        let domain = PCIDomain::try_from(id.domain).ok()?;
        let dev = topo.pci_device_by_bus_id(domain, id.bus, id.device, id.function)?;
        let ancestor = dev.first_non_io_ancestor()?;
        let nodes = ancestor.nodeset()?;
        let all_nodes = topo.nodeset();
        if nodes.weight() != Some(1) || *nodes == *all_nodes {
            return None;
        }
        nodes.first_set().and_then(|n| u32::try_from(usize::from(n)).ok())
    })
    .ok()
    .flatten()
}
