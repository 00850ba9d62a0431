"""Extra fields per sample (captions, JSON documents, arrays, bytes): how they are given, stored and delivered.

* Given: ``extras={name: [one value per sample]}`` on FileList/Bytes/Arrays (:func:`check_extras`), a dict as the
  third item of a dataset's ``__getitem__``, ``extras=("txt", "json", "npy")`` members of WebDataset shards, or
  the extras section of a packed file.
* Delivered: ``batch.extras`` is a dict of per-field lists, or one stacked array when every sample's value is an
  array of one shape and dtype (:func:`stack_extras`); a sample without the field has None.
* Stored (``trdata.pack``): each value as a kind and its bytes (:func:`encode`) — ``str`` as UTF-8 text, ``bytes``
  as they are, numpy arrays (and anything with ``__array__``, torch tensors included) as a ``.npy`` file, None as
  absent, anything else as JSON text (numbers, bools, lists, str-keyed dicts; tuples come back as lists, as JSON
  has them). The core owns the section's layout and checks (``src/source/packed_extras.rs``); the kinds' codes
  are its ``ExtraKind``. Reading turns the bytes back into values with the checks a WebDataset member of that
  kind gets (:func:`decode`): valid UTF-8, parseable JSON, a ``.npy`` header that matches its bytes and no
  pickles. Every value is at most ``_core.MAX_EXTRA_BYTES``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, MappingView, Set
from typing import Any

import numpy as np

from .. import _core
from ..errors import ConfigError, _shown

#: The kinds of a stored value (the core's ``ExtraKind`` codes).
BYTES, TEXT, JSON, NPY = 1, 2, 3, 4
#: Largest value of one field of one sample, in bytes (the core's).
MAX_EXTRA_BYTES: int = _core.MAX_EXTRA_BYTES

_UNORDERED = (Set, Mapping, MappingView)


def kind_of_extension(ext: str) -> int:
    """The kind of a WebDataset member read for ``extras=``: ``.txt``/``.text`` text, ``.json`` JSON, ``.npy`` an
    array, anything else bytes."""
    return {"txt": TEXT, "text": TEXT, "json": JSON, "npy": NPY}.get(ext, BYTES)


def decode(kind: int, data: bytes) -> Any:
    """A stored value: text a ``str`` (UTF-8), JSON parsed, ``.npy`` an array (its header checked against its
    size before anything is allocated; no pickles), bytes as they are. Raises ``ValueError`` (the caller names the
    shard or file, the sample and the field) for bytes that are not what their kind says."""
    try:
        if kind == TEXT:
            return data.decode("utf-8")
        if kind == JSON:
            return json.loads(data)
        if kind == NPY:
            return _npy(data)
    except (ValueError, UnicodeDecodeError, RecursionError, TypeError) as e:
        raise ValueError(f"{type(e).__name__}: {str(e)[:120]}") from None
    return data


def encode(value: Any, name: str, index: int) -> tuple[int, bytes] | None:
    """``value`` as (kind, bytes) for a packed file (module docs); None for None. Strict: what :func:`decode` could
    not read back (a str with a lone surrogate, which only ``surrogatepass`` would write) and what a packed file
    cannot hold (a value JSON cannot hold, an array numpy cannot hold: a bfloat16 tensor) are a ``ConfigError``
    naming the field and the sample, raised before anything is written."""
    if value is None:
        return None
    field = f"{_shown(name)} of sample {index}"
    if isinstance(value, str):
        return TEXT, _utf8(value, f"{field} is a str that")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return BYTES, bytes(value)
    if isinstance(value, np.ndarray) or (
        hasattr(value, "__array__") and not isinstance(value, (list, tuple))
    ):
        try:
            array = np.asarray(value.cpu() if hasattr(value, "cpu") else value)
        except (TypeError, ValueError, RuntimeError) as e:  # torch's bfloat16 (numpy has no such dtype), …
            dtype = getattr(value, "dtype", None)
            raise ConfigError(
                f"invalid extras: {field} is a {type(value).__name__}"
                f"{f' of dtype {dtype}' if dtype is not None else ''} that numpy cannot hold, so a packed file "
                f"cannot store it ({_cut(e)}); convert it first (a bfloat16 tensor: .float())",
                parameter="extras",
            ) from None
        if array.dtype.hasobject:
            raise ConfigError(
                f"invalid extras: {field} is an object array, which a packed file does not store",
                parameter="extras",
            )
        out = io.BytesIO()
        np.save(out, array, allow_pickle=False)
        return NPY, out.getvalue()
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise ConfigError(
            f"invalid extras: {field} is a {type(value).__name__} a packed file cannot store "
            f"(str, bytes, arrays and JSON values can be: {_cut(e)})",
            parameter="extras",
        ) from None
    return JSON, _utf8(text, f"{field} is a {type(value).__name__} whose JSON text")


def _utf8(text: str, what: str) -> bytes:
    """``text`` as strict UTF-8 (what :func:`decode` reads back); a lone surrogate (``os.fsdecode`` of a non-UTF-8
    name, a cut UTF-16 pair) is a ``ConfigError``: ``what`` names the field and the sample."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(
            f"invalid extras: {what} holds a lone surrogate {text[e.start : e.start + 1]!r} at character "
            f"{e.start}, which is not valid UTF-8 and could not be read back; store such text as bytes",
            parameter="extras",
        ) from None


def _cut(e: BaseException) -> str:
    """An exception's text for a message, bounded."""
    text = str(e)
    return text if len(text) <= 120 else f"{text[:119]}…"


def encode_all(values: Mapping[str, Any], index: int) -> list[tuple[str, int, bytes]]:
    """One sample's extras as the core's ``pack`` takes them: (name, kind, bytes), Nones left out. A field name
    must be valid UTF-8 too (the file stores it as such)."""
    out = []
    for name, value in values.items():
        stored = encode(value, name, index)
        if stored is not None:
            _utf8(name, f"the field name {_shown(name)} of sample {index}")
            out.append((name, *stored))
    return out


def _npy(data: bytes) -> np.ndarray:
    """A ``.npy`` file's array, without pickles, its header's shape × dtype checked against the bytes it has."""
    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except ValueError:
        raise
    except (
        Exception
    ) as e:  # numpy parses the header as a Python literal: tokenize/syntax errors of a forged one
        raise ValueError(f"malformed .npy header ({type(e).__name__}: {str(e)[:80]})") from None
    if dtype.hasobject:
        raise ValueError("object arrays (pickles) are not read")
    count = 1
    for d in shape:
        count *= d
    if count * dtype.itemsize != len(data) - f.tell():
        raise ValueError(
            f"header says {shape} {dtype}, the member holds {len(data) - f.tell()} bytes of data"
        )
    array = np.frombuffer(data, dtype=dtype, count=count, offset=f.tell())
    return array.reshape(shape, order="F" if fortran else "C").copy()


def stack_extras(values: list[Any]) -> Any:
    """``values`` stacked into one array when they are arrays of one shape and dtype, else the list itself."""
    if values and all(isinstance(v, np.ndarray) for v in values):
        first = values[0]
        if all(v.shape == first.shape and v.dtype == first.dtype for v in values):
            return np.stack(values)
    return values


def check_extras(extras: Any, n: int) -> dict[str, list[Any]] | None:
    """``extras``: a mapping of str names to sequences of one value per sample (any Python values: captions,
    dicts, arrays), or None."""
    if extras is None:
        return None
    if not isinstance(extras, Mapping):
        raise ConfigError(
            f"invalid extras: a {type(extras).__name__} must be a dict of name → one value per sample",
            parameter="extras",
        )
    out = {}
    for name, values in extras.items():
        if not isinstance(name, str):
            raise ConfigError(f"invalid extras: the name {_shown(name)} must be a str", parameter="extras")
        if (
            isinstance(values, (str, bytes))
            or isinstance(values, _UNORDERED)
            or not hasattr(values, "__len__")
        ):
            raise ConfigError(
                f"invalid extras: {_shown(name)} is a {type(values).__name__}, not a sequence of one value per sample",
                parameter="extras",
            )
        values = list(values)
        if len(values) != n:
            raise ConfigError(
                f"invalid extras: {_shown(name)} has {len(values)} values, one per sample is {n}",
                parameter="extras",
            )
        out[name] = values
    return out
