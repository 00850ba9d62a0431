"""Cross-check of annot::coco against pycocotools and torchvision's CocoDetection rules.

For each COCO file: pycocotools' ``COCO(file)`` gives the reference, torchvision's ``CocoDetection`` rules give the
order (``ids = sorted(coco.imgs.keys())``) and each image's target (``coco.loadAnns(coco.getAnnIds(id))``); the
``coco_parse`` example's ``--dump-json`` gives what trdata parsed. Every image (id, file_name, width, height),
every annotation of it in order and every field (floats compared exactly; keypoints as float32, as
``torch.tensor(..., dtype=torch.float32)`` makes them), the orphan count and the categories must agree. Where a key
is missing, pycocotools has nothing to compare with, so trdata's documented default is checked instead.

Usage (from the repository root):

    cargo build --release --example coco_parse
    python scripts/coco_crosscheck.py target/release/examples/coco_parse FILE.json [FILE.json ...]
    python scripts/coco_crosscheck.py BINARY --edge-cases DIR   # writes the hand-made edge-case files to DIR first
"""

import json
import os
import subprocess
import sys

import numpy as np
from pycocotools.coco import COCO

EDGE_CASES = {
    # Ids written as integral floats, iscrowd as booleans, missing and null optional keys, an exact duplicate
    # image entry (one image in coco.imgs), an exact duplicate annotation (listed twice by getAnnIds), an orphan,
    # annotations before images, unknown keys holding NaN/Infinity, a repeated key, escapes in a file name.
    "edge_tolerated.json": """{"annotations": [
 {"image_id": 7.0, "bbox": [1, 2, 3, 4], "category_id": 1, "id": 3.0, "iscrowd": false, "extra": NaN},
 {"image_id": 7, "bbox": [0.1, 0.2, 0.30000000000000004, 4e-3], "category_id": 2, "id": 1, "iscrowd": true,
  "segmentation": {"counts": [0, 5, 3], "size": [2, 4]}, "area": 8},
 {"image_id": 5, "bbox": [1, 1, 1, 1], "category_id": 1, "id": 2, "segmentation": null, "area": 1e-300},
 {"image_id": 5, "bbox": [1, 1, 1, 1], "category_id": 1, "id": 2, "segmentation": null, "area": 1e-300},
 {"image_id": 404, "bbox": [1, 1, 1, 1], "category_id": 1, "id": 9, "area": 1},
 {"image_id": 5, "bbox": [9, 9, 9, 9], "bbox": [2, 3, 4, 5], "category_id": 1, "id": 10, "area": -0.0,
  "segmentation": [[1.5, 2.25, 3, 4, 5, 6.125], [0, 0, 1, 0, 1, 1]], "keypoints": [1, 2, 2, 3.3, 4.4, 0, 5, 6, 1],
  "junk": {"a": [Infinity, -Infinity, "\\ud800"]}}
],
"images": [
 {"id": 7, "file_name": "caf\\u00e9/\\"q\\".jpg", "width": 640.0, "height": 480, "coco_url": "x"},
 {"id": 5, "file_name": "b.jpg", "width": 3, "height": 2},
 {"id": 5, "file_name": "b.jpg", "width": 3, "height": 2, "license": 3},
 {"id": -1, "file_name": "neg.jpg", "width": 1, "height": 1}
],
"categories": [{"id": 1, "name": "person", "supercategory": "p", "keypoints": ["a", "b", "c"], "skeleton": [[1, 2], [2, 3]]},
 {"id": 2, "name": "thing"}],
"info": {"year": 2017}, "licenses": []}""",
    "edge_empty.json": '{"info": {}, "images": [], "annotations": [], "categories": []}',
    "edge_no_annotations.json": '{"images": [{"id": 3, "file_name": "a", "width": 1, "height": 1}, '
    '{"id": 1, "file_name": "b", "width": 2, "height": 2}]}',
}


def fail(msg):
    raise AssertionError(msg)


def same_float(ours, ref, what):
    if float(ours) != float(ref) or np.signbit(float(ours)) != np.signbit(float(ref)):
        fail(f"{what}: trdata {ours!r} != pycocotools {ref!r}")


def same_floats(ours, ref, what):
    if len(ours) != len(ref):
        fail(f"{what}: {len(ours)} values != {len(ref)}")
    for k, (a, b) in enumerate(zip(ours, ref)):
        same_float(a, b, f"{what}[{k}]")


def check_annotation(ours, ref, what):
    aid, image_id, category_id, iscrowd, area, bbox, seg, kp, nkp = ours
    for name, a, b in (
        ("id", aid, ref["id"]),
        ("image_id", image_id, ref["image_id"]),
        ("category_id", category_id, ref["category_id"]),
    ):
        if a != b:
            fail(f"{what}: {name} {a} != {b}")
    if bool(iscrowd) != bool(ref.get("iscrowd", 0)):
        fail(f"{what}: iscrowd {iscrowd} != {ref.get('iscrowd')}")
    same_floats(bbox, ref["bbox"], f"{what} bbox")
    same_float(area, ref["area"] if "area" in ref else ref["bbox"][2] * ref["bbox"][3], f"{what} area")
    rseg = ref.get("segmentation")
    if rseg is None:
        if seg is not None:
            fail(f"{what}: segmentation {seg!r} where pycocotools has none")
    elif isinstance(rseg, list):
        if len(seg) != len(rseg):
            fail(f"{what}: {len(seg)} polygons != {len(rseg)}")
        for k, (p, q) in enumerate(zip(seg, rseg)):
            same_floats(p, q, f"{what} polygon {k}")
    else:
        if list(seg["size"]) != list(rseg["size"]) or seg["counts"] != rseg["counts"]:
            fail(f"{what}: RLE {seg!r} != {rseg!r}")
    rkp = ref.get("keypoints")
    if rkp is None:
        if kp is not None:
            fail(f"{what}: keypoints where pycocotools has none")
    else:
        same_floats(np.float32(kp), np.array(rkp, dtype=np.float64).astype(np.float32), f"{what} keypoints")
    want_nkp = ref.get("num_keypoints", sum(1 for v in (rkp or [])[2::3] if v > 0))
    if nkp != want_nkp:
        fail(f"{what}: num_keypoints {nkp} != {want_nkp}")


def check(binary, path):
    coco = COCO(path)
    ids = sorted(coco.imgs.keys())  # torchvision CocoDetection.ids
    out = subprocess.run([binary, path, "--dump-json"], check=True, capture_output=True, text=True).stdout
    ours = json.loads(out)
    if [im[0] for im in ours["images"]] != ids:
        fail(f"{path}: image order differs")
    n_anns = 0
    for (_iid, file_name, width, height, anns), rid in zip(ours["images"], ids):
        img = coco.loadImgs(rid)[0]
        if (file_name, width, height) != (img["file_name"], img["width"], img["height"]):
            fail(
                f"{path}: image {rid}: {(file_name, width, height)} != {(img['file_name'], img['width'], img['height'])}"
            )
        target = coco.loadAnns(coco.getAnnIds(rid))  # CocoDetection._load_target
        if [a[0] for a in anns] != [a["id"] for a in target]:
            fail(f"{path}: image {rid}: annotation ids {[a[0] for a in anns]} != {[a['id'] for a in target]}")
        for a, r in zip(anns, target):
            check_annotation(a, r, f"{path}: image {rid} annotation {r['id']}")
        n_anns += len(anns)
    orphans = sum(1 for a in coco.dataset.get("annotations", []) if a["image_id"] not in coco.imgs)
    if ours["orphans"] != orphans:
        fail(f"{path}: orphans {ours['orphans']} != {orphans}")
    cats = coco.dataset.get("categories", [])
    want = [
        [
            c["id"],
            c.get("name", ""),
            c.get("supercategory", ""),
            c.get("keypoints", []),
            c.get("skeleton", []),
        ]
        for c in cats
    ]
    if ours["categories"] != want:
        fail(f"{path}: categories differ")
    print(f"OK {path}: {len(ids)} images, {n_anns} annotations, {orphans} orphans, {len(cats)} categories")


def main():
    binary, rest = sys.argv[1], sys.argv[2:]
    files = []
    if rest[:1] == ["--edge-cases"]:
        os.makedirs(rest[1], exist_ok=True)
        for name, text in EDGE_CASES.items():
            p = os.path.join(rest[1], name)
            with open(p, "w") as f:
                f.write(text)
            files.append(p)
        rest = rest[2:]
    for path in files + rest:
        check(binary, path)


if __name__ == "__main__":
    main()
