"""``python -m npuc.fuzz [graphs|binaries] --seed S --count N``: a long fuzzing campaign.

``graphs`` checks N random graphs from seed S on the interpreter, the fp16 NPU path and the int8
path (npuc.fuzz.check); every failure is shrunk and printed as a reproducer.  ``binaries`` loads
and runs N structure-edited binaries (npuc.fuzz.binaries); every escape is printed.  The exit
status is 1 when anything failed.
"""

from __future__ import annotations

import collections
import sys
import time
import warnings

import click


@click.command()
@click.argument("what", type=click.Choice(["graphs", "binaries", "all"]), default="all")
@click.option("--seed", type=int, default=0, show_default=True, help="The first seed.")
@click.option("--count", type=click.IntRange(min=1), default=100, show_default=True, help="How many cases.")
@click.option("--paths", default="interp,fp16,int8", show_default=True, help="Graph paths to check.")
def main(what: str, seed: int, count: int, paths: str) -> None:
    """Fuzz npuc: random graphs against PyTorch eager, edited binaries against the loader."""
    warnings.filterwarnings("ignore")
    failed = 0
    if what in ("graphs", "all"):
        failed += _graphs(seed, count, tuple(p for p in paths.split(",") if p))
    if what in ("binaries", "all"):
        failed += _binaries(seed, count)
    sys.exit(1 if failed else 0)


def _graphs(seed: int, count: int, paths: tuple[str, ...]) -> int:
    from npuc.fuzz.check import check_recipe, reproducer, shrink
    from npuc.fuzz.graphs import random_recipe

    counts: collections.Counter = collections.Counter()
    failures = 0
    start = time.perf_counter()
    for s in range(seed, seed + count):
        r = random_recipe(s)
        result = check_recipe(r, paths)
        for p in result.results:
            counts[(p.path, p.status)] += 1
        if result.failed:
            failures += 1
            small = shrink(r, paths)
            click.echo(reproducer(small, check_recipe(small, paths)))
    summary = ", ".join(f"{p} {st} {n}" for (p, st), n in sorted(counts.items()))
    click.echo(f"random graphs {seed}..{seed + count - 1}: {count} graphs, {failures} failing "
               f"({summary}) in {time.perf_counter() - start:.0f} s")
    return failures


def _binaries(seed: int, count: int) -> int:
    from npuc.fuzz.binaries import fuzz_binaries

    start = time.perf_counter()
    cases = fuzz_binaries(seed, count)
    outcomes = collections.Counter(c.outcome for c in cases)
    for c in cases:
        if c.outcome == "escape":
            click.echo(f"edited binary {seed}/{c.index} ({', '.join(c.edits)}) escaped:\n{c.detail}")
    click.echo(f"edited binaries {seed}/0..{count - 1}: {dict(sorted(outcomes.items()))} in "
               f"{time.perf_counter() - start:.0f} s")
    return outcomes["escape"]


if __name__ == "__main__":  # pragma: no cover
    main()
