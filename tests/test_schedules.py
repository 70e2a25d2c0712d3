"""tlgemm.schedules: Schedule validation and chaining, hand-worked known answers, and
hypothesis properties of the host reference (tile order, chiplet transforms, work coverage)."""

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tlgemm.schedules import (
    Schedule,
    WorkItem,
    chiplet_transform,
    chiplet_transform_chunked,
    fixup_owner,
    get_iter,
    grouped_coords,
    iter_owner,
    logical_program,
    num_k_iters,
    num_programs,
    num_splits,
    num_tiles,
    persistent_programs,
    persistent_tile_range,
    select,
    problem_shape,
    split_k_range,
    streamk_iter_range,
    streamk_plan,
    tile_contributors,
    tile_coords,
    work,
)

# ---------------------------------------------------------------------------------------
# Schedule: construction, validation, chainable primitives
# ---------------------------------------------------------------------------------------


def test_chain_equals_constructor():
    chained = (Schedule.default().block(m=128, n=256).tensorize(k=64).map("grouped", 8)
               .stages(4).warpgroups(2).persistent())
    assert chained == Schedule(block_m=128, block_n=256, block_k=64, group_size_m=8, raster="m",
                               num_stages=4, num_warpgroups=2, is_persistent=True)
    assert chained.threads == 384  # 2 consumer warpgroups + 1 producer, 128 threads each
    assert chained.consumer_warps == 8


def test_chain_primitives_each_set_their_field():
    s = Schedule.default()
    assert s == Schedule()
    assert s.persistent(132) == Schedule(is_persistent=True, num_sms=132)
    assert s.streamk(5) == Schedule(is_persistent=True, streamk_tiles=5)  # Stream-K implies persistent
    assert s.splitk(4) == Schedule(split_k=4)
    assert s.chiplet(8, 2) == Schedule(num_xcds=8, chunk_size=2)
    assert s.swap_ab() == Schedule(is_swap_ab=True)
    assert s.swap_ab().swap_ab(False) == s
    assert s.block(n=64) == Schedule(block_n=64)
    assert s.map("row") == Schedule(raster="m", group_size_m=1)
    assert s.map("column") == Schedule(raster="n", group_size_m=1)
    assert s.map("grouped_n", 4) == Schedule(raster="n", group_size_m=4)
    assert s.map("row").map("grouped") == Schedule(group_size_m=8)
    # primitives return new objects; the original is unchanged (frozen)
    assert s.stages(5) is not s and s.num_stages == 3
    with pytest.raises(AttributeError):
        s.block_m = 64  # type: ignore[misc]


def test_to_dict_roundtrip():
    s = Schedule(block_n=256, is_persistent=True, num_sms=132, streamk_tiles=7, is_swap_ab=True)
    assert Schedule.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError, match="unknown field"):
        Schedule.from_dict({**s.to_dict(), "warps": 4})


def test_parse_inverts_str():
    schedules = [Schedule(), Schedule(block_n=176, num_stages=5, num_warpgroups=2, is_persistent=True, num_sms=132),
                 Schedule(block_n=256, is_persistent=True, streamk_tiles=92), Schedule(split_k=4),
                 Schedule(block_m=64, block_n=16, is_swap_ab=True, is_persistent=True, num_sms=132, streamk_tiles=56),
                 Schedule(raster="n", group_size_m=4).chiplet(8, 4),
                 Schedule(block_n=256, num_warpgroups=2, is_persistent=True, cluster_m=2)]
    for s in schedules:
        assert Schedule.parse(str(s)) == s, str(s)
    with pytest.raises(ValueError, match="does not start with"):
        Schedule.parse("128 x 256")
    with pytest.raises(ValueError, match="unknown word 'warps=4'"):
        Schedule.parse("128x256x64 warps=4")
    with pytest.raises(ValueError, match="block_n must be a multiple of 16"):
        Schedule.parse("128x40x64")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"block_m": 96}, r"block_m must be a power of two in \[16, 256\], got 96"),
        ({"block_n": 512}, r"block_n must be a multiple of 16 in \[16, 256\], got 512"),
        ({"block_n": 40}, r"block_n must be a multiple of 16 in \[16, 256\], got 40"),
        ({"block_k": 8}, r"block_k must be a power of two"),
        ({"block_m": 128.0}, r"block_m must be an int"),
        ({"group_size_m": 0}, r"group_size_m must be >= 1"),
        ({"group_size_m": 2**31}, r"group_size_m must be <= 2\*\*31 - 1 \(the kernels take it as an int32\)"),
        ({"num_xcds": 2**31}, r"num_xcds must be <= 2\*\*31 - 1"),
        ({"is_persistent": True, "streamk_tiles": 10**11}, r"streamk_tiles must be <= 2\*\*31 - 1"),
        ({"raster": "x"}, r"raster must be one of"),
        ({"num_stages": 0}, r"num_stages must be >= 1"),
        ({"num_warpgroups": 0}, r"num_warpgroups must be >= 1"),
        ({"num_warpgroups": 8}, r"needs 1152 threads"),
        ({"is_persistent": 1}, r"is_persistent must be a bool"),
        ({"num_sms": 132}, r"num_sms applies to persistent schedules only"),
        ({"is_persistent": True, "num_sms": 0}, r"num_sms must be >= 1"),
        ({"streamk_tiles": 3}, r"streamk_tiles > 0 needs is_persistent=True"),
        ({"streamk_tiles": -1}, r"streamk_tiles must be >= 0"),
        ({"is_persistent": True, "streamk_tiles": 3, "split_k": 2}, r"cannot be combined"),
        ({"split_k": 0}, r"split_k must be >= 1"),
        ({"num_xcds": 0}, r"num_xcds must be >= 1"),
        ({"chunk_size": 0}, r"chunk_size must be >= 1"),
        ({"is_swap_ab": "yes"}, r"is_swap_ab must be a bool"),
        ({"is_persistent": True, "cluster_m": 4}, r"cluster_m must be one of \(1, 2\), got 4"),
        ({"cluster_m": 2}, r"cluster_m > 1 needs a persistent schedule without Stream-K or split-K"),
        ({"is_persistent": True, "streamk_tiles": 3, "cluster_m": 2}, r"cluster_m > 1 needs a persistent schedule"),
    ],
)
def test_invalid_schedule_raises(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Schedule(**kwargs)


def test_block_n_takes_multiples_of_16():
    """block_n: any multiple of 16 in [16, 256] (the block-scaled kernel's 112, 144, 160...);
    has_pow2_block_n tells the kernels that need a power of two."""
    s = Schedule(block_n=160)
    assert not s.has_pow2_block_n and Schedule(block_n=128).has_pow2_block_n
    assert Schedule.from_dict(s.to_dict()) == s and "x160x" in str(s)


def test_invalid_chain_steps_raise():
    with pytest.raises(ValueError, match="block_m must be a power of two"):
        Schedule.default().block(m=100)
    with pytest.raises(ValueError, match="map kind must be one of"):
        Schedule.default().map("diagonal")
    with pytest.raises(ValueError, match=r"map\('row'\) takes no group_size"):
        Schedule.default().map("row", 4)
    with pytest.raises(ValueError, match="cannot be combined"):
        Schedule.default().splitk(2).streamk(4)


def test_invalid_problem_arguments_raise():
    s = Schedule()
    with pytest.raises(ValueError, match="M must be >= 1"):
        num_tiles(0, 10, s)
    with pytest.raises(ValueError, match="K must be >= 0"):
        num_k_iters(-1, s)
    with pytest.raises(ValueError, match="pid must be < num_programs=4"):
        work(4, 256, 256, 64, s)  # 2x2 tiles -> 4 programs
    with pytest.raises(ValueError, match="needs the device's SM count"):
        num_programs(256, 256, 64, s.persistent())
    with pytest.raises(ValueError, match="tile_id must be < total tiles=6"):
        grouped_coords(6, 2, 3, 8)
    with pytest.raises(ValueError, match="split_idx must be < num_splits=2"):
        split_k_range(2, 128, s.splitk(4))  # K=128 -> 2 iterations -> 2 splits


# ---------------------------------------------------------------------------------------
# Known answers, worked out by hand
# ---------------------------------------------------------------------------------------


def test_grouped_raster_known_answer_with_ragged_group():
    # 3x2 tiles, G=2. Group 0 = tile-rows {0,1} (4 tiles, pid_m fastest): (0,0) (1,0) (0,1) (1,1).
    # Group 1 = tile-row {2} alone (ragged, rows=min(3-2, 2)=1): (2,0) (2,1).
    assert [grouped_coords(t, 3, 2, 2, "m") for t in range(6)] == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]
    # Mirror: 2x3 tiles, groups of 2 tile-columns, pid_n fastest.
    assert [grouped_coords(t, 2, 3, 2, "n") for t in range(6)] == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (1, 2)]
    # G=1: raster "m" is row-major (pid_n fastest), raster "n" is column-major.
    assert [grouped_coords(t, 2, 3, 1, "m") for t in range(6)] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert [grouped_coords(t, 2, 3, 1, "n") for t in range(6)] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]


def test_tile_and_iteration_counts():
    s = Schedule()  # 128x128x64
    assert num_tiles(1, 1, s) == 1
    assert num_tiles(129, 256, s) == 2 * 2
    assert num_k_iters(0, s) == 1  # K=0 still writes every tile (one fully masked iteration)
    assert num_k_iters(64, s) == 1 and num_k_iters(65, s) == 2
    assert problem_shape(1, 300, s.swap_ab()) == (300, 1)


def test_chiplet_transform_known_answers():
    # W=8, X=4: xcd=pid%4, pos=pid//4, offset=2*xcd -> XCD0 gets {0,1}, XCD1 {2,3}, ...
    assert [chiplet_transform(p, 8, 4) for p in range(8)] == [0, 2, 4, 6, 1, 3, 5, 7]
    # W=5, X=2: min_per_xcd=2, extra=1 -> XCD0 (pids 0,2,4) gets {0,1,2}, XCD1 (pids 1,3) gets {3,4}.
    assert [chiplet_transform(p, 5, 2) for p in range(5)] == [0, 3, 1, 4, 2]


def test_chiplet_transform_chunked_known_answers():
    # W=8, X=2, C=2: new = (local//2)*4 + xcd*2 + local%2 with local=pid//2, xcd=pid%2.
    assert [chiplet_transform_chunked(p, 8, 2, 2) for p in range(8)] == [0, 2, 1, 3, 4, 6, 5, 7]
    # W=10: R = (10 // 4) * 4 = 8 -> pids 8 and 9 stay.
    assert [chiplet_transform_chunked(p, 10, 2, 2) for p in range(10)] == [0, 2, 1, 3, 4, 6, 5, 7, 8, 9]
    # chunk_size=1 is the identity (tritonBLAS semantics).
    assert [chiplet_transform_chunked(p, 12, 4, 1) for p in range(12)] == list(range(12))
    # chunk_size = W/X equals the plain transform.
    assert [chiplet_transform_chunked(p, 8, 4, 2) for p in range(8)] == [chiplet_transform(p, 8, 4) for p in range(8)]


def test_persistent_known_answer():
    # M=256, N=384, 128x128 tiles -> 2x3 tiles; G=8 -> one ragged group of 2 rows: tile t = (t%2, t//2).
    # num_sms=4: ceil(6/4) = 2 rounds, which P = ceil(6/2) = 3 programs keep; program p runs tiles p, p+3.
    s = Schedule().persistent(4)
    assert num_programs(256, 384, 64, s) == 3
    assert persistent_tile_range(1, 3, 6) == range(1, 6, 3)
    assert work(0, 256, 384, 64, s) == [WorkItem(0, 0, 0, 1), WorkItem(1, 1, 0, 1)]
    assert work(1, 256, 384, 64, s) == [WorkItem(1, 0, 0, 1), WorkItem(0, 2, 0, 1)]
    assert work(2, 256, 384, 64, s) == [WorkItem(0, 1, 0, 1), WorkItem(1, 2, 0, 1)]
    # Raster "n" keeps min(num_sms, tiles); more SMs than tiles: the grid shrinks to the 6 tiles.
    assert num_programs(256, 384, 64, replace(s, raster="n")) == 4
    assert num_programs(256, 384, 64, s.persistent(132)) == 6


def test_persistent_with_chiplet_known_answer():
    # 2x4 tiles (N=512), tile t = (t%2, t//2); num_sms=4 keeps P=4 (2 rounds); 2 XCDs in chunks of 2:
    # R=4, lpid = [0, 2, 1, 3].
    s = Schedule().persistent(4).chiplet(2, 2)
    assert num_programs(256, 512, 64, s) == 4
    assert [logical_program(p, 4, s) for p in range(4)] == [0, 2, 1, 3]
    assert work(1, 256, 512, 64, s) == [WorkItem(0, 1, 0, 1), WorkItem(0, 3, 0, 1)]  # lpid 2 -> tiles 2, 6
    assert work(2, 256, 512, 64, s) == [WorkItem(1, 0, 0, 1), WorkItem(1, 2, 0, 1)]  # lpid 1 -> tiles 1, 5


def test_streamk_known_answer():
    # M=N=256, 128x128 tiles -> 4 tiles: 0=(0,0) 1=(1,0) 2=(0,1) 3=(1,1). K=320 -> I=5.
    # num_sms=3, streamk_tiles=2: F=2 full tiles (tiles 0, 1 on programs 0, 1).
    # G=2*5=10 Stream-K iterations from F*I=10: q=3, r=1 -> program 0: [10,14), 1: [14,17), 2: [17,20).
    # Tile 2 = iterations 10..14, tile 3 = 15..19.
    s = Schedule().streamk(2)
    plan = streamk_plan(256, 256, 320, s, num_sms=3)
    assert (plan.num_programs, plan.full_tiles, plan.streamk_tiles, plan.iters_per_tile) == (3, 2, 2, 5)
    assert (plan.iters_per_program, plan.remainder_iters) == (3, 1)
    assert [streamk_iter_range(p, plan) for p in range(3)] == [range(10, 14), range(14, 17), range(17, 20)]
    assert get_iter(14, 5) == (2, 4) and get_iter(15, 5) == (3, 0)
    assert work(0, 256, 256, 320, s, num_sms=3) == [WorkItem(0, 0, 0, 5), WorkItem(0, 1, 0, 4)]
    assert work(1, 256, 256, 320, s, num_sms=3) == [WorkItem(1, 0, 0, 5), WorkItem(0, 1, 4, 5), WorkItem(1, 1, 0, 2)]
    assert work(2, 256, 256, 320, s, num_sms=3) == [WorkItem(1, 1, 2, 5)]
    # Fix-up: tile 2 is started by program 0 (owner) and finished by 1; tile 3 by 1 then 2.
    assert [fixup_owner(t, plan) for t in range(4)] == [0, 1, 0, 1]
    assert [tile_contributors(t, plan) for t in (2, 3)] == [range(0, 2), range(1, 3)]
    assert [iter_owner(g, plan) for g in range(10, 20)] == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_streamk_fewer_iterations_than_programs_known_answer():
    # 1 tile (M=N=K=64 with 64x64x16 tiles -> I=4), num_sms=6, streamk_tiles=1 (>= tiles is clipped to 1).
    # G=4, q=0, r=4: programs 0..3 get one iteration each, programs 4, 5 nothing.
    s = Schedule(block_m=64, block_n=64, block_k=16).streamk(9)
    plan = streamk_plan(64, 64, 64, s, num_sms=6)
    assert (plan.full_tiles, plan.streamk_tiles, plan.iters_per_program, plan.remainder_iters) == (0, 1, 0, 4)
    assert [work(p, 64, 64, 64, s, num_sms=6) for p in range(6)] == [
        [WorkItem(0, 0, 0, 1)], [WorkItem(0, 0, 1, 2)], [WorkItem(0, 0, 2, 3)], [WorkItem(0, 0, 3, 4)], [], []]
    assert tile_contributors(0, plan) == range(0, 4)


def test_split_k_known_answer():
    # One 128x128 tile, K=640 -> I=10, split_k=3: q=3, r=1 -> [0,4) [4,7) [7,10); program = tile*3 + split.
    s = Schedule().splitk(3)
    assert num_programs(128, 128, 640, s) == 3
    assert [split_k_range(j, 640, s) for j in range(3)] == [range(0, 4), range(4, 7), range(7, 10)]
    assert [work(p, 128, 128, 640, s) for p in range(3)] == [
        [WorkItem(0, 0, 0, 4)], [WorkItem(0, 0, 4, 7)], [WorkItem(0, 0, 7, 10)]]
    # Two tiles (N=256): units tile-major -> program 4 = tile 1, split 1 = (0, 1), [4, 7).
    assert work(4, 128, 256, 640, s) == [WorkItem(0, 1, 4, 7)]
    # split_k larger than the iterations: K=128 -> I=2 -> only 2 splits, no empty program.
    assert num_splits(128, s.splitk(4)) == 2 and num_programs(128, 128, 128, s.splitk(4)) == 2


def test_swap_ab_known_answer():
    # M=1, N=300, 128x16 tiles, swap-AB: kernel problem (300, 1) -> 3x1 tiles, raster m:
    # tiles 0, 1, 2 = (0,0) (1,0) (2,0); pid_m indexes N.
    s = Schedule(block_m=128, block_n=16).swap_ab()
    assert num_programs(1, 300, 64, s) == 3
    assert [work(p, 1, 300, 64, s) for p in range(3)] == [[WorkItem(0, 0, 0, 1)], [WorkItem(1, 0, 0, 1)],
                                                          [WorkItem(2, 0, 0, 1)]]
    assert tile_coords(2, 1, 300, s) == (2, 0)


# ---------------------------------------------------------------------------------------
# Transcriptions of the tritonBLAS device code (independent of our implementation)
# ---------------------------------------------------------------------------------------


def _tritonblas_tile(tile_id, num_pid_m, num_pid_n, GROUP_SIZE_M):
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((tile_id % num_pid_in_group) % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


def _tritonblas_chunked(pid, num_workgroups, num_xcds, chunk_size):
    if pid > (num_workgroups // (num_xcds * chunk_size)) * (num_xcds * chunk_size):
        return pid
    local_pid = pid // num_xcds
    chunk_idx = local_pid // chunk_size
    pos_in_chunk = local_pid % chunk_size
    xcd = pid % num_xcds
    return chunk_idx * num_xcds * chunk_size + xcd * chunk_size + pos_in_chunk


def _tritonblas_streamk(pid, M, N, K, BM, BN, BK, G, NUM_SMS, STREAMK_TILES):
    """tritonBLAS streamk_matmul's loops, recording (pid_m, pid_n, k_begin, k_end)."""
    num_pid_m, num_pid_n = -(-M // BM), -(-N // BN)
    total_tiles = num_pid_m * num_pid_n
    total_full_tiles = total_tiles - STREAMK_TILES
    out = []
    for tile_id in range(pid, total_full_tiles, NUM_SMS):
        out.append((*_tritonblas_tile(tile_id, num_pid_m, num_pid_n, G), 0, -(-K // BK)))
    iters_per_tile = -(-K // BK)
    total_streamk_iters = STREAMK_TILES * iters_per_tile
    pcu, rem = total_streamk_iters // NUM_SMS, total_streamk_iters % NUM_SMS
    start_iter = total_full_tiles * iters_per_tile + pid * pcu + min(pid, rem)
    last_iter = total_full_tiles * iters_per_tile + (pid + 1) * pcu + min(pid + 1, rem)
    while start_iter < last_iter:
        remainder = start_iter % iters_per_tile
        end_iter = min(start_iter + (iters_per_tile - remainder), last_iter)
        tile_id = start_iter // iters_per_tile
        out.append((*_tritonblas_tile(tile_id, num_pid_m, num_pid_n, G), remainder,
                    remainder + end_iter - start_iter))
        start_iter = end_iter
    return out


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 30), st.integers(1, 30), st.integers(1, 12), st.data())
def test_grouped_raster_matches_tritonblas(tiles_m, tiles_n, group, data):
    tile = data.draw(st.integers(0, tiles_m * tiles_n - 1))
    assert grouped_coords(tile, tiles_m, tiles_n, group, "m") == _tritonblas_tile(tile, tiles_m, tiles_n, group)
    # raster "n" is the transpose of raster "m" on the transposed grid
    pm, pn = grouped_coords(tile, tiles_n, tiles_m, group, "m")
    assert grouped_coords(tile, tiles_m, tiles_n, group, "n") == (pn, pm)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 400), st.integers(1, 16), st.integers(1, 8), st.data())
def test_chiplet_chunked_matches_tritonblas(workgroups, xcds, chunk, data):
    pid = data.draw(st.integers(0, workgroups - 1))
    assert chiplet_transform_chunked(pid, workgroups, xcds, chunk) == _tritonblas_chunked(pid, workgroups, xcds, chunk)


@given(units=st.integers(0, 5000), sms=st.integers(1, 200))
def test_persistent_programs_keep_the_rounds(units, sms):
    rounds = -(-units // sms)
    grid = persistent_programs(units, sms, "m")
    assert persistent_programs(units, sms, "n") == min(sms, units)
    assert grid <= min(sms, units) and (grid == 0) == (units == 0)
    if units:
        assert -(-units // grid) == rounds, "a program runs as many units as the busiest on num_sms programs"
        assert grid == 1 or -(-units // (grid - 1)) > rounds, "one program fewer would add a round"
        assert persistent_programs(units, grid, "m") == grid


def test_persistent_programs_examples():
    assert [persistent_programs(u, 132, "m") for u in (100, 132, 133, 352, 512, 896, 2048, 6144)] == \
        [100, 132, 67, 118, 128, 128, 128, 131]


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 400), n=st.integers(1, 400), k=st.integers(1, 600), bm=st.sampled_from([16, 32, 64]),
       bn=st.sampled_from([16, 32, 64]), bk=st.sampled_from([16, 32, 64]), group=st.integers(1, 9),
       sms=st.integers(1, 40), data=st.data())
def test_streamk_work_matches_tritonblas(m, n, k, bm, bn, bk, group, sms, data):
    tiles = -(-m // bm) * -(-n // bn)
    streamk = data.draw(st.integers(0, tiles))
    s = Schedule(block_m=bm, block_n=bn, block_k=bk, group_size_m=group, is_persistent=True, num_sms=sms,
                 streamk_tiles=streamk)
    grid = sms
    if streamk == 0:  # tritonBLAS launches num_sms programs; ours shrinks a plain persistent grid (raster "m")
        grid = num_programs(m, n, k, s)
        assert grid == persistent_programs(tiles, sms, "m")
        s = s.streamk(0)
    for pid in range(num_programs(m, n, k, s)):
        expected = [WorkItem(*item) for item in _tritonblas_streamk(pid, m, n, k, bm, bn, bk, group, grid, streamk)]
        assert work(pid, m, n, k, s) == expected


# ---------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(1, 12), st.sampled_from(["m", "n"]))
def test_grouped_raster_is_a_bijection(tiles_m, tiles_n, group, raster):
    coords = [grouped_coords(t, tiles_m, tiles_n, group, raster) for t in range(tiles_m * tiles_n)]
    assert sorted(coords) == [(i, j) for i in range(tiles_m) for j in range(tiles_n)]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 500), st.integers(1, 16), st.integers(1, 8))
def test_chiplet_transforms_are_permutations(workgroups, xcds, chunk):
    assert sorted(chiplet_transform(p, workgroups, xcds) for p in range(workgroups)) == list(range(workgroups))
    assert sorted(chiplet_transform_chunked(p, workgroups, xcds, chunk)
                  for p in range(workgroups)) == list(range(workgroups))


MODES = ("data-parallel", "persistent", "stream-k", "split-k", "persistent split-k")


@st.composite
def problems(draw, modes=MODES):
    """A random (M, N, K, schedule, num_sms) with a few hundred tiles at most."""
    mode = draw(st.sampled_from(modes))
    s = Schedule(
        block_m=draw(st.sampled_from([16, 32, 64, 128])),
        block_n=draw(st.sampled_from([16, 32, 64, 128])),
        block_k=draw(st.sampled_from([16, 32, 64])),
        group_size_m=draw(st.integers(1, 10)),
        raster=draw(st.sampled_from(["m", "n"])),
        is_swap_ab=draw(st.booleans()),
    )
    xcds = draw(st.sampled_from([1, 1, 2, 4, 8]))
    s = s.chiplet(xcds, draw(st.integers(1, 4)) if xcds > 1 else 1)
    # extents from tile counts, with ragged last tiles (K = 0 included)
    rows = draw(st.integers(1, 20)) * s.block_m - draw(st.integers(0, s.block_m - 1))
    cols = draw(st.integers(1, 20)) * s.block_n - draw(st.integers(0, s.block_n - 1))
    M, N = (cols, rows) if s.is_swap_ab else (rows, cols)
    K = max(0, draw(st.integers(0, 24)) * s.block_k - draw(st.integers(0, s.block_k - 1)))
    sms = draw(st.integers(1, 48))
    if mode in ("persistent", "stream-k", "persistent split-k"):
        s = s.persistent(draw(st.sampled_from([None, sms])))
    if mode == "stream-k":
        s = s.streamk(draw(st.integers(1, num_tiles(M, N, s) + 3)))  # may exceed the tiles (clipped)
    if mode in ("split-k", "persistent split-k"):
        s = s.splitk(draw(st.integers(2, 12)))
    return M, N, K, s, sms


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_every_tile_and_iteration_is_covered_exactly_once(problem):
    M, N, K, s, sms = problem
    rows, cols = (N, M) if s.is_swap_ab else (M, N)
    tiles_m, tiles_n = -(-rows // s.block_m), -(-cols // s.block_n)
    iters = max(1, -(-K // s.block_k))
    programs = num_programs(M, N, K, s, num_sms=sms)
    covered = Counter()
    stores = Counter()  # steps starting at K-iteration 0: one per tile (its owner / first split)
    per_program = [work(pid, M, N, K, s, num_sms=sms) for pid in range(programs)]
    for items in per_program:
        for pm, pn, kb, ke in items:
            assert 0 <= pm < tiles_m and 0 <= pn < tiles_n and 0 <= kb < ke <= iters
            covered.update((pm, pn, k) for k in range(kb, ke))
            stores[pm, pn] += kb == 0
    assert covered == Counter({(i, j, k): 1 for i in range(tiles_m) for j in range(tiles_n) for k in range(iters)})
    assert stores == Counter({(i, j): 1 for i in range(tiles_m) for j in range(tiles_n)})
    if s.streamk_tiles == 0 and s.is_persistent:
        assert all(per_program), "a persistent grid has no idle program (P = persistent_programs(...) <= units)"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(modes=("stream-k",)))
def test_streamk_fixup_ownership(problem):
    """The owner runs iteration 0; contributors are consecutive logical ids; each program has at
    most one non-owner (partial) segment and it is its first Stream-K segment (one workspace
    slot and one flag per program suffice)."""
    M, N, K, s, sms = problem
    plan = streamk_plan(M, N, K, s, num_sms=sms)
    ids = {tile_coords(t, M, N, s): t for t in range(plan.total_tiles)}
    owners, contributors = {}, {}
    for pid in range(plan.num_programs):
        lpid = logical_program(pid, plan.num_programs, s)
        items = work(pid, M, N, K, s, num_sms=sms)
        full = len(persistent_tile_range(lpid, plan.num_programs, plan.full_tiles))
        partial = [i for i, item in enumerate(items) if item.k_begin > 0]
        assert partial in ([], [full]), "only the first Stream-K segment may continue a tile"
        for pm, pn, kb, _ in items:
            tile = ids[pm, pn]
            contributors.setdefault(tile, set()).add(lpid)
            if kb == 0:
                owners[tile] = lpid
        g = streamk_iter_range(lpid, plan)
        assert all(iter_owner(x, plan) == lpid for x in g)
    for tile in range(plan.total_tiles):
        assert fixup_owner(tile, plan) == owners[tile]
        assert list(tile_contributors(tile, plan)) == sorted(contributors[tile])


@pytest.mark.parametrize("call, message", [
    (lambda: persistent_programs(5, 0, "m"), r"num_sms must be >= 1, got 0"),
    (lambda: persistent_programs(5, 0, "n"), r"num_sms must be >= 1, got 0"),
    (lambda: persistent_programs(5.5, 2, "m"), r"units must be an int"),
    (lambda: persistent_programs(5, 3, "diagonal"), r"raster must be one of \('m', 'n'\), got 'diagonal'"),
    (lambda: num_programs(256, 256, 256, Schedule().persistent().streamk(4), num_sms=2**40),
     r"num_sms must be <= 2\*\*31 - 1"),
    (lambda: num_programs(5, 5, 5, Schedule(), num_sms=-3), r"num_sms must be >= 1, got -3"),
    (lambda: num_programs(5, 5, 5, Schedule(), num_sms="x"), r"num_sms must be an int, got 'x'"),
    (lambda: work(0, 5, 5, 5, Schedule(), num_sms=True), r"num_sms must be an int, got True"),
    (lambda: num_programs(999, 999, 5, Schedule().persistent(4), num_sms=0), r"num_sms must be >= 1, got 0"),
    (lambda: num_tiles(256, 256, None), r"schedule must be a tlgemm.schedules.Schedule, got NoneType"),
    (lambda: Schedule().streamk("3"), r"Schedule.streamk_tiles must be an int, got '3'"),
    (lambda: Schedule(chunk_size=4), r"Schedule.chunk_size=4 applies only with num_xcds > 1"),
    (lambda: Schedule(block_m=64, block_n=64).persistent(8).cluster(2).chiplet(2, 2),
     r"cluster_m > 1 cannot be combined with num_xcds > 1"),
    (lambda: Schedule.from_dict({1: 2, "x": 3}), r"unknown field\(s\) 'x', 1$"),
    (lambda: Schedule.parse("128x128x64 persistent(abc)"), r"'abc' in the word 'persistent\(abc\)'.* not a decimal"),
    (lambda: Schedule.parse("128x128x64 stages=3.5"), r"'3.5' .* not a decimal integer"),
    (lambda: Schedule.parse("128x128x64 g=1_6"), r"'1_6' .* not a decimal integer"),
    (lambda: Schedule.parse("128x1_28x64"), r"'1_28' in the word '128x1_28x64' .* not a decimal integer"),
    (lambda: Schedule.parse("128x+128x64"), r"'\+128' .* not a decimal integer"),
    (lambda: Schedule.parse("\uff11\uff12\uff18x128x64"), r"not a decimal integer"),
    (lambda: Schedule.parse("0128x128x64"), r"'0128' .* not a decimal integer .*no leading zero"),
    (lambda: Schedule.parse("128x128"), r"does not start with <block_m>x<block_n>x<block_k>"),
    (lambda: Schedule().map("row", True), r"map\('row'\) takes no group_size \(it is 1\), got True"),
    (lambda: num_k_iters(256, None), r"schedule must be a tlgemm.schedules.Schedule, got NoneType"),
    (lambda: num_splits(256, None), r"schedule must be a tlgemm.schedules.Schedule, got NoneType"),
    (lambda: split_k_range(0, 256, None), r"schedule must be a tlgemm.schedules.Schedule, got NoneType"),
    (lambda: streamk_plan(256, 256, 256, None, num_sms=4), r"schedule must be a tlgemm.schedules.Schedule"),
    (lambda: iter_owner(0, None), r"plan must be a tlgemm.schedules.StreamKPlan \(streamk_plan\), got NoneType"),
    (lambda: fixup_owner(0, None), r"plan must be a tlgemm.schedules.StreamKPlan"),
    (lambda: tile_contributors(0, None), r"plan must be a tlgemm.schedules.StreamKPlan"),
    (lambda: streamk_iter_range(0, None), r"plan must be a tlgemm.schedules.StreamKPlan"),
    (lambda: logical_program(0, 1.5, Schedule()), r"num_programs must be an int, got 1.5"),
    (lambda: select(128, 128, 128, "bf16", 2**31, 232448), r"^num_sms must be <= 2\*\*31 - 1"),
    (lambda: Schedule.parse("128x128x64 g=4 g=2"), r"sets group_size_m a second time"),
    (lambda: Schedule.parse("128x128x64 xcds=8/chunk=2/chunk=3"), r"unknown word"),
])
def test_host_functions_name_bad_arguments(call, message):
    """Each used to return a wrong value (0 or -1 programs, a 2**40-program grid, an unknown
    raster taken as "n", a chunk_size that str() drops so parse(str(s)) != s), raise a bare
    ZeroDivisionError / AttributeError / TypeError, parse "g=1_6" as 16, or accept a num_sms
    argument of -3, "x" or True where the schedule does not read it."""
    with pytest.raises(ValueError, match=message):
        call()


def test_streamk_plan_fields_are_checked():
    plan = streamk_plan(256, 256, 256, Schedule(block_m=64, block_n=64).persistent(4).streamk(4))
    with pytest.raises(ValueError, match=r"StreamKPlan.num_programs must be >= 1"):
        replace(plan, num_programs=0)
    with pytest.raises(ValueError, match=r"global_iter must be an int"):
        iter_owner(2.5, plan)
    with pytest.raises(ValueError, match=r"full_tiles \+ streamk_tiles must be total_tiles, got 12 \+ 4 != 5"):
        replace(plan, total_tiles=5)
    with pytest.raises(ValueError, match=r"\(iters_per_program, remainder_iters\) must be divmod.* = \(4, 0\), "
                                         r"got \(2, 0\)"):
        replace(plan, iters_per_program=2)  # iter_owner divided by zero on such a hand-built plan


def test_spare_program_of_a_clustered_launch_has_no_work():
    """A 2-CTA clustered launch rounds an odd program count up to even (num_programs); the extra
    program's reference work is empty, as in the kernel, where work() refused its pid."""
    s = Schedule(is_persistent=True, num_sms=3, cluster_m=2)
    assert num_programs(384, 384, 64, s) == 3
    assert work(3, 384, 384, 64, s) == []
    with pytest.raises(ValueError, match=r"pid must be < 4 \(num_programs=3 rounded up to whole clusters of 2\), "
                                         r"got 4"):
        work(4, 384, 384, 64, s)
