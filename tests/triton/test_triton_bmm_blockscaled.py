"""The batched GEMM and the block-scaled FP8 GEMM run in the Triton interpreter (CPU) against
the float64 reference on (dequantised) inputs: ragged shapes, M = 1, any strides, batch
stride 0, random non-trivial scales, every output dtype; outputs are NaN-poisoned first.
Their launchers reject bad input with an error naming the argument."""

import pytest
import torch

from tlgemm.quantize import dequantize_fp8_blockwise, quantize_fp8_blockwise
from tlgemm.schedules import Schedule
from tlgemm.testing import assert_gemm_close, poisoned, random_operand, reference_gemm

# Small tiles keep the interpreter quick while giving several tiles and K-steps per GEMM.
BMM = Schedule(block_m=16, block_n=32, block_k=32, group_size_m=2).persistent(5)
BMM_SCHEDULES = {
    "persistent": BMM,
    "one_program_per_tile": Schedule(block_m=32, block_n=16, block_k=16, raster="n"),
    "chiplet": BMM.chiplet(2, 2).persistent(6),
}
FP8 = torch.float8_e4m3fn


def _batch_reference(a, b, **kwargs):
    return torch.stack([reference_gemm(a[i], b[i], **kwargs) for i in range(a.shape[0])])


# ---- bmm -------------------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", BMM_SCHEDULES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(3, 37, 53, 29), (2, 1, 64, 128), (1, 40, 33, 70)],
                         ids=lambda s: "x".join(map(str, s)))
def test_bmm_matches_reference(interp, generator, shape, dtype, schedule):
    B, M, N, K = shape
    a = random_operand((B, M, K), dtype, generator=generator)
    b = random_operand((B, K, N), dtype, generator=generator)
    out = poisoned((B, M, N), dtype, "cpu")
    assert interp.triton.bmm(a, b, BMM_SCHEDULES[schedule], out=out) is out
    assert_gemm_close(out, _batch_reference(a, b), dtype)


def test_bmm_any_strides_and_broadcast(interp, generator):
    """Column-major batches of A, batch-interleaved B ([K, B, N] permuted), an output written
    transposed, and batch stride 0 (one B for every batch, one A for every batch)."""
    B, M, N, K = 3, 37, 45, 50
    a = random_operand((B, K, M), torch.float16, generator=generator).transpose(1, 2)
    b = random_operand((K, B, N), torch.float16, generator=generator).permute(1, 0, 2)
    out = poisoned((B, N, M), torch.float32, "cpu").transpose(1, 2)
    interp.triton.bmm(a, b, BMM, out=out)
    assert_gemm_close(out, _batch_reference(a, b), torch.float16)
    shared_b = random_operand((1, K, N), torch.float16, generator=generator).expand(B, K, N)
    shared_a = random_operand((1, M, K), torch.float16, generator=generator).expand(B, M, K)
    for x, y in [(a, shared_b), (shared_a, b)]:
        out = poisoned((B, M, N), torch.float16, "cpu")
        interp.triton.bmm(x, y, BMM, out=out)
        assert_gemm_close(out, _batch_reference(x, y), torch.float16)


def test_bmm_epilogue_int8_and_fp8(interp, generator):
    """Per-row/per-column scales and bias (shared by all batches) on fp8; exact int8."""
    B, M, N, K = 2, 37, 53, 64
    a = random_operand((B, M, K), torch.int8, generator=generator)
    b = random_operand((B, K, N), torch.int8, generator=generator)
    out = poisoned((B, M, N), torch.int32, "cpu")
    interp.triton.bmm(a, b, BMM, out=out)
    assert torch.equal(out, torch.bmm(a.long(), b.long()).int())
    a = random_operand((B, M, K), FP8, generator=generator)
    b = random_operand((B, N, K), torch.float8_e5m2, generator=generator).transpose(1, 2)
    kwargs = dict(scale_a=torch.rand(M, generator=generator) + 0.5, scale_b=torch.rand(N, generator=generator) + 0.5,
                  bias=torch.randn(N, generator=generator).to(torch.bfloat16))
    out = interp.triton.bmm(a, b, BMM, **kwargs)
    assert out.dtype == torch.bfloat16
    assert_gemm_close(out, _batch_reference(a, b, **kwargs), FP8)


def test_bmm_empty_batch_and_short_k(interp, generator):
    a, b = torch.randn(0, 8, 16), torch.randn(0, 16, 12)
    assert interp.triton.bmm(a, b, BMM).shape == (0, 8, 12)
    a = random_operand((2, 9, 5), torch.float32, generator=generator)
    b = random_operand((2, 5, 11), torch.float32, generator=generator)
    out = poisoned((2, 9, 11), torch.float32, "cpu")
    interp.triton.bmm(a, b, BMM, out=out)
    assert_gemm_close(out, _batch_reference(a, b), torch.float32)


# ---- block-scaled FP8 --------------------------------------------------------------------------


BLOCKSCALED = Schedule(block_m=16, block_n=64, block_k=128, group_size_m=2).persistent(3)


def _scales(shape, generator):
    """Random scales spanning about four binades (never ones)."""
    return torch.exp2(torch.randn(shape, generator=generator) * 1.5).float()


def _close(out, ref, what="result"):
    """Block-scaled fp8's bound (tlgemm.testing, "fp8-block"): ``ref`` is the product of the
    dequantised inputs or the other backend's block-scaled result."""
    return assert_gemm_close(out, ref, FP8, blockscaled=True, what=what)


def _blockscaled_reference(a, b, sa, sb, bias=None):
    """float64 product of the dequantised inputs: a·scale_a per (row, 128-group) and b·scale_b
    per (128 × 128) block, b given [..., N, K]."""
    a64 = dequantize_fp8_blockwise(a, sa, (1, 128)).double()
    b64 = dequantize_fp8_blockwise(b, sb, (128, 128)).double()
    if a.dim() == 3:
        return torch.stack([reference_gemm(a64[i], b64[i].T, bias=bias) for i in range(a.shape[0])])
    return reference_gemm(a64, b64.T, bias=bias)


@pytest.mark.parametrize("K", [128, 256, 384])
@pytest.mark.parametrize("N", [128, 200, 256])
@pytest.mark.parametrize("M", [1, 37])
def test_blockscaled_matches_reference(interp, generator, M, N, K):
    """N = 200: a partial last row block of b with its own scale row (N = 2112 in DeepSeek-V3)."""
    a = random_operand((M, K), FP8, generator=generator)
    b = random_operand((N, K), FP8, generator=generator)
    sa, sb = _scales((M, K // 128), generator), _scales((-(-N // 128), K // 128), generator)
    out = poisoned((M, N), torch.bfloat16, "cpu")
    assert interp.triton.blockscaled_matmul(a, b, sa, sb, BLOCKSCALED, out=out) is out
    _close(out, _blockscaled_reference(a, b, sa, sb))


@pytest.mark.parametrize("block_n, out_dtype", [(32, torch.float32), (256, torch.float16)], ids=str)
def test_blockscaled_tile_widths_bias_and_output_dtypes(interp, generator, block_n, out_dtype):
    """block_n below 128 (one B scale per tile) and above it (two per tile, tiles crossing the
    edge of N); e5m2 A; column-major (DeepGEMM's M-major) scale_a; a bias; fp32/fp16 out."""
    M, N, K = 37, 384, 256
    a = random_operand((M, K), torch.float8_e5m2, generator=generator)
    b = random_operand((N, K), FP8, generator=generator)
    sa = _scales((K // 128, M), generator).T
    sb = _scales((N // 128, K // 128), generator)
    bias = torch.randn(N, generator=generator)
    s = Schedule(block_m=32, block_n=block_n, block_k=128, raster="n").persistent(4)
    out = poisoned((M, N), out_dtype, "cpu")
    interp.triton.blockscaled_matmul(a, b, sa, sb, s, out=out, bias=bias)
    _close(out, _blockscaled_reference(a, b, sa, sb, bias))


def test_blockscaled_per_k_block_promotion(interp, generator):
    """Scales that differ by 2^20 between K blocks: only promotion per K block (not one scale
    for the whole K range, nor per-block scales swapped between A rows) matches."""
    M, N, K = 20, 128, 384
    a = random_operand((M, K), FP8, generator=generator)
    b = random_operand((N, K), FP8, generator=generator)
    sa = _scales((M, 3), generator) * torch.tensor([1.0, 2.0**-20, 2.0**20])
    sb = _scales((1, 3), generator)
    out = interp.triton.blockscaled_matmul(a, b, sa, sb, BLOCKSCALED, out_dtype=torch.float32)
    _close(out, _blockscaled_reference(a, b, sa, sb))


def test_blockscaled_launch_is_cached_per_signature(interp, generator):
    """A repeated call with the same shapes, strides and dtypes reuses its validated launch
    (fresh tensors, fresh results); another stride, an ``out`` or a bias is a new launch."""
    launches = interp.triton.launch._BLOCKSCALED_LAUNCHES
    M, N, K = 37, 256, 256
    b = random_operand((N, K), FP8, generator=generator)
    sb = _scales((N // 128, K // 128), generator)

    def check(a, sa, **kwargs):
        out = interp.triton.blockscaled_matmul(a, b, sa, sb, BLOCKSCALED, **kwargs)
        _close(out, _blockscaled_reference(a.contiguous(), b, sa, sb, kwargs.get("bias")))

    launches.clear()
    for _ in range(2):
        check(random_operand((M, K), FP8, generator=generator), _scales((M, K // 128), generator))
    assert len(launches) == 1
    wide = random_operand((M, K + 128), FP8, generator=generator)
    check(wide[:, :K], _scales((M, K // 128), generator))
    check(random_operand((M, K), FP8, generator=generator), _scales((M, K // 128), generator),
          out=poisoned((N, M), torch.bfloat16, "cpu").T)
    check(random_operand((M, K), FP8, generator=generator), _scales((M, K // 128), generator),
          bias=torch.randn(N, generator=generator))
    assert len(launches) == 4
    with pytest.raises(ValueError, match="scale_a"):
        interp.triton.blockscaled_matmul(random_operand((M, K), FP8, generator=generator), b,
                                         _scales((M, K // 128 + 1), generator), sb, BLOCKSCALED)

def test_blockscaled_bmm(interp, generator):
    """x [B, M, K], y [B, N, K]; xs M-major per batch; ys per batch (K-major), then one ys
    shared by the batches (batch stride 0)."""
    B, M, N, K = 3, 37, 256, 256
    x = random_operand((B, M, K), FP8, generator=generator)
    y = random_operand((B, N, K), FP8, generator=generator)
    xs = _scales((B, K // 128, M), generator).transpose(1, 2)
    for ys in (_scales((B, K // 128, N // 128), generator).transpose(1, 2),
               _scales((1, N // 128, K // 128), generator).expand(B, N // 128, K // 128)):
        out = poisoned((B, M, N), torch.bfloat16, "cpu")
        interp.triton.blockscaled_bmm(x, y, xs, ys, BLOCKSCALED, out=out)
        _close(out, _blockscaled_reference(x, y, xs, ys))


def test_blockscaled_on_quantised_data(interp, generator):
    """End to end: quantise fp32 activations (1 × 128) and weights (128 × 128) with
    tlgemm.quantize_fp8_blockwise; the product matches the fp32 inputs' float64 product
    within the fp8 tolerance."""
    M, N, K = 33, 256, 384
    x = torch.randn(M, K, generator=generator) * torch.exp(torch.randn(M, 1, generator=generator))
    w = torch.randn(N, K, generator=generator) * 0.05
    xq, xs = quantize_fp8_blockwise(x, (1, 128))
    wq, ws = quantize_fp8_blockwise(w, (128, 128))
    out = interp.triton.blockscaled_matmul(xq, wq, xs, ws, BLOCKSCALED)
    assert out.dtype == torch.bfloat16
    assert_gemm_close(out, reference_gemm(x, w.T), FP8)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # K = 0: masked lanes wrap modulo 0
def test_blockscaled_zero_k_gives_bias(interp, generator):
    a, b = torch.empty(5, 0, dtype=FP8), torch.empty(128, 0, dtype=FP8)
    bias = torch.randn(128, generator=generator)
    out = interp.triton.blockscaled_matmul(a, b, torch.empty(5, 0), torch.empty(1, 0), BLOCKSCALED, bias=bias,
                                           out_dtype=torch.float32)
    assert torch.equal(out, bias.expand(5, 128))


@pytest.mark.parametrize("M, N", [(0, 128), (5, 0)])
def test_blockscaled_empty_rows_or_columns_launch_nothing(interp, M, N):
    """M or N = 0 counted the tiles before the empty-grid guard and raised "M must be >= 1"."""
    a, b = torch.empty(M, 256, dtype=FP8), torch.empty(N, 256, dtype=FP8)
    sa, sb = torch.ones(M, 2), torch.ones(-(-N // 128), 2)
    assert interp.triton.blockscaled_matmul(a, b, sa, sb, BLOCKSCALED).shape == (M, N)
    assert interp.triton.blockscaled_matmul(a, b, sa, sb, num_sms=2).shape == (M, N)
    out = interp.triton.blockscaled_bmm(a.expand(2, M, 256), b.expand(2, N, 256), sa.expand(2, M, 2),
                                        sb.expand(2, -(-N // 128), 2), BLOCKSCALED)
    assert out.shape == (2, M, N)


def test_option_types_are_checked_after_a_call_with_an_equal_value(interp):
    """The launchers' signature caches keyed True and 1 (and 2 and 2.0) alike, so a call with
    allow_tf32=1 or num_sms=2.0 skipped validation after one with True or 2."""
    x, y = torch.randn(8, 16), torch.randn(16, 8)
    schedule = Schedule(block_m=16, block_n=16, block_k=16)
    interp.triton.matmul(x, y, schedule, allow_tf32=True)
    with pytest.raises(TypeError, match=r"allow_tf32: expected a bool, got int"):
        interp.triton.matmul(x, y, schedule, allow_tf32=1)
    a, b, sa, sb = _bs()
    interp.triton.blockscaled_matmul(a, b, sa, sb, num_sms=2)
    with pytest.raises((TypeError, ValueError), match=r"num_sms"):
        interp.triton.blockscaled_matmul(a, b, sa, sb, num_sms=2.0)


def test_default_schedule_needs_sm_count_on_cpu(interp):
    a, b = torch.zeros(4, 128, dtype=FP8), torch.zeros(128, 128, dtype=FP8)
    with pytest.raises(ValueError, match=r"needs the device's SM count"):
        interp.triton.blockscaled_matmul(a, b, torch.ones(4, 1), torch.ones(1, 1))
    out = interp.triton.blockscaled_matmul(a, b, torch.ones(4, 1), torch.ones(1, 1), num_sms=2)
    assert torch.equal(out, torch.zeros(4, 128, dtype=torch.bfloat16))


# ---- validation --------------------------------------------------------------------------------


def _fp8(*shape):
    return torch.randn(*shape).to(FP8)


def _bs(M=8, N=128, K=256):
    """Valid block-scaled arguments (a, b, scale_a, scale_b)."""
    return _fp8(M, K), _fp8(N, K), torch.rand(M, K // 128), torch.rand(N // 128, K // 128)


def _replace(args, index, value):
    return tuple(value if i == index else arg for i, arg in enumerate(args))


BLOCKSCALED_CASES = {
    "a_type": (lambda: _replace(_bs(), 0, [[1.0]]), {}, TypeError, r"a: expected a torch\.Tensor"),
    "a_3d": (lambda: _replace(_bs(), 0, _fp8(1, 8, 256)), {}, ValueError, r"a: expected a 2-D tensor"),
    "a_dtype": (lambda: _replace(_bs(), 0, torch.randn(8, 256).half()), {}, TypeError,
                r"a: dtype must be one of \['torch\.float8_e4m3fn', 'torch\.float8_e5m2'\]"),
    "b_dtype": (lambda: _replace(_bs(), 1, torch.randn(128, 256).to(torch.int8)), {}, TypeError, r"b: dtype must be"),
    "k_differs": (lambda: _replace(_bs(), 1, _fp8(128, 128)), {}, ValueError, r"a, b: K differs \(b is \[N, K\]\)"),
    "k_multiple": (lambda: (_fp8(8, 200), _fp8(128, 200), torch.rand(8, 1), torch.rand(1, 1)), {}, ValueError,
                   r"a: K = 200 must be a multiple of 128"),
    "scale_b_rows_ragged_n": (lambda: (_fp8(8, 128), _fp8(200, 128), torch.rand(8, 1), torch.rand(1, 1)), {},
                              ValueError, r"scale_b: expected shape \(2, 1\), got \(1, 1\)"),
    "scale_a_dtype": (lambda: _replace(_bs(), 2, torch.rand(8, 2).half()), {}, TypeError,
                      r"scale_a: dtype must be torch\.float32"),
    "scale_a_shape": (lambda: _replace(_bs(), 2, torch.rand(8, 1)), {}, ValueError,
                      r"scale_a: expected shape \(8, 2\), got \(8, 1\)"),
    "scale_b_shape": (lambda: _replace(_bs(), 3, torch.rand(128, 2)), {}, ValueError,
                      r"scale_b: expected shape \(1, 2\), got \(128, 2\)"),
    "scale_b_type": (lambda: _replace(_bs(), 3, 1.0), {}, TypeError, r"scale_b: expected a torch\.Tensor"),
    "scale_device": (lambda: _replace(_bs(), 3, torch.rand(1, 2, device="meta")), {}, ValueError,
                     r"scale_b: on meta, but a is on cpu"),
    "b_device": (lambda: _replace(_bs(), 1, torch.empty(128, 256, dtype=FP8, device="meta")), {}, ValueError,
                 r"b: on meta, but a is on cpu"),
    "schedule_block_k": (_bs, {"schedule": Schedule(block_k=64).persistent(2)}, ValueError,
                         r"schedule: block_k must be 128 \(the scale block along K\), got 64"),
    "schedule_streamk": (_bs, {"schedule": Schedule(block_k=128).streamk(4).persistent(2)}, ValueError,
                         r"schedule: streamk_tiles > 0 is not implemented for the block-scaled GEMM"),
    "schedule_split_k": (_bs, {"schedule": Schedule(block_k=128, split_k=2)}, ValueError, r"schedule: split_k > 1"),
    "schedule_type": (_bs, {"schedule": "default"}, TypeError, r"schedule: expected a tlgemm\.schedules\.Schedule"),
    "out_dtype": (_bs, {"out_dtype": torch.int32}, TypeError, r"out_dtype: dtype must be one of"),
    "out_dtype_fp8": (_bs, {"out_dtype": FP8}, TypeError, r"out_dtype: dtype must be one of"),
    "out_int32": (_bs, {"out": torch.empty(8, 128, dtype=torch.int32)}, TypeError, r"^out: dtype must be one of"),
    "out_shape": (_bs, {"out": torch.empty(8, 64)}, ValueError, r"out: expected shape \(8, 128\), got \(8, 64\)"),
    "out_conflict": (_bs, {"out": torch.empty(8, 128), "out_dtype": torch.bfloat16}, ValueError,
                     r"out: dtype torch\.float32 differs from out_dtype=torch\.bfloat16"),
    "out_overlap": (_bs, {"out": torch.empty(8, 1).expand(8, 128)}, ValueError, r"out: strides \(1, 0\) may make elements"),
    "bias_length": (_bs, {"bias": torch.randn(64)}, ValueError, r"bias: expected \[128\] or \[1, 128\], got shape \[64\]"),
    "bias_dtype": (_bs, {"bias": torch.ones(128, dtype=torch.int32)}, TypeError, r"bias: dtype must be one of"),
    "bias_type": (_bs, {"bias": [0.0] * 128}, TypeError, r"bias: expected a torch\.Tensor, got list"),
    "result_int32": (lambda: (torch.empty(46341, 128, dtype=FP8, device="meta"),
                              torch.empty(46341, 128, dtype=FP8, device="meta"),
                              torch.empty(46341, 1, device="meta"), torch.empty(363, 1, device="meta")), {},
                     ValueError, r"^out: the result \(46341, 46341\) would hold 2147488281 elements; the Triton "
                                 r"kernels index in int32"),
}


@pytest.mark.parametrize("case", BLOCKSCALED_CASES)
def test_blockscaled_bad_input_is_named(interp, case):
    make, kwargs, error, message = BLOCKSCALED_CASES[case]
    kwargs = dict(kwargs)
    schedule = kwargs.pop("schedule", BLOCKSCALED)
    with pytest.raises(error, match=message):
        interp.triton.blockscaled_matmul(*make(), schedule, **kwargs)


BMM_BLOCKSCALED_CASES = {
    "x_2d": ((_fp8(8, 256), _fp8(2, 128, 256), torch.rand(2, 8, 2), torch.rand(2, 1, 2)), ValueError,
             r"x: expected a 3-D tensor"),
    "batch": ((_fp8(2, 8, 256), _fp8(3, 128, 256), torch.rand(2, 8, 2), torch.rand(3, 1, 2)), ValueError,
              r"x, y: batch sizes differ"),
    "xs_shape": ((_fp8(2, 8, 256), _fp8(2, 128, 256), torch.rand(1, 8, 2), torch.rand(2, 1, 2)), ValueError,
                 r"xs: expected shape \(2, 8, 2\), got \(1, 8, 2\)"),
    "ys_shape": ((_fp8(2, 8, 256), _fp8(2, 128, 256), torch.rand(2, 8, 2), torch.rand(2, 2, 1)), ValueError,
                 r"ys: expected shape \(2, 1, 2\), got \(2, 2, 1\)"),
    "y_dtype": ((_fp8(2, 8, 256), torch.rand(2, 128, 256), torch.rand(2, 8, 2), torch.rand(2, 1, 2)), TypeError,
                r"y: dtype must be one of"),
}


@pytest.mark.parametrize("case", BMM_BLOCKSCALED_CASES)
def test_blockscaled_bmm_bad_input_is_named(interp, case):
    args, error, message = BMM_BLOCKSCALED_CASES[case]
    with pytest.raises(error, match=message):
        interp.triton.blockscaled_bmm(*args, BLOCKSCALED)


BMM_CASES = {
    "a_2d": ((torch.randn(8, 16), torch.randn(2, 16, 12)), {}, ValueError, r"a: expected a 3-D tensor"),
    "batch": ((torch.randn(2, 8, 16), torch.randn(3, 16, 12)), {}, ValueError, r"a, b: batch sizes differ"),
    "inner": ((torch.randn(2, 8, 16), torch.randn(2, 15, 12)), {}, ValueError, r"a, b: inner dimensions differ"),
    "dtypes": ((torch.randn(2, 8, 16).half(), torch.randn(2, 16, 12)), {}, TypeError, r"a, b: dtypes must match"),
    "out_shape": ((torch.randn(2, 8, 16), torch.randn(2, 16, 12)), {"out": torch.empty(2, 12, 8)}, ValueError,
                  r"out: expected shape \(2, 8, 12\), got \(2, 12, 8\)"),
    "out_overlap": ((torch.randn(2, 8, 16), torch.randn(2, 16, 12)), {"out": torch.empty(8, 12).expand(2, 8, 12)},
                    ValueError, r"out: strides \(0, 12, 1\) may make elements of shape \(2, 8, 12\) overlap"),
    "streamk": ((torch.randn(2, 8, 16), torch.randn(2, 16, 12)), {"schedule": BMM.streamk(3)}, ValueError,
                r"schedule: streamk_tiles > 0 is not implemented for bmm"),
    "result_int32": ((torch.randn(1, 256, 64).expand(2**15 + 1, 256, 64),
                      torch.randn(1, 64, 256).expand(2**15 + 1, 64, 256)), {}, ValueError,
                     r"^out: the result \(32769, 256, 256\) would hold 2147549184 elements; the Triton kernels index "
                     r"in int32"),
    "scale_length": ((torch.randn(2, 8, 16), torch.randn(2, 16, 12)), {"scale_a": torch.ones(16)}, ValueError,
                     r"scale_a: expected one element, \[8\] or \[8, 1\], got shape \[16\]"),
}


@pytest.mark.parametrize("case", BMM_CASES)
def test_bmm_bad_input_is_named(interp, case):
    args, kwargs, error, message = BMM_CASES[case]
    kwargs = dict(kwargs)
    schedule = kwargs.pop("schedule", BMM)
    with pytest.raises(error, match=message):
        interp.triton.bmm(*args, schedule, **kwargs)


def test_compiled_launchers_need_cuda_tensors():
    import tlgemm.triton as compiled

    with pytest.raises(ValueError, match=r"x: on cpu; the Triton kernels need CUDA tensors"):
        compiled.blockscaled_bmm(_fp8(1, 8, 128), _fp8(1, 128, 128), torch.rand(1, 8, 1), torch.rand(1, 1, 1), BLOCKSCALED)
    with pytest.raises(ValueError, match=r"a: on cpu; the Triton kernels need CUDA tensors"):
        compiled.bmm(torch.randn(1, 8, 16), torch.randn(1, 16, 8), BMM)
