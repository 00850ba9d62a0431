"""trdata.WebDataset: tar shards in webdataset's layout (written here exactly as webdataset's TarWriter writes
them: one member per (key, extension), consecutive per sample), read in place. A reproducible loader over the
shards yields the same batches as one over a FileList of the same images."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import trdata
from PIL import Image

KW = dict(
    batch_size=6,
    transforms=[trdata.RandomResizedCrop(20), trdata.RandomHorizontalFlip()],
    dtype="uint8",
    layout="NHWC",
    shuffle=True,
    seed=4,
    reproducible=True,
)


def encoded(i: int, fmt: str) -> bytes:
    rng = np.random.default_rng(i)
    a = (rng.integers(0, 200, (30 + i % 7, 34, 3)) + np.arange(34)[None, :, None]).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format=fmt)
    return buf.getvalue()


def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_shards(
    root: Path, n: int, per_shard: int, target: str = "cls"
) -> tuple[list[str], list[bytes], list[int]]:
    """Shards of `per_shard` samples: key.jpg or key.png (alternating), key.cls / key.json, plus an extra member."""
    shards, images, labels = [], [], []
    for s in range(0, n, per_shard):
        path = root / f"shard-{s // per_shard:04d}.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(s, min(n, s + per_shard)):
                key = f"sample{i:05d}"
                ext, fmt = ("jpg", "JPEG") if i % 2 == 0 else ("png", "PNG")
                img, label = encoded(i, fmt), (i * 7) % 5
                add(tar, f"{key}.{ext}", img)
                add(
                    tar,
                    f"{key}.{target}",
                    json.dumps(label).encode() if target == "json" else str(label).encode(),
                )
                add(tar, f"{key}.txt", b"a caption")
                images.append(img)
                labels.append(label)
        shards.append(str(path))
    return shards, images, labels


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
        add(tar, "a.jpg", encoded(0, "JPEG"))
        add(tar, "a.cls", b"seven")
        add(tar, "b.cls", b"1")
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
