"""Hopper (sm_90a) operand math and the WGMMA macro emitter.

``tlgemm.macros.operands`` is pure Python (importing this package does not import
TileLang); ``tlgemm.macros.layouts`` and ``tlgemm.macros.emitter`` use TileLang
and are imported on first use of their names.
"""

from .operands import (
    INSTRUCTION_K_BYTES,
    DescriptorParams,
    ElementType,
    GmmaDescriptor,
    Major,
    SwizzleMode,
    choose_swizzle,
    decode,
    describe,
    descriptor_for,
    element_address,
    element_type,
    encode,
    hardware_address,
    layout_address,
    layout_offset,
    swizzle_offset,
)

_LAZY = {
    "shared_layout": "layouts",
    "operand_layout": "layouts",
    "WGMMAEmitter": "emitter",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "INSTRUCTION_K_BYTES", "DescriptorParams", "ElementType", "GmmaDescriptor", "Major",
    "SwizzleMode", "choose_swizzle", "decode", "describe", "descriptor_for", "element_address",
    "element_type", "encode", "hardware_address", "layout_address", "layout_offset",
    "swizzle_offset", *_LAZY,
]
