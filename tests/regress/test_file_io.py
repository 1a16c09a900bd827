"""Files npuc writes are written atomically, and every failure to read or write one is an
NpucError naming the path (issue 14)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch import nn

import npuc
from npuc.cli import main
from npuc.errors import FileError, NpucError
from npuc.fileio import check_output_path, make_dir, write_atomic

RELU = "VUN op=relu dtype=int8 n0=16 dst=0x100 src=0\nEND\n"


@pytest.fixture(scope="module")
def art():
    torch.manual_seed(0)
    return npuc.compile(nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval(), (torch.randn(1, 8),), name="tiny")


def test_write_atomic_replaces_whole_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "f.bin"
    write_atomic(p, b"old contents")
    os.chmod(p, 0o640)
    write_atomic(p, b"new")
    assert p.read_bytes() == b"new" and (p.stat().st_mode & 0o777) == 0o640
    assert sorted(x.name for x in tmp_path.iterdir()) == ["f.bin"]


def test_a_failed_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    p = tmp_path / "m.npub"
    p.write_bytes(b"a good binary" * 100)

    def no_space(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(FileError, match=r"m\.npub.*No space left"):
        write_atomic(p, b"x" * 5000, "the binary")
    assert p.read_bytes() == b"a good binary" * 100
    assert [x.name for x in tmp_path.iterdir()] == ["m.npub"]


@pytest.mark.parametrize("where", ["missing/m.npub", "afile/m.npub", "adir"])
def test_bad_output_paths_are_named(tmp_path, where, art):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    with pytest.raises(FileError, match="cannot write the binary"):
        art.save(tmp_path / where)
    with pytest.raises(FileError):
        check_output_path(tmp_path / where)


def test_dump_dir_that_is_a_file(tmp_path):
    f = tmp_path / "notadir"
    f.write_text("x")
    with pytest.raises(FileError, match="is a file, not a folder"):
        npuc.compile(nn.Linear(4, 4).eval(), (torch.randn(1, 4),), dump_dir=f)
    with pytest.raises(FileError):
        make_dir(f / "sub")


def test_cli_outputs_checked_before_the_work(tmp_path, art):
    art.save(tmp_path / "m.npub")
    src = tmp_path / "p.s"
    src.write_text(RELU)
    bad = str(tmp_path / "nope" / "out")
    runner = CliRunner()
    for cmd in (["asm", str(src), "-o", bad], ["sim", str(src), "--trace", bad],
                ["profile", str(tmp_path / "m.npub"), "--trace", bad],
                ["compile", "torchvision:resnet18", "-o", bad]):
        out = runner.invoke(main, cmd)
        assert out.exit_code == 1 and "does not exist" in out.output, (cmd, out.output)
        assert not isinstance(out.exception, OSError)


def test_run_takes_npz_and_npy_inputs(tmp_path, art):
    art.save(tmp_path / "m.npub")
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    np.save(tmp_path / "in.npy", x)
    runner = CliRunner()
    a = runner.invoke(main, ["run", str(tmp_path / "m.npub"), "--input", str(tmp_path / "in.npz")])
    b = runner.invoke(main, ["run", str(tmp_path / "m.npub"), "--input", str(tmp_path / "in.npy")])
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    assert a.output == b.output and "output 0: shape [1, 4]" in a.output
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    c = runner.invoke(main, ["run", str(tmp_path / "m.npub"), "--input", str(tmp_path / "bad.npy")])
    assert c.exit_code == 1 and "bad.npy" in c.output and "Traceback" not in c.output


def test_unreadable_files_are_named(tmp_path):
    with pytest.raises(NpucError, match="cannot read"):
        npuc.load(tmp_path / "missing.npub")
    out = CliRunner().invoke(main, ["disasm", str(tmp_path)])
    assert out.exit_code != 0 and not isinstance(out.exception, OSError)


def test_import_options_checked_before_the_export(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    out = CliRunner().invoke(main, ["import", "torchvision:resnet50", "--print-after", "nope"])
    assert out.exit_code == 1 and "nope" in out.output
    with pytest.raises(NpucError, match="nope"):
        npuc.import_model(nn.Linear(2, 2), (torch.randn(1, 2),), print_after=("nope",))
    with pytest.raises(FileError):
        npuc.import_model(nn.Linear(2, 2), (torch.randn(1, 2),), dump_dir=f / "sub")
