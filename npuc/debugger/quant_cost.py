"""What quantizing each layer alone costs: the model's output SQNR with that one layer in int8.

For a quantized op of the int8 graph whose result is a value of the float model, its float
inputs are quantized with the int8 graph's parameters, the op is evaluated in integers (its
integer reference, with the int8 graph's weights), the result dequantized back into the float
model, and the float model runs on to its outputs.  The lower the SQNR, the more that layer costs.
Grouped by float op, the noise (10^(-SQNR/10)) gives each op kind's share.  ``float_ops``
(QuantOptions.float_ops) keeps whole op kinds in float, and in an int8 model those run on the CPU,
so the suggestion is the op kinds with the largest noise shares (at least :data:`MIN_SHARE` each)
among those that do at most :data:`MAX_MAC_SHARE` of the model's MACs; when the noise is in the
op that does the model's work (a CNN's convolutions), there is no such suggestion and the layers
that cost most are the ones to look at.
"""

from __future__ import annotations

import math

import torch

from npuc.debugger.metrics import compare
from npuc.interp import interpret_from
from npuc.ir.opdef import get_op
from npuc.quant.arith import dequantize_tensor, quantize_tensor

_ACTIVATIONS = ("relu", "clamp", "hardtanh")
MIN_SHARE = 0.1       # an op kind worth keeping in float holds at least this share of the noise
MAX_MAC_SHARE = 0.5   # and does at most this share of the MACs (more would move the model to the CPU)


def float_name_map(gf, gq) -> dict[str, str]:
    """Per int8 value name, the float value it stands for: the graph inputs by position, a value
    named after a module by the float value of that name, or the activation that follows it alone
    (the quantizer fuses relu/clamp into their producer)."""
    users: dict[str, list] = {}
    shapes = {v.name: v.type.shape for n in gq.nodes for v in n.outputs}
    for n in gf.nodes:
        for v in n.inputs:
            users.setdefault(v.name, []).append(n)
    out = {}
    for n in gf.nodes:
        for v in n.outputs:
            name = v.name
            if name.isdigit():  # a numbered value: its number means nothing in another graph
                continue
            follow = users.get(name, [])
            if len(follow) == 1 and follow[0].op in _ACTIVATIONS:
                name = follow[0].outputs[0].name
            if shapes.get(v.name) == v.type.shape:
                out[v.name] = name
    for qv, fv in zip(gq.inputs, gf.inputs):
        if qv.type.shape == fv.type.shape:
            out[qv.name] = fv.name
    return out


def float_producer_ops(gf) -> dict[str, str]:
    return {v.name: n.op for n in gf.nodes for v in n.outputs}


class _Operands:
    """The int8 operands of a quantized op built from the float model's values: a value the float
    model has, quantized with the int8 graph's parameters; a constant as the int8 graph has it; a
    value of a data-movement op (reshape, permute, ...) rebuilt from its own operands."""

    def __init__(self, gq, qvals: dict, fvals: dict, fmap: dict) -> None:
        self.producer = {v.name: n for n in gq.nodes for v in n.outputs}
        self.inputs = {v.name: i for i, v in enumerate(gq.inputs)}
        self.qvals, self.fvals, self.fmap = qvals, fvals, fmap

    def get(self, v, depth: int = 0):
        node = self.producer.get(v.name)
        if node is not None and node.op == "const":
            return self.qvals[v.name]
        q = v.type.quant
        src = self.fmap.get(v.name)
        if src in self.fvals and q is not None and q.axis is None and len(q.scale) == 1:
            return quantize_tensor(self.fvals[src].float(), q.scale[0], q.zero_point[0])
        if node is None or node.op.startswith("q") or depth > 8:
            return None
        args = [self.get(x, depth + 1) for x in node.inputs]
        if any(a is None for a in args):
            return None
        with torch.no_grad():
            return get_op(node.op).evaluate(args, [x.type for x in node.inputs], node.attrs)[0]


def quantized_alone(gq, gf, qvals: dict, fvals: dict, fouts: list) -> dict[str, tuple[float, str, int]]:
    """Per int8 value name: (output SQNR in dB with only its op quantized, the float op kind, its MACs)."""
    from npuc.lower.rules_int8 import quant_macs

    fmap = float_name_map(gf, gq)
    kinds = float_producer_ops(gf)
    index = {v.name: i for i, n in enumerate(gf.nodes) for v in n.outputs}
    operands = _Operands(gq, qvals, fvals, fmap)
    out: dict[str, tuple[float, str]] = {}
    for node in gq.nodes:
        if not node.op.startswith("q") or node.op == "quantize":
            continue
        v = node.outputs[0]
        target = fmap.get(v.name)
        q = v.type.quant
        if target is None or target not in index or q is None or q.axis is not None:
            continue
        args = [operands.get(x) for x in node.inputs]
        if any(a is None for a in args):
            continue
        with torch.no_grad():
            (y,) = get_op(node.op).evaluate(args, [x.type for x in node.inputs], node.attrs)
        values = dict(fvals)
        values[target] = dequantize_tensor(y, q.scale[0], q.zero_point[0]).reshape(fvals[target].shape)
        outs = interpret_from(gf, values, index[target] + 1)
        noise = 0.0
        for o, r in zip(outs, fouts):
            s = compare(o.float().numpy(), r.float().numpy())[2]
            noise += 0.0 if s == math.inf else (math.inf if s == -math.inf else 10 ** (-s / 10))
        sqnr = math.inf if noise == 0 else (-math.inf if math.isinf(noise) else 10 * math.log10(1 / noise))
        out[v.name] = (sqnr, kinds.get(v.name, node.op), quant_macs(node))
    return out


def noise_shares(alone: dict[str, tuple[float, str, int]]) -> list[tuple[str, int, float, float]]:
    """(float op, layers, share of the summed noise, share of the MACs) per op kind, largest noise first."""
    noise: dict[str, list[float]] = {}
    macs: dict[str, int] = {}
    for sqnr, kind, n in alone.values():
        noise.setdefault(kind, []).append(0.0 if sqnr == math.inf else 10 ** (-sqnr / 10))
        macs[kind] = macs.get(kind, 0) + n
    total = sum(sum(v) for v in noise.values())
    all_macs = sum(macs.values())
    rows = [(k, len(v), (sum(v) / total) if total else 0.0, macs[k] / all_macs if all_macs else 0.0)
            for k, v in noise.items()]
    return sorted(rows, key=lambda r: (-r[2], r[0]))


def suggest_float_ops(shares: list[tuple[str, int, float, float]], limit: int = 3, cover: float = 0.5) -> tuple[str, ...]:
    """The op kinds to keep in float (module docstring), until they cover ``cover`` of the noise."""
    out, acc = [], 0.0
    for kind, _, share, mac_share in shares:
        if acc >= cover or len(out) == limit or share < MIN_SHARE:
            break
        if mac_share <= MAX_MAC_SHARE:
            out.append(kind)
            acc += share
    return tuple(out)
