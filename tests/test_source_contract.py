"""The contract every source keeps, checked on each kind with real files written in their projects' layouts:
every sample exactly once per epoch (on any worker count, and across ranks), the same bytes whatever the worker
count in reproducible mode, and a mid-epoch resume that continues the uninterrupted epoch exactly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import make_cifar, make_mnist, photo, write_shards
from PIL import Image

KW = dict(
    batch_size=5,
    transforms=[trdata.RandomResizedCrop(14, scale=(0.2, 1.0)), trdata.RandomHorizontalFlip()],
    dtype="uint8",
    layout="NHWC",
    shuffle=True,
    seed=21,
    reproducible=True,
    last_batch="partial",
)


def _folder(root: Path) -> Path:
    for i in range(23):
        d = root / "folder" / f"c{i % 4}"
        d.mkdir(parents=True, exist_ok=True)
        a = photo(i, 20 + i % 9, 18 + i % 5)
        fmt, ext = [("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")][i % 3]
        Image.fromarray(a).save(
            d / f"{i:02d}.{ext}", format=fmt, **({"lossless": True} if fmt == "WEBP" else {})
        )
    return root / "folder"


def _blobs(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted(_folder(root).rglob("*.*"))]


def _packed(root: Path, mode: str) -> trdata.Source:
    dst = root / "set.trd"
    trdata.pack(trdata.ImageFolder(_folder(root)), dst, progress=False, block_bytes=4096)
    return trdata.Packed(dst, mode, window_blocks=2)


class MapDataset:
    """A user's map-style dataset (``Loader(MapDataset(...))``): ``items[i]`` is (image, target); ``calls`` records
    every ``__getitem__`` (list.append is atomic: the workers call it concurrently)."""

    def __init__(self, items: list[tuple[object, int]]) -> None:
        self.items, self.calls = items, []  # type: list[int]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[object, int]:
        self.calls.append(i)
        return self.items[i]


def _dataset_source(items: list[tuple[object, int]]) -> trdata.Source:
    return trdata.DatasetSource(MapDataset(items))


def labels_of(source: trdata.Source) -> list[int]:
    """Every sample's label: the source's, or a map-style dataset's as its ``__getitem__`` returns them."""
    if isinstance(source, trdata.DatasetSource):
        return [int(source.dataset.items[i][1]) for i in range(len(source))]
    return list(source.labels)


SOURCES: dict[str, Callable[[Path], trdata.Source]] = {
    "Dataset-bytes": lambda r: _dataset_source([(b, i % 3) for i, b in enumerate(_blobs(r))]),
    "Dataset-arrays": lambda r: _dataset_source([(photo(i, 16 + i % 4, 15), np.int64(i)) for i in range(23)]),
    "Dataset-PIL": lambda r: _dataset_source([(Image.open(p), 1) for p in sorted(_folder(r).rglob("*.*"))]),
    "ImageFolder": lambda r: trdata.ImageFolder(_folder(r)),
    "FileList": lambda r: trdata.FileList([str(p) for p in sorted(_folder(r).rglob("*.*"))], list(range(23))),
    "Bytes": lambda r: trdata.Bytes(_blobs(r), [i % 3 for i in range(23)]),
    "Arrays": lambda r: trdata.Arrays(np.stack([photo(i, 16, 15) for i in range(23)]), list(range(23))),
    "MNIST": lambda r: (make_mnist(r, n=23), trdata.MNIST(r))[1],
    "CIFAR10": lambda r: (make_cifar(r, 10, n=5), trdata.CIFAR10(r))[1],
    "WebDataset": lambda r: trdata.WebDataset(write_shards(r, 23, 6)[0]),
    "Packed-full": lambda r: _packed(r, "full"),
    "Packed-partial": lambda r: _packed(r, "partial"),
}


def epoch(src: trdata.Source, workers: int, **kw: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with trdata.Loader(src, workers=workers, **{**KW, **kw}) as ld:
        bs = [(b.images.copy(), b.labels.copy(), b.indices.copy(), b.valid) for b in ld]
    return (
        np.concatenate([b[0][: b[3]] for b in bs]),
        np.concatenate([b[1][: b[3]] for b in bs]),
        np.concatenate([b[2][: b[3]] for b in bs]),
    )


@pytest.fixture(params=sorted(SOURCES))
def source(request: pytest.FixtureRequest, tmp_path: Path) -> trdata.Source:
    return SOURCES[request.param](tmp_path)


def test_exactly_once_and_the_same_bytes_on_any_worker_count(source: trdata.Source) -> None:
    one = epoch(source, 1)
    assert sorted(one[2].tolist()) == list(range(len(source)))
    assert one[1].tolist() == [labels_of(source)[i] for i in one[2]]
    three = epoch(source, 3)
    assert all(np.array_equal(a, b) for a, b in zip(one, three))
    # another epoch, another order, the same samples
    other = epoch(source, 2, seed=22)
    assert sorted(other[2].tolist()) == list(range(len(source))) and other[2].tolist() != one[2].tolist()


def test_ranks_share_the_epoch_exactly_once(source: trdata.Source) -> None:
    seen: list[int] = []
    for rank in range(3):
        seen += epoch(source, 2, rank=rank, world_size=3)[2].tolist()
    assert sorted(seen) == list(range(len(source)))


def test_resume_mid_epoch_continues_the_uninterrupted_epoch(source: trdata.Source) -> None:
    whole = epoch(source, 2)
    with trdata.Loader(source, workers=2, **KW) as ld:
        it = iter(ld)
        first = [next(it) for _ in range(2)]
        head = [(b.images.copy(), b.indices.copy()) for b in first]
        state = ld.state_dict()
    with trdata.Loader(source, workers=3, **KW) as ld:
        ld.load_state_dict(state)
        tail = [(b.images.copy(), b.indices.copy()) for b in ld]
    images = np.concatenate([h[0] for h in head + tail])
    indices = np.concatenate([h[1] for h in head + tail])
    assert np.array_equal(indices, whole[2]) and np.array_equal(images, whole[0])
