"""Bad input and wrong configuration: typed errors naming the file or parameter, or the skip policy."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trdata
from _fixtures import edge_case_names

EVAL = [trdata.Resize(64), trdata.CenterCrop(56)]


def loader_for(paths, **kw):
    kw.setdefault("transforms", EVAL)
    kw.setdefault("workers", 2)
    kw.setdefault("dtype", "uint8")
    kw.setdefault("layout", "NHWC")
    return trdata.Loader(trdata.FileList([str(p) for p in paths], list(range(len(paths)))), **kw)


# Files libjpeg-turbo/our PNG path decode to RGB; the rest must fail with the documented kind.
EXPECTED_FAILURES = {
    "truncated_progressive__truncated_jpeg.jpg": "Corrupt",
    "truncated_baseline_ultrahdr__ultrahdr.jpg": "Corrupt",
}


def test_every_edge_case_decodes_or_fails_as_documented(edge_dir):
    files = sorted(p for p in edge_dir.iterdir() if p.name != "README.txt")
    missing = set(edge_case_names()) - {f.name for f in files}
    assert not missing, f"edge-case files missing from {edge_dir}: {sorted(missing)}"
    for f in files:
        with loader_for([f], batch_size=1) as loader:
            if f.name in EXPECTED_FAILURES:
                with pytest.raises(trdata.DecodeError) as exc:
                    list(loader)
                assert exc.value.path == str(f) and exc.value.index == 0
                assert exc.value.kind == EXPECTED_FAILURES[f.name], f.name
            else:
                (batch,) = list(loader)
                assert batch.images.shape == (1, 56, 56, 3), f.name
                if "tiny" not in f.name:
                    assert batch.images.std() > 1.0, f"{f.name} decoded to a flat image"


def test_gray_and_cmyk_become_rgb(edge_dir):
    with loader_for([edge_dir / "gray__hopper_gray.jpg"], batch_size=1) as loader:
        (b,) = list(loader)
    img = b.images[0].astype(int)
    assert (img[..., 0] == img[..., 1]).all() and (img[..., 1] == img[..., 2]).all()
    pair = [edge_dir / "cmyk_ycck__pil_sample_cmyk.jpg", edge_dir / "ycc444_adobe__pil_sample_rgb.jpg"]
    with loader_for(pair, batch_size=2) as loader:
        (b,) = list(loader)
    diff = abs(b.images[0].astype(int) - b.images[1].astype(int)).mean()
    assert diff < 8, f"CMYK sample differs from its RGB twin by {diff:.1f} on average"


def test_raise_names_file_and_sample_then_closes(small_paths, tmp_path):
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    paths = small_paths[:9] + [str(bad)] + small_paths[9:20]
    loader = loader_for(paths, batch_size=4, reproducible=True)
    got = []
    with pytest.raises(trdata.DecodeError) as exc:
        for b in loader:
            got.append(b)
    assert exc.value.path == str(bad) and exc.value.index == 9
    assert "broken.jpg" in str(exc.value) and "9" in str(exc.value)
    assert len(got) == 2  # batches before the bad one were delivered
    loader.close()
    assert loader.closed


@pytest.mark.parametrize(
    "content,kind",
    [
        (b"", "Empty"),
        (b"\x00\x01 no magic here", "UnknownFormat"),
        (b"GIF89a....", "Corrupt"),
        (b"\0\0\0\x1cftypavif\0\0\0\0mif1", "Unsupported"),
        (None, "Io"),
    ],
)
def test_bad_files_have_typed_kinds(small_paths, tmp_path, content, kind):
    f = tmp_path / "x.jpg"
    if content is not None:
        f.write_bytes(content)
    with loader_for([f], batch_size=1) as loader, pytest.raises(trdata.DecodeError) as exc:
        list(loader)
    assert exc.value.kind == kind and exc.value.path == str(f)


def test_skip_replaces_deterministically_counts_and_logs_once(small_paths, tmp_path, caplog):
    bad = tmp_path / "zero.jpg"
    bad.write_bytes(b"")
    paths = small_paths[:15] + [str(bad)]
    runs = []
    with caplog.at_level(logging.WARNING, logger="trdata"):
        for _ in range(2):
            with loader_for(paths, batch_size=4, on_error="skip", reproducible=True, shuffle=True) as loader:
                batches = list(loader) + list(loader)
                runs.append([b.indices.tolist() for b in batches])
                assert all(b.images.shape == (4, 56, 56, 3) for b in batches)
                assert loader.stats()["errors_skipped"] == 2
    assert runs[0] == runs[1]
    flat = [i for b in runs[0][:4] for i in b]
    assert 15 not in flat and len(flat) == 16
    assert sum("zero.jpg" in r.getMessage() for r in caplog.records) == 2  # once per loader


@pytest.mark.parametrize(
    "kw,param",
    [
        (dict(batch_size=0), "batch_size"),
        (dict(dtype="int7"), "dtype"),
        (dict(layout="CHWN"), "layout"),
        (dict(workers=0), "workers"),
        (dict(last_batch="maybe"), "last_batch"),
        (dict(on_error="ignore"), "on_error"),
        (dict(rank=2, world_size=2), "rank"),
        (dict(prefetch=1), "prefetch"),
        (dict(pin="everywhere"), "pin"),
        (dict(transforms=[trdata.RandomResizedCrop(0)]), "size"),
        (dict(transforms=[trdata.Resize(64)]), "transforms"),
        (dict(transforms=[lambda x: x]), "transforms"),
        (dict(dtype="uint8", normalize=trdata.IMAGENET), "normalize"),
        (dict(transforms=[trdata.RandomResizedCrop(8, scale=(0.5, 0.1))]), "scale"),
        (dict(device="tpu:0"), "device"),
        (dict(cpus=[4096]), "cpus"),
        (dict(batch_size=1000, last_batch="drop"), "batch_size"),
    ],
)
def test_wrong_configuration_names_the_parameter(small_paths, kw, param):
    kw.setdefault("dtype", "float32")
    with pytest.raises(trdata.ConfigError) as exc:
        loader_for(small_paths[:10], **kw)
    assert exc.value.parameter == param, str(exc.value)
    assert isinstance(exc.value, ValueError)


def test_sources_validate(tmp_path):
    with pytest.raises(trdata.SourceError):
        trdata.ImageFolder(tmp_path / "missing")
    with pytest.raises(trdata.SourceError, match="no class folders"):
        trdata.ImageFolder(tmp_path)
    (tmp_path / "cls").mkdir()
    (tmp_path / "cls" / "readme.txt").write_text("x")
    with pytest.raises(trdata.SourceError, match="no files"):
        trdata.ImageFolder(tmp_path)
    with pytest.raises(trdata.ConfigError):
        trdata.FileList(["a.jpg"], [1, 2])
    with pytest.raises(trdata.ConfigError):
        trdata.FileList([], [])


def test_unreadable_file_is_an_io_error(small_paths, tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads every file; a directory stands in for an unreadable file below")
    f = tmp_path / "secret.jpg"
    f.write_bytes(Path(small_paths[0]).read_bytes())
    f.chmod(0)
    with loader_for([f], batch_size=1) as loader, pytest.raises(trdata.DecodeError):
        list(loader)


def test_directory_named_like_an_image_is_an_io_error(tmp_path):
    d = tmp_path / "dir.jpg"
    d.mkdir()
    with loader_for([d], batch_size=1) as loader, pytest.raises(trdata.DecodeError) as exc:
        list(loader)
    assert exc.value.kind == "Io"
