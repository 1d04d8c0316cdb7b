"""Small PyTorch networks exported with their layers inside If, Scan and Loop, for coverage beyond the wheels.

Seeded weights (nothing is trained: the bench times and compares outputs, it does not score): a
convolution net in both branches of ``torch.cond`` on a sample-rate input (If, as Silero's exports), an RNN
step under ``scan`` (Scan), a residual MLP under ``while_loop`` (Loop), all through the torch.export-based
exporter; and a Gelu/LayerNorm refinement loop through the TorchScript exporter (Loop), whose bodies keep
the decomposed patterns that exporter writes. PyTorch is optional: :func:`torch_missing` says why these
are skipped without it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

SEED = 0


@dataclass(frozen=True)
class Export:
    name: str
    control_flow: str
    build: Callable[[Path], dict[str, np.ndarray]]
    """Writes the model to the path; returns its feeds."""


def torch_missing() -> str | None:
    """Why the exports cannot be built here, or None when PyTorch is importable."""
    try:
        import torch  # noqa: F401
    except ImportError as error:
        return f"PyTorch is not installed ({error}); the wheel models still run"
    return None


@contextlib.contextmanager
def _quiet():
    """The exporters' progress lines and deprecation warnings stay out of the table."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    sink = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _export(module, args: tuple, path: Path, names: list[str]) -> None:
    """``module`` through the torch.export-based exporter, saved as one file (weights inside)."""
    import torch

    with _quiet(), torch.no_grad():
        program = torch.onnx.export(module.eval(), args, dynamo=True, opset_version=18, input_names=names)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(program.model_proto, str(path))


def _feeds(names: list[str], args: tuple) -> dict[str, np.ndarray]:
    return {name: np.asarray(arg.numpy()) for name, arg in zip(names, args, strict=True)}


def cond_convnet(path: Path) -> dict[str, np.ndarray]:
    """A 1-D convolution net with a LayerNorm/Gelu head per branch of ``torch.cond(sr == 16000, ...)``."""
    import torch
    from torch import nn

    torch.manual_seed(SEED)

    class Branch(nn.Module):
        def __init__(self, stride: int) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            for cin, cout, kernel, step in ((1, 32, 9, stride), (32, 64, 5, 2), (64, 64, 5, 2), (64, 96, 3, 2)):
                layers += [nn.Conv1d(cin, cout, kernel, stride=step, padding=kernel // 2), nn.BatchNorm1d(cout)]
                layers.append(nn.ReLU())
            self.net = nn.Sequential(*layers)
            self.head = nn.Sequential(nn.LayerNorm(96), nn.Linear(96, 128), nn.GELU(), nn.Linear(128, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(self.head(self.net(x.unsqueeze(1)).mean(dim=2)))

    class Switch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.at16k, self.at8k = Branch(4), Branch(2)

        def forward(self, x: torch.Tensor, sr: torch.Tensor) -> torch.Tensor:
            return torch.cond(sr == 16000, self.at16k, self.at8k, (x,))

    model = Switch()
    for module in model.modules():  # BatchNorm statistics other than the identity, so folding them matters
        if isinstance(module, nn.BatchNorm1d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    args = (torch.randn(1, 512) * 0.1, torch.tensor(16000))
    _export(model, args, path, ["input", "sr"])
    return _feeds(["input", "sr"], args)


def scan_rnn(path: Path) -> dict[str, np.ndarray]:
    """An Elman RNN with an output projection, one ``scan`` step per frame (40 features, 50 frames)."""
    import torch
    from torch import nn
    from torch._higher_order_ops.scan import scan

    torch.manual_seed(SEED)

    class Rnn(nn.Module):
        def __init__(self, features: int = 40, hidden: int = 128) -> None:
            super().__init__()
            self.inp, self.rec = nn.Linear(features, hidden), nn.Linear(hidden, hidden)
            self.out = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 8))

        def forward(self, x: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            def step(h: torch.Tensor, frame: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                new = torch.tanh(self.inp(frame) + self.rec(h))
                return new, self.out(new)

            last, outputs = scan(step, h0, x)
            return outputs, last

    args = (torch.randn(50, 1, 40), torch.zeros(1, 128))
    _export(Rnn(), args, path, ["frames", "h0"])
    return _feeds(["frames", "h0"], args)


def while_mlp(path: Path) -> dict[str, np.ndarray]:
    """A residual MLP applied ``steps`` times under ``while_loop`` (a decoder's step loop, in miniature)."""
    import torch
    from torch import nn
    from torch._higher_order_ops.while_loop import while_loop

    torch.manual_seed(SEED)

    class Refine(nn.Module):
        def __init__(self, hidden: int = 128) -> None:
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(hidden, 256), nn.ReLU(), nn.Linear(256, hidden))

        def forward(self, x: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
            def more(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
                return i < steps

            def body(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                return i + 1, torch.tanh(self.mlp(h) + h)

            return while_loop(more, body, (torch.zeros((), dtype=torch.int64), x))[1]

    args = (torch.randn(4, 128), torch.tensor(8))
    _export(Refine(), args, path, ["x", "steps"])
    return _feeds(["x", "steps"], args)


def torchscript_loop(path: Path) -> dict[str, np.ndarray]:
    """A Gelu MLP and LayerNorm repeated ``steps`` times in a scripted for-loop, by the TorchScript exporter."""
    import torch
    from torch import nn

    torch.manual_seed(SEED)

    class Refine(nn.Module):
        def __init__(self, hidden: int = 128) -> None:
            super().__init__()
            self.up, self.down, self.norm = nn.Linear(hidden, 256), nn.Linear(256, hidden), nn.LayerNorm(hidden)

        def forward(self, x: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
            h = x
            for _ in range(int(steps)):
                h = self.norm(h + self.down(nn.functional.gelu(self.up(h))))
            return h

    args = (torch.randn(4, 128), torch.tensor(6))
    path.parent.mkdir(parents=True, exist_ok=True)
    with _quiet(), torch.no_grad():
        scripted = torch.jit.script(Refine().eval())
        torch.onnx.export(scripted, args, str(path), dynamo=False, opset_version=17, input_names=["x", "steps"])
    return _feeds(["x", "steps"], args)


EXPORTS: dict[str, Export] = {
    e.name: e
    for e in (
        Export("torch_cond_convnet", "4 Conv+BN, LayerNorm, Gelu MLP per branch of an If on sr == 16000", cond_convnet),
        Export("torch_scan_rnn", "RNN cell and MLP head in a Scan body over 50 frames", scan_rnn),
        Export("torch_while_mlp", "residual MLP in a Loop body, trip count from the steps input", while_mlp),
        Export(
            "torchscript_loop",
            "Gelu MLP and LayerNorm (decomposed) in a Loop body, TorchScript exporter",
            torchscript_loop,
        ),
    )
}
