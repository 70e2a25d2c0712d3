"""GEMM kernels written with the stages: persistent, Stream-K, batched, block-scaled FP8,
and a schedule-trace kernel.

The persistent, Stream-K and batched kernels take any strides, fp32/fp16/bf16/fp8/int8
inputs (QUANTIZED = int8 with int32 accumulation) and an optional epilogue: ``A_scale``/
``B_scale`` (float32 vectors; stride 0 = per-tensor) and ``bias`` (length N). A ``None``
pointer is a compile-time None, so the unused epilogue steps are not compiled in. The
block-scaled kernel takes FP8 A [M, K] and B stored [N, K] with group-wise scales.

The persistent and Stream-K kernels do not specialise on M, N or K. Triton compiles an int
argument equal to 1 as a constant; with M = 1 the wrapped row indices of A's tile
(``Tile.layout``: rm % M) are then all known to be 0, and on an H100 that kernel ran up to
2.6x slower than the one compiled for any M (8 of 20 rows of LLM weights at M = 1 1.44-2.59x
faster without the specialisation, 10 within 0.91-1.02x), and N = 1 up to 1.9x slower
(benchmarks/results/triton_persistent.md). What the specialisation told the compiler
otherwise, each size's divisibility, comes with the strides' in ``DIVISORS`` (the launcher's
``divisor`` of each; ``stages.aligned``).
"""

import triton
import triton.language as tl

from .stages import (
    GemmContext,
    ScheduleContext,
    aligned,
    make_bias_view,
    make_group_scale_view,
    make_output_view,
    make_scale_view,
    make_streamk_workspace,
    make_tensor_view,
)


@triton.jit(do_not_specialize=["M", "N", "K"])
def persistent_gemm_kernel(
    A, B, C, A_scale, B_scale, bias, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    stride_as, stride_bs, stride_bias,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    RASTER: tl.constexpr, NUM_SMS: tl.constexpr, NUM_XCDS: tl.constexpr, CHUNK_SIZE: tl.constexpr,
    DIVISORS: tl.constexpr, EVEN_K: tl.constexpr, QUANTIZED: tl.constexpr, ALLOW_TF32: tl.constexpr,
):
    """C = epilogue(A · B); program p runs tiles p, p + NUM_SMS, ... whole."""
    M, N, K = aligned(M, DIVISORS[0]), aligned(N, DIVISORS[1]), aligned(K, DIVISORS[2])
    stride_am, stride_ak = aligned(stride_am, DIVISORS[3]), aligned(stride_ak, DIVISORS[4])
    stride_bk, stride_bn = aligned(stride_bk, DIVISORS[5]), aligned(stride_bn, DIVISORS[6])
    stride_cm, stride_cn = aligned(stride_cm, DIVISORS[7]), aligned(stride_cn, DIVISORS[8])
    tensorA = make_tensor_view(A, M, K, stride_am, stride_ak)
    tensorB = make_tensor_view(B, K, N, stride_bk, stride_bn)
    tensorC = make_output_view(C, M, N, stride_cm, stride_cn)
    scale_view = make_scale_view(A_scale, B_scale, M, N, stride_as, stride_bs) if A_scale is not None else None
    bias_view = make_bias_view(bias, N, stride_bias) if bias is not None else None

    ctx = GemmContext(BLOCK_M, BLOCK_N, BLOCK_K, NUM_SMS, NUM_XCDS, GROUP_SIZE_M, CHUNK_SIZE,
                      allow_tf32=ALLOW_TF32, even_k=EVEN_K, quantized=QUANTIZED, raster=RASTER)
    sched = ScheduleContext(M, N, K, ctx)

    start, total, stride = sched.persistent_tile_range()
    for tile_id in tl.range(start, total, stride, flatten=True):
        out_tile = sched.get_tile_from_idx(tile_id)
        acc = ctx.reduce_axis(tensorA, tensorB, out_tile)
        tensorC.store(acc, out_tile, scale=scale_view, bias=bias_view)


@triton.jit(do_not_specialize=["M", "N", "K"])
def streamk_gemm_kernel(
    A, B, C, A_scale, B_scale, bias, partials, counters, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    stride_as, stride_bs, stride_bias,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    RASTER: tl.constexpr, NUM_SMS: tl.constexpr, NUM_XCDS: tl.constexpr, CHUNK_SIZE: tl.constexpr,
    STREAMK_TILES: tl.constexpr, DIVISORS: tl.constexpr, EVEN_K: tl.constexpr, QUANTIZED: tl.constexpr,
    ALLOW_TF32: tl.constexpr,
):
    """C = epilogue(A · B): whole tiles persistently, then this program's contiguous share
    of the last STREAMK_TILES tiles' K-iterations; split tiles are fixed up in ``partials``."""
    M, N, K = aligned(M, DIVISORS[0]), aligned(N, DIVISORS[1]), aligned(K, DIVISORS[2])
    stride_am, stride_ak = aligned(stride_am, DIVISORS[3]), aligned(stride_ak, DIVISORS[4])
    stride_bk, stride_bn = aligned(stride_bk, DIVISORS[5]), aligned(stride_bn, DIVISORS[6])
    stride_cm, stride_cn = aligned(stride_cm, DIVISORS[7]), aligned(stride_cn, DIVISORS[8])
    tensorA = make_tensor_view(A, M, K, stride_am, stride_ak)
    tensorB = make_tensor_view(B, K, N, stride_bk, stride_bn)
    tensorC = make_output_view(C, M, N, stride_cm, stride_cn)
    scale_view = make_scale_view(A_scale, B_scale, M, N, stride_as, stride_bs) if A_scale is not None else None
    bias_view = make_bias_view(bias, N, stride_bias) if bias is not None else None

    ctx = GemmContext(BLOCK_M, BLOCK_N, BLOCK_K, NUM_SMS, NUM_XCDS, GROUP_SIZE_M, CHUNK_SIZE,
                      allow_tf32=ALLOW_TF32, even_k=EVEN_K, quantized=QUANTIZED, raster=RASTER)
    sched = ScheduleContext(M, N, K, ctx, streamk_tiles=STREAMK_TILES)
    workspace = make_streamk_workspace(partials, counters, sched)

    start, total, stride = sched.persistent_tile_range()
    for tile_id in tl.range(start, total, stride, flatten=True):
        out_tile = sched.get_tile_from_idx(tile_id)
        acc = ctx.reduce_axis(tensorA, tensorB, out_tile)
        tensorC.store(acc, out_tile, scale=scale_view, bias=bias_view)

    iters = sched.iters_per_tile()
    it, end = sched.iter_range()
    while it < end:
        pid_m, pid_n, k_begin = sched.get_iter(it)
        k_end = tl.minimum(iters, k_begin + end - it)
        out_tile = sched.get_tile_from_coord(pid_m, pid_n)
        acc = ctx.reduce_range(tensorA, tensorB, out_tile, k_begin, k_end)
        if k_end - k_begin == iters:
            tensorC.store(acc, out_tile, scale=scale_view, bias=bias_view)
        elif workspace.publish(acc, it // iters, k_begin, k_end):
            tensorC.store(workspace.total(it // iters), out_tile, scale=scale_view, bias=bias_view)
        it += k_end - k_begin


@triton.jit
def batched_gemm_kernel(
    A, B, C, A_scale, B_scale, bias, BATCH, M, N, K,
    stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn, stride_cb, stride_cm, stride_cn,
    stride_as, stride_bs, stride_bias,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    RASTER: tl.constexpr, NUM_SMS: tl.constexpr, NUM_XCDS: tl.constexpr, CHUNK_SIZE: tl.constexpr,
    DIVISORS: tl.constexpr, EVEN_K: tl.constexpr, QUANTIZED: tl.constexpr, ALLOW_TF32: tl.constexpr,
):
    """C[b] = epilogue(A[b] · B[b]) for b < BATCH; the BATCH · tiles tiles are dealt out
    persistently, batch-major. A batch stride of 0 reuses one operand for every b."""
    M, N, K = aligned(M, DIVISORS[0]), aligned(N, DIVISORS[1]), aligned(K, DIVISORS[2])
    stride_am, stride_ak = aligned(stride_am, DIVISORS[3]), aligned(stride_ak, DIVISORS[4])
    stride_bk, stride_bn = aligned(stride_bk, DIVISORS[5]), aligned(stride_bn, DIVISORS[6])
    stride_cm, stride_cn = aligned(stride_cm, DIVISORS[7]), aligned(stride_cn, DIVISORS[8])
    stride_ab, stride_bb = aligned(stride_ab, DIVISORS[9]), aligned(stride_bb, DIVISORS[10])
    stride_cb = aligned(stride_cb, DIVISORS[11])
    scale_view = make_scale_view(A_scale, B_scale, M, N, stride_as, stride_bs) if A_scale is not None else None
    bias_view = make_bias_view(bias, N, stride_bias) if bias is not None else None

    ctx = GemmContext(BLOCK_M, BLOCK_N, BLOCK_K, NUM_SMS, NUM_XCDS, GROUP_SIZE_M, CHUNK_SIZE,
                      allow_tf32=ALLOW_TF32, even_k=EVEN_K, quantized=QUANTIZED, raster=RASTER)
    sched = ScheduleContext(M, N, K, ctx)

    start, total, stride = sched.batched_tile_range(BATCH)
    for tile_id in tl.range(start, total, stride, flatten=True):
        batch, out_tile = sched.get_batched_tile_from_idx(tile_id)
        tensorA = make_tensor_view(A + batch * stride_ab, M, K, stride_am, stride_ak)
        tensorB = make_tensor_view(B + batch * stride_bb, K, N, stride_bk, stride_bn)
        tensorC = make_output_view(C + batch * stride_cb, M, N, stride_cm, stride_cn)
        acc = ctx.reduce_axis(tensorA, tensorB, out_tile)
        tensorC.store(acc, out_tile, scale=scale_view, bias=bias_view)


@triton.jit
def blockscaled_gemm_kernel(
    A, B, C, A_scale, B_scale, bias, BATCH, M, N, K,
    stride_ab, stride_am, stride_ak, stride_bb, stride_bn, stride_bk, stride_cb, stride_cm, stride_cn,
    stride_sab, stride_sam, stride_sak, stride_sbb, stride_sbn, stride_sbk, stride_bias,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    RASTER: tl.constexpr, NUM_SMS: tl.constexpr, NUM_XCDS: tl.constexpr, CHUNK_SIZE: tl.constexpr,
    SCALE_GROUP_N: tl.constexpr,
):
    """C[b] = (Σ_k-blocks (A[b] · B[b]ᵀ)_block · a_scale · b_scale) + bias for b < BATCH, with
    A [M, K] and B [N, K] FP8 (B read as its K × N transpose), a_scale [M, K / BLOCK_K] and
    b_scale [N / SCALE_GROUP_N, K / BLOCK_K] float32; K % BLOCK_K == 0. Each K block's
    product is promoted into the float32 result with its two scales (DeepGEMM)."""
    bias_view = make_bias_view(bias, N, stride_bias) if bias is not None else None

    ctx = GemmContext(BLOCK_M, BLOCK_N, BLOCK_K, NUM_SMS, NUM_XCDS, GROUP_SIZE_M, CHUNK_SIZE,
                      allow_tf32=False, even_k=True, raster=RASTER)
    sched = ScheduleContext(M, N, K, ctx)

    start, total, stride = sched.batched_tile_range(BATCH)
    for tile_id in tl.range(start, total, stride, flatten=True):
        batch, out_tile = sched.get_batched_tile_from_idx(tile_id)
        tensorA = make_tensor_view(A + batch * stride_ab, M, K, stride_am, stride_ak)
        tensorB = make_tensor_view(B + batch * stride_bb, K, N, stride_bk, stride_bn)
        scales = make_group_scale_view(A_scale + batch * stride_sab, B_scale + batch * stride_sbb, M, N,
                                       stride_sam, stride_sak, stride_sbn, stride_sbk, SCALE_GROUP_N)
        tensorC = make_output_view(C + batch * stride_cb, M, N, stride_cm, stride_cn)
        acc = ctx.reduce_axis_blockscaled(tensorA, tensorB, out_tile, scales)
        tensorC.store(acc, out_tile, bias=bias_view)


@triton.jit
def schedule_trace_kernel(
    trace, counts, M, N, K, max_items,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    RASTER: tl.constexpr, NUM_SMS: tl.constexpr, NUM_XCDS: tl.constexpr, CHUNK_SIZE: tl.constexpr,
    STREAMK_TILES: tl.constexpr,
):
    """The loops of the two GEMM kernels, recording instead of computing: launch program p
    writes its (pid_m, pid_n, k_begin, k_end) steps in order to trace[p, :counts[p], :]
    (items past max_items are counted, not written)."""
    ctx = GemmContext(BLOCK_M, BLOCK_N, BLOCK_K, NUM_SMS, NUM_XCDS, GROUP_SIZE_M, CHUNK_SIZE, raster=RASTER)
    sched = ScheduleContext(M, N, K, ctx, streamk_tiles=STREAMK_TILES)
    row = trace + tl.program_id(0) * max_items * 4
    n = 0
    iters = sched.iters_per_tile()

    start, total, stride = sched.persistent_tile_range()
    for tile_id in range(start, total, stride):
        out_tile = sched.get_tile_from_idx(tile_id)
        tl.store(row + n * 4 + tl.arange(0, 4), _item(out_tile.pid_m, out_tile.pid_n, 0, iters), mask=n < max_items)
        n += 1

    it, end = sched.iter_range()
    while it < end:
        pid_m, pid_n, k_begin = sched.get_iter(it)
        k_end = tl.minimum(iters, k_begin + end - it)
        tl.store(row + n * 4 + tl.arange(0, 4), _item(pid_m, pid_n, k_begin, k_end), mask=n < max_items)
        n += 1
        it += k_end - k_begin
    tl.store(counts + tl.program_id(0), n)


@triton.jit
def _item(pid_m, pid_n, k_begin, k_end):
    """The vector [pid_m, pid_n, k_begin, k_end]."""
    i = tl.arange(0, 4)
    return tl.where(i == 0, pid_m, tl.where(i == 1, pid_n, tl.where(i == 2, k_begin, k_end)))
