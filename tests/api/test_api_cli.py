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
    (["--gpu", "gfx942", "--dtype", "e4m3"], "Triton widens OCP float8 e4m3fn/e5m2 to float16 on gfx942"),
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
    assert "--gpu: inspect shows TileLang kernels, which issue wgmma (sm_90 only); the target is sm_80" in (
        capsys.readouterr().err)


@pytest.mark.parametrize("argv, message", [
    (["explain", "64", "64", "64", "--gpu", ""], "tlgemm: error: --gpu: expected one of ['gfx942', 'sm80', 'sm90']"),
    (["explain", "64", "64", "64", "--gpu", "foo"], "tlgemm: error: --gpu: expected one of"),
    (["explain", "64", "64", "64", "--dtype", "e4m3", "--out-dtype", "int32"],
     "tlgemm: error: --out-dtype: for float8_e4m3fn inputs (matmul) one of float32, float16, bfloat16, got int32"),
    (["explain", "64", "64", "64", "--backend", "tilelang", "--gpu", "gfx942"],
     "tlgemm: error: --backend: 'tilelang' cannot run this: gfx942 is not sm_90"),
    (["inspect", "64", "64", "64", "--dtype", "fp32", "--gpu", "sm90", "--emit", "tir"],
     "tlgemm: error: --dtype: fp32 is float32 with TF32 off, which no TileLang kernel runs"),
])
def test_errors_name_the_option(argv, message, capsys):
    """An API argument in a message is named as the option that sets it, where the command has
    that option: inspect has no --backend (it always shows the TileLang kernel)."""
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.startswith(message)


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
    assert err == "tlgemm: error: --block-k: 48 is not a positive multiple of the instruction K (32 for e4m3)\n"


@pytest.mark.parametrize("argv, expected", [
    (["--block-m", "100"], "--block-m: 100 is not a positive multiple of 8 (core matrices are 8 rows)"),
    (["--block-m", "-64"], "--block-m: -64 is not a positive multiple of 8"),
    (["--block-n", "0"], "--block-n: 0 is not a positive multiple of 8"),
    (["--block-k", "0"], "--block-k: 0 is not a positive multiple of the instruction K (16 for bf16)"),
    (["--block-m", "32"], "--block-m: inst_mn: 64 does not divide the tile's MN extent 32 (A is read by m64 wgmma "
                          "instructions)"),
    (["--block-m", "96"], "--block-m: inst_mn: 64 does not divide the tile's MN extent 96"),
    (["--dtype", "fp64"], "--dtype: 'fp64' is not a WGMMA input type"),
    (["--dtype", "e4m3", "--b-major", "MN"], "--b-major: e4m3 operands must be K-major"),
    (["--block-m", "64000"], "--block-m, --block-k: the A tile 64000x64 bf16 is 8192000 B, more than the 262144 B "
                             "of shared memory a descriptor's 14-bit start address reaches"),
    (["--block-k", "4096"], "--block-m, --block-k: the A tile 128x4096 bf16 is 1048576 B"),
    (["--block-n", "4096"], "--block-n, --block-k: the B tile 4096x64 bf16 is 524288 B"),
    (["--a-major", "MN", "--block-k", "2048"], "--block-m, --block-k: the A tile 128x2048: leading_byte_offset"),
])
def test_layout_names_the_option_of_an_invalid_tile(argv, expected, capsys):
    """A tile that is not a WGMMA tile for the dtype and majors: one line naming the option."""
    assert cli.main(["layout", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"tlgemm: error: {expected}") and err.count("\n") == 1


@pytest.mark.parametrize("block_n, swizzle, lbo", [(256, "B128", 8192), (288, "B32", 2048), (320, "B64", 4096),
                                                   (480, "B32", 2048)])
def test_layout_of_a_wide_mn_major_b_is_the_emitters(block_n, swizzle, lbo, capsys):
    """An MN-major B wider than 256 is read by the widest legal N that tiles it (n144 for 288,
    n160 for 320, n240 for 480), and swizzled for that extent, as WGMMAEmitter lays it out; the
    command picked the swizzle for the whole block_n (B64 and B128 there)."""
    from tlgemm.macros.emitter import WGMMAEmitter

    assert cli.main(["layout", "--dtype", "fp16", "--block-m", "64", "--block-n", str(block_n), "--b-major",
                     "MN"]) == 0
    out = capsys.readouterr().out
    em = WGMMAEmitter("f16", "f16", "f32", block_m=64, block_n=block_n, block_k=64, b_major="MN")
    assert (em.b_params.swizzle.name, em.b_params.leading_byte_offset) == (swizzle, lbo)
    assert f"B: {block_n}x64 f16, MN-major -> shared [64, {block_n}] ({block_n * 128} B), swizzle {swizzle} " in out
    assert f"   LBO {lbo} B, SBO {em.b_params.stride_byte_offset} B," in out


def test_layout_of_a_whole_shared_memory_tile(capsys):
    """A 2048x64 bf16 A tile fills the 256 KiB the descriptor reaches, and is accepted."""
    assert cli.main(["layout", "--block-m", "2048", "--block-n", "8"]) == 0
    assert "A: 2048x64 bf16, K-major -> shared [2048, 64] (262144 B)" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["layout"], ["explain", "64", "64", "64"]])
def test_closed_stdout_exits_1_without_a_traceback(argv):
    """`tlgemm ... | head -1`: a closed pipe is no error to report; the status is 1."""
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first write
    try:
        result = subprocess.run([sys.executable, "-m", "tlgemm", *argv], stdout=write, stderr=subprocess.PIPE,
                                text=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), timeout=300)
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (1, "")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_stdout_is_a_one_line_error():
    """`tlgemm explain ... > /dev/full`: the write error was a traceback."""
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "tlgemm", "explain", "64", "64", "64"], stdout=full,
                                stderr=subprocess.PIPE, text=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
                                timeout=300)
    assert (result.returncode, result.stderr) == (1, "tlgemm: error: No space left on device\n")


@pytest.mark.parametrize("command", ["explain", "inspect"])
def test_sm_count_beyond_int32_names_the_option(command, capsys):
    assert cli.main([command, "64", "64", "64", "--sm-count", str(2**40)]) == 2
    err = capsys.readouterr().err
    assert err == ("tlgemm: error: --sm-count: 1099511627776 is more than 2**31 - 1 (the kernels take the SM count "
                   "as an int32)\n")


def test_sm_count_of_int32_max_is_accepted(capsys):
    assert cli.main(["explain", "64", "64", "64", "--sm-count", str(2**31 - 1)]) == 0
    assert "2147483647 SMs" in capsys.readouterr().out


def test_explain_dtype_fp32_turns_tf32_off(capsys):
    """--dtype fp32 is float32 without TF32 even where the environment has turned TF32 on."""
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    assert cli.main(["explain", "512", "512", "512", "--dtype", "fp32"]) == 0
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert "float32 inputs with TF32 off" in capsys.readouterr().out


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


def test_run_command_checks_a_poisoned_output(fake_run, capsys):
    """A kernel that leaves the last row unwritten: on a fresh (zeroed) output the missing row
    of 4097 adds about sqrt(1/4097) of relative error and passed the bound."""
    def all_but_the_last_row(a, b, schedule, *, out, **kwargs):
        out[:-1] = (a[:-1].double() @ b.double()).to(out.dtype)
        return out

    fake_run.tilelang.module.matmul = all_but_the_last_row
    assert cli.main(["run", "4097", "64", "64", "--dtype", "e4m3"]) == 1
    assert "check: FAILED" in capsys.readouterr().out


def test_autotune_command(fake_run, capsys):
    assert cli.main(["autotune", "200x256x512", "--dtype", "bf16", "--candidates", "3"]) == 0
    out = capsys.readouterr().out
    assert "autotune cache:" in out and "200x256x512 bfloat16,bfloat16,bfloat16 [tilelang]" in out
    assert "(6 tried, 0 failed)" in out  # select()'s best 3 and their 2-CTA cluster forms


def test_autotune_tunes_each_dtype_once_under_its_tf32_setting(fake_run, monkeypatch, capsys):
    """fp32 is tuned with TF32 off and tf32 with it on, in separate tlgemm.autotune calls; repeated
    dtypes and shapes are tuned once; the caller's TF32 setting comes back."""
    import tlgemm
    from tlgemm._checks import matmul_uses_tf32

    calls, autotune = [], tlgemm.autotune

    def recording(shapes, dtypes, **kwargs):
        calls.append((list(shapes), list(dtypes), matmul_uses_tf32()))
        return autotune(shapes, dtypes, **kwargs)

    monkeypatch.setattr(tlgemm, "autotune", recording)
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    assert cli.main(["autotune", "64x64x64", "64X64X64", "128x64x64", "--dtype", "tf32,bf16,fp32,tf32",
                     "--candidates", "1"]) == 0
    shapes = [(64, 64, 64), (128, 64, 64)]
    assert calls == [(shapes, [torch.float32, torch.bfloat16], True), (shapes, [torch.float32], False)]
    heads = [line.split(" [")[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert heads == ["64x64x64 tf32,tf32,float32", "128x64x64 tf32,tf32,float32", "64x64x64 bfloat16,bfloat16,bfloat16",
                     "128x64x64 bfloat16,bfloat16,bfloat16", "64x64x64 float32,float32,float32",
                     "128x64x64 float32,float32,float32"]
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"


@pytest.mark.parametrize("layout, M, N, K, majors", [
    ("nn", 64, 60, 64, "A K-major, B K-major"),  # b [K, N] with N * 2 bytes not 16-byte rows: copied to K-major
    ("tn", 1, 64, 64, "A K-major, B MN-major"),  # a of one row is K-major whatever its storage
    ("nn", 64, 1, 64, "A K-major, B K-major"),  # b of one column likewise
    ("nn", 64, 64, 64, "A K-major, B MN-major"),
    ("tt", 64, 64, 64, "A MN-major, B K-major"),
])
def test_inspect_reads_the_operands_as_the_launcher_does(layout, M, N, K, majors, monkeypatch, capsys):
    """The kernel shown is the one that runs: operand majors from the launcher's copy rule
    (tlgemm.api._tilelang_layout), not from --layout alone."""
    import tlgemm.tilelang

    seen = []
    monkeypatch.setattr(tlgemm.tilelang, "kernel_source",
                        lambda *args, a_major, b_major, **kwargs: seen.append((a_major, b_major)) or "code",
                        raising=False)
    assert cli.main(["inspect", str(M), str(N), str(K), "--layout", layout, "--emit", "tir"]) == 0
    assert f"; {majors}; --emit tir" in capsys.readouterr().out
    assert [f"A {a}-major, B {b}-major" for a, b in seen] == [majors]


@pytest.mark.skipif(not _tilelang_kernel_source(), reason="tlgemm.tilelang.kernel_source is not in this checkout yet")
def test_inspect_checks_against_the_given_sm_count(capsys):
    """--sm-count stands for the device's SMs in kernel_source's checks too: the Stream-K schedule
    explain picks for 200 SMs runs 200 programs."""
    assert cli.main(["inspect", "8", "4096", "4096", "--sm-count", "200", "--emit", "tir"]) == 0
    assert "persistent(200)" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["explain", "inspect"])
@pytest.mark.parametrize("sizes, name, numel", [
    (("4611686018427387904", "2", "1"), "a", 4611686018427387904),
    (("1", "100000000000000000000", "1"), "b", 100000000000000000000),
    (("3000000000", "1", "1"), "a", 3000000000),
])
def test_sizes_beyond_int32_operands_are_the_api_error(command, sizes, name, numel, capsys):
    """An operand of 2**31 elements or more is the API's error, one line, also where torch's own
    storage size of the meta operand overflows (a RuntimeError traceback before)."""
    assert cli.main([command, *sizes]) == 2
    assert capsys.readouterr().err == (f"tlgemm: error: {name}: holds {numel} elements; the kernels index in int32 "
                                       "(fewer than 2**31 elements per tensor): split the problem\n")
