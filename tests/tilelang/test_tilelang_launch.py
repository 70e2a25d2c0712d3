"""CPU: the TileLang launcher's copy rule (operand orientation, TMA alignment padding) keeps
the product exact, and its validation names the argument."""

import pytest
import torch

from tlgemm.schedules import Schedule
from tlgemm.tilelang import matmul
from tlgemm.tilelang.launch import _orientation, _oriented


def _logical(t, major, operand):
    """The [M, K] / [K, N] operand a stored tensor represents."""
    if operand == "A":
        return t if major == "K" else t.t()
    return t.t() if major == "K" else t


@pytest.mark.parametrize("shape", [(5, 7, 3), (16, 24, 29), (16, 24, 32), (1, 8, 8), (9, 1, 17)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float32])
@pytest.mark.parametrize("layouts", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_orientation_keeps_the_product(generator, shape, dtype, layouts):
    M, N, K = shape
    a = torch.randn(M, K, generator=generator).to(dtype)
    b = torch.randn(K, N, generator=generator).to(dtype)
    if layouts[0]:
        a = a.t().contiguous().t()
    if layouts[1]:
        b = b.t().contiguous().t()
    (M, K), N = a.shape, b.shape[1]
    how = _orientation(M, K, N, a.stride(), b.stride(), a.data_ptr() % 16 == 0, b.data_ptr() % 16 == 0,
                       a.element_size())
    A, B = _oriented(a, b, *how)
    a_major, b_major = ("MN" if h == "MN" else "K" for h in how[:2])
    assert A.is_contiguous() and B.is_contiguous()
    if dtype.itemsize != 2:
        assert a_major == b_major == "K", "WGMMA reads 8-bit and tf32 operands K-major only"
    for t, major in ((A, a_major), (B, b_major)):
        assert (t.shape[-1] * t.element_size()) % 16 == 0, "TMA needs 16-byte row pitches"
    product = _logical(A, a_major, "A").double() @ _logical(B, b_major, "B").double()
    torch.testing.assert_close(product, a.double() @ b.double(), rtol=1e-12, atol=1e-12)


def test_cpu_tensors_are_rejected():
    a = torch.randn(8, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a: on cpu"):
        matmul(a, a, Schedule().persistent())


@pytest.mark.parametrize("a, b, match", [
    (torch.randn(8, 8, dtype=torch.float64), torch.randn(8, 8, dtype=torch.float64), "a: dtype"),
    (torch.randn(8, 8).half(), torch.randn(8, 8).bfloat16(), "dtypes must match"),
    (torch.randn(8, 4).half(), torch.randn(8, 8).half(), "inner dimensions"),
    (torch.randn(8).half(), torch.randn(8, 8).half(), "2-D"),
])
def test_bad_operands(a, b, match):
    with pytest.raises((TypeError, ValueError), match=match):
        matmul(a, b, Schedule().persistent())
