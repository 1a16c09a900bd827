"""Differential checks of a random graph (npuc.fuzz.graphs) against PyTorch eager.

Three paths, each with its own stated tolerance:

* **interpreter** (fp32): npuc's reference interpreter on the imported, optimized graph equals
  eager within ``rtol = atol = 1e-5`` of the output's scale (integer and boolean outputs exactly);
* **fp16 on the NPU**: the compiled binary on the simulator is within the fp16 tolerance of
  ``npuc.report.accuracy`` (relative L2 <= max(1e-2, 3 x PyTorch's own fp16 error));
* **int8 on the NPU**: the quantized graph compiled to int8 equals npuc's integer reference
  interpreter bit for bit, and that reference is within 0.25 relative L2 of eager (quantization
  error of a few random ops, with a margin; a gross error such as a wrong op is far beyond it)
  unless the graph makes a discrete decision (a comparison, argmax): quantized inputs tie or
  cross a threshold where float ones do not, so there only the bit-exact check applies.

An ``NpucError`` is a clean refusal (an op the int8 path does not take, say), counted apart --
except when npuc refuses what it produced itself (a verifier, the container's validation or the
simulator rejecting compiled output, an "internal error"): that, and any other exception, is a
crash.  :func:`shrink` removes steps while a failure persists, so the
reproducer printed is minimal.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass, field

import torch

from npuc.errors import BinaryFormatError, NpucError, SimulationError, VerifyError
from npuc.fuzz.graphs import Recipe, build, recipe_source
from npuc.fuzz.memo import install as install_memos

INTERP_TOL = 1e-5
INT8_EAGER_TOL = 0.25
PATHS = ("interp", "fp16", "int8")
DISCRETE_OPS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "argmax", "logical_and", "logical_or", "logical_not",
                          "where"})


@dataclass(frozen=True)
class PathResult:
    path: str
    status: str  # "ok", "wrong", "crash", "refused", "skipped"
    detail: str = ""


@dataclass(frozen=True)
class GraphResult:
    recipe: Recipe
    results: tuple[PathResult, ...] = field(default_factory=tuple)

    @property
    def failed(self) -> tuple[PathResult, ...]:
        return tuple(r for r in self.results if r.status in ("wrong", "crash"))


def _outputs(out) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else list(out)


def _close(got: torch.Tensor, ref: torch.Tensor, tol: float) -> str | None:
    if tuple(got.shape) != tuple(ref.shape):
        return f"shape {list(got.shape)}, expected {list(ref.shape)}"
    if not ref.is_floating_point():
        return None if torch.equal(got.to(ref.dtype), ref) else "integer/boolean values differ"
    scale = max(1.0, float(ref.abs().max()))
    err = float((got.float() - ref.float()).abs().max())
    return None if err <= tol * scale else f"max error {err:.3g} (tolerance {tol * scale:.3g})"


def _guard(path: str, fn) -> PathResult:
    try:
        problem = fn()
    except (BinaryFormatError, VerifyError, SimulationError) as e:  # npuc refusing its own output
        return PathResult(path, "crash", f"{type(e).__name__} from npuc's own output: {e}")
    except NpucError as e:
        if "internal error" in str(e):
            return PathResult(path, "crash", f"{type(e).__name__}: {e}")
        return PathResult(path, "refused", str(e).splitlines()[0][:300])
    except Exception as e:  # noqa: BLE001 (a crash is what this looks for)
        tb = traceback.format_exc(limit=-3)
        return PathResult(path, "crash", f"{type(e).__name__}: {e}\n{tb}")
    if problem is None:
        return PathResult(path, "ok")
    if problem.startswith("skip:"):
        return PathResult(path, "skipped", problem[5:].strip())
    return PathResult(path, "wrong", problem)


def check_recipe(r: Recipe, paths: tuple[str, ...] = PATHS, target: str = "npu-mid") -> GraphResult:
    """Every path of ``paths`` checked on the graph of ``r``."""
    from npuc.artifact import compile_graph, resolve_target
    from npuc.frontend.export import capture_program
    from npuc.interp import interpret
    from npuc.pipeline import import_model
    from npuc.report.accuracy import check_output, eager_outputs

    install_memos()
    model, inputs = build(r)
    ref = eager_outputs(model, inputs)
    results: list[PathResult] = []
    if not all(bool(torch.isfinite(o).all()) for o in ref if o.is_floating_point()):
        return GraphResult(r, (PathResult("eager", "skipped", "PyTorch's output is not finite"),))
    tgt = resolve_target(target)
    state: dict = {}

    def interp() -> str | None:
        # one torch.export of the model for both paths: decomposed to core ATen here, quantized
        # by the int8 path (PT2E takes the same training-IR program the int8 compile exports)
        state["ep"] = ep = capture_program(model.eval(), inputs)
        state["g"] = g = import_model(ep, inputs, name=f"random{r.seed}")
        got = interpret(g, *inputs)
        if len(got) != len(ref):
            return f"{len(got)} outputs, expected {len(ref)}"
        for i, (o, e) in enumerate(zip(got, ref)):
            p = _close(o, e, INTERP_TOL)
            if p:
                return f"output {i}: {p}"
        return None

    def fp16() -> str | None:
        if "g" not in state:
            return "skip: the graph did not import"
        art = compile_graph(state["g"], tgt)
        got = art.run(*inputs)
        ref16 = eager_outputs(model, inputs, half=True)
        for i, (o, e, e16) in enumerate(zip(got, ref, ref16)):
            c = check_output(o, e, e16)
            if not c.ok:
                return (f"output {i}: relative L2 {c.rel_error:.3g} > tolerance {c.tolerance:.3g}"
                        + (f" ({c.note})" if c.note else ""))
        return None

    def int8() -> str | None:
        if any(not x.is_floating_point() for x in inputs):
            return "skip: an integer input (the int8 path quantizes float models)"
        from npuc.artifact import quantized_graph
        from npuc.pipeline import run_graph_passes
        from npuc.report.accuracy import rel_l2

        gen = torch.Generator().manual_seed(r.seed + 2)
        calib = [inputs] + [tuple(torch.round(torch.randn(x.shape, generator=gen) * 8) / 8 for x in inputs)
                            for _ in range(2)]
        gq = run_graph_passes(quantized_graph(state.get("ep", model), inputs, tgt, calib, f"random{r.seed}"))
        ref8 = interpret(gq, *inputs)
        art = compile_graph(gq, tgt, quantize="int8")
        got = art.run(*inputs)
        for i, (o, e8, e) in enumerate(zip(got, ref8, ref)):
            if not torch.equal(o, e8):
                return f"output {i}: the NPU's int8 result differs from the integer reference"
            err = rel_l2(e8, e)
            if set(r.ops) & DISCRETE_OPS:
                continue
            if not math.isfinite(err) or err > INT8_EAGER_TOL:
                return f"output {i}: integer reference vs eager relative L2 {err:.3g} > {INT8_EAGER_TOL}"
        return None

    checks = {"interp": interp, "fp16": fp16, "int8": int8}
    for p in paths:
        results.append(_guard(p, checks[p]))
    return GraphResult(r, tuple(results))


def shrink(r: Recipe, paths: tuple[str, ...], budget: int = 30) -> Recipe:
    """A smaller recipe that still fails one of ``paths`` the same way (wrong or crash)."""
    first = check_recipe(r, paths).failed
    if not first:
        return r
    kind = {(f.path, f.status) for f in first}
    changed = True
    while changed and budget > 0:
        changed = False
        for i in reversed(range(len(r.steps))):
            smaller = r.without_step(i)
            if smaller is None or smaller == r:
                continue
            budget -= 1
            try:
                failed = check_recipe(smaller, paths).failed
            except Exception:  # noqa: BLE001 (a shrink step that no longer builds is skipped)
                failed = ()
            if {(f.path, f.status) for f in failed} & kind:
                r, changed = smaller, True
                break
            if budget <= 0:
                break
    return r


def reproducer(r: Recipe, result: GraphResult) -> str:
    """The text printed for a failure: what failed, and a file that reproduces it."""
    lines = [f"random graph seed {r.seed} fails:"]
    for f in result.failed:
        lines.append(f"  {f.path}: {f.status}: {f.detail}")
    lines += ["minimal reproducer (save as repro.py; `npuc import repro.py:build`, or compile it):", "",
              recipe_source(r)]
    return "\n".join(lines)
