"""``python -m tools.quantize_bench``: see :mod:`tools.quantize_bench.bench`."""

from tools.quantize_bench.bench import main

main()
