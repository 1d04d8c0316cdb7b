"""Which quantized forms are timing ties: within ``PAYS_SPEEDUP`` of the fastest, and not below a floor."""

from __future__ import annotations

import onnx

from onnxsat.quantization.candidate import PAYS_SPEEDUP, Candidate, timing_ties


def form(speedup: float | None) -> Candidate:
    return Candidate("static", onnx.ModelProto(), {}, None, latency={} if speedup is None else {"speedup": speedup})


def test_forms_within_timing_noise_of_the_fastest_are_ties_and_untimed_ones_never() -> None:
    fastest, close, far, untimed = form(2.0), form(2.0 / PAYS_SPEEDUP + 1e-9), form(1.9), form(None)
    assert timing_ties([far, close, untimed, fastest]) == [close, fastest]


def test_a_floor_leaves_out_forms_slower_than_it_even_when_tied() -> None:
    slow, slower = form(0.98), form(0.96)
    assert timing_ties([slow, slower]) == [slow, slower]
    assert timing_ties([slow, slower], floor=0.97) == [slow]
    assert timing_ties([]) == []
