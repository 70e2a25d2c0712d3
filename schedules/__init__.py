"""Backend-free tile schedules with host reference math (pure Python).

``Schedule`` says how a GEMM C[M, N] = A[M, K] · B[K, N] is cut into tiles and K-iterations
and spread over programs; the functions here are the reference every device kernel (TileLang
and Triton) must reproduce exactly: ``work(pid, M, N, K, s)`` lists, in order, the
(pid_m, pid_n, k_begin, k_end) steps of program pid (K in units of block_k, end exclusive).

    grid.py      tile counts, the grouped raster (tile id → (pid_m, pid_n)), chiplet
                 transforms, persistent tile ranges; swap-AB via problem_shape.
    decompose.py split-K ranges, Stream-K plan / iteration ranges / get_iter / fix-up owner,
                 num_programs (launch grid), logical program ids, work().
    selection.py analytical select(M, N, K, dtypes, num_sms, smem_bytes[, explain]).
    cache.py     AutotuneCache: on-disk, atomic, versioned store of tuned schedules.

Imports nothing outside the standard library.
"""

from .cache import CACHE_FORMAT, AutotuneCache, CacheWarning, default_cache_dir, m_bucket, shape_bucket
from .dtypes import DTYPE_BYTES, INPUT_DTYPES, canonical_dtype, gemm_dtypes
from .grid import (
    cdiv,
    chiplet_transform,
    chiplet_transform_chunked,
    grouped_coords,
    num_k_iters,
    num_tiles,
    num_tiles_m,
    num_tiles_n,
    persistent_tile_range,
    problem_shape,
    tile_coords,
)
from .schedule import BLOCK_K_SIZES, BLOCK_MN_SIZES, BLOCK_N_STEP, MAP_KINDS, RASTERS, Schedule
from .selection import MODES, Candidate, Selection, select, shared_memory_bytes, store_staging
from .decompose import (
    StreamKPlan,
    WorkItem,
    fixup_owner,
    get_iter,
    iter_owner,
    logical_program,
    num_programs,
    num_splits,
    persistent_programs,
    resolve_num_sms,
    split_k_range,
    streamk_iter_range,
    streamk_plan,
    tile_contributors,
    work,
)

__all__ = [
    "Schedule", "RASTERS", "MAP_KINDS", "BLOCK_MN_SIZES", "BLOCK_K_SIZES", "BLOCK_N_STEP",
    "cdiv", "problem_shape", "num_tiles_m", "num_tiles_n", "num_tiles", "num_k_iters",
    "grouped_coords", "tile_coords", "chiplet_transform", "chiplet_transform_chunked", "persistent_tile_range",
    "WorkItem", "num_splits", "split_k_range", "resolve_num_sms", "num_programs", "persistent_programs",
    "logical_program",
    "StreamKPlan", "streamk_plan", "streamk_iter_range", "get_iter", "iter_owner", "fixup_owner",
    "tile_contributors", "work",
    "select", "Selection", "Candidate", "MODES", "shared_memory_bytes", "store_staging",
    "DTYPE_BYTES", "INPUT_DTYPES", "canonical_dtype", "gemm_dtypes",
    "AutotuneCache", "CacheWarning", "CACHE_FORMAT", "default_cache_dir", "m_bucket", "shape_bucket",
]
