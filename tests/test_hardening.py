"""Issue 7 regressions of the core: accepted settings never abort the process, the skip policy counts samples and
always finds a replacement when one exists, an unshuffled loader delivers dataset order, the epoch counter never
wraps. Images are written by the test (Pillow), so the file runs from any clone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import write_jpegs

Image = pytest.importorskip("PIL.Image")


def run_isolated(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter: on the old code these settings killed the process with SIGABRT, which
    must fail the test, not the test runner."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


def _usable_memory_bytes() -> int:
    """What the core compares against: MemTotal, lowered by a cgroup v2 memory.max."""
    total = next(
        int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal:")
    )
    try:
        limit = open("/sys/fs/cgroup/memory.max").read().strip()
        return min(total, int(limit)) if limit.isdigit() else total
    except OSError:
        return total


@pytest.mark.parametrize(
    ("transforms", "batch_size", "sample_bytes", "parameter"),
    [
        # The cases (SIGABRT on a 24 GiB machine): float32, prefetch=2 buffers in flight.
        ("[trdata.RandomResizedCrop(224)]", 65536, 3 * 224 * 224 * 4, "batch_size"),
        ("[trdata.CenterCrop(65536)]", 1, 3 * 65536 * 65536 * 4, "transforms"),
        ("[trdata.CenterCrop(20000)]", 64, 3 * 20000 * 20000 * 4, "batch_size"),
        # Beyond any machine.
        ("[trdata.CenterCrop(65536)]", 2**20, 3 * 65536 * 65536 * 4, "transforms"),
        ("[trdata.CenterCrop(8192)]", 2**20, 3 * 8192 * 8192 * 4, "batch_size"),
    ],
)
def test_absurd_sizes_are_config_errors_not_aborts(tmp_path, transforms, batch_size, sample_bytes, parameter):
    memory = _usable_memory_bytes()
    if parameter == "batch_size" and 2 * batch_size * sample_bytes <= memory:
        pytest.skip(f"fits in this machine's {memory / 2**30:.0f} GiB (a valid configuration here)")
    if parameter == "transforms" and sample_bytes <= memory:
        pytest.skip(f"one sample fits in this machine's {memory / 2**30:.0f} GiB")
    paths = write_jpegs(tmp_path, 2)
    code = f"""
import trdata
src = trdata.FileList({paths!r}, [0, 1])
try:
    with trdata.Loader(src, batch_size={batch_size}, transforms={transforms}, workers=1) as L:
        for b in L:
            pass
    print("no error")
except trdata.ConfigError as e:
    print("ConfigError", e.parameter, "|", e)
"""
    r = run_isolated(code)
    assert r.returncode == 0, f"process died (rc={r.returncode}): {r.stderr[-500:]}"
    out = r.stdout.strip()
    assert out.startswith(f"ConfigError {parameter} |"), out
    assert "GiB" in out, out  # says how much memory it needed and how much there is


def test_skip_counts_each_bad_sample_once_and_always_replaces_it(tmp_path):
    """2 good files among 30 bad: with 16 random replacement draws alone about a third of the bad samples
    found no good replacement (and raised), and errors_skipped counted every failed draw."""
    good = write_jpegs(tmp_path / "good", 2)
    paths = []
    for i in range(32):
        if i in (5, 20):
            paths.append(good[0 if i == 5 else 1])
        else:
            bad = tmp_path / f"bad{i:02d}.jpg"
            bad.write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG body" * (i + 1))
            paths.append(str(bad))
    src = trdata.FileList(paths, list(range(32)))
    kw = dict(batch_size=8, transforms=[trdata.CenterCrop(16)], dtype="uint8", on_error="skip")
    with trdata.Loader(src, workers=2, reproducible=True, **kw) as loader:
        first = [(b.indices.copy(), b.images.copy()) for b in loader]
        assert loader.stats()["errors_skipped"] == 30
        second = [b.indices.copy() for b in loader]
        assert loader.stats()["errors_skipped"] == 60  # per epoch, per sample
    indices = np.concatenate([i for i, _ in first])
    assert sorted(set(indices.tolist())) == [5, 20], indices
    assert len(indices) == 32 and len(np.concatenate(second)) == 32
    # Deterministic for any worker count.
    with trdata.Loader(src, workers=1, reproducible=True, **kw) as loader:
        again = [b.indices.copy() for b in loader]
    assert np.array_equal(np.concatenate(again), indices)


def test_skip_raises_only_when_nothing_decodes(tmp_path):
    paths = []
    for i in range(6):
        p = tmp_path / f"bad{i}.jpg"
        p.write_bytes(b"garbage" * (i + 1))
        paths.append(str(p))
    src = trdata.FileList(paths, [0] * 6)
    with trdata.Loader(
        src, batch_size=2, workers=2, on_error="skip", transforms=[trdata.CenterCrop(8)]
    ) as loader:
        with pytest.raises(trdata.DecodeError) as exc:
            list(loader)
    assert "no other sample" in str(exc.value)
    assert exc.value.path in paths


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_unshuffled_loader_delivers_dataset_order_by_default(tmp_path, workers):
    paths = write_jpegs(tmp_path, 50)
    src = trdata.FileList(paths, list(range(50)))
    with trdata.Loader(src, batch_size=4, workers=workers, transforms=[trdata.CenterCrop(16)]) as loader:
        for _ in range(3):
            got = np.concatenate([b.indices for b in loader])
            assert got.tolist() == list(range(50))
            labels = np.concatenate([b.labels for b in loader])
            assert labels.tolist() == list(range(50))


def test_epoch_counter_never_wraps(tmp_path):
    paths = write_jpegs(tmp_path, 4)
    src = trdata.FileList(paths, [0, 1, 2, 3])
    with trdata.Loader(
        src, batch_size=2, workers=1, transforms=[trdata.CenterCrop(8)], reproducible=True
    ) as loader:
        state = loader.state_dict()
        state["epoch"] = 2**64 - 1
        state["batches"] = len(loader)  # "epoch 2**64-1 finished": the next would be 2**64
        with pytest.raises(trdata.ConfigError) as exc:
            loader.load_state_dict(state)
        assert exc.value.parameter == "epoch"
        with pytest.raises(trdata.ConfigError) as exc:
            loader.set_epoch(2**64 - 1)
        assert exc.value.parameter == "epoch"
        # Epochs are below 2**63 (checkpoints carry them as signed ints): the last one has no successor.
        loader.set_epoch(2**63 - 1)
        with pytest.raises(trdata.ConfigError) as exc:
            list(loader)
        assert exc.value.parameter == "epoch"
        loader.set_epoch(2**63 - 2)
        assert len(list(loader)) == 2
        state = loader.state_dict()
        assert (state["epoch"], state["batches"]) == (2**63 - 1, 0)
        loader.load_state_dict(state)  # what a loader saves, it can load


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


def test_damaged_entropy_data_is_decoded_in_every_epoch_like_pillow(tmp_path):
    """A complete JPEG with a damaged byte in its entropy data: Pillow decodes it; trdata used to fail only in
    the epochs whose random crop reached the damage. Now it decodes in every epoch (filled in, as Pillow does),
    and the damage is counted in stats()['decode_warnings'] whenever the decoded region contains it."""
    (path,) = write_jpegs(tmp_path, 1, size=(320, 240))
    data = bytearray(Path(path).read_bytes())
    at = int(len(data) * 0.7)
    data[at : at + 2] = b"\xff\xd4"  # a stray restart marker in the entropy data: libjpeg-turbo warns there
    damaged = tmp_path / "damaged.jpg"
    damaged.write_bytes(bytes(data))
    with Image.open(damaged) as im:
        im.load()  # the reference accepts it
    src = trdata.FileList([str(damaged)], [0])
    warnings = []
    with trdata.Loader(src, batch_size=1, workers=1, transforms=[trdata.RandomResizedCrop(24)]) as loader:
        for _ in range(24):
            assert [len(b) for b in loader] == [1]
            warnings.append(loader.stats()["decode_warnings"])
    assert warnings[-1] >= 1, warnings  # some crops reach the damage, and those are counted
    with trdata.Loader(
        src, batch_size=1, workers=1, transforms=[trdata.Resize(32), trdata.CenterCrop(32)]
    ) as loader:
        assert [len(b) for b in loader] == [1]


def _png_with_iccp_bomb(path: Path, inflated_bytes: int) -> None:
    """A small valid RGB PNG (Pillow) with an iCCP chunk whose profile inflates to `inflated_bytes`."""
    import struct
    import zlib

    img = np.random.default_rng(3).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(img).save(path)
    data = path.read_bytes()
    comp, block = zlib.compressobj(9), bytes(1 << 20)
    profile = b"".join(comp.compress(block) for _ in range(inflated_bytes >> 20)) + comp.flush()
    body = b"icc\x00\x00" + profile
    chunk = struct.pack(">I", len(body)) + b"iCCP" + body + struct.pack(">I", zlib.crc32(b"iCCP" + body))
    ihdr_end = 8 + 8 + 13 + 4  # signature + IHDR (length, type, 13 bytes, crc)
    path.write_bytes(data[:ihdr_end] + chunk + data[ihdr_end:])


def test_png_metadata_bomb_is_not_inflated(tmp_path):
    """A 1 MB iCCP chunk inflating to 1 GiB cost ~256 MiB per worker (capped only by the memory budget). The
    profile is never used, so it is not inflated at all: the image decodes and the process stays small."""
    bomb = tmp_path / "iccp.png"
    _png_with_iccp_bomb(bomb, 1 << 30)
    assert bomb.stat().st_size < 2 << 20
    code = f"""
import trdata
src = trdata.FileList([{str(bomb)!r}] * 4, [0, 1, 2, 3])
with trdata.Loader(src, batch_size=4, workers=2, transforms=[trdata.CenterCrop(16)], dtype="uint8") as L:
    n = sum(len(b) for b in L)
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(n, peak)
"""
    r = run_isolated(code)
    assert r.returncode == 0, r.stderr[-500:]
    n, peak_kib = map(int, r.stdout.split())
    assert n == 4
    assert peak_kib < 160 * 1024, f"peak RSS {peak_kib / 1024:.0f} MiB: the profile was inflated"


def test_float16_normalize_that_would_overflow_is_refused(tmp_path):
    src = trdata.FileList(write_jpegs(tmp_path, 2), [0, 1])
    kw = dict(batch_size=2, workers=1, transforms=[trdata.CenterCrop(8)])
    with pytest.raises(trdata.ConfigError) as exc:
        trdata.Loader(src, dtype="float16", normalize=((0, 0, 0), (2e-6, 2e-6, 2e-6)), **kw)
    assert exc.value.parameter == "normalize" and "inf" in str(exc.value)
    # The same values fit float32, and ordinary ones fit float16.
    with trdata.Loader(src, dtype="float32", normalize=((0, 0, 0), (2e-6, 2e-6, 2e-6)), **kw) as loader:
        assert np.isfinite(next(iter(loader)).images).all()
    with trdata.Loader(src, dtype="float16", normalize=trdata.IMAGENET, **kw) as loader:
        assert np.isfinite(next(iter(loader)).images).all()


def test_state_after_close_mid_epoch_keeps_the_position(tmp_path):
    src = trdata.FileList(write_jpegs(tmp_path, 40), list(range(40)))
    kw = dict(batch_size=4, workers=2, transforms=[trdata.CenterCrop(8)], dtype="uint8")
    for reproducible in (True, False):
        loader = trdata.Loader(src, shuffle=True, reproducible=reproducible, **kw)
        it = iter(loader)
        seen = [next(it).indices.copy() for _ in range(3)]
        before = loader.state_dict()
        loader.close()
        after = loader.state_dict()
        assert (after["epoch"], after["batches"]) == (before["epoch"], before["batches"]) == (0, 3)
        assert after["delivered"] == before["delivered"]
        with trdata.Loader(src, shuffle=True, reproducible=reproducible, **kw) as resumed:
            resumed.load_state_dict(after)
            rest = [b.indices.copy() for b in resumed]
        assert sorted(np.concatenate(seen + rest).tolist()) == list(range(40))


def test_skip_does_not_reread_a_sample_known_bad(tmp_path):
    """Under on_error='skip' a file that failed is not read again in later epochs (failures are decided by the
    bytes, so it would fail again; a slow bad file must not cost every epoch). Observable: fixing the file
    later does not bring it back, and it is still counted as skipped in every epoch."""
    paths = write_jpegs(tmp_path, 6)
    bad = Path(paths[2])
    good_bytes = bad.read_bytes()
    bad.write_bytes(b"\xff\xd8\xff\xe0 broken")
    src = trdata.FileList(paths, list(range(6)))
    kw = dict(batch_size=6, workers=1, transforms=[trdata.CenterCrop(8)], dtype="uint8", on_error="skip")
    with trdata.Loader(src, **kw) as loader:
        (b0,) = list(loader)
        bad.write_bytes(good_bytes)
        (b1,) = list(loader)
        assert loader.stats()["errors_skipped"] == 2
    assert 2 not in b0.indices.tolist() and 2 not in b1.indices.tolist()
