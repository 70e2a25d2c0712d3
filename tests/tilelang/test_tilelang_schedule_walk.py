"""ScheduleContext's division-free walks (``plain_raster``, ``one_wave``) and its split-K units and
ranges evaluated on the CPU with TVM's simplifier on concrete sizes, against the host reference in
tlgemm.schedules. The GEMM kernels take these wherever they hold (``kernels._walk_tiles``,
``kernels._walk_split``), so a wrong condition, tile or range here would be wrong on the GPU."""
import types

import tilelang
from hypothesis import given, settings
from hypothesis import strategies as st

from tlgemm.schedules import (Schedule, grouped_coords, num_k_iters, num_programs, num_tiles_m, num_tiles_n,
                              tile_coords, work)
from tlgemm.tilelang.stages import ScheduleContext

analyzer = tilelang.tvm.arith.Analyzer()


def _value(expr) -> int:
    """A TIR expression of constants, folded to a Python int (bool for conditions)."""
    folded = analyzer.simplify(expr) if not isinstance(expr, (bool, int)) else expr
    return int(folded)


def _context(M, N, K, schedule, pid, programs, sms):
    return ScheduleContext(M, N, K, types.SimpleNamespace(schedule=schedule), pid, programs, sms)


sizes = dict(M=st.integers(1, 3000), N=st.integers(1, 3000), block_m=st.sampled_from([16, 64, 128, 256]),
             block_n=st.sampled_from([16, 32, 64, 112, 128, 256]), group=st.sampled_from([1, 2, 4, 8, 16]),
             raster=st.sampled_from(["m", "n"]))


@settings(max_examples=300, deadline=None)
@given(**sizes)
def test_plain_raster_tile_is_the_grouped_raster(M, N, block_m, block_n, group, raster):
    """Where ``plain_raster`` holds (one group along the fast axis, or one tile across it), every
    tile id maps to the tile of schedules.grouped_coords; it holds exactly there."""
    s = Schedule(block_m=block_m, block_n=block_n, block_k=128, group_size_m=group, raster=raster)
    tiles_m, tiles_n = num_tiles_m(M, s), num_tiles_n(N, s)
    major, minor = (tiles_m, tiles_n) if raster == "m" else (tiles_n, tiles_m)
    sched = _context(M, N, 128, s, 0, 1, None)
    plain = bool(_value(sched.plain_raster()))
    assert plain == (major <= group or minor == 1)
    if plain:
        for tile_id in range(tiles_m * tiles_n):
            tile = sched.plain_raster_tile(tile_id)
            assert (_value(tile.pid_m), _value(tile.pid_n)) == grouped_coords(tile_id, tiles_m, tiles_n, group, raster)


@settings(max_examples=300, deadline=None)
@given(**sizes, sms=st.integers(1, 200), K=st.integers(1, 2048))
def test_one_wave_is_one_tile_per_program(M, N, block_m, block_n, group, raster, sms, K):
    """Where ``one_wave`` holds, the persistent grid is the tile count and program p's whole walk
    in the host reference (schedules.work) is the one tile ``plain_raster_tile(p)``; where it does
    not, the raster is not plain or some program would have another tile (or none)."""
    s = Schedule(block_m=block_m, block_n=block_n, block_k=128, group_size_m=group, raster=raster).persistent()
    tiles = num_tiles_m(M, s) * num_tiles_n(N, s)
    programs = num_programs(M, N, K, s, sms)
    sched = _context(M, N, K, s, 0, programs, sms)
    wave = bool(_value(sched.one_wave()))
    plain = bool(_value(sched.plain_raster()))
    assert wave == (plain and programs == tiles)
    if wave:
        iters = num_k_iters(K, s)
        for pid in range(programs):
            tile = _context(M, N, K, s, pid, programs, sms).plain_raster_tile(pid)
            assert work(pid, M, N, K, s, sms) == [(_value(tile.pid_m), _value(tile.pid_n), 0, iters)]


def test_one_wave_needs_the_persistent_grid():
    """Without ``persistent_sms`` (Stream-K's, split-K's or a batched grid) there is no one-wave walk."""
    s = Schedule(block_m=64, block_n=64, block_k=128).persistent()
    assert _context(64, 640, 256, s, 0, 10, None).one_wave() is False
    assert bool(_value(_context(64, 640, 256, s, 0, 10, 132).one_wave()))


@settings(max_examples=300, deadline=None)
@given(**sizes, splits=st.integers(2, 8), k_blocks=st.integers(1, 64))
def test_split_units_and_ranges_are_the_host_split_k(M, N, block_m, block_n, group, raster, splits, k_blocks):
    """Under split-K every program's K range (``split_unit``, ``split_k_range``) and, where
    ``plain_raster`` holds, its tile (``plain_raster_tile``, as ``_walk_split`` takes it) are its
    one work item in schedules.work, for unequal parts too (K-iterations no multiple of the
    parts). Elsewhere the tile comes from the host reference: ``get_tile_from_idx`` binds
    variables, which needs TileLang's IR builder (the GPU trace tests cover it)."""
    K = 128 * max(k_blocks, splits)
    s = Schedule(block_m=block_m, block_n=block_n, block_k=128, group_size_m=group, raster=raster).splitk(splits)
    programs = num_programs(M, N, K, s)
    for pid in range(programs):
        sched = _context(M, N, K, s, pid, programs, None)
        tile_id, split = sched.split_unit()
        if _value(sched.plain_raster()):
            tile = sched.plain_raster_tile(tile_id)
            coords = (_value(tile.pid_m), _value(tile.pid_n))
        else:
            coords = tile_coords(_value(tile_id), M, N, s)
        begin, end = sched.split_k_range(split)
        assert work(pid, M, N, K, s) == [(*coords, _value(begin), _value(end))], (pid, s)
