"""Detection and segmentation targets in a packed file: how ``trdata.pack`` stores a detection source's
annotations and how ``trdata.Packed`` gives them back, moved with the image as the source moved them.

A packed file holds them as extra fields of each record (the extras section, ``src/source/packed_extras.rs``)
under reserved names, in the source's pixels (before any transform), so a loader over the pack replays the same
geometry and delivers the same ``batch.targets`` as a loader over the source:

====================  ======  =====================================================================================
field                 kind    value
====================  ======  =====================================================================================
``target.size``       npy     int64 ``(2,)``: (width, height) the annotations refer to (the plan's source size)
``target.image_id``   npy     int64 ``()``: the source's ``image_id`` (COCO's id; the index for YOLO/segmentation)
``target.boxes``      npy     float64 ``(K, 4)``: XYXY boxes in source pixels (instance sources)
``target.labels``     npy     int64 ``(K,)``
``target.iscrowd``    npy     int64 ``(K,)``
``target.keypoints``  npy     float64 ``(K, P, 3)`` (x, y, visibility), when the source had ``keypoints=True``
``target.masks``      JSON    list of K pycocotools compressed RLE strings of ``height × width`` masks, when the
                              source had masks (polygons are rasterized once, when packing, as pycocotools does)
``target.label_map``  bytes   the label map's PNG file as the segmentation source read it
====================  ======  =====================================================================================

Reading checks every field against the others (shapes, dtypes, K) before use: a record whose fields disagree is a
``DecodeError`` naming ``file#record`` and the field (the section's CRC guards against damage, these checks
against a file written by something else). User extras keep their names; a name starting with ``target.`` is
reserved for these fields.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

from ..errors import DecodeError
from .extras import BYTES, JSON, NPY, decode

#: Prefix of the reserved field names.
PREFIX = "target."
#: Field whose presence makes a pack an instance-detection pack (its boxes also go to the core at open).
BOXES = PREFIX + "boxes"
#: Field whose presence makes a pack a semantic-segmentation pack.
LABEL_MAP = PREFIX + "label_map"
#: Field every target pack holds: (width, height) the annotations refer to.
SIZE = PREFIX + "size"


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(a, order="C"), allow_pickle=False)  # (ascontiguousarray makes a 0-d array 1-d)
    return buf.getvalue()


def encode(t: dict[str, Any]) -> list[tuple[str, int, bytes]]:
    """One image's annotations (source pixels) as (field, kind, bytes): ``size`` (w, h) and ``image_id`` always;
    ``boxes``/``labels``/``iscrowd`` (+ ``keypoints``, ``masks`` as RLE strings) for instances, or
    ``label_map_png`` for a semantic map."""
    out = [
        (SIZE, NPY, _npy(np.asarray(t["size"], np.int64).reshape(2))),
        (PREFIX + "image_id", NPY, _npy(np.asarray(t["image_id"], np.int64).reshape(()))),
    ]
    if "boxes" in t:
        out += [
            (BOXES, NPY, _npy(np.asarray(t["boxes"], np.float64).reshape(-1, 4))),
            (PREFIX + "labels", NPY, _npy(np.asarray(t["labels"], np.int64))),
            (PREFIX + "iscrowd", NPY, _npy(np.asarray(t["iscrowd"], np.int64))),
        ]
    if "keypoints" in t:
        out.append((PREFIX + "keypoints", NPY, _npy(np.asarray(t["keypoints"], np.float64))))
    if "masks" in t:
        out.append((PREFIX + "masks", JSON, json.dumps([s.decode("ascii") for s in t["masks"]]).encode()))
    if "label_map_png" in t:
        out.append((LABEL_MAP, BYTES, bytes(t["label_map_png"])))
    return sorted(out)


def _array(v: Any, name: str, dtype: Any, shape: tuple[int | None, ...], bad: Any) -> np.ndarray:
    """``v`` checked to be a ``dtype`` array of ``shape`` (None: any length)."""
    if not isinstance(v, np.ndarray) or v.dtype != np.dtype(dtype):
        raise bad(f"{name} is not a {np.dtype(dtype)} array")
    if v.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, v.shape)):
        raise bad(f"{name} has shape {v.shape}, not {tuple('K' if s is None else s for s in shape)}")
    return v


def decode_targets(stored: list[tuple[str, int, bytes]], where: str, path: str, index: int) -> dict[str, Any]:
    """One record's target fields (``(field, kind, bytes)`` as the core returns them) back as the annotations
    :func:`encode` took, checked against each other; ``where`` (``file#record``) names the record in errors."""

    def bad(message: str) -> DecodeError:
        return DecodeError(f"{where}: {message}", path=path, index=index, kind="Corrupt")

    v: dict[str, Any] = {}
    for name, kind, data in stored:
        if not name.startswith(PREFIX):
            continue
        try:
            v[name[len(PREFIX) :]] = decode(kind, data)
        except ValueError as e:
            raise bad(f"field {name!r} is not valid ({e})") from None
    if "size" not in v or "image_id" not in v:
        raise bad("lacks target.size or target.image_id")
    size = _array(v["size"], "target.size", np.int64, (2,), bad)
    if size.min() < 1 or size.max() > 1 << 31:
        raise bad(f"target.size {size.tolist()} is not an image size")
    t: dict[str, Any] = {
        "size": (int(size[0]), int(size[1])),
        "image_id": int(_array(v["image_id"], "target.image_id", np.int64, (), bad)),
    }
    if "boxes" in v:
        boxes = _array(v["boxes"], "target.boxes", np.float64, (None, 4), bad)
        k = len(boxes)
        t["boxes"] = boxes
        for key in ("labels", "iscrowd"):
            if key not in v:
                raise bad(f"has target.boxes but no target.{key}")
            t[key] = _array(v[key], f"target.{key}", np.int64, (k,), bad)
        if "keypoints" in v:
            t["keypoints"] = _array(v["keypoints"], "target.keypoints", np.float64, (k, None, 3), bad)
        if "masks" in v:
            masks = v["masks"]
            if not isinstance(masks, list) or len(masks) != k or not all(isinstance(s, str) for s in masks):
                raise bad(f"target.masks is not a list of {k} RLE strings")
            t["masks"] = np.array([s.encode("ascii", "replace") for s in masks] or [], dtype=object)
    if "label_map" in v:
        if not isinstance(v["label_map"], bytes):
            raise bad("target.label_map is not bytes")
        t["label_map_png"] = v["label_map"]
    return t
