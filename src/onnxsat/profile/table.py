"""How a profile is shown: a text table per layer and in total, two models side by side, or JSON.

The side-by-side view compares two models (typically original and optimized): share of operators
fused, MACs, parameters and memory of each, and each figure's reduction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from onnxsat.core import json_safe
from onnxsat.profile.counting import LayerProfile, ModelProfile


def reduction_percent(original: int, other: int) -> float | None:
    """How much smaller ``other`` is, in percent of ``original`` (negative if it grew; None if nothing to reduce)."""
    return 100.0 * (original - other) / original if original else None


@dataclass(frozen=True)
class Comparison:
    """Two profiles of the same network: the original and, say, its optimized or pruned form."""

    original: ModelProfile
    other: ModelProfile

    @property
    def fused_percent(self) -> float | None:
        """Share of the original's nodes that are gone from the other ("% of operators fused")."""
        return reduction_percent(len(self.original.layers), len(self.other.layers))

    def figures(self) -> dict[str, tuple[int, int]]:
        """Figure name -> (original, other)."""
        return {
            "nodes": (len(self.original.layers), len(self.other.layers)),
            "macs": (self.original.macs, self.other.macs),
            "params": (self.original.params, self.other.params),
            "memory_bytes": (self.original.memory_bytes, self.other.memory_bytes),
        }

    @property
    def uncounted_ops(self) -> tuple[str, ...]:
        """Ops of either model with no MAC rule (counted 0): their MACs do not compare."""
        return tuple(sorted(set(self.original.uncounted_ops) | set(self.other.uncounted_ops)))

    def reduction(self, name: str) -> float | None:
        """``name``'s reduction in percent; None when there is nothing to reduce or MACs do not compare."""
        if name == "macs" and self.uncounted_ops:
            return None
        return reduction_percent(*self.figures()[name])

    def to_dict(self) -> dict[str, object]:
        reductions = {f"{name}_reduction_percent": self.reduction(name) for name in self.figures() if name != "nodes"}
        return {"fused_percent": self.fused_percent, **reductions}  # the nodes' reduction is the fused percentage


def profile_json(profile: ModelProfile, path: str) -> str:
    return json.dumps(json_safe({"model": path, **profile.to_dict()}), indent=2, allow_nan=False)


def comparison_json(comparison: Comparison, original_path: str, other_path: str) -> str:
    models = [
        {"model": original_path, **comparison.original.to_dict()},
        {"model": other_path, **comparison.other.to_dict()},
    ]
    return json.dumps(json_safe({"models": models, "comparison": comparison.to_dict()}), indent=2, allow_nan=False)


def profile_table(profile: ModelProfile, path: str, layers: int) -> str:
    """Header, the ``layers`` layers with the most MACs (in graph order), totals and op-type counts."""
    lines = [_header(profile, path)]
    if layers:
        lines.extend(_layer_rows(profile.layers, layers))
    total = ["total", f"{len(profile.layers)} nodes", "", f"{profile.macs:,}", f"{profile.params:,}"]
    lines.append(_row([*total, f"{profile.memory_bytes:,}"]))
    lines.append("op types: " + _op_counts(profile))
    lines.extend(_notes(profile))
    return "\n".join(lines)


def comparison_table(comparison: Comparison, original_path: str, other_path: str, layers: int) -> str:
    """Each model's own table, then the side-by-side totals and their reductions."""
    parts = [
        profile_table(comparison.original, original_path, layers),
        profile_table(comparison.other, other_path, layers),
    ]
    names = {"nodes": "nodes", "macs": "MACs", "params": "params", "memory_bytes": "memory (bytes)"}
    rows = [["", "original", "other", "reduction"]]
    for key, (before, after) in comparison.figures().items():
        rows.append([names[key], f"{before:,}", f"{after:,}", _change(comparison, key)])
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    side = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    ops = sorted(set(comparison.original.op_counts) | set(comparison.other.op_counts))
    changed = [
        f"{op} {comparison.original.op_counts.get(op, 0)} -> {comparison.other.op_counts.get(op, 0)}"
        for op in ops
        if comparison.original.op_counts.get(op, 0) != comparison.other.op_counts.get(op, 0)
    ]
    side.append("op types changed: " + (", ".join(changed) or "none"))
    parts.append(f"original: {original_path}\nother:    {other_path}\n" + "\n".join(side))
    return "\n\n".join(parts)


def _change(comparison: Comparison, key: str) -> str:
    """``12.50% fused`` / ``12.50% less``, ``3.10% more`` when it grew, or why there is no figure."""
    change = comparison.reduction(key)
    if change is None:
        uncounted = comparison.uncounted_ops
        return f"not comparable: no MAC rule for {', '.join(uncounted)}" if key == "macs" and uncounted else "-"
    if change < 0:
        return f"{-change:.2f}% more"
    return f"{change:.2f}% {'fused' if key == 'nodes' else 'less'}"


_WIDTHS = (28, 24, 20, 16, 12, 14)


def _row(cells: list[str]) -> str:
    text = [cells[0][: _WIDTHS[0]].ljust(_WIDTHS[0]), cells[1][: _WIDTHS[1]].ljust(_WIDTHS[1])]
    text.append(cells[2].ljust(_WIDTHS[2]))
    text.extend(cell.rjust(width) for cell, width in zip(cells[3:], _WIDTHS[3:], strict=True))
    return " ".join(text).rstrip()


def _header(profile: ModelProfile, path: str) -> str:
    inputs = ", ".join(f"{name} [{','.join(map(str, shape))}]" for name, shape in profile.input_shapes.items())
    title = f"{path}: inputs {inputs or 'none'}; shapes from {profile.shape_method}"
    return title + "\n" + _row(["layer", "op", "output shape", "MACs", "params", "memory (B)"])


def _layer_rows(all_layers: tuple[LayerProfile, ...], count: int) -> list[str]:
    """Rows of the ``count`` heaviest layers by MACs, kept in graph order, and a line for the rest."""
    heaviest = set(sorted(range(len(all_layers)), key=lambda i: -all_layers[i].macs)[:count])
    rows = []
    for index, layer in enumerate(all_layers):
        if index in heaviest:
            shape = ("x".join(map(str, layer.output_shapes[0])) or "scalar") if layer.output_shapes else "-"
            figures = [f"{layer.macs:,}", f"{layer.params:,}", f"{layer.memory_bytes:,}"]
            rows.append(_row([layer.name, layer.kind, shape, *figures]))
    hidden = len(all_layers) - len(rows)
    if hidden:
        rows.append(f"... {hidden} more layers with fewer MACs not shown (--layers N shows more)")
    return rows


def _op_counts(profile: ModelProfile) -> str:
    return ", ".join(f"{op} {count}" for op, count in profile.op_counts.items()) or "none"


def _notes(profile: ModelProfile) -> list[str]:
    notes = []
    if profile.uncounted_ops:
        notes.append(f"note: no MAC rule for {', '.join(profile.uncounted_ops)}; counted as 0")
    if profile.per_iteration:
        loops = ", ".join(profile.per_iteration)
        notes.append(f"note: {loops} counted for one iteration: the trip count is computed at run time")
    if profile.unsized:
        notes.append(f"note: {profile.unsized} nodes inside bodies counted as 0: their shapes are not known")
    read = sum(layer.params for layer in profile.layers)
    if read != profile.params:
        notes.append(f"note: params include {profile.params - read:,} elements of initializers no node reads")
    return notes
