"""The TileLang block-scaled FP8 kernel at small M: plain tiles against swap-AB tiles, one run.

    python benchmarks/blockscaled_small_m.py [--out PATH]     (default $OUT/small_m.json or /tmp)

For M in (1, 16, 32, 64, 128) on DeepSeek-V3's (N, K) pairs: the default schedule, every
plain 64-row tile (block_n 16..128) and every swap-AB tile (64 or 128 rows over N, tokens
block_n 16..64 wide, at least the next multiple of 16 above M's share) are checked against a
float64 reference on dequantised inputs (random non-unit scales, output poisoned; a failing
one is listed as BAD) and timed with triton.testing.do_bench, scales passed in the layouts the
kernel reads without a copy (A's outer-dim-major, B's transposed), the default once more with
both scales row-major (each copied per call), and cuBLAS's block-wise
torch._scaled_mm on the same inputs (null where cuBLAS rejects the shape); M = 4096 for
the default alone (the cost of row-major scales at large M). Prints the fastest of each kind per shape.
"""
import argparse
import json
import os
from concurrent.futures import ThreadPoolExecutor

import torch
import triton

from tlgemm.quantize import quantize_fp8_blockwise
from tlgemm.schedules import Schedule
from tlgemm.tilelang.launch import (_blockscaled_smem, _compiled_blockscaled, _device_limits, blockscaled_matmul,
                                    blockscaled_spec, default_blockscaled_schedule)

FP8, BF16 = torch.float8_e4m3fn, torch.bfloat16
PAIRS = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
MS = (1, 16, 32, 64, 128, 4096)


def with_stages(schedule, smem_limit):
    stages = 2
    while stages < 8 and _blockscaled_smem(schedule.stages(stages + 1), FP8, FP8, BF16) <= smem_limit:
        stages += 1
    return schedule.stages(stages)


def candidates(M, smem_limit):
    if M > 128:
        return []
    plain = [Schedule(block_m=64, block_n=bn, block_k=128, num_stages=2, num_warpgroups=1).persistent()
             for bn in (16, 32, 64, 128)]
    widest = max(16, min(64, -(-M // 16) * 16))
    swapped = [Schedule(block_m=bm, block_n=bn, block_k=128, num_stages=2, num_warpgroups=bm // 64)
               .persistent().swap_ab() for bm in (64, 128) for bn in (16, 32, 48, 64) if bn <= widest]
    return [with_stages(s, smem_limit) for s in plain + swapped]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "small_m.json"))
    args = parser.parse_args()
    sms, smem_limit = _device_limits(torch.cuda.current_device())
    shapes = [(m, n, k) for n, k in PAIRS for m in MS]
    defaults = {shape: default_blockscaled_schedule(shape[0], BF16, smem_limit, N=shape[1], num_sms=sms)
                for shape in shapes}
    specs = {blockscaled_spec(FP8, FP8, BF16, s, sms) for M, _, _ in shapes for s in candidates(M, smem_limit)}
    specs |= {blockscaled_spec(FP8, FP8, BF16, s, sms) for s in defaults.values()}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(_compiled_blockscaled, specs))
    torch.manual_seed(0)
    rows = []
    for M, N, K in shapes:
        a, sa = quantize_fp8_blockwise(torch.randn(M, K, device="cuda"), block=(1, 128))
        b, sb = quantize_fp8_blockwise(torch.randn(N, K, device="cuda"), block=(128, 128))
        sa, sb = sa * torch.rand_like(sa).add(0.5), sb * torch.rand_like(sb).add(0.5)
        sa_mn, sb_t = sa.t().contiguous().t(), sb.t().contiguous().t()
        ref = ((a.double() * sa.double().repeat_interleave(128, 1))
               @ (b.double() * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:N]).t())
        flops = 2 * M * N * K
        results = []
        for kind, s in [("default", defaults[(M, N, K)])] + [("swap" if s.is_swap_ab else "plain", s)
                                                              for s in candidates(M, smem_limit)]:
            out = torch.full((M, N), float("nan"), dtype=BF16, device="cuda")
            blockscaled_matmul(a, b, sa_mn, sb_t, s, out=out)
            err = ((out.double() - ref).norm() / ref.norm()).item()
            ms = triton.testing.do_bench(lambda: blockscaled_matmul(a, b, sa_mn, sb_t, s, out=out),
                                         warmup=10, rep=40)
            results.append({"kind": kind, "schedule": str(s), "tflops": flops / ms / 1e9, "rel_err": err})
        s = defaults[(M, N, K)]
        ms = triton.testing.do_bench(lambda: blockscaled_matmul(a, b, sa, sb, s, out=out), warmup=10, rep=40)
        copied = flops / ms / 1e9
        try:
            ms = triton.testing.do_bench(lambda: torch._scaled_mm(a, b.t(), scale_a=sa_mn, scale_b=sb.t(),
                                                                  out_dtype=BF16), warmup=10, rep=40)
            cublas = flops / ms / 1e9
        except RuntimeError:  # cuBLAS has no block-wise kernel for some small M
            cublas = None
        rows.append({"M": M, "N": N, "K": K, "cublas_blockwise_tflops": cublas, "results": results,
                     "default_row_major_scales_tflops": copied})
        best = {kind: max((r for r in results if r["kind"] == kind), key=lambda r: r["tflops"])
                for kind in ("default", "plain", "swap") if any(r["kind"] == kind for r in results)}
        bad = [r["schedule"] for r in results if not r["rel_err"] < 1e-2]
        print(f"{M:>4} x {N:>5} x {K:>5}: cuBLAS {cublas or 0:6.1f} | row-major scales {copied:6.1f} | "
              + " | ".join(f"{kind} {r['tflops']:6.1f} ({r['schedule']})" for kind, r in best.items())
              + (f" | BAD {bad}" if bad else ""), flush=True)
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
