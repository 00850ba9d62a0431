"""Lifecycle: lazy start, idempotent close, joins, no leaks over many cycles, Ctrl-C, fork refusal."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import write_jpegs
from conftest import worker_threads, worker_threads_after_join

RRC = [trdata.RandomResizedCrop(32)]


def make(paths, **kw):
    kw.setdefault("workers", 3)
    kw.setdefault("transforms", RRC)
    return trdata.Loader(trdata.FileList(paths), batch_size=kw.pop("batch_size", 4), **kw)


def test_workers_start_lazily_are_named_and_joined_on_close(small_paths):
    before = worker_threads()
    loader = make(small_paths[:40])
    assert worker_threads() == before, "constructor must only validate"
    it = iter(loader)
    next(it)
    assert worker_threads() == before + 3
    loader.close()
    assert worker_threads_after_join(before) == before
    loader.close()  # idempotent
    with pytest.raises(trdata.LoaderClosedError):
        next(iter(loader))


def test_close_mid_epoch_with_context_manager(small_paths):
    before = worker_threads()
    with make(small_paths, batch_size=2, workers=4) as loader:
        for i, _ in enumerate(loader):
            if i == 3:
                break
    assert loader.closed and worker_threads_after_join(before) == before


def test_restarting_iteration_cancels_the_running_epoch(small_paths):
    with make(small_paths[:40], reproducible=True, shuffle=True) as loader:
        it = iter(loader)
        next(it)
        full = [b.indices.tolist() for b in loader]  # new epoch while the first one is mid-way
        assert sorted(i for b in full for i in b) == list(range(40))


def test_two_hundred_cycles_leak_no_threads_or_memory(small_paths):
    paths = small_paths[:8]
    before = worker_threads()

    def cycle():
        with make(paths, batch_size=4, workers=2) as loader:
            for _ in loader:
                pass

    for _ in range(20):
        cycle()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(200):
        cycle()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert worker_threads_after_join(before) == before
    assert rss1 - rss0 < 50_000, f"max RSS grew by {rss1 - rss0} KiB over 200 cycles"


def test_ctrl_c_stops_iteration_mid_epoch(small_paths, tmp_path):
    """Ctrl-C interrupts a long epoch (1,200 RandomResizedCrop(512) decodes on one worker: seconds) and close() joins the worker.
    Typically ~0.3 s from signal to exit; the bound is only a hang guard (no timing threshold: CI is shared)."""
    script = tmp_path / "slow.py"
    script.write_text(
        textwrap.dedent(f"""
        import signal, sys, time, trdata
        # A parent that ignores SIGINT (CI shells, `cmd &`) passes SIG_IGN down; restore Python's handler.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        paths = {small_paths!r} * 10
        loader = trdata.Loader(trdata.FileList(paths), batch_size=len(paths), workers=1, dtype="uint8",
                               transforms=[trdata.RandomResizedCrop(512)])
        print("ready", flush=True)
        try:
            for b in loader:
                pass
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            loader.close()
            sys.exit(3)
    """)
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=60)
    elapsed = time.monotonic() - t0
    assert rc == 3 and proc.stdout.read().strip() == "interrupted", f"rc={rc} after {elapsed:.2f}s"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_after_start_is_refused(small_paths):
    loader = make(small_paths[:16])
    next(iter(loader))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            next(iter(loader))
            msg = b"no error"
        except trdata.LoaderClosedError as e:
            msg = b"refused:" + str(e).encode()[:100]
        except BaseException as e:
            msg = repr(e).encode()[:100]
        os.write(w, msg)
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    msg = os.read(r, 200)
    assert msg.startswith(b"refused:"), msg
    assert len(list(loader)) == 4  # the parent keeps working
    loader.close()


# --- fork while another thread iterates; superseded iterators -------------------------------------------------


@pytest.fixture(scope="module")
def noisy_jpegs(tmp_path_factory) -> list[str]:
    """48 noise JPEGs of 192×192: slow enough to decode that a consumer waits inside `next` most of the time."""
    import numpy as np
    from PIL import Image

    root = tmp_path_factory.mktemp("noisy")
    rng = np.random.default_rng(1)
    paths = []
    for i in range(48):
        p = root / f"{i:02d}.jpg"
        Image.fromarray(rng.integers(0, 256, (192, 192, 3), dtype=np.uint8)).save(p, quality=95)
        paths.append(str(p))
    return paths


def _slow_loader(paths, **kw):
    kw.setdefault("batch_size", 2)
    return trdata.Loader(
        trdata.FileList(paths), workers=1, transforms=[trdata.RandomResizedCrop(160)], dtype="uint8", **kw
    )


_CHILD_CALLS = {
    "len": lambda L: len(L),
    "epoch": lambda L: L.epoch,
    "stats": lambda L: L.stats(),
    "state_dict": lambda L: L.state_dict(),
    "load_state_dict": lambda L: L.load_state_dict(L._state0),
    "set_epoch": lambda L: L.set_epoch(3),
    # the fork is reported before the arguments are looked at (not "ConfigError: missing 'fingerprint'")
    "load_state_dict({})": lambda L: L.load_state_dict({}),
    "load_state_dict(None)": lambda L: L.load_state_dict(None),
    "set_epoch(-1)": lambda L: L.set_epoch(-1),
    "set_epoch('x')": lambda L: L.set_epoch("x"),
    "iter": lambda L: iter(L),
    "next": lambda L: next(iter(L)),
    "device_mem_info": lambda L: L.device_mem_info(),
}


def _in_forked_child(fn, timeout_s: int = 4) -> str:
    """Run ``fn()`` in a forked child that SIGALRM kills after ``timeout_s`` (so a hang fails, not hangs, the
    test); returns what it wrote to the pipe, or 'hung' / the signal that killed it."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only os._exit leaves it
        try:
            os.close(r)
            signal.alarm(timeout_s)  # default action: terminate
            try:
                msg = fn()
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                msg = f"{type(e).__name__}: {e}"
            os.write(w, msg.encode()[:300])
        finally:
            os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    out = os.read(r, 400).decode()
    os.close(r)
    if os.WIFSIGNALED(status):
        return "hung" if os.WTERMSIG(status) == signal.SIGALRM else f"killed by signal {os.WTERMSIG(status)}"
    return out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_while_another_thread_iterates_refuses_every_call(noisy_jpegs):
    import threading

    loader = _slow_loader(noisy_jpegs)
    loader._state0 = loader.state_dict()
    stop = threading.Event()
    got: list[int] = []
    last: list = []
    errors: list[BaseException] = []

    def iterate():
        try:
            while not stop.is_set():
                for b in loader:  # the native loader's mutex is held inside next() while it waits
                    got.append(b.epoch)
                    last[:] = [b]
                    if stop.is_set():
                        break
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=iterate)
    t.start()
    try:
        while len(got) < 2:
            time.sleep(0.01)
        results = {}
        for name, call in _CHILD_CALLS.items():
            results[name] = _in_forked_child(lambda call=call: repr(call(loader)))
        results["closed"] = _in_forked_child(lambda: repr(loader.closed))
        results["close"] = _in_forked_child(lambda: repr(loader.close()))

        def drop_all():
            last.clear()  # a batch of the parent's loader, then the loader itself
            del loader._native
            import gc

            gc.collect()
            return "dropped"

        results["drop"] = _in_forked_child(drop_all)
        n_before, deadline = len(got), time.monotonic() + 20
        while len(got) <= n_before + 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(got) > n_before + 2, "the parent's iteration must go on"
    finally:
        stop.set()
        t.join(timeout=30)
    assert not t.is_alive() and not errors, errors
    for name in _CHILD_CALLS:
        assert results[name].startswith("LoaderClosedError: "), (name, results[name])
        assert "fork" in results[name] and "create the Loader in the child" in results[name], results[name]
    assert results["closed"] == "True", results["closed"]
    assert results["close"] == "None", results["close"]
    assert results["drop"] == "dropped", results["drop"]
    last.clear()
    assert sum(1 for _ in loader) == len(loader)  # the parent keeps working
    loader.close()


def test_a_new_iterator_supersedes_an_older_one_in_the_same_thread(noisy_jpegs):
    paths = noisy_jpegs[:24]
    with _slow_loader(paths, batch_size=4, shuffle=True, reproducible=True) as loader:
        it1 = iter(loader)
        first = next(it1)
        it2 = iter(loader)  # created, not started yet: it already owns the loader
        with pytest.raises(trdata.StaleIteratorError, match="superseded"):
            next(it1)
        with pytest.raises(StopIteration):
            next(it1)  # a stale iterator stays finished
        second = [(b.epoch, b.indices.tolist()) for b in it2]
        assert {e for e, _ in second} == {first.epoch + 1}
        assert sorted(i for _, ix in second for i in ix) == list(range(24))

        it3 = iter(loader)
        next(it3)
        it4 = iter(loader)
        rest = [next(it4).indices.tolist()]  # started: the older one gets an error, never a batch of it
        with pytest.raises(trdata.StaleIteratorError):
            next(it3)
        rest += [b.indices.tolist() for b in it4]
        assert sorted(i for ix in rest for i in ix) == list(range(24))
        assert isinstance(trdata.StaleIteratorError("x"), RuntimeError)

        # the common pattern: peek, break, then a fresh full loop
        for _ in loader:
            break
        epoch = loader.epoch
        full = [(b.epoch, b.indices.tolist()) for b in loader]
        assert {e for e, _ in full} == {epoch}
        assert sorted(i for _, ix in full for i in ix) == list(range(24))


class _BackgroundConsumer:
    """Iterates ``loader`` in a thread, ``pause_s`` between batches, recording (epoch, indices) per batch and the
    exception that ended it; ``started`` is set after ``after`` batches (or when the thread ends)."""

    def __init__(self, loader, pause_s: float, after: int = 1) -> None:
        import threading

        self.batches: list = []
        self.errors: list[BaseException] = []
        self.started = threading.Event()
        self._args = (loader, pause_s, after)
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        loader, pause_s, after = self._args
        try:
            for b in loader:
                self.batches.append((b.epoch, b.indices.tolist()))
                if len(self.batches) >= after:
                    self.started.set()
                time.sleep(pause_s)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.errors.append(e)
        finally:
            self.started.set()

    def join(self) -> None:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()


def test_two_threads_never_interleave_two_epochs(noisy_jpegs):
    paths = noisy_jpegs[:40]
    with _slow_loader(paths, batch_size=2, shuffle=True) as loader:
        a = _BackgroundConsumer(loader, pause_s=0.05, after=2)
        assert a.started.wait(30)
        b_batches = [(b.epoch, b.indices.tolist()) for b in loader]  # a second thread's iteration
        a.join()
        a_batches, a_error = a.batches, a.errors
        assert len(a_batches) < len(loader), "thread A should have been mid-epoch"
        assert len(a_error) == 1 and isinstance(a_error[0], trdata.StaleIteratorError), a_error
        a_epochs = {e for e, _ in a_batches}
        b_epochs = {e for e, _ in b_batches}
        assert len(a_epochs) == 1 and len(b_epochs) == 1 and a_epochs != b_epochs, (a_epochs, b_epochs)
        a_rows = [i for _, ix in a_batches for i in ix]
        assert len(a_rows) == len(set(a_rows))  # no duplicates within A's part of its epoch
        assert sorted(i for _, ix in b_batches for i in ix) == list(range(40))  # B: a whole epoch, once each


def test_superseded_iterator_on_a_cuda_loader(noisy_jpegs):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("CUDA not available")
    paths = noisy_jpegs[:24]
    with _slow_loader(paths, batch_size=4, shuffle=True, device="cuda:0") as loader:
        it1 = iter(loader)
        first = next(it1)
        it2 = iter(loader)
        with pytest.raises(trdata.StaleIteratorError):
            next(it1)
        rows = [(b.epoch, b.indices.tolist()) for b in it2]
        assert {e for e, _ in rows} == {first.epoch + 1}
        assert sorted(i for _, ix in rows for i in ix) == list(range(24))


# --- load_state_dict and close while an iterator runs -------------------------------------------------------


def test_load_state_dict_supersedes_running_iterators_like_a_new_iter(noisy_jpegs):
    paths = noisy_jpegs[:24]
    with _slow_loader(paths, batch_size=4, shuffle=True, reproducible=True) as loader:
        it = iter(loader)
        first = [next(it), next(it)]
        state = loader.state_dict()  # after 2 of 6 batches
        loader.load_state_dict(state)
        with pytest.raises(trdata.StaleIteratorError, match="load_state_dict"):
            next(it)  # it used to end quietly here, as if the epoch were complete
        with pytest.raises(StopIteration):
            next(it)
        rest = [b for b in loader]  # a new iteration resumes from the state
        assert len(rest) == 4 and {b.epoch for b in rest} == {first[0].epoch}
        rows = [i for b in first + rest for i in b.indices.tolist()]
        assert sorted(rows) == list(range(24))

        # an iterator made but not started yet is superseded too
        it2 = iter(loader)
        loader.load_state_dict(loader.state_dict())
        with pytest.raises(trdata.StaleIteratorError):
            next(it2)

        # a refused state changes nothing: the running iterator goes on
        it3 = iter(loader)
        b0 = next(it3)
        with pytest.raises(trdata.ConfigError):
            loader.load_state_dict(dict(loader.state_dict(), seed=12345))
        rest3 = [b0] + list(it3)
        assert len(rest3) == len(loader)
        assert sorted(i for b in rest3 for i in b.indices.tolist()) == list(range(24))


def test_load_state_dict_supersedes_an_iterator_waiting_in_another_thread(noisy_jpegs):
    with _slow_loader(noisy_jpegs[:40], batch_size=2, shuffle=True) as loader:
        consumer = _BackgroundConsumer(loader, pause_s=0.02)
        assert consumer.started.wait(30)
        state = loader.state_dict()
        loader.load_state_dict(dict(state, batches=0, delivered=[]))
        consumer.join()
        got, errors = consumer.batches, consumer.errors
        assert len(got) < len(loader), "the consumer should have been mid-epoch"
        assert len(errors) == 1 and isinstance(errors[0], trdata.StaleIteratorError), (errors, len(got))


def test_close_while_iterating_raises_loader_closed_on_the_next_next(noisy_jpegs):
    loader = _slow_loader(noisy_jpegs[:24], batch_size=4)
    it = iter(loader)
    next(it)
    made = iter(loader)  # superseded by nothing after it: close() is what it meets
    loader.close()
    with pytest.raises(trdata.LoaderClosedError, match="closed"):
        next(made)
    loader2 = _slow_loader(noisy_jpegs[:24], batch_size=4)
    it2 = iter(loader2)
    next(it2)
    loader2.close()
    with pytest.raises(trdata.LoaderClosedError, match="closed"):
        next(it2)  # not a quiet StopIteration
    with pytest.raises(trdata.LoaderClosedError):
        iter(loader2).__next__()
    with pytest.raises(trdata.LoaderClosedError):
        loader2.load_state_dict({"version": 1})  # closed is reported before a malformed state


# --- the skip warning -----------------------------------------------------------------------------------------


def test_skip_warning_has_one_prefix_and_survives_a_non_utf8_path(small_paths, tmp_path):
    import io
    import logging

    bad = os.fsdecode(os.path.join(os.fsencode(str(tmp_path)), b"bad-\xff\xfe.jpg"))
    with open(bad, "wb") as f:
        f.write(b"not a jpeg at all")
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))  # "%(levelname)s:%(name)s:%(message)s"
    errors: list = []
    handler.handleError = lambda record: errors.append(record)  # a record lost to an encoding error
    log = logging.getLogger("trdata")
    log.addHandler(handler)
    try:
        with make([*small_paths[:7], bad], batch_size=8, on_error="skip", workers=1) as loader:
            assert len(list(loader)) == 1
    finally:
        log.removeHandler(handler)
    assert not errors, "the warning could not be written to a strict UTF-8 stream"
    text = stream.buffer.getvalue().decode("utf-8")
    assert text.startswith("WARNING:trdata:skipping undecodable sample "), text
    assert "trdata:trdata" not in text
    assert "bad-\\xff\\xfe.jpg" in text, text


STUCK_SCRIPT = """
import signal, sys, threading, warnings
import numpy as np
import trdata
sys.path.insert(0, {tests!r})
from _fixtures import photo
# A parent that ignores SIGINT (CI shells, `cmd &`) passes SIG_IGN down; restore Python's handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
entered = threading.Event()


def stuck():
    if not entered.is_set():
        entered.set()
        print("entered", flush=True)
    threading.Event().wait()  # never returns: a read from a dead mount, a lock never released


probed = []  # the first call of each: the source's read of item 0, the Loader's probe of the step (they return)


class StuckDataset:
    def __len__(self):
        return 16

    def __getitem__(self, i):
        if not probed:
            probed.append(i)
            return np.zeros((16, 16, 3), np.uint8), 0
        stuck()


def stuck_step(image):
    if not probed:
        probed.append(image)
        return image
    stuck()
    return image


if {what!r} == "dataset":
    ld = trdata.Loader(StuckDataset(), batch_size=4, workers=2, transforms=[trdata.CenterCrop(8)])
else:
    images = np.stack([photo(i, 16, 16) for i in range(16)])
    ld = trdata.Loader(trdata.Arrays(images), batch_size=4, workers=2, transforms=[trdata.PythonStep(stuck_step)])


def on_usr1(signum, frame):  # runs in the main thread, between the wait slices of its next()
    if {ending!r} == "close":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ld.close()
        print("closed:", [str(w.message)[:40] for w in caught if w.category is RuntimeWarning], flush=True)
    else:
        print("leaving", flush=True)
        sys.exit(0)  # the interpreter exits with the loader open: the atexit hook closes it


signal.signal(signal.SIGUSR1, on_usr1)
try:
    for b in ld:  # the parent signals once a worker is stuck
        pass
except trdata.errors.LoaderClosedError:
    print("iterator: closed", flush=True)
print("leaving", flush=True)
"""


@pytest.mark.parametrize("ending", ["close", "exit", "ctrl-c"])
@pytest.mark.parametrize("what", ["dataset", "step"])
def test_a_sample_stuck_in_python_never_hangs_close_exit_or_ctrl_c(what, ending):
    """A dataset's __getitem__ or a PythonStep that never returns (its thread is stuck in Python and cannot be
    stopped) made close(), the interpreter's exit and Ctrl-C hang for ever: close() joined the workers unbounded.
    close() now waits trdata's STOP_WAIT (5 s), then leaves the stuck threads running, detached, with a
    RuntimeWarning, and the process exits. The timeout is only a hang guard (no timing threshold)."""
    tests = str(Path(__file__).parent)
    script = STUCK_SCRIPT.format(tests=tests, what=what, ending=ending)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout.readline().strip() == "entered"
        proc.send_signal(signal.SIGINT if ending == "ctrl-c" else signal.SIGUSR1)
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    left_running = "worker thread(s) of this Loader still in a sample"
    if ending == "ctrl-c":
        assert "KeyboardInterrupt" in err, err
    else:
        assert proc.returncode == 0, err
        assert out.strip().endswith("leaving"), out
    if ending == "close":
        assert re.search(r"closed: \['[12] worker thread\(s\) of this Loader still", out), out
        assert "iterator: closed" in out, out
    else:
        assert left_running in err, err  # the atexit hook's close() warned


# -------------------- hostile inputs and their regressions -------------------------------------------------


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
