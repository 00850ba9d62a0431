"""Extra per-sample fields (captions, parsed JSON, arrays) reach ``batch.extras`` with their rows: per field a list
in row order, or one stacked array when every value is an array of one shape; padded and filled rows repeat their
sample's, as labels do."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import photo
from PIL import Image
from trdata.errors import ConfigError

N = 11
KW = dict(batch_size=4, transforms=[trdata.RandomResizedCrop(8)], shuffle=True, seed=3, last_batch="pad")


def jpeg(i: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(photo(i, 20, 16)).save(out, "JPEG")
    return out.getvalue()


CAPTIONS = [f"a photo number {i}" for i in range(N)]
META = [{"id": i, "tags": ["x"] * (i % 3)} for i in range(N)]
EMB = [np.full(5, i, np.float32) for i in range(N)]
RAGGED = [np.arange(i + 1) for i in range(N)]


def check(loader: trdata.Loader) -> int:
    rows = 0
    for b in loader:
        idx = b.indices.tolist()
        assert b.extras["caption"] == [CAPTIONS[i] for i in idx]
        assert b.extras["meta"] == [META[i] for i in idx]
        assert isinstance(b.extras["emb"], np.ndarray) and b.extras["emb"].shape == (len(idx), 5)
        np.testing.assert_array_equal(b.extras["emb"][:, 0], np.asarray(idx, np.float32))
        assert isinstance(b.extras["ragged"], list)  # arrays of different shapes stay a list
        assert [len(r) for r in b.extras["ragged"]] == [i + 1 for i in idx]
        rows += len(idx)
    return rows


EXTRAS = {"caption": CAPTIONS, "meta": META, "emb": EMB, "ragged": RAGGED}


def test_in_memory_and_file_sources_deliver_extras_with_their_rows(tmp_path: Path) -> None:
    paths = []
    for i in range(N):
        p = tmp_path / f"{i}.jpg"
        p.write_bytes(jpeg(i))
        paths.append(str(p))
    sources = [
        trdata.FileList(paths, list(range(N)), extras=EXTRAS),
        trdata.Bytes([jpeg(i) for i in range(N)], list(range(N)), extras=EXTRAS),
        trdata.Arrays(np.stack([photo(i, 20, 16) for i in range(N)]), list(range(N)), extras=EXTRAS),
    ]
    for src in sources:
        with trdata.Loader(src, workers=2, **KW) as ld:  # type: ignore[arg-type]
            assert (
                check(ld) == 12
            )  # 11 samples padded to 3 batches of 4: the pad row repeats a sample's extras
        for rank in range(2):  # ranks: each its share, with its rows' extras
            with trdata.Loader(src, workers=1, rank=rank, world_size=2, **KW) as ld:  # type: ignore[arg-type]
                check(ld)
    with trdata.Loader(trdata.Bytes([jpeg(0)] * N), **KW) as ld:  # type: ignore[arg-type]
        assert next(iter(ld)).extras == {}


class Captioned:
    """A map-style dataset returning (image, target, extras)."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[bytes, int, dict[str, object]]:
        return jpeg(i), i, {"caption": CAPTIONS[i], "meta": META[i], "emb": EMB[i], "ragged": RAGGED[i]}


def test_a_datasets_third_item_is_its_extras() -> None:
    with trdata.Loader(Captioned(), workers=3, **KW) as ld:  # type: ignore[arg-type]
        assert check(ld) == 12


def test_extras_are_checked_when_the_source_is_made() -> None:
    blobs = [jpeg(0)] * 3
    for extras, message in [
        (["a", "b", "c"], "must be a dict of name"),
        ({"caption": ["a", "b"]}, "'caption' has 2 values, one per sample is 3"),
        ({"caption": "abc"}, "'caption' is a str, not a sequence"),
        ({1: ["a", "b", "c"]}, "the name 1 must be a str"),
        ({"tags": {"a", "b", "c"}}, "'tags' is a set"),
    ]:
        with pytest.raises(ConfigError, match=message) as e:
            trdata.Bytes(blobs, extras=extras)  # type: ignore[arg-type]
        assert e.value.parameter == "extras"


def test_extras_are_never_dropped_silently_by_a_pack(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"its extras \(caption\) cannot be packed yet") as e:
        trdata.pack(trdata.Bytes([jpeg(0)], extras={"caption": ["c"]}), tmp_path / "x.trd", progress=False)
    assert e.value.parameter == "source" and not (tmp_path / "x.trd").exists()
    with pytest.warns(UserWarning, match="Captioned.__getitem__ returned extras; they are not stored"):
        trdata.pack(Captioned(), tmp_path / "c.trd", progress=False)  # a map-style dataset packs as it reads
    assert len(trdata.Packed(tmp_path / "c.trd")) == N
