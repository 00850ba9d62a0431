"""Third hostile round, the packer and the packed reader (issue list in CHANGELOG.md, "Hardening, third round"):
float targets are never stored as class 0, destinations that are not regular files are refused before any work,
two packs to one destination (threads, processes) each publish only their own file, bools are not counts, and a
packed file whose class names repeat or whose labels fall outside them is refused at open."""

from __future__ import annotations

import io
import json
import os
import stat
import struct
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import crc32c, photo
from PIL import Image
from trdata.sources.packed import inspect


def jpeg(seed: int, w: int = 40, h: int = 32) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(photo(seed, w, h)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def files(root: Path, n: int) -> list[str]:
    paths = []
    for i in range(n):
        p = root / f"{i:04d}.jpg"
        p.write_bytes(jpeg(i))
        paths.append(str(p))
    return paths


def param(exc: pytest.ExceptionInfo[trdata.ConfigError]) -> str:
    return exc.value.parameter


# ---- 1. targets of every kind survive a pack, or the pack refuses ---------------------------------------------


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
            for name, data in ((f"k{i}.jpg", jpeg(i)), (f"k{i}.json", json.dumps([0.7, 0.3]).encode())):
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


# ---- 3. destinations that are not regular files: refused before any work -------------------------------------


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
    (root / "a" / "x.jpg").write_bytes(jpeg(1))
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


# ---- 2. two packs to one destination ---------------------------------------------------------------------------


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


# ---- 16. bools are not counts ----------------------------------------------------------------------------------


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


# ---- 14. Packed: repeated class names, labels outside the classes ---------------------------------------------


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
