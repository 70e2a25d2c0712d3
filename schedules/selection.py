"""Analytical schedule selection: ``select(M, N, K, dtypes, num_sms, smem_bytes)``.

Every candidate (tile shape x swap-AB x decomposition) gets a modelled time; the fastest wins.
The model, per SM and per clock, after an H100 SXM (only the ranking matters):

  cpi      = max(2·bm·bn·bk / MMA_FLOPS,  (min(bm, M') + min(bn, N'))·bk·bytes / L2_BYTES,
                 ITER_CLK,  LOAD_LATENCY_CLK / stages)
             clocks per K-iteration: tensor cores on the padded tile vs operand feed (rows a
             TMA box has out of bounds are not fetched) vs the consumer's fixed cost of an
             iteration vs the pipeline's refill rate (each stage's slot comes back once per
             load round trip, so a narrow tile with few stages cannot stream at HBM speed).
  critical = K-iterations of the busiest program:
             data-parallel  ⌈U / S⌉ · I                    (U tiles, S SMs: wave quantisation)
             split-K        ⌈U / S⌉ · ⌈I / splits⌉          (U = tiles · splits)
             Stream-K       ⌈F / S⌉ · I + ⌈G / S⌉          (F whole tiles, G Stream-K iterations),
                            its clocks × STREAMK_SLOWDOWN
  t_sm     = critical · cpi + per-tile overhead (pipeline fill, epilogue store) + the partial
             accumulator traffic and hand-off latency of split-K / Stream-K fix-ups.
  eff      = I·T / (S · critical): useful work over what S SMs could do in the busiest
             program's time (wave quantisation and idle SMs both lower it).
  t_hbm    = ((M·K + K·N)·bytes_in + M·N·bytes_out) / HBM bandwidth / eff: each SM streams
             about 1/S of the chip's bandwidth, in proportion to its K-iterations, so idle SMs
             and a ragged last wave leave bandwidth unused. For 16 < M <= 128 tokens
             (LATENCY_BOUND_MAX_M, WEIGHT_STREAM_MAX_M) instead bytes / 2.47 TB/s with no eff:
             there a part of the SMs streaming the weights draws what all of them would
             (measured); for WAVES_MIN_M < M <= 128 the partial last wave of a data-parallel
             grid streams at its busy SMs' rate (``_in_waves``) and a fix-up's hand-off adds to
             the floor (measured). Under Stream-K the tiles of another
             tile row (column) read B (A) again at another time: from HBM where that operand is
             larger than L2_BYTES (``_streamk_rereads``).
  time     = max(t_sm, t_hbm), + SWAP_AB_CHARGE_CLK and a pass over C for swap-AB with M > 1
             (the cost of the second kernel that once transposed Cᵀ into C; kept as a
             calibration since the kernel stores Cᵀ's tiles transposed into C itself).

ITER_CLK and LOAD_LATENCY_CLK were fitted on an H100 to the dense TileLang kernel at M = 16..128
(benchmarks/results/small_m_dense.md): without them every tile sat on the HBM floor and the
ties went to 64x16 and 64x32 tiles, whose 2-4 KB of B per stage streamed at a third of it.

Candidates: block_m ∈ {64, 128, 256} (WGMMA M is 64 per warpgroup); block_n ∈ {16, 32, 64,
128, 256}, and for 16-bit and fp8 inputs without swap-AB also the widths OTHER_BLOCK_N (144 ..
240) that are no power of two (OTHER_WIDTH_DTYPES: int8 and tf32 were not measured; such a width
cuts N into tiles that fill the last wave or feed the tensor cores better, e.g. at N = 2112
128x144 for M = 1024 and 2048 and 128x176 for M = 4096, 1.19-1.41x the powers of two on the H100,
benchmarks/results/dense_block_n.md; the Triton backend and bmm take only powers of two,
``tlgemm.api.runs_schedule``); one consumer warpgroup per 128x128 fp32 accumulators (at most 2);
block_k = one 128-byte swizzle row; tiles in groups of ``raster_group`` tile rows (the
wave's smallest operand footprint); as many stages as the shared memory holds (≤ MAX_STAGES,
≥ 2), or more (up to MAX_LATENCY_STAGES) where the refill bound makes that more than 1% faster:
the fewest stages within 1% of the fastest (for 16 < M <= 128 by t_sm, where the HBM floor would
hide the refill bound). swap-AB is considered for M ≤ 64 with N > M (the kernel
computes Cᵀ = Bᵀ·Aᵀ, so the small M becomes WGMMA's N);
split-K and Stream-K when there are fewer tiles than SMs or a partial last wave. Ties go to the
candidate with the fewest weight rows in flight for 1 < M <= WEIGHT_STREAM_MAX_M (the busy programs
times the tile's rows of the larger operand: fewer streams from HBM at once run closer to its
bandwidth), then the most slack (the lowest t_sm, when several sit on the HBM floor), then to the
simpler decomposition, then to less wasted work in edge tiles, then to larger tiles; a width
that is no power of two ranks as if its ``width_margin`` slower (1 for 192 above
WEIGHT_STREAM_MAX_M, OTHER_WIDTH_MARGIN for the others, STREAMING_WIDTH_MARGIN up to it), and
with ``m_min`` (a schedule serving an M bucket) stays ahead of the best power of two only if it
wins by that margin across the bucket (``_serving_the_bucket``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._checks import check_int, check_schedule
from .dtypes import DTYPE_BYTES, gemm_dtypes
from .grid import cdiv, num_k_iters, num_tiles
from .schedule import INT32_MAX, Schedule

__all__ = ["Candidate", "Selection", "select", "shared_memory_bytes", "store_staging", "MODES"]

CLOCK_GHZ = 1.83
MMA_FLOPS_PER_CLK = {1: 8192, 2: 4096, 4: 2048}  # per SM, dense, by input element bytes
L2_BYTES_PER_CLK = 48  # operand feed per SM
HBM_BYTES_PER_CLK = 1830  # whole chip, 3.35 TB/s
TILE_OVERHEAD_CLK = 1000  # pipeline fill + epilogue latency, per tile or Stream-K segment
SYNC_CLK = 1000  # flag / atomic hand-off latency of a split tile
PARTIAL_BYTES_PER_CLK = 8  # fp32 partial tiles move in the accumulator's register layout (H200, measured)
STREAMK_SLOWDOWN = 1.05  # Stream-K kernel per K-iteration: its fix-up code raises register pressure (H200, measured)
SMEM_RESERVE_BYTES = 1024  # mbarriers and bookkeeping
STORE_CHUNK_COLUMNS = 64  # output columns per TMA store of the epilogue
MAX_STAGES = 6
ITER_CLK = 400  # a consumer's floor per K-iteration: barrier wait, WGMMA issue and wait, slot release (H100, measured)
LOAD_LATENCY_CLK = 3600  # round trip of a stage's TMA load from HBM under a full grid's load (H100, measured)
MAX_LATENCY_STAGES = 16
STAGES_TOLERANCE = 1.01  # stages beyond MAX_STAGES must gain more than this (deeper queues cost at the HBM floor)
#: Charged to swap-AB with M > 1, with a pass over C. It was the second kernel that transposed Cᵀ
#: into C; the TileLang kernel now stores Cᵀ's tiles transposed into C itself. Without the charge
#: 30 of the H100 A/B grid's picks moved (M = 8..32) at 1.01x geomean, losing up to 26% where a pick
#: turned to Stream-K at K <= 2048 (benchmarks/results/small_m_dense.md, section 7), so it stays.
SWAP_AB_CHARGE_CLK = 4000
#: For 1 < M <= this, candidates tied on the HBM floor go to the fewest weight rows in flight (busy
#: programs x the tile's rows of the weights): on the H100, 128x64 against 64x128 or 128x128 and
#: 64x64 against 64x128 measured 1.01-1.31x on 21 of 22 shapes at M = 8..128, 0.94x on one
#: (benchmarks/results/small_m_dense.md); at M = 256 and 1024 it measured 0.92-1.02x. M = 1 keeps
#: its earlier picks (its A/B ran with swap-AB tiles counted by their token side).
WEIGHT_STREAM_MAX_M = 128
#: For LATENCY_BOUND_MAX_M < M <= WEIGHT_STREAM_MAX_M the HBM floor is the bytes at
#: STREAMING_HBM_BYTES_PER_CLK (2.47 TB/s) whatever share of the SMs the schedule keeps busy;
#: elsewhere it is the bytes at HBM_BYTES_PER_CLK over that share. On the H100 the 104 picks this
#: moved at M = 24..128 measured 1.029x geomean, the 65 it would have moved at M = 1..16 0.96x (the
#: programs there are bound by their loads in flight, so the chip's throughput follows the busy SMs;
#: benchmarks/results/model_backtest.md, "The HBM term in two regimes").
LATENCY_BOUND_MAX_M = 16
#: For WAVES_MIN_M < M <= WEIGHT_STREAM_MAX_M two parts of a schedule do not overlap the weights'
#: streaming, so they add to the HBM floor instead of hiding under it: the partial last wave of a
#: data-parallel grid (``_in_waves``: its few busy SMs stream at their own rate, not the chip's) and
#: a Stream-K / split-K fix-up (the partials' hand-off comes after the streaming). On the H100 the 34
#: picks this moved at M = 48..128 measured 1.100x geomean by kernel time (0.947-1.236x; e.g. 128x128
#: data-parallel instead of 128x64 Stream-K at N = 11008, 64x32 data-parallel instead of 64x64
#: Stream-K at N = 4096); the 22 it would also move at M = 24 and 32 measured 0.963x (0.78x at worst;
#: benchmarks/results/model_backtest.md, "Partial waves and exposed fix-ups").
WAVES_MIN_M = 32
STREAMING_HBM_BYTES_PER_CLK = 1350
L2_BYTES = 50 * 2**20  # H100 SXM; an operand larger than this is re-read from HBM when read again later
WGMMA_M = 64
ACC_PER_WARPGROUP = 128 * 128  # fp32 accumulators a warpgroup holds (128 registers per thread)
SWAP_AB_MAX_M = 64
MAX_SPLIT_K = 16
BLOCK_M_CHOICES = (64, 128, 256)
BLOCK_N_CHOICES = (16, 32, 64, 128, 256)
OTHER_BLOCK_N = (144, 160, 176, 192, 208, 224, 240)  # widths that are no power of two (TileLang's matmul only)
OTHER_WIDTH_MARGIN = 1.05  # above WEIGHT_STREAM_MAX_M: a width no multiple of FULL_WIDTH_STEP ranks 5% slower
FULL_WIDTH_STEP = 64  # there 192 = 3·64 ranks as a power of two does (``width_margin``)
STREAMING_WIDTH_MARGIN = 1.15  # up to WEIGHT_STREAM_MAX_M: every width that is no power of two ranks 15% slower
OTHER_WIDTH_DTYPES = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")  # measured: bf16 and e4m3
BUCKET_SAMPLES = 8  # values of M at which a width that is no power of two must win across a bucket
MODES = ("data-parallel", "split-K", "Stream-K")  # in order of preference at equal time


def store_staging(block_n: int) -> tuple[int, int]:
    """(columns per chunk, buffers) of the output staging area: the epilogue writes a tile in
    chunks of the most columns, up to STORE_CHUNK_COLUMNS, that divide block_n in multiples of
    8 (block_n itself when it is smaller; 40 for block_n = 160), through up to two buffers
    (the TMA store of one chunk overlaps the conversion of the next)."""
    check_int("block_n", block_n, 8)
    if block_n % 8:
        raise ValueError(f"block_n must be a multiple of 8, got {block_n}")
    chunk = next(c for c in range(min(block_n, STORE_CHUNK_COLUMNS), 0, -8) if block_n % c == 0)
    return chunk, min(2, block_n // chunk)


def shared_memory_bytes(s: Schedule, dtypes: object) -> int:
    """Modelled shared memory of a schedule: num_stages · (block_m + block_n) · block_k ·
    bytes(a) for the operand ring, + buffers · block_m · chunk · bytes(c) to stage the output
    for the TMA store (``store_staging``), + SMEM_RESERVE_BYTES for barriers."""
    check_schedule(s)
    a, _, c = gemm_dtypes(dtypes)
    ring = s.num_stages * (s.block_m + s.block_n) * s.block_k * DTYPE_BYTES[a]
    chunk, buffers = store_staging(s.block_n)
    return ring + buffers * s.block_m * chunk * DTYPE_BYTES[c] + SMEM_RESERVE_BYTES


@dataclass(frozen=True)
class Candidate:
    """One scored schedule. Times are modelled microseconds."""

    schedule: Schedule
    mode: str  # one of MODES
    time_us: float  # max(sm_us, hbm_us)
    sm_us: float  # busiest program
    hbm_us: float  # HBM floor given the busy SMs
    tiles: int
    busy: int  # programs (SMs) with work
    sm_efficiency: float  # useful K-iterations / (num_sms · busiest program's K-iterations)
    edge_waste: float  # padded MMA work / useful work - 1 (edge tiles, K tail)
    smem: int  # shared_memory_bytes

    def row(self) -> str:
        return (f"{self.time_us:9.2f} {self.sm_us:9.2f} {self.hbm_us:9.2f}  {self.mode:13s} {self.tiles:6d} "
                f"{self.busy:5d} {self.sm_efficiency:6.0%} {1 + self.edge_waste:6.2f}x {self.smem / 1024:7.1f}  "
                f"{self.schedule}")


@dataclass(frozen=True)
class Selection:
    """``select(..., explain=True)``: the choice, every candidate best first, and why."""

    schedule: Schedule
    candidates: tuple[Candidate, ...]
    notes: tuple[str, ...]
    problem: str

    def __str__(self) -> str:
        best = self.candidates[0]
        lines = [self.problem, *(f"  - {note}" for note in self.notes),
                 f"chosen: {best.schedule}  [{best.mode}]",
                 f"  modelled {best.time_us:.2f} us = max(busiest SM {best.sm_us:.2f} us, HBM {best.hbm_us:.2f} us "
                 f"with {best.busy} SMs busy); {best.tiles} tiles, SM efficiency {best.sm_efficiency:.0%}, "
                 f"padded work {1 + best.edge_waste:.2f}x useful, smem {best.smem / 1024:.1f} KB",
                 f"candidates (best first, {min(12, len(self.candidates))} of {len(self.candidates)}):",
                 "  time_us     sm_us    hbm_us  mode           tiles  busy sm_eff padded smem_kb  schedule"]
        lines += ["  " + c.row() for c in self.candidates[:12]]
        return "\n".join(lines)


def raster_group(block_m: int, block_n: int, num_sms: int) -> int:
    """Tile rows per group of the grouped raster "m" (``Schedule.group_size_m``) whose wave of
    num_sms tiles reads the fewest operand rows: G rows of A tiles and num_sms / G columns of B
    tiles hold G·block_m + (num_sms / G)·block_n rows of K, least at G = √(num_sms·block_n /
    block_m). Each K slice of those rows comes from HBM about once a wave, so fewer rows is
    fewer HBM bytes, and under the power limit that do_bench's back-to-back calls reach, less
    energy per FLOP. On the H100 (132 SMs, 128x256 tiles, G = 16 against the former 8):
    DRAM reads 0.68-0.92x at 4096³ to 8192³ (ncu) and 1.005-1.041x by do_bench on all
    eight bf16 and fp8 rows measured (benchmarks/results/raster_group.md)."""
    return max(1, round(math.sqrt(num_sms * block_n / block_m)))


def _pow2_ceil(x: int) -> int:
    return 1 << (x - 1).bit_length()


def _streamk_rereads(rows: int, cols: int, K: int, bm: int, bn: int, in_bytes: int, streamed: float) -> float:
    """HBM bytes that Stream-K reads again: its programs walk the streamed tiles' K ranges at
    different times, so the tiles of another tile row (column) read B (A) after the first has
    passed, from HBM where the operand does not fit in L2_BYTES. Measured on the H100 at M =
    128, N x K = 7168x16384 (B 117-235 MB): 64-row tiles under Stream-K (two tile rows) ran at
    0.55-0.63x 128x64 tiles (one row), as many tiles (benchmarks/results/small_m_dense.md)."""
    rereads = 0.0
    for copies, operand in ((cdiv(rows, bm) - 1, K * cols * in_bytes), (cdiv(cols, bn) - 1, rows * K * in_bytes)):
        if operand > L2_BYTES:
            rereads += copies * streamed * operand
    return rereads


def _score(s: Schedule, mode: str, rows: int, cols: int, K: int, dtypes: tuple[str, str, str],
           num_sms: int, smem: int) -> Candidate:
    a, _, c = dtypes
    in_bytes, out_bytes = DTYPE_BYTES[a], DTYPE_BYTES[c]
    bm, bn, bk = s.block_m, s.block_n, s.block_k
    tiles, iters = cdiv(rows, bm) * cdiv(cols, bn), num_k_iters(K, s)
    cpi = max(2 * bm * bn * bk / MMA_FLOPS_PER_CLK[in_bytes],
              (min(bm, rows) + min(bn, cols)) * bk * in_bytes / L2_BYTES_PER_CLK, ITER_CLK,
              LOAD_LATENCY_CLK / s.num_stages)
    tile_clk = TILE_OVERHEAD_CLK + bm * bn * out_bytes / L2_BYTES_PER_CLK
    partial_clk = bm * bn * 4 / PARTIAL_BYTES_PER_CLK  # write or read one fp32 partial tile
    if mode == "split-K":
        units = tiles * s.split_k
        per_unit = cdiv(iters, s.split_k)
        critical = cdiv(units, num_sms) * per_unit
        fixup_clk = SYNC_CLK + partial_clk
        unit_clk = per_unit * cpi + tile_clk + fixup_clk
        sm_clk = cdiv(units, num_sms) * unit_clk
        busy = min(units, num_sms)
    elif mode == "Stream-K":
        streamed = min(s.streamk_tiles, tiles)  # fewer tiles than that: a smaller M of the schedule's bucket
        full = tiles - streamed
        sk_iters = cdiv(streamed * iters, num_sms)
        critical = cdiv(full, num_sms) * iters + sk_iters
        segments = cdiv(sk_iters, iters) + 1
        partials = cdiv(iters, sk_iters) - 1  # other contributors an owner waits for
        fixup_clk = SYNC_CLK + (partials + 1) * partial_clk
        sm_clk = critical * cpi * STREAMK_SLOWDOWN + (cdiv(full, num_sms) + segments) * tile_clk + fixup_clk
        busy = max(min(full, num_sms), min(streamed * iters, num_sms))
    else:
        critical = cdiv(tiles, num_sms) * iters
        fixup_clk = 0
        units, unit_clk = tiles, iters * cpi + tile_clk
        sm_clk = cdiv(tiles, num_sms) * unit_clk
        busy = min(tiles, num_sms)
    efficiency = tiles * iters / (num_sms * critical)
    hbm_bytes = (rows * K + K * cols) * in_bytes + rows * cols * out_bytes
    if mode == "Stream-K":
        hbm_bytes += _streamk_rereads(rows, cols, K, bm, bn, in_bytes, streamed / tiles)
    tokens = cols if s.is_swap_ab else rows
    streaming = _streaming(tokens)
    bandwidth = STREAMING_HBM_BYTES_PER_CLK if streaming else HBM_BYTES_PER_CLK
    hbm_clk = hbm_bytes / bandwidth if streaming else hbm_bytes / bandwidth / efficiency
    if streaming and tokens > WAVES_MIN_M:
        if mode != "Stream-K" and units % num_sms:
            hbm_clk = _in_waves(units, num_sms, unit_clk, hbm_bytes / units / bandwidth)
        hbm_clk += fixup_clk
    if s.is_swap_ab and cols > 1:
        charge = SWAP_AB_CHARGE_CLK + 2 * rows * cols * out_bytes / bandwidth
        sm_clk, hbm_clk = sm_clk + charge, hbm_clk + charge
    to_us = 1.0 / (CLOCK_GHZ * 1e3)
    return Candidate(
        schedule=s, mode=mode, time_us=max(sm_clk, hbm_clk) * to_us, sm_us=sm_clk * to_us, hbm_us=hbm_clk * to_us,
        tiles=tiles, busy=busy, sm_efficiency=efficiency,
        edge_waste=tiles * bm * bn * iters * bk / (rows * cols * K) - 1, smem=smem,
    )


def _in_waves(units: int, num_sms: int, unit_clk: float, unit_hbm_clk: float) -> float:
    """Clocks of ``units`` equal work units run in waves of num_sms, each wave as long as one
    unit's SM-side time or the wave's HBM bytes at the streaming bandwidth, whichever is longer:
    the partial last wave streams only what its busy SMs can fetch (``WAVES_MIN_M``)."""
    waves, rest = divmod(units, num_sms)
    return (waves * max(unit_clk, num_sms * unit_hbm_clk)
            + (max(unit_clk, rest * unit_hbm_clk) if rest else 0.0))


def _decompositions(base: Schedule, tiles: int, iters: int, num_sms: int) -> list[tuple[str, Schedule]]:
    """Data-parallel always; split-K / Stream-K where the last wave is partial (Stream-K over
    the partial wave only: on the H200, also splitting one whole wave ("two-tile" Stream-K)
    lost 5-20% to data-parallel at 8192³ and 4096x7168x16384, session-3 measurements)."""
    options = [("data-parallel", base.persistent(num_sms))]
    if tiles < num_sms:
        for splits in range(2, min(iters, MAX_SPLIT_K, cdiv(2 * num_sms, tiles)) + 1):
            options.append(("split-K", base.splitk(splits)))
        options.append(("Stream-K", base.persistent(num_sms).streamk(tiles)))
    elif tiles % num_sms:
        options.append(("Stream-K", base.persistent(num_sms).streamk(tiles % num_sms)))
    return options


def width_margin(s: Schedule, M: int) -> float:
    """The factor a candidate's modelled time is ranked by (H100 measurements,
    benchmarks/results/dense_block_n.md, sections 5 and 6): 1 for a power of two. Above
    WEIGHT_STREAM_MAX_M also 1 for 192, where 128x192 ran at 1.26-1.33x its tensor-core time per
    K-iteration, as 128x256 (1.21-1.30x), while the model's operand-feed term charges it 11% more;
    OTHER_WIDTH_MARGIN for 144 .. 240 otherwise, which ran within a few percent of the model (fp8
    208 and 240 up to 2% slower). Up to WEIGHT_STREAM_MAX_M, where the tiles stream the weights,
    STREAMING_WIDTH_MARGIN: 64x192 and 64x224 lost 4-13% to the powers of two there."""
    if s.has_pow2_block_n:
        return 1.0
    if M <= WEIGHT_STREAM_MAX_M:
        return STREAMING_WIDTH_MARGIN
    return 1.0 if s.block_n % FULL_WIDTH_STEP == 0 else OTHER_WIDTH_MARGIN


def _rows_in_flight(c: Candidate, M: int, N: int) -> int:
    """Rows of the larger operand the busy programs stream at once, where 1 < M <= WEIGHT_STREAM_MAX_M
    (a swap-AB tile runs block_m over N and block_n over M)."""
    if not 1 < M <= WEIGHT_STREAM_MAX_M:
        return 0
    along_n, along_m = ((c.schedule.block_m, c.schedule.block_n) if c.schedule.is_swap_ab
                        else (c.schedule.block_n, c.schedule.block_m))
    return c.busy * (min(along_n, N) if N >= M else min(along_m, M))


def _streaming(tokens: int) -> bool:
    """Whether a schedule with this token count (M, or N under swap-AB: ``_score``'s rows or
    cols) streams the weights, where ``_score``'s HBM floor takes no account of idle SMs."""
    return LATENCY_BOUND_MAX_M < tokens <= WEIGHT_STREAM_MAX_M


def rank_key(c: Candidate, M: int, N: int) -> tuple:
    """select()'s order of candidates for C[M, N] (the module docstring's ties, in order)."""
    return (round(c.time_us * width_margin(c.schedule, M), 6), _rows_in_flight(c, M, N), round(c.sm_us, 6),
            MODES.index(c.mode), round(c.edge_waste, 9), -c.schedule.block_m * c.schedule.block_n,
            c.schedule.is_swap_ab)


def _serving_the_bucket(scored: list[Candidate], m_min: int, M: int, N: int, K: int, types, num_sms: int,
                        notes: list[str]) -> list[Candidate]:
    """Re-rank the widths that are no power of two ranked above the best power of two: one stays
    ahead only if it is its ``width_margin`` faster at every sampled M of [m_min, M] (the bucket the
    schedule serves; wave quantisation moves with M: measured on the H100, 128x176 at N = 2112
    1.26-1.28x 128x256 at M = 4096 but 0.86-0.88x at M = 3000); the others follow it."""
    pow2 = next((c for c in scored if c.schedule.has_pow2_block_n), None)
    if pow2 is None:
        return scored
    ahead = scored[:scored.index(pow2)]
    samples = sorted({m_min + (M - m_min) * i // (BUCKET_SAMPLES - 1) for i in range(BUCKET_SAMPLES)})

    def time_at(c: Candidate, m: int) -> float:
        rows, cols = (N, m) if c.schedule.is_swap_ab else (m, N)  # the kernel's problem, as select() scores it
        return _score(c.schedule, c.mode, rows, cols, K, types, num_sms, c.smem).time_us

    kept = [c for c in ahead if all(time_at(pow2, m) >= width_margin(c.schedule, M) * time_at(c, m) for m in samples)]
    if len(kept) < len(ahead):
        notes.append(f"{len(ahead) - len(kept)} width(s) that are no power of two ranked after "
                     f"block_n={pow2.schedule.block_n}: not as fast (times their width margin) at every M in "
                     f"[{m_min}, {M}]")
    return kept + [pow2] + [c for c in ahead if c not in kept] + scored[len(ahead) + 1:]


def select(M: int, N: int, K: int, dtypes: object, num_sms: int, smem_bytes: int,
           explain: bool = False, m_min: int | None = None) -> Schedule | Selection:
    """Choose a Schedule for C[M, N] = A[M, K] · B[K, N] on a device with num_sms SMs and
    smem_bytes of shared memory per block (227 KB = 232448 on H100), by the model in the module
    docstring. dtypes: see ``dtypes.gemm_dtypes``. explain=True returns a Selection (every
    candidate with its score; ``print`` it). m_min: the schedule also serves every M from m_min
    up (an M bucket, ``tlgemm.api``): a block_n that is no power of two must win across it."""
    check_int("M", M, 1)
    if m_min is not None:
        check_int("m_min", m_min, 1)
        if m_min > M:
            raise ValueError(f"m_min: must be at most M={M}, got {m_min}")
    check_int("N", N, 1)
    check_int("K", K, 1)
    check_int("num_sms", num_sms, 1)
    if num_sms > INT32_MAX:
        raise ValueError(f"num_sms must be <= 2**31 - 1 (the kernels take it as an int32), got {num_sms}")
    check_int("smem_bytes", smem_bytes, 1)
    if not isinstance(explain, bool):
        raise ValueError(f"explain must be a bool, got {explain!r}")
    types = gemm_dtypes(dtypes)
    in_bytes = DTYPE_BYTES[types[0]]
    block_k = 128 // in_bytes
    notes = [f"block_k = {block_k}: one 128-byte swizzle row of {types[0]}"]
    swaps = [False]
    if M <= SWAP_AB_MAX_M and N > M:
        swaps.append(True)
        notes.append(f"M={M} <= {SWAP_AB_MAX_M} (WGMMA M is 64 per warpgroup): swap-AB considered, "
                     f"kernel problem {N}x{M}")
    other_widths = types[0] in OTHER_WIDTH_DTYPES
    scored: list[Candidate] = []
    few_tiles: set[int] = set()
    ragged: set[int] = set()
    # Where the weights stream, the stage count follows t_sm, which holds the refill bound that
    # the HBM floor there hides: on the H100 the 100 picks this moved at M = 24..128 (mostly 6-7
    # stages to 9) measured 1.016x geomean by kernel time, 0.974-1.147x
    # (benchmarks/results/model_backtest.md, "The HBM term in two regimes").
    streaming = _streaming(M)
    for swap in swaps:
        rows, cols = (N, M) if swap else (M, N)
        for bm in BLOCK_M_CHOICES:
            for bn in BLOCK_N_CHOICES + (OTHER_BLOCK_N if other_widths and not swap else ()):
                warpgroups = cdiv(bm * bn, ACC_PER_WARPGROUP)
                if bm > max(WGMMA_M, _pow2_ceil(rows)) or bn > max(16, _pow2_ceil(cols)):
                    continue  # a tile larger than the padded problem only adds waste
                if warpgroups > 2 or bm % (WGMMA_M * warpgroups):
                    continue  # each consumer warpgroup owns block_m / warpgroups >= 64 rows
                one = Schedule(block_m=bm, block_n=bn, block_k=block_k, num_stages=1,
                               num_warpgroups=warpgroups, is_swap_ab=swap,
                               group_size_m=raster_group(bm, bn, num_sms))
                per_stage = (bm + bn) * block_k * in_bytes
                fitting = (smem_bytes - shared_memory_bytes(one, types)) // per_stage + 1
                if fitting < 2:
                    continue  # no double buffering: the loads could not overlap the MMAs
                base = one.stages(min(fitting, MAX_STAGES))
                tiles, iters = num_tiles(M, N, base), num_k_iters(K, base)
                if tiles < num_sms:
                    few_tiles.add(tiles)
                elif tiles % num_sms:
                    ragged.add(tiles)
                for mode, s in _decompositions(base, tiles, iters, num_sms):
                    deeper = range(s.num_stages, min(fitting, MAX_LATENCY_STAGES) + 1)
                    options = [_score(s.stages(n), mode, rows, cols, K, types, num_sms,
                                      shared_memory_bytes(s.stages(n), types)) for n in deeper]
                    by = [c.sm_us if streaming else c.time_us for c in options]
                    scored.append(next(c for c, t in zip(options, by) if t <= min(by) * STAGES_TOLERANCE))
    if not scored:
        raise ValueError(f"smem_bytes={smem_bytes} holds no candidate schedule (two stages of a 64x16 tile)")
    if few_tiles:
        notes.append(f"tile shapes giving {min(few_tiles)}..{max(few_tiles)} tiles for {num_sms} SMs: "
                     "split-K and Stream-K over all tiles considered")
    if ragged:
        notes.append(f"tile shapes with a partial last wave ({len(ragged)}): Stream-K over the remainder considered")
    scored.sort(key=lambda c: rank_key(c, M, N))
    if m_min is not None and m_min < M:
        scored = _serving_the_bucket(scored, m_min, M, N, K, types, num_sms, notes)
    if not explain:
        return scored[0].schedule
    problem = (f"select(M={M}, N={N}, K={K}, dtypes={types}, num_sms={num_sms}, smem_bytes={smem_bytes}"
               + (f", m_min={m_min})" if m_min is not None else ")"))
    return Selection(scored[0].schedule, tuple(scored), tuple(notes), problem)
