"""Normalization ops: inference batch norm, layer norm, softmax and log-softmax."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from npuc.ir.opdef import OpDef, Trait, fail, register
from npuc.ir.ops.common import require_dim, require_float, require_min_rank, require_same_dtype


def _require_eps(op: str, eps: float) -> None:
    if not (eps >= 0 and math.isfinite(eps)):
        raise fail(op, f"eps = {eps} must be a finite number >= 0")


# -------------------------------------------------------------------------------- batch_norm


@dataclass(frozen=True)
class BatchNormAttrs:
    """``batch_norm`` (inference form): the epsilon added to the running variance."""

    eps: float = 1e-5


def _batch_norm_infer(ins, a: BatchNormAttrs):
    x = ins[0]
    require_min_rank("batch_norm", x, 2, "input (N, C, ...)")
    require_float("batch_norm", x)
    require_same_dtype("batch_norm", ins)
    c = x.shape[1]
    for name, t in zip(("weight", "bias", "running_mean", "running_var"), ins[1:]):
        if t.shape != (c,):
            raise fail("batch_norm", f"{name} must be of shape [{c}] (the channels of {x}), got {t}")
    return (x,)


def _batch_norm_ref(ins, a: BatchNormAttrs):
    x, w, b, mean, var = ins
    return (F.batch_norm(x, mean, var, w, b, training=False, eps=a.eps),)


register(
    OpDef(
        name="batch_norm",
        traits=frozenset({Trait.IMAGE_PRODUCER}),
        summary="(x - running_mean) / sqrt(running_var + eps) * weight + bias over channel dim 1",
        attrs=BatchNormAttrs,
        infer=_batch_norm_infer,
        verify=lambda ins, a: _require_eps("batch_norm", a.eps),
        reference=_batch_norm_ref,
        min_inputs=5,
        max_inputs=5,
        category="norm",
        operands=("x", "weight", "bias", "running_mean", "running_var"),
    )
)

# -------------------------------------------------------------------------------- layer_norm


@dataclass(frozen=True)
class LayerNormAttrs:
    """``layer_norm``: how many trailing dims are normalized together, and the epsilon."""

    normalized_rank: int = 1
    eps: float = 1e-5


def _layer_norm_verify(ins, a: LayerNormAttrs) -> None:
    _require_eps("layer_norm", a.eps)
    if not 1 <= a.normalized_rank <= ins[0].rank:
        raise fail("layer_norm", f"normalized_rank = {a.normalized_rank} must be in 1..{ins[0].rank} (the input rank)")


def _layer_norm_infer(ins, a: LayerNormAttrs):
    x = ins[0]
    require_float("layer_norm", x)
    require_same_dtype("layer_norm", ins)
    tail = x.shape[x.rank - a.normalized_rank:]
    for name, t in zip(("weight", "bias"), ins[1:]):
        if t.shape != tail:
            raise fail("layer_norm", f"{name} must be of shape {list(tail)}, got {t}")
    return (x,)


def _layer_norm_ref(ins, a: LayerNormAttrs):
    x, w, b = ins
    return (F.layer_norm(x, x.shape[x.dim() - a.normalized_rank:], w, b, a.eps),)


register(
    OpDef(
        name="layer_norm",
        traits=frozenset({Trait.TRANSCENDENTAL}),
        summary="normalize over the last normalized_rank dims (biased variance), then * weight + bias",
        attrs=LayerNormAttrs,
        infer=_layer_norm_infer,
        verify=_layer_norm_verify,
        reference=_layer_norm_ref,
        min_inputs=3,
        max_inputs=3,
        category="norm",
        operands=("x", "weight", "bias"),
    )
)

# ---------------------------------------------------------------------------------- softmax


@dataclass(frozen=True)
class SoftmaxAttrs:
    """``softmax`` / ``log_softmax``: the (non-negative) dim normalized over."""

    dim: int = 0


def _softmax(name: str, summary: str, fn) -> None:
    def verify(ins, a: SoftmaxAttrs) -> None:
        require_min_rank(name, ins[0], 1)
        require_dim(name, a.dim, ins[0].rank)

    def infer(ins, a: SoftmaxAttrs):
        require_float(name, ins[0])
        return (ins[0],)

    register(
        OpDef(
            name=name,
            traits=frozenset({Trait.TRANSCENDENTAL}),
            summary=summary,
            attrs=SoftmaxAttrs,
            infer=infer,
            verify=verify,
            reference=lambda ins, a: (fn(ins[0], dim=a.dim),),
            category="norm",
            operands=("x",),
        )
    )


_softmax("softmax", "exp(x) / sum(exp(x)) along dim", torch.softmax)
_softmax("log_softmax", "x - log(sum(exp(x))) along dim", torch.log_softmax)

# -------------------------------------------------------------------------------- group_norm


@dataclass(frozen=True)
class GroupNormAttrs:
    """``group_norm``: the number of channel groups and the epsilon."""

    groups: int = 1
    eps: float = 1e-5


def _group_norm_verify(ins, a: GroupNormAttrs) -> None:
    _require_eps("group_norm", a.eps)
    if a.groups < 1 or ins[0].rank < 2 or ins[0].shape[1] % a.groups != 0:
        raise fail("group_norm", f"groups = {a.groups} must divide the {ins[0].shape[1] if ins[0].rank > 1 else '?'} channels")


def _group_norm_infer(ins, a: GroupNormAttrs):
    x = ins[0]
    require_float("group_norm", x)
    require_min_rank("group_norm", x, 2)
    require_same_dtype("group_norm", ins)
    for name, t in zip(("weight", "bias"), ins[1:]):
        if t.shape != (x.shape[1],):
            raise fail("group_norm", f"{name} must be of shape [{x.shape[1]}] (one per channel), got {t}")
    return (x,)


register(
    OpDef(
        name="group_norm",
        summary="normalize each group of channels over its channels and spatial dims, then * weight + bias "
                "per channel (instance norm: groups = channels)",
        attrs=GroupNormAttrs,
        infer=_group_norm_infer,
        verify=_group_norm_verify,
        reference=lambda ins, a: (F.group_norm(ins[0], a.groups, ins[1], ins[2], a.eps),),
        min_inputs=3,
        max_inputs=3,
        category="norm",
        operands=("x", "weight", "bias"),
    )
)
