"""The TileLang persistent GEMM with and without Stream-K over its last partial wave, by how full that wave is, one run.

    python benchmarks/streamk_tail.py [--out PATH] [--rep MS] [--rounds N]   (default $OUT/streamk_tail.json)

For square-ish shapes whose 128x256 tiles leave last waves from 6% to 88% full on the device's
SMs, in bf16 and fp8 (e4m3 in, bf16 out): select()'s schedule (``tlgemm.explain``) and the same
schedule with Stream-K over the tiles of its last wave (``Schedule.streamk(tiles % SMs)``),
beside cuBLAS (torch.matmul / torch._scaled_mm with unit scales). C = A · Wᵀ, K-major
operands. Each kernel, cuBLAS included, is checked first against the float64 product of the same
inputs on a NaN-poisoned output (tlgemm.testing.assert_gemm_close: DESIGN.md's bound for the
input dtype; a wrong one stops the run);
then the kernels are timed in ``--rounds`` interleaved rounds (triton.testing.do_bench
medians), and the median round is reported, with the spread.
"""
import argparse
import json
import os
import statistics

import torch

import tlgemm
from core_speed import DTYPES
from schedule_variants import by_do_bench, compile_ahead, measure

SHAPES = ((5120, 5120, 8192), (6656, 6656, 8192), (5632, 5632, 8192), (8192, 8192, 8192), (7680, 7680, 8192),
          (6144, 6144, 8192), (4096, 7168, 16384), (4096, 4096, 4096))


def schedules(a, w):
    plan = tlgemm.explain(a, w.t(), backend="tilelang", out_dtype=torch.bfloat16)
    s = plan.schedule
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiles = -(-a.shape[0] // s.block_m) * -(-w.shape[0] // s.block_n)
    out = {"select": s}
    if tiles % sms and not s.streamk_tiles:
        out["streamk_tail"] = s.streamk(tiles % sms)
    return out, tiles, sms


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "streamk_tail.json"))
    parser.add_argument("--rep", type=int, default=100, help="do_bench measuring time per kernel and round, ms")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = []
    for name, dtype in DTYPES.items():
        for M, N, K in SHAPES:
            meta_a = torch.empty(M, K, device="meta", dtype=dtype)
            meta_w = torch.empty(N, K, device="meta", dtype=dtype)
            work.append((name, dtype, M, N, K, *schedules(meta_a, meta_w)))

    compile_ahead([(dtype, M, N, K, variants) for _, dtype, M, N, K, variants, _, _ in work])
    rows = []
    for name, dtype, M, N, K, variants, tiles, sms in work:
        row = measure(name, dtype, M, N, K, variants, args.rounds, by_do_bench(args.rep))
        row.update(tiles=tiles, last_wave=(tiles % sms) / sms)
        rows.append(row)
        print(f"{name} {M}x{N}x{K} tiles {tiles} last wave {row['last_wave']:.2f}: "
              + "  ".join(f"{k} {statistics.median(v):.0f} [{min(v):.0f}-{max(v):.0f}]"
                          for k, v in row["rounds"].items()), flush=True)
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
