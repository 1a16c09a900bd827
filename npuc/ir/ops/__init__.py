"""Op definitions, one module per family.  Importing this package registers them all."""

from npuc.ir.ops import elementwise  # noqa: F401
