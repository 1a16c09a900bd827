"""Fused chains: the stripes of a chain of row-mapped kernels, and what running it fused costs.

A chain (``npuc.kir.kernel.ChainAttrs``) runs its member kernels depth-first: for each stripe of
the last member's output rows, every member computes the rows of its output that the stripes
after it need (the halo is recomputed), from scratchpad buffers holding the rows of each
intermediate tensor.  This module says it once, for the chooser (``npuc.lower.cascade``) and the
code generator (``npuc.codegen.kernels.fused_chain``):

* :func:`row_window` maps a member's output rows to the input rows it reads (a convolution's
  window, or the identity for elementwise kernels);
* :func:`chain_stripes` walks the chain backwards per stripe: the rows each member computes;
* :func:`band_kernel` is a member restricted to a band of output rows (views of its tensors, the
  leading padding of the band's first row), which the member's own kernel implementation plans
  and emits unchanged;
* :func:`estimate` gives cycles, DRAM bytes and energy of a chain run fused at a stripe height,
  and :func:`unfused_estimate` the same for its members run one after the other, over the same
  roofline (MACs at peak, bytes at the DRAM port, lane-ops on the vector unit) so the two compare.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from npuc.isa.enums import DType
from npuc.kir.kernel import ChainAttrs, Kernel
from npuc.kir.tensor import DramTensor
from npuc.kir.tile_program import Step

ALIGN = 64
ROW_KINDS = frozenset({"conv2d", "depthwise_conv2d", "pool2d", "eltwise", "qbinary", "lut"})


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def spatial_inputs(k: Kernel) -> tuple[int, ...]:
    """Indices of ``k``'s inputs laid over its output rows (the rest are weights and records)."""
    return (0, 1) if k.kind == "qbinary" else (0,)


def row_window(k: Kernel) -> tuple[int, int, int, int]:
    """(taps, stride, leading pad, dilation) of ``k`` along rows; the identity for eltwise kinds."""
    if k.kind in ("conv2d", "depthwise_conv2d"):
        a = k.attrs
        return k.inputs[1].shape[2], a.stride[0], a.padding[0], a.dilation[0]
    if k.kind == "pool2d":
        a = k.attrs
        return a.kernel[0], a.stride[0], a.padding[0], a.dilation[0]
    return 1, 1, 0, 1


def input_rows(k: Kernel, o0: int, o1: int) -> tuple[int, int, int]:
    """(first, end, leading pad) of the input rows that output rows [o0, o1) of ``k`` read."""
    taps, stride, pad, dil = row_window(k)
    size = k.inputs[0].shape[2]
    start = o0 * stride - pad
    end = (o1 - 1) * stride - pad + (taps - 1) * dil + 1
    lo, hi = max(0, start), min(size, end)
    return lo, max(lo, hi), lo - start


@dataclass(frozen=True)
class Stripe:
    """One stripe: for each member, the output rows it computes; for each intermediate, the rows
    its scratchpad buffer holds (the union of what its readers need)."""

    out_rows: tuple[tuple[int, int], ...]  # per member
    held: tuple[tuple[str, int, int], ...]  # (intermediate, first row, end row)

    def rows_of(self, name: str) -> tuple[int, int]:
        for n, a, b in self.held:
            if n == name:
                return a, b
        raise KeyError(name)


def stripe_count(attrs: ChainAttrs) -> int:
    """Stripes of a chain: its last member's output rows in bands of ``stripe_rows``."""
    return -(-attrs.members[-1].output.shape[2] // attrs.stripe_rows)


def chain_stripes(members: tuple[Kernel, ...], intermediates: tuple[str, ...], stripe_rows: int,
                  staged: bool = True) -> tuple[Stripe, ...]:
    """The stripes of a chain whose last member's output is cut into bands of ``stripe_rows``;
    each holds the rows of the intermediates and, when the chain stages its inputs
    (``ChainAttrs.staged``), of the staged inputs (:func:`staged_inputs`)."""
    last = members[-1].output.shape[2]
    held = set(intermediates) | {t.name for t in (staged_inputs(members, intermediates) if staged else ())}
    out = []
    for r0 in range(0, last, stripe_rows):
        out.append(_stripe(members, held, r0, min(last, r0 + stripe_rows)))
    return tuple(out)


def _rows_contiguous(t: DramTensor) -> bool:
    """A one-image channels-last tensor whose rows follow each other with no gap."""
    es = t.dtype.size
    n, c, h, w = t.shape
    return n == 1 and t.strides[1] == es and t.strides[3] == c * es and t.strides[2] == w * c * es


def staged_inputs(members: tuple[Kernel, ...], intermediates: tuple[str, ...]) -> tuple[DramTensor, ...]:
    """The chain's activation inputs read a stripe at a time: per stripe, the rows the members
    read are loaded once into a scratchpad buffer (one DMA of contiguous rows) and every member
    reads them from there, so that a member's own re-reads (one per output-channel tile) and the
    reads of several members (a block input read by the first convolution and by the residual
    add) cost scratchpad copies, not DRAM bytes.  Only whole-width, row-contiguous tensors that
    every member views the same way are staged."""
    inter = set(intermediates)
    views: dict[str, set] = {}
    for k in members:
        reads = [k.inputs[j] for j in spatial_inputs(k)]
        reads += [e.operand for e in k.epilogue if e.operand is not None and e.operand.shape[2] == k.output.shape[2]
                  and e.operand.shape[2] > 1]
        for t in reads:
            if t.name not in inter:
                views.setdefault(t.name, set()).add(t)
    return tuple(next(iter(v)) for name, v in sorted(views.items()) if len(v) == 1 and _rows_contiguous(next(iter(v))))


def stripes_of(attrs: ChainAttrs) -> tuple[Stripe, ...]:
    """:func:`chain_stripes` of the chain ``attrs``."""
    return chain_stripes(attrs.members, attrs.intermediates, attrs.stripe_rows, attrs.staged)


def staged_of(attrs: ChainAttrs) -> tuple[DramTensor, ...]:
    """The inputs the chain ``attrs`` stages: :func:`staged_inputs`, or none when its members
    read their inputs where they lie (``ChainAttrs.staged`` False)."""
    return staged_inputs(attrs.members, attrs.intermediates) if attrs.staged else ()


def _stripe(members: tuple[Kernel, ...], inter: set[str], r0: int, r1: int) -> Stripe:
    need: dict[str, tuple[int, int]] = {}
    rows: list[tuple[int, int]] = [(0, 0)] * len(members)
    for i in range(len(members) - 1, -1, -1):
        k = members[i]
        o0, o1 = (r0, r1) if i == len(members) - 1 else need.get(k.output.name, (0, 0))
        rows[i] = (o0, o1)
        if o1 <= o0:
            continue
        lo, hi, _ = input_rows(k, o0, o1)
        reads = [(k.inputs[j], lo, hi) for j in spatial_inputs(k)]
        reads += [(e.operand, o0, o1) for e in k.epilogue if e.operand is not None]
        for t, a0, a1 in reads:
            if t.name in inter and a1 > a0:
                a, b = need.get(t.name, (a0, a1))
                need[t.name] = (min(a, a0), max(b, a1))
    held = tuple((n, *need.get(n, (0, 0))) for n in sorted(inter))
    return Stripe(tuple(rows), held)


def row_bytes(t: DramTensor) -> int:
    """Bytes of one row (all channels and columns) of a dense channels-last 4-D tensor."""
    return t.shape[1] * t.shape[3] * t.dtype.size


def rows_view(t: DramTensor, r0: int, r1: int) -> DramTensor:
    """Rows [r0, r1) of a 4-D tensor ``t`` (a broadcast row dimension stays as it is)."""
    if t.shape[2] == 1 and t.strides[2] == 0:
        return t
    shape = (t.shape[0], t.shape[1], r1 - r0, t.shape[3])
    return DramTensor(t.name, shape, t.dtype, t.addr + r0 * t.strides[2], t.strides)


def band_kernel(k: Kernel, o0: int, o1: int) -> Kernel:
    """Member ``k`` restricted to output rows [o0, o1): its spatial inputs cut to the rows they
    read, the leading padding that of the band's first row (rows past the input's end are
    padding, as at the bottom of the whole tensor), epilogue operands cut like the output."""
    lo, hi, pad = input_rows(k, o0, o1)
    inputs = list(k.inputs)
    for j in spatial_inputs(k):
        inputs[j] = rows_view(inputs[j], lo, hi)
    attrs = k.attrs
    if k.kind in ("conv2d", "depthwise_conv2d", "pool2d"):
        attrs = replace(attrs, padding=(pad, attrs.padding[1]))
    epilogue = tuple(replace(e, operand=rows_view(e.operand, o0, o1)) if e.operand is not None else e
                     for e in k.epilogue)
    return replace(k, inputs=tuple(inputs), output=rows_view(k.output, o0, o1), attrs=attrs, epilogue=epilogue)


def externals(members: tuple[Kernel, ...], intermediates: tuple[str, ...]) -> tuple[DramTensor, ...]:
    """Every tensor the members touch that is not an intermediate, once, in first-use order
    (the fused kernel's inputs, and its output last)."""
    inter = set(intermediates)
    seen: dict[tuple, DramTensor] = {}
    for k in members:
        for t in k.tensors():
            if t.name not in inter:
                seen.setdefault((t.name, t.addr, t.shape, t.strides), t)
    last = members[-1].output
    return tuple(t for t in seen.values() if t != last)


def constant_inputs(members: tuple[Kernel, ...]) -> tuple[DramTensor, ...]:
    """The members' weights, biases and records (inputs past the spatial ones), once each by buffer."""
    seen: dict[str, DramTensor] = {}
    for k in members:
        for j, t in enumerate(k.inputs):
            if j not in spatial_inputs(k):
                seen.setdefault(t.name, t)
        for e in k.epilogue:
            if e.operand is not None and e.operand.shape[2] == 1:
                seen.setdefault(e.operand.name, e.operand)
    return tuple(seen.values())


def buffer_bytes(t: DramTensor) -> int:
    """Bytes from a constant's base to the end of its view (what a resident copy holds)."""
    return t.addr + t.span if t.numel else 0


@dataclass(frozen=True)
class ChainLayout:
    """The chain's own scratchpad: a buffer per intermediate and the resident constants, above
    the part the members plan and emit in (``member_bytes``)."""

    member_bytes: int
    buffers: tuple[tuple[str, int, int], ...]  # (intermediate or staged input, spad address, bytes)
    resident: tuple[tuple[str, int, int], ...]  # (constant buffer, spad address, bytes)

    @property
    def chain_bytes(self) -> int:
        ends = [a + n for _, a, n in self.buffers + self.resident]
        return max(ends, default=self.member_bytes) - self.member_bytes


STRIPES = ".stripes"  # suffix of the name of a chain's SRAM block (``ChainAttrs.sram_bytes``)


def stripes_memory(target):
    """The memory a chain's intermediates may live in instead of the scratchpad: the fastest
    memory that holds activations, when it is an on-chip SRAM; else None."""
    m = target.memories_holding("activations")[0]
    return m if m.kind == "sram" else None


def stripes_tensor(kernel_name: str, nbytes: int, dtype: DType) -> DramTensor:
    """The SRAM block of the chain ``kernel_name`` computing in ``dtype`` (its fused kernel's
    last input; ``nbytes`` a multiple of 64)."""
    return DramTensor(kernel_name + STRIPES, (nbytes // dtype.size,), dtype)


def chain_inputs(k: Kernel) -> tuple[DramTensor, ...]:
    """A fused kernel's inputs that are its members' external tensors (not its SRAM block)."""
    return k.inputs[:-1] if k.attrs.sram_bytes else k.inputs


def held_bytes(stripes: tuple[Stripe, ...], t: DramTensor) -> int:
    """Bytes of the buffer that holds the rows of ``t`` a stripe holds: the most any stripe
    holds (at least one row), aligned."""
    rows = max((b - a for s in stripes for n, a, b in s.held if n == t.name), default=0)
    return _align(max(1, rows) * row_bytes(t))


def sram_layout(members: tuple[Kernel, ...], intermediates: tuple[str, ...],
                stripes: tuple[Stripe, ...]) -> tuple[tuple[str, int, int], ...]:
    """(intermediate, offset in the chain's SRAM block, bytes): each intermediate's buffer."""
    producers = {k.output.name: k.output for k in members}
    out, top = [], 0
    for name in intermediates:
        n = held_bytes(stripes, producers[name])
        out.append((name, top, n))
        top += n
    return tuple(out)


def sram_block_bytes(members: tuple[Kernel, ...], intermediates: tuple[str, ...], stripes: tuple[Stripe, ...]) -> int:
    """Bytes of the SRAM block that holds a stripe of every intermediate."""
    return sum(n for _, _, n in sram_layout(members, intermediates, stripes))


def held_names(attrs: ChainAttrs) -> tuple[str, ...]:
    """The tensors a stripe holds rows of: the intermediates, then the staged inputs."""
    return tuple(attrs.intermediates) + tuple(t.name for t in staged_of(attrs))


SECOND = "#1"  # suffix of a staged input's second buffer (odd stripes load into it)


def chain_layout(attrs: ChainAttrs, spad_bytes: int, stripes: tuple[Stripe, ...]) -> ChainLayout | None:
    """Where the chain's buffers go (top of the scratchpad), or None when they leave the members
    less than a quarter of it.  A staged input is double-buffered (the next stripe's rows load
    while this stripe's are read) when both halves fit, else single-buffered.  The intermediates
    of a chain that keeps them in SRAM (``sram_bytes``) take no scratchpad."""
    members = attrs.members
    held = {k.output.name: k.output for k in members} | {t.name: t for t in staged_of(attrs)}
    staged = {t.name for t in staged_of(attrs)}
    sizes = []
    in_sram = set(attrs.intermediates) if attrs.sram_bytes else set()
    for name in (n for n in held_names(attrs) if n not in in_sram):
        sizes.append((name, held_bytes(stripes, held[name])))
    res = [(t.name, _align(buffer_bytes(t))) for t in constant_inputs(members)] if attrs.resident_weights else []
    seconds = [(name + SECOND, n) for name, n in sizes if name in staged and len(stripes) > 1]
    for extra in (seconds, []):
        total = sum(n for _, n in sizes + extra + res)
        member = (spad_bytes - total) // ALIGN * ALIGN
        if member >= spad_bytes // 4:
            break
    else:
        return None
    out_b, out_r, top = [], [], member
    for name, n in sizes + extra:
        out_b.append((name, top, n))
        top += n
    for (name, n), t in zip(res, constant_inputs(members) if attrs.resident_weights else ()):
        out_r.append((name, top, buffer_bytes(t)))
        top += n
    return ChainLayout(member, tuple(out_b), tuple(out_r))


# ------------------------------------------------------------------------------------ estimates


@dataclass(frozen=True)
class Estimate:
    """What the cost model expects: cycles, DRAM bytes, scratchpad bytes copied, energy in pJ."""

    cycles: int
    dram_bytes: int
    copy_bytes: int
    macs: int
    energy_pj: float


def _macs(k: Kernel, rows: int) -> int:
    """Multiply-accumulates of ``rows`` output rows of ``k``."""
    out = k.output
    if k.kind == "conv2d":
        w = k.inputs[1]
        return out.shape[0] * out.shape[1] * rows * out.shape[3] * w.shape[1] * w.shape[2] * w.shape[3]
    if k.kind == "depthwise_conv2d":
        w = k.inputs[1]
        return out.shape[0] * out.shape[1] * rows * out.shape[3] * w.shape[2] * w.shape[3]
    return 0


def _member_cycles(target, k: Kernel, rows: int, dram: int, copies: int, sram: int = 0) -> int:
    """Roofline cycles of ``rows`` output rows of member ``k``: array MACs at peak, DRAM bytes at
    the port, SRAM bytes (intermediates kept there) at the SRAM's, vector lane-ops (depthwise
    taps, elementwise work and scratchpad copies) on the vector unit, plus one DMA latency per
    band (the pipeline fill)."""
    macs = _macs(k, rows)
    elems = k.output.shape[0] * k.output.shape[1] * rows * k.output.shape[3]
    if k.kind == "depthwise_conv2d":
        lanes = 2 * macs
    elif k.kind == "pool2d":
        lanes = elems * k.attrs.kernel[0] * k.attrs.kernel[1]
    else:
        lanes = elems * (1 + len(k.epilogue))
    lanes += copies // k.dtype.size
    array = macs / target.peak_macs_per_cycle if k.kind == "conv2d" else 0
    s = stripes_memory(target)
    on_sram = sram / s.bytes_per_cycle if sram and s is not None else 0
    return int(max(array, dram / target.dram_bytes_per_cycle, on_sram, lanes / target.vector.lanes)) \
        + target.dma.latency_cycles


def _energy(target, dtype_name: str, macs: int, dram: int, copies: int, cycles: int, sram: int = 0) -> float:
    e = target.energy
    mac = e.mac_int8_pj if dtype_name == "int8" else e.mac_fp16_pj
    spad = e.spad_read_pj_per_byte + e.spad_write_pj_per_byte
    m = target.activation_memory  # where the tensors the chain reads and writes live when not on chip
    per_byte = (m.read_pj_per_byte + m.write_pj_per_byte) / 2
    s = stripes_memory(target)
    sram_pj = sram * (s.read_pj_per_byte + s.write_pj_per_byte) / 2 if sram and s is not None else 0.0
    return macs * mac + dram * per_byte + copies * spad + sram_pj + target.static_energy_pj(cycles)


def _view_bytes(t: DramTensor) -> int:
    n = t.dtype.size
    for size, stride in zip(t.shape, t.strides):
        if stride != 0:
            n *= size
    return n


def unfused_estimate(target, members: tuple[Kernel, ...]) -> Estimate:
    """The members run one after the other, each reading and writing DRAM (compulsory bytes)."""
    cycles = dram = macs = 0
    for k in members:
        seen = {(t.name, t.addr, t.shape, t.strides): _view_bytes(t) for t in k.tensors()}
        b = sum(seen.values())
        m = _macs(k, k.output.shape[2])
        dram += b
        macs += m
        cycles += _member_cycles(target, k, k.output.shape[2], b, 0)
    return Estimate(cycles, dram, 0, macs, _energy(target, members[0].dtype.name, macs, dram, 0, cycles))


def estimate(target, attrs: ChainAttrs, stripes: tuple[Stripe, ...]) -> Estimate:
    """The chain run fused over ``stripes``: external tensors read per stripe (the halo rows
    twice), intermediates copied in scratchpad (moved to and from the SRAM when the chain keeps
    them there), constants loaded once when resident (then copied per stripe) or per stripe."""
    members, inter = attrs.members, set(attrs.intermediates)
    staged = {t.name: row_bytes(t) for t in staged_of(attrs)}
    consts = {t.name: buffer_bytes(t) for t in constant_inputs(members)}
    cycles = dram = copies = macs = sram = 0
    for s in stripes:
        for name, a, b in s.held:
            if name in staged:
                dram += (b - a) * staged[name]
        for k, (o0, o1) in zip(members, s.out_rows):
            if o1 <= o0:
                continue
            band = band_kernel(k, o0, o1)
            d = c = r = 0
            for t in band.tensors():
                b = _view_bytes(t)
                if t.name in inter and attrs.sram_bytes:
                    r += b
                elif t.name in inter or t.name in staged:
                    c += b
                elif t.name in consts:
                    if attrs.resident_weights:
                        c += b
                    else:
                        d += b
                else:
                    d += b
            m = _macs(k, o1 - o0)
            cycles += _member_cycles(target, k, o1 - o0, d, c, r)
            dram, copies, macs, sram = dram + d, copies + c, macs + m, sram + r
    if attrs.resident_weights:
        dram += sum(consts.values())
    return Estimate(cycles, dram, copies, macs,
                    _energy(target, members[0].dtype.name, macs, dram, copies, cycles, sram))


DRAM_STRIDES = ("dram_s0", "dram_s1", "dram_s2")  # a load's DRAM strides; their defaults read one contiguous run


def constant_loads_streamed(steps, constants, target) -> tuple:
    """``steps`` as code generation will run their loads of ``constants`` (tensors): on a target
    with a weight decoder every block of a constant that a byte-wise load into the scratchpad
    reads is laid out as one contiguous run of the constant's bytes
    (``npuc.codegen.weight_compression``), so such a load reads its bytes from one run, not a
    strided window that pays a burst per short row.  Each is priced here as reading them
    contiguously from its first byte's address (its DRAM strides left to their defaults, which
    ``DMA_LOAD`` derives for a contiguous run), its scratchpad side unchanged (the run's real
    place is elsewhere in the same constant, in the same memory).  What prices recorded steps
    (a chain's tile program, a kernel run alone) prices these, as the tiling search prices a
    constant's loads (``npuc.schedule.search``)."""
    from npuc.isa.enums import Mem, Space
    from npuc.isa.instr import build_args, get_def

    steps = tuple(steps)
    spans = [(t.addr, t.addr + t.span) for t in constants if t.numel]
    if target.weight_decoder is None or not spans:
        return steps
    d = get_def("DMA_LOAD")
    out = []
    for s in steps:
        if s.op == "DMA_LOAD":
            f = s.kwargs()
            a = build_args(d, f)
            run = {k: v for k, v in f.items() if k not in DRAM_STRIDES}
            if a.esize == 1 and a.local is Space.spad and build_args(d, run) != a:
                r = next(r for r in d.regions(a) if r.mem is Mem.dram)
                if any(lo <= r.addr and r.end <= hi for lo, hi in spans):
                    s = Step(s.op, tuple(run.items()), s.tile)
        out.append(s)
    return tuple(out)


def program_estimate(steps, target, cycles: int | None = None) -> Estimate:
    """Cycles, off-chip bytes, scratchpad copy bytes, MACs and energy of a list of steps (a tile
    program's, or a kernel's emission recorded): cycles by the queue timeline walk
    (``npuc.schedule.vector_cost``; ``cycles`` when already walked), energy from every
    instruction's own energy actions (the counts the simulator sums) priced by the target's
    energy table, plus static energy over the cycles.  Nothing is estimated by hand: this is what
    the simulator counts."""
    from npuc.isa.actions import Actions, energy_breakdown
    from npuc.isa.instr import build_args, get_def
    from npuc.schedule.vector_cost import walk_cycles

    steps = tuple(steps)
    if cycles is None:
        cycles = walk_cycles(steps, target)
    n = len(target.memories)
    totals: list[int] | None = None
    seen: dict = {}
    for s in steps:
        # only a transfer's actions depend on its addresses (the memory its DRAM side falls in)
        key = s if s.op in ("DMA_LOAD", "DMA_STORE") else s.shape_key()
        flat = seen.get(key)
        if flat is None:
            d = get_def(s.op)
            args = build_args(d, s.kwargs())
            flat = seen[key] = d.actions(args, target, d.regions(args)).flat(n)
        totals = list(flat) if totals is None else [x + y for x, y in zip(totals, flat)]
    total = Actions.from_flat(totals, n) if totals is not None else Actions()
    dynamic = sum(energy_breakdown(total, target).values())
    return Estimate(cycles, total.dram_read + total.dram_write, total.spad_read + total.spad_write, total.macs,
                    dynamic + target.static_energy_pj(cycles))
