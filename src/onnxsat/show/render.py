"""DOT text -> PNG or SVG bytes through Graphviz's ``dot`` program.

Graphviz, not matplotlib, draws every ONNXSat picture of a graph: a model graph or an e-graph needs a
layered layout with edges routed around boxes, which ``dot`` does and a plotting library does not. The
Python ``graphviz`` package (already required by egglog) only runs the ``dot`` program, which is a
system package; when it is missing the user is told what to install instead of seeing a traceback.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from onnxsat.errors import MissingToolError, SettingsError

FORMATS = ("png", "svg")
INSTALL_HINT = (
    "Graphviz's `dot` program is needed to draw graphs and was not found on PATH; install Graphviz "
    "(Debian/Ubuntu: `apt-get install graphviz`, Fedora: `dnf install graphviz`, macOS: `brew install graphviz`)"
)


def dot_available() -> bool:
    """Whether Graphviz's ``dot`` can be run (the HTML pages leave their graph pictures out without it)."""
    return shutil.which("dot") is not None


def picture_format(path: str | Path) -> str:
    """``png`` or ``svg`` from the output file's suffix; anything else is refused before work is done."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise SettingsError(f"-o must end in .png or .svg (got {str(path)!r})")
    return suffix


def render(dot_source: str, fmt: str) -> bytes:
    """Lay out and draw ``dot_source`` as ``fmt`` (``png`` or ``svg``)."""
    import graphviz

    if not dot_available():
        raise MissingToolError(INSTALL_HINT)
    try:
        return graphviz.Source(dot_source).pipe(format=fmt, quiet=True)
    except graphviz.ExecutableNotFound:
        raise MissingToolError(INSTALL_HINT) from None
