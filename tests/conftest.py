"""Shared fixtures. The suite runs from any clone: its data come in two tiers.

* **fixture tier** (always there, built once per session under pytest's temporary folder, ~2-3 s):
  - ``generated``: an ImageFolder of 200 JPEGs in 10 classes from trdata's own deterministic generator
    (ImageNet-like sizes and statistics, 4:2:0 / 4:4:4 / gray), see ``_fixtures.generate_imagenet``;
  - ``fixture`` edge cases: the same 46 file names as the shared edge-case set: 35 small real files committed in
    ``tests/fixtures/edge-cases`` (sources and licences in its README.txt) plus 11 stand-ins that Pillow writes at
    test time for the files too large or not ours to commit (``_fixtures.assemble_edge_cases``).
* **shared tier** (when present): ``../shared/data`` beside the repository, or ``$TRDATA_TEST_DATA``: 1,000 real
  ImageNet JPEGs (``imagenet-sample``) and the 46 real edge-case files (``edge-cases``).
  ``TRDATA_TEST_DATA=/nonexistent`` runs the suite as a fresh clone does.

Fixtures (names and meanings are stable; other test files rely on them):

* ``imagenet_root``: an ImageFolder root of real or photo-like JPEGs in several classes. Parametrized over every
  tier present (ids ``[shared]``, ``[generated]``), so that with ../shared both tiers are exercised and a change
  that breaks only one of them shows. Tests must derive counts and classes from the folder, never assume 1,000.
* ``edge_dir``: a folder of the edge-case files by their shared names (plus a README.txt). Parametrized the same
  way (ids ``[shared]``, ``[fixture]``).
* ``small_paths``: 120 sorted JPEG paths (str) for behaviour tests whose data are incidental (batching, lifecycle,
  resume, DLPack...). One tier only, to keep the suite fast: the shared sample when present, else the generated
  set.
* ``moto``: the endpoint URL of a local moto S3 server (``_servers.start_moto``), one per test module.
* ``private_cache_home``: ``$XDG_CACHE_HOME`` set to a fresh folder of this test run for one test, so that index
  caches and keys never go to the user's ~/.cache (modules use it with ``pytest.mark.usefixtures``).

Dataset builders and helpers shared by several test modules are in ``_fixtures.py``; no test module imports
another.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import _fixtures
import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("TRDATA_TEST_DATA", REPO.parent / "shared" / "data"))
SHARED_IMAGENET = DATA / "imagenet-sample"
SHARED_EDGE = DATA / "edge-cases"
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
SMALL_COUNT = 120

IMAGENET_TIERS = (["shared"] if SHARED_IMAGENET.is_dir() else []) + ["generated"]
EDGE_TIERS = (["shared"] if SHARED_EDGE.is_dir() else []) + ["fixture"]


def image_files(root: Path) -> list[Path]:
    """Sorted image files under `root` (recursively)."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


@pytest.fixture(scope="session")
def generated_imagenet(tmp_path_factory) -> Path:
    """The generated ImageFolder (built on first use, once per session)."""
    return _fixtures.generate_imagenet(tmp_path_factory.mktemp("tier-generated") / "imagenet")


@pytest.fixture(scope="session")
def fixture_edge_dir(tmp_path_factory) -> Path:
    """The committed edge-case files plus the generated stand-ins, under the shared set's names."""
    pytest.importorskip("PIL", reason="the edge-case stand-ins are written with Pillow (pip install pillow)")
    return _fixtures.assemble_edge_cases(tmp_path_factory.mktemp("tier-fixture") / "edge-cases")


@pytest.fixture(scope="session", params=IMAGENET_TIERS)
def imagenet_root(request) -> Path:
    return SHARED_IMAGENET if request.param == "shared" else request.getfixturevalue("generated_imagenet")


@pytest.fixture(scope="session", params=EDGE_TIERS)
def edge_dir(request) -> Path:
    return SHARED_EDGE if request.param == "shared" else request.getfixturevalue("fixture_edge_dir")


@pytest.fixture(scope="session")
def small_paths(request) -> list[str]:
    """120 JPEGs (sorted): enough for multi-batch epochs that stay fast on 2 cores."""
    root = SHARED_IMAGENET if SHARED_IMAGENET.is_dir() else request.getfixturevalue("generated_imagenet")
    files = image_files(root)
    assert len(files) >= SMALL_COUNT, f"{root} has {len(files)} images, tests need {SMALL_COUNT}"
    return [str(p) for p in files[:SMALL_COUNT]]


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    """A moto S3 server for the module's tests, its endpoint URL (credentials: ``_servers.CREDS``)."""
    from _servers import start_moto

    proc, endpoint = start_moto()
    yield endpoint
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def private_cache_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Index caches and keys (``$XDG_CACHE_HOME``) in a fresh folder of this test run, never the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg")))


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


def worker_threads_after_join(expected: int, within_s: float = 2.0) -> int:
    """The worker thread count once joined threads have left ``/proc/self/task``: ``pthread_join`` returns when
    the exiting thread clears its tid, which the kernel does before the task is removed from the thread group,
    so on a loaded machine a joined worker can still be listed for a moment. Polls until the count is
    ``expected`` or ``within_s`` passed; a worker that was not joined parks and stays, so it is still counted."""
    deadline = time.monotonic() + within_s
    n = worker_threads()
    while n != expected and time.monotonic() < deadline:
        time.sleep(0.01)
        n = worker_threads()
    return n
