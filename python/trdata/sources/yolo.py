"""YOLO's txt layout (ultralytics' ``images/`` + ``labels/``) as a detection source whose boxes move with the image.

``YoloDetection(root, split=None, classes=None, masks=False)`` lists ``root/images[/split]`` recursively (the image suffixes
ultralytics lists that trdata decodes: bmp, jpg, jpeg, png, tif, tiff, webp; sorted full paths, ultralytics'
order) and reads each image's labels from the path ultralytics derives (``img2label_paths``: the last
``/images/`` of the path replaced by ``/labels/``, the suffix by ``.txt``). A missing label file is an image
without objects (ultralytics' rule). Each non-blank line is one object:

* ``class cx cy w h``: a box, normalized center/size (CXCYWH in [0, 1]);
* ``class x1 y1 x2 y2 ... xn yn`` (n >= 3): a segment; its box is the polygon's bounds, as ultralytics'
  ``segments2boxes`` makes it. The box then moves as torchvision moves boxes (after a rotation or a warp it
  encloses the moved bounds; ultralytics re-derives it from the warped polygon). As in ultralytics, a file with one segment line is a file of segments: a box line
  in it is refused (ultralytics would read its four numbers as a two-point polygon).

Validation (each failure a ``SourceError`` naming the file and, for a bad line, its 1-based line number): a label
file is at most 16 MiB and 100,000 lines of at most 1 MiB each (what a parse holds is a few times that), ASCII decimal numbers only (no nan/inf, no ``1_0``), a class id an
integer in [0, 2**31) (and below ``len(classes)`` when ``classes`` is given, ultralytics' check), every coordinate
finite and within ultralytics' 1 % tolerance, [-0.01, 1.01]; values in the tolerance are kept as written, not
clipped (ultralytics does not clip them when loading either; a crop clamps them, ``ClampBoundingBoxes`` too),
except a box's width or height: a negative one (an inverted box, which ultralytics gives no meaning) is refused.
Exact duplicate objects (same class and box) are dropped, keeping the first in file order (ultralytics drops
them too, but re-sorts the file's objects when it does). A leading UTF-8 byte-order mark is skipped. Label
files and images are opened by the core's rules: a FIFO, a device or a directory where one belongs is a
``SourceError`` saying what it is (never waited on). ``classes`` must be distinct names (a ``ConfigError``).

Image sizes (to denormalize) come from each image's header, read once at construction with Pillow (no pixel is
decoded). An image with an EXIF orientation other than 1 is refused: ultralytics' labels are relative to the
image as cv2 shows it (EXIF applied), while a detection source's targets live on the stored pixels
(``exif_transpose=True`` is refused for them); transpose such files once (``PIL.ImageOps.exif_transpose``).
Pose files (keypoints after the box) are not supported: they would read as segments.

``masks=True``: each object's instance mask too, rasterized once per image when first asked for (pycocotools'
polygon rasterization, ``_core.polygon_rles``: a segment's polygon in pixels, a box line's rectangle), moved with
the image as COCO's masks are.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .. import _core
from ..errors import ConfigError, SourceError
from . import packed_targets
from .base import Source, _class_names, refuse_url
from .targets import list_files, open_regular, opt_str, path_arg, pillow, python_targets, read_header

#: ultralytics' ``IMG_FORMATS`` that trdata decodes (dng, mpo, pfm and heic are not listed).
YOLO_EXTENSIONS = (".bmp", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")
#: Bounds of one label file: its bytes and its lines.
MAX_LABEL_BYTES = 16 << 20
MAX_LABEL_LINES = 100_000
#: Bound of one line (a segment of some 60,000 points): what one line's fields may take while parsed.
MAX_LINE_BYTES = 1 << 20
#: Class ids are below this (int32 ids, as every model's class count is).
MAX_CLASS_ID = 2**31
#: ultralytics' tolerance: normalized coordinates within [-0.01, 1.01].
COORD_MIN, COORD_MAX = -0.01, 1.01

# A decimal number, ASCII only: what ultralytics' writers write. float() alone would also take "nan", "inf",
# "1_0" and non-ASCII digits.
_NUMBER = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_BOM = b"\xef\xbb\xbf"


class YoloLabels(NamedTuple):
    """One label file's objects, in file order: ``classes`` int64 ``(K,)``, ``boxes`` float64 ``(K, 4)`` normalized
    XYXY, ``polygons`` the normalized ``(P, 2)`` points of each object (None for a box line)."""

    classes: np.ndarray
    boxes: np.ndarray
    polygons: list[np.ndarray | None]


def _line_error(path: str, line: int, message: str) -> SourceError:
    return SourceError(f"{path}, line {line}: {message}", path)


def _shown(token: bytes) -> str:
    return repr(token[:40]) + ("…" if len(token) > 40 else "")


def parse_labels(data: bytes, path: str, num_classes: int | None = None) -> YoloLabels:
    """A YOLO label file's bytes (module docs) → its objects; ``path`` names the file in errors; class ids must be
    below ``num_classes`` when given."""
    if len(data) > MAX_LABEL_BYTES:
        raise SourceError(f"{path}: a label file of {len(data)} bytes is larger than {MAX_LABEL_BYTES}", path)
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    lines = data.splitlines()
    if len(lines) > MAX_LABEL_LINES:
        raise SourceError(f"{path}: a label file of more than {MAX_LABEL_LINES} lines", path)
    long = next((n for n, line in enumerate(lines, 1) if len(line) > MAX_LINE_BYTES), None)
    if long is not None:
        raise _line_error(path, long, f"a line of more than {MAX_LINE_BYTES} bytes")
    # ultralytics: one line of more than 6 fields makes the file one of segments (at most 8 fields split here)
    segments = next((n for n, line in enumerate(lines, 1) if len(line.split(None, 7)) > 6), None)
    classes: list[int] = []
    boxes: list[tuple[float, float, float, float]] = []
    polygons: list[np.ndarray | None] = []
    seen: set[tuple[int, tuple[float, float, float, float]]] = set()
    for n, line in enumerate(lines, 1):
        tokens = line.split()  # one line's fields at a time: at most MAX_LINE_BYTES / 2 of them
        if not tokens:
            continue
        if segments is None and len(tokens) != 5:
            raise _line_error(path, n, f"{len(tokens)} fields: a box line is `class cx cy w h` (5 fields)")
        if segments is not None and (len(tokens) < 7 or len(tokens) % 2 == 0):
            what = "a box line" if len(tokens) == 5 else f"{len(tokens)} fields"
            raise _line_error(
                path,
                n,
                f"{what} in a file of segments (line {segments} is one): a segment line is "
                "`class x1 y1 x2 y2 ... xn yn` with n >= 3 points",
            )
        values = []
        for k, token in enumerate(tokens):
            if _NUMBER.fullmatch(token) is None:
                raise _line_error(path, n, f"field {k + 1}, {_shown(token)}, is not a decimal number")
            v = float(token)
            if not np.isfinite(v):
                raise _line_error(path, n, f"field {k + 1}, {_shown(token)}, is not finite")
            values.append(v)
        c = values[0]
        if c != int(c) or not 0 <= c < MAX_CLASS_ID:
            raise _line_error(path, n, f"class {_shown(tokens[0])} is not an integer in [0, 2**31)")
        if num_classes is not None and c >= num_classes:
            raise _line_error(path, n, f"class {int(c)} is not below the {num_classes} classes given")
        coords = values[1:]
        bad = next((k for k, v in enumerate(coords) if not COORD_MIN <= v <= COORD_MAX), None)
        if bad is not None:
            raise _line_error(
                path,
                n,
                f"field {bad + 2}, {_shown(tokens[bad + 1])}, is outside [{COORD_MIN}, {COORD_MAX}]: coordinates "
                "are normalized to the image size (ultralytics' 1 % tolerance)",
            )
        polygon: np.ndarray | None = None
        if segments is None:
            cx, cy, w, h = coords
            if w < 0 or h < 0:  # within the tolerance, but an inverted box: ultralytics defines no meaning
                raise _line_error(
                    path,
                    n,
                    f"a negative {'width' if w < 0 else 'height'} ({_shown(tokens[3 if w < 0 else 4])}): a box "
                    "line is `class cx cy w h` with w, h >= 0",
                )
            box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
        else:
            polygon = np.array(coords, np.float64).reshape(-1, 2)
            lo, hi = polygon.min(axis=0), polygon.max(axis=0)
            box = (float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1]))
        key = (int(c), box)
        if key in seen:  # ultralytics' duplicate-row rule (file order kept)
            continue
        seen.add(key)
        classes.append(int(c))
        boxes.append(box)
        polygons.append(polygon)
    return YoloLabels(np.array(classes, np.int64), np.array(boxes, np.float64).reshape(-1, 4), polygons)


def read_labels(path: str, num_classes: int | None = None) -> YoloLabels | None:
    """The label file ``path`` parsed, or None when there is none (an image without objects). Opened by the core's
    rules (``targets.open_regular``: a directory, a FIFO or a device is a ``SourceError``, never waited on); reads
    at most ``MAX_LABEL_BYTES + 1`` bytes whatever the file claims."""
    try:
        with open_regular(path) as f:
            data = f.read(MAX_LABEL_BYTES + 1)
    except SourceError:  # not a regular file (a SourceError is a FileNotFoundError too)
        raise
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SourceError(f"{path}: cannot read the label file ({e.strerror})", path) from None
    return parse_labels(data, path, num_classes)


def label_path(image_path: str) -> str:
    """ultralytics' ``img2label_paths`` for one image: the last ``/images/`` becomes ``/labels/``, the suffix
    ``.txt``."""
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    return sb.join(image_path.rsplit(sa, 1)).rsplit(".", 1)[0] + ".txt"


def _yolo_class_names(classes: Any) -> tuple[list[str], dict[str, int]]:
    """``classes``: None, a sequence of names (index = class id) or ultralytics' ``names`` mapping {id: name}
    with ids 0..n-1; the names are then checked as every source checks them (``base._class_names``: str,
    distinct)."""
    if classes is None:
        return [], {}
    if isinstance(classes, Mapping):
        ids = sorted(classes)
        if ids != list(range(len(ids))):
            raise ConfigError(
                f"invalid classes: a mapping's keys must be the class ids 0..{len(ids) - 1}",
                parameter="classes",
            )
        classes = [classes[i] for i in ids]
    elif isinstance(classes, (str, bytes)) or not isinstance(classes, Sequence):
        raise ConfigError(
            f"invalid classes: a {type(classes).__name__} must be a sequence of names or a mapping id → name",
            parameter="classes",
        )
    return _class_names(classes)


class YoloDetection(Source):
    """ultralytics' YOLO layout (module docs): ``root/images[/split]/**`` with labels in ``root/labels[/split]/``
    (``label_paths[i]``: image ``i``'s; a ``UserWarning`` when none of them exists).
    Targets as ``CocoDetection``'s: ``boxes`` XYXY in pixels, ``labels`` the class ids (int64), ``iscrowd`` 0,
    ``image_id`` the sample's index, ``orig_size`` and ``size`` (h, w). ``classes`` names the class ids (a list,
    or ultralytics' ``names`` mapping ``{0: "person", …}``); ``class_to_idx`` maps a name to its id."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        split: str | None = None,
        *,
        classes: Sequence[str] | Mapping[int, str] | None = None,
        masks: bool = False,
        storage_options: Any = None,
    ) -> None:
        from .._args import _bool_arg

        refuse_url("YoloDetection", "root", root, storage_options)
        self.root = path_arg(root, "root")
        self.masks = _bool_arg(masks, "masks")
        self.split = opt_str(split, "split")
        self.classes, self.class_to_idx = _yolo_class_names(classes)
        images = os.path.join(self.root, "images", *([split] if split else []))
        self.paths = list_files(images, YOLO_EXTENSIONS)
        if not self.paths:
            raise SourceError(f"{images}: no image ({', '.join(YOLO_EXTENSIONS)})", images)
        image = pillow("YoloDetection")
        sizes = np.zeros((len(self.paths), 2), np.int64)
        offsets = np.zeros(len(self.paths) + 1, np.int64)
        boxes, ids = [], []
        #: each object's polygon in pixels (flat x0, y0, x1, y1, …), None for a box line; kept with masks=True
        self._polygons: list[np.ndarray | None] = []
        self.label_paths = [label_path(p) for p in self.paths]
        found = 0
        for i, p in enumerate(self.paths):
            header = read_header(image, p, exif=True)
            if header.orientation != 1:
                raise SourceError(
                    f"{p}: EXIF orientation {header.orientation}: YOLO labels are relative to the image with its "
                    "orientation applied, a detection source's targets to its stored pixels; transpose the file "
                    "once (PIL.ImageOps.exif_transpose) and save it",
                    p,
                )
            sizes[i] = header.width, header.height
            parsed = read_labels(self.label_paths[i], len(self.classes) if self.classes else None)
            found += parsed is not None
            k = 0
            if parsed is not None and len(parsed.classes):
                boxes.append(parsed.boxes * np.array([header.width, header.height] * 2, np.float64))
                ids.append(parsed.classes)
                if self.masks:
                    scale = np.array([header.width, header.height], np.float64)
                    self._polygons += [
                        None if q is None else (q * scale).reshape(-1) for q in parsed.polygons
                    ]
                k = len(parsed.classes)
            offsets[i + 1] = offsets[i] + k
        if not found:  # a misplaced labels folder would otherwise train on images without objects
            warnings.warn(
                f"YoloDetection: no label file for any of the {len(self.paths)} images (looked for "
                f"{self.label_paths[0]}, …): every image is without objects",
                UserWarning,
                stacklevel=2,
            )
        self._sizes = sizes  # (width, height) of each image, as target_plans takes them
        self._offsets = offsets
        self._boxes = np.concatenate(boxes) if boxes else np.zeros((0, 4), np.float64)
        self._class_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        self.labels = [0] * len(self.paths)  # the per-image class the core holds: none (targets are per box)
        # the boxes (XYXY, source pixels) go to the core too: RandomIoUCrop's draw depends on them
        # and the sizes read here: the worker checks each decoded image against its own
        # and each row's objects: the workers read them (``_record``) and move them with the row's image
        native = (
            _core.NativeSource.files(self.paths, self.labels, [])
            .with_boxes(self._offsets.tolist(), np.ascontiguousarray(self._boxes, np.float64))
            .with_sizes(np.asarray(self._sizes, np.int64))
        )
        self._native = python_targets(native, self._record, "instances", self.root, masks=self.masks)

    def __repr__(self) -> str:
        return f"YoloDetection({self.root!r}, split={self.split!r}, {len(self)} images, {len(self._boxes)} objects)"

    def _native_source(self) -> _core.NativeSource:
        return self._native

    #: The workers read the objects (``_record``).
    _python_in_workers = True

    def _image_targets(self, i: int) -> dict[str, Any]:
        """Image ``i``'s objects in source pixels (boxes XYXY float64; with ``masks=True`` each object's mask as
        a compressed RLE string, ``masks``)."""
        lo, hi = int(self._offsets[i]), int(self._offsets[i + 1])
        t = {"boxes": self._boxes[lo:hi], "labels": self._class_ids[lo:hi]}
        if self.masks:
            t["masks"] = np.array(self._rles(i), dtype=object)
        return t

    def _rles(self, i: int) -> list[bytes]:
        """Image ``i``'s object masks (module docs: a segment's polygon, a box line's rectangle), rasterized as
        pycocotools rasterizes a COCO polygon, as compressed RLE strings."""
        lo, hi = int(self._offsets[i]), int(self._offsets[i + 1])
        polygons = [
            q if q is not None else np.array([x1, y1, x2, y1, x2, y2, x1, y2], np.float64)
            for q, (x1, y1, x2, y2) in zip(self._polygons[lo:hi], self._boxes[lo:hi])
        ]
        w, h = (int(v) for v in self._sizes[i])
        try:
            return _core.polygon_rles(polygons, (h, w))
        except ValueError as e:
            raise SourceError(f"{self.label_paths[i]}: {e}", self.label_paths[i]) from None

    def _pack_extras(self, i: int) -> list[tuple[str, int, bytes]]:
        """Image ``i``'s objects, as ``trdata.pack`` stores them (sources/packed_targets.py)."""
        t = self._image_targets(i)
        return packed_targets.encode(
            {**t, "iscrowd": np.zeros(len(t["labels"]), np.int64), "size": self._sizes[i], "image_id": i}
        )

    def _record(self, i: int) -> dict[str, Any]:
        """Image ``i``'s target record (sources/targets.py ``python_targets``): its objects in source pixels."""
        t = self._image_targets(i)
        w, h = (int(v) for v in self._sizes[i])
        record = {**t, "iscrowd": np.zeros(len(t["labels"]), np.int64), "size": (w, h), "image_id": i}
        if self.masks:
            record["masks"] = list(t["masks"])
        return record
