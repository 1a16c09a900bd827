"""The host back-end: CPU segments compiled ahead of time (IREE llvm-cpu) into the HOST_CODE
section, used by the runtime when the code is for this machine."""

from __future__ import annotations

import dataclasses
import struct

import pytest

pytest.importorskip("xdsl")
pytest.importorskip("iree.compiler")
pytest.importorskip("iree.runtime")

import npuc  # noqa: E402
from npuc.errors import BinaryFormatError  # noqa: E402
from npuc.host.aot import native_triple, runs_here  # noqa: E402
from npuc.runtime.npub import HOST_CODE_VERSION, FORMAT_VERSION, RawSection, SectionKind, assemble, split_container  # noqa: E402
from npuc.targets import load_target  # noqa: E402
import torch  # noqa: E402


class ErfHead(torch.nn.Module):
    """Two NPU linears around erf, which the vector unit does not compute: one CPU segment."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.b(torch.erf(self.a(x)))


def _erf_head():
    torch.manual_seed(0)
    return ErfHead().eval(), (torch.randn(3, 16),)


@pytest.fixture(scope="module")
def cpu_model():
    """A model with a CPU segment (the zoo's tiny transformers now run wholly on the NPU)."""
    model, inputs = _erf_head()
    return model, inputs, npuc.compile(model, inputs, host_code=True)


def test_cpu_segments_get_native_code_and_the_runtime_uses_it(cpu_model):
    _, inputs, art = cpu_model
    assert art.cpu_segments >= 1 and len(art.npub.host_code) == art.cpu_segments
    assert all(m.triple == native_triple() for m in art.npub.host_code)
    data = art.to_bytes()
    assert struct.unpack_from("<HH", data, 8) == HOST_CODE_VERSION
    loaded = npuc.load(data)
    assert loaded.npub.host_code == art.npub.host_code
    assert loaded._executor.host_module(0) is not None
    native = loaded.run(*inputs)
    loaded._executor.use_host_code = False
    interpreted = loaded.run(*inputs)
    for a, b in zip(native, interpreted):
        assert (a - b).abs().max() <= 1e-5 * max(1.0, float(b.abs().max()))


def test_binaries_without_host_code_keep_format_1_0_and_run(cpu_model):
    model, inputs, art = cpu_model
    plain = npuc.compile(model, inputs)
    data = plain.to_bytes()
    assert struct.unpack_from("<HH", data, 8) == FORMAT_VERSION and not plain.npub.host_code
    stripped = dataclasses.replace(art.npub, host_code=())
    assert stripped.to_bytes() == data  # the host code is the only difference
    assert npuc.load(data).run(*inputs)[0].shape == art.run(*inputs)[0].shape


def test_host_code_for_another_machine_is_not_run_here():
    target = dataclasses.replace(load_target("npu-mid"), host_triple="aarch64-unknown-linux-gnu")
    model, inputs = _erf_head()
    art = npuc.compile(model, inputs, target=target, host_code=True)
    assert {m.triple for m in art.npub.host_code} == {"aarch64-unknown-linux-gnu"}
    assert not runs_here("aarch64-unknown-linux-gnu") or native_triple().startswith("aarch64")
    if not runs_here("aarch64-unknown-linux-gnu"):
        assert art._executor.host_module(0) is None  # interpreted instead
    assert art.run(*inputs)[0].shape == (3, 8)


def test_a_damaged_host_code_section_is_refused(cpu_model):
    _, _, art = cpu_model
    c = split_container(art.to_bytes())
    host = next(s for s in c.sections if s.kind == SectionKind.HOST_CODE)
    cut = [RawSection(s.kind, s.flags, s.payload[:-3]) if s.kind == SectionKind.HOST_CODE else s for s in c.sections]
    with pytest.raises(BinaryFormatError, match="HOST_CODE section"):
        npuc.load(assemble(dataclasses.replace(c, sections=tuple(cut))))
    as_4_0 = dataclasses.replace(c, version=(4, 0))
    with pytest.raises(BinaryFormatError, match="exists from format 4.1"):
        npuc.load(assemble(as_4_0))
    assert host.flags == 0  # optional: an older npuc skips it


def test_host_code_is_deterministic(cpu_model):
    from npuc.host.aot import compile_host_code

    _, _, art = cpu_model
    again = compile_host_code(dataclasses.replace(art.npub, host_code=()), art.target)
    assert again.to_bytes() == art.to_bytes()
