"""Known answers, round trips and errors of the descriptor math; agreement with TileLang 0.1.15."""

import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from tlgemm.macros.operands import (
    GmmaDescriptor, Major, SwizzleMode, choose_swizzle, decode, describe, descriptor_for,
    element_type, encode,
)


# --- encode: known answers derived by hand from PTX ISA 9.7.15.5.1 bit positions -------------

def test_encode_bf16_k_major_128b():
    # bf16 128x64 K-major tile, 128B swizzle, at shared address 0x400.
    #   start  0x400 >> 4 = 0x40           -> bits [0,14):  0x0000_0000_0000_0040
    #   LBO    16 (unused, 1)  >> 4 = 1    -> bits [16,30): 0x0000_0000_0001_0000
    #   SBO    8 rows * 128 B = 1024 >> 4 = 0x40 -> bits [32,46): 0x0000_0040_0000_0000
    #   layout 128B = 1                     -> bits [62,64): 0x4000_0000_0000_0000
    params = describe(128, 64, "bf16", "K")
    assert params.swizzle is SwizzleMode.B128
    assert encode(descriptor_for(params, 0, 0, base=0x400)) == 0x4000_0040_0001_0040


def test_encode_f16_mn_major_64b():
    # f16 MN-major tile, MN=128, K=32, 64B swizzle, at 0x800. Rows are K (32), 64 B each.
    #   start  0x800 >> 4 = 0x80                         -> 0x0000_0000_0000_0080
    #   LBO    next MN atom = panel = 32 rows * 64 B = 2048 >> 4 = 0x80 -> 0x0000_0000_0080_0000
    #   SBO    next 8-deep K group = 8 * 64 B = 512 >> 4 = 0x20        -> 0x0000_0020_0000_0000
    #   layout 64B = 2                                   -> 0x8000_0000_0000_0000
    params = describe(128, 32, "f16", "MN", "64B")
    assert encode(descriptor_for(params, 0, 0, base=0x800)) == 0x8000_0020_0080_0080


def test_encode_e4m3_k_major_interleave():
    # e4m3 64x32 K-major tile without swizzle at 0x100: 16-byte panels of 64 rows.
    #   start  0x100 >> 4 = 0x10                               -> 0x0000_0000_0000_0010
    #   LBO    next K core matrix = panel = 64 * 16 = 1024 >> 4 = 0x40 -> 0x0000_0000_0040_0000
    #   SBO    next 8-row core matrix = 128 >> 4 = 8             -> 0x0000_0008_0000_0000
    #   layout INTERLEAVE = 0
    params = describe(64, 32, "e4m3", "K", "none")
    assert encode(descriptor_for(params, 0, 0, base=0x100)) == 0x0000_0008_0040_0010


def test_encode_fields_and_base_offset():
    desc = GmmaDescriptor(start_address=0x3FFF0, leading_byte_offset=0x10, stride_byte_offset=0x3FFF0,
                          layout_type=SwizzleMode.B32, base_offset=5)
    # 0x3FFF (14 ones) | 1<<16 | 0x3FFF<<32 | 5<<49 | 3<<62
    assert encode(desc) == 0x3FFF | 1 << 16 | 0x3FFF << 32 | 5 << 49 | 3 << 62


def test_k_advance_inside_a_128b_row_moves_start_by_32_bytes():
    params = describe(64, 128, "bf16", "K")
    d0 = descriptor_for(params, 0, 0, base=0)
    d1 = descriptor_for(params, 0, 16, base=0)
    d4 = descriptor_for(params, 0, 64, base=0)
    assert d1.start_address - d0.start_address == 32  # k16 of bf16 = 32 bytes
    assert d4.start_address - d0.start_address == 64 * 128  # next 128-byte panel: 64 rows x 128 B


descriptors = st.sampled_from(list(SwizzleMode)).flatmap(lambda mode: st.builds(
    GmmaDescriptor,
    start_address=st.integers(0, (1 << 14) - 1).map(lambda v: v << 4),
    leading_byte_offset=st.integers(0, (1 << 14) - 1).map(lambda v: v << 4),
    stride_byte_offset=st.integers(0, (1 << 14) - 1).map(lambda v: v << 4),
    layout_type=st.just(mode),
    # the base offset is valid for the swizzled modes only (PTX ISA, "Matrix Descriptor Format")
    base_offset=st.integers(0, 7) if mode is not SwizzleMode.NONE else st.just(0),
))


@given(descriptors)
def test_decode_inverts_encode(desc):
    value = encode(desc)
    assert 0 <= value < 1 << 64
    assert decode(value) == desc


@given(st.integers(0, (1 << 64) - 1))
def test_encode_inverts_decode_on_valid_words(value):
    try:
        desc = decode(value)
    except ValueError as err:
        assert "reserved" in str(err) or "base_offset" in str(err) and value >> 62 == 0
        return
    assert encode(desc) == value


# --- clear errors for everything the proofs do not cover ---------------------------------

@pytest.mark.parametrize("dtype", ["tf32", "e4m3", "e5m2", "s8", "u8"])
def test_mn_major_needs_16_bit_type(dtype):
    with pytest.raises(ValueError, match="must be K-major"):
        describe(64, 64, dtype, "MN")


def test_mn_extent_multiple_of_8():
    with pytest.raises(ValueError, match="tile_mn: 60 is not a positive multiple of 8"):
        describe(60, 64, "bf16", "K")


@pytest.mark.parametrize("dtype,k", [("bf16", 24), ("tf32", 12), ("e4m3", 48), ("s8", 16)])
def test_k_extent_multiple_of_instruction_k(dtype, k):
    with pytest.raises(ValueError, match="multiple of the instruction K"):
        describe(64, k, dtype, "K")


def test_swizzle_wider_than_rows_is_rejected():
    with pytest.raises(ValueError, match="whole 128-byte rows"):
        describe(64, 32, "bf16", "K", "128B")


def test_mn_major_instruction_must_cover_whole_atoms():
    params = describe(128, 16, "bf16", "MN", "128B")
    params.check_instruction(64)
    with pytest.raises(ValueError, match="swizzle atoms of 64"):
        params.check_instruction(32)


def test_unknown_dtype_and_swizzle():
    with pytest.raises(ValueError, match="dtype: 'f64'"):
        element_type("f64")
    with pytest.raises(ValueError, match="swizzle: expected"):
        SwizzleMode.parse("16B")
    with pytest.raises(ValueError, match="major: expected"):
        Major.parse("row")


def test_encode_rejects_out_of_range_fields():
    with pytest.raises(ValueError, match="start_address: 262144"):
        encode(GmmaDescriptor(1 << 18, 16, 16, SwizzleMode.B128))
    with pytest.raises(ValueError, match="multiple of 16"):
        encode(GmmaDescriptor(8, 16, 16, SwizzleMode.B128))


def test_decode_rejects_reserved_bits():
    with pytest.raises(ValueError, match="reserved"):
        decode(1 << 47)


@pytest.mark.parametrize("extent,dtype,expected", [
    (64, "bf16", SwizzleMode.B128), (32, "bf16", SwizzleMode.B64), (16, "bf16", SwizzleMode.B32),
    (8, "bf16", SwizzleMode.NONE), (96, "bf16", SwizzleMode.B64), (128, "e4m3", SwizzleMode.B128),
    (32, "e4m3", SwizzleMode.B32), (16, "e4m3", SwizzleMode.NONE), (8, "tf32", SwizzleMode.B32),
    (48, "e4m3", SwizzleMode.NONE), (192, "bf16", SwizzleMode.B128),
])
def test_choose_swizzle_widest_that_divides(extent, dtype, expected):
    assert choose_swizzle(extent, dtype) is expected


def test_choose_swizzle_rejects_sub_16_byte_rows():
    with pytest.raises(ValueError, match="not a multiple of 16 bytes"):
        choose_swizzle(4, "bf16")


def test_operand_math_does_not_import_tilelang():
    code = "import sys, tlgemm.macros, tlgemm.macros.operands; assert 'tilelang' not in sys.modules, 'tilelang imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
