"""The argument helpers of the Python edge: each translates a user's value into the core's type (or raises a
ConfigError naming the parameter) and checks nothing else — every range, choice and default is the core's
(src/config.rs and its siblings; ``scripts/validation_sites.py`` keeps it so). One behaviour everywhere: a bool
is ``True``/``False`` or a numpy bool, an int is a Python or numpy integer but never a bool, a real number is
one a float can hold.

The Loader, the transforms, the batch ops and the sources all use these (one spelling of each rule).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .errors import ConfigError, _shown


def _is_int(v: Any) -> bool:
    """An integer (Python or numpy), not a bool (Python's or numpy's)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _size(size: Any, name: str = "size") -> tuple[int, int]:
    """``size`` → (height, width): an int (square) or a sequence of exactly two ints (their range is the
    core's rule)."""
    if _is_int(size):
        h = w = int(size)
    elif isinstance(size, Sequence) and not isinstance(size, (str, bytes)) and len(size) == 2:
        if not all(_is_int(v) for v in size):
            raise ConfigError(
                f"invalid {name}: {_shown(size)} must be an int or a (height, width) pair of ints",
                parameter=name,
            )
        h, w = (int(v) for v in size)
    else:
        raise ConfigError(
            f"invalid {name}: {_shown(size)} must be an int or a (height, width) pair of ints", parameter=name
        )
    return h, w


def _real(v: Any, name: str) -> float:
    """A real number (not a bool or a string) that a float can hold: ``float(10**400)`` raises OverflowError,
    reported as a ConfigError naming ``name``."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ConfigError(f"invalid {name}: {_shown(v)} must be a number", parameter=name)
    try:
        return float(v)
    except OverflowError:
        raise ConfigError(
            f"invalid {name}: {_shown(v)} must be a number a float can hold", parameter=name
        ) from None


def _pair(v: Any, name: str) -> tuple[float, float]:
    """A (min, max) pair of real numbers."""
    if isinstance(v, (str, bytes)) or not isinstance(v, Sequence) or len(v) != 2:
        raise ConfigError(f"invalid {name}: {_shown(v)} must be a (min, max) pair of numbers", parameter=name)
    return _real(v[0], name), _real(v[1], name)


def _seq(v: Any) -> bool:
    return isinstance(v, Sequence) and not isinstance(v, (str, bytes))


def _padding(padding: Any) -> tuple[int, int, int, int]:
    """torchvision's ``padding``: an int, or 1, 2 (left/right, top/bottom) or 4 (left, top, right, bottom) ints →
    (left, top, right, bottom)."""
    if _is_int(padding):
        p = int(padding)
        return (p, p, p, p)
    if _seq(padding) and len(padding) in (1, 2, 4) and all(_is_int(v) for v in padding):
        v = [int(x) for x in padding]
        if len(v) == 1:
            return (v[0],) * 4
        if len(v) == 2:
            return (v[0], v[1], v[0], v[1])
        return (v[0], v[1], v[2], v[3])
    raise ConfigError(
        f"invalid padding: {_shown(padding)} must be an int or a sequence of 1, 2 or 4 ints",
        parameter="padding",
    )


def _fill(fill: Any, name: str = "fill") -> tuple[float, ...]:
    """A number or a per-channel sequence of numbers (pixel units; the core checks the range and count)."""
    if fill is None:
        return (0.0,)
    if _seq(fill):
        return tuple(_real(v, name) for v in fill)
    return (_real(fill, name),)


def _str(v: Any, name: str) -> str:
    if not isinstance(v, str):
        raise ConfigError(f"invalid {name}: {_shown(v)} must be a string", parameter=name)
    return v


def _bool_arg(v: Any, name: str) -> bool:
    """A real bool: ``True``/``False`` or a numpy bool (torch takes ``np.bool_`` wherever it takes a bool), as a
    Python bool; ``shuffle="no"`` or ``1`` must not count as true."""
    if not isinstance(v, (bool, np.bool_)):
        raise ConfigError(f"invalid {name}: {_shown(v)} must be True or False", parameter=name)
    return bool(v)


def _jitter_range(v: Any, name: str, center: float, clip_at_zero: bool) -> tuple[float, float] | None:
    """torchvision's ``ColorJitter._check_input``: a number v → (center - v, center + v) (the lower end clipped at
    0 for brightness/contrast/saturation), a pair as given; (center, center) → None (off). A negative number
    gives an empty range the core refuses."""
    if v is None:
        return None
    if _seq(v):
        lo, hi = _pair(v, name)
    else:
        x = _real(v, name)
        lo, hi = (center - x, center + x) if x >= 0 else (center + abs(x), center - abs(x))
        if clip_at_zero and x >= 0:
            lo = max(lo, 0.0)
    if lo == hi == center:
        return None
    return (lo, hi)


def _mode(v: Any, name: str) -> str:
    """A mode given as torchvision's enum (``InterpolationMode.BILINEAR``, ``AutoAugmentPolicy.IMAGENET``: its
    value) or as its string; which values are allowed is the core's choice table."""
    value = getattr(v, "value", v)
    if not isinstance(value, str):
        raise ConfigError(
            f"invalid {name}: {_shown(v)} must be a string or a torchvision enum", parameter=name
        )
    return value.lower()


def _int_arg(v: Any, name: str) -> int:
    """An int parameter (Python or numpy integer, not a bool) as a Python int of any size; its range is the core's
    rule, which names it."""
    if not _is_int(v):
        raise ConfigError(f"invalid {name}: {_shown(v)} must be an int", parameter=name)
    return int(v)


def _opt_int(v: Any, name: str) -> int | None:
    """None or an int (not a bool) that the core's unsigned 64-bit binding takes; its range is the core's rule
    (a negative int would be an OverflowError of the binding, not a ConfigError naming ``name``)."""
    if v is None:
        return None
    if not _is_int(v):
        raise ConfigError(f"invalid {name}: {_shown(v)} must be an int or None", parameter=name)
    if not 0 <= int(v) < 2**64:
        raise ConfigError(f"invalid {name}: {_shown(v)} must be a positive int or None", parameter=name)
    return int(v)


def _degrees(v: Any, name: str = "degrees") -> tuple[float, float]:
    """torchvision's ``_setup_angle``: a number d → (-d, d) (a negative d gives an empty range the core refuses),
    a pair as given."""
    if _seq(v):
        return _pair(v, name)
    d = _real(v, name)
    return (-d, d)


def _opt_fill(fill: Any) -> tuple[float, ...] | None:
    """``None`` (zero padding, no mask) or a number / per-channel numbers (torchvision's mask-path fill)."""
    if isinstance(fill, dict):  # torchvision v2's per-type fill: the image's entry
        fill = next((f for k, f in fill.items() if getattr(k, "__name__", k) in ("Image", "others")), None)
    return None if fill is None else _fill(fill)


def _opt_pair(v: Any, name: str) -> tuple[float, float] | None:
    return None if v is None else _pair(v, name)


def _shear(v: Any) -> tuple[float, ...] | None:
    """torchvision's ``shear``: a number s → (-s, s) on x; 2 numbers: x range; 4: x then y range."""
    if v is None:
        return None
    if _seq(v):
        return tuple(_real(x, "shear") for x in v)
    s = _real(v, "shear")
    return (-s, s)


def _parse_cpus(cpus: Any) -> list[int]:
    """``cpus=`` → CPU ids in the given order (which ids are valid is the core's rule: listed once, each one
    this process may run on)."""
    if isinstance(cpus, (str, bytes)) or not isinstance(cpus, Iterable):
        raise ConfigError(f"invalid cpus: {_shown(cpus)} must be a list of CPU ids", parameter="cpus")
    return [_int_arg(c, "cpus") for c in cpus]


def allowed_cpus() -> list[int]:
    """CPUs this process may run on (its affinity mask), sorted."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return list(range(os.cpu_count() or 1))
