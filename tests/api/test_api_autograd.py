"""Gradients and the autograd/compile path's argument checks, on the fake GPU of conftest.py
(each kernel computes the float64 product of its inputs and rounds it to the output dtype), so
the backward formulas are checked against torch's autograd of the float64 reference."""

import pytest
import torch

import tlgemm
from tlgemm import api
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


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_gradient_entry_spoils_only_its_products(fake_gpu, bad):
    """The rescaling unit of a float32 gradient of float16 inputs comes from its finite entries:
    one NaN or inf set it to NaN or inf, and every entry of both gradients was lost. As in
    torch's float64 autograd, only a's gradient row and b's gradient column of that entry are
    non-finite; the rest matches it."""
    g = torch.Generator().manual_seed(7)
    a = random_operand((8, 32), F16, generator=g).requires_grad_()
    b = random_operand((32, 16), F16, generator=g).requires_grad_()
    grad = random_operand((8, 16), torch.float32, generator=g) * 1e3
    grad[2, 5] = bad
    tlgemm.matmul(a, b, out_dtype=torch.float32).backward(grad)
    want_a = grad.double() @ b.detach().double().t()
    want_b = a.detach().double().t() @ grad.double()
    for got, want in ((a.grad, want_a), (b.grad, want_b)):
        assert torch.equal(got.isfinite(), want.isfinite())
        finite = want.isfinite()
        assert finite.sum() > 0
        err = ((got.double()[finite] - want[finite]).norm() / want[finite].norm()).item()
        assert err < 2e-3, err


@pytest.mark.parametrize("M, N", [(0, 8), (4, 0)])
def test_an_empty_result_has_zero_gradients(fake_gpu, M, N):
    """The float16 rescaling took the amax of the empty gradient and raised; torch gives zeros."""
    a = torch.randn(M, 16, dtype=F16, requires_grad=True)
    b = torch.randn(16, N, dtype=F16, requires_grad=True)
    tlgemm.matmul(a, b, out_dtype=torch.float32).sum().backward()
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    assert not a.grad.any() and not b.grad.any()


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


def test_scaled_mm_backward_says_it_has_no_gradient_for_the_scales(fake_gpu):
    a = random_operand((8, 32), torch.float8_e4m3fn)
    b = random_operand((32, 16), torch.float8_e4m3fn)
    scale = torch.ones(1, requires_grad=True)
    out = tlgemm.scaled_mm(a, b, scale, torch.ones(1), bias=torch.zeros(16, requires_grad=True))
    with pytest.raises(RuntimeError, match=r"tlgemm.scaled_mm: no gradient for a, b or the scales .* detach the "
                                           r"scales"):
        out.float().sum().backward()


@pytest.mark.parametrize("bias_dtype", [torch.float32, torch.bfloat16])
def test_scaled_mm_gives_its_bias_a_gradient(fake_gpu, bias_dtype):
    """The bias is added to every row of the scaled product: its gradient is the output's summed
    over the rows (it raised before, and so did torch.compile's trace of the forward)."""
    g = torch.Generator().manual_seed(3)
    a = random_operand((8, 32), torch.float8_e4m3fn, generator=g)
    b = random_operand((32, 16), torch.float8_e4m3fn, generator=g)
    bias = random_operand((16,), bias_dtype, generator=g).requires_grad_()
    grad = random_operand((8, 16), torch.bfloat16, generator=g)
    tlgemm.scaled_mm(a, b, torch.full((1,), 0.5), torch.full((1,), 2.0), bias=bias).backward(grad)
    assert bias.grad.dtype == bias_dtype
    torch.testing.assert_close(bias.grad.double(), grad.double().sum(0), rtol=1e-2, atol=0)


def test_a_small_float32_gradient_of_float16_inputs_keeps_its_bits(fake_gpu):
    """The float32 gradient of float16 inputs was only ever divided down before its cast to
    float16, so one of 1e-8 (a's gradient about 1e-4, a normal float16) became 0. It is scaled
    up as well now, and the float32 product scaled back."""
    g = torch.Generator().manual_seed(1)
    a = (random_operand((8, 32), torch.float32, generator=g) * 1000).half().requires_grad_()
    b = (random_operand((32, 16), torch.float32, generator=g) * 1000).half().requires_grad_()
    for scale in (1e-5, 1e-8):
        a.grad = b.grad = None
        grad = random_operand((8, 16), torch.float32, generator=g) * scale
        tlgemm.matmul(a, b, out_dtype=torch.float32).backward(grad)
        for got, want in ((a.grad, grad.double() @ b.detach().double().t()),
                          (b.grad, a.detach().double().t() @ grad.double())):
            err = ((got.double() - want).norm() / want.norm()).item()
            assert err < 2e-3, (scale, err)


def test_addmm_does_not_keep_its_bias_for_the_backward(fake_gpu):
    """Only the bias's shape and dtype enter addmm's backward: the bias written in place after
    the call, or as ``out`` (``addmm(c, a, b, out=c)``), made the backward fail with torch's
    "modified by an inplace operation" error; torch's own addmm backward does not keep it."""
    g = torch.Generator().manual_seed(4)
    a = random_operand((8, 32), torch.float32, generator=g).requires_grad_()
    b = random_operand((32, 16), torch.float32, generator=g)
    want = torch.ones(8, 16, dtype=torch.float64) @ b.double().t()
    c = random_operand((8, 16), torch.float32, generator=g)
    assert tlgemm.addmm(c, a, b, out=c) is c
    c.sum().backward()
    torch.testing.assert_close(a.grad.double(), want, rtol=1e-5, atol=0)
    a.grad = None
    bias = random_operand((16,), torch.float32, generator=g).requires_grad_()
    y = tlgemm.addmm(bias.detach(), a, b)
    bias.data.add_(1)
    y.sum().backward()
    torch.testing.assert_close(a.grad.double(), want, rtol=1e-5, atol=0)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(out=[0]), TypeError, r"out: expected a torch.Tensor, got list"),
    (dict(backend=None), ValueError, r"backend: expected 'auto', 'tilelang' or 'triton', got None"),
    (dict(out_dtype="bf16"), TypeError, r"out_dtype: expected a torch.dtype, got str"),
    (dict(out=torch.empty(8, 16).to_sparse()), TypeError, r"out: expected a dense \(strided\) tensor"),
    (dict(out=torch.empty(8, 16, device="meta")), ValueError, r"out: on meta, but a is on cpu"),
    (dict(out=torch.empty(8, 16, requires_grad=True)), ValueError, r"out: a leaf tensor that requires grad"),
    (dict(out=torch.empty(1, 16).expand(8, 16)), ValueError, r"^out: strides \(0, 1\) may make elements"),
    (dict(out=torch.empty(8, 16, dtype=torch.int32)), TypeError,
     r"^out: for float32 inputs \(matmul\) one of float32, float16, bfloat16, got int32$"),
])
def test_the_op_path_names_bad_arguments(fake_gpu, kwargs, error, message):
    """With an input requiring grad (or under torch.compile) a call goes through the
    torch.library op, whose schema rejected these with the dispatcher's message, or (out on
    another device) copied the result there."""
    a = random_operand((8, 32), torch.float32).requires_grad_()
    with pytest.raises(error, match=message):
        tlgemm.matmul(a, random_operand((32, 16), torch.float32), **kwargs)


@pytest.mark.parametrize("call, message", [
    (lambda a, b: tlgemm.matmul(a, b.tolist()), r"^b: expected a torch\.Tensor, got list$"),
    (lambda a, b: tlgemm.addmm(torch.ones(16), a.tolist(), b), r"^a: expected a torch\.Tensor, got list$"),
    (lambda a, b: tlgemm.addmm([0.0] * 16, a, b), r"^bias: expected a torch\.Tensor, got list$"),
    (lambda a, b: tlgemm.scaled_mm(a.detach().to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), 2.0,
                                   torch.ones(1), bias=torch.zeros(16, requires_grad=True)),
     r"^scale_a: expected a torch\.Tensor, got float$"),
    (lambda a, b: tlgemm.scaled_mm(a.detach().to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), torch.ones(1),
                                   torch.ones(1), bias=[0.0] * 16), r"^bias: expected a torch\.Tensor, got list$"),
])
def test_the_op_path_names_arguments_that_are_no_tensors(fake_gpu, call, message):
    """On the op path (an input requiring grad) an argument that is no tensor got the
    dispatcher's schema error; it is named as on the eager path."""
    a = random_operand((8, 32), torch.float32).requires_grad_()
    with pytest.raises(TypeError, match=message):
        call(a, random_operand((32, 16), torch.float32))


@pytest.mark.parametrize("call", [
    lambda a, b: tlgemm.matmul(a.to_sparse(), b),
    lambda a, b: tlgemm.matmul(a, b.to_sparse_csr()),
    lambda a, b: tlgemm.matmul(a.to_sparse().requires_grad_(), b, out=torch.empty(8, 16)),
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


@pytest.fixture
def repeats(fake_gpu, monkeypatch):
    """fake_gpu with a tlgemm.tilelang.cached_launch that, like the real one after a first
    launch, hands back a launch writing the product into out as a kernel does (autograd does
    not see it); .fast counts its calls."""
    import importlib

    fake_gpu.fast = 0

    def cached_launch(a, b, schedule, out):
        shape, dtype = tuple(out.shape), out.dtype

        def launch(a, b, out):
            fake_gpu.fast += 1
            target = torch.empty(shape, dtype=dtype) if out is None else out
            target.detach().copy_(a.double() @ b.double())
            return target
        return launch

    monkeypatch.setattr(importlib.import_module("tlgemm.tilelang"), "cached_launch", cached_launch)
    return fake_gpu


def test_a_repeat_with_an_out_requiring_grad_takes_the_checked_path(repeats):
    """A repeated call matching a cached launch skipped the check: the kernel wrote a leaf
    requiring grad behind autograd's back."""
    a, b = random_operand((64, 32), torch.bfloat16), random_operand((32, 48), torch.bfloat16)
    tlgemm.matmul(a, b, out=torch.empty(64, 48, dtype=torch.bfloat16))
    calls = repeats.fast
    with pytest.raises(ValueError, match=r"out: requires grad"):
        tlgemm.matmul(a, b, out=torch.empty(64, 48, dtype=torch.bfloat16, requires_grad=True))
    assert repeats.fast == calls


def test_a_repeat_into_an_out_overlapping_an_operand_takes_the_checked_path(repeats):
    """The repeat path's byte-range test (api._apart): an out overlapping a or b, from below or
    from above, by one row up to the whole operand, goes to the checked path, which refuses it;
    an out that only borders an operand is repeated. a [64, 32], b [32, 128] and out [64, 128]
    span different lengths, so a length stored for the wrong tensor fails a case."""
    flat = torch.zeros(30720, dtype=torch.bfloat16)
    a_at, b_at, a_len, b_len, out_len = 8192, 18432, 64 * 32, 32 * 128, 64 * 128
    assert a_at + a_len + out_len == b_at  # one out fits exactly between a and b
    flat[a_at:a_at + a_len] = random_operand((a_len,), torch.bfloat16)
    flat[b_at:b_at + b_len] = random_operand((b_len,), torch.bfloat16)
    a, b = flat[a_at:a_at + a_len].view(64, 32), flat[b_at:b_at + b_len].view(32, 128)

    def out_at(start):
        return flat[start:start + out_len].view(64, 128)

    expected = (a.double() @ b.double()).to(torch.bfloat16)
    tlgemm.matmul(a, b, out=out_at(a_at - out_len))
    calls = repeats.fast
    refused = {"a": (a_at - out_len + 128, a_at + a_len - 128, a_at - 128, a_at),
               "b": (b_at - out_len + 128, b_at + b_len - 128, b_at - out_len + b_len, b_at)}
    for name, starts in refused.items():
        for start in starts:
            with pytest.raises(ValueError, match=rf"out: shares memory with {name}"):
                tlgemm.matmul(a, b, out=out_at(start))
    assert repeats.fast == calls
    for n, start in enumerate((a_at - out_len, a_at + a_len, b_at + b_len), start=1):
        out = tlgemm.matmul(a, b, out=out_at(start))
        assert repeats.fast == calls + n and torch.equal(out, expected)


def test_a_negated_view_is_resolved_not_repeated(repeats):
    """torch's negative bit (z.conj().imag, torch._neg_view) leaves the values' negatives in
    memory; a repeat of a's launch served _neg_view(a) its raw memory (a sign-flipped result).
    It is resolved (a copy) and never served by a repeat."""
    a, b = random_operand((64, 32), torch.bfloat16), random_operand((32, 48), torch.bfloat16)
    tlgemm.matmul(a, b)
    calls = repeats.fast
    assert api._repeat_key(a, b, None, None, "auto", None) != api._repeat_key(torch._neg_view(a), b, None, None,
                                                                                "auto", None)
    got = tlgemm.matmul(torch._neg_view(a), b)
    assert repeats.fast == calls and repeats.tilelang.calls[-1][1].is_neg() is False
    torch.testing.assert_close(got.double(), -(a.double() @ b.double()), rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match=r"out: has the negative bit set"):
        tlgemm.matmul(a, b, out=torch._neg_view(torch.empty(64, 48, dtype=torch.bfloat16)))


@pytest.mark.parametrize("backend", ["tilelang", "triton"])
def test_the_launchers_refuse_a_negated_view(backend):
    import importlib

    launch = importlib.import_module(f"tlgemm.{backend}")
    a, b = random_operand((64, 64), torch.bfloat16), random_operand((64, 64), torch.bfloat16)
    with pytest.raises(ValueError, match=r"b: has the negative bit set"):
        launch.matmul(a, torch._neg_view(b), tlgemm.schedules.Schedule(block_m=64, block_n=64))


def test_plans_are_kept_per_read_major_of_b(fake_gpu, monkeypatch):
    """A row-major b with a padded leading stride is copied K-major by TileLang's launcher (so a
    block_n no power of two runs), a dense one is read MN-major (so it does not): one plan for
    both ran the first one's 64x160 tile on the second and failed."""
    from tlgemm.tilelang import launch as tl

    fake = fake_gpu.tilelang.module.matmul

    def as_the_launcher(a, b, schedule, *, out, **kwargs):
        (M, K), N = a.shape, b.shape[1]
        how = tl._orientation(M, K, N, a.stride(), b.stride(), True, True, a.element_size())
        tl.make_spec(a.dtype, b.dtype, out.dtype, schedule, 132, a_major="MN" if how[0] == "MN" else "K",
                     b_major="MN" if how[1] == "MN" else "K")
        return fake(a, b, schedule, out=out, **kwargs)

    monkeypatch.setattr(fake_gpu.tilelang.module, "matmul", as_the_launcher)
    M, N, K = 256, 5120, 4096
    a = random_operand((M, K), torch.bfloat16)
    padded = random_operand((K, N + 8), torch.bfloat16)[:, :N]
    tlgemm.matmul(a, padded)
    assert not fake_gpu.tilelang.calls[-1][3].has_pow2_block_n
    tlgemm.matmul(a, random_operand((K, N), torch.bfloat16))
    assert fake_gpu.tilelang.calls[-1][3].has_pow2_block_n


@pytest.mark.parametrize("call", [
    lambda a, b: tlgemm.matmul(a, b), lambda a, b: tlgemm.bmm(a[None], b[None]),
    lambda a, b: tlgemm.addmm(b[0], a, b),
], ids=["matmul", "bmm", "addmm"])
def test_forward_mode_ad_is_refused(fake_gpu, call):
    """torch.func.jvp returned a zero tangent (the ops have no forward-mode formula) and a dual
    tensor of torch.autograd.forward_ad launched the kernel and lost its tangent: both silently."""
    import torch.autograd.forward_ad as forward_ad

    a, b = torch.randn(4, 16, dtype=F16), torch.randn(16, 8, dtype=F16)
    message = r"^tlgemm's GEMMs have no forward-mode AD \(torch\.autograd\.forward_ad, torch\.func\.jvp or jacfwd\)"
    with pytest.raises(NotImplementedError, match=message):
        torch.func.jvp(lambda x: call(x, b), (a,), (torch.ones_like(a),))
    with forward_ad.dual_level():
        with pytest.raises(NotImplementedError, match=message):
            call(forward_ad.make_dual(a, torch.ones_like(a)), b)
        assert call(a, b).shape[-2:] == (4, 8)  # no dual input: no tangent to lose
