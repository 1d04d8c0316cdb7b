"""Reliability campaigns: differential graph fuzzing, byte-mutation fuzzing and the opset sweep."""
