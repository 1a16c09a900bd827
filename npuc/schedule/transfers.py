"""The data movement of one loop step, as instruction fields: what the code generator emits and
what the cost model times.

Every function returns ``(op, fields)`` pairs whose scratchpad addresses are *relative to the
buffer* the data goes to (the emitter adds the buffer's base); DRAM addresses are absolute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from npuc.isa.instr import field_max
from npuc.kir import records
from npuc.schedule.problem import (
    ArrayProblem, ArrayTiling, OperandLayout, Step, input_geometry, quant_records_offset, weight_rows,
)

Instr = tuple[str, dict[str, Any]]
_MAX_COUNT = field_max("VFILL", "n0")  # every count field of the ISA


def _fill(dtype_name: str, addr: int, n0: int, n1: int, s1: int, es: int, value: float = 0.0) -> list[Instr]:
    """VFILL ``value`` (zero, or an int8 input's zero point) over an n1 x n0 block (row stride
    s1 bytes), split to the field limits."""
    out: list[Instr] = []
    if n0 <= 0 or n1 <= 0:
        return out
    for r in range(0, n1, _MAX_COUNT):
        rows = min(_MAX_COUNT, n1 - r)
        for c in range(0, n0, _MAX_COUNT):
            cols = min(_MAX_COUNT, n0 - c)
            out.append(("VFILL", dict(dtype=dtype_name, n0=cols, n1=rows, dst=addr + r * s1 + c * es, dst_s1=s1, value=value)))
    return out


Rows = tuple[int, int]  # local rows [lo, hi) of an input band


@dataclass(frozen=True)
class BandState:
    """What an input buffer holds: the border signature of its band (its padding cells hold the
    fill value) and the band's local rows ``held``."""

    sig: tuple
    held: Rows


def input_loads(p: ArrayProblem, t: ArrayTiling, s: Step) -> tuple[tuple, list[Instr], list[Instr]]:
    """The input of step ``s`` into an empty buffer: (zero-border signature, VFILLs, DMA_LOADs)."""
    fills, loads, _, state = band_loads(p, t, s, None, False)
    return state.sig, fills, loads


def band_loads(p: ArrayProblem, t: ArrayTiling, s: Step, state: BandState | None, same_band: bool,
               ) -> tuple[list[Instr], list[Instr], Rows, BandState]:
    """What step ``s`` adds to the buffer of its input band: (VFILLs, DMA_LOADs, the local rows
    they write, the buffer's state afterwards).  ``state`` is the buffer's (None: never used),
    ``same_band`` whether it holds this step's band already.

    A band's rows are loaded as its tiles first need them: a tile whose rows follow those held
    loads only the rows it adds (the halo it shares with the tile before is not read again).
    A band new to its buffer first gets the VFILLs that give its padding cells the fill value
    (zero, or an int8 input's zero point), except the cells that were padding in the buffer's
    last band of the same layout: DMAs write only the valid part, so those cells still hold it
    (``_stale_padding``: a row tile below the top one needs none of the top tile's border again,
    the top tile after the bottom one only its padding row).  The whole band's border is filled
    at once, on the vector queue, so that it never waits behind the epilogues of the band's
    tiles.
    """
    if t.unfold:
        return _unfolded(p, t, s, state, same_band)
    es, g = p.es, input_geometry(p, t, s.tc)
    sh, sw, sc = p.x_strides
    rows, cols = p.y.span(s.bh), p.x.span(s.tw)
    ylo, yhi = p.y.valid(s.y0, s.bh)
    xlo, xhi = p.x.valid(s.ox0, s.tw)
    if yhi <= ylo or xhi <= xlo:
        ylo = yhi = xlo = xhi = 0
    row_b, pix_b = g.row_elems * es, g.slot * es
    sig = ("dense", rows, cols, s.tc, ylo, yhi, xlo, xhi)
    need_lo, need_hi = s.x_rows(p)
    held = state.held if same_band and state is not None else None
    if held is not None and held[0] <= need_lo <= held[1]:
        r0, r1 = held[1], max(held[1], need_hi)
        after = (held[0], r1)
    else:
        r0, r1 = need_lo, need_hi
        after = (r0, r1)
    fill = held is None and (state is None or state.sig != sig)
    rects = _stale_padding(state.sig if state is not None else None, sig) if fill else []
    fills = [f for y0, y1, x0, x1 in rects
             for f in _fill(p.dtype.name, y0 * row_b + x0 * pix_b, (x1 - x0) * s.tc, y1 - y0, row_b, es, float(p.pad_value))]
    written = (min([r0] + [r[0] for r in rects]), max([r1] + [r[1] for r in rects])) if rects else (r0, r1)
    lo, hi = max(r0, ylo), min(r1, yhi)
    loads: list[Instr] = []
    if hi > lo:
        iy = p.y.start(s.y0) + lo * p.y.in_step
        ix = p.x.start(s.ox0) + xlo * p.x.in_step
        dram = p.x_addrs[s.b] + iy * sh + ix * sw + s.c0 * sc
        for r in range(0, hi - lo, _MAX_COUNT):
            n2 = min(_MAX_COUNT, hi - lo - r)
            loads.append(("DMA_LOAD", dict(
                esize=es, dram_addr=dram + r * p.y.in_step * sh, local_addr=(lo + r) * row_b + xlo * pix_b,
                n0=s.tc, n1=xhi - xlo, n2=n2, dram_s0=sc, dram_s1=p.x.in_step * sw, dram_s2=p.y.in_step * sh,
                local_s1=pix_b, local_s2=row_b,
            )))
    return fills, loads, written, BandState(sig, after)


def _stale_padding(old: tuple | None, new: tuple) -> list[tuple[int, int, int, int]]:
    """The padding cells of a band of signature ``new`` that may not hold the fill value in a
    buffer whose last band had signature ``old`` (None: never used), as rectangles
    (row0, row1, col0, col1) of local pixels: every cell outside the new band's valid
    rectangle, less those that were padding of the old band of the same layout (rows,
    columns, channels), which were filled then and never written since (a DMA writes only its
    band's valid cells).  So the cells to fill are the old valid rectangle (the whole buffer
    when the layout differs) less the new one: whole rows above and below it, the columns
    left and right of it on the rows they share."""
    _, rows, cols, _, ylo, yhi, xlo, xhi = new
    if old is not None and old[:4] == new[:4]:
        a, b, c, d = old[4:]
    else:
        a, b, c, d = 0, rows, 0, cols
    out = []
    if b > a and d > c:
        out += [(a, min(b, ylo), c, d), (max(a, yhi), b, c, d)]
        m0, m1 = max(a, ylo), min(b, yhi)
        out += [(m0, m1, c, min(d, xlo)), (m0, m1, max(c, xhi), d)]
    return [r for r in out if r[1] > r[0] and r[3] > r[2]]


def _unfolded(p: ArrayProblem, t: ArrayTiling, s: Step, state: BandState | None, same_band: bool,
              ) -> tuple[list[Instr], list[Instr], Rows, BandState]:
    """Unfolded rows: a band is one tile, loaded whole; its border is filled unless the buffer's
    last tile had the same one."""
    sig, fills, loads = _unfolded_loads(p, t, s)
    new = BandState(sig, (0, s.th))
    if same_band:
        return [], [], (0, 0), new
    if state is not None and state.sig == sig:
        fills = []
    return fills, loads, (0, s.th), new


def _unfolded_loads(p: ArrayProblem, t: ArrayTiling, s: Step) -> tuple[tuple, list[Instr], list[Instr]]:
    es, g = p.es, input_geometry(p, t, s.tc)
    sh, sw, sc = p.x_strides
    cols = p.x.span(s.tw)
    xlo, xhi = p.x.valid(s.ox0, s.tw)
    row_b, pix_b = g.row_elems * es, g.slot * es
    dt = p.dtype.name
    pv = float(p.pad_value)
    fills: list[Instr] = []
    loads: list[Instr] = []
    sig: list[Any] = ["unfold", s.th, cols, s.tc, xlo, xhi]
    if xhi <= xlo:
        return tuple(sig), _fill(dt, 0, cols * g.slot, s.th, row_b, es, pv), []
    fills += _fill(dt, 0, xlo * g.slot, s.th, row_b, es, pv)
    fills += _fill(dt, xhi * pix_b, (cols - xhi) * g.slot, s.th, row_b, es, pv)
    ix = p.x.start(s.ox0) + xlo
    for ky in range(p.y.kernel):
        start = s.oy0 * p.y.stride + ky * p.y.dilation - p.y.pad
        lo = 0 if start >= 0 else min(s.th, -(-(-start) // p.y.stride))
        hi = max(lo, min(s.th, -(-(p.y.size - start) // p.y.stride)))
        sig.append((lo, hi))
        for r in list(range(0, lo)) + list(range(hi, s.th)):
            fills += _fill(dt, r * row_b + xlo * pix_b + ky * s.tc * es, s.tc, xhi - xlo, pix_b, es, pv)
        if hi > lo:
            iy = start + lo * p.y.stride
            loads.append(("DMA_LOAD", dict(
                esize=es, dram_addr=p.x_addrs[s.b] + iy * sh + ix * sw + s.c0 * sc,
                local_addr=lo * row_b + xlo * pix_b + ky * s.tc * es,
                n0=s.tc, n1=xhi - xlo, n2=hi - lo, dram_s0=sc, dram_s1=sw, dram_s2=p.y.stride * sh,
                local_s1=pix_b, local_s2=row_b,
            )))
    return tuple(sig), fills, loads


def weight_loads(p: ArrayProblem, t: ArrayTiling, s: Step) -> list[Instr]:
    """DMA_LOADs of the weight block of step ``s`` (layout: see ``npuc.schedule.problem``;
    ``wide_weights``: the block of every output channel)."""
    if t.wide_weights:
        s = s._replace(n0=0, tn=p.n)
    es = p.es
    sky, skx, sc, sn = p.w_strides
    kh, kw = p.y.kernel, p.x.kernel
    base = p.w_addrs[s.b] + s.n0 * sn + s.c0 * sc
    out: list[Instr] = []
    if p.weights_n_major:
        krows = weight_rows(p, s.tc)
        for ky in range(kh):
            for kx in range(kw):
                row0 = (kx * kh + ky) * s.tc if t.unfold else (ky * kw + kx) * s.tc
                out.append(("DMA_LOAD", dict(
                    esize=es, dram_addr=base + ky * sky + kx * skx, local_addr=row0 * es,
                    n0=s.tc, n1=s.tn, dram_s0=sc, dram_s1=sn, local_s1=krows * es,
                )))
        return out
    row_b = s.tn * es
    if t.unfold:  # rows (kx, ky, c): one transfer per kx
        for kx in range(kw):
            out.append(("DMA_LOAD", dict(
                esize=es, dram_addr=base + kx * skx, local_addr=kx * kh * s.tc * row_b,
                n0=s.tn, n1=s.tc, n2=kh, dram_s0=sn, dram_s1=sc, dram_s2=sky,
                local_s1=row_b, local_s2=s.tc * row_b,
            )))
    elif kh == 1 or sky == kw * skx:  # rows (ky, kx, c) evenly strided: one transfer
        out.append(("DMA_LOAD", dict(
            esize=es, dram_addr=base, local_addr=0, n0=s.tn, n1=s.tc, n2=kh * kw,
            dram_s0=sn, dram_s1=sc, dram_s2=skx,  # kw == 1: skx == sky
            local_s1=row_b, local_s2=s.tc * row_b,
        )))
    else:
        for ky in range(kh):
            out.append(("DMA_LOAD", dict(
                esize=es, dram_addr=base + ky * sky, local_addr=ky * kw * s.tc * row_b,
                n0=s.tn, n1=s.tc, n2=kw, dram_s0=sn, dram_s1=sc, dram_s2=skx,
                local_s1=row_b, local_s2=s.tc * row_b,
            )))
    return out


def as_streams(loads: list[Instr]) -> list[Instr]:
    """The same weight loads as the program runs them on a target with a weight decoder: weight
    compression (``npuc.codegen.weight_compression``) stores each byte-wise block's bytes as one
    contiguous run in the order the load writes them (a codec stream, or the raw bytes when the
    codec saves no burst), so a block moves its bytes in whole bursts, not a burst for every
    short strided run.  The raw size is taken: a stream is never larger."""
    out: list[Instr] = []
    for op, f in loads:
        if f["esize"] != 1:
            out.append((op, f))
            continue
        n = f["n0"] * f.get("n1", 1) * f.get("n2", 1)
        for i in range(0, n, _MAX_COUNT):
            out.append((op, dict(esize=1, dram_addr=f["dram_addr"], local_addr=f["local_addr"] + i,
                                 n0=min(_MAX_COUNT, n - i))))
    return out


def by_planes(loads: list[Instr]) -> list[Instr]:
    """The same transfers, one per plane: the kernel's first weight block is loaded so, so that
    the array starts on the first reduction chunk while the rest arrives behind it."""
    out: list[Instr] = []
    for op, f in loads:
        n2 = f.get("n2", 1)
        if n2 == 1:
            out.append((op, f))
            continue
        s2 = f.get("dram_s2", f.get("n1", 1) * f.get("dram_s1", f["n0"] * f.get("dram_s0", f["esize"])))
        l2 = f.get("local_s2", f.get("n1", 1) * f.get("local_s1", f["n0"] * f["esize"]))
        for i in range(n2):
            plane = {k: v for k, v in f.items() if k not in ("n2", "dram_s2", "local_s2")}
            plane["dram_addr"] = f["dram_addr"] + i * s2
            plane["local_addr"] = f["local_addr"] + i * l2
            out.append((op, plane))
    return out


def plane_range(loads: list[Instr], lo: int, hi: int) -> list[Instr]:
    """The planes [lo, hi) of :func:`by_planes` of ``loads``, the planes of one load as one
    transfer (a spread piece of a block: one DMA, so that a weight stream's piece moves whole
    bursts once, not once a plane)."""
    out: list[Instr] = []
    at = 0
    for op, f in loads:
        n2 = f.get("n2", 1)
        a, b = max(lo, at), min(hi, at + n2)
        if a < b:
            s2 = f.get("dram_s2", f.get("n1", 1) * f.get("dram_s1", f["n0"] * f.get("dram_s0", f["esize"])))
            l2 = f.get("local_s2", f.get("n1", 1) * f.get("local_s1", f["n0"] * f["esize"]))
            part = dict(f, n2=b - a, dram_addr=f["dram_addr"] + (a - at) * s2, local_addr=f["local_addr"] + (a - at) * l2)
            if b - a == 1:  # a single plane, as by_planes gives it
                part = {k: v for k, v in part.items() if k not in ("n2", "dram_s2", "local_s2")}
            out.append((op, part))
        at += n2
    return out


class WeightLoad(NamedTuple):
    """Weight loads issued at one step: the block of step ``step``, whole (``planes`` None: as
    :func:`weight_loads` gives it) or its planes [lo, hi) of ``of`` (:func:`plane_range`);
    ``early``: at the start of the step, before its input loads (a load issued ahead of its
    block's step), else after them."""

    step: int
    planes: tuple[int, int] | None = None
    of: int = 1
    early: bool = False


@dataclass(frozen=True)
class WeightPlan:
    """Which weight buffer each step of a loop nest reads (``slot``) and which loads each step
    issues (``loads``: before its input loads the ``early`` ones, after them the rest), in the
    order their blocks are used."""

    slot: tuple[int, ...]
    loads: tuple[tuple[WeightLoad, ...], ...]

    def instrs(self, p: ArrayProblem, t: ArrayTiling, seq: list[Step], load: WeightLoad, first: bool) -> list[Instr]:
        """The DMA_LOADs of ``load`` (``first``: the kernel's first block, by planes)."""
        whole = weight_loads(p, t, seq[load.step])
        if load.planes is None:
            return by_planes(whole) if first else whole
        return plane_range(whole, *load.planes)


def weight_plan(p: ArrayProblem, t: ArrayTiling, seq: list[Step]) -> WeightPlan:
    """The weight buffers of the loop nest ``seq`` (the steps of ``t``) and when each block is
    loaded.  A block missing from the buffers replaces the one read again latest (or never).
    Its load is issued at the step that needs it when the buffer it replaces is read by the
    step before; otherwise it is spread, a plane at a time, over the steps before it (one plane
    a step, from the step after the last read of the buffer and after the last plane of the
    load before: loads keep the order of their use): the next channel block's weights then
    arrive during the compute of this one.  A load of one queue completes in order, so one
    whole block issued ahead would hold every input load behind it for its transfer (on a
    target whose weights stream from flash at a byte a cycle, several thousand cycles); a plane
    beside a step's input loads, on another memory's port, delays none of them.  A piece is
    issued at the start of the step after the one it follows (``WeightLoad.early``), and the
    planes of one piece are one transfer (:func:`plane_range`)."""
    keys = [s.w_key(p, t) for s in seq]
    nxt = [len(keys)] * len(keys)  # the next step that reads the same block (len(keys): none)
    seen: dict[tuple, int] = {}
    for i in range(len(keys) - 1, -1, -1):
        nxt[i] = seen.get(keys[i], len(keys))
        seen[keys[i]] = i
    held: dict[tuple, int] = {}  # block -> buffer
    next_use: dict[tuple, int] = {}
    last_read = [-1] * t.w_slots  # the last step that read each buffer
    slot = [0] * len(keys)
    loads: list[list[WeightLoad]] = [[] for _ in keys]
    issued = 0  # the step of the last load's last plane: loads keep the order of their use
    fill_end = next((i for i, s in enumerate(seq) if i and s.first), len(seq))  # the second tile's first step
    for i, k in enumerate(keys):
        if k not in held:
            if len(held) < t.w_slots:
                b = len(held)
            else:
                victim = max(held, key=lambda x: next_use[x])
                b = held.pop(victim)
                del next_use[victim]
            # the first output tile's blocks at their own steps (the pipeline's fill: the first
            # block by planes, each next one behind it as the array reaches it)
            free = i if i < fill_end else max(last_read[b] + 1, issued)
            issued = _schedule(p, t, seq, loads, i, free)
            held[k] = b
        slot[i] = held[k]
        next_use[k] = nxt[i]
        last_read[slot[i]] = i
    return WeightPlan(tuple(slot), tuple(tuple(x) for x in loads))


def _schedule(p: ArrayProblem, t: ArrayTiling, seq: list[Step], loads: list[list[WeightLoad]], i: int, free: int) -> int:
    """Put the load of step ``i``'s block, which may be issued from step ``free`` on, in
    ``loads``; the step of its last plane."""
    if free >= i:
        loads[i].append(WeightLoad(i))
        return i
    n = len(by_planes(weight_loads(p, t, seq[i])))
    w = min(n, i - free)
    # the planes spread over the last ``w`` steps before step ``i``, each piece after a step's
    # input loads: issued at the start of the step after (``early``, before its input loads:
    # the same order on the DMA queue, but for a tile's epilogue operand and record loads, which
    # now go first), so that a piece issued at the end of an output tile travels with the next
    # tile's iteration, and the last channel block's iterations look like the others'
    if w == 1:  # the step before: whole
        loads[i].append(WeightLoad(i, early=True))
        return i - 1
    for k in range(w):
        loads[i - w + k + 1].append(WeightLoad(i, (k * n // w, (k + 1) * n // w), n, early=True))
    return i - 1


def output_store(p: ArrayProblem, s: Step) -> Instr:
    """DMA_STORE of the output tile ``[th][tw][tn]`` (scratchpad rows of ``tn`` elements)."""
    es = p.es
    soy, sox, sn = p.out_strides
    return ("DMA_STORE", dict(
        esize=es, dram_addr=p.out_addrs[s.b] + s.oy0 * soy + s.ox0 * sox + s.n0 * sn, local_addr=0,
        n0=s.tn, n1=s.tw, n2=s.th, dram_s0=sn, dram_s1=sox, dram_s2=soy,
        local_s1=s.tn * es, local_s2=s.tw * s.tn * es,
    ))


def operand_load(p: ArrayProblem, op: OperandLayout, s: Step) -> tuple[tuple, Instr]:
    """The operand tile of step ``s`` (key for reuse, DMA_LOAD): ``[1 or th*tw][1 or tn]``."""
    es = p.es
    soy, sox, sn = op.strides
    dram = op.addrs[s.b] + s.oy0 * soy + s.ox0 * sox + s.n0 * sn
    cols = 1 if op.channel_broadcast else s.tn
    if op.spatial_broadcast:
        key = (dram, 1, 1, cols)
        return key, ("DMA_LOAD", dict(esize=es, dram_addr=dram, local_addr=0, n0=cols, dram_s0=sn or es))
    key = (dram, s.th, s.tw, cols)
    return key, ("DMA_LOAD", dict(
        esize=es, dram_addr=dram, local_addr=0, n0=cols, n1=s.tw, n2=s.th,
        dram_s0=sn or es, dram_s1=sox, dram_s2=soy, local_s1=cols * es, local_s2=s.tw * cols * es,
    ))


class QuantLoad(NamedTuple):
    """int8: how step ``s`` finds its channels' folded bias and REQUANT records in the scratchpad.

    ``key`` names what a slot holds (a load is skipped while its slot holds it); ``instrs`` load
    it into a slot (addresses relative to the slot): the bias (int32 ``[k]``) at 0, then
    ``npuc.kir.records.load_instrs``: the records (8 bytes each) at ``records``; ``first`` is the
    step's first channel within the loaded block."""

    key: tuple
    instrs: list[Instr]
    records: int
    first: int


def quant_key(p: ArrayProblem, t: ArrayTiling, s: Step) -> tuple:
    """int8: what the bias and records buffer of step ``s`` must hold (``QuantLoad.key``), without
    building the loads: the walk asks it at every output tile."""
    c0 = 0 if t.quant_once else s.n0
    return p.quant.bias_addrs[s.b] + c0 * 4, p.n if t.quant_once else s.tn


def quant_loads(p: ArrayProblem, t: ArrayTiling, s: Step) -> QuantLoad:
    """int8: the bias and records step ``s`` of tiling ``t`` reads: every channel of its batch
    (``quant_once``: loaded once) or its own channel block."""
    q = p.quant
    c0, k = (0, p.n) if t.quant_once else (s.n0, s.tn)
    recs = quant_records_offset(k)
    loads = [("DMA_LOAD", dict(esize=4, dram_addr=q.bias_addrs[s.b] + c0 * 4, local_addr=0, n0=k))]
    loads += records.load_instrs(records.record_addr(q.records_addrs[s.b], c0), k, recs)
    return QuantLoad(quant_key(p, t, s), loads, recs, s.n0 - c0)
