"""The batched and block-scaled FP8 kernels compile on this CPU-only machine for Hopper and
AMD CDNA3/CDNA4, and every schedule of the GPU tests fits the shared memory of an H100/H200.

Facts (DESIGN.md, Backends; Triton 3.6 ``runtime/jit.py``): ``triton.compile(ASTSource(...),
target=GPUTarget(...))`` runs without a GPU; a launch specialises integer arguments equal to
1 to constants and marks those divisible by 16 (and 16-byte aligned pointers) as such, and
``compile_as_launched`` reproduces that from the launch's argument values, so the compiled
kernel's ``metadata.shared`` is what the launch would allocate. H100 and H200 allow 227 KiB
(232448 bytes) of shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin).
"""

import importlib.util
import pathlib
import re

import pytest
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.errors import OutOfResources, PTXASError

from tlgemm.schedules import Schedule
from tlgemm.triton import launch
from tlgemm.triton.kernels import batched_gemm_kernel, blockscaled_gemm_kernel, persistent_gemm_kernel, streamk_gemm_kernel

TARGETS = {
    "sm90": GPUTarget("cuda", 90, 32),
    "gfx942": GPUTarget("hip", "gfx942", 64),
    "gfx950": GPUTarget("hip", "gfx950", 64),
}
MMA = {"cuda": r"wgmma\.mma_async", "hip": r"v_mfma"}
HOPPER_SHARED_BYTES = 232448
_TRITON_TYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int8: "i8",
                torch.int32: "i32", torch.float8_e4m3fn: "fp8e4nv", torch.float8_e5m2: "fp8e5"}


def compile_as_launched(kernel, target, values, meta):
    """Compile ``kernel`` for ``target`` specialised like a launch with the arguments
    ``values`` (name → tensor, None or int; tensors count as 16-byte aligned; ints as Triton
    specialises them unless the kernel says do_not_specialize) and the compile-time ``meta``
    (with num_warps and num_stages)."""
    meta = dict(meta)
    options = {"num_warps": meta.pop("num_warps"), "num_stages": meta.pop("num_stages")}
    signature, constants, attrs = {}, {}, {}
    for i, name in enumerate(kernel.arg_names):
        value = meta[name] if name in meta else values[name]
        if isinstance(value, torch.Tensor):
            signature[name] = "*" + _TRITON_TYPE[value.dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in meta or value is None or (value == 1 and not kernel.params[i].do_not_specialize):
            signature[name], constants[name] = "constexpr", value
        else:
            signature[name] = "i32"
            if value % 16 == 0 and not kernel.params[i].do_not_specialize:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return triton.compile(ASTSource(kernel, signature, constants, attrs), target=target, options=options)


def _meta_tensor(*shape, dtype, transpose=False):
    """A [*shape] tensor on the meta device (strides only), its last two axes transposed in
    memory when asked."""
    if transpose:
        return torch.empty(*shape[:-2], shape[-1], shape[-2], dtype=dtype, device="meta").transpose(-1, -2)
    return torch.empty(*shape, dtype=dtype, device="meta")


def _blockscaled_values(B, M, N, K, a_dtype=torch.float8_e4m3fn, out_dtype=torch.bfloat16, bias=True):
    a = _meta_tensor(B, M, K, dtype=a_dtype)
    b = _meta_tensor(B, N, K, dtype=torch.float8_e4m3fn)
    sa = _meta_tensor(B, M, K // 128, dtype=torch.float32, transpose=True)  # DeepGEMM's M-major A scales
    sb = _meta_tensor(B, N // 128, K // 128, dtype=torch.float32)
    c = _meta_tensor(B, M, N, dtype=out_dtype)
    names = ("A", "B", "C", "A_scale", "B_scale")
    values = dict(zip(names, (a, b, c, sa, sb)), bias=_meta_tensor(N, dtype=torch.bfloat16) if bias else None,
                  BATCH=B, M=M, N=N, K=K, stride_bias=1)
    for prefix, t in (("stride_a", a), ("stride_b", b), ("stride_c", c), ("stride_sa", sa), ("stride_sb", sb)):
        values.update(zip((prefix + "b", prefix + ("m" if t is not b and t is not sb else "n"),
                           prefix + ("k" if t is not c else "n")), t.stride()))
    values["stride_cn"], values["stride_cm"] = c.stride(2), c.stride(1)
    return values


def _batched_values(B, M, N, K, dtype, out_dtype, epilogue=False, b_transposed=False):
    a = _meta_tensor(B, M, K, dtype=dtype)
    b = _meta_tensor(B, K, N, dtype=dtype, transpose=b_transposed)
    c = _meta_tensor(B, M, N, dtype=out_dtype)
    vec = (lambda n: _meta_tensor(n, dtype=torch.float32)) if epilogue else (lambda n: None)
    values = dict(A=a, B=b, C=c, A_scale=vec(M), B_scale=vec(N), bias=vec(N), BATCH=B, M=M, N=N, K=K,
                  stride_as=1, stride_bs=1, stride_bias=1)
    for prefix, t, axes in (("stride_a", a, "bmk"), ("stride_b", b, "bkn"), ("stride_c", c, "bmn")):
        values.update({prefix + axis: stride for axis, stride in zip(axes, t.stride())})
    return values


def _asm(compiled, target):
    return compiled.asm["ptx" if target.backend == "cuda" else "amdgcn"]


BLOCKSCALED = Schedule(block_m=128, block_n=128, block_k=128, num_stages=4, num_warpgroups=2).persistent(132)


@pytest.mark.parametrize("target", TARGETS)
def test_blockscaled_kernel_uses_fp8_tensor_cores(target):
    tgt = TARGETS[target]
    compiled = compile_as_launched(blockscaled_gemm_kernel, tgt, _blockscaled_values(2, 4096, 7168, 2048),
                                   launch.blockscaled_kernel_meta(BLOCKSCALED, 132))
    asm = _asm(compiled, tgt)
    assert re.search(MMA[tgt.backend], asm), f"no {MMA[tgt.backend]} in {target} code"
    if tgt.backend == "cuda":
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.e4m3\.e4m3", asm)
        # The promotion: every K block's partial is scaled and added in fp32 (fma on the CUDA cores).
        assert re.search(r"fma\.rn\.f32", asm)


@pytest.mark.parametrize("M", [1, 64, 4096])
def test_default_blockscaled_schedules_fit_hopper(M):
    """DeepSeek-V3's 7168 x 2048 with the default schedule for small and large M, e5m2 A and a
    fp32 output: wgmma, the shared memory that Triton allocates within 227 KiB."""
    s = launch.default_blockscaled_schedule(M).persistent(132)
    compiled = compile_as_launched(blockscaled_gemm_kernel, TARGETS["sm90"],
                                   _blockscaled_values(1, M, 7168, 2048, torch.float8_e5m2, torch.float32, bias=False),
                                   launch.blockscaled_kernel_meta(s, 132))
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.e5m2\.e4m3", compiled.asm["ptx"])
    assert launch.operand_ring_bytes(s, torch.float8_e5m2, torch.float8_e4m3fn) <= compiled.metadata.shared
    assert compiled.metadata.shared <= HOPPER_SHARED_BYTES


@pytest.mark.parametrize("target", TARGETS)
def test_batched_kernel_uses_tensor_cores(target):
    tgt = TARGETS[target]
    s = Schedule(block_m=128, block_n=128, block_k=64, num_stages=3).persistent(132)
    values = _batched_values(4, 512, 384, 1024, torch.bfloat16, torch.bfloat16, epilogue=True)
    compiled = compile_as_launched(batched_gemm_kernel, tgt, values, launch.kernel_meta(s, 132, 1024, quantized=False))
    assert re.search(MMA[tgt.backend], _asm(compiled, tgt))


@pytest.mark.parametrize("dtype, out, instruction", [
    (torch.float8_e4m3fn, torch.bfloat16, r"m64n128k32\.f32\.e4m3\.e4m3"),
    (torch.int8, torch.int32, r"m64n128k32\.s32\.s8\.s8"),
    (torch.float16, torch.float16, r"m64n128k16\.f32\.f16\.f16"),
], ids=str)
def test_batched_kernel_sm90_dtypes(dtype, out, instruction):
    s = Schedule(block_m=128, block_n=128, block_k=64, num_stages=3).persistent(132)
    values = _batched_values(3, 256, 256, 512, dtype, out, b_transposed=dtype.itemsize == 1)
    meta = launch.kernel_meta(s, 132, 512, quantized=dtype == torch.int8)
    ptx = compile_as_launched(batched_gemm_kernel, TARGETS["sm90"], values, meta).asm["ptx"]
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\." + instruction, ptx)


# ---- shared memory ----------------------------------------------------------------------------


def _gpu_test_module():
    """test_triton_gpu.py, loaded by path (tests/triton is not a package): its schedules."""
    path = pathlib.Path(__file__).with_name("test_triton_gpu.py")
    spec = importlib.util.spec_from_file_location("triton_gpu_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kernel", ["persistent", "streamk", "batched"])
def test_fp32_schedules_fit_hopper(kernel):
    """Issue 5: TF32 at 37x53x29 (unaligned strides) with 128x128x64 tiles in 3 stages (the GPU
    tests' schedules) compiled to 262144 bytes of shared memory, over the H100/H200's 232448,
    while the partial last K step was a separate masked step after the K loop. Inside the
    pipelined loop (``GemmContext.reduce_range``) it fits, in that worst case."""
    gpu = _gpu_test_module()
    M, N, K = 37, 53, 29
    values = dict(A=_meta_tensor(M, K, dtype=torch.float32), B=_meta_tensor(K, N, dtype=torch.float32),
                  C=_meta_tensor(M, N, dtype=torch.float32), A_scale=None, B_scale=None, bias=None,
                  partials=_meta_tensor(1, dtype=torch.float32), counters=_meta_tensor(1, dtype=torch.int32),
                  M=M, N=N, K=K, stride_am=K, stride_ak=1, stride_bk=N, stride_bn=1, stride_cm=N, stride_cn=1,
                  stride_as=0, stride_bs=0, stride_bias=0, BATCH=2, stride_ab=M * K, stride_bb=K * N,
                  stride_cb=M * N)
    fn = {"persistent": persistent_gemm_kernel, "streamk": streamk_gemm_kernel, "batched": batched_gemm_kernel}[kernel]
    s = gpu.KERNELS["streamk" if kernel == "streamk" else "persistent"]
    sizes = (M, N, K, K, 1, N, 1, N, 1, M * K, K * N, M * N)
    meta = dict(launch.kernel_meta(s, 132, K, quantized=False, allow_tf32=True, sizes=sizes),
                STREAMK_TILES=s.streamk_tiles)
    meta = {name: value for name, value in meta.items() if name in fn.arg_names or name.startswith("num_")}
    shared = compile_as_launched(fn, TARGETS["sm90"], values, meta).metadata.shared
    assert shared <= HOPPER_SHARED_BYTES, f"{s}: {shared} bytes"


def test_operand_ring_bytes_formula():
    s = Schedule(block_m=128, block_n=256, block_k=64, num_stages=3)
    assert launch.operand_ring_bytes(s, torch.bfloat16, torch.bfloat16) == 3 * (128 * 64 + 64 * 256) * 2
    assert launch.operand_ring_bytes(s, torch.float8_e4m3fn, torch.float32) == 3 * (128 * 64 * 1 + 64 * 256 * 4)


def test_check_shared_memory_names_schedule():
    s = Schedule(block_m=256, block_n=256, block_k=64, num_stages=4)  # 4 * 64 KiB of bf16 operands
    launch.check_shared_memory(s, torch.bfloat16, torch.bfloat16, None)
    launch.check_shared_memory(s, torch.bfloat16, torch.bfloat16, 262144)
    with pytest.raises(ValueError, match=r"schedule: 256x256x64 .*stages=4.* needs 262144 bytes of shared memory .* 232448"):
        launch.check_shared_memory(s, torch.bfloat16, torch.bfloat16, HOPPER_SHARED_BYTES)
    launch.check_shared_memory(s.stages(3), torch.bfloat16, torch.bfloat16, HOPPER_SHARED_BYTES)


class _Unloadable:
    """Stands in for a JIT kernel whose compiled form does not fit: launching raises what
    Triton's CompiledKernel._init_handles raises."""

    def __init__(self, error):
        self.error = error

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            raise self.error
        return run


def test_launch_reports_compiled_shared_memory_as_schedule_error():
    s = Schedule(block_m=128, block_n=128, block_k=64)
    with pytest.raises(ValueError, match=r"schedule: .* 262144 bytes of shared memory, more than the device's 232448") as info:
        launch._launch(_Unloadable(OutOfResources(262144, 232448, "shared memory")), 1, s, (), {}, {})
    assert isinstance(info.value.__cause__, OutOfResources)
    with pytest.raises(OutOfResources, match="threads"):
        launch._launch(_Unloadable(OutOfResources(2048, 1024, "threads")), 1, s, (), {}, {})


def test_launch_reports_a_register_shortage_as_schedule_error():
    """ptxas rejects a 256x256 bf16 tile on 4 consumer warpgroups (16 warps) for sm_90: "(C7602)
    Insufficient registers (128)" (Triton 3.6, checked by compiling it on this machine)."""
    s = Schedule(block_m=256, block_n=256, block_k=32, num_stages=4, num_warpgroups=4).persistent()
    shortage = PTXASError("ptxas fatal   : (C7602) Insufficient registers (128) to compile instruction")
    with pytest.raises(ValueError, match=r"schedule: 256x256x32 .* needs more registers a thread than its 16 consumer "
                                         r"warps can hold") as info:
        launch._launch(_Unloadable(shortage), 1, s, (), {}, {})
    assert info.value.__cause__ is shortage
    with pytest.raises(PTXASError, match="another failure"):
        launch._launch(_Unloadable(PTXASError("another failure")), 1, s, (), {}, {})


def _persistent_ptx(M, N, K, dtype, a_col_major, b_col_major, sizes=True):
    """sm_90 PTX of the persistent kernel for a 64x128x64 tile, specialised like a launch;
    ``sizes``: pass the launcher's divisors of M, N, K and the strides (``kernel_meta``)."""
    s = Schedule(block_m=64, block_n=128, block_k=64, num_stages=4).persistent(132)
    a = _meta_tensor(M, K, dtype=dtype, transpose=a_col_major)
    b = _meta_tensor(K, N, dtype=dtype, transpose=b_col_major)
    c = _meta_tensor(M, N, dtype=torch.bfloat16)
    values = dict(A=a, B=b, C=c, A_scale=None, B_scale=None, bias=None, M=M, N=N, K=K, stride_am=a.stride(0),
                  stride_ak=a.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1), stride_cm=c.stride(0),
                  stride_cn=c.stride(1), stride_as=0, stride_bs=0, stride_bias=0)
    meta = launch.kernel_meta(s, 132, K, quantized=False,
                              sizes=(M, N, K, *a.stride(), *b.stride(), *c.stride()) if sizes else None)
    return compile_as_launched(persistent_gemm_kernel, TARGETS["sm90"], values, meta).asm["ptx"]


@pytest.mark.parametrize("shape, a_col, b_col", [
    ((1000, 1000, 1000), False, True),
    ((1000, 1000, 1000), True, False),
    ((4096, 4096, 1000), False, True),
    ((4096, 4096, 4096), True, False),
], ids=["1000-nt", "1000-tn", "K1000-nt", "4096-tn"])
def test_loads_are_pipelined_where_sizes_and_strides_allow(shape, a_col, b_col):
    """Sizes and strides that are multiples of 8 bf16 elements (16-byte rows) but not of 16,
    and M (never specialised) along a column-major A: the launcher's divisors let the K loop
    load with cp.async (its software pipeline); without them the loads are synchronous
    ld.global (H100: 5-21x slower at 1000³, 18x for a column-major A at 4096³;
    benchmarks/results/triton_persistent.md)."""
    def copies(ptx):
        return len(re.findall(r"cp\.async\.c[ag]", ptx))

    pipelined = copies(_persistent_ptx(*shape, torch.bfloat16, a_col, b_col))
    assert pipelined > copies(_persistent_ptx(*shape, torch.bfloat16, a_col, b_col, sizes=False))


def test_divisor():
    assert [launch.divisor(v) for v in (0, 1, 2, 3, 8, 24, 1000, 1001, 4096)] == [16, 1, 2, 1, 8, 8, 8, 1, 16]


def test_dense_kernels_do_not_specialise_on_sizes():
    """M = 1 or N = 1 compiled as a constant ran up to 2.6x slower (benchmarks/results/
    triton_persistent.md): the persistent and Stream-K kernels take M, N and K as plain runtime
    integers (their divisibility comes in DIVISORS)."""
    for kernel in (persistent_gemm_kernel, streamk_gemm_kernel):
        for size in (p for p in kernel.params if p.name in ("M", "N", "K")):
            assert size.do_not_specialize, (kernel.fn.__name__, size.name)
