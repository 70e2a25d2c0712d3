"""CPU: kernels built from WGMMAEmitter lower for sm_90a with exactly the predicted wgmma stream."""

import re

import pytest

pytest.importorskip("tilelang")

from tlgemm.macros.emitter import WGMMAEmitter, legal_n, widest_n  # noqa: E402
from tlgemm.tilelang.emitter_gemm import emitter_gemm, lower_to_cuda  # noqa: E402

_CTYPE = {"f16": "kFloat16", "bf16": "kBFloat16", "tf32": "kTensorFloat32", "e4m3": "kFloat8_e4m3",
          "e5m2": "kFloat8_e5m2", "s8": "kInt8", "u8": "kUInt8", "f32": "kFloat32", "s32": "kInt32"}
_OUT = {"f32": "float32", "f16": "float16", "s32": "int32"}

COMBOS = [
    ("f16", "f16", "f16", "K", "K"), ("f16", "f16", "f32", "K", "K"), ("f16", "f16", "f32", "MN", "MN"),
    ("bf16", "bf16", "f32", "K", "K"), ("bf16", "bf16", "f32", "MN", "K"), ("bf16", "bf16", "f32", "K", "MN"),
    ("tf32", "tf32", "f32", "K", "K"),
    ("e4m3", "e4m3", "f32", "K", "K"), ("e4m3", "e5m2", "f16", "K", "K"), ("e5m2", "e4m3", "f32", "K", "K"),
    ("e5m2", "e5m2", "f16", "K", "K"),
    ("s8", "s8", "s32", "K", "K"), ("s8", "u8", "s32", "K", "K"), ("u8", "s8", "s32", "K", "K"),
    ("u8", "u8", "s32", "K", "K"),
]

WGMMA = re.compile(r"tl::wgmma_(ss|rs)<tl::DataType::(\w+), tl::DataType::(\w+), tl::DataType::(\w+), "
                   r"(\d+), (\d+), (\d+), (\w+), (\w+), [-\d]+, [-\d]+>\(([^;]*)\);")


def _expected_stream(em: WGMMAEmitter, a, b, acc, a_major, b_major):
    """One wgmma per (j, i, ki) in issue order, with its descriptor start offsets (16-byte units)."""
    out = []
    for i, j, ki in em.atoms():
        k0 = ki * em.shape.inst_k
        a_off = em.a_params.atom_offset(i * 64, k0) >> 4
        b_off = em.b_params.atom_offset(j * em.shape.inst_n, k0) >> 4
        out.append((a_off, b_off, em.c_offset(i, j)))
    return out


@pytest.mark.parametrize("a,b,acc,a_major,b_major", COMBOS)
def test_ss_lowering_has_the_predicted_wgmma_stream(a, b, acc, a_major, b_major):
    block_k = 128 if a in ("e4m3", "e5m2", "s8", "u8") else 64 if a != "tf32" else 32
    func = emitter_gemm(256, 256, 2 * block_k, a, b, acc, _OUT[acc], block_m=128, block_n=128,
                        block_k=block_k, a_major=a_major, b_major=b_major, num_stages=2)
    em = func.emitter
    src = lower_to_cuda(func)
    assert "mma.sync" not in src and "tl::mma_sync" not in src
    calls = WGMMA.findall(src)
    assert calls, "no wgmma in the CUDA source"
    main = calls[-len(em.atoms()):]
    for call in main:
        kind, at, bt, ct, m, n, k, tnsp_a, tnsp_b, _ = call
        assert kind == "ss"
        assert (at, bt, ct) == (_CTYPE[a], _CTYPE[b], _CTYPE[acc])
        assert (int(m), int(n), int(k)) == (64, em.shape.inst_n, em.shape.inst_k)
        assert tnsp_a == ("true" if a_major == "MN" else "false")
        assert tnsp_b == ("true" if b_major == "MN" else "false")
    offsets = []
    for *_, args in main:
        nums = re.findall(r"uint64_t\(desc_a \+ (\d+)\), uint64_t\(desc_b \+ (\d+)\), \(\(uint32_t\*\)\(C_local \+ (\d+)\)\)", args)
        assert nums, args
        offsets.append(tuple(int(x) for x in nums[0]))
    assert offsets == _expected_stream(em, a, b, acc, a_major, b_major)
    # descriptor constants: layout type, LBO >> 4, SBO >> 4 as DescriptorParams says
    for params, name in ((em.a_params, "desc_a"), (em.b_params, "desc_b")):
        init = f"tl::initialize_wgmma_descriptor<{params.swizzle.layout_type}, " \
               f"{params.leading_byte_offset >> 4}, {params.stride_byte_offset >> 4}>({name}"
        assert init in src, f"{init} not in source"


@pytest.mark.parametrize("block_m, warpgroups_m", [(64, 1), (128, 2), (256, 2)])
def test_rs_lowering(block_m, warpgroups_m):
    """RS atoms, one warpgroup or two along M (each reads its own rows of A from registers)."""
    func = emitter_gemm(256, 256, 128, "bf16", "bf16", "f32", "float32", block_m=block_m, block_n=256 // warpgroups_m,
                        block_k=64, a_source="register", warpgroups_m=warpgroups_m, num_stages=2)
    src = lower_to_cuda(func)
    calls = [c for c in WGMMA.findall(src) if c[0] == "rs"]
    atoms = block_m // (64 * warpgroups_m) * (64 // 16)  # m64 instructions per warpgroup x k16 atoms per block_k
    assert calls and len(calls) % atoms == 0 and all(int(c[5]) == 256 // warpgroups_m for c in calls)
    assert "mma.sync" not in src


def test_wait_count_is_emitted():
    func = emitter_gemm(256, 256, 128, "bf16", "bf16", "f32", "float32", num_stages=2)
    assert "tl::warpgroup_wait<0>()" in lower_to_cuda(func)


def test_instruction_choice_is_widest_legal():
    assert widest_n(256, "bf16") == 256
    assert widest_n(192, "bf16") == 192
    assert widest_n(96, "bf16") == 96
    assert widest_n(264, "bf16") == 88  # 264 = 3 x 88, the widest multiple of 8 <= 256 dividing it
    assert widest_n(40, "s8") == 8      # s8 has no n40; 40 = 5 x 8
    assert not legal_n(40, "s8") and legal_n(48, "s8") and legal_n(24, "s8")


def test_sizes():
    em = WGMMAEmitter("bf16", "bf16", "f32", block_m=128, block_n=256, block_k=64, warpgroups_m=2)
    assert em.instruction == "m64n256k16"
    assert (em.num_inst_m, em.num_inst_n, em.num_k_atoms) == (1, 1, 4)
    assert em.accum_regs == 128 and em.threads == 256
    rs = WGMMAEmitter("e4m3", "e4m3", "f32", block_m=64, block_n=128, block_k=128, a_source="register")
    assert rs.a_regs == 16  # 64x128 e4m3 over 128 threads = 64 bytes = 16 registers


@pytest.mark.parametrize("kwargs,match", [
    (dict(a_dtype="bf16", b_dtype="bf16", accum_dtype="f16"), "not a wgmma combination"),
    (dict(a_dtype="e4m3", b_dtype="bf16", accum_dtype="f32"), "not a wgmma combination"),
    (dict(a_dtype="s8", b_dtype="s8", accum_dtype="f32"), "not a wgmma combination"),
    (dict(a_dtype="e4m3", b_dtype="e4m3", accum_dtype="f32", a_major="MN"), "must be K-major"),
    (dict(a_dtype="bf16", b_dtype="bf16", accum_dtype="f32", block_m=96), "multiple of 64"),
    (dict(a_dtype="bf16", b_dtype="bf16", accum_dtype="f32", block_k=24), "instruction K"),
    (dict(a_dtype="bf16", b_dtype="bf16", accum_dtype="f32", a_source="register", a_major="MN"), "always K-major"),
    (dict(a_dtype="bf16", b_dtype="bf16", accum_dtype="f32", a_source="tmem"), "a_source"),
])
def test_errors_name_the_rule(kwargs, match):
    args = dict(block_m=128, block_n=128, block_k=64)
    args.update(kwargs)
    a, b, acc = args.pop("a_dtype"), args.pop("b_dtype"), args.pop("accum_dtype")
    with pytest.raises(ValueError, match=match):
        WGMMAEmitter(a, b, acc, **args)


def test_atom_indices_are_checked():
    em = WGMMAEmitter("bf16", "bf16", "f32", block_m=128, block_n=128, block_k=64)
    with pytest.raises(ValueError, match="ki"):
        em.ss_atom(None, None, None, 0, 0, 4)
    with pytest.raises(ValueError, match="wait"):
        em.wait(8)


def test_stage_offsets_become_descriptor_start_units():
    """Stage offsets are bytes; the atoms add them to the descriptor's start address in 16-byte
    units (PTX ISA 9.7.15.5.1.2), so an offset that is not a multiple of 16 is refused."""
    from tlgemm.macros.emitter import _start_units

    assert _start_units(0) == 0 and _start_units(16384) == 1024
    with pytest.raises(ValueError, match="stage offset: 8 bytes is not a multiple of 16"):
        _start_units(8)


def test_k_atoms_select_a_slice_of_the_tile():
    """``atoms(k_atoms)`` keeps the issue order restricted to those K atoms (a 128-deep scale
    block of a 256-deep e4m3 tile: atoms 4-7); an empty, strided or out-of-range slice is refused;
    ``_scale_d`` overwrites D at the slice's first atom only."""
    em = WGMMAEmitter("e4m3", "e4m3", "f32", block_m=64, block_n=64, block_k=256)
    assert em.num_k_atoms == 8
    assert em.atoms(range(4, 8)) == [(0, 0, ki) for ki in range(4, 8)]
    assert em.atoms() == [(0, 0, ki) for ki in range(8)]
    for bad in (range(4, 4), range(0, 8, 2), range(6, 9), range(-1, 2)):
        with pytest.raises(ValueError, match="k_atoms"):
            em.atoms(bad)
    assert [em._scale_d(ki, True, 4) for ki in range(4, 8)] == [0, 1, 1, 1]
    assert [em._scale_d(ki, False, 4) for ki in range(4, 8)] == [1, 1, 1, 1]
