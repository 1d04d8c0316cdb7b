"""How much of ONNX Runtime's own logging reaches stderr, for the process and the workers it starts.

ORT logs through one process-wide default logger, which every session uses unless its options say
otherwise, including the sessions of tools ONNXSat calls (ORT's quantizer calibrates in its own). The level
is set once per process, and compress's worker processes and Ray tasks take the driver's level with their work.
"""

from __future__ import annotations

import onnxruntime as ort

QUIET = 4
"""Fatal errors only: ONNXSat turns ORT's errors into its own one-line messages."""
WARNINGS = 2
"""ORT's own default."""

_severity = WARNINGS


def set_runtime_logs(severity: int) -> None:
    """ORT's default log level for this process from now on."""
    global _severity
    _severity = severity
    ort.set_default_logger_severity(severity)


def runtime_log_severity() -> int:
    """The level set last in this process (ORT's default if none was)."""
    return _severity
