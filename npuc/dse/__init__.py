"""Design-space exploration: sweep target parameters with the real compiler in the loop.

``npuc.explore(...)`` (npuc.dse.sweep) and ``npuc explore`` (the CLI); docs/explore.md.
"""

from __future__ import annotations

from npuc.dse.sweep import ExploreResult, explore

__all__ = ["ExploreResult", "explore"]
