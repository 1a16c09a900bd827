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

Operands that parameterize an operator (a Reshape target, Slice bounds, Resize scales, a Clip
bound, ...) are graph inputs in these cases, where exported models have initializers; a refused
case with more than one input is retried with its integer and bool inputs fixed at import time
(``fixed_inputs``), then with every input but the first fixed, and counted as ``passed_fixed`` when it then passes (a refusal then reports
the retry's reason).
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
    simulated: list[CaseResult] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.results + self.simulated if r.outcome == outcome)

    def sim_summary(self) -> str:
        return (f"simulator: {len(self.simulated)} passing cases compiled, {self.count('sim_passed')} passed, "
                f"{self.count('sim_wrong')} wrong, {self.count('sim_refused')} refused by the backend, "
                f"{self.count('cpu_only')} all on the CPU, {self.count('skipped')} without compute, "
                f"{self.count('sim_overflow')} out of fp16 range, {self.count('sim_crash')} crashed in the backend")

    def summary(self) -> str:
        return (f"{len(self.results)} claimed cases: {self.count('passed')} passed, "
                f"{self.count('passed_fixed')} passed with parameters fixed, "
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
    res = _attempt(case, fix_params=None)
    if res.outcome == "refused" and len(_input_names(case)) > 1:
        for fix in ("ints", "all_but_first"):
            again = _attempt(case, fix_params=fix)
            if again.outcome == "passed":
                return CaseResult(case.name, ops, "passed_fixed", res.detail)
            if again.outcome == "wrong":
                break
        return CaseResult(case.name, ops, again.outcome, "with parameters fixed: " + again.detail)
    return CaseResult(case.name, ops, res.outcome, res.detail)


def _input_names(case) -> list[str]:
    inits = {t.name for t in case.model.graph.initializer}
    return [i.name for i in case.model.graph.input if i.name not in inits]


def as_array(x) -> np.ndarray:
    """A case's input or expected output as a numpy array (some cases store TensorProtos)."""
    import onnx

    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return np.asarray(x)


def _fixed(names: list[str], arrays: list[np.ndarray], how: str | None) -> dict[str, np.ndarray]:
    """The inputs a retry fixes at import time: none, the integer and bool ones, or all but the first."""
    if how == "ints":
        return {n: a for n, a in zip(names, arrays) if a.dtype.kind in "biu"}
    if how == "all_but_first":
        return dict(list(zip(names, arrays))[1:])
    return {}


def _attempt(case, fix_params: str | None) -> CaseResult:
    from npuc.frontend.onnx_context import tensor_from_numpy
    from npuc.pipeline import import_onnx
    from npuc.interp import interpret

    ops = case_ops(case)
    names = _input_names(case)
    try:
        for inputs, expected in case.data_sets:
            arrays = [as_array(a) for a in inputs]
            fixed = _fixed(names, arrays, fix_params)
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


def run_suite(cases=None, simulate: bool = False) -> SuiteCounts:
    """Run every claimed case on the reference interpreter, and with ``simulate`` also the passing
    ones whose graph the NPU takes (at least one NPU kernel) on the simulator."""
    cases = node_cases() if cases is None else cases
    out = SuiteCounts()
    for c in cases:
        if claimed(c):
            r = run_case(c)
            out.results.append(r)
            if simulate and r.outcome in ("passed", "passed_fixed"):
                out.simulated.append(simulate_case(c))
    return out


def _where(e: BaseException) -> str:
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    last = frames[-1] if frames else None
    return f"{last.filename.rsplit('npuc/', 1)[-1]}:{last.lineno}" if last else "?"


def simulate_case(case) -> CaseResult:
    """Compile a case for the default NPU and run it on the simulator (first data set).

    The NPU computes in fp16; an output is right when its relative L2 error to the expected output
    is within max(1e-2, 3 x the error the reference itself makes on inputs rounded to fp16), the
    criterion npuc uses for every float model (npuc.report.accuracy); non-float outputs must be
    equal.  Outcomes: ``sim_passed``, ``sim_wrong``, ``cpu_only`` (no NPU kernel: nothing to
    simulate), ``sim_refused`` (an NpucError from the backend, with its reason), ``skipped``
    (a graph without compute, whose outputs are constants or inputs, or one with a zero-size tensor,
    which npuc does not compile), ``sim_overflow`` (an
    output is infinite or NaN where the fp32 answer is finite: an intermediate beyond fp16's range,
    such as exp(60) in an expanded ReduceLogSumExp), ``sim_crash`` (an exception
    that is not an NpucError: a backend bug, listed with where it happened).
    """
    from npuc.artifact import compile_graph
    from npuc.frontend.onnx_context import tensor_from_numpy
    from npuc.pipeline import import_onnx
    from npuc.interp import interpret
    from npuc.report.accuracy import rel_l2

    ops = case_ops(case)
    names = _input_names(case)
    inputs, expected = case.data_sets[0]
    arrays = [as_array(a) for a in inputs]
    g = None
    for how in (None, "ints", "all_but_first"):
        fixed = _fixed(names, arrays, how)
        try:
            g = import_onnx(case.model, {n: a.shape for n, a in zip(names, arrays) if n not in fixed}, fixed_inputs=fixed)
            break
        except NpucError:
            continue
    if g is None or not any(n.op != "const" for n in g.nodes) or any(v in g.inputs for v in g.outputs):
        return CaseResult(case.name, ops, "skipped", "no compute node")
    if any(v.type.numel == 0 for n in g.nodes for v in n.outputs) or any(v.type.numel == 0 for v in g.inputs):
        return CaseResult(case.name, ops, "skipped", "a zero-size tensor (npuc compiles no empty tensors)")
    feeds = [tensor_from_numpy(a) for n, a in zip(names, arrays) if n not in fixed]
    try:
        art = compile_graph(g)
    except NpucError as e:
        return CaseResult(case.name, ops, "sim_refused", str(e).splitlines()[0])
    except Exception as e:  # a backend bug: counted apart, with where it happened
        return CaseResult(case.name, ops, "sim_crash", f"{type(e).__name__}: {e} ({_where(e)})")
    if not any(kind == "npu" and n > 0 for _, kind, n in art.report.segments):
        return CaseResult(case.name, ops, "cpu_only")
    try:
        got = art.run(*feeds)
    except NpucError as e:
        return CaseResult(case.name, ops, "sim_refused", str(e).splitlines()[0])
    except Exception as e:
        return CaseResult(case.name, ops, "sim_crash", f"{type(e).__name__}: {e} ({_where(e)})")
    rounded = [f.half().float() if f.dtype == torch.float32 else f for f in feeds]
    ref16 = interpret(g, *rounded)
    for k, (o, e, r16) in enumerate(zip(got, expected, ref16)):
        e = tensor_from_numpy(as_array(e))
        if tuple(o.shape) != tuple(e.shape):
            return CaseResult(case.name, ops, "sim_wrong", f"output {k}: shape {list(o.shape)}, expected {list(e.shape)}")
        if not e.is_floating_point():
            if not torch.equal(o.to(e.dtype), e):
                return CaseResult(case.name, ops, "sim_wrong", f"output {k}: differs from the expected values")
            continue
        e32, o32 = e.float(), o.float()
        finite = torch.isfinite(e32)
        if not torch.equal(finite, torch.isfinite(o32)):
            if bool((finite & ~torch.isfinite(o32)).any()):
                return CaseResult(case.name, ops, "sim_overflow",
                                  f"output {k}: infinities or NaNs where the fp32 answer is finite (fp16 range exceeded)")
            return CaseResult(case.name, ops, "sim_wrong", f"output {k}: finite values where infinities or NaNs are expected")
        tol = max(1e-2, 3 * rel_l2(r16.float()[finite], e32[finite]))
        err = rel_l2(o32[finite], e32[finite])
        if err > tol:
            return CaseResult(case.name, ops, "sim_wrong", f"output {k}: relative L2 error {err:.3g} > {tol:.3g}")
    return CaseResult(case.name, ops, "sim_passed")
