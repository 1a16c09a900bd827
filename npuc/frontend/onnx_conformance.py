"""Run ONNX's own node conformance cases through npuc (the test suite and `npuc onnx-suite` use it).

Each case of ``onnx.backend.test.case.node.collect_testcases`` is a one-node (or expanded, a few
node) model with inputs and expected outputs and its tolerances.  A case is *claimed* when every
operator of its model is in :data:`~npuc.frontend.onnx_table.ONNX_TABLE`; claimed cases are imported
and run on the reference interpreter and end up as:

- ``passed``: every output has the expected shape and dtype and is within the case's rtol/atol
  (NaN where NaN is expected);
- ``refused``: npuc raised an :class:`~npuc.errors.NpucError` (an unsupported use, with its reason);
- ``wrong``: anything else -- an output out of tolerance, of another shape or dtype, or an
  exception that is not an NpucError.  npuc accepts no wrong answer.

Integer inputs that parameterize an operator (a Reshape target, Slice bounds, ...) are graph inputs
in these cases; a case refused for that is retried with its integer inputs fixed at import time
(``fixed_inputs``), and counted as ``passed_fixed`` when it then passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from npuc.errors import NpucError
from npuc.frontend.context import Unsupported


@dataclass(frozen=True)
class CaseResult:
    name: str
    ops: tuple[str, ...]
    outcome: str  # passed, passed_fixed, refused, wrong
    detail: str = ""


@dataclass
class SuiteCounts:
    results: list[CaseResult] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    def summary(self) -> str:
        return (f"{len(self.results)} claimed cases: {self.count('passed')} passed, "
                f"{self.count('passed_fixed')} passed with integer inputs fixed, "
                f"{self.count('refused')} refused, {self.count('wrong')} wrong")


def node_cases():
    """All node conformance cases of the installed onnx package (in memory)."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return collect_testcases(None)


def case_ops(case) -> tuple[str, ...]:
    ops = {n.op_type for n in case.model.graph.node}
    for f in case.model.functions:
        ops |= {n.op_type for n in f.node}
    return tuple(sorted(ops))


def claimed(case) -> bool:
    from npuc.frontend.onnx_table import ONNX_TABLE

    nodes = case.model.graph.node
    return bool(nodes) and all(n.op_type in ONNX_TABLE and n.domain in ("", "ai.onnx") for n in nodes)


def run_case(case) -> CaseResult:
    ops = case_ops(case)
    res = _attempt(case, fix_ints=False)
    if res.outcome == "refused" and _has_int_inputs(case):
        again = _attempt(case, fix_ints=True)
        if again.outcome == "passed":
            return CaseResult(case.name, ops, "passed_fixed", res.detail)
        if again.outcome == "wrong":
            return CaseResult(case.name, ops, "wrong", "with integer inputs fixed: " + again.detail)
    return CaseResult(case.name, ops, res.outcome, res.detail)


def _input_names(case) -> list[str]:
    inits = {t.name for t in case.model.graph.initializer}
    return [i.name for i in case.model.graph.input if i.name not in inits]


def _has_int_inputs(case) -> bool:
    return any(as_array(a).dtype.kind in "biu" for a in case.data_sets[0][0]) if case.data_sets else False


def as_array(x) -> np.ndarray:
    """A case's input or expected output as a numpy array (some cases store TensorProtos)."""
    import onnx

    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return np.asarray(x)


def _attempt(case, fix_ints: bool) -> CaseResult:
    from npuc.frontend.onnx_context import tensor_from_numpy
    from npuc.frontend.onnx_import import import_onnx
    from npuc.interp import interpret

    ops = case_ops(case)
    names = _input_names(case)
    try:
        for inputs, expected in case.data_sets:
            arrays = [as_array(a) for a in inputs]
            fixed = {n: a for n, a in zip(names, arrays) if fix_ints and a.dtype.kind in "biu"}
            shapes = {n: a.shape for n, a in zip(names, arrays) if n not in fixed}
            g = import_onnx(case.model, shapes, fixed_inputs=fixed)
            feeds = [tensor_from_numpy(a) for n, a in zip(names, arrays) if n not in fixed]
            got = interpret(g, *feeds)
            problem = compare(got, expected, case.rtol, case.atol)
            if problem:
                return CaseResult(case.name, ops, "wrong", problem)
    except (NpucError, Unsupported) as e:
        return CaseResult(case.name, ops, "refused", str(e).splitlines()[-2 if "\n" in str(e) else 0].strip())
    except Exception as e:  # a bug in npuc: never accepted
        return CaseResult(case.name, ops, "wrong", f"{type(e).__name__}: {e}")
    return CaseResult(case.name, ops, "passed")


def compare(got, expected, rtol: float, atol: float) -> str | None:
    """Why ``got`` (torch tensors) does not match ``expected`` (numpy arrays), or None."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for k, (g, e) in enumerate(zip(got, expected)):
        e = as_array(e)
        if e.dtype == object:
            return f"output {k}: expected a non-tensor value"
        if g.dtype == torch.bfloat16:
            g, e = g.float(), e.astype(np.float32)
        gn = g.detach().cpu().numpy()
        if tuple(gn.shape) != tuple(e.shape):
            return f"output {k}: shape {list(gn.shape)}, expected {list(e.shape)}"
        if gn.dtype != e.dtype:
            return f"output {k}: dtype {gn.dtype}, expected {e.dtype}"
        if e.dtype.kind in "biu":
            if not np.array_equal(gn, e):
                return f"output {k}: {int((gn != e).sum())} of {e.size} elements differ"
            continue
        ok = np.isclose(gn.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
        if not ok.all():
            err = np.nanmax(np.abs(gn.astype(np.float64) - e.astype(np.float64)))
            return f"output {k}: {int((~ok).sum())} of {e.size} elements out of rtol={rtol} atol={atol} (max error {err:.3g})"
    return None


def run_suite(cases=None) -> SuiteCounts:
    cases = node_cases() if cases is None else cases
    out = SuiteCounts()
    for c in cases:
        if claimed(c):
            out.results.append(run_case(c))
    return out
