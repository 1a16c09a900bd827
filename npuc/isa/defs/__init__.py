"""The instruction definitions, one module per family; importing this package registers them."""

from npuc.isa.defs import array, control, dma, vector  # noqa: F401
