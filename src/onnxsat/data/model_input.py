"""The model input data is fed to, and data made or loaded to fit it: what every pass that measures a
model on data (sparsify's budget, quantize's calibration and budget) shares.

Data is fed to one input: the one that is neither a weight nor given by the user (``--inputs``, or rows
per sample in the data's ``.npz``) nor a state input (``--stateful``). Its declared dims decide how samples
are fitted and batched.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

import numpy as np
import onnx

from onnxsat.data.sources import Dataset, carried_rows, load_dataset
from onnxsat.errors import DataError, SettingsError
from onnxsat.inputs import (
    DEFAULT_DYNAMIC_DIM,
    InputsLike,
    InputSpec,
    element_dtype,
    fixed_dim,
    named_sizes,
    random_inputs,
)


def data_input(model: onnx.ModelProto, given: Collection[str] = ()) -> onnx.ValueInfoProto:
    """The one graph input that is neither an initializer nor ``given`` (by ``--inputs``, or a state
    input of ``--stateful``): what calibration samples are fed to."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers and v.name not in given]
    if not inputs:
        raise SettingsError(
            "data is fed to one input, and --inputs gives every input of this model: leave the one the data "
            "goes to out of FEEDS.npz"
        )
    if len(inputs) != 1:
        names = ", ".join(v.name for v in inputs)
        raise SettingsError(
            f"data is fed to one input, and this model has {len(inputs)} not given by --inputs ({names}); "
            "give the values of all but one with --inputs FEEDS.npz, and the data goes to that one"
        )
    return inputs[0]


def input_dims(
    model: onnx.ModelProto, given: Collection[str] = (), shapes: Mapping[str, Sequence[int]] | None = None
) -> list[int | None]:
    """The data input's dims, None where dynamic: what ``load_dataset`` fits samples to. ``shapes``
    (``--input-shape``) fixes the dynamic ones past the batch dim, so images are resized to the size asked
    for rather than kept at their own (which a detector with dynamic height and width may not accept)."""
    value = data_input(model, given)
    dims = [fixed_dim(d) for d in value.type.tensor_type.shape.dim]
    sized = (shapes or {}).get(value.name)
    if sized is not None and not value.type.tensor_type.HasField("shape"):  # no rank declared: the one asked for
        return [None, *sized[1:]]
    if sized is not None and len(sized) == len(dims):
        dims = [dims[0], *(dim if dim is not None else size for dim, size in zip(dims[1:], sized[1:], strict=True))]
    return dims


def batch_size_for(model: onnx.ModelProto, requested: int, given: Collection[str] = ()) -> int:
    """``requested``, or the model's batch size when its input fixes one (exports often fix it to 1)."""
    dims = input_dims(model, given)
    return (dims[0] if dims else None) or requested


def random_dataset(model: onnx.ModelProto, count: int, inputs: InputsLike = None, first_seed: int = 0) -> Dataset:
    """``count`` seeded standard-normal samples of the data input (``inputs.random_inputs``, one seed per
    call), unlabelled: what calibration and fidelity use when the user gives no data. A model whose
    batch dim is fixed gets whole batches (``count`` rounded down to a multiple of it, at least one)."""
    spec = InputSpec.of(inputs)
    name, dims = data_input(model, spec.given).name, input_dims(model, spec.given)
    sized = spec.shapes.get(name)
    rest = list(sized[1:]) if sized else [d if d is not None else DEFAULT_DYNAMIC_DIM for d in dims[1:]]
    per_call = (dims[0] if dims else None) or 1
    calls = max(1, count // per_call)
    chunks = [random_inputs(model, {name: [per_call, *rest]}, first_seed + index)[name] for index in range(calls)]
    dataset = Dataset(np.concatenate(chunks), None, f"random ({calls * per_call} seeded normal inputs)")
    return fitted_to_model(model, dataset, spec.given)


def defaulted_sizes(model: onnx.ModelProto, inputs: InputSpec, dataset: Dataset) -> str:
    """What to say when random samples of the data input ran with its dynamic dims past the batch at 1 (a
    sequence of one token, an image one pixel wide), or nothing: ranges calibrated and drops measured on such
    inputs can miss real ones' by far (a char-LSTM's logits reach +-8 on text, +-4 on one random token; its
    next-character accuracy fell from 89% to 72%)."""
    name = data_input(model, inputs.given).name
    if name in inputs.shapes:
        return ""
    dims = input_dims(model, inputs.given)[1:]
    if not any(d is None for d in dims):
        return ""
    shape = ", ".join(str(d) for d in dataset.inputs.shape[1:])
    return (
        f"{name} ran at [{shape}] per sample (its dynamic sizes at 1), whose ranges can miss real inputs' by far: "
        "give --input-shape with real sizes at least"
    )


def evaluation_data(
    model: onnx.ModelProto,
    spec: str | None,
    inputs: InputSpec,
    *,
    limit: int | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    fidelity: bool = False,
    random_count: int = 32,
    held_out: bool = False,
) -> Dataset | None:
    """``--data`` loaded and fitted to the data input (None without it); ``random``: ``random_count`` (or
    ``limit``) seeded normal samples; ``fidelity`` drops the labels (agreement with the original);
    ``held_out``: data loaded beside ``--data`` (``--eval-data``), see :func:`fitted_to_model`."""
    if spec is None:
        return None
    if spec == "random":
        return random_dataset(model, limit or random_count, inputs)
    dims = input_dims(model, inputs.given, inputs.shapes)
    dataset = load_dataset(spec, dims, limit=limit, mean=mean, std=std, labels=not fidelity, carried=inputs.from_data)
    if fidelity:
        dataset = replace(dataset, labels=None, name=f"{dataset.name} (fidelity)")
    return fitted_to_model(model, dataset, inputs.given, held_out=held_out, from_data=inputs.from_data)


def first_sample_inputs(
    model: onnx.ModelProto,
    spec: str | None,
    inputs: InputSpec,
    *,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> InputSpec:
    """``inputs`` with the data input fed the first sample of ``--data`` (the model's batch of them when it
    fixes one), and the rows the data's ``.npz`` carries for other inputs: what a latency comparison times,
    at the sizes the model sees (a tagger's 16 tokens, not its dynamic dims set to 1). ``inputs`` as they
    are without data, with ``random``, or with streams."""
    if spec is None or spec == "random":
        return inputs
    inputs = with_data_rows(inputs, spec, model)
    dims = input_dims(model, inputs.given, inputs.shapes)
    dataset = evaluation_data(model, spec, inputs, limit=dims[0] if dims and dims[0] else 1, mean=mean, std=std)
    if dataset is None or dataset.streams or not len(dataset):
        return inputs
    samples, rows = dataset.first(dims[0] if dims and dims[0] else 1)
    name = data_input(model, inputs.given).name
    return replace(inputs, given={**inputs.given, **rows, name: samples})


def with_data_rows(inputs: InputSpec, spec: str | None, model: onnx.ModelProto) -> InputSpec:
    """``inputs`` with each input of ``model`` the ``--data`` .npz feeds per sample (``companion:NAME``, or
    arrays named after its inputs, see ``carried_rows``) and ``--inputs`` does not give held at its first row
    (``InputSpec.from_data``): the data input is then the one left, as when ``--inputs`` gives the others."""
    initializers = {t.name for t in model.graph.initializer}
    fed = [v.name for v in model.graph.input if v.name not in initializers and v.name not in inputs.given]
    rows = {name: values for name, values in carried_rows(spec, fed).items() if name not in inputs.given}
    if not rows or any(len(values) == 0 for values in rows.values()):
        return inputs  # no rows, or none to hold (loading the data says what is wrong with it)
    firsts = {name: np.asarray(values[:1]) for name, values in rows.items()}
    return replace(inputs, given={**inputs.given, **firsts}, from_data=inputs.from_data | set(rows))


def fitted_to_model(
    model: onnx.ModelProto,
    dataset: Dataset,
    given: Mapping[str, np.ndarray],
    *,
    held_out: bool = False,
    from_data: Collection[str] = (),
) -> Dataset:
    """``dataset`` as the model takes it: its samples in the data input's element type
    (:func:`in_input_type`), and the given inputs that share the data input's dynamic batch fed per
    sample (its ``companions``): a value of one row is repeated for every sample, one with a row per
    sample goes with its sample. Given inputs of a fixed batch, or of no batch axis, stay fed whole; so
    does everything when the data input's batch is fixed (each run is then one whole batch anyway).
    Streams are left to the caller, which knows the state inputs beside the data input. ``held_out`` data
    (loaded beside ``--data``) takes no rows per sample from ``--inputs`` nor the first of those ``--data``
    carries (``from_data``): they belong to ``--data``'s samples, and paired with other samples by position
    (or one for all) they would score each with another's mask; such data carries its own rows."""
    if dataset.streams:
        return dataset
    _refuse_non_finite(dataset)
    dataset = in_input_type(data_input(model, given), dataset)
    if not given:
        return dataset
    batch = _batch_dim(data_input(model, given))
    if batch is None or fixed_dim(batch) is not None:
        return dataset
    companions = dict(dataset.companions)
    for value in model.graph.input:
        first = _batch_dim(value)
        if value.name not in given or value.name in companions or first is None or fixed_dim(first) is not None:
            continue
        if batch.dim_param and first.dim_param and first.dim_param != batch.dim_param:
            continue  # another dynamic axis comes first (a cache's, a sequence's)
        array = np.asarray(given[value.name])
        if array.ndim == 0:
            continue
        if held_out and (len(array) > 1 or value.name in from_data):
            where = "--data carries" if value.name in from_data else "--inputs gives"
            raise DataError(
                f"{where} a row of {value.name!r} per sample of --data, which the held-out samples of "
                f"{dataset.name} do not share: save theirs as `companion:{value.name}` in its .npz, beside `inputs`"
            )
        if len(array) == 1:
            companions[value.name] = np.repeat(array, len(dataset), axis=0)
        elif len(array) == len(dataset):
            companions[value.name] = array
        else:
            raise DataError(
                f"--inputs {value.name!r} has {len(array)} rows for {len(dataset)} samples of data: "
                "give one row for all samples, or one per sample"
            )
    return replace(dataset, companions=companions) if companions else dataset


def _refuse_non_finite(dataset: Dataset) -> None:
    """NaN or infinite inputs are refused: least-squares reconstruction spreads one NaN pixel into every
    refitted weight (3 NaN pixels in 350 samples took a pruned ShuffleNet from 97% to 14%), calibration ranges
    and scores become NaN, and each command then blames something else."""
    inputs = dataset.inputs
    if inputs.dtype.kind != "f" or not inputs.size:
        return
    if not inputs.ndim:
        inputs = inputs.reshape(1)
    rows = inputs.reshape(len(inputs), -1)
    bad = sum(  # in chunks: a mask of a whole image set at once would be a quarter of its size again
        int(len(chunk) - np.count_nonzero(np.isfinite(chunk).all(axis=1)))
        for chunk in (rows[start : start + 256] for start in range(0, len(rows), 256))
    )
    if bad:
        raise DataError(
            f"{dataset.name}: {bad} of {len(inputs)} samples hold NaN or infinite values: clean or drop them"
        )


def _batch_dim(value: onnx.ValueInfoProto) -> onnx.TensorShapeProto.Dimension | None:
    tensor = value.type.tensor_type
    return tensor.shape.dim[0] if tensor.HasField("shape") and tensor.shape.dim else None


_PIXEL_MAX = 255


def in_input_type(value: onnx.ValueInfoProto, dataset: Dataset) -> Dataset:
    """``dataset``'s samples cast to ``value``'s element type, or one clear error where that would change
    them: float16 and float64 inputs take the samples as such, and integer inputs (uint8 pixels, token
    ids) take whole numbers in their range, or image pixels scaled back from [0, 1] to 0-255 (an export
    that does its own preprocessing). A float cast to an integer type unchecked would feed garbage that
    every accuracy figure then trusts."""
    want = element_dtype(value)
    inputs = dataset.inputs
    if inputs.dtype == want:
        return dataset
    where = f"{dataset.name}: input {value.name!r} takes {want}"
    if want.kind == "f":
        if inputs.dtype.kind not in "fiub":
            raise DataError(f"{where}, but the data holds {inputs.dtype} values")
        return replace(dataset, inputs=inputs.astype(want))
    if want.kind not in "iub":
        raise DataError(f"{where}; data can only be fed to number inputs")
    if inputs.dtype.kind == "f":
        if dataset.pixels:
            inputs = np.rint(np.clip(inputs, 0.0, 1.0) * _PIXEL_MAX)
        elif not np.all(np.isfinite(inputs)) or not np.array_equal(inputs, np.rint(inputs)):
            raise DataError(
                f"{where}, but the data holds fractional values: give whole numbers"
                + (" (or images without --mean/--std)" if want.kind == "u" else "")
            )
    low, high = (0, 1) if want.kind == "b" else (np.iinfo(want).min, np.iinfo(want).max)
    if inputs.size and (inputs.min() < low or inputs.max() > high):
        raise DataError(
            f"{where}, but the data holds values from {inputs.min()} to {inputs.max()} (outside {low}-{high})"
        )
    return replace(dataset, inputs=inputs.astype(want))


def sized_by_data(
    model: onnx.ModelProto, inputs: InputSpec, dataset: Dataset | None, state: Collection[str] = ()
) -> InputSpec:
    """``inputs`` with the data input's dynamic dims (past the batch) sized as the data's samples (a stream's
    steps, beside the ``state`` inputs), when the user gave no size for that input: the random inputs of the
    reference run, the verification and the timings then have the data's sizes. A Conv1d audio model of
    dynamic length ran its reference at [1, 1] beside 4,000-sample clips of data, and was refused for an
    input it never gets; so did a voice detector fed streams of 512-sample steps."""
    if dataset is None or not len(dataset.inputs):
        return inputs
    value = data_input(model, [*inputs.given, *state])
    dims = value.type.tensor_type.shape.dim if value.type.tensor_type.HasField("shape") else []
    sample = dataset.inputs.shape[2:] if dataset.streams else dataset.inputs.shape[1:]
    if value.name in inputs.shapes or len(dims) != len(sample) + 1:
        return inputs
    if all(fixed_dim(dim) is not None for dim in dims[1:]):
        return inputs
    batch = fixed_dim(dims[0]) or named_sizes(model, inputs).get(dims[0].dim_param) or 1  # rows given per sample
    shape = [batch, *(int(d) for d in sample)]
    return replace(inputs, shapes={**inputs.shapes, value.name: shape})
