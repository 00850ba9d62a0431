"""Shared fixtures: the real JPEGs of ../shared/data (tests skip cleanly when that folder is absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("TRDATA_TEST_DATA", REPO.parent / "shared" / "data"))
IMAGENET = DATA / "imagenet-sample"
EDGE = DATA / "edge-cases"


def _require(path: Path) -> Path:
    if not path.is_dir():
        pytest.skip(f"test data not found at {path} (set TRDATA_TEST_DATA)")
    return path


@pytest.fixture(scope="session")
def imagenet_root() -> Path:
    return _require(IMAGENET)


@pytest.fixture(scope="session")
def edge_dir() -> Path:
    return _require(EDGE)


@pytest.fixture(scope="session")
def small_paths(imagenet_root: Path) -> list[str]:
    """120 real ImageNet JPEGs (sorted), enough for multi-batch epochs that stay fast on 2 cores."""
    files = sorted(p for p in imagenet_root.rglob("*") if p.suffix.lower() in (".jpeg", ".jpg", ".png"))
    return [str(p) for p in files[:120]]


def thread_names() -> list[str]:
    """Names of this process's OS threads (Rust workers are invisible to `threading`)."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:
            pass
    return names


def worker_threads() -> int:
    return sum(1 for n in thread_names() if n.startswith("trdata-w"))
