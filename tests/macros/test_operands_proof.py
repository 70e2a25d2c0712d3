"""Proof by enumeration: every descriptor addresses exactly the byte the TMA layout stored.

For every WGMMA input type, each majorness the hardware allows, every swizzle,
MN extents 8..256 step 8 and K extents of 1..4 swizzle rows, the byte that the
tensor core reads for logical element (mn, k) -- computed from the encoded 64-bit
descriptor of the instruction covering it (``hardware_address``) -- equals the
byte where a swizzled TMA box copy stored that element (``layout_address``). The
tiles sit at several pipeline-stage offsets of a larger buffer, and every
instruction along K starts at a K offset inside the tile. No two elements share
a byte.
"""

import itertools

import numpy as np
import pytest

from tlgemm.macros.operands import (
    DescriptorParams, Major, SwizzleMode, describe, descriptor_for, element_address,
    element_type, encode, hardware_address, layout_address,
)

DTYPES = ["f16", "bf16", "tf32", "e4m3", "e5m2", "s8"]
STAGES = 2
#: Hopper's largest shared-memory allocation per thread block (227 KiB).
SMEM_PER_BLOCK = 227 * 1024


def _cases():
    for dtype, major, swizzle in itertools.product(DTYPES, Major, SwizzleMode):
        et = element_type(dtype)
        if major is Major.MN and not et.allows_mn_major:
            continue
        for tile_mn in range(8, 257, 8):
            for rows in range(1, 5):
                if major is Major.K:
                    tile_k = rows * swizzle.span_bytes // et.bytes
                    if tile_k % et.inst_k:
                        tile_k = rows * et.inst_k
                else:
                    tile_k = rows * et.inst_k
                try:
                    params = describe(tile_mn, tile_k, dtype, major, swizzle)
                except ValueError:
                    continue
                yield params


def _instruction_extents(params: DescriptorParams):
    """Instruction MN extents to prove: the narrowest legal, 64 (the A side), and the whole tile."""
    narrow = params.mn_atom_elems
    out = {e for e in (narrow, 64, params.tile_mn) if params.tile_mn % e == 0 and e % narrow == 0}
    return sorted(out)


def _prove(params: DescriptorParams, inst_mn: int, base: int) -> int:
    """Check one tile at ``base``; returns the byte addresses of all its elements."""
    mn_in, k_in = np.meshgrid(np.arange(inst_mn), np.arange(params.inst_k), indexing="ij")
    addresses = []
    for mn0 in range(0, params.tile_mn, inst_mn):
        for k0 in range(0, params.tile_k, params.inst_k):
            desc = encode(descriptor_for(params, mn0, k0, base))
            hw = hardware_address(desc, params.dtype, params.major, mn_in, k_in)
            smem = layout_address(params, mn0 + mn_in, k0 + k_in, base)
            if not np.array_equal(hw, smem):
                bad = np.argwhere(hw != smem)[0]
                mn, k = mn0 + int(bad[0]), k0 + int(bad[1])
                raise AssertionError(
                    f"{params} inst_mn={inst_mn} base={base:#x}: element ({mn}, {k}) read at "
                    f"{int(hw[tuple(bad)]):#x}, stored at {int(smem[tuple(bad)]):#x}")
            addresses.append(hw.ravel())
    return np.concatenate(addresses)


def test_descriptor_addresses_equal_layout_addresses():
    checked = 0
    combos = 0
    for params in _cases():
        stage_bytes = -(-params.tile_bytes // 1024) * 1024
        for inst_mn in _instruction_extents(params):
            every = []
            for stage in range(STAGES):
                base = 1024 + stage * stage_bytes
                if stage and base + params.tile_bytes > SMEM_PER_BLOCK:
                    break
                every.append(_prove(params, inst_mn, base))
            every = np.concatenate(every)
            assert len(np.unique(every)) == every.size, f"{params}: two elements share a byte"
            elem = params.dtype.bytes
            assert np.all(every % elem == 0)
            checked += every.size
            combos += 1
    print(f"\nproved {combos} (dtype, major, swizzle, tile, instruction) cases, {checked} element addresses")
    assert combos > 1000


def test_element_address_matches_at_random_points():
    """The scalar entry point agrees with the vectorised proof above."""
    rng = np.random.default_rng(7)
    params = describe(128, 128, "bf16", "K", "128B")
    for _ in range(200):
        mn, k = int(rng.integers(0, 128)), int(rng.integers(0, 128))
        assert element_address(params, mn, k, inst_mn=64, base=4096) == layout_address(params, mn, k, 4096)


def test_misaligned_base_is_rejected():
    params = describe(64, 64, "f16", "K", "128B")
    with pytest.raises(ValueError, match="aligned to 1024"):
        descriptor_for(params, 0, 0, base=512)


def test_stage_offset_changes_only_start_address():
    params = describe(64, 64, "bf16", "K", "128B")
    first = descriptor_for(params, 0, 16, base=0)
    third = descriptor_for(params, 0, 16, base=2 * params.tile_bytes)
    assert third.start_address - first.start_address == 2 * params.tile_bytes
    assert (third.leading_byte_offset, third.stride_byte_offset) == (first.leading_byte_offset, first.stride_byte_offset)
