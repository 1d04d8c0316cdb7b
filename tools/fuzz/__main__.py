"""``python -m tools.fuzz graphs|bodies|bytes|opsets ...``: see :mod:`tools.fuzz.command`."""

import sys

from tools.fuzz.command import main

sys.exit(main())
