"""A user's own metric: ``--metric package.module:function`` or a callable from the Python API.

The function is called as ``function(reference, candidate, labels)`` for each scored output, with the
original's and the candidate's outputs as numpy arrays ``[N, ...]`` (samples first) and the data's
labels (int64 classes ``[N]``, float64 regression targets ``[N, ...]``) or None, and returns a score in
[0, 1] where higher is better; the budget is a drop from the original's own score
(``function(reference, reference, labels)``). A module in the current folder is found as Python would
find it there.

It may instead return one score per sample (``[N]`` values in [0, 1]): the score is their mean, and the
budget pairs them with the original's to bound the drop's sampling error, as for the built-in per-sample
metrics. A single score has no such error: the drop is held as it is, on the search data and held out.
"""

from __future__ import annotations

import importlib
import numbers
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from onnxsat.errors import DataError, SettingsError
from onnxsat.metrics.base import Labels, Measure, Metric

UserFunction = Callable[[np.ndarray, np.ndarray, Labels], float | np.ndarray]


def is_user_spec(spec: object) -> bool:
    return callable(spec) or (isinstance(spec, str) and ":" in spec)


def user_metric(spec: str | UserFunction) -> Metric:
    """The metric ``spec`` names; one SettingsError line when it cannot be imported or is not callable."""
    function, name = (spec, _callable_name(spec)) if callable(spec) else (_import(spec), spec)

    def measure(reference: np.ndarray, candidate: np.ndarray, labels: Labels) -> Measure:
        try:
            value = function(reference, candidate, labels)
        except Exception as error:  # the user's code may raise anything: one line naming it
            raise DataError(f"metric {name} failed: {type(error).__name__}: {error}") from None
        if isinstance(value, np.ndarray) and value.ndim == 1 and len(value) == len(reference) > 1:
            per_sample = value.astype(np.float64)
            if not np.all((per_sample >= 0.0) & (per_sample <= 1.0)):  # also refuses NaN
                raise DataError(f"metric {name} returned per-sample scores outside [0, 1]")
            return Measure(float(per_sample.mean()), per_sample=per_sample)
        return Measure(_score(value, name))

    return Metric(
        name, f"the user's metric {name}", measure, lambda reference, axis: None, uses_labels=True, uses_targets=True
    )


def _score(value: object, name: str) -> float:
    """``value`` as a float in [0, 1]; anything else is the metric's fault, said in one line."""
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise DataError(f"metric {name} returned {type(value).__name__} {value!r:.60}, not a score in [0, 1]")
    score = float(value)
    if not 0.0 <= score <= 1.0:  # also refuses NaN
        raise DataError(f"metric {name} returned {score!r}, not a score in [0, 1]")
    return score


def _import(spec: str) -> UserFunction:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SettingsError(f"--metric {spec!r}: a metric of your own is written package.module:function")
    try:
        module = _import_module(module_name)
    except Exception as error:  # ImportError, or whatever the module raises while it runs
        raise SettingsError(f"--metric {spec}: cannot import {module_name}: {type(error).__name__}: {error}") from None
    function = module
    for part in attribute.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise SettingsError(f"--metric {spec}: {module_name} has no {attribute}")
    if not callable(function):
        raise SettingsError(f"--metric {spec}: {attribute} is a {type(function).__name__}, not a function")
    return function  # type: ignore[return-value]


def _import_module(name: str) -> object:
    """``import name``, also from the current folder (the ``onnxsat`` command does not search it)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        here = str(Path.cwd())
        if error.name != name.split(".")[0] or here in sys.path:
            raise
        sys.path.insert(0, here)
        try:
            return importlib.import_module(name)
        finally:
            sys.path.remove(here)


def _callable_name(function: object) -> str:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None) or type(function).__name__
    return f"{module}:{name}" if module else name
