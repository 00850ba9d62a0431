"""The public Loader: configuration surface over the Rust core (epoch plan, pinned worker pool, fused
decode/augment, station). Batches are zero-copy numpy views of the core's batch buffers; a buffer returns to
the core when the last view of it dies, so a batch stays valid exactly as long as Python references it."""

from __future__ import annotations

import copy
import logging
import numbers
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol, Union

if TYPE_CHECKING:
    from typing_extensions import TypeAlias  # typing.TypeAlias is 3.10+; annotations are not evaluated

import numpy as np

from . import _core, _cuda_libs, _target_batch
from . import batch as _batch
from . import batch_ops as _bops
from . import convert as _convert
from . import transforms as _transforms
from ._args import _bool_arg, _int_arg, _parse_cpus, _size, allowed_cpus
from .batch import Batch
from .errors import (
    ConfigError,
    DataLoaderArgumentError,
    DecodeError,
    LoaderClosedError,
    StaleIteratorError,
    _shown,
)
from .sources import Source
from .sources import dataset as _dataset
from .sources.extras import stack_extras
from .transforms import Transform
from .transforms import specs as _transform_specs

logger = logging.getLogger("trdata")

#: Accepted strings of each choice parameter (dtype, layout, last_batch, on_error, pin): the core's one list.
CHOICES: dict[str, tuple[str, ...]] = dict(_core.CHOICES)

#: Defaults of the parameters shown in the signatures: the core's (src/config.rs, src/augment/mod.rs), read
#: here so that each is written once.
DEFAULTS: dict[str, Any] = dict(_core.DEFAULTS)

# Python translates the user's values into the core's types and nothing more: every range, choice and default
# is the core's (src/config.rs and its siblings), which raises ConfigError naming the parameter
# (``invalid <param>: <value> must be …``). The helpers below only check Python types.


#: The int fields of a state_dict (top level and fingerprint): unsigned 64-bit numbers in the core.
_STATE_INTS = (
    "version",
    "seed",
    "epoch",
    "batches",
    "num_samples",
    "world_size",
    "rank",
    "devices",
    "batch_size",
)


def _torchvision_args(transforms: Any, normalize: Any, dtype: Any) -> tuple[Any, Any, Any]:
    """A torchvision Compose/op/list or a ``from_torchvision`` result → (trdata transforms, normalize, dtype): a
    trailing Normalize becomes ``normalize`` (an explicit, different ``normalize`` is refused), ToTensor/ToImage
    the dtype unless one was given, an explicit ToDtype/ConvertImageDtype the dtype (a different ``dtype`` given
    too is refused, as ``normalize`` is; ``dtype`` left at its default takes the pipeline's)."""
    converted = _convert.from_torchvision(transforms)
    if converted.normalize is not None:
        if normalize is not None and _normalize(normalize) != _normalize(converted.normalize):
            raise ConfigError(
                f"invalid normalize: {_shown(normalize)} must match the transforms' Normalize "
                f"{_shown(converted.normalize)} (or be None)",
                parameter="normalize",
            )
        normalize = converted.normalize
    if converted.dtype is not None and dtype == DEFAULTS["dtype"]:
        dtype = converted.dtype
    elif converted.dtype_op is not None and dtype != converted.dtype:
        raise ConfigError(
            f"invalid dtype: {_shown(dtype)} must match the transforms' {converted.dtype_op} "
            f"{converted.dtype!r} (or be left out)",
            parameter="dtype",
        )
    return converted.transforms, normalize, dtype


#: torch DataLoader arguments (and look-alikes) → (the trdata parameter to use or None, what to do instead).
_DATALOADER_ARGUMENTS: dict[str, tuple[str | None, str]] = {
    "dataset": ("source", "pass the trdata source as source= (the first argument)"),
    "num_workers": (
        "workers",
        "use workers=N (worker threads of this process; default: its share of the CPUs). There is no in-process "
        "mode like num_workers=0: workers=1 runs one worker thread, and errors name the file and the sample, so "
        "debugging works with workers=1",
    ),
    "drop_last": ("last_batch", ""),  # its value decides: see _dataloader_arguments
    "pin_memory": (
        "device",
        "pinning is automatic: a CUDA loader (device='cuda') fills pinned staging buffers and copies each batch "
        "to the GPU itself (batches arrive as CUDA tensors); a CPU loader's batches are views of trdata's own "
        "buffers",
    ),
    "pin_memory_device": ("device", "use device='cuda:N' (batches arrive on that GPU)"),
    "collate_fn": (
        "batch_transform",
        "batches are collated by the core (images, labels, indices); to change a finished batch use "
        "batch_transform=fn (called with each Batch), or batch_ops=[MixUp(...), CutMix(...)]",
    ),
    "sampler": (
        "shuffle",
        "the order is the core's epoch plan: shuffle=True/False with seed=, and rank=/world_size= for distributed "
        "training (DistributedSampler; read from torch.distributed or RANK/WORLD_SIZE by default), "
        "set_epoch(e) for the epoch",
    ),
    "batch_sampler": (
        "batch_size",
        "use batch_size=, shuffle=/seed= and last_batch= (batches are planned by the core)",
    ),
    "persistent_workers": (
        None,
        "workers are always persistent: they start on the first iteration and serve every epoch until close()",
    ),
    "worker_init_fn": (
        None,
        "workers are Rust threads that run no per-worker Python; randomness needs no per-worker seeding "
        "(every draw depends on (seed, epoch, sample) only: set seed=)",
    ),
    "prefetch_factor": ("prefetch", "use prefetch=N (batches prepared ahead, per device)"),
    "generator": ("seed", "use seed= (the one seed of every random decision)"),
    "multiprocessing_context": (
        None,
        "workers are threads of this process, not processes: there is no context",
    ),
    "timeout": (None, "there is no batch timeout; waiting for a batch is interruptible (Ctrl-C) at any time"),
    "in_order": (
        "reproducible",
        "use reproducible=True for dataset-order slots (in_order=True), False otherwise",
    ),
}


def _dataloader_arguments(kwargs: dict[str, Any]) -> None:
    """Keyword arguments Loader does not take: a torch DataLoader one → DataLoaderArgumentError saying what trdata
    does instead; any other → TypeError as Python words it (with a close match of Loader's parameters)."""
    for name, value in kwargs.items():
        if name not in _DATALOADER_ARGUMENTS:
            import difflib
            import inspect

            params = list(inspect.signature(Loader.__init__).parameters)[1:]
            close = difflib.get_close_matches(name, params, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"Loader.__init__() got an unexpected keyword argument {name!r}{hint}")
        parameter, instead = _DATALOADER_ARGUMENTS[name]
        if name == "drop_last":
            instead = (
                'use last_batch="drop"'
                if value
                else 'use last_batch="partial" (the default) — or "pad" to fill the last batch and report valid rows'
            )
        raise DataLoaderArgumentError(
            f"{name}={_shown(value)} is torch DataLoader's argument, not trdata.Loader's: {instead}",
            argument=name,
            parameter=parameter,
        )


def _views(views: Any, normalize: Any, dtype: Any) -> tuple[list[list[tuple[Any, ...]]], Any, Any]:
    """``views=[pipeline, ...]`` → (each view's transform specs, normalize, dtype): each view is a list of
    trdata transforms or a torchvision Compose/op/list (converted as ``transforms=`` is; a trailing Normalize of
    any view must agree with ``normalize`` and the other views'). How many views, and that ``transforms`` is
    not given too, are the core's rules (``SampleViews::from_lists``)."""
    if isinstance(views, (str, bytes)) or not isinstance(views, (list, tuple)):
        raise ConfigError(
            f"invalid views: {_shown(views)} must be a list of pipelines (each a list of transforms or a "
            "torchvision Compose)",
            parameter="views",
        )
    lists = []
    for k, v in enumerate(views):
        if _convert.is_torchvision(v):
            v, normalize, dtype = _torchvision_args(v, normalize, dtype)
        try:
            lists.append(_transform_specs(v))
        except ConfigError as e:
            if e.parameter != "transforms":
                raise
            # the list rule of `transforms`, for view k: say so (`views[k]`), keep its words
            why = str(e).removeprefix("invalid transforms: ")
            raise ConfigError(f"invalid views: views[{k}]: {why}", parameter="views") from None
    return lists, normalize, dtype


def _normalize(normalize: Any) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """``normalize=(mean, std)`` → two tuples of floats, as the user gave them: how many values each may hold
    (1 for every channel, e.g. ``MNIST_NORM``, or one per output channel), their units and their values are the
    core's rule (``Normalize::from_user`` in src/augment/mod.rs; the Loader's docstring says it)."""
    if normalize is None:
        return None

    def bad(why: str) -> ConfigError:
        return ConfigError(f"invalid normalize: {_shown(normalize)} {why}", parameter="normalize")

    shape = "must be (mean, std), each a sequence of numbers (3 for R, G, B or 1 for every channel)"

    def numbers_of(v: Any) -> tuple[float, ...]:
        if isinstance(v, (str, bytes)) or not isinstance(v, (Sequence, np.ndarray)) or np.ndim(v) != 1:
            raise bad(shape)
        if any(isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real) for x in v):
            raise bad(shape)
        try:
            return tuple(float(x) for x in v)
        except OverflowError:  # float(10**400)
            raise bad("must be numbers a float can hold") from None

    if (
        isinstance(normalize, (str, bytes))
        or not isinstance(normalize, (Sequence, np.ndarray))
        or len(normalize) != 2
    ):
        raise bad(shape)
    return numbers_of(normalize[0]), numbers_of(normalize[1])


# The choice parameters as static types (the runtime check is the core's table, `_core.CHOICES`; a test keeps the
# two equal).
DTypeName: TypeAlias = Literal["float32", "float16", "bfloat16", "uint8"]
LayoutName: TypeAlias = Literal["NCHW", "NHWC"]
LastBatchName: TypeAlias = Literal["partial", "drop", "pad"]
OnErrorName: TypeAlias = Literal["raise", "skip"]
PinName: TypeAlias = Literal["round-robin", "numa", "none"]


class TorchDevice(Protocol):
    """What ``device=`` accepts besides a string: a ``torch.device`` (read through ``str()``)."""

    @property
    def type(self) -> str: ...
    @property
    def index(self) -> int | None: ...


#: One device: ``"cpu"``, ``"cuda"`` (``cuda:LOCAL_RANK``), ``"cuda:N"`` or a ``torch.device``.
DeviceName: TypeAlias = Union[str, TorchDevice]  # Union, not |: evaluated at import on Python 3.9


#: CUDA ordinals are below this (the core holds them as 32-bit unsigned ints).
_ORDINAL_LIMIT = 2**32


def _parse_devices(device: Any) -> tuple[list[int] | None, bool]:
    """``device`` → (CUDA ordinals or None for the CPU, whether a list of batches is yielded per step)."""

    def one(d: Any) -> int | None:
        try:
            s = str(d)  # accepts torch.device too
        except Exception:  # noqa: BLE001 - e.g. an int beyond sys.get_int_max_str_digits()
            s = ""
        if s == "cpu":
            return None
        if s == "cuda":
            ordinal = _local_rank()  # one process per GPU under torchrun: this process's GPU
            if ordinal >= _ORDINAL_LIMIT:
                raise ConfigError(
                    f"invalid device: 'cuda' (cuda:LOCAL_RANK, LOCAL_RANK={ordinal}) must name a CUDA ordinal "
                    f"(< 2**32)",
                    parameter="device",
                )
            return ordinal
        digits = s[5:]
        if s.startswith("cuda:") and digits.isascii() and digits.isdigit():
            # the length first: int() of a string of thousands of digits raises ValueError
            if len(digits) > 10 or int(digits) >= _ORDINAL_LIMIT:
                raise ConfigError(
                    f"invalid device: {_shown(d)} must name a CUDA ordinal (< 2**32)", parameter="device"
                )
            return int(digits)
        raise ConfigError(
            f"invalid device: {_shown(d)} must be 'cpu', 'cuda', 'cuda:N' or a list of 'cuda:N'",
            parameter="device",
        )

    if isinstance(device, (list, tuple)):
        # an empty list, or one naming a device twice, is the core's to refuse (config::check_devices)
        ordinals = [one(d) for d in device]
        if any(o is None for o in ordinals):
            raise ConfigError(
                f"invalid device: {_shown(device)} must hold CUDA devices only ('cpu' is no list item)",
                parameter="device",
            )
        return [o for o in ordinals if o is not None], True
    o = one(device)
    return (None if o is None else [o]), False


def _env_int(name: str) -> int | None:
    """An integer environment variable (as torchrun sets them), None when unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(
            f"invalid environment variable {name}={raw!r}: expected an int", parameter=name
        ) from None
    if value < 0:
        raise ConfigError(f"invalid environment variable {name}={raw!r}: must be ≥ 0", parameter=name)
    return value


def _local_rank() -> int:
    """LOCAL_RANK (torchrun), else 0."""
    lr = _env_int("LOCAL_RANK")
    return 0 if lr is None else lr


def _torch_distributed() -> tuple[int, int] | None:
    """(rank, world_size) of an initialized torch.distributed, without importing torch just for this."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except (RuntimeError, ValueError):  # pragma: no cover - half-torn-down process group
        return None
    return None


def _resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Explicit argument → torch.distributed (if imported and initialized) → RANK/WORLD_SIZE → 0/1, per
    argument."""
    if rank is not None and world_size is not None:
        return rank, world_size
    dist = _torch_distributed()
    if dist is not None:
        d_rank, d_world = dist
    else:
        e_rank, e_world = _env_int("RANK"), _env_int("WORLD_SIZE")
        d_rank, d_world = (0 if e_rank is None else e_rank), (1 if e_world is None else e_world)
    return (d_rank if rank is None else rank), (d_world if world_size is None else world_size)


def _cpu_share() -> list[int]:
    """This process's share of the node's allowed CPUs: the LOCAL_RANK-th of LOCAL_WORLD_SIZE contiguous,
    near-equal slices (sizes differ by at most one), so the ranks of one node never pin to the same cores.
    With more local ranks than CPUs, each rank gets one CPU (shared round-robin)."""
    cpus = allowed_cpus()
    local_world = _env_int("LOCAL_WORLD_SIZE") or 1
    local_rank = _local_rank()
    if local_world <= 1:
        return cpus
    if local_rank >= local_world:
        raise ConfigError(
            f"invalid environment: LOCAL_RANK={local_rank} must be < LOCAL_WORLD_SIZE={local_world}",
            parameter="LOCAL_RANK",
        )
    n = len(cpus)
    if n < local_world:
        return [cpus[local_rank % n]]
    return cpus[local_rank * n // local_world : (local_rank + 1) * n // local_world]


#: The public trdata sources, as a wrong ``source`` is told (a test keeps it equal to trdata's Source classes).
_SOURCE_NAMES = (
    "trdata.ImageFolder",
    "FileList",
    "Bytes",
    "Arrays",
    "MNIST",
    "FashionMNIST",
    "KMNIST",
    "CIFAR10",
    "CIFAR100",
    "WebDataset",
    "Packed",
    "Parquet",
    "MDS",
    "LitData",
    "TFRecord",
    "CocoDetection",
    "YoloDetection",
    "SegmentationFolder",
    "DatasetSource",
)

#: torchvision.datasets classes with a trdata twin that reads the same root.
_TORCHVISION_TWINS = ("ImageFolder", "MNIST", "FashionMNIST", "KMNIST", "CIFAR10", "CIFAR100")


def _holds_step(specs: Any, depth: int = 0) -> bool:
    """Whether core specs (of transforms or views, containers included) hold a Python step."""
    if isinstance(specs, _core.Step):
        return True
    if depth > 64:
        return False
    if isinstance(specs, dict):
        specs = list(specs.values())
    return isinstance(specs, (list, tuple)) and any(_holds_step(s, depth + 1) for s in specs)


def _torch_dataset_hint(source: Any) -> str:
    """For a torchvision dataset with a trdata twin that reads the same root: the twin (the fastest way to read
    it); "" for anything else."""
    cls = type(source)
    name = cls.__name__
    if cls.__module__.startswith("torchvision.datasets") and name in _TORCHVISION_TWINS:
        root = getattr(source, "root", None)
        shown = "root" if root is None else _shown(os.fspath(root) if isinstance(root, os.PathLike) else root)
        return (
            f"; or, for torchvision.datasets.{name}, trdata.{name}({shown}) takes the same root (the loader's "
            "transforms= takes the dataset's transform pipeline)"
        )
    return ""


class Loader:
    """Batches of decoded, augmented, normalized images from ``source``.

    Workers (persistent Rust threads, pinned ``round-robin`` by default) start on the first iteration and
    are reused across epochs. Each iteration runs one epoch; ``set_epoch(e)`` chooses it, otherwise epochs
    continue e, e+1, … Randomness depends only on (seed, epoch, sample index): with ``reproducible=True``
    batches are byte-identical for any worker count; with ``reproducible=False`` each sample still appears
    exactly once per epoch but may change slot (a finished sample takes the next free row). The default,
    ``reproducible=None``, is ``not shuffle``: an unshuffled loader delivers dataset order, like torch's
    DataLoader (eval code writes predictions by position), a shuffled one takes the faster free-slot order. ``on_error='skip'`` replaces an undecodable sample by a
    deterministic other one (counted in ``stats()['errors_skipped']`` and logged once per file on the
    ``trdata`` logger); ``'raise'`` raises ``DecodeError`` naming the file at the batch holding it.

    ``device='cuda:N'`` yields batches whose ``images`` and ``labels`` are torch CUDA tensors on that GPU
    (``indices`` stays a numpy array): workers fill pinned, NUMA-local host buffers (``prefetch`` of them
    per GPU), a transfer thread copies each into one of ``device_slots`` device slots on its own stream,
    and the tensors are handed over through DLPack on the current torch stream, which waits for the copy
    on the device. A batch's slot is reused only after every tensor viewing it died *and* the stream it was
    used on passed that point (so a CUDA stream passed to ``__dlpack__`` must outlive the tensors made on it,
    as torch's streams do). ``device=['cuda:0', 'cuda:1', …]`` runs one engine per GPU with one worker
    pool and yields a list of one Batch per GPU per step (each GPU its own share of the epoch).

    Distributed (torchrun/DDP): ``rank``/``world_size`` default to torch.distributed's when it is imported
    and initialized, else to the ``RANK``/``WORLD_SIZE`` environment variables, else 0/1 (explicit
    arguments win); ``device='cuda'`` means ``cuda:LOCAL_RANK``. Every rank computes the same plan from
    (seed, epoch) — no communication — and takes its static share: with G = world_size × devices engines,
    plan position p goes to engine p mod G; every engine yields the same number of batches under every
    ``last_batch`` policy (no DDP hang), every sample appears exactly once per epoch across ranks (plus
    filling rows, always after ``valid``). Batch composition across topologies: global step b (the batches
    b of all G engines together) holds plan positions [b·B·G, (b+1)·B·G) — the same samples, with the same
    augmentations (they depend on (seed, epoch, sample) only), as batch b of a single engine with batch size
    B·G; the rows are interleaved (engine g's row i is position (b·B + i)·G + g). ``workers`` defaults to
    this process's share of the node's allowed CPUs (cores ÷ ``LOCAL_WORLD_SIZE``: the ``LOCAL_RANK``-th
    contiguous slice; one less on a GPU loader, to leave the training thread a core, and one less per GPU decode
    thread — 3 per device — when ``decode`` puts JPEGs on the GPU, never below half the share nor one per device),
    and ``round-robin`` pins within that share (``cpus=[...]`` sets it explicitly), so the ranks of one node never
    compete for cores. ``state_dict()``/``load_state_dict()`` checkpoint and
    resume mid-epoch exactly (per rank).

    ``channels``: 1 or 3 channels per image (C in the shapes above). ``None`` (default) is the source's own:
    1 for a source gray by construction (``trdata.MNIST``, ``FashionMNIST``, ``KMNIST``, an ``Arrays`` of
    (N, H, W) or (N, H, W, 1)), whose batches are then (N, 1, H, W) as torchvision's ``MNIST`` with
    ``ToTensor()`` gives them; 3 for everything else (encoded files and blobs: torchvision's ImageFolder
    converts every image to RGB). ``channels=3`` widens gray images (three equal channels); ``channels=1``
    converts RGB to luma exactly as Pillow's ``Image.convert("L")`` (ITU-R 601-2, Pillow's integer rounding)
    and passes gray images through. The conversion runs on the crop window *before* resizing, as torchvision's
    ``[Grayscale(), Resize(...), CenterCrop(...)]`` does (bit-exact with it at full-size decode);
    ``[RandomResizedCrop(...), Grayscale()]`` (resize first) differs from it by at most a few levels on a
    few pixels (the rounding of the 8-bit intermediates).

    ``normalize=(mean, std)``: out = (x / 255 - mean) / std per channel, with mean and std in [0, 1]
    units as torchvision's ``Normalize`` after ``ToTensor`` (``trdata.IMAGENET``). Each holds one value per
    output channel, or one value for every channel (``trdata.MNIST_NORM``); with 1 channel, only one (a 3-value
    preset is for RGB: ``ConfigError``). They may also be given in
    0–255 units (the DALI/FFCV habit, e.g. ``((123.675, 116.28, 103.53), (58.395, 57.12, 57.375))``): when
    any std > 1 or every mean > 1, both are read as 0–255 units and divided by 255, so the two conventions
    give identical batches. Mixed units (e.g. a 0–255 mean with a [0, 1] std, or a 0–255 std with a mean
    ≤ 1 that is not 0), a std ≤ 1e-6 (in [0, 1] units), a negative mean and non-finite values raise
    ``ConfigError``.

    ``views=[pipeline, pipeline, ...]`` (instead of ``transforms``; 1 to 16 of them, e.g. DINO's 2 global + N
    local crops): each sample is read once and decoded + augmented once per view from the same bytes (each
    view with its own crop, ROI and DCT scale), and ``batch.images`` is a tuple of one array (tensor) per view,
    (N, C, h_k, w_k) each, all views of a batch in one buffer (one H2D copy on a CUDA loader); dtype, layout,
    normalize and channels are shared, each pipeline (a list of transforms or a torchvision Compose) sets its
    own size (``Loader.view_shapes``). Views are independent draws: view 0 is exactly the sample a
    ``transforms=`` loader with the same seed gives, and view k the one it gives with seed
    ``(seed + k * 0x9E3779B97F4A7C15) % 2**64`` (the order aside, which depends on ``seed`` only), so every view
    is reproducible for any worker, GPU or rank count and across resume. Export views one by one
    (``torch.from_dlpack(batch.images[k])``; ``batch.torch()`` gives a tuple): the Batch itself is no DLPack
    producer then.

    Iteration: one Loader runs one epoch at a time and the newest ``iter(loader)`` owns it: making a new
    iterator (in any thread) supersedes the older ones, whose next ``next()`` raises ``StaleIteratorError``
    (a ``RuntimeError``) instead of yielding batches of the new epoch — batches of two epochs never
    interleave. ``for b in loader: break`` followed by a fresh ``for b in loader:`` is fine (the new loop
    starts a new epoch). ``load_state_dict()`` supersedes running iterators the same way; after ``close()``
    their next ``next()`` raises ``LoaderClosedError``. For concurrent streams, make one Loader each.

    A Loader belongs to the process that created it: in a forked child every method raises
    ``LoaderClosedError`` (``close()`` does nothing there and ``closed`` is true) — it never waits on the
    parent's threads. Create the Loader in the child.

    Decode limits (per image, per worker; a file beyond one follows ``on_error`` with
    ``DecodeError(kind="TooLarge")``, checked before any pixel memory is allocated): ``max_pixels`` (default
    100,000,000, width × height), ``max_scans`` (default 100 scans of a progressive JPEG; real files have ≤ ~11,
    a 2,000-scan file takes seconds per decode) and ``max_memory_bytes`` (default 256 MiB: libjpeg-turbo's
    whole-image coefficient buffers of progressive JPEGs, and a PNG's decoded size). ``None`` keeps the default.

    ``exif_transpose=True`` shows each image as a viewer does: its EXIF orientation (1..8) is applied before any
    crop, exactly as Pillow's ``ImageOps.exif_transpose(Image.open(f))`` — so crops (RandomResizedCrop's sampling
    included) are planned on the oriented width and height, and JPEGs still decode only the region needed (the
    region is mapped through the orientation). Read from JPEG APP1 EXIF (with Pillow's XMP fallback), PNG
    ``eXIf``, WebP ``EXIF``/``XMP`` and TIFF tags; a broken EXIF block means orientation 1, never an error. The
    default, ``False``, keeps pixels in stored order, as torchvision's ``ImageFolder`` loading does.

    ``decode`` (CUDA loaders): where JPEGs are decoded. ``'cpu'`` (default): by the workers. ``'gpu'``: every JPEG
    the GPU's hardware decoders take (baseline, one scan, 4:4:4/4:2:2/4:2:0/4:4:0/gray, no EXIF rotation) is decoded
    there with nvJPEG — only its crop window — and resized, flipped, normalized and cast by a kernel straight into
    the batch; every other file (progressive, CMYK, PNG, …) and any file the GPU refuses goes to the CPU path, never
    to an error. A number in [0, 1]: that share of the eligible samples on the GPU, chosen per sample by (seed,
    epoch, index). ``'auto'``: the share follows the load (up while the training loop waits for batches the CPU
    rows delay, down while the CPU keeps up), fixed at 0.5 in reproducible mode; the CPU path where the GPU path is
    unavailable. The GPU path takes pipelines of crops, resizes and flips (no pixel ops, one view, 3 channels);
    ``'gpu'`` or a share with anything else, without a CUDA device, nvJPEG (``nvidia-nvjpeg`` wheel, the CUDA
    toolkit or torchvision's bundled copy) or NVRTC raises ``ConfigError`` (``decode``). A GPU-decoded sample differs
    from its CPU decode by IDCT rounding only (docs/design/gpu-decode.md). ``stats()`` reports ``decode_gpu`` (samples made
    on the GPU), ``decode_gpu_fallback``, ``decode_gpu_ineligible``, ``decode_gpu_share_ppm`` and the times.

    Every argument is checked at construction; a bad value raises ``ConfigError`` (a ``ValueError``) whose
    ``parameter`` names it: ints are ints (not bools, strings or floats) within their range, ``shuffle``,
    ``reproducible`` and ``exif_transpose`` are bools, the choice strings (``dtype``, ``layout``, ``last_batch``,
    ``on_error``, ``pin``) are exactly one of ``trdata.loader.CHOICES[name]``, ``cpus`` are ids of CPUs
    this process may run on (``os.sched_getaffinity(0)``). ``dtype`` also takes a torch or numpy dtype object
    naming one of them (``torch.float16``, ``np.dtype("float32")``). torch DataLoader's arguments
    (``num_workers``, ``drop_last``, ``pin_memory``, ``collate_fn``, ``sampler``, ``persistent_workers``,
    ``worker_init_fn``, …) raise ``trdata.errors.DataLoaderArgumentError`` (a ``TypeError``) saying what to
    write instead.
    """

    def __init__(
        self,
        source: Source,
        batch_size: int = DEFAULTS["batch_size"],
        transforms: Sequence[Transform] | Any = (),
        normalize: tuple[Sequence[float], Sequence[float]] | None = None,
        dtype: DTypeName = DEFAULTS["dtype"],
        layout: LayoutName = DEFAULTS["layout"],
        workers: int | None = None,
        shuffle: bool = DEFAULTS["shuffle"],
        seed: int = DEFAULTS["seed"],
        reproducible: bool | None = None,
        last_batch: LastBatchName = DEFAULTS["last_batch"],
        device: DeviceName | list[DeviceName] | tuple[DeviceName, ...] = DEFAULTS["device"],
        rank: int | None = None,
        world_size: int | None = None,
        on_error: OnErrorName = DEFAULTS["on_error"],
        pin: PinName = DEFAULTS["pin"],
        prefetch: int = DEFAULTS["prefetch"],
        max_held_batches: int = DEFAULTS["max_held_batches"],
        device_slots: int = DEFAULTS["device_slots"],
        cpus: Iterable[int] | None = None,
        max_pixels: int | None = None,
        max_scans: int | None = None,
        max_memory_bytes: int | None = None,
        channels: int | None = None,
        exif_transpose: bool = DEFAULTS["exif_transpose"],
        batch_ops: Sequence[_bops.BatchOp] = (),
        batch_transform: Callable[[Batch, Any], Any] | None = None,
        views: Sequence[Sequence[Transform] | Any] | None = None,
        decode: str | float = DEFAULTS["decode"],
        pad_to: int | tuple[int, int] | None = None,
        **dataloader_kwargs: NoReturn,  # torch DataLoader's arguments: refused, naming trdata's equivalent
    ) -> None:
        _dataloader_arguments(dataloader_kwargs)
        if not isinstance(source, Source):
            if not _dataset.is_map_style(source):
                raise ConfigError(
                    f"invalid source: a {type(source).__name__} must be a trdata source ({', '.join(_SOURCE_NAMES)})"
                    " or a map-style dataset (__len__ and __getitem__ returning (image, target))",
                    parameter="source",
                )
            try:
                source = _dataset.DatasetSource(source)
            except ConfigError as e:
                raise ConfigError(f"{e}{_torch_dataset_hint(source)}", parameter="source") from None
        dtype = _convert.dtype_name(
            dtype
        )  # torch.float16 / np.dtype("float16") → "float16"; the core checks it
        if _convert.is_torchvision(transforms):
            transforms, normalize, dtype = _torchvision_args(transforms, normalize, dtype)
        view_specs = None
        if views is not None:
            view_specs, normalize, dtype = _views(views, normalize, dtype)
        # Translation only (types, the environment, torch.distributed); the core checks every value.
        ordinals, per_step_list = _parse_devices(device)
        rank = None if rank is None else _int_arg(rank, "rank")
        world_size = None if world_size is None else _int_arg(world_size, "world_size")
        rank, world_size = _resolve_rank(rank, world_size)
        rank, world_size = (
            _int_arg(rank, "rank"),
            _int_arg(world_size, "world_size"),
        )  # from torch or the environment
        cpu_list = _cpu_share() if cpus is None else _parse_cpus(cpus)

        def opt_int(name: str, value: Any) -> int | None:
            return None if value is None else _int_arg(value, name)

        batch_size = _int_arg(batch_size, "batch_size")
        native_source = source._native_source()
        if source._has_extras:  # read by the worker that makes each row (src/sample/extras.rs)
            native_source = native_source.with_python_extras(
                source._row_extras, after_pixels=source._extras_after_pixels
            )
        transform_specs = _transform_specs(transforms)
        self._native = _core.NativeLoader(
            native_source,
            batch_size=batch_size,
            workers=opt_int("workers", workers),  # None: the core's default for these CPUs and devices
            shuffle=_bool_arg(shuffle, "shuffle"),
            seed=_int_arg(seed, "seed"),
            reproducible=None if reproducible is None else _bool_arg(reproducible, "reproducible"),
            last_batch=last_batch,
            rank=rank,
            world_size=world_size,
            pin=pin,
            on_error=on_error,
            prefetch=_int_arg(prefetch, "prefetch"),
            max_held_batches=_int_arg(max_held_batches, "max_held_batches"),
            transforms=transform_specs,
            normalize=_normalize(normalize),
            dtype=dtype,
            layout=layout,
            channels=opt_int("channels", channels),  # None: the source's own (the core's default)
            devices=ordinals,
            device_slots=_int_arg(device_slots, "device_slots"),
            cpus=cpu_list,
            max_pixels=opt_int("max_pixels", max_pixels),
            max_scans=opt_int("max_scans", max_scans),
            max_memory_bytes=opt_int("max_memory_bytes", max_memory_bytes),
            exif_transpose=_bool_arg(exif_transpose, "exif_transpose"),
            views=view_specs,
            decode=decode,
            pad_to=None if pad_to is None else _size(pad_to, "pad_to"),
            # The wheel copies on sys.path come first in the libraries' search orders (src/cuda/nvjpeg.rs, nvrtc.rs).
            gpu_libraries=(_cuda_libs.nvjpeg.candidates(), _cuda_libs.nvrtc.candidates())
            if decode != "cpu"
            else ([], []),
        )
        if source._python_in_workers or source._has_extras or _holds_step((transform_specs, view_specs)):
            _dataset.close_at_exit(self)  # its workers attach to the interpreter: closed before it finalizes
        try:
            # each Python step once on a probe image: what it cannot take or returns unbatchable is refused now
            _transforms.probe_steps(transform_specs, self._native.channels)
            for k, view in enumerate(view_specs or ()):
                _transforms.probe_steps(view, self._native.channels, f"views[{k}]")
        except BaseException:
            self._native.close()
            raise
        self.source = source
        self._pad_to = pad_to is not None
        # Float targets (float32 (N, *S)) stay in Python: each batch's labels are gathered by its indices.
        self._targets: np.ndarray | None = source._float_targets
        self.batch_size: int = batch_size
        self.dtype: DTypeName = dtype
        self.layout: LayoutName = layout
        #: Channels of every image (the one given, or the source's own: 1 for gray sources, else 3).
        self.channels: int = self._native.channels
        #: Shape of one image of each view ((C, h, w) or (h, w, C)), with ``views=``; None without.
        self.view_shapes: list[tuple[int, int, int]] | None = (
            list(self._native.view_shapes) if self._native.multi_view else None
        )
        self.workers: int = self._native.workers
        self.rank = rank
        self.world_size = world_size
        self.cpus = cpu_list
        self.device = device
        self._ordinals = ordinals
        self._per_step_list = per_step_list
        self._pid = os.getpid()
        # Batch ops and batch_transform (python/trdata/batch_ops.py, batch.py): checked here, run on each finished batch.
        self._init_batch_hooks(batch_ops, batch_transform, native_source)

    def _check_process(self) -> None:
        """LoaderClosedError in a process other than the creating one (a fork child), before anything else:
        every method reports the fork first, whatever its arguments (a bad argument would otherwise hide it)."""
        if os.getpid() != self._pid:
            raise LoaderClosedError(
                f"this Loader was created in process {self._pid} and cannot be used in process "
                f"{os.getpid()} (a fork of it): create the Loader in the child process"
            )

    def __len__(self) -> int:
        """Batches per epoch for this rank."""
        self._check_process()
        return len(self._native)

    @property
    def epoch(self) -> int:
        """Epoch of the next iteration."""
        self._check_process()
        return self._native.epoch

    def set_epoch(self, epoch: int) -> None:
        """Run epoch ``epoch`` (0 ≤ epoch < 2**63) on the next iteration (later iterations continue from
        it)."""
        self._check_process()
        self._native.set_epoch(_int_arg(epoch, "epoch"))
        self._consumer_state = None  # the core's position is the consumer's again

    def state_dict(self) -> dict[str, Any]:
        """The loader's position at the current batch boundary, for checkpointing (e.g. with
        ``torch.save``/pickle next to the model; under torchrun save one per rank)::

            {"version": 1, "seed": int, "epoch": int, "batches": int,   # batches (steps) delivered in epoch
             "fingerprint": {"num_samples", "world_size", "rank", "devices", "batch_size", "last_batch",
                             "shuffle", "reproducible", "order", "source"},
             "delivered": [bytes, ...]}

        ``source`` identifies the source (a str: its kind and a CRC32C of a few samples' names or contents, or a
        Python dataset's class; a packed file has its source's; the core's ``Dataset::identity``), so that a
        checkpoint is refused over another dataset of the same size.

        ``delivered`` is empty in reproducible mode (the position says it all) and at an epoch start; in fast
        mode mid-epoch it holds, per device of this rank, a bitmap of the epoch's delivered sequence numbers
        (bit s = byte s//8, bit s%8): ⌈samples per rank / 8⌉ bytes. After the last batch of epoch e the state
        is (e+1, 0). Taken between batches (the batch just received counts as delivered). With
        ``batch_transform``, the position is the consumer's: batches the prefetch thread holds but has not
        handed out yet do not count."""
        self._check_process()
        if self._consumer_state is not None:
            return copy.deepcopy(self._consumer_state)
        return dict(self._native.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (a ``state_dict()``, possibly from another process): the next iteration
        finishes that epoch — byte-identical to the uninterrupted run with ``reproducible=True``, every
        remaining sample exactly once otherwise — and later iterations continue with the next epochs.
        ``set_epoch`` to another epoch discards it. Raises ConfigError naming the field if the loader's
        configuration (dataset size, world size, rank, devices, batch size, last_batch, shuffle,
        reproducible, seed, a partial packed file's blocks and window, and the source: ``source``) differs from
        the one that saved it (a checkpoint of a trdata that did not record the source loads without that check),
        ConfigError naming ``batches`` beyond the epoch's batches (``batches`` equal to them is the epoch's end:
        the next epoch starts), and ConfigError naming ``state_dict`` if an entry is missing or malformed (an int
        field that is a bool, negative or beyond 64 bits included).

        Like a new ``iter()``, a loaded state supersedes the running iterators: their next ``next()`` raises
        ``StaleIteratorError`` (their epoch was cancelled; they never end quietly as if it were complete).
        Iterate ``iter(loader)`` again after loading. A closed loader raises ``LoaderClosedError``."""
        self._check_process()
        if self._native.closed:  # before the state is looked at, as the core would refuse a valid one too
            raise LoaderClosedError("the loader is closed")
        try:
            fp = state["fingerprint"]
            kwargs = {k: state[k] for k in ("version", "seed", "epoch", "batches")}
            kwargs.update(
                {
                    k: fp[k]
                    for k in (
                        "num_samples",
                        "world_size",
                        "rank",
                        "devices",
                        "batch_size",
                        "last_batch",
                        "shuffle",
                        "reproducible",
                    )
                }
            )
            # The core's u64 fields (their range, e.g. batches ≤ the epoch's batches: src/loader.rs load_state).
            # A bool is an int to the binding (batches=True resumed at batch 1), and a negative int or one beyond
            # 64 bits was its bare OverflowError, naming no field.
            for k in _STATE_INTS:
                v = kwargs[k]
                if (
                    isinstance(v, (bool, np.bool_))
                    or not isinstance(v, numbers.Integral)
                    or not 0 <= int(v) < 2**64
                ):
                    raise ConfigError(
                        f"invalid state_dict: {k}={_shown(v)} must be an int (not a bool) with 0 ≤ {k} < 2**64",
                        parameter="state_dict",
                    )
                kwargs[k] = int(v)
            if "order" in fp:  # absent from checkpoints of trdata before packed files: the sample order
                kwargs["order"] = fp["order"]
            if fp.get("source") is not None:  # absent from older checkpoints: they load without this check
                if not isinstance(fp["source"], str):
                    raise TypeError(f"'source' must be a str, not {type(fp['source']).__name__}")
                kwargs["source"] = fp["source"]
            delivered = state["delivered"] if "delivered" in state else []
            if isinstance(delivered, (str, bytes)) or not all(
                isinstance(b, (bytes, bytearray, memoryview)) for b in delivered
            ):  # bytes(n) of an int n would allocate n bytes (or raise ValueError for n < 0)
                raise TypeError("'delivered' must be a list of bytes")
            kwargs["delivered"] = [bytes(b) for b in delivered]
        except (KeyError, TypeError, IndexError) as e:
            raise ConfigError(
                f"invalid state_dict: missing or malformed entry {e}", parameter="state_dict"
            ) from None
        try:
            self._native.load_state_dict(**kwargs)
        except (TypeError, OverflowError) as e:  # a field of the wrong type or beyond 64 bits
            raise ConfigError(f"invalid state_dict: malformed entry ({e})", parameter="state_dict") from None
        self._consumer_state = None
        if self._prefetcher is not None:  # batches it prepared belong to the superseded position
            self._prefetcher.stop(StaleIteratorError("load_state_dict() superseded this iterator"))
            self._prefetcher = None

    def _log_skipped(self) -> None:
        for path, reason in self._native.drain_skipped():
            # The logger's name says "trdata" already. A path that is not UTF-8 (os.fsdecode keeps its bytes as
            # surrogates) is shown with backslash escapes, so every handler can encode the record.
            shown = os.fsencode(path).decode("utf-8", "backslashreplace")
            logger.warning("skipping undecodable sample %s (%s)", shown, reason)

    def __iter__(self) -> Iterator[Batch]:
        """A new iterator: it supersedes every older one (their next ``next()`` raises
        ``StaleIteratorError``); its epoch starts at its first ``next()``. A ``DecodeError`` raised by ``next()``
        (``on_error='raise'``) loses the batch that held the sample, as torch's DataLoader does; the iterator stays
        usable and its next ``next()`` delivers the following batch."""
        self._check_process()
        token = self._native.new_iteration()
        if self._batch_transform is None:
            return self._iterate(token)
        if self._prefetcher is not None:  # the superseded iterator's thread: stop it, releasing its batches
            self._prefetcher.stop(StaleIteratorError("a newer iter(loader) superseded this iterator"))
        # The prefetch thread runs ahead of the consumer, so the core's position counts batches not handed out
        # yet: each batch travels with the core's state right after it, and state_dict() reports the state of
        # the last batch the consumer received (before the first one: the state the iteration starts from).
        native = self._native
        self._consumer_state = dict(native.state_dict())
        iterate = self._iterate(token)

        def tagged() -> Iterator[tuple[Any, dict[str, Any]]]:
            while True:
                try:
                    item = next(iterate)
                except StopIteration:
                    return
                except DecodeError as e:  # a lost step: delivered in its place, and the epoch goes on
                    item = _LostStep(e)
                yield item, dict(native.state_dict())

        def work(pair: tuple[Any, dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
            if isinstance(pair[0], _LostStep):
                return pair
            return self._run_batch_transform(pair[0]), pair[1]

        what = f"batch_transform {_batch._callable_name(self._batch_transform)}"
        self._prefetcher = _batch.BatchPrefetcher(tagged(), work, depth=1, what=what)
        return _Delivered(self, self._prefetcher)

    # --- batch ops and batch_transform (python/trdata/batch_ops.py, batch.py) ---------------------------------------------

    _prefetcher: _batch.BatchPrefetcher | None
    _consumer_state: dict[str, Any] | None
    _batch_ops: _bops.BatchOpPlan | None
    _batch_transform: Callable[..., Any] | None

    def _init_batch_hooks(self, batch_ops: Any, batch_transform: Any, native_source: Any) -> None:
        specs = _bops._batch_op_specs(_convert.batch_ops(batch_ops))
        self._batch_transform = _batch._callable_or_none(batch_transform)
        self._prefetcher = None
        self._consumer_state = None  # with batch_transform: see __iter__
        engines = max(len(self._ordinals or ()), 1)
        self._engines_global = self.world_size * engines  # G: batch b of engine g is global batch b·G + g
        self._engine_base = self.rank * engines
        self._seed = self._native.state_dict()["seed"]
        classes = (
            None if self._targets is not None else len(getattr(self.source, "classes", None) or ()) or None
        )
        self._batch_ops = (
            _bops.BatchOpPlan(
                specs,
                seed=self._seed,
                layout=self.layout,
                float_images=self.dtype != "uint8",
                classes=classes,
                target_shape=None if self._targets is None else tuple(self._targets.shape[1:]),
                views=len(self.view_shapes or ()),
                # the labels the core delivers (not source.labels, which its owner may have changed since)
                source=None if self._targets is not None else native_source,
            )
            if specs
            else None
        )
        # after the core's checks of the values
        if not self.source._has_targets and any(s[0] == "detection_mixup" for s in specs):
            raise ConfigError(
                "invalid batch_ops: DetectionMixUp must have a source with detection targets to concatenate; this one "
                "has none (use MixUp)",
                parameter="batch_ops",
            )

    def _global_batch(self, batch: Batch, engine: int) -> int:
        lease: Any = batch._lease
        return int(lease.batch) * self._engines_global + self._engine_base + engine

    def _apply_batch_ops(self, batches: list[Batch]) -> None:
        plan = self._batch_ops
        assert plan is not None
        for d, b in enumerate(batches):
            b.images, b.labels, b.targets = plan.apply(
                b.images, b.labels, b.epoch, self._global_batch(b, d), b.targets
            )

    def _run_batch_transform(self, item: Any) -> Any:
        """Run ``batch_transform(batch, generator)`` on each Batch of a step (in the prefetch thread). CUDA
        batches: on a side stream that first waits for the current stream (the batch's copy), and the consumer's
        stream waits for the side stream before the batch is handed over (``_CudaHandoff``)."""
        fn = self._batch_transform
        assert fn is not None
        batches = item if self._per_step_list else [item]
        out = []
        for d, b in enumerate(batches):
            first = b.images[0] if isinstance(b.images, tuple) else b.images  # views: all on one device
            gen = _batch.batch_generator(self._seed, b.epoch, self._global_batch(b, d), first)
            if isinstance(first, np.ndarray):
                r = fn(b, gen)
            else:
                r = _batch.run_on_side_stream(fn, b, gen)
            out.append(b if r is None else r)
        return out if self._per_step_list else out[0]

    def _iterate(self, token: int) -> Iterator[Any]:
        return _Steps(self, token)

    def _step(self, token: int) -> Any:
        """The next step of iteration ``token`` (one batch per engine: the CPU engine, or each GPU), or None at
        the epoch's end."""
        try:
            step = self._native.next_step(token)
        finally:
            self._log_skipped()
        if step is None:
            return None
        batches = [self._batch(*item) for item in step]
        if self._pad_to:
            # images of their own sizes in padded slots: image_list(), or padded_images() asked for by name
            for b in batches:
                b.padded = b.targets is not None
        if self._batch_ops is not None:
            self._apply_batch_ops(batches)
        return batches if self._per_step_list else batches[0]

    def _batch(
        self,
        images_h: Any,
        labels_h: Any,
        labels: list[int],
        indices: list[int],
        valid: int,
        epoch: int,
        target_columns: dict[str, Any] | None,
        row_extras: list[dict[str, Any] | None] | None,
    ) -> Batch:
        indices_a = np.asarray(indices, dtype=np.int64)
        # Float targets: the rows' own (padded and filled rows repeat a real sample's index, and so its target).
        gathered = None if self._targets is None else self._targets[indices_a]
        # Extra fields (captions, JSON, arrays): read by the workers with each row (Source._row_extras); stay
        # on the host, stacked per field.
        extras = {} if row_extras is None else _stacked_extras(row_extras)
        # Detection/segmentation targets: made by the workers with each row's image; only sliced here.
        targets = None
        if target_columns is not None:
            device = None if labels_h is None else _device_of(images_h)
            targets = _target_batch.per_image(target_columns, device, as_torch=_torch_installed())
        # With views=, images_h is a list of handles (one per view, one shared lease); else one handle.
        multi = isinstance(images_h, list)
        handles = images_h if multi else [images_h]
        if labels_h is not None:
            import torch

            # torch.from_dlpack passes torch.cuda.current_stream(device) as `stream`, so that stream waits (on
            # the device) for the H2D copy, and its release event guards the slot's reuse.
            views_t = tuple(torch.from_dlpack(h) for h in handles)
            # Float targets go to the device on the current stream, like the images.
            device = views_t[0].device
            labels_t = (
                torch.from_dlpack(labels_h) if gathered is None else torch.from_numpy(gathered).to(device)
            )
            if multi:  # one shared lease: the first view's handle knows the batch
                return Batch(views_t, labels_t, indices_a, valid, epoch, lease=handles[0], extras=extras)
            out = Batch(
                views_t[0], labels_t, indices_a, valid, epoch, lease=images_h, extras=extras, targets=targets
            )
        else:
            views_a = tuple(self._host_images(h) for h in handles)
            labels_a = np.asarray(labels, dtype=np.int64) if gathered is None else gathered
            out = Batch(
                views_a if multi else views_a[0],
                labels_a,
                indices_a,
                valid,
                epoch,
                extras=extras,
                targets=targets,
            )
        out._target_columns = target_columns  # padded_targets() scatters them at once
        return out

    def _host_images(self, handle: Any) -> np.ndarray:
        """One host handle's images as a zero-copy numpy array (its base is the lease)."""
        images = np.asarray(handle)
        if self.dtype == "bfloat16":
            try:
                import ml_dtypes

                images = images.view(ml_dtypes.bfloat16)
            except ImportError:
                pass  # raw bits as uint16; Batch.torch() reinterprets as torch.bfloat16
        return images

    def device_mem_info(self) -> list[tuple[int, int]]:
        """(free, total) bytes of each GPU this loader feeds (``cuMemGetInfo``; empty before iterating)."""
        self._check_process()
        return list(self._native.device_mem_info())

    def stats(self) -> dict[str, int]:
        """Counters and per-stage times in ns: samples, batches, bytes_read, read_ns, decode_ns, augment_ns,
        worker_wait_ns (workers blocked on a full station), consumer_wait_ns (the starvation meter),
        errors_skipped (samples replaced under on_error='skip', once per epoch each), decode_warnings (samples
        decoded although their JPEG data was damaged: filled in, as Pillow does), buffers_allocated, epochs. CUDA loaders add h2d_ns (copy issue → completion,
        including the copy stream's device-side wait for the slot's previous consumer to release it, so in a
        training loop it mostly measures that wait), h2d_copy_ns (the H2D copies alone, timed on the device
        with CUDA events; ≤ h2d_ns), h2d_bytes, h2d_batches, h2d_wait_host_ns (transfer threads waiting for
        workers), h2d_wait_slot_ns (waiting for a free device slot), device_slots_allocated,
        unpinned_host_buffers, device_wait_ns, and their consumer_wait_ns is the time the training loop
        waited for a device batch. Copy bandwidth is h2d_bytes / h2d_copy_ns. With ``decode`` other than 'cpu'
        (GPU decode): decode_gpu (samples made on the GPU; ``samples`` counts them too), decode_gpu_fallback (routed
        to the GPU, made by the CPU path after nvJPEG refused them), decode_gpu_ineligible (files the GPU path cannot
        take), decode_gpu_ns (decode threads busy), decode_gpu_wait_ns (transfer threads waiting for a batch's GPU
        rows), decode_gpu_finish_ns (resample launches and fallbacks), decode_gpu_share_ppm (the GPU share now, in
        millionths), decode_gpu_arena_bytes and decode_gpu_nvjpeg_bytes (device memory of the decode arenas and of
        nvJPEG's decoders), decode_gpu_decoders and decode_gpu_decoders_reused (nvJPEG hardware decoders this loader
        runs, and how many of them an earlier loader in the process made: closed loaders keep theirs for the next
        one, docs/design/gpu-decode-log.md §20)."""
        self._check_process()
        return dict(self._native.stats())

    def close(self) -> None:
        """Stop the workers and join them; idempotent. Batches still referenced stay valid. A running
        iterator's next ``next()`` then raises ``LoaderClosedError``, as does any later use of the loader. In
        a process other than the creating one (a fork child) it does nothing. With GPU decode, the loader's
        nvJPEG hardware decoders are kept for the next loader on that GPU (their device and page-locked buffers
        stay allocated until the process ends, as torchvision's decoder does; docs/design/gpu-decode-log.md §20). A
        ``batch_transform`` call still running is waited for at most ``trdata.batch.STOP_WAIT_S`` seconds; after
        that its thread (a daemon thread, which never holds the process's exit) is abandoned with a
        RuntimeWarning. Likewise a worker still in a dataset's ``__getitem__`` or a ``PythonStep`` 5 s after the
        stop (a call that never returns) is left running, detached, with a RuntimeWarning (the core's
        ``worker::STOP_WAIT``)."""
        self._native.close()  # first: wakes a prefetch thread waiting in the core
        prefetcher = getattr(self, "_prefetcher", None)
        if prefetcher is not None and os.getpid() == self._pid:
            prefetcher.stop(LoaderClosedError("the loader is closed"))

    @property
    def closed(self) -> bool:
        """True once closed, and always in a process other than the creating one (a fork child)."""
        return self._native.closed

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Loader({self.source!r}, batch_size={self.batch_size}, workers={self.workers}, "
            f"dtype={self.dtype!r}, layout={self.layout!r})"
        )


class _Steps(Iterator[Any]):
    """One iteration of a Loader: its epoch starts at the first ``next()``. A sample error raised by ``next()``
    (``DecodeError`` under ``on_error='raise'``) costs the step that held the sample, as torch's DataLoader loses
    the batch whose ``__getitem__`` raised; the iterator stays usable and the next ``next()`` goes on with the
    following step. Any other error ends it."""

    def __init__(self, loader: Loader, token: int) -> None:
        self._loader = loader
        self._token = token
        self._started = False
        self._done = False

    def __iter__(self) -> _Steps:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        loader = self._loader
        try:
            if not self._started:
                self._started = True
                # what an earlier, cancelled epoch's reads left for delivery is dropped (before this epoch's
                # reads begin)
                loader.source._epoch_started()
                loader._native.start_epoch(self._token)
            step = loader._step(self._token)
        except DecodeError:
            raise
        except BaseException:
            self._done = True
            raise
        if step is None:
            self._done = True
            raise StopIteration
        return step


class _LostStep:
    """A step the prefetch thread could not make: the sample error its next() raised, handed to the consumer in
    the step's place."""

    def __init__(self, error: DecodeError) -> None:
        self.error = error


class _Delivered(Iterator[Any]):
    """A Loader's iteration with ``batch_transform``: the prefetch thread's results in order, each setting the
    consumer's position (``state_dict``); a lost step raises its sample error and the iterator goes on (as
    :class:`_Steps`)."""

    def __init__(self, loader: Loader, prefetcher: _batch.BatchPrefetcher) -> None:
        self._loader = loader
        self._prefetcher = prefetcher

    def __iter__(self) -> _Delivered:
        return self

    def __next__(self) -> Any:
        out, state = next(self._prefetcher)
        self._loader._consumer_state = state
        if isinstance(out, _LostStep):
            raise out.error
        # the side-stream handoff is keyed by the batch (or step list) the thread prepared, not the pair
        return _batch.wait_handoff(out)


def _torch_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _device_of(images_h: Any) -> Any:
    """The torch device of a device batch's image handle(s) (``__dlpack_device__``: (kind, ordinal))."""
    first = images_h[0] if isinstance(images_h, list) else images_h
    return f"cuda:{first.__dlpack_device__()[1]}"


def _stacked_extras(rows: list[dict[str, Any] | None]) -> dict[str, Any]:
    """``batch.extras`` from each row's extras as its worker read them: per field (in the order first seen) a
    list, or one stacked array when every value is an array of one shape and dtype; a row without the field:
    None."""
    names = list(dict.fromkeys(n for r in rows if r is not None for n in r))
    return {n: stack_extras([None if r is None else r.get(n) for r in rows]) for n in names}
