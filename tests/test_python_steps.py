"""Per-sample Python steps: ``v2.Lambda``, a user's callable or ``nn.Module``, and the torchvision ops trdata does
not compile run at their position on the uint8 image (``trdata.PythonStep``), the native ops around them staying
native; torchvision's pixels where torchvision is deterministic, the same bytes for any worker count in
reproducible mode, and their failures as sample errors."""

from __future__ import annotations

import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import photo
from trdata.errors import ConfigError, DecodeError

torch = pytest.importorskip("torch")
v2 = pytest.importorskip("torchvision.transforms.v2")

IMAGES = np.stack([photo(i, 40, 36) for i in range(10)])


def run(transforms: object, workers: int = 2, **kw: object) -> np.ndarray:
    """Every image of an unshuffled epoch, uint8 NCHW."""
    with trdata.Loader(
        trdata.Arrays(IMAGES, list(range(len(IMAGES)))),
        batch_size=4,
        transforms=transforms,
        dtype="uint8",
        layout="NCHW",
        workers=workers,
        **{"shuffle": False, **kw},
    ) as ld:
        return np.concatenate([np.asarray(b.images)[: b.valid] for b in ld])


def theirs(compose: object) -> np.ndarray:
    return np.stack([compose(torch.from_numpy(a).permute(2, 0, 1)).numpy() for a in IMAGES])


def test_a_lambda_between_native_ops_gives_torchvisions_pixels() -> None:
    compose = v2.Compose(
        [v2.CenterCrop(30), v2.Lambda(lambda x: (x // 2) * 2 + 1), v2.RandomHorizontalFlip(p=1.0), v2.Pad(2)]
    )
    with pytest.warns(UserWarning, match=r"1 op\(s\) of this pipeline run in Python per sample.*: Lambda"):
        ours = run(compose)
    np.testing.assert_array_equal(ours, theirs(compose))


def test_a_users_module_and_callable_run_at_their_position() -> None:
    class Posterize4(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x & 0xF0

    def swap_rb(x: torch.Tensor) -> torch.Tensor:
        return x[[2, 1, 0]]

    compose = v2.Compose([v2.CenterCrop(24), Posterize4(), swap_rb, v2.RandomVerticalFlip(p=1.0)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = run(compose)
    assert [str(w.message).split(": ")[-1] for w in caught] == [
        "Posterize4, swap_rb; the GIL serializes them across workers"
    ]
    assert caught[0].filename == __file__  # the user's line, not trdata's
    np.testing.assert_array_equal(ours, theirs(compose))
    # in a trdata list as well, and PythonStep named explicitly
    with pytest.warns(UserWarning):
        listed = run([trdata.CenterCrop(24), Posterize4(), swap_rb, trdata.RandomVerticalFlip(p=1.0)])
    np.testing.assert_array_equal(listed, ours)
    explicit = run([trdata.CenterCrop(24), trdata.PythonStep(lambda x: x & 0xF0), trdata.PythonStep(swap_rb)])
    np.testing.assert_array_equal(explicit, np.flip(ours, axis=2))


def test_uncompiled_random_ops_are_reproducible_on_any_worker_count() -> None:
    for op in (v2.ElasticTransform(alpha=30.0), v2.JPEG((20, 60)), v2.RandomPhotometricDistort(p=1.0)):
        compose = v2.Compose([v2.RandomResizedCrop(28, scale=(0.5, 1.0)), op, v2.RandomHorizontalFlip()])
        kw = dict(seed=7, reproducible=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            one, three = run(compose, 1, **kw), run(compose, 3, **kw)
            plain = run(
                v2.Compose([v2.RandomResizedCrop(28, scale=(0.5, 1.0)), v2.RandomHorizontalFlip()]), 1, **kw
            )
            other_seed = run(compose, 2, seed=8, reproducible=True)
        np.testing.assert_array_equal(one, three)
        assert (one != plain).mean() > 0.2, type(op).__name__  # the step did run
        assert (one != other_seed).any()


def test_a_step_sees_a_seeded_torch_generator_per_sample() -> None:
    """The draws inside a step depend on (seed, epoch, index, position) only: two loaders agree, two samples
    differ."""
    draws: list[float] = []

    def noise(x: torch.Tensor) -> torch.Tensor:
        r = torch.rand(1).item()
        # a sample's call, not the Loader's probe (trdata.transforms.PROBE_HW)
        if tuple(x.shape[1:]) == (20, 20):
            draws.append(r)
        return (x.int() + int(r * 50)).clamp(0, 255).to(torch.uint8)

    a = run([trdata.CenterCrop(20), noise], 3, seed=1, reproducible=True)
    first = sorted(draws)
    draws.clear()
    b = run([trdata.CenterCrop(20), noise], 1, seed=1, reproducible=True)
    np.testing.assert_array_equal(a, b)
    assert sorted(draws) == first and len(set(first)) == len(IMAGES)


def test_a_failing_step_is_a_sample_error_under_raise_and_skip() -> None:
    def fragile(x: torch.Tensor) -> torch.Tensor:
        if int(x.float().mean()) % 3 == 0:
            raise ArithmeticError("mean divisible by 3")
        return x

    means = [int(torch.from_numpy(a[10:30, 10:30]).float().mean()) for a in IMAGES]
    assert any(m % 3 == 0 for m in means) and any(m % 3 for m in means)
    with pytest.raises(DecodeError) as e:
        run([trdata.CenterCrop(20), trdata.PythonStep(fragile)])
    text = str(e.value)
    assert "fragile at transforms[1]" in text and "ArithmeticError: mean divisible by 3" in text
    assert "Traceback" in text
    with trdata.Loader(
        trdata.Arrays(IMAGES, list(range(10))),
        batch_size=5,
        transforms=[trdata.CenterCrop(20), trdata.PythonStep(fragile)],
        on_error="skip",
    ) as ld:
        list(ld)
        assert ld.stats()["errors_skipped"] == sum(m % 3 == 0 for m in means)


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (lambda x: x[:, :5], "must keep the size"),
        (lambda x: x.float(), "torch.float32 tensor: a step returns uint8 images"),
        (lambda x: "an image", "returned str, not a uint8 array"),
    ],
)
def test_what_a_step_returns_is_checked(step: Any, message: str) -> None:
    # on the probe image when the Loader is built: a ConfigError naming the step
    with pytest.raises(ConfigError, match=message) as e:
        run([trdata.CenterCrop(20), trdata.PythonStep(step)])
    assert "the Python step <lambda> at transforms[1]" in str(e.value) and e.value.parameter == "transforms"
    # a step that does so on some samples only (not on the probe): each such sample's error
    on_samples = trdata.PythonStep(lambda x: step(x) if x.shape[-1] == 20 else x)
    with pytest.raises(DecodeError, match=message):
        run([trdata.CenterCrop(20), on_samples])


def test_steps_are_refused_where_they_cannot_run() -> None:
    with pytest.raises(ConfigError, match=r"ElasticTransform at transforms\[4\].*comes after Normalize"):
        trdata.transforms.from_torchvision(
            v2.Compose(
                [
                    v2.CenterCrop(24),
                    v2.ToImage(),
                    v2.ToDtype(torch.float32, scale=True),
                    v2.Normalize([0.5] * 3, [0.5] * 3),
                    v2.ElasticTransform(),
                ]
            )
        )
    with pytest.raises(ConfigError, match="invalid fn: 3 must be callable") as e:
        trdata.PythonStep(3)
    assert e.value.parameter == "fn"
    with pytest.raises(ConfigError, match="neither a trdata nor a torchvision transform, nor a callable"):
        trdata.transforms.from_torchvision([v2.CenterCrop(24), 3])


NUMPY_ONLY = """
import sys
sys.modules["torch"] = None  # as on a machine without torch
import numpy as np, trdata
seen = []
def step(a):
    seen.append((type(a).__name__, a.shape, a.dtype.name))
    return a[:, ::-1] if np.random.rand() < 2 else a
imgs = np.arange(4 * 6 * 8 * 3, dtype=np.uint8).reshape(4, 6, 8, 3)
with trdata.Loader(trdata.Arrays(imgs, [0] * 4), batch_size=4, transforms=[trdata.PythonStep(step)],
                   dtype="uint8", layout="NHWC", shuffle=False) as ld:
    out = np.asarray(next(iter(ld)).images)
assert (out == imgs[:, :, ::-1]).all(), "flipped by the step"
print(sorted(set(seen)))
"""


def test_without_torch_a_step_gets_numpy_hwc() -> None:
    run_ = subprocess.run([sys.executable, "-c", NUMPY_ONLY], capture_output=True, text=True, timeout=120)
    assert run_.returncode == 0, run_.stderr
    # the samples' calls, and the Loader's probe call (trdata.transforms.PROBE_HW) in the same form
    assert run_.stdout.strip() == "[('ndarray', (6, 8, 3), 'uint8'), ('ndarray', (37, 53, 3), 'uint8')]"


def test_the_programs_own_generators_are_left_as_they_were() -> None:
    import random

    def draws() -> tuple[float, float, float]:
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    def noisy(x: torch.Tensor) -> torch.Tensor:
        random.random(), np.random.rand(), torch.rand(5)
        return x

    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    expected = draws()
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    run([trdata.CenterCrop(20), trdata.PythonStep(noisy)], 2)
    assert draws() == expected


FIRST_IMPORT = """
import sys, numpy as np, trdata
assert "torch" not in sys.modules
imgs = np.zeros((64, 16, 16, 3), np.uint8)
step = trdata.PythonStep(lambda x: x)  # imports torch once, here
with trdata.Loader(trdata.Arrays(imgs), batch_size=16, workers=4, transforms=[step]) as ld:
    print(sum(b.valid for b in ld))
"""


def test_torch_is_imported_once_not_raced_by_the_workers() -> None:
    for _ in range(3):
        run_ = subprocess.run(
            [sys.executable, "-c", FIRST_IMPORT], capture_output=True, text=True, timeout=120
        )
        assert run_.returncode == 0, run_.stderr
        assert run_.stdout.strip() == "64"
