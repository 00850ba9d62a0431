"""``decode=`` as configuration (no GPU needed): its values and rules are the core's (config.rs
``DECODE``/``check_decode_share``/``gpu_decode_share``), a bad value is a ConfigError naming ``decode``, asking for
the GPU path on a CPU loader is one too, and ``"auto"`` (or a share of 0) runs the CPU path there."""

from __future__ import annotations

import math

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
