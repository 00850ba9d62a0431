"""The geometric pixel ops (RandomRotation, RandomAffine, RandomPerspective) and the auto-augment policies
(AutoAugment, RandAugment, TrivialAugmentWide, AugMix) against torchvision v2 (tests that need torchvision skip
without it).

* pixels: each op's uint8 output vs torchvision's on the same uint8 input with the same parameters — pinned
  (degenerate ranges) or, where a range cannot pin them (translations, perspective corners, the policies'
  choices), the parameters trdata drew for that sample (``_core.sample_op``) replayed through torchvision's own
  kernels (``F.affine``, ``F.perspective``, the policies' ``_apply_image_or_video_transform``): ±1 level on
  ≥ 99 % of pixels;
* live randomness: trdata's draws vs torchvision's own ``make_params`` / ``forward`` over 10,000 draws, KS
  (continuous) or χ² (discrete) at α = 0.001 — for the policies the op chosen and its signed magnitude as
  torchvision hands them to its kernel (recorded by wrapping ``_apply_image_or_video_transform``);
* the loader: a policy's output is the same with 1 and 3 workers; from_torchvision (v2 and classic, enums).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import (
    chi2_same,
    chw,
    close,
    hwc,
    ks,
    ks_limit,
    pil_resize,
    sampled_draws,
    textured_images,
    torchvision_params,
    tv,
)
from trdata import _core
from trdata import transforms as T
from trdata.errors import ConfigError

H, W = 37, 45
SEED = 5
N = 10_000
OPS = [
    "Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
    "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert",
]  # fmt: skip


def run_loader(imgs: np.ndarray, ops: list[Any], **kw: Any) -> tuple[np.ndarray, int, list[int]]:
    """Pixels (NHWC), the epoch and the sample indices of one pass; the op under test sits at position 1."""
    kw.setdefault("workers", 2)
    with trdata.Loader(
        trdata.Arrays(imgs),
        batch_size=len(imgs),
        transforms=[T.CenterCrop((imgs.shape[1], imgs.shape[2])), *ops],
        dtype="uint8",
        layout="NHWC",
        shuffle=False,
        seed=SEED,
        **kw,
    ) as ld:
        b = next(iter(ld))
        return np.asarray(b.images).copy(), int(b.epoch), [int(i) for i in b.indices]


def drawn(op: Any, epoch: int, index: int, h: int = H, w: int = W) -> list[float]:
    return _core.sample_op(
        op._spec(), seed=SEED, epoch=epoch, index=index, position=1, height=h, width=w, channels=3
    )


# --- pinned parameters -------------------------------------------------------------------------------------------

PINNED: list[tuple[Any, str, tuple[Any, ...], dict[str, Any]]] = [
    (T.RandomRotation((17.3, 17.3)), "RandomRotation", ((17.3, 17.3),), {}),
    (T.RandomRotation((-33.0, -33.0), "bilinear"), "RandomRotation", ((-33.0, -33.0),), {"interpolation": 2}),
    (T.RandomRotation((25.0, 25.0), "bilinear", fill=None), "RandomRotation", ((25.0, 25.0),), {"interpolation": 2, "fill": None}),
    (T.RandomRotation((40.0, 40.0), fill=(10, 20, 30)), "RandomRotation", ((40.0, 40.0),), {"fill": [10, 20, 30]}),
    (T.RandomRotation((12.0, 12.0), center=(5, 9)), "RandomRotation", ((12.0, 12.0),), {"center": [5, 9]}),
    (T.RandomRotation((180.0, 180.0)), "RandomRotation", ((180.0, 180.0),), {}),
    (T.RandomRotation((90.0, 90.0)), "RandomRotation", ((90.0, 90.0),), {}),
    (T.RandomAffine((10.0, 10.0), scale=(1.2, 1.2), shear=(5, 5, -7, -7)), "RandomAffine", ((10.0, 10.0),), {"scale": (1.2, 1.2), "shear": (5, 5, -7, -7)}),
    (T.RandomAffine((-20.0, -20.0), scale=(0.8, 0.8), interpolation="bilinear", center=(3, 30)), "RandomAffine", ((-20.0, -20.0),), {"scale": (0.8, 0.8), "interpolation": 2, "center": [3, 30]}),
    (T.RandomAffine((0.0, 0.0), shear=(16.7, 16.7), fill=None, interpolation="bilinear"), "RandomAffine", ((0.0, 0.0),), {"shear": (16.7, 16.7), "fill": None, "interpolation": 2}),
]  # fmt: skip


@pytest.mark.parametrize("ours,name,args,kw", PINNED, ids=[f"{p[1]}-{i}" for i, p in enumerate(PINNED)])
def test_pinned_warp_matches_torchvision(
    ours: Any, name: str, args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    v2 = tv()
    if "interpolation" in kw:
        kw = {**kw, "interpolation": v2.InterpolationMode.BILINEAR}
    imgs = textured_images()
    got, _, _ = run_loader(imgs, [ours])
    theirs = getattr(v2, name)(*args, **kw)
    want = np.stack([hwc(theirs(chw(i))) for i in imgs])
    assert close(got, want) >= 0.99


def test_rotation_expand_matches_torchvision() -> None:
    v2 = tv()
    imgs = textured_images()
    want = np.stack([hwc(v2.RandomRotation((30.0, 30.0), expand=True)(chw(i))) for i in imgs])
    got, _, _ = run_loader(imgs, [T.RandomRotation((30.0, 30.0), expand=True), T.RandomCrop(want.shape[1:3])])
    assert close(got, want) >= 0.99
    with pytest.raises(ConfigError, match="must fix the output size"):
        run_loader(imgs, [T.RandomRotation(30, expand=True)])


def test_drawn_affine_and_perspective_replayed_through_torchvision() -> None:
    """Random translations and perspective corners cannot be pinned by a range: replay trdata's draw."""
    tv()
    import torchvision.transforms.v2.functional as F

    imgs = textured_images(6)
    op = T.RandomAffine(15, translate=(0.2, 0.3), scale=(0.7, 1.3), shear=10, interpolation="bilinear")
    got, epoch, idx = run_loader(imgs, [op])
    for k, i in enumerate(idx):
        angle, tx, ty, scale, sx, sy = drawn(op, epoch, i)
        want = F.affine(chw(imgs[i]), angle, [int(tx), int(ty)], scale, [sx, sy], interpolation=F.InterpolationMode.BILINEAR, fill=0)  # fmt: skip
        assert close(got[k], hwc(want)) >= 0.99
    for interp in ("bilinear", "nearest"):
        op = T.RandomPerspective(0.6, p=1.0, interpolation=interp)
        got, epoch, idx = run_loader(imgs, [op])
        for k, i in enumerate(idx):
            e = [int(v) for v in drawn(op, epoch, i)]
            start = [[0, 0], [W - 1, 0], [W - 1, H - 1], [0, H - 1]]
            end = [e[0:2], e[2:4], e[4:6], e[6:8]]
            want = F.perspective(chw(imgs[i]), start, end, interpolation=F.InterpolationMode(interp), fill=0)
            assert close(got[k], hwc(want)) >= 0.99, interp


def replay_policy(inst: Any, img: np.ndarray, steps: list[float]) -> np.ndarray:
    """torchvision's kernels on trdata's decisions ([op, magnitude]* pairs)."""
    x = chw(img)
    for op, m in zip(steps[::2], steps[1::2]):
        x = inst._apply_image_or_video_transform(x, OPS[int(op)], m, interpolation=inst.interpolation, fill=inst._fill)  # fmt: skip
    return hwc(x)


@pytest.mark.parametrize(
    "ours,theirs",
    [
        (T.AutoAugment(), ("AutoAugment", {})),
        (T.AutoAugment("cifar10", interpolation="bilinear"), ("AutoAugment", {"policy": "cifar10", "interpolation": 2})),
        (T.AutoAugment("svhn", fill=(30, 60, 90)), ("AutoAugment", {"policy": "svhn", "fill": [30, 60, 90]})),
        (T.RandAugment(num_ops=3, magnitude=15), ("RandAugment", {"num_ops": 3, "magnitude": 15})),
        (T.RandAugment(magnitude=9, interpolation="bilinear", fill=0), ("RandAugment", {"interpolation": 2, "fill": 0})),
        (T.TrivialAugmentWide(), ("TrivialAugmentWide", {})),
    ],
    ids=["aa-imagenet", "aa-cifar10-bilinear", "aa-svhn-fill", "ra-3-15", "ra-bilinear-fill0", "ta"],
)  # fmt: skip
def test_policy_decisions_replayed_through_torchvision(ours: Any, theirs: tuple[str, dict[str, Any]]) -> None:
    v2 = tv()
    name, kw = theirs
    if "policy" in kw:
        kw = {**kw, "policy": v2.AutoAugmentPolicy(kw["policy"])}
    if "interpolation" in kw:
        kw = {**kw, "interpolation": v2.InterpolationMode.BILINEAR}
    inst = getattr(v2, name)(**kw)
    imgs = textured_images(16, seed=3)
    got, epoch, idx = run_loader(imgs, [ours])
    for k, i in enumerate(idx):
        want = replay_policy(inst, imgs[i], drawn(ours, epoch, i))
        assert close(got[k], want) >= 0.99, (k, drawn(ours, epoch, i))


def test_augmix_replayed_through_torchvision() -> None:
    v2 = tv()
    import torch

    inst = v2.AugMix()
    imgs = textured_images(12, seed=5)
    ours = T.AugMix()
    got, epoch, idx = run_loader(imgs, [ours])
    for k, i in enumerate(idx):
        t = drawn(ours, epoch, i)
        x = chw(imgs[i])
        mix = torch.tensor(t[0], dtype=torch.float32) * x
        at = 1
        for _ in range(3):
            w, d = t[at], int(t[at + 1])
            steps = t[at + 2 : at + 2 + 2 * d]
            at += 2 + 2 * d
            aug = chw(replay_policy(inst, imgs[i], steps))
            mix.add_(torch.tensor(w, dtype=torch.float32) * aug)
        assert close(got[k], hwc(mix.to(torch.uint8))) >= 0.99


# --- sampled-parameter distributions ---------------------------------------------------------------------------


def ours_draws(op: Any, n: int = N, h: int = 32, w: int = 48) -> list[list[float]]:
    return sampled_draws(op, n, h, w)  # on a non-square image


def theirs_params(op: Any, n: int = N, h: int = 32, w: int = 48) -> list[dict[str, Any]]:
    return torchvision_params(op, n, h, w)


def test_rotation_and_affine_draws_match_torchvision() -> None:
    v2 = tv()
    a = np.array(ours_draws(T.RandomRotation((-20, 35))))[:, 0]
    b = np.array([p["angle"] for p in theirs_params(v2.RandomRotation((-20, 35)))])
    assert ks(a, b) < ks_limit(N, N)
    args = dict(degrees=25, translate=(0.1, 0.3), scale=(0.75, 1.25), shear=(-5, 8, -3, 12))
    a = np.array(ours_draws(T.RandomAffine(**args)))  # type: ignore[arg-type]
    b = theirs_params(v2.RandomAffine(**args))
    tb = {
        "angle": np.array([p["angle"] for p in b]),
        "scale": np.array([p["scale"] for p in b]),
        "shear_x": np.array([p["shear"][0] for p in b]),
        "shear_y": np.array([p["shear"][1] for p in b]),
    }
    for col, key in [(0, "angle"), (3, "scale"), (4, "shear_x"), (5, "shear_y")]:
        assert ks(a[:, col], tb[key]) < ks_limit(N, N), key
    chi2_same([int(v) for v in a[:, 1]], [int(p["translate"][0]) for p in b])
    chi2_same([int(v) for v in a[:, 2]], [int(p["translate"][1]) for p in b])


def test_perspective_corners_match_torchvision() -> None:
    v2 = tv()
    import torch

    h, w = 32, 48
    a = [r for r in ours_draws(T.RandomPerspective(0.7, p=0.6), h=h, w=w)]
    hits = sum(1 for r in a if r)
    assert abs(hits - N * 0.6) < 4 * np.sqrt(N * 0.24)
    # torchvision's make_params returns the coefficients; its corners are the randint draws, recorded here.
    torch.manual_seed(0)
    rec: list[int] = []
    real = torch.randint

    def randint(*args: Any, **kw: Any) -> Any:
        v = real(*args, **kw)
        rec.append(int(v))
        return v

    op = v2.RandomPerspective(0.7, p=1.0)
    img = torch.zeros(3, h, w, dtype=torch.uint8)
    torch.randint = randint  # type: ignore[assignment]
    try:
        for _ in range(N):
            op.make_params([img])
    finally:
        torch.randint = real  # type: ignore[assignment]
    theirs = np.array(rec).reshape(N, 8)
    ours_pts = np.array([r for r in a if r])
    for col in range(8):
        chi2_same(list(ours_pts[:, col].astype(int)), list(theirs[:, col]))


def record_policy(inst: Any, n: int, h: int = 32, w: int = 48) -> list[list[tuple[str, float]]]:
    """torchvision's own choices: (op, signed magnitude) as ``forward`` hands them to its kernel, per sample."""
    import torch

    torch.manual_seed(0)
    out: list[list[tuple[str, float]]] = []

    def fake(image: Any, transform_id: str, magnitude: float, **kw: Any) -> Any:
        out[-1].append((transform_id, round(float(magnitude), 6)))
        return image

    inst._apply_image_or_video_transform = fake
    img = torch.zeros(3, h, w, dtype=torch.uint8)
    for _ in range(n):
        out.append([])
        inst(img)
    return out


def steps_of(t: list[float]) -> list[tuple[str, float]]:
    return [(OPS[int(o)], round(m, 6)) for o, m in zip(t[::2], t[1::2])]


@pytest.mark.parametrize(
    "ours,name,kw",
    [
        (T.AutoAugment(), "AutoAugment", {}),
        (T.AutoAugment("cifar10"), "AutoAugment", {"policy": "cifar10"}),
        (T.RandAugment(), "RandAugment", {}),
        (T.RandAugment(num_ops=1, magnitude=20, num_magnitude_bins=25), "RandAugment", {"num_ops": 1, "magnitude": 20, "num_magnitude_bins": 25}),
        (T.TrivialAugmentWide(), "TrivialAugmentWide", {}),
    ],
    ids=["aa", "aa-cifar10", "ra", "ra-1-20-25", "ta"],
)  # fmt: skip
def test_policy_choices_and_magnitudes_match_torchvision(ours: Any, name: str, kw: dict[str, Any]) -> None:
    v2 = tv()
    if "policy" in kw:
        kw = {**kw, "policy": v2.AutoAugmentPolicy(kw["policy"])}
    a = [steps_of(t) for t in ours_draws(ours)]
    b = record_policy(getattr(v2, name)(**kw), N)
    chi2_same([len(s) for s in a], [len(s) for s in b])  # how many sub-ops apply
    chi2_same([s[0][0] for s in a if s], [s[0][0] for s in b if s])  # which op
    chi2_same([x for s in a for x in s], [x for s in b for x in s])  # (op, signed magnitude) pairs
    if name == "AutoAugment":  # the sub-policy's pair, as an ordered sequence
        chi2_same([tuple(s) for s in a], [tuple(s) for s in b])


def test_augmix_choices_weights_and_depths_match_torchvision() -> None:
    v2 = tv()
    import torch

    a = ours_draws(T.AugMix(severity=4, all_ops=False))
    inst = v2.AugMix(severity=4, all_ops=False)
    weights: list[float] = []
    real = inst._sample_dirichlet

    def dirichlet(params: Any) -> Any:
        d = real(params)
        if d.shape[-1] == 2:
            weights.append(float(d[0, 0]))
        return d

    inst._sample_dirichlet = dirichlet
    b = record_policy(inst, N)
    assert torch.is_tensor(torch.zeros(1))
    m0 = np.array([t[0] for t in a])
    assert ks(m0, np.array(weights)) < ks_limit(N, N)
    ours_steps: list[tuple[str, float]] = []
    ours_total: list[int] = []
    for t in a:
        at, total = 1, 0
        for _ in range(3):
            d = int(t[at + 1])
            ours_steps += steps_of(t[at + 2 : at + 2 + 2 * d])
            at += 2 + 2 * d
            total += d
        ours_total.append(total)
    chi2_same(ours_total, [len(s) for s in b])
    chi2_same(ours_steps, [x for s in b for x in s])


# --- the loader and the Python surface ---------------------------------------------------------------------------


def test_policies_are_reproducible_across_worker_counts() -> None:
    imgs = textured_images(12, 40, 40, seed=4)
    ops = [
        T.RandomCrop(32, padding=4),
        T.RandomHorizontalFlip(),
        T.TrivialAugmentWide(),
        T.RandAugment(),
        T.AugMix(),
        T.AutoAugment(),
        T.RandomRotation(10),
        T.RandomAffine(5, translate=(0.1, 0.1)),
        T.RandomPerspective(),
        T.RandomErasing(0.1),
    ]
    outs = []
    for workers in (1, 3):
        with trdata.Loader(
            trdata.Arrays(imgs),
            batch_size=4,
            transforms=ops,
            dtype="uint8",
            shuffle=False,
            workers=workers,
            seed=9,
        ) as ld:
            outs.append(np.concatenate([np.asarray(b.images).copy() for b in ld]))
    np.testing.assert_array_equal(outs[0], outs[1])
    assert outs[0].shape == (12, 3, 32, 32)


def test_values_are_checked_by_the_core_with_the_op_named() -> None:
    imgs = textured_images(2)
    for op, msg in [
        (T.RandomRotation(-5), "invalid degrees: (5, -5) must be finite with min ≤ max"),
        (T.RandomRotation(5, interpolation="bicubic"), "invalid interpolation"),
        (T.RandomAffine(0, translate=(0.2, 1.5)), "invalid translate: (0.2, 1.5) must be two fractions in [0, 1] (RandomAffine at transforms[1])"),
        (T.RandomAffine(0, scale=(0.0, 1.0)), "invalid scale"),
        (T.RandomAffine(0, shear=(1, 2, 3)), "invalid shear"),
        (T.RandomPerspective(1.5), "invalid distortion_scale: 1.5 must be in [0, 1]"),
        (T.RandomPerspective(fill=300), "invalid fill"),
        (T.AutoAugment("coco"), "invalid policy"),
        (T.RandAugment(magnitude=31), "invalid magnitude: 31 must be below num_magnitude_bins (31) (RandAugment at transforms[1])"),
        (T.RandAugment(num_magnitude_bins=1, magnitude=0), "invalid num_magnitude_bins: 1 must be in 2..=1000"),
        (T.RandAugment(num_ops=10**6), "invalid num_ops"),
        (T.AugMix(severity=11), "invalid severity: 11 must be in 1..=10"),
        (T.AugMix(mixture_width=0), "invalid mixture_width"),
        (T.AugMix(alpha=0.0), "invalid alpha"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError) as e:
            run_loader(imgs, [op])
        assert msg in str(e.value), (msg, str(e.value))
    with pytest.raises(ConfigError, match="invalid interpolation"):
        T.RandomRotation(5, interpolation=2)
    with pytest.raises(ConfigError, match="invalid num_ops"):
        T.RandAugment(num_ops=1.5)  # type: ignore[arg-type]


def test_defaults_are_torchvisions() -> None:
    v2 = tv()
    import inspect

    for ours, theirs in [
        (T.RandomRotation, v2.RandomRotation),
        (T.RandomAffine, v2.RandomAffine),
        (T.RandomPerspective, v2.RandomPerspective),
        (T.AutoAugment, v2.AutoAugment),
        (T.RandAugment, v2.RandAugment),
        (T.TrivialAugmentWide, v2.TrivialAugmentWide),
        (T.AugMix, v2.AugMix),
    ]:
        sig = inspect.signature(theirs)
        mine = inspect.signature(ours)
        assert list(mine.parameters) == list(sig.parameters), ours
        for k, p in sig.parameters.items():
            if p.default is inspect.Parameter.empty:
                continue
            d = getattr(p.default, "value", p.default)
            assert mine.parameters[k].default == d, (ours, k)


def test_from_torchvision_converts_geometry_and_policies() -> None:
    v2 = tv()
    import torch
    import torchvision.transforms as v1

    for mod in (v2, v1):
        pipe = mod.Compose(
            [
                mod.RandomResizedCrop(24),
                mod.RandomHorizontalFlip(),
                mod.TrivialAugmentWide(interpolation=mod.InterpolationMode.BILINEAR),
                mod.RandAugment(num_ops=2, magnitude=9),
                mod.AutoAugment(mod.AutoAugmentPolicy.SVHN),
                mod.AugMix(severity=2),
                mod.RandomRotation(10, fill=5),
                mod.RandomAffine(5, translate=(0.1, 0.2), shear=(1, 2, 3, 4)),
                mod.RandomPerspective(0.3),
                mod.ColorJitter(0.3, 0.3, 0.3),
            ]
        )
        c = T.from_torchvision(pipe)
        assert c.transforms[2] == T.TrivialAugmentWide(interpolation="bilinear")
        assert c.transforms[3] == T.RandAugment(2, 9)
        assert c.transforms[4] == T.AutoAugment("svhn")
        assert c.transforms[5] == T.AugMix(severity=2)
        assert c.transforms[6]._spec() == T.RandomRotation(10, fill=5)._spec()
        assert c.transforms[7]._spec() == T.RandomAffine(5, translate=(0.1, 0.2), shear=(1, 2, 3, 4))._spec()
        assert c.transforms[8] == T.RandomPerspective(0.3)
        with trdata.Loader(
            trdata.Arrays(textured_images(4, 40, 48)), batch_size=4, transforms=pipe, shuffle=False
        ) as ld:
            assert np.asarray(next(iter(ld)).images).shape == (4, 3, 24, 24)
    assert torch.is_tensor(torch.zeros(1))


# --- the folded resize's interpolation (reference: Pillow, as torchvision v2 runs it on PIL images) -------------


def run_resize(imgs: np.ndarray, transforms: list[Any]) -> np.ndarray:
    with trdata.Loader(
        trdata.Arrays(imgs), batch_size=len(imgs), transforms=transforms, dtype="uint8", layout="NHWC",
        shuffle=False, workers=2,
    ) as ld:  # fmt: skip
        return np.asarray(next(iter(ld)).images).copy()


@pytest.mark.parametrize("mode", ["nearest", "bicubic", "bilinear"])
@pytest.mark.parametrize("hw", [(20, 17), (90, 61), (37, 120), (13, 45)])
def test_resize_interpolation_matches_pillow(mode: str, hw: tuple[int, int]) -> None:
    pytest.importorskip("PIL")
    imgs = textured_images(3, 57, 73, seed=8)
    got = run_resize(imgs, [T.Resize(hw, interpolation=mode)])
    want = np.stack([pil_resize(i, hw, mode) for i in imgs])
    assert got.shape == want.shape
    if mode == "nearest":
        np.testing.assert_array_equal(got, want)
    else:
        assert close(got, want) >= 0.99
        # Pillow 13 runs the vertical pass first when the height shrinks much more than the width (37 × 120
        # from 57 × 73); older Pillow always ran horizontal first, which moves bicubic's clipped 8-bit
        # intermediate by up to ~8 levels on a few pixels. trdata follows Pillow 13.
        import PIL

        if int(PIL.__version__.split(".")[0]) >= 13 or mode == "bilinear":
            assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    # RandomResizedCrop pinned to the whole image (scale 1, the image's own aspect) resamples the same way.
    rrc = T.RandomResizedCrop(hw, scale=(1.0, 1.0), ratio=(73 / 57, 73 / 57), interpolation=mode)
    assert close(run_resize(imgs, [rrc]), want) >= 0.99


def test_resize_interpolation_matches_torchvision_on_pil() -> None:
    v2 = tv()
    from PIL import Image

    imgs = textured_images(3, 61, 83, seed=2)
    for mode in (v2.InterpolationMode.BICUBIC, v2.InterpolationMode.NEAREST):
        theirs = v2.Compose([v2.Resize(40, interpolation=mode), v2.CenterCrop(32)])
        want = np.stack([np.asarray(theirs(Image.fromarray(i))) for i in imgs])
        c = T.from_torchvision(theirs)
        assert c.transforms[0] == T.Resize(40, interpolation=mode.value)
        got = run_resize(imgs, c.transforms)
        assert close(got, want) >= 0.99, mode
    with pytest.raises(ConfigError, match="invalid interpolation"):
        run_resize(imgs, [T.Resize(32, interpolation="lanczos"), T.CenterCrop(32)])
    with pytest.raises(ConfigError, match="invalid antialias"):
        T.Resize(32, antialias=1)  # type: ignore[arg-type]


def test_resize_without_antialias_keeps_the_support_at_one_pixel() -> None:
    """antialias=False (torchvision's tensor option): a 4× bilinear downscale reads 2 taps per output, as
    ``F.resize(..., antialias=False)`` does, instead of Pillow's 8."""
    v2 = tv()
    import torchvision.transforms.v2.functional as F

    imgs = textured_images(2, 64, 64, seed=1)
    got = run_resize(imgs, [T.Resize((16, 16), antialias=False)])
    want = np.stack([hwc(F.resize(chw(i), [16, 16], antialias=False)) for i in imgs])
    assert close(got, want) >= 0.99
    smooth = run_resize(imgs, [T.Resize((16, 16))])
    assert close(smooth, want) < 0.9  # the antialiased one is a different image
    assert v2 is not None


def test_gray_images_warp_and_augment_as_torchvision() -> None:
    v2 = tv()
    g = textured_images(4, seed=6)[..., :1].copy()
    got, _, _ = run_loader(g, [T.RandomRotation((21.0, 21.0), "bilinear", fill=40)], channels=1)
    want = np.stack(
        [hwc(v2.RandomRotation((21.0, 21.0), v2.InterpolationMode.BILINEAR, fill=40)(chw(i))) for i in g]
    )
    assert close(got, want) >= 0.99
    ours = T.TrivialAugmentWide()
    got, epoch, idx = run_loader(g, [ours], channels=1)
    inst = v2.TrivialAugmentWide()
    for k, i in enumerate(idx):
        assert close(got[k], replay_policy(inst, g[i], drawn(ours, epoch, i))) >= 0.99
