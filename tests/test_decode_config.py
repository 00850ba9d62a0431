"""``decode=`` as configuration (no GPU needed): its values and rules are the core's (config.rs
``DECODE``/``check_decode_share``/``gpu_decode_share``), a bad value is a ConfigError naming ``decode``, asking for
the GPU path on a CPU loader is one too, and ``"auto"`` (or a share of 0) runs the CPU path there."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import write_jpegs


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    paths = write_jpegs(tmp_path_factory.mktemp("decode-config"), 12, (48, 40))
    return trdata.FileList(paths, [i % 2 for i in range(12)])


def make(src, **kw):
    return trdata.Loader(src, batch_size=4, workers=2, transforms=[trdata.RandomResizedCrop(32)], **kw)


@pytest.mark.parametrize("value", ["fast", "GPU", "", 1.5, -0.1, math.nan, math.inf, True, [0.5]])
def test_bad_values_name_decode(src, value):
    with pytest.raises(trdata.ConfigError) as e:
        make(src, decode=value)
    assert e.value.parameter == "decode", e.value
    assert "'cpu'" in str(e.value) and "'gpu'" in str(e.value) and "'auto'" in str(e.value)


@pytest.mark.parametrize("value", ["gpu", 0.5, 1])
def test_the_gpu_path_on_a_cpu_loader_is_refused(src, value):
    with pytest.raises(trdata.ConfigError) as e:
        make(src, decode=value)
    assert e.value.parameter == "decode" and "device='cuda:N'" in str(e.value), e.value


@pytest.mark.parametrize("value", ["auto", "cpu", 0.0, 0])
def test_auto_and_a_zero_share_run_on_the_cpu(src, value):
    with make(src, decode=value) as ld:
        assert sum(len(b) for b in ld) == 12
        st = ld.stats()
    assert st["samples"] == 12 and "decode_gpu" not in st


def test_the_choices_and_the_default_are_the_cores():
    assert trdata.loader.CHOICES["decode"] == ("cpu", "gpu", "auto")
    assert trdata.loader.DEFAULTS["decode"] == "cpu"


# -------------------- hostile inputs and their regressions -------------------------------------------------


Image = pytest.importorskip("PIL.Image")


def _progressive_jpeg_with_scans(path: Path, extra_scans: int) -> None:
    """A progressive JPEG (Pillow) whose last scan is repeated `extra_scans` times (a scan-count bomb; the
    repeats are not a legal progression, which libjpeg-turbo only finds out by decoding them all)."""
    img = np.random.default_rng(1).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(img).save(path, progressive=True, quality=90)
    data = path.read_bytes()
    last_sos = data.rfind(b"\xff\xda")
    scan = data[last_sos:-2]  # the final scan up to (not including) EOI
    path.write_bytes(data[:-2] + scan * extra_scans + b"\xff\xd9")


def test_decode_limits_are_loader_parameters(tmp_path):
    """max_pixels / max_scans reach every worker's decoder; defaults accept ordinary files; bad values are
    ConfigErrors naming the parameter."""
    good = write_jpegs(tmp_path / "good", 3, size=(40, 30))  # 1,200 pixels each
    bomb = tmp_path / "scans.jpg"
    _progressive_jpeg_with_scans(bomb, 150)
    paths = [*good, str(bomb)]
    src = trdata.FileList(paths, [0, 1, 2, 3])
    kw = dict(batch_size=4, workers=2, transforms=[trdata.CenterCrop(16)], dtype="uint8")
    with trdata.Loader(src, **kw) as loader, pytest.raises(trdata.DecodeError) as exc:
        list(loader)
    assert exc.value.kind == "TooLarge" and exc.value.path == str(bomb) and "scans" in str(exc.value)
    # With a higher scan limit the file is decoded — its repeated scans are damaged data, filled in and counted
    # (the damage policy): the limit reached the workers.
    with trdata.Loader(src, max_scans=1000, **kw) as loader:
        assert [len(b) for b in loader] == [4]
        assert loader.stats()["decode_warnings"] == 1
    # A pixel limit below the files' size refuses them all.
    with trdata.Loader(trdata.FileList(good, [0, 1, 2]), max_pixels=1000, **kw) as loader:
        with pytest.raises(trdata.DecodeError) as exc:
            list(loader)
    assert exc.value.kind == "TooLarge" and "pixels" in str(exc.value)
    for name, value in [
        ("max_pixels", 0),
        ("max_scans", 0),
        ("max_memory_bytes", 0),
        ("max_scans", -1),
        ("max_scans", 2**40),
        ("max_pixels", "1e8"),
        ("max_memory_bytes", 2**70),
    ]:
        with pytest.raises(trdata.ConfigError) as exc:
            trdata.Loader(src, **{name: value}, **kw)
        assert exc.value.parameter == name, (name, value, exc.value)
