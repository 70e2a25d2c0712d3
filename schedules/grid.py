"""Tile grid, tile order and program-id remapping (host reference; device code must match).

Problem convention: functions taking a whole problem (M, N[, K]) and a Schedule take the
user's GEMM C[M, N] = A[M, K] · B[K, N] and apply swap-AB themselves: the kernel's problem is
``problem_shape(M, N, s)`` = (M, N), or (N, M) when ``s.is_swap_ab``. Per-axis formulas
(``num_tiles_m``, ``num_tiles_n``, ``num_k_iters``) take an extent of the kernel's axis.
All divisions are floor divisions of non-negative integers; cdiv(a, b) = ⌈a / b⌉.
"""

from __future__ import annotations

from ._checks import check_index, check_int, check_schedule
from .schedule import Schedule

__all__ = [
    "cdiv",
    "problem_shape",
    "num_tiles_m",
    "num_tiles_n",
    "num_tiles",
    "num_k_iters",
    "grouped_coords",
    "tile_coords",
    "chiplet_transform",
    "chiplet_transform_chunked",
    "persistent_tile_range",
]


def cdiv(a: int, b: int) -> int:
    """⌈a / b⌉ for a >= 0, b >= 1."""
    return -(-a // b)


def problem_shape(M: int, N: int, s: Schedule) -> tuple[int, int]:
    """The kernel's (rows, columns): (M, N), or (N, M) under swap-AB (Cᵀ = Bᵀ · Aᵀ)."""
    check_schedule(s)
    check_int("M", M, 1)
    check_int("N", N, 1)
    return (N, M) if s.is_swap_ab else (M, N)


def num_tiles_m(M: int, s: Schedule) -> int:
    """Tiles along the kernel's rows: ⌈M / block_m⌉ (M >= 1)."""
    check_schedule(s)
    check_int("M", M, 1)
    return cdiv(M, s.block_m)


def num_tiles_n(N: int, s: Schedule) -> int:
    """Tiles along the kernel's columns: ⌈N / block_n⌉ (N >= 1)."""
    check_schedule(s)
    check_int("N", N, 1)
    return cdiv(N, s.block_n)


def num_k_iters(K: int, s: Schedule) -> int:
    """K-iterations per tile: max(1, ⌈K / block_k⌉). K = 0 still runs one fully masked
    iteration, so every output tile is written (zeros, then the epilogue)."""
    check_schedule(s)
    check_int("K", K, 0)
    return max(1, cdiv(K, s.block_k))


def num_tiles(M: int, N: int, s: Schedule) -> int:
    """Output tiles of the kernel's problem: tiles_m · tiles_n after swap-AB."""
    rows, cols = problem_shape(M, N, s)
    return num_tiles_m(rows, s) * num_tiles_n(cols, s)


def grouped_coords(tile_id: int, tiles_m: int, tiles_n: int, group_size: int, raster: str = "m") -> tuple[int, int]:
    """Linear tile id → (pid_m, pid_n) with the GROUP_SIZE_M swizzle.

    raster "m" (Triton tutorial / tritonBLAS), with G = group_size:
        width   = G · tiles_n                     tiles per group of G tile-rows
        first_m = (tile_id // width) · G
        rows    = min(tiles_m - first_m, G)       the last group may be ragged
        pid_m   = first_m + (tile_id % width) % rows
        pid_n   = (tile_id % width) // rows
    raster "n" is the mirror (swap the roles of m and n). A bijection of
    [0, tiles_m · tiles_n) onto the tile grid.
    """
    check_int("tiles_m", tiles_m, 1)
    check_int("tiles_n", tiles_n, 1)
    check_int("group_size", group_size, 1)
    check_index("tile_id", tile_id, tiles_m * tiles_n, "total tiles")
    if raster == "m":
        major, minor = tiles_m, tiles_n
    elif raster == "n":
        major, minor = tiles_n, tiles_m
    else:
        raise ValueError(f"raster must be 'm' or 'n', got {raster!r}")
    width = group_size * minor
    first = (tile_id // width) * group_size
    rows = min(major - first, group_size)
    fast = first + (tile_id % width) % rows
    slow = (tile_id % width) // rows
    return (fast, slow) if raster == "m" else (slow, fast)


def tile_coords(tile_id: int, M: int, N: int, s: Schedule) -> tuple[int, int]:
    """Tile id → (pid_m, pid_n) of the kernel's problem under s's raster (see grouped_coords)."""
    rows, cols = problem_shape(M, N, s)
    return grouped_coords(tile_id, num_tiles_m(rows, s), num_tiles_n(cols, s), s.group_size_m, s.raster)


def chiplet_transform(pid: int, num_workgroups: int, num_xcds: int) -> int:
    """XCD-contiguous remapping (tritonBLAS ``chiplet_transform``). The hardware deals
    workgroup pid to XCD pid % X; this gives each XCD one contiguous block of new ids:
        xcd = pid % X,  pos = pid // X
        new = xcd · (W // X) + min(xcd, W % X) + pos
    A permutation of [0, W) (W = num_workgroups, X = num_xcds)."""
    check_int("num_workgroups", num_workgroups, 1)
    check_int("num_xcds", num_xcds, 1)
    check_index("pid", pid, num_workgroups, "num_workgroups")
    xcd, pos = pid % num_xcds, pid // num_xcds
    return xcd * (num_workgroups // num_xcds) + min(xcd, num_workgroups % num_xcds) + pos


def chiplet_transform_chunked(pid: int, num_workgroups: int, num_xcds: int, chunk_size: int) -> int:
    """Chunked XCD remapping (tritonBLAS ``chiplet_transform_chunked``): each XCD gets runs
    of C consecutive new ids. With R = (W // (X · C)) · (X · C) (whole rounds of chunks):
        pid >= R:  new = pid                      (the tail stays in place)
        pid <  R:  local = pid // X,  xcd = pid % X
                   new = (local // C) · X · C + xcd · C + local % C
    tritonBLAS writes the tail test as pid > R; at pid = R both give R. chunk_size = 1 is the
    identity. A permutation of [0, W) (W = num_workgroups, X = num_xcds, C = chunk_size)."""
    check_int("num_workgroups", num_workgroups, 1)
    check_int("num_xcds", num_xcds, 1)
    check_int("chunk_size", chunk_size, 1)
    check_index("pid", pid, num_workgroups, "num_workgroups")
    round_size = num_xcds * chunk_size
    if pid >= (num_workgroups // round_size) * round_size:
        return pid
    local, xcd = pid // num_xcds, pid % num_xcds
    return (local // chunk_size) * round_size + xcd * chunk_size + local % chunk_size


def persistent_tile_range(pid: int, num_programs: int, total_tiles: int) -> range:
    """Tiles of logical program pid in a persistent loop: range(pid, total_tiles, num_programs)."""
    check_int("num_programs", num_programs, 1)
    check_int("total_tiles", total_tiles, 0)
    check_index("pid", pid, num_programs, "num_programs")
    return range(pid, total_tiles, num_programs)
