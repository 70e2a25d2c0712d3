"""The ``tlgemm`` command (also ``python -m tlgemm``)."""

from __future__ import annotations

import argparse
import sys

from tlgemm.macros.operands import Major, decode, describe, descriptor_for, encode


def _describe_operand(name: str, tile_mn: int, tile_k: int, dtype: str, major: str) -> list[str]:
    params = describe(tile_mn, tile_k, dtype, major)
    rows, cols = params.smem_shape
    lines = [
        f"{name}: {tile_mn}x{tile_k} {params.dtype.name}, {params.major.value}-major -> shared "
        f"[{rows}, {cols}] ({params.tile_bytes} B), swizzle {params.swizzle.name} "
        f"(rows of {params.swizzle.span_bytes} B, atom {params.swizzle.atom_bytes} B, "
        f"align {params.swizzle.alignment} B, layout_type {params.swizzle.layout_type})",
        f"   LBO {params.leading_byte_offset} B, SBO {params.stride_byte_offset} B, "
        f"instruction K {params.inst_k}, {params.num_k_atoms} K atoms",
    ]
    for k0 in range(0, tile_k, params.inst_k):
        word = encode(descriptor_for(params, 0, k0, base=0))
        d = decode(word)
        lines.append(
            f"   k0={k0:<4} desc {word:#018x}  start={d.start_address:#07x} lbo={d.leading_byte_offset} "
            f"sbo={d.stride_byte_offset} base_offset={d.base_offset} layout={d.layout_type.name}")
    return lines


def cmd_layout(args) -> int:
    """Print operand layouts, swizzles and descriptors of one WGMMA tile."""
    print(f"tile {args.block_m}x{args.block_n}x{args.block_k} {args.dtype} "
          f"(A {args.a_major}-major, B {args.b_major}-major); descriptors at shared address 0")
    for line in _describe_operand("A", args.block_m, args.block_k, args.dtype, args.a_major):
        print(line)
    for line in _describe_operand("B", args.block_n, args.block_k, args.dtype, args.b_major):
        print(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tlgemm", description="Hopper GEMMs from WGMMA macro-instructions")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("layout", help="operand layouts, swizzle modes and encoded descriptors of a tile")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--block-m", type=int, default=128)
    p.add_argument("--block-n", type=int, default=256)
    p.add_argument("--block-k", type=int, default=64)
    p.add_argument("--a-major", default="K", choices=[m.value for m in Major])
    p.add_argument("--b-major", default="K", choices=[m.value for m in Major])
    p.set_defaults(func=cmd_layout)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:
        print(f"tlgemm: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
