"""The ``tlgemm`` command: parsing, explain and inspect without a GPU, clear errors for what
needs one (run, autotune) or a CUDA toolkit (inspect --emit ptx/sass), and bench delegation."""

import os
import subprocess
import sys
import types

import pytest
import torch

import tlgemm.__main__ as cli

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the errors of a machine without a GPU")


def _tilelang_kernel_source():
    import tlgemm.tilelang

    return hasattr(tlgemm.tilelang, "kernel_source")


def test_parser():
    args = cli.build_parser().parse_args(["run", "128", "256", "64", "--dtype", "e4m3", "--layout", "tn",
                                          "--backend", "triton", "--out-dtype", "fp32"])
    assert (args.M, args.N, args.K, args.dtype, args.layout, args.backend, args.out_dtype) == (
        128, 256, 64, "e4m3", "tn", "triton", "fp32")
    args = cli.build_parser().parse_args(["explain", "1", "2", "3", "--gpu", "sm80", "--sm-count", "64"])
    assert (args.gpu, args.sm_count, args.layout, args.dtype) == ("sm80", 64, "nt", "bf16")
    args = cli.build_parser().parse_args(["autotune", "4096x4096x4096", "16x7168x2048", "--dtype", "bf16,e4m3"])
    assert args.shapes == [(4096, 4096, 4096), (16, 7168, 2048)] and args.dtype == "bf16,e4m3"
    args = cli.build_parser().parse_args(["inspect", "64", "64", "64", "--emit", "tir"])
    assert args.emit == "tir"


@pytest.mark.parametrize("argv", [["run", "0", "1", "1"], ["run", "8", "8", "8", "--dtype", "fp64"],
                                  ["explain", "8", "8", "8", "--layout", "xy"], ["autotune", "8x8"],
                                  ["inspect", "8", "8", "8", "--emit", "sm_90a"]])
def test_parser_rejects(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_explain_command_without_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([sys.executable, "-m", "tlgemm", "explain", "4096", "4096", "4096", "--dtype", "bf16"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "tlgemm.matmul: M=4096 N=4096 K=4096, bfloat16 @ bfloat16 -> bfloat16" in out
    assert "wgmma.m64n256k16.f32.bf16.bf16" in out
    assert "H100 SXM (sm_90, 132 SMs" in out and "selection:" in out and "schedule:" in out


@pytest.mark.parametrize("argv, expected", [
    (["--dtype", "e4m3"], "wgmma.m64n"),
    (["--dtype", "int8"], ".s32.s8.s8"),
    (["--dtype", "tf32"], ".f32.tf32.tf32"),
    (["--dtype", "fp16", "--layout", "nn"], "B MN-major"),
    (["--gpu", "sm80"], "mma.sync"),
    (["--gpu", "gfx942"], "v_mfma"),
    (["--sm-count", "66"], "66 SMs"),
    (["--backend", "triton"], "backend:     triton"),
])
def test_explain_variants(argv, expected, capsys):
    assert cli.main(["explain", "512", "1024", "256", *argv]) == 0
    assert expected in capsys.readouterr().out


def test_explain_dtype_tf32_turns_tf32_on(monkeypatch):
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    cli.main(["explain", "64", "64", "64", "--dtype", "tf32"])
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"


@pytest.mark.skipif(not _tilelang_kernel_source(), reason="tlgemm.tilelang.kernel_source is not in this checkout yet")
def test_inspect_cuda_without_gpu(capsys):
    assert cli.main(["inspect", "512", "512", "256", "--dtype", "bf16", "--emit", "cuda"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("// tlgemm inspect: M=512 N=512 K=256")
    assert "__global__" in out and "wgmma" in out and "mma.sync" not in out


@pytest.mark.skipif(not _tilelang_kernel_source(), reason="tlgemm.tilelang.kernel_source is not in this checkout yet")
def test_inspect_tir(capsys):
    assert cli.main(["inspect", "256", "256", "128", "--dtype", "e4m3", "--emit", "tir"]) == 0
    assert "T.prim_func" in capsys.readouterr().out


@pytest.mark.parametrize("emit", ["ptx", "sass"])
def test_inspect_ptx_without_toolkit_is_a_clear_error(emit, monkeypatch, capsys):
    from tilelang import env

    monkeypatch.setattr(env, "CUDA_HOME", "")
    monkeypatch.setenv("PATH", "")
    assert cli.main(["inspect", "64", "64", "64", "--emit", emit]) == 2
    err = capsys.readouterr().err
    assert f"--emit {emit} needs the CUDA toolkit's nvcc" in err and "--emit tir and --emit cuda need neither" in err


def test_inspect_refuses_a_non_hopper_target(capsys):
    assert cli.main(["inspect", "64", "64", "64", "--gpu", "sm80"]) == 2
    assert "'tilelang' cannot run this: sm_80 is not sm_90" in capsys.readouterr().err


@NO_GPU
@pytest.mark.parametrize("argv", [["run", "64", "64", "64"], ["autotune", "64x64x64"]])
def test_gpu_commands_without_gpu(argv, capsys):
    assert cli.main(argv) == 2
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err


def test_bench_delegates(monkeypatch):
    seen = []
    monkeypatch.setitem(sys.modules, "tlgemm.bench", types.SimpleNamespace(main=lambda argv: seen.append(argv) or 7))
    assert cli.main(["bench", "--sets", "square", "--quick"]) == 7
    assert seen == [["--sets", "square", "--quick"]]


def test_layout_is_kept(capsys):
    assert cli.main(["layout", "--dtype", "e4m3", "--block-k", "128"]) == 0
    assert "k0=96" in capsys.readouterr().out


def test_layout_of_an_invalid_tile_prints_the_error_alone(capsys):
    assert cli.main(["layout", "--dtype", "e4m3", "--block-k", "48"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "tile_k: 48 is not a positive multiple of the instruction K (32 for e4m3)" in err


@pytest.fixture
def fake_run(fake_gpu, monkeypatch):
    """`tlgemm run` / `tlgemm autotune` on the fake GPU with CPU tensors and a fixed timer."""
    import triton.testing

    monkeypatch.setattr(cli, "_gpu", lambda what: torch.device("cpu"))
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, warmup, rep, return_mode: (fn(), 0.25)[1])
    return fake_gpu


def test_run_command(fake_run, capsys):
    assert cli.main(["run", "256", "128", "512", "--dtype", "bf16", "--layout", "tn"]) == 0
    out = capsys.readouterr().out
    assert "tlgemm run: M=256 N=128 K=512, bfloat16 @ bfloat16 -> bfloat16, layout tn" in out
    assert "backend tilelang" in out and ": ok" in out
    assert "tlgemm       250.0 us" in out and "cuBLAS       250.0 us" in out and "tlgemm / cuBLAS: 1.00x" in out
    assert fake_run.tilelang.calls[0][1].stride(0) == 1  # layout tn: a stored transposed


def test_run_command_reports_a_wrong_result(fake_run, capsys):
    fake_run.tilelang.module.matmul = lambda a, b, schedule, *, out, **kwargs: out.zero_()
    assert cli.main(["run", "64", "64", "64"]) == 1
    assert "check: FAILED" in capsys.readouterr().out


def test_autotune_command(fake_run, capsys):
    assert cli.main(["autotune", "200x256x512", "--dtype", "bf16", "--candidates", "3"]) == 0
    out = capsys.readouterr().out
    assert "autotune cache:" in out and "200x256x512 bfloat16,bfloat16,bfloat16 [tilelang]" in out
    assert "(6 tried, 0 failed)" in out  # select()'s best 3 and their 2-CTA cluster forms


@pytest.mark.skipif(not _tilelang_kernel_source(), reason="tlgemm.tilelang.kernel_source is not in this checkout yet")
def test_inspect_checks_against_the_given_sm_count(capsys):
    """--sm-count stands for the device's SMs in kernel_source's checks too: the Stream-K schedule
    explain picks for 200 SMs runs 200 programs."""
    assert cli.main(["inspect", "8", "4096", "4096", "--sm-count", "200", "--emit", "tir"]) == 0
    assert "persistent(200)" in capsys.readouterr().out
