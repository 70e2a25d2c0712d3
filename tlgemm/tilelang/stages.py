"""The stages abstractions in TileLang: the Triton backend's names and meanings, as Python
objects whose code-emitting methods are ``T.macro``s.

A kernel is warp specialised (one CTA = the consumer warpgroups, threads [0, 128·W), plus
one producer warpgroup): the producer's elected thread streams A and B tiles with TMA into a
``num_stages`` ring of shared buffers in the swizzled layouts the emitter's descriptors were
proven against (``tlgemm.macros.operands``); the consumers issue WGMMA through
``tlgemm.macros.WGMMAEmitter``. Two mbarriers per ring slot hand the slot over:

* ``full[s]`` (arrival count 32, the producer warp): the elected lane's ``expect_tx`` plus the
  bytes the TMA engine delivers complete it (PTX ISA 9.7.13.15, "mbarrier" with transaction
  counts);
* ``empty[s]`` (arrival count W): the first thread of each consumer warpgroup arrives once
  the wgmma batch that read the slot has retired. wgmma is warpgroup-collective, so one
  thread's ``wgmma.wait_group`` returning means its warpgroup's batch no longer reads the
  slot (PTX ISA 9.7.15.5.2).

The consumers leave one wgmma batch in flight (``wait(1)``) and release the slot of the
previous K-iteration, so the tensor cores never wait for the issue of the next batch.

Register budgets (``setmaxnreg``, PTX ISA 9.7.17.1) take effect only where producer and
consumers run separate code to the end of the kernel: the persistent and Stream-K kernels
and the block-scaled kernel walk their work in two branches (``produce`` / ``consume``).

Producer and consumers walk the same work items (``ScheduleContext``) and count K-iterations
the same way, so slot ``it % S`` and phase ``(it // S) & 1`` agree on both sides.

Ragged M, N and K need no masks in the main loop: TMA zero-fills the out-of-bounds part of
a box on loads and clips it on stores (CUDA driver API, cuTensorMapEncodeTiled).
"""

import math

import tilelang.language as T

from tlgemm._checks import SCALE_BLOCK
from tlgemm.macros.emitter import WGMMAEmitter
from tlgemm.macros.operands import Major
from tlgemm.schedules import Schedule, store_staging

__all__ = [
    "STORAGE", "Tile", "InputView", "OutputView", "ScaleView", "BiasView", "GemmContext", "ScheduleContext",
    "GroupScaleView", "BlockScaledContext",
    "make_input_view", "make_tensor_view", "make_output_view", "make_scale_view", "make_bias_view",
    "make_group_scale_view",
    "chiplet_transform", "chiplet_transform_chunked",
]

#: TileLang storage type of each WGMMA input / accumulator name.
STORAGE = {"f16": "float16", "bf16": "bfloat16", "tf32": "float32", "e4m3": "float8_e4m3fn",
           "e5m2": "float8_e5m2", "s8": "int8", "u8": "uint8", "f32": "float32", "s32": "int32"}

#: Registers per thread after ``setmaxnreg`` (PTX ISA 9.7.17.1): the producer gives its
#: registers to the consumers; 128·(PRODUCER + W·CONSUMER[W]) <= 65536. The block-scaled
#: kernel's producer, which also stages scales, keeps ``BLOCKSCALED_PRODUCER_REGISTERS``
#: beside one consumer warpgroup (its Stream-K walk spilled at 40 and 56).
PRODUCER_REGISTERS = 40
BLOCKSCALED_PRODUCER_REGISTERS = 96
CONSUMER_REGISTERS = {1: 232, 2: 232}

#: The producer is the first warp of the producer warpgroup (the block-scaled kernel's narrow
#: tiles: its first two, ``BlockScaledContext.producer_warps_of``): one lane (elected by the TMA
#: copy, elect.sync needs the whole warp converged) issues expect_tx and the copies, and
#: all its lanes arrive on ``full`` after that.
PRODUCER_LANES = 32

#: Named hardware barrier the consumer warpgroups use among themselves (bar.sync id, count);
#: TileLang reserves the low ids for its own partial syncs.
CONSUMER_BARRIER = 9

def _slot(iteration, stages: int):
    """Ring slot of a K-iteration (the counter is non-negative: truncating division)."""
    return T.truncmod(iteration, stages)


def _phase(iteration, stages: int):
    """mbarrier phase parity of a K-iteration's slot use."""
    return T.truncmod(T.truncdiv(iteration, stages), 2)


class Tile:
    """One output tile: its coordinates (pid_m, pid_n) and origin (m0, n0) in C, and in a
    batched GEMM the index of its GEMM (``batch``; None in a single GEMM)."""

    def __init__(self, pid_m, pid_n, block_m: int, block_n: int, batch=None):
        self.pid_m, self.pid_n = pid_m, pid_n
        self.block_m, self.block_n = block_m, block_n
        self.batch = batch

    @property
    def m0(self):
        return self.pid_m * self.block_m

    @property
    def n0(self):
        return self.pid_n * self.block_n


class InputView:
    """A global operand of C = A · B in the orientation it is stored in.

    ``operand`` "A": logical [M, K], stored [M, K] (K-major) or [K, M] (MN-major);
    ``operand`` "B": logical [K, N], stored [N, K] (K-major) or [K, N] (MN-major); a batched
    GEMM's buffer has the batch index in front of either.

    ``evict_first``: the grid reads each of the operand's bytes once (the other side of the
    problem is one tile, e.g. the weights at small M), so its TMA loads carry a cache policy
    of L2 eviction priority evict_first (PTX ISA 9.7.9.25.5.1, the ``.L2::cache_hint``
    operand): the streamed operand leaves the L2 to the other one, which every tile reads
    again. On the H100: 1.04-1.14x by kernel time on the block-scaled kernel at M = 16 and 64,
    1.04-1.23x on seven of ten small-M dense rows (benchmarks/results/evict_first.md).
    """

    def __init__(self, buffer, operand: str, major, evict_first: bool = False):
        if operand not in ("A", "B"):
            raise ValueError(f"operand must be 'A' or 'B', got {operand!r}")
        self.buffer, self.operand, self.major = buffer, operand, Major.parse(major)
        self.evict_first = evict_first

    def load(self, smem, stage, mn0, k0, block_mn: int, block_k: int, barrier, batch=None, multicast=None):
        """TMA-copy the [block_mn, block_k] tile at (mn0, k0) (of GEMM ``batch`` in a batched
        buffer) into ring slot ``stage``; the copy's bytes complete ``barrier``. Within a
        2-CTA cluster, where the predicate ``multicast`` holds, rank 0 copies the tile into
        the same slot of both CTAs (TMA multicast, PTX ISA 9.7.9.25) and rank 1 copies
        nothing; each CTA still expects the tile's bytes on its own ``barrier``. (tilelang
        0.1.15's ``tma_copy`` has the lowest rank of ``cluster_mask`` issue a multicast, so
        the two CTAs cannot each issue half of the tile to both, as CUTLASS does, through it; a
        probe that split it by rewriting the CUDA measured no difference on the H100,
        benchmarks/results/blockscaled_small_m.md.)"""
        buf, k_major = self.buffer, self.major is Major.K

        def region(rows, cols):
            return buf[rows, cols] if batch is None else buf[batch, rows, cols]

        source = (region(slice(mn0, mn0 + block_mn), slice(k0, k0 + block_k)) if k_major
                  else region(slice(k0, k0 + block_k), slice(mn0, mn0 + block_mn)))

        policy = "evict_first" if self.evict_first else None

        @T.macro
        def _load():
            if multicast is None:
                T.tma_copy(source, smem[stage, :, :], barrier=barrier, leader_scope_threads=32,
                           eviction_policy=policy)
            elif multicast:
                T.tma_copy(source, smem[stage, :, :], barrier=barrier, leader_scope_threads=32, cluster_mask=0b11,
                           eviction_policy=policy)
            else:
                T.tma_copy(source, smem[stage, :, :], barrier=barrier, leader_scope_threads=32,
                           eviction_policy=policy)

        return _load()


class ScaleView:
    """Per-tensor, per-row (A, length M) or per-column (B, length N) float32 scales."""

    def __init__(self, a_scale, b_scale, M, N, per_row: bool, per_col: bool):
        self.a_scale, self.b_scale = a_scale, b_scale
        self.M, self.N, self.per_row, self.per_col = M, N, per_row, per_col

    def factor(self, row, col):
        """scale_a[row] · scale_b[col] (indices clamped so edge tiles read in bounds)."""
        sa = self.a_scale[T.min(row, self.M - 1)] if self.per_row else self.a_scale[0]
        sb = self.b_scale[T.min(col, self.N - 1)] if self.per_col else self.b_scale[0]
        return sa * sb


class BiasView:
    """A bias added along the rows of C: length N, one value per column (torch.addmm's [N]
    broadcast), or with ``per_row`` length M, one value per row (what a swap-AB launch, which
    computes Cᵀ, needs for the same bias)."""

    def __init__(self, bias, extent, per_row: bool = False):
        self.bias, self.extent, self.per_row = bias, extent, per_row

    def value(self, row, col, dtype: str):
        index = row if self.per_row else col
        return T.Cast(dtype, self.bias[T.min(index, self.extent - 1)])


class OutputView:
    """C [M, N] (row-major; [batch, M, N] for a batched GEMM, the tile names its GEMM).
    ``store`` applies scale → bias → convert, stages the tile in
    shared memory and writes it with a TMA store (clipped at the edges of C). Under
    ``GemmContext.store_transposed`` the tile is one of Cᵀ (a swap-AB kernel's problem, the
    buffer still C): it is staged transposed and lands at C[tile cols, tile rows].

    The store is left in flight: the next ``store`` first waits until the previous one has
    read the staging tile (``cp.async.bulk.wait_group.read``, PTX ISA 9.7.9.25.6.3), so the
    write-out overlaps the next tile's K loop; ``drain`` waits at the end of the kernel.
    The thread that issues the bulk store is the one that waits for it (bulk async-groups
    are per thread): both are the consumers' elected thread.
    """

    def __init__(self, buffer, M, N):
        self.buffer, self.M, self.N = buffer, M, N

    def store(self, ctx, tile: Tile, scale: ScaleView | None = None, bias: BiasView | None = None,
              partials=None):
        """Write the tile: value → scale → bias → convert, chunk by chunk.

        The value is the accumulator, plus with ``partials = (workspace, first, stop)`` the
        published partial tiles workspace[first], ..., workspace[stop - 1] in that order (the
        Stream-K fix-up).
        The accumulator is only read: ptxas serialises every wgmma of a kernel in which
        non-wgmma instructions define accumulator registers (its warning C7515), so the
        epilogue works on a chunk-sized copy.
        """
        acc, c_smem, buf, out = ctx.acc, ctx.c_smem, self.buffer, ctx.out_chunk
        bm, bn, accum, consumers = ctx.block_m, ctx.block_n, ctx.accum_storage, ctx.consumer_threads
        chunk, buffers, total = ctx.store_chunk, ctx.store_buffers, ctx.sum_chunk

        transposed = ctx.store_transposed

        def region(c):
            rows, cols = slice(tile.m0, tile.m0 + bm), slice(tile.n0 + c * chunk, tile.n0 + (c + 1) * chunk)
            if transposed:
                rows, cols = cols, rows
            return buf[rows, cols] if tile.batch is None else buf[tile.batch, rows, cols]

        @T.macro
        def stage(c):
            if transposed:
                for i, j in T.Parallel(bm, chunk):
                    c_smem[c % buffers, j, i] = out[i, j]
            else:
                T.copy(out, c_smem[c % buffers, :, :])

        def finish(value, i, j):
            if scale is not None:
                value = value * scale.factor(tile.m0 + i, tile.n0 + j)
            if bias is not None:
                value = value + bias.value(tile.m0 + i, tile.n0 + j, accum)
            return value

        @T.macro
        def _store():
            if not ctx.is_producer():
                for c in T.unroll(bn // chunk):
                    if partials is None:
                        for i, j in T.Parallel(bm, chunk):
                            out[i, j] = finish(acc[i, c * chunk + j], i, c * chunk + j)
                    else:
                        workspace, first, stop = partials
                        for i, j in T.Parallel(bm, chunk):
                            total[i, j] = acc[i, c * chunk + j]
                        for p in T.serial(first, stop):
                            for i, j in T.Parallel(bm, chunk):
                                total[i, j] = total[i, j] + workspace[p, i, c * chunk + j]
                        for i, j in T.Parallel(bm, chunk):
                            out[i, j] = finish(total[i, j], i, c * chunk + j)
                    if T.shuffle_elect(consumers):
                        T.tma_store_wait(buffers - 1)
                    T.sync_threads(CONSUMER_BARRIER, consumers)
                    stage(c)
                    T.fence_proxy_async()
                    T.sync_threads(CONSUMER_BARRIER, consumers)
                    T.tma_copy(c_smem[c % buffers, :, :], region(c))

        return _store()

    def drain(self, ctx):
        """Wait for the last store to finish reading shared memory (before the CTA exits)."""
        consumers = ctx.consumer_threads

        @T.macro
        def _drain():
            if not ctx.is_producer():
                if T.shuffle_elect(consumers):
                    T.tma_store_wait(0)

        return _drain()


def make_input_view(buffer, operand: str, major, evict_first: bool = False) -> InputView:
    return InputView(buffer, operand, major, evict_first)


def make_tensor_view(buffer, operand: str, major, evict_first: bool = False) -> InputView:
    """Alias of ``make_input_view`` (tritonBLAS names both)."""
    return InputView(buffer, operand, major, evict_first)


def make_output_view(buffer, M, N) -> OutputView:
    return OutputView(buffer, M, N)


def make_scale_view(a_scale, b_scale, M, N, per_row: bool, per_col: bool) -> ScaleView:
    return ScaleView(a_scale, b_scale, M, N, per_row, per_col)


def make_bias_view(bias, extent, per_row: bool = False) -> BiasView:
    return BiasView(bias, extent, per_row)


def chiplet_transform(pid, num_workgroups, num_xcds: int):
    """tlgemm.schedules.chiplet_transform as a TIR expression."""
    xcd, pos = pid % num_xcds, pid // num_xcds
    return xcd * (num_workgroups // num_xcds) + T.min(xcd, num_workgroups % num_xcds) + pos


def chiplet_transform_chunked(pid, num_workgroups, num_xcds: int, chunk_size: int):
    """tlgemm.schedules.chiplet_transform_chunked as a TIR expression."""
    round_size = num_xcds * chunk_size
    local, xcd = pid // num_xcds, pid % num_xcds
    moved = (local // chunk_size) * round_size + xcd * chunk_size + local % chunk_size
    return T.if_then_else(pid >= (num_workgroups // round_size) * round_size, pid, moved)


class GemmContext:
    """Tile shape, pipeline and WGMMA emitter of one kernel, and the K loop.

    ``allocate()`` (inside ``T.Kernel``) creates the operand ring, the output staging
    tile, the accumulator fragment and the barriers; ``reduce_axis`` runs K-iterations
    [k_begin, k_end) of a tile — the producer loads, the consumers multiply.
    """

    #: float32 (int32) registers per consumer thread for the result and any temporaries (the
    #: block-scaled kernel's). ptxas (nvcc 13.0, sm_90a) kept a dense 128x192 tile on one
    #: warpgroup (192) without spills, and spilled and serialised the wgmma (warning C7512) at
    #: dense 128x224 and at block-scaled 128x256 with two temporaries (384).
    fragment_registers = 192

    def __init__(self, schedule: Schedule, a_dtype: str, b_dtype: str, accum_dtype: str, out_storage: str,
                 *, a_major="K", b_major="K", store_transposed=False):
        if not isinstance(schedule, Schedule):
            raise TypeError(f"schedule: expected a tlgemm.schedules.Schedule, got {type(schedule).__name__}")
        wgs = schedule.num_warpgroups
        if wgs not in CONSUMER_REGISTERS:
            raise ValueError(f"schedule: num_warpgroups must be 1 or 2 for the TileLang kernels, got {wgs}")
        wg_m = wgs if schedule.block_m % (64 * wgs) == 0 else 1
        if wg_m < wgs and schedule.block_n > 64:
            raise ValueError(f"schedule: a {schedule.block_m}x{schedule.block_n} tile on {wgs} consumer warpgroups "
                             f"splits block_n between them (block_m is no multiple of {64 * wgs}), which TileLang "
                             "0.1.15's layout inference lowers only up to block_n = 64; use block_m a multiple of "
                             f"{64 * wgs} or one warpgroup")
        accumulators = schedule.block_m * schedule.block_n // (128 * wgs)
        if accumulators > self.fragment_registers:
            raise ValueError(f"schedule: a {schedule.block_m}x{schedule.block_n} tile on {wgs} consumer "
                             f"warpgroup(s) holds {accumulators} accumulators per thread, more than "
                             f"{self.fragment_registers} (ptxas would spill them and serialise the wgmma); use more "
                             "warpgroups or a smaller tile")
        if schedule.num_stages < 2:
            raise ValueError("schedule: num_stages must be >= 2 for the TileLang kernels: the consumers release a "
                             "ring slot after issuing the next K-iteration's wgmma, so one slot would wait on itself")
        self.schedule = schedule
        self.emitter = WGMMAEmitter(a_dtype, b_dtype, accum_dtype, block_m=schedule.block_m,
                                    block_n=schedule.block_n, block_k=schedule.block_k, a_major=a_major,
                                    b_major=b_major, warpgroups_m=wg_m, warpgroups_n=wgs // wg_m)
        em = self.emitter
        self.block_m, self.block_n, self.block_k = schedule.block_m, schedule.block_n, schedule.block_k
        self.num_stages = schedule.num_stages
        self.a_storage, self.b_storage = STORAGE[em.a_type.name], STORAGE[em.b_type.name]
        self.accum_storage, self.out_storage = em.accum_storage, out_storage
        self.consumer_threads = em.threads
        self.threads = em.threads + 128
        self.a_tile = em.a_params.smem_shape
        self.b_tile = em.b_params.smem_shape
        self.a_bytes, self.b_bytes = em.a_params.tile_bytes, em.b_params.tile_bytes
        self.store_chunk, self.store_buffers = store_staging(schedule.block_n)
        #: The tile is Cᵀ's and C is written transposed (``OutputView.store``), the staging
        #: chunks then [chunk, block_m]: a swap-AB kernel that stores into C itself.
        self.store_transposed = store_transposed
        self.cluster_size = schedule.cluster_m
        self.producer_registers = PRODUCER_REGISTERS

    def allocate(self, registers: bool = True):
        """Buffers, barriers and (``registers``) register budgets; call first inside
        ``T.Kernel``. A kernel whose producer and consumer run separate loops sets the
        budgets itself at the top of each branch (``set_registers``)."""
        S, em = self.num_stages, self.emitter
        self.a_smem = T.alloc_shared((S, *self.a_tile), self.a_storage)
        self.b_smem = T.alloc_shared((S, *self.b_tile), self.b_storage)
        staged = (self.store_chunk, self.block_m) if self.store_transposed else (self.block_m, self.store_chunk)
        self.c_smem = T.alloc_shared((self.store_buffers, *staged), self.out_storage)
        self.out_chunk = T.alloc_fragment((self.block_m, self.store_chunk), self.out_storage)
        self.sum_chunk = T.alloc_fragment((self.block_m, self.store_chunk), self.accum_storage)
        self.acc = T.alloc_fragment((self.block_m, self.block_n), self.accum_storage)
        self.full = T.alloc_barrier([PRODUCER_LANES] * S)
        releases = em.num_warpgroups * self.cluster_size  # one arrival per consumer warpgroup and CTA (``release``)
        self.empty = T.alloc_barrier([releases] * S) if self.cluster_size == 1 else T.alloc_cluster_barrier([releases] * S)
        self.iteration = T.alloc_var("int32", init=0)
        self.tile_m = T.alloc_var("int32", init=0)
        self.tile_n = T.alloc_var("int32", init=0)
        self.tile_b = T.alloc_var("int32", init=0)
        self.local_tiles = T.alloc_var("int32", init=0)  # this program's tile count (kernels._walk_tiles)
        self.shared = T.alloc_var("int32", init=0) if self.cluster_size > 1 else None
        T.annotate_layout({self.a_smem: em.a_shared_layout.expand([S]), self.b_smem: em.b_shared_layout.expand([S]),
                           self.acc: self.accum_layout()})
        if registers:
            self._set_registers()

    def accum_layout(self):
        """The result's register layout: the emitter's accumulator."""
        return self.emitter.accum_layout()

    def is_producer(self):
        return T.get_thread_binding() >= self.consumer_threads

    def bind_tile(self, tile: Tile) -> Tile:
        """``tile`` with its coordinates evaluated once into two registers: the K loop then
        reads them per TMA issue instead of re-deriving the raster's integer divisions (the
        producer runs on few registers)."""
        self.set_tile(tile)
        return self.bound_tile(tile.batch is not None)

    def set_tile(self, tile: Tile):
        """Evaluate ``tile``'s coordinates into the tile registers (``bound_tile`` reads them)."""
        batched = tile.batch is not None

        @T.macro
        def _bind(tile_m, tile_n, tile_b):
            tile_m = tile.pid_m
            tile_n = tile.pid_n
            if batched:
                tile_b = tile.batch

        return _bind(self.tile_m, self.tile_n, self.tile_b)

    def bound_tile(self, batched: bool = False) -> Tile:
        """The Tile in the tile registers (``set_tile``), e.g. after branches that each set one."""
        return Tile(self.tile_m[0], self.tile_n[0], self.block_m, self.block_n, self.tile_b[0] if batched else None)

    def bind_shared(self, shared):
        """A cluster round's ``shared`` predicate (``ScheduleContext.cluster_round``)
        evaluated once into a register: which operand it names is multicast (B under raster
        "m", A under raster "n"); the producer tests it per K-iteration."""

        @T.macro
        def _bind(flag):
            flag = T.Select(shared, 1, 0)

        _bind(self.shared)
        return self.shared[0] == 1

    def release(self, slot):
        """Consumer side: hand ring slot ``slot`` back to the producer: the first thread of
        each warpgroup arrives once its wait_group has retired the slot's wgmma, its only
        reader, for the whole warpgroup. In a cluster the slot goes back to the producers
        of every CTA (remote mbarrier arrive, PTX ISA 9.7.13.15.13): either may multicast
        into it."""
        empty, ranks = self.empty, self.cluster_size

        @T.macro
        def _arrive():
            if ranks == 1:
                T.mbarrier_arrive(empty[slot])
            else:
                for rank in T.unroll(ranks):
                    T.mbarrier_arrive(empty[slot], cta_id=rank)

        @T.macro
        def _release():
            if T.get_thread_binding() % 128 == 0:
                _arrive()

        return _release()

    def set_registers(self, producer: bool):
        """``setmaxnreg`` for one side (PTX ISA 9.7.17.1): the producer gives registers back,
        the consumers take them. ptxas honours it only where the code after it never runs
        on the other side's budget, i.e. when each side has its own branch to the end."""
        count, increase = ((self.producer_registers, 0) if producer
                           else (CONSUMER_REGISTERS[self.emitter.num_warpgroups], 1))

        @T.macro
        def _regs():
            T.set_max_nreg(count, increase)

        return _regs()

    def _set_registers(self):
        """Both sides' ``set_registers`` at once, for kernels whose sides share one loop."""

        @T.macro
        def _regs():
            if self.is_producer():
                self.set_registers(producer=True)
            else:
                self.set_registers(producer=False)

        return _regs()

    def produce(self, tensorA: InputView, tensorB: InputView, tile: Tile, k_begin, k_end, shared=None):
        """Producer side of ``reduce_axis``: its first warp TMA-loads the K-iterations' tiles
        into the ring (call from producer threads only). In a cluster, where the predicate
        ``shared`` holds (``bind_shared``), the operand the cluster's two tiles share is
        multicast (``InputView.load``): B under raster "m", A under raster "n"."""
        S, bm, bn, bk = self.num_stages, self.block_m, self.block_n, self.block_k
        multicast_a, multicast_b = (None, shared) if self.schedule.raster == "m" else (shared, None)
        it, a_smem, b_smem, full, empty = self.iteration, self.a_smem, self.b_smem, self.full, self.empty
        producer_warp_end = self.consumer_threads + PRODUCER_LANES

        @T.macro
        def _produce(it):
            if T.get_thread_binding() < producer_warp_end:
                for k in T.serial(k_begin, k_end):
                    T.mbarrier_wait_parity(empty[_slot(it, S)], _phase(it, S) ^ 1)
                    tensorA.load(a_smem, _slot(it, S), tile.m0, k * bk, bm, bk, full[_slot(it, S)], tile.batch,
                                 multicast_a)
                    tensorB.load(b_smem, _slot(it, S), tile.n0, k * bk, bn, bk, full[_slot(it, S)], tile.batch,
                                 multicast_b)
                    T.mbarrier_arrive(full[_slot(it, S)])
                    it += 1

        return _produce(it)

    def consume(self, k_begin, k_end):
        """Consumer side of ``reduce_axis``: WGMMA over the K-iterations' ring slots into the
        accumulator, one batch left in flight (call from consumer threads only)."""
        S, em, it = self.num_stages, self.emitter, self.iteration
        a_smem, b_smem, full, acc = self.a_smem, self.b_smem, self.full, self.acc
        a_bytes, b_bytes = self.a_bytes, self.b_bytes

        @T.macro
        def _consume(it):
            descriptors = em.ring_descriptors(a_smem, b_smem)
            for k in T.serial(k_begin, k_end):
                T.mbarrier_wait_parity(full[_slot(it, S)], _phase(it, S))
                em.ss(a_smem, b_smem, acc, clear_accum=k == k_begin, wait=1, descriptors=descriptors,
                      a_stage_offset=_slot(it, S) * a_bytes, b_stage_offset=_slot(it, S) * b_bytes)
                if k > k_begin:
                    self.release(_slot(it + S - 1, S))
                it += 1
            em.wait(0)
            self.release(_slot(it + S - 1, S))

        return _consume(it)

    def reduce_axis(self, tensorA: InputView, tensorB: InputView, tile: Tile, k_begin, k_end):
        """acc = Σ_{k in [k_begin, k_end)} A[tile rows, k-block] · B[k-block, tile cols]."""

        @T.macro
        def _reduce():
            if self.is_producer():
                self.produce(tensorA, tensorB, tile, k_begin, k_end)
            else:
                self.consume(k_begin, k_end)

        return _reduce()


class ScheduleContext:
    """The tile and K-iteration mapping of tlgemm.schedules on the device.

    ``pid`` is the launch id, ``num_programs`` the grid size (a TIR expression); every
    function reproduces its host-reference namesake exactly. ``persistent_sms``: the SM count
    the grid was sized from over the tiles of one GEMM (``kernels.persistent_grid``), where it was
    (None for other grids, e.g. Stream-K's or a batched one); ``one_wave`` needs it.
    """

    def __init__(self, M, N, K, ctx: GemmContext, pid, num_programs, persistent_sms: int | None = None):
        s = ctx.schedule
        self.M, self.N, self.K, self.schedule = M, N, K, s
        self.block_m, self.block_n = s.block_m, s.block_n
        self.tiles_m = T.ceildiv(M, s.block_m)
        self.tiles_n = T.ceildiv(N, s.block_n)
        self.total_tiles = self.tiles_m * self.tiles_n
        self.iters_per_tile = T.max(1, T.ceildiv(K, s.block_k))
        self.num_programs = num_programs
        self.persistent_sms = persistent_sms
        self.pid = pid if s.num_xcds == 1 else chiplet_transform_chunked(pid, num_programs, s.num_xcds, s.chunk_size)

    def persistent_tile_range(self, total=None):
        """(start, stop, step) of this program's whole tiles (stop = ``total``, default all)."""
        return self.pid, self.total_tiles if total is None else total, self.num_programs

    def num_local_tiles(self, total=None):
        """How many tiles range(pid, total, P) holds."""
        start, stop, step = self.persistent_tile_range(total)
        return T.max(0, T.ceildiv(stop - start, step))

    def get_tile_from_idx(self, tile_id) -> Tile:
        """Tile id → Tile with the schedule's grouped raster (schedules.grouped_coords); the
        coordinates are bound to variables once (all operands are non-negative)."""
        s = self.schedule
        div, mod = T.truncdiv, T.truncmod
        major, minor = (self.tiles_m, self.tiles_n) if s.raster == "m" else (self.tiles_n, self.tiles_m)
        tile_id = T.bind(tile_id)
        width = s.group_size_m * minor
        first = div(tile_id, width) * s.group_size_m
        rows = T.min(major - first, s.group_size_m)
        fast = T.bind(first + mod(mod(tile_id, width), rows))
        slow = T.bind(div(mod(tile_id, width), rows))
        pid_m, pid_n = (fast, slow) if s.raster == "m" else (slow, fast)
        return Tile(pid_m, pid_n, s.block_m, s.block_n)

    def _raster_sides(self):
        """(major, minor): the tile counts along the raster's fast axis and the other."""
        return (self.tiles_m, self.tiles_n) if self.schedule.raster == "m" else (self.tiles_n, self.tiles_m)

    def plain_raster(self):
        """Whether the grouped raster reduces to (tile_id mod major, tile_id div major) along its
        fast axis: one group (at most ``group_size_m`` tiles along that axis, e.g. one tile row at
        small M under raster "m"), or one line of tiles across it (e.g. swap-AB at few tokens)."""
        major, minor = self._raster_sides()
        return T.Or(major <= self.schedule.group_size_m, minor == 1)

    def plain_raster_tile(self, tile_id) -> Tile:
        """``get_tile_from_idx`` where ``plain_raster`` holds (every group's first tile is 0 and its
        width the tiles along the fast axis, or one tile across), with one integer division
        instead of the raster's chain of them."""
        major = self._raster_sides()[0]
        fast, slow = T.truncmod(tile_id, major), T.truncdiv(tile_id, major)
        pid_m, pid_n = (fast, slow) if self.schedule.raster == "m" else (slow, fast)
        return Tile(pid_m, pid_n, self.block_m, self.block_n)

    def one_wave(self):
        """Whether every program has exactly one tile, tile ``pid``, under a ``plain_raster``:
        the persistent grid over at most ``persistent_sms`` tiles is the tile count
        (``kernels.persistent_grid``, ``schedules.persistent_programs``). A Python False where the
        grid is not that (``persistent_sms`` unset), so a walk branching on it keeps one form.
        Testing it costs no division, where the general walk
        (``num_local_tiles``, ``get_tile_from_idx``) takes a chain of them: the producer issued its
        first TMA copy about 1.1 us (2250 cycles) after its CTA started at 64x7168x2048, 800 cycles
        of them in this arithmetic; walking one wave without it ran 1.01-1.05x by kernel time on
        the H100 at six small-M rows (benchmarks/results/blockscaled_small_m.md, "The first
        tile's arithmetic")."""
        if self.persistent_sms is None:
            return False
        return T.And(self.total_tiles <= self.persistent_sms, self.plain_raster())

    def get_tile_from_coord(self, pid_m, pid_n) -> Tile:
        return Tile(pid_m, pid_n, self.block_m, self.block_n)

    # ---- 2-CTA clusters (Schedule.cluster_m = 2): programs 2c and 2c + 1 run in lockstep

    def cluster_rounds(self):
        """Rounds of a cluster's persistent loop: the tiles of its rank-0 program (the
        grid is rounded up to an even size; a program id >= num_programs has no tiles)."""
        lead = self.pid - T.truncmod(self.pid, 2)
        return T.ceildiv(self.total_tiles - lead, self.num_programs)

    def cluster_round(self, t):
        """(Tile, shared, stores) of round ``t`` for this program. The cluster's programs
        run tiles first = lead + t·P and first + 1 (lead = its rank-0 program id): the
        persistent mapping of tlgemm.schedules. ``shared``: both tiles lie in one tile
        column (raster "m": B's tile is theirs to share) or one tile row (raster "n": A's).
        A rank-1 program without a tile of its own this round recomputes first and stores
        nothing (``stores`` false), so both run the same K-iterations and each releases
        every slot the other may multicast into."""
        P = self.num_programs
        rank = T.truncmod(self.pid, 2)
        lead = self.pid - rank
        first = T.bind(lead + t * P)
        has_second = T.bind(T.Select((lead + 1 < P) & (first + 1 < self.total_tiles), 1, 0))
        second = first + has_second
        own = self.get_tile_from_idx(T.Select(rank == 0, first, second))
        one, two = self.get_tile_from_idx(first), self.get_tile_from_idx(second)
        shared = one.pid_n == two.pid_n if self.schedule.raster == "m" else one.pid_m == two.pid_m
        return own, shared, (rank == 0) | (has_second == 1)

    # ---- batched GEMMs: ``batch`` GEMMs of one shape dealt out as one of batch · tiles tiles

    def batched_total_tiles(self, batch):
        return batch * self.total_tiles

    def get_batched_tile_from_idx(self, tile_id) -> Tile:
        """Batch-major tile id (b · tiles + the tile's id in GEMM b) → its Tile, ``batch`` set
        (the Triton backend's ``get_batched_tile_from_idx``)."""
        tile_id = T.bind(tile_id)
        tile = self.get_tile_from_idx(T.truncmod(tile_id, self.total_tiles))
        tile.batch = T.bind(T.truncdiv(tile_id, self.total_tiles))
        return tile

    # ---- Stream-K (schedules.decompose) ---------------------------------------------------

    @property
    def streamk_tiles(self):
        return T.min(self.schedule.streamk_tiles, self.total_tiles)

    @property
    def full_tiles(self):
        return self.total_tiles - self.streamk_tiles

    def _streamk_split(self):
        g = self.streamk_tiles * self.iters_per_tile
        return g // self.num_programs, g % self.num_programs

    def iter_range(self, lpid=None):
        """[begin, end) of the global Stream-K iterations of logical program ``lpid``."""
        lpid = self.pid if lpid is None else lpid
        q, r = self._streamk_split()
        base = self.full_tiles * self.iters_per_tile
        return base + lpid * q + T.min(lpid, r), base + (lpid + 1) * q + T.min(lpid + 1, r)

    def split_unit(self):
        """(tile_id, split) of this program under split-K: unit ``pid`` is tile pid // S, split
        pid % S (S = schedule.split_k, one unit a program; tlgemm.schedules' split-K units)."""
        splits = self.schedule.split_k
        return self.pid // splits, self.pid % splits

    def split_k_range(self, split):
        """[begin, end) K-iterations of split ``split`` (tlgemm.schedules.split_k_range: the first
        I % S splits one longer), for K-iterations I >= S = schedule.split_k (the launcher's rule,
        so that no split is empty)."""
        q, r = self.iters_per_tile // self.schedule.split_k, self.iters_per_tile % self.schedule.split_k
        return split * q + T.min(split, r), (split + 1) * q + T.min(split + 1, r)

    def segments(self, begin, end):
        """How many tiles' K ranges the Stream-K iterations [begin, end) touch: the segments a
        program walks (``get_iter`` gives each one's tile and first K-iteration). Walking
        exactly these, with no per-segment ``if``, keeps the fix-up's named barriers out of a
        branch that TileLang's ThreadSync pass refused for some tiles (e.g. 256x16x128) when the
        kernels still compiled with it."""
        iters = self.iters_per_tile
        return T.if_then_else(end > begin, (end - 1) // iters - begin // iters + 1, 0)

    def get_iter(self, global_iter):
        """Global iteration → (tile_id, k_iter)."""
        return global_iter // self.iters_per_tile, global_iter % self.iters_per_tile

    def iter_owner(self, global_iter):
        """Logical program running Stream-K iteration ``global_iter``."""
        q, r = self._streamk_split()
        h = global_iter - self.full_tiles * self.iters_per_tile
        big = r * (q + 1)
        return T.if_then_else(h < big, h // (q + 1), r + (h - big) // T.max(q, 1))


class GroupScaleView:
    """DeepSeek-style block scales in the layouts users hold them, at any strides: A's per
    (token, 128-deep K block) as ``a_scale`` [M, K/128], B's per (128-row block of N, K block)
    as ``b_scale`` [ceil(N/128), K/128], each with a batch index in front in a batched GEMM.
    Each scale is copied on its own (4 bytes), so no layout needs a copy first; one K block's
    scales of consecutive tokens are contiguous when ``a_scale`` is stored outer-dim-major
    (torch._scaled_mm's and DeepGEMM's layout). Indices are clamped so edge tiles read in
    bounds."""

    def __init__(self, a_scale, b_scale, M, N, tma: bool = False):
        self.a_scale, self.b_scale, self.M, self.N = a_scale, b_scale, M, N
        self.k_blocks = a_scale.shape[-1]
        self.tma = tma
        if tma:
            *lead, M_, KB = a_scale.shape
            *lead_strides, _, kb_stride = a_scale.strides
            self.a_scale_t = T.StridedTensor((*lead, KB, M_), (*lead_strides, kb_stride, 1), a_scale.dtype,
                                             data=a_scale.data)

    @staticmethod
    def _copy(smem, stage, i, scales, row, kb, batch):
        """cp.async (4 bytes, PTX ISA 9.7.9.25.3) of scales[(batch,) row, kb] to smem[stage, i],
        addressed through the buffer's strides. Compile with ``tl.disable_safe_memory_legalize``
        (``BLOCKSCALED_PASS_CONFIGS``): TileLang's cp.async bounds guard takes a strided buffer's
        extent as its first dimension's (it would zero-fill an outer-dim-major layout); the
        indices here are clamped in bounds instead."""
        *lead, row_stride, kb_stride = scales.strides
        offset = row * row_stride + kb * kb_stride + (0 if batch is None else batch * lead[0])
        return T.ptx_cp_async(smem.access_ptr("w", offset=stage * smem.shape[1] + i, extent=1),
                              scales.access_ptr("r", offset=offset, extent=1), 1)

    def load_a(self, smem, stage, kb, m0, count: int, barrier, batch=None, rows: int = 1):
        """TMA copy (PTX ISA 9.7.9.25.5.1) of tokens m0 .. m0 + count - 1's scales of K blocks
        kb .. kb + rows - 1 into smem[stage .. stage + rows - 1, :count] (rows > 1: smem's rows
        ``count`` wide, so that the box lands contiguously), their bytes completing ``barrier``;
        tokens past M and K blocks past K read as zero. Needs ``tma``: scale_a outer-dim-major,
        viewed as [K/128, M] (``a_scale_t``), its K-block rows 16-byte aligned."""
        if rows == 1:
            source = (self.a_scale_t[kb, m0:m0 + count] if batch is None
                      else self.a_scale_t[batch, kb, m0:m0 + count])
            return T.tma_copy(source, smem[stage, 0:count], barrier=barrier, leader_scope_threads=32)
        source = (self.a_scale_t[kb:kb + rows, m0:m0 + count] if batch is None
                  else self.a_scale_t[batch, kb:kb + rows, m0:m0 + count])
        return T.tma_copy(source, smem[stage:stage + rows, 0:count], barrier=barrier, leader_scope_threads=32)

    def copy_a(self, smem, stage, i, kb, m0, batch=None):
        """Token m0 + i's scale of K block kb into smem[stage, i] (kb clamped: a 256-deep
        K-iteration's second scale block past K multiplies the TMA's zero fill)."""
        return self._copy(smem, stage, i, self.a_scale, T.min(m0 + i, self.M - 1), T.min(kb, self.k_blocks - 1),
                          batch)

    def copy_b(self, smem, stage, i, kb, first_block, batch=None):
        """Weight-row block first_block + i's scale of K block kb into smem[stage, i] (kb clamped
        as in ``copy_a``)."""
        return self._copy(smem, stage, i, self.b_scale, T.min(first_block + i, (self.N - 1) // SCALE_BLOCK),
                          T.min(kb, self.k_blocks - 1), batch)


def make_group_scale_view(a_scale, b_scale, M, N, tma: bool = False) -> GroupScaleView:
    return GroupScaleView(a_scale, b_scale, M, N, tma)


class BlockScaledContext(GemmContext):
    """GemmContext for the block-scaled FP8 GEMM (DeepGEMM's method): each 128-deep K block
    is multiplied by WGMMA into a temporary accumulator from zero, then promoted on the CUDA
    cores, acc += tmp · scale_row · scale_col.

    The tile's rows and columns each take one of the two scale granularities: per token (the
    activations' per-(row, K block) scales) or per 128-row block of the weights. The
    producer warp stages each K block's scales (``row_scales``, ``col_scales``: one per
    token, and one per 128-block the tile can touch, ``b_scale_width_of``) with cp.async (the
    tokens' by one TMA copy where their layout allows, ``GroupScaleView.load_a``), and the
    ``full`` barrier of the K block's ring slot completes only once those copies have landed
    (``cp.async.mbarrier.arrive.noinc``, PTX ISA 9.7.9.25.3.3): the producer never waits for
    a global load, which would otherwise bound it to one K block per load latency. A
    consumer releases a K block's A and B slot as soon as its wgmma is done, before the
    promotion, so the loads run one K block further ahead (4 to 5 stages was worth 25% at
    4096x7168x16384); the scales therefore live in a ring of more slots (``scale_ring_of``),
    staged ``scale_group_of`` K-iterations at a time.

    Without swap-AB the rows are tokens (A [M, K]) and the columns weight rows (B [N, K]);
    with it (``Schedule.is_swap_ab``, small M) the kernel computes Cᵀ =
    B · Aᵀ: the 64-row WGMMA side runs over N, the tokens are the columns (WGMMA N down to
    16), and the tile is stored transposed into C. With two temporaries
    (``fragments_of``: one consumer warpgroup), K block k + 1's wgmma is issued before K block
    k is promoted, so the tensor cores work during the promotion (``wgmma.wait_group 1``
    retires only the older batch, PTX ISA 9.7.15.5.2); with one (two consumer warpgroups, or
    wide tiles), each K block's wgmma is waited for before its promotion, and the other
    consumer warpgroup's wgmma fills the gap (1.01-1.09x two temporaries at 128x16 to 128x128
    on two warpgroups; making the two take turns to issue, CUTLASS's ping-pong order, measured
    1-5% slower at 128x256 on the H100, benchmarks/results/blockscaled_tiles.md). The
    widest tiles (e.g. 128x256 on two warpgroups) split the temporary along N into
    ``parts``: each K block runs as ``parts`` wgmma batches of block_n / parts columns
    (``part_emitter``, B's rows of that part), each promoted into its columns of the result
    before the next is issued, so the result and one part-wide temporary fit the budget.
    The parts take A from registers (wgmma RS, PTX ISA 9.7.15.5.1), copied once per K block
    from the ring slot, instead of each part reading A's tile from shared memory again (SS):
    1.05x at 4096x7168x16384 on the H100, within 1% on DeepGEMM's other M = 4096 shapes. Four
    quarter-width parts in two temporaries, each promoted while the next runs (the same
    registers), measured 0.90x: the smaller wgmma batches cost more than the waits they hide
    (benchmarks/results/blockscaled_tiles.md). With two whole-tile temporaries a K-iteration
    may hold two scale blocks (block_k 256, ``sub_blocks_of``): its halves take a temporary
    each, as consecutive K blocks do otherwise, with one ``full`` wait and one release per two.
    A tile with more than 64 rows a warpgroup whose temporaries do not fit whole (256x128 on
    two warpgroups) runs in row waves instead (``waves_of``, DeepGEMM's form): each K block
    is one wgmma batch from shared memory per wave of 64 rows a warpgroup, all reading the
    slot's B tile, each waited for and promoted into its rows before the next is issued."""

    #: K-iterations whose scales the producer stages with one set of copies, at most (the first
    #: K-iteration of each group of this many, counted over all of a program's K-iterations, and
    #: the first of each tile, ``produce_blockscaled``; ``scale_group_of``): each copy into the ring
    #: costs the K loop time whatever it reads (the same scale read every time was no faster), so
    #: fewer, larger ones run faster. On the H100 by kernel time, groups of 4 against one copy a K
    #: block: 1.03-1.06x at M = 4096 (K >= 1536); groups of 8 against 4: 1.017x at 4096x7168x16384,
    #: 1.007-1.013x at 4096x4096x7168, 4096x7168x2048 and 4096x2112x7168, level at 128x4096x7168
    #: and at 4096x24576x1536 (256x128 row waves, 0.994-0.997x) (benchmarks/results/blockscaled_tiles.md,
    #: "Fewer scale copies" and "Groups of 8").
    scale_group = 8


    #: A whole-tile temporary of a width that is no power of two is promoted in one branch per
    #: value its tile's offset modulo 128 can take, up to this many (``consume_blockscaled``):
    #: 1.08-1.10x at 128x160 (4 values) and 128x192 (2) on the H100, 0.96-1.01x at 128x176
    #: (8), which keeps its per-group selects (benchmarks/results/blockscaled_tiles.md).
    offset_branches = 4

    def __init__(self, schedule: Schedule, a_dtype: str, b_dtype: str, out_storage: str,
                 tma_token_scales: bool = True):
        self.sub_blocks = self.sub_blocks_of(schedule)
        #: where the tokens' scales arrive by TMA, ``scale_group_of`` K-iterations' scales are staged
        #: per set of copies (``scale_ring_of``); by cp.async, each K-iteration's own (in groups,
        #: ptxas spilled the 128x256 kernel's producer), in a ring of stages + 1 slots
        self.tma_token_scales = tma_token_scales
        self.scale_ring = self.scale_ring_of(schedule) if tma_token_scales else schedule.num_stages + 1
        super().__init__(schedule, a_dtype, b_dtype, "f32", out_storage, store_transposed=schedule.is_swap_ab)
        self.swap_ab = schedule.is_swap_ab
        self.row_width, self.col_width = self.scale_widths_of(schedule)
        self.temporaries, self.parts = self.fragments_of(schedule)
        self.part_n = self.block_n // self.parts
        self.waves = self.waves_of(schedule)
        self.wave_m = self.block_m // self.waves
        self.store_chunk, self.store_buffers = self.store_staging_of(schedule)
        if self.emitter.num_warpgroups == 1:
            self.producer_registers = BLOCKSCALED_PRODUCER_REGISTERS
        self.part_emitter = (self._wave_emitter(a_dtype, b_dtype) if self.waves > 1
                             else self.emitter if self.parts == 1 else self._part_emitter(a_dtype, b_dtype))
        bm, bn = self.block_m, self.block_n
        #: the per-block scale is one value per part: a power-of-two side that no part crosses
        self.folded = ((bm & (bm - 1) == 0 and bm <= SCALE_BLOCK) if self.swap_ab
                       else (bn & (bn - 1) == 0 and self.part_n <= SCALE_BLOCK))

    @classmethod
    def sub_blocks_of(cls, schedule: Schedule) -> int:
        """Scale blocks (128 deep along K) per K-iteration: block_k is 128, or 256 for a tile
        with two whole-tile temporaries, which then hold the K-iteration's two scale blocks
        (each its own wgmma batch from its half of the ring slot). A K-iteration costs about the
        same whatever its depth at small M (a barrier wait, a batch's latency), so two scale
        blocks in one halve that cost (benchmarks/results/blockscaled_small_m.md)."""
        if schedule.block_k == SCALE_BLOCK:
            return 1
        if schedule.block_k == 2 * SCALE_BLOCK and cls.fragments_of(schedule) == (2, 1):
            return 2
        raise ValueError(f"schedule: block_k must be {SCALE_BLOCK} (the scale block along K), or "
                         f"{2 * SCALE_BLOCK} for a tile with two whole-tile temporaries "
                         f"(block_m * block_n / (128 * warpgroups) <= {cls.fragment_registers // 3}), got "
                         f"{schedule.block_k} for {schedule.block_m}x{schedule.block_n} on "
                         f"{schedule.num_warpgroups} warpgroup(s)")

    @classmethod
    def scale_widths_of(cls, schedule: Schedule) -> tuple[int, int]:
        """Scales staged per ring slot for the tile's rows and its columns: one per token on
        the token side (rows, or columns under swap-AB; rounded up to 32, so that each slot
        starts 128-byte aligned for a TMA copy), ``b_scale_width_of`` on the other."""
        if schedule.is_swap_ab:
            return cls.b_scale_width_of(schedule.block_m), -(-schedule.block_n // 32) * 32
        return -(-schedule.block_m // 32) * 32, cls.b_scale_width_of(schedule.block_n)

    @classmethod
    def waves_of(cls, schedule: Schedule) -> int:
        """Row waves of a tile: block_m / (64 · warpgroups) where two whole-tile temporaries and
        the result do not fit in ``fragment_registers`` but the result and one wave's temporary
        do, the warpgroups split the tile along M, block_n is a power of two up to 128 (one
        per-block scale a K block) and not swap-AB: 256x128 on two warpgroups, 128x128 on
        one. Else 1 (the tile is one wave)."""
        wgs, bm, bn = schedule.num_warpgroups, schedule.block_m, schedule.block_n
        per_fragment = bm * bn // (128 * wgs)
        if (schedule.is_swap_ab or bn & (bn - 1) or bn > SCALE_BLOCK or bm % (64 * wgs)
                or 3 * per_fragment <= cls.fragment_registers):
            return 1
        waves = bm // (64 * wgs)
        return waves if waves > 1 and per_fragment + per_fragment // waves <= cls.fragment_registers else 1

    @classmethod
    def fragments_of(cls, schedule: Schedule) -> tuple[int, int]:
        """(temporaries, parts): two whole-tile temporary accumulators per consumer while they
        and the result fit in ``fragment_registers``, else one wave's (``waves_of``), else one
        whole-tile one (block_n up to 192 on 64 rows per warpgroup), else one of block_n / 2
        columns (``parts`` = 2: block_n up to 256 on 64 rows per warpgroup; the warpgroups must
        then split the tile along M, so that a part's columns are the same threads' in the
        temporary and in the result). Two consumer warpgroups with K-iterations one scale block
        deep (block_k 128), not swap-AB, take one whole-tile temporary however narrow the tile:
        each K block is waited for before its promotion while the other warpgroup's wgmma runs,
        and the ring's rounds run unrolled. On the H100 by kernel time (separate processes
        alternated) against two temporaries: 1.04-1.07x at 128x128 (M = 1024..4096, K = 7168
        and 16384), 1.06x at 512x7168x2048, 1.01-1.02x at 128x32768x512 and 100x32768x512, 1.09x
        at 128x64 (256x4096x7168), 1.06x at 128x32 and 1.04x at 128x16 (M = 200, K = 7168)
        (benchmarks/results/blockscaled_tiles.md, "One temporary on two warpgroups")."""
        wgs = schedule.num_warpgroups
        per_fragment = schedule.block_m * schedule.block_n // (128 * wgs)
        if cls.waves_of(schedule) > 1:
            return 1, 1
        serial = wgs > 1 and schedule.block_k == SCALE_BLOCK and not schedule.is_swap_ab
        for temporaries in (1,) if serial else (2, 1):
            if (1 + temporaries) * per_fragment <= cls.fragment_registers:
                return temporaries, 1
        along_m = schedule.block_m % (64 * wgs) == 0
        if along_m and per_fragment * 3 // 2 <= cls.fragment_registers:  # Schedule: block_n a multiple of 16
            return 1, 2
        raise ValueError(f"schedule: a {schedule.block_m}x{schedule.block_n} tile on {wgs} consumer warpgroup(s) "
                         f"needs {per_fragment * 3 // 2} float32 registers per thread for the result and a half-width "
                         f"temporary, more than {cls.fragment_registers} (ptxas would spill and serialise the wgmma); "
                         "block_n at most 256 per 64 rows of a warpgroup, the warpgroups splitting block_m")

    #: float32 registers per consumer thread for the result and its temporaries under a
    #: Stream-K schedule, whose walk keeps more state live: ptxas kept 64x64 tiles (96) in
    #: registers and spilled 64x128 (192) and the split 64x256.
    streamk_fragment_registers = 128

    @classmethod
    def promotes_by_offset(cls, schedule: Schedule) -> bool:
        """Whether ``consume_blockscaled`` promotes in one branch per tile offset into a
        128-column scale block: one whole-tile temporary, not swap-AB, block_n no power of two
        and at most ``offset_branches`` offsets (multiples of gcd(block_n, 128) below 128)."""
        bn = schedule.block_n
        return (not schedule.is_swap_ab and bn & (bn - 1) != 0 and cls.fragments_of(schedule) == (1, 1)
                and SCALE_BLOCK // math.gcd(bn, SCALE_BLOCK) <= cls.offset_branches)

    @classmethod
    def check_streamk(cls, schedule: Schedule) -> None:
        """A Stream-K schedule's rule: one consumer warpgroup (the walk did not lower on two
        with tilelang 0.1.15) and the result and temporaries in ``streamk_fragment_registers``
        (64-row tiles with block_n <= 80, plain or swap-AB)."""
        temporaries, parts = cls.fragments_of(schedule)
        registers = schedule.block_m * schedule.block_n // (128 * schedule.num_warpgroups) * (1 + temporaries / parts)
        if schedule.num_warpgroups != 1 or registers > cls.streamk_fragment_registers:
            raise ValueError(f"schedule: the Stream-K block-scaled kernel runs on one consumer warpgroup with the "
                             f"result and temporaries in at most {cls.streamk_fragment_registers} registers a thread "
                             f"(64-row tiles, block_n <= 80), got {schedule.block_m}x{schedule.block_n} on "
                             f"{schedule.num_warpgroups} warpgroup(s)")

    #: Columns of the epilogue's one staging buffer for row waves on two warpgroups (256x128)
    #: with four or more stages: 16 KB, so that four stages of the ring fit beside the scales
    #: (230,464 bytes; with two 64-column buffers only three do). On the H100 at
    #: 4096x7168x16384 three stages ran 0.89-0.90x four, for these tiles as for 128x256, and
    #: their loads coalesced less in the L2 (sectors delivered per sector read: 1.21-1.45 for
    #: three stages, 1.74 for the waves in raster "n" groups of 16 and 2.16 for 128x256 at four)
    #: (benchmarks/results/blockscaled_tiles.md, "Four stages for the row waves").
    wave_store_chunk = 32

    @classmethod
    def store_staging_of(cls, schedule: Schedule) -> tuple[int, int]:
        """The epilogue's (chunk columns, buffers): ``store_staging``'s, but one buffer for a
        tile split into parts, whose operand ring is wide (at 128x256, two buffers and the
        scales would leave room for only 3 stages of the ring instead of 4), and one buffer of
        ``wave_store_chunk`` columns for row waves on two warpgroups with 4 or more stages."""
        chunk, buffers = store_staging(schedule.block_n)
        if cls.waves_of(schedule) > 1 and schedule.num_warpgroups > 1 and schedule.num_stages >= 4:
            return cls.wave_store_chunk, 1
        return (chunk, 1) if cls.fragments_of(schedule)[1] > 1 else (chunk, buffers)

    def _part_emitter(self, a_dtype: str, b_dtype: str) -> WGMMAEmitter:
        """The emitter of a [block_m, block_n / parts] part of the tile: A's whole tile from
        registers (``a_local``), B's rows of a part a [block_n / parts, block_k] tile of the
        same K-major swizzled layout (one descriptor form, PTX ISA 9.7.15.5.1, "Matrix
        Descriptor Format"), each part starting on a whole 8-row swizzle-atom group
        (``part_offset``)."""
        em = self.emitter
        part = WGMMAEmitter(a_dtype, b_dtype, "f32", block_m=self.block_m, block_n=self.part_n,
                            block_k=self.block_k, warpgroups_m=em.warpgroups_m, warpgroups_n=em.warpgroups_n,
                            a_source="register")
        if not self._same_descriptor_form(em.b_params, part.b_params):
            raise ValueError(f"schedule: a {self.part_n}-column part of B's {self.block_n}-row tile is not a "
                             "sub-tile of the same descriptor form")
        return part

    @staticmethod
    def _same_descriptor_form(whole, sub) -> bool:
        """Whether a sub-tile's descriptor parameters are the whole tile's (swizzle, leading and
        stride byte offsets, major), so that one descriptor moved by a start offset reads it
        (PTX ISA 9.7.15.5.1, "Matrix Descriptor Format")."""
        return all(getattr(whole, f) == getattr(sub, f)
                   for f in ("swizzle", "leading_byte_offset", "stride_byte_offset", "major"))

    def _wave_emitter(self, a_dtype: str, b_dtype: str) -> WGMMAEmitter:
        """The emitter of one row wave, [block_m / waves, block_n]: both operands from shared
        memory, A's rows of a wave a sub-tile of the same K-major swizzled layout starting on
        a whole 8-row group (``wave_offset``; PTX ISA 9.7.15.5.1)."""
        em = self.emitter
        wave = WGMMAEmitter(a_dtype, b_dtype, "f32", block_m=self.wave_m, block_n=self.block_n,
                            block_k=self.block_k, warpgroups_m=em.warpgroups_m, warpgroups_n=em.warpgroups_n)
        if not self._same_descriptor_form(em.a_params, wave.a_params):
            raise ValueError(f"schedule: a {self.wave_m}-row wave of A's {self.block_m}-row tile is not a "
                             "sub-tile of the same descriptor form")
        return wave

    def wave_offset(self, wave: int) -> int:
        """Byte offset of wave ``wave``'s A rows in A's ring slot (K-major rows in groups of 8,
        ``stride_byte_offset`` apart, PTX ISA 9.7.15.5.1)."""
        return self.emitter.a_params.atom_offset(wave * self.wave_m, 0)

    def accum_layout(self):
        """The result's register layout: the waves' accumulators stacked (``accum_layout(waves)``),
        so that each wave's temporary promotes into its rows thread by thread."""
        return self.part_emitter.accum_layout(self.waves) if self.waves > 1 else self.emitter.accum_layout()

    def part_offset(self, part: int) -> int:
        """Byte offset of part ``part``'s B rows in B's ring slot (PTX ISA 9.7.15.5.1:
        K-major rows in groups of 8, ``stride_byte_offset`` apart)."""
        return self.emitter.b_params.atom_offset(part * self.part_n, 0)

    @staticmethod
    def b_scale_width_of(block: int) -> int:
        """Per-128-block scales staged per ring slot for a tile side of ``block``: the most
        128-blocks a tile can touch. Tiles start at multiples of block, so at offsets into a
        128-block that are multiples of g = gcd(block, 128), the largest 128 - g:
        ceil((128 - g + block) / 128) (1 when block divides 128, 2 for 160 or 192, 3 for 176)."""
        return -(-(SCALE_BLOCK - math.gcd(block, SCALE_BLOCK) + block) // SCALE_BLOCK)

    @classmethod
    def scale_group_of(cls, schedule: Schedule) -> int:
        """K-iterations staged per set of scale copies: ``scale_group``, halved until the group's
        weight-block scales take one producer lane each (``sub_blocks_of`` · the weight side's
        staged blocks per K-iteration)."""
        weight_side = cls.scale_widths_of(schedule)[0 if schedule.is_swap_ab else 1]
        group = cls.scale_group
        while group > 1 and group * cls.sub_blocks_of(schedule) * weight_side > PRODUCER_LANES:
            group //= 2
        return group

    #: Widest tile side along N (block_n) whose K-iterations two producer warps issue in turns.
    two_producers_up_to = 32

    @classmethod
    def producer_warps_of(cls, schedule: Schedule) -> int:
        """Producer warps: 2 for tiles at most ``two_producers_up_to`` wide (warp w issues the
        K-iterations it with it mod 2 = w, each its own slots' waits, copies and ``full``
        arrivals), else 1. On such a narrow tile one producer warp's instructions for a slot
        take longer than the consumers' wgmma and promotion of it: under Nsight Compute at
        128x2112x7168 (64x32 tiles) the consumers waited for data in 25-44% of the samples while
        the producer almost never waited for a free slot. Two warps ran 1.00-1.09x on the H100 on
        four small-M rows of 64x32 and 64x16 tiles (1.04-1.09x on three) and 0.98-0.99x on tiles 64
        columns wide and wider
        (benchmarks/results/blockscaled_small_m.md, "Two producer warps")."""
        return 2 if schedule.block_n <= cls.two_producers_up_to else 1

    @classmethod
    def scale_ring_of(cls, schedule: Schedule) -> int:
        """Slots of the staged scales' ring (``sub_blocks_of`` rows each): a multiple of
        ``scale_group_of``, so that a group's slots are contiguous, and at least stages + group + 1,
        so that the producer, writing a group's slots once the consumers have released K-iteration
        it - stages, never writes a slot that a consumer warp may still read: it - stages's (read
        after its release) and, in the two-temporary loop, it - stages - 1's (a warp of the
        warpgroup that released it - stages may still be promoting it)."""
        group = cls.scale_group_of(schedule)
        return -(-(schedule.num_stages + group + 1) // group) * group

    def scale_slot(self, it, half):
        """Row of ``row_scales`` / ``col_scales`` holding scale block ``half`` of K-iteration it
        (``scale_ring_of``)."""
        slot = _slot(it, self.scale_ring)
        return slot if self.sub_blocks == 1 else slot * self.sub_blocks + half

    def allocate(self):
        super().allocate(registers=False)
        S = self.num_stages
        self.tmp = tuple(T.alloc_fragment((self.wave_m, self.part_n), "float32") for _ in range(self.temporaries))
        self.row_scales = T.alloc_shared((self.scale_ring * self.sub_blocks, self.row_width), "float32")
        self.col_scales = T.alloc_shared((self.scale_ring * self.sub_blocks, self.col_width), "float32")
        T.annotate_layout({t: self.part_emitter.accum_layout() for t in self.tmp})
        if self.swap_ab:
            self.token_factors = T.alloc_fragment((self.part_n,), "float32")
            T.annotate_layout({self.token_factors: self.part_emitter.accum_col_layout()})
        else:
            self.token_factors = tuple(T.alloc_fragment((self.wave_m,), "float32")
                                       for _ in range(1 if self.folded else self.col_width))
            T.annotate_layout({f: self.part_emitter.accum_row_layout() for f in self.token_factors})
        self.a_local = None
        if self.parts > 1:
            self.a_local = T.alloc_fragment((self.block_m, self.block_k), self.a_storage)
            T.annotate_layout({self.a_local: self.part_emitter.a_register_layout()})

    def produce_blockscaled(self, tensorA: InputView, tensorB: InputView, scales: GroupScaleView, tile: Tile,
                            k_begin, k_end, shared=None):
        """Producer side: A and B by TMA into the ring, and the scales. Where the tokens' scales
        arrive by TMA (``tma_token_scales``), ``scale_group_of`` K-iterations' scales at once, at the
        first K-iteration of each group (counted over the program's K-iterations, so that a
        group's ring slots are contiguous) and of each tile, until the group or the tile ends:
        the tokens' by one TMA copy of the whole group where their staged rows are as wide as
        the tile side (``GroupScaleView.load_a``), else one per scale block, the weight blocks'
        by cp.async, one lane per scale; else each K-iteration's own by cp.async (lane l copies
        tokens l, l + 32, ... and 128-block l). The copies complete the ``full`` barrier of the
        K-iteration that issues them (each lane's ``cp.async.mbarrier.arrive.noinc`` waits for
        its copies), which every consumer waits for before it reads them, so no lane waits for
        a load. In a cluster the shared operand is multicast as in ``produce``; each CTA copies
        its own scales. With ``producer_warps_of`` = 2 the first two producer warps take the
        K-iterations in turns, the lanes of the warp that owns one doing all of the above for it."""
        S, bm, bn, bk = self.num_stages, self.block_m, self.block_n, self.block_k
        multicast_a, multicast_b = (None, shared) if self.schedule.raster == "m" else (shared, None)
        it, a_smem, b_smem, full, empty = self.iteration, self.a_smem, self.b_smem, self.full, self.empty
        if self.swap_ab:
            tokens, token_smem, token0, token_width = bn, self.col_scales, tile.n0, self.col_width
            blocks, block_smem, block0 = self.row_width, self.row_scales, tile.m0
        else:
            tokens, token_smem, token0, token_width = bm, self.row_scales, tile.m0, self.row_width
            blocks, block_smem, block0 = self.col_width, self.col_scales, tile.n0
        producer, rounds = self.consumer_threads, -(-tokens // PRODUCER_LANES)
        first_block, sub, scale_slot = block0 // SCALE_BLOCK, self.sub_blocks, self.scale_slot
        group = self.scale_group_of(self.schedule)
        per_iteration = sub * blocks  # weight-block scales of one K-iteration, one lane each
        whole_group_tma = token_width == tokens  # a group's token rows are contiguous

        @T.macro
        def stage_scales(it, k, lane):
            count = T.min(group - T.truncmod(it, group), k_end - k)
            if whole_group_tma and count == group:
                scales.load_a(token_smem, scale_slot(it, 0), k * sub, token0, tokens, full[_slot(it, S)],
                              tile.batch, rows=group * sub)
            else:
                for g in T.serial(count):
                    for h in (list(range(sub)) if sub == 1 else T.unroll(sub)):
                        scales.load_a(token_smem, scale_slot(it + g, h), (k + g) * sub + h, token0, tokens,
                                      full[_slot(it, S)], tile.batch)
            if lane < count * per_iteration:
                step = T.truncdiv(lane, per_iteration)  # the lane's K-iteration of the group
                half = T.truncdiv(T.truncmod(lane, per_iteration), blocks)
                scales.copy_b(block_smem, scale_slot(it + step, half), T.truncmod(lane, blocks),
                              (k + step) * sub + half, first_block, tile.batch)

        warps = self.producer_warps_of(self.schedule)

        def owns(it):
            """Whether this producer warp issues K-iteration it (a Python True for one warp)."""
            return True if warps == 1 else T.truncmod(it, warps) == T.truncdiv(T.get_thread_binding() - producer,
                                                                              PRODUCER_LANES)

        @T.macro
        def _produce(it):
            if T.get_thread_binding() < producer + warps * PRODUCER_LANES:
                lane = T.get_thread_binding() - producer if warps == 1 else T.truncmod(
                    T.get_thread_binding() - producer, PRODUCER_LANES)
                for k in T.serial(k_begin, k_end):
                    if owns(it):
                        T.mbarrier_wait_parity(empty[_slot(it, S)], _phase(it, S) ^ 1)
                        tensorA.load(a_smem, _slot(it, S), tile.m0, k * bk, bm, bk, full[_slot(it, S)], tile.batch,
                                     multicast_a)
                        tensorB.load(b_smem, _slot(it, S), tile.n0, k * bk, bn, bk, full[_slot(it, S)], tile.batch,
                                     multicast_b)
                        if self.tma_token_scales:
                            if k == k_begin or T.truncmod(it, group) == 0:
                                stage_scales(it, k, lane)
                        else:
                            for h in (list(range(sub)) if sub == 1 else T.unroll(sub)):
                                for r in T.unroll(rounds):
                                    if tokens % PRODUCER_LANES == 0 or r * PRODUCER_LANES + lane < tokens:
                                        scales.copy_a(token_smem, scale_slot(it, h), r * PRODUCER_LANES + lane,
                                                      k * sub + h, token0, tile.batch)
                                if lane < blocks:
                                    scales.copy_b(block_smem, scale_slot(it, h), lane, k * sub + h, first_block,
                                                  tile.batch)
                        T.cp_async_barrier_noinc(full[_slot(it, S)])
                    it += 1

        return _produce(it)

    def consume_blockscaled(self, tile: Tile, k_begin, k_end, k_extent, unroll_rounds: bool = False):
        """Consumer side: acc = Σ_kb (A[tile rows, kb] · B[kb, tile cols]) · scale_row · scale_col;
        with two temporaries K block k + 1's wgmma is in flight while K block k is promoted
        (``k_end > k_begin``). Position p of a per-block side takes the staged scale
        (offset + p) // 128, offset being the tile's start modulo 128 (p // 128 when the
        side's extent is a power of two: every tile then starts on a 128 boundary or lies
        inside one block).

        Each promotion's scales go from shared memory into registers first (``token_factors``,
        laid out beside the temporary's rows, or its columns under swap-AB:
        ``accum_row_layout`` / ``accum_col_layout``), the per-block scale folded in where it
        is one value for the whole part, else (a width that is no power of two) one vector per
        staged block scale, selected once per 8-column group of a thread's fragment (block
        boundaries fall on multiples of 16 columns), or, for a whole-tile temporary whose tiles
        start at no more than ``offset_branches`` offsets into a block, taken directly in the
        branch of the tile's offset: the promotion is register-only, one FFMA an element where
        folded or branched (1.21-1.44x for 160 to 224 columns over selecting in shared memory
        per element, the branches 1.08-1.10x more at 160 and 192).
        With one temporary they are read while the wgmma still runs, before its
        ``wgmma.wait_group`` (which orders all memory accesses, so nvcc cannot move loads
        above it): 1.02-1.13x at M = 4096 on the H100. With two, after the wait, where the
        next K block's wgmma already covers the loads: reading them before it measured
        2-6% slower at 128x128 (benchmarks/results/blockscaled_tiles.md).

        ``k_extent`` is K. With two scale blocks a K-iteration, the last one's second lies past K
        where K is an odd multiple of 128: zeros (the TMA's fill), left out. That branch also keeps
        the batches asynchronous: with the last K-iteration's two batches unconditional, ptxas
        (CUDA 13.0) serialised every wgmma of the kernel (C7514); with the branch, 1.25x by kernel
        time at 128x4096x7168 on the H100 (benchmarks/results/blockscaled_small_m.md, "The
        consumer's tail at block_k 256").

        ``unroll_rounds`` (where the kernel's token scales arrive by TMA): on 128x256 tiles and on
        two-warpgroup tiles with one whole-tile temporary or in row waves, a tile that starts at
        ring slot 0 and fills whole rounds of the ring runs each round unrolled, so that every
        slot is a constant."""
        S, bm, bn, parts, width = self.num_stages, self.block_m, self.block_n, self.parts, self.part_n
        em, it = self.part_emitter, self.iteration
        a_smem, b_smem, full, acc, tmp = self.a_smem, self.b_smem, self.full, self.acc, self.tmp
        row_scales, col_scales, a_bytes, b_bytes = self.row_scales, self.col_scales, self.a_bytes, self.b_bytes
        factors, swap, folded = self.token_factors, self.swap_ab, self.folded
        rows, waves = self.wave_m, self.waves

        def per_block(smem, slot, p, extent, width, start):
            if extent & (extent - 1) == 0:
                return smem[slot, p // SCALE_BLOCK]
            offset = T.truncmod(start, SCALE_BLOCK)
            scale = smem[slot, 0]  # a select over the few staged values: loads nvcc can hoist
            for w in range(1, width):
                scale = T.if_then_else(offset + p >= w * SCALE_BLOCK, smem[slot, w], scale)
            return scale

        def factor(slot, i, j, part, offset=None):
            """The scale of temporary element (i, j) of ``part``: its token's from registers,
            times the per-block one unless folded in. ``offset``: the tile's first column modulo
            128, a constant in ``promote_by_offset``'s branches, else read from the tile."""
            if swap:
                token = factors[j]
                return token if folded else token * per_block(row_scales, slot, i, bm, self.row_width, tile.m0)
            if folded:
                return factors[0][i]
            # the staged block whose products it takes changes on a multiple of 16 columns (tiles start
            # at multiples of block_n, itself a multiple of 16): one test per 8-column group of a thread,
            # or none where the offset is a constant (each unrolled group then reads its block's vector)
            group = (part * width + j) // 8 * 8
            if offset is None:
                offset = T.truncmod(tile.n0, SCALE_BLOCK)
            value = factors[0][i]
            for w in range(1, self.col_width):
                value = T.if_then_else(offset + group >= w * SCALE_BLOCK, factors[w][i], value)
            return value

        # the values of the tile's first column modulo 128 (multiples of gcd(block_n, 128)) where
        # ``promote_by_offset`` applies
        offsets = list(range(0, SCALE_BLOCK, math.gcd(bn, SCALE_BLOCK)))
        by_offset = self.promotes_by_offset(self.schedule)

        a_local = self.a_local

        def ring(it, slot):
            """K-iteration it's ring slot: ``slot`` where the caller knows it as a constant."""
            return _slot(it, S) if slot is None else slot

        @T.macro
        def fetch_a(it, slot=None):
            """Wait for K-iteration it's slot and copy A's tile into ``a_local`` (wgmma RS)."""
            T.mbarrier_wait_parity(full[ring(it, slot)], _phase(it, S))
            T.copy(a_smem[ring(it, slot), :, :], a_local)

        sub, scale_slot = self.sub_blocks, self.scale_slot
        block_atoms = SCALE_BLOCK // em.shape.inst_k  # wgmma K atoms of one scale block

        @T.macro
        def issue(t, it, descriptors, part: int = 0, half: int = 0, slot=None, wave: int = 0):
            """Part ``part`` (row wave ``wave``) of K-iteration it's wgmma into ``t`` (its scale
            block ``half``: that slice of the slot's K atoms); with A in registers, after
            ``fetch_a(it)``."""
            if a_local is None:
                if part == 0 and half == 0 and wave == 0:
                    T.mbarrier_wait_parity(full[ring(it, slot)], _phase(it, S))
                em.ss(a_smem, b_smem, t, clear_accum=True, wait=None, descriptors=descriptors,
                      a_stage_offset=ring(it, slot) * a_bytes + self.wave_offset(wave),
                      b_stage_offset=ring(it, slot) * b_bytes + self.part_offset(part),
                      k_atoms=range(half * block_atoms, (half + 1) * block_atoms) if sub > 1 else None)
            else:
                em.rs(a_local, b_smem, t, clear_accum=True, wait=None, desc_b=descriptors[1],
                      b_stage_offset=ring(it, slot) * b_bytes + self.part_offset(part))

        @T.macro
        def stage_factors(it, part: int = 0, half: int = 0, wave: int = 0):
            """K-iteration it's token scales of scale block ``half`` (of the rows of ``wave``; times
            the part's block scale where folded) into registers; its ``full`` barrier has been
            waited for by ``issue``."""
            slot = scale_slot(it, half)
            if swap:
                for j in T.Parallel(width):
                    if folded:
                        factors[j] = col_scales[slot, part * width + j] * row_scales[slot, 0]
                    else:
                        factors[j] = col_scales[slot, part * width + j]
            elif folded:
                for i in T.Parallel(rows):
                    factors[0][i] = row_scales[slot, wave * rows + i] * col_scales[slot, part * width // SCALE_BLOCK]
            else:
                for w in list(range(self.col_width)):
                    for i in T.Parallel(rows):
                        factors[w][i] = row_scales[slot, wave * rows + i] * col_scales[slot, w]

        @T.macro
        def retire(it, pending: int, half: int = sub - 1, slot=None):
            em.wait(pending)  # K-iteration it's wgmma batch of scale block ``half`` is done
            if half == sub - 1:  # its last, the last reader of its A and B tiles
                self.release(ring(it, slot))

        @T.macro
        def promote_at(t, it, part: int, offset, half: int = 0, wave: int = 0):
            for i, j in T.Parallel(rows, width):
                acc[wave * rows + i, part * width + j] = (acc[wave * rows + i, part * width + j]
                                                          + t[i, j] * factor(scale_slot(it, half), i, j, part, offset))

        @T.macro
        def promote_by_offset(t, it, part: int = 0, half: int = 0, wave: int = 0):
            """acc += t · its scales in the branch of the tile's offset, where each element's
            staged block is a constant: an FFMA an element, no FSEL and predicate move."""
            for offset in offsets:
                if T.truncmod(tile.n0, SCALE_BLOCK) == offset:
                    promote_at(t, it, part, offset, half, wave)

        @T.macro
        def promote_in_place(t, it, part: int = 0, half: int = 0, wave: int = 0):
            promote_at(t, it, part, None, half, wave)

        promote = promote_by_offset if by_offset else promote_in_place

        # the overlapped loop's positions after K-iteration it's first scale block, as (K-iteration
        # offset, scale block): the next block and the one after (one per K-iteration: it + 1, it + 2)
        (d1, h1), (d2, h2) = divmod(1, sub), divmod(2, sub)

        @T.macro
        def step(t, it, pending: int, half: int):
            retire(it, pending, half)
            stage_factors(it, 0, half)
            promote(t, it, 0, half)

        @T.macro
        def _consume_overlapped(it):
            descriptors = em.ring_descriptors(a_smem if a_local is None else None, b_smem)
            blocks = (k_end - k_begin) * sub
            T.clear(acc)
            issue(tmp[0], it, descriptors, 0, 0)
            for _ in T.serial(T.truncdiv(blocks - 1, 2)):
                issue(tmp[1], it + d1, descriptors, 0, h1)
                step(tmp[0], it, 1, 0)
                issue(tmp[0], it + d2, descriptors, 0, h2)
                step(tmp[1], it + d1, 1, h1)
                it += d2
            if sub == 1:
                if T.truncmod(blocks - 1, 2) == 1:
                    issue(tmp[1], it + d1, descriptors, 0, h1)
                    step(tmp[0], it, 1, 0)
                    step(tmp[1], it + d1, 0, h1)
                    it += d2
                else:
                    step(tmp[0], it, 0, 0)
                    it += 1
            elif (k_end - 1) * self.block_k + SCALE_BLOCK < k_extent:  # the last K-iteration's two
                issue(tmp[1], it + d1, descriptors, 0, h1)
                step(tmp[0], it, 1, 0)
                step(tmp[1], it + d1, 0, h1)
                it += d2
            else:  # its second scale block lies past K (an odd multiple of 128): zeros, left out
                step(tmp[0], it, 0, 0)
                self.release(_slot(it, S))
                it += d2

        # a K block's wgmma batches under one temporary, as (part, wave): its parts along N, or
        # its row waves
        pieces = [(part, 0) for part in range(parts)] if waves == 1 else [(0, wave) for wave in range(waves)]

        @T.macro
        def serial_block(it, descriptors, fetch_next: bool = False, slot=None):
            """One K block, its parts (or waves) each issued, waited for and promoted in turn. With A in
            registers and ``fetch_next``, the next K block's A is copied in as soon as the last
            part's wgmma has freed the registers, before that part's promotion: the loads'
            latency is then covered by the promotion's FFMAs instead of delaying the next
            issue (1.02-1.04x at M = 4096 on the H100, benchmarks/results/blockscaled_tiles.md)."""
            for n, (part, wave) in enumerate(pieces):
                issue(tmp[0], it, descriptors, part, 0, slot, wave)
                stage_factors(it, part, 0, wave)
                if n == len(pieces) - 1:
                    retire(it, 0, sub - 1, slot)
                    if fetch_next:
                        fetch_a(it + 1, None if slot is None else (slot + 1) % S)
                else:
                    em.wait(0)
                promote(tmp[0], it, part, 0, wave)

        @T.macro
        def last_block(it, descriptors, slot=None):
            """The last K block, peeled off (no A to copy after it): it gives its slot back after
            its promotions; given back before them, outside the loop, tilelang 0.1.15's
            ThreadSync asked for a shared-memory barrier that it could not lower on one consumer
            warpgroup, when the kernels still compiled with that pass."""
            for part in list(range(parts)):
                issue(tmp[0], it, descriptors, part, 0, slot)
                stage_factors(it, part)
                em.wait(0)
                promote(tmp[0], it, part)
            self.release(ring(it, slot))

        # ``unroll_rounds``, A in registers, two consumer warpgroups, one folded scale a part (128x256):
        # unrolled, ptxas spilled at 64x256 on one warpgroup (320 bytes), at 128x224 and 128x240 (12 and
        # 80) and, with the token scales copied by cp.async instead of TMA, at 128x256 (296)
        rounds_unrolled = unroll_rounds and a_local is not None and em.num_warpgroups == 2 and folded
        # ``unroll_rounds``, one whole-tile temporary or row waves on two consumer warpgroups, not
        # swap-AB: unrolled, 1.02-1.07x at 128x160 to 128x192 on the H100, no spills
        # (blockscaled_tiles.md)
        whole_rounds = unroll_rounds and a_local is None and em.num_warpgroups == 2 and not swap

        @T.macro
        def _consume_serial(it):
            descriptors = em.ring_descriptors(a_smem if a_local is None else None, b_smem)
            T.clear(acc)
            if whole_rounds and T.truncmod(it, S) + T.truncmod(k_end - k_begin, S) == 0:
                for r in T.serial(T.truncdiv(k_end - k_begin, S)):
                    for s in list(range(S)):
                        serial_block(it + r * S + s, descriptors, False, s)
                it += k_end - k_begin
            elif a_local is None:
                for _ in T.serial(k_end - k_begin):
                    serial_block(it, descriptors)
                    it += 1
            elif rounds_unrolled and T.truncmod(it, S) + T.truncmod(k_end - k_begin, S) == 0:
                # the tile starts at ring slot 0 and fills whole rounds of the ring: each round
                # unrolled, so that every slot is a constant (addresses, descriptors, barriers):
                # a K block's vector integer instructions 42 -> 5 a warp, 1.023-1.034x at M = 4096
                # on the H100 (benchmarks/results/blockscaled_tiles.md)
                rounds = T.truncdiv(k_end - k_begin, S)
                fetch_a(it, 0)
                for r in T.serial(rounds - 1):
                    for s in list(range(S)):
                        serial_block(it + r * S + s, descriptors, True, s)
                for s in list(range(S - 1)):
                    serial_block(it + (rounds - 1) * S + s, descriptors, True, s)
                last_block(it + rounds * S - 1, descriptors, S - 1)
                it += k_end - k_begin
            else:
                fetch_a(it)
                for _ in T.serial(k_end - k_begin - 1):
                    serial_block(it, descriptors, True)
                    it += 1
                # the last K block (``last_block``, written out here: called as that macro after
                # this loop, the 64x256 kernel did not lower in tilelang 0.1.15, ThreadSync)
                for part in list(range(parts)):
                    issue(tmp[0], it, descriptors, part)
                    stage_factors(it, part)
                    em.wait(0)
                    promote(tmp[0], it, part)
                self.release(_slot(it, S))
                it += 1

        return _consume_overlapped(it) if self.temporaries == 2 else _consume_serial(it)
