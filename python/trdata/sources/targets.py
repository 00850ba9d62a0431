"""What the sources with targets share beyond ``CocoDetection`` (``yolo.py``, ``segmentation.py``, ``packed.py``):
reading an image's header (size, format, mode, EXIF orientation) without decoding it, and handing the core a
reader of each sample's targets (``python_targets``).

The loader's workers make every row's targets beside its image (src/sample/): they call the source's record reader
(``make(i)``: the sample's annotations in source pixels, a dict of arrays), move the record with the row's own
geometry and, under a ``trdata.Mosaic``, merge its parts on the canvas (boxes scaled, shifted and clipped to each
part's window, keypoints given visibility 0 outside it, masks and label maps placed). A record that cannot be made
is that sample's ``DecodeError(kind="Target")`` under ``on_error``. The training thread only slices the batch's
columns (``trdata._target_batch``).

Image headers are read with Pillow (lazily: only the header, no pixels), as the core exposes no header reader to
Python yet; Pillow is needed by these sources only (an ``ImportError`` saying so otherwise). Every file these
sources read themselves (headers, label files, label maps) is opened by the core (``open_regular``): regular files
only, never blocking on a FIFO, so a FIFO or a device where a file belongs is a ``SourceError`` saying what it is.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import IO, Any, NamedTuple

from .. import _core
from ..errors import ConfigError, SourceError
from .reads import MISSING, weakly

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


def python_targets(
    native: _core.NativeSource, make: Callable[[int], dict[str, Any]], kind: str, name: str, **fields: Any
) -> _core.NativeSource:
    """``native`` (a ``NativeSource``) with targets whose record ``i`` is ``make(i)`` (src/py/targets.rs: the dict
    of source-pixel fields the loader's workers read, move with the row's image and merge under a Mosaic).
    ``make``, a bound method of the source, is held weakly (reads.py ``weakly``): a source freed while a loader
    still reads it is that sample's error."""
    made = weakly(make, MISSING)

    def read(i: int) -> dict[str, Any]:
        value = made(i)
        if value is MISSING:
            raise SourceError("the source was freed while a loader read it")
        return value  # type: ignore[no-any-return]

    return native.with_python_targets(read, kind, name, **fields)
