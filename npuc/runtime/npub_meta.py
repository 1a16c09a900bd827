"""The profile metadata of a .npub, read and checked in one place.

npuc.codegen.package writes, as canonical JSON in the metadata's extra keys, what the runtime's
profile needs and the binary does not otherwise say: ``npuc.layers`` (per program, per kernel:
name, kind, graph ops, source location, MACs, compulsory DRAM bytes, and those bytes per memory of
the target) and ``npuc.cpu`` (per CPU
segment: name, estimated seconds, FLOPs, bytes moved, and each op with its reason and cost).
:func:`profile_metadata` parses both and checks their shape, so that an edited binary is refused
with a sentence at load time instead of failing in the middle of a profile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from npuc.errors import BinaryFormatError

# [name, kind, [graph ops], source, macs, min_dram_bytes(, [[memory, compulsory bytes]])]: binaries
# written before memories were data have no per-memory list
LayerRow = tuple[str, str, list[str], str, int, int, list[tuple[str, int]]] | tuple[str, str, list[str], str, int, int]
# [value, op, reason, seconds]
CpuOpRow = tuple[str, str, str, float]
# [name, seconds, flops, transfer_bytes, [ops]]
CpuRow = tuple[str, float, int, int, list[CpuOpRow]]

_LAYERS = TypeAdapter(list[list[LayerRow]])
_CPU = TypeAdapter(list[CpuRow])


@dataclass(frozen=True)
class ProfileMetadata:
    layers: tuple[tuple[LayerRow, ...], ...]  # per program
    cpu: tuple[CpuRow, ...]  # per CPU subgraph


def _parse(meta: dict[str, str], key: str, adapter: TypeAdapter) -> Any:
    try:
        return adapter.validate_python(json.loads(meta.get(key, "[]")), strict=False)
    except (ValueError, ValidationError) as e:
        first = str(e).splitlines()[0][:200]
        raise BinaryFormatError(f"the profile metadata '{key}' of the binary is malformed: {first}") from None


def profile_metadata(npub: Any) -> ProfileMetadata:
    """The checked ``npuc.layers`` and ``npuc.cpu`` of ``npub`` (empty when absent)."""
    meta = dict(npub.metadata.extra) if npub.metadata else {}
    layers = _parse(meta, "npuc.layers", _LAYERS)
    cpu = _parse(meta, "npuc.cpu", _CPU)
    for rows in layers:
        for row in rows:
            if row[4] < 0 or row[5] < 0:
                raise BinaryFormatError(f"the profile metadata 'npuc.layers' gives layer '{row[0]}' negative counts")
    for row in cpu:
        if not row[1] >= 0 or row[1] == float("inf"):
            raise BinaryFormatError(f"the profile metadata 'npuc.cpu' gives CPU segment '{row[0]}' "
                                    f"an estimate of {row[1]} seconds")
    return ProfileMetadata(tuple(tuple(r) for r in layers), tuple(cpu))
