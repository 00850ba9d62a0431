"""The GPU benches' training recipe for trdata, in one place: RandomResizedCrop(224) + flip + ImageNet normalize
(skipped for uint8, which the training loop normalizes on the GPU), shuffled, last_batch='drop'."""

from __future__ import annotations

from typing import Any


def train_loader(
    paths, labels, *, batch: int, dtype: str, layout: str, workers: int | None, device: str, **extra: Any
):
    import trdata

    return trdata.Loader(
        trdata.FileList(paths, labels),
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
