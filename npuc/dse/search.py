"""How a sweep picks its designs: grid, random, or NSGA-II (optuna) over the dimensions.

* ``grid``: every combination, in order (the first dimension slowest);
* ``random``: ``budget`` distinct designs drawn by optuna's RandomSampler (seeded);
* ``nsga2``: optuna's NSGAIISampler driving ``budget`` trials on the analytical figures of the
  chosen objectives, in generations evaluated in parallel; an infeasible design is a failed
  trial.  The designs it visited are the sweep's designs (each once, in the order first seen).

Each strategy gives assignments, ((key, value), ...) in dimension order.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any, Callable, Sequence

from npuc.errors import ExploreError
from npuc.dse.space import Dimension

SEARCHES = ("grid", "random", "nsga2")
DEFAULT_BUDGET = {"random": 32, "nsga2": 64}

Assignment = tuple[tuple[str, Any], ...]


def space_size(dims: Sequence[Dimension]) -> int:
    return math.prod(len(d.values) for d in dims)


def grid(dims: Sequence[Dimension]) -> list[Assignment]:
    return [tuple(zip((d.key for d in dims), combo)) for combo in itertools.product(*(d.values for d in dims))]


def _optuna():
    try:
        import optuna
    except ImportError:
        raise ExploreError("--search random and nsga2 need optuna, which is not installed: pip install 'npuc[explore]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _distributions(dims: Sequence[Dimension]) -> dict:
    optuna = _optuna()
    return {d.key: optuna.distributions.CategoricalDistribution(list(range(len(d.values)))) for d in dims}


def _assignment(dims: Sequence[Dimension], params: dict) -> Assignment:
    return tuple((d.key, d.values[params[d.key]]) for d in dims)


def _key(a: Assignment) -> str:
    return json.dumps(a, sort_keys=True)


def random_designs(dims: Sequence[Dimension], budget: int, seed: int) -> list[Assignment]:
    """``budget`` distinct designs (all of them when the space is no larger)."""
    if budget >= space_size(dims):
        return grid(dims)
    optuna = _optuna()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    dists = _distributions(dims)
    seen: dict[str, Assignment] = {}
    attempts = 0
    while len(seen) < budget and attempts < 50 * budget:
        trial = study.ask(dists)
        study.tell(trial, 0.0)
        a = _assignment(dims, trial.params)
        seen.setdefault(_key(a), a)
        attempts += 1
    return list(seen.values())


def nsga2_designs(dims: Sequence[Dimension], budget: int, seed: int, n_objectives: int,
                  evaluate: Callable[[list[Assignment]], list[tuple[float, ...] | None]],
                  population: int | None = None) -> list[Assignment]:
    """Run NSGA-II for ``budget`` trials; ``evaluate`` maps a generation's designs to objective
    tuples (None: infeasible).  Returns the distinct designs visited, in the order first seen."""
    optuna = _optuna()
    from optuna.trial import TrialState

    pop = population or max(4, min(24, budget // 4))
    sampler = optuna.samplers.NSGAIISampler(population_size=pop, seed=seed)
    study = optuna.create_study(directions=["minimize"] * n_objectives, sampler=sampler)
    dists = _distributions(dims)
    seen: dict[str, Assignment] = {}
    done = 0
    while done < budget:
        trials = [study.ask(dists) for _ in range(min(pop, budget - done))]
        designs = [_assignment(dims, t.params) for t in trials]
        for a in designs:
            seen.setdefault(_key(a), a)
        for t, values in zip(trials, evaluate(designs)):
            if values is None:
                study.tell(t, state=TrialState.FAIL)
            else:
                study.tell(t, list(values))
        done += len(trials)
    return list(seen.values())
