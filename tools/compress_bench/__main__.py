"""``python -m tools.compress_bench``: see :mod:`tools.compress_bench.bench`."""

from tools.compress_bench.bench import main

main()
