"""Import of FX graph modules in torch.export's training IR (how a converted PT2E module is
imported without a second export): every training-IR table entry, in-place ops read as their
functional form, and ops without an entry decomposed one node at a time."""

from __future__ import annotations

import pytest
import torch

from npuc.frontend.aten_table import TRAINING_IR_OPS
from npuc.frontend.importer import import_graph_module
from npuc.interp import interpret


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv1d(3, 4, 3, padding=1)
        self.c2 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.drop = torch.nn.Dropout(0.3)
        self.act = torch.nn.ReLU(inplace=True)
        self.inorm = torch.nn.InstanceNorm2d(4, affine=True)  # a batch norm of its input's statistics

    def forward(self, x):
        a = self.c1(x.flatten(2)).reshape(1, 4, 8, 8)
        b = self.inorm(self.act(self.bn(self.c2(x))))
        y = self.drop(a + b)
        y = torch.where(y > 0, y, 0.5) + torch.where(y > 1, -1.0, y) + torch.where(y > 2, 2.0, -3.0)
        y = y + (y > 0.5).to(torch.float32)
        y = torch.nn.functional.batch_norm(y, self.bn.running_mean, self.bn.running_var, training=False)
        return torch.addcmul(y, y, y, value=0.5).flatten(1)  # addcmul: decomposed at import


def _module_and_ops():
    torch.manual_seed(0)
    m = Net().eval()
    x = torch.randn(1, 3, 8, 8)
    gm = torch.export.export(m, (x,)).module()
    ops = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    return m, x, gm, ops


def test_training_ir_graph_module_imports_like_eager():
    m, x, gm, ops = _module_and_ops()
    assert "aten.relu_.default" in ops and "aten.addcmul.default" in ops
    (y,) = interpret(import_graph_module(gm), x)
    torch.testing.assert_close(y, m(x), rtol=1e-4, atol=1e-5)


def test_every_training_ir_entry_is_exercised():
    _, _, gm, ops = _module_and_ops()
    covered = ops & TRAINING_IR_OPS
    # native_batch_norm appears only inside decompositions of batch_norm (QAT programs)
    assert covered == TRAINING_IR_OPS - {"aten.native_batch_norm.default"}, sorted(TRAINING_IR_OPS - covered)


def _traced(f, x):
    """An FX graph of ``f`` with the shape metadata the importer reads."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    gm = torch.fx.symbolic_trace(f)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    FakeTensorProp(gm, mode).propagate(mode.from_tensor(x))
    return gm


def test_native_batch_norm_imports_and_training_mode_is_refused():
    from npuc.errors import UnsupportedOpError

    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(4).eval()
    bn.running_var.fill_(2.0)
    x = torch.randn(1, 4, 3, 3)

    def f(x):
        return torch.ops.aten.native_batch_norm.default(x, None, None, bn.running_mean, bn.running_var,
                                                        False, 0.1, 1e-5)[0]

    (y,) = interpret(import_graph_module(_traced(f, x)), x)
    torch.testing.assert_close(y, f(x), rtol=1e-4, atol=1e-5)

    def g(x):
        return torch.ops.aten.dropout.default(x, 0.5, True)

    with pytest.raises(UnsupportedOpError, match="dropout in training mode"):
        import_graph_module(_traced(g, x))
