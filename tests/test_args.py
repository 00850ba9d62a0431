"""One set of argument helpers (python/trdata/_args.py) with one behaviour everywhere: a bool parameter takes
``True``/``False`` and numpy bools (as torch does wherever it takes a bool) — the Loader's, the transforms' and the
sources' alike — and refuses anything else in one wording; an int parameter refuses bools of either kind."""

from __future__ import annotations

import numpy as np
import pytest
import trdata
from _fixtures import make_mnist, write_jpegs
from trdata import transforms as T


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> trdata.FileList:
    return trdata.FileList(write_jpegs(tmp_path_factory.mktemp("jpegs"), 4, size=(40, 36)), [0, 1, 0, 1])


def _first_images(files: trdata.FileList, transforms: list[T.Transform], **kw: object) -> np.ndarray:
    with trdata.Loader(files, batch_size=4, transforms=transforms, seed=3, reproducible=True, **kw) as loader:
        return np.array(next(iter(loader)).images)


@pytest.mark.parametrize("flag", [True, False])
def test_numpy_bools_are_bools_for_transforms_loader_and_sources(
    files: trdata.FileList, tmp_path, flag
) -> None:
    b = np.bool_(flag)
    for make in (
        lambda v: T.RandomCrop(16, padding=2, pad_if_needed=v),
        lambda v: T.GaussianNoise(clip=v),
        lambda v: T.Resize(24, antialias=v),
        lambda v: T.RandomRotation(10, expand=v),
        lambda v: T.AugMix(all_ops=v),
    ):
        assert make(b)._spec() == make(flag)._spec()
    want = _first_images(files, [T.Resize(24, antialias=flag), T.CenterCrop(16)], shuffle=flag)
    got = _first_images(files, [T.Resize(24, antialias=b), T.CenterCrop(16)], shuffle=b)
    assert np.array_equal(got, want)
    make_mnist(tmp_path, "MNIST", train=flag, n=4)
    assert np.array_equal(trdata.MNIST(tmp_path, train=b).images, trdata.MNIST(tmp_path, train=flag).images)


def test_a_bool_parameter_refuses_other_values_in_one_wording(tmp_path) -> None:
    for make, name in (
        (lambda: T.RandomCrop(16, pad_if_needed=1), "pad_if_needed"),
        (lambda: T.GaussianNoise(clip="yes"), "clip"),
        (lambda: trdata.MNIST(tmp_path, train=1), "train"),
    ):
        with pytest.raises(trdata.ConfigError, match=rf"^invalid {name}: .* must be True or False") as e:
            make()
        assert e.value.parameter == name


def test_an_int_parameter_refuses_bools_of_both_kinds(files: trdata.FileList) -> None:
    for bad in (True, np.bool_(True)):
        with pytest.raises(trdata.ConfigError, match="must be an int") as e:
            trdata.Loader(files, batch_size=bad, transforms=[T.CenterCrop(16)])
        assert e.value.parameter == "batch_size"
        with pytest.raises(trdata.ConfigError, match="must be an int") as e:
            T.RandomPosterize(bad)
        assert e.value.parameter == "bits"
