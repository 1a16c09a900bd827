"""The command line: the ISA commands and `npuc targets`, through click's test runner."""

from __future__ import annotations

import json

from click.testing import CliRunner

from npuc.cli import main
from npuc.isa import assemble

RELU = """# relu over 1024 int8 values
DMA_LOAD esize=1 dram_addr=0 local_addr=0 n0=1024 signal=vector
VUN op=relu dtype=int8 n0=1024 dst=0x1000 src=0 wait=load signal=store
DMA_STORE esize=1 dram_addr=1024 local_addr=0x1000 n0=1024 wait=vector
END
"""


def test_asm_disasm_and_sim_agree_on_text_and_binary(tmp_path):
    src = tmp_path / "relu.s"
    src.write_text(RELU)
    runner = CliRunner()
    out = runner.invoke(main, ["asm", str(src), "-o", str(tmp_path / "relu.bin")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "relu.bin").read_bytes() == assemble(RELU).encode()
    dis = runner.invoke(main, ["disasm", str(tmp_path / "relu.bin")])
    assert dis.exit_code == 0 and dis.output.count("\n") == 4 and "VUN op=relu" in dis.output
    from_text = runner.invoke(main, ["sim", str(src), "--trace", str(tmp_path / "t.json")])
    from_bin = runner.invoke(main, ["sim", str(tmp_path / "relu.bin")])
    assert from_text.exit_code == 0 and from_bin.exit_code == 0, from_text.output + from_bin.output
    total = [line for line in from_text.output.splitlines() if line.startswith("total")]
    assert total and total == [line for line in from_bin.output.splitlines() if line.startswith("total")]
    assert "DRAM 1,024 B read, 1,024 B written" in from_text.output.replace("\n", " ")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    slices = sorted((e["args"]["index"], e["name"]) for e in events if e.get("ph") == "X")
    assert [name for _, name in slices] == ["DMA_LOAD", "VUN", "DMA_STORE", "END"][: len(slices)]
    assert [name for _, name in slices][:3] == ["DMA_LOAD", "VUN", "DMA_STORE"]


def test_sim_reports_bad_assembly_as_one_sentence(tmp_path):
    bad = tmp_path / "bad.s"
    bad.write_text("DMA_LOAD esize=1\nFROB x=1\nEND\n")
    out = CliRunner().invoke(main, ["sim", str(bad)])
    assert out.exit_code == 1
    assert "error:" in out.output and "line" in out.output and "Traceback" not in out.output


def test_targets_lists_presets_and_rejects_a_bad_file(tmp_path):
    runner = CliRunner()
    out = runner.invoke(main, ["targets"])
    assert out.exit_code == 0 and "npu-mid (default)" in out.output and "npu-small" in out.output
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n')
    out = runner.invoke(main, ["targets", str(bad)])
    assert out.exit_code == 1 and "bad.toml" in out.output and "Traceback" not in out.output
