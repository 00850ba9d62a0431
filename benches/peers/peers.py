#!/usr/bin/env python3
"""The peers trdata is compared with, and ``trdata bench`` with them (what ``make bench-peers`` runs).

Every peer (torch DataLoader + v2, torch DataLoader + PIL, a Pillow thread pool, DALI CPU: benches/common/peers.py
says what each runs) runs the standard pipeline on the same files and CPUs as trdata, each in its own fresh
process; one whose modules are missing becomes a "not installed" row (``make bench-peers`` installs them).
trdata and the decode ceiling are the package's own contenders (``trdata._bench``).

    .venv/bin/python benches/peers/peers.py                  # trdata bench + peers, same options as `trdata bench`
    .venv/bin/python benches/peers/peers.py --rounds 3 --data DIR
    .venv/bin/python benches/peers/peers.py child torch-v2 --data DIR --out FILE   # one contender (run_isolated's child)

The contenders and ``run_isolated`` live in benches/common/peers.py (throughput.py, packed.py and recipes.py use
them too); this script is ``trdata bench`` with them added, and the child process that runs one of them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from trdata import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common.peers import PEERS, child_main, run_isolated  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    """``trdata bench`` with the peers added (same options), or ``child CONTENDER ...`` for one contender."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["child"]:
        return child_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="benches/peers/peers.py",
        description="`trdata bench` plus the peers installed here: " + ", ".join(PEERS) + ".",
    )
    cli.add_bench_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cli.run_bench(args, peers=PEERS, runner=run_isolated, title="trdata bench + peers")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
