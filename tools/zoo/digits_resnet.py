"""A small ResNet trained on the digits at 32x32: the convolution net issue 21's quantization goal is measured on.

The bundled digits CNN (:mod:`tools.zoo.digits_cnn`) is too small for INT8 to pay: its convolutions are
a few thousand MACs, so session overhead dominates. A ResNet-style net (three stages of basic blocks
with BatchNorm, 16/32/64 channels, on 32x32 inputs) is the smallest model shaped like the convolution
nets users quantize, and it can be trained here in minutes. ``--channels 32,64,128`` (or ``64,128,256``)
trains a wider variant of the same net, where the convolutions rather than session overhead set the latency.

The samples are exactly what ``--data digits-train`` / ``--data digits-test`` feed a 1x32x32 input
(:func:`onnxsat.data.sources.load_dataset`: digits scaled to [0, 1], resized bilinearly), so the model
trained here, quantized with ``--data digits-train`` and scored on ``digits-test``, sees one input
distribution throughout. Training uses only the 1,400 training digits of
:data:`onnxsat.data.sources.DIGITS_SPLIT`, with random shifts of up to 2 pixels; the 397 test digits
are only evaluated.

Needs PyTorch (the ``zoo`` extra): never imported by the package or the tests.
``python -m tools.zoo.digits_resnet --out /work/models/digits_resnet.onnx`` (seeded; a few CPU minutes);
``--channels 32,64,128 --out /work/models/digits_resnet_w32.onnx`` for a wider one;
``--channels 64,128,256,512 --blocks 2 --epochs 15`` is a ResNet-18 (the CIFAR layout: 99.50% on the test
digits, 19 CPU minutes here), where INT8 pays most: its convolutions, not overhead, set the latency.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import nn
from torch.nn import functional

from onnxsat.data.sources import DIGITS_TEST, DIGITS_TRAIN, Dataset, load_dataset

INPUT_SHAPE = (1, 1, 32, 32)
OPSET = 17
CHANNELS = (16, 32, 64)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and a residual Add (a 1x1 projection when the shape changes)."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = functional.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return functional.relu(y + self.shortcut(x))


class DigitsResNet(nn.Module):
    """A stem convolution, ``blocks`` basic blocks per stage (strides 1, 2, 2), global pooling, a linear head.

    ``channels`` gives each stage's width (the stem has the first stage's).
    """

    def __init__(self, blocks: int = 1, classes: int = 10, channels: tuple[int, ...] = CHANNELS) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, channels[0], 3, 1, 1, bias=False), nn.BatchNorm2d(channels[0]), nn.ReLU()
        )
        layers: list[nn.Module] = []
        inputs = channels[0]
        for stage, outputs in enumerate(channels):
            for index in range(blocks):
                layers.append(BasicBlock(inputs, outputs, 2 if stage > 0 and index == 0 else 1))
                inputs = outputs
        self.stages = nn.Sequential(*layers)
        self.head = nn.Linear(inputs, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stages(self.stem(x))
        return self.head(torch.flatten(functional.adaptive_avg_pool2d(y, 1), 1))


def shifted(images: torch.Tensor, most: int, generator: torch.Generator) -> torch.Tensor:
    """Each image moved by a random whole-pixel offset in [-most, most] on each axis, zeros shifted in."""
    padded = functional.pad(images, (most, most, most, most))
    offsets = torch.randint(0, 2 * most + 1, (len(images), 2), generator=generator)
    height, width = images.shape[2:]
    return torch.stack([padded[i, :, dy : dy + height, dx : dx + width] for i, (dy, dx) in enumerate(offsets.tolist())])


def top1(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(logits.argmax(axis=1) == labels))


def split_training_digits(validation: int, seed: int) -> tuple[Dataset, Dataset | None]:
    """(digits to train on, the ``validation`` training digits set apart, or None): a seeded draw, so that a
    compressor can be searched on digits the net never saw and scored on the test digits, which are a third set."""
    data = load_dataset(DIGITS_TRAIN, INPUT_SHAPE)
    if not validation:
        return data, None
    train, held = data.split(validation / len(data), seed)
    assert held is not None
    return train, held


def train(
    epochs: int, blocks: int, seed: int, channels: tuple[int, ...] = CHANNELS, validation: int = 0
) -> tuple[DigitsResNet, list[float]]:
    """SGD with momentum and a cosine schedule on the 1,400 training digits (less ``validation`` of them),
    shifted up to 2 pixels."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    data, _ = split_training_digits(validation, seed)
    assert data.labels is not None
    images, labels = torch.from_numpy(data.inputs), torch.from_numpy(data.labels)
    model = DigitsResNet(blocks, channels=channels)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
    steps_per_epoch = (len(images) + 63) // 64
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, epochs=epochs, steps_per_epoch=steps_per_epoch)
    losses = []
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(images), generator=generator)
        total = 0.0
        for start in range(0, len(images), 64):
            batch = order[start : start + 64]
            loss = functional.cross_entropy(model(shifted(images[batch], 2, generator)), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total += float(loss.detach()) * len(batch)
        losses.append(total / len(images))
    return model.eval(), losses


def export(model: DigitsResNet, path: Path) -> None:
    """ONNX opset 17, batch dynamic (input ``input`` [N, 1, 32, 32], output ``logits`` [N, 10])."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        model,
        (torch.zeros(INPUT_SHAPE),),
        str(path),
        input_names=["input"],
        output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        opset_version=OPSET,
        dynamo=False,
    )


def evaluate(path: Path) -> dict[str, float]:
    """Top-1 of the exported file in ONNX Runtime on the training and the held-out digits."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    scores = {}
    for spec in (DIGITS_TRAIN, DIGITS_TEST):
        data = load_dataset(spec, INPUT_SHAPE)
        assert data.labels is not None
        scores[spec] = top1(session.run(None, {"input": data.inputs})[0], data.labels)
    return scores


def channel_widths(text: str) -> tuple[int, ...]:
    """``"32,64,128"`` as ``(32, 64, 128)``: one positive width per stage."""
    try:
        widths = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"expected positive widths, got {text!r}")
    return widths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/work/models/digits_resnet.onnx"))
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--blocks", type=int, default=1, help="basic blocks per stage (1: ResNet-8)")
    parser.add_argument(
        "--channels",
        type=channel_widths,
        default=CHANNELS,
        help="comma-separated width of each stage (default %(default)s; e.g. 32,64,128 for a wider net)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--validation",
        type=int,
        default=0,
        help="training digits set apart (never trained on), saved as OUT's stem + .validation.npz for --data",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model, losses = train(args.epochs, args.blocks, args.seed, args.channels, args.validation)
    export(model, args.out)
    _, held = split_training_digits(args.validation, args.seed)
    if held is not None:
        np.savez(args.out.with_suffix(".validation.npz"), inputs=held.inputs, labels=held.labels)
    stats = {
        "file": str(args.out),
        "epochs": args.epochs,
        "blocks": args.blocks,
        "channels": list(args.channels),
        "seed": args.seed,
        "validation digits": args.validation,
        "seconds": round(time.perf_counter() - start, 1),
        "final_loss": round(losses[-1], 4),
        **{f"top1_{spec}": score for spec, score in evaluate(args.out).items()},
    }
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
