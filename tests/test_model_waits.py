"""How a host thread waits for another (``tilesim.machine.waits.wait_until``): asleep on the word, woken by the
thread that advances it; a stop word ends the wait, at the latest when a sleep ends (128 ms) if nobody wakes the
sleeper, and at once when the stopping side does (``leave`` of a failed core)."""

from __future__ import annotations

import threading
import time

import numpy as np

from tilesim.jit import njit
from tilesim.machine.waits import BAR_ABORT, BAR_EXITED, BAR_WORDS, advance, leave, wait_until

WORD, WAITERS, STOP = 0, 1, 2


@njit(cache=True, nogil=True, host=True)
def _wait(words, target):
    at = words.ctypes.data
    return wait_until(at + WORD * 8, target, at + WAITERS * 8, at + STOP * 8, 0, 0)


@njit(cache=True, nogil=True, host=True)
def _advance(words, step):
    at = words.ctypes.data
    advance(at + WORD * 8, step, at + WAITERS * 8)


@njit(cache=True, nogil=True, host=True)
def _wait_for_core(core, bar):
    """A core behind the gate: asleep until ``core`` (X_ARRIVED, its waiter count, its fault word) finishes its
    phase, stops, or the launch gives up."""
    at = core.ctypes.data
    return wait_until(at, 1, at + 8, at + 16, bar.ctypes.data + BAR_ABORT * 8, 0)


@njit(cache=True, nogil=True, host=True)
def _leave(bar, block_dim, failed, arrived):
    leave(bar, block_dim, failed, arrived)


def _waiter(words, target, got):
    got.append(_wait(words, target))


def test_a_wait_ends_when_the_word_reaches_its_target():
    words = np.zeros(3, np.int64)
    got: list[bool] = []
    th = threading.Thread(target=_waiter, args=(words, 2, got))
    th.start()
    time.sleep(0.02)  # the waiter asleep (or about to be): each advance wakes it
    _advance(words, 1)
    time.sleep(0.02)
    assert not got  # 1 < 2: asleep again
    _advance(words, 1)
    th.join()
    assert got == [True] and words[WAITERS] == 0


def test_a_stop_ends_a_wait_nobody_wakes():
    words = np.zeros(3, np.int64)
    got: list[bool] = []
    th = threading.Thread(target=_waiter, args=(words, 1, got))
    th.start()
    time.sleep(0.02)  # the waiter asleep (or about to be)
    words[STOP] = 1  # no wake: the sleep's end sees it
    th.join()
    assert got == [False] and words[WORD] == 0 and words[WAITERS] == 0


def test_a_failed_core_stops_the_launch_and_wakes_those_waiting_for_it():
    bar = np.zeros(BAR_WORDS, np.int64)
    core = np.zeros(3, np.int64)  # the failed core's X_ARRIVED, its waiter count, its fault word
    got: list[bool] = []
    th = threading.Thread(target=lambda: got.append(_wait_for_core(core, bar)))
    th.start()
    time.sleep(0.02)  # the waiter asleep (or about to be)
    _leave(bar.ctypes.data, 2, True, core.ctypes.data)
    th.join()
    assert got == [False] and bar[BAR_ABORT] == 1 and bar[BAR_EXITED] == 1 and core[0] == 0 and core[1] == 0
