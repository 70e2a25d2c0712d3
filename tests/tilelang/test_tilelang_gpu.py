"""GPU tests of the TileLang backend's kernels against the float64 reference: every input
dtype, K-/MN-major operands, ragged M/N/K (TMA bounds), every epilogue, one and two consumer
warpgroups, Stream-K reproducibility, and the device schedule trace vs the host reference."""

import dataclasses

import pytest
import torch

import tlgemm.tilelang as TL
from tlgemm.schedules import Schedule, num_programs, work
from tlgemm.tilelang.launch import shared_memory_bytes
from tlgemm.testing import assert_gemm_close, poison_allocator, poisoned, random_operand, reference_gemm

pytestmark = pytest.mark.gpu

DEV = "cuda"
ONE_WG = Schedule(block_m=128, block_n=128, block_k=64, num_stages=4).persistent()
TWO_WG = Schedule(block_m=128, block_n=256, block_k=64, num_stages=3, num_warpgroups=2).persistent()
STREAMK = Schedule(block_m=128, block_n=128, block_k=64, num_stages=4).persistent().streamk(40)
STREAMK_2WG = Schedule(block_m=128, block_n=256, block_k=64, num_stages=4, num_warpgroups=2).persistent().streamk(40)
SWAP_AB = Schedule(block_m=128, block_n=32, block_k=64, num_stages=6).persistent().swap_ab()
SWAP_AB_STREAMK = Schedule(block_m=256, block_n=16, block_k=64, num_stages=6).persistent().streamk(3).swap_ab()
# 2-CTA clusters: B multicast under raster m, A under raster n; an odd grid (a phantom rank 1)
CLUSTERS = {"2wg-m": TWO_WG.cluster(2), "1wg-n": ONE_WG.map("grouped_n", 4).cluster(2),
            "2wg-m-7sms": TWO_WG.persistent(num_sms=7).cluster(2), "1wg-m-g3": ONE_WG.map("grouped", 3).cluster(2)}
# name: (a dtype, b dtype, out dtype, tolerance dtype)
DTYPES = {
    "fp16": (torch.float16, torch.float16, torch.float16, torch.float16),
    "bf16": (torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.bfloat16),
    "tf32": (torch.float32, torch.float32, torch.float32, torch.float32),
    "e4m3": (torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, torch.float8_e4m3fn),
    "e5m2": (torch.float8_e5m2, torch.float8_e5m2, torch.float16, torch.float8_e5m2),
    "e4m3xe5m2": (torch.float8_e4m3fn, torch.float8_e5m2, torch.float32, torch.float8_e4m3fn),
    "int8": (torch.int8, torch.int8, torch.int32, torch.int8),
}
SHAPES = [(1, 128, 64), (65, 200, 77), (257, 511, 1000), (1024, 1024, 1024)]


def _block_k(dtype, schedule, out_dtype=torch.bfloat16):
    """One 128-byte swizzle row of K per stage, and as many stages (<= the schedule's) as
    the H100's 227 KiB of shared memory holds."""
    s = dataclasses.replace(schedule, block_k=128 // dtype.itemsize)
    while shared_memory_bytes(s, dtype, dtype, out_dtype) > 232448:
        s = s.stages(s.num_stages - 1)
    return s


def _operand(rows, cols, dtype, generator, column_major):
    if column_major:
        return random_operand((cols, rows), dtype, generator=generator, device=DEV).T
    return random_operand((rows, cols), dtype, generator=generator, device=DEV)


def check(out, ref, tol_dtype, what):
    if tol_dtype == torch.int8:
        assert torch.equal(out.cpu().long(), ref.cpu().long()), f"{what}: int8 GEMM not exact"
    else:
        assert_gemm_close(out, ref, tol_dtype, allow_tf32=tol_dtype == torch.float32, what=what)


def run_checked(generator, shape, dtype, schedule, epilogue=None):
    """TL.matmul on fresh random operands (A row-major, B the transpose of a row-major [N, K])
    into a NaN-poisoned C, checked against the float64 reference; ``epilogue(M, N)`` gives
    the scale / bias arguments. Returns (a, b, schedule with dtype's block_k, arguments, C)."""
    M, N, K = shape
    a_dtype, b_dtype, out_dtype, tol = DTYPES[dtype]
    s = _block_k(a_dtype, schedule, out_dtype)
    a = _operand(M, K, a_dtype, generator, False)
    b = _operand(K, N, b_dtype, generator, True)
    kw = epilogue(M, N) if epilogue else {}
    out = poisoned((M, N), out_dtype, DEV)
    TL.matmul(a, b, s, out=out, **kw)
    check(out, reference_gemm(a, b, **kw), tol, f"{dtype} {shape} {s}")
    return a, b, s, kw, out


@pytest.mark.parametrize("schedule", [ONE_WG, TWO_WG, STREAMK], ids=["1wg", "2wg", "streamk"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_reference(generator, shape, dtype, schedule):
    run_checked(generator, shape, dtype, schedule)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("layouts", [(0, 0), (0, 1), (1, 0), (1, 1)], ids=["nn", "nt", "tn", "tt"])
def test_mn_major_operands(generator, dtype, layouts):
    M, N, K = 300, 264, 200
    a_dtype, b_dtype, out_dtype, tol = DTYPES[dtype]
    a = _operand(M, K, a_dtype, generator, bool(layouts[0]))
    b = _operand(K, N, b_dtype, generator, bool(layouts[1]))
    out = poisoned((M, N), out_dtype, DEV)
    TL.matmul(a, b, ONE_WG, out=out)
    check(out, reference_gemm(a, b), tol, f"layouts={layouts}")


@pytest.mark.parametrize("epilogue", ["tensor", "row_col", "bias", "row_col_bias"])
@pytest.mark.parametrize("dtype", ["bf16", "e4m3", "int8"])
def test_epilogues(generator, dtype, epilogue):
    M, N, K = 333, 250, 320
    a_dtype, b_dtype, _, tol = DTYPES[dtype]
    s = _block_k(a_dtype, ONE_WG)
    a = _operand(M, K, a_dtype, generator, False)
    b = _operand(K, N, b_dtype, generator, True)
    kw = {}
    if epilogue == "tensor":
        kw = dict(scale_a=torch.rand(1, generator=generator).to(DEV) + 0.5, scale_b=torch.rand(1, generator=generator).to(DEV) + 0.5)
    if "row_col" in epilogue:
        kw = dict(scale_a=torch.rand(M, generator=generator).to(DEV) + 0.5, scale_b=torch.rand(N, generator=generator).to(DEV) + 0.5)
    if "bias" in epilogue:
        kw["bias"] = torch.randn(N, generator=generator).to(DEV, torch.bfloat16)
    out = poisoned((M, N), torch.bfloat16, DEV)
    TL.matmul(a, b, s, out=out, **kw)
    check(out, reference_gemm(a, b, **kw), torch.bfloat16 if tol == torch.int8 else tol, epilogue)


@pytest.mark.parametrize("dtype", ["bf16", "e4m3", "tf32"])
@pytest.mark.parametrize("shape", [(1000, 3000, 1500), (2304, 1024, 4096), (77, 512, 9000)],
                         ids=lambda s: "x".join(map(str, s)))
def test_streamk_two_warpgroups_deep_ring(generator, shape, dtype):
    """The select() default shape (128x256, two consumer warpgroups, four stages) under Stream-K:
    owners add partials in the chunked epilogue; repeated calls give the same bits."""
    def epilogue(M, N):
        return dict(scale_a=torch.rand(M, generator=generator).to(DEV) + 0.5,
                    bias=torch.randn(N, generator=generator).to(DEV, torch.bfloat16)) if dtype == "e4m3" else {}

    a, b, s, kw, out = run_checked(generator, shape, dtype, STREAMK_2WG, epilogue)
    for _ in range(4):
        assert torch.equal(TL.matmul(a, b, s, out_dtype=out.dtype, **kw), out)


WIDE = {"128x176": Schedule(block_m=128, block_n=176, block_k=64, num_stages=5, num_warpgroups=2).persistent(),
        "64x144": Schedule(block_m=64, block_n=144, block_k=64, num_stages=6).persistent(),
        "128x208-streamk": Schedule(block_m=128, block_n=208, block_k=64, num_stages=4,
                                    num_warpgroups=2).persistent().streamk(30)}


@pytest.mark.parametrize("schedule", WIDE.values(), ids=WIDE)
@pytest.mark.parametrize("dtype", ["bf16", "e4m3", "tf32", "int8"])
@pytest.mark.parametrize("shape", [(4096, 2112, 1024), (1000, 2000, 1500), (65, 200, 77)],
                         ids=lambda s: "x".join(map(str, s)))
def test_block_n_no_power_of_two(generator, shape, dtype, schedule):
    """A block_n that is no power of two (tiles cutting N = 2112 into 12 tile columns), B K-major;
    ragged M, N and K, Stream-K with partials in the epilogue, scales and bias per column."""
    def epilogue(M, N):
        return dict(scale_b=torch.rand(N, generator=generator).to(DEV) + 0.5,
                    bias=torch.randn(N, generator=generator).to(DEV, torch.bfloat16)) if dtype == "e4m3" else {}

    run_checked(generator, shape, dtype, schedule, epilogue)


def test_block_n_no_power_of_two_needs_b_k_major(generator):
    a = _operand(300, 256, torch.bfloat16, generator, False)
    b = _operand(256, 400, torch.bfloat16, generator, False)  # N-major B
    with pytest.raises(ValueError, match="schedule: block_n=176 is not a power of two, which the TileLang GEMM "
                                         "kernels take only with B K-major"):
        TL.matmul(a, b, WIDE["128x176"])


@pytest.mark.parametrize("schedule", [SWAP_AB, SWAP_AB_STREAMK], ids=["persistent", "streamk-256"])
@pytest.mark.parametrize("dtype", ["bf16", "e4m3"])
@pytest.mark.parametrize("M", [1, 7, 64])
@pytest.mark.parametrize("N", [1000, 1001])
@pytest.mark.parametrize("out_layout", ["row", "column", "fresh"])
def test_swap_ab(generator, schedule, M, N, dtype, out_layout):
    """Cᵀ = Bᵀ·Aᵀ with the plain kernel: scales trade places, the bias runs along Cᵀ's rows;
    the tiles are stored transposed into a row-major C (a fresh one too), plainly into a
    column-major one, through a temporary where N·2 bytes is no multiple of 16."""
    K = 520
    a_dtype, b_dtype, _, tol = DTYPES[dtype]
    s = _block_k(a_dtype, schedule)
    a = _operand(M, K, a_dtype, generator, False)
    b = _operand(K, N, b_dtype, generator, True)
    kw = dict(scale_a=torch.rand(M, generator=generator).to(DEV) + 0.5,
              scale_b=torch.rand(N, generator=generator).to(DEV) + 0.5,
              bias=torch.randn(N, generator=generator).to(DEV, torch.bfloat16))
    if out_layout == "fresh":
        poison_allocator((M, N), torch.bfloat16, DEV)
        out = TL.matmul(a, b, s, out_dtype=torch.bfloat16, **kw)
    else:
        out = poisoned((M, N), torch.bfloat16, DEV) if out_layout == "row" else poisoned((N, M), torch.bfloat16, DEV).T
        TL.matmul(a, b, s, out=out, **kw)
    check(out, reference_gemm(a, b, **kw), tol, f"swap-AB {schedule} {dtype} M={M} N={N} out {out_layout}")


@pytest.mark.parametrize("schedule", CLUSTERS)
@pytest.mark.parametrize("dtype", ["bf16", "e4m3", "tf32", "int8"])
@pytest.mark.parametrize("shape", SHAPES + [(300, 1000, 200), (4100, 2100, 300)], ids=lambda s: "x".join(map(str, s)))
def test_clusters_match_reference(generator, shape, dtype, schedule):
    """Cluster pairs whose tiles share a tile column (row) multicast B (A), others load
    their own; a rank 1 without a tile recomputes its partner's and stores nothing."""
    M, N, K = shape
    a_dtype, b_dtype, out_dtype, tol = DTYPES[dtype]
    s = _block_k(a_dtype, CLUSTERS[schedule], out_dtype)
    a = _operand(M, K, a_dtype, generator, False)
    b = _operand(K, N, b_dtype, generator, True)
    out = poisoned((M, N), out_dtype, DEV)
    TL.matmul(a, b, s, out=out)
    check(out, reference_gemm(a, b), tol, f"{dtype} {shape} {schedule}")


@pytest.mark.parametrize("layouts", [(1, 0), (1, 1)], ids=["tn", "tt"])
def test_clusters_with_epilogue_and_mn_major(generator, layouts):
    M, N, K = 700, 900, 260
    a = _operand(M, K, torch.bfloat16, generator, bool(layouts[0]))
    b = _operand(K, N, torch.bfloat16, generator, bool(layouts[1]))
    kw = dict(scale_a=torch.rand(M, generator=generator).to(DEV) + 0.5,
              scale_b=torch.rand(N, generator=generator).to(DEV) + 0.5,
              bias=torch.randn(N, generator=generator).to(DEV, torch.bfloat16))
    out = poisoned((M, N), torch.bfloat16, DEV)
    TL.matmul(a, b, CLUSTERS["2wg-m"], out=out, **kw)
    check(out, reference_gemm(a, b, **kw), torch.bfloat16, f"layouts={layouts}")


def test_streamk_is_reproducible(generator):
    """Twenty Stream-K launches give one result, bit for bit, and it is the product: each into
    a poisoned out (equal runs alone passed a kernel that dropped the same tiles every time)."""
    a = random_operand((1000, 777), torch.bfloat16, generator=generator, device=DEV)
    b = random_operand((777, 900), torch.bfloat16, generator=generator, device=DEV).T.contiguous().T
    first = TL.matmul(a, b, STREAMK, out=poisoned((1000, 900), torch.bfloat16, DEV))
    check(first, reference_gemm(a, b), torch.bfloat16, "Stream-K")
    for _ in range(19):
        assert torch.equal(TL.matmul(a, b, STREAMK, out=poisoned((1000, 900), torch.bfloat16, DEV)), first)


def test_streamk_programs_must_fit_the_device(generator):
    """A Stream-K launch on more programs than SMs would wait forever (a tile's owner spins on
    later programs' partial results): a ValueError naming num_sms, in the GEMM and the
    block-scaled kernel alike."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a = random_operand((256, 512), torch.bfloat16, generator=generator, device=DEV)
    b = random_operand((512, 256), torch.bfloat16, generator=generator, device=DEV)
    with pytest.raises(ValueError, match="num_sms: a Stream-K schedule runs"):
        TL.matmul(a, b, Schedule(block_m=64).persistent(sms + 1).streamk(4))
    a8, b8 = a.to(torch.float8_e4m3fn), b.T.contiguous().to(torch.float8_e4m3fn)
    sa, sb = torch.ones(256, 4, device=DEV), torch.ones(2, 4, device=DEV)
    schedule = Schedule(block_m=64, block_n=64, block_k=128, num_warpgroups=1).persistent().streamk(4)
    with pytest.raises(ValueError, match="num_sms: a Stream-K schedule runs"):
        TL.blockscaled_matmul(a8, b8, sa, sb, schedule, num_sms=sms + 1)


@pytest.mark.parametrize("schedule", [
    ONE_WG, Schedule(group_size_m=3, raster="n").persistent(), STREAMK, Schedule(block_m=64).persistent().streamk(7),
    Schedule(block_n=64),
], ids=["persistent", "grouped-n", "streamk", "streamk-small", "data-parallel"])
@pytest.mark.parametrize("shape", [(1000, 1000, 512), (130, 2000, 70), (64, 64, 1000)], ids=lambda s: "x".join(map(str, s)))
def test_trace_equals_host_reference(shape, schedule):
    M, N, K = shape
    trace = TL.schedule_trace(M, N, K, schedule, num_sms=132)
    assert trace == [work(p, M, N, K, schedule, 132) for p in range(num_programs(M, N, K, schedule, 132))]


BMM_CASES = {  # name: (batch, M, N, K, a layout, b layout) with layouts "k" / "mn" / "bcast" (stride-0 batch)
    "kk": (3, 65, 200, 256, "k", "k"),
    "mn": (2, 130, 256, 96, "mn", "mn"),
    "mixed": (4, 1, 72, 77, "k", "mn"),
    "bcast": (3, 77, 128, 512, "bcast", "k"),
}


def _batched_operand(batch, rows, cols, dtype, generator, layout):
    """[batch, rows, cols] with rows' elements contiguous ("k" for A, i.e. row-major), or the
    transposed storage ("mn"), or one matrix expanded over the batch ("bcast")."""
    if layout == "bcast":
        return random_operand((1, rows, cols), dtype, generator=generator, device=DEV).expand(batch, rows, cols)
    if layout == "mn":
        return random_operand((batch, cols, rows), dtype, generator=generator, device=DEV).mT
    return random_operand((batch, rows, cols), dtype, generator=generator, device=DEV)


@pytest.mark.parametrize("case", BMM_CASES)
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "e4m3", "int8", "tf32"])
@pytest.mark.parametrize("schedule", [ONE_WG, TWO_WG], ids=["1wg", "2wg"])
def test_bmm_matches_reference(generator, case, dtype, schedule):
    """The batched persistent kernel (3-D TMA boxes, batch-major tiles) against the float64
    reference, every GEMM of the batch, ragged M/N/K, with the module's copy rule for the
    layouts it cannot read (a broadcast batch, MN-major 8-bit/fp32 operands)."""
    batch, M, N, K, la, lb = BMM_CASES[case]
    a_dtype, b_dtype, out_dtype, tol = DTYPES[dtype]
    a = _batched_operand(batch, M, K, a_dtype, generator, la)
    b = _batched_operand(batch, N, K, b_dtype, generator, lb).mT  # "k": b [B, K, N] with columns contiguous
    out = poisoned((batch, M, N), out_dtype, DEV)
    assert TL.bmm(a, b, _block_k(a_dtype, schedule, out_dtype), out=out) is out
    check(out, reference_gemm(a, b), tol, f"bmm {case} {dtype}")


def test_bmm_epilogue_and_strided_out(generator):
    """Scales and bias shared by every GEMM; an output that is not dense goes through one
    temporary; out_dtype float32."""
    batch, M, N, K = 3, 100, 136, 320
    a = random_operand((batch, M, K), torch.bfloat16, generator=generator, device=DEV)
    b = random_operand((batch, N, K), torch.bfloat16, generator=generator, device=DEV).mT
    sa = (torch.rand(M, generator=generator) + 0.5).to(DEV)
    sb = (torch.rand(N, generator=generator) + 0.5).to(DEV)
    bias = torch.randn(N, generator=generator).to(DEV)
    out = poisoned((batch, N, M), torch.float32, DEV).mT
    TL.bmm(a, b, ONE_WG, out=out, scale_a=sa, scale_b=sb, bias=bias)
    check(out, reference_gemm(a, b, scale_a=sa, scale_b=sb, bias=bias), torch.bfloat16, "bmm epilogue")


def test_overlapping_or_mistyped_out_is_named(generator):
    """matmul and bmm refuse an out whose elements may share memory before the kernel runs (it
    was copied into silently, or failed in torch's copy after the kernel), and bmm names out,
    not out_dtype, for an out of the wrong dtype."""
    a = random_operand((64, 128), torch.bfloat16, generator=generator, device=DEV)
    b = random_operand((128, 64), torch.bfloat16, generator=generator, device=DEV)
    overlapping = torch.zeros(4096, device=DEV, dtype=torch.bfloat16).as_strided((64, 64), (1, 1))
    with pytest.raises(ValueError, match=r"^out: strides \(1, 1\) may make elements of shape \(64, 64\) overlap"):
        TL.matmul(a, b, ONE_WG, out=overlapping)
    with pytest.raises(ValueError, match=r"^out: strides \(0, 1, 1\) may make elements"):
        TL.bmm(a[None].expand(2, 64, 128), b[None].expand(2, 128, 64), ONE_WG, out=overlapping[None].expand(2, 64, 64))
    with pytest.raises(TypeError, match=r"^out: .*got torch.int32"):
        TL.bmm(a[None], b[None], ONE_WG, out=torch.empty(1, 64, 64, dtype=torch.int32, device=DEV))


def test_results_past_int32_are_refused_before_allocation():
    """The launchers refuse a result (or C's row-padded temporary) of 2**31 elements or more
    when they allocate it themselves, as they refuse such an out: the kernels index in int32."""
    half = torch.float16
    a, b = torch.zeros(46341, 64, dtype=half, device=DEV), torch.zeros(64, 46341, dtype=half, device=DEV)
    message = r"^out: the result \({}\) would hold {} elements; the TileLang kernels index in int32"
    with pytest.raises(ValueError, match=message.format("46341, 46341", 2147488281)):
        TL.matmul(a, b, ONE_WG)
    with pytest.raises(ValueError, match=r"^out: its row-padded temporary \(46340, 46400\) would hold 2150176000 "):
        TL.matmul(a[:46340], b[:, :46337], ONE_WG)
    with pytest.raises(ValueError, match=message.format("32769, 256, 256", 2147549184)):
        TL.bmm(a[None, :256].expand(2**15 + 1, 256, 64), b[None, :, :256].expand(2**15 + 1, 64, 256), ONE_WG)
    e4m3 = torch.float8_e4m3fn
    x = torch.zeros(46341, 128, dtype=e4m3, device=DEV)
    with pytest.raises(ValueError, match=message.format("46341, 46341", 2147488281)):
        TL.blockscaled_matmul(x, x, torch.ones(46341, 1, device=DEV), torch.ones(363, 1, device=DEV))


def test_empty_problems_launch_nothing(generator):
    """K = 0 gives zeros (plus the bias row), M, N or the batch = 0 an empty result, in the
    plain, batched and block-scaled launchers; outputs are poisoned first."""
    bias = torch.randn(24, generator=generator).to(DEV)
    a, b = torch.empty(16, 0, dtype=torch.bfloat16, device=DEV), torch.empty(0, 24, dtype=torch.bfloat16, device=DEV)
    out = poisoned((16, 24), torch.float32, DEV)
    TL.matmul(a, b, ONE_WG, out=out, bias=bias)
    assert torch.equal(out, bias.expand(16, 24))
    out = poisoned((2, 16, 24), torch.bfloat16, DEV)
    TL.bmm(a.expand(2, 16, 0), b.expand(2, 0, 24), ONE_WG, out=out)
    assert torch.equal(out, torch.zeros_like(out))
    assert TL.bmm(a.expand(0, 16, 0), b.expand(0, 0, 24), ONE_WG).shape == (0, 16, 24)
    e4m3 = torch.float8_e4m3fn
    out = poisoned((16, 24), torch.float32, DEV)
    TL.blockscaled_matmul(a.to(e4m3), b.t().to(e4m3), torch.empty(16, 0, device=DEV), torch.empty(1, 0, device=DEV),
                          out=out, bias=bias)
    assert torch.equal(out, bias.expand(16, 24))
    empty = TL.blockscaled_bmm(torch.empty(0, 16, 128, dtype=e4m3, device=DEV), torch.empty(0, 24, 128, dtype=e4m3,
                               device=DEV), torch.empty(0, 16, 1, device=DEV), torch.empty(0, 1, 1, device=DEV))
    assert empty.shape == (0, 16, 24)
