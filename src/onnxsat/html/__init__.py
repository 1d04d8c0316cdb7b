"""``--html PATH``: a command's report as one self-contained HTML page (tables, charts, graph pictures).

``page.py`` builds and writes a page; one module per report kind fills it (``optimize``, ``sparsify``,
``prune`` with ``bench prune``, ``bench`` for ``bench compare`` and ``bench experiment``). The commands
check the path before any work (``check_html_path``) and write the page last, atomically; like
``--report``, a page is written also when verification refused the result, since that is when it is read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from onnxsat.errors import VerificationFailedError
from onnxsat.html.page import Page, check_html_path, write_page

__all__ = ["Page", "check_html_path", "with_page", "write_page"]

R = TypeVar("R")


def with_page(
    run: Callable[[], R],
    path: str | None,
    page_of: Callable[[R], Page],
    inputs: Sequence[str | Path] = (),
    outputs: Sequence[str | Path | None] = (),
) -> Callable[[], R]:
    """``run`` that also writes ``page_of(report)`` to ``path`` (when given), from the report it returns or
    the one a :class:`VerificationFailedError` carries. The path is checked now, before ``run`` does any
    work, against the command's ``inputs`` and ``outputs`` (``check_html_path``)."""
    if path is None:
        return run
    check_html_path(path, inputs, outputs)

    def run_and_write() -> R:
        try:
            report = run()
        except VerificationFailedError as error:
            write_page(page_of(error.report), path)  # type: ignore[attr-defined]
            raise
        write_page(page_of(report), path)
        return report

    return run_and_write
