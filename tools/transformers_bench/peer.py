"""``python -m tools.transformers_bench.peer NAME MODEL OUT [--model-type T]``: one peer, alone in its process.

The benchmark measures this process's wall time and peak memory from outside, as it does ``onnxsat
optimize``'s. The last line of stdout is JSON: ``{"seconds": ..., "version": ...}`` (the peer's own call,
load and save excluded) or ``{"skipped": reason}`` when the peer is not installed or does not apply.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Sequence

import onnx

from onnxsat import model_io
from onnxsat.bench import peers
from onnxsat.runtime.transformers import optimize_transformer
from onnxsat.timing import load_whole

ORT_TRANSFORMERS = "ort-transformers"


def peer_function(name: str, model_type: str | None) -> peers.PeerFunction:
    """The registry's peer; ORT's transformers optimizer gets ``model_type`` when one is known."""
    function = peers.PEERS[name]
    if name != ORT_TRANSFORMERS or model_type is None:
        return function

    def typed(model: onnx.ModelProto) -> onnx.ModelProto:
        return optimize_transformer(model, model_type, opt_level=0)[0]

    return typed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run one bench peer on one model")
    parser.add_argument("name", choices=sorted(peers.PEERS))
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--model-type", help="for ort-transformers: bert, vit, gpt2, ... (default: guessed)")
    args = parser.parse_args(argv)
    try:
        version = peers.import_requirement(peers.PEERS[args.name])
    except ImportError as error:
        print(json.dumps({"skipped": f"not installed ({error}; pip install 'onnxsat[bench]')"}))
        return 0
    model = load_whole(args.model)
    function = peer_function(args.name, args.model_type)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # a peer's prints must not hide the JSON line
            start = time.perf_counter()
            result = function(model)
            seconds = time.perf_counter() - start
    except peers.PeerSkipped as why:
        print(json.dumps({"skipped": str(why)}))
        return 0
    model_io.save_model(result, args.out)
    print(json.dumps({"seconds": seconds, "version": version}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
