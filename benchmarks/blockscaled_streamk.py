"""The TileLang block-scaled FP8 kernel at small M: Stream-K over all tiles against whole tiles, one run.

    python benchmarks/blockscaled_streamk.py

For M in (16, 64, 128) on DeepGEMM's (N, K) pairs: the whole-tile default (``default_blockscaled_schedule``
without K, which leaves Stream-K out: swap-AB 64x16 for M = 16, else 64-row tiles with block_n chosen to fill
the SMs) against Stream-K over all tiles on 64x64 and 64x80 tiles, on swap-AB 16- and 32-token tiles (M = 16),
and on swap-AB 64-token and 64x32 tiles (M >= 64). Each candidate is first checked against the float64
reference on a NaN-poisoned output (``tlgemm.bench.check``), then timed with triton.testing.do_bench in two
interleaved rounds (the better one printed), beside cuBLAS's block-wise torch._scaled_mm on the same inputs
(A's scales outer-dim-major for both). 132 SMs and 227 KiB of shared memory (the H100).
"""
from concurrent.futures import ThreadPoolExecutor

import torch
import triton

from tlgemm.bench import blockscaled_inputs, check_blockscaled, check_cublas_blockwise, cublas_blockwise
from tlgemm.schedules import Schedule
from tlgemm.tilelang import launch

FP8, BF16 = torch.float8_e4m3fn, torch.bfloat16
PAIRS = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
SMS, SMEM = 132, 232448
ALL_TILES = 10**6  # streamk_tiles at least every tile: Stream-K over all of them


def tile(block_n: int, swap: bool = False) -> Schedule:
    s = Schedule(block_m=64, block_n=block_n, block_k=128, num_stages=8, num_warpgroups=1).persistent()
    return (s.swap_ab() if swap else s).streamk(ALL_TILES)


def candidates(M: int, N: int):
    whole = launch.default_blockscaled_schedule(M, BF16, SMEM, N=N, num_sms=SMS)
    extra = ([("sk-swap16", tile(16, True)), ("sk-swap32", tile(32, True))] if M <= 32
             else [("sk-swap64", tile(64, True)), ("sk64x32", tile(32))])
    return [("whole", whole), ("sk64x64", tile(64)), ("sk64x80", tile(80))] + extra


def main():
    shapes = [(M, N, K) for M in (16, 64, 128) for N, K in PAIRS]
    specs = {launch.blockscaled_spec(FP8, FP8, BF16, s, SMS, tma_token_scales=t,
                                     read_once=launch.operands_read_once(M, N, s))
             for M, N, _ in shapes for _, s in candidates(M, N) for t in (False, True)}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(launch._compiled_blockscaled, specs))
    for M, N, K in shapes:
        inp, ref = blockscaled_inputs(M, N, K)
        flops = 2 * M * N * K
        results = {}
        for first in (True, False):
            for name, s in candidates(M, N):
                def fn(i, s=s):
                    return launch.blockscaled_matmul(i.a, i.w, i.scale_a_mn, i.scale_b, s, out=i.out)

                if first:
                    check_blockscaled(fn, inp, ref, f"{name} {M}x{N}x{K}")
                ms = triton.testing.do_bench(lambda: fn(inp), warmup=10, rep=40)
                results.setdefault(name, []).append(flops / ms / 1e9)
        check_cublas_blockwise(inp, ref, f"cuBLAS block-wise {M}x{N}x{K}")
        ms = triton.testing.do_bench(lambda: cublas_blockwise(inp), warmup=10, rep=40)
        whole = candidates(M, N)[0][1]
        print(f"{M}x{N}x{K} [{whole.block_m}x{whole.block_n}{' swap-AB' if whole.is_swap_ab else ''}]: "
              f"cuBLAS {flops / ms / 1e9:.0f} | " + "  ".join(f"{k}:{max(v):.0f}" for k, v in results.items()),
              flush=True)


if __name__ == "__main__":
    main()
