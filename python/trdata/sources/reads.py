"""What the loader's workers made for a row outside the core, kept until the row's batch takes it.

A worker that makes a row of sample ``i`` in ``epoch`` may call into Python for it (a ``DatasetSource``'s
``__getitem__`` returns extras beside the image; a label map or a pack's stored annotations are read and checked
by the worker: ``NativeSource.with_targets``). :class:`PerRead` keeps each such value per (epoch, index), oldest
first: each delivered row takes one, as every row of a batch is made by exactly one read (a padded or filled row
that repeats an index is its own read), so a value travels with the read that made its row and nothing outlives
its delivery. What a cancelled epoch's reads left is dropped when the loader starts the next one (``clear``); a
read whose row was then replaced (its image failed to decode) leaves a value no batch takes, dropped the same way.
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Callable
from typing import Any

#: ``PerRead.take``'s answer when no read kept a value for the row.
MISSING: Any = object()


class PerRead:
    """Values per (epoch, index), oldest first (module docs). Thread-safe: the workers add, the consumer takes."""

    def __init__(self) -> None:
        self._values: dict[tuple[int, int], collections.deque[Any]] = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._values)

    def put(self, epoch: int, i: int, value: Any) -> None:
        """Keep ``value``, made by a read of sample ``i`` for a row of ``epoch``."""
        with self._lock:
            self._values.setdefault((epoch, i), collections.deque()).append(value)

    def take(self, epoch: int, i: int) -> Any:
        """The oldest value kept for sample ``i`` in ``epoch`` (removed), or ``MISSING``."""
        with self._lock:
            reads = self._values.get((epoch, i))
            if not reads:
                return MISSING
            value = reads.popleft()
            if not reads:
                del self._values[epoch, i]
            return value

    def clear(self) -> None:
        """Drop everything (the loader starts an epoch)."""
        with self._lock:
            self._values.clear()


def weakly(method: Callable[..., Any], gone: Any) -> Callable[..., Any]:
    """``method`` (a bound method of a source) called through a weak reference, ``gone`` once the source was
    freed. What a source hands its own native object (``NativeSource.external``, ``with_targets``) is held by it:
    a strong reference back to the source would be a cycle the collector cannot see through the native object,
    so the source (its open files, a full pack's data) would never be freed."""
    if not hasattr(method, "__self__"):  # a plain function holds no source
        return method
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        m = ref()
        return gone if m is None else m(*args)

    return call
