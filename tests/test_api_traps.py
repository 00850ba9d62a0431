"""API traps a new user walks into (the issue "the house in order"): each test uses the API as the PyTorch
tutorials and DataLoader habits suggest, on real files written here, and checks that trdata either does the
expected thing or says what to write instead."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import write_jpegs
from test_classic import make_cifar, make_mnist
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
