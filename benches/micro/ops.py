"""Per-op cost of the compiled program's pixel ops: µs per image for each op on the ImageNet sample at 224²,
one worker, each op's run interleaved with the no-op baseline (RandomResizedCrop(224) + flip, the fused path)
so drift on a shared machine cancels.

    PYTHONPATH=python python benches/micro/ops.py [--data ../shared/data/imagenet-sample] [--images 300] [--rounds 3]
        [--size 224] [--only substring,...] [--json out.json] [--compare before.json]

``--json`` writes the table; ``--compare`` adds a before column and the ratio (run the old build with its own
PYTHONPATH into a JSON first, e.g. a copy of python/trdata with the old ``_core`` .so).

Cost of op X = median over rounds of (time per image of [RRC, flip, X]) - (time of [RRC, flip]). The first op
in the uint8 stage also pays for the intermediate image and the separate final write (reported as
"uint8 stage (RandomInvert p=0)"), which every other row includes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trdata
from trdata import transforms as T

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import DEFAULT_DATA, write_json  # noqa: E402

OPS: list[tuple[str, Any]] = [
    ("uint8 stage (RandomInvert p=0)", T.RandomInvert(p=0.0)),
    ("RandomVerticalFlip p=1 (folded)", T.RandomVerticalFlip(p=1.0)),
    ("Pad(4) + RandomCrop(224)", [T.Pad(4), T.RandomCrop(224)]),
    ("RandomCrop(224, padding=4, reflect)", T.RandomCrop(224, padding=4, padding_mode="reflect")),
    ("ColorJitter(0.4, 0.4, 0.4, 0.1)", T.ColorJitter(0.4, 0.4, 0.4, 0.1)),
    ("ColorJitter(brightness=0.4)", T.ColorJitter(brightness=0.4)),
    ("ColorJitter(contrast=0.4)", T.ColorJitter(contrast=0.4)),
    ("ColorJitter(saturation=0.4)", T.ColorJitter(saturation=0.4)),
    ("ColorJitter(hue=0.1)", T.ColorJitter(hue=0.1)),
    ("Grayscale(3)", T.Grayscale(3)),
    ("GaussianBlur(23)", T.GaussianBlur(23)),
    ("GaussianBlur(5)", T.GaussianBlur(5)),
    ("GaussianNoise()", T.GaussianNoise()),
    ("RandomErasing(p=1)", T.RandomErasing(p=1.0)),
    ("RandomErasing(p=1, 'random')", T.RandomErasing(p=1.0, value="random")),
    ("RandomAutocontrast(p=1)", T.RandomAutocontrast(p=1.0)),
    ("RandomEqualize(p=1)", T.RandomEqualize(p=1.0)),
    ("RandomSolarize(128, p=1)", T.RandomSolarize(128, p=1.0)),
    ("RandomPosterize(4, p=1)", T.RandomPosterize(4, p=1.0)),
    ("RandomAdjustSharpness(2, p=1)", T.RandomAdjustSharpness(2.0, p=1.0)),
    ("RandomInvert(p=1)", T.RandomInvert(p=1.0)),
    ("RandomRotation(30) nearest, fill=0", T.RandomRotation(30)),
    ("RandomRotation(30) bilinear", T.RandomRotation(30, interpolation="bilinear")),
    ("RandomAffine(15, (0.1, 0.1), (0.9, 1.1), 10)", T.RandomAffine(15, (0.1, 0.1), (0.9, 1.1), 10)),
    ("RandomPerspective(p=1) bilinear", T.RandomPerspective(p=1.0)),
    ("AutoAugment() imagenet", T.AutoAugment()),
    ("RandAugment() m9", T.RandAugment()),
    ("TrivialAugmentWide()", T.TrivialAugmentWide()),
    ("AugMix()", T.AugMix()),
    # the benchmark recipes' augmentation tails (on top of RRC + flip)
    ("TA + RandomErasing(0.1)", [T.TrivialAugmentWide(), T.RandomErasing(0.1)]),
    (
        "RA m9 + ColorJitter(0.3) + RandomErasing(0.25)",
        [T.RandAugment(magnitude=9), T.ColorJitter(0.3, 0.3, 0.3), T.RandomErasing(0.25)],
    ),
]


def per_image_s(root: Path, n: int, ops: list[Any], size: int = 224) -> float:
    src = trdata.ImageFolder(root)
    with trdata.Loader(
        src,
        batch_size=50,
        transforms=[T.RandomResizedCrop(size), T.RandomHorizontalFlip(), *ops],
        workers=1,
        dtype="float16",
        normalize=trdata.IMAGENET,
        shuffle=False,
        last_batch="drop",
    ) as ld:
        t = time.perf_counter()
        seen = 0
        for b in ld:
            seen += len(b.indices)
            if seen >= n:
                break
        return (time.perf_counter() - t) / seen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--only", default="", help="comma-separated substrings of op names")
    ap.add_argument("--json", default="", help="write {op: µs} here")
    ap.add_argument("--compare", default="", help="a --json file of an earlier build: adds before and ratio")
    a = ap.parse_args()
    root = Path(a.data)
    only = [s for s in a.only.split(",") if s]
    before: dict[str, float] = json.loads(Path(a.compare).read_text()) if a.compare else {}
    per_image_s(root, 50, [], a.size)  # warm the page cache
    extra = f" {'before':>9s} {'×':>6s}" if before else ""
    print(f"{'op':48s} {'µs/img':>9s}{extra}   (baseline RRC{a.size}+flip → f16, 1 worker)")
    base_all = []
    table: dict[str, float] = {}
    for name, op in OPS:
        if only and not any(s in name for s in only):
            continue
        ops = op if isinstance(op, list) else [op]
        deltas = []
        for _ in range(a.rounds):
            base = per_image_s(root, a.images, [], a.size)
            with_op = per_image_s(root, a.images, ops, a.size)
            base_all.append(base)
            deltas.append(with_op - base)
        us = statistics.median(deltas) * 1e6
        table[name] = us
        cmp = ""
        if name in before:
            ratio = f"{before[name] / us:6.1f}" if us > 0 and before[name] > 0 else f"{'n/a':>6s}"
            cmp = f" {before[name]:9.1f} {ratio}"
        print(f"{name:48s} {us:9.1f}{cmp}", flush=True)
    table["baseline"] = statistics.median(base_all) * 1e6
    print(f"{'baseline (RRC+flip, fused)':48s} {table['baseline']:9.1f} per image in total")
    if a.json:
        write_json(a.json, table, newline=True)


if __name__ == "__main__":
    main()
