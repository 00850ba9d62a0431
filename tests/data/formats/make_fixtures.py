"""Write the small fixture files of tests/data/formats/ with the other projects' own writers.

The Rust tests (src/source/tfrecord.rs, mds.rs, litdata.rs) read these bytes and check images, labels and
extras against the values below; nothing here is hand-framed.

Run in a throwaway venv (not the project's), from the repository root:

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install tfrecord protobuf crc32c pillow numpy mosaicml-streaming litdata
    /tmp/refvenv/bin/python tests/data/formats/make_fixtures.py [tfrecord|mds|litdata|litdata/<sub> ...]

Versions that wrote the committed files: tfrecord 1.14.6 (protobuf 7.36.2), mosaicml-streaming and litdata
as printed in the VERSIONS file next to this script (it is rewritten each run).
"""

import io
import json
import os
import shutil
import sys
from importlib import metadata

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))


def images():
    """Four tiny images: two JPEGs, a PNG, a grey JPEG (their bytes are also written to images/)."""
    out = []
    for name, mode, size, color, fmt in [
        ("red.jpg", "RGB", (8, 6), (255, 0, 0), "JPEG"),
        ("green.png", "RGB", (4, 5), (0, 200, 0), "PNG"),
        ("blue.jpg", "RGB", (5, 7), (0, 0, 250), "JPEG"),
        ("grey.jpg", "L", (3, 3), 128, "JPEG"),
    ]:
        buf = io.BytesIO()
        Image.new(mode, size, color).save(buf, fmt, quality=90)
        out.append((name, buf.getvalue()))
    d = os.path.join(HERE, "images")
    os.makedirs(d, exist_ok=True)
    for name, data in out:
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    return out


def fresh(name):
    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def tfrecord():
    """Two files of tf.train.Example records (tfrecord's TFRecordWriter); the second has a .tfindex sidecar
    (tfrecord's tools/tfrecord2idx)."""
    from tfrecord import TFRecordWriter
    from tfrecord.tools.tfrecord2idx import create_index

    imgs = images()
    d = fresh("tfrecord")
    rows = [
        # file 0
        [
            {
                "image/encoded": (imgs[0][1], "byte"),
                "image/class/label": (1, "int"),
                "image/filename": (b"red.jpg", "byte"),
                "image/bbox": ([0.25, 0.5], "float"),
                "image/size": ([8, 6], "int"),
            },
            {
                "image/encoded": (imgs[1][1], "byte"),
                "image/class/label": (2, "int"),
                "image/filename": (b"green.png", "byte"),
                "image/bbox": ([0.75], "float"),
                "image/size": ([4, 5], "int"),
            },
            # no filename, no label: Null extra, label -1
            {
                "image/encoded": (imgs[2][1], "byte"),
                "image/bbox": ([], "float"),
                "image/size": ([5, 7], "int"),
            },
        ],
        # file 1
        [
            {
                "image/encoded": (imgs[3][1], "byte"),
                "image/class/label": (4, "int"),
                "image/filename": (b"grey.jpg", "byte"),
                "image/bbox": ([1.0, 2.0, 3.0], "float"),
                "image/size": ([3, 3], "int"),
            },
            {
                "image/encoded": (imgs[0][1], "byte"),
                "image/class/label": (5, "int"),
                "image/filename": (b"red.jpg", "byte"),
                "image/bbox": ([0.5], "float"),
                "image/size": ([8, 6], "int"),
            },
        ],
    ]
    for k, records in enumerate(rows):
        path = os.path.join(d, f"train-{k:05}.tfrecord")
        w = TFRecordWriter(path)
        for r in records:
            w.write(r)
        w.close()
    create_index(os.path.join(d, "train-00001.tfrecord"), os.path.join(d, "train-00001.tfrecord.tfindex"))


def mds():
    """Mosaic MDS datasets (streaming's MDSWriter): `mds/plain` uncompressed in shards of at most 1400 bytes,
    `mds/zstd` and `mds/gz` whole-shard compressed, `mds/pil` raw pixels (modes L and RGB)."""
    from streaming import MDSWriter

    images()
    d = fresh("mds")
    cols = {
        "image": "jpeg",
        "label": "int",
        "name": "str",
        "score": "float64",
        "small": "uint8",
        "meta": "json",
        "raw": "bytes",
    }
    jpegs = ["red.jpg", "blue.jpg", "grey.jpg"]
    for sub, compression, limit in [("plain", None, 1400), ("zstd", "zstd", 1 << 20), ("gz", "gz", 1 << 20)]:
        with MDSWriter(
            out=os.path.join(d, sub), columns=cols, compression=compression, size_limit=limit
        ) as w:
            for k, name in enumerate(jpegs):
                w.write(
                    {
                        "image": Image.open(os.path.join(HERE, "images", name)),
                        "label": k + 10,
                        "name": name,
                        "score": k / 4,
                        "small": 200 + k,
                        "meta": {"k": k},
                        "raw": bytes([k] * k),
                    }
                )
    with MDSWriter(out=os.path.join(d, "pil"), columns={"image": "pil", "label": "int"}) as w:
        w.write({"image": Image.frombytes("RGB", (3, 2), bytes(range(18))), "label": 0})
        w.write({"image": Image.frombytes("L", (2, 2), bytes([1, 2, 3, 4])), "label": 1})


def _litdata_item(k):
    import numpy as np

    names = ["red.jpg", "blue.jpg", "grey.jpg"]
    # A JpegImageFile opened from its file: litdata's jpeg serializer stores the file's own bytes.
    return {
        "image": Image.open(os.path.join(HERE, "images", names[k])),
        "label": k + 20,
        "name": names[k],
        "score": k / 8,
        "flag": k % 2 == 0,
        "raw": bytes([7] * k),
        "vec": np.arange(k + 1, dtype=np.int32),
    }


def litdata(subs=None):
    """LitData datasets (litdata.optimize, one worker), each in its own folder (only the named ones rewritten):
    `plain` in chunks of 2 items; `zstd` whole-chunk zstd (compression_level "chunk": `.zstd.bin` files);
    `batch` zstd as optimize writes it by default (compression_level "batch": framed zstd inside `.bin`, one
    frame of up to 256 items); `batch2` framed zstd:3 in frames of 2 items, one chunk of 3 items (two frames);
    `sample` zstd with compression_level "sample" (each item its own zstd frame)."""
    import litdata as ld

    images()
    runs = {
        "plain": dict(chunk_size=2, compression=None),
        "zstd": dict(chunk_size=2, compression="zstd", compression_level="chunk"),
        "batch": dict(chunk_size=2, compression="zstd"),
        "batch2": dict(
            chunk_size=3, compression="zstd:3", compression_level="batch", compression_batch_size=2
        ),
        "sample": dict(chunk_size=2, compression="zstd", compression_level="sample"),
    }
    for sub in subs or runs:
        d = fresh(os.path.join("litdata", sub))
        ld.optimize(
            fn=_litdata_item, inputs=[0, 1, 2], output_dir=d, num_workers=1, mode="overwrite", **runs[sub]
        )


def main():
    which = sys.argv[1:] or ["tfrecord", "mds", "litdata"]
    versions = {}
    for name in which:
        if name.startswith("litdata/"):  # litdata/<sub>: that folder only
            litdata([name.split("/", 1)[1]])
        else:
            globals()[name]()
    for pkg in ["tfrecord", "protobuf", "mosaicml-streaming", "litdata", "pillow", "numpy"]:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    with open(os.path.join(HERE, "VERSIONS"), "a") as f:
        f.write(json.dumps({"wrote": which, "versions": versions}, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
