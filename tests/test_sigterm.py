"""SIGTERM at every stage (torchrun, SLURM and Kubernetes stop a job with it): a training script whose handler turns
it into ``SystemExit`` exits promptly from wherever its main thread is waiting in trdata — building a source,
iterating (CPU workers, Python sources, label maps read by the workers), packing, closing — with its exit code,
nothing half-published. The bound on the wait is only a hang guard (no timing threshold: CI is shared)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _fixtures import write_jpegs

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

#: Each stage: a script that prints "ready" from inside the stage (its first batch, its 20th record read) and
#: would go on for seconds; the signal comes then.
STAGES = {
    "iterate": """
        loader = trdata.Loader(trdata.FileList(paths * 40), batch_size=24, workers=1, dtype="uint8",
                               transforms=[trdata.RandomResizedCrop(384)])
        for b in loader:
            ready()
    """,
    "python-source": """
        loader = trdata.Loader(Slow(200, 0.05), batch_size=10, workers=2, transforms=[trdata.CenterCrop(16)])
        for b in loader:
            ready()
    """,
    "label-maps": """
        import PIL.Image, numpy as np
        slow = trdata.SegmentationFolder.label_map
        def label_map(self, i):
            time.sleep(0.05)
            return slow(self, i)
        trdata.SegmentationFolder.label_map = label_map  # before the source binds it (its workers read maps)
        seg = trdata.SegmentationFolder(root / "img", root / "map")
        loader = trdata.Loader(seg, batch_size=4, workers=2, transforms=[trdata.CenterCrop(16)])
        for epoch in range(100):
            loader.set_epoch(epoch)
            for b in loader:
                ready()
    """,
    "pack": """
        trdata.pack(Slow(400, 0.01, ready_at=20), root / "out.trd", progress=False)
    """,
}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_sigterm_turned_into_system_exit_ends_the_process_at_every_stage(tmp_path: Path, stage: str) -> None:
    paths = write_jpegs(tmp_path / "img", 12, size=(40, 30))
    (tmp_path / "map").mkdir()
    for k in range(12):
        Image.fromarray(np.full((30, 40), k, np.uint8), mode="L").save(tmp_path / "map" / f"{k:03d}.png")
    script = tmp_path / "job.py"
    body = textwrap.indent(textwrap.dedent(STAGES[stage]), "    ")
    script.write_text(
        textwrap.dedent(f"""
        import signal, sys, time
        from pathlib import Path
        import trdata
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))  # what training scripts do
        root, paths = Path({str(tmp_path)!r}), {paths!r}
        said = []
        def ready():  # called from inside the stage, which goes on for seconds after it
            if not said:
                said.append(print("ready", flush=True))
        class Slow:  # a map-style dataset whose reads take `delay` s; read `ready_at` says "ready"
            def __init__(self, n, delay, ready_at=None):
                self.n, self.delay, self.ready_at = n, delay, ready_at
            def __len__(self):
                return self.n
            def __getitem__(self, i):
                time.sleep(self.delay)
                if i == self.ready_at:
                    ready()  # from the reading thread, the main thread waiting in trdata
                return paths[i % len(paths)], 0
        def main():
        """)
        + body
        + "\nmain()\nprint('finished', flush=True)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"{stage}: the process did not exit within 60 s of SIGTERM") from None
    out = proc.stdout.read()
    assert rc == 7 and "finished" not in out, (rc, out)
    if stage == "pack":  # nothing published, no temporary left beside the destination
        assert not (tmp_path / "out.trd").exists()
        assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.trd") or "tmp" in p.name]
