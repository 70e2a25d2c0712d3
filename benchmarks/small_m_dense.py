"""Dense TileLang GEMM at small M: select()'s schedule against swap-AB and plain tiles with more stages, one run.

    python benchmarks/small_m_dense.py [--out PATH] [--rounds N] [--calls N]   (default $OUT/small_m_dense.json)

For M in {1, 16, 32, 64, 128} on LLM weight shapes (N x K), bf16 and fp8 (e4m3 in, bf16 out), C = A · Wᵀ
with K-major operands: select()'s schedule (``tlgemm.explain``) and a fixed set of other tiles — swap-AB
(64 or 128 rows of N by the tokens) and plain 64-row tiles — each with 6 stages (select()'s cap) and with
as many as the shared memory holds (at most 16), under the decomposition select()'s model prefers for
that tile; beside cuBLAS (torch.matmul / torch._scaled_mm with unit scales). Every kernel, cuBLAS
included, is checked first against the float64 product of the same inputs on a NaN-poisoned output
(tlgemm.testing.assert_gemm_close; a wrong one stops the run). Then all are timed in ``--rounds``
interleaved rounds by kernel time (tlgemm.bench.kernel_time_us: median of ``--calls`` calls, L2 flushed
before each), and the median round is reported with every round in the JSON.
"""
import argparse
import os

import torch

import tlgemm
from core_speed import DTYPES
from schedule_variants import by_kernel_time, measure_all
from tlgemm.api import runs_schedule
from tlgemm.schedules import select, shared_memory_bytes

WEIGHTS = ((4096, 7168), (7168, 16384), (7168, 2048))
TOKENS = (1, 16, 32, 64, 128)
MAX_PROBED_STAGES = 16


def tiles_for(M):
    """(swap-AB, block_m, block_n) probed at M tokens."""
    cols = max(16, 1 << (M - 1).bit_length())
    if M <= 64:
        return [(True, 64, cols), (True, 128, cols), (False, 64, min(cols, 64)), (False, 64, 2 * min(cols, 64))]
    return [(False, 64, 64), (False, 64, 128), (False, 128, 64), (False, 128, 128)]


def probed(M, N, K, dtype, sms, smem):
    """{label: schedule}: select()'s and the fixed set, each tile at 6 and at the most stages,
    under the decomposition select()'s model ranks first for that tile among those the TileLang
    matmul runs (``tlgemm.api.runs_schedule``)."""
    a = torch.empty(M, K, device="meta", dtype=dtype)
    w = torch.empty(N, K, device="meta", dtype=dtype)
    out = {"select": tlgemm.explain(a, w.t(), backend="tilelang", out_dtype=torch.bfloat16).schedule}
    types = (str(dtype).removeprefix("torch."),) * 2 + ("bfloat16",)
    ranked = [c for c in select(M, N, K, types, sms, smem, explain=True).candidates
              if runs_schedule("tilelang", "matmul", c.schedule)]
    for swap, bm, bn in tiles_for(M):
        best = next((c for c in ranked if (c.schedule.is_swap_ab, c.schedule.block_m, c.schedule.block_n)
                     == (swap, bm, bn)), None)
        if best is None:
            continue  # a tile larger than the padded problem: select() does not consider it
        most = max(n for n in range(1, MAX_PROBED_STAGES + 1)
                   if shared_memory_bytes(best.schedule.stages(n), types) <= smem)
        for stages in sorted({min(6, most), most}):
            out[f"{'swap ' if swap else ''}{bm}x{bn}/{stages} {best.mode}"] = best.schedule.stages(stages)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "small_m_dense.json"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    sms, smem = props.multi_processor_count, props.shared_memory_per_block_optin
    work = [(name, dtype, M, N, K, probed(M, N, K, dtype, sms, smem))
            for name, dtype in DTYPES.items() for N, K in WEIGHTS for M in map(int, args.tokens.split(","))]

    def describe(row):
        tflops = row["tflops"]
        best = max((k for k in tflops if k != "cublas"), key=tflops.get)
        return (f"{row['dtype']} {row['M']}x{row['N']}x{row['K']}: cublas {tflops['cublas']:.0f}  select "
                f"{tflops['select']:.0f} [{row['schedules']['select']}]  best {best} {tflops[best]:.0f}")

    measure_all(work, args.rounds, by_kernel_time(args.calls), args.out, describe)


if __name__ == "__main__":
    main()
