"""One way to launch a kernel: :func:`kernel` on a per-core function, then
``launch(my_kernel, tiling, x, y, z, block_dim=n)``.

A kernel is ``def my_kernel(ctx, t, x, y, z)``: ``ctx`` its core's KernelContext (GetBlockIdx, the TPipe), ``t``
the tiling (the dataclass's numeric fields as a namedtuple; a field that is a dataclass, such as an API's tiling
inside the op's, as a namedtuple of its own, a tuple of dataclasses as a tuple of them), then one typed
GlobalTensor per GM array in the launch's order. The launch does the rest: the cores' UBs, counters and context
blocks, checked mode and its records, recording for the cost model, the host threads, and the report
(:class:`tilesim.RunReport`).

The loop over a launch's cores is generated per kernel, tiling class and element types into a small module in
the user's cache directory (:attr:`tilesim.options.Options.cache_dir`): Numba caches a function's machine code
only if the function lives in a file (a closure over the kernel would compile again in every process). Where that
directory cannot be written, the loop compiles in memory.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import hashlib
import inspect
import operator
import os
import sys
import tempfile
import textwrap
import threading
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from numba import cfunc, types

from tilesim import options
from tilesim.core.memo import by_identity
from tilesim.core.records import CHECKED_BUILD, FAST_BUILD, FAULT_UB_RANGE, HZ_MANUAL_SYNC, checks_field, hazard_col
from tilesim.core.ub import UbPlan
from tilesim.errors import UbOverflowError
from tilesim.jit import njit
from tilesim.jit.cache import CacheWarning
from tilesim.machine import dtypes, waits
from tilesim.machine.atomic import DONE, LOG_ROW_BYTES, finish_phase
from tilesim.machine.convert import api_fault_text
from tilesim.machine.hazard import INSTRUCTIONS, hz_end
from tilesim.machine.pipe import (
    FAULT_API_TABLE,
    FAULT_CAST,
    FAULT_DTYPE,
    FAULT_MIXED_TYPES,
    FAULT_TEXT,
    FAULT_UB_OVERFLOW,
)
from tilesim.machine.sync import FAULT_SYNC_ALL, enter_phase
from tilesim.machine.tensor import (
    CTX_WORDS,
    N_EVENT_POOLS,
    X_ALOG_AT,
    X_ALOG_SIZE,
    X_ALOG_USED,
    X_ARRIVED,
    X_ATOMIC,
    X_ATOMIC_TURN,
    X_BASE,
    X_BLOCK_NUM,
    X_CNT_AT,
    X_CNT_SIZE,
    X_CORO,
    X_COUNTER_MODE,
    X_ERR_AT,
    X_ERR_SIZE,
    X_EVT_POOL,
    X_FAULT,
    X_IDX,
    X_MASK_HI,
    X_MASK_LO,
    X_PLAN,
    X_PLAN_AT,
    X_PLAN_ROWS,
    X_POOL,
    X_STACK,
    X_STACK_ROWS,
    X_STOP_AT,
    X_SYNC_AT,
    X_SYNC_GEN,
    X_UB_SIZE,
    X_WS_AT,
    X_WS_SIZE,
    core_of,
    ctx_words,
    make_kernel_context,
)
from tilesim.machine.vector import mixed_types_text
from tilesim.runtime import interrupt
from tilesim.runtime import launch as _launch
from tilesim.runtime.host_threads import CoresRaised, SyncAllMismatch, interleaved, run_cores, run_synced, thread_count
from tilesim.runtime.report import RunReport
from tilesim.runtime.tiling_types import name_of
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc

_BYTES = np.dtype(np.uint8)
_NO_WORKSPACE = np.zeros(0, np.uint8)  # a dtype object: view(np.uint8) converts the type on every call


class KernelError(RuntimeError):
    """A kernel stopped by a call that would hang the NPU or trip CPU-debug's asserts (a queue misused)."""


@njit(cache=True)
def enter_core(c, block_dim, arena, cnt, err, checks, ctx, ws, sync_at, alog, log_row):
    """Core ``c``'s context block, filled in, and the KernelContext the kernel receives; its atomic-add log is row
    ``log_row`` of ``alog`` (the host thread's: a core replays its log before it ends)."""
    i = np.int64(c)
    w = ctx[i]
    w[X_IDX] = i
    w[X_BLOCK_NUM] = block_dim
    w[X_BASE] = np.int64(arena.ctypes.data) + i * np.int64(arena.strides[0])
    w[X_UB_SIZE] = arena.shape[1]
    w[X_PLAN_AT] = np.int64(ctx.ctypes.data) + i * np.int64(ctx.strides[0]) + X_PLAN * 8
    w[X_PLAN_ROWS] = 0
    w[X_CNT_SIZE] = cnt.shape[1]
    w[X_CNT_AT] = np.int64(cnt.ctypes.data) + i * cnt.shape[1] * 8
    w[X_ERR_SIZE] = err.shape[1]
    w[X_ERR_AT] = np.int64(err.ctypes.data) + i * err.shape[1] * 8
    w[X_POOL] = 0
    w[X_STACK] = 0
    w[X_STACK_ROWS] = 0
    w[X_WS_AT] = ws.ctypes.data
    w[X_WS_SIZE] = ws.size
    w[X_MASK_LO] = -1
    w[X_MASK_HI] = -1
    w[X_COUNTER_MODE] = 0
    w[X_FAULT] = 0
    for e in range(N_EVENT_POOLS):
        w[X_EVT_POOL + e] = 0
    w[X_ATOMIC] = 0
    w[X_SYNC_AT] = sync_at
    w[X_SYNC_GEN] = 0
    w[X_ATOMIC_TURN] = 0
    w[X_ALOG_AT] = alog.ctypes.data + log_row * alog.shape[1]
    w[X_ALOG_SIZE] = alog.shape[1]
    w[X_ALOG_USED] = 0
    if sync_at:
        enter_phase(w)
    return make_kernel_context((np.int64(ctx.ctypes.data) + i * np.int64(ctx.strides[0]), checks_field(checks)), None)


@njit(cache=True, host=True)
def start_contexts(ctx, stop_at):
    """Before any core of a launch starts: each core's words another core reads as it starts (its phases
    finished: a core's first atomic add or phase waits on the others'; a launch given up leaves its cores'
    faults and coroutine records), and the launch's stop word. One compiled call, not a numpy write per column."""
    for c in range(ctx.shape[0]):
        ctx[c, X_ARRIVED] = 0
        ctx[c, X_FAULT] = 0
        ctx[c, X_CORO] = 0
        ctx[c, X_STOP_AT] = stop_at


@njit(cache=True)
def exit_core(kc):
    """After the kernel's call on a core: checked mode's findings of the kernel's end (its SetFlags never
    waited for)."""
    hz_end(core_of(kc))
    finish_phase(ctx_words(kc.ctx), DONE)


@dataclasses.dataclass
class Kernel:
    """A per-core kernel function, compiled as device code, and the names of its buffers (one per ``init_buffer``
    call, in the order they run: :func:`_buffer_names`, for reports)."""

    fn: Any
    py_func: Any
    buffer_names: tuple[str, ...]
    gm_params: list[str]  # the names of its GM parameters (after ctx and the tiling), for reports
    sync_all: bool = False  # it calls sync_all: its cores run as coroutines (tilesim.runtime.coroutines)
    # its module file's hash as the kernel was defined (as Numba stamps its cache then): a core loop compiled from
    # it is cached under this, not under what the file holds when it launches (it may have been edited meanwhile)
    source_hash: str = ""

    @property
    def name(self) -> str:
        """The kernel function's name, as reports give it."""
        return self.py_func.__name__


def _in_order(node: ast.AST) -> Any:
    """The nodes under ``node`` in the order Python evaluates them (near enough): each node after the nodes under
    it (a call after its arguments), siblings in source order."""
    for child in ast.iter_child_nodes(node):
        yield from _in_order(child)
        yield child


def _is_init_buffer(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "init_buffer"


def _targets(tree: ast.AST) -> dict[int, str]:
    """The name each ``init_buffer`` call of ``tree`` is known by: the target its value is assigned to, whole or
    as part of an expression (``b = pipe.init_buffer(TBuf(VECCALC), n).get(float32)`` names the buffer ``b``), the
    matching element of a tuple assignment; a second call into one target is ``target#2``."""
    named: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            pairs = [(node.targets[0], node.value)]
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            pairs = [(node.target, node.value)]
        else:
            continue
        target, value = pairs[0]
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            pairs = list(zip(target.elts, value.elts, strict=True))
        for t, v in pairs:
            name = t.id if isinstance(t, ast.Name) else ast.unparse(t)
            calls = [c for c in _in_order(v) if _is_init_buffer(c)] + ([v] if _is_init_buffer(v) else [])
            for k, call in enumerate(calls):
                named.setdefault(id(call), name if k == 0 else f"{name}#{k + 1}")
    return named


def _buffer_names(fn: Any) -> list[str]:
    """The names of the buffers a kernel's ``init_buffer`` calls place, one per call in the order they run: in its
    body and in the functions of its module it calls (an Init of its own), source order within each. A call is
    named by the target of the assignment it is part of (:func:`_targets`), one that has none by its place
    (``init_buffer@file.py:line``): a call never takes another's name, whatever the calls around it."""
    try:
        module_source = inspect.getsource(inspect.getmodule(fn))  # type: ignore[arg-type]
        module = ast.parse(module_source)
        defs = {d.name: d for d in module.body if isinstance(d, ast.FunctionDef)}
    except (OSError, TypeError, SyntaxError):
        defs = {}
    tree: ast.AST | None = defs.get(fn.__name__)
    if tree is None:  # not at the module's top level: its own source, its lines counted from its first
        try:
            lines, first = inspect.getsourcelines(fn)
            tree = ast.parse(textwrap.dedent("".join(lines)))
            ast.increment_lineno(tree, first - 1)
        except (OSError, TypeError, SyntaxError):
            return []
    where = os.path.basename(inspect.getsourcefile(fn) or "") or "kernel"
    names: list[str] = []

    def visit(body: ast.AST, seen: frozenset[str]) -> None:
        named = _targets(body)
        for node in _in_order(body):
            if _is_init_buffer(node):
                names.append(named.get(id(node), f"init_buffer@{where}:{node.lineno}"))  # type: ignore[attr-defined]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in defs \
                    and node.func.id not in seen:
                visit(defs[node.func.id], seen | {node.func.id})

    visit(tree, frozenset({fn.__name__}))
    return names


def kernel(fn: Any) -> Kernel:
    """Decorator: ``fn(ctx, t, *gm)`` is a kernel, one call per core."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = ""
    file = getattr(sys.modules.get(fn.__module__), "__file__", None) or ""
    try:
        source_hash = hashlib.sha256(Path(file).read_bytes()).hexdigest()[:16]
    except OSError:
        source_hash = ""
    return Kernel(njit(cache=True)(fn), fn, tuple(_buffer_names(fn)), list(inspect.signature(fn).parameters)[2:],
                  "sync_all" in source, source_hash)


def _cache_file(name: str, src: str) -> Path | None:
    """The file ``name`` of the generated core loops' directory (``launchers`` in the options' ``cache_dir``) with
    the text ``src``: written unless it holds it already (a read-only directory that does serves), to a temporary
    file renamed over it (another process may read it meanwhile). None, with a
    :class:`~tilesim.jit.cache.CacheWarning`, when it cannot be written: the caller compiles the loop in memory."""
    path, data = Path(options.current().cache_dir).expanduser() / "launchers" / name, src.encode()
    try:
        if path.read_bytes() == data:
            return path
    except OSError:
        pass  # none yet, or unreadable: written anew
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f"{name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as e:  # one text per directory and cause: shown once, not once per kernel
        warnings.warn(f"tilesim: cannot write the generated core loops to {path.parent} "
                      f"({e.strerror or type(e).__name__}): they compile in memory, in every process (set "
                      f"TILESIM_CACHE, or tilesim.options' cache_dir, to a writable directory)", CacheWarning,
                      stacklevel=3)
        return None
    return path


_CORE_LOOPS: dict[tuple[Any, ...], Any] = {}
_core_loops_lock = threading.Lock()


_NUMBER = (int, float, bool, np.number)


def _nested(v: Any) -> bool:
    """A field the kernel receives as a namedtuple (a dataclass, e.g. an API's tiling inside the op's) or a tuple
    of them (one per case, indexed on the device)."""
    if isinstance(v, tuple):
        return bool(v) and all(dataclasses.is_dataclass(e) and type(e) is type(v[0]) for e in v)
    return dataclasses.is_dataclass(v) and not isinstance(v, type)


def _tiling_fields(cls: type, t: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if isinstance(getattr(t, f.name), _NUMBER)
            or _nested(getattr(t, f.name))]


def _tiling_form(t: Any) -> tuple[str, Any]:
    """How the generated loop rebuilds tiling ``t`` from the plain tuple :func:`_tiling_values` gives: an
    expression over ``v`` (that tuple) and the namedtuple types it names, ``(expression, {name: fields})``.
    A dataclass field becomes a namedtuple of its own numeric fields, a tuple of dataclasses a tuple of them."""
    types_: dict[str, list[str]] = {}

    def build(obj: Any, ref: str) -> str:
        names = _tiling_fields(type(obj), obj)
        types_[name_of(names)] = names
        parts = []
        for i, n in enumerate(names):
            v = getattr(obj, n)
            if isinstance(v, tuple):
                parts.append("(" + "".join(f"{build(e, f'{ref}[{i}][{j}]')}, " for j, e in enumerate(v)) + ")")
            elif dataclasses.is_dataclass(v):
                parts.append(build(v, f"{ref}[{i}]"))
            else:
                parts.append(f"{ref}[{i}]")
        return f"{name_of(names)}({', '.join(parts)})"

    return build(t, "v"), types_


def _tiling_values(t: Any) -> tuple[Any, ...]:
    """Tiling ``t`` as the plain (nested) tuple a launch passes: its numeric fields, a dataclass field as the
    tuple of its own, a tuple of dataclasses as a tuple of those."""
    out = []
    for n in _tiling_fields(type(t), t):
        v = getattr(t, n)
        if isinstance(v, tuple):
            out.append(tuple(_tiling_values(e) for e in v))
        elif dataclasses.is_dataclass(v):
            out.append(_tiling_values(v))
        else:
            out.append(v)
    return tuple(out)


_memo_values = by_identity(_tiling_values)  # once per tiling object: a nested tiling has many fields


# A SyncAll launch's argument record (int64 words, :func:`_entries`): the block dim, the SyncAll words' address,
# the checks flag (the checked build's), then per array its address and shape, then the tiling's numbers (a float
# as its bits)
_A_BLOCK_DIM, _A_SYNC_AT, _A_CHECKS = 0, 1, 2
_RECORD_ARRAYS = (("arena", "np.uint8", 2), ("cnt", "np.int64", 2), ("err", "np.int64", 2), ("ctx", "np.int64", 2),
                  ("ws", "np.uint8", 1), ("alog", "np.uint8", 2), ("order", "np.int64", 1))


def _leaves(values: Any) -> list[Any]:
    return [x for v in values for x in (_leaves(v) if isinstance(v, tuple) else [v])]


def _leaf_types(t: Any) -> tuple[str, ...]:
    return tuple(type(v).__name__ for v in _leaves(_tiling_values(t)))


@functools.cache
def _record_layout(n_gm: int) -> tuple[dict[str, int], int]:
    at, slots = 3, {}
    for name, _, nd in _RECORD_ARRAYS + tuple((f"g{i}", "np.uint8", 1) for i in range(n_gm)):
        slots[name] = at
        at += 1 + nd
    return slots, at


def _entries(t: Any, n_gm: int) -> str:
    """The C entries of a SyncAll kernel's core loop, one per build (tilesim.runtime.coroutines): ``entry_fast(job)``
    and ``entry_checked(job)`` rebuild the loop's arguments from the launch's argument record and run the
    job's core; an exception it raises is kept in the job record (:mod:`tilesim.runtime.excinfo`), for the launching
    thread to raise."""
    slots, at = _record_layout(n_gm)
    leaves = _leaves(_tiling_values(t))
    words = at + len(leaves)
    lines = []
    for name, dt, nd in _RECORD_ARRAYS + tuple((f"g{i}", "np.uint8", 1) for i in range(n_gm)):
        s = slots[name]
        shape = f"(a[{s + 1}], a[{s + 2}])" if nd == 2 else f"a[{s + 1}]"
        lines.append(f"    {name} = carray(address_as_pointer(a[{s}], {dt}), {shape})")
    k = iter(range(at, words))

    def rebuild(values: Any) -> str:
        parts = []
        for v in values:
            if isinstance(v, tuple):
                parts.append(rebuild(v))
            elif isinstance(v, float):
                parts.append(f"f[{next(k)}]")
            elif isinstance(v, (bool, np.bool_)):
                parts.append(f"a[{next(k)}] != 0")
            elif isinstance(v, int):
                parts.append(f"a[{next(k)}]")
            else:
                parts.append(f"np.{type(v).__name__}(f[{next(k)}])" if isinstance(v, np.floating)
                             else f"np.{type(v).__name__}(a[{next(k)}])")
        return "(" + "".join(p + ", " for p in parts) + ")"

    tv = rebuild(_tiling_values(t))
    body = "\n".join(lines)
    gm = "".join(f", g{i}" for i in range(n_gm))
    out = f"""

from numba import carray
from tilesim.runtime.excinfo import call_caught
from tilesim.jit.intrinsics import address_as_pointer, store_fence
from tilesim.machine.tensor import CTX_WORDS, X_ARRIVED, X_CORO
from tilesim.machine.waits import ENDED, FAILED, J_ARGS, J_CORE, J_EXCINFO, J_STATE, J_STATUS, JOB_WORDS, RUNNING
from tilesim.machine.waits import leave

WORDS = {words}
"""
    for build, checks in ((FAST_BUILD, "None"), (CHECKED_BUILD, f"a[{_A_CHECKS}] != 0")):
        out += f"""

def entry_{build}(job):
    j = carray(address_as_pointer(job, np.int64), JOB_WORDS)
    a = carray(address_as_pointer(j[J_ARGS], np.int64), WORDS)
    f = carray(address_as_pointer(j[J_ARGS], np.float64), WORDS)
{body}
    c = j[J_CORE]
    ctx[c, X_CORO] = job
    j[J_STATE] = RUNNING
    tv = {tv}
    status, raised = call_caught(cores, (c, c + 1, a[{_A_BLOCK_DIM}], arena, cnt, err, {checks}, ctx, ws,
                                         a[{_A_SYNC_AT}], alog, order, tv{gm}))
    failed = status != 0
    j[J_STATUS] = status
    j[J_EXCINFO] = raised
    store_fence()
    leave(a[{_A_SYNC_AT}], a[{_A_BLOCK_DIM}], failed, ctx.ctypes.data + (c * CTX_WORDS + X_ARRIVED) * 8)
    j[J_STATE] = FAILED if failed else ENDED
"""
    return out


def _record(t: Any, n_gm: int, block_dim: int, sync_at: int, checks: bool | None,
            arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The argument record :func:`_entries` reads: ``arrays`` by name (the GM arrays as g0, g1, ...)."""
    slots, at = _record_layout(n_gm)
    leaves = _leaves(_memo_values(t))  # once per tiling object
    rec = np.zeros(at + len(leaves), np.int64)
    rec[_A_BLOCK_DIM], rec[_A_SYNC_AT], rec[_A_CHECKS] = block_dim, sync_at, bool(checks)
    for name, s in slots.items():
        a = arrays[name]
        rec[s] = a.ctypes.data
        rec[s + 1:s + 1 + a.ndim] = a.shape
    f = rec.view(np.float64)
    for i, v in enumerate(leaves):
        if isinstance(v, (float, np.floating)):
            f[at + i] = v
        else:
            rec[at + i] = int(v)
    return rec


_ENTRIES: dict[tuple[Any, str], Any] = {}  # the C entries (numba CFunc), kept: they own their machine code


def _entry(cores: Any, build: str) -> int:
    """The address of the C entry of ``cores``' module for ``build`` (compiled on first use)."""
    key = (cores, build)
    entry = _ENTRIES.get(key)
    if entry is None:
        mod = sys.modules[cores.py_func.__module__]
        entry = _ENTRIES[key] = cfunc(types.void(types.int64), cache=mod.CACHED)(getattr(mod, f"entry_{build}"))
    return entry.address


def _core_loop(k: Kernel, t: Any, elems: tuple[dtypes.DType, ...]) -> Any:
    """The generated ``cores(first, last, ...)`` of kernel ``k`` for tilings of ``type(t)`` and GM arrays of the
    element types ``elems``: constants of the loop (an element type passed from Python would cost the call a
    typing of each in Python, microseconds a launch)."""
    key = (k.py_func, type(t), elems)
    loop = _CORE_LOOPS.get(key)
    if loop is not None:
        return loop
    with _core_loops_lock:  # one module and file per loop, however many threads launch its kernel first at once
        loop = _CORE_LOOPS.get(key)
        return loop if loop is not None else _new_core_loop(k, t, elems, key)


def _new_core_loop(k: Kernel, t: Any, elems: tuple[dtypes.DType, ...], key: tuple[Any, ...]) -> Any:
    """:func:`_core_loop`'s loop, generated, run and kept under ``key``."""
    n_gm = len(elems)
    mod = sys.modules[k.py_func.__module__]
    src_file = getattr(mod, "__file__", None) or ""
    names = _tiling_fields(type(t), t)
    expr, tiling_types = _tiling_form(t)
    nested = len(tiling_types) > 1 or any(_nested(getattr(t, n)) for n in names)
    digest = hashlib.sha256(repr((k.py_func.__module__, k.py_func.__qualname__, src_file, type(t).__qualname__,
                                  names, expr, elems, _leaf_types(t))).encode()).hexdigest()[:16]
    gm = ", ".join(f"g{i}" for i in range(n_gm))
    tensors = ", ".join(f"make_global((kc.ctx, kc.checks, np.int64({i}), np.int64(g{i}.ctypes.data), "
                        f"np.int64(g{i}.size), np.int64(0)), D{i})" for i in range(n_gm))
    consts = "".join(f"D{i} = by_name({e.name!r})\n" for i, e in enumerate(elems))
    src = f'''# generated by tilesim.runtime.launcher: the core loop of {k.py_func.__module__}.{k.py_func.__qualname__}
# kernel source {k.source_hash}; CACHED (set by the launcher): this file is in the cache, not only in memory
import importlib

import numpy as np
from tilesim.runtime.interrupt import keep_handler
from tilesim.jit import njit
from tilesim.runtime.launcher import enter_core, exit_core
from tilesim.machine.dtypes import by_name
from tilesim.machine.tensor import make_global
from tilesim.runtime.tiling_types import {", ".join(sorted(tiling_types)) if nested else name_of(names) + " as Tiling"}

kernel = importlib.import_module({k.py_func.__module__!r}).{k.py_func.__qualname__}.fn
{consts}

@njit(cache=CACHED, nogil=True{"" if k.sync_all else ", host=True"})
def cores(first, last, block_dim, arena, cnt, err, checks, ctx, ws, sync_at, alog, order, t{", " + gm if gm else ""}):
    {"v = t" + chr(10) + "    t = " + expr if nested else "t = Tiling(*t)"}
    if first == 0:  # the calling thread (core 0's coroutine in a SyncAll launch): Ctrl-C's handler in place
        keep_handler(ctx)
    for i in range(first, last):
        kc = enter_core(order[i], block_dim, arena, cnt, err, checks, ctx, ws, sync_at, alog, first)
        kernel(kc, t{", " + tensors if tensors else ""})
        exit_core(kc)
'''
    if k.sync_all:  # the loop is then device code, called by the entries: they optimise the kernel's tree once
        src += _entries(t, n_gm)
    # Run from src, not read back: Numba needs the file only to cache the loop's code beside it (a damaged or
    # vanished file, or a stale .pyc, cannot change what runs)
    path = _cache_file(f"launch_{digest}.py", src)
    module = ModuleType(f"tilesim_launch_{digest}")
    module.CACHED = path is not None  # type: ignore[attr-defined]
    if path is not None:
        module.__file__ = str(path)
    sys.modules[module.__name__] = module  # where Numba finds the loop's globals when it loads the loop's code
    exec(compile(src, str(path) if path else f"<tilesim core loop {digest}>", "exec"), module.__dict__)
    loop = _CORE_LOOPS[key] = (module.cores, _memo_values if nested else operator.attrgetter(*names)
                               if len(names) > 1 else (lambda t: (getattr(t, names[0]),)) if names else (lambda t: ()))
    return loop


def _plan_of(ctx_row: np.ndarray, names: tuple[str, ...], soc: SocSpec) -> UbPlan:
    """The UB plan a core's InitBuffer and PopStackBuffer calls placed (its context block's rows), with the
    buffers' names (PopStackBuffer's: ``stack``)."""
    return _plan(ctx_row[X_PLAN:X_PLAN + 3 * int(ctx_row[X_PLAN_ROWS])].tobytes(), names, soc.ub_size,
                 int(ctx_row[X_STACK_ROWS]))


@functools.lru_cache(maxsize=256)
def _plan(rows: bytes, names: tuple[str, ...], capacity: int, stack_rows: int = 0) -> UbPlan:
    plan = UbPlan(capacity)
    k = 0  # the init_buffer targets name the rows that are not PopStackBuffer's
    for b, (off, size, num) in enumerate(np.frombuffer(rows, np.int64).reshape(-1, 3).tolist()):
        if stack_rows >> b & 1:
            plan.add("stack", size, num)
            plan.buffers[-1] = dataclasses.replace(plan.buffers[-1], stack=True)
        else:
            plan.add(names[k] if k < len(names) else f"buf{b}", size, num)
            k += 1
        plan.buffers[-1].offset = off
    return plan.freeze()


_threads = threading.local()


def _contexts(block_dim: int) -> np.ndarray:
    """This host thread's context blocks for ``block_dim`` cores, kept across launches (each core fills its own
    as it starts; a fault word is cleared when it is read)."""
    pool = getattr(_threads, "contexts", None)
    if pool is None:
        pool = _threads.contexts = {}
    ctx = pool.get(block_dim)
    if ctx is None:
        ctx = pool[block_dim] = np.zeros((block_dim, CTX_WORDS), np.int64)
    return ctx


def _atomic_logs(block_dim: int) -> np.ndarray:
    """This host thread's atomic-add logs for ``block_dim`` cores (:mod:`tilesim.machine.atomic`): a row per
    host thread that runs cores, the row at its first core (row c for a coroutine's core c), kept across
    launches. Allocated, not touched: only the pages a log writes take memory."""
    pool = getattr(_threads, "logs", None)
    if pool is None:
        pool = _threads.logs = {}
    logs = pool.get((block_dim, LOG_ROW_BYTES))
    if logs is None:
        logs = pool[(block_dim, LOG_ROW_BYTES)] = np.empty((block_dim, LOG_ROW_BYTES), np.uint8)
    return logs


_IDENTITY: dict[int, np.ndarray] = {}


def _identity(block_dim: int) -> np.ndarray:
    """Core i at position i: a SyncAll kernel's, whose cores each run on a thread of their own."""
    order = _IDENTITY.get(block_dim)
    if order is None:
        order = _IDENTITY[block_dim] = np.arange(block_dim, dtype=np.int64)
    return order


def _ub_range_text(op: int, addr: int, nbytes: int, buf_offset: int, ub_size: int) -> str:
    """FAULT_UB_RANGE's detail: instruction ``op`` (its code) accessing ``nbytes`` from UB byte ``addr``, in a
    buffer at ``buf_offset``."""
    name = INSTRUCTIONS[op] if 0 <= op < len(INSTRUCTIONS) else f"instruction {op}"
    where = f"offset {addr - buf_offset} of the buffer"
    if nbytes < 0:
        return (f"{name} on an operand from UB byte {addr} ({where}) that runs backwards: a negative stride, "
                f"length or padding, which Ascend C's unsigned fields cannot give (the core's UB holds {ub_size} B)")
    return (f"{name} accesses UB bytes [{addr}, {addr + nbytes}) ({nbytes} B from {where}), outside the core's UB "
            f"of {ub_size} B: on the NPU the access traps (a LocalTensor's offset, index or length past its buffer; "
            f"checked mode reports the buffer's own bounds)")


def _raise_fault(ctx: np.ndarray, k: Kernel, soc: SocSpec, raised: dict[int, tuple[BaseException, str]]) -> None:
    """Raise what stopped the first core that stopped of its own (before those that gave up a SyncAll because it
    stopped), if any: what its fault word says, else the exception it raised (``raised``: a SyncAll launch's, by core,
    with where; :class:`tilesim.runtime.host_threads.CoresRaised`), with a note that names the kernel and the core."""
    kinds = ctx[:, X_FAULT].copy()
    ctx[:, X_FAULT] = 0
    first = np.where((kinds == FAULT_SYNC_ALL) & (ctx[:, X_FAULT + 2] >= 0), 0, kinds)
    for c in raised:
        if not kinds[c]:
            first[c] = -1
    for c in np.flatnonzero(first if first.any() else kinds).tolist():
        kind = int(kinds[c])
        if not kind:
            exc, where = raised[c]
            # PEP 678's notes, shown under the message from Python 3.11 (add_note is 3.11's)
            exc.__notes__ = [*getattr(exc, "__notes__", []),
                             f"{k.name}, core {c} raised this" + (f" at {where}" if where else "")]
            raise exc from None
        buf, detail = int(ctx[c, X_FAULT + 1]), int(ctx[c, X_FAULT + 2])
        plan = _plan_of(ctx[c], k.buffer_names, soc)
        name = plan.buffers[buf].name if 0 <= buf < len(plan.buffers) else "an instruction"
        if kind == FAULT_DTYPE:
            op, dt = divmod(detail, 100)
            detail = f"{INSTRUCTIONS[op]} on {dtypes.ALL[dt].name}"
        if kind == FAULT_CAST:
            a, b = divmod(detail, 100)
            detail = f"{dtypes.ALL[a].name} to {dtypes.ALL[b].name}"
        if kind == FAULT_API_TABLE:
            detail = api_fault_text(detail)
        if kind == FAULT_MIXED_TYPES:
            detail = mixed_types_text(detail)
        if kind == FAULT_UB_RANGE:
            detail = _ub_range_text(detail, int(ctx[c, X_FAULT + 3]), int(ctx[c, X_FAULT + 4]),
                                    plan.buffers[buf].offset if 0 <= buf < len(plan.buffers) else 0, soc.ub_size)
        text = FAULT_TEXT[kind].format(detail=detail)
        if kind == FAULT_UB_OVERFLOW:
            raise UbOverflowError(f"{k.name}, core {c}: {text} ({soc.ub_size} B): {plan.table()}")
        raise KernelError(f"{k.name}, core {c}, {name}: {text}")


def _check_args(k: Kernel, block_dim: Any, outputs: Any, gm: tuple[Any, ...], names: list[str]) -> None:
    """What :func:`launch` refuses before it builds anything: a ValueError that names the argument and the rule."""
    if isinstance(block_dim, bool) or not isinstance(block_dim, (int, np.integer)) or block_dim < 1:
        raise ValueError(f"launch of {k.name}: block_dim must be a positive integer (the cores to run), "
                         f"got {block_dim!r}")
    if isinstance(outputs, bool) or not isinstance(outputs, (int, np.integer)) or not 0 <= outputs <= len(gm):
        raise ValueError(f"launch of {k.name}: outputs must be an integer from 0 to the {len(gm)} GM arrays, "
                         f"got {outputs!r}")
    first_out = len(gm) - outputs
    for i, a in enumerate(gm):
        flags = a.flags if isinstance(a, np.ndarray) else None  # (a.flags makes a new object each time)
        if flags is not None and flags.c_contiguous and (i < first_out or flags.writeable):
            continue
        name = names[i] if i < len(names) else f"GM array {i}"
        if flags is None:
            raise ValueError(f"launch of {k.name}: {name} must be a numpy array, got {type(a).__name__}")
        if not flags.c_contiguous:
            raise ValueError(f"launch of {k.name}: {name} must be C-contiguous")
        raise ValueError(f"launch of {k.name}: {name} is an output and must be writeable (it is read-only)")


def launch(k: Kernel, tiling: Any, *gm: np.ndarray, block_dim: int, outputs: int = 1,
           soc: str | SocSpec = DEFAULT_SOC, checks: bool | None = None, workspace: np.ndarray | None = None,
           op: str | None = None, gm_names: list[str] | None = None, auto_sync: bool | None = None) -> RunReport:
    """Run kernel ``k`` on ``block_dim`` cores with tiling ``tiling`` (a dataclass) over the GM arrays ``gm``
    (C-contiguous numpy arrays; the last ``outputs`` of them are written), and return the launch's report.

    ``checks`` runs checked mode: True or False, or None for the options in force to decide
    (:meth:`tilesim.options.Options.resolve_checks`, here and nowhere else: under ``pytest --tilesim-checks`` every
    launch is checked; a value other than those three is 161002). A checked launch, or one whose outputs overlap its
    inputs, computes into temporaries (:func:`tilesim.runtime.launch.write_targets`: their contents are not the
    outputs') and writes the outputs only when it finished clean: a :class:`tilesim.CheckError` leaves the caller's
    arrays as they were. A fast kernel that stops (:class:`KernelError`, :class:`tilesim.UbOverflowError`) may have
    written some. ``gm_names`` name the arrays in reports (the kernel's parameter names by default). ``auto_sync`` is
    BiSheng's ``--cce-auto-sync`` (None: the options' :attr:`~tilesim.options.Options.auto_sync`): off, checked
    mode's pipe-hazard check also asks the kernel for the V-V barriers and the syncs with PIPE_S
    (:mod:`tilesim.machine.sync`)."""
    opts = options.current()
    checked = opts.resolve_checks(checks)
    manual_sync = not opts.resolve_auto_sync(auto_sync)
    spec = get_soc(soc)
    names = gm_names or k.gm_params[:len(gm)]
    _check_args(k, block_dim, outputs, gm, names)
    cores, fields = _core_loop(k, tiling, tuple(dtypes.dtype_of(a.dtype) for a in gm))
    ins, outs = gm[:len(gm) - outputs], gm[len(gm) - outputs:]
    arrays = [*ins, *_launch.write_targets(outs, checked, ins)]
    flat = [a.reshape(-1).view(_BYTES) for a in arrays]
    ws = (workspace if workspace is not None else _NO_WORKSPACE).reshape(-1).view(_BYTES)
    gm_bytes = (sum([a.nbytes for a in ins]), sum([a.nbytes for a in outs]))  # the cost model's L2: once a call
    t = fields(tiling)

    def run() -> RunReport:
        ln = _launch.prepare(op or k.name, spec, tiling, _plan(b"", (), spec.ub_size), block_dim, checked, names,
                             phase_local_ub=not k.sync_all,  # a fast launch: a UB per host thread
                             gm_bytes=gm_bytes)
        if checked:
            ln.err[:, hazard_col(spec.ub_size) + HZ_MANUAL_SYNC] = manual_sync
        ctx = _contexts(block_dim)
        alog = _atomic_logs(block_dim)
        start_contexts(ctx, ln.stop_at)
        threads = thread_count(block_dim, gm_bytes[0] + gm_bytes[1])
        try:
            if k.sync_all:
                bar = np.zeros(waits.BAR_WORDS, np.int64)
                rec = _record(tiling, len(flat), block_dim, bar.ctypes.data, ln.core_checks,
                              {"arena": ln.arena, "cnt": ln.counters, "err": ln.err, "ctx": ctx, "ws": ws,
                               "alog": alog, "order": _identity(block_dim), **{f"g{i}": g for i, g in enumerate(flat)}})
                run_synced(_entry(cores, ln.build), block_dim, threads, bar, ctx, rec, ln.end_phase, ln.stop_at)
            else:
                args = (block_dim, ln.arena, ln.counters, ln.err, ln.core_checks, ctx, ws, 0, alog,
                        interleaved(block_dim, threads), t, *flat)
                # a UB per host thread in the fast build; the checked build, recording or checking, keeps a UB
                # per core, so that both give its core loop the same array types and one compile serves them
                run_cores(cores, block_dim, args, threads,
                          (lambda i, n: (block_dim, ln.thread_ub(i, n), *args[2:]))
                          if ln.phase_local_ub and ln.build == FAST_BUILD else None, ln.stop_at)
                ln.end_phase()
        except BaseException as e:
            if interrupt.requested(ln.stop_at):  # Ctrl-C: the cores stopped; the caller gets the KeyboardInterrupt
                ctx[:, X_FAULT] = 0
                if isinstance(e, KeyboardInterrupt):
                    raise
                raise KeyboardInterrupt from None
            if isinstance(e, SyncAllMismatch):
                raise KernelError(f"{k.name}: {e}") from None
            if isinstance(e, Exception):  # a fault the kernel recorded, a SyncAll core's exception, else e as it is
                _raise_fault(ctx, k, spec, e.raised if isinstance(e, CoresRaised) else {})
            raise
        ln.plan = _plan_of(ctx[0], k.buffer_names, spec)  # the plan the kernel placed
        ln.plan_array = ln.plan.as_array()
        return _launch.finish(ln, int(ws.nbytes))

    report = _launch.run_checked(run)
    _launch.copy_back(outs, arrays[len(ins):])
    return report
