"""The examples/ kernels: CPU lowering checks for sm_90a, and a GPU run against the reference.

The examples are scripts, not part of the tlgemm package, so they are imported by path.
"""

import importlib.util
import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("tilelang")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"tlgemm_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gemm_bias_silu():
    return _load("gemm_bias_silu")


WGMMA = re.compile(r"tl::wgmma_(ss|rs)<tl::DataType::(\w+), tl::DataType::(\w+), tl::DataType::(\w+), "
                   r"(\d+), (\d+), (\d+), (\w+), (\w+), [-\d]+, [-\d]+>")


@pytest.mark.parametrize("dtype,ctype", [("bf16", "kBFloat16"), ("fp16", "kFloat16")])
def test_gemm_bias_silu_lowers_for_sm90a(gemm_bias_silu, dtype, ctype):
    M, N, K = 256, 512, 256
    src = gemm_bias_silu.cuda_source(M, N, K, dtype)
    em = gemm_bias_silu.gemm_bias_silu(M, N, K, dtype).emitter
    assert em.instruction == "m64n256k16"

    # Main loop: only SS wgmma of the emitter's instruction, K-major operands; no mma.sync.
    assert "mma.sync" not in src and "mma_sync" not in src
    calls = set(WGMMA.findall(src))
    assert calls == {("ss", ctype, ctype, "kFloat32", "64", "256", "16", "false", "false")}, calls
    # (K / block_k) K-blocks of num_k_atoms wgmma each (the pipeline may peel some iterations).
    assert len(re.findall(r"tl::wgmma_ss<", src)) % em.num_k_atoms == 0
    assert "warpgroup_wait<0>" in src and "tl::fence_proxy_async()" in src
    # The proxy fence follows the cp.async wait and barrier of its stage, before the descriptors.
    step = re.search(r"cp_async_wait<\d>\(\);\s*__syncthreads\(\);\s*tl::fence_proxy_async\(\);\s*"
                     r"tl::initialize_wgmma_descriptor", src)
    assert step, "fence.proxy.async is not between the stage's cp.async wait and the wgmma"

    # Epilogue after the last wgmma: bias read, SiLU as x / (1 + exp(-x)) in fp32, then the store.
    epilogue = src[src.rindex("warpgroup_wait<0>"):]
    assert re.search(r"\bBias\s*\+", epilogue), "the bias is not read in the epilogue"
    assert "expf(" in epilogue and "/" in epilogue
    assert re.search(r"\*\(uint1\*\)\(C \+", epilogue), "the result is not stored to C"


def test_gemm_bias_silu_rejects_ragged_shapes(gemm_bias_silu):
    for args, name in (((1000, 512, 256), "M"), ((256, 500, 256), "N"), ((256, 512, 100), "K")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            gemm_bias_silu.gemm_bias_silu(*args)
    with pytest.raises(ValueError, match="dtype"):
        gemm_bias_silu.gemm_bias_silu(256, 512, 256, "e4m3")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_gemm_bias_silu_cli_without_a_gpu_says_so(gemm_bias_silu, capsys):
    assert gemm_bias_silu.main(["--m", "128", "--n", "256", "--k", "64"]) == 2
    assert "needs an sm_90 GPU (H100/H200), found no CUDA device; --emit cuda" in capsys.readouterr().err


def test_gemm_bias_silu_cli_names_a_ragged_shape(gemm_bias_silu, capsys):
    with pytest.raises(SystemExit) as exit_:
        gemm_bias_silu.main(["--emit", "cuda", "--m", "100"])
    assert exit_.value.code == 2
    assert "error: M: 100 must be a positive multiple of the block (128)" in capsys.readouterr().err


def test_gemm_bias_silu_emit_cuda_cli(gemm_bias_silu, capsys):
    assert gemm_bias_silu.main(["--emit", "cuda", "--m", "128", "--n", "256", "--k", "64"]) == 0
    assert "tl::wgmma_ss<" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", [(256, 512, 256), (1024, 768, 2048)])
def test_gemm_bias_silu_matches_reference(gemm_bias_silu, dtype, shape, seed):
    result = gemm_bias_silu.check(*shape, dtype, seed=seed)   # raises AssertionError on a mismatch
    assert result["error"] <= result["bound"]
