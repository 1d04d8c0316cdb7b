"""``python -m tools.zoo build``: the package's zoo (:mod:`onnxsat.zoo.catalogue`) plus the PyTorch exports.

``python -m tools.zoo transformers --out DIR``: the Hugging Face models of :mod:`tools.zoo.transformers_zoo`.

Same options and output as ``onnxsat zoo build``. With no names, every model this install can build is
written; the PyTorch ones are skipped, with a warning saying how to get PyTorch, when it is missing. A
PyTorch model named without PyTorch installed is refused in one line before anything is written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from onnxsat.commands.zoo import add_build_arguments, build_models
from onnxsat.errors import OnnxSatError
from onnxsat.zoo import catalogue
from onnxsat.zoo.catalogue import ZooModel
from tools.zoo import torch_zoo, transformers_zoo

TORCH_SOURCE = "PyTorch"
PLAIN_TORCH = frozenset({"bert_tiny", "gpt2_tiny"})
"""The PyTorch models written in plain PyTorch; the others are torchvision's."""


def _torch_model(name: str, description: str) -> ZooModel:
    def write(out_dir: Path, seed: int) -> Path:
        return torch_zoo.build_torch_model(name, out_dir, seed=seed)

    needs = ("torch",) if name in PLAIN_TORCH else ("torch", "torchvision")
    return ZooModel(name, TORCH_SOURCE, description, write, needs)


def zoo_models() -> dict[str, ZooModel]:
    """The package's models, then every PyTorch model, in the order ``--list`` shows them."""
    models = catalogue.zoo_models()
    models.update((name, _torch_model(name, spec.description)) for name, spec in torch_zoo.TORCH_MODELS.items())
    return models


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.zoo", description="build the model zoo, PyTorch included")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    which = parser.add_subparsers(dest="zoo", required=True)
    build = which.add_parser("build", help="write zoo models as OUT/<name>.onnx (all of them if no name is given)")
    add_build_arguments(build)
    hf = which.add_parser(
        "transformers", help="export BERT, ViT, GPT-2 and a tiny Llama from Hugging Face configs as OUT/<name>.onnx"
    )
    transformers_zoo.add_arguments(hf)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and build; a user error is one ``onnxsat: error:`` line and its exit code."""
    args = build_parser().parse_args(argv)
    try:
        if args.zoo == "transformers":
            return transformers_zoo.run(args)
        return build_models(args, zoo_models(), install_hint=torch_zoo.INSTALL_HINT, optional_kind=TORCH_SOURCE)
    except OnnxSatError as error:
        if args.debug:
            raise
        print(f"onnxsat: error: {error}", file=sys.stderr)
        return error.exit_code
