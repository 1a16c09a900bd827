"""The numerical debugger: where a compiled model departs from its reference, value by value.

::

    rep = npuc.debug(model, example_inputs, target="npu-mid")            # fp16 on the NPU
    rep = npuc.debug(model, example_inputs, quantize="int8", calibration=samples)
    rep.first_divergent          # the first LayerRecord out of tolerance, or None
    for r in rep.layers: print(r.name, r.op, r.rel_l2, r.max_abs, r.sqnr_db, r.within_tolerance, r.loc)

The model is compiled and run on the simulator once; every value an NPU kernel computes is read
from the simulated DRAM the moment its kernel finishes (npuc.debugger.capture) and compared, in model
order, with the reference: npuc's fp32 interpreter of the same graph for a float model (within
tolerance: relative L2 error at most :data:`FLOAT_TOLERANCE` and every element finite), npuc's
integer reference for int8 (within tolerance: bit-exact), and for int8 also the float model (the
quantization error, reported as SQNR), with the cost of each layer quantized alone and the
``float_ops`` that would recover most accuracy (npuc.debugger.quant_cost).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from npuc.debugger.capture import Capture
from npuc.debugger.metrics import compare
from npuc.debugger.report import DebugReport, LayerRecord

__all__ = ["FLOAT_TOLERANCE", "DebugReport", "LayerRecord", "debug"]

# The largest relative L2 error of an fp16 value against fp32 that counts as rounding (the fp16
# output tolerance of npuc.report.accuracy, applied to every value).
FLOAT_TOLERANCE = 1e-2


def debug(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor] | torch.Tensor, target=None,
          quantize: str | None = None, *, calibration=None, name: str | None = None,
          quantize_cost: bool = True) -> DebugReport:
    """Compile ``model`` for ``target`` (``quantize="int8"``: calibrated on ``calibration``, as
    ``npuc.compile``), run it on ``example_inputs`` and compare every value the NPU computes with
    its reference (module docstring).  ``quantize_cost=False`` skips the per-layer cost of
    quantization (one replay of the float model per layer)."""
    from npuc.artifact import compile_graph, quantized_graph, resolve_target
    from npuc.errors import NpucError
    from npuc.pipeline import import_model, run_graph_passes

    if quantize not in (None, "int8"):
        raise NpucError(f"quantize must be None or 'int8', got {quantize!r}")
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    tgt = resolve_target(target)
    label = name or type(model).__name__
    gf = import_model(model, inputs, name=label)
    if quantize is None:
        art = compile_graph(gf, tgt)
        return _float_report(art, gf, inputs, label)
    gq = run_graph_passes(quantized_graph(model, inputs, tgt, calibration, label))
    art = compile_graph(gq, tgt, quantize="int8")
    return _int8_report(art, gq, gf, inputs, label, quantize_cost)


def _run_captured(art, graph_values: dict, inputs: tuple):
    """Run ``art`` on ``inputs`` capturing every kernel value; (outputs, captured values)."""
    cap = Capture(art.compiled, lambda v: graph_values[v].numel() if v in graph_values else -1)
    outs = art.run(*inputs, observe=cap)
    return outs, cap.values


def _layer_facts(art, kv) -> dict:
    lk = kv.kernel
    seg = next(s.name for s in art.npub.segments if s.kind.name == "NPU" and s.index == kv.program)
    return {"name": lk.name, "value": kv.value, "op": "+".join(lk.ops), "kind": lk.kernel.kind, "segment": seg,
            "loc": lk.loc or ""}


def _not_compared(index: int, facts: dict, shape, reference: str, note: str) -> LayerRecord:
    return LayerRecord(index, **facts, shape=tuple(shape), reference=reference, rel_l2=float("nan"),
                       max_abs=float("nan"), sqnr_db=float("nan"), within_tolerance=True, compared=False, note=note)


def _layer_records(art, captured, ref: dict, ref_name: str, record) -> tuple[LayerRecord, ...]:
    """One record per captured kernel value: compared against ``ref`` by ``record(i, facts, kv, r, rel, mx,
    sqnr)``, or marked not compared when no kernel writes the value whole."""
    layers = []
    for i, kv in enumerate(captured):
        facts = _layer_facts(art, kv)
        r = ref.get(kv.value)
        if kv.data is None or r is None:
            layers.append(_not_compared(i, facts, r.shape if r is not None else (), ref_name,
                                        "no kernel writes this value whole"))
            continue
        layers.append(record(i, facts, kv, r, *compare(kv.data, r.numpy())))
    return tuple(layers)


def _float_report(art, g, inputs: tuple, label: str) -> DebugReport:
    from npuc.interp import interpret_all

    ref = interpret_all(g, *inputs)
    outs, captured = _run_captured(art, ref, inputs)
    ref_name = "fp32 interpreter"

    def record(i, facts, kv, r, rel, mx, sqnr):
        ok = rel <= FLOAT_TOLERANCE and bool(np.isfinite(kv.data).all())
        return LayerRecord(i, **facts, shape=tuple(r.shape), reference=ref_name, rel_l2=rel, max_abs=mx,
                           sqnr_db=sqnr, within_tolerance=ok)

    layers = _layer_records(art, captured, ref, ref_name, record)
    expected = [ref[v.name] for v in g.outputs]
    return DebugReport(label, art.target.name, None, f"relative L2 <= {FLOAT_TOLERANCE:g}, all finite (fp16 vs fp32)",
                       layers, tuple(compare(o.numpy(), e.numpy()) for o, e in zip(outs, expected)))


def _int8_report(art, gq, gf, inputs: tuple, label: str, quantize_cost: bool) -> DebugReport:
    from npuc.debugger.quant_cost import float_name_map, noise_shares, quantized_alone, suggest_float_ops
    from npuc.interp import interpret_all
    from npuc.lower.precision import choose_precision
    from npuc.quant.arith import dequantize_tensor
    from npuc.runtime.executor import host_to_stored

    from npuc.lower.io_quant import absorb_io_quantization

    choose_precision(art.target, "int8")  # refuses a target without int8, as the compile did
    gio = absorb_io_quantization(gq)  # the edge quantize/dequantize left to the runtime
    stored = tuple(host_to_stored(v.type, x) for v, x in zip(gio.inputs, inputs))
    qref = interpret_all(gio, *stored)
    fref = interpret_all(gf, *inputs)
    fmap = float_name_map(gf, gio)
    types = {v.name: v.type for n in gio.nodes for v in n.outputs}
    outs, captured = _run_captured(art, qref, inputs)
    fouts = [fref[v.name] for v in gf.outputs]
    alone = quantized_alone(gio, gf, qref, fref, fouts) if quantize_cost else {}
    ref_name = "integer reference"

    def record(i, facts, kv, r, rel, mx, sqnr):
        frel = fsqnr = None
        q = types[kv.value].quant if kv.value in types else None
        fname = fmap.get(kv.value)
        if q is not None and q.axis is None and fname in fref and fref[fname].numel() == kv.data.size:
            deq = dequantize_tensor(torch.from_numpy(kv.data.astype(np.int32)), q.scale[0], q.zero_point[0])
            frel, _, fsqnr = compare(deq.numpy(), fref[fname].numpy())
        cost = alone.get(kv.value)
        return LayerRecord(i, **facts, shape=tuple(r.shape), reference=ref_name, rel_l2=rel, max_abs=mx,
                           sqnr_db=sqnr, within_tolerance=mx == 0, float_rel_l2=frel, float_sqnr_db=fsqnr,
                           alone_sqnr_db=None if cost is None else cost[0])

    layers = _layer_records(art, captured, qref, ref_name, record)
    qouts = [qref[v.name] for v in gio.outputs]
    shares = noise_shares(alone)
    stored_outs = [host_to_stored(v.type, o) for v, o in zip(gio.outputs, outs)]  # the int8 the NPU wrote
    return DebugReport(
        label, art.target.name, "int8", "bit-exact against the integer reference", layers,
        tuple(compare(o.numpy(), e.numpy()) for o, e in zip(stored_outs, qouts)),
        tuple(compare(o.numpy(), e.numpy()) for o, e in zip(outs, fouts)),
        tuple(shares), suggest_float_ops(shares),
    )
