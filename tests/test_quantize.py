"""tlgemm.quantize: block-wise FP8 quantisation round trips, scale layout and errors.

Facts: e4m3fn has 3 mantissa bits, largest finite 448 and smallest subnormal 2^-9; e5m2 has 2
mantissa bits, largest finite 57344 and smallest subnormal 2^-16 (OCP FP8 formats). Rounding
to nearest therefore errs by at most 2^-4 (e4m3) or 2^-3 (e5m2) of the value, or half the
smallest subnormal near zero.
"""

import math

import pytest
import torch

from tlgemm.quantize import _expand, dequantize_fp8_blockwise, quantize_fp8_blockwise

FORMATS = {
    torch.float8_e4m3fn: dict(max=448.0, rel=2.0**-4, sub=2.0**-10),
    torch.float8_e5m2: dict(max=57344.0, rel=2.0**-3, sub=2.0**-17),
}


def _random(shape, generator, dtype=torch.float32):
    """Values spanning several binades per block (so blocks have distinct scales)."""
    x = torch.randn(shape, generator=generator) * torch.exp(2 * torch.randn(shape, generator=generator))
    return x.to(dtype)


def _block_amax(x, br, bc):
    """amax(|x|) of every (br, bc) block of the last two axes, by a plain loop (float64)."""
    *lead, rows, cols = x.shape
    flat = x.reshape(-1, rows, cols).double().abs()
    out = torch.empty(flat.shape[0], math.ceil(rows / br), math.ceil(cols / bc), dtype=torch.float64)
    for i in range(out.shape[1]):
        for j in range(out.shape[2]):
            out[:, i, j] = flat[:, i * br:(i + 1) * br, j * bc:(j + 1) * bc].amax(dim=(1, 2))
    return out.reshape(*lead, *out.shape[1:])


@pytest.mark.parametrize("dtype", FORMATS, ids=str)
@pytest.mark.parametrize("shape, block", [
    ((37, 256), (1, 128)),
    ((300, 260), (128, 128)),
    ((2, 3, 129, 200), (1, 128)),
    ((5, 7), (3, 4)),
    ((1, 1), (1, 128)),
], ids=str)
def test_round_trip_within_fp8_rounding(generator, shape, block, dtype):
    x = _random(shape, generator)
    q, scales = quantize_fp8_blockwise(x, block, dtype)
    br, bc = block
    assert q.dtype == dtype and q.shape == x.shape
    assert scales.dtype == torch.float32
    assert scales.shape == (*shape[:-2], math.ceil(shape[-2] / br), math.ceil(shape[-1] / bc))
    fmt = FORMATS[dtype]
    # scale = amax / max(dtype), per block
    torch.testing.assert_close(scales.double(), _block_amax(x, br, bc) / fmt["max"], rtol=2e-7, atol=0)
    expanded = scales.double().repeat_interleave(br, -2).repeat_interleave(bc, -1)[..., :shape[-2], :shape[-1]]
    error = (q.double() * expanded - x.double()).abs()
    bound = (x.double().abs() * fmt["rel"] + expanded * fmt["sub"]) * (1 + 1e-6)
    assert bool((error <= bound).all()), f"worst excess {(error - bound).max().item():.3e}"
    torch.testing.assert_close(dequantize_fp8_blockwise(q, scales, block).double(), q.double() * expanded,
                               rtol=1e-7, atol=0)


@pytest.mark.parametrize("dtype", FORMATS, ids=str)
def test_block_maximum_maps_to_the_format_maximum(generator, dtype):
    x = _random((4, 512), generator)
    q, _ = quantize_fp8_blockwise(x, (1, 128), dtype)
    peak = q.float().abs().reshape(4, 4, 128).amax(dim=-1)
    assert torch.equal(peak, torch.full((4, 4), FORMATS[dtype]["max"]))


def test_zero_and_tiny_blocks_get_finite_positive_scales():
    x = torch.zeros(3, 256)
    x[1, 130] = 1e-44  # amax / 448 underflows float32
    x[2, :128] = torch.linspace(-1, 1, 128)
    q, scales = quantize_fp8_blockwise(x, (1, 128))
    assert bool(torch.isfinite(scales).all()) and bool((scales > 0).all())
    assert scales[0].tolist() == [1.0, 1.0] and scales[1].tolist() == [1.0, 1.0] and scales[2, 1].item() == 1.0
    assert scales[2, 0].item() == pytest.approx(1 / 448)
    assert not bool(torch.isnan(q.float()).any())
    assert torch.equal(q[0].float(), torch.zeros(256))


def test_a_nan_makes_its_block_non_finite():
    """A NaN must not be quantised as a block of scale 1 (which clamps its other values to
    the format's maximum): its block's scale, and so every value of the block, is NaN."""
    x = torch.ones(2, 256)
    x[0, 5] = float("nan")
    x[0, 6:9] = torch.tensor([1000.0, -3000.0, 1e-4])
    q, scales = quantize_fp8_blockwise(x, (1, 128))
    assert torch.isnan(scales[0, 0]) and bool(torch.isnan(q[0, :128].float()).all())
    assert bool(torch.isfinite(scales[0, 1])) and bool(torch.isfinite(scales[1]).all())
    assert torch.equal(q[1].float(), torch.full((256,), 448.0))


def test_blocks_larger_than_the_tensor_are_one_block_along_it(generator):
    """A block beyond a dimension covers all of it, at the tensor's cost: a block of 2**40
    columns would need terabytes if it were padded to whole blocks."""
    x = _random((2, 5, 7), generator)
    for block, whole in (((2**40, 2**40), (5, 7)), ((3, 2**40), (3, 7)), ((2**40, 4), (5, 4))):
        q, scales = quantize_fp8_blockwise(x, block)
        torch.testing.assert_close(scales.double(), _block_amax(x, *whole) / 448.0, rtol=2e-7, atol=0)
        qw, sw = quantize_fp8_blockwise(x, whole)
        assert scales.shape == sw.shape and torch.equal(scales, sw)
        assert torch.equal(q.view(torch.uint8), qw.view(torch.uint8))
        assert torch.equal(dequantize_fp8_blockwise(q, scales, block), dequantize_fp8_blockwise(qw, sw, whole))


def test_empty_tensors():
    for shape, block, scale_shape in (((0, 256), (1, 128), (0, 2)), ((4, 0), (1, 128), (4, 0)),
                                      ((0, 0), (128, 128), (0, 0))):
        q, scales = quantize_fp8_blockwise(torch.empty(shape), block)
        assert q.shape == shape and scales.shape == scale_shape
        assert q.dtype == torch.float8_e4m3fn and scales.dtype == torch.float32
        assert dequantize_fp8_blockwise(q, scales, block).shape == shape


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64], ids=str)
def test_input_dtypes(generator, dtype):
    x = _random((64, 384), generator, dtype)
    q, scales = quantize_fp8_blockwise(x, (128, 128))
    rel = (dequantize_fp8_blockwise(q, scales, (128, 128)).double() - x.double()).norm() / x.double().norm()
    assert rel.item() < 2.0**-4


def test_batched_equals_each_matrix(generator):
    x = _random((3, 2, 70, 300), generator)
    q, scales = quantize_fp8_blockwise(x, (128, 128))
    for i in range(3):
        for j in range(2):
            qi, si = quantize_fp8_blockwise(x[i, j], (128, 128))
            assert torch.equal(q[i, j].view(torch.uint8), qi.view(torch.uint8)) and torch.equal(scales[i, j], si)


def test_strided_input(generator):
    x = _random((256, 96), generator).T  # column-major [96, 256]
    q, scales = quantize_fp8_blockwise(x, (1, 128))
    qc, sc = quantize_fp8_blockwise(x.contiguous(), (1, 128))
    assert torch.equal(q.view(torch.uint8), qc.view(torch.uint8)) and torch.equal(scales, sc)


@pytest.mark.parametrize("call, error, message", [
    (lambda: quantize_fp8_blockwise([[1.0]]), TypeError, r"x: expected a torch\.Tensor"),
    (lambda: quantize_fp8_blockwise(torch.ones(4, 4, dtype=torch.int32)), TypeError, r"x: dtype must be one of"),
    (lambda: quantize_fp8_blockwise(torch.ones(128)), ValueError, r"x: expected at least 2 dimensions"),
    (lambda: quantize_fp8_blockwise(torch.ones(4, 4), dtype=torch.int8), TypeError, r"dtype: must be one of"),
    (lambda: quantize_fp8_blockwise(torch.ones(4, 4), block=128), TypeError, r"block: expected a pair of ints"),
    (lambda: quantize_fp8_blockwise(torch.ones(4, 4), block=(0, 128)), ValueError, r"block: sizes must be >= 1"),
    (lambda: dequantize_fp8_blockwise(torch.ones(4, 4), torch.ones(4, 1)), TypeError, r"x_fp8: dtype must be one of"),
    (lambda: dequantize_fp8_blockwise(torch.ones(4, 256).to(torch.float8_e4m3fn), torch.ones(4, 3)), ValueError,
     r"scales: expected shape \(4, 2\) for x_fp8 \(4, 256\) and block \(1, 128\), got \(4, 3\)"),
    (lambda: dequantize_fp8_blockwise(torch.ones(4, 256).to(torch.float8_e4m3fn), torch.ones(4, 2, dtype=torch.int32)),
     TypeError, r"scales: expected a floating-point tensor"),
], ids=["x_type", "x_dtype", "x_1d", "fp8_dtype", "block_type", "block_size", "deq_dtype", "deq_shape", "deq_scales"])
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.gpu
def test_cuda_matches_cpu(generator):
    x = _random((3, 300, 520), generator)
    for block in [(1, 128), (128, 128)]:
        q, scales = quantize_fp8_blockwise(x.cuda(), block)
        qc, sc = quantize_fp8_blockwise(x, block)
        assert q.is_cuda and scales.is_cuda
        assert torch.equal(scales.cpu(), sc), f"block {block}: scales differ between CUDA and CPU"
        _assert_same_fp8(q.cpu(), qc, x, sc, block)


def _assert_same_fp8(q_cuda, q_cpu, x, scales, block):
    """The two devices' fp8 values agree except, at most, by one fp8 step where the quotient
    x / scale lies on a rounding boundary to float32 precision (the two casts may round such a
    quotient differently); any other difference fails, and the mismatches are described."""
    a, b = q_cuda.float(), q_cpu.float()
    differ = a != b
    if not bool(differ.any()):
        return
    quotient = (x.float() / _expand(scales, *block, *x.shape[-2:]))[differ]
    lo, hi = torch.minimum(a[differ], b[differ]), torch.maximum(a[differ], b[differ])
    midpoint = (lo + hi) / 2
    on_boundary = (quotient - midpoint).abs() <= midpoint.abs() * 2.0 ** -20
    steps = (q_cuda.view(torch.uint8).int() - q_cpu.view(torch.uint8).int())[differ].abs()
    on_boundary &= steps == 1
    detail = (f"block {block}: {int(differ.sum())} of {differ.numel()} fp8 values differ; first quotients "
              f"{quotient[:4].tolist()}, CUDA {a[differ][:4].tolist()}, CPU {b[differ][:4].tolist()}")
    assert bool(on_boundary.all()), detail
    assert int(differ.sum()) <= differ.numel() // 1000, detail


@pytest.mark.parametrize("dtype", FORMATS, ids=str)
@pytest.mark.parametrize("ulps", [627, 1444, 9184])
def test_a_subnormal_scale_is_rounded_up_so_nothing_is_clamped(dtype, ulps):
    """amax / max rounded to nearest in float32's subnormals, with few bits, fell up to 29% below
    the quotient: the block maximum divided by it passed max and was clamped (627 ulps of the
    smallest subnormal: dequantised 6.28e-43 for 8.79e-43). Rounded up, only fp8's rounding
    is left."""
    x = torch.zeros(1, 128)
    x[0, 0] = ulps * (FORMATS[dtype]["max"] / 448.0) * 2.0**-149  # the same subnormal scale in both formats
    q, scales = quantize_fp8_blockwise(x, (1, 128), dtype)
    assert scales[0, 0].item() < torch.finfo(torch.float32).tiny
    assert (x[0, 0] / scales[0, 0]).item() <= FORMATS[dtype]["max"]
    got = dequantize_fp8_blockwise(q, scales, (1, 128))[0, 0].double()
    assert abs(got / x[0, 0].double() - 1).item() <= FORMATS[dtype]["rel"]


def test_output_is_contiguous_and_not_differentiable(generator):
    """A transposed weight gives an fp8 copy of its logical shape, row-major (a strided one
    made every scaled_mm call copy it again), and no autograd history."""
    w = _random((256, 384), generator).t().requires_grad_()
    q, scales = quantize_fp8_blockwise(w, (128, 128))
    assert q.is_contiguous() and q.shape == (384, 256)
    assert not q.requires_grad and not scales.requires_grad


def test_numpy_block_sizes():
    np = pytest.importorskip("numpy")
    x = torch.ones(4, 256)
    q, scales = quantize_fp8_blockwise(x, (np.int64(1), np.int64(128)))
    assert scales.shape == (4, 2)
    with pytest.raises(TypeError, match=r"block: expected a pair of ints"):
        quantize_fp8_blockwise(x, (True, 128))
