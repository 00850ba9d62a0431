"""Batch ops (MixUp, CutMix, BatchRandomChoice, BatchRandomErasing) and the batch_transform hook on CPU loaders:
torchvision v2's arithmetic given the same λ and box, λ ~ Beta(α, α), soft labels, reproducibility across worker
counts and resume, and the prefetch thread's order, errors and shutdown. torch/torchvision comparisons skip
without them (run with /work/benchvenv's Python)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc

import numpy as np
import pytest
import trdata
from _fixtures import write_jpegs
from trdata import _core

CLASSES = 5
T = [trdata.RandomResizedCrop(16), trdata.RandomHorizontalFlip()]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> trdata.FileList:
    paths = write_jpegs(tmp_path_factory.mktemp("jpegs"), 24, size=lambda i: (40 + i, 36 + 2 * i))
    return trdata.FileList(paths, [i % CLASSES for i in range(24)])


def make(source, **kw):
    kw.setdefault("transforms", T)
    kw.setdefault("normalize", trdata.IMAGENET)
    kw.setdefault("batch_size", 6)
    kw.setdefault("workers", 2)
    kw.setdefault("shuffle", True)
    kw.setdefault("reproducible", True)
    kw.setdefault("seed", 7)
    return trdata.Loader(source, **kw)


def epoch(loader):
    return [(np.array(b.images), np.array(b.labels), np.array(b.indices)) for b in loader]


def draws(spec, batch, rows=6, epoch=0, seed=7, position=0, hw=(16, 16)):
    return _core.batch_op_draw(
        spec, seed=seed, epoch=epoch, batch=batch, position=position, rows=rows, height=hw[0], width=hw[1]
    )


# --- torchvision's arithmetic -----------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["mixup", "cutmix"])
def test_mix_equals_torchvision_v2_given_the_same_lambda_and_box(source, op):
    torch = pytest.importorskip("torch")
    v2 = pytest.importorskip("torchvision.transforms.v2")
    plain = epoch(make(source))
    cls = (
        trdata.MixUp(alpha=0.4, num_classes=CLASSES) if op == "mixup" else trdata.CutMix(num_classes=CLASSES)
    )
    mixed = epoch(make(source, batch_ops=[cls]))
    assert len(plain) == len(mixed) == 4
    for b, ((x, y, idx), (mx, my, midx)) in enumerate(zip(plain, mixed)):
        np.testing.assert_array_equal(idx, midx)
        d = draws(cls._spec(), b)
        if op == "mixup":
            ref = v2.MixUp(alpha=0.4, num_classes=CLASSES)
            ref.make_params = lambda _inputs, lam=d[0]: dict(lam=lam)
        else:
            lam, y1, y2, x1, x2 = d[0], *map(int, d[1:])
            ref = v2.CutMix(num_classes=CLASSES)
            ref.make_params = lambda _inputs, p=dict(box=(x1, y1, x2, y2), lam_adjusted=lam): p
            assert lam == 1.0 - (x2 - x1) * (y2 - y1) / 256  # λ corrected by the clipped box's area
        tx, ty = ref(torch.from_numpy(x), torch.from_numpy(y))
        np.testing.assert_array_equal(mx, tx.numpy())  # bit-exact, float32
        np.testing.assert_array_equal(my, ty.numpy())
        assert my.dtype == np.float32 and my.shape == (6, CLASSES)
        np.testing.assert_allclose(my.sum(1), 1.0, rtol=1e-6)


def test_cutmix_runs_on_uint8_and_mixup_refuses_it_as_torchvision_does(source):
    plain = epoch(make(source, normalize=None, dtype="uint8"))
    cut = epoch(make(source, normalize=None, dtype="uint8", batch_ops=[trdata.CutMix(num_classes=CLASSES)]))
    for b, ((x, _, _), (mx, _, _)) in enumerate(zip(plain, cut)):
        _, y1, y2, x1, x2 = map(int, draws(("cutmix", {"alpha": 1.0, "num_classes": CLASSES}), b))
        want = x.copy()
        want[..., y1:y2, x1:x2] = np.roll(x, 1, axis=0)[..., y1:y2, x1:x2]
        np.testing.assert_array_equal(mx, want)
    with pytest.raises(trdata.ConfigError, match=r"invalid batch_ops: uint8 images must be float .*MixUp"):
        make(source, dtype="uint8", normalize=None, batch_ops=[trdata.MixUp(num_classes=CLASSES)])


def test_nhwc_cutmix_boxes_the_height_and_width_axes(source):
    plain = epoch(make(source, layout="NHWC"))
    cut = epoch(make(source, layout="NHWC", batch_ops=[trdata.CutMix(num_classes=CLASSES)]))
    for b, ((x, _, _), (mx, _, _)) in enumerate(zip(plain, cut)):
        _, y1, y2, x1, x2 = map(int, draws(("cutmix", {"alpha": 1.0, "num_classes": CLASSES}), b))
        want = x.copy()
        want[:, y1:y2, x1:x2] = np.roll(x, 1, axis=0)[:, y1:y2, x1:x2]
        np.testing.assert_array_equal(mx, want)


# --- distributions ------------------------------------------------------------------------------------------


def ks_two_sample(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return float(
        np.max(
            np.abs(np.searchsorted(a, grid, "right") / len(a) - np.searchsorted(b, grid, "right") / len(b))
        )
    )


@pytest.mark.parametrize("alpha", [0.2, 1.0, 3.0])
def test_lambda_is_beta_alpha_alpha(alpha):
    n = 12_000
    ours = np.array([draws(("mixup", {"alpha": alpha, "num_classes": None}), b)[0] for b in range(n)])
    ref = np.random.default_rng(0).beta(alpha, alpha, n)
    d = ks_two_sample(ours, ref)
    assert d < 1.95 * np.sqrt(2 / n), d  # KS critical value at 0.1 %
    assert np.all((0 <= ours) & (ours <= 1))


def test_cutmix_boxes_follow_lambda():
    # λ = 1 − box area / HW exactly; unclipped boxes (centre far from the border) have area ≈ (1 − λ_drawn)·HW,
    # so the mean kept fraction is E[λ] = 1/2 plus the clipping's share; every box lies inside the image.
    n, h, w = 6000, 32, 48
    lams, areas = [], []
    for b in range(n):
        lam, y1, y2, x1, x2 = draws(("cutmix", {"alpha": 1.0, "num_classes": None}), b, hw=(h, w))
        assert 0 <= y1 <= y2 <= h and 0 <= x1 <= x2 <= w
        areas.append((y2 - y1) * (x2 - x1) / (h * w))
        lams.append(lam)
    np.testing.assert_allclose(1 - np.array(areas), lams)
    # E[box area before clipping] ≈ E[1 − λ] = 1/2 (truncation makes it smaller); clipping halves it about
    assert 0.15 < np.mean(areas) < 0.5
    centres = [draws(("cutmix", {"alpha": 1.0, "num_classes": None}), b, hw=(h, w)) for b in range(200)]
    assert len({tuple(c) for c in centres}) > 190  # a different box per batch


def test_random_choice_picks_with_its_weights():
    spec = trdata.BatchRandomChoice([trdata.MixUp(0.2), trdata.CutMix()], p=[1, 3])._spec()
    picks = np.array([draws(spec, b)[0] for b in range(8000)])
    assert abs(np.mean(picks == 1) - 0.75) < 0.03


def test_batch_random_erasing_draws_torchvision_boxes_per_row(source):
    plain = epoch(make(source))
    op = trdata.BatchRandomErasing(p=0.7, value=-1.5)
    erased = epoch(make(source, batch_ops=[op]))
    hits = 0
    for b, ((x, y, _), (ex, ey, _)) in enumerate(zip(plain, erased)):
        rows = np.array(draws(op._spec(), b)[:-2]).reshape(-1, 4).astype(int)
        want = x.copy()
        for r, (top, left, eh, ew) in enumerate(rows):
            if eh:
                hits += 1
                assert eh < 16 and ew < 16
                want[r, :, top : top + eh, left : left + ew] = -1.5
        np.testing.assert_array_equal(ex, want)
        np.testing.assert_array_equal(ey, y)  # labels untouched
    assert hits > 0


# --- reproducibility ---------------------------------------------------------------------------------------

OPS = [
    trdata.BatchRandomChoice(
        [trdata.MixUp(alpha=0.2, num_classes=CLASSES), trdata.CutMix(num_classes=CLASSES)]
    ),
    trdata.BatchRandomErasing(value="random"),
]


def test_same_batches_for_any_worker_count_and_across_epochs(source):
    one = make(source, workers=1, batch_ops=OPS)
    three = make(source, workers=3, batch_ops=OPS)
    e0, e0b = epoch(one), epoch(three)
    for a, b in zip(e0, e0b):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)
    assert not np.array_equal(epoch(one)[0][1], e0[0][1])  # epoch 1 mixes differently
    for y in (a[1] for a in e0):
        np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-6)


def test_resume_mid_epoch_gives_the_same_mixed_batches(source):
    full = epoch(make(source, batch_ops=OPS))
    first = make(source, batch_ops=OPS)
    it = iter(first)
    next(it), next(it)
    state = first.state_dict()
    second = make(source, workers=1, batch_ops=OPS)
    second.load_state_dict(state)
    rest = epoch(second)
    assert len(rest) == 2
    for a, b in zip(full[2:], rest):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)


def test_float_targets_are_mixed_as_soft_labels(tmp_path):
    images = np.random.default_rng(1).integers(0, 256, (8, 12, 12, 3), dtype=np.uint8)
    targets = np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 0, 1, 2, 3]]
    src = trdata.Arrays(images, targets)
    plain = epoch(make(src, transforms=[trdata.CenterCrop(12)], batch_size=4))
    mixed = epoch(make(src, transforms=[trdata.CenterCrop(12)], batch_size=4, batch_ops=[trdata.MixUp()]))
    for b, ((_, y, _), (_, my, _)) in enumerate(zip(plain, mixed)):
        lam = draws(("mixup", {"alpha": 1.0, "num_classes": None}), b, rows=4, hw=(12, 12))[0]
        np.testing.assert_array_equal(my, np.roll(y, 1, 0) * np.float32(1 - lam) + y * np.float32(lam))
    with pytest.raises(trdata.ConfigError, match="num_classes=3 must equal the targets' width 4"):
        make(src, transforms=[trdata.CenterCrop(12)], batch_ops=[trdata.MixUp(num_classes=3)])


# --- batch_transform -----------------------------------------------------------------------------------------


def test_batch_transform_runs_in_another_thread_in_order_with_a_reproducible_generator(source):
    threads = set()

    def fn(batch, gen):
        threads.add(threading.current_thread().name)
        return batch.indices.copy(), gen.integers(1 << 30)

    with make(source, batch_transform=fn) as a, make(source, workers=1, batch_transform=fn) as b:
        ra, rb = list(a), list(b)
    plain = [i for _, _, i in epoch(make(source))]
    assert [list(i) for i, _ in ra] == [list(i) for i in plain]
    assert [g for _, g in ra] == [g for _, g in rb]
    assert len({g for _, g in ra}) == len(ra)
    assert threads == {"trdata-batch-transform"}


def test_batch_transform_returning_none_keeps_the_mutated_batch_after_the_batch_ops(source):
    def fn(batch, gen):
        assert batch.labels.shape == (6, CLASSES)  # batch ops ran first
        batch.images[:] = 0

    batches = list(make(source, batch_ops=[trdata.CutMix(num_classes=CLASSES)], batch_transform=fn))
    assert all(isinstance(b, trdata.Batch) and not b.images.any() for b in batches)


def test_batch_transform_errors_are_raised_at_their_batch(source):
    def fn(batch, gen):
        if fn.calls == 2:
            raise KeyError("boom")
        fn.calls += 1
        return fn.calls

    fn.calls = 0
    it = iter(make(source, batch_transform=fn))
    assert next(it) == 1 and next(it) == 2
    with pytest.raises(KeyError, match="boom"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_close_and_a_new_iterator_stop_the_prefetch_thread(source):
    loader = make(source, batch_transform=lambda b, g: b)
    it = iter(loader)
    next(it)
    it2 = iter(loader)  # supersedes it
    with pytest.raises(trdata.StaleIteratorError):
        next(it)
    next(it2)
    loader.close()
    with pytest.raises(trdata.LoaderClosedError):
        next(it2)
    assert not any(t.name == "trdata-batch-transform" and t.is_alive() for t in threading.enumerate())


def test_bad_batch_op_values_name_their_parameter(source):
    for kwargs, param in [
        (dict(batch_ops=[trdata.MixUp(alpha=-1.0, num_classes=CLASSES)]), "alpha"),
        (dict(batch_ops=[trdata.CutMix()]), "batch_ops"),  # a FileList without classes: num_classes needed
        (dict(batch_ops=[trdata.BatchRandomErasing(scale=(0.5, 2.0))]), "scale"),
        (
            dict(batch_ops=[trdata.BatchRandomErasing(value="random")], dtype="uint8", normalize=None),
            "batch_ops",
        ),
    ]:
        with pytest.raises(trdata.ConfigError) as e:
            make(source, **kwargs)
        assert e.value.parameter == param, str(e.value)
    with pytest.raises(trdata.ConfigError, match="nested RandomChoice"):
        trdata.BatchRandomChoice([trdata.BatchRandomChoice([trdata.MixUp()])])


@pytest.mark.parametrize("reproducible", [True, False])
def test_state_dict_with_batch_transform_counts_only_delivered_batches(source, reproducible):
    """The prefetch thread runs ahead: batches it holds are not the consumer's yet, so a checkpoint taken after k
    batches resumes at batch k (every sample exactly once in fast mode; the same batches in reproducible mode)."""

    def slow_copy(batch, _gen):
        time.sleep(0.02)  # let the thread pull the next batch from the core before the consumer asks
        return batch

    kw = dict(batch_transform=slow_copy, reproducible=reproducible)
    full = epoch(make(source, **kw))
    first = make(source, **kw)
    it = iter(first)
    head = [next(it) for _ in range(2)]
    time.sleep(0.2)  # the thread is now ahead of the consumer
    state = first.state_dict()
    assert state["batches"] == 2
    head_idx = [int(i) for b in head for i in b.indices]
    first.close()
    second = make(source, workers=1, **kw)
    second.load_state_dict(state)
    rest = list(second)
    rest_idx = [int(i) for b in rest for i in b.indices]
    assert sorted(head_idx + rest_idx) == sorted(int(i) for b in full for i in b[2])
    if reproducible:
        for a, b in zip(full[2:], rest):
            np.testing.assert_array_equal(a[0], b.images)


# -------------------- hostile inputs and their regressions -------------------------------------------------


GUARD_S = 60  # a hang guard for the subprocesses, not a speed requirement


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> list[str]:
    return write_jpegs(tmp_path_factory.mktemp("jpegs"), 16, size=lambda i: (40 + i, 36 + 2 * i))


def loader_of(paths, labels=None, **kw):
    kw.setdefault("transforms", T)
    kw.setdefault("normalize", trdata.IMAGENET)
    kw.setdefault("batch_size", 8)
    kw.setdefault("workers", 2)
    kw.setdefault("reproducible", True)
    kw.setdefault("seed", 3)
    classes = kw.pop("classes", ())
    return trdata.Loader(trdata.FileList(paths, labels, classes=classes), **kw)


@pytest.mark.parametrize("op", [trdata.MixUp, trdata.CutMix])
def test_one_hot_of_100k_classes_takes_memory_of_n_times_k_not_k_squared(paths, op):
    k, n = 100_000, 8
    labels = [(i * 12_347 + 99_990) % k for i in range(len(paths))]  # includes labels near k - 1
    loader = loader_of(paths, labels, batch_size=n, batch_ops=[op(alpha=0.7, num_classes=k)])
    tracemalloc.start()
    try:
        batches = list(loader)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(batches) == 2
    # One (N, k) float32 array is 3.2 MB; np.eye(k)[y] allocated k² · 4 = 40 GB (MemoryError).
    assert peak_bytes < 16 * n * k * 4, peak_bytes
    for b, batch in enumerate(batches):
        y = batch.labels
        assert y.shape == (n, k) and y.dtype == np.float32
        np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-6)
        hard = np.asarray([labels[i] for i in batch.indices])
        lam = _core.batch_op_draw(
            op(alpha=0.7, num_classes=k)._spec(),
            seed=3,
            epoch=0,
            batch=b,
            position=0,
            rows=n,
            height=16,
            width=16,
        )[0]
        want = np.zeros((n, k), np.float32)  # torchvision's _mixup_label on one_hot(hard)
        want[np.arange(n), np.roll(hard, 1)] += np.float32(1.0 - lam)
        want[np.arange(n), hard] += np.float32(lam)
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=0)


def test_soft_labels_equal_torchvision_v2_one_hot_mixing(paths):
    torch = pytest.importorskip("torch")
    v2 = pytest.importorskip("torchvision.transforms.v2")
    k = 1000
    labels = [(i * 97) % k for i in range(len(paths))]
    op = trdata.MixUp(alpha=0.4, num_classes=k)
    plain = [(np.array(b.images), np.array(b.labels)) for b in loader_of(paths, labels)]
    for b, (batch, (x, y)) in enumerate(zip(loader_of(paths, labels, batch_ops=[op]), plain)):
        d = _core.batch_op_draw(op._spec(), seed=3, epoch=0, batch=b, position=0, rows=8, height=16, width=16)
        ref = v2.MixUp(alpha=0.4, num_classes=k)
        ref.make_params = lambda _inputs, lam=d[0]: dict(lam=lam)
        tx, ty = ref(torch.from_numpy(x), torch.from_numpy(y))
        np.testing.assert_array_equal(batch.images, tx.numpy())
        np.testing.assert_array_equal(batch.labels, ty.numpy())


@pytest.mark.parametrize(
    "op",
    [
        trdata.MixUp(num_classes=3),
        trdata.CutMix(num_classes=3),
        trdata.BatchRandomChoice([trdata.BatchRandomErasing(), trdata.CutMix(num_classes=3)]),
    ],
    ids=["mixup", "cutmix", "choice"],
)
@pytest.mark.parametrize(
    ("bad", "words"),
    [(-1, "non-negative"), (3, "smaller than num_classes"), (10**12, "smaller than num_classes")],
)
def test_labels_outside_num_classes_are_refused_naming_the_op(paths, op, bad, words):
    labels = [i % 3 for i in range(len(paths))]
    labels[11] = bad  # in the second batch: a per-batch check would let the first one through
    with pytest.raises(trdata.ConfigError, match=words) as e:
        for _ in loader_of(paths, labels, batch_ops=[op]):
            pass
    assert e.value.parameter == "batch_ops", str(e.value)
    assert f"label {bad} (sample 11)" in str(e.value) and "batch_ops[0]" in str(e.value)


def test_labels_beyond_the_source_classes_are_refused(paths):
    labels = [i % 3 for i in range(len(paths))]
    labels[0] = 5  # k comes from classes (3 names)
    with pytest.raises(trdata.ConfigError, match="smaller than num_classes") as e:
        list(loader_of(paths, labels, classes=["a", "b", "c"], batch_ops=[trdata.MixUp()]))
    assert e.value.parameter == "batch_ops"


@pytest.mark.parametrize("num_classes", [-1, 0, True, np.bool_(True), 2**70, -(2**70), 2.0])
@pytest.mark.parametrize("op", [trdata.MixUp, trdata.CutMix])
def test_num_classes_must_be_a_positive_int(paths, op, num_classes):
    with pytest.raises(trdata.ConfigError) as e:
        loader_of(paths, [i % 3 for i in range(len(paths))], batch_ops=[op(num_classes=num_classes)])
    assert e.value.parameter == "num_classes", str(e.value)


@pytest.mark.parametrize("alpha", [5e-324, 1e-320, 1e-300, 2.0**-150])
@pytest.mark.parametrize("op", [trdata.MixUp, trdata.CutMix])
def test_an_alpha_that_float32_cannot_hold_is_refused_as_torchvision_does(paths, alpha, op):
    # checked by the core with the op's other values, when the Loader is made (as alpha <= 0 always was)
    with pytest.raises(trdata.ConfigError, match="float32") as e:
        loader_of(paths, [i % 3 for i in range(len(paths))], batch_ops=[op(alpha=alpha, num_classes=3)])
    assert e.value.parameter == "alpha"


def test_torchvision_refuses_the_same_alphas():
    pytest.importorskip("torch")
    v2 = pytest.importorskip("torchvision.transforms.v2")
    for alpha in (5e-324, 1e-300, 2.0**-150):
        with pytest.raises(ValueError):
            v2.MixUp(alpha=alpha, num_classes=3)
    v2.MixUp(alpha=2.0**-149, num_classes=3)  # the smallest positive float32 is a valid concentration


@pytest.mark.parametrize("op", [trdata.MixUp, trdata.CutMix])
def test_the_smallest_accepted_alpha_gives_finite_images_and_a_coin_flip_lambda(paths, op):
    """Beta(α, α) for α → 0 puts its mass on 0 and 1: λ is 0 or 1, never NaN."""
    alpha = 2.0**-149
    labels = [i % 3 for i in range(len(paths))]
    for batch in loader_of(paths, labels, batch_ops=[op(alpha=alpha, num_classes=3)]):
        assert np.isfinite(batch.images).all() and np.isfinite(batch.labels).all()
    lams = [
        _core.batch_op_draw(
            ("mixup", {"alpha": alpha, "num_classes": 3}),
            seed=1,
            epoch=0,
            batch=b,
            position=0,
            rows=8,
            height=16,
            width=16,
        )[0]
        for b in range(200)
    ]
    assert set(lams) == {0.0, 1.0}


_CHILD = textwrap.dedent(
    """
    import json, signal, sys, threading, warnings
    import trdata

    # Python's own Ctrl-C handler, also where the parent runs with SIGINT ignored (a background shell job)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    paths = json.loads(sys.argv[1])
    started = threading.Event()

    def never_returns(batch, generator):
        started.set()
        print("hanging", flush=True)
        threading.Event().wait()

    def loader_of():
        return trdata.Loader(trdata.FileList(paths), batch_size=4, transforms=[trdata.RandomResizedCrop(16)],
                             workers=1, batch_transform=never_returns)

    if sys.argv[2] == "close":
        loader = loader_of()
        it = iter(loader)
        started.wait()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader.close()
        print("closed", flush=True)
        for w in caught:
            print("warning", w.category.__name__, w.message, flush=True)
        try:
            next(it)
        except trdata.LoaderClosedError:
            print("iterator closed", flush=True)
        alive = [t for t in threading.enumerate() if t.name == "trdata-batch-transform"]
        print("abandoned", len(alive), all(t.daemon for t in alive), flush=True)
    else:
        with loader_of() as loader:
            for batch in loader:
                pass
    """
)


def _run_child(paths, mode):
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, json.dumps(paths), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc):
    try:
        return proc.communicate(timeout=GUARD_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the process hung (killed after {GUARD_S} s)\nstdout: {out}\nstderr: {err[-3000:]}")


def test_close_returns_warns_and_the_process_exits_while_batch_transform_never_returns(paths):
    proc = _run_child(paths, "close")
    out, err = _finish(proc)
    assert proc.returncode == 0, err[-3000:]
    lines = out.splitlines()
    assert "closed" in lines and "iterator closed" in lines, out
    warned = [line for line in lines if line.startswith("warning RuntimeWarning")]
    assert len(warned) == 1, out
    assert "batch_transform" in warned[0] and "never_returns" in warned[0] and "abandoned" in warned[0]
    assert "abandoned 1 True" in lines, out  # still running, as a daemon thread: it did not hold the exit


def test_ctrl_c_in_a_with_block_while_batch_transform_never_returns_exits(paths):
    proc = _run_child(paths, "with")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "hanging"
    proc.send_signal(signal.SIGINT)  # the consumer waits for the batch: KeyboardInterrupt, then __exit__
    _, err = _finish(proc)
    assert proc.returncode in (-signal.SIGINT, 128 + signal.SIGINT, 1), (proc.returncode, err[-3000:])
    assert "KeyboardInterrupt" in err, err[-3000:]
    assert "RuntimeWarning" in err and "batch_transform" in err and "abandoned" in err, err[-3000:]


@pytest.mark.parametrize("reproducible", [True, False])
def test_forged_batches_in_a_state_dict_are_refused_naming_them(paths, reproducible):
    loader = loader_of(paths, batch_size=5, reproducible=reproducible, last_batch="partial")
    n = len(loader)
    assert n == 4
    full = [b.indices.tolist() for b in loader]
    state = loader.state_dict()  # after the epoch: (1, 0)
    assert (state["epoch"], state["batches"]) == (1, 0)
    for bad in [True, False, np.bool_(True), -1, -(2**70), n + 1, 10**9, 2**64, 1.0, "1", None]:
        forged = dict(state, batches=bad)
        with pytest.raises(trdata.ConfigError, match="batches") as e:
            loader.load_state_dict(forged)
        assert e.value.parameter in ("batches", "state_dict"), str(e.value)
    for field in ("epoch", "version", "seed"):
        with pytest.raises(trdata.ConfigError, match=field) as e:
            loader.load_state_dict(dict(state, **{field: True}))
        assert e.value.parameter == "state_dict"
    with pytest.raises(trdata.ConfigError, match="num_samples") as e:
        loader.load_state_dict(
            dict(state, fingerprint=dict(state["fingerprint"], num_samples=np.bool_(True)))
        )
    # None of them moved the position: the next epoch is epoch 1, whole.
    assert loader.epoch == 1 and loader.state_dict() == state
    assert sorted(i for b in loader for i in b.indices.tolist()) == sorted(i for b in full for i in b)
    # The end of an epoch, (e, n), is a position (the same as (e + 1, 0)): still accepted.
    loader.load_state_dict(dict(state, epoch=4, batches=n))
    assert loader.epoch == 5 and len(list(loader)) == n
    loader.load_state_dict(dict(state, epoch=4, batches=np.int64(0)))  # numpy ints are ints
    assert loader.epoch == 4
    loader.close()
