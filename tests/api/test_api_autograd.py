"""Gradients and the autograd/compile path's argument checks, on the fake GPU of conftest.py
(each kernel computes the float64 product of its inputs and rounds it to the output dtype), so
the backward formulas are checked against torch's autograd of the float64 reference."""

import pytest
import torch

import tlgemm
from tlgemm.testing import random_operand

F16 = torch.float16


def test_a_float32_gradient_of_float16_inputs_beyond_float16s_range(fake_gpu):
    """out_dtype=float32 gives a float32 gradient; cast to float16 before the backward product,
    1e5 became inf, and so did a's gradient (1600). It is divided by a power of two first and
    the float32 product multiplied back."""
    a = torch.full((4, 16), 1.0, dtype=F16, requires_grad=True)
    b = torch.full((16, 8), 1e-3, dtype=F16)
    grad = torch.full((4, 8), 1e5)
    tlgemm.matmul(a, b, out_dtype=torch.float32).backward(grad)
    want = grad.double() @ b.double().t()
    assert a.grad.dtype == F16
    torch.testing.assert_close(a.grad.double(), want, rtol=2e-3, atol=0)


def test_addmm_alpha_scales_the_backward_product_not_the_gradient(fake_gpu):
    """alpha applied to the float16 gradient before the product put it among float16's
    subnormals (g · 1e-6 keeps about 4 bits) though the gradient itself is a normal float16."""
    g = torch.Generator().manual_seed(5)
    a = random_operand((4, 16), F16, generator=g).requires_grad_()
    b = random_operand((16, 8), F16, generator=g) * 1000
    grad = random_operand((4, 8), F16, generator=g)
    tlgemm.addmm(torch.zeros(8, dtype=F16), a, b, alpha=1e-6).backward(grad)
    want = (grad.double() @ b.double().t()) * 1e-6
    err = ((a.grad.double() - want).norm() / want.norm()).item()
    assert err < 2e-3, err


def test_scaled_mm_backward_says_it_has_no_gradient(fake_gpu):
    a = random_operand((8, 32), torch.float8_e4m3fn)
    b = random_operand((32, 16), torch.float8_e4m3fn)
    scale = torch.ones(1, requires_grad=True)
    out = tlgemm.scaled_mm(a, b, scale, torch.ones(1))
    with pytest.raises(RuntimeError, match=r"tlgemm.scaled_mm: no gradient .* detach the scales and the bias"):
        out.float().sum().backward()


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(out=[0]), TypeError, r"out: expected a torch.Tensor, got list"),
    (dict(backend=None), ValueError, r"backend: expected 'auto', 'tilelang' or 'triton', got None"),
    (dict(out_dtype="bf16"), TypeError, r"out_dtype: expected a torch.dtype, got str"),
    (dict(out=torch.empty(8, 16).to_sparse()), TypeError, r"out: expected a dense \(strided\) tensor"),
    (dict(out=torch.empty(8, 16, device="meta")), ValueError, r"out: on meta, but a is on cpu"),
])
def test_the_op_path_names_bad_arguments(fake_gpu, kwargs, error, message):
    """With an input requiring grad (or under torch.compile) a call goes through the
    torch.library op, whose schema rejected these with the dispatcher's message, or (out on
    another device) copied the result there."""
    a = random_operand((8, 32), torch.float32).requires_grad_()
    with pytest.raises(error, match=message):
        tlgemm.matmul(a, random_operand((32, 16), torch.float32), **kwargs)


@pytest.mark.parametrize("call", [
    lambda a, b: tlgemm.matmul(a.to_sparse(), b),
    lambda a, b: tlgemm.matmul(a, b.to_sparse_csr()),
    lambda a, b: tlgemm.addmm(torch.ones(16).to_sparse(), a, b),
    lambda a, b: tlgemm.scaled_mm(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), torch.ones(1).to_sparse(),
                                  torch.ones(1)),
])
def test_sparse_tensors_are_named(fake_gpu, call):
    a, b = random_operand((8, 32), torch.float32), random_operand((32, 16), torch.float32)
    with pytest.raises(TypeError, match=r"(a|b|bias|scale_a): expected a dense \(strided\) tensor, got layout "
                                        r"torch.sparse"):
        call(a, b)


def test_an_out_requiring_grad_is_refused(fake_gpu):
    a, b = random_operand((8, 32), torch.float32), random_operand((32, 16), torch.float32)
    out = torch.empty(8, 16, requires_grad=True)
    with pytest.raises(ValueError, match=r"out: requires grad"):
        tlgemm.matmul(a, b, out=out)
    with torch.no_grad():
        assert tlgemm.matmul(a, b, out=out) is out


def test_the_op_path_refuses_an_out_sharing_an_input(fake_gpu):
    a = random_operand((16, 16), torch.float32)
    b = random_operand((16, 16), torch.float32).requires_grad_()
    with pytest.raises(ValueError, match=r"out: shares memory with a, which the kernel reads"):
        tlgemm.matmul(a, b, out=a)


def test_schedules_and_targets_are_reachable_from_the_package():
    import subprocess
    import sys

    code = "import tlgemm; print(tlgemm.schedules.Schedule().block_m, tlgemm.Target is tlgemm.api.Target)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["128", "True"]
