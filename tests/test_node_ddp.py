"""benches/gpu/node_ddp.py (the node run) on the CPU: real torchrun jobs of examples/train_ddp.py with 2 gloo
ranks — the per-rank rate report, the NUMA report and a SIGKILL of the whole job followed by a resume that must
give every (rank, step) loss and batch checksum of the uninterrupted run. Needs torch and torchvision."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="DDP runs need torch (pip install torch torchvision)")
pytest.importorskip("torchvision", reason="the DataLoader feed needs torchvision")

ROOT = Path(__file__).resolve().parent.parent
DRIVER = ROOT / "benches" / "gpu" / "node_ddp.py"


def driver_module():
    spec = importlib.util.spec_from_file_location("node_ddp", DRIVER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sigkill_and_resume_give_the_uninterrupted_runs_steps(generated_imagenet, tmp_path):
    out = tmp_path / "node.json"
    cmd = [sys.executable, str(DRIVER), "--data", str(generated_imagenet), "--gpus", "2", "--models", "tiny"]
    cmd += [
        "--feeds",
        "synthetic,trdata,dataloader",
        "--steps",
        "8",
        "--warmup",
        "3",
        "--batch",
        "8",
        "--kill",
        "--repeat",
        "2",
    ]
    cmd += [
        "--kill-steps",
        "300",
        "--kill-at",
        "23",
        "--save-every",
        "10",
        "--json",
        str(out),
        "--tmp",
        str(tmp_path),
    ]
    cmd += ["--", "--image-size", "32", "--workers", "1", "--dl-workers", "0"]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])
    )
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    kill = report["kill"]
    assert kill["ok"], kill
    assert kill["compared"] == 2 * 300
    # A real mid-run kill: the resume started from a checkpoint before the end, and steps after it were replayed.
    assert 0 < kill["resumed_from_step"] < 300
    assert kill["resumed_from_step"] <= kill["killed_after_step"]
    worlds = {(r["feed"], r["world"]) for r in report["rates"]}
    assert worlds == {(f, w) for f in ("synthetic", "trdata", "dataloader") for w in (1, 2)}
    for r in report["rates"]:
        assert len(r["per_rank"]) == r["world"] and min(r["per_rank"]) > 0
    assert [ln.split(":")[0] for ln in report["numa"]] == ["NUMA rank 0", "NUMA rank 1"]


def test_the_comparison_reports_every_difference():
    compare = driver_module().compare
    ref = {(r, s): (f"{s}.0", f"{r:016x}") for r in range(2) for s in range(1, 6)}
    killed = {k: v for k, v in ref.items() if k[1] <= 3}
    resumed = {k: v for k, v in ref.items() if k[1] >= 3}
    assert compare(ref, killed, resumed) == []
    wrong = dict(resumed)
    wrong[(1, 4)] = ("4.5", wrong[(1, 4)][1])
    assert compare(ref, killed, wrong) == [
        "rank 1 step 4: ('4.5', '0000000000000001') != ('4.0', '0000000000000001')"
    ]
    gone = {k: v for k, v in resumed.items() if k != (0, 5)}
    assert compare(ref, killed, gone) == ["rank 0 step 5: missing after the resume"]
    replayed_differently = dict(killed)
    replayed_differently[(0, 3)] = ("3.0", "ffffffffffffffff")
    assert "rank 0 step 3" in compare(ref, replayed_differently, resumed)[0]
    assert compare(ref, killed, {**resumed, (0, 6): ("6.0", "x")}) == [
        "rank 0 step 6: not in the uninterrupted run"
    ]


def test_step_lines_of_two_ranks_on_one_physical_line_are_both_read():
    steps_of = driver_module().steps_of
    text = "rank 0 step 2 epoch 0 loss 1.07 checksum ac325d4333d50d28rank 1 step 2 epoch 0 loss 1.09 checksum -\n"
    assert steps_of(text) == {(0, 2): ("1.07", "ac325d4333d50d28"), (1, 2): ("1.09", "-")}


def test_each_rank_keeps_its_last_two_checkpoints(tmp_path):
    spec = importlib.util.spec_from_file_location("train_ddp", ROOT / "examples" / "train_ddp.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    for step in (10, 20, 30):
        train.save(str(tmp_path), 1, {"step": step})
    train.save(str(tmp_path), 0, {"step": 20})
    assert train.saved_steps(str(tmp_path), 1) == [20, 30]
    assert train.saved_steps(str(tmp_path), 0) == [20]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rank0.step20.pt",
        "rank1.step20.pt",
        "rank1.step30.pt",
    ]
