"""bench/vela_peer.py's restatement of npuc's int8 graph as int8 TFLite, checked without Vela:
the op sequence, NHWC/OHWI/1HWO layouts, and the quantized weights and biases against the
PyTorch module's own parameters."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

_PATH = Path(__file__).resolve().parents[2] / "bench" / "vela_peer.py"
_spec = importlib.util.spec_from_file_location("vela_peer", _PATH)
vp = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("vela_peer", vp)
_spec.loader.exec_module(vp)


class Net(torch.nn.Module):
    """Conv (stride 2: an explicit PAD), depthwise + ReLU6, 1x1 conv, residual add, mean, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = torch.nn.Conv2d(8, 8, 1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        s = torch.relu(self.stem(x))
        y = self.pw(torch.nn.functional.relu6(self.dw(s)))
        z = (y + s).mean(dim=(2, 3))
        return self.fc(z)


@pytest.fixture(scope="module")
def walked():
    torch.manual_seed(0)
    model = Net().eval()
    example = (torch.randn(1, 3, 16, 16),)
    samples = [(torch.randn(1, 3, 16, 16),) for _ in range(2)]
    g = vp.int8_graph(model, example, "npu-mid", samples, "net")
    return model, g, vp.tflite_spec(g)


def _tensor(spec, name):
    (t,) = [t for t in spec.tensors if t.name == name]
    return t


def test_op_sequence_and_io(walked):
    _, g, spec = walked
    assert [o.op for o in spec.ops] == ["PAD", "CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D", "ADD", "MEAN",
                                        "FULLY_CONNECTED"]
    (x,) = spec.inputs
    q = [n for n in g.nodes if n.op == "quantize"][0]
    assert spec.tensors[x].shape == (1, 16, 16, 3)
    assert spec.tensors[x].scale == (q.attrs.scale,) and spec.tensors[x].zero_point == (q.attrs.zero_point,)
    (y,) = spec.outputs
    assert spec.tensors[y].shape == (1, 5) and spec.tensors[y].dtype == "int8"
    pad = spec.ops[0]
    assert spec.data[spec.tensors[pad.inputs[1]].name].tolist() == [[0, 0], [1, 0], [1, 0], [0, 0]]
    assert spec.tensors[pad.outputs[0]].shape == (1, 17, 17, 3)
    conv = dict(spec.ops[1].fields)
    assert conv["Padding"] == vp.VALID and conv["StrideH"] == conv["StrideW"] == 2
    assert conv["FusedActivationFunction"] in (vp.ACT_NONE, vp.ACT_RELU)
    assert dict(spec.ops[2].fields)["Padding"] == vp.SAME and dict(spec.ops[2].fields)["DepthMultiplier"] == 1


@pytest.mark.parametrize("op_index, module, layout", [(1, "stem", (0, 2, 3, 1)), (2, "dw", (1, 2, 3, 0)),
                                                      (3, "pw", (0, 2, 3, 1))])
def test_conv_weights_and_biases_match_pytorch(walked, op_index, module, layout):
    model, _, spec = walked
    op = spec.ops[op_index]
    x, w, b = (spec.tensors[i] for i in op.inputs)
    conv = getattr(model, module)
    want_w = conv.weight.detach().numpy().transpose(layout)
    assert w.shape == want_w.shape and w.dtype == "int8" and set(w.zero_point) == {0}
    axis = 3 if op.op == "DEPTHWISE_CONV_2D" else 0
    assert w.axis == axis and len(w.scale) == want_w.shape[axis]
    scale = np.array(w.scale).reshape([-1 if d == axis else 1 for d in range(4)])
    got_w = spec.data[w.name].astype(np.float64) * scale
    assert np.all(np.abs(got_w - want_w) <= scale / 2 + 1e-7)  # per-channel int8: within half a step
    assert b.dtype == "int32" and b.shape == (want_w.shape[axis],)
    assert np.allclose(b.scale, np.array(x.scale[0]) * np.array(w.scale), rtol=1e-6)
    got_b = spec.data[b.name].astype(np.float64) * np.array(b.scale)
    assert np.all(np.abs(got_b - conv.bias.detach().numpy()) <= np.array(b.scale) / 2 + 1e-9)


def test_fully_connected_weights_match_pytorch(walked):
    model, _, spec = walked
    _, w, _ = (spec.tensors[i] for i in spec.ops[-1].inputs)
    scale = np.array(w.scale)[:, None]
    assert w.shape == (5, 8) and w.axis == 0
    assert np.all(np.abs(spec.data[w.name] * scale - model.fc.weight.detach().numpy()) <= scale / 2 + 1e-7)


def test_activations_keep_npuc_quantization(walked):
    _, g, spec = walked
    for n in g.nodes:
        for v in n.outputs:
            if v.type.dtype.value == "i8" and v.type.quant.axis is None and n.op != "const":
                t = _tensor(spec, v.name)
                assert t.scale == (v.type.quant.scale[0],) and t.zero_point == (v.type.quant.zero_point[0],)
                want = tuple(v.type.shape[d] for d in (0, 2, 3, 1)) if v.type.rank == 4 else v.type.shape
                assert t.shape == want


@pytest.mark.parametrize("size, kernel, stride, pad, want", [
    (56, 3, 1, 1, (vp.SAME, (1, 1))),
    (14, 1, 1, 0, (vp.VALID, (0, 0))),
    (224, 3, 2, 1, (None, (1, 0))),   # SAME would pad (0, 1): an explicit PAD keeps PyTorch's (1, 0)
    (224, 7, 2, 3, (None, (3, 2))),
    (113, 3, 2, 1, (vp.SAME, (1, 1))),
])
def test_padding_mode(size, kernel, stride, pad, want):
    assert vp.padding_mode(size, kernel, stride, 1, pad) == want


def test_fused_activation():
    assert vp.fused_activation("op", -128, 127, 0.1, 3) == vp.ACT_NONE
    assert vp.fused_activation("op", 3, 127, 0.1, 3) == vp.ACT_RELU
    assert vp.fused_activation("op", -10, 50, 0.1, -10) == vp.ACT_RELU6
    with pytest.raises(vp.NotExpressible, match="not a TFLite fused activation"):
        vp.fused_activation("op", -10, 40, 0.1, -10)


def test_an_op_without_int8_tflite_is_named():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)).eval()
    g = vp.int8_graph(model, (torch.randn(2, 8),), "npu-mid", [(torch.randn(2, 8),)], "ln")
    with pytest.raises(vp.NotExpressible, match="layer_norm"):
        vp.tflite_spec(g)


def test_padded_max_pool_same_for_timing_pad_for_the_check():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(3, 2, 1)).eval()
    g = vp.int8_graph(model, (torch.randn(1, 3, 8, 8),), "npu-mid", [(torch.randn(1, 3, 8, 8),)], "pool")
    timing, exact = vp.tflite_spec(g), vp.tflite_spec(g, exact_pool_padding=True)
    assert [o.op for o in timing.ops] == ["CONV_2D", "MAX_POOL_2D"] and timing.notes
    assert dict(timing.ops[-1].fields)["Padding"] == vp.SAME
    assert [o.op for o in exact.ops] == ["CONV_2D", "PAD", "MAX_POOL_2D"] and not exact.notes
    assert dict(exact.ops[-1].fields)["Padding"] == vp.VALID
    assert exact.tensors[exact.ops[1].outputs[0]].shape == (1, 9, 9, 4)
