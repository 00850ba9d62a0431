"""The GPU benches' training recipe for trdata, in one place: RandomResizedCrop(224) + flip + ImageNet normalize
(skipped for uint8, which the training loop normalizes on the GPU), shuffled, last_batch='drop'."""

from __future__ import annotations

from typing import Any


def train_loader(
    paths,
    labels,
    *,
    batch: int,
    dtype: str,
    layout: str,
    workers: int | None,
    device: str,
    source: Any = None,
    **extra: Any,
):
    """The recipe over FileList(paths, labels), or over ``source`` (any trdata source, e.g. a Packed file)."""
    import trdata

    return trdata.Loader(
        source if source is not None else trdata.FileList(paths, labels),
        batch_size=batch,
        transforms=[trdata.RandomResizedCrop(224), trdata.RandomHorizontalFlip()],
        normalize=None if dtype == "uint8" else trdata.IMAGENET,
        dtype=dtype,
        layout=layout,
        workers=workers,
        shuffle=True,
        device=device,
        last_batch="drop",
        **extra,
    )
