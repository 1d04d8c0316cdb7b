"""What goes into a model when ONNXSat runs it: arrays the user gave, and seeded random data for the rest.

Verification, calibration, latency and shape resolution all feed a model. Some inputs cannot be random:
a sample-rate switch that must be 16000, a token id range, a mask. The user gives those as a ``.npz``
feeds file (``--inputs FEEDS.npz``: named arrays, used exactly as given) and sizes for the dynamic
dims of the others (``--input-shape NAME:D1,D2,...``). :class:`InputSpec` holds both; its
:meth:`~InputSpec.feeds` makes one complete set of inputs for a model.

A declared dimension is dynamic when it is a ``dim_param``, has no value, or has a negative value
(Paddle2ONNX writes ``-1``): see :func:`fixed_dim`. A declared ``0`` is made dynamic when the model is
loaded (``onnxsat.normal_form``), since ONNX Runtime would otherwise take it as a fixed size of zero.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Union

import numpy as np
import onnx

from onnxsat.errors import DataError, InvalidModelError, SettingsError

DEFAULT_DYNAMIC_DIM = 1
"""Symbolic or unknown dimensions take this size unless ``--input-shape`` says otherwise."""

MAX_INPUT_ELEMENTS = 2**26
"""ONNXSat refuses to invent more random input elements than this (256 MiB of float32) in total: a
declared shape that large is a typo or a damaged file, and verifying it (inputs, two runs' outputs,
float64 comparisons) would end in an out-of-memory kill rather than a message. ``--input-shape``
gives smaller sizes for dynamic dims."""


def fixed_dim(dim: onnx.TensorShapeProto.Dimension) -> int | None:
    """A declared dimension's size, or None when it is dynamic: a ``dim_param``, no value, or a negative
    value (exporters such as Paddle2ONNX write -1, and ONNX Runtime takes any size for it)."""
    return dim.dim_value if dim.HasField("dim_value") and dim.dim_value >= 0 else None


def declared_dims(value: onnx.ValueInfoProto) -> list[onnx.TensorShapeProto.Dimension] | None:
    """A tensor value's declared dimensions, or None when not even its rank is declared."""
    tensor_type = value.type.tensor_type
    return list(tensor_type.shape.dim) if tensor_type.HasField("shape") else None


def spelled(declared: Sequence[onnx.TensorShapeProto.Dimension]) -> str:
    """``[N,3,?,?]``: fixed sizes, symbolic names, ``?`` for other dynamic dims."""
    return "[" + ",".join(str(d.dim_value) if fixed_dim(d) is not None else d.dim_param or "?" for d in declared) + "]"


def parse_input_shapes(specs: Sequence[str]) -> dict[str, list[int]]:
    """``["x:1,3,224,224", ...]`` -> ``{"x": [1, 3, 224, 224]}``."""
    shapes: dict[str, list[int]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition(":")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.split(",") if d.strip()]
            if any(d < 0 for d in shapes[name]):
                raise ValueError
        except ValueError:
            raise SettingsError(f"--input-shape expects NAME:D1,D2,... with sizes >= 0 (got {spec!r})") from None
    return shapes


def load_feeds(path: str | Path) -> dict[str, np.ndarray]:
    """The named arrays of a ``.npz`` feeds file; a DataError (one line) when it cannot be one."""
    source = Path(path)
    if not source.is_file():
        what = "not a regular file (a pipe, a device or a folder)" if source.exists() else "no such file"
        raise DataError(f"--inputs {source}: {what}")
    try:
        archive = np.load(source, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        # numpy reads any other file as a pickle it will not load; its advice to allow pickles is not ours
        text = "not numpy's format" if "pickle" in str(error) else " ".join(str(error).split())[:200]
        raise DataError(
            f"--inputs {source} is not a readable .npz file of named arrays (numpy.savez writes one): {text}"
        ) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise DataError(f"--inputs {source}: a .npz file of named arrays is needed, not one .npy array")
    try:
        with archive:
            feeds = {name: np.asarray(archive[name]) for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        text = " ".join(str(error).split())[:200]
        raise DataError(f"--inputs {source}: an array cannot be read: {text}") from None
    if not feeds:
        raise DataError(f"--inputs {source} holds no arrays")
    return feeds


@dataclass(frozen=True)
class InputSpec:
    """The inputs a user fixed: ``given`` arrays used as they are, ``shapes`` for random ones' dynamic dims.

    ``source`` names where ``given`` came from (the feeds file), for messages and reports. ``from_data``
    names the inputs whose ``given`` value is the first of the rows the data carries per sample: runs of
    one sample take it, runs over that data each sample's own, and other data must carry its own.
    """

    shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)
    given: Mapping[str, np.ndarray] = field(default_factory=dict)
    source: str | None = None
    from_data: frozenset[str] = frozenset()

    @classmethod
    def of(cls, value: InputsLike) -> InputSpec:
        """``value`` as a spec: a spec as it is, a mapping of names to sizes as ``shapes``, None as empty."""
        if isinstance(value, InputSpec):
            return value
        return cls(shapes={name: [int(d) for d in dims] for name, dims in (value or {}).items()})

    @classmethod
    def from_options(cls, input_shape: Sequence[str] = (), inputs: str | Path | None = None) -> InputSpec:
        """The spec the command-line options ``--input-shape`` (specs) and ``--inputs`` (a file) describe."""
        shapes = parse_input_shapes(input_shape)
        given = load_feeds(inputs) if inputs is not None else {}
        for name in sorted(set(shapes) & set(given)):
            if list(given[name].shape) != shapes[name]:
                raise SettingsError(
                    f"input {name!r} has shape {list(given[name].shape)} in --inputs and {shapes[name]} "
                    "in --input-shape; give one"
                )
            del shapes[name]  # the same size twice: the array is what counts
        return cls(shapes, given, str(inputs) if inputs is not None else None)

    def __bool__(self) -> bool:
        return bool(self.shapes or self.given)

    def dims(self) -> dict[str, list[int]]:
        """Every input size the user fixed, from ``--input-shape`` and from the given arrays' shapes, for
        shape inference."""
        return {**{n: list(d) for n, d in self.shapes.items()}, **{n: list(a.shape) for n, a in self.given.items()}}

    def check(self, model: onnx.ModelProto) -> None:
        """Refuse, before any work, given arrays and shapes the model does not take: unknown names, another
        element type, another rank, a size that contradicts a fixed dim. The message names the input
        and what the model declares."""
        declared = {value.name: value for value in model.graph.input}
        where = f"--inputs {self.source}" if self.source else "the given inputs"
        for name, array in self.given.items():
            value = declared.get(name)
            if value is None:
                raise DataError(f"{where}: the model has no input {name!r} (inputs: {_names(model)})")
            _check_given(where, value, array)
        unknown = sorted(set(self.shapes) - set(declared))
        if unknown:
            names = f"{', '.join(unknown)} (inputs: {_names(model)})"
            raise SettingsError(f"--input-shape names inputs the model does not have: {names}")

    def feeds(self, model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
        """One run's inputs for ``model``: the given arrays, and seeded random data of the declared type
        for every other graph input that is not an initializer (dynamic dims from ``shapes`` or 1)."""
        self.check(model)
        return random_inputs(model, self, seed)

    def guessed(self, model: onnx.ModelProto) -> list[str]:
        """The random inputs whose dynamic dims no size was given for (they run at 1)."""
        return list(self.unsized(model))

    def with_guessed_at(
        self,
        model: onnx.ModelProto,
        size: int,
        implied: Mapping[tuple[str, int], int] | None = None,
        batch: int = 1,
    ) -> InputSpec:
        """This spec with sizes for the inputs :meth:`guessed` names: each such dim at ``size``, except a
        batch (the first axis of an input of rank 2 or more, and every dim named like one), which is at
        ``batch``, and the axes ``implied`` sizes (``(input, axis)``: what the weights imply, see
        ``implied_sizes``). A convolution net's feature maps, halved five times, are 1 x 1 from a 1 x 1 image
        and its upsampling path no longer meets its skip connections; at 64 they are 2 x 2."""
        implied = implied or {}
        named = dict(named_sizes(model, self))
        guessed = set(self.guessed(model))
        values = [value for value in model.graph.input if value.name in guessed]
        batches = {dims[0].dim_param for value in values if len(dims := declared_dims(value) or []) >= 2}
        for value in values:
            for axis, dim in enumerate(declared_dims(value) or []):
                name = dim.dim_param
                if name and fixed_dim(dim) is None and name not in named and not set("+*") & set(name):
                    named[name] = implied.get((value.name, axis), batch if name in batches else size)
        shapes = dict(self.shapes)
        for value in values:
            dims = declared_dims(value) or []
            shapes[value.name] = [
                dim.dim_value
                if fixed_dim(dim) is not None
                else implied[(value.name, axis)]
                if (value.name, axis) in implied
                else dynamic_size(dim, named)
                if dim.dim_param
                else (batch if axis == 0 and len(dims) >= 2 else size)
                for axis, dim in enumerate(dims)
            ]
        return replace(self, shapes=shapes)

    def unsized(self, model: onnx.ModelProto) -> dict[str, list[int]]:
        """The axes random inputs declare dynamic with no size given, by input name (only inputs with some)."""
        initializers = {t.name for t in model.graph.initializer}
        named = named_sizes(model, self)
        axes = {
            value.name: [
                axis
                for axis, dim in enumerate(declared_dims(value) or [])
                if fixed_dim(dim) is None and dim.dim_param not in named
            ]
            for value in model.graph.input
            if value.name not in initializers and value.name not in self.given and value.name not in self.shapes
        }
        return {name: found for name, found in axes.items() if found}

    def described(self, model: onnx.ModelProto) -> dict[str, list[str]]:
        """Which of the model's inputs were given and which were made random, for reports."""
        initializers = {t.name for t in model.graph.initializer}
        names = [v.name for v in model.graph.input if v.name not in initializers or v.name in self.given]
        return {
            "given": [n for n in names if n in self.given],
            "random": [n for n in names if n not in self.given],
        }


InputsLike = Union[InputSpec, Mapping[str, Sequence[int]], None]  # noqa: UP007  (a runtime alias)
"""What functions that feed a model accept: a spec, or (as before specs) a mapping of names to sizes."""


def _names(model: onnx.ModelProto) -> str:
    initializers = {t.name for t in model.graph.initializer}
    return ", ".join(v.name for v in model.graph.input if v.name not in initializers) or "none"


def element_dtype(value: onnx.ValueInfoProto) -> np.dtype:
    """The numpy dtype of a tensor input's declared element type; an unknown one is an invalid model."""
    elem_type = value.type.tensor_type.elem_type
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        raise InvalidModelError(f"input {value.name!r} has an unknown element type {elem_type}") from None


def _check_given(where: str, value: onnx.ValueInfoProto, array: np.ndarray) -> None:
    name = value.name
    if not value.type.HasField("tensor_type"):
        raise DataError(f"{where}: input {name!r} is not a tensor input; ONNXSat can only feed tensors")
    want = element_dtype(value)
    if array.dtype != want and not (want.kind in "OUS" and array.dtype.kind in "OUS"):
        raise DataError(f"{where}: input {name!r} is {array.dtype}; the model declares {want}")
    declared = declared_dims(value)
    if declared is None:
        return
    fits = len(declared) == array.ndim and all(
        fixed_dim(d) is None or d.dim_value == size for d, size in zip(declared, array.shape, strict=True)
    )
    if not fits:
        raise DataError(
            f"{where}: input {name!r} has shape {list(array.shape)}; the model declares {spelled(declared)}"
        )


def random_inputs(model: onnx.ModelProto, inputs: InputsLike = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for every graph input that is not an initializer: the given arrays of ``inputs`` as they are,
    seeded random data of the declared dtype and shape for the others."""
    spec = InputSpec.of(inputs)
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    unknown = set(spec.shapes) - {v.name for v in model.graph.input}
    if unknown:
        raise SettingsError(f"--input-shape names inputs the model does not have: {', '.join(sorted(unknown))}")
    named = named_sizes(model, spec)
    feeds = {}
    elements = 0
    for value in model.graph.input:
        if value.name in spec.given:
            feeds[value.name] = spec.given[value.name]
            continue
        if value.name in initializers:
            continue
        if not value.type.HasField("tensor_type"):
            raise SettingsError(f"input {value.name!r} is not a tensor; ONNXSat cannot make data for it")
        declared = declared_dims(value)
        if value.name in spec.shapes:
            shape = list(spec.shapes[value.name])
            check_declared_shape(value.name, shape, declared)
        elif declared is None:
            raise SettingsError(
                f"input {value.name!r} declares no shape, not even its rank: give its sizes with "
                f"--input-shape {value.name}:D1,D2,..."
            )
        else:
            shape = [dynamic_size(d, named) if fixed_dim(d) is None else d.dim_value for d in declared]
        elements += int(np.prod(shape, dtype=object))
        if elements > MAX_INPUT_ELEMENTS:
            raise SettingsError(
                f"input {value.name!r} has shape {shape}: verification would need more than "
                f"{MAX_INPUT_ELEMENTS:,} input elements; give a smaller --input-shape"
            )
        feeds[value.name] = random_array(rng, element_dtype(value), shape)
    return feeds


def named_sizes(model: onnx.ModelProto, spec: InputSpec) -> dict[str, int]:
    """Sizes of symbolic dims (``batch``, ``seq``) that a given array or ``--input-shape`` fixes: another input
    declaring the same name must take the same size (an image beside 64 given class ids is 64 images, not
    one: a float model broadcasts one against 64, its quantized form does not)."""
    sizes: dict[str, int] = {}
    torn: set[str] = set()
    for value in model.graph.input:
        shape = spec.given[value.name].shape if value.name in spec.given else spec.shapes.get(value.name)
        declared = declared_dims(value)
        if shape is None or declared is None or len(declared) != len(shape):
            continue
        for dim, size in zip(declared, shape, strict=True):
            named = dim.dim_param and fixed_dim(dim) is None
            if named and sizes.setdefault(dim.dim_param, int(size)) != int(size):
                torn.add(dim.dim_param)
    # Two given arrays that disagree on a name (optimum's merged decoder declares its attention mask with the
    # sequence length although it spans the past too) say nothing reliable about it: the default is used.
    return {name: size for name, size in sizes.items() if name not in torn}


def dynamic_size(dim: onnx.TensorShapeProto.Dimension, named: Mapping[str, int]) -> int:
    """A dynamic dim's size: the one given for its name, else, for a sum or product of names and numbers
    (``past_sequence_length + sequence_length``, as optimum declares attention masks), that expression of
    theirs, else ``DEFAULT_DYNAMIC_DIM``."""
    if not dim.dim_param:
        return DEFAULT_DYNAMIC_DIM
    if dim.dim_param in named:
        return named[dim.dim_param]
    value = dim_expression(dim.dim_param, named)
    return value if value is not None and value > 0 else DEFAULT_DYNAMIC_DIM


def dim_expression(text: str, named: Mapping[str, int], unnamed: int | None = DEFAULT_DYNAMIC_DIM) -> int | None:
    """``a + b * 2`` with each name's size (``unnamed`` when not given; None there: the expression is unknown);
    None when ``text`` is no sum of products of names and whole numbers."""
    if "+" not in text and "*" not in text:
        return None
    total = 0
    for term in text.split("+"):
        product = 1
        for factor in term.split("*"):
            factor = factor.strip()
            if factor.isdigit():
                product *= int(factor)
            elif factor.isidentifier() and (factor in named or unnamed is not None):
                product *= named.get(factor, unnamed)  # type: ignore[operator]
            else:
                return None
        total += product
    return total


def check_declared_shape(name: str, shape: list[int], declared: list[onnx.TensorShapeProto.Dimension] | None) -> None:
    """A user-given shape must have the declared rank and agree with every fixed dimension."""
    if declared is None:
        return
    fixed = [fixed_dim(d) for d in declared]
    if len(shape) != len(fixed) or any(f is not None and f != s for f, s in zip(fixed, shape, strict=True)):
        raise SettingsError(
            f"--input-shape {name}:{','.join(map(str, shape))} does not fit the declared shape {spelled(declared)}"
        )


def random_array(rng: np.random.Generator, dtype: np.dtype, shape: list[int]) -> np.ndarray:
    """Random data of ``dtype`` and ``shape``, always an ndarray (ORT refuses numpy scalars for 0-D inputs)."""
    return np.asarray(_random_values(rng, dtype, shape), dtype=dtype)


def _random_values(rng: np.random.Generator, dtype: np.dtype, shape: list[int]) -> np.ndarray:
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape, dtype=np.float32).astype(dtype)  # no float64 copy of a large input
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        # Small non-negative values: safe as indices, counts and axes for most models.
        return rng.integers(0, 2, size=shape).astype(dtype)
    if dtype.kind in ("U", "S", "O"):
        return np.full(shape, "a", dtype=object)
    return rng.standard_normal(shape).astype(dtype)
