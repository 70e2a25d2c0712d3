"""GPU (H100) tests of the compiled Triton kernels against the float64 reference: random
ragged shapes, every input dtype, row-/column-major operands, every epilogue, several
schedules; Stream-K bit-reproducibility; the schedule trace on the device."""

import pytest
import torch

import tlgemm.triton as T
from tlgemm.triton import launch as L
from tlgemm.schedules import Schedule, num_programs, streamk_plan, tile_contributors, work
from tlgemm.testing import assert_gemm_close, poisoned, random_operand, reference_gemm

pytestmark = pytest.mark.gpu

DEV = "cuda"
PERSISTENT = Schedule(block_m=128, block_n=128, block_k=64, num_stages=3).persistent()
STREAMK = Schedule(block_m=128, block_n=128, block_k=64, num_stages=3).streamk(48).persistent()
KERNELS = {"persistent": PERSISTENT, "streamk": STREAMK}


SHAPES = [(1, 64, 128), (37, 53, 29), (130, 70, 300), (257, 511, 1000), (1000, 1000, 64), (640, 1536, 2056)]
# name: (a dtype, b dtype, out dtype, allow_tf32, tolerance class)
DTYPES = {
    "fp32": (torch.float32, torch.float32, torch.float32, False, torch.float32),
    "tf32": (torch.float32, torch.float32, torch.float32, True, torch.float32),
    "fp16": (torch.float16, torch.float16, torch.float16, False, torch.float16),
    "bf16": (torch.bfloat16, torch.bfloat16, torch.bfloat16, False, torch.bfloat16),
    "e4m3": (torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, False, torch.float8_e4m3fn),
    "e5m2": (torch.float8_e5m2, torch.float8_e5m2, torch.float16, False, torch.float8_e5m2),
    "e4m3xe5m2": (torch.float8_e4m3fn, torch.float8_e5m2, torch.float32, False, torch.float8_e4m3fn),
    "int8": (torch.int8, torch.int8, torch.int32, False, torch.int8),
}


def _operand(rows, cols, dtype, generator, column_major):
    """A rows × cols operand, stored column-major when asked (its transpose is contiguous)."""
    if column_major:
        return random_operand((cols, rows), dtype, generator=generator, device=DEV).T
    return random_operand((rows, cols), dtype, generator=generator, device=DEV)


def _check(out, ref, tolerance_dtype, allow_tf32=False, what="result"):
    if tolerance_dtype == torch.int8:
        assert torch.equal(out.cpu().long(), ref.cpu().long()), f"{what}: int8 GEMM not exact"
    else:
        assert_gemm_close(out, ref, tolerance_dtype, allow_tf32=allow_tf32, what=what)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_dtype_matches_reference(generator, shape, dtype, kernel):
    M, N, K = shape
    a_dtype, b_dtype, out_dtype, tf32, tol = DTYPES[dtype]
    layouts = torch.randint(0, 2, (2,), generator=generator).tolist()  # row- or column-major A, B
    a = _operand(M, K, a_dtype, generator, bool(layouts[0]))
    b = _operand(K, N, b_dtype, generator, bool(layouts[1]))
    out = poisoned((M, N), out_dtype, DEV)
    T.matmul(a, b, KERNELS[kernel], out=out, allow_tf32=tf32)
    _check(out, reference_gemm(a, b), tol, tf32, what=f"layouts={layouts}")


EPILOGUES = ["per_tensor", "per_row_col", "bias", "per_row_col_bias"]


def _epilogue(kind, M, N, generator):
    kwargs = {}
    if kind == "per_tensor":
        kwargs.update(scale_a=torch.rand(1, generator=generator) + 0.5, scale_b=torch.rand(1, generator=generator) + 0.5)
    if kind.startswith("per_row_col"):
        kwargs.update(scale_a=torch.rand(M, generator=generator) + 0.5, scale_b=torch.rand(N, generator=generator) + 0.5)
    if kind.endswith("bias"):
        kwargs.update(bias=torch.randn(N, generator=generator).to(torch.bfloat16))
    return {name: value.to(DEV) for name, value in kwargs.items()}


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "e4m3", "int8"])
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_scaled_gemm(generator, epilogue, dtype, kernel):
    M, N, K = 333, 270, 520
    a_dtype, b_dtype, _, _, tol = DTYPES[dtype]
    a = _operand(M, K, a_dtype, generator, False)
    b = _operand(K, N, b_dtype, generator, a_dtype.itemsize == 1)  # 8-bit: the usual K-major B
    kwargs = _epilogue(epilogue, M, N, generator)
    out = poisoned((M, N), torch.float32, DEV)
    T.matmul(a, b, KERNELS[kernel], out=out, **kwargs)
    ref = reference_gemm(a, b, **kwargs)
    # The epilogue runs in float32; int8 products are exact, so fp32 rounding bounds them.
    _check(out, ref, torch.float32 if dtype == "int8" else tol, what=epilogue)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", ["bf16", "e4m3", "int8"])
@pytest.mark.parametrize("a_major, b_major", [("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")])
def test_layouts_and_strided_output(generator, a_major, b_major, dtype, kernel):
    M, N, K = 300, 200, 264
    a_dtype, b_dtype, out_dtype, _, tol = DTYPES[dtype]
    a = _operand(M, K, a_dtype, generator, a_major == "col")
    b = _operand(K, N, b_dtype, generator, b_major == "col")
    out = poisoned((N, M), out_dtype, DEV).T
    T.matmul(a, b, KERNELS[kernel], out=out)
    _check(out, reference_gemm(a, b), tol)


SCHEDULES = {
    "one_program_per_tile": Schedule(block_m=64, block_n=128, block_k=64),
    "wide_two_warpgroups": Schedule(block_m=128, block_n=256, block_k=64, num_warpgroups=2).persistent(),
    "small_raster_n": Schedule(block_m=64, block_n=64, block_k=32, group_size_m=4, raster="n", num_stages=4).persistent(),
    "row_order": Schedule(block_m=128, block_n=64, block_k=128, num_stages=2).map("row").persistent(),
    "chiplet_remap": Schedule().chiplet(4, 2).persistent(),
    "streamk_all_tiles": Schedule(block_m=64, block_n=64, block_k=64).streamk(10_000).persistent(),
    "streamk_few_programs": Schedule(block_m=64, block_n=128, block_k=32).streamk(7).persistent(20),
}


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("shape", [(777, 555, 333), (64, 2048, 1024)], ids=lambda s: "x".join(map(str, s)))
def test_schedules(generator, shape, name):
    M, N, K = shape
    a = _operand(M, K, torch.bfloat16, generator, False)
    b = _operand(K, N, torch.bfloat16, generator, False)
    bias = random_operand((N,), torch.bfloat16, generator=generator, device=DEV)
    out = poisoned((M, N), torch.bfloat16, DEV)
    T.matmul(a, b, SCHEDULES[name], out=out, bias=bias)
    assert_gemm_close(out, reference_gemm(a, b, bias=bias), torch.bfloat16)


def test_streamk_is_bitwise_repeatable(generator):
    """20 runs of a Stream-K GEMM whose tiles are split over several programs give identical
    bits: partials are summed in a fixed (ascending program) order."""
    M, N, K = 1536, 1536, 2056
    s = Schedule(block_m=128, block_n=128, block_k=64).streamk(10_000).persistent()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    plan = streamk_plan(M, N, K, s, sms)
    assert any(len(tile_contributors(t, plan)) > 1 for t in range(plan.full_tiles, plan.total_tiles))
    a = _operand(M, K, torch.float32, generator, False)
    b = _operand(K, N, torch.float32, generator, False)
    first = T.matmul(a, b, s)
    assert_gemm_close(first, reference_gemm(a, b), torch.float32)
    for run in range(19):
        again = poisoned((M, N), torch.float32, DEV)
        T.matmul(a, b, s, out=again)
        assert torch.equal(again, first), f"run {run + 2} differs from run 1"


@pytest.mark.parametrize("kernel", KERNELS)
def test_repeated_calls_launch_the_kept_kernel(generator, kernel):
    """A signature's first call keeps its compiled kernel in the plan (``launch._Plan.runners``)
    and later calls launch it directly: each call's fresh data matches the reference on a
    poisoned output. An operand 2 bytes off 16-byte alignment (another Triton
    specialisation) gets a plan and a kernel of its own."""
    M, N, K = 300, 256, 520
    L._PLANS.clear()

    def call(a):
        b = _operand(K, N, torch.bfloat16, generator, True)
        out = poisoned((M, N), torch.bfloat16, DEV)
        assert T.matmul(a, b, KERNELS[kernel], out=out) is out
        assert_gemm_close(out, reference_gemm(a, b), torch.bfloat16)

    for _ in range(3):
        call(_operand(M, K, torch.bfloat16, generator, False))
    assert [len(plan.runners) for plan in L._PLANS.values()] == [1]
    for _ in range(3):
        call(random_operand((M * K + 1,), torch.bfloat16, generator=generator, device=DEV)[1:].view(M, K))
    assert [len(plan.runners) for plan in L._PLANS.values()] == [1, 1]
    first, second = (next(iter(plan.runners.values()))[0] for plan in L._PLANS.values())
    assert first is not second


@pytest.mark.parametrize("schedule", [
    Schedule().persistent(),
    Schedule(block_m=64, block_n=64).map("grouped_n", 3).persistent(),
    Schedule(block_m=64, block_n=64).chiplet(8, 2).persistent(),
    Schedule(block_m=64, block_n=64, block_k=32).streamk(20).persistent(),
    Schedule(block_m=64, block_n=64, block_k=32).streamk(10_000).chiplet(4, 1).persistent(),
], ids=str)
@pytest.mark.parametrize("shape", [(1000, 700, 900), (1, 64, 0), (4096, 4096, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_schedule_trace_on_device(shape, schedule):
    M, N, K = shape
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    traced = T.schedule_trace(M, N, K, schedule, device=DEV)
    assert traced == [work(p, M, N, K, schedule, sms) for p in range(num_programs(M, N, K, schedule, sms))]


def test_oversized_compiled_kernel_is_a_schedule_error(generator):
    """128x256x32 bf16 tiles in 9 stages: the operand ring (221184 bytes) passes the launcher's
    check, but Triton compiles the kernel to 253952 bytes (the epilogue's staging on top), over
    the device's limit: the launch reports a ValueError naming the schedule."""
    limit = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    if limit >= 253952:
        pytest.skip(f"this device allows {limit} bytes of shared memory per block")
    a = random_operand((1024, 1024), torch.bfloat16, generator=generator, device=DEV)
    b = random_operand((1024, 1024), torch.bfloat16, generator=generator, device=DEV).T
    s = Schedule(block_m=128, block_n=256, block_k=32, num_stages=9, num_warpgroups=2).persistent()
    with pytest.raises(ValueError, match=r"schedule: 128x256x32 .* compiles to a kernel using 253952 bytes"):
        T.matmul(a, b, s)
