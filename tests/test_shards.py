"""trdata.WebDataset: tar shards in webdataset's layout (written here exactly as webdataset's TarWriter writes
them: one member per (key, extension), consecutive per sample), read in place. A reproducible loader over the
shards yields the same batches as one over a FileList of the same images."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import json
import lzma
import os
import signal
import stat
import subprocess
import sys
import tarfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import add_member, encoded, write_shards
from trdata.sources import shards as shards_mod

pytestmark = pytest.mark.usefixtures("private_cache_home")  # the default index cache: not ~/.cache

KW = dict(
    batch_size=6,
    transforms=[trdata.RandomResizedCrop(20), trdata.RandomHorizontalFlip()],
    dtype="uint8",
    layout="NHWC",
    shuffle=True,
    seed=4,
    reproducible=True,
)


def run(src: trdata.Source, workers: int = 2) -> list[np.ndarray]:
    with trdata.Loader(src, workers=workers, **KW) as ld:
        bs = list(ld)
    return [np.concatenate([getattr(b, k) for b in bs]) for k in ("images", "labels", "indices")]


def test_shards_equal_a_file_list_of_the_same_images(tmp_path: Path) -> None:
    shards, images, labels = write_shards(tmp_path, 23, 5)
    files = []
    for i, data in enumerate(images):
        p = tmp_path / f"{i:05d}.img"
        p.write_bytes(data)
        files.append(str(p))
    wds = trdata.WebDataset(shards)
    assert len(wds) == 23 and wds.labels == labels and wds.keys[3] == "sample00003"
    got, want = run(wds), run(trdata.FileList(files, labels))
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    assert sorted(got[2].tolist()) == list(range(23))
    assert all(np.array_equal(a, b) for a, b in zip(got, run(wds, workers=3)))


def test_json_targets_image_key_and_no_targets(tmp_path: Path) -> None:
    shards, _, labels = write_shards(tmp_path, 8, 8, target="json")
    assert trdata.WebDataset(shards, target_key="json").labels == labels
    with pytest.raises(trdata.DecodeError, match="has no image member"):
        trdata.WebDataset(shards, image_key="png", target_key=None)
    assert len(trdata.WebDataset(shards, image_key="jpg;png", target_key=None)) == 8


def test_a_webdataset_tarwriter_shard_reads_the_same(tmp_path: Path) -> None:
    wds = pytest.importorskip("webdataset")
    path = str(tmp_path / "w.tar")
    images = [encoded(i, "JPEG") for i in range(6)]
    with wds.TarWriter(path) as sink:
        for i, img in enumerate(images):
            sink.write({"__key__": f"s{i:03d}", "jpg": img, "cls": i % 3})
    src = trdata.WebDataset([path])
    assert src.labels == [i % 3 for i in range(6)] and len(src) == 6
    ref = [s for s in wds.WebDataset(path, shardshuffle=False)]
    assert [int(s["cls"]) for s in ref] == src.labels


def test_hostile_shards_are_typed_errors_naming_the_shard(tmp_path: Path) -> None:
    shards, _, _ = write_shards(tmp_path, 6, 6)
    data = Path(shards[0]).read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(trdata.DecodeError, match="cut.tar"):
        trdata.WebDataset([str(cut)])
    foreign = tmp_path / "foreign.tar"
    foreign.write_bytes(b"\x89PNG not a tar" * 100)
    with pytest.raises(trdata.DecodeError, match="foreign.tar"):
        trdata.WebDataset([str(foreign)])
    with pytest.raises(trdata.SourceError):
        trdata.WebDataset([str(tmp_path / "missing.tar")])
    with pytest.raises(trdata.ConfigError) as e:
        trdata.WebDataset([])
    assert e.value.parameter == "shards"
    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as tar:
        add_member(tar, "a.jpg", encoded(0, "JPEG"))
        add_member(tar, "a.cls", b"seven")
        add_member(tar, "b.cls", b"1")
    with pytest.raises(trdata.DecodeError, match="not an integer"):
        trdata.WebDataset([str(bad)])


def test_a_shard_truncated_after_indexing_is_a_decode_error_or_skipped(tmp_path: Path) -> None:
    shards, _, _ = write_shards(tmp_path, 6, 6)
    src = trdata.WebDataset(shards)
    data = Path(shards[0]).read_bytes()
    Path(shards[0]).write_bytes(data[: len(data) // 2])  # the index still points past the end
    with pytest.raises(trdata.DecodeError, match="past the end"):
        run(src)
    with trdata.Loader(src, workers=2, on_error="skip", **KW) as ld:
        n = sum(len(b) for b in ld)
        assert n == 6 and ld.stats()["errors_skipped"] >= 1


# ---- the per-shard index cache ------------------------------------------------------------------------------


@pytest.fixture
def tar_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every tarfile.open of a shard (the index is built from the tar headers only when the cache misses)."""
    opened: list[str] = []
    real = tarfile.open

    def counting(name: object = None, *args: object, **kwargs: object) -> tarfile.TarFile:
        mode = str(kwargs.get("mode", args[0] if args else "r"))
        if mode.startswith("r"):  # reads only: the tests write shards through tarfile too
            opened.append(str(name))
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tarfile, "open", counting)
    return opened


def same_source(a: trdata.WebDataset, b: trdata.WebDataset) -> None:
    assert a.keys == b.keys and a.labels == b.labels
    assert all(np.array_equal(x, y) for x, y in zip(run(a), run(b)))


def cache_files(d: Path) -> list[Path]:
    return sorted(d.glob("*.json"))


def test_the_second_open_reads_the_cache(tmp_path: Path, tar_opens: list[str]) -> None:
    shards, _, _ = write_shards(tmp_path, 12, 5)
    cache = tmp_path / "cache"
    first = trdata.WebDataset(shards, cache_dir=cache)
    assert len(tar_opens) == 3 and len(cache_files(cache)) == 3  # one index file per shard
    tar_opens.clear()
    second = trdata.WebDataset(shards, cache_dir=cache)
    assert tar_opens == []  # no tar header was read
    same_source(first, second)
    same_source(second, trdata.WebDataset(shards, cache_dir=False))
    # other options are other indexes: target_key=None caches beside, and reads its own next time
    trdata.WebDataset(shards, cache_dir=cache, target_key=None)
    assert len(cache_files(cache)) == 6
    tar_opens.clear()
    trdata.WebDataset(shards, cache_dir=cache, target_key=None)
    assert tar_opens == []


def test_json_float_targets_are_cached_as_their_raw_bytes(tmp_path: Path, tar_opens: list[str]) -> None:
    path = tmp_path / "soft.tar"
    soft = [[0.25, 0.75], [1.0, 0.0], [0.5, 0.5]]
    with tarfile.open(path, "w") as tar:
        for i, t in enumerate(soft):
            add_member(tar, f"k{i}.png", encoded(i, "PNG"))
            add_member(tar, f"k{i}.json", json.dumps(t).encode())
    cache = tmp_path / "c"
    a = trdata.WebDataset([str(path)], target_key="json", cache_dir=cache)
    tar_opens.clear()
    b = trdata.WebDataset([str(path)], target_key="json", cache_dir=cache)
    assert tar_opens == []
    np.testing.assert_array_equal(a.targets, b.targets)
    np.testing.assert_array_equal(b.targets, np.array(soft, np.float32))


def test_a_modified_shard_is_indexed_again(tmp_path: Path, tar_opens: list[str]) -> None:
    shards, _, _ = write_shards(tmp_path, 6, 6)
    cache = tmp_path / "cache"
    trdata.WebDataset(shards, cache_dir=cache)
    # rewritten with other samples (a new size and mtime)
    with tarfile.open(shards[0], "w") as tar:
        for i in range(4):
            add_member(tar, f"new{i}.jpg", encoded(i + 50, "JPEG"))
            add_member(tar, f"new{i}.cls", str(i).encode())
    tar_opens.clear()
    src = trdata.WebDataset(shards, cache_dir=cache)
    assert (
        tar_opens == [shards[0]] and src.keys == [f"new{i}" for i in range(4)] and src.labels == [0, 1, 2, 3]
    )
    same_source(src, trdata.WebDataset(shards, cache_dir=False))
    # touched only (same bytes, new mtime): indexed again as well, same result
    st = os.stat(shards[0])
    os.utime(shards[0], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    tar_opens.clear()
    assert trdata.WebDataset(shards, cache_dir=cache).keys == src.keys and tar_opens == [shards[0]]


def _cached(cache: Path) -> tuple[Path, dict]:
    (path,) = cache_files(cache)
    return path, json.loads(path.read_text())


@pytest.mark.parametrize(
    "damage",
    [
        "garbage",
        "empty",
        "not-a-dict",
        "foreign-ident",
        "span-past-end",
        "span-in-header",
        "float-offset",
        "bool-size",
        "missing-target",
        "bad-target",
        "short-row",
        "truncated-json",
    ],
)
def test_a_damaged_or_foreign_cache_file_is_rebuilt(
    tmp_path: Path, tar_opens: list[str], damage: str
) -> None:
    shards, _, _ = write_shards(tmp_path, 5, 5)
    cache = tmp_path / "cache"
    want = trdata.WebDataset(shards, cache_dir=False)
    trdata.WebDataset(shards, cache_dir=cache)
    path, doc = _cached(cache)
    size = os.path.getsize(shards[0])
    if damage == "garbage":
        path.write_bytes(os.urandom(300))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "not-a-dict":
        path.write_text("[1, 2, 3]")
    elif damage == "truncated-json":
        path.write_text(path.read_text()[:-20])
    else:
        s = doc["samples"]
        if damage == "foreign-ident":
            doc["ident"]["shard"] = "/elsewhere/x.tar"
        elif damage == "span-past-end":
            s[2][1] = size - 10  # the offset stays an int, but the member would end past the file
        elif damage == "span-in-header":
            s[0][1] = 3
        elif damage == "float-offset":
            s[1][1] = float(s[1][1])
        elif damage == "bool-size":
            s[1][2] = True
        elif damage == "missing-target":
            s[3][3] = None
        elif damage == "bad-target":
            s[3][3] = "seven"
        elif damage == "short-row":
            s[4] = s[4][:3]
        path.write_text(json.dumps(doc))
    tar_opens.clear()
    got = trdata.WebDataset(shards, cache_dir=cache)
    assert tar_opens == shards  # the tar headers were read again
    same_source(got, want)
    # and the rebuilt file is good again
    tar_opens.clear()
    trdata.WebDataset(shards, cache_dir=cache)
    assert tar_opens == []


def test_an_unusable_cache_dir_means_no_cache(tmp_path: Path, tar_opens: list[str]) -> None:
    shards, _, _ = write_shards(tmp_path, 4, 4)
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"x")
    for cache in (blocker / "sub", blocker):  # cannot be created; is not a folder
        src = trdata.WebDataset(shards, cache_dir=cache)
        same_source(src, trdata.WebDataset(shards, cache_dir=False))
    assert blocker.read_bytes() == b"x"
    tar_opens.clear()
    trdata.WebDataset(shards, cache_dir=None)
    trdata.WebDataset(shards, cache_dir=False)
    assert len(tar_opens) == 2  # no cache: every open reads the headers


def test_the_default_cache_dir_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shards, _, _ = write_shards(tmp_path, 3, 3)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    src = trdata.WebDataset(shards)
    assert src.cache_dir == str(tmp_path / "xdg" / "trdata" / "webdataset")
    assert len(cache_files(Path(src.cache_dir))) == 1
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert trdata.WebDataset(shards).cache_dir == str(tmp_path / "home" / ".cache" / "trdata" / "webdataset")


def test_cache_writes_are_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails half-way leaves no file under the final name (and no temporary file behind)."""
    shards, _, _ = write_shards(tmp_path, 3, 3)
    cache = tmp_path / "cache"
    real_dump = json.dump

    def failing_dump(obj: object, fp: io.TextIOBase, **kw: object) -> None:
        fp.write('{"ident": ')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json, "dump", failing_dump)
    src = trdata.WebDataset(shards, cache_dir=cache)
    assert len(src) == 3 and list(cache.iterdir()) == []
    monkeypatch.setattr(json, "dump", real_dump)
    trdata.WebDataset(shards, cache_dir=cache)
    assert [p.suffix for p in cache.iterdir()] == [".json"]


# -------------------- hostile inputs and their regressions -------------------------------------------------


def _shard(path: Path, n: int) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w") as tar:
        for i in range(n):
            for ext, data in (
                ("jpg", b"\xff\xd8not decoded when indexing" + bytes([i])),
                ("cls", str(i % 3).encode()),
            ):
                info = tarfile.TarInfo(f"{i:04d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def test_an_explicit_cache_dir_is_used_when_the_default_key_place_is_read_only(tmp_path: Path) -> None:
    """The signing key lives in ``$XDG_CACHE_HOME/trdata/index-key``; with that place unwritable (a read-only
    home in a container or batch job; here a folder under /proc, which not even root can create) and an explicit,
    writable ``cache_dir``, no index file was ever written: every open re-read every shard's tar headers, without
    a word. Now the key is kept in ``cache_dir`` (mode 0600) and a second open is served by the cache."""
    shard = tmp_path / "a.tar"
    _shard(shard, 5)
    cache = tmp_path / "cache"
    code = textwrap.dedent(
        f"""
        import json, os, stat, trdata
        from trdata.sources import shards
        first = trdata.WebDataset({str(shard)!r}, cache_dir={str(cache)!r})
        names = sorted(os.listdir({str(cache)!r}))
        modes = {{n: stat.S_IMODE(os.stat(os.path.join({str(cache)!r}, n)).st_mode) for n in names}}
        def no_scan(*a, **k):
            raise AssertionError("re-indexed: the cache was not used")
        shards.WebDataset._scan = no_scan
        second = trdata.WebDataset({str(shard)!r}, cache_dir={str(cache)!r})
        print(json.dumps({{"names": names, "modes": modes, "labels": [first.labels, second.labels],
                          "keys": [first.keys, second.keys]}}))
        """
    )
    env = dict(os.environ, XDG_CACHE_HOME="/proc/self/no-such-folder")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert any(n.endswith(".json") for n in got["names"]), got
    key = [n for n in got["names"] if n.startswith(".index-key")]
    assert len(key) == 1 and got["modes"][key[0]] == 0o600, got
    assert got["labels"][0] == got["labels"][1] == [0, 1, 2, 0, 1]
    assert got["keys"][0] == got["keys"][1]


try:  # setup.sh installs hypothesis; without it every test but the property test still runs
    from hypothesis import HealthCheck, event, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None  # type: ignore[assignment]


N = 6


LABELS = [(i * 7) % 5 for i in range(N)]


def write_shard(path: Path, labels: list[int] = LABELS, prefix: str = "s") -> str:
    """A shard of real JPEGs with .cls targets, as webdataset's TarWriter writes it."""
    try:
        import webdataset as wds
    except ImportError:
        with tarfile.open(path, "w") as tar:
            for i, label in enumerate(labels):
                add_member(tar, f"{prefix}{i:04d}.jpg", encoded(i, "JPEG"))
                add_member(tar, f"{prefix}{i:04d}.cls", str(label).encode())
        return str(path)
    with wds.TarWriter(str(path)) as sink:
        for i, label in enumerate(labels):
            sink.write({"__key__": f"{prefix}{i:04d}", "jpg": encoded(i, "JPEG"), "cls": label})
    return str(path)


def keys(n: int = N, prefix: str = "s") -> list[str]:
    return [f"{prefix}{i:04d}" for i in range(n)]


def the_cache_file(cache: Path) -> Path:
    """The one index file in `cache`, found where the code put it (no re-implementation of its naming)."""
    (path,) = sorted(cache.glob("*.json"))
    return path


CHILD = """
import json, os, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # reading /dev/zero or 5 GB whole must fail, not swap
import trdata
shard, cache, path = sys.argv[1:4]
t = time.monotonic()
src = trdata.WebDataset([shard], cache_dir=cache)
print(json.dumps({"labels": src.labels, "keys": src.keys, "seconds": time.monotonic() - t,
                  "regular": os.path.isfile(path) and not os.path.islink(path)}))
"""


@pytest.mark.parametrize("what", ["fifo", "symlink-to-dev-zero", "sparse-5gb"])
def test_a_fifo_dev_zero_or_huge_file_at_the_cache_path_is_ignored(tmp_path: Path, what: str) -> None:
    """Item 6: the cache reader opened a FIFO blocking (hang), read /dev/zero through a symlink and a 5 GB file
    whole (MemoryError). Each is now ignored and the index rebuilt, promptly, in a child process (a hang or a
    memory blow-up fails the test, not the runner)."""
    shard = write_shard(tmp_path / "a.tar")
    cache = tmp_path / "cache"
    trdata.WebDataset([shard], cache_dir=cache)
    path = the_cache_file(cache)
    path.unlink()
    if what == "fifo":
        os.mkfifo(path)
    elif what == "symlink-to-dev-zero":
        path.symlink_to("/dev/zero")
    else:
        with open(path, "wb") as f:
            f.truncate(5 << 30)  # sparse: no disk used
    t = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, shard, str(cache), str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"WebDataset hung on a {what} at the cache path")
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got["labels"] == LABELS and got["keys"] == keys()
    assert got["seconds"] < 10 and time.monotonic() - t < 60
    assert got["regular"]  # replaced by a good index file (the link itself, never /dev/zero)
    assert os.path.exists("/dev/zero") and stat.S_ISCHR(os.stat("/dev/zero").st_mode)
    same_source(trdata.WebDataset([shard], cache_dir=cache), trdata.WebDataset([shard], cache_dir=False))


def test_a_forged_cache_with_the_right_identity_is_rebuilt(tmp_path: Path) -> None:
    """Item 12: every identity field of the cache file is computable from `stat`, so a file that matches them
    was trusted: its labels and spans were served. Forged labels and a span moved onto another (real) image
    member are now detected and the index rebuilt from the tar."""
    shard = write_shard(tmp_path / "a.tar")
    cache = tmp_path / "cache"
    want = trdata.WebDataset([shard], cache_dir=False)
    trdata.WebDataset([shard], cache_dir=cache)
    path = the_cache_file(cache)
    doc = json.loads(path.read_bytes())
    rows = doc["samples"]
    for row in rows:
        row[3] = "4"  # every label 4
    rows[1][1], rows[1][2] = rows[2][1], rows[2][2]  # sample 1 shows sample 2's image (a valid span)
    path.write_text(json.dumps(doc))  # the same fields (a MAC too, where there is one), other contents
    got = trdata.WebDataset([shard], cache_dir=cache)
    assert got.labels == LABELS and got.keys == keys()
    same_source(got, want)


def test_a_shard_edited_in_place_with_its_mtime_restored_serves_the_new_labels(tmp_path: Path) -> None:
    """Item 12: same size, same inode, mtime restored with os.utime(ns=...): the cache served the old labels.
    ctime (which no user can set) is now part of the identity."""
    shard = write_shard(tmp_path / "a.tar")
    cache = tmp_path / "cache"
    assert trdata.WebDataset([shard], cache_dir=cache).labels == LABELS
    before = os.stat(shard)
    time.sleep(0.05)  # past the file system's timestamp granularity
    with tarfile.open(shard) as tar:
        spans = [(m.offset_data, m.size) for m in tar if m.name.endswith(".cls")]
    new = [(v + 1) % 10 for v in LABELS]  # one digit each: the same size
    with open(shard, "r+b") as f:
        for (offset, size), label in zip(spans, new):
            assert size == 1
            f.seek(offset)
            f.write(str(label).encode())
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(shard)
    assert (after.st_size, after.st_mtime_ns, after.st_ino, after.st_dev) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
        before.st_dev,
    )
    assert after.st_ctime_ns != before.st_ctime_ns
    assert trdata.WebDataset([shard], cache_dir=cache).labels == new


@pytest.mark.parametrize(("first", "second"), [("cls", "cls"), ("jpg", "jpg"), ("jpg", "JPG")])
def test_a_duplicate_member_in_a_sample_is_a_decode_error_naming_shard_and_key(
    tmp_path: Path, first: str, second: str
) -> None:
    """Item 13: the last of two members with one extension in a sample silently won; webdataset 1.0.2 raises
    (group_by_keys: ValueError "duplicate file name", suffixes compared lower-cased), and so does trdata now."""
    shard = tmp_path / "dup.tar"
    with tarfile.open(shard, "w") as tar:
        add_member(tar, "k0000.jpg", encoded(0, "JPEG"))
        add_member(tar, "k0000.cls", b"1")
        add_member(tar, "k0001.jpg", encoded(1, "JPEG"))
        add_member(tar, "k0001.cls", b"2")
        add_member(tar, f"k0001.{second}", encoded(2, "JPEG") if second.lower() == "jpg" else b"3")
    del first
    with pytest.raises(trdata.DecodeError) as e:
        trdata.WebDataset([str(shard)], cache_dir=False)
    assert e.value.path == str(shard) and str(shard) in str(e.value) and "'k0001'" in str(e.value)
    assert "duplicate" in str(e.value)
    try:
        import webdataset as wds
    except ImportError:
        return
    with pytest.raises(ValueError, match="duplicate"):
        list(wds.WebDataset(str(shard), shardshuffle=False))


def test_an_empty_image_member_follows_on_error(tmp_path: Path) -> None:
    """Item 13: a 0-byte image member was a ConfigError of the core for the whole dataset, naming neither the shard
    nor the key and bypassing on_error. It is one bad sample now, as an empty file is."""
    shard = tmp_path / "empty.tar"
    with tarfile.open(shard, "w") as tar:
        for i in range(6):
            add_member(tar, f"k{i:04d}.jpg", b"" if i == 2 else encoded(i, "JPEG"))
            add_member(tar, f"k{i:04d}.cls", str(i).encode())
    src = trdata.WebDataset([str(shard)], cache_dir=False)
    with trdata.Loader(src, workers=2, on_error="skip", **KW) as ld:
        assert sum(len(b) for b in ld) == 6 and ld.stats()["errors_skipped"] >= 1
    with pytest.raises(trdata.DecodeError) as e:
        run(src)
    assert str(shard) in str(e.value) and e.value.index == 2 and e.value.kind == "Empty"
    assert src.keys[e.value.index] == "k0002"


def _compressed(kind: str, data: bytes) -> bytes:
    if kind == "gzip":
        return gzip.compress(data)
    if kind == "bzip2":
        return bz2.compress(data)
    if kind == "xz":
        return lzma.compress(data)
    # no zstd/lz4 module in the standard library: their frame magic, which is what identifies them
    return {"zstd": b"\x28\xb5\x2f\xfd", "lz4": b"\x04\x22\x4d\x18"}[kind] + data[:4000]


@pytest.mark.parametrize(
    ("kind", "fix"),
    [("gzip", "gunzip"), ("bzip2", "bunzip2"), ("xz", "unxz"), ("zstd", "unzstd"), ("lz4", "unlz4")],
)
def test_a_compressed_shard_says_so_and_how_to_fix_it(tmp_path: Path, kind: str, fix: str) -> None:
    """Item 13: a .tar.gz (which webdataset streams) said "invalid header". Workers read image members in place
    by byte offset, impossible inside a compressed stream: refused, naming the shard, the compression and the fix."""
    plain = write_shard(tmp_path / "plain.tar")
    shard = tmp_path / "a.tar.gz"
    shard.write_bytes(_compressed(kind, Path(plain).read_bytes()))
    with pytest.raises(trdata.DecodeError) as e:
        trdata.WebDataset([str(shard)], cache_dir=tmp_path / "cache")
    message = str(e.value)
    assert e.value.path == str(shard) and str(shard) in message
    assert f"{kind}-compressed" in message and fix in message
    if kind == "gzip":  # a genuine shard: webdataset reads it
        wds = pytest.importorskip("webdataset")
        assert [int(s["cls"]) for s in wds.WebDataset(str(shard), shardshuffle=False)] == LABELS


@pytest.mark.parametrize("value", ["", 0, 1, 2.5, np.True_, "a\0b", ["x"]])
def test_an_empty_or_odd_cache_dir_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: object
) -> None:
    """Item 16: cache_dir="" wrote index files into the current directory (os.path.abspath("")); other odd values
    raised TypeError. They are ConfigErrors naming cache_dir now, and nothing is written."""
    shard = write_shard(tmp_path / "a.tar")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(trdata.ConfigError) as e:
        trdata.WebDataset([shard], cache_dir=value)  # type: ignore[arg-type]
    assert e.value.parameter == "cache_dir" and "cache_dir" in str(e.value)
    assert list(work.iterdir()) == []


def test_cache_dir_accepts_paths_as_str_bytes_and_pathlike(tmp_path: Path) -> None:
    shard = write_shard(tmp_path / "a.tar")
    for i, value in enumerate((str(tmp_path / "c0"), os.fsencode(tmp_path / "c1"), tmp_path / "c2")):
        src = trdata.WebDataset([shard], cache_dir=value)
        assert src.cache_dir == str(tmp_path / f"c{i}") and src.labels == LABELS
        assert len(list((tmp_path / f"c{i}").glob("*.json"))) == 1


#: Examples per property: small in CI; TRDATA_FUZZ_EXAMPLES=20000 for a long local run.
FUZZ_EXAMPLES = int(os.environ.get("TRDATA_FUZZ_EXAMPLES", "300"))


@contextlib.contextmanager
def hang_guard(seconds: float) -> Iterator[None]:
    """Fail (TimeoutError) instead of hanging: the reader must never block."""

    def fire(signum: int, frame: object) -> None:
        raise TimeoutError(f"opening took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def fuzz_shard(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path, dict[str, Any]]:
    """(shard, cache dir, its index file, the file's document) of one real shard, made under its own
    XDG_CACHE_HOME (whose index key the property test signs with)."""
    root = tmp_path_factory.mktemp("fuzz")
    shard = write_shard(root / "a.tar")
    cache = root / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(root / "xdg"))
        trdata.WebDataset([shard], cache_dir=cache)
    path = the_cache_file(cache)
    return shard, cache, path, json.loads(path.read_bytes())


if given is not None:
    _scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.sampled_from([0, 511, 512, 513, -512, 2**63, 2**64, 10**400])
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=20)
    )
    _junk = st.recursive(
        _scalars,
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
        max_leaves=20,
    )

    def _paths(v: Any, at: tuple = ()) -> Iterator[tuple]:
        yield at
        if isinstance(v, dict):
            for k, x in v.items():
                yield from _paths(x, (*at, k))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                yield from _paths(x, (*at, i))

    def _mutate(doc: Any, data: Any) -> Any:
        """1-4 random edits anywhere in the document: a value replaced by junk, a field or row deleted, an int
        nudged (by a block, a byte, a lot), a row or element duplicated, a key added."""
        doc = json.loads(json.dumps(doc))
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.sampled_from(list(_paths(doc))))
            if not at:
                doc = data.draw(_junk)
                continue
            parent = doc
            for k in at[:-1]:
                parent = parent[k]
            op = data.draw(st.sampled_from(["replace", "delete", "nudge", "duplicate", "add_member-key"]))
            last = at[-1]
            if op == "delete":
                del parent[last]
            elif op == "nudge" and type(parent[last]) is int:
                parent[last] += data.draw(st.sampled_from([-1, 1, -512, 512, 2**31, -(2**40), 10**30]))
            elif op == "duplicate" and isinstance(parent, list):
                parent.insert(last, parent[last])
            elif op == "add_member-key" and isinstance(parent, dict):
                parent[data.draw(st.text(max_size=8))] = data.draw(_junk)
            else:
                parent[last] = data.draw(_junk)
        return doc

    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(data=st.data())
    def test_fuzz_the_cache_reader(data: Any, fuzz_shard: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
        """The shard-cache reader under random bytes and mutated documents (field edits, wrong types, huge and
        negative numbers, nested junk), unsigned, with a wrong MAC, or signed with this user's key (as only
        trdata itself can: that reaches the document checks behind the MAC). Opening never raises and never
        hangs, and yields exactly the real shard's index, or, for a signed document, exactly what it says with
        every span a member's data inside the shard."""
        shard, cache, path, doc = fuzz_shard
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parent / "xdg"))
        how = data.draw(st.sampled_from(["bytes", "mutated", "bad-mac", "signed", "signed-rows"]))
        signed = None
        if how == "bytes":
            text = json.dumps(doc).encode()
            raw = data.draw(st.binary(max_size=2048) | st.integers(0, len(text)).map(lambda n: text[:n]))
        else:
            if how == "signed-rows":  # edits of the rows only: more documents get past the identity check
                mutated = dict(doc, samples=_mutate(doc["samples"], data))
            else:
                mutated = _mutate(doc, data)
            if how == "bad-mac" and isinstance(mutated, dict):
                mutated["mac"] = data.draw(st.text(max_size=70) | st.just(doc["mac"].upper()) | _junk)
            elif (
                how.startswith("signed")
                and isinstance(mutated, dict)
                and {"ident", "samples"} <= set(mutated)
            ):
                key = shards_mod._index_key()
                assert key is not None
                body = shards_mod._signed_body(mutated["ident"], mutated["samples"])
                signed = {
                    "ident": mutated["ident"],
                    "samples": mutated["samples"],
                    "mac": shards_mod._mac(key, body),
                }
                mutated = signed
            raw = json.dumps(mutated).encode()
        path.write_bytes(raw)
        try:
            with hang_guard(10):
                got = trdata.WebDataset([shard], cache_dir=cache)
        except trdata.ConfigError as e:  # a signed index of no sample: an empty dataset, as an empty shard is
            assert signed is not None and signed["samples"] == [] and e.parameter == "shards", (
                how,
                raw[:300],
            )
            event(f"{how}: the signed document's empty index")
            return
        except trdata.DecodeError as e:  # a signed index with an empty image span: as an empty member is
            assert signed is not None and e.kind == "Empty", (how, raw[:300])
            assert signed["samples"][e.index][2] == 0
            event(f"{how}: the signed document's empty member")
            return
        if (got.keys, got.labels) == (keys(), LABELS):
            event(f"{how}: the real index")
            return
        assert signed is not None, (how, raw[:300])
        event(f"{how}: the signed document's index")
        # a signed document was accepted: exactly its rows, each one a member's data inside the shard
        size = os.path.getsize(shard)
        rows = signed["samples"]
        assert got.keys == [r[0] for r in rows] and got.labels == [int(r[3]) for r in rows]
        end = 0
        for _, offset, length, _ in rows:
            assert offset % 512 == 0 and offset >= end + 512 and offset + length <= size
            end = offset + length
else:  # pragma: no cover

    def test_fuzz_the_cache_reader() -> None:
        pytest.skip("hypothesis is not installed (scripts/setup.sh installs it)")
