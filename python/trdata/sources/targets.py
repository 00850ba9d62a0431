"""What the sources whose targets move with the image share beyond ``CocoDetection`` (``yolo.py``,
``segmentation.py``): reading an image's header (size, format, mode, EXIF orientation) without decoding it, and
moving a batch's boxes with each row's replayed geometry (``NativeLoader.target_plans``).

Image headers are read with Pillow (lazily: only the header, no pixels), as the core exposes no header reader to
Python yet; Pillow is needed by these sources only (an ``ImportError`` saying so otherwise). Every file these
sources read themselves (headers, label files, label maps) is opened by the core (``open_regular``): regular files
only, never blocking on a FIFO, so a FIFO or a device where a file belongs is a ``SourceError`` saying what it is.

``CocoDetection`` (``detection.py``) moves its boxes the same way with its own copy of ``move_boxes``' loop; the
two should become one when that module is next edited.

Mosaic (``trdata.Mosaic``, src/augment/mosaic.rs): ``plan_rows`` is the one place a detection source gets its rows'
plans and annotations, so every source with boxes merges a mosaic's parts the same way (``mosaic_targets``, the one
home of the part map for boxes and keypoints): each part's annotations (``source._image_targets(j)``, source
pixels) are scaled and shifted onto the canvas (``x · sx + dx``), boxes clipped to the part's window and dropped
when empty (ultralytics' clip + ``remove_zero_area_boxes``), keypoints not clipped but given visibility 0 outside
the window, then concatenated in part order (the row first) with a ``part`` field (which part each instance came
from: the instance masks are the part's image's, placed by ``TargetPlan.masks(..., parts=)`` in the core); the
plan's steps then move the merged targets as any row's. A semantic source's row gets one label map
(``moved_label_map``): its parts' maps placed on a canvas of the ignore label, then moved.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import IO, Any, NamedTuple

import numpy as np

from .. import _core
from ..errors import ConfigError, DecodeError, SourceError
from .reads import MISSING, PerRead, weakly

#: The longest message of a target read's error (a repr in it may be a whole array's).
_MAX_MESSAGE = 4096

#: The EXIF orientation tag.
_ORIENTATION = 0x0112


class ImageHeader(NamedTuple):
    """One image file's header: ``width``, ``height`` (the stored pixels'), Pillow's ``format`` and ``mode``, and
    the EXIF ``orientation`` (1 when absent)."""

    width: int
    height: int
    format: str
    mode: str
    orientation: int


def path_arg(value: Any, name: str) -> str:
    """``value`` is a path (str, bytes or os.PathLike), returned as a str (``os.fsdecode``) with ``~`` expanded;
    a ``ConfigError`` on ``name`` otherwise."""
    try:
        return os.path.expanduser(os.fsdecode(value))
    except TypeError:
        raise ConfigError(
            f"invalid {name}: {value!r} must be a path (str, bytes or os.PathLike), not a {type(value).__name__}",
            parameter=name,
        ) from None


def opt_str(value: Any, name: str) -> str | None:
    """``value`` is None or a str (a folder name, a file suffix); a ``ConfigError`` on ``name`` otherwise."""
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"invalid {name}: {value!r} must be a str or None", parameter=name)
    return value


def pillow(who: str) -> Any:
    """``PIL.Image``, or an ``ImportError`` naming ``who`` needs it."""
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(f"trdata.{who} reads image headers with Pillow: pip install pillow") from None
    return Image


def open_regular(path: str) -> IO[bytes]:
    """The file ``path`` opened for reading (binary) by the core's rules (src/source/read.rs ``open_regular``):
    never blocking on a FIFO, regular files only. A missing file is a ``FileNotFoundError``; a FIFO, a device, a
    directory or a file that cannot be opened a ``SourceError`` naming it and saying what it is."""
    return os.fdopen(_core.open_regular(path), "rb")


def read_header(image: Any, path: str, exif: bool = False) -> ImageHeader:
    """``path``'s header (``image`` is ``PIL.Image``): only the header is parsed, no pixel is decoded. A file that
    is missing, not a regular file, or that Pillow cannot open is a ``SourceError`` naming it."""
    try:
        f = open_regular(path)
    except SourceError:  # not a regular file (a SourceError is a FileNotFoundError too)
        raise
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file", path) from None
    try:
        with f, warnings.catch_warnings():
            # the pixels are never decoded here: the loader's own max_pixels bounds them
            warnings.simplefilter("ignore", image.DecompressionBombWarning)
            with image.open(f) as im:
                orientation = 1
                if exif:
                    value = im.getexif().get(_ORIENTATION, 1)
                    orientation = value if isinstance(value, int) else 1
                w, h = im.size
                return ImageHeader(int(w), int(h), str(im.format), str(im.mode), int(orientation))
    except SourceError:
        raise
    except Exception as e:  # Pillow raises many kinds (OSError, SyntaxError, ValueError, …)
        raise SourceError(f"{path}: cannot read the image header ({type(e).__name__}: {e})", path) from None


def list_files(root: str, suffixes: tuple[str, ...]) -> list[str]:
    """Every file below ``root`` (recursively, symlinked directories not entered) whose lower-cased name ends with
    one of ``suffixes``, sorted as Python sorts the full paths (ultralytics' order). A missing ``root`` is a
    ``SourceError``."""
    if not os.path.isdir(root):
        raise SourceError(f"{root}: no such directory", root)
    found = []

    def fail(e: OSError) -> None:
        raise SourceError(f"{e.filename}: cannot list the directory ({e.strerror})", e.filename)

    for folder, dirs, files in os.walk(root, onerror=fail):
        dirs.sort()
        found += [os.path.join(folder, f) for f in files if f.lower().endswith(suffixes)]
    return sorted(found)


def move_boxes(
    plans: list[Any], boxes: list[np.ndarray], fields: list[dict[str, np.ndarray]]
) -> tuple[list[np.ndarray], list[dict[str, np.ndarray]]]:
    """Each row's XYXY boxes (float64 ``(K, 4)``, source pixels) moved by its plan (float32), and its per-instance
    ``fields`` with the instances ``SanitizeBoundingBoxes`` dropped removed from every one of them."""
    moved, kept = [], []
    for plan, b, f in zip(plans, boxes, fields):
        out, keep = plan.boxes(b)
        if not keep.all():
            out = out[keep]
            f = {k: v[keep] for k, v in f.items()}
        moved.append(out)
        kept.append(f)
    return moved, kept


def target_plans(source: Any, idx: list[int], epoch: int, native_loader: Any) -> list[Any]:
    """Each row's ``TargetPlan``; when the transforms start with a Mosaic, made with its parts' image sizes (its
    ``mosaic`` then lists the parts). ``source._sizes[i]`` is image ``i``'s (width, height)."""
    sizes = [(int(w), int(h)) for w, h in source._sizes[idx]]
    parts = native_loader.mosaic_parts(idx, epoch)
    part_sizes = None if parts is None else [[(int(w), int(h)) for w, h in source._sizes[p]] for p in parts]
    return native_loader.target_plans(idx, epoch, sizes, part_sizes)


def plan_rows(
    source: Any,
    idx: list[int],
    epoch: int,
    native_loader: Any,
    image_targets: Callable[[int], dict[str, Any]] | None = None,
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Each row's ``TargetPlan`` and its annotations in the plan's input pixels: the image's own
    (``image_targets(i)``, by default ``source._image_targets(i)``), or, when the transforms start with a Mosaic,
    its parts' merged on the canvas (module docs)."""
    of = source._image_targets if image_targets is None else image_targets
    plans = target_plans(source, idx, epoch, native_loader)
    rows = [mosaic_targets(of, p) if p.mosaic else of(i) for p, i in zip(plans, idx)]
    return plans, rows


def read_target(kept: PerRead, make: Callable[[int], Any], i: int, epoch: int) -> str | None:
    """A worker's read of sample ``i``'s targets for a row of ``epoch`` (``NativeSource.with_targets``): ``make(i)``
    kept in ``kept``; None, or the message of the sample's ``Target`` error (bounded)."""
    try:
        kept.put(epoch, i, make(i))
    except Exception as e:  # the sample's error, under on_error; SourceError/DecodeError say what and where
        message = str(e) if isinstance(e, (SourceError, DecodeError)) else f"{type(e).__name__}: {e}"
        return message if len(message) <= _MAX_MESSAGE else message[:_MAX_MESSAGE] + "…"
    return None


def worker_targets(
    kept: PerRead, make: Callable[[int], Any]
) -> tuple[Callable[[int, int], str | None], Callable[[int, int], None]]:
    """The (read, discard) pair a source gives ``NativeSource.with_targets``: ``read(i, epoch)`` keeps ``make(i)``
    in ``kept`` (``read_target``), ``discard(i, epoch)`` drops one kept value whose row failed. ``make``, a bound
    method of the source, is held weakly (reads.py ``weakly``)."""
    made = weakly(make, MISSING)

    def read(i: int, epoch: int) -> str | None:
        return read_target(kept, lambda j: _made(made(j)), i, epoch)

    def discard(i: int, epoch: int) -> None:
        kept.take(epoch, i)

    return read, discard


def _made(value: Any) -> Any:
    if value is MISSING:
        raise SourceError("the source was freed while a loader read it")
    return value


def taken(kept: PerRead, make: Callable[[int], Any], epoch: int, i: int) -> Any:
    """Sample ``i``'s targets as a worker's read kept them for a row of ``epoch``; made now by ``make(i)`` when no
    read kept one (another loader over the source started an epoch and dropped it)."""
    value = kept.take(epoch, i)
    return make(i) if value is MISSING else value


def moved_label_map(plan: Any, label_map: Any, i: int, fill: int) -> np.ndarray:
    """Row ``i``'s label map moved by its plan: ``label_map(j)`` (uint8 ``(H, W)``) is image ``j``'s; a mosaic
    row's is its parts' maps, each nearest-resized into its window, ``fill`` elsewhere (``TargetPlan.mosaic_dense``),
    then moved."""
    if plan.mosaic:
        return plan.mosaic_dense([label_map(int(p[0])) for p in plan.mosaic], fill=fill)
    return plan.dense(label_map(i), fill=fill)


def mosaic_targets(image_targets: Callable[[int], dict[str, Any]], plan: Any) -> dict[str, np.ndarray]:
    """A mosaic row's annotations on its canvas (module docs): every per-instance field of the parts'
    ``image_targets(j)``, concatenated in part order, boxes (XYXY float64) mapped and clipped, keypoints (float64
    ``(K, P, 3)``) mapped with visibility 0 outside the part's window and padded to the row's largest P (zeros),
    and ``part`` (int64: which part of ``plan.mosaic`` each instance came from)."""
    rows = []
    for k, (j, sx, sy, dx, dy, x0, y0, x1, y1) in enumerate(plan.mosaic):
        t = image_targets(int(j))
        b = np.asarray(t["boxes"], np.float64).reshape(-1, 4) * (sx, sy, sx, sy) + (dx, dy, dx, dy)
        b = np.clip(b, (x0, y0, x0, y0), (x1, y1, x1, y1))
        keep = (b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])
        row = {**{f: np.asarray(v)[keep] for f, v in t.items()}, "boxes": b[keep]}
        row["part"] = np.full(len(row["boxes"]), k, np.int64)
        if "keypoints" in row:
            kp = np.asarray(row["keypoints"], np.float64)
            x, y = kp[..., 0] * sx + dx, kp[..., 1] * sy + dy
            inside = (x >= x0) & (x < x1) & (y >= y0) & (y < y1)
            row["keypoints"] = np.stack([x, y, np.where(inside, kp[..., 2], 0.0)], axis=-1)
        rows.append(row)
    if "keypoints" in rows[0]:
        p = max(r["keypoints"].shape[1] for r in rows)
        for r in rows:
            kp = r["keypoints"]
            r["keypoints"] = np.concatenate([kp, np.zeros((len(kp), p - kp.shape[1], 3))], axis=1)
    return {f: np.concatenate([r[f] for r in rows]) for f in rows[0]}


def refuse_mosaic(source: Any, why: str) -> None:
    """The ``ConfigError`` of a source whose targets a Mosaic cannot merge (``why``: what it holds)."""
    raise ConfigError(
        f"invalid transforms: a Mosaic cannot merge the targets of {type(source).__name__} ({why}); Mosaic merges "
        "boxes, labels, iscrowd, instance masks and keypoints (CocoDetection, YoloDetection), places label maps "
        "(SegmentationFolder; packs of any of these) and takes any classification source (the row's own label)",
        parameter="transforms",
    )
