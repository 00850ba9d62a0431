"""The contract every source keeps, checked on each kind with real files written in their projects' layouts:
every sample exactly once per epoch (on any worker count, and across ranks), the same bytes whatever the worker
count in reproducible mode, and a mid-epoch resume that continues the uninterrupted epoch exactly. Sources with
targets (detection, segmentation) keep it for their targets too: each row's boxes, labels, masks or label map are
the same for 1 and 3 workers and across a resume. Sources read over ``s3://`` (a local moto server) keep it as
their local files do."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import (
    RecordSet,
    make_cifar,
    make_mnist,
    photo,
    write_arrow_parquet,
    write_coco,
    write_hf_parquet,
    write_litdata,
    write_mds,
    write_shards,
    write_tfrecord,
    write_voc,
    write_yolo,
)
from PIL import Image

pytestmark = pytest.mark.usefixtures("private_cache_home")  # index caches and keys: not ~/.cache

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


# Every record source's labels as its files hold them (a record source reads them with its samples: it has no
# ``labels``), by the source's id.
RECORD_LABELS: dict[int, list[int]] = {}


def _record(name: str, rs: RecordSet, **kw: object) -> trdata.Source:
    """``trdata.<name>(rs.location, **kw)`` over another project's record files, written by that project's writer
    (``_fixtures.write_*``), a window of 2 units; skipped while this build lacks the source."""
    cls = getattr(trdata, name, None)
    if cls is None:
        pytest.skip(f"trdata.{name} is not in this build yet")
    src = cls(rs.location, window_blocks=2, **kw)
    RECORD_LABELS[id(src)] = list(rs.labels)
    return src


def _coco(root: Path) -> trdata.CocoDetection:
    return trdata.CocoDetection(root / "images", write_coco(root), masks=True)


def _voc(root: Path) -> trdata.SegmentationFolder:
    write_voc(root)
    return trdata.SegmentationFolder(root / "JPEGImages", root / "SegmentationClass")


def _packed_detection(root: Path) -> trdata.Source:
    dst = root / "coco.trd"
    trdata.pack(_coco(root), dst, progress=False, block_bytes=8 << 10)
    return trdata.Packed(dst, "partial", window_blocks=2)


@pytest.fixture(scope="module")
def bucket(moto: str) -> tuple[str, str]:
    """(endpoint, bucket) of conftest's moto server, with a bucket for this module's sources."""
    pytest.importorskip("boto3")
    from _servers import s3_client

    s3_client(moto).create_bucket(Bucket="contract")
    return moto, "contract"


def _upload(bucket: tuple[str, str], files: list[Path], prefix: str) -> tuple[list[str], dict[str, object]]:
    """``files`` put under ``s3://contract/<prefix>/``: their URLs and the storage options that reach them."""
    from _servers import CREDS, s3_client

    endpoint, name = bucket
    s3 = s3_client(endpoint)
    for f in files:
        s3.put_object(Bucket=name, Key=f"{prefix}/{f.name}", Body=f.read_bytes())
    options = {"aws_endpoint": endpoint, "aws_allow_http": True, **CREDS}
    return [f"s3://{name}/{prefix}/{f.name}" for f in files], options


def _s3_webdataset(root: Path, bucket: tuple[str, str]) -> trdata.Source:
    urls, options = _upload(bucket, [Path(p) for p in write_shards(root, 23, 6)[0]], root.name)
    return trdata.WebDataset(urls, storage_options=options)


def _s3_packed(root: Path, bucket: tuple[str, str], mode: str) -> trdata.Source:
    dst = root / "set.trd"
    trdata.pack(trdata.ImageFolder(_folder(root)), dst, progress=False, block_bytes=4096)
    (url,), options = _upload(bucket, [dst], root.name)
    return trdata.Packed(url, mode, window_blocks=2, storage_options=options)


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
    """Every sample's label: the source's, a map-style dataset's as its ``__getitem__`` returns them, or a record
    source's as its writer wrote them."""
    if id(source) in RECORD_LABELS:
        return RECORD_LABELS[id(source)]
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
    "CocoDetection": _coco,
    "YoloDetection": lambda r: (write_yolo(r), trdata.YoloDetection(r, "train"))[1],
    "SegmentationFolder": _voc,
    "Packed-detection": _packed_detection,
    "Parquet-hf": lambda r: _record("Parquet", write_hf_parquet(r), extras=["text"]),
    "Parquet-arrow": lambda r: _record("Parquet", write_arrow_parquet(r)),
    "MDS": lambda r: _record("MDS", write_mds(r)),
    "MDS-zstd": lambda r: _record("MDS", write_mds(r, compression="zstd")),
    "LitData": lambda r: _record("LitData", write_litdata(r)),
    "TFRecord": lambda r: _record("TFRecord", write_tfrecord(r, index=True)),
}
# Sources read over s3:// from conftest's moto server (the module's ``bucket``).
URL_SOURCES: dict[str, Callable[[Path, tuple[str, str]], trdata.Source]] = {
    "s3-WebDataset": _s3_webdataset,
    "s3-Packed-full": lambda r, b: _s3_packed(r, b, "full"),
    "s3-Packed-partial": lambda r, b: _s3_packed(r, b, "partial"),
}


def rows_targets(b: trdata.Batch) -> list[dict[str, np.ndarray]]:
    """The targets of a batch's valid rows (numpy), or [] for a source without them."""
    if b.targets is None:
        return []
    return [
        {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v) for k, v in t.items()}
        for t in b.targets[: b.valid]
    ]


def assert_same_targets(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> None:
    """Two runs' targets, row by row: the same fields, dtypes, shapes and values."""
    assert len(a) == len(b)
    for row, (x, y) in enumerate(zip(a, b)):
        assert x.keys() == y.keys(), row
        for k in x:
            assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, (row, k)
            np.testing.assert_array_equal(x[k], y[k], err_msg=f"row {row}, {k}")


def epoch(src: trdata.Source, workers: int, **kw: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return epoch_and_targets(src, workers, **kw)[0]


def epoch_and_targets(
    src: trdata.Source, workers: int, **kw: object
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], list[dict[str, np.ndarray]]]:
    """One epoch: (images, labels, indices) of the valid rows, and their targets in the same order."""
    with trdata.Loader(src, workers=workers, **{**KW, **kw}) as ld:
        bs = [(b.images.copy(), b.labels.copy(), b.indices.copy(), b.valid, rows_targets(b)) for b in ld]
    arrays = (
        np.concatenate([b[0][: b[3]] for b in bs]),
        np.concatenate([b[1][: b[3]] for b in bs]),
        np.concatenate([b[2][: b[3]] for b in bs]),
    )
    return arrays, [t for b in bs for t in b[4]]


@pytest.fixture(params=sorted(SOURCES) + sorted(URL_SOURCES))
def source(request: pytest.FixtureRequest, tmp_path: Path) -> trdata.Source:
    if request.param in URL_SOURCES:
        return URL_SOURCES[request.param](tmp_path, request.getfixturevalue("bucket"))
    src = SOURCES[request.param](tmp_path)
    if request.param in ("CocoDetection", "YoloDetection", "SegmentationFolder", "Packed-detection"):
        assert src._has_targets, f"{request.param} must deliver targets"
    return src


def test_exactly_once_and_the_same_bytes_on_any_worker_count(source: trdata.Source) -> None:
    one, one_targets = epoch_and_targets(source, 1)
    assert sorted(one[2].tolist()) == list(range(len(source)))
    assert one[1].tolist() == [labels_of(source)[i] for i in one[2]]
    three, three_targets = epoch_and_targets(source, 3)
    assert all(np.array_equal(a, b) for a, b in zip(one, three))
    assert len(one_targets) == (len(source) if source._has_targets else 0)
    assert_same_targets(one_targets, three_targets)
    # another epoch, another order, the same samples
    other = epoch(source, 2, seed=22)
    assert sorted(other[2].tolist()) == list(range(len(source))) and other[2].tolist() != one[2].tolist()


def test_ranks_share_the_epoch_exactly_once(source: trdata.Source) -> None:
    seen: list[int] = []
    for rank in range(3):
        seen += epoch(source, 2, rank=rank, world_size=3)[2].tolist()
    assert sorted(seen) == list(range(len(source)))


def test_resume_mid_epoch_continues_the_uninterrupted_epoch(source: trdata.Source) -> None:
    whole, whole_targets = epoch_and_targets(source, 2)
    batches = -(-len(source) // int(KW["batch_size"]))
    with trdata.Loader(source, workers=2, **KW) as ld:
        it = iter(ld)
        first = [next(it) for _ in range(min(2, max(1, batches // 2)))]  # 2 batches, 1 of a 2-batch epoch
        head = [(b.images.copy(), b.indices.copy(), rows_targets(b)) for b in first]
        state = ld.state_dict()
    with trdata.Loader(source, workers=3, **KW) as ld:
        ld.load_state_dict(state)
        tail = [(b.images.copy(), b.indices.copy(), rows_targets(b)) for b in ld]
    assert tail, "the resume point must be mid-epoch"
    images = np.concatenate([h[0] for h in head + tail])
    indices = np.concatenate([h[1] for h in head + tail])
    assert np.array_equal(indices, whole[2]) and np.array_equal(images, whole[0])
    assert_same_targets([t for h in head + tail for t in h[2]], whole_targets)
