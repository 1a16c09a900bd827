"""The sweep of issue 14's fault list: every fault the issue names, with the test that replays it.

:data:`FAULTS` maps each fault, in the issue's words, to the regression tests that replay it and
check the right answer or an ``NpucError`` sentence (most live beside this file); a test here
checks that each of them exists, so a fault cannot lose its test unnoticed.  The faults whose
replay had no test yet are replayed here: a failed or interrupted write over a good binary, a
reader beside a writer, output paths under a file for every command that writes one, and the
MLIR export (which wrote without the atomic writer and let ``OSError`` escape).
"""

from __future__ import annotations

import importlib
import os
import threading

import pytest
import torch
from click.testing import CliRunner
from torch import nn

import npuc
from npuc.cli import main
from npuc.errors import FileError
from npuc.fileio import write_atomic

FAULTS: dict[str, tuple[str, ...]] = {
    # silent wrong answers
    "2-layer nn.LSTM on npu-mid, relative L2 0.45": ("test_wrong_answers::test_recurrent_layers_match_pytorch",),
    "batched matmul then division by a broadcast constant": (
        "test_wrong_answers::test_batched_matmul_then_broadcast_constant",),
    "NaN fp16 reference compared with the 1e-2 floor": (
        "test_wrong_answers::test_nan_fp16_reference_is_not_a_silent_pass",
        "test_wrong_answers::test_fp16_overflow_of_pytorch_is_reported"),
    # crashes that were not NpucError
    "nn.Linear(65536, 1): FieldError from the cost model": (
        "test_crashes::test_linear_with_a_reduction_longer_than_a_dma_count_compiles_and_matches",),
    "a conv on a batch of 0: IndexError in quick_estimate": ("test_crashes::test_batch_of_zero_is_refused_at_import",),
    "art.save / compile -o / asm -o / profile --trace / sim --trace let OSError escape": (
        "test_file_io::test_bad_output_paths_are_named", "test_file_io::test_cli_outputs_checked_before_the_work",
        "test_issue14_sweep::test_every_cli_output_under_a_file_is_named_before_the_work",
        "test_issue14_sweep::test_no_space_left_is_a_file_error_naming_the_path"),
    "compile(dump_dir=<a file>): FileExistsError": ("test_file_io::test_dump_dir_that_is_a_file",),
    "an exception inside a user's build(): a traceback from npuc compile and npuc import": (
        "test_crashes::test_exception_in_a_users_build_is_a_sentence",),
    "npuc run m.npub --input in.npz: TypeError": ("test_file_io::test_run_takes_npz_and_npy_inputs",),
    "import_model(dynamic_shapes=...) or an unknown keyword: TypeError": (
        "test_crashes::test_import_model_refuses_unknown_options_and_dynamic_shapes",
        "test_file_io::test_import_options_checked_before_the_export"),
    "int8 calibration data with NaN: torchao's AssertionError": (
        "test_crashes::test_nan_calibration_data_is_refused",
        "test_crashes::test_calibration_producing_nan_inside_the_model_is_refused"),
    "a .npub without target=: arena of 2^40 (MemoryError) or 2^64-1 (ValueError)": (
        "test_bad_values::test_huge_arena_refused_against_the_named_target",
        "test_bad_values::test_load_without_target_is_refused_for_an_edited_fingerprint"),
    "a .npub whose metadata is not JSON: JSONDecodeError": ("test_bad_values::test_malformed_metadata_refused",),
    "a .npub with swapped binding roles: KeyError at run time": (
        "test_bad_values::test_swapped_binding_roles_refused_at_load",),
    "one VREDUCE with n0 = n1 = 65535: a 16 GiB allocation": (
        "test_bad_values::test_simulator_refuses_an_operand_larger_than_its_memory_before_allocating",
        "test_bad_values::test_simulator_dram_is_bounded_by_the_targets"),
    # lost data
    "a failed or interrupted compile over a good m.npub destroys it": (
        "test_file_io::test_a_failed_write_leaves_the_old_file_whole",
        "test_issue14_sweep::test_a_failed_compile_leaves_the_old_binary_whole",
        "test_issue14_sweep::test_an_interrupted_write_leaves_the_old_file_and_no_temporary"),
    "a reader beside a writer sees empty, torn or mixed files": (
        "test_issue14_sweep::test_a_reader_beside_a_writer_sees_only_whole_files",),
    # accepted silently
    "clock.mhz = 1e12, energy = inf, a 300-character target name": (
        "test_bad_values::test_target_values_out_of_bounds_refused",),
    "assembly imm0=1e400": ("test_bad_values::test_assembly_immediate_beyond_fp32_refused",),
    "the API calibrating on the example input when calibration=None": (
        "test_crashes::test_int8_without_calibration_is_refused_like_the_cli",),
    # the same class, found by this sweep
    "export_mlir(path=...) / npuc export-mlir -o: OSError escaped, path checked after the work": (
        "test_issue14_sweep::test_mlir_export_writes_atomically_and_names_a_bad_path",),
}


def test_every_fault_of_the_issue_has_a_test_that_replays_it():
    missing = []
    for fault, tests in FAULTS.items():
        for t in tests:
            module, name = t.split("::")
            mod = importlib.import_module(f"{__package__}.{module}" if __package__ else module)
            if not callable(getattr(mod, name, None)):
                missing.append(f"{fault}: {t}")
    assert not missing, missing


# ------------------------------------------------------------------------------ lost data


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A good binary on disk and its bytes."""
    torch.manual_seed(0)
    art = npuc.compile(nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval(), (torch.randn(1, 8),), name="tiny")
    path = tmp_path_factory.mktemp("good") / "m.npub"
    art.save(path)
    return path, path.read_bytes()


def test_a_failed_compile_leaves_the_old_binary_whole(tmp_path, good):
    path = tmp_path / "m.npub"
    path.write_bytes(good[1])
    f = tmp_path / "bad.py"
    f.write_text("import torch\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
                 "        return torch.linalg.svd(x)[0]\n\ndef build():\n    return M(), (torch.randn(3, 3),)\n")
    out = CliRunner().invoke(main, ["compile", f"{f}:build", "-o", str(path)])
    assert out.exit_code != 0 and "Traceback" not in out.output, out.output
    assert path.read_bytes() == good[1] and npuc.load(path).npub.to_bytes() == good[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.py", "m.npub"]


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, good):
    path = tmp_path / "m.npub"
    path.write_bytes(good[1])
    art = npuc.load(path)

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        art.save(path)
    assert path.read_bytes() == good[1]
    assert [p.name for p in tmp_path.iterdir()] == ["m.npub"]


def test_no_space_left_is_a_file_error_naming_the_path(tmp_path, monkeypatch, good):
    path = tmp_path / "m.npub"
    path.write_bytes(good[1])
    art = npuc.load(path)

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(FileError, match=r"cannot write the binary '.*m\.npub': No space left on device"):
        art.save(path)
    assert path.read_bytes() == good[1]
    assert [p.name for p in tmp_path.iterdir()] == ["m.npub"]


def test_a_reader_beside_a_writer_sees_only_whole_files(tmp_path):
    path = tmp_path / "m.npub"
    versions = (b"A" * 91_243, b"B" * 16_384)  # the sizes of the issue's torn binary
    write_atomic(path, versions[0])
    seen: set[bytes] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.add(path.read_bytes())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(40):
            write_atomic(path, versions[i % 2])
    finally:
        stop.set()
        reader.join()
    assert seen <= set(versions), sorted(len(s) for s in seen - set(versions))
    assert [p.name for p in tmp_path.iterdir()] == ["m.npub"]


# --------------------------------------------------------------------------- output paths


def test_every_cli_output_under_a_file_is_named_before_the_work(tmp_path, good):
    (tmp_path / "afile").write_text("x")
    src = tmp_path / "p.s"
    src.write_text("VUN op=relu dtype=int8 n0=16 dst=0x100 src=0\nEND\n")
    bad = str(tmp_path / "afile" / "out")
    for cmd in (["asm", str(src), "-o", bad], ["sim", str(src), "--trace", bad],
                ["profile", str(good[0]), "--trace", bad], ["compile", "torchvision:resnet18", "-o", bad],
                ["export-mlir", "torchvision:resnet18", "-o", bad], ["report", str(good[0]), "-o", bad]):
        out = CliRunner().invoke(main, cmd)
        assert out.exit_code == 1 and "is a file, not a folder" in out.output, (cmd, out.output)
        assert "Traceback" not in out.output and not isinstance(out.exception, OSError), cmd


def test_mlir_export_writes_atomically_and_names_a_bad_path(tmp_path):
    pytest.importorskip("xdsl")
    from npuc.mlir.export import export_mlir

    m, x = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval(), torch.randn(1, 4)
    with pytest.raises(FileError, match=r"cannot write the MLIR text '.*missing.*': the folder .* does not exist"):
        export_mlir(m, (x,), path=tmp_path / "missing" / "m.mlir")
    out = tmp_path / "m.mlir"
    text = export_mlir(m, (x,), path=out)
    assert out.read_text() == text and "tosa." in text
    assert [p.name for p in tmp_path.iterdir()] == ["m.mlir"]
