"""Profile layers keep the model's module names: a Sequential child "0" stays "0", int8 layers too."""

from __future__ import annotations

import torch

import npuc


def _seq():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 1)).eval()
    return m, torch.randn(1, 3, 8, 8)


def test_a_sequential_child_keeps_its_number():
    m, x = _seq()
    g = npuc.import_model(m, (x,))
    convs = [n.outputs[0].name for n in g.nodes if n.op == "conv2d"]
    assert convs == ["0", "2"]
    assert [layer.name for layer in npuc.compile(m, (x,)).profile(x).layers] == ["0", "2"]


def test_int8_layers_keep_their_module_names():
    m, x = _seq()
    art = npuc.compile(m, (x,), quantize="int8", calibration=[(x,)])
    assert [layer.name for layer in art.profile(x).layers] == ["0", "2"]  # not qconv2d_9
    assert [layer.op for layer in art.profile(x).layers] == ["qconv2d", "qconv2d"]


def test_unnamed_values_are_still_numbered_by_op():
    class F(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.relu(x * 2.0)

    x = torch.randn(1, 4, 8, 8)
    names = [layer.name for layer in npuc.compile(F(), (x,)).profile(x).layers]
    assert names and all(not n.isdigit() for n in names)
