"""The TileLang kernels' machine code (SASS for sm_90a): every kernel family issues the
Hopper warpgroup MMA of its input type — HGMMA for f16/bf16/tf32, QGMMA for fp8, IGMMA for
int8 — and no HMMA/IMMA (the mma.sync path), and ptxas does not serialise its wgmma
(warning C7515 / C7510). Needs the CUDA toolkit (nvcc and nvdisasm or cuobjdump), not a GPU:
skipped, with the reason, where those are missing (CI); the GPU machine has them."""

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import torch

from tlgemm.tilelang import kernel_source
from tlgemm.tilelang.emitter_gemm import lower_to_cuda
from tlgemm.tilelang.kernels import blockscaled_gemm
from tlgemm.tilelang.launch import blockscaled_spec, default_blockscaled_schedule

from .test_tilelang_lowering import CASES

GMMA = {"persistent-bf16": "HGMMA", "persistent-f16-mn": "HGMMA", "scaled-e4m3": "QGMMA",
        "streamk-tf32": "HGMMA", "persistent-int8": "IGMMA"}
DISASSEMBLER = shutil.which("nvdisasm") or shutil.which("cuobjdump")

pytestmark = pytest.mark.skipif(not (shutil.which("nvcc") and DISASSEMBLER),
                                reason="needs the CUDA toolkit's nvcc and nvdisasm or cuobjdump")


def _compile(source: str, workdir: Path) -> tuple[str, str]:
    """(SASS, ptxas report) of the CUDA source, compiled for sm_90a with TileLang's flags."""
    from tilelang import tvm
    from tilelang.contrib import nvcc

    with tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}):
        flags = nvcc.default_compile_options(None)
    (workdir / "kernel.cu").write_text(source)
    build = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-w", "-Xptxas", "-v", *flags, "-o",
                            str(workdir / "kernel.cubin"), str(workdir / "kernel.cu")],
                           capture_output=True, text=True, check=True)
    args = [DISASSEMBLER, str(workdir / "kernel.cubin")]
    if Path(DISASSEMBLER).name == "cuobjdump":
        args.insert(1, "--dump-sass")
    sass = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return sass, build.stdout + build.stderr


@pytest.mark.parametrize("case", CASES)
def test_kernel_issues_warpgroup_mma_only(case):
    a_dtype, b_dtype, out_dtype, schedule, options = CASES[case]
    source = kernel_source(512, 512, 512, a_dtype, b_dtype, out_dtype, schedule, **options)
    with tempfile.TemporaryDirectory() as workdir:
        sass, report = _compile(source, Path(workdir))
    assert GMMA[case] in sass, f"{case}: no {GMMA[case]} in the SASS"
    for legacy in ("HMMA", "IMMA"):
        assert legacy not in sass, f"{case}: {legacy} (mma.sync) in the SASS"
    for serialised in ("C7515", "C7510"):
        assert serialised not in report, f"{case}: ptxas serialised the wgmma: {report}"


def test_blockscaled_kernel_issues_qgmma_only():
    """The block-scaled FP8 kernel: QGMMA into the temporary, promotion on the CUDA cores."""
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16,
                            default_blockscaled_schedule(4096), 132)
    with tempfile.TemporaryDirectory() as workdir:
        sass, report = _compile(lower_to_cuda(blockscaled_gemm(spec)), Path(workdir))
    assert "QGMMA" in sass and "HMMA" not in sass
    assert "C7515" not in report and "C7510" not in report, report
