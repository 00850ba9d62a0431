#!/usr/bin/env python3
"""The rows of ``benches/gpu/detection_feed.py``'s JSON files as one table: per model, recipe and batch, each row's
img/s and its ratio to ``synthetic``, the trdata row's decode, and the loaders' own CPU per image. A pair cut short
(``"partial": true``) shows the rows it has. Used by ``device_sample_whole.sh``.

    python3 benches/tools/detection_summary.py FILE.json [FILE.json ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: detection_feed.py's rows, in its order (the ceiling first).
ROWS = ("synthetic", "synthetic_first_sight", "synthetic_copies", "trdata", "trdata_again", "dataloader",
        "dataloader_again")  # fmt: skip


def lines(row: dict[str, Any]) -> list[str]:
    head = f"{row['model']} {row['recipe']} batch {row.get('batch', 16)}" + (
        " (cut short: partial)" if row.get("partial") else ""
    )
    syn = row.get("synthetic", {}).get("img_per_s")
    out = [head]
    for name in ROWS:
        if name not in row:
            continue
        ips = row[name]["img_per_s"]
        ratio = f"{ips / syn:.3f}×" if syn else "n/a"
        extra = f"  decode={row[name]['decode']}" if "decode" in row[name] else ""
        out.append(
            f"  {name:<22} {ips:>9.1f} img/s  {ratio:>7} synthetic  {row[name]['cores_busy']:>5} cores{extra}"
        )
    if "trdata_loader_cpu_ms_per_img" in row:
        out.append(
            f"  loader CPU ms/img: trdata {row['trdata_loader_cpu_ms_per_img']}, DataLoader "
            f"{row['dataloader_loader_cpu_ms_per_img']} ({row['loader_cpu_ratio']}×)"
        )
    return out


def main() -> None:
    for arg in sys.argv[1:]:
        path = Path(arg)
        if not path.exists():
            print(f"{path}: missing (the part did not run or wrote nothing)")
            continue
        data = json.loads(path.read_text())
        print(f"{path.name} (torch {data.get('torch')}):")
        for row in data["rows"]:
            print("\n".join(lines(row)))


if __name__ == "__main__":
    main()
