"""The numerical debugger's findings: one record per value the NPU computes, in model order."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class LayerRecord:
    """One value an NPU kernel computed, against its reference.

    ``name`` is the kernel (the module path of the layer), ``value`` the graph value it holds,
    ``op`` the graph ops fused into the kernel, ``loc`` the source line.  ``rel_l2``, ``max_abs``
    and ``sqnr_db`` compare with ``reference`` (the fp32 interpreter for a float model, npuc's
    integer reference for int8: there ``max_abs`` counts int8 steps and only 0 is within
    tolerance).  For int8, ``float_rel_l2`` / ``float_sqnr_db`` compare the dequantized value with
    the float model's, and ``alone_sqnr_db`` is the SQNR of the model's outputs when this layer
    alone is quantized (the rest float).  ``compared`` is False when no kernel writes the value
    whole (``note`` says why); such a record is never out of tolerance.
    """

    index: int
    name: str
    value: str
    op: str
    kind: str
    segment: str
    loc: str
    shape: tuple[int, ...]
    reference: str
    rel_l2: float
    max_abs: float
    sqnr_db: float
    within_tolerance: bool
    compared: bool = True
    note: str = ""
    float_rel_l2: float | None = None
    float_sqnr_db: float | None = None
    alone_sqnr_db: float | None = None

    @property
    def source(self) -> str:
        return self.loc


def _json_float(x):
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)  # "inf", "-inf", "nan": JSON has no literal for them
    return x


@dataclass(frozen=True)
class DebugReport:
    """What ``npuc.debug`` found.  ``first_divergent`` is the first record out of tolerance."""

    model: str
    target: str
    quantize: str | None
    tolerance: str
    layers: tuple[LayerRecord, ...]
    outputs: tuple[tuple[float, float, float], ...] = ()  # per model output: rel_l2, max_abs, sqnr_db vs the reference
    float_outputs: tuple[tuple[float, float, float], ...] = ()  # int8: per output against the float model
    op_noise_share: tuple[tuple[str, int, float, float], ...] = ()  # int8: (float op, layers, noise share, MAC share)
    suggested_float_ops: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def first_divergent(self) -> LayerRecord | None:
        return next((r for r in self.layers if not r.within_tolerance), None)

    def costliest_layers(self, n: int = 5) -> list[LayerRecord]:
        """int8: the ``n`` layers whose quantization alone costs the most output SQNR."""
        costed = [r for r in self.layers if r.alone_sqnr_db is not None]
        return sorted(costed, key=lambda r: (r.alone_sqnr_db, r.index))[:n]

    def to_dict(self) -> dict:
        def rec(r: LayerRecord) -> dict:
            d = {k: _json_float(v) for k, v in asdict(r).items()}
            d["shape"] = list(r.shape)
            return d

        first = self.first_divergent
        return {
            "model": self.model, "target": self.target, "quantize": self.quantize, "tolerance": self.tolerance,
            "first_divergent": None if first is None else rec(first),
            "layers": [rec(r) for r in self.layers],
            "outputs": [dict(zip(("rel_l2", "max_abs", "sqnr_db"), map(_json_float, o))) for o in self.outputs],
            "float_outputs": [dict(zip(("rel_l2", "max_abs", "sqnr_db"), map(_json_float, o))) for o in self.float_outputs],
            "op_noise_share": [{"op": op, "layers": n, "share": s, "mac_share": m} for op, n, s, m in self.op_noise_share],
            "costliest_layers": [r.name for r in self.costliest_layers()],
            "suggested_float_ops": list(self.suggested_float_ops),
            "notes": list(self.notes),
        }
