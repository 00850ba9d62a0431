"""Lifecycle: lazy start, idempotent close, joins, no leaks over many cycles, Ctrl-C, fork refusal."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import trdata
from conftest import worker_threads

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
    assert worker_threads() == before
    loader.close()  # idempotent
    with pytest.raises(trdata.LoaderClosedError):
        next(iter(loader))


def test_close_mid_epoch_with_context_manager(small_paths):
    before = worker_threads()
    with make(small_paths, batch_size=2, workers=4) as loader:
        for i, _ in enumerate(loader):
            if i == 3:
                break
    assert loader.closed and worker_threads() == before


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
    assert worker_threads() == before
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
