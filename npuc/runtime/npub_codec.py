"""Byte-level reading and writing for the .npub container.

:class:`ByteReader` is a bounded cursor: every read checks the bytes left before it takes any, a
count is capped against the bytes left before anything is allocated for it, and every string is
checked to be UTF-8.  :class:`ByteWriter` is its mirror and refuses values that do not fit their
field.  Both speak little-endian.  Every failure is a :class:`BinaryFormatError` whose message
names the file (when known), the place and the field.
"""

from __future__ import annotations

import math
import struct

from npuc.errors import BinaryFormatError

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")

STRING_PREFIX = _U32.size  # a string is a u32 byte length followed by that many UTF-8 bytes


def describe_source(source: str | None) -> str:
    """The prefix of every message about a container: its file name, or a neutral name."""
    return f"{source}: " if source else "npub data: "


def format_error(source: str | None, where: str, text: str) -> BinaryFormatError:
    """Build the error for a rejected container: ``<file>: <where>: <text>``."""
    place = f"{where}: " if where else ""
    return BinaryFormatError(f"{describe_source(source)}{place}{text}")


def align_up(n: int, alignment: int) -> int:
    """The smallest multiple of ``alignment`` that is >= ``n``."""
    return (n + alignment - 1) // alignment * alignment


class ByteReader:
    """A bounded little-endian cursor over one region of a container (a section payload)."""

    def __init__(self, data: bytes, source: str | None, where: str) -> None:
        self.data = data
        self.pos = 0
        self.source = source
        self.where = where

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos

    def error(self, text: str) -> BinaryFormatError:
        """A :class:`BinaryFormatError` about this region."""
        return format_error(self.source, self.where, text)

    def _take(self, n: int, field: str) -> bytes:
        if n > self.remaining:
            raise self.error(
                f"field '{field}' needs {n} bytes at offset {self.pos} but only {self.remaining} "
                "are left; the section is truncated"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def _unpack(self, s: struct.Struct, field: str) -> int | float:
        return s.unpack(self._take(s.size, field))[0]

    def u8(self, field: str) -> int:
        return int(self._unpack(_U8, field))

    def u16(self, field: str) -> int:
        return int(self._unpack(_U16, field))

    def u32(self, field: str) -> int:
        return int(self._unpack(_U32, field))

    def u64(self, field: str) -> int:
        return int(self._unpack(_U64, field))

    def i32(self, field: str) -> int:
        return int(self._unpack(_I32, field))

    def i64(self, field: str) -> int:
        return int(self._unpack(_I64, field))

    def f64(self, field: str) -> float:
        return float(self._unpack(_F64, field))

    def raw(self, n: int, field: str) -> bytes:
        return bytes(self._take(n, field))

    def flag(self, field: str) -> bool:
        """A presence/boolean byte: 0 or 1, nothing else."""
        v = self.u8(field)
        if v > 1:
            raise self.error(f"field '{field}' is {v}; a flag byte must be 0 or 1")
        return v == 1

    def count(self, field: str, min_item_size: int) -> int:
        """A u32 item count, rejected unless its items could fit in the bytes left."""
        n = self.u32(field)
        if n * min_item_size > self.remaining:
            raise self.error(
                f"count '{field}' is {n}, but {n} items need at least {n * min_item_size} bytes "
                f"and only {self.remaining} are left"
            )
        return n

    def string(self, field: str) -> str:
        """A u32 byte length followed by that many bytes of UTF-8."""
        n = self.u32(f"{field} length")
        raw = self._take(n, field)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(f"field '{field}' is not valid UTF-8 (byte {e.start})") from None

    def zeros(self, n: int, field: str) -> None:
        """``n`` bytes of padding, which must all be zero."""
        pad = self._take(n, field)
        if any(pad):
            raise self.error(f"padding '{field}' at offset {self.pos - n} holds non-zero bytes")

    def end(self) -> None:
        """Check that the region was read to its last byte."""
        if self.remaining:
            raise self.error(
                f"{self.remaining} unexpected bytes follow the last field (at offset {self.pos})"
            )


class ByteWriter:
    """A little-endian byte builder that refuses values that do not fit their field."""

    def __init__(self, source: str | None, where: str) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.source = source
        self.where = where

    def error(self, text: str) -> BinaryFormatError:
        return format_error(self.source, self.where, f"cannot write: {text}")

    def raw(self, b: bytes) -> None:
        self.parts.append(bytes(b))
        self.size += len(b)

    def _pack(self, s: struct.Struct, lo: int, hi: int, v: int, field: str) -> None:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise self.error(f"field '{field}' is {v!r}, not an integer in [{lo}, {hi}]")
        self.raw(s.pack(v))

    def u8(self, v: int, field: str) -> None:
        self._pack(_U8, 0, 0xFF, v, field)

    def u16(self, v: int, field: str) -> None:
        self._pack(_U16, 0, 0xFFFF, v, field)

    def u32(self, v: int, field: str) -> None:
        self._pack(_U32, 0, 0xFFFF_FFFF, v, field)

    def u64(self, v: int, field: str) -> None:
        self._pack(_U64, 0, 0xFFFF_FFFF_FFFF_FFFF, v, field)

    def i32(self, v: int, field: str) -> None:
        self._pack(_I32, -(2**31), 2**31 - 1, v, field)

    def i64(self, v: int, field: str) -> None:
        self._pack(_I64, -(2**63), 2**63 - 1, v, field)

    def f64(self, v: float, field: str) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.error(f"field '{field}' is {v!r}, not a finite number")
        self.raw(_F64.pack(float(v)))

    def flag(self, v: bool, field: str) -> None:
        self.u8(1 if v else 0, field)

    def string(self, s: str, field: str) -> None:
        if not isinstance(s, str):
            raise self.error(f"field '{field}' is {s!r}, not a string")
        try:
            b = s.encode("utf-8")
        except UnicodeEncodeError:
            raise self.error(f"field '{field}' cannot be encoded as UTF-8") from None
        self.u32(len(b), f"{field} length")
        self.raw(b)

    def pad_to(self, alignment: int) -> None:
        """Zero bytes up to the next multiple of ``alignment`` (relative to this writer's start)."""
        self.raw(bytes(align_up(self.size, alignment) - self.size))

    def getvalue(self) -> bytes:
        return b"".join(self.parts)
