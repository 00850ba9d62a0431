"""examples/train_detection.py: torchvision's Faster R-CNN trained from a COCO layout through trdata.CocoDetection,
boxes moved with RandomResizedCrop + flip and handed over in batch.targets; a few real steps on the CPU must lower
the loss."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_detection.py"


def test_faster_rcnn_learns_from_a_coco_layout() -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "6", "--make", "24", "--size", "128", "--masks"],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert run.returncode == 0, run.stderr
    steps = re.findall(r"^step (\d+), loss ([0-9.]+)$", run.stdout, re.M)
    assert [int(s) for s, _ in steps] == list(range(1, 7))
    first, last = re.search(r"first loss ([0-9.]+), last loss ([0-9.]+)", run.stdout).groups()  # type: ignore[union-attr]
    assert float(last) < float(first), run.stdout
