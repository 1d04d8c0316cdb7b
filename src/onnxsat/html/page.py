"""One self-contained HTML page: headings, tables, key facts and pictures, written atomically.

"Self-contained" is the point of ``--html``: the page is mailed, attached to an issue or archived, and
must show everything with no file beside it and no network. So the CSS is inline, every picture is a
``data:`` URI inside an ``<img>`` (matplotlib charts as PNG, Graphviz drawings as SVG), and nothing
refers to another URL. Every text that comes from a model or a path is escaped.

A short inline script runs once the page has loaded: it counts the pictures the browser could not
decode and, if any, shows a warning at the top. It records what it found on ``<body>``
(``data-images``, ``data-images-broken``), which is also how the tests read it from a headless browser.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from onnxsat import model_io
from onnxsat.errors import OutputPathError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 72em;
       padding: 0 1.5em; color: #1f2328; line-height: 1.45; }
h1 { font-size: 1.6em; border-bottom: 2px solid #d0d7de; padding-bottom: .3em; }
h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #d0d7de; padding-bottom: .2em; }
h3 { font-size: 1.05em; margin-top: 1.4em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .92em; }
th, td { border: 1px solid #d0d7de; padding: .3em .7em; }
th { background: #f6f8fa; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.bad td { background: #ffebe9; }
tr.good td.status { color: #1a7f37; font-weight: 600; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: .2em 1.2em; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; }
figure { margin: 1em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
figcaption { color: #57606a; font-size: .9em; }
p.note { color: #57606a; font-size: .92em; }
.status-ok { color: #1a7f37; font-weight: 600; }
.status-bad { color: #cf222e; font-weight: 600; }
#broken-images { display: none; background: #ffebe9; border: 1px solid #cf222e; padding: .5em 1em; }
footer { margin-top: 3em; color: #57606a; font-size: .85em; }
"""

_IMAGE_CHECK = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var broken = images.filter(function (img) { return !(img.complete && img.naturalWidth > 0); });
  document.body.setAttribute("data-images", String(images.length));
  document.body.setAttribute("data-images-broken", String(broken.length));
  if (broken.length > 0) {
    var box = document.getElementById("broken-images");
    box.textContent = broken.length + " picture(s) on this page could not be shown: "
      + broken.map(function (img) { return img.alt; }).join("; ");
    box.style.display = "block";
  }
});
"""

Cell = str | int | float | None


def _cell(value: Cell) -> tuple[str, bool]:
    """A table cell's text and whether it is a number (numbers are right-aligned)."""
    if value is None:
        return "–", False
    if isinstance(value, bool):
        return ("yes" if value else "no"), False
    if isinstance(value, int):
        return f"{value:,}", True
    if isinstance(value, float):
        return f"{value:.4g}", True
    return value, False


@dataclass
class Page:
    """An HTML page built block by block; ``render`` gives the whole document."""

    title: str
    subtitle: str = ""
    blocks: list[str] = field(default_factory=list)

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def paragraph(self, text: str, note: bool = False) -> None:
        css = ' class="note"' if note else ""
        self.blocks.append(f"<p{css}>{html.escape(text)}</p>")

    def status(self, ok: bool, text: str) -> None:
        """A one-line verdict in green or red (verification passed or failed)."""
        css = "status-ok" if ok else "status-bad"
        self.blocks.append(f'<p class="{css}">{html.escape(text)}</p>')

    def facts(self, pairs: Iterable[tuple[str, Cell]]) -> None:
        """Key facts as a two-column list (input, output, target...)."""
        items = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(_cell(v)[0])}</dd>" for k, v in pairs)
        self.blocks.append(f'<dl class="facts">{items}</dl>')

    def table(
        self,
        header: Sequence[str],
        rows: Iterable[Sequence[Cell]],
        caption: str = "",
        bad_rows: Iterable[int] = (),
    ) -> None:
        """A table; rows whose index is in ``bad_rows`` are tinted (a mismatch, a failed check)."""
        bad = set(bad_rows)
        lines = ["<table>"]
        if caption:
            lines.append(f"<caption>{html.escape(caption)}</caption>")
        lines.append("<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr></thead><tbody>")
        for index, row in enumerate(rows):
            cells = []
            for value in row:
                text, numeric = _cell(value)
                cells.append(
                    f'<td class="num">{html.escape(text)}</td>' if numeric else f"<td>{html.escape(text)}</td>"
                )
            css = ' class="bad"' if index in bad else ""
            lines.append(f"<tr{css}>" + "".join(cells) + "</tr>")
        lines.append("</tbody></table>")
        self.blocks.append("\n".join(lines))

    def image(self, data: bytes, mime: str, alt: str, caption: str = "") -> None:
        """A picture embedded as a ``data:`` URI (``image/png`` or ``image/svg+xml``)."""
        uri = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        text = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
        self.blocks.append(f'<figure><img src="{uri}" alt="{html.escape(alt)}">{text}</figure>')

    def figure(self, figure: Figure, alt: str, caption: str = "") -> None:
        """A matplotlib figure as an embedded PNG."""
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100)
        self.image(buffer.getvalue(), "image/png", alt, caption)

    def render(self) -> str:
        subtitle = f'<p class="note">{html.escape(self.subtitle)}</p>' if self.subtitle else ""
        body = "\n".join(self.blocks)
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(self.title)}</title>\n<style>{_STYLE}</style>\n"
            f"<script>{_IMAGE_CHECK}</script>\n</head>\n<body>\n"
            f'<div id="broken-images" role="alert"></div>\n<h1>{html.escape(self.title)}</h1>\n{subtitle}\n'
            f"{body}\n<footer>Written by ONNXSat.</footer>\n</body>\n</html>\n"
        )


def check_html_path(path: str | Path, inputs: Sequence[str | Path], outputs: Sequence[str | Path] = ()) -> Path:
    """Refuse, before any work, an ``--html`` path that is an input model, a written model or a folder."""
    target = Path(path)
    for source in inputs:
        target = model_io.check_output_path(source, path)
    for written in outputs:
        if written is not None and target.resolve() == Path(written).resolve():
            raise OutputPathError(f"--html path is also an output of this command: {target}")
    return target


def write_page(page: Page, path: str | Path) -> None:
    """All or nothing, as every ONNXSat output; UTF-8 whatever the locale (the page says so)."""
    model_io.write_bytes_atomic(page.render().encode("utf-8"), path)
