"""webdataset's shard patterns: ``"train-{000000..000127}.tar"``, ``"{a,b}/x.tar"``, several patterns joined by
``::``. The grammar is the ``braceexpand`` package's (which webdataset calls), written out here so trdata does
not depend on it (tests/test_shards_remote.py compares the two on the same patterns):

* ``{A..B}`` / ``{A..B..S}``: integers from A to B (either direction, negative too) by step S; zero-padded to
  the longer end's width when either end (other than ``0``) starts with ``0`` (``{07..10}`` → 07 08 09 10);
* ``{a..e}`` / ``{a..e..S}``: letters, through ``A..Za..z``;
* ``{x,y,…}``: alternatives (an empty one too: ``x{,.bak}``), nested braces inside;
* anything else in braces (``{x}``, ``{}``) stays literal with its content expanded; a backslash escapes the
  next character (and is dropped); unbalanced braces are a ``ConfigError``.

Expansions are the product of the parts, in order. More than ``MAX_SHARDS`` names is a ``ConfigError`` (a
``{0..999999999}`` typo would otherwise fill memory before any shard is opened)."""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from itertools import product

from ..errors import ConfigError

#: Most shard names one pattern may expand to.
MAX_SHARDS = 1_000_000

_ALPHABET = string.ascii_uppercase + string.ascii_lowercase
_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$")
_CHAR_RANGE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?$")


class _Unbalanced(ValueError):
    pass


def expand_shards(pattern: str, parameter: str = "shards") -> list[str]:
    """Every shard name ``pattern`` stands for (module docs), in order."""
    out: list[str] = []
    for part in pattern.split("::"):
        try:
            for name in _expand(part):
                if len(out) >= MAX_SHARDS:
                    raise ConfigError(
                        f"invalid {parameter}: {pattern!r} expands to more than {MAX_SHARDS} shard names",
                        parameter=parameter,
                    )
                out.append(name)
        except _Unbalanced:
            raise ConfigError(
                f"invalid {parameter}: {pattern!r} has unbalanced braces", parameter=parameter
            ) from None
    return out


def _expand(pattern: str) -> Iterator[str]:
    return ("".join(_unescape(t) for t in parts) for parts in _parts(pattern))


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _parts(pattern: str) -> Iterator[tuple[str, ...]]:
    """The pattern as the product of its parts: literal runs and brace expressions."""
    items: list[list[str]] = []
    start = pos = depth = 0
    while pos < len(pattern):
        c = pattern[pos]
        if c == "\\":
            pos += 2
            continue
        if c == "{":
            if depth == 0 and pos > start:
                items.append([pattern[start:pos]])
                start = pos
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                expr = pattern[start + 1 : pos]
                alternatives = _expression(expr)
                if alternatives is None:  # not a range nor a list: literal braces around its expansion
                    items.extend([["{"], ["".join(p) for p in _parts(expr)], ["}"]])
                else:
                    items.append(alternatives)
                start = pos + 1
        pos += 1
    if depth != 0:
        raise _Unbalanced(pattern)
    if start < pos:
        items.append([pattern[start:]])
    return product(*items)


def _expression(expr: str) -> list[str] | None:
    m = _INT_RANGE.match(expr)
    if m:
        return _int_range(*m.groups())
    m = _CHAR_RANGE.match(expr)
    if m:
        return _char_range(*m.groups())
    return _alternatives(expr)


def _alternatives(seq: str) -> list[str] | None:
    """``a,b,…`` at depth 0 (each expanded), or None without a top-level comma or with unbalanced braces."""
    pieces: list[str] = []
    start = pos = depth = 0
    while pos < len(seq):
        c = seq[pos]
        if c == "\\":
            pos += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            pieces.append(seq[start:pos])
            start = pos + 1
        pos += 1
    if depth != 0 or not pieces:
        return None
    pieces.append(seq[start:])
    return ["".join(p) for piece in pieces for p in _parts(piece)]


def _count(start: int, end: int, step: int) -> int:
    return abs(end - start) // step + 1


def _int_range(start_s: str, end_s: str, step_s: str | None) -> list[str]:
    padded = any(s.startswith(("0", "-0")) for s in (start_s, end_s) if s not in ("0", "-0"))
    width = max(len(start_s), len(end_s)) if padded else 0
    step = (int(step_s) or 1) if step_s else 1
    start, end = int(start_s), int(end_s)
    if _count(start, end, step) > MAX_SHARDS:
        raise ConfigError(
            f"invalid shards: {{{start_s}..{end_s}}} is more than {MAX_SHARDS} shard names",
            parameter="shards",
        )
    r = range(start, end + 1, step) if start < end else range(start, end - 1, -step)
    return [str(i).zfill(width) for i in r]  # "-1" → "-01" as printf's %0*d


def _char_range(start_s: str, end_s: str, step_s: str | None) -> list[str]:
    step = (int(step_s) or 1) if step_s else 1
    start, end = _ALPHABET.index(start_s), _ALPHABET.index(end_s)
    if start < end:
        return [_ALPHABET[i] for i in range(start, end + 1, step)]
    return [_ALPHABET[i] for i in range(start, end - 1, -step)]
