"""One object per image from S3 (moto on loopback) through a proxy adding 20 ms per GET: img/s and the most GETs in
flight, next to the same folder on local disk. Run from the repository root: PYTHONPATH=python python benches/tools/objects_s3.py
(N=800 images by default; the env var N changes it)."""

import http.client
import http.server
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, "tests")
from pathlib import Path

import trdata
from _fixtures import write_jpegs
from _servers import s3_client, serve, start_moto, stop


class Delay(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        srv = self.server
        with srv.lock:
            srv.now += 1
            srv.most = max(srv.most, srv.now)
            srv.gets += 1
        try:
            time.sleep(0.020)
            c = http.client.HTTPConnection("127.0.0.1", srv.up, timeout=30)
            c.request("GET", self.path, headers=dict(self.headers.items()))
            r = c.getresponse()
            body = r.read()
            self.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() not in ("connection", "content-length", "transfer-encoding"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            c.close()
        finally:
            with srv.lock:
                srv.now -= 1


N = int(os.environ.get("N", "800"))
proc, ep = start_moto()
try:
    s3 = s3_client(ep)
    s3.create_bucket(Bucket="bench")
    root = Path(tempfile.mkdtemp()) / "train"
    for c in range(4):
        write_jpegs(root / f"c{c}", N // 4, size=(96, 80))
    for p in sorted(root.rglob("*.jpg")):
        s3.put_object(Bucket="bench", Key=f"train/{p.relative_to(root).as_posix()}", Body=p.read_bytes())
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Delay)
    srv.lock, srv.now, srv.most, srv.gets, srv.up = threading.Lock(), 0, 0, 0, int(ep.rsplit(":", 1)[1])
    serve(srv)
    opts = {
        "aws_endpoint": f"http://127.0.0.1:{srv.server_address[1]}",
        "aws_allow_http": True,
        "aws_access_key_id": "t",
        "aws_secret_access_key": "t",
        "aws_region": "us-east-1",
    }
    kw = dict(batch_size=32, workers=2, transforms=[trdata.RandomResizedCrop(64)], dtype="uint8")
    for name, src in (
        ("local", trdata.ImageFolder(root)),
        ("s3+20ms", trdata.ImageFolder("s3://bench/train/", storage_options=opts)),
    ):
        with trdata.Loader(src, **kw) as ld:
            for _ in ld:
                pass  # warm-up epoch
            srv.most = 0
            g0 = srv.gets
            t0 = time.perf_counter()
            n = sum(len(b.indices) for b in ld)
            dt = time.perf_counter() - t0
        print(
            f"{name}: {n} images in {dt:.2f} s = {n / dt:,.0f} img/s; GETs {srv.gets - g0}; most GETs in flight {srv.most}"
        )
    stop(srv)
finally:
    proc.terminate()
