"""Dataset sources: ImageFolder (torchvision convention) and FileList."""

from __future__ import annotations

import os
from collections.abc import Sequence

from . import _core
from .errors import ConfigError


class Source:
    """A list of (path, label) samples."""

    paths: list[str]
    labels: list[int]
    classes: list[str]

    def __len__(self) -> int:
        return len(self.paths)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} samples, {len(self.classes)} classes)"


class ImageFolder(Source):
    """``root/<class>/**/<image>``: classes sorted by name (label = position), files sorted, extensions
    .jpg/.jpeg/.png case-insensitive. Scanned once, in parallel, by the Rust core."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)
        self.paths, self.labels, self.classes = _core.scan_image_folder(self.root)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}


class FileList(Source):
    """Explicit ``paths`` and integer ``labels`` of the same length. Files are opened when decoded: a missing
    one follows the loader's ``on_error`` policy."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]], labels: Sequence[int] | None = None) -> None:
        self.paths = [os.fspath(p) for p in paths]
        self.labels = [0] * len(self.paths) if labels is None else [int(v) for v in labels]
        if len(self.labels) != len(self.paths):
            raise ConfigError(
                f"invalid labels: {len(self.labels)} labels for {len(self.paths)} paths", parameter="labels"
            )
        if not self.paths:
            raise ConfigError("invalid paths: the file list is empty", parameter="paths")
        self.classes = []
