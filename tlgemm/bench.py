"""Side-by-side GEMM benchmark: tlgemm's two backends against cuBLAS, TileLang's own ``T.gemm``
and the Triton tutorial's persistent matmul, in one process, on the same inputs.

    python benchmarks/run.py --sets square,llm --dtypes bf16,fp8 --quick
    tlgemm bench --sets fp8-blockscaled
    python benchmarks/run.py --from-json run.json --markdown benchmarks/RESULTS.md

Problem convention: C[M, N] = A[M, K] · W[N, K]ᵀ (an nn.Linear / DeepGEMM layout: both operands
K-major); the tlgemm launchers get ``b = W.t()`` ([K, N] with strides (1, K)). fp8 is e4m3 with
per-tensor scales of 1.0 passed to every kernel that takes scales; ``fp8-block`` is DeepSeek-style
block scaling (A: one scale per 1x128 group, W: one per 128x128 block, scales drawn at random;
A's scales passed outer-dim-major, the layout cuBLAS, DeepGEMM and tlgemm read fastest).

Per case: random inputs on the GPU, several input sets rotated so the L2 holds none of them,
a float64 reference (``tlgemm.testing``), then per implementation one poisoned run checked
against the reference (DESIGN.md tolerance; a wrong kernel gets no number) and the median of
``triton.testing.do_bench`` over calls of its public entry point (host-side launch work included;
do_bench's L2 flush before each call usually hides it). Each row also carries a roofline floor:
max(FLOPs / measured cuBLAS peak, bytes / measured device copy bandwidth), both measured at the
start of the run. TileLang kernels are compiled in parallel threads before any timing.
"""

import abc
import argparse
import concurrent.futures
import datetime
import importlib
import inspect
import itertools
import json
import math
import os
import pathlib
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

import tlgemm
from tlgemm._checks import SCALE_BLOCK
from tlgemm.api import _check_elements, runs_schedule
from tlgemm.schedules import Schedule, select
from tlgemm.quantize import dequantize_fp8_blockwise, quantize_fp8_blockwise
from tlgemm.testing import assert_gemm_close, poison_allocator, reference_gemm

FORMAT = "tlgemm-bench/1"

# ---- shape sets -----------------------------------------------------------------------------

#: DeepSeek-V3 (N, K) weight shapes (DeepGEMM's table).
DEEPSEEK_V3 = ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))
#: Llama-2-7B (hidden 4096, MLP 11008) and Llama-3-8B (MLP 14336) projections: (N, K).
LLAMA = ((4096, 4096), (12288, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336))
LLM_M = (1, 16, 64, 128, 512, 4096)
DECODE_M = (1, 4, 8, 16, 32, 64, 128)
DECODE_WEIGHTS = ((4096, 4096), (14336, 4096), (4096, 14336), (2112, 7168), (7168, 2048))
DEEPGEMM_M = (64, 128, 4096)
#: DeepGEMM's published TFLOP/s for these shapes, (M, N, K) -> TFLOP/s: the "Normal GEMMs for
#: dense models" table of the deepseek-ai/DeepGEMM README as released in February 2025 (H800
#: SXM5, NVCC 12.8; the table left the README in PR #86, April 2025). The H800 has the H100's
#: compute; only its NVLink differs.
DEEPGEMM_H800_TFLOPS = {
    (64, 2112, 7168): 206, (64, 24576, 1536): 289, (64, 32768, 512): 219, (64, 7168, 16384): 336,
    (64, 4096, 7168): 287, (64, 7168, 2048): 295,
    (128, 2112, 7168): 352, (128, 24576, 1536): 535, (128, 32768, 512): 358, (128, 7168, 16384): 645,
    (128, 4096, 7168): 533, (128, 7168, 2048): 510,
    (4096, 2112, 7168): 1058, (4096, 24576, 1536): 990, (4096, 32768, 512): 590, (4096, 7168, 16384): 1358,
    (4096, 4096, 7168): 1304, (4096, 7168, 2048): 1025,
}
SQUARE = (1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
RAGGED = ((1000, 3000, 777), (1, 4097, 4095), (127, 255, 513), (333, 7777, 1999), (2049, 1023, 4111),
          (77, 11008, 4096), (4097, 4097, 4097), (3000, 5000, 129))

SHAPE_SETS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "square": tuple((s, s, s) for s in SQUARE),
    "llm": tuple((m, n, k) for n, k in DEEPSEEK_V3 + LLAMA for m in LLM_M),
    "decode": tuple((m, n, k) for n, k in DECODE_WEIGHTS for m in DECODE_M),
    "ragged": RAGGED,
    "fp8-blockscaled": tuple((m, n, k) for n, k in DEEPSEEK_V3 for m in DEEPGEMM_M),
}
#: Sets measured in one fixed dtype whatever --dtypes says.
SET_DTYPES = {"fp8-blockscaled": ("fp8-block",)}
A_BLOCK, W_BLOCK = (1, SCALE_BLOCK), (SCALE_BLOCK, SCALE_BLOCK)  # DeepSeek-V3 activation / weight blocks


@dataclass(frozen=True)
class DType:
    """A benchmark dtype: input and output storage, and which measured peak bounds it."""

    name: str
    storage: str  # torch / TileLang name of the inputs
    out: str  # torch / TileLang name of the output
    peak: str  # key of the measured cuBLAS peak that bounds it
    blockscaled: bool = False

    @property
    def torch_in(self) -> torch.dtype:
        return getattr(torch, self.storage)

    @property
    def torch_out(self) -> torch.dtype:
        return getattr(torch, self.out)

    @property
    def in_bytes(self) -> int:
        return self.torch_in.itemsize

    @property
    def out_bytes(self) -> int:
        return self.torch_out.itemsize


DTYPES = {
    "bf16": DType("bf16", "bfloat16", "bfloat16", "bf16"),
    "fp16": DType("fp16", "float16", "float16", "fp16"),
    "fp8": DType("fp8", "float8_e4m3fn", "bfloat16", "fp8"),
    "fp8-block": DType("fp8-block", "float8_e4m3fn", "bfloat16", "fp8", blockscaled=True),
}


@dataclass(frozen=True)
class Case:
    """One measured GEMM: shape set, dtype name and C[M, N] = A[M, K] · W[N, K]ᵀ."""

    set: str
    dtype: str
    M: int
    N: int
    K: int

    @property
    def shape(self) -> str:
        return f"{self.M}x{self.N}x{self.K}"

    @property
    def flops(self) -> int:
        return gemm_flops(self.M, self.N, self.K)

    @property
    def bytes(self) -> int:
        return gemm_bytes(self.M, self.N, self.K, DTYPES[self.dtype])


def gemm_flops(M: int, N: int, K: int) -> int:
    """2·M·N·K."""
    return 2 * M * N * K


def gemm_bytes(M: int, N: int, K: int, dtype: DType) -> int:
    """Compulsory DRAM traffic: A and W read once, C written once, plus fp32 block scales."""
    total = (M * K + N * K) * dtype.in_bytes + M * N * dtype.out_bytes
    if dtype.blockscaled:
        kb = math.ceil(K / SCALE_BLOCK)
        total += (M * kb + math.ceil(N / SCALE_BLOCK) * kb) * 4
    return total


def roofline(flops: int, nbytes: int, peak_tflops: float, copy_gbps: float) -> tuple[float, str]:
    """(floor in ms, "compute" or "memory"): the larger of FLOPs / peak and bytes / bandwidth."""
    compute_ms = flops / (peak_tflops * 1e12) * 1e3
    memory_ms = nbytes / (copy_gbps * 1e9) * 1e3
    return (compute_ms, "compute") if compute_ms >= memory_ms else (memory_ms, "memory")


def parse_shapes(text: str) -> tuple[tuple[int, int, int], ...]:
    """"MxNxK,MxNxK" -> ((M, N, K), ...), each operand and the output under 2**31 elements."""
    shapes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isascii() and p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"shape {item!r}: expected MxNxK with positive integers")
        M, N, K = (int(p) for p in parts)
        try:
            for name, numel in (("A", M * K), ("W", N * K), ("C", M * N)):
                _check_elements(f"shape {item!r}: {name}", numel)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        shapes.append((M, N, K))
    return tuple(shapes)


def plan_cases(sets: Sequence[str], dtypes: Sequence[str], shapes=None) -> tuple[list[Case], list[str]]:
    """The cases to run, in order, each once, and notes on shapes dropped (block scaling needs K
    a multiple of 128) and on repeats (a shape, set or dtype named twice). ``shapes`` replaces
    the named sets by one set called "custom"."""
    named = [("custom", shapes)] if shapes else [(s, SHAPE_SETS[s]) for s in sets]
    cases, notes, seen, repeats = [], [], [], []
    for set_name, set_shapes in named:
        for dtype in SET_DTYPES.get(set_name, dtypes):
            for M, N, K in set_shapes:
                case = Case(set_name, dtype, M, N, K)
                if case in seen:
                    if case in cases and case not in repeats:
                        repeats.append(case)
                    continue
                seen.append(case)
                if DTYPES[dtype].blockscaled and K % SCALE_BLOCK:
                    notes.append(f"{set_name} {M}x{N}x{K}: {dtype} needs K a multiple of {SCALE_BLOCK}; dropped")
                else:
                    cases.append(case)
    notes += [f"the repeat of {c.set} {c.dtype} {c.shape} (named more than once, measured once)" for c in repeats]
    return cases, notes


# ---- the Triton tutorial's persistent matmul (comparison baseline) ---------------------------

#: Tutorial 09-persistent-matmul configurations by input element size.
TUTORIAL_CONFIGS = {
    1: dict(block_m=128, block_n=256, block_k=128, group_m=8, stages=3, warps=8),
    2: dict(block_m=128, block_n=256, block_k=64, group_m=8, stages=3, warps=8),
}


@triton.jit
def _grouped_tile(tile_id, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    width = GROUP_M * tiles_n
    first_m = (tile_id // width) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (tile_id % width) % rows, (tile_id % width) // rows


@triton.jit
def tutorial_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                               stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    """Persistent GEMM in the style of Triton's 09-persistent-matmul tutorial: offsets wrapped
    with tl.where and contiguity hints, the K tail masked every step, tile and K loops flattened."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    rk = tl.arange(0, BLOCK_K)
    epilogue_tile = pid - NUM_SMS
    for tile_id in tl.range(pid, tiles_m * tiles_n, NUM_SMS, flatten=True):
        pid_m, pid_n = _grouped_tile(tile_id, tiles_m, tiles_n, GROUP_M)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rm = tl.max_contiguous(tl.multiple_of(tl.where(rm < M, rm, 0), BLOCK_M), BLOCK_M)
        rn = tl.max_contiguous(tl.multiple_of(tl.where(rn < N, rn, 0), BLOCK_N), BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            kk = ki * BLOCK_K + rk
            a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                        mask=rk[None, :] < K - ki * BLOCK_K, other=0.0)
            b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                        mask=rk[:, None] < K - ki * BLOCK_K, other=0.0)
            acc = tl.dot(a, b, acc)
        epilogue_tile += NUM_SMS
        pid_m, pid_n = _grouped_tile(epilogue_tile, tiles_m, tiles_n, GROUP_M)
        cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
                 mask=(cm[:, None] < M) & (cn[None, :] < N))


def tutorial_matmul(a, b, c, num_sms, *, block_m=128, block_n=256, block_k=64, group_m=8, stages=3, warps=8):
    """c = a @ b with the tutorial kernel on min(num_sms, tiles) programs; returns c."""
    M, K = a.shape
    N = b.shape[1]
    grid = (min(num_sms, triton.cdiv(M, block_m) * triton.cdiv(N, block_n)),)
    tutorial_persistent_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=block_m,
                                     BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, NUM_SMS=grid[0],
                                     num_stages=stages, num_warps=warps)
    return c


# ---- TileLang's own T.gemm kernels (comparison baseline) -------------------------------------

@dataclass(frozen=True)
class TGemmConfig:
    """A T.gemm kernel for C[rows, cols] = A[rows, K] · B[cols, K]ᵀ with one tile shape.
    row_group / col_group > 0 make it block-scaled: A's scale is SR[row // row_group, k // 128]
    and B's SC[col // col_group, k // 128], applied per 128-deep K block (DeepGEMM promotion)."""

    rows: int
    cols: int
    K: int
    storage: str
    out: str
    block_m: int
    block_n: int
    block_k: int
    stages: int
    threads: int
    row_group: int = 0
    col_group: int = 0

    def prim_func(self):
        """The TileLang prim_func (TMA loads, T.Pipelined K loop, T.gemm on wgmma)."""
        import tilelang.language as T

        rows, cols, K, st, out = self.rows, self.cols, self.K, self.storage, self.out
        bm, bn, bk, stages, threads = self.block_m, self.block_n, self.block_k, self.stages, self.threads
        if not self.row_group:
            @T.prim_func
            def gemm(A: T.Tensor((rows, K), st), B: T.Tensor((cols, K), st), C: T.Tensor((rows, cols), out)):
                with T.Kernel(T.ceildiv(cols, bn), T.ceildiv(rows, bm), threads=threads) as (bx, by):
                    A_s = T.alloc_shared((bm, bk), st)
                    B_s = T.alloc_shared((bn, bk), st)
                    acc = T.alloc_fragment((bm, bn), "float32")
                    T.clear(acc)
                    for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                        T.copy(A[by * bm, ko * bk], A_s)
                        T.copy(B[bx * bn, ko * bk], B_s)
                        T.gemm(A_s, B_s, acc, transpose_B=True)
                    T.copy(acc, C[by * bm, bx * bn])

            return gemm
        rg, cg, kb = self.row_group, self.col_group, K // bk

        @T.prim_func
        def gemm_blockscaled(A: T.Tensor((rows, K), st), B: T.Tensor((cols, K), st),
                             SR: T.Tensor((T.ceildiv(rows, rg), kb), "float32"),
                             SC: T.Tensor((T.ceildiv(cols, cg), kb), "float32"), C: T.Tensor((rows, cols), out)):
            with T.Kernel(T.ceildiv(cols, bn), T.ceildiv(rows, bm), threads=threads) as (bx, by):
                A_s = T.alloc_shared((bm, bk), st)
                B_s = T.alloc_shared((bn, bk), st)
                part = T.alloc_fragment((bm, bn), "float32")
                acc = T.alloc_fragment((bm, bn), "float32")
                T.clear(acc)
                for ko in T.Pipelined(kb, num_stages=stages):
                    T.copy(A[by * bm, ko * bk], A_s)
                    T.copy(B[bx * bn, ko * bk], B_s)
                    T.gemm(A_s, B_s, part, transpose_B=True, clear_accum=True)
                    for i, j in T.Parallel(bm, bn):
                        acc[i, j] += part[i, j] * SR[(by * bm + i) // rg, ko] * SC[(bx * bn + j) // cg, ko]
                T.copy(acc, C[by * bm, bx * bn])

        return gemm_blockscaled

    def compile(self):
        """The compiled kernel (needs nvcc)."""
        import tilelang

        return tilelang.compile(self.prim_func(), target="cuda")


def tgemm_config(case: Case, schedule: Schedule) -> TGemmConfig:
    """T.gemm with the tile, stages and consumer threads of ``schedule`` (a swap-AB schedule
    runs the swapped problem Cᵀ = W · Aᵀ, as a swap-AB kernel does)."""
    dt = DTYPES[case.dtype]
    rows, cols = (case.N, case.M) if schedule.is_swap_ab else (case.M, case.N)
    groups = {}
    if dt.blockscaled:
        groups = dict(row_group=SCALE_BLOCK, col_group=1) if schedule.is_swap_ab else dict(row_group=1,
                                                                                           col_group=SCALE_BLOCK)
    return TGemmConfig(rows, cols, case.K, dt.storage, dt.out, schedule.block_m, schedule.block_n, schedule.block_k,
                       schedule.num_stages, 128 * schedule.num_warpgroups, **groups)


# ---- inputs and reference ------------------------------------------------------------------

@dataclass
class Inputs:
    """One input set: A [M, K], W [N, K], the output buffer and the scales (fp8 kinds)."""

    a: torch.Tensor
    w: torch.Tensor
    out: torch.Tensor
    scale_a: torch.Tensor | None = None  # fp8: one value; fp8-block: [M, K/128]
    scale_b: torch.Tensor | None = None  # fp8: one value; fp8-block: [⌈N/128⌉, K/128]
    scale_a_mn: torch.Tensor | None = None  # fp8-block: scale_a stored M-major (cuBLAS, DeepGEMM and tlgemm's layout)


def _varied(x: torch.Tensor, block: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """x with each block multiplied by a random power of two in [2^-4, 2^4], so that the block
    scales differ widely (a kernel applying the wrong block's scale fails the check)."""
    (rows, cols), (br, bc) = x.shape, block
    exponents = torch.randint(-4, 5, (-(-rows // br), -(-cols // bc)), generator=generator, device=x.device)
    factor = torch.exp2(exponents.float()).repeat_interleave(br, dim=0).repeat_interleave(bc, dim=1)
    return x * factor[:rows, :cols]


def make_inputs(case: Case, count: int, seed: int, device) -> list[Inputs]:
    """``count`` independent random input sets for ``case`` (normal values; fp8 clamped to ±8
    as tlgemm.testing.random_operand does; fp8-block quantised from values of varied range)."""
    dt = DTYPES[case.dtype]
    M, N, K = case.M, case.N, case.K
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)

    def normal(shape):
        return torch.randn(shape, generator=gen, device=device, dtype=torch.float32)

    sets = []
    for _ in range(count):
        out = torch.empty((M, N), dtype=dt.torch_out, device=device)
        if dt.blockscaled:
            a, sa = quantize_fp8_blockwise(_varied(normal((M, K)), A_BLOCK, gen), A_BLOCK)
            w, sb = quantize_fp8_blockwise(_varied(normal((N, K)), W_BLOCK, gen), W_BLOCK)
            sets.append(Inputs(a, w, out, sa, sb, sa.t().contiguous().t()))
        elif dt.in_bytes == 1:
            one = torch.ones((), dtype=torch.float32, device=device)
            a, w = (normal(shape).clamp(-8, 8).to(dt.torch_in) for shape in ((M, K), (N, K)))
            sets.append(Inputs(a, w, out, one, one))
        else:
            sets.append(Inputs(normal((M, K)).to(dt.torch_in), normal((N, K)).to(dt.torch_in), out))
    return sets


def reference(case: Case, inp: Inputs) -> torch.Tensor:
    """float64 C for one input set (block-scaled inputs dequantised first)."""
    if DTYPES[case.dtype].blockscaled:
        a = dequantize_fp8_blockwise(inp.a, inp.scale_a, A_BLOCK)
        w = dequantize_fp8_blockwise(inp.w, inp.scale_b, W_BLOCK)
        return reference_gemm(a, w.t())
    return reference_gemm(inp.a, inp.w.t(), scale_a=inp.scale_a, scale_b=inp.scale_b)


def blockscaled_inputs(M: int, N: int, K: int, *, seed: int = 0, device="cuda") -> tuple[Inputs, torch.Tensor]:
    """One fp8-block input set of C[M, N] = A · Wᵀ (``make_inputs``) and its float64
    ``reference``: what the focused block-scaled scripts in benchmarks/ measure on."""
    case = Case("fp8-blockscaled", "fp8-block", M, N, K)
    inp = make_inputs(case, 1, seed, device)[0]
    return inp, reference(case, inp)


def fresh_blockscaled_inputs(M: int, N: int, K: int, device="cuda") -> Inputs:
    """A new fp8-block input set made the way the test behind DeepGEMM's published table
    (``DEEPGEMM_H800_TFLOPS``; tests/test_core.py of that release) made one before every timed
    call: bf16 activations and weights from randn, their bf16 product (that test's reference),
    then both quantised (1x128 and 128x128 blocks), A's scales made outer-dim-major last. The
    quantised weights are the last large tensor written, so the GEMM that follows finds what of
    them fits in the L2 still there; ``kernel_time_us(..., flush=...)`` times calls this way."""
    x = torch.randn((M, K), device=device, dtype=torch.bfloat16)
    y = torch.randn((N, K), device=device, dtype=torch.bfloat16)
    out = torch.empty((M, N), device=device, dtype=torch.bfloat16)
    torch.matmul(x, y.t())
    a, sa = quantize_fp8_blockwise(x, A_BLOCK)
    w, sb = quantize_fp8_blockwise(y, W_BLOCK)
    return Inputs(a, w, out, sa, sb, sa.t().contiguous().t())


def cublas_blockwise(i: Inputs, out_dtype=torch.bfloat16, out=None) -> torch.Tensor:
    """cuBLAS's DeepSeek-style block-scaled FP8 GEMM on an fp8-block input set:
    torch._scaled_mm with A's 1x128 scales outer-dim-major and W's 128x128 ones."""
    return torch._scaled_mm(i.a, i.w.t(), scale_a=i.scale_a_mn, scale_b=i.scale_b.t(), out_dtype=out_dtype, out=out)


def rotation_sets(set_bytes: int, l2_bytes: int, free_bytes: int, *, lo: int = 2, hi: int = 8) -> int:
    """Input sets to rotate: enough that together they are 4x the L2 (between lo and hi), but
    using at most a quarter of the free device memory."""
    n = min(hi, max(lo, math.ceil(4 * l2_bytes / max(set_bytes, 1))))
    while n > 1 and n * set_bytes > free_bytes // 4:
        n -= 1
    return n


# ---- implementations -----------------------------------------------------------------------

class Unsupported(Exception):
    """The implementation does not do this case (not an error of the kernel)."""


@dataclass
class Device:
    """What the harness needs to know about the GPU (torch_device "cpu" only in tests)."""

    name: str
    num_sms: int
    smem_bytes: int
    l2_bytes: int
    total_bytes: int
    capability: str
    torch_device: str = "cuda"
    index: int = 0
    fast_accum: bool = False
    tgemm_kernels: dict = field(default_factory=dict)  # TGemmConfig -> Future of the compiled kernel
    uuid: str | None = None  # "GPU-<UUID>", nvidia-smi's id of the GPU (``index`` is torch's, not nvidia-smi's)

    @classmethod
    def current(cls, fast_accum: bool = False) -> "Device":
        index = torch.cuda.current_device()
        p = torch.cuda.get_device_properties(index)
        uuid = getattr(p, "uuid", None)  # torch's _CUuuid: str() is the dashed hex, nvidia-smi's id less "GPU-"
        return cls(p.name, p.multi_processor_count, getattr(p, "shared_memory_per_block_optin", 232448),
                   getattr(p, "L2_cache_size", 50 * 2**20), p.total_memory, f"{p.major}.{p.minor}", "cuda", index,
                   fast_accum, uuid=None if uuid is None else f"GPU-{uuid}")

    def free_bytes(self) -> int:
        return torch.cuda.mem_get_info(self.index)[0] if self.torch_device == "cuda" else self.total_bytes


@dataclass
class Prepared:
    """A ready implementation for one case: fn(inputs) computes C and returns it as [M, N]."""

    fn: Callable[[Inputs], torch.Tensor]
    info: str = ""


def top_schedule(case: Case, dev: Device, explain: bool = False):
    """tlgemm.schedules.select for the case on this device."""
    dt = DTYPES[case.dtype]
    return select(case.M, case.N, case.K, (dt.storage, dt.storage, dt.out), dev.num_sms, dev.smem_bytes,
                  explain=explain)


#: Implementation keys (in report order) and their labels; cuBLAS is the reference of every ratio.
LABELS = {"cublas": "cuBLAS", "tlgemm-tilelang": "tlgemm TileLang", "tlgemm-triton": "tlgemm Triton",
          "tilelang-tgemm": "TileLang T.gemm", "triton-tutorial": "Triton tutorial"}
REFERENCE_IMPL = "cublas"


class Impl(abc.ABC):
    """One timed implementation. ``unavailable`` is None or why it cannot run at all."""

    key = ""

    def __init__(self):
        self.unavailable: str | None = None

    @property
    def label(self) -> str:
        return LABELS[self.key]

    @abc.abstractmethod
    def build(self, case: Case, inp: Inputs, dev: Device) -> Prepared:
        """Ready the implementation for ``case`` (may run it once on ``inp``); raises
        Unsupported when it does not do this case."""

    def compile_ahead(self, cases: Sequence[Case], dev: Device, pool: concurrent.futures.Executor,
                      seed: int) -> list[concurrent.futures.Future]:
        """Submit work to ``pool`` that compiles this implementation's kernels for ``cases``
        before timing starts (none by default: it compiles on its first call)."""
        return []


class Cublas(Impl):
    """torch.mm; fp8: torch._scaled_mm with per-tensor or DeepSeek block-wise scales."""

    key = "cublas"

    def build(self, case, inp, dev):
        dt = DTYPES[case.dtype]
        if dt.blockscaled:
            def fn(i):
                return cublas_blockwise(i, dt.torch_out, i.out)
            info = "torch._scaled_mm, 1x128 / 128x128 block scales"
        elif dt.in_bytes == 1:
            def fn(i):
                return torch._scaled_mm(i.a, i.w.t(), scale_a=i.scale_a, scale_b=i.scale_b, out_dtype=dt.torch_out,
                                        use_fast_accum=dev.fast_accum, out=i.out)
            info = f"torch._scaled_mm, per-tensor scales, use_fast_accum={dev.fast_accum}"
        else:
            def fn(i):
                return torch.mm(i.a, i.w.t(), out=i.out)
            info = "torch.mm"
        return Prepared(fn, info)


class Tlgemm(Impl):
    """tlgemm.<backend>.matmul with the schedule tlgemm.schedules.select chooses; the block-
    scaled kind calls tlgemm.<backend>.blockscaled_matmul with its default schedule.

    Candidates the backend does not run (``tlgemm.api.runs_schedule``: split-K) are passed
    over; a schedule the backend rejects before launching (ValueError / NotImplementedError)
    gives way to select()'s next candidate; a rejected swap-AB schedule is first retried as an operand
    swap: Cᵀ[N, M] = W · Aᵀ written row-major (C column-major), what a swap-AB kernel stores
    and what the T.gemm baseline does for the same schedule."""

    MAX_CANDIDATES = 8

    def __init__(self, backend: str):
        super().__init__()
        self.backend = backend
        self.key = f"tlgemm-{backend}"
        self.module = None
        try:
            self.module = importlib.import_module(f"tlgemm.{backend}")
        except Exception as err:  # noqa: BLE001 - any import failure makes it unavailable
            self.unavailable = f"import tlgemm.{backend} failed: {type(err).__name__}: {err}"
        else:
            if not hasattr(self.module, "matmul"):
                self.unavailable = f"tlgemm.{backend} has no matmul"

    def build(self, case, inp, dev):
        dt = DTYPES[case.dtype]
        if dt.blockscaled:
            return self._build_blockscaled(dt, inp)
        scaled = dt.in_bytes == 1
        rejected = []
        candidates = top_schedule(case, dev, explain=True).candidates
        # a swap-AB schedule the backend does not take still runs as an operand swap (below)
        for schedule in _unique(c.schedule for c in candidates
                                if runs_schedule(self.backend, "matmul", c.schedule.swap_ab(False))):
            if len(rejected) >= self.MAX_CANDIDATES:
                break
            for swapped in ((False, True) if schedule.is_swap_ab else (False,)):
                fn = self._launcher(schedule, swapped, scaled)
                try:
                    fn(inp)
                except (ValueError, NotImplementedError) as err:
                    rejected.append(f"{schedule}{' as operand swap' if swapped else ''}: {err}")
                    continue
                info = f"{schedule}{' (operand swap)' if swapped else ''}"
                if rejected:
                    info += f"; rejected first: {rejected[0]}"
                return Prepared(fn, info)
        raise Unsupported(f"tlgemm.{self.backend}.matmul rejected every schedule tried: {rejected[0]}")

    def compile_ahead(self, cases, dev, pool, seed):
        """TileLang backend only (its launchers compile a kernel per schedule and dtypes on the
        first call, in nvcc, outside the GIL): run one case per (dtype, selected schedule), so no
        two threads compile the same kernel; failures resurface when the case runs."""
        if self.backend != "tilelang":
            return []
        representatives = {}
        for case in cases:
            key = (case.dtype, None if DTYPES[case.dtype].blockscaled else top_schedule(case, dev))
            representatives.setdefault(key, case)

        def warm(case):
            torch.cuda.set_device(dev.index)
            inp = make_inputs(case, 1, seed, dev.torch_device)[0]
            try:
                self.build(case, inp, dev).fn(inp)
            except Exception:  # noqa: BLE001 - reported, with its reason, when the case is measured
                return

        return [pool.submit(warm, case) for case in representatives.values()]

    def _launcher(self, schedule: Schedule, swapped: bool, scaled: bool):
        matmul = self.module.matmul
        if swapped:
            plain = schedule.swap_ab(False)

            def fn(i):
                scales = dict(scale_a=i.scale_b, scale_b=i.scale_a) if scaled else {}
                out_t = i.out.view(i.w.shape[0], i.a.shape[0])
                matmul(i.w, i.a.t(), plain, out=out_t, **scales)
                return out_t.t()
        else:
            def fn(i):
                scales = dict(scale_a=i.scale_a, scale_b=i.scale_b) if scaled else {}
                return matmul(i.a, i.w.t(), schedule, out=i.out, **scales)
        return fn

    def _build_blockscaled(self, dt, inp):
        blockscaled = getattr(self.module, "blockscaled_matmul", None)
        if blockscaled is None:
            raise Unsupported(f"tlgemm.{self.backend} has no blockscaled_matmul")
        takes_out = "out" in inspect.signature(blockscaled).parameters

        def fn(i):
            extra = dict(out=i.out) if takes_out else {}
            return blockscaled(i.a, i.w, i.scale_a_mn, i.scale_b, schedule=None, out_dtype=dt.torch_out, **extra)

        try:
            fn(inp)
        except (ValueError, NotImplementedError) as err:
            raise Unsupported(f"tlgemm.{self.backend}.blockscaled_matmul rejected it: {err}") from err
        return Prepared(fn, "default schedule" + ("" if takes_out else " (allocates its output)"))


class TileLangGemm(Impl):
    """TileLang's T.gemm with the tile, stages and threads of select()'s best schedule whose
    block_n is a power of two (the widths between, which tlgemm's TileLang matmul takes, are
    not offered to T.gemm)."""

    key = "tilelang-tgemm"

    def __init__(self):
        super().__init__()
        try:
            importlib.import_module("tilelang")
        except Exception as err:  # noqa: BLE001 - any import failure makes it unavailable
            self.unavailable = f"import tilelang failed: {type(err).__name__}: {err}"

    @staticmethod
    def config(case: Case, dev: Device) -> tuple[TGemmConfig, bool]:
        """The kernel for the case and whether it runs the swapped problem."""
        schedule = next(c.schedule for c in top_schedule(case, dev, explain=True).candidates
                        if c.schedule.has_pow2_block_n)
        if DTYPES[case.dtype].blockscaled and schedule.block_k != SCALE_BLOCK:
            raise Unsupported(f"this block-scaled kernel needs block_k = {SCALE_BLOCK}, "
                              f"select() gave {schedule.block_k}")
        return tgemm_config(case, schedule), schedule.is_swap_ab

    def compile_ahead(self, cases, dev, pool, seed):
        """Compile every distinct kernel the cases need; the futures land in dev.tgemm_kernels."""
        configs = []
        for case in cases:
            try:
                configs.append(self.config(case, dev)[0])
            except Unsupported:
                continue

        def compile_one(cfg):
            torch.cuda.set_device(dev.index)
            return cfg.compile()

        futures = {cfg: pool.submit(compile_one, cfg) for cfg in _unique(configs)}
        dev.tgemm_kernels.update(futures)
        return list(futures.values())

    def build(self, case, inp, dev):
        cfg, swapped = self.config(case, dev)
        future = dev.tgemm_kernels.get(cfg)
        kernel = future.result() if future is not None else cfg.compile()
        M, N = case.M, case.N

        def fn(i):
            a, w, out = (i.w, i.a, i.out.view(N, M)) if swapped else (i.a, i.w, i.out)
            if cfg.row_group:
                kernel(a, w, *((i.scale_b, i.scale_a) if swapped else (i.scale_a, i.scale_b)), out)
            else:
                kernel(a, w, out)
            return out.t() if swapped else out

        info = f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} stages={cfg.stages} threads={cfg.threads}"
        return Prepared(fn, info + (" swap-AB" if swapped else ""))


class TritonTutorial(Impl):
    """The Triton tutorial persistent matmul at its published tile configuration."""

    key = "triton-tutorial"

    def build(self, case, inp, dev):
        dt = DTYPES[case.dtype]
        if dt.blockscaled:
            raise Unsupported("the tutorial kernel has no block scaling")
        cfg = TUTORIAL_CONFIGS[dt.in_bytes]

        def fn(i):
            return tutorial_matmul(i.a, i.w.t(), i.out, dev.num_sms, **cfg)

        return Prepared(fn, f"{cfg['block_m']}x{cfg['block_n']}x{cfg['block_k']} stages={cfg['stages']} "
                            f"warps={cfg['warps']}")


IMPLEMENTATIONS = {"cublas": Cublas, "tlgemm-tilelang": lambda: Tlgemm("tilelang"),
                   "tlgemm-triton": lambda: Tlgemm("triton"), "tilelang-tgemm": TileLangGemm,
                   "triton-tutorial": TritonTutorial}


def _unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
            yield item


# ---- measuring -----------------------------------------------------------------------------

class CudaContextLost(RuntimeError):
    """A kernel broke the CUDA context; nothing after it can be measured in this process."""


def _synchronize_or_abort(what: str) -> None:
    if not torch.cuda.is_initialized():
        return
    try:
        torch.cuda.synchronize()
    except Exception as err:  # noqa: BLE001 - any failure here means the context is gone
        raise CudaContextLost(f"after {what}: {type(err).__name__}: {err}") from err


def check(fn: Callable[[Inputs], torch.Tensor], inp: Inputs, ref: torch.Tensor, dtype: torch.dtype,
          what: str, blockscaled: bool = False) -> float:
    """Run fn once on a NaN-poisoned output and compare with the reference (``blockscaled``: the
    product of the dequantised inputs, block-scaled fp8's bound); returns the relative error,
    raises AssertionError when the result is wrong or not fully written."""
    inp.out.fill_(float("nan"))
    if inp.out.is_cuda:
        poison_allocator(inp.out.shape, inp.out.dtype, inp.out.device)
    result = fn(inp)
    if result.is_cuda:
        torch.cuda.synchronize()
    return assert_gemm_close(result, ref, dtype, blockscaled=blockscaled, what=what)


def check_blockscaled(fn: Callable[[Inputs], torch.Tensor], inp: Inputs, ref: torch.Tensor, what: str) -> float:
    """``check`` of a block-scaled fp8 GEMM on ``blockscaled_inputs`` against ``ref``, the product
    of its dequantised inputs: block-scaled fp8's bound (1e-2), not fp8's."""
    return check(fn, inp, ref, torch.float8_e4m3fn, what, blockscaled=True)


def check_cublas_blockwise(inp: Inputs, ref: torch.Tensor, what: str) -> float:
    """``check_blockscaled`` of cuBLAS's block-wise path (``cublas_blockwise``) into inp.out."""
    return check_blockscaled(lambda i: cublas_blockwise(i, out=i.out), inp, ref, what)


def bench_rotating(fn: Callable[[Inputs], object], sets: Sequence[Inputs], warmup_ms: float, rep_ms: float) -> float:
    """do_bench median (ms) of fn cycling over the input sets."""
    from triton.testing import do_bench

    rotation = itertools.cycle(sets)
    return do_bench(lambda: fn(next(rotation)), warmup=warmup_ms, rep=rep_ms, return_mode="median")


#: Bytes zeroed before each profiled call: the ``bench_kineto`` of DeepGEMM's later releases
#: (deep_gemm/utils.py) flushes the L2 by zeroing 8 GB (``torch.empty(...).zero_()``, a fill
#: kernel) before each call it times.
PROFILE_FLUSH_BYTES = 8 * 10**9


def split_profiled_calls(names: Sequence[str], durations_us: Sequence[float], flush: Sequence[str],
                         call: Sequence[str], calls: int) -> list[float]:
    """Per-call device time from a profiled run: ``names`` / ``durations_us`` are the GPU
    activities (kernels, memsets, copies) in start order of ``calls`` iterations of [the flush,
    one call], whose activity names are ``flush`` and ``call`` (each recorded once on its own).
    Returns, per call, the summed duration of its activities; raises ValueError when the
    record does not follow that pattern (a call that launches a varying set of kernels)."""
    period = len(flush) + len(call)
    expected = (list(flush) + list(call)) * calls
    if not call or list(names) != expected:
        got = list(names[:period])
        raise ValueError(f"profiled activities do not repeat [flush {list(flush)}, call {list(call)}] "
                         f"{calls} times: {len(names)} recorded, the first {got}")
    return [sum(durations_us[i * period + len(flush):(i + 1) * period]) for i in range(calls)]


def _gpu_activities(fn: Callable[[], object]) -> tuple[list[str], list[float]]:
    """Names and durations (us) of the GPU activities of fn(), in start order (CUPTI through
    torch.profiler)."""
    from torch.autograd import DeviceType

    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)
    return [e.name for e in events], [e.time_range.end - e.time_range.start for e in events]


def kernel_time_us(fn: Callable[[], object], calls: int = 30, flush: Callable[[], object] | None = None) -> list[float]:
    """Device time of each of ``calls`` calls of fn, from the CUDA profiler: the summed duration
    of the GPU activities each call issues, each call after ``flush()`` (default: zeroing
    PROFILE_FLUSH_BYTES, which evicts the L2). This is DeepGEMM's ``bench_kineto`` (kernel
    duration; its later releases zero 8 GB before each call, the release of its published
    table made new inputs instead: ``fresh_blockscaled_inputs``); unlike do_bench it leaves
    out the launch latency between calls and the host's part of a call."""
    if flush is None:
        flush = torch.empty(PROFILE_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda").zero_
    fn()
    flush_names, _ = _gpu_activities(flush)
    call_names, _ = _gpu_activities(fn)

    def run():
        for _ in range(calls):
            flush()
            fn()

    names, durations = _gpu_activities(run)
    return split_profiled_calls(names, durations, flush_names, call_names, calls)


MIN_SAMPLES = 10  # rep is stretched to 2·MIN_SAMPLES floors: a kernel at half the roofline speed runs this often


def measure_impl(impl: Impl, case: Case, sets: Sequence[Inputs], ref: torch.Tensor, dev: Device,
                 warmup_ms: float, rep_ms: float) -> dict:
    """One implementation on one case: build, check, time. Returns its result entry."""
    if impl.unavailable:
        return {"status": "n/a", "reason": impl.unavailable}
    what = f"{impl.label} {case.dtype} {case.shape}"
    try:
        prepared = impl.build(case, sets[0], dev)
        _synchronize_or_abort(what)
    except Unsupported as err:
        return {"status": "n/a", "reason": str(err)}
    except CudaContextLost:
        raise
    except Exception as err:  # noqa: BLE001 - a failing kernel is a result, not a harness error
        _synchronize_or_abort(what)
        return {"status": "fail", "reason": _one_line(err)}
    entry = {"info": prepared.info}
    try:
        entry["error"] = check(prepared.fn, sets[0], ref, DTYPES[case.dtype].torch_in, what,
                               DTYPES[case.dtype].blockscaled)
    except AssertionError as err:
        return {**entry, "status": "incorrect", "reason": str(err)}
    except Exception as err:  # noqa: BLE001
        _synchronize_or_abort(what)
        return {**entry, "status": "fail", "reason": _one_line(err)}
    ms = bench_rotating(prepared.fn, sets, warmup_ms, rep_ms)
    return {**entry, "status": "ok", "ms": ms, "tflops": case.flops / (ms * 1e-3) / 1e12}


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


PEAK_SIZES = (4096, 8192)  # square cuBLAS GEMMs whose best TFLOP/s is the compute roof
COPY_BYTES = 2**30  # device-to-device copy that measures the memory roof


def measure_peaks(peak_keys: Sequence[str], dev: Device, warmup_ms: float, rep_ms: float) -> dict:
    """cuBLAS TFLOP/s per dtype (best of PEAK_SIZES cubes) and device copy bandwidth (GB/s)."""
    peaks = {}
    for key in peak_keys:
        best = None
        for size in PEAK_SIZES:
            case = Case("peak", key, size, size, size)
            sets = make_inputs(case, 2, seed=size, device=dev.torch_device)
            prepared = Cublas().build(case, sets[0], dev)
            ms = bench_rotating(prepared.fn, sets, warmup_ms, max(rep_ms, 100))
            tflops = case.flops / (ms * 1e-3) / 1e12
            if best is None or tflops > best["tflops"]:
                best = {"tflops": tflops, "shape": case.shape, "how": prepared.info}
            del sets
        peaks[key] = best
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=dev.torch_device)
    dst = torch.empty_like(src)
    ms = bench_rotating(lambda _: dst.copy_(src), [None], warmup_ms, max(rep_ms, 100))
    copy = {"gbps": 2 * COPY_BYTES / (ms * 1e-3) / 1e9,
            "how": f"{COPY_BYTES / 2**30:g} GiB device-to-device copy (read + write)"}
    del src, dst
    torch.cuda.empty_cache()
    return {"tflops": peaks, "copy": copy}


def compile_ahead(impls: Sequence[Impl], cases: Sequence[Case], dev: Device, workers: int, seed: int) -> None:
    """Run every implementation's compile_ahead work in ``workers`` threads, with a progress bar,
    before any timing (a background compile would steal the GIL from the timed launches)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [f for impl in impls if not impl.unavailable for f in impl.compile_ahead(cases, dev, pool, seed)]
        if not futures:
            return
        bar = Progress(len(futures), f"compiling TileLang kernels ({workers} threads)")
        for _ in concurrent.futures.as_completed(futures):
            bar.update("")
        bar.close()
    _synchronize_or_abort("compiling ahead")


# ---- progress ------------------------------------------------------------------------------

class Progress:
    """A progress bar on stderr: tqdm when installed, else a plain text bar. When stderr is not
    a terminal (a captured log) it updates rarely, on lines of its own."""

    def __init__(self, total: int, desc: str):
        self.total, self.desc, self.done = total, desc, 0
        self.tty = sys.stderr.isatty()
        try:
            from tqdm import tqdm
        except ImportError:
            self.bar = None
        else:
            self.bar = tqdm(total=total, desc=desc, file=sys.stderr, dynamic_ncols=True,
                            mininterval=0.1 if self.tty else 15.0)

    def update(self, label: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(label, refresh=False)
            self.bar.update(1)
            return
        if not self.tty and self.done % max(1, self.total // 20) and self.done != self.total:
            return
        width = 30
        filled = width * self.done // max(self.total, 1)
        start, text, end = ("\r", f"{label[:40]:40s}", "") if self.tty else ("", label[:40], "\n")
        sys.stderr.write(f"{start}{self.desc} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                         f"{text}{end}")
        sys.stderr.flush()

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            sys.stderr.write("\n" + text + "\n")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.tty:
            sys.stderr.write("\n")


# ---- environment record --------------------------------------------------------------------

def _nvidia_smi(uuid: str | None) -> dict | None:
    """Clocks, power and driver of the GPU nvidia-smi knows as ``uuid`` ("GPU-<UUID>"; None without
    nvidia-smi, a UUID, or a GPU of that UUID). By UUID, not index: torch's index counts the GPUs
    CUDA_VISIBLE_DEVICES leaves, in CUDA_DEVICE_ORDER; nvidia-smi's counts all, in PCI bus order."""
    if uuid is None:
        return None
    fields = ("clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem", "power.draw", "power.limit",
              "temperature.gpu", "pstate", "driver_version")
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader",
                              f"--id={uuid}"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    return dict(zip(fields, (v.strip() for v in out.stdout.strip().splitlines()[0].split(","))))


def _version(module: str) -> str:
    try:
        return importlib.import_module(module).__version__
    except Exception as err:  # noqa: BLE001
        return f"unavailable ({type(err).__name__})"


def _git_commit() -> str | None:
    """HEAD of the checkout tlgemm runs from, "+dirty" where tracked files differ from it (the
    code measured is then not that commit's)."""
    here = pathlib.Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=here)
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                 text=True, timeout=30, cwd=here)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0 or not head.stdout.strip():
        return None
    dirty = "+dirty" if changed.returncode != 0 or changed.stdout.strip() else ""
    return head.stdout.strip() + dirty


def environment(dev: Device, command: str) -> dict:
    """GPU, clocks, versions, date and the command line of this run."""
    return {
        "gpu": dev.name, "capability": dev.capability, "num_sms": dev.num_sms, "l2_bytes": dev.l2_bytes,
        "memory_bytes": dev.total_bytes, "clocks_start": _nvidia_smi(dev.uuid),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                     "triton": triton.__version__, "tilelang": _version("tilelang"), "tlgemm": tlgemm.__version__,
                     "tlgemm_commit": _git_commit()},
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command,
    }


# ---- results: summaries and writers --------------------------------------------------------

def merge_rows(runs: Sequence[dict]) -> tuple[list[dict], list[list[str]]]:
    """The runs' rows with one per case (set, dtype, M, N, K), and per run the cases where its row
    replaced an earlier one. A case in several runs keeps the last run's row, whole (the ratios in
    a row stay those of one run), in the place of the first; a row left unrun (--budget) replaces
    none. Where the earlier row timed implementations the later one did not, the note names them."""
    merged: dict[tuple, tuple[int, dict]] = {}
    replaced: list[list[str]] = [[] for _ in runs]
    for i, run in enumerate(runs):
        for row in run["rows"]:
            key = (row["set"], row["dtype"], row["M"], row["N"], row["K"])
            if key in merged:
                if all(res.get("status") == "skipped" for res in row["results"].values()):
                    continue
                earlier = merged[key][1]["results"]
                dropped = [LABELS.get(k, k) for k, res in earlier.items()
                           if k not in row["results"] and res.get("status") not in ("skipped", "n/a")]
                lost = f"; its {', '.join(dropped)} results dropped" if dropped else ""
                replaced[i].append(f"{row['set']} {row['dtype']} {row['M']}x{row['N']}x{row['K']} "
                                   f"(Run {merged[key][0] + 1}{lost})")
            merged[key] = (i, row)
    return [row for _, row in merged.values()], replaced


def _cases(items: Sequence[str]) -> str:
    """"1 case", "3 cases"."""
    return f"{len(items)} case" + ("" if len(items) == 1 else "s")


def _first_few(items: Sequence[str], count: int = 4) -> str:
    """"a, b, c, d and 3 more"."""
    more = f" and {len(items) - count} more" if len(items) > count else ""
    return ", ".join(items[:count]) + more


def ratio(row: dict, impl: str) -> float | None:
    """cuBLAS time / impl time (> 1: faster than cuBLAS), when both were measured."""
    res, ref = row["results"].get(impl, {}), row["results"].get(REFERENCE_IMPL, {})
    if res.get("status") != "ok" or ref.get("status") != "ok":
        return None
    return ref["ms"] / res["ms"]


def floor_fraction(row: dict, impl: str) -> float | None:
    """Roofline floor time / measured time (1.0 = at the limit)."""
    res = row["results"].get(impl, {})
    if res.get("status") != "ok" or not row.get("floor_ms"):
        return None
    return row["floor_ms"] / res["ms"]


def _percent(fraction: float | None) -> str:
    """A fraction as a whole percentage, "-" for none (a row without a roofline floor)."""
    return "-" if fraction is None else f"{fraction:.0%}"


def median_rate(rates: Sequence[float]) -> float:
    """The rate at the median time of rounds given as rates (TFLOP/s of one problem): the
    median of their inverses, inverted. For an even count this is the rate at the two middle
    times' mean, where the median of the rates would average two rates. ValueError for no
    rates or one that is not a positive finite number (statistics.median orders NaN by its
    place in the list, and 0 has no time)."""
    rates = list(rates)
    if not rates:
        raise ValueError("rates: no rounds to take the median of")
    bad = [rate for rate in rates if not (isinstance(rate, (int, float)) and 0 < rate < math.inf)]
    if bad:
        raise ValueError(f"rates: expected positive finite rates, got {bad[0]!r} among {len(rates)}")
    return 1 / statistics.median(1 / rate for rate in rates)


def geomean(values: Sequence[float]) -> float | None:
    """Geometric mean (None for no values)."""
    values = list(values)
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def impl_keys(rows: Sequence[dict]) -> list[str]:
    """Implementations present in the rows, in the canonical order."""
    present = {k for row in rows for k in row["results"]}
    return [k for k in LABELS if k in present] + sorted(present - set(LABELS))


def groups(rows: Sequence[dict]) -> list[tuple[str, str]]:
    """(set, dtype) pairs in order of first appearance."""
    return list(_unique((row["set"], row["dtype"]) for row in rows))


def geomean_table(rows: Sequence[dict]) -> dict[tuple[str, str], dict[str, tuple[float | None, int]]]:
    """(set, dtype) -> impl -> (geomean ratio to cuBLAS, number of shapes in it)."""
    table = {}
    for key in groups(rows):
        members = [row for row in rows if (row["set"], row["dtype"]) == key]
        table[key] = {}
        for impl in impl_keys(rows):
            if impl == REFERENCE_IMPL:
                continue
            values = [r for r in (ratio(row, impl) for row in members) if r is not None]
            table[key][impl] = (geomean(values), len(values))
    return table


def worst_shapes(rows: Sequence[dict], impl: str, count: int = 3) -> list[tuple[float, dict]]:
    """The ``count`` rows with the lowest ratio to cuBLAS for impl, lowest first."""
    scored = [(r, row) for row in rows if (r := ratio(row, impl)) is not None]
    return sorted(scored, key=lambda item: item[0])[:count]


def _cell(row: dict, impl: str) -> str:
    res = row["results"].get(impl)
    if res is None:
        return ""
    status = res.get("status")
    if status != "ok":
        return {"incorrect": "wrong", "fail": "fail", "n/a": "-", "skipped": "skip"}.get(status, status)
    parts = [f"{res['tflops']:.1f}"]
    if impl != REFERENCE_IMPL and (r := ratio(row, impl)) is not None:
        parts.append(f"{r:.2f}x")
    if (f := floor_fraction(row, impl)) is not None:
        parts.append(f"{f:.0%}")
    return " ".join(parts)


def _floor_cell(row: dict) -> str:
    return f"{row['floor_ms'] * 1e3:.1f} {row['bound'][:3]}" if row.get("floor_ms") else "-"


def text_table(rows: Sequence[dict]) -> str:
    """The printed table: per row TFLOP/s, ratio to cuBLAS and % of the roofline floor."""
    impls = impl_keys(rows)
    head = ["set", "dtype", "M x N x K", "floor us"] + [LABELS.get(k, k) for k in impls]
    body = [[row["set"], row["dtype"], f"{row['M']}x{row['N']}x{row['K']}", _floor_cell(row)]
            + [_cell(row, k) for k in impls] for row in rows]
    widths = [max(len(str(line[i])) for line in [head] + body) for i in range(len(head))]
    lines = ["  ".join(str(v).rjust(w) for v, w in zip(line, widths)) for line in [head] + body]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("cells: TFLOP/s, ratio to cuBLAS (time_cuBLAS / time), % of the roofline floor; "
                 "floor us: max(FLOPs / peak, bytes / bandwidth), com[pute] or mem[ory] bound; "
                 "wrong = failed the reference check, fail = raised, - = not supported, skip = out of time")
    return "\n".join(lines)


def summary_text(rows: Sequence[dict]) -> str:
    """Geomean ratio to cuBLAS per set and dtype, and the three worst shapes per implementation."""
    impls = [k for k in impl_keys(rows) if k != REFERENCE_IMPL]
    lines = ["geomean ratio to cuBLAS (shapes measured):"]
    for (set_name, dtype), by_impl in geomean_table(rows).items():
        cells = [f"{LABELS.get(k, k)} {g:.3f}x ({n})" if g else f"{LABELS.get(k, k)} -"
                 for k in impls for g, n in [by_impl[k]]]
        lines.append(f"  {set_name} {dtype}: " + ", ".join(cells))
    for impl in impls:
        worst = worst_shapes(rows, impl)
        if worst:
            lines.append(f"worst for {LABELS.get(impl, impl)}: " + "; ".join(
                f"{row['set']} {row['dtype']} {row['M']}x{row['N']}x{row['K']} {r:.2f}x ({row['bound']}-bound, "
                f"{_percent(floor_fraction(row, impl))} of floor)" for r, row in worst))
    return "\n".join(lines)


def _md_env(run: dict) -> list[str]:
    env, opts, peaks = run["environment"], run["options"], run.get("peaks") or {}
    clocks, end = env.get("clocks_start") or {}, env.get("clocks_end") or {}
    v = env["versions"]
    clock_text = "; clocks not available (no nvidia-smi)"
    if clocks:
        clock_text = (f"; {'before the run: ' if end else ''}SM clock {clocks.get('clocks.sm')} (max "
                      f"{clocks.get('clocks.max.sm')}), memory clock {clocks.get('clocks.mem')}, power limit "
                      f"{clocks.get('power.limit')}, driver {clocks.get('driver_version')}")
    if clocks and end:
        clock_text += f"; after the last case: SM clock {end.get('clocks.sm')}, power draw {end.get('power.draw')}"
    commit = f" ({v['tlgemm_commit']})" if v.get("tlgemm_commit") else ""
    lines = [f"- Command: `{env['command']}`",
             f"- GPU: {env['gpu']} (sm_{env['capability'].replace('.', '')}, {env['num_sms']} SMs, "
             f"L2 {env['l2_bytes'] / 2**20:.0f} MiB){clock_text}",
             f"- Date: {env['date']}; python {v['python']}, torch {v['torch']} (CUDA {v['cuda']}), "
             f"triton {v['triton']}, tilelang {v['tilelang']}, tlgemm {v['tlgemm']}{commit}",
             f"- Timing: triton.testing.do_bench median, warm-up {opts['warmup_ms']:g} ms, measuring "
             f"max({opts['rep_ms']:g} ms, {2 * MIN_SAMPLES} x the row's floor) per kernel, {opts['input_sets']} "
             f"rotated input sets, random data, seed {opts['seed']}"]
    if opts.get("reduced"):
        lines.append(f"- **Reduced run**: {opts['reduced']}")
    if peaks:
        parts = [f"{k} {p['tflops']:.0f} TFLOP/s ({p['shape']}, {p['how']})" for k, p in peaks["tflops"].items()]
        lines.append(f"- Roofline: measured cuBLAS peaks {', '.join(parts)}; copy bandwidth "
                     f"{peaks['copy']['gbps']:.0f} GB/s ({peaks['copy']['how']}); fp8-block rows use the fp8 peak")
    if any(row["dtype"] == "fp8" for row in run["rows"]):
        lines.append(_fp8_accumulation_note(opts.get("fast_accum", False)))
    skipped = run.get("skipped", 0)
    if skipped:
        lines.append(f"- **{skipped} cases not run**: the --budget of {opts['budget_s']} s ran out")
    if run.get("aborted"):
        lines.append(f"- **Run aborted**: {run['aborted']}")
    lines += [f"- Not measured: {note}" for note in run.get("dropped", [])]
    return lines


def _fp8_accumulation_note(fast_accum: bool) -> str:
    """How the fp8 (per-tensor) rows' cuBLAS accumulates against tlgemm's kernels, which keep the
    whole K loop in the tensor cores' accumulator (measured: benchmarks/results/core_speed.md)."""
    if fast_accum:
        return ("- fp8 accumulation: cuBLAS with use_fast_accum=True accumulates as tlgemm's per-tensor fp8 kernels "
                "do, the whole K loop in the tensor cores' accumulator")
    return ("- fp8 accumulation: cuBLAS with use_fast_accum=False adds the tensor cores' partial sums into float32 "
            "as K advances; tlgemm's per-tensor fp8 kernels keep the whole K loop in the tensor cores' accumulator, "
            "as use_fast_accum=True does (error growing with K, within the fp8 bound), so fp8 ratios include that "
            "work (benchmarks/results/core_speed.md times both cuBLAS calls)")


def _md_table(head: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in body]


def markdown(runs: Sequence[dict], plots: dict[str, list[str]] | None = None) -> str:
    """RESULTS.md text from one or more run records (their rows reported together, ``merge_rows``)."""
    rows, replaced = merge_rows(runs)
    impls = impl_keys(rows)
    others = [k for k in impls if k != REFERENCE_IMPL]
    out = ["# tlgemm GEMM benchmark", "",
           "Generated by `tlgemm.bench` (`benchmarks/run.py`, `tlgemm bench`) from the JSON of the run(s) below. "
           "C[M, N] = A[M, K] · W[N, K]ᵀ, both operands K-major. Ratios are time(cuBLAS) / time(kernel): above 1 "
           "is faster than cuBLAS. \"% floor\" is the roofline floor (max of FLOPs / measured cuBLAS peak and "
           "bytes / measured copy bandwidth) over the kernel's time; above 100% the kernel ran faster than that "
           "peak, which is one cuBLAS call timed before the rows. Every result was checked against a float64 "
           "reference before it was timed.", ""]
    for i, run in enumerate(runs):
        out += ([f"## Run {i + 1}"] if len(runs) > 1 else ["## Run"]) + _md_env(run)
        if replaced[i]:
            out.append(f"- Replaces the earlier row of {_cases(replaced[i])}: {_first_few(replaced[i])}")
        out.append("")
    out += ["## Geomean ratio to cuBLAS", ""]
    body = [[s, d] + [f"{g:.3f}x ({n})" if g else "-" for k in others for g, n in [table[k]]]
            for (s, d), table in geomean_table(rows).items()]
    out += _md_table(["set", "dtype"] + [f"{LABELS.get(k, k)} (shapes)" for k in others], body) + [""]
    out += ["## Three worst shapes per implementation", ""]
    for impl in others:
        worst = worst_shapes(rows, impl)
        if not worst:
            continue
        out += [f"### {LABELS.get(impl, impl)}", ""]
        body = [[row["set"], row["dtype"], f"{row['M']}x{row['N']}x{row['K']}", f"{r:.2f}x",
                 f"{row['results'][impl]['tflops']:.1f}", f"{row['results'][REFERENCE_IMPL]['tflops']:.1f}",
                 row["bound"], _percent(floor_fraction(row, impl)), _percent(floor_fraction(row, REFERENCE_IMPL)),
                 row["results"][impl].get("info", "")] for r, row in worst]
        out += _md_table(["set", "dtype", "M x N x K", "vs cuBLAS", "TFLOP/s", "cuBLAS TFLOP/s", "bound", "% floor",
                          "cuBLAS % floor", "schedule"], body) + [""]
    out += _deepgemm_table(rows)
    out += ["## Results", "", "Cells: TFLOP/s, ratio to cuBLAS, % of the roofline floor. wrong = failed the "
            "reference check (no number), fail = raised, - = not supported, skip = not run (time budget).", ""]
    for set_name, dtype in groups(rows):
        members = [row for row in rows if (row["set"], row["dtype"]) == (set_name, dtype)]
        out += [f"### {set_name}, {dtype}", ""]
        body = [[str(row["M"]), str(row["N"]), str(row["K"]), _floor_cell(row)] + [_cell(row, k) for k in impls]
                for row in members]
        out += _md_table(["M", "N", "K", "floor us"] + [LABELS.get(k, k) for k in impls], body) + [""]
    for set_name, paths in (plots or {}).items():
        out += [f"![{set_name}: {pathlib.Path(p).stem}]({p})" for p in paths] + [""]
    notes = _problems(rows, impls)
    if notes:
        out += ["## Not measured", ""] + notes + [""]
    return "\n".join(out)


def _deepgemm_table(rows: Sequence[dict]) -> list[str]:
    """Markdown lines: the fp8-block rows of DeepGEMM's shapes beside its published H800
    figures (``DEEPGEMM_H800_TFLOPS``), cuBLAS's block-wise path and, where the runs have the
    same shape in fp8 with per-tensor scales, cuBLAS per-tensor; one line per shape (the last
    run's row when several runs have it); empty without such rows."""
    def tflops(row, impl):
        res = (row or {}).get("results", {}).get(impl, {})
        return res.get("tflops") if res.get("status", "ok") == "ok" else None

    def cell(value):
        return f"{value:.0f}" if value is not None else "-"

    per_tensor = {(r["M"], r["N"], r["K"]): r for r in rows if r["dtype"] == "fp8"}
    block = {(r["M"], r["N"], r["K"]): r for r in rows
             if r["dtype"] == "fp8-block" and (r["M"], r["N"], r["K"]) in DEEPGEMM_H800_TFLOPS}
    body = []
    for shape, row in block.items():
        published = DEEPGEMM_H800_TFLOPS[shape]
        ours = [tflops(row, impl) for impl in ("tlgemm-tilelang", "tlgemm-triton")]
        body.append([*map(str, shape), str(published)]
                    + [f"{cell(t)} ({t / published:.2f}x)" if t is not None else "-" for t in ours]
                    + [cell(tflops(row, REFERENCE_IMPL)), cell(tflops(per_tensor.get(shape), REFERENCE_IMPL))])
    if not body:
        return []
    return (["## DeepGEMM's shape table (fp8, block-wise scales)", "",
             "TFLOP/s. DeepGEMM: its published H800 figures (README, February 2025), not measured here; "
             "tlgemm cells give the ratio to that figure. cuBLAS block-wise: torch._scaled_mm with DeepSeek-style "
             "scales; cuBLAS per-tensor: the same shape in the run's fp8 rows (per-tensor scales), where present. "
             "DeepGEMM's figures are profiler kernel durations on inputs made just before each call, these cells "
             "do_bench times of whole calls on inputs evicted from the L2; benchmarks/deepgemm_kernel_time.py times "
             "the table DeepGEMM's way too.", ""]
            + _md_table(["M", "N", "K", "DeepGEMM H800", "tlgemm TileLang", "tlgemm Triton", "cuBLAS block-wise",
                         "cuBLAS per-tensor"], body) + [""])


def _problems(rows: Sequence[dict], impls: Sequence[str]) -> list[str]:
    """One line per implementation and distinct reason it produced no number."""
    lines = []
    for impl in impls:
        reasons: dict[tuple[str, str], list[str]] = {}
        for row in rows:
            res = row["results"].get(impl, {})
            if res.get("status") not in (None, "ok"):
                key = (res["status"], res.get("reason", ""))
                reasons.setdefault(key, []).append(f"{row['dtype']} {row['M']}x{row['N']}x{row['K']}")
        for (status, reason), shapes in reasons.items():
            lines.append(f"- {LABELS.get(impl, impl)}, {status} ({len(shapes)}: {_first_few(shapes)}): {reason}")
    return lines


def plot(rows: Sequence[dict], directory: pathlib.Path) -> dict[str, list[pathlib.Path]] | str:
    """Per shape set: TFLOP/s and ratio-to-cuBLAS PNGs (one panel per dtype). Returns the files
    per set, or why no plots were drawn."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plots skipped: matplotlib is not installed (pip install 'tlgemm[bench]')"
    directory.mkdir(parents=True, exist_ok=True)
    impls = impl_keys(rows)
    files: dict[str, list[pathlib.Path]] = {}
    for set_name in _unique(row["set"] for row in rows):
        dtypes = list(_unique(row["dtype"] for row in rows if row["set"] == set_name))
        for kind in ("tflops", "ratio"):
            width = max(8.0, 0.28 * max(sum(1 for r in rows if r["set"] == set_name and r["dtype"] == d)
                                        for d in dtypes))
            fig, axes = plt.subplots(len(dtypes), 1, figsize=(width, 3.6 * len(dtypes)), squeeze=False)
            for ax, dtype in zip(axes[:, 0], dtypes):
                members = [row for row in rows if row["set"] == set_name and row["dtype"] == dtype]
                x = range(len(members))
                for impl in impls:
                    if kind == "ratio" and impl == REFERENCE_IMPL:
                        continue
                    values = [(ratio(row, impl) if kind == "ratio" else row["results"].get(impl, {}).get("tflops"))
                              for row in members]
                    if any(v is not None for v in values):
                        ax.plot(x, [math.nan if v is None else v for v in values], marker="o", markersize=4,
                                linestyle="none", alpha=0.85, label=LABELS.get(impl, impl))
                if kind == "ratio":
                    ax.axhline(1.0, color="black", linewidth=0.8)
                    ax.set_ylabel("time(cuBLAS) / time")
                else:
                    ax.plot(x, [row["flops"] / (row["floor_ms"] * 1e9) if row.get("floor_ms") else math.nan
                                for row in members], color="gray", marker="_", markersize=12, linestyle="none",
                            label="roofline")
                    ax.set_yscale("log")
                    ax.set_ylabel("TFLOP/s (log)")
                ax.set_title(f"{set_name}, {dtype}")
                ax.set_xticks(list(x))
                ax.set_xticklabels([f"{r['M']}x{r['N']}x{r['K']}" for r in members], rotation=90, fontsize=6)
                ax.grid(True, axis="y", alpha=0.3)
                ax.legend(fontsize=7, loc="best")
            fig.tight_layout()
            path = directory / f"bench_{set_name}_{kind}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            files.setdefault(set_name, []).append(path)
    return files


def write_json(path: pathlib.Path, record: dict) -> None:
    """Atomic JSON write (the run's record is rewritten after every case)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)


#: The keys of a row (``_row``).
_ROW_KEYS = ("set", "dtype", "M", "N", "K", "flops", "bytes", "floor_ms", "bound", "input_sets", "results")


def load_runs(paths: Sequence[pathlib.Path]) -> list[dict]:
    """Run records from JSON files written by this module; ValueError naming the file and what
    is wrong where one is not (unreadable, empty, not JSON or cut short, another format, or a
    record the reports cannot read)."""
    return [_load_run(pathlib.Path(path)) for path in paths]


def _load_run(path: pathlib.Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"{path}: cannot read it: {err.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file (not UTF-8)") from None
    if not text.strip():
        raise ValueError(f"{path}: the file is empty")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        ends = err.pos >= len(text.rstrip()) or err.msg.startswith("Unterminated string")
        cut = "; the file ends early, cut short?" if ends else ""
        raise ValueError(f"{path}: not JSON ({err.msg}: line {err.lineno} column {err.colno}{cut})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: not a {FORMAT} record (a JSON {type(record).__name__}, not an object)")
    if record.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} record (format={record.get('format')!r})")
    rows = record.get("rows")
    if not isinstance(rows, list):
        raise ValueError(f"{path}: a {FORMAT} record without its list of rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not set(_ROW_KEYS) <= row.keys():
            raise ValueError(f"{path}: row {i} of the {FORMAT} record is not an object with the keys "
                             f"{', '.join(_ROW_KEYS)}")
        bad = _bad_time(row)
        if bad:
            raise ValueError(f"{path}: row {i} of the {FORMAT} record has {bad}, not a finite time")
    try:  # the rest of what the reports read (the Markdown reads all the table and summary do)
        markdown([record])
    except (LookupError, TypeError, AttributeError, ValueError, ArithmeticError) as err:
        what = f"missing {err}" if isinstance(err, KeyError) else f"{type(err).__name__}: {err}"
        raise ValueError(f"{path}: a {FORMAT} record the reports cannot read ({what})") from None
    return record


def _bad_time(row: dict) -> str | None:
    """The first of a row's times (floor_ms >= 0 where set, each measured result's ms > 0) that is
    not a finite number, as "name = value"; json reads NaN and Infinity."""
    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    if row["floor_ms"] is not None and not (number(row["floor_ms"]) and row["floor_ms"] >= 0):
        return f"floor_ms = {row['floor_ms']!r}"
    results = row["results"] if isinstance(row["results"], dict) else {}
    for impl, res in results.items():
        if isinstance(res, dict) and res.get("status") == "ok" and not (number(res.get("ms")) and res["ms"] > 0):
            return f"results.{impl}.ms = {res.get('ms')!r}"
    return None


def check_one_table(runs: Sequence[dict], paths: Sequence[pathlib.Path]) -> None:
    """ValueError naming the files where runs to be reported together are not one table: measured
    on different GPUs, or with fp8 rows in both whose cuBLAS reference differs in
    ``--fast-accum`` (its per-tensor fp8 call with and without use_fast_accum)."""
    first, first_path = runs[0], paths[0]
    for run, path in zip(runs[1:], paths[1:]):
        gpu, first_gpu = run["environment"]["gpu"], first["environment"]["gpu"]
        if gpu != first_gpu:
            raise ValueError(f"{path}: measured on {gpu}, {first_path} on {first_gpu}; runs on different GPUs are "
                             "not one table: report each on its own")
    fp8 = [(run, path) for run, path in zip(runs, paths) if any(row["dtype"] == "fp8" for row in run["rows"])]
    for run, path in fp8[1:]:
        accum = [bool(r["options"].get("fast_accum")) for r in (fp8[0][0], run)]
        if accum[0] != accum[1]:
            raise ValueError(f"{path}: its fp8 rows time cuBLAS with use_fast_accum={accum[1]}, {fp8[0][1]}'s with "
                             f"use_fast_accum={accum[0]}; their ratios are not one table: report each on its own")


def report(runs: Sequence[dict], markdown_path: pathlib.Path | None, plots_dir: pathlib.Path | None) -> None:
    """Write the Markdown and the plots, then print the table and summary (one row per case:
    ``merge_rows``; written first, so that a reader of the printout that stops early, ``| head``,
    does not cost the files). ValueError naming the path that cannot be written."""
    rows, replaced = merge_rows(runs)
    plot_files: dict[str, list[str]] = {}
    drawn: dict | str | None = None
    try:
        if plots_dir is not None:
            drawn = plot(rows, plots_dir)
            if not isinstance(drawn, str):
                base = markdown_path.parent.resolve() if markdown_path else plots_dir.resolve()
                plot_files = {s: [os.path.relpath(p.resolve(), base) for p in paths] for s, paths in drawn.items()}
        if markdown_path is not None:
            markdown_path.parent.mkdir(parents=True, exist_ok=True)
            markdown_path.write_text(markdown(runs, plot_files))
    except OSError as err:
        raise ValueError(f"cannot write {err.filename or markdown_path}: {err.strerror or err}") from None
    print(text_table(rows))
    print(summary_text(rows))
    for i, run in enumerate(runs):
        if replaced[i]:
            print(f"note: run {i + 1} replaces the earlier row of {_cases(replaced[i])}: {_first_few(replaced[i])}")
        if run["options"].get("reduced"):
            print(f"note: reduced run ({run['options']['reduced']})")
        if run.get("skipped"):
            print(f"note: {run['skipped']} cases not run (the --budget ran out)")
    if isinstance(drawn, str):
        print(drawn)
    elif drawn is not None:
        print(f"plots: {', '.join(str(p) for paths in drawn.values() for p in paths)}")
    if markdown_path is not None:
        print(f"wrote {markdown_path}")


# ---- command line --------------------------------------------------------------------------

def _csv(choices: Sequence[str]):
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(choices)}")
        return items
    return parse


def _number(kind: type, *, zero: bool = False):
    """argparse type: a finite ``kind`` (int or float) > 0, or >= 0 with ``zero``."""
    rule = f"{'an integer' if kind is int else 'a number'} {'>=' if zero else '>'} 0"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = math.nan  # rejected below, with the same message
        if not (0 <= value if zero else 0 < value) or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected {rule}, got {text!r}")
        return value
    return parse


QUICK = {"warmup_ms": 5.0, "rep_ms": 25.0}
DEFAULT = {"warmup_ms": 25.0, "rep_ms": 100.0}


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The harness's options (for a parser of its own or a ``tlgemm bench`` subparser)."""
    what = parser.add_argument_group("what to run")
    what.add_argument("--sets", type=_csv(list(SHAPE_SETS)), default=["square", "llm"],
                      help=f"comma-separated shape sets: {', '.join(SHAPE_SETS)} (default: square,llm)")
    what.add_argument("--dtypes", type=_csv(list(DTYPES)), default=["bf16", "fp8"],
                      help="comma-separated: bf16, fp16, fp8 (e4m3, per-tensor scales), fp8-block (1x128 / 128x128 "
                           "block scales); default bf16,fp8; the fp8-blockscaled set always runs fp8-block")
    what.add_argument("--shapes", type=parse_shapes, default=None,
                      help="MxNxK,... instead of the named sets (reported as set 'custom')")
    what.add_argument("--impls", type=_csv(list(IMPLEMENTATIONS)), default=list(IMPLEMENTATIONS),
                      help=f"comma-separated implementations (cuBLAS is always timed): {', '.join(IMPLEMENTATIONS)}")
    what.add_argument("--list", action="store_true", help="print the cases and exit (no GPU needed)")
    timing = parser.add_argument_group("timing")
    timing.add_argument("--quick", action="store_true",
                        help=f"fewer repetitions: do_bench warm-up {QUICK['warmup_ms']:g} ms and measuring "
                             f"{QUICK['rep_ms']:g} ms (defaults {DEFAULT['warmup_ms']:g} / {DEFAULT['rep_ms']:g})")
    timing.add_argument("--warmup-ms", type=_number(float), default=None, help="do_bench warm-up time per kernel, ms")
    timing.add_argument("--rep-ms", type=_number(float), default=None, help="do_bench measuring time per kernel, ms")
    timing.add_argument("--input-sets", type=_number(int, zero=True), default=0,
                        help="input sets rotated per case (default 0 = enough for 4x the L2, 2 to 8)")
    timing.add_argument("--budget", type=_number(float, zero=True), default=None, metavar="SECONDS",
                        help="start no new case after this many seconds (the rest are reported as skipped)")
    timing.add_argument("--fast-accum", action="store_true", help="cuBLAS fp8 per-tensor with use_fast_accum=True")
    timing.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    timing.add_argument("--compile-workers", type=_number(int, zero=True), default=min(16, os.cpu_count() or 1),
                        metavar="N",
                        help="threads compiling the TileLang kernels (T.gemm, tlgemm TileLang) before timing "
                             "starts (default %(default)s; 0: each compiles on its first call instead)")
    output = parser.add_argument_group("output")
    output.add_argument("--out", type=pathlib.Path, default=pathlib.Path("benchmarks/out"),
                        help="directory for bench.json, RESULTS.md and the PNGs (default benchmarks/out)")
    output.add_argument("--json", type=pathlib.Path, default=None, help="JSON path (default OUT/bench.json)")
    output.add_argument("--markdown", type=pathlib.Path, default=None, help="Markdown path (default OUT/RESULTS.md)")
    output.add_argument("--plots", type=pathlib.Path, default=None,
                        help="directory for the PNGs (default: the Markdown file's directory)")
    output.add_argument("--no-plots", action="store_true", help="draw no plots")
    output.add_argument("--from-json", type=pathlib.Path, nargs="+", default=None, metavar="JSON",
                        help="no measuring: print and write Markdown/plots from earlier runs; several are merged, "
                             "one row per case (set, dtype, MxNxK): a case in more than one keeps the row of the "
                             "last file that ran it (a row the --budget left unrun replaces none); the files must "
                             "come from one GPU, and fp8 rows from one --fast-accum setting")
    return parser


def build_parser(prog: str = "tlgemm bench") -> argparse.ArgumentParser:
    """The standalone parser (``benchmarks/run.py``)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    return add_arguments(parser)


def _outputs(args) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path | None]:
    json_path = args.json or args.out / "bench.json"
    md_path = args.markdown or args.out / "RESULTS.md"
    plots_dir = None if args.no_plots else (args.plots or md_path.parent)
    return json_path, md_path, plots_dir


def _unwritable(args, measuring: bool) -> str | None:
    """Why an output path of the run cannot be written (the option and the reason), or None:
    checked before anything is measured or read. The Markdown is written in place (an existing
    file needs to be writable, a new one its folder); the JSON through a file beside it
    (``write_json``: its folder); the plots into their folder."""
    json_path, md_path, plots_dir = _outputs(args)
    paths = [("--json" if args.json else "--out", json_path, "replace")] if measuring else []
    paths += [("--markdown" if args.markdown else "--out", md_path, "write")]
    if plots_dir is not None:
        paths.append(("--plots" if args.plots else "--markdown" if args.markdown else "--out", plots_dir, "folder"))
    for option, path, how in paths:
        folder = path if how == "folder" else path.parent
        if how != "folder" and path.is_dir():
            return f"{option}: {path} is a directory"
        if folder.exists() and not folder.is_dir():
            return f"{option}: {folder} is not a directory"
        if how == "write" and path.exists():
            if not os.access(path, os.W_OK):
                return f"{option}: {path} is not writable"
            continue
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            return f"{option}: cannot create {folder}: {err.strerror or err}"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"{option}: the folder {folder} is not writable"
    return None


#: The options that choose or time what is measured (and where its JSON goes): --from-json
#: measures nothing, so it refuses them rather than ignore them.
_MEASURING_OPTIONS = ("sets", "dtypes", "shapes", "impls", "list", "quick", "warmup_ms", "rep_ms", "input_sets",
                      "budget", "fast_accum", "seed", "compile_workers", "json")


def _measuring_options_set(args) -> list[str]:
    """The measuring options given a value other than their default, as the user spells them."""
    defaults = build_parser().parse_args([])
    return [f"--{name.replace('_', '-')}" for name in _MEASURING_OPTIONS
            if getattr(args, name) != getattr(defaults, name)]


def run(args, command: str) -> int:
    """Run the parsed options; returns the exit status."""
    _, md_path, plots_dir = _outputs(args)
    if args.from_json:
        ignored = _measuring_options_set(args)
        if ignored:
            print(f"tlgemm bench: error: --from-json renders earlier runs and measures nothing; {', '.join(ignored)} "
                  "would not apply (render all of their rows, or measure again)", file=sys.stderr)
            return 2
        try:
            runs = load_runs(args.from_json)
            check_one_table(runs, args.from_json)
        except ValueError as err:
            print(f"tlgemm bench: error: --from-json {err}", file=sys.stderr)
            return 2
        unwritable = _unwritable(args, measuring=False)
        if unwritable:
            print(f"tlgemm bench: error: {unwritable}", file=sys.stderr)
            return 2
        try:
            report(runs, md_path, plots_dir)
        except ValueError as err:
            print(f"tlgemm bench: error: {err}", file=sys.stderr)
            return 2
        return 0
    cases, notes = plan_cases(args.sets, args.dtypes, args.shapes)
    if args.list:
        for note in notes:
            print(f"note: {note}")
        for set_name, dtype in _unique((c.set, c.dtype) for c in cases):
            shapes = [c.shape for c in cases if (c.set, c.dtype) == (set_name, dtype)]
            print(f"{set_name} {dtype} ({len(shapes)}): {' '.join(shapes)}")
        print(f"{len(cases)} cases")
        return 0
    if not torch.cuda.is_available():
        print("tlgemm bench: needs a CUDA GPU (torch.cuda.is_available() is False on this machine); "
              "--list shows the cases and --from-json renders an earlier run without one", file=sys.stderr)
        return 2
    unwritable = _unwritable(args, measuring=True)
    if unwritable:
        print(f"tlgemm bench: error: {unwritable}", file=sys.stderr)
        return 2
    return measure(args, cases, notes, command)


def measure(args, cases: Sequence[Case], notes: Sequence[str], command: str) -> int:
    """Measure every case, writing the JSON after each; then print and write the reports."""
    json_path, md_path, plots_dir = _outputs(args)
    start = time.monotonic()
    timing = dict(QUICK if args.quick else DEFAULT)
    for name in timing:
        if getattr(args, name) is not None:
            timing[name] = getattr(args, name)
    reduced = None
    if timing["rep_ms"] < DEFAULT["rep_ms"] or timing["warmup_ms"] < DEFAULT["warmup_ms"]:
        reduced = (f"fewer repetitions than the default: do_bench warm-up {timing['warmup_ms']:g} ms, measuring "
                   f"{timing['rep_ms']:g} ms per kernel (defaults {DEFAULT['warmup_ms']:g} / {DEFAULT['rep_ms']:g})")
        print(f"note: {reduced}")
    dev = Device.current(args.fast_accum)
    impls = [IMPLEMENTATIONS[k]() for k in _unique([REFERENCE_IMPL] + args.impls)]
    for impl in impls:
        if impl.unavailable:
            print(f"note: {impl.label} unavailable: {impl.unavailable}")
    for note in notes:
        print(f"note: {note}")
    record = {"format": FORMAT, "environment": environment(dev, command),
              "options": {"sets": args.sets if not args.shapes else ["custom"], "dtypes": args.dtypes,
                          "impls": [i.key for i in impls], "seed": args.seed, "fast_accum": args.fast_accum,
                          "input_sets": args.input_sets or "auto (4x L2, 2 to 8)", "budget_s": args.budget,
                          "reduced": reduced, **timing},
              "implementations": {i.key: {"label": i.label, "unavailable": i.unavailable} for i in impls},
              "peaks": None, "rows": [], "skipped": 0, "aborted": None, "dropped": list(notes)}
    print(f"{dev.name}: {len(cases)} cases x {len(impls)} implementations; measuring cuBLAS peaks and bandwidth")
    record["peaks"] = measure_peaks(list(_unique(DTYPES[c.dtype].peak for c in cases)), dev, **timing)
    if args.compile_workers > 0:
        compile_ahead(impls, cases, dev, args.compile_workers, args.seed)
    write_json(json_path, record)
    bar = Progress(len(cases), "cases")
    try:
        for case in cases:
            if args.budget is not None and time.monotonic() - start > args.budget:
                record["rows"].append(_row(case, record["peaks"], 0, {i.key: {"status": "skipped"} for i in impls}))
                record["skipped"] += 1
            else:
                record["rows"].append(run_case(case, impls, dev, record["peaks"], args, timing))
            write_json(json_path, record)
            bar.update(f"{case.set} {case.dtype} {case.shape}")
    except CudaContextLost as err:
        record["aborted"] = str(err)
        write_json(json_path, record)
        bar.write(f"tlgemm bench: CUDA context lost, stopping: {err}")
    finally:
        bar.close()
    record["environment"]["clocks_end"] = _nvidia_smi(dev.uuid)
    record["elapsed_s"] = round(time.monotonic() - start, 1)
    write_json(json_path, record)
    print(f"wrote {json_path} ({record['elapsed_s']} s)")
    try:
        report([record], md_path, plots_dir)
    except ValueError as err:
        print(f"tlgemm bench: error: {err} (the run's JSON is {json_path})", file=sys.stderr)
        return 2
    return 1 if record["aborted"] else 0


def _row(case: Case, peaks: dict, input_sets: int, results: dict) -> dict:
    floor_ms, bound = roofline(case.flops, case.bytes, peaks["tflops"][DTYPES[case.dtype].peak]["tflops"],
                               peaks["copy"]["gbps"])
    return {"set": case.set, "dtype": case.dtype, "M": case.M, "N": case.N, "K": case.K, "flops": case.flops,
            "bytes": case.bytes, "floor_ms": floor_ms, "bound": bound, "input_sets": input_sets, "results": results}


def run_case(case: Case, impls: Sequence[Impl], dev: Device, peaks: dict, args, timing: dict) -> dict:
    """Inputs, reference and every implementation for one case."""
    probe = make_inputs(case, 1, args.seed, dev.torch_device)[0]
    set_bytes = sum(t.numel() * t.element_size() for t in (probe.a, probe.w, probe.out))
    count = args.input_sets or rotation_sets(set_bytes, dev.l2_bytes, dev.free_bytes())
    sets = [probe] + make_inputs(case, count - 1, args.seed + 1, dev.torch_device)
    ref = reference(case, probe)
    row = _row(case, peaks, count, {})
    rep_ms = max(timing["rep_ms"], 2 * MIN_SAMPLES * row["floor_ms"])
    for impl in impls:
        row["results"][impl.key] = measure_impl(impl, case, sets, ref, dev, timing["warmup_ms"], rep_ms)
    del sets, probe, ref
    if set_bytes * count > 2**30:
        torch.cuda.empty_cache()
    return row


def main(argv: Sequence[str] | None = None, prog: str = "tlgemm bench") -> int:
    """Entry point of ``tlgemm bench`` and ``benchmarks/run.py``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(argv)
    return run(args, shlex.join([*prog.split(), *argv]))
