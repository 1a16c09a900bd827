"""How far a value is from its reference: relative L2 error, largest absolute error, SQNR."""

from __future__ import annotations

import math

import numpy as np


def compare(got: np.ndarray, ref: np.ndarray) -> tuple[float, float, float]:
    """(rel_l2, max_abs, sqnr_db) of ``got`` against ``ref``, both flattened in logical order.

    rel_l2 is ||got - ref|| / ||ref|| (the absolute norm when ref is all zeros); sqnr_db is
    10 log10(||ref||^2 / ||got - ref||^2) (inf when equal).  A non-finite value in ``got`` where
    ``ref`` is finite makes every figure the worst (inf error, -inf SQNR).
    """
    g = np.asarray(got, np.float64).reshape(-1)
    r = np.asarray(ref, np.float64).reshape(-1)
    if not np.isfinite(g).all() and np.isfinite(r).all():
        return math.inf, math.inf, -math.inf
    with np.errstate(all="ignore"):
        diff = g - r
        err2 = float(np.dot(diff, diff))
        ref2 = float(np.dot(r, r))
        max_abs = float(np.abs(diff).max()) if diff.size else 0.0
    rel = math.sqrt(err2 / ref2) if ref2 > 0 else math.sqrt(err2)
    if err2 == 0:
        sqnr = math.inf
    elif ref2 == 0:
        sqnr = -math.inf
    else:
        sqnr = 10.0 * math.log10(ref2 / err2)
    return rel, max_abs, sqnr
