"""Running a model over a dataset and gathering every output per sample, wherever its batch axis is.

What a metric compares is each sample's output, so outputs are gathered samples first (``[N, ...]``)
whatever the model does: a CTC recognizer exports ``[T, N, classes]``, a recurrent state ``[2, N, H]``.
The batch axis of each output is found once, by feeding one sample and then two when the batch is
dynamic (the axis that grew), or from the declared dims and sizes when it is fixed. Models whose batch
is fixed are fed batches of exactly that size (a fixed 1: sample by sample); dynamic ones in batches,
no larger than ``memory.BATCH_MEMORY_MIB`` allows by what the second sample added to memory; the results
are the same either way. An output with no batch axis at all is gathered sample by sample.

Models that keep state (streaming speech, VAD) are fed streams step by step, the state outputs fed
back to the state inputs (``--stateful IN=OUT``), starting from zeros; every step is one sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnxruntime as ort

from onnxsat.data.sources import Dataset
from onnxsat.errors import DataError, RuntimeUnsupportedError, SettingsError
from onnxsat.memory import memory_sized_batch, resident_mib
from onnxsat.output_values import as_array
from onnxsat.verification import tidy_ort_message

ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int16)": np.int16,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def parse_stateful(specs: Sequence[str] | Mapping[str, str] | None) -> dict[str, str]:
    """``["state=stateN", ...]`` -> ``{"state": "stateN"}``; a malformed pairing is one line."""
    if not specs:
        return {}
    if isinstance(specs, Mapping):
        return dict(specs)
    pairs: dict[str, str] = {}
    for spec in specs:
        name, sep, output = spec.partition("=")
        if not sep or not name or not output:
            raise SettingsError(
                f"--stateful {spec!r}: write INPUT=OUTPUT (the state input and the output fed back to it)"
            )
        pairs[name] = output
    return pairs


def first_feeds(
    dataset: Dataset,
    input_name: str,
    given: Mapping[str, np.ndarray],
    fixed_batch: int | None,
    dtype: type,
    count: int,
) -> dict[str, np.ndarray]:
    """The first ``count`` samples of ``dataset`` (exactly the model's batch when it fixes one), their
    companions' rows and the given inputs, as one run's feeds (a check on real samples, not random ones)."""
    samples, companions = dataset.first(fixed_batch or min(count, len(dataset.inputs)))
    return {**given, **companions, input_name: samples.astype(dtype, copy=False)}


class OutputRunner:
    """Runs one ONNX Runtime session over one dataset; :meth:`run` returns every output ``[N, ...]``."""

    def __init__(
        self,
        session: ort.InferenceSession,
        input_name: str,
        dataset: Dataset,
        *,
        batch_size: int = 64,
        given: Mapping[str, np.ndarray] | None = None,
        state: Mapping[str, str] | None = None,
        scored: Sequence[str] = (),
    ) -> None:
        """``scored``: the only outputs to gather (and the fed-back state), when the user named them: another
        output may be one no metric can read (NonMaxSuppression's boxes, a different count per sample)."""
        self.session, self.input_name, self.dataset = session, input_name, dataset
        self.given = dict(given or {})
        self.state = dict(state or {})
        inputs = {i.name: i for i in session.get_inputs()}
        self.outputs = [o.name for o in session.get_outputs()]
        unknown = [name for name in scored if name not in self.outputs]
        if unknown:
            raise SettingsError(
                f"--metric-output {unknown[0]!r}: the model has no such output (it has: {', '.join(self.outputs)})"
            )
        check_state(self.state, list(inputs), self.outputs, input_name)
        self._hint = "" if scored or len(self.outputs) < 2 else "; name the outputs to score with --metric-output"
        self._named = bool(scored)
        self._empty: set[str] = set()
        self._squeezed: set[str] = set()
        """Outputs whose batch axis the model drops for a batch of one (``torch.squeeze``: a score ``[]`` for one
        sample, ``[2]`` for two); put back for runs of one."""
        self.empty: list[str] = []
        """Outputs the first runs gave no element, left out of the scores (unless named to be scored)."""
        if scored:
            self.outputs = [name for name in self.outputs if name in scored or name in self.state.values()]
        self._declared = {o.name: list(o.shape) for o in session.get_outputs()}
        if dataset.streams and not self.state:
            raise SettingsError("the data holds streams: say which state is fed back with --stateful INPUT=OUTPUT")
        model_input = inputs[input_name]
        self.dtype = ORT_DTYPES.get(model_input.type)
        if self.dtype is None:
            raise DataError(f"the model's input {input_name!r} is a {model_input.type}: data cannot be fed to it")
        first = model_input.shape[0] if model_input.shape else None
        self.fixed_batch = first if isinstance(first, int) and first > 0 else None
        self.batch_name = first if isinstance(first, str) else None
        self._state_inputs = {name: inputs[name] for name in self.state}
        self.batch_size = self.fixed_batch or batch_size
        self.batch_axes: dict[str, int | None] | None = None
        self._side_by_side: bool | None = None
        """Streams: whether they run as one batch (found on the first run)."""

    def run(self, feeds: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Every output over the whole dataset, samples (or stream steps) first, with ``feeds`` (weights
        fed as inputs) beside the data and the user's given inputs."""
        try:
            return self._gathered({**self.given, **(feeds or {})})
        except DataError as error:
            raise DataError(f"{error}{self._hint}") from None

    def _gathered(self, fixed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.dataset.streams:
            return self._streams(fixed)
        first = self.batch_axes is None
        if self.batch_axes is None:
            self.batch_axes = self._find_batch_axes(fixed)
            if not self._named and self.fixed_batch is None:  # an output with no element has nothing to score (a
                self.empty = [name for name in self.outputs if name in self._empty]  # merged decoder's unused
                self.outputs = [name for name in self.outputs if name not in self._empty]  # cache): left out, said
        step = self.batch_size if all(axis is not None for axis in self.batch_axes.values()) else 1
        runs: dict[str, list[np.ndarray]] = {name: [] for name in self.outputs}
        counts = []
        for inputs, companions, _ in self.dataset.feed_batches(step):
            count = len(inputs)
            if self.fixed_batch is not None and count < self.fixed_batch:  # pad; the padding's rows are dropped
                inputs = np.concatenate([inputs, np.zeros((self.fixed_batch - count, *inputs.shape[1:]), inputs.dtype)])
            results = self._run({**fixed, **companions, self.input_name: inputs.astype(self.dtype, copy=False)})
            counts.append(count)
            for name, value in zip(self.outputs, results, strict=True):
                runs[name].append(np.asarray(value))
        if first and self.fixed_batch is not None:
            self._settle(runs)
        return {
            name: _joined(
                [
                    _samples_first(v, self.batch_axes[name], n, name, name in self._squeezed)
                    for v, n in zip(runs[name], counts, strict=True)
                ],
                name,
            )
            for name in self.outputs
        }

    def _settle(self, runs: Mapping[str, list[np.ndarray]]) -> None:
        """A fixed batch's axes are guessed from one run, where a size the model computes from its data (a
        detector's one box for its first image, or none) passes for the batch or for an empty output: on the
        first pass over the data, an axis not of the batch's size in every run of a batch of 1 is none, and an
        output is left out as empty only when every run gave it no element."""
        assert self.batch_axes is not None
        for name, parts in runs.items():
            axis = self.batch_axes[name]
            if axis is not None and self.fixed_batch == 1 and any(p.ndim <= axis or p.shape[axis] != 1 for p in parts):
                self.batch_axes[name] = None
        if not self._named:
            self.empty = [name for name in self.outputs if name in self._empty and all(not p.size for p in runs[name])]
            self.outputs = [name for name in self.outputs if name not in self.empty]

    def _find_batch_axes(self, fixed: Mapping[str, np.ndarray]) -> dict[str, int | None]:
        """Per output, the axis that holds the samples (None: the output has none)."""
        data = self.dataset.inputs
        if self.fixed_batch is None and len(data) >= 2:
            rows = self.dataset.rows
            try:
                one = self._run({**fixed, **rows(0, 1), self.input_name: data[:1].astype(self.dtype, copy=False)})
            except RuntimeUnsupportedError as error:
                self._refuse_rows_that_are_no_samples(fixed, error)
                raise
            before = resident_mib()
            try:
                two = self._run({**fixed, **rows(0, 2), self.input_name: data[:2].astype(self.dtype, copy=False)})
            except RuntimeUnsupportedError:
                return self._one_at_a_time(one)
            self.batch_size = memory_sized_batch(self.batch_size, resident_mib() - before)
            axes: dict[str, int | None] = {}
            for name, a, b in zip(self.outputs, one, two, strict=True):
                if a.size == 0 and b.size == 0 and name not in self.state.values():
                    self._empty.add(name)
                    axes[name] = None
                    continue
                squeezed = _squeezed_axis(a.shape, b.shape)
                if squeezed is not None:
                    self._squeezed.add(name)
                    axes[name] = squeezed
                    continue
                grown = [i for i, (x, y) in enumerate(zip(a.shape, b.shape, strict=False)) if (x, y) == (1, 2)]
                if (
                    a.ndim != b.ndim
                    or len(grown) > 1
                    or any(x != y for i, (x, y) in enumerate(zip(a.shape, b.shape, strict=False)) if i not in grown)
                ):
                    raise DataError(
                        f"output {name!r} has shape {list(a.shape)} for one sample and {list(b.shape)} for two: "
                        "no single batch axis to split it into samples"
                    )
                axes[name] = grown[0] if grown else None
            return axes
        probe = self._run({**fixed, **self.dataset.rows(0, 1), self.input_name: self._first_batch()})
        return self._probed_axes(probe)

    def _probed_axes(self, probe: Sequence[np.ndarray]) -> dict[str, int | None]:
        """The batch axes guessed from one run of the model's own batch (or of one sample), and the outputs it
        gave no element noted as empty."""
        state = set(self.state.values())
        self._empty |= {n for n, v in zip(self.outputs, probe, strict=True) if v.size == 0 and n not in state}
        size = self.fixed_batch or 1
        return {
            name: self._guess_axis(name, value.shape, size) for name, value in zip(self.outputs, probe, strict=True)
        }

    def _one_at_a_time(self, one: Sequence[np.ndarray]) -> dict[str, int | None]:
        """One sample runs and two do not, though the batch is declared dynamic: something given fixes it at
        one (AECMOS's GRU state ``h0`` ``[4, 1, 64]``, given by ``--inputs``). The samples run one at a time,
        as for a model whose batch is fixed to 1."""
        self.fixed_batch = self.batch_size = 1
        return self._probed_axes(one)

    def _refuse_rows_that_are_no_samples(self, fixed: Mapping[str, np.ndarray], error: Exception) -> None:
        """When one row of the data does not run but all of them together do, the first axis is no batch (a
        graph net's nodes, indexed by an edge list given beside them): say so, and how to make the whole one
        batch (sizes fixed, the model's batch is then all the rows), not that the data is wrong."""
        data = self.dataset.inputs
        whole = {**fixed, **self.dataset.rows(0, len(data)), self.input_name: data.astype(self.dtype, copy=False)}
        try:
            self._run(whole)
        except RuntimeUnsupportedError:
            return  # the whole does not run either: the error stands
        sizes = " ".join(f"--input-shape {n}:{','.join(map(str, v.shape))}" for n, v in whole.items())
        raise DataError(
            f"the first axis of {self.input_name!r} ({len(data)} rows) is not a batch of samples: one row does not "
            f"run beside the other inputs, all {len(data)} together do ({error}); fix the sizes first, so that the "
            f"whole is the model's one batch: onnxsat optimize MODEL -o FIXED.onnx {sizes} --specialize"
        ) from None

    def _first_batch(self) -> np.ndarray:
        size = self.fixed_batch or 1
        inputs = next(self.dataset.batches(size))[0]
        if len(inputs) < size:
            inputs = np.concatenate([inputs, np.zeros((size - len(inputs), *inputs.shape[1:]), inputs.dtype)])
        return inputs.astype(self.dtype, copy=False)

    def _guess_axis(self, name: str, shape: Sequence[int], batch: int) -> int | None:
        """The batch axis from the declared dims (the input's batch name) or, failing that, the first axis
        of the batch's size, declared dynamic ones first."""
        declared = self._declared.get(name) or []
        if self.batch_name is not None and self.batch_name in declared:
            return declared.index(self.batch_name)
        candidates = [i for i, size in enumerate(shape) if size == batch]
        dynamic = [i for i in candidates if i >= len(declared) or not isinstance(declared[i], int)]
        return (dynamic or candidates or [None])[0]

    def _streams(self, fixed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every stream from zero state, step by step, state outputs fed back; outputs per step, stream
        after stream. Streams run side by side as one batch when the data input's batch and each state
        input's one dynamic dim allow it, else one at a time: the same outputs either way."""
        axes = self._state_axes()
        if axes is None or self.fixed_batch is not None or len(self.dataset) < 2:
            return self._streams_one_by_one(fixed)
        data, lengths = self.dataset.inputs, self.dataset.stream_lengths
        count = len(data)
        if self._side_by_side is None:
            found = self._stream_batch_axes(fixed, axes)
            self._side_by_side = all(axis is not None for axis in found.values())  # else per stream
            self.batch_axes = found if self._side_by_side else None
        if not self._side_by_side:
            return self._streams_one_by_one(fixed)
        assert self.batch_axes is not None
        state = {name: _zeros(info, count, axes[name]) for name, info in self._state_inputs.items()}
        steps: dict[str, list[np.ndarray]] = {name: [] for name in self.outputs}
        for step in range(int(lengths.max())):
            feeds = {**fixed, **state, self.input_name: data[:, step].astype(self.dtype, copy=False)}
            results = dict(zip(self.outputs, self._run(feeds), strict=True))
            for name, value in results.items():
                steps[name].append(_samples_first(value, self.batch_axes[name], count, name))
            state = {name: results[output] for name, output in self.state.items()}
        gathered = {}
        for name, parts in steps.items():
            try:
                per_stream = np.stack(parts, axis=1)  # [streams, steps, ...]
            except ValueError:
                raise DataError(
                    f"output {name!r} has a different shape from step to step: it cannot be scored"
                ) from None
            gathered[name] = np.concatenate([per_stream[s, : int(n)] for s, n in enumerate(lengths)])
        return gathered

    def _state_axes(self) -> dict[str, int] | None:
        """Each state input's batch axis: its one dynamic dim; None when one has none or several."""
        axes = {}
        for name, info in self._state_inputs.items():
            dynamic = [i for i, d in enumerate(info.shape) if not (isinstance(d, int) and d > 0)]
            if len(dynamic) != 1:
                return None
            axes[name] = dynamic[0]
        return axes

    def _stream_batch_axes(self, fixed: Mapping[str, np.ndarray], axes: Mapping[str, int]) -> dict[str, int | None]:
        """Per output, the axis that grows from one stream to two at the first step."""
        first = self.dataset.inputs[:, 0]
        shapes = []
        for count in (1, 2):
            state = {name: _zeros(info, count, axes[name]) for name, info in self._state_inputs.items()}
            feeds = {**fixed, **state, self.input_name: first[:count].astype(self.dtype, copy=False)}
            shapes.append([np.shape(value) for value in self._run(feeds)])
        found: dict[str, int | None] = {}
        for name, one, two in zip(self.outputs, *shapes, strict=True):
            grown = [i for i, (a, b) in enumerate(zip(one, two, strict=False)) if (a, b) == (1, 2)]
            if len(one) != len(two) or len(grown) > 1:
                raise DataError(f"output {name!r} has shape {list(one)} for one stream and {list(two)} for two")
            found[name] = grown[0] if grown else None
        return found

    def _streams_one_by_one(self, fixed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        gathered: dict[str, list[np.ndarray]] = {name: [] for name in self.outputs}
        data = self.dataset.inputs
        for stream, length in zip(data, self.dataset.stream_lengths, strict=True):
            state = {name: _zeros(info) for name, info in self._state_inputs.items()}
            for step in stream[: int(length)]:
                feeds = {**fixed, **state, self.input_name: step[None].astype(self.dtype, copy=False)}
                results = dict(zip(self.outputs, self._run(feeds), strict=True))
                if self.batch_axes is None:
                    self.batch_axes = {n: self._guess_axis(n, v.shape, 1) for n, v in results.items()}
                for name, value in results.items():
                    gathered[name].append(_samples_first(value, self.batch_axes[name], 1, name))
                state = {name: results[output] for name, output in self.state.items()}
        return {name: _joined(parts, name) for name, parts in gathered.items()}

    def _run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        try:
            results = self.session.run(self.outputs, dict(feeds))
        except Exception as error:  # ORT raises several unrelated exception types
            reason = tidy_ort_message(" ".join(str(error).split())) or type(error).__name__
            raise RuntimeUnsupportedError(f"ONNX Runtime cannot run the model on the data: {reason}") from None
        return [as_array(value, name) for name, value in zip(self.outputs, results, strict=True)]


def check_state(state: Mapping[str, str], inputs: Sequence[str], outputs: Sequence[str], data_input: str = "") -> None:
    """Every pairing names a state input and an output the model has (and not the data's input)."""
    for name, output in state.items():
        if name not in inputs:
            raise SettingsError(
                f"--stateful {name}={output}: the model has no input {name!r} (its inputs: {', '.join(inputs)})"
            )
        if output not in outputs:
            raise SettingsError(
                f"--stateful {name}={output}: the model has no output {output!r} (its outputs: {', '.join(outputs)})"
            )
        if name == data_input:
            raise SettingsError(f"--stateful {name}={output}: {name!r} is the input the data is fed to")


def _zeros(info: ort.NodeArg, streams: int = 1, axis: int | None = None) -> np.ndarray:
    """A state input's start: zeros of its declared shape, ``streams`` on the batch ``axis`` and 1 for
    any other dynamic dim."""
    dtype = ORT_DTYPES.get(info.type, np.float32)
    dims = [d if isinstance(d, int) and d > 0 else 1 for d in info.shape]
    if axis is not None:
        dims[axis] = streams
    return np.zeros(dims, dtype=dtype)


def _squeezed_axis(one: Sequence[int], two: Sequence[int]) -> int | None:
    """The axis of size 2 that an output of two samples (``two``) has and that of one sample (``one``) lacks,
    all else equal: a batch axis the model squeezes away for a batch of one; None when there is no such axis."""
    if len(two) != len(one) + 1:
        return None
    found = [i for i, size in enumerate(two) if size == 2 and tuple(two[:i]) + tuple(two[i + 1 :]) == tuple(one)]
    return found[0] if found else None


def _samples_first(value: np.ndarray, axis: int | None, count: int, name: str, squeezed: bool = False) -> np.ndarray:
    """``value`` with its batch axis first, cut to ``count`` real samples; no axis: one sample, added;
    ``squeezed``: the model drops the batch axis for one sample, which is put back."""
    value = np.asarray(value)
    if squeezed and count == 1 and axis is not None:
        value = np.expand_dims(value, axis)
    if axis is None:
        if count != 1:
            raise DataError(f"output {name!r} has no batch axis but was run on {count} samples")
        return value[None]
    if axis >= value.ndim or value.shape[axis] < count:
        raise DataError(f"output {name!r} has shape {list(value.shape)} for a batch of {count}: no batch axis")
    return np.moveaxis(value, axis, 0)[:count]


def _joined(parts: list[np.ndarray], name: str) -> np.ndarray:
    """The samples of every run as one array; when only their count of rows differs (a detector's K boxes per
    image), an object array of the per-sample arrays, for a metric that reads them sample by sample."""
    shapes = {part.shape[1:] for part in parts}
    if len(shapes) > 1 and len({shape[1:] for shape in shapes}) == 1 and all(shapes):
        samples = [sample for part in parts for sample in part]
        ragged = np.empty(len(samples), dtype=object)
        for index, sample in enumerate(samples):
            ragged[index] = sample
        return ragged
    if len(shapes) > 1:
        sizes = ", ".join(str(list(s)) for s in sorted(shapes)[:3])
        raise DataError(f"output {name!r} has a different shape per sample ({sizes}): it cannot be scored as one array")
    return np.concatenate(parts) if parts else np.zeros((0,))
