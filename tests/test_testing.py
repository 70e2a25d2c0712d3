"""tlgemm.testing's poison (every element of a poisoned tensor reads as not written) and its
error measure."""

import pytest
import torch

from tlgemm.testing import assert_gemm_close, poison_, poisoned, relative_error


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


def test_a_zero_reference_takes_an_exact_match():
    """The relative error of a zero reference was the absolute one, so 5e-3 everywhere passed
    as a float16 result of a product that is exactly zero."""
    zeros = torch.zeros(1, 3)
    assert relative_error(torch.zeros(1, 3, dtype=torch.float16), zeros) == 0.0
    assert relative_error(torch.empty(0, 3), torch.empty(0, 3)) == 0.0
    with pytest.raises(AssertionError, match="relative Frobenius error inf"):
        assert_gemm_close(torch.full((1, 3), 5e-3, dtype=torch.float16), zeros, torch.float16)
    assert relative_error(torch.tensor([3.0, 4.0]), torch.tensor([0.0, 4.0])) == pytest.approx(0.75)
