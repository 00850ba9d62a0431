"""Write an ImageFolder's images as one Parquet file in Hugging Face's layout (an ``Image`` struct with the bytes
embedded, a ``ClassLabel`` label, row groups of --rows rows), as ``datasets`` pushes a dataset to the Hub: the
input of the Parquet rows of benches (benches/tools/device_formats.sh).

    python benches/tools/make_parquet.py ROOT OUT.parquet [--limit N] [--rows 100]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from common import folder_files  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("out")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--rows", type=int, default=100, help="rows per row group")
    a = p.parse_args()
    import datasets
    from datasets.table import embed_table_storage

    paths, labels = folder_files(a.root)[:2]
    if a.limit:
        paths, labels = paths[: a.limit], labels[: a.limit]
    names = sorted({os.path.basename(os.path.dirname(q)) for q in paths})
    features = datasets.Features(image=datasets.Image(), label=datasets.ClassLabel(names=names))
    ds = datasets.Dataset.from_dict({"image": paths, "label": labels}, features=features)
    ds = ds.with_format("arrow").map(
        embed_table_storage, batched=True
    )  # the bytes in the file, as push_to_hub
    ds.with_format(None).to_parquet(a.out, batch_size=a.rows)
    print(f"{a.out}: {len(paths)} images, {os.path.getsize(a.out) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
