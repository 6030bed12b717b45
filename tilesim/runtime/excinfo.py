"""The exception a core of a SyncAll launch raised: carried out of compiled code, and raised again in Python.

A SyncAll kernel's cores run from C entries (the coroutines of :mod:`tilesim.runtime.coroutines`) that Python never
calls, so nothing turns what a core raises into a Python exception there, and Numba's own ways lose it: a ``try`` /
``except`` in compiled code keeps neither type nor message, and a cfunc wrapper takes the GIL on the core's stack
to print it. So the entry calls the core loop through :func:`call_caught`, which keeps the status and the
exception's description that Numba's calling convention hands back, and the launching thread, once every core has
ended, rebuilds the exception from them (:func:`rebuilt`) as Numba's CPython wrapper does for a call from Python.
Nothing of Python runs on a core's thread.

What it takes of Numba's internals (``numba.core``), all here; ``tests/test_excinfo.py`` raises through it, from
code compiled in the process and from Numba's cache, so a Numba that changes one of them fails that test (and
:func:`rebuilt` refuses an ``excinfo_t`` layout other than this one with a RuntimeError that says so, unread):

- ``callconv.CPUCallConv.call_function`` (through ``BaseContext.call_internal_no_propagate``, the callee's library
  linked as Numba links a call of a jitted function): a compiled function returns a status, 0 or -2
  (``RETCODE_OK``, ``RETCODE_NONE``) when it returned, ``FIRST_USEREXC`` or more when it raised, and then the
  address of an ``excinfo_t`` in the slot the caller passes;
- ``callconv.excinfo_t``, ``{i8* pickled, i32 size, i8* hash | values, i8* unwrap, i32 values}``. A raise whose
  arguments are all constants points at a constant of the code: its pickled ``(class, args, location)`` tuple,
  which ``_helperlib.c``'s ``numba_unpickle`` reads with ``serialize._numba_unpickle`` and its ``numba_do_raise``
  raises as ``class(*args)``. A raise with values computed at run time points at a struct allocated with
  ``NRT_Allocate``: its unwrap function (it needs the GIL, and the raising function's environment, which
  :mod:`tilesim.jit.link` sets) boxes those values into a tuple and frees them,
  ``serialize.runtime_build_excinfo_struct`` merges them into the pickled tuple, and the struct is then ours to
  free (``NRT_Free``, from Numba's ``_nrt_python.c_helpers``).
"""

from __future__ import annotations

import ctypes
from typing import Any

from llvmlite import ir
from numba import types
from numba.core import callconv, serialize
from numba.core.runtime import _nrt_python
from numba.extending import intrinsic


@intrinsic
def call_caught(typingctx, fn, args):
    """``fn(*args)`` (``fn`` a jitted function, ``args`` a tuple), which does not raise: ``(status, excinfo)``,
    status 0 when the call returned, else Numba's status code, and ``excinfo`` the address of the description of
    the exception it raised (0: none), which :func:`rebuilt` turns into the exception, once."""
    if not isinstance(fn, types.Dispatcher) or not isinstance(args, types.BaseTuple):
        return None
    called = fn.get_call_type(typingctx, tuple(args), {})  # compiles fn for these types
    if called is None:
        return None

    def codegen(context, builder, signature, llargs):
        cres = fn.dispatcher.get_compile_result(called)
        context.add_linking_libs([cres.library])  # as Numba's own call of a jitted function links it
        values = [context.cast(builder, builder.extract_value(llargs[1], i), args[i], t)
                  for i, t in enumerate(cres.signature.args)]
        status, _ = context.call_internal_no_propagate(builder, cres.fndesc, cres.signature, values)
        i64 = ir.IntType(64)
        code = builder.select(status.is_error, builder.sext(status.code, i64), i64(0))
        at = builder.select(status.is_user_exc, builder.ptrtoint(status.excinfoptr, i64), i64(0))
        return context.make_tuple(builder, signature.return_type, [code, at])

    return types.UniTuple(types.int64, 2)(fn, args), codegen


class _ExcInfo(ctypes.Structure):
    _fields_ = [("pickled", ctypes.c_void_p), ("size", ctypes.c_int32), ("values", ctypes.c_void_p),
                ("unwrap", ctypes.c_void_p), ("n_values", ctypes.c_int32)]


_KNOWN_LAYOUT = ((callconv.PICKLE_BUF_IDX, callconv.PICKLE_BUFSZ_IDX, callconv.HASH_BUF_IDX, callconv.UNWRAP_FUNC_IDX,
                  callconv.ALLOC_FLAG_IDX, str(callconv.excinfo_t), callconv.FIRST_USEREXC)
                 == (0, 1, 2, 3, 4, "{i8*, i32, i8*, i8*, i32}", 1))
_UNWRAP = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p)
_NRT_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_nrt_python.c_helpers["Free"])
_SHA1_BYTES = 20  # the hash of the pickled tuple that numba_unpickle's memo takes


def rebuilt(status: int, excinfo: int) -> tuple[BaseException, str]:
    """The exception a :func:`call_caught` call reported (its status and excinfo address; not 0 and 0) and where
    the code raised it (``"<file>, line <n>"``, "" when Numba did not say). The description of a raise with values
    computed at run time is freed: call this once for each. It does not raise: an exception it cannot rebuild
    comes back as a RuntimeError that says why."""
    if status < callconv.FIRST_USEREXC or not excinfo:
        return RuntimeError(f"compiled code stopped with Numba's status {status}, which describes no exception"), ""
    if not _KNOWN_LAYOUT:
        return RuntimeError("tilesim.runtime.excinfo does not know this Numba's exception layout (numba.core.callconv."
                            "excinfo_t): the exception a core raised cannot be read"), ""
    try:
        info = _ExcInfo.from_address(excinfo)
        pickled = ctypes.string_at(info.pickled, info.size)
        if info.n_values > 0:
            try:
                values = _UNWRAP(info.unwrap)(info.values)
            finally:
                _NRT_FREE(excinfo)
            cls, args, loc = serialize.runtime_build_excinfo_struct(pickled, values)
        else:
            cls, args, loc = serialize._numba_unpickle(info.pickled, pickled, ctypes.string_at(info.values,
                                                                                                _SHA1_BYTES))
        return _instance(cls, args), (f"{loc[1]}, line {loc[2]}" if loc else "")
    except Exception as e:  # what it cannot read is reported, not raised over the launch's end
        return RuntimeError(f"compiled code raised an exception tilesim could not rebuild: {e!r}"), ""


def _instance(cls: Any, args: tuple[Any, ...]) -> BaseException:
    """``raise cls(*args)``, as ``numba_do_raise`` raises it: a new instance each time (a note added to it stays
    its own)."""
    if isinstance(cls, BaseException):
        cls, args = type(cls), cls.args
    if isinstance(cls, type) and issubclass(cls, BaseException):
        return cls(*args)
    return TypeError(f"compiled code raised {cls!r}: exceptions must derive from BaseException")
