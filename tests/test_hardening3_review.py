"""Review of the third hardening round (CHANGELOG "Fixed — hardening, third round"): hostile inputs against
its new code paths — the CIFAR restricted unpickler, the packer's temporary file and cancel points, the signed
WebDataset index cache and the batch ops — each on real files, threads or subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trdata
from trdata.sources import classic

# ---- CIFAR: dict keys that all share one hash ------------------------------------------------------------------


def _colliding_int_keys_pickle(n: int) -> bytes:
    """A protocol-2 pickle of one dict with n int keys k * (2**61 - 1): ints hash modulo 2**61 - 1 in every
    process, so all n share the hash 0 and each insertion probes past all earlier ones."""
    modulus = (1 << 61) - 1
    parts = [b"\x80\x02}("]  # PROTO 2, EMPTY_DICT, MARK
    for i in range(1, n + 1):
        k = i * modulus
        raw = k.to_bytes((k.bit_length() + 8) // 8, "little", signed=True)
        parts.append(b"\x8a" + bytes([len(raw)]) + raw + b"N")  # LONG1 key, NONE value
    parts.append(b"u.")  # SETITEMS, STOP
    return b"".join(parts)


def _cifar10_of(root: Path, data: bytes) -> None:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"):
        (folder / name).write_bytes(data)
    (folder / "test_batch").write_bytes(data)
    (folder / "batches.meta").write_bytes(data)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        pytest.param(lambda: _colliding_int_keys_pickle(20_000), "key of type int", id="colliding-int-keys"),
        pytest.param(
            lambda: b"\x80\x02}G\x3f\xf0\x00\x00\x00\x00\x00\x00Ns.", "key of type float", id="float-key"
        ),
        pytest.param(lambda: b"\x80\x02}K\x01K\x02\x86Ns.", "key of type tuple", id="tuple-key"),
        pytest.param(lambda: b"\x80\x02\x8f(K\x01\x90.", "EMPTY_SET", id="set"),
        pytest.param(lambda: b"\x80\x02]K\x00Ns.", "SETITEM on a list", id="setitem-on-a-list"),
    ],
)
def test_cifar_dict_keys_are_names_and_sets_are_refused(tmp_path: Path, body: object, why: str) -> None:
    """A CIFAR dict's keys are str (Python 2 files) or bytes (Python 3 re-saves). 20,000 int keys sharing one
    hash (260 KB) took 2.6 s to load, quadratic in their number (a 10 MB file: over an hour); now any key that
    is not str/bytes, any set and any SETITEM on something else than a dict is refused naming the file."""
    data = body()  # type: ignore[operator]
    _cifar10_of(tmp_path, data)
    with pytest.raises(trdata.DecodeError) as e:
        classic.read_cifar(tmp_path, train=False)
    assert e.value.path.endswith("batches.meta")
    assert e.value.kind in ("bad-data", "forbidden-opcode")
    assert why in str(e.value)


def test_cifar_dicts_with_str_and_bytes_keys_still_load(tmp_path: Path) -> None:
    import pickle

    import numpy as np

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": [0, 1, 2, 1]}
    for name in (
        "data_batch_1",
        "data_batch_2",
        "data_batch_3",
        "data_batch_4",
        "data_batch_5",
        "test_batch",
    ):
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": ["a", "b", "c"]}, protocol=2))
    got = classic.read_cifar(tmp_path, train=True)
    assert got.images.shape == (20, 32, 32, 3)
    assert list(got.targets[:4]) == [0, 1, 2, 1]


# ---- pack: Ctrl-C, cancels and long destination names ------------------------------------------------------------


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


# ---- WebDataset: the index cache where the default key place is read-only ----------------------------------------


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
