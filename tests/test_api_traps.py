"""API traps a new user walks into (the issue "the house in order"): each test uses the API as the PyTorch
tutorials and DataLoader habits suggest, on real files written here, and checks that trdata either does the
expected thing or says what to write instead."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import make_cifar, make_mnist, write_jpegs
from trdata.errors import ConfigError

torch = pytest.importorskip("torch")
v2 = pytest.importorskip("torchvision.transforms.v2")
T = pytest.importorskip("torchvision.transforms")


# ------------------------------------------------------------------ 1. uniform-size sources need no crop


def _tutorial_compose(mean: tuple[float, ...], std: tuple[float, ...]) -> object:
    """The PyTorch MNIST / CIFAR-10 tutorials' pipeline."""
    return T.Compose([T.ToTensor(), T.Normalize(mean, std)])


def test_mnist_tutorial_compose_needs_no_crop(tmp_path: Path) -> None:
    images, labels = make_mnist(tmp_path, n=12)
    compose = _tutorial_compose((0.1307,), (0.3081,))
    with trdata.Loader(trdata.MNIST(tmp_path), batch_size=4, transforms=compose, workers=1) as loader:
        batch = next(iter(loader))
    x, y = batch.torch()
    assert x.shape == (4, 1, 28, 28) and x.dtype == torch.float32
    want = (torch.from_numpy(images[:4]).float()[:, None] / 255 - 0.1307) / 0.3081
    torch.testing.assert_close(x, want, atol=1e-5, rtol=1e-5)
    assert y.tolist() == labels[:4].tolist()


def test_cifar_tutorial_compose_and_flips_need_no_crop(tmp_path: Path) -> None:
    expected = make_cifar(tmp_path, n=8)
    compose = _tutorial_compose((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    with trdata.Loader(trdata.CIFAR10(tmp_path, train=False), batch_size=8, transforms=compose) as loader:
        x, _ = next(iter(loader)).torch()
    assert x.shape == (8, 3, 32, 32)
    data, _ = expected["test"]
    want = torch.from_numpy(data[:8].reshape(8, 3, 32, 32)).float() / 255 * 2 - 1
    torch.testing.assert_close(x, want, atol=1e-5, rtol=1e-5)
    # a flip, or a pixel op, keeps the source's size too
    for ops in ([T.RandomHorizontalFlip()], [T.ColorJitter(0.4, 0.4, 0.4)], []):
        compose = T.Compose([*ops, T.ToTensor()])
        with trdata.Loader(trdata.CIFAR10(tmp_path), batch_size=4, transforms=compose) as loader:
            assert next(iter(loader)).images.shape == (4, 3, 32, 32)


def test_arrays_without_transforms_keep_their_size() -> None:
    images = np.random.default_rng(0).integers(0, 256, size=(6, 20, 24, 3), dtype=np.uint8)
    source = trdata.Arrays(images, np.arange(6))
    with trdata.Loader(source, batch_size=6, dtype="uint8", layout="NHWC") as loader:
        batch = next(iter(loader))
    assert np.array_equal(batch.images, images)


def test_files_of_different_sizes_still_need_a_crop(tmp_path: Path) -> None:
    paths = write_jpegs(tmp_path / "a", 4, size=lambda i: (40 + i, 30))
    compose = _tutorial_compose((0.5,) * 3, (0.5,) * 3)
    with pytest.raises(ConfigError, match="must fix the output size") as e:
        trdata.Loader(trdata.FileList(paths, labels=[0] * 4), transforms=compose)
    assert e.value.parameter == "transforms"
    # an uniform source whose list makes sizes differ (an expanding rotation) is still refused
    images = np.zeros((2, 20, 24, 3), dtype=np.uint8)
    with pytest.raises(ConfigError, match="must fix the output size"):
        trdata.Loader(trdata.Arrays(images, [0, 1]), transforms=[trdata.RandomRotation(30, expand=True)])


def test_packed_raw_pixels_of_one_size_need_no_crop(tmp_path: Path) -> None:
    make_mnist(tmp_path, n=6)
    trdata.pack(trdata.MNIST(tmp_path), tmp_path / "mnist.trd", progress=False)
    compose = _tutorial_compose((0.1307,), (0.3081,))
    with trdata.Loader(trdata.Packed(tmp_path / "mnist.trd"), batch_size=6, transforms=compose) as loader:
        packed = next(iter(loader)).images
    with trdata.Loader(trdata.MNIST(tmp_path), batch_size=6, transforms=compose) as loader:
        direct = next(iter(loader)).images
    assert packed.shape == (6, 1, 28, 28) and np.array_equal(packed, direct)


# ------------------------------------------------------------------ 2. from_torchvision's result is a pipeline


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _first_batch(source: trdata.Source, **kw: object) -> np.ndarray:
    kw = {"batch_size": 4, "seed": 5, "shuffle": True, "reproducible": True, "workers": 2, **kw}
    with trdata.Loader(source, **kw) as loader:
        images = next(iter(loader)).images
        return np.array(images[0] if isinstance(images, tuple) else images)  # views=: view 0


@pytest.fixture
def files(tmp_path: Path) -> trdata.FileList:
    return trdata.FileList(write_jpegs(tmp_path / "jpegs", 8, size=(48, 40)), [0, 1] * 4)


def test_converted_pipeline_is_taken_like_the_compose(files: trdata.FileList) -> None:
    for compose in (
        v2.Compose(
            [
                v2.RandomResizedCrop(16),
                v2.ToImage(),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(MEAN, STD),
            ]
        ),
        T.Compose([T.Resize(20), T.CenterCrop(16), T.PILToTensor()]),  # uint8, no normalize
        T.Compose([T.CenterCrop(16)]),  # no dtype at all (Converted.dtype is None)
    ):
        converted = trdata.transforms.from_torchvision(compose)
        want = _first_batch(files, transforms=compose)
        got = _first_batch(files, transforms=converted)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        # as one view of views= too
        assert np.array_equal(_first_batch(files, views=[converted]), want)


# ------------------------------------------------------------------ 3. dtypes as torchvision and numpy spell them


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_to_dtype_half_types_set_the_loader_dtype(files: trdata.FileList, name: str) -> None:
    dt = getattr(torch, name)
    ours = [trdata.CenterCrop(16)]
    want = _first_batch(files, transforms=ours, dtype=name, normalize=(MEAN, STD))
    for compose in (
        v2.Compose([v2.CenterCrop(16), v2.ToImage(), v2.ToDtype(dt, scale=True), v2.Normalize(MEAN, STD)]),
        T.Compose([T.CenterCrop(16), T.PILToTensor(), T.ConvertImageDtype(dt), T.Normalize(MEAN, STD)]),
    ):
        with trdata.Loader(files, batch_size=4, transforms=compose, shuffle=True, seed=5) as loader:
            assert loader.dtype == name
            x, _ = next(iter(loader)).torch()
        assert x.dtype == dt and x.shape == (4, 3, 16, 16)
        assert np.array_equal(_first_batch(files, transforms=compose), want)
    # unscaled float values (0..255) are not a Loader dtype
    with pytest.raises(ConfigError, match="scale=True") as e:
        trdata.Loader(files, transforms=v2.Compose([v2.CenterCrop(16), v2.ToImage(), v2.ToDtype(dt)]))
    assert e.value.parameter == "transforms"


@pytest.mark.parametrize(
    ("given", "name"),
    [
        (torch.float16, "float16"),
        (torch.half, "float16"),
        (torch.bfloat16, "bfloat16"),
        (torch.float32, "float32"),
        (torch.uint8, "uint8"),
        (np.dtype("float16"), "float16"),
        (np.dtype(np.float32), "float32"),
        (np.dtype("uint8"), "uint8"),
        (np.float32, "float32"),
        (np.float16, "float16"),
        (np.uint8, "uint8"),
    ],
)
def test_dtype_objects_name_a_dtype(files: trdata.FileList, given: object, name: str) -> None:
    with trdata.Loader(files, batch_size=4, transforms=[trdata.CenterCrop(8)], dtype=given) as loader:
        assert loader.dtype == name
        x, _ = next(iter(loader)).torch()
    assert x.dtype == getattr(torch, name)


def test_dtype_objects_of_other_types_are_refused_naming_dtype(files: trdata.FileList) -> None:
    for given in (torch.float64, np.dtype("int32"), np.int32, np.float64):
        with pytest.raises(ConfigError, match="invalid dtype") as e:
            trdata.Loader(files, transforms=[trdata.CenterCrop(8)], dtype=given)
        assert e.value.parameter == "dtype"


def test_a_dtype_contradicting_the_composes_to_dtype_is_refused(files: trdata.FileList) -> None:
    """As a normalize= differing from the Compose's Normalize is refused: neither may silently win."""
    compose = v2.Compose([v2.CenterCrop(8), v2.ToImage(), v2.ToDtype(torch.float16, scale=True)])
    with pytest.raises(ConfigError, match="ToDtype") as e:
        trdata.Loader(files, transforms=compose, dtype="bfloat16")
    assert e.value.parameter == "dtype"
    with pytest.raises(ConfigError, match="ToDtype") as e:
        trdata.Loader(files, views=[compose], dtype="uint8")
    assert e.value.parameter == "dtype"
    # the same dtype, spelled either way, agrees; left out, the Compose's wins
    for dtype in ("float16", torch.float16):
        with trdata.Loader(files, transforms=compose, dtype=dtype) as loader:
            assert loader.dtype == "float16"
    with trdata.Loader(files, transforms=compose) as loader:
        assert loader.dtype == "float16"


# ------------------------------------------------------------------ 4. DataLoader habits


@pytest.mark.parametrize(
    ("kwargs", "parameter", "says"),
    [
        ({"num_workers": 4}, "workers", "workers=N"),
        ({"drop_last": True}, "last_batch", 'last_batch="drop"'),
        ({"drop_last": False}, "last_batch", 'last_batch="partial"'),
        ({"pin_memory": True}, "device", "device='cuda'"),
        ({"collate_fn": lambda b: b}, "batch_transform", "batch_transform=fn"),
        ({"sampler": object()}, "shuffle", "rank=/world_size="),
        ({"persistent_workers": True}, None, "always persistent"),
        ({"worker_init_fn": print}, None, "no per-worker Python"),
        ({"prefetch_factor": 4}, "prefetch", "prefetch=N"),
    ],
)
def test_dataloader_arguments_name_the_trdata_equivalent(
    files: trdata.FileList, kwargs: dict[str, object], parameter: str | None, says: str
) -> None:
    with pytest.raises(TypeError) as e:
        trdata.Loader(files, batch_size=4, transforms=[trdata.CenterCrop(8)], **kwargs)
    err = e.value
    assert isinstance(err, trdata.errors.DataLoaderArgumentError) and isinstance(err, trdata.TrdataError)
    assert (err.argument, err.parameter) == (next(iter(kwargs)), parameter)
    assert "DataLoader" in str(err) and says in str(err), str(err)


def test_other_unknown_arguments_are_pythons_type_error_with_a_hint(files: trdata.FileList) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'.*'batch_size'") as e:
        trdata.Loader(files, batchsize=4)
    assert not isinstance(e.value, trdata.TrdataError)


def test_workers_0_says_there_is_no_in_process_mode(files: trdata.FileList) -> None:
    with pytest.raises(ConfigError, match=r"invalid workers: 0 must be in 1\.\.=") as e:
        trdata.Loader(files, transforms=[trdata.CenterCrop(8)], workers=0)
    assert e.value.parameter == "workers"
    assert "no in-process mode" in str(e.value) and "workers=1" in str(e.value)
    # one worker runs, and a bad file is named
    (Path(files.paths[0])).write_bytes(b"not a jpeg")
    with trdata.Loader(files, batch_size=4, transforms=[trdata.CenterCrop(8)], workers=1) as loader:
        with pytest.raises(trdata.DecodeError, match=Path(files.paths[0]).name):
            list(loader)


def test_holding_too_many_batches_names_the_setting_and_the_prefetch(files: trdata.FileList) -> None:
    """The message's numbers add up to what the user set: the allowance plus what the loader keeps in flight."""
    with trdata.Loader(
        files, batch_size=1, transforms=[trdata.CenterCrop(8)], dtype="uint8", max_held_batches=1, prefetch=3
    ) as loader:
        it = iter(loader)
        held = [
            next(it) for _ in range(4)
        ]  # 3 in flight + 1 allowed (of 8 batches): every buffer is the user's
        with pytest.raises(ConfigError, match="held by Python") as e:
            next(it)
        assert e.value.parameter == "max_held_batches"
        assert "all 4 batch buffers" in str(e.value)
        assert "max_held_batches=1 plus the 3 the loader keeps in flight" in str(e.value)
        del held


# ------------------------------------------------------------------ 5. a wrong source


def test_a_wrong_source_lists_every_trdata_source(files: trdata.FileList) -> None:
    with pytest.raises(ConfigError) as e:
        trdata.Loader([1, 2, 3])  # type: ignore[arg-type]
    assert e.value.parameter == "source" and str(e.value).startswith("invalid source: a list must be")
    public = {
        n
        for n in trdata.__all__
        if isinstance(getattr(trdata, n), type)
        and issubclass(getattr(trdata, n), trdata.Source)
        and getattr(trdata, n) is not trdata.Source
    }
    assert (
        len(public) == 19
    )  # with DatasetSource (any map-style dataset, which the message also names), CocoDetection, YoloDetection,
    # SegmentationFolder, and the record sources Parquet, MDS, LitData, TFRecord
    assert "map-style dataset (__len__ and __getitem__" in str(e.value)
    for name in public:
        assert re.search(rf"\b{name}\b", str(e.value)), name


def test_torchvision_image_folder_points_to_trdata_image_folder(tmp_path: Path) -> None:
    datasets = pytest.importorskip("torchvision.datasets")
    root = tmp_path / "folder"
    write_jpegs(root / "cats", 2)
    write_jpegs(root / "dogs", 2)
    # with its transform set (as a DataLoader user has it); without one it is a map-style source
    # (test_dataset_source.py), its trdata twin the faster way to read the same root
    theirs = datasets.ImageFolder(str(root), transform=lambda im: im)
    with pytest.raises(
        ConfigError, match=re.escape(f"trdata.ImageFolder({str(root)!r}) takes the same root")
    ):
        trdata.Loader(theirs, transforms=[trdata.CenterCrop(8)])
    with trdata.Loader(trdata.ImageFolder(str(root)), batch_size=4, transforms=[trdata.CenterCrop(8)]) as ld:
        assert len(next(iter(ld))) == 4
    for train in (True, False):  # torchvision's MNIST checks both splits' files
        make_mnist(tmp_path / "m", n=4, train=train)
    with pytest.raises(
        ConfigError, match=re.escape(f"trdata.MNIST({str(tmp_path / 'm')!r}) takes the same root")
    ):
        trdata.Loader(datasets.MNIST(str(tmp_path / "m"), transform=lambda im: im))


# ------------------------------------------------------------------ 6. trdata bench --seconds: the bar's rate


def test_bench_seconds_bar_shows_the_runs_rate(
    files: trdata.FileList, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``--seconds`` run times several epochs; its bar restarts every epoch, but its rate must stay the run's
    (it showed the last epoch's images over the whole run's time: 127 img/s beside 1,122 in the table)."""
    import types

    from trdata import _bench

    now = [0.0]
    monkeypatch.setattr(_bench, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

    def epoch_batches(e: int) -> Iterator[int]:
        loader.set_epoch(e)
        for batch in loader:
            now[0] += 0.25  # each batch of 4 "takes" 0.25 s: 16 img/s
            yield batch.valid

    with trdata.Loader(files, batch_size=4, transforms=[trdata.CenterCrop(16)]) as loader:
        m = _bench.time_epochs("trdata", epoch_batches, len(files), warmup=0, seconds=2.9, progress=True)
    assert m.images == 48 and m.epochs == 6  # 12 batches of 4 in 3 s: 16 img/s
    line = capsys.readouterr().err.strip().splitlines()[-1]
    shown = float(re.search(r"([\d.]+) img/s", line).group(1))  # type: ignore[union-attr]
    assert shown == pytest.approx(m.img_per_s, abs=1.0) == 16.0, line


# ------------------------------------------------------------------ 7. torchvision's own MixUp/CutMix as batch ops


def _epoch(files: trdata.FileList, **kw: object) -> list[tuple[np.ndarray, np.ndarray]]:
    kw = {"batch_size": 4, "seed": 5, "shuffle": True, "reproducible": True, "workers": 2, **kw}
    with trdata.Loader(
        files, transforms=[trdata.RandomResizedCrop(16)], normalize=trdata.IMAGENET, **kw
    ) as loader:
        return [(np.array(b.images), np.array(b.labels)) for b in loader]


def test_torchvision_mixup_and_cutmix_are_trdatas_batch_ops(files: trdata.FileList) -> None:
    """A new user hands the Loader torchvision's recipe as they know it — ``v2.MixUp``, ``v2.CutMix``, a
    ``v2.RandomChoice`` of them — as ``batch_ops=``: each runs as trdata's op with the same alpha, num_classes and
    p, so the batches equal those of trdata's ops built by hand, bit for bit (before, they were refused)."""
    cases = [
        (v2.MixUp(alpha=0.4, num_classes=2), trdata.MixUp(alpha=0.4, num_classes=2)),
        (v2.CutMix(num_classes=2), trdata.CutMix(alpha=1.0, num_classes=2)),
        (
            v2.RandomChoice(
                [v2.MixUp(alpha=0.2, num_classes=2), v2.CutMix(alpha=1.0, num_classes=2)], p=[1, 3]
            ),
            trdata.BatchRandomChoice([trdata.MixUp(0.2, 2), trdata.CutMix(1.0, 2)], p=[1, 3]),
        ),
    ]
    plain = _epoch(files)
    for theirs, ours in cases:
        got, want = _epoch(files, batch_ops=[theirs]), _epoch(files, batch_ops=[ours])
        assert len(got) == len(want) == 2
        for (gx, gy), (wx, wy), (px, _) in zip(got, want, plain):
            assert gx.shape == wx.shape == px.shape and gy.shape == wy.shape == (4, 2)
            assert np.array_equal(gx, wx) and np.array_equal(gy, wy)
            np.testing.assert_allclose(gy.sum(1), 1.0, rtol=1e-6)  # soft labels
        assert any(not np.array_equal(gx, px) for (gx, _), (px, _) in zip(got, plain))  # it did mix


def test_torchvision_batch_ops_trdata_cannot_run_are_refused_naming_them(files: trdata.FileList) -> None:
    with pytest.raises(ConfigError, match=r"batch_ops\[0\].*MixUp, CutMix and a RandomChoice of them") as e:
        trdata.Loader(files, batch_size=4, transforms=[trdata.CenterCrop(16)], batch_ops=[v2.RandomErasing()])
    assert e.value.parameter == "batch_ops"


def test_batch_ops_and_per_sample_random_choice_are_not_confused(files: trdata.FileList) -> None:
    """``trdata.RandomChoice`` picks a transform per sample (like RandomApply/RandomOrder);
    ``trdata.BatchRandomChoice`` picks a batch op per batch. Mixing them up says which one to use."""
    assert trdata.RandomChoice is trdata.transforms.RandomChoice
    with pytest.raises(ConfigError, match="is a batch op.*BatchRandomChoice"):
        trdata.RandomChoice([trdata.MixUp(num_classes=2), trdata.CutMix(num_classes=2)])
    with pytest.raises(ConfigError, match="BatchRandomChoice"):
        trdata.Loader(
            files,
            batch_size=4,
            transforms=[trdata.CenterCrop(16)],
            batch_ops=[trdata.RandomChoice([trdata.RandomInvert()])],
        )


def test_a_converted_pipeline_goes_wherever_a_transform_list_goes(files: trdata.FileList) -> None:
    """``from_torchvision``'s result (without ToTensor/Normalize) is accepted by the containers too."""
    converted = trdata.from_torchvision(v2.Compose([v2.RandomInvert(1.0)]))
    assert trdata.from_torchvision is trdata.transforms.from_torchvision
    got = _first_batch(files, transforms=[trdata.CenterCrop(16), trdata.RandomApply(converted, p=1.0)])
    want = _first_batch(
        files, transforms=[trdata.CenterCrop(16), trdata.RandomApply([trdata.RandomInvert(1.0)], 1.0)]
    )
    assert np.array_equal(got, want)
    with pytest.raises(ConfigError, match="ToTensor/ToDtype/Normalize") as e:
        trdata.RandomOrder(trdata.from_torchvision(v2.Compose([v2.RandomInvert(), v2.Normalize(MEAN, STD)])))
    assert e.value.parameter == "transforms"
