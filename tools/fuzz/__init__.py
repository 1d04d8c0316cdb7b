"""Reliability campaigns: differential graph fuzzing, byte-mutation fuzzing and the opset sweep.

Run from the repository root: ``python -m tools.fuzz graphs|bytes|opsets ...`` (see :mod:`tools.fuzz.command`).
"""
