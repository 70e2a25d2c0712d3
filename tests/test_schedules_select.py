"""tlgemm.schedules.select: the analytical choice on the benchmark shapes (run with -s to see the
chosen schedules), its explanation, and its input checks."""

from dataclasses import replace

import pytest

from tlgemm.schedules import (
    Schedule,
    tile_coords,
    Selection,
    canonical_dtype,
    gemm_dtypes,
    num_programs,
    select,
    shared_memory_bytes,
    store_staging,
    work,
)
from tlgemm.schedules.selection import (CLOCK_GHZ, HBM_BYTES_PER_CLK, L2_BYTES, LATENCY_BOUND_MAX_M,
                                        MAX_LATENCY_STAGES, MAX_STAGES, OTHER_WIDTH_MARGIN, STAGES_TOLERANCE,
                                        STREAMING_HBM_BYTES_PER_CLK, STREAMING_WIDTH_MARGIN, SWAP_AB_CHARGE_CLK,
                                        WAVES_MIN_M, WEIGHT_STREAM_MAX_M, _in_waves, _score, _streamk_rereads,
                                        raster_group, width_margin)

H100_SMS = 132
H100_SMEM = 227 * 1024  # max dynamic shared memory per block on sm_90

SQUARE = [(n, n, n) for n in (1024, 2048, 4096, 8192, 16384)]
DEEPSEEK_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
DEEPSEEK = [(m, n, k) for n, k in DEEPSEEK_NK for m in (1, 16, 64, 128, 4096)]
BENCHMARK = [("bfloat16", shape) for shape in SQUARE + DEEPSEEK] + [("float8_e4m3fn", shape) for shape in DEEPSEEK]


def realised_balance(M, N, K, s, num_sms):
    """(busy SMs, SM efficiency) from the host reference itself: each program's K-iterations
    from work(); a grid larger than num_sms is dealt to the SMs in waves (pid % num_sms).
    Efficiency = all K-iterations / (num_sms · the busiest SM's K-iterations)."""
    load = [0] * num_sms
    for pid in range(num_programs(M, N, K, s, num_sms)):
        load[pid % num_sms] += sum(item.k_end - item.k_begin for item in work(pid, M, N, K, s, num_sms))
    return sum(1 for x in load if x), sum(load) / (num_sms * max(load))


def test_select_on_benchmark_shapes():
    rows = []
    for dtype, (M, N, K) in BENCHMARK:
        chosen = select(M, N, K, dtype, H100_SMS, H100_SMEM, explain=True)
        s = chosen.schedule
        assert isinstance(s, Schedule) and s == select(M, N, K, dtype, H100_SMS, H100_SMEM)
        smem = shared_memory_bytes(s, dtype)
        assert smem <= H100_SMEM, f"{M}x{N}x{K}: {s} needs {smem} B of shared memory"
        assert s.block_m % (64 * s.num_warpgroups) == 0  # every consumer warpgroup owns >= 64 rows (WGMMA M)
        busy, efficiency = realised_balance(M, N, K, s, H100_SMS)
        # Every shape has far more (tile, K-iteration) pairs than SMs, so the work must reach the
        # SMs: at least 80% of them busy, and at most a third of SM-time idle (wave quantisation
        # included) -- the model keeps a partial last wave where splitting it costs more in
        # fix-ups than it saves (measured on the H200: 4096x2112x7168 would split each Stream-K
        # tile 16 ways) -- and at most 5% once the problem alone has four waves of 128x256 tiles.
        # Not where the tiles stream the weights above the latency-bound M: there the model takes
        # a part of the SMs to draw the HBM bandwidth all of them would (measured on the H100).
        label = f"{M}x{N}x{K} {dtype}: {s} busy={busy} eff={efficiency:.2f}"
        if not LATENCY_BOUND_MAX_M < M <= WEIGHT_STREAM_MAX_M:
            assert busy >= 0.8 * H100_SMS and efficiency >= 0.65, label
        if M * N >= 4 * H100_SMS * 128 * 256:
            assert efficiency >= 0.95, label
        assert efficiency == pytest.approx(chosen.candidates[0].sm_efficiency)  # the model counts what work() does
        if M <= 16 and N >= 1024:
            assert s.is_swap_ab or s.block_m == 64  # small M: swap-AB or the thinnest WGMMA tile
        if M * N >= 4096 * 4096:
            assert s.block_m * s.block_n >= 128 * 128  # large problems use large tiles
        rows.append(f"{dtype:14s} {M:6d} {N:6d} {K:6d}  {chosen.candidates[0].mode:13s} {busy:4d} {efficiency:5.0%} "
                    f"{smem / 1024:6.1f} {chosen.candidates[0].time_us:9.2f}  {s}")
    print("\nselect() on the benchmark set (H100: 132 SMs, 227 KB shared memory)")
    print(f"{'dtype':14s} {'M':>6s} {'N':>6s} {'K':>6s}  {'mode':13s} busy   eff smemKB  model_us  schedule")
    print("\n".join(rows))


def test_explain_shows_candidates_and_reasoning():
    sel = select(1, 2112, 7168, "bf16", H100_SMS, H100_SMEM, explain=True)
    assert isinstance(sel, Selection)
    assert sel.schedule == sel.candidates[0].schedule
    ranks = [round(c.time_us * width_margin(c.schedule, 1), 6) for c in sel.candidates]
    assert ranks == sorted(ranks)  # by modelled time, a width that is no power of two handicapped
    assert any(c.schedule.is_swap_ab for c in sel.candidates)  # M=1 <= 64: swap-AB considered
    assert {c.mode for c in sel.candidates} == {"data-parallel", "split-K", "Stream-K"}  # few tiles: all three
    for c in sel.candidates:
        assert c.time_us == pytest.approx(max(c.sm_us, c.hbm_us))
    text = str(sel)
    print("\n" + text)
    assert "chosen:" in text and "swap-AB considered" in text and "split-K and Stream-K" in text


def test_small_m_streams_at_least_64_weight_rows_per_stage():
    # At M <= 32 the GEMM streams the weights; a 64x16 or 64x32 tile's 16-32 rows of B per stage
    # ran at a third of HBM speed on the H100 (small_m_dense.md), so the refill bound rules them out.
    for dtype in ("bfloat16", "float8_e4m3fn"):
        for N, K in DEEPSEEK_NK:
            for M in (1, 16, 32):
                s = select(M, N, K, dtype, H100_SMS, H100_SMEM)
                weight_rows = s.block_m if s.is_swap_ab else s.block_n
                assert weight_rows >= 64, f"{dtype} {M}x{N}x{K}: {s}"


def test_stages_beyond_max_stages_only_where_the_refill_bound_binds():
    for dtype in ("bfloat16", "float8_e4m3fn"):
        for shape in ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 16384)):
            s = select(*shape, dtype, H100_SMS, H100_SMEM)
            assert s.block_m * s.block_n == 128 * 256 and s.num_stages <= MAX_STAGES, f"{dtype} {shape}: {s}"
    sel = select(128, 4096, 7168, "fp8", H100_SMS, H100_SMEM, explain=True)
    dp = next(c for c in sel.candidates if c.mode == "data-parallel" and (c.schedule.block_m, c.schedule.block_n)
              == (64, 64))
    assert MAX_STAGES < dp.schedule.num_stages <= MAX_LATENCY_STAGES  # 16 KB stages: 6 cannot cover the latency
    assert all(c.schedule.num_stages <= MAX_LATENCY_STAGES for c in sel.candidates)


def test_a_width_no_power_of_two_only_where_it_fills_the_last_wave():
    # N = 2112: 128x256 tiles leave 2.18 waves (the third a fifth full), 128x176 ones 2.91.
    for dtype in ("bfloat16", "float8_e4m3fn"):
        s = select(4096, 2112, 7168, dtype, H100_SMS, H100_SMEM)
        assert (s.block_m, s.block_n, s.is_swap_ab) == (128, 176, False), s
        sel = select(4096, 4096, 4096, dtype, H100_SMS, H100_SMEM, explain=True)
        assert sel.schedule.has_pow2_block_n
        assert not any(c.schedule.is_swap_ab and not c.schedule.has_pow2_block_n for c in sel.candidates)


def test_width_margins():
    # H100 (dense_block_n.md, sections 5-6): above WEIGHT_STREAM_MAX_M 128x192 runs as efficiently per
    # K-iteration as 128x256, the other widths within a few percent of the model; at small M the
    # 64-row tiles of such widths lost to powers of two.
    big, small = WEIGHT_STREAM_MAX_M + 1, WEIGHT_STREAM_MAX_M
    assert width_margin(Schedule(block_n=256), small) == width_margin(Schedule(block_n=256), big) == 1.0
    assert width_margin(Schedule(block_n=192), big) == 1.0
    assert width_margin(Schedule(block_n=176), big) == OTHER_WIDTH_MARGIN > 1.0
    assert width_margin(Schedule(block_n=192), small) == width_margin(Schedule(block_n=224), small) \
        == STREAMING_WIDTH_MARGIN > OTHER_WIDTH_MARGIN
    for dtype in ("bfloat16", "float8_e4m3fn"):
        # 128x256 leaves 2.18 waves at 3072x3072 (measured 578 against 727 TFLOP/s for 128x192, bf16)
        s = select(3072, 3072, 3072, dtype, H100_SMS, H100_SMEM)
        assert (s.block_m, s.block_n, s.streamk_tiles) == (128, 192, 0), s
        # the bucket (512, 1024] at 7168x16384: 128x224 instead of 128x256 (measured at M = 1024: 1.79x its
        # Stream-K in bf16, 1.09x its data-parallel in fp8)
        s = select(1024, 7168, 16384, dtype, H100_SMS, H100_SMEM, m_min=513)
        assert (s.block_m, s.block_n, s.streamk_tiles) == (128, 224, 0), s
        for M in (24, 32):
            assert select(M, 8192, 8192, dtype, H100_SMS, H100_SMEM, m_min=M // 2 + 1).has_pow2_block_n


def test_a_width_no_power_of_two_must_win_across_the_bucket():
    # M's bucket (2048, 4096] shares one schedule: 128x176 wins at M = 4096 but 128x256 fills the
    # waves better from M = 3072 to 3584 (measured at 3000: 0.86-0.88x), so the bucket keeps 128x256.
    sel = select(4096, 2112, 7168, "bf16", H100_SMS, H100_SMEM, explain=True, m_min=2049)
    assert sel.schedule.block_n == 256
    assert any("not as fast (times their width margin) at every M in [2049, 4096]" in n for n in sel.notes)
    assert any(c.schedule.block_n == 176 for c in sel.candidates)  # still a candidate, ranked after
    # (512, 1024] and (1024, 2048]: 128x144 feeds the tensor cores better than 256x64 at every M.
    for M in (1024, 2048):
        assert select(M, 2112, 7168, "fp8", H100_SMS, H100_SMEM, m_min=M // 2 + 1).block_n == 144
    with pytest.raises(ValueError, match="m_min: must be at most M=64, got 65"):
        select(64, 2112, 7168, "fp8", H100_SMS, H100_SMEM, m_min=65)


def test_swap_ab_pays_its_charge_above_one_token():
    # With M > 1 a swap-AB candidate is charged SWAP_AB_CHARGE_CLK and a pass over C (selection.py says why).
    one = {c.schedule: c.time_us for c in select(1, 4096, 7168, "bf16", H100_SMS, H100_SMEM, explain=True).candidates}
    two = select(2, 4096, 7168, "bf16", H100_SMS, H100_SMEM, explain=True).candidates
    swapped = [c for c in two if c.schedule.is_swap_ab and c.schedule in one]
    assert swapped
    for c in swapped:
        assert c.time_us >= one[c.schedule] + SWAP_AB_CHARGE_CLK / (CLOCK_GHZ * 1e3)


def test_streamk_pays_for_rereading_an_operand_larger_than_l2():
    # bf16 W of 4096x7168 (59 MB) under Stream-K: 64-row tiles at M = 128 read it twice, 128-row tiles once
    sel = select(128, 4096, 7168, "bf16", H100_SMS, H100_SMEM, explain=True)
    streamed = {(c.schedule.block_m, c.schedule.block_n): c for c in sel.candidates if c.mode == "Stream-K"}
    two_rows, one_row = streamed[(64, 128)], streamed[(128, 64)]
    weights_us = 4096 * 7168 * 2 / STREAMING_HBM_BYTES_PER_CLK / (CLOCK_GHZ * 1e3)
    assert two_rows.hbm_us - one_row.hbm_us > 0.9 * weights_us  # the weights once more
    assert one_row.time_us < two_rows.time_us
    # an operand that fits in L2 is read again from it: fp8 W of 4096x7168 (29 MB) pays nothing
    assert _streamk_rereads(128, 4096, 7168, 64, 128, 1, 1.0) == 0
    assert _streamk_rereads(128, 4096, 7168, 64, 128, 2, 1.0) == 4096 * 7168 * 2
    assert _streamk_rereads(128, 4096, 7168, 64, 128, 2, 0.5) == 4096 * 7168
    assert L2_BYTES < 4096 * 7168 * 2


def test_ties_on_the_hbm_floor_go_to_fewer_weight_rows_in_flight():
    # up to M = 128: 128x64 (one tile row, 64 weight rows a program) before 64x128 or 128x128, 64x64 before 64x128
    for M, N, K, dtype, tile in ((128, 24576, 1536, "e4m3", (128, 64)), (128, 7168, 2048, "bf16", (128, 64)),
                                 (32, 24576, 1536, "e4m3", (64, 64))):
        sel = select(M, N, K, dtype, H100_SMS, H100_SMEM, explain=True)
        best = sel.candidates[0]
        assert (best.schedule.block_m, best.schedule.block_n) == tile, (M, N, K, dtype, best.schedule)
        tied = [c for c in sel.candidates if round(c.time_us, 6) == round(best.time_us, 6)]
        assert all(best.busy * best.schedule.block_n <= c.busy * min(c.schedule.block_n, N) for c in tied)
    # M = 1 keeps the tie-break by slack (a swap-AB 64x16 tile and a plain 64x64 one stream 64 weight rows each)
    s = select(1, 14336, 4096, "bf16", H100_SMS, H100_SMEM)
    assert (s.block_m, s.block_n, s.is_swap_ab) == (64, 64, False)
    # above it the tie-break by slack stays (M = 256: 128x256 measured 1.09x 256x128 in bf16)
    sel = select(256, 14336, 4096, "bf16", H100_SMS, H100_SMEM, explain=True)
    s = next(c.schedule for c in sel.candidates if c.schedule.has_pow2_block_n)  # 128x224 ranks first (1.01x)
    assert (s.block_m, s.block_n) == (128, 256) and WEIGHT_STREAM_MAX_M < 256


def test_hbm_floor_in_two_regimes():
    """Where the tiles stream the weights (LATENCY_BOUND_MAX_M < M <= WEIGHT_STREAM_MAX_M) the HBM
    floor is the bytes at STREAMING_HBM_BYTES_PER_CLK whatever the busy share; elsewhere the bytes
    at HBM_BYTES_PER_CLK over that share. The token count of a swap-AB schedule is its columns."""
    N, K = 2048, 7168
    tile = Schedule(block_m=128, block_n=64, block_k=64, num_stages=8).persistent(132)  # 32 or 64 tiles
    for M, streaming in ((LATENCY_BOUND_MAX_M, False), (LATENCY_BOUND_MAX_M + 1, True), (WEIGHT_STREAM_MAX_M, True),
                         (WEIGHT_STREAM_MAX_M + 1, False)):
        c = _score(tile, "data-parallel", M, N, K, ("bfloat16",) * 3, H100_SMS, 0)
        moved = (M * K + K * N + M * N) * 2
        clocks = moved / STREAMING_HBM_BYTES_PER_CLK if streaming else moved / HBM_BYTES_PER_CLK / c.sm_efficiency
        if M > WAVES_MIN_M and streaming:  # one partial wave: its SM-side time, the floor's lower bound
            assert c.hbm_us == pytest.approx(c.sm_us) and c.hbm_us > clocks / (CLOCK_GHZ * 1e3), M
        else:
            assert c.sm_efficiency < 0.6 and c.hbm_us == pytest.approx(clocks / (CLOCK_GHZ * 1e3)), M
    swapped = Schedule(block_m=64, block_n=32, block_k=64, num_stages=8, is_swap_ab=True).persistent(132)
    c = _score(swapped, "data-parallel", N, 32, K, ("bfloat16",) * 3, H100_SMS, 0)
    charge = SWAP_AB_CHARGE_CLK + 2 * N * 32 * 2 / STREAMING_HBM_BYTES_PER_CLK
    assert c.hbm_us == pytest.approx(((32 * K + K * N + 32 * N) * 2 / STREAMING_HBM_BYTES_PER_CLK + charge)
                                     / (CLOCK_GHZ * 1e3))
    # there the stage count follows the SM-side time, which holds the refill bound the floor hides:
    # one stage fewer would be as fast in modelled time (both on the floor), not in t_sm
    s = select(32, 4096, 7168, "bf16", H100_SMS, H100_SMEM, explain=True, m_min=17)
    first = next(c for c in s.candidates if c.mode != "split-K")
    assert not first.schedule.is_swap_ab and first.schedule.num_stages > MAX_STAGES, first.schedule
    fewer = _score(first.schedule.stages(first.schedule.num_stages - 1), first.mode, 32, 4096, 7168,
                   ("bfloat16",) * 3, H100_SMS, 0)
    assert fewer.time_us <= first.time_us * STAGES_TOLERANCE < fewer.sm_us / first.sm_us * first.time_us


def test_partial_waves_and_fixups_add_to_the_streaming_floor(monkeypatch):
    """For WAVES_MIN_M < M <= WEIGHT_STREAM_MAX_M a data-parallel grid's partial last wave streams at
    its busy SMs' rate and a Stream-K fix-up comes after the streaming: both lengthen the HBM floor,
    which at M <= WAVES_MIN_M stays the bytes at the streaming bandwidth."""
    N, K, types = 11008, 4096, ("bfloat16",) * 3
    narrow = Schedule(block_m=128, block_n=64, block_k=64, num_stages=7).persistent(132)  # 172 tiles: 1.3 waves
    moved = lambda M: (M * K + K * N + M * N) * 2 / STREAMING_HBM_BYTES_PER_CLK / (CLOCK_GHZ * 1e3)  # noqa: E731
    for M in (WAVES_MIN_M, WAVES_MIN_M + 1, WEIGHT_STREAM_MAX_M):
        dp = _score(narrow, "data-parallel", M, N, K, types, H100_SMS, 0)
        sk = _score(narrow.streamk(172 % H100_SMS), "Stream-K", M, N, K, types, H100_SMS, 0)
        if M <= WAVES_MIN_M:
            assert dp.hbm_us == pytest.approx(moved(M)) and sk.hbm_us == pytest.approx(moved(M)), M
        else:
            assert dp.hbm_us > 1.2 * moved(M) and sk.hbm_us > 1.05 * moved(M), (M, dp, sk)
    # whole waves: as long as the slower of their SM-side time and their bytes
    assert _in_waves(264, 132, 10.0, 1.0) == pytest.approx(2 * 132) and _in_waves(264, 132, 200.0, 1.0) == 400.0
    assert _in_waves(172, 132, 100.0, 1.0) == pytest.approx(132 + 100)  # a wave of 40 units: their SM time
    # the effect on the pick at M = 128 (bucket 65..128): 128x128 data-parallel, one wave of 86 tiles
    # (measured 1.13x the 128x64 Stream-K that the floor alone ranks first on the H100)
    def first(M):
        sel = select(M, N, K, "bf16", H100_SMS, H100_SMEM, explain=True, m_min=M // 2 + 1)
        return next(c for c in sel.candidates if c.mode != "split-K")
    best = first(128)
    assert (best.mode, best.schedule.block_m, best.schedule.block_n) == ("data-parallel", 128, 128), best.schedule
    monkeypatch.setattr("tlgemm.schedules.selection.WAVES_MIN_M", WEIGHT_STREAM_MAX_M)
    assert first(128).schedule.block_n == 64


def test_large_m_does_not_swap_and_a_full_wave_stays_data_parallel():
    sel = select(4096, 4096, 4096, "bf16", H100_SMS, H100_SMEM, explain=True)
    assert not any(c.schedule.is_swap_ab for c in sel.candidates)  # M > 64: swap-AB never considered
    # 1536x2816 = 12x11 tiles of 128x256 = exactly 132 tiles: one full wave, nothing to split.
    sel = select(1536, 2816, 4096, "bf16", H100_SMS, H100_SMEM, explain=True)
    best = sel.candidates[0]
    assert best.mode == "data-parallel" and best.tiles == 132 and best.sm_efficiency == 1.0
    assert best.schedule.block_m * best.schedule.block_n == 128 * 256


def wave_rows(M, N, s, num_sms):
    """Operand rows the first wave of num_sms tiles reads, from the host raster itself: its
    distinct tile rows times block_m plus its distinct tile columns times block_n."""
    coords = [tile_coords(t, M, N, s) for t in range(num_sms)]
    return len({m for m, _ in coords}) * s.block_m + len({n for _, n in coords}) * s.block_n


@pytest.mark.parametrize("bm, bn", [(128, 256), (128, 128), (128, 224), (256, 128)])
def test_raster_group_gives_the_wave_its_fewest_operand_rows(bm, bn):
    s = Schedule(block_m=bm, block_n=bn, is_persistent=True)
    rows = {g: wave_rows(8192, 8192, replace(s, group_size_m=g), H100_SMS) for g in range(1, 33)}
    chosen = rows[raster_group(bm, bn, H100_SMS)]
    assert chosen <= 1.05 * min(rows.values()), (chosen, min(rows.values()))  # whole tiles: the optimum moves
    assert chosen < rows[4] and chosen <= rows[8]


def test_select_takes_the_raster_group():
    assert raster_group(128, 256, H100_SMS) == 16 and raster_group(128, 128, H100_SMS) == 11
    assert raster_group(64, 16, 1) == 1
    for M, N, K in ((4096, 4096, 4096), (4096, 7168, 16384), (16, 4096, 4096), (2048, 2112, 7168)):
        s = select(M, N, K, "bfloat16", H100_SMS, H100_SMEM)
        assert s.group_size_m == raster_group(s.block_m, s.block_n, H100_SMS)


def test_smem_budget_is_respected():
    for budget in (64 * 1024, 100 * 1024, H100_SMEM):
        s = select(4096, 4096, 4096, "bf16", H100_SMS, budget)
        assert shared_memory_bytes(s, "bf16") <= budget and s.num_stages >= 2
    with pytest.raises(ValueError, match="holds no candidate"):
        select(4096, 4096, 4096, "bf16", H100_SMS, 8 * 1024)


def test_shared_memory_formula():
    # 3 stages * (128 + 256) rows * 64 * 2 B = 147456, + two 128x64 bf16 staging chunks = 32768, + 1024
    s = Schedule(block_m=128, block_n=256, block_k=64, num_stages=3)
    assert store_staging(256) == (64, 2)
    assert shared_memory_bytes(s, "bf16") == 147456 + 32768 + 1024
    # fp8 inputs, bf16 output by default
    assert shared_memory_bytes(s, "fp8") == 3 * 384 * 64 + 32768 + 1024
    # a 64-column tile stages once, a 32-column one in one 32-column chunk
    assert store_staging(64) == (64, 1) and store_staging(32) == (32, 1)
    narrow = Schedule(block_m=64, block_n=32, block_k=64, num_stages=2)
    assert shared_memory_bytes(narrow, ("bf16", "bf16", "float32")) == 2 * 96 * 64 * 2 + 64 * 32 * 4 + 1024


def test_dtype_parsing():
    class FakeTorchDtype:  # str() like torch.bfloat16, without importing torch
        def __str__(self):
            return "torch.bfloat16"

    assert canonical_dtype(FakeTorchDtype()) == "bfloat16"
    assert gemm_dtypes("fp8") == ("float8_e4m3fn", "float8_e4m3fn", "bfloat16")
    assert gemm_dtypes(("e4m3", "e5m2", "fp32")) == ("float8_e4m3fn", "float8_e5m2", "float32")
    assert gemm_dtypes("int8") == ("int8", "int8", "int32")
    with pytest.raises(ValueError, match="unknown dtype"):
        canonical_dtype("float64")
    with pytest.raises(ValueError, match="same dtype"):
        gemm_dtypes(("fp16", "bf16"))
    with pytest.raises(ValueError, match="dtype of a must be one of"):
        gemm_dtypes("int32")


@pytest.mark.parametrize(
    "args, message",
    [
        ((0, 128, 128, "bf16", 132, H100_SMEM), "M must be >= 1"),
        ((128, 128, 0, "bf16", 132, H100_SMEM), "K must be >= 1"),
        ((128, 128, 128, "bf16", 0, H100_SMEM), "num_sms must be >= 1"),
        ((128, 128, 128, "bogus", 132, H100_SMEM), "unknown dtype"),
    ],
)
def test_select_rejects_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        select(*args)


def test_the_bucket_scores_a_swap_ab_candidate_on_its_own_problem():
    """select(m_min=...) re-ranks a block_n that is no power of two against the best power of two
    at sampled M of the bucket; a swap-AB power of two was scored as the problem (m, N) instead of
    its kernel's (N, m), about 6x too slow, so the other width always seemed to win."""
    sel = select(4, 12224, 2048, "bf16", 78, 232448, explain=True, m_min=3)
    assert sel.schedule.is_swap_ab and sel.schedule.has_pow2_block_n


@pytest.mark.parametrize("call, message", [
    (lambda: select(64, 64, 64, "bf16", 132, 232448, explain="yes"), r"explain must be a bool"),
    (lambda: selection_store_staging(12), r"block_n must be a multiple of 8, got 12"),
    (lambda: selection_store_staging(0), r"block_n must be >= 8"),
])
def test_select_arguments_are_checked(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def selection_store_staging(block_n):
    from tlgemm.schedules.selection import store_staging

    return store_staging(block_n)


@pytest.mark.parametrize("dtypes", [("bf16", "bf16", "tf32"), ("bf16", "bf16", "int8"), ("e4m3", "e4m3", "int32")])
def test_gemm_dtypes_rejects_an_output_no_kernel_writes(dtypes):
    from tlgemm.schedules import gemm_dtypes

    with pytest.raises(ValueError, match=r"dtype of c must be one of"):
        gemm_dtypes(dtypes)
    assert gemm_dtypes(("int8", "int8", "int32"))[2] == "int32"
