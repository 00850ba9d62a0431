"""Geometric ops in any order and the per-sample containers, against torchvision v2 (tests that need torchvision
skip without it).

* stage-2 geometry: Resize / CenterCrop / RandomResizedCrop after a pixel op run on the uint8 image; their output
  vs torchvision v2 on the same uint8 tensors (and vs Pillow): ±1 level on ≥ 99 % of pixels (nearest: exact);
  RandomResizedCrop's box is the one trdata drew (``_core.sample_op``) replayed through ``F.resized_crop``;
* containers: RandomApply's gate, RandomChoice's pick and RandomOrder's permutation vs torchvision's own
  ``forward`` over 10,000 draws (χ², α = 0.001), recorded by inner callables; outputs with pinned inner ops
  replayed through torchvision's kernels; size rules; from_torchvision (v2 and classic, Compose inside); the
  DINO/SimCLR recipes run in the Loader.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import chi2_same, chw, close, hwc, ks, ks_limit, pil_resize, textured_images, tv
from trdata import _core
from trdata import transforms as T
from trdata.errors import ConfigError

SEED = 5
N = 10_000


def run(imgs: np.ndarray, transforms: list[Any], **kw: Any) -> tuple[np.ndarray, int, list[int]]:
    """Pixels (NHWC uint8), epoch and sample indices of one batch of ``imgs`` through ``transforms``."""
    kw.setdefault("workers", 2)
    with trdata.Loader(
        trdata.Arrays(imgs), batch_size=len(imgs), transforms=transforms, dtype="uint8", layout="NHWC",
        shuffle=False, seed=SEED, **kw,
    ) as ld:  # fmt: skip
        b = next(iter(ld))
        return np.asarray(b.images).copy(), int(b.epoch), [int(i) for i in b.indices]


#: A pixel op that never fires: what follows it runs in stage 2, on the uint8 image of the whole sample.
NOOP = T.RandomInvert(p=0.0)


def draws(op: Any, epoch: int, index: int, h: int, w: int, position: int = 1) -> list[float]:
    return _core.sample_op(
        op._spec(), seed=SEED, epoch=epoch, index=index, position=position, height=h, width=w, channels=3
    )


# --- stage-2 geometry vs torchvision v2 on uint8 tensors -------------------------------------------------------


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest"])
@pytest.mark.parametrize("size", [(20, 17), 24, (90, 61), (37, 120)])
def test_stage2_resize_matches_torchvision_tensors(mode: str, size: Any) -> None:
    tv()
    import torchvision.transforms.v2.functional as F

    imgs = textured_images(3, 57, 73, seed=8)
    # Resize(int) leaves the size open: a CenterCrop of the resized size fixes it without changing pixels.
    want = np.stack([hwc(F.resize(chw(i), size if isinstance(size, int) else list(size), interpolation=getattr(
        F.InterpolationMode, mode.upper()), antialias=True)) for i in imgs])  # fmt: skip
    got, _, _ = run(imgs, [NOOP, T.Resize(size, interpolation=mode), T.CenterCrop(want.shape[1:3])])
    assert got.shape == want.shape
    if mode == "nearest":
        np.testing.assert_array_equal(got, want)
    else:
        assert close(got, want) >= 0.99, close(got, want)
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_stage2_resize_matches_pillow() -> None:
    pytest.importorskip("PIL")
    imgs = textured_images(3, 57, 73, seed=3)
    for hw in [(20, 17), (90, 61)]:
        got, _, _ = run(imgs, [NOOP, T.Resize(hw)])
        want = np.stack([pil_resize(i, hw, "bilinear") for i in imgs])
        assert close(got, want) >= 0.99
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_stage2_resize_without_antialias_and_max_size_match_torchvision() -> None:
    tv()
    import torchvision.transforms.v2.functional as F

    imgs = textured_images(2, 64, 80, seed=1)
    want = np.stack([hwc(F.resize(chw(i), [16, 20], antialias=False)) for i in imgs])
    got, _, _ = run(imgs, [NOOP, T.Resize((16, 20), antialias=False)])
    assert close(got, want) >= 0.99
    # max_size: shorter side 40 would make the longer 50 > 45 → (36, 45), then a crop fixes the batch size.
    want = np.stack([hwc(F.resize(chw(i), [40], max_size=45)) for i in imgs])
    assert want.shape[1:3] == (36, 45)
    got, _, _ = run(imgs, [T.Resize(40, max_size=45), T.CenterCrop((36, 45))])
    assert close(got, want) >= 0.99
    with pytest.raises(ConfigError, match=r"invalid max_size: 30 must be greater than size \(40\)"):
        run(imgs, [T.Resize(40, max_size=30), T.CenterCrop(30)])


def test_stage2_center_crop_matches_torchvision() -> None:
    tv()
    import torchvision.transforms.v2.functional as F

    imgs = textured_images(2, 37, 45, seed=4)
    for size in [(20, 31), (36, 44), (41, 50), (30, 52)]:
        want = np.stack([hwc(F.center_crop(chw(i), list(size))) for i in imgs])
        got, _, _ = run(imgs, [NOOP, T.CenterCrop(size)])
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest"])
def test_stage2_random_resized_crop_replays_through_torchvision(mode: str) -> None:
    tv()
    import torchvision.transforms.v2.functional as F

    h, w = 41, 53
    imgs = textured_images(6, h, w, seed=5)
    rrc = T.RandomResizedCrop((24, 20), scale=(0.2, 1.0), interpolation=mode)
    got, epoch, idx = run(imgs, [NOOP, rrc])
    boxes = set()
    for k, i in enumerate(idx):
        top, left, bh, bw = (int(v) for v in draws(rrc, epoch, i, h, w))
        boxes.add((top, left, bh, bw))
        want = hwc(F.resized_crop(chw(imgs[i]), top, left, bh, bw, [24, 20],
                                  interpolation=getattr(F.InterpolationMode, mode.upper()), antialias=True))  # fmt: skip
        if mode == "nearest":
            np.testing.assert_array_equal(got[k], want)
        else:
            assert close(got[k], want) >= 0.99
    assert len(boxes) > 1


def test_stage2_random_resized_crop_boxes_match_torchvision() -> None:
    v2 = tv()
    h, w = 32, 48
    ours = [tuple(draws(T.RandomResizedCrop(16, scale=(0.08, 1.0)), 0, i, h, w)) for i in range(N)]
    import torch

    torch.manual_seed(0)
    op = v2.RandomResizedCrop(16)
    img = torch.zeros(3, h, w, dtype=torch.uint8)
    theirs = []
    for _ in range(N):
        p = op.make_params([img])
        theirs.append((p["top"], p["left"], p["height"], p["width"]))
    for k in range(4):
        assert ks(np.array([o[k] for o in ours]), np.array([t[k] for t in theirs])) < ks_limit(N, N)


def test_geometry_after_pixel_ops_is_reproducible_across_worker_counts() -> None:
    imgs = textured_images(8, 40, 44, seed=2)
    t = [
        T.ColorJitter(0.4, 0.4),
        T.RandomResizedCrop(24),
        T.RandomHorizontalFlip(),
        T.Resize(20),
        T.CenterCrop(18),
    ]
    a, _, _ = run(imgs, t, workers=1)
    b, _, _ = run(imgs, t, workers=3)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (8, 18, 18, 3)


# --- containers: decisions vs torchvision's own forward -------------------------------------------------------


def recorder(log: list[int], i: int) -> Any:
    def f(x: Any) -> Any:
        log.append(i)
        return x

    return f


def theirs_decisions(make: Any, n: int = N) -> list[tuple[int, ...]]:
    import torch

    torch.manual_seed(1)
    import random

    random.seed(1)
    out = []
    log: list[int] = []
    inst = make([recorder(log, i) for i in range(3)])
    x = torch.zeros(3, 4, 4, dtype=torch.uint8)
    for _ in range(n):
        log.clear()
        inst(x)
        out.append(tuple(log))
    return out


def ours_decisions(op: Any, n: int = N) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in draws(op, 0, i, 4, 4)) for i in range(n)]


INV = [T.RandomInvert(1.0), T.RandomInvert(1.0), T.RandomInvert(1.0)]


def test_random_apply_gate_matches_torchvision() -> None:
    v2 = tv()
    ours = [len(d) > 0 for d in ours_decisions(T.RandomApply(INV, p=0.3))]
    theirs = [len(d) > 0 for d in theirs_decisions(lambda ts: v2.RandomApply(ts, p=0.3))]
    chi2_same(ours, theirs)


def test_random_choice_pick_matches_torchvision_v2_and_classic() -> None:
    v2 = tv()
    import torchvision.transforms as v1

    ours = [d[0] for d in ours_decisions(T.RandomChoice(INV, p=[0.2, 0.5, 1.3]))]
    theirs = [d[0] for d in theirs_decisions(lambda ts: v2.RandomChoice(ts, p=[0.2, 0.5, 1.3]))]
    chi2_same(ours, theirs)
    uniform = [d[0] for d in ours_decisions(T.RandomChoice(INV))]
    chi2_same(uniform, [d[0] for d in theirs_decisions(lambda ts: v1.RandomChoice(ts))])


def test_random_order_permutation_matches_torchvision() -> None:
    v2 = tv()
    ours = ours_decisions(T.RandomOrder(INV))
    theirs = theirs_decisions(lambda ts: v2.RandomOrder(ts))
    assert len(set(ours)) == 6
    chi2_same(ours, theirs)


# --- containers: outputs ---------------------------------------------------------------------------------------


def test_random_choice_output_is_the_picked_op_as_torchvision_computes_it() -> None:
    tv()
    import torchvision.transforms.v2.functional as F

    h, w = 30, 34
    imgs = textured_images(12, h, w, seed=9)
    choice = T.RandomChoice(
        [T.Grayscale(3), T.RandomSolarize(128, p=1.0), T.RandomInvert(p=1.0)], p=[1, 1, 2]
    )
    got, epoch, idx = run(imgs, [T.CenterCrop((h, w)), choice])
    kernels = [
        lambda t: F.rgb_to_grayscale(t, num_output_channels=3),
        lambda t: F.solarize(t, 128),
        F.invert,
    ]
    picked = set()
    for k, i in enumerate(idx):
        (j,) = (int(v) for v in draws(choice, epoch, i, h, w))
        picked.add(j)
        np.testing.assert_array_equal(got[k], hwc(kernels[j](chw(imgs[i]))), err_msg=f"sample {i} op {j}")
    assert picked == {0, 1, 2}


def test_random_apply_output_with_pinned_inner_ops() -> None:
    tv()
    import torchvision.transforms.v2.functional as F

    h, w = 30, 34
    imgs = textured_images(12, h, w, seed=10)
    # The DINO habit, pinned: RandomApply([ColorJitter(brightness=(1.3, 1.3))], p=0.5); the inner jitter's order
    # draw cannot change a brightness-only result.
    ra = T.RandomApply(
        [T.ColorJitter(brightness=(1.3, 1.3)), T.Resize((h // 2, w // 2)), T.Resize((h, w))], p=0.5
    )
    got, epoch, idx = run(imgs, [T.CenterCrop((h, w)), ra])
    applied = 0
    for k, i in enumerate(idx):
        if draws(ra, epoch, i, h, w):
            applied += 1
            t = F.adjust_brightness(chw(imgs[i]), 1.3)
            t = F.resize(F.resize(t, [h // 2, w // 2]), [h, w])
            assert close(got[k], hwc(t)) >= 0.99
        else:
            np.testing.assert_array_equal(got[k], imgs[i])
    assert 0 < applied < len(idx)


def test_container_rules_are_the_cores() -> None:
    imgs = textured_images(2, 30, 30)
    with pytest.raises(ConfigError, match=r"invalid transforms: .*RandomApply at transforms\[1\]\)") as e:
        run(imgs, [T.CenterCrop(20), T.RandomApply([T.CenterCrop(10)])])
    assert e.value.parameter == "transforms"
    with pytest.raises(ConfigError, match=r"transforms\[1\]\.transforms\[1\] gives \(10, 10\)"):
        run(imgs, [T.CenterCrop(20), T.RandomChoice([T.RandomInvert(), T.CenterCrop(10)])])
    with pytest.raises(ConfigError, match=r"RandomOrder at transforms\[1\]"):
        run(imgs, [T.CenterCrop(20), T.RandomOrder([T.Resize((12, 12)), T.RandomInvert()])])
    with pytest.raises(
        ConfigError, match=r"invalid p: 1\.5 must be in \[0, 1\] \(RandomApply at transforms\[1\]\)"
    ):
        run(imgs, [T.CenterCrop(20), T.RandomApply([T.RandomInvert()], p=1.5)])
    with pytest.raises(ConfigError, match=r"\(RandomSolarize at transforms\[1\]\.transforms\[0\]\)"):
        run(imgs, [T.CenterCrop(20), T.RandomApply([T.RandomSolarize(300)])])
    with pytest.raises(ConfigError, match=r"invalid p: .* must be None or one weight per transform"):
        run(imgs, [T.CenterCrop(20), T.RandomChoice([T.RandomInvert()], p=[0.5, 0.5])])
    with pytest.raises(ConfigError, match="hold 1 to 64 transforms"):
        run(imgs, [T.CenterCrop(20), T.RandomOrder([])])
    with pytest.raises(ConfigError, match="invalid transforms"):
        T.RandomApply(T.RandomInvert())  # type: ignore[arg-type]
    # A branch that keeps the size is fine, geometric ones included.
    got, _, _ = run(imgs, [T.CenterCrop(20), T.RandomChoice([T.RandomResizedCrop(20), T.Resize((20, 20))])])
    assert got.shape == (2, 20, 20, 3)


def test_from_torchvision_converts_containers() -> None:
    v2 = tv()
    import torchvision.transforms as v1

    pipe = v2.Compose([
        v2.RandomResizedCrop(32, scale=(0.4, 1.0)),
        v2.RandomHorizontalFlip(),
        v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
        v2.RandomChoice([v2.Grayscale(3), v2.RandomSolarize(128, p=1.0), v2.Compose([v2.GaussianBlur(5)])]),
        v2.RandomOrder([v2.RandomInvert(), v2.RandomEqualize()]),
        v2.ToImage(), v2.ToDtype(__import__("torch").float32, scale=True), v2.Normalize(*T.IMAGENET),
    ])  # fmt: skip
    c = T.from_torchvision(pipe)
    spec = lambda t: t._spec()  # noqa: E731  (torchvision stores ranges where trdata keeps what was given)
    assert spec(c.transforms[2]) == spec(T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8))
    assert spec(c.transforms[3]) == spec(T.RandomChoice(
        [T.Grayscale(3), T.RandomSolarize(128, p=1.0), T.GaussianBlur((5, 5), (0.1, 2.0))], p=[1 / 3] * 3
    ))  # fmt: skip
    assert spec(c.transforms[4]) == spec(T.RandomOrder([T.RandomInvert(), T.RandomEqualize()]))
    classic = v1.Compose([
        v1.RandomResizedCrop(32),
        v1.RandomApply([v1.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
        v1.RandomChoice([v1.RandomGrayscale(1.0), v1.RandomInvert(1.0)]),
        v1.RandomOrder([v1.RandomInvert(), v1.RandomAutocontrast()]),
        v1.ToTensor(),
    ])  # fmt: skip
    cc = T.from_torchvision(classic)
    assert spec(cc.transforms[2]) == spec(T.RandomChoice([T.RandomGrayscale(1.0), T.RandomInvert(1.0)]))
    assert cc.dtype == "float32"
    with pytest.raises(ConfigError, match=r"RandomApply at transforms\[1\] cannot run in trdata: it holds"):
        T.from_torchvision(
            v2.Compose([v2.RandomResizedCrop(32), v2.RandomApply([v2.Normalize([0.5], [0.5])])])
        )
    # The Loader takes the torchvision pipeline as it is.
    imgs = textured_images(4, 48, 40, seed=11)
    with trdata.Loader(trdata.Arrays(imgs), batch_size=4, transforms=pipe, seed=1, workers=2) as ld:
        b = next(iter(ld))
        assert tuple(b.images.shape) == (4, 3, 32, 32)


@pytest.mark.parametrize("recipe", ["dino", "simclr"])
def test_self_supervised_recipes_run(recipe: str) -> None:
    if recipe == "dino":
        t = [
            T.RandomResizedCrop(32, scale=(0.4, 1.0)),
            T.RandomHorizontalFlip(),
            T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
            T.RandomGrayscale(0.2),
            T.RandomApply([T.GaussianBlur(5, (0.1, 2.0))], p=1.0),
            T.RandomSolarize(128, p=0.2),
        ]
    else:
        t = [
            T.RandomResizedCrop(32),
            T.RandomHorizontalFlip(),
            T.RandomApply([T.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8),
            T.RandomGrayscale(0.2),
            T.RandomChoice([T.GaussianBlur(3), T.RandomInvert(0.0)]),
        ]
    imgs = textured_images(8, 48, 56, seed=12)
    a, _, _ = run(imgs, t, workers=1)
    b, _, _ = run(imgs, t, workers=3)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (8, 32, 32, 3)


# --- RandomCrop folded into the decode ---------------------------------------------------------------------------


@pytest.mark.parametrize("subsampling", [0, 2])
def test_leading_random_crop_folds_into_the_decode_with_the_pixel_ops_bytes(
    tmp_path: Any, subsampling: int
) -> None:
    """A leading RandomCrop that cannot fail (pad_if_needed) decodes only its window: same bytes as the same crop
    run as a pixel op on the fully decoded image (a p=0 op before it keeps it a pixel op at the same position)."""
    pytest.importorskip("PIL")
    import _fixtures

    sizes = [(64, 48), (41, 77), (20, 18), (100, 33)]
    paths = _fixtures.write_jpegs(tmp_path, 4, lambda i: sizes[i], subsampling=subsampling)
    crop = T.RandomCrop((36, 40), padding=(2, 3), pad_if_needed=True)
    outs = []
    for first in (T.RandomHorizontalFlip(p=0.0), T.RandomInvert(p=0.0)):
        with trdata.Loader(
            trdata.FileList(paths, [0] * len(paths)), batch_size=4, transforms=[first, crop, T.RandomVerticalFlip()],
            dtype="uint8", layout="NHWC", shuffle=False, seed=3, workers=1,
        ) as ld:  # fmt: skip
            outs.append([np.asarray(b.images).copy() for b in ld])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
    # The windows really move (a random crop, not a centre crop).
    assert len({tuple(draws(crop, 0, i, 48, 64)) for i in range(20)}) > 1
