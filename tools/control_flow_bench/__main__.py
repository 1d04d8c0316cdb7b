"""``python -m tools.control_flow_bench``: see :mod:`tools.control_flow_bench.bench`."""

import sys

from tools.control_flow_bench.bench import main

sys.exit(main())
