"""Structure-aware fuzzing of .npub binaries: edits of fields, not of bytes.

A byte-level fuzzer mostly hits checksums and the section table; this one decodes a real
compiled container into its records (npuc.runtime.npub_model) and edits one or a few *fields*:
arena size and region offsets, IO offsets and shapes, segment kinds, indices and names, CPU
bindings' roles, offsets and values, the CPU graphs' text, metadata (the target description,
the CPU estimates, the precision), the constants, the debug map, and instruction fields in the
code (each field's bits rewritten in place, opcodes, dependency flags, instructions dropped,
duplicated or swapped).  The edited records are encoded again, so every checksum is right and
the edit reaches the loader's content checks, the executor and the simulator.

Every case is loaded *without* ``target=`` (the binary's own target is used, as ``npuc run``
does) and, when it loads and its arena is small, run.  The outcome is ``refused`` (an
NpucError), ``ran`` or ``unencodable`` (the edit cannot be written in the format); anything
else -- another exception, or a case running past its watchdog -- is an *escape*.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import signal
import traceback
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from npuc.errors import NpucError
from npuc.runtime.npub import BindingRole, Npub, SegmentKind

WATCHDOG_S = 5.0
MAX_RUN_ARENA = 1 << 23  # loaded binaries with larger arenas are not run (memory of the test; u55-like-256 maps 4 MiB of SRAM)
INTERESTING = (0, 1, 2, 3, 7, 8, 63, 64, 255, 256, 4095, 4096, 0x7FFF, 0xFFFF, 0x10000, 0x7FFF_FFFF,
               0xFFFF_FFFF, 2**32, 2**40, 2**63 - 1, 2**64 - 1)


class Hang(Exception):
    """A case ran past its watchdog."""


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    def on_alarm(signum, frame):
        raise Hang(f"a case ran for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------------------ edits

Edit = Callable[[random.Random, Npub], Npub]


def _value(rng: random.Random, old: int = 0) -> int:
    r = rng.random()
    if r < 0.5:
        return rng.choice(INTERESTING)
    if r < 0.8:
        return max(0, old + rng.choice((-64, -8, -4, -2, -1, 1, 2, 4, 8, 64, 4096)))
    return rng.randrange(0, 2**rng.choice((8, 16, 32, 64)))


def _pick_index(rng: random.Random, items) -> int | None:
    return rng.randrange(len(items)) if items else None


def _replace_at(items: tuple, i: int, new) -> tuple:
    return items[:i] + (new,) + items[i + 1:]


def edit_arena(rng, n):
    mp = n.memory_plan
    return dataclasses.replace(n, memory_plan=dataclasses.replace(mp, dram_arena_size=_value(rng, mp.dram_arena_size)))


def edit_region(rng, n):
    mp = n.memory_plan
    i = _pick_index(rng, mp.regions)
    if i is None:
        return n
    r = mp.regions[i]
    what = rng.choice(("offset", "size", "name", "swap"))
    if what == "swap" and len(mp.regions) > 1:
        j = rng.randrange(len(mp.regions))
        r2 = dataclasses.replace(r, offset=mp.regions[j].offset, size=mp.regions[j].size)
    elif what == "name":
        r2 = dataclasses.replace(r, name=rng.choice(("", "x", r.name * 2, mp.regions[-1].name)))
    else:
        r2 = dataclasses.replace(r, **{what if what != "swap" else "offset": _value(rng, getattr(r, what if what != "swap" else "offset"))})
    return dataclasses.replace(n, memory_plan=dataclasses.replace(mp, regions=_replace_at(mp.regions, i, r2)))


def edit_sram(rng, n):
    mp = n.memory_plan
    i = _pick_index(rng, mp.sram)
    if i is None:
        return n
    s = mp.sram[i]
    f = rng.choice(("scratchpad_bytes", "accumulator_bytes"))
    s2 = dataclasses.replace(s, **{f: _value(rng, getattr(s, f)) % 2**32})
    return dataclasses.replace(n, memory_plan=dataclasses.replace(mp, sram=_replace_at(mp.sram, i, s2)))


def edit_io(rng, n):
    sig = n.io_signature
    side = rng.choice(("inputs", "outputs"))
    items = getattr(sig, side)
    i = _pick_index(rng, items)
    if i is None:
        return n
    t = items[i]
    what = rng.choice(("offset", "shape", "dtype", "name", "drop"))
    if what == "drop":
        new_items = items[:i] + items[i + 1:]
    else:
        if what == "offset":
            t = dataclasses.replace(t, dram_offset=_value(rng, t.dram_offset))
        elif what == "shape":
            shape = list(t.type.shape)
            if shape and rng.random() < 0.7:
                k = rng.randrange(len(shape))
                shape[k] = _value(rng, shape[k]) % 2**32
            else:
                shape = shape + [rng.choice((1, 2, 65536))]
            t = dataclasses.replace(t, type=dataclasses.replace(t.type, shape=tuple(shape)))
        elif what == "dtype":
            from npuc.ir.types import DType

            t = dataclasses.replace(t, type=dataclasses.replace(t.type, dtype=rng.choice(list(DType))))
        else:
            t = dataclasses.replace(t, name=rng.choice(("", "zz", t.name + "_")))
        new_items = _replace_at(items, i, t)
    return dataclasses.replace(n, io_signature=dataclasses.replace(sig, **{side: new_items}))


def edit_segment(rng, n):
    i = _pick_index(rng, n.segments)
    if i is None:
        return n
    s = n.segments[i]
    what = rng.choice(("kind", "index", "inputs", "outputs", "drop", "swap"))
    if what == "drop":
        return dataclasses.replace(n, segments=n.segments[:i] + n.segments[i + 1:])
    if what == "swap":
        if len(n.segments) < 2:
            return n
        j = rng.randrange(len(n.segments))
        segs = list(n.segments)
        segs[i], segs[j] = segs[j], segs[i]
        return dataclasses.replace(n, segments=tuple(segs))
    if what == "kind":
        s = dataclasses.replace(s, kind=SegmentKind.CPU if s.kind == SegmentKind.NPU else SegmentKind.NPU)
    elif what == "index":
        s = dataclasses.replace(s, index=_value(rng, s.index) % 2**32)
    else:
        names = list(getattr(s, what))
        choice = rng.random()
        if names and choice < 0.4:
            names.pop(rng.randrange(len(names)))
        elif names and choice < 0.7:
            names[rng.randrange(len(names))] = rng.choice(("nope", names[0] + "x"))
        else:
            names.append(rng.choice(("nope", *(t.name for t in n.io_signature.outputs))))
        s = dataclasses.replace(s, **{what: tuple(names)})
    return dataclasses.replace(n, segments=_replace_at(n.segments, i, s))


def edit_binding(rng, n):
    i = _pick_index(rng, n.cpu_fallback)
    if i is None:
        return n
    sub = n.cpu_fallback[i]
    j = _pick_index(rng, sub.bindings)
    if j is None:
        return n
    b = sub.bindings[j]
    what = rng.choice(("role", "offset", "value", "shape", "drop", "duplicate"))
    if what == "drop":
        bindings = sub.bindings[:j] + sub.bindings[j + 1:]
    elif what == "duplicate":
        bindings = sub.bindings + (b,)
    else:
        if what == "role":
            b = dataclasses.replace(b, role=rng.choice([r for r in BindingRole if r != b.role]))
        elif what == "offset":
            b = dataclasses.replace(b, offset=_value(rng, b.offset))
        elif what == "value":
            b = dataclasses.replace(b, value=rng.choice(("nope", sub.bindings[-1].value, b.value + "x")))
        else:
            shape = list(b.type.shape) or [1]
            shape[rng.randrange(len(shape))] = rng.choice((1, 2, 3, 1000, 2**20))
            b = dataclasses.replace(b, type=dataclasses.replace(b.type, shape=tuple(shape)))
        bindings = _replace_at(sub.bindings, j, b)
    return dataclasses.replace(n, cpu_fallback=_replace_at(n.cpu_fallback, i, dataclasses.replace(sub, bindings=bindings)))


def edit_cpu_graph(rng, n):
    i = _pick_index(rng, n.cpu_fallback)
    if i is None:
        return n
    sub = n.cpu_fallback[i]
    lines = sub.graph_text.splitlines()
    what = rng.choice(("drop", "duplicate", "swap", "rename", "truncate", "garbage"))
    k = rng.randrange(len(lines)) if lines else 0
    if what == "drop" and lines:
        lines.pop(k)
    elif what == "duplicate" and lines:
        lines.insert(k, lines[k])
    elif what == "swap" and len(lines) > 1:
        m = rng.randrange(len(lines))
        lines[k], lines[m] = lines[m], lines[k]
    elif what == "rename" and lines:
        lines[k] = lines[k].replace("%", "%z", 1)
    elif what == "truncate":
        text = sub.graph_text[: rng.randrange(len(sub.graph_text) + 1)]
        return dataclasses.replace(n, cpu_fallback=_replace_at(n.cpu_fallback, i, dataclasses.replace(sub, graph_text=text)))
    else:
        lines.insert(k, rng.choice(("}", "graph @x() -> () {", "  %q = relu(%q) : tensor<1xf32>", "\x00")))
    text = "\n".join(lines) + "\n"
    return dataclasses.replace(n, cpu_fallback=_replace_at(n.cpu_fallback, i, dataclasses.replace(sub, graph_text=text)))


def edit_metadata(rng, n):
    if n.metadata is None:
        return n
    extra = dict(n.metadata.extra)
    key = rng.choice(sorted(extra) + ["npuc.target", "npuc.cpu", "precision"])
    old = extra.get(key, "")
    what = rng.choice(("garbage", "truncate", "json-edit", "drop"))
    if what == "drop":
        extra.pop(key, None)
    elif what == "truncate":
        extra[key] = old[: rng.randrange(len(old) + 1)]
    elif what == "json-edit":
        extra[key] = _json_edit(rng, old)
    else:
        extra[key] = rng.choice(("{", "[]", "null", "1e999", '{"a": [1, 2]}', "int4", "\u00e9"))
    return dataclasses.replace(n, metadata=dataclasses.replace(n.metadata, extra=extra))


def _json_edit(rng: random.Random, text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text + "}"

    def walk(x, depth=0):
        if isinstance(x, dict) and x:
            k = rng.choice(sorted(x))
            if rng.random() < 0.3 or depth > 3:
                x[k] = rng.choice((None, -1, 0, 2**70, 1e308, "x", [], {}))
            else:
                x[k] = walk(x[k], depth + 1)
        elif isinstance(x, list) and x:
            k = rng.randrange(len(x))
            x[k] = walk(x[k], depth + 1) if rng.random() < 0.6 else rng.choice((None, -1, "x", 2**70))
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            return rng.choice((-x, 0, x * 1000, float("inf") if rng.random() < 0.3 else x + 1))
        return x

    return json.dumps(walk(doc), allow_nan=True)


def edit_constants(rng, n):
    c = bytearray(n.constants)
    what = rng.choice(("truncate", "grow", "flip"))
    if what == "truncate":
        del c[rng.randrange(len(c) + 1):]
    elif what == "grow":
        c += bytes(rng.choice((1, 16, 4096)))
    elif c:
        k = rng.randrange(len(c))
        c[k] ^= 0xFF
    return dataclasses.replace(n, constants=bytes(c))


def edit_debug_map(rng, n):
    if not n.debug_map:
        return n
    dm = n.debug_map
    seg = _pick_index(rng, dm)
    entries = dm[seg]
    j = _pick_index(rng, entries)
    if j is None:
        return n
    e = entries[j]
    e2 = dataclasses.replace(e, instr_index=_value(rng, e.instr_index) % 2**32)
    return dataclasses.replace(n, debug_map=_replace_at(dm, seg, _replace_at(entries, j, e2)))


def edit_target_name(rng, n):
    if rng.random() < 0.5:
        return dataclasses.replace(n, target_name=rng.choice(("npu-small", "npu-large", "x", "npu-mid" * 3)))
    fp = bytearray(n.target_fingerprint)
    fp[rng.randrange(len(fp))] ^= 1 << rng.randrange(8)
    return dataclasses.replace(n, target_fingerprint=bytes(fp))


def edit_code(rng, n):
    """One instruction field's bits rewritten, an opcode or dependency flags changed, or an
    instruction dropped, duplicated or swapped -- all in whole instructions."""
    from npuc.errors import BinaryFormatError
    from npuc.isa.encoding import instruction_spans
    from npuc.isa.instr import HEADER_BITS, all_defs

    i = _pick_index(rng, n.code_segments)
    if i is None:
        return n
    code = bytes(n.code_segments[i])
    try:
        spans = list(instruction_spans(code))
    except BinaryFormatError:  # an earlier edit broke the stream: flip a bit anywhere
        if not code:
            return n
        k = rng.randrange(len(code))
        edited = code[:k] + bytes([code[k] ^ 1 << rng.randrange(8)]) + code[k + 1:]
        return dataclasses.replace(n, code_segments=_replace_at(n.code_segments, i, edited))
    if not spans:
        return n
    k = rng.randrange(len(spans))
    at0, size = spans[k]
    chunk = code[at0:at0 + size]
    word = int.from_bytes(chunk, "little")
    what = rng.choice(("field", "field", "field", "opcode", "deps", "drop", "duplicate", "swap"))
    parts = [code[a:a + b] for a, b in spans]
    if what in ("field", "deps", "opcode"):
        if what == "opcode":
            word = (word & ~0xFF) | rng.choice([d.opcode for d in all_defs()])
        elif what == "deps":
            word ^= 1 << (8 + rng.randrange(4))
        else:

            bits = size * 8 - HEADER_BITS
            if bits <= 0:  # END and NOP have no field: flip a reserved header bit instead
                at, bits = 12, 4
            else:
                at = HEADER_BITS + rng.randrange(bits)
                bits = min(bits - (at - HEADER_BITS), rng.choice((1, 4, 8, 16)))
            old = (word >> at) & ((1 << bits) - 1)
            new = _value(rng, old) % (1 << bits)
            word = (word & ~(((1 << bits) - 1) << at)) | (new << at)
        parts[k] = word.to_bytes(size, "little")
    elif what == "drop":
        del parts[k]
    elif what == "duplicate":
        parts.insert(k, chunk)
    else:
        m = rng.randrange(len(parts))
        parts[k], parts[m] = parts[m], parts[k]
    return dataclasses.replace(n, code_segments=_replace_at(n.code_segments, i, b"".join(parts)))


def edit_weight_streams(rng, n):
    """A field of one compressed weight stream or of a constant it replaces (format 3.2)."""
    ws = n.weight_streams
    if ws is None or not ws.streams:
        return n
    if rng.random() < 0.6:
        i = rng.randrange(len(ws.streams))
        st = ws.streams[i]
        f = rng.choice(("offset", "stream_bytes", "decoded_bytes", "crc32"))
        new = dataclasses.replace(st, **{f: _value(rng, getattr(st, f)) % 2**32})
        ws2 = dataclasses.replace(ws, streams=_replace_at(ws.streams, i, new))
    elif rng.random() < 0.5 and ws.constants:
        i = rng.randrange(len(ws.constants))
        c = ws.constants[i]
        f = rng.choice(("offset", "raw_bytes", "stored_bytes"))
        new = dataclasses.replace(c, **{f: _value(rng, getattr(c, f)) % 2**32})
        ws2 = dataclasses.replace(ws, constants=_replace_at(ws.constants, i, new))
    else:  # one of a stream's coded bytes in the constants blob
        from npuc.runtime.npub_model import RegionKind

        st = ws.streams[rng.randrange(len(ws.streams))]
        base = next((r.offset for r in n.memory_plan.regions if r.kind == RegionKind.CONSTANTS), 0)
        k = st.offset - base + rng.randrange(max(st.stream_bytes, 1))
        if not 0 <= k < len(n.constants):
            return n
        c = bytearray(n.constants)
        c[k] ^= 1 << rng.randrange(8)
        return dataclasses.replace(n, constants=bytes(c))
    return dataclasses.replace(n, weight_streams=ws2)


EDITS: dict[str, Edit] = {
    "arena": edit_arena, "region": edit_region, "sram": edit_sram, "io": edit_io, "segment": edit_segment,
    "binding": edit_binding, "cpu_graph": edit_cpu_graph, "metadata": edit_metadata,
    "constants": edit_constants, "debug_map": edit_debug_map, "target": edit_target_name,
    "code": edit_code, "code2": edit_code,  # code is the largest part: edited twice as often
    "weight_streams": edit_weight_streams,
}


# ------------------------------------------------------------------------------ running


@dataclass(frozen=True)
class Case:
    index: int
    edits: tuple[str, ...]
    outcome: str  # "refused", "ran", "loaded" (not run: large arena), "unencodable", "escape"
    detail: str = ""


def encode_unchecked(n: Npub) -> bytes:
    """``n`` encoded with every checksum right but without the writer's validation (which
    ``Npub.to_bytes`` runs): the edit must reach the loader."""
    from npuc.runtime.npub import Container, assemble, encode_sections

    return assemble(Container(n.format_version, n.target_name, n.target_fingerprint, encode_sections(n)))


def _inputs_for(art) -> tuple[torch.Tensor, ...]:
    from npuc.cli import _zero_inputs

    return _zero_inputs(art)


def run_case(base: Npub, seed: int, index: int) -> Case:
    """Apply 1-3 random edits to ``base`` and load (and run) the result."""
    import npuc

    rng = random.Random(seed * 1_000_003 + index)
    n = base
    names = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        name = rng.choice(sorted(EDITS))
        names.append(name)
        try:
            n = EDITS[name](rng, n)
        except NpucError as e:  # a record constructor refusing the edit is a clean refusal
            return Case(index, tuple(names), "refused", str(e)[:200])
    try:
        data = encode_unchecked(n)
    except NpucError as e:
        return Case(index, tuple(names), "unencodable", str(e)[:200])
    except (ValueError, OverflowError, TypeError, KeyError) as e:  # the format cannot hold the edit
        return Case(index, tuple(names), "unencodable", f"{type(e).__name__}: {e}"[:200])
    try:
        with watchdog(WATCHDOG_S):
            art = npuc.load(data)
            if art.npub.memory_plan.dram_arena_size > MAX_RUN_ARENA:
                return Case(index, tuple(names), "loaded")
            art.run(*_inputs_for(art))
            art.profile(*_inputs_for(art))
    except NpucError as e:
        return Case(index, tuple(names), "refused", str(e)[:200])
    except Exception as e:  # noqa: BLE001 (an escape is what this looks for)
        return Case(index, tuple(names), "escape", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-4)}")
    return Case(index, tuple(names), "ran")


def base_binaries() -> list[Npub]:
    """Small real binaries to edit: fp16 with CPU segments, a convolution, int8, and int8 with
    compressed weight streams (``u55-like-256`` has a weight decoder: format 3.2)."""
    import npuc
    from torch import nn

    class WithCpu(nn.Module):
        def forward(self, x):
            y = torch.relu(x)
            return torch.sin(y) * 2 + 1  # sin runs on the CPU: a CPU segment to edit

    torch.manual_seed(0)
    conv = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 4)).eval()
    x = torch.randn(1, 3, 8, 8)
    out = [npuc.compile(WithCpu().eval(), (torch.randn(1, 8),), name="with_cpu").npub,
           npuc.compile(conv, (x,), name="conv").npub]
    calib = [(torch.randn(1, 3, 8, 8),) for _ in range(2)]
    out.append(npuc.compile(conv, (x,), quantize="int8", calibration=calib, name="conv_int8").npub)
    wide = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 32, 1)).eval()
    with torch.no_grad():  # bell-shaped weights, as training leaves them: they compress
        for p in wide.parameters():
            p.copy_(torch.distributions.Laplace(0.0, 0.01).sample(p.shape))
    xw = torch.randn(1, 32, 12, 12)
    streams = npuc.compile(wide, (xw,), target="u55-like-256", quantize="int8",
                           calibration=[(torch.randn(1, 32, 12, 12),) for _ in range(2)], name="streams").npub
    if streams.weight_streams is None or not streams.weight_streams.streams:
        raise AssertionError("the u55 base binary carries no weight streams: the fuzzer would not reach them")
    out.append(streams)
    return out


def fuzz_binaries(seed: int, count: int, bases: list[Npub] | None = None) -> list[Case]:
    """``count`` edited binaries from ``bases`` (default: :func:`base_binaries`)."""
    bases = bases or base_binaries()
    return [run_case(bases[i % len(bases)], seed, i) for i in range(count)]
