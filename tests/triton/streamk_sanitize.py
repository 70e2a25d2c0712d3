"""Run the Stream-K kernel once, at a small shape whose tiles are split over programs, for
compute-sanitizer (not a pytest module):

    compute-sanitizer --tool racecheck python tests/triton/streamk_sanitize.py
    compute-sanitizer --tool memcheck  python tests/triton/streamk_sanitize.py

Prints "streamk_sanitize: ok" and exits 0 when the result matches the float64 reference.
"""

import torch

import tlgemm.triton as T
from tlgemm.schedules import Schedule, streamk_plan, tile_contributors
from tlgemm.testing import assert_gemm_close, poisoned, random_operand, reference_gemm


def main() -> None:
    M, N, K = 200, 136, 520  # 4 x 3 tiles of 64 x 64, 9 K-iterations each (the last one masked)
    schedule = Schedule(block_m=64, block_n=64, block_k=64).streamk(12).persistent(8)
    plan = streamk_plan(M, N, K, schedule)
    split = [t for t in range(plan.total_tiles) if len(tile_contributors(t, plan)) > 1]
    assert split, "the shape must split some tile over several programs"
    g = torch.Generator().manual_seed(2024)
    a = random_operand((M, K), torch.bfloat16, generator=g, device="cuda")
    b = random_operand((N, K), torch.bfloat16, generator=g, device="cuda").T
    scale_a = (torch.rand(M, generator=g) + 0.5).cuda()
    scale_b = (torch.rand(N, generator=g) + 0.5).cuda()
    bias = random_operand((N,), torch.bfloat16, generator=g, device="cuda")
    out = poisoned((M, N), torch.bfloat16, "cuda")
    T.streamk_matmul(a, b, schedule, out=out, scale_a=scale_a, scale_b=scale_b, bias=bias)
    torch.cuda.synchronize()
    ref = reference_gemm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias)
    err = assert_gemm_close(out, ref, torch.bfloat16)
    print(f"streamk_sanitize: ok (split tiles {split}, relative error {err:.2e})")


if __name__ == "__main__":
    main()
