"""Specs cross into the core by name: every transform class's ``_spec()`` is ``("kind", {name: value, ...})`` and
the core reads each parameter by its name, refusing a missing one and an unknown one with a ConfigError naming
it (src/augment/ops/spec.rs, ``Args`` in src/augment/ops/mod.rs). This file holds every public transform class to
that contract, through the real binding (``_core.sample_op`` parses the spec exactly as the Loader does), and the
batch ops (trdata.batch_ops, ``_core.batch_op_draw``) too."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import trdata
from trdata import _core
from trdata import transforms as T

#: Arguments of the classes that have required parameters (every other class is built with its defaults).
REQUIRED: dict[str, dict[str, Any]] = {
    "CenterCrop": {"size": 8},
    "GaussianBlur": {"kernel_size": 3},
    "Mosaic": {"size": 8},
    "Pad": {"padding": 1},
    "PythonStep": {"fn": lambda x: x},
    "RandomAdjustSharpness": {"sharpness_factor": 2.0},
    "RandomApply": {"transforms": [trdata.RandomInvert(), trdata.RandomHorizontalFlip()]},
    "RandomChoice": {"transforms": [trdata.RandomInvert(), trdata.RandomEqualize()]},
    "RandomCrop": {"size": 8},
    "RandomOrder": {"transforms": [trdata.RandomInvert(), trdata.RandomEqualize()]},
    "RandomPosterize": {"bits": 4},
    "RandomResizedCrop": {"size": 8},
    "RandomRotation": {"degrees": 10},
    "RandomAffine": {"degrees": 10},
    "RandomSolarize": {"threshold": 128},
    "RandomResize": {"min_size": 8, "max_size": 12},
    "RandomShortestSize": {"min_size": (8, 10)},
    "ScaleJitter": {"target_size": (8, 8)},
    "Resize": {"size": 8},
    "TimmAutoAugment": {"policy": [[("Equalize", 0.8, 1), ("ShearY", 0.8, 4)]]},
    "TimmCenterCropOrPad": {"size": 8},
    "TimmResizeKeepRatio": {"size": 8},
}

#: The forms of a class whose spec kind depends on its arguments (each kind once more).
VARIANTS = [
    trdata.Resize((8, 6)),
    trdata.Resize(8, max_size=12),
    trdata.Resize(8, interpolation="nearest"),
    trdata.RandomResizedCrop(8, interpolation="bicubic", antialias=False),
    T.TimmResizeKeepRatio(8, interpolation="bicubic"),
    T.RandomChoice([trdata.RandomInvert(), trdata.RandomEqualize()], p=[1, 3]),
    trdata.RandomErasing(value="random"),
    trdata.RandomAffine(10, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5, center=(1, 1)),
]


def _public_classes() -> list[type]:
    """Every transform class trdata exports (its top level and trdata.transforms' built-ins)."""
    top = [getattr(trdata, n) for n in trdata.__all__]
    classes = {c for c in top if inspect.isclass(c) and issubclass(c, trdata.Transform)} | set(T.BUILTIN)
    classes.discard(trdata.Transform)
    return sorted(classes, key=lambda c: c.__name__)


def _build(cls: type) -> trdata.Transform:
    t: trdata.Transform = cls(**REQUIRED.get(cls.__name__, {}))
    return t


INSTANCES = [_build(c) for c in _public_classes()] + VARIANTS


def _sample(spec: Any) -> list[float]:
    return _core.sample_op(spec, seed=1, epoch=0, index=0, position=0, height=16, width=12, channels=3)


def _accepted(spec: Any) -> None:
    """The core parses ``spec``; a transform that only folds into the decode (timm's ResizeKeepRatio) has no
    stage-2 op to sample, and RandomIoUCrop draws from boxes, so the refusal they get is that rule's (parsing
    succeeded), not a parameter's."""
    try:
        _sample(spec)
    except trdata.ConfigError as e:
        # RandomIoUCrop's draw depends on a detection sample's boxes: sampled alone it is refused by that rule
        rules = (
            "must come before the pixel ops",
            "draws from the sample's boxes",
            "must be the first transform",
        )
        assert e.parameter == "transforms" and any(r in str(e) for r in rules), str(e)


def _specs_with_dicts(spec: Any) -> list[tuple[str, dict[str, Any]]]:
    """The (kind, params) of ``spec`` and of every spec nested in it (containers, the resize filter wrapper)."""
    kind, params = spec
    out = [(kind, params)]
    for v in params.values():
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], dict):
            out += _specs_with_dicts(v)
        elif isinstance(v, tuple) and v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            for x in v:
                if isinstance(x[0], str) and isinstance(x[1], dict):
                    out += _specs_with_dicts(x)
    return out


def _replace(spec: Any, target: dict[str, Any], params: dict[str, Any]) -> Any:
    """``spec`` with the dict ``target`` (found by identity, at any depth) replaced by ``params``."""
    kind, d = spec
    if d is target:
        return (kind, params)
    out = {}
    for k, v in d.items():
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], dict):
            v = _replace(v, target, params)
        elif isinstance(v, tuple) and v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            v = tuple(
                _replace(x, target, params) if isinstance(x[0], str) and isinstance(x[1], dict) else x
                for x in v
            )
        out[k] = v
    return (kind, out)


def _id(t: Any) -> str:
    return repr(t)[:60]


def test_every_public_class_is_covered():
    names = {c.__name__ for c in _public_classes()}
    assert {"RandomResizedCrop", "CenterCrop", "RandomApply", "TimmRandomErasing"} <= names
    assert set(REQUIRED) <= names, set(REQUIRED) - names


@pytest.mark.parametrize("t", INSTANCES, ids=_id)
def test_spec_is_a_kind_and_a_dict_of_parameters(t):
    spec = t._spec()
    assert isinstance(spec, tuple) and len(spec) == 2, spec
    kind, params = spec
    assert isinstance(kind, str) and isinstance(params, dict), spec
    assert all(isinstance(k, str) for k in params), spec
    _accepted(spec)


@pytest.mark.parametrize("t", INSTANCES, ids=_id)
def test_a_renamed_parameter_is_refused_naming_it(t):
    spec = t._spec()
    for kind, params in _specs_with_dicts(spec):
        for key in params:
            renamed = {(k + "_renamed" if k == key else k): v for k, v in params.items()}
            with pytest.raises(trdata.ConfigError) as info:
                _sample(_replace(spec, params, renamed))
            e, msg = info.value, str(info.value)
            # The core finds the parameter it needs missing: it names it, the kind, and the keys it was given.
            assert e.parameter == key, (kind, key, msg)
            assert f"invalid {key}: " in msg and f'"{kind}"' in msg and f"{key}_renamed" in msg, msg


@pytest.mark.parametrize("t", INSTANCES, ids=_id)
def test_an_unknown_parameter_is_refused_naming_it(t):
    spec = t._spec()
    for kind, params in _specs_with_dicts(spec):
        with pytest.raises(trdata.ConfigError) as info:
            _sample(_replace(spec, params, {**params, "not_a_parameter": 1}))
        e, msg = info.value, str(info.value)
        assert e.parameter == "not_a_parameter", (kind, msg)
        assert msg.startswith("invalid not_a_parameter: is not a parameter") and f'"{kind}"' in msg, msg


def test_a_wrong_type_names_the_parameter():
    kind, params = trdata.RandomInvert()._spec()
    with pytest.raises(trdata.ConfigError) as info:
        _sample((kind, {**params, "p": "half"}))
    assert info.value.parameter == "p" and "must be a number" in str(info.value), str(info.value)


def test_a_positional_spec_is_refused():
    with pytest.raises(trdata.ConfigError) as info:
        _sample(("random_invert", 0.5))
    assert info.value.parameter == "transforms", str(info.value)


#: The batch ops (trdata.batch_ops) follow the same contract through their own binding (src/py/batch.rs).
BATCH_OPS = [
    trdata.MixUp(),
    trdata.CutMix(num_classes=4),
    trdata.BatchRandomErasing(value="random"),
    trdata.BatchRandomChoice([trdata.MixUp(), trdata.CutMix()], p=[1, 3]),
    trdata.DetectionMixUp(),
]


def _draw(spec: Any) -> list[float]:
    return _core.batch_op_draw(spec, seed=1, epoch=0, batch=0, position=0, rows=4, height=8, width=8)


def test_every_batch_op_class_is_covered():
    classes = {
        c
        for c in vars(trdata.batch_ops).values()
        if inspect.isclass(c) and issubclass(c, trdata.batch_ops.BatchOp)
    }
    assert {type(op) for op in BATCH_OPS} == classes - {trdata.batch_ops.BatchOp}


@pytest.mark.parametrize("op", BATCH_OPS, ids=_id)
def test_batch_op_parameters_go_by_name(op):
    kind, params = op._spec()
    assert isinstance(params, dict)
    _draw((kind, params))
    for key in params:
        renamed = {(k + "_renamed" if k == key else k): v for k, v in params.items()}
        with pytest.raises(trdata.ConfigError) as info:
            _draw((kind, renamed))
        assert info.value.parameter == key and f"{key}_renamed" in str(info.value), str(info.value)
    with pytest.raises(trdata.ConfigError) as info:
        _draw((kind, {**params, "not_a_parameter": 1}))
    assert info.value.parameter == "not_a_parameter", str(info.value)
