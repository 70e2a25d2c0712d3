"""TileLang GEMM kernels written with the stages: persistent (with the scaled/bias
epilogue), Stream-K, block-scaled FP8, and a schedule-trace kernel.

Each builder takes a ``KernelSpec`` (everything compile-time) and returns a prim_func whose
M, N, K are dynamic, so one compiled kernel serves every problem size of its spec. C is
[M, NC] with NC >= N: the host pads C's rows to the 16 bytes a TMA store needs, and the
kernel writes only its first N columns (TileLang passes dense tensors only). The
operands are dense in their stored orientation (see ``InputView``); scale/bias vectors are
float32 (scales) and the bias dtype of the spec.
"""

from dataclasses import dataclass

import tilelang.language as T

from tlgemm.schedules import Schedule

from .stages import (
    CONSUMER_BARRIER,
    BlockScaledContext,
    GemmContext,
    ScheduleContext,
    make_bias_view,
    make_group_scale_view,
    make_output_view,
    make_scale_view,
    make_tensor_view,
)

__all__ = ["KernelSpec", "BlockScaledSpec", "persistent_gemm", "streamk_gemm", "blockscaled_gemm",
           "schedule_trace_kernel", "build"]


@dataclass(frozen=True)
class KernelSpec:
    """Compile-time description of one kernel (hashable: the in-memory cache key).

    a_dtype/b_dtype: WGMMA input names (f16, bf16, tf32, e4m3, e5m2, s8); accum_dtype f32/s32;
    out_storage: TileLang dtype of C; a_major/b_major "K"/"MN"; scale_a None/"tensor"/"row";
    scale_b None/"tensor"/"col"; bias_storage None or the bias' TileLang dtype; bias_per_row:
    the bias has one value per row of C (length M) instead of per column; num_sms: the
    persistent grid bound (the device's SM count); batched: A, B and C have a batch dimension
    in front (``persistent_gemm`` only), the scales and bias are shared by every GEMM;
    a_read_once/b_read_once: the grid reads each byte of A (B) once, the problem being one
    tile wide along N (M), so its loads carry the L2 evict_first hint (``InputView``);
    c_transposed: the kernel's problem is Cᵀ of a swap-AB launch and C is passed as the
    caller's row-major [N, M] (its rows padded to NC >= M columns): each tile is stored
    transposed (``OutputView.store``), so no second kernel transposes Cᵀ into C.
    """

    a_dtype: str
    b_dtype: str
    accum_dtype: str
    out_storage: str
    schedule: Schedule
    num_sms: int
    a_major: str = "K"
    b_major: str = "K"
    scale_a: str | None = None
    scale_b: str | None = None
    bias_storage: str | None = None
    bias_per_row: bool = False
    batched: bool = False
    a_read_once: bool = False
    b_read_once: bool = False
    c_transposed: bool = False

    @property
    def has_scale(self) -> bool:
        return self.scale_a is not None or self.scale_b is not None

    @property
    def has_epilogue(self) -> bool:
        return self.has_scale or self.bias_storage is not None

    def context(self) -> GemmContext:
        return GemmContext(self.schedule, self.a_dtype, self.b_dtype, self.accum_dtype, self.out_storage,
                           a_major=self.a_major, b_major=self.b_major, store_transposed=self.c_transposed)


def _operand_params(spec: KernelSpec, ctx: GemmContext, M, N, K, NC, batch):
    """Parameter types of A, B and C. A and B are declared in their logical orientation (A
    [M, K], B [K, N]) with the strides of the orientation they are stored in, so the launcher
    passes a transposed operand (B given as Wᵀ of a dense [N, K] W) as it is: a transposing
    view costs about a microsecond of host time per call. C is [M, NC] (its rows padded to
    NC columns), or [N, NC] with NC >= M under ``spec.c_transposed``; a batched kernel's
    parameters have the batch dimension in front."""
    lead = (batch,) if spec.batched else ()

    def operand(rows, cols, transposed, dtype):
        if not transposed:
            return T.Tensor(lead + (rows, cols), dtype)
        batch_stride = (rows * cols,) if spec.batched else ()
        return T.StridedTensor(lead + (rows, cols), batch_stride + (1, rows), dtype)

    return (operand(M, K, spec.a_major == "MN", ctx.a_storage), operand(K, N, spec.b_major == "K", ctx.b_storage),
            T.Tensor(lead + ((N, NC) if spec.c_transposed else (M, NC)), spec.out_storage))


def _stored(param, transposed: bool):
    """The dense buffer of an operand parameter in its stored orientation (its last two
    dimensions swapped when ``transposed``), aliasing the parameter's data: what TMA reads."""
    if not transposed:
        return param
    *lead, rows, cols = param.shape
    return T.Tensor((*lead, cols, rows), param.dtype, data=param.data)


def _epilogue_shapes(spec: KernelSpec, M, N):
    """Shapes of scale_a, scale_b and bias; an unused vector is declared with one element."""
    sa = (M,) if spec.scale_a == "row" else (1,)
    sb = (N,) if spec.scale_b == "col" else (1,)
    bias = ((M,) if spec.bias_per_row else (N,)) if spec.bias_storage is not None else (1,)
    return sa, sb, bias


def _views(spec, A, B, C, A_scale, B_scale, bias, M, N):
    tensorA = make_tensor_view(_stored(A, spec.a_major == "MN"), "A", spec.a_major, spec.a_read_once)
    tensorB = make_tensor_view(_stored(B, spec.b_major == "K"), "B", spec.b_major, spec.b_read_once)
    tensorC = make_output_view(C, M, N)
    scale = (make_scale_view(A_scale, B_scale, M, N, spec.scale_a == "row", spec.scale_b == "col")
             if spec.has_scale else None)
    bias_view = (make_bias_view(bias, M if spec.bias_per_row else N, spec.bias_per_row)
                 if spec.bias_storage is not None else None)
    return tensorA, tensorB, tensorC, scale, bias_view


def persistent_grid(num_sms: int, units, raster: str):
    """``tlgemm.schedules.persistent_programs`` of a symbolic unit count: min(SMs, units), or for
    raster "m" the fewest programs that keep ceil(units / SMs) rounds."""
    if raster != "m":
        return T.min(num_sms, units)
    return T.ceildiv(units, T.max(T.ceildiv(units, num_sms), 1))


def _num_programs(spec, M, N, BATCH):
    """Persistent grid (``persistent_grid``) over the tiles, of all BATCH GEMMs when ``spec.batched``."""
    s = spec.schedule
    tiles = T.ceildiv(M, s.block_m) * T.ceildiv(N, s.block_n)
    return persistent_grid(spec.num_sms, tiles * BATCH if spec.batched else tiles, s.raster)


def _tile_at(sched: ScheduleContext, tile_id, batched: bool):
    """The Tile of a persistent tile id: batch-major over the GEMMs when ``batched``."""
    return sched.get_batched_tile_from_idx(tile_id) if batched else sched.get_tile_from_idx(tile_id)


def _walk_tiles(ctx: GemmContext, sched: ScheduleContext, batch, tensorC, produce, consume, **store):
    """Program p's tiles p, p + P, ... (of all ``batch`` GEMMs; None: one GEMM). The producer
    warpgroup and the consumers walk them in separate branches, so each keeps its own
    register budget (``GemmContext.set_registers``): ``produce(tile)`` and ``consume(tile)``
    emit one tile's K loop on each side, the consumers then store the tile
    (``tensorC.store(ctx, tile, **store)``) and drain the stores at the end. A single GEMM
    whose grid is one wave (``ScheduleContext.one_wave``) takes tile p in a branch without the
    general walk's divisions: the tile count goes to ``local_tiles`` first, each tile's
    coordinates to the tile registers (``GemmContext.set_tile``), so the K loop is emitted once."""
    total = None if batch is None else sched.batched_total_tiles(batch)
    start, _, step = sched.persistent_tile_range(total)
    batched = batch is not None
    one_wave = sched.one_wave()  # a Python False (a batched grid) leaves only the general walk

    @T.macro
    def _count(n):
        if one_wave:
            n = 1
        else:
            n = sched.num_local_tiles(total)

    @T.macro
    def _bind(t):
        if one_wave:
            ctx.set_tile(sched.plain_raster_tile(sched.pid))
        else:
            ctx.set_tile(_tile_at(sched, start + t * step, batched))

    @T.macro
    def _walk():
        _count(ctx.local_tiles)
        if ctx.is_producer():
            ctx.set_registers(producer=True)
            for t in T.serial(ctx.local_tiles[0]):
                _bind(t)
                produce(ctx.bound_tile(batched))
        else:
            ctx.set_registers(producer=False)
            for t in T.serial(ctx.local_tiles[0]):
                _bind(t)
                tile = ctx.bound_tile(batched)
                consume(tile)
                tensorC.store(ctx, tile, **store)
            tensorC.drain(ctx)

    return _walk()


def _persistent_body(spec: KernelSpec, ctx: GemmContext, M, N, K, BATCH, num_programs):
    """``persistent_gemm``'s kernel body: program p runs tiles p, p + P, ..."""

    @T.macro
    def body(A, B, C, A_scale, B_scale, bias):
        with T.Kernel(num_programs, threads=ctx.threads) as pid:
            tensorA, tensorB, tensorC, scale, bias_view = _views(spec, A, B, C, A_scale, B_scale, bias, M, N)
            ctx.allocate(registers=False)
            sched = ScheduleContext(M, N, K, ctx, pid, num_programs, None if spec.batched else spec.num_sms)
            _walk_tiles(ctx, sched, BATCH if spec.batched else None, tensorC,
                        lambda tile: ctx.produce(tensorA, tensorB, tile, 0, sched.iters_per_tile),
                        lambda tile: ctx.consume(0, sched.iters_per_tile), scale=scale, bias=bias_view)

    return body


def _walk_cluster_rounds(ctx: GemmContext, sched: ScheduleContext, tensorC, produce, consume, **store):
    """The tiles of a 2-CTA cluster's program (Schedule.cluster_m = 2): the same tiles per
    program as ``_walk_tiles``, programs 2c and 2c + 1 in one cluster, round by round
    (``ScheduleContext.cluster_round``): ``produce(tile, shared)`` multicasts the operand
    their two tiles share where ``shared`` holds, ``consume(tile)`` releases each ring slot
    to both producers. TileLang follows the initialisation of the cluster barriers
    (``empty``) with a cluster barrier; the one before exit keeps every remote arrival and
    multicast within the peer's lifetime."""

    @T.macro
    def _walk():
        if ctx.is_producer():
            ctx.set_registers(producer=True)
            for t in T.serial(sched.cluster_rounds()):
                own, shared, _ = sched.cluster_round(t)
                produce(ctx.bind_tile(own), ctx.bind_shared(shared))
        else:
            ctx.set_registers(producer=False)
            for t in T.serial(sched.cluster_rounds()):
                own, _, stores = sched.cluster_round(t)
                tile = ctx.bind_tile(own)
                consume(tile)
                if stores:
                    tensorC.store(ctx, tile, **store)
            tensorC.drain(ctx)
        T.cluster_sync()

    return _walk()


def _cluster_grid(num_programs):
    """The launch grid of a 2-CTA cluster kernel: num_programs rounded up to even."""
    return T.ceildiv(num_programs, 2) * 2


def _clustered_body(spec: KernelSpec, ctx: GemmContext, M, N, K, num_programs):
    """``persistent_gemm``'s kernel body for 2-CTA clusters (``_walk_cluster_rounds``)."""

    @T.macro
    def body(A, B, C, A_scale, B_scale, bias):
        with T.Kernel(_cluster_grid(num_programs), threads=ctx.threads, cluster_dims=2) as pid:
            tensorA, tensorB, tensorC, scale, bias_view = _views(spec, A, B, C, A_scale, B_scale, bias, M, N)
            ctx.allocate(registers=False)
            sched = ScheduleContext(M, N, K, ctx, pid, num_programs)
            _walk_cluster_rounds(ctx, sched, tensorC,
                                 lambda tile, shared: ctx.produce(tensorA, tensorB, tile, 0, sched.iters_per_tile,
                                                                  shared=shared),
                                 lambda tile: ctx.consume(0, sched.iters_per_tile), scale=scale, bias=bias_view)

    return body


def persistent_gemm(spec: KernelSpec):
    """C = epilogue(A · B); program p runs whole tiles p, p + P, ... (P = ``persistent_grid``).
    The producer warpgroup and the consumers walk the tiles in separate branches, so each
    keeps its own register budget (``GemmContext.set_registers``). Without scales and bias
    the kernel takes A, B and C only (each tensor argument costs host time per launch).
    Batched (``spec.batched``): C[b] = epilogue(A[b] · B[b]) for b < BATCH, the BATCH · tiles
    tiles dealt out batch-major (``ScheduleContext.get_batched_tile_from_idx``)."""
    ctx = spec.context()
    M, N, K, NC, BATCH = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("NC"), T.dynamic("BATCH")
    a_param, b_param, c_param = _operand_params(spec, ctx, M, N, K, NC, BATCH)
    sa_shape, sb_shape, bias_shape = _epilogue_shapes(spec, M, N)
    bias_dtype = spec.bias_storage or "float32"
    num_programs = _num_programs(spec, M, N, BATCH)

    if spec.schedule.cluster_m > 1:
        if spec.batched:
            raise ValueError("spec: a clustered schedule (cluster_m > 1) runs the single-GEMM persistent kernel")
        body = _clustered_body(spec, ctx, M, N, K, num_programs)
    else:
        body = _persistent_body(spec, ctx, M, N, K, BATCH, num_programs)

    if spec.has_epilogue:
        @T.prim_func
        def gemm(A: a_param, B: b_param, C: c_param, A_scale: T.Tensor(sa_shape, "float32"),
                 B_scale: T.Tensor(sb_shape, "float32"), bias: T.Tensor(bias_shape, bias_dtype)):
            body(A, B, C, A_scale, B_scale, bias)
    else:
        @T.prim_func
        def gemm(A: a_param, B: b_param, C: c_param):
            body(A, B, C, None, None, None)

    return gemm


def _walk_streamk(ctx: GemmContext, sched: ScheduleContext, tensorC, produce, consume, partials, flags, **store):
    """Program p's work under a Stream-K schedule: whole tiles persistently, then its
    contiguous share of the last ``streamk_tiles`` tiles' K-iterations (tlgemm.schedules'
    Stream-K plan). ``produce(tile, k_begin, k_end)`` and ``consume(tile, k_begin, k_end)``
    emit one K range on each side; producer and consumers walk it in separate branches
    (``_walk_tiles``).

    Fix-up (schedules.decompose): a program whose segment starts inside a tile publishes its
    partial accumulator in ``partials[pid]`` and raises ``flags[pid]`` (bar.sync, then one
    thread's release store); the tile's owner (the program running its K-iteration 0) adds
    the partials of pid + 1, ... in order after an acquire spin on each flag, which it then
    sets back to 0. The summation order is fixed, so results are bitwise reproducible. Each
    program publishes at most once, so ``flags`` must be zero at launch and is zero again at
    exit (the launcher keeps one workspace per stream)."""
    iters, lpid, consumers = sched.iters_per_tile, sched.pid, ctx.consumer_threads
    start, _, step = sched.persistent_tile_range(sched.full_tiles)
    begin, end = sched.iter_range()
    segments = sched.segments(begin, end)

    @T.macro
    def _walk():
        g = T.alloc_var("int32", init=begin)
        if ctx.is_producer():
            ctx.set_registers(producer=True)
            for t in T.serial(sched.num_local_tiles(sched.full_tiles)):
                produce(ctx.bind_tile(sched.get_tile_from_idx(start + t * step)), 0, iters)
            for _ in T.serial(segments):
                tile_id, k = sched.get_iter(g)
                seg_end = T.min(end, (tile_id + 1) * iters)
                produce(ctx.bind_tile(sched.get_tile_from_idx(tile_id)), k, k + seg_end - g)
                g = seg_end
        else:
            ctx.set_registers(producer=False)
            for t in T.serial(sched.num_local_tiles(sched.full_tiles)):
                tile = ctx.bind_tile(sched.get_tile_from_idx(start + t * step))
                consume(tile, 0, iters)
                tensorC.store(ctx, tile, **store)
            for _ in T.serial(segments):
                tile_id, k = sched.get_iter(g)
                seg_end = T.min(end, (tile_id + 1) * iters)
                tile = ctx.bind_tile(sched.get_tile_from_idx(tile_id))
                consume(tile, k, k + seg_end - g)
                last = sched.iter_owner((tile_id + 1) * iters - 1)
                if k != 0:
                    T.copy(ctx.acc, partials[lpid, :, :])
                    T.sync_threads(CONSUMER_BARRIER, consumers)
                    if T.get_thread_binding() == 0:
                        T.atomic_store(flags[lpid], 1, memory_order="release")
                else:
                    if T.get_thread_binding() == 0:
                        for c in T.serial(lpid + 1, last + 1):
                            while T.atomic_load(flags[c], memory_order="acquire") == 0:
                                T.evaluate(0)
                            T.atomic_store(flags[c], 0, memory_order="relaxed")
                    T.sync_threads(CONSUMER_BARRIER, consumers)
                    tensorC.store(ctx, tile, partials=(partials, lpid + 1, last + 1), **store)
                g = seg_end
            tensorC.drain(ctx)

    return _walk()


def _walk_split(ctx: GemmContext, sched: ScheduleContext, splits: int, tensorC, produce, consume, received,
                arrived, **store):
    """The split-K part of one tile (Schedule.split_k, a cluster of ``splits`` CTAs a tile):
    program pid runs the unit ``ScheduleContext.split_unit`` names (its tile by one division
    where ``ScheduleContext.plain_raster`` holds), K-iterations ``ScheduleContext.split_k_range``
    of its split, which is its rank in the cluster. A rank r > 0 stages its accumulator in its
    own ``received[0]`` and copies it into rank 0's ``received[r - 1]`` (PTX ISA cp.async.bulk to
    .shared::cluster),
    arriving on rank 0's ``arrived`` with the bytes (``T.copy_cluster``, issued by thread 0);
    rank 0 waits for the ``splits - 1`` arrivals and stores its accumulator plus the received
    parts in rank order, so results are bitwise reproducible. Every exchange stays in the
    cluster's shared memory. The closing cluster barrier keeps each rank's source buffer alive
    until rank 0 has it."""
    consumers = ctx.consumer_threads
    tile_id, rank = sched.split_unit()
    k0, k1 = sched.split_k_range(rank)

    @T.macro
    def _walk():
        if sched.plain_raster():
            ctx.set_tile(sched.plain_raster_tile(tile_id))
        else:
            ctx.set_tile(sched.get_tile_from_idx(tile_id))
        tile = ctx.bound_tile()
        if ctx.is_producer():
            ctx.set_registers(producer=True)
            produce(tile, k0, k1)
        else:
            ctx.set_registers(producer=False)
            consume(tile, k0, k1)
            if rank == 0:
                T.mbarrier_wait_parity(arrived[0], 0)
                tensorC.store(ctx, tile, partials=(received, 0, splits - 1), **store)
                tensorC.drain(ctx)
            else:
                T.copy(ctx.acc, received[0, :, :])
                T.fence_proxy_async()
                T.sync_threads(CONSUMER_BARRIER, consumers)
                T.copy_cluster(received[0, :, :], received[rank - 1, :, :], dst_block=0, remote_barrier=arrived[0])
        T.cluster_sync()

    return _walk()


def streamk_gemm(spec: KernelSpec):
    """C = epilogue(A · B) under a Stream-K schedule (``_walk_streamk``) on spec.num_sms
    programs, ``partials`` [P, block_m, block_n] and ``flags`` [P] its fix-up workspace."""
    if spec.batched:
        raise ValueError("spec: the Stream-K kernel is not batched")
    ctx = spec.context()
    M, N, K, NC = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("NC")
    a_param, b_param, c_param = _operand_params(spec, ctx, M, N, K, NC, None)
    sa_shape, sb_shape, bias_shape = _epilogue_shapes(spec, M, N)
    bias_dtype = spec.bias_storage or "float32"
    s = spec.schedule
    P = spec.num_sms
    bm, bn = s.block_m, s.block_n

    @T.prim_func
    def gemm(A: a_param, B: b_param, C: c_param, A_scale: T.Tensor(sa_shape, "float32"),
             B_scale: T.Tensor(sb_shape, "float32"), bias: T.Tensor(bias_shape, bias_dtype),
             partials: T.Tensor((P, bm, bn), ctx.accum_storage), flags: T.Tensor((P,), "int32")):
        with T.Kernel(P, threads=ctx.threads) as pid:
            tensorA, tensorB, tensorC, scale, bias_view = _views(spec, A, B, C, A_scale, B_scale, bias, M, N)
            ctx.allocate(registers=False)
            sched = ScheduleContext(M, N, K, ctx, pid, P)
            _walk_streamk(ctx, sched, tensorC, lambda tile, k0, k1: ctx.produce(tensorA, tensorB, tile, k0, k1),
                          lambda tile, k0, k1: ctx.consume(k0, k1), partials, flags, scale=scale, bias=bias_view)

    return gemm


def schedule_trace_kernel(schedule: Schedule, num_sms: int, max_items: int):
    """Records, per launch program, the (pid_m, pid_n, k_begin, k_end) items the GEMM kernels'
    ScheduleContext walks, in order (compare with tlgemm.schedules.work)."""
    ctx = GemmContext(schedule, "bf16", "bf16", "f32", "bfloat16")
    s = schedule
    streamk = s.streamk_tiles > 0

    @T.macro
    def record(trace, pid, n, tile, k_begin, k_end):
        trace[pid, n, 0] = tile.pid_m
        trace[pid, n, 1] = tile.pid_n
        trace[pid, n, 2] = k_begin
        trace[pid, n, 3] = k_end

    @T.prim_func
    def trace(Trace: T.Tensor((num_sms, max_items, 4), "int32"), Count: T.Tensor((num_sms,), "int32"),
              M: T.int32, N: T.int32, K: T.int32):
        num_programs = num_sms if streamk else persistent_grid(
            num_sms, T.ceildiv(M, s.block_m) * T.ceildiv(N, s.block_n), s.raster)
        with T.Kernel(num_programs, threads=32) as pid:
            sched = ScheduleContext(M, N, K, ctx, pid, num_programs, None if streamk else num_sms)
            iters = sched.iters_per_tile
            n = T.alloc_var("int32", init=0)
            full = sched.full_tiles if streamk else sched.total_tiles
            start, _, step = sched.persistent_tile_range(full)
            if T.get_thread_binding() == 0:
                if sched.one_wave():  # the walks of ``_walk_tiles``
                    record(Trace, pid, n, sched.plain_raster_tile(sched.pid), 0, iters)
                    n += 1
                else:
                    for t in T.serial(sched.num_local_tiles(full)):
                        record(Trace, pid, n, sched.get_tile_from_idx(start + t * step), 0, iters)
                        n += 1
                if streamk:
                    begin, end = sched.iter_range()
                    g = T.alloc_var("int32", init=begin)
                    for _ in T.serial(sched.segments(begin, end)):
                        tile_id, k = sched.get_iter(g)
                        seg_end = T.min(end, (tile_id + 1) * iters)
                        record(Trace, pid, n, sched.get_tile_from_idx(tile_id), k, k + seg_end - g)
                        n += 1
                        g = seg_end
                Count[pid] = n

    return trace


def build(spec: KernelSpec):
    """The prim_func of ``spec``: Stream-K when the schedule asks for it, else persistent."""
    return streamk_gemm(spec) if spec.schedule.streamk_tiles else persistent_gemm(spec)


@dataclass(frozen=True)
class BlockScaledSpec:
    """Compile-time description of a block-scaled FP8 kernel (a_dtype/b_dtype e4m3/e5m2)."""

    a_dtype: str
    b_dtype: str
    out_storage: str
    schedule: Schedule
    num_sms: int
    bias_storage: str | None = None
    batched: bool = False
    #: The token scales (scale_a) arrive by TMA: they are stored outer-dim-major with 16-byte
    #: aligned K-block rows (``GroupScaleView``); else each is copied by cp.async.
    tma_token_scales: bool = False
    #: The grid reads each byte of A (the tokens) / B (the weights) once: the problem is one tile
    #: wide on the other side (the weights at M <= the token side of the tile), so the loads of
    #: that operand carry the L2 evict_first hint (``InputView``).
    a_read_once: bool = False
    b_read_once: bool = False

    def context(self) -> BlockScaledContext:
        """The kernel's context, its dtypes in WGMMA operand order: under swap-AB the WGMMA A
        operand is B (the weights), so b_dtype comes first."""
        swap = self.schedule.is_swap_ab
        dtypes = (self.b_dtype, self.a_dtype) if swap else (self.a_dtype, self.b_dtype)
        return BlockScaledContext(self.schedule, *dtypes, self.out_storage, tma_token_scales=self.tma_token_scales)


def blockscaled_gemm(spec: BlockScaledSpec):
    """C = Σ_kb (A · Bᵀ)[:, :, kb] · scale_a[:, kb] · scale_b[n // 128, kb] (+ bias): A [M, K],
    B [N, K] fp8 (K-major), SA = scale_a [M, K/128], SB = scale_b [ceil(N/128), K/128] at any
    strides (``GroupScaleView``); persistent over whole tiles, producer and consumers in separate
    branches (``persistent_gemm``), each K block promoted on the CUDA cores while the next
    one's wgmma runs (``BlockScaledContext``). Batched (``spec.batched``): every tensor but
    the bias has a batch index in front, the BATCH · tiles tiles dealt out batch-major.
    Swap-AB (``schedule.is_swap_ab``): the kernel's problem is Cᵀ [N, M] = B · Aᵀ (B the
    WGMMA A operand), its tiles stored transposed into C, the bias along its rows. 2-CTA
    clusters (``schedule.cluster_m`` = 2): ``_walk_cluster_rounds``, the shared operand
    multicast. Stream-K (``schedule.streamk_tiles``, unbatched): ``_walk_streamk`` on
    spec.num_sms programs, each K range's promoted partial result published through the
    ``partials``/``flags`` workspace (a tile's partial sums are additive over K blocks).
    Split-K (``schedule.split_k``, unbatched): ``_walk_split``, a cluster of split_k programs
    a tile adding their parts in shared memory."""
    swap, clustered = spec.schedule.is_swap_ab, spec.schedule.cluster_m > 1
    ctx = spec.context()
    a_storage, b_storage = (ctx.b_storage, ctx.a_storage) if swap else (ctx.a_storage, ctx.b_storage)
    M, N, K, NC = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("NC")
    KB, NB, BATCH = T.dynamic("KB"), T.dynamic("NB"), T.dynamic("BATCH")
    lead = (BATCH,) if spec.batched else ()
    sa_strides = tuple(T.dynamic(f"sa_stride{d}") for d in range(len(lead) + 2))
    if spec.tma_token_scales:  # outer-dim-major: consecutive tokens adjacent
        sa_strides = (*sa_strides[:-2], 1, sa_strides[-1])
    sb_strides = tuple(T.dynamic(f"sb_stride{d}") for d in range(len(lead) + 2))
    bias_shape = (N,) if spec.bias_storage is not None else (1,)
    streamk, splits = spec.schedule.streamk_tiles > 0, spec.schedule.split_k
    if (clustered or streamk or splits > 1) and spec.batched:
        raise ValueError("spec: a clustered (cluster_m > 1), Stream-K or split-K schedule runs the single-GEMM "
                         "block-scaled kernel")
    rows, cols = (N, M) if swap else (M, N)
    if splits > 1:
        num_programs = T.ceildiv(rows, spec.schedule.block_m) * T.ceildiv(cols, spec.schedule.block_n) * splits
    else:
        num_programs = spec.num_sms if streamk else _num_programs(spec, rows, cols, BATCH)
    cluster = 2 if clustered else splits if splits > 1 else None
    # Stream-K's fix-up workspace (``_walk_streamk``); one element each when unused
    P, bm, bn = spec.num_sms, spec.schedule.block_m, spec.schedule.block_n
    partials_shape, flags_shape = ((P, bm, bn), (P,)) if streamk else ((1, 1, 1), (1,))

    @T.prim_func
    def gemm(A: T.Tensor((*lead, M, K), a_storage), B: T.Tensor((*lead, N, K), b_storage),
             C: T.Tensor((*lead, M, NC), spec.out_storage),
             SA: T.StridedTensor((*lead, M, KB), sa_strides, "float32"),
             SB: T.StridedTensor((*lead, NB, KB), sb_strides, "float32"),
             bias: T.Tensor(bias_shape, spec.bias_storage or "float32"),
             partials: T.Tensor(partials_shape, "float32"), flags: T.Tensor(flags_shape, "int32")):
        with T.Kernel(_cluster_grid(num_programs) if clustered else num_programs, threads=ctx.threads,
                      cluster_dims=cluster) as pid:
            tokens_once, weights_once = spec.a_read_once, spec.b_read_once
            tensorA = make_tensor_view(B if swap else A, "A", "K", weights_once if swap else tokens_once)
            tensorB = make_tensor_view(A if swap else B, "B", "K", tokens_once if swap else weights_once)
            tensorC = make_output_view(C, M, N)
            scales = make_group_scale_view(SA, SB, M, N, tma=spec.tma_token_scales)
            bias_view = make_bias_view(bias, N, per_row=swap) if spec.bias_storage is not None else None
            ctx.allocate()
            sched = ScheduleContext(rows, cols, K, ctx, pid, num_programs,
                                    None if clustered or streamk or splits > 1 or spec.batched else spec.num_sms)
            iters = sched.iters_per_tile
            if clustered:
                _walk_cluster_rounds(ctx, sched, tensorC,
                                     lambda tile, shared: ctx.produce_blockscaled(tensorA, tensorB, scales, tile, 0,
                                                                                  iters, shared),
                                     lambda tile: ctx.consume_blockscaled(tile, 0, iters, K, spec.tma_token_scales),
                                     bias=bias_view)
            elif splits > 1:
                received = T.alloc_shared((splits - 1, spec.schedule.block_m, spec.schedule.block_n), "float32")
                arrived = T.alloc_cluster_barrier([splits - 1])
                _walk_split(ctx, sched, splits, tensorC,
                            lambda tile, k0, k1: ctx.produce_blockscaled(tensorA, tensorB, scales, tile, k0, k1),
                            lambda tile, k0, k1: ctx.consume_blockscaled(tile, k0, k1, K), received, arrived,
                            bias=bias_view)
            elif streamk:
                _walk_streamk(ctx, sched, tensorC,
                              lambda tile, k0, k1: ctx.produce_blockscaled(tensorA, tensorB, scales, tile, k0, k1),
                              lambda tile, k0, k1: ctx.consume_blockscaled(tile, k0, k1, K), partials, flags,
                              bias=bias_view)
            else:
                _walk_tiles(ctx, sched, BATCH if spec.batched else None, tensorC,
                            lambda tile: ctx.produce_blockscaled(tensorA, tensorB, scales, tile, 0, iters),
                            lambda tile: ctx.consume_blockscaled(tile, 0, iters, K, spec.tma_token_scales),
                            bias=bias_view)

    return gemm
