"""bench.profile's perf map: every symbol of a Numba function's object code at its loaded address, named."""

from __future__ import annotations

import shutil

import pytest
from numba import njit

from bench.profile import readable, write_perf_map


@njit
def _twice_plus_one(x):
    return 2 * x + 1


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_the_perf_map_places_a_numba_function_at_its_entry_point(tmp_path):
    assert _twice_plus_one(3) == 7
    path = tmp_path / "perf.map"
    assert write_perf_map(str(path), [_twice_plus_one]) >= 3
    rows = {readable(name): (int(addr, 16), int(size, 16)) for addr, size, name in
            (line.split() for line in path.read_text().splitlines())}
    cres = next(iter(_twice_plus_one.overloads.values()))
    entry = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    here = f"{__name__}._twice_plus_one"
    assert rows[here][0] == entry and rows[here][1] > 0
    assert f"{here} (cpython wrapper)" in rows and f"{here} (cfunc)" in rows


def test_numba_names_read_as_module_and_function():
    assert readable("_ZN7tilesim6vector3mulB4v115B40c8tJTIeFIjxB2IKSgI4CrvSCKg1MMfAwK4LIaQIAE") == "tilesim.vector.mul"
    assert readable("_ZN7cpython7kernels15layer_norm_grad6_coresB4v474B52c8t") == \
        "kernels.layer_norm_grad._cores (cpython wrapper)"
    assert readable("__memmove_avx512_unaligned_erms") == "__memmove_avx512_unaligned_erms"
    assert readable("_ZN3foo3barE") == "_ZN3foo3barE"  # C++, not Numba: no B<n>v<n> after the names
    long = "_ZN7kernels19group_norm_backward6_coresB4v474B52" + "c8tJTIeFIjxB2IKSgI4CrvSCKg1MMfAwK4L" * 40
    assert readable(long) == "kernels.group_norm_backward._cores"
    other = "_ZN" + "7abc1de" * 40 + "E"  # a regex with nested repeats took seconds at 10 repeats, minutes at 20
    assert readable(other) == other
