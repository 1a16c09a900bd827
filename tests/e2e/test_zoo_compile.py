"""Every zoo model compiled for every target preset and run on the simulator, against PyTorch.

On targets with fp16 the outputs must be within fp16 tolerance of PyTorch eager fp32: relative L2
error <= max(1e-2, 3 x the error of PyTorch's own fp16 run, ``model.half()`` on the same inputs),
and the same top-1 class wherever PyTorch's fp16 run keeps it (npuc.report.accuracy).  The CNNs
of the zoo run with no CPU segment.  On npu-small (no fp16) a float model runs on the CPU, as
long as its fp32 weights fit the target's DRAM (ViT-B/16's do not: a CompileError says so).

The Perfetto trace of each run is checked: no two slices of a track overlap without nesting.
Each model is imported once and its references computed once; compile and run times and the CPU
fallbacks are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import functools
import time

import pytest

from npuc.artifact import compile_graph
from npuc.errors import CompileError
from npuc.lower.precision import NO_FP16_REASON
from npuc.pipeline import import_model
from npuc.report.accuracy import check_output, eager_outputs
from npuc.report.trace import profile_trace
from npuc.targets import list_presets, load_target
from npuc.zoo import load_model, zoo_names
from tests.report.tracecheck import partial_overlaps

pytestmark = pytest.mark.zoo

CNNS = {name for name in zoo_names() if name.startswith("torchvision:") and "vit" not in name}
# The Ethos-U-like systems are int8-only NPUs whose float runs would all be CPU runs: their zoo
# runs are int8 (tests/e2e/test_zoo_int8.py).
FLOAT_PRESETS = [p for p in list_presets() if p not in ("u55-like-256", "u65-like-256")]


@functools.lru_cache(maxsize=1)
def prepared(name: str):
    """The imported graph, example inputs and eager fp32/fp16 outputs of one zoo model."""
    model, inputs = load_model(name)
    g = import_model(model, inputs, name=name)
    return g, inputs, eager_outputs(model, inputs), eager_outputs(model, inputs, half=True)


@pytest.mark.parametrize("preset", FLOAT_PRESETS)
@pytest.mark.parametrize("name", zoo_names())
def test_zoo_model_compiles_and_runs_on_the_simulator(name, preset):
    g, inputs, ref, ref16 = prepared(name)
    target = load_target(preset)
    weights = sum(t.numel() * t.element_size() for t in g.constants.values())
    if not target.has_fp16 and weights > target.dram.size_bytes:
        # run on the CPU, the fp32 weights still live in the target's DRAM: too big is an error
        with pytest.raises(CompileError, match=rf"needs [\d,]+ bytes of DRAM .* target '{preset}' has"):
            compile_graph(g, target)
        print(f"\n{name} on {preset}: {weights:,} bytes of fp32 weights do not fit {target.dram.size_bytes:,} bytes of DRAM")
        return
    start = time.perf_counter()
    art = compile_graph(g, target)
    compiled = time.perf_counter()
    outs, prof = art.run_profiled(*inputs)
    ran = time.perf_counter()
    bad = partial_overlaps(profile_trace(prof, counters=False))  # the trace of this very run: slices nest on every track
    assert not bad, f"{len(bad)} slices of {name}'s trace overlap without nesting, e.g. {bad[:3]}"
    cpu = art.report.cpu_ops
    print(f"\n{name} on {preset}: compile {compiled - start:.1f} s, run {ran - compiled:.1f} s, "
          f"{art.report.kernels} kernels, {len(cpu)} CPU ops")
    by_reason: dict[str, list[str]] = {}
    for op in cpu:
        by_reason.setdefault(op.reason, []).append(f"%{op.value} {op.op}")
    for reason, ops in by_reason.items():
        shown = ", ".join(ops[:8]) + (f" and {len(ops) - 8} more" if len(ops) > 8 else "")
        print(f"  cpu ({len(ops)}): {reason}: {shown}")
    assert len(outs) == len(ref)
    if not target.has_fp16:
        assert {op.reason for op in cpu} == {NO_FP16_REASON}
        for o, r in zip(outs, ref):
            assert o.shape == r.shape and float((o - r).abs().max()) <= 1e-4 * max(1.0, float(r.abs().max()))
        return
    for i, (o, r, r16) in enumerate(zip(outs, ref, ref16)):
        c = check_output(o, r, r16)
        print(f"  output {i}: rel L2 {c.rel_error:.2e} (PyTorch fp16 {c.fp16_rel_error:.2e}, tolerance "
              f"{c.tolerance:.2e}), same top-1: {c.argmax_same}")
        assert c.rel_error <= c.tolerance, f"output {i} of {name}: {c}"
        assert c.argmax_same is not False, f"output {i} of {name}: top-1 differs from PyTorch"
    if name in CNNS:
        assert art.cpu_segments == 0 and not cpu, [f"{o.op}: {o.reason}" for o in cpu]
        beaten = [(la.name, la.span_cycles, la.lower_bound_cycles) for la in prof.layers if la.span_cycles < la.lower_bound_cycles]
        assert not beaten, f"layers of {name} on {preset} beat their lower bound: {beaten[:5]}"
        assert prof.lower_bound_cycles <= prof.total_cycles
