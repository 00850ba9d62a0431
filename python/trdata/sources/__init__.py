"""Where samples come from: every trdata source, one module per kind.

* ``base``: :class:`Source` (the base class) and the general sources :class:`ImageFolder` (torchvision's rules),
  :class:`FileList` (explicit paths and labels), :class:`Bytes` (encoded images in memory) and :class:`Arrays`
  (raw uint8 pixels in memory);
* ``classic``: torchvision's classic datasets read in their on-disk layouts (:class:`MNIST`,
  :class:`FashionMNIST`, :class:`KMNIST`, :class:`CIFAR10`, :class:`CIFAR100`) and their normalization presets;
* ``shards``: :class:`WebDataset` (tar shards read in place);
* ``records``: other projects' record files read in place (:class:`Parquet`, :class:`MDS`, :class:`LitData`,
  :class:`TFRecord`);
* ``packed``: trdata's packed file (:func:`pack`, :class:`Packed`, :class:`Reencode`, ``verify``, ``inspect``);
* ``dataset``: :class:`DatasetSource`, any map-style dataset (``__len__`` and ``__getitem__``), which
  ``Loader(dataset)`` wraps by itself;
* ``detection``: :class:`CocoDetection` (images with boxes, masks and keypoints that move with the image);
* ``yolo``: :class:`YoloDetection` (ultralytics' ``images/`` + ``labels/`` txt layout, boxes that move with the image);
* ``segmentation``: :class:`SegmentationFolder` (images + PNG label maps that move with the image);
* ``targets``: what those two share (image headers, moving boxes);
* ``extras``: extra fields per sample (captions, JSON, arrays): how they are given, stored and delivered;
* ``synthetic``: the built-in synthetic dataset of the benches and tests (``default_dataset``).

Every public name is also ``trdata.<name>``.
"""

from __future__ import annotations

from .base import IMG_EXTENSIONS, Arrays, Bytes, FileList, ImageFolder, Source
from .classic import (
    CIFAR10,
    CIFAR10_NORM,
    CIFAR100,
    CIFAR100_NORM,
    FASHION_MNIST_NORM,
    KMNIST,
    MNIST,
    MNIST_NORM,
    FashionMNIST,
)
from .dataset import DatasetSource
from .detection import CocoDetection
from .packed import Packed, Reencode, pack
from .records import MDS, LitData, Parquet, TFRecord
from .segmentation import SegmentationFolder
from .shards import WebDataset
from .yolo import YoloDetection

__all__ = [
    "CIFAR10",
    "CIFAR100",
    "CIFAR100_NORM",
    "CIFAR10_NORM",
    "FASHION_MNIST_NORM",
    "IMG_EXTENSIONS",
    "KMNIST",
    "MDS",
    "MNIST",
    "MNIST_NORM",
    "Arrays",
    "Bytes",
    "CocoDetection",
    "DatasetSource",
    "FashionMNIST",
    "FileList",
    "ImageFolder",
    "LitData",
    "Packed",
    "Parquet",
    "Reencode",
    "SegmentationFolder",
    "TFRecord",
    "Source",
    "WebDataset",
    "YoloDetection",
    "pack",
]
