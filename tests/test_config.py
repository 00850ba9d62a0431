"""Configuration values: each works as a torch user expects or raises ConfigError naming the parameter
(house style ``invalid <param>: <value> must …``, from the parameter's one rule in the core). Images are
generated here, so these tests run anywhere."""

from __future__ import annotations

import dataclasses
import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import run_isolated, write_jpegs
from trdata import _core

RRC = [trdata.RandomResizedCrop(16)]
SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
# The validation-site checks read the source tree (src/, python/, scripts/); a wheel's test run has only tests/.
needs_source_tree = pytest.mark.skipif(
    not (SCRIPTS / "validation_sites.py").is_file(),
    reason="reads the source tree; a wheel test has only tests/",
)


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory) -> list[str]:
    return write_jpegs(tmp_path_factory.mktemp("jpegs"), 12, size=lambda i: (56 - 2 * i, 40 + 3 * i))


def make(paths, **kw):
    kw.setdefault("transforms", RRC)
    kw.setdefault("workers", 1)
    return trdata.Loader(trdata.FileList(paths), **kw)


def raises_config(param: str, fn, *args, **kwargs) -> trdata.ConfigError:
    with pytest.raises(trdata.ConfigError) as info:
        fn(*args, **kwargs)
    e = info.value
    assert isinstance(e, ValueError)
    assert e.parameter == param, (e.parameter, str(e))
    assert str(e).startswith(f"invalid {param}: "), str(e)
    return e


# --- sizes -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [trdata.CenterCrop, trdata.Resize, trdata.RandomResizedCrop])
@pytest.mark.parametrize(
    "size", ["32", b"32", "3", 32.0, 2.5, True, None, (32,), (32, 32, 3), ("3", "2"), (32.0, 32), (True, 4)]
)
def test_sizes_of_the_wrong_type_are_refused_at_construction(cls, size):
    # CenterCrop('32') used to give 3×2 images (the string split into characters); torchvision refuses a
    # string size when the transform is made, so does trdata
    raises_config("size", cls, size)


@pytest.mark.parametrize("cls", [trdata.CenterCrop, trdata.Resize, trdata.RandomResizedCrop])
@pytest.mark.parametrize("size", [-4, 0, (0, 8), (8, -1)])
def test_sizes_out_of_range_are_refused_by_the_loader(jpegs, cls, size):
    raises_config(
        "size", make, jpegs, transforms=[cls(size)] + ([trdata.CenterCrop(8)] if cls is trdata.Resize else [])
    )


def test_good_sizes(jpegs):
    assert trdata.CenterCrop(np.int64(8))._spec() == ("center_crop", {"size": (8, 8)})
    assert trdata.CenterCrop((np.int32(6), 10))._spec() == ("center_crop", {"size": (6, 10)})
    assert trdata.Resize([12, 9])._spec() == ("resize", {"size": (12, 9)})
    assert trdata.Resize(12)._spec() == ("resize_shorter", {"size": 12})
    with make(jpegs, transforms=[trdata.Resize(20), trdata.CenterCrop((6, 10))], batch_size=4) as loader:
        assert next(iter(loader)).images.shape == (4, 3, 6, 10)


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"scale": "ab"}, "scale"),
        ({"scale": (0.5,)}, "scale"),
        ({"ratio": ("a", 1.0)}, "ratio"),
        ({"ratio": None}, "ratio"),
    ],
)
def test_random_resized_crop_arguments(kwargs, param):
    raises_config(param, trdata.RandomResizedCrop, 16, **kwargs)


@pytest.mark.parametrize("p", ["0.5", None, True])
def test_flip_probability_type(p):
    raises_config("p", trdata.RandomHorizontalFlip, p)


# --- bools, ints, choices ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("param", "value"),
    # reproducible=None is the documented default (= not shuffle), tested in test_loader.py
    [
        (p, v)
        for p in ("shuffle", "reproducible")
        for v in ("no", "False", 0, 1, None, [], 1.0)
        if (p, v) != ("reproducible", None)
    ],
)
def test_bool_parameters_must_be_bools(jpegs, param, value):
    raises_config(param, make, jpegs, **{param: value})


def test_numpy_bools_and_ints_are_accepted(jpegs):
    with make(
        jpegs,
        shuffle=np.bool_(True),
        reproducible=np.True_,
        batch_size=np.int64(3),
        seed=np.uint64(2**64 - 1),
    ) as loader:
        assert len(loader) == 4
        assert sorted(i for b in loader for i in b.indices.tolist()) == list(range(12))


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("batch_size", 2**70),
        ("batch_size", 2**63),
        ("batch_size", 2**40),  # fits 64 bits: the core's range check names it
        ("batch_size", 0),
        ("batch_size", -1),
        ("batch_size", 4.0),
        ("batch_size", "4"),
        ("batch_size", True),
        ("workers", 2**64),
        ("workers", 0),
        ("workers", "2"),
        ("seed", 2**70),
        ("seed", 2**64),
        ("seed", -1),
        ("seed", 1.5),
        ("prefetch", 2**63),
        ("prefetch", 1),
        ("prefetch", None),
        ("max_held_batches", 2**62),
        ("max_held_batches", 2**80),
        ("max_held_batches", -3),
        ("device_slots", 2**64),
        ("device_slots", "3"),
        ("rank", 2**64),
        ("rank", 1.0),
        ("world_size", 2**65),
        ("world_size", 0),
    ],
)
def test_int_parameters_are_range_checked_and_named(jpegs, param, value):
    raises_config(param, make, jpegs, **{param: value})


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("normalize", ((1, 2), (3,))),
        ("normalize", "x"),
        ("normalize", (0.5, 0.5)),
        ("normalize", ((0.5, 0.5, "a"), (0.2, 0.2, 0.2))),
        ("transforms", None),
        ("transforms", trdata.CenterCrop(8)),
        ("transforms", [lambda x: x]),
        ("transforms", "CenterCrop"),
        ("device", 3.5),
        ("device", None),
        ("last_batch", None),
        ("last_batch", "Drop"),
        ("pin", 1),
        ("pin", "roundrobin"),
        ("on_error", None),
        ("on_error", "ignore"),
        ("dtype", None),
        (
            "dtype",
            np.int32,
        ),  # np.float32 names float32 (tests/test_api_traps.py); a type with no trdata dtype
        ("dtype", "float32 "),
        ("layout", 5),
        ("layout", "nchw"),
    ],
)
def test_type_errors_name_the_parameter(jpegs, param, value):
    raises_config(param, make, jpegs, **{param: value})


def test_each_choice_has_one_list_and_every_documented_string_works(jpegs):
    CHOICES = trdata.loader.CHOICES
    assert dict(_core.CHOICES) == CHOICES
    assert set(CHOICES) == {"dtype", "layout", "last_batch", "on_error", "pin", "decode"}
    assert set(CHOICES["dtype"]) == {"uint8", "float16", "bfloat16", "float32"}
    for param, names in CHOICES.items():
        for name in names:
            if (param, name) == ("decode", "gpu"):
                continue  # needs a CUDA loader (tests/test_decode_config.py, tests/cuda/test_gpu_decode.py)
            with make(jpegs, batch_size=4, **{param: name}) as loader:
                assert len(loader) >= 1
        e = raises_config(param, make, jpegs, **{param: "nope"})
        for name in names:
            assert repr(name) in str(e)  # the message lists the accepted strings
    with make(jpegs, dtype="bfloat16", batch_size=4) as loader:
        assert next(iter(loader)).images.dtype.itemsize == 2


# --- cpus and epochs -------------------------------------------------------------------------------------------


def test_cpus_must_be_allowed_for_this_process(jpegs):
    allowed = sorted(os.sched_getaffinity(0))
    e = raises_config("cpus", make, jpegs, cpus=[999])
    assert "999" in str(e) and "sched_getaffinity" in str(e)
    raises_config("cpus", make, jpegs, cpus=[max(allowed) + 1])
    raises_config("cpus", make, jpegs, cpus=[])
    raises_config("cpus", make, jpegs, cpus="01")
    raises_config("cpus", make, jpegs, cpus=[allowed[0], allowed[0]])
    raises_config("cpus", make, jpegs, cpus=[2**70])
    raises_config("cpus", make, jpegs, cpus=[True])
    with make(jpegs, cpus=os.sched_getaffinity(0), batch_size=6) as loader:  # a set works too
        assert loader.cpus == allowed
        assert len(list(loader)) == 2


def test_set_epoch_range(jpegs):
    with make(jpegs, batch_size=6) as loader:
        for bad in (2**64 - 1, 2**63, 2**70, -1):
            raises_config("epoch", loader.set_epoch, bad)
        raises_config("epoch", loader.set_epoch, 1.0)
        raises_config("epoch", loader.set_epoch, "3")
        assert loader.epoch == 0  # untouched by the refused values
        loader.set_epoch(2**63 - 2)
        assert [b.epoch for b in loader] == [2**63 - 2] * 2
        assert loader.epoch == 2**63 - 1
        loader.set_epoch(np.int64(5))
        assert loader.epoch == 5


def test_load_state_dict_with_huge_or_wrong_values_names_state_dict(jpegs):
    with make(jpegs, batch_size=6) as loader:
        state = loader.state_dict()
        raises_config("state_dict", loader.load_state_dict, dict(state, epoch=2**70))
        raises_config("state_dict", loader.load_state_dict, dict(state, batches="1"))
        raises_config("epoch", loader.load_state_dict, dict(state, epoch=2**64 - 1))


# --- normalize --------------------------------------------------------------------------------------------------


def _batches(jpegs, normalize):
    with make(jpegs, batch_size=4, normalize=normalize, reproducible=True, shuffle=True, seed=7) as loader:
        return [b.images.copy() for b in loader]


def test_normalize_in_0_255_units_gives_the_same_batches(jpegs):
    mean, std = trdata.IMAGENET
    dali = (tuple(m * 255 for m in mean), tuple(s * 255 for s in std))  # (123.675, …), (58.395, …)
    unit = _batches(jpegs, trdata.IMAGENET)
    scaled = _batches(jpegs, dali)
    assert len(unit) == len(scaled)
    for a, b in zip(unit, scaled):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    # and the values are really normalized: roughly zero-mean, unit-scale, not in the hundreds
    assert abs(float(np.mean(unit[0]))) < 3 and float(np.max(np.abs(unit[0]))) < 5
    # mean 0 with a 0–255 std is the "scale to [0, 1]" habit
    zero = _batches(jpegs, ((0, 0, 0), (255, 255, 255)))
    ident = _batches(jpegs, ((0, 0, 0), (1, 1, 1)))
    assert len(zero) == len(ident)
    for a, b in zip(zero, ident):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert 0 <= float(zero[0].min()) and float(zero[0].max()) <= 1


@pytest.mark.parametrize(
    "normalize",
    [
        ((123.7, 116.3, 103.5), (0.229, 0.224, 0.225)),  # mean 0–255, std 0–1
        ((0.485, 0.456, 0.406), (58.4, 57.1, 57.4)),  # mean 0–1, std 0–255
        ((123.7, 0.5, 103.5), (58.4, 57.1, 57.4)),  # one channel in other units
        ((123.7, 116.3, 103.5), (58.4, 0.5, 57.4)),
        ((0.5, 0.5, 0.5), (0.0, 0.2, 0.2)),  # std 0
        ((0.5, 0.5, 0.5), (1e-9, 0.2, 0.2)),  # std ≈ 0
        ((0.5, 0.5, 0.5), (-0.2, 0.2, 0.2)),
        ((0.5, float("nan"), 0.5), (0.2, 0.2, 0.2)),
        ((0.5, 0.5, 0.5), (0.2, float("inf"), 0.2)),
        ((-0.5, 0.5, 0.5), (0.2, 0.2, 0.2)),
        ((300, 116.3, 103.5), (58.4, 57.1, 57.4)),
    ],
)
def test_ambiguous_or_degenerate_normalize_is_refused(jpegs, normalize):
    raises_config("normalize", make, jpegs, normalize=normalize)


# --- transforms --------------------------------------------------------------------------------------------------


def test_subclassing_transform_explains_what_transforms_are(jpegs):
    class Blur(trdata.Transform):
        def __call__(self, img):
            return img

    e = raises_config("transforms", make, jpegs, transforms=[trdata.CenterCrop(8), Blur()])
    msg = str(e)
    assert "Blur" in msg and "Rust core" in msg and "not" in msg
    for name in ("RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip", "transforms=["):
        assert name in msg
    with pytest.raises(NotImplementedError, match="compiled by the Rust core"):
        Blur()._spec()

    class MyCrop(trdata.CenterCrop):  # behaviour added to a built-in would be silently ignored
        def __call__(self, img):
            return img

    raises_config("transforms", make, jpegs, transforms=[MyCrop(8)])

    class Square(trdata.CenterCrop):  # a subclass adding nothing (say, a default) is still the built-in
        pass

    with make(jpegs, transforms=[Square(8)], batch_size=4) as loader:
        assert next(iter(loader)).images.shape == (4, 3, 8, 8)


# --- huge numbers: ConfigError naming the parameter, never an unnamed OverflowError/ValueError ----------------

HUGE_INT = 10**5000  # beyond sys.get_int_max_str_digits(): even str() of it raises ValueError


def _id(value) -> str:
    """A test id for any value (pytest's own str() of HUGE_INT raises)."""
    return trdata.errors._shown(value, limit=30)


@pytest.mark.parametrize(
    ("param", "build"),
    [
        ("size", lambda: [trdata.CenterCrop(2**70)]),
        ("size", lambda: [trdata.CenterCrop((8, 2**64))]),
        ("size", lambda: [trdata.CenterCrop(65537)]),
        ("size", lambda: [trdata.Resize((2**70, 1)), trdata.CenterCrop(8)]),
        ("size", lambda: [trdata.Resize(2**63), trdata.CenterCrop(8)]),
        ("size", lambda: [trdata.RandomResizedCrop(2**64)]),
        ("size", lambda: [trdata.RandomResizedCrop(HUGE_INT)]),
        ("size", lambda: [trdata.CenterCrop(-(2**70))]),
    ],
    ids=_id,
)
def test_huge_sizes_are_config_errors_naming_size(jpegs, param, build):
    e = raises_config(param, make, jpegs, transforms=build())
    assert len(str(e)) < 300, str(e)  # a 5000-digit int is not printed whole
    assert isinstance(e, trdata.ConfigError)


def test_largest_size_is_accepted(jpegs):
    spec = trdata.CenterCrop((1, 65536))._spec()
    assert spec == ("center_crop", {"size": (1, 65536)})
    # 1 × 65536 fits in memory: the loader builds (the range check is 1..=65536 inclusive)
    with make(jpegs, transforms=[trdata.CenterCrop((1, 65536))], batch_size=1, dtype="uint8") as loader:
        assert len(loader) == 12


@pytest.mark.parametrize(
    ("param", "build"),
    [
        ("scale", lambda: trdata.RandomResizedCrop(8, scale=(10**400, 1))),
        ("scale", lambda: trdata.RandomResizedCrop(8, scale=(0.5, HUGE_INT))),
        ("ratio", lambda: trdata.RandomResizedCrop(8, ratio=(1, 10**400))),
        ("ratio", lambda: trdata.RandomResizedCrop(8, ratio=(-(10**400), 1))),
        ("p", lambda: trdata.RandomHorizontalFlip(10**400)),
        ("p", lambda: trdata.RandomHorizontalFlip(HUGE_INT)),
        ("size", lambda: trdata.CenterCrop((HUGE_INT, "a"))),
    ],
    ids=_id,
)
def test_numbers_a_float_cannot_hold_are_config_errors_naming_them(param, build):
    e = raises_config(param, build)
    assert len(str(e)) < 300, str(e)


@pytest.mark.parametrize(
    "normalize",
    [
        ((10**400, 0, 0), (1, 1, 1)),
        ((0.5, 0.5, 0.5), (0.2, 10**400, 0.2)),
        ((HUGE_INT, 0, 0), (1, 1, 1)),
    ],
    ids=_id,
)
def test_normalize_beyond_a_float_names_normalize(jpegs, normalize):
    e = raises_config("normalize", make, jpegs, normalize=normalize)
    assert len(str(e)) < 400, str(e)


@pytest.mark.parametrize(
    "device",
    [
        "cuda:" + "9" * 20,
        "cuda:4294967296",  # 2**32
        "cuda:" + "9" * 5000,  # int() of it would raise ValueError
        ["cuda:0", "cuda:" + "9" * 20],
        "cuda:²",  # str.isdigit() is true, int() raises ValueError
        "cuda:٣",  # a non-ASCII digit
        HUGE_INT,  # str() of it raises ValueError
        2**70,
    ],
    ids=_id,
)
def test_huge_or_odd_device_ordinals_name_device(jpegs, device):
    e = raises_config("device", make, jpegs, device=device)
    assert len(str(e)) < 400, str(e)


def test_local_rank_beyond_a_cuda_ordinal_names_device(jpegs, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "9" * 20)
    raises_config("device", make, jpegs, device="cuda")


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("batch_size", HUGE_INT),
        ("batch_size", [HUGE_INT]),
        ("seed", HUGE_INT),
        ("workers", -HUGE_INT),
        ("shuffle", HUGE_INT),
        ("cpus", [HUGE_INT]),
        ("transforms", [HUGE_INT]),
    ],
    ids=_id,
)
def test_ints_whose_str_raises_still_give_a_named_message(jpegs, param, value):
    e = raises_config(param, make, jpegs, **{param: value})
    assert len(str(e)) < 400, str(e)


def test_set_epoch_with_an_int_whose_str_raises(jpegs):
    with make(jpegs, batch_size=6) as loader:
        raises_config("epoch", loader.set_epoch, HUGE_INT)


@pytest.mark.parametrize("delivered", [[5], [-1], [2**40], 7, "ab", [HUGE_INT]], ids=_id)
def test_load_state_dict_delivered_must_be_bytes(jpegs, delivered):
    # bytes(2**40) would allocate a terabyte, bytes(-1) raises an unnamed ValueError
    with make(jpegs, batch_size=6) as loader:
        state = loader.state_dict()
        raises_config("state_dict", loader.load_state_dict, dict(state, delivered=delivered))
        loader.load_state_dict(dict(state, delivered=[]))  # the genuine one still loads


# --- device_slots: checked for every loader --------------------------------------------------------------------


@pytest.mark.parametrize("slots", [-1, 0, 1, 65, 10**9, 2**63 - 1])
def test_device_slots_range_is_checked_on_cpu_loaders_too(jpegs, slots):
    e = raises_config("device_slots", make, jpegs, device_slots=slots)
    assert "2..=64" in str(e), str(e)


@pytest.mark.parametrize("slots", [2, 3, 64])
def test_device_slots_in_range_are_accepted_on_cpu_loaders(jpegs, slots):
    with make(jpegs, batch_size=6, device_slots=slots) as loader:
        assert len(loader) == 2


def test_static_choice_types_equal_the_core_tables():
    import typing

    from trdata import loader

    for name, alias in [
        ("dtype", loader.DTypeName),
        ("layout", loader.LayoutName),
        ("last_batch", loader.LastBatchName),
        ("on_error", loader.OnErrorName),
        ("pin", loader.PinName),
    ]:
        assert typing.get_args(alias) == tuple(_core.CHOICES[name]), name


# --- one rule per parameter, in the core, in one wording ----------------------------------------------------------

_ALLOWED = sorted(os.sched_getaffinity(0))

#: (parameter, how to get it wrong with a value of the right Python type, how the message shows the value).
BAD_VALUES = [
    ("batch_size", dict(batch_size=0), "0"),
    ("batch_size", dict(batch_size=13, last_batch="drop"), "13"),  # no batch at all: checked against the data
    ("workers", dict(workers=0), "0"),
    ("seed", dict(seed=-1), "-1"),
    ("rank", dict(rank=2, world_size=2), "2"),
    ("world_size", dict(world_size=0), "0"),
    ("prefetch", dict(prefetch=1), "1"),
    ("max_held_batches", dict(max_held_batches=-1), "-1"),
    ("device_slots", dict(device_slots=1), "1"),
    ("decode", dict(decode=1.5), "1.5"),
    ("decode", dict(decode="fast"), '"fast"'),
    ("cpus", dict(cpus=[]), "[]"),
    ("cpus", dict(cpus=[_ALLOWED[0], _ALLOWED[0]]), f"[{_ALLOWED[0]}, {_ALLOWED[0]}]"),
    ("max_pixels", dict(max_pixels=0), "0"),
    ("max_scans", dict(max_scans=2**32), "4294967296"),
    ("max_memory_bytes", dict(max_memory_bytes=0), "0"),
    ("dtype", dict(dtype="float23"), '"float23"'),
    ("layout", dict(layout="nchw"), '"nchw"'),
    ("last_batch", dict(last_batch="keep"), '"keep"'),
    ("on_error", dict(on_error="ignore"), '"ignore"'),
    ("pin", dict(pin="roundrobin"), '"roundrobin"'),
    ("channels", dict(channels=2), "2"),
    (
        "normalize",
        dict(normalize=((0.5, 0.5, 0.5), (0, 0.2, 0.2))),
        "mean=[0.5, 0.5, 0.5] std=[0.0, 0.2, 0.2]",
    ),
    (
        "normalize",
        dict(normalize=((0.5,) * 3, (0.2,) * 3), dtype="uint8"),
        "mean=[0.5, 0.5, 0.5] std=[0.2, 0.2, 0.2]",
    ),
    ("device", dict(device=[]), "[]"),
    ("device", dict(device=["cuda:0", "cuda:0"]), "['cuda:0', 'cuda:0']"),
    ("device", dict(device="gpu"), "'gpu'"),  # translated by Python: not a device name at all
    ("transforms", dict(transforms=[]), "[]"),
    ("transforms", dict(transforms=[trdata.Resize(8)]), "[Resize(int)]"),
    ("size", dict(transforms=[trdata.CenterCrop((0, 8))]), "(0, 8)"),
    ("size", dict(transforms=[trdata.Resize(70000), trdata.CenterCrop(8)]), "70000"),
    ("max_size", dict(transforms=[trdata.Resize(8, max_size=4), trdata.CenterCrop(8)]), "4"),
    ("scale", dict(transforms=[trdata.RandomResizedCrop(8, scale=(0.5, 1.5))]), "(0.5, 1.5)"),
    ("ratio", dict(transforms=[trdata.RandomResizedCrop(8, ratio=(0, 1))]), "(0, 1)"),
    ("p", dict(transforms=[trdata.CenterCrop(8), trdata.RandomHorizontalFlip(2)]), "2"),
    ("shuffle", dict(shuffle="no"), "'no'"),  # type-only parameters: Python's translation, same wording
    ("reproducible", dict(reproducible=1), "1"),
    ("exif_transpose", dict(exif_transpose="yes"), "'yes'"),
    ("views", dict(views=[], transforms=()), "a list of 0 pipelines"),
    ("views", dict(views=[RRC]), "a list of 1 pipelines"),  # together with transforms=RRC
    ("views", dict(views="RRC", transforms=()), "'RRC'"),  # translated by Python: not a list at all
    ("source", dict(source=3), "a int"),
    (
        "batch_ops",
        dict(batch_ops=[trdata.CutMix(num_classes=3), trdata.MixUp()], dtype="uint8"),
        "uint8 images",
    ),
    (
        "batch_ops",
        dict(batch_ops=[trdata.BatchRandomChoice([trdata.MixUp(num_classes=3)], p=[-1])]),
        "p=[-1.0]",
    ),
    (
        "batch_ops",
        dict(batch_ops=[trdata.Resize(8)]),
        "Resize(size=8, interpolation='bilinear', max_size=None, antialias=True)",
    ),  # a per-sample transform
    ("batch_transform", dict(batch_transform=3), "3"),
    ("alpha", dict(batch_ops=[trdata.MixUp(alpha=0.0, num_classes=3)]), "0"),
    ("num_classes", dict(batch_ops=[trdata.CutMix(num_classes=0)]), "0"),
    ("size", dict(transforms=[trdata.Mosaic(0)]), "0"),
    ("transforms", dict(transforms=[trdata.CenterCrop(8), trdata.Mosaic(8)]), "Mosaic at transforms[1]"),
    ("p", dict(batch_ops=[trdata.DetectionMixUp(p=2.0)]), "2"),
    ("batch_ops", dict(batch_ops=[trdata.DetectionMixUp()]), "DetectionMixUp"),  # a source without targets
]


@pytest.mark.parametrize(("param", "kwargs", "shown"), BAD_VALUES, ids=[f"{p}={s}" for p, _, s in BAD_VALUES])
def test_every_bad_value_names_its_parameter_in_one_wording(jpegs, param, kwargs, shown):
    """`invalid <param>: <value> must …`, from the core's one rule (config.rs, augment/, decode/, source/)."""
    kwargs = dict(kwargs)
    source = kwargs.pop("source", trdata.FileList(jpegs))
    kwargs.setdefault("transforms", RRC)
    kwargs.setdefault("workers", 1)
    e = raises_config(param, trdata.Loader, source, **kwargs)
    assert str(e).startswith(f"invalid {param}: {shown} must "), str(e)


def test_bad_epochs_and_file_lists_use_the_same_wording(jpegs, tmp_path):
    with make(jpegs, batch_size=6) as loader:
        e = raises_config("epoch", loader.set_epoch, -1)
        assert str(e) == "invalid epoch: -1 must be in 0..=2**63 - 1"
    assert str(raises_config("paths", trdata.FileList, [])).startswith("invalid paths: [] must ")
    assert str(raises_config("paths", trdata.FileList, ["a\0b"])).startswith(
        'invalid paths: "a\\0b" (element 0) must '
    )
    assert str(raises_config("labels", trdata.FileList, ["a", "b"], [1])).startswith(
        "invalid labels: 1 labels must "
    )
    assert str(raises_config("root", trdata.ImageFolder, 3)).startswith("invalid root: 3 must ")


@needs_source_tree
def test_every_parameter_has_a_bad_value_case():
    import validation_sites

    # epoch, paths, labels and root have their own tests here; blobs, images, classes in test_memory_sources.py;
    # train and variant (the classic datasets' readers) in test_classic.py; shards in test_shards.py; the packed
    # files' (pack, Packed) in test_packed.py
    extra = {"epoch", "paths", "labels", "root", "blobs", "images", "classes", "train", "variant", "shards"}
    extra |= {
        "mode",
        "window_blocks",
        "cache_bytes",
        "prefetch_blocks",
        "block_bytes",
        "reencode",
        "short_side",
        "max_side",
        "quality",
    }
    # the pixel ops' parameters: tests/test_transforms_ops.py::test_values_are_checked_by_the_core_with_the_op_named
    extra |= {
        "padding", "fill", "padding_mode", "pad_if_needed", "brightness", "contrast", "saturation", "hue",
        "num_output_channels", "kernel_size", "sigma", "mean", "clip", "value", "threshold", "bits",
        "sharpness_factor",
    }  # fmt: skip
    # the geometric ops' and policies' parameters: tests/test_transforms_geo.py::test_values_are_checked_by_the_core…
    extra |= {
        "degrees", "interpolation", "expand", "center", "translate", "shear", "distortion_scale", "policy",
        "num_ops", "magnitude", "num_magnitude_bins", "severity", "mixture_width", "chain_depth", "alpha", "all_ops",
        "antialias",
    }  # fmt: skip
    # timm's policies', RandomErasing's and ResizeKeepRatio's: tests/test_timm.py::test_bad_values_are_refused…
    extra |= {
        "num_layers", "magnitude_std", "magnitude_max", "translate_pct", "width", "depth", "probability", "min_area",
        "max_area", "min_count", "max_count", "re_mode", "longest", "weights",
    }  # fmt: skip
    # a map-style dataset's and a Python step's: tests/test_dataset_source.py, tests/test_python_steps.py,
    # tests/test_python_steps_types.py (pil)
    extra |= {"dataset", "fn", "extras", "image_key", "label_key", "pil"}  # extras: tests/test_extras.py
    # YoloDetection's and SegmentationFolder's (types only): tests/test_yolo.py, tests/test_segmentation.py
    extra |= {"split", "masks", "ids", "image_suffix", "mask_suffix"}
    # the URL sources' (path, storage_options): tests/test_packed_remote.py::test_bad_urls_and_options_are_config…
    # and every source's storage_options and URL paths: tests/test_storage_urls.py::test_sources_check_urls_and_…
    extra |= {"path", "storage_options"}
    # the disk cache's (Packed's, checked when the source is made, before a Loader): tests/test_disk_cache.py::
    # test_bad_values_name_their_parameter, in this file's wording
    extra |= {"cache_dir", "cache_disk_bytes"}
    covered = {p for p, _, _ in BAD_VALUES} | extra
    assert covered == validation_sites.PARAMS


@needs_source_tree
def test_every_parameter_has_one_validation_site():
    """scripts/validation_sites.py: one core module holds each parameter's rules; the edge only translates."""
    r = subprocess.run([sys.executable, str(SCRIPTS / "validation_sites.py")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_signature_defaults_are_the_core_defaults():
    """Each default is written once, in the core; Python's signatures read `_core.DEFAULTS`."""
    sig = inspect.signature(trdata.Loader)
    for name, value in _core.DEFAULTS.items():
        if "." in name:  # a transform's: "RandomResizedCrop.scale"
            cls, field = name.split(".")
            # trdata.transforms holds the per-sample containers (trdata.BatchRandomChoice is the batch op).
            owner = getattr(trdata.transforms, cls, None) or getattr(trdata, cls)
            default = {f.name: f.default for f in dataclasses.fields(owner)}[field]
        else:
            default = sig.parameters[name].default
        assert default == value and type(default) is type(value), (name, default, value)
    shown = {k for k, p in sig.parameters.items() if p.default not in (inspect.Parameter.empty, None, ())}
    assert shown == {k for k in _core.DEFAULTS if "." not in k}, "a literal default in the signature"


# -------------------- hostile inputs and their regressions -------------------------------------------------


def _usable_memory_bytes() -> int:
    """What the core compares against: MemTotal, lowered by a cgroup v2 memory.max."""
    total = next(
        int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal:")
    )
    try:
        limit = open("/sys/fs/cgroup/memory.max").read().strip()
        return min(total, int(limit)) if limit.isdigit() else total
    except OSError:
        return total


@pytest.mark.parametrize(
    ("transforms", "batch_size", "sample_bytes", "parameter"),
    [
        # The cases (SIGABRT on a 24 GiB machine): float32, prefetch=2 buffers in flight.
        ("[trdata.RandomResizedCrop(224)]", 65536, 3 * 224 * 224 * 4, "batch_size"),
        ("[trdata.CenterCrop(65536)]", 1, 3 * 65536 * 65536 * 4, "transforms"),
        ("[trdata.CenterCrop(20000)]", 64, 3 * 20000 * 20000 * 4, "batch_size"),
        # Beyond any machine.
        ("[trdata.CenterCrop(65536)]", 2**20, 3 * 65536 * 65536 * 4, "transforms"),
        ("[trdata.CenterCrop(8192)]", 2**20, 3 * 8192 * 8192 * 4, "batch_size"),
    ],
)
def test_absurd_sizes_are_config_errors_not_aborts(tmp_path, transforms, batch_size, sample_bytes, parameter):
    memory = _usable_memory_bytes()
    if parameter == "batch_size" and 2 * batch_size * sample_bytes <= memory:
        pytest.skip(f"fits in this machine's {memory / 2**30:.0f} GiB (a valid configuration here)")
    if parameter == "transforms" and sample_bytes <= memory:
        pytest.skip(f"one sample fits in this machine's {memory / 2**30:.0f} GiB")
    paths = write_jpegs(tmp_path, 2)
    code = f"""
import trdata
src = trdata.FileList({paths!r}, [0, 1])
try:
    with trdata.Loader(src, batch_size={batch_size}, transforms={transforms}, workers=1) as L:
        for b in L:
            pass
    print("no error")
except trdata.ConfigError as e:
    print("ConfigError", e.parameter, "|", e)
"""
    r = run_isolated(code)
    assert r.returncode == 0, f"process died (rc={r.returncode}): {r.stderr[-500:]}"
    out = r.stdout.strip()
    assert out.startswith(f"ConfigError {parameter} |"), out
    assert "GiB" in out, out  # says how much memory it needed and how much there is


def test_float16_normalize_that_would_overflow_is_refused(tmp_path):
    src = trdata.FileList(write_jpegs(tmp_path, 2), [0, 1])
    kw = dict(batch_size=2, workers=1, transforms=[trdata.CenterCrop(8)])
    with pytest.raises(trdata.ConfigError) as exc:
        trdata.Loader(src, dtype="float16", normalize=((0, 0, 0), (2e-6, 2e-6, 2e-6)), **kw)
    assert exc.value.parameter == "normalize" and "inf" in str(exc.value)
    # The same values fit float32, and ordinary ones fit float16.
    with trdata.Loader(src, dtype="float32", normalize=((0, 0, 0), (2e-6, 2e-6, 2e-6)), **kw) as loader:
        assert np.isfinite(next(iter(loader)).images).all()
    with trdata.Loader(src, dtype="float16", normalize=trdata.IMAGENET, **kw) as loader:
        assert np.isfinite(next(iter(loader)).images).all()
