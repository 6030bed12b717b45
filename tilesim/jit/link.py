"""Device code gets machine code only in the host function that links it; each process names its functions apart.

Numba finalises every compiled function on its own: it links in the code of the functions it calls, optimises the
result and generates machine code for it. A kernel's call tree is deep (the kernel, its stages, the instructions,
their walks), and only the host function's copy (the launch's core loop, which links everything) ever runs:
device code has no wrapper Python could call, so nothing takes its address.

Here a function compiled without either wrapper (device code: tilesim's :func:`tilesim.jit.njit` without
``host``, an ``@overload`` with :data:`tilesim.jit.DEVICE_OPTIONS`, Numba's own internal helpers) is finalised
*link-only*: Numba's -O3 runs over the function's own code, then its callees' code is linked in as it is, and it
is not added to the execution engine, so it gets no machine code. Numba's cache stores it as the bitcode a caller
links, where it would store an object file. A host function links its callees the same way and optimises the
whole tree once. Numba optimises each level after linking, so every function above a leaf would optimise the
whole tree below it again, which would be most of LLVM's time. Each function's own code is still optimised on
its own on purpose, before it is inlined: a loop is vectorised where it is written, as in Numba's own
finalising. One -O3 over the whole tree in the host function alone would compile as fast but inline and
vectorise otherwise, which slows some kernels.

A function's code finds its Numba environment (what boxing a value for Python reads: a raise with values computed
at run time boxes them) through a global that Numba points at it when the function gets machine code, and, for a
function loaded from the cache, at those of the code it links. Device code never gets machine code, and a cfunc (a
SyncAll launch's entries) gets none set when it is compiled: so a library that gets machine code sets the
environments of everything linked into it. The environments a global points at are kept for the life of the
process, as the machine code is (Numba never takes code out of its engine; a cfunc drops the compile result that
held them, and the launcher keeps only its entries' addresses).

Numba names a compiled function by its qualified name, a counter of the process and its argument types, and a
linker keeps one definition per name. Code from the cache was named in another process, so a cached callee and a
fresh one of the same name (``<lambda>`` number 5 of two processes, on the same types) would share one body, the
wrong one for a caller. Each process's counter therefore starts at a random point of a 2^62 range.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import llvmlite.binding as llvm
from numba import _dynfunc  # type: ignore[attr-defined]
from numba.core import bytecode, codegen, typed_passes
from numba.core.compiler import CompileResult
from numba.core.cpu import CPUContext
from numba.core.environment import lookup_environment

_LINKABLE = "tilesim-linkable"  # the serialisation kind of a link-only library

_numba_run_pass = typed_passes.BaseNativeLowering.run_pass
_numba_finalize = codegen.CPUCodeLibrary.finalize
_numba_serialize = codegen.CPUCodeLibrary.serialize_using_object_code
_numba_unserialize = codegen.CPUCodeLibrary._unserialize.__func__
_numba_get_executable = CPUContext.get_executable
_numba_referenced_environments = CompileResult._find_referenced_environments
_numba_rebuild = CompileResult._rebuild.__func__
_ENV_PREFIX = "_ZN08NumbaEnv"  # the mangled names of Numba's environment globals
_ENVIRONMENTS: dict[str, Any] = {}  # every environment machine code points at, by name: kept as the code is


def _is_link_only(library: Any) -> bool:
    return getattr(library, "_tilesim_link_only", False)


def _run_pass(self, state):  # type: ignore[no-untyped-def]
    """Numba's lowering, with the library of a function that has neither wrapper marked link-only."""
    flags = state.flags
    if flags.no_cpython_wrapper and flags.no_cfunc_wrapper:
        if state.library is None:
            state.library = state.targetctx.codegen().create_library(state.func_id.func_qualname)
            state.library.enable_object_caching()
        state.library._tilesim_link_only = True
    return _numba_run_pass(self, state)


def _finalize(self):  # type: ignore[no-untyped-def]
    """Numba's finalize, then the environments of the functions linked in set; for a link-only library Numba's
    optimisation of its own code, then its callees linked in, and no machine code (it is not added to the execution
    engine)."""
    if not _is_link_only(self):
        done = _numba_finalize(self)
        if not isinstance(self, codegen.JITCodeLibrary):  # ahead-of-time code: no engine
            return done
        envs = [lookup_environment(gv.name) for gv in self._final_module.global_variables
                if gv.name.startswith(_ENV_PREFIX)]
        for env in envs:
            if env is not None:
                self.codegen.set_env(env.env_name, env)
                _ENVIRONMENTS[env.env_name] = env
        return done
    codegen.require_global_compiler_lock()
    self._raise_if_finalized()
    self._optimize_final_module()  # before the callees are linked in: they were optimised where they were built
    seen = set()
    for library in self._linking_libraries:
        if library not in seen:
            self._reload_init.update(library._reload_init)
            seen.add(library)
            self._final_module.link_in(library._get_module_for_linking(), preserve=True)
    self._final_module.verify()
    self._finalize_dynamic_globals()
    self._verify_declare_only_symbols()
    self._finalized = True
    return None


def _serialize(self):  # type: ignore[no-untyped-def]
    """What Numba's cache stores: a link-only library's bitcode for linking (it has no object code)."""
    if not _is_link_only(self):
        return _numba_serialize(self)
    self._ensure_finalized()
    return (self.name, _LINKABLE, self._get_module_for_linking().as_bitcode())


def _unserialize(cls, codegen_, state):  # type: ignore[no-untyped-def]
    name, kind, data = state
    if kind != _LINKABLE:
        return _numba_unserialize(cls, codegen_, state)
    self = codegen_.create_library(name)
    self._tilesim_link_only = True
    self._final_module = llvm.parse_bitcode(data)
    self._shared_module = self._final_module  # already linkonce_odr: what _get_module_for_linking would make
    self._finalized = True
    return self


def _get_executable(self, library, fndesc, env):  # type: ignore[no-untyped-def]
    """Numba's function object of a compiled function; a link-only one has no machine code, so no address (as a
    device function has none today: it has no CPython wrapper) and no environment to set in the engine."""
    if not _is_link_only(library):
        return _numba_get_executable(self, library, fndesc, env)
    return _dynfunc.make_function(fndesc.lookup_module(), fndesc.qualname.split(".")[-1],
                                  f"device code {fndesc.qualname!r}", 0, env, (library,))


def _referenced_environments(self):  # type: ignore[no-untyped-def]
    """The environments a cached function sets when it is loaded: none for a link-only one, which is not in the
    engine (only the host function that links it is, and it sets those of its linked code)."""
    if _is_link_only(self.library):
        return []
    return _numba_referenced_environments(self)


def _rebuild(cls, target_context, *payload):  # type: ignore[no-untyped-def]
    """Numba's function loaded from its cache, which sets the environments of the code it links: kept."""
    cres = _numba_rebuild(cls, target_context, *payload)
    for env in cres.referenced_envs:
        _ENVIRONMENTS[env.env_name] = env
    return cres


def install() -> None:
    """Finalise device code link-only from now on (idempotent)."""
    typed_passes.BaseNativeLowering.run_pass = _run_pass
    codegen.CPUCodeLibrary.finalize = _finalize
    codegen.CPUCodeLibrary.serialize_using_object_code = _serialize
    codegen.CPUCodeLibrary._unserialize = classmethod(_unserialize)
    CPUContext.get_executable = _get_executable
    CompileResult._find_referenced_environments = _referenced_environments
    CompileResult._rebuild = classmethod(_rebuild)
    if not getattr(bytecode.FunctionIdentity, "_tilesim_random_ids", False):
        bytecode.FunctionIdentity._unique_ids = itertools.count(random.SystemRandom().getrandbits(62))
        bytecode.FunctionIdentity._tilesim_random_ids = True


install()
