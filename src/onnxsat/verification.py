"""The verification gate: does the produced model compute what the original computed?

Both models run in ONNX Runtime with its graph optimizations disabled (so ONNXSat's graph is what is
compared, not ORT's rewrite of it) on the same inputs (those the user gave, seeded random data for the
rest), and every output is compared.
"""

from __future__ import annotations

import functools
import gc
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort

from onnxsat import custom_ops
from onnxsat.errors import (
    DataError,
    GuessedSizesError,
    InvalidModelError,
    OnnxSatError,
    OutOfMemoryError,
    RuntimeUnsupportedError,
    SettingsError,
)
from onnxsat.external_data import expected_nbytes, iter_tensors, set_reference
from onnxsat.implied_sizes import implied_sizes
from onnxsat.inputs import InputsLike, InputSpec, declared_dims, fixed_dim
from onnxsat.ir_version import too_new_ir
from onnxsat.model_io import check_model, over_protobuf_limit
from onnxsat.op_kinds import default_opset_version
from onnxsat.output_values import as_array, map_keys
from onnxsat.proto_fields import copy_fields, subgraph_captures, with_initializers_replaced

if TYPE_CHECKING:
    from onnxsat.runtime.tune import SessionSettings

DEFAULT_RUN_TIMEOUT = 600.0
"""Seconds one verification run may take before ONNX Runtime is told to stop (a Loop whose trip count
a damaged or hostile file set to 2**62 would otherwise run for ever)."""


@dataclass(frozen=True)
class Tolerance:
    """Verification tolerances, as given for models that compute in float32 or wider.

    A model that computes anywhere in a lower precision gets at least that type's floor, on every
    output (a float16 Conv followed by a Cast to float32 has a float32 output with float16 accuracy).
    A float16 value holds ~3 decimal digits, so any rewrite that reorders its arithmetic (a
    BatchNormalization folded into the Conv weights) moves it by about one float16 step, far beyond
    float32's 1e-4; the folded model is no less exact than the original against a float32 reference.
    """

    rtol: float = 1e-4
    atol: float = 1e-5
    ort_rounding: float = 2.0
    """An output that misses ``rtol``/``atol`` still passes within this many times the distance ONNX Runtime's
    own optimizations move the original's output on the same inputs (0: never; see ``verify``)."""

    def __post_init__(self) -> None:
        for flag, value in (("--rtol", self.rtol), ("--atol", self.atol), ("--ort-rounding", self.ort_rounding)):
            if not value >= 0:  # also NaN
                raise SettingsError(f"{flag} must be 0 or more (got {value:g})")

    def for_model(self, model: onnx.ModelProto) -> Tolerance:
        """These tolerances, widened to the floor of the lowest float precision ``model`` computes in."""
        types = _element_types(model)
        floors = [floor for kind, floor in _LOW_PRECISION_FLOORS.items() if kind in types]
        if not floors:
            return self
        rtol, atol = max(f[0] for f in floors), max(f[1] for f in floors)
        return replace(self, rtol=max(self.rtol, rtol), atol=max(self.atol, atol))


_LOW_PRECISION_FLOORS = {onnx.TensorProto.FLOAT16: (1e-2, 1e-3), onnx.TensorProto.BFLOAT16: (5e-2, 1e-2)}
"""(rtol, atol) floors per element type: about eight and one steps of the type's precision."""


def _element_types(model: onnx.ModelProto) -> set[int]:
    """Every element type a value of ``model`` can take, read from where types enter a graph.

    A type reaches an intermediate value only from a graph input, a tensor (initializer or attribute,
    in any subgraph) or a node attribute that names a type (Cast's ``to``, ``dtype``), so no shape
    inference is needed: ``optimize_model`` already runs it once, and verification runs per model.
    """
    graph = model.graph
    values = [*graph.input, *graph.output, *graph.value_info]
    types = {v.type.tensor_type.elem_type for v in values if v.type.HasField("tensor_type")}
    types |= {t.data_type for t in iter_tensors(model)}
    stack = [graph]
    while stack:
        for node in stack.pop().node:
            for attribute in node.attribute:
                if attribute.name in _TYPE_ATTRIBUTES and attribute.type == onnx.AttributeProto.INT:
                    types.add(attribute.i)
                stack.extend([attribute.g] if attribute.HasField("g") else attribute.graphs)
    return types


_TYPE_ATTRIBUTES = frozenset({"to", "dtype"})
"""Attributes naming the element type of a node's output: Cast's ``to``; ``dtype`` of Random*, EyeLike."""


@dataclass
class OutputComparison:
    name: str
    max_abs_diff: float
    max_rel_diff: float
    ok: bool
    note: str = ""


@dataclass
class VerificationResult:
    ok: bool
    outputs: list[OutputComparison] = field(default_factory=list)
    error: str = ""
    tolerance: Tolerance = field(default_factory=Tolerance)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def with_outputs(model: onnx.ModelProto, names: Iterable[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also returns the intermediate tensors ``names``, so one ONNX Runtime run
    yields the activations calibration, HRank and reconstruction need."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {o.name for o in exposed.graph.output}
    for name in names:
        if name not in present:
            exposed.graph.output.append(onnx.ValueInfoProto(name=name))
            present.add(name)
    return exposed


def session(
    model: onnx.ModelProto | Path,
    level: ort.GraphOptimizationLevel,
    threads: int = 1,
    base_dir: Path | None = None,
    lean: bool = False,
    settings: SessionSettings | None = None,
    weights_as_inputs: bool = False,
    weights: Mapping[str, np.ndarray] | None = None,
) -> ort.InferenceSession:
    """A CPU session at ``level``; spinning is off so that idle sessions alive beside it steal no cores.

    ``model`` is a model in memory or a file (whose external data ORT finds beside it). ``base_dir``
    is where an in-memory model's external data lives (ORT reads it from there, not ONNXSat).
    ``lean`` turns off weight pre-packing, which would otherwise keep a second copy of every MatMul
    weight: verification runs once, so the copy buys nothing and would double a large model's memory.
    It also turns off ORT's memory arena, which keeps what a run allocated after the session is gone
    (300 MB after running GPT-2, that the next session then stacked its weights on). And an in-memory
    model's large weights are not serialized with it: with ``weights_as_inputs`` (only at
    ``ORT_DISABLE_ALL``, where no optimization could treat them as constants) they become graph inputs
    the caller feeds from ``sess._onnxsat_fed``, which ORT reads in place; otherwise they are given as
    external initializers, which ORT copies; a model of 256 MiB or more is always given so (see ``_heavy``).
    ``weights`` are the arrays of stand-ins ``model`` already has (from :func:`weights_apart`).
    ``settings`` (from ``onnxsat tune``) replace ``threads`` with their thread counts, execution mode
    and providers; ``level`` stays the caller's, since what a caller measures is often the level
    itself (pass ``settings.optimization_level`` for the tuned one).
    """
    if settings is None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers = ["CPUExecutionProvider"]
    else:
        options = settings.to_session_options()  # spinning is off there too
        providers = list(settings.providers)
    options.graph_optimization_level = level
    if base_dir is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(base_dir))
    if lean:
        options.add_session_config_entry("session.disable_prepacking", "1")
        options.enable_cpu_mem_arena = False
    options.log_severity_level = 4  # ORT's own error log would add coloured lines to our one-line errors
    custom_ops.register(options)
    if isinstance(model, Path):
        return ort.InferenceSession(str(model), options, providers=providers)
    if weights is not None:
        light, shared = model, weights
    else:
        light, shared = weights_apart(model) if lean or _heavy(model) else (model, {})
    fed = weights_as_inputs and level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if shared and fed:
        light = _weights_as_inputs(light, shared, in_place=weights is None)  # a light copy made here is ours
    elif shared:
        options.add_external_initializers(list(shared), [ort.OrtValue.ortvalue_from_numpy(v) for v in shared.values()])
    sess = ort.InferenceSession(light.SerializeToString(), options, providers=providers)
    sess._onnxsat_shared = shared
    sess._onnxsat_fed = shared if fed else {}
    return sess


def _heavy(model: onnx.ModelProto) -> bool:
    """Whether ``model``'s weights travel apart to a session even when it is not lean: over protobuf's 2 GiB it
    cannot be serialized whole, and from ``HEAVY_MODEL_BYTES`` on, serializing it costs more than the arrays
    do (a 1.07 GB MLP: session creation peaked 2.9 GB above the model serialized, 2.1 GB with its weights
    apart; ORT holds the same 1.9 GB after either)."""
    return over_protobuf_limit(model) or model.ByteSize() >= HEAVY_MODEL_BYTES


HEAVY_MODEL_BYTES = 2**28

SHARED_WEIGHT_BYTES = 2**20
"""In-memory weights at least this large are handed to ONNX Runtime in place, not serialized with the model."""


def weights_apart(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A copy of ``model`` whose large in-memory initializers are stubs, and their values as arrays.

    A session made from the whole model would hold each such weight three more times (the serialized
    bytes, ORT's parsed copy, its tensor): weights a rule made at decode time (Q, K and V merged for
    Attention: 85 MB on ViT-base) then dominated a verification's memory. The stubs are declared
    external and never read. Reading a weight's bytes in Python copies them, and a message's bytes
    are freed only with the whole message (protobuf's upb keeps them in one arena): a caller that owns
    the model can drop it, verify the parts (``verify(..., weights=)``) and put them together after
    (:func:`weights_back`), holding each weight once.
    """
    if not any(_shareable(t) for t in model.graph.initializer):
        return model, {}
    shared: dict[str, np.ndarray] = {}

    def in_place(tensor: onnx.TensorProto) -> onnx.TensorProto | None:
        if not _shareable(tensor):
            return None
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
        array = np.frombuffer(tensor.raw_data, dtype=dtype).reshape(tuple(tensor.dims))
        shared[tensor.name] = array
        stub = onnx.TensorProto()
        copy_fields(tensor, stub, skip={"raw_data"})
        set_reference(stub, "onnxsat-shared-in-memory", 0, array.nbytes)
        return stub

    light = with_initializers_replaced(model, in_place)
    return light, shared


def weights_back(light: onnx.ModelProto, weights: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """The whole model again from :func:`weights_apart`'s parts: a new message (``light`` is left as it is),
    or ``light`` itself when nothing was apart."""
    if not weights:
        return light

    def whole(stub: onnx.TensorProto) -> onnx.TensorProto | None:
        array = weights.get(stub.name)
        if array is None:
            return None
        tensor = onnx.TensorProto(raw_data=array.tobytes())
        copy_fields(stub, tensor, skip={"data_location", "external_data"})
        return tensor

    return with_initializers_replaced(light, whole)


def _weights_as_inputs(
    light: onnx.ModelProto, shared: Mapping[str, np.ndarray], in_place: bool = False
) -> onnx.ModelProto:
    """``light`` (or a copy, unless ``in_place``) with the stand-ins of ``shared`` turned into graph inputs
    of their type and shape.

    ONNX Runtime copies every initializer it is given, external ones included (ViT-base's merged Q, K
    and V weights: 150 MB more at session creation); a fed input it reads where it lies.
    """
    inputs = {value.name for value in light.graph.input}  # IR < 4 lists initializers as inputs too
    view = light
    if not in_place:
        view = onnx.ModelProto()
        copy_fields(light, view, skip={"graph"})
        copy_fields(light.graph, view.graph, skip={"initializer"})
        view.graph.initializer.extend(light.graph.initializer)
    kept = [t for t in view.graph.initializer if t.name not in shared]
    del view.graph.initializer[:]
    view.graph.initializer.extend(kept)
    view.graph.input.extend(
        onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)
        for name, array in shared.items()
        if name not in inputs
    )
    return view


def _shareable(tensor: onnx.TensorProto) -> bool:
    """A large in-memory weight numpy can read as it is (sized from dims and type: reading ``raw_data`` in
    Python copies it)."""
    return (
        tensor.data_location != onnx.TensorProto.EXTERNAL
        and tensor.HasField("raw_data")
        and tensor.data_type in _SHAREABLE
        and (expected_nbytes(tensor) or 0) >= SHARED_WEIGHT_BYTES
    )


_SHAREABLE = {
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.DOUBLE,
    onnx.TensorProto.INT8,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.INT16,
    onnx.TensorProto.INT32,
    onnx.TensorProto.INT64,
}
"""Element types whose raw bytes numpy reads as they are (no packing, no float16 bit tricks)."""


def run_model(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    what: str,
    base_dir: Path | None = None,
    timeout: float = DEFAULT_RUN_TIMEOUT,
    level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    weights: Mapping[str, np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Run with ORT optimizations off (or at ``level``); a failure on the *original* model is the user's to know.

    ``weights``: ``model`` is the stand-in half of :func:`weights_apart` and these are its arrays.

    The session is dropped before returning, so verifying a large model holds one copy of its
    weights at a time; large in-memory weights are fed to it as inputs, which ORT does not copy (with
    the weights as initializers again if a kernel refuses that). After ``timeout`` seconds ORT's
    terminate flag stops the run (ORT checks it between kernels and between loop iterations).

    The flag is set from a timer thread. egglog's e-graphs may only be freed on the thread that made
    them, and Python's cycle collector runs on whichever thread's allocation makes it due. So the
    youngest generation is collected here (cheap), which resets the count that makes it due; the
    timer thread allocates far fewer objects than the threshold, the main thread is inside ONNX
    Runtime meanwhile, and the timer is joined before this returns, so no collection, and no e-graph
    drop, can happen on the timer thread.
    """
    run_options = ort.RunOptions()
    timer = threading.Timer(timeout, lambda: setattr(run_options, "terminate", True))
    timer.daemon = True

    def run(weights_as_inputs: bool) -> list[np.ndarray]:
        sess = session(model, level, base_dir=base_dir, lean=True, weights_as_inputs=weights_as_inputs, weights=weights)
        check_exchangeable(sess, copies, what)
        if timer.ident is None:  # not started by a first attempt
            gc.collect(0)
            timer.start()
        return sess.run(None, {**sess._onnxsat_fed, **copies}, run_options)

    try:
        # copies: a kernel may write into an input (BatchNormalization in training mode updates its mean)
        copies = {name: np.array(value, copy=True) for name, value in feeds.items()}
        try:
            return run(weights_as_inputs=True)
        except RuntimeUnsupportedError:
            raise
        except Exception:
            if run_options.terminate or level != ort.GraphOptimizationLevel.ORT_DISABLE_ALL:
                raise
            if not weights and not any(_shareable(t) for t in model.graph.initializer):
                raise
            # a kernel that insists on a constant weight: the weights as initializers, which ORT copies
            return run(weights_as_inputs=False)
    except OnnxSatError:  # said already (a custom-op library that cannot be loaded: a setting, not the model)
        raise
    except Exception as error:  # ORT raises several unrelated exception types
        if run_options.terminate:
            raise RuntimeUnsupportedError(
                f"ONNX Runtime did not finish running the {what} within {timeout:g} s (see --run-timeout)"
            ) from None
        message = tidy_ort_message(" ".join(str(error).split())) or type(error).__name__
        if any(sign in message for sign in OUT_OF_MEMORY_SIGNS):
            raise OutOfMemoryError(
                f"ONNX Runtime ran out of memory running the {what} ({message}): the model or the inputs made to run "
                "it are too large for this machine (a smaller --input-shape helps when dynamic dims are the cause)"
            ) from None
        raise RuntimeUnsupportedError(f"ONNX Runtime cannot run the {what}: {_explain(model, message)}") from None
    finally:
        timer.cancel()
        if timer.ident is not None:
            timer.join()


OUT_OF_MEMORY_SIGNS = ("std::bad_alloc", "Failed to allocate memory")
"""How ONNX Runtime's messages say an allocation failed: no fault of the model's (exit 11, not 6)."""


def check_exchangeable(sess: ort.InferenceSession, feeds: Mapping[str, object], what: str) -> None:
    """Refuse, in one line naming them, the fed inputs and the outputs of ``sess`` whose element type ONNX
    Runtime's Python API cannot exchange with numpy.

    ORT runs a model with bfloat16, float8 or int4 inputs or outputs, but its binding converts no numpy array
    of those types (numpy knows them only through ml_dtypes) either way: fed, it says ``Numpy_type 256 can't
    be converted to MLDataType``, returned, ``No corresponding Numpy type``, which reads as the model's fault.
    """
    ends = [("input", arg) for arg in sess.get_inputs() if arg.name in feeds]
    ends += [("output", arg) for arg in sess.get_outputs()]
    refused = [f"{kind} {arg.name!r} ({arg.type})" for kind, arg in ends if not _numpy_exchangeable(arg.type)]
    if not refused:
        return
    listed = ", ".join(refused[:3]) + (f" and {len(refused) - 3} more" if len(refused) > 3 else "")
    raise RuntimeUnsupportedError(
        f"ONNX Runtime loads the {what}, but its Python API {_CANNOT_EXCHANGE} {listed}, so ONNXSat can neither "
        "feed nor compare them (profile and show work on it; the other commands need inputs and outputs of other types)"
    )


_CANNOT_EXCHANGE = "cannot exchange numpy arrays with"


def ort_element_type(ort_type: str) -> int | None:
    """ONNX's element type for ONNX Runtime's name of a tensor type (``NodeArg.type``, ``tensor(float16)``): the
    name inside is the ``TensorProto`` enum's, lower-cased; None for sequences, maps, optionals and names this
    onnx does not know."""
    if not (ort_type.startswith("tensor(") and ort_type.endswith(")")):
        return None
    return getattr(onnx.TensorProto, ort_type[len("tensor(") : -1].upper(), None)


@functools.cache
def numpy_exchangeable(elem_type: int) -> bool:
    """Whether ORT's Python API converts values of an ONNX element type to and from numpy: not for the types
    numpy has only as registered user types (number 256 on: ml_dtypes' bfloat16, float8, int4), which its
    binding has no conversion for."""
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).num < _NUMPY_USER_TYPES
    except (KeyError, TypeError, ValueError):  # a type this onnx has no numpy dtype for: numpy cannot hold it
        return False


def _numpy_exchangeable(ort_type: str) -> bool:
    """:func:`numpy_exchangeable` for ORT's type name; sequences, maps and optionals are (ORT converts their
    tensors as it converts any), as is a name this onnx does not know."""
    elem_type = ort_element_type(ort_type)
    return elem_type is None or numpy_exchangeable(elem_type)


_NUMPY_USER_TYPES = 256
"""numpy's first type number for dtypes registered from outside it (``NPY_USERDEF``)."""


_STATUS_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")
_SOURCE_LOCATION = re.compile(r"\S+\.(?:cc|cpp|h):\d+ ")
_SIGNATURE_START = re.compile(r"[\w<>,&*~ ]*::[\w:<>,&*~ ]*\(")
"""A C++ return type and qualified function name up to its opening parenthesis."""


def tidy_ort_message(message: str) -> str:
    """ORT's message without its status prefix and the C++ file:line and signature it may put first.

    ``.../session_state_utils.cc:266 onnxruntime::common::Status ...SaveInitializedTensors(<15
    parameters>) ort_value_name_idx_map.MaxIdx() > -1 was false.``: the reason is at the end, and a
    one-line error cut at 400 characters would otherwise show only the signature.
    """
    while match := _SOURCE_LOCATION.search(message):
        end, depth = match.end(), 0
        signature = _SIGNATURE_START.match(message, end)
        if signature is None:
            end_of_signature = end  # no C++ signature follows: drop only the location
        else:
            opening = signature.end() - 1
            for index in range(opening, len(message)):
                depth += {"(": 1, ")": -1}.get(message[index], 0)
                if depth == 0:
                    break
            end_of_signature = index + 1
            if message.startswith(" const", end_of_signature):
                end_of_signature += len(" const")
        message = message[: match.start()] + message[end_of_signature:].lstrip()
    return _STATUS_PREFIX.sub("", message)


_TYPE_REFUSED = re.compile(r"Type '(tensor\(\w+\))' of input parameter \(.*?\) of operator \((\w+)\)")
"""ORT's refusal of an element type no kernel of an op takes (bfloat16 Conv on CPU)."""
_NOT_ABOUT_SIZES = (
    "Type Error",
    "Could not find an implementation",
    "supports ai.onnx up to opset",
    _CANNOT_EXCHANGE,
    "Numpy_type",
    "No corresponding Numpy type",
)
"""ORT refusals that no input size causes: a run that failed with them gets no hint about dynamic dims."""
_NEWEST_SUPPORTED = re.compile(r"support for domain ai\.onnx is till opset (\d+)")


def _explain(model: onnx.ModelProto, message: str) -> str:
    """ORT's message, with the model's opset named when the opset is what ORT cannot run.

    ORT names only the op and its schema version for a missing kernel (``Could not find an
    implementation for AveragePool(1)``), and buries its newest opset in a C++ signature when a
    model is too new; the user needs the model's opset and which way to convert it.
    """
    opset = default_opset_version(model, missing=0)
    newest = _NEWEST_SUPPORTED.search(message)
    if newest and opset:
        return (
            f"ONNX Runtime {ort.__version__} supports ai.onnx up to opset {newest.group(1)} and the model uses "
            f"opset {opset}; convert it to opset {newest.group(1)} with onnx.version_converter"
        )
    if "Unsupported model IR version" in message:
        return too_new_ir(model)
    message = message[:400]
    if "Numpy_type" in message or "No corresponding Numpy type" in message:  # a value check_exchangeable did not see
        return f"{message} (ONNX Runtime's Python API {_CANNOT_EXCHANGE} bfloat16, float8 or int4 values)"
    refused_type = _TYPE_REFUSED.search(message)
    if refused_type:
        kind, op = refused_type.groups()
        return f"{message} (ONNX Runtime {ort.__version__} has no CPU kernel for {op} on {kind}: export it in float32)"
    if "Could not find an implementation" in message and opset:
        return (
            f"{message} (the model uses opset {opset} of ai.onnx; ONNX Runtime {ort.__version__} has no kernel for "
            "this op at that opset: convert the model to a newer opset with onnx.version_converter)"
        )
    return message


def compare_outputs(
    names: Sequence[str], expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], tolerance: Tolerance
) -> list[OutputComparison]:
    comparisons = []
    for name, want_value, got_value in zip(names, expected, actual, strict=True):
        want, got, unlike = _comparable(want_value, got_value, name)
        if unlike:
            comparisons.append(OutputComparison(name, float("inf"), float("inf"), False, unlike))
            continue
        if want.dtype.kind in ("U", "S", "O", "b"):
            same = bool(np.array_equal(want, got))
            comparisons.append(
                OutputComparison(name, 0.0 if same else float("inf"), 0.0 if same else float("inf"), same)
            )
            continue
        w, g = want.astype(np.float64), got.astype(np.float64)
        nan_match = bool(np.array_equal(np.isnan(w), np.isnan(g)))
        finite = ~(np.isnan(w) | np.isnan(g))
        # inf - inf and a difference against an exact 0 are expected here, not worth a warning on stderr.
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(w - g)[finite]
            diff[np.isnan(diff)] = 0.0  # inf - inf where both are the same infinity
            # relative to values above the absolute tolerance: next to an exact 0, 1e-8 / 1e-300 says nothing
            scale = np.abs(w[finite])
            floor = max(tolerance.atol, np.finfo(np.float64).tiny)
            rel = diff[scale >= floor] / scale[scale >= floor]
        max_abs = float(diff.max()) if diff.size else 0.0
        max_rel = float(rel.max()) if rel.size else 0.0
        close = bool(np.allclose(g[finite], w[finite], rtol=tolerance.rtol, atol=tolerance.atol, equal_nan=True))
        ok = nan_match and close
        note = "" if nan_match else "NaN positions differ"
        if want.size == 0:
            note = f"empty output {list(want.shape)}: no element to compare (an input size of 0?)"
        elif ok and not np.isfinite(w).any():  # NaN matches NaN: "passed" would say nothing
            note = "no finite value on these inputs (NaN or infinity everywhere): nothing compared; give other inputs"
        comparisons.append(OutputComparison(name, max_abs, max_rel, ok, note))
    return comparisons


def _comparable(want: object, got: object, name: str) -> tuple[np.ndarray, np.ndarray, str]:
    """Both outputs as arrays to compare, and why they cannot be ("" when they can): maps naming other
    classes, or another shape or type. Sequences of maps or of same-shaped tensors become numbers (so
    the tolerance applies to them), anything else is compared as it comes (exactly)."""
    if map_keys(want) != map_keys(got):
        return np.asarray([]), np.asarray([]), "the maps' keys differ"
    want_array, got_array = _as_compared(want, name), _as_compared(got, name)
    if want_array.shape != got_array.shape or want_array.dtype != got_array.dtype:
        shapes = f"{got_array.shape}/{got_array.dtype} != {want_array.shape}/{want_array.dtype}"
        return want_array, got_array, f"shape/dtype {shapes}"
    return want_array, got_array, ""


def _as_compared(value: object, name: str) -> np.ndarray:
    try:
        return as_array(value, name)
    except DataError:
        return np.asarray(value)


@dataclass
class Reference:
    """The original model's run: its inputs (given and seeded random) and what it computed from them."""

    feeds: dict[str, np.ndarray]
    outputs: list[np.ndarray]


def reference_run(
    original: onnx.ModelProto,
    inputs: InputsLike = None,
    seed: int = 0,
    base_dir: Path | None = None,
    timeout: float = DEFAULT_RUN_TIMEOUT,
) -> Reference:
    """Run ``original`` on the given inputs and seeded random ones for the rest; raises
    RuntimeUnsupportedError when ORT cannot run it, saying which dynamic dims were guessed (a size of 1
    breaks models whose Reshapes need real sizes)."""
    spec = InputSpec.of(inputs)
    feeds = spec.feeds(original, seed)
    try:
        return Reference(feeds, run_model(original, feeds, "input model", base_dir, timeout))
    except RuntimeUnsupportedError as error:
        guessed = spec.guessed(original)
        if not guessed or any(text in str(error) for text in _NOT_ABOUT_SIZES):
            raise
        hint = "; ".join(f"{name} ran as {list(feeds[name].shape)}" for name in guessed)
        raise GuessedSizesError(
            f"{error} (dynamic dims were set to 1: {hint}; give real sizes with --input-shape or values with --inputs)"
        ) from None


FALLBACK_DYNAMIC_DIMS = (64, 224)
"""Sizes tried for the dynamic dims nobody sized when ONNX Runtime cannot run the model with them at 1."""


def at_larger_sizes(
    original: onnx.ModelProto,
    inputs: InputsLike,
    error: GuessedSizesError,
    base_dir: Path | None = None,
    timeout: float | None = None,
) -> tuple[InputSpec, Reference, str]:
    """After ``error`` (the run with the unsized dynamic dims at 1 failed): the inputs of the first of
    :func:`_sized_attempts` that ONNX Runtime runs, that run, and a line saying so for the report. ``error``
    again, naming what was tried, when none runs. ``timeout``: per run, None for the default."""
    spec = InputSpec.of(inputs)
    implied = implied_sizes(original, spec.unsized(original))
    tried, seen = [], []
    for label, sized in _sized_attempts(original, spec, implied):
        if sized.shapes in seen:  # no batch to raise: the same sizes again
            continue
        tried.append(label)
        seen.append(sized.shapes)
        try:
            reference = reference_run(original, sized, base_dir=base_dir, timeout=timeout or DEFAULT_RUN_TIMEOUT)
        except (RuntimeUnsupportedError, SettingsError):
            continue
        shapes = ", ".join(f"{name} as {sized.shapes[name]}" for name in spec.guessed(original))
        return (
            sized,
            reference,
            f"ONNX Runtime cannot run the model with its unsized dynamic dims at 1; {label}: {shapes}",
        )
    raise GuessedSizesError(f"{error} (it failed too {', '.join(tried)})") from None


def _sized_attempts(
    model: onnx.ModelProto, spec: InputSpec, implied: Mapping[tuple[str, int], int]
) -> Iterator[tuple[str, InputSpec]]:
    """``(what, spec)`` to try, in order: the sizes the weights imply (the rest at 1), then the other unsized
    dims at each of ``FALLBACK_DYNAMIC_DIMS`` with batches at 1, then with the batch too (madmom's nets take
    ``[frames, features]``, no batch, and their convolutions need more than one frame)."""
    if implied:
        said = ", ".join(f"{name} axis {axis} at {size}" for (name, axis), size in implied.items())
        yield f"with the sizes its weights imply ({said})", spec.with_guessed_at(model, 1, implied)
    for size in FALLBACK_DYNAMIC_DIMS:
        yield f"at {size}", spec.with_guessed_at(model, size, implied)
    for size in FALLBACK_DYNAMIC_DIMS:
        yield f"at {size} with the first axes too", spec.with_guessed_at(model, size, implied, batch=size)


def sized_reference_run(
    original: onnx.ModelProto, inputs: InputsLike = None, base_dir: Path | None = None
) -> tuple[InputSpec, Reference]:
    """:func:`reference_run`, and when the unsized dynamic dims do not run at 1, :func:`at_larger_sizes`: the
    inputs every later run of the model takes, and the original's run on them."""
    try:
        return InputSpec.of(inputs), reference_run(original, inputs, base_dir=base_dir)
    except GuessedSizesError as error:
        sized, reference, _ = at_larger_sizes(original, inputs, error, base_dir)
        return sized, reference


def check_and_run(
    model: onnx.ModelProto, inputs: InputsLike = None, base_dir: Path | None = None
) -> tuple[Reference | None, VerificationResult]:
    """The check for a result whose outputs are meant to differ (pruned, sparsified, re-interfaced): it
    passes the checker and ONNX Runtime runs it on the run's inputs. Returns that run for later comparisons."""
    try:
        check_model(model)
        feeds = InputSpec.of(inputs).feeds(model)
        reference = Reference(feeds, run_model(model, feeds, "result", base_dir))
    except (InvalidModelError, RuntimeUnsupportedError) as error:
        return None, VerificationResult(False, error=str(error))
    return reference, VerificationResult(True)


def check_lossy(
    original: Reference, result: onnx.ModelProto, names: Sequence[str], what: str, base_dir: Path | None = None
) -> tuple[Reference | None, VerificationResult]:
    """The check of a result whose outputs differ on purpose (``what``: "sparsity", "pruning"): it passes the
    checker, ONNX Runtime runs it on the original's inputs, every output keeps its shape and type, and how
    far each moved is said (relative L2 error and cosine): a result that runs can still compute something
    else, and the report must not read as no harm. Returns the result's run too, for later comparisons."""
    try:
        check_model(result)
        actual = run_model(result, original.feeds, "result", base_dir)
    except (InvalidModelError, RuntimeUnsupportedError) as error:
        return None, VerificationResult(False, error=str(error))
    changes = []
    declared = {value.name: declared_dims(value) for value in result.graph.output}
    compared = compare_outputs(names, original.outputs, actual, Tolerance())
    for comparison, want_value, got_value in zip(compared, original.outputs, actual, strict=True):
        want, got, unlike = _comparable(want_value, got_value, comparison.name)
        if unlike and _resized_where_dynamic(want, got, declared.get(comparison.name)):
            resized = f"shape {list(want.shape)} -> {list(got.shape)} (a size the model computes from its data)"
            changes.append(replace(comparison, ok=True, note=f"changed by {what}: {resized}"))
            continue
        if unlike:
            return None, VerificationResult(False, error=f"output {comparison.name!r}: {unlike}")
        changes.append(replace(comparison, ok=True, note=f"changed by {what}: {_change(want, got)}"))
    return Reference(original.feeds, actual), VerificationResult(True, changes)


def _resized_where_dynamic(
    want: np.ndarray, got: np.ndarray, declared: list[onnx.TensorShapeProto.Dimension] | None
) -> bool:
    """Whether two outputs differ in shape only along dims the model declares dynamic: a count of boxes kept
    by NonMaxSuppression, or of positions found by NonZero, may change when the weights do."""
    if declared is None or want.dtype != got.dtype or not (want.ndim == got.ndim == len(declared)):
        return False
    return all(a == b or fixed_dim(dim) is None for a, b, dim in zip(want.shape, got.shape, declared, strict=True))


def _change(want: np.ndarray, got: np.ndarray) -> str:
    if want.dtype.kind != "f" or want.size == 0:
        return "no element differs" if np.array_equal(want, got) else "elements differ"
    w, g = want.astype(np.float64).ravel(), got.astype(np.float64).ravel()
    tiny = np.finfo(np.float64).tiny
    with np.errstate(all="ignore"):  # inf or NaN outputs (a log of 0) give NaN figures, said as such, not warned
        relative = float(np.linalg.norm(g - w)) / max(float(np.linalg.norm(w)), tiny)
        cosine = float(w @ g) / max(float(np.linalg.norm(w) * np.linalg.norm(g)), tiny)
    if w.size == 1:  # the cosine of one value is its sign's agreement, 1 whatever the change: the values say more
        return f"relative L2 error {relative:.3g} ({w[0]:.6g} -> {g[0]:.6g})"
    return f"relative L2 error {relative:.3g}, cosine {cosine:.3f}"


def verify(
    original: onnx.ModelProto,
    candidate: onnx.ModelProto,
    inputs: InputsLike = None,
    tolerance: Tolerance | None = None,
    seed: int = 0,
    reference: Reference | None = None,
    base_dir: Path | None = None,
    timeout: float = DEFAULT_RUN_TIMEOUT,
    checked: bool = True,
    weights: Mapping[str, np.ndarray] | None = None,
    blind_spots: bool = True,
) -> VerificationResult:
    """Compare ``candidate`` with ``original`` on the run's inputs; never raises for a mismatch.

    ``checked``: run the ONNX checker on ``candidate`` first; False for a part of a model (a body run on its
    own), which the checker sees when the whole model is checked.

    ``reference`` is the original's run if the caller already made it (``inputs`` and ``seed`` then
    made its inputs). ``base_dir`` is where both models' external data lives (the candidate refers to
    the original's). ``weights``: ``candidate`` is the stand-in half of :func:`weights_apart` and these
    are its arrays. ``blind_spots``: note the outputs random inputs leave unchanged (``_blind_outputs``, one
    more run of the original); False where nobody reads the notes.
    """
    tolerance = (tolerance or Tolerance()).for_model(original)
    reference = reference or reference_run(original, inputs, seed, base_dir, timeout)
    feeds, expected = reference.feeds, reference.outputs
    try:
        if checked:
            check_model(candidate)
    except InvalidModelError as error:
        return VerificationResult(False, error=f"checker: {error}", tolerance=tolerance)
    try:
        taken = {value.name for value in candidate.graph.input}  # a specialised candidate takes fewer
        actual = run_model(
            candidate,
            {k: v for k, v in feeds.items() if k in taken},
            "optimized model",
            base_dir,
            timeout,
            weights=weights,
        )
    except RuntimeUnsupportedError as error:
        return VerificationResult(False, error=str(error), tolerance=tolerance)
    names = [o.name for o in original.graph.output]
    comparisons = compare_outputs(names, expected, actual, tolerance)
    if not all(c.ok for c in comparisons) and tolerance.ort_rounding > 0:
        comparisons = _within_runtime_rounding(original, reference, comparisons, tolerance, base_dir, timeout)
    blind = _blind_outputs(original, inputs, seed, reference, base_dir, timeout) if blind_spots else set()
    comparisons = [
        replace(c, note="; ".join(filter(None, [c.note, BLIND_NOTE]))) if c.name in blind else c for c in comparisons
    ]
    return VerificationResult(all(c.ok for c in comparisons), comparisons, tolerance=tolerance)


BLIND_NOTE = (
    "the same, bit for bit, on random inputs of another seed: this check sees little of what a change does to it "
    "on real inputs; give some with --inputs"
)


def _blind_outputs(
    original: onnx.ModelProto,
    inputs: InputsLike,
    seed: int,
    reference: Reference,
    base_dir: Path | None,
    timeout: float,
) -> set[str]:
    """Float outputs computed from the random inputs that come out the same, bit for bit, when the original runs
    on random inputs of another seed (same sizes, the given inputs as they were). A comparison of such an
    output passes whatever a rewrite did to whatever saturated it: PP-OCRv4's text detector and its seal
    detector give a map of exact zeros for any random image. An output no input reaches (anchors, a constant)
    is not named: every run checks it whole."""
    spec = InputSpec.of(inputs)
    drawn = [name for name in reference.feeds if name not in spec.given]
    reached = _reached_by(original.graph, set(drawn))
    floats = [
        (index, value.name)
        for index, value in enumerate(original.graph.output)
        if value.name in reached
        and np.asarray(reference.outputs[index]).dtype.kind == "f"
        and np.asarray(reference.outputs[index]).size > 0
    ]
    if not drawn or not floats:
        return set()
    shapes = {name: list(np.shape(reference.feeds[name])) for name in drawn}
    try:
        other = InputSpec(shapes, {k: v for k, v in reference.feeds.items() if k not in drawn}).feeds(
            original, seed + 1
        )
        if all(np.array_equal(other[name], reference.feeds[name]) for name in drawn):
            return set()  # nothing random to vary (an input of one boolean, say)
        outputs = run_model(original, other, "input model", base_dir, timeout)
    except (RuntimeUnsupportedError, SettingsError):
        return set()  # other values this model does not run on: it says nothing either way
    return {
        name
        for index, name in floats
        if np.array_equal(np.asarray(outputs[index]), np.asarray(reference.outputs[index]))
    }


def _reached_by(graph: onnx.GraphProto, names: set[str]) -> set[str]:
    """Values of ``graph`` computed from ``names``: a node's outputs are, when one of its inputs is (a node with a
    body counts as reached when any input or any name it reads from outside is: the bodies are not followed)."""
    reached = set(names)
    for node in graph.node:  # topological order
        if reached & {*node.input, *subgraph_captures(node)}:
            reached.update(node.output)
    return reached


def _within_runtime_rounding(
    original: onnx.ModelProto,
    reference: Reference,
    comparisons: list[OutputComparison],
    tolerance: Tolerance,
    base_dir: Path | None,
    timeout: float,
) -> list[OutputComparison]:
    """``comparisons``, with an output that missed the tolerance accepted when ONNX Runtime's own graph
    optimizations move it as far: float32 arithmetic reordered (a BatchNormalization folded into a Conv,
    a fused activation) differs from the original by rounding, which grows with depth and with real
    inputs' magnitudes (a 60-layer detector on real images: 1.7e-4 from ORT itself). The original runs once
    more, with every ORT optimization on; an output stays a mismatch unless it is within
    ``tolerance.ort_rounding`` times that distance, and the note says what was measured."""
    try:
        optimized = run_model(
            original, reference.feeds, "input model", base_dir, timeout, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        )
    except RuntimeUnsupportedError:
        return comparisons
    result = []
    for comparison, want, got in zip(comparisons, reference.outputs, optimized, strict=True):
        if comparison.ok or comparison.note or np.asarray(want).dtype.kind != "f":
            result.append(comparison)
            continue
        rounding = float(np.max(np.abs(np.asarray(got, np.float64) - want), initial=0.0))
        if 0.0 < comparison.max_abs_diff <= tolerance.ort_rounding * rounding:
            note = f"within ONNX Runtime's own rounding: its optimizations move this output by {rounding:.3g}"
            comparison = replace(comparison, ok=True, note=note)
        result.append(comparison)
    return result
