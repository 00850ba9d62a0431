"""Type stubs of the private native module (checked against it by tests/test_api.py)."""

from typing import Any

__version__: str

def scan_image_folder(root: str) -> tuple[list[str], list[int], list[str]]: ...

CHOICES: dict[str, tuple[str, ...]]

def machine_info() -> dict[str, Any]: ...

SYNTHETIC_VERSION: str

def generate_synthetic_dataset(
    root: str, count: int, seed: int, *, threads: int | None = None, progress: Any = None
) -> dict[str, Any]: ...
def decode_ceiling(
    paths: list[str], threads: int, repeat: int = 1, *, pin: bool = True
) -> dict[str, Any]: ...

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

class NativeLoader:
    def __init__(
        self,
        paths: list[str],
        labels: list[int],
        classes: list[str],
        *,
        batch_size: int,
        workers: int,
        shuffle: bool,
        seed: int,
        reproducible: bool | None,
        last_batch: Any,
        rank: int,
        world_size: int,
        pin: Any,
        on_error: Any,
        prefetch: int,
        max_held_batches: int,
        transforms: list[tuple[Any, ...]],
        normalize: tuple[tuple[float, float, float], tuple[float, float, float]] | None,
        dtype: Any,
        layout: Any,
        devices: list[int] | None = None,
        device_slots: int = 3,
        cpus: list[int] | None = None,
        max_pixels: int | None = None,
        max_scans: int | None = None,
        max_memory_bytes: int | None = None,
    ) -> None: ...
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
    ) -> None: ...
    @property
    def epoch(self) -> int: ...
    def set_epoch(self, epoch: int) -> None: ...
    @property
    def sample_shape(self) -> tuple[int, int, int]: ...
    def new_iteration(self) -> int: ...
    def start_epoch(self, token: int) -> int: ...
    def next_step(
        self, token: int
    ) -> (
        list[
            tuple[
                BatchLeaseHandle | DeviceTensorHandle,
                DeviceTensorHandle | None,
                list[int],
                list[int],
                int,
                int,
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
