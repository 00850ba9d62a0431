"""The GPU benches' training recipe for trdata, in one place: RandomResizedCrop(224) + flip + ImageNet normalize
(skipped for uint8, which the training loop normalizes on the GPU), shuffled, last_batch='drop'. ``recipe="tv"`` is
the per-sample part of torchvision's ResNet-50 reference recipe: RandomResizedCrop(176) + flip +
TrivialAugmentWide(bilinear, as the reference passes its interpolation) + RandomErasing(0.1) (erasing with the
ImageNet mean pixel: torchvision erases with 0 after Normalize)."""

from __future__ import annotations

from typing import Any


def _rn50() -> list[Any]:
    import trdata

    return [trdata.RandomResizedCrop(224), trdata.RandomHorizontalFlip()]


def _tv() -> list[Any]:
    import trdata

    mean_pixel = [round(255 * m) for m in trdata.IMAGENET[0]]
    return [
        trdata.RandomResizedCrop(176),
        trdata.RandomHorizontalFlip(),
        trdata.TrivialAugmentWide(interpolation="bilinear"),
        trdata.RandomErasing(p=0.1, value=mean_pixel),
    ]


def repeats_for(files: int, images: int) -> int:
    """How many times a list of ``files`` files must repeat for one epoch to hold ``images`` images (≥ 1): the
    benches' small samples otherwise make epochs of a few batches, each restart refilling every feeder's pipeline."""
    return max(1, -(-images // max(files, 1)))


#: Recipe name → its per-sample transforms; the output size is RECIPE_SIZE[name].
RECIPES = {"rn50": _rn50, "tv": _tv}
RECIPE_SIZE = {"rn50": 224, "tv": 176}


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
    recipe: str = "rn50",
    **extra: Any,
):
    """The recipe over FileList(paths, labels), or over ``source`` (any trdata source, e.g. a Packed file)."""
    import trdata

    return trdata.Loader(
        source if source is not None else trdata.FileList(paths, labels),
        batch_size=batch,
        transforms=RECIPES[recipe](),
        normalize=None if dtype == "uint8" else trdata.IMAGENET,
        dtype=dtype,
        layout=layout,
        workers=workers,
        shuffle=True,
        device=device,
        last_batch="drop",
        **extra,
    )
