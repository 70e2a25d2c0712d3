"""The TileLang block-scaled FP8 kernel over tile shapes, on DeepGEMM's shape table, one run.

    python benchmarks/blockscaled_tiles.py [--out PATH]     (default $OUT/bs_tiles.json, or /tmp)

For each shape: every candidate tile (64-row tiles on one consumer warpgroup for M = 64,
those and 128-row tiles on two for M = 128, 128-row tiles with block_n 96..192, 224 and 256
for large M, the last two with their temporary in two parts, 128 and 256 also with raster
"n"; block_n in steps of 16, powers of two or not), with as many stages (<= 8) as the
device's shared memory holds and, for 128-row tiles, also 4 (the default's), on tlgemm.bench's
fp8-block inputs (``blockscaled_inputs``). Each candidate is first checked against the
float64 reference on a NaN-poisoned output (``tlgemm.bench.check``; a wrong one stops the
run), then timed with triton.testing.do_bench, beside cuBLAS's block-wise torch._scaled_mm on
the same inputs; A's scales outer-dim-major for both. The SM count and shared-memory limit are
the device's. Prints the six fastest per shape; the JSON holds all.
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
                                    blockscaled_spec, blockscaled_stages_that_fit)

FP8, BF16 = torch.float8_e4m3fn, torch.bfloat16
PAIRS = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
SHAPES = [(m, n, k) for n, k in PAIRS for m in (64, 128, 4096)] + [(1000, 2112 + 16 * 7, 384)]


def schedules(bm, bn, wg, smem_limit, raster="m"):
    most = blockscaled_stages_that_fit(Schedule(block_m=bm, block_n=bn, block_k=128, num_stages=8,
                                                num_warpgroups=wg, raster=raster).persistent(), BF16, smem_limit)
    return [most.stages(s) for s in sorted({most.num_stages, min(most.num_stages, 4)} if bm == 128
                                           else {most.num_stages})]


def candidates(M, smem_limit):
    if M <= 64:
        tiles = [(64, bn, 1) for bn in range(16, 193, 16)]
    elif M <= 128:
        tiles = [(128, bn, 2) for bn in range(16, 193, 16)] + [(64, bn, 1) for bn in (32, 64, 96, 128)]
    else:
        tiles = ([(128, bn, 2) for bn in (96, 112, 128, 144, 160, 176, 192, 224, 256)]
                 + [(128, bn, 2, "n") for bn in (128, 256)])
    return [s for tile in tiles for s in schedules(*tile[:3], smem_limit, *tile[3:])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "bs_tiles.json"))
    args = parser.parse_args()
    sms, smem_limit = cuda_limits(torch.cuda.current_device())
    specs = {blockscaled_spec(FP8, FP8, BF16, s, sms, read_once=operands_read_once(M, N, s))
             for M, N, _ in SHAPES for s in candidates(M, smem_limit)}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(_compiled_blockscaled, specs))
    rows = []
    for M, N, K in SHAPES:
        inp, ref = blockscaled_inputs(M, N, K)
        flops = 2 * M * N * K
        results = []
        for s in candidates(M, smem_limit):
            def fn(i, s=s):
                return blockscaled_matmul(i.a, i.w, i.scale_a_mn, i.scale_b, s, out=i.out)

            err = check_blockscaled(fn, inp, ref, f"{s} {M}x{N}x{K}")
            ms = triton.testing.do_bench(lambda: fn(inp), warmup=10, rep=40)
            tile = f"{s.block_m}x{s.block_n}/{s.num_stages}" + ("n" if s.raster == "n" else "")
            results.append({"tile": tile, "pow2": s.has_pow2_block_n,
                            "tflops": flops / ms / 1e9, "rel_err": err})
        try:
            check_cublas_blockwise(inp, ref, f"cuBLAS block-wise {M}x{N}x{K}")
            ms = triton.testing.do_bench(lambda: cublas_blockwise(inp), warmup=10, rep=40)
            cublas = flops / ms / 1e9
        except RuntimeError:  # cuBLAS has no block-wise kernel for the shape
            cublas = None
        results.sort(key=lambda r: -r["tflops"])
        rows.append({"M": M, "N": N, "K": K, "cublas_blockwise_tflops": cublas, "results": results})
        print(f"{M}x{N}x{K}: cuBLAS {cublas or 0:.0f} | " + "  ".join(f"{r['tflops']:.0f}@{r['tile']}"
                                                                    for r in results[:6]), flush=True)
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "sms": sms, "smem_limit": smem_limit, "rows": rows}, f,
                  indent=1)


if __name__ == "__main__":
    main()
