"""Op definitions, one module per family.  Importing this package registers them all.

``frontend_extra`` (ops the frontend found missing) is registered too when that module exists.
"""

import importlib
import importlib.util

from npuc.ir.ops import elementwise, linalg, norm, pooling, quantized, reduction, resample, shape  # noqa: F401

if importlib.util.find_spec("npuc.ir.ops.frontend_extra") is not None:
    importlib.import_module("npuc.ir.ops.frontend_extra")
