"""bench.profile: its perf map puts every symbol of a Numba function's object code at its loaded address, named;
its case is the demo's maker, on another shape when asked."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from numba import njit

from bench.profile import demo_case, readable, write_perf_map


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


def test_a_case_runs_the_demos_maker_on_the_shape_asked_for():
    call, golden, label = demo_case("rms_norm_grad", "fp32", (8, 128))
    dx = call()[0]
    assert label == "8x128" and dx.shape == (8, 128) and dx.dtype == np.float32
    assert np.allclose(dx, golden(), rtol=1e-4, atol=1e-5)
    assert demo_case("rms_norm_grad", "bf16")[2] == "4096x4096"  # the demo's own shape
    assert demo_case("swiglu_grad", "fp32", (8, 256))[2] == "8x2·128"  # a dtype the demo does not run
    with pytest.raises(SystemExit, match="no demo case for nsa_compress_grad fp32; there are: "):
        demo_case("nsa_compress_grad", "fp32")
    with pytest.raises(SystemExit, match="no demo case for no_such_op fp32; there are: "):
        demo_case("no_such_op", "fp32")
    with pytest.raises(SystemExit, match="no demo case for rms_norm_grad fp64; there are: "):
        demo_case("rms_norm_grad", "fp64")


def test_the_shares_add_up_by_kind():
    """The last line of a profile: copies (memmove and the movers), vector instructions (the primitives, casts,
    reductions, the normalization APIs), the kernel's own code and the launch; the rest of 100 is other."""
    from bench.profile import by_kind

    rows = [(40.0, "__memmove_avx_unaligned_erms"), (5.0, "tilesim.datamove._write_gm"), (20.0, "tilesim.vector.mul"),
            (6.0, "tilesim.cast._widen_blocks"), (4.0, "tilesim.reduce._tree64"), (3.0, "kernels.rms_norm_grad._cores"),
            (2.0, "_PyEval_EvalFrameDefault")]
    kinds = by_kind(rows)
    assert kinds == pytest.approx({"copies": 45.0, "vector": 30.0, "kernel": 3.0, "other": 22.0})
