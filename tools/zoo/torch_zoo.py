"""Real architectures exported from PyTorch: the models ONNXSat's rewrites have to win on.

The synthetic models in :mod:`onnxsat.zoo.synthetic` contain exactly the patterns a rule was written
for; real exports do not. They come out of ``torch.onnx.export`` (the dynamo exporter, the default in
PyTorch 2.x) with its own op choices: BatchNorm already folded into Conv, attention spelled out as
MatMul/Softmax with the scale split over Q and K and the mask added (or built by Trilu/Where), Conv
biases built at run time through ``Expand(CastLike(...))`` when the exporter's optimizer is off.
Measuring ONNXSat on these is the honest test of whether it beats ONNX Runtime's own optimizations.

PyTorch and torchvision are optional: they are imported only inside functions, and a missing install
is a :class:`~onnxsat.errors.SettingsError` saying how to get it. Every model has batch 1 and fixed
shapes, seeded random weights (no downloads), every parameter and buffer moved away from exact
zero, and BatchNorm running statistics randomised (variances positive), so that a fold is a real
computation and not a no-op.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnxsat.errors import SettingsError

if TYPE_CHECKING:
    import torch

INSTALL_HINT = (
    "PyTorch is needed for the exported-model zoo: pip install '.[zoo]' or pip install torch torchvision "
    "(offline CPU wheel: pip install /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl; "
    "or pip install torch --index-url https://download.pytorch.org/whl/cpu)"
)

#: Highest ai.onnx opset and IR version ONNX Runtime 1.31 loads; exports above them are refused.
MAX_OPSET = 26
MAX_IR_VERSION = 13

#: File-name suffix of an export made with ``optimize=False`` (the exporter's own optimizer off).
UNOPTIMIZED_SUFFIX = ".noopt"

VARIANTS = ("default", "noopt")

CNN_INPUT_SHAPE = (1, 3, 224, 224)
SEQUENCE_LENGTH = 128
VOCAB_SIZE = 8000

_torchvision_stub_library: Any = None  # kept alive: a torch.library.Library drops its definitions when collected


def _import_torch() -> Any:
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise SettingsError(INSTALL_HINT) from exc


def _import_torchvision() -> Any:
    """Import torchvision even when its C++ ops cannot load (a CUDA build of torchvision next to a CPU torch).

    The models need none of those ops (nms, roi_align), but torchvision 0.28's import registers a fake
    kernel for ``torchvision::nms`` unconditionally and fails when the op was never defined. Defining the
    two schemas it needs lets the pure-Python model code import; calling nms would still fail.
    """
    global _torchvision_stub_library
    torch = _import_torch()
    try:
        return importlib.import_module("torchvision")
    except ImportError as exc:
        raise SettingsError(INSTALL_HINT) from exc
    except RuntimeError as exc:
        if "torchvision::" not in str(exc) or _torchvision_stub_library is not None:
            raise
    for module in [name for name in sys.modules if name == "torchvision" or name.startswith("torchvision.")]:
        del sys.modules[module]
    library = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _torchvision_stub_library = library
    return importlib.import_module("torchvision")


def torch_available() -> bool:
    """True if PyTorch and torchvision can be imported (the zoo can be built)."""
    try:
        _import_torchvision()
    except (SettingsError, RuntimeError):
        return False
    return True


# ---------------------------------------------------------------------------------------------------------------
# Weights


def randomize_weights(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Move every float parameter and buffer away from exact zero and give BatchNorm random statistics.

    Freshly initialised models have zero biases, BatchNorm/LayerNorm with weight 1 and bias 0, and
    running mean 0 / variance 1: folding those is the identity. Here biases and norm shifts become
    small random values, norm scales ``1 + noise``, running means random and running variances in
    [0.5, 1.5]. Returns the model in eval mode.
    """
    torch = _import_torch()
    generator = torch.Generator().manual_seed(seed)

    def noise(like: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.randn(like.shape, generator=generator, dtype=like.dtype) * scale

    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.running_mean is not None:
                module.running_mean.copy_(noise(module.running_mean, 0.1))
                var = module.running_var
                var.copy_(0.5 + torch.rand(var.shape, generator=generator, dtype=var.dtype))
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if not tensor.is_floating_point() or name.endswith(("running_mean", "running_var")):
                continue
            is_norm_scale = name.endswith("weight") and tensor.dim() == 1
            if is_norm_scale and bool((tensor == 1).all()):
                tensor.copy_(1.0 + noise(tensor, 0.1))
            elif bool((tensor == 0).any()):
                # Zero-initialised (biases, norm shifts, class token): small noise everywhere.
                tensor.add_(noise(tensor, 0.02))
            else:
                # Already random: nudge it so that no value is exactly what the initialiser wrote.
                tensor.mul_(1.0 + noise(tensor, 0.01))
    return model.eval()


# ---------------------------------------------------------------------------------------------------------------
# Transformers written in plain PyTorch (shaped like Hugging Face's BertModel and GPT2LMHeadModel)


def _bert_module(layers: int, hidden: int, heads: int, intermediate: int, vocab: int, max_positions: int) -> Any:
    torch = _import_torch()
    nn = torch.nn
    functional = torch.nn.functional

    class BertEmbeddings(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word_embeddings = nn.Embedding(vocab, hidden)
            self.position_embeddings = nn.Embedding(max_positions, hidden)
            self.token_type_embeddings = nn.Embedding(2, hidden)
            self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
            self.register_buffer("position_ids", torch.arange(max_positions).unsqueeze(0), persistent=False)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            length = input_ids.shape[1]
            token_type_ids = torch.zeros_like(input_ids)
            embeddings = (
                self.word_embeddings(input_ids)
                + self.token_type_embeddings(token_type_ids)
                + self.position_embeddings(self.position_ids[:, :length])
            )
            return self.LayerNorm(embeddings)

    class BertSelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = heads
            self.head_size = hidden // heads
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)

        def split(self, x: torch.Tensor) -> torch.Tensor:
            batch, length, _ = x.shape
            return x.view(batch, length, self.heads, self.head_size).transpose(1, 2)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            context = functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            batch, _, length, _ = context.shape
            return context.transpose(1, 2).reshape(batch, length, hidden)

    class BertLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = BertSelfAttention()
            self.attention_output = nn.Linear(hidden, hidden)
            self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
            self.intermediate = nn.Linear(hidden, intermediate)
            self.output = nn.Linear(intermediate, hidden)
            self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            x = self.attention_norm(self.attention_output(self.attention(x, mask)) + x)
            return self.output_norm(self.output(functional.gelu(self.intermediate(x))) + x)

    class TinyBert(nn.Module):
        """BertModel's computation: returns (last_hidden_state, pooler_output)."""

        def __init__(self) -> None:
            super().__init__()
            self.embeddings = BertEmbeddings()
            self.layers = nn.ModuleList(BertLayer() for _ in range(layers))
            self.pooler = nn.Linear(hidden, hidden)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x = self.embeddings(input_ids)
            # As HF's get_extended_attention_mask: [B, 1, 1, S], 0 where attended, dtype-min where masked.
            extended = attention_mask[:, None, None, :].to(x.dtype)
            mask = (1.0 - extended) * torch.finfo(x.dtype).min
            for layer in self.layers:
                x = layer(x, mask)
            return x, torch.tanh(self.pooler(x[:, 0]))

    return TinyBert()


def _gpt2_module(layers: int, hidden: int, heads: int, vocab: int, max_positions: int) -> Any:
    torch = _import_torch()
    nn = torch.nn
    functional = torch.nn.functional

    class Gpt2Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn = nn.Linear(hidden, 3 * hidden)  # GPT-2's merged Q/K/V projection
            self.c_proj = nn.Linear(hidden, hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            batch, length, _ = x.shape
            q, k, v = (
                t.view(batch, length, heads, hidden // heads).transpose(1, 2) for t in self.c_attn(x).split(hidden, 2)
            )
            context = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(context.transpose(1, 2).reshape(batch, length, hidden))

    class Gpt2Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(hidden)
            self.attn = Gpt2Attention()
            self.ln_2 = nn.LayerNorm(hidden)
            self.c_fc = nn.Linear(hidden, 4 * hidden)
            self.c_proj = nn.Linear(4 * hidden, hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln_1(x))
            return x + self.c_proj(functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class TinyGpt2(nn.Module):
        """GPT2LMHeadModel's computation (pre-norm blocks, causal attention, LM head tied to the embedding)."""

        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, hidden)
            self.wpe = nn.Embedding(max_positions, hidden)
            self.blocks = nn.ModuleList(Gpt2Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(hidden)
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
            self.lm_head.weight = self.wte.weight
            self.register_buffer("position_ids", torch.arange(max_positions).unsqueeze(0), persistent=False)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            x = self.wte(input_ids) + self.wpe(self.position_ids[:, : input_ids.shape[1]])
            for block in self.blocks:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return TinyGpt2()


# ---------------------------------------------------------------------------------------------------------------
# The zoo


@dataclass(frozen=True)
class TorchModel:
    """One zoo entry: how to build the module and its example inputs."""

    description: str
    kind: str  # "cnn" or "transformer"
    build: Callable[[], Any]
    inputs: Callable[[Any], dict[str, Any]]  # receives a torch.Generator, returns name -> tensor
    output_names: tuple[str, ...]


def _image_input(generator: Any) -> dict[str, Any]:
    torch = _import_torch()
    return {"input": torch.randn(CNN_INPUT_SHAPE, generator=generator)}


def _token_inputs(generator: Any, with_mask: bool = True) -> dict[str, Any]:
    torch = _import_torch()
    inputs = {"input_ids": torch.randint(0, VOCAB_SIZE, (1, SEQUENCE_LENGTH), generator=generator)}
    if with_mask:
        mask = torch.ones(1, SEQUENCE_LENGTH, dtype=torch.int64)
        mask[:, SEQUENCE_LENGTH - 16 :] = 0  # padded tail, so the mask does something
        inputs["attention_mask"] = mask
    return inputs


def _torchvision_model(name: str, **kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        return getattr(_import_torchvision().models, name)(weights=None, **kwargs)

    return build


def _vision_transformer() -> Any:
    return _import_torchvision().models.VisionTransformer(
        image_size=224, patch_size=16, num_layers=4, num_heads=4, hidden_dim=256, mlp_dim=1024, num_classes=1000
    )


def _cnn(description: str, build: Callable[[], Any]) -> TorchModel:
    return TorchModel(description, "cnn", build, _image_input, ("logits",))


TORCH_MODELS: dict[str, TorchModel] = {
    "resnet18": _cnn("torchvision ResNet-18", _torchvision_model("resnet18")),
    "resnet50": _cnn("torchvision ResNet-50 (bottleneck blocks)", _torchvision_model("resnet50")),
    "mobilenet_v2": _cnn("torchvision MobileNetV2 (depthwise Conv, ReLU6)", _torchvision_model("mobilenet_v2")),
    "shufflenet_v2_x1_0": _cnn(
        "torchvision ShuffleNetV2 1.0x (channel shuffle, split)", _torchvision_model("shufflenet_v2_x1_0")
    ),
    "squeezenet1_1": _cnn(
        "torchvision SqueezeNet 1.1 (fire modules, no BatchNorm)", _torchvision_model("squeezenet1_1")
    ),
    "googlenet": _cnn(
        "torchvision GoogLeNet (Inception v1 with BatchNorm, concat branches)",
        _torchvision_model("googlenet", aux_logits=False, transform_input=False, init_weights=False),
    ),
    "vgg11_bn": _cnn(
        "torchvision VGG-11 with BatchNorm (132M parameters, mostly the classifier)", _torchvision_model("vgg11_bn")
    ),
    "vit_tiny": TorchModel(
        "torchvision VisionTransformer, 4 layers, hidden 256, 4 heads, MLP 1024, patch 16",
        "transformer",
        _vision_transformer,
        _image_input,
        ("logits",),
    ),
    "bert_tiny": TorchModel(
        "BERT shaped like HF BertModel: 4 layers, hidden 256, 4 heads, FFN 1024, vocab 8000, sequence 128, SDPA",
        "transformer",
        lambda: _bert_module(layers=4, hidden=256, heads=4, intermediate=1024, vocab=VOCAB_SIZE, max_positions=512),
        _token_inputs,
        ("last_hidden_state", "pooler_output"),
    ),
    "gpt2_tiny": TorchModel(
        "GPT-2-like decoder: 4 layers, hidden 256, 4 heads, vocab 8000, sequence 128, causal SDPA, tied LM head",
        "transformer",
        lambda: _gpt2_module(layers=4, hidden=256, heads=4, vocab=VOCAB_SIZE, max_positions=512),
        lambda generator: _token_inputs(generator, with_mask=False),
        ("logits",),
    ),
}


def model_file_name(name: str, *, optimize: bool = True) -> str:
    """``resnet18.onnx`` for the default export, ``resnet18.noopt.onnx`` for ``optimize=False``."""
    return f"{name}{'' if optimize else UNOPTIMIZED_SUFFIX}.onnx"


def example_inputs(name: str, seed: int = 0) -> dict[str, Any]:
    """The seeded example inputs (name -> torch tensor) a zoo model is exported with."""
    spec = _spec(name)
    torch = _import_torch()
    return spec.inputs(torch.Generator().manual_seed(seed))


def build_torch_module(name: str, seed: int = 0) -> Any:
    """The zoo model as a ``torch.nn.Module`` in eval mode with seeded random weights (:func:`randomize_weights`)."""
    spec = _spec(name)
    torch = _import_torch()
    torch.manual_seed(seed)
    return randomize_weights(spec.build(), seed)


def build_torch_model(name: str, out_dir: Path, *, optimize: bool = True, seed: int = 0) -> Path:
    """Export zoo model ``name`` to ``out_dir/`` (see :func:`model_file_name`) and return the file's path.

    ``optimize`` is passed to ``torch.onnx.export``: False keeps the exporter's graph as translated
    (no constant folding of its own helper chains). Weights are stored inside the file. The IR version
    is lowered to what ONNX Runtime 1.31 loads if the exporter wrote a newer one.
    """
    spec = _spec(name)
    torch = _import_torch()
    _import_onnxscript()
    module = build_torch_module(name, seed)
    inputs = example_inputs(name, seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / model_file_name(name, optimize=optimize)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's own deprecation notices during export
        program = torch.onnx.export(
            module,
            tuple(inputs.values()),
            dynamo=True,
            optimize=optimize,
            input_names=list(inputs),
            output_names=list(spec.output_names),
            verbose=False,
        )
    _check_versions(program.model_proto, name)
    _save(program.model_proto, path)
    return path


def build_zoo(
    names: Iterable[str] | None, out_dir: Path, variants: Sequence[str] = ("default",), seed: int = 0
) -> dict[tuple[str, str], Path]:
    """Export several zoo models; ``names=None`` means all. Returns ``(name, variant) -> path``.

    ``variants`` is any of ``"default"`` (``optimize=True``) and ``"noopt"`` (``optimize=False``); both
    variants of one model can share ``out_dir`` (different file names).
    """
    names = list(TORCH_MODELS) if names is None else list(names)
    for variant in variants:
        if variant not in VARIANTS:
            raise SettingsError(f"unknown zoo variant {variant!r}: choose from {', '.join(VARIANTS)}")
    for name in names:
        _spec(name)
    return {
        (name, variant): build_torch_model(name, out_dir, optimize=variant == "default", seed=seed)
        for name in names
        for variant in variants
    }


def _spec(name: str) -> TorchModel:
    try:
        return TORCH_MODELS[name]
    except KeyError:
        raise SettingsError(f"unknown zoo model {name!r}: choose from {', '.join(TORCH_MODELS)}") from None


def _import_onnxscript() -> None:
    try:
        importlib.import_module("onnxscript")
    except ImportError as exc:
        raise SettingsError(f"torch.onnx.export(dynamo=True) needs onnxscript: pip install onnxscript ({exc})") from exc


def _check_versions(model: Any, name: str) -> None:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > MAX_OPSET:
            raise SettingsError(
                f"{name}: exported with ai.onnx opset {opset.version}, ONNX Runtime 1.31 supports up to {MAX_OPSET}"
            )
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)


def _save(model: Any, path: Path) -> None:
    import onnx

    tmp = path.with_name(path.name + ".tmp")
    onnx.save_model(model, str(tmp))
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.zoo.torch_zoo OUT_DIR [--models a,b] [--variants default,noopt]``."""
    parser = argparse.ArgumentParser(description="Export the PyTorch model zoo to ONNX.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--models", default=",".join(TORCH_MODELS), help="comma-separated names")
    parser.add_argument("--variants", default="default", help="comma-separated: default, noopt")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        paths = build_zoo(args.models.split(","), args.out_dir, args.variants.split(","), seed=args.seed)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for (name, variant), path in paths.items():
        size_mib = path.stat().st_size / 2**20
        print(f"{name:20} {variant:8} {size_mib:8.1f} MiB  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
