"""A sample's error is that sample's, whatever part of it failed: its bytes, its decode, or its targets (a size
its annotations declare that is not the image's, a label map that cannot be read). Each follows ``on_error``:
raised as a ``DecodeError`` naming the sample — and the iterator goes on with the next step, as torch's
DataLoader goes on after a ``__getitem__`` raised — or replaced and counted under ``skip``."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import photo, write_coco_boxes, write_jpegs

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402


def _jpeg(path: Path, seed: int, w: int, h: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(photo(seed, w, h)).save(path, quality=90)


def _rows(batches: list[Any]) -> list[int]:
    return [int(i) for b in batches for i in b.indices[: b.valid]]


def test_a_coco_size_that_is_not_the_images_is_the_samples_error(tmp_path: Path) -> None:
    # image 2 is 64x48 but listed as 640x480: its box would be flipped on a 640-wide canvas
    images, ann = write_coco_boxes(tmp_path, 6, (64, 48), {2: (640, 480)})
    coco = trdata.CocoDetection(images, ann)
    flip = [trdata.RandomHorizontalFlip(p=1.0)]
    with trdata.Loader(coco, batch_size=2, transforms=flip, pad_to=(480, 640), normalize=None) as loader:
        it = iter(loader)
        first = next(it)
        with pytest.raises(trdata.DecodeError) as e:
            next(it)
        assert e.value.kind == "Target" and e.value.index == 2 and e.value.path.endswith("0002.jpg")
        assert "64x48" in str(e.value) and "640x480" in str(e.value)
        rest = list(it)  # the iterator goes on: the step holding sample 2 is the one lost
    assert _rows([first, *rest]) == [0, 1, 4, 5]
    with trdata.Loader(coco, batch_size=2, transforms=flip, pad_to=(48, 64), on_error="skip") as loader:
        batches = list(loader)
        assert loader.stats()["errors_skipped"] == 1
    rows = _rows(batches)
    assert len(rows) == 6 and 2 not in rows
    for b in batches:  # every box delivered is the true one, flipped on the true canvas
        for t in b.targets:
            np.testing.assert_allclose(np.asarray(t["boxes"]), [[6.4, 4.8, 25.6, 19.2]], atol=1e-4)


def test_a_pack_refuses_the_record_whose_size_is_not_the_declared_one(tmp_path: Path) -> None:
    images, ann = write_coco_boxes(tmp_path, 4, (64, 48), {1: (640, 480)})
    coco = trdata.CocoDetection(images, ann)
    out = tmp_path / "coco.trd"
    with pytest.raises(trdata.DecodeError) as e:
        trdata.pack(coco, out)
    assert e.value.index == 1 and "640x480" in str(e.value)
    assert not out.exists()


def test_an_image_replaced_after_the_source_was_made_is_caught_by_the_worker(tmp_path: Path) -> None:
    for k in range(4):
        _jpeg(tmp_path / "images" / "train" / f"{k}.jpg", k, 64, 48)
        (tmp_path / "labels" / "train").mkdir(parents=True, exist_ok=True)
        (tmp_path / "labels" / "train" / f"{k}.txt").write_text("0 0.5 0.5 0.25 0.25\n")
    yolo = trdata.YoloDetection(tmp_path, split="train", classes=["a"])
    _jpeg(tmp_path / "images" / "train" / "3.jpg", 3, 48, 64)  # replaced by a portrait
    with trdata.Loader(yolo, batch_size=4, transforms=[trdata.Resize((32, 32))]) as loader:
        with pytest.raises(trdata.DecodeError) as e:
            next(iter(loader))
    assert e.value.kind == "Target" and e.value.index == 3 and "48x64" in str(e.value)


def _voc(root: Path, n: int) -> trdata.SegmentationFolder:
    for k in range(n):
        _jpeg(root / "img" / f"{k}.jpg", k, 40, 30)
        m = np.full((30, 40), k % 21, np.uint8)
        m[:, :20] = 255
        (root / "map").mkdir(exist_ok=True)
        Image.fromarray(m, mode="L").save(root / "map" / f"{k}.png")
    return trdata.SegmentationFolder(root / "img", root / "map")


@pytest.mark.parametrize("damage", ["resized", "garbage", "deleted", "fifo"])
def test_a_label_map_that_broke_after_the_source_was_made_follows_on_error(
    tmp_path: Path, damage: str
) -> None:
    seg = _voc(tmp_path, 8)
    bad = tmp_path / "map" / "5.png"
    if damage == "resized":
        Image.fromarray(np.zeros((31, 40), np.uint8), mode="L").save(bad)
    elif damage == "garbage":
        bad.write_bytes(bad.read_bytes()[:40] + b"\x00" * 64)
    elif damage == "deleted":
        bad.unlink()
    else:  # a FIFO where the map was: refused by the worker's open, never a hang
        bad.unlink()
        os.mkfifo(bad)
    crop = [trdata.CenterCrop(24)]
    with trdata.Loader(seg, batch_size=2, transforms=crop, workers=2) as loader:
        it = iter(loader)
        got = [next(it), next(it)]
        with pytest.raises(trdata.DecodeError) as e:
            next(it)
        assert e.value.kind == "Target" and e.value.index == 5 and "5.png" in str(e.value)
        got += list(it)
    assert _rows(got) == [0, 1, 2, 3, 6, 7]
    with trdata.Loader(seg, batch_size=2, transforms=crop, workers=2, on_error="skip") as loader:
        for epoch in range(2):  # known bad after the first epoch: replaced without being read again
            loader.set_epoch(epoch)
            batches = list(loader)
            rows = _rows(batches)
            assert len(rows) == 8 and 5 not in rows
            for b in batches:
                for i, t in zip(b.indices, b.targets):
                    assert t["mask"].shape == (24, 24)
                    assert set(np.unique(t["mask"]).tolist()) == {int(i) % 21, 255}
        assert loader.stats()["errors_skipped"] == 2  # once per epoch


def test_label_maps_are_read_by_the_workers_not_the_training_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readers: list[int] = []
    read = trdata.SegmentationFolder.label_map

    def counted(self: trdata.SegmentationFolder, i: int) -> np.ndarray:
        readers.append(threading.get_ident())
        return read(self, i)

    monkeypatch.setattr(trdata.SegmentationFolder, "label_map", counted)
    seg = _voc(tmp_path, 12)
    with trdata.Loader(seg, batch_size=4, transforms=[trdata.CenterCrop(24)], workers=2) as loader:
        batches = list(loader)
    assert _rows(batches) == list(range(12))
    # each map read once, each by a worker (a thread Python did not start), none by the training thread
    assert len(readers) == 12 and threading.get_ident() not in readers
    assert not {t.ident for t in threading.enumerate()} & set(readers)


def test_the_iterator_goes_on_after_a_raised_decode_error(tmp_path: Path) -> None:
    for k in range(10):
        _jpeg(tmp_path / "a" / f"{k}.jpg", k, 32, 32)
    (tmp_path / "a" / "3.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a JPEG")
    folder = trdata.ImageFolder(tmp_path)
    for transform in (None, lambda b, generator: b):
        with trdata.Loader(
            folder, batch_size=3, transforms=[trdata.CenterCrop(16)], batch_transform=transform
        ) as loader:
            it = iter(loader)
            first = next(it)
            with pytest.raises(trdata.DecodeError) as e:
                next(it)
            assert e.value.index == 3 and e.value.kind == "Corrupt"
            assert loader.state_dict()["batches"] == 2  # the lost step counts as delivered
            rest = list(it)
            assert _rows([first, *rest]) == [0, 1, 2, 6, 7, 8, 9]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class _Captioned:
    """A map-style dataset returning extras (kept per read for the batch, like a map's targets)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[str, int, dict[str, Any]]:
        return str(self.paths[i]), i % 3, {"caption": f"image {i} " * 20, "box": np.full(64, i, np.float32)}


def test_fifty_epochs_over_python_sources_keep_nothing_per_read(tmp_path: Path) -> None:
    """What the workers keep per read (extras, label maps) is taken by its batch: after 50 epochs (with a map that
    fails every epoch under skip, and a raised error that loses a step) nothing piles up, and memory is flat."""
    seg = _voc(tmp_path / "voc", 16)
    (tmp_path / "voc" / "map" / "9.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    ds = trdata.DatasetSource(_Captioned(sorted((tmp_path / "voc" / "img").iterdir())))
    crop = [trdata.CenterCrop(24)]
    with (
        trdata.Loader(seg, batch_size=4, transforms=crop, workers=2, on_error="skip") as skipping,
        trdata.Loader(seg, batch_size=4, transforms=crop, workers=2) as raising,
        trdata.Loader(ds, batch_size=4, transforms=crop, workers=2) as python,
    ):
        rss: list[int] = []
        for epoch in range(50):
            for loader in (skipping, raising, python):
                loader.set_epoch(epoch)
            assert len(_rows(list(skipping))) == 16
            it, got = iter(raising), []
            while True:
                try:
                    got.extend(_rows([next(it)]))
                except trdata.DecodeError:
                    continue
                except StopIteration:
                    break
            assert len(got) == 12  # the step holding sample 9 is lost, every epoch
            captions = [c for b in python for c in b.extras["caption"]]
            assert len(captions) == 16
            assert not ds._read_extras
            rss.append(_rss_bytes())
    assert rss[-1] - rss[4] < 32 * 2**20, [r // 2**20 for r in rss]


@pytest.mark.parametrize("mosaic", [False, True])
def test_a_row_that_fails_after_its_targets_were_read_is_replaced_with_its_own_targets(
    tmp_path: Path, mosaic: bool
) -> None:
    """A worker reads a row's label map before its image: when the image (or another part of its Mosaic) then
    fails, the replacement row carries the replacement's map, never the failed sample's (the targets travel in
    the row, beside its pixels)."""
    seg = _voc(tmp_path, 10)
    (tmp_path / "img" / "4.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a JPEG")  # fails after its map was read
    _jpeg(tmp_path / "img" / "7.jpg", 7, 60, 50)  # not the declared size any more
    tf = [trdata.Mosaic(24)] if mosaic else [trdata.CenterCrop(24)]
    with trdata.Loader(seg, batch_size=3, transforms=tf, workers=2, on_error="skip", seed=2) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            batches = list(loader)
            rows = _rows(batches)
            assert len(rows) == 10 and not {4, 7} & set(rows)
            for b in batches:
                ids = [t["image_id"] for t in b.targets]
                assert ids == b.indices.tolist(), (ids, b.indices)


def test_a_source_read_by_the_workers_is_freed_with_its_last_reference(tmp_path: Path) -> None:
    """The callables a source hands its native object hold it weakly: no cycle the collector cannot see through
    the native object keeps the source (its files, a full pack's data) alive."""
    import gc
    import weakref

    seg = _voc(tmp_path / "voc", 4)
    out = tmp_path / "seg.trd"
    trdata.pack(seg, out, progress=False)
    sources = [
        seg,
        trdata.Packed(out),
        trdata.DatasetSource(_Captioned(sorted((tmp_path / "voc" / "img").iterdir()))),
    ]
    for source in sources:
        with trdata.Loader(source, batch_size=2, transforms=[trdata.CenterCrop(24)]) as loader:
            assert len(_rows(list(loader))) == 4
    refs = [weakref.ref(s) for s in sources]
    del seg, sources, source, loader
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


def test_asking_the_loader_while_another_thread_cancels_an_epoch_never_deadlocks(tmp_path: Path) -> None:
    """The loader's lock is taken without the GIL: a thread cancelling an epoch waits for workers that need the GIL
    (label maps read in Python), while this thread asks for stats. In a subprocess, so a regression fails instead
    of hanging the suite."""
    import textwrap

    _voc(tmp_path, 16)
    script = tmp_path / "t.py"
    script.write_text(
        textwrap.dedent(f"""
        import time, trdata
        slow_map = trdata.SegmentationFolder.label_map
        def slow(self, i):
            time.sleep(0.5)
            return slow_map(self, i)
        trdata.SegmentationFolder.label_map = slow
        seg = trdata.SegmentationFolder({str(tmp_path / "img")!r}, {str(tmp_path / "map")!r})
        ld = trdata.Loader(seg, batch_size=2, transforms=[trdata.CenterCrop(24)], workers=2,
                           batch_transform=lambda b, g: b)
        it = iter(ld)
        next(it)
        time.sleep(0.2)
        it2 = iter(ld)  # the prefetch thread cancels the running epoch while workers read maps
        t0 = time.time()
        while time.time() - t0 < 3:
            ld.stats()
        ld.close()
        print("done", flush=True)
        """)
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-2000:]


# -------------------- hostile inputs and their regressions -------------------------------------------------


def test_skip_counts_each_bad_sample_once_and_always_replaces_it(tmp_path):
    """2 good files among 30 bad: with 16 random replacement draws alone about a third of the bad samples
    found no good replacement (and raised), and errors_skipped counted every failed draw."""
    good = write_jpegs(tmp_path / "good", 2)
    paths = []
    for i in range(32):
        if i in (5, 20):
            paths.append(good[0 if i == 5 else 1])
        else:
            bad = tmp_path / f"bad{i:02d}.jpg"
            bad.write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG body" * (i + 1))
            paths.append(str(bad))
    src = trdata.FileList(paths, list(range(32)))
    kw = dict(batch_size=8, transforms=[trdata.CenterCrop(16)], dtype="uint8", on_error="skip")
    with trdata.Loader(src, workers=2, reproducible=True, **kw) as loader:
        first = [(b.indices.copy(), b.images.copy()) for b in loader]
        assert loader.stats()["errors_skipped"] == 30
        second = [b.indices.copy() for b in loader]
        assert loader.stats()["errors_skipped"] == 60  # per epoch, per sample
    indices = np.concatenate([i for i, _ in first])
    assert sorted(set(indices.tolist())) == [5, 20], indices
    assert len(indices) == 32 and len(np.concatenate(second)) == 32
    # Deterministic for any worker count.
    with trdata.Loader(src, workers=1, reproducible=True, **kw) as loader:
        again = [b.indices.copy() for b in loader]
    assert np.array_equal(np.concatenate(again), indices)


def test_skip_raises_only_when_nothing_decodes(tmp_path):
    paths = []
    for i in range(6):
        p = tmp_path / f"bad{i}.jpg"
        p.write_bytes(b"garbage" * (i + 1))
        paths.append(str(p))
    src = trdata.FileList(paths, [0] * 6)
    with trdata.Loader(
        src, batch_size=2, workers=2, on_error="skip", transforms=[trdata.CenterCrop(8)]
    ) as loader:
        with pytest.raises(trdata.DecodeError) as exc:
            list(loader)
    assert "no other sample" in str(exc.value)
    assert exc.value.path in paths


def test_skip_does_not_reread_a_sample_known_bad(tmp_path):
    """Under on_error='skip' a file that failed is not read again in later epochs (failures are decided by the
    bytes, so it would fail again; a slow bad file must not cost every epoch). Observable: fixing the file
    later does not bring it back, and it is still counted as skipped in every epoch."""
    paths = write_jpegs(tmp_path, 6)
    bad = Path(paths[2])
    good_bytes = bad.read_bytes()
    bad.write_bytes(b"\xff\xd8\xff\xe0 broken")
    src = trdata.FileList(paths, list(range(6)))
    kw = dict(batch_size=6, workers=1, transforms=[trdata.CenterCrop(8)], dtype="uint8", on_error="skip")
    with trdata.Loader(src, **kw) as loader:
        (b0,) = list(loader)
        bad.write_bytes(good_bytes)
        (b1,) = list(loader)
        assert loader.stats()["errors_skipped"] == 2
    assert 2 not in b0.indices.tolist() and 2 not in b1.indices.tolist()


def test_skip_with_rare_late_good_files_replaces_every_bad_one(tmp_path: Path) -> None:
    """4,000 files of which only the last 3 decode: every bad sample is replaced by one of them, counted once,
    and the choice is the same for 1 and 2 workers (it depends on (seed, epoch, index) only)."""
    n, good = 4000, 3
    buf = io.BytesIO()
    Image.fromarray(photo(5, 24, 20)).save(buf, "JPEG", quality=90)
    paths = []
    for i in range(n):
        p = tmp_path / f"{i:05d}.jpg"
        p.write_bytes(buf.getvalue() if i >= n - good else b"not an image")
        paths.append(str(p))
    runs = []
    for workers in (1, 2):
        with trdata.Loader(
            trdata.FileList(paths),
            batch_size=100,
            workers=workers,
            transforms=[trdata.CenterCrop(16)],
            dtype="uint8",
            on_error="skip",
            reproducible=True,
            shuffle=False,
        ) as ld:
            indices = np.concatenate([b.indices for b in ld])
            assert ld.stats()["errors_skipped"] == n - good
        assert len(indices) == n and set(indices.tolist()) <= set(range(n - good, n))
        runs.append(indices)
    np.testing.assert_array_equal(runs[0], runs[1])
