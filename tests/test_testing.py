"""tlgemm.testing's poison (every element of a poisoned tensor reads as not written) and its
error measure."""

import math

import pytest
import torch

from tlgemm.testing import assert_gemm_close, poison_, poisoned, reference_gemm, relative_error, worst_block


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn,
                                   torch.float8_e5m2, torch.int32, torch.int8], ids=str)
def test_poison_fills_every_element(dtype):
    t = torch.zeros(3, 5, dtype=dtype)
    assert poison_(t) is t
    for x in (t, poisoned((3, 5), dtype, "cpu")):
        assert x.dtype == dtype and x.shape == (3, 5)
        if dtype.is_floating_point:
            assert torch.isnan(x.float()).all()
        else:
            assert (x == torch.iinfo(dtype).min).all()


@pytest.mark.parametrize("dtype", [torch.bool, torch.complex64, torch.uint8], ids=str)
def test_dtypes_without_a_poison_are_named(dtype):
    """bool and complex failed in torch.iinfo; uint8's minimum is 0, a plain result value, so
    an unwritten uint8 output passed against a zero reference."""
    with pytest.raises(TypeError, match=rf"^t: no poison value for {dtype}"):
        poisoned((2, 2), dtype, "cpu")


def test_reference_of_vectors_is_refused():
    with pytest.raises(ValueError, match=r"^a: expected a matrix or a batch of matrices \(2-D or more\), got \(3,\)"):
        reference_gemm(torch.ones(3), torch.ones(3, 2))


def test_reference_refuses_scales_and_bias_of_another_orientation():
    """Scales and bias were flattened, so a [1, M] per-row scale (or any tensor of M elements)
    was taken for [M, 1]."""
    a, b = torch.ones(3, 4), torch.ones(4, 2)
    ref = reference_gemm(a, b, scale_a=torch.tensor([[1.0], [2.0], [3.0]]), scale_b=torch.tensor([[1.0, 2.0]]),
                         bias=torch.ones(1, 2))
    assert torch.equal(ref, torch.tensor([[5.0, 9.0], [9.0, 17.0], [13.0, 25.0]], dtype=torch.float64))
    for kwargs, message in (
        (dict(scale_a=torch.ones(1, 3)), r"^scale_a: expected a shape in \[\], \[1\], \[1, 1\], \[3\], \[3, 1\], "
                                          r"got \[1, 3\]$"),
        (dict(scale_b=torch.ones(2, 1)), r"^scale_b: expected a shape in .*\[2\], \[1, 2\], got \[2, 1\]$"),
        (dict(scale_a=torch.ones(1, 1, 1)), r"^scale_a: .* got \[1, 1, 1\]$"),
        (dict(bias=torch.ones(2, 1)), r"^bias: expected a shape in \[2\], \[1, 2\], got \[2, 1\]$"),
    ):
        with pytest.raises(ValueError, match=message):
            reference_gemm(a, b, **kwargs)


def test_a_zero_reference_takes_an_exact_match():
    """The relative error of a zero reference was the absolute one, so 5e-3 everywhere passed
    as a float16 result of a product that is exactly zero."""
    zeros = torch.zeros(1, 3)
    assert relative_error(torch.zeros(1, 3, dtype=torch.float16), zeros) == 0.0
    assert relative_error(torch.empty(0, 3), torch.empty(0, 3)) == 0.0
    with pytest.raises(AssertionError, match="relative Frobenius error inf"):
        assert_gemm_close(torch.full((1, 3), 5e-3, dtype=torch.float16), zeros, torch.float16)
    assert relative_error(torch.tensor([3.0, 4.0]), torch.tensor([0.0, 4.0])) == pytest.approx(0.75)


def test_block_scaled_fp8_takes_the_16_bit_bound():
    """Block-scaled fp8 against its dequantised inputs is held to 1e-2 (its promotion leaves
    float32 accumulation and output rounding); fp8's 5e-2 stays for everything else, and block
    scaling names no other input type."""
    from tlgemm.testing import tolerance

    for fp8 in (torch.float8_e4m3fn, torch.float8_e5m2):
        assert tolerance(fp8) == 5e-2 and tolerance(fp8, blockscaled=True) == 1e-2
    ref = torch.ones(4, 4, dtype=torch.float64)
    off = torch.full((4, 4), 1.02, dtype=torch.float32)
    assert assert_gemm_close(off, ref, torch.float8_e4m3fn) == pytest.approx(0.02, rel=0.05)
    with pytest.raises(AssertionError, match=r"error 2\.0\d+e-02 > 1e-02 for block-scaled torch\.float8_e4m3fn$"):
        assert_gemm_close(off, ref, torch.float8_e4m3fn, blockscaled=True)
    with pytest.raises(ValueError, match="block scaling takes fp8 inputs, got torch.bfloat16"):
        tolerance(torch.bfloat16, blockscaled=True)


@pytest.mark.parametrize("in_dtype, out_dtype", [(torch.float32, torch.bfloat16), (torch.float32, torch.float16),
                                                 (torch.int8, torch.bfloat16)], ids=str)
def test_a_16_bit_output_takes_the_16_bit_bound(generator, in_dtype, out_dtype):
    """A float32 or int8 product rounded to a 16-bit output failed the inputs' bound (1e-5, 0)
    although exact but for that rounding (tlgemm run and autotune with --out-dtype bf16); the
    bound is OUTPUT_ROUNDING's there (1e-2 bfloat16, 2e-3 float16), and a result 5% off still
    fails."""
    a = torch.randn(128, 256, generator=generator)
    b = torch.randn(256, 64, generator=generator)
    if in_dtype == torch.int8:
        a, b = (t.mul(20).round().clamp(-127, 127).to(torch.int8) for t in (a, b))
    ref = reference_gemm(a, b)
    assert 0 < assert_gemm_close(ref.to(out_dtype), ref, in_dtype) < 1e-2
    bound = 1e-2 if out_dtype == torch.bfloat16 else 2e-3
    with pytest.raises(AssertionError, match=rf"relative Frobenius error .* > {bound:.0e}"):
        assert_gemm_close(ref.mul(1.05).to(out_dtype), ref, in_dtype)
    if out_dtype == torch.float16:  # float32 run as bf16 (error about 1.7e-3) fails a float16 output's bound
        with pytest.raises(AssertionError, match=r"relative Frobenius error .* > 2e-03"):
            assert_gemm_close((a.bfloat16().double() @ b.bfloat16().double()).mul(1.001).half(), ref, in_dtype)
    with pytest.raises(AssertionError, match=r"relative Frobenius error"):
        assert_gemm_close(ref.mul(1.0001).to(torch.float32), ref, torch.float32)


def test_a_wrong_tile_fails_where_the_whole_result_passes():
    """One zeroed 64x64 block of a 2048x2048 result read 0.031 overall, under fp8's 5e-2: the
    whole result's error averaged the wrong tile away."""
    generator = torch.Generator().manual_seed(0)
    ref = torch.randn(2048, 2048, generator=generator, dtype=torch.float64)
    out = (ref * (1 + 1e-3 * torch.randn(ref.shape, generator=generator, dtype=torch.float64))).to(torch.bfloat16)
    assert assert_gemm_close(out, ref, torch.float8_e4m3fn) < 5e-3
    out[128:192, 512:576] = 0
    assert 0.02 < relative_error(out, ref) < 5e-2
    with pytest.raises(AssertionError, match=r"^result: relative Frobenius error 1\.000e\+00 in the 64x64 block at "
                                             r"rows 128\.\. columns 512\.\., over 4x the bound 5e-02 for "
                                             r"torch\.float8_e4m3fn \(whole result 3\.1\d\de-02\)$"):
        assert_gemm_close(out, ref, torch.float8_e4m3fn)
    assert worst_block(out, ref) == (1.0, (0, 128, 512))


def test_a_wrong_block_of_a_batch_is_named():
    generator = torch.Generator().manual_seed(1)
    ref = torch.randn(3, 130, 200, generator=generator, dtype=torch.float64)
    out = ref.clone()
    out[2, 128:, 192:] *= 1.5  # the ragged corner block: 2 x 8 elements
    with pytest.raises(AssertionError, match=r"in the 64x64 block at rows 128\.\. columns 192\.\. of batch 2, "):
        assert_gemm_close(out, ref, torch.bfloat16)


def test_blocks_whose_reference_cancels_are_held_to_the_whole_result():
    """A block of one element whose reference is near zero (a ragged corner) keeps the error of its
    neighbours: it is measured against what the whole reference's mean square gives it."""
    generator = torch.Generator().manual_seed(2)
    ref = torch.randn(129, 129, generator=generator, dtype=torch.float64)
    ref[128, 128] = 1e-12
    out = ref + 5e-3 * torch.randn(ref.shape, generator=generator, dtype=torch.float64)
    out[128, 128] = 1e-2
    assert worst_block(out, ref)[0] < 2e-2 and assert_gemm_close(out, ref, torch.bfloat16) < 1e-2
    assert worst_block(torch.zeros(3, 3), torch.zeros(3, 3)) == (0.0, (0, 0, 0))
    assert worst_block(torch.full((3, 3), 1e-9), torch.zeros(3, 3))[0] == math.inf
    with pytest.raises(ValueError, match=r"^out: shape \(2, 3, 3\) != reference \(3, 3\)$"):
        worst_block(torch.zeros(2, 3, 3), torch.zeros(3, 3))
