"""trdata.WebDataset: tar shards in webdataset's layout (written here exactly as webdataset's TarWriter writes
them: one member per (key, extension), consecutive per sample), read in place. A reproducible loader over the
shards yields the same batches as one over a FileList of the same images."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import add_member, encoded, write_shards

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
