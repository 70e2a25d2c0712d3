"""Side-by-side GEMM benchmark: tlgemm (TileLang, Triton) vs cuBLAS, TileLang T.gemm and the
Triton tutorial matmul. The harness is tlgemm.bench; ``--help`` lists the options.

    python benchmarks/run.py --sets square,llm --quick
    python benchmarks/run.py --from-json benchmarks/results/bench_h100_square_llm_quick.json \
        benchmarks/results/bench_h100_fp8_blockscaled_quick.json \
        benchmarks/results/bench_h100_fp8_per_tensor_deepgemm_shapes_quick.json   # benchmarks/RESULTS.md's runs
"""

import sys

from tlgemm.bench import main

if __name__ == "__main__":
    sys.exit(main(prog="python benchmarks/run.py"))
