"""Evaluating one design: the analytical screen and the simulator, each a plain dict of figures.

Both tiers take the sweep's optimized graph (imported once) and the design's target:

* ``screen`` partitions, fuses and plans every kernel (the tiling search and its cost model,
  npuc.schedule) without emitting code: latency from the plans' estimated cycles (CPU segments
  from the CPU cost model), DRAM bytes as the kernels' compulsory traffic, energy as the MACs and
  that traffic times the energy table plus static power over the estimated time;
* ``simulate`` compiles the graph for the target (``npuc.compile_graph``, the same backend
  ``npuc.compile`` runs) and profiles the binary on the simulator: the figures ``npuc profile``
  prints, with each layer's cycles, energy and the resource that bounds it.

A design that cannot be compiled (a layer does not fit, the arena exceeds DRAM) is a result with
``feasible: False`` and the compiler's reason.  Results are JSON-ready dicts so that they cache
and travel between processes as they are.
"""

from __future__ import annotations

from typing import Any

from npuc.errors import NpucError

SCREEN = "analytical"
SIMULATE = "simulated"


def infeasible(tier: str, reason: str) -> dict:
    return {"tier": tier, "feasible": False, "reason": reason}


def screen(graph, target, quantize: str | None) -> dict:
    """The analytical tier: plans only, no code, no simulation."""
    from npuc.codegen.driver import plan_kernel
    from npuc.lower.cpu_cost import HOST_POWER_W
    from npuc.lower.fusion import fuse
    from npuc.lower.partition import partition
    from npuc.lower.precision import choose_precision
    from npuc.kir.program import NpuSegment

    try:
        precision = choose_precision(target, quantize)
        lowered = fuse(partition(graph, target, precision))
        cycles = 0
        cpu_s = 0.0
        dyn_pj = 0.0
        dram = 0
        e = target.energy
        mac_pj = e.mac_int8_pj if quantize == "int8" else e.mac_fp16_pj
        act = target.activation_memory
        byte_pj = (act.read_pj_per_byte + act.write_pj_per_byte) / 2
        for seg in lowered.segments:
            if not isinstance(seg, NpuSegment):
                cpu_s += seg.seconds
                continue
            for lk in seg.kernels:
                cycles += plan_kernel(lk, target).est_cycles
                traffic = lk.min_bytes()
                dram += traffic
                dyn_pj += lk.macs * mac_pj + traffic * byte_pj
    except NpucError as err:
        return infeasible(SCREEN, str(err))
    npu_s = cycles / target.clock_hz
    energy_pj = dyn_pj + target.static_energy_pj(cycles) + cpu_s * HOST_POWER_W * 1e12
    return {
        "tier": SCREEN, "feasible": True, "reason": "",
        "cycles": cycles + round(cpu_s * target.clock_hz), "latency_s": npu_s + cpu_s,
        "energy_j": energy_pj * 1e-12, "dram_bytes": dram,
    }


def simulate(graph, target, quantize: str | None) -> dict:
    """The simulator tier: compile, then profile on the timing simulator."""
    from npuc.artifact import compile_graph, zero_inputs

    try:
        art = compile_graph(graph, target=target, quantize=quantize, verify_each=False)
        prof = art.profile(*zero_inputs(art))
    except NpucError as err:
        return infeasible(SIMULATE, str(err))
    layers = layer_rows(prof, art)
    return {
        "tier": SIMULATE, "feasible": True, "reason": "",
        "cycles": prof.total_cycles, "latency_s": prof.latency_s, "energy_j": prof.energy_per_inference_j,
        "dram_bytes": prof.dram_bytes, "macs": prof.macs, "utilization": prof.utilization,
        "layers": layers,
    }


# Resources a layer can be bound by, and the time (cycles) each needs for the layer's work.
RESOURCES = ("array", "dram", "scratchpad", "vector")


def resource_cycles(actions, target) -> dict[str, float]:
    """Cycles each resource needs for ``actions`` at its peak rate (the layer's lower bounds)."""
    return {
        "array": actions.macs / target.peak_macs_per_cycle,
        "dram": (actions.dram_read + actions.dram_write) / target.dma.bytes_per_cycle,
        "scratchpad": (actions.spad_read + actions.spad_write) / target.spad_bytes_per_cycle,
        "vector": actions.vector_lane_ops / target.vector.lanes,
    }


def actions_by_layer(prof, programs) -> dict[tuple[str, str], Any]:
    """The summed actions of each NPU layer of a profile, by (segment name, layer name)."""
    from npuc.report import profile as profile_mod

    # npuc.report.profile's per-instruction actions (public as instruction_actions once issue 11 lands).
    per_instruction = getattr(profile_mod, "instruction_actions", None) or profile_mod._instruction_actions
    out: dict[tuple[str, str], Any] = {}
    npu_runs = [r for r in prof.runs if r.kind != "cpu"]
    for r, labels in zip(npu_runs, prof.labels):
        for lab, a in zip(labels, per_instruction(programs[r.index], prof.target)):
            key = (r.name, lab or "(program)")
            out[key] = out[key] + a if key in out else a
    return out


def layer_rows(prof, art) -> list[dict[str, Any]]:
    """Per layer: name, op, kind, cycles, energy, MACs, DRAM bytes, each resource's busy share and
    the resource that bounds it (the one whose peak-rate time is largest; "host" on the CPU)."""
    acts = actions_by_layer(prof, art._executor.programs)
    rows = []
    for layer in prof.layers:
        row = {"name": layer.name, "op": layer.op, "kind": layer.kind, "cycles": layer.cycles,
               "energy_pj": layer.energy_pj, "macs": layer.macs, "dram_bytes": layer.dram_bytes}
        a = acts.get((layer.segment, layer.name))
        if layer.kind == "cpu" or a is None:
            row.update({f"{r}_share": 0.0 for r in RESOURCES}, bound="host" if layer.kind == "cpu" else "")
        else:
            need = resource_cycles(a, art.target)
            row.update({f"{r}_share": (need[r] / layer.cycles if layer.cycles else 0.0) for r in RESOURCES})
            row["bound"] = max(RESOURCES, key=lambda r: (need[r], -RESOURCES.index(r)))
        rows.append(row)
    return rows
