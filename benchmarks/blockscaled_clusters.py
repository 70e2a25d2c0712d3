"""The TileLang block-scaled FP8 kernel at large M: one CTA per tile against 2-CTA clusters
with TMA multicast, beside cuBLAS's block-wise path, one run.

    python benchmarks/blockscaled_clusters.py [--out PATH] [--rounds R]   ($OUT/clusters.json)

For M = 4096 on DeepSeek-V3's (N, K) pairs: the default schedule (128x128 tiles on two
consumer warpgroups, 4 stages), the same with 5 stages, and the cluster(2) forms with raster m
(B multicast) and raster n (A multicast), with 4 and 5 stages, on tlgemm.bench's fp8-block
inputs (``blockscaled_inputs``, A's scales outer-dim-major). Each is first checked against the
float64 reference on a NaN-poisoned output (``tlgemm.bench.check``; a wrong one stops the
run), then timed with triton.testing.do_bench in R interleaved rounds (every candidate and
cuBLAS's block-wise path once per round; the median of the rounds is reported).
"""
import argparse
import json
import os
import statistics

import torch
import triton

from tlgemm._checks import cuda_limits
from tlgemm.bench import blockscaled_inputs, check_blockscaled, check_cublas_blockwise, cublas_blockwise
from tlgemm.tilelang.launch import blockscaled_matmul, default_blockscaled_schedule

BF16 = torch.bfloat16
PAIRS = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "clusters.json"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--m", type=int, default=4096)
    args = parser.parse_args()
    sms, smem_limit = cuda_limits(torch.cuda.current_device())
    rows = []
    for N, K in PAIRS:
        M = args.m
        base = default_blockscaled_schedule(M, BF16, smem_limit, N=N, num_sms=sms)
        kinds = {"default": base, "5 stages": base.stages(5)}
        for stages in (base.num_stages, 5):
            kinds[f"cluster, raster m, {stages} stages"] = base.stages(stages).cluster(2)
            kinds[f"cluster, raster n, {stages} stages"] = base.stages(stages).map("grouped_n").cluster(2)
        inp, ref = blockscaled_inputs(M, N, K)
        calls, errors = {}, {}
        for kind, s in kinds.items():
            def fn(i, s=s):
                return blockscaled_matmul(i.a, i.w, i.scale_a_mn, i.scale_b, s, out=i.out)

            errors[kind] = check_blockscaled(fn, inp, ref, f"{kind} {M}x{N}x{K}")
            calls[kind] = (lambda fn=fn: fn(inp))
        errors["cuBLAS block-wise"] = check_cublas_blockwise(inp, ref, f"cuBLAS block-wise {M}x{N}x{K}")
        calls["cuBLAS block-wise"] = lambda: cublas_blockwise(inp)
        times = {kind: [] for kind in calls}
        for _ in range(args.rounds):
            for kind, fn in calls.items():
                times[kind].append(triton.testing.do_bench(fn, warmup=10, rep=50))
        flops = 2 * M * N * K
        tflops = {kind: flops / statistics.median(ts) / 1e9 for kind, ts in times.items()}
        spread = {kind: (max(ts) - min(ts)) / statistics.median(ts) for kind, ts in times.items()}
        rows.append({"M": M, "N": N, "K": K, "schedules": {k: str(s) for k, s in kinds.items()}, "tflops": tflops,
                     "round_spread": spread, "rel_err": errors})
        print(f"{M} x {N:>5} x {K:>5}: " + " | ".join(f"{k} {v:.0f} (±{spread[k] * 50:.0f}%)"
                                                     for k, v in tflops.items()), flush=True)
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rounds": args.rounds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
