"""``python -m tools.zoo build|transformers ...``: see :mod:`tools.zoo.build`."""

import sys

from tools.zoo.build import main

sys.exit(main())
