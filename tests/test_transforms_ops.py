"""The compiled program's pixel ops against torchvision v2 (tests that need torch/torchvision skip without them).

* pinned randomness (p=1, degenerate ranges): each op's uint8 output vs torchvision's on the same uint8 input,
  within ±1 level on ≥ 99 % of pixels;
* live randomness: the parameters trdata draws (``_core.sample_op``) vs torchvision's own ``make_params`` over
  10,000 draws each, two-sample KS (continuous) or χ² (discrete) statistics at α = 0.001;
* reproducibility across worker counts, from_torchvision round trips and refusals, argument errors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import close, ks, ks_limit, sampled_draws, textured_images, torchvision_params, tv
from trdata import _core
from trdata import transforms as T
from trdata.errors import ConfigError

H, W = 37, 45


def run_trdata(imgs: np.ndarray, ops: list[Any], **kw: Any) -> np.ndarray:
    kw.setdefault("workers", 2)
    with trdata.Loader(
        trdata.Arrays(imgs),
        batch_size=len(imgs),
        transforms=[T.CenterCrop((imgs.shape[1], imgs.shape[2])), *ops],
        dtype="uint8",
        layout="NHWC",
        shuffle=False,
        **kw,
    ) as ld:
        return np.concatenate([np.asarray(b.images).copy() for b in ld])


def run_tv(imgs: np.ndarray, op: Any) -> np.ndarray:
    import torch

    torch.manual_seed(0)
    out = [op(torch.from_numpy(i).permute(2, 0, 1).contiguous()).permute(1, 2, 0).numpy() for i in imgs]
    return np.stack(out)


# (trdata op, torchvision v2 op by name and args)
PINNED: list[tuple[Any, str, tuple[Any, ...], dict[str, Any]]] = [
    (T.Pad([1, 2, 3, 4], fill=(10, 20, 30)), "Pad", ([1, 2, 3, 4],), {"fill": [10, 20, 30]}),
    (T.Pad(3, padding_mode="edge"), "Pad", (3,), {"padding_mode": "edge"}),
    (T.Pad((2, 5), padding_mode="reflect"), "Pad", ((2, 5),), {"padding_mode": "reflect"}),
    (T.Pad(4, padding_mode="symmetric"), "Pad", (4,), {"padding_mode": "symmetric"}),
    (
        T.RandomCrop((H + 8, W + 8), padding=4, fill=7),
        "RandomCrop",
        ((H + 8, W + 8),),
        {"padding": 4, "fill": 7},
    ),
    (T.RandomVerticalFlip(p=1.0), "RandomVerticalFlip", (), {"p": 1.0}),
    (T.ColorJitter(brightness=(1.3, 1.3)), "ColorJitter", (), {"brightness": (1.3, 1.3)}),
    (T.ColorJitter(brightness=(0.6, 0.6)), "ColorJitter", (), {"brightness": (0.6, 0.6)}),
    (T.ColorJitter(contrast=(0.7, 0.7)), "ColorJitter", (), {"contrast": (0.7, 0.7)}),
    (T.ColorJitter(contrast=(1.6, 1.6)), "ColorJitter", (), {"contrast": (1.6, 1.6)}),
    (T.ColorJitter(saturation=(1.5, 1.5)), "ColorJitter", (), {"saturation": (1.5, 1.5)}),
    (T.ColorJitter(saturation=(0.2, 0.2)), "ColorJitter", (), {"saturation": (0.2, 0.2)}),
    (T.ColorJitter(hue=(0.1, 0.1)), "ColorJitter", (), {"hue": (0.1, 0.1)}),
    (T.ColorJitter(hue=(-0.4, -0.4)), "ColorJitter", (), {"hue": (-0.4, -0.4)}),
    (T.Grayscale(3), "Grayscale", (3,), {}),
    (T.RandomGrayscale(p=1.0), "RandomGrayscale", (), {"p": 1.0}),
    (T.GaussianBlur(5, sigma=(1.2, 1.2)), "GaussianBlur", (5,), {"sigma": (1.2, 1.2)}),
    (T.GaussianBlur((3, 7), sigma=(2.5, 2.5)), "GaussianBlur", ((3, 7),), {"sigma": (2.5, 2.5)}),
    (T.RandomAutocontrast(p=1.0), "RandomAutocontrast", (), {"p": 1.0}),
    (T.RandomEqualize(p=1.0), "RandomEqualize", (), {"p": 1.0}),
    (T.RandomSolarize(128, p=1.0), "RandomSolarize", (128,), {"p": 1.0}),
    (T.RandomSolarize(100.5, p=1.0), "RandomSolarize", (100.5,), {"p": 1.0}),
    (T.RandomPosterize(3, p=1.0), "RandomPosterize", (3,), {"p": 1.0}),
    (T.RandomPosterize(0, p=1.0), "RandomPosterize", (0,), {"p": 1.0}),
    (T.RandomAdjustSharpness(2.0, p=1.0), "RandomAdjustSharpness", (2.0,), {"p": 1.0}),
    (T.RandomAdjustSharpness(0.3, p=1.0), "RandomAdjustSharpness", (0.3,), {"p": 1.0}),
    (T.RandomInvert(p=1.0), "RandomInvert", (), {"p": 1.0}),
]


@pytest.mark.parametrize("ours,name,args,kw", PINNED, ids=[f"{p[1]}-{i}" for i, p in enumerate(PINNED)])
def test_pinned_op_matches_torchvision(
    ours: Any, name: str, args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    v2 = tv()
    imgs = textured_images()
    got = run_trdata(imgs, [ours])
    want = run_tv(imgs, getattr(v2, name)(*args, **kw))
    assert close(got, want) >= 0.99


def test_pinned_ops_on_gray_images_match_torchvision() -> None:
    v2 = tv()
    g = textured_images()[..., :1].copy()
    for ours, theirs in [
        (T.ColorJitter(contrast=(0.5, 0.5)), v2.ColorJitter(contrast=(0.5, 0.5))),
        (T.ColorJitter(brightness=(1.4, 1.4)), v2.ColorJitter(brightness=(1.4, 1.4))),
        (T.RandomEqualize(p=1.0), v2.RandomEqualize(p=1.0)),
        (T.RandomAdjustSharpness(3.0, p=1.0), v2.RandomAdjustSharpness(3.0, p=1.0)),
        (T.GaussianBlur(3, sigma=(0.8, 0.8)), v2.GaussianBlur(3, sigma=(0.8, 0.8))),
    ]:
        got = run_trdata(g, [ours], channels=1)
        assert close(got, run_tv(g, theirs)) >= 0.99, ours


def test_ops_after_a_resize_see_the_resized_image() -> None:
    """Pixel ops run on the prefix's output: [Resize((h, w)), Invert] == 255 - [Resize((h, w))]."""
    imgs = textured_images()
    with trdata.Loader(
        trdata.Arrays(imgs),
        batch_size=4,
        transforms=[T.Resize((20, 30))],
        dtype="uint8",
        layout="NHWC",
        shuffle=False,
        workers=1,
    ) as ld:
        base = np.asarray(next(iter(ld)).images).copy()
    with trdata.Loader(
        trdata.Arrays(imgs),
        batch_size=4,
        transforms=[T.Resize((20, 30)), T.RandomInvert(1.0)],
        dtype="uint8",
        layout="NHWC",
        shuffle=False,
        workers=1,
    ) as ld:
        inv = np.asarray(next(iter(ld)).images).copy()
    np.testing.assert_array_equal(inv, 255 - base)


def test_gaussian_noise_distribution_matches_torchvision() -> None:
    v2 = tv()
    flat = np.full((2, 64, 64, 3), 128, np.uint8)
    got = run_trdata(flat, [T.GaussianNoise(sigma=0.05)]).astype(np.int32) - 128
    want = run_tv(flat, v2.GaussianNoise(sigma=0.05)).astype(np.int32) - 128
    assert ks(got.ravel()[:20000], want.ravel()[:20000]) < ks_limit(20000, 20000)


# --- sampled-parameter distributions ---------------------------------------------------------------------------

N = 10_000


def chi2_same(a: np.ndarray, b: np.ndarray) -> None:
    """Two-sample χ² homogeneity test on discrete values, α = 0.001 (Wilson–Hilferty critical value)."""
    vals = np.union1d(a, b)
    ca = np.array([(a == v).sum() for v in vals], float)
    cb = np.array([(b == v).sum() for v in vals], float)
    keep = (ca + cb) >= 10
    ca, cb = ca[keep], cb[keep]
    tot = ca + cb
    ea, eb = tot * len(a) / (len(a) + len(b)), tot * len(b) / (len(a) + len(b))
    stat = float((((ca - ea) ** 2) / ea + ((cb - eb) ** 2) / eb).sum())
    k = max(len(tot) - 1, 1)
    crit = k * (1 - 2 / (9 * k) + 3.09 * np.sqrt(2 / (9 * k))) ** 3
    assert stat < crit, (stat, crit, vals)


def test_color_jitter_order_and_factors_match_torchvision() -> None:
    v2 = tv()
    a = np.array(sampled_draws(T.ColorJitter(0.4, 0.3, 0.5, 0.1)))
    b = torchvision_params(v2.ColorJitter(0.4, 0.3, 0.5, 0.1))
    perm_code = lambda o: int(o[0]) * 64 + int(o[1]) * 16 + int(o[2]) * 4 + int(o[3])  # noqa: E731
    chi2_same(np.array([perm_code(r[:4]) for r in a]), np.array([perm_code(p["fn_idx"].tolist()) for p in b]))
    for col, key in [
        (4, "brightness_factor"),
        (5, "contrast_factor"),
        (6, "saturation_factor"),
        (7, "hue_factor"),
    ]:
        tb = np.array([p[key] for p in b])
        assert ks(a[:, col], tb) < ks_limit(N, N), key


def test_random_crop_positions_match_torchvision() -> None:
    v2 = tv()
    a = np.array(sampled_draws(T.RandomCrop(24, padding=4)))
    b = torchvision_params(v2.RandomCrop(24, padding=4))
    # ours: padding (4) then top, left; theirs: the crop's top/left in the padded image.
    chi2_same(a[:, 4], np.array([p["top"] for p in b]))
    chi2_same(a[:, 5], np.array([p["left"] for p in b]))
    # pad_if_needed pads the missing size on both sides (v2's rule): 40 wanted from 32 → 8 each side.
    a = np.array(sampled_draws(T.RandomCrop(40, pad_if_needed=True)))
    b = torchvision_params(v2.RandomCrop(40, pad_if_needed=True))
    assert (a[:, :4] == 8).all()
    chi2_same(a[:, 4], np.array([p["top"] for p in b]))


def test_gaussian_blur_sigma_matches_torchvision() -> None:
    v2 = tv()
    a = np.array(sampled_draws(T.GaussianBlur(5, sigma=(0.1, 2.0))))[:, 0]
    b = np.array([p["sigma"][0] for p in torchvision_params(v2.GaussianBlur(5, sigma=(0.1, 2.0)))])
    assert ks(a, b) < ks_limit(N, N)


def test_random_erasing_boxes_match_torchvision() -> None:
    v2 = tv()
    h, w = 60, 80
    a = [r for r in sampled_draws(T.RandomErasing(p=1.0), h=h, w=w) if r]
    b = [
        p
        for p in torchvision_params(v2.RandomErasing(p=1.0), h=h, w=w)
        if p.get("v") is not None or p["h"] != h
    ]
    a_arr = np.array(a)
    for col, key in [(0, "i"), (1, "j"), (2, "h"), (3, "w")]:
        tb = np.array([p[key] for p in b], float)
        assert ks(a_arr[:, col], tb) < ks_limit(len(a_arr), len(tb)), key


def test_probability_gates_apply_at_rate_p() -> None:
    for op in [T.RandomInvert(0.3), T.RandomEqualize(0.5), T.RandomGrayscale(0.1), T.RandomVerticalFlip(0.7)]:
        hits = sum(1 for r in sampled_draws(op) if r)
        p = op.p
        assert abs(hits - N * p) < 4 * np.sqrt(N * p * (1 - p)), (op, hits)


def test_draws_depend_on_position_and_index_only() -> None:
    spec = T.ColorJitter(0.4, 0.4, 0.4, 0.1)._spec()
    kw = dict(seed=3, epoch=1, height=8, width=8, channels=3)
    a = _core.sample_op(spec, index=5, position=2, **kw)
    assert a == _core.sample_op(spec, index=5, position=2, **kw)
    assert a != _core.sample_op(spec, index=5, position=3, **kw)
    assert a != _core.sample_op(spec, index=6, position=2, **kw)


# --- the loader --------------------------------------------------------------------------------------------------


def test_reproducible_across_worker_counts() -> None:
    imgs = textured_images(12, 40, 40, seed=4)
    ops = [
        T.RandomCrop(32, padding=4),
        T.RandomHorizontalFlip(),
        T.ColorJitter(0.4, 0.4, 0.4, 0.1),
        T.RandomGrayscale(),
        T.GaussianBlur(3),
        T.GaussianNoise(),
        T.RandomErasing(value="random"),
        T.RandomSolarize(100),
    ]
    with trdata.Loader(
        trdata.Arrays(imgs), batch_size=4, transforms=ops, dtype="uint8", shuffle=False, workers=1
    ) as ld:
        one = np.concatenate([np.asarray(b.images).copy() for b in ld])
    with trdata.Loader(
        trdata.Arrays(imgs), batch_size=4, transforms=ops, dtype="uint8", shuffle=False, workers=3
    ) as ld:
        three = np.concatenate([np.asarray(b.images).copy() for b in ld])
    np.testing.assert_array_equal(one, three)
    assert one.shape == (12, 3, 32, 32)


def test_values_are_checked_by_the_core_with_the_op_named() -> None:
    imgs = textured_images(2)
    for op, msg in [
        (T.RandomInvert(p=1.5), "invalid p: 1.5 must be in [0, 1] (RandomInvert at transforms[1])"),
        (T.GaussianBlur(4), "invalid kernel_size: (4, 4) must be odd"),
        (T.ColorJitter(brightness=-0.5), "invalid brightness"),
        (T.ColorJitter(hue=0.7), "invalid hue"),
        (T.RandomPosterize(9), "invalid bits: 9 must be in 0..=8"),
        (T.Pad(2, padding_mode="wrap"), "invalid padding_mode"),
        (T.RandomErasing(value=300), "invalid value: [300.0] must be in [0, 255]"),
    ]:
        with pytest.raises(ConfigError, match=None) as e:
            run_trdata(imgs, [op])
        assert msg in str(e.value), (msg, str(e.value))
    with pytest.raises(ConfigError, match="invalid padding"):
        T.Pad("3")
    with pytest.raises(ConfigError, match="invalid value"):
        T.RandomErasing(value="mean")


def test_from_torchvision_imagenet_presets() -> None:
    v2 = tv()
    import torch
    import torchvision.transforms as v1

    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    train = v2.Compose(
        [
            v2.RandomResizedCrop(24),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(0.4, 0.4, 0.4),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean, std),
        ]
    )
    c = T.from_torchvision(train)
    assert [type(t).__name__ for t in c.transforms] == [
        "RandomResizedCrop",
        "RandomHorizontalFlip",
        "ColorJitter",
    ]
    assert c.normalize == (mean, std) and c.dtype == "float32"
    assert c.transforms[2] == T.ColorJitter(brightness=(0.6, 1.4), contrast=(0.6, 1.4), saturation=(0.6, 1.4))
    evl = v1.Compose([v1.Resize(28), v1.CenterCrop(24), v1.ToTensor(), v1.Normalize(mean, std)])
    c = T.from_torchvision(evl)
    assert c.transforms == [T.Resize(28), T.CenterCrop((24, 24))] and c.dtype == "float32"
    imgs = textured_images(8, 40, 48)
    for pipe in (train, evl):
        with trdata.Loader(
            trdata.Arrays(imgs), batch_size=8, transforms=pipe, shuffle=False, workers=1
        ) as ld:
            b = np.asarray(next(iter(ld)).images)
        assert b.shape == (8, 3, 24, 24) and b.dtype == np.float32
        assert b.min() < -1.0  # normalized, not x / 255
    # eval preset equals the native trdata pipeline bit for bit
    with trdata.Loader(
        trdata.Arrays(imgs),
        batch_size=8,
        transforms=[T.Resize(28), T.CenterCrop(24)],
        normalize=(mean, std),
        shuffle=False,
        workers=1,
    ) as ld:
        native = np.asarray(next(iter(ld)).images).copy()
    with trdata.Loader(trdata.Arrays(imgs), batch_size=8, transforms=evl, shuffle=False, workers=1) as ld:
        np.testing.assert_array_equal(np.asarray(next(iter(ld)).images), native)


def test_from_torchvision_refuses_naming_the_op() -> None:
    v2 = tv()
    # an op trdata does not compile runs in Python (tests/test_python_steps.py), except where it cannot:
    with pytest.raises(ConfigError, match=r"ElasticTransform at transforms\[2\].*after Normalize"):
        T.from_torchvision(
            v2.Compose([v2.RandomResizedCrop(24), v2.Normalize([0.5], [0.5]), v2.ElasticTransform()])
        )
    with pytest.raises(ConfigError, match=r"Resize at transforms\[0\].*max_size"):
        T.from_torchvision([v2.Resize(None, max_size=30), v2.CenterCrop(24)])
    with pytest.raises(ConfigError, match=r"ElasticTransform"):
        trdata.Loader(
            trdata.Arrays(textured_images(2)),
            transforms=[v2.CenterCrop(24), v2.Normalize([0.5], [0.5]), v2.ElasticTransform()],
        )


def test_random_erasing_after_normalize_is_converted_to_pixel_units() -> None:
    v2 = tv()
    import torch

    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    c = T.from_torchvision(
        [
            v2.CenterCrop(8),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean, std),
            v2.RandomErasing(value=1.0),
        ]
    )
    assert c.transforms[-1] == T.RandomErasing(value=(191.0, 191.0, 191.0))
