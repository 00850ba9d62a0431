"""One node: DDP per-GPU rates at 1 and N GPUs per feeder, NUMA placement, and a SIGKILL-and-resume.

    python benches/gpu/node_ddp.py --data DIR [--gpus 8] [--models resnet50,resnet18] [--feeds synthetic,trdata,dataloader]
                               [--steps 80 --warmup 30 --batch 256] [--decode cpu] [--pin numa] [--packed FILE]
                               [--kill] [--repeat K] [--json OUT] [-- extra train_ddp.py args]

Everything runs through ``torchrun --standalone --nproc_per_node=n examples/train_ddp.py`` (bf16 autocast,
channels_last on CUDA): for each model and feeder, n = 1 and n = ``--gpus``, ``--rate`` mode, which prints every
rank's img/s over the steps after ``--warmup``. The 1-GPU job runs on rank 0's share of the cores (the first 1/N),
so it is fed by the cores one GPU gets at n. The table gives the 1-GPU rate, the per-GPU mean (and slowest rank)
at n GPUs, their ratio (the issue's target: ≥ 0.95) and × synthetic per GPU at n (target for ResNet-50: ≥ 0.97).
Then one trdata run at n GPUs with ``--numa-report``: where each rank's GPU hangs, its workers' CPUs and the pages
of its big anonymous mappings (the pinned staging slabs among them) by node.

``--kill``: an uninterrupted run of ``--kill-steps`` steps with every rank's ``(step, loss, checksum)`` lines
(checkpoints every ``--save-every`` steps, ``--deterministic``), the same job SIGKILLed — torchrun and every rank,
no cleanup — once every rank has printed step ``--kill-at``, then ``--resume`` from the newest checkpoint step every
rank has, to the end. Every (rank, step) of the uninterrupted run must appear with the same loss and batch checksum
(the steps after the checkpoint are made twice: both times must match). Exit status 1 on any mismatch. Every job
has a deadline (``--timeout``): past it the whole job is killed and the bench fails.

Without CUDA the same runs use gloo and the CPU (``-- --model tiny --image-size 64`` keeps them short): that is how
this file is tested (tests/test_node_ddp.py) until an 8-GPU machine runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import REPO, write_json  # noqa: E402
from common.recipe import repeats_for  # noqa: E402

TRAIN = str(REPO / "examples" / "train_ddp.py")
STEP_LINE = re.compile(r"rank (\d+) step (\d+) epoch (\d+) loss (\S+) checksum ([0-9a-f]{16}|-)")


def auto_repeat(data: str, images_per_step: int, steps: int) -> int:
    """How many times the folder's file list must repeat so that one epoch holds `steps` global steps of
    `images_per_step` images: a small sample (the 300-file ImageNet one) would otherwise give epochs of a batch or
    none at all (300 files < 8 GPUs × 256), restarting every feeder's pipeline each step."""
    import trdata

    return repeats_for(len(trdata.ImageFolder(data).paths), images_per_step * steps)


def torchrun(n: int, args: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={n}",
        TRAIN,
        *args,
    ]


def run(n: int, args: list[str], timeout: float, cpus: list[int] | None = None) -> str:
    """One torchrun job's stdout; on a timeout the whole job (every rank) is killed. `cpus`: the job's CPUs."""
    proc = subprocess.Popen(
        torchrun(n, args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as timed_out:
        kill_tree(proc.pid)
        out, err = proc.communicate()
        raise RuntimeError(
            f"torchrun -n {n} {' '.join(args)} timed out after {timeout} s:\n{err[-4000:]}"
        ) from timed_out
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun -n {n} {' '.join(args)} failed ({proc.returncode}):\n{err[-4000:]}")
    return out


def steps_of(text: str) -> dict[tuple[int, int], tuple[str, str]]:
    """(rank, step) → (loss, checksum) of every step line (lines of two ranks may share a physical line)."""
    return {(int(r), int(s)): (loss, digest) for r, s, _e, loss, digest in STEP_LINE.findall(text)}


def compare(reference: dict, killed: dict, resumed: dict) -> list[str]:
    """What differs between the uninterrupted run and the killed run continued by the resumed one."""
    bad = []
    for key, want in sorted(reference.items()):
        seen = [d[key] for d in (killed, resumed) if key in d]
        if not seen:
            bad.append(f"rank {key[0]} step {key[1]}: missing after the resume")
        bad += [f"rank {key[0]} step {key[1]}: {got} != {want}" for got in seen if got != want]
    extra = sorted(set(resumed) - set(reference))
    bad += [f"rank {r} step {s}: not in the uninterrupted run" for r, s in extra]
    return bad


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every descendant at once (torchrun starts each rank in a session of its own, so a
    process-group kill would leave the ranks running)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, frontier = [pid], [pid]
    while frontier:
        frontier = [c for c, pp in parent.items() if pp in frontier]
        tree += frontier
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_test(a: argparse.Namespace, common: list[str], tmp: str) -> dict:
    base = [
        *common,
        "--steps",
        str(a.kill_steps),
        "--all-ranks",
        "--deterministic",
        "--save-every",
        str(a.save_every),
    ]
    reference = steps_of(run(a.gpus, [*base, "--ckpt-dir", os.path.join(tmp, "ref")], a.timeout))
    ckpt = os.path.join(tmp, "killed")
    proc = subprocess.Popen(
        torchrun(a.gpus, [*base, "--ckpt-dir", ckpt]),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    # A watchdog kills the job at the deadline even if it hangs without printing.
    watchdog = threading.Timer(a.timeout, kill_tree, args=(proc.pid,))
    watchdog.start()
    text = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        text += line
        done = steps_of(text)
        if all((r, a.kill_at) in done for r in range(a.gpus)):
            kill_tree(proc.pid)  # the whole job: torchrun and every rank, no cleanup
            break
    watchdog.cancel()
    text += proc.stdout.read()  # what the ranks printed before they died
    proc.wait()
    killed = steps_of(text)
    out = run(a.gpus, [*base, "--ckpt-dir", ckpt, "--resume"], a.timeout)
    resumed = steps_of(out)
    m = re.search(r"resumed at step (\d+)", out)
    bad = compare(reference, killed, resumed)
    resumed_from = int(m.group(1)) if m else None
    if resumed_from is None or resumed_from >= a.kill_steps:
        bad.insert(
            0, f"the run was not killed mid-way (resumed from step {resumed_from}): raise --kill-steps"
        )
    return {
        "ranks": a.gpus,
        "steps": a.kill_steps,
        "killed_after_step": max((s for _, s in killed), default=0),
        "resumed_from_step": resumed_from,
        "compared": len(reference),
        "mismatches": bad[:20],
        "ok": not bad and len(reference) == a.gpus * a.kill_steps,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--packed", default=None, help="feed trdata from this trdata.pack file")
    p.add_argument(
        "--gpus", type=int, default=None, help="ranks of the N-GPU runs (default: every visible GPU)"
    )
    p.add_argument("--models", default="resnet50,resnet18")
    p.add_argument("--feeds", default="synthetic,trdata,dataloader")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--batch", type=int, default=256, help="per GPU")
    p.add_argument("--decode", default="cpu", help="trdata decode=")
    p.add_argument("--pin", default=None, help="trdata pin= (numa on multi-node-NUMA machines)")
    p.add_argument("--kill", action="store_true", help="run the SIGKILL-and-resume check")
    p.add_argument("--kill-steps", type=int, default=40)
    p.add_argument("--kill-at", type=int, default=23)
    p.add_argument("--save-every", type=int, default=10)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per torchrun")
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="train_ddp.py --repeat: the folder's files K times per epoch (default: enough for one epoch to hold "
        "--warmup + --steps batches on every rank at --gpus GPUs)",
    )
    p.add_argument("--json", default=None)
    p.add_argument("--tmp", default=None, help="checkpoint folder (default: a fresh temporary one)")
    a = p.parse_args(argv)
    import tempfile

    if a.gpus is None:
        import torch

        a.gpus = max(1, torch.cuda.device_count())
    common = ["--data", a.data, "--batch-size", str(a.batch), "--bf16", "--decode", a.decode, *extra]
    if a.repeat is None:
        a.repeat = 1 if a.packed else auto_repeat(a.data, a.batch * a.gpus, a.warmup + a.steps)
    if a.repeat > 1:
        common += ["--repeat", str(a.repeat)]
    if a.packed:
        common += ["--packed", a.packed]
    if a.pin:
        common += ["--pin", a.pin]
    tmp = a.tmp or tempfile.mkdtemp(prefix="node_ddp_")
    report: dict = {"gpus": a.gpus, "rates": [], "numa": [], "kill": None}
    # The 1-GPU job runs on rank 0's share of the cores (the first 1/N, as trdata and core_share() slice them),
    # so "N vs 1" compares a GPU fed by the same cores.
    allowed = sorted(os.sched_getaffinity(0))
    share = allowed[: max(1, len(allowed) // a.gpus)]
    for model in a.models.split(","):
        for feed in a.feeds.split(","):
            for n in sorted({1, a.gpus}):
                args = [*common, "--model", model, "--feed", feed, "--rate", "--steps", str(a.steps)]
                args += ["--warmup", str(a.warmup), "--ckpt-dir", os.path.join(tmp, "rate")]
                out = run(n, args, a.timeout, cpus=share if n < a.gpus else None)
                line = next((ln for ln in out.splitlines() if ln.startswith("RATE ")), None)
                if line is None:
                    raise RuntimeError(f"no RATE line from {model}/{feed} at {n} GPUs:\n{out[-2000:]}")
                report["rates"].append(json.loads(line[5:]))
                print(line, flush=True)
    out = run(a.gpus, [*common, "--model", a.models.split(",")[0], "--feed", "trdata", "--rate", "--numa-report",
                       "--steps", str(a.warmup + 2), "--warmup", str(a.warmup), "--ckpt-dir", os.path.join(tmp, "numa")],
              a.timeout)  # fmt: skip
    numa = [ln for ln in out.splitlines() if ln.startswith("NUMA ")]
    report["numa"] = sorted(numa, key=lambda ln: int(ln.split()[2].rstrip(":")))
    if a.kill:
        report["kill"] = kill_test(a, [*common, "--model", a.models.split(",")[0], "--feed", "trdata"], tmp)
    print_table(report)
    if a.json:
        write_json(a.json, report)
    return 0 if report["kill"] is None or report["kill"]["ok"] else 1


def print_table(report: dict) -> None:
    n = report["gpus"]
    print(f"\n## DDP on {n} GPUs: per-GPU img/s (bf16, channels_last)\n")
    print(f"| model | feed | 1 GPU | {n} GPUs: per GPU (slowest) | {n} vs 1 | × synthetic at {n} |")
    print("|---|---|--:|--:|--:|--:|")
    rates = {(r["model"], r["feed"], r["world"]): r for r in report["rates"]}
    for (model, feed, world), r in rates.items():
        if world != n:
            continue
        one = rates.get((model, feed, 1))
        syn = rates.get((model, "synthetic", n))
        ratio = f"{r['per_gpu_mean'] / one['per_gpu_mean']:.3f}" if one else "-"
        vs_syn = f"{r['per_gpu_mean'] / syn['per_gpu_mean']:.3f}" if syn else "-"
        one_text = f"{one['per_gpu_mean']:,.0f}" if one else "-"
        print(
            f"| {model} | {feed} | {one_text} | {r['per_gpu_mean']:,.0f} ({r['per_gpu_min']:,.0f}) | {ratio} | {vs_syn} |"
        )
    for line in report["numa"]:
        print(line)
    k = report["kill"]
    if k:
        verdict = "identical" if k["ok"] else f"MISMATCH: {k['mismatches']}"
        print(
            f"\nSIGKILL after step {k['killed_after_step']} of {k['steps']} ({k['ranks']} ranks), resumed from step "
            f"{k['resumed_from_step']}: {k['compared']} (rank, step) losses and batch checksums {verdict}"
        )


if __name__ == "__main__":
    sys.exit(main())
