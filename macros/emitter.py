"""WGMMAEmitter: Hopper wgmma SS/RS atoms as TileLang TIR macros (sm_90a).

The emitter turns a warpgroup tile (block_m x block_n x block_k, warpgroups along M
and N) into ``wgmma.mma_async`` instructions issued through TileLang's primitives
(``T.alloc_wgmma_desc``, ``T.initialize_wgmma_descriptor``, ``T.warpgroup_fence_operand``,
``T.warpgroup_arrive``, ``T.ptx_wgmma_ss`` / ``T.ptx_wgmma_rs``,
``T.warpgroup_commit_batch``, ``T.warpgroup_wait``). Descriptor fields and the
per-instruction start offsets come from :mod:`tlgemm.macros.operands`, whose
enumeration proofs cover exactly the cases this emitter accepts; anything else
raises ``ValueError`` / ``NotImplementedError`` naming the rule (no silent fallback
to ``mma.sync`` or to a narrower instruction).

Facts, from the PTX ISA section "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
Instructions" (9.7.15 in the manual these notes were checked against; subsections are
cited by title, as their numbers move between PTX ISA versions): instruction shapes
m64nNk(32 bytes), N = 8..256 step 8, for s8/u8 8, 16, 24, 32 then step 16 ("Matrix
Shape"). A warpgroup is 4 contiguous warps whose first warp's rank is a multiple of 4
("Warpgroup"); warp w of a warpgroup owns rows 16w..16w+15 of each 64-row instruction.
Accumulator fragment ("Register Fragments"): lane l holds rows l/4 and l/4 + 8 and
columns 8c + 2(l%4) + {0, 1}, register 4c + 2h + e. The RS A fragment has the same row
split with 4 bytes of K per thread per 8-column core matrix. Resource limits the
constructor checks: at most 1024 threads (8 warpgroups) a block (CUDA), and at most 255
registers a thread, in which the accumulator (and the RS A fragment) must fit, else
ptxas serialises the wgmma and spills (its warning C7511).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import tilelang.language as T
from tilelang import tvm
from tilelang.layout import Fragment, Layout

from .layouts import operand_layout
from .operands import (SMEM_ADDRESS_LIMIT, DescriptorParams, Major, SwizzleMode, _dtype_key, _int_arg,
                       choose_swizzle, describe, element_type)

__all__ = ["WGMMAEmitter", "legal_n", "widest_n"]

PrimExpr = tvm.ir.PrimExpr

#: Accumulator types and the dtype string TileLang uses for them.
_ACCUM = {"f32": ("float32", "fp32", 32), "f16": ("float16", "fp16", 16), "s32": ("int32", "int32", 32)}
_ACCUM_ALIASES = {"float32": "f32", "fp32": "f32", "float16": "f16", "fp16": "f16", "half": "f16",
                  "int32": "s32"}
#: TileLang's PTX type strings for the inputs (tilelang/src/cuda/codegen/ptx.cc).
_PTX_INPUT = {"f16": "fp16", "bf16": "bf16", "tf32": "tf32", "e4m3": "e4m3", "e5m2": "e5m2",
              "s8": "int8", "u8": "uint8"}
_FP8 = {"e4m3", "e5m2"}
_INT8 = {"s8", "u8"}
#: Threads a block may have (CUDA): 8 warpgroups.
_MAX_THREADS = 1024
#: Registers a thread may have; the accumulator (and an RS A fragment) must fit in them.
_MAX_REGISTERS = 255


def _accumulator(dtype) -> str:
    """An accumulator name, parsed as input dtypes are (``operands.element_type``): any case,
    torch dtypes ("torch.float32"), the same aliases ("float32", "fp32", "half", ...)."""
    key = _dtype_key(dtype)
    key = _ACCUM_ALIASES.get(key, key)
    if key not in _ACCUM:
        raise ValueError(f"accum_dtype: {dtype!r} is not a wgmma accumulator (f32, f16, s32)")
    return key


def _check_combination(a: str, b: str, acc: str) -> None:
    """The type combinations of the PTX ISA's wgmma "Matrix Data-types" table."""
    ok = (
        (a == b == "f16" and acc in ("f16", "f32"))
        or (a == b == "bf16" and acc == "f32")
        or (a == b == "tf32" and acc == "f32")
        or (a in _FP8 and b in _FP8 and acc in ("f16", "f32"))
        or (a in _INT8 and b in _INT8 and acc == "s32")
    )
    if not ok:
        raise ValueError(
            f"(a_dtype, b_dtype, accum_dtype)=({a}, {b}, {acc}) is not a wgmma combination: "
            "f16*f16->f16/f32, bf16*bf16->f32, tf32*tf32->f32, e4m3/e5m2 pairs->f16/f32, "
            "s8/u8 pairs->s32")


def _start_units(offset, alignment: int = 16, name: str = "stage offset"):
    """A byte offset into a shared-memory operand as a descriptor start-address delta (16-byte
    units: the descriptor holds the address >> 4, PTX ISA "Matrix Descriptor Format").

    A Python int (or numpy integer) must be a non-negative multiple of ``alignment``, the
    operand's ``swizzle.alignment``: the descriptors are written with base offset 0, which
    the ISA allows only where the swizzle's repeating pattern starts on a 1024 / 512 /
    256-byte boundary (128B / 64B / 32B swizzle; 16 bytes, the start-address granule,
    without swizzle). A TIR expression cannot be checked here and is taken as it is, if of
    an integer type; floats and bools are refused."""
    if isinstance(offset, PrimExpr):
        if not str(offset.dtype).startswith(("int", "uint")):
            raise ValueError(f"{name}: {offset!r} is a {offset.dtype} expression; expected an integer byte offset")
        return T.truncdiv(offset, 16)
    if isinstance(offset, bool) or not isinstance(offset, numbers.Integral):
        raise ValueError(f"{name}: expected an int (or TIR integer expression) byte offset, got {offset!r}")
    offset = int(offset)
    if offset < 0 or offset % alignment:
        raise ValueError(f"{name}: {offset} bytes is not a multiple of {alignment} (a non-negative multiple of "
                         f"{alignment} bytes keeps the tile on its swizzle's repeat, where the descriptor's base "
                         "offset 0 holds: PTX ISA, \"Matrix Descriptor Format\")")
    if offset >= SMEM_ADDRESS_LIMIT:
        raise ValueError(f"{name}: {offset} bytes lies beyond the {SMEM_ADDRESS_LIMIT} bytes of shared memory the "
                         "descriptor's 14-bit start address reaches (PTX ISA, \"Matrix Descriptor Format\")")
    return offset // 16


def _check_wait(n):
    """``n`` as ``wgmma.wait_group``'s immediate, an int in [0, 7], or None (no wait)."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 0 <= n <= 7:
        raise ValueError(f"wait: {n!r} must be None or an int in [0, 7] (wgmma.wait_group immediate)")
    return int(n)


def _check_start(name: str, start, params: DescriptorParams) -> None:
    """An int start delta (16-byte units) must keep the tile on its swizzle's repeat, as a stage
    offset must (``_start_units``); a TIR expression is taken as it is."""
    if isinstance(start, PrimExpr):
        return
    start = _int_arg(name, start)
    alignment = params.swizzle.alignment
    if start < 0 or 16 * start % alignment:
        raise ValueError(f"{name}: {start} 16-byte units ({16 * start} bytes) is not a non-negative multiple of "
                         f"{alignment} bytes, the repeat of the {params.swizzle.name} swizzle (PTX ISA, "
                         "\"Matrix Descriptor Format\": base offset 0)")
    if 16 * start >= SMEM_ADDRESS_LIMIT:
        raise ValueError(f"{name}: {start} 16-byte units lie beyond the {SMEM_ADDRESS_LIMIT} bytes of shared memory "
                         "the descriptor's 14-bit start address reaches (PTX ISA, \"Matrix Descriptor Format\")")


def legal_n(n: int, a_dtype) -> bool:
    """Whether m64nN exists for this input type (8-bit integers: 8, 16, 24, 32, then step 16;
    PTX ISA, wgmma "Matrix Shape")."""
    n = _int_arg("n", n)
    if element_type(a_dtype).name in _INT8:
        return n in (8, 16, 24) or (32 <= n <= 256 and n % 16 == 0)
    return 8 <= n <= 256 and n % 8 == 0


def widest_n(extent: int, a_dtype) -> int:
    """The widest legal instruction N that tiles ``extent`` exactly."""
    extent = _int_arg("extent", extent)
    for n in range(min(extent, 256), 7, -8):
        if extent % n == 0 and legal_n(n, a_dtype):
            return n
    raise ValueError(f"block_n: no legal wgmma N divides the per-warpgroup extent {extent}")


@dataclass(frozen=True)
class _Shape:
    inst_m: int
    inst_n: int
    inst_k: int

    @property
    def prefix(self) -> str:
        return f"m{self.inst_m}n{self.inst_n}k{self.inst_k}"


def _operand_names(operand: str) -> dict[str, str]:
    """``describe``'s parameters as the emitter's arguments for operand "a" or "b"."""
    return {"major": f"{operand}_major", "swizzle": f"{operand}_swizzle",
            "tile_mn": "block_m" if operand == "a" else "block_n", "tile_k": "block_k"}


class WGMMAEmitter:
    """Emits Hopper wgmma for one thread block tile.

    Parameters
    ----------
    a_dtype, b_dtype, accum_dtype:
        Input and accumulator types ("bf16", "f16", "tf32", "e4m3", "e5m2", "s8", "u8";
        accumulators "f32", "f16", "s32").
    block_m, block_n, block_k:
        The thread block tile. block_m / warpgroups_m must be a multiple of 64.
    a_major, b_major:
        "K" or "MN" (MN only for 16-bit types). A is [block_m, block_k] when K-major
        and [block_k, block_m] when MN-major in shared memory; B likewise with block_n.
    a_source:
        "shared" (SS) or "register" (RS; A must be K-major: PTX ISA, "wgmma.mma_async",
        imm-trans-a applies to A in shared memory only).
    warpgroups_m, warpgroups_n:
        Consumer warpgroups tiling the block; warpgroup w = wm * warpgroups_n + wn owns
        rows [wm * block_m / warpgroups_m, ...) and columns [wn * block_n / warpgroups_n, ...).
        The consumers are threads [thread_offset, thread_offset + 128 * warpgroups), at most
        8 warpgroups and within a block's 1024 threads; ``thread_offset`` a multiple of 128
        (a warpgroup's first warp has a rank that is a multiple of 4, PTX ISA "Warpgroup").
        Each thread's accumulator (plus, RS, its A fragment) must fit 255 registers.
    a_swizzle, b_swizzle:
        Shared-memory swizzles (None: the widest that fits, see ``choose_swizzle``); no
        ``a_swizzle`` with A in registers.

    Sizes and counts are ints (or numpy integers); anything else raises ``ValueError`` naming
    the argument.
    """

    def __init__(self, a_dtype, b_dtype, accum_dtype, *, block_m: int, block_n: int, block_k: int,
                 a_major="K", b_major="K", a_source: str = "shared", warpgroups_m: int = 1,
                 warpgroups_n: int = 1, a_swizzle=None, b_swizzle=None, thread_offset: int = 0):
        block_m, block_n, block_k = (_int_arg(name, value, minimum=1) for name, value in
                                     (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)))
        warpgroups_m = _int_arg("warpgroups_m", warpgroups_m, minimum=1)
        warpgroups_n = _int_arg("warpgroups_n", warpgroups_n, minimum=1)
        thread_offset = _int_arg("thread_offset", thread_offset, minimum=0)
        self.a_type = element_type(a_dtype)
        self.b_type = element_type(b_dtype)
        self.accum = _accumulator(accum_dtype)
        _check_combination(self.a_type.name, self.b_type.name, self.accum)
        self.a_major = Major.parse(a_major, "a_major")
        self.b_major = Major.parse(b_major, "b_major")
        if not isinstance(a_source, str) or a_source not in ("shared", "register"):
            raise ValueError(f"a_source: expected 'shared' or 'register', got {a_source!r}")
        self.a_source = a_source
        if a_source == "register" and self.a_major is not Major.K:
            raise ValueError("a_major: a register (RS) A operand is always K-major in the instruction")
        if a_source == "register" and a_swizzle is not None:
            raise ValueError(f"a_swizzle: {a_swizzle!r} given with a_source='register'; A is in registers and "
                             "has no shared-memory swizzle")
        if thread_offset % 128:
            raise ValueError(f"thread_offset: {thread_offset} is not a multiple of 128; a warpgroup is 4 contiguous "
                             "warps whose first warp's rank is a multiple of 4 (PTX ISA, wgmma \"Warpgroup\")")
        warpgroups = warpgroups_m * warpgroups_n
        if thread_offset + 128 * warpgroups > _MAX_THREADS:
            raise ValueError(f"(warpgroups_m, warpgroups_n, thread_offset)=({warpgroups_m}, {warpgroups_n}, "
                             f"{thread_offset}): consumer threads [{thread_offset}, "
                             f"{thread_offset + 128 * warpgroups}) exceed a block's {_MAX_THREADS} threads "
                             f"(at most {_MAX_THREADS // 128} warpgroups)")
        if block_m % (64 * warpgroups_m):
            raise ValueError(
                f"block_m: {block_m} must be a multiple of 64 x warpgroups_m ({64 * warpgroups_m}); "
                "each warpgroup issues m64 instructions")
        if block_n % warpgroups_n or (block_n // warpgroups_n) % 8:
            raise ValueError(f"block_n: {block_n} / warpgroups_n ({warpgroups_n}) must be a multiple of 8")
        inst_k = self.a_type.inst_k
        if self.b_type.inst_k != inst_k:
            raise ValueError("b_dtype: A and B must have the same width")
        if block_k % inst_k:
            raise ValueError(f"block_k: {block_k} is not a multiple of the instruction K ({inst_k})")
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
        self.warpgroups_m, self.warpgroups_n = warpgroups_m, warpgroups_n
        self.thread_offset = thread_offset
        self.wg_m = block_m // warpgroups_m
        self.wg_n = block_n // warpgroups_n
        self.shape = _Shape(64, widest_n(self.wg_n, self.a_type), inst_k)
        self._check_registers()
        self.b_params: DescriptorParams = describe(
            block_n, block_k, self.b_type, self.b_major,
            b_swizzle if b_swizzle is not None
            else self._default_swizzle(block_n, self.b_major, self.b_type, self.shape.inst_n),
            names=_operand_names("b"))
        self.b_params.check_instruction(self.shape.inst_n)
        self.a_params: DescriptorParams | None = None
        if a_source == "shared":
            self.a_params = describe(
                block_m, block_k, self.a_type, self.a_major,
                a_swizzle if a_swizzle is not None
                else self._default_swizzle(block_m, self.a_major, self.a_type, self.shape.inst_m),
                names=_operand_names("a"))
            self.a_params.check_instruction(self.shape.inst_m)
        for name, params, side in (("A", self.a_params, "block_m"), ("B", self.b_params, "block_n")):
            if params is not None and params.tile_bytes > SMEM_ADDRESS_LIMIT:
                raise ValueError(f"({side}, block_k): the {name} tile {params.tile_mn}x{params.tile_k} is "
                                 f"{params.tile_bytes} bytes, more than the {SMEM_ADDRESS_LIMIT} bytes of shared "
                                 "memory the descriptor's 14-bit start address reaches (PTX ISA, \"Matrix "
                                 "Descriptor Format\")")

    def _default_swizzle(self, tile_mn: int, major: Major, et, inst_mn: int) -> SwizzleMode:
        """Widest swizzle of the contiguous extent; MN-major also needs whole swizzle atoms per
        instruction, whose MN extent ``inst_mn`` the caller passes for its operand (A: 64 rows,
        B: ``shape.inst_n``)."""
        if major is Major.K:
            return choose_swizzle(self.block_k, et)
        return choose_swizzle(min(inst_mn, tile_mn), et)

    def _check_registers(self) -> None:
        """Each thread's accumulator, plus its RS A fragment, must fit the 255 registers a thread
        may have; more and ptxas serialises the wgmma and spills (its warning C7511)."""
        regs = self.accum_regs + (self.a_regs if self.a_source == "register" else 0)
        if regs > _MAX_REGISTERS:
            a_part = f" + {self.a_regs} of the RS A fragment" if self.a_source == "register" else ""
            raise ValueError(
                f"(block_m, block_n, warpgroups_m, warpgroups_n)=({self.block_m}, {self.block_n}, "
                f"{self.warpgroups_m}, {self.warpgroups_n}): {self.accum_regs} accumulator registers{a_part} "
                f"per thread exceed the {_MAX_REGISTERS} a thread has (ptxas would serialise the wgmma and "
                "spill); use more warpgroups or a smaller tile")

    # ---- sizes --------------------------------------------------------------------------

    @property
    def instruction(self) -> str:
        """The wgmma shape, e.g. ``m64n256k16``."""
        return self.shape.prefix

    @property
    def num_warpgroups(self) -> int:
        return self.warpgroups_m * self.warpgroups_n

    @property
    def threads(self) -> int:
        """Consumer threads: 128 per warpgroup."""
        return 128 * self.num_warpgroups

    @property
    def num_inst_m(self) -> int:
        """m64 instructions per warpgroup along M."""
        return self.wg_m // 64

    @property
    def num_inst_n(self) -> int:
        """Instructions per warpgroup along N."""
        return self.wg_n // self.shape.inst_n

    @property
    def num_k_atoms(self) -> int:
        """Instructions along K per block_k."""
        return self.block_k // self.shape.inst_k

    @property
    def accum_elems(self) -> int:
        """Accumulator elements per thread: 4 per 8 columns per m64 instruction."""
        return self.num_inst_m * (self.wg_n // 8) * 4

    @property
    def accum_regs(self) -> int:
        """32-bit registers holding the accumulator of one thread."""
        return self.accum_elems * _ACCUM[self.accum][2] // 32

    @property
    def a_elems_per_inst(self) -> int:
        """A elements per thread for one m64 x inst_k register operand (16 bytes)."""
        return 16 // self.a_type.bytes

    @property
    def a_elems(self) -> int:
        return self.num_inst_m * self.num_k_atoms * self.a_elems_per_inst

    @property
    def a_regs(self) -> int:
        """32-bit registers holding the RS A operand of one thread (4 per instruction)."""
        return self.a_elems * self.a_type.bytes // 4

    @property
    def accum_storage(self) -> str:
        return _ACCUM[self.accum][0]

    def c_offset(self, i: int, j: int) -> int:
        """Accumulator element offset of instruction (i, j) in a thread's registers."""
        return (i * (self.wg_n // 8) + j * (self.shape.inst_n // 8)) * 4

    def a_offset(self, i: int, ki: int) -> int:
        """RS A element offset of instruction (i, ki) in a thread's registers."""
        return (ki * self.num_inst_m + i) * self.a_elems_per_inst

    # ---- layouts ------------------------------------------------------------------------

    @property
    def a_shared_layout(self) -> Layout:
        """Shared-memory layout of A ([block_m, block_k] K-major, [block_k, block_m] MN-major)."""
        if self.a_params is None:
            raise ValueError("a_source: A is in registers; it has no shared layout")
        return operand_layout(self.a_params)

    @property
    def b_shared_layout(self) -> Layout:
        """Shared-memory layout of B ([block_n, block_k] K-major, [block_k, block_n] MN-major)."""
        return operand_layout(self.b_params)

    def accum_layout(self, waves: int = 1) -> Fragment:
        """T.Fragment of the [block_m, block_n] accumulator (PTX ISA "Register Fragments", D).

        ``waves`` > 1: the [waves · block_m, block_n] result of that many of this tile stacked
        along M (DeepGEMM's waves: one tile's rows issued as several wgmma batches that share
        B), wave v's rows [v · block_m, (v + 1) · block_m) held by the threads that hold them
        in this tile's accumulator, after wave v - 1's in each thread's registers; a wave's
        temporary accumulator then promotes into its rows thread by thread."""
        waves = _int_arg("waves", waves, minimum=1)
        wg_m, wg_n, wgs_n, offset = self.wg_m, self.wg_n, self.warpgroups_n, self.thread_offset
        bm, elems = self.block_m, self.accum_elems

        def thread(i, j):
            r = i if waves == 1 else i % bm
            warpgroup = r // wg_m * wgs_n + j // wg_n
            return warpgroup * 128 + r % 64 // 16 * 32 + r % 8 * 4 + j % 8 // 2 + offset

        def index(i, j):
            r = i if waves == 1 else i % bm
            within = (r % wg_m // 64 * (wg_n // 8) + j % wg_n // 8) * 4 + r % 16 // 8 * 2 + j % 2
            return within if waves == 1 else i // bm * elems + within

        return Fragment([waves * bm, self.block_n], forward_thread_fn=thread, forward_index_fn=index)

    def accum_row_layout(self) -> Fragment:
        """T.Fragment of a [block_m] vector held beside the accumulator: value i on every thread
        whose accumulator fragment has row i (the 4 lanes of its quad in each warpgroup along
        N), so that ``acc[i, j] * v[i]`` reads registers only (PTX ISA "Register Fragments": lane l holds
        rows l/4 and l/4 + 8 of its warp's 16)."""
        wg_m, wgs_n, offset = self.wg_m, self.warpgroups_n, self.thread_offset

        def thread(i, rep=0):
            warpgroup = i // wg_m * wgs_n + rep // 4
            return warpgroup * 128 + i % 64 // 16 * 32 + i % 8 * 4 + rep % 4 + offset

        def index(i):
            return i % wg_m // 64 * 2 + i % 16 // 8

        return Fragment([self.block_m], forward_thread_fn=thread, replicate=4 * wgs_n, forward_index_fn=index)

    def accum_col_layout(self) -> Fragment:
        """T.Fragment of a [block_n] vector held beside the accumulator: value j on every thread
        whose accumulator fragment has column j (one lane of each quad row, in each warp and
        warpgroup along M; PTX ISA "Register Fragments": lane l holds columns 8c + 2(l%4) + {0, 1})."""
        wg_n, wgs_n, offset = self.wg_n, self.warpgroups_n, self.thread_offset

        def thread(j, rep=0):
            warpgroup = rep // 32 * wgs_n + j // wg_n
            return warpgroup * 128 + rep % 32 // 8 * 32 + rep % 8 * 4 + j % 8 // 2 + offset

        def index(j):
            return j % wg_n // 8 * 2 + j % 2

        return Fragment([self.block_n], forward_thread_fn=thread, replicate=32 * self.warpgroups_m,
                        forward_index_fn=index)

    def a_register_layout(self) -> Fragment:
        """T.Fragment of the [block_m, block_k] RS A operand, replicated over warpgroups along N.

        Per 64 x inst_k instruction, lane l of warp w holds rows 16w + l/4 (+8) and
        ``v = 4 / bytes`` consecutive K elements at v*(l%4) (+ 4v) of each 8-row half.
        """
        v = 4 // self.a_type.bytes
        inst_k = self.shape.inst_k

        def thread(i, k, rep=0):
            r = i % self.wg_m % 64
            wg = (i // self.wg_m) * self.warpgroups_n + rep
            return wg * 128 + r // 16 * 32 + r % 8 * 4 + k % inst_k % (4 * v) // v + self.thread_offset

        def index(i, k):
            r = i % self.wg_m
            kk = k % inst_k
            base = ((k // inst_k) * self.num_inst_m + r // 64) * self.a_elems_per_inst
            return base + kk // (4 * v) * 2 * v + r % 16 // 8 * v + kk % v

        return Fragment([self.block_m, self.block_k], forward_thread_fn=thread,
                        replicate=self.warpgroups_n, forward_index_fn=index)

    # ---- macros: descriptors and synchronisation ----------------------------------------

    def init_descriptor(self, desc, shared, params: DescriptorParams):
        """Initialise ``desc`` for the tile at ``shared`` (a buffer or region): start address,
        LBO, SBO and layout type from ``params``, base offset 0 (PTX ISA "Matrix Descriptor
        Format"; the tile starts on its swizzle's repeat)."""
        layout_type = params.swizzle.layout_type
        lbo = params.leading_byte_offset >> 4
        sbo = params.stride_byte_offset >> 4

        @T.macro
        def _init(desc):
            T.initialize_wgmma_descriptor(desc, shared.access_ptr("r"), layout_type, lbo, sbo)

        return _init(desc)

    def init_a_descriptor(self, desc, a_shared):
        if self.a_params is None:
            raise ValueError("a_source: A is in registers; it has no descriptor")
        return self.init_descriptor(desc, a_shared, self.a_params)

    def init_b_descriptor(self, desc, b_shared):
        return self.init_descriptor(desc, b_shared, self.b_params)

    def fence_a(self, a_local):
        """Keep the compiler from moving register-A reads across the asynchronous wgmma."""
        regs = self.a_regs

        @T.macro
        def _fence(a_local):
            T.warpgroup_fence_operand(a_local, num_regs=regs)

        return _fence(a_local)

    def fence_c(self, c_local):
        """Keep the compiler from moving accumulator uses across the asynchronous wgmma."""
        regs = self.accum_regs

        @T.macro
        def _fence(c_local):
            T.warpgroup_fence_operand(c_local, num_regs=regs)

        return _fence(c_local)

    def arrive(self):
        @T.macro
        def _arrive():
            T.warpgroup_arrive()

        return _arrive()

    def commit(self):
        @T.macro
        def _commit():
            T.warpgroup_commit_batch()

        return _commit()

    def wait(self, n: int = 0):
        """``wgmma.wait_group n``: at most ``n`` committed batches stay in flight."""
        n = _check_wait(n)

        @T.macro
        def _wait():
            T.warpgroup_wait(n)

        return _wait()

    # ---- macros: atoms ----------------------------------------------------------------

    def _operand_offset(self, params: DescriptorParams, mn0, k0: int):
        """Descriptor start offset (16-byte units) of the sub-operand at (mn0, k0).

        ``mn0`` may be a PrimExpr (the warpgroup's row/column origin); it is always a
        multiple of the instruction extent, which ``check_instruction`` proved to
        start a core-matrix group or swizzle-atom column, so the offset is linear in it.
        """
        unit = params.atom_offset(params.mn_atom_elems, 0) - params.atom_offset(0, 0) if params.tile_mn > params.mn_atom_elems else 0
        const = params.atom_offset(0, k0)
        return (const + mn0 // params.mn_atom_elems * unit) // 16

    def _warpgroup_index(self):
        """(m, n) warpgroup coordinates of this thread, broadcast from lane 0 (``__shfl_sync``):
        nvcc then knows them warp-uniform and keeps the atoms' descriptor arithmetic in uniform
        registers (as CUTLASS's ``canonical_warp_group_idx``)."""
        if self.num_warpgroups == 1:
            return 0, 0
        tx = T.get_thread_binding() - self.thread_offset
        wg = T.shfl_sync(tx // 128, 0)
        return wg // self.warpgroups_n, wg % self.warpgroups_n

    def _scale_d(self, ki: int, clear_accum, first_ki: int = 0):
        """wgmma scale-d: 0 overwrites D (first K atom ``first_ki`` of a cleared tile), 1 accumulates."""
        if ki != first_ki:
            return 1
        if isinstance(clear_accum, bool):
            return 0 if clear_accum else 1
        return T.Select(clear_accum, 0, 1)

    def ss_atom(self, desc_a, desc_b, c_local, i: int, j: int, ki: int, clear_accum=False, a_start=0, b_start=0,
                first_ki: int = 0):
        """One ``wgmma.mma_async`` SS for instruction (i, j, ki) of this thread's warpgroup;
        ``a_start`` / ``b_start`` (16-byte units, may be PrimExprs) move the descriptors' start
        addresses, e.g. to a ring stage (ints: whole swizzle repeats, as ``ss``'s stage offsets);
        ``clear_accum`` overwrites D at K atom ``first_ki``."""
        if self.a_params is None:
            raise ValueError("ss_atom: the emitter was built with a_source='register'; use rs_atom")
        i, j, ki = self._check_atom(i, j, ki)
        _check_start("a_start", a_start, self.a_params)
        _check_start("b_start", b_start, self.b_params)
        a_params, b_params, shape = self.a_params, self.b_params, self.shape
        k0 = ki * shape.inst_k
        c_off = self.c_offset(i, j)
        scale_d = self._scale_d(ki, clear_accum, first_ki)
        a_k_major = self.a_major is Major.K
        b_k_major = self.b_major is Major.K
        a_ptx, b_ptx, acc = _PTX_INPUT[self.a_type.name], _PTX_INPUT[self.b_type.name], self.accum

        @T.macro
        def _atom(desc_a, desc_b, c_local):
            wm, wn = self._warpgroup_index()
            a_off = self._operand_offset(a_params, wm * self.wg_m + i * 64, k0) + a_start
            b_off = self._operand_offset(b_params, wn * self.wg_n + j * shape.inst_n, k0) + b_start
            T.ptx_wgmma_ss(_ACCUM[acc][0], shape.prefix, a_k_major, b_k_major, a_ptx, b_ptx, _ACCUM[acc][1],
                           desc_a.data, a_off, desc_b.data, b_off, c_local.data, c_off, scale_d, True, True)

        return _atom(desc_a, desc_b, c_local)

    def rs_atom(self, a_local, desc_b, c_local, i: int, j: int, ki: int, clear_accum=False, b_start=0):
        """One ``wgmma.mma_async`` RS (A from registers) for instruction (i, j, ki); ``b_start``
        as in ``ss_atom``."""
        if self.a_source != "register":
            raise ValueError("rs_atom: the emitter was built with a_source='shared'; use ss_atom")
        i, j, ki = self._check_atom(i, j, ki)
        _check_start("b_start", b_start, self.b_params)
        b_params, shape = self.b_params, self.shape
        k0 = ki * shape.inst_k
        c_off = self.c_offset(i, j)
        a_off = self.a_offset(i, ki)
        scale_d = self._scale_d(ki, clear_accum)
        b_k_major = self.b_major is Major.K
        a_ptx, b_ptx, acc = _PTX_INPUT[self.a_type.name], _PTX_INPUT[self.b_type.name], self.accum

        @T.macro
        def _atom(a_local, desc_b, c_local):
            _, wn = self._warpgroup_index()
            b_off = self._operand_offset(b_params, wn * self.wg_n + j * shape.inst_n, k0) + b_start
            T.ptx_wgmma_rs(_ACCUM[acc][0], shape.prefix, b_k_major, a_ptx, b_ptx, _ACCUM[acc][1],
                           a_local.data, a_off, desc_b.data, b_off, c_local.data, c_off, scale_d, True, True)

        return _atom(a_local, desc_b, c_local)

    def _check_atom(self, i: int, j: int, ki: int) -> tuple[int, int, int]:
        """(i, j, ki) as ints, each in its range (ints or numpy integers, not bools)."""
        out = []
        for name, value, bound in (("i", i, self.num_inst_m), ("j", j, self.num_inst_n), ("ki", ki, self.num_k_atoms)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < bound:
                raise ValueError(f"{name}: {value!r} must be an int in [0, {bound})")
            out.append(int(value))
        return tuple(out)

    # ---- macros: tiles ----------------------------------------------------------------

    def atoms(self, k_atoms: range | None = None) -> list[tuple[int, int, int]]:
        """The (i, j, ki) issue order of a tile: N outer, then M, K innermost; ``k_atoms``: only
        these K atoms (a slice of block_k, e.g. one 128-deep scale block of a 256-deep tile)."""
        if k_atoms is not None and not isinstance(k_atoms, range):
            raise ValueError(f"k_atoms: expected None or a range of K atoms within [0, {self.num_k_atoms}), "
                             f"got {k_atoms!r}")
        ks = range(self.num_k_atoms) if k_atoms is None else k_atoms
        if not ks or ks.step != 1 or ks.start < 0 or ks.stop > self.num_k_atoms:
            raise ValueError(f"k_atoms: a non-empty contiguous range within [0, {self.num_k_atoms}), got {ks!r}")
        return [(i, j, ki) for j in range(self.num_inst_n) for i in range(self.num_inst_m) for ki in ks]

    def ring_descriptors(self, a_shared, b_shared):
        """Descriptors of ``a_shared`` (None when A is in registers) and ``b_shared``, allocated
        and initialised once, before a K loop: ``ss`` / ``rs`` given them (``descriptors=``)
        add each step's stage offset to the atoms' start addresses instead of rebuilding the
        descriptors' bit fields every step: half the instructions of a bf16 K step, 1.08x for
        block-scaled FP8 at M = 4096 on the H100 (benchmarks/results/descriptor_hoist.md)."""
        desc_a = None
        if a_shared is not None:
            desc_a = T.alloc_wgmma_desc()
            self.init_a_descriptor(desc_a, a_shared)
        desc_b = T.alloc_wgmma_desc()
        self.init_b_descriptor(desc_b, b_shared)
        return desc_a, desc_b

    def ss(self, a_shared, b_shared, c_local, *, clear_accum=False, wait: int | None = 0,
           a_stage_offset=0, b_stage_offset=0, descriptors=None, k_atoms: range | None = None):
        """The whole block_m x block_n x block_k tile from shared memory as one wgmma batch.

        fence C, arrive, all (i, j, ki) atoms, commit; then ``wait(wait)`` unless ``wait``
        is None (the caller waits later and may overlap loads, promotion or an epilogue).
        The stage offsets are bytes from the start of ``a_shared`` / ``b_shared``;
        ``descriptors``: ``ring_descriptors(a_shared, b_shared)``, else the batch builds its own;
        ``k_atoms``: only that slice of the K atoms (``atoms``), ``clear_accum`` at its first.
        A stage offset that is an int must be a non-negative multiple of the operand's
        ``swizzle.alignment`` bytes (``_start_units``).
        """
        if self.a_params is None:
            raise ValueError("ss: the emitter was built with a_source='register'; use rs")
        wait = _check_wait(wait)
        atoms = self.atoms(k_atoms)
        first_ki = atoms[0][2]
        a_start = _start_units(a_stage_offset, self.a_params.swizzle.alignment, "a_stage_offset")
        b_start = _start_units(b_stage_offset, self.b_params.swizzle.alignment, "b_stage_offset")

        @T.macro
        def _tile(a_shared, b_shared, c_local):
            # One statement (a unit loop), so a software pipeline sees the shared-memory
            # reads of the descriptors and the wgmma that consumes them as one step.
            for _ in T.serial(1):
                if descriptors is None:
                    desc_a = T.alloc_wgmma_desc()
                    desc_b = T.alloc_wgmma_desc()
                    self.init_a_descriptor(desc_a, a_shared)
                    self.init_b_descriptor(desc_b, b_shared)
                else:
                    desc_a, desc_b = descriptors
                self.fence_c(c_local)
                self.arrive()
                for i, j, ki in atoms:
                    self.ss_atom(desc_a, desc_b, c_local, i, j, ki, clear_accum, a_start, b_start, first_ki)
                self.commit()
                if wait is not None:
                    self.wait(wait)
                self.fence_c(c_local)

        return _tile(a_shared, b_shared, c_local)

    def rs(self, a_local, b_shared, c_local, *, clear_accum=False, wait: int | None = 0, b_stage_offset=0,
           desc_b=None):
        """The whole tile with A from registers (``a_register_layout``) as one wgmma batch;
        ``b_stage_offset`` and ``desc_b`` (``ring_descriptors(None, b_shared)[1]``) as in ``ss``."""
        if self.a_source != "register":
            raise ValueError("rs: the emitter was built with a_source='shared'; use ss")
        wait = _check_wait(wait)
        atoms = self.atoms()
        b_start = _start_units(b_stage_offset, self.b_params.swizzle.alignment, "b_stage_offset")

        @T.macro
        def _tile(a_local, b_shared, c_local):
            for _ in T.serial(1):
                if desc_b is None:
                    desc = T.alloc_wgmma_desc()
                    self.init_b_descriptor(desc, b_shared)
                else:
                    desc = desc_b
                self.fence_a(a_local)
                self.fence_c(c_local)
                self.arrive()
                for i, j, ki in atoms:
                    self.rs_atom(a_local, desc, c_local, i, j, ki, clear_accum, b_start)
                self.commit()
                if wait is not None:
                    self.wait(wait)
                self.fence_c(c_local)
                self.fence_a(a_local)

        return _tile(a_local, b_shared, c_local)
