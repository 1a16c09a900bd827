"""Instructions: the single definition of each instruction, instruction values and programs.

An :class:`InstrDef` holds everything npuc knows about one instruction: mnemonic and opcode, the
queue it is issued to and the unit it occupies, its fields, the memory regions it touches, its
functional semantics on a :class:`MachineState`, its timing and energy actions on a target, the
target constraints it must meet, and the prose the ISA reference prints.  The encoder, decoder,
assembler, disassembler, simulator and cost model all read these definitions
(:mod:`npuc.isa.defs` registers them).

An :class:`Instr` is one instruction: the mnemonic, the field values (a named tuple per
instruction, so ``instr.args.m0`` reads a field) and its dependency-token flags (:class:`Deps`).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from npuc.isa.actions import Actions
from npuc.isa.enums import Queue, Unit
from npuc.isa.fields import Field
from npuc.isa.region import Region

if TYPE_CHECKING:
    from npuc.isa.state import MachineState
    from npuc.targets import Target

HEADER_BITS = 16  # opcode (6 bits), dependency flags (8 bits), reference (2 bits: npuc.isa.encoding)
OPCODE_BITS = 6
MAX_FIELD_BITS = 2048  # the field bits one instruction may define (npuc.isa.encoding writes those it needs)

RegionsFn = Callable[[Any], tuple[Region, ...]]
ExecuteFn = Callable[["MachineState", Any, tuple[Region, ...]], None]
TimingFn = Callable[[Any, "Target", tuple[Region, ...]], tuple[int, int]]
ActionsFn = Callable[[Any, "Target", tuple[Region, ...]], Actions]
CheckFn = Callable[[Any, "Target"], "str | None"]


def _no_check(args: Any, target: "Target") -> str | None:
    return None


@dataclass(frozen=True)
class InstrDef:
    """The one definition of an instruction.

    ``timing`` returns ``(busy, latency)``: the instruction occupies its unit for ``busy`` cycles
    and completes ``latency`` cycles after that.  ``check`` returns why the instruction cannot
    run on a target (a dimension larger than the array, a dataflow or dtype the target lacks),
    or None.  ``validate`` returns why field values that are each in range do not fit together.
    ``may_follow`` names the compute instructions this one may start beside: right after one of
    them it starts as soon as that one has started (its own unit permitting), instead of waiting
    for it to complete.  ``pipelines_after`` names the instructions behind which this one
    pipelines: right after one of them it starts once that one's own work is done and its unit is
    free, without waiting for earlier instructions to drain (a MATMUL streams its inputs while the
    previous MATMUL's partial sums still run down the array).
    """

    name: str
    opcode: int
    queue: Queue
    unit: Unit
    summary: str
    fields: tuple[Field, ...]
    regions: RegionsFn
    execute: ExecuteFn
    timing: TimingFn
    actions: ActionsFn
    semantics_doc: str
    timing_doc: str
    energy_doc: str
    check: CheckFn = _no_check
    validate: Callable[[Any], "str | None"] = lambda args: None
    may_follow: tuple[str, ...] = ()
    pipelines_after: tuple[str, ...] = ()
    args_type: type = field(init=False, repr=False, compare=False)
    mask_length_bits: int = field(init=False, repr=False, compare=False)  # npuc.isa.encoding's mask length
    field_names: frozenset = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "args_type", collections.namedtuple(f"{self.name}_args", [f.name for f in self.fields]))
        object.__setattr__(self, "mask_length_bits", len(self.fields).bit_length())
        object.__setattr__(self, "field_names", frozenset(f.name for f in self.fields))

    @property
    def field_bits(self) -> int:
        return sum(f.bits for f in self.fields)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field '{name}'")


@dataclass(frozen=True)
class Deps:
    """Dependency-token flags of an instruction.

    Every pair of queues has a token channel each way.  ``waits`` are the queues from which the
    instruction pops a token before it starts (it stalls until one is there); ``signals`` the
    queues to which it pushes a token when it completes.  An instruction never waits on or
    signals its own queue.  Encoded relative to the instruction's queue: one wait bit and one
    signal bit per other queue (:meth:`to_bits`).
    """

    waits: frozenset[Queue] = frozenset()
    signals: frozenset[Queue] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "waits", frozenset(Queue(q) for q in self.waits))
        object.__setattr__(self, "signals", frozenset(Queue(q) for q in self.signals))

    def to_bits(self, queue: Queue) -> int:
        """Bits 0..3: wait on each other queue (in order); bits 4..7: signal each."""
        others = queue.others()
        bits = 0
        for k, q in enumerate(others):
            bits |= (q in self.waits) << k | (q in self.signals) << (k + len(others))
        return bits

    @staticmethod
    def from_bits(bits: int, queue: Queue) -> "Deps":
        key = (bits, queue)
        hit = _DEPS_BY_BITS.get(key)
        if hit is None:
            others = queue.others()
            waits = {q for k, q in enumerate(others) if bits >> k & 1}
            signals = {q for k, q in enumerate(others) if bits >> (k + len(others)) & 1}
            hit = _DEPS_BY_BITS[key] = Deps(frozenset(waits), frozenset(signals))
        return hit

    def problem(self, queue: Queue) -> str | None:
        if queue in self.waits or queue in self.signals:
            return f"an instruction of the {queue.name} queue cannot wait on or signal its own queue"
        return None

    def __bool__(self) -> bool:
        return bool(self.waits or self.signals)


DEP_BITS = 2 * (len(Queue) - 1)
_DEPS_BY_BITS: dict[tuple[int, Queue], Deps] = {}  # Deps are immutable: one per flag bits and queue


_BY_NAME: dict[str, InstrDef] = {}
_BY_OPCODE: dict[int, InstrDef] = {}


def register(d: InstrDef) -> InstrDef:
    """Add an instruction definition to the registry (mnemonic and opcode must be new)."""
    if d.name in _BY_NAME or d.opcode in _BY_OPCODE:
        raise ValueError(f"instruction {d.name} / opcode 0x{d.opcode:02x} is defined twice")
    if not 0 <= d.opcode < 1 << OPCODE_BITS:
        raise ValueError(f"instruction {d.name}: opcode 0x{d.opcode:02x} does not fit the header's {OPCODE_BITS} bits")
    if d.field_bits > MAX_FIELD_BITS:
        raise ValueError(f"instruction {d.name} defines {d.field_bits} field bits, more than {MAX_FIELD_BITS}")
    _BY_NAME[d.name] = d
    _BY_OPCODE[d.opcode] = d
    return d


def get_def(name: str) -> InstrDef | None:
    _ensure_loaded()
    return _BY_NAME.get(name)


def field_max(instr: str, field: str) -> int:
    """The largest value field ``field`` of instruction ``instr`` holds (an ISA limit that code
    generation splits its work to)."""
    d = get_def(instr)
    if d is None:
        raise KeyError(f"no instruction '{instr}'")
    return d.field(field).max_value


def def_by_opcode(opcode: int) -> InstrDef | None:
    _ensure_loaded()
    return _BY_OPCODE.get(opcode)


def all_defs() -> list[InstrDef]:
    """Every instruction definition, by opcode."""
    _ensure_loaded()
    return [_BY_OPCODE[k] for k in sorted(_BY_OPCODE)]


def _ensure_loaded() -> None:
    import npuc.isa.defs  # noqa: F401  (registers every instruction)


class FieldError(ValueError):
    """A field value is missing, unknown or out of range (callers turn it into a user error)."""


_RANGES: dict[int, tuple[InstrDef, tuple[tuple[int, int], ...]]] = {}


def int_ranges(d: InstrDef) -> tuple[tuple[int, int], ...]:
    """Per field of ``d``: the legal range of a plain integer value (an empty one for other kinds)."""
    hit = _RANGES.get(id(d))
    if hit is None or hit[0] is not d:
        hit = _RANGES[id(d)] = (d, tuple((f.min_value, f.max_value) if f.kind in ("uint", "sint") else (1, 0)
                                         for f in d.fields))
    return hit[1]


def build_args(d: InstrDef, given: Mapping[str, Any]) -> Any:
    """The named-tuple args of ``d`` from ``given`` values, filling defaults; raises FieldError."""
    names = d.field_names
    unknown = [k for k in given if k not in names]
    if unknown:
        raise FieldError(f"{d.name} has no field '{unknown[0]}' (fields: {', '.join(d.args_type._fields)})")
    values: dict[str, Any] = {}
    for f, (lo, hi) in zip(d.fields, int_ranges(d)):
        if f.name in given:
            v = given[f.name]
        elif f.default is None:
            raise FieldError(f"{d.name} needs field '{f.name}' ({f.doc})")
        else:
            v = f.default(values) if callable(f.default) else f.default
        if type(v) is int and lo <= v <= hi:  # the common case: an integer field in range
            values[f.name] = v
            continue
        if f.kind == "f32" and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if f.kind == "enum" and not isinstance(v, f.enum) and isinstance(v, str):
            v = f.enum._member_map_.get(v, v)  # by name (Enum.__members__ builds a proxy per call)
        reason = f.problem(v)
        if reason:
            raise FieldError(f"{d.name} field '{f.name}' {reason}")
        values[f.name] = v
    args = d.args_type(**values)
    reason = d.validate(args)
    if reason:
        raise FieldError(f"{d.name}: {reason}")
    return args


@dataclass(frozen=True)
class Instr:
    """One instruction: mnemonic, field values and dependency flags."""

    op: str
    args: Any
    deps: Deps = Deps()

    @property
    def defn(self) -> InstrDef:
        return _BY_NAME[self.op]

    @staticmethod
    def make(mnemonic: str, /, deps: Deps = Deps(), **fields: Any) -> "Instr":
        """Build an instruction from field values (enum fields also by name, defaults filled
        in): ``Instr.make("VUN", op="relu", dtype="int8", n0=64, dst=0, src=0x100)``.
        Raises FieldError."""
        d = get_def(mnemonic)
        if d is None:
            raise FieldError(f"unknown instruction '{mnemonic}'")
        reason = deps.problem(d.queue)
        if reason:
            raise FieldError(f"{mnemonic} runs on the {d.queue.name} queue: {reason}")
        return Instr(mnemonic, build_args(d, fields), deps)

    def __str__(self) -> str:
        from npuc.isa.asm import format_instr

        return format_instr(self)


@dataclass(frozen=True)
class Program:
    """An instruction stream: instructions in program order, the last one ``END``."""

    instrs: tuple[Instr, ...]

    def __len__(self) -> int:
        return len(self.instrs)

    def __iter__(self) -> Iterator[Instr]:
        return iter(self.instrs)

    def __getitem__(self, i: int) -> Instr:
        return self.instrs[i]

    def encode(self) -> bytes:
        from npuc.isa.encoding import encode_program

        return encode_program(self.instrs)

    def text(self) -> str:
        from npuc.isa.asm import disassemble

        return disassemble(self)


def program_problem(instrs: tuple[Instr, ...] | list[Instr]) -> str | None:
    """Why an instruction list is not a complete program (END missing, misplaced), or None."""
    if not instrs:
        return "the program is empty (it must end with END)"
    ends = [i for i, ins in enumerate(instrs) if ins.op == "END"]
    if not ends:
        return "the program does not end with END"
    if ends[0] != len(instrs) - 1:
        return f"END at instruction {ends[0]} is not the last instruction"
    from npuc.isa.loops import loop_problem

    return loop_problem(instrs)
