"""nvJPEG discovery (``trdata._cuda_libs.nvjpeg``, ``src/cuda/nvjpeg.rs``) on any machine: the documented search order,
candidates that are not libraries skipped with their reason, a clear typed error when GPU decode cannot run, and
the ``trdata info`` row. The GPU decode itself is tested in tests/cuda/test_nvjpeg_cuda.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import trdata
from _fixtures import write_jpegs
from trdata._cuda_libs import nvjpeg as _nvjpeg
from trdata._info import format_info


def test_the_override_is_tried_first_and_a_non_library_is_skipped_with_its_reason(tmp_path, monkeypatch):
    fake = tmp_path / "libnvjpeg.so.13"
    fake.write_bytes(b"\x7fELF but not really")
    monkeypatch.setenv("TRDATA_NVJPEG", str(fake))
    p = _nvjpeg.probe()
    assert p["tried"][0][0] == str(fake)
    assert p["tried"][0][1].startswith("cannot open")
    # The last resort is the dynamic loader's own search by soname; whatever was found is one of the tried.
    names = [path for path, _ in p["tried"]]
    if p["found"] is None:
        assert names[-2:] == ["libnvjpeg.so.13", "libnvjpeg.so.12"]
    else:
        assert p["tried"][-1] == (p["found"], "loaded") or p["tried"][-1][1] == "loaded"
        assert len(p["version"]) == 3 and p["version"][0] >= 11


def test_a_library_without_nvjpeg_symbols_is_refused_naming_the_symbol(monkeypatch):
    monkeypatch.setenv("TRDATA_NVJPEG", "libc.so.6")
    p = _nvjpeg.probe()
    assert p["tried"][0] == ("libc.so.6", "missing symbol nvjpegGetProperty")


def test_wheel_candidates_come_from_sys_path(tmp_path, monkeypatch):
    lib = tmp_path / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnvjpeg.so.13").write_bytes(b"x")
    tv = tmp_path / "torchvision.libs"
    tv.mkdir()
    (tv / "libnvjpeg.4a0b5c81.so.13").write_bytes(b"x")
    monkeypatch.syspath_prepend(str(tmp_path))
    c = _nvjpeg.candidates()
    assert c[:2] == [str(lib / "libnvjpeg.so.13"), str(tv / "libnvjpeg.4a0b5c81.so.13")]
    monkeypatch.delenv("TRDATA_NVJPEG", raising=False)
    tried = [path for path, _ in _nvjpeg.probe()["tried"]]
    assert tried[:2] == c[:2]


def test_decode_without_library_or_gpu_is_a_typed_error(monkeypatch, tmp_path):
    data = open(write_jpegs(tmp_path, 1)[0], "rb").read()
    p = _nvjpeg.probe()
    cuda = trdata._core.machine_info()["cuda"].get("available")
    if p["found"] is not None and cuda:
        pytest.skip("this machine can decode on the GPU (tests/cuda/test_nvjpeg_cuda.py covers it)")
    with pytest.raises(trdata.TrdataError) as e:
        _nvjpeg.decode(data)
    if p["found"] is None:
        assert isinstance(e.value, trdata.ConfigError)
        assert "libnvjpeg" in str(e.value) and "decode" in str(e.value)
    else:
        assert isinstance(e.value, trdata.CudaError)


def test_info_row_reports_the_library_and_the_engines():
    base = {"cuda": {"available": False, "reason": "none"}}
    text = format_info(
        {
            **base,
            "nvjpeg": {"found": "/x/libnvjpeg.so.13", "version": (13, 0, 1), "tried": [], "hardware": (7, 1)},
        }
    )
    assert "nvJPEG    13.0.1 from /x/libnvjpeg.so.13" in text
    assert "7 engines x 1 cores" in text
    text = format_info(
        {**base, "nvjpeg": {"found": None, "tried": [("/a/libnvjpeg.so.13", "cannot open: x")]}}
    )
    assert "not found (1 places tried" in text and "/a/libnvjpeg.so.13: cannot open: x" in text


def _imported_env(env: dict[str, str]) -> tuple[str, str]:
    """CUDA_DEVICE_MAX_CONNECTIONS and `trdata._cuda_libs.CUDA_CONNECTIONS_FROM_USER` after `import trdata` in a fresh
    interpreter started with `env` (the variable only matters before CUDA's context exists: a new process)."""
    code = (
        "import os, trdata; "
        "print(os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS'), trdata._cuda_libs.CUDA_CONNECTIONS_FROM_USER)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    value, from_user = out.stdout.split()
    return value, from_user


def test_import_gives_cuda_32_work_queues_unless_the_user_chose():
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    assert _imported_env(env) == ("32", "False")
    assert _imported_env({**env, "CUDA_DEVICE_MAX_CONNECTIONS": "1"}) == ("1", "True")


def test_info_says_who_set_the_cuda_work_queues():
    cuda = {"available": True, "driver_version": "13.0", "devices": []}
    text = format_info({"cuda": cuda, "cuda_connections": {"value": "32", "from_user": False}})
    assert "CUDA_DEVICE_MAX_CONNECTIONS=32, set by trdata at import" in text
    text = format_info({"cuda": cuda, "cuda_connections": {"value": "1", "from_user": True}})
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1, set by you" in text
