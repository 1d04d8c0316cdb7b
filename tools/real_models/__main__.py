"""``python -m tools.real_models fetch|inputs|bench``: see :mod:`tools.real_models.command`."""

import sys

from tools.real_models.command import main

sys.exit(main())
