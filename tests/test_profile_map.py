"""bench.profile: its perf map puts every symbol of a Numba host function's object code at its loaded address,
named (device code has none: it is linked into its host callers); its case is the demo's maker, on another shape
when asked."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from numba import cfunc, njit, types

from bench.profile import demo_case, readable, write_perf_map
from tilesim.jit import njit as tilesim_njit


@njit
def _twice_plus_one(x):
    return 2 * x + 1


@tilesim_njit
def _plus_three(x):
    return x + 3


@tilesim_njit(host=True)
def _twice_plus_three(x):
    return 2 * _plus_three(x)


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


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_device_code_is_mapped_in_the_host_function_that_links_it(tmp_path):
    assert _twice_plus_three(1) == 8
    path = tmp_path / "perf.map"
    assert write_perf_map(str(path), [_plus_three, _twice_plus_three]) >= 2
    names = {readable(line.split()[2]) for line in path.read_text().splitlines()}
    here = f"{__name__}._twice_plus_three"
    assert {here, f"{here} (cpython wrapper)"} <= names, names
    assert f"{__name__}._plus_three" not in names  # inlined: no symbol of its own


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_a_cfunc_is_mapped_at_its_address(tmp_path):
    """A SyncAll launch runs its cores through a numba cfunc (the launcher's C entry), not a dispatcher."""
    entry = cfunc(types.int64(types.int64))(_twice_plus_one.py_func)
    path = tmp_path / "perf.map"
    assert write_perf_map(str(path), [entry]) >= 1
    rows = {int(addr, 16): readable(name) for addr, _, name in (line.split() for line in path.read_text().splitlines())}
    assert rows.get(entry.address, "").endswith("_twice_plus_one (cfunc)"), rows


def test_numba_names_read_as_module_and_function():
    assert readable("_ZN7tilesim7machine6movers9_write_gmB20v2481621123291212237B52c8tJTIeFIjxB2IKSgI4CrvQClUaPLCRh1"
                    "KiFSRRBdGoCAA_3d_3dExxxb") == "tilesim.machine.movers._write_gm"
    assert readable("_ZN7cpython31tilesim_launch_2c99c5f517920fd75coresB20v3904696203722284757B52c8t") == \
        "tilesim_launch_2c99c5f517920fd7.cores (cpython wrapper)"
    assert readable("_ZN7tilesim7machine6vector16_contiguous_impl12_3clocals_3e3twoB20v3904696203722284998B66c8t"
                    "JTIeFIjx") == "tilesim.machine.vector._contiguous_impl.<locals>.two"
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
    """The last line of a profile: copies (memmove and the movers), vector instructions (their loops, casts,
    reductions, the normalization APIs), the kernel's own code, the core loop and the machine's queues and syncs;
    the rest of 100 is other."""
    from bench.profile import by_kind

    rows = [(40.0, "__memmove_avx_unaligned_erms"), (5.0, "tilesim.machine.movers._write_gm"),
            (20.0, "tilesim.machine.vector._contiguous_impl.<locals>.two"), (6.0, "tilesim.numerics.b16._widen_blocks"),
            (4.0, "tilesim.machine.reduce._whole_impl.<locals>.whole"), (3.0, "kernels.swiglu_grad._compute_float"),
            (1.0, "tilesim_launch_2c99c5f517920fd7.cores"), (1.0, "tilesim.machine.pipe._place"),
            (2.0, "_PyEval_EvalFrameDefault")]
    kinds = by_kind(rows)
    assert kinds == pytest.approx({"copies": 45.0, "vector": 30.0, "kernel": 5.0, "other": 20.0})
