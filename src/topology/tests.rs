//! Topology tests: parsing, sysfs on fake trees, and binding plans on synthetic machines.

use super::*;
use std::path::PathBuf;

fn node(os_index: u32, cpus: std::ops::Range<usize>) -> NumaNode {
    NumaNode { os_index, cpus: cpus.collect() }
}

/// Two sockets, 8 CPUs each, everything allowed.
fn two_socket() -> Topology {
    Topology { numa_nodes: vec![node(0, 0..8), node(1, 8..16)], allowed_cpus: (0..16).collect(), source: "sysfs" }
}

/// A fake sysfs tree under the system temp dir, removed on drop.
struct FakeSysfs {
    root: PathBuf,
}

impl FakeSysfs {
    fn new(tag: &str) -> Self {
        let root = std::env::temp_dir().join(format!(
            "trdata-topology-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        FakeSysfs { root }
    }

    fn write(&self, rel: &str, contents: &str) {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, contents).unwrap();
    }
}

impl Drop for FakeSysfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[test]
fn cpu_list_round_trip() {
    assert_eq!(parse_cpu_list("0-3,8,10-11\n"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
    assert_eq!(parse_cpu_list(""), Some(vec![]));
    assert_eq!(parse_cpu_list("\n"), Some(vec![]));
    assert_eq!(parse_cpu_list("5,1,1,3"), Some(vec![1, 3, 5]));
    assert_eq!(parse_cpu_list("0-7:2"), Some(vec![0, 2, 4, 6]));
    assert_eq!(parse_cpu_list("3-1"), None);
    assert_eq!(parse_cpu_list("a"), None);
    assert_eq!(parse_cpu_list("0-"), None);
    assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
    assert_eq!(format_cpu_list(&[]), "");
    assert_eq!(format_cpu_list(&[5]), "5");
    let cpus = vec![0, 2, 3, 4, 9, 63, 64, 65, 127];
    assert_eq!(parse_cpu_list(&format_cpu_list(&cpus)), Some(cpus));
}

#[test]
fn pci_bus_ids_normalize() {
    assert_eq!(normalize_pci_bus_id("0000:00:06.0").as_deref(), Some("0000:00:06.0"));
    assert_eq!(normalize_pci_bus_id("00000000:17:00.0").as_deref(), Some("0000:17:00.0"));
    assert_eq!(normalize_pci_bus_id("0000:AF:1F.7").as_deref(), Some("0000:af:1f.7"));
    assert_eq!(normalize_pci_bus_id("17:00.0").as_deref(), Some("0000:17:00.0"));
    assert_eq!(normalize_pci_bus_id(" 10000:01:00.0\n").as_deref(), Some("10000:01:00.0"));
    for bad in ["", "0000:17:00", "17.0", "0000:17:20.0", "0000:17:00.8", "0:0:0:0.0", "zz:00.0"] {
        assert_eq!(normalize_pci_bus_id(bad), None, "{bad:?}");
    }
}

#[test]
fn sysfs_two_nodes_with_restricted_affinity() {
    let fs = FakeSysfs::new("two");
    fs.write("devices/system/node/node0/cpulist", "0-3,8-11\n");
    fs.write("devices/system/node/node1/cpulist", "4-7,12-15\n");
    fs.write("devices/system/node/possible", "0-1\n"); // not a node dir: ignored
    let t = sysfs::detect(&fs.root, vec![2, 3, 4, 5]);
    assert_eq!(t.source, "sysfs");
    assert_eq!(t.allowed_cpus, vec![2, 3, 4, 5]);
    assert_eq!(t.numa_nodes.len(), 2);
    assert_eq!(t.numa_nodes[0].cpus, vec![0, 1, 2, 3, 8, 9, 10, 11]);
    assert_eq!(t.allowed_cpus_of_node(1), vec![4, 5]);
    assert_eq!(t.node_of_cpu(12), Some(1));
    assert_eq!(t.node_of_cpu(99), None);
}

#[test]
fn sysfs_memory_only_node_is_kept_but_never_planned() {
    let fs = FakeSysfs::new("cxl");
    fs.write("devices/system/node/node0/cpulist", "0-3\n");
    fs.write("devices/system/node/node2/cpulist", "\n"); // CXL memory expander
    let t = sysfs::detect(&fs.root, vec![0, 1, 2, 3]);
    assert_eq!(t.numa_nodes.iter().map(|n| n.os_index).collect::<Vec<_>>(), vec![0, 2]);
    assert_eq!(t.nodes_with_allowed_cpus(), 1);
    assert_eq!(engine_cpus(&t, Some(2)), vec![0, 1, 2, 3]);
}

#[test]
fn sysfs_missing_node_dir_falls_back_to_one_node() {
    let fs = FakeSysfs::new("none");
    let t = sysfs::detect(&fs.root, vec![1, 3]);
    assert_eq!(t.source, "fallback");
    assert_eq!(t.numa_nodes, vec![NumaNode { os_index: 0, cpus: vec![1, 3] }]);
    assert_eq!(t.allowed_cpus, vec![1, 3]);
}

#[test]
fn sysfs_unknown_affinity_uses_online_cpus() {
    let fs = FakeSysfs::new("online");
    fs.write("devices/system/node/node0/cpulist", "0-5\n");
    fs.write("devices/system/cpu/online", "0-5\n");
    let t = sysfs::detect(&fs.root, vec![]);
    assert_eq!(t.allowed_cpus, (0..6).collect::<Vec<_>>());
}

#[test]
fn sysfs_pci_numa_node() {
    let fs = FakeSysfs::new("pci");
    fs.write("bus/pci/devices/0000:17:00.0/numa_node", "1\n");
    fs.write("bus/pci/devices/0000:00:06.0/numa_node", "-1\n");
    let id = |s| PciBusId::parse(s).unwrap();
    assert_eq!(sysfs::pci_numa_node(&fs.root, &id("0000:17:00.0")), Some(1));
    assert_eq!(sysfs::pci_numa_node(&fs.root, &id("00000000:17:00.0")), Some(1));
    assert_eq!(sysfs::pci_numa_node(&fs.root, &id("0000:00:06.0")), None);
    assert_eq!(sysfs::pci_numa_node(&fs.root, &id("0000:99:00.0")), None);
}

#[test]
fn normalization_restores_invariants() {
    let t = Topology {
        numa_nodes: vec![node(1, 4..8), NumaNode { os_index: 0, cpus: vec![3, 1, 1, 2, 0] }],
        allowed_cpus: vec![7, 1, 1],
        source: "sysfs",
    }
    .normalized();
    assert_eq!(t.numa_nodes[0].os_index, 0);
    assert_eq!(t.numa_nodes[0].cpus, vec![0, 1, 2, 3]);
    assert_eq!(t.allowed_cpus, vec![1, 7]);
    let empty = Topology { numa_nodes: vec![], allowed_cpus: vec![], source: "sysfs" }.normalized();
    assert_eq!(empty.source, "fallback");
    assert!(!empty.allowed_cpus.is_empty());
    assert_eq!(Topology::single_node(vec![], "fallback").allowed_cpus, vec![0]);
}

#[test]
fn round_robin_wraps_over_allowed_cpus() {
    let mut t = two_socket();
    t.allowed_cpus = vec![1, 5, 9];
    let plan = worker_plan(&t, PinMode::RoundRobin, 7, &[]);
    assert_eq!(plan, [1, 5, 9, 1, 5, 9, 1].map(Some));
}

#[test]
fn none_mode_pins_nothing() {
    let plan = worker_plan(&two_socket(), PinMode::None, 3, &[Some(0)]);
    assert_eq!(plan, vec![None; 3]);
}

#[test]
fn numa_mode_follows_engine_of_worker() {
    let t = two_socket();
    // engines: GPU0 on node 1, GPU1 on node 0; worker w serves engine w mod 2, one CPU each,
    // round-robin over the node's CPUs.
    let plan = worker_plan(&t, PinMode::Numa, 6, &[Some(1), Some(0)]);
    assert_eq!(plan, [8, 0, 9, 1, 10, 2].map(Some));
    // Wraps inside the node.
    let plan = worker_plan(&t, PinMode::Numa, 10, &[Some(0)]);
    assert_eq!(plan[8], Some(0));
    assert_eq!(plan[9], Some(1));
}

#[test]
fn numa_mode_engines_sharing_a_node_interleave() {
    let t = two_socket();
    // Engines 0 and 2 on node 0, engine 1 on node 1: 0 and 2 take alternate CPUs of node 0.
    let plan = worker_plan(&t, PinMode::Numa, 6, &[Some(0), Some(1), Some(0)]);
    assert_eq!(plan, [0, 8, 1, 2, 9, 3].map(Some));
}

#[test]
fn numa_mode_unknown_or_foreign_node_falls_back_to_round_robin() {
    let mut t = two_socket();
    assert_eq!(worker_plan(&t, PinMode::Numa, 3, &[None]), [0, 1, 2].map(Some));
    assert_eq!(worker_plan(&t, PinMode::Numa, 2, &[Some(7)]), [0, 1].map(Some));
    // CPU-only consumer (no engines): one implicit engine with unknown node.
    assert_eq!(worker_plan(&t, PinMode::Numa, 1, &[]), [Some(0)]);
    // Node 1 entirely outside the affinity mask (e.g. `taskset -c 0-3`).
    t.allowed_cpus = vec![0, 1, 2, 3];
    assert_eq!(engine_cpus(&t, Some(1)), vec![0, 1, 2, 3]);
    assert_eq!(engine_cpus(&t, Some(0)), vec![0, 1, 2, 3]);
    assert_eq!(worker_plan(&t, PinMode::Numa, 5, &[Some(1)]), [0, 1, 2, 3, 0].map(Some));
}

#[test]
fn plans_only_name_allowed_cpus() {
    let mut t = two_socket();
    t.allowed_cpus = vec![0, 2, 9, 15];
    for mode in [PinMode::None, PinMode::RoundRobin, PinMode::Numa] {
        for workers in 0..20 {
            for engines in [&[][..], &[Some(0)], &[Some(1), None], &[Some(0), Some(1), Some(5)]] {
                let plan = worker_plan(&t, mode, workers, engines);
                assert_eq!(plan.len(), workers);
                for cpu in plan {
                    assert_eq!(cpu.is_some(), mode != PinMode::None, "{mode:?}");
                    assert!(cpu.is_none_or(|c| t.allowed_cpus.contains(&c)), "{mode:?} {cpu:?}");
                }
            }
        }
    }
}

#[test]
fn numa_is_recommended_only_when_it_matters() {
    let t = two_socket();
    assert!(numa_recommended(&t, &[Some(0), Some(1)]));
    assert!(!numa_recommended(&t, &[Some(0), None]));
    assert!(!numa_recommended(&t, &[]));
    let one = Topology::single_node((0..16).collect(), "sysfs");
    assert!(!numa_recommended(&one, &[Some(0)]));
    let mut half = two_socket();
    half.allowed_cpus = (0..8).collect();
    assert!(!numa_recommended(&half, &[Some(0)]));
}

#[test]
fn mask_bits_round_trip() {
    let m = CpuMask::from_cpus(&[0, 63, 64, 1500]).unwrap();
    assert_eq!(mask_to_cpus(&m.words), vec![0, 63, 64, 1500]);
    assert!(m.size_bytes() >= 1024 / 8);
    assert!(CpuMask::from_cpus(&[]).is_none());
}

#[test]
fn detect_on_this_machine_is_consistent() {
    let t = detect();
    assert!(!t.numa_nodes.is_empty());
    assert!(!t.allowed_cpus.is_empty());
    assert!(["hwloc", "sysfs", "fallback"].contains(&t.source));
    assert!(t.allowed_cpus.windows(2).all(|w| w[0] < w[1]));
    if let Some(affinity) = current_affinity() {
        assert!(t.allowed_cpus.iter().all(|c| affinity.contains(c)));
    }
    // Unknown devices never panic and never invent a node.
    assert_eq!(gpu_numa_node("ffff:ff:1f.7"), None);
    assert_eq!(gpu_numa_node("not a bus id"), None);
}

#[test]
fn pinning_a_thread_narrows_its_affinity_only() {
    let before = current_affinity().expect("affinity readable");
    let target = before[before.len() - 1];
    let seen = std::thread::spawn(move || {
        assert!(pin_current_thread(&[target]));
        assert!(!pin_current_thread(&[]));
        current_thread_affinity()
    })
    .join()
    .unwrap();
    assert_eq!(seen, Some(vec![target]));
    // The process mask (main thread) is unchanged, so later plans still see every CPU.
    assert_eq!(current_affinity(), Some(before));
}

#[test]
fn memory_policy_calls_do_not_crash() {
    std::thread::spawn(|| {
        // May legitimately fail (no NUMA in the kernel, seccomp); must not crash.
        let _ = prefer_memory_node(0);
        let _ = reset_memory_policy();
        assert!(!prefer_memory_node(u32::MAX));
    })
    .join()
    .unwrap();
}

/// With the `hwloc` feature the library must actually be usable (statically linked, working
/// discovery), and agree with sysfs on the node structure of this machine.
#[cfg(feature = "hwloc")]
#[test]
fn hwloc_detects_and_agrees_with_sysfs() {
    let affinity = current_affinity().unwrap_or_default();
    let hw = hwloc::detect(&affinity).expect("hwloc topology loads");
    assert_eq!(hw.source, "hwloc");
    let fs = sysfs::detect(std::path::Path::new(sysfs::SYSFS_ROOT), affinity);
    if fs.source == "sysfs" {
        assert_eq!(hw.numa_nodes, fs.numa_nodes);
        assert_eq!(hw.allowed_cpus, fs.allowed_cpus);
    }
    // Every PCI device gets the same answer through the public entry point as sysfs gives.
    if let Ok(entries) = std::fs::read_dir("/sys/bus/pci/devices") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = PciBusId::parse(&name).expect("sysfs names parse");
            let via_sysfs = sysfs::pci_numa_node(std::path::Path::new(sysfs::SYSFS_ROOT), &id);
            if via_sysfs.is_some() {
                assert_eq!(gpu_numa_node(&name), via_sysfs, "{name}");
            }
        }
    }
}

#[test]
fn meminfo_total_is_parsed_in_bytes_and_garbage_is_none() {
    let m = "MemFree:         1000 kB\nMemTotal:       24576000 kB\nBuffers: 1 kB\n";
    assert_eq!(super::meminfo_total_bytes(m), Some(24_576_000 * 1024));
    assert_eq!(super::meminfo_total_bytes("MemTotal: lots kB"), None);
    assert_eq!(super::meminfo_total_bytes("MemTotal: 99999999999999999999 kB"), None);
    assert_eq!(super::meminfo_total_bytes(""), None);
    // On Linux the real probe answers, and it is at least a few MiB.
    assert!(super::usable_memory_bytes().is_some_and(|b| b > 1 << 22));
}
