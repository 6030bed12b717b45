"""Where an op's time goes, function by function, Numba's machine code included.

``perf`` sees Numba's functions as bare addresses: their machine code is loaded from the cache into anonymous
memory. This runs ``perf record`` on a loop of calls of one of the demo's cases and, before the loop, writes
``/tmp/perf-PID.map`` (perf's map format for JIT code) from the symbol tables of the object code every loaded
host function came with, so that ``perf report`` names them. Only the loop's samples are reported (``--time``),
not the set-up's.

    python -m bench.profile layer_norm_grad fp32          # the demo's shape for the op and dtype
    python -m bench.profile group_norm_backward bf16 --calls 20 --top 25
    python -m bench.profile rms_norm_grad bf16 --shape 16384,1024 --checks   # another shape, checked mode

Device code has no object code of its own (:mod:`tilesim.jit.link`): it is linked into the host function that
calls it, a launch's generated core loop (``tilesim_launch_<digest>.cores``, in the options' ``cache_dir``:
``TILESIM_CACHE``). So the names are those of the functions that object code kept: the core loop, and whatever
LLVM did not inline into it: a kernel's functions (``kernels.swiglu_grad._compute_float``), the instructions' loops
(``tilesim.machine.vector._contiguous_impl.<locals>.two``), the queue calls, the movers
(``tilesim.machine.movers._write_gm``). A callee LLVM inlined counts as its caller. The last line sums the shares
by kind (:data:`KINDS`): the copies between GM and UB, the vector instructions, the kernel's own code with the
launch and the machine's bookkeeping, and the rest. Needs ``perf`` (``perf_event_paranoid`` <= 2 lets a user
profile their own process); the samples are ``cpu-clock``, which works in VMs without hardware counters.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from numba.core import codegen

OBJECT_CODE = "_tilesim_object_code"  # where a library loaded from the cache keeps its object code here


def _keep_object_code(cls: type, cg: Any, state: tuple[str, str, Any]) -> Any:
    """JITCodeLibrary._unserialize, keeping the cached object code (Numba drops it once loaded). The inherited
    one is looked up at the call: tilesim.jit.link's, which loads device code's bitcode, once tilesim is imported."""
    lib = codegen.CPUCodeLibrary._unserialize.__func__(cls, cg, state)
    if state[1] == "object":
        setattr(lib, OBJECT_CODE, state[2][0])
    return lib


def _symbols(elf: bytes) -> list[tuple[int, int, str]]:
    """(offset, size, name) of the functions an object file defines, from ``nm``."""
    with tempfile.NamedTemporaryFile(suffix=".o") as f:
        f.write(elf)
        f.flush()
        out = subprocess.run(["nm", "-S", "--defined-only", f.name], capture_output=True, text=True,
                             check=True).stdout
    rows = []
    for line in out.splitlines():
        p = line.split()
        if len(p) == 4 and p[2] in "tTW":
            rows.append((int(p[0], 16), int(p[1], 16), p[3]))
    return rows


def write_perf_map(path: str | None = None, dispatchers: list[Any] | None = None) -> int:
    """Write perf's map of the machine code of ``dispatchers`` (default: every loaded Numba function); returns
    the number of symbols. Each library's object code is one section: its entry point's address less its offset
    places every symbol."""
    from numba.core.ccallback import CFunc
    from numba.core.registry import CPUDispatcher

    rows: dict[int, tuple[int, str]] = {}
    if dispatchers is None:  # by type: isinstance on a dead weakref.proxy among the objects raises ReferenceError
        dispatchers = [o for o in gc.get_objects() if issubclass(type(o), CPUDispatcher | CFunc)]
    libraries = []  # (library, the name of a function in it)
    for d in dispatchers:
        if isinstance(d, CFunc):  # a launch's core loop is one (tilesim.runtime.launcher's C entries)
            if getattr(d, "_library", None) is not None:
                libraries.append((d._library, d._wrapper_name))
            continue
        libraries.extend((cres.library, cres.fndesc.llvm_func_name) for cres in d.overloads.values())
    for lib, entry in libraries:
        if getattr(lib, "_tilesim_link_only", False):  # device code: linked into its host callers' code
            continue
        elf = getattr(lib, OBJECT_CODE, None)
        if elf is None:
            try:
                elf = lib._get_compiled_object()
            except (RuntimeError, ValueError):  # not compiled here, nor loaded from the cache with its code
                continue
        syms = _symbols(elf)
        base = next((lib.get_pointer_to_function(n) - v for v, _, n in syms if n == entry), None)
        if base is not None:
            rows.update((base + v, (s, n)) for v, s, n in syms)
    with open(path or f"/tmp/perf-{os.getpid()}.map", "w") as f:
        for a in sorted(rows):
            f.write(f"{a:x} {rows[a][0]:x} {rows[a][1]}\n")
    return len(rows)


def readable(sym: str) -> str:
    """``tilesim.machine.movers._write_gm`` for Numba's mangled ``_ZN7tilesim7machine6movers9_write_gmB20v24...``
    (cpython and cfunc wrappers marked, an inner function's ``<locals>`` unescaped); other symbols unchanged. A
    linear parse of the length-prefixed names: a regex with nested repeats backtracked for minutes on long mangled
    names."""
    i = sym.find("_ZN")
    if i < 0:
        return sym
    i += 3
    parts = []
    while i < len(sym) and sym[i].isdigit():
        j = i
        while j < len(sym) and sym[j].isdigit():
            j += 1
        k = int(sym[i:j])
        parts.append(sym[j:j + k])
        i = j + k
    if not parts or not sym.startswith("B", i):
        return sym
    name = ".".join(p for p in parts if p != "cpython").replace("_3clocals_3e", "<locals>")
    return name + (" (cpython wrapper)" if "cpython" in parts else "") + (" (cfunc)" if sym.startswith("cfunc") else "")


# What an emulated kernel's time goes to, by the prefixes of the function names perf reports (the first that
# matches).
KINDS = (("copies", ("__mem", "tilesim.machine.movers.", "tilesim.machine.datacopy.",  # DataCopy(Pad), InitOutput
                     "tilesim.machine.atomic.")),  # the atomic adds to GM
         ("vector", ("tilesim.machine.vector.", "tilesim.machine.convert.", "tilesim.machine.reduce.",
                     "tilesim.machine.compare.", "tilesim.machine.rearrange.", "tilesim.numerics.b16.",
                     "tilesim.numerics.expf.", "tilesim.machine.normalization.", "tilesim.jit.intrinsics.")),
         # its own scalar code, the core loop, the queues, syncs and checks
         ("kernel", ("kernels.", "tilesim_launch_", "tilesim.runtime.launcher.", "tilesim.runtime.launch.",
                     "tilesim.machine.", "tilesim.core.records.")))


def by_kind(rows: list[tuple[float, str]]) -> dict[str, float]:
    """The shares of ``rows`` (share, function) summed by :data:`KINDS`; ``other`` is the rest of 100 (the host's
    Python, the allocator, the OS, and the functions under perf's percent limit)."""
    out = {kind: 0.0 for kind, _ in KINDS}
    for pct, name in rows:
        kind = next((k for k, prefixes in KINDS if name.startswith(prefixes)), None)
        if kind is not None:
            out[kind] += pct
    out["other"] = max(0.0, 100.0 - sum(out.values()))
    return out


def demo_case(op: str, dtype: str, shape: tuple[int, ...] | None = None) -> Any:
    """The demo's case of ``op`` in ``dtype``, any dtype the op takes (``tilesim.kernels.op_specs.OPS``): its maker on
    ``shape``, or on the demo's shape for the op (that of the dtype where the demo runs it, else of the op's first
    case: the demo runs SwiGluGrad in bf16 only)."""
    from tilesim.kernels.op_specs import OPS

    from bench import demo

    cases = [(make, demo_shape, dt) for make, demo_shape, dt in demo.CASES if demo.op_of(make) == op]
    if not cases or dtype not in OPS[op].dtypes:
        known = sorted(f"{name} {dt}" for name in {demo.op_of(m) for m, _, _ in demo.CASES}
                       for dt in OPS[name].dtypes)
        raise SystemExit(f"no demo case for {op} {dtype}; there are: {', '.join(known)}")
    make, demo_shape, _ = next((c for c in cases if c[2] == dtype), cases[0])
    return make(shape or demo_shape, dtype)


def child(op: str, dtype: str, calls: int, times: str, shape: tuple[int, ...] | None, checks: bool) -> None:
    """The profiled process: warm up, write the perf map, then the timed loop, its monotonic bounds to ``times``.
    ``checks``: every launch in checked mode (as ``pytest --tilesim-checks``)."""
    from tilesim import options  # tilesim first: its link-only device code loads through it

    codegen.JITCodeLibrary._unserialize = classmethod(_keep_object_code)
    options.set_defaults(force_checks=checks)
    call, _, label = demo_case(op, dtype, shape)
    out = call()
    call(out)
    n = write_perf_map()
    t0 = time.monotonic()
    for _ in range(calls):
        call(out)
    t1 = time.monotonic()
    with open(times, "w") as f:
        f.write(f"{t0:.6f},{t1:.6f}\n")
    mode = " checked" if checks else ""
    print(f"{op} {label} {dtype}{mode}: {calls} calls, {(t1 - t0) / calls * 1e3:.1f} ms each; {n} Numba symbols mapped",
          flush=True)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    p.add_argument("op")
    p.add_argument("dtype")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--shape", help="comma-separated, in place of the demo's shape (e.g. 16384,1024)")
    p.add_argument("--checks", action="store_true", help="profile checked mode")
    p.add_argument("--child", metavar="TIMES", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    shape = tuple(int(v) for v in a.shape.split(",")) if a.shape else None
    if a.child:
        child(a.op, a.dtype, a.calls, a.child, shape, a.checks)
        return
    if not (shutil.which("perf") and shutil.which("nm")):
        raise SystemExit("bench.profile needs perf and nm (binutils) on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        data, times = os.path.join(tmp, "perf.data"), os.path.join(tmp, "times")
        cmd = ["perf", "record", "-q", "-F", "999", "-e", "cpu-clock", "--clockid", "monotonic", "-o", data, "--",
               sys.executable, "-m", "bench.profile", a.op, a.dtype, "--calls", str(a.calls), "--child", times,
               *(["--shape", a.shape] if a.shape else []), *(["--checks"] if a.checks else [])]
        subprocess.run(cmd, check=True)
        with open(times) as f:
            window = f.read().strip()
        report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "sym", "--time", window,
                                 "--percent-limit", "0.2"], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[(.)\]\s+(.*)", line)
        if m:
            rows.append((float(m.group(1)), readable(m.group(3).strip())))
    print(f"{'share':>7}  function (samples of the loop only)")
    for pct, name in rows[:a.top]:
        print(f"{pct:6.2f}%  {name}")
    print("by kind: " + ", ".join(f"{kind} {pct:.1f}%" for kind, pct in by_kind(rows).items()))


if __name__ == "__main__":
    main(sys.argv[1:])
