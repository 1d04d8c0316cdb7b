"""What experiments 2 and 3 share: settings, environment, datasets, and the markdown, CSV and figure writers.

Without ``data``, inputs are seeded standard-normal samples and the metric is fidelity; a model whose batch
dim is fixed is fed batches of exactly that size (samples are trimmed to a multiple). Sparsity is zeros /
elements over the prunable weights (Conv, ConvTranspose, Gemm, MatMul weights); biases and other tensors are
not counted. Drops are baseline minus pruned, as fractions; the markdown shows them as points.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsat import model_io
from onnxsat.bench.writing import csv_text, model_labels, save_figure, settings_json
from onnxsat.data.metrics import Accuracy
from onnxsat.data.model_input import input_dims, random_dataset
from onnxsat.data.sources import Dataset, load_dataset
from onnxsat.errors import SettingsError
from onnxsat.metrics import Score
from onnxsat.sparsity.methods import METHODS
from onnxsat.sparsity.targets import SparsityTarget, sparsity_targets
from onnxsat.timing import environment

CLASSIFIER_METRICS = ("top1", "top5")
"""The experiments measure classifiers, and report both figures."""

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from onnxsat.bench.sparsity.experiment2 import LevelRow
    from onnxsat.bench.sparsity.experiment3 import TimingRow

DEFAULT_LEVELS = tuple(round(0.10 + 0.05 * step, 2) for step in range(16))
"""10% to 85% in steps of 5%: the sparsity levels experiment 2 sweeps by default."""
RANDOM_SEED = 0
"""Seed of the standard-normal inputs used when no data is given."""

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ settings


@dataclass
class SparsityExperimentSettings:
    """What both experiments run on and how; every field is written to the settings JSON."""

    models: list[Path]
    out: Path
    methods: list[str] = field(default_factory=lambda: ["relative"])
    """Any of ``METHODS``; experiment 3 searches with the first."""
    data: str | None = None
    """A ``load_dataset`` spec; None: seeded random inputs (``samples`` of them) and fidelity to the dense model."""
    samples: int = 256
    budget: float = 0.05
    """Largest allowed drop of ``metric``, a fraction (0.05 = 5 points)."""
    metric: str = "top5"
    levels: list[float] = field(default_factory=lambda: list(DEFAULT_LEVELS))
    threads: int = 1
    rounds: int = 50
    warmup: int = 10
    batch_size: int = 32
    """Evaluation batch, and the batch throughput is measured at (unless the model fixes its batch)."""

    def check(self) -> None:
        """Reject what cannot run, in one line each; sort and de-duplicate the levels."""
        if not self.models:
            raise SettingsError("give at least one model")
        if not self.methods:
            raise SettingsError("give at least one method")
        for method in self.methods:
            if method not in METHODS:
                raise SettingsError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
        if len(set(self.methods)) != len(self.methods):
            raise SettingsError(f"a method is listed twice: {', '.join(self.methods)}")
        if self.metric not in CLASSIFIER_METRICS:
            raise SettingsError(f"unknown metric {self.metric!r}; choose from {', '.join(CLASSIFIER_METRICS)}")
        if not 0.0 <= self.budget < 1.0:
            raise SettingsError(f"--budget must be in [0%, 100%), got {self.budget:.2%}")
        if not self.levels or any(not 0.0 <= level < 1.0 for level in self.levels):
            raise SettingsError(f"--levels must be one or more values in [0, 1), got {list(self.levels)}")
        self.levels = sorted({float(level) for level in self.levels})
        counts = {"--samples": self.samples, "--threads": self.threads, "--rounds": self.rounds}
        for option, value in {**counts, "--batch-size": self.batch_size}.items():
            if value < 1:
                raise SettingsError(f"{option} must be at least 1, got {value}")
        if self.warmup < 0:
            raise SettingsError(f"--warmup must be at least 0, got {self.warmup}")
        self.models = [Path(model) for model in self.models]
        for model in self.models:
            model_io.check_input_path(model)

    def prepare_out(self) -> Path:
        """The output folder, created if needed (an OutputPathError line if it cannot be)."""
        folder = model_io.output_folder(str(self.out), "--out")
        assert folder is not None
        self.out = folder
        return folder


@dataclass
class ExperimentResult:
    """What one experiment wrote and measured; ``markdown`` is what the CLI prints."""

    experiment: int
    paths: list[Path]
    rows: list[LevelRow] | list[TimingRow]
    markdown: str
    details: dict[str, object] = field(default_factory=dict)
    """The settings JSON's content: settings, environment and per-model facts."""


# ------------------------------------------------------------------------------------ shared helpers


def fixed_batch(model: onnx.ModelProto) -> int | None:
    dims = input_dims(model)
    return dims[0] if dims else None


def sample_count(settings: SparsityExperimentSettings, batch: int | None, label: str) -> int:
    """``samples``, trimmed to a multiple of a fixed batch (the evaluator feeds whole batches only)."""
    step = batch or 1
    count = settings.samples // step * step
    if count == 0:
        raise SettingsError(f"{label}: --samples {settings.samples} is fewer than the model's fixed batch {step}")
    return count


def experiment_dataset(model: onnx.ModelProto, settings: SparsityExperimentSettings, label: str) -> Dataset:
    """The samples both experiments measure a model on: the data spec's, or seeded random inputs."""
    batch = fixed_batch(model)
    count = sample_count(settings, batch, label)
    if settings.data is None:
        return random_dataset(model, count, first_seed=RANDOM_SEED)
    dataset = load_dataset(settings.data, input_dims(model), limit=count)
    usable = len(dataset) // (batch or 1) * (batch or 1)
    if usable == 0:
        raise SettingsError(f"{label}: {dataset.name} has {len(dataset)} samples, fewer than the fixed batch {batch}")
    return dataset.take(usable)


def weights_of(model: onnx.ModelProto, targets: list[SparsityTarget]) -> dict[str, np.ndarray]:
    names = {t.name for t in targets}
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name in names}


def targets_of(model: onnx.ModelProto, label: str) -> list[SparsityTarget]:
    targets = sparsity_targets(model)
    if not targets:
        raise SettingsError(f"{label}: no prunable weights (Conv, ConvTranspose, Gemm or MatMul initializers)")
    return targets


def prunable_sparsity(model: onnx.ModelProto, names: Sequence[str]) -> float:
    """Zeros / elements over the named weights, whether stored dense or as sparse initializers."""
    wanted, zeros, total = set(names), 0, 0
    for tensor in model.graph.initializer:
        if tensor.name in wanted:
            value = numpy_helper.to_array(tensor)
            zeros, total = zeros + value.size - int(np.count_nonzero(value)), total + value.size
    for sparse in model.graph.sparse_initializer:
        if sparse.values.name in wanted:
            size = math.prod(sparse.dims)
            zeros += size - int(np.count_nonzero(numpy_helper.to_array(sparse.values)))
            total += size
    return zeros / total if total else 0.0


def points(drop: float) -> str:
    """A drop (fraction) as the signed change in points the tables show: 0.012 -> "-1.2"."""
    change = -drop * 100
    return f"{change:+.1f}" if abs(change) >= 0.05 else "0.0"


def metric_value(accuracy: Accuracy, metric: str) -> float:
    return accuracy.top1 if metric == "top1" else accuracy.top5


def as_accuracy(score: Score) -> Accuracy:
    """A budget's top-1/top-5 score as the experiments' Accuracy (both figures, "fidelity" without labels)."""
    top1, top5 = score.detail("top1"), score.detail("top5")
    if top1 is None or top5 is None:
        raise ValueError(f"the experiments score classifiers: {score.metric} has no top-1/top-5 figures")
    return Accuracy(top1, top5, score.samples, "accuracy" if score.kind == "accuracy" else "fidelity")


def level_text(level: float) -> str:
    return f"{level * 100:.4g}%"


# ---------------------------------------------------------------------------------------- write-out

Facts = TypeVar("Facts")
Row = TypeVar("Row")


def run_experiment(
    number: int,
    settings: SparsityExperimentSettings,
    progress: Progress | None,
    measure: Callable[[Path, str, SparsityExperimentSettings, Progress], tuple[Facts, list[Row]]],
    write_up: Callable[[list[Facts], list[Row], SparsityExperimentSettings, dict[str, object]], str],
    figures: dict[str, Callable[[list[Row], list[Facts]], Figure]],
    row_type: type,
    how: dict[str, str],
) -> ExperimentResult:
    """Check the settings, ``measure`` every model, then write into ``settings.out`` the ``figures`` (file
    name: plot of the rows and facts), ``experiment{number}.csv``, ``.md`` and ``_settings.json`` (whose
    details say ``how`` the figures were measured), and report the files written in one progress line."""
    report = progress or _stderr
    settings.check()
    out = settings.prepare_out()
    env = environment()
    facts: list[Facts] = []
    rows: list[Row] = []
    for path, label in zip(settings.models, model_labels(settings.models), strict=True):
        fact, mine = measure(path, label, settings, report)
        facts.append(fact)
        rows.extend(mine)
    markdown = write_up(facts, rows, settings, env)
    written = [f"experiment{number}.csv", f"experiment{number}.md", f"experiment{number}_settings.json"]
    paths = [out / name for name in [*figures, *written]]
    for name, plot in figures.items():
        save_figure(plot(rows, facts), out / name)
    csv_path, md_path, json_path = paths[-3:]
    model_io.write_text_atomic(csv_text(rows, row_type), csv_path)  # type: ignore[arg-type]
    model_io.write_text_atomic(markdown + "\n", md_path)
    details = {
        "experiment": number,
        "models": [asdict(fact) for fact in facts],  # type: ignore[call-overload]
        **how,
        "random_seed": RANDOM_SEED if settings.data is None else None,
    }
    model_io.write_text_atomic(settings_json(settings, env, details), json_path)
    report(f"experiment {number}: wrote {', '.join(str(p) for p in paths)}")
    return ExperimentResult(number, paths, rows, markdown, details)  # type: ignore[arg-type]
