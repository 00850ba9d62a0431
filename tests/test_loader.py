"""Behaviour of the public Loader on real JPEGs: shapes, exactly-once, policies, reproducibility."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
import trdata
from _fixtures import write_jpegs

RRC = [trdata.RandomResizedCrop(64), trdata.RandomHorizontalFlip()]


def make(paths, **kw):
    kw.setdefault("transforms", RRC)
    kw.setdefault("workers", 2)
    return trdata.Loader(trdata.FileList(paths, list(range(len(paths)))), **kw)


def run_epoch(loader):
    """[(indices, valid, per-row sha1)] of one epoch."""
    out = []
    for b in loader:
        rows = [hashlib.sha1(b.images[i].tobytes()).hexdigest() for i in range(len(b))]
        out.append((b.indices.tolist(), b.valid, rows))
    return out


# torchvision.datasets.folder.IMG_EXTENSIONS
TORCHVISION_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def torchvision_listing(root):
    """(classes, [(path, label)]) as torchvision's ImageFolder builds them (find_classes + make_dataset)."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    samples = []
    for label, cls in enumerate(classes):
        for dirpath, _, fnames in sorted(os.walk(os.path.join(root, cls), followlinks=True)):
            for fname in sorted(fnames):
                if fname.lower().endswith(TORCHVISION_EXTENSIONS):
                    samples.append((os.path.join(dirpath, fname), label))
    return classes, samples


def test_image_folder_follows_torchvision(imagenet_root):
    ds = trdata.ImageFolder(imagenet_root)
    classes, samples = torchvision_listing(imagenet_root)
    assert len(classes) >= 2 and len(samples) >= 100, "too small a folder to test anything"
    assert ds.classes == classes
    assert len(ds) == len(samples)
    assert list(zip(ds.paths, ds.labels)) == samples
    assert ds.classes == sorted(ds.classes)
    assert ds.labels == sorted(ds.labels)
    assert all(ds.paths[i].split("/")[-2] == ds.classes[ds.labels[i]] for i in range(len(ds)))


@pytest.mark.parametrize(
    "layout,dtype,np_dtype",
    [
        ("NCHW", "float16", np.float16),
        ("NHWC", "uint8", np.uint8),
        ("NCHW", "float32", np.float32),
        ("NHWC", "bfloat16", None),
    ],
)
def test_batch_shape_dtype_layout(small_paths, layout, dtype, np_dtype):
    norm = None if dtype == "uint8" else trdata.IMAGENET
    with make(small_paths[:20], batch_size=8, layout=layout, dtype=dtype, normalize=norm) as loader:
        batches = list(loader)
    shape = (8, 3, 64, 64) if layout == "NCHW" else (8, 64, 64, 3)
    assert [b.images.shape[0] for b in batches] == [8, 8, 4]
    assert batches[0].images.shape == shape
    if np_dtype is not None:
        assert batches[0].images.dtype == np_dtype
    else:
        assert batches[0].images.dtype.itemsize == 2
    images, labels = batches[0]
    assert labels.dtype == np.int64 and labels.tolist() == batches[0].indices.tolist()
    if dtype == "float32":
        x = batches[0].images
        assert np.isfinite(x).all() and -2.2 < x.min() < 0 < x.max() < 2.7  # ImageNet-normalized range
    if dtype == "uint8":
        assert batches[0].images.std() > 10  # real pixels, not zeros


@pytest.mark.parametrize("last_batch", ["drop", "pad", "partial"])
@pytest.mark.parametrize("reproducible", [True, False])
@pytest.mark.parametrize("world_size", [1, 3])
def test_exactly_once_across_ranks(small_paths, last_batch, reproducible, world_size):
    paths = small_paths[:50]
    seen, lengths = [], []
    for rank in range(world_size):
        with make(
            paths,
            batch_size=7,
            last_batch=last_batch,
            reproducible=reproducible,
            shuffle=True,
            seed=3,
            rank=rank,
            world_size=world_size,
            workers=3,
        ) as loader:
            epoch = run_epoch(loader)
            assert len(epoch) == len(loader)
            lengths.append(len(epoch))
            for indices, valid, _ in epoch:
                assert len(indices) == (7 if last_batch != "partial" else len(indices))
                seen.extend(indices[:valid])
                assert set(indices[valid:]) <= set(range(len(paths)))  # fillers/pads repeat real samples
    assert len(set(lengths)) == 1, "every rank yields the same number of batches"
    if last_batch == "drop":
        assert len(seen) == len(set(seen))
    else:
        assert sorted(seen) == list(range(len(paths)))


def test_last_batch_policies_lengths(small_paths):
    paths = small_paths[:50]
    assert len(make(paths, batch_size=16, last_batch="drop")) == 3
    assert len(make(paths, batch_size=16, last_batch="pad")) == 4
    assert len(make(paths, batch_size=16, last_batch="partial")) == 4
    with make(paths, batch_size=16, last_batch="pad") as loader:
        last = list(loader)[-1]
    assert last.images.shape[0] == 16 and last.valid == 2


def test_reproducible_bytes_for_any_worker_count(small_paths):
    paths = small_paths[:40]
    runs = []
    for workers in (1, 2, 3, 8):
        with make(
            paths,
            batch_size=6,
            workers=workers,
            reproducible=True,
            shuffle=True,
            seed=11,
            normalize=trdata.IMAGENET,
            dtype="float16",
        ) as loader:
            runs.append(run_epoch(loader))
    assert all(r == runs[0] for r in runs[1:])


def test_fast_mode_same_samples_same_pixels(small_paths):
    """reproducible=False may move samples between slots, never change what a sample looks like."""
    paths = small_paths[:40]

    def by_index(epoch):
        return {i: h for indices, valid, hashes in epoch for i, h in zip(indices[:valid], hashes[:valid])}

    with make(paths, batch_size=6, workers=1, reproducible=True, shuffle=True, seed=5) as loader:
        ref = by_index(run_epoch(loader))
    with make(paths, batch_size=6, workers=3, reproducible=False, shuffle=True, seed=5) as loader:
        fast = by_index(run_epoch(loader))
    assert ref == fast and len(ref) == 40


def test_epochs_and_seeds_change_order_and_augmentation(small_paths):
    paths = small_paths[:30]
    with make(paths, batch_size=10, shuffle=True, reproducible=True, seed=1) as loader:
        e0, e1 = run_epoch(loader), run_epoch(loader)
        loader.set_epoch(0)
        assert run_epoch(loader) == e0
    assert [b[0] for b in e0] != [b[0] for b in e1]
    with make(paths, batch_size=10, shuffle=True, reproducible=True, seed=2) as other:
        assert [b[0] for b in run_epoch(other)] != [b[0] for b in e0]
    with make(paths, batch_size=10, shuffle=False, reproducible=True) as plain:
        assert [i for b in run_epoch(plain) for i in b[0]] == list(range(30))


def test_held_batches_stay_intact(small_paths):
    """Holding many batches blocks/extends the producer, never rewrites a held batch."""
    with make(small_paths, batch_size=4, max_held_batches=40, reproducible=True, dtype="uint8") as loader:
        held = []
        for b in loader:
            held.append((b, hashlib.sha1(b.images.tobytes()).hexdigest()))
        assert len(held) == -(-len(small_paths) // 4)
        for b, digest in held:
            assert hashlib.sha1(b.images.tobytes()).hexdigest() == digest
        assert loader.stats()["buffers_allocated"] <= 2 + 40


def test_holding_every_buffer_raises_instead_of_hanging(small_paths):
    with make(small_paths, batch_size=4, max_held_batches=2, dtype="uint8") as loader:
        it = iter(loader)
        held = [next(it) for _ in range(4)]
        with pytest.raises(trdata.ConfigError, match="held by Python") as exc:
            next(it)
        assert exc.value.parameter == "max_held_batches"
        del held


def test_views_outlive_close(small_paths):
    loader = make(small_paths[:8], batch_size=8, dtype="uint8")
    batch = next(iter(loader))
    digest = hashlib.sha1(batch.images.tobytes()).hexdigest()
    loader.close()
    assert hashlib.sha1(batch.images.tobytes()).hexdigest() == digest


def test_stats_count_work(small_paths):
    with make(small_paths[:20], batch_size=5) as loader:
        list(loader)
        s = loader.stats()
    assert s["samples"] == 20 and s["batches"] == 4 and s["epochs"] == 1
    assert s["decode_ns"] > 0 and s["augment_ns"] > 0 and s["bytes_read"] > 0


def _checkpoint(source, **kw):
    """state_dict() after one batch of a loader over ``source``."""
    with trdata.Loader(source, batch_size=4, workers=2, transforms=[trdata.CenterCrop(8)], **kw) as ld:
        next(iter(ld))
        return ld.state_dict()


def test_a_checkpoint_is_refused_over_another_source_of_the_same_length(small_paths, tmp_path):
    """A checkpoint taken over one source loaded silently into a loader over another of the same length (only the
    size was compared), and the resumed epoch mixed two datasets. The state now records the source (its kind and a
    fingerprint of a few samples, of a pack's index, or a dataset's class) and a mismatch names both."""
    import shutil

    from PIL import Image

    n = 12
    first, second = small_paths[:n], small_paths[n : 2 * n]
    blobs = [open(p, "rb").read() for p in small_paths[: 2 * n]]  # noqa: SIM115 (read at once)
    pixels = np.stack(
        [np.asarray(Image.open(p).convert("RGB").resize((16, 16))) for p in small_paths[: 2 * n]]
    )

    class Dataset:
        def __init__(self, blobs):
            self.blobs = blobs

        def __len__(self):
            return len(self.blobs)

        def __getitem__(self, i):
            return self.blobs[i], 0

    class OtherDataset(Dataset):
        pass

    cases = [
        (trdata.FileList(first), trdata.FileList(second), "files"),
        (trdata.Bytes(blobs[:n]), trdata.Bytes(blobs[n:]), "bytes"),
        (trdata.Arrays(pixels[:n]), trdata.Arrays(pixels[n:]), "arrays"),
        (trdata.Bytes(blobs[:n]), trdata.FileList(first), "bytes"),  # same images, another kind of source
        (
            trdata.FileList(first, [0] * n),
            trdata.FileList(first, [1] * n),
            "files",
        ),  # same files, other labels
        (Dataset(blobs[:n]), OtherDataset(blobs[:n]), "dataset"),
    ]
    for saved_over, other, kind in cases:
        state = _checkpoint(saved_over)
        assert state["fingerprint"]["source"].startswith(kind + " ")
        with trdata.Loader(other, batch_size=4, workers=2, transforms=[trdata.CenterCrop(8)]) as ld:
            with pytest.raises(trdata.ConfigError, match="the checkpoint was saved with source=") as e:
                ld.load_state_dict(state)
            assert e.value.parameter == "source"
            assert state["fingerprint"]["source"] in str(e.value) and ld.state_dict()["fingerprint"][
                "source"
            ] in str(e.value)
            # a checkpoint of a trdata that did not record the source still loads
            del state["fingerprint"]["source"]
            ld.load_state_dict(state)
    # the same dataset elsewhere (a copied folder, another instance of the same source) resumes
    moved = tmp_path / "moved"
    for p in first:
        dst = moved / os.path.basename(os.path.dirname(p)) / os.path.basename(p)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dst)
    copies = [str(moved / os.path.basename(os.path.dirname(p)) / os.path.basename(p)) for p in first]
    # … and so does the same dataset packed (the pack stores its source's identity), either way
    trdata.pack(trdata.FileList(first), tmp_path / "first.trd", progress=False)
    trdata.pack(trdata.Packed(tmp_path / "first.trd"), tmp_path / "again.trd", progress=False)
    trdata.pack(trdata.FileList(second), tmp_path / "second.trd", progress=False)
    packed = trdata.Packed(tmp_path / "first.trd")
    assert (
        _checkpoint(packed)["fingerprint"]["source"]
        == _checkpoint(trdata.FileList(first))["fingerprint"]["source"]
    )
    with trdata.Loader(
        trdata.Packed(tmp_path / "second.trd"), batch_size=4, workers=2, transforms=[trdata.CenterCrop(8)]
    ) as ld:
        with pytest.raises(trdata.ConfigError, match="source=") as e:
            ld.load_state_dict(_checkpoint(packed))
        assert e.value.parameter == "source"
    for saved_over, other in (
        (trdata.FileList(first), trdata.FileList(copies)),
        (trdata.Bytes(blobs[:n]), trdata.Bytes(list(blobs[:n]))),
        (Dataset(blobs[:n]), Dataset(blobs[n:])),  # a dataset is known by its class only
        (trdata.FileList(first), packed),
        (packed, trdata.FileList(copies)),
        (trdata.FileList(first), trdata.Packed(tmp_path / "again.trd")),  # a pack of the pack
    ):
        state = _checkpoint(saved_over)
        with trdata.Loader(other, batch_size=4, workers=2, transforms=[trdata.CenterCrop(8)]) as ld:
            ld.load_state_dict(state)
            assert sum(len(b) for b in ld) == n - 4


# -------------------- hostile inputs and their regressions -------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_unshuffled_loader_delivers_dataset_order_by_default(tmp_path, workers):
    paths = write_jpegs(tmp_path, 50)
    src = trdata.FileList(paths, list(range(50)))
    with trdata.Loader(src, batch_size=4, workers=workers, transforms=[trdata.CenterCrop(16)]) as loader:
        for _ in range(3):
            got = np.concatenate([b.indices for b in loader])
            assert got.tolist() == list(range(50))
            labels = np.concatenate([b.labels for b in loader])
            assert labels.tolist() == list(range(50))


def test_epoch_counter_never_wraps(tmp_path):
    paths = write_jpegs(tmp_path, 4)
    src = trdata.FileList(paths, [0, 1, 2, 3])
    with trdata.Loader(
        src, batch_size=2, workers=1, transforms=[trdata.CenterCrop(8)], reproducible=True
    ) as loader:
        state = loader.state_dict()
        state["epoch"] = 2**64 - 1
        state["batches"] = len(loader)  # "epoch 2**64-1 finished": the next would be 2**64
        with pytest.raises(trdata.ConfigError) as exc:
            loader.load_state_dict(state)
        assert exc.value.parameter == "epoch"
        with pytest.raises(trdata.ConfigError) as exc:
            loader.set_epoch(2**64 - 1)
        assert exc.value.parameter == "epoch"
        # Epochs are below 2**63 (checkpoints carry them as signed ints): the last one has no successor.
        loader.set_epoch(2**63 - 1)
        with pytest.raises(trdata.ConfigError) as exc:
            list(loader)
        assert exc.value.parameter == "epoch"
        loader.set_epoch(2**63 - 2)
        assert len(list(loader)) == 2
        state = loader.state_dict()
        assert (state["epoch"], state["batches"]) == (2**63 - 1, 0)
        loader.load_state_dict(state)  # what a loader saves, it can load
