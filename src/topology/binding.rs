//! topology/binding — which CPU each loader thread runs on (docs/design/protocols.md "Topology"). One enum
//! ([`PinMode`]), one plan ([`worker_plan`], with [`staging_placement`] for the transfer threads) and one pin
//! function ([`pin_current_thread`](super::pin_current_thread)); the Loader's pool and `trdata info` both use
//! them, so `info` reports exactly what a Loader would do.
//!
//! ```text
//! loader_topology(mode, gpus, cpus share) ──► Topology (allowed_cpus = the rank's share, else the affinity mask)
//!        │
//!        ├─► worker_plan(&topo, mode, workers, &gpu_nodes) ──► worker w → Some(cpu) | None   (pure)
//!        └─► staging_placement(&topo, gpu_node)             ──► (node, cpus) | None         (pure)
//! ```
//!
//! Every plan names only CPUs in `topo.allowed_cpus`: a rank's `cpus` share therefore bounds `numa` plans too
//! (a node's CPUs outside the share are never used; a GPU whose node has none inside it falls back to
//! round-robin over the share).

use super::Topology;

/// How worker threads are bound to CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinMode {
    /// No binding.
    None,
    /// Worker w runs on allowed CPU w mod ncpus (the seed's mode).
    RoundRobin,
    /// Workers of GPU engine g run on the allowed CPUs of g's NUMA node (round-robin where the node is
    /// unknown or has no allowed CPU).
    Numa,
}

impl Topology {
    /// This topology with `allowed_cpus` replaced by a rank's `cpus` share, in the order given (round-robin
    /// walks it in that order). An empty share leaves the topology as it is.
    pub fn with_share(mut self, share: &[usize]) -> Self {
        if !share.is_empty() {
            self.allowed_cpus = share.to_vec();
        }
        self
    }
}

/// The topology a Loader plans with: detected (hwloc or sysfs) when GPUs or `numa` need NUMA nodes; otherwise
/// only the calling thread's affinity mask (no detection cost for a CPU loader). Narrowed to `share` if given.
pub fn loader_topology(mode: PinMode, has_gpus: bool, share: Option<&[usize]>) -> Topology {
    let topo = if has_gpus || mode == PinMode::Numa {
        super::detect()
    } else {
        Topology::single_node(super::current_thread_affinity().unwrap_or_default(), "affinity")
    };
    topo.with_share(share.unwrap_or_default())
}

/// The CPU each of `workers` workers is bound to (None = unbound), computed before any thread starts.
///
/// `Numa`: worker `w` serves engine `e = w mod G` with `G = engine_nodes.len()` (the claiming protocol's
/// mapping; `G = 1` when `engine_nodes` is empty, i.e. a CPU loader) and is its `j = w div G`-th worker. If
/// `e`'s node has allowed CPUs, the worker gets the node's `(j·S + r) mod n`-th allowed CPU, where `S` engines
/// share that node and `e` is the `r`-th of them — so engines on one node interleave instead of stacking on
/// the same CPUs. Otherwise (node unknown, `-1`, or no allowed CPU there) it falls back to round-robin:
/// allowed CPU `w mod n`. Pure: the topology is an argument, so multi-socket layouts are tested synthetically.
pub fn worker_plan(topo: &Topology, mode: PinMode, workers: usize, engine_nodes: &[Option<u32>]) -> Vec<Option<usize>> {
    let allowed = &topo.allowed_cpus;
    let round_robin = |w: usize| (!allowed.is_empty()).then(|| allowed[w % allowed.len()]);
    match mode {
        PinMode::None => vec![None; workers],
        PinMode::RoundRobin => (0..workers).map(round_robin).collect(),
        PinMode::Numa => {
            let engines = engine_nodes.len().max(1);
            let node_of = |e: usize| engine_nodes.get(e).copied().flatten();
            (0..workers)
                .map(|w| {
                    let (e, j) = (w % engines, w / engines);
                    let node_cpus = node_of(e).map(|n| topo.allowed_cpus_of_node(n)).unwrap_or_default();
                    if node_cpus.is_empty() {
                        return round_robin(w);
                    }
                    let sharing: Vec<usize> = (0..engines).filter(|&x| node_of(x) == node_of(e)).collect();
                    let rank = sharing.iter().position(|&x| x == e).unwrap_or(0);
                    Some(node_cpus[(j * sharing.len() + rank) % node_cpus.len()])
                })
                .collect()
        }
    }
}

/// The CPUs that serve an engine whose GPU sits on `node`: that node's allowed CPUs, or every allowed CPU
/// when the node is unknown (`None`, sysfs `-1`) or has no allowed CPU (what `trdata info` shows per engine).
pub fn engine_cpus(topo: &Topology, node: Option<u32>) -> Vec<usize> {
    match node.map(|n| topo.allowed_cpus_of_node(n)) {
        Some(cpus) if !cpus.is_empty() => cpus,
        _ => topo.allowed_cpus.clone(),
    }
}

/// Where the staging (transfer) thread of a GPU on `gpu_node` binds: (node, its allowed CPUs), or None
/// (unknown node, or no allowed CPU there) → allocate unbound, never fail.
pub fn staging_placement(topo: &Topology, gpu_node: Option<u32>) -> Option<(u32, Vec<usize>)> {
    let node = gpu_node?;
    let cpus = topo.allowed_cpus_of_node(node);
    (!cpus.is_empty()).then_some((node, cpus))
}

/// Whether `pin="numa"` would place workers differently from round-robin in a way that matters: more than
/// one node with allowed CPUs, and every engine's GPU on a known node with allowed CPUs.
pub fn numa_recommended(topo: &Topology, engine_nodes: &[Option<u32>]) -> bool {
    topo.nodes_with_allowed_cpus() > 1
        && !engine_nodes.is_empty()
        && engine_nodes.iter().all(|n| n.is_some_and(|n| !topo.allowed_cpus_of_node(n).is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::NumaNode;

    /// 2 packages × 2 NUMA nodes × 8 CPUs (node n = CPUs 8n..8n+8), 8 GPUs two per node.
    fn two_socket_four_nodes() -> (Topology, Vec<Option<u32>>) {
        let numa_nodes =
            (0..4u32).map(|n| NumaNode { os_index: n, cpus: (8 * n as usize..8 * n as usize + 8).collect() }).collect();
        let topo = Topology { numa_nodes, allowed_cpus: (0..32).collect(), source: "synthetic" };
        let gpus = (0..8u32).map(|g| Some(g / 2)).collect();
        (topo, gpus)
    }

    #[test]
    fn numa_plan_keeps_each_engines_workers_on_its_gpus_node() {
        let (topo, gpus) = two_socket_four_nodes();
        for workers in [8, 16, 32, 37] {
            let plan = worker_plan(&topo, PinMode::Numa, workers, &gpus);
            assert_eq!(plan.len(), workers);
            for (w, cpu) in plan.iter().enumerate() {
                let cpu = cpu.expect("every worker bound");
                let node = gpus[w % 8].unwrap();
                assert_eq!(topo.node_of_cpu(cpu), Some(node), "worker {w} (engine {}) on cpu {cpu}", w % 8);
            }
            // The two GPUs of a node use disjoint CPUs while the node has enough of them (32 workers = 4 per
            // GPU, 8 per node of 8 CPUs: every CPU used exactly once).
            if workers == 32 {
                let mut used: Vec<usize> = plan.iter().map(|c| c.unwrap()).collect();
                used.sort();
                assert_eq!(used, (0..32).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn numa_plan_stays_inside_a_ranks_cpu_share() {
        // Two ranks of one node share it: rank 0 gets CPUs 0-3 and 16-19, rank 1 the rest. Each rank's GPU
        // sits on node 0 / node 2; workers use only their rank's CPUs of that node.
        let (topo, _) = two_socket_four_nodes();
        let share0: Vec<usize> = (0..4).chain(16..20).collect();
        let t0 = topo.clone().with_share(&share0);
        assert_eq!(worker_plan(&t0, PinMode::Numa, 6, &[Some(0)]), [0, 1, 2, 3, 0, 1].map(Some));
        // A GPU whose node has none of the share's CPUs: round-robin over the share.
        assert_eq!(worker_plan(&t0, PinMode::Numa, 3, &[Some(1)]), [0, 1, 2].map(Some));
        assert_eq!(staging_placement(&t0, Some(1)), None);
        assert_eq!(staging_placement(&t0, Some(2)), Some((2, vec![16, 17, 18, 19])));
        // Round-robin walks the share in the order given.
        let t1 = topo.with_share(&[9, 4, 30]);
        assert_eq!(worker_plan(&t1, PinMode::RoundRobin, 4, &[]), [9, 4, 30, 9].map(Some));
    }

    #[test]
    fn unknown_or_cpuless_nodes_fall_back_to_round_robin() {
        let (mut topo, _) = two_socket_four_nodes();
        // GPU 0 reports -1 (None), GPU 1 sits on node 3 whose CPUs are outside the cpuset.
        topo.allowed_cpus = (0..24).collect();
        let gpus = vec![None, Some(3)];
        let plan = worker_plan(&topo, PinMode::Numa, 6, &gpus);
        assert_eq!(plan, (0..6).map(|w| Some(w % 24)).collect::<Vec<_>>());
        assert_eq!(staging_placement(&topo, None), None);
        assert_eq!(staging_placement(&topo, Some(3)), None);
        assert_eq!(staging_placement(&topo, Some(1)), Some((1, (8..16).collect())));
        // No allowed CPUs at all: unbound.
        topo.allowed_cpus.clear();
        assert_eq!(worker_plan(&topo, PinMode::Numa, 2, &[None]), vec![None, None]);
        assert_eq!(worker_plan(&topo, PinMode::RoundRobin, 2, &[]), vec![None, None]);
    }

    #[test]
    fn staging_for_each_gpu_is_placed_on_its_node() {
        let (topo, gpus) = two_socket_four_nodes();
        for (g, node) in gpus.iter().enumerate() {
            let (n, cpus) = staging_placement(&topo, *node).expect("known node");
            assert_eq!(n, g as u32 / 2);
            assert!(cpus.iter().all(|&c| topo.node_of_cpu(c) == Some(n)));
            // Package of the staging node = package of the GPU (nodes 0,1 → package 0; 2,3 → package 1).
            assert_eq!(n / 2, g as u32 / 4);
        }
    }
}
