"""The design space: dotted keys of the target file, the values each takes, and the designs.

A sweep dimension is ``KEY=V1,V2,...`` where KEY is any numeric or enumerated field of the target
file by its dotted key (``array.rows``, ``scratchpad.size_bytes``, ``dma.bytes_per_cycle``,
``array.dataflows``, ``area.sram_port_factor``, ...).  Values are parsed by the type the base
target has at that key: integers (``524288``, ``512K``, ``2M``: K/Ki/KiB = 1024, M/Mi/MiB =
1024^2), floats, names (``output_stationary``), or lists joined by ``+``
(``weight_stationary+output_stationary``).  A value the target file refuses at that key alone is
an :class:`~npuc.errors.ExploreError` at once; combinations the file refuses (a scratchpad not a
whole number of bank rows) become infeasible designs with the reason.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from npuc.errors import ExploreError, TargetError
from npuc.targets import Target, target_from_dict

_NOT_SWEEPABLE = ("name", "description")
_SIZE = re.compile(r"^(\d+)\s*(K|Ki|KiB|KB|M|Mi|MiB|MB|G|Gi|GiB|GB)?$", re.IGNORECASE)
_SCALE = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def target_document(target: Target) -> dict:
    """The target as a plain document (the TOML file's shape: tables, scalars, lists)."""
    return target.document()


# Keys of the older target-file form, still accepted in sweeps: they name a figure of the memory
# that holds activations (``Target.activation_memory``); energy.dram_pj_per_byte sets its read
# and write energy together.
_ALIASES = {"dma.bytes_per_cycle": ("bytes_per_cycle",), "dma.latency_cycles": ("latency_cycles",),
            "dma.burst_bytes": ("burst_bytes",), "dram.size_bytes": ("size_bytes",),
            "energy.dram_pj_per_byte": ("read_pj_per_byte", "write_pj_per_byte")}


def _resolved(doc: Mapping, key: str) -> list[str]:
    """The document keys a sweep key sets (itself, or an older form's key's targets)."""
    if key not in _ALIASES:
        return [key]
    memory = doc["memory"]
    holding = [n for n, m in memory.items() if "activations" in m["holds"]]
    rank = {"sram": 0, "dram": 1, "flash": 2}
    name = sorted(holding, key=lambda n: rank[memory[n]["kind"]])[-1]
    return [f"memory.{name}.{leaf}" for leaf in _ALIASES[key]]


def sweepable_keys(doc: Mapping) -> list[str]:
    """Every numeric or enumerated leaf of a target document, by dotted key (the memories'
    ``memory.NAME.KEY``, and the older form's ``dma.*``, ``dram.size_bytes`` and
    ``energy.dram_pj_per_byte``)."""
    out = []
    for section, table in doc.items():
        if isinstance(table, dict):
            for k, v in table.items():
                if isinstance(v, dict):
                    out += [f"{section}.{k}.{kk}" for kk, vv in v.items() if not isinstance(vv, bool)]
                elif not isinstance(v, bool):
                    out.append(f"{section}.{k}")
        elif section not in _NOT_SWEEPABLE and not isinstance(table, bool):
            out.append(section)
    return out + list(_ALIASES)


def _get(doc: Mapping, key: str) -> Any:
    key = _resolved(doc, key)[0]
    node: Any = doc
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def set_key(doc: dict, key: str, value: Any) -> None:
    """Set a dotted key of a document in place (an older form's key sets what it names)."""
    for k in _resolved(doc, key):
        *path, last = k.split(".")
        node = doc
        for part in path:
            node = node[part]
        node[last] = copy.deepcopy(value)


def format_value(value: Any) -> str:
    """A value as written on the command line and in results.csv (lists joined by '+')."""
    if isinstance(value, list):
        return "+".join(str(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def parse_value(key: str, text: str, like: Any) -> Any:
    """``text`` as a value of the type of ``like`` (the base target's value at ``key``)."""
    text = text.strip()
    if isinstance(like, list):
        parts = [p.strip() for p in text.split("+") if p.strip()]
        if not parts:
            raise ExploreError(f"--sweep {key}: an empty list; give the entries joined by '+'")
        return parts
    if isinstance(like, int):
        m = _SIZE.match(text.replace("_", ""))
        if not m:
            raise ExploreError(f"--sweep {key}: '{text}' is not an integer (sizes may end in K or M)")
        return int(m.group(1)) * (_SCALE[m.group(2)[0].lower()] if m.group(2) else 1)
    if isinstance(like, float):
        try:
            return float(text)
        except ValueError:
            raise ExploreError(f"--sweep {key}: '{text}' is not a number") from None
    return text


@dataclass(frozen=True)
class Dimension:
    """One swept key and its values, in the order given."""

    key: str
    values: tuple[Any, ...]


def parse_sweep(spec: str) -> tuple[str, list[str]]:
    """``KEY=V1,V2,...`` -> (key, [value texts])."""
    key, eq, rest = spec.partition("=")
    key = key.strip()
    texts = [t for t in (x.strip() for x in rest.split(",")) if t]
    if not eq or not key or not texts:
        raise ExploreError(f"--sweep '{spec}' is not KEY=V1,V2,... (for instance array.rows=8,16,32)")
    return key, texts


def dimensions(base: Target, sweeps: Mapping[str, Sequence[Any]] | Sequence[str]) -> tuple[Dimension, ...]:
    """The dimensions of a sweep, checked against the base target.

    ``sweeps`` is a mapping {dotted key: values} (values typed, or strings to parse) or a list of
    ``KEY=V1,V2`` strings.  Each value is checked alone against the target file's rules.
    """
    doc = target_document(base)
    items = [parse_sweep(s) for s in sweeps] if not isinstance(sweeps, Mapping) else list(sweeps.items())
    if not items:
        raise ExploreError("nothing to explore: give at least one --sweep KEY=V1,V2,...")
    seen: set[str] = set()
    dims = []
    for key, raw in items:
        if key in seen:
            raise ExploreError(f"--sweep {key} is given twice; list all its values in one --sweep")
        seen.add(key)
        keys = sweepable_keys(doc)
        try:
            like = _get(doc, key)
        except KeyError:
            raise ExploreError(f"the target file has no key '{key}' to sweep; the keys are: {', '.join(keys)}") from None
        if key not in keys:
            raise ExploreError(f"'{key}' is not a numeric or enumerated key of the target file; the keys are: {', '.join(keys)}")
        if isinstance(raw, str):
            raw = [t.strip() for t in raw.split(",") if t.strip()]  # "8,16,32", as on the command line
        elif not isinstance(raw, Sequence):
            raise ExploreError(f"the values of '{key}' must be a list (or 'V1,V2,...'), got {raw!r}")
        values = [parse_value(key, v, like) if isinstance(v, str) else _typed(key, v, like) for v in raw]
        if not values:
            raise ExploreError(f"--sweep {key} has no values")
        unique = list(dict.fromkeys(json.dumps(v) for v in values))
        if len(unique) != len(values):
            raise ExploreError(f"--sweep {key} lists a value twice: {', '.join(format_value(v) for v in values)}")
        for v in values:
            _check_alone(doc, key, v)
        dims.append(Dimension(key, tuple(values)))
    return tuple(dims)


def _typed(key: str, value: Any, like: Any) -> Any:
    if isinstance(like, list):
        if isinstance(value, (list, tuple)):
            return [str(x) for x in value]
        return [str(value)]
    if isinstance(like, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _check_alone(doc: dict, key: str, value: Any) -> None:
    trial = copy.deepcopy(doc)
    set_key(trial, key, value)
    try:
        target_from_dict(trial, "the sweep")
    except TargetError as e:
        for line in str(e).splitlines():
            names = "|".join(re.escape(k) for k in _resolved(doc, key))
            m = re.search(rf"key '(?:{names})(\.\d+)?': (.*)$", line)
            if m:
                raise ExploreError(f"--sweep {key}={format_value(value)}: {m.group(2)}") from None


@dataclass(frozen=True)
class Design:
    """One point of the space: the swept keys' values, and the target they make (or why not)."""

    assignment: tuple[tuple[str, Any], ...]
    target: Target | None
    invalid: str = ""

    @property
    def id(self) -> str:
        """A short name derived from the assignment alone (stable across runs)."""
        text = json.dumps(self.assignment, sort_keys=True, separators=(",", ":"))
        return "d" + hashlib.sha256(text.encode()).hexdigest()[:10]

    def value(self, key: str) -> Any:
        return dict(self.assignment)[key]


def make_design(base: Target, assignment: Sequence[tuple[str, Any]]) -> Design:
    """The design of ``assignment`` over ``base``: its target, or the target file's refusal."""
    doc = target_document(base)
    for key, value in assignment:
        set_key(doc, key, copy.deepcopy(value))
    assignment = tuple((k, copy.deepcopy(v)) for k, v in assignment)
    probe = Design(assignment, None)
    doc["name"] = f"{base.name}-{probe.id}"
    doc["description"] = "; ".join(f"{k}={format_value(v)}" for k, v in assignment) or base.description
    try:
        return Design(assignment, target_from_dict(doc, f"design {probe.id}"))
    except TargetError as e:
        return Design(assignment, None, f"invalid target: {e}".replace("\n", "; "))
