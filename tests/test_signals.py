"""Stopped by a signal, the tool says so in one line, leaves no worker running and no temporary file behind:
SIGTERM (``docker stop``, a batch system, ``kill``) ended compress at once, its pool workers kept running with
its output pipes open, and their temporary folders stayed; Ctrl-C printed a traceback per worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from onnxsat.zoo.digits_resnet import bundled_digits_resnet

WORKERS_SECONDS = 60.0
"""How long compress may take to have its pool of workers searching (about 5 s on two busy cores)."""


def _interruptible() -> None:
    """In the child: Ctrl-C's default, as in a terminal. A process whose SIGINT is ignored when it starts (as
    ``nohup`` starts it, or a test runner that ignores it) passes that on, and Python then ignores Ctrl-C too:
    in the full suite the compress ran to the end and exited 0."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _group_left(group: int) -> list[str]:
    """The live processes of process group ``group``, read from /proc (a minimal machine may have no ``ps``);
    zombies are left out, as they wait for init to reap them."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (command)": state, ppid, pgrp, ...
        except (OSError, IndexError):  # ended meanwhile
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            left.append(stat.parent.name)
    return left


@pytest.mark.skipif(sys.platform != "linux", reason="process groups and ps as on Linux")
@pytest.mark.parametrize(
    ("sent", "code", "line"), [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")]
)
def test_a_stopped_compress_ends_its_workers_and_cleans_up(
    tmp_path: Path, sent: signal.Signals, code: int, line: str
) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    argv = [sys.executable, "-m", "onnxsat", "compress", str(bundled_digits_resnet()), "-o", str(tmp_path / "c.onnx")]
    argv += ["--data", "digits-test", "--max-drop", "1%", "--workers", "2"]
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a job has: what is left of it can be listed
        env={**os.environ, "TMPDIR": str(temporary)},
        preexec_fn=_interruptible,
    )
    deadline = time.monotonic() + WORKERS_SECONDS
    while len(_group_left(process.pid)) < 3 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)  # the main process and its two workers
    time.sleep(2)  # workers busy with candidates
    assert process.poll() is None, "compress ended before it could be stopped"
    if sent == signal.SIGINT:
        os.killpg(process.pid, sent)  # Ctrl-C reaches the terminal's whole group
    else:
        process.send_signal(sent)  # SIGTERM to the main process alone
    try:
        _, err = process.communicate(timeout=60)  # output pipes closed: no worker holds them
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == code, err
    assert err.strip().splitlines() == [f"onnxsat: {line}"]
    time.sleep(1)
    assert _group_left(process.pid) == []
    assert [path.name for path in temporary.iterdir() if path.name.startswith("onnxsat")] == []  # (ORT writes .ses)
    assert not (tmp_path / "c.onnx").exists()
