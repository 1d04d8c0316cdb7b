"""``python -m onnxsat`` runs the command line."""

import sys

from onnxsat.cli import main

sys.exit(main())
