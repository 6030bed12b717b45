"""Every input aclnnRmsNorm forbids: the documented status (null 161001, a dtype outside the table 161002, a shape
or value rule 561002; a SoC whose kernel build tilesim does not emulate 561003), a message naming the parameter
and the rule, nothing written to the caller's arrays, inputs unchanged, through both the op API and the two-phase
aclnn form."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tilesim.kernels as kernels
from refusals import assert_refused
from tilesim.kernels import aclnn

from tilesim import AclnnError

F32, F16, BF16 = np.float32, np.float16, ml_dtypes.bfloat16


def a(shape, dtype=F32):
    return np.ones(shape, dtype)


GOOD = dict(x=a((4, 64)), gamma=a((64,)), epsilon=1e-6)

# (name, changes to GOOD, soc, status, words the message must contain)
CASES = [
    ("x None", dict(x=None), "Ascend910B1", 161001, ["x"]),
    ("gamma None", dict(gamma=None), "Ascend910B1", 161001, ["gamma"]),
    ("x float64", dict(x=a((4, 64), np.float64)), "Ascend910B1", 161002, ["x", "float64"]),
    ("x int32", dict(x=a((4, 64), np.int32)), "Ascend910B1", 161002, ["x", "int32"]),
    ("gamma fp16 with fp32 x", dict(gamma=a((64,), F16)), "Ascend910B1", 161002, ["gamma", "float16"]),
    ("gamma bf16 with fp16 x", dict(x=a((4, 64), F16), gamma=a((64,), BF16)), "Ascend910B1", 161002,
     ["gamma", "bfloat16"]),
    ("gamma fp16 with bf16 x", dict(x=a((4, 64), BF16), gamma=a((64,), F16)), "Ascend910B1", 161002, ["gamma"]),
    ("gamma float64", dict(gamma=a((64,), np.float64)), "Ascend910B1", 161002, ["gamma"]),
    ("epsilon a string", dict(epsilon="1e-6"), "Ascend910B1", 161002, ["epsilon"]),
    ("epsilon None", dict(epsilon=None), "Ascend910B1", 161002, ["epsilon"]),
    ("x rank 9", dict(x=a((1,) * 8 + (64,))), "Ascend910B1", 561002, ["x", "rank 9"]),
    ("x rank 0", dict(x=a(())), "Ascend910B1", 561002, ["x", "rank 0"]),
    ("gamma rank 0", dict(gamma=a(())), "Ascend910B1", 561002, ["gamma", "rank 0"]),
    ("gamma rank above x", dict(gamma=a((1, 4, 64))), "Ascend910B1", 561002, ["gamma", "rank"]),
    ("gamma not x's last axes", dict(gamma=a((32,))), "Ascend910B1", 561002, ["gamma", "last 1 axes"]),
    ("gamma 2-D not x's last axes", dict(x=a((2, 3, 64)), gamma=a((2, 64))), "Ascend910B1", 561002,
     ["gamma", "last 2 axes"]),
    ("gamma empty", dict(x=a((4, 0)), gamma=a((0,))), "Ascend910B1", 561002, ["gamma", "empty"]),
    ("epsilon negative", dict(epsilon=-1e-6), "Ascend910B1", 561002, ["epsilon", "negative"]),
    ("310P", dict(), "Ascend310P3", 561003, ["soc", "Ascend310P3", "A2"]),
    ("910 training series", dict(), "Ascend910A", 561003, ["soc", "Ascend910A"]),
]


@pytest.mark.parametrize("name,change,soc,status,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, change, soc, status, words):
    args = {**GOOD, **change}
    x, gamma, eps = args["x"], args["gamma"], args["epsilon"]
    y_shape = x.shape if x is not None else (4, 64)
    y = np.full(y_shape, 7, x.dtype if x is not None and x.dtype != np.int32 else F32)
    r = np.full(y_shape[:-1] + (1,), 7, F32)
    assert_refused(lambda: kernels.rms_norm(x, gamma, epsilon=eps, soc=soc, out=(y, r)),
                   lambda: aclnn.rms_norm_get_workspace_size(x, gamma, eps, y, r, soc=soc), status, words,
                   [v for v in args.values() if isinstance(v, np.ndarray)], [y, r])


def test_unknown_soc():
    with pytest.raises(AclnnError) as e:
        kernels.rms_norm(GOOD["x"], GOOD["gamma"], soc="Ascend999")
    assert e.value.status == 161002 and "Ascend910B1" in e.value.message


def test_bad_out_arrays():
    """The op's out= arrays: y of x's shape and dtype, rstd of x's leading axes and 1s, float32, C-contiguous
    and writeable (161002, naming y or rstd); nothing written."""
    x, gamma = GOOD["x"], GOOD["gamma"]
    good_y, good_r = a((4, 64)), a((4, 1))
    ro = a((4, 1))
    ro.flags.writeable = False
    for bad, name in (((a((4, 63)), good_r), "y"), ((a((4, 64), F16), good_r), "y"), ((good_y, a((4,))), "rstd"),
                      ((good_y, a((4, 1), F16)), "rstd"), ((good_y, a((4, 2))[:, :1]), "rstd"), ((good_y, ro), "rstd")):
        keep = [o.copy() for o in bad]
        with pytest.raises(AclnnError) as e:
            kernels.rms_norm(x, gamma, out=bad)
        assert e.value.status == 161002 and name in e.value.message, e.value.message
        for o, k in zip(bad, keep, strict=True):
            np.testing.assert_array_equal(o, k)


def test_aclnn_outputs_checked_first_phase():
    """yOut / rstdOut: null 161001, dtype 161002, shape 561002 (rstd keeps x's rank, 1 for gamma's axes)."""
    x, gamma = GOOD["x"], GOOD["gamma"]
    y, r = a((4, 64)), a((4, 1))
    assert aclnn.rms_norm_get_workspace_size(x, gamma, 1e-6, None, r)[0] == 161001
    assert "yOut" in aclnn.get_recent_err_msg()
    assert aclnn.rms_norm_get_workspace_size(x, gamma, 1e-6, y, None)[0] == 161001
    assert "rstdOut" in aclnn.get_recent_err_msg()
    assert aclnn.rms_norm_get_workspace_size(x, gamma, 1e-6, y.astype(F16), r)[0] == 161002
    assert aclnn.rms_norm_get_workspace_size(x, gamma, 1e-6, y, r.astype(F16))[0] == 161002
    assert aclnn.rms_norm_get_workspace_size(x, gamma, 1e-6, y, a((4,)))[0] == 561002
    assert "rstdOut" in aclnn.get_recent_err_msg() and "[4, 1]" in aclnn.get_recent_err_msg()
    assert aclnn.rms_norm_get_workspace_size(x, gamma, 1e-6, a((4, 65)), r)[0] == 561002


def test_aclnn_two_phase():
    rng = np.random.default_rng(5)
    x = rng.uniform(-2, 2, (6, 2, 48)).astype(BF16)
    gamma = rng.uniform(0.5, 1.5, (2, 48)).astype(BF16)
    y, r = np.empty(x.shape, BF16), np.empty((6, 1, 1), F32)
    st, ws, ex = aclnn.rms_norm_get_workspace_size(x, gamma, 1e-5, y, r)
    assert st == 0 and ws == 256 + 16 * 1024 * 1024 and ex.tiling.num_row == 6 and ex.tiling.num_col == 96
    assert aclnn.rms_norm(np.empty(ws - 1, np.uint8), ws - 1, ex) == 161002
    assert aclnn.rms_norm(None, ws, ex) == 161001
    assert aclnn.rms_norm(np.empty(ws, np.uint8), ws, None) == 161001
    st2, _, ex2 = aclnn.rms_norm_get_workspace_size(x, gamma, 1e-5, y, r)
    assert aclnn.swi_glu(np.empty(ws, np.uint8), ws, ex2) == 161002 and "rms_norm" in aclnn.get_recent_err_msg()
    assert aclnn.rms_norm(np.empty(ws, np.uint8), ws, ex) == 0 and aclnn.get_recent_err_msg() == ""
    ry, rr = kernels.rms_norm(x, gamma, epsilon=1e-5)
    np.testing.assert_array_equal(y.view(np.uint16), ry.view(np.uint16))
    np.testing.assert_array_equal(r, rr)


def test_aclnn_empty_x():
    """An empty x is accepted: workspace 0, an executor that computes nothing."""
    x, gamma = a((0, 64), F16), a((64,), F16)
    y, r = np.empty((0, 64), F16), np.empty((0, 1), F32)
    st, ws, ex = aclnn.rms_norm_get_workspace_size(x, gamma, 1e-6, y, r)
    assert (st, ws) == (0, 0) and ex is not None and ex.tiling is None
    assert aclnn.rms_norm(None, 0, ex) == 0


def test_a_tiling_for_an_empty_x_is_refused():
    with pytest.raises(AclnnError) as e:
        kernels.rms_norm(a((0, 64)), a((64,)), tiling=kernels.aclnn.rms_norm_get_workspace_size(
            GOOD["x"], GOOD["gamma"], 1e-6, a((4, 64)), a((4, 1)))[2].tiling)
    assert e.value.status == 561002 and "empty" in e.value.message
    from tilesim.tiling.rms_norm import rms_norm as make_tiling
    with pytest.raises(AclnnError) as e:
        make_tiling(a((0, 64)), a((64,)))
    assert e.value.status == 561002 and "empty" in e.value.message
