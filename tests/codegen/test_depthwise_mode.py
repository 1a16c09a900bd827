"""The array's depthwise mode (``MATMUL_DW``) and the depthwise kernel that uses it.

At the instruction level, ``MATMUL_DW`` must compute what ``LOAD_WEIGHTS`` of the diagonal tile
``diag(w)`` then ``MATMUL`` computes (the same bits, int8 and fp16), in no more cycles, with
only the diagonal MACs counted and only the diagonal weights read, so its energy is lower.  A
misuse is refused with a sentence (no target check passes a diagonal longer than the array's
smaller side; the decoder refuses a bad field), and a binary that holds one needs format 4.4.

At the kernel level, the array schedule of ``depthwise_conv2d`` (stride 1 and 2, 3x3 and 5x5,
channel counts that are no multiple of the array side) must match PyTorch (fp16) and the integer
reference bit for bit (int8), with the cost model's estimate within 10% of the simulator, and
issue no zero tiles: its array MACs are the layer's real MACs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from npuc.codegen.emitter import Emitter
from npuc.codegen.harness import place
from npuc.codegen.kernels.depthwise_on_array import ArrayDepthwisePlan
from npuc.errors import AsmError, BinaryFormatError, NpucError
from npuc.isa import Instr, Program, assemble
from npuc.isa.encoding import decode_program, stream_features, uses_instruction
from npuc.runtime.npub import DEPTHWISE_MODE_VERSION, LOOP_PHASE_VERSION, load_npub, split_container
from npuc.runtime.npub import assemble as assemble_container
from npuc.runtime.npub_example import relu_npub
from npuc.runtime.sim import simulate
from npuc.targets import load_target
from tests.codegen.test_depthwise_choice import IMPL, fp16_case, int8_case, _rel

MID, LARGE, SMALL = (load_target(n) for n in ("npu-mid", "npu-large", "npu-small"))


# ----------------------------------------------------------------- the instruction
def _run(compute: list[tuple[str, dict]], target, x: np.ndarray, w: np.ndarray, dtype):
    """Simulate ``compute`` after loading the taps' weights w (taps x n) to SPAD 0x0, their
    diagonal tiles to 0x400 and the inputs x (rows x n) to 0x2000 (the emitter adds the tokens)."""
    taps, n = w.shape
    diag = np.zeros((taps, n, n), dtype)
    for t in range(taps):
        np.fill_diagonal(diag[t], w[t].astype(dtype))
    parts = [w.astype(dtype).ravel(), diag.ravel(), x.astype(dtype).ravel()]
    img = np.concatenate([p.view(np.uint8) for p in parts] + [np.zeros(64, np.uint8)])
    em, at = Emitter(target), 0
    for local, part in zip((0x0, 0x400, 0x2000), parts):
        em.emit("DMA_LOAD", esize=part.itemsize, dram_addr=at, local_addr=local, n0=part.size)
        at += part.nbytes
    for op, fields in compute:
        em.emit(op, **fields)
    return simulate(em.finish()[0], target, img)


def _acc(res, m: int, n: int, acc_dtype) -> np.ndarray:
    return np.frombuffer(res.acc[: m * n * 4], acc_dtype).reshape(m, n)


@pytest.mark.parametrize("dt,n,m0,m1,taps", [("fp16", 16, 12, 3, 3), ("int8", 16, 40, 1, 2), ("fp16", 5, 7, 2, 1),
                                             ("int8", 11, 9, 4, 4)])
def test_matmul_dw_is_matmul_with_a_diagonal_tile_for_less_energy(dt, n, m0, m1, taps):
    """Taps of one output tile, each shifting the input one row: the same accumulator bits both
    ways, the depthwise mode counting only the diagonal MACs, reading fewer scratchpad bytes,
    spending less energy, in no more cycles (but the one latch of the diagonal before the run,
    where the dense tile's first load hides behind the input transfer)."""
    rng = np.random.default_rng(n + m0)
    m, es = m0 * m1, 1 if dt == "int8" else 2
    if dt == "int8":
        x, w, np_dt, acc_dt = rng.integers(-128, 128, (m + taps, n)), rng.integers(-128, 128, (taps, n)), np.int8, np.int32
    else:
        x, w, np_dt, acc_dt = rng.standard_normal((m + taps, n)), rng.standard_normal((taps, n)), np.float16, np.float32
    rows = dict(m0=m0, m1=m1, out_addr=0)
    dense, mode = [], []
    for t in range(taps):
        dense += [("LOAD_WEIGHTS", dict(dtype=dt, addr=0x400 + t * n * n * es, k=n, n=n)),
                  ("MATMUL", dict(dtype=dt, acc=int(t > 0), k=n, n=n, in_addr=0x2000 + t * n * es, **rows))]
        mode += [("MATMUL_DW", dict(dtype=dt, acc=int(t > 0), n=n, w_addr=t * n * es, in_addr=0x2000 + t * n * es, **rows))]
    rd, rm = _run(dense, MID, x, w, np_dt), _run(mode, MID, x, w, np_dt)
    want = np.zeros((m, n), acc_dt)
    for t in range(taps):  # the accumulator's order: tap by tap
        want += (x[t:t + m].astype(np_dt).astype(np.float64) * w[t].astype(np_dt).astype(np.float64)).astype(acc_dt)
    out_d, out_m = _acc(rd, m, n, acc_dt), _acc(rm, m, n, acc_dt)
    assert np.array_equal(out_m, out_d) and np.array_equal(out_m, want)
    assert rm.actions.macs == taps * m * n and rd.actions.macs == taps * m * n * n
    assert rm.actions.spad_read < rd.actions.spad_read
    assert rm.energy_breakdown_pj["mac_" + dt] * n == pytest.approx(rd.energy_breakdown_pj["mac_" + dt])
    assert rm.energy_pj < rd.energy_pj
    latch = -(-n * es // MID.spad_bytes_per_cycle)  # the diagonal's one latch before a run (docs/isa.md)
    assert rm.total_cycles <= rd.total_cycles + latch


def test_matmul_dw_accumulates_and_pipelines_without_a_race():
    """Taps accumulate into one tile; back-to-back MATMUL_DWs overlap their drains (no race)."""
    n, m = 16, 32
    prog = [Instr.make("MATMUL_DW", dtype="int8", acc=int(t > 0), n=n, w_addr=t * n, in_addr=0x1000 + t * n,
                       m0=m, in_s0=2 * n, out_addr=0) for t in range(2)] + [Instr.make("END")]
    res = simulate(prog, MID)
    starts = [e.start for e in res.trace_events if e.op == "MATMUL_DW"]
    ends = [e.end for e in res.trace_events if e.op == "MATMUL_DW"]
    assert starts[1] < ends[0]  # the second streams while the first drains


def test_misuse_is_refused_with_a_sentence():
    too_long = Instr.make("MATMUL_DW", dtype="fp16", n=17, w_addr=0, in_addr=0x100, m0=4, out_addr=0)
    with pytest.raises(NpucError, match="diagonal"):
        simulate([too_long, Instr.make("END")], MID)
    fp16 = Instr.make("MATMUL_DW", dtype="fp16", n=4, w_addr=0, in_addr=0x100, m0=4, out_addr=0)
    with pytest.raises(NpucError, match="no fp16 MACs"):
        simulate([fp16, Instr.make("END")], SMALL)
    with pytest.raises(AsmError, match="MATMUL_DW field 'n'"):
        assemble("MATMUL_DW dtype=int8 n=0 w_addr=0 in_addr=0x100 m0=4 out_addr=0\nEND\n")
    with pytest.raises(AsmError, match="int8 or fp16"):
        assemble("MATMUL_DW dtype=int32 n=4 w_addr=0 in_addr=0x100 m0=4 out_addr=0\nEND\n")
    # an encoded MATMUL_DW whose n field is zeroed: the decoder says which field is wrong
    code = bytearray(Program((fp16, Instr.make("END"))).encode())
    bad = bytes(code[:3]) + b"\x00" * 8 + bytes(code[11:])
    with pytest.raises(BinaryFormatError):
        decode_program(bad)


# ----------------------------------------------------------------- the container version
def _npub_with(code: bytes):
    return dataclasses.replace(relu_npub(), code_segments=(code,), debug_map=None)


DW_PROGRAM = "MATMUL_DW dtype=int8 n=16 w_addr=0 in_addr=0x100 m0=4 out_addr=0\nEND\n"


def test_a_binary_with_the_depthwise_mode_is_format_4_4_and_round_trips():
    code = assemble(DW_PROGRAM).encode()
    assert uses_instruction(code, "MATMUL_DW") and stream_features(code) == (False, frozenset({"MATMUL_DW", "END"}))
    data = _npub_with(code).to_bytes()
    assert split_container(data).version == DEPTHWISE_MODE_VERSION == (4, 4)
    assert load_npub(data).to_bytes() == data
    assert not uses_instruction(relu_npub().code_segments[0], "MATMUL_DW")
    assert split_container(relu_npub().to_bytes()).version < LOOP_PHASE_VERSION


@pytest.mark.parametrize("minor", [0, 2, 3])
def test_the_depthwise_mode_under_an_older_version_is_refused(minor):
    c = split_container(_npub_with(assemble(DW_PROGRAM).encode()).to_bytes())
    older = assemble_container(dataclasses.replace(c, version=(4, minor)))
    with pytest.raises(BinaryFormatError, match=r"depthwise mode \(MATMUL_DW\), which exists from format 4.4"):
        load_npub(older)


# ----------------------------------------------------------------- the kernel
def _array_runs(kernel, target, values):
    """(plan, output, simulation result) of every array schedule of ``kernel``."""
    placed, size = place(kernel)
    out = []
    for plan in IMPL.alternatives(placed, target):
        if not isinstance(plan.details.choice, ArrayDepthwisePlan):
            continue
        dram = np.zeros(size, np.uint8)
        for t in placed.tensors():
            if t.name != placed.output.name:
                t.write_numpy(dram, values[t.name])
        em = Emitter(target)
        IMPL.emit(placed, plan, em)
        prog, _ = em.finish()
        res = simulate(prog, target, dram)
        ops = {i.op for i in prog}
        assert "MATMUL_DW" in ops and not ops & {"LOAD_WEIGHTS", "MATMUL"}, plan.summary
        out.append((plan, placed.output.to_numpy(np.frombuffer(res.dram, np.uint8)), res))
    assert out, "no array schedule"
    return out


def _real_macs(kernel) -> int:
    n, c, oh, ow = kernel.output.shape
    kh, kw = kernel.inputs[1].shape[2:]
    return n * c * oh * ow * kh * kw


FP16 = {
    "3x3-s1-37-channels": ((1, 37, 14, 3, 1, 1), MID),
    "3x3-s2-24-channels": ((1, 24, 17, 3, 2, 1), MID),
    "5x5-s2-44-channels": ((1, 44, 13, 5, 2, 2), MID),
    "5x5-s1-70-channels-large": ((1, 70, 9, 5, 1, 2), LARGE),
}


@pytest.mark.parametrize("case", list(FP16))
def test_fp16_array_schedule_matches_pytorch_with_only_real_macs(case):
    args, target = FP16[case]
    kernel, values, ref = fp16_case(*args)
    for plan, out, res in _array_runs(kernel, target, values):
        assert _rel(out, ref) < 3e-3, plan.summary
        assert res.actions.macs == _real_macs(kernel), plan.summary
        assert abs(plan.est_cycles - res.total_cycles) <= 0.10 * res.total_cycles, plan.summary


INT8 = {
    "3x3-s1-21-channels": ((1, 21, 11, 3, 1, 1), MID),
    "3x3-s2-50-channels": ((1, 50, 12, 3, 2, 1), MID),
    "5x5-s1-19-channels": ((1, 19, 9, 5, 1, 2), SMALL),
    "5x5-s2-40-channels": ((2, 40, 11, 5, 2, 2), LARGE),
}


@pytest.mark.parametrize("case", list(INT8))
def test_int8_array_schedule_is_bit_exact_with_only_real_macs(case):
    args, target = INT8[case]
    kernel, values, ref = int8_case(*args)
    for plan, out, res in _array_runs(kernel, target, values):
        assert int((out != ref.reshape(out.shape)).sum()) == 0, plan.summary
        assert res.actions.macs == _real_macs(kernel), plan.summary
        assert abs(plan.est_cycles - res.total_cycles) <= 0.10 * res.total_cycles, plan.summary


def test_int8_bias_and_records_by_channel_group_hide_a_slow_weight_memory():
    """On u55-like-256 (flash read at a byte a cycle) a 7x7 layer of 256 channels: each array
    tiling of several channel groups is also costed with its groups' bias and records loaded with
    each group's first tile (``quant_groups``).  Both are bit exact; the grouped one reads the same
    flash bytes (each group's are a contiguous run: one stream on the target's stream buffers) and
    takes fewer cycles, since the first epilogue waits for its own group's 9 bytes a channel only,
    not every channel's; and the cost model keeps it.  (The kernel alone, placed by the harness:
    the groups' runs fall on whole bursts, so the bytes read are the same even before the stream
    buffers are assigned.)"""
    u55 = load_target("u55-like-256")
    kernel, values, ref = int8_case(1, 256, 7, 3, 1, 1)
    runs = _array_runs(kernel, u55, values)
    for plan, out, res in runs:
        assert int((out != ref.reshape(out.shape)).sum()) == 0, plan.summary
    by = {plan.details.choice: res for plan, _, res in runs}
    pairs = [(p, dataclasses.replace(p, quant_groups=True)) for p in by if not p.quant_groups]
    pairs = [(a, b) for a, b in pairs if b in by]
    assert pairs, "no tiling of several channel groups"
    for alone, grouped in pairs:
        ra, rg = by[alone], by[grouped]
        assert rg.total_cycles < ra.total_cycles, (alone, ra.total_cycles, rg.total_cycles)
        assert sum(rg.actions.memory_read) == sum(ra.actions.memory_read)
    assert IMPL.plan(place(kernel)[0], u55).details.choice.quant_groups
