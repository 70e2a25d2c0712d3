"""DeepGEMM's shape table timed the way DeepGEMM's published figures were: kernel time from the profiler.

    python benchmarks/deepgemm_kernel_time.py [--out PATH] [--calls 30] [--no-candidates] [--deepgemm]

DeepGEMM's README figures (``tlgemm.bench.DEEPGEMM_H800_TFLOPS``) are kernel durations from the
CUDA profiler (deep_gemm's ``bench_kineto``), each call made on inputs created and quantised just
before it (``fresh_blockscaled_inputs``: that release's tests/test_core.py); later DeepGEMM
releases zero 8 GB before each call instead. tlgemm's benchmark harness times whole calls with
triton.testing.do_bench. This script measures all three ways, in one process: do_bench and kernel
time after an 8 GB memset on tlgemm.bench's fp8-block inputs (``blockscaled_inputs``), and kernel
time on fresh inputs (``kernel_fresh``), for tlgemm's TileLang and Triton
block-scaled kernels (default schedules), cuBLAS's block-wise torch._scaled_mm, cuBLAS per-tensor
FP8 on the same e4m3 operands, and for M <= 128 other TileLang tiles (``candidates``, block_k 256
and split tiles among them). Each is first checked against a float64 reference on a
NaN-poisoned output (``tlgemm.bench.check``).
Kernel time: ``tlgemm.bench.kernel_time_us`` (median of the calls' summed GPU activity).
With fresh inputs the quantised weights were the last large tensor written, so what of them fits
in the L2 is read from there: at M <= 128 the weights are most of the bytes.
With ``--deepgemm``, DeepGEMM itself (its Python package ``deep_gemm``, importable, with the
``gemm_fp8_fp8_bf16_nt`` entry point of its 2025 releases) is checked and timed the same ways.
"""
import argparse
import importlib
import os
import pathlib
import statistics
from concurrent.futures import ThreadPoolExecutor

import torch
import triton

from tlgemm._checks import cuda_limits
import tlgemm.triton
from tlgemm.bench import (DEEPGEMM_H800_TFLOPS, Device, blockscaled_inputs, check, cublas_blockwise,
                          environment, fresh_blockscaled_inputs, kernel_time_us, write_json)
from tlgemm.schedules import Schedule
from tlgemm.testing import reference_gemm
from tlgemm.tilelang.launch import (_compiled_blockscaled, blockscaled_matmul, operands_read_once,
                                    blockscaled_spec, blockscaled_stages_that_fit, default_blockscaled_schedule)

FP8, BF16 = torch.float8_e4m3fn, torch.bfloat16


def candidates(M: int, N: int, K: int, sms: int, smem_limit: int) -> list[Schedule]:
    """Other TileLang tiles for M <= 128: 64-row tiles on one consumer warpgroup, 128-row on
    two, and swap-AB tiles of 64 or 128 rows of N by 64 tokens; where K is a multiple of 256,
    also block_k 256 tiles on one warpgroup (64x16 to 64x64, 128x64) and 64x32 tiles split into
    2 or 4 equal parts of their K-iterations (split-K in a cluster, as
    ``default_blockscaled_schedule`` splits them in two) where all parts fit the SMs at once."""
    if M > 128:
        return []
    plain = [Schedule(block_m=64, block_n=bn, block_k=128, num_stages=8, num_warpgroups=1).persistent()
             for bn in (16, 32, 64, 128)]
    plain += [Schedule(block_m=128, block_n=bn, block_k=128, num_stages=8, num_warpgroups=2).persistent()
              for bn in (16, 32, 64, 128)]
    swapped = [Schedule(block_m=bm, block_n=64, block_k=128, num_stages=8, num_warpgroups=bm // 64)
               .persistent().swap_ab() for bm in (64, 128)]
    deep = []
    if K % 256 == 0:
        deep = [Schedule(block_m=bm, block_n=bn, block_k=256, num_stages=8, num_warpgroups=1).persistent()
                for bm, bn in ((64, 16), (64, 32), (64, 64), (128, 64))]
        tiles = -(-M // 64) * -(-N // 32)
        deep += [Schedule(block_m=64, block_n=32, block_k=256, num_stages=8, num_warpgroups=1).splitk(parts)
                 for parts in (2, 4) if (K // 256) % parts == 0 and parts * tiles <= sms]
    return [blockscaled_stages_that_fit(s, BF16, smem_limit) for s in plain + swapped + deep]


def deepgemm_call(deep_gemm, i):
    """DeepGEMM's normal GEMM on an fp8-block input set (A's scales outer-dim-major, as it takes
    them); it writes ``i.out``."""
    deep_gemm.gemm_fp8_fp8_bf16_nt((i.a, i.scale_a_mn), (i.w, i.scale_b), i.out)
    return i.out


def timings(call, inp, shape, calls: int) -> dict:
    """do_bench median and the profiler's kernel time after an 8 GB memset on ``inp``, and the
    kernel time on inputs made afresh before each call (medians over ``calls``, us)."""
    ms = triton.testing.do_bench(lambda: call(inp), warmup=10, rep=50, return_mode="median")
    current = [inp]

    def refresh():
        current[0] = fresh_blockscaled_inputs(*shape)

    return {"do_bench_us": ms * 1e3, "kernel_us": statistics.median(kernel_time_us(lambda: call(inp), calls)),
            "kernel_fresh_us": statistics.median(kernel_time_us(lambda: call(current[0]), calls, flush=refresh))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "deepgemm_kernel_time.json"))
    parser.add_argument("--calls", type=int, default=30, help="profiled calls per implementation")
    parser.add_argument("--no-candidates", action="store_true", help="default schedules only")
    parser.add_argument("--deepgemm", action="store_true",
                        help="also time deep_gemm.gemm_fp8_fp8_bf16_nt (DeepGEMM's package, importable)")
    args = parser.parse_args()
    deep_gemm = importlib.import_module("deep_gemm") if args.deepgemm else None
    sms, smem_limit = cuda_limits(torch.cuda.current_device())
    probe = torch.randn(1024, 1024, device="cuda")
    print(f"probe: 1024^3 fp32 mm, kernel time {statistics.median(kernel_time_us(lambda: probe @ probe, 5)):.1f} us",
          flush=True)
    shapes = sorted(DEEPGEMM_H800_TFLOPS, key=lambda s: (s[1], s[2], s[0]))
    extra = {shape: [] if args.no_candidates else candidates(*shape, sms, smem_limit) for shape in shapes}
    defaults = {(M, N, K): default_blockscaled_schedule(M, BF16, smem_limit, N=N, num_sms=sms, K=K)
                for M, N, K in shapes}
    # A's scales arrive outer-dim-major with 16-byte aligned rows (every M here): the TMA-scale kernels;
    # each with the L2 hint its launch gives it (operands_read_once)
    specs = {blockscaled_spec(FP8, FP8, BF16, s, sms, tma_token_scales=True, read_once=operands_read_once(M, N, s))
             for (M, N, K), default in defaults.items() for s in [default, *extra[(M, N, K)]]}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(_compiled_blockscaled, specs))
    rows = []
    env = environment(Device.current(), "python benchmarks/deepgemm_kernel_time.py")
    for M, N, K in shapes:
        inp, ref = blockscaled_inputs(M, N, K)
        one = torch.ones((), dtype=torch.float32, device="cuda")
        per_tensor_ref = reference_gemm(inp.a, inp.w.t(), scale_a=one, scale_b=one)
        # (name, info, reference, whether it is the dequantised inputs' product, call)
        impls = [
            ("tlgemm TileLang", str(defaults[(M, N, K)]), ref, True,
             lambda i: blockscaled_matmul(i.a, i.w, i.scale_a_mn, i.scale_b, out=i.out)),
            ("tlgemm Triton", "default", ref, True,
             lambda i: tlgemm.triton.blockscaled_matmul(i.a, i.w, i.scale_a_mn, i.scale_b, out=i.out)),
            ("cuBLAS block-wise", "torch._scaled_mm", ref, True, lambda i: cublas_blockwise(i, out=i.out)),
            ("cuBLAS per-tensor", "torch._scaled_mm", per_tensor_ref, False,
             lambda i: torch._scaled_mm(i.a, i.w.t(), scale_a=one, scale_b=one, out_dtype=BF16, out=i.out)),
        ]
        if deep_gemm is not None:
            impls.append(("DeepGEMM", getattr(deep_gemm, "__version__", "deep_gemm"), ref, True,
                          lambda i: deepgemm_call(deep_gemm, i)))
        impls += [("TileLang tile", str(s), ref, True,
                   lambda i, s=s: blockscaled_matmul(i.a, i.w, i.scale_a_mn, i.scale_b, s, out=i.out))
                  for s in extra[(M, N, K)]]
        flops = 2 * M * N * K
        results = []
        for name, info, expected, blockscaled, call in impls:
            entry = {"impl": name, "info": info}
            try:
                entry["rel_err"] = check(call, inp, expected, FP8, f"{name} {info} {M}x{N}x{K}", blockscaled)
                entry.update(timings(call, inp, (M, N, K), args.calls))
            except (RuntimeError, ValueError, AssertionError) as err:
                # cuBLAS has no block-wise kernel for some shapes; a rejected schedule or a wrong result
                # gets no number and the other rows still run
                entry["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
                results.append(entry)
                continue
            entry["do_bench_tflops"] = flops / entry["do_bench_us"] / 1e6
            entry["kernel_tflops"] = flops / entry["kernel_us"] / 1e6
            entry["kernel_fresh_tflops"] = flops / entry["kernel_fresh_us"] / 1e6
            results.append(entry)
        rows.append({"M": M, "N": N, "K": K, "deepgemm_h800_tflops": DEEPGEMM_H800_TFLOPS[(M, N, K)],
                     "results": results})
        timed = [r for r in results if "kernel_tflops" in r]
        best_tile = max((r for r in timed if r["impl"] in ("tlgemm TileLang", "TileLang tile")),
                        key=lambda r: r["kernel_tflops"], default=None)
        best = "-" if best_tile is None else f"{best_tile['kernel_tflops']:6.1f} ({best_tile['info']})"
        print(f"{M:>4} x {N:>5} x {K:>5}  DeepGEMM {DEEPGEMM_H800_TFLOPS[(M, N, K)]:5d} | "
              + " | ".join(f"{r['impl']} {r['kernel_tflops']:6.1f} ({r['do_bench_tflops']:6.1f}, "
                           f"fresh {r['kernel_fresh_tflops']:6.1f})"
                           for r in timed if r["impl"] != "TileLang tile")
              + f" | best tile {best}", flush=True)
        # after every row, atomically: a failure or a kill later keeps what was measured
        write_json(pathlib.Path(args.out), {"environment": env, "calls": args.calls, "rows": rows})


if __name__ == "__main__":
    main()
