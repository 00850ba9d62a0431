"""Extra per-sample fields (captions, parsed JSON, arrays) reach ``batch.extras`` with their rows: per field a list
in row order, or one stacked array when every value is an array of one shape; padded and filled rows repeat their
sample's, as labels do."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import (
    CAPTIONS,
    EMB,
    EXTRAS,
    META,
    Captioned,
    check_extras,
    extras_jpeg,
    photo,
    write_wds,
)
from _fixtures import EXTRAS_KW as KW
from _fixtures import EXTRAS_N as N
from trdata.errors import ConfigError


def test_in_memory_and_file_sources_deliver_extras_with_their_rows(tmp_path: Path) -> None:
    paths = []
    for i in range(N):
        p = tmp_path / f"{i}.jpg"
        p.write_bytes(extras_jpeg(i))
        paths.append(str(p))
    sources = [
        trdata.FileList(paths, list(range(N)), extras=EXTRAS),
        trdata.Bytes([extras_jpeg(i) for i in range(N)], list(range(N)), extras=EXTRAS),
        trdata.Arrays(np.stack([photo(i, 20, 16) for i in range(N)]), list(range(N)), extras=EXTRAS),
    ]
    for src in sources:
        with trdata.Loader(src, workers=2, **KW) as ld:  # type: ignore[arg-type]
            assert (
                check_extras(ld) == 12
            )  # 11 samples padded to 3 batches of 4: the pad row repeats a sample's extras
        for rank in range(2):  # ranks: each its share, with its rows' extras
            with trdata.Loader(src, workers=1, rank=rank, world_size=2, **KW) as ld:  # type: ignore[arg-type]
                check_extras(ld)
    with trdata.Loader(trdata.Bytes([extras_jpeg(0)] * N), **KW) as ld:  # type: ignore[arg-type]
        assert next(iter(ld)).extras == {}


def test_a_datasets_third_item_is_its_extras() -> None:
    with trdata.Loader(Captioned(), workers=3, **KW) as ld:  # type: ignore[arg-type]
        assert check_extras(ld) == 12


def test_extras_are_checked_when_the_source_is_made() -> None:
    blobs = [extras_jpeg(0)] * 3
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


def test_webdataset_members_as_extras_and_a_json_field_as_target(tmp_path: Path) -> None:
    members = [
        {
            "__key__": f"s{i:04d}",
            "jpg": extras_jpeg(i),
            "txt": CAPTIONS[i] + " ✓",
            "json": {"label": i % 4, "meta": META[i]},
            "npy": EMB[i],
        }
        for i in range(N)
    ]
    shard = write_wds(tmp_path / "train-000000.tar", members)
    for cache in (tmp_path / "cache", tmp_path / "cache"):  # built, then read from the signed cache
        src = trdata.WebDataset(
            shard, target_key="json:label", extras=("txt", "json", "npy"), cache_dir=cache
        )
        assert src.labels == [i % 4 for i in range(N)]
        with trdata.Loader(src, workers=2, **KW) as ld:  # type: ignore[arg-type]
            for b in ld:
                idx = b.indices.tolist()
                assert b.labels.tolist() == [i % 4 for i in idx]
                assert b.extras["txt"] == [CAPTIONS[i] + " ✓" for i in idx]
                assert b.extras["json"] == [{"label": i % 4, "meta": META[i]} for i in idx]
                np.testing.assert_array_equal(b.extras["npy"], np.stack([EMB[i] for i in idx]))
    plain = trdata.WebDataset(shard, target_key="json:label", cache_dir=tmp_path / "cache")
    with trdata.Loader(plain, **KW) as ld:  # type: ignore[arg-type]
        assert next(iter(ld)).extras == {}
    with pytest.raises(trdata.DecodeError, match="has no field 'nope'"):
        trdata.WebDataset(shard, target_key="json:nope", cache_dir=False)


def _npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": shape})
    return f.getvalue()


@pytest.mark.parametrize(
    ("member", "message"),
    [
        ({"txt": b"\xff\xfe not utf-8"}, "'s0000': .txt member is not valid (UnicodeDecodeError"),
        ({"json": b"[" * 100_000}, "'s0000': .json member is not valid (RecursionError"),
        ({"json": b"{not json"}, "'s0000': .json member is not valid (JSONDecodeError"),
        (
            {"txt": b"x" * (16 << 20 | 1)},
            "'s0000': .txt member of 16777217 bytes is over the 16777216-byte limit",
        ),
        # a forged .npy header (written by numpy's own writer): 10**12 float64 elements over 16 bytes of data
        ({"npy": _npy_header("<f8", (10**12,)) + bytes(16)}, "ValueError: header says (1000000000000,)"),
        ({"npy": _npy_header("|O", (1,)) + bytes(8)}, "object arrays (pickles) are not read"),
    ],
)
def test_hostile_extras_are_typed_errors_naming_shard_and_key(
    tmp_path: Path, member: dict[str, bytes], message: str
) -> None:
    shard = tmp_path / "bad.tar"
    import tarfile

    with tarfile.open(shard, "w") as tar:
        for name, data in [
            ("s0000.jpg", extras_jpeg(0)),
            ("s0000.cls", b"1"),
            *((f"s0000.{e}", d) for e, d in member.items()),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    src = trdata.WebDataset(str(shard), extras=tuple(member), cache_dir=False)
    with (
        pytest.raises(trdata.DecodeError) as e,
        trdata.Loader(src, batch_size=1, transforms=[trdata.CenterCrop(4)]) as ld,
    ):
        next(iter(ld))
    assert str(shard) in str(e.value) and message in str(e.value), str(e.value)


def test_webdataset_extras_argument_is_checked(tmp_path: Path) -> None:
    shard = write_wds(tmp_path / "s.tar", [{"__key__": "a", "jpg": extras_jpeg(0), "cls": 0}])
    for bad in ("txt", [1], [""], None):
        with pytest.raises(ConfigError) as e:
            trdata.WebDataset(shard, extras=bad, cache_dir=False)  # type: ignore[arg-type]
        assert e.value.parameter == "extras"


def test_string_targets_map_through_classes_as_torchvision_names_them(tmp_path: Path) -> None:
    names = ["cat", "dog", "fox"]
    src = trdata.Bytes(
        [extras_jpeg(i) for i in range(6)], ["dog", "cat", "fox", "fox", "cat", 1], classes=names
    )
    assert src.labels == [1, 0, 2, 2, 0, 1] and src.class_to_idx == {"cat": 0, "dog": 1, "fox": 2}
    with pytest.raises(ConfigError, match="'cow' \\(element 1\\) is not one of the classes") as e:
        trdata.Bytes([extras_jpeg(0)] * 2, ["cat", "cow"], classes=names)
    assert e.value.parameter == "labels"
    with pytest.raises(ConfigError, match="is a str"):  # without classes a string is refused, never parsed
        trdata.Bytes([extras_jpeg(0)], ["cat"])

    class Named:
        classes = names

        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: int) -> tuple[bytes, str]:
            return extras_jpeg(i), names[(i + 1) % 3]

    with trdata.Loader(Named(), batch_size=3, transforms=[trdata.CenterCrop(8)], shuffle=False) as ld:  # type: ignore[arg-type]
        assert next(iter(ld)).labels.tolist() == [1, 2, 0]


FUZZ_EXAMPLES = int(__import__("os").environ.get("TRDATA_FUZZ_EXAMPLES", "300"))


def test_fuzz_the_npy_member_reader() -> None:
    """Random bytes, truncations and byte flips of real .npy files: the reader returns np.load's array or raises
    ValueError (a DecodeError naming shard and key in the source), and never allocates from a forged header (no
    MemoryError), whatever the bytes. (It found a forged header raising tokenize's TokenError, which escaped.)"""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    from trdata.sources.extras import _npy

    def npy(a: np.ndarray) -> bytes:
        f = io.BytesIO()
        np.save(f, a, allow_pickle=False)
        return f.getvalue()

    seeds = [
        npy(np.arange(12, dtype=np.float32).reshape(3, 4)),
        npy(np.zeros((2, 2), np.uint8)),
        npy(np.asfortranarray(np.ones((3, 2), ">i4"))),
        npy(np.array(5.0)),
    ]

    @hypothesis.settings(max_examples=FUZZ_EXAMPLES, deadline=None)
    @hypothesis.given(
        base=st.sampled_from(seeds),
        cut=st.integers(0, 200),
        flips=st.lists(st.tuples(st.integers(0, 199), st.integers(0, 255)), max_size=4),
        tail=st.binary(max_size=32),
    )
    def check_extras(base: bytes, cut: int, flips: list[tuple[int, int]], tail: bytes) -> None:
        data = bytearray(base[: len(base) - min(cut, len(base))] if cut % 3 else base)
        for at, value in flips:
            if at < len(data):
                data[at] = value
        data += tail if cut % 5 == 0 else b""
        try:
            got = _npy(bytes(data))
        except ValueError:  # what the member reader turns into a DecodeError naming shard and key
            return
        want = np.load(io.BytesIO(bytes(data)), allow_pickle=False)
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)

    check_extras()
