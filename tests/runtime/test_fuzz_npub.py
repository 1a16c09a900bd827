"""Fuzzing the .npub loader: 15,000 mutated or truncated containers.

Every case must either be refused with an NpucError or load; a loaded container of this format
version must re-encode to exactly the bytes it was loaded from (the format has one encoding).
Any other exception, or a case running past its watchdog, fails the test.

Most mutations are followed by recomputing the checksums, so that they get past the checksum
checks and reach the table, payload and content validation; each test checks from the error
messages that the validation it aims at was reached.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import struct
import time
import zlib
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npuc.errors import NpucError
from npuc.ir.types import DType, TensorType
from npuc.fuzz.binaries import Hang, watchdog
from npuc.runtime.npub import (
    FORMAT_VERSION,
    IOSignature,
    IOTensor,
    MemoryPlan,
    Npub,
    RawSection,
    assemble,
    load_npub,
    no_code_check,
    split_container,
)
from npuc.runtime.npub_example import example_npub

WATCHDOG_S = 2.0  # one case may take this long at most (a load takes well under a millisecond)
MAX_SIMULATED_ARENA = 1 << 20  # larger (valid) arenas of mutated containers are loaded, not run


def _bases() -> list[bytes]:
    full = example_npub()
    stripped = dataclasses.replace(full, debug_map=None, metadata=None)
    x = IOTensor("x", TensorType((2, 3), DType.f32), 0)
    minimal = Npub("t", bytes(32), (), b"", MemoryPlan(24, (), ()), IOSignature((x,), (x,)), ())
    # A file of a newer minor version with an optional section this npuc does not know.
    c = split_container(full.to_bytes())
    future = assemble(dataclasses.replace(c, version=(FORMAT_VERSION[0], 7), sections=c.sections + (RawSection(77, 0, b"later"),)))
    return [full.to_bytes(), stripped.to_bytes(), minimal.to_bytes(), future]


BASES = _bases()
INTERESTING = [0, 1, 2, 7, 8, 63, 64, 65, 255, 256, 0x7FFF, 0xFFFF, 0x10000, 0x7FFF_FFFF, 0xFFFF_FFFF, 2**32, 2**63 - 1, 2**63, 2**64 - 1]




def test_watchdog_stops_a_hanging_case():
    with pytest.raises(Hang):
        with watchdog(0.05):
            time.sleep(5)


def outcome(data: bytes, decode_code=no_code_check) -> str:
    """Load ``data``; return 'loaded' or where the error was raised.  Other exceptions propagate."""
    return _outcome_and_npub(data, decode_code)[0]


def _outcome_and_npub(data: bytes, decode_code, target=None) -> tuple[str, Npub | None]:
    with watchdog(WATCHDOG_S):
        try:
            n = load_npub(data, decode_code=decode_code, expected_target=target)
        except NpucError as e:
            return _where(str(e)), None
    if struct.unpack_from("<HH", data, 8) == FORMAT_VERSION:
        assert n.to_bytes() == data, "a loaded container re-encodes to other bytes"
    else:
        assert load_npub(n.to_bytes(), decode_code=decode_code, expected_target=target) == n
    return "loaded", n


def _where(msg: str) -> str:
    body = msg.split(": ", 1)[1]
    m = re.match(r"(header|section table entry \d+|section table|[A-Z_]+ section)", body)
    where = m.group(1) if m else "container"
    return re.sub(r"entry \d+", "entry", where)


# ---------------------------------------------------------------------------------- helpers


def _u32(d: bytes | bytearray, at: int) -> int:
    return struct.unpack_from("<I", d, at)[0]


def refresh_checksums(data: bytes) -> bytes:
    """Recompute every checksum a (possibly mangled) container has room for."""
    d = bytearray(data)
    if len(d) < 76:
        return bytes(d)
    header_size, count = _u32(d, 24), _u32(d, 32)
    if header_size > len(d):
        return bytes(d)
    for i in range(min(count, (len(d) - header_size) // 24)):
        e = header_size + 24 * i
        offset, length = struct.unpack_from("<QQ", d, e + 8)
        if offset + length <= len(d):
            struct.pack_into("<I", d, e + 4, zlib.crc32(d[offset : offset + length]))
    if header_size + 24 * count <= len(d):
        struct.pack_into("<I", d, 36, zlib.crc32(d[header_size : header_size + 24 * count]))
    head = bytearray(d[:header_size])
    if len(head) >= 32:
        struct.pack_into("<I", head, 28, 0)
        struct.pack_into("<I", d, 28, zlib.crc32(head))
    return bytes(d)


def run_cases(strategy: st.SearchStrategy, examples: int, mutate: Callable[..., bytes]) -> collections.Counter:
    """Run ``examples`` cases of ``mutate(*drawn)`` and count their outcomes."""
    seen: collections.Counter = collections.Counter()

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def case(args):
        seen[outcome(mutate(*args))] += 1

    case()
    print(f"\n{mutate.__name__}: {sum(seen.values())} cases: {dict(sorted(seen.items()))}")
    assert sum(seen.values()) >= examples * 0.95
    return seen


_base = st.integers(0, len(BASES) - 1)
_value = st.one_of(st.sampled_from(INTERESTING), st.integers(0, 2**64 - 1), st.integers(-300, 300))


# ------------------------------------------------------------------------------- byte flips


def flip_bytes(b: int, flips: list[tuple[int, int]], refresh: bool) -> bytes:
    d = bytearray(BASES[b])
    for pos, mask in flips:
        d[pos % len(d)] ^= mask
    return refresh_checksums(bytes(d)) if refresh else bytes(d)


def test_fuzz_byte_flips():
    flips = st.lists(st.tuples(st.integers(0, 2**16), st.integers(1, 255)), min_size=1, max_size=8)
    seen = run_cases(st.tuples(_base, flips, st.booleans()), 3000, flip_bytes)
    assert seen["header"] and seen["section table entry"] and seen["IO_SIGNATURE section"]


# --------------------------------------------------------------- truncations, inserts, splices


def cut_and_splice(b: int, op: str, a: int, c: int, extra: bytes, refresh: bool) -> bytes:
    d = BASES[b]
    a, c = sorted((a % (len(d) + 1), c % (len(d) + 1)))
    other = BASES[(b + 1) % len(BASES)]
    if op == "truncate":
        out = d[:a]
    elif op == "insert":
        out = d[:a] + extra + d[a:]
    elif op == "delete":
        out = d[:a] + d[c:]
    elif op == "duplicate":
        out = d[:c] + d[a:c] + d[c:]
    elif op == "splice":  # this container's head, another's tail
        out = d[:a] + other[c % len(other) :]
    else:  # overwrite
        out = d[:a] + extra + d[a + len(extra) :]
    return refresh_checksums(out) if refresh else out


def test_fuzz_truncate_insert_splice():
    ops = st.sampled_from(["truncate", "insert", "delete", "duplicate", "splice", "overwrite"])
    pos = st.integers(0, 2**16)
    args = st.tuples(_base, ops, pos, pos, st.binary(min_size=1, max_size=24), st.booleans())
    seen = run_cases(args, 3000, cut_and_splice)
    assert seen["header"] and seen["section table entry"]


# ---------------------------------------------------------------------- section table rewrites

_ENTRY_FIELDS = {"kind": (0, "<H"), "flags": (2, "<H"), "crc": (4, "<I"), "offset": (8, "<Q"), "length": (16, "<Q")}


def rewrite_table(b: int, rewrites: list[tuple[int, str, int, bool]], refresh_payload: bool) -> bytes:
    d = bytearray(BASES[b])
    header_size, count = _u32(d, 24), _u32(d, 32)
    for i, name, value, relative in rewrites:
        delta, fmt = _ENTRY_FIELDS[name]
        at = header_size + 24 * (i % count) + delta
        old = struct.unpack_from(fmt, d, at)[0]
        bits = struct.calcsize(fmt) * 8
        struct.pack_into(fmt, d, at, (old + value if relative else value) % 2**bits)
    if refresh_payload:
        return refresh_checksums(bytes(d))
    struct.pack_into("<I", d, 36, zlib.crc32(d[header_size : header_size + 24 * count]))
    return refresh_checksums(bytes(d)[:header_size]) + bytes(d[header_size:])


def test_fuzz_section_table_rewrites():
    one = st.tuples(st.integers(0, 15), st.sampled_from(sorted(_ENTRY_FIELDS)), _value, st.booleans())
    args = st.tuples(_base, st.lists(one, min_size=1, max_size=3), st.booleans())
    seen = run_cases(args, 2500, rewrite_table)
    assert seen["section table entry"] > 1500
    assert sum(n for w, n in seen.items() if w.endswith(" section")) >= 10  # table fine, payload not


# ---------------------------------------------------------------------------- header rewrites

_HEADER_FIELDS = {
    "major": (8, "<H"),
    "minor": (10, "<H"),
    "flags": (12, "<I"),
    "file_size": (16, "<Q"),
    "header_size": (24, "<I"),
    "section_count": (32, "<I"),
    "name_length": (40, "<H"),
    "reserved": (42, "<H"),
    "fingerprint": (44, "<Q"),
}


def rewrite_header(b: int, rewrites: list[tuple[str, int, bool]]) -> bytes:
    d = bytearray(BASES[b])
    for name, value, relative in rewrites:
        at, fmt = _HEADER_FIELDS[name]
        old = struct.unpack_from(fmt, d, at)[0]
        struct.pack_into(fmt, d, at, (old + value if relative else value) % 2 ** (struct.calcsize(fmt) * 8))
    return refresh_checksums(bytes(d))


def test_fuzz_header_rewrites():
    one = st.tuples(st.sampled_from(sorted(_HEADER_FIELDS)), _value, st.booleans())
    seen = run_cases(st.tuples(_base, st.lists(one, min_size=1, max_size=3)), 1500, rewrite_header)
    assert seen["header"] > 750 and seen["loaded"]


# ------------------------------------------------------------------ payload mutations (deep)


def mutate_payload(b: int, which: int, op: str, pos: int, value: int, extra: bytes) -> bytes:
    """Mutate one section payload and reassemble the container with every checksum right."""
    return mutate_section(BASES[b], which, op, pos, value, extra)


def mutate_section(data: bytes, which: int, op: str, pos: int, value: int, extra: bytes) -> bytes:
    """Mutate payload ``which`` of ``data`` (see :func:`mutate_payload`)."""
    c = split_container(data)
    i = which % len(c.sections)
    p = bytearray(c.sections[i].payload)
    at = pos % (len(p) + 1)
    if op == "flip" and p:
        p[at % len(p)] ^= (value % 255) + 1
    elif op in ("u8", "u32", "u64"):
        size = {"u8": 1, "u32": 4, "u64": 8}[op]
        p[at : at + size] = (value % 2 ** (8 * size)).to_bytes(size, "little")
    elif op == "insert":
        p[at:at] = extra
    elif op == "delete":
        del p[at : at + 1 + value % 16]
    elif op == "truncate":
        del p[at:]
    sections = list(c.sections)
    sections[i] = dataclasses.replace(sections[i], payload=bytes(p))
    return assemble(dataclasses.replace(c, sections=tuple(sections)))


_PAYLOAD_OPS = st.sampled_from(["flip", "u8", "u32", "u64", "insert", "delete", "truncate"])
_PAYLOAD_ARGS = (_PAYLOAD_OPS, st.integers(0, 2**12), _value.map(abs), st.binary(min_size=1, max_size=9))


def test_fuzz_payload_mutations():
    args = st.tuples(_base, st.integers(0, 15), *_PAYLOAD_ARGS)
    seen = run_cases(args, 5000, mutate_payload)
    deep = {w for w in seen if w.endswith(" section")}
    assert len(deep) >= 6, deep  # the decoders and checks of most section kinds were reached
    assert seen["loaded"]  # some mutations give another valid container (a changed name, ...)


# ------------------------------------------------------------------- real programs of the ISA


def test_fuzz_real_programs():
    """Mutated containers whose code is a real program, loaded with the ISA's decoder."""
    isa = pytest.importorskip("npuc.isa")
    if not hasattr(isa, "decode_program"):
        pytest.skip("npuc.isa has no decode_program yet")
    from npuc.runtime.npub_example import relu_npub

    base = relu_npub().to_bytes()
    code_first = st.sampled_from([0, 0, 0, 1, 2, 3, 4, 5, 6, 7])  # CODE is section 0

    def mutate_real(which: int, op: str, pos: int, value: int, extra: bytes) -> bytes:
        return mutate_section(base, which, op, pos, value, extra)

    seen: collections.Counter = collections.Counter()

    @settings(max_examples=1500, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(st.tuples(code_first, *_PAYLOAD_ARGS))
    def case(args):
        seen[_outcome_and_npub(mutate_real(*args), None)[0]] += 1

    case()
    print(f"\nreal programs: {sum(seen.values())} cases: {dict(sorted(seen.items()))}")
    assert seen["CODE section"] > 300 and seen["loaded"]


def test_fuzz_real_programs_run_on_the_simulator():
    """Mutated relu containers: refused, or loaded and run; unchanged code gives relu exactly."""
    pytest.importorskip("npuc.runtime.sim")
    import numpy as np

    from npuc.isa import decode_program
    from npuc.runtime.npub_example import relu_npub
    from npuc.runtime.sim import simulate
    from npuc.targets import load_target

    target = load_target("npu-mid")
    original = relu_npub(target.name, target.fingerprint())
    base = original.to_bytes()
    seen: collections.Counter = collections.Counter()

    def run(n: Npub, x: np.ndarray) -> bytes | None:
        dram = np.zeros(n.memory_plan.dram_arena_size, np.uint8)
        xin = n.io_signature.inputs[0]
        dram[xin.dram_offset : xin.dram_offset + 16] = x.view(np.uint8)
        with watchdog(WATCHDOG_S):
            try:
                result = simulate(decode_program(n.code_segments[0]), target, dram)
            except NpucError:
                return None
        y = n.io_signature.outputs[0]
        return result.dram[y.dram_offset : y.dram_offset + y.type.nbytes]

    @settings(max_examples=1000, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(st.tuples(st.sampled_from([0, 0, 0, 0, 2, 3, 5, 6]), *_PAYLOAD_ARGS), st.binary(min_size=16, max_size=16))
    def case(args, raw_x):
        data = mutate_section(base, *args)
        where, n = _outcome_and_npub(data, None, target)
        if n is None or len(n.io_signature.inputs) != 1 or not n.segments:
            seen[where] += 1
            return
        if n.memory_plan.dram_arena_size > MAX_SIMULATED_ARENA:
            seen["loaded, arena too large to simulate here"] += 1
            return
        x = np.frombuffer(raw_x, np.int8)
        y = run(n, x)
        same = (n.code_segments, n.io_signature, n.memory_plan.dram_arena_size) == (
            original.code_segments, original.io_signature, original.memory_plan.dram_arena_size)
        if same:
            assert y == np.maximum(x, 0).astype(np.int8).tobytes(), "an intact program gave a wrong result"
        seen["ran, intact" if same else ("ran, changed" if y is not None else "refused by the simulator")] += 1

    case()
    print(f"\nsimulator: {sum(seen.values())} cases: {dict(sorted(seen.items()))}")
    assert seen["ran, intact"] and seen["CODE section"]
