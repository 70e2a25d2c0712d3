"""select()'s first-ranked dense candidates timed against each other and cuBLAS, one run.

    python benchmarks/ranked_candidates.py [--out PATH] [--tokens M,M,..] [--weights N:K,N:K,..]
        [--top N] [--rounds N] [--calls N]   (default $OUT/ranked_candidates.json)

For bf16 and fp8 (e4m3 in, bf16 out), C = A · Wᵀ with K-major operands, on weight shapes N x K
and token counts M: the schedule the library picks (``tlgemm.explain``: select() on M's bucket)
and the ``--top`` first candidates of select()'s ranking at the exact M that the TileLang matmul
runs (``tlgemm.api.runs_schedule``), one per tile shape, warpgroup count, decomposition and
swap-AB, so that the model's order can be checked where it is least sure (the backtest,
model_backtest.py, reads the JSON). Every kernel, cuBLAS included, is checked first against the
float64 product of the same inputs on a NaN-poisoned output (tlgemm.testing.assert_gemm_close; a
wrong one stops the run), then timed in ``--rounds`` interleaved rounds by kernel time
(tlgemm.bench.kernel_time_us: median of ``--calls`` calls, L2 flushed before each).
"""
import argparse
import os

import torch

import tlgemm
from core_speed import DTYPES
from schedule_variants import by_kernel_time, measure_all
from tlgemm.api import runs_schedule
from tlgemm.schedules import select

WEIGHTS = ((2112, 7168), (4096, 4096), (4096, 7168), (4096, 11008), (4096, 14336), (7168, 2048), (7168, 16384),
           (11008, 4096), (12288, 4096), (14336, 4096), (24576, 1536), (32768, 512))
TOKENS = (256, 512, 1024)


def ranked(M, N, K, dtype, sms, smem, top):
    """{label: schedule}: the library's pick, then select()'s first ``top`` runnable candidates at
    M, one per (tile, warpgroups, decomposition, swap-AB), less the pick."""
    a = torch.empty(M, K, device="meta", dtype=dtype)
    w = torch.empty(N, K, device="meta", dtype=dtype)
    out = {"select": tlgemm.explain(a, w.t(), backend="tilelang", out_dtype=torch.bfloat16).schedule}
    types = (str(dtype).removeprefix("torch."),) * 2 + ("bfloat16",)
    seen = set()
    for c in select(M, N, K, types, sms, smem, explain=True).candidates:
        s = c.schedule
        kind = (s.block_m, s.block_n, s.num_warpgroups, c.mode, s.is_swap_ab)
        if kind in seen or not runs_schedule("tilelang", "matmul", s):
            continue
        seen.add(kind)
        if s != out["select"]:
            out[f"rank {len(seen)}"] = s
        if len(seen) == top:
            break
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "ranked_candidates.json"))
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--weights", default=",".join(f"{n}:{k}" for n, k in WEIGHTS), help="N:K pairs")
    parser.add_argument("--top", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=12)
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    sms, smem = props.multi_processor_count, props.shared_memory_per_block_optin
    weights = [tuple(map(int, pair.split(":"))) for pair in args.weights.split(",")]
    work = [(name, dtype, M, N, K, ranked(M, N, K, dtype, sms, smem, args.top))
            for name, dtype in DTYPES.items() for N, K in weights for M in map(int, args.tokens.split(","))]

    def describe(row):
        tflops = row["tflops"]
        best = max((k for k in tflops if k != "cublas"), key=tflops.get)
        return (f"{row['dtype']} {row['M']}x{row['N']}x{row['K']}: cublas {tflops['cublas']:.0f}  select "
                f"{tflops['select']:.0f} [{row['schedules']['select']}]  best {best} {tflops[best]:.0f} "
                f"[{row['schedules'][best]}]")

    measure_all(work, args.rounds, by_kernel_time(args.calls), args.out, describe)


if __name__ == "__main__":
    main()
