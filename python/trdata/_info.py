"""`trdata info`: a readable report of what this machine and this build offer the loader.

The facts come from ``_core.machine_info()`` (Rust: topology, CUDA probe, JPEG build facts); this
module only formats them, so it can be tested with a hand-written dict.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["format_info"]

_GIB = float(1 << 30)


def _yes_no(value: object) -> str:
    if value is None:
        return "unknown"
    return "yes" if value else "no"


def _row(label: str, text: str) -> str:
    return f"{label:<10}{text}"


def _more(text: str) -> str:
    return " " * 10 + text


def format_info(info: dict[str, Any] | None = None) -> str:
    """Return a multi-line report of ``_core.machine_info()`` (or of ``info`` if given)."""
    if info is None:
        from . import _core, _cuda_libs

        info = _core.machine_info()
        info["nvjpeg"] = _cuda_libs.nvjpeg.probe()
        info["nvrtc"] = _cuda_libs.nvrtc.probe()
        info["cuda_connections"] = {
            "value": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
            "from_user": _cuda_libs.CUDA_CONNECTIONS_FROM_USER,
        }

    lines: list[str] = []
    build = info.get("build", {})
    features = ", ".join(build.get("features", [])) or "none"
    lines.append(
        f"trdata {info.get('version', '?')} "
        f"({build.get('profile', '?')} build, features: {features}; {build.get('target', '?')})"
    )
    lines.append("")

    cpus = info.get("cpus", {})
    model = cpus.get("model") or "unknown CPU model"
    lines.append(
        _row(
            "CPUs",
            f"{cpus.get('allowed_count', '?')} allowed ({cpus.get('allowed_list', '?')}), "
            f"available_parallelism {cpus.get('available_parallelism', '?')}; {model}",
        )
    )
    flags = cpus.get("flags", {})
    have = [name for name in ("sse2", "avx2", "avx512f", "avx512bw") if flags.get(name)]
    lacking = [name for name in ("sse2", "avx2", "avx512f", "avx512bw") if name in flags and not flags[name]]
    vec = "vector extensions: " + (" ".join(have) if have else "none detected")
    if lacking:
        vec += f" (not: {' '.join(lacking)})"
    lines.append(_more(vec))

    topo = info.get("topology", {})
    nodes = topo.get("numa_nodes", [])
    lines.append(
        _row(
            "Topology",
            f"{len(nodes)} NUMA node{'s' if len(nodes) != 1 else ''} (source: {topo.get('source', '?')})",
        )
    )
    for node in nodes:
        n_allowed = len(node.get("allowed_cpus", []))
        cpu_list = node.get("cpu_list") or "no CPUs (memory only)"
        lines.append(_more(f"node {node.get('os_index')}: CPUs {cpu_list} ({n_allowed} allowed)"))

    jpeg = info.get("jpeg", {})
    lines.append(
        _row(
            "JPEG",
            f"libjpeg-turbo {jpeg.get('version', '?')} ({jpeg.get('source', '?')}), "
            f"SIMD compiled in: {_yes_no(jpeg.get('simd_built'))}",
        )
    )
    lines.append(_more(f"SIMD path expected at run time: {jpeg.get('simd_expected', 'unknown')}"))
    lines.append(_more("(inferred: libjpeg-turbo has no API that reports the path it runs)"))

    cuda = info.get("cuda", {})
    if cuda.get("available"):
        devices = cuda.get("devices", [])
        lines.append(
            _row(
                "CUDA",
                f"driver {cuda.get('driver_version', '?')}, {len(devices)} device{'s' if len(devices) != 1 else ''}",
            )
        )
        for dev in devices:
            cc = dev.get("compute_capability") or (0, 0)
            mem = dev.get("total_memory_bytes", 0) / _GIB
            node = dev.get("numa_node")
            node_text = f"NUMA node {node}" if node is not None else "NUMA node unknown"
            lines.append(
                _more(
                    f"cuda:{dev.get('ordinal')}: {dev.get('name', '?')}, {mem:.1f} GiB, "
                    f"sm_{cc[0]}{cc[1]}, PCI {dev.get('pci_bus_id') or '?'}, {node_text}"
                )
            )
        conns = info.get("cuda_connections")
        if conns is not None:
            value = conns.get("value") or "unset (CUDA's default: 8)"
            who = (
                "set by you"
                if conns.get("from_user")
                else "set by trdata at import (docs/design/gpu-decode-log.md §18)"
            )
            lines.append(_more(f"CUDA_DEVICE_MAX_CONNECTIONS={value}, {who}"))
    else:
        lines.append(_row("CUDA", f"unavailable: {cuda.get('reason') or 'unknown reason'}"))

    nv = info.get("nvjpeg")
    if nv is not None:
        if nv.get("found"):
            v = ".".join(str(x) for x in nv.get("version") or ())
            lines.append(_row("nvJPEG", f"{v} from {nv['found']}"))
            hw = nv.get("hardware")
            if hw:
                lines.append(_more(f"hardware JPEG decoder: {hw[0]} engines x {hw[1]} cores"))
            else:
                lines.append(
                    _more(f"hardware JPEG decoder: none ({nv.get('hardware_error') or 'not on this GPU'})")
                )
        else:
            tried = nv.get("tried", [])
            lines.append(_row("nvJPEG", f"not found ({len(tried)} places tried; GPU decode unavailable)"))
            lines.extend(_more(f"{path}: {why}") for path, why in tried if "/" in path)
    rtc = info.get("nvrtc")
    if rtc is not None:
        if rtc.get("found"):
            v = ".".join(str(x) for x in rtc.get("version") or ())
            lines.append(
                _row("NVRTC", f"{v} from {rtc['found']} (compiles the GPU decode path's resample kernel)")
            )
        else:
            tried = rtc.get("tried", [])
            lines.append(_row("NVRTC", f"not found ({len(tried)} places tried; GPU decode unavailable)"))
            lines.extend(_more(f"{path}: {why}") for path, why in tried if "/" in path)

    binding = info.get("binding", {})
    lines.append(_row("Binding", f"default {binding.get('default_mode', '?')}: {binding.get('reason', '')}"))
    engine_cpus = binding.get("engine_cpus", [])
    devices = cuda.get("devices", []) if cuda.get("available") else []
    for i, cpu_list in enumerate(engine_cpus):
        who = f"cuda:{devices[i].get('ordinal')}" if i < len(devices) else "CPU consumer"
        lines.append(_more(f"workers of {who} under pin='numa': CPUs {cpu_list}"))
    return "\n".join(lines)
