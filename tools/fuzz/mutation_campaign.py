"""The byte-mutation campaign: thousands of damaged model files, each either processed or refused cleanly.

For each case a seed model is mutated (``mutations.mutate``), written to a fresh folder (beside a copy
of the seed model's external-data files, so mutations of the location/offset/length fields find a real file)
and handed to ``onnxsat optimize`` in its own process. The contract checked is the CLI's: exit 0 with
the output written and nothing on stderr, or one ``onnxsat: error: ...`` line with an exit code from
``errors.py`` and nothing written. Anything else -- a traceback, ``internal error`` (exit 1), death by a
signal, a hang, extra stderr lines -- is a failure, saved for replay.

Why a fork server rather than ``os.fork()`` from this process: importing egglog starts its Rust (rayon)
thread pool, and a forked child inherits the pool's bookkeeping but not its threads, so the first
egglog call that waits for the pool (dropping an e-graph does) blocks forever. Anything that imported
``onnxsat`` (this very package does) has egglog loaded. So the campaign starts one fresh interpreter that
imports numpy, onnx and ONNX Runtime only -- all fork-safe, and most of the start-up cost -- and that
interpreter forks one child per case; each child imports egglog for itself (~0.1 s). This file is that
server's code too: it is loaded by path under another name, which is why only the standard library is
imported at module level, and the onnx/onnxsat imports live inside the parent-side functions.

Each child runs under ``RLIMIT_AS`` (default 4 GiB of address space; a normal run of the seed models
peaks near 320 MB of address space, 110 MB resident), without core dumps, in its own process group, with
stdin on /dev/null and stdout/stderr redirected to files, and is killed after ``timeout`` seconds.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

DEFAULT_TARGET = "onnxsat.cli:main"
"""``module:function`` each child calls with the argv; a test points it at a fake to test the harness."""

DEFAULT_MEMORY_LIMIT_MB = 4096
"""Address space per child: a small machine. A normal run of a seed peaks near 320 MB of it."""

ERROR_PREFIX = "onnxsat: error: "
_PRELOAD = (
    *("numpy", "google.protobuf", "onnx", "onnx.checker", "onnx.shape_inference", "onnxruntime"),
    # egglog's own import-time dependencies: pure Python, no threads; preloading them cuts each
    # child's start-up from ~0.14 s to ~0.09 s. Only egglog itself must be imported after the fork.
    *("black", "graphviz", "cloudpickle", "opentelemetry.trace", "decimal", "fractions", "difflib", "logging"),
)
_SETUP_FAILED = 120  # a child that could not even be set up exits with this (reported as unexpected exit)
_INPUT_NAME, _OUTPUT_NAME = "in.onnx", "out.onnx"

# ------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class CaseResult:
    """What one run did, and what the contract makes of it (``verdict``: processed, refused or failed)."""

    index: int
    description: str
    verdict: str
    kind: str  # for a failure its class ("traceback", "hang"...); for a refusal "exit N"; else ""
    exit_code: int | None
    signal: int | None
    timed_out: bool
    stderr: str
    seconds: float
    max_rss_mb: float

    @property
    def status(self) -> str:
        if self.timed_out:
            return "timed out (killed)"
        if self.signal is not None:
            return f"killed by {signal.Signals(self.signal).name}"
        return f"exit {self.exit_code}"


@dataclass
class MutationFailure:
    """One case that broke the contract; ``saved`` is the mutated file to replay (with ``replay_case``)."""

    index: int
    description: str
    kind: str
    status: str
    stderr_excerpt: str
    saved: Path | None = None
    where: str = ""  # the innermost onnxsat frame of the traceback, when there is one (or a --debug rerun)

    @property
    def signature(self) -> str:
        """The failure class: kind, src location and exception type (or the first stderr line, with
        the ANSI colours, names, numbers and paths blanked out), so one bug gives one class."""
        lines = [line for line in _ANSI.sub("", self.stderr_excerpt).splitlines() if line.strip()]
        error = re.search(r"internal error: (\w+)", self.stderr_excerpt)
        if error:
            detail = error.group(1)
        elif self.kind == "traceback" and lines:
            detail = lines[-1].split(":")[0]
        else:
            detail = re.sub(r"'[^']*'|\"[^\"]*\"|\S*/\S+|0x[0-9a-f]+|[\d.:-]+\d", "_", lines[0] if lines else "")[:100]
        return f"{self.kind} @ {self.where or '?'}: {detail}"


@dataclass
class MutationCampaignResult:
    """Counts of a campaign: every case tried is exactly one of processed, refused (by exit code) or failed."""

    seed: int
    tried: int = 0
    processed: int = 0
    refused: Counter[int] = field(default_factory=Counter)
    failures: list[MutationFailure] = field(default_factory=list)
    elapsed: float = 0.0
    slowest_case: float = 0.0
    peak_rss_mb: float = 0.0

    @property
    def failed(self) -> int:
        return len(self.failures)

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())

    def summary_line(self) -> str:
        by_code = ", ".join(f"{code}: {n}" for code, n in sorted(self.refused.items())) or "none"
        return (
            f"byte mutations (seed {self.seed}): {self.tried} tried, {self.processed} processed, "
            f"{self.refused_total} refused (by exit code {by_code}), {self.failed} failed "
            f"in {self.elapsed:.1f} s (slowest case {self.slowest_case:.1f} s, peak RSS {self.peak_rss_mb:.0f} MB)"
        )

    def failure_classes(self) -> dict[str, list[MutationFailure]]:
        classes: dict[str, list[MutationFailure]] = {}
        for failure in self.failures:
            classes.setdefault(failure.signature, []).append(failure)
        return classes


def refusal_codes() -> frozenset[int]:
    """Exit codes of a clean refusal: every ``OnnxSatError`` subclass's, except 1 (internal errors).

    Read from ``errors.py`` rather than listed here, so a new error class is a refusal at once.
    """
    from onnxsat.errors import OnnxSatError  # not at the top: the fork server loads this file (docstring)

    classes, codes = [OnnxSatError], set()
    while classes:
        current = classes.pop()
        codes.add(current.exit_code)
        classes.extend(current.__subclasses__())
    return frozenset(codes - {0, 1})


def classify(
    exit_code: int | None,
    signal_number: int | None,
    timed_out: bool,
    stderr: str,
    folder: Path,
    refusals: frozenset[int] | None = None,
) -> tuple[str, str]:
    """``(verdict, kind)`` of a finished run under the CLI contract (see the module docstring).

    ``folder`` is where the output was to be written: a success must have written it, a refusal must
    not have, and neither may leave the atomic writer's temporary file behind. ``refusals`` defaults
    to :func:`refusal_codes`.
    """
    lines = [line for line in stderr.splitlines() if line.strip()]
    if timed_out:
        return "failed", "hang"
    if signal_number is not None:
        return "failed", f"crash ({signal.Signals(signal_number).name})"
    if "Traceback (most recent call last)" in stderr:
        return "failed", "traceback"
    if exit_code == 1 and "internal error" in stderr:
        return "failed", "internal error"
    written = (folder / _OUTPUT_NAME).exists()
    if any(folder.glob(f".{_OUTPUT_NAME}.*.tmp")):
        return "failed", "temporary file left behind"
    if exit_code == 0:
        if lines:
            return "failed", "stderr on success"
        return ("processed", "") if written else ("failed", "exit 0 without output")
    if exit_code in (refusals if refusals is not None else refusal_codes()):
        if len(lines) != 1:
            return "failed", "extra stderr lines" if lines else "refusal without message"
        if not lines[0].startswith(ERROR_PREFIX):
            return "failed", "malformed refusal"
        return ("failed", "output written on refusal") if written else ("refused", f"exit {exit_code}")
    return "failed", f"unexpected exit {exit_code}"


# ------------------------------------------------------------------- fork server (its own process)


def _serve() -> NoReturn:
    """The fork server's loop: JSON requests on stdin, JSON replies on the original stdout.

    Requests: ``{"op": "run", "id", "target", "argv", "cwd", "stdout", "stderr", "memory_limit"}`` and
    ``{"op": "kill", "id"}``. Replies: ``{"id", "pid"}`` when a child started and ``{"id", "status",
    "max_rss_kb"}`` when it ended. Children are reaped on SIGCHLD (through a wakeup pipe, so no polling).
    On end of input every remaining child is killed, then the server exits.
    """
    sys.path[:] = json.loads(sys.argv[2])
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 1)  # a stray print from a library must not corrupt the reply stream
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it closes our input
    for name in _PRELOAD:
        with contextlib.suppress(ImportError):  # a missing one only costs time: the child imports it itself
            importlib.import_module(name)
    if sys.dont_write_bytecode:  # PYTHONDONTWRITEBYTECODE: each child would compile onnxsat's sources afresh,
        sys.pycache_prefix, sys.dont_write_bytecode = sys.argv[3], False  # so cache them in our scratch folder
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    inherited = [wake_read, wake_write, replies.fileno(), quiet]
    by_pid: dict[int, int] = {}
    by_id: dict[int, int] = {}
    pending, reading = b"", True
    while reading or by_pid:
        ready = select.select([0, wake_read] if reading else [wake_read], [], [], 1.0)[0]
        if wake_read in ready:
            while True:
                try:
                    if not os.read(wake_read, 4096):
                        break
                except BlockingIOError:
                    break
        if 0 in ready:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                reading = False
                for pid in by_pid:
                    _kill_group(pid)
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                if request["op"] == "kill" and request["id"] in by_id:
                    _kill_group(by_id[request["id"]])
                elif request["op"] == "run":
                    pid = os.fork()
                    if pid == 0:
                        _child(request, inherited)
                    with contextlib.suppress(OSError):  # the child does it too: whichever runs first wins
                        os.setpgid(pid, pid)
                    by_pid[pid], by_id[request["id"]] = request["id"], pid
                    replies.write(json.dumps({"id": request["id"], "pid": pid}) + "\n")
        while by_pid:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            case = by_pid.pop(pid, None)
            if case is not None:
                del by_id[case]
                replies.write(json.dumps({"id": case, "status": status, "max_rss_kb": usage.ru_maxrss}) + "\n")
    os._exit(0)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # the child has not made its own group yet
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _child(request: dict[str, Any], inherited: list[int]) -> NoReturn:
    """Set up the isolation described in the module docstring, call the target, exit with its code."""
    try:
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in inherited:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if request["memory_limit"]:
            resource.setrlimit(resource.RLIMIT_AS, (request["memory_limit"], request["memory_limit"]))
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        os.chdir(request["cwd"])
    except BaseException:
        traceback.print_exc()
        os._exit(_SETUP_FAILED)
    os._exit(_call_target(request["target"], request["argv"]))


def _call_target(target: str, argv: list[str]) -> int:
    """Call ``module:function(argv)`` the way ``sys.exit(main())`` in a console script would end:
    an escaping exception prints its traceback and exits 1, SystemExit's code is honoured, and the
    atexit handlers run before the streams are flushed."""
    try:
        module, _, name = target.partition(":")
        result = getattr(importlib.import_module(module), name)(list(argv))
    except SystemExit as stop:
        result = stop.code
    except BaseException:
        traceback.print_exc()
        result = 1
    if result is None:
        code = 0
    elif isinstance(result, int):
        code = result & 0xFF
    else:
        print(result, file=sys.stderr)
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed stream has nothing left to flush
                stream.flush()
    return code


# ----------------------------------------------------------------------------------- parent side

_SERVER_BOOT = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('_onnxsat_fork_server', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = module\n"
    "spec.loader.exec_module(module)\n"
    "module._serve()\n"
)


class _ForkServer:
    """The parent's handle on the fork server: send requests, receive replies with a timeout."""

    def __init__(self, scratch: Path) -> None:
        self.log = scratch / "server.log"
        command = [sys.executable, "-c", _SERVER_BOOT, str(Path(__file__).resolve()), json.dumps(sys.path)]
        with open(self.log, "wb") as stream:
            self.process = subprocess.Popen(
                [*command, str(scratch / "pycache")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stream,
                close_fds=True,
            )
        self.buffer = b""

    def _died(self) -> RuntimeError:
        self.process.wait(timeout=10)
        text = self.log.read_text(errors="replace").strip()
        return RuntimeError(f"the fork server exited ({self.process.returncode}): {text[-2000:]}")

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.process.stdin.write(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]
            self.process.stdin.flush()  # type: ignore[union-attr]
        except BrokenPipeError:
            raise self._died() from None

    def receive(self, timeout: float) -> list[dict[str, Any]]:
        stream = self.process.stdout.fileno()  # type: ignore[union-attr]
        if b"\n" not in self.buffer and select.select([stream], [], [], timeout)[0]:
            chunk = os.read(stream, 1 << 16)
            if not chunk:
                raise self._died()
            self.buffer += chunk
        lines = self.buffer.split(b"\n")
        self.buffer = lines.pop()
        return [json.loads(line) for line in lines if line]

    def close(self) -> None:
        try:
            self.process.stdin.close()  # type: ignore[union-attr]
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()  # type: ignore[union-attr]


@dataclass
class _Case:
    index: int
    description: str
    folder: Path  # holds the input, its data files and (after the run) the output

    @property
    def input(self) -> Path:
        return self.folder / _INPUT_NAME


@dataclass
class _Running:
    case: _Case
    started: float
    killed: bool = False


def _run_cases(
    cases: Iterable[_Case],
    timeout: float,
    target: str = DEFAULT_TARGET,
    workers: int | None = None,
    memory_limit_mb: int | None = DEFAULT_MEMORY_LIMIT_MB,
    extra_argv: Sequence[str] = (),
) -> Iterator[tuple[_Case, CaseResult]]:
    """Run ``optimize <in> -o <out>`` on each prepared case, ``workers`` at a time, in completion order.

    ``extra_argv`` goes before ``optimize`` (``--debug`` for a rerun that shows the traceback).
    """
    workers = max(1, workers or os.cpu_count() or 1)
    cases = iter(cases)
    with tempfile.TemporaryDirectory(prefix="onnxsat-fork-server-") as scratch:
        server = _ForkServer(Path(scratch))
        running: dict[int, _Running] = {}
        try:
            exhausted = False
            while True:
                while not exhausted and len(running) < workers:
                    case = next(cases, None)
                    if case is None:
                        exhausted = True
                        break
                    server.send(_run_request(case, target, extra_argv, memory_limit_mb))
                    running[case.index] = _Running(case, time.monotonic())
                if not running:
                    return
                now = time.monotonic()
                for state in running.values():
                    if not state.killed and now - state.started > timeout:
                        server.send({"op": "kill", "id": state.case.index})
                        state.killed = True
                deadlines = [s.started + timeout - now for s in running.values() if not s.killed]
                for reply in server.receive(max(0.0, min(deadlines, default=1.0))):
                    if "status" in reply:
                        state = running.pop(reply["id"])
                        yield state.case, _finish(state, reply)
        finally:
            server.close()


def _run_request(case: _Case, target: str, extra_argv: Sequence[str], memory_limit_mb: int | None) -> dict[str, object]:
    return {
        "op": "run",
        "id": case.index,
        "target": target,
        "argv": [*extra_argv, "optimize", str(case.input), "-o", str(case.folder / _OUTPUT_NAME)],
        "cwd": str(case.folder),
        "stdout": str(case.folder.with_suffix(".stdout")),
        "stderr": str(case.folder.with_suffix(".stderr")),
        "memory_limit": memory_limit_mb * 2**20 if memory_limit_mb else 0,
    }


def _finish(state: _Running, reply: dict[str, Any]) -> CaseResult:
    status = reply["status"]
    signal_number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    timed_out = state.killed and signal_number == signal.SIGKILL
    stderr_path = state.case.folder.with_suffix(".stderr")
    stderr = stderr_path.read_text(errors="replace") if stderr_path.exists() else ""
    verdict, kind = classify(exit_code, signal_number, timed_out, stderr, state.case.folder)
    return CaseResult(
        index=state.case.index,
        description=state.case.description,
        verdict=verdict,
        kind=kind,
        exit_code=exit_code,
        signal=signal_number,
        timed_out=timed_out,
        stderr=stderr,
        seconds=time.monotonic() - state.started,
        max_rss_mb=reply.get("max_rss_kb", 0) / 1024,
    )


def _remove_case(case: _Case) -> None:
    shutil.rmtree(case.folder, ignore_errors=True)
    for suffix in (".stdout", ".stderr"):
        case.folder.with_suffix(suffix).unlink(missing_ok=True)


def _place(folder: Path, index: int, description: str, data: bytes, companions: Sequence[Path]) -> _Case:
    """Write ``data`` as a case's input with hard links (or copies) of the data files it came with."""
    case = _Case(index, description, folder / f"case-{index:06d}")
    case.folder.mkdir(parents=True)  # the parents too: the campaign's "cases" folder is made on first use
    case.input.write_bytes(data)
    for companion in companions:
        target = case.folder / companion.name
        try:
            os.link(companion, target)
        except OSError:
            shutil.copyfile(companion, target)
    return case


def replay_cases(
    models: Sequence[Path],
    companions: Sequence[Path] = (),
    timeout: float = 30.0,
    target: str = DEFAULT_TARGET,
    memory_limit_mb: int | None = DEFAULT_MEMORY_LIMIT_MB,
) -> list[CaseResult]:
    """Run saved case files exactly as the campaign ran them (same isolation, same file names: each
    becomes ``in.onnx`` in a folder of its own, beside copies of ``companions``); results in order."""
    with tempfile.TemporaryDirectory(prefix="onnxsat-replay-") as scratch:
        cases = [
            _place(Path(scratch), index, f"replay {Path(model).name}", Path(model).read_bytes(), companions)
            for index, model in enumerate(models)
        ]
        results = {case.index: result for case, result in _run_cases(cases, timeout, target, None, memory_limit_mb)}
        return [results[index] for index in range(len(cases))]


def replay_case(model: Path, companions: Sequence[Path] = (), timeout: float = 30.0) -> CaseResult:
    """:func:`replay_cases` for one file, with the real CLI."""
    (result,) = replay_cases([model], companions, timeout)
    return result


# ---------------------------------------------------------------------------------------- seeds

BACKEND_SEEDS = (
    "pytorch-converted/test_Conv2d",
    "pytorch-converted/test_ConvTranspose2d",
    "pytorch-converted/test_MaxPool2d_stride_padding_dilation",
    "pytorch-converted/test_Embedding",
    "pytorch-operator/test_operator_chunk",
    "pytorch-operator/test_operator_flatten",
    "simple/test_sequence_model1",
)
"""Small models from the onnx package's own test data that ``optimize`` processes (exit 0)."""

EXTERNAL_SEED_NAME, EXTERNAL_DATA_NAME = "demo_cnn_external.onnx", "demo_cnn_external.weights"


def default_seed_models(folder: Path) -> list[Path]:
    """Write the default seeds into ``folder``: the demo CNN (static and symbolic batch), the demo CNN
    with every weight in an external data file beside it, and the onnx package's small test models."""
    import onnx

    from onnxsat.zoo.synthetic import demo_cnn

    folder.mkdir(parents=True, exist_ok=True)
    seeds = [folder / "demo_cnn.onnx", folder / "demo_cnn_dynamic.onnx", folder / EXTERNAL_SEED_NAME]
    onnx.save_model(demo_cnn(), seeds[0])
    onnx.save_model(demo_cnn(batch="N"), seeds[1])
    onnx.save_model(
        demo_cnn(),
        seeds[2],
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=EXTERNAL_DATA_NAME,
        size_threshold=0,
    )
    data = Path(onnx.__file__).parent / "backend" / "test" / "data"
    for name in BACKEND_SEEDS:
        source = data / name / "model.onnx"
        if source.is_file():  # a trimmed onnx install may lack its test data: fewer seeds, not an error
            seeds.append(folder / f"{Path(name).name}.onnx")
            shutil.copyfile(source, seeds[-1])
    return seeds


@dataclass
class _Seed:
    name: str
    data: bytes
    companions: list[Path]

    @classmethod
    def load(cls, path: Path) -> _Seed:
        """Read a seed and find its external data files (relative locations inside its folder only)."""
        from tools.fuzz.mutations import external_data_locations

        data = Path(path).read_bytes()
        folder = Path(path).parent.resolve()
        companions = []
        for location in sorted(external_data_locations(data)):
            candidate = (folder / location).resolve()
            if candidate.parent == folder and candidate.is_file():
                companions.append(candidate)
        return cls(Path(path).name, data, companions)


# ------------------------------------------------------------------------------------ campaign

_FRAME = re.compile(r'File "([^"]*onnxsat[/\\][^"]+)", line (\d+), in (\S+)')
_WARNING = re.compile(r"(\S*onnxsat[/\\]\S+\.py):(\d+): \w*Warning")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def innermost_frame(stderr: str) -> str:
    """``path:line (function)`` of the last onnxsat frame of a traceback (or ``path:line`` of a
    warning raised in onnxsat code), relative to the package; "" when stderr names neither."""
    frames = _FRAME.findall(stderr)
    if frames:
        path, line, function = frames[-1]
        return f"{path[path.rfind('onnxsat') :]}:{line} ({function})"
    warning = _WARNING.search(stderr)
    if warning:
        path, line = warning.groups()
        return f"{path[path.rfind('onnxsat') :]}:{line}"
    return ""


def _excerpt(text: str, limit: int = 1200) -> str:
    text = text.strip()
    return text if len(text) <= limit else f"{text[: limit // 3]}\n[...]\n{text[-2 * limit // 3 :]}"


def _save(case: _Case, result: CaseResult, seed: int, failures_dir: Path) -> Path:
    """Copy the case (and its data files, under their own names) into ``failures_dir`` with a note."""
    failures_dir.mkdir(parents=True, exist_ok=True)
    saved = failures_dir / f"mutation-{seed}-{case.index:06d}.onnx"
    shutil.copyfile(case.input, saved)
    for item in case.folder.iterdir():
        if item.name not in (_INPUT_NAME, _OUTPUT_NAME) and not item.name.startswith("."):
            shutil.copyfile(item, failures_dir / item.name)
    note = f"{result.description}\n{result.kind}: {result.status}\n\n{result.stderr}"
    saved.with_suffix(".txt").write_text(note)
    return saved


def _locate(
    failed: list[tuple[_Case, MutationFailure]], timeout: float, workers: int | None, memory: int | None
) -> None:
    """Rerun the internal errors with ``--debug`` so that each failure names the src line at fault."""
    todo = {case.index: (case, failure) for case, failure in failed if failure.kind == "internal error"}
    for case, result in _run_cases(
        (case for case, _ in todo.values()), timeout, workers=workers, memory_limit_mb=memory, extra_argv=["--debug"]
    ):
        todo[case.index][1].where = innermost_frame(result.stderr)


def run_mutation_campaign(
    count: int,
    seed: int,
    seed_models: Sequence[Path] | None = None,
    timeout: float = 30.0,
    failures_dir: Path | None = None,
    progress: bool = True,
    *,
    target: str = DEFAULT_TARGET,
    workers: int | None = None,
    memory_limit_mb: int | None = DEFAULT_MEMORY_LIMIT_MB,
) -> MutationCampaignResult:
    """Mutate the seed models ``count`` times (case ``i`` is seeded by ``(seed, i)`` alone, so any case
    can be regenerated) and run each mutant through ``target`` in isolation; see the module docstring.

    ``failures_dir`` receives each failing case (``mutation-<seed>-<index>.onnx``, its data files and a
    ``.txt`` note). ``target`` is ``module:function`` (default: the real CLI); ``workers`` defaults to
    the number of CPUs; ``memory_limit_mb`` caps each child's address space (None: no cap).
    """
    from tools.fuzz.mutations import mutate  # not at the top: the fork server loads this file (docstring)

    started = time.monotonic()
    result = MutationCampaignResult(seed=seed)
    with tempfile.TemporaryDirectory(prefix="onnxsat-mutations-") as scratch:
        work = Path(scratch)
        paths = list(seed_models) if seed_models else default_seed_models(work / "seeds")
        seeds = [_Seed.load(path) for path in paths]

        def cases() -> Iterator[_Case]:
            for index in range(count):
                rng = random.Random(f"{seed}:{index}")
                chosen = rng.choice(seeds)
                data, description = mutate(chosen.data, rng)
                yield _place(work / "cases", index, f"{chosen.name}: {description}", data, chosen.companions)

        failed: list[tuple[_Case, MutationFailure]] = []
        for case, outcome in _run_cases(cases(), timeout, target, workers, memory_limit_mb):
            result.tried += 1
            result.slowest_case = max(result.slowest_case, outcome.seconds)
            result.peak_rss_mb = max(result.peak_rss_mb, outcome.max_rss_mb)
            if outcome.verdict == "processed":
                result.processed += 1
            elif outcome.verdict == "refused":
                result.refused[outcome.exit_code or 0] += 1
            else:
                failure = MutationFailure(
                    index=case.index,
                    description=case.description,
                    kind=outcome.kind,
                    status=outcome.status,
                    stderr_excerpt=_excerpt(outcome.stderr),
                    saved=_save(case, outcome, seed, failures_dir) if failures_dir is not None else None,
                    where=innermost_frame(outcome.stderr),
                )
                result.failures.append(failure)
                failed.append((case, failure))  # its folder is kept for the --debug rerun below
            if outcome.verdict != "failed":
                _remove_case(case)
            if progress and (result.tried % max(1, count // 20) == 0 or result.tried == count):
                print(f"[fuzz bytes] {result.tried}/{count}: {_progress(result, started)}", file=sys.stderr)
        if target == DEFAULT_TARGET and failed:
            _locate(failed, timeout, workers, memory_limit_mb)
    result.elapsed = time.monotonic() - started
    return result


def _progress(result: MutationCampaignResult, started: float) -> str:
    return (
        f"{result.processed} processed, {result.refused_total} refused, {result.failed} failed "
        f"({time.monotonic() - started:.0f} s)"
    )
