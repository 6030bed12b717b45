"""Ctrl-C during a launch: the cores stop within an instruction, and the KeyboardInterrupt reaches the caller only
after every host thread of the launch has stopped.

Python runs its SIGINT handler (the KeyboardInterrupt) in the main thread between two bytecodes, which a thread
inside compiled code never reaches before the launch ends. So a launch carries a *stop word* in its cores'
context blocks, which every instruction reads (:func:`tilesim.core.records.stop_if_asked`): a core that finds it set
raises, and the launch turns that into the KeyboardInterrupt. A launch from the main thread gets the process's
interrupt word, which a small native SIGINT handler increments at the moment of the signal before it calls the
handler it found in place (Python's, so that Python's handling is as it was). It does so only while Python's
SIGINT handler is its default, the one that raises KeyboardInterrupt: a program whose own handler gives Ctrl-C
another meaning (a flag for a clean stop) sees its launches run on, as before. A launch from another thread, which
Python never interrupts, gets a word nothing sets.

A ``signal.signal`` call puts Python's own handler back in front, and a library may set a handler and restore the
old one (``asyncio.run`` does): so each launch from the main thread, as its cores start, looks with one system
call whether the native handler is still in place and puts it back in front of whatever is there
(:func:`keep_handler`). Where there is nothing to chain to (SIGINT ignored or left to the system, a three-argument
handler) or no Linux ``sigaction`` layout, it stays out, and the launching thread sets the stop word itself when
the KeyboardInterrupt reaches it (the cores on other host threads then stop; the calling thread's own share of a
launch runs to its end first).
"""

from __future__ import annotations

import _signal
import platform
import signal
import sys
import threading

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from tilesim.jit import njit
from tilesim.machine.tensor import X_STOP_AT

# The interrupt word of the main thread's launches: the interrupt count (the native handler increments it while
# the launch is armed), the handler the native one chains to, the native handler's address (0 until it is made),
# and whether the launch under way is armed: SIGINT's Python handler raises the KeyboardInterrupt (Python's
# default), so that a program whose own handler means Ctrl-C otherwise (a flag for a clean stop) keeps its meaning
S_COUNT, S_CHAINED, S_HANDLER, S_ARMED = 0, 1, 2, 3
_STATE = np.zeros(4, np.int64)
_QUIET = np.zeros(4, np.int64)  # the stop word of a launch Python does not interrupt: no handler, never set
_STATE_AT, _QUIET_AT = int(_STATE.ctypes.data), int(_QUIET.ctypes.data)  # (.ctypes costs a microsecond a call)
_WORD = memoryview(_STATE)  # its words, read and written from Python without numpy's scalar boxing
_SIGACTION_WORDS = 19  # glibc's struct sigaction on x86_64 and aarch64: handler, a 128 B mask, flags, restorer
_SA_FLAGS_AT = 136  # the flags' byte offset in it
_SA_SIGINFO = 4  # Linux's flag of a three-argument handler, which the native one could not call
_LINUX_SIGACTION = sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64", "aarch64",
                                                                                       "arm64")
_MAIN = threading.main_thread().ident
_lock = threading.Lock()
_engine = None  # the machine code of the native handler, kept alive


def _make_handler() -> int:
    """The native SIGINT handler: increment the interrupt count (armed), then call the handler it chains to."""
    global _engine
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    i64, i32 = ir.IntType(64), ir.IntType(32)
    handler_type = ir.FunctionType(ir.VoidType(), [i32])
    module = ir.Module("tilesim_interrupt")
    module.triple = llvm.get_process_triple()
    fn = ir.Function(module, handler_type, "tilesim_sigint")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    armed = b.load_atomic(b.inttoptr(ir.Constant(i64, _STATE_AT + 8 * S_ARMED), i64.as_pointer()), "seq_cst", 8)
    with b.if_then(b.icmp_unsigned("!=", armed, ir.Constant(i64, 0))):
        b.atomic_rmw("add", b.inttoptr(ir.Constant(i64, _STATE_AT + 8 * S_COUNT), i64.as_pointer()),
                     ir.Constant(i64, 1), "seq_cst")
    chained = b.load_atomic(b.inttoptr(ir.Constant(i64, _STATE_AT + 8 * S_CHAINED), i64.as_pointer()), "seq_cst", 8)
    with b.if_then(b.icmp_unsigned(">", chained, ir.Constant(i64, 1))):  # not SIG_DFL (0) or SIG_IGN (1)
        b.call(b.inttoptr(chained, handler_type.as_pointer()), [fn.args[0]])
    b.ret_void()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)),
                                        llvm.Target.from_triple(module.triple).create_target_machine())
    engine.finalize_object()
    _engine = engine
    return int(engine.get_function_address("tilesim_sigint"))


def stop_word() -> int:
    """The address of the stop word for a launch starting now on this thread, cleared: the process's interrupt word
    on the main thread (the native handler made, the first time; armed if Python's default handler is in place), a
    word nothing sets elsewhere."""
    if threading.get_ident() != _MAIN:
        return _QUIET_AT
    if not _WORD[S_HANDLER] and _LINUX_SIGACTION:
        with _lock:
            if not _WORD[S_HANDLER]:
                _WORD[S_HANDLER] = _make_handler()
    if _WORD[S_COUNT]:
        _WORD[S_COUNT] = 0
    _WORD[S_ARMED] = _signal.getsignal(signal.SIGINT) is _signal.default_int_handler
    return _STATE_AT


def request(word: int) -> None:
    """Stop the launch whose stop word is at ``word`` (0: none): its cores stop at their next instruction."""
    if word == _STATE_AT:
        _WORD[S_COUNT] += 1


def requested(word: int) -> bool:
    """Whether the launch whose stop word is at ``word`` was asked to stop."""
    return word == _STATE_AT and _WORD[S_COUNT] != 0


@intrinsic
def _keep_handler(typingctx, state_at):
    """The native handler (its address in the stop word's S_HANDLER, 0: none) put in front of SIGINT's handler
    unless it is there, chaining to the one found: one ``sigaction`` query, a second call to install."""
    if not isinstance(state_at, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        i64, i32 = ir.IntType(64), ir.IntType(32)
        sigaction = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32, i64, i64]),
                                                   "sigaction")
        state = builder.inttoptr(context.cast(builder, args[0], signature.args[0], types.int64), i64.as_pointer())
        ours = builder.load(builder.gep(state, [ir.Constant(i32, S_HANDLER)]))
        with builder.if_then(builder.icmp_unsigned("!=", ours, ir.Constant(i64, 0))):
            act = cgutils.alloca_once(builder, ir.ArrayType(i64, _SIGACTION_WORDS))
            at = builder.ptrtoint(act, i64)
            sigint = ir.Constant(i32, signal.SIGINT)
            builder.call(sigaction, [sigint, ir.Constant(i64, 0), at])
            slot = builder.bitcast(act, i64.as_pointer())
            found = builder.load(slot)
            flags = builder.load(builder.inttoptr(builder.add(at, ir.Constant(i64, _SA_FLAGS_AT)), i32.as_pointer()))
            chainable = builder.and_(builder.icmp_unsigned(">", found, ir.Constant(i64, 1)),
                                     builder.icmp_unsigned("==", builder.and_(flags, ir.Constant(i32, _SA_SIGINFO)),
                                                           ir.Constant(i32, 0)))
            displaced = builder.and_(builder.icmp_unsigned("!=", found, ours), chainable)
            with builder.if_then(displaced):
                builder.store_atomic(found, builder.gep(state, [ir.Constant(i32, S_CHAINED)]), "seq_cst", 8)
                builder.store(ours, slot)
                builder.call(sigaction, [sigint, at, ir.Constant(i64, 0)])
        return context.get_dummy_value()

    return types.none(state_at), codegen


@njit(cache=True)
def keep_handler(ctx):
    """At the start of a launch's cores on the calling thread (context blocks ``ctx``): the native SIGINT handler
    in place if the launch's stop word has one (see the module's text)."""
    _keep_handler(ctx[0, X_STOP_AT])
