"""The pass core: what a model, a pass and a report are. Every capability builds on this module.

Every capability of ONNXSat (eqsat, sparsify, prune, surgeries, ORT's optimizers, sparse storage,
verify) is a :class:`Pass`. The runner (``onnxsat.runner``) does the rest once for all of them: load,
check, run the passes in order, write atomically only what verified, write the report. The command
line, the Python API and pipeline files all build passes and hand them to the runner.

A pass is a class registered under its ``kind`` (the ``type`` of a pipeline entry) by its class
statement (``class OrtPass(Pass, kind="ort")``), in the module of ``onnxsat.passes`` that defines it;
``passes.catalogue()`` imports them all. Reports derive from :class:`ReportBase`, so each has the same
three forms.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Protocol

import onnx

from onnxsat.config_check import checked_keys
from onnxsat.errors import SettingsError
from onnxsat.inputs import InputSpec
from onnxsat.options import RUN_SETTINGS
from onnxsat.registry import Registry
from onnxsat.verification import Tolerance, VerificationResult, verify


@dataclass
class Model:
    """A model and the folder its external data is read from (None: all of it is in the proto)."""

    proto: onnx.ModelProto
    base_dir: Path | None = None
    source: str = "<memory>"
    """Where it was read from, for reports."""

    def with_proto(self, proto: onnx.ModelProto) -> Model:
        """The same model's place, holding ``proto``: a result keeps reading unfolded weights from there."""
        return replace(self, proto=proto)


class Report(Protocol):
    """What every pass report offers: its verification, where it was written, and its three forms."""

    output: str | None
    written: bool
    verification: VerificationResult | None

    def to_dict(self) -> dict[str, Any]: ...

    def to_json(self) -> str: ...

    def to_table(self) -> str: ...

    def summary(self) -> list[str]:
        """A few lines saying what the pass did (the pipeline report's notices)."""
        ...


@dataclass
class RunFacts:
    """What a report says about the run around its pass: which inputs were given (and from which file),
    which were random, and what bringing the model to normal form changed."""

    inputs: dict[str, list[str]] = field(default_factory=dict)
    """``{"given": [...], "random": [...]}``, and ``"data": [...]`` when a pass fed one from ``--data``: the
    model's inputs by where their values came from (random ones still feed the verification, unless the
    report says otherwise)."""
    inputs_file: str | None = None
    normal_form: list[str] = field(default_factory=list)
    sizes: str = ""
    """Said when the random inputs' unsized dynamic dims did not run at 1 and took larger sizes."""

    def lines(self) -> list[str]:
        source = f" ({self.inputs_file})" if self.inputs_file else ""
        given = [f"{name} given{source}" for name in self.inputs.get("given", [])]
        data = [f"{name} from the data" for name in self.inputs.get("data", [])]
        random = [f"{name} random" for name in self.inputs.get("random", [])]
        lines = [f"inputs: {', '.join(given + data + random)}"] if given or data or random else []
        lines += [f"sizes: {self.sizes}"] if self.sizes else []
        return lines + [f"normal form: {line}" for line in self.normal_form]


def json_safe(value: Any) -> Any:
    """``value`` with every float NaN as None and every infinity as the string ``"inf"`` or ``"-inf"``: JSON has
    no such numbers, and strict parsers (a browser's ``JSON.parse``, jq) refuse Python's ``NaN`` token."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


class ReportBase:
    """``to_json`` and ``to_text`` from ``to_dict`` and ``to_table``, the same for every report type."""

    sort_json_keys: ClassVar[bool] = True

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_table(self) -> str:
        raise NotImplementedError

    def summary(self) -> list[str]:
        return []

    def to_json(self) -> str:
        data = self.to_dict()
        facts = getattr(self, "run_facts", None)
        if facts is not None:
            data["run"] = asdict(facts)
        return json.dumps(json_safe(data), indent=2, sort_keys=self.sort_json_keys, default=str, allow_nan=False)

    def to_text(self) -> str:
        facts = getattr(self, "run_facts", None)
        return "\n".join([self.to_table(), *(facts.lines() if facts is not None else [])])

    def record_run(self, facts: RunFacts) -> None:
        """The runner's facts about the run (inputs given or random, normal form), shown with the report."""
        self.run_facts = facts

    def record_phase(self, name: str, seconds: float) -> None:
        """Time the runner spent on this report's behalf (``load``, ``save``), for reports that show phases."""


@dataclass
class PassContext:
    """What every pass of one run sees: the run's shared settings and the model ``verify`` compares against.

    ``reference`` starts as the run's input and becomes each lossy pass's result (sparsify, prune, a
    surgeon that changes numerics): after a deliberate loss, the next check is that nothing *else*
    changed the outputs.
    """

    inputs: InputSpec = field(default_factory=InputSpec)
    """The inputs the user gave and sizes for the random ones: every run of a model uses them."""
    tolerance: Tolerance = field(default_factory=Tolerance)
    data: str | None = None
    """Data for the passes that take it, unless a pass names its own."""
    reference: onnx.ModelProto | None = None
    reference_name: str = "the input model"
    run_timeout: float | None = None
    """Seconds each verification run under ONNX Runtime may take (None: the verifier's default)."""
    restated_inputs: tuple[str, ...] = ()
    """Graph inputs of the file as given that only restated an initializer, which the normal form read as
    constants: the file runs slower than the model the first pass sees (ONNX Runtime neither folds nor
    prepacks an input), so a pass that times the original also times its result against the file's form."""


@dataclass
class PassResult:
    """One pass's result: the model, what it checked, a few lines saying what it did, and its report."""

    model: onnx.ModelProto
    verification: VerificationResult | None
    notices: list[str] = field(default_factory=list)
    rebase: bool = False
    """Later ``verify`` passes compare against this result (a deliberate loss, or a new interface)."""
    report: Any = None
    """The pass's own report object (:class:`Report`), if it has one."""

    @property
    def over_budget(self) -> str:
        """Why the result is outside its accuracy budget on data its search never used, beyond that data's
        sampling error ("" when it is not): that score is the budget's honest check, and a result it refutes
        is not written unless forced."""
        held = getattr(self.report, "held_out", None)
        if held is None or not held.refuted:
            return ""
        samples = held.score.samples
        if held.as_is:
            return (
                f"held-out drop {held.drop:.2%} is over the budget (on {samples} samples the search never used; "
                "its metric gives no per-sample measure, so the drop is held as it is: a metric of your own can "
                "return one score per sample)"
            )
        return (
            f"held-out drop {held.drop:.2%} is over the budget beyond its sampling error (on {samples} samples "
            "the search never used)"
        )

    @property
    def ok(self) -> bool:
        return self.verification is not None and self.verification.ok and not self.over_budget

    @property
    def details(self) -> dict[str, Any]:
        return self.report.to_dict() if self.report is not None else {}


class Pass(ABC):
    """Base of every pass. A pass names its kind (the ``type`` of a pipeline entry) in its class statement,
    which registers it: ``class OrtPass(Pass, kind="ort")``; ``register=False`` keeps a pass out of the
    registry (one used directly, in tests).
    """

    kind: ClassVar[str]
    result_name: ClassVar[str] = "the result"
    """How a refusal names the result: "the sparsified model failed verification; nothing was written"."""
    checks_input: ClassVar[bool] = False
    """The pass runs the ONNX checker on its input itself, so the runner need not."""
    weights_on_disk: ClassVar[bool] = False
    """The pass reads weight values only through ``external_data.tensor_value`` with the model's folder, so
    a run made of such passes may leave a large model's weights in its file (``inline_weights``)."""
    dense_weights: ClassVar[bool] = False
    """The pass reads and rewrites weights among ``graph.initializer`` only: the runner gives it weights stored as
    ``sparse_initializer`` dense (``normal_form.densify_sparse_initializers``)."""

    def __init_subclass__(
        cls, kind: str | None = None, result_name: str | None = None, register: bool = True, **rest: Any
    ) -> None:
        super().__init_subclass__(**rest)
        if result_name is not None:
            cls.result_name = result_name
        if kind is not None:
            cls.kind = kind
            if register:
                PASSES.register(kind, cls)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], place: str) -> Pass:
        """The pass a pipeline entry describes (``config`` without its ``type``), every key checked.

        Passes that are dataclasses take their fields as keys; passes with an options dataclass
        (``options_class``) take its fields, except the settings the run shares.
        """
        options_class = getattr(cls, "options_class", None)
        if options_class is not None:
            kwargs = checked_keys(options_class, config, place, f"the {cls.kind} pass", ("type",), RUN_SETTINGS)
            instance = cls(options_class(**kwargs))  # type: ignore[call-arg]
        else:
            instance = cls(**checked_keys(cls, config, place, f"the {cls.kind} pass", ignore=("type",)))
        instance.check(place)
        return instance

    def check(self, place: str) -> None:  # noqa: B027  (most passes have nothing beyond the types to check)
        """Raise a SettingsError naming ``place`` for settings the types alone do not rule out (before
        anything runs)."""

    @abstractmethod
    def run(self, model: Model, context: PassContext) -> PassResult:
        """The pass applied to ``model`` (never modified)."""

    def refusal(self) -> str:
        """The message when this pass's result fails verification and nothing is forced."""
        return f"{self.result_name} failed verification; nothing was written"

    def data_specs(self) -> dict[str, str]:
        """The data the pass reads, by option name (``data``, ``eval_data``): a path or a built-in set."""
        return {}

    def files_read(self) -> list[Path]:
        """Files the pass reads beside the model (its data): nothing the run writes may replace them."""
        return [Path(spec) for spec in self.data_specs().values() if Path(spec).is_file()]


def run_check(place: str, check: Callable[[], object]) -> None:
    """Run ``check()`` and prefix a SettingsError it raises with ``place``."""
    try:
        check()
    except SettingsError as error:
        raise SettingsError(f"{place}: {error}") from None


def lossless(context: PassContext, before: Model, after: onnx.ModelProto, notices: list[str]) -> PassResult:
    """A result that must compute what ``before`` computed, compared on the run's seeded inputs."""
    result = verify(before.proto, after, context.inputs, context.tolerance, base_dir=before.base_dir)
    return PassResult(after, result, notices)


DATA_OPTIONS = ("data", "eval_data")
"""Options that name data a pass reads (a path, or a built-in set such as ``digits``)."""


class OptionsPass(Pass):
    """A pass whose settings are one options dataclass (``options_class``; see ``onnxsat.options``) and
    whose work is one function, ``transform(model, options, source=..., base_dir=...) -> (model, report)``:
    the options' fields are the pass's pipeline keys, the run's shared settings replace the options' own,
    and the report's ``summary()`` gives the pipeline report's lines. ``lossy`` results become the
    reference later ``verify`` passes compare against."""

    options: Any
    options_class: ClassVar[type]
    transform: ClassVar[Callable[..., tuple[onnx.ModelProto, Any]]]
    lossy: ClassVar[bool] = False

    def __init_subclass__(
        cls,
        options_class: type | None = None,
        transform: Callable[..., tuple[onnx.ModelProto, Any]] | None = None,
        lossy: bool = False,
        checks_input: bool = False,
        weights_on_disk: bool = False,
        dense_weights: bool = False,
        **rest: Any,
    ) -> None:
        if options_class is not None and transform is not None:
            cls.options_class, cls.transform = options_class, staticmethod(transform)  # type: ignore[assignment]
            cls.lossy, cls.checks_input, cls.weights_on_disk = lossy, checks_input, weights_on_disk
            cls.dense_weights = dense_weights
        super().__init_subclass__(**rest)

    def check(self, place: str) -> None:
        run_check(place, self.options.check)

    def run(self, model: Model, context: PassContext) -> PassResult:
        options, transform = self.options_for(context), type(self).transform
        result, report = transform(model.proto, options, source=model.source, base_dir=model.base_dir)
        return PassResult(result, report.verification, report.summary(), rebase=self.lossy, report=report)

    def data_specs(self) -> dict[str, str]:
        values = {name: getattr(self.options, name, None) for name in DATA_OPTIONS}
        return {name: value for name, value in values.items() if isinstance(value, str)}

    def options_for(self, context: PassContext) -> Any:
        """The options with the run's settings in: its inputs, tolerance and verification timeout,
        and its data unless the pass names its own."""
        names = {f.name for f in fields(self.options)}
        shared: dict[str, Any] = {"inputs": context.inputs, "tolerance": context.tolerance}
        if context.run_timeout is not None:
            shared["run_timeout"] = context.run_timeout
        shared["restated_inputs"] = context.restated_inputs
        if "data" in names:
            shared["data"] = self.options.data or context.data
        return replace(self.options, **{key: value for key, value in shared.items() if key in names})


PASSES: Registry[type[Pass]] = Registry("pass", "pass")
"""Pass kind (the ``type`` key of a pipeline entry) -> its class, in registration order."""
