"""Assembly text: one instruction per line, ``MNEMONIC field=value ... [wait=Q[,Q]] [signal=Q[,Q]]``.

Values are integers (decimal or 0x hex), enum names, or decimal numbers for fp32 immediates.
``#`` or ``;`` starts a comment.  Omitted fields take their documented defaults.  Dependency
flags name the other queue: a compute instruction writes ``wait=load`` to wait for a token from
the load queue, ``signal=store,vector`` to send one to the store queue and one to the vector queue.

The disassembler writes every field and the flags that are set, so that
``assemble(disassemble(p)) == p`` for every program and ``disassemble(assemble(t)) == t`` for
text the disassembler wrote.
"""

from __future__ import annotations

from npuc.errors import AsmError
from npuc.isa.enums import Queue
from npuc.isa.instr import Deps, FieldError, Instr, InstrDef, Program, build_args, get_def, program_problem


def format_instr(ins: Instr) -> str:
    """The canonical text of one instruction."""
    d = ins.defn
    parts = [d.name] + [f"{f.name}={f.to_text(v)}" for f, v in zip(d.fields, ins.args)]
    parts += _deps_text(ins.deps, d.queue)
    return " ".join(parts)


def disassemble(program: Program | list[Instr]) -> str:
    """The canonical text of a program, one instruction per line."""
    return "".join(format_instr(i) + "\n" for i in program)


def _deps_text(deps: Deps, q: Queue) -> list[str]:
    out = []
    for key, queues in (("wait", deps.waits), ("signal", deps.signals)):
        names = [o.name for o in q.others() if o in queues]
        if names:
            out.append(f"{key}={','.join(names)}")
    return out


def assemble(text: str) -> Program:
    """Assemble program text; AsmError names the line and the reason."""
    instrs = []
    last_line = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        instrs.append(_parse_line(line, lineno))
        last_line = lineno
    reason = program_problem(instrs)
    if reason:
        raise AsmError(f"line {last_line}: {reason}" if instrs else reason)
    return Program(tuple(instrs))


def assemble_instr(line: str) -> Instr:
    """Assemble a single instruction line."""
    return _parse_line(line.strip(), 1)


def _parse_line(line: str, lineno: int) -> Instr:
    tokens = line.split()
    d = get_def(tokens[0].upper())
    if d is None:
        raise AsmError(f"line {lineno}: unknown instruction '{tokens[0]}'")
    values: dict[str, object] = {}
    deps = {"wait": set(), "signal": set()}
    for tok in tokens[1:]:
        key, sep, val = tok.partition("=")
        if not sep or not key or not val:
            raise AsmError(f"line {lineno}: expected field=value, got '{tok}'")
        if key in deps:
            deps[key] |= _parse_queues(val, lineno)
            continue
        if key in values:
            raise AsmError(f"line {lineno}: field '{key}' given twice")
        values[key] = _parse_value(d, key, val, lineno)
    try:
        dep = _make_deps(d, deps)
        return Instr(d.name, build_args(d, values), dep)
    except FieldError as e:
        raise AsmError(f"line {lineno}: {e}") from None


_FIELD_MAPS: dict[str, dict] = {}


def _parse_value(d: InstrDef, key: str, val: str, lineno: int) -> object:
    fmap = _FIELD_MAPS.get(d.name)
    if fmap is None:
        fmap = _FIELD_MAPS[d.name] = {f.name: f for f in d.fields}
    f = fmap.get(key)
    if f is None:
        raise AsmError(
            f"line {lineno}: {d.name} has no field '{key}' (fields: {', '.join(x.name for x in d.fields)})"
        )
    try:
        return f.from_text(val)
    except ValueError as e:
        raise AsmError(f"line {lineno}: field '{key}' of {d.name}: bad value '{val}': {e}") from None


def _parse_queues(val: str, lineno: int) -> set[Queue]:
    out = set()
    for name in val.split(","):
        if name not in Queue.__members__:
            raise AsmError(f"line {lineno}: '{name}' is not a queue ({', '.join(Queue.__members__)})")
        out.add(Queue[name])
    return out


def _make_deps(d: InstrDef, deps: dict[str, set[Queue]]) -> Deps:
    made = Deps(frozenset(deps["wait"]), frozenset(deps["signal"]))
    reason = made.problem(d.queue)
    if reason:
        raise FieldError(f"{d.name} runs on the {d.queue.name} queue: {reason}")
    return made
