"""What every benchmark that writes files shares: Markdown tables, PNG files, CSV rows, settings JSON.

Experiments 1-3 write the same kinds of files (PNG plots, a Markdown table, the run's settings with the
environment), so the writers live here once. The environment itself is ``timing.environment`` (what a
timing depends on), and figures are made by ``html.charts.new_figure`` (one Agg canvas for pages and files).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING

from onnxsat import model_io
from onnxsat.core import json_safe

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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
    return json.dumps(json_safe(data), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n"
