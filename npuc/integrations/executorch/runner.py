"""Running a ``.pte`` in Python: ExecuTorch's program interpreted instruction by instruction, its
kernel calls by PyTorch's own out-variant ops and its npuc delegates on npuc's simulator.

ExecuTorch's C++ runtime cannot call a backend written in Python, so :class:`PteRunner` reads the
flatbuffer program with ExecuTorch's own deserializer and executes its execution plan: values
(tensors, with constants from the program's constant buffers, ints, doubles, lists), kernel calls
(``aten::convolution.out`` -> ``torch.ops.aten.convolution.out``), delegate calls
(``NpucBackend``: the delegate's ``.npub`` loaded and run with :meth:`npuc.artifact.Artifact.run`),
moves and jumps.  Each tensor gets storage of its own (the program's memory plan is not needed to
compute the values).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch
from executorch.exir import schema
from executorch.exir._serialize._program import deserialize_pte_binary

from npuc.errors import NpucError
from npuc.integrations.executorch.backend import BACKEND_ID

DTYPES = {
    0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64, 5: torch.float16,
    6: torch.float32, 7: torch.float64, 11: torch.bool, 15: torch.bfloat16,
}


class PteError(NpucError):
    """A .pte that this runner cannot execute (the message says what and why)."""


class PteRunner:
    """One method of a ``.pte`` (bytes or a path), ready to run; ``delegates`` are the npuc
    artifacts of its delegate calls, in the program's order."""

    def __init__(self, pte: bytes | str | Path, method: str = "forward") -> None:
        import npuc

        if isinstance(pte, (bytes, bytearray)):
            data, where = bytes(pte), "the program"
        else:
            where = f"'{pte}'"
            try:
                data = Path(pte).read_bytes()
            except OSError as e:
                raise PteError(f"cannot read {where}: {e.strerror}") from None
        try:
            program = deserialize_pte_binary(data).program
        except Exception as e:  # the flatbuffer reader raises struct, value and index errors alike
            raise PteError(f"{where} is not an ExecuTorch program (.pte): {type(e).__name__}: {e}") from None
        plans = {p.name: p for p in program.execution_plan}
        if method not in plans:
            raise PteError(f"the program has no method '{method}' (it has {', '.join(plans)})")
        self.plan = plans[method]
        self.constants = program.constant_buffer
        self.delegates = []
        for d in self.plan.delegates:
            if d.id != BACKEND_ID:
                raise PteError(f"delegate '{d.id}' is not npuc's; this runner executes {BACKEND_ID} delegates only")
            if d.processed.location != schema.DataLocation.INLINE:
                raise PteError("a delegate's data is outside the program")
            self.delegates.append(npuc.load(bytes(program.backend_delegate_data[d.processed.index].data)))
        self.kernel_calls = 0
        self.delegate_calls = 0

    # ------------------------------------------------------------------ values

    def _value(self, ev: schema.EValue) -> Any:
        v = ev.val
        if isinstance(v, schema.Tensor):
            return self._tensor(v)
        if isinstance(v, schema.Int):
            return v.int_val
        if isinstance(v, schema.Double):
            return float(v.double_val)
        if isinstance(v, schema.Bool):
            return v.bool_val
        if isinstance(v, schema.String):
            return v.string_val
        if isinstance(v, (schema.DoubleList, schema.BoolList)):
            return list(v.items)
        if isinstance(v, (schema.IntList, schema.TensorList, schema.OptionalTensorList)):
            return _ListRef(type(v).__name__, list(v.items))
        if isinstance(v, schema.Null):
            return None
        raise PteError(f"a program value of type {type(v).__name__} is not supported")

    def _tensor(self, t: schema.Tensor) -> torch.Tensor:
        dtype = DTYPES.get(int(t.scalar_type))
        if dtype is None:
            raise PteError(f"tensors of scalar type {t.scalar_type} are not supported")
        if list(t.dim_order) != list(range(len(t.sizes))):
            raise PteError(f"a tensor in dimension order {list(t.dim_order)}: the runner handles contiguous tensors")
        shape = tuple(int(s) for s in t.sizes)
        if t.data_buffer_idx > 0:
            raw = bytes(self.constants[t.data_buffer_idx].storage)
            n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
            return torch.frombuffer(bytearray(raw[:n]), dtype=dtype).reshape(shape).clone()
        return torch.zeros(shape, dtype=dtype)

    # ------------------------------------------------------------------ running

    def run(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        """The method's outputs on ``inputs`` (checked against the program's input shapes)."""
        values = [self._value(ev) for ev in self.plan.values]
        if len(inputs) != len(self.plan.inputs):
            raise PteError(f"the method takes {len(self.plan.inputs)} inputs, got {len(inputs)}")
        for i, (idx, x) in enumerate(zip(self.plan.inputs, inputs)):
            want = values[idx]
            if isinstance(want, torch.Tensor) and (tuple(want.shape) != tuple(x.shape) or want.dtype != x.dtype):
                raise PteError(f"input {i} must be a {want.dtype} tensor of shape {list(want.shape)}, got "
                               f"{x.dtype} {list(x.shape)}")
            values[idx] = x.clone()
        for chain in self.plan.chains:
            self._run_chain(chain, values)
        return [values[i] for i in self.plan.outputs]

    def _run_chain(self, chain: schema.Chain, values: list) -> None:
        pc = 0
        instructions = chain.instructions
        while pc < len(instructions):
            a = instructions[pc].instr_args
            pc += 1
            if isinstance(a, schema.KernelCall):
                self._kernel(a, values)
            elif isinstance(a, schema.DelegateCall):
                self._delegate(a, values)
            elif isinstance(a, schema.MoveCall):
                values[a.move_to] = values[a.move_from]
            elif isinstance(a, schema.JumpFalseCall):
                if not bool(_resolve(values[a.cond_value_index], values)):
                    pc = a.destination_instruction
            elif isinstance(a, schema.FreeCall):
                continue
            else:
                raise PteError(f"instruction {type(a).__name__} is not supported")

    def _kernel(self, call: schema.KernelCall, values: list) -> None:
        op_def = self.plan.operators[call.op_index]
        op = _torch_op(op_def)
        schema_args, returns = op._schema.arguments, op._schema.returns
        if len(call.args) != len(schema_args) + len(returns):
            raise PteError(f"{op_def.name}.{op_def.overload} takes {len(schema_args)} arguments and returns "
                           f"{len(returns)} values; the program gives {len(call.args)}")
        args = [_resolve(values[i], values) for i in call.args[:len(schema_args)]]
        pos = [v for s, v in zip(schema_args, args) if not s.kwarg_only]
        kw = {s.name: v for s, v in zip(schema_args, args) if s.kwarg_only}
        result = op(*pos, **kw)
        results = result if isinstance(result, (tuple, list)) else (result,)
        out_args = [i for s, i in zip(schema_args, call.args) if s.alias_info is not None and s.alias_info.is_write]
        for idx, r in zip(out_args, results):
            values[idx] = r
        for idx, r in zip(call.args[len(schema_args):], results):  # the returned values alias the outs
            values[idx] = r
        self.kernel_calls += 1

    def _delegate(self, call: schema.DelegateCall, values: list) -> None:
        art = self.delegates[call.delegate_index]
        n_in = len(art.npub.io_signature.inputs)
        ins = [values[i] for i in call.args[:n_in]]
        outs = art.run(*ins)
        out_idx = call.args[n_in:]
        if len(outs) != len(out_idx):
            raise PteError(f"delegate {call.delegate_index} returns {len(outs)} tensors, the program expects {len(out_idx)}")
        for idx, y in zip(out_idx, outs):
            want = values[idx]
            values[idx] = y.to(want.dtype).reshape(want.shape) if isinstance(want, torch.Tensor) else y
        self.delegate_calls += 1


class _ListRef:
    """A list value whose items are indices of other values (ints, tensors, optional tensors)."""

    def __init__(self, kind: str, items: Sequence[int]) -> None:
        self.kind, self.items = kind, list(items)


def _resolve(v: Any, values: list) -> Any:
    if isinstance(v, _ListRef):
        return [None if i < 0 else values[i] for i in v.items]
    return v


def _torch_op(op: schema.Operator) -> Any:
    """The PyTorch op of an ExecuTorch operator (``aten::add`` ``out`` -> ``torch.ops.aten.add.out``)."""
    ns, _, name = op.name.partition("::")
    if ns == "dim_order_ops":
        import executorch.exir.passes.dim_order_ops_registry  # noqa: F401  (registers the ops)
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        return getattr(packet, op.overload or "default")
    except AttributeError:
        raise PteError(f"the program calls {op.name}.{op.overload}, which PyTorch does not define") from None
