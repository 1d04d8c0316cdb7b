"""The same input and settings give byte-identical output files, run after run, process after process.

Each run is a fresh interpreter with a different ``PYTHONHASHSEED``, so any output that depended on
set or dict-of-str iteration order, object ids or e-graph insertion accidents would differ between
runs. The models cover fusions, a shared-tensor DAG, symbolic dims and external data.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx

from onnxsat.zoo.synthetic import demo_cnn, densenet_like

RUN_ALL = """
import sys
from onnxsat.cli import main
for name in sys.argv[2:]:
    for target in ("ort", "portable"):
        code = main(["optimize", f"{sys.argv[1]}/{name}.onnx", "-o", f"{sys.argv[1]}/{name}.{target}.out.onnx",
                     "--target", target])
        assert code == 0, (name, target, code)
"""


def write_inputs(folder: Path) -> list[str]:
    onnx.save(demo_cnn(), str(folder / "cnn.onnx"))
    onnx.save(demo_cnn(batch="N"), str(folder / "cnn_dynamic.onnx"))
    onnx.save(densenet_like(10), str(folder / "dense.onnx"))
    onnx.save_model(demo_cnn(), str(folder / "cnn_ext.onnx"), save_as_external_data=True, location="cnn_ext.bin")
    return ["cnn", "cnn_dynamic", "dense", "cnn_ext"]


def outputs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.out.onnx*"))}


def test_output_bytes_identical_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    runs = []
    for hash_seed in ("0", "1", "4242"):
        folder = tmp_path / f"run{hash_seed}"
        folder.mkdir()
        names = write_inputs(folder)
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", RUN_ALL, str(folder), *names], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        runs.append(outputs(folder))
    assert len(runs[0]) == 10, sorted(runs[0])  # 4 models x 2 targets, plus the external model's 2 data files
    assert runs[0] == runs[1] == runs[2]
