"""select()'s dense schedules against those of a reference revision of the model, one run.

    python benchmarks/selection_ab.py --reference MODULE [--backend tilelang|triton] [--pow2-buckets] [--out PATH]
        [--rounds N] [--calls N] [--tokens M,M,..] [--weights N:K,N:K,..]

MODULE is an importable copy of an earlier ``schedules/selection.py`` (for example
``tlgemm.schedules._reference_selection``, a file placed there for the run). For bf16 and fp8
(e4m3 in, bf16 out), C = A · Wᵀ with K-major operands, on weight shapes N x K (``--weights``,
default the LLM weights below) and token counts M (``--tokens``, default 1 to 4096), the
schedule the library picks (``tlgemm.explain``: select() on M's bucket with its m_min, the first
candidate ``--backend``'s matmul runs) is compared with the reference model's pick under the same
rule; only shapes where the two differ are run. Each kernel, cuBLAS (torch.matmul /
torch._scaled_mm with unit scales) included, is checked first against the float64 product of the
same inputs on a NaN-poisoned output (tlgemm.testing.assert_gemm_close; a wrong one stops the run),
then timed in ``--rounds`` interleaved rounds by kernel time (tlgemm.bench.kernel_time_us: median of
``--calls`` calls, L2 flushed before each); the JSON keeps every round.
"""
import argparse
import importlib
import os

import torch

import tlgemm
from core_speed import DTYPES
from schedule_variants import by_kernel_time, measure_all
from tlgemm.api import runs_schedule
from tlgemm.schedules import m_bucket

WEIGHTS = ((4096, 7168), (7168, 16384), (7168, 2048), (2112, 7168), (24576, 1536), (14336, 4096), (1024, 1024))
TOKENS = (1, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 4096)


def picks(reference, M, N, K, dtype, sms, smem, backend, pow2_buckets=False):
    """{"select": the library's pick, "reference": the reference model's, for M's bucket
    (``tlgemm.schedules.m_bucket``, or with ``pow2_buckets`` the power of two above M, as the
    library's buckets were up to HALF_BUCKETS_ABOVE before they were halved above it)}."""
    a = torch.empty(M, K, device="meta", dtype=dtype)
    w = torch.empty(N, K, device="meta", dtype=dtype)
    ours = tlgemm.explain(a, w.t(), backend=backend, out_dtype=torch.bfloat16).schedule
    name = str(dtype).removeprefix("torch.")
    m_min, bucket = m_bucket(M)
    if pow2_buckets:
        bucket = 1 << (M - 1).bit_length()
        m_min = bucket // 2 + 1
    sel = reference.select(bucket, N, K, (name, name, "bfloat16"), sms, smem, explain=True, m_min=m_min)
    theirs = next(c.schedule for c in sel.candidates if runs_schedule(backend, "matmul", c.schedule))
    return {"select": ours, "reference": theirs}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, help="module path of the reference selection model")
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "selection_ab.json"))
    parser.add_argument("--backend", choices=("tilelang", "triton"), default="tilelang")
    parser.add_argument("--pow2-buckets", action="store_true",
                        help="the reference picks for M's power-of-two bucket (the library's buckets before halves)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--weights", default=",".join(f"{n}:{k}" for n, k in WEIGHTS),
                        help="comma-separated N:K weight shapes (default: WEIGHTS)")
    args = parser.parse_args()
    reference = importlib.import_module(args.reference)
    props = torch.cuda.get_device_properties(0)
    sms, smem = props.multi_processor_count, props.shared_memory_per_block_optin
    work = []
    for name, dtype in DTYPES.items():
        for N, K in (tuple(map(int, w.split(":"))) for w in args.weights.split(",")):
            for M in map(int, args.tokens.split(",")):
                variants = picks(reference, M, N, K, dtype, sms, smem, args.backend, args.pow2_buckets)
                if variants["select"] != variants["reference"]:
                    work.append((name, dtype, M, N, K, variants))
    print(f"{len(work)} shapes where the picks differ", flush=True)

    def describe(row):
        tflops, schedules = row["tflops"], row["schedules"]
        return (f"{row['dtype']} {row['M']}x{row['N']}x{row['K']}: select/reference "
                f"{tflops['select'] / tflops['reference']:.3f}  select {tflops['select']:.1f} [{schedules['select']}]  "
                f"reference {tflops['reference']:.1f} [{schedules['reference']}]  cublas {tflops['cublas']:.1f}")

    measure_all(work, args.rounds, by_kernel_time(args.calls), args.out, describe, backend=args.backend,
                reference=args.reference)


if __name__ == "__main__":
    main()
