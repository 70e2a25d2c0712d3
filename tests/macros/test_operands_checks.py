"""Argument checks of the operand math (audit findings): ints only for sizes and addresses,
the two spellings of a major, the swizzle's names, descriptor fields the ISA allows, and
consistent PTX ISA citations in tlgemm.macros."""

import pathlib
import re

import numpy as np
import pytest

from tlgemm.macros.operands import (
    GmmaDescriptor, Major, SwizzleMode, choose_swizzle, decode, describe, descriptor_for, encode,
)

# --- Major.parse: "K" or "MN", never the BLAS-ambiguous "M" / "N" ------------------------------

@pytest.mark.parametrize("value, expected", [
    ("K", Major.K), ("k", Major.K), (" K ", Major.K), ("K-major", Major.K), (Major.K, Major.K),
    ("MN", Major.MN), ("mn", Major.MN), ("Mn", Major.MN), ("MN-major", Major.MN), (Major.MN, Major.MN),
])
def test_major_parse_accepts_its_two_spellings(value, expected):
    assert Major.parse(value) is expected


@pytest.mark.parametrize("value", ["M", "N", "m", "n", "T", "row", "KMAJOR", "", None, True, 0])
def test_major_parse_refuses_m_and_n(value):
    """In BLAS terms "N" is not-transposed, which is K-major for A: reading "N" (or "M") as
    MN-major could silently give the transposed layout."""
    with pytest.raises(ValueError, match=r"major: expected 'K' \(K-major\) or 'MN' \(MN-major\)"):
        Major.parse(value)


# --- SwizzleMode.parse -----------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    ("B128", SwizzleMode.B128), ("b64", SwizzleMode.B64), ("B32", SwizzleMode.B32), ("NONE", SwizzleMode.NONE),
    ("128B", SwizzleMode.B128), ("none", SwizzleMode.NONE), ("interleave", SwizzleMode.NONE),
    (128, SwizzleMode.B128), (0, SwizzleMode.NONE), (np.int64(64), SwizzleMode.B64), (np.uint8(32), SwizzleMode.B32),
    ("128", SwizzleMode.B128), (" 32 ", SwizzleMode.B32), ("0", SwizzleMode.NONE),
    (SwizzleMode.B64, SwizzleMode.B64),
])
def test_swizzle_parse_accepts_names_spans_and_numpy(value, expected):
    """The enum's own names (as errors print them, e.g. "B128"), numpy integers and digit strings."""
    assert SwizzleMode.parse(value) is expected


@pytest.mark.parametrize("value", [False, True, 128.0, 16, "16", "16B", "B16", None, "SWIZZLE_128B", -128])
def test_swizzle_parse_refuses_bools_and_other_values(value):
    """False was taken as NONE before (False == 0)."""
    with pytest.raises(ValueError, match="swizzle: expected"):
        SwizzleMode.parse(value)


def test_describe_takes_the_swizzle_names():
    assert describe(128, 64, "bf16", "K", "B64").swizzle is SwizzleMode.B64
    with pytest.raises(ValueError, match="swizzle: expected"):
        describe(128, 64, "bf16", "K", False)


# --- sizes are ints ------------------------------------------------------------------------

@pytest.mark.parametrize("tile_mn, tile_k, name", [
    (64.0, 64, "tile_mn"), (64, 64.0, "tile_k"), (True, 64, "tile_mn"), ("64", 64, "tile_mn"), (None, 64, "tile_mn"),
])
def test_describe_sizes_are_ints(tile_mn, tile_k, name):
    with pytest.raises(ValueError, match=f"{name}: expected an int"):
        describe(tile_mn, tile_k, "bf16")


def test_describe_takes_numpy_integers_as_ints():
    params = describe(np.int64(128), np.int32(64), "bf16")
    assert params == describe(128, 64, "bf16")
    assert type(params.tile_mn) is int and type(params.tile_k) is int


def test_choose_swizzle_extent_is_a_positive_int():
    with pytest.raises(ValueError, match="contiguous_extent"):
        choose_swizzle(64.0, "bf16")
    with pytest.raises(ValueError, match="contiguous_extent: 0 must be at least 1"):
        choose_swizzle(0, "bf16")


def test_atom_offset_and_instruction_extents_are_ints():
    params = describe(128, 64, "bf16")
    with pytest.raises(ValueError, match="mn0: expected an int"):
        params.atom_offset(8.0, 0)
    with pytest.raises(ValueError, match="k0: expected an int"):
        params.atom_offset(0, True)
    with pytest.raises(ValueError, match="inst_mn: expected an int"):
        params.check_instruction(64.0)


# --- descriptor_for / encode / decode ------------------------------------------------------

@pytest.mark.parametrize("base, match", [
    (-1024, "base: -0x400 lies outside"), (1 << 18, "base: 0x40000 lies outside"),
    (1024.0, "base: expected an int"), (True, "base: expected an int"), ("1024", "base: expected an int"),
])
def test_descriptor_for_checks_base_up_front(base, match):
    """Before, -1024 and 1 << 18 failed only later in encode, and 1024.0 gave a float address."""
    params = describe(64, 64, "bf16")
    with pytest.raises(ValueError, match=match):
        descriptor_for(params, 0, 0, base=base)


def test_descriptor_for_takes_numpy_bases():
    params = describe(64, 64, "bf16")
    desc = descriptor_for(params, 0, 16, base=np.int64(2048))
    assert desc == descriptor_for(params, 0, 16, base=2048) and type(desc.start_address) is int


def test_encode_refuses_a_base_offset_without_swizzle():
    """PTX ISA, "Matrix Descriptor Format": the base offset is valid for all swizzling modes
    except the no-swizzle mode."""
    with pytest.raises(ValueError, match="base_offset: 3 with layout type NONE"):
        encode(GmmaDescriptor(0, 16, 1024, SwizzleMode.NONE, 3))
    assert encode(GmmaDescriptor(0, 16, 1024, SwizzleMode.B32, 3)) >> 49 & 7 == 3
    with pytest.raises(ValueError, match="base_offset"):
        decode(3 << 49)  # the same word read back


@pytest.mark.parametrize("desc, match", [
    (GmmaDescriptor(16.0, 16, 1024, SwizzleMode.B128), "start_address: expected an int"),
    (GmmaDescriptor(0, True, 1024, SwizzleMode.B128), "leading_byte_offset: expected an int"),
    (GmmaDescriptor(0, 16, 1024, 1), "layout_type: expected a SwizzleMode"),
    (GmmaDescriptor(0, 16, 1024, SwizzleMode.B128, 1.0), "base_offset: expected an int"),
])
def test_encode_fields_are_checked(desc, match):
    with pytest.raises(ValueError, match=match):
        encode(desc)


def test_decode_takes_numpy_unsigned_integers():
    """decode(np.uint64(1 << 62)) raised OverflowError before."""
    assert decode(np.uint64(1 << 62)) == decode(1 << 62) == GmmaDescriptor(0, 0, 0, SwizzleMode.B128)
    word = encode(descriptor_for(describe(128, 64, "bf16"), 0, 16, base=1024))
    assert decode(np.uint64(word)) == decode(word)


@pytest.mark.parametrize("value", [1.5, float(1 << 62), "0x4000000000000000", None, True])
def test_decode_refuses_non_integers(value):
    with pytest.raises(ValueError, match="value: expected an int"):
        decode(value)


# --- citations -------------------------------------------------------------------------------

def test_ptx_isa_citations_are_consistent():
    """A numbered PTX ISA section cited in tlgemm.macros names one title wherever it is cited
    (9.7.15.2 was cited both as "Matrix Shape" and as "Matrix Data-types")."""
    import tlgemm.macros

    titles = {}
    for path in pathlib.Path(tlgemm.macros.__file__).parent.glob("*.py"):
        text = " ".join(path.read_text().split())
        for number, title in re.findall(r"\b(9(?:\.\d+)+)\)?,? \(?\"([^\"]+)\"", text):
            titles.setdefault(number, set()).add(title)
        for title, number in re.findall(r"\"([^\"]+)\" \(?(9(?:\.\d+)+)\b", text):
            titles.setdefault(number, set()).add(title)
    assert all(len(names) == 1 for names in titles.values()), titles
