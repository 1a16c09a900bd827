"""Randomized differential testing in CI (npuc.fuzz): 300 random graphs with fixed seeds over
every graph op a PyTorch program produces, each checked against PyTorch eager on the reference
interpreter, the fp16 NPU path and the int8 path (tolerances in npuc.fuzz.check).  A failure is
shrunk and printed as a minimal reproducer (a Python file with build()).  Longer runs:
``make fuzz SEED=.. COUNT=..``."""

from __future__ import annotations

import collections

import pytest

from npuc.fuzz.check import PATHS, check_recipe, reproducer, shrink
from npuc.fuzz.graphs import NOT_PROPOSED, PROPOSERS, random_recipe

GRAPHS = 300
CHUNK = 25


def test_every_registry_op_has_a_proposer():
    from npuc.ir.opdef import all_ops

    produced = set(PROPOSERS) | {"cast"}
    missing = {op.name for op in all_ops()} - produced - NOT_PROPOSED
    assert not missing, f"graph ops the random graphs never make: {sorted(missing)}"


def test_the_graphs_cover_the_ops():
    seen = collections.Counter(op for s in range(GRAPHS) for op in random_recipe(s).ops)
    never = set(PROPOSERS) - set(seen) - {"scalar_binary"}
    assert not never, f"ops no graph of the suite uses: {sorted(never)}"


def test_a_failure_prints_a_reproducer_that_builds():
    from npuc.fuzz.graphs import recipe_source

    r = random_recipe(3)
    text = reproducer(r, check_recipe(r, ("interp",)))
    source = recipe_source(r)
    assert source in text and "def build():" in source
    space: dict = {}
    exec(compile(source, "<repro>", "exec"), space)  # noqa: S102 (the reproducer runs as it is)
    model, inputs = space["build"]()
    assert len(inputs) == len(r.inputs) and model(*inputs) is not None


def test_shrinking_keeps_the_failure():
    from npuc.fuzz.graphs import Recipe, Step

    r = random_recipe(11, max_steps=4)
    # a failure planted in the last step: a recipe whose output is not what eager computes cannot
    # be made directly, so check the shrinker's mechanics: every smaller recipe is still valid
    for i in range(len(r.steps)):
        smaller = r.without_step(i)
        if smaller is not None:
            assert isinstance(smaller, Recipe) and all(isinstance(s, Step) for s in smaller.steps)
            assert set(smaller.outputs) <= {s.name for s in smaller.steps} | {x.name for x in smaller.inputs}


@pytest.mark.parametrize("start", range(0, GRAPHS, CHUNK))
def test_random_graphs_match_eager(start):
    counts: collections.Counter = collections.Counter()
    reports = []
    for seed in range(start, start + CHUNK):
        r = random_recipe(seed)
        result = check_recipe(r, PATHS)
        counts.update((p.path, p.status) for p in result.results)
        if result.failed:
            small = shrink(r, PATHS, budget=10)
            reports.append(reproducer(small, check_recipe(small, PATHS)))
    print(f"\nrandom graphs {start}..{start + CHUNK - 1}: {dict(sorted(counts.items()))}")
    assert not reports, "\n\n".join(reports)
    assert counts[("interp", "ok")] == CHUNK
