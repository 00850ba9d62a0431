"""Type stubs of the private native module (checked against it by `make lint`: mypy.stubtest; the member names also by tests/test_api.py)."""

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "__version__",
    "NativeLoader",
    "NativeSource",
    "Step",
    "BatchLeaseHandle",
    "DeviceTensorHandle",
    "sample_op",
    "batch_op_check",
    "batch_ops_check_len",
    "batch_op_draw",
    "batch_seed",
    "scan_image_folder",
    "check_file_list",
    "CHOICES",
    "DEFAULTS",
    "MAX_SAMPLE_BYTES",
    "MAX_EXTRA_BYTES",
    "machine_info",
    "gpu_decode_arena_bytes",
    "gpu_eligible",
    "nvjpeg_decode",
    "nvjpeg_decode_batches",
    "nvjpeg_probe",
    "nvrtc_probe",
    "gpu_resample_check",
    "generate_synthetic_dataset",
    "decode_ceiling",
    "SYNTHETIC_VERSION",
    "pack",
    "polygon_rles",
    "open_regular",
    "packed_info",
    "storage_list",
    "storage_check_target",
    "storage_upload",
    "scan_object_folder",
    "expand_shards",
    "check_locations",
    "check_local_only",
    "RemoteFile",
    "packed_verify",
    "source_verify",
    "CocoAnnotations",
    "TargetPlan",
]

__version__: str

def scan_image_folder(root: str | os.PathLike[str]) -> tuple[list[str], list[int], list[str]]: ...
def check_file_list(paths: Sequence[str | os.PathLike[str]], num_labels: int) -> None: ...
def sample_op(
    spec: tuple[Any, ...],
    *,
    seed: int,
    epoch: int,
    index: int,
    position: int,
    height: int,
    width: int,
    channels: int,
) -> list[float]: ...
def batch_op_check(
    spec: tuple[Any, ...],
    position: int,
    *,
    float_images: bool,
    classes: int | None,
    target_shape: Sequence[int] | None,
    source: NativeSource | None = None,
) -> int | None: ...
def batch_ops_check_len(len: int, views: int = 1) -> None: ...
def batch_op_draw(
    spec: tuple[Any, ...],
    *,
    seed: int,
    epoch: int,
    batch: int,
    position: int,
    rows: int,
    height: int,
    width: int,
) -> list[float]: ...
def batch_seed(*, seed: int, epoch: int, batch: int) -> int: ...

CHOICES: dict[str, tuple[str, ...]]
DEFAULTS: dict[str, Any]
MAX_SAMPLE_BYTES: int
MAX_EXTRA_BYTES: int

def machine_info() -> dict[str, Any]: ...
def nvjpeg_probe(extra: list[str]) -> dict[str, Any]: ...
def gpu_decode_arena_bytes(batch_size: int) -> int: ...
def gpu_eligible(data: bytes) -> tuple[int, int, str] | str: ...
def nvjpeg_decode_batches(
    files: list[bytes],
    device: int,
    hardware: bool,
    batch: int,
    rounds: int,
    roi_fraction: float | None,
    extra: list[str],
    interpolate: bool = ...,
) -> tuple[float, int, dict[str, int], tuple[float, float, float]]: ...
def nvjpeg_decode(
    data: bytes, device: int, hardware: bool, extra: list[str]
) -> tuple[npt.NDArray[np.uint8], int, int, str]: ...
def nvrtc_probe(extra: list[str]) -> dict[str, Any]: ...
def gpu_resample_check(
    files: list[bytes],
    transforms: list[tuple[Any, ...]],
    keys: list[tuple[int, int, int]],
    normalize: tuple[Sequence[float], Sequence[float]] | None,
    dtype: str,
    layout: str,
    device: int,
    extra: list[str],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8], dict[str, Any]]: ...

SYNTHETIC_VERSION: str

def generate_synthetic_dataset(
    root: str, count: int, seed: int, *, threads: int | None = None, progress: Any = None
) -> dict[str, Any]: ...
def decode_ceiling(
    paths: list[str], threads: int, repeat: int = 1, *, pin: bool = True
) -> dict[str, Any]: ...

@final
class NativeSource:
    """One core dataset (files, encoded blobs or raw pixels), built by a Python source for a Loader."""
    def with_boxes(self, offsets: Sequence[int], boxes: npt.NDArray[np.float64]) -> NativeSource: ...
    def with_sizes(self, sizes: npt.NDArray[np.int64]) -> NativeSource: ...
    def with_coco_targets(
        self, annotations: CocoAnnotations, masks: bool, keypoints: bool
    ) -> NativeSource: ...
    def with_python_targets(
        self,
        make: Callable[[int], dict[str, Any]],
        kind: str,
        name: str,
        *,
        masks: bool = False,
        keypoints: bool = False,
        fill: int = 255,
    ) -> NativeSource: ...
    @staticmethod
    def records(
        kind: str,
        paths: list[str],
        image_column: str | None = None,
        label_column: str | None = None,
        label_given: bool = False,
        extras: list[str] | None = None,
        window_blocks: int | None = None,
        cache_bytes: int | None = None,
        prefetch_blocks: int | None = None,
        storage_options: Any = None,
    ) -> NativeSource: ...
    @property
    def record_fields(self) -> list[str]: ...
    @property
    def record_units(self) -> int: ...
    def record_extras(self, i: int) -> dict[str, Any] | None: ...
    def with_python_extras(
        self, read: Callable[[int, int], dict[str, Any] | None], *, after_pixels: bool = False
    ) -> NativeSource: ...
    @property
    def target_kind(self) -> str | None: ...
    @staticmethod
    def files(
        paths: Sequence[str | os.PathLike[str]], labels: list[int], classes: list[str]
    ) -> NativeSource: ...
    @staticmethod
    def blobs(blobs: Sequence[bytes], labels: list[int]) -> NativeSource: ...
    @staticmethod
    def pixels(images: npt.NDArray[np.uint8], labels: list[int]) -> NativeSource: ...
    @staticmethod
    def spans(
        files: Sequence[str | os.PathLike[str]],
        file_index: list[int],
        offsets: list[int],
        lens: list[int],
        labels: list[int],
    ) -> NativeSource: ...
    @staticmethod
    def packed(
        path: str | os.PathLike[str],
        mode: str = "full",
        window_blocks: int | None = None,
        cache_bytes: int | None = None,
        prefetch_blocks: int | None = None,
        storage_options: Mapping[str, str | bool | int | float] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_disk_bytes: int | None = None,
    ) -> NativeSource: ...
    @staticmethod
    def remote_files(
        urls: Sequence[str],
        labels: Sequence[int],
        classes: Sequence[str],
        storage_options: _StorageOptions | None = None,
        sizes: Sequence[int | None] | None = None,
        etags: Sequence[str | None] | None = None,
    ) -> NativeSource: ...
    @staticmethod
    def remote_spans(
        urls: Sequence[str],
        file_index: Sequence[int],
        offsets: Sequence[int],
        lens: Sequence[int],
        labels: Sequence[int],
        storage_options: _StorageOptions | None = None,
        sizes: Sequence[int | None] | None = None,
        etags: Sequence[str | None] | None = None,
    ) -> NativeSource: ...
    @staticmethod
    def external(
        len: int, fetch: Callable[[int, int], tuple[str, Any, int]], identity: str = ...
    ) -> NativeSource: ...
    def __len__(self) -> int: ...
    @property
    def labels(self) -> list[int]: ...
    @property
    def classes(self) -> list[str]: ...
    @property
    def extras_names(self) -> list[str]: ...
    def packed_extras(self, indices: Sequence[int]) -> list[list[tuple[int, int, bytes]]]: ...
    @property
    def storage_stats(self) -> dict[str, int] | None: ...
    def packed_extras_field(self, name: str) -> list[bytes | None]: ...

def pack(
    source: NativeSource,
    path: str | os.PathLike[str],
    short_side: int | None,
    max_side: int | None,
    quality: int | None,
    workers: int | None,
    classes: Sequence[str],
    progress: Callable[[int, int], object] | None,
    block_bytes: int | None = None,
    extras: Callable[[int], list[tuple[str, int, bytes]]] | None = None,
    targets: bool = False,
) -> dict[str, Any]: ...
def packed_info(
    path: str | os.PathLike[str], storage_options: _StorageOptions | None = None
) -> dict[str, Any]: ...
def packed_verify(
    path: str | os.PathLike[str],
    workers: int | None = None,
    progress: Callable[[int, int], object] | None = None,
    storage_options: _StorageOptions | None = None,
) -> list[tuple[int, str]]: ...

_StorageOptions = Mapping[str, str | bool | int | float]

def storage_list(
    prefix: str | os.PathLike[str], storage_options: _StorageOptions | None = None
) -> list[tuple[str, str, int, str | None]]: ...
def storage_check_target(
    path: str | os.PathLike[str], storage_options: _StorageOptions | None = None
) -> bool: ...
def storage_upload(
    file: str | os.PathLike[str],
    url: str | os.PathLike[str],
    storage_options: _StorageOptions | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> int: ...
def scan_object_folder(
    prefix: str | os.PathLike[str], storage_options: _StorageOptions | None = None
) -> tuple[list[str], list[int], list[str], list[int | None], list[str | None]]: ...
def expand_shards(pattern: str) -> list[str]: ...
def check_locations(
    parameter: str,
    paths: Sequence[str | os.PathLike[str]],
    storage_options: _StorageOptions | None = None,
    prefixes: bool = False,
) -> bool: ...
def check_local_only(
    source: str, parameter: str, path: str | os.PathLike[str], options_given: bool
) -> None: ...

@final
class RemoteFile:
    """One object behind a URL, opened (HEAD): size, ETag, byte ranges."""
    def __new__(
        cls, url: str | os.PathLike[str], storage_options: _StorageOptions | None = None
    ) -> RemoteFile: ...
    @property
    def size(self) -> int: ...
    @property
    def etag(self) -> str | None: ...
    def read(self, offset: int, length: int) -> bytes: ...
    @property
    def stats(self) -> dict[str, int]: ...

@final
class Step:
    """A Python callable ``fn(pixels (H, W, C) uint8, seed) -> pixels`` as a core per-sample step."""
    def __new__(cls, fun: Callable[[Any, int], Any], name: str) -> Step: ...
    @property
    def name(self) -> str: ...

@final
class BatchLeaseHandle:
    """Owner of one batch buffer; numpy views and DLPack tensors of it each keep it alive."""
    @property
    def __array_interface__(self) -> dict[str, Any]: ...
    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def batch(self) -> int: ...

@final
class DeviceTensorHandle:
    """Images or labels of one batch in a CUDA device slot; a DLPack producer on that device."""
    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def batch(self) -> int: ...
    @property
    def device_index(self) -> int: ...

@final
class NativeLoader:
    def __new__(
        cls,
        source: NativeSource,
        *,
        batch_size: int,
        workers: int | None,
        shuffle: bool,
        seed: int,
        reproducible: bool | None,
        last_batch: str,
        rank: int,
        world_size: int,
        pin: str,
        on_error: str,
        prefetch: int,
        max_held_batches: int,
        transforms: Sequence[tuple[Any, ...]],
        normalize: tuple[Sequence[float], Sequence[float]] | None,
        dtype: str,
        layout: str,
        channels: int | None,
        devices: Sequence[int] | None,
        device_slots: int,
        cpus: Sequence[int] | None,
        max_pixels: int | None,
        max_scans: int | None,
        max_memory_bytes: int | None,
        exif_transpose: bool,
        views: Sequence[Sequence[tuple[Any, ...]]] | None = None,
        decode: str | float | None = None,
        gpu_libraries: tuple[Sequence[str], Sequence[str]] = ...,
        pad_to: tuple[int, int] | None = None,
    ) -> NativeLoader: ...
    def __len__(self) -> int: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(
        self,
        *,
        version: int,
        seed: int,
        epoch: int,
        batches: int,
        num_samples: int,
        world_size: int,
        rank: int,
        devices: int,
        batch_size: int,
        last_batch: str,
        shuffle: bool,
        reproducible: bool,
        delivered: list[bytes],
        order: str = ...,
        source: str | None = ...,
    ) -> None: ...
    @property
    def epoch(self) -> int: ...
    def set_epoch(self, epoch: int) -> None: ...
    @property
    def workers(self) -> int: ...
    def check_targets(self) -> None: ...
    def target_plans(
        self,
        indices: Sequence[int],
        epoch: int,
        sizes: Sequence[tuple[int, int]],
        parts: Sequence[Sequence[tuple[int, int]]] | None = None,
    ) -> list[TargetPlan]: ...
    def mosaic_parts(self, indices: Sequence[int], epoch: int) -> list[list[int]] | None: ...
    @property
    def sample_shape(self) -> tuple[int, int, int]: ...
    @property
    def view_shapes(self) -> list[tuple[int, int, int]]: ...
    @property
    def multi_view(self) -> bool: ...
    @property
    def channels(self) -> int: ...
    def new_iteration(self) -> int: ...
    def start_epoch(self, token: int) -> int: ...
    def next_step(
        self, token: int
    ) -> (
        list[
            tuple[
                BatchLeaseHandle | DeviceTensorHandle | list[BatchLeaseHandle] | list[DeviceTensorHandle],
                DeviceTensorHandle | None,
                list[int],
                list[int],
                int,
                int,
                dict[str, Any] | None,
                list[dict[str, Any] | None] | None,
            ]
        ]
        | None
    ): ...
    @property
    def devices(self) -> list[int]: ...
    def device_mem_info(self) -> list[tuple[int, int]]: ...
    def stats(self) -> dict[str, int]: ...
    def drain_skipped(self) -> list[tuple[str, str]]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...

@final
class CocoAnnotations:
    def __new__(cls, path: str | os.PathLike[str], masks: bool = False) -> CocoAnnotations: ...
    def images(self) -> dict[str, Any]: ...
    def annotations(self) -> dict[str, Any]: ...
    def categories(self) -> list[tuple[int, str, str, list[str]]]: ...
    @property
    def orphans(self) -> int: ...
    def rles(self, annotations: Sequence[int]) -> list[bytes]: ...

@final
class TargetPlan:
    @property
    def canvas(self) -> tuple[int, int]: ...
    @property
    def prefix(self) -> list[float]: ...
    @property
    def steps(self) -> list[tuple[str, str, list[float], tuple[int, int], tuple[int, int]]]: ...
    @property
    def draws(self) -> list[tuple[str, list[float], tuple[int, int]]]: ...
    @property
    def mosaic(self) -> list[tuple[int, float, float, float, float, int, int, int, int]]: ...
    def boxes(
        self, boxes: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]: ...

def polygon_rles(polygons: Sequence[npt.NDArray[np.float64]], size: tuple[int, int]) -> list[bytes]: ...
def open_regular(path: str | os.PathLike[str]) -> int: ...
def source_verify(
    source: NativeSource, workers: int | None = None, progress: Any = None
) -> list[tuple[int, str]]: ...
