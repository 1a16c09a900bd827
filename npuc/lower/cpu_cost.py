"""The CPU cost model: what running a node (or a segment) on the host instead of the NPU costs.

A deliberately simple model of a mobile application core running the reference kernels:

* compute: ``HOST_GFLOPS`` = 10 GFLOP/s sustained fp32 (one big core with SIMD); a convolution,
  linear or matmul costs 2 FLOPs per MAC, a transcendental function (exp, log, erf, sin, ...) 10
  FLOPs per element, any other op 1 FLOP per output element;
* data: the values a segment reads from and writes to DRAM move at ``HOST_GBPS`` = 5 GB/s;
* hand-over: ``HANDOFF_S`` = 10 µs per CPU segment (synchronising with the NPU, cache maintenance);
* power: ``HOST_POWER_W`` = 1 W while the host runs a fallback (the energy of a CPU row).

The figures are estimates for a phone-class SoC, stated so that the report can be checked and
changed in one place.
"""

from __future__ import annotations

from npuc.frontend.summary import node_macs
from npuc.ir.graph import Node
from npuc.ir.opdef import Trait, ops_with

HOST_GFLOPS = 10.0
HOST_GBPS = 5.0
HANDOFF_S = 10e-6

_TRANSCENDENTAL = ops_with(Trait.TRANSCENDENTAL)


def node_flops(n: Node) -> int:
    """Floating-point operations of one node on the host (see the module docstring)."""
    macs = node_macs(n)
    if macs:
        return 2 * macs
    out = sum(v.type.numel for v in n.outputs)
    return out * (10 if n.op in _TRANSCENDENTAL else 1)


def node_seconds(n: Node, constants=frozenset()) -> float:
    """A node alone on the host: its FLOPs plus reading its (non-constant) inputs and writing its
    outputs (a gather's table is not read whole: only its output's worth)."""
    moved = sum(v.type.nbytes for v in n.inputs if v not in constants) + sum(v.type.nbytes for v in n.outputs)
    return node_flops(n) / (HOST_GFLOPS * 1e9) + moved / (HOST_GBPS * 1e9)


def segment_seconds(flops: int, transfer_bytes: int) -> float:
    """A CPU segment: its FLOPs, its DRAM inputs and outputs, and one hand-over."""
    return flops / (HOST_GFLOPS * 1e9) + transfer_bytes / (HOST_GBPS * 1e9) + HANDOFF_S

# Power of the host core while it runs a fallback (for the energy column of a profile).
HOST_POWER_W = 1.0
