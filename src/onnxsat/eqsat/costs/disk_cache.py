"""The on-disk cache of measured node timings, one JSON file per machine and ONNX Runtime version.

Why on disk: benchmarking a signature takes tens of milliseconds and a model has hundreds of distinct
signatures, so measuring on every run would cost more than the optimization itself. Why keyed by machine
and ORT version: a timing is only valid for the CPU and kernels that produced it.

The file is ``${ONNXSAT_CACHE_DIR:-~/.cache/onnxsat}/costs/<machine-key>.json``::

    {"format": 1, "machine": "<machine-key>", "onnxruntime": "1.31.1",
     "baseline_us": 3.2,                                 # one session.run call with a trivial node
     "entries": {"<signature key>": {"us": 12.5, "runs": 20}}}        # raw median, baseline included

Only successful timings are stored. A signature ORT cannot run is re-tried by the next process, which
costs a failed session creation (about a millisecond) and keeps the file free of verdicts that a newer
ONNXSat or ORT might reverse.

Writes go to a temporary file in the same folder, then ``os.replace``, so a reader never sees half a file;
before writing, entries another process saved meanwhile are merged in. A corrupt or unreadable file is
ignored with a warning (and overwritten by the next save); a folder that cannot be written costs only the
persistence, never the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

import onnxruntime

from onnxsat.errors import SettingsError

CACHE_ENV = "ONNXSAT_CACHE_DIR"
FORMAT = 1


def cache_root() -> Path:
    """``$ONNXSAT_CACHE_DIR`` if set, else ``~/.cache/onnxsat`` (read at call time, so tests can redirect it)."""
    configured = os.environ.get(CACHE_ENV)
    try:
        return Path(configured).expanduser() if configured else Path.home() / ".cache" / "onnxsat"
    except RuntimeError:  # "~nobody/...", or no home at all
        where = f"{CACHE_ENV}={configured!r} names" if configured else "the cache is kept in"
        raise SettingsError(f"{where} a home folder that cannot be found; set {CACHE_ENV} to a folder") from None


def cpu_model_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else ``platform.processor()``, else ``unknown-cpu``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name.strip() in ("model name", "Model", "Processor") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown-cpu"


def _sanitize(text: str, limit: int = 64) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")[:limit] or "unknown"


def machine_key() -> str:
    """``<arch>_<cpu model>_<n>cpu_ort<version>``, safe as a file name."""
    parts = (
        _sanitize(platform.machine() or "unknown-arch"),
        _sanitize(cpu_model_name()),
        f"{os.cpu_count() or 0}cpu",
        "ort" + _sanitize(onnxruntime.__version__),
    )
    return "_".join(parts)


def cache_path(root: Path | None = None) -> Path:
    return (root if root is not None else cache_root()) / "costs" / f"{machine_key()}.json"


def empty_cache() -> dict[str, Any]:
    return {
        "format": FORMAT,
        "machine": machine_key(),
        "onnxruntime": onnxruntime.__version__,
        "baseline_us": None,
        "entries": {},
    }


def load(path: Path) -> dict[str, Any]:
    """The cache at ``path``; an empty one (with a warning unless the file is simply absent) on any problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return empty_cache()
    except (OSError, UnicodeDecodeError) as error:
        warnings.warn(f"ignoring unreadable cost cache {path}: {error}", RuntimeWarning, stacklevel=2)
        return empty_cache()
    try:
        data = json.loads(text)
    except ValueError as error:
        warnings.warn(f"ignoring corrupt cost cache {path}: {error}", RuntimeWarning, stacklevel=2)
        return empty_cache()
    problem = _validate(data)
    if problem:
        warnings.warn(f"ignoring cost cache {path}: {problem}", RuntimeWarning, stacklevel=2)
        return empty_cache()
    return data


def _validate(data: object) -> str | None:
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("format") != FORMAT:
        return f"format {data.get('format')!r}, expected {FORMAT}"
    if data.get("machine") != machine_key():
        return f"written for machine {data.get('machine')!r}"
    baseline = data.get("baseline_us")
    if baseline is not None and not _is_positive_number(baseline):
        return "bad baseline_us"
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return "no entries object"
    for key, entry in list(entries.items()):
        if not valid_entry(entry):
            del entries[key]  # drop a bad entry, keep the rest
    return None


def valid_entry(entry: object) -> bool:
    return isinstance(entry, dict) and _is_positive_number(entry.get("us"))


def _is_positive_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and value != float("inf")


def save(path: Path, baseline_us: float | None, entries: dict[str, dict[str, Any]]) -> bool:
    """Merge ``entries`` into the file at ``path`` atomically; False (with a warning) if it cannot be written."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a corrupt file was already reported when it was loaded
        data = load(path)
    data["entries"].update(entries)
    if baseline_us is not None:
        data["baseline_us"] = baseline_us
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1, sort_keys=True)
            out.write("\n")
        os.replace(temporary, path)
        return True
    except OSError as error:
        warnings.warn(f"cannot write cost cache {path}: {error}", RuntimeWarning, stacklevel=2)
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        return False
