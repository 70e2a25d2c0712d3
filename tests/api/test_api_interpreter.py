"""The entry points end to end on the CPU: TRITON_INTERPRET=1 makes tlgemm run the real Triton
kernels in Triton's interpreter (a fresh process, the variable set before triton is imported),
checked against the float64 reference with NaN-poisoned outputs (where the case is not about the
entry point allocating its own: on the CPU a fresh tensor is not poisoned memory)."""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(r"""
    import torch
    import tlgemm
    import tlgemm.triton as backend
    from tlgemm.testing import assert_gemm_close, poisoned, random_operand, reference_gemm

    g = torch.Generator().manual_seed(20261121)
    E4M3 = torch.float8_e4m3fn

    def operands(M, N, K, dtype, layout):
        a = random_operand((M, K) if layout[0] == "n" else (K, M), dtype, generator=g)
        b = random_operand((K, N) if layout[1] == "n" else (N, K), dtype, generator=g)
        return (a if layout[0] == "n" else a.t()), (b if layout[1] == "n" else b.t())

    for (M, N, K), dtype, layout in [((37, 29, 53), torch.float16, "nn"), ((1, 40, 64), torch.bfloat16, "nt"),
                                     ((70, 33, 20), torch.float32, "tt"), ((16, 24, 96), torch.int8, "nt")]:
        a, b = operands(M, N, K, dtype, layout)
        out_dtype = torch.int32 if dtype == torch.int8 else dtype
        out = poisoned((M, N), out_dtype, "cpu")
        assert tlgemm.matmul(a, b, out=out) is out
        assert_gemm_close(out, reference_gemm(a, b), dtype, what=f"matmul {M}x{N}x{K} {dtype} {layout}")

    a = random_operand((40, 128), torch.float16, generator=g)[:, ::2]
    b = random_operand((64, 24), torch.float16, generator=g)
    assert_gemm_close(tlgemm.matmul(a, b), reference_gemm(a, b), torch.float16, what="strided a (copied)")

    # torch's negative bit (z.conj().imag, torch._neg_view): the memory holds the values' negatives
    a = random_operand((32, 64), torch.float32, generator=g)
    nb = torch.randn(64, 8, dtype=torch.complex64, generator=g).conj().imag
    assert nb.is_neg()
    assert_gemm_close(tlgemm.matmul(a, nb), reference_gemm(a, nb), torch.float32, what="b with the negative bit")
    na = torch._neg_view(a)
    assert_gemm_close(tlgemm.matmul(na, nb), reference_gemm(na, nb), torch.float32, what="negated a and b")

    a, b = operands(48, 40, 64, torch.float32, "nt")
    for bias in (torch.randn(40, generator=g), torch.randn((), generator=g), torch.randn(48, 40, generator=g),
                 torch.randn(48, 1, generator=g)):
        out = tlgemm.addmm(bias, a, b, alpha=0.5, beta=2.0, out=poisoned((48, 40), torch.float32, "cpu"))
        ref = torch.addmm(bias.double(), a.double(), b.double(), alpha=0.5, beta=2.0)
        assert_gemm_close(out, ref, torch.float32, what=f"addmm bias {list(bias.shape)}")

    a, b = operands(24, 32, 64, E4M3, "nt")
    sa, sb = torch.rand(24, 1, generator=g) + 0.5, torch.rand(1, 32, generator=g) + 0.5
    bias = torch.randn(32, generator=g).to(torch.bfloat16)
    out = tlgemm.scaled_mm(a, b, sa, sb, bias=bias, out=poisoned((24, 32), torch.bfloat16, "cpu"))
    assert_gemm_close(out, reference_gemm(a, b, scale_a=sa, scale_b=sb, bias=bias), E4M3, what="scaled_mm row/col")

    if hasattr(backend, "bmm"):
        x = random_operand((1, 20, 48), torch.bfloat16, generator=g).expand(3, 20, 48)
        y = random_operand((3, 48, 24), torch.bfloat16, generator=g)
        out = tlgemm.bmm(x, y, out=poisoned((3, 20, 24), torch.bfloat16, "cpu"))
        assert_gemm_close(out, x.double() @ y.double(), torch.bfloat16, what="bmm, expanded batch")

    if hasattr(backend, "blockscaled_matmul"):
        M, N, K = 20, 128, 256
        a, w = random_operand((M, K), E4M3, generator=g), random_operand((N, K), E4M3, generator=g)
        sa, sb = torch.rand(M, K // 128, generator=g) + 0.5, torch.rand(N // 128, K // 128, generator=g) + 0.5
        deq_a = a.double() * sa.double().repeat_interleave(128, 1)
        deq_w = w.double() * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)
        out = tlgemm.scaled_mm(a, w.t(), sa, sb, out=poisoned((M, N), torch.float32, "cpu"))
        assert_gemm_close(out, deq_a @ deq_w.T, E4M3, blockscaled=True, what="scaled_mm block-wise")

    a = torch.ones(4, 16, dtype=torch.float16)
    b = torch.full((16, 8), -1000.0, dtype=torch.float16)
    bias = torch.full((8,), 40000.0, dtype=torch.float16)  # beta·bias = 80000 is beyond float16, the result is not
    out = tlgemm.addmm(bias, a, b, beta=2.0, out_dtype=torch.float32)
    assert torch.equal(out, torch.full((4, 8), 64000.0)), "addmm: beta scales a vector bias in float32"

    a, b = operands(33, 40, 64, torch.int8, "nt")
    out = poisoned((33, 40), torch.bfloat16, "cpu")
    tlgemm.matmul(a, b, out=out)
    assert_gemm_close(out, reference_gemm(a, b), torch.bfloat16, what="int8 to bfloat16")

    a, b = operands(40, 48, 64, torch.float16, "nn")
    schedule = tlgemm.schedules.Schedule(block_m=32, block_n=32, block_k=32).persistent()
    out = tlgemm.matmul(a, b, schedule=schedule)
    assert_gemm_close(out, reference_gemm(a, b), torch.float16, what="persistent schedule without num_sms")

    print("interpreted ok")
""")


EMPTY_SCRIPT = textwrap.dedent(r"""
    import torch
    import tlgemm
    from tlgemm.schedules import Schedule

    a, b = torch.randn(2, 64, 128, dtype=torch.bfloat16), torch.randn(2, 128, 64, dtype=torch.bfloat16)
    for schedule in (Schedule().splitk(2), Schedule(block_m=64).swap_ab(), Schedule(block_n=48)):
        for gemm, full_a, full_b in ((tlgemm.matmul, a[0], b[0]), (tlgemm.bmm, a, b)):
            errors = set()
            for x, y in ((full_a, full_b), (full_a[..., :0, :], full_b), (full_a, full_b[..., :0]),
                         (full_a[..., :0], full_b[..., :0, :])):
                try:
                    gemm(x, y, schedule=schedule)
                except ValueError as error:
                    errors.add(str(error))
                else:
                    raise AssertionError(f"{gemm.__name__} {list(x.shape)} @ {list(y.shape)} took {schedule}")
            assert len(errors) == 1, errors
    print("empty ok")
""")


TRACERS_SCRIPT = textwrap.dedent(r"""
    import torch
    import tlgemm
    from tlgemm.testing import assert_gemm_close, random_operand, reference_gemm

    g = torch.Generator().manual_seed(20261202)
    a, b = random_operand((5, 40), torch.float16, generator=g), random_operand((40, 3), torch.float16, generator=g)
    traced = torch.jit.trace(lambda x, y: tlgemm.matmul(x, y), (a, b))
    assert "tlgemm::matmul" in str(traced.graph), traced.graph
    c, d = random_operand((6, 40), torch.float16, generator=g), random_operand((40, 9), torch.float16, generator=g)
    assert_gemm_close(traced(c, d), reference_gemm(c, d), torch.float16, what="replayed trace")
    batch = random_operand((2, 5, 40), torch.float16, generator=g)
    out = torch.vmap(lambda x: tlgemm.matmul(x, b))(batch)
    assert_gemm_close(out, reference_gemm(batch, b), torch.float16, what="vmap")
    print("traced ok")
""")


def _interpret(script: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)


def test_entry_points_in_the_interpreter():
    result = _interpret(SCRIPT)
    assert result.returncode == 0 and "interpreted ok" in result.stdout, result.stderr[-4000:]


def test_empty_problem_in_the_interpreter_raises_the_schedule_error():
    """On CPU tensors "auto" runs Triton in the interpreter: an empty problem raises the
    non-empty call's error for a schedule Triton does not run."""
    result = _interpret(EMPTY_SCRIPT)
    assert result.returncode == 0 and "empty ok" in result.stdout, result.stderr[-4000:]


def test_jit_trace_and_vmap_record_the_op():
    """torch.jit.trace and torch.vmap saw matmul launch its kernel straight away: the trace failed
    its sanity check and vmap handed batched tensors to the launcher; both now go through
    tlgemm::matmul."""
    result = _interpret(TRACERS_SCRIPT)
    assert result.returncode == 0 and "traced ok" in result.stdout, result.stderr[-4000:]
