"""WGMMAEmitter's argument checks (audit findings): MN-major B whose block_n equals block_m,
stage offsets on the swizzle's repeat, warpgroup placement and resource limits, ints for
sizes, accumulator dtype spellings, swizzles, and the small operand API."""

import itertools
import re

import numpy as np
import pytest

pytest.importorskip("tilelang")

import tilelang.language as T  # noqa: E402

from tlgemm.macros.emitter import WGMMAEmitter, _check_wait, _start_units, legal_n, widest_n  # noqa: E402
from tlgemm.macros.operands import SwizzleMode, element_address, layout_address  # noqa: E402

BASE = dict(block_m=128, block_n=128, block_k=64)


def _emitter(**kwargs):
    args = dict(BASE)
    args.update(kwargs)
    a, b, acc = args.pop("a", "bf16"), args.pop("b", "bf16"), args.pop("acc", "f32")
    return WGMMAEmitter(a, b, acc, **args)


def _prove(params, inst_mn, base=2048):
    """Every element of the tile is read where the TMA copy stored it (operands proofs)."""
    for mn, k in itertools.product(range(params.tile_mn), range(params.tile_k)):
        assert element_address(params, mn, k, inst_mn=inst_mn, base=base) == layout_address(params, mn, k, base)


# --- 1. MN-major B whose block_n equals block_m ------------------------------------------------

@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("block, warpgroups_n", [(64, 2), (128, 4)])
def test_mn_major_b_as_wide_as_a_gets_its_own_instruction_n(dtype, block, warpgroups_n):
    """B's default swizzle follows B's instruction N (here n32: 64B swizzle, atoms of 32
    elements), not A's 64 rows; it was taken for A's because block_n == block_m and the
    dtypes are the same object, and the emitter refused the valid tile."""
    em = _emitter(a=dtype, b=dtype, block_m=block, block_n=block, b_major="MN", warpgroups_n=warpgroups_n)
    assert em.instruction == "m64n32k16"
    assert em.b_params.swizzle is SwizzleMode.B64 and em.a_params.swizzle is SwizzleMode.B128
    _prove(em.b_params, em.shape.inst_n)


def test_mn_major_a_keeps_its_64_row_instructions():
    """Both MN-major, same extents: A still reads in m64 instructions (128B swizzle), B in n32."""
    em = _emitter(block_m=128, block_n=128, a_major="MN", b_major="MN", warpgroups_n=4)
    assert (em.a_params.swizzle, em.b_params.swizzle) == (SwizzleMode.B128, SwizzleMode.B64)
    _prove(em.a_params, 64)
    _prove(em.b_params, 32)


def test_mn_major_b_as_wide_as_a_lowers():
    """The kernel of such a tile lowers to m64n32k16 with B transposed and B's descriptor
    constants as DescriptorParams says."""
    from tlgemm.tilelang.emitter_gemm import emitter_gemm, lower_to_cuda

    func = emitter_gemm(128, 128, 128, "bf16", "bf16", "f32", "float32", block_m=64, block_n=64, block_k=64,
                        b_major="MN", warpgroups_n=2, num_stages=2)
    src = lower_to_cuda(func)
    em = func.emitter
    assert set(re.findall(r"wgmma_ss<[^>]*kFloat32, (64, \d+, 16, \w+, \w+)", src)) == {"64, 32, 16, false, true"}
    params = em.b_params
    assert (f"tl::initialize_wgmma_descriptor<{params.swizzle.layout_type}, {params.leading_byte_offset >> 4}, "
            f"{params.stride_byte_offset >> 4}>(desc_b") in src


# --- 2. stage offsets ------------------------------------------------------------------------

@pytest.mark.parametrize("offset", [512, 16, -1024, 1536])
def test_int_stage_offset_must_keep_the_swizzle_repeat(offset):
    """The descriptors carry base offset 0, valid only where the 128B swizzle's pattern starts on
    a 1024-byte boundary (PTX ISA, "Matrix Descriptor Format"); 512 was accepted before."""
    em = _emitter()
    assert em.a_params.swizzle.alignment == 1024
    with pytest.raises(ValueError, match=rf"a_stage_offset: {offset} bytes is not a multiple of 1024"):
        em.ss(None, None, None, a_stage_offset=offset)
    with pytest.raises(ValueError, match=rf"b_stage_offset: {offset} bytes is not a multiple of 1024"):
        em.ss(None, None, None, b_stage_offset=offset)


@pytest.mark.parametrize("offset", [8192.0, True, "8192", None])
def test_stage_offset_is_an_int_or_an_integer_expression(offset):
    """A float crashed inside TVM before."""
    em = _emitter()
    with pytest.raises(ValueError, match="a_stage_offset: expected an int"):
        em.ss(None, None, None, a_stage_offset=offset)


def test_stage_offset_alignment_follows_the_operand_swizzle():
    """Without swizzle the start address only needs its 16-byte granule; 64B needs 512."""
    assert _start_units(16, SwizzleMode.NONE.alignment, "x") == 1
    assert _start_units(np.int64(3 * 512), SwizzleMode.B64.alignment, "x") == 96
    with pytest.raises(ValueError, match="x: 256 bytes is not a multiple of 512"):
        _start_units(256, SwizzleMode.B64.alignment, "x")
    rs = _emitter(a_source="register", b_swizzle="32B")
    with pytest.raises(ValueError, match="b_stage_offset: 128 bytes is not a multiple of 256"):
        rs.rs(None, None, None, b_stage_offset=128)


def test_expression_stage_offsets_are_taken_as_they_are():
    """A TIR integer expression cannot be checked statically; a float expression is refused."""
    n = T.int32(2048)
    assert str(_start_units(n, 1024, "x")) == str(T.truncdiv(n, 16))
    with pytest.raises(ValueError, match="x: .* float32 expression"):
        _start_units(T.float32(2048.0), 1024, "x")


def test_atom_start_units_keep_the_swizzle_repeat():
    """ss_atom's starts are in 16-byte units: an int must be whole swizzle repeats too."""
    em = _emitter()
    with pytest.raises(ValueError, match=r"a_start: 32 16-byte units \(512 bytes\)"):
        em.ss_atom(None, None, None, 0, 0, 0, a_start=32)
    with pytest.raises(ValueError, match="b_start: expected an int"):
        em.ss_atom(None, None, None, 0, 0, 0, b_start=64.0)


def test_offsets_stay_within_the_descriptors_reach():
    """The 14-bit start-address field holds address >> 4, 256 KiB: an int stage offset or atom
    start beyond it wrapped into the descriptor's reserved and LBO bits."""
    em = _emitter()
    _start_units(262144 - 1024, 1024, "x")
    with pytest.raises(ValueError, match=r"a_stage_offset: 262144 bytes lies beyond the 262144 bytes"):
        em.ss(None, None, None, a_stage_offset=1 << 18)
    with pytest.raises(ValueError, match=r"b_start: 16384 16-byte units lie beyond the 262144 bytes"):
        em.ss_atom(None, None, None, 0, 0, 0, b_start=1 << 14)


@pytest.mark.parametrize("kwargs, match", [
    (dict(block_m=64, block_n=256, block_k=1024), r"\(block_n, block_k\): the B tile 256x1024 is 524288 bytes"),
    (dict(block_m=1024, block_n=64, block_k=256, warpgroups_m=8),
     r"\(block_m, block_k\): the A tile 1024x256 is 524288 bytes"),
])
def test_tiles_beyond_the_descriptors_reach_are_refused(kwargs, match):
    """A tile larger than the 256 KiB the start address reaches was accepted, and its later
    K atoms' descriptors wrapped."""
    with pytest.raises(ValueError, match=match):
        _emitter(**kwargs)
    _emitter(block_m=64, block_n=256, block_k=512)  # 262144 bytes: the whole reach


# --- 3. thread_offset ------------------------------------------------------------------------

@pytest.mark.parametrize("offset, match", [
    (64, "thread_offset: 64 is not a multiple of 128"), (32, "not a multiple of 128"),
    (-128, "thread_offset: -128 must be at least 0"), (1.5, "thread_offset: expected an int"),
    (True, "thread_offset: expected an int"),
])
def test_thread_offset_starts_a_warpgroup(offset, match):
    """A warpgroup is four contiguous warps whose first warp's rank is a multiple of 4."""
    with pytest.raises(ValueError, match=match):
        _emitter(thread_offset=offset)


def test_thread_offset_of_a_whole_warpgroup():
    em = _emitter(thread_offset=np.int64(256))
    assert em.thread_offset == 256 and type(em.thread_offset) is int


# --- 4. resource limits ----------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    dict(block_m=192, block_n=192, warpgroups_m=3, warpgroups_n=3),
    dict(block_m=320, block_n=128, warpgroups_m=5, warpgroups_n=2),
    dict(block_m=64, block_n=256, warpgroups_n=32),
    dict(block_m=256, block_n=256, warpgroups_m=4, warpgroups_n=2, thread_offset=128),
])
def test_at_most_1024_consumer_threads(kwargs):
    with pytest.raises(ValueError, match=r"exceed a block's 1024 threads \(at most 8 warpgroups\)"):
        _emitter(**kwargs)


def test_eight_warpgroups_fit():
    assert _emitter(block_m=256, block_n=256, warpgroups_m=4, warpgroups_n=2).threads == 1024
    assert _emitter(block_m=256, block_n=128, warpgroups_m=4, warpgroups_n=1, thread_offset=512).threads == 512


@pytest.mark.parametrize("kwargs, regs", [
    (dict(block_m=64, block_n=512), 256), (dict(block_m=256, block_n=256), 512),
    (dict(block_m=128, block_n=256, warpgroups_n=1), 256),
])
def test_accumulator_must_fit_255_registers(kwargs, regs):
    """ptxas serialises the wgmma and spills such an accumulator (C7511)."""
    with pytest.raises(ValueError, match=rf"{regs} accumulator registers per thread exceed the 255"):
        _emitter(**kwargs)


def test_register_limit_counts_registers_and_the_rs_fragment():
    """f16 accumulators pack two a register; an RS A fragment counts with the accumulator."""
    assert _emitter(a="f16", b="f16", acc="f16", block_m=64, block_n=512).accum_regs == 128
    assert _emitter(block_m=64, block_n=480).accum_regs == 240
    with pytest.raises(ValueError, match=r"240 accumulator registers \+ 16 of the RS A fragment"):
        _emitter(block_m=64, block_n=480, a_source="register")
    assert _emitter(block_m=128, block_n=256, warpgroups_m=2).accum_regs == 128


# --- 5. sizes are ints ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["block_m", "block_n", "block_k", "warpgroups_m", "warpgroups_n"])
@pytest.mark.parametrize("value", [128.0, True, "128", None])
def test_sizes_and_counts_are_ints(name, value):
    with pytest.raises(ValueError, match=f"{name}: expected an int"):
        _emitter(**{name: value})


@pytest.mark.parametrize("name", ["block_m", "block_n", "block_k"])
def test_sizes_are_positive(name):
    with pytest.raises(ValueError, match=f"{name}: 0 must be at least 1"):
        _emitter(**{name: 0})


def test_numpy_sizes_become_ints():
    em = _emitter(block_m=np.int64(128), block_n=np.int32(128), block_k=np.int64(64), warpgroups_m=np.int64(2))
    assert em.block_m == 128 and all(type(v) is int for v in (em.block_m, em.block_n, em.block_k, em.warpgroups_m))
    assert em.instruction == "m64n128k16"


def test_waves_and_instruction_n_are_ints():
    em = _emitter()
    with pytest.raises(ValueError, match="waves: expected an int"):
        em.accum_layout(1.5)
    with pytest.raises(ValueError, match="waves: expected an int"):
        em.accum_layout(True)
    with pytest.raises(ValueError, match="n: expected an int"):
        legal_n(8.0, "bf16")
    with pytest.raises(ValueError, match="extent: expected an int"):
        widest_n(64.0, "bf16")


# --- 7. accumulator dtypes ---------------------------------------------------------------------

def test_accumulator_dtypes_parse_as_input_dtypes():
    """torch dtypes and the inputs' aliases ("half") name accumulators too."""
    import torch

    assert _emitter(a=torch.bfloat16, b=torch.bfloat16, acc=torch.float32).accum == "f32"
    assert _emitter(a="half", b="half", acc="half").accum == "f16"
    assert _emitter(a=torch.float16, b=torch.float16, acc=torch.float16).accum == "f16"
    assert _emitter(a="F16", b="fp16", acc=" FP32 ").accum == "f32"
    assert _emitter(a=torch.int8, b=torch.int8, acc=torch.int32, block_k=128).accum == "s32"
    with pytest.raises(ValueError, match="accum_dtype: torch.float64 is not a wgmma accumulator"):
        _emitter(acc=torch.float64)


# --- 8. swizzles ------------------------------------------------------------------------------

def test_swizzle_arguments_take_the_enum_names_and_refuse_bools():
    assert _emitter(a_swizzle="B64", b_swizzle=np.int64(32)).a_params.swizzle is SwizzleMode.B64
    assert _emitter(b_swizzle="128").b_params.swizzle is SwizzleMode.B128
    with pytest.raises(ValueError, match="swizzle: expected"):
        _emitter(a_swizzle=False)


def test_a_swizzle_with_register_a_is_refused():
    """It would be ignored: A in registers has no shared-memory layout."""
    with pytest.raises(ValueError, match="a_swizzle: '64B' given with a_source='register'"):
        _emitter(a_source="register", a_swizzle="64B")


# --- 9. atoms, waits --------------------------------------------------------------------------

def test_atoms_take_a_range_only():
    em = _emitter()
    with pytest.raises(ValueError, match=r"k_atoms: expected None or a range"):
        em.atoms([0, 1])
    assert em.atoms(range(1, 3)) == [(0, 0, 1), (0, 0, 2), (1, 0, 1), (1, 0, 2)]


def test_wait_and_atom_indices_refuse_bools():
    em = _emitter()
    with pytest.raises(ValueError, match="wait: True"):
        em.wait(True)
    with pytest.raises(ValueError, match="wait: 1.0"):
        em.ss(None, None, None, wait=1.0)
    with pytest.raises(ValueError, match="i: True must be an int"):
        em._check_atom(True, 0, 0)
    assert _check_wait(np.int64(1)) == 1 and type(_check_wait(np.int64(1))) is int and _check_wait(None) is None
    assert em._check_atom(np.int64(1), 0, np.int32(3)) == (1, 0, 3)


def test_ss_and_rs_name_the_emitter_kind():
    with pytest.raises(ValueError, match="ss: the emitter was built with a_source='register'"):
        _emitter(a_source="register").ss(None, None, None)
    with pytest.raises(ValueError, match="rs: the emitter was built with a_source='shared'"):
        _emitter().rs(None, None, None)


@pytest.mark.parametrize("operands, kwargs, match", [
    (("e4m3", "e5m2"), dict(block_k=128, b_major="MN"), r"^b_major: e5m2 operands must be K-major"),
    (("bf16", "bf16"), dict(block_k=32, b_swizzle=128), r"^b_swizzle: B128 needs the contiguous extent \(32 x 2 B\)"),
    (("bf16", "bf16"), dict(block_k=32, a_swizzle="x"), r"^a_swizzle: expected a SwizzleMode"),
    (("bf16", "bf16"), dict(block_k=32, a_major="N"), r"^a_major: expected 'K' \(K-major\) or 'MN'"),
    (("tf32", "tf32"), dict(block_k=32, a_major="MN"), r"^a_major: tf32 operands must be K-major"),
])
def test_operand_rules_name_the_emitters_argument(operands, kwargs, match):
    """describe()'s rules named its own parameters (major, swizzle), not the emitter's."""
    with pytest.raises(ValueError, match=match):
        WGMMAEmitter(*operands, "f32", block_m=64, block_n=64, **kwargs)
