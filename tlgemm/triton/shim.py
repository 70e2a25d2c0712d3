"""``aggregate``: Triton's ``@aggregate``, made to work for the stages both compiled and
under the interpreter (TRITON_INTERPRET=1).

Facts relied on (Triton 3.6.0, ``triton/language/core.py`` and ``runtime/``):

* ``_aggregate`` copies to the value class only members that are plain functions or
  ``JITCallable``. Under ``TRITON_INTERPRET=1`` ``@triton.jit`` returns an
  ``InterpretedFunction``, which is neither, so every device method is dropped. We
  re-attach each one as a plain function (a descriptor, so ``obj.method(...)`` binds).
* The value class type-checks every field assignment against its annotation. A field
  annotated ``tl.tensor`` can receive a plain Python number: the compiler specialises
  integer arguments equal to 1 to constexprs (``constexpr_function`` unwraps them), and
  the interpreter passes loop indices and float arguments as Python numbers. Compiled,
  such a number is kept as ``tl.constexpr`` (so a unit stride stays visible to the
  compiler; returning the aggregate from a function re-assigns that constexpr); interpreted,
  it becomes a scalar tensor.
* Aggregate ``__init__`` methods must be ``@triton.constexpr_function`` (a plain
  ``__init__`` fails the first compile in a process: "Unsupported function referenced").
* The interpreter keeps scalars as 1-element numpy arrays and gives tensors
  ``__index__ = int(data)`` (used by ``range`` over tensor bounds); NumPy >= 2.4 refuses
  ``int()`` of a 1-element array. ``_patch_interpreter`` makes it ``int(data.item())``.
* The interpreter stores bfloat16 as raw uint16 bits and its ``create_dot`` multiplies
  those bits as integers; ``_patch_interpreter`` widens bfloat16 dot operands to float32.
  Its ``cast_impl`` converts bits properly only between bfloat16 and float32 (an int32
  accumulator cast to bfloat16 became its integer value's bits); ``_patch_interpreter``
  routes every other cast from or to bfloat16 through float32.
"""

from __future__ import annotations

import functools
import numbers

import numpy as np

import triton
import triton.language as tl
from triton.language.core import _aggregate


def interpreting() -> bool:
    """Whether ``@triton.jit`` is producing interpreter functions right now."""
    return bool(triton.knobs.runtime.interpret)


def _bound(fn):
    """A plain function calling the interpreter function ``fn`` (plain functions bind)."""

    @functools.wraps(fn.fn)
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    return method


def _patch_interpreter():
    """Apply the interpreter repairs of the module notes (the last three; once per process)."""
    from triton.runtime import interpreter

    if getattr(interpreter, "_tlgemm_patched", False):
        return
    builder = interpreter.InterpreterBuilder
    patch_lang_tensor, create_dot, cast_impl = interpreter._patch_lang_tensor, builder.create_dot, builder.cast_impl

    def patched_lang_tensor(tensor, scope):
        patch_lang_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    def widened(handle):
        if not handle.dtype.is_bf16():
            return handle
        data = interpreter._convert_float(handle.data, tl.bfloat16, tl.float32, None).view(np.float32)
        return interpreter.TensorHandle(data, tl.float32)

    def patched_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return create_dot(self, widened(a), widened(b), d, input_precision, max_num_imprecise_acc)

    def patched_cast(self, src, dst_type):
        ends = (src.dtype.scalar, dst_type.scalar)
        if tl.bfloat16 in ends and tl.float32 not in ends and ends[0] != ends[1]:
            src = cast_impl(self, src, tl.float32)
        return cast_impl(self, src, dst_type)

    interpreter._patch_lang_tensor = patched_lang_tensor
    builder.create_dot = patched_dot
    builder.cast_impl = patched_cast
    interpreter._tlgemm_patched = True


def aggregate(cls):
    """Decorate ``cls`` like ``triton.language.core._aggregate`` (see the module notes)."""
    value_cls = _aggregate(cls)
    interpreted = interpreting()
    tensor_fields = {name for name, ty in cls.__annotations__.items() if ty is tl.tensor}
    checked_setattr = value_cls.__setattr__

    def __setattr__(self, name, value):
        if name in tensor_fields and isinstance(value, (numbers.Number, tl.constexpr)):
            if interpreted:
                from triton.runtime.interpreter import interpreter_semantic

                value = interpreter_semantic.to_tensor(value)
            else:
                object.__setattr__(self, name, tl.constexpr(value))
                return
        checked_setattr(self, name, value)

    value_cls.__setattr__ = __setattr__
    if interpreted:
        from triton.runtime.interpreter import InterpretedFunction

        _patch_interpreter()

        for name, member in vars(cls).items():
            if isinstance(member, InterpretedFunction):
                setattr(value_cls, name, _bound(member))
    return value_cls
