"""The TileLang block-scaled FP8 kernel at small M: plain tiles against swap-AB tiles, one run.

    python benchmarks/blockscaled_small_m.py [--out PATH]     (default $OUT/small_m.json or /tmp)

For M in (1, 16, 32, 64, 128) on DeepSeek-V3's (N, K) pairs: the default schedule, every
plain 64-row tile (block_n 16..128) and every swap-AB tile (64 or 128 rows over N, tokens
block_n 16..64 wide, at least the next multiple of 16 above M's share), on tlgemm.bench's
fp8-block inputs (``blockscaled_inputs``). Each is first checked against the float64
reference on a NaN-poisoned output (``tlgemm.bench.check``; a wrong one stops the run), then
timed with triton.testing.do_bench, A's scales outer-dim-major (the layout the kernel reads
fastest); the default once more with A's scales row-major (read in place, or for M > 128
copied per call); cuBLAS's block-wise torch._scaled_mm on the same inputs (null where cuBLAS
rejects the shape). M = 4096 for the default alone. Prints the fastest of each kind per shape.
"""
import argparse
import json
import os
from concurrent.futures import ThreadPoolExecutor

import torch
import triton

from tlgemm._checks import cuda_limits
from tlgemm.bench import blockscaled_inputs, check_blockscaled, check_cublas_blockwise, cublas_blockwise
from tlgemm.schedules import Schedule
from tlgemm.tilelang.launch import (_compiled_blockscaled, blockscaled_matmul, operands_read_once,
                                    blockscaled_spec, blockscaled_stages_that_fit, default_blockscaled_schedule)

FP8, BF16 = torch.float8_e4m3fn, torch.bfloat16
PAIRS = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
MS = (1, 16, 32, 64, 128, 4096)


def candidates(M, smem_limit):
    if M > 128:
        return []
    plain = [Schedule(block_m=64, block_n=bn, block_k=128, num_stages=8, num_warpgroups=1).persistent()
             for bn in (16, 32, 64, 128)]
    widest = max(16, min(64, -(-M // 16) * 16))
    swapped = [Schedule(block_m=bm, block_n=bn, block_k=128, num_stages=8, num_warpgroups=bm // 64)
               .persistent().swap_ab() for bm in (64, 128) for bn in (16, 32, 48, 64) if bn <= widest]
    return [blockscaled_stages_that_fit(s, BF16, smem_limit) for s in plain + swapped]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "small_m.json"))
    args = parser.parse_args()
    sms, smem_limit = cuda_limits(torch.cuda.current_device())
    shapes = [(m, n, k) for n, k in PAIRS for m in MS]
    defaults = {shape: default_blockscaled_schedule(shape[0], BF16, smem_limit, N=shape[1], num_sms=sms)
                for shape in shapes}
    specs = {blockscaled_spec(FP8, FP8, BF16, s, sms, read_once=operands_read_once(M, N, s))
             for M, N, K in shapes for s in [*candidates(M, smem_limit), defaults[(M, N, K)]]}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(_compiled_blockscaled, specs))
    rows = []
    for M, N, K in shapes:
        inp, ref = blockscaled_inputs(M, N, K)
        flops = 2 * M * N * K
        results = []
        for kind, s in [("default", defaults[(M, N, K)])] + [("swap" if s.is_swap_ab else "plain", s)
                                                              for s in candidates(M, smem_limit)]:
            def fn(i, s=s):
                return blockscaled_matmul(i.a, i.w, i.scale_a_mn, i.scale_b, s, out=i.out)

            err = check_blockscaled(fn, inp, ref, f"{s} {M}x{N}x{K}")
            ms = triton.testing.do_bench(lambda: fn(inp), warmup=10, rep=40)
            results.append({"kind": kind, "schedule": str(s), "tflops": flops / ms / 1e9, "rel_err": err})
        def row_major(i, s=defaults[(M, N, K)]):
            return blockscaled_matmul(i.a, i.w, i.scale_a, i.scale_b, s, out=i.out)

        check_blockscaled(row_major, inp, ref, f"default, row-major scales {M}x{N}x{K}")
        ms = triton.testing.do_bench(lambda: row_major(inp), warmup=10, rep=40)
        copied = flops / ms / 1e9
        try:
            check_cublas_blockwise(inp, ref, f"cuBLAS block-wise {M}x{N}x{K}")
            ms = triton.testing.do_bench(lambda: cublas_blockwise(inp), warmup=10, rep=40)
            cublas = flops / ms / 1e9
        except RuntimeError:  # cuBLAS has no block-wise kernel for some small M
            cublas = None
        rows.append({"M": M, "N": N, "K": K, "cublas_blockwise_tflops": cublas, "results": results,
                     "default_row_major_scales_tflops": copied})
        best = {kind: max((r for r in results if r["kind"] == kind), key=lambda r: r["tflops"])
                for kind in ("default", "plain", "swap") if any(r["kind"] == kind for r in results)}
        print(f"{M:>4} x {N:>5} x {K:>5}: cuBLAS {cublas or 0:6.1f} | row-major scales {copied:6.1f} | "
              + " | ".join(f"{kind} {r['tflops']:6.1f} ({r['schedule']})" for kind, r in best.items()), flush=True)
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
