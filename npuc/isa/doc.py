"""The ISA reference (docs/isa.md), generated from the instruction definitions.

``isa_markdown()`` writes the machine model, the encoding, the token protocol, the timing and
energy models, the numerics, and one section per instruction (fields with their bit positions,
semantics, timing, energy, queue and unit).  A test keeps docs/isa.md equal to its output:
regenerate with ``python -m npuc.isa.doc > docs/isa.md``.
"""

from __future__ import annotations

from npuc.isa import numerics
from npuc.isa.defs.common import VECTOR_PIPELINE_DEPTH
from npuc.isa.enums import UnOp
from npuc.isa.encoding import HISTORY, SHORT_FROM, max_bytes
from npuc.isa.instr import HEADER_BITS, InstrDef, all_defs
from npuc.isa.widths import DRAM_ADDR_BITS, LOCAL_ADDR_BITS

_INTRO = f"""\
# The npuc instruction set

*Generated from the instruction definitions in `npuc/isa/defs/` by `npuc.isa.doc.isa_markdown()`;
do not edit by hand (`python -m npuc.isa.doc > docs/isa.md`).*

## Machine model

* **Memories.** DRAM (off-chip, {DRAM_ADDR_BITS}-bit byte addresses, reached only by DMA), the
  scratchpad SPAD (banked SRAM, {LOCAL_ADDR_BITS}-bit byte addresses) and the accumulator ACC
  (SRAM of 32-bit words beside the array, {LOCAL_ADDR_BITS}-bit byte addresses). Every address
  and stride is in bytes; an operand's address and strides must be multiples of its element
  size; ACC holds only 4-byte elements (int32, fp32). All addresses are static, so the simulator
  checks every access of a program (bounds, alignment, no element written twice by one
  instruction) before running it.
* **Array.** `array.rows` x `array.cols` processing elements. Weight-stationary (`LOAD_WEIGHTS`
  then `MATMUL`): a K x N weight tile (K <= rows, N <= cols) sits in the array and M input rows
  stream through. Output-stationary (`MATMUL_OS`): an M x N output tile (M <= rows, N <= cols)
  sits in the array and K steps of both operands stream through. Depthwise mode (`MATMUL_DW`):
  N per-channel weights sit on the diagonal (N <= the smaller side), only those N processing
  elements multiply (the rest are clock-gated) and M input rows of N channels stream through.
  int8 x int8 accumulates in int32; fp16 x fp16 in fp32 (targets with fp16).
* **Vector unit.** `vector.lanes` lanes for elementwise work, lookup tables, requantization,
  conversions, reductions, pooling windows and fills, on 2-D strided operands: element
  (i1, i0) of an operand lives at `addr + i1*s1 + i0*s0`, so a zero stride broadcasts.
  Floating-point vector work needs a target with fp16.
* **Queues.** Instructions are issued, in program order, to five in-order queues: **load**
  (`DMA_LOAD`), **store** (`DMA_STORE`), **compute** (the array: `LOAD_WEIGHTS`, `MATMUL`,
  `MATMUL_DW`, `MATMUL_OS`, and `NOP`/`END`), **vector** (every vector-unit instruction) and
  **copy** (`DMA_COPY`, the background DMA between memories of the system address map). The
  queues run concurrently and synchronise only through dependency tokens, so requantization,
  epilogues and vector kernels run beside array work, and weights are staged from the flash
  into the SRAM beside the kernels' own transfers. The execute queues touch only SPAD and
  ACC, the copy queue only the system address map.

## Encoding

Each instruction is a whole number of bytes, a little-endian bit string in which a field is
written only when it changes (how a command stream that sets registers works):

| bits | content |
|---|---|
| 0-5 | opcode |
| 6-9 | wait flags: bit 6 + k pops a token from the k-th other queue (in the order load, compute, store, vector, copy, skipping the instruction's own) before starting |
| 10-13 | signal flags: bit 10 + k pushes a token to the k-th other queue on completion |
| 14-15 | reference: which of the last {HISTORY} instructions of the same mnemonic in the stream the left-out fields are taken from (0 = the most recent; 0 when there is none) |
| from {HEADER_BITS} | the mask length L, in as many bits as the number of fields takes (`bit_length`) |
| then | L mask bits, one per field in the order listed, set when the field is written out; bit L-1 is set (the fields after it are left out) |
| then | each field written out, in the order listed, each in its width; with a reference, an integer field of {SHORT_FROM} bits or more starts with a flag: 1, then its change from the reference as a signed number of half its width (used whenever the change fits), or 0, then the full value |
| then | zero bits up to the next byte boundary, where the next instruction starts |

A field left out holds its value in the reference instruction; in the first instruction of a
mnemonic, its default (the fields table's `default` column: a constant, or `= expr` of earlier
fields; a required field is always written there).  The encoder writes exactly the fields that
differ from the reference, and takes the reference that gives the fewest bytes (of those, the
most recent), so each program has one encoding: a MATMUL after a MATMUL writes the addresses
that moved, an unused LOOP stride slot costs nothing.  The length follows from the opcode and
the mask, so the stream is read front to back.

Integers are unsigned unless the type says `int` (two's complement); enums are stored by value;
`1, 2 or 4` is stored as its base-2 logarithm; `fp32` is an IEEE-754 binary32 (NaN refused).
The decoder (`decode_program`) accepts only what the encoder produces: a known opcode, flags
legal for the queue, a reference that exists and is the encoder's choice, a mask whose last bit
is set, field values in range, a field written only when it differs from its reference, zero
padding, exactly one `END`, last.

## Assembly text

One instruction per line: `MNEMONIC field=value ... [wait=Q[,Q]] [signal=Q[,Q]]`; `#` or `;`
starts a comment; integers in decimal or `0x` hex, enums by name. Omitted fields take the
default listed below (`= expr` is computed from earlier fields: contiguous strides). The
disassembler writes every field, so `assemble(disassemble(p)) == p`.

## Dependency tokens

Every ordered pair of queues has a token channel (twenty in all: load->compute, compute->load,
..., copy->vector), the pairwise channels of TVM's VTA extended to every pair. In text an
instruction names the other queue: `wait=load` on a compute instruction pops a token the load
queue sent; `signal=store,vector` sends one to the store queue and one to the vector queue.

* A token is pushed when the signalling instruction **completes** (its data is written).
* An instruction with a wait flag does not start until a token is there, and consumes it.
* Producer/consumer: the load queue signals compute after filling a buffer; compute waits,
  uses it, and signals the load queue that the buffer is free again (the load queue waits
  before overwriting it). Compute and store pair up the same way. With two buffers, load
  of tile i+1 overlaps compute of tile i (double buffering). A program starts with no tokens:
  to let the load queue run ahead by two buffers, it simply does not wait for its first two loads.
* An order between a store and a later load is a store -> load token, like any other pair.
* Waiting on a token that never comes is a deadlock; the simulator detects it and names each
  stalled instruction. Tokens left over at the end are reported, not an error.
* Two instructions in flight at the same time that touch the same bytes, one of them writing,
  race: hardware gives no defined result. The simulator reports the first race (both
  instructions and the bytes) unless asked not to. Transfers of one DMA queue (load, store, copy) complete in order
  and never race each other.

## Timing model

Each queue starts its instructions in order. An instruction starts when (1) its queue allows it,
(2) its unit is free, (3) the tokens it waits for have arrived. (1): the load, store and copy queues may
start a transfer as soon as the previous one has left the DRAM port (transfers are pipelined:
latency overlaps); an execute queue (compute, vector) starts an instruction when all earlier
instructions of that queue have completed, except right after an instruction it *may follow*
(listed below), which it may
start beside: `LOAD_WEIGHTS` as soon as the `MATMUL` before it starts (the array has two weight
buffers), `MATMUL_OS` as soon as the array is free after the `MATMUL_OS` before it (outputs drain
meanwhile), unless the two touch the same bytes with one writing: the hardware interlocks and the
second waits for the first to complete. Instructions of an execute queue complete in order (one
started beside a longer one retires after it), so a token from one vouches for every earlier
instruction of its queue. Units: the DRAM port (shared by loads, stores and copies; a copy between two ports takes cycles of both), the weight loader, the array, the
vector unit. An instruction occupies its unit for *busy* cycles and completes *latency* cycles
later (DMAs: the DRAM latency; MATMUL_OS: the output drain; vector ops: the pipeline depth).
The total is the latest completion.

**Array formulas and SCALE-Sim.** Weight-stationary, per tile: `LOAD_WEIGHTS` takes k cycles,
a lone `MATMUL` takes M + rows + n - 2. SCALE-Sim charges each weight-stationary fold 2 x rows +
cols + M - 2 (weights shifted through all rows, then M rows streamed with skew and drained): the
same for full tiles (k = rows, n = cols) when weight loading is not overlapped. npuc differs (1)
for partial tiles, where it charges the k rows and n columns used instead of the whole array,
(2) by double-buffered weights: the next tile's `LOAD_WEIGHTS` overlaps the current `MATMUL`,
and (3) by pipelined `MATMUL`s: the next one streams its inputs while the previous one drains,
so a run of them pays the fill and drain (rows + n - 2) once, as a TPU-style array does.
Output-stationary: `MATMUL_OS` occupies the array k + m + n - 2 cycles and then drains for rows
cycles, overlapped by the next `MATMUL_OS`; SCALE-Sim's code charges each output-stationary fold
K + rows + cols - 2, the same for full tiles except npuc's final drain. Both dataflows also
respect scratchpad bandwidth (`scratchpad.banks` x `scratchpad.bank_width_bytes` bytes per
cycle); bank conflicts are not modelled. Vector instructions: busy = max(ceil(lane-ops / lanes), ceil(SRAM bytes / scratchpad
bytes per cycle), 1), latency {VECTOR_PIPELINE_DEPTH}. Instructions of one execute queue otherwise run
one at a time; the array and the vector unit overlap each other as far as tokens allow.

## Energy model

Energy = sum over instructions of their action counts x the target's `[energy]` table, plus
`static_power_mw` x run time. Actions: int8 MACs, fp16 MACs, scratchpad bytes read and written,
accumulator bytes read and written, DRAM bytes (whole bursts), vector lane-operations and one
instruction issue per instruction. Each instruction lists its counts below.

## Numerics

{numerics.__doc__.strip()}

Costs of `VUN` ops in lane-operations per element: """ + ", ".join(
    f"{op.name} {op.lane_ops}" for op in UnOp
) + ".\n"


def _fields_table(d: InstrDef) -> str:
    if not d.fields:
        return "No fields.\n"
    rows = ["| field | bits | position | type | default | meaning |", "|---|---|---|---|---|---|"]
    pos = HEADER_BITS
    for f in d.fields:
        rows.append(f"| `{f.name}` | {f.bits} | {pos}-{pos + f.bits - 1} | {f.type_text} | {f.default_text} | {f.doc} |")
        pos += f.bits
    return "\n".join(rows) + "\n"


def _section(d: InstrDef) -> str:
    return (
        f"### {d.name} (opcode 0x{d.opcode:02x})\n\n"
        f"{d.summary}\n\n"
        f"Queue: **{d.queue.name}**. Unit: **{d.unit.name}**. Field bits: {d.field_bits}; {max_bytes(d)} bytes at most."
        + (f" May follow: {', '.join(d.may_follow)}." if d.may_follow else "")
        + (f" Pipelines after: {', '.join(d.pipelines_after)}." if d.pipelines_after else "")
        + "\n\n"
        f"{_fields_table(d)}\n"
        f"**Semantics.** {d.semantics_doc}\n\n"
        f"**Timing.** {d.timing_doc}\n\n"
        f"**Energy.** {d.energy_doc}\n"
    )


def isa_markdown() -> str:
    """The full ISA reference as Markdown."""
    defs = all_defs()
    summary = ["| mnemonic | opcode | queue | unit | summary |", "|---|---|---|---|---|"]
    summary += [f"| [{d.name}](#{d.name.lower()}-opcode-0x{d.opcode:02x}) | 0x{d.opcode:02x} | {d.queue.name} | {d.unit.name} | {d.summary} |" for d in defs]
    parts = [_INTRO, "## Instructions\n", "\n".join(summary) + "\n"]
    parts += [_section(d) for d in defs]
    return "\n".join(parts)


if __name__ == "__main__":
    print(isa_markdown(), end="")
