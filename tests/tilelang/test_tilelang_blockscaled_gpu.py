"""GPU: the TileLang block-scaled FP8 GEMM against the float64 reference on dequantised
inputs and against the Triton backend's kernel, random (non-unit) scales, outputs poisoned."""

import pytest
import torch

import tlgemm.triton as TR
from tlgemm.quantize import dequantize_fp8_blockwise
from tlgemm.testing import assert_gemm_close, poison_allocator, poisoned, random_operand, reference_gemm
from tlgemm.tilelang.launch import blockscaled_bmm, blockscaled_matmul, blockscaled_stages_that_fit

pytestmark = pytest.mark.gpu

DEV = "cuda"
FP8 = torch.float8_e4m3fn
DEEPSEEK_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]


def _scales(shape, generator):
    return (torch.rand(shape, generator=generator) * 2 + 0.05).to(DEV)


def _problem(generator, M, N, K):
    """Random a [M, K], b [N, K] (e4m3) and non-unit scales sa [M, K/128], sb [ceil(N/128), K/128]."""
    a = random_operand((M, K), FP8, generator=generator, device=DEV)
    b = random_operand((N, K), FP8, generator=generator, device=DEV)
    return a, b, _scales((M, K // 128), generator), _scales((-(-N // 128), K // 128), generator)


def _batched_problem(generator, batch, M, N, K):
    """``_problem`` for a batch: x [B, M, K], y [B, N, K], xs [B, M, K/128] outer-dim-major,
    ys [B, ceil(N/128), K/128]."""
    x = random_operand((batch, M, K), FP8, generator=generator, device=DEV)
    y = random_operand((batch, N, K), FP8, generator=generator, device=DEV)
    xs = _scales((batch, K // 128, M), generator).mT
    ys = _scales((batch, -(-N // 128), K // 128), generator)
    return x, y, xs, ys


def _close(out, ref, what="result"):
    """Block-scaled fp8's bound (tlgemm.testing, "fp8-block"): ``ref`` is the product of the
    dequantised inputs or the other backend's block-scaled result."""
    return assert_gemm_close(out, ref, FP8, blockscaled=True, what=what)


def _expected(a, b, sa, sb, bias=None):
    """The float64 reference on the dequantised operands."""
    a64 = dequantize_fp8_blockwise(a, sa, (1, 128)).double()
    b64 = dequantize_fp8_blockwise(b, sb, (128, 128)).double()
    return reference_gemm(a64, b64.T, bias=bias)


def _check_with_bias(generator, schedule, M, N, K):
    """``schedule`` on a random problem with a bias along N, the bf16 output poisoned first,
    against the reference and the Triton kernel."""
    a, b, sa, sb = _problem(generator, M, N, K)
    bias = torch.randn(N, generator=generator).to(DEV)
    out = poisoned((M, N), torch.bfloat16, DEV)
    blockscaled_matmul(a, b, sa, sb, schedule, out=out, bias=bias)
    _close(out, _expected(a, b, sa, sb, bias=bias), what=f"{schedule} vs reference")
    other = TR.blockscaled_matmul(a, b, sa, sb, bias=bias)
    _close(out, other.double(), what=f"{schedule} vs Triton")


def _check_twice(generator, schedule, M, N, K):
    """``_check_with_bias``, then two launches on a fresh problem: against the reference, and
    bitwise equal to each other (a Stream-K launch resets the fix-up flags it leaves)."""
    _check_with_bias(generator, schedule, M, N, K)
    a, b, sa, sb = _problem(generator, M, N, K)
    first, second = (blockscaled_matmul(a, b, sa, sb, schedule, out=poisoned((M, N), torch.bfloat16, DEV))
                     for _ in range(2))
    _close(first, _expected(a, b, sa, sb), what=f"{schedule} vs reference")
    assert torch.equal(first, second), f"{schedule}: two launches differ"


def _check_batched(generator, schedule, M, N, K, batch=2):
    """``schedule`` on a random batched problem, the output poisoned first, each GEMM of the
    batch against the reference."""
    x, y, xs, ys = _batched_problem(generator, batch, M, N, K)
    out = poisoned((batch, M, N), torch.bfloat16, DEV)
    blockscaled_bmm(x, y, xs, ys, schedule, out=out)
    for i in range(batch):
        _close(out[i], _expected(x[i], y[i], xs[i], ys[i]), what=f"{schedule} batch {i}")


@pytest.mark.parametrize("N, K", DEEPSEEK_NK, ids=str)
@pytest.mark.parametrize("M", [1, 65, 1000])
def test_matches_reference_and_triton(generator, M, N, K):
    a, b, sa, sb = _problem(generator, M, N, K)
    out = poisoned((M, N), torch.bfloat16, DEV)
    blockscaled_matmul(a, b, sa, sb, out=out)
    _close(out, _expected(a, b, sa, sb), what=f"{M}x{N}x{K} vs reference")
    other = TR.blockscaled_matmul(a, b, sa, sb)
    _close(out, other.double(), what=f"{M}x{N}x{K} vs Triton")


@pytest.mark.parametrize("M, N, K", [(200, 100, 128), (200, 256, 384), (77, 1000, 256), (5, 36, 640)], ids=str)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=str)
def test_few_k_blocks_and_ragged_n(generator, M, N, K, out_dtype):
    """One and three K blocks (the consumer loop's tails), and N whose output rows are not
    16-byte aligned (C through a padded temporary)."""
    a, b, sa, sb = _problem(generator, M, N, K)
    poison_allocator((M, N), out_dtype, DEV)  # the output it allocates next: poisoned memory
    out = blockscaled_matmul(a, b, sa, sb, out_dtype=out_dtype)
    _close(out, _expected(a, b, sa, sb))


@pytest.mark.parametrize("block_m, block_n, warpgroups", [(128, 160, 2), (128, 192, 2), (128, 112, 2), (64, 48, 1),
                                                          (64, 176, 1)], ids=str)
@pytest.mark.parametrize("M, N, K", [(300, 2112, 512), (65, 1000, 384)], ids=str)
def test_non_power_of_two_block_n(generator, block_m, block_n, warpgroups, M, N, K):
    """Tiles that straddle 128-column scale blocks (two or three per tile), one temporary
    (160, 176, 192) or two (48, 112), ragged N; against the reference and the Triton kernel."""
    from tlgemm.schedules import Schedule

    schedule = Schedule(block_m=block_m, block_n=block_n, block_k=128, num_stages=4,
                        num_warpgroups=warpgroups).persistent()
    a, b, sa, sb = _problem(generator, M, N, K)
    out = poisoned((M, N), torch.bfloat16, DEV)
    blockscaled_matmul(a, b, sa, sb, schedule, out=out)
    _close(out, _expected(a, b, sa, sb), what=f"{schedule} vs reference")
    _close(out, TR.blockscaled_matmul(a, b, sa, sb).double(), what=f"{schedule} vs Triton")


@pytest.mark.parametrize("block_m, block_n, warpgroups", [(128, 256, 2), (128, 224, 2), (64, 256, 1), (128, 208, 2)],
                         ids=str)
@pytest.mark.parametrize("M, N, K", [(300, 2112, 512), (65, 1000, 384), (1000, 7168, 128)], ids=str)
def test_temporary_split_in_parts(generator, block_m, block_n, warpgroups, M, N, K):
    """Tiles too wide for the result and a whole-tile temporary: each K block as two wgmma
    batches of block_n / 2 columns into one half-width temporary (``fragments_of``), one
    staging buffer; ragged M and N, one to four K blocks, a bias; against the reference and
    the Triton kernel."""
    from tlgemm.schedules import Schedule
    from tlgemm.tilelang.stages import BlockScaledContext

    schedule = Schedule(block_m=block_m, block_n=block_n, block_k=128, num_stages=4,
                        num_warpgroups=warpgroups).persistent()
    assert BlockScaledContext.fragments_of(schedule) == (1, 2)
    _check_with_bias(generator, schedule, M, N, K)


@pytest.mark.parametrize("block_n", [256, 192, 176])
@pytest.mark.parametrize("M, N, K", [(2048, 7168, 1024), (300, 2112, 512), (1000, 1000, 640), (260, 7168, 2048)],
                         ids=str)
def test_ring_rounds_unrolled(generator, block_n, M, N, K):
    """128x256 (A from registers, two parts) and 128x192 / 128x176 (one whole-tile temporary) with
    the token scales by TMA (M > 128, copied outer-dim-major): where a tile starts at ring slot 0
    and fills whole rounds of the 4-stage ring (K-iterations a multiple of 4: several tiles a
    program at 2048x7168x1024, a single round at K = 512), each round runs unrolled; K = 640
    (5 K-iterations) takes the generic loop. Against the reference and the Triton kernel, then
    two launches equal; and batched (each GEMM of the batch)."""
    from tlgemm.schedules import Schedule

    schedule = Schedule(block_m=128, block_n=block_n, block_k=128, num_stages=4, num_warpgroups=2).persistent()
    _check_twice(generator, schedule, M, N, K)
    _check_batched(generator, schedule, M, N, K)


@pytest.mark.parametrize("block_n", [16, 64, 128])
@pytest.mark.parametrize("M, N, K", [(1000, 1000, 640), (300, 2112, 512), (260, 7168, 2048), (77, 1000, 384)], ids=str)
def test_two_warpgroups_one_temporary(generator, block_n, M, N, K):
    """128 x block_n on two consumer warpgroups with one temporary (``fragments_of``): K = 640
    (5 K-iterations, the generic loop), 512 and 2048 (whole rounds of the 4-stage ring,
    unrolled), ragged M and N, several tiles a program, a bias; against the reference and the
    Triton kernel, then two launches equal; and batched."""
    from tlgemm.schedules import Schedule
    from tlgemm.tilelang.stages import BlockScaledContext

    schedule = Schedule(block_m=128, block_n=block_n, block_k=128, num_stages=4, num_warpgroups=2).persistent()
    assert BlockScaledContext.fragments_of(schedule) == (1, 1)
    _check_twice(generator, schedule, M, N, K)
    _check_batched(generator, schedule, M, N, K)


@pytest.mark.parametrize("M, N, K", [(1536, 4096, 7168), (768, 7168, 2048), (1531, 4096, 4096)], ids=str)
def test_default_takes_128x128_where_it_fills_the_waves(generator, M, N, K):
    """The default's 128x128 where its waves are so much fuller than those of the wider tiles
    (``launch._NARROW_PER_FLOP``), ragged M included; against the reference and the Triton kernel."""
    from tlgemm.tilelang.launch import default_blockscaled_schedule

    schedule = default_blockscaled_schedule(M, N=N, K=K)
    assert (schedule.block_m, schedule.block_n, schedule.num_warpgroups) == (128, 128, 2), schedule
    a, b, sa, sb = _problem(generator, M, N, K)
    out = poisoned((M, N), torch.bfloat16, DEV)
    blockscaled_matmul(a, b, sa, sb, out=out)
    _close(out, _expected(a, b, sa, sb), what=f"default {schedule} vs reference")
    _close(out, TR.blockscaled_matmul(a, b, sa, sb).double(), what=f"{schedule} vs Triton")


@pytest.mark.parametrize("block_m, warpgroups, stages", [(256, 2, 3), (256, 2, 4), (128, 1, 4)], ids=str)
@pytest.mark.parametrize("M, N, K", [(2048, 7168, 1024), (300, 2112, 512), (1000, 1000, 640), (65, 1000, 384),
                                     (600, 4096, 1536)], ids=str)
def test_row_waves(generator, block_m, warpgroups, stages, M, N, K):
    """Tiles in two row waves of 64 rows a warpgroup (``BlockScaledContext.waves_of``): 256x128
    on two warpgroups (3 stages, or 4 with the epilogue staged 32 columns at a time), 128x128 on
    one; ragged M and N, 3 to 12 K blocks (the token scales by
    TMA for M > 128, by cp.async at M = 65; 256x128 at K = 1536 runs its 12 K-iterations as
    whole rounds of the 3-stage ring, unrolled, the other cases the generic loop), several
    tiles a program, a bias; against the reference and the Triton kernel, then two launches
    equal; and batched."""
    from tlgemm.schedules import Schedule
    from tlgemm.tilelang.stages import BlockScaledContext

    schedule = blockscaled_stages_that_fit(Schedule(block_m=block_m, block_n=128, block_k=128, num_stages=stages,
                                                    num_warpgroups=warpgroups).persistent())
    assert BlockScaledContext.waves_of(schedule) == 2 and schedule.num_stages == stages
    _check_twice(generator, schedule, M, N, K)
    _check_batched(generator, schedule, M, N, K)


@pytest.mark.parametrize("block_n, swap, streamk_tiles", [(64, False, 10**6), (48, False, 3), (16, True, 10**6),
                                                           (32, True, 2)], ids=str)
@pytest.mark.parametrize("M, N, K", [(1, 2112, 7168), (7, 1000, 384), (64, 4096, 7168), (100, 2112, 512),
                                     (128, 7168, 128)], ids=str)
def test_streamk(generator, block_n, swap, streamk_tiles, M, N, K):
    """Stream-K (all tiles, or the last few after whole ones): K ranges split between
    programs, partial results published and summed by each tile's owner; plain and swap-AB
    64-row tiles, ragged M and N, one K block to 56, a bias; against the reference and the
    Triton kernel, and a second launch on the same stream (its fix-up flags reset by the
    first) bitwise equal to the first."""
    from tlgemm.schedules import Schedule

    schedule = Schedule(block_m=64, block_n=block_n, block_k=128, num_stages=8, num_warpgroups=1).persistent()
    schedule = (schedule.swap_ab() if swap else schedule).streamk(streamk_tiles)
    _check_twice(generator, schedule, M, N, K)


@pytest.mark.parametrize("block_m, block_n, warpgroups, streamk_tiles",
                         [(64, 64, 1, 0), (64, 16, 1, 0), (64, 48, 1, 0), (128, 64, 1, 0), (128, 128, 2, 0),
                          (64, 64, 1, 10**6), (64, 64, 1, 3)], ids=str)
@pytest.mark.parametrize("M, N, K", [(128, 2112, 7168), (77, 1000, 384), (300, 384, 1024), (65, 4096, 128),
                                     (1, 200, 640)], ids=str)
def test_two_scale_blocks_per_k_iteration(generator, block_m, block_n, warpgroups, streamk_tiles, M, N, K):
    """block_k 256: two scale blocks per ring slot, each its own wgmma batch and promotion;
    K an odd number of scale blocks (384, 640, 128: the last K-iteration's second half past K,
    zero-filled by the TMA with its scales clamped in bounds), ragged M and N, plain, Stream-K
    over all tiles or the last few; against the reference and the Triton kernel, then a second
    launch bitwise equal to the first."""
    from tlgemm.schedules import Schedule

    schedule = blockscaled_stages_that_fit(Schedule(block_m=block_m, block_n=block_n, block_k=256, num_stages=4,
                                                    num_warpgroups=warpgroups).persistent())
    if streamk_tiles:
        schedule = schedule.streamk(streamk_tiles)
    _check_twice(generator, schedule, M, N, K)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("M, N, K", [(129, 24576, 1536), (500, 16384, 2048)], ids=str)
def test_default_for_wide_outputs(generator, out_dtype, M, N, K):
    """The default where a bf16 output takes the 256x128 row waves (3 stages at K = 1536, 4 at
    2048): a float32 output's staging leaves no room for them, so the default takes 128-row
    tiles and fits; a float16 output keeps the waves. The output poisoned first, against the
    reference."""
    from tlgemm.tilelang.launch import _blockscaled_smem, default_blockscaled_schedule
    from tlgemm.tilelang.stages import BlockScaledContext

    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    s = default_blockscaled_schedule(M, out_dtype, N=N, K=K, num_sms=sms)
    assert (BlockScaledContext.waves_of(s) > 1) == (out_dtype != torch.float32), s
    assert _blockscaled_smem(s, FP8, FP8, out_dtype) <= 232448
    a, b, sa, sb = _problem(generator, M, N, K)
    out = poisoned((M, N), out_dtype, DEV)
    blockscaled_matmul(a, b, sa, sb, out=out)
    _close(out, _expected(a, b, sa, sb), what=f"default {s} to {out_dtype}")


@pytest.mark.parametrize("M, N, K", [(64, 2112, 7168), (50, 1024, 7168), (40, 1024, 9216), (100, 768, 9216),
                                     (33, 128, 7168)], ids=str)
def test_default_split_tiles(generator, M, N, K):
    """The default's split-K block_k 256 tiles (``launch._split_deep_k``: 64x32 tiles, a cluster of
    two CTAs each adding its half of the K-iterations in shared memory), ragged M, against the
    reference and the Triton kernel, then two launches bitwise equal."""
    from tlgemm.tilelang.launch import default_blockscaled_schedule

    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    s = default_blockscaled_schedule(M, N=N, K=K, num_sms=sms)
    assert (s.block_n, s.block_k, s.split_k) == (32, 256, 2), s
    _check_twice(generator, None, M, N, K)


@pytest.mark.parametrize("block_m, block_n, block_k, warpgroups, splits, swap",
                         [(64, 32, 256, 1, 2, False), (64, 48, 128, 1, 3, False), (128, 64, 128, 2, 2, False),
                          (64, 64, 256, 1, 4, False), (64, 16, 128, 1, 5, False), (64, 32, 128, 1, 2, True)], ids=str)
@pytest.mark.parametrize("M, N, K", [(77, 1000, 1408), (300, 384, 1024), (1, 200, 1664), (129, 2112, 7168)],
                         ids=str)
def test_split_k(generator, block_m, block_n, block_k, warpgroups, splits, swap, M, N, K):
    """Split-K schedules given explicitly: parts of unequal length (the K-iterations no multiple
    of the part count), ragged M, N and K, one or two warpgroups, block_k 128 or 256, swap-AB;
    against the reference and the Triton kernel, then two launches bitwise equal."""
    from tlgemm.schedules import Schedule

    schedule = blockscaled_stages_that_fit(Schedule(block_m=block_m, block_n=block_n, block_k=block_k,
                                                    num_stages=4, num_warpgroups=warpgroups).splitk(splits))
    _check_twice(generator, schedule.swap_ab() if swap else schedule, M, N, K)


def test_split_k_errors(generator):
    """A split-K schedule with more parts than K-iterations, a persistent one, more than 8 parts,
    or a batched call is a clear "schedule:" error."""
    from tlgemm.schedules import Schedule

    base = Schedule(block_m=64, block_n=32, block_k=128, num_stages=4, num_warpgroups=1)
    for K, schedule, rule in ((384, base.splitk(4), "split_k = 4 parts need at least"),
                              (1280, base.persistent().splitk(2), "not persistent"),
                              (1280, base.splitk(9), "split_k <= 8")):
        a, b, sa, sb = _problem(generator, 64, 256, K)
        with pytest.raises(ValueError, match=rule):
            blockscaled_matmul(a, b, sa, sb, schedule)
    x, y, xs, ys = _batched_problem(generator, 2, 64, 256, 384)
    with pytest.raises(ValueError, match="unbatched"):
        blockscaled_bmm(x, y, xs, ys, base.splitk(2))


@pytest.mark.parametrize("block_n", [16, 32, 48, 64])
@pytest.mark.parametrize("M, N, K", [(1, 2112, 512), (7, 1000, 384), (33, 384, 1024), (64, 7168, 256)], ids=str)
def test_swap_ab(generator, block_n, M, N, K):
    """Swap-AB (Cᵀ = B · Aᵀ, tokens on WGMMA's N side, the tile stored transposed): ragged M
    and N, bf16 output with a bias along N; against the reference and the Triton kernel."""
    from tlgemm.schedules import Schedule

    schedule = Schedule(block_m=64, block_n=block_n, block_k=128, num_stages=6,
                        num_warpgroups=1).persistent().swap_ab()
    _check_with_bias(generator, schedule, M, N, K)


@pytest.mark.parametrize("a_dtype, b_dtype", [(FP8, torch.float8_e5m2), (torch.float8_e5m2, FP8)], ids=str)
@pytest.mark.parametrize("M, N, K", [(16, 4096, 7168), (7, 1000, 384), (300, 2112, 512)], ids=str)
def test_mixed_e4m3_e5m2(generator, a_dtype, b_dtype, M, N, K):
    """e4m3 tokens with e5m2 weights and the reverse, on the default schedule (swap-AB and
    Stream-K at small M, where the WGMMA operands take the two dtypes in swapped order), bf16
    output poisoned; against the reference and the Triton kernel."""
    a = random_operand((M, K), a_dtype, generator=generator, device=DEV)
    b = random_operand((N, K), b_dtype, generator=generator, device=DEV)
    sa, sb = _scales((M, K // 128), generator), _scales((-(-N // 128), K // 128), generator)
    out = poisoned((M, N), torch.bfloat16, DEV)
    blockscaled_matmul(a, b, sa, sb, out=out)
    _close(out, _expected(a, b, sa, sb), what=f"{a_dtype} x {b_dtype} vs reference")
    other = TR.blockscaled_matmul(a, b, sa, sb)
    _close(out, other.double(), what=f"{a_dtype} x {b_dtype} vs Triton")


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16], ids=str)
def test_swap_ab_batched_and_128_row_tiles(generator, out_dtype):
    """Swap-AB in the batched form (per-batch scales) and on 128-row tiles over two
    consumer warpgroups, fp32 / fp16 output."""
    from tlgemm.schedules import Schedule

    batch, M, N, K = 3, 20, 1000, 640
    x = random_operand((batch, M, K), FP8, generator=generator, device=DEV)
    y = random_operand((batch, N, K), FP8, generator=generator, device=DEV)
    xs = _scales((batch, M, K // 128), generator)
    ys = _scales((batch, -(-N // 128), K // 128), generator)
    for schedule in (Schedule(block_m=64, block_n=32, block_k=128, num_stages=4, num_warpgroups=1),
                     Schedule(block_m=128, block_n=32, block_k=128, num_stages=4, num_warpgroups=2)):
        schedule = schedule.persistent().swap_ab()
        out = poisoned((batch, M, N), out_dtype, DEV)
        blockscaled_bmm(x, y, xs, ys, schedule, out=out)
        for i in range(batch):
            _close(out[i], _expected(x[i], y[i], xs[i], ys[i]), what=f"{schedule} batch {i}")


@pytest.mark.parametrize("raster", ["m", "n"])
@pytest.mark.parametrize("M, N, K", [(1000, 2112, 512), (300, 384, 1024), (4096, 1000, 256), (129, 7168, 384)],
                         ids=str)
def test_clusters(generator, raster, M, N, K):
    """2-CTA clusters: B (raster m) or A (raster n) multicast where a pair's tiles share it,
    odd tile counts (a rank without a tile recomputes and stores nothing), a bias, on fewer
    programs than tiles; against the reference and the Triton kernel."""
    from tlgemm.schedules import Schedule

    schedule = Schedule(block_m=128, block_n=128, block_k=128, num_stages=4, num_warpgroups=2,
                        raster=raster).persistent(7).cluster(2)
    _check_with_bias(generator, schedule, M, N, K)


@pytest.mark.parametrize("raster", ["m", "n"])
@pytest.mark.parametrize("block_n", [112, 144, 160])
def test_straddling_widths_in_clusters(generator, raster, block_n):
    """64-row tiles 112, 144 and 160 wide (straddling two weight-scale blocks) in 2-CTA
    clusters, B or A multicast, odd tile counts, a bias; 144 under raster n was refused by
    TileLang's ThreadSync, which the kernels compile without (``KERNEL_PASS_CONFIGS``)."""
    from tlgemm.schedules import Schedule

    schedule = Schedule(block_m=64, block_n=block_n, block_k=128, raster=raster).persistent(9).cluster(2)
    _check_with_bias(generator, schedule, 200, 2112, 640)


@pytest.mark.parametrize("raster", ["m", "n"])
@pytest.mark.parametrize("M, N, K", [(1000, 2112, 512), (600, 384, 1536)], ids=str)
def test_row_waves_in_clusters(generator, raster, M, N, K):
    """256x128 row waves in 2-CTA clusters (B or A multicast), odd tile counts, a bias, fewer
    programs than tiles; against the reference and the Triton kernel."""
    from tlgemm.schedules import Schedule

    schedule = Schedule(block_m=256, block_n=128, block_k=128, num_stages=3, num_warpgroups=2,
                        raster=raster).persistent(5).cluster(2)
    _check_with_bias(generator, schedule, M, N, K)


@pytest.mark.parametrize("raster", ["m", "n"])
@pytest.mark.parametrize("block_m, block_n, stages, K", [(128, 256, 4, 1024), (128, 192, 4, 2048),
                                                         (256, 128, 3, 1536), (128, 256, 4, 640)], ids=str)
def test_ring_rounds_unrolled_in_clusters(generator, raster, block_m, block_n, stages, K):
    """The M = 4096 default tiles in 2-CTA clusters with the token scales by TMA (M > 128): K a
    whole number of ring rounds runs each round unrolled, K = 640 the generic loop; odd tile
    counts, several tiles a program, a bias; against the reference and the Triton kernel, then
    two launches equal."""
    from tlgemm.schedules import Schedule

    schedule = Schedule(block_m=block_m, block_n=block_n, block_k=128, num_stages=stages, num_warpgroups=2,
                        raster=raster).persistent(5).cluster(2)
    _check_twice(generator, schedule, 1000, 1400, K)


@pytest.mark.parametrize("M, swap", [(40, True), (256, False), (1001, False)], ids=str)
def test_token_scales_by_tma(generator, M, swap):
    """scale_a outer-dim-major in a padded buffer (K-block rows 16-byte aligned): its tokens
    arrive by TMA (tokens past M zero-filled), plain and swap-AB tiles, checked against the
    reference; for M <= 128 also the same result as the cp.async path on a dense copy of the
    scales (above it, that copy is made token-major and read by TMA too)."""
    from tlgemm.schedules import Schedule
    from tlgemm.tilelang import launch

    N, K = 1000, 640
    schedule = (Schedule(block_m=64, block_n=48, block_k=128, num_stages=4, num_warpgroups=1).persistent().swap_ab()
                if swap else None)
    a, b, sa, sb = _problem(generator, M, N, K)
    padded = torch.zeros((K // 128, M + (-M) % 4 + 8), device=DEV)[:, 4:M + 4]
    padded.copy_(sa.T)
    assert launch._tma_token_scales(padded.T) and not launch._tma_token_scales(sa)
    out = poisoned((M, N), torch.bfloat16, DEV)
    blockscaled_matmul(a, b, padded.T, sb, schedule, out=out)
    _close(out, _expected(a, b, sa, sb), what="TMA scales vs reference")
    if M <= 128:  # a row-major scale_a is read in place by cp.async (larger M copies it for TMA)
        assert torch.equal(out, blockscaled_matmul(a, b, sa, sb, schedule))


@pytest.mark.parametrize("M", [20, 64])
def test_swap_ab_in_clusters(generator, M):
    """Swap-AB tiles in 2-CTA clusters: the pair's tiles share their token columns, so the
    activations (the kernel's B operand) are multicast; odd program count, bias."""
    from tlgemm.schedules import Schedule

    N, K = 2112, 512
    schedule = Schedule(block_m=64, block_n=32, block_k=128, num_stages=6,
                        num_warpgroups=1).persistent(9).swap_ab().cluster(2)
    a, b, sa, sb = _problem(generator, M, N, K)
    bias = torch.randn(N, generator=generator).to(DEV)
    out = poisoned((M, N), torch.bfloat16, DEV)
    blockscaled_matmul(a, b, sa, sb, schedule, out=out, bias=bias)
    _close(out, _expected(a, b, sa, sb, bias=bias), what=f"{schedule} vs reference")


def test_bias_and_fp32_output(generator):
    M, N, K = 333, 512, 1024
    a, b, sa, sb = _problem(generator, M, N, K)
    bias = torch.randn(N, generator=generator).to(DEV)
    out = poisoned((M, N), torch.float32, DEV)
    blockscaled_matmul(a, b, sa, sb, out=out, bias=bias)
    _close(out, _expected(a, b, sa, sb, bias=bias))


@pytest.mark.parametrize("M", [256, 333])
def test_scales_in_either_orientation(generator, M):
    """A's scales outer-dim-major (torch._scaled_mm's layout, which the kernel reads without a
    copy) and B's as a transposed view give the same result as dense ones."""
    N, K = 384, 640
    a = random_operand((M, K), FP8, generator=generator, device=DEV)
    b = random_operand((N, K), FP8, generator=generator, device=DEV)
    sa, sb = _scales((M, K // 128), generator), _scales((N // 128, K // 128), generator)
    dense = blockscaled_matmul(a, b, sa, sb)
    out = poisoned((M, N), torch.bfloat16, DEV)
    blockscaled_matmul(a, b, sa.t().contiguous().t(), sb.t().contiguous().t(), out=out)
    assert torch.equal(out, dense)
    _close(out, _expected(a, b, sa, sb))


@pytest.mark.parametrize("M", [64, 200])
def test_broadcast_token_scales(generator, M):
    """A's scales with a stride of 0: one scale per token for every K block, and a batch
    sharing one xs. A tensor map's strides are non-zero, so these are not read by TMA: copied
    token-major above 128 tokens, read by cp.async at their own strides below (a TMA
    descriptor with stride 0 failed at launch)."""
    N, K = 256, 512
    a = random_operand((M, K), FP8, generator=generator, device=DEV)
    b = random_operand((N, K), FP8, generator=generator, device=DEV)
    per_token = _scales((M,), generator)[:, None].expand(M, K // 128)
    sb = _scales((N // 128, K // 128), generator)
    out = poisoned((M, N), torch.bfloat16, DEV)
    blockscaled_matmul(a, b, per_token, sb, out=out)
    _close(out, _expected(a, b, per_token.contiguous(), sb), what="per-token scales, K-block stride 0")
    x = random_operand((2, M, K), FP8, generator=generator, device=DEV)
    y = random_operand((2, N, K), FP8, generator=generator, device=DEV)
    shared = _scales((K // 128, M), generator).mT[None].expand(2, M, K // 128)
    ys = _scales((2, N // 128, K // 128), generator)
    out = poisoned((2, M, N), torch.bfloat16, DEV)
    blockscaled_bmm(x, y, shared, ys, out=out)
    for i in range(2):
        _close(out[i], _expected(x[i], y[i], shared[i].contiguous(), ys[i]), what=f"shared xs, batch {i}")


def test_overlapping_out_is_refused(generator):
    """An out whose elements may share memory (the Triton launcher's rule) is refused before
    the kernel runs; it was copied into silently, or failed in torch's copy after the kernel."""
    a, b, sa, sb = _problem(generator, 64, 64, 256)
    for out in (torch.zeros(64, device=DEV, dtype=torch.bfloat16).expand(64, 64),
                torch.zeros(4096, device=DEV, dtype=torch.bfloat16).as_strided((64, 64), (1, 1))):
        with pytest.raises(ValueError, match=r"^out: strides .* may make elements of shape \(64, 64\) overlap"):
            blockscaled_matmul(a, b, sa, sb, out=out)


@pytest.mark.parametrize("batch, M, N, K", [(3, 65, 2112, 512), (2, 1, 256, 1024), (4, 300, 384, 256),
                                            (1, 64, 2112, 7168), (1, 16, 4096, 1024)], ids=str)
def test_batched_matches_reference_and_triton(generator, batch, M, N, K):
    """FlagGems' batched form: x [B, M, K], y [B, N, K], xs [B, M, K/128] passed outer-dim-major
    (any strides), ys [B, ceil(N/128), K/128]; every GEMM of the batch checked. A batch of one
    takes the batched kernel's default (no Stream-K or split-K, which a single GEMM of these
    shapes would take)."""
    x, y, xs, ys = _batched_problem(generator, batch, M, N, K)
    bias = torch.randn(N, generator=generator).to(DEV)
    out = poisoned((batch, M, N), torch.bfloat16, DEV)
    assert blockscaled_bmm(x, y, xs, ys, out=out, bias=bias) is out
    for i in range(batch):
        _close(out[i], _expected(x[i], y[i], xs[i], ys[i], bias), what=f"batch {i} vs reference")
    other = TR.blockscaled_bmm(x, y, xs, ys, bias=bias)
    _close(out, other.double(), what="vs Triton")


def test_repeat_calls_reuse_the_launch_only_for_their_signature(generator):
    """A repeated call of one argument signature takes the cached launch (fresh data, right
    result); a non-dense a, a strided out and a bias each derive their own."""
    from tlgemm.tilelang import launch

    M, N, K = 200, 256, 512
    sb = _scales((N // 128, K // 128), generator)

    def check(a, sa, **kwargs):
        if "out" not in kwargs:
            poison_allocator((M, N), torch.bfloat16, DEV)
        out = blockscaled_matmul(a, b, sa, sb, **kwargs)
        _close(out, _expected(a.contiguous(), b, sa, sb, kwargs.get("bias")))

    b = random_operand((N, K), FP8, generator=generator, device=DEV)
    launch._BLOCKSCALED_LAUNCHES.clear()
    for _ in range(2):
        check(random_operand((M, K), FP8, generator=generator, device=DEV), _scales((M, K // 128), generator))
    assert len(launch._BLOCKSCALED_LAUNCHES) == 1
    wide = random_operand((M, K + 128), FP8, generator=generator, device=DEV)
    check(wide[:, :K], _scales((M, K // 128), generator))
    out = poisoned((N, M), torch.bfloat16, DEV).T
    check(random_operand((M, K), FP8, generator=generator, device=DEV), _scales((M, K // 128), generator), out=out)
    check(random_operand((M, K), FP8, generator=generator, device=DEV), _scales((M, K // 128), generator),
          bias=torch.randn(N, generator=generator).to(DEV))
    assert len(launch._BLOCKSCALED_LAUNCHES) == 4
