//! Topology from Linux sysfs: `/sys/devices/system/node/node<N>/cpulist` for nodes,
//! `/sys/bus/pci/devices/<id>/numa_node` for device locality. Parameterized by the sysfs root so
//! tests run on a fake tree.

use std::path::Path;

use super::{NumaNode, PciBusId, Topology, parse_cpu_list};

/// Where sysfs is mounted.
pub(super) const SYSFS_ROOT: &str = "/sys";

/// Builds a topology from `sysfs_root` and the affinity mask `allowed` (empty = unknown). Never
/// fails: without readable node information the result is one node with all allowed CPUs.
pub(super) fn detect(sysfs_root: &Path, allowed: Vec<usize>) -> Topology {
    let allowed = if allowed.is_empty() { online_cpus(sysfs_root).unwrap_or_default() } else { allowed };
    match numa_nodes(sysfs_root) {
        Some(nodes) if !nodes.is_empty() => {
            Topology { numa_nodes: nodes, allowed_cpus: allowed, source: "sysfs" }.normalized()
        }
        _ => Topology::single_node(fallback_cpus(allowed), "fallback"),
    }
}

/// Last resort when neither the affinity mask nor sysfs answers.
fn fallback_cpus(allowed: Vec<usize>) -> Vec<usize> {
    if !allowed.is_empty() {
        return allowed;
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0..n).collect()
}

/// All NUMA nodes with their CPU lists; `None` when the node directory is missing (kernel built
/// without NUMA, or a sandbox that hides it).
fn numa_nodes(sysfs_root: &Path) -> Option<Vec<NumaNode>> {
    let dir = sysfs_root.join("devices/system/node");
    let mut nodes = Vec::new();
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name();
        let Some(idx) = name.to_str().and_then(|n| n.strip_prefix("node")).and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let cpus = std::fs::read_to_string(entry.path().join("cpulist"))
            .ok()
            .and_then(|s| parse_cpu_list(&s))
            .unwrap_or_default();
        nodes.push(NumaNode { os_index: idx, cpus });
    }
    nodes.sort_by_key(|n| n.os_index);
    Some(nodes)
}

fn online_cpus(sysfs_root: &Path) -> Option<Vec<usize>> {
    let s = std::fs::read_to_string(sysfs_root.join("devices/system/cpu/online")).ok()?;
    parse_cpu_list(&s).filter(|v| !v.is_empty())
}

/// `numa_node` of a PCI device; `None` for `-1`, a missing device or an unreadable file.
pub(super) fn pci_numa_node(sysfs_root: &Path, id: &PciBusId) -> Option<u32> {
    let path = sysfs_root.join("bus/pci/devices").join(id.to_sysfs_string()).join("numa_node");
    let text = std::fs::read_to_string(path).ok()?;
    let v: i64 = text.trim().parse().ok()?;
    u32::try_from(v).ok()
}
