"""RandomChannelPermutation, the op added through the one-unit transform contract (src/augment/ops/color.rs, one
registry line in src/augment/ops/mod.rs, one Python class): torchvision v2's semantics on real JPEGs — output
channel c is input channel perm[c] with perm = randperm(C) — every permutation equally likely, gray images left
as they are, and from_torchvision converts torchvision's op."""

from __future__ import annotations

import collections
import itertools

import numpy as np
import pytest
import trdata
from _fixtures import write_jpegs
from trdata import _core

SPEC = trdata.RandomChannelPermutation()._spec()
KW = dict(
    batch_size=4, dtype="uint8", layout="NHWC", seed=7, reproducible=True, last_batch="partial", workers=2
)


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> list[str]:
    return write_jpegs(tmp_path_factory.mktemp("jpegs"), 12, size=lambda i: (48 + i, 40 + i))


def drawn(index: int, channels: int = 3, position: int = 1) -> list[int]:
    d = _core.sample_op(
        SPEC, seed=7, epoch=0, index=index, position=position, height=8, width=8, channels=channels
    )
    return [int(v) for v in d]


def test_each_sample_is_its_drawn_permutation_of_the_unpermuted_pixels(paths) -> None:
    crop = trdata.CenterCrop(32)
    plain = np.concatenate([b.images for b in trdata.Loader(trdata.FileList(paths), transforms=[crop], **KW)])
    loader = trdata.Loader(trdata.FileList(paths), transforms=[crop, trdata.RandomChannelPermutation()], **KW)
    got = np.concatenate([b.images for b in loader])
    seen = set()
    for i in range(len(paths)):
        perm = drawn(i)
        assert sorted(perm) == [0, 1, 2]
        seen.add(tuple(perm))
        np.testing.assert_array_equal(got[i], plain[i][..., perm], err_msg=f"sample {i}, perm {perm}")
    assert len(seen) > 1, "the permutation varies across samples"


def test_torchvision_permute_channels_gives_the_same_pixels(paths) -> None:
    torch = pytest.importorskip("torch")
    f = pytest.importorskip("torchvision.transforms.v2.functional")
    crop = trdata.CenterCrop(32)
    plain = next(iter(trdata.Loader(trdata.FileList(paths), transforms=[crop], **KW))).images
    got = next(
        iter(
            trdata.Loader(trdata.FileList(paths), transforms=[crop, trdata.RandomChannelPermutation()], **KW)
        )
    )
    for i in range(4):
        chw = torch.from_numpy(np.ascontiguousarray(plain[i].transpose(2, 0, 1)))
        ref = f.permute_channels(chw, drawn(i)).numpy().transpose(1, 2, 0)
        np.testing.assert_array_equal(got.images[i], ref)


def test_every_permutation_is_equally_likely() -> None:
    n = 6000
    counts = collections.Counter(tuple(drawn(i)) for i in range(n))
    assert set(counts) == set(itertools.permutations(range(3)))
    expected = n / 6
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 20.5, counts  # χ² with 5 degrees of freedom: p ≈ 0.001


def test_a_gray_image_is_left_as_it_is() -> None:
    assert drawn(0, channels=1) == [0]
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (6, 20, 20), dtype=np.uint8)
    src = trdata.Arrays(images, [0] * 6)
    kw = {**KW, "layout": "NCHW"}
    plain = next(iter(trdata.Loader(src, transforms=[trdata.CenterCrop(16)], channels=1, **kw))).images
    got = next(
        iter(
            trdata.Loader(
                src, transforms=[trdata.CenterCrop(16), trdata.RandomChannelPermutation()], channels=1, **kw
            )
        )
    ).images
    np.testing.assert_array_equal(got, plain)


def test_from_torchvision_converts_it() -> None:
    v2 = pytest.importorskip("torchvision.transforms.v2")
    converted = trdata.transforms.from_torchvision(
        v2.Compose([v2.CenterCrop(32), v2.RandomChannelPermutation()])
    )
    assert trdata.RandomChannelPermutation() in converted.transforms
