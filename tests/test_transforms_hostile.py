"""Hostile configurations of the transform pipeline, from Python.

* absurd values (sizes of 10**9, padding of 10**6, a blur kernel of 10**6, a thousand views, weights that are all
  zero/negative/NaN, containers nested past the limit or holding non-transforms, hostile objects posing as
  torchvision ops) → ConfigError naming the parameter, raised by validation before anything is allocated (the
  process's peak RSS stays where it was);
* every op and policy over real JPEGs of 1×1, 2×3 and 3×2 pixels through a real Loader: no error, and every batch
  has the compiled size — with the op first (on the decoded image as it is) and after a RandomResizedCrop.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import write_jpegs
from trdata import transforms as T
from trdata.errors import ConfigError

MAX_SIDE = 65_536


def _peak_rss_bytes() -> int:
    # ru_maxrss is KiB on Linux, bytes on macOS.
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> trdata.FileList:
    """Real JPEGs of 1×1, 2×3 (w×h) and 3×2 pixels."""
    root = tmp_path_factory.mktemp("tiny")
    sizes = [(1, 1), (2, 3), (3, 2)]
    paths = write_jpegs(root, 3, size=lambda i: sizes[i])
    return trdata.FileList(paths, [0, 1, 2])


def _loader(src: trdata.FileList, **kw: Any) -> trdata.Loader:
    kw.setdefault("batch_size", 3)
    return trdata.Loader(src, workers=1, dtype="uint8", shuffle=False, seed=3, **kw)


def _refused(src: trdata.FileList, parameter: str, build: Any) -> ConfigError:
    """``build()`` (transforms, or a Loader built from them) must raise ConfigError on ``parameter`` without the
    peak RSS growing by more than 64 MiB (validation, not allocation)."""
    before = _peak_rss_bytes()
    with pytest.raises(ConfigError) as e:
        made = build()
        # The transform itself may be valid on its own; then the Loader's compile refuses it.
        _loader(src, transforms=made if isinstance(made, list) else [made]).close()
    assert e.value.parameter == parameter, str(e.value)
    assert f"invalid {parameter}" in str(e.value)
    assert _peak_rss_bytes() - before < 64 << 20, "validation must not allocate"
    return e.value


@pytest.mark.parametrize(
    ("parameter", "build"),
    [
        ("size", lambda: T.Resize(10**9)),
        ("size", lambda: T.Resize((10**9, 4))),
        ("size", lambda: [T.CenterCrop(4), T.Resize(10**40)]),
        ("size", lambda: T.RandomResizedCrop(10**9)),
        ("size", lambda: T.CenterCrop(MAX_SIDE + 1)),
        ("size", lambda: T.RandomCrop(MAX_SIDE + 1)),
        ("size", lambda: [T.RandomInvert(), T.RandomCrop(MAX_SIDE + 1, pad_if_needed=True)]),
        ("size", lambda: T.RandomCrop(0)),
        ("padding", lambda: [T.CenterCrop(2), T.Pad(10**6)]),
        ("padding", lambda: [T.CenterCrop(2), T.Pad(-1)]),
        ("transforms", lambda: [T.CenterCrop(2), T.Pad(MAX_SIDE), T.CenterCrop(1)]),
        ("transforms", lambda: [T.CenterCrop(2), T.Pad(40_000), T.CenterCrop(2)]),
        ("transforms", lambda: [T.CenterCrop(2), T.RandomApply([T.Pad(40_000), T.CenterCrop(2)])]),
        ("kernel_size", lambda: [T.CenterCrop(2), T.GaussianBlur(10**6 + 1)]),
        ("kernel_size", lambda: [T.CenterCrop(2), T.GaussianBlur(4)]),
        ("sigma", lambda: [T.CenterCrop(2), T.GaussianBlur(3, sigma=float("nan"))]),
        ("fill", lambda: [T.CenterCrop(2), T.Pad(1, fill=(1.0,) * 1000)]),
        ("fill", lambda: [T.CenterCrop(2), T.Pad(1, fill=float("inf"))]),
        ("p", lambda: [T.CenterCrop(2), T.RandomChoice([T.RandomInvert(), T.RandomEqualize()], p=[0, 0])]),
        ("p", lambda: [T.CenterCrop(2), T.RandomChoice([T.RandomInvert(), T.RandomEqualize()], p=[-1, 2])]),
        (
            "p",
            lambda: [
                T.CenterCrop(2),
                T.RandomChoice([T.RandomInvert(), T.RandomEqualize()], p=[float("nan"), 1]),
            ],
        ),
        ("p", lambda: [T.CenterCrop(2), T.RandomChoice([T.RandomInvert()], p=[1, 1])]),
        ("p", lambda: [T.CenterCrop(2), T.RandomApply([T.RandomInvert()], p=float("inf"))]),
        ("transforms", lambda: [T.CenterCrop(2), T.RandomApply([])]),
        ("transforms", lambda: [T.CenterCrop(2), T.RandomOrder([T.RandomInvert()] * 65)]),
        (
            "transforms",
            lambda: [
                T.CenterCrop(2),
                T.RandomApply([T.RandomApply([T.RandomApply([T.RandomApply([T.RandomInvert()])])])]),
            ],
        ),
        ("transforms", lambda: [T.CenterCrop(2), T.RandomApply([3])]),  # a callable would be a PythonStep
        ("transforms", lambda: [T.CenterCrop(2), T.RandomChoice([T.RandomInvert(), "invert"])]),
        ("transforms", lambda: [T.CenterCrop(2), T.RandomOrder(T.RandomInvert())]),
        ("num_ops", lambda: [T.CenterCrop(2), T.RandAugment(num_ops=10**6)]),
        ("num_magnitude_bins", lambda: [T.CenterCrop(2), T.TrivialAugmentWide(num_magnitude_bins=10**9)]),
        ("mixture_width", lambda: [T.CenterCrop(2), T.AugMix(mixture_width=10**6)]),
        ("chain_depth", lambda: [T.CenterCrop(2), T.AugMix(chain_depth=10**6)]),
        ("chain_depth", lambda: [T.CenterCrop(2), T.AugMix(mixture_width=1000, chain_depth=1000)]),
        ("degrees", lambda: [T.CenterCrop(2), T.RandomRotation(float("inf"))]),
        ("shear", lambda: [T.CenterCrop(2), T.RandomAffine(0, shear=(1, 2, 3))]),
    ],
)
def test_absurd_values_are_refused_naming_the_parameter(
    tiny: trdata.FileList, parameter: str, build: Any
) -> None:
    _refused(tiny, parameter, build)


def test_a_thousand_views_are_refused_before_compiling_them(tiny: trdata.FileList) -> None:
    before = _peak_rss_bytes()
    with pytest.raises(ConfigError) as e:
        _loader(tiny, views=[[T.RandomResizedCrop(8)]] * 1000)
    assert e.value.parameter == "views", str(e.value)
    assert _peak_rss_bytes() - before < 64 << 20


def test_oversized_output_is_refused_before_any_batch_memory(tiny: trdata.FileList) -> None:
    # 65536² RGB float32 is 48 GiB a sample: batch_size 4096 of it must be refused by arithmetic, not by malloc.
    before = _peak_rss_bytes()
    with pytest.raises(ConfigError):
        trdata.Loader(tiny, batch_size=4096, transforms=[T.CenterCrop(MAX_SIDE)], workers=1).close()
    assert _peak_rss_bytes() - before < 64 << 20


class _Posing:
    """Objects that claim to be torchvision ops (their module says so) but are not."""


def _posing(name: str, **attrs: Any) -> Any:
    cls = type(name, (), {"__module__": "torchvision.transforms.v2._hostile", **attrs})
    return cls()


class _Raising:
    def __get__(self, obj: Any, owner: Any) -> Any:
        raise RuntimeError("hostile attribute")


@pytest.mark.parametrize(
    "make",
    [
        lambda: _posing("Resize", size=10**9, interpolation=2, max_size=None, antialias=True),
        lambda: _posing("Resize"),  # no attributes at all
        lambda: _posing("Frobnicate"),  # an op torchvision never had
        lambda: _posing("RandomApply", transforms=[_posing("Frobnicate")], p=0.5),
        lambda: _posing("RandomChoice", transforms=[_posing("RandomInvert", p=0.5)], p=[float("nan")]),
        lambda: _posing("GaussianBlur", kernel_size=[10**6, 10**6], sigma=[0.1, 2.0]),
        lambda: _posing("Pad", padding=[10**6], fill=0, padding_mode="constant"),
        lambda: _posing("RandomInvert", p=_Raising()),
        lambda: _posing("ToDtype", dtype="torch.complex64", scale=True),
    ],
)
def test_from_torchvision_refuses_hostile_objects(tiny: trdata.FileList, make: Any) -> None:
    before = _peak_rss_bytes()
    with pytest.raises(ConfigError) as e:
        _loader(tiny, transforms=[T.CenterCrop(2), make()]).close()
    assert e.value.parameter in {"transforms", "size", "kernel_size", "padding", "p"}, str(e.value)
    assert _peak_rss_bytes() - before < 64 << 20


def test_from_torchvision_refuses_a_container_that_holds_itself(tiny: trdata.FileList) -> None:
    loop = _posing("RandomApply", p=0.5)
    loop.transforms = [loop]
    with pytest.raises(ConfigError) as e:
        _loader(tiny, transforms=[T.CenterCrop(2), loop]).close()
    assert e.value.parameter == "transforms", str(e.value)


#: Every op and policy, with values that run on any image (1×1 included).
EVERY_OP: list[Any] = [
    T.RandomHorizontalFlip(1.0),
    T.RandomVerticalFlip(1.0),
    T.Pad(2, fill=(10, 20, 30)),
    T.Pad((1, 2), padding_mode="reflect"),
    T.Pad((1, 2, 3, 4), padding_mode="symmetric"),
    T.Pad(1, padding_mode="edge"),
    T.RandomCrop(3, pad_if_needed=True),
    T.RandomCrop(2, padding=1, padding_mode="reflect", pad_if_needed=True),
    T.ColorJitter(0.4, 0.4, 0.4, 0.1),
    T.Grayscale(3),
    T.RandomGrayscale(1.0),
    T.GaussianBlur(5, sigma=(0.1, 3.0)),
    T.GaussianBlur((1, 9)),
    T.GaussianNoise(),
    T.RandomErasing(1.0),
    T.RandomErasing(1.0, value="random"),
    T.RandomAutocontrast(1.0),
    T.RandomEqualize(1.0),
    T.RandomSolarize(128, 1.0),
    T.RandomPosterize(2, 1.0),
    T.RandomAdjustSharpness(2.0, 1.0),
    T.RandomInvert(1.0),
    T.RandomRotation(45),
    T.RandomRotation(45, expand=True, interpolation="bilinear", fill=7),
    T.RandomAffine(30, translate=(0.5, 0.5), scale=(0.5, 2.0), shear=(-20, 20, -20, 20)),
    T.RandomPerspective(1.0, 1.0),
    T.AutoAugment("imagenet"),
    T.AutoAugment("cifar10"),
    T.AutoAugment("svhn"),
    T.RandAugment(num_ops=4),
    T.TrivialAugmentWide(),
    T.AugMix(severity=10, mixture_width=4, chain_depth=3),
    T.Resize(7),
    T.Resize((2, 9), interpolation="bicubic"),
    T.CenterCrop(9),
    T.RandomResizedCrop((3, 5), scale=(0.01, 1.0)),
    T.RandomApply([T.RandomInvert(), T.GaussianBlur(3)], p=1.0),
    T.RandomChoice([T.RandomEqualize(1.0), T.RandomSolarize(10, 1.0)], p=[1, 3]),
    T.RandomOrder([T.RandomInvert(), T.RandomRotation(10), T.RandomApply([T.RandomGrayscale(1.0)])]),
]


def _ids(op: Any) -> str:
    return repr(op)[:60]


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("op", EVERY_OP, ids=_ids)
def test_every_op_runs_on_tiny_jpegs_with_the_compiled_size(
    tiny: trdata.FileList, op: Any, channels: int
) -> None:
    # First on the decoded image as it is (1×1, 2×3, 3×2), then after a RandomResizedCrop (the op sees 5×4).
    for transforms in ([op, T.CenterCrop((5, 4))], [T.RandomResizedCrop((5, 4)), op, T.CenterCrop((5, 4))]):
        with _loader(tiny, transforms=transforms, channels=channels, layout="NCHW") as ld:
            for epoch in range(2):
                ld.set_epoch(epoch)
                batches = list(ld)
                assert [np.asarray(b.images).shape for b in batches] == [(3, channels, 5, 4)]
                assert np.asarray(batches[0].images).dtype == np.uint8


def test_views_of_tiny_jpegs_have_their_compiled_sizes(tiny: trdata.FileList) -> None:
    views = [
        [T.RandomResizedCrop(6), T.AugMix()],
        [T.Pad(3), T.RandomCrop(4), T.RandAugment()],
        [T.RandomRotation(90, expand=True), T.Resize((3, 2))],
    ]
    with _loader(tiny, views=views) as ld:
        (b,) = list(ld)
        assert [np.asarray(v).shape for v in b.images] == [(3, 3, 6, 6), (3, 3, 4, 4), (3, 3, 3, 2)]


def test_a_sample_made_oversized_by_its_own_shape_is_refused_not_allocated(tmp_path: Path) -> None:
    # A 700×1 JPEG resized to a shorter side of 100 would be 100 × 70000 pixels, past the 65536 per side every
    # image is held to (with Resize(65536): 65536 × 45.8 M): the sample is refused (the error policy applies),
    # the worker lives on, and the 8×8 one is resized to 100 × 100.
    paths = write_jpegs(tmp_path, 2, size=lambda i: (700, 1) if i == 0 else (8, 8))
    src = trdata.FileList(paths, [0, 1])
    before = _peak_rss_bytes()
    tf = [T.RandomInvert(0.0), T.Resize(100), T.CenterCrop(4)]
    with _loader(src, transforms=tf, batch_size=1) as ld, pytest.raises(trdata.DecodeError) as e:
        list(ld)
    assert "at most 65536" in str(e.value)
    with _loader(src, transforms=tf, batch_size=1, on_error="skip") as ld:
        shapes = [np.asarray(b.images).shape for b in ld]
    # "skip" replaces the refused sample with another one of the epoch (the 8×8).
    assert shapes == [(1, 3, 4, 4)] * 2
    assert _peak_rss_bytes() - before < 256 << 20
