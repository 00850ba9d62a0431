"""Regression harness for the pixel-stage kernels (src/augment/{kernels,warp,color}.rs, ops/ `Op::apply`,
policy.rs `apply_step`): every op and policy, with pinned and with seeded-live parameters, on real ImageNet
crops (176², 224², odd sizes, tiny sizes; RGB and gray), run through the Loader (uint8 NHWC out), and compared
byte for byte with a recorded run.

    PYTHONPATH=python .venv/bin/python scripts/kernel_golden.py write   # record (before optimising)
    PYTHONPATH=python .venv/bin/python scripts/kernel_golden.py check   # compare (after every change)
    ... check --only hue,blur                                            # a subset (substring match)

`write` stores the inputs and outputs in target/kernel_golden.npz (git-ignored, ~60 MB) and a SHA-256 per case in
scripts/kernel_golden.json (committed). `check` reruns every case on the *stored* inputs (so a later change to
decode or resample cannot move the inputs under the comparison) and reports, per case that differs, how many
bytes differ and by how much; with only the JSON present (a fresh clone) it rebuilds the inputs from the JPEGs
and checks the input hashes first.

The policies draw their sub-ops per sample; `_core.sample_op` traces which sub-ops (and magnitudes) each sample
got, and the report attributes a differing policy sample to its sub-ops, so a policy case doubles as the pinned
test of each sub-op at many magnitudes (the summary lists how often each sub-op was covered).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import trdata  # noqa: E402
from trdata import _core  # noqa: E402
from trdata import transforms as T  # noqa: E402

DATA = ROOT.parent / "shared/data/imagenet-sample"
NPZ = ROOT / "target/kernel_golden.npz"
JSON = Path(__file__).with_suffix(".json")

# (h, w) of the input sets: the two recipe sizes, odd sizes, and tiny ones that hit the kernels' edge cases
SIZES = [(176, 176), (224, 224), (97, 131), (3, 5), (2, 9), (1, 1)]
PER_SIZE = {(176, 176): 6, (224, 224): 6, (97, 131): 6, (3, 5): 3, (2, 9): 3, (1, 1): 3}
SEEDS = [0, 7]  # live-random ops and policies run under both (more samples, more sub-ops)

AUG_NAMES = [
    "Identity",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
    "Invert",
]


def jpegs() -> list[Path]:
    return sorted(DATA.rglob("*.JPEG"))[:40:2]


def inputs() -> dict[str, np.ndarray]:
    """Center crops of real JPEGs (decoded by Pillow, independent of trdata's decode/resample), RGB and gray."""
    files = jpegs()
    out: dict[str, np.ndarray] = {}
    k = 0
    for h, w in SIZES:
        imgs = []
        for _ in range(PER_SIZE[(h, w)]):
            im = Image.open(files[k % len(files)]).convert("RGB")
            k += 1
            if im.height < h or im.width < w:
                im = im.resize((max(w, im.width), max(h, im.height)))
            top, left = (im.height - h) // 2, (im.width - w) // 2
            imgs.append(np.asarray(im.crop((left, top, left + w, top + h))))
        rgb = np.stack(imgs)
        out[f"rgb{h}x{w}"] = rgb
        out[f"gray{h}x{w}"] = np.asarray([np.asarray(Image.fromarray(i).convert("L")) for i in rgb])[
            ..., None
        ]
    return out


def cases() -> list[tuple[str, list[Any], bool]]:
    """(name, ops, live): `live` cases run under every seed in SEEDS."""
    pinned: list[tuple[str, list[Any]]] = [
        ("pad-const", [T.Pad([1, 2, 3, 4], fill=(10, 20, 30))]),
        ("pad-edge", [T.Pad(3, padding_mode="edge")]),
        ("pad-reflect", [T.Pad((2, 5), padding_mode="reflect")]),
        ("pad-symmetric", [T.Pad(4, padding_mode="symmetric")]),
        ("vflip", [T.RandomVerticalFlip(p=1.0)]),
        ("grayscale3", [T.Grayscale(3)]),
        ("random-grayscale", [T.RandomGrayscale(p=1.0)]),
        ("invert", [T.RandomInvert(p=1.0)]),
        ("autocontrast", [T.RandomAutocontrast(p=1.0)]),
        ("equalize", [T.RandomEqualize(p=1.0)]),
        ("blur5-1.2", [T.GaussianBlur(5, sigma=(1.2, 1.2))]),
        ("blur3x7-2.5", [T.GaussianBlur((3, 7), sigma=(2.5, 2.5))]),
        ("blur23-3.3", [T.GaussianBlur(23, sigma=(3.3, 3.3))]),
        ("blur1-0.5", [T.GaussianBlur(1, sigma=(0.5, 0.5))]),
        ("erase-const", [T.RandomErasing(p=1.0, value=(12, 200, 99))]),
        ("erase-zero", [T.RandomErasing(p=1.0)]),
        ("erase-random", [T.RandomErasing(p=1.0, value="random")]),
        ("noise", [T.GaussianNoise()]),
        ("noise-0.3-noclip", [T.GaussianNoise(mean=0.1, sigma=0.3, clip=False)]),
    ]
    for f in [0.0, 0.01, 0.3, 0.6, 1.0, 1.3, 1.99, 3.7]:
        pinned.append((f"brightness-{f}", [T.ColorJitter(brightness=(f, f))]))
        pinned.append((f"contrast-{f}", [T.ColorJitter(contrast=(f, f))]))
        pinned.append((f"saturation-{f}", [T.ColorJitter(saturation=(f, f))]))
        pinned.append((f"sharpness-{f}", [T.RandomAdjustSharpness(f, p=1.0)]))
    for hf in [-0.5, -0.4, -0.1, 0.0, 0.03, 0.1, 0.25, 0.5]:
        pinned.append((f"hue-{hf}", [T.ColorJitter(hue=(hf, hf))]))
    for t in [0, 1, 64, 100.5, 128, 200, 255]:
        pinned.append((f"solarize-{t}", [T.RandomSolarize(t, p=1.0)]))
    for b in range(9):
        pinned.append((f"posterize-{b}", [T.RandomPosterize(b, p=1.0)]))
    for interp in ["nearest", "bilinear"]:
        for fill in [None, 0, (30, 60, 90)]:
            for deg in [30.0, -12.5, 90.0, 180.0, 135.0]:
                pinned.append(
                    (
                        f"rot-{interp}-{fill}-{deg}",
                        [T.RandomRotation((deg, deg), interpolation=interp, fill=fill)],
                    )
                )
            pinned.append(
                (
                    f"rot-expand-{interp}-{fill}",
                    [
                        T.RandomRotation((33, 33), interpolation=interp, expand=True, fill=fill),
                        T.RandomCrop(40, pad_if_needed=True),
                    ],
                )
            )
            pinned.append(
                (
                    f"rot-center-{interp}-{fill}",
                    [T.RandomRotation((-20, -20), interpolation=interp, center=(3, 7), fill=fill)],
                )
            )
            pinned.append(
                (
                    f"affine-{interp}-{fill}",
                    [
                        T.RandomAffine(
                            (15, 15),
                            scale=(0.9, 0.9),
                            shear=(10, 10, -5, -5),
                            interpolation=interp,
                            fill=fill,
                        )
                    ],
                )
            )
            pinned.append(
                (
                    f"shear-x-{interp}-{fill}",
                    [T.RandomAffine(0, shear=(-40, -40), interpolation=interp, fill=fill, center=(0, 0))],
                )
            )
            pinned.append(
                (
                    f"scale-{interp}-{fill}",
                    [T.RandomAffine(0, scale=(1.7, 1.7), interpolation=interp, fill=fill)],
                )
            )
    live: list[tuple[str, list[Any]]] = [
        ("jitter-all", [T.ColorJitter(0.4, 0.4, 0.4, 0.1)]),
        ("jitter-0.3", [T.ColorJitter(0.3, 0.3, 0.3)]),
        ("blur23-live", [T.GaussianBlur(23)]),
        ("erase-0.25", [T.RandomErasing(0.25)]),
        ("erase-random-live", [T.RandomErasing(p=1.0, scale=(0.2, 0.6), value="random")]),
        ("noise-live", [T.GaussianNoise(sigma=0.2)]),
        ("rotation-live", [T.RandomRotation(30)]),
        ("rotation-live-bilinear", [T.RandomRotation(30, interpolation="bilinear")]),
        ("affine-live", [T.RandomAffine(15, (0.1, 0.1), (0.9, 1.1), 10)]),
        (
            "affine-live-bilinear",
            [T.RandomAffine(15, (0.1, 0.1), (0.9, 1.1), 10, interpolation="bilinear", fill=(9, 99, 199))],
        ),
        ("perspective", [T.RandomPerspective(p=1.0)]),
        ("perspective-nearest", [T.RandomPerspective(0.7, p=1.0, interpolation="nearest")]),
        ("perspective-fill", [T.RandomPerspective(0.3, p=1.0, fill=(200, 10, 50))]),
        ("perspective-nofill", [T.RandomPerspective(0.6, p=1.0, fill=None)]),
        ("crop-reflect", [T.RandomCrop(48, padding=4, padding_mode="reflect", pad_if_needed=True)]),
    ]
    policies: list[tuple[str, list[Any]]] = [
        ("AA-imagenet", [T.AutoAugment()]),
        ("AA-cifar10", [T.AutoAugment("cifar10")]),
        ("AA-svhn", [T.AutoAugment("svhn")]),
        ("RA-m9", [T.RandAugment()]),
        ("RA-m9-ops3", [T.RandAugment(num_ops=3)]),
        ("RA-m30", [T.RandAugment(magnitude=30)]),
        ("RA-m0", [T.RandAugment(magnitude=0)]),
        (
            "RA-bilinear-fill",
            [T.RandAugment(num_ops=2, magnitude=15, interpolation="bilinear", fill=(5, 50, 150))],
        ),
        ("TA", [T.TrivialAugmentWide()]),
        ("TA-bilinear", [T.TrivialAugmentWide(interpolation="bilinear")]),
        ("TA-fill0", [T.TrivialAugmentWide(fill=0)]),
        ("AugMix", [T.AugMix()]),
        ("AugMix-sev6-d2", [T.AugMix(severity=6, chain_depth=2, all_ops=False)]),
        ("TA+erase0.1", [T.TrivialAugmentWide(), T.RandomErasing(0.1)]),
        (
            "RA+jitter+erase",
            [T.RandAugment(magnitude=9), T.ColorJitter(0.3, 0.3, 0.3), T.RandomErasing(0.25)],
        ),
    ]
    return [(n, o, False) for n, o in pinned] + [(n, o, True) for n, o in live + policies]


EPOCHS_LIVE = 3  # epochs per seed for live cases: more draws per image


def run(imgs: np.ndarray, ops: list[Any], seed: int, epochs: int) -> np.ndarray:
    n, h, w, c = imgs.shape
    outs = []
    with trdata.Loader(
        trdata.Arrays(imgs),
        batch_size=n,
        transforms=[T.CenterCrop((h, w)), *ops],
        dtype="uint8",
        layout="NHWC",
        shuffle=False,
        workers=1,
        seed=seed,
        channels=c,
    ) as ld:
        for e in range(epochs):
            ld.set_epoch(e)
            outs.extend(np.asarray(b.images).copy() for b in ld)
    return np.concatenate(outs)


def sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes() + str(a.shape).encode()).hexdigest()[:24]


def policy_subops(ops: list[Any], seed: int, epochs: int, n: int, h: int, w: int, c: int) -> list[list[str]]:
    """The sub-ops each output sample ran (policy ops only; AugMix chains flattened)."""
    per: list[list[str]] = []
    for e in range(epochs):
        for i in range(n):
            names: list[str] = []
            for pos, op in enumerate(ops, start=1):  # position 0 is the CenterCrop
                spec = op._spec()
                if spec[0] not in ("auto_augment", "rand_augment", "trivial_augment_wide", "augmix"):
                    continue
                t = _core.sample_op(
                    spec, seed=seed, epoch=e, index=i, position=pos, height=h, width=w, channels=c
                )
                if spec[0] == "augmix":
                    at = 1
                    while at < len(t):
                        d = int(t[at + 1])
                        names += [AUG_NAMES[int(t[at + 2 + 2 * j])] for j in range(d)]
                        at += 2 + 2 * d
                else:
                    names += [AUG_NAMES[int(t[j])] for j in range(0, len(t), 2)]
            per.append(names)
    return per


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["write", "check"])
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    a = ap.parse_args()
    only = [s for s in a.only.split(",") if s]

    stored: dict[str, np.ndarray] = {}
    if a.mode == "check" and NPZ.exists():
        with np.load(NPZ) as z:
            stored = {k: z[k] for k in z.files}
        ins = {k[3:]: v for k, v in stored.items() if k.startswith("in:")}
    else:
        ins = inputs()
    hashes: dict[str, str] = json.loads(JSON.read_text()) if a.mode == "check" else {}
    if a.mode == "check" and not stored:
        bad = [k for k, v in ins.items() if hashes.get(f"in:{k}") != sha(v)]
        if bad:
            sys.exit(f"inputs differ from the recorded ones (Pillow/JPEGs changed?): {bad}")

    new: dict[str, np.ndarray] = {f"in:{k}": v for k, v in ins.items()}
    new_hashes = {f"in:{k}": sha(v) for k, v in ins.items()}
    failures = 0
    checked = 0
    cover: Counter[str] = Counter()
    for name, ops, live in cases():
        if only and not any(s in name for s in only):
            continue
        for set_name, imgs in ins.items():
            for seed in SEEDS if live else [0]:
                key = f"{name}|{set_name}|{seed}"
                epochs = EPOCHS_LIVE if live else 1
                try:
                    out = run(imgs, ops, seed, epochs)
                except Exception as e:  # an op refusing a tiny image is recorded as such
                    out = np.frombuffer(f"error: {type(e).__name__}".encode(), np.uint8)
                new[key] = out
                new_hashes[key] = sha(out)
                if a.mode == "write":
                    continue
                checked += 1
                if new_hashes[key] == hashes.get(key):
                    continue
                failures += 1
                want = stored.get(key)
                msg = f"DIFF {key}: hash {new_hashes[key]} != {hashes.get(key)}"
                if want is not None and want.shape == out.shape and want.dtype == out.dtype:
                    d = np.abs(out.astype(np.int32) - want.astype(np.int32))
                    msg += f"; {int((d > 0).sum())}/{d.size} bytes differ, max {int(d.max())}"
                    if live and any(
                        op._spec()[0] in ("auto_augment", "rand_augment", "trivial_augment_wide", "augmix")
                        for op in ops
                    ):
                        n, h, w, c = imgs.shape
                        subs = policy_subops(ops, seed, epochs, n, h, w, c)
                        bad = Counter(s for i, ss in enumerate(subs) if d[i].any() for s in set(ss))
                        msg += f"; samples' sub-ops: {dict(bad)}"
                elif want is not None:
                    msg += f"; shape {out.shape} vs {want.shape}"
                print(msg, flush=True)
            if (
                live
                and a.mode == "write"
                and any(
                    op._spec()[0] in ("auto_augment", "rand_augment", "trivial_augment_wide", "augmix")
                    for op in ops
                )
            ):
                n, h, w, c = imgs.shape
                for seed in SEEDS:
                    for ss in policy_subops(ops, seed, EPOCHS_LIVE, n, h, w, c):
                        cover.update(ss)
    if a.mode == "write":
        NPZ.parent.mkdir(parents=True, exist_ok=True)
        np.savez(NPZ, **new)
        JSON.write_text(json.dumps(new_hashes, indent=0, sort_keys=True) + "\n")
        print(f"recorded {len(new_hashes)} hashes ({len(ins)} input sets); sub-op coverage: {dict(cover)}")
    else:
        print(f"checked {checked} cases: {failures} differ")
        sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
