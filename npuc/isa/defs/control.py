"""Control instructions: ``NOP`` (carries dependency tokens) and ``END``."""

from __future__ import annotations

from npuc.isa.actions import Actions
from npuc.isa.enums import Queue, Unit
from npuc.isa.fields import count, sint, uint
from npuc.isa.instr import InstrDef, register
from npuc.isa.loops import (
    BODY_BITS,
    COUNT_BITS,
    EXCEPTION_BITS,
    EXCEPTION_FIELD,
    EXCEPTIONS,
    exception_problem,
    FIELD_INDEX_BITS,
    MAX_BODY,
    PERIOD_BITS,
    PHASE_BITS,
    PHASE_FIELD,
    SLOT_FIELDS,
    SLOTS,
    STEP_BITS,
    STRIDE_BITS,
)


def _instr_only(a, target, regions) -> Actions:
    return Actions(instructions=1)


register(
    InstrDef(
        name="NOP",
        opcode=0x01,
        queue=Queue.compute,
        unit=Unit.ctrl,
        summary="Do nothing on the compute queue; a place to wait for or send dependency tokens.",
        fields=(),
        regions=lambda a: (),
        execute=lambda st, a, regions: None,
        timing=lambda a, t, regions: (1, 0),
        actions=_instr_only,
        semantics_doc="No effect on memory. Its `wait`/`signal` flags act as on any compute "
        "instruction, which lets a program make the compute queue wait for another queue "
        "without other compute work.",
        timing_doc="1 cycle on the compute queue.",
        energy_doc="One instruction issue.",
    )
)

register(
    InstrDef(
        name="END",
        opcode=0x02,
        queue=Queue.compute,
        unit=Unit.ctrl,
        summary="End of the program: the last instruction, and the only END.",
        fields=(),
        regions=lambda a: (),
        execute=lambda st, a, regions: None,
        timing=lambda a, t, regions: (0, 0),
        actions=_instr_only,
        semantics_doc="Marks the end of the instruction stream. The program is finished when "
        "every queue has completed its last instruction; the total cycle count is the latest "
        "completion time over all queues.",
        timing_doc="0 cycles.",
        energy_doc="One instruction issue.",
    )
)


def _loop_fields():
    out = [
        count("n", "iterations"),
        uint("body", BODY_BITS, f"instructions in the body (1..{MAX_BODY}), nested bodies included", lo=1),
    ]
    for k in range(SLOTS):
        out += [
            uint(f"i{k}", BODY_BITS, f"stride slot {k}: first body instruction it moves (0 = the next one)", default=0),
            uint(f"d{k}", STEP_BITS, f"stride slot {k}: step between the body instructions it moves", default=1, lo=1),
            uint(f"r{k}", COUNT_BITS, f"stride slot {k}: how many body instructions it moves", default=1, lo=1),
            uint(f"f{k}", FIELD_INDEX_BITS, f"stride slot {k}: field number in those instructions", default=0),
            uint(f"p{k}", PERIOD_BITS, f"stride slot {k}: period (0: none; P >= 2: iteration k adds "
                 f"((k + {PHASE_FIELD}{k}) mod P - {PHASE_FIELD}{k}) x stride)", default=0),
            sint(f"s{k}", STRIDE_BITS, f"stride slot {k}: added to the field per iteration (0: slot unused)", default=0),
        ]
    # the phases come after every slot, so that a LOOP without one encodes as before they existed
    out += [uint(f"{PHASE_FIELD}{k}", PHASE_BITS, f"stride slot {k}: phase of its period, 0 <= phase < p{k} (where in "
                 "its rotation the first iteration is; 0 without a period)", default=0) for k in range(SLOTS)]
    # the flag exceptions come after the phases, so that a LOOP without one encodes as before they existed
    out += [uint(f"{EXCEPTION_FIELD}{k}", EXCEPTION_BITS, f"flag exception {k}: 0 unused, else 1 + (iteration << "
                 f"{BODY_BITS + 6} | body instruction << 6 | its dependency flags in that iteration)", default=0)
            for k in range(EXCEPTIONS)]
    return tuple(out)


def _loop_validate(a) -> str | None:
    for k in range(SLOTS):
        i, d, r, f, p, s = (getattr(a, f"{x}{k}") for x in SLOT_FIELDS)
        h = getattr(a, f"{PHASE_FIELD}{k}")
        if s == 0 and (i, d, r, f, p, h) != (0, 1, 1, 0, 0, 0):
            return f"stride slot {k} is unused (s{k}=0) but names instructions, a field, a period or a phase"
        if p == 1:
            return f"stride slot {k} has period 1 (it would never move); a period is 0 (none) or at least 2"
        if h and not h < p:
            return (f"stride slot {k} has phase {h} but " + (f"period {p}; a phase is below its period" if p else
                    "no period; only a slot with a period has a phase"))
        if s and i + (r - 1) * d >= a.body:
            return f"stride slot {k} reaches body instruction {i + (r - 1) * d}, but the body has {a.body}"
    return exception_problem(a)


register(
    InstrDef(
        name="LOOP",
        opcode=0x03,
        queue=Queue.compute,
        unit=Unit.ctrl,
        summary="Repeat the next `body` instructions `n` times, adding strides to fields of the body per iteration.",
        fields=_loop_fields(),
        regions=lambda a: (),
        execute=lambda st, a, regions: None,
        timing=lambda a, t, regions: (0, 0),
        actions=lambda a, t, regions: Actions(),
        validate=_loop_validate,
        semantics_doc="In iteration k (from 0) of n, the body (the next `body` encoded "
        "instructions, nested LOOPs and their bodies included) runs with k x `s{j}` (with a period `p{j}` >= 2 and "
        "its phase `ph{j}` < `p{j}`: ((k + `ph{j}`) mod `p{j}` - `ph{j}`) x `s{j}`, so that a buffer rotation may "
        "start anywhere in its round; iteration 0 is always the body as written) added to "
        "field number `f{j}` (in the order the instruction's fields are listed) of body "
        "instructions `i{j}`, `i{j}+d{j}`, ..., `i{j}+(r{j}-1)*d{j}`, for every slot j whose "
        "stride `s{j}` is not 0. An outer LOOP may "
        "stride a field of an instruction inside an inner body: the inner LOOP then strides "
        "from the moved value. Only integer fields take strides, never a LOOP's own; every "
        "value reached must be legal for its field. Dependency flags of the body repeat in "
        "every iteration, except where a flag exception `x{e}` (1 + (k << 18 | j << 6 | flags)) gives body "
        "instruction j other flags in iteration k (the first and last iterations of a pipeline: its fill "
        "and drain), for every dynamic instruction that j stands for in that iteration (an inner LOOP's own "
        "exception takes precedence); exceptions are listed in increasing order, the unused ones (0) last, "
        "never on a LOOP. A LOOP has no flags itself. A body may not contain END.",
        timing_doc="None: the instruction fetch unit expands the LOOP; each dynamic instruction "
        "is then timed as written.",
        energy_doc="None of its own; each dynamic instruction counts its own issue.",
    )
)
