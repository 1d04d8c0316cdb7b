"""The model input data is fed to, and data made or loaded to fit it: what every pass that measures a
model on data (sparsify's budget, quantize's calibration and budget) shares.

Data is fed to one input: the one that is neither a weight nor given by the user (``--inputs``) nor a
state input (``--stateful``). Its declared dims decide how samples are fitted and batched.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import onnx

from onnxsat.data.sources import Dataset, load_dataset
from onnxsat.errors import SettingsError
from onnxsat.inputs import DEFAULT_DYNAMIC_DIM, InputsLike, InputSpec, fixed_dim, random_inputs


def data_input(model: onnx.ModelProto, given: Collection[str] = ()) -> onnx.ValueInfoProto:
    """The one graph input that is neither an initializer nor ``given`` (by ``--inputs``, or a state
    input of ``--stateful``): what calibration samples are fed to."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers and v.name not in given]
    if len(inputs) != 1:
        names = ", ".join(v.name for v in inputs)
        raise SettingsError(
            f"data is fed to one input, and this model has {len(inputs)} not given by --inputs ({names}); "
            "give the others' values with --inputs FEEDS.npz"
        )
    return inputs[0]


def input_dims(model: onnx.ModelProto, given: Collection[str] = ()) -> list[int | None]:
    """The data input's dims, None where dynamic: what ``load_dataset`` fits samples to."""
    return [fixed_dim(d) for d in data_input(model, given).type.tensor_type.shape.dim]


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
    return Dataset(np.concatenate(chunks), None, f"random ({calls * per_call} seeded normal inputs)")


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
) -> Dataset | None:
    """``--data`` loaded and fitted to the data input (None without it); ``random``: ``random_count`` (or
    ``limit``) seeded normal samples; ``fidelity`` drops the labels (agreement with the original)."""
    if spec is None:
        return None
    if spec == "random":
        return random_dataset(model, limit or random_count, inputs)
    dataset = load_dataset(spec, input_dims(model, inputs.given), limit=limit, mean=mean, std=std)
    return Dataset(dataset.inputs, None, f"{dataset.name} (fidelity)") if fidelity else dataset
