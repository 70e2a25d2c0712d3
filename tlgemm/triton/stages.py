"""Device-side GEMM stages for Triton (the tritonBLAS stages API, written for tlgemm).

Describe the matrices, build the context and the schedule, loop over tiles, reduce, store::

    tensorA = make_tensor_view(A, M, K, stride_am, stride_ak)
    tensorB = make_tensor_view(B, K, N, stride_bk, stride_bn)
    tensorC = make_output_view(C, M, N, stride_cm, stride_cn)
    ctx = GemmContext(BLOCK_M, BLOCK_N, BLOCK_K, NUM_SMS, even_k=EVEN_K)
    sched = ScheduleContext(M, N, K, ctx)
    start, total, stride = sched.persistent_tile_range()
    for tile_id in range(start, total, stride):
        out_tile = sched.get_tile_from_idx(tile_id)
        acc = ctx.reduce_axis(tensorA, tensorB, out_tile)
        tensorC.store(acc, out_tile, scale=scale_view, bias=bias_view)

A block-scaled FP8 GEMM builds a ``GroupScaleView`` and reduces with
``ctx.reduce_axis_blockscaled(tensorA, tensorB, out_tile, scales)``; a batched GEMM loops over
``sched.batched_tile_range(batch)`` and offsets its views by the batch index.

Everything here runs inside ``@triton.jit`` code. The tile order, program remapping and
Stream-K split reproduce ``tlgemm.schedules`` exactly (``tile_coords``, ``logical_program``,
``streamk_iter_range``, ``work``), with P = ``num_sms`` = the launch grid size.

Choices where the reference text is ambiguous:

* Bias has length N and is broadcast over rows (one value per output column), torch.addmm's
  convention and ``tlgemm.testing.reference_gemm``'s. (The reference calls it length M in
  ``BiasView`` and the kernel example, length N in ``make_bias_view``.)
* A per-tensor scale is a one-element vector read with stride 0; per-row A / per-column B
  scales use stride 1 (or any stride).
* Stream-K fix-up: every contributor to a split tile publishes its partial sum; the last to
  arrive (an atomic count of K-iterations) adds all partials in ascending program order
  and stores the tile. No program waits for another, so the kernel needs no co-residency
  and runs in the interpreter, which runs programs one after another in launch order (a
  program waiting for a later one, as in the owner-waits protocol that tlgemm.schedules
  describes with ``fixup_owner``, would hang there); the fixed order makes results
  bit-reproducible. Which program does which (tile, K-range) is exactly ``work()``.
"""

import triton
import triton.language as tl

from .shim import aggregate

__all__ = [
    "Tile",
    "GemmContext",
    "ScheduleContext",
    "InputView",
    "OutputView",
    "ScaleView",
    "BiasView",
    "GroupScaleView",
    "StreamKWorkspace",
    "make_input_view",
    "make_tensor_view",
    "make_output_view",
    "make_scale_view",
    "make_bias_view",
    "make_group_scale_view",
    "make_streamk_workspace",
    "chiplet_transform",
    "chiplet_transform_chunked",
]


# ---- tiles ---------------------------------------------------------------------------------


@aggregate
class Tile:
    """A block_m × block_n tile at tile coordinates (pid_m, pid_n) of some matrix."""

    pid_m: tl.tensor
    pid_n: tl.tensor
    block_m: tl.constexpr
    block_n: tl.constexpr

    @triton.constexpr_function
    def __init__(self, pid_m, pid_n, block_m, block_n):
        self.pid_m = pid_m
        self.pid_n = pid_n
        self.block_m = tl.constexpr(block_m)
        self.block_n = tl.constexpr(block_n)

    @triton.jit
    def indices(self):
        """Row indices [block_m] and column indices [block_n] of the tile."""
        rm = self.pid_m * self.block_m + tl.arange(0, self.block_m)
        rn = self.pid_n * self.block_n + tl.arange(0, self.block_n)
        return rm, rn

    @triton.jit
    def layout(self, M, N):
        """(rm % M, rn % N, mask): the bounds mask is taken from the raw indices, then the
        indices are wrapped so every address is inside the matrix (unmasked loads stay legal;
        wrapped rows/columns are never stored)."""
        rm, rn = self.indices()
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        return rm % M, rn % N, mask

    @triton.jit
    def scale(self, acc, A_scale_ptr, B_scale_ptr, M, N, stride_a=1, stride_b=1):
        """acc · a_scale[row] · b_scale[col] in float32 (stride 0 = one per-tensor scale)."""
        rm, rn = self.indices()
        a_scale = tl.load(A_scale_ptr + rm * stride_a, mask=rm < M, other=0.0)
        b_scale = tl.load(B_scale_ptr + rn * stride_b, mask=rn < N, other=0.0)
        return acc.to(tl.float32) * a_scale[:, None].to(tl.float32) * b_scale[None, :].to(tl.float32)

    @triton.jit
    def bias(self, acc, bias_ptr, N, stride_bias=1):
        """acc + bias[col] in float32: bias has length N, broadcast over rows."""
        _, rn = self.indices()
        bias = tl.load(bias_ptr + rn * stride_bias, mask=rn < N, other=0.0)
        return acc.to(tl.float32) + bias[None, :].to(tl.float32)


# ---- matrix views --------------------------------------------------------------------------


@triton.jit
def _tile_ptrs(view, tile):
    """Pointers base + i·stride_row + j·stride_col of ``tile`` in ``view`` (any layout)."""
    rm, rn, mask = tile.layout(view.rows, view.cols)
    ptrs = view.ptr + rm[:, None] * view.stride_row + rn[None, :] * view.stride_col
    return ptrs, mask


@triton.jit
def _load_tile(view, tile, boundary: tl.constexpr, cache_modifier: tl.constexpr):
    """Load ``tile``; only a boundary tile is masked (zeros outside the matrix)."""
    ptrs, mask = _tile_ptrs(view, tile)
    if boundary:
        return tl.load(ptrs, mask=mask, other=0.0, cache_modifier=cache_modifier)
    else:
        return tl.load(ptrs, cache_modifier=cache_modifier)


@aggregate
class InputView:
    """A rows × cols operand in memory: base pointer, extents and both strides."""

    ptr: tl.tensor
    rows: tl.tensor
    cols: tl.tensor
    stride_row: tl.tensor
    stride_col: tl.tensor

    @triton.constexpr_function
    def __init__(self, ptr, rows, cols, stride_row, stride_col):
        self.ptr = ptr
        self.rows = rows
        self.cols = cols
        self.stride_row = stride_row
        self.stride_col = stride_col

    @triton.jit
    def tile_ptrs(self, tile):
        """(ptrs [block_m, block_n], in-bounds mask) of ``tile``."""
        return _tile_ptrs(self, tile)

    @triton.jit
    def load(self, tile, boundary: tl.constexpr = False, cache_modifier: tl.constexpr = ".cg"):
        """The tile's values; pass boundary=True where it may cross the matrix edge."""
        return _load_tile(self, tile, boundary, cache_modifier)


@aggregate
class ScaleView:
    """Per-row scales of A (length M) and per-column scales of B (length N)."""

    a_scale_ptr: tl.tensor
    b_scale_ptr: tl.tensor
    M: tl.tensor
    N: tl.tensor
    stride_a: tl.tensor
    stride_b: tl.tensor

    @triton.constexpr_function
    def __init__(self, a_scale_ptr, b_scale_ptr, M, N, stride_a, stride_b):
        self.a_scale_ptr = a_scale_ptr
        self.b_scale_ptr = b_scale_ptr
        self.M = M
        self.N = N
        self.stride_a = stride_a
        self.stride_b = stride_b

    @triton.jit
    def apply(self, acc, tile):
        """acc · a_scale[row] · b_scale[col] over ``tile``, in float32."""
        return tile.scale(acc, self.a_scale_ptr, self.b_scale_ptr, self.M, self.N, self.stride_a, self.stride_b)


@aggregate
class BiasView:
    """A bias vector of length N, added to every output row."""

    ptr: tl.tensor
    N: tl.tensor
    stride: tl.tensor

    @triton.constexpr_function
    def __init__(self, ptr, N, stride):
        self.ptr = ptr
        self.N = N
        self.stride = stride

    @triton.jit
    def apply(self, acc, tile):
        """acc + bias[col] over ``tile``, in float32."""
        return tile.bias(acc, self.ptr, self.N, self.stride)


@aggregate
class GroupScaleView:
    """Block scales of a block-scaled GEMM (DeepSeek-V3 / DeepGEMM layout): A has one scale per
    row and K-group, a_scale[m, k // group_k]; B has one per group_n columns and K-group,
    b_scale[n // group_n, k // group_k]. The K-group is the GEMM's block_k, so one K-step
    reads one scale column of each (``load``, issued before the step's dot so that the load
    latency overlaps it) and adds its product to the result (``promote``)."""

    a_scale_ptr: tl.tensor
    b_scale_ptr: tl.tensor
    M: tl.tensor
    N: tl.tensor
    stride_am: tl.tensor
    stride_ak: tl.tensor
    stride_bn: tl.tensor
    stride_bk: tl.tensor
    group_n: tl.constexpr

    @triton.constexpr_function
    def __init__(self, a_scale_ptr, b_scale_ptr, M, N, stride_am, stride_ak, stride_bn, stride_bk, group_n):
        self.a_scale_ptr = a_scale_ptr
        self.b_scale_ptr = b_scale_ptr
        self.M = M
        self.N = N
        self.stride_am = stride_am
        self.stride_ak = stride_ak
        self.stride_bn = stride_bn
        self.stride_bk = stride_bk
        self.group_n = tl.constexpr(group_n)

    @triton.jit
    def tile_ptrs(self, tile):
        """(a pointers [block_m], b pointer(s)) of ``tile``'s scales in K-group 0, at the wrapped
        rows of ``tile.layout`` (always in bounds). A power-of-two block_n <= group_n keeps the
        tile inside one column group, so B's is one pointer (one scalar scale per K-group,
        ``promote``) instead of block_n 64-bit pointers a thread holds across the K loop (which
        spilled at 128x128 on 8 warps, ptxas for sm_90a); wider tiles get one per column."""
        rm, rn, _ = tile.layout(self.M, self.N)
        a_ptrs = self.a_scale_ptr + rm * self.stride_am
        if tile.block_n <= self.group_n:
            b_ptrs = self.b_scale_ptr + (tile.pid_n * tile.block_n // self.group_n) * self.stride_bn
        else:
            b_ptrs = self.b_scale_ptr + (rn // self.group_n) * self.stride_bn
        return a_ptrs, b_ptrs

    @triton.jit
    def load(self, a_ptrs, b_ptrs, k_idx):
        """(a_scale[:, k_idx], b_scale[:, k_idx]) in float32, for ``promote``."""
        return (tl.load(a_ptrs + k_idx * self.stride_ak).to(tl.float32),
                tl.load(b_ptrs + k_idx * self.stride_bk).to(tl.float32))

    @triton.jit
    def promote(self, acc, partial, a_scale, b_scale):
        """acc + partial · a_scale (rows) · b_scale (columns, or one for the whole tile), in
        float32: the promotion of one K-group's partial product into the result."""
        if b_scale.numel == 1:
            return acc + partial * (a_scale * b_scale)[:, None]
        return acc + partial * a_scale[:, None] * b_scale[None, :]


@aggregate
class OutputView:
    """The rows × cols result in memory; ``store`` runs the epilogue."""

    ptr: tl.tensor
    rows: tl.tensor
    cols: tl.tensor
    stride_row: tl.tensor
    stride_col: tl.tensor

    @triton.constexpr_function
    def __init__(self, ptr, rows, cols, stride_row, stride_col):
        self.ptr = ptr
        self.rows = rows
        self.cols = cols
        self.stride_row = stride_row
        self.stride_col = stride_col

    @triton.jit
    def tile_ptrs(self, tile):
        """(ptrs [block_m, block_n], in-bounds mask) of ``tile``."""
        return _tile_ptrs(self, tile)

    @triton.jit
    def load(self, tile, boundary: tl.constexpr = False, cache_modifier: tl.constexpr = ""):
        """The tile's current values (read-modify-write epilogues)."""
        return _load_tile(self, tile, boundary, cache_modifier)

    @triton.jit
    def store(self, data, tile, mask=None, scale=None, bias=None):
        """Epilogue scale → bias → convert to the output dtype → masked store.
        ``mask`` (optional) further restricts the in-bounds mask."""
        ptrs, in_bounds = _tile_ptrs(self, tile)
        if mask is not None:
            in_bounds = in_bounds & mask
        if scale is not None:
            data = scale.apply(data, tile)
        if bias is not None:
            data = bias.apply(data, tile)
        tl.store(ptrs, data.to(self.ptr.dtype.element_ty), mask=in_bounds)


@triton.jit
def make_input_view(ptr, rows, cols, stride_row, stride_col):
    """InputView of a rows × cols matrix. A stride the compiler specialised to the constant 1
    stays a constexpr (see shim), so the contiguous axis is visible to vectorisation."""
    return InputView(ptr, rows, cols, stride_row, stride_col)


@triton.jit
def aligned(value, divisor: tl.constexpr):
    """``value`` (a size or stride the launcher found divisible by ``divisor``, a power of two;
    1: no claim) rewritten as (value // divisor) · divisor, which Triton's alignment analysis
    knows to be a multiple of ``divisor``. Triton specialises an int argument only on
    divisibility by 16 (and ignores ``tl.multiple_of`` on an argument), so without it a size or
    row stride of, e.g., 1000 counts as unaligned: the wrapped tile indices (``Tile.layout``:
    rk % K) lose their contiguity and the K loop's loads, no longer vectorisable, run outside
    its cp.async pipeline."""
    if divisor > 1:
        return (value // divisor) * divisor
    else:
        return value


@triton.jit
def make_tensor_view(ptr, rows, cols, stride_row, stride_col):
    """Alias of ``make_input_view``."""
    return InputView(ptr, rows, cols, stride_row, stride_col)


@triton.jit
def make_output_view(ptr, rows, cols, stride_row, stride_col):
    """OutputView of the rows × cols result."""
    return OutputView(ptr, rows, cols, stride_row, stride_col)


@triton.jit
def make_scale_view(a_scale_ptr, b_scale_ptr, M, N, stride_a=1, stride_b=1):
    """ScaleView: a_scale per row of A (length M), b_scale per column of B (length N);
    stride 0 broadcasts one per-tensor value."""
    return ScaleView(a_scale_ptr, b_scale_ptr, M, N, stride_a, stride_b)


@triton.jit
def make_bias_view(bias_ptr, N, stride=1):
    """BiasView of a length-N bias, broadcast over the output rows."""
    return BiasView(bias_ptr, N, stride)


@triton.jit
def make_group_scale_view(a_scale_ptr, b_scale_ptr, M, N, stride_am, stride_ak, stride_bn, stride_bk,
                          group_n: tl.constexpr = 128):
    """GroupScaleView of a_scale [M, K / block_k] and b_scale [⌈N / group_n⌉, K / block_k]
    (any strides)."""
    return GroupScaleView(a_scale_ptr, b_scale_ptr, M, N, stride_am, stride_ak, stride_bn, stride_bk, group_n)


# ---- the K reduction -----------------------------------------------------------------------


@aggregate
class GemmContext:
    """Compile-time GEMM parameters and the K reduction.

    For A [M, K] and B [K, N], K-step k reads A tile (pid_m, k) of block_m × block_k and B
    tile (k, pid_n) of block_k × block_n. ``num_sms`` is the persistent grid size P (the loop
    stride and the chiplet transform's workgroup count). Beyond the reference API:
    ``raster`` ("m" or "n", tlgemm.schedules' tile order) and ``reduce_range`` (a K range,
    for Stream-K segments; ``reduce_axis`` is its whole-axis case).
    """

    block_m: tl.constexpr
    block_n: tl.constexpr
    block_k: tl.constexpr
    num_sms: tl.constexpr
    num_xcds: tl.constexpr
    group_size_m: tl.constexpr
    chunk_size: tl.constexpr
    cache_modifier_a: tl.constexpr
    cache_modifier_b: tl.constexpr
    acc_dtype: tl.constexpr
    allow_tf32: tl.constexpr
    even_k: tl.constexpr
    quantized: tl.constexpr
    raster: tl.constexpr

    @triton.constexpr_function
    def __init__(self, block_m, block_n, block_k, num_sms, num_xcds=1, group_size_m=8, chunk_size=1,
                 cache_modifier_a=".cg", cache_modifier_b=".cg", acc_dtype=tl.float32, allow_tf32=True,
                 even_k=True, quantized=False, raster="m"):
        self.block_m = tl.constexpr(block_m)
        self.block_n = tl.constexpr(block_n)
        self.block_k = tl.constexpr(block_k)
        self.num_sms = tl.constexpr(num_sms)
        self.num_xcds = tl.constexpr(num_xcds)
        self.group_size_m = tl.constexpr(group_size_m)
        self.chunk_size = tl.constexpr(chunk_size)
        self.cache_modifier_a = tl.constexpr(cache_modifier_a)
        self.cache_modifier_b = tl.constexpr(cache_modifier_b)
        self.acc_dtype = tl.constexpr(acc_dtype)
        self.allow_tf32 = tl.constexpr(allow_tf32)
        self.even_k = tl.constexpr(even_k)
        self.quantized = tl.constexpr(quantized)
        self.raster = tl.constexpr(raster)

    @triton.jit
    def init_accumulator(self):
        """Zeros [block_m, block_n]: int32 when quantized (int8 inputs), else acc_dtype."""
        if self.quantized:
            return tl.zeros((self.block_m, self.block_n), dtype=tl.int32)
        else:
            return tl.zeros((self.block_m, self.block_n), dtype=self.acc_dtype)

    @triton.jit
    def _mma(self, a, b, acc):
        """acc + a · b: int32 accumulation when quantized, TF32 for fp32 only if allowed."""
        if self.quantized:
            return tl.dot(a, b, acc, out_dtype=tl.int32)
        else:
            return tl.dot(a, b, acc, allow_tf32=self.allow_tf32)

    @triton.jit
    def reduce_tile(self, A, B, out_tile, k_idx, acc, boundary: tl.constexpr = False):
        """acc + A(pid_m, k_idx) · B(k_idx, pid_n): one block_k step."""
        a = A.load(Tile(out_tile.pid_m, k_idx, self.block_m, self.block_k), boundary, self.cache_modifier_a)
        b = B.load(Tile(k_idx, out_tile.pid_n, self.block_k, self.block_n), boundary, self.cache_modifier_b)
        return self._mma(a, b, acc)

    @triton.jit
    def reduce_range(self, A, B, out_tile, k_begin, k_end):
        """Sum of the K-steps [k_begin, k_end) of ``out_tile`` from a zero accumulator.

        The operand pointers of step k_begin come from ``tile_ptrs`` once per call and then
        advance by block_k along K. Hoisting the wrapped indices out of the K loop keeps them
        out of the loop body when Triton fuses this loop with a persistent tile loop
        (FuseNestedLoops runs before loop-invariant code motion). Unless even_k, every step's
        loads are masked along K (k < K), so that the partial last step stays inside the
        loop's software pipeline: taken after the loop as a separate masked step, it loaded
        synchronously and ran the kernel 4-5x slower (benchmarks/results/triton_persistent.md).
        """
        acc = self.init_accumulator()
        a_ptrs, _ = A.tile_ptrs(Tile(out_tile.pid_m, k_begin, self.block_m, self.block_k))
        b_ptrs, _ = B.tile_ptrs(Tile(k_begin, out_tile.pid_n, self.block_k, self.block_n))
        rk = tl.arange(0, self.block_k)
        for k in range(k_begin, k_end):
            if self.even_k:
                a = tl.load(a_ptrs, cache_modifier=self.cache_modifier_a)
                b = tl.load(b_ptrs, cache_modifier=self.cache_modifier_b)
            else:
                left = A.cols - k * self.block_k
                a = tl.load(a_ptrs, mask=rk[None, :] < left, other=0.0, cache_modifier=self.cache_modifier_a)
                b = tl.load(b_ptrs, mask=rk[:, None] < left, other=0.0, cache_modifier=self.cache_modifier_b)
            acc = self._mma(a, b, acc)
            a_ptrs += self.block_k * A.stride_col
            b_ptrs += self.block_k * B.stride_row
        return acc

    @triton.jit
    def reduce_axis(self, A, B, out_tile):
        """The whole K loop of ``out_tile``."""
        return self.reduce_range(A, B, out_tile, 0, tl.cdiv(A.cols, self.block_k))

    @triton.jit
    def reduce_axis_blockscaled(self, A, B, out_tile, scales):
        """The whole K loop of ``out_tile`` with per-K-block promotion (DeepGEMM's method):
        each block_k step's product starts from zero in float32 and is added to the result
        times its scales, ``scales.promote`` (a GroupScaleView whose K-group is block_k).
        K must be a multiple of block_k (even_k): every step is whole."""
        tl.static_assert(self.even_k, "reduce_axis_blockscaled needs K % block_k == 0 (even_k)")
        acc = tl.zeros((self.block_m, self.block_n), dtype=tl.float32)
        a_ptrs, _ = A.tile_ptrs(Tile(out_tile.pid_m, 0, self.block_m, self.block_k))
        b_ptrs, _ = B.tile_ptrs(Tile(0, out_tile.pid_n, self.block_k, self.block_n))
        sa_ptrs, sb_ptrs = scales.tile_ptrs(out_tile)
        for k in range(0, A.cols // self.block_k):
            a = tl.load(a_ptrs, cache_modifier=self.cache_modifier_a)
            b = tl.load(b_ptrs, cache_modifier=self.cache_modifier_b)
            a_scale, b_scale = scales.load(sa_ptrs, sb_ptrs, k)
            acc = scales.promote(acc, tl.dot(a, b, out_dtype=tl.float32), a_scale, b_scale)
            a_ptrs += self.block_k * A.stride_col
            b_ptrs += self.block_k * B.stride_row
        return acc


# ---- schedules -----------------------------------------------------------------------------


@triton.jit
def chiplet_transform(pid, num_workgroups, num_xcds):
    """XCD-contiguous remapping (tlgemm.schedules.chiplet_transform): pid runs on XCD
    pid % X; new id = xcd · (W // X) + min(xcd, W % X) + pid // X."""
    xcd = pid % num_xcds
    return xcd * (num_workgroups // num_xcds) + tl.minimum(xcd, num_workgroups % num_xcds) + pid // num_xcds


@triton.jit
def chiplet_transform_chunked(pid, num_workgroups, num_xcds, chunk_size):
    """Chunked XCD remapping (tlgemm.schedules.chiplet_transform_chunked): whole rounds of
    X · C ids give each XCD runs of C consecutive ids; the tail keeps its ids."""
    round_size = num_xcds * chunk_size
    local = pid // num_xcds
    new = (local // chunk_size) * round_size + (pid % num_xcds) * chunk_size + local % chunk_size
    return tl.where(pid >= (num_workgroups // round_size) * round_size, pid, new)


@triton.jit
def _grouped_coords(tile_id, tiles_m, tiles_n, group_size: tl.constexpr, raster: tl.constexpr):
    """Tile id → (pid_m, pid_n) with the GROUP_SIZE_M swizzle (tlgemm.schedules.grouped_coords)."""
    if raster == "m":
        major = tiles_m
        minor = tiles_n
    else:
        major = tiles_n
        minor = tiles_m
    width = group_size * minor
    first = (tile_id // width) * group_size
    rows = tl.minimum(major - first, group_size)
    fast = first + (tile_id % width) % rows
    slow = (tile_id % width) // rows
    if raster == "m":
        return fast, slow
    else:
        return slow, fast


@aggregate
class ScheduleContext:
    """Which tiles and K-iterations this program runs (tlgemm.schedules.work).

    Tile loop: ``for tile_id in range(*persistent_tile_range())`` over the whole tiles.
    Stream-K: the last min(streamk_tiles, tiles) tiles' iterations are dealt out in
    contiguous ranges, ``iter_range()``, one per program; ``get_iter`` decodes one. Beyond
    the reference API: ``program_id``, ``num_tiles``, ``iters_per_tile``, ``full_tiles``,
    ``iter_owner`` (which program runs an iteration; the fix-up uses it), and the batched
    tile loop ``batched_tile_range`` / ``get_batched_tile_from_idx`` (a batch of GEMMs of
    one shape, dealt out like one GEMM with batch · tiles tiles).
    """

    M: tl.tensor
    N: tl.tensor
    K: tl.tensor
    ctx: GemmContext
    streamk_tiles: tl.constexpr

    @triton.constexpr_function
    def __init__(self, M, N, K, ctx, streamk_tiles=0):
        self.M = M
        self.N = N
        self.K = K
        self.ctx = ctx
        self.streamk_tiles = tl.constexpr(streamk_tiles)

    @triton.jit
    def program_id(self):
        """Logical program id: the launch id, chiplet-remapped when num_xcds > 1."""
        pid = tl.program_id(0)
        if self.ctx.num_xcds > 1:
            pid = chiplet_transform_chunked(pid, self.ctx.num_sms, self.ctx.num_xcds, self.ctx.chunk_size)
        return pid

    @triton.jit
    def num_tiles(self):
        """(tiles along M, tiles along N)."""
        return tl.cdiv(self.M, self.ctx.block_m), tl.cdiv(self.N, self.ctx.block_n)

    @triton.jit
    def iters_per_tile(self):
        """K-iterations per tile: max(1, ⌈K / block_k⌉) (K = 0 runs one masked step)."""
        return tl.maximum(tl.cdiv(self.K, self.ctx.block_k), 1)

    @triton.jit
    def full_tiles(self):
        """Tiles run whole: all but the last min(streamk_tiles, tiles)."""
        tiles_m, tiles_n = self.num_tiles()
        total = tiles_m * tiles_n
        return total - tl.minimum(total, self.streamk_tiles)

    @triton.jit
    def persistent_tile_range(self):
        """(start, total, stride) for ``range``: whole tiles of this program."""
        return self.program_id(), self.full_tiles(), self.ctx.num_sms

    @triton.jit
    def get_tile_from_idx(self, tile_id):
        """The output Tile of linear tile id ``tile_id`` (grouped raster order)."""
        tiles_m, tiles_n = self.num_tiles()
        pid_m, pid_n = _grouped_coords(tile_id, tiles_m, tiles_n, self.ctx.group_size_m, self.ctx.raster)
        return Tile(pid_m, pid_n, self.ctx.block_m, self.ctx.block_n)

    @triton.jit
    def get_tile_from_coord(self, pid_m, pid_n):
        """The output Tile at tile coordinates (pid_m, pid_n)."""
        return Tile(pid_m, pid_n, self.ctx.block_m, self.ctx.block_n)

    @triton.jit
    def batched_tile_range(self, batch):
        """(start, total, stride) for ``range`` over the tiles of ``batch`` GEMMs of this
        shape, batch-major (tile id = b · tiles + the tile's id in GEMM b); whole tiles only."""
        tl.static_assert(self.streamk_tiles == 0, "batched_tile_range: Stream-K is not batched")
        tiles_m, tiles_n = self.num_tiles()
        return self.program_id(), batch * tiles_m * tiles_n, self.ctx.num_sms

    @triton.jit
    def get_batched_tile_from_idx(self, tile_id):
        """(batch index, output Tile) of a ``batched_tile_range`` tile id."""
        tiles_m, tiles_n = self.num_tiles()
        per_batch = tiles_m * tiles_n
        return tile_id // per_batch, self.get_tile_from_idx(tile_id % per_batch)

    @triton.jit
    def _streamk_split(self):
        """(F·I, q, r): first Stream-K iteration, iterations per program, remainder."""
        iters = self.iters_per_tile()
        tiles_m, tiles_n = self.num_tiles()
        first = self.full_tiles() * iters
        total = tiles_m * tiles_n * iters - first
        return first, total // self.ctx.num_sms, total % self.ctx.num_sms

    @triton.jit
    def iter_range(self):
        """[start, end) of this program's global Stream-K iterations (the first r programs
        get one more)."""
        first, q, r = self._streamk_split()
        pid = self.program_id()
        return first + pid * q + tl.minimum(pid, r), first + (pid + 1) * q + tl.minimum(pid + 1, r)

    @triton.jit
    def get_iter(self, global_iter):
        """(pid_m, pid_n, k_iter) of global iteration ``global_iter`` = tile · I + k_iter."""
        iters = self.iters_per_tile()
        out_tile = self.get_tile_from_idx(global_iter // iters)
        return out_tile.pid_m, out_tile.pid_n, global_iter % iters

    @triton.jit
    def iter_owner(self, global_iter):
        """Logical program whose ``iter_range`` holds Stream-K iteration ``global_iter``."""
        first, q, r = self._streamk_split()
        h = global_iter - first
        big = r * (q + 1)
        return tl.where(h < big, h // (q + 1), r + (h - big) // tl.maximum(q, 1))


# ---- Stream-K fix-up -----------------------------------------------------------------------


@aggregate
class StreamKWorkspace:
    """Partial tiles of split Stream-K tiles: two fp32/int32 slots of block_m × block_n per
    program ([P, 2, block_m, block_n], slot 1 for a segment starting at K-iteration 0, slot 0
    otherwise — a program has at most one of each) and one int32 counter per Stream-K tile
    counting the K-iterations published so far (zero before a launch, and again after it)."""

    partials: tl.tensor
    counters: tl.tensor
    sched: ScheduleContext

    @triton.constexpr_function
    def __init__(self, partials, counters, sched):
        self.partials = partials
        self.counters = counters
        self.sched = sched

    @triton.jit
    def _slot_ptrs(self, program, head):
        """Pointers of slot ``head`` (0 or 1) of logical program ``program``."""
        ctx = self.sched.ctx
        offs = tl.arange(0, ctx.block_m)[:, None] * ctx.block_n + tl.arange(0, ctx.block_n)[None, :]
        return self.partials + (program * 2 + head) * (ctx.block_m * ctx.block_n) + offs

    @triton.jit
    def publish(self, acc, tile_id, k_begin, k_end):
        """Store this program's partial of ``tile_id`` (K-steps [k_begin, k_end)) and count
        its iterations; True for the program completing the count (it must then store).
        The barrier orders every thread's partial store before the release atomic. The
        completing program sets the counter back to 0 (no other touches it in this launch),
        so the next launch on the stream reuses the workspace without zeroing it."""
        tl.store(self._slot_ptrs(self.sched.program_id(), (k_begin == 0).to(tl.int32)), acc)
        tl.debug_barrier()
        counter = self.counters + (tile_id - self.sched.full_tiles())
        done = tl.atomic_add(counter, k_end - k_begin, sem="acq_rel", scope="gpu")
        complete = done + (k_end - k_begin) == self.sched.iters_per_tile()
        tl.store(counter, 0, mask=complete)
        return complete

    @triton.jit
    def total(self, tile_id):
        """Sum of the tile's partials in ascending program order (the owner's first)."""
        iters = self.sched.iters_per_tile()
        owner = self.sched.iter_owner(tile_id * iters)
        last = self.sched.iter_owner(tile_id * iters + iters - 1)
        acc = tl.load(self._slot_ptrs(owner, 1), cache_modifier=".cg")
        for program in range(owner + 1, last + 1):
            acc += tl.load(self._slot_ptrs(program, 0), cache_modifier=".cg")
        return acc


@triton.jit
def make_streamk_workspace(partials_ptr, counters_ptr, sched):
    """StreamKWorkspace over ``partials_ptr`` ([P, 2, block_m, block_n], acc dtype) and
    ``counters_ptr`` (min(streamk_tiles, tiles) zeroed int32)."""
    return StreamKWorkspace(partials_ptr, counters_ptr, sched)
