"""Host launchers reject bad input with an error naming the argument and the rule.

Most cases use the interpreter copies (which accept CPU tensors) so that only the rule under
test is broken; "meta" tensors stand in for a second device and for huge extents (where the
rule is checked before the device), expanded CPU tensors for huge problems."""

import pytest
import torch

import tlgemm.triton as compiled
from tlgemm.schedules import Schedule

S = Schedule(block_m=16, block_n=16, block_k=32).persistent(2)


def _ab(M=8, N=12, K=16, dtype=torch.float32):
    return torch.randn(M, K).to(dtype), torch.randn(K, N).to(dtype)


CASES = {
    "a_not_tensor": (lambda: ([[1.0]], _ab()[1]), {}, TypeError, r"a: expected a torch\.Tensor"),
    "a_3d": (lambda: (torch.randn(2, 8, 16), _ab()[1]), {}, ValueError, r"a: expected a 2-D tensor"),
    "a_float64": (lambda: _ab(dtype=torch.float64), {}, TypeError, r"a: dtype must be one of"),
    "dtype_pair": (lambda: (_ab()[0].half(), _ab()[1].bfloat16()), {}, TypeError, r"a, b: dtypes must match"),
    "int8_with_fp8": (lambda: (_ab()[0].to(torch.int8), _ab()[1].to(torch.float8_e4m3fn)), {}, TypeError,
                      r"a, b: dtypes must match"),
    "inner_dims": (lambda: (torch.randn(8, 16), torch.randn(15, 12)), {}, ValueError,
                   r"a, b: inner dimensions differ: a is \(8, 16\), b is \(15, 12\)"),
    "schedule_type": (_ab, {"schedule": {"block_m": 16}}, TypeError, r"schedule: expected a tlgemm\.schedules\.Schedule"),
    "split_k": (_ab, {"schedule": Schedule(split_k=2)}, ValueError, r"schedule: split_k > 1 is not implemented"),
    "swap_ab": (_ab, {"schedule": Schedule(is_swap_ab=True)}, ValueError, r"schedule: is_swap_ab is not implemented"),
    "cluster": (_ab, {"schedule": Schedule(cluster_m=2, is_persistent=True)}, ValueError,
                r"schedule: cluster_m=2 \(TMA multicast within a thread-block cluster\) is a TileLang-backend"),
    "block_n_not_pow2": (_ab, {"schedule": Schedule(block_n=48)}, ValueError,
                         r"schedule: block_n=48 is not a power of two, which tl\.arange needs"),
    "block_k_8bit": (lambda: _ab(dtype=torch.int8), {"schedule": Schedule(block_k=16)}, ValueError,
                     r"schedule: block_k must be >= 32 for 8-bit inputs, got 16"),
    "allow_tf32_type": (_ab, {"allow_tf32": 1}, TypeError, r"allow_tf32: expected a bool"),
    "b_device": (lambda: (_ab()[0], torch.empty(16, 12, device="meta")), {}, ValueError,
                 r"b: on meta, but a is on cpu"),
    "span_int32": (lambda: (torch.empty(2**16, 2**15 + 1, device="meta"), torch.empty(2**15 + 1, 4, device="meta")),
                   {}, ValueError, r"a: spans \d+ elements; the Triton kernels index in int32"),
    "result_int32": (lambda: (torch.empty(46341, 64, device="meta"), torch.empty(64, 46341, device="meta")), {},
                     ValueError, r"^out: the result \(46341, 46341\) would hold 2147488281 elements; the Triton kernels "
                                 r"index in int32"),
    "out_shape": (_ab, {"out": torch.empty(8, 11)}, ValueError, r"out: expected shape \(8, 12\), got \(8, 11\)"),
    "out_overlap": (_ab, {"out": torch.empty(8, 1).expand(8, 12)}, ValueError, r"out: strides \(1, 0\) may make elements"),
    "out_dtype_conflict": (_ab, {"out": torch.empty(8, 12), "out_dtype": torch.float16}, ValueError,
                           r"out: dtype torch\.float32 differs from out_dtype=torch\.float16"),
    "out_dtype_int32_for_float": (_ab, {"out_dtype": torch.int32}, TypeError, r"out_dtype: for torch\.float32 inputs"),
    "out_int32_for_float": (_ab, {"out": torch.empty(8, 12, dtype=torch.int32)}, TypeError,
                            r"^out: for torch\.float32 inputs must be one of"),
    "int32_out_tensor_with_bias": (lambda: _ab(dtype=torch.int8),
                                   {"out": torch.empty(8, 12, dtype=torch.int32), "bias": torch.ones(12),
                                    "schedule": Schedule().persistent(2)},
                                   ValueError, r"^out: int32 output takes no scale_a/scale_b/bias; choose a float "
                                               r"out dtype$"),
    "int32_out_with_scale": (lambda: _ab(dtype=torch.int8), {"scale_a": torch.ones(1), "schedule": Schedule().persistent(2)},
                             ValueError, r"out_dtype: int32 output takes no scale_a/scale_b/bias"),
    "scale_dtype": (_ab, {"scale_a": torch.ones(8, dtype=torch.float16)}, TypeError, r"scale_a: dtype must be one of"),
    "scale_a_length": (_ab, {"scale_a": torch.ones(12)}, ValueError, r"scale_a: expected one element, \[8\] or \[8, 1\], got shape \[12\]"),
    "scale_a_row": (_ab, {"scale_a": torch.ones(1, 8)}, ValueError, r"scale_a: expected .* got shape \[1, 8\]"),
    "scale_b_length": (_ab, {"scale_b": torch.ones(8)}, ValueError, r"scale_b: expected one element, \[12\] or \[1, 12\], got shape \[8\]"),
    "scale_b_column": (_ab, {"scale_b": torch.ones(12, 1)}, ValueError, r"scale_b: expected .* got shape \[12, 1\]"),
    "scale_not_tensor": (_ab, {"scale_b": 2.0}, TypeError, r"scale_b: expected a torch\.Tensor"),
    "bias_dtype": (_ab, {"bias": torch.ones(12, dtype=torch.int32)}, TypeError, r"bias: dtype must be one of"),
    "bias_length": (_ab, {"bias": torch.ones(8)}, ValueError, r"bias: expected \[12\] or \[1, 12\], got shape \[8\]"),
    "bias_column": (_ab, {"bias": torch.ones(12, 1)}, ValueError, r"bias: expected \[12\] or \[1, 12\], got shape \[12, 1\]"),
    "bias_device": (_ab, {"bias": torch.ones(12, device="meta")}, ValueError, r"bias: on meta, but a is on cpu"),
    "num_sms_missing": (_ab, {"schedule": Schedule().persistent()}, ValueError, r"needs the device's SM count"),
    "num_sms_negative": (_ab, {"schedule": Schedule(block_m=16, block_n=16, block_k=32), "num_sms": -5}, ValueError,
                         r"^num_sms: expected None or an int in 1\.\.2\*\*31 - 1 \(the kernels take it as an int32\), "
                         r"got -5$"),
    "num_sms_str": (_ab, {"num_sms": "132"}, TypeError, r"^num_sms: expected None or an int .* got '132'$"),
    "a_sparse": (lambda: (torch.eye(8, 16).to_sparse(), _ab()[1]), {}, TypeError,
                 r"^a: expected a dense \(strided\) tensor, got layout torch\.sparse_coo; pass t\.to_dense\(\)$"),
    "b_sparse_csr": (lambda: (_ab()[0], torch.eye(16, 12).to_sparse_csr()), {}, TypeError,
                     r"^b: expected a dense \(strided\) tensor, got layout torch\.sparse_csr"),
    "out_sparse": (_ab, {"out": torch.zeros(8, 12).to_sparse()}, TypeError, r"^out: expected a dense \(strided\)"),
    "bias_sparse": (_ab, {"bias": torch.ones(12).to_sparse()}, TypeError, r"^bias: expected a dense \(strided\)"),
    "all_on_meta": (lambda: (torch.empty(8, 16, device="meta"), torch.empty(16, 12, device="meta")), {}, ValueError,
                    r"^a: on meta; the Triton kernels need CUDA tensors \(CPU only under TRITON_INTERPRET=1\)$"),
    "out_dtype_str": (_ab, {"out": torch.empty(8, 12), "out_dtype": "float32"}, TypeError,
                      r"^out_dtype: expected a torch\.dtype, got str$"),
    "warpgroups_not_pow2": (_ab, {"schedule": Schedule(num_warpgroups=3)}, ValueError,
                            r"schedule: num_warpgroups=3 is not a power of two"),
    "group_int32": (lambda: (torch.randn(100, 32), torch.randn(32, 70)),
                    {"schedule": Schedule(block_m=32, block_n=16, block_k=32, group_size_m=2**30, raster="n").persistent(3)},
                    ValueError, r"schedule: group_size_m=1073741824 tile columns of 4 tiles each exceed the kernels' "
                                r"int32 tile arithmetic; here 5 tile columns or more make one group"),
    "streamk_int32": (lambda: (torch.zeros(1, 1).expand(32768, 8192), torch.zeros(1, 1).expand(8192, 32768)),
                      {"schedule": Schedule(block_m=16, block_n=16, block_k=16).streamk(10**6).persistent(132)},
                      ValueError, r"schedule: Stream-K numbers the K-iterations of all 4194304 tiles \(512 each\) in int32"),
    "streamk_workspace_int32": (lambda: (torch.randn(300, 64), torch.randn(64, 300)),
                                {"schedule": Schedule(block_m=256, block_n=256, block_k=32).streamk(1)
                                 .persistent(16384)},
                                ValueError, r"^schedule: Stream-K on 16384 programs needs a workspace of 2147483648 "
                                            r"elements \(2 partial 256x256 tile\(s\) per program\), 2\*\*31 or more"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_named(interp, case):
    make, kwargs, error, message = CASES[case]
    a, b = make()
    kwargs = dict(kwargs)
    schedule = kwargs.pop("schedule", S)
    with pytest.raises(error, match=message):
        interp.triton.matmul(a, b, schedule, **kwargs)


def test_compiled_launchers_need_cuda_tensors():
    a, b = _ab()
    with pytest.raises(ValueError, match=r"a: on cpu; the Triton kernels need CUDA tensors"):
        compiled.matmul(a, b, S)


def test_kernel_choice_follows_streamk_tiles(interp):
    a, b = _ab()
    with pytest.raises(ValueError, match=r"schedule: streamk_tiles > 0 needs streamk_matmul"):
        interp.triton.persistent_matmul(a, b, S.streamk(2))
    with pytest.raises(ValueError, match=r"schedule: streamk_matmul needs streamk_tiles > 0"):
        interp.triton.streamk_matmul(a, b, S)


def test_empty_output_launches_nothing(interp):
    a, b = torch.randn(0, 16), torch.randn(16, 12)
    out = interp.triton.matmul(a, b, S)
    assert out.shape == (0, 12) and out.dtype == torch.float32


def test_default_output_dtypes(interp):
    a, b = _ab(dtype=torch.int8)
    s = Schedule(block_m=16, block_n=16, block_k=32).persistent(2)
    assert interp.triton.matmul(a, b, s).dtype == torch.int32
    a, b = _ab(dtype=torch.float8_e5m2)
    assert interp.triton.matmul(a, b, s, scale_a=torch.ones(1)).dtype == torch.bfloat16


def test_schedule_trace_rejects_unsupported_schedules(interp):
    with pytest.raises(ValueError, match=r"schedule: split_k and is_swap_ab are not implemented"):
        interp.triton.schedule_trace(8, 8, 8, Schedule(split_k=2), device="cpu")
    with pytest.raises(TypeError, match=r"schedule: expected a tlgemm\.schedules\.Schedule"):
        interp.triton.schedule_trace(8, 8, 8, "persistent", device="cpu")


def test_validated_plan_is_reused_per_signature(interp):
    """A repeated call with the same signature reuses its plan on the new tensors (fresh
    results); another stride, scale or bias makes a new plan; a bad call still raises."""
    plans = interp.triton.launch._PLANS
    plans.clear()
    for _ in range(2):
        a, b = _ab()
        torch.testing.assert_close(interp.triton.matmul(a, b, S), a @ b)
    assert len(plans) == 1
    a, b = _ab()
    wide = torch.randn(8, 32)[:, :16]
    torch.testing.assert_close(interp.triton.matmul(wide, b, S), wide @ b)
    scale, bias = torch.rand(8) + 0.5, torch.randn(12)
    torch.testing.assert_close(interp.triton.matmul(a, b, S, scale_a=scale, bias=bias), scale[:, None] * (a @ b) + bias)
    assert len(plans) == 3
    with pytest.raises(ValueError, match=r"bias: expected \[12\] or \[1, 12\], got shape \[8\]"):
        interp.triton.matmul(a, b, S, bias=torch.ones(8))


def test_schedule_rules_come_before_the_tensor_rules_they_always_preceded():
    """The launchers' order of checks: bmm's Stream-K rule before the tensors', the schedule's
    type and backend rules before allow_tf32 and the dtypes (8-bit block_k after them)."""
    a, b = torch.randn(2, 8, 16), torch.randn(3, 16, 8)
    with pytest.raises(ValueError, match="streamk_tiles > 0 is not implemented for bmm"):
        compiled.bmm(a, b, Schedule().persistent().streamk(4))
    x, y = _ab(dtype=torch.float64)
    with pytest.raises(TypeError, match="^schedule: expected a tlgemm.schedules.Schedule"):
        compiled.matmul(x, y, None)
    with pytest.raises(ValueError, match="^schedule: split_k > 1 is not implemented"):
        compiled.matmul(*_ab(), Schedule().splitk(2), allow_tf32=1)


def test_out_overlapping_an_input_through_another_storage_is_refused(interp):
    """Two storage objects may view one buffer (torch.from_numpy of overlapping arrays): the
    overlap check compared storages, so out overwrote rows of a while the kernel read them."""
    np = pytest.importorskip("numpy")
    buffer = np.random.default_rng(0).standard_normal(8 * 16 + 8 * 12).astype(np.float32)
    a = torch.from_numpy(buffer[:8 * 16].reshape(8, 16))
    out = torch.from_numpy(buffer[8 * 4:8 * 4 + 8 * 12].reshape(8, 12))
    assert a.untyped_storage().data_ptr() != out.untyped_storage().data_ptr()
    with pytest.raises(ValueError, match=r"^out: shares memory with a, which the kernel reads while it writes out"):
        interp.triton.matmul(a, torch.randn(16, 12), S, out=out)
