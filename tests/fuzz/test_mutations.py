"""Byte-mutation fuzzing: the mutators, the isolated-run harness, and a fixed-seed sample campaign.

The harness tests point the campaign at fake targets defined below (they abort, sleep, raise...) so
that each failure class is shown to be detected; the sample campaign runs the real CLI. Cases the
campaign found that broke the CLI contract live in ``mutation_cases/`` (with a README saying what was
wrong and how it was fixed) and are replayed as regression tests.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import onnx
import pytest

from tools.fuzz.mutation_campaign import (
    EXTERNAL_DATA_NAME,
    EXTERNAL_SEED_NAME,
    CaseResult,
    MutationFailure,
    classify,
    default_seed_models,
    innermost_frame,
    refusal_codes,
    replay_case,
    replay_cases,
    run_mutation_campaign,
)
from tools.fuzz.mutations import (
    BYTE_MUTATORS,
    external_data_locations,
    mutate,
    mutate_proto,
    parse_message,
    serialize_message,
)

CASES = Path(__file__).parent / "mutation_cases"
SAMPLE_SIZE, SAMPLE_SEED = 300, 0


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return default_seed_models(tmp_path_factory.mktemp("seeds"))


@pytest.fixture(scope="module")
def seed_bytes(seeds: list[Path]) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in seeds}


# ------------------------------------------------------------------------------------------- mutators


def test_default_seeds_cover_external_data_and_backend_models(seeds: list[Path]) -> None:
    names = {path.name for path in seeds}
    assert {"demo_cnn.onnx", "demo_cnn_dynamic.onnx", EXTERNAL_SEED_NAME, "test_Conv2d.onnx"} <= names
    assert (seeds[0].parent / EXTERNAL_DATA_NAME).stat().st_size > 0
    # Every weight of the external seed lives in the data file, none inline.
    external = onnx.load(str(seeds[0].parent / EXTERNAL_SEED_NAME), load_external_data=False)
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in external.graph.initializer)


def test_wire_format_round_trip_is_byte_exact(seed_bytes: dict[str, bytes]) -> None:
    for name, data in seed_bytes.items():
        assert serialize_message(parse_message(data, onnx.ModelProto.DESCRIPTOR)) == data, name


def test_external_data_locations(seed_bytes: dict[str, bytes]) -> None:
    assert external_data_locations(seed_bytes[EXTERNAL_SEED_NAME]) == {EXTERNAL_DATA_NAME}
    assert external_data_locations(seed_bytes["demo_cnn.onnx"]) == set()
    assert external_data_locations(b"\xff\xff\xff") == set()  # not protobuf: nothing, no exception


@pytest.mark.parametrize("name", sorted(BYTE_MUTATORS))
def test_byte_mutator_is_deterministic_and_changes_the_bytes(name: str, seed_bytes: dict[str, bytes]) -> None:
    mutator = BYTE_MUTATORS[name]
    for data in (seed_bytes["demo_cnn.onnx"], seed_bytes["test_Conv2d.onnx"], b"\x08\x07", b""):
        for seed in range(40):
            first, description = mutator(data, random.Random(seed))
            assert mutator(data, random.Random(seed)) == (first, description)
            assert first != data, f"{name} seed {seed} on {len(data)} bytes did nothing: {description}"


def test_mutate_is_deterministic_and_always_changes_the_bytes(seed_bytes: dict[str, bytes]) -> None:
    data = seed_bytes["demo_cnn.onnx"]
    descriptions = set()
    for seed in range(200):
        mutant, description = mutate(data, random.Random(seed))
        assert mutate(data, random.Random(seed)) == (mutant, description)
        assert mutant != data
        descriptions.add(description)
    assert len(descriptions) > 190  # different seeds do different things


def test_proto_mutator_reaches_past_the_parser(seed_bytes: dict[str, bytes]) -> None:
    """Most proto-aware mutants still parse (so they test the checker, ORT and the optimizer), many
    pass the checker, and the changes land all over the model, not in one field."""
    original = onnx.ModelProto.FromString(seed_bytes["demo_cnn.onnx"])
    parsed = checked = 0
    areas = set()
    trials = 300
    for seed in range(trials):
        mutant, description = mutate_proto(seed_bytes["demo_cnn.onnx"], random.Random(seed))  # type: ignore[misc]
        for match in re.findall(r"\bgraph\.(\w+)|\b(opset_import|ir_version|producer_\w+)", description):
            areas.update(match)
        try:
            model = onnx.ModelProto.FromString(mutant)
        except Exception:  # DecodeError, or RuntimeWarning from upb: both mean "does not parse"
            continue
        if model == original:
            continue  # a redundant varint byte: different bytes, same message
        parsed += 1
        try:
            onnx.checker.check_model(model)
            checked += 1
        except Exception:  # ValidationError or a type error: the checker refused it, which is the point
            pass
    assert parsed / trials > 0.75
    assert checked / trials > 0.2
    assert {"node", "initializer", "input", "output", "opset_import"} <= areas


def test_byte_mutations_mostly_break_parsing_or_only_touch_weights(seed_bytes: dict[str, bytes]) -> None:
    """Why the proto-aware mutator exists: a random flip either breaks the framing or lands in
    ``raw_data`` (most of the file's bytes), where it changes a weight and nothing else."""
    original = onnx.ModelProto.FromString(seed_bytes["demo_cnn.onnx"])
    structural = 0
    for seed in range(200):
        mutant, _ = BYTE_MUTATORS["flip_bits"](seed_bytes["demo_cnn.onnx"], random.Random(seed))
        try:
            model = onnx.ModelProto.FromString(mutant)
        except Exception:
            continue
        for tensor in (*model.graph.initializer, *original.graph.initializer):
            tensor.ClearField("raw_data")
        structural += model != original
    assert structural < 40


# ------------------------------------------------------------------------------------- classification


def _classify(
    folder: Path, code: int | None, stderr: str, signal_number: int | None = None, timed_out: bool = False
) -> tuple[str, str]:
    return classify(code, signal_number, timed_out, stderr, folder)


def test_classify_follows_the_cli_contract(tmp_path: Path) -> None:
    assert min(refusal_codes()) == 3 and 1 not in refusal_codes()
    one_line = "onnxsat: error: x.onnx is not a readable ONNX model\n"
    assert _classify(tmp_path, 4, one_line) == ("refused", "exit 4")
    assert _classify(tmp_path, 6, "[E:onnxruntime] log\n" + one_line) == ("failed", "extra stderr lines")
    assert _classify(tmp_path, 5, "") == ("failed", "refusal without message")
    assert _classify(tmp_path, 5, "something else\n") == ("failed", "malformed refusal")
    assert _classify(tmp_path, 1, "onnxsat: internal error: KeyError: 'x'\n") == ("failed", "internal error")
    assert _classify(tmp_path, 1, "Traceback (most recent call last):\n  ...\nValueError\n")[1] == "traceback"
    assert _classify(tmp_path, 2, "usage: ...\n") == ("failed", "unexpected exit 2")
    assert _classify(tmp_path, None, "", signal_number=signal.SIGSEGV) == ("failed", "crash (SIGSEGV)")
    assert _classify(tmp_path, None, "", signal_number=signal.SIGKILL, timed_out=True) == ("failed", "hang")
    assert _classify(tmp_path, 0, "") == ("failed", "exit 0 without output")
    (tmp_path / "out.onnx").write_bytes(b"model")
    assert _classify(tmp_path, 0, "") == ("processed", "")
    assert _classify(tmp_path, 0, "RuntimeWarning: overflow\n") == ("failed", "stderr on success")
    assert _classify(tmp_path, 4, one_line) == ("failed", "output written on refusal")
    (tmp_path / ".out.onnx.abc123.tmp").write_bytes(b"half")
    assert _classify(tmp_path, 0, "") == ("failed", "temporary file left behind")


def test_failure_signature_groups_one_bug_and_names_its_src_line() -> None:
    traceback_text = (
        'Traceback (most recent call last):\n  File "/w/src/onnxsat/cli.py", line 5, in main\n'
        '  File "/w/src/onnxsat/verify.py", line 197, in _random_values\nValueError: negative dimensions\n'
    )
    assert innermost_frame(traceback_text) == "onnxsat/verify.py:197 (_random_values)"
    warning = "/w/src/onnxsat/eqsat/weights.py:33: RuntimeWarning: invalid value encountered in sqrt\n  return x\n"
    assert innermost_frame(warning) == "onnxsat/eqsat/weights.py:33"
    assert innermost_frame("onnxsat: error: not ONNX\n") == ""
    where = "onnxsat/model_io.py:73 (check_model)"
    decode_errors = [
        MutationFailure(
            1, "a", "internal error", "exit 1", f"onnxsat: internal error: UnicodeDecodeError: {e}", where=where
        )
        for e in ("can't decode byte 0xff in position 62", "can't decode byte 0xc3 in position 7")
    ]
    assert {f.signature for f in decode_errors} == {f"internal error @ {where}: UnicodeDecodeError"}
    ort_logs = [
        MutationFailure(
            2,
            "b",
            "extra stderr lines",
            "exit 6",
            f"\x1b[1;31m2026-11-21 09:{m}:15.3585 [E:onnxruntime:, "
            f"sequential_executor.cc:677 ExecuteKernel] Non-zero status code running Split node. Name:'{n}'\x1b[m\n"
            "onnxsat: error: ONNX Runtime cannot run the input model",
        )
        for m, n in (("54", "a"), ("59", "split_1"))
    ]
    assert len({f.signature for f in ort_logs}) == 1


# ------------------------------------------------------------------------------ the harness, with fakes
# Each fake is called in the child with the CLI's argv: ["optimize", <input>, "-o", <output>].


def fake_abort(argv: list[str]) -> int:
    os.abort()


def fake_sleep(argv: list[str]) -> int:
    time.sleep(60)
    return 0


def fake_raise(argv: list[str]) -> int:
    raise KeyError("escaped main")


def fake_noisy_refusal(argv: list[str]) -> int:
    os.write(2, b"[E:onnxruntime:, sequential_executor.cc:677] a native log line\n")
    print("onnxsat: error: ONNX Runtime cannot run the input model", file=sys.stderr)
    return 6


def fake_clean_refusal(argv: list[str]) -> int:
    print("onnxsat: error: not ONNX", file=sys.stderr)
    return 4


def fake_success(argv: list[str]) -> int:
    print("a report table")
    shutil.copyfile(argv[1], argv[3])
    return 0


def fake_allocate(argv: list[str]) -> int:
    bytearray(16 * 2**30)  # over any address-space limit the harness sets
    return 0


def _target(fake: object) -> str:
    return f"{__name__}:{fake.__name__}"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("fake", "kind"),
    [
        (fake_abort, "crash (SIGABRT)"),
        (fake_sleep, "hang"),
        (fake_raise, "traceback"),
        (fake_noisy_refusal, "extra stderr lines"),
        (fake_allocate, "traceback"),
    ],
)
def test_harness_detects_each_failure_class(fake: object, kind: str, seeds: list[Path], tmp_path: Path) -> None:
    # The timeout covers the child importing this test module (and so egglog): give it a few seconds.
    timeout = 2.0 if fake is fake_sleep else 20.0
    started = time.monotonic()
    result = run_mutation_campaign(
        2, 1, seeds[:1], timeout=timeout, failures_dir=tmp_path, progress=False, target=_target(fake)
    )
    assert (result.tried, result.failed, result.processed, result.refused_total) == (2, 2, 0, 0)
    assert {failure.kind for failure in result.failures} == {kind}
    for failure in result.failures:
        assert failure.saved is not None and failure.saved.read_bytes() != seeds[0].read_bytes()
        assert failure.description in failure.saved.with_suffix(".txt").read_text()
    if fake is fake_sleep:  # killed at the timeout (both cases at once when there are two workers)
        assert result.failures[0].status == "timed out (killed)"
        assert time.monotonic() - started < 15
    if fake is fake_allocate:  # the address-space limit is in force: the allocation fails cleanly
        assert "MemoryError" in result.failures[0].stderr_excerpt


def test_harness_counts_clean_outcomes_and_keeps_external_data_beside_each_case(seeds: list[Path]) -> None:
    external = [s for s in seeds if s.name == EXTERNAL_SEED_NAME]
    for fake, processed, refused in ((fake_success, 4, {}), (fake_clean_refusal, 0, {4: 4})):
        result = run_mutation_campaign(4, 2, external, timeout=10.0, progress=False, target=_target(fake))
        assert (result.tried, result.processed, dict(result.refused), result.failed) == (4, processed, refused, 0)


def test_unmutated_seeds_are_processed_under_the_memory_limit(seeds: list[Path]) -> None:
    """egglog and ONNX Runtime start and finish inside the default address-space limit."""
    demo, external = seeds[0], seeds[0].parent / EXTERNAL_SEED_NAME
    assert replay_case(demo).verdict == "processed"
    result = replay_case(external, companions=[seeds[0].parent / EXTERNAL_DATA_NAME])
    assert (result.verdict, result.stderr) == ("processed", "")
    assert 0 < result.max_rss_mb < 1024


def test_fixed_seed_sample_campaign_has_no_failures() -> None:
    """The acceptance sample: 300 mutations of the default seeds through the real CLI.

    The bugs it found are kept as cases in ``mutation_cases/`` (see the regression tests below).
    """
    result = run_mutation_campaign(SAMPLE_SIZE, SAMPLE_SEED, timeout=30.0, progress=False)
    assert result.tried == SAMPLE_SIZE
    assert result.processed > SAMPLE_SIZE // 10  # enough mutants get all the way through
    assert len(result.refused) >= 3  # and the refusals come from several stages
    classes = "\n".join(f"{len(items)} x {signature}" for signature, items in result.failure_classes().items())
    assert result.failed == 0, f"{result.summary_line()}\n{classes}"


# ------------------------------------------------------------------------ regressions
# Each file is the smallest case found (shrunk field by field) or built for its failure class; what was
# wrong and how src was fixed is in mutation_cases/README.md. Replayed at once, through the campaign's harness.

OUT_OF_MEMORY_CASE = "out_of_memory_large_input.onnx"
REGRESSION_CASES = sorted(path.name for path in CASES.glob("*.onnx") if path.name != OUT_OF_MEMORY_CASE)


@pytest.fixture(scope="module")
def regression_results() -> dict[str, CaseResult]:
    return dict(zip(REGRESSION_CASES, replay_cases([CASES / name for name in REGRESSION_CASES]), strict=True))


@pytest.mark.parametrize("name", REGRESSION_CASES)
def test_saved_mutation_case_is_processed_or_refused_cleanly(
    name: str, regression_results: dict[str, CaseResult]
) -> None:
    result = regression_results[name]
    assert result.verdict != "failed", f"{result.kind}: {result.status}\n{result.stderr}"


def test_running_out_of_memory_is_refused_cleanly() -> None:
    """Under a 1 GiB address-space cap, verifying 2**26 float inputs is refused in one line, not a traceback."""
    (result,) = replay_cases([CASES / OUT_OF_MEMORY_CASE], memory_limit_mb=1024)
    assert result.verdict != "failed", f"{result.kind}: {result.status}\n{result.stderr}"


def test_every_saved_case_is_documented() -> None:
    readme = (CASES / "README.md").read_text()
    for path in CASES.glob("*.onnx"):
        assert f"`{path.name}`" in readme, path.name
