"""``--html PATH``: a command's report as one self-contained HTML page (tables, charts, graph pictures).

``page.py`` builds and writes a page; one module per report kind fills it (``optimize``, ``sparsify``,
``prune`` with ``bench prune``, ``bench`` for ``bench compare`` and ``bench experiment``). The commands
check the path before any work (``check_html_path``) and write the page last, atomically; like
``--report``, a page is written also when verification refused the result, since that is when it is read
(``commands/printing.py``).
"""

from __future__ import annotations

from onnxsat.html.page import Page, check_html_path, write_page

__all__ = ["Page", "check_html_path", "write_page"]
