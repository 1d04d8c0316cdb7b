"""Equality saturation over ONNX graphs: encode, saturate with rewrite rules, extract, decode."""
