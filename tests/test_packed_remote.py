"""trdata.Packed over URLs: s3:// against a real S3-compatible server (moto's, on loopback) and http:// against a
Range-capable HTTP server written here.

The reference is the same pack read from the local file: a reproducible loader over the URL must give the local
loader's batches byte for byte, in both modes and for any worker count, and a checkpoint of one must resume over
the other. Hostile remote data (missing bucket or key, wrong credentials, a truncated or foreign object, an object
replaced under a running loader, a server that keeps failing) is a typed trdata error naming the URL."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import write_jpegs
from _servers import CREDS, s3_client, start_moto, start_proxy, start_range_server, stop
from trdata.errors import ConfigError, DecodeError, SourceError

pytest.importorskip("moto", reason="the S3 tests run moto's server (pip install 'moto[server]')")
boto3 = pytest.importorskip("boto3")

KW: dict[str, Any] = dict(
    batch_size=6,
    dtype="uint8",
    layout="NHWC",
    seed=5,
    shuffle=True,
    reproducible=True,
    last_batch="partial",
    transforms=[trdata.RandomResizedCrop(24, scale=(0.3, 1.0)), trdata.RandomHorizontalFlip()],
)
BUCKET = "trdata-test"
KEY = "sets/train.trd"


def opts(endpoint: str, **more: Any) -> dict[str, Any]:
    return {"aws_endpoint": endpoint, "aws_allow_http": True, **CREDS, **more}


@pytest.fixture(scope="module")
def pack_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pack of 40 JPEGs in 4 classes, with small blocks (so partial mode reads many blocks)."""
    root = tmp_path_factory.mktemp("remote-src")
    for c in range(4):
        write_jpegs(root / f"c{c}", 10, size=lambda i, c=c: (36 + 5 * ((i + c) % 5), 28 + 3 * (i % 4)))
    dst = tmp_path_factory.mktemp("remote-pack") / "train.trd"
    trdata.pack(trdata.ImageFolder(root), dst, progress=False, block_bytes=16 << 10)
    return dst


@pytest.fixture(scope="module")
def bucket(moto: str, pack_file: Path) -> str:
    s3 = s3_client(moto)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=pack_file.read_bytes())
    return f"s3://{BUCKET}/{KEY}"


def batches(
    source: trdata.Source, workers: int = 2, **kw: Any
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every batch of one epoch as (images, labels, indices), checking each sample comes exactly once."""
    out = []
    with trdata.Loader(source, workers=workers, **{**KW, **kw}) as ld:
        for b in ld:
            out.append((b.images.copy(), np.asarray(b.labels).copy(), np.asarray(b.indices).copy()))
    seen = sorted(int(i) for _, _, idx in out for i in idx)
    assert seen == list(range(len(source))), "every sample exactly once"
    return out


def assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for (ia, la, xa), (ib, lb, xb) in zip(a, b):
        assert np.array_equal(xa, xb) and np.array_equal(la, lb)
        assert ia.tobytes() == ib.tobytes()


@pytest.mark.parametrize("mode", ["full", "partial"])
def test_s3_batches_equal_the_local_files_byte_for_byte(
    bucket: str, moto: str, pack_file: Path, mode: str
) -> None:
    kw = {"window_blocks": 2} if mode == "partial" else {}
    local = trdata.Packed(pack_file, mode, **kw)
    remote = trdata.Packed(bucket, mode, storage_options=opts(moto), **kw)
    assert (len(remote), remote.labels, remote.classes) == (len(local), local.labels, local.classes)
    reference = batches(local, workers=2)
    for workers in (1, 3):
        assert_same(batches(remote, workers=workers), reference)
    stats = remote._native.storage_stats
    assert (
        stats["storage_requests"] >= 5 and stats["storage_retries"] == 0 and stats["storage_failures"] == 0
    ), stats
    if mode == "full":  # the header, the index sections and the data region, each once
        assert pack_file.stat().st_size // 2 < stats["storage_bytes"] <= pack_file.stat().st_size, stats
    assert bucket in repr(remote)


def test_a_checkpoint_moves_between_s3_and_the_local_file(bucket: str, moto: str, pack_file: Path) -> None:
    def part(where: str) -> trdata.Packed:
        if where == "s3":
            return trdata.Packed(bucket, "partial", window_blocks=2, storage_options=opts(moto))
        return trdata.Packed(pack_file, "partial", window_blocks=2)

    whole = batches(part("local"))
    for first, then in (("s3", "local"), ("local", "s3")):
        with trdata.Loader(part(first), workers=2, **KW) as ld:
            it = iter(ld)
            head = [next(it) for _ in range(3)]
            got = [(b.images.copy(), np.asarray(b.labels).copy(), np.asarray(b.indices).copy()) for b in head]
            state = ld.state_dict()
        with trdata.Loader(part(then), workers=3, **KW) as ld:
            ld.load_state_dict(state)
            got += [(b.images.copy(), np.asarray(b.labels).copy(), np.asarray(b.indices).copy()) for b in ld]
        assert_same(got, whole)


def test_environment_variables_configure_the_client(bucket: str, moto: str, pack_file: Path) -> None:
    """AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, … as every AWS tool reads them (in a child: the environment is the
    process's)."""
    code = (
        "import sys, trdata; p = trdata.Packed(sys.argv[1], 'partial'); "
        "assert len(p) == 40; ld = trdata.Loader(p, batch_size=8, workers=1, transforms=[trdata.CenterCrop(16)]); "
        "print(sum(1 for _ in ld))"
    )
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": moto,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    out = subprocess.run(
        [sys.executable, "-c", code, bucket], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "5"


def test_a_loader_made_after_fork_reads_with_a_fresh_runtime(bucket: str, moto: str, pack_file: Path) -> None:
    """The parent opened the object (its runtime and client exist); a child made by fork() builds its own and
    never hangs on the parent's (whose threads it does not have)."""
    remote = trdata.Packed(bucket, "partial", window_blocks=2, storage_options=opts(moto))
    reference = batches(trdata.Packed(pack_file, "partial", window_blocks=2))
    batches(remote)  # the parent's runtime is running and its client holds connections
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        code = 1
        try:
            got = batches(remote, workers=2)
            code = 0 if all(a[0].tobytes() == b[0].tobytes() for a, b in zip(got, reference)) else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.1)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung reading from S3")


# ---- hostile remote data -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile(moto: str, bucket: str, pack_file: Path) -> dict[str, str]:
    """Objects that are not whole packs, beside the good one."""
    s3 = s3_client(moto)
    data = pack_file.read_bytes()
    objects = {
        "truncated": data[: len(data) - 100],
        "truncated-header": data[:100],
        "foreign": (
            Path(__file__).parent / "fixtures" / "edge-cases" / "exif_orient1_photo__Landscape_1.jpg"
        ).read_bytes(),
        "appended": data + b"\0" * 10,
        "empty": b"",
    }
    for name, body in objects.items():
        s3.put_object(Bucket=BUCKET, Key=f"hostile/{name}.trd", Body=body)
    return {name: f"s3://{BUCKET}/hostile/{name}.trd" for name in objects}


@pytest.mark.parametrize("name", ["truncated", "truncated-header", "foreign", "appended", "empty"])
@pytest.mark.parametrize("mode", ["full", "partial"])
def test_a_damaged_or_foreign_object_is_a_source_error_naming_the_url(
    hostile: dict[str, str], moto: str, name: str, mode: str
) -> None:
    with pytest.raises(SourceError) as info:
        trdata.Packed(hostile[name], mode, storage_options=opts(moto))
    assert hostile[name] in str(info.value)


@pytest.mark.parametrize(
    "url, why",
    [
        (f"s3://no-such-bucket/{KEY}", "does not exist"),
        (f"s3://{BUCKET}/no/such/key.trd", "does not exist"),
    ],
)
def test_a_missing_bucket_or_key_is_a_source_error_naming_the_url(
    bucket: str, moto: str, url: str, why: str
) -> None:
    t0 = time.monotonic()
    with pytest.raises(SourceError, match=why) as info:
        trdata.Packed(url, storage_options=opts(moto))
    assert url in str(info.value)
    assert time.monotonic() - t0 < 10, "a 404 is not retried"


def test_wrong_credentials_are_a_source_error_naming_the_url(pack_file: Path) -> None:
    """A server of its own that checks signatures (moto with IAM auth on): the right key reads, a wrong key id
    or a wrong secret is 'access denied' at once, naming the URL."""
    proc, endpoint = start_moto()
    try:
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            aws_access_key_id="x",
            aws_secret_access_key="x",
            region_name="us-east-1",
        )
        iam.create_user(UserName="reader")
        policy = (
            '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'
        )
        iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=policy)
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        good = {"aws_access_key_id": key["AccessKeyId"], "aws_secret_access_key": key["SecretAccessKey"]}
        import urllib.request

        urllib.request.urlopen(
            urllib.request.Request(
                f"{endpoint}/moto-api/reset-auth",
                data=b"0",
                method="POST",
                headers={"Content-Type": "text/plain"},  # not a form: moto reads the raw body
            )
        )
        s3 = s3_client(endpoint, good["aws_access_key_id"], good["aws_secret_access_key"])
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key=KEY, Body=pack_file.read_bytes())
        url = f"s3://{BUCKET}/{KEY}"
        base = {"aws_endpoint": endpoint, "aws_allow_http": "true", "aws_region": "us-east-1"}
        assert len(trdata.Packed(url, "partial", storage_options={**base, **good})) == 40
        for wrong in (
            {**good, "aws_access_key_id": "AKIAWRONGWRONGWRONG0"},
            {**good, "aws_secret_access_key": "wrong-secret"},
        ):
            t0 = time.monotonic()
            with pytest.raises(SourceError, match="access denied") as info:
                trdata.Packed(url, storage_options={**base, **wrong})
            assert url in str(info.value)
            assert "wrong-secret" not in str(info.value)
            assert time.monotonic() - t0 < 10, "a 403 is not retried"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_an_object_replaced_under_a_running_loader_fails_its_reads_naming_the_url(
    moto: str, pack_file: Path
) -> None:
    """Partial mode reads blocks while it runs: an object rewritten since open (ETag, size) is never mixed in."""
    s3 = s3_client(moto)
    key = "replaced/train.trd"
    data = pack_file.read_bytes()
    s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    url = f"s3://{BUCKET}/{key}"
    p = trdata.Packed(url, "partial", window_blocks=2, storage_options=opts(moto))
    s3.put_object(Bucket=BUCKET, Key=key, Body=data[:-4096] + bytes(4096))  # same size, other bytes
    with pytest.raises(DecodeError, match="changed since it was opened") as info:
        batches(p, on_error="raise")
    assert url in str(info.value)


# ---- configuration --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, options, param",
    [
        ("ftp://host/x.trd", None, "path"),
        ("s3://bucket-only", None, "path"),
        ("https://user:pw@example.com/x.trd", None, "path"),
        ("s3://b/k.trd", {"aws_endpoit": "http://127.0.0.1:1"}, "storage_options"),
        ("s3://b/k.trd", {"aws_region": ["x"]}, "storage_options"),
        ("s3://b/k.trd", {"max_retries": "-1"}, "storage_options['max_retries']"),
        ("s3://b/k.trd", {"timeout": "soon"}, "storage_options['timeout']"),
        ("s3://b/k.trd", "aws_region=x", "storage_options"),
        ("/local/x.trd", {"aws_region": "x"}, "storage_options"),
    ],
)
def test_bad_urls_and_options_are_config_errors_naming_the_parameter(
    path: str, options: Any, param: str
) -> None:
    with pytest.raises(ConfigError) as info:
        trdata.Packed(path, storage_options=options)
    assert info.value.parameter == param
    assert "pw" not in str(info.value) or param != "path" or "user:pw" in path


# ---- plain HTTP with Range ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http_server(pack_file: Path) -> Iterator[Any]:
    server = start_range_server(pack_file.parent)
    server.url = f"{server.base}/{pack_file.name}"
    yield server
    stop(server)


@pytest.mark.parametrize("mode", ["full", "partial"])
def test_http_range_urls_give_the_local_files_batches(http_server: Any, pack_file: Path, mode: str) -> None:
    kw = {"window_blocks": 2} if mode == "partial" else {}
    reference = batches(trdata.Packed(pack_file, mode, **kw))
    for workers in (1, 3):
        assert_same(batches(trdata.Packed(http_server.url, mode, **kw), workers=workers), reference)
    missing = http_server.url.replace("train.trd", "none.trd")
    with pytest.raises(SourceError, match="does not exist") as info:
        trdata.Packed(missing)
    assert missing in str(info.value)


def test_503s_are_retried_and_when_they_persist_follow_on_error(http_server: Any, pack_file: Path) -> None:
    quick = {"retry_init_backoff": "1ms", "retry_max_backoff": "5ms", "max_retries": 3}
    reference = batches(trdata.Packed(pack_file, "partial", window_blocks=2))
    p = trdata.Packed(http_server.url, "partial", window_blocks=2, storage_options=quick)
    with http_server.lock:
        http_server.fail_gets = 3  # within the retries: every sample arrives, pixels unchanged
    assert_same(batches(p), reference)
    assert p._native.storage_stats["storage_retries"] == 3
    # Past the retries: the read of a block fails, a bad sample under on_error, naming the URL and the block.
    p = trdata.Packed(http_server.url, "partial", window_blocks=2, storage_options=quick)
    with http_server.lock:
        http_server.fail_gets = 10**6
    try:
        with pytest.raises(DecodeError, match="block") as info:
            batches(p, on_error="raise")
        assert http_server.url in str(info.value) and "503" in str(info.value)
        assert "failed 4 times" in str(info.value)
    finally:
        with http_server.lock:
            http_server.fail_gets = 0


# ---- bytes damaged on the wire, objects changed under a server that ignores If-Match -----------------------


def block_offsets(pack: Path) -> list[int]:
    """The blocks' offsets, from the pack's blocks table (layout: src/source/packed.rs)."""
    data = pack.read_bytes()
    table, size = struct.unpack_from("<QQ", data, 72)
    return [struct.unpack_from("<Q", data, table + 24 * k)[0] for k in range(size // 24)]


@pytest.mark.parametrize("mode", ["full", "partial"])
def test_bytes_damaged_once_on_the_wire_are_read_again_and_no_sample_is_lost(
    pack_file: Path, mode: str
) -> None:
    """The first answer for every block (partial) or for the data region (full: its first record) has a flipped
    byte, the next answer is whole: the records that fail their CRC32C are read again from the store, every
    sample arrives with the local file's pixels under on_error='raise', and the reads made again are counted."""
    kw = {"window_blocks": 2} if mode == "partial" else {}
    reference = batches(trdata.Packed(pack_file, mode, **kw))
    server = start_range_server(pack_file.parent)
    try:
        starts, seen = set(block_offsets(pack_file) if mode == "partial" else [4096]), set()

        def first_answer(start: int) -> bool:
            fresh = start in starts and start not in seen
            seen.add(start)
            return fresh

        server.corrupt = first_answer
        remote = trdata.Packed(f"{server.base}/{pack_file.name}", mode, **kw)
        assert_same(batches(remote, on_error="raise"), reference)
        stats = remote.storage_stats()
        assert stats["storage_refetches"] == server.corrupted == len(starts), stats
        assert stats["storage_failures"] == 0, stats
    finally:
        stop(server)


def changed(path: Path) -> None:
    """Rewrite the pack with a flipped byte in its first block's first record: same size, new mtime (a new ETag
    from the server), bytes that fail their record's CRC32C."""
    data = bytearray(path.read_bytes())
    data[block_offsets(path)[0] + 10] ^= 0x01
    st = path.stat()
    tmp = path.with_suffix(".new")
    tmp.write_bytes(bytes(data))
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    os.replace(tmp, path)  # at once, as a store publishes a new version: no reader sees half a file


@pytest.fixture
def etag_server(pack_file: Path, tmp_path: Path) -> Iterator[Any]:
    """A Range server sending ETags and ignoring If-Match, over a copy of the pack (the tests change it)."""
    folder = tmp_path / "served"
    folder.mkdir()
    shutil.copy(pack_file, folder / "train.trd")
    server = start_range_server(folder, etags=True)
    server.path, server.url = folder / "train.trd", f"{server.base}/train.trd"
    yield server
    stop(server)


def test_an_object_changed_under_a_server_that_ignores_if_match_is_named_not_called_damaged(
    etag_server: Any,
) -> None:
    """Opened, then changed (same size, another ETag) before its blocks are read: the first read's answer carries
    the new ETag and fails naming the object and both ETags, not as a damaged record."""
    remote = trdata.Packed(etag_server.url, "partial", window_blocks=2)
    opened = etag_server.path.stat()
    changed(etag_server.path)
    now = etag_server.path.stat()
    with pytest.raises(DecodeError, match="changed since the source was opened") as info:
        batches(remote, on_error="raise")
    message = str(info.value)
    assert etag_server.url in message and "damaged" not in message, message
    assert (
        f'ETag "{opened.st_size:x}-{opened.st_mtime_ns:x}" → "{now.st_size:x}-{now.st_mtime_ns:x}"' in message
    )


def small_blocks(tmp_path: Path) -> Path:
    """A pack of 32 small JPEGs in blocks of 4 KiB: about 3 records a block, a block or two per batch of 2."""
    root = tmp_path / "src"
    for c in range(2):
        write_jpegs(root / f"c{c}", 16, size=lambda i: (40 + 3 * (i % 4), 32))
    local = tmp_path / "small.trd"
    trdata.pack(trdata.ImageFolder(root), local, progress=False, block_bytes=4096)
    assert len(block_offsets(local)) >= 8
    return local


# One worker, one block per window, no read-ahead, batches of 2 decoded at most two ahead: most blocks are read
# after the first batch.
MID_EPOCH: dict[str, Any] = {"window_blocks": 1, "prefetch_blocks": 0}
MID_EPOCH_LOADER: dict[str, Any] = {**KW, "batch_size": 2, "shuffle": False, "prefetch": 2}


def first_batch_then_change(remote: trdata.Packed, local: Path, change: Any) -> str:
    """The first batch over `remote` (checked equal to the local file's), then `change()`, then the rest of the
    epoch under on_error='raise': the DecodeError's message."""
    with trdata.Loader(trdata.Packed(local, "partial", **MID_EPOCH), workers=1, **MID_EPOCH_LOADER) as ld:
        first = next(iter(ld)).images.copy()
    with trdata.Loader(remote, workers=1, **MID_EPOCH_LOADER) as ld:
        it = iter(ld)
        assert next(it).images.tobytes() == first.tobytes()
        change()
        with pytest.raises(DecodeError) as info:
            for _ in it:
                pass
    return str(info.value)


def test_an_etag_change_mid_epoch_stops_the_reads_of_the_old_version(
    etag_server: Any, tmp_path: Path
) -> None:
    """A loader part-way through an epoch; the object changes on a server that ignores If-Match: the next block
    read fails naming the change, never a mix of the two versions."""
    local = small_blocks(tmp_path)
    shutil.copy(local, etag_server.path)
    remote = trdata.Packed(etag_server.url, "partial", **MID_EPOCH)
    message = first_batch_then_change(remote, local, lambda: changed(etag_server.path))
    assert "changed since the source was opened" in message and etag_server.url in message, message


def test_an_object_replaced_in_a_bucket_mid_epoch_fails_its_reads(
    bucket: str, moto: str, tmp_path: Path
) -> None:
    """S3 (moto) honours If-Match: an object replaced (same size) while a loader reads it answers 412, a typed
    error naming the URL; the batches before it are the old version's."""
    local = small_blocks(tmp_path)
    s3 = s3_client(moto)
    key, data = "mid-epoch/train.trd", local.read_bytes()
    s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    url = f"s3://{BUCKET}/{key}"
    remote = trdata.Packed(url, "partial", storage_options=opts(moto), **MID_EPOCH)
    replace = lambda: s3.put_object(Bucket=BUCKET, Key=key, Body=data[:-4096] + bytes(4096))  # noqa: E731
    message = first_batch_then_change(remote, local, replace)
    assert "changed since" in message and url in message, message


# ---- faults between the loader and the server ----------------------------------------------------------------


@pytest.fixture
def proxy(moto: str) -> Iterator[Any]:
    server = start_proxy(moto)
    yield server
    stop(server)


@pytest.mark.parametrize("fault", ["latency", "drop", "short", "500", "503"])
@pytest.mark.parametrize("mode", ["full", "partial"])
def test_faults_between_loader_and_server_cost_retries_never_samples(
    bucket: str, proxy: Any, pack_file: Path, fault: str, mode: str
) -> None:
    """Every sample exactly once, pixels equal to the local run's, whatever the wire did; the retries show."""
    kw = {"window_blocks": 2} if mode == "partial" else {}
    reference = batches(trdata.Packed(pack_file, mode, **kw))
    options = opts(proxy.endpoint, retry_init_backoff="1ms", retry_max_backoff="20ms", max_retries=4)
    if fault == "latency":  # slower than the deadline: the attempt is abandoned and made again
        options["timeout"] = "300ms"
        proxy.latency_s = 1.0
    proxy.fault, proxy.every, proxy.budget = fault, 2, 4
    remote = trdata.Packed(bucket, mode, storage_options=options, **kw)
    assert_same(batches(remote, workers=3), reference)
    stats = remote._native.storage_stats
    assert proxy.injected >= 1
    assert stats["storage_failures"] == 0, stats
    # each injected fault cost one retry (a slow answer may also make a clean attempt miss a tight deadline)
    assert stats["storage_retries"] == proxy.injected or (
        fault == "latency" and stats["storage_retries"] >= proxy.injected
    ), (
        stats,
        proxy.injected,
    )


def test_the_benchmarks_s3_read_server_serves_the_same_batches(pack_file: Path, tmp_path: Path) -> None:
    """tests/_servers.py's sendfile S3 read server (what the GPU benchmark streams from) speaks enough of S3 for
    trdata's client: the same batches as the local file, in both modes; an object replaced under the loader
    fails its reads (If-Match → 412), naming the URL."""
    from _servers import start_s3_read_server

    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "train.trd").write_bytes(pack_file.read_bytes())
    server = start_s3_read_server(tmp_path)
    try:
        options = opts(server.endpoint)
        for mode, kw in (("full", {}), ("partial", {"window_blocks": 2})):
            reference = batches(trdata.Packed(pack_file, mode, **kw))
            assert_same(
                batches(trdata.Packed("s3://bench/train.trd", mode, storage_options=options, **kw)), reference
            )
        assert server.gets > 0 and server.bytes >= pack_file.stat().st_size
        remote = trdata.Packed("s3://bench/train.trd", "partial", window_blocks=2, storage_options=options)
        time.sleep(0.01)
        (tmp_path / "bench" / "train.trd").write_bytes(pack_file.read_bytes())  # a new mtime: a new ETag
        with pytest.raises(DecodeError, match="412|changed|modified") as info:
            batches(remote, on_error="raise")
        assert "s3://bench/train.trd" in str(info.value)
    finally:
        stop(server)
