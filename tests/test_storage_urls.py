"""URLs wherever a path is taken: ``trdata.pack`` to a bucket (one multipart upload, atomic),
``WebDataset`` over URLs and brace patterns, ``ImageFolder`` over a bucket prefix and ``FileList`` of URLs, the
CLI on URLs, and the Python-read sources that refuse URLs.

The servers are real and on loopback (tests/_servers.py): moto's S3 server, a Range HTTP server, a fault proxy.
The reference is always the same data read from local files: batches must be equal byte for byte."""

from __future__ import annotations

import http.server
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import write_jpegs
from _servers import CREDS, s3_client, serve, start_moto, start_proxy, start_range_server, stop
from trdata import _core
from trdata.errors import ConfigError, DecodeError, SourceError, TrdataError
from trdata.sources.packed import inspect, verify

pytest.importorskip("moto", reason="the S3 tests run moto's server (pip install 'moto[server]')")
pytest.importorskip("boto3")

pytestmark = pytest.mark.usefixtures("private_cache_home")  # index caches and keys: not ~/.cache

BUCKET = "trdata-urls"
KW: dict[str, Any] = dict(
    batch_size=5,
    dtype="uint8",
    layout="NHWC",
    seed=3,
    shuffle=True,
    reproducible=True,
    last_batch="partial",
    transforms=[trdata.RandomResizedCrop(20, scale=(0.4, 1.0)), trdata.RandomHorizontalFlip()],
)


@pytest.fixture(scope="module")
def moto(moto: str) -> str:
    """conftest's moto server, with this module's bucket."""
    s3_client(moto).create_bucket(Bucket=BUCKET)
    return moto


def opts(endpoint: str, **more: Any) -> dict[str, Any]:
    return {"aws_endpoint": endpoint, "aws_allow_http": True, **CREDS, **more}


def batches(source: trdata.Source, workers: int = 2, **kw: Any) -> list[tuple[bytes, list[int], list[int]]]:
    """One epoch as (pixels, labels, indices) per batch; every sample exactly once."""
    out = []
    with trdata.Loader(source, workers=workers, **{**KW, **kw}) as ld:
        for b in ld:
            out.append((b.images.tobytes(), np.asarray(b.labels).tolist(), np.asarray(b.indices).tolist()))
    assert sorted(i for _, _, idx in out for i in idx) == list(range(len(source))), "every sample once"
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder of 3 classes (one with a nested folder), JPEGs of varied sizes."""
    root = tmp_path_factory.mktemp("urls-folder") / "train"
    for c, n in (("cat", 7), ("dog", 6), ("eel", 5)):
        write_jpegs(root / c, n, size=lambda i, n=n: (30 + 3 * (i % 4) + n, 26 + 2 * (i % 3)))
    write_jpegs(root / "dog" / "more", 3, size=(33, 29))
    (root / "cat" / "notes.txt").write_text("not an image")
    return root


def upload_tree(moto: str, root: Path, prefix: str) -> None:
    s3 = s3_client(moto)
    for p in sorted(root.rglob("*")):
        if p.is_file():
            s3.put_object(
                Bucket=BUCKET, Key=f"{prefix}/{p.relative_to(root).as_posix()}", Body=p.read_bytes()
            )


# ---- 1. pack to a bucket ----------------------------------------------------------------------------------


def test_pack_to_s3_is_the_local_pack_byte_for_byte(moto: str, folder: Path, tmp_path: Path) -> None:
    src = trdata.ImageFolder(folder)
    local = tmp_path / "train.trd"
    trdata.pack(src, local, progress=False, block_bytes=16 << 10)
    url = f"s3://{BUCKET}/packs/train.trd"
    report = trdata.pack(src, url, progress=False, block_bytes=16 << 10, storage_options=opts(moto))
    body = s3_client(moto).get_object(Bucket=BUCKET, Key="packs/train.trd")["Body"].read()
    assert body == local.read_bytes()
    assert report["bytes_out"] == len(body)
    # … and it reads back, verifies and inspects over the URL
    assert verify(url, progress=False, storage_options=opts(moto)) == []
    assert inspect(url, storage_options=opts(moto))["records"] == len(src)
    for mode, kw in (("full", {}), ("partial", {"window_blocks": 2})):
        remote = trdata.Packed(url, mode, storage_options=opts(moto), **kw)
        assert batches(remote) == batches(trdata.Packed(local, mode, **kw)), mode


def _uploads(moto: str, key: str) -> tuple[list[str], list[str]]:
    s3 = s3_client(moto)
    objects = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=key).get("Contents", [])]
    uploads = [u["Key"] for u in s3.list_multipart_uploads(Bucket=BUCKET, Prefix=key).get("Uploads", [])]
    return objects, uploads


class _Interrupting(trdata.FileList):
    """A FileList whose 6th sample's extras raise KeyboardInterrupt (Ctrl-C in the middle of a pack)."""

    def _pack_extras(self, i: int) -> list[tuple[str, int, bytes]]:
        if i == 5:
            raise KeyboardInterrupt
        return []


def test_an_interrupted_pack_leaves_no_object_and_no_upload(moto: str, folder: Path, tmp_path: Path) -> None:
    key = "packs/interrupted.trd"
    src = _Interrupting(trdata.ImageFolder(folder).paths)
    with pytest.raises(KeyboardInterrupt):
        trdata.pack(src, f"s3://{BUCKET}/{key}", progress=False, storage_options=opts(moto))
    assert _uploads(moto, key) == ([], [])
    # Interrupted during the upload itself (Ctrl-C comes as an exception from the progress callback, first called
    # 50 ms in; 64 MiB through moto take far longer): the multipart upload is aborted, also when every part was
    # already handed over and is still in flight, nothing at the key, no upload left.
    big = tmp_path / "big.bin"
    big.write_bytes(np.random.default_rng(0).integers(0, 256, 64 << 20, dtype=np.uint8).tobytes())
    calls = []

    def progress(sent: int, total: int) -> None:
        calls.append(sent)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _core.storage_upload(str(big), f"s3://{BUCKET}/{key}", opts(moto), progress)
    assert calls, "the progress callback ran"
    assert _uploads(moto, key) == ([], [])


def test_a_failed_upload_is_aborted_and_names_the_url(moto: str, folder: Path) -> None:
    url = "s3://no-such-bucket-x/packs/train.trd"
    with pytest.raises(SourceError) as info:
        trdata.pack(
            trdata.ImageFolder(folder), url, progress=False, storage_options=opts(moto, max_retries=0)
        )
    assert url in str(info.value)


@pytest.mark.parametrize(
    "dst, options, param",
    [
        ("http://127.0.0.1:1/x.trd", None, "path"),
        ("https://example.com/x.trd", None, "path"),
        ("s3://bucket-only", None, "path"),
        ("s3://b/x.trd", {"aws_endpoit": "x"}, "storage_options"),
        ("s3://b/x.trd", {"max_retries": "many"}, "storage_options['max_retries']"),
        ("/tmp/x.trd", {"aws_region": "x"}, "storage_options"),
    ],
)
def test_a_pack_target_that_cannot_be_written_is_a_config_error_before_any_work(
    folder: Path, dst: str, options: Any, param: str
) -> None:
    class Counting(trdata.FileList):
        reads = 0

        def _pack_extras(self, i: int) -> list[tuple[str, int, bytes]]:
            Counting.reads += 1
            return []

    with pytest.raises(ConfigError) as info:
        trdata.pack(Counting(trdata.ImageFolder(folder).paths), dst, progress=False, storage_options=options)
    assert info.value.parameter == param
    assert Counting.reads == 0, "refused before any sample was packed"


# ---- 2. WebDataset: brace patterns and URLs ------------------------------------------------------------------


PATTERNS = [
    "train-{000000..000003}.tar",
    "{a,b}/x{1..3}.tar",
    "x{,.bak}",
    "{07..10}",
    "{4..1}",
    "{2..-1}",
    "{-01..2}",
    "{a..g..2}",
    "{e..a..2}",
    "{A..a}",
    "{Z..a}",
    "python{2.{5..7},3.{2,3}}",
    r"{1\{2,3}",
    r"a\\b{1,2}",
    "{x}",
    "{}",
    "a{b{c,d}e}f",
    "s3://bucket/shards/train-{0000..0011..3}-{a,b}.tar",
    "no-braces.tar",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_brace_patterns_expand_as_webdataset_expands_them(pattern: str) -> None:
    braceexpand = pytest.importorskip("braceexpand")
    assert _core.expand_shards(pattern) == list(braceexpand.braceexpand(pattern))


def test_shard_patterns_join_with_double_colons_and_refuse_what_cannot_expand() -> None:
    wds = pytest.importorskip("webdataset")
    pattern = "a-{0..2}.tar::b-{x,y}.tar"
    assert _core.expand_shards(pattern) == list(wds.shardlists.expand_urls(pattern))
    for bad in ("x{1,2.tar", "{0..99999999}.tar", "{0..999}-{0..999}-{0..9}.tar"):
        with pytest.raises(ConfigError) as info:
            _core.expand_shards(bad)
        assert info.value.parameter == "shards"
    assert len(_core.expand_shards("{0..999}-{0..999}")) == 1_000_000


def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def shards(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """4 shards of the folder's images (key.jpg, key.cls, key.txt), one member larger than a scan chunk."""
    out = tmp_path_factory.mktemp("urls-shards")
    paths = trdata.ImageFolder(folder).paths
    files = []
    for s in range(4):
        path = out / f"train-{s:04d}.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(s, len(paths), 4):
                key = f"s{i:04d}"
                add(tar, f"{key}.jpg", Path(paths[i]).read_bytes())
                add(tar, f"{key}.cls", str(i % 3).encode())
                add(tar, f"{key}.txt", f"caption {i}".encode())
                if s == 2 and i == 2:
                    add(tar, f"{key}.bin", bytes(9 << 20))  # skipped unread by the index scan
        files.append(path)
    return files


@pytest.fixture(scope="module")
def s3_shards(moto: str, shards: list[Path]) -> str:
    s3 = s3_client(moto)
    for p in shards:
        s3.put_object(Bucket=BUCKET, Key=f"wds/{p.name}", Body=p.read_bytes())
    return f"s3://{BUCKET}/wds/train-{{0000..0003}}.tar"


def test_a_local_brace_pattern_is_the_listed_shards(shards: list[Path]) -> None:
    pattern = str(shards[0].parent / "train-{0000..0003}.tar")
    by_pattern = trdata.WebDataset(pattern, extras=("txt",))
    by_list = trdata.WebDataset([str(p) for p in shards], extras=("txt",))
    assert by_pattern.shards == by_list.shards and by_pattern.labels == by_list.labels
    assert batches(by_pattern) == batches(by_list)


def test_webdataset_over_s3_gives_the_local_batches(moto: str, shards: list[Path], s3_shards: str) -> None:
    local = trdata.WebDataset([str(p) for p in shards], extras=("txt",))
    remote = trdata.WebDataset(s3_shards, extras=("txt",), storage_options=opts(moto))
    assert remote.shards == [f"s3://{BUCKET}/wds/{p.name}" for p in shards]
    assert (remote.labels, remote.keys) == (local.labels, local.keys)
    reference = batches(local)
    for workers in (1, 3):
        assert batches(remote, workers=workers) == reference
    stats = remote._native.storage_stats
    assert stats["storage_requests"] >= len(remote) and stats["storage_failures"] == 0, stats
    # extras come from the shards over the URL too
    assert [remote._row_extras(i, 0)["txt"] for i in (0, 5)] == [
        local._row_extras(i, 0)["txt"] for i in (0, 5)
    ]
    # a pack of the remote shards is the pack of the local ones
    assert trdata.pack(remote, f"s3://{BUCKET}/wds.trd", progress=False, storage_options=opts(moto))


def test_a_remote_shards_index_is_one_pass_and_then_cached_by_url_size_and_etag(
    moto: str, shards: list[Path], s3_shards: str
) -> None:
    proxy = start_proxy(moto)
    try:
        first = trdata.WebDataset(s3_shards, storage_options=opts(proxy.endpoint))
        scanned = proxy.ranged
        sizes = sum(p.stat().st_size for p in shards)
        # one pass over each shard in chunks; the 9 MiB member is skipped, not fetched
        assert 4 <= scanned <= 4 + sizes // (8 << 20), scanned
        again = trdata.WebDataset(s3_shards, storage_options=opts(proxy.endpoint))
        assert proxy.ranged == scanned, "the second open reads the cached index: no GET"
        assert (again.labels, again.keys) == (first.labels, first.keys)
    finally:
        stop(proxy)


def test_webdataset_over_http_range_urls_gives_the_local_batches(shards: list[Path]) -> None:
    server = start_range_server(shards[0].parent)
    try:
        local = trdata.WebDataset([str(p) for p in shards])
        remote = trdata.WebDataset(f"{server.base}/train-{{0000..0003}}.tar")
        assert batches(remote, workers=3) == batches(local)
    finally:
        stop(server)


# ---- 3. ImageFolder over a prefix, FileList of URLs ---------------------------------------------------------


@pytest.fixture(scope="module")
def s3_folder(moto: str, folder: Path) -> str:
    upload_tree(moto, folder, "folders/train")
    s3_client(moto).put_object(
        Bucket=BUCKET, Key="folders/train/README.md", Body=b"at the root: not a sample"
    )
    return f"s3://{BUCKET}/folders/train/"


def test_image_folder_over_a_prefix_is_torchvisions_folder_byte_for_byte(
    moto: str, folder: Path, s3_folder: str
) -> None:
    local = trdata.ImageFolder(folder)
    for prefix in (s3_folder, s3_folder.rstrip("/")):
        remote = trdata.ImageFolder(prefix, storage_options=opts(moto))
        assert (remote.classes, remote.labels) == (local.classes, local.labels)
        assert [p.split("/train/", 1)[1] for p in remote.paths] == [
            os.path.relpath(p, folder) for p in local.paths
        ]
    reference = batches(local)
    for workers in (1, 3):
        assert batches(remote, workers=workers) == reference
    tv = pytest.importorskip("torchvision")
    assert remote.classes == tv.datasets.ImageFolder(str(folder)).classes


def test_file_list_of_urls_gives_the_local_batches(moto: str, folder: Path, s3_folder: str) -> None:
    local = trdata.ImageFolder(folder)
    urls = [f"{s3_folder}{os.path.relpath(p, folder)}" for p in local.paths]
    remote = trdata.FileList(urls, local.labels, storage_options=opts(moto))
    assert batches(remote, workers=2) == batches(trdata.FileList(local.paths, local.labels))
    with pytest.raises(ConfigError) as info:
        trdata.FileList([local.paths[0], urls[1]], [0, 0], storage_options=opts(moto))
    assert info.value.parameter == "paths"


class _CountingProxy(http.server.BaseHTTPRequestHandler):
    """Forwards to moto and records the most GETs it had in flight at once (each answer held `hold_s`)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        import http.client

        srv: Any = self.server
        with srv.lock:
            srv.now += 1
            srv.most = max(srv.most, srv.now)
        try:
            srv.release.wait(srv.hold_s)
            conn = http.client.HTTPConnection("127.0.0.1", srv.upstream_port, timeout=30)
            conn.request("GET", self.path, headers={k: v for k, v in self.headers.items()})
            resp = conn.getresponse()
            body = resp.read()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("connection", "content-length", "transfer-encoding"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            conn.close()
        finally:
            with srv.lock:
                srv.now -= 1


def test_one_worker_keeps_many_gets_in_flight(moto: str, folder: Path, s3_folder: str) -> None:
    """The read-ahead (source/remote.rs): one worker has more than one GET in flight. The proxy holds each answer
    until several requests are waiting (or a generous timeout), so the count does not depend on timing."""
    local = trdata.ImageFolder(folder)
    remote = trdata.ImageFolder(s3_folder, storage_options=opts(moto))
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CountingProxy)
    server.lock, server.now, server.most, server.hold_s = threading.Lock(), 0, 0, 2.0
    server.release = threading.Event()
    server.upstream_port = int(moto.rsplit(":", 1)[1])
    serve(server)

    def watch() -> None:  # let every request through once 4 are waiting together
        while not server.release.is_set():
            with server.lock:
                if server.now >= 4:
                    server.release.set()
            threading.Event().wait(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        urls = [f"{s3_folder}{os.path.relpath(p, folder)}" for p in local.paths]
        via = trdata.FileList(urls, local.labels, storage_options=opts(endpoint))
        assert batches(via, workers=1) == batches(trdata.FileList(local.paths, local.labels), workers=1)
        assert server.most >= 4, server.most
    finally:
        server.release.set()
        stop(server)
    assert len(remote) == len(local)


# ---- 4. storage_options everywhere; Python-read sources refuse URLs --------------------------------------------


@pytest.mark.parametrize(
    "make, param",
    [
        (lambda: trdata.MNIST("s3://b/mnist"), "root"),
        (lambda: trdata.FashionMNIST("/tmp", storage_options={"aws_region": "x"}), "storage_options"),
        (lambda: trdata.CIFAR10("gs://b/cifar"), "root"),
        (lambda: trdata.CocoDetection("s3://b/images", "ann.json"), "root"),
        (lambda: trdata.CocoDetection("/images", "s3://b/ann.json"), "ann_file"),
        (lambda: trdata.YoloDetection("s3://b/yolo"), "root"),
        (lambda: trdata.SegmentationFolder("s3://b/img", "/masks"), "images"),
        (lambda: trdata.ImageFolder("/tmp", storage_options={"aws_region": "x"}), "storage_options"),
        (lambda: trdata.ImageFolder("https://example.com/train/"), "root"),
        (lambda: trdata.FileList(["/x.jpg"], storage_options={"aws_region": "x"}), "storage_options"),
        (lambda: trdata.FileList(["s3://b/x.jpg"], storage_options={"aws_endpoit": "x"}), "storage_options"),
        (lambda: trdata.FileList(["s3://b/dir/"]), "paths"),
        (lambda: trdata.WebDataset("s3://b/x.tar", storage_options="aws_region=x"), "storage_options"),
    ],
)
def test_sources_check_urls_and_storage_options_naming_the_parameter(make: Any, param: str) -> None:
    with pytest.raises(ConfigError) as info:
        make()
    assert info.value.parameter == param
    if param in ("root", "ann_file", "images") and "example.com" not in str(info.value):
        assert "pack it first" in str(info.value)


# ---- 5. the CLI on URLs --------------------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "trdata.cli", *args], capture_output=True, text=True, timeout=300, env=env
    )


def test_the_cli_packs_verifies_inspects_and_lists_urls(
    moto: str, folder: Path, s3_folder: str, tmp_path: Path
) -> None:
    so = [f"--storage-option={k}={v}" for k, v in opts(moto).items()]
    url = f"s3://{BUCKET}/cli/train.trd"
    out = cli("pack", s3_folder, url, "-q", *so)
    assert out.returncode == 0, out.stderr
    trdata.pack(trdata.ImageFolder(folder), tmp_path / "local.trd", progress=False)
    body = s3_client(moto).get_object(Bucket=BUCKET, Key="cli/train.trd")["Body"].read()
    assert body == (tmp_path / "local.trd").read_bytes()
    out = cli("verify", url, "-q", *so)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr
    out = cli("inspect", url, "--json", *so)
    assert out.returncode == 0 and json.loads(out.stdout)["records"] == len(trdata.ImageFolder(folder))
    out = cli("ls", f"s3://{BUCKET}/cli/", *so)
    assert out.returncode == 0 and url in out.stdout and f"{len(body):,}" in out.stdout, out.stderr
    out = cli("pack", str(folder), "http://127.0.0.1:1/x.trd", "-q")
    assert out.returncode == 2 and "read-only" not in out.stdout and "cannot write" in out.stderr, out.stderr
    out = cli("ls", f"s3://{BUCKET}/cli/", "--storage-option", "novalue")
    assert out.returncode == 2 and "KEY=VALUE" in out.stderr


# ---- 6. hostile remote data ----------------------------------------------------------------------------------


def test_a_shard_that_changes_after_indexing_fails_its_reads_naming_the_url(
    moto: str, shards: list[Path]
) -> None:
    s3 = s3_client(moto)
    key = "changing/train-0000.tar"
    s3.put_object(Bucket=BUCKET, Key=key, Body=shards[0].read_bytes())
    src = trdata.WebDataset(f"s3://{BUCKET}/{key}", storage_options=opts(moto), cache_dir=False)
    s3.put_object(Bucket=BUCKET, Key=key, Body=shards[0].read_bytes() + bytes(1024))  # grew since
    with pytest.raises(DecodeError, match="changed since") as info:
        batches(src, on_error="raise")
    assert f"s3://{BUCKET}/{key}" in str(info.value)


def test_an_object_that_changes_after_listing_fails_its_read_naming_the_url(moto: str, folder: Path) -> None:
    upload_tree(moto, folder, "changing-folder")
    src = trdata.ImageFolder(f"s3://{BUCKET}/changing-folder/", storage_options=opts(moto))
    victim = src.paths[3]
    s3_client(moto).put_object(Bucket=BUCKET, Key=victim.split(f"{BUCKET}/", 1)[1], Body=b"\xff\xd8 other")
    with pytest.raises(DecodeError, match="changed since") as info:
        batches(src, on_error="raise")
    assert victim in str(info.value)
    # under skip, the one changed object is skipped and every other sample arrives
    with trdata.Loader(src, workers=2, **{**KW, "shuffle": False}, on_error="skip") as ld:
        got = [i for b in ld for i in np.asarray(b.indices).tolist()]
        skipped = ld.stats()["errors_skipped"]
    assert 3 not in got and skipped >= 1


def test_a_truncated_tar_object_is_a_decode_error_naming_the_url(moto: str, shards: list[Path]) -> None:
    s3 = s3_client(moto)
    data = shards[1].read_bytes()
    s3.put_object(Bucket=BUCKET, Key="hostile/cut.tar", Body=data[: len(data) // 2])
    s3.put_object(Bucket=BUCKET, Key="hostile/foreign.tar", Body=b"\x89PNG\r\n\x1a\n" + bytes(2000))
    for name in ("cut", "foreign"):
        url = f"s3://{BUCKET}/hostile/{name}.tar"
        with pytest.raises(DecodeError) as info:
            trdata.WebDataset(url, storage_options=opts(moto))
        assert url in str(info.value)


@pytest.mark.parametrize(
    "make, why",
    [
        (
            lambda o: trdata.ImageFolder(f"s3://{BUCKET}/no/such/prefix/", storage_options=o),
            "no class folders",
        ),
        (lambda o: trdata.ImageFolder("s3://no-such-bucket-y/train/", storage_options=o), "does not exist"),
        (
            lambda o: trdata.WebDataset(f"s3://{BUCKET}/no/such-{{0..1}}.tar", storage_options=o),
            "does not exist",
        ),
        (lambda o: _core.storage_list("s3://no-such-bucket-y/", o), "does not exist"),
    ],
)
def test_missing_prefixes_buckets_and_shards_are_source_errors_naming_the_url(
    moto: str, make: Any, why: str
) -> None:
    with pytest.raises(SourceError, match=why) as info:
        make(opts(moto, max_retries=0))
    assert "s3://" in str(info.value)


def test_wrong_credentials_are_access_denied_naming_the_url(folder: Path, shards: list[Path]) -> None:
    """moto with IAM auth on: listing a prefix and opening a shard with a wrong secret are refused at once."""
    import urllib.request

    import boto3

    proc, endpoint = start_moto()
    try:
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", **_keys("x", "x"))
        iam.create_user(UserName="reader")
        doc = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'
        iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=doc)
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        good = {"aws_access_key_id": key["AccessKeyId"], "aws_secret_access_key": key["SecretAccessKey"]}
        urllib.request.urlopen(
            urllib.request.Request(
                f"{endpoint}/moto-api/reset-auth",
                data=b"0",
                method="POST",
                headers={"Content-Type": "text/plain"},
            )
        )
        s3 = s3_client(endpoint, good["aws_access_key_id"], good["aws_secret_access_key"])
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(
            Bucket=BUCKET, Key="train/cat/0.jpg", Body=Path(trdata.ImageFolder(folder).paths[0]).read_bytes()
        )
        s3.put_object(Bucket=BUCKET, Key="wds/a.tar", Body=shards[0].read_bytes())
        base = {"aws_endpoint": endpoint, "aws_allow_http": "true", "aws_region": "us-east-1"}
        assert len(trdata.ImageFolder(f"s3://{BUCKET}/train/", storage_options={**base, **good})) == 1
        wrong = {**base, **good, "aws_secret_access_key": "wrong-secret"}
        for make, url in (
            (
                lambda: trdata.ImageFolder(f"s3://{BUCKET}/train/", storage_options=wrong),
                f"s3://{BUCKET}/train/",
            ),
            (
                lambda: trdata.WebDataset(f"s3://{BUCKET}/wds/a.tar", storage_options=wrong),
                f"s3://{BUCKET}/wds/a.tar",
            ),
            (
                lambda: trdata.pack(
                    trdata.ImageFolder(folder), f"s3://{BUCKET}/p.trd", progress=False, storage_options=wrong
                ),
                f"s3://{BUCKET}/p.trd",
            ),
        ):
            with pytest.raises(TrdataError) as info:
                make()
            assert isinstance(info.value, SourceError), info.value
            assert url in str(info.value) and "wrong-secret" not in str(info.value)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _keys(key: str, secret: str) -> dict[str, str]:
    return {"aws_access_key_id": key, "aws_secret_access_key": secret}


@pytest.mark.parametrize("fault", ["drop", "short", "503"])
def test_faults_on_the_wire_cost_retries_never_samples(
    moto: str, shards: list[Path], s3_shards: str, fault: str
) -> None:
    """Dropped connections, short bodies and 503s between the loader and the server on the shard members' ranged
    GETs: every sample once, pixels equal to the local run's, the retries counted."""
    reference = batches(trdata.WebDataset([str(p) for p in shards]))
    proxy = start_proxy(moto)
    try:
        o = opts(proxy.endpoint, retry_init_backoff="1ms", retry_max_backoff="10ms", max_retries=4)
        remote = trdata.WebDataset(s3_shards, storage_options=o)  # indexed (cached) before faults start
        proxy.fault, proxy.every, proxy.budget = fault, 3, 5
        assert batches(remote, workers=3) == reference
        stats = remote._native.storage_stats
        assert proxy.injected >= 1 and stats["storage_failures"] == 0, stats
        assert stats["storage_retries"] == proxy.injected, (stats, proxy.injected)
    finally:
        stop(proxy)
