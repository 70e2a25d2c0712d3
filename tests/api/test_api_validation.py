"""tlgemm.matmul / addmm / bmm / scaled_mm reject every bad input class with an error naming
the argument and the rule, and give torch's result for empty problems without a launch.

Rules checked before the device (types, ranks, shapes, dtypes, out, sizes, backend) are
checked with CPU or meta tensors; the device rules with CPU tensors (not a GPU) and a CPU/meta
pair (two devices)."""

import pytest
import torch

import tlgemm
from tlgemm import api

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _ab(M=8, N=12, K=16, dtype=torch.bfloat16, device="cpu"):
    return torch.randn(M, K).to(dtype).to(device), torch.randn(K, N).to(dtype).to(device)


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


CASES = {
    "a_not_tensor": (tlgemm.matmul, lambda: ([[1.0]], _ab()[1]), {}, TypeError,
                     r"a: expected a torch\.Tensor, got list"),
    "b_not_tensor": (tlgemm.matmul, lambda: (_ab()[0], 2.0), {}, TypeError, r"b: expected a torch\.Tensor, got float"),
    "a_1d": (tlgemm.matmul, lambda: (torch.randn(8), _ab()[1]), {}, ValueError,
             r"a: expected a 2-D tensor \[M, K\], got shape \[8\]"),
    "bmm_2d": (tlgemm.bmm, _ab, {}, ValueError, r"a: expected a 3-D tensor \[B, M, K\], got shape \[8, 16\]"),
    "inner": (tlgemm.matmul, lambda: (torch.randn(8, 16), torch.randn(15, 12)), {}, ValueError,
              r"a, b: inner dimensions differ: a is \[8, 16\], b is \[15, 12\]"),
    "batch": (tlgemm.bmm, lambda: (torch.randn(2, 8, 16), torch.randn(3, 16, 4)), {}, ValueError,
              r"a, b: batch sizes differ: .*does not broadcast: expand the smaller one"),
    "float64": (tlgemm.matmul, lambda: _ab(dtype=torch.float64), {}, TypeError,
                r"a: dtype float64 is not a tlgemm input; expected one of float32, float16, bfloat16"),
    "pair": (tlgemm.matmul, lambda: (_ab()[0].half(), _ab()[1]), {}, TypeError,
             r"a, b: dtypes must match \(only float8_e4m3fn and float8_e5m2 may mix\), got float16 and bfloat16"),
    "int8_fp8": (tlgemm.matmul, lambda: (_ab(dtype=torch.int8)[0], _ab(dtype=E4M3)[1]), {}, TypeError,
                 r"a, b: dtypes must match"),
    "addmm_fp8": (lambda a, b, **kw: tlgemm.addmm(torch.ones(12), a, b, **kw), lambda: _ab(dtype=E4M3), {}, TypeError,
                  r"a: addmm takes float32, float16 or bfloat16 inputs, got float8_e4m3fn; .*tlgemm\.scaled_mm"),
    "scaled_bf16": (lambda a, b, **kw: tlgemm.scaled_mm(a, b, torch.ones(1), torch.ones(1), **kw), _ab, {}, TypeError,
                    r"a: scaled_mm takes 8-bit inputs .*got bfloat16; 16/32-bit inputs: tlgemm\.matmul"),
    "out_dtype_int32": (tlgemm.matmul, _ab, {"out_dtype": torch.int32}, TypeError,
                        r"out_dtype: for bfloat16 inputs \(matmul\) one of float32, float16, bfloat16, got int32"),
    "out_dtype_type": (tlgemm.matmul, _ab, {"out_dtype": "bf16"}, TypeError, r"out_dtype: expected a torch\.dtype"),
    "backend": (tlgemm.matmul, _ab, {"backend": "cuda"}, ValueError,
                r"backend: expected 'auto', 'tilelang' or 'triton', got 'cuda'"),
    "schedule_type": (tlgemm.matmul, _ab, {"schedule": {"block_m": 64}}, TypeError,
                      r"schedule: expected a tlgemm\.schedules\.Schedule or None, got dict"),
    "cpu": (tlgemm.matmul, _ab, {}, ValueError, r"a: on cpu; tlgemm's kernels run on CUDA \(or ROCm\) GPUs"),
    "cpu_bmm": (tlgemm.bmm, lambda: (torch.randn(2, 8, 16), torch.randn(2, 16, 4)), {}, ValueError, r"a: on cpu"),
    "two_devices": (tlgemm.matmul, lambda: (_ab()[0], _meta(16, 12)), {}, ValueError,
                    r"b: on meta, but a is on cpu; all tensors must be on one device"),
    "out_type": (tlgemm.matmul, _ab, {"out": [0]}, TypeError, r"out: expected a torch\.Tensor"),
    "out_shape": (tlgemm.matmul, _ab, {"out": torch.empty(8, 11)}, ValueError,
                  r"out: expected shape \[8, 12\], got \[8, 11\]"),
    "out_dtype_conflict": (tlgemm.matmul, _ab, {"out": torch.empty(8, 12), "out_dtype": torch.float16}, ValueError,
                           r"out: dtype torch\.float32 differs from out_dtype=torch\.float16"),
    "out_device": (tlgemm.matmul, _ab, {"out": _meta(8, 12)}, ValueError, r"out: on meta, but a is on cpu"),
    "out_int32": (tlgemm.matmul, _ab, {"out": torch.empty(8, 12, dtype=torch.int32)}, TypeError,
                  r"out: for bfloat16 inputs \(matmul\) one of float32, float16, bfloat16, got int32"),
    "out_overlaps_itself": (tlgemm.matmul, _ab, {"out": torch.empty(1, 12, dtype=torch.bfloat16).expand(8, 12)},
                            ValueError, r"out: strides \(0, 1\) may make elements of shape \(8, 12\) overlap"),
    "a_int32_elements": (tlgemm.matmul, lambda: (_meta(2**16, 2**15), _meta(2**15, 4)), {}, ValueError,
                         r"a: holds 2147483648 elements; the kernels index in int32"),
    "out_int32_elements": (tlgemm.matmul, lambda: (_meta(2**16, 1), _meta(1, 2**15)), {}, ValueError,
                           r"out: holds 2147483648 elements; the kernels index in int32"),
    "bmm_int32_elements": (tlgemm.bmm, lambda: (_meta(2**11, 2**10, 2**10), _meta(2**11, 2**10, 8)), {}, ValueError,
                           r"a: holds 2147483648 elements"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_named(case):
    fn, make, kwargs, error, message = CASES[case]
    a, b = make()
    with pytest.raises(error, match=message):
        fn(a, b, **kwargs)


ADDMM_CASES = {
    "bias_type": ([1.0], TypeError, r"bias: expected a torch\.Tensor, got list"),
    "bias_int": (torch.ones(12, dtype=torch.int32), TypeError, r"bias: dtype must be float32, float16 or bfloat16"),
    "bias_shape": (torch.ones(5), ValueError,
                   r"bias: shape \[5\] does not broadcast to the result \[M, N\] = \[8, 12\]"),
    "bias_3d": (torch.ones(1, 8, 12), ValueError, r"bias: shape \[1, 8, 12\] does not broadcast"),
    "bias_device": (_meta(12, dtype=torch.float32), ValueError, r"bias: on meta, but a is on cpu"),
}


@pytest.mark.parametrize("case", ADDMM_CASES)
def test_addmm_bias_rules(case):
    bias, error, message = ADDMM_CASES[case]
    a, b = _ab()
    with pytest.raises(error, match=message):
        tlgemm.addmm(bias, a, b)


def _fp8(M=8, N=12, K=16):
    return _ab(M, N, K, dtype=E4M3)


SCALED_CASES = {
    "scale_type": (lambda M, N, K: (2.0, torch.ones(1)), {}, TypeError, r"scale_a: expected a torch\.Tensor"),
    "scale_dtype": (lambda M, N, K: (torch.ones(1), torch.ones(N, dtype=torch.bfloat16)), {}, TypeError,
                    r"scale_b: dtype must be float32, got bfloat16"),
    "scale_device": (lambda M, N, K: (torch.ones(1), _meta(N, dtype=torch.float32)), {}, ValueError,
                     r"scale_b: on meta, but a is on cpu"),
    "scale_shape": (lambda M, N, K: (torch.ones(M + 1), torch.ones(1)), {}, ValueError,
                    r"scale_a, scale_b: shapes \[9\] and \[1\] match no scaling of \[8, 16\] @ \[16, 12\]: per-tensor"),
    "torch_block_layout": (lambda M, N, K: (torch.ones(M, 3), torch.ones(3, 2)), {}, ValueError,
                           r"this scale_b is torch\._scaled_mm's \[K/128, N/128\] layout: pass scale_b\.t\(\)"),
    "bias_2d": (lambda M, N, K: (torch.ones(1), torch.ones(1)), {"bias": torch.ones(8, 12)}, ValueError,
                r"bias: scaled_mm takes a 1-D \[N\] = \[12\] bias"),
    "int8_block": (lambda M, N, K: (torch.ones(M, 3), torch.ones(2, 3)), {}, TypeError,
                   r"block-wise scales take fp8 inputs"),
    "block_ragged_k": (lambda M, N, K: (torch.ones(M, 3), torch.ones(2, 3)), {}, ValueError,
                       r"a, b: block-wise scales need K a multiple of 128 .*got K = 320"),
}


@pytest.mark.parametrize("case", SCALED_CASES)
def test_scaled_mm_scale_rules(case):
    make, kwargs, error, message = SCALED_CASES[case]
    if case == "torch_block_layout":
        a, b = _fp8(8, 256, 384)
        scales = make(8, 256, 384)
    elif case == "int8_block":
        a, b = _ab(8, 256, 384, dtype=torch.int8)
        scales = make(8, 256, 384)
    elif case == "block_ragged_k":
        a, b = _fp8(8, 256, 320)
        scales = make(8, 256, 320)
    else:
        a, b = _fp8()
        scales = make(8, 12, 16)
    with pytest.raises(error, match=message):
        tlgemm.scaled_mm(a, b, *scales, **kwargs)


def test_square_block_scales_of_b_are_not_blamed():
    """With ceil(N/128) = K/128 a square scale_b has the block-wise shape in either reading, so
    a wrong scale_a does not get the hint that scale_b is torch._scaled_mm's layout."""
    a, b = _fp8(40, 136, 256)
    with pytest.raises(ValueError, match=r"shapes \[40, 3\] and \[2, 2\] match no scaling") as info:
        tlgemm.scaled_mm(a, b, torch.ones(40, 3), torch.ones(2, 2))
    assert "pass scale_b.t()" not in str(info.value)


def test_interleaved_out_strides_are_refused_as_possibly_overlapping():
    """The overlap rule is sufficient, not exact: shape (3, 2) with strides (2, 3) has six
    distinct offsets but no dimension steps past the other's elements; the message says that
    elements may overlap, and why."""
    a, b = _ab(3, 2, 16)
    out = torch.empty(8, dtype=torch.bfloat16).as_strided((3, 2), (2, 3))
    with pytest.raises(ValueError, match=r"out: strides \(2, 3\) may make elements of shape \(3, 2\) overlap "
                                         r"\(ordered by stride, each dimension must step past"):
        tlgemm.matmul(a, b, out=out)


def test_out_sharing_memory_with_an_input_is_named():
    """The kernel writes out while it reads the inputs: an out that shares their memory is an
    error naming the input (torch.mm would return garbage)."""
    buf = torch.randn(8, 24, dtype=torch.bfloat16)
    a, b = buf[:, :16], torch.randn(16, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"out: shares memory with a, which the kernel reads while it writes out"):
        tlgemm.matmul(a, b, out=buf[:, 16:])  # interleaved rows of one buffer count as sharing
    square = torch.randn(8, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"out: shares memory with b"):
        tlgemm.addmm(torch.ones(8), torch.randn(8, 8, dtype=torch.bfloat16), square, out=square)
    x = torch.randn(2, 8, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"out: shares memory with a"):
        tlgemm.bmm(x, torch.randn(2, 8, 8, dtype=torch.bfloat16), out=x)
    a8, b8 = _fp8(8, 4, 16)
    scales = torch.ones(8, 4)
    with pytest.raises(ValueError, match=r"out: shares memory with scale_a"):
        tlgemm.scaled_mm(a8, b8, scales[:, :1], torch.ones(1), out=scales, out_dtype=torch.float32)


@pytest.mark.parametrize("backend", ["tilelang", "triton"])
def test_backend_launchers_reject_an_out_sharing_an_input(backend):
    """The backends' own launchers check it too, on every call (before anything compiles)."""
    import importlib

    launch = importlib.import_module(f"tlgemm.{backend}")
    s = tlgemm.schedules.Schedule(block_m=64, block_n=64)
    square = torch.randn(64, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"out: shares memory with b, which the kernel reads"):
        launch.matmul(torch.randn(64, 64, dtype=torch.bfloat16), square, s, out=square)
    scale = torch.ones(64, 64)
    with pytest.raises(ValueError, match=r"out: shares memory with scale_a"):
        launch.matmul(*_ab(64, 64, 64, dtype=E4M3), s, out=scale, scale_a=scale[:, 0], out_dtype=torch.float32)
    x = torch.randn(2, 64, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"out: shares memory with a"):
        launch.bmm(x, torch.randn(2, 64, 64, dtype=torch.bfloat16), s, out=x)
    a8, b8 = _fp8(64, 128, 128)
    buf = torch.ones(64, 129)  # out [64, 128] float32 and scale_a [64, 1] in one buffer's rows
    with pytest.raises(ValueError, match=r"out: shares memory with scale_a"):
        launch.blockscaled_matmul(a8, b8.t(), buf[:, 128:], torch.ones(1, 1), out=buf[:, :128])


def test_fp8_pairs_may_mix():
    """e4m3 x e5m2 passes the dtype rules (and stops at the device rule on a CPU-only machine)."""
    a, b = _ab(dtype=E4M3)[0], _ab(dtype=E5M2)[1]
    with pytest.raises(ValueError, match=r"a: on cpu"):
        tlgemm.matmul(a, b)


def test_explicit_tilelang_off_hopper_is_an_error():
    a, b = _meta(64, 64), _meta(64, 64)
    with pytest.raises(ValueError, match=r"backend: 'tilelang' cannot run this: sm_80 is not sm_90"):
        tlgemm.explain(a, b, backend="tilelang", gpu="sm80")


def test_explain_rejects_a_batch_with_bias_or_scales():
    """addmm and scaled_mm take matrices: explaining them on 3-D inputs is the calls' error."""
    a, b = _meta(2, 8, 16), _meta(2, 16, 4)
    with pytest.raises(ValueError, match=r"a: expected a 2-D tensor \[M, K\], got shape \[2, 8, 16\]"):
        tlgemm.explain(a, b, bias=_meta(4))
    with pytest.raises(ValueError, match=r"a: expected a 2-D tensor \[M, K\], got shape \[2, 8, 16\]"):
        tlgemm.explain(a.to(E4M3), b.to(E4M3), scale_a=_meta(1, dtype=torch.float32), scale_b=_meta(1, dtype=torch.float32))
    assert tlgemm.explain(a, b).op == "bmm"


def test_tf32_follows_torch_global_precision():
    """torch.backends.fp32_precision (torch's newer TF32 API) switches TF32 as torch.matmul sees
    it; reading the legacy allow_tf32 after it raises in torch, so tlgemm must not."""
    saved = torch.backends.fp32_precision
    try:
        torch.backends.fp32_precision = "tf32"
        a, b = _meta(64, 64, dtype=torch.float32), _meta(64, 64, dtype=torch.float32)
        assert tlgemm.explain(a, b).backend == "tilelang"
    finally:
        torch.backends.fp32_precision = saved


def test_explain_names_the_swapped_kernels_instruction():
    """Under swap-AB the kernel computes Bᵀ·Aᵀ: its A operand is b (dtype and major)."""
    a, b = _meta(1, 4096, dtype=E4M3), _meta(4096, 4096, dtype=E5M2)
    explanation = tlgemm.explain(a, b, gpu="sm90")
    assert explanation.schedule.is_swap_ab
    assert ".f32.e5m2.e4m3" in explanation.instruction


def test_empty_out_may_have_a_zero_stride():
    a, b = torch.randn(64, 0, dtype=torch.bfloat16), torch.randn(0, 0, dtype=torch.bfloat16)
    out = torch.empty(1, 0, dtype=torch.bfloat16).expand(64, 0)
    assert tlgemm.matmul(a, b, out=out) is out


def test_tilelang_needs_tf32_for_float32(monkeypatch):
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    a, b = _meta(64, 64, dtype=torch.float32), _meta(64, 64, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"float32 inputs with TF32 off .*wgmma has no full-precision"):
        tlgemm.explain(a, b, backend="tilelang")
    assert tlgemm.explain(a, b).backend == "triton"


# ---- empty problems: torch's result, no launch, on any device -----------------------------


@pytest.mark.parametrize("M, N, K", [(0, 5, 7), (4, 0, 7), (4, 5, 0), (0, 0, 0)])
def test_empty_matmul(M, N, K):
    a, b = torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)
    out = tlgemm.matmul(a, b)
    assert out.shape == (M, N) and out.dtype == torch.bfloat16 and out.device.type == "cpu"
    assert torch.equal(out, torch.matmul(a, b))


def test_empty_int8_and_fp8_defaults():
    assert tlgemm.matmul(torch.ones(3, 0, dtype=torch.int8), torch.ones(0, 2, dtype=torch.int8)).dtype == torch.int32
    out = tlgemm.matmul(torch.ones(3, 0, dtype=torch.float32).to(E4M3), torch.ones(0, 2).to(E5M2))
    assert out.dtype == torch.bfloat16 and torch.equal(out, torch.zeros(3, 2, dtype=torch.bfloat16))


@pytest.mark.parametrize("bias_shape", [(5,), (1, 5), (4, 1), (4, 5), ()])
def test_empty_k_addmm_is_beta_bias(bias_shape):
    a, b = torch.randn(4, 0), torch.randn(0, 5)
    bias = torch.randn(bias_shape)
    out = tlgemm.addmm(bias, a, b, alpha=3.0, beta=0.5)
    torch.testing.assert_close(out, torch.addmm(bias, a, b, alpha=3.0, beta=0.5))
    nan_bias = torch.full(bias_shape, float("nan"))
    assert torch.equal(tlgemm.addmm(nan_bias, a, b, beta=0), torch.zeros(4, 5))


def test_empty_into_out():
    out = torch.full((4, 5), 7.0)
    assert tlgemm.matmul(torch.randn(4, 0), torch.randn(0, 5), out=out) is out
    assert torch.equal(out, torch.zeros(4, 5))


def test_empty_bmm_and_scaled_mm():
    assert tlgemm.bmm(torch.randn(0, 3, 4), torch.randn(0, 4, 5)).shape == (0, 3, 5)
    assert torch.equal(tlgemm.bmm(torch.randn(2, 3, 0), torch.randn(2, 0, 5)), torch.zeros(2, 3, 5))
    a, b = torch.ones(3, 0).to(E4M3), torch.ones(0, 5).to(E4M3)
    bias = torch.randn(5, dtype=torch.bfloat16)
    out = tlgemm.scaled_mm(a, b, torch.ones(1), torch.ones(1), bias=bias)
    assert out.dtype == torch.bfloat16 and torch.equal(out, bias.expand(3, 5))


def test_empty_still_checks_dtypes():
    with pytest.raises(TypeError, match=r"a: dtype float64"):
        tlgemm.matmul(torch.randn(0, 3, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64))


def test_empty_still_checks_backend_and_schedule():
    a, b = torch.randn(0, 128, dtype=torch.bfloat16), torch.randn(128, 4, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"backend: expected 'auto', 'tilelang' or 'triton', got 'cuBLAS'"):
        tlgemm.matmul(a, b, backend="cuBLAS")
    with pytest.raises(TypeError, match=r"schedule: expected a tlgemm\.schedules\.Schedule or None, got str"):
        tlgemm.bmm(a[None], b[None], schedule="fast")


# ---- an empty problem's schedule: the backend's rules that need no sizes and no GPU -------

#: Not Hopper (Triton runs every call), with fp8 e4m3 (Triton's fp8e4nv needs sm_89)
L40S = api.Target("L40S", "cuda", "sm_89", 142, 101376)
H100 = api.Target("H100 SXM", "cuda", "sm_90", 132, 232448)
OPS = ("matmul", "addmm", "bmm", "scaled_mm", "blockscaled")
#: K = 256: at M = 0, K = 128 the block-wise scale_a [0, 1] would read as a per-row one (scaled_mm)
EMPTY = ((0, 64, 256), (64, 0, 256), (64, 64, 0))


def _call(op, M, N, K, **kwargs):
    """tlgemm's ``op`` on CPU operands [M, K] @ [K, N] (bmm: a batch of 2; blockscaled: scaled_mm
    with block-wise scales)."""
    if op == "bmm":
        return tlgemm.bmm(torch.randn(2, M, K, dtype=torch.bfloat16), torch.randn(2, K, N, dtype=torch.bfloat16),
                          **kwargs)
    if op == "matmul":
        return tlgemm.matmul(*_ab(M, N, K), **kwargs)
    if op == "addmm":
        return tlgemm.addmm(torch.ones(N), *_ab(M, N, K), **kwargs)
    a, b = _fp8(M, N, K)
    if op == "scaled_mm":
        return tlgemm.scaled_mm(a, b, torch.ones(1), torch.ones(1), **kwargs)
    return tlgemm.scaled_mm(a, b, torch.ones(M, K // 128), torch.ones(-(-N // 128), K // 128), **kwargs)


def test_e4m3_needs_sm89_and_e5m2_does_not(monkeypatch):
    """Triton compiles float8_e4m3fn (fp8e4nv) only from compute capability 8.9: on an A100 the
    call is the API's error, not one from inside Triton's compiler; e5m2 runs there."""
    monkeypatch.setattr(api, "_kernel_target", lambda device: api.Target("A100 SXM", "cuda", "sm_80", 108, 166912))
    for M in (64, 0):  # an empty problem raises what the non-empty call raises
        with pytest.raises(ValueError, match=r"^a, b: float8_e4m3fn needs compute capability 8.9 or newer .* sm_80$"):
            tlgemm.scaled_mm(*_fp8(M, 64, 256), torch.ones(1), torch.ones(1))
        with pytest.raises(ValueError, match=r"float8_e4m3fn needs compute capability 8.9"):
            tlgemm.explain(*_fp8(M, 64, 256), gpu="sm80")
    for arch in ("sm_89", "sm_90a", "sm_100", "sm_120"):  # the capability is every digit: 100 is Blackwell, not 10
        api._check_fp8_arch(torch.float8_e4m3fn, torch.float8_e4m3fn, api.Target("GPU", "cuda", arch, 132, 232448))
    assert "backend:     triton" in str(tlgemm.explain(*_ab(64, 64, 256, dtype=torch.float8_e5m2), gpu="sm80"))


def _error(fn) -> str:
    with pytest.raises(ValueError, match=r"^schedule: ") as error:
        fn()
    return str(error.value)


TRITON_REJECTS = {
    "split_k": tlgemm.schedules.Schedule().splitk(2),
    "swap_ab": tlgemm.schedules.Schedule(block_m=64).swap_ab(),
    "cluster": tlgemm.schedules.Schedule().persistent().cluster(2),
    "block_n_48": tlgemm.schedules.Schedule(block_n=48),
    "three_warpgroups": tlgemm.schedules.Schedule(num_warpgroups=3),
}


TRITON_OP_REJECTS = {  # rules of one kernel family: 8-bit block_k, bmm and block-scaled Stream-K, the scale block
    "scaled_mm-block_k_16": tlgemm.schedules.Schedule(block_k=16),
    "bmm-streamk": tlgemm.schedules.Schedule().persistent().streamk(4),
    "blockscaled-streamk": tlgemm.schedules.Schedule(block_k=128).persistent().streamk(4),
    "blockscaled-block_k_64": tlgemm.schedules.Schedule(block_k=64),
}
TRITON_CASES = [(op, case) for op in OPS for case in TRITON_REJECTS]
TRITON_CASES += [(case.split("-")[0], case) for case in TRITON_OP_REJECTS]


@pytest.mark.parametrize("op, case", TRITON_CASES)
@pytest.mark.parametrize("backend", ["triton", "auto"])
def test_empty_problem_raises_the_triton_schedule_error(monkeypatch, backend, op, case):
    """CPU tensors dispatched as on an L40S reach the real Triton launcher, whose schedule rules
    run before its device rule: an empty problem raises what the non-empty call raises."""
    monkeypatch.setattr(api, "_kernel_target", lambda device: L40S)
    schedule = {**TRITON_REJECTS, **TRITON_OP_REJECTS}[case]
    full = _error(lambda: _call(op, 64, 64, 256, backend=backend, schedule=schedule))
    for M, N, K in EMPTY:
        assert _error(lambda: _call(op, M, N, K, backend=backend, schedule=schedule)) == full
    if op == "bmm":
        assert _error(lambda: tlgemm.bmm(torch.randn(0, 64, 256, dtype=torch.bfloat16),
                                         torch.randn(0, 256, 64, dtype=torch.bfloat16), backend=backend,
                                         schedule=schedule)) == full


TILELANG_REJECTS = {
    "split_k": tlgemm.schedules.Schedule().splitk(2),
    "chiplet": tlgemm.schedules.Schedule().chiplet(8),
    "three_warpgroups": tlgemm.schedules.Schedule(num_warpgroups=3),
    "one_stage": tlgemm.schedules.Schedule(num_stages=1),
    "spilling_tile": tlgemm.schedules.Schedule(block_m=128, block_n=256),
    "two_warpgroups_64_rows": tlgemm.schedules.Schedule(block_m=64, block_n=128, num_warpgroups=2),
}
TILELANG_BMM_REJECTS = {
    "streamk": tlgemm.schedules.Schedule().persistent().streamk(4),
    "swap_ab": tlgemm.schedules.Schedule(block_m=64).swap_ab(),
    "cluster": tlgemm.schedules.Schedule().persistent().cluster(2),
    "block_n_48": tlgemm.schedules.Schedule(block_n=48),
}
TILELANG_CASES = [(op, case) for op in ("matmul", "addmm", "bmm", "scaled_mm") for case in TILELANG_REJECTS]
TILELANG_CASES += [("bmm", case) for case in TILELANG_BMM_REJECTS]


@pytest.mark.parametrize("op, case", TILELANG_CASES)
@pytest.mark.parametrize("backend", ["tilelang", "auto"])
def test_empty_problem_raises_the_tilelang_schedule_error(monkeypatch, backend, op, case):
    """The TileLang launcher's rules run on a GPU only; its kernel_source (no GPU) runs them for
    [64, 256] @ [256, 64] as the launcher would (bmm: batched)."""
    from tlgemm.tilelang import kernel_source

    monkeypatch.setattr(api, "_kernel_target", lambda device: H100)
    schedule = {**TILELANG_REJECTS, **TILELANG_BMM_REJECTS}[case]
    dtype, out_dtype = (E4M3, None) if op == "scaled_mm" else (torch.bfloat16, torch.bfloat16)
    full = _error(lambda: kernel_source(64, 64, 256, dtype, dtype, out_dtype, schedule, emit="tir",
                                        batched=op == "bmm"))
    for M, N, K in EMPTY:
        assert _error(lambda: _call(op, M, N, K, backend=backend, schedule=schedule)) == full


TILELANG_BLOCKSCALED_REJECTS = {
    "block_k_64": tlgemm.schedules.Schedule(block_k=64),
    "one_stage": tlgemm.schedules.Schedule(block_k=128, num_stages=1),
    "three_warpgroups": tlgemm.schedules.Schedule(block_k=128, num_warpgroups=3),
    "two_warpgroups_64_rows": tlgemm.schedules.Schedule(block_m=64, block_n=256, block_k=128, num_warpgroups=2),
}


@pytest.mark.parametrize("case", TILELANG_BLOCKSCALED_REJECTS)
@pytest.mark.parametrize("backend", ["tilelang", "auto"])
def test_empty_block_scaled_problem_checks_the_tilelang_block_scaled_rules(monkeypatch, backend, case):
    """The block-scaled spec's rules and its kernel context's (warpgroups, stages, the
    accumulator split), as building the kernel for [64, 256] x [64, 256]ᵀ raises them."""
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import blockscaled_spec

    monkeypatch.setattr(api, "_kernel_target", lambda device: H100)
    schedule = TILELANG_BLOCKSCALED_REJECTS[case]
    full = _error(lambda: blockscaled_gemm(blockscaled_spec(E4M3, E4M3, torch.bfloat16, schedule, 132)))
    for M, N, K in EMPTY:
        assert _error(lambda: _call("blockscaled", M, N, K, backend=backend, schedule=schedule)) == full


@pytest.mark.parametrize("schedule", [None, tlgemm.schedules.Schedule()], ids=["no_schedule", "schedule"])
def test_empty_problem_names_a_backend_that_cannot_run_there(monkeypatch, schedule):
    """backend="tilelang" off Hopper: the empty call raises the non-empty call's backend error,
    with or without a schedule."""
    monkeypatch.setattr(api, "_kernel_target", lambda device: L40S)
    for M, N, K in ((64, 64, 256), *EMPTY):
        with pytest.raises(ValueError, match=r"^backend: 'tilelang' cannot run this: "):
            _call("matmul", M, N, K, backend="tilelang", schedule=schedule)


def test_empty_problem_off_gpu_checks_no_backend_rule_for_auto():
    """CPU tensors without Triton's interpreter run no kernel: "auto" names no backend whose
    rules apply, a named backend's still do."""
    a, b = torch.randn(0, 128, dtype=torch.bfloat16), torch.randn(128, 64, dtype=torch.bfloat16)
    split = tlgemm.schedules.Schedule().splitk(2)
    assert tlgemm.matmul(a, b, schedule=split).shape == (0, 64)
    with pytest.raises(ValueError, match=r"^schedule: split_k > 1 is not implemented by the Triton backend"):
        tlgemm.matmul(a, b, backend="triton", schedule=split)
    with pytest.raises(ValueError, match=r"^schedule: split_k > 1 is not implemented by the TileLang backend"):
        tlgemm.matmul(a, b, backend="tilelang", schedule=split)


@pytest.mark.parametrize("name, value, kind",
                         [("alpha", "2", "str"), ("beta", 1j, "complex"), ("alpha", None, "NoneType")])
def test_addmm_alpha_beta_are_real_numbers(name, value, kind):
    a, b = _ab()
    with pytest.raises(TypeError, match=rf"^{name}: expected a real number \(int, float, bool\), got {kind}$"):
        tlgemm.addmm(torch.ones(12), a, b, **{name: value})


def test_addmm_type_names_are_qualified():
    """numpy's bool_ is no numbers.Real; its type name "bool" read as if a Python bool, which is
    accepted, had been refused."""
    np = pytest.importorskip("numpy")
    a, b = _ab()
    with pytest.raises(TypeError, match=r"^alpha: expected a real number \(int, float, bool\), got numpy\.bool"):
        tlgemm.addmm(torch.ones(12), a, b, alpha=np.bool_(True))


def test_explain_of_an_empty_problem_checks_what_the_call_checks():
    """explain returned backend 'none' for an empty problem whatever backend, schedule or
    target it was given; the call itself refuses them."""
    a, b = _meta(0, 8), _meta(8, 16)
    for kwargs, error, message in (
            (dict(backend="foo"), ValueError, r"^backend: expected 'auto', 'tilelang' or 'triton', got 'foo'$"),
            (dict(schedule="128x128x64"), TypeError, r"^schedule: expected a tlgemm\.schedules\.Schedule or None"),
            (dict(backend="tilelang", gpu="sm80"), ValueError, r"^backend: 'tilelang' cannot run this: sm_80 is not"),
            (dict(gpu="sm80", a=_meta(0, 8, dtype=E4M3), b=_meta(8, 16, dtype=E4M3)), ValueError,
             r"^a, b: float8_e4m3fn needs compute capability 8\.9")):
        kwargs = dict(kwargs)
        with pytest.raises(error, match=message):
            tlgemm.explain(kwargs.pop("a", a), kwargs.pop("b", b), **kwargs)
    assert tlgemm.explain(a, b).backend == "none"


def test_explain_names_an_unhashable_gpu():
    with pytest.raises(ValueError, match=r"^gpu: expected one of \['gfx942', 'sm80', 'sm90'\], .* got \['sm90'\]$"):
        tlgemm.explain(_meta(4, 8), _meta(8, 16), gpu=["sm90"])


@pytest.mark.parametrize("device, message", [
    ("meta", r"^device: meta; autotune times tlgemm's kernels on a CUDA \(or ROCm\) GPU"),
    ("cpu", r"^device: cpu; autotune times"),
    ("gpu", r"^device: expected a torch\.device, a device string such as 'cuda:0' or a CUDA device index, got 'gpu'$"),
    (3.5, r"^device: expected a torch\.device, .* got 3\.5$"),
    pytest.param("cuda:0", r"^device: cuda:0, but torch\.cuda\.is_available\(\) is False here$",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")),
    pytest.param(0, r"^device: cuda:0, but torch\.cuda\.is_available\(\) is False here$",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")),
])
def test_autotune_names_its_device(device, message):
    """autotune blamed an argument 'a' it does not have (or raised torch's parse error) for a
    device no kernel runs on."""
    with pytest.raises(ValueError, match=message):
        tlgemm.autotune([(64, 64, 64)], device=device, progress=False)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("requires_grad", [False, True])
def test_nested_tensors_are_named(requires_grad):
    """A nested tensor reports the strided layout: it passed the layout check and failed in
    torch ("NestedTensorImpl doesn't support sizes"), or in the dispatcher under autograd."""
    nested = torch.nested.nested_tensor([torch.randn(4, 8)] * 2, requires_grad=requires_grad)
    message = r"^{}: expected a dense \(strided\) tensor, got a nested tensor"
    with pytest.raises(TypeError, match=message.format("a")):
        tlgemm.bmm(nested, torch.randn(2, 8, 6))
    with pytest.raises(TypeError, match=message.format("b")):
        tlgemm.bmm(torch.randn(2, 6, 4), nested)
    with pytest.raises(TypeError, match=message.format("b")):
        tlgemm.addmm(torch.randn(4), torch.randn(3, 4), nested)


def test_explain_checks_scaled_mm_bias():
    """explain described a scaled_mm with a bias the call refuses ([1, N], [M, N], a str)."""
    a, b = torch.empty(8, 256, dtype=torch.float8_e4m3fn), torch.empty(256, 64, dtype=torch.float8_e4m3fn)
    one = torch.ones(1)
    for bias, error, message in ((torch.ones(1, 64), ValueError, r"^bias: scaled_mm takes a 1-D \[N\] = \[64\] bias"),
                                 (torch.ones(8, 64), ValueError, r"^bias: scaled_mm takes a 1-D"),
                                 ("bias", TypeError, r"^bias: expected a torch\.Tensor, got str")):
        with pytest.raises(error, match=message):
            tlgemm.explain(a, b, scale_a=one, scale_b=one, bias=bias)


# ---- the Triton copy rule -----------------------------------------------------------------


@pytest.mark.parametrize("make, copied, major", [
    (lambda: torch.randn(8, 16), False, "row"),
    (lambda: torch.randn(16, 8).t(), False, "col"),
    (lambda: torch.randn(8, 32)[:, :16], False, "row"),
    (lambda: torch.randn(8, 32)[:, ::2], True, "row"),
    (lambda: torch.randn(1, 16), False, "row"),
    (lambda: torch.randn(8, 1).expand(8, 16), True, "row"),
    (lambda: torch.randn(1, 8, 16).expand(4, 8, 16), False, "row"),
    (lambda: torch.empty(2**16, 2**16, device="meta")[:, :2], True, "row"),
])
def test_copy_rule(make, copied, major):
    why, order = api._layout(make())
    assert (why is not None) == copied and order == major
