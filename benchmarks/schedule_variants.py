"""Timing TileLang schedules of one dense GEMM against each other and cuBLAS (the A/B scripts:
streamk_tail.py, small_m_dense.py, selection_ab.py).

C = A · Wᵀ with K-major operands, e4m3 or 16-bit inputs, bf16 out. ``measure`` checks every
kernel, cuBLAS included, against the float64 product of the same inputs on a NaN-poisoned output
(tlgemm.testing.assert_gemm_close: DESIGN.md's bound for the input dtype; a wrong one stops the
run), then times them in interleaved rounds and reports each kernel's median round.
"""
import json
import statistics
from concurrent.futures import ThreadPoolExecutor

import torch
from triton.testing import do_bench

import tlgemm
from core_speed import cublas_call
from tlgemm.bench import kernel_time_us, median_rate
from tlgemm.testing import assert_gemm_close, poison_allocator, reference_gemm


def compile_ahead(shapes, workers=16, backend="tilelang"):
    """Compile every (dtype, M, N, K, {label: schedule}) item's kernels for ``backend`` in a thread
    pool (nvcc and ptxas run outside the GIL); the shape matters, as it decides which operand is
    read once."""
    def warm(item):
        dtype, M, N, K, variants = item
        a = torch.zeros(M, K, device="cuda").to(dtype)
        w = torch.zeros(N, K, device="cuda").to(dtype)
        for s in variants.values():
            tlgemm.matmul(a, w.t(), backend=backend, schedule=s, out_dtype=torch.bfloat16)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(warm, shapes))
    torch.cuda.synchronize()


def by_kernel_time(calls):
    """Seconds of one call: the median of ``calls`` profiled calls, L2 flushed before each
    (tlgemm.bench.kernel_time_us, DeepGEMM's method)."""
    return lambda fn: statistics.median(kernel_time_us(fn, calls=calls)) * 1e-6


def by_do_bench(rep_ms):
    """Seconds of one call: triton.testing.do_bench's median over ``rep_ms``."""
    return lambda fn: do_bench(fn, warmup=25, rep=rep_ms) * 1e-3


def checked_calls(name, dtype, M, N, K, variants, backend="tilelang"):
    """({label: call} for cuBLAS and each labelled schedule run by ``backend`` (None: the entry
    point's own pick) on fresh random inputs, {label: relative error}); each call is checked
    first against the float64 product on a NaN-poisoned output."""
    a = torch.randn(M, K, device="cuda").to(dtype)
    w = torch.randn(N, K, device="cuda").to(dtype)
    ref = reference_gemm(a, w.t())
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    kernels = {"cublas": cublas_call(a, w)}
    for label, s in variants.items():
        kernels[label] = lambda s=s: tlgemm.matmul(a, w.t(), out=c, backend=backend, schedule=s)
    rel_errors = {}
    for label, fn in kernels.items():
        c.fill_(float("nan"))
        poison_allocator((M, N), torch.bfloat16, c.device)  # cuBLAS allocates its output: poisoned memory too
        try:
            rel_errors[label] = assert_gemm_close(fn(), ref, dtype, what=f"{label} {name} {M}x{N}x{K}")
        except AssertionError as err:
            raise SystemExit(str(err)) from None
    return kernels, rel_errors


def measure(name, dtype, M, N, K, variants, rounds, seconds, backend="tilelang"):
    """{"tflops": median round per label, "rounds", "rel_err", "schedules"} for cuBLAS and each
    labelled schedule (run by ``backend``) on fresh random inputs; ``seconds(fn)`` times one call."""
    kernels, rel_errors = checked_calls(name, dtype, M, N, K, variants, backend)
    flops = 2 * M * N * K
    times = {label: [] for label in kernels}
    for _ in range(rounds):
        for label, fn in kernels.items():
            times[label].append(flops / seconds(fn) / 1e12)
    return {"dtype": name, "M": M, "N": N, "K": K, "schedules": {k: str(s) for k, s in variants.items()},
            "tflops": {k: median_rate(v) for k, v in times.items()}, "rounds": times, "rel_err": rel_errors}


def measure_all(work, rounds, seconds, out_path, describe, backend="tilelang", **header):
    """Compile every (name, dtype, M, N, K, {label: schedule}) item's kernels, then ``measure``
    each, print ``describe(row)`` and rewrite ``out_path`` ({gpu, torch, **header, rows}) after
    every row, so that a run cut short keeps what it measured. Returns the rows."""
    compile_ahead([item[1:] for item in work], backend=backend)
    rows = []
    for item in work:
        rows.append(measure(*item, rounds, seconds, backend))
        print(describe(rows[-1]), flush=True)
        with open(out_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, **header, "rows": rows}, f,
                      indent=1)
    return rows
