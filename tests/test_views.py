"""Multi-view loading (``Loader(views=[...])``, DINO/SimCLR): one read per sample, one independently augmented
image per view, ``batch.images`` a tuple of one array per view sharing the batch's buffer.

The contract tested here: view 0 is the single-pipeline loader's sample (same seed, same stream); view k is the
single-pipeline loader's sample under the seed ``(seed + k·0x9E3779B97F4A7C15) mod 2**64`` (src/augment/views.rs);
two views of one sample differ; every view is the same for any worker count and across an exact resume; a
loader built with ``transforms=`` is unchanged (``images`` an array). Real JPEGs, written by the test in the
ImageFolder layout (class folders of .jpg files)."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import trdata
from trdata.errors import ConfigError

PIL = pytest.importorskip("PIL.Image")

VIEW_SEED_STEP = 0x9E3779B97F4A7C15

GLOBAL = [
    trdata.RandomResizedCrop(224, scale=(0.4, 1.0)),
    trdata.RandomHorizontalFlip(),
    trdata.ColorJitter(0.4, 0.4, 0.2, 0.1),
]
LOCAL = [
    trdata.RandomResizedCrop(96, scale=(0.05, 0.4)),
    trdata.RandomHorizontalFlip(),
    trdata.RandomGrayscale(0.2),
    trdata.GaussianBlur(9, (0.1, 2.0)),
]
#: DINO-like: 2 global + 4 local crops.
DINO = [GLOBAL, GLOBAL] + [LOCAL] * 4
DINO_SHAPES = [(3, 224, 224)] * 2 + [(3, 96, 96)] * 4


def view_seed(seed: int, k: int) -> int:
    return (seed + k * VIEW_SEED_STEP) % 2**64


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An ImageFolder of 20 textured JPEGs (2 classes, sizes 200..420 px, 4:2:0), written with Pillow."""
    root = tmp_path_factory.mktemp("views") / "train"
    rng = np.random.default_rng(3)
    for i in range(20):
        h, w = 200 + 11 * i, 420 - 9 * i
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([(x * 255 // w), (y * 255 // h), ((x + y) * 3) % 256], axis=-1).astype(np.int32)
        img = np.clip(img + rng.integers(-40, 40, img.shape), 0, 255).astype(np.uint8)
        d = root / f"class{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        PIL.fromarray(img).save(d / f"img{i:02d}.jpg", quality=90)
    return root


def loader(folder, **kw):
    kw.setdefault("batch_size", 6)
    kw.setdefault("workers", 2)
    kw.setdefault("reproducible", True)
    return trdata.Loader(trdata.ImageFolder(folder), **kw)


def epoch(ld):
    """Every batch of one epoch: (tuple of per-view copies (or one array), indices, labels)."""
    out = []
    for b in ld:
        imgs = tuple(v.copy() for v in b.images) if isinstance(b.images, tuple) else b.images.copy()
        out.append((imgs, b.indices.copy(), np.asarray(b.labels).copy()))
    return out


def test_dino_views_shapes_and_dtypes(folder):
    with loader(folder, views=DINO, normalize=trdata.IMAGENET, last_batch="partial") as ld:
        assert ld.view_shapes == DINO_SHAPES
        batches = list(ld)
        assert [len(b) for b in batches] == [6, 6, 6, 2]
        for b in batches:
            assert isinstance(b.images, tuple) and len(b.images) == 6
            for v, shape in zip(b.images, DINO_SHAPES):
                assert v.shape == (len(b),) + shape and v.dtype == np.float32
                assert np.isfinite(v).all()
            assert "(6, 3, 224, 224)" in repr(b) or "(2, 3, 224, 224)" in repr(b)
        # The sample is read once per row whatever the views (bytes_read counts each file once per epoch).
        files = sorted(folder.rglob("*.jpg"))
        assert ld.stats()["bytes_read"] == sum(p.stat().st_size for p in files)
        assert ld.stats()["samples"] == 20


def test_view_k_is_the_single_pipeline_loader_under_the_view_seed(folder):
    """Each view equals a single-pipeline loader of that view's transforms drawing the same random stream: the
    same seed for view 0 (shuffled order included), the view seed for k > 0 (unshuffled, so the order does not
    depend on the seed)."""
    kw = dict(normalize=trdata.IMAGENET, dtype="float16", last_batch="partial")
    with loader(folder, views=DINO, seed=11, shuffle=True, **kw) as ld:
        multi = epoch(ld)
    with loader(folder, transforms=GLOBAL, seed=11, shuffle=True, **kw) as ld:
        single = epoch(ld)
    for (views, idx, lab), (img, idx1, lab1) in zip(multi, single):
        np.testing.assert_array_equal(idx, idx1)
        np.testing.assert_array_equal(lab, lab1)
        np.testing.assert_array_equal(views[0], img)
    with loader(folder, views=DINO, seed=11, shuffle=False, **kw) as ld:
        multi = epoch(ld)
    for k, view in enumerate(DINO):
        with loader(folder, transforms=view, seed=view_seed(11, k), shuffle=False, **kw) as ld:
            single = epoch(ld)
        for (views, idx, _), (img, idx1, _) in zip(multi, single):
            np.testing.assert_array_equal(idx, idx1)
            np.testing.assert_array_equal(views[k], img, err_msg=f"view {k}")


def test_views_of_one_sample_differ(folder):
    with loader(folder, views=[GLOBAL, GLOBAL, LOCAL, LOCAL], dtype="uint8") as ld:
        for b in ld:
            for i in range(len(b)):
                assert not np.array_equal(b.images[0][i], b.images[1][i]), f"row {i}: global views equal"
                assert not np.array_equal(b.images[2][i], b.images[3][i]), f"row {i}: local views equal"


@pytest.mark.parametrize("reproducible", [True, False])
def test_views_are_the_same_for_any_worker_count(folder, reproducible):
    """A view depends on (seed, epoch, sample, view) only: 1 and 3 workers give the same pixels per sample (in
    fast mode rows may move: compare by dataset index)."""

    def per_sample(workers):
        with loader(
            folder, views=DINO, workers=workers, reproducible=reproducible, shuffle=True, seed=5
        ) as ld:
            ld.set_epoch(2)
            rows = {}
            for views, idx, _ in epoch(ld):
                for r, i in enumerate(idx):
                    rows[int(i)] = [v[r] for v in views]
            return rows

    one, three = per_sample(1), per_sample(3)
    assert sorted(one) == sorted(three) == list(range(20))
    for i in one:
        for k in range(6):
            np.testing.assert_array_equal(one[i][k], three[i][k], err_msg=f"sample {i} view {k}")


def test_exact_resume_continues_every_view(folder):
    kw = dict(views=DINO, shuffle=True, seed=9, dtype="uint8", last_batch="partial")
    with loader(folder, **kw) as ld:
        ld.set_epoch(1)
        full = epoch(ld)
    with loader(folder, **kw) as ld:
        ld.set_epoch(1)
        it = iter(ld)
        next(it)
        state = ld.state_dict()
    with loader(folder, workers=3, **kw) as ld:
        ld.load_state_dict(state)
        rest = epoch(ld)
    assert len(rest) == len(full) - 1
    for (views, idx, _), (want, want_idx, _) in zip(rest, full[1:]):
        np.testing.assert_array_equal(idx, want_idx)
        for k in range(6):
            np.testing.assert_array_equal(views[k], want[k])


def test_view_arrays_keep_the_batch_alive(folder):
    """Every view array shares the batch's one lease: holding only a local view keeps the whole buffer out of the
    ring while the loader runs on (3 buffers for 4 batches: a buffer returned early would be rewritten)."""
    with loader(folder, views=DINO, dtype="uint8", max_held_batches=1, prefetch=2) as ld:
        it = iter(ld)
        b = next(it)
        kept = b.images[5]
        want = kept.copy()
        assert kept.base is not None
        del b
        gc.collect()
        for _ in it:
            pass
        np.testing.assert_array_equal(kept, want)


def test_layouts_channels_and_dtypes(folder):
    views = [[trdata.Resize((40, 56))], [trdata.RandomResizedCrop((24, 20)), trdata.RandomHorizontalFlip()]]
    with loader(folder, views=views, layout="NHWC", channels=1, dtype="bfloat16", batch_size=4) as ld:
        assert ld.view_shapes == [(40, 56, 1), (24, 20, 1)]
        b = next(iter(ld))
        assert [v.shape for v in b.images] == [(4, 40, 56, 1), (4, 24, 20, 1)]
    # The deterministic view equals the single-pipeline loader's (no randomness to share).
    with (
        loader(folder, views=views, dtype="uint8", batch_size=4) as ld,
        loader(folder, transforms=views[0], dtype="uint8", batch_size=4) as single,
    ):
        for b, s in zip(ld, single):
            np.testing.assert_array_equal(b.images[0], s.images)


def test_one_view_is_a_tuple_and_transforms_stay_an_array(folder):
    with loader(folder, views=[GLOBAL], batch_size=4) as ld:
        b = next(iter(ld))
        assert isinstance(b.images, tuple) and len(b.images) == 1
    with loader(folder, transforms=GLOBAL, batch_size=4) as ld:
        assert ld.view_shapes is None
        b = next(iter(ld))
        assert isinstance(b.images, np.ndarray) and b.images.shape == (4, 3, 224, 224)


def test_multi_view_batch_exports_per_view(folder):
    with loader(folder, views=DINO, batch_size=4, dtype="uint8") as ld:
        b = next(iter(ld))
        for export in (b.__dlpack__, b.__dlpack_device__):
            with pytest.raises(BufferError, match="multi-view"):
                export()
        # Each view exports zero-copy through numpy's DLPack consumer.
        for v in b.images:
            got = np.from_dlpack(v)
            assert got.shape == v.shape
            np.testing.assert_array_equal(got, v)


def test_multi_view_torch(folder):
    torch = pytest.importorskip("torch")
    with loader(folder, views=DINO, batch_size=4, dtype="bfloat16") as ld:
        b = next(iter(ld))
        with pytest.raises(BufferError, match="multi-view"):
            torch.from_dlpack(b)
        images, labels = b.torch()
        assert len(images) == 6 and all(t.dtype == torch.bfloat16 for t in images)
        assert [tuple(t.shape[1:]) for t in images] == DINO_SHAPES
        np.testing.assert_array_equal(labels.numpy(), b.labels)


def test_errors_follow_the_policy_for_every_view(folder, tmp_path):
    """A bad file: 'raise' names it; 'skip' replaces the row in every view by the same replacement sample, as the
    single-pipeline loader does (view 0 equal, indices equal)."""
    root = tmp_path / "train"
    for p in sorted(folder.rglob("*.jpg"))[:8]:
        (root / p.parent.name).mkdir(parents=True, exist_ok=True)
        (root / p.parent.name / p.name).write_bytes(p.read_bytes())
    (root / "class0" / "img00.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(trdata.DecodeError, match="img00.jpg"):
        with loader(root, views=DINO, batch_size=4) as ld:
            list(ld)
    kw = dict(batch_size=4, on_error="skip", dtype="uint8", seed=2)
    with loader(root, views=DINO, **kw) as ld, loader(root, transforms=GLOBAL, **kw) as single:
        for b, s in zip(ld, single):
            np.testing.assert_array_equal(b.indices, s.indices)
            np.testing.assert_array_equal(b.images[0], s.images)
        assert ld.stats()["errors_skipped"] == 1


def test_torchvision_views(folder):
    """Each view may be a torchvision Compose (DINO's recipes are): converted as ``transforms=`` is, the trailing
    ToTensor/Normalize becoming the shared dtype/normalize; the batches equal the trdata-spelled views."""
    T = pytest.importorskip("torchvision.transforms")
    norm = T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    tv_global = T.Compose(
        [T.RandomResizedCrop(224, scale=(0.4, 1.0)), T.RandomHorizontalFlip(), T.ToTensor(), norm]
    )
    tv_local = T.Compose(
        [T.RandomResizedCrop(96, scale=(0.05, 0.4)), T.RandomHorizontalFlip(), T.ToTensor(), norm]
    )
    ours = [GLOBAL[:2], LOCAL[:2]]
    with (
        loader(folder, views=[tv_global, tv_local], batch_size=4) as ld,
        loader(folder, views=ours, normalize=trdata.IMAGENET, batch_size=4) as want,
    ):
        for b, w in zip(ld, want):
            assert [v.dtype for v in b.images] == [np.float32, np.float32]
            for v, u in zip(b.images, w.images):
                np.testing.assert_allclose(v, u, atol=1e-6)


@pytest.mark.parametrize(
    "kw,match",
    [
        (
            dict(views=[GLOBAL], transforms=GLOBAL),
            "invalid views: a list of 1 pipelines must not be given together",
        ),
        (dict(views=[]), "invalid views: a list of 0 pipelines must hold 1 to 16 pipelines"),
        (dict(views=[LOCAL] * 17), "invalid views: a list of 17 pipelines must hold 1 to 16 pipelines"),
        (dict(views="RandomResizedCrop"), "invalid views: 'RandomResizedCrop' must be a list of pipelines"),
        (
            dict(views=[GLOBAL, trdata.RandomResizedCrop(96)]),
            r"invalid views: views\[1\]: RandomResizedCrop\(.*\) must be a list of transforms",
        ),
        (
            dict(views=[GLOBAL, [trdata.RandomHorizontalFlip()]]),
            r"invalid views: views\[1\]: .*must fix the output",
        ),
    ],
)
def test_bad_views_are_config_errors(folder, kw, match):
    with pytest.raises(ConfigError, match=match) as e:
        loader(folder, **kw)
    assert e.value.parameter == "views"


def test_batch_ops_are_refused_with_several_views_and_batch_transform_sees_the_tuple(folder):
    with pytest.raises(ConfigError, match="views") as e:
        loader(folder, views=DINO, batch_ops=[trdata.MixUp(0.2, num_classes=3)])
    assert e.value.parameter == "batch_ops"
    seen = []

    def record(batch, _gen):
        seen.append(tuple(a.shape for a in batch.images))

    with loader(folder, views=DINO, batch_transform=record) as ld:
        n = sum(1 for _ in ld)
    assert len(seen) == n > 0 and all(len(s) == len(DINO) for s in seen)
