"""GPU (H100/H200) tests of the compiled block-scaled FP8 GEMM, its batched form and the
batched GEMM against the float64 reference on (dequantised) inputs: random ragged M, the
DeepSeek-V3 (N, K) pairs, batched shapes, random scales, NaN-poisoned outputs; block-scaled
fp8 against its dequantised inputs is held to 1e-2 relative Frobenius error
(tlgemm.testing.TOLERANCE["fp8-block"], DESIGN.md's 16-bit bound), and against unquantised
inputs (quantize_fp8_blockwise first) to fp8's 5e-2, which includes the quantisation."""

import pytest
import torch

import tlgemm.triton as T
from tlgemm.quantize import dequantize_fp8_blockwise, quantize_fp8_blockwise
from tlgemm.schedules import Schedule
from tlgemm.testing import assert_gemm_close, poison_allocator, poisoned, random_operand, reference_gemm
from tlgemm.triton.launch import shared_memory_limit

pytestmark = pytest.mark.gpu

DEV = "cuda"
FP8 = torch.float8_e4m3fn
# DeepSeek-V3's (N, K) pairs of DeepGEMM's normal-GEMM table.
DEEPSEEK_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
SAMPLED_ROWS = 384


def _scales(shape, generator):
    """Random scales spanning about four binades (never ones), on the GPU."""
    return torch.exp2(torch.randn(shape, generator=generator) * 1.5).to(DEV)


def _check_blockscaled(out, a, b, sa, sb, generator, bias=None, what="result"):
    """Every element written (no NaN poison left); the relative error against the float64
    product of the dequantised inputs, over all rows or, for large M, SAMPLED_ROWS random rows
    plus the last (every column; the float64 GEMM of all 4096 rows would dominate the run)."""
    nan = torch.isnan(out.float())
    assert not bool(nan.any()), f"{what}: {int(nan.sum())} elements not written"
    M = a.shape[-2]
    rows = torch.arange(M)
    if M > SAMPLED_ROWS:
        rows = torch.cat([torch.randperm(M - 1, generator=generator)[:SAMPLED_ROWS], torch.tensor([M - 1])])
    rows = rows.to(DEV)
    a64 = dequantize_fp8_blockwise(a, sa, (1, 128)).double().index_select(-2, rows)
    b64 = dequantize_fp8_blockwise(b, sb, (128, 128)).double()
    if a.dim() == 3:
        ref = torch.stack([reference_gemm(a64[i], b64[i].T, bias=bias) for i in range(a.shape[0])])
    else:
        ref = reference_gemm(a64, b64.T, bias=bias)
    assert_gemm_close(out.index_select(-2, rows), ref, FP8, blockscaled=True, what=what)


@pytest.mark.parametrize("N, K", DEEPSEEK_NK, ids=lambda v: str(v))
def test_blockscaled_deepseek_shapes(generator, N, K):
    """M = 1, a ragged small M and a ragged large M (both drawn at random) with the default
    schedule; scale_a M-major as DeepGEMM stores it."""
    Ms = [1, int(torch.randint(2, 300, (1,), generator=generator)), int(torch.randint(300, 4097, (1,), generator=generator))]
    b = random_operand((N, K), FP8, generator=generator, device=DEV)
    sb = _scales((-(-N // 128), K // 128), generator)  # N = 2112: a partial last row block
    for M in Ms:
        a = random_operand((M, K), FP8, generator=generator, device=DEV)
        sa = _scales((K // 128, M), generator).T
        out = poisoned((M, N), torch.bfloat16, DEV)
        T.blockscaled_matmul(a, b, sa, sb, out=out)
        _check_blockscaled(out, a, b, sa, sb, generator, what=f"M={M}")


SCHEDULES = {
    "64x128": Schedule(block_m=64, block_n=128, block_k=128, num_stages=4).persistent(),
    "128x128_2wg": Schedule(block_m=128, block_n=128, block_k=128, num_stages=4, num_warpgroups=2).persistent(),
    "128x256_2wg": Schedule(block_m=128, block_n=256, block_k=128, num_stages=3, num_warpgroups=2).persistent(),
    "64x64_raster_n": Schedule(block_m=64, block_n=64, block_k=128, num_stages=5, raster="n", group_size_m=4).persistent(),
    "one_program_per_tile": Schedule(block_m=128, block_n=128, block_k=128, num_stages=3, num_warpgroups=2),
}


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("name", SCHEDULES)
def test_blockscaled_schedules_bias_and_outputs(generator, name, out_dtype):
    M = int(torch.randint(1, 1500, (1,), generator=generator))
    N, K = 1152, 896
    a = random_operand((M, K), FP8, generator=generator, device=DEV)
    b = random_operand((N, K), torch.float8_e5m2 if out_dtype == torch.float32 else FP8, generator=generator,
                       device=DEV)
    sa, sb = _scales((M, K // 128), generator), _scales((N // 128, K // 128), generator)
    bias = torch.randn(N, generator=generator).to(DEV, torch.bfloat16)
    out = poisoned((M, N), out_dtype, DEV)
    schedule = SCHEDULES[name]
    if out_dtype == torch.float32 and schedule.block_m * schedule.block_n >= 128 * 256:
        # Triton converts the fp32 tile's layout for the store through shared memory (128 KiB
        # here); with three operand stages that is 278528 bytes, over the 232448 an SM has.
        schedule = schedule.stages(2)
    T.blockscaled_matmul(a, b, sa, sb, schedule, out=out, bias=bias)
    _check_blockscaled(out, a, b, sa, sb, generator, bias=bias, what=f"M={M}")


@pytest.mark.parametrize("B, M, N, K", [
    (4, 777, 512, 1024),
    (128, 37, 512, 128),   # DeepSeek-V3 MLA weight absorption: per-head [M, 128] x [512, 128]^T
    (128, 5, 128, 512),    # ... and back: per-head [M, 512] x [128, 512]^T
    (3, 1, 7168, 2048),
], ids=lambda v: str(v))
def test_blockscaled_bmm(generator, B, M, N, K):
    x = random_operand((B, M, K), FP8, generator=generator, device=DEV)
    y = random_operand((B, N, K), FP8, generator=generator, device=DEV)
    xs = _scales((B, K // 128, M), generator).transpose(1, 2)
    ys = _scales((B, N // 128, K // 128), generator)
    out = poisoned((B, M, N), torch.bfloat16, DEV)
    T.blockscaled_bmm(x, y, xs, ys, out=out)
    _check_blockscaled(out, x, y, xs, ys, generator)


def test_blockscaled_on_quantised_data(generator):
    """quantize_fp8_blockwise on the GPU (1 × 128 activations, 128 × 128 weights), then the
    GEMM: within fp8 tolerance of the float64 product of the unquantised inputs."""
    M, N, K = 1000, 4096, 7168
    x = (torch.randn(M, K, generator=generator) * torch.exp(torch.randn(M, 1, generator=generator))).to(DEV)
    w = (torch.randn(N, K, generator=generator) * 0.02).to(DEV)
    xq, xs = quantize_fp8_blockwise(x, (1, 128))
    wq, ws = quantize_fp8_blockwise(w, (128, 128))
    poison_allocator((M, N), torch.bfloat16, DEV)  # the output it allocates next: poisoned memory
    out = T.blockscaled_matmul(xq, wq, xs, ws)
    assert_gemm_close(out, reference_gemm(x, w.T), FP8)


# ---- bmm ---------------------------------------------------------------------------------------


BMM = Schedule(block_m=128, block_n=128, block_k=64, num_stages=3).persistent()
# name: (a dtype, b dtype, out dtype, allow_tf32, tolerance class)
DTYPES = {
    "fp32": (torch.float32, torch.float32, torch.float32, False, torch.float32),
    "tf32": (torch.float32, torch.float32, torch.float32, True, torch.float32),
    "fp16": (torch.float16, torch.float16, torch.float16, False, torch.float16),
    "bf16": (torch.bfloat16, torch.bfloat16, torch.bfloat16, False, torch.bfloat16),
    "e4m3": (FP8, FP8, torch.bfloat16, False, FP8),
    "int8": (torch.int8, torch.int8, torch.int32, False, torch.int8),
}


def _operand(batch, rows, cols, dtype, generator, column_major, broadcast=False):
    """A [batch, rows, cols] operand, column-major per matrix when asked; with ``broadcast``
    one matrix expanded over the batch (batch stride 0)."""
    n = 1 if broadcast else batch
    shape = (n, cols, rows) if column_major else (n, rows, cols)
    x = random_operand(shape, dtype, generator=generator, device=DEV)
    x = x.transpose(1, 2) if column_major else x
    return x.expand(batch, rows, cols)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 1, 64, 128), (4, 37, 53, 29), (2, 257, 511, 1000), (6, 640, 1536, 2056)],
                         ids=lambda s: "x".join(map(str, s)))
def test_bmm_every_dtype(generator, shape, dtype):
    B, M, N, K = shape
    a_dtype, b_dtype, out_dtype, tf32, tol = DTYPES[dtype]
    layouts = torch.randint(0, 2, (3,), generator=generator).tolist()  # A, B column-major; B broadcast
    a = _operand(B, M, K, a_dtype, generator, bool(layouts[0]))
    b = _operand(B, K, N, b_dtype, generator, bool(layouts[1]), broadcast=bool(layouts[2]))
    out = poisoned((B, M, N), out_dtype, DEV)
    T.bmm(a, b, BMM, out=out, allow_tf32=tf32)
    ref = torch.stack([reference_gemm(a[i], b[i]) for i in range(B)])
    if tol == torch.int8:
        assert torch.equal(out.cpu().long(), ref.cpu().long()), f"layouts={layouts}: int8 bmm not exact"
    else:
        assert_gemm_close(out, ref, tol, allow_tf32=tf32, what=f"layouts={layouts}")


def test_bmm_epilogue_and_strided_output(generator):
    B, M, N, K = 5, 300, 200, 264
    a = _operand(B, M, K, FP8, generator, False)
    b = _operand(B, K, N, FP8, generator, True)
    kwargs = dict(scale_a=torch.rand(M, generator=generator).to(DEV) + 0.5,
                  scale_b=torch.rand(N, generator=generator).to(DEV) + 0.5,
                  bias=torch.randn(N, generator=generator).to(DEV, torch.bfloat16))
    out = poisoned((N, B, M), torch.float32, DEV).permute(1, 2, 0)
    T.bmm(a, b, Schedule(block_m=64, block_n=128, block_k=64).chiplet(4, 2).persistent(), out=out, **kwargs)
    ref = torch.stack([reference_gemm(a[i], b[i], **kwargs) for i in range(B)])
    assert_gemm_close(out, ref, FP8)


# ---- shared memory -----------------------------------------------------------------------------


def test_shared_memory_limit_is_checked_before_compiling():
    limit = shared_memory_limit(torch.device(DEV))
    assert limit == torch.cuda.get_device_properties(0).shared_memory_per_block_optin and limit >= 48 * 1024
    a = torch.randn(256, 256, device=DEV, dtype=torch.bfloat16)
    s = Schedule(block_m=256, block_n=256, block_k=128, num_stages=4).persistent()  # 512 KiB of operands
    with pytest.raises(ValueError, match=r"schedule: 256x256x128 .* needs 524288 bytes of shared memory"):
        T.matmul(a, a, s)
