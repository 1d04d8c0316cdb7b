"""Hugging Face transformers built from their configs and exported to ONNX: the transformers benchmark's models.

:mod:`tools.zoo.torch_zoo` has small transformers written in plain PyTorch; these are the real library's
classes at their default sizes (BERT-base, ViT-base, GPT-2 small) plus a tiny Llama-style decoder with
RoPE and grouped-query attention, so the benchmark sees the graphs users export. No weights are
downloaded: each model is built from its config with the library's own initialisation after
``torch.manual_seed(seed)``, with batch 1, sequence 128 (ViT: one 224x224 image), the dynamo exporter
and static shapes. A model whose file already exists is skipped, since an export takes tens of seconds.

torch and transformers are imported only when building; a missing one is one line naming the ``zoo``
extra (:func:`onnxsat.extras.require`).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onnxsat.errors import OnnxSatError, SettingsError
from onnxsat.extras import require

BATCH = 1
SEQUENCE_LENGTH = 128
IMAGE_SHAPE = (BATCH, 3, 224, 224)
PURPOSE = "building the transformers models"


@dataclass(frozen=True)
class TransformerModel:
    """One model: its description, how to build it (``transformers`` module -> module) and its inputs."""

    description: str
    build: Callable[[Any], Any]
    inputs: Callable[[Any, Any], dict[str, Any]]
    """``(torch, model) -> name -> tensor``, drawn from torch's seeded global generator."""
    output_names: tuple[str, ...]
    ort_model_type: str
    """The model type ORT's transformers optimizer is given."""


def _token_ids(torch: Any, model: Any) -> dict[str, Any]:
    return {"input_ids": torch.randint(0, model.config.vocab_size, (BATCH, SEQUENCE_LENGTH))}


def _bert_inputs(torch: Any, model: Any) -> dict[str, Any]:
    return {**_token_ids(torch, model), "attention_mask": torch.ones(BATCH, SEQUENCE_LENGTH, dtype=torch.int64)}


def _image(torch: Any, model: Any) -> dict[str, Any]:
    return {"pixel_values": torch.randn(IMAGE_SHAPE)}


def _tiny_llama(transformers: Any) -> Any:
    config = transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=512,
        use_cache=False,
    )
    return transformers.LlamaForCausalLM(config)


TRANSFORMER_MODELS: dict[str, TransformerModel] = {
    "bert": TransformerModel(
        "BertModel(BertConfig()): BERT-base, 12 layers, hidden 768, input_ids and attention_mask",
        lambda t: t.BertModel(t.BertConfig()),
        _bert_inputs,
        ("last_hidden_state", "pooler_output"),
        "bert",
    ),
    "vit": TransformerModel(
        "ViTModel(ViTConfig()): ViT-base/16 on one 224x224 image",
        lambda t: t.ViTModel(t.ViTConfig()),
        _image,
        ("last_hidden_state", "pooler_output"),
        "vit",
    ),
    "gpt2": TransformerModel(
        "GPT2LMHeadModel(GPT2Config(use_cache=False)): GPT-2 small with its LM head, no KV cache",
        lambda t: t.GPT2LMHeadModel(t.GPT2Config(use_cache=False)),
        _token_ids,
        ("logits",),
        "gpt2",
    ),
    "llama_tiny": TransformerModel(
        "LlamaForCausalLM: 4 layers, hidden 256, 8 heads over 2 KV heads (grouped-query), RoPE, vocab 32000",
        _tiny_llama,
        _token_ids,
        ("logits",),
        "bert",  # ORT's optimizer has no Llama type; its BERT fusions include RMSNorm -> SimplifiedLayerNormalization
    ),
}

GEOMEAN_MODELS = ("bert", "vit", "gpt2")
"""The models the issue's geometric-mean goal is over (the tiny Llama is reported, not averaged)."""


def model_path(out_dir: Path, name: str) -> Path:
    return Path(out_dir) / f"{name}.onnx"


def build_transformer(name: str, out_dir: Path, seed: int = 0) -> Path:
    """Export model ``name`` to ``out_dir/<name>.onnx`` (weights inside the file) and return the path."""
    spec = _spec(name)
    torch = require("torch", PURPOSE)
    transformers = require("transformers", PURPOSE)
    require("onnxscript", PURPOSE)
    from tools.zoo.torch_zoo import _check_versions, _save

    torch.manual_seed(seed)
    model = spec.build(transformers).eval()
    inputs = spec.inputs(torch, model)
    path = model_path(out_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's and transformers' deprecation notices during export
        program = torch.onnx.export(
            model,
            tuple(inputs.values()),
            input_names=list(inputs),
            output_names=list(spec.output_names),
            dynamo=True,
            verbose=False,
        )
    _check_versions(program.model_proto, name)
    _save(program.model_proto, path)
    return path


def build_transformers(
    out_dir: Path, names: Iterable[str] | None = None, seed: int = 0, log: Callable[[str], object] = print
) -> dict[str, Path]:
    """Export the models (all if ``names`` is None) that ``out_dir`` does not hold yet; name -> path."""
    names = list(TRANSFORMER_MODELS) if names is None else list(names)
    for name in names:
        _spec(name)
    paths = {}
    for name in names:
        path = model_path(out_dir, name)
        if path.exists():
            log(f"{name}: {path} exists, skipped")
        else:
            start = time.perf_counter()
            build_transformer(name, out_dir, seed)
            log(f"{name}: exported to {path} in {time.perf_counter() - start:.1f} s")
        paths[name] = path
    return paths


def _spec(name: str) -> TransformerModel:
    try:
        return TRANSFORMER_MODELS[name]
    except KeyError:
        raise SettingsError(
            f"unknown transformers model {name!r}: choose from {', '.join(TRANSFORMER_MODELS)}"
        ) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"models (default: all of {', '.join(TRANSFORMER_MODELS)})"
    )
    parser.add_argument("--out", required=True, type=Path, help="folder the models are written to, as NAME.onnx")
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed before each model (default 0)")


def run(args: argparse.Namespace) -> int:
    build_transformers(args.out, args.names or None, args.seed)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.zoo.transformers_zoo --out DIR [NAME...]``; a user error is one line."""
    parser = argparse.ArgumentParser(description="Build and export the transformers benchmark's models.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except OnnxSatError as error:
        print(f"onnxsat: error: {error}", file=sys.stderr)
        return error.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
