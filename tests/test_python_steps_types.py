"""Python steps get what torchvision would give them: a PIL image before ``ToImage``/``PILToTensor``/``ToTensor`` in a
Compose (torchvision's input there is the dataset's PIL image), a uint8 ``(C, H, W)`` tensor after it; compared with
torchvision's ``ImageFolder`` + v2 on the same PNG files (lossless: the decoders agree exactly). What a step cannot
do is found when the Loader is built, on a probe image: a ``ConfigError`` naming the step, not a failure per sample
at iteration."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import photo
from trdata.errors import ConfigError, DecodeError

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
v2 = pytest.importorskip("torchvision.transforms.v2")
Image = pytest.importorskip("PIL.Image")
ImageOps = pytest.importorskip("PIL.ImageOps")

N = 6


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder of PNGs of several sizes in two classes."""
    root = tmp_path_factory.mktemp("folder")
    for i in range(N):
        d = root / f"c{i % 2}"
        d.mkdir(exist_ok=True)
        Image.fromarray(photo(i, 40 + 3 * i, 32 + 2 * i)).save(d / f"{i}.png")
    return root


def ours(root: Path, compose: Any, **kw: Any) -> np.ndarray:
    """Every image of an unshuffled epoch of trdata over ``root``, uint8 NCHW."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "op(s) of this pipeline run in Python"
        with trdata.Loader(
            trdata.ImageFolder(root), batch_size=4, transforms=compose, dtype="uint8", shuffle=False, **kw
        ) as ld:
            return np.concatenate([np.asarray(b.images)[: b.valid] for b in ld])


def theirs(root: Path, compose: Any, mode: str = "RGB") -> np.ndarray:
    """The same through torchvision's ImageFolder (its pil_loader, or ``convert(mode)``) and ``compose``."""
    ds = torchvision.datasets.ImageFolder(
        str(root), transform=compose, loader=lambda p: Image.open(p).convert(mode)
    )
    return np.stack([np.asarray(ds[i][0]) for i in range(len(ds))])


def test_a_pil_only_lambda_before_toimage_gets_a_pil_image_as_in_torchvision(folder: Path) -> None:
    """A Lambda written for PIL images (ImageOps) placed before ToImage: torchvision gives it a PIL image; trdata gave
    it a tensor, and each sample failed as DecodeError(kind="Unsupported")."""
    seen: list[str] = []

    def poster(im: Any) -> Any:
        seen.append(type(im).__name__)
        return ImageOps.posterize(ImageOps.mirror(im), 3)

    compose = v2.Compose([v2.CenterCrop(24), v2.Lambda(poster), v2.ToImage(), v2.RandomVerticalFlip(p=1.0)])
    want = theirs(folder, compose)
    assert set(seen) == {"Image"}
    seen.clear()
    got = ours(folder, compose)
    np.testing.assert_array_equal(got, want)
    assert set(seen) == {"Image"}  # the samples' calls and the probe's


def test_a_step_after_toimage_gets_a_tensor_and_one_accepting_both_runs_as_in_torchvision(
    folder: Path,
) -> None:
    """A Lambda accepting both types behaves differently on each: it must see the type torchvision gives it at its
    position (before ToImage: PIL, rotated here; after: a tensor, brightened here)."""

    def either(im: Any) -> Any:
        if isinstance(im, Image.Image):
            return im.rotate(90)
        return (im // 2 + 100).to(torch.uint8)

    compose = v2.Compose(
        [
            v2.CenterCrop(24),
            v2.Lambda(either),
            v2.PILToTensor(),
            v2.Lambda(either),
            v2.RandomHorizontalFlip(1.0),
        ]
    )
    np.testing.assert_array_equal(ours(folder, compose), theirs(folder, compose))
    # a classic (v1) Compose with ToTensor at its end likewise gives the Lambda PIL images
    classic = torchvision.transforms
    compose = classic.Compose([classic.CenterCrop(24), classic.Lambda(either), classic.ToTensor()])
    want = np.stack([np.round(x * 255).astype(np.uint8) for x in theirs(folder, compose)])
    np.testing.assert_array_equal(ours(folder, compose), want)  # trdata: uint8 (dtype given), ToTensor × 255


def test_a_gray_loader_gives_mode_l_images(folder: Path) -> None:
    compose = v2.Compose([v2.CenterCrop(24), v2.Lambda(lambda im: ImageOps.equalize(im)), v2.ToImage()])
    got = ours(folder, compose, channels=1)
    assert got.shape == (N, 1, 24, 24)
    np.testing.assert_array_equal(got, theirs(folder, compose, mode="L"))
    # and a PythonStep of a trdata list takes PIL images when asked to
    step = trdata.PythonStep(lambda im: ImageOps.equalize(im), pil=True)
    np.testing.assert_array_equal(ours(folder, [trdata.CenterCrop(24), step], channels=1), got)


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (
            v2.Lambda(lambda im: im.resize((16, 16))),
            r"shape \(16, 16, 3\).*for one of \(37, 53, 3\).*keep the size",
        ),
        (v2.Lambda(lambda im: im.convert("L")), "returned a PIL image of mode L for one of mode RGB"),
        (v2.Lambda(lambda im: np.asarray(im, np.float32)), "returned a float32 array, not a uint8 array"),
        # written for tensors but placed where torchvision gives a PIL image: it fails in torchvision too
        (v2.Lambda(lambda t: t.flip(-1)), r"cannot take a PIL image.*AttributeError.*flip"),
    ],
)
def test_what_a_step_cannot_do_is_a_config_error_when_the_loader_is_built(
    folder: Path, op: Any, message: str
) -> None:
    compose = v2.Compose([v2.CenterCrop(24), op, v2.ToImage()])
    with pytest.raises(ConfigError, match=message) as e:
        ours(folder, compose)
    assert "the Python step Lambda at transforms[1]" in str(e.value) and e.value.parameter == "transforms"


def test_a_tensor_step_that_changes_the_size_is_refused_inside_a_container_and_a_view(folder: Path) -> None:
    shrink = v2.Lambda(lambda t: t[:, 1:])
    compose = v2.Compose([v2.CenterCrop(24), v2.ToImage(), v2.RandomApply([shrink], p=0.5)])
    with pytest.raises(ConfigError, match=r"Lambda at transforms\[1\].*keep the size"):
        ours(folder, compose)
    with pytest.raises(ConfigError, match=r"Lambda at views\[1\]\[1\].*keep the size"):
        trdata.Loader(trdata.ImageFolder(folder), batch_size=2, views=[[trdata.CenterCrop(24)], compose])


def test_pil_is_a_bool() -> None:
    with pytest.raises(ConfigError, match="invalid pil: 'yes' must be True or False") as e:
        trdata.PythonStep(lambda im: im, pil="yes")  # type: ignore[arg-type]
    assert e.value.parameter == "pil"


def test_the_probe_is_one_call_and_other_exceptions_are_the_samples(folder: Path) -> None:
    calls: list[tuple[int, ...]] = []

    def counted(t: Any) -> Any:
        calls.append(tuple(t.shape))
        return t

    ld = trdata.Loader(trdata.ImageFolder(folder), batch_size=4, transforms=[trdata.CenterCrop(24), counted])
    assert calls == [(3, *trdata.transforms.PROBE_HW)]  # one call, on the probe, when the Loader is built
    with ld:
        list(ld)
    assert sorted(calls) == sorted([(3, 24, 24)] * N + [(3, *trdata.transforms.PROBE_HW)])

    def refuses(t: Any) -> Any:
        raise ValueError("not this image")

    with trdata.Loader(
        trdata.ImageFolder(folder), batch_size=4, transforms=[trdata.CenterCrop(24), refuses]
    ) as ld:
        with pytest.raises(DecodeError, match="ValueError: not this image"):
            next(iter(ld))
