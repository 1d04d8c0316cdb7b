"""Structured pruning (ONNXPruner): node association trees, tree-level importance, channels removed for real.

``library`` (node attribute library) -> ``trees`` (channel groups) -> ``importance`` (which channels)
-> ``apply`` (slice, fix shapes) -> optional ``reconstruct`` (least-squares refit) -> ``pipeline``.
"""
