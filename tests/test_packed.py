"""trdata.pack / trdata.Packed: one file holding a whole source.

The reference is the source itself: without re-encoding, a reproducible loader over the packed file (full or
partial) must give, for every dataset index, exactly the pixels, label and class a loader over the source gives.
Partial mode changes only the order (blocks, then windows), never what a sample becomes, and still delivers
every sample once per epoch, across worker counts, ranks and a resume. Hostile files (flipped bytes, truncation,
foreign files) are typed errors naming the file (and the record)."""

from __future__ import annotations

import io
import json
import os
import stat
import struct
import subprocess
import sys
import tarfile
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import crc32c, jpeg, photo, photo_jpeg, png
from PIL import Image
from trdata.sources.packed import inspect

RRC_FLIP = [trdata.RandomResizedCrop(24, scale=(0.3, 1.0)), trdata.RandomHorizontalFlip()]
KW = dict(
    batch_size=7,
    dtype="uint8",
    layout="NHWC",
    seed=11,
    reproducible=True,
    last_batch="partial",
    transforms=RRC_FLIP,
)
# small blocks, so a few dozen images span many blocks and windows
SMALL_BLOCKS = 16 << 10


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder of 3 classes: JPEGs of several sizes and chroma modes, a progressive one, PNGs, a gray one."""
    root = tmp_path_factory.mktemp("packsrc")
    for i in range(45):
        cls = root / f"class_{i % 3}"
        cls.mkdir(exist_ok=True)
        a = photo(i, 40 + (i * 7) % 50, 30 + (i * 11) % 40)
        if i % 9 == 4:
            (cls / f"{i:03d}.png").write_bytes(png(a))
        elif i % 9 == 5:
            (cls / f"{i:03d}.jpg").write_bytes(jpeg(a, progressive=True))
        elif i % 9 == 6:
            (cls / f"{i:03d}.jpg").write_bytes(jpeg(a[..., 0]))
        else:
            (cls / f"{i:03d}.jpg").write_bytes(jpeg(a, subsampling=i % 3))
    return root


@pytest.fixture(scope="module")
def packed(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("packed") / "set.trd"
    src = trdata.ImageFolder(folder)
    report = trdata.pack(src, dst, progress=False)
    assert report["records"] == len(src) == 45
    assert report["bytes_in"] == sum(os.path.getsize(p) for p in src.paths)
    return dst


def by_index(source: trdata.Source, workers: int = 2, **kw: object) -> dict[int, tuple[np.ndarray, int]]:
    """index → (image, label) over one reproducible epoch, checking every sample comes exactly once."""
    out: dict[int, tuple[np.ndarray, int]] = {}
    with trdata.Loader(source, workers=workers, **{**KW, **kw}) as ld:
        for b in ld:
            for img, label, idx in zip(b.images, b.labels, b.indices):
                assert int(idx) not in out, f"sample {idx} delivered twice"
                out[int(idx)] = (img.copy(), int(label))
    assert sorted(out) == list(range(len(source)))
    return out


def order(source: trdata.Source, **kw: object) -> list[int]:
    with trdata.Loader(source, workers=2, **{**KW, **kw}) as ld:
        return [int(i) for b in ld for i in b.indices]


def test_full_packed_file_gives_the_sources_batches(folder: Path, packed: Path) -> None:
    src = trdata.ImageFolder(folder)
    full = trdata.Packed(packed)
    assert (len(full), full.labels, full.classes) == (len(src), src.labels, src.classes)
    assert full.class_to_idx == src.class_to_idx
    for shuffle in (False, True):
        with (
            trdata.Loader(src, workers=2, shuffle=shuffle, **KW) as a,
            trdata.Loader(full, workers=3, shuffle=shuffle, **KW) as b,
        ):
            xs, ys = list(a), list(b)
            assert len(xs) == len(ys)
            for x, y in zip(xs, ys):
                assert np.array_equal(x.indices, y.indices) and np.array_equal(x.labels, y.labels)
                assert np.array_equal(x.images, y.images)


def test_partial_mode_changes_only_the_order(folder: Path, tmp_path: Path) -> None:
    dst = tmp_path / "small-blocks.trd"
    trdata.pack(trdata.ImageFolder(folder), dst, progress=False, block_bytes=SMALL_BLOCKS)
    info = trdata.sources.packed.inspect(dst)
    assert info["blocks"] >= 8, info["blocks"]
    ref = by_index(trdata.ImageFolder(folder), shuffle=True)
    part = trdata.Packed(dst, "partial", window_blocks=2, prefetch_blocks=2)
    for workers in (1, 4):
        got = by_index(part, workers=workers, shuffle=True)
        assert all(np.array_equal(got[i][0], ref[i][0]) and got[i][1] == ref[i][1] for i in ref)
    # the order is blocks permuted, then shuffled within windows: not the file order, not the full shuffle,
    # the same for every worker count and seed-determined
    o = order(part, shuffle=True)
    assert o == order(part, shuffle=True)
    assert o != list(range(len(part))) and o != order(trdata.Packed(dst), shuffle=True)
    assert order(part, shuffle=False) == list(range(len(part)))
    assert o != order(part, shuffle=True, seed=12)


def test_partial_order_stays_within_windows_of_blocks(folder: Path, tmp_path: Path) -> None:
    """Consecutive samples of a partial epoch come from a window of `window_blocks` blocks: the blocks of the
    first batch's samples are few, where a full shuffle would draw from nearly all."""
    dst = tmp_path / "w.trd"
    trdata.pack(trdata.ImageFolder(folder), dst, progress=False, block_bytes=SMALL_BLOCKS)
    info = trdata.sources.packed.inspect(dst)
    lengths = np.asarray(info["lengths"])
    # record → block, from the block sizes the index reports: records are laid out in order
    block_of = _blocks_of(info)
    o = order(trdata.Packed(dst, "partial", window_blocks=1), shuffle=True, batch_size=1, last_batch="drop")
    runs = [block_of[i] for i in o]
    # window of one block: each block's records come as one contiguous run
    changes = sum(1 for a, b in zip(runs, runs[1:]) if a != b)
    assert changes == len(set(runs)) - 1 == info["blocks"] - 1
    assert len(lengths) == len(o)


def _blocks_of(info: dict) -> list[int]:
    firsts = list(info["block_starts"])
    out, b = [], -1
    for i in range(int(info["records"])):
        while b + 1 < len(firsts) and firsts[b + 1] <= i:
            b += 1
        out.append(b)
    return out


def test_partial_mode_is_sharded_exactly_once_and_resumes(folder: Path, tmp_path: Path) -> None:
    dst = tmp_path / "r.trd"
    trdata.pack(trdata.ImageFolder(folder), dst, progress=False, block_bytes=SMALL_BLOCKS)
    part = trdata.Packed(dst, "partial", window_blocks=3)
    seen: list[int] = []
    for rank in range(3):
        with trdata.Loader(part, workers=2, shuffle=True, rank=rank, world_size=3, **KW) as ld:
            seen += [int(i) for b in ld for i in b.indices[: b.valid]]
    assert sorted(seen) == list(range(len(part)))
    whole = [b.images.copy() for b in trdata.Loader(part, workers=2, shuffle=True, **KW)]
    with trdata.Loader(part, workers=2, shuffle=True, **KW) as ld:
        it = iter(ld)
        first = [next(it).images.copy() for _ in range(3)]
        state = ld.state_dict()
    with trdata.Loader(trdata.Packed(dst, "partial", window_blocks=3), workers=3, shuffle=True, **KW) as ld:
        ld.load_state_dict(state)
        rest = [b.images.copy() for b in ld]
    assert len(first + rest) == len(whole)
    assert all(np.array_equal(a, b) for a, b in zip(first + rest, whole))


def test_in_memory_and_shard_sources_pack_too(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (20, 12, 10, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (20, 28, 28), dtype=np.uint8)
    for name, src in [
        ("rgb", trdata.Arrays(pixels, list(range(20)), classes=[f"c{i}" for i in range(20)])),
        ("gray", trdata.Arrays(gray, [i % 10 for i in range(20)])),
        ("blobs", trdata.Bytes([png(p) for p in pixels], [i % 4 for i in range(20)])),
    ]:
        dst = tmp_path / f"{name}.trd"
        trdata.pack(src, dst, progress=False)
        got = trdata.Packed(dst)
        assert got.labels == src.labels and got.classes == src.classes
        kw = dict(transforms=[trdata.RandomResizedCrop(8), trdata.RandomHorizontalFlip()], shuffle=True)
        a, b = by_index(src, **kw), by_index(got, **kw)
        assert all(np.array_equal(a[i][0], b[i][0]) and a[i][1] == b[i][1] for i in a), name
        assert set(trdata.sources.packed.inspect(dst)["formats"]) == ({"png"} if name == "blobs" else {"raw"})
    # webdataset shards
    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w") as tar:
        for i in range(10):
            for ext, data in [("jpg", jpeg(pixels[i])), ("cls", str(i % 3).encode())]:
                info = tarfile.TarInfo(f"k{i:03d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    wds = trdata.WebDataset([shard])
    trdata.pack(wds, tmp_path / "w.trd", progress=False)
    got = trdata.Packed(tmp_path / "w.trd")
    kw = dict(transforms=[trdata.CenterCrop(8)], shuffle=False)
    assert got.labels == wds.labels
    a, b = by_index(wds, **kw), by_index(got, **kw)
    assert all(np.array_equal(a[i][0], b[i][0]) for i in a)


def test_index_describes_every_record(folder: Path, packed: Path) -> None:
    src = trdata.ImageFolder(folder)
    info = trdata.sources.packed.inspect(packed)
    assert info["records"] == len(src) and info["version"] >= 1 and info["classes"] == src.classes
    for i, path in enumerate(src.paths):
        with Image.open(path) as im:
            assert (int(info["widths"][i]), int(info["heights"][i])) == im.size
            assert int(info["lengths"][i]) == os.path.getsize(path)
            fmt = im.format.lower()
            assert info["formats"][i] == fmt
            if fmt == "jpeg":
                assert bool(info["progressive"][i]) == bool(
                    im.info.get("progressive") or im.info.get("progression")
                )
                expected = {1: "gray"}.get(len(im.getbands()), None)
                if expected:
                    assert info["subsampling"][i] == expected
    assert list(info["labels"]) == src.labels
    assert info["file_bytes"] == os.path.getsize(packed)


def test_reencode_resizes_and_stays_close_to_pillow(folder: Path, tmp_path: Path) -> None:
    src = trdata.ImageFolder(folder)
    dst = tmp_path / "small.trd"
    report = trdata.pack(src, dst, reencode=trdata.Reencode(short_side=24, quality=90), progress=False)
    assert report["records"] == len(src)
    info = trdata.sources.packed.inspect(dst)
    assert info["options"]["short_side"] == 24 and info["options"]["quality"] == 90
    assert set(info["formats"]) == {"jpeg"} and not any(info["progressive"])
    refs = []
    for i, path in enumerate(src.paths):
        with Image.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            # torchvision's Resize(24) rule: the short side becomes 24, the long one int(24 * long / short)
            if min(w, h) <= 24:
                size = (w, h)
            elif w <= h:
                size = (24, int(24 * h / w))
            else:
                size = (int(24 * w / h), 24)
            assert (int(info["widths"][i]), int(info["heights"][i])) == size
            assert info["subsampling"][i] == "420"
            refs.append(np.asarray(im.resize(size, Image.BILINEAR, reducing_gap=None), np.float64))
    # the decoded re-encoded image against Pillow's antialiased resize of the original
    out = by_index(trdata.Packed(dst), transforms=[trdata.CenterCrop(24)], shuffle=False)
    for i, ref in enumerate(refs):
        h, w = ref.shape[:2]
        top, left = (h - 24) // 2, (w - 24) // 2
        diff = out[i][0].astype(np.float64) - ref[top : top + 24, left : left + 24]
        psnr = 10 * np.log10(255**2 / max(np.mean(diff**2), 1e-9))
        assert psnr > 28, (i, psnr)
    assert trdata.sources.packed.verify(dst, progress=False) == []


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"reencode": {"short_side": 0}}, "short_side"),
        ({"reencode": {"max_side": 70_000}}, "max_side"),
        ({"reencode": {"short_side": 10, "max_side": 20}}, "max_side"),
        ({"reencode": {"quality": 101}}, "quality"),
        ({"reencode": {"size": 3}}, "reencode"),
        ({"reencode": "small"}, "reencode"),
        ({"block_bytes": 0}, "block_bytes"),
        ({"workers": 0}, "workers"),
    ],
)
def test_bad_pack_options_are_config_errors_naming_them(
    folder: Path, tmp_path: Path, kw: dict, param: str
) -> None:
    with pytest.raises(trdata.ConfigError) as e:
        trdata.pack(trdata.ImageFolder(folder), tmp_path / "x.trd", progress=False, **kw)
    assert e.value.parameter == param
    assert not os.listdir(tmp_path)


def test_a_failed_pack_leaves_no_file(folder: Path, tmp_path: Path) -> None:
    paths = [str(p) for p in sorted(folder.rglob("*.jpg"))[:10]]
    src = trdata.FileList(paths + [str(tmp_path / "missing.jpg")], list(range(11)))
    dst = tmp_path / "out" / "x.trd"
    dst.parent.mkdir()
    with pytest.raises(trdata.TrdataError, match="missing.jpg"):
        trdata.pack(src, dst, progress=False)
    assert os.listdir(dst.parent) == []
    # re-encoding: an undecodable file fails the pack the same way
    (tmp_path / "junk.jpg").write_bytes(b"\xff\xd8\xff garbage")
    src = trdata.FileList(paths + [str(tmp_path / "junk.jpg")], list(range(11)))
    with pytest.raises(trdata.DecodeError, match="junk.jpg"):
        trdata.pack(src, dst, reencode={"max_side": 32}, progress=False)
    assert os.listdir(dst.parent) == []


def test_a_flipped_record_byte_is_a_decode_error_naming_the_record(packed: Path, tmp_path: Path) -> None:
    info = trdata.sources.packed.inspect(packed)
    data = bytearray(packed.read_bytes())
    victim = 17
    offset = int(info["offsets"][victim]) + int(info["lengths"][victim]) // 2
    data[offset] ^= 0x10
    bad = tmp_path / "flipped.trd"
    bad.write_bytes(bytes(data))
    for mode in ("full", "partial"):
        src = trdata.Packed(bad, mode)  # the header and index are intact: opening works
        with pytest.raises(trdata.DecodeError, match="flipped.trd") as e:
            list(trdata.Loader(src, workers=2, shuffle=False, **KW))
        assert str(victim) in str(e.value) and "CRC" in str(e.value).upper()
        with trdata.Loader(src, workers=2, shuffle=False, on_error="skip", **KW) as ld:
            n = sum(b.valid for b in ld)
            assert n == len(src) and ld.stats()["errors_skipped"] == 1
        # one worker: the records decoded right after the damaged one keep their exact pixels
        clean = by_index(trdata.Packed(packed, mode), workers=1, shuffle=False)
        with trdata.Loader(src, workers=1, shuffle=False, on_error="skip", **KW) as ld:
            rows = [(int(i), img.copy()) for b in ld for i, img in zip(b.indices, b.images)]
        after = rows[victim + 1 :]  # in file order (the victim's row holds its replacement)
        assert [i for i, _ in after] == list(range(victim + 1, len(src)))
        assert all(np.array_equal(img, clean[i][0]) for i, img in after)
    assert [r for r, _ in trdata.sources.packed.verify(bad, progress=False)] == [victim]
    assert trdata.sources.packed.verify(packed, progress=False) == []


def test_damaged_truncated_and_foreign_files_are_refused_at_open(
    packed: Path, folder: Path, tmp_path: Path
) -> None:
    data = packed.read_bytes()
    info = trdata.sources.packed.inspect(packed)
    cases = {
        "empty": b"",
        "truncated-header": data[:100],
        "truncated-index": data[: len(data) - 10],
        "half": data[: len(data) // 2],
        "jpeg": next(folder.rglob("*.jpg")).read_bytes(),
        "text": b"hello world\n" * 1000,
        "zeros": bytes(len(data)),
    }
    # a flipped byte in the header, in the index
    for name, at in [("header-flip", 12), ("index-flip", int(info["index_offset"]) + 3)]:
        d = bytearray(data)
        d[at] ^= 0x01
        cases[name] = bytes(d)
    for name, content in cases.items():
        p = tmp_path / f"{name}.trd"
        p.write_bytes(content)
        for mode in ("full", "partial"):
            with pytest.raises(trdata.TrdataError, match=f"{name}.trd"):
                trdata.Packed(p, mode)
    with pytest.raises(trdata.TrdataError, match="nope.trd"):
        trdata.Packed(tmp_path / "nope.trd")


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"mode": "lazy"}, "mode"),
        ({"mode": "partial", "window_blocks": 0}, "window_blocks"),
        ({"mode": "partial", "cache_bytes": 0}, "cache_bytes"),
        ({"mode": "partial", "cache_bytes": 4096}, "cache_bytes"),
        ({"mode": "partial", "prefetch_blocks": -1}, "prefetch_blocks"),
        ({"mode": "partial", "prefetch_blocks": 1025}, "prefetch_blocks"),
    ],
)
def test_bad_packed_options_are_config_errors(packed: Path, kw: dict, param: str) -> None:
    with pytest.raises(trdata.ConfigError) as e:
        trdata.Packed(packed, **kw)
    assert e.value.parameter == param


def test_cli_pack_verify_inspect(folder: Path, tmp_path: Path) -> None:
    dst = tmp_path / "cli.trd"
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "trdata.cli", *a], capture_output=True, text=True, timeout=300
    )
    r = run("pack", str(folder), str(dst), "--max-side", "40", "--quality", "85", "-q")
    assert r.returncode == 0, r.stderr
    assert "45 records" in r.stdout and dst.exists()
    r = run("verify", str(dst), "-q")
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
    r = run("inspect", str(dst))
    assert r.returncode == 0 and "records 45" in r.stdout and "class_2" in r.stdout, r.stdout + r.stderr
    r = run("inspect", str(dst), "--json")
    assert r.returncode == 0 and '"records": 45' in r.stdout
    d = bytearray(dst.read_bytes())
    info = trdata.sources.packed.inspect(dst)
    d[int(info["offsets"][3]) + 5] ^= 0xFF
    dst.write_bytes(bytes(d))
    r = run("verify", str(dst), "-q")
    assert r.returncode == 1 and "record 3" in r.stdout
    r = run("inspect", str(tmp_path / "none.trd"))
    assert r.returncode == 2 and "none.trd" in r.stderr


def test_a_checkpoint_does_not_continue_over_another_block_order(folder: Path, tmp_path: Path) -> None:
    dst = tmp_path / "o.trd"
    trdata.pack(trdata.ImageFolder(folder), dst, progress=False, block_bytes=SMALL_BLOCKS)
    with trdata.Loader(trdata.Packed(dst, "partial", window_blocks=2), workers=2, shuffle=True, **KW) as ld:
        it = iter(ld)
        next(it)
        state = ld.state_dict()
    assert state["fingerprint"]["order"].endswith("window=2")
    for other in (trdata.Packed(dst, "partial", window_blocks=3), trdata.Packed(dst, "full")):
        with trdata.Loader(other, workers=2, shuffle=True, **KW) as ld:
            with pytest.raises(trdata.ConfigError, match="order") as e:
                ld.load_state_dict(state)
            assert e.value.parameter == "order"
    # a checkpoint of an older trdata (no "order") is the sample order
    del state["fingerprint"]["order"]
    with trdata.Loader(trdata.Packed(dst, "full"), workers=2, shuffle=True, **KW) as ld:
        ld.load_state_dict(state)
        assert sum(1 for _ in ld) > 0


# -------------------- hostile inputs and their regressions -------------------------------------------------


def files(root: Path, n: int) -> list[str]:
    paths = []
    for i in range(n):
        p = root / f"{i:04d}.jpg"
        p.write_bytes(photo_jpeg(i))
        paths.append(str(p))
    return paths


def param(exc: pytest.ExceptionInfo[trdata.ConfigError]) -> str:
    return exc.value.parameter


@pytest.mark.parametrize(
    "labels",
    [
        [0.25, 1.5, 2.0, 3.75],  # regression values
        [[0.9, 0.1], [0.2, 0.8], [0.5, 0.5], [1.0, 0.0]],  # soft labels
        np.array([[1, 0, 1], [0, 1, 1], [0, 0, 1], [1, 1, 0]], dtype=np.float32),  # multi-hot
    ],
    ids=["regression", "soft", "multi-hot"],
)
def test_a_file_list_with_float_targets_is_refused_not_packed_as_class_0(
    tmp_path: Path, labels: object
) -> None:
    src = trdata.FileList(files(tmp_path, 4), labels)
    assert src.targets.dtype == np.float32  # the source holds them
    dst = tmp_path / "out.trdpack"
    with pytest.raises(trdata.ConfigError, match="float targets") as e:
        trdata.pack(src, dst, progress=False)
    assert param(e) == "labels"
    assert not dst.exists()


def test_a_webdataset_with_json_soft_labels_is_refused(tmp_path: Path) -> None:
    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w") as tar:
        for i in range(3):
            for name, data in ((f"k{i}.jpg", photo_jpeg(i)), (f"k{i}.json", json.dumps([0.7, 0.3]).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    src = trdata.WebDataset([str(shard)], target_key="json", cache_dir=False)
    assert src.targets.shape == (3, 2)
    with pytest.raises(trdata.ConfigError, match="float targets") as e:
        trdata.pack(src, tmp_path / "o.trdpack", progress=False)
    assert param(e) == "labels"


def test_integer_targets_and_classes_still_survive_a_pack(tmp_path: Path) -> None:
    src = trdata.FileList(files(tmp_path, 6), [2, 0, 1, 2, 1, 0], classes=["a", "b", "c"])
    trdata.pack(src, tmp_path / "o.trdpack", progress=False)
    back = trdata.Packed(tmp_path / "o.trdpack")
    assert back.labels == [2, 0, 1, 2, 1, 0]
    assert back.classes == ["a", "b", "c"]
    assert back.class_to_idx == {"a": 0, "b": 1, "c": 2}


def test_destinations_that_are_not_regular_files_are_refused_before_any_work(tmp_path: Path) -> None:
    # The source's file does not exist: any work would be a DecodeError, so a ConfigError proves nothing ran.
    src = trdata.FileList([str(tmp_path / "missing.jpg")])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir").mkdir()
    cases = {"": "is empty", "/": "names a directory", str(tmp_path / "dir"): "is a directory"}
    cases[str(fifo)] = "is a FIFO"
    cases[str(tmp_path / "none" / "o.trdpack")] = "cannot be used"
    for dst, why in cases.items():
        with pytest.raises(trdata.ConfigError, match=why) as e:
            trdata.pack(src, dst, progress=False)
        assert param(e) == "path", dst
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced"
    assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]


def test_the_cli_refuses_a_device_node_and_leaves_it_alone(tmp_path: Path) -> None:
    # `trdata pack SRC /dev/null` as root replaced the system's /dev/null with a regular file. A device node of
    # the test's own stands in for it where the test may make one (root); /dev/null itself only as a non-root
    # user could not replace it anyway.
    root = tmp_path / "src"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.jpg").write_bytes(photo_jpeg(1))
    dev = tmp_path / "null"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    r = subprocess.run(
        [sys.executable, "-m", "trdata.cli", "pack", str(root), str(dev), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0
    assert "character device" in r.stderr, r.stderr
    assert stat.S_ISCHR(os.stat(dev).st_mode), "the device node was replaced by a regular file"


def _expected(tmp_path: Path, srcs: list[trdata.FileList]) -> list[bytes]:
    out = []
    for k, s in enumerate(srcs):
        p = tmp_path / f"want{k}.trdpack"
        trdata.pack(s, p, progress=False, workers=2)
        out.append(p.read_bytes())
    return out


def _pack_into(results: list[object], k: int, src: trdata.Source, dst: Path) -> None:
    try:
        results[k] = trdata.pack(src, dst, progress=False, workers=2)
    except Exception as e:  # noqa: BLE001 - recorded and asserted by the caller
        results[k] = e


def test_two_threads_packing_to_one_destination_each_publish_their_own_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    srcs = [trdata.FileList(files(a, 60)), trdata.FileList(files(b, 45), [1] * 45)]
    want = _expected(tmp_path, srcs)
    dst = tmp_path / "shared.trdpack"
    for _ in range(5):
        results: list[object] = [None, None]
        threads = [threading.Thread(target=_pack_into, args=(results, k, srcs[k], dst)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert [r["records"] for r in results] == [60, 45], results  # type: ignore[index]
        assert dst.read_bytes() in want
        assert len(trdata.Packed(dst)) in (60, 45)
        assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]


def test_two_processes_packing_to_one_destination_each_publish_their_own_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    fa, fb = files(a, 80), files(b, 50)
    want = _expected(tmp_path, [trdata.FileList(fa), trdata.FileList(fb)])
    dst = tmp_path / "shared.trdpack"
    script = (
        "import sys, json, trdata\n"
        "paths = json.loads(sys.argv[1])\n"
        "r = trdata.pack(trdata.FileList(paths), sys.argv[2], progress=False, workers=1)\n"
        "print(r['records'])\n"
    )
    for _ in range(3):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, json.dumps(f), str(dst)], stdout=subprocess.PIPE, text=True
            )
            for f in (fa, fb)
        ]
        outs = [p.communicate(timeout=120)[0].strip() for p in procs]
        assert [p.returncode for p in procs] == [0, 0]
        assert outs == ["80", "50"]
        assert dst.read_bytes() in want
        assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]


def test_bools_are_refused_where_pack_takes_ints(tmp_path: Path) -> None:
    src = trdata.FileList(files(tmp_path, 2))
    for kw, name in (
        ({"workers": True}, "workers"),
        ({"block_bytes": True}, "block_bytes"),
        ({"reencode": trdata.Reencode(short_side=True)}, "short_side"),
        ({"reencode": {"max_side": False}}, "max_side"),
        ({"reencode": trdata.Reencode(short_side=64, quality=True)}, "quality"),
    ):
        with pytest.raises(trdata.ConfigError, match="must be an int") as e:
            trdata.pack(src, tmp_path / "o.trdpack", progress=False, **kw)
        assert param(e) == name
    assert not (tmp_path / "o.trdpack").exists()


def reseal(buf: bytearray) -> None:
    """Recompute the section and header CRCs after an edit, as a forger would (layout: src/source/packed.rs)."""
    (index_off, index_bytes, blocks_off, blocks_bytes, meta_off, meta_bytes) = struct.unpack_from(
        "<6Q", buf, 56
    )
    struct.pack_into("<I", buf, 112, crc32c(bytes(buf[index_off : index_off + index_bytes])))
    struct.pack_into("<I", buf, 116, crc32c(bytes(buf[blocks_off : blocks_off + blocks_bytes])))
    struct.pack_into("<I", buf, 120, crc32c(bytes(buf[meta_off : meta_off + meta_bytes])))
    struct.pack_into("<I", buf, 4092, crc32c(bytes(buf[:4092])))


def test_a_packed_file_with_repeated_class_names_or_labels_outside_them_is_refused(tmp_path: Path) -> None:
    src = trdata.FileList(files(tmp_path, 3), [0, 1, 1], classes=["cat", "dog"])
    good = tmp_path / "good.trdpack"
    trdata.pack(src, good, progress=False)
    trdata.Packed(good)  # sound
    raw = bytearray(good.read_bytes())
    meta_off, meta_bytes = struct.unpack_from("<2Q", raw, 88)
    # Forged: the second class renamed to the first (same length), CRCs resealed.
    dup = bytearray(raw)
    meta = bytes(dup[meta_off : meta_off + meta_bytes]).replace(b'"dog"', b'"cat"')
    dup[meta_off : meta_off + meta_bytes] = meta
    reseal(dup)
    (tmp_path / "dup.trdpack").write_bytes(dup)
    with pytest.raises(trdata.SourceError, match=r"dup\.trdpack.*class name .*cat.* twice"):
        trdata.Packed(tmp_path / "dup.trdpack")
    # Forged: record 2's label set to 7 with two classes.
    far = bytearray(raw)
    index_off = struct.unpack_from("<Q", far, 56)[0]
    struct.pack_into("<q", far, index_off + 2 * 32 + 16, 7)
    reseal(far)
    (tmp_path / "far.trdpack").write_bytes(far)
    for mode in ("full", "partial"):
        with pytest.raises(
            trdata.SourceError, match=r"far\.trdpack.*label 7 at record 2, outside the 2 classes"
        ):
            trdata.Packed(tmp_path / "far.trdpack", mode)
    with pytest.raises(trdata.SourceError, match="outside the 2 classes"):
        inspect(tmp_path / "far.trdpack")


def test_ctrl_c_during_a_pack_leaves_the_previous_file_and_no_temporary(tmp_path: Path) -> None:
    """A real SIGINT to a process packing (sent from inside its first progress callback, while the slow source
    still has ~4 s of reads to go, so at a known point whatever the machine's speed): the pack raises
    KeyboardInterrupt, dst keeps its previous contents and no ``<dst>.tmp.*`` is left."""
    dst = tmp_path / "out.trdpack"
    dst.write_bytes(b"the previous file")
    code = textwrap.dedent(
        f"""
        import os, signal, time, numpy as np, trdata
        signal.signal(signal.SIGINT, signal.default_int_handler)
        rng = np.random.default_rng(0)
        blobs = [rng.bytes(20_000) for _ in range(2000)]

        class Slow:  # 2 ms a read: the pack takes ~4 s, so it is still running at the first progress tick
            def __len__(self):
                return len(blobs)

            def __getitem__(self, i):
                time.sleep(0.002)
                return blobs[i], i

        src = trdata.DatasetSource(Slow())
        sent = []
        def progress(done, total):
            if not sent:
                sent.append(done)
                os.kill(os.getpid(), signal.SIGINT)
        from trdata import _core
        try:
            _core.pack(src._native_source(), {str(dst)!r}, None, None, None, 2, [], progress, None)
            print("finished")
        except KeyboardInterrupt:
            print("interrupted", sent)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("interrupted"), out.stdout
    assert dst.read_bytes() == b"the previous file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.trdpack"]


@pytest.mark.parametrize("name_bytes", [224, 230, 255])
def test_pack_to_a_destination_name_near_name_max(tmp_path: Path, name_bytes: int) -> None:
    """A 230-byte file name is valid (NAME_MAX 255), but ``<dst>.tmp.<pid>.<16 hex>`` passed NAME_MAX: the pack
    failed with "cannot create the temporary file beside it: File name too long". Now the temporary's name is
    cut to fit and the pack is written."""
    src = trdata.Bytes([bytes([i]) * 300 for i in range(4)], [0, 1, 2, 3])
    dst = tmp_path / ("p" * (name_bytes - 8) + ".trdpack")
    got = trdata.pack(src, dst, progress=False, workers=2)
    assert got["records"] == 4
    assert len(trdata.Packed(dst)) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [dst.name]
    with pytest.raises(trdata.ConfigError) as e:  # over NAME_MAX: refused before any work, naming path
        trdata.pack(src, tmp_path / ("p" * 256), progress=False)
    assert e.value.parameter == "path"


def test_a_tiny_png_claiming_65535x65535_is_a_decode_error_when_reencoding(tmp_path: Path) -> None:
    """``pack(reencode=Reencode(max_side=65535))`` over a ~100-byte PNG whose header claims 65535x65535: the
    re-encode buffer (12.9 GB) was allocated from the header before the decoder's pixel budget was checked, and
    the process aborted (SIGABRT, "memory allocation of 12884508675 bytes failed") under a 4 GiB address-space
    limit. Now a DecodeError naming the file, kind TooLarge."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = tmp_path / "huge.png"
    png.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 65535, 65535, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b"\0" * 100))
        + chunk(b"IEND", b"")
    )
    code = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        import trdata
        src = trdata.FileList([{str(png)!r}], [0])
        try:
            trdata.pack(src, {str(tmp_path / "h.trdpack")!r}, reencode=trdata.Reencode(max_side=65535),
                        progress=False, workers=1)
            print("packed")
        except trdata.DecodeError as e:
            print("DecodeError", e.kind, e.path)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.split() == ["DecodeError", "TooLarge", str(png)], out.stdout


def test_bytes_paths_pack_verify_inspect_and_open(tmp_path: Path) -> None:
    """``trdata.pack(src, b"/data/x.trdpack")`` was a bare TypeError from the binding ("'bytes' object is not an
    instance of 'str'"); bytes paths, non-UTF-8 names included, now work as str ones do (as cache_dir does)."""
    import io

    from PIL import Image

    def jpeg(i: int) -> bytes:
        buf = io.BytesIO()
        Image.new("RGB", (16, 12), (i * 40, 100, 200)).save(buf, format="JPEG")
        return buf.getvalue()

    src = trdata.Bytes([jpeg(i) for i in range(4)], [0, 1, 2, 3])
    for name in (b"x.trdpack", b"caf\xe9-\xff.trdpack"):
        dst = os.path.join(os.fsencode(tmp_path), name)
        assert trdata.pack(src, dst, progress=False)["records"] == 4
        assert os.path.isfile(dst)
        assert trdata.sources.packed.verify(dst, progress=False) == []
        assert len(trdata.Packed(dst)) == 4
        assert trdata.sources.packed.inspect(dst)["records"] == 4
    assert sorted(os.listdir(os.fsencode(tmp_path))) == [b"caf\xe9-\xff.trdpack", b"x.trdpack"]


def test_a_users_files_named_like_dst_tmp_survive_a_pack(tmp_path: Path) -> None:
    """The stale-temporary cleaning removed every unlocked ``<dst>.tmp.*`` regular file older than a minute:
    ``trdata.pack(src, "data")`` deleted the user's ``data.tmp.backup``. Only trdata's own names are cleaned."""
    import time

    src = trdata.Bytes([b"x" * 10], [0])
    old = time.time() - 3600
    mine = ["data.tmp.backup", "data.tmp.2024-notes.txt", "data.tmp.7.not-hex-digits!"]
    for name in mine:
        (tmp_path / name).write_bytes(b"precious")
        os.utime(tmp_path / name, (old, old))
    stale = tmp_path / "data.tmp.4000000.00000000000000ff"  # a dead writer's (its form, unlocked, old)
    stale.write_bytes(b"x")
    os.utime(stale, (old, old))
    trdata.pack(src, tmp_path / "data", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["data", *mine])
    assert all((tmp_path / n).read_bytes() == b"precious" for n in mine)
