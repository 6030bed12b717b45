"""How a host thread waits for another (``tilesim.machine.waits.wait_until``): asleep on the word, woken by the
thread that advances it; a stop word ends the wait though nobody wakes the sleeper (its sleeps double from 1 ms up
to 128 ms, so that a core asleep behind the gate for a whole phase wakes a few times, not once a millisecond)."""

from __future__ import annotations

import threading
import time

import numpy as np

from tilesim.jit import njit
from tilesim.machine.waits import FIRST_SLEEP_US, LONGEST_SLEEP_US, advance, next_sleep, wait_until

WORD, WAITERS, STOP = 0, 1, 2


@njit(cache=True, nogil=True, host=True)
def _wait(words, target):
    at = words.ctypes.data
    return wait_until(at + WORD * 8, target, at + WAITERS * 8, at + STOP * 8, 0)


@njit(cache=True, nogil=True, host=True)
def _advance(words, step):
    at = words.ctypes.data
    advance(at + WORD * 8, step, at + WAITERS * 8)


@njit(cache=True, host=True)
def _sleeps(n):
    out = np.empty(n, np.int64)
    us = FIRST_SLEEP_US
    for k in range(n):
        out[k] = us
        us = next_sleep(us)
    return out


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
    time.sleep(0.05)  # past the first sleeps: the waiter sleeps 32 ms or more at a time by now
    words[STOP] = 1  # no wake: the sleep's end sees it
    th.join()
    assert got == [False] and words[WORD] == 0 and words[WAITERS] == 0


def test_the_sleeps_double_up_to_the_longest():
    s = _sleeps(10)
    assert s.tolist() == [1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 128000, 128000]
    assert LONGEST_SLEEP_US == 128_000 and FIRST_SLEEP_US == 1000
