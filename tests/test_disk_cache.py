"""The disk cache of streamed packs (``trdata.Packed(..., mode="partial", cache_dir=..., cache_disk_bytes=...)``;
src/storage/disk_cache.rs) with real processes sharing one folder, reading one pack over S3 (moto's server on
loopback, behind a pass-through proxy that counts the ranged GETs the server sees).

The reference is the same pack read from the local file without a cache: every process's batches must equal it
byte for byte, whatever the cache held, lost, or had damaged; the folder never holds more than
``cache_disk_bytes``; a restart reads its blocks from disk; a process killed with SIGKILL leaves nothing a later
run uses wrongly."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import crc32c, write_jpegs
from _servers import CREDS, s3_client, start_moto, start_proxy, start_range_server, stop
from trdata.errors import ConfigError

pytest.importorskip("moto", reason="the S3 tests run moto's server (pip install 'moto[server]')")
pytest.importorskip("boto3")

BUCKET = "trdata-disk-cache"
KEY = "sets/train.trd"
BIG = 64 << 20  # the whole pack fits
SMALL = 1 << 20  # the smallest cache_disk_bytes: about a third of the pack

# One epoch of a reproducible loader over the pack (the same in the processes and in the reference), written as
# an .npz next to the source's storage_stats() and the loader's errors_skipped as .json. With "forever" it keeps
# iterating and says "batch" after each batch (to be killed mid-epoch).
WORKER = r"""
import json, sys
import numpy as np, trdata
a = json.loads(sys.argv[1])
src = trdata.Packed(a["url"], "partial", window_blocks=2, storage_options=a["options"], cache_dir=a["cache_dir"],
                    cache_disk_bytes=a["limit"])
KW = dict(batch_size=6, dtype="uint8", layout="NHWC", seed=5, shuffle=True, reproducible=True, last_batch="partial",
          transforms=[trdata.RandomResizedCrop(24, scale=(0.3, 1.0)), trdata.RandomHorizontalFlip()])
with trdata.Loader(src, workers=2, on_error=a["on_error"], **KW) as ld:
    while True:
        out = []
        for b in ld:
            out.append((b.images.copy(), np.asarray(b.labels).copy(), np.asarray(b.indices).copy()))
            if a["forever"]:
                print("batch", flush=True)
        if not a["forever"]:
            break
    skipped = ld.stats()["errors_skipped"]
np.savez(a["out"], *[x for batch in out for x in batch])
with open(a["out"] + ".json", "w") as f:
    json.dump({**src.storage_stats(), "errors_skipped": skipped}, f)
"""


@pytest.fixture(scope="module")
def pack_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pack of 48 JPEGs (about 3 MiB) in blocks of 64 KiB: many blocks, more than SMALL holds."""
    root = tmp_path_factory.mktemp("disk-src")
    for c in range(4):
        write_jpegs(
            root / f"c{c}", 12, size=lambda i, c=c: (300 + 7 * ((i + c) % 5), 220 + 5 * (i % 4)), quality=97
        )
    dst = tmp_path_factory.mktemp("disk-pack") / "train.trd"
    trdata.pack(trdata.ImageFolder(root), dst, progress=False, block_bytes=64 << 10)
    assert dst.stat().st_size > 2 * SMALL, "the small cache must not hold the whole pack"
    return dst


@pytest.fixture(scope="module")
def server(pack_file: Path) -> Iterator[Any]:
    """moto with the pack uploaded, behind a proxy that passes everything through and counts ranged GETs."""
    proc, endpoint = start_moto()
    s3 = s3_client(endpoint)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=pack_file.read_bytes())
    proxy = start_proxy(endpoint)
    yield proxy
    stop(proxy)
    proc.terminate()
    proc.wait(timeout=10)


def options(server: Any) -> dict[str, Any]:
    return {"aws_endpoint": server.endpoint, "aws_allow_http": True, **CREDS}


@pytest.fixture(scope="module")
def reference(pack_file: Path, tmp_path_factory: pytest.TempPathFactory) -> list[np.ndarray]:
    """The worker's epoch over the local file, without a cache."""
    out = tmp_path_factory.mktemp("reference") / "local"
    return finish(start(str(pack_file), None, None, None, out), out)[0]


@pytest.fixture(scope="module")
def open_gets(server: Any) -> int:
    """The ranged GETs opening the pack takes (header and index), without reading a block."""
    before = server.ranged
    trdata.Packed(f"s3://{BUCKET}/{KEY}", "partial", storage_options=options(server))
    return server.ranged - before


def start(
    url: str,
    storage_options: Any,
    cache_dir: Path | None,
    limit: int | None,
    out: Path,
    forever: bool = False,
    on_error: str = "raise",
) -> subprocess.Popen[str]:
    """The worker over `url`, with a cache in `cache_dir` (None: without)."""
    args = {
        "url": url,
        "options": storage_options,
        "cache_dir": None if cache_dir is None else str(cache_dir),
        "limit": limit,
        "out": str(out),
        "forever": forever,
        "on_error": on_error,
    }
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def start_s3(
    server: Any, cache_dir: Path, out: Path, limit: int = BIG, forever: bool = False
) -> subprocess.Popen[str]:
    """The worker over the pack in the bucket, with a cache."""
    return start(f"s3://{BUCKET}/{KEY}", options(server), cache_dir, limit, out, forever)


def finish(proc: subprocess.Popen[str], out: Path) -> tuple[list[np.ndarray], dict[str, int]]:
    """The process's batches and storage_stats once it exited cleanly."""
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    with np.load(f"{out}.npz") as z:
        got = [z[f"arr_{i}"] for i in range(len(z.files))]
    return got, json.loads(Path(f"{out}.json").read_text())


def run(server: Any, cache_dir: Path, out: Path, limit: int = BIG) -> tuple[list[np.ndarray], dict[str, int]]:
    return finish(start_s3(server, cache_dir, out, limit), out)


def assert_same(got: list[np.ndarray], reference: list[np.ndarray]) -> None:
    assert len(got) == len(reference)
    for a, b in zip(got, reference):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def folder_bytes(cache_dir: Path) -> int:
    return sum(p.stat().st_size for p in cache_dir.rglob("*") if p.is_file())


def entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.rglob("*.blk"))


def clean(stats: dict[str, int]) -> bool:
    return stats["disk_corrupt_removed"] == 0 and stats["disk_errors"] == 0 and stats["storage_failures"] == 0


@pytest.mark.parametrize("limit", [BIG, SMALL], ids=["fits", "smaller-than-the-pack"])
def test_processes_share_a_folder_and_a_restart_reads_from_disk(
    server: Any, reference: list[np.ndarray], open_gets: int, tmp_path: Path, limit: int
) -> None:
    cache = tmp_path / "cache"
    procs = [(start_s3(server, cache, tmp_path / f"p{i}", limit), tmp_path / f"p{i}") for i in range(3)]
    results = [finish(p, out) for p, out in procs]
    for got, stats in results:
        assert_same(got, reference)
        assert clean(stats), stats
    assert folder_bytes(cache) <= limit
    assert sum(s["disk_admitted_bytes"] for _, s in results) > 0
    # A restart: the blocks come from disk.
    before = server.ranged
    got, stats = run(server, cache, tmp_path / "restart", limit)
    assert_same(got, reference)
    assert clean(stats), stats
    block_gets = server.ranged - before - open_gets
    assert stats["disk_hits"] > 0
    if limit == BIG:
        assert (block_gets, stats["disk_misses"]) == (0, 0), stats
    else:  # the admitted blocks are kept, the others fetched each epoch: never everything again
        assert stats["disk_misses"] > 0 and stats["disk_rejected"] > 0, stats
        assert 0 < block_gets == stats["disk_misses"], (block_gets, stats)
    assert folder_bytes(cache) <= limit


# A writer of the cache caught mid-write, as the cache's own writers are (storage/disk_cache.rs): its temp file in
# tmp/, named with its pid, half written, under flock(LOCK_EX) until it exits.
HALF_WRITER = r"""
import fcntl, os, sys, time
f = open(os.path.join(sys.argv[1], f"{os.getpid()}-0.tmp"), "wb")
fcntl.flock(f, fcntl.LOCK_EX)
f.write(b"half a block")
f.flush()
print(f.name, flush=True)
time.sleep(600)
"""


def test_a_process_killed_mid_epoch_leaves_nothing_used_wrongly(
    server: Any, reference: list[np.ndarray], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    proc = start_s3(server, cache, tmp_path / "killed", forever=True)
    assert proc.stdout is not None
    for _ in range(3):  # three batches in: blocks are being fetched and admitted
        assert proc.stdout.readline() == "batch\n", proc.stderr.read() if proc.stderr else ""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    # A writer caught mid-write: kept while it lives (a later process must not take its file), removed once it
    # is killed (the kernel released its lock).
    tmp = cache / "trdata-blocks-v1" / "tmp"
    writer = subprocess.Popen(
        [sys.executable, "-c", HALF_WRITER, str(tmp)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    half = Path(writer.stdout.readline().strip())
    try:
        got, stats = run(server, cache, tmp_path / "beside-a-writer")
        assert_same(got, reference)
        assert clean(stats), stats
        assert half.exists(), "a live writer's file stays"
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=60)
    got, stats = run(server, cache, tmp_path / "after")
    assert_same(got, reference)
    assert clean(stats), stats
    assert stats["disk_leftovers_removed"] >= 1 and not any(tmp.iterdir()), "the dead writers' files are gone"
    assert stats["disk_misses"] == 0, "every block is on disk, whole, and used"
    assert folder_bytes(cache) <= BIG


def test_a_damaged_cached_block_is_refetched_and_counted(
    server: Any, reference: list[np.ndarray], open_gets: int, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    run(server, cache, tmp_path / "fill")
    victim = entries(cache)[0]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x40  # the payload's last byte
    victim.write_bytes(bytes(data))
    before = server.ranged
    got, stats = run(server, cache, tmp_path / "after")
    assert_same(got, reference)
    assert stats["disk_corrupt_removed"] == 1 and stats["disk_errors"] == 0, stats
    assert server.ranged - before - open_gets == 1, "only the damaged block is fetched again"
    assert victim.read_bytes() != bytes(data), "the block was admitted again, whole"


def test_a_local_pack_uses_the_cache_too(
    pack_file: Path, reference: list[np.ndarray], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    for name in ("first", "again"):
        got, stats = finish(start(str(pack_file), None, cache, BIG, tmp_path / name), tmp_path / name)
        assert_same(got, reference)
        assert clean(stats), stats
    assert stats["disk_hits"] > 0 and stats["disk_misses"] == 0 and stats["disk_admitted_bytes"] == 0, stats
    assert "disk_hits" not in trdata.Packed(pack_file, "partial").storage_stats()


def test_bad_values_name_their_parameter(pack_file: Path, tmp_path: Path) -> None:
    def refused(param: str, shown: str, **kw: Any) -> None:
        with pytest.raises(ConfigError) as e:
            trdata.Packed(pack_file, kw.pop("mode", "partial"), **kw)
        assert e.value.parameter == param
        assert str(e.value).startswith(f"invalid {param}: {shown}"), str(e.value)

    cache = tmp_path / "cache"
    for bad in (0, -1, 1000, 2**61):
        refused("cache_disk_bytes", f"{bad} must be in ", cache_dir=cache, cache_disk_bytes=bad)
    refused("cache_disk_bytes", "True must be an int", cache_dir=cache, cache_disk_bytes=True)
    refused("cache_disk_bytes", "must be given with cache_dir", cache_dir=cache)
    refused("cache_disk_bytes", "is the bound", cache_disk_bytes=BIG)
    refused("cache_dir", "applies to mode='partial'", mode="full", cache_dir=cache, cache_disk_bytes=BIG)
    assert not cache.exists(), "nothing is created for a refused cache"
    a_file = tmp_path / "file"
    a_file.write_bytes(b"x")
    refused("cache_dir", f"{a_file} is a file, not a folder", cache_dir=a_file, cache_disk_bytes=BIG)


# ---- bytes damaged on the wire (a plain HTTP server that flips a byte of chosen ranged answers) -------------


@pytest.fixture
def http(pack_file: Path) -> Iterator[Any]:
    """A Range server over the pack's folder; set `corrupt` on it to damage answers (tests/_servers.py)."""
    server = start_range_server(pack_file.parent)
    server.url = f"{server.base}/{pack_file.name}"
    yield server
    stop(server)


def block_offsets(pack: Path) -> list[int]:
    """The blocks' offsets, from the pack's blocks table (layout: src/source/packed.rs)."""
    data = pack.read_bytes()
    table, size = struct.unpack_from("<QQ", data, 72)
    return [struct.unpack_from("<Q", data, table + 24 * k)[0] for k in range(size // 24)]


def run_http(
    server: Any, cache: Path, out: Path, on_error: str = "raise"
) -> tuple[list[np.ndarray], dict[str, int]]:
    return finish(start(server.url, None, cache, BIG, out, on_error=on_error), out)


def test_a_faulty_transfer_never_poisons_the_cache_for_later_runs(
    http: Any, pack_file: Path, reference: list[np.ndarray], tmp_path: Path
) -> None:
    """Run 1 reads through a link that damages every answer of some blocks (their first record's first byte):
    each such block is read again from the store, still damaged, so its first record is that run's skipped sample
    and the block is never admitted. Runs 2 and 3 on the same cache, the link healthy: every record, no skip."""
    cache = tmp_path / "cache"
    bad = set(block_offsets(pack_file)[1::4])
    http.corrupt = lambda start: start in bad
    _, faulty = run_http(http, cache, tmp_path / "faulty", on_error="skip")
    http.corrupt = None
    got, healthy = run_http(http, cache, tmp_path / "healthy", on_error="skip")
    got_again, again = run_http(http, cache, tmp_path / "again", on_error="skip")
    assert healthy["errors_skipped"] == again["errors_skipped"] == 0, (healthy, again)
    assert_same(got, reference)
    assert_same(got_again, reference)
    assert clean(healthy) and clean(again) and healthy["storage_refetches"] == again["storage_refetches"] == 0
    assert healthy["disk_misses"] == len(bad), "the damaged blocks were never admitted"
    assert again["disk_misses"] == 0 and again["disk_hits"] > 0, again
    assert faulty["errors_skipped"] == len(bad), faulty
    # each fetch of a bad block: its first read and two more (a block evicted and needed again is fetched again)
    assert http.corrupted >= 3 * len(bad) and http.corrupted % 3 == 0
    assert faulty["storage_refetches"] == 2 * http.corrupted // 3, faulty


def test_a_block_damaged_once_on_the_wire_costs_a_read_not_a_sample(
    http: Any, pack_file: Path, reference: list[np.ndarray], tmp_path: Path
) -> None:
    """The first answer of every block is damaged, the next one whole: nothing is lost, under on_error='raise'
    too, and each block counts one refetch; what was admitted serves the next run."""
    cache = tmp_path / "cache"
    blocks, seen = set(block_offsets(pack_file)), set()

    def first_answer(start: int) -> bool:
        fresh = start in blocks and start not in seen
        seen.add(start)
        return fresh

    http.corrupt = first_answer
    got, stats = run_http(http, cache, tmp_path / "transient")
    assert_same(got, reference)
    assert stats["errors_skipped"] == 0 and clean(stats), stats
    assert stats["storage_refetches"] == http.corrupted == len(blocks), stats
    got, stats = run_http(http, cache, tmp_path / "next")
    assert_same(got, reference)
    assert stats["disk_misses"] == 0 and stats["storage_refetches"] == 0, stats


def test_an_entry_poisoned_by_an_older_writer_is_dropped_and_fetched_again(
    http: Any, reference: list[np.ndarray], tmp_path: Path
) -> None:
    """An older trdata admitted a block as received: the entry is whole (its CRC32C matches its payload, its
    header is valid) but the payload's first record has a flipped byte. It is found by the records' check, removed,
    counted, and the block is fetched again and admitted intact."""
    cache = tmp_path / "cache"
    run_http(http, cache, tmp_path / "fill")
    victim = entries(cache)[0]
    entry = bytearray(victim.read_bytes())
    (header_bytes,) = struct.unpack_from("<I", entry, 8)
    entry[header_bytes] ^= 0x01  # the block's first byte: its first record's
    struct.pack_into("<I", entry, 20, crc32c(bytes(entry[header_bytes:])))
    struct.pack_into("<I", entry, 52, crc32c(bytes(entry[:52] + entry[56:header_bytes])))
    victim.write_bytes(bytes(entry))
    got, stats = run_http(http, cache, tmp_path / "after")
    assert_same(got, reference)
    assert stats["disk_corrupt_removed"] == 1 and stats["disk_misses"] == 1, stats
    assert stats["errors_skipped"] == 0 and stats["storage_failures"] == 0, stats
    assert victim.read_bytes() != bytes(entry), "the block was admitted again, intact"
