#!/usr/bin/env python3
"""Show where each user parameter is validated, and fail unless every one has exactly one validation site.

A parameter's *validation site* is the one core module (`config`, `augment`, `decode`, `source`: a top-level
module of src/, outside the binding src/py) that holds its rules:
its range or choice table (`IntParam::new("name", ..)`, `Choice { name: "name", .. }`), or the functions that
raise `TrdataError::config(<its name>, ..)` (the name as a literal or through the constant declaring it). The
edge — python/trdata and the binding src/py — may only translate types: every ConfigError it raises must be
in one of the translation helpers listed in EDGE_TRANSLATORS (what each translates is said there), so a range
or choice check added at the edge fails this script. Runtime errors that name a parameter without validating
it (an iteration-time hint, a checkpoint mismatch) are listed in NOT_VALIDATION, each with its reason.

Usage: scripts/validation_sites.py   (stdlib only; `make lint` and tests/test_config.py run it)
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Every parameter of Loader, of the transforms and of the sources (and set_epoch's epoch).
PARAMS = {
    # Loader
    "source", "dataset", "fn", "extras", "batch_size", "transforms", "normalize", "dtype", "layout", "workers", "shuffle", "seed",
    "reproducible", "last_batch", "device", "rank", "world_size", "on_error", "pin", "prefetch",
    "max_held_batches", "device_slots", "cpus", "max_pixels", "max_scans", "max_memory_bytes", "epoch",
    "channels", "exif_transpose", "views", "batch_ops", "batch_transform", "decode",
    # batch ops (python/trdata/batch_ops.py; p/scale/ratio/value of BatchRandomErasing are RandomErasing's)
    "alpha", "num_classes",
    # transforms
    "size", "scale", "ratio", "p",
    "padding", "fill", "padding_mode", "pad_if_needed", "brightness", "contrast", "saturation", "hue",
    "num_output_channels", "kernel_size", "sigma", "mean", "clip", "value", "threshold", "bits",
    "sharpness_factor",
    "degrees", "interpolation", "expand", "center", "translate", "shear", "distortion_scale", "policy", "num_ops",
    "magnitude", "num_magnitude_bins", "severity", "mixture_width", "chain_depth", "alpha", "all_ops", "antialias",
    "max_size",
    # timm's policies and RandomErasing (transforms.py Timm*)
    "num_layers", "magnitude_std", "magnitude_max", "translate_pct", "width", "depth", "probability", "min_area",
    "max_area", "min_count", "max_count", "re_mode", "longest", "weights",
    # sources
    "root", "paths", "labels", "blobs", "images", "classes", "train", "variant", "shards",
    "split", "masks", "ids", "image_suffix", "mask_suffix",
    # DatasetSource's dict items, PythonStep's input
    "image_key", "label_key", "pil",
    # packed files (trdata.pack, trdata.Packed)
    "mode", "window_blocks", "cache_bytes", "prefetch_blocks", "block_bytes", "reencode", "short_side", "max_side",
    "quality",
    # object storage (trdata.Packed's URL and options: storage/; ImageFolder's root as a bucket prefix:
    # source/remote.rs)
    "path", "storage_options",
    # the disk cache of streamed packed files (storage/disk_cache.rs)
    "cache_dir", "cache_disk_bytes",
}  # fmt: skip
# Parameters whose only rule is their Python type (any bool, any path): no core site.
TYPE_ONLY = {
    "shuffle", "reproducible", "exif_transpose", "train", "variant", "pad_if_needed", "clip",
    "batch_transform",  # a callable or None
    "fn",  # PythonStep's: a callable
    "expand", "all_ops", "antialias",
    "reencode",  # a Reencode or dict; its fields are short_side, max_side, quality (pack/mod.rs)
    "split", "masks", "ids", "image_suffix", "mask_suffix",  # YoloDetection/SegmentationFolder: folders, names
    "image_key", "label_key",  # DatasetSource: a str naming a field of the dataset's dict items (Python's)
    "pil",  # PythonStep's: a bool
}  # fmt: skip

# Core functions that raise a ConfigError naming a parameter without validating its value.
NOT_VALIDATION = {
    ("src/loader.rs", "next_step"): "iteration-time hint (all batch buffers or device slots held)",
    (
        "src/loader.rs",
        "load_state",
    ): "checkpoint fields against the loader (state_dict), not parameter values",
    ("src/cuda/nvjpeg.rs", "open_required"): "the tools' GPU decode needs libnvjpeg (the environment, not a value)",
    ("src/gpu_decode/path.rs", "start"): "first iteration: this GPU has no JPEG engines (the device, not a value)",
    ("src/loader.rs", "check_targets"): "a detection source's targets cannot move with these transforms, views or "
    "EXIF rotation (the combination with the source, not a value)",
}

# The edge's translation helpers: the only places python/trdata and src/py may raise ConfigError.
# Parameter names that two different parameters share, each validated once in its own module: module → what.
SHARED_NAMES = {
    "extras": {
        "pack": "the extras values a source hands trdata.pack (what a packed file can store)",
        "source": "a record source's extras= (Parquet/MDS/LitData/TFRecord column names: the format's opener)",
    },
}

EDGE_TRANSLATORS = {
    "python/trdata/_args.py": {
        "_int_arg": "an int (Python or numpy, not a bool), as a Python int (its range: the core's rule)",
        "_opt_int": "num_classes is None or an int (its range: rng.rs NUM_CLASSES)",
        "_bool_arg": "a bool (Python's or numpy's)",
        "_size": "an int or a (height, width) pair of ints",
        "_real": "a real number a float can hold",
        "_pair": "a (min, max) pair of numbers",
        "_padding": "an int or a sequence of 1, 2 or 4 ints (torchvision's forms; their range: the core's)",
        "_str": "a string (padding_mode's choice: the core's)",
        "_mode": "a string or a torchvision enum (its value; the allowed values: the core's choice tables)",
        "_parse_cpus": "is an iterable of ints",
    },
    "python/trdata/sources/records.py": {
        "_expand": "paths is a path, URL or glob or a sequence of them; a local folder or glob stands for its files "
        "(one that names none is refused: there is nothing to translate); URLs go to the core as they are",
        "_Records": "extras is None or a sequence of column names (which exist: the format's opener)",
    },
    "python/trdata/loader.py": {
        "_normalize": "is (mean, std), two sequences of numbers a float can hold (how many: the core's rule)",
        "_parse_devices": "'cpu' / 'cuda' / 'cuda:N' / torch.device / a list of them → CUDA ordinals (< 2**32)",
        "_env_int": "an environment variable (LOCAL_RANK, …) is an int ≥ 0",
        "_cpu_share": "LOCAL_RANK < LOCAL_WORLD_SIZE (the environment, not a parameter)",
        "_torchvision_args": "normalize agrees with a torchvision pipeline's own Normalize (no value rule)",
        "_views": "is a list of pipelines (how many, and not with transforms: the core's rule)",
        "Loader.__init__": "source is a trdata Source (only `source` may be raised there)",
        "Loader.load_state_dict": "a state_dict's entries exist and have the core's types (only `state_dict`)",
        "Loader._init_batch_hooks": "DetectionMixUp's source has detection targets (the source's kind; no value "
        "rule)",
    },
    "python/trdata/transforms.py": {
        "specs": "a list of built-in transforms",
        "_unconverted": "a from_torchvision result holds no Normalize/ToDtype where only transforms are taken",
        "Grayscale._spec": "num_output_channels is an int (1 or 3: the core's rule)",
        "GaussianBlur._spec": "kernel_size is an int or 1–2 ints (odd, ≤ 1001: the core's rule)",
        "RandomErasing._spec": "value is a number, a sequence of numbers or the string 'random'",
        "RandomPosterize._spec": "bits is an int (0..=8: the core's rule)",
        "_inner": "a container's transforms is a list of trdata transforms (count, nesting: the core's rules)",
        "RandomChoice._spec": "p is None or a sequence of numbers (count, sign, sum: the core's rules)",
        "TimmRandAugment.from_config": "timm's config string grammar (m/n/p/mstd/mmax/inc sections; values: core)",
        "TimmRandAugment._spec": "ops is a sequence of names (which names: the core's)",
        "TimmAugMix._spec": "ops is a sequence of names (which names: the core's)",
        "TimmAutoAugment._spec": "policy is a sequence of (name, p, magnitude) sequences (values: the core's)",
        "PythonStep.__init__": "fn is callable (only `fn`)",
        "PythonStep._probe": "what a Python step did on the probe image when the Loader was built (the user's "
        "code, not a value)",
        "_pil_module": "pil=True needs Pillow (the environment, not a value)",
    },
    "python/trdata/convert.py": {
        "_refuse": "a torchvision op trdata cannot run (names the op; no value rule)",
        "from_torchvision": "an object that is neither a trdata nor a torchvision transform",
        "_convert": "torchvision options trdata has no kernel for (interpolation, size=None)",
        "_convert_batch_op": "a torchvision batch op trdata cannot run (names it; no value rule)",
        "_convert_timm": "timm classes/options trdata has no kernel for (names them; no value rule)",
        "_timm_interpolation": "timm's interpolation: one filter or its (bilinear, bicubic) pair (names: the core's)",
        "_timm_shared": "timm AugmentOp lists: op names trdata runs, one shared set of hparams (no value rule)",
        "_convert_timm_rand_augment": "timm RandAugment without choice weights, one prob/magnitude (no value rule)",
        "_image_fill": "a torchvision per-type fill dict: its Mask entry must be the fill trdata gives masks (0 for "
        "instance masks, 255 for label maps; no core parameter holds it), the image entry's rule: the core's",
    },
    "python/trdata/sources/extras.py": {
        "check_extras": "extras is a dict of str names → a sequence of one value per sample",
        "encode": "an extra value a packed file can hold (str, bytes, arrays, JSON values); its size and the "
        "names: the core's rule (source/packed_extras.rs)",
        "_utf8": "a str extra (a value, its JSON text or a field name) is strict UTF-8, readable back (no lone "
        "surrogate)",
    },
    "src/py/pack.rs": {
        "extras_of": "what the Python side's extras(i) raised (extras.py encode), carried to the pack as a "
        "ConfigError on extras",
    },
    "python/trdata/sources/base.py": {
        "ImageFolder.__init__": "root is a path (only `root`)",
        "_paths_error": "paths (a sequence of str/bytes/PathLike; see _check_paths)",
        "_labels_error": "labels/targets (int64 class indices, or numeric float targets of one per-sample shape, "
        "finite; see _check_targets)",
        "Bytes.__init__": "blobs is an ordered sequence of bytes (only `blobs`)",
        "Arrays.__init__": "images is a uint8 array (only `images`)",
        "_class_names": "classes is an ordered sequence of distinct str (class_to_idx; the labels-within-classes "
        "rule of a pack: pack/mod.rs)",
    },
    "src/py/args.rs": {
        "int_arg": "is a Python int (its range: the core rule passed in)",
    },
    "src/py/ops.rs": {
        "parse_transform": "a (kind, {name: value}) spec (trdata.Transform._spec; parsed by the core)",
        "arg": "a spec value is None, bool, int, float, str, a sequence of them or a dict with str keys "
        "(trdata.Transform._spec)",
    },
    "python/trdata/sources/targets.py": {
        "opt_str": "split, image_suffix, mask_suffix are None or a str",
        "path_arg": "root (YoloDetection), images and masks (SegmentationFolder) are paths",
        "refuse_mosaic": "a Mosaic's source holds targets it can merge (the source's kind; no value rule)",
    },
    "python/trdata/sources/yolo.py": {
        "_yolo_class_names": "classes is None, a sequence of str, or ultralytics' names mapping with the keys 0..n-1 "
        "(its form; the ids within it: a SourceError on the label file)",
    },
    "python/trdata/sources/segmentation.py": {
        "_keys": "ids is None or a sequence of str",
    },
    "python/trdata/sources/dataset.py": {
        "DatasetSource.__init__": "dataset is a map-style dataset without a transform of its own (only `dataset`)",
        "DatasetSource._item_keys": "image_key/label_key are str naming fields of the dataset's dict items, which "
        "item 0 holds (the user's items, not a value)",
    },
    "python/trdata/sources/classic.py": {
        "_root_dir": "root is a path (only `root`)",
        "read_mnist": "variant names one of the MNIST-format datasets (fixed by the dataset class, not a user value)",
        "read_cifar": "variant is 10 or 100 (fixed by the dataset class, not a user value)",
    },
    "python/trdata/sources/packed.py": {
        "_reencode_options": "reencode is None, a trdata.Reencode or a dict of its fields (their values: pack/mod.rs)",
        "pack": "source is a trdata Source (only `source`)",
        "_check_class_targets": "the source's targets are class indices (the packed format's kind; no value rule)",
    },
    "python/trdata/batch_ops.py": {
        "BatchRandomChoice._spec": "ops is a list of MixUp/CutMix/BatchRandomErasing, p a list of numbers (values: "
        "rng.rs)",
        "BatchRandomErasing._spec": "value is a number or the string 'random'",
        "_batch_op_specs": "batch_ops is a list of trdata batch ops",
    },
    "python/trdata/batch.py": {
        "_callable_or_none": "batch_transform is a callable or None",
    },
    "python/trdata/sources/shards.py": {
        "_extra_keys": "extras is a sequence of member extensions (str)",
        "_cache_dir": "cache_dir is a folder path (str, bytes or os.PathLike; not '' nor with NUL), True or "
        "False/None",
    },
    "src/py/batch.rs": {
        "parse": "a batch-op spec tuple of a known kind (trdata.batch's _spec)",
    },
    "src/py/source.rs": {
        "pixels": "images is a 3-D or 4-D numpy array, C-contiguous (its sizes: source::arrays)",
        "storage_options_arg": "storage_options is a dict of str keys → str/bool/int/float values (which keys and "
        "values: storage/)",
    },
}

# Translators inside functions that do more than translate may raise for these parameters only.
EDGE_ONLY = {
    "Loader.__init__": {"source"},
    "Loader.load_state_dict": {"state_dict"},
    "ImageFolder.__init__": {"root"},
    "pack": {"source"},
    "DatasetSource.__init__": {"dataset"},
    "PythonStep.__init__": {"fn"},
}

RUST_CORE_SKIP = ("src/py/",)


def rust_core_files() -> list[Path]:
    out = []
    for p in sorted((ROOT / "src").rglob("*.rs")):
        rel = p.relative_to(ROOT).as_posix()
        if rel.startswith(RUST_CORE_SKIP) or p.name == "tests.rs" or p.name.endswith("_tests.rs"):
            continue
        out.append(p)
    return out


def strip_rust(text: str) -> str:
    """Drop the test module at a file's end and line comments (keeping line numbers)."""
    m = re.search(r"^#\[cfg\(test\)\]\s*\nmod tests \{", text, re.M)
    if m:
        text = text[: m.start()]
    return re.sub(r"//[^\n]*", "", text)


def enclosing_rust_item(text: str, pos: int) -> str:
    """The fn (or const) the offset `pos` lies in: the nearest item start before it."""
    items = list(re.finditer(r"\bfn\s+(\w+)|\bconst\s+(\w+)\s*:", text[:pos]))
    if not items:
        return "?"
    m = items[-1]
    return m.group(1) or m.group(2)


def declarations(files: list[Path]) -> dict[str, tuple[str, bool]]:
    """Rust constant name → (parameter name, is a rule table), from the `IntParam::new` and `Choice` tables
    and the `&str` constants naming a parameter."""
    consts = {}
    for p in files:
        text = strip_rust(p.read_text())
        for m in re.finditer(r"const\s+(\w+)\s*:\s*IntParam\s*=\s*IntParam::new\(\s*\"(\w+)\"", text):
            consts[m.group(1)] = (m.group(2), True)
        for m in re.finditer(r"const\s+(\w+)\s*:\s*Choice<\w+>\s*=\s*Choice\s*\{\s*name:\s*\"(\w+)\"", text):
            consts[m.group(1)] = (m.group(2), True)
        for m in re.finditer(r"const\s+(\w+)\s*:\s*&(?:'static\s+)?str\s*=\s*\"(\w+)\"", text):
            if m.group(2) in PARAMS:
                consts[m.group(1)] = (m.group(2), False)
    return consts


def core_sites() -> dict[str, list[tuple[str, str, int]]]:
    """parameter → [(file, item, line)] of its rules in the core."""
    files = rust_core_files()
    consts = declarations(files)
    sites: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for p in files:
        rel = p.relative_to(ROOT).as_posix()
        text = strip_rust(p.read_text())

        def add(param: str, pos: int, item: str | None = None, rel: str = rel, text: str = text) -> None:
            item = item or enclosing_rust_item(text, pos)
            if (rel, item) in NOT_VALIDATION:
                return
            sites[param].append((rel, item, text.count("\n", 0, pos) + 1))

        # a rule table declared here (an IntParam range or a Choice list)
        for m in re.finditer(r"const\s+(\w+)\s*:\s*(?:IntParam|Choice<\w+>)\s*=", text):
            if m.group(1) in consts:
                add(consts[m.group(1)][0], m.start(), m.group(1))
        # an error built here: TrdataError::config(<"name" | NAME | TABLE.name | path::NAME>, ..) — generic
        # helpers (`self.name`, a `param` variable) are counted where their table or name is used, below
        for m in re.finditer(r"TrdataError::config\(\s*([^,()]+?)\s*,", text):
            arg = m.group(1)
            literal = re.fullmatch(r'"(\w+)"', arg)
            ident = re.fullmatch(r"(?:[\w]+::)*([A-Z][A-Z0-9_]*)(?:\.name)?", arg)
            param = literal.group(1) if literal else consts.get(ident.group(1), ("",))[0] if ident else ""
            if param in PARAMS:
                add(param, m.start())
        # a table's error helper used here (`SIZE.error_in(..)`), or a parameter's name handed to a rule helper
        # (`check_range(SCALE, ..)`)
        for m in re.finditer(
            r"\b([A-Z][A-Z0-9_]*)\.error(?:_in)?\(|\w\(\s*(?:\w+::)*([A-Z][A-Z0-9_]*)\s*,", text
        ):
            const = m.group(1) or m.group(2)
            if const in consts and (m.group(1) or not consts[const][1]):
                add(consts[const][0], m.start())
    return sites


class _PyCalls(ast.NodeVisitor):
    """ConfigError constructions and calls naming a parameter, with their enclosing function."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.raises: list[tuple[str, int, str | None]] = []  # (function, line, parameter) of each ConfigError
        self.named: list[tuple[str, str, int]] = []  # (parameter, function, line)

    def _func(self, node: ast.FunctionDef | ast.ClassDef) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_ClassDef = _func  # type: ignore[assignment]

    def where(self) -> str:
        # the outermost function (nested helpers belong to it), qualified by its class
        names = self.stack
        if len(names) >= 2 and names[0][:1].isupper():
            return f"{names[0]}.{names[1]}"
        return names[0] if names else "<module>"

    def visit_Call(self, node: ast.Call) -> None:
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        if name == "ConfigError":
            param = next(
                (
                    k.value.value
                    for k in node.keywords
                    if k.arg == "parameter" and isinstance(k.value, ast.Constant)
                ),
                None,
            )
            self.raises.append((self.where(), node.lineno, param))
        args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        args += [
            k.value.value
            for k in node.keywords
            if k.arg == "parameter" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)
        ]
        for a in args:
            if a in PARAMS and (name == "ConfigError" or name.startswith("_")):
                self.named.append((a, self.where(), node.lineno))
        self.generic_visit(node)


def edge_sites() -> tuple[dict[str, list[str]], list[str]]:
    """(parameter → edge translators naming it, violations: ConfigErrors outside the translators)."""
    named: dict[str, list[str]] = defaultdict(list)
    bad = []
    for p in sorted((ROOT / "python" / "trdata").rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        allowed = EDGE_TRANSLATORS.get(rel, {})
        v = _PyCalls()
        v.visit(ast.parse(p.read_text()))
        for func, line, param in v.raises:
            if func not in allowed:
                bad.append(f"{rel}:{line}: ConfigError raised in {func}, which is no translation helper")
            elif func in EDGE_ONLY and param not in EDGE_ONLY[func]:
                bad.append(f"{rel}:{line}: {func} may raise ConfigError for {sorted(EDGE_ONLY[func])} only")
        for param, func, _line in v.named:
            entry = f"{p.name}:{func}"
            if entry not in named[param]:
                named[param].append(entry)
    for p in sorted((ROOT / "src" / "py").glob("*.rs")):
        rel = p.relative_to(ROOT).as_posix()
        allowed = EDGE_TRANSLATORS.get(rel, {})
        text = strip_rust(p.read_text())
        for m in re.finditer(r"TrdataError::config\(", text):
            func = enclosing_rust_item(text, m.start())
            line = text.count("\n", 0, m.start()) + 1
            if func not in allowed:
                bad.append(f"{rel}:{line}: TrdataError::config in {func}, which is no translation helper")
    return named, bad


def main() -> int:
    core = core_sites()
    edge, bad = edge_sites()
    failures = list(bad)
    print(f"{'parameter':<17} {'validation site (core module: rules)':<70} edge (type translation only)")
    for param in sorted(PARAMS):
        sites = core.get(param, [])
        modules: dict[str, list[str]] = defaultdict(list)
        for rel, item, line in sites:
            module = Path(rel).parts[1].removesuffix(".rs")  # src/augment/geometry.rs → augment
            label = f"{Path(rel).name}:{line} {item}"
            if not any(x.endswith(f" {item}") and x.startswith(Path(rel).name) for x in modules[module]):
                modules[module].append(label)
        shown = "; ".join(f"{m}: {', '.join(items)}" for m, items in modules.items()) or "— (type only)"
        print(f"{param:<17} {shown:<70} {', '.join(edge.get(param, [])) or '—'}")
        if param in TYPE_ONLY:
            if modules:
                failures.append(f"{param}: expected no core rule (type only), found {sorted(modules)}")
        elif param in SHARED_NAMES:
            if sorted(modules) != sorted(SHARED_NAMES[param]):
                failures.append(f"{param}: expected one site in each of {sorted(SHARED_NAMES[param])}, found {sorted(modules)}")
        elif len(modules) != 1:
            failures.append(
                f"{param}: expected exactly one validation site, found {sorted(modules) or 'none'}"
            )
    print("\nnot validation (named in errors at run time):")
    for (rel, func), why in NOT_VALIDATION.items():
        print(f"  {rel}:{func}: {why}")
    if failures:
        print("\nFAILED:", *failures, sep="\n  ")
        return 1
    print(
        f"\nok: {len(PARAMS) - len(TYPE_ONLY)} parameters, one validation site each; the edge only translates"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
