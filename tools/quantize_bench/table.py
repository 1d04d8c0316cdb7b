"""The benchmark's rows, their Markdown, and the geometric means the issue asks for.

A quantizer that wrote no file, or one ORT refuses, leaves the user with the fp32 model: in the geometric
means it counts 1.00x (so a tool is not flattered by dropping the models it broke), and a second mean
counts 1.00x also for a valid file whose agreement is under the goal's 0.99.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from onnxsat.timing import geometric_mean

AGREEMENT_GOAL = 0.99
FP32 = "ORT-all fp32"


@dataclass
class Row:
    model: str
    quantizer: str
    valid: str
    """``yes``, ``no: why`` (ORT refused it), or ``-`` (no file written)."""
    latency: str
    """The fp32 row: its median ms; the others: speedup over it with its interval."""
    score: str
    size_mb: float | None
    seconds: float | None
    note: str = ""
    speedup: float | None = None
    score_value: float | None = None
    labelled: bool = False


HEADER = ("model", "quantizer", "valid", "latency / speedup", "held-out score", "size MB", "seconds", "note")


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in rows:
        size = "" if row.size_mb is None else f"{row.size_mb:.2f}"
        seconds = "" if row.seconds is None else f"{row.seconds:.1f}"
        values = (row.model, row.quantizer, row.valid, row.latency, row.score, size, seconds, row.note)
        lines.append("| " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(lines)


def effective_speedup(row: Row | None, least_agreement: float | None = None) -> float:
    """The speedup a user gets from the row: 1.0 without a valid file (or under ``least_agreement``)."""
    if row is None or row.speedup is None:
        return 1.0
    if least_agreement is not None and (row.score_value is None or row.score_value < least_agreement):
        return 1.0
    return row.speedup


def geomeans(rows: Sequence[Row], models: Sequence[str], quantizers: Sequence[str]) -> list[str]:
    """One line per quantizer: the geometric mean speedup over ``models`` (those present), plain and at the
    agreement goal."""
    present = [m for m in models if any(r.model == m for r in rows)]
    if not present:
        return []
    lines = []
    for quantizer in quantizers:
        found = [next((r for r in rows if r.model == m and r.quantizer == quantizer), None) for m in present]
        if all(r is None for r in found):
            continue
        plain = geometric_mean([effective_speedup(r) for r in found])
        goal = geometric_mean([effective_speedup(r, AGREEMENT_GOAL) for r in found])
        each = ", ".join(f"{m} {effective_speedup(r):.2f}x" for m, r in zip(present, found, strict=True))
        lines.append(
            f"- {quantizer}: geometric mean {plain:.2f}x over {len(present)} models ({each}); "
            f"{goal:.2f}x counting results under {AGREEMENT_GOAL:.0%} agreement as 1.00x"
        )
    return lines
