"""Detection batches of a ``Loader(pad_to=...)``: ``batch.image_list()`` gives each image at its own size (zero-copy
views of the batch, the form torchvision's detection models take), ``batch.padded_images()`` the padded slots on
request, and the batch refuses to be taken whole as the images (``torch.from_dlpack(batch)``, ``batch.torch()``,
``images, labels = batch``): a detector given the padded canvas rescales a mostly black image and every object
comes out smaller, with no error. Classification batches and fixed-size detection batches are unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import write_coco_boxes

torch = pytest.importorskip("torch")

#: Each image keeps a size the recipe draws (shorter side 24, 32 or 40, longer side at most 64).
RECIPE = [trdata.RandomShortestSize((24, 32, 40), max_size=64), trdata.RandomHorizontalFlip()]
PAD_TO = (64, 64)


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> trdata.CocoDetection:
    images, ann = write_coco_boxes(tmp_path_factory.mktemp("coco"), 8, (72, 48))
    return trdata.CocoDetection(images, ann)


@pytest.mark.parametrize(("layout", "dtype"), [("NCHW", "float32"), ("NHWC", "uint8"), ("NCHW", "bfloat16")])
def test_image_list_gives_each_image_at_its_size_as_views_of_the_batch(
    coco: trdata.CocoDetection, layout: str, dtype: str
) -> None:
    normalize = None if dtype == "uint8" else trdata.IMAGENET
    with trdata.Loader(
        coco,
        batch_size=4,
        transforms=RECIPE,
        pad_to=PAD_TO,
        layout=layout,
        dtype=dtype,
        normalize=normalize,
        seed=2,
    ) as ld:
        sizes_seen = set()
        for b in ld:
            assert b.padded
            slots = b.padded_images()
            assert isinstance(slots, torch.Tensor)
            assert tuple(slots.shape) == ((len(b), 3, *PAD_TO) if layout == "NCHW" else (len(b), *PAD_TO, 3))
            nchw = slots if layout == "NCHW" else slots.permute(0, 3, 1, 2)
            views = b.image_list()
            assert len(views) == len(b)
            for i, (view, target) in enumerate(zip(views, b.targets)):
                h, w = (int(v) for v in target["size"])
                sizes_seen.add((h, w))
                assert isinstance(view, torch.Tensor) and view.dtype == slots.dtype
                assert tuple(view.shape) == (3, h, w) == (3, *b.image_sizes[i].tolist())
                assert torch.equal(view, nchw[i, :, :h, :w])  # the canvas' top left
                assert not nchw[i, :, h:, :].any() and not nchw[i, :, :, w:].any()  # zeros elsewhere
                # a view of the batch's buffer, not a copy
                start = slots.data_ptr()
                end = start + slots.numel() * slots.element_size()
                assert start <= view.data_ptr() < end
            assert (b.image_sizes < np.array(PAD_TO)).any()  # the rows really are of their own sizes
        assert len(sizes_seen) > 1


def test_a_padded_batch_is_not_taken_whole_as_the_images(coco: trdata.CocoDetection) -> None:
    with trdata.Loader(coco, batch_size=4, transforms=RECIPE, pad_to=PAD_TO, normalize=None) as ld:
        b = next(iter(ld))
    for take in (lambda: torch.from_dlpack(b), b.torch, lambda: tuple(b), lambda: np.from_dlpack(b)):
        with pytest.raises(BufferError, match=r"batch\.image_list\(\).*batch\.padded_images\(\)"):
            take()
    assert b.padded_targets()["counts"].tolist() == [1] * 4  # the targets are as they were


def test_batches_without_pad_to_are_taken_whole_as_before(coco: trdata.CocoDetection) -> None:
    with trdata.Loader(coco, batch_size=4, transforms=[trdata.RandomResizedCrop(32)], normalize=None) as ld:
        b = next(iter(ld))
    assert not b.padded
    whole = torch.from_dlpack(b)
    assert tuple(whole.shape) == (4, 3, 32, 32)
    images, _ = b
    assert torch.equal(whole, torch.from_numpy(np.asarray(images)))
    assert all(torch.equal(v, whole[i]) for i, v in enumerate(b.image_list()))
    arrays = np.stack([np.full((20, 30, 3), 9 * i, np.uint8) for i in range(4)])
    with trdata.Loader(trdata.Arrays(arrays, [0, 1, 2, 3]), batch_size=4, layout="NHWC", shuffle=False) as ld:
        b = next(iter(ld))
    assert not b.padded and b.image_sizes is None
    assert [tuple(v.shape) for v in b.image_list()] == [(3, 20, 30)] * 4
    assert torch.equal(torch.from_dlpack(b).permute(0, 3, 1, 2), torch.stack(b.image_list()))


NUMPY_ONLY = """
import sys
sys.modules["torch"] = None  # as on a machine without torch
sys.path.insert(0, {tests!r})
import numpy as np, trdata
from _fixtures import write_coco_boxes
images, ann = write_coco_boxes(__import__("pathlib").Path({root!r}), 4, (72, 48))
recipe = [trdata.RandomShortestSize((24, 32, 40), max_size=64)]
with trdata.Loader(trdata.CocoDetection(images, ann), batch_size=4, transforms=recipe, pad_to=(64, 64),
                   normalize=None, seed=2) as ld:
    b = next(iter(ld))
    slots = b.padded_images()
    for i, v in enumerate(b.image_list()):
        h, w = b.targets[i]["size"]
        assert type(v) is np.ndarray and v.shape == (3, h, w) and np.shares_memory(v, slots), v.shape
        assert (v == slots[i, :, :h, :w]).all()
    try:
        np.from_dlpack(b)
    except BufferError as e:
        print("refused:", "image_list()" in str(e))
"""


def test_without_torch_the_views_are_numpy(tmp_path: Path) -> None:
    script = NUMPY_ONLY.format(tests=str(Path(__file__).parent), root=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "refused: True"
