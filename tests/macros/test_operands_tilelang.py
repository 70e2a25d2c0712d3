"""tlgemm.macros operand math against TileLang 0.1.15's own WGMMA descriptor decoder and layouts."""

import itertools

import pytest

tilelang = pytest.importorskip("tilelang")
from tilelang import tvm  # noqa: E402
from tilelang.cuda.intrinsics.macro.wgmma_macro_generator import compute_gmma_descriptor  # noqa: E402
from tilelang.layout import (  # noqa: E402
    make_full_bank_swizzled_layout, make_half_bank_swizzled_layout,
    make_quarter_bank_swizzled_layout, make_wgmma_swizzled_layout,
)

from tlgemm.macros.layouts import operand_layout, shared_layout  # noqa: E402
from tlgemm.macros.operands import Major, SwizzleMode, describe, element_type  # noqa: E402

STORAGE = ["float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2", "int8"]


def _buffer(shape, dtype):
    return tvm.tirx.decl_buffer(shape, dtype, scope="shared.dyn")


def _cases():
    for storage, major in itertools.product(STORAGE, Major):
        et = element_type(storage)
        if major is Major.MN and not et.allows_mn_major:
            continue
        for mn, k_rows in itertools.product([8, 24, 64, 96, 128, 192, 256], [1, 2, 4, 8]):
            yield storage, major, mn, k_rows * et.inst_k


def test_swizzle_lbo_sbo_agree_with_tilelang():
    """Our swizzle mode, LBO and SBO equal TileLang's for every buffer its emitter accepts.

    Where they differ, it is a field the hardware never reads, and the test proves
    that: the descriptor field is multiplied by the index of a mode of extent 1.
    - K-major with tile_mn == 8: one 8-row group, so SBO (the 8-row group stride)
      is multiplied by 0. TileLang writes 0, we write 8 rows x S. Both are right.
    - MN-major with one swizzle atom along MN: LBO (the MN atom stride) is
      multiplied by 0. TileLang writes 0, we write the panel stride. Both are right.
    - MN-major without swizzle (MN extent of 8 or 24 f16): TileLang's layout
      inference gives a row-major (linear) buffer, which is not a canonical
      INTERLEAVE layout, so its decoder rejects it; ours stores 16-byte panels
      (what a TMA box of 16 bytes writes) and is covered by the enumeration proof.
    """
    compared = differ_unused = tilelang_rejects = 0
    for storage, major, mn, k in _cases():
        params = describe(mn, k, storage, major)
        shape = params.smem_shape
        buf = _buffer(shape, storage)
        layout = make_wgmma_swizzled_layout(buf, continuity=shape[1], k_major=major is Major.K)
        try:
            theirs = compute_gmma_descriptor(layout, buf, transposed=major is Major.MN,
                                             micro_size_k=params.inst_k)
        except AssertionError:
            assert major is Major.MN and params.swizzle is SwizzleMode.NONE, (storage, major, mn, k)
            tilelang_rejects += 1
            continue
        assert theirs.swizzle_mode.wgmma_layout_type() == params.swizzle.layout_type, (storage, major, mn, k)
        assert theirs.swizzle_mode.swizzle_byte_size() == max(params.swizzle.value, 1)
        lbo, sbo = params.leading_byte_offset >> 4, params.stride_byte_offset >> 4
        compared += 1
        if (theirs.leading_byte_offset, theirs.stride_byte_offset) == (lbo, sbo):
            continue
        if major is Major.K:
            assert theirs.leading_byte_offset == lbo and theirs.stride_byte_offset == 0 and mn == 8
        else:
            assert theirs.stride_byte_offset == sbo and theirs.leading_byte_offset == 0
            assert mn == params.mn_atom_elems
        differ_unused += 1
    print(f"\ncompared {compared} operand buffers with TileLang; {differ_unused} differ only in an "
          f"unread field; TileLang rejects {tilelang_rejects} (MN-major INTERLEAVE)")
    assert compared > 100


@pytest.mark.parametrize("storage", STORAGE)
@pytest.mark.parametrize("maker,swizzle", [
    (make_full_bank_swizzled_layout, SwizzleMode.B128),
    (make_half_bank_swizzled_layout, SwizzleMode.B64),
    (make_quarter_bank_swizzled_layout, SwizzleMode.B32),
])
@pytest.mark.parametrize("rows,row_bytes", [(8, 128), (64, 128), (128, 256), (16, 512)])
def test_layouts_equal_tilelang_bank_swizzles(storage, maker, swizzle, rows, row_bytes):
    """Structurally equal layouts are what TileLang's TMA lowering recognises as swizzled."""
    cols = row_bytes // element_type(storage).bytes
    if row_bytes % swizzle.span_bytes:
        pytest.skip("rows narrower than the swizzle")
    ours = shared_layout(rows, cols, storage, swizzle)
    theirs = maker(_buffer((rows, cols), storage))
    assert ours.is_equal(theirs), f"{ours} != {theirs}"


def test_layout_values_match_layout_address():
    params = describe(128, 128, "bf16", "K", "128B")
    layout = operand_layout(params)
    from tlgemm.macros.operands import layout_address
    atom_elems = params.swizzle.atom_bytes // 2
    for mn, k in [(0, 0), (1, 8), (7, 63), (8, 64), (127, 127), (33, 70)]:
        panel, group, inner = (int(v) for v in layout.map_forward_index([mn, k]))
        flat = (panel * (params.tile_mn // 8) + group) * atom_elems + inner
        assert flat * 2 == layout_address(params, mn, k)


def test_shared_layout_rejects_bad_shape():
    with pytest.raises(ValueError, match="rows % 8"):
        shared_layout(12, 64, "bf16", SwizzleMode.B128)
