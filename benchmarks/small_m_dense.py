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
import json
import os

import torch

import tlgemm
from core_speed import DTYPES
from schedule_variants import by_kernel_time, compile_ahead, measure
from tlgemm.schedules import Schedule
from tlgemm.schedules.dtypes import gemm_dtypes
from tlgemm.schedules.grid import cdiv, num_k_iters
from tlgemm.schedules.selection import _decompositions, _score, shared_memory_bytes

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
    """{label: schedule}: select()'s and the fixed set, each tile at 6 and at the most stages."""
    a = torch.empty(M, K, device="meta", dtype=dtype)
    w = torch.empty(N, K, device="meta", dtype=dtype)
    out = {"select": tlgemm.explain(a, w.t(), backend="tilelang", out_dtype=torch.bfloat16).schedule}
    types = gemm_dtypes((str(dtype).removeprefix("torch."),) * 2 + ("bfloat16",))
    block_k = 128 // dtype.itemsize
    for swap, bm, bn in tiles_for(M):
        rows, cols = (N, M) if swap else (M, N)
        warpgroups = cdiv(bm * bn, 128 * 128)
        base = Schedule(block_m=bm, block_n=bn, block_k=block_k, num_stages=1, num_warpgroups=warpgroups,
                        is_swap_ab=swap)
        most = max(n for n in range(1, MAX_PROBED_STAGES + 1) if shared_memory_bytes(base.stages(n), types) <= smem)
        for stages in sorted({min(6, most), most}):
            s = base.stages(stages)
            tiles, iters = cdiv(rows, bm) * cdiv(cols, bn), num_k_iters(K, s)
            scored = [_score(d, mode, rows, cols, K, types, sms, smem)
                      for mode, d in _decompositions(s, tiles, iters, sms) if mode != "split-K"]
            best = min(scored, key=lambda c: c.time_us)
            label = f"{'swap ' if swap else ''}{bm}x{bn}/{stages} {best.mode}"
            out[label] = best.schedule
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
    compile_ahead([item[1:] for item in work])
    rows = []
    for name, dtype, M, N, K, variants in work:
        row = measure(name, dtype, M, N, K, variants, args.rounds, by_kernel_time(args.calls))
        rows.append(row)
        tflops = row["tflops"]
        best = max((k for k in tflops if k != "cublas"), key=tflops.get)
        print(f"{name} {M}x{N}x{K}: cublas {tflops['cublas']:.0f}  select {tflops['select']:.0f} "
              f"[{variants['select']}]  best {best} {tflops[best]:.0f}", flush=True)
        with open(args.out, "w") as f:  # after every row: a run cut short keeps what it measured
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
