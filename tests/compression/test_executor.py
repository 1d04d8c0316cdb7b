"""The executors of ``compress``: serial, local process pool and local Ray give the same ordered results, report
each as it finishes, raise an evaluation's error as itself, and Ray ships a big model once.

The whole module runs on one xdist worker, so the pool and the Ray instance (module fixtures) start once.
"""

from __future__ import annotations

import hashlib
import importlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from onnxsat.compression.executor import Executor, SerialExecutor, WorkerError, _portable, make_executor
from onnxsat.errors import MissingExtraError, SettingsError

pytestmark = pytest.mark.xdist_group("compress_executor")


@dataclass(frozen=True)
class Job:
    index: int
    delay: float
    """Seconds to sleep first: later items finish first, so completion order differs from input order."""
    model: bytes = b""


@dataclass(frozen=True)
class Candidate:
    name: str
    base: bytes
    delta: bytes


class TwoArgumentError(Exception):
    """Does not unpickle: pickling keeps ``args`` (the message), unpickling calls ``__init__`` with it alone."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what}: {why}")


def evaluate(job: Job) -> tuple[int, str]:
    time.sleep(job.delay)
    return job.index * job.index, hashlib.sha256(job.model).hexdigest()[:12]


def fail_on_two(job: Job) -> int:
    if job.index == 2:
        raise SettingsError("candidate 2 has no valid setting")
    return job.index


def fail_unpicklably(kind: str) -> None:
    if kind == "onnxsat":
        error = SettingsError("a lock came with it")
        error.lock = threading.Lock()  # type: ignore[attr-defined]
        raise error
    raise TwoArgumentError("candidate", "broken")


def measure(candidate: Candidate) -> tuple[str, int, int, str]:
    digest = hashlib.sha256(candidate.base + candidate.delta).hexdigest()[:12]
    return candidate.name, len(candidate.base), len(candidate.delta), digest


JOBS = [Job(index, delay=0.05 * (5 - index), model=bytes([index]) * 1000) for index in range(6)]
EXPECTED = [evaluate(Job(job.index, 0.0, job.model)) for job in JOBS]


@pytest.fixture(scope="module")
def pool() -> Iterator[Executor]:
    with make_executor(None, workers=2) as executor:
        yield executor


@pytest.fixture(scope="module")
def ray_module() -> ModuleType:
    return pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray(ray_module: ModuleType) -> Iterator[Executor]:
    """One local Ray instance (2 CPUs) for the whole module; its start takes a few seconds."""
    with make_executor("auto", workers=2) as executor:
        yield executor
    assert not ray_module.is_initialized(), "close() shuts down the instance it started"


@pytest.fixture(params=["serial", "pool", "ray"])
def executor(request: pytest.FixtureRequest) -> Executor:
    if request.param == "serial":
        return make_executor(None, workers=1)
    return request.getfixturevalue("pool" if request.param == "pool" else "local_ray")


def test_results_come_in_input_order_and_each_is_reported_once(executor: Executor) -> None:
    reported: list[tuple[int, Any]] = []
    assert executor.map(evaluate, JOBS, on_result=lambda index, result: reported.append((index, result))) == EXPECTED
    assert sorted(reported) == list(enumerate(EXPECTED))
    assert executor.map(evaluate, []) == []


def test_admitted_items_start_one_per_worker_and_a_refusal_starts_nothing_more(executor: Executor) -> None:
    """``admit`` is asked for each item as a worker frees up (never more items running than workers), and once
    it refuses, the rest come back as None; results stay in input order."""
    asked: list[int] = []
    running_when_asked: list[int] = []
    finished = 0

    def admit(index: int) -> bool:
        asked.append(index)
        running_when_asked.append(index - finished)  # started before this one and not yet reported
        return index < 4

    def reported(index: int, result: Any) -> None:
        nonlocal finished
        finished += 1

    results = executor.map(evaluate, JOBS, on_result=reported, admit=admit)
    assert results == [*EXPECTED[:4], None, None]
    assert asked == [0, 1, 2, 3, 4], "asked in order, and not again after the refusal"
    slots = 1 if isinstance(executor, SerialExecutor) else 2
    assert max(running_when_asked) == slots - 1, running_when_asked
    assert executor.map(evaluate, JOBS[:3], admit=lambda index: False) == [None, None, None]


def test_admit_may_update_its_item_before_it_is_sent(executor: Executor) -> None:
    """``compress`` gives each candidate's own search the time left as it starts: ``admit`` replaces the item,
    and the worker runs the replacement."""
    items = [Job(index, 0.0) for index in range(4)]

    def admit(index: int) -> bool:
        items[index] = Job(index + 10, 0.0)
        return True

    assert [square for square, _ in executor.map(evaluate, items, admit=admit)] == [100, 121, 144, 169]


@pytest.mark.parametrize("where", ["pool", "local_ray"])
def test_items_still_running_at_the_deadline_are_stopped_and_the_executor_goes_on(
    where: str, request: pytest.FixtureRequest
) -> None:
    """A time budget is a limit: an item still running at ``deadline`` comes back as None, like one never
    started, and the executor runs the next map as before (the pool replaces its stopped workers)."""
    executor = request.getfixturevalue(where)
    executor.map(evaluate, JOBS[:2])  # the workers are up: the deadline below measures the items alone
    jobs = [Job(0, 0.0), Job(1, 60.0), Job(2, 0.0)]
    clock = time.monotonic()
    results = executor.map(evaluate, jobs, admit=lambda index: True, deadline=clock + 3.0)
    waited = time.monotonic() - clock
    assert results == [evaluate(jobs[0]), None, evaluate(jobs[2])]
    assert waited < 20, f"the 60-second item was waited for: {waited:.1f} s"
    assert executor.map(evaluate, JOBS) == EXPECTED


def test_an_error_reaches_the_caller_as_itself(executor: Executor) -> None:
    with pytest.raises(SettingsError) as caught:
        executor.map(fail_on_two, [Job(index, 0.0) for index in range(4)])
    assert type(caught.value) is SettingsError
    assert str(caught.value) == "candidate 2 has no valid setting"
    assert executor.map(fail_on_two, [Job(0, 0.0)]) == [0], "still usable after a failure"


@pytest.mark.parametrize("where", ["pool", "local_ray"])
def test_an_error_that_does_not_pickle_arrives_as_its_type_or_a_worker_error(
    where: str, request: pytest.FixtureRequest
) -> None:
    executor: Executor = request.getfixturevalue(where)
    with pytest.raises(SettingsError, match=r"^a lock came with it$"):
        executor.map(fail_unpicklably, ["onnxsat"])
    with pytest.raises(WorkerError, match=r"^TwoArgumentError: candidate: broken$"):
        executor.map(fail_unpicklably, ["other"])


def test_onnxsat_errors_pickle_as_themselves() -> None:
    from onnxsat import errors

    for error_type in vars(errors).values():
        if isinstance(error_type, type) and issubclass(error_type, errors.OnnxSatError):
            error = error_type("one line")
            assert _portable(error) is error, error_type


def test_a_big_shared_model_goes_to_the_object_store_once(
    local_ray: Executor, ray_module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 40 MB base model held by every candidate is put once; each 2 MB delta once; small bytes inline."""
    base = bytes(range(256)) * (40 * 4096)
    candidates = [Candidate(f"c{index}", base, bytes([index]) * (2 << 20)) for index in range(3)]
    candidates.append(Candidate("small", base, b"tiny"))
    puts: list[int] = []
    put = ray_module.put
    monkeypatch.setattr(ray_module, "put", lambda value, **kwargs: puts.append(len(value)) or put(value, **kwargs))
    assert local_ray.map(measure, candidates) == [measure(candidate) for candidate in candidates]
    assert sorted(puts) == [2 << 20] * 3 + [len(base)]
    assert local_ray.name == "Ray (local, 2 CPUs)"


def test_a_module_the_ray_workers_lack_is_one_import_error(
    local_ray: Executor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on a cluster node without the module defining ``fn``: its ImportError, not a Ray system error."""
    (tmp_path / "compress_late_module.py").write_text("def one(item):\n    return 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))  # after Ray started: its workers do not see it
    late = importlib.import_module("compress_late_module")
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'compress_late_module'$"):
        local_ray.map(late.one, [0])


def test_ray_is_quiet_and_named() -> None:
    """A Ray instance started by a command prints nothing of its own (run apart: it starts and stops its own)."""
    pytest.importorskip("ray")
    code = (
        "from onnxsat.compression.executor import make_executor\n"
        "with make_executor('auto', workers=1) as executor:\n"
        "    assert executor.map(abs, [-1, 2]) == [1, 2]\n"
        "    print(executor.name)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "Ray (local, 1 CPUs)\n", "")


def test_names_and_the_serial_choice(pool: Executor) -> None:
    assert isinstance(make_executor(None, workers=1), SerialExecutor)
    assert pool.name == "local process pool (2 workers)"
    assert pool.where.startswith("this machine (")
    with pytest.raises(SettingsError, match=r"^workers must be at least 1, not 0$"):
        make_executor(None, workers=0)


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import fails, as when it is not installed
    with pytest.raises(MissingExtraError) as caught:
        make_executor("auto")
    assert str(caught.value) == "evaluations on Ray: ray is not installed; pip install 'onnxsat[ray]'"
