"""``LOOP``: a body of instructions repeated with address strides, and its expansion.

``LOOP n=N body=B i0=J d0=D r0=R f0=F p0=P s0=S ... ph0=H ...`` repeats the next ``B``
instructions ``N`` times.  In iteration ``k`` (from 0) field number ``F`` (in definition order)
of body instructions ``J, J+D, ..., J+(R-1)*D`` (0 = the instruction right after the LOOP) has
``k * S`` added to its encoded value -- ``((k + H) mod P - H) * S`` when the slot has a period
``P`` and a phase ``H < P`` (a buffer that rotates between two or more places, double or triple
buffering, and starts the loop at place ``H`` of the rotation: the body as written is always
iteration 0) -- for each of the :data:`SLOTS`
stride slots whose stride is not 0 (one slot moves, say, the address of every weight load of
the body).  Unused slots cost no bits in the encoding (fields at their default are left out:
:mod:`npuc.isa.encoding`).  Bodies nest: a LOOP inside a body is part
of it (``B`` counts every encoded instruction of the body, nested bodies included), and an outer
stride may move a field of an instruction of an inner body, so that a whole layer is a few
instructions.  Dependency flags of body instructions repeat in every iteration; LOOP itself has
none, and costs nothing at run time: the instruction fetch unit expands it (:func:`expand`).

A *flag exception* ``x{e}`` (up to :data:`EXCEPTIONS`) gives body instruction ``j`` other
dependency flags in iteration ``k`` only -- the first iteration of a software pipeline waits for
nothing that the loop itself produced, the last one signals no successor: without exceptions
such a loop is written as a LOOP over its middle iterations with its first and last iterations
beside it, in full.  An exception on an instruction inside an inner body holds for every
dynamic instruction it stands for in iteration ``k``; an inner LOOP's own exceptions take
precedence over an outer one's.

The simulator runs the expanded program, so the race detector, the timing and the energy see
every dynamic instruction; ``origin[i]`` names the encoded instruction each came from.
"""

from __future__ import annotations

from typing import Sequence

from npuc.isa.instr import DEP_BITS, Deps, FieldError, Instr, int_ranges

SLOTS = 16
STRIDE_BITS = 32
BODY_BITS = 12
STEP_BITS = BODY_BITS
COUNT_BITS = BODY_BITS
FIELD_INDEX_BITS = 5
PERIOD_BITS = 3
PHASE_BITS = PERIOD_BITS
MAX_STRIDE = (1 << (STRIDE_BITS - 1)) - 1
MAX_BODY = (1 << BODY_BITS) - 1
MAX_STEP = (1 << STEP_BITS) - 1
MAX_COUNT = (1 << COUNT_BITS) - 1
MAX_PERIOD = (1 << PERIOD_BITS) - 1
EXCEPTIONS = 12  # flag exceptions of a LOOP (its fields stay below 128: the mask length keeps its 7 bits)
EXCEPTION_FIELD = "x"  # x{e}: 0 unused, else 1 + (iteration << (BODY_BITS + DEP_BITS) | body instruction << DEP_BITS | flags)
EXCEPTION_BITS = COUNT_BITS + BODY_BITS + DEP_BITS
SLOT_FIELDS = "idrfps"  # the fields of stride slot k: i{k}, d{k}, r{k}, f{k}, p{k}, s{k}
PHASE_FIELD = "ph"  # ph{k}: the phase of slot k, listed after every slot's other fields (a LOOP without
# phases then encodes exactly as before they existed: npuc.isa.encoding leaves trailing defaults out)


# (first body offset, step, count, field index, stride, period: 0 = none, phase)
Slot = tuple[int, int, int, int, int, int, int]


def slot_offset(k: int, stride: int, period: int = 0, phase: int = 0) -> int:
    """What a slot adds to its fields in iteration ``k``: ``k * stride``, or with a period
    ``((k + phase) mod period - phase) * stride`` (0 in iteration 0, whatever the phase)."""
    if not period:
        return k * stride
    return ((k + phase) % period - phase) * stride


def slots(ins: Instr) -> tuple[Slot, ...]:
    """The used stride slots of a LOOP."""
    a = ins.args
    out = []
    for k in range(SLOTS):
        s = getattr(a, f"s{k}")
        if s:
            out.append((getattr(a, f"i{k}"), getattr(a, f"d{k}"), getattr(a, f"r{k}"), getattr(a, f"f{k}"), s,
                        getattr(a, f"p{k}"), getattr(a, f"{PHASE_FIELD}{k}")))
    return tuple(out)


def strides(ins: Instr) -> tuple[tuple[int, int, int, int, int], ...]:
    """The (body offset, field index, stride, period, phase) of every strided field of a LOOP's body."""
    return tuple((j + m * d, f, s, p, h) for j, d, r, f, s, p, h in slots(ins) for m in range(r))


# (iteration, body offset, dependency flag bits relative to the instruction's queue: Deps.to_bits)
Exception = tuple[int, int, int]


def exception_value(k: int, j: int, bits: int) -> int:
    """The field value of a flag exception: body instruction ``j`` has flags ``bits`` in iteration ``k``."""
    return 1 + (k << (BODY_BITS + DEP_BITS) | j << DEP_BITS | bits)


def exceptions(ins: Instr) -> tuple[Exception, ...]:
    """The flag exceptions of a LOOP, (iteration, body offset, flag bits) each, in order."""
    out = []
    for e in range(EXCEPTIONS):
        v = getattr(ins.args, f"{EXCEPTION_FIELD}{e}")
        if not v:
            break
        v -= 1
        out.append((v >> (BODY_BITS + DEP_BITS), v >> DEP_BITS & MAX_BODY, v & ((1 << DEP_BITS) - 1)))
    return tuple(out)


def exception_problem(a) -> str | None:
    """Why the flag exceptions of LOOP args ``a`` are malformed (out of order, an unused one
    before a used one, an iteration or body instruction the LOOP does not have), or None."""
    last = 0
    for e in range(EXCEPTIONS):
        v = getattr(a, f"{EXCEPTION_FIELD}{e}")
        if not v:
            last = -1
            continue
        if last < 0:
            return f"flag exception {e} is used after an unused one (the used ones come first)"
        if v <= last:
            return f"flag exception {e} is not greater than the one before it (they are listed in increasing order)"
        last = v
        k, j = (v - 1) >> (BODY_BITS + DEP_BITS), (v - 1) >> DEP_BITS & MAX_BODY
        if k >= a.n:
            return f"flag exception {e} is for iteration {k}, but the LOOP runs {a.n}"
        if j >= a.body:
            return f"flag exception {e} is for body instruction {j}, but the body has {a.body}"
    return None


def uses_exceptions(instrs: Sequence[Instr]) -> bool:
    """Whether a LOOP of the program has a flag exception."""
    return any(i.op == "LOOP" and getattr(i.args, f"{EXCEPTION_FIELD}0") for i in instrs)


def uses_phase(instrs: Sequence[Instr]) -> bool:
    """Whether a LOOP of the program has a slot with a phase (a feature of format 3.3)."""
    return any(i.op == "LOOP" and any(sl[6] for sl in slots(i)) for i in instrs)


def strided_field_problem(ins: Instr, index: int) -> str | None:
    """Why field ``index`` of ``ins`` cannot carry a loop stride, or None."""
    if ins.op == "LOOP":
        return "a LOOP's own fields cannot be strided"
    fields = ins.defn.fields
    if index >= len(fields):
        return f"{ins.op} has no field number {index} (it has {len(fields)})"
    f = fields[index]
    if f.kind not in ("uint", "sint"):
        return f"field '{f.name}' of {ins.op} is not an integer field"
    return None


def loop_problem(instrs: Sequence[Instr]) -> str | None:
    """Why the LOOPs of a program are malformed (a body past its enclosing body or into END,
    a stride on a field that cannot take one, dependency flags on a LOOP), or None."""
    ends: list[int] = []  # end (exclusive) of each enclosing body
    for i, ins in enumerate(instrs):
        while ends and i >= ends[-1]:
            ends.pop()
        if ins.op != "LOOP":
            if ins.op == "END" and ends:
                return f"END at instruction {i} is inside the body of a LOOP"
            continue
        if ins.deps:
            return f"LOOP at instruction {i} has dependency flags (only the instructions of its body may)"
        end = i + 1 + ins.args.body
        limit = ends[-1] if ends else len(instrs) - 1
        if end > limit:
            return f"the body of the LOOP at instruction {i} ({ins.args.body} instructions) runs past " + (
                "the body of the LOOP around it" if ends else "the last instruction before END")
        for j, f, *_ in strides(ins):
            if j >= ins.args.body:
                return f"LOOP at instruction {i}: stride on body instruction {j}, but the body has {ins.args.body}"
            reason = strided_field_problem(instrs[i + 1 + j], f)
            if reason:
                return f"LOOP at instruction {i}: {reason}"
        for _, j, _ in exceptions(ins):
            if instrs[i + 1 + j].op == "LOOP":
                return f"LOOP at instruction {i}: flag exception on body instruction {j}, a LOOP (a LOOP has no flags)"
        ends.append(end)
    return None


MAX_DYNAMIC = 1 << 24  # dynamic instructions a program may expand to (a simulator's limit)


def dynamic_count(instrs: Sequence[Instr]) -> int:
    """How many instructions the program runs once its LOOPs are expanded (without expanding)."""
    total = 0
    i, stack = 0, []  # stack: (end of a body, its multiplier)
    mult = 1
    for i, ins in enumerate(instrs):
        while stack and i >= stack[-1][0]:
            _, mult = stack.pop()
        if ins.op == "LOOP":
            stack.append((i + 1 + ins.args.body, mult))
            mult *= ins.args.n
        else:
            total += mult
    return total


def expand(instrs: Sequence[Instr]) -> tuple[list[Instr], list[int]]:
    """The dynamic instruction stream of a program with LOOPs, and the encoded index each comes
    from.  Raises FieldError when a strided field leaves its range in some iteration, or when
    the program would run more than MAX_DYNAMIC instructions."""
    count = dynamic_count(instrs)
    if count > MAX_DYNAMIC:
        raise FieldError(f"the program's LOOPs expand to {count:,} instructions, more than the simulator's "
                         f"{MAX_DYNAMIC:,}")
    out: list[Instr] = []
    origin: list[int] = []
    _expand(instrs, 0, len(instrs), {}, out, origin, {})
    return out, origin


def has_loops(instrs: Sequence[Instr]) -> bool:
    return any(i.op == "LOOP" for i in instrs)


def _expand(instrs, lo: int, hi: int, delta: dict[int, dict[int, int]], out: list, origin: list,
            flags: dict[int, Deps]) -> None:
    """Expand ``instrs[lo:hi]`` with ``delta`` added to fields ({index: {field: add}}) and the
    dependency flags of ``flags`` ({index: flags}: the enclosing LOOPs' exceptions) in place."""
    i = lo
    while i < hi:
        ins = instrs[i]
        if ins.op != "LOOP":
            d = delta.get(i)
            got = _moved(ins, d, i) if d else ins
            x = flags.get(i) if flags else None
            out.append(got if x is None or x == got.deps else Instr(got.op, got.args, x))
            origin.append(i)
            i += 1
            continue
        body_lo, body_hi = i + 1, i + 1 + ins.args.body
        moved = strides(ins)
        by_iteration: dict[int, dict[int, Deps]] = {}
        for k, j, bits in exceptions(ins):
            by_iteration.setdefault(k, {})[body_lo + j] = Deps.from_bits(bits, instrs[body_lo + j].defn.queue)
        for k in range(ins.args.n):
            if k == 0 or not moved:
                inner = delta
            else:
                inner = {j: dict(v) for j, v in delta.items() if body_lo <= j < body_hi}
                for j, f, s, p, h in moved:
                    fields = inner.setdefault(body_lo + j, {})
                    fields[f] = fields.get(f, 0) + slot_offset(k, s, p, h)
            own = by_iteration.get(k)
            _expand(instrs, body_lo, body_hi, inner, out, origin, {**flags, **own} if own else flags)
        i = body_hi


def _moved(ins: Instr, delta: dict[int, int], index: int) -> Instr:
    """``ins`` with ``delta`` ({field index: add}) added to its fields; raises FieldError when a
    field leaves its range or the fields no longer fit together."""
    d = ins.defn
    vals = None
    ranges = int_ranges(d)
    for f_index, add in delta.items():
        if add:
            if vals is None:
                vals = list(ins.args)
            v = vals[f_index] + add
            lo, hi = ranges[f_index]
            if not (type(v) is int and lo <= v <= hi):  # an integer field in range needs no other check
                f = d.fields[f_index]
                reason = f.problem(v)
                if reason:
                    raise FieldError(f"instruction {index} `{ins}` in a LOOP: field '{f.name}' {reason}")
            vals[f_index] = v
    if vals is None:
        return ins
    args = type(ins.args)._make(vals)
    reason = d.validate(args)
    if reason:
        raise FieldError(f"instruction {index} `{ins}` in a LOOP: {reason}")
    return Instr(ins.op, args, ins.deps)


def loop_instr(n: int, body: int, used: Sequence[Slot], flag_exceptions: Sequence[Exception] = ()) -> Instr:
    """A LOOP instruction repeating ``body`` instructions ``n`` times with the ``used`` slots and
    the flag exceptions ``flag_exceptions`` ((iteration, body offset, flag bits) each)."""
    if len(used) > SLOTS:
        raise FieldError(f"a LOOP has {SLOTS} stride slots, {len(used)} asked")
    if len(flag_exceptions) > EXCEPTIONS:
        raise FieldError(f"a LOOP has {EXCEPTIONS} flag exceptions, {len(flag_exceptions)} asked")
    defn, defaults, index = _loop_defaults()
    fields = [("n", n), ("body", body)]
    for k, (j, d, r, f, s, p, h) in enumerate(used):
        fields += [(f"i{k}", j), (f"d{k}", d), (f"r{k}", r), (f"f{k}", f), (f"s{k}", s), (f"p{k}", p),
                   (f"{PHASE_FIELD}{k}", h)]
    for e, x in enumerate(sorted(exception_value(*x) for x in flag_exceptions)):
        fields.append((f"{EXCEPTION_FIELD}{e}", x))
    # what Instr.make does, from the LOOP's default fields by position (a LOOP has 114 fields;
    # rerolling builds thousands)
    vals = list(defaults)
    ranges = int_ranges(defn)
    for name, v in fields:
        k = index[name]
        lo, hi = ranges[k]
        if not (type(v) is int and lo <= v <= hi):
            reason = defn.fields[k].problem(v)
            if reason:
                raise FieldError(f"LOOP field '{name}' {reason}")
        vals[k] = v
    args = defaults._make(vals)
    reason = defn.validate(args)
    if reason:
        raise FieldError(f"LOOP: {reason}")
    return Instr("LOOP", args)


_LOOP_DEFAULTS: list = []


def _loop_defaults():
    """The LOOP's definition, its args with every field at its default (n = body = 1) and the
    position of each field by name."""
    if not _LOOP_DEFAULTS:
        from npuc.isa.instr import get_def

        defaults = Instr.make("LOOP", n=1, body=1).args
        _LOOP_DEFAULTS.append((get_def("LOOP"), defaults, {name: k for k, name in enumerate(defaults._fields)}))
    return _LOOP_DEFAULTS[0]


def group(moves: Sequence[tuple[int, ...]]) -> tuple[Slot, ...] | None:
    """Slots for (body offset, field index, stride[, period[, phase]]) moves: moves of the same
    field by the same stride, period and phase at evenly spaced offsets share a slot.  None when
    more than :data:`SLOTS` are needed or a stride, period or phase does not fit its field."""
    by_key: dict[tuple[int, int, int, int], list[int]] = {}
    for j, f, s, *rest in moves:
        p = rest[0] if rest else 0
        h = rest[1] if len(rest) > 1 else 0
        if not -MAX_STRIDE - 1 <= s <= MAX_STRIDE or p > MAX_PERIOD or (h and not 0 < h < p):
            return None
        by_key.setdefault((f, s, p, h), []).append(j)
    out: list[Slot] = []
    for (f, s, p, h), js in sorted(by_key.items(), key=lambda kv: (min(kv[1]), kv[0])):
        js.sort()
        i = 0
        while i < len(js):
            if i + 1 == len(js):
                out.append((js[i], 1, 1, f, s, p, h))
                break
            d = js[i + 1] - js[i]
            r = 2
            while i + r < len(js) and js[i + r] - js[i + r - 1] == d and r < MAX_COUNT:
                r += 1
            out.append((js[i], d, r, f, s, p, h))
            i += r
        if len(out) > SLOTS:
            return None
    return tuple(sorted(out))


__all__ = ["EXCEPTIONS", "SLOTS", "MAX_BODY", "MAX_PERIOD", "exceptions", "expand", "group", "has_loops", "loop_instr",
           "loop_problem", "slot_offset", "slots", "strides", "uses_exceptions", "uses_phase"]
