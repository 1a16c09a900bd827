"""``npuc.explore``: sweep target parameters with the compiler and the simulator in the loop.

::

    res = npuc.explore("torchvision:mobilenet_v2", base="npu-mid",
                       sweep={"array.rows": [8, 16, 32], "array.cols": [8, 16, 32]},
                       objectives=("latency", "energy", "area"), constraints=["area_mm2<=2.0"],
                       out="sweep/")
    res.front          # the Pareto-optimal rows, each simulated
    res.rows[0]        # {"array.rows": 8, ..., "latency_s": ..., "feasible": True, "pareto": False}

The model is imported (exported, and quantized with ``quantize="int8"``, for the base target)
once.  Every design is screened by the analytical tier; the simulator then confirms the Pareto
front: the front is recomputed with the simulated figures and any new member is simulated, until
every design on the front has simulated figures (``confirm="all"`` simulates every design,
``"none"`` none).  A design the simulator did not confirm shows its analytical figures scaled by
the median simulated/estimated ratio of the designs it did (:func:`calibration`; the raw
estimates are in the ``est_`` columns), so that the screen's systematic bias (its energy counts
MACs and compulsory DRAM traffic only) does not pull unconfirmed designs onto the front.  Results
are cached by content (npuc.dse.cache).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from npuc.errors import ExploreError
from npuc.dse.cache import ResultCache, default_cache_dir, entry_key, graph_digest
from npuc.dse.evaluate import SCREEN, SIMULATE, infeasible
from npuc.dse.objectives import DEFAULT_OBJECTIVES, Constraint, objective_columns, parse_constraint
from npuc.dse.pareto import pareto_flags
from npuc.dse.search import DEFAULT_BUDGET, SEARCHES, grid, nsga2_designs, random_designs, space_size
from npuc.dse.space import Design, Dimension, dimensions, make_design

CONFIRM = ("front", "all", "none")
RESULT_COLUMNS = ("latency_s", "energy_j", "area_mm2", "dram_bytes", "feasible", "pareto", "tier", "cycles",
                  "est_latency_s", "est_energy_j", "est_dram_bytes", "reason", "design")


@dataclass
class ExploreResult:
    """A finished sweep: one row per design, the front, how far the two tiers disagreed."""

    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    objectives: tuple[str, ...]
    dimensions: tuple[Dimension, ...]
    disagreement: dict[str, Any]
    layers: dict[str, list[dict]]  # design id -> per-layer rows (simulated designs)
    targets: dict[str, Any]        # design id -> Target
    stats: dict[str, Any] = field(default_factory=dict)  # computed/cached counts, wall time
    model: str = ""
    base: str = ""
    out: Path | None = None

    @property
    def front(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["pareto"]]

    def row(self, design_id: str) -> dict[str, Any]:
        return next(r for r in self.rows if r["design"] == design_id)


class _Evaluator:
    """Results by (design, tier): from memory, the cache, or the backend."""

    def __init__(self, backend, cache: ResultCache, digest: str, quantize, progress) -> None:
        self.backend = backend
        self.cache = cache
        self.digest = digest
        self.quantize = quantize
        self.progress = progress
        self.results: dict[tuple[str, str], dict] = {}
        self.computed = {SCREEN: 0, SIMULATE: 0}
        self.cached = {SCREEN: 0, SIMULATE: 0}

    def evaluate(self, designs: Sequence[Design], tier: str, on_result: Callable[[Design, dict], None] | None = None) -> None:
        todo = []
        keys = {}
        for d in designs:
            if (d.id, tier) in self.results or d.id in keys:
                continue
            if d.target is None:
                self.results[(d.id, tier)] = infeasible(tier, d.invalid)
                continue
            key = entry_key(self.digest, d.target, self.quantize, tier)
            hit = self.cache.get(key)
            if hit is not None:
                self.results[(d.id, tier)] = hit
                self.cached[tier] += 1
                continue
            keys[d.id] = (key, d)
            todo.append((d.id, tier, d.target))
        if not todo:
            return
        self.progress.begin(tier, len(todo))
        for tag, result in self.backend.run(todo):
            key, d = keys[tag]
            if not result.get("internal"):
                self.cache.put(key, result)
            self.results[(tag, tier)] = result
            self.computed[tier] += 1
            if on_result is not None:
                on_result(d, result)
            self.progress.advance(tier, d, result)
        self.progress.end(tier)

    def get(self, d: Design, tier: str) -> dict | None:
        return self.results.get((d.id, tier))


class _NoProgress:
    def begin(self, tier, total): ...
    def advance(self, tier, design, result): ...
    def end(self, tier): ...


def _import_graph(model, example_inputs, quantize, calibration, base, name):
    """The optimized graph of the model (imported once for the whole sweep) and its name."""
    from npuc.ir.graph import Graph

    if isinstance(model, Graph):
        return model, name or model.name
    if isinstance(model, str):
        from npuc.zoo import ZOO, load_model

        spec = model
        module, inputs = load_model(spec)
        if example_inputs is None:
            example_inputs = inputs
        if quantize == "int8" and calibration is None and spec in ZOO:
            calibration = [ZOO[spec].make_inputs(seed) for seed in range(1, 9)]
        model, name = module, name or spec
    if example_inputs is None:
        raise ExploreError("explore() needs example_inputs with a torch module (or a MODEL name)")
    import torch

    from npuc.artifact import quantized_graph
    from npuc.pipeline import import_model, run_graph_passes

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if quantize is None:
        g = import_model(model, tuple(example_inputs), name=name)
    elif quantize == "int8":
        g = run_graph_passes(quantized_graph(model, tuple(example_inputs), base, calibration, name))
    else:
        raise ExploreError(f"unknown quantization '{quantize}': the only one is int8")
    return g, name or g.name


def explore(
    model,
    example_inputs=None,
    *,
    base="npu-mid",
    sweep: dict[str, Sequence[Any]] | Sequence[str],
    quantize: str | None = None,
    calibration=None,
    objectives: Sequence[str] | str = DEFAULT_OBJECTIVES,
    constraints: Sequence[str] | str = (),
    constraint: Sequence[str] | str | None = None,
    search: str = "grid",
    budget: int | None = None,
    backend: str = "local",
    jobs: int | None = None,
    ray_address: str | None = None,
    out: str | Path | None = None,
    cache_dir: str | Path | None | bool = True,
    seed: int = 0,
    confirm: str = "front",
    chosen: str | None = None,
    name: str | None = None,
    progress=None,
) -> ExploreResult:
    """Explore the design space around ``base``; see the module docstring and docs/explore.md.

    ``model`` is a torch module (with ``example_inputs``), a MODEL name as for ``npuc compile``
    (a zoo entry or ``file.py:function``), or an already optimized graph.  ``sweep`` maps dotted
    target keys to their values (or is a list of ``KEY=V1,V2`` strings).  ``cache_dir``: True for
    the default cache folder, None/False for none.  ``constraints`` (or ``constraint``, as the
    CLI's flag) are ``COLUMN OP NUMBER`` strings.  With ``out``, writes results.csv,
    results.json and report.html there; ``chosen`` names the design whose layers the report
    details (default: the front's best in the first objective).
    """
    from npuc.artifact import resolve_target
    from npuc.dse.backend import make_backend
    from npuc.ir.text import print_graph

    start = time.perf_counter()
    base_t = resolve_target(base)
    dims = dimensions(base_t, sweep)
    obj_cols = objective_columns(objectives)
    swept = [d.key for d in dims]
    texts = [constraints] if isinstance(constraints, str) else list(constraints)
    texts += [] if constraint is None else [constraint] if isinstance(constraint, str) else list(constraint)
    cons = [parse_constraint(c, swept) for c in texts]
    if search not in SEARCHES:
        raise ExploreError(f"unknown search '{search}': choose {', '.join(SEARCHES)}")
    if confirm not in CONFIRM:
        raise ExploreError(f"confirm must be one of {', '.join(CONFIRM)}, got '{confirm}'")
    if budget is not None and budget < 1:
        raise ExploreError(f"--budget must be at least 1, got {budget}")
    needs_area = "area_mm2" in obj_cols or any(c.column == "area_mm2" for c in cons)
    if needs_area and base_t.area is None:
        raise ExploreError(f"the base target '{base_t.name}' has no [area] section, so the area objective "
                           "and area constraints cannot be computed (docs/targets.md lists its keys)")
    if jobs is not None and jobs < 1:
        raise ExploreError(f"--jobs must be at least 1, got {jobs}")

    graph, model_name = _import_graph(model, example_inputs, quantize, calibration, base_t, name)
    text = print_graph(graph)
    digest = graph_digest(text, graph.constants)
    cache = ResultCache(default_cache_dir() if cache_dir is True else (cache_dir or None))
    bk = make_backend(backend, jobs, ray_address)
    ev = _Evaluator(bk, cache, digest, quantize, progress or _NoProgress())
    if progress is not None:
        progress.objective = obj_cols[0]
    area_of: dict[str, float | None] = {}

    def design_of(a) -> Design:
        d = make_design(base_t, a)
        area_of[d.id] = d.target.area_mm2 if (d.target is not None and d.target.area is not None) else None
        return d

    def static_reason(d: Design) -> str:
        figures = {"area_mm2": area_of[d.id], **dict(d.assignment)}
        for c in cons:
            if c.static:
                r = c.check(figures.get(c.column))
                if r:
                    return r
        return ""

    bk.start((text, dict(graph.constants), quantize, digest))
    try:
        designs = _choose_designs(dims, search, budget, seed, obj_cols, design_of, static_reason, ev, area_of)
        screenable = [d for d in designs if not static_reason(d)]
        ev.evaluate(screenable, SCREEN)
        rows = _confirm(designs, ev, area_of, obj_cols, cons, static_reason, confirm)
    finally:
        bk.close()
    wall = time.perf_counter() - start
    by_id = {d.id: d for d in designs}
    layers = {d.id: ev.get(d, SIMULATE)["layers"] for d in designs
              if ev.get(d, SIMULATE) is not None and ev.get(d, SIMULATE).get("feasible")}
    res = ExploreResult(
        columns=tuple(swept) + RESULT_COLUMNS, rows=rows, objectives=obj_cols, dimensions=dims,
        disagreement=disagreement(designs, ev, rows, obj_cols),
        layers=layers, targets={i: by_id[i].target for i in by_id},
        stats={"designs": len(designs), "space": space_size(dims), "computed": dict(ev.computed),
               "cached": dict(ev.cached), "wall_s": wall, "search": search, "backend": bk.name,
               "jobs": bk.jobs, "constraints": [c.text for c in cons]},
        model=model_name, base=base_t.name, out=Path(out) if out is not None else None,
    )
    if out is not None:
        from npuc.dse.report import write_outputs

        write_outputs(res, Path(out), chosen)
    return res


def _choose_designs(dims, search, budget, seed, obj_cols, design_of, static_reason, ev, area_of) -> list[Design]:
    if search == "grid":
        assignments = grid(dims)
        if budget is not None and budget < len(assignments):
            raise ExploreError(f"--search grid evaluates all {len(assignments)} designs; --budget {budget} is "
                               "smaller: use --search random or nsga2 with a budget")
    elif search == "random":
        assignments = random_designs(dims, budget or DEFAULT_BUDGET["random"], seed)
    else:
        def generation(batch):
            ds = [design_of(a) for a in batch]
            ev.evaluate([d for d in ds if not static_reason(d)], SCREEN)
            out = []
            for d in ds:
                r = ev.get(d, SCREEN)
                if static_reason(d) or r is None or not r.get("feasible"):
                    out.append(None)
                else:
                    out.append(tuple(area_of[d.id] if c == "area_mm2" else r[c] for c in obj_cols))
            return out

        assignments = nsga2_designs(dims, budget or DEFAULT_BUDGET["nsga2"], seed, len(obj_cols), generation)
    return [design_of(a) for a in assignments]


CALIBRATED = ("latency_s", "energy_j", "dram_bytes", "cycles")


def calibration(designs, ev: _Evaluator) -> dict[str, float]:
    """The median simulated/estimated ratio of each figure over the designs both tiers evaluated
    (1.0 before any): the analytical figures of unconfirmed designs are scaled by it, so that they
    compare with simulated ones without the screen's systematic bias."""
    ratios: dict[str, list[float]] = {c: [] for c in CALIBRATED}
    for d in designs:
        est, sim = ev.get(d, SCREEN), ev.get(d, SIMULATE)
        if est and sim and est.get("feasible") and sim.get("feasible"):
            for c in CALIBRATED:
                if est[c]:
                    ratios[c].append(sim[c] / est[c])
    return {c: statistics.median(v) if v else 1.0 for c, v in ratios.items()}


def _row(d: Design, ev: _Evaluator, area: float | None, cons: Sequence[Constraint], static: str,
         scale: dict[str, float]) -> dict:
    row: dict[str, Any] = {k: v for k, v in d.assignment}
    est = ev.get(d, SCREEN)
    sim = ev.get(d, SIMULATE)
    best = sim if sim is not None else est
    reason = static or (d.invalid if d.target is None else "")
    if not reason and best is not None and not best.get("feasible"):
        reason = best.get("reason", "")
    feasible = not reason and best is not None
    figures: dict[str, Any] = {c: (best.get(c) if feasible else None) for c in CALIBRATED}
    if feasible and best is est:
        figures = {c: (round(v * scale[c]) if isinstance(v, int) else v * scale[c]) for c, v in figures.items()}
    figures["area_mm2"] = area
    if feasible:
        for c in cons:
            if not c.static:
                reason = c.check(figures[c.column])
                if reason:
                    feasible = False
                    break
    ok = est is not None and est.get("feasible")
    row.update({
        "latency_s": figures["latency_s"], "energy_j": figures["energy_j"], "area_mm2": area,
        "dram_bytes": figures["dram_bytes"], "feasible": feasible, "pareto": False,
        "tier": "" if (static or d.target is None or best is None) else best["tier"],
        "cycles": figures["cycles"],
        "est_latency_s": est["latency_s"] if ok else None, "est_energy_j": est["energy_j"] if ok else None,
        "est_dram_bytes": est["dram_bytes"] if ok else None,
        "reason": reason, "design": d.id,
    })
    return row


def _flag_front(rows: list[dict], obj_cols: Sequence[str]) -> None:
    live = [r for r in rows if r["feasible"]]
    flags = pareto_flags([tuple(float(r[c]) for c in obj_cols) for r in live])
    for r in rows:
        r["pareto"] = False
    for r, f in zip(live, flags):
        r["pareto"] = f


def _confirm(designs, ev, area_of, obj_cols, cons, static_reason, confirm) -> list[dict]:
    """Rows of every design, with the front confirmed by the simulator as ``confirm`` says."""
    reasons = {d.id: static_reason(d) for d in designs}

    def rows_now() -> list[dict]:
        scale = calibration(designs, ev)
        rows = [_row(d, ev, area_of[d.id], cons, reasons[d.id], scale) for d in designs]
        _flag_front(rows, obj_cols)
        return rows

    if confirm == "all":
        ev.evaluate([d for d, r in zip(designs, rows_now()) if r["feasible"]], SIMULATE)
    rows = rows_now()
    if confirm == "none":
        return rows
    while True:
        todo = [d for d, r in zip(designs, rows) if r["pareto"] and ev.get(d, SIMULATE) is None]
        if not todo:
            return rows
        ev.evaluate(todo, SIMULATE)
        rows = rows_now()


def disagreement(designs, ev, rows, obj_cols) -> dict[str, Any]:
    """How far the analytical tier was from the simulator on the designs both evaluated."""
    rel: dict[str, list[float]] = {"latency_s": [], "energy_j": [], "dram_bytes": []}
    both = 0
    for d in designs:
        est, sim = ev.get(d, SCREEN), ev.get(d, SIMULATE)
        if not (est and sim and est.get("feasible") and sim.get("feasible")):
            continue
        both += 1
        for k in rel:
            if sim[k]:
                rel[k].append(est[k] / sim[k] - 1.0)
    out: dict[str, Any] = {"designs_compared": both}
    for k, v in rel.items():
        if v:
            mags = [abs(x) for x in v]
            out[k] = {"median_abs": statistics.median(mags), "max_abs": max(mags),
                      "mean": statistics.fmean(v)}
    # The front the screen alone would have given, against the confirmed front.
    est_rows = [r for r in rows if r["feasible"] and r["est_latency_s"] is not None]
    est_points = [tuple(float(r.get("est_" + c, r[c])) for c in obj_cols) for r in est_rows]
    est_front = {r["design"] for r, f in zip(est_rows, pareto_flags(est_points)) if f}
    final = {r["design"] for r in rows if r["pareto"]}
    out["screen_front"] = len(est_front)
    out["confirmed_front"] = len(final)
    out["front_overlap"] = len(est_front & final)
    out["simulated"] = sum(1 for d in designs if ev.get(d, SIMULATE) is not None)
    return out

