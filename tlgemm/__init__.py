"""tlgemm: Hopper GEMMs built from WGMMA macro-instructions, in TileLang and Triton.

The entry points load on first use, so ``import tlgemm`` imports neither torch, TileLang nor
Triton: matmul, addmm, bmm, scaled_mm, explain, autotune (tlgemm.api; the torch.library ops
in tlgemm.ops), Target and TARGETS (explain's targets), quantize_fp8_blockwise /
dequantize_fp8_blockwise (tlgemm.quantize), and the subpackage tlgemm.schedules.
"""

from importlib import import_module as _import_module

__version__ = "0.1.0"

_LAZY = {
    **dict.fromkeys(("matmul", "addmm", "bmm", "scaled_mm", "explain", "autotune", "Explanation", "AutotuneResult",
                     "Target", "TARGETS"), "tlgemm.api"),
    **dict.fromkeys(("quantize_fp8_blockwise", "dequantize_fp8_blockwise"), "tlgemm.quantize"),
}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name == "schedules":
        value = _import_module("tlgemm.schedules")
        globals()[name] = value
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tlgemm' has no attribute {name!r}")
    value = getattr(_import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | {"schedules"})
