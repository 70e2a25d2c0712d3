"""`Schedule`: how a GEMM's output tiles and K-iterations are laid out over programs.

A schedule is the "how" of a GEMM (the algorithm/schedule split of Halide and Decoupled
Triton): tile shape, tile order, pipelining, threads and the work decomposition. It carries no
problem size, so one schedule applies to any (M, N, K). It is a frozen dataclass validated at
construction; the chainable primitives below each return a new, validated schedule, so

    Schedule.default().block(m=128, n=256).tensorize(k=64).map("grouped", 8) \\
        .stages(4).warpgroups(2).persistent()

equals ``Schedule(block_n=256, num_stages=4, num_warpgroups=2, is_persistent=True)``.

Field names avoid the method names (a dataclass cannot have both): the method ``stages(n)``
sets ``num_stages``, ``warpgroups(n)`` sets ``num_warpgroups``, ``persistent()`` sets
``is_persistent``, ``swap_ab()`` sets ``is_swap_ab``, ``streamk(t)`` sets ``streamk_tiles``,
``splitk(n)`` sets ``split_k``, ``chiplet(x, c)`` sets ``num_xcds``/``chunk_size``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Schedule", "RASTERS", "MAP_KINDS", "BLOCK_MN_SIZES", "BLOCK_K_SIZES", "BLOCK_N_STEP", "MAX_THREADS", "CLUSTER_SIZES"]

RASTERS = ("m", "n")
MAP_KINDS = ("grouped", "grouped_n", "row", "column")
BLOCK_MN_SIZES = (16, 32, 64, 128, 256)
BLOCK_K_SIZES = (16, 32, 64, 128, 256)
#: block_n may be any multiple of this in [16, 256]: every WGMMA N from 32 up is a multiple of 16
#: for every input type (PTX ISA 9.7.15.5.1). Power-of-two block_n is what Triton's tl.arange and
#: the GEMM kernels take; only the TileLang block-scaled kernel takes the others.
BLOCK_N_STEP = 16
MAX_THREADS = 1024  # threads per CTA (CUDA and HIP limit)
CLUSTER_SIZES = (1, 2)  # programs per thread-block cluster (Schedule.cluster_m)
_WARPGROUP_THREADS = 128
INT32_MAX = 2**31 - 1


def _require_int(name: str, value: Any, minimum: int) -> None:
    """An int in [minimum, 2**31 - 1]: the kernels receive every field as a 32-bit integer."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"Schedule.{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"Schedule.{name} must be >= {minimum}, got {value}")
    if value > INT32_MAX:
        raise ValueError(f"Schedule.{name} must be <= 2**31 - 1 (the kernels take it as an int32), got {value}")


def _require_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"Schedule.{name} must be a bool, got {value!r} ({type(value).__name__})")


@dataclass(frozen=True)
class Schedule:
    """Tile schedule of a GEMM C[M, N] = A[M, K] · B[K, N]; see the module docstring.

    Fields:
      block_m, block_n, block_k: the output tile (block_m x block_n) and the K step of one
        K-iteration; block_m in BLOCK_MN_SIZES and block_k in BLOCK_K_SIZES (powers of two),
        block_n a multiple of BLOCK_N_STEP in [16, 256] (``has_pow2_block_n`` says whether it
        is one of BLOCK_MN_SIZES, which most kernels need).
      group_size_m, raster: tile order (see ``grouped_coords``). raster "m": groups of
        group_size_m tile-rows, pid_m fastest inside a group (Triton tutorial / tritonBLAS);
        raster "n": the mirror, groups of group_size_m tile-columns, pid_n fastest.
      num_stages: depth of the shared-memory operand pipeline (>= 1).
      num_warpgroups: consumer (MMA) warpgroups; ``threads`` adds one producer warpgroup.
      is_persistent: launch ``persistent_programs`` programs, at most num_sms (num_sms with
        Stream-K), that loop over the work (stride = grid size) instead of one program per
        work unit.
      num_sms: SM count of a persistent schedule; None = supplied at launch time through the
        ``num_sms=`` argument of ``num_programs``/``work``/``streamk_plan``. Only for
        persistent schedules.
      streamk_tiles: Stream-K: the last min(streamk_tiles, total tiles) tiles are split by
        K-iterations over all num_sms programs (needs is_persistent; 0 = off).
      split_k: split each tile's K-iterations into min(split_k, K-iterations) contiguous
        ranges, one work unit each (1 = off; not combined with Stream-K).
      num_xcds, chunk_size: AMD chiplet remapping of program ids (tritonBLAS
        ``chiplet_transform_chunked``); num_xcds == 1 = off, and then chunk_size must be 1.
        chunk_size == 1 leaves the ids unchanged (tritonBLAS semantics); use chunk_size >= 2
        for L2 locality per XCD.
      is_swap_ab: compute Cᵀ[N, M] = Bᵀ · Aᵀ: the kernel's problem is (N, M) and every tile
        coordinate refers to it (small-M GEMMs on Hopper, whose WGMMA M is 64 per warpgroup).
      cluster_m: programs per thread-block cluster (Hopper; 1 = no clusters). With 2,
        programs 2c and 2c + 1 form a cluster: their tiles of each round are consecutive tile
        ids, which under a grouped raster "m" usually share a tile column, and then B's tile
        is read once and TMA-multicast to both (PTX ISA 9.7.9.25). Which program runs which
        tile is unchanged. Needs a persistent schedule without Stream-K, split-K or the
        chiplet remapping (which would part a pair's tiles). The kernel launches whole
        clusters: ``num_programs`` rounded up to even, the extra program idle.

    ``text`` is ``str(schedule)`` (``parse``'s input), computed once at construction: a plain
    str attribute, for consumers that pass a schedule on as one value (a tracer reads a str as
    a constant, where it may make int fields symbolic).
    """

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    group_size_m: int = 8
    raster: str = "m"
    num_stages: int = 3
    num_warpgroups: int = 1
    is_persistent: bool = False
    num_sms: int | None = None
    streamk_tiles: int = 0
    split_k: int = 1
    num_xcds: int = 1
    chunk_size: int = 1
    is_swap_ab: bool = False
    cluster_m: int = 1

    def __post_init__(self) -> None:
        for name, sizes in (("block_m", BLOCK_MN_SIZES), ("block_k", BLOCK_K_SIZES)):
            value = getattr(self, name)
            _require_int(name, value, 1)
            if value not in sizes:
                raise ValueError(f"Schedule.{name} must be a power of two in [{sizes[0]}, {sizes[-1]}], got {value}")
        _require_int("block_n", self.block_n, 1)
        if self.block_n % BLOCK_N_STEP or not BLOCK_MN_SIZES[0] <= self.block_n <= BLOCK_MN_SIZES[-1]:
            raise ValueError(f"Schedule.block_n must be a multiple of {BLOCK_N_STEP} in "
                             f"[{BLOCK_MN_SIZES[0]}, {BLOCK_MN_SIZES[-1]}], got {self.block_n}")
        _require_int("group_size_m", self.group_size_m, 1)
        if self.raster not in RASTERS:
            raise ValueError(f"Schedule.raster must be one of {RASTERS}, got {self.raster!r}")
        _require_int("num_stages", self.num_stages, 1)
        _require_int("num_warpgroups", self.num_warpgroups, 1)
        if self.threads > MAX_THREADS:
            raise ValueError(
                f"Schedule.num_warpgroups={self.num_warpgroups} needs {self.threads} threads "
                f"(128 x (consumers + 1 producer)); a CTA has at most {MAX_THREADS}"
            )
        _require_bool("is_persistent", self.is_persistent)
        if self.num_sms is not None:
            _require_int("num_sms", self.num_sms, 1)
            if not self.is_persistent:
                raise ValueError("Schedule.num_sms applies to persistent schedules only: set is_persistent=True")
        _require_int("streamk_tiles", self.streamk_tiles, 0)
        _require_int("split_k", self.split_k, 1)
        if self.streamk_tiles > 0 and not self.is_persistent:
            raise ValueError("Schedule.streamk_tiles > 0 needs is_persistent=True (Stream-K runs on a persistent grid)")
        if self.streamk_tiles > 0 and self.split_k > 1:
            raise ValueError("Schedule.streamk_tiles > 0 and split_k > 1 cannot be combined: use one of them")
        _require_int("num_xcds", self.num_xcds, 1)
        _require_int("chunk_size", self.chunk_size, 1)
        if self.num_xcds == 1 and self.chunk_size != 1:
            raise ValueError(f"Schedule.chunk_size={self.chunk_size} applies only with num_xcds > 1 (the chiplet "
                             "remapping); with num_xcds=1 it must be 1")
        _require_bool("is_swap_ab", self.is_swap_ab)
        _require_int("cluster_m", self.cluster_m, 1)
        if self.cluster_m not in CLUSTER_SIZES:
            raise ValueError(f"Schedule.cluster_m must be one of {CLUSTER_SIZES}, got {self.cluster_m}")
        if self.cluster_m > 1 and not (self.is_persistent and self.streamk_tiles == 0 and self.split_k == 1):
            raise ValueError("Schedule.cluster_m > 1 needs a persistent schedule without Stream-K or split-K")
        if self.cluster_m > 1 and self.num_xcds > 1:
            raise ValueError("Schedule.cluster_m > 1 cannot be combined with num_xcds > 1: the chiplet remapping "
                             "would give a cluster's two programs tiles that are not consecutive")
        object.__setattr__(self, "text", str(self))

    # ---- derived quantities -------------------------------------------------------------

    @property
    def has_pow2_block_n(self) -> bool:
        """Whether block_n is a power of two (Triton's tl.arange and the GEMM kernels need one)."""
        return self.block_n in BLOCK_MN_SIZES

    @property
    def threads(self) -> int:
        """Threads per CTA = 128 · (num_warpgroups + 1): the consumer warpgroups plus one
        producer warpgroup issuing the TMA loads (Hopper warp specialisation)."""
        return _WARPGROUP_THREADS * (self.num_warpgroups + 1)

    @property
    def consumer_warps(self) -> int:
        """Warps doing MMA = 4 · num_warpgroups (a backend may launch more warps than this)."""
        return 4 * self.num_warpgroups

    # ---- chainable primitives (each returns a new, validated Schedule) ----------------

    @classmethod
    def default(cls) -> Schedule:
        """The default schedule: 128x128x64 tiles, grouped raster of 8, 3 stages, 1 consumer
        warpgroup, one program per tile."""
        return cls()

    def _with(self, **changes: Any) -> Schedule:
        return dataclasses.replace(self, **changes)

    def block(self, m: int | None = None, n: int | None = None) -> Schedule:
        """Output tile block_m x block_n (an omitted side is kept)."""
        return self._with(
            block_m=self.block_m if m is None else m,
            block_n=self.block_n if n is None else n,
        )

    def tensorize(self, k: int) -> Schedule:
        """K step of one K-iteration (block_k)."""
        return self._with(block_k=k)

    def map(self, kind: str, group_size: int | None = None) -> Schedule:
        """Tile order. kind:
        "grouped"   raster "m", groups of group_size (default 8) tile-rows, pid_m fastest;
        "grouped_n" raster "n", groups of group_size (default 8) tile-columns, pid_n fastest;
        "row"       row-major: tile = pid_m · tiles_n + pid_n (= raster "m", group 1);
        "column"    column-major: tile = pid_n · tiles_m + pid_m (= raster "n", group 1).
        """
        if kind in ("grouped", "grouped_n"):
            size = 8 if group_size is None else group_size
            return self._with(raster="m" if kind == "grouped" else "n", group_size_m=size)
        if kind in ("row", "column"):
            if group_size is not None and (type(group_size) is not int or group_size != 1):
                raise ValueError(f"map({kind!r}) takes no group_size (it is 1), got {group_size!r}")
            return self._with(raster="m" if kind == "row" else "n", group_size_m=1)
        raise ValueError(f"map kind must be one of {MAP_KINDS}, got {kind!r}")

    def stages(self, n: int) -> Schedule:
        """Pipeline depth (num_stages)."""
        return self._with(num_stages=n)

    def warpgroups(self, n: int) -> Schedule:
        """Consumer warpgroups (num_warpgroups)."""
        return self._with(num_warpgroups=n)

    def persistent(self, num_sms: int | None = None) -> Schedule:
        """Persistent grid; num_sms None = the device's count, given at launch time (it also
        clears a num_sms set before)."""
        return self._with(is_persistent=True, num_sms=num_sms)

    def streamk(self, tiles: int) -> Schedule:
        """Stream-K over the last ``tiles`` tiles; implies a persistent grid (0 = off)."""
        _require_int("streamk_tiles", tiles, 0)
        return self._with(streamk_tiles=tiles, is_persistent=self.is_persistent or tiles > 0)

    def splitk(self, n: int) -> Schedule:
        """Split each tile's K-iterations into n contiguous ranges."""
        return self._with(split_k=n)

    def chiplet(self, num_xcds: int, chunk_size: int = 1) -> Schedule:
        """AMD chiplet remapping of program ids over num_xcds XCDs in chunks of chunk_size
        (tritonBLAS's chunked transform: chunk_size 1 leaves the ids as they are)."""
        return self._with(num_xcds=num_xcds, chunk_size=chunk_size)

    def cluster(self, m: int) -> Schedule:
        """Programs per thread-block cluster (cluster_m)."""
        return self._with(cluster_m=m)

    def swap_ab(self, flag: bool = True) -> Schedule:
        """Compute Cᵀ = Bᵀ · Aᵀ (kernel problem (N, M))."""
        return self._with(is_swap_ab=flag)

    # ---- serialisation -----------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (JSON-serialisable)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Schedule:
        """Inverse of ``to_dict``; unknown keys are an error, missing keys take defaults."""
        if not isinstance(data, dict):
            raise ValueError(f"Schedule.from_dict needs a dict, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(map(repr, set(data) - known))
        if unknown:
            raise ValueError(f"Schedule.from_dict: unknown field(s) {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """Inverse of ``str(schedule)`` (how benchmarks/results' JSONs record schedules)."""
        if not isinstance(text, str):
            raise ValueError(f"Schedule.parse needs a str, got {type(text).__name__}")
        words = text.split()

        def number(word: str, value: str) -> int:
            if not re.fullmatch(r"0|[1-9][0-9]*", value):
                raise ValueError(f"Schedule.parse: {value!r} in the word {word!r} of {text!r} is not a decimal "
                                 "integer (ASCII digits, no sign, no leading zero)")
            return int(value)

        sizes = words[0].split("x") if words else []
        if len(sizes) != 3:
            raise ValueError(f"Schedule.parse: {text!r} does not start with <block_m>x<block_n>x<block_k>")
        bm, bn, bk = (number(words[0], v) for v in sizes)
        fields: dict[str, Any] = {"block_m": bm, "block_n": bn, "block_k": bk}
        keys = {"raster": ("raster", str), "g": ("group_size_m", int), "stages": ("num_stages", int),
                "wg": ("num_warpgroups", int), "streamk": ("streamk_tiles", int), "splitk": ("split_k", int),
                "cluster_m": ("cluster_m", int)}

        def put(name: str, value: Any, word: str) -> None:
            if name in fields:
                raise ValueError(f"Schedule.parse: the word {word!r} sets {name} a second time in {text!r}")
            fields[name] = value

        for word in words[1:]:
            key, _, value = word.partition("=")
            if word == "swap_ab":
                put("is_swap_ab", True, word)
            elif word.startswith("persistent(") and word.endswith(")"):
                sms = word[len("persistent("):-1]
                put("is_persistent", True, word)
                fields["num_sms"] = None if sms == "device" else number(word, sms)
            elif key == "xcds" and value.count("/chunk=") == 1:
                xcds, chunk = value.split("/chunk=")
                put("num_xcds", number(word, xcds), word)
                fields["chunk_size"] = number(word, chunk)
            elif key in keys and value:
                name, kind = keys[key]
                put(name, value if kind is str else number(word, value), word)
            else:
                raise ValueError(f"Schedule.parse: unknown word {word!r} in {text!r}")
        return cls(**fields)

    def __str__(self) -> str:
        parts = [f"{self.block_m}x{self.block_n}x{self.block_k}", f"raster={self.raster}", f"g={self.group_size_m}",
                 f"stages={self.num_stages}", f"wg={self.num_warpgroups}"]
        if self.is_persistent:
            parts.append(f"persistent({self.num_sms if self.num_sms is not None else 'device'})")
        if self.streamk_tiles:
            parts.append(f"streamk={self.streamk_tiles}")
        if self.split_k > 1:
            parts.append(f"splitk={self.split_k}")
        if self.num_xcds > 1:
            parts.append(f"xcds={self.num_xcds}/chunk={self.chunk_size}")
        if self.is_swap_ab:
            parts.append("swap_ab")
        if self.cluster_m > 1:
            parts.append(f"cluster_m={self.cluster_m}")
        return " ".join(parts)
