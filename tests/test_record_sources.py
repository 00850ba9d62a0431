"""Other projects' record files, written by those projects' own writers and read back by their own readers, then
read by trdata: Hugging Face Parquet (``datasets``, push_to_hub's shards) and a plain pyarrow table
(``trdata.Parquet``), Mosaic MDS shards raw and zstd (``trdata.MDS``), LitData chunks raw and zstd
(``trdata.LitData``), TFRecord files with and without a ``.tfindex`` (``trdata.TFRecord``).

1. The writers' files as their readers see them (``datasets``/pyarrow, ``streaming.StreamingDataset``,
   ``litdata.StreamingDataset``, ``tfrecord``'s loader): the rows in write order, the image bytes stored as
   written (or, where the reader hands out only decoded images, the same pixels as decoding those bytes), the
   labels, the captions. These pin what the fixtures are, so a release of a writer that changes its layout shows
   here first.
2. trdata against those readers: a sequential plan (``shuffle=False``) delivers the same rows in the same order,
   the same labels and extras, and the same pixels for a deterministic pipeline (Resize + CenterCrop) as trdata
   over the reference reader's bytes (exactly) and as Pillow + torchvision v2 on those bytes (±1 level on 99 %).
   The exactly-once, 1-vs-3-workers and resume contract runs in tests/test_source_contract.py.

Every reference package is optional (``pytest.importorskip``; ``scripts/setup.sh --refs`` installs them), and the
trdata side skips until this build has the source (``trdata.Parquet``, ...)."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import (
    RECORD_CLASSES,
    RECORD_N,
    RecordSet,
    crc32c,
    write_arrow_parquet,
    write_hf_parquet,
    write_litdata,
    write_mds,
    write_tfrecord,
)
from PIL import Image

pytestmark = pytest.mark.usefixtures(
    "private_cache_home"
)  # index caches, HF and LitData caches: not ~/.cache


class Ref:
    """What a reference reader returned, row by row in its sequential order: ``images`` (the stored bytes when the
    reader hands them out, else None), ``pixels`` (decoded RGB, HWC uint8), ``labels``, ``captions``, and the
    class names where the format carries them."""

    def __init__(self) -> None:
        self.images: list[bytes] | None = []
        self.pixels: list[np.ndarray] = []
        self.labels: list[int] = []
        self.captions: list[str] = []
        self.classes: list[str] | None = None


def rgb(data: bytes) -> np.ndarray:
    """Encoded image bytes decoded by Pillow to HWC uint8 RGB."""
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def _bytes_ref(images: list[bytes], labels: list[int], captions: list[str]) -> Ref:
    ref = Ref()
    ref.images, ref.labels, ref.captions = list(images), list(labels), list(captions)
    ref.pixels = [rgb(b) for b in images]
    return ref


# ------------------------------------------------------------------------------------- 1. the reference readers


def read_hf(rs: RecordSet, cache: Path) -> Ref:
    """``datasets.Dataset.from_parquet`` over the shards, images as stored (``Image(decode=False)``)."""
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_parquet(sorted(rs.location), cache_dir=str(cache))
    ds = ds.cast_column("image", datasets.Image(decode=False))
    ref = _bytes_ref([r["bytes"] for r in ds["image"]], ds["label"], ds["text"])
    ref.classes = ds.features["label"].names
    return ref


def read_arrow(rs: RecordSet) -> Ref:
    """``pyarrow.parquet.read_table``: a null label is "no label" (-1)."""
    pq = pytest.importorskip("pyarrow.parquet")
    t = pq.read_table(rs.location[0])
    labels = [-1 if v is None else v for v in t.column("label").to_pylist()]
    return _bytes_ref(t.column("image").to_pylist(), labels, t.column("caption").to_pylist())


def read_mds(rs: RecordSet) -> Ref:
    """``streaming.StreamingDataset(local=folder, shuffle=False)`` in index order; the jpeg column comes out as a
    PIL image (its bytes are not handed out: the pixels are compared)."""
    streaming = pytest.importorskip("streaming")
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    ds = streaming.StreamingDataset(local=str(rs.location), shuffle=False, batch_size=1)
    ref = Ref()
    ref.images = None
    for i in range(ds.num_samples):
        s = ds[i]
        ref.pixels.append(np.asarray(s["image"].convert("RGB")))
        ref.labels.append(int(s["label"]))
        ref.captions.append(s["caption"])
    return ref


def read_litdata(rs: RecordSet) -> Ref:
    """``litdata.StreamingDataset(folder)`` in order (no shuffle); the jpeg leaf comes out decoded (a CHW uint8
    tensor: torchvision's decode_jpeg), so the pixels are compared with torchvision's decode of the bytes."""
    litdata = pytest.importorskip("litdata")
    ds = litdata.StreamingDataset(str(rs.location))
    ref = Ref()
    ref.images = None
    for i in range(len(ds)):
        s = ds[i]
        img = s["image"]
        ref.pixels.append(img.permute(1, 2, 0).numpy() if hasattr(img, "permute") else np.asarray(img))
        ref.labels.append(int(s["label"]))
        ref.captions.append(s["caption"])
    return ref


def read_tfrecord(rs: RecordSet, index: bool) -> Ref:
    """tfrecord's ``tfrecord_loader`` file by file (through the ``.tfindex`` when there is one: as shard (0, 1),
    since with an index and no shard it starts each file at a random record)."""
    pytest.importorskip("tfrecord")
    from tfrecord.reader import tfrecord_loader

    images, labels, captions = [], [], []
    for path in rs.location:
        idx = f"{path}.tfindex" if index else None
        for r in tfrecord_loader(path, idx, shard=(0, 1) if index else None):
            images.append(bytes(r["image/encoded"]))
            labels.append(int(r["image/class/label"][0]))
            captions.append(bytes(r["image/text"]).decode())
    return _bytes_ref(images, labels, captions)


def assert_ref_is_what_was_written(ref: Ref, rs: RecordSet) -> None:
    """The reader's rows are the writer's, in write order."""
    assert ref.labels == rs.labels
    assert ref.captions == rs.captions
    if ref.images is not None:
        assert ref.images == rs.images
    assert len(ref.pixels) == len(rs)
    for i, (got, data) in enumerate(zip(ref.pixels, rs.images)):
        np.testing.assert_array_equal(got, rgb(data), err_msg=f"sample {i}")


def test_hf_parquet_as_datasets_reads_it(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rs = write_hf_parquet(tmp_path)
    assert [Path(p).name for p in rs.location] == [
        "train-00000-of-00002.parquet",
        "train-00001-of-00002.parquet",
    ]
    ref = read_hf(rs, tmp_path / "hf-cache")
    assert_ref_is_what_was_written(ref, rs)
    assert ref.classes == RECORD_CLASSES
    first = pq.ParquetFile(rs.location[0])
    # the layout trdata.Parquet reads: the image as struct<bytes, path> with the bytes embedded (path = the file's
    # basename), row groups of 5 rows, the class names in the schema's `huggingface` JSON
    assert first.schema_arrow.field("image").type.names == ["bytes", "path"]
    assert first.metadata.num_row_groups == 3 and first.metadata.row_group(0).num_rows == 5
    row = first.read_row_group(0).column("image")[0].as_py()
    assert row["bytes"] == rs.images[0] and row["path"] == "000.jpg"
    meta = json.loads(first.schema_arrow.metadata[b"huggingface"])
    assert meta["info"]["features"]["label"] == {"names": RECORD_CLASSES, "_type": "ClassLabel"}


def test_plain_parquet_as_pyarrow_reads_it(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rs = write_arrow_parquet(tmp_path)
    assert_ref_is_what_was_written(read_arrow(rs), rs)
    assert pq.ParquetFile(rs.location[0]).metadata.num_row_groups == 4  # 7 + 7 + 7 + 2
    assert rs.labels[4] == -1 and rs.images[3][:4] == b"\x89PNG"


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_mds_as_streaming_reads_it(tmp_path: Path, compression: str | None) -> None:
    rs = write_mds(tmp_path, compression=compression)
    assert_ref_is_what_was_written(read_mds(rs), rs)
    index = json.loads((Path(rs.location) / "index.json").read_text())
    assert index["version"] == 2 and len(index["shards"]) >= 2, "the fixture must span several shards"
    assert sum(s["samples"] for s in index["shards"]) == RECORD_N
    for s in index["shards"]:
        assert s["column_names"] == ["caption", "image", "label"]  # sorted: the sample layout's order
        assert s["column_encodings"] == ["str", "jpeg", "int"] and s["compression"] == compression
        raw = Path(rs.location) / s["raw_data"]["basename"]
        if compression is None:
            data = raw.read_bytes()
            n = struct.unpack_from("<I", data)[0]
            offsets = struct.unpack_from(f"<{n + 1}I", data, 4)
            assert n == s["samples"] and offsets[-1] == len(data) == s["raw_data"]["bytes"]
        else:
            assert s["zip_data"]["basename"].endswith(".mds.zstd")


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_litdata_as_litdata_reads_it(tmp_path: Path, compression: str | None) -> None:
    rs = write_litdata(tmp_path, compression=compression)
    ref = read_litdata(rs)
    assert ref.labels == rs.labels and ref.captions == rs.captions
    tv_io = pytest.importorskip("torchvision.io")
    import torch

    for i, (got, data) in enumerate(zip(ref.pixels, rs.images)):
        want = tv_io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        np.testing.assert_array_equal(got, want.permute(1, 2, 0).numpy(), err_msg=f"sample {i}")
    index = json.loads((Path(rs.location) / "index.json").read_text())
    config = index["config"]
    assert config["data_format"] == ["jpeg", "int", "str"] and len(index["chunks"]) >= 2
    assert json.loads(config["data_spec"])[1]["context"] == json.dumps(["image", "label", "caption"])
    assert sum(c["chunk_size"] for c in index["chunks"]) == RECORD_N
    # litdata 0.2.76: "zstd" means zstd frames inside the chunk file (compression_level "batch"), not a
    # compressed file; the raw chunk's offset table ends at the file's size
    assert config["compression"] == compression
    assert config["compression_level"] == (None if compression is None else "batch")
    if compression is None:
        chunk = index["chunks"][0]
        data = (Path(rs.location) / chunk["filename"]).read_bytes()
        n = struct.unpack_from("<I", data)[0]
        offsets = struct.unpack_from(f"<{n + 1}I", data, 4)
        assert n == chunk["chunk_size"] and offsets[-1] == len(data) == chunk["chunk_bytes"]


@pytest.mark.parametrize("index", [False, True])
def test_tfrecord_as_tfrecord_reads_it(tmp_path: Path, index: bool) -> None:
    rs = write_tfrecord(tmp_path, index=index)
    assert_ref_is_what_was_written(read_tfrecord(rs, index), rs)
    # the framing trdata.TFRecord checks: u64 length, masked CRC-32C of the length, data, masked CRC of the data
    data = Path(rs.location[0]).read_bytes()

    def masked(b: bytes) -> int:
        c = crc32c(b)
        return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    pos, records = 0, 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        assert struct.unpack_from("<I", data, pos + 8)[0] == masked(data[pos : pos + 8])
        body = data[pos + 12 : pos + 12 + length]
        assert struct.unpack_from("<I", data, pos + 12 + length)[0] == masked(body)
        pos, records = pos + 16 + length, records + 1
    assert pos == len(data) and records == 10


# ------------------------------------------------------------------------------------- 2. trdata against them

# kind → (writer, reference reader, trdata source name, its keyword arguments, the caption's extra field); the
# source takes the RecordSet's location (files or folder) first
Case = tuple[
    Callable[[Path], RecordSet],
    Callable[[RecordSet, Path], Ref],
    str,
    Callable[[RecordSet], dict[str, Any]],
    str,
]
CASES: dict[str, Case] = {
    "Parquet-hf": (
        write_hf_parquet,
        read_hf,
        "Parquet",
        lambda rs: dict(image_column="image", label_column="label", extras=["text"]),
        "text",
    ),
    "Parquet-arrow": (
        write_arrow_parquet,
        lambda rs, _: read_arrow(rs),
        "Parquet",
        lambda rs: dict(image_column="image", label_column="label", extras=["caption"]),
        "caption",
    ),
    "MDS": (write_mds, lambda rs, _: read_mds(rs), "MDS", lambda rs: {}, "caption"),
    "MDS-zstd": (
        lambda r: write_mds(r, compression="zstd"),
        lambda rs, _: read_mds(rs),
        "MDS",
        lambda rs: {},
        "caption",
    ),
    "LitData": (write_litdata, lambda rs, _: read_litdata(rs), "LitData", lambda rs: {}, "caption"),
    "LitData-zstd": (
        lambda r: write_litdata(r, compression="zstd"),
        lambda rs, _: read_litdata(rs),
        "LitData",
        lambda rs: {},
        "caption",
    ),
    "TFRecord": (
        write_tfrecord,
        lambda rs, _: read_tfrecord(rs, False),
        "TFRecord",
        lambda rs: {},
        "image/text",
    ),
    "TFRecord-index": (
        lambda r: write_tfrecord(r, index=True),
        lambda rs, _: read_tfrecord(rs, True),
        "TFRecord",
        lambda rs: {},
        "image/text",
    ),
}


def record_source(name: str, rs: RecordSet, **kw: Any) -> trdata.Source:
    """``trdata.<name>(rs.location, **kw)``, or skip while this build lacks the source."""
    cls = getattr(trdata, name, None)
    if cls is None:
        pytest.skip(f"trdata.{name} is not in this build yet")
    return cls(rs.location, **kw)


def as_text(v: object) -> object:
    """An extra as text: bytes (a TFRecord BytesList) decoded as UTF-8, numpy scalars/0-d arrays as Python."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode()
    if isinstance(v, np.ndarray):
        return as_text(v.item()) if v.ndim == 0 else [as_text(x) for x in v.tolist()]
    if isinstance(v, (list, tuple)) and len(v) == 1:  # a one-element BytesList
        return as_text(v[0])
    return v


PIPE_KW = dict(batch_size=4, dtype="uint8", layout="NHWC", last_batch="partial")


def rows(loader: Any, field: str) -> tuple[list[int], list[int], np.ndarray, list[object]]:
    """One epoch: indices, labels, images (HWC uint8) and the ``field`` extra of the valid rows, in order."""
    indices, labels, images, extras = [], [], [], []
    for b in loader:
        n = b.valid
        indices += b.indices[:n].tolist()
        labels += [int(x) for x in np.asarray(b.labels)[:n]]
        images.append(np.asarray(b.images)[:n].copy())
        if field:
            assert b.extras is not None and field in b.extras, f"batch.extras lacks {field!r}"
            extras += [as_text(x) for x in list(b.extras[field])[:n]]
    return indices, labels, np.concatenate(images), extras


@pytest.mark.parametrize("kind", list(CASES))
def test_rows_labels_extras_and_pixels_are_the_reference_readers(tmp_path: Path, kind: str) -> None:
    write, read, name, args, field = CASES[kind]
    rs = write(tmp_path)
    ref = read(rs, tmp_path / "ref-cache")
    assert_ref_is_what_was_written(ref, rs)
    src = record_source(name, rs, **args(rs))
    assert len(src) == len(rs) == RECORD_N  # (labels come with the samples: batch.labels, checked below)
    if ref.classes is not None:
        assert list(src.classes) == ref.classes
    v2 = pytest.importorskip("torchvision.transforms.v2")
    F = pytest.importorskip("torchvision.transforms.v2.functional")
    ops = [v2.Resize(40), v2.CenterCrop(32)]
    with trdata.Loader(src, transforms=list(ops), shuffle=False, workers=2, **PIPE_KW) as ld:
        indices, labels, images, captions = rows(ld, field)
    assert indices == list(range(RECORD_N))
    assert labels == ref.labels
    assert captions == ref.captions
    # exactly what trdata makes of the same bytes from memory ...
    stored = ref.images if ref.images is not None else rs.images
    with trdata.Loader(
        trdata.Bytes(stored, [max(x, 0) for x in ref.labels]),
        transforms=list(ops),
        shuffle=False,
        workers=2,
        **PIPE_KW,
    ) as ld:
        same = np.concatenate([np.asarray(b.images)[: b.valid].copy() for b in ld])
    np.testing.assert_array_equal(images, same)
    # ... and what Pillow + torchvision v2 make of them
    ref_ops = v2.Compose(ops)
    for i, data in enumerate(stored):
        with Image.open(io.BytesIO(data)) as im:
            want = ref_ops(F.pil_to_tensor(im.convert("RGB"))).permute(1, 2, 0).numpy()
        assert images[i].shape == want.shape, i
        diff = np.abs(images[i].astype(int) - want.astype(int))
        assert np.mean(diff <= 1) >= 0.99, (i, np.mean(diff <= 1))


@pytest.mark.parametrize("kind", ["MDS-zstd", "LitData-zstd"])
def test_compressed_files_deliver_the_uncompressed_ones_bytes(tmp_path: Path, kind: str) -> None:
    """The zstd variant of a set gives the same batches as the raw one, shuffled, on 2 workers."""
    write_z, _, name, args, _ = CASES[kind]
    write_raw = CASES[kind.removesuffix("-zstd")][0]
    raw, z = write_raw(tmp_path / "raw"), write_z(tmp_path / "z")
    kw = dict(PIPE_KW, transforms=[trdata.RandomResizedCrop(24)], shuffle=True, seed=5, reproducible=True)
    out = []
    for rs in (raw, z):
        with trdata.Loader(record_source(name, rs, **args(rs)), workers=2, **kw) as ld:
            out.append([(b.indices.copy(), np.asarray(b.images).copy()) for b in ld])
    assert len(out[0]) == len(out[1])
    for (ia, xa), (ib, xb) in zip(*out):
        np.testing.assert_array_equal(ia, ib)
        np.testing.assert_array_equal(xa, xb)


def test_a_datasets_dataset_given_as_it_is_is_read_undecoded(tmp_path: Path) -> None:
    """A ``datasets.Dataset`` with a decoding ``Image`` feature given to the Loader as it is: the source reads its
    items with ``Image(decode=False)`` (the stored bytes from the Arrow table, decoded by the core, not PIL
    images made per row by ``datasets``), and delivers the pixels, labels, class names and extras datasets has."""
    datasets = pytest.importorskip("datasets")
    v2 = pytest.importorskip("torchvision.transforms.v2")
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    blobs = []
    for i in range(7):
        b = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (24 + i, 30, 3), dtype=np.uint8)).save(b, "PNG")
        blobs.append(b.getvalue())
    features = datasets.Features(
        image=datasets.Image(),
        label=datasets.ClassLabel(names=["a", "b", "c"]),
        text=datasets.Value("string"),
    )
    ds = datasets.Dataset.from_dict(
        {
            "image": [{"bytes": b, "path": None} for b in blobs],
            "label": [i % 3 for i in range(7)],
            "text": [f"row {i}" for i in range(7)],
        },
        features=features,
    )
    assert ds.features["image"].decode, "the dataset decodes as datasets gives it"
    source = trdata.DatasetSource(ds)
    assert source.dataset.features["image"].decode is False
    assert isinstance(source.dataset[0]["image"], dict), "items carry the stored bytes"
    assert source.classes == ["a", "b", "c"]
    with trdata.Loader(ds, batch_size=7, shuffle=False, transforms=[trdata.CenterCrop(20)]) as loader:
        batch = next(iter(loader))
    want = torch.stack([v2.CenterCrop(20)(v2.PILToTensor()(ds[i]["image"])) for i in range(7)])
    got = torch.as_tensor(np.asarray(batch.images))
    assert torch.equal((got * 255).round().to(torch.uint8), want)
    assert list(np.asarray(batch.labels)) == [i % 3 for i in range(7)]
    assert list(batch.extras["text"]) == [f"row {i}" for i in range(7)]


def test_hub_parquet_over_a_loopback_hub(tmp_path: Path) -> None:
    """``trdata.Parquet("hf://datasets/org/name@main/data/*.parquet")`` against a loopback server with the Hub's
    URL layout (revision and tree APIs, resolve URLs answering 302 to a file store, the token required, a 429
    with Retry-After on the first resolve): the same rows as the local files, the token never sent to the file
    store, the 429 waited out and counted."""
    from _servers import start_hub, stop

    rs = write_hf_parquet(tmp_path / "repo")
    hub = start_hub(tmp_path / "repo", token="hf_secret", throttle=1)
    try:
        options = {"hf_endpoint": hub.base, "hf_token": "hf_secret"}
        remote = trdata.Parquet("hf://datasets/org/name@main/data/*.parquet", storage_options=options)
        local = trdata.Parquet(rs.location)
        assert (len(remote), remote.classes, remote.extras) == (len(local), local.classes, local.extras)

        def rows(source: trdata.Source) -> tuple[list[int], list[str], np.ndarray]:
            with trdata.Loader(
                source, batch_size=len(source), shuffle=False, transforms=[trdata.Resize((16, 16))]
            ) as ld:
                b = next(iter(ld))
            return list(np.asarray(b.labels)), list(b.extras["text"]), np.asarray(b.images)

        got, want = rows(remote), rows(local)
        assert got[0] == want[0] == list(rs.labels) and got[1] == want[1]
        assert np.array_equal(got[2], want[2])
        stats = remote.storage_stats()
        assert stats["storage_retries"] >= 1, stats
        assert hub.store.auth and all(a is None for a in hub.store.auth), "the token went to the file store"
        assert all(a == "Bearer hf_secret" for _, _, a in hub.requests)
        with pytest.raises(trdata.SourceError, match="names no|no file|match"):
            trdata.Parquet("hf://datasets/org/name@main/nothing/*.parquet", storage_options=options)
    finally:
        stop(hub.store)
        stop(hub)


def test_verify_and_inspect_name_a_damaged_record(tmp_path: Path) -> None:
    """``trdata verify``'s check of a TFRecord file written by tfrecord's writer: sound, then one record's data
    flipped (its CRC fails: that record alone is reported, named), and the next good file on the same threads
    still sound; ``inspect`` describes the source."""
    import shutil

    src = Path(__file__).parent / "data" / "formats" / "tfrecord" / "train-00000.tfrecord"
    good = tmp_path / "good.tfrecord"
    shutil.copy(src, good)
    source = trdata.TFRecord(str(good))
    assert source.verify(progress=False) == []
    info = source.describe()
    assert (info["format"], info["samples"]) == ("tfrecord", len(source))
    data = bytearray(good.read_bytes())
    (length,) = struct.unpack_from("<Q", data, 0)
    second = 12 + length + 4  # record 1 starts after record 0's frame
    data[second + 12 + 3] ^= 0xFF
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(data))
    found = trdata.TFRecord(str(bad)).verify(progress=False, workers=2)
    assert [i for i, _ in found] == [1], found
    assert "bad.tfrecord#1" in found[0][1]
    assert trdata.TFRecord(str(good)).verify(progress=False, workers=2) == []
