"""Any map-style dataset is a source (``Loader(MyDataset())``): ``__getitem__`` runs on trdata's worker threads
exactly once per sample per epoch, gives the same batches as the native source of the same data, and its failures
are sample errors under ``on_error``. The general contract (worker counts, ranks, resume) is in
``test_source_contract.py``, which runs it on map-style datasets too."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import Items, jpeg, make_mnist, photo, png, write_jpegs
from PIL import Image
from trdata.errors import ConfigError, DecodeError

KW = dict(
    batch_size=4,
    transforms=[trdata.RandomResizedCrop(12, scale=(0.3, 1.0)), trdata.RandomHorizontalFlip()],
    dtype="uint8",
    layout="NHWC",
    shuffle=True,
    seed=5,
    reproducible=True,
    last_batch="partial",
)


def batches(
    source: object, workers: int = 2, **kw: object
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    with trdata.Loader(source, workers=workers, **{**KW, **kw}) as ld:  # type: ignore[arg-type]
        return [
            (b.images[: b.valid].copy(), b.labels[: b.valid].copy(), b.indices[: b.valid].copy()) for b in ld
        ]


def same(a: list[tuple[np.ndarray, ...]], b: list[tuple[np.ndarray, ...]]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for p, q in zip(a, b) for x, y in zip(p, q))


@pytest.fixture(scope="module")
def arrays() -> list[np.ndarray]:
    return [photo(i, 24 + i % 7, 20 + i % 5) for i in range(19)]


def test_getitem_runs_exactly_once_per_sample_per_epoch_on_the_workers(arrays: list[np.ndarray]) -> None:
    ds = Items([(jpeg(a), i % 4) for i, a in enumerate(arrays)])
    main = threading.get_ident()
    seen_threads: set[int] = set()
    original = ds.__getitem__

    class Watched(Items):
        def __getitem__(self, i: int) -> tuple[object, object]:
            seen_threads.add(threading.get_ident())
            return original(i)

    # item 0 is read once on this thread when the source is made (to find its form), and that read is sample 0's
    # read of the first epoch; every read after it is made by the loader's own threads
    with trdata.Loader(ds, workers=3, **KW) as ld:  # type: ignore[arg-type]
        assert ds.calls == Counter({0: 1})
        ds.__class__ = Watched
        for epoch in range(2):
            ld.set_epoch(epoch)
            got = [int(i) for b in ld for i in b.indices[: b.valid]]
            assert sorted(got) == list(range(len(arrays)))
            assert ds.calls == Counter({i: epoch + 1 for i in range(len(arrays))})
    assert seen_threads and main not in seen_threads  # the loader's own threads call it


def test_encoded_bytes_give_the_bytes_sources_batches(arrays: list[np.ndarray]) -> None:
    blobs, labels = [jpeg(a) for a in arrays], [i % 4 for i in range(len(arrays))]
    native = batches(trdata.Bytes(blobs, labels), workers=1)
    assert same(batches(Items(list(zip(blobs, labels))), workers=1), native)
    assert same(
        batches(Items([(bytearray(b), np.int32(t)) for b, t in zip(blobs, labels)]), workers=3), native
    )


def test_paths_give_the_file_lists_batches(tmp_path: Path, arrays: list[np.ndarray]) -> None:
    paths = []
    for i, a in enumerate(arrays):
        p = tmp_path / f"{i}.png"
        Image.fromarray(a).save(p)
        paths.append(p)
    labels = [i % 3 for i in range(len(paths))]
    native = batches(trdata.FileList([str(p) for p in paths], labels))
    assert same(batches(Items(list(zip(paths, labels)))), native)
    assert same(batches(Items([(str(p), t) for p, t in zip(paths, labels)])), native)


def test_arrays_pil_images_and_tensors_give_the_arrays_sources_batches() -> None:
    rgb = [photo(i, 20, 16) for i in range(9)]
    native = batches(trdata.Arrays(np.stack(rgb), list(range(9))))
    assert same(batches(Items([(a, i) for i, a in enumerate(rgb)])), native)
    assert same(batches(Items([(Image.fromarray(a), i) for i, a in enumerate(rgb)])), native)
    # a palette image is converted to RGB as torchvision's pil_loader does
    pal = [Image.fromarray(a).convert("P") for a in rgb]
    assert same(
        batches(Items([(p, i) for i, p in enumerate(pal)])),
        batches(trdata.Arrays(np.stack([np.asarray(p.convert("RGB")) for p in pal]), list(range(9)))),
    )
    gray = np.stack([a[..., 1] for a in rgb])
    native_gray = batches(trdata.Arrays(gray, list(range(9))), channels=1)
    assert same(batches(Items([(g, i) for i, g in enumerate(gray)]), channels=1), native_gray)
    assert same(
        batches(Items([(Image.fromarray(g), i) for i, g in enumerate(gray)]), channels=1), native_gray
    )
    torch = pytest.importorskip("torch")
    chw = [(torch.from_numpy(a).permute(2, 0, 1), torch.tensor(i)) for i, a in enumerate(rgb)]
    assert same(batches(Items(chw)), native)  # type: ignore[arg-type]


def test_torchvision_datasets_work_as_they_are(tmp_path: Path) -> None:
    datasets = pytest.importorskip("torchvision.datasets")
    root = tmp_path / "folder"
    write_jpegs(root / "cats", 5)
    write_jpegs(root / "dogs", 4)
    theirs = datasets.ImageFolder(str(root))
    assert same(batches(theirs), batches(trdata.ImageFolder(root)))
    assert trdata.DatasetSource(theirs).classes == ["cats", "dogs"]
    for train in (True, False):  # torchvision's MNIST checks both splits' files
        make_mnist(tmp_path / "m", n=10, train=train)
    mnist = datasets.MNIST(str(tmp_path / "m"))  # __getitem__ returns PIL "L" images
    kw = dict(transforms=[trdata.CenterCrop(20)], channels=1, shuffle=False)
    assert same(batches(mnist, **kw), batches(trdata.MNIST(tmp_path / "m"), **kw))
    # a dataset's own transform is refused: the pipeline belongs to the loader (the twin named)
    with pytest.raises(ConfigError, match=r"ImageFolder\.transform is set.*trdata\.ImageFolder\("):
        trdata.Loader(datasets.ImageFolder(str(root), transform=lambda im: im))


def test_an_exception_in_getitem_is_a_sample_error_under_raise_and_skip(arrays: list[np.ndarray]) -> None:
    class Flaky(Items):
        def __getitem__(self, i: int) -> tuple[object, object]:
            if i == 7:
                raise KeyError(f"no sample {i}")
            return super().__getitem__(i)

    items = [(jpeg(a), 1) for a in arrays]
    with pytest.raises(DecodeError) as e:
        batches(Flaky(items))
    text = str(e.value)
    assert "sample 7 (<dataset>[7])" in text and "Flaky[7] raised" in text
    assert "Traceback" in text and "KeyError: 'no sample 7'" in text and "cannot read" in text
    with trdata.Loader(Flaky(items), workers=2, on_error="skip", **KW) as ld:  # type: ignore[arg-type]
        got = [int(i) for b in ld for i in b.indices[: b.valid]]
        assert ld.stats()["errors_skipped"] == 1
    assert len(got) == len(items) and 7 not in got  # replaced by another sample, counted once


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ((np.zeros((8, 8, 3), np.float32), 0), "dtype float32 must be uint8"),
        ((np.zeros((8, 8, 4), np.uint8), 0), "must be (H, W) or (H, W, C) with C 1 or 3"),
        ((np.zeros((0, 8, 3), np.uint8), 0), "sides 1..=65535"),
        (
            (np.broadcast_to(np.zeros(1, np.uint8), (30_000, 30_000, 3)), 0),
            "over the 1073741824-byte sample limit",
        ),
        ((b"\xff\xd8 not a jpeg", 0), "UnknownFormat"),
        ((b"", 0), "Empty"),
        (("/nonexistent/x.jpg", 0), "/nonexistent/x.jpg"),
        ((3.5, 0), "the image is a float"),
        ((b"x", "cat"), "'cat' is a str, not a class index"),
        ((b"x", True), "is a bool"),
        ((b"x", 2**70), "the target 1180591620717411303424 does not fit a class index (int64)"),
        ([b"x", 0], "returned a list, not (image, target)"),
        ((b"x", 0, ["not", "a dict"]), "returned a tuple of 3 items"),
        ((b"x", 0, {}, {}), "returned a tuple of 4 items"),
    ],
)
def test_what_getitem_returns_is_checked_per_sample(item: object, message: str) -> None:
    good = (jpeg(photo(0, 16, 16)), 0)
    ds = Items([good, item, good])  # type: ignore[list-item]
    with pytest.raises(DecodeError) as e:
        batches(ds, shuffle=False)
    assert "sample 1 (<dataset>[1])" in str(e.value) and message in str(e.value)


@pytest.mark.parametrize(
    ("target", "shown"),
    [
        (2**63, "the target 9223372036854775808 does not fit a class index (int64)"),
        (b"\xff" * 2_000_000, "the target b'\\xff\\xff"),
        (list(range(10**6)), "the target [0, 1, 2, 3, 4, 5, 6, 7, ...] is a list"),
    ],
)
def test_a_sample_error_shows_what_getitem_returned_bounded(target: object, shown: str) -> None:
    """A label beyond int64 next to a 2 MB image made a 2.26 MB message (the repr of the whole returned tuple);
    every value a message shows is now bounded (``trdata.errors._shown``)."""
    image = np.random.default_rng(0).integers(0, 256, (1024, 1024, 3), np.uint8)
    png = io.BytesIO()
    Image.fromarray(image).save(png, "PNG")
    assert len(png.getvalue()) > 2_000_000
    ds = Items([(png.getvalue(), target)])
    with pytest.raises(DecodeError) as e:
        batches(ds, shuffle=False)
    text = str(e.value)
    assert shown in text and len(text) < 5_000, len(text)


def test_a_source_that_is_not_a_dataset_is_refused_before_any_work() -> None:
    with pytest.raises(ConfigError, match="must be a trdata source .* or a map-style dataset"):
        trdata.Loader([b"x", b"y"])  # type: ignore[arg-type]

    class Empty:
        def __len__(self) -> int:
            return 0

        def __getitem__(self, i: int) -> tuple[bytes, int]:
            raise IndexError(i)

    with pytest.raises(ConfigError, match="0 samples must have at least one") as e:
        trdata.Loader(Empty(), transforms=[trdata.CenterCrop(4)])  # type: ignore[arg-type]
    assert e.value.parameter == "source"  # the Loader's; trdata.DatasetSource(Empty()) names its `dataset`


def test_a_dataset_packs_like_the_native_source(tmp_path: Path, arrays: list[np.ndarray]) -> None:
    blobs, labels = [jpeg(a) for a in arrays], [i % 5 for i in range(len(arrays))]
    trdata.pack(trdata.DatasetSource(Items(list(zip(blobs, labels)))), tmp_path / "ds.trd", progress=False)
    trdata.pack(trdata.Bytes(blobs, labels), tmp_path / "b.trd", progress=False)
    for mode in ("full", "partial"):
        a = batches(trdata.Packed(tmp_path / "ds.trd", mode))
        assert same(a, batches(trdata.Packed(tmp_path / "b.trd", mode)))
        assert sorted(int(t) for b in a for t in b[1]) == sorted(labels)
    # a label outside the named classes is refused before anything is published
    bad = Items([(blobs[0], 0), (blobs[1], 9)])
    bad.classes = ["a", "b"]  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="label 9 at record 1"):
        trdata.pack(trdata.DatasetSource(bad), tmp_path / "bad.trd", progress=False)
    assert not (tmp_path / "bad.trd").exists()


SCRIPT = """
import sys, trdata
sys.path.insert(0, {tests!r})
from _fixtures import Items, jpeg, photo
ds = Items([(jpeg(photo(i, 64, 64)), 0) for i in range(400)])
ld = trdata.Loader(ds, batch_size=4, workers=2, transforms=[trdata.RandomResizedCrop(32)], prefetch=2)
it = iter(ld)
next(it)
{ending}
print("left", flush=True)
"""


@pytest.mark.parametrize(
    "ending", ["del it, ld; import gc; gc.collect()", "pass  # exit with the workers busy"]
)
def test_a_loader_dropped_or_left_running_at_exit_never_hangs(ending: str) -> None:
    """Workers attach to the interpreter to call __getitem__: dropping the loader (which joins them) detaches
    first, and exiting with the loader still running leaves no thread hanging the process."""
    tests = str(Path(__file__).parent)
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(tests=tests, ending=ending)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "left"


def test_a_dataset_sharing_one_file_handle_is_not_interleaved(tmp_path: Path) -> None:
    """A DataLoader-style dataset (one open file, seek then read: safe in worker processes) gets its calls
    serialized by default, so each row keeps its own image; ``thread_safe=True`` lifts the lock."""
    blobs = [jpeg(np.full((16, 16, 3), 8 * k, np.uint8)) for k in range(26)]
    pack = tmp_path / "blob.bin"
    pack.write_bytes(b"".join(blobs))
    offsets = np.cumsum([0] + [len(b) for b in blobs])

    class OneHandle:
        def __init__(self) -> None:
            self.f = open(pack, "rb", buffering=0)  # noqa: SIM115 (closed below)

        def __len__(self) -> int:
            return 26 * 20

        def __getitem__(self, i: int) -> tuple[bytes, int]:
            k = i % 26
            self.f.seek(int(offsets[k]))
            return self.f.read(int(offsets[k + 1] - offsets[k])), k

    ds = OneHandle()
    try:
        with trdata.Loader(
            ds, batch_size=20, workers=4, transforms=[trdata.CenterCrop(8)], dtype="uint8"
        ) as ld:  # type: ignore[arg-type]
            for b in ld:
                images = np.asarray(b.images).reshape(len(b), -1).astype(int)
                np.testing.assert_allclose(images.mean(axis=1), 8 * b.labels, atol=3)
    finally:
        ds.f.close()
    assert trdata.DatasetSource(Items([(jpeg(photo(0, 8, 8)), 0)]), thread_safe=True)._lock is not None


def test_extras_travel_with_the_read_that_made_the_row() -> None:
    """A dataset whose reads differ (a random pick per call): every row's extras are its own read's, also in pad
    rows and across epochs, and nothing is kept once delivered."""
    import random

    pics = [jpeg(np.full((16, 16, 3), 9 * k, np.uint8)) for k in range(26)]

    class Random:
        def __len__(self) -> int:
            return 45

        def __getitem__(self, i: int) -> tuple[bytes, int, dict[str, int]]:
            k = random.randrange(26)
            return pics[k], k, {"k": k}

    src = trdata.DatasetSource(Random())
    kw = dict(batch_size=8, workers=3, transforms=[trdata.CenterCrop(8)], last_batch="pad", shuffle=True)
    with trdata.Loader(src, **kw) as ld:  # type: ignore[arg-type]
        for epoch in range(3):
            ld.set_epoch(epoch)
            for b in ld:
                assert b.extras["k"] == b.labels.tolist()
    assert not src._read_extras


SCRIPT_STEP = """
import sys, trdata, time
sys.path.insert(0, {tests!r})
from _fixtures import photo
import numpy as np
def slow(x):
    time.sleep(0.01)
    return x
ld = trdata.Loader(trdata.Arrays(np.stack([photo(i, 32, 32) for i in range(400)])), batch_size=4, workers=2,
                   transforms=[trdata.PythonStep(slow)], prefetch=2)
next(iter(ld))
print("left", flush=True)
"""


def test_exit_with_a_python_step_loader_running_never_aborts() -> None:
    tests = str(Path(__file__).parent)
    for _ in range(3):
        run = subprocess.run(
            [sys.executable, "-c", SCRIPT_STEP.format(tests=tests)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "left"


# Items that are dicts with named keys, as Hugging Face `datasets` rows are ({"image": PIL, "label": int}).


def test_dict_items_with_named_keys_give_the_arrays_sources_batches_and_extras() -> None:
    rgb = [photo(i, 20, 16) for i in range(9)]
    native = batches(trdata.Arrays(np.stack(rgb), list(range(9))))
    rows = Items(
        [{"image": Image.fromarray(a), "label": i, "caption": f"photo {i}"} for i, a in enumerate(rgb)]
    )
    with trdata.Loader(rows, workers=2, **KW) as ld:  # type: ignore[arg-type]
        got = []
        for b in ld:
            got.append((b.images[: b.valid].copy(), b.labels[: b.valid].copy(), b.indices[: b.valid].copy()))
            assert b.extras == {"caption": [f"photo {i}" for i in b.indices.tolist()]}  # the other keys
    assert same(got, native)
    assert rows.calls == Counter(dict.fromkeys(range(9), 1))  # item 0's read when made is its epoch's read
    # the other default names (CIFAR's "img"; "labels"), and datasets' Image(decode=False) values
    assert same(batches(Items([{"img": a, "labels": i} for i, a in enumerate(rgb)])), native)
    encoded = Items([{"image": {"bytes": png(a), "path": None}, "label": i} for i, a in enumerate(rgb)])
    assert same(batches(encoded), native)
    # any names, given
    named = Items([{"pixels": a, "fine_label": i, "coarse_label": i // 3} for i, a in enumerate(rgb)])
    source = trdata.DatasetSource(named, image_key="pixels", label_key="fine_label")
    with trdata.Loader(source, workers=2, **KW) as ld:  # type: ignore[arg-type]
        for b in ld:
            assert b.extras["coarse_label"] == [i // 3 for i in b.indices.tolist()]
    assert same(batches(trdata.DatasetSource(named, image_key="pixels", label_key="fine_label")), native)


def test_a_dict_item_without_the_keys_is_a_config_error_when_the_loader_is_built() -> None:
    a = photo(0, 20, 16)
    with pytest.raises(ConfigError, match=r"Items\[0\] is a dict with the keys \['pixels', 'y'\], without 'image' or "
                       r"'img'.*image_key=") as e:  # fmt: skip
        trdata.Loader(Items([{"pixels": a, "y": 0}] * 3), batch_size=2)
    assert e.value.parameter == "source"
    with pytest.raises(ConfigError, match=r"without 'label' or 'labels'.*label_key=") as e:
        trdata.DatasetSource(Items([{"image": a, "y": 0}] * 3))
    assert e.value.parameter == "label_key"
    with pytest.raises(ConfigError, match=r"without 'picture'") as e:
        trdata.DatasetSource(Items([{"image": a, "label": 0}] * 3), image_key="picture")
    assert e.value.parameter == "image_key"
    with pytest.raises(ConfigError, match=r"Items\[0\] is a tuple, not a dict") as e:
        trdata.DatasetSource(Items([(a, 0)] * 3), label_key="label")
    assert e.value.parameter == "label_key"
    with pytest.raises(ConfigError, match="invalid image_key: 3 must be a str or None"):
        trdata.DatasetSource(Items([(a, 0)] * 3), image_key=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"invalid label_key: \[1\] must be a str or None"):
        trdata.DatasetSource(Items([(a, 0)] * 3), label_key=[1])  # type: ignore[arg-type]
    # a later item without the keys is that sample's error, under on_error
    rows = Items([{"image": a, "label": 0}, {"image": a, "label": 1}, {"img": a, "label": 2}])
    with trdata.Loader(rows, batch_size=3, transforms=[trdata.CenterCrop(8)], on_error="skip") as ld:
        list(ld)
        assert ld.stats()["errors_skipped"] == 1


def test_a_datasets_class_label_feature_names_the_classes() -> None:
    class ClassLabel:  # the attribute of datasets.ClassLabel that names the classes
        names = ["cat", "dog"]

    class Rows(Items):
        features = {"image": object(), "label": ClassLabel()}

    a = photo(0, 20, 16)
    source = trdata.DatasetSource(Rows([{"image": a, "label": i % 2} for i in range(4)]))
    assert source.classes == ["cat", "dog"] and source.class_to_idx == {"cat": 0, "dog": 1}
