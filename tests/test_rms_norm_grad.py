"""aclnnRmsNormGrad on the emulated AI Core: tiled results against untiled float64 math and torch autograd."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tilesim.kernels as kernels
import tilesim.tiling as tiling
import torch
from conftest import rms_inputs

from tilesim import UbOverflowError, capture
from tilesim.precision import assert_close

ROOT = Path(__file__).resolve().parents[1]


def check(dy, x, rstd, gamma, **kw):
    """Run the op and hold both outputs to Ascend's precision standard against float64 math."""
    with capture() as runs:
        dx, dgamma = kernels.rms_norm_grad(dy, x, rstd, gamma, **kw)
    rdx, rdgamma = kernels.reference.rms_norm_grad(dy, x, rstd, gamma)
    assert dx.dtype == dy.dtype and dx.shape == dy.shape
    assert dgamma.dtype == np.float32 and dgamma.shape == gamma.shape
    assert_close(dx, rdx, what="dx")
    assert_close(dgamma, rdgamma, what="dgamma")
    return runs[0]


@pytest.mark.parametrize("dtype,gamma_dtype", [("float32", "float32"), ("float16", "float16"),
                                               ("bfloat16", "float32"), ("bfloat16", "bfloat16"),
                                               ("float16", "float32")])
@pytest.mark.parametrize("rows,cols", [(300, 1), (1000, 7), (97, 31), (50, 33), (40, 640), (13, 641), (60, 4095),
                                       (49, 6080), (30, 6081), (5, 12288)])
@pytest.mark.parametrize("det", [False, True])
def test_shapes_dtypes_modes(rng, dtype, gamma_dtype, rows, cols, det):
    # With D = 1 the forward's rstd makes dx = r*dy*g*(1 - xh^2) = O(eps): pure cancellation in any fp32 kernel.
    run = check(*rms_inputs(rng, (rows, cols), 1, dtype, gamma_dtype, rstd_from_x=cols > 1), deterministic=det)
    assert run.tiling.tiling_key == (1 if cols <= 6080 else 2)
    assert run.tiling.fixed_output == int(det)


@pytest.mark.parametrize("shape,n_gamma", [((64,), 1), ((3, 5, 40), 1), ((2, 3, 4, 24), 1), ((6, 10, 12), 2),
                                           ((2, 3, 4, 5), 2), ((7, 129), 2)])
def test_ranks(rng, shape, n_gamma):
    check(*rms_inputs(rng, shape, n_gamma, "float32"))
    check(*rms_inputs(rng, shape, n_gamma, "bfloat16"), deterministic=True)


@pytest.mark.parametrize("soc", ["Ascend910B3", "Ascend910_9391", "Ascend310P3", "Ascend910A"])
@pytest.mark.parametrize("cols", [64, 8192])
def test_socs(rng, soc, cols):
    run = check(*rms_inputs(rng, (500, cols), 1, "float16", "float16"), soc=soc)
    assert run.soc == soc and run.block_dim == min(500, tiling.rms_norm_grad(
        *rms_inputs(rng, (500, cols), 1, "float16", "float16"), soc=soc).block_dim)


def test_fewer_rows_than_cores_and_one_row(rng):
    assert check(*rms_inputs(rng, (5, 256), 1, "bfloat16")).block_dim == 5
    assert check(*rms_inputs(rng, (1, 7000), 1, "float32"), deterministic=True).block_dim == 1


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_large_mean_inputs(rng, dtype):
    check(*rms_inputs(rng, (200, 1000), 1, dtype, offset=1000.0))
    check(*rms_inputs(rng, (20, 7000), 1, dtype, offset=1000.0), deterministic=True)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("rows,cols", [(256, 512), (33, 7000)])
def test_against_torch_autograd(rng, dtype, rows, cols):
    eps = 1e-6
    dy, x, rstd, gamma = rms_inputs(rng, (rows, cols), 1, dtype, eps=eps)
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    gt = torch.tensor(gamma.astype(np.float64), requires_grad=True)
    y = torch.nn.functional.rms_norm(xt, (cols,), gt, eps)
    y.backward(torch.tensor(dy.astype(np.float64)))
    dx, dgamma = kernels.rms_norm_grad(dy, x, rstd, gamma)
    assert_close(dx, xt.grad.numpy(), what="dx vs torch")
    assert_close(dgamma, gt.grad.numpy(), what="dgamma vs torch")


_THREADS_SCRIPT = """
import hashlib, sys
import numpy as np
sys.path.insert(0, "tests")
from conftest import rms_inputs
import tilesim.kernels as kernels
rng = np.random.default_rng(7)
h = hashlib.sha256()
for shape, det in (((3000, 300), True), ((200, 9000), True), ((3000, 300), False), ((200, 9000), False)):
    dx, dgamma = kernels.rms_norm_grad(*rms_inputs(rng, shape, 1, "float32"), deterministic=det)
    h.update(dx.tobytes()); h.update(dgamma.tobytes())
print(h.hexdigest())
"""


@pytest.mark.no_launch_here  # subprocesses
def test_bit_identical_across_host_thread_counts():
    digests = set()
    for threads in ("1", "2"):
        env = {**__import__("os").environ, "NUMBA_NUM_THREADS": threads}
        out = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT], cwd=ROOT, env=env, capture_output=True,
                             text=True, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_user_tilings_run_and_stay_correct(rng):
    dy, x, rstd, gamma = rms_inputs(rng, (1000, 100), 1, "bfloat16")
    for kw in (dict(core_num=3), dict(ub_factor=4), dict(buffer_num=1), dict(tiling_key=2, ub_factor=32),
               dict(core_num=1, ub_factor=50)):
        t = tiling.rms_norm_grad(dy, x, rstd, gamma, **kw)
        run = check(dy, x, rstd, gamma, tiling=t)
        assert run.tiling == t and run.ub_plan.buffers[0].buffer_num == t.buffer_num


def test_user_tiling_that_overflows_ub(rng):
    dy, x, rstd, gamma = rms_inputs(rng, (16, 8192), 1, "float32")
    t = tiling.rms_norm_grad(dy, x, rstd, gamma, tiling_key=1, ub_factor=1)  # split-N cannot hold 8192 columns
    with pytest.raises(UbOverflowError) as e:
        kernels.rms_norm_grad(dy, x, rstd, gamma, tiling=t)
    assert e.value.status == 561002 and "dy" in e.value.message and "196608" in e.value.message


def test_checked_mode_runs_clean_and_agrees(rng):
    for shape, dtype in (((300, 33), "float16"), ((40, 7000), "bfloat16"), ((100, 1024), "float32")):
        for det in (False, True):
            args = rms_inputs(rng, shape, 1, dtype)
            fast = kernels.rms_norm_grad(*args, deterministic=det)
            checked = kernels.rms_norm_grad(*args, deterministic=det, checks=True)
            for a, b in zip(fast, checked, strict=True):
                np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def test_out_arrays_are_written_and_inputs_untouched(rng):
    args = rms_inputs(rng, (64, 200), 1, "bfloat16")
    copies = [a.copy() for a in args]
    dx = np.zeros_like(args[0])
    dgamma = np.zeros(200, np.float32)
    rdx, rdg = kernels.rms_norm_grad(*args, out=(dx, dgamma))
    assert rdx is dx and rdg is dgamma and np.any(dgamma != 0)
    for a, c in zip(args, copies, strict=True):
        np.testing.assert_array_equal(a.view(np.uint8), c.view(np.uint8))


def test_run_report_counts_the_bytes(rng):
    rows, cols = 100, 1000
    run = check(*rms_inputs(rng, (rows, cols), 1, "float32"))
    assert run.total("mte2_bytes") == 2 * rows * cols * 4 + rows * 4 + run.block_dim * cols * 4
    assert run.total("mte3_bytes") == rows * cols * 4 + cols * 4 + run.block_dim * cols * 4
    assert run.total("atomic_bytes") == run.block_dim * cols * 4
    assert "dgamma" in str(run) and run.ub_plan.used <= 196608
