"""Per-sample targets beyond class indices: float scalars, multi-hot and soft-label rows, any fixed per-sample
shape. ``batch.labels`` must be exactly ``source.targets[batch.indices]`` (float32) on every source kind, for every
worker count, in both slot modes, with padded, filled and skipped rows; class indices stay int64. Bad targets are
``ConfigError``s; every source with classes has torchvision's ``classes`` / ``class_to_idx``."""

from __future__ import annotations

import io
import json
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import photo, png

N = 13  # not a multiple of the batch size: the last batch is partial / padded
KW = dict(
    batch_size=4, transforms=[trdata.RandomResizedCrop(16), trdata.RandomHorizontalFlip()], dtype="uint8"
)


def pixels(n: int = N) -> np.ndarray:
    return np.stack([photo(i, 24, 20) for i in range(n)])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("targets")
    out = []
    for i, a in enumerate(pixels()):
        p = root / f"{i:03d}.png"
        p.write_bytes(png(a))
        out.append(str(p))
    return out


rng = np.random.default_rng(3)
SOFT = rng.dirichlet(np.ones(5), N)  # float64 (N, 5) soft labels, rows sum to 1
TARGETS = {
    "float-scalar": rng.normal(size=N),  # regression values
    "float-list": [float(x) for x in rng.uniform(0, 1, N)],
    "multi-hot-bool": rng.uniform(size=(N, 7)) < 0.3,
    "multi-hot-int": (rng.uniform(size=(N, 7)) < 0.3).astype(np.int64),
    "soft-labels": SOFT,
    "shape-2x3": rng.integers(-5, 5, size=(N, 2, 3)).astype(np.int32),
    "list-of-rows": [list(r) for r in SOFT],
}


def expected_float(t: object) -> np.ndarray:
    return np.asarray(t, dtype=np.float64).astype(np.float32)


def sources(kind: str, files: list[str], targets: object) -> trdata.Source:
    if kind == "arrays":
        return trdata.Arrays(pixels(), targets)
    if kind == "bytes":
        return trdata.Bytes([Path(f).read_bytes() for f in files], targets)
    return trdata.FileList(files, targets)


def collect(src: trdata.Source, **kw: object) -> list[trdata.Batch]:
    with trdata.Loader(src, **{**KW, **kw}) as ld:  # type: ignore[arg-type]
        return list(ld)


@pytest.mark.parametrize("kind", ["arrays", "files", "bytes"])
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_batch_labels_are_the_gathered_float_targets(files: list[str], kind: str, name: str) -> None:
    t = TARGETS[name]
    src = sources(kind, files, t)
    want = expected_float(t)
    assert src.targets.dtype == np.float32 and src.targets.shape == want.shape
    np.testing.assert_array_equal(src.targets, want)
    assert src.labels == [0] * N  # the core's labels: zeros of the same count
    batches = collect(src, workers=2, shuffle=True, seed=1)
    idx = np.concatenate([b.indices for b in batches])
    assert sorted(idx.tolist()) == list(range(N))
    for b in batches:
        assert b.labels.dtype == np.float32 and b.labels.shape == (len(b.indices), *want.shape[1:])
        np.testing.assert_array_equal(b.labels, want[b.indices])
        images, labels = b  # unpacking still gives (images, labels)
        assert labels is b.labels


def test_class_indices_stay_int64(files: list[str]) -> None:
    for t in ([i % 3 for i in range(N)], np.arange(N, dtype=np.uint8), np.arange(N) % 2 == 0, [True] * N):
        src = trdata.FileList(files, t)
        assert src._float_targets is None and src.targets.dtype == np.int64
        for b in collect(src, workers=1):
            assert b.labels.dtype == np.int64 and b.labels.shape == (len(b.indices),)
            np.testing.assert_array_equal(b.labels, src.targets[b.indices])


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_same_seed_same_batches_for_any_worker_count(files: list[str], workers: int) -> None:
    src = trdata.Arrays(pixels(), SOFT)
    ref = collect(src, workers=1, shuffle=True, seed=7, reproducible=True)
    got = collect(src, workers=workers, shuffle=True, seed=7, reproducible=True)
    for a, b in zip(ref, got):
        np.testing.assert_array_equal(a.images, b.images)
        np.testing.assert_array_equal(a.labels, b.labels)
        np.testing.assert_array_equal(a.indices, b.indices)
    # fast mode: rows may move, each row's label still belongs to its image's sample
    fast = collect(src, workers=workers, shuffle=True, seed=7, reproducible=False)
    for b in fast:
        np.testing.assert_array_equal(b.labels, expected_float(SOFT)[b.indices])


def test_padded_and_filled_rows_carry_their_samples_targets(files: list[str]) -> None:
    t = TARGETS["shape-2x3"]
    src = trdata.FileList(files, t)
    (*_, last) = collect(src, workers=2, last_batch="pad")
    assert last.valid == N % 4 and len(last.indices) == 4
    np.testing.assert_array_equal(last.labels, expected_float(t)[last.indices])
    for rank in (0, 1):  # 13 samples over 2 ranks: rank 1 is filled up to rank 0's count
        batches = collect(src, workers=1, world_size=2, rank=rank, last_batch="partial")
        for b in batches:
            np.testing.assert_array_equal(b.labels, expected_float(t)[b.indices])


def test_skipped_samples_take_their_replacements_targets(tmp_path: Path, files: list[str]) -> None:
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    paths = [*files[:5], str(bad), *files[5:]]
    t = rng.uniform(size=(len(paths), 3))
    src = trdata.FileList(paths, t)
    with trdata.Loader(src, workers=2, on_error="skip", **KW) as ld:  # type: ignore[arg-type]
        batches = list(ld)
        assert ld.stats()["errors_skipped"] == 1
    idx = np.concatenate([b.indices for b in batches])
    assert 5 not in idx.tolist()
    for b in batches:
        np.testing.assert_array_equal(b.labels, expected_float(t)[b.indices])


def test_torch_sees_float_targets(files: list[str]) -> None:
    torch = pytest.importorskip("torch")
    src = trdata.FileList(files, TARGETS["multi-hot-bool"])
    b = collect(src, workers=1)[0]
    images, labels = b.torch()
    assert labels.dtype == torch.float32 and tuple(labels.shape) == (4, 7)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(torch.zeros(4, 7), labels)
    assert torch.isfinite(loss)


def test_cuda_labels_are_the_float_targets_on_the_batch_device(files: list[str]) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("CUDA not available")
    src = trdata.FileList(files, TARGETS["shape-2x3"])
    with trdata.Loader(src, device="cuda:0", workers=2, last_batch="pad", **KW) as ld:  # type: ignore[arg-type]
        batches = list(ld)
    for b in batches:
        assert b.labels.device == b.images.device and b.labels.dtype == torch.float32
        assert tuple(b.labels.shape) == (4, 2, 3)
        np.testing.assert_array_equal(b.labels.cpu().numpy(), expected_float(TARGETS["shape-2x3"])[b.indices])
    ints = trdata.FileList(files, [i % 3 for i in range(N)])
    with trdata.Loader(ints, device="cuda:0", workers=2, **KW) as ld:  # type: ignore[arg-type]
        b = next(iter(ld))
        assert b.labels.dtype == torch.int64 and b.labels.is_cuda


@pytest.mark.parametrize(
    ("targets", "says"),
    [
        (np.zeros((N + 1, 3)), "labels must"),  # the core's count rule
        (np.zeros((N - 1,)), "labels must"),
        ([[1.0, 2.0]] * (N - 1) + [[1.0]], "shape"),  # ragged rows
        ([np.zeros(3)] * (N - 1) + [np.zeros(4)], "shape"),
        (np.array(["a"] * N), "dtype"),
        (np.array([object()] * N), "dtype"),
        (np.float32(3.0), "0-d"),
        ([0.5] * (N - 1) + [float("nan")], "not finite"),
        (np.full((N, 2), np.inf), "not finite"),
        (np.full(N, 1e39), "not finite"),  # beyond float32
        ([0.5] * (N - 1) + ["x"], "string"),
        ([0.5] * (N - 1) + [1 + 2j], "not a number"),
        ({0.5, 1.5}, "ordered"),
        ("0.5", "string"),
    ],
)
def test_bad_targets_are_config_errors(files: list[str], targets: object, says: str) -> None:
    for make in (lambda t: trdata.FileList(files, t), lambda t: trdata.Arrays(pixels(), t)):
        with pytest.raises(trdata.ConfigError, match=says) as e:
            make(targets)
        assert e.value.parameter == "labels"


def test_targets_are_read_only_and_copied(files: list[str]) -> None:
    t = np.array(SOFT)
    src = trdata.Arrays(pixels(), t)
    t[:] = 0  # the user's array changes after the source was made: batches keep the targets given
    np.testing.assert_array_equal(collect(src, workers=1)[0].labels, expected_float(SOFT)[:4])
    with pytest.raises(ValueError):
        src.targets[0, 0] = 1.0


# ---- WebDataset .json targets -------------------------------------------------------------------------------


def shard(path: Path, targets: list[object], ext: str = "json") -> str:
    with tarfile.open(path, "w") as tar:
        for i, t in enumerate(targets):
            for name, data in (
                (f"s{i:04d}.png", png(photo(i, 22, 18))),
                (f"s{i:04d}.{ext}", json.dumps(t).encode()),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_webdataset_json_float_targets(tmp_path: Path) -> None:
    soft = [list(map(float, r)) for r in SOFT]
    a = shard(tmp_path / "a.tar", soft[:7])
    b = shard(tmp_path / "b.tar", soft[7:])
    src = trdata.WebDataset([a, b], target_key="json", cache_dir=False)
    np.testing.assert_array_equal(src.targets, expected_float(soft))
    for batch in collect(src, workers=2, shuffle=True):
        np.testing.assert_array_equal(batch.labels, expected_float(soft)[batch.indices])
    mixed = shard(tmp_path / "m.tar", [1, 0.5, 0, 2])  # ints and floats: float32 scalars
    assert trdata.WebDataset(mixed, target_key="json", cache_dir=False).targets.tolist() == [1, 0.5, 0, 2]
    ints = shard(tmp_path / "i.tar", [3, 1, 2])
    assert trdata.WebDataset(ints, target_key="json", cache_dir=False).targets.dtype == np.int64
    hot = shard(tmp_path / "h.tar", [[True, False], [False, True]])
    assert trdata.WebDataset(hot, target_key="json", cache_dir=False).targets.tolist() == [[1, 0], [0, 1]]
    for bad, says in (
        ([[1.0, 2.0], [1.0]], "shape"),
        ([[1.0, [2.0]], [1.0, 2.0]], "shape"),
        ([1.0, "x"], "not an integer, a number or a list"),
        ([True, False], "not an integer, a number or a list"),
        ([1e39, 0.0], "not finite"),
        ([{"a": 1}], "not an integer, a number or a list"),
    ):
        p = shard(tmp_path / "bad.tar", bad)  # type: ignore[arg-type]
        with pytest.raises(trdata.DecodeError, match=says):
            trdata.WebDataset(p, target_key="json", cache_dir=False)


# ---- classes / class_to_idx everywhere ----------------------------------------------------------------------


def write_mnist(root: Path, n: int = 6) -> None:
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(n * 28 * 28))
    (raw / "train-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, n) + bytes(range(n)))


def test_every_source_with_classes_has_class_to_idx(tmp_path: Path, files: list[str]) -> None:
    for c in ("cat", "dog"):
        (tmp_path / "folder" / c).mkdir(parents=True)
        (tmp_path / "folder" / c / "x.png").write_bytes(Path(files[0]).read_bytes())
    write_mnist(tmp_path / "mnist")
    names = ["a", "b", "c"]
    made = {
        "ImageFolder": trdata.ImageFolder(tmp_path / "folder"),
        "FileList": trdata.FileList(files[:3], [0, 1, 2], classes=names),
        "Arrays": trdata.Arrays(pixels(3), [0, 1, 2], classes=names),
        "Bytes": trdata.Bytes([Path(f).read_bytes() for f in files[:3]], [2, 1, 0], classes=names),
        "WebDataset": trdata.WebDataset(
            shard(tmp_path / "w.tar", [0, 1], ext="cls"), classes=names, cache_dir=False
        ),
        "MNIST": trdata.MNIST(tmp_path / "mnist"),
    }
    for kind, src in made.items():
        assert src.class_to_idx == {c: i for i, c in enumerate(src.classes)} and src.classes, kind
        assert src.targets.dtype == np.int64 and len(src.targets) == len(src), kind
    assert made["ImageFolder"].class_to_idx == {"cat": 0, "dog": 1}
    assert made["MNIST"].classes[0] == "0 - zero"
    assert trdata.FileList(files[:2]).class_to_idx == {}  # none given: empty, as for other unnamed sources
    with pytest.raises(trdata.ConfigError) as e:
        trdata.FileList(files[:2], classes=["a", "a"])
    assert e.value.parameter == "classes"
