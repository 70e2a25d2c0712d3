"""The Triton block-scaled FP8 kernel over tile shapes, on DeepGEMM's shape table, one run.

    python benchmarks/triton_blockscaled_tiles.py [--out PATH]     (default $OUT/triton_bs_tiles.json, or /tmp)

For each shape of DeepGEMM's table: ``tlgemm.triton.blockscaled_matmul`` on 64-row tiles (4
warps) and 128-row tiles (8 warps), block_n 16 to 128 (powers of two), 4 stages, persistent,
on tlgemm.bench's fp8-block inputs (A's scales outer-dim-major), beside the backend's default
schedule and cuBLAS's block-wise torch._scaled_mm. Each schedule is first checked against the
float64 reference on a NaN-poisoned output (``tlgemm.bench.check``; a wrong one stops the run),
then timed with triton.testing.do_bench after a short untimed run (cuBLAS first on each
shape). Prints the five fastest per shape; the JSON holds all.
"""
import argparse
import json
import os

import torch
import triton

from tlgemm import triton as T
from tlgemm.bench import blockscaled_inputs, check_blockscaled, check_cublas_blockwise, cublas_blockwise
from tlgemm.schedules import Schedule

PAIRS = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
SHAPES = [(m, n, k) for n, k in PAIRS for m in (64, 128, 4096)]


def candidates(M):
    rows = (64, 128) if M <= 128 else (128,)
    return [Schedule(block_m=bm, block_n=bn, block_k=128, num_stages=4, num_warpgroups=bm // 64).persistent()
            for bm in rows for bn in (16, 32, 64, 128)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "triton_bs_tiles.json"))
    args = parser.parse_args()
    rows = []
    for M, N, K in SHAPES:
        inp, ref = blockscaled_inputs(M, N, K)
        flops = 2 * M * N * K
        check_cublas_blockwise(inp, ref, f"cuBLAS block-wise {M}x{N}x{K}")
        ms = triton.testing.do_bench(lambda: cublas_blockwise(inp), warmup=10, rep=40)
        cublas = flops / ms / 1e9
        results = []
        for s in [None, *candidates(M)]:
            def fn(i, s=s):
                return T.blockscaled_matmul(i.a, i.w, i.scale_a_mn, i.scale_b, s, out=i.out)

            label = "default" if s is None else f"{s.block_m}x{s.block_n}"
            err = check_blockscaled(fn, inp, ref, f"{label} {M}x{N}x{K}")
            triton.testing.do_bench(lambda: fn(inp), warmup=10, rep=10)  # after the first call's compile
            ms = triton.testing.do_bench(lambda: fn(inp), warmup=10, rep=40)
            results.append({"tile": label, "tflops": flops / ms / 1e9, "rel_err": err})
        results.sort(key=lambda r: -r["tflops"])
        rows.append({"M": M, "N": N, "K": K, "cublas_blockwise_tflops": cublas, "results": results})
        default = next(r["tflops"] for r in results if r["tile"] == "default")
        print(f"{M}x{N}x{K}: cuBLAS {cublas:.0f} default {default:.0f} | "
              + "  ".join(f"{r['tflops']:.0f}@{r['tile']}" for r in results[:5]), flush=True)
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
