"""Run many independent evaluations (``compress``'s candidate models): in this process, a local process pool or Ray.

One interface, :class:`Executor`, whatever runs the work, so the search code never branches on it: ``map`` returns
``fn(item)`` for every item in input order (results do not depend on which evaluation finished first) and calls
``on_result(index, result)`` in this process as each one finishes, for a progress bar with the best so far.
With ``admit(index)``, items start one per free worker and only while ``admit`` allows: the first refusal
starts nothing more, and the items never started come back as None (a time budget stops a search between
candidates, not between batches of them). ``admit`` runs just before its item is read and sent, so it may
update the item in the sequence (the time a candidate's own search gets, as it starts). With ``deadline``
(``time.monotonic()``), the items still running then are stopped and come back as None too: a time budget is
a limit even when the first candidates of a search, whose length nothing foretold, run past it (two of a
YOLOv8-seg model's, 160 s each, made a 2-minute search take 6).

Why this way:

- Local processes are started with "spawn": forking a process whose ONNX Runtime or egglog threads are running
  can leave the child holding a lock no thread will release. A spawned worker imports what ``fn`` needs once.
- An exception crosses back as a value, not raised in the worker: the caller gets the same type and message
  (ONNXSat's errors pickle) and no worker traceback is printed under it. One that does not pickle arrives as an
  instance of its type rebuilt from its message when it is an ONNXSat error, else as :class:`WorkerError`.
- Fail fast: the first failure to arrive is raised and the evaluations not yet started are cancelled.
- Ray is an extra (``onnxsat[ray]``) imported only here and only when asked for. Big ``bytes`` in an item (a model,
  at least :data:`SHARE_MIN_BYTES`) go through Ray's object store once per distinct object (by identity): a base
  model that every item holds is put once, not once per item, and each worker reads it from the node's store.
  ``fn`` and the items are pickled with the standard :mod:`pickle`, as for the pool: a module-level function,
  dataclasses and tuples, no lambdas.
- A Ray instance started here is quiet (no dashboard, no worker logs forwarded, only errors logged), its workers
  see this process's ``sys.path`` (as spawned pool workers do), and ``close`` shuts it down; one already running
  in this process is reused and left running. A remote cluster runs ``fn`` on its own nodes: each needs ONNXSat
  (the same version) and whatever module defines ``fn`` and the items' classes installed.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import multiprocessing
import os
import pickle
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any, Protocol, TypeVar

from onnxsat.errors import OnnxSatError, SettingsError
from onnxsat.extras import require

T = TypeVar("T")
R = TypeVar("R")
E = TypeVar("E", bound="_Closing")
S = TypeVar("S")

SHARE_MIN_BYTES = 1 << 20
"""``bytes`` at least this long in an item go to Ray's object store on their own, once per distinct object."""

RAY_PURPOSE = "evaluations on Ray"
"""What the missing-extra line says needs Ray."""


class Executor(Protocol):
    """Runs ``fn`` over items somewhere; also a context manager that closes it."""

    name: str
    """What runs the evaluations, for reports: "local process pool (2 workers)", "Ray at ADDRESS"."""
    where: str
    """Which machine(s) ran them, for reports."""

    def map(
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        on_result: Callable[[int, R], None] | None = None,
        admit: Callable[[int], bool] | None = None,
        deadline: float | None = None,
    ) -> list[R | None]:
        """``fn(item)`` for every item, in input order; ``on_result(index, result)`` called here as each finishes;
        None for the items ``admit`` kept from starting and those still running at ``deadline``."""
        ...

    def close(self) -> None: ...

    def __enter__(self: S) -> S: ...

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None: ...


class WorkerError(Exception):
    """An evaluation raised an exception that cannot be sent back as itself: its type's name and message."""


@dataclass(frozen=True)
class _Failure:
    """What a worker returns instead of raising, so the worker's traceback stays there."""

    error: Exception


def _portable(error: Exception) -> Exception:
    """``error`` if it survives pickling, else the closest equivalent that does."""
    candidates: list[Exception] = [error]
    if isinstance(error, OnnxSatError):
        with contextlib.suppress(Exception):  # one-line typed errors: the type and the line are all they say
            candidates.append(type(error)(str(error)))
    for candidate in candidates:
        try:
            pickle.loads(pickle.dumps(candidate))
        except Exception:
            continue
        return candidate
    return WorkerError(f"{type(error).__name__}: {error}")


def _guarded(fn: Callable[[T], R], item: T) -> R | _Failure:
    """Run in a worker: ``fn(item)``, or the exception it raised as a value."""
    try:
        return fn(item)
    except Exception as error:
        return _Failure(_portable(error))


def _leave_interrupts() -> None:
    """In a worker: Ctrl-C reaches every process of the terminal's group; the parent stops the workers, which
    would otherwise each print a traceback of the interrupt. Stopped (SIGTERM, from the parent or a whole-group
    ``timeout``), a worker removes its temporary folders first: the pool's loop catches any exception a
    handler raises, so the worker's exit functions are run here, then it ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _end_worker)


def _end_worker(signum: int, frame: object) -> None:
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()  # the finalizers of its TemporaryDirectory objects, as a normal exit runs them
    os._exit(128 + signum)


def _unwrapped(outcome: R | _Failure) -> R:
    if isinstance(outcome, _Failure):
        raise outcome.error
    return outcome


def _host() -> str:
    return socket.gethostname() or "this machine"


class _Feed:
    """Which items start next. Without ``admit`` all at once (the workers' queue keeps them busy); with it one
    per free slot, each only if ``admit(index)`` says so when it would start, and none after a refusal."""

    def __init__(self, count: int, slots: int, admit: Callable[[int], bool] | None) -> None:
        self.count, self.slots, self.admit = count, max(1, slots), admit
        self.next = 0

    def starts(self, running: int) -> list[int]:
        """Indices to start now, with ``running`` items still running."""
        started: list[int] = []
        while self.next < self.count and (self.admit is None or running + len(started) < self.slots):
            if self.admit is not None and not self.admit(self.next):
                self.next = self.count
                break
            started.append(self.next)
            self.next += 1
        return started


class _Closing:
    """Context-manager plumbing shared by the executors."""

    def close(self) -> None:
        pass

    def __enter__(self: E) -> E:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


class SerialExecutor(_Closing):
    """Everything in this process, one item after another: ``workers=1``, tests and debugging (real tracebacks)."""

    def __init__(self) -> None:
        self.name = "this process (serial)"
        self.where = f"this machine ({_host()}), one process"

    def map(
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        on_result: Callable[[int, R], None] | None = None,
        admit: Callable[[int], bool] | None = None,
        deadline: float | None = None,
    ) -> list[R | None]:
        """``deadline`` cannot stop an item running in this process: the one running then ends first."""
        results: list[R | None] = [None] * len(items)
        feed = _Feed(len(items), 1, admit)
        while started := feed.starts(0):
            for index in started:
                results[index] = result = fn(items[index])
                if on_result is not None:
                    on_result(index, result)
        return results


ONE_THREAD_MATHS = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
"""Each worker is one of as many evaluations as there are cores: numpy's threaded BLAS inside each would
oversubscribe them (reconstruction's CPU time went from about 15 s to 3.3 s with one thread, measured on
two busy cores)."""


class PoolExecutor(_Closing):
    """A local pool of spawned processes (``concurrent.futures``); each item is pickled to its worker."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.name = f"local process pool ({workers} workers)"
        self.where = f"this machine ({_host()}, {os.cpu_count()} CPUs)"
        # workers start while the pool is open, each importing numpy afresh: they read these from the
        # environment they inherit (an initializer would run after the main module's imports, too late)
        self._set = [name for name in ONE_THREAD_MATHS if name not in os.environ]
        os.environ.update({name: ONE_THREAD_MATHS[name] for name in self._set})
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=_leave_interrupts
        )

    def map(
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        on_result: Callable[[int, R], None] | None = None,
        admit: Callable[[int], bool] | None = None,
        deadline: float | None = None,
    ) -> list[R | None]:
        feed = _Feed(len(items), self.workers, admit)
        futures: dict[Future[R | _Failure], int] = {}
        pending: set[Future[R | _Failure]] = set()
        done: dict[int, R] = {}
        try:
            while True:
                for index in feed.starts(len(pending)):
                    future = self._pool.submit(_guarded, fn, items[index])
                    futures[future] = index
                    pending.add(future)
                if not pending:
                    break
                finished, pending = wait(pending, timeout=_until(deadline), return_when=FIRST_COMPLETED)
                if not finished:  # the deadline: what still runs is stopped, and the next items get a new pool
                    self._stop_workers()
                    self._pool.shutdown(wait=True, cancel_futures=True)
                    self._pool = self._new_pool()
                    break
                for future in sorted(finished, key=futures.__getitem__):
                    index = futures[future]
                    done[index] = _unwrapped(future.result())
                    if on_result is not None:
                        on_result(index, done[index])
        except BaseException as error:
            for future in pending:
                future.cancel()
            if isinstance(error, KeyboardInterrupt):  # Ctrl-C or SIGTERM: the run ends, and its workers with it
                self._stop_workers()
            raise
        return [done.get(index) for index in range(len(items))]

    def _stop_workers(self) -> None:
        """End the workers now: closing the pool waits for the items they run (minutes, for a candidate), and a
        signal that ends this process leaves them running, holding its output pipes open."""
        for process in list(getattr(self._pool, "_processes", {}).values()):
            if process.is_alive():
                process.terminate()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for name in self._set:
            os.environ.pop(name, None)
        self._set = []


class _SharingPickler(pickle.Pickler):
    """Pickles an item with its big ``bytes`` left out, as slots the worker fills from Ray's object store."""

    def __init__(self, file: io.BytesIO, put: Callable[[bytes], Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.put = put
        self.refs: list[Any] = []
        self._slots: dict[int, int] = {}

    def persistent_id(self, obj: Any) -> int | None:
        if type(obj) is not bytes or len(obj) < SHARE_MIN_BYTES:
            return None
        if id(obj) not in self._slots:
            self._slots[id(obj)] = len(self.refs)
            self.refs.append(self.put(obj))
        return self._slots[id(obj)]


class _SharedUnpickler(pickle.Unpickler):
    def __init__(self, payload: bytes, blobs: tuple[bytes, ...]) -> None:
        super().__init__(io.BytesIO(payload))
        self.blobs = blobs

    def persistent_load(self, pid: Any) -> bytes:
        return self.blobs[pid]


def _ray_call(payload: bytes, *blobs: bytes) -> Any:
    """A Ray task: rebuild ``fn`` and the item (Ray hands the big ``bytes``, passed as object refs, as values) and
    run it. Unpickled here rather than by Ray, so a module missing on a node is raised as its ImportError."""
    fn, item = _SharedUnpickler(payload, blobs).load()
    return _guarded(fn, item)


def _ray() -> ModuleType:
    return require("ray", RAY_PURPOSE)


class RayExecutor(_Closing):
    """Ray tasks, one CPU each, on a local instance started here or on a cluster at an address."""

    def __init__(self, address: str | None, workers: int | None) -> None:
        ray = _ray()
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            self._init(address, workers)
            self._started = True
        self._remote = ray.remote(_ray_call)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        self.slots = max(1, cpus)
        """Tasks run at once when items are admitted one by one: one per CPU of the cluster."""
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        hosts = sorted({str(node.get("NodeManagerHostname", "?")) for node in nodes})
        if address is None:
            self.name = f"Ray (local, {cpus} CPUs)"
            self.where = f"this machine ({_host()}, {cpus} CPUs for Ray)"
        else:
            self.name = f"Ray at {address}"
            self.where = f"Ray cluster at {address}: {len(nodes)} nodes ({', '.join(hosts)}), {cpus} CPUs"

    def _init(self, address: str | None, workers: int | None) -> None:
        quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
        if address is not None:
            try:
                self._ray.init(address=address, **quiet)
            except ConnectionError as error:
                raise SettingsError(f"cannot connect to the Ray cluster at {address}: {error}") from None
            return
        # address="local": a new instance here even when RAY_ADDRESS names a cluster
        paths = list(dict.fromkeys(os.path.abspath(path) for path in sys.path if os.path.isdir(path or ".")))
        self._ray.init(
            address="local",
            num_cpus=workers,
            include_dashboard=False,
            runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(paths), **ONE_THREAD_MATHS}},
            **quiet,
        )

    def map(
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        on_result: Callable[[int, R], None] | None = None,
        admit: Callable[[int], bool] | None = None,
        deadline: float | None = None,
    ) -> list[R | None]:
        ray = self._ray
        stored: dict[int, tuple[bytes, Any]] = {}  # id -> (the bytes, kept alive so ids stay unique; its ref)

        def put(blob: bytes) -> Any:
            if id(blob) not in stored:
                stored[id(blob)] = (blob, ray.put(blob))
            return stored[id(blob)][1]

        tasks: dict[Any, int] = {}  # ObjectRef of a result -> its item's index
        done: dict[int, R] = {}
        pending: list[Any] = []
        feed = _Feed(len(items), self.slots, admit)
        try:
            while True:
                for index in feed.starts(len(pending)):
                    file = io.BytesIO()
                    pickler = _SharingPickler(file, put)
                    pickler.dump((fn, items[index]))  # a lambda fails here, as it would in the pool
                    ref = self._remote.remote(file.getvalue(), *pickler.refs)
                    tasks[ref] = index
                    pending.append(ref)
                if not pending:
                    break
                ready, pending = ray.wait(pending, num_returns=1, timeout=_until(deadline))
                if not ready:  # the deadline: what still runs is stopped
                    for ref in pending:
                        ray.cancel(ref, force=True)
                    break
                try:
                    outcome = ray.get(ready[0])
                except ray.exceptions.RayTaskError as error:  # outside fn: a module missing on a node
                    raise (error.cause if isinstance(error.cause, Exception) else error) from None
                index = tasks[ready[0]]
                done[index] = _unwrapped(outcome)
                if on_result is not None:
                    on_result(index, done[index])
        except BaseException:
            for ref in pending:
                ray.cancel(ref)
            raise
        finally:
            stored.clear()  # the submitted tasks hold the refs
        return [done.get(index) for index in range(len(items))]

    def close(self) -> None:
        if self._started:
            self._started = False
            self._ray.shutdown()


def _until(deadline: float | None) -> float | None:
    """Seconds from now to ``deadline`` (``time.monotonic()``), for a wait; None without one."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def make_executor(ray: str | None = None, workers: int | None = None) -> Executor:
    """``ray=None``: a local process pool of ``workers`` processes (default: one per CPU; one worker runs
    serially in this process); ``"auto"``: a local Ray instance with ``workers`` CPUs (default: all);
    anything else: the address of a Ray cluster (``host:port``, or ``ray://host:port`` with ``ray[client]``),
    whose nodes need ONNXSat installed; ``workers`` is then ignored. Close it (or use ``with``) when done."""
    if workers is not None and workers < 1:
        raise SettingsError(f"workers must be at least 1, not {workers}")
    if ray is None:
        count = workers if workers is not None else os.cpu_count() or 1
        return SerialExecutor() if count == 1 else PoolExecutor(count)
    if not ray.strip():
        raise SettingsError("give a Ray cluster address, or 'auto' for a local Ray instance")
    return RayExecutor(None if ray == "auto" else ray, workers)
