"""The ``trdata`` command.

trdata info                 what this build sees: CPUs, NUMA, JPEG SIMD, CUDA, binding
trdata bench                img/s of the standard training pipeline on the built-in dataset, next to the
                            raw libjpeg-turbo decode ceiling on the same cores
trdata pack SRC DST         write SRC (an ImageFolder root, a tar shard, a packed file) into the packed file
                            DST, optionally resized and re-encoded (--short-side/--max-side, --quality)
trdata verify PATH          check every record of a packed file, or of Parquet/MDS/LitData/TFRecord files
trdata inspect PATH         a packed file's header, counts, size histogram and classes (or a record source's)
trdata ls URL               the objects under a bucket prefix (s3://bucket/prefix/), with their sizes

SRC, DST, PATH may be URLs (s3://, gs://, az://; http(s):// to read), configured by the cloud's environment
variables and ``--storage-option KEY=VALUE`` (repeatable; trdata's storage_options keys).

The same report with torch, Pillow and DALI added is ``benches/peers.py`` in the repository
(``make bench-peers``); it reuses ``add_bench_arguments`` and ``run_bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import _core
from .errors import TrdataError


def _cmd_info(_args: argparse.Namespace) -> int:
    from ._info import format_info

    print(format_info())
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def run_bench(
    args: argparse.Namespace,
    *,
    peers: Sequence[str] = (),
    runner: Callable[..., Any] | None = None,
    title: str = "trdata bench",
) -> int:
    """The ``trdata bench`` report for parsed ``add_bench_arguments`` options: trdata and the decode ceiling
    on the same cores, each in a fresh process. ``peers`` (benches/peers.py) adds contenders, run by
    ``runner`` (default ``_bench.run_isolated``), and then also the single-thread decode ceiling."""
    from . import _bench

    cpus = _bench.parse_cpus(args.cpus) if args.cpus else _bench.allowed_cpus()
    workers = args.workers or len(cpus)
    if args.data:
        root = os.path.abspath(args.data)
        if not os.path.isdir(root):
            print(f"trdata bench: --data {args.data!r} is not a folder", file=sys.stderr)
            return 2
        data_label = root
    else:
        from .sources.synthetic import default_dataset

        root = os.fspath(default_dataset(progress=not args.quiet))
        data_label = f"built-in synthetic dataset ({root})"
    paths, _labels = _bench.image_folder_files(root)
    if not paths:
        print(f"trdata bench: no images under {root}", file=sys.stderr)
        return 2

    names = ["trdata", f"decode-{workers}"]
    if peers:
        names += peers
        if workers != 1:
            names.append("decode-1")
    timing = f"{args.seconds:g} s timed" if args.seconds else f"{args.epochs} timed epoch(s)"
    load = _bench.load_average()
    header = [
        f"{title} — {len(paths):,} images: {data_label}",
        (
            f"CPUs {','.join(map(str, cpus))}, {workers} worker(s), batch {args.batch_size}, "
            f"{_bench.PIPELINE.replace('float16', args.dtype)}"
        ),
        f"{args.warmup} warm-up epoch(s) untimed, {timing}; each contender in a fresh process"
        + (f"; load average {load:.2f}" if load is not None else ""),
    ]
    if load is not None and load > 0.5 * len(cpus):
        header.append(
            f"warning: the machine is busy (load {load:.1f} on {len(cpus)} CPUs): numbers will be low "
            "and noisy"
        )
    print("\n".join(header) + "\n", flush=True)

    results = _bench.run_suite(
        names,
        root,
        cpus,
        rounds=args.rounds,
        runner=runner or _bench.run_isolated,
        batch_size=args.batch_size,
        workers=workers,
        dtype=args.dtype,
        epochs=args.epochs,
        warmup=args.warmup,
        seconds=args.seconds,
        progress=not args.quiet,
    )
    by_key = {m.key: m for m in results}
    ours, ceiling = by_key["trdata"], by_key[f"decode-{workers}"]

    out = ["", _bench.results_table(results, ours)]
    if ours.error is None and ceiling.error is None and ceiling.img_per_s > 0:
        out.append("")
        out.append(
            f"trdata ÷ decode-only ceiling on the same {workers} core(s): "
            f"{ours.img_per_s / ceiling.img_per_s:.2f}× "
            "(the ceiling decodes every full image; trdata decodes only each crop's region, DCT-scaled, "
            "and still resamples, flips, normalizes and casts)"
        )
    if ours.error is None and ours.extra.get("stats"):
        out.append("")
        out.append("loader.stats() over the timed epochs:")
        out.append(_bench.stats_breakdown(ours.extra["stats"], ours.seconds, workers))
    print("\n".join(out))

    if args.json:
        doc = {
            "command": title,
            "data": root,
            "images": len(paths),
            "cpus": cpus,
            "workers": workers,
            "batch_size": args.batch_size,
            "dtype": args.dtype,
            "pipeline": _bench.PIPELINE,
            "machine": _bench.machine_summary(),
            "results": [m.to_json() for m in results],
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return 0 if ours.error is None else 1


def _storage_options(args: argparse.Namespace) -> dict[str, str] | None:
    """``--storage-option KEY=VALUE`` (repeatable) as a dict, None when none was given."""
    pairs = getattr(args, "storage_option", None) or []
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--storage-option {pair!r} must be KEY=VALUE")
        out[key] = value
    return out or None


def _is_url(text: str) -> bool:
    """Whether ``text`` is a URL (checked by the core: an object, or a prefix when it ends in ``/``)."""
    return bool(_core.check_locations("path", [text], prefixes=text.endswith("/")))


def _open_source(src: str, options: dict[str, str] | None = None) -> Any:
    """The trdata source a ``trdata pack SRC`` names: a folder (or a URL ending in ``/``: a bucket prefix) is an
    ImageFolder root, a ``.tar`` or a brace pattern (``train-{0000..0127}.tar``) webdataset shards, any other
    file a packed file. ``options`` are for a URL (a local SRC takes none)."""
    from .sources import ImageFolder, Packed, WebDataset

    opts = options if _is_url(src) else None
    if os.path.isdir(src) or (_is_url(src) and src.endswith("/")):
        return ImageFolder(src, storage_options=opts)
    if src.endswith(".tar") or "{" in src:
        return WebDataset(src, storage_options=opts)
    return Packed(src, "partial", storage_options=opts)


def _cmd_pack(args: argparse.Namespace) -> int:
    from .sources import Reencode, pack

    reencode = None
    if args.short_side is not None or args.max_side is not None or args.quality is not None:
        reencode = Reencode(args.short_side, args.max_side, 90 if args.quality is None else args.quality)
    options = _storage_options(args)
    source = _open_source(args.src, options)
    report = pack(
        source,
        args.dst,
        reencode=reencode,
        workers=args.workers,
        progress=not args.quiet,
        storage_options=options if _is_url(args.dst) else None,
    )
    ratio = report["bytes_out"] / max(1, report["bytes_in"])
    print(
        f"{args.dst}: {report['records']:,} records, {report['bytes_in'] / 1e6:,.1f} MB in → "
        f"{report['bytes_out'] / 1e6:,.1f} MB out ({ratio:.2f}×), {report['seconds']:.1f} s, "
        f"{report['records'] / max(report['seconds'], 1e-9):,.0f} img/s"
    )
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from .sources.packed import verify
    from .sources.records import open_records

    options = _storage_options(args)
    records = open_records(args.path, options)
    if records is not None:
        bad = records.verify(workers=args.workers, progress=not args.quiet)
    else:
        bad = verify(args.path, workers=args.workers, progress=not args.quiet, storage_options=options)
    for record, reason in bad:
        print(f"{args.path}: record {record}: {reason}")
    print(f"{args.path}: {'OK' if not bad else f'{len(bad)} bad record(s)'}")
    return 0 if not bad else 1


def _histogram(values: Sequence[int], edges: Sequence[int], unit: str) -> list[str]:
    lines = []
    for lo, hi in zip([0, *edges], [*edges, None]):
        n = sum(1 for v in values if v >= lo and (hi is None or v < hi))
        if n:
            span = f"{lo:,}–{hi:,}" if hi is not None else f"≥ {lo:,}"
            lines.append(f"    {span:>20} {unit}: {n:,}")
    return lines


def _cmd_inspect(args: argparse.Namespace) -> int:
    from collections import Counter

    from .sources.packed import inspect
    from .sources.records import open_records

    records = open_records(args.path, _storage_options(args))
    if records is not None:
        described = records.describe()
        if args.json:
            print(json.dumps(described))
            return 0
        print(
            f"{args.path}: {described['format']}, {described['samples']:,} samples in {described['units']:,} "
            f"unit(s) of {len(described['files']):,} file(s)"
        )
        print(f"  extras: {', '.join(described['extras']) or 'none'}")
        names = described["classes"]
        shown = f" ({', '.join(names[:10])}{', …' if len(names) > 10 else ''})" if names else ""
        print(f"  classes: {len(names):,}{shown}")
        return 0
    info = inspect(args.path, storage_options=_storage_options(args))
    if args.json:
        print(json.dumps(info, default=lambda v: v.tolist() if hasattr(v, "tolist") else list(v)))
        return 0
    n = int(info["records"])
    lengths = [int(v) for v in info["lengths"]]
    short = [min(int(w), int(h)) for w, h in zip(info["widths"], info["heights"])]
    lines = [
        f"{args.path}: trdata packed file, version {info['version']}",
        f"  records {n:,} in {info['blocks']:,} block(s) of ≤ {info['block_bytes']:,} bytes; "
        f"file {info['file_bytes']:,} bytes, records {info['data_bytes']:,} bytes",
        f"  write options: {json.dumps(info['options'])}",
        "  formats: " + ", ".join(f"{k} {v:,}" for k, v in Counter(info["formats"]).most_common()),
        "  chroma: "
        + ", ".join(f"{k or 'n/a'} {v:,}" for k, v in Counter(info["subsampling"]).most_common()),
        f"  progressive {sum(map(bool, info['progressive'])):,}, CMYK {sum(map(bool, info['cmyk'])):,}",
        "  record size:",
        *_histogram(lengths, [10_000, 30_000, 100_000, 300_000, 1_000_000], "bytes"),
        "  short side:",
        *_histogram(short, [64, 128, 256, 320, 400, 512, 1024], "px"),
    ]
    classes = list(info["classes"])
    counts = Counter(int(v) for v in info["labels"])
    lines.append(f"  classes: {len(classes):,}")
    for label, count in sorted(counts.items())[:20]:
        name = classes[label] if 0 <= label < len(classes) else "?"
        lines.append(f"    {label:>6} {name}: {count:,}")
    if len(counts) > 20:
        lines.append(f"    … {len(counts) - 20:,} more labels")
    print("\n".join(lines))
    return 0


def _cmd_ls(args: argparse.Namespace) -> int:
    listed = _core.storage_list(args.url, _storage_options(args))
    total = 0
    for url, _relative, size, _etag in listed:
        print(f"{size:>14,}  {url}")
        total += size
    print(f"{len(listed):,} object(s), {total:,} bytes", file=sys.stderr)
    return 0


def _add_storage_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="a storage option for URLs (repeatable), e.g. aws_endpoint=http://127.0.0.1:9000",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trdata", description="trdata: the input pipeline that keeps GPUs fed."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    info = sub.add_parser("info", help="CPUs, NUMA, JPEG SIMD, CUDA and binding as this build sees them")
    info.set_defaults(func=_cmd_info)

    bench = sub.add_parser(
        "bench",
        help="img/s of the standard training pipeline vs. the raw decode ceiling",
        description="Time the standard training pipeline (RandomResizedCrop 224 + horizontal flip + ImageNet "
        "normalize → float16 NCHW) on the built-in synthetic dataset (generated once into "
        "$TRDATA_CACHE or ~/.cache/trdata) or on --data, next to a raw libjpeg-turbo full-decode "
        "loop on the same cores. The warm-up epoch is not timed.",
    )
    add_bench_arguments(bench)
    bench.set_defaults(func=run_bench)

    pk = sub.add_parser(
        "pack",
        help="write a dataset into one packed file",
        description="Write SRC (an ImageFolder root, a .tar webdataset shard or a packed file) into the packed "
        "file DST, in SRC's order, with its targets and classes. Without --short-side/--max-side/--quality "
        "the records hold SRC's bytes; with any of them every image is downscaled (antialiased) and "
        "re-encoded as baseline 4:2:0 JPEG. DST appears only when complete.",
    )
    pk.add_argument("src", metavar="SRC")
    pk.add_argument("dst", metavar="DST")
    size = pk.add_mutually_exclusive_group()
    size.add_argument("--short-side", type=_positive_int, default=None, metavar="N")
    size.add_argument("--max-side", type=_positive_int, default=None, metavar="N")
    pk.add_argument(
        "--quality", type=_positive_int, default=None, metavar="Q", help="JPEG quality (default 90)"
    )
    pk.add_argument("--workers", type=_positive_int, default=None, help="threads (default: all CPUs)")
    pk.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    _add_storage_option(pk)
    pk.set_defaults(func=_cmd_pack)

    vf = sub.add_parser("verify", help="check every record of a packed file (CRC32C and a decode)")
    vf.add_argument("path", metavar="PATH")
    vf.add_argument("--workers", type=_positive_int, default=None, help="threads (default: all CPUs)")
    vf.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    _add_storage_option(vf)
    vf.set_defaults(func=_cmd_verify)

    ins = sub.add_parser("inspect", help="a packed file's header, counts, size histogram and classes")
    ins.add_argument("path", metavar="PATH")
    ins.add_argument("--json", action="store_true", help="print the header and index as JSON")
    _add_storage_option(ins)
    ins.set_defaults(func=_cmd_inspect)

    ls = sub.add_parser("ls", help="the objects under a bucket prefix, with their sizes")
    ls.add_argument("url", metavar="URL")
    _add_storage_option(ls)
    ls.set_defaults(func=_cmd_ls)
    return parser


def add_bench_arguments(bench: argparse.ArgumentParser) -> None:
    """The options of ``trdata bench`` (``run_bench`` reads them)."""
    bench.add_argument("--data", metavar="DIR", help="ImageFolder root (default: the built-in dataset)")
    bench.add_argument("--batch-size", type=_positive_int, default=64)
    bench.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        help="worker threads (default: all CPUs this process may use)",
    )
    bench.add_argument("--epochs", type=_positive_int, default=2, help="timed epochs (default 2)")
    bench.add_argument("--warmup", type=int, default=1, help="untimed warm-up epochs (default 1)")
    bench.add_argument(
        "--seconds",
        type=_positive_float,
        default=None,
        help="time for this many seconds instead of --epochs (stops at a batch boundary)",
    )
    bench.add_argument("--dtype", default="float16", choices=_core.CHOICES["dtype"])
    bench.add_argument(
        "--cpus",
        default=None,
        metavar="LIST",
        help="run every contender on these CPUs, e.g. 0-3 (default: the current affinity)",
    )
    bench.add_argument(
        "--rounds",
        type=_positive_int,
        default=1,
        help="repeat the whole comparison, interleaved, and report each contender's best round",
    )
    bench.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    bench.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trdata`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (TrdataError, argparse.ArgumentTypeError) as e:
        print(f"trdata {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `trdata info | head`: the reader left; exit quietly like other command-line tools.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
