#!/usr/bin/env python3
"""Writes tests/fixtures/coco_masks.json: seeded random COCO segmentations and what pycocotools makes of them.

The Rust tests of src/annot/mask.rs (mask_tests.rs) read it and must agree byte for byte. Each case holds its
input and pycocotools' output:

- "poly": polygons on an h×w canvas -> mask.merge(mask.frPyObjects(polys, h, w)) (COCO.annToRLE, torchvision's
  segmentation_to_mask), or the exception's name when frPyObjects refuses the list;
- "counts": an uncompressed RLE dict -> mask.frPyObjects(dict, h, w) (its own size wins over h, w);
- "string": a compressed RLE from mask.encode of a random mask, used as it is;
- "merge": several uncompressed RLEs of one size (zero-length runs in the first) -> mask.merge of them.

and, for each result, the compressed string ("rle"), its size, mask.area, mask.toBbox and the row-major bits of
a small window of mask.decode ("window": [x0, y0, cw, ch, hex of the bits, 4 per digit, high first]).

Usage: python scripts/make_coco_mask_fixtures.py [--seed N] [--out PATH]
(needs pycocotools and numpy; the version used is recorded in the file).
"""

import argparse
import importlib.metadata
import json
import math
import random

import numpy as np
from pycocotools import mask as M


def rand_canvas(rng, large=0.4):
    r = rng.random()
    if r < 0.08:
        return 1, 1
    if r < 0.14:
        return 1, rng.randint(1, 40)
    if r < 0.2:
        return rng.randint(1, 40), 1
    if r < 1 - large:
        return rng.randint(1, 60), rng.randint(1, 60)
    return rng.randint(1, 600), rng.randint(1, 800)


def coord(rng, v, style):
    if style == "int":
        return float(round(v))
    if style == "tenth":  # on the 0.1 grid, where 5x + .5 lands on (or next to) integers: rounding ties
        return round(v * 10) / 10
    return round(v, rng.choice([1, 2, 3]))


def polygon(rng, h, w):
    style = rng.choice(["int", "tenth", "float", "float"])
    kind = rng.choice(
        ["convex", "convex", "star", "star", "random", "collinear", "repeated", "zero_area", "outside",
         "partly_outside", "negative", "huge", "tiny", "box", "thin"])
    cx, cy = rng.uniform(-0.1 * w, 1.1 * w), rng.uniform(-0.1 * h, 1.1 * h)
    rad = rng.uniform(0.3, max(h, w) * 0.7)
    n = rng.randint(3, 14)
    pts = []
    if kind in ("convex", "star", "partly_outside", "tiny"):
        if kind == "tiny":
            rad = rng.uniform(0.05, 1.5)
        if kind == "partly_outside":
            cx, cy = rng.choice([0, w]) + rng.uniform(-3, 3), rng.choice([0, h]) + rng.uniform(-3, 3)
        angles = sorted(rng.uniform(0, 2 * math.pi) for _ in range(n))
        for a in angles:
            r = rad * (rng.uniform(0.2, 1.0) if kind == "star" else 1.0)
            pts.append((cx + r * math.cos(a), cy + r * math.sin(a)))
    elif kind == "random":
        pts = [(rng.uniform(-0.2 * w, 1.2 * w), rng.uniform(-0.2 * h, 1.2 * h)) for _ in range(n)]
    elif kind == "collinear":
        dx, dy = rng.uniform(-5, 5), rng.uniform(-5, 5)
        pts = [(cx + t * dx, cy + t * dy) for t in sorted(rng.uniform(-10, 10) for _ in range(n))]
    elif kind == "repeated":
        base = [(rng.uniform(0, w), rng.uniform(0, h)) for _ in range(max(3, n // 2))]
        for p in base:
            pts.extend([p] * rng.randint(1, 3))
    elif kind == "zero_area":
        a, b = (rng.uniform(0, w), rng.uniform(0, h)), (rng.uniform(0, w), rng.uniform(0, h))
        pts = [a, b, a] if rng.random() < 0.5 else [a, b, a, b]
    elif kind == "outside":
        ox = rng.choice([-1, 1]) * rng.uniform(w + 5, 3 * w + 50)
        pts = [(ox + rng.uniform(-20, 20), rng.uniform(-50, h + 50)) for _ in range(n)]
    elif kind == "negative":
        pts = [(rng.uniform(-40, w * 0.5), rng.uniform(-40, h * 0.5)) for _ in range(n)]
    elif kind == "huge":
        pts = [(rng.uniform(-1e5, 1e5), rng.uniform(-1e5, 1e5)) for _ in range(rng.randint(3, 5))]
        if rng.random() < 0.5:  # one far point, the rest on the canvas
            pts = [(rng.uniform(0, w), rng.uniform(0, h)) for _ in range(3)] + pts[:1]
    elif kind == "box":
        x0, y0 = rng.uniform(-2, w), rng.uniform(-2, h)
        x1, y1 = x0 + rng.uniform(0, w / 2 + 1), y0 + rng.uniform(0, h / 2 + 1)
        pts = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]
    elif kind == "thin":
        x0, y0 = rng.uniform(0, w), rng.uniform(0, h)
        pts = [(x0, y0), (x0 + rng.uniform(-0.3, 0.3), y0 + rng.uniform(-h, h)), (x0 + rng.uniform(-0.3, 0.3), y0)]
    xy = []
    for x, y in pts:
        xy.append(coord(rng, x, style))
        xy.append(coord(rng, y, style))
    return xy


def short_list(rng):
    """A polygon after the first of any short length (0..5 numbers): frPoly takes int(len/2) points."""
    return [round(rng.uniform(-5, 30), 1) for _ in range(rng.randint(0, 5))]


def window(rng, mask):
    h, w = mask.shape
    cw, ch = rng.randint(1, min(w, 12)), rng.randint(1, min(h, 12))
    x0, y0 = rng.randint(0, w - cw), rng.randint(0, h - ch)
    bits = mask[y0:y0 + ch, x0:x0 + cw].reshape(-1)
    bits = np.concatenate([bits, np.zeros((-len(bits)) % 4, dtype=np.uint8)])
    digits = "".join("%x" % (int(bits[i]) * 8 + int(bits[i + 1]) * 4 + int(bits[i + 2]) * 2 + int(bits[i + 3]))
                     for i in range(0, len(bits), 4))
    return [x0, y0, cw, ch, digits]


def result(rng, rle):
    counts = rle["counts"]
    return {
        "size": [int(rle["size"][0]), int(rle["size"][1])],
        "rle": counts.decode("ascii") if isinstance(counts, bytes) else counts,
        "area": int(M.area(rle)),
        "bbox": [float(v) for v in M.toBbox(rle)],
        "window": window(rng, M.decode(rle)),
    }


def random_mask(rng, h, w):
    m = np.zeros((h, w), dtype=np.uint8, order="F")
    for _ in range(rng.randint(0, 4)):
        x0, y0 = rng.randint(0, w - 1), rng.randint(0, h - 1)
        m[y0:y0 + rng.randint(1, h), x0:x0 + rng.randint(1, w)] ^= 1
    if rng.random() < 0.3:  # a little noise
        for _ in range(rng.randint(1, 20)):
            m[rng.randint(0, h - 1), rng.randint(0, w - 1)] ^= 1
    if rng.random() < 0.1:
        m[:] = 1
    return m


def random_counts(rng, hw):
    """Runs summing to hw, zero-length runs (leading and in the middle) included."""
    cuts = sorted(rng.randint(0, hw) for _ in range(rng.randint(0, min(hw, 12))))
    counts, p = [], 0
    for c in cuts + [hw]:
        counts.append(c - p)
        p = c
    return counts


def canonical(counts):
    """The same mask without zero-length runs (but a leading one)."""
    out = [counts[0]]
    for i, c in enumerate(counts[1:], 1):
        if c == 0:
            continue
        if (len(out) % 2) == (i % 2):
            out.append(c)
        else:
            out[-1] += c
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=20240611)
    ap.add_argument("--out", default="tests/fixtures/coco_masks.json")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    cases = []

    # frPyObjects' choices by the first polygon's length, written out (the random cases below meet them rarely).
    tri = [1.0, 1.0, 9.5, 2.0, 4.0, 8.0]
    for polys in ([[1.0, 2.0, 5.0, 6.0]], [[1.0, 2.0, 5.0, 6.0], tri], [[1.0, 2.0]] * 4, [[1.0, 2.0]] * 5,
                  [[1.0, 2.0, 3.0]], [[]], [], [[1.0, 2.0, 8.0, 4.0, 5.0]], [tri, []], [tri, [3.0]], [tri, [3.0, 3.0]],
                  [tri, [3.0, 3.0, 7.0, 7.0]], [tri, [3.0, 3.0, 7.0, 7.0, 2.0]], [tri + [100.0]],
                  [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0]], [[-0.1, -0.1, 11.9, -0.1, 11.9, 9.9, -0.1, 9.9]]):
        case = {"kind": "poly", "h": 10, "w": 12, "polys": polys}
        try:
            case["out"] = result(rng, M.merge(M.frPyObjects(polys, 10, 12)))
        except Exception as e:  # noqa: BLE001 - the refusal is what we record
            case["error"] = type(e).__name__
        cases.append(case)

    for _ in range(520):
        h, w = rand_canvas(rng, large=0.25)
        polys = [polygon(rng, h, w) for _ in range(rng.choice([1, 1, 1, 2, 3, 5]))]
        r = rng.random()
        if r < 0.06:
            polys.insert(rng.randint(1, len(polys)), short_list(rng))
        elif r < 0.09:
            polys[0] = polys[0][:rng.choice([0, 1, 2, 3, 4])]  # frPyObjects refuses these
        elif r < 0.12:
            polys[0] = polys[0] + [round(rng.uniform(0, w), 1)]  # odd length: the last number is dropped
        elif r < 0.13:
            polys = []
        case = {"kind": "poly", "h": h, "w": w, "polys": polys}
        try:
            case["out"] = result(rng, M.merge(M.frPyObjects(polys, h, w)))
        except Exception as e:  # noqa: BLE001 - the refusal is what we record
            case["error"] = type(e).__name__
        cases.append(case)

    for _ in range(90):
        h, w = rand_canvas(rng)
        ch, cw = rand_canvas(rng)  # the canvas given to frPyObjects, ignored by it
        counts = random_counts(rng, h * w)
        rle = M.frPyObjects({"size": [h, w], "counts": counts}, ch, cw)
        cases.append({"kind": "counts", "h": ch, "w": cw, "size": [h, w], "counts": counts, "out": result(rng, rle)})

    for _ in range(110):
        h, w = rand_canvas(rng)
        rle = M.encode(random_mask(rng, h, w))
        cases.append({"kind": "string", "size": [h, w], "string": rle["counts"].decode("ascii"),
                      "out": result(rng, rle)})

    for _ in range(50):
        h, w = rand_canvas(rng)
        # Zero-length runs in the first part only: where two inputs have empty runs at one position, rleMerge
        # stops early with a truncated RLE and loops for ever on the next input (the Rust side refuses those).
        parts = [random_counts(rng, h * w)]
        parts += [canonical(random_counts(rng, h * w)) for _ in range(rng.randint(0, 3))]
        rle = M.merge([M.frPyObjects({"size": [h, w], "counts": c}, h, w) for c in parts])
        cases.append({"kind": "merge", "size": [h, w], "parts": parts, "out": result(rng, rle)})

    doc = {
        "generator": "scripts/make_coco_mask_fixtures.py",
        "seed": args.seed,
        "pycocotools": importlib.metadata.version("pycocotools"),
        "numpy": np.__version__,
        "cases": cases,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{args.out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
