"""Model builders kept out of the installed package: the PyTorch exports and the digits CNN's numpy training.

``python -m tools.zoo build [NAMES...] --out DIR [--list]``: ``onnxsat zoo build`` plus the PyTorch models
(:mod:`tools.zoo.torch_zoo`, the ``zoo`` extra). ``python -m tools.zoo.digits_cnn``: retrain the bundled digits
CNN. Run both from the repository root.
"""
