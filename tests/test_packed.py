"""trdata.pack / trdata.Packed: one file holding a whole source.

The reference is the source itself: without re-encoding, a reproducible loader over the packed file (full or
partial) must give, for every dataset index, exactly the pixels, label and class a loader over the source gives.
Partial mode changes only the order (blocks, then windows), never what a sample becomes, and still delivers
every sample once per epoch, across worker counts, ranks and a resume. Hostile files (flipped bytes, truncation,
foreign files) are typed errors naming the file (and the record)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import jpeg, photo, png
from PIL import Image

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
