"""ONNX Runtime integration: offline optimization, peephole optimizers, the transformers optimizer, session tuning.

One module per job (``offline``, ``peephole``, ``transformers``, ``tune``) plus ``command`` for the
``onnxsat tune`` command. Each optimizer takes a ``ModelProto`` and returns ``(model, notices)``: the
notices are one-line remarks for the user (what changed, what the result may only run on), so a
pipeline can collect them into its report without parsing logs.
"""
