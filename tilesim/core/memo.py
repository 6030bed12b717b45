"""Host-side memoisation by object identity, for what a launch derives from its frozen tiling and UB plan."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

IDENTITY_MEMO_SIZE = 1024  # entries per memoised function


def by_identity(fn: F) -> F:
    """Memoise ``fn(*args)`` (positional arguments only) by the identity of its arguments, not their value.

    An op's remembered tiling (``tiling.common.remembered``) is the same object on every call with the same key,
    so this costs a dictionary look-up, where ``functools.lru_cache`` hashes every field of a frozen TilingData,
    nested API tilings included, on every call: several microseconds, which a small call pays several times.
    Each entry keeps its arguments alive, so that no other object takes their ids while the entry stands; equal
    but distinct arguments (a hand-made tiling per call) compute again, so ``fn`` must give equal results for
    equal arguments. The oldest entry goes when the memo is full."""
    memo: dict[tuple[int, ...], tuple[tuple[Any, ...], Any]] = {}
    lock = threading.Lock()  # for the eviction: op calls may come from several threads

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        key = tuple(map(id, args))
        hit = memo.get(key)
        if hit is not None:
            return hit[1]
        value = fn(*args)
        with lock:
            if len(memo) >= IDENTITY_MEMO_SIZE:
                memo.pop(next(iter(memo)), None)
            memo[key] = (args, value)
        return value

    call.cache_clear = memo.clear  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]
