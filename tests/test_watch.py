"""benches/tools/watch.py, the hang watcher of the GPU runs (docs/design/gpu-decode-log.md §20), on real processes: the command's own
exit status comes back, and a command still running at the limit is dumped (every thread's state and system call)
and killed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

WATCH = Path(__file__).resolve().parents[1] / "benches" / "tools" / "watch.py"

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")


def watch(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(WATCH), *args], capture_output=True, text=True, timeout=timeout
    )


def test_the_commands_exit_status_and_output_come_back():
    r = watch(
        "--every", "0.2", "--", sys.executable, "-c", "import time; time.sleep(0.5); print('out'); exit(7)"
    )
    assert r.returncode == 7, r.stderr
    assert r.stdout == "out\n"
    assert "[watch" in r.stderr  # sampled at least once while it ran


def alive_with(marker: str) -> list[int]:
    """Pids whose command line holds `marker`."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in open(f"/proc/{pid}/cmdline").read().replace("\0", " "):
                out.append(int(pid))
        except OSError:
            pass
    return out


def test_a_command_past_the_limit_is_dumped_and_killed_with_its_children():
    t0 = time.time()
    marker = f"{60 + os.getpid() % 1000 / 1000:.3f}"  # a sleep only this test runs
    r = watch("--limit", "1.5", "--every", "0.5", "--", "bash", "-c", f"sleep {marker}; true")
    assert r.returncode == 124, r.stderr
    assert time.time() - t0 < 30
    assert "still running after 1.5 s" in r.stderr
    # The dump names the waiting shell, its state and (where /proc lets us read it) its system call.
    dumped = [line for line in r.stderr.splitlines() if " syscall [" in line]
    assert dumped and any(" bash S " in line for line in dumped), r.stderr
    if os.access("/proc/self/syscall", os.R_OK):
        assert any(re.search(r" syscall \['\d+'", line) for line in dumped), dumped
    # The whole process group went: the shell's sleep too, not only the shell.
    deadline = time.time() + 5
    while alive_with(f"sleep {marker}") and time.time() < deadline:
        time.sleep(0.1)
    assert not alive_with(f"sleep {marker}")


def test_a_command_ended_by_a_signal_exits_128_plus_the_signal():
    r = watch("--every", "0.2", "--", "bash", "-c", "kill -TERM $$")
    assert r.returncode == 128 + 15, r.stderr


def test_no_command_is_a_usage_error():
    r = watch("--limit", "1")
    assert r.returncode == 2 and "give the command after --" in r.stderr
