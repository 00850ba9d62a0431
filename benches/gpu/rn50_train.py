"""End-to-end: ResNet-50 training steps fed by trdata on the GPU vs torch DataLoader + torchvision v2 vs
synthetic data already on the GPU (the ceiling), in the same process, on the same files and cores.

    python benches/gpu/rn50_train.py --data ROOT [--steps 300] [--warmup 20] [--batch 256]
        [--configs synthetic,trdata,dataloader] [--workers N] [--dl-workers 16] [--repeat K] [--loader-only]
        [--model resnet50|resnet18] [--packed FILE] [--no-fused] [--deadline S] [--json out.json]

Model: torchvision resnet50 (or --model resnet18)(weights=None), channels_last, bf16 autocast, SGD(lr 0.1, momentum 0.9), cross
entropy over 1000 classes. One model/optimizer is shared by all configs (each config gets --warmup untimed
steps first, so cudnn autotuning and allocator growth fall outside every timed window).

Configs (comma-separated --configs):
  synthetic     4 pre-made bf16 channels_last batches on the GPU, cycled: the GPU-bound ceiling (with --mix,
                torchvision's RandomChoice([MixUp(0.2), CutMix(1.0)]) runs on each, the same GPU work as the loaders')
  trdata        trdata.Loader(device='cuda:0', dtype=bfloat16, layout=NHWC, normalize=IMAGENET), all
                allowed cores as workers (or --workers); NHWC is permuted to NCHW-logical/channels_last, no copy
  packed        trdata as above over trdata.Packed(--packed FILE, "full"); `packed-partial` streams it
                (mode="partial"). Make FILE with `trdata pack` (e.g. of the repeated sample, re-encoded);
                `packed-s3` streams it (partial) as s3://bench/FILE from an S3 read server on loopback
                (tests/_servers.py: HEAD + ranged GETs with ETag/If-Match, sendfile) through object_store
  trdata-u8     the same with dtype=uint8; the cast + normalization run on the GPU in the training loop
  dataloader    torch DataLoader(--dl-workers procs, pin_memory, persistent, prefetch 2) + read_file →
                decode_jpeg (CPU) → v2 RandomResizedCrop(224, antialias) → flip → ToDtype(f32, scale) →
                Normalize; .cuda(non_blocking=True) then channels_last on the GPU
  NAME@N        any of the above with N workers (e.g. trdata@15, dataloader@12)

--loader-only runs the trdata*/dataloader feeds with no model (img/s of delivery into the GPU, same timing).

The sample is small (a few hundred files), so each loader iterates a list of the files repeated --repeat times
(one "virtual epoch" ≥ ~100 batches, shuffled), and loops over as many such epochs as the steps need. The
files sit in the page cache either way; repetition only keeps epoch boundaries as rare as on real ImageNet.

Data wait: host wall time spent obtaining the next device batch (next(iterator), plus for the DataLoader the
.cuda() issue), summed over the timed steps, over the timed wall time. No per-step synchronize: the host runs
at most a few launches ahead of the GPU, so when data is late the host blocks in next() and the GPU drains
(that blocked time is the starvation); when data is early next() returns at once. The timed window starts and
ends with torch.cuda.synchronize(). For trdata the loader's own meters are reported too (stats() deltas over
the timed window): consumer_wait_ns, h2d_ns, h2d_bytes, h2d_batches; H2D overlap = 1 - consumer_wait / total.

Reading the numbers: img/s against synthetic is the verdict; the data-wait fraction is a lower bound of what
the input pipeline costs, because loader threads/processes that saturate every core also slow the training
thread's kernel launches (time lost there shows up as a longer step, not as waiting in next()). trdata's
h2d ms/batch inside the training loop is copy issue → completion *including* the device-side wait for the
slot's previous batch to be released by the training stream, so it is far above the pure copy time (see the
loader-only number, or scaling.py's transfer table).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import allowed_cores, write_json  # noqa: E402
from common.recipe import RECIPE_SIZE  # noqa: E402
from common.train import (  # noqa: E402
    DataLoaderFeed,
    SyntheticFeed,
    TrdataFeed,
    library_versions,
    make_model,
    prepare,
    run_config,
)

ALL_CONFIGS = ("synthetic", "trdata", "dataloader")


def fmt_table(results):
    by = {r["config"]: r for r in results}
    syn = by.get("synthetic")
    dl = by.get("dataloader")
    rows = [
        (
            "config",
            "img/s",
            "step ms",
            "data wait",
            "wait ms/step",
            "vs synthetic",
            "vs dataloader",
            "consumer_wait",
            "H2D overlap",
            "h2d ms/batch",
            "MB/batch",
        )
    ]
    for r in results:
        rows.append(
            (
                r["config"],
                f"{r['img_per_s']:.0f}",
                f"{r['step_ms']:.1f}",
                f"{100 * r['data_wait_frac']:.1f}%",
                f"{r['data_wait_ms_per_step']:.2f}",
                f"{r['img_per_s'] / syn['img_per_s']:.3f}" if syn else "-",
                f"{r['img_per_s'] / dl['img_per_s']:.2f}x" if dl else "-",
                f"{100 * r['consumer_wait_frac']:.1f}%" if "consumer_wait_frac" in r else "-",
                f"{100 * r['h2d_overlap']:.1f}%" if "h2d_overlap" in r else "-",
                f"{r['h2d_ms_per_batch']:.2f}" if "h2d_ms_per_batch" in r else "-",
                f"{r['h2d_bytes_per_batch'] / 1e6:.1f}" if "h2d_bytes_per_batch" in r else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def serve_over_s3(packed):
    """The packed file served by an S3 read server on loopback (tests/_servers.py: HEAD/ranged GET with ETag,
    sendfile): its s3:// URL and the storage_options that reach it."""
    import shutil
    import tempfile

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
    from _servers import start_s3_read_server

    root = tempfile.mkdtemp(prefix="rn50-s3-")
    os.makedirs(os.path.join(root, "bench"))
    dst = os.path.join(root, "bench", os.path.basename(packed))
    try:
        os.link(packed, dst)
    except OSError:
        shutil.copyfile(packed, dst)
    server = start_s3_read_server(root)
    options = {
        "aws_endpoint": server.endpoint,
        "aws_allow_http": True,
        "aws_access_key_id": "bench",
        "aws_secret_access_key": "bench",
        "aws_region": "us-east-1",
    }
    return f"s3://bench/{os.path.basename(packed)}", options


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="ImageFolder root")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument(
        "--configs",
        default=",".join(ALL_CONFIGS),
        help="comma list of synthetic,trdata,trdata-u8,dataloader (run in that order as given)",
    )
    p.add_argument(
        "--workers", type=int, default=allowed_cores(), help="trdata workers (default: allowed cores)"
    )
    p.add_argument("--dl-workers", type=int, default=16)
    p.add_argument(
        "--repeat",
        type=int,
        default=0,
        help="repeat the file list this many times per virtual epoch (0: enough for ≥100 batches)",
    )
    p.add_argument(
        "--no-fused", action="store_true", help="foreach SGD instead of fused SGD (default: fused)"
    )
    p.add_argument(
        "--loader-only",
        action="store_true",
        help="no model: each feed delivers (and prepares) batches on the GPU as fast as it can",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=0,
        help="skip configs that would start after this many seconds since launch (0: never)",
    )
    p.add_argument("--model", default="resnet50", choices=("resnet50", "resnet18"))
    p.add_argument(
        "--recipe",
        default="rn50",
        choices=("rn50", "tv"),
        help="rn50: RRC 224 + flip; tv: torchvision's reference recipe (RRC 176 + flip + TrivialAugmentWide + "
        "RandomErasing 0.1), add --mix for its MixUp 0.2 / CutMix 1.0",
    )
    p.add_argument("--packed", default=None, help="packed file for the packed/packed-partial configs")
    p.add_argument(
        "--pack-short-side",
        type=int,
        default=0,
        help="make the packed file here: the repeated file list re-encoded at this short side, q90",
    )
    p.add_argument(
        "--mix",
        action="store_true",
        help="trdata configs: RandomChoice([MixUp(0.2), CutMix(1.0)]) batch ops on the GPU (torchvision's recipe)",
    )
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    t_start = time.time()

    files = prepare("rn50_train", a.data, a.batch, a.repeat)
    if files is None:
        return 2
    paths, labels, rpaths, rlabels, repeat = files
    header = {
        "mix": a.mix,
        "recipe": a.recipe,
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cores": allowed_cores(),
        "files": len(paths),
        "repeat": repeat,
        "virtual_epoch": len(rpaths),
        "batch": a.batch,
        "steps": a.steps,
        "warmup": a.warmup,
        "fused_sgd": not a.no_fused,
        "model": a.model,
        "packed": a.packed,
        "python": sys.version.split()[0],
        **library_versions(),
    }
    print("rn50_train", json.dumps(header), flush=True)

    if a.pack_short_side:
        import tempfile

        import trdata

        a.packed = os.path.join(tempfile.mkdtemp(prefix="rn50-packed-"), "sample.trd")
        t0 = time.time()
        rep = trdata.pack(
            trdata.FileList(rpaths, rlabels),
            a.packed,
            reencode=trdata.Reencode(short_side=a.pack_short_side, quality=90),
            progress=False,
        )
        header["pack"] = {
            "short_side": a.pack_short_side,
            "quality": 90,
            "records": rep["records"],
            "bytes_in": rep["bytes_in"],
            "bytes_out": rep["bytes_out"],
            "seconds": round(time.time() - t0, 1),
        }
        print("packed", json.dumps(header["pack"]), flush=True)
    header["mode"] = "loader-only" if a.loader_only else "train"
    if a.loader_only:
        model = opt = loss_fn = None
    else:
        model, opt = make_model(fused=not a.no_fused, arch=a.model)
        model.train()
        loss_fn = torch.nn.CrossEntropyLoss()
    results = []
    for name in [c.strip() for c in a.configs.split(",") if c.strip()]:
        if a.deadline and time.time() - t_start > a.deadline:
            print(f"[skip {name}: past --deadline {a.deadline:g}s]", flush=True)
            continue
        t0 = time.time()
        base, _, nw = name.partition("@")  # "trdata@14": 14 workers instead of the default
        try:
            if base == "synthetic" and a.loader_only:
                print("[skip synthetic: meaningless without a model]", flush=True)
                continue
            if base == "synthetic":
                feed = SyntheticFeed(a.batch, RECIPE_SIZE[a.recipe], mix=a.mix)
            elif base in ("trdata", "trdata-u8", "trdata-f16"):
                dtype = {"trdata": "bfloat16", "trdata-u8": "uint8", "trdata-f16": "float16"}[base]
                feed = TrdataFeed(
                    rpaths, rlabels, a.batch, int(nw or a.workers), dtype, mix=a.mix, recipe=a.recipe
                )
            elif base in ("packed", "packed-partial", "packed-s3"):
                import trdata

                mode = "full" if base == "packed" else "partial"
                if base == "packed-s3":
                    url, options = serve_over_s3(a.packed)
                    src = trdata.Packed(url, mode, storage_options=options)
                else:
                    src = trdata.Packed(a.packed, mode)
                feed = TrdataFeed(
                    None,
                    None,
                    a.batch,
                    int(nw or a.workers),
                    "bfloat16",
                    source=src,
                    mix=a.mix,
                    recipe=a.recipe,
                )
            elif base == "dataloader":
                feed = DataLoaderFeed(rpaths, rlabels, a.batch, int(nw or a.dl_workers))
            else:
                print(f"unknown config {name!r}", file=sys.stderr)
                return 2
            feed.name = name
            try:
                r = run_config(feed, model, opt, loss_fn, a.steps, a.warmup)
            finally:
                feed.close()
        except Exception as e:
            import traceback

            traceback.print_exc()
            print(f"[{name} failed: {type(e).__name__}: {e}]", flush=True)
            continue
        r["config_seconds_total"] = round(time.time() - t0, 1)
        results.append(r)
        print(json.dumps(r), flush=True)
        if a.json:  # written after every config, so a cut-short run still leaves its numbers
            write_json(a.json, {"header": header, "results": results})

    print()
    if a.loader_only:
        print("loader-only (no model; batches delivered to cuda:0, prepared as the training loop would):")
    print(fmt_table(results))
    by = {r["config"]: r for r in results}
    if "trdata" in by and not a.loader_only:
        t = by["trdata"]["img_per_s"]
        notes = ["targets: trdata ≥ 4,500 img/s"]
        if "synthetic" in by:
            notes.append(f"≥ 96% of synthetic (got {100 * t / by['synthetic']['img_per_s']:.1f}%)")
        if "dataloader" in by:
            notes.append(f"≥ 2x DataLoader (got {t / by['dataloader']['img_per_s']:.2f}x)")
        print("; ".join(notes) + f"; trdata = {t:,.0f} img/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
