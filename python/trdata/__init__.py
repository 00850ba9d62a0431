"""trdata — the input pipeline that keeps GPUs fed.

A Rust core decodes only the JPEG region a crop needs, fuses resampling, flip, normalization and the cast
into one pass, and fills batch buffers from a persistent pool of pinned threads; Python gets zero-copy
batches.
"""

from ._core import __version__
from .classic import CIFAR10_NORM, CIFAR100_NORM, FASHION_MNIST_NORM, MNIST_NORM
from .errors import (
    ConfigError,
    CudaError,
    DecodeError,
    LoaderClosedError,
    OutOfMemoryError,
    SourceError,
    StaleIteratorError,
    TrdataError,
    WorkerError,
)
from .loader import Batch, Loader
from .packed import Packed, Reencode, pack
from .shards import WebDataset
from .sources import (
    CIFAR10,
    CIFAR100,
    KMNIST,
    MNIST,
    Arrays,
    Bytes,
    FashionMNIST,
    FileList,
    ImageFolder,
    Source,
)
from .transforms import IMAGENET, CenterCrop, RandomHorizontalFlip, RandomResizedCrop, Resize, Transform

__all__ = [
    "CIFAR10",
    "CIFAR100",
    "CIFAR100_NORM",
    "CIFAR10_NORM",
    "FASHION_MNIST_NORM",
    "IMAGENET",
    "KMNIST",
    "MNIST",
    "MNIST_NORM",
    "Packed",
    "Reencode",
    "Arrays",
    "Batch",
    "Bytes",
    "CenterCrop",
    "ConfigError",
    "CudaError",
    "DecodeError",
    "FashionMNIST",
    "FileList",
    "ImageFolder",
    "Loader",
    "LoaderClosedError",
    "OutOfMemoryError",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "Source",
    "SourceError",
    "StaleIteratorError",
    "Transform",
    "TrdataError",
    "WebDataset",
    "WorkerError",
    "__version__",
    "pack",
]
