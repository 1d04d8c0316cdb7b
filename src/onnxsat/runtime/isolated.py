"""Loading and running a model in a child process, for models ONNX Runtime may crash on.

A crash inside ONNX Runtime (a failed C++ assertion) ends the whole process: no exception reaches Python,
and the user sees ``Aborted`` instead of one line. ORT 1.31 aborts so on a quantized model whose Loop body
its graph optimizations rewrite. Candidates with control flow are first loaded and run once in a child;
one that kills the child is a failed candidate with that reason.

The child is spawned, not forked (a fork copies running ORT and egglog threads' state), and imports only
this module, ONNX Runtime and numpy.
"""

from __future__ import annotations

import multiprocessing
import signal
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import onnx

from onnxsat import custom_ops
from onnxsat.proto_fields import bodies_of

CHILD_SECONDS = 600.0
"""A child still loading or running after this long is stopped and counted as not crashing: the in-process
run that follows has its own timeout."""


def has_control_flow(model: onnx.ModelProto) -> bool:
    """Whether a main-graph node holds a body (If, Loop, Scan)."""
    return any(next(bodies_of(node), None) is not None for node in model.graph.node)


def crash_in_child(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    level: int = 99,
    work: Callable[[str, str, int], None] | None = None,
) -> str | None:
    """How ONNX Runtime crashed loading ``model`` at ``level`` (``GraphOptimizationLevel``'s value; 99 is all)
    and running it on ``feeds`` in a child process, or None when it did not crash (an error ORT raises is
    not a crash: the caller's own run reports it). ``work`` replaces what the child does (a module-level
    function of the model's path, the feeds' path and the level)."""
    with tempfile.TemporaryDirectory(prefix="onnxsat-child-") as folder:
        path, data = Path(folder) / "model.onnx", Path(folder) / "feeds.npz"
        onnx.save(model, path)
        np.savez(data, **dict(feeds))
        child = multiprocessing.get_context("spawn").Process(
            target=work or _load_and_run, args=(str(path), str(data), level)
        )
        child.start()
        hung = False
        try:
            child.join(CHILD_SECONDS)
        finally:  # also when this process is interrupted or terminated while it waits
            if child.is_alive():
                hung = True
                child.kill()
                child.join()
        if hung:  # it hung, which is no crash
            return None
    code = child.exitcode
    if code is None or code >= 0:
        return None
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"ONNX Runtime crashed on it ({name}) when loading or running it with its optimizations on"


def _load_and_run(path: str, data: str, level: int) -> None:
    import os

    import onnxruntime as ort

    quiet = os.open(os.devnull, os.O_WRONLY)  # a crash's C++ assertion text is the parent's to put in words
    os.dup2(quiet, 2)

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel(level)
    options.log_severity_level = 4
    custom_ops.register(options)
    with np.load(data) as archive:
        feeds = {name: archive[name] for name in archive.files}
    try:
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        session.run(None, feeds)
    except Exception:  # an error is not a crash: the caller's own run says what it is
        return
