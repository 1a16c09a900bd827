"""Every entry of the ATen table, imported and run against PyTorch eager.

Most entries are driven by PyTorch's OpInfo database: for each OpInfo below, up to
``MAX_SAMPLES`` float32 samples (bool for bitwise ops) are exported, imported, interpreted and
compared with eager.  Samples with a zero-size tensor are left out (npuc compiles no empty
tensors).  npuc may refuse a sample with an UnsupportedOpError or ExportError (an exponent tensor,
a training-mode batch norm, ...), but at least one sample of each OpInfo must import and match,
and the ATen entries listed for the OpInfo must appear in a sample that did.

Entries that no OpInfo sample reaches in the form npuc supports are tested by hand in
``HANDWRITTEN`` (each with the reason its OpInfo does not serve).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from atenlib import run_case
from npuc.frontend.aten_table import ATEN_TABLE, TRAINING_IR_OPS

MAX_SAMPLES = 3
SAMPLE_LIMIT = 10

# OpInfo ("name" or "name.variant") -> the ATen table entries it must cover.
OPINFO_CASES: dict[str, tuple[str, ...]] = {
    "abs": ("aten.abs.default",),
    "nn.functional.relu": ("aten.relu.default",),
    "sigmoid": ("aten.sigmoid.default",),
    "tanh": ("aten.tanh.default",),
    "nn.functional.silu": ("aten.silu.default",),
    "nn.functional.hardswish": ("aten.hardswish.default",),
    "nn.functional.hardsigmoid": ("aten.hardsigmoid.default",),
    "exp": ("aten.exp.default",),
    "log": ("aten.log.default",),
    "sqrt": ("aten.sqrt.default",),
    "rsqrt": ("aten.rsqrt.default",),
    "neg": ("aten.neg.default",),
    "reciprocal": ("aten.reciprocal.default",),
    "erf": ("aten.erf.default",),
    "sin": ("aten.sin.default",),
    "cos": ("aten.cos.default",),
    "logical_not": ("aten.logical_not.default",),
    "bitwise_not": ("aten.bitwise_not.default",),
    "nn.functional.gelu": ("aten.gelu.default",),
    "clamp": ("aten.clamp.Tensor",),
    "nn.functional.hardtanh": ("aten.hardtanh.default",),
    "nn.functional.leaky_relu": ("aten.leaky_relu.default",),
    "add": ("aten.add.Tensor",),
    "sub": ("aten.sub.Tensor",),
    "mul": ("aten.mul.Tensor",),
    "div.no_rounding_mode": ("aten.div.Tensor",),
    "maximum": ("aten.maximum.default",),
    "minimum": ("aten.minimum.default",),
    "eq": ("aten.eq.Tensor",),
    "ne": ("aten.ne.Tensor",),
    "lt": ("aten.lt.Tensor",),
    "le": ("aten.le.Tensor",),
    "gt": ("aten.gt.Tensor",),
    "ge": ("aten.ge.Tensor",),
    "logical_and": ("aten.logical_and.default",),
    "logical_or": ("aten.logical_or.default",),
    "logical_xor": ("aten.logical_xor.default",),
    "bitwise_and": ("aten.bitwise_and.Tensor",),
    "bitwise_or": ("aten.bitwise_or.Tensor",),
    "bitwise_xor": ("aten.bitwise_xor.Tensor",),
    "where": ("aten.where.self",),
    "nn.functional.conv2d": ("aten.convolution.default",),
    "nn.functional.conv1d": (),
    "nn.functional.linear": ("aten.linear.default",),
    "mm": ("aten.mm.default",),
    "bmm": ("aten.bmm.default",),
    "matmul": ("aten.matmul.default",),
    "addmm": ("aten.addmm.default",),
    "nn.functional.batch_norm": ("aten._native_batch_norm_legit_no_training.default",),
    "nn.functional.layer_norm": ("aten.native_layer_norm.default",),
    "softmax": ("aten._softmax.default",),
    "log_softmax": ("aten._log_softmax.default",),
    "nn.functional.max_pool2d": ("aten.max_pool2d_with_indices.default",),
    "nn.functional.avg_pool2d": ("aten.avg_pool2d.default",),
    "nn.functional.adaptive_avg_pool2d": ("aten.adaptive_avg_pool2d.default",),
    "sum": ("aten.sum.dim_IntList",),
    "mean": ("aten.mean.dim", "aten.mean.default"),
    "amax": ("aten.amax.default",),
    "amin": ("aten.amin.default",),
    "max.reduction_with_dim": ("aten.max.dim",),
    "max.reduction_no_dim": ("aten.max.default",),
    "min.reduction_with_dim": ("aten.min.dim",),
    "min.reduction_no_dim": ("aten.min.default",),
    "any": ("aten.any.default", "aten.any.dim", "aten.any.dims"),
    "argmax": ("aten.argmax.default",),
    "argmin": ("aten.argmin.default",),
    "view": ("aten.view.default",),
    "squeeze": ("aten.squeeze.dims",),
    "unsqueeze": ("aten.unsqueeze.default",),
    "permute": ("aten.permute.default",),
    "t": ("aten.alias.default",),
    "expand": ("aten.expand.default",),
    "select": ("aten.select.int",),
    "cat": ("aten.cat.default",),
    "split_with_sizes": ("aten.split_with_sizes.default",),
    "constant_pad_nd": ("aten.constant_pad_nd.default",),
    "nn.functional.embedding": ("aten.embedding.default",),
    "index_select": ("aten.index_select.default",),
    "clone": ("aten.clone.default",),
    "to": ("aten._to_copy.default", "aten._assert_tensor_metadata.default"),
    "__getitem__": ("aten.slice.Tensor", "aten.index.Tensor"),
}

BOOL_OPINFOS = {"bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor"}

_X = torch.linspace(-2.0, 2.0, 2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
_B = _X > 0.3

# ATen entry -> (why no OpInfo serves it, the call, its arguments).
HANDWRITTEN: dict[str, tuple[str, object, tuple]] = {
    **{
        f"aten.{op}.Scalar": (
            "the OpInfo samples of the Python operator export the .Tensor overload",
            getattr(torch.ops.aten, op).Scalar,
            (_X, 1.5),
        )
        for op in ("add", "sub", "mul", "div")
    },
    **{
        f"aten.{op}.Scalar": (
            "the comparison OpInfos compare two tensors",
            getattr(torch, op),
            (_X, 0.25),
        )
        for op in ("eq", "ne", "lt", "le", "gt", "ge")
    },
    **{
        f"aten.bitwise_{op}.Scalar": (
            "the bitwise OpInfos combine two tensors",
            getattr(torch, f"bitwise_{op}"),
            (_B, True),
        )
        for op in ("and", "or", "xor")
    },
    "aten.clamp.default": ("the clamp OpInfo passes tensor bounds", torch.clamp, (_X, -0.5, 0.75)),
    "aten.pow.Tensor_Scalar": ("the pow OpInfo raises to tensor exponents", torch.pow, (_X.abs() + 0.1, 2.5)),
    "aten.pow.Tensor_Tensor": (
        "npuc takes only a constant exponent tensor, which no OpInfo sample has",
        lambda x: x ** torch.tensor(3.0),
        (_X,),
    ),
    "aten.div.Tensor_mode": (
        "npuc takes rounding_mode=None only, which the OpInfo variants do not sample",
        lambda x, y: torch.div(x, y, rounding_mode=None),
        (_X, _X.flip(0) + 3.0),
    ),
    "aten.upsample_nearest2d.vec": (
        "the interpolate OpInfo samples 1-D and 3-D resizes, which decompose differently",
        lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
        (_X,),
    ),
    # ops added for real models (issue 14); tests/regress/test_model_ops.py has more uses of each
    "aten.elu.default": ("checked with its three scalars", lambda x: F.elu(x, 0.7), (_X,)),
    "aten.log1p.default": ("checked on positive inputs", lambda x: torch.log1p(x.abs()), (_X,)),
    "aten.expm1.default": ("CELU decomposes into it", lambda x: torch.expm1(x), (_X,)),
    "aten.flip.default": ("checked on two dims", lambda x: torch.flip(x, [0, -1]), (_X,)),
    "aten.cumsum.default": ("checked on a negative dim", lambda x: torch.cumsum(x, -1), (_X,)),
    "aten.gather.default": ("checked with a constant index", lambda x: torch.gather(x, 1, torch.zeros_like(x, dtype=torch.long)[:, :2]), (_X,)),
    "aten.native_group_norm.default": ("group norm of an NCHW tensor", lambda x: F.group_norm(x, 1), (_X,)),
    "aten._native_batch_norm_legit.no_stats": ("instance norm", lambda x: F.instance_norm(x), (_X,)),
    "aten.upsample_bilinear2d.vec": ("a scale factor that is not the size ratio", lambda x: F.interpolate(
        x, scale_factor=1.5, mode="bilinear"), (_X,)),
    "aten.grid_sampler_2d.default": ("border padding", lambda x: F.grid_sample(
        x, torch.linspace(-1.2, 1.2, 2 * 3 * 2 * x.shape[0]).reshape(x.shape[0], 3, 2, 2), padding_mode="border",
        align_corners=False), (_X,)),
}


def _opinfo(key: str):
    from torch.testing._internal.common_methods_invocations import op_db

    for o in op_db:
        full = f"{o.name}.{o.variant_test_name}" if o.variant_test_name else o.name
        if full == key:
            return o
    raise LookupError(f"no OpInfo {key}")


def _has_empty_tensor(sample) -> bool:
    leaves = torch.utils._pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return any(isinstance(x, torch.Tensor) and x.numel() == 0 for x in leaves)


def _samples(key: str):
    """The OpInfo's usable samples, lazily (float32, or bool for bitwise ops; no empty tensors)."""
    op = _opinfo(key)
    dtype = torch.bool if key in BOOL_OPINFOS else torch.float32
    for s in op.sample_inputs("cpu", dtype, requires_grad=False):
        if not _has_empty_tensor(s):
            yield op, s


def test_every_table_entry_is_tested():
    driven = {e for entries in OPINFO_CASES.values() for e in entries}
    tested = driven | set(HANDWRITTEN)
    assert not driven & set(HANDWRITTEN)
    # The quantize/dequantize ops of quantized programs are tested in tests/quant/, the
    # training-IR entries in tests/frontend/test_training_ir.py.
    aten = {k for k in ATEN_TABLE if k.startswith("aten.") and k not in TRAINING_IR_OPS}
    assert sorted(aten - tested) == []
    assert sorted(tested - aten) == []


@pytest.mark.parametrize("key", sorted(OPINFO_CASES))
def test_opinfo_samples_match_eager(key):
    """Run samples until MAX_SAMPLES ran and every listed entry was exercised (at most SAMPLE_LIMIT)."""
    wanted = set(OPINFO_CASES[key])
    covered: set[str] = set()
    statuses: list[str] = []
    for op, s in _samples(key):
        r = run_case(op.op, (s.input, *s.args), s.kwargs)
        statuses.append(r.status)
        if r.status == "ok":
            covered |= r.aten_ops
        if (len(statuses) >= MAX_SAMPLES and wanted <= covered) or len(statuses) == SAMPLE_LIMIT:
            break
    assert "ok" in statuses, f"no sample of {key} imported: {statuses}"
    missing = sorted(wanted - covered)
    assert not missing, f"{key}: no imported sample exercised {missing}"


@pytest.mark.parametrize("entry", sorted(HANDWRITTEN))
def test_handwritten_entry_matches_eager(entry):
    why, fn, args = HANDWRITTEN[entry]
    assert why
    r = run_case(fn, args, {})
    assert r.status == "ok", r.error
    assert entry in r.aten_ops, f"the call exported {sorted(r.aten_ops)}, not {entry}"
