"""Interpreter copies of tlgemm.triton for CPU tests, beside the compiled copies.

Fact (triton/runtime/jit.py, Triton 3.6): ``triton.jit`` reads ``knobs.runtime.interpret``
(TRITON_INTERPRET) when it decorates a function, returning an ``InterpretedFunction`` or a
``JITFunction`` for good; a launch just runs what was built. So one pytest process can hold
both: ``import_interpreted`` imports fresh copies of the modules with the knob set (exactly
what TRITON_INTERPRET=1 at import time does) and then restores ``sys.modules``, so every
other import of tlgemm.triton, and the GPU-target compile tests, get the compiled copies.

Triton's own ``@jit`` helpers (``tl.cdiv``, ...) were decorated when triton was imported,
compiled; ``_interpret_triton_helpers`` hands the interpreter interpreted twins of them for
the duration of each interpreted launch (the interpreter's ``_patch_lang`` scope, restored
when the launch ends). test_triton_interpreter.py also runs a kernel in a fresh process with
TRITON_INTERPRET=1 set before triton is imported, where none of this is needed.
"""

import importlib
import importlib.util
import pathlib
import sys
import types

import pytest
import triton
# The interpreter's argument conversion imports gluon lazily, and gluon asserts that tl.cdiv
# is a JITFunction: import it now, before any launch swaps tl.cdiv for its twin.
import triton.experimental.gluon  # noqa: F401
import triton.language as tl
import triton.language.standard
from triton.runtime import interpreter
from triton.runtime.jit import JITFunction

import tlgemm


def _interpret_triton_helpers():
    """Wrap ``interpreter._patch_lang`` to also swap triton.language's JITFunctions for
    InterpretedFunctions within the launch's patch scope (idempotent)."""
    original = interpreter._patch_lang
    if getattr(original, "_tlgemm_helpers", False):
        return
    twins = {}

    def patch_lang(fn):
        scope = original(fn)
        for module in (tl, tl.standard):
            for name, value in list(vars(module).items()):
                if isinstance(value, JITFunction):
                    if id(value) not in twins:  # keyed by id: hashing a JITFunction compiles its key
                        twins[id(value)] = interpreter.InterpretedFunction(value.fn)
                    scope.set_attr(module, name, twins[id(value)])
        return scope

    patch_lang._tlgemm_helpers = True
    interpreter._patch_lang = patch_lang


def _ours(name: str) -> bool:
    return name == "tlgemm.triton" or name.startswith("tlgemm.triton.")


def import_interpreted(*paths: pathlib.Path) -> dict[str, types.ModuleType]:
    """Fresh interpreter-mode copies of tlgemm.triton's modules and of the module files
    ``paths`` (which may import tlgemm.triton), keyed by module name (file stem)."""
    _interpret_triton_helpers()
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if _ours(name)}
    saved_attr = getattr(tlgemm, "triton", None)
    try:
        with triton.knobs.runtime.scope():
            triton.knobs.runtime.interpret = True
            importlib.import_module("tlgemm.triton")
            extra = {}
            for path in paths:
                spec = importlib.util.spec_from_file_location(path.stem, path)
                extra[path.stem] = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(extra[path.stem])
        return {**{name: module for name, module in sys.modules.items() if _ours(name)}, **extra}
    finally:
        for name in [name for name in sys.modules if _ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)
        if saved_attr is None:
            vars(tlgemm).pop("triton", None)
        else:
            tlgemm.triton = saved_attr


@pytest.fixture(scope="session")
def interp():
    """Namespace of interpreter copies: .triton (launchers), .stages, .kernels, .probes."""
    modules = import_interpreted(pathlib.Path(__file__).with_name("triton_probes.py"))
    return types.SimpleNamespace(triton=modules["tlgemm.triton"], stages=modules["tlgemm.triton.stages"],
                                 kernels=modules["tlgemm.triton.kernels"], probes=modules["triton_probes"])
