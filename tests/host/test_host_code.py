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
from npuc.zoo import ZOO  # noqa: E402


@pytest.fixture(scope="module")
def bert():
    model, inputs = ZOO["transformers:bert-tiny"].load()
    return model, inputs, npuc.compile(model, inputs, host_code=True)


def test_cpu_segments_get_native_code_and_the_runtime_uses_it(bert):
    _, inputs, art = bert
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


def test_binaries_without_host_code_keep_format_1_0_and_run(bert):
    model, inputs, art = bert
    plain = npuc.compile(model, inputs)
    data = plain.to_bytes()
    assert struct.unpack_from("<HH", data, 8) == FORMAT_VERSION and not plain.npub.host_code
    stripped = dataclasses.replace(art.npub, host_code=())
    assert stripped.to_bytes() == data  # the host code is the only difference
    assert npuc.load(data).run(*inputs)[0].shape == art.run(*inputs)[0].shape


def test_host_code_for_another_machine_is_not_run_here():
    target = dataclasses.replace(load_target("npu-mid"), host_triple="aarch64-unknown-linux-gnu")
    model, inputs = ZOO["transformers:bert-tiny"].load()
    art = npuc.compile(model, inputs, target=target, host_code=True)
    assert {m.triple for m in art.npub.host_code} == {"aarch64-unknown-linux-gnu"}
    assert not runs_here("aarch64-unknown-linux-gnu") or native_triple().startswith("aarch64")
    if not runs_here("aarch64-unknown-linux-gnu"):
        assert art._executor.host_module(0) is None  # interpreted instead
    assert art.run(*inputs)[0].shape == (1, 16, 128)


def test_a_damaged_host_code_section_is_refused(bert):
    _, _, art = bert
    c = split_container(art.to_bytes())
    host = next(s for s in c.sections if s.kind == SectionKind.HOST_CODE)
    cut = [RawSection(s.kind, s.flags, s.payload[:-3]) if s.kind == SectionKind.HOST_CODE else s for s in c.sections]
    with pytest.raises(BinaryFormatError, match="HOST_CODE section"):
        npuc.load(assemble(dataclasses.replace(c, sections=tuple(cut))))
    as_3_0 = dataclasses.replace(c, version=(3, 0))
    with pytest.raises(BinaryFormatError, match="exists from format 3.1"):
        npuc.load(assemble(as_3_0))
    assert host.flags == 0  # optional: an older npuc skips it


def test_host_code_is_deterministic(bert):
    from npuc.host.aot import compile_host_code

    _, _, art = bert
    again = compile_host_code(dataclasses.replace(art.npub, host_code=()), art.target)
    assert again.to_bytes() == art.to_bytes()
