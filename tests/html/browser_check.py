"""Open HTML pages in headless Chromium and read back what the browser made of them.

All pages go through one browser launch (the slow part): a harness page loads each in an iframe
(``--allow-file-access-from-files`` lets it read their DOM), waits for each page's own load handler to
count its pictures (``data-images`` / ``data-images-broken`` on ``<body>``), and writes what it found as
JSON into its own DOM, which ``--dump-dom`` prints.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

REQUIRED = os.environ.get("ONNXSAT_REQUIRE_BROWSER") == "1"
"""Set by ``.ci/run``: on CI a missing browser or Graphviz is a failure, not a skip."""

_HARNESS = """<!DOCTYPE html><html><body><pre id="results"></pre><script>
var pages = %s;
var results = {};
pages.forEach(function (url) {
  var frame = document.createElement("iframe");
  frame.onload = function () {
    setTimeout(function () {
      var doc = frame.contentDocument;
      results[url] = {
        title: doc.title,
        images: doc.body.getAttribute("data-images"),
        broken: doc.body.getAttribute("data-images-broken"),
        tables: Array.prototype.map.call(doc.querySelectorAll("table"), function (t) {
          return Array.prototype.map.call(t.querySelectorAll("th"), function (th) { return th.textContent; });
        }),
        headings: Array.prototype.map.call(doc.querySelectorAll("h1, h2, h3"), function (h) { return h.textContent; })
      };
      document.getElementById("results").textContent = JSON.stringify(results);
    }, 0);
  };
  frame.src = url;
  document.body.appendChild(frame);
});
</script></body></html>
"""


def require_tool(*names: str) -> str:
    """The first of ``names`` on PATH; skip the test (fail on CI) when none is installed."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    reason = f"{names[0]} is not installed (Debian: apt-get install {names[0]}; .ci/run installs it)"
    if REQUIRED:
        pytest.fail(reason)
    pytest.skip(reason)


def chromium() -> str:
    return require_tool("chromium", "chromium-browser", "google-chrome")


def open_pages(pages: Sequence[Path], work: Path) -> dict[str, dict[str, object]]:
    """What headless Chromium saw in each page, by file name."""
    browser = chromium()
    harness = work / "harness.html"
    harness.write_text(_HARNESS % json.dumps([p.resolve().as_uri() for p in pages]), encoding="utf-8")
    command = [
        browser,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--allow-file-access-from-files",
        f"--user-data-dir={work / 'profile'}",
        "--virtual-time-budget=20000",
        "--dump-dom",
        harness.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    match = re.search(r'<pre id="results">(.*?)</pre>', done.stdout, re.S)
    assert match, f"no results from Chromium (exit {done.returncode}): {done.stderr[-2000:]}"
    found = json.loads(html.unescape(match.group(1)))
    return {Path(url).name: value for url, value in found.items()}
