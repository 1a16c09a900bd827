"""Weight compression end to end: on a target with a weight decoder, weight loads become
DMA_LOAD_DECODE of streams stored in place of the raw weights; the results stay bit-exact, the
off-chip weight bytes drop, the binary (format 4.2) round-trips and its streams are checked."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from npuc.artifact import compile_graph, quantized_graph
from npuc.errors import BinaryFormatError, SimulationError
from npuc.interp import interpret
from npuc.isa.loops import expand
from npuc.pipeline import run_graph_passes
from npuc.runtime.npub import LOOP_EXCEPTION_VERSION, STREAM_BUFFER_VERSION, WEIGHT_STREAMS_VERSION, load_npub
from npuc.targets import load_target
from npuc.targets.loader import target_from_dict


def without_decoder(t):
    doc = t.document()
    doc.pop("weight_decoder")
    doc["name"] = t.name + "-raw"
    return target_from_dict(doc)


@functools.cache
def model_graph(target_name: str):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 32, 1)).eval()
    with torch.no_grad():  # bell-shaped weights, as training leaves them
        for p in m.parameters():
            p.copy_(torch.distributions.Laplace(0.0, 0.01).sample(p.shape))
    x = torch.randn(1, 32, 12, 12)
    tgt = load_target(target_name)
    g = run_graph_passes(quantized_graph(m, (x,), tgt, [torch.randn(1, 32, 12, 12) for _ in range(2)], "wc"))
    return g, x


def ops(art) -> set[str]:
    return {ins.op for prog in art.programs for ins in expand(list(prog))[0]}


@pytest.mark.parametrize("name", ["u55-like-256", "u65-like-256"])
def test_compressed_weights_run_bit_exact_and_move_fewer_bytes(name):
    g, x = model_graph(name)
    tgt = load_target(name)
    art = compile_graph(g, tgt, quantize="int8")
    raw = compile_graph(g, without_decoder(tgt), quantize="int8")
    ws = art.npub.weight_streams
    assert ws is not None and ws.streams and ws.saved_bytes > 0
    assert "DMA_LOAD_DECODE" in ops(art) and "DMA_LOAD_DECODE" not in ops(raw) and raw.npub.weight_streams is None
    assert torch.equal(art.run(x)[0], interpret(g, x)[0])
    p, q = art.profile(x), raw.profile(x)
    weights = tgt.weight_memory.name
    moved = {m["memory"]: m["read_bytes"] for m in p.memory_figures()}
    moved_raw = {m["memory"]: m["read_bytes"] for m in q.memory_figures()}
    assert moved[weights] < moved_raw[weights]
    assert p.dram_bytes < q.dram_bytes
    for layer in p.layers:  # the per-layer bounds read the stored sizes: still bounds
        assert layer.span_cycles >= layer.lower_bound_cycles
    assert p.total_cycles >= p.lower_bound_cycles


def test_binary_is_format_3_2_deterministic_and_loads():
    g, x = model_graph("u55-like-256")
    tgt = load_target("u55-like-256")
    a, b = compile_graph(g, tgt, quantize="int8"), compile_graph(g, tgt, quantize="int8")
    data = a.to_bytes()
    assert data == b.to_bytes()
    # 4.2 for the weight streams, 4.5 where a LOOP also has flag exceptions, 4.6 where loads use
    # the target's stream buffers (each later version includes the earlier ones)
    assert tuple(int.from_bytes(data[i:i + 2], "little") for i in (8, 10)) in (
        WEIGHT_STREAMS_VERSION, LOOP_EXCEPTION_VERSION, STREAM_BUFFER_VERSION)
    n = load_npub(data, expected_target=tgt)
    assert n.weight_streams == a.npub.weight_streams and n.to_bytes() == data


def test_a_corrupted_stream_is_refused_at_load():
    g, _ = model_graph("u55-like-256")
    tgt = load_target("u55-like-256")
    n = compile_graph(g, tgt, quantize="int8").npub
    s = n.weight_streams.streams[0]
    base = next(r.offset for r in n.memory_plan.regions if r.name == "constants")
    blob = bytearray(n.constants)
    blob[s.offset - base + 3] ^= 0x5A
    import dataclasses

    bad = dataclasses.replace(n, constants=bytes(blob))
    with pytest.raises(BinaryFormatError, match="WEIGHT_STREAMS section: stream 0"):
        bad.to_bytes()


def test_decoded_load_on_a_target_without_a_decoder_is_refused():
    from npuc.isa.instr import Instr, Program
    from npuc.runtime.sim import simulate

    tgt = load_target("npu-mid")
    prog = Program((Instr.make("DMA_LOAD_DECODE", dram_addr=0, stream_bytes=2, local_addr=0, n0=4), Instr.make("END")))
    with pytest.raises(SimulationError, match="has no weight decoder"):
        simulate(prog, tgt, dram=bytes([0xFE, 7]) + bytes(62))


def test_decoded_load_decodes_on_the_simulator_and_refuses_a_bad_stream():
    import numpy as np

    from npuc.isa.instr import Instr, Program
    from npuc.isa.weight_codec import encode
    from npuc.runtime.sim import simulate

    tgt = load_target("u65-like-256")
    base = tgt.window_of("dram").base
    data = np.random.default_rng(0).laplace(0, 5, 3 * 40).clip(-127, 127).astype(np.int8).tobytes()
    s = encode(data)
    image = bytearray(base + 4096)
    image[base:base + len(s)] = s
    prog = Program((Instr.make("DMA_LOAD_DECODE", dram_addr=base, stream_bytes=len(s), local_addr=64, n0=40, n1=3, local_s1=48),
                    Instr.make("END")))
    r = simulate(prog, tgt, dram=bytes(image))
    spad = r.spad
    assert all(bytes(spad[64 + 48 * i:64 + 48 * i + 40]) == data[40 * i:40 * i + 40] for i in range(3))
    image[base] = 0x0C
    with pytest.raises(SimulationError, match="does not decode"):
        simulate(prog, tgt, dram=bytes(image))


def test_a_truncated_or_misplaced_weight_streams_section_is_refused():
    import dataclasses

    from npuc.runtime.npub import RawSection, assemble, split_container
    from npuc.runtime.npub_model import SectionKind

    g, _ = model_graph("u55-like-256")
    n = compile_graph(g, load_target("u55-like-256"), quantize="int8").npub
    c = split_container(n.to_bytes())
    cut = tuple(RawSection(s.kind, s.flags, s.payload[:-3]) if s.kind == SectionKind.WEIGHT_STREAMS else s
                for s in c.sections)
    with pytest.raises(BinaryFormatError, match="WEIGHT_STREAMS section"):
        load_npub(assemble(dataclasses.replace(c, sections=cut)))
    with pytest.raises(BinaryFormatError, match="exists from format 4.2"):
        load_npub(assemble(dataclasses.replace(c, version=(4, 1))))


def synthetic(data: bytes, loads, target):
    """A plan with one constant (``data``) at the weights memory's base and a program of loads
    ``(shape, strides, offset)`` of it into the scratchpad, one after another."""
    from types import SimpleNamespace

    from npuc.isa.instr import Instr
    from npuc.kir.program import CONSTANT, Buffer

    base = target.window_of(target.weight_memory.name).base
    placed = (SimpleNamespace(buffer=Buffer("#w", len(data), CONSTANT), offset=base),)
    plan = SimpleNamespace(constants=data, regions=(("constants", "CONSTANTS", base, len(data)),), placed=placed,
                           model=SimpleNamespace(segments=()))
    prog, local = [], 0
    for (n2, n1, n0), (s2, s1, s0), off in loads:
        prog.append(Instr.make("DMA_LOAD", esize=1, dram_addr=base + off, local_addr=local, n0=n0, n1=n1, n2=n2,
                               dram_s0=s0, dram_s1=s1, dram_s2=s2))
        local += n0 * n1 * n2
    return plan, prog + [Instr.make("END")], base


def run_both(data, loads, target):
    from npuc.codegen.weight_compression import compress_weight_loads
    from npuc.isa.instr import Program
    from npuc.runtime.sim import simulate

    plan, prog, base = synthetic(data, loads, target)
    (new,), blob, record = compress_weight_loads([prog], plan, target)
    size = base + len(data) + 64
    before = simulate(Program(tuple(prog)), target, dram=bytes(base) + data + bytes(64))
    after = simulate(Program(tuple(new)), target, dram=bytes(base) + blob + bytes(64))
    assert size == len(before.dram)
    assert after.spad == before.spad  # every load wrote the same bytes
    return new, record, before, after


# (9, 16, 32) weights, tap-major, read as two 16-wide output-channel tiles (16-byte runs) and the
# first tile once more plane by plane
TILES = [((9, 16, 16), (512, 32, 1), 0), ((9, 16, 16), (512, 32, 1), 16)] + [((1, 16, 16), (512, 32, 1), 512 * t)
                                                                              for t in range(9)]


def test_tile_loads_of_incompressible_weights_read_contiguous_runs():
    import numpy as np

    tgt = load_target("u65-like-256")
    data = np.random.default_rng(0).integers(0, 256, 9 * 16 * 32, dtype=np.uint8).tobytes()
    new, record, before, after = run_both(data, TILES, tgt)
    assert {i.op for i in new} == {"DMA_LOAD", "END"} and not record.streams and not record.constants
    assert after.actions.dram_read < before.actions.dram_read / 4   # 16-byte runs in 128-byte bursts: 8x


def test_tile_loads_of_bell_shaped_weights_decode_streams_and_their_planes():
    import numpy as np

    tgt = load_target("u55-like-256")
    data = np.random.default_rng(0).laplace(0, 4, 9 * 16 * 32).clip(-127, 127).astype(np.int8).tobytes()
    new, record, before, after = run_both(data, TILES, tgt)
    assert [i.op for i in new].count("DMA_LOAD_DECODE") == len(TILES)
    assert len(record.streams) == 2 and record.constants[0].stored_bytes < 0.7 * len(data)
    assert after.actions.dram_read < before.actions.dram_read


def test_loads_that_fit_no_stream_leave_the_constant_raw():
    import numpy as np

    tgt = load_target("u55-like-256")
    data = np.random.default_rng(0).integers(0, 256, 9 * 16 * 32, dtype=np.uint8).tobytes()
    overlapping = [((9, 16, 16), (512, 32, 1), 0), ((9, 16, 16), (512, 32, 1), 8), ((9, 16, 16), (512, 32, 1), 16)]
    new, record, before, after = run_both(data, overlapping, tgt)
    assert {i.op for i in new} == {"DMA_LOAD", "END"} and after.actions.dram_read == before.actions.dram_read




# the same two tiles, each loaded in three pieces of three planes one after another (a block
# spread over the steps before its use: npuc.schedule.transfers.weight_plan)
PIECES = [((3, 16, 16), (512, 32, 1), 1536 * k + 16 * tile) for tile in range(2) for k in range(3)]


def test_the_pieces_of_a_block_decode_from_one_stream():
    import numpy as np

    tgt = load_target("u55-like-256")
    data = np.random.default_rng(0).laplace(0, 4, 9 * 16 * 32).clip(-127, 127).astype(np.int8).tobytes()
    new, record, before, after = run_both(data, PIECES, tgt)
    assert [i.op for i in new].count("DMA_LOAD_DECODE") == len(PIECES)
    # one stream a block, of 9 x 16 x 16 bytes, each piece reading its part of it
    assert [s.decoded_bytes for s in record.streams] == [9 * 16 * 16] * 2
    assert after.actions.dram_read < before.actions.dram_read
