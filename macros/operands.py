"""Hopper WGMMA operand math: swizzles, shared-memory layouts and matrix descriptors.

Pure Python (no TileLang import). Facts used, from the PTX ISA section
"Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" and its
subsections "Shared Memory Matrix Layout" and "Matrix Descriptor Format",
cross-checked against CuTe ``mma_sm90_desc.hpp``. Sections are cited by title: their
numbers move between PTX ISA versions (in the manual these notes were checked against the
wgmma section is 9.7.15 and "Matrix Descriptor Format" 9.7.15.5.1.2.2).

* The 64-bit descriptor holds start address >> 4 in bits [0, 14), leading byte
  offset (LBO) >> 4 in [16, 30), stride byte offset (SBO) >> 4 in [32, 46), base
  offset in [49, 52) and the layout type in [62, 64): INTERLEAVE (no swizzle) = 0,
  128B = 1, 64B = 2, 32B = 3. The base offset is valid for the swizzled modes only, and
  is 0 when the swizzle's repeating pattern starts on a 1024 / 512 / 256-byte boundary
  (128B / 64B / 32B), which is how every tile here is placed (``SwizzleMode.alignment``).
* A swizzle of S bytes is CuTe's ``Swizzle<B, 4, 3>`` with B = log2(S / 16): the
  shared-memory byte address has bits [4, 4 + B) XOR-ed with bits [7, 7 + B). It
  acts on the absolute address, so a swizzled tile must start on a multiple of
  its repeat, 8 rows of S bytes (256 / 512 / 1024 B).
* Canonical operand layouts, with T = 16 / element bytes and W = S / 16:
  K-major swizzled ``((8, m), (T, 2k)) : ((W*T, SBO), (1, T))``;
  MN-major swizzled ``((T, W, m), (8, k)) : ((1, T, LBO), (W*T, SBO))``;
  INTERLEAVE swaps the roles of LBO and SBO in both.
* Instruction K is 32 bytes: k16 for f16/bf16, k8 for tf32, k32 for e4m3/e5m2/s8/u8
  ("Matrix Shape"). Only 16-bit types may be MN-major (transposed; "wgmma.mma_async",
  the imm-trans-a / imm-trans-b operands).

The shared-memory tile layout is the one a TMA box copy with the same swizzle
writes: the contiguous dimension is cut into panels of S bytes (16 bytes without
swizzle), panels are stored one after the other, and inside a panel each row of
S bytes is swizzled. ``element_address`` reproduces, from an encoded descriptor,
the byte the tensor core reads for a logical element; the tests prove by
enumeration that it equals ``layout_address`` for every supported case.
"""

from __future__ import annotations

import enum
import numbers
from dataclasses import dataclass

__all__ = [
    "Major",
    "SwizzleMode",
    "ElementType",
    "element_type",
    "GmmaDescriptor",
    "DescriptorParams",
    "describe",
    "encode",
    "decode",
    "choose_swizzle",
    "swizzle_offset",
    "layout_offset",
    "layout_address",
    "descriptor_for",
    "hardware_address",
    "element_address",
    "INSTRUCTION_K_BYTES",
    "SMEM_ADDRESS_LIMIT",
]

#: Every wgmma reads 32 bytes of K per instruction (k16 f16/bf16, k8 tf32, k32 8-bit).
INSTRUCTION_K_BYTES = 32
#: The descriptor's 14-bit start-address field holds address >> 4: 256 KiB of shared memory.
SMEM_ADDRESS_LIMIT = 1 << 18


def _int_arg(name: str, value, minimum: int | None = None) -> int:
    """``value`` as a Python int: an int or a numpy integer, never a bool (nor a float, a string,
    None); ``ValueError`` naming the argument otherwise, or when it is below ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: expected an int, got {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: {value} must be at least {minimum}")
    return value


def _dtype_key(dtype) -> str:
    """A dtype's lower-case name without torch's ``torch.`` prefix: what both the input types
    (``element_type``) and the accumulators (``tlgemm.macros.emitter``) are looked up by."""
    return str(dtype).strip().lower().replace("torch.", "")


class Major(enum.Enum):
    """Which logical dimension of an operand is contiguous in shared memory."""

    K = "K"
    MN = "MN"

    @classmethod
    def parse(cls, value, name: str = "major") -> "Major":
        """A ``Major``, or its spelling "K" / "MN" (any case; also "K-major" / "MN-major");
        errors name the argument ``name``.

        "M" and "N" are refused: in BLAS terms (``--layout nt``) "N" means not transposed,
        which is K-major for A, so reading "N" as MN-major would silently transpose it."""
        if isinstance(value, Major):
            return value
        if isinstance(value, str):
            text = value.strip().upper()
            if text in ("K", "K-MAJOR"):
                return cls.K
            if text in ("MN", "MN-MAJOR"):
                return cls.MN
        raise ValueError(f"{name}: expected 'K' (K-major) or 'MN' (MN-major), got {value!r}; "
                         "'M' / 'N' are not major names (in BLAS terms 'N' is not-transposed, K-major for A)")


class SwizzleMode(enum.Enum):
    """Shared-memory swizzle of a WGMMA operand (value = swizzle span in bytes; 0 = none)."""

    NONE = 0
    B32 = 32
    B64 = 64
    B128 = 128

    @property
    def span_bytes(self) -> int:
        """Bytes of one swizzled row (the TMA box's inner extent); 16 without swizzle."""
        return self.value if self.value else 16

    @property
    def xor_bits(self) -> int:
        """B of ``Swizzle<B, 4, 3>``: 0, 1, 2 or 3."""
        return {0: 0, 32: 1, 64: 2, 128: 3}[self.value]

    @property
    def atom_bytes(self) -> int:
        """One swizzle atom: 8 rows of ``span_bytes`` (128 B of core matrix without swizzle)."""
        return 8 * self.span_bytes

    @property
    def layout_type(self) -> int:
        """The descriptor's 2-bit layout-type field, bits [62, 64)."""
        return {0: 0, 128: 1, 64: 2, 32: 3}[self.value]

    @property
    def alignment(self) -> int:
        """Required base alignment of a tile in shared memory, in bytes (the atom repeat)."""
        return self.atom_bytes if self.value else 16

    @classmethod
    def from_layout_type(cls, bits: int) -> "SwizzleMode":
        for mode in cls:
            if mode.layout_type == bits:
                return mode
        raise ValueError(f"layout_type: {bits} is not a descriptor layout type (0..3)")

    @classmethod
    def parse(cls, value, name: str = "swizzle") -> "SwizzleMode":
        """A ``SwizzleMode``; its name ("NONE", "B32", "B64", "B128", any case); "32B", "64B",
        "128B", "none" or "interleave"; or the span in bytes, 0 / 32 / 64 / 128, as an int, a
        numpy integer or a digit string. A bool is refused (False is no swizzle mode). Errors
        name the argument ``name``."""
        if isinstance(value, SwizzleMode):
            return value
        spans = {0, 32, 64, 128}
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) in spans:
            return cls(int(value))
        if isinstance(value, str):
            key = value.strip().lower()
            aliases = {"none": 0, "interleave": 0, "b32": 32, "b64": 64, "b128": 128,
                       "32b": 32, "64b": 64, "128b": 128}
            if key in aliases:
                return cls(aliases[key])
            if key.isdigit() and int(key) in spans:
                return cls(int(key))
        raise ValueError(f"{name}: expected a SwizzleMode, one of its names NONE, B32, B64, B128, "
                         f"'32B' / '64B' / '128B', or the span in bytes 0 / 32 / 64 / 128, got {value!r}")


@dataclass(frozen=True)
class ElementType:
    """A WGMMA input type: its PTX name, storage width and instruction K."""

    name: str
    bits: int
    storage: str

    @property
    def bytes(self) -> int:
        return self.bits // 8

    @property
    def inst_k(self) -> int:
        """K of one wgmma: 32 bytes of K (PTX ISA, wgmma "Matrix Shape")."""
        return INSTRUCTION_K_BYTES // self.bytes

    @property
    def allows_mn_major(self) -> bool:
        """Only 16-bit types may be MN-major (transposed) in shared memory (PTX ISA,
        "wgmma.mma_async": imm-trans-a / imm-trans-b only for .f16 / .bf16)."""
        return self.bits == 16


_ELEMENT_TYPES = {
    "f16": ElementType("f16", 16, "float16"),
    "bf16": ElementType("bf16", 16, "bfloat16"),
    "tf32": ElementType("tf32", 32, "float32"),
    "e4m3": ElementType("e4m3", 8, "float8_e4m3fn"),
    "e5m2": ElementType("e5m2", 8, "float8_e5m2"),
    "s8": ElementType("s8", 8, "int8"),
    "u8": ElementType("u8", 8, "uint8"),
}
_ALIASES = {
    "float16": "f16", "fp16": "f16", "half": "f16",
    "bfloat16": "bf16",
    "float32": "tf32", "fp32": "tf32",
    "float8_e4m3": "e4m3", "float8_e4m3fn": "e4m3", "fp8_e4m3": "e4m3",
    "float8_e5m2": "e5m2", "fp8_e5m2": "e5m2",
    "int8": "s8", "uint8": "u8",
}


def element_type(dtype) -> ElementType:
    """Resolve a dtype name ("bf16", "bfloat16", "float8_e4m3", "int8", ...)."""
    if isinstance(dtype, ElementType):
        return dtype
    key = _dtype_key(dtype)
    key = _ALIASES.get(key, key)
    try:
        return _ELEMENT_TYPES[key]
    except KeyError:
        raise ValueError(
            f"dtype: {dtype!r} is not a WGMMA input type "
            f"(one of {', '.join(_ELEMENT_TYPES)})") from None


@dataclass(frozen=True)
class GmmaDescriptor:
    """The fields of a 64-bit WGMMA matrix descriptor, as byte quantities."""

    start_address: int
    leading_byte_offset: int
    stride_byte_offset: int
    layout_type: SwizzleMode
    base_offset: int = 0


def _check_field(name: str, value: int, limit: int) -> None:
    value = _int_arg(name, value)
    if value % 16:
        raise ValueError(f"{name}: {value} is not a multiple of 16 bytes (the field holds value >> 4)")
    if not 0 <= value < limit:
        raise ValueError(f"{name}: {value} does not fit the descriptor's 14-bit field (< {limit} bytes)")


def _check_base_offset(base_offset, layout_type: SwizzleMode) -> int:
    """The 3-bit base offset, valid for the swizzled modes only (PTX ISA "Matrix Descriptor
    Format": "valid for all swizzling modes except the no-swizzle mode")."""
    base_offset = _int_arg("base_offset", base_offset)
    if not 0 <= base_offset < 8:
        raise ValueError(f"base_offset: {base_offset} does not fit 3 bits")
    if base_offset and layout_type is SwizzleMode.NONE:
        raise ValueError(f"base_offset: {base_offset} with layout type NONE; the base offset is valid for "
                         "the swizzled modes only (PTX ISA, \"Matrix Descriptor Format\")")
    return base_offset


def encode(desc: GmmaDescriptor) -> int:
    """Pack a descriptor into its 64-bit value (PTX ISA "Matrix Descriptor Format" bit positions)."""
    _check_field("start_address", desc.start_address, SMEM_ADDRESS_LIMIT)
    _check_field("leading_byte_offset", desc.leading_byte_offset, SMEM_ADDRESS_LIMIT)
    _check_field("stride_byte_offset", desc.stride_byte_offset, SMEM_ADDRESS_LIMIT)
    if not isinstance(desc.layout_type, SwizzleMode):
        raise ValueError(f"layout_type: expected a SwizzleMode, got {desc.layout_type!r}")
    base_offset = _check_base_offset(desc.base_offset, desc.layout_type)
    return (
        (int(desc.start_address) >> 4)
        | (int(desc.leading_byte_offset) >> 4) << 16
        | (int(desc.stride_byte_offset) >> 4) << 32
        | base_offset << 49
        | desc.layout_type.layout_type << 62
    )


def decode(value: int) -> GmmaDescriptor:
    """Unpack a 64-bit descriptor (an int or a numpy integer); bits outside the defined fields
    must be zero, and the base offset zero under no swizzle (as ``encode`` requires)."""
    value = _int_arg("value", value)
    if not 0 <= value < 1 << 64:
        raise ValueError(f"value: {value:#x} is not a 64-bit descriptor")
    reserved = value & ~((0x3FFF) | (0x3FFF << 16) | (0x3FFF << 32) | (0x7 << 49) | (0x3 << 62))
    if reserved:
        raise ValueError(f"value: reserved descriptor bits set ({reserved:#x})")
    layout_type = SwizzleMode.from_layout_type((value >> 62) & 0x3)
    return GmmaDescriptor(
        start_address=(value & 0x3FFF) << 4,
        leading_byte_offset=((value >> 16) & 0x3FFF) << 4,
        stride_byte_offset=((value >> 32) & 0x3FFF) << 4,
        base_offset=_check_base_offset((value >> 49) & 0x7, layout_type),
        layout_type=layout_type,
    )


def choose_swizzle(contiguous_extent: int, dtype) -> SwizzleMode:
    """Widest swizzle whose span divides the contiguous extent (in bytes) of a tile.

    A 128B swizzle needs rows that are whole multiples of 128 bytes, and so on; an
    extent of a multiple of 16 bytes only gets no swizzle (INTERLEAVE).
    """
    contiguous_extent = _int_arg("contiguous_extent", contiguous_extent, minimum=1)
    nbytes = contiguous_extent * element_type(dtype).bytes
    for mode in (SwizzleMode.B128, SwizzleMode.B64, SwizzleMode.B32):
        if nbytes % mode.span_bytes == 0:
            return mode
    if nbytes % 16 == 0:
        return SwizzleMode.NONE
    raise ValueError(
        f"contiguous_extent: {contiguous_extent} elements of {element_type(dtype).name} "
        f"= {nbytes} bytes is not a multiple of 16 bytes")


def swizzle_offset(byte_offset, swizzle: SwizzleMode):
    """``Swizzle<B, 4, 3>`` of a byte offset: bits [4, 4+B) XOR bits [7, 7+B).

    Written with ``//``, ``%``, ``*`` and ``+`` only, so the same function serves
    Python integers and TIR expressions (tlgemm.macros.layouts builds TileLang
    Layouts from it).
    """
    out = byte_offset
    for bit in range(swizzle.xor_bits):
        low = byte_offset // (16 << bit) % 2
        high = byte_offset // (128 << bit) % 2
        out = out - low * (16 << bit) + (low + high) % 2 * (16 << bit)
    return out


def _bit(x, position: int):
    """Bit ``position`` of a non-negative value below 8, in TileLang's expression form."""
    return x % 2 if position == 0 else x % (2 << position) // (1 << position)


def layout_offset(dtype, swizzle: SwizzleMode, row, col):
    """Where a swizzled TMA box stores element (row, col) of a tile; ``col`` is contiguous.

    Returns ``(panel, row_group, inner)``: the panel of ``span_bytes`` columns, the
    group of 8 rows, and the element offset inside that swizzle atom. For a tile of
    ``rows`` rows the flat element offset is
    ``(panel * rows // 8 + row_group) * atom_elems + inner``.

    Inside an atom, byte ``r * S + 16 * c + e`` has its 16-byte chunk index ``c``
    XOR-ed bit by bit with the row bits that ``Swizzle<B, 4, 3>`` moves onto it
    (address bit 7 + b lands on row bit 7 + b - log2(S)). The expression is
    written in the element domain exactly as TileLang writes its bank-swizzled
    layouts, and uses only ``//``, ``%``, ``*``, ``+``, so it serves Python ints
    and TIR expressions alike (tlgemm.macros.layouts).
    """
    et = element_type(dtype)
    span = swizzle.span_bytes
    per_row = span // et.bytes
    chunk = 16 // et.bytes
    inner = row % 8 * per_row
    row_shift = {0: 0, 32: 2, 64: 1, 128: 0}[swizzle.value]
    for b in reversed(range(swizzle.xor_bits)):
        chunk_bit = col % (chunk << (b + 1)) // (chunk << b)
        inner = inner + (chunk_bit + _bit(row, b + row_shift)) % 2 * (chunk << b)
    inner = inner + col % chunk
    return col // per_row, row // 8, inner


def layout_address(params: "DescriptorParams", mn: int, k: int, base: int = 0) -> int:
    """Byte address of logical element (mn, k) as the TMA copy stored it at ``base``."""
    rows = params.smem_shape[0]
    row, col = (mn, k) if params.major is Major.K else (k, mn)
    panel, row_group, inner = layout_offset(params.dtype, params.swizzle, row, col)
    atom_elems = params.swizzle.atom_bytes // params.dtype.bytes
    flat = (panel * (rows // 8) + row_group) * atom_elems + inner
    return base + flat * params.dtype.bytes


@dataclass(frozen=True)
class DescriptorParams:
    """How one operand tile sits in shared memory and how descriptors address it.

    ``tile_mn`` x ``tile_k`` elements of ``dtype``; ``major`` says which is contiguous.
    Offsets are in bytes. ``leading_byte_offset`` and ``stride_byte_offset`` are
    the LBO and SBO every descriptor of this tile carries.
    """

    tile_mn: int
    tile_k: int
    dtype: ElementType
    major: Major
    swizzle: SwizzleMode
    leading_byte_offset: int
    stride_byte_offset: int

    @property
    def smem_shape(self) -> tuple[int, int]:
        """The buffer's [rows, cols] with cols contiguous: [MN, K] (K-major) or [K, MN]."""
        return (self.tile_mn, self.tile_k) if self.major is Major.K else (self.tile_k, self.tile_mn)

    @property
    def panel_elems(self) -> int:
        """Contiguous elements per swizzled row (per panel)."""
        return self.swizzle.span_bytes // self.dtype.bytes

    @property
    def panel_bytes(self) -> int:
        """Bytes of one panel: all rows of one ``span_bytes`` column strip."""
        return self.smem_shape[0] * self.swizzle.span_bytes

    @property
    def tile_bytes(self) -> int:
        return self.tile_mn * self.tile_k * self.dtype.bytes

    @property
    def inst_k(self) -> int:
        return self.dtype.inst_k

    @property
    def num_k_atoms(self) -> int:
        """Instructions along K that cover the tile."""
        return self.tile_k // self.inst_k

    def atom_offset(self, mn0: int, k0: int) -> int:
        """Byte offset from the tile base of the sub-operand starting at (mn0, k0).

        ``mn0`` must start an 8-row group (K-major) or a swizzle atom column
        (MN-major); ``k0`` a multiple of the instruction K. This is the run-time
        offset added to a descriptor's start address for instruction (i, j, ki).
        """
        self._check_origin(mn0, k0)
        span = self.swizzle.span_bytes
        eb = self.dtype.bytes
        if self.major is Major.K:
            kbytes = k0 * eb
            return kbytes // span * self.panel_bytes + kbytes % span + mn0 // 8 * self.stride_byte_offset
        panel_stride = self.panel_bytes
        mn_bytes = mn0 * eb
        return mn_bytes // span * panel_stride + mn_bytes % span + k0 // 8 * (8 * span)

    def _check_origin(self, mn0: int, k0: int) -> None:
        mn0, k0 = _int_arg("mn0", mn0), _int_arg("k0", k0)
        if not (0 <= mn0 < self.tile_mn and 0 <= k0 < self.tile_k):
            raise ValueError(f"(mn0, k0)=({mn0}, {k0}) lies outside the {self.tile_mn}x{self.tile_k} tile")
        if k0 % self.inst_k:
            raise ValueError(f"k0: {k0} is not a multiple of the instruction K ({self.inst_k})")
        if self.major is Major.K and mn0 % 8:
            raise ValueError(f"mn0: {mn0} does not start an 8-row core-matrix group (K-major)")
        if self.major is Major.MN and mn0 % self.mn_atom_elems:
            raise ValueError(
                f"mn0: {mn0} does not start a swizzle atom column of {self.mn_atom_elems} elements (MN-major)")

    @property
    def mn_atom_elems(self) -> int:
        """MN elements of one canonical atom: 8 (K-major) or one swizzled row (MN-major)."""
        return 8 if self.major is Major.K else self.panel_elems

    def check_instruction(self, inst_mn: int) -> None:
        """Reject an instruction MN extent the proofs do not cover (ValueError naming the rule)."""
        inst_mn = _int_arg("inst_mn", inst_mn)
        if inst_mn <= 0 or inst_mn % 8:
            raise ValueError(f"inst_mn: {inst_mn} is not a positive multiple of 8")
        if self.tile_mn % inst_mn:
            raise ValueError(f"inst_mn: {inst_mn} does not divide the tile's MN extent {self.tile_mn}")
        if self.major is Major.MN and inst_mn % self.mn_atom_elems:
            raise ValueError(
                f"inst_mn: an MN-major {self.swizzle.name} operand is read in swizzle atoms of "
                f"{self.mn_atom_elems} {self.dtype.name} elements; {inst_mn} is not a multiple")


def describe(tile_mn: int, tile_k: int, dtype, major="K", swizzle=None, *,
             names: dict[str, str] | None = None) -> DescriptorParams:
    """Descriptor parameters for a ``tile_mn`` x ``tile_k`` operand tile.

    ``swizzle=None`` picks :func:`choose_swizzle` on the contiguous extent. Raises
    ``ValueError`` naming the rule for every case the enumeration proofs do not
    cover: MN-major 8/32-bit types, MN not a multiple of 8, K not a multiple of the
    instruction K, a contiguous extent that is not whole swizzle rows. Errors name the
    parameter, or what ``names`` maps it to (a caller's own argument, e.g. "major" ->
    "b_major").

    LBO/SBO (bytes), from the canonical layouts and the TMA panel layout:
    K-major swizzled: SBO = 8 rows x S (next 8-row group), LBO = 16 (unused).
    K-major none: SBO = 128 (next 8-row core matrix), LBO = rows x 16 (next K core matrix).
    MN-major swizzled: SBO = 8 rows x S (next 8-deep K group), LBO = panel (next MN atom).
    MN-major none: SBO = panel = K x 16 (next MN core matrix), LBO = 128 (next 8-deep K group).
    """
    name = {key: key for key in ("tile_mn", "tile_k", "major", "swizzle")} | (names or {})
    tile_mn, tile_k = _int_arg(name["tile_mn"], tile_mn), _int_arg(name["tile_k"], tile_k)
    et = element_type(dtype)
    major = Major.parse(major, name["major"])
    if major is Major.MN and not et.allows_mn_major:
        raise ValueError(
            f"{name['major']}: {et.name} operands must be K-major; only 16-bit types may be MN-major "
            "(PTX ISA, \"wgmma.mma_async\": imm-trans-a / imm-trans-b)")
    if tile_mn <= 0 or tile_mn % 8:
        raise ValueError(f"{name['tile_mn']}: {tile_mn} is not a positive multiple of 8 (core matrices are 8 rows)")
    if tile_k <= 0 or tile_k % et.inst_k:
        raise ValueError(f"{name['tile_k']}: {tile_k} is not a positive multiple of the instruction K "
                         f"({et.inst_k} for {et.name})")
    contiguous = tile_k if major is Major.K else tile_mn
    swizzle = choose_swizzle(contiguous, et) if swizzle is None else SwizzleMode.parse(swizzle, name["swizzle"])
    if contiguous * et.bytes % swizzle.span_bytes:
        raise ValueError(
            f"{name['swizzle']}: {swizzle.name} needs the contiguous extent ({contiguous} x {et.bytes} B) "
            f"to be whole {swizzle.span_bytes}-byte rows")
    rows = tile_mn if major is Major.K else tile_k
    span = swizzle.span_bytes
    panel = rows * span
    if major is Major.K:
        lbo, sbo = (16, 8 * span) if swizzle is not SwizzleMode.NONE else (panel, 128)
    else:
        lbo, sbo = (panel, 8 * span) if swizzle is not SwizzleMode.NONE else (128, panel)
    for name, value in (("leading_byte_offset", lbo), ("stride_byte_offset", sbo)):
        if value >= SMEM_ADDRESS_LIMIT:
            raise ValueError(f"{name}: {value} bytes does not fit the descriptor's 14-bit field")
    return DescriptorParams(tile_mn, tile_k, et, major, swizzle, lbo, sbo)


def descriptor_for(params: DescriptorParams, mn0: int, k0: int, base: int = 0) -> GmmaDescriptor:
    """The descriptor of the instruction operand starting at (mn0, k0) of a tile at ``base``.

    ``base`` is the tile's shared-memory byte address: an int in [0, 256 KiB) (what the 14-bit
    start-address field reaches) on a multiple of the swizzle's repeat, where the descriptor's
    base offset is 0 (PTX ISA, "Matrix Descriptor Format")."""
    base = _int_arg("base", base)
    if not 0 <= base < SMEM_ADDRESS_LIMIT:
        raise ValueError(f"base: {base:#x} lies outside the {SMEM_ADDRESS_LIMIT} bytes of shared memory the "
                         "descriptor's 14-bit start address reaches")
    if base % params.swizzle.alignment:
        raise ValueError(
            f"base: {base:#x} is not aligned to {params.swizzle.alignment} bytes, "
            f"the repeat of the {params.swizzle.name} swizzle")
    return GmmaDescriptor(
        start_address=base + params.atom_offset(mn0, k0),
        leading_byte_offset=params.leading_byte_offset,
        stride_byte_offset=params.stride_byte_offset,
        layout_type=params.swizzle,
    )


def hardware_address(desc: int, dtype, major, mn: int, k: int) -> int:
    """Byte the tensor core reads for element (mn, k) of one instruction's operand.

    Applies the canonical layout of the descriptor's layout type (module
    docstring) to the decoded fields, then the swizzle to the absolute address.
    (mn, k) are relative to the instruction's operand origin.
    """
    d = decode(desc)
    et = element_type(dtype)
    major = Major.parse(major)
    swz = d.layout_type
    t = 16 // et.bytes
    if major is Major.K:
        group, r = divmod(mn, 8)
        chunk, e = divmod(k, t)
        if swz is SwizzleMode.NONE:
            offset = r * 16 + group * d.stride_byte_offset + chunk * d.leading_byte_offset
        else:
            offset = r * swz.span_bytes + group * d.stride_byte_offset + chunk * 16
    else:
        chunk, e = divmod(mn, t)
        kgroup, kr = divmod(k, 8)
        if swz is SwizzleMode.NONE:
            offset = chunk * d.stride_byte_offset + kr * 16 + kgroup * d.leading_byte_offset
        else:
            w = swz.span_bytes // 16
            atom, c = divmod(chunk, w)
            offset = c * 16 + atom * d.leading_byte_offset + kr * swz.span_bytes + kgroup * d.stride_byte_offset
    return swizzle_offset(d.start_address + offset + e * et.bytes, swz)


def element_address(params: DescriptorParams, mn: int, k: int, *, inst_mn: int, base: int = 0) -> int:
    """The byte the hardware reads for element (mn, k) of the tile.

    The tile is covered by instructions of ``inst_mn`` x instruction-K; the element's
    instruction gets its descriptor from :func:`descriptor_for`, which is encoded to
    64 bits and read back by :func:`hardware_address`.
    """
    params.check_instruction(inst_mn)
    mn0, k0 = mn - mn % inst_mn, k - k % params.inst_k
    desc = encode(descriptor_for(params, mn0, k0, base))
    return hardware_address(desc, params.dtype, params.major, mn - mn0, k - k0)
