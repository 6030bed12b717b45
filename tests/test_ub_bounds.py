"""An access outside the core's UB, in the fast build: a LocalTensor offset past the UB (a user's off-by-a-tile
bug) stops the kernel before the access, with a KernelError naming the kernel, the core, the buffer, the
instruction, the byte range and the UB's size, on every path an instruction reaches the UB by: DataCopy and
DataCopyPad both ways, UB to UB, GetValue / SetValue, the vector families, the reductions, Compare / Select, Cast,
Gather, Transpose, Brcb and a high-level API (Broadcast); a negative stride or padding (a walk running backwards)
too. The process is fine afterwards: the next launch computes what it should. Checked mode reports the same
access as the LocalTensor's bounds (a CheckError), a recording launch (the checked build with its checks off)
stops as the fast build does.

The launches run in a child process: without the check, a far offset kills the interpreter (SIGSEGV) and one just
before the UB corrupts the host's heap, which would take pytest with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import tilesim
from tilesim import machine as asc  # AscendC::
from tilesim.runtime.launcher import KernelError, kernel, launch
from tilesim.soc import get_soc

pytestmark = pytest.mark.no_launch_here  # its launches run in a subprocess, each in the mode it asks for

ROOT = Path(__file__).resolve().parents[1]
SOC = get_soc("Ascend910B1")
UB = SOC.ub_size
TILE = 64  # fp32 elements of a tile, 256 B: each buffer of the kernel

# The misuses, by path: the instruction a KernelError names and the bytes of its operand ``x[off]`` (on xq's
# buffer, the kernel's first: UB offset 0)
PATHS = {"DataCopy in": ("DataCopy", 256), "DataCopy out": ("DataCopy", 256), "DataCopyPad in": ("DataCopyPad", 64),
         "DataCopyPad out": ("DataCopyPad", 40), "DataCopy UB to UB": ("DataCopy", 256), "GetValue": ("GetValue", 4),
         "SetValue": ("SetValue", 4), "Add": ("Add", 256), "Adds level-0": ("Adds", 256), "Exp": ("Exp", 256),
         "Duplicate": ("Duplicate", 256), "ReduceSum": ("ReduceSum", 256), "WholeReduceSum": ("WholeReduceSum", 4),
         "Compare": ("Compare", 8), "Select": ("Select", 8), "Cast": ("Cast", 128), "Gather": ("Gather", 256),
         "Transpose": ("Transpose", 512), "Brcb": ("Brcb", 256), "Broadcast": ("Broadcast", 256)}
# Walks that run backwards from a tensor inside the UB: (instruction, buffer, its UB offset)
BACKWARDS = {"Muls, a negative repeat stride": ("Muls", "tmp", 512), "DataCopy, rows backwards": ("DataCopy", "xq", 0),
             "DataCopyPad, a negative left padding": ("DataCopyPad", "xq", 0)}
CLEAN = -1


@dataclass(frozen=True)
class Bad:
    """Core ``core`` runs misuse ``path`` (its index in PATHS, then in BACKWARDS; CLEAN: none) on ``x[off]``,
    ``off`` fp32 elements from its tile's tensor."""

    path: int
    off: int
    core: int


@kernel
def ub_range(ctx, t, src, dst):
    """Each core: dst = 2 * src over its tile (CopyIn, Muls, CopyOut), core ``t.core`` first making misuse
    ``t.path``."""
    pipe = asc.TPipe(ctx)
    xq = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, 4 * TILE)
    yq = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, 4 * TILE)
    tmp = pipe.init_buffer(asc.TBuf(asc.VECCALC), 4 * TILE)
    c = asc.get_block_idx(ctx)
    x = xq.alloc_tensor(asc.float32)
    asc.data_copy(x, src[c * TILE], TILE)
    xq.enque(x)
    x = xq.deque(asc.float32)
    y = yq.alloc_tensor(asc.float32)
    w = tmp.get(asc.float32)
    if c == t.core:
        p, bad = t.path, x[t.off]  # the paths in the order of PATHS, then of BACKWARDS
        if p == 0:
            asc.data_copy(bad, src, TILE)
        elif p == 1:
            asc.data_copy(dst, bad, TILE)
        elif p == 2:
            asc.data_copy_pad(bad, src, asc.DataCopyExtParams(1, 40, 0, 0), asc.DataCopyPadExtParams(True, 0, 0, 0))
        elif p == 3:
            asc.data_copy_pad(dst, bad, asc.DataCopyExtParams(1, 40, 0, 0))
        elif p == 4:
            asc.data_copy(bad, x, TILE)
        elif p == 5:
            w.set_value(0, x.get_value(t.off))
        elif p == 6:
            x.set_value(t.off, 1.0)
        elif p == 7:
            asc.add(bad, x, w, TILE)
        elif p == 8:
            asc.adds(w, bad, 1.0, TILE, 1, asc.UnaryRepeatParams(1, 1, 8, 8))
        elif p == 9:
            asc.exp(w, bad, TILE)
        elif p == 10:
            asc.duplicate(bad, 1.0, TILE)
        elif p == 11:
            asc.reduce_sum(w, bad, y, TILE)
        elif p == 12:
            asc.whole_reduce_sum(bad, x, TILE, 1, 1, 1, 8)
        elif p == 13:
            asc.compare(bad.reinterpret_cast(asc.uint8), x, w, asc.CMPMODE.LT, TILE)
        elif p == 14:
            asc.select(w, bad.reinterpret_cast(asc.uint8), x, w, asc.SELMODE.VSEL_TENSOR_TENSOR_MODE, TILE)
        elif p == 15:
            asc.cast(bad.reinterpret_cast(asc.half), x, asc.CAST_RINT, TILE)
        elif p == 16:
            asc.gather(bad, x, w.reinterpret_cast(asc.uint32), 0, TILE)
        elif p == 17:
            asc.transpose(w.reinterpret_cast(asc.half), bad.reinterpret_cast(asc.half))
        elif p == 18:
            asc.brcb(bad, x, 1, asc.BrcbRepeatParams(1, 8))
        elif p == 19:
            asc.broadcast(bad, x, (8, 8), (1, 8), 0, w.reinterpret_cast(asc.uint8))
        elif p == 20:  # repeat 1 of dst 8 blocks before repeat 0
            asc.muls(w, x, 2.0, TILE, 2, asc.UnaryRepeatParams(1, 1, -8, 8))
        elif p == 21:  # row 1 of dst 64 B before row 0
            asc.data_copy(x, src, asc.DataCopyParams(2, 1, 0, -3))
        elif p == 22:  # the row's data 32 B before it
            asc.data_copy_pad(x, src, asc.DataCopyExtParams(1, 40, 0, 0), asc.DataCopyPadExtParams(True, -8, 0, 0))
    asc.muls(y, x, 2.0, TILE)
    xq.free_tensor(x)
    yq.enque(y)
    y = yq.deque(asc.float32)
    asc.data_copy(dst[c * TILE], y, TILE)
    yq.free_tensor(y)


def _launch(path: int, off: int, core: int, block_dim: int, checks: bool = False) -> np.ndarray:
    src = np.arange(block_dim * TILE, dtype=np.float32)
    dst = np.full(block_dim * TILE, -1, np.float32)
    launch(ub_range, Bad(path, off, core), src, dst, block_dim=block_dim, soc=SOC, checks=checks)
    return dst


def _outcome(path: int, off: int, core: int, block_dim: int, checks: bool = False) -> str:
    """What a launch with the misuse gives: the error's class and message, or ``ran``."""
    try:
        _launch(path, off, core, block_dim, checks)
    except (KernelError, tilesim.CheckError) as e:
        return f"{type(e).__name__}: {e}"
    return "ran"


def _then_right(block_dim: int) -> bool:
    """The next launch, clean, computes dst = 2 * src."""
    return bool(np.array_equal(_launch(CLEAN, 0, -1, block_dim), 2 * np.arange(block_dim * TILE, dtype=np.float32)))


def run_cases(cases: list[tuple[int, int, int, int, str]]) -> None:
    """In the child: each case ``(path, off, core, block_dim, mode)`` launched (mode: fast, checked, or recorded
    under ``capture(log=True)``), its outcome and whether a clean launch after it is right, a JSON line each."""
    from conftest import as_asked

    for path, off, core, block_dim, mode in cases:
        with as_asked():
            if mode == "recorded":
                with tilesim.capture(log=True):
                    got = _outcome(path, off, core, block_dim)
            else:
                got = _outcome(path, off, core, block_dim, mode == "checked")
            print(json.dumps([got, _then_right(block_dim)]), flush=True)


def _in_child(cases: list[tuple[int, int, int, int, str]]) -> list[tuple[str, bool]]:
    code = f"import sys; sys.path.insert(0, 'tests'); from test_ub_bounds import run_cases; run_cases({cases!r})"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) == len(cases), (
        f"the child process ended with {out.returncode} after {len(lines)} of {len(cases)} launches: "
        f"{out.stderr[-2000:]}")
    return [tuple(json.loads(line)) for line in lines]


FAR = 1 << 24  # fp32 elements: 64 MiB past the UB's start
BEFORE = -4096 // 4  # 4 KiB before it
CASES = ([(p, off, 1, 2, "fast") for p in range(len(PATHS)) for off in (FAR, BEFORE)]
         + [(len(PATHS) + k, 0, 0, 1, "fast") for k in range(len(BACKWARDS))]
         + [(p, FAR, 0, 1, mode) for p in (0, 7) for mode in ("checked", "recorded")])


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[int, int, int, int, str], tuple[str, bool]]:
    """Every case's outcome and whether the clean launch after it was right, from one child process."""
    return dict(zip(CASES, _in_child(CASES), strict=True))


def test_every_path_outside_the_ub_stops_the_kernel_and_the_next_launch_is_right(outcomes):
    """Far past the UB and 4 KiB before it (xq lies at the UB's start: a byte of it is a byte of the UB), on core 1
    of 2 (the fast build's cores share their host thread's UB: the bound is each core's own)."""
    for p, (path, (op, nbytes)) in enumerate(PATHS.items()):
        for off in (FAR, BEFORE):
            got, right = outcomes[(p, off, 1, 2, "fast")]
            first = 4 * off
            assert got == (f"KernelError: ub_range, core 1, xq: {op} accesses UB bytes [{first}, {first + nbytes}) "
                           f"({nbytes} B from offset {first} of the buffer), outside the core's UB of {UB} B: on the "
                           f"NPU the access traps (a LocalTensor's offset, index or length past its buffer; checked "
                           f"mode reports the buffer's own bounds)"), (path, got)
            assert right, path


def test_a_walk_running_backwards_stops_the_kernel(outcomes):
    """A negative stride or padding (Ascend C's fields are unsigned) would walk from inside the UB to before it."""
    for k, (path, (op, buf, at)) in enumerate(BACKWARDS.items()):
        got, right = outcomes[(len(PATHS) + k, 0, 0, 1, "fast")]
        want = (f"KernelError: ub_range, core 0, {buf}: {op} on an operand from UB byte {at} (offset 0 of the "
                f"buffer) that runs backwards: a negative stride, length or padding")
        assert got.startswith(want), (path, got)
        assert right, path


def test_checked_mode_reports_it_and_a_recording_stops(outcomes):
    """Checked mode reports the access against the tensor's buffer (a CheckError, the instruction skipped); a
    recording launch, the checked build with its checks off, stops as the fast build does."""
    for p in (0, 7):
        got, right = outcomes[(p, FAR, 0, 1, "checked")]
        assert got.startswith("CheckError: ") and "UB out of bounds" in got and 'UB buffer "xq"' in got, got
        assert f"offset {4 * FAR}, 256 B" in got and right, got
        got, right = outcomes[(p, FAR, 0, 1, "recorded")]
        assert got.startswith(f"KernelError: ub_range, core 0, xq: {list(PATHS.values())[p][0]} accesses UB bytes "
                              f"[{4 * FAR}, {4 * FAR + 256})") and right, got
