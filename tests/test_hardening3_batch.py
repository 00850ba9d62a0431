"""Hostile inputs to the batch ops, batch_transform's prefetch thread and load_state_dict (hardening, third round),
on real Loaders over real JPEG files:

* MixUp/CutMix one-hot labels take O(N·k) memory (100,000 classes on a batch of 8), labels outside
  ``0 ≤ y < num_classes`` are refused naming ``batch_ops``, the op, the label and its sample (torch's ``one_hot``
  wording), ``num_classes`` is a
  positive int, and an ``alpha`` that torchvision's float32 Beta cannot hold (its sampler would give NaN images) is
  refused naming ``alpha``;
* ``close()`` (and a ``with`` block left by Ctrl-C) returns while a ``batch_transform`` never returns, warns that
  its thread was abandoned, and the process exits (real subprocesses, a wall-clock guard against hangs only);
* a forged ``batches`` in a ``state_dict`` (a bool, negative, beyond the epoch) is refused naming it, and the
  loader's position is left as it was; ``batches`` equal to the epoch's count (its end) stays accepted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest
import trdata
from _fixtures import write_jpegs
from trdata import _core

T = [trdata.RandomResizedCrop(16), trdata.RandomHorizontalFlip()]
GUARD_S = 60  # a hang guard for the subprocesses, not a speed requirement


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> list[str]:
    return write_jpegs(tmp_path_factory.mktemp("jpegs"), 16, size=lambda i: (40 + i, 36 + 2 * i))


def make(paths, labels=None, **kw):
    kw.setdefault("transforms", T)
    kw.setdefault("normalize", trdata.IMAGENET)
    kw.setdefault("batch_size", 8)
    kw.setdefault("workers", 2)
    kw.setdefault("reproducible", True)
    kw.setdefault("seed", 3)
    classes = kw.pop("classes", ())
    return trdata.Loader(trdata.FileList(paths, labels, classes=classes), **kw)


# --- A. MixUp/CutMix labels, num_classes and alpha ----------------------------------------------------------


@pytest.mark.parametrize("op", [trdata.MixUp, trdata.CutMix])
def test_one_hot_of_100k_classes_takes_memory_of_n_times_k_not_k_squared(paths, op):
    k, n = 100_000, 8
    labels = [(i * 12_347 + 99_990) % k for i in range(len(paths))]  # includes labels near k - 1
    loader = make(paths, labels, batch_size=n, batch_ops=[op(alpha=0.7, num_classes=k)])
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
    plain = [(np.array(b.images), np.array(b.labels)) for b in make(paths, labels)]
    for b, (batch, (x, y)) in enumerate(zip(make(paths, labels, batch_ops=[op]), plain)):
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
        for _ in make(paths, labels, batch_ops=[op]):
            pass
    assert e.value.parameter == "batch_ops", str(e.value)
    assert f"label {bad} (sample 11)" in str(e.value) and "batch_ops[0]" in str(e.value)


def test_labels_beyond_the_source_classes_are_refused(paths):
    labels = [i % 3 for i in range(len(paths))]
    labels[0] = 5  # k comes from classes (3 names)
    with pytest.raises(trdata.ConfigError, match="smaller than num_classes") as e:
        list(make(paths, labels, classes=["a", "b", "c"], batch_ops=[trdata.MixUp()]))
    assert e.value.parameter == "batch_ops"


@pytest.mark.parametrize("num_classes", [-1, 0, True, np.bool_(True), 2**70, -(2**70), 2.0])
@pytest.mark.parametrize("op", [trdata.MixUp, trdata.CutMix])
def test_num_classes_must_be_a_positive_int(paths, op, num_classes):
    with pytest.raises(trdata.ConfigError) as e:
        make(paths, [i % 3 for i in range(len(paths))], batch_ops=[op(num_classes=num_classes)])
    assert e.value.parameter == "num_classes", str(e.value)


@pytest.mark.parametrize("alpha", [5e-324, 1e-320, 1e-300, 2.0**-150])
@pytest.mark.parametrize("op", [trdata.MixUp, trdata.CutMix])
def test_an_alpha_that_float32_cannot_hold_is_refused_as_torchvision_does(paths, alpha, op):
    # checked by the core with the op's other values, when the Loader is made (as alpha <= 0 always was)
    with pytest.raises(trdata.ConfigError, match="float32") as e:
        make(paths, [i % 3 for i in range(len(paths))], batch_ops=[op(alpha=alpha, num_classes=3)])
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
    for batch in make(paths, labels, batch_ops=[op(alpha=alpha, num_classes=3)]):
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


# --- B. batch_transform that never returns ------------------------------------------------------------------

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

    def make():
        return trdata.Loader(trdata.FileList(paths), batch_size=4, transforms=[trdata.RandomResizedCrop(16)],
                             workers=1, batch_transform=never_returns)

    if sys.argv[2] == "close":
        loader = make()
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
        with make() as loader:
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


# --- C. forged state_dict positions -------------------------------------------------------------------------


@pytest.mark.parametrize("reproducible", [True, False])
def test_forged_batches_in_a_state_dict_are_refused_naming_them(paths, reproducible):
    loader = make(paths, batch_size=5, reproducible=reproducible, last_batch="partial")
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
