"""Work decomposition: which (tile, K-iterations) each program performs (host reference).

Terms (all ids are non-negative ints; K-iterations are in units of block_k, ends exclusive):
  tiles      T = num_tiles(M, N, s), ordered by ``tile_coords`` (s's raster).
  iters      I = num_k_iters(K, s) K-iterations per tile.
  splits     S_k = min(s.split_k, I) (1 unless split-K).
  units      U = T · S_k work units; unit u is tile u // S_k, split u % S_k.
  grid       P = num_programs(...): U (one program per unit); when persistent,
             ``persistent_programs(U, num_sms, raster)`` (min(num_sms, U), or for raster "m"
             the fewest programs that keep ceil(U / num_sms) rounds); num_sms for Stream-K.
  logical id lpid = chiplet_transform_chunked(pid, P, num_xcds, chunk_size) when
             num_xcds > 1, else the launch id pid. All loops below run on lpid.

Data-parallel / persistent / split-K: program lpid runs units range(lpid, U, P) in order
(a non-persistent grid has P = U, so exactly unit lpid); unit u covers tile u // S_k,
K-iterations ``split_k_range(u % S_k, K, s)``. The kernel adds the splits' partial sums
without any program waiting on another: atomically into a zeroed fp32 buffer, or into
workspace slot u plus an arrival counter per tile, the last split to arrive summing the slots in
split order and storing the tile.

Stream-K (tritonBLAS ScheduleContext): F = T - min(streamk_tiles, T) tiles run whole,
persistently: program lpid runs tiles range(lpid, F, P). The last tiles' iterations, global
iteration g = tile · I + k for g ∈ [F · I, T · I), are dealt out contiguously: with
G = (T - F) · I, q = G // P, r = G % P, program lpid gets
    [F · I + lpid · q + min(lpid, r),  F · I + (lpid + 1) · q + min(lpid + 1, r))
(the first r programs get one extra). A program walks its range in order, cut at tile
boundaries; ``get_iter(g, I)`` = (g // I, g % I).

Stream-K fix-up: the owner of a tile is the program that runs its K-iteration 0
(``fixup_owner``). Every other contributor runs exactly one partial segment of that tile and it
is the first segment of its Stream-K range; it stores its partial accumulator in workspace
slot lpid and then sets flag[lpid]. The owner adds the partials of lpid + 1, lpid + 2, ...
(``tile_contributors``), waiting for each flag, then runs the epilogue and stores the tile.
Race-free with one slot and one flag per program: a program publishes its only partial before
any wait of its own, and every wait targets a higher lpid, so waits form no cycle (all P
programs are co-resident on a persistent grid).

Swap-AB: every (pid_m, pid_n) is a tile of the kernel's problem (N, M) (see grid.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ._checks import check_index, check_int, check_schedule
from .grid import (
    chiplet_transform_chunked,
    num_k_iters,
    num_tiles,
    persistent_tile_range,
    tile_coords,
)
from .schedule import INT32_MAX, RASTERS, Schedule

__all__ = [
    "WorkItem",
    "num_splits",
    "split_k_range",
    "resolve_num_sms",
    "num_programs",
    "logical_program",
    "StreamKPlan",
    "streamk_plan",
    "streamk_iter_range",
    "get_iter",
    "iter_owner",
    "fixup_owner",
    "tile_contributors",
    "work",
]


class WorkItem(NamedTuple):
    """One step of a program: tile (pid_m, pid_n), K-iterations [k_begin, k_end)."""

    pid_m: int
    pid_n: int
    k_begin: int
    k_end: int


def num_splits(K: int, s: Schedule) -> int:
    """Split-K ranges per tile: min(split_k, num_k_iters(K)), so no range is empty."""
    check_schedule(s)
    return min(s.split_k, num_k_iters(K, s))


def split_k_range(split_idx: int, K: int, s: Schedule) -> range:
    """K-iterations of split j: with I iterations, S = num_splits, q = I // S, r = I % S,
    range(j · q + min(j, r), (j + 1) · q + min(j + 1, r)) — the first r splits get one extra."""
    splits = num_splits(K, s)
    check_index("split_idx", split_idx, splits, "num_splits")
    q, r = divmod(num_k_iters(K, s), splits)
    return range(split_idx * q + min(split_idx, r), (split_idx + 1) * q + min(split_idx + 1, r))


def resolve_num_sms(s: Schedule, num_sms: int | None = None) -> int:
    """SM count of a persistent schedule: s.num_sms when set, else the num_sms argument."""
    check_schedule(s)
    if not s.is_persistent:
        raise ValueError("resolve_num_sms: the schedule is not persistent (is_persistent=False)")
    _check_num_sms_arg(num_sms)
    if s.num_sms is not None:
        return s.num_sms
    if num_sms is None:
        raise ValueError("a persistent schedule with num_sms=None needs the device's SM count: pass num_sms=")
    return num_sms


def _check_num_sms_arg(num_sms: int | None) -> None:
    """The num_sms argument (None or an int32 count of at least 1), checked whether or not the
    schedule reads it."""
    if num_sms is None:
        return
    check_int("num_sms", num_sms, 1)
    if num_sms > INT32_MAX:
        raise ValueError(f"num_sms must be <= 2**31 - 1 (the kernels take it as an int32), got {num_sms}")


def persistent_programs(units: int, num_sms: int, raster: str) -> int:
    """Programs of a persistent grid over ``units`` whole work units on num_sms SMs: for raster
    "m", the fewest that keep the rounds at ceil(units / num_sms), ceil(units / rounds) (e.g. 128
    instead of 132 for 512, 896 or 2048 units): each runs as many units as the busiest of
    num_sms programs would, and fewer SMs share the L2 and HBM. On the H100, against
    min(num_sms, units): 1.001-1.044x by do_bench on 24 of 25 dense (both backends) and
    block-scaled raster-"m" rows, 1.005-1.045x by kernel time on 22 (0.966-0.979x on three);
    raster "n" (the block-scaled row waves) measured 0.91-1.005x by kernel time, so it keeps
    min(num_sms, units) (benchmarks/results/balanced_programs.md). units = 0 gives 0."""
    check_int("units", units, 0)
    check_int("num_sms", num_sms, 1)
    if raster not in RASTERS:
        raise ValueError(f"raster must be one of {RASTERS}, got {raster!r}")
    if raster != "m" or units <= num_sms:
        return min(num_sms, units)
    return -(-units // -(-units // num_sms))


def num_programs(M: int, N: int, K: int, s: Schedule, num_sms: int | None = None) -> int:
    """Launch grid size P: U = tiles · splits when not persistent; ``persistent_programs`` when
    persistent; num_sms for Stream-K. It is also the stride of every persistent loop and the
    num_workgroups of the chiplet transform. A clustered schedule (cluster_m = 2) launches P
    rounded up to even, the extra program without work. num_sms (the device's SM count) is read only for a
    persistent schedule whose own num_sms is None."""
    units = num_tiles(M, N, s) * num_splits(K, s)
    if not s.is_persistent:
        _check_num_sms_arg(num_sms)
        return units
    sms = resolve_num_sms(s, num_sms)
    return sms if s.streamk_tiles > 0 else persistent_programs(units, sms, s.raster)


def logical_program(pid: int, num_programs: int, s: Schedule) -> int:
    """Launch id → logical id: chiplet_transform_chunked(pid, P, num_xcds, chunk_size) when
    num_xcds > 1, else pid."""
    check_schedule(s)
    check_int("num_programs", num_programs, 1)
    check_index("pid", pid, num_programs, "num_programs")
    if s.num_xcds == 1:
        return pid
    return chiplet_transform_chunked(pid, num_programs, s.num_xcds, s.chunk_size)


@dataclass(frozen=True)
class StreamKPlan:
    """Stream-K decomposition of one problem (see the module docstring for the formulas)."""

    num_programs: int  # P
    total_tiles: int  # T
    full_tiles: int  # F = T - streamk_tiles, run whole
    streamk_tiles: int  # min(s.streamk_tiles, T)
    iters_per_tile: int  # I
    iters_per_program: int  # q = G // P
    remainder_iters: int  # r = G % P

    def __post_init__(self) -> None:
        for name in ("total_tiles", "full_tiles", "streamk_tiles", "iters_per_tile", "iters_per_program",
                     "remainder_iters"):
            check_int(f"StreamKPlan.{name}", getattr(self, name), 0)
        check_int("StreamKPlan.num_programs", self.num_programs, 1)
        check_int("StreamKPlan.iters_per_tile", self.iters_per_tile, 1)
        P, G = self.num_programs, self.streamk_tiles * self.iters_per_tile
        if self.full_tiles + self.streamk_tiles != self.total_tiles:
            raise ValueError(f"StreamKPlan: full_tiles + streamk_tiles must be total_tiles, got {self.full_tiles} + "
                             f"{self.streamk_tiles} != {self.total_tiles}")
        if (self.iters_per_program, self.remainder_iters) != divmod(G, P):
            raise ValueError(f"StreamKPlan: (iters_per_program, remainder_iters) must be divmod(streamk_tiles · "
                             f"iters_per_tile, num_programs) = {divmod(G, P)}, got "
                             f"{(self.iters_per_program, self.remainder_iters)}")

    @property
    def streamk_iters(self) -> int:
        """G = streamk_tiles · I."""
        return self.streamk_tiles * self.iters_per_tile

    @property
    def first_streamk_iter(self) -> int:
        """F · I, the global iteration where Stream-K starts."""
        return self.full_tiles * self.iters_per_tile


def _check_plan(plan: object) -> None:
    if not isinstance(plan, StreamKPlan):
        raise ValueError(f"plan must be a tlgemm.schedules.StreamKPlan (streamk_plan), got {type(plan).__name__}")


def streamk_plan(M: int, N: int, K: int, s: Schedule, num_sms: int | None = None) -> StreamKPlan:
    """The Stream-K plan of a persistent schedule (streamk_tiles = 0 gives the plain
    persistent plan: every tile full)."""
    check_schedule(s)
    if not s.is_persistent or s.split_k > 1:
        raise ValueError("streamk_plan needs a persistent schedule without split-K")
    programs = num_programs(M, N, K, s, num_sms)
    total = num_tiles(M, N, s)
    streamk = min(s.streamk_tiles, total)
    iters = num_k_iters(K, s)
    q, r = divmod(streamk * iters, programs)
    return StreamKPlan(programs, total, total - streamk, streamk, iters, q, r)


def streamk_iter_range(lpid: int, plan: StreamKPlan) -> range:
    """Global Stream-K iterations of logical program lpid:
    range(F·I + lpid·q + min(lpid, r), F·I + (lpid+1)·q + min(lpid+1, r))."""
    _check_plan(plan)
    check_index("lpid", lpid, plan.num_programs, "num_programs")
    base, q, r = plan.first_streamk_iter, plan.iters_per_program, plan.remainder_iters
    return range(base + lpid * q + min(lpid, r), base + (lpid + 1) * q + min(lpid + 1, r))


def get_iter(global_iter: int, iters_per_tile: int) -> tuple[int, int]:
    """Global iteration g → (tile_id, k_iter) = (g // I, g % I)."""
    check_int("global_iter", global_iter, 0)
    check_int("iters_per_tile", iters_per_tile, 1)
    return divmod(global_iter, iters_per_tile)


def iter_owner(global_iter: int, plan: StreamKPlan) -> int:
    """Logical program running Stream-K iteration g. With h = g - F·I and b = r·(q+1):
    h // (q+1) if h < b, else r + (h - b) // q."""
    _check_plan(plan)
    check_int("global_iter", global_iter, 0)
    h = global_iter - plan.first_streamk_iter
    if not 0 <= h < plan.streamk_iters:
        raise ValueError(
            f"global_iter must be a Stream-K iteration in [{plan.first_streamk_iter}, "
            f"{plan.first_streamk_iter + plan.streamk_iters}), got {global_iter}"
        )
    q, r = plan.iters_per_program, plan.remainder_iters
    big = r * (q + 1)
    return h // (q + 1) if h < big else r + (h - big) // q


def fixup_owner(tile_id: int, plan: StreamKPlan) -> int:
    """Logical program that runs K-iteration 0 of the tile and stores it: tile % P for a full
    tile, iter_owner(tile · I) for a Stream-K tile."""
    _check_plan(plan)
    check_index("tile_id", tile_id, plan.total_tiles, "total_tiles")
    if tile_id < plan.full_tiles:
        return tile_id % plan.num_programs
    return iter_owner(tile_id * plan.iters_per_tile, plan)


def tile_contributors(tile_id: int, plan: StreamKPlan) -> range:
    """Logical programs computing part of the tile, ascending; the first is its owner:
    range(iter_owner(tile·I), iter_owner(tile·I + I - 1) + 1) for a Stream-K tile."""
    owner = fixup_owner(tile_id, plan)
    if tile_id < plan.full_tiles:
        return range(owner, owner + 1)
    return range(owner, iter_owner((tile_id + 1) * plan.iters_per_tile - 1, plan) + 1)


def work(pid: int, M: int, N: int, K: int, s: Schedule, num_sms: int | None = None) -> list[WorkItem]:
    """The ordered (pid_m, pid_n, k_begin, k_end) steps of launch program pid; none for the
    programs a clustered launch adds to fill its last cluster (``num_programs``)."""
    programs = num_programs(M, N, K, s, num_sms)
    launched = -(-programs // s.cluster_m) * s.cluster_m
    if launched > programs and isinstance(pid, int) and not isinstance(pid, bool) and pid >= programs:
        if pid >= launched:
            raise ValueError(f"pid must be < {launched} (num_programs={programs} rounded up to whole clusters of "
                             f"{s.cluster_m}), got {pid}")
        return []
    lpid = logical_program(pid, programs, s)
    if s.streamk_tiles == 0:
        splits = num_splits(K, s)
        items = []
        for unit in persistent_tile_range(lpid, programs, num_tiles(M, N, s) * splits):
            tile, split = divmod(unit, splits)
            ks = split_k_range(split, K, s)
            items.append(WorkItem(*tile_coords(tile, M, N, s), ks.start, ks.stop))
        return items
    plan = streamk_plan(M, N, K, s, num_sms)
    iters = plan.iters_per_tile
    full = persistent_tile_range(lpid, programs, plan.full_tiles)
    items = [WorkItem(*tile_coords(t, M, N, s), 0, iters) for t in full]
    span = streamk_iter_range(lpid, plan)
    g = span.start
    while g < span.stop:
        tile, k = get_iter(g, iters)
        end = min(span.stop, (tile + 1) * iters)
        items.append(WorkItem(*tile_coords(tile, M, N, s), k, k + end - g))
        g = end
    return items
