"""Loading target files: a preset name or a path to a TOML file -> a validated :class:`Target`."""

from __future__ import annotations

import functools
import tomllib
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from npuc.errors import TargetError
from npuc.isa.enums import Dataflow
from npuc.targets.schema import TargetSchema
from npuc.targets.target import (
    AccumulatorConfig,
    AreaConfig,
    ArrayConfig,
    ClockConfig,
    EnergyConfig,
    MemoryConfig,
    ScratchpadConfig,
    Target,
    VectorConfig,
    WeightDecoderConfig,
)

DEFAULT_TARGET = "npu-mid"

_PRESETS = resources.files("npuc.targets") / "presets"


def list_presets() -> list[str]:
    """Names of the preset targets shipped with npuc, sorted."""
    return sorted(p.name[: -len(".toml")] for p in _PRESETS.iterdir() if p.name.endswith(".toml"))


def load_target(name_or_path: str | Path = DEFAULT_TARGET) -> Target:
    """Load a preset by name (``"npu-mid"``) or a target file by path, validated and frozen."""
    if isinstance(name_or_path, str) and name_or_path in list_presets():
        return _load_preset(name_or_path)
    path = Path(name_or_path)
    if not path.is_file():
        raise TargetError(
            f"no target named '{name_or_path}': not a preset ({', '.join(list_presets())}) "
            "and not a path to a .toml file"
        )
    return target_from_toml(path.read_text(encoding="utf-8"), str(path))


@functools.cache
def _load_preset(name: str) -> Target:
    text = (_PRESETS / f"{name}.toml").read_text(encoding="utf-8")
    return target_from_toml(text, f"preset '{name}' ({name}.toml)")


def target_from_toml(text: str, source: str = "<string>") -> Target:
    """Parse and validate the TOML text of a target file; ``source`` names it in errors."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TargetError(f"{source}: not valid TOML: {e}") from None
    return target_from_dict(doc, source)


def target_from_dict(doc: dict, source: str = "<dict>") -> Target:
    """Validate a parsed target document and build the frozen :class:`Target`."""
    try:
        s = TargetSchema.model_validate(doc)
    except ValidationError as e:
        raise TargetError(_describe(e, source)) from None
    return Target(
        name=s.name,
        description=s.description,
        array=ArrayConfig(s.array.rows, s.array.cols, tuple(Dataflow(d) for d in s.array.dataflows), tuple(s.array.dtypes)),
        scratchpad=ScratchpadConfig(**s.scratchpad.model_dump()),
        accumulator=AccumulatorConfig(**s.accumulator.model_dump()),
        vector=VectorConfig(**s.vector.model_dump()),
        memories=_memories(s),
        clock=ClockConfig(mhz=float(s.clock.mhz)),
        energy=EnergyConfig(**{k: float(v) for k, v in s.energy.model_dump().items() if k != "dram_pj_per_byte"}),
        area=None if s.area is None else AreaConfig(
            **{k: v if k.endswith("_ports") else float(v) for k, v in s.area.model_dump().items()}),
        weight_decoder=None if s.weight_decoder is None else WeightDecoderConfig(
            _number(s.weight_decoder.bytes_per_cycle), s.weight_decoder.latency_cycles, float(s.weight_decoder.pj_per_byte),
            s.weight_decoder.stream_buffers),
        host_triple=s.host.triple if s.host is not None else None,
    )


def _memories(s: TargetSchema) -> tuple[MemoryConfig, ...]:
    """The [memory.NAME] tables in file order; the older form ([dma], [dram] and
    energy.dram_pj_per_byte) is one DRAM named ``dram`` holding everything, behind port ``axi0``."""
    if s.memory is None:
        e = float(s.energy.dram_pj_per_byte)
        return (MemoryConfig("dram", "dram", s.dram.size_bytes, _number(s.dma.bytes_per_cycle), s.dma.latency_cycles,
                             s.dma.burst_bytes, e, e, ("weights", "activations", "io"), "axi0"),)
    return tuple(
        MemoryConfig(name, m.kind, m.size_bytes, _number(m.bytes_per_cycle), m.latency_cycles, m.burst_bytes,
                     float(m.read_pj_per_byte), float(m.write_pj_per_byte), tuple(m.holds), m.port)
        for name, m in s.memory.items()
    )


def _number(v: float) -> float | int:
    """A bandwidth as written: whole numbers stay integers (cycle counts divide them exactly)."""
    return int(v) if float(v).is_integer() else float(v)


_PLAIN = {
    "missing": "missing key",
    "extra_forbidden": "unknown key",
}


def _describe(e: ValidationError, source: str) -> str:
    """One line per problem: the file, the dotted key and the reason."""
    lines = []
    for err in e.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        reason = _PLAIN.get(err["type"], err["msg"].removeprefix("Value error, "))
        if err["type"] not in (*_PLAIN, "value_error") and not isinstance(err.get("input"), (dict, type(None))):
            reason += f" (got {err['input']!r})"
        lines.append(f"{source}: key '{key}': {reason}")
    head = f"invalid target file {source}" if len(lines) > 1 else ""
    return "\n".join([head, *lines]) if head else lines[0]


def targets_table(names: list[str] | None = None) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Targets side by side for ``npuc targets``: (target names, [(figure, value per target)]).

    ``names`` are preset names or paths (default: every preset, smallest array first).
    """
    targets = [load_target(n) for n in names] if names else sorted(
        (load_target(n) for n in list_presets()), key=lambda t: t.peak_macs_per_cycle
    )
    per_target = [dict(t.summary_rows()) for t in targets]
    labels = [label for label, _ in targets[0].summary_rows()]
    return [t.name for t in targets], [(label, [row[label] for row in per_target]) for label in labels]
