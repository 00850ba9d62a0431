"""The trdata exception hierarchy. The native module raises these through one error map (src/py/errors.rs)."""

from __future__ import annotations

import reprlib


class TrdataError(Exception):
    """Base class of every error trdata raises."""


class ConfigError(TrdataError, ValueError):
    """A configuration value is invalid; ``parameter`` names it."""

    def __init__(self, message: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class DataLoaderArgumentError(TrdataError, TypeError):
    """A ``torch.utils.data.DataLoader`` argument given to ``trdata.Loader`` (``num_workers``, ``drop_last``,
    ``pin_memory``, ``collate_fn``, ``sampler``, …): the message says what trdata does instead. ``argument``
    names the DataLoader argument, ``parameter`` the trdata parameter to use (None when there is nothing to set).
    A TypeError, as Python raises for an unexpected keyword argument; not a ConfigError, which is about the value
    of one of trdata's own parameters."""

    def __init__(self, message: str, argument: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument
        self.parameter = parameter


class SourceError(TrdataError, FileNotFoundError):
    """A dataset source could not be built (missing root, empty folder, unreadable directory)."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class DecodeError(TrdataError):
    """A sample could not be read or decoded; ``path`` and ``index`` name it, ``kind`` says why."""

    def __init__(
        self, message: str, path: str | None = None, index: int | None = None, kind: str | None = None
    ):
        super().__init__(message)
        self.path = path
        self.index = index
        self.kind = kind


class WorkerError(TrdataError):
    """A worker thread failed (panicked or could not start)."""


class CudaError(TrdataError):
    """A CUDA driver call failed or CUDA is unavailable; ``call`` names it."""

    def __init__(self, message: str, call: str | None = None) -> None:
        super().__init__(message)
        self.call = call


class LoaderClosedError(TrdataError, RuntimeError):
    """The loader was closed, or used in a process other than the one that created it (a fork child:
    every method raises this there, without waiting on the parent's threads)."""


class StaleIteratorError(TrdataError, RuntimeError):
    """An iterator of a Loader was superseded by a newer ``iter()`` of the same Loader (from this or another
    thread) or by its ``load_state_dict()``. One Loader runs one epoch at a time and the newest iterator owns
    it; an older iterator raises this on its next ``next()`` instead of yielding batches of the newer epoch
    (or ending quietly as if its epoch were complete). A RuntimeError, as Python raises for a container
    changed during iteration."""


class OutOfMemoryError(TrdataError, MemoryError):
    """A buffer could not be allocated (the machine is out of memory); the message names the buffer and its
    size. Sizes known when the Loader is built are checked there instead (``ConfigError``)."""


class _BoundedRepr(reprlib.Repr):
    """reprlib's bounded repr (containers cut after a few items, nesting after a few levels), plus bytes cut
    before their repr is built: a repr that is made whole and cut afterwards costs the whole value's size first
    (a 2 MB image in a tuple made a 2.26 MB message)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.maxstring = self.maxother = self.maxlong = limit
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = self.maxfrozenset = self.maxdeque = 8
        self.maxarray = 8

    def repr_bytes(self, x: bytes, level: int) -> str:
        return repr(x[: self.maxstring]) + ("…" if len(x) > self.maxstring else "")

    def repr_bytearray(self, x: bytearray, level: int) -> str:
        return repr(x[: self.maxstring]) + ("…" if len(x) > self.maxstring else "")


def _shown(value: object, limit: int = 120) -> str:
    """``repr(value)`` for an error message that must never fail nor flood: at most ``limit`` characters whatever
    the value (long reprs are cut; str, bytes, ints and built-in containers before their repr is built whole:
    :class:`_BoundedRepr`), and a value whose repr raises (an int beyond ``sys.get_int_max_str_digits()``) is
    described."""
    try:
        r = _BoundedRepr(limit).repr(value)
    except Exception:  # noqa: BLE001 - a message must be built whatever the value
        if isinstance(value, int):
            return f"an int of {value.bit_length()} bits"
        return f"a {type(value).__name__} object"
    return r if len(r) <= limit else f"{r[: limit - 1]}…"
