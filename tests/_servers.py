"""Servers on loopback that the storage tests and the streaming benchmarks start themselves: moto's S3-compatible
server (a process of its own), a plain HTTP server with Range support, and a fault-injecting reverse proxy.

Nothing here is a stand-in: every one is a real server on 127.0.0.1 that trdata's object_store client talks HTTP
to. Importable from tests (on pytest's path) and from benches (which put tests/ on sys.path)."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


class ServerError(RuntimeError):
    """A server did not start."""


#: storage_options credentials of the moto server (any values do; these are the ones `s3_client` uses).
CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "aws_region": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    """moto's server in a process of its own, on a free loopback port; waits until it answers."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise ServerError("moto's server did not start")


def s3_client(endpoint: str, key: str = "testing", secret: str = "testing") -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
    )


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files of a folder with single-range GETs (206 + Content-Range), as object stores and CDNs do.
    `server.fail_gets` > 0: that many GETs answer 503 first (HEAD is never failed). `server.etags`: HEAD and GET
    answers carry an ETag (the file's size and modification time), and like many servers this one ignores
    If-Match: a file changed under a reader is served as it is now. `server.corrupt`, when set, is called with
    each ranged GET's first offset (under `server.lock`); when it returns True the answer is complete and of the
    right length, but its first byte is flipped (a bad link or proxy: `server.corrupted` counts them)."""

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def end_headers(self) -> None:
        server: Any = self.server
        path = Path(self.translate_path(self.path))
        if server.etags and path.is_file():
            st = path.stat()
            self.send_header("ETag", f'"{st.st_size:x}-{st.st_mtime_ns:x}"')
        super().end_headers()

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        server: Any = self.server
        with server.lock:
            server.gets += 1
            fail = server.fail_gets > 0
            server.fail_gets -= fail
        if fail:
            self.send_error(503, "Slow Down")
            return
        data = path.read_bytes()
        rng = self.headers.get("Range")
        if not rng:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        start_s, end_s = rng.removeprefix("bytes=").split("-")
        start, end = int(start_s), min(int(end_s), len(data) - 1)
        if start > end:
            self.send_error(416)
            return
        body = bytearray(data[start : end + 1])
        with server.lock:
            flip = server.corrupt is not None and server.corrupt(start)
            server.corrupted += flip
        if flip:
            body[0] ^= 0x01
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self.wfile.write(body)


class FaultyProxy(http.server.BaseHTTPRequestHandler):
    """A reverse proxy in front of moto that injects one fault into every `server.every`-th ranged GET, for
    `server.budget` of them: added latency, a connection dropped mid-body, a body cut short under a header that
    claims the whole range, or a 500/503 (S3's SlowDown). HEAD and the other GETs pass through unchanged."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _forward(self) -> tuple[int, list[tuple[str, str]], bytes]:
        import http.client

        server: Any = self.server
        conn = http.client.HTTPConnection("127.0.0.1", server.upstream_port, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
            conn.request(self.command, self.path, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            return resp.status, [(k, v) for k, v in resp.getheaders() if k.lower() != "connection"], body
        finally:
            conn.close()

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes, cut: int | None = None) -> None:
        self.send_response(status)
        for k, v in headers:
            if k.lower() != "content-length" or self.command == "HEAD":  # HEAD: the object's length, no body
                self.send_header(k, v)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body if cut is None else body[:cut])
        if cut is not None:
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

    def do_HEAD(self) -> None:  # noqa: N802
        self._send(*self._forward())

    def do_GET(self) -> None:  # noqa: N802
        server: Any = self.server
        fault = None
        if self.headers.get("Range"):
            with server.lock:
                server.ranged += 1
                if server.budget > 0 and server.ranged % server.every == 0:
                    server.budget -= 1
                    fault = server.fault
                    server.injected += 1
        if fault in ("500", "503"):
            body = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            self._send(int(fault), [("Content-Type", "application/xml")], body)
            return
        if fault == "latency":
            time.sleep(server.latency_s)
        status, headers, body = self._forward()
        if fault == "drop":  # the connection dies mid-body
            self._send(status, headers, body, cut=len(body) // 2)
        elif fault == "short":  # a complete answer whose body is shorter than the Content-Range it claims
            self._send(status, headers, body[: max(0, len(body) - 1000)])
        else:
            self._send(status, headers, body)


def serve(server: Any) -> Any:
    """Runs `server` on a daemon thread; `stop(server)` ends it."""
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server: Any) -> None:
    server.shutdown()
    server.server_close()


def start_range_server(folder: Path, etags: bool = False) -> Any:
    """A RangeHandler server over `folder`; `server.base` is its URL, `server.gets` counts GETs and
    `server.fail_gets` makes that many GETs answer 503; `etags` (or `server.etags`) sends ETags, `server.corrupt`
    damages answers (RangeHandler)."""
    handler = lambda *a, **k: RangeHandler(*a, directory=str(folder), **k)  # noqa: E731
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.lock, server.gets, server.fail_gets = threading.Lock(), 0, 0
    server.etags, server.corrupt, server.corrupted = etags, None, 0
    server.base = f"http://127.0.0.1:{server.server_address[1]}"
    return serve(server)


def start_proxy(upstream: str) -> Any:
    """A FaultyProxy in front of `upstream` (http://127.0.0.1:port); `server.endpoint` is its URL. Set
    `fault`, `every`, `budget` and `latency_s` on it to inject faults."""
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FaultyProxy)
    server.upstream_port = int(upstream.rsplit(":", 1)[1])
    server.lock, server.ranged, server.injected = threading.Lock(), 0, 0
    server.fault, server.every, server.budget, server.latency_s = None, 1, 0, 0.0
    server.handle_error = lambda *a: None  # a client that gave up on a slow answer: a broken pipe, expected
    server.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    return serve(server)


class S3ReadHandler(http.server.BaseHTTPRequestHandler):
    """S3's read protocol over the files of a folder, fast: ``HEAD``/``GET /<bucket>/<key>`` (the file
    ``folder/<bucket>/<key>``) with ``Content-Length``, ``ETag``, ``Last-Modified``, single ``Range`` GETs answered
    206 + ``Content-Range`` from the file with ``sendfile`` (no copy through Python), ``If-Match`` checked (412),
    404 with S3's ``NoSuchKey`` body. Requests are not authenticated (signatures are ignored). moto's server is
    the S3 the tests run against; it reads a whole object for every ranged GET, which caps a GPU-rate benchmark
    over a large pack, so the benchmarks serve their packs with this.

    A slower store, for the streaming benchmarks: ``server.latency_s`` is waited (asleep) before every answer,
    as a remote store's time to first byte; ``server.pacer`` (a :class:`Pacer`) sends bodies in chunks paced to
    one shared link rate. GETs in flight (from the request to the body's last byte) are counted:
    ``server.in_flight``, ``server.most_in_flight`` and ``server.in_flight_s`` (its integral over time)."""

    protocol_version = "HTTP/1.1"
    #: The sendfile chunk when bodies are paced.
    PACE_CHUNK = 256 * 1024

    def log_message(self, *args: Any) -> None:
        pass

    def _in_flight(self, step: int) -> None:
        server: Any = self.server
        with server.lock:
            now = time.monotonic()
            server.in_flight_s += server.in_flight * (now - server.in_flight_since)
            server.in_flight_since = now
            server.in_flight += step
            server.most_in_flight = max(server.most_in_flight, server.in_flight)

    def _object(self) -> tuple[Path, os.stat_result, str] | None:
        server: Any = self.server
        rel = self.path.split("?", 1)[0].lstrip("/")
        path = (Path(server.folder) / rel).resolve()
        if Path(server.folder).resolve() not in path.parents or not path.is_file():
            body = (
                b"<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>"
            )
            self.send_response(404)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return None
        st = path.stat()
        return path, st, f'"{st.st_size:x}-{st.st_mtime_ns:x}"'

    def _head(self, status: int, st: os.stat_result, etag: str, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", self.date_time_string(int(st.st_mtime)))
        self.send_header("Accept-Ranges", "bytes")

    def do_HEAD(self) -> None:  # noqa: N802
        server: Any = self.server
        time.sleep(server.latency_s)
        found = self._object()
        if found:
            _, st, etag = found
            self._head(200, st, etag, st.st_size)
            self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        self._in_flight(+1)
        try:
            self._get()
        finally:
            self._in_flight(-1)

    def _get(self) -> None:
        server: Any = self.server
        time.sleep(server.latency_s)
        found = self._object()
        if not found:
            return
        path, st, etag = found
        with server.lock:
            server.gets += 1
        if self.headers.get("If-Match") not in (None, etag):
            self.send_response(412)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start, end, status = 0, st.st_size - 1, 200
        rng = self.headers.get("Range")
        if rng:
            a, b = rng.removeprefix("bytes=").split("-")
            start, end, status = int(a), min(int(b), st.st_size - 1), 206
        self._head(status, st, etag, end - start + 1)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{st.st_size}")
        self.end_headers()
        self.wfile.flush()
        with open(path, "rb") as f:
            offset, left = start, end - start + 1
            while left > 0:
                n = left if server.pacer is None else min(left, self.PACE_CHUNK)
                if server.pacer is not None:
                    server.pacer.wait(n)
                sent = os.sendfile(self.connection.fileno(), f.fileno(), offset, n)
                if sent == 0:
                    break
                offset, left = offset + sent, left - sent
        with server.lock:
            server.bytes += end - start + 1


class Pacer:
    """One link of ``rate`` bytes/s shared by every connection of a server: ``wait(n)`` returns when the link
    has sent the chunks booked before and this one (first come, first served; a sleep, no CPU)."""

    def __init__(self, rate: float) -> None:
        self.rate, self.lock, self.free_at = float(rate), threading.Lock(), 0.0

    def wait(self, n: int) -> None:
        with self.lock:
            now = time.monotonic()
            start = max(now, self.free_at)
            self.free_at = start + n / self.rate
        if start > now:
            time.sleep(start - now)


def start_s3_read_server(folder: Path, *, latency_s: float = 0.0, rate: float | None = None) -> Any:
    """An S3ReadHandler server over ``folder`` (``s3://<bucket>/<key>`` is ``folder/<bucket>/<key>``);
    ``server.endpoint`` is its URL (``aws_endpoint``), ``server.gets``/``server.bytes`` count the GETs and bytes.
    ``latency_s`` is waited before every answer; ``rate`` (bytes/s) paces the bodies of all GETs together."""
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), S3ReadHandler)
    server.folder, server.lock, server.gets, server.bytes = str(folder), threading.Lock(), 0, 0
    server.latency_s, server.pacer = latency_s, None if rate is None else Pacer(rate)
    server.in_flight, server.most_in_flight, server.in_flight_s = 0, 0, 0.0
    server.in_flight_since = time.monotonic()
    server.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    return serve(server)


class HubHandler(http.server.BaseHTTPRequestHandler):
    """The Hugging Face Hub's URL layout over the files of a folder, for ``hf://datasets/org/name``: the revision
    API (``/api/datasets/org/name/revision/<rev>`` → ``{"sha"}``), the tree API (``/api/datasets/org/name/tree/
    <sha>[/<path>]?recursive=true``: every file below, one page) and resolve URLs (``/datasets/org/name/resolve/
    <sha>/<path>``) answering ``302 Found`` to the file store (``server.store``, a RangeHandler server) with a
    presigned-looking query, as the Hub sends LFS/xet files to its CDN. With ``server.token`` every request must
    carry ``Authorization: Bearer <token>`` (else 401); ``server.throttle`` > 0 answers that many resolve requests
    ``429`` with ``Retry-After: 1`` first. ``server.requests`` logs (method, path, authorization)."""

    SHA = "0123456789abcdef0123456789abcdef01234567"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _json(self, value: Any) -> None:
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        server: Any = self.server
        auth = self.headers.get("Authorization")
        path = self.path.split("?", 1)[0]
        with server.lock:
            server.requests.append(("GET", path, auth))
        if server.token is not None and auth != f"Bearer {server.token}":
            self.send_error(401, "Unauthorized")
            return
        api = "/api/datasets/org/name/"
        if path.startswith(api + "revision/"):
            self._json({"id": "org/name", "sha": self.SHA})
            return
        if path.startswith(api + f"tree/{self.SHA}"):
            below = path.removeprefix(api + f"tree/{self.SHA}").strip("/")
            root = Path(server.folder) / below
            files = sorted(p for p in root.rglob("*") if p.is_file())
            self._json(
                [
                    {
                        "type": "file",
                        "path": str(p.relative_to(server.folder)),
                        "size": p.stat().st_size,
                        "oid": "0",
                    }
                    for p in files
                ]
            )
            return
        resolve = f"/datasets/org/name/resolve/{self.SHA}/"
        if path.startswith(resolve):
            with server.lock:
                throttle = server.throttle > 0
                server.throttle -= throttle
            if throttle:
                self.send_response(429)
                self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(302)
            self.send_header(
                "Location", f"{server.store.base}/{path.removeprefix(resolve)}?X-Amz-Expires=3600"
            )
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_error(404)


class StoreHandler(RangeHandler):
    """A RangeHandler that logs each GET's ``Authorization`` header in ``server.auth`` (the Hub's file store must
    never get the Hub's token)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        server: Any = self.server
        with server.lock:
            server.auth.append(self.headers.get("Authorization"))
        super().do_GET()


def start_hub(folder: Path, token: str | None = None, throttle: int = 0) -> Any:
    """A HubHandler server over `folder` (and a file store serving the same folder, `server.store`, whose
    ``auth`` lists the Authorization headers it got); `server.base` is the endpoint
    (``storage_options={"hf_endpoint": server.base}``)."""
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    server.folder, server.token, server.throttle = str(folder), token, throttle
    server.lock, server.requests = threading.Lock(), []
    handler = lambda *a, **k: StoreHandler(*a, directory=str(folder), **k)  # noqa: E731
    store: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    store.lock, store.gets, store.fail_gets, store.auth = threading.Lock(), 0, 0, []
    store.etags, store.corrupt, store.corrupted = False, None, 0
    store.base = f"http://127.0.0.1:{store.server_address[1]}"
    server.store = serve(store)
    server.base = f"http://127.0.0.1:{server.server_address[1]}"
    return serve(server)
