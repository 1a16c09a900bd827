"""Structure-aware fuzzing of .npub binaries in CI (npuc.fuzz.binaries): 2,000 real compiled
binaries with edited fields (offsets, counts, roles, metadata, code), every checksum right,
loaded without target= and run.  None may escape: each is refused with an NpucError or runs."""

from __future__ import annotations

import collections

import pytest

from npuc.fuzz.binaries import base_binaries, fuzz_binaries, run_case

CASES = 2000


@pytest.fixture(scope="module")
def bases():
    return base_binaries()


def test_unedited_bases_load_and_run(bases):
    from npuc.fuzz.binaries import EDITS

    assert len(bases) == 4 and any(b.cpu_fallback for b in bases)
    assert any(b.weight_streams is not None for b in bases)
    saved = dict(EDITS)
    try:
        EDITS.clear()
        EDITS["none"] = lambda rng, n: n
        assert all(run_case(b, 0, i).outcome == "ran" for i, b in enumerate(bases))
    finally:
        EDITS.clear()
        EDITS.update(saved)


def test_edited_binaries_never_escape(bases):
    cases = fuzz_binaries(2026, CASES, bases)
    outcomes = collections.Counter(c.outcome for c in cases)
    by_edit = collections.Counter((c.edits[0], c.outcome) for c in cases)
    print(f"\nedited binaries: {CASES} cases: {dict(sorted(outcomes.items()))}")
    escapes = [c for c in cases if c.outcome == "escape"]
    assert not escapes, "\n\n".join(f"case {c.index} ({', '.join(c.edits)}): {c.detail}" for c in escapes[:5])
    # every kind of edit was both refused somewhere and survived somewhere (the checks are reached
    # and the edits are not all trivially fatal)
    for edit in {c.edits[0] for c in cases}:
        assert by_edit[(edit, "refused")] > 0, edit
    assert outcomes["ran"] > CASES // 5 and outcomes["refused"] > CASES // 3
