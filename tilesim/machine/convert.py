"""Cast between element types (``MV/类型转换/Cast.md``): ``cast(dst, src, round_mode, count)``, ``round_mode``
one of :mod:`tilesim.cast`'s CAST_NONE ... CAST_ODD (exported by :mod:`tilesim.machine`).

The pairs a kernel of this package needs so far: half or bfloat16 to float (exact; CAST_NONE), float to half or
bfloat16 with any RoundMode (CAST_NONE is RINT; the NPU has no CAST_NONE for float to bfloat16, and ops-nn uses
CAST_RINT there). Another pair stops the kernel with a KernelError when it runs (not when it compiles, so that a
branch for another dtype may hold it). The count form only; ``dst`` may overlap ``src`` as the kernels'
in-place widening and narrowing do (element k is read before any write reaches it).
"""

from __future__ import annotations

import numpy as np
from numba.extending import overload

from ..cast import KIND_BF16, KIND_FP16
from ..jit import DEVICE_OPTIONS
from ..schedule import PIPE_VECTOR
from ..vector import cast_from_f32, cast_to_f32
from .dtypes import ALL
from .hazard import hz_instruction, op_code
from .pipe import FAULT_CAST, fault
from .tensor import core_of, ctx_words, plan_tensor

_CAST = op_code("Cast")
_KIND = {"half": KIND_FP16, "bfloat16_t": KIND_BF16}


def cast(dst, src, round_mode, count):  # type: ignore[no-untyped-def]
    """Cast(dst, src, roundMode, count): ``count`` elements of ``src`` converted to ``dst``'s type."""
    raise TypeError("Cast is device code: call it from a kernel")


@overload(cast, jit_options=DEVICE_OPTIONS)
def _cast(dst, src, round_mode, count):  # type: ignore[no-untyped-def]
    d, s = dst.dtype.dt.name, src.dtype.dt.name
    dsz, ssz = dst.dtype.dt.size, src.dtype.dt.size
    if d == "float" and s in _KIND:
        kind = _KIND[s]

        def widen(dst, src, round_mode, count):  # type: ignore[no-untyped-def]
            core = core_of(dst)
            hz_instruction(core, PIPE_VECTOR, _CAST, plan_tensor(dst), count * dsz, plan_tensor(src), count * ssz,
                           plan_tensor(src), 0)
            cast_to_f32(core, plan_tensor(dst), plan_tensor(src), count, kind)
        return widen
    if s == "float" and d in _KIND:
        kind = _KIND[d]

        def narrow(dst, src, round_mode, count):  # type: ignore[no-untyped-def]
            core = core_of(dst)
            hz_instruction(core, PIPE_VECTOR, _CAST, plan_tensor(dst), count * dsz, plan_tensor(src), count * ssz,
                           plan_tensor(src), 0)
            cast_from_f32(core, plan_tensor(dst), plan_tensor(src), count, kind, round_mode)
        return narrow
    code = [t.name for t in ALL].index(s) * 100 + [t.name for t in ALL].index(d)
    return lambda dst, src, round_mode, count: fault(ctx_words(dst.ctx), FAULT_CAST, np.int64(-1), code)
