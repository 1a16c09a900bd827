"""The target-file reference (docs/targets.md), generated from the schema and the presets.

``targets_markdown()`` lists every key with its unit and meaning, the presets' values side by
side, their derived figures, and where the energy figures come from.  A test keeps
docs/targets.md equal to its output: regenerate with ``python -m npuc.targets.doc > docs/targets.md``.
"""

from __future__ import annotations

import inspect
import typing

from pydantic import BaseModel

from npuc.targets.loader import DEFAULT_TARGET, list_presets, load_target, targets_table
from npuc.targets.schema import TargetSchema

_INTRO = f"""\
# Target files

*Generated from `npuc/targets/schema.py` and the presets in `npuc/targets/presets/` by
`npuc.targets.doc.targets_markdown()`; do not edit by hand (`python -m npuc.targets.doc > docs/targets.md`).*

A target is a TOML file describing one NPU of the family in DESIGN.md: the systolic array, the
scratchpad and accumulator SRAMs, the vector unit, the memories the DMA reaches (any number of
`[memory.NAME]` tables: off-chip flash or DRAM, a shared on-chip SRAM), the clock and the energy
table. `npuc.load_target(name_or_path)` takes a preset name or a path, validates the file
strictly and returns a frozen, hashable `Target`; a new NPU variant is a new file. The default
target is `{DEFAULT_TARGET}`.

Validation refuses, naming the file, the dotted key and the reason: a missing key, an unknown
key, a wrong type (integers must be TOML integers; floats accept integers), a zero or negative
size, a power-of-two rule broken (`scratchpad.banks`, `scratchpad.bank_width_bytes`,
`vector.lanes`, `memory.NAME.burst_bytes`), a scratchpad that is not a whole number of bank rows,
an accumulator that is not a whole number of 32-bit words, memories larger than the instruction set
can address (the system address map 4 GiB, scratchpad and accumulator 16 MiB), an array without
int8, a flash memory that would hold anything but weights, no memory holding weights, activations
or model inputs and outputs, a memory name that is not lower-case or is reserved.

**The system address map.** Every `[memory.NAME]` table gets a window of the DMA's 32-bit address
space, in the order of the tables: the first at 0, each next one at the previous end rounded up to
64 KiB. A DMA's timing (bandwidth, latency, burst), its port and its energy come from the memory
its address falls in; a transfer that spans two windows, leaves every window or stores into a
flash memory is refused before the program runs. Memories behind different `port`s stream in
parallel (as Ethos-U's two AXI ports); behind one port they share it. The memory planner places
constants in the fastest memory that holds `weights`, and inputs, outputs and activations in the
fastest memory that holds them for their lifetime (an on-chip SRAM before DRAM), spilling to the
next. `Target.dram_bytes_per_cycle` (and the derived `Target.dma`, `Target.dram`) are the figures
of the off-chip memory that holds activations: the slowest memory that may hold them.

**The older form.** A file with `[dma]`, `[dram]` and `energy.dram_pj_per_byte` instead of
`[memory.NAME]` tables still loads: it is one memory `dram` of kind dram holding everything,
behind port `axi0`, with read and write energy `energy.dram_pj_per_byte`; such a target has the
fingerprint it had before memories were data, so its binaries keep loading. A file may not mix the
two forms.

`Target.fingerprint()` is the SHA-256 of the canonical JSON of every parameter except `name` and
`description`: two files describing the same hardware share it, and a `.npub` binary records it.
"""

_ENERGY = """\
## Where the energy figures come from

Base figures at 45 nm (M. Horowitz, "Computing's energy problem (and what we can do about it)",
ISSCC 2014): 8-bit integer add 0.03 pJ, 32-bit integer add 0.1 pJ, 8-bit integer multiply
0.2 pJ, 16-bit float add 0.4 pJ, 16-bit float multiply 1.1 pJ, 32-bit float add 0.9 pJ, 32-bit
float multiply 3.7 pJ; a 64-bit read from an 8 KB SRAM 10 pJ (32 KB: 20 pJ, 1 MB: 100 pJ); a
64-bit DRAM access 1.3-2.6 nJ.

| action | at 45 nm | how |
|---|---|---|
| int8 MAC | 0.3 pJ | int8 multiply 0.2 + int32 add 0.1 |
| fp16 MAC | 2.0 pJ | fp16 multiply 1.1 + fp32 add 0.9 |
| SRAM byte | 1.25-4 pJ | 64-bit read / 8, interpolated on the bank size (8 KB 1.25, 32 KB 2.5); writes taken equal to reads |
| DRAM byte | 250 pJ | 2.0 nJ per 64-bit access / 8 |
| vector lane-op | ~1.0 pJ | a mix of int32 and fp32 adds and multiplies |
| instruction | ~50 pJ | a 32-byte fetch from an 8 KB buffer and decode |

The presets scale every figure by **0.15 for 45 nm -> 7 nm**: an assumption, a round factor
within the range published node-scaling studies give for dynamic energy between these nodes
(e.g. Stillmaker & Baas, Integration 2017). For DRAM this gives 37.5 pJ/B (4.7 pJ/bit), the order
of an LPDDR4X-class mobile interface. Static power is an estimate of leakage for the SRAM and
array sizes, not from Horowitz. Each preset file repeats these sources in its comments.
"""

_AREA = """\
## Where the area figures come from

The `[area]` section is optional (a target without it compiles as before; `npuc explore` needs it
for the `area` objective) and its total is an **estimate** for comparing designs, not a layout
(`npuc.targets.area`): the array is rows x cols processing elements, the vector unit lanes x one
lane, each on-chip memory a function of its size, banks and ports (capacity in bits x
`sram_bit_um2`, grown by `sram_port_factor` per port beyond the first, plus `sram_bank_um2` per
bank; the accumulator counts as one bank), plus `fixed_mm2`. DRAM is off chip. The area is not
part of the fingerprint: it changes no instruction, timing or energy figure.

| component | at 45 nm | how |
|---|---|---|
| int8 PE | 636 um^2 | int8 multiply 282 + int32 add 137 + 48 flip-flops 217 |
| fp16 in a PE | 5824 um^2 | fp16 multiply 1640 + fp32 add 4184 |
| a second dataflow in a PE | 205 um^2 | 32 flip-flops 145 + 32 2:1 muxes 60 |
| vector lane | 4066 um^2 | int32 add 137 + int32 multiply 3495 + 96 flip-flops 434 |
| fp in a vector lane | 11884 um^2 | fp32 add 4184 + fp32 multiply 7700 |

Adders and multipliers: M. Horowitz, ISSCC 2014 (the area column of the same table as the energy
figures); flip-flop 4.52 um^2 and 2:1 mux 1.86 um^2: the NanGate FreePDK45 Open Cell Library
(DFF_X1, MUX2_X1). Logic is scaled to 7 nm by **x 0.04** (25x denser), an assumption from the
published logic transistor densities of the two nodes. SRAM: the 0.027 um^2 high-density 6T
bitcell of TSMC's 7 nm (J. Chang et al., ISSCC 2017) over an assumed array efficiency of 0.7, so
0.0386 um^2 per bit; a second port adds 50% (an assumption within the 1.3-2x of published 8T
two-port cells, e.g. L. Chang et al., IEEE JSSC 2008); bank periphery (2000 um^2) and the fixed
0.05 mm^2 (DMA engine, instruction fetch, control) are estimates. Each preset file repeats these
sources in its comments.
"""


def _section_model(annotation) -> type[BaseModel] | None:
    """The section schema of a top-level field (``AreaSchema | None`` -> AreaSchema), else None."""
    for a in typing.get_args(annotation) or (annotation,):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def _value(target, section: str, key: str) -> str:
    holder = getattr(target, section) if section else target
    if holder is None or not hasattr(holder, key):
        return "-"
    v = getattr(holder, key)
    if isinstance(v, tuple):
        return ", ".join(v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _section(section: str, model: type[BaseModel], targets) -> str:
    head = "| key | unit | meaning | " + " | ".join(f"`{t.name}`" for t in targets) + " |"
    rows = [head, "|---|---|---|" + "---|" * len(targets)]
    for key, info in model.model_fields.items():
        if f"{section}.{key}" in _OLDER_KEYS:
            continue
        unit = (info.json_schema_extra or {}).get("unit", "")
        dotted = f"{section}.{key}"
        vals = " | ".join(_value(t, section, key) for t in targets)
        rows.append(f"| `{dotted}` | {unit} | {info.description} | {vals} |")
    doc = (model.__doc__ or "").strip().removeprefix(f"``[{section}]``: ")
    return f"## `[{section}]`\n\n{doc[:1].upper() + doc[1:]}\n\n" + "\n".join(rows) + "\n"


_OLDER_KEYS = ("energy.dram_pj_per_byte",)  # listed with the older form only


def _memory_section(targets) -> str:
    from npuc.targets.schema import MemorySchema

    head = "| key | unit | meaning | " + " | ".join(f"`{t.name}`" for t in targets) + " |"
    rows = [head, "|---|---|---|" + "---|" * len(targets)]
    for key, info in MemorySchema.model_fields.items():
        unit = (info.json_schema_extra or {}).get("unit", "")
        vals = " | ".join("; ".join(f"{m.name}: {_value(m, '', key)}" for m in t.memories) for t in targets)
        rows.append(f"| `memory.NAME.{key}` | {unit} | {info.description} | {vals} |")
    amap = [head.replace("| key | unit | meaning |", "| address map | | |"), rows[1]]
    amap.append("| windows | bytes | base..end of each memory's window | " + " | ".join(
        "; ".join(f"{w.memory.name} [0x{w.base:x}, 0x{w.end:x})" for w in t.windows) for t in targets) + " |")
    amap.append("| activations | | the memory behind `Target.dram_bytes_per_cycle` | " + " | ".join(
        t.activation_memory.name for t in targets) + " |")
    doc = " ".join(inspect.cleandoc(MemorySchema.__doc__ or "").split()).removeprefix("``[memory.NAME]``: ")
    return ("## `[memory.NAME]`\n\n" + doc[:1].upper() + doc[1:] + "\n\n" + "\n".join(rows) + "\n\n"
            + "\n".join(amap) + "\n")


def _older_section() -> str:
    from npuc.targets.schema import DmaSchema, DramSchema

    rows = ["| key | unit | meaning |", "|---|---|---|"]
    for section, model in (("dma", DmaSchema), ("dram", DramSchema)):
        for key, info in model.model_fields.items():
            rows.append(f"| `{section}.{key}` | {(info.json_schema_extra or {}).get('unit', '')} | {info.description} |")
    info = TargetSchema.model_fields["energy"].annotation.model_fields["dram_pj_per_byte"]
    rows.append(f"| `energy.dram_pj_per_byte` | pJ/B | {info.description} |")
    return ("## The older form: `[dma]` and `[dram]`\n\nRead as one `[memory.dram]` (above); no preset uses it.\n\n"
            + "\n".join(rows) + "\n")


def _host_section(targets) -> str:
    from npuc.targets.schema import HostSchema

    info = HostSchema.model_fields["triple"]
    vals = " | ".join(t.host_triple or "(this machine)" for t in targets)
    head = "| key | unit | meaning | " + " | ".join(f"`{t.name}`" for t in targets) + " |"
    given = " | ".join("given" if t.host_triple else "absent" for t in targets)
    rows = [head, "|---|---|---|" + "---|" * len(targets),
            f"| `host` | table | {TargetSchema.model_fields['host'].description} | {given} |",
            f"| `host.triple` | text | {info.description} | {vals} |"]
    doc = (HostSchema.__doc__ or "").strip().removeprefix("``[host]``: ")
    return ("## `[host]` (optional)\n\n" + doc[:1].upper() + doc[1:] + " Without it, the host back-end compiles for the "
            "machine npuc runs on.\n\n" + "\n".join(rows) + "\n")


def targets_markdown() -> str:
    """The full target-file reference as Markdown."""
    targets = sorted((load_target(n) for n in list_presets()), key=lambda t: t.peak_macs_per_cycle)
    parts = [_INTRO]
    top = {k: f for k, f in TargetSchema.model_fields.items()
           if k not in ("host", "memory", "dma", "dram") and _section_model(f.annotation) is None}
    rows = ["| key | unit | meaning | " + " | ".join(f"`{t.name}`" for t in targets) + " |", "|---|---|---|" + "---|" * len(targets)]
    for key, info in top.items():
        unit = (info.json_schema_extra or {}).get("unit", "")
        rows.append(f"| `{key}` | {unit} | {info.description} | " + " | ".join(_value(t, "", key) for t in targets) + " |")
    parts.append("## Top level\n\n" + "\n".join(rows) + "\n")
    for key, info in TargetSchema.model_fields.items():
        if key == "memory":
            parts.append(_memory_section(targets))
        elif key not in top and key not in ("host", "dma", "dram"):
            parts.append(_section(key, _section_model(info.annotation), targets))
    parts.append(_older_section())
    parts.append(_host_section(targets))
    names, rows = targets_table([t.name for t in targets])
    derived = ["| figure | " + " | ".join(f"`{n}`" for n in names) + " |", "|---|" + "---|" * len(names)]
    derived += [f"| {label} | " + " | ".join(values) + " |" for label, values in rows]
    parts.append("## Derived figures\n\nPeak TOPS counts a MAC as two operations.\n\n" + "\n".join(derived) + "\n")
    parts.append(_ENERGY)
    parts.append(_AREA)
    return "\n".join(parts)


if __name__ == "__main__":
    print(targets_markdown(), end="")
