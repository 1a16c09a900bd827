"""IO quantization: the ``quantize`` of a model input and the ``dequantize`` of a model output
move out of the graph into the runtime's edges.

A quantized graph takes float inputs and quantizes them first; it dequantizes its int8 results
last.  Compiled for the NPU, those two steps are the runtime's: the binary's IO signature says
each edge tensor is int8 with its scale and zero point, ``art.run`` takes and returns float
tensors and converts them with the ``quantize``/``dequantize`` semantics of
:mod:`npuc.quant.arith` (the ops' own reference), so the whole NPU part is integer and the
outputs are bit for bit the reference interpreter's.

:func:`absorb_io_quantization` makes the graph the NPU sees: an input whose only reader is one
``quantize`` becomes that quantize's int8 result; an output that a ``dequantize`` produces (and
nothing else reads) becomes the dequantize's int8 input.
"""

from __future__ import annotations

from npuc.ir.graph import Graph, Node, Value


def _quantized_input(v: Value, users: dict[Value, list[Node]], outputs: set[Value]) -> Node | None:
    """The single ``quantize`` node that reads graph input ``v``, when it is its only reader
    (and ``v`` is not returned as well: the float input must then stay)."""
    readers = users.get(v, [])
    if len(readers) == 1 and readers[0].op == "quantize" and v.type.dtype.is_float and v not in outputs:
        return readers[0]
    return None


def _dequantized_output(v: Value, producers: dict[Value, Node], users: dict[Value, list[Node]],
                        inputs: set[Value]) -> Node | None:
    """The ``dequantize`` node that produces output ``v`` from a per-tensor int8 value, when
    nothing else reads ``v``."""
    n = producers.get(v)
    if n is None or n.op != "dequantize" or users.get(v):
        return None
    src = n.inputs[0]
    q = src.type.quant
    if q is None or q.axis is not None or len(q.scale) != 1 or src.type.dtype.value != "i8" or src in inputs:
        return None
    return n


def absorb_io_quantization(g: Graph) -> Graph:
    """``g`` with the quantize of each input and the dequantize of each output removed (see the
    module docstring); a graph without such edges is returned unchanged."""
    users, producers = g.users(), g.producers()
    drop: set[Node] = set()
    inputs = []
    for v in g.inputs:
        q = _quantized_input(v, users, set(g.outputs))
        if q is None:
            inputs.append(v)
        else:
            drop.add(q)
            inputs.append(q.outputs[0])
    outputs = []
    for v in g.outputs:
        d = _dequantized_output(v, producers, users, set(g.inputs))
        if d is None:
            outputs.append(v)
        else:
            drop.add(d)
            outputs.append(d.inputs[0])
    if not drop:
        return g
    nodes = tuple(n for n in g.nodes if n not in drop)
    return Graph(g.name, tuple(inputs), nodes, tuple(outputs), dict(g.constants))
