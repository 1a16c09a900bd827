"""Control instructions: ``NOP`` (carries dependency tokens) and ``END``."""

from __future__ import annotations

from npuc.isa.actions import Actions
from npuc.isa.enums import Queue, Unit
from npuc.isa.instr import InstrDef, register


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
