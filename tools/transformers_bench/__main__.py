"""``python -m tools.transformers_bench``: see :mod:`tools.transformers_bench.command`."""

import sys

from tools.transformers_bench.command import main

sys.exit(main())
