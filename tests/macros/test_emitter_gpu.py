"""GPU: the emitter GEMM (WGMMAEmitter + pipelined swizzled copies) against the float64 reference."""

import pytest
import torch

from tlgemm.testing import assert_gemm_close, poisoned, random_operand, reference_gemm

pytestmark = pytest.mark.gpu

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32, "e4m3": torch.float8_e4m3fn,
         "e5m2": torch.float8_e5m2, "s8": torch.int8, "u8": torch.uint8}
OUT = {"f32": torch.float32, "f16": torch.float16, "s32": torch.int32}

CASES = [
    # a, b, acc, a_major, b_major, a_source, block_m, block_n, block_k, warpgroups_m
    ("bf16", "bf16", "f32", "K", "K", "shared", 128, 128, 64, 1),
    ("bf16", "bf16", "f32", "K", "K", "shared", 128, 256, 64, 2),
    ("bf16", "bf16", "f32", "K", "K", "shared", 64, 96, 64, 1),
    ("bf16", "bf16", "f32", "K", "K", "shared", 128, 192, 64, 1),
    ("bf16", "bf16", "f32", "K", "K", "shared", 256, 128, 64, 2),
    ("f16", "f16", "f32", "MN", "MN", "shared", 128, 128, 64, 1),
    ("f16", "f16", "f16", "K", "MN", "shared", 128, 64, 64, 1),
    ("bf16", "bf16", "f32", "MN", "K", "shared", 128, 128, 64, 1),
    ("tf32", "tf32", "f32", "K", "K", "shared", 128, 128, 32, 1),
    ("e4m3", "e4m3", "f32", "K", "K", "shared", 128, 128, 128, 1),
    ("e4m3", "e5m2", "f16", "K", "K", "shared", 128, 256, 128, 2),
    ("e5m2", "e5m2", "f32", "K", "K", "shared", 64, 64, 128, 1),
    ("s8", "s8", "s32", "K", "K", "shared", 128, 128, 128, 1),
    ("u8", "s8", "s32", "K", "K", "shared", 128, 128, 128, 1),
    ("bf16", "bf16", "f32", "K", "K", "register", 64, 128, 64, 1),
    ("f16", "f16", "f32", "K", "MN", "register", 64, 256, 64, 1),
    ("bf16", "bf16", "f32", "K", "K", "register", 128, 128, 64, 2),
    ("f16", "f16", "f32", "K", "K", "register", 256, 128, 64, 2),
]


@pytest.mark.parametrize("a,b,acc,a_major,b_major,a_source,bm,bn,bk,wgm", CASES)
def test_emitter_gemm_matches_reference(a, b, acc, a_major, b_major, a_source, bm, bn, bk, wgm, generator):
    from tlgemm.tilelang.emitter_gemm import compile_kernel, emitter_gemm

    M, N, K = 2 * bm, 2 * bn, 4 * bk
    func = emitter_gemm(M, N, K, a, b, acc, str(OUT[acc]).replace("torch.", ""), block_m=bm, block_n=bn,
                        block_k=bk, a_major=a_major, b_major=b_major, a_source=a_source, warpgroups_m=wgm)
    kernel = compile_kernel(func)
    a_mk = random_operand((M, K), TORCH[a], generator=generator)
    b_kn = random_operand((K, N), TORCH[b], generator=generator)
    a_dev = (a_mk if a_major == "K" else a_mk.t()).contiguous().cuda()
    b_dev = (b_kn.t() if b_major == "K" else b_kn).contiguous().cuda()
    c = poisoned((M, N), OUT[acc], "cuda")
    kernel(a_dev, b_dev, c)
    torch.cuda.synchronize()
    ref = reference_gemm(a_mk, b_kn)
    if acc == "s32":
        assert torch.equal(c.cpu().to(torch.float64), ref)
    else:
        allow_tf32 = a == "tf32"
        dtype = TORCH[a] if a != "tf32" else torch.float32
        assert_gemm_close(c.cpu(), ref, dtype, allow_tf32=allow_tf32)
