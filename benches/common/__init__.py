"""The bench scripts' one shared helper package: everything two scripts need lives here once, and no script
imports another script.

Every script under ``benches/<kind>/`` starts the same way (the only ``sys.path`` handling in benches/), so it runs
as ``python benches/<kind>/<name>.py`` from the repo root (or anywhere) without PYTHONPATH for the helpers:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
    from common import ...  # noqa: E402

Modules:
  common            paths (REPO, DEFAULT_DATA, RESULTS), ImageNet mean/std, allowed cores, the `decode=` argument,
                    JSON result writing, the CPU suites' common run and result header
  common.peers      the peer contenders (torch DataLoader + v2 / + PIL, Pillow threads, DALI CPU) and the child
                    entry point that runs one of them in a fresh process (``python benches/common/peers.py child``)
  common.recipe     the GPU benches' trdata training recipe (RRC 224 + flip, or torchvision's RN50 recipe)
  common.train      the GPU benches' training step, feeds (synthetic / trdata / DataLoader), timing window and
                    file preparation

Nothing here imports trdata, torch or the peers at module level except ``common.train`` (torch; trdata when it
imports): ``--dry`` runs and peers-only runs work without them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

#: The repository root, and the 1,000-file ImageNet sample beside it (docs/design/architecture.md "Measuring": real data).
REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "imagenet-sample"
#: Where CPU benches write their JSON by default (git-ignored).
RESULTS = REPO / "bench-results"

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def allowed_cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def decode_arg(mode: str) -> str | float:
    """A ``decode=`` argument from the command line: 'cpu' | 'gpu' | 'auto' stay strings; '0.25' → 0.25 (the
    Loader's GPU fraction)."""
    try:
        return float(mode)
    except ValueError:
        return mode


def folder_files(root: str) -> tuple[list[str], list[int]]:
    """ImageFolder order (classes sorted, files sorted) through trdata's own scanner when importable."""
    try:
        import trdata

        src = trdata.ImageFolder(root)
        return list(src.paths), list(src.labels)
    except ImportError:
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        paths, labels = [], []
        for i, c in enumerate(classes):
            for f in sorted(os.listdir(os.path.join(root, c))):
                if f.lower().endswith((".jpg", ".jpeg", ".png")):
                    paths.append(os.path.join(root, c, f))
                    labels.append(i)
        return paths, labels


def write_json(path: str | os.PathLike[str], doc: Any, *, indent: int = 1, newline: bool = False) -> Path:
    """Write ``doc`` as JSON to ``path``, making its folder first; returns the path."""
    out = Path(path)
    if out.parent != Path():
        out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=indent) + ("\n" if newline else ""))
    return out


def suite_doc(data: str, cpus: list[int], workers: int) -> dict[str, Any]:
    """The head of a CPU suite's JSON result (benches/peers/packed.py, recipes.py): data, CPUs, machine."""
    from trdata import _bench

    return {"data": data, "cpus": cpus, "workers": workers, "machine": _bench.machine_summary()}


def run_cpu_suite(
    names: list[str],
    root: str,
    cpus: list[int],
    *,
    rounds: int,
    runner: Any,
    workers: int,
    dtype: str,
    epochs: int,
) -> list[Any]:
    """A CPU suite as packed.py and recipes.py run it: each contender in a fresh process on ``cpus``, batch 64,
    1 warm-up + ``epochs`` timed epochs, ``rounds`` interleaved rounds, one "running …" line per contender."""
    from trdata import _bench

    return _bench.run_suite(
        names,
        root,
        cpus,
        rounds=rounds,
        runner=runner,
        batch_size=64,
        workers=workers,
        dtype=dtype,
        epochs=epochs,
        warmup=1,
        progress=False,
        log=lambda s: print(f"  running {s}", flush=True),
    )


def suite_prog(script: str) -> str:
    """A suite script's name as its usage line gives it: ``benches/<kind>/<name>.py``."""
    return Path(script).resolve().relative_to(REPO).as_posix()


def suite_parser(script: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of a CPU suite script (packed.py, recipes.py): ``_bench.add_suite_arguments`` (--data, --cpus,
    --rounds, --epochs …) with the ImageNet sample as the default data; ``doc``'s first paragraph describes it."""
    from trdata import _bench

    ap = argparse.ArgumentParser(prog=suite_prog(script), description=(doc or "").split("\n\n")[0])
    _bench.add_suite_arguments(ap, str(DEFAULT_DATA))
    return ap


def suite_child(argv: list[str], script: str, *, run: Any, contenders: Any) -> int | None:
    """``SCRIPT child CONTENDER ...`` (what ``run_in_child`` starts): run one contender in this fresh process and
    return the exit status; None when ``argv`` is not a child call."""
    if argv[:1] != ["child"]:
        return None
    from trdata import _bench

    return _bench.child_main(argv[1:], run=run, prog=f"{suite_prog(script)} child", contenders=contenders)


def run_in_child(script: str, name: str, root: str, cpus: Any, *, label: str, **options: Any) -> Any:
    """``_bench.run_isolated`` of contender ``name`` in a fresh process running ``script``'s child mode."""
    from trdata import _bench

    child = (sys.executable, os.path.abspath(script), "child")
    return _bench.run_isolated(name, root, cpus, child=child, label=label, **options)
