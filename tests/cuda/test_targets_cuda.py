"""Sample errors of target sources on CUDA loaders, GPU decode included (tests/test_sample_errors.py on the CPU):
an image whose size is not the one its annotations declare never takes the GPU route and is the sample's
``Target`` error; label maps read by the workers follow ``on_error`` on a CUDA loader as on a CPU one; a CUDA
loader's iterator goes on after a raised sample error. Skips without CUDA, torch or libnvjpeg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import photo, write_coco_boxes
from PIL import Image
from trdata._cuda_libs import nvjpeg as _nvjpeg

torch = pytest.importorskip("torch")

_probe = _nvjpeg.probe()
pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and _probe["found"] and _probe.get("hardware")),
    reason=f"needs CUDA and libnvjpeg with hardware engines (nvjpeg={_probe['found']}, hw={_probe.get('hardware')})",
)


def _epoch(source: Any, **kw: Any) -> list[tuple[list[int], list[np.ndarray]]]:
    out = []
    with trdata.Loader(source, batch_size=4, seed=3, reproducible=True, dtype="uint8", **kw) as loader:
        for b in loader:
            rows = [int(i) for i in b.indices[: b.valid]]
            out.append((rows, [np.asarray(t["boxes"].cpu()) for t in b.targets[: b.valid]]))
    return out


def test_a_wrong_declared_size_stays_off_the_gpu_route_and_is_the_samples_error(tmp_path: Path) -> None:
    coco = trdata.CocoDetection(*write_coco_boxes(tmp_path, 12, (256, 192), {5: (512, 384)}))
    tf = [trdata.RandomResizedCrop(128), trdata.RandomHorizontalFlip()]
    with trdata.Loader(
        coco, batch_size=4, transforms=tf, device="cuda", decode="gpu", dtype="uint8"
    ) as loader:
        it = iter(loader)
        first = next(it)
        assert first.images.device.type == "cuda"
        with pytest.raises(trdata.DecodeError) as e:
            next(it)
        assert e.value.kind == "Target" and e.value.index == 5 and "512x384" in str(e.value)
        rest = list(it)  # a CUDA loader goes on after the lost step too
    assert [int(i) for b in [first, *rest] for i in b.indices] == [0, 1, 2, 3, 8, 9, 10, 11]
    gpu = _epoch(coco, transforms=tf, device="cuda", decode="gpu", on_error="skip")
    cpu = _epoch(coco, transforms=tf, device="cpu", on_error="skip")
    assert [r for r, _ in gpu] == [r for r, _ in cpu] and all(5 not in r for r, _ in gpu)
    for (_, g), (_, c) in zip(gpu, cpu):
        for a, b in zip(g, c):
            np.testing.assert_allclose(a, b, atol=1e-4)


def test_label_maps_read_by_the_workers_follow_on_error_on_a_cuda_loader(tmp_path: Path) -> None:
    for k in range(8):
        (tmp_path / "img").mkdir(exist_ok=True)
        (tmp_path / "map").mkdir(exist_ok=True)
        Image.fromarray(photo(k, 64, 48)).save(tmp_path / "img" / f"{k}.jpg", quality=90)
        m = np.full((48, 64), k, np.uint8)
        Image.fromarray(m, mode="L").save(tmp_path / "map" / f"{k}.png")
    seg = trdata.SegmentationFolder(tmp_path / "img", tmp_path / "map")
    (tmp_path / "map" / "6.png").write_bytes(b"\x89PNG\r\n\x1a\n not a PNG")
    kw: dict[str, Any] = dict(batch_size=4, transforms=[trdata.CenterCrop(32)], on_error="skip", seed=1)
    with trdata.Loader(seg, device="cuda", **kw) as g, trdata.Loader(seg, device="cpu", **kw) as c:
        gb, cb = list(g), list(c)
        assert g.stats()["errors_skipped"] == 1 == c.stats()["errors_skipped"]
    for a, b in zip(gb, cb):
        assert a.indices.tolist() == b.indices.tolist() and 6 not in a.indices.tolist()
        for ta, tb, i in zip(a.targets, b.targets, a.indices.tolist()):
            assert ta["mask"].device.type == "cuda"
            assert torch.equal(ta["mask"].cpu(), torch.as_tensor(np.asarray(tb["mask"])))
            assert set(ta["mask"].unique().tolist()) == {i}
