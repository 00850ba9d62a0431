"""Extras through ``trdata.pack``: every source's extra fields (FileList/Bytes/Arrays ``extras=``, a dataset's third
item, WebDataset members written by webdataset's own TarWriter, another packed file) are stored in the packed
file and come back in ``batch.extras`` exactly as the source delivers them, in both modes; values a packed file
cannot hold, bad members and damaged extras are typed errors naming the field, the sample or the record, and
nothing is left at the destination."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import EXTRAS, Captioned, check_extras, extras_jpeg, write_wds
from _fixtures import EXTRAS_KW as KW
from _fixtures import EXTRAS_N as N
from trdata.errors import ConfigError, DecodeError
from trdata.sources.packed import inspect

MIXED: dict[str, list[Any]] = {
    "caption": [f"caption {i} ✓" for i in range(N)],
    "raw": [bytes([i]) * (i + 1) for i in range(N)],
    "maybe": [None if i % 3 == 0 else {"k": [i, 1.5, None, True]} for i in range(N)],
    "number": [i * 0.25 for i in range(N)],
    "mat": [np.arange(6, dtype=np.int16).reshape(2, 3) * i for i in range(N)],
}


def batches(source: Any, **kw: Any) -> list[tuple[list[int], np.ndarray, dict[str, Any]]]:
    with trdata.Loader(source, workers=2, reproducible=True, **{**KW, **kw}) as ld:
        return [(b.indices.tolist(), np.asarray(b.images).copy(), b.extras) for b in ld]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b)
        )
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def assert_same_batches(want: list[Any], got: list[Any]) -> None:
    assert len(want) == len(got)
    for (wi, wim, wex), (gi, gim, gex) in zip(want, got):
        assert wi == gi
        np.testing.assert_array_equal(wim, gim)
        assert set(wex) == set(gex)
        for name in wex:
            assert same(wex[name], gex[name]), (name, wex[name], gex[name])


@pytest.mark.parametrize("kind", ["FileList", "Bytes"])
@pytest.mark.parametrize("extras", [EXTRAS, MIXED], ids=["captions-json-arrays", "mixed-kinds-and-missing"])
def test_file_and_memory_sources_extras_survive_a_pack_in_both_modes(
    tmp_path: Path, extras: dict[str, Any], kind: str
) -> None:
    if kind == "FileList":
        for i in range(N):
            (tmp_path / f"{i}.jpg").write_bytes(extras_jpeg(i))
        src: Any = trdata.FileList(
            [str(tmp_path / f"{i}.jpg") for i in range(N)], list(range(N)), extras=extras
        )
    else:
        src = trdata.Bytes([extras_jpeg(i) for i in range(N)], list(range(N)), extras=extras)
    dst = tmp_path / "x.trd"
    trdata.pack(src, dst, progress=False, block_bytes=4096)
    assert inspect(dst)["version"] == 2
    want = batches(src)
    for mode in ("full", "partial"):
        packed = trdata.Packed(dst, mode)
        assert set(packed.extras) == set(extras)  # in the order they first appear in the samples
        if mode == "full":
            assert_same_batches(want, batches(packed))
        else:  # partial mode reads blocks in its own order: the same samples, each with its own extras
            per_sample = {}
            for ix, _, ex in batches(packed):
                for r, i in enumerate(ix):
                    per_sample[i] = {k: v[r] for k, v in ex.items()}
            assert set(per_sample) == set(range(N))
            for i, got in per_sample.items():
                for name, values in extras.items():
                    assert same(values[i], got[name]) or (
                        isinstance(values[i], tuple) and list(values[i]) == got[name]
                    )
    if extras is EXTRAS:
        with trdata.Loader(trdata.Packed(dst, "partial"), workers=2, **KW) as ld:  # type: ignore[arg-type]
            assert check_extras(ld) == 12


def test_a_pack_without_extras_is_still_version_1(tmp_path: Path) -> None:
    trdata.pack(trdata.Bytes([extras_jpeg(i) for i in range(3)]), tmp_path / "x.trd", progress=False)
    assert inspect(tmp_path / "x.trd")["version"] == 1
    assert trdata.Packed(tmp_path / "x.trd").extras == ()


def test_a_datasets_extras_and_a_repack_keep_them(tmp_path: Path) -> None:
    trdata.pack(Captioned(), tmp_path / "c.trd", progress=False)
    packed = trdata.Packed(tmp_path / "c.trd")
    assert packed.extras == ("caption", "meta", "emb", "ragged")
    with trdata.Loader(packed, workers=2, **KW) as ld:  # type: ignore[arg-type]
        assert check_extras(ld) == 12
    trdata.pack(packed, tmp_path / "again.trd", progress=False)  # stored bytes copied as they are
    assert_same_batches(batches(packed), batches(trdata.Packed(tmp_path / "again.trd")))


def test_webdataset_members_written_by_tarwriter_survive_a_pack(tmp_path: Path) -> None:
    members = [
        {
            "__key__": f"s{i:04d}",
            "jpg": extras_jpeg(i),
            "cls": i % 4,
            "txt": f"a cat {i} ✓",
            "json": {"i": i},
            "npy": np.eye(2) * i,
        }
        for i in range(N)
    ]
    members[4].pop("json")  # a sample without a member: None in both
    shard = write_wds(tmp_path / "train-000000.tar", members)
    src = trdata.WebDataset(shard, extras=("txt", "json", "npy"), cache_dir=False)
    trdata.pack(src, tmp_path / "w.trd", progress=False)
    packed = trdata.Packed(tmp_path / "w.trd")
    assert packed.extras == ("txt", "json", "npy")
    want, got = batches(src), batches(packed)
    assert_same_batches(want, got)
    assert any(None in ex["json"] for _, _, ex in got)


def test_values_a_pack_cannot_hold_are_refused_naming_field_and_sample(tmp_path: Path) -> None:
    for bad, message in [
        ({1, 2}, "'tags' of sample 2 is a set a packed file cannot store"),
        (float("nan"), "'tags' of sample 2 is a float"),
        (np.array([object()]), "'tags' of sample 2 is an object array"),
    ]:
        values: list[Any] = ["ok"] * 4
        values[2] = bad
        with pytest.raises(ConfigError, match=message) as e:
            trdata.pack(
                trdata.Bytes([extras_jpeg(i) for i in range(4)], extras={"tags": values}),
                tmp_path / "x.trd",
                progress=False,
            )
        assert e.value.parameter == "extras"
        assert not (tmp_path / "x.trd").exists() and not list(tmp_path.iterdir())
    big = ["x" * (trdata._core.MAX_EXTRA_BYTES + 1)]
    with pytest.raises(ConfigError, match="is 16777217 bytes") as e:
        trdata.pack(
            trdata.Bytes([extras_jpeg(0)], extras={"caption": big}), tmp_path / "x.trd", progress=False
        )
    assert e.value.parameter == "extras" and not list(tmp_path.iterdir())


def test_text_a_pack_could_not_read_back_is_refused_at_pack_time(tmp_path: Path) -> None:
    """A str with a lone surrogate (``os.fsdecode`` of a non-UTF-8 name, half a UTF-16 pair) was written with
    ``surrogatepass``: the pack succeeded and every read of the record failed. Now it is a ConfigError naming the
    field and the sample, and nothing is published (no file, no temp file)."""

    class Surrogates:
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> tuple[bytes, int, dict[str, Any]]:
            return extras_jpeg(i), 0, {"caption": "fine" if i != 2 else "name \udce9.jpg"}

    for source in (
        Surrogates(),
        trdata.Bytes([extras_jpeg(i) for i in range(4)], extras={"caption": ["a", "b", "\ud800", "d"]}),
    ):
        with pytest.raises(
            ConfigError, match="'caption' of sample 2 is a str that holds a lone surrogate"
        ) as e:
            trdata.pack(source, tmp_path / "x.trd", progress=False)
        assert e.value.parameter == "extras"
        assert not list(tmp_path.iterdir())
    # inside a JSON value, and in a field's name
    for extras, message in (
        ({"meta": [{"k": "\ud800"}] * 4}, "'meta' of sample 0 is a"),
        ({"bad \ud800": ["x"] * 4}, "the field name 'bad \\\\ud800' of sample 0"),
    ):
        with pytest.raises(ConfigError, match=message):
            trdata.pack(
                trdata.Bytes([extras_jpeg(i) for i in range(4)], extras=extras),
                tmp_path / "x.trd",
                progress=False,
            )
        assert not list(tmp_path.iterdir())


def test_a_bfloat16_tensor_extra_is_a_config_error_naming_field_and_sample(tmp_path: Path) -> None:
    """numpy has no bfloat16: ``np.asarray`` of such a tensor raised a bare TypeError naming neither the field nor
    the sample (storing its bits as uint16 would not give the value back). A ConfigError naming both now."""
    torch = pytest.importorskip("torch")
    values: list[Any] = [torch.zeros(3)] * 4
    values[1] = torch.zeros(3, dtype=torch.bfloat16)
    with pytest.raises(ConfigError, match="'emb' of sample 1 is a Tensor of dtype torch.bfloat16") as e:
        trdata.pack(
            trdata.Bytes([extras_jpeg(i) for i in range(4)], extras={"emb": values}),
            tmp_path / "x.trd",
            progress=False,
        )
    assert e.value.parameter == "extras" and ".float()" in str(e.value)
    assert not list(tmp_path.iterdir())


def test_a_bad_webdataset_member_fails_the_pack_naming_shard_and_key(tmp_path: Path) -> None:
    members = [{"__key__": f"s{i}", "jpg": extras_jpeg(i), "cls": 0, "txt": "fine"} for i in range(4)]
    members[2]["txt"] = b"\xff\xfe not utf-8"
    shard = write_wds(tmp_path / "bad.tar", members)
    (tmp_path / "out").mkdir()
    with pytest.raises(
        DecodeError, match=r"bad.tar: sample 's2': .txt member is not valid \(UnicodeDecodeError"
    ):
        trdata.pack(
            trdata.WebDataset(shard, extras=("txt",), cache_dir=False),
            tmp_path / "out" / "x.trd",
            progress=False,
        )
    assert not list((tmp_path / "out").iterdir())


def test_damaged_extras_are_a_decode_error_naming_the_record(tmp_path: Path) -> None:
    captions = [f"caption number {i}" for i in range(N)]
    dst = tmp_path / "x.trd"
    trdata.pack(
        trdata.Bytes([extras_jpeg(i) for i in range(N)], extras={"caption": captions}), dst, progress=False
    )
    data = bytearray(dst.read_bytes())
    at = bytes(data).rindex(b"caption number 7")
    data[at + 3] ^= 0x20
    dst.write_bytes(bytes(data))
    for mode in ("full", "partial"):
        packed = trdata.Packed(dst, mode)  # the header and the extras index are intact: it opens
        with pytest.raises(
            DecodeError, match=r"x.trd#7.*extras of packed record 7 fail their CRC32C check"
        ) as e:
            with trdata.Loader(packed, batch_size=N, transforms=[trdata.CenterCrop(4)]) as ld:
                next(iter(ld))
        assert e.value.index == 7
        assert [packed._row_extras(i, 0)["caption"] for i in (6, 8)] == [captions[6], captions[8]]
