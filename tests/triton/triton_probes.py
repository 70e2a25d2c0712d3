"""Small kernels that expose single stages for the interpreter tests (not GEMMs)."""

import triton
import triton.language as tl

from tlgemm.triton.stages import (
    GemmContext,
    ScheduleContext,
    Tile,
    chiplet_transform,
    chiplet_transform_chunked,
    make_input_view,
    make_output_view,
    make_streamk_workspace,
)


@triton.jit
def tile_layout_probe(rm_out, rn_out, mask_out, pid_m, pid_n, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Writes Tile(pid_m, pid_n).layout(M, N): wrapped rows, wrapped columns, the mask."""
    rm, rn, mask = Tile(pid_m, pid_n, BLOCK_M, BLOCK_N).layout(M, N)
    tl.store(rm_out + tl.arange(0, BLOCK_M), rm)
    tl.store(rn_out + tl.arange(0, BLOCK_N), rn)
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(mask_out + offs, mask.to(tl.int8))


@triton.jit
def chiplet_probe(plain_out, chunked_out, NUM_XCDS: tl.constexpr, CHUNK_SIZE: tl.constexpr):
    """Program p writes chiplet_transform(p, P, X) and chiplet_transform_chunked(p, P, X, C)."""
    pid = tl.program_id(0)
    workgroups = tl.num_programs(0)
    tl.store(plain_out + pid, chiplet_transform(pid, workgroups, NUM_XCDS))
    tl.store(chunked_out + pid, chiplet_transform_chunked(pid, workgroups, NUM_XCDS, CHUNK_SIZE))


@triton.jit
def reduce_tile_probe(A, B, C, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One program per output tile (grid = tiles_m × tiles_n), the K loop written with
    ``reduce_tile`` step by step (unmasked full steps, a masked last step), then ``store``."""
    tensorA = make_input_view(A, M, K, stride_am, stride_ak)
    tensorB = make_input_view(B, K, N, stride_bk, stride_bn)
    tensorC = make_output_view(C, M, N, stride_cm, stride_cn)
    ctx = GemmContext(BLOCK_M, BLOCK_N, BLOCK_K, 1, allow_tf32=False)
    out_tile = Tile(tl.program_id(0), tl.program_id(1), BLOCK_M, BLOCK_N)
    acc = ctx.init_accumulator()
    for k in range(K // BLOCK_K):
        acc = ctx.reduce_tile(tensorA, tensorB, out_tile, k, acc)
    if K % BLOCK_K != 0:
        acc = ctx.reduce_tile(tensorA, tensorB, out_tile, K // BLOCK_K, acc, boundary=True)
    tensorC.store(acc, out_tile)


@triton.jit
def output_load_probe(C, M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """C = 2 · C through OutputView.load (masked) and a store restricted by a user mask that
    leaves column 0 of every tile untouched."""
    tensorC = make_output_view(C, M, N, stride_cm, stride_cn)
    tile = Tile(tl.program_id(0), tl.program_id(1), BLOCK_M, BLOCK_N)
    values = tensorC.load(tile, boundary=True)
    keep_first_column = (tl.arange(0, BLOCK_N) > 0)[None, :]
    tensorC.store(values * 2, tile, mask=keep_first_column)


@triton.jit
def streamk_fixup_probe(partials, counters, stores, totals, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr, NUM_SMS: tl.constexpr, STREAMK_TILES: tl.constexpr):
    """The Stream-K kernel's segment walk with each partial replaced by a tile filled with its
    number of K-steps. For every split tile, the program told to store counts itself in
    stores[tile] and writes the fixed-up total to totals[tile] (which must be I everywhere)."""
    ctx = GemmContext(BLOCK_M, BLOCK_N, BLOCK_K, NUM_SMS)
    sched = ScheduleContext(M, N, K, ctx, streamk_tiles=STREAMK_TILES)
    workspace = make_streamk_workspace(partials, counters, sched)
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    iters = sched.iters_per_tile()
    it, end = sched.iter_range()
    while it < end:
        pid_m, pid_n, k_begin = sched.get_iter(it)
        k_end = tl.minimum(iters, k_begin + end - it)
        partial = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32) + (k_end - k_begin).to(tl.float32)
        if k_end - k_begin < iters:
            if workspace.publish(partial, it // iters, k_begin, k_end):
                tl.atomic_add(stores + it // iters, 1)
                tl.store(totals + (it // iters) * BLOCK_M * BLOCK_N + offs, workspace.total(it // iters))
        it += k_end - k_begin
