"""Run a command and watch it for a hang: every few seconds each thread's CPU time, state and wait channel, and the
GPU's utilization; on the hang signature or at the time limit, the JPEG engines' utilization and every thread's
kernel stack and system call (with the library the user-space PC is in), then the command is killed.

    python benches/tools/watch.py [--limit 170] [--every 5] [--stall 3] [--gpu 0] -- python3 benches/gpu/gpu_feed.py ...

The hang signature (docs/design/gpu-decode-log.md §20) is `--stall` samples in a row with the GPU 100 % busy and its memory
controller 0 % busy: GPU work that never completes while a host thread spins in the driver behind it. Needs Linux
/proc (kernel stacks need root) and, for the GPU columns, nvidia-smi (`--gpu`: its index as nvidia-smi counts,
default 0). The command runs in its own process group, and the whole group is killed (torchrun's ranks, a DataLoader's
workers, a wrapper's children). Exit status: the command's (128 + N when signal N ended it), or 124 when it was
killed at the limit, 125 on the hang signature.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time


def threads(pid: int) -> dict[str, tuple[str, str, int, str]]:
    """tid → (name, state, utime + stime in ticks, wait channel)."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            st = open(f"/proc/{pid}/task/{t}/stat").read()
            comm = st[st.index("(") + 1 : st.rindex(")")]
            f = st[st.rindex(")") + 2 :].split()
            wchan = open(f"/proc/{pid}/task/{t}/wchan").read().strip()
            out[t] = (comm, f[0], int(f[11]) + int(f[12]), wchan)
        except (OSError, ValueError):
            pass  # the thread ended meanwhile
    return out


def smi(*args: str) -> str:
    """nvidia-smi's output, or '' without it or when it does not answer in 30 s (a wedged driver)."""
    if not shutil.which("nvidia-smi"):
        return ""
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30).stdout
    except subprocess.TimeoutExpired:
        return ""


def gpu_util(gpu: int) -> str:
    """'GPU %, memory %, MiB used, SM clock' of GPU `gpu`, or ''."""
    q = "--query-gpu=utilization.gpu,utilization.memory,memory.used,clocks.sm"
    return smi("-i", str(gpu), q, "--format=csv,noheader").strip()


def where(pid: int, pc: int) -> str:
    """The mapped file (and offset) that holds address `pc`."""
    for line in open(f"/proc/{pid}/maps"):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= pc < hi:
            return line.split()[-1].rsplit("/", 1)[-1] + f"+{pc - lo:#x}"
    return "?"


def dump(pid: int, gpu: int) -> None:
    """Every thread's kernel stack and system call, and the GPU engines' utilization."""
    print(smi("-i", str(gpu), "-q", "-d", "UTILIZATION")[-900:], file=sys.stderr, flush=True)
    for t, (name, state, _, wchan) in threads(pid).items():
        try:
            stack = [x.strip() for x in open(f"/proc/{pid}/task/{t}/stack").read().splitlines()[:4]]
        except OSError as e:
            stack = [str(e)]
        try:
            sc = open(f"/proc/{pid}/task/{t}/syscall").read().split()
        except OSError:
            sc = []
        lib = where(pid, int(sc[-1], 16)) if len(sc) >= 9 else ""
        print(
            t, name, state, wchan, "syscall", sc[:3], lib, "|", " / ".join(stack), file=sys.stderr, flush=True
        )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--limit", type=float, default=170.0, help="seconds before the command is dumped and killed"
    )
    p.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    p.add_argument(
        "--stall", type=int, default=3, help="samples of the hang signature that end the run (0: never)"
    )
    p.add_argument("--gpu", type=int, default=0, help="the GPU to watch (nvidia-smi's index)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    a = p.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("give the command after --")
    if a.limit <= 0 or a.every <= 0 or a.stall < 0:
        p.error("--limit and --every must be > 0, --stall ≥ 0")
    proc = subprocess.Popen(cmd, start_new_session=True)  # its own process group: killed whole

    def end(why: str, code: int) -> int:
        print(f"[watch] {why}: dumping, killing", file=sys.stderr, flush=True)
        try:
            dump(proc.pid, a.gpu)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        return code

    t0, prev, sig = time.time(), {}, 0
    while proc.poll() is None and time.time() - t0 < a.limit:
        time.sleep(max(0.0, min(a.every, a.limit - (time.time() - t0))))
        if proc.poll() is not None:
            break
        try:
            cur = threads(proc.pid)
        except OSError:  # gone between poll() and the read
            continue
        busy = sorted(((v[2] - prev.get(t, ("", "", 0, ""))[2], v) for t, v in cur.items()), reverse=True)[:6]
        u = gpu_util(a.gpu)
        main_thread = cur.get(str(proc.pid))
        print(
            f"[watch {time.time() - t0:5.0f}s] threads={len(cur)} main={main_thread} gpu={u}", file=sys.stderr
        )
        print("   busiest:", [(d, v[0], v[1], v[3]) for d, v in busy if d > 0], file=sys.stderr, flush=True)
        prev = cur
        sig = sig + 1 if u.startswith("100 %, 0 %") else 0
        if a.stall and sig >= a.stall:
            return end(f"hang signature for {sig} samples", 125)
    if proc.poll() is None:
        return end(f"still running after {a.limit:g} s", 124)
    rc = proc.returncode
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
