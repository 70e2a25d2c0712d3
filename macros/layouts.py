"""TileLang ``Layout`` objects for the swizzled operand tiles of tlgemm.macros.operands.

Importing this module imports TileLang. The layouts are built from the same
function, :func:`tlgemm.macros.operands.layout_offset`, that the descriptor
proofs use, and they are structurally equal to TileLang's own
``make_{quarter,half,full}_bank_swizzled_layout`` for the swizzled cases, which is
what lets TileLang lower ``T.copy`` into such a buffer to a swizzled TMA load.
"""

from __future__ import annotations

from tilelang.layout import Layout

from .operands import DescriptorParams, SwizzleMode, element_type, layout_offset


def shared_layout(rows: int, cols: int, dtype, swizzle: SwizzleMode) -> Layout:
    """The TMA panel layout of a [rows, cols] shared tile (cols contiguous) as a TileLang Layout.

    Output shape: (panels, rows // 8, atom elements), as ``layout_offset`` returns it.
    A leading pipeline-stage dimension is added by TileLang's ``Layout.expand``.
    """
    et = element_type(dtype)
    swizzle = SwizzleMode.parse(swizzle)
    per_row = swizzle.span_bytes // et.bytes
    if cols % per_row or rows % 8:
        raise ValueError(
            f"(rows, cols)=({rows}, {cols}): need rows % 8 == 0 and cols a multiple of "
            f"{per_row} {et.name} elements for the {swizzle.name} swizzle")

    def forward(row, col):
        return list(layout_offset(et, swizzle, row, col))

    return Layout([rows, cols], forward)


def operand_layout(params: DescriptorParams) -> Layout:
    """The shared-memory Layout of the operand tile that ``params`` describes."""
    rows, cols = params.smem_shape
    return shared_layout(rows, cols, params.dtype, params.swizzle)
