"""Developer tools run from a checkout of the repository, not installed with ``onnxsat``.

``python -m tools.fuzz``: the reliability campaigns (differential, byte-mutation, opset sweep).
``python -m tools.zoo``: model builders that need more than the product does (PyTorch exports, the numpy
training of the bundled digits CNN).
"""
