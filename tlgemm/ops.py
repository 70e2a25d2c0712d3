"""torch.library custom ops tlgemm::matmul, tlgemm::addmm, tlgemm::bmm, tlgemm::scaled_mm.

Functional forms of the tlgemm entry points (no ``out=``; a schedule travels as its
``Schedule.text``, read back with ``Schedule.parse``), so torch.compile(fullgraph=True)
traces calls to tlgemm as single graph nodes. Each op has a fake implementation (the
output's shape, dtype and contiguous strides, after the same shape and dtype checks as the
real call) and matmul, addmm and bmm have gradients (computed with the same ops); scaled_mm
has one for its bias only (8-bit inputs and their scales have none, and its backward says
so). The public functions in tlgemm.api call these ops where something records or
redirects torch ops (torch.compile, torch.jit.trace, dispatch modes, functorch transforms,
tensor subclasses), when an input requires grad and for meta tensors, and the kernels directly
otherwise (the dispatcher costs several microseconds a call): api._through_op. Importing
tlgemm.ops, or any tlgemm entry point, registers them.
"""

from __future__ import annotations

import torch

from tlgemm import api

__all__ = ["matmul", "addmm", "bmm", "scaled_mm"]


@torch.library.custom_op("tlgemm::matmul", mutates_args=())
def matmul(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None, backend: str = "auto",
           schedule: str | None = None) -> torch.Tensor:
    """tlgemm.matmul as an op."""
    return api._matmul_eager(a, b, None, out_dtype, backend, api._schedule_from_arg(schedule))


@torch.library.custom_op("tlgemm::bmm", mutates_args=())
def bmm(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None, backend: str = "auto",
        schedule: str | None = None) -> torch.Tensor:
    """tlgemm.bmm as an op."""
    return api._bmm_eager(a, b, None, out_dtype, backend, api._schedule_from_arg(schedule))


@torch.library.custom_op("tlgemm::addmm", mutates_args=())
def addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, alpha: float = 1.0, beta: float = 1.0,
          out_dtype: torch.dtype | None = None, backend: str = "auto", schedule: str | None = None) -> torch.Tensor:
    """tlgemm.addmm as an op."""
    return api._addmm_eager(bias, a, b, alpha, beta, None, out_dtype, backend, api._schedule_from_arg(schedule))


@torch.library.custom_op("tlgemm::scaled_mm", mutates_args=())
def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None, backend: str = "auto",
              schedule: str | None = None) -> torch.Tensor:
    """tlgemm.scaled_mm as an op."""
    return api._scaled_mm_eager(a, b, scale_a, scale_b, bias, None, out_dtype, backend,
                                api._schedule_from_arg(schedule))


# ---- fake implementations: shapes and dtypes, and the argument checks that need no data ----


@matmul.register_fake
def _matmul_fake(a, b, out_dtype=None, backend="auto", schedule=None):
    api._check_backend(backend)
    M, N, _, _ = api._check_pair(a, b, 2)
    return a.new_empty((M, N), dtype=api._result_dtype("matmul", a.dtype, b.dtype, out_dtype))


@bmm.register_fake
def _bmm_fake(a, b, out_dtype=None, backend="auto", schedule=None):
    api._check_backend(backend)
    M, N, _, batch = api._check_pair(a, b, 3)
    return a.new_empty((batch, M, N), dtype=api._result_dtype("bmm", a.dtype, b.dtype, out_dtype))


@addmm.register_fake
def _addmm_fake(bias, a, b, alpha=1.0, beta=1.0, out_dtype=None, backend="auto", schedule=None):
    api._check_backend(backend)
    M, N, _, _ = api._check_pair(a, b, 2)
    api._bias_route(bias, M, N, a.device)
    return a.new_empty((M, N), dtype=api._result_dtype("addmm", a.dtype, b.dtype, out_dtype))


@scaled_mm.register_fake
def _scaled_mm_fake(a, b, scale_a, scale_b, bias=None, out_dtype=None, backend="auto", schedule=None):
    api._check_backend(backend)
    M, N, K, _ = api._check_pair(a, b, 2)
    op = "blockscaled" if api._scale_kind(scale_a, scale_b, M, N, K, a.device) else "scaled_mm"
    if bias is not None:
        api._check_scaled_mm_bias(bias, M, N, a.device)
    return a.new_empty((M, N), dtype=api._result_dtype(op, a.dtype, b.dtype, out_dtype))


# ---- gradients ----------------------------------------------------------------------------


def _grad_operand(name: str, a: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(g, unit): the incoming gradient in a's dtype, divided by ``unit`` (a power of two, exact)
    where a wider gradient may not fit it: a float32 gradient (out_dtype=float32) of float16
    inputs is scaled so that its largest finite magnitude lands in [2**13, 2**14) (beyond 65504
    it would become inf in float16, below 2**-14 lose bits in float16's subnormals or become 0).
    unit None: g is the gradient itself. unit is set by the finite entries, so a NaN or inf
    spoils only the products it enters, as in torch."""
    if a.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise RuntimeError(f"tlgemm.{name}: no gradient for {a.dtype} inputs (float32/float16/bfloat16 only)")
    if a.dtype != torch.float16 or grad.dtype == torch.float16 or grad.numel() == 0:
        return grad.to(a.dtype), None
    magnitude = grad.detach().abs()
    amax = magnitude.masked_fill(~magnitude.isfinite(), 0).amax().float()
    unit = torch.exp2(torch.floor(torch.log2(amax)) - 13).clamp(min=2.0**-126)
    return (grad / unit).to(a.dtype), unit


def _setup_mm(ctx, inputs, output):
    a, b, _, backend, _ = inputs
    ctx.save_for_backward(a, b)
    ctx.backend = backend


def _setup_addmm(ctx, inputs, output):
    """Saves a and b; of the bias only its shape and dtype (torch's addmm does not keep it either,
    so the bias may be written in place, e.g. as ``out``, before the backward)."""
    bias, a, b, alpha, beta, _, backend, _ = inputs
    ctx.save_for_backward(a, b)
    ctx.bias_shape, ctx.bias_dtype = bias.shape, bias.dtype
    ctx.alpha, ctx.beta, ctx.backend = alpha, beta, backend


def _operand_grads(product, name, a, b, grad, backend, need_a: bool, need_b: bool, alpha: float = 1.0):
    """(alpha · g @ bᵀ, alpha · aᵀ @ g) with ``product`` (the matmul or bmm op), each only where
    needed. A rescaled gradient (``_grad_operand``) or alpha != 1 is applied to the float32
    product, as torch's mm backward applies alpha after the product: in the inputs' dtype a
    small alpha would push g · alpha into float16's subnormals first."""
    g, unit = _grad_operand(name, a, grad)
    if unit is None and alpha == 1:
        return (product(g, b.mT, a.dtype, backend) if need_a else None,
                product(a.mT, g, b.dtype, backend) if need_b else None)
    factor = alpha if unit is None else unit * alpha

    def scaled(x, y, dtype):
        return (product(x, y, torch.float32, backend) * factor).to(dtype)

    return scaled(g, b.mT, a.dtype) if need_a else None, scaled(a.mT, g, b.dtype) if need_b else None


def _product_backward(product, name: str):
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (*_operand_grads(product, name, a, b, grad, ctx.backend, *ctx.needs_input_grad[:2]), None, None, None)

    return backward


def _addmm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_bias = ((grad.float() * ctx.beta).sum_to_size(ctx.bias_shape).to(ctx.bias_dtype)
                 if ctx.needs_input_grad[0] else None)
    grad_a, grad_b = _operand_grads(matmul, "addmm", a, b, grad, ctx.backend, *ctx.needs_input_grad[1:3],
                                    alpha=ctx.alpha)
    return grad_bias, grad_a, grad_b, None, None, None, None, None


def _setup_scaled_mm(ctx, inputs, output):
    ctx.bias_shape, ctx.bias_dtype = (None, None) if inputs[4] is None else (inputs[4].shape, inputs[4].dtype)


def _scaled_mm_backward(ctx, grad):
    """The bias's gradient (the output's, summed over its rows: bias is added to every row);
    the 8-bit inputs and the scales are constants of the product. Returning None for them
    lets torch.compile trace a model whose fp8 layer has a bias Parameter."""
    if any(ctx.needs_input_grad[:4]):
        raise RuntimeError("tlgemm.scaled_mm: no gradient for a, b or the scales (8-bit inputs and their scales "
                           "are constants of the product; only the bias has one); detach the scales, or use "
                           "tlgemm.matmul on float inputs")
    grad_bias = grad.float().sum_to_size(ctx.bias_shape).to(ctx.bias_dtype) if ctx.needs_input_grad[4] else None
    return None, None, None, None, grad_bias, None, None, None


matmul.register_autograd(_product_backward(matmul, "matmul"), setup_context=_setup_mm)
bmm.register_autograd(_product_backward(bmm, "bmm"), setup_context=_setup_mm)
addmm.register_autograd(_addmm_backward, setup_context=_setup_addmm)
scaled_mm.register_autograd(_scaled_mm_backward, setup_context=_setup_scaled_mm)
