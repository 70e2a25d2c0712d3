"""Dispatch on a fake sm_90 GPU (tests/api/conftest.py): backend choice, plan caching, the
autotune cache, fallbacks, the copy rule and the routing of addmm's bias and scaled_mm's scales
to the kernels, checked against torch in float64."""

import pytest
import torch

import tlgemm
from tlgemm import api
from tlgemm._checks import span_bytes
from tlgemm.schedules import AutotuneCache, Schedule
from tlgemm.testing import assert_gemm_close, poisoned, random_operand, reference_gemm

E4M3 = torch.float8_e4m3fn


def _ab(M, N, K, dtype=torch.bfloat16, generator=None, b_cols=False):
    a = random_operand((M, K), dtype, generator=generator)
    b = random_operand((N, K), dtype, generator=generator).t() if b_cols else random_operand((K, N), dtype,
                                                                                             generator=generator)
    return a, b


def test_explain_names_only_the_copies_the_tilelang_launch_makes(fake_gpu, generator):
    """explain said "rows of K=256 or N=136 elements are not 16-byte aligned ... (copies)" for an fp8
    GEMM with a K-major weight, which TileLang reads as it is (K rows of 256 bytes, C rows of 272)."""
    a, b = _ab(64, 136, 256, E4M3, generator=generator, b_cols=True)
    assert "aligned" not in tlgemm.explain(a, b).reasons[0]
    a, b = _ab(64, 36, 64, generator=generator)
    reasons = tlgemm.explain(a, b).reasons
    assert "pads K" not in reasons[0] and reasons[0].endswith(
        "rows not 16-byte aligned, which TMA needs: N=36 (72-byte rows of the output): C goes through a padded "
        "temporary")
    assert any(r.startswith("b [64, 36] strides [36, 1]: copied to K-major by the TileLang launcher") for r in reasons)


def test_auto_takes_tilelang_on_hopper_and_triton_elsewhere(fake_gpu, generator):
    a, b = _ab(64, 64, 64, generator=generator)
    tlgemm.matmul(a, b)
    assert [c[0] for c in fake_gpu.tilelang.calls] == ["matmul"] and not fake_gpu.triton.calls
    api._forget_plans()
    fake_gpu.target = api.Target("Fake A100", "cuda", "sm_80", 108, 166912)
    tlgemm.matmul(a, b)
    assert len(fake_gpu.triton.calls) == 1
    api._forget_plans()
    fake_gpu.target = api.Target("Fake MI300X", "hip", "gfx942", 304, 65536)
    tlgemm.matmul(a, b)
    assert len(fake_gpu.triton.calls) == 2


def test_auto_keeps_tilelang_for_unaligned_rows_and_avoids_missing_kernels(fake_gpu, generator):
    a, b = _ab(64, 64, 60, generator=generator)  # K rows of 120 bytes: not 16-byte aligned
    tlgemm.matmul(a, b)
    assert len(fake_gpu.tilelang.calls) == 1 and not fake_gpu.triton.calls
    reason = tlgemm.explain(a, b).reasons[0]
    assert "Hopper" in reason and "not 16-byte aligned" in reason and "pads K" in reason
    x, y = torch.randn(2, 16, 32, dtype=torch.bfloat16), torch.randn(2, 32, 16, dtype=torch.bfloat16)
    tlgemm.bmm(x, y)
    assert fake_gpu.tilelang.calls[-1][0] == "bmm"
    tlgemm.bmm(x[..., :30], y[:, :30])  # K rows of 60 bytes
    assert fake_gpu.tilelang.calls[-1][0] == "bmm" and not fake_gpu.triton.calls
    del fake_gpu.tilelang.module.bmm
    api._forget_plans()
    with pytest.raises(ValueError, match=r"'tilelang' cannot run this: tlgemm\.tilelang has no bmm kernel"):
        tlgemm.bmm(x, y, backend="tilelang")


def test_plans_are_kept_per_operand_layout(fake_gpu, generator):
    """A plan is cached per operand layout (``api._plan_key``): a schedule that ran with B
    K-major (b = w.t()) may be one a kernel rejects with B MN-major (on TileLang a block_n that
    is no power of two), so a call with the other layout selects its own."""
    a, b = _ab(100, 256, 128, generator=generator, b_cols=True)
    tlgemm.matmul(a, b)
    assert fake_gpu.selects == 1
    tlgemm.matmul(a, b.contiguous())
    assert fake_gpu.selects == 2
    tlgemm.addmm(torch.zeros(256, dtype=torch.bfloat16), a, b)
    tlgemm.addmm(torch.zeros(256, dtype=torch.bfloat16), a, b.contiguous())
    assert fake_gpu.selects == 4
    tlgemm.matmul(a, b)
    tlgemm.matmul(a, b.contiguous())
    assert fake_gpu.selects == 4


def test_repeat_calls_reuse_the_plan(fake_gpu, generator):
    a, b = _ab(100, 256, 128, generator=generator)
    tlgemm.matmul(a, b)
    assert fake_gpu.selects == 1
    tlgemm.matmul(a, b)
    tlgemm.matmul(a[:70], b)  # same M bucket (128)
    assert fake_gpu.selects == 1
    schedules = {c[3] for c in fake_gpu.tilelang.calls}
    assert len(schedules) == 1
    tlgemm.matmul(a[:20], b)  # M bucket 32
    tlgemm.matmul(a.half(), b.half())
    assert fake_gpu.selects == 3


def test_selected_schedule_runs_on_the_backend(fake_gpu, generator):
    a, b = _ab(64, 4096, 4096, b_cols=True, generator=generator)
    tlgemm.matmul(a, b)
    s = fake_gpu.tilelang.calls[0][3]
    assert s.split_k == 1 and not s.is_swap_ab and s.is_persistent and s.num_sms == 132
    assert s == tlgemm.explain(a, b).schedule


def test_rejected_schedule_falls_back_to_the_next_candidate(fake_gpu, generator):
    a, b = _ab(512, 512, 512, generator=generator)
    first = tlgemm.explain(a, b).schedule
    fake_gpu.tilelang.reject.add(first)
    out = tlgemm.matmul(a, b)
    ran = fake_gpu.tilelang.calls[-1][3]
    assert ran != first
    assert_gemm_close(out, a.double() @ b.double(), torch.bfloat16)
    tlgemm.matmul(a, b)
    assert fake_gpu.tilelang.calls[-1][3] == ran and fake_gpu.selects == 2  # explain + the first call
    assert "an earlier call in this process runs" in str(tlgemm.explain(a, b, gpu=fake_gpu.target))


def test_rejected_caller_schedule_is_an_error(fake_gpu, generator):
    a, b = _ab(64, 64, 64, generator=generator)
    s = Schedule(block_m=64, block_n=64).persistent(132)
    fake_gpu.tilelang.reject.add(s)
    with pytest.raises(ValueError, match=r"schedule: .* needs more shared memory"):
        tlgemm.matmul(a, b, schedule=s)
    fake_gpu.tilelang.reject.clear()
    tlgemm.matmul(a, b, schedule=s)
    assert fake_gpu.tilelang.calls[-1][3] == s and fake_gpu.selects == 0


def test_autotune_cache_entry_is_used(fake_gpu, generator):
    """The entry of the call's layout (a row-major, b row-major: "nn") is used, not another's."""
    tuned = Schedule(block_m=64, block_n=128, num_stages=4).persistent(132)
    other = Schedule(block_m=128, block_n=64, num_stages=4).persistent(132)
    dtypes = ("bfloat16", "bfloat16", "bfloat16")
    AutotuneCache().put("Fake H100", "tilelang", dtypes, 128, 256, 512, other, layout="nt")
    AutotuneCache().put("Fake H100", "tilelang", dtypes, 128, 256, 512, tuned, layout="nn")
    a, b = _ab(100, 256, 512, generator=generator)
    tlgemm.matmul(a, b)
    assert fake_gpu.tilelang.calls[-1][3] == tuned and fake_gpu.selects == 0
    tlgemm.matmul(a, b.t().contiguous().t())
    assert fake_gpu.tilelang.calls[-1][3] == other and fake_gpu.selects == 0
    assert "autotune cache entry for Fake H100" in str(tlgemm.explain(a, b, gpu=api.Target(
        "Fake H100", "cuda", "sm_90", 132, 232448)))


def test_autotune_cache_entry_the_backend_rejects_falls_back_to_select(fake_gpu, generator):
    """An autotune cache entry the backend rejects for this call ("schedule: ...", e.g. shared
    memory of a GPU with less of it under the same name) is followed by select()'s candidates,
    computed only then; the plan keeps the one that ran."""
    tuned = Schedule(block_m=128, block_n=128, num_stages=4, num_warpgroups=2).persistent(132)
    AutotuneCache().put("Fake H100", "tilelang", ("bfloat16", "bfloat16", "bfloat16"), 128, 256, 512, tuned,
                        layout="nn")
    fake_gpu.tilelang.reject.add(tuned)
    a, b = _ab(100, 256, 512, generator=generator)
    out = tlgemm.matmul(a, b)
    ran = fake_gpu.tilelang.calls[-1][3]
    assert ran != tuned and fake_gpu.selects == 1 and len(fake_gpu.tilelang.calls) == 1
    assert_gemm_close(out, reference_gemm(a.double(), b.double()), torch.bfloat16)
    tlgemm.matmul(a, b)
    assert fake_gpu.tilelang.calls[-1][3] == ran and fake_gpu.selects == 1


@pytest.mark.parametrize("make, copied", [
    (lambda: torch.randn(64, 32, dtype=torch.float16), False),
    (lambda: torch.randn(32, 64, dtype=torch.float16).t(), False),
    (lambda: torch.randn(64, 96, dtype=torch.float16)[:, 8:40], False),
    (lambda: torch.randn(64, 64, dtype=torch.float16)[:, ::2], True),
])
def test_triton_copy_rule(fake_gpu, make, copied):
    fake_gpu.target = api.Target("Fake A100", "cuda", "sm_80", 108, 166912)
    a, b = make(), torch.randn(32, 48, dtype=torch.float16)
    out = tlgemm.matmul(a, b)
    seen = fake_gpu.triton.calls[-1][1]
    assert (seen.data_ptr() != a.data_ptr()) == copied
    assert seen.stride(0) == 1 or seen.stride(1) == 1
    assert_gemm_close(out, a.double() @ b.double(), torch.float16)


def test_tilelang_gets_operands_as_they_are(fake_gpu):
    a = torch.randn(64, 64, dtype=torch.float16)[:, ::2]
    b = torch.randn(32, 64, dtype=torch.float16)
    tlgemm.matmul(a, b)
    assert fake_gpu.tilelang.calls[-1][1] is a  # its launcher applies its own copy rule


def test_expanded_batch_is_not_copied_by_triton(fake_gpu, generator):
    """The Triton backend reads a stride-0 batch as it is (TileLang's launcher copies it: its
    3-D TMA box needs a dense batch)."""
    a = torch.randn(1, 32, 64, dtype=torch.bfloat16).expand(4, 32, 64)
    b = torch.randn(4, 64, 16, dtype=torch.bfloat16)
    out = tlgemm.bmm(a, b, backend="triton")
    assert fake_gpu.triton.calls[-1][1].stride(0) == 0
    assert_gemm_close(out, a.double() @ b.double(), torch.bfloat16)


BIASES = {
    "vector": (lambda M, N: torch.randn(N), "kernel"),
    "row_vector": (lambda M, N: torch.randn(1, N, dtype=torch.bfloat16), "kernel"),
    "scalar": (lambda M, N: torch.randn(()), "kernel"),
    "one_element": (lambda M, N: torch.randn(1, 1), "kernel"),
    "full": (lambda M, N: torch.randn(M, N), "after"),
    "per_row": (lambda M, N: torch.randn(M, 1), "after"),
}


@pytest.mark.parametrize("alpha, beta", [(1, 1), (0.5, 2.0), (2, 0)])
@pytest.mark.parametrize("kind", BIASES)
def test_addmm_routes_bias(fake_gpu, generator, kind, alpha, beta):
    M, N, K = 48, 40, 64
    a, b = _ab(M, N, K, dtype=torch.float32, generator=generator)
    make, where = BIASES[kind]
    bias = make(M, N)
    out = tlgemm.addmm(bias, a, b, alpha=alpha, beta=beta)
    expected = torch.addmm(bias.double(), a.double(), b.double(), alpha=alpha, beta=beta)
    assert out.dtype == torch.float32 and out.shape == (M, N)
    assert_gemm_close(out, expected, torch.float32)
    kwargs = fake_gpu.triton.calls[-1][4]  # float32 with TF32 off: Triton
    assert (kwargs["bias"] is not None) == (where == "kernel" and beta != 0)
    assert (kwargs["scale_a"] is not None) == (alpha != 1)


def test_addmm_into_its_own_bias(fake_gpu, generator):
    """torch.addmm(c, a, b, out=c): the bias is read as it was before the kernel wrote out. (A
    bias that is a row of out is read by the real kernels' epilogue while they write out:
    test_api_gpu.py; the fake kernel here reads all of its inputs first.)"""
    M, N, K = 48, 40, 64
    a, b = _ab(M, N, K, dtype=torch.float32, generator=generator)
    out = torch.randn(M, N, generator=generator)
    bias = out
    expected = torch.addmm(bias.double(), a.double(), b.double(), alpha=0.5, beta=2.0)
    result = tlgemm.addmm(bias, a, b, alpha=0.5, beta=2.0, out=out)
    assert result is out
    assert_gemm_close(out, expected, torch.float32)


@pytest.mark.parametrize("bias_shape", [(4, 8), (4, 1)])
@pytest.mark.parametrize("given_out", [False, True])
def test_addmm_adds_a_full_bias_in_float32(fake_gpu, bias_shape, given_out):
    """A bias added after the kernel ([M, N], [M, 1]) to a float16 output is added to a float32
    product and the sum rounded once, as torch.addmm: the product -80000 rounded to float16
    first was -inf, though the result -40000 fits."""
    a = torch.ones(4, 16, dtype=torch.float16)
    b = torch.full((16, 8), -5000.0, dtype=torch.float16)
    bias = torch.full(bias_shape, 40000.0, dtype=torch.float16)
    out = poisoned((4, 8), torch.float16, "cpu") if given_out else None
    result = tlgemm.addmm(bias, a, b, alpha=1.0, beta=1.0, out=out)
    assert result.dtype == torch.float16 and (result is out or not given_out)
    assert torch.equal(result, torch.addmm(bias, a, b))
    assert torch.equal(result, torch.full((4, 8), -40000.0, dtype=torch.float16))


def test_autocast_casts_as_torch_does(fake_gpu):
    """Under autocast, matmul, bmm and addmm cast float inputs to its dtype as torch.mm, bmm and
    addmm do (float32 inputs gave a float32 result, and a bfloat16 activation times a float32
    weight was refused); with out given nothing is cast, as torch's out= variants."""
    a, w, bias = torch.randn(8, 32), torch.randn(16, 32), torch.randn(16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for result, expected in ((tlgemm.matmul(a, w.t()), torch.mm(a, w.t())),
                                 (tlgemm.matmul(a.bfloat16(), w.t()), torch.mm(a.bfloat16(), w.t())),
                                 (tlgemm.bmm(a[None], w.t()[None]), torch.bmm(a[None], w.t()[None])),
                                 (tlgemm.addmm(bias, a, w.t()), torch.addmm(bias, a, w.t()))):
            assert result.dtype == expected.dtype == torch.bfloat16
            assert_gemm_close(result, expected.double(), torch.bfloat16)
        out = torch.empty(8, 16)
        assert tlgemm.matmul(a, w.t(), out=out) is out
        assert fake_gpu.triton.calls[-1][1].dtype == torch.float32
        assert tlgemm.explain(a, w.t()).problem.endswith("bfloat16 @ bfloat16 -> bfloat16")
    assert tlgemm.matmul(a, w.t()).dtype == torch.float32


def test_addmm_takes_bool_and_fraction_coefficients(fake_gpu):
    """torch.addmm takes beta=True; tlgemm passed the bool (or a Fraction) on to torch's
    add(alpha=...), which refuses a bool for a float result, wherever the bias is added after
    the kernel ([M, N], [M, 1], K = 0)."""
    from fractions import Fraction

    a, b = torch.randn(4, 16), torch.randn(16, 8)
    for bias in (torch.randn(4, 8), torch.randn(4, 1), torch.randn(8)):
        for alpha, beta in ((True, True), (Fraction(1, 2), Fraction(3, 2)), (1, False)):
            expected = torch.addmm(bias.double(), a.double(), b.double(), alpha=float(alpha), beta=float(beta))
            assert_gemm_close(tlgemm.addmm(bias, a, b, alpha=alpha, beta=beta), expected, torch.float32)
    empty_k = tlgemm.addmm(torch.ones(4, 8), torch.empty(4, 0), torch.empty(0, 8), beta=True)
    assert torch.equal(empty_k, torch.ones(4, 8))


def test_explain_gives_the_float32_kernel_a_float16_full_bias_runs(fake_gpu):
    """At 512x4096x7168 select() gives a float32 output one stage fewer than a float16 one
    (the epilogue's staging); explain names the kernel addmm runs with an [M, N] bias."""
    a = torch.empty(512, 7168, dtype=torch.float16)
    b = torch.empty(7168, 4096, dtype=torch.float16)
    full = tlgemm.explain(a, b, bias=torch.empty(512, 4096, dtype=torch.float16))
    assert full.schedule == tlgemm.explain(a, b, out_dtype=torch.float32).schedule
    assert full.schedule != tlgemm.explain(a, b).schedule
    assert full.schedule == tlgemm.explain(a, b, bias=torch.empty(512, 4096), out_dtype=torch.float32).schedule
    assert full.problem.endswith("-> float16")
    assert tlgemm.explain(a.bfloat16(), b.bfloat16(), bias=torch.empty(512, 4096)).schedule == \
        tlgemm.explain(a.bfloat16(), b.bfloat16()).schedule


def test_explain_names_the_copy_of_a_negated_view(fake_gpu):
    a, b = torch.randn(32, 64), torch.randn(64, 16)
    assert not any("negative bit" in r for r in tlgemm.explain(a, b).reasons)
    reasons = tlgemm.explain(torch._neg_view(a), b).reasons
    assert any(r.startswith("a: torch's negative bit") and "resolve_neg" in r for r in reasons)
    reasons = tlgemm.explain(torch._neg_view(a), torch._neg_view(b)).reasons
    assert any(r.startswith("a and b: torch's negative bit") for r in reasons)


def test_repeat_launch_is_not_taken_for_an_out_sharing_an_input(fake_gpu, monkeypatch, generator):
    a, b = _ab(64, 64, 64, generator=generator)
    spans = span_bytes(a), span_bytes(b), span_bytes(a)
    monkeypatch.setattr(api, "_REPEATS", {api._repeat_key(a, b, a, None, "auto", None): (lambda *args: pytest.fail(),
                                                                                        *spans)})
    with pytest.raises(ValueError, match=r"out: shares memory with a"):
        tlgemm.matmul(a, b, out=a)


def test_scaled_mm_takes_a_one_element_bias_when_n_is_1(fake_gpu, generator):
    a, b = _ab(16, 1, 64, dtype=E4M3, b_cols=True, generator=generator)
    bias = torch.randn(1, dtype=torch.bfloat16, generator=generator)
    out = tlgemm.scaled_mm(a, b, torch.ones(()), torch.ones(()), bias=bias)
    assert_gemm_close(out, a.double() @ b.double() + bias.double(), torch.bfloat16)


def test_addmm_ignores_nan_bias_when_beta_is_zero(fake_gpu, generator):
    a, b = _ab(16, 16, 32, generator=generator)
    out = tlgemm.addmm(torch.full((16,), float("nan")), a, b, beta=0)
    assert not out.isnan().any()


@pytest.mark.parametrize("scales", ["tensor", "row_col", "row_1d", "mixed"])
@pytest.mark.parametrize("dtype", [E4M3, torch.int8], ids=str)
def test_scaled_mm_per_tensor_row_column(fake_gpu, generator, scales, dtype):
    M, N, K = 40, 48, 64
    a, b = _ab(M, N, K, dtype=dtype, b_cols=True, generator=generator)
    sa = {"tensor": torch.rand(()) + 0.5, "row_col": torch.rand(M, 1) + 0.5, "row_1d": torch.rand(M) + 0.5,
          "mixed": torch.rand(1) + 0.5}[scales]
    sb = {"tensor": torch.rand(()) + 0.5, "row_col": torch.rand(1, N) + 0.5, "row_1d": torch.rand(N) + 0.5,
          "mixed": torch.rand(1, N) + 0.5}[scales]
    bias = torch.randn(N, dtype=torch.bfloat16)
    out = tlgemm.scaled_mm(a, b, sa, sb, bias=bias)
    assert out.dtype == torch.bfloat16
    expected = (a.double() @ b.double()) * sa.double().reshape(-1, 1) * sb.double().reshape(-1) + bias.double()
    assert_gemm_close(out, expected, torch.bfloat16)
    assert fake_gpu.tilelang.calls[-1][4]["scale_a"] is sa


def test_scaled_mm_block_wise_goes_to_the_block_scaled_kernel(fake_gpu, generator):
    """On Hopper "auto" takes TileLang's block-scaled kernel."""
    M, N, K, backend = 40, 256, 384, "tilelang"
    kb = K // 128
    w = random_operand((N, K), E4M3, generator=generator)
    a = random_operand((M, K), E4M3, generator=generator)
    sa, sb = torch.rand(M, kb) + 0.5, torch.rand(N // 128, kb) + 0.5
    out = tlgemm.scaled_mm(a, w.t(), sa, sb, out_dtype=torch.float32)
    name, seen_a, seen_b, schedule, kwargs = getattr(fake_gpu, backend).calls[-1]
    assert name == "blockscaled_matmul" and schedule is None and kwargs["out_dtype"] == torch.float32
    assert seen_a is a and seen_b.data_ptr() == w.data_ptr() and seen_b.shape == (N, K)
    deq_a = a.double() * sa.double().repeat_interleave(128, 1)[:, :K]
    deq_w = w.double() * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:, :K]
    assert_gemm_close(out, deq_a @ deq_w.T, torch.float32)
    assert "block-scaled FP8 GEMM" in tlgemm.explain(a, w.t(), scale_a=sa, scale_b=sb).kernel


def test_out_is_written(fake_gpu, generator):
    a, b = _ab(32, 24, 64, generator=generator)
    out = torch.full((32, 24), float("nan"), dtype=torch.float32)
    assert tlgemm.matmul(a, b, out=out) is out
    assert_gemm_close(out, a.double() @ b.double(), torch.bfloat16)
    assert fake_gpu.tilelang.calls[-1][4]["scale_a"] is None


def test_int8_and_fp8_defaults(fake_gpu, generator):
    a, b = _ab(32, 32, 64, dtype=torch.int8, b_cols=True, generator=generator)
    assert tlgemm.matmul(a, b).dtype == torch.int32
    a, b = _ab(32, 32, 64, dtype=E4M3, b_cols=True, generator=generator)
    assert tlgemm.matmul(a, b).dtype == torch.bfloat16
    assert tlgemm.matmul(a, b, out_dtype=torch.float16).dtype == torch.float16


def test_tf32_follows_torch(fake_gpu, monkeypatch, generator):
    a, b = _ab(32, 32, 64, dtype=torch.float32, generator=generator)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    tlgemm.matmul(a, b)
    assert fake_gpu.triton.calls[-1][4]["allow_tf32"] is False
    assert tlgemm.explain(a, b).instruction.startswith("no tensor-core instruction: tl.dot in full float32")
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    tlgemm.matmul(a, b)
    assert fake_gpu.tilelang.calls  # TF32 allowed: TileLang's wgmma.tf32
    assert "tf32" in tlgemm.explain(a, b).instruction


def test_autotune_stores_the_fastest_checked_candidate(fake_gpu, monkeypatch, capsys):
    import triton.testing

    timed = []

    def fake_do_bench(fn, warmup, rep, return_mode):
        fn()
        timed.append(fn.args[2])
        return 0.5 if len(timed) == 3 else 1.0  # the third candidate is the fastest

    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    fake_gpu.tilelang.reject.add(tlgemm.explain(torch.empty(200, 512, dtype=torch.bfloat16, device="meta"),
                                                torch.empty(512, 256, dtype=torch.bfloat16, device="meta")).schedule)
    results = tlgemm.autotune([(200, 256, 512)], torch.bfloat16, device="cpu", candidates=5, progress=True,
                              layout="nn")
    (r,) = results
    assert r.backend == "tilelang" and r.tried == 10 and len(r.failed) == 1 and "shared memory" in r.failed[0]
    assert [s.cluster_m for s in timed] == [1] * 4 + [2] * 5, "select()'s five, then their 2-CTA cluster forms"
    assert r.schedule == timed[2] and r.time_us == 500.0
    assert AutotuneCache().get("Fake H100", "tilelang", ("bfloat16",) * 3, 256, 256, 512, layout="nn") == r.schedule
    assert "tlgemm autotune" in capsys.readouterr().err  # the progress bar
    a, b = _ab(230, 256, 512)
    tlgemm.matmul(a, b)  # same M bucket (193..256): the tuned schedule, no selection
    assert fake_gpu.tilelang.calls[-1][3] == r.schedule


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(candidates=0), ValueError, r"^candidates: expected an int >= 1 .* got 0$"),
    (dict(candidates=-1), ValueError, r"^candidates: expected an int >= 1"),
    (dict(candidates=2.5), TypeError, r"^candidates: expected an int >= 1"),
    (dict(cache="/tmp/cache"), TypeError, r"^cache: expected a tlgemm.schedules.AutotuneCache or None, got str$"),
    (dict(dtypes={torch.bfloat16}), TypeError, r"^dtypes: expected a torch.dtype or a list or tuple of them"),
    (dict(dtypes="bf16"), TypeError, r"^dtypes: expected a torch.dtype or a list or tuple of them"),
    (dict(shapes=(64, 64, 64)), TypeError, r"^shapes: each shape is \(M, N, K\) of positive ints, got 64$"),
    (dict(shapes=[(True, 64, 64)]), TypeError, r"^shapes: each shape is \(M, N, K\) of positive ints"),
    (dict(shapes=[(0, 64, 64)]), ValueError, r"^shapes: each shape is \(M, N, K\) of positive ints, got \(0, 64, 64\)$"),
    (dict(shapes="64x64x64"), TypeError, r"^shapes: expected an iterable of \(M, N, K\) tuples, got '64x64x64'$"),
    (dict(shapes=[(2**31, 64, 64)]), ValueError, r"^shapes: \(2147483648, 64, 64\): a: holds 137438953472 elements"),
    (dict(shapes=[(3500, 64, 64), (200, 64, 64), (4000, 64, 64)]), ValueError,
     r"^shapes: \(3500, 64, 64\) and \(4000, 64, 64\) share one cache entry \(M bucket 3073..4096 at N=64, K=64; "
     r"tlgemm.schedules.m_bucket\), so the second would overwrite the first's winner; tune one M per bucket$"),
    (dict(shapes=[(200, 64, 64), [200, 64, 64]]), ValueError, r"^shapes: \(200, 64, 64\) and \(200, 64, 64\) share"),
    (dict(shapes=[(200, 64, 64)] * 2), ValueError, r"^shapes: \(200, 64, 64\) and \(200, 64, 64\) share"),
])
def test_autotune_checks_its_arguments_before_timing(fake_gpu, monkeypatch, kwargs, error, message):
    """Each was a silent no-op (candidates 0: nothing tried, schedule None), a crash deep in
    torch, or an error after every candidate was timed (a str cache)."""
    import triton.testing

    monkeypatch.setattr(triton.testing, "do_bench", lambda *args, **kw: pytest.fail("timed before the check"))
    args = dict(shapes=[(200, 256, 512)], dtypes=torch.bfloat16)
    args.update(kwargs)
    with pytest.raises(error, match=message):
        tlgemm.autotune(args.pop("shapes"), args.pop("dtypes"), device="cpu", progress=False, **args)


def test_autotune_refuses_a_cache_folder_it_cannot_create_before_timing(fake_gpu, monkeypatch, tmp_path):
    import triton.testing

    monkeypatch.setattr(triton.testing, "do_bench", lambda *args, **kw: pytest.fail("timed before the check"))
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"^cache: cannot create its folder .*file/cache: Not a directory$"):
        tlgemm.autotune([(200, 256, 512)], torch.bfloat16, device="cpu", progress=False,
                        cache=AutotuneCache(tmp_path / "file" / "cache"))


def test_explain_names_the_operand_read_once():
    """On the TileLang backend, explain names the operand the grid reads once (the weights at
    small M; under swap-AB in the user's names), the one its kernel loads evict_first."""
    def once(M, N, schedule=None):
        a = torch.empty(M, 1024, device="meta", dtype=torch.bfloat16)
        w = torch.empty(N, 1024, device="meta", dtype=torch.bfloat16)
        reasons = tlgemm.explain(a, w.t(), backend="tilelang", schedule=schedule).reasons
        return [r.split()[0] for r in reasons if "evict_first" in r]

    tile = Schedule(block_m=64, block_n=64, block_k=64, num_stages=4).persistent()
    assert once(64, 4096, tile) == ["b"]
    assert once(4096, 64, tile) == ["a"]
    assert once(4096, 4096, tile) == []
    assert once(32, 32, tile) == ["a", "b"]
    assert once(16, 4096, tile.swap_ab()) == ["b"]


def test_a_width_no_power_of_two_only_with_b_read_k_major(fake_gpu):
    """select() may rank a block_n that is no power of two first (128x144 at M = 2048, N = 2112);
    the TileLang matmul takes it only with B read K-major and the Triton backend never, so for
    a B stored MN-major both explain and the call take select()'s best power-of-two width."""
    a, b_k = _ab(2048, 2112, 512, b_cols=True)
    first = tlgemm.explain(a, b_k, backend="tilelang").schedule
    assert first.block_n == 144
    assert not api.runs_schedule("triton", "matmul", first) and not api.runs_schedule("tilelang", "bmm", first)
    assert api.runs_schedule("tilelang", "matmul", first)
    assert not api.runs_schedule("tilelang", "matmul", first, b_k_major=False)
    tlgemm.matmul(a, b_k, backend="tilelang")
    assert fake_gpu.tilelang.calls[-1][3] == first

    b_mn = b_k.contiguous()
    shown = tlgemm.explain(a, b_mn, backend="tilelang")
    assert shown.schedule.has_pow2_block_n
    assert any("a block_n no power of two with B read MN-major" in r for r in shown.reasons)
    out = tlgemm.matmul(a, b_mn, backend="tilelang")
    assert fake_gpu.tilelang.calls[-1][3] == shown.schedule
    assert_gemm_close(out, reference_gemm(a, b_mn), torch.bfloat16)
    tlgemm.matmul(a, b_mn, backend="triton")
    assert fake_gpu.triton.calls[-1][3].has_pow2_block_n


def test_triton_operand_copies_are_k_major(fake_gpu, generator):
    """An operand the api copies for the Triton backend (neither row- nor column-major) is
    copied K-major: a b [K, N] copied row-major with N's rows no 16-byte multiple was copied
    a second time, K-major, by the launcher."""
    a = random_operand((64, 128), torch.bfloat16, generator=generator)
    b = random_operand((128, 2 * 37), torch.bfloat16, generator=generator)[:, ::2]  # strides (74, 2), N = 37
    out = tlgemm.matmul(a, b, backend="triton")
    _, ran_a, ran_b, *_ = fake_gpu.triton.calls[-1]
    assert ran_a is a and ran_b.stride() == (1, 128), "b copied once, K-major (column-major [K, N])"
    assert_gemm_close(out, reference_gemm(a, b), torch.bfloat16)
    (b_line,) = [r for r in tlgemm.explain(a, b, backend="triton").reasons if r.startswith("b [")]
    assert "copied once, K-major: neither row- nor column-major" in b_line


def test_explain_lists_the_triton_launchers_copies():
    """explain() names the Triton launcher's copies: both operands K-major with K zero-padded
    when K's rows are no 16-byte multiple; a row-major b whose N rows are none, K-major."""
    meta = dict(dtype=torch.bfloat16, device="meta")
    reasons = tlgemm.explain(torch.empty(64, 29, **meta), torch.empty(29, 64, **meta), backend="triton").reasons
    assert sum("K zero-padded to whole 128-byte rows" in r for r in reasons) == 2
    reasons = tlgemm.explain(torch.empty(64, 64, **meta), torch.empty(64, 21, **meta), backend="triton").reasons
    (a_line,) = [r for r in reasons if r.startswith("a [")]
    (b_line,) = [r for r in reasons if r.startswith("b [")]
    assert a_line.endswith("read as it is") and "copied K-major by the Triton launcher" in b_line


def test_a_launch_makes_the_tensors_gpu_current_only_where_it_is_not(monkeypatch):
    """api._on_device: a context switching to the tensors' GPU in a process with several GPUs
    when another is current; nothing with one GPU, on the current GPU or on the CPU (the
    GPU test on two GPUs runs the calls)."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(api, "_gpu_count", lambda: 2)
    switch = api._on_device(torch.device("cuda", 1))
    assert isinstance(switch, torch.cuda.device) and switch.idx == 1
    for device in (torch.device("cuda", 0), torch.device("cpu")):
        assert not isinstance(api._on_device(device), torch.cuda.device)
    monkeypatch.setattr(api, "_gpu_count", lambda: 1)
    assert not isinstance(api._on_device(torch.device("cuda", 0)), torch.cuda.device)
