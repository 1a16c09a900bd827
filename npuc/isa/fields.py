"""Instruction fields: name, bit width, kind, meaning, and their binary and text forms.

A field's kind says how its bits read: ``uint`` (unsigned), ``sint`` (two's complement), ``enum``
(an :mod:`npuc.isa.enums` class, encoded by value, written by name), ``bool`` (0/1), ``log2``
(a power of two stored as its exponent: element sizes 1/2/4) and ``f32`` (an IEEE-754 binary32
immediate written as a decimal number; NaN is refused so that text and bits map one to one).
"""

from __future__ import annotations

import enum
import functools
import math
import struct
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np



@dataclass(frozen=True)
class Derived:
    """A default computed from fields declared before it: ``Derived("n0 * esize")``.

    ``expr`` is a Python expression over earlier field names (enum values expose ``.size``);
    the ISA reference prints it as is.
    """

    expr: str

    def __call__(self, values: Mapping[str, Any]) -> Any:
        return eval(_compiled(self.expr), {"__builtins__": {}}, dict(values))  # noqa: S307 (npuc's own text)


@functools.cache
def _compiled(expr: str):
    return compile(expr, f"<default {expr}>", "eval")


Default = int | float | enum.IntEnum | Derived | None


@dataclass(frozen=True)
class Field:
    """One field of an instruction.

    ``default`` is what the assembler uses when the text omits the field: a constant, or a
    function of the fields given before it (a contiguous stride from a count); ``None`` makes
    the field required.  ``lo`` is the smallest legal value of a ``uint``/``sint`` field.
    """

    name: str
    bits: int
    kind: str
    doc: str
    enum: type[enum.IntEnum] | None = None
    default: Default = None
    lo: int | None = None
    hex: bool = False

    # ------------------------------------------------------------------ legality
    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not a legal value of this field, or None."""
        k = self.kind
        if k == "enum":
            if not isinstance(value, self.enum):
                return f"must be one of {', '.join(m.name for m in self.enum)}, got {value!r}"
            return None
        if k == "f32":
            if not isinstance(value, float) or math.isnan(value):
                return f"must be a float (not NaN), got {value!r}"
            if float(np.float32(value)) != value and not math.isinf(value):
                return f"must be exactly representable in fp32, got {value!r}"
            return None
        if isinstance(value, bool) and k != "bool" or not isinstance(value, int):
            return f"must be an integer, got {value!r}"
        if k == "bool":
            return None if value in (0, 1) else f"must be 0 or 1, got {value}"
        if k == "log2":
            return None if value in (1, 2, 4) else f"must be 1, 2 or 4, got {value}"
        lo, hi = self.min_value, self.max_value
        if not lo <= value <= hi:
            return f"must be in [{lo}, {hi}], got {value}"
        return None

    @property
    def min_value(self) -> int:
        """The smallest legal value of a ``uint``/``sint`` field."""
        lo = 0 if self.kind == "uint" else -(1 << (self.bits - 1))
        return lo if self.lo is None else max(lo, self.lo)

    @property
    def max_value(self) -> int:
        """The largest legal value of a ``uint``/``sint`` field."""
        return (1 << self.bits) - 1 if self.kind == "uint" else (1 << (self.bits - 1)) - 1

    # ------------------------------------------------------------------ bits
    def to_bits(self, value: Any) -> int:
        k = self.kind
        if k == "f32":
            return struct.unpack("<I", struct.pack("<f", value))[0]
        if k == "log2":
            return int(value).bit_length() - 1
        v = int(value)
        return v & ((1 << self.bits) - 1)

    def from_bits(self, raw: int) -> Any:
        """The value stored in ``raw``; may be illegal (check with :meth:`problem`)."""
        k = self.kind
        if k == "enum":
            try:
                return self.enum(raw)
            except ValueError:
                return raw
        if k == "f32":
            return struct.unpack("<f", struct.pack("<I", raw))[0]
        if k == "log2":
            return 1 << raw
        if k == "sint" and raw >= 1 << (self.bits - 1):
            return raw - (1 << self.bits)
        return raw

    # ------------------------------------------------------------------ text
    def to_text(self, value: Any) -> str:
        k = self.kind
        if k == "enum":
            return value.name
        if k == "f32":
            return str(np.float32(value))
        if self.hex:
            return f"0x{value:x}"
        return str(int(value))

    def from_text(self, text: str) -> Any:
        """Parse the text of a value; raises ValueError with a reason."""
        k = self.kind
        if k == "enum":
            try:
                return self.enum[text]
            except KeyError:
                raise ValueError(f"must be one of {', '.join(m.name for m in self.enum)}") from None
        if k == "f32":
            return _f32_from_text(text)
        return int(text, 0)

    @property
    def default_text(self) -> str:
        """The default as the ISA reference writes it ("required" when there is none)."""
        if self.default is None:
            return "required"
        if isinstance(self.default, Derived):
            return f"= {self.default.expr}"
        return self.to_text(self.default)

    @property
    def type_text(self) -> str:
        """The kind as the ISA reference writes it."""
        if self.kind == "enum":
            return "enum: " + ", ".join(m.name for m in self.enum)
        if self.kind == "log2":
            return "1, 2 or 4 (stored as log2)"
        return {"uint": "uint", "sint": "int", "bool": "bool", "f32": "fp32"}[self.kind]


def uint(name: str, bits: int, doc: str, default: Default = None, lo: int | None = None, hex: bool = False) -> Field:
    return Field(name, bits, "uint", doc, default=default, lo=lo, hex=hex)


def count(name: str, doc: str, default: Default = None) -> Field:
    """A 16-bit element count, at least 1."""
    return Field(name, 16, "uint", doc, default=default, lo=1)


def sint(name: str, bits: int, doc: str, default: Default = None) -> Field:
    return Field(name, bits, "sint", doc, default=default)


def flag(name: str, doc: str, default: int = 0) -> Field:
    return Field(name, 1, "bool", doc, default=default)


def choice(name: str, bits: int, cls: type[enum.IntEnum], doc: str, default: Default = None) -> Field:
    return Field(name, bits, "enum", doc, enum=cls, default=default)


_F32_MAX = float(np.finfo(np.float32).max)


def _f32_from_text(text: str) -> float:
    """An fp32 immediate from its text: rounded to the nearest fp32; ``inf``/``-inf`` are
    infinities, but a finite number beyond fp32's range is refused rather than turned into one."""
    value = float(text)
    if math.isnan(value):
        raise ValueError("must be a number, not NaN")
    if math.isinf(value):
        if text.strip().lstrip("+-").lower() not in ("inf", "infinity"):
            raise ValueError(f"{text} is beyond the range of fp32 (largest {_F32_MAX:.8g}); write inf for an infinity")
        return value
    with np.errstate(over="ignore"):
        rounded = float(np.float32(value))
    if math.isinf(rounded):
        raise ValueError(f"{text} is beyond the range of fp32 (largest {_F32_MAX:.8g}); write inf for an infinity")
    return rounded


def f32(name: str, doc: str, default: float | None = 0.0) -> Field:
    return Field(name, 32, "f32", doc, default=default)


def esize(name: str, doc: str) -> Field:
    return Field(name, 2, "log2", doc)


def addr(name: str, bits: int, doc: str, default: Default = None) -> Field:
    return Field(name, bits, "uint", doc, default=default, hex=True)
