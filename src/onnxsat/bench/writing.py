"""What every benchmark that writes files shares: the environment it ran in, Markdown tables, figures.

Experiments 1-3 write the same kinds of files (PNG plots, a Markdown table, the run's settings with the
environment), so the writers live here once.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict, fields
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from onnxsat import model_io

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def environment() -> dict[str, object]:
    """Versions and CPUs that the figures depend on."""
    versions = {}
    for package in ("onnxruntime", "onnx", "numpy", "matplotlib"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
        **versions,
    }


def environment_line(env: dict[str, object]) -> str:
    packages = ", ".join(f"{name} {env[name]}" for name in ("onnxruntime", "onnx", "numpy", "matplotlib"))
    return (
        f"environment: python {env['python']}, {env['cpu_count']} CPUs ({env['usable_cpus']} usable), "
        f"{env['machine']}; {packages}"
    )


def model_labels(paths: Sequence[str | Path]) -> list[str]:
    """File stems, numbered when two models share one."""
    stems = [Path(p).stem for p in paths]
    return [f"{i + 1}-{s}" if stems.count(s) > 1 else s for i, s in enumerate(stems)]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table: the first column left-aligned, the others right-aligned."""
    escape = [[cell.replace("|", "\\|") for cell in row] for row in (header, *rows)]
    lines = ["| " + " | ".join(escape[0]) + " |", "| --- | " + " | ".join("---:" for _ in header[1:]) + " |"]
    return lines + ["| " + " | ".join(row) + " |" for row in escape[1:]]


def write_bytes(data: bytes, path: Path) -> None:
    """All or nothing, as every other ONNXSat output."""
    model_io.write_bytes_atomic(data, path)


def save_figure(figure: Figure, path: Path) -> None:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    write_bytes(buffer.getvalue(), path)


def new_figure(width: float, height: float) -> Figure:
    """A matplotlib figure on the Agg canvas: no pyplot, so no global backend or state is touched."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def csv_text(rows: Sequence[object], kind: type) -> str:
    """Dataclass rows of type ``kind`` as CSV, one column per field, floats to six digits."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    names = [f.name for f in fields(kind)]
    writer.writerow(names)
    for row in rows:
        values = asdict(row)
        writer.writerow([f"{values[n]:.6g}" if isinstance(values[n], float) else values[n] for n in names])
    return out.getvalue()


def settings_json(settings: object, env: dict[str, object], extra: dict[str, object]) -> str:
    """``settings`` (any experiment's settings dataclass), the environment and ``extra`` as JSON."""
    data = {"settings": asdict(settings), "environment": env, **extra}
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
