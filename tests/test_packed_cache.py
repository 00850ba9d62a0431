"""The partial mode's plan-aware block cache (source/block_cache.rs): read-ahead in the plan's block order,
eviction by next use, ``cache_bytes`` / ``prefetch_blocks``, its counters, and what must not change with it.

Against a local pack and against S3 on loopback (moto's server; the sendfile S3 read server of tests/_servers.py
where the server must count GETs and bytes). Fetch counts are asserted only through bounds that hold in any thread
schedule, derived here from the plan's sizes: with a cache of C blocks, a window of W blocks, P blocks read
ahead and w workers, the first epoch fetches each of the N blocks once (the cache holds the open windows and the
read-ahead: no block with reads left is evicted), and the next epoch at most N − C + W + P + w of them (the
finished blocks the next epoch needs first stay cached; LRU would fetch all N again).

A checkpoint moving between S3 and the local file with the cache on (the default prefetch_blocks) is
tests/test_packed_remote.py::test_a_checkpoint_moves_between_s3_and_the_local_file."""

from __future__ import annotations

import _thread
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import write_jpegs
from _servers import CREDS, start_proxy, start_s3_read_server, stop

KW: dict[str, Any] = dict(
    batch_size=4,
    dtype="uint8",
    layout="NHWC",
    seed=3,
    shuffle=True,
    reproducible=True,
    last_batch="partial",
    prefetch=2,
    transforms=[trdata.RandomResizedCrop(20, scale=(0.3, 1.0)), trdata.RandomHorizontalFlip()],
)
WINDOW = 2
COUNTERS = (
    "storage_requests", "storage_bytes", "storage_retries", "storage_failures", "storage_refetches",
    "storage_wait_ns", "storage_inflight_bytes", "cache_hits", "cache_misses", "cache_prefetched_blocks",
    "cache_evictions", "cache_bytes",
)  # fmt: skip


@pytest.fixture(scope="module")
def pack_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pack of 96 JPEGs in 3 classes in blocks of at most 4 KiB: a few records per block, dozens of blocks."""
    root = tmp_path_factory.mktemp("cache-src")
    for c in range(3):
        write_jpegs(root / f"c{c}", 32, size=lambda i, c=c: (30 + 3 * ((i + c) % 4), 24 + 2 * (i % 3)))
    dst = tmp_path_factory.mktemp("cache-pack") / "train.trd"
    trdata.pack(trdata.ImageFolder(root), dst, progress=False, block_bytes=4096)
    return dst


@pytest.fixture(scope="module")
def blocks(pack_file: Path) -> tuple[int, int]:
    """(number of blocks, the writer's block size: at least the largest block of records this small)."""
    info = trdata.sources.packed.inspect(pack_file)
    n = int(info["blocks"])
    assert n >= 20, n
    return n, int(info["block_bytes"])


@pytest.fixture(scope="module")
def s3_url(moto: str, pack_file: Path) -> str:
    from _servers import s3_client

    s3 = s3_client(moto)
    s3.create_bucket(Bucket="cache-test")
    s3.put_object(Bucket="cache-test", Key="train.trd", Body=pack_file.read_bytes())
    return "s3://cache-test/train.trd"


@pytest.fixture
def read_server(pack_file: Path, tmp_path: Path) -> Iterator[Any]:
    """The sendfile S3 read server over a copy of the pack; it counts the GETs and the bytes it sent."""
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "train.trd").write_bytes(pack_file.read_bytes())
    server = start_s3_read_server(tmp_path)
    server.url = "s3://bench/train.trd"
    yield server
    stop(server)


def opts(endpoint: str, **more: Any) -> dict[str, Any]:
    return {"aws_endpoint": endpoint, "aws_allow_http": True, **CREDS, **more}


def epoch(ld: trdata.Loader, n: int, check: Any = None) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """One epoch's batches as (images, labels, indices), every sample exactly once; `check(stats)` after each."""
    out = []
    for b in ld:
        out.append((b.images.copy(), np.asarray(b.labels).copy(), np.asarray(b.indices).copy()))
        if check is not None:
            check(ld.stats())
    assert sorted(int(i) for _, _, x in out for i in x) == list(range(n)), "every sample exactly once"
    return out


def assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for (ia, la, xa), (ib, lb, xb) in zip(a, b):
        assert np.array_equal(xa, xb) and np.array_equal(la, lb)
        assert ia.tobytes() == ib.tobytes()


def settled(source: trdata.Packed) -> dict[str, int]:
    """The source's counters once no fetch is in flight (read-ahead tasks finish on their own)."""
    for _ in range(2000):
        s = source._native.storage_stats
        assert s is not None
        if s["storage_inflight_bytes"] == 0:
            return s
        time.sleep(0.005)
    raise AssertionError("fetches still in flight after 10 s")


def fetched(s: dict[str, int]) -> int:
    return s["cache_misses"] + s["cache_prefetched_blocks"]


def test_batches_equal_the_local_run_without_read_ahead(pack_file: Path, s3_url: str, moto: str) -> None:
    """Read-ahead and the cache move when bytes are read, never which: the local file without read-ahead, with
    it, and the S3 object with it give the same batches byte for byte, for 1 and 3 workers, two epochs."""
    n = len(trdata.Packed(pack_file, "partial", window_blocks=WINDOW))

    def two_epochs(source: trdata.Packed, workers: int) -> list:
        with trdata.Loader(source, workers=workers, **KW) as ld:
            return epoch(ld, n) + epoch(ld, n)

    reference = two_epochs(trdata.Packed(pack_file, "partial", window_blocks=WINDOW, prefetch_blocks=0), 1)
    for workers in (1, 3):
        local = trdata.Packed(pack_file, "partial", window_blocks=WINDOW, prefetch_blocks=4)
        assert_same(two_epochs(local, workers), reference)
        remote = trdata.Packed(
            s3_url, "partial", window_blocks=WINDOW, prefetch_blocks=4, storage_options=opts(moto)
        )
        assert_same(two_epochs(remote, workers), reference)
        s = settled(remote)
        assert s["cache_prefetched_blocks"] > 0 and s["storage_failures"] == 0, s


@pytest.mark.parametrize("workers", [1, 3])
def test_a_half_size_cache_fetches_every_block_once_then_about_half(
    read_server: Any, blocks: tuple[int, int], workers: int
) -> None:
    """Eviction by next use: with a cache of half the file, epoch 1 fetches each block once and epoch 2 at most
    N − C + W + P + workers blocks (LRU: all N again), fewer bytes than epoch 1; the server saw exactly the GETs and
    bytes the counters report."""
    n_blocks, largest = blocks
    cached, prefetch = n_blocks // 2, 2
    source = trdata.Packed(
        read_server.url,
        "partial",
        window_blocks=WINDOW,
        cache_bytes=cached * largest,
        prefetch_blocks=prefetch,
        storage_options=opts(read_server.endpoint),
    )
    n = len(source)
    at_open = settled(source)
    gets_at_open = (
        read_server.gets
    )  # counted when a GET arrives: the client has its answer, the count is there
    assert at_open["storage_requests"] == gets_at_open + 1, "the HEAD at open, then one GET per read"

    def bounded(stats: dict[str, int]) -> None:
        assert stats["cache_bytes"] + stats["storage_inflight_bytes"] <= cached * largest, stats

    with trdata.Loader(source, workers=workers, **KW) as ld:
        epoch(ld, n, bounded)
        first = settled(source)
        epoch(ld, n, bounded)
        second = settled(source)
        assert {k: v for k, v in ld.stats().items() if k in COUNTERS}.keys() == set(COUNTERS)
    one, two = fetched(first), fetched(second) - fetched(first)
    # Epoch 1's read-ahead crosses into epoch 2's first P blocks: those fetches (if any) belong to epoch 2.
    assert n_blocks <= one <= n_blocks + prefetch, (one, first)
    assert one + two <= n_blocks + (n_blocks - cached + WINDOW + prefetch + workers), (one, two, second)
    assert two < n_blocks, "LRU would fetch every block again"
    epoch_bytes = (
        first["storage_bytes"] - at_open["storage_bytes"],
        second["storage_bytes"] - first["storage_bytes"],
    )
    assert epoch_bytes[1] <= epoch_bytes[0], epoch_bytes
    # The counters and the server agree: one GET per fetched block, the same bytes.
    assert read_server.gets - gets_at_open == fetched(second), (read_server.gets, second)
    assert second["storage_requests"] == read_server.gets + 1
    # the server counts bytes once its sendfile returned, possibly after the client has them all
    for _ in range(2000):
        if read_server.bytes == second["storage_bytes"]:
            break
        time.sleep(0.005)
    assert second["storage_bytes"] == read_server.bytes, (second, read_server.bytes)
    assert second["cache_hits"] + second["cache_misses"] >= n * 2, second
    assert second["cache_evictions"] >= n_blocks - cached, second
    assert second["storage_retries"] == second["storage_failures"] == 0


def test_the_local_file_reads_ahead_and_counts_as_the_url_does(
    pack_file: Path, blocks: tuple[int, int]
) -> None:
    """Local files take the same path (preads as tasks on the storage runtime): counters, bounds, the whole file
    cached after one epoch when cache_bytes holds it (epoch 2 fetches nothing)."""
    n_blocks, largest = blocks
    source = trdata.Packed(pack_file, "partial", window_blocks=WINDOW, cache_bytes=n_blocks * largest)
    with trdata.Loader(source, workers=2, **KW) as ld:
        epoch(ld, len(source))
        first = settled(source)
        epoch(ld, len(source))
        second = settled(source)
        stats = ld.stats()
    assert fetched(first) == n_blocks and fetched(second) == n_blocks, (first, second)
    assert second["cache_evictions"] == 0 and second["cache_bytes"] <= n_blocks * largest
    assert (
        stats["storage_requests"] == second["storage_requests"]
        and stats["cache_hits"] == second["cache_hits"]
    )
    # full mode has no block cache: its reads are counted, no cache counters (absent, not zeros)
    with trdata.Loader(trdata.Packed(pack_file), batch_size=4, transforms=[trdata.CenterCrop(16)]) as full:
        assert "cache_hits" not in full.stats() and full.stats()["storage_requests"] >= 1


def test_mosaic_partners_come_from_the_rows_window_and_fetch_no_block_twice(
    pack_file: Path, blocks: tuple[int, int]
) -> None:
    """A Mosaic on a partial pack draws its partners from the row's window of the epoch (augment/mosaic.rs): every
    part of every row lies in the blocks of the row's window, and an epoch fetches each block exactly once, as
    without the Mosaic (partners from the whole file would fetch blocks no cached window holds; counted as the
    plan's reads, they would finish blocks early and have them evicted before their own reads). With window-local
    partners but a window freed as soon as its blocks' own rows were read, this test saw 47 fetches of 32 blocks."""
    n_blocks, _ = blocks
    starts = np.asarray(trdata.sources.packed.inspect(pack_file)["block_starts"])
    block_of = lambda r: int(np.searchsorted(starts, r, side="right")) - 1  # noqa: E731
    source = trdata.Packed(pack_file, "partial", window_blocks=WINDOW)
    kw = {**KW, "transforms": [trdata.Mosaic(12), trdata.Resize((16, 16))]}
    with trdata.Loader(source, workers=2, **kw) as ld:
        for e in range(2):
            order = [int(i) for _, _, x in epoch(ld, len(source)) for i in x]  # one engine: the plan's order
            stats = settled(source)
            # the epoch's windows: its blocks in order of first use, WINDOW at a time (each window's records are
            # consecutive in the order)
            ranked = list(dict.fromkeys(block_of(r) for r in order))
            window_of = {b: k // WINDOW for k, b in enumerate(ranked)}
            parts = ld._native.mosaic_parts(order, e)
            assert all(p[0] == i and len(p) == 4 for i, p in zip(order, parts))
            for i, p in zip(order, parts):
                assert {window_of[block_of(j)] for j in p} == {window_of[block_of(i)]}, (e, i, p)
            if e == 0:  # the read-ahead (a window by default) crosses into epoch 2's first blocks
                assert n_blocks <= fetched(stats) <= n_blocks + WINDOW, stats
            # partners vary: not only the row's own block
            assert len({block_of(j) for p in parts for j in p[1:]}) == n_blocks


@pytest.mark.parametrize("case", ["pad", "filled", "known_bad"])
def test_mosaic_rows_that_pad_fill_or_skip_leave_no_window_held(
    pack_file: Path, blocks: tuple[int, int], tmp_path: Path, case: str
) -> None:
    """The block cache keeps a Mosaic window only while its real rows still read partners (block_cache.rs): pad
    and filling rows (read at the epoch's end from window 0) and a record known bad under ``skip`` (never read) do
    not hold a window all epoch. With the smallest cache (a window + a window of read-ahead) and one worker (one
    schedule), every epoch fetches at most N + 2W blocks (the read-ahead into the next epoch; the pad rows'
    rereads of window 0), plus 2W per row skipped (a replacement is a row of another window). Before, each
    known-bad record held its window all epoch (94 fetches of 32 blocks in epoch 1 here), and pad and filling rows
    held window 0, which cost fetches only when two workers straddled windows (a schedule this test does not
    pin: src/source/block_cache.rs and plan/mod.rs test that rule)."""
    n_blocks, largest = blocks
    path, over = pack_file, {}
    if case == "pad":
        over = dict(batch_size=5, last_batch="pad")
    elif case == "filled":
        over = dict(world_size=5, rank=4)  # 96 % 5 = 1: rank 4's last row is a filling row
    else:
        info = trdata.sources.packed.inspect(pack_file)
        data = bytearray(pack_file.read_bytes())
        for r in (5, 45, 85):  # three records in three windows, damaged in the middle of their JPEG bytes
            data[int(info["offsets"][r]) + int(info["lengths"][r]) // 2] ^= 0xFF
        path = tmp_path / "damaged.trd"
        path.write_bytes(bytes(data))
        over = dict(on_error="skip")
    source = trdata.Packed(
        path, "partial", window_blocks=WINDOW, prefetch_blocks=WINDOW, cache_bytes=2 * WINDOW * largest
    )
    kw = {**KW, "transforms": [trdata.Mosaic(12), trdata.Resize((16, 16))], **over}
    with trdata.Loader(source, workers=1, **kw) as ld:
        done, skipped = 0, 0
        for e in range(3):
            ld.set_epoch(e)
            rows = sum(len(b.indices) for b in ld)
            assert rows == len(ld) * kw["batch_size"] or case != "pad"
            stats = settled(source)
            now = ld.stats()["errors_skipped"]
            assert fetched(stats) - done <= n_blocks + 2 * WINDOW + 2 * WINDOW * (now - skipped), (e, stats)
            done, skipped = fetched(stats), now
    assert case != "known_bad" or skipped > 0


@pytest.fixture
def proxy(moto: str) -> Iterator[Any]:
    server = start_proxy(moto)
    yield server
    server.budget = 0
    stop(server)


def failing(s3_url: str, proxy: Any, backoff: str, retries: int) -> trdata.Packed:
    """The pack through `proxy`, opened, then every ranged GET answering 503."""
    options = opts(proxy.endpoint, retry_init_backoff=backoff, retry_max_backoff=backoff, max_retries=retries)
    source = trdata.Packed(s3_url, "partial", window_blocks=WINDOW, storage_options=options)
    proxy.fault, proxy.every, proxy.budget = "503", 1, 10**6
    return source


def test_a_block_that_keeps_failing_is_its_records_error_naming_url_and_block(
    s3_url: str, proxy: Any
) -> None:
    source = failing(s3_url, proxy, "1ms", 2)
    with pytest.raises(trdata.DecodeError, match="block") as info:
        with trdata.Loader(source, workers=2, on_error="raise", **KW) as ld:
            epoch(ld, len(source))
    assert s3_url in str(info.value) and "failed 3 times" in str(info.value)


def test_close_does_not_wait_out_a_fetchs_backoff(s3_url: str, proxy: Any) -> None:
    """A worker waiting for a block whose GET is in an hour-long backoff: Ctrl-C stops the iteration and close()
    returns at once (the wait is interrupted; the fetch task ends on its own). Checked as liveness: close()
    must finish while the backoff has most of its hour left."""
    ld = trdata.Loader(failing(s3_url, proxy, "1h", 3), workers=2, **KW)
    # Python leaves SIGINT ignored when it starts with it ignored (a background job of a non-interactive shell),
    # and interrupt_main then does nothing: give this test the interactive default whatever launched pytest
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(1.0, _thread.interrupt_main)
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            next(iter(ld))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert proxy.injected >= 1
    closer = threading.Thread(target=ld.close)
    closer.start()
    closer.join(timeout=300)
    assert not closer.is_alive(), "close() waited for the backoff"
    assert ld.closed


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"cache_bytes": 4096}, "must be at least"),
        ({"cache_bytes": 2**51}, "must be in"),
        ({"prefetch_blocks": 1025}, "must be in 0..=1024"),
    ],
)
def test_cache_parameters_are_checked_in_the_core(pack_file: Path, kw: dict, message: str) -> None:
    with pytest.raises(trdata.ConfigError, match=message) as info:
        trdata.Packed(pack_file, "partial", **kw)
    assert info.value.parameter in kw
