"""The TileLang kernels' machine code for sm_90a, compiled with the CUDA toolkit (no GPU).

* ptxas' report (needs nvcc): no kernel family has its wgmma serialised (C7515 / C7510 / C7514); the
  persistent, Stream-K and block-scaled kernels keep their register budgets (no C7507, "setmaxnreg ignored") and spills
  nothing.
* SASS (needs nvdisasm or cuobjdump as well, from PATH or the test extra's
  nvidia-cuda-nvdisasm wheel): every family issues the Hopper warpgroup MMA of
  its input type — HGMMA for f16/bf16/tf32, QGMMA for fp8, IGMMA for int8 — and no HMMA/IMMA
  (the mma.sync path).

Each test is skipped, with the reason, where its tools are missing; the GPU machine has all
of them."""

import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

from tlgemm.__main__ import wheel_disassembler
from tlgemm.schedules import Schedule
from tlgemm.tilelang import kernel_source
from tlgemm.tilelang.emitter_gemm import BLOCKSCALED_PASS_CONFIGS, lower_to_cuda
from tlgemm.tilelang.kernels import blockscaled_gemm
from tlgemm.tilelang.launch import blockscaled_spec, default_blockscaled_schedule

from .test_tilelang_lowering import CASES

GMMA = {"persistent-bf16": "HGMMA", "persistent-f16-mn": "HGMMA", "scaled-e4m3": "QGMMA",
        "streamk-tf32": "HGMMA", "streamk-bf16": "HGMMA", "persistent-int8": "IGMMA", "blockscaled-e4m3": "QGMMA",
        "blockscaled-e4m3-wide": "QGMMA", "blockscaled-e4m3-wide-tma": "QGMMA", "blockscaled-e4m3-192-tma": "QGMMA",
        "blockscaled-e4m3-waves-tma": "QGMMA", "blockscaled-e4m3-waves4-tma": "QGMMA",
        "blockscaled-e4m3-streamk": "QGMMA", "swap-ab-streamk-e4m3": "QGMMA",
        "blockscaled-e4m3-deep-tma": "QGMMA", "blockscaled-e4m3-deep-32-tma": "QGMMA",
        "blockscaled-e4m3-deep-one-row-tma": "QGMMA", "blockscaled-e4m3-split-tma": "QGMMA",
        "blockscaled-e4m3-split-4-tma": "QGMMA"}
#: Kernels whose producer and consumers run separate branches, so setmaxnreg must hold.
SEPARATE_BRANCHES = ("persistent-bf16", "persistent-f16-mn", "scaled-e4m3", "streamk-bf16", "persistent-int8",
                     "blockscaled-e4m3", "blockscaled-e4m3-wide", "blockscaled-e4m3-wide-tma",
                     "blockscaled-e4m3-192-tma", "blockscaled-e4m3-waves-tma", "blockscaled-e4m3-waves4-tma",
                     "blockscaled-e4m3-streamk",
                     "swap-ab-streamk-e4m3", "blockscaled-e4m3-deep-tma", "blockscaled-e4m3-deep-32-tma",
                     "blockscaled-e4m3-deep-one-row-tma", "blockscaled-e4m3-split-tma", "blockscaled-e4m3-split-4-tma")


def _find_disassembler() -> str | None:
    """nvdisasm or cuobjdump on PATH, else the nvdisasm of NVIDIA's nvidia-cuda-nvdisasm wheel
    (the test extra; ``tlgemm inspect --emit sass`` finds it the same way)."""
    return shutil.which("nvdisasm") or shutil.which("cuobjdump") or wheel_disassembler()


DISASSEMBLER = _find_disassembler()

needs_nvcc = pytest.mark.skipif(not shutil.which("nvcc"), reason="needs the CUDA toolkit's nvcc")
needs_disassembler = pytest.mark.skipif(not (shutil.which("nvcc") and DISASSEMBLER),
                                        reason="needs the CUDA toolkit's nvcc and nvdisasm or cuobjdump")


def _source(case: str) -> str:
    if case.startswith("blockscaled-e4m3"):
        # "-wide": 128x256, the result and a half-width temporary in 192 registers a thread; "-192":
        # 128x192, one whole-tile temporary ("-tma": the token scales by TMA, with the ring's rounds
        # unrolled); "-waves": 256x128 in row waves, raster "n" (the default at K = 512..1536, 3 stages;
        # "-waves4": 4 stages, the default at K = 2048..7168);
        # "-streamk": 64x64 tiles under Stream-K (two scale blocks a K-iteration); "-deep": the small-M
        # defaults with two scale blocks a K-iteration, 64x64, 64x32 and 128x64; "-split": the small-M
        # default that splits 64x32 tiles in 2 parts, and 4 parts (clusters adding them in shared memory)
        wide = default_blockscaled_schedule(4096, N=7168, K=16384)
        schedule = {"blockscaled-e4m3-wide": wide, "blockscaled-e4m3-wide-tma": wide,
                    "blockscaled-e4m3-192-tma": default_blockscaled_schedule(4096, N=2112, K=7168),
                    "blockscaled-e4m3-waves-tma": default_blockscaled_schedule(4096, N=24576, K=1536),
                    "blockscaled-e4m3-waves4-tma": default_blockscaled_schedule(4096, N=7168, K=2048),
                    "blockscaled-e4m3-streamk": Schedule(block_m=64, block_n=64, block_k=256, num_stages=6,
                                                         num_warpgroups=1).persistent().streamk(33),
                    "blockscaled-e4m3-split-tma": default_blockscaled_schedule(64, N=2112, K=7168),
                    "blockscaled-e4m3-split-4-tma": Schedule(block_m=64, block_n=32, block_k=256, num_stages=7,
                                                             num_warpgroups=1).splitk(4),
                    "blockscaled-e4m3-deep-tma": default_blockscaled_schedule(128, N=4096, K=7168),
                    "blockscaled-e4m3-deep-32-tma": default_blockscaled_schedule(64, N=4096, K=7168),
                    "blockscaled-e4m3-deep-one-row-tma": default_blockscaled_schedule(128, N=7168, K=2048),
                    }.get(case, default_blockscaled_schedule(4096))
        spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132,
                                tma_token_scales=case.endswith("-tma"))
        return lower_to_cuda(blockscaled_gemm(spec), BLOCKSCALED_PASS_CONFIGS)
    a_dtype, b_dtype, out_dtype, schedule, options = CASES[case]
    return kernel_source(512, 512, 512, a_dtype, b_dtype, out_dtype, schedule, **options)


@functools.lru_cache(maxsize=None)
def _compiled(case: str) -> tuple[bytes, str]:
    """(cubin, ptxas report) of a case, compiled for sm_90a with TileLang's flags."""
    from tilelang import tvm
    from tilelang.contrib import nvcc

    with tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}):
        flags = nvcc.default_compile_options(None)
    with tempfile.TemporaryDirectory() as workdir:
        source, cubin = Path(workdir) / "kernel.cu", Path(workdir) / "kernel.cubin"
        source.write_text(_source(case))
        build = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-w", "-Xptxas", "-v", *flags, "-o", str(cubin),
                                str(source)], capture_output=True, text=True, check=True)
        return cubin.read_bytes(), build.stdout + build.stderr


def _sass(case: str) -> str:
    cubin, _ = _compiled(case)
    with tempfile.TemporaryDirectory() as workdir:
        path = Path(workdir) / "kernel.cubin"
        path.write_bytes(cubin)
        args = [DISASSEMBLER, str(path)]
        if Path(DISASSEMBLER).name == "cuobjdump":
            args.insert(1, "--dump-sass")
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout


@needs_nvcc
@pytest.mark.parametrize("case", GMMA)
def test_ptxas_keeps_wgmma_asynchronous(case):
    _, report = _compiled(case)
    for serialised in ("C7515", "C7510", "C7514"):
        assert serialised not in report, f"{case}: ptxas serialised the wgmma: {report}"


@needs_nvcc
@pytest.mark.parametrize("case", SEPARATE_BRANCHES)
def test_persistent_kernel_keeps_register_budgets(case):
    """setmaxnreg honoured (PTX ISA 9.7.17.1; ptxas ignores it with note C7507 when code after
    it runs on the other side's budget) and no spills."""
    _, report = _compiled(case)
    assert "C7507" not in report, f"{case}: setmaxnreg ignored: {report}"
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)]
    assert spills and not any(spills), f"{case}: spills: {report}"


@needs_disassembler
@pytest.mark.parametrize("case", GMMA)
def test_kernel_issues_warpgroup_mma_only(case):
    sass = _sass(case)
    assert GMMA[case] in sass, f"{case}: no {GMMA[case]} in the SASS"
    for legacy in ("HMMA", "IMMA"):
        assert legacy not in sass, f"{case}: {legacy} (mma.sync) in the SASS"
