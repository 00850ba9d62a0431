"""examples/train_clip.py: image–text training from WebDataset shards of jpg + txt, captions delivered in
batch.extras and tokenized per batch in batch_transform; a few real steps on the CPU must lower the loss."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tokenizers")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_clip.py"


def test_a_tiny_clip_learns_from_captioned_shards() -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "24", "--make", "256", "--batch", "32", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr
    steps = re.findall(r"^step (\d+), loss ([0-9.]+)$", run.stdout, re.M)
    assert [int(s) for s, _ in steps] == list(range(1, 25))
    first, last = re.search(r"first loss ([0-9.]+), last loss ([0-9.]+)", run.stdout).groups()  # type: ignore[union-attr]
    # 32-way matching starts at ~ln(32) = 3.47; the captions describe the pixels, so it must learn
    assert float(first) > 3.0 and float(last) < 0.7 * float(first), run.stdout
