"""Each kernel compiles on this CPU-only machine for Hopper and for AMD CDNA3/CDNA4.

Facts (DESIGN.md, Backends): ``triton.compile(ASTSource(...), target=GPUTarget(...))`` runs
without a GPU; sm_90 gives PTX whose tensor-core instructions are ``wgmma.mma_async`` (for
num_warps 4 or 8 and tiles of at least 64 rows), gfx942/gfx950 give AMDGCN with ``v_mfma``.
Arguments are specialised like a launch: pointers 16-byte aligned, unit strides the
constant 1, other integers divisible by 16.
"""

import re

import pytest
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from tlgemm.schedules import Schedule
from tlgemm.triton.kernels import persistent_gemm_kernel, schedule_trace_kernel, streamk_gemm_kernel
from tlgemm.triton.launch import kernel_meta

TARGETS = {
    "sm90": GPUTarget("cuda", 90, 32),
    "gfx942": GPUTarget("hip", "gfx942", 64),
    "gfx950": GPUTarget("hip", "gfx950", 64),
}
MMA = {"cuda": r"wgmma\.mma_async", "hip": r"v_mfma"}
SCHEDULE = Schedule(block_m=128, block_n=128, block_k=64, num_stages=3).persistent(132)
STREAMK = SCHEDULE.streamk(24)


def _compile(kernel, target, schedule, *, a="bf16", b="bf16", c="bf16", layout="nn", epilogue=False,
             allow_tf32=False, ones=()):
    """Compile ``kernel`` for ``target``; layout is A and B majorness: n = row-major, t = column.
    ``ones`` names further integer arguments equal to 1 (specialised to the constant 1)."""
    unit = {"stride_cn", "stride_ak" if layout[0] == "n" else "stride_am",
            "stride_bn" if layout[1] == "n" else "stride_bk", *ones}
    pointers = {"A": a, "B": b, "C": c, "partials": "i32" if a == "i8" else "fp32", "counters": "i32"}
    if epilogue:
        pointers.update(A_scale="fp32", B_scale="fp32", bias="bf16")
    meta = kernel_meta(schedule, 132, 4096, quantized=a == "i8", allow_tf32=allow_tf32)
    options = {"num_warps": meta.pop("num_warps"), "num_stages": meta.pop("num_stages")}
    signature, constants, attrs = {}, {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in pointers:
            signature[name] = "*" + pointers[name]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in ("A_scale", "B_scale", "bias") or name in unit:
            signature[name], constants[name] = "constexpr", None if name in ("A_scale", "B_scale", "bias") else 1
        elif name in meta or name == "STREAMK_TILES":
            signature[name] = "constexpr"
            constants[name] = schedule.streamk_tiles if name == "STREAMK_TILES" else meta[name]
        else:
            signature[name] = "i32"
            if not name.startswith(("stride_as", "stride_bs", "stride_bias")):
                attrs[(i,)] = [["tt.divisibility", 16]]
    return triton.compile(ASTSource(kernel, signature, constants, attrs), target=target, options=options)


def _max_loop_depth(ir: str) -> int:
    """Deepest nesting of scf.for regions in printed MLIR (a region closes with a "}" line at
    the indentation of the line that opened it)."""
    open_loops, deepest = [], 0
    for line in ir.splitlines():
        indent = len(line) - len(line.lstrip())
        if open_loops and line.strip().startswith("}") and indent == open_loops[-1]:
            open_loops.pop()
        if "scf.for" in line and line.rstrip().endswith("{"):
            open_loops.append(indent)
            deepest = max(deepest, len(open_loops))
    return deepest


def _assembly(compiled, target):
    return compiled.asm["ptx" if target.backend == "cuda" else "amdgcn"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kernel, schedule, epilogue", [
    (persistent_gemm_kernel, SCHEDULE, False),
    (streamk_gemm_kernel, STREAMK, True),
], ids=["persistent", "streamk"])
def test_bf16_kernels_use_tensor_cores(target, kernel, schedule, epilogue):
    tgt = TARGETS[target]
    asm = _assembly(_compile(kernel, tgt, schedule, epilogue=epilogue), tgt)
    assert re.search(MMA[tgt.backend], asm), f"no {MMA[tgt.backend]} in {target} code"


@pytest.mark.parametrize("a, b, c, layout, allow_tf32, instruction", [
    ("fp16", "fp16", "fp16", "nt", False, r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16"),
    ("fp32", "fp32", "fp32", "tn", True, r"wgmma\.mma_async\.sync\.aligned\.m64n128k8\.f32\.tf32\.tf32"),
    ("i8", "i8", "i32", "nt", False, r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.s32\.s8\.s8"),
    ("fp8e4nv", "fp8e5", "bf16", "nt", False, r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.e4m3\.e5m2"),
    ("fp8e5", "fp8e5", "fp32", "nn", False, r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.e5m2\.e5m2"),
])
def test_sm90_dtypes_and_layouts(a, b, c, layout, allow_tf32, instruction):
    epilogue = a != "i8"
    ptx = _compile(persistent_gemm_kernel, TARGETS["sm90"], SCHEDULE, a=a, b=b, c=c, layout=layout,
                   epilogue=epilogue, allow_tf32=allow_tf32).asm["ptx"]
    assert re.search(instruction, ptx)


@pytest.mark.parametrize("target, a, b, c, instruction", [
    ("gfx942", "i8", "i8", "i32", "v_mfma_i32_32x32x16_i8"),
    ("gfx950", "i8", "i8", "i32", "v_mfma_i32_32x32x32_i8"),
    ("gfx942", "fp8e4nv", "fp8e4nv", "bf16", "v_mfma_f32_32x32x8_f16"),
    ("gfx942", "fp8e5", "fp8e5", "bf16", "v_mfma_f32_32x32x8_f16"),
    ("gfx950", "fp8e4nv", "fp8e4nv", "bf16", "v_mfma_f32_32x32x64_f8f6f4"),
])
def test_amd_8bit_inputs(target, a, b, c, instruction):
    """gfx942's fp8 MFMA takes the FNUZ formats, so Triton widens OCP e4m3fn/e5m2 to float16
    there (what explain() reports for fp8 on gfx942); gfx950 multiplies them as they are."""
    amdgcn = _compile(streamk_gemm_kernel, TARGETS[target], STREAMK, a=a, b=b, c=c, layout="nt").asm["amdgcn"]
    assert set(re.findall(r"v_mfma\w+", amdgcn)) == {instruction}


@pytest.mark.parametrize("kernel, schedule", [(persistent_gemm_kernel, SCHEDULE), (streamk_gemm_kernel, STREAMK)],
                         ids=["persistent", "streamk"])
def test_unit_extents_specialised_to_constants(kernel, schedule):
    """M = 1 (and N = 1, K = 1) arrive as constexprs, not tensors: the views and schedule
    context must still build (see tlgemm.triton.shim)."""
    ptx = _compile(kernel, TARGETS["sm90"], schedule, epilogue=True, ones=("M", "N", "K", "stride_cm")).asm["ptx"]
    assert "st.global" in ptx


def test_sm90_persistent_loop_is_fused_pipelined_and_vectorised():
    """The benchmark configuration (128x256x64, 8 warps): the tile loop fused with the K loop
    (FuseNestedLoops), operands copied asynchronously in 16-byte vectors (cp.async), and the
    scalar tile setup — wrapped row/column indices — kept out of the per-step path."""
    s = Schedule(block_m=128, block_n=256, block_k=64, num_stages=3, num_warpgroups=2).persistent(132)
    compiled = _compile(persistent_gemm_kernel, TARGETS["sm90"], s)
    ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.bf16\.bf16", ptx)
    assert "cp.async.cg.shared.global" in ptx and ", 0x10" in ptx
    assert _max_loop_depth(ttgir) == 1, "tile loop and K loop should be fused into one loop"
    copies = re.findall(r"async_copy_global_to_local .*contiguity = (\d+)", ttgir)
    assert copies and all(int(n) == 8 for n in copies)


def test_streamk_fixup_uses_one_release_acquire_atomic():
    ptx = _compile(streamk_gemm_kernel, TARGETS["sm90"], STREAMK, epilogue=True).asm["ptx"]
    assert re.findall(r"atom\.global\.gpu\.acq_rel\.add", ptx)
    assert "ld.global.cg" in ptx, "partials must be read from L2, not a possibly stale L1"


def test_schedule_trace_kernel_compiles():
    constants = dict(kernel_meta(STREAMK, 132, 4096, quantized=False), STREAMK_TILES=STREAMK.streamk_tiles)
    signature = {name: "constexpr" if name in constants else ("*i32" if name in ("trace", "counts") else "i32")
                 for name in schedule_trace_kernel.arg_names}
    constants = {name: value for name, value in constants.items() if name in signature}
    compiled = triton.compile(ASTSource(schedule_trace_kernel, signature, constants), target=TARGETS["sm90"])
    assert "st.global" in compiled.asm["ptx"]


def test_256_row_tiles_run_on_eight_warps():
    """``triton_warps``: a 256-row tile takes 8 warps even on one consumer warpgroup (bf16 256x64
    on 4 warps ran at 0.28x its 8-warp form on the H100)."""
    tall = Schedule(block_m=256, block_n=64, block_k=64, num_stages=4).persistent(132)
    assert tall.num_warpgroups == 1 and kernel_meta(tall, 132, 4096, quantized=False)["num_warps"] == 8
    assert kernel_meta(SCHEDULE, 132, 4096, quantized=False)["num_warps"] == 4
    ptx = _compile(persistent_gemm_kernel, TARGETS["sm90"], tall).asm["ptx"]
    assert re.search(r"\.reqntid 256|\.maxntid 256", ptx) and re.search(MMA["cuda"], ptx)
