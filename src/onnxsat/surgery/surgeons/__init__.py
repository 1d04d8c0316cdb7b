"""The surgeon catalogue (Olive's GraphSurgeries names), one module per family.

Importing this package imports every module in it, which registers their surgeons: a new family is a
new module here, nothing else to edit.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
