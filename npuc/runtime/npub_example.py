"""A small, complete .npub container to show the format and to test it.

:func:`example_npub` describes a quantized CNN split in three steps: an NPU segment, a CPU
fallback subgraph, a second NPU segment.  Its program bytes are placeholders (not instructions of
the ISA), so load it with ``decode_code=no_code_check``.  :func:`relu_npub` is a one-segment
container whose program is real (it needs :mod:`npuc.isa`): y = relu(x) on 16 int8 values.
"""

from __future__ import annotations

import hashlib

from npuc.ir.types import DType, QuantParams, TensorType
from npuc.runtime.npub import (
    BindingRole,
    CpuBinding,
    CpuSubgraph,
    DebugEntry,
    IOSignature,
    IOTensor,
    MemoryPlan,
    Metadata,
    Npub,
    Region,
    RegionKind,
    Segment,
    SegmentKind,
    SramUsage,
)

EXAMPLE_TARGET = "npu-mid"
EXAMPLE_FINGERPRINT = hashlib.sha256(b"npuc example target npu-mid").digest()

_CPU_GRAPH = """graph @cpu0(%t0: tensor<1x64xf32>) -> (tensor<1x64xf32>) {
  %c = const @"head.scale" : tensor<64xf32>
  %0 = mul(%t0, %c) : tensor<1x64xf32> loc("model.py:31")
  %1 = erf(%0) : tensor<1x64xf32> loc("model.py:31")
  return %1
}
"""


def filler(label: str, n: int) -> bytes:
    """``n`` deterministic pseudo-random bytes named by ``label``."""
    out = b""
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(f"{label}/{counter}".encode()).digest()
        counter += 1
    return out[:n]


def _constants() -> bytes:
    conv_w = filler("conv.weight", 4 * 3 * 3 * 3).ljust(128, b"\0")  # i8, 108 bytes -> 128
    conv_b = filler("conv.bias", 4 * 4).ljust(64, b"\0")  # i32
    scale = filler("head.scale", 64 * 4)  # f32, at offset 192
    fc_w = filler("fc.weight", 10 * 64)  # i8, at offset 448
    return conv_w + conv_b + scale + fc_w


def _memory_plan() -> MemoryPlan:
    regions = (
        Region("constants", RegionKind.CONSTANTS, 0, 1088),
        Region("inputs", RegionKind.IO, 1088, 3072),
        Region("outputs", RegionKind.IO, 4160, 320),
        Region("activations", RegionKind.ACTIVATIONS, 4480, 1024),
        Region("scratch", RegionKind.SCRATCH, 5504, 640),
    )
    return MemoryPlan(8192, regions, (SramUsage(49152, 16384), SramUsage(8192, 4096)))


def _io_signature() -> IOSignature:
    x = TensorType((1, 32, 32, 3), DType.i8, QuantParams((0.0078125,), (-1,)), "NHWC")
    feat_q = QuantParams((0.05, 0.04, 0.061, 0.02), (0, 0, 0, 0), axis=1)
    features = TensorType((1, 4, 8, 8), DType.i8, feat_q, "NCHW")
    logits = TensorType((1, 10), DType.i8, QuantParams((0.125,), (3,)))
    return IOSignature(
        inputs=(IOTensor("x", x, 1088),),
        outputs=(IOTensor("features", features, 4160), IOTensor("logits", logits, 4416)),
    )


def _cpu_fallback() -> tuple[CpuSubgraph, ...]:
    f = TensorType((1, 64), DType.f32)
    bindings = (
        CpuBinding("t0", BindingRole.INPUT, 4480, f),
        CpuBinding("head.scale", BindingRole.CONSTANT, 192, TensorType((64,), DType.f32)),
        CpuBinding("1", BindingRole.OUTPUT, 4736, f),
    )
    return (CpuSubgraph("cpu0", _CPU_GRAPH, bindings),)


def _segments() -> tuple[Segment, ...]:
    return (
        Segment(SegmentKind.NPU, "npu0", 0, ("x",), ("features", "t0")),
        Segment(SegmentKind.CPU, "cpu0", 0, ("t0",), ("t1",)),
        Segment(SegmentKind.NPU, "npu1", 1, ("t1",), ("logits",)),
    )


def _debug_map() -> tuple[tuple[DebugEntry, ...], ...]:
    return (
        (
            DebugEntry(0, "conv2d", "model.py:12"),
            DebugEntry(9, "relu", "model.py:13"),
            DebugEntry(14, "avg_pool2d", None),
        ),
        (DebugEntry(0, "linear", "model.py:40"), DebugEntry(7, "requantize", None)),
    )


def example_npub() -> Npub:
    """A realistic container: 2 NPU programs, 1 CPU subgraph, quantized IO, debug map, metadata."""
    return Npub(
        target_name=EXAMPLE_TARGET,
        target_fingerprint=EXAMPLE_FINGERPRINT,
        code_segments=(filler("program0", 96), filler("program1", 200)),
        constants=_constants(),
        memory_plan=_memory_plan(),
        io_signature=_io_signature(),
        segments=_segments(),
        cpu_fallback=_cpu_fallback(),
        debug_map=_debug_map(),
        metadata=Metadata("0.1.0", "tiny_cnn", (("opt_level", "2"), ("quantization", "int8"))),
    )


RELU_PROGRAM = """
DMA_LOAD esize=1 dram_addr=0x40 local_addr=0x0 n0=16 signal=vector
VUN op=relu dtype=int8 n0=16 dst=0x100 src=0x0 wait=load signal=store
DMA_STORE esize=1 dram_addr=0x80 local_addr=0x100 n0=16 wait=vector
END
"""


def relu_npub(target_name: str = EXAMPLE_TARGET, target_fingerprint: bytes = EXAMPLE_FINGERPRINT) -> Npub:
    """y = relu(x) for 16 int8 values, one NPU segment of real instructions (x at 0x40, y at 0x80)."""
    from npuc.isa import assemble

    t = TensorType((16,), DType.i8)
    regions = (Region("input", RegionKind.IO, 0x40, 16), Region("output", RegionKind.IO, 0x80, 16))
    return Npub(
        target_name=target_name,
        target_fingerprint=target_fingerprint,
        code_segments=(assemble(RELU_PROGRAM).encode(),),
        constants=b"",
        memory_plan=MemoryPlan(0x100, regions, (SramUsage(0x110, 0),)),
        io_signature=IOSignature((IOTensor("x", t, 0x40),), (IOTensor("y", t, 0x80),)),
        segments=(Segment(SegmentKind.NPU, "npu0", 0, ("x",), ("y",)),),
        debug_map=((DebugEntry(0, "input"), DebugEntry(1, "relu", "model.py:3"), DebugEntry(2, "output")),),
        metadata=Metadata("0.1.0", "relu16"),
    )
