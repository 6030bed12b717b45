"""aclnnSwiGluGrad on the emulated AI Core: the tiled kernel against untiled float64 math, torch autograd of
silu(A)·B and a float32 numpy emulation of the kernel's instruction order (bit for bit), over every dtype, split
axis, aligned and unaligned colLen, one row and many, several SoCs, single and double buffering, saturating
inputs, hand-made tilings, checked mode, ``out=``, the run report's counters and host thread counts.

The emulation takes exp from ``tilesim.numerics.expf.exp_values``, the emulated Exp instruction's own values: numpy's
float32 ``np.exp`` is a SIMD routine that differs from the C library's ``expf`` by up to 2 ulp on a large share of
inputs, which would leave the bitwise comparison only approximate.
"""

from __future__ import annotations

import ml_dtypes
import numba
import numpy as np
import pytest
import tilesim.tiling as tiling
import torch
from bitwise import assert_bitwise, bits
from tilesim.kernels import reference as ref
from tilesim.kernels import swiglu_grad
from tilesim.tiling.common import align_up, ceil_div, replace

import tilesim
from tilesim.numerics.expf import exp_values
from tilesim.precision import compare

DT = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
ISZ = {"float32": 4, "float16": 2, "bfloat16": 2}
DTYPES = list(DT)
SOCS_910 = ("Ascend910B1", "Ascend910B3", "Ascend910_9391")
COLS = (1, 15, 16, 17, 4095, 4096, 4913)

# --------------------------------------------------------------------------------------------------------------
# helpers


def inputs(rng, shape, dim=-1, dtype="float32", a_scale=3.0, dy_scale=1.0):
    """dy and x in ``dtype``: x ~ N(0, a_scale) (A and B alike), dy ~ N(0, dy_scale), dy with axis ``dim`` halved."""
    d = dim % len(shape)
    dy_shape = shape[:d] + (shape[d] // 2,) + shape[d + 1:]
    x = (rng.standard_normal(shape) * a_scale).astype(DT[dtype])
    dy = (rng.standard_normal(dy_shape) * dy_scale).astype(DT[dtype])
    return dy, x


def assert_precise(out, golden, dtype, what):
    p = compare(out, golden, dtype)
    assert p.ok, f"{what}: {p}"


def emulate(dy, x, dim=-1):
    """The kernel in float32 numpy, instruction by instruction: σ = 1 / (exp(A·(−1)) + 1); dB = (σ·A)·dy;
    m = ((σ·(σ·(−1) + 1))·A)·1 + σ; dA = (m·B)·dy for fp32, (m·dy)·B for fp16/bf16; one final RNE cast."""
    f = np.float32
    a, b = np.split(x.astype(np.float32), 2, axis=dim)
    g = dy.astype(np.float32)
    s = f(1.0) / (exp_values(np.ascontiguousarray(a * f(-1.0))) + f(1.0))
    db = (s * a) * g
    m = (((s * (s * f(-1.0) + f(1.0))) * a) * f(1.0)) + s
    da = (m * b) * g if x.dtype == np.float32 else (m * g) * b
    return np.concatenate([da, db], axis=dim).astype(x.dtype)


def torch_grad(dy, x, dim=-1):
    """float64 torch autograd of y = silu(A)·B (F.glu would gate the other half)."""
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    a, b = xt.chunk(2, dim)
    y = torch.nn.functional.silu(a) * b
    y.backward(torch.from_numpy(dy.astype(np.float64)))
    return xt.grad.numpy()


def run(dy, x, dim=-1, **kw):
    """The op under capture: (output, its single RunReport)."""
    with tilesim.capture() as runs:
        out = swiglu_grad(dy, x, dim, **kw)
    assert len(runs) == 1
    return out, runs[0]


def tiles(t):
    """(rows, cols) of every tile in tile order, from the tiling alone."""
    out = []
    for r in range(t.row_tile_num):
        rows = t.base_row_len if r < t.row_len // t.base_row_len else t.row_len % t.base_row_len
        for c in range(t.col_tile_num):
            cols = t.base_col_len if c < t.col_len // t.base_col_len else t.col_len % t.base_col_len
            out.append((rows, cols))
    assert sum(r * c for r, c in out) == t.row_len * t.col_len
    return out


# --------------------------------------------------------------------------------------------------------------
# numerics


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("col", COLS)
@pytest.mark.parametrize("rows", [1, 37])
def test_against_untiled_math_torch_and_emulation(rng, dtype, col, rows):
    dy, x = inputs(rng, (rows, 2 * col), -1, dtype)
    official = tiling.swiglu_grad(dy, x, -1)
    aligned = (col * ISZ[dtype]) % 32 == 0
    assert official.is_32b_aligned == int(aligned)
    assert (official.row_len, official.col_len) == (rows, col)
    out, rep = run(dy, x)
    assert rep.tiling == official
    assert out.dtype == x.dtype and out.shape == x.shape
    assert_precise(out, ref.swiglu_grad(dy, x), dtype, "vs reference")
    assert_precise(out, torch_grad(dy, x), dtype, "vs torch")
    assert_bitwise(out, emulate(dy, x), "vs emulation")


def test_matrix_hits_both_paths_several_tiles_and_idle_cores():
    """The shapes above cover what they claim: both copy paths per dtype, multi-tile rows, one-tile runs."""
    for dtype in DTYPES:
        seen = set()
        for col in COLS:
            for rows in (1, 37):
                t = tiling.swiglu_grad(np.empty((rows, col), DT[dtype]), np.empty((rows, 2 * col), DT[dtype]), -1)
                seen.add(t.is_32b_aligned)
                if rows == 1 and col == 1:
                    assert t.block_dim == 1 and t.total_tile_num == 1
        assert seen == {0, 1}
    t = tiling.swiglu_grad(np.empty((37, 4913), np.float16), np.empty((37, 9826), np.float16), -1)
    assert t.col_tile_num > 1 and t.row_tile_num > 1 and t.total_tile_num > t.block_dim


DIM_CASES = [
    ((6, 5, 8), 0),
    ((6, 5, 8), -1),
    ((6, 4, 10), 1),
    ((6, 4, 10), -2),
    ((3, 4, 10, 7), 2),
    ((3, 4, 10, 7), -3),
    ((2, 3, 4, 34), 3),
    ((5, 2, 3, 3), 1),
    ((18,), 0),
    ((18,), -1),
    ((8194,), 0),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", DIM_CASES)
def test_split_axes_and_ranks(rng, dtype, shape, dim):
    dy, x = inputs(rng, shape, dim, dtype)
    d = dim % len(shape)
    t = tiling.swiglu_grad(dy, x, dim)
    assert (t.row_len, t.col_len) == (int(np.prod(shape[:d])), int(np.prod(shape[d:])) // 2)
    out = swiglu_grad(dy, x, dim)
    assert out.dtype == x.dtype and out.shape == x.shape
    assert_precise(out, ref.swiglu_grad(dy, x, dim), dtype, "vs reference")
    assert_precise(out, torch_grad(dy, x, dim), dtype, "vs torch")
    assert_bitwise(out, emulate(dy, x, dim), "vs emulation")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,a_scale,dy_scale", [
    ((40, 2 * 333), 12.0, 1.0),  # σ near 0 and 1, exp over a wide range
    ((16, 2 * 256), 0.05, 1.0),  # σ ≈ 1/2, m ≈ 1/2: rounding right at the centre
    ((24, 2 * 100), 3.0, 3e-5),  # fp16 results among subnormals
    ((9, 2 * 4097), 3.0, 50.0),  # large gradients
])
def test_bit_exact_with_the_instruction_order(rng, dtype, shape, a_scale, dy_scale):
    dy, x = inputs(rng, shape, -1, dtype, a_scale, dy_scale)
    out = swiglu_grad(dy, x)
    assert_bitwise(out, emulate(dy, x), "vs emulation")
    if dtype == "float16" and dy_scale < 1e-3:
        sub = np.abs(out[np.isfinite(out)].astype(np.float32))
        assert np.any((sub > 0) & (sub < np.float32(2.0 ** -14)))  # the case does reach subnormals


def test_emulation_distinguishes_the_b16_and_fp32_orders(rng):
    """The bitwise tests can fail: fp32 with the b16 order of dA ((m·dy)·B) does not match the kernel."""
    dy, x = inputs(rng, (37, 2 * 4096), -1, "float32")
    out = swiglu_grad(dy, x)
    f = np.float32
    a, b = np.split(x, 2, axis=-1)
    s = f(1.0) / (exp_values(np.ascontiguousarray(a * f(-1.0))) + f(1.0))
    m = (((s * (s * f(-1.0) + f(1.0))) * a) * f(1.0)) + s
    wrong = np.concatenate([(m * dy) * b, (s * a) * dy], axis=-1)
    assert np.any(bits(out) != bits(wrong))
    assert_bitwise(out, emulate(dy, x))


# --------------------------------------------------------------------------------------------------------------
# SoCs and buffering


@pytest.mark.parametrize("dtype,col", [("float32", 1024), ("float16", 1024), ("bfloat16", 1024), ("float16", 1000),
                                       ("float32", 777)])
def test_910_socs_agree_bitwise(rng, dtype, col):
    dy, x = inputs(rng, (200, 2 * col), -1, dtype)
    outs, dims = [], []
    for soc in SOCS_910:
        out, rep = run(dy, x, soc=soc)
        assert rep.soc == soc and rep.tiling == tiling.swiglu_grad(dy, x, -1, soc=soc)
        outs.append(out)
        dims.append(rep.block_dim)
    assert dims[0] == 48 and dims[1] == 40  # the tilings do differ
    assert_precise(outs[0], ref.swiglu_grad(dy, x), dtype, "910B1 vs reference")
    for o in outs[1:]:
        assert_bitwise(o, outs[0], "across 910 SoCs")


@pytest.mark.parametrize("dtype,col", [("float32", 1024), ("float16", 1024), ("float32", 16), ("float16", 32),
                                       ("float32", 4912)])
def test_310p(rng, dtype, col):
    dy, x = inputs(rng, (50, 2 * col), -1, dtype)
    out, rep = run(dy, x, soc="Ascend310P3")
    assert rep.soc == "Ascend310P3" and rep.block_dim <= tilesim.get_soc("Ascend310P3").core_num_aiv
    assert rep.ub_plan.capacity == 262144
    assert_precise(out, ref.swiglu_grad(dy, x), dtype, "vs reference")
    assert_bitwise(out, emulate(dy, x), "vs emulation")  # CAST_NONE narrows with RNE too
    assert_bitwise(out, swiglu_grad(dy, x, soc="Ascend910B1"), "310P vs 910B")


def test_310p_rejects_bf16_and_colLen_not_64B_aligned(rng):
    dy, x = inputs(rng, (4, 2 * 64), -1, "bfloat16")
    with pytest.raises(tilesim.AclnnError) as e:
        swiglu_grad(dy, x, soc="Ascend310P3")
    assert e.value.status == 161002
    for dtype, col in (("float16", 16), ("float32", 8), ("float16", 17)):
        dy, x = inputs(rng, (4, 2 * col), -1, dtype)
        with pytest.raises(tilesim.AclnnError) as e:
            swiglu_grad(dy, x, soc="Ascend310P3")
        assert e.value.status == 561002
        swiglu_grad(dy, x, soc="Ascend910B1")  # fine on 910B


@pytest.mark.parametrize("dtype,shape", [("float32", (48, 2 * 5000)), ("float16", (64, 2 * 4096))])
def test_double_buffering_switched_off(rng, dtype, shape):
    dy, x = inputs(rng, shape, -1, dtype)
    t = tiling.swiglu_grad(dy, x, -1)
    assert t.is_double_buffer == 0 and t.buffer_num == 1 and t.block_dim == 48
    assert all(len(t.tiles_of_core(c)) == 1 for c in range(t.block_dim))
    out, rep = run(dy, x)
    assert rep.tiling == t
    queues = rep.ub_plan.buffers[:5]
    assert [b.name for b in queues] == ["in_queue_a", "in_queue_b", "in_queue_l", "out_queue_m", "out_queue_n"]
    assert all(b.buffer_num == 1 and b.nbytes == align_up(t.tile_length * ISZ[dtype], 32) for b in queues)
    assert all(b.buffer_num == 1 for b in rep.ub_plan.buffers)
    assert rep.ub_plan.used <= 196608
    assert_precise(out, ref.swiglu_grad(dy, x), dtype, "vs reference")
    assert_bitwise(out, emulate(dy, x), "vs emulation")
    # the same problem double-buffered (smaller tiles, more of them) gives the same bits
    t2 = tiling.swiglu_grad(dy, x, -1, buffer_num=2)
    out2, rep2 = run(dy, x, tiling=t2)
    assert t2.is_double_buffer == 1 and all(b.buffer_num == 2 for b in rep2.ub_plan.buffers[:5])
    assert_bitwise(out2, out, "double vs single buffered")


def test_double_buffering_on_by_default(rng):
    dy, x = inputs(rng, (37, 2 * 4096), -1, "float32")
    out, rep = run(dy, x)
    assert rep.tiling.is_double_buffer == 1
    assert all(b.buffer_num == 2 for b in rep.ub_plan.buffers[:5])


# --------------------------------------------------------------------------------------------------------------
# saturation and non-finite inputs


BIG = {"float32": float(np.finfo(np.float32).max), "float16": 65504.0,
       "bfloat16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)}


@pytest.mark.parametrize("dtype", DTYPES)
def test_saturated_exp(rng, dtype):
    vals = [100.0, 1e4, 88.5, 89.0, 104.0, BIG[dtype], 20.0]
    if dtype != "float32":
        vals = [v for v in vals if v <= BIG[dtype]]
    avals = np.array([s * v for v in vals for s in (1.0, -1.0)] + [0.0, 1.0, -1.0], np.float64)
    rows, col = 9, len(avals) * 3
    a = np.resize(avals, (rows, col))
    b = rng.standard_normal((rows, col))
    x = np.concatenate([a, b], axis=-1).astype(DT[dtype])
    dy = rng.uniform(-1, 1, (rows, col)).astype(DT[dtype])
    out = swiglu_grad(dy, x)
    golden = ref.swiglu_grad(dy, x)
    assert not np.isnan(golden).any()
    assert not np.isnan(out.astype(np.float32)).any(), "NaN where the math is finite"
    assert_precise(out, golden, dtype, "vs reference")
    assert_bitwise(out, emulate(dy, x), "vs emulation")
    da, db = (o.astype(np.float32) for o in np.split(out, 2, axis=-1))
    a32, b32, g32 = x[:, :col].astype(np.float32), x[:, col:].astype(np.float32), dy.astype(np.float32)
    neg, pos = a32 <= -100, a32 >= 100
    assert neg.any() and pos.any()
    assert np.all(da[neg] == 0) and np.all(db[neg] == 0)  # σ = 0
    # σ = 1: dA = dy·B, dB = dy·A, each rounded once
    np.testing.assert_array_equal(da[pos], (g32 * b32).astype(DT[dtype]).astype(np.float32)[pos])
    np.testing.assert_array_equal(db[pos], (g32 * a32).astype(DT[dtype]).astype(np.float32)[pos])


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_inputs_stay_local(rng, dtype):
    rows, col = 21, 40
    dy, x = inputs(rng, (rows, 2 * col), -1, dtype)
    clean = swiglu_grad(dy, x)
    bad = x.copy()
    hits_a = [(0, 0, np.inf), (3, 7, -np.inf), (5, 39, np.nan), (20, 11, np.inf)]
    hits_b = [(1, 2, np.inf), (2, 30, -np.inf), (7, 0, np.nan)]
    touched = np.zeros(x.shape, bool)
    for r, c, v in hits_a:
        bad[r, c] = v
        touched[r, c] = touched[r, col + c] = True  # dA and dB of that column
    for r, c, v in hits_b:
        bad[r, col + c] = v
        touched[r, c] = True  # dA only
    out = swiglu_grad(dy, bad)
    assert_bitwise(out[~touched], clean[~touched], "entries away from the non-finite inputs")
    with np.errstate(invalid="ignore", over="ignore"):
        golden = ref.swiglu_grad(dy, bad)
        emulated = emulate(dy, bad)
    o64 = out.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(o64), np.isnan(golden))
    fin = ~np.isnan(golden)
    np.testing.assert_array_equal(o64[fin & touched], golden.astype(DT[dtype]).astype(np.float64)[fin & touched])
    assert np.isnan(o64[touched]).any() and np.isinf(o64[touched]).any()
    assert_bitwise(out, emulated, "vs emulation")


# --------------------------------------------------------------------------------------------------------------
# hand-made tilings, checked mode, out=


USER_CASES = [
    ("float32", (37, 2 * 4096), [dict(core_num=1), dict(core_num=3), dict(core_num=7), dict(buffer_num=1),
                                 dict(base_row_len=3, base_col_len=1000), dict(base_row_len=1, base_col_len=8),
                                 dict(base_row_len=4, base_col_len=1024, core_num=2)]),
    ("float16", (37, 2 * 4913), [dict(core_num=1), dict(core_num=7), dict(buffer_num=1),
                                 dict(base_row_len=5, base_col_len=777),
                                 dict(base_row_len=1, base_col_len=4913, buffer_num=1),
                                 dict(base_row_len=3, base_col_len=16, core_num=5)]),
    ("bfloat16", (30, 2 * 17), [dict(core_num=1), dict(core_num=3), dict(base_row_len=7, base_col_len=1),
                                dict(base_row_len=4, base_col_len=16), dict(base_row_len=30, base_col_len=17)]),
]


@pytest.mark.parametrize("dtype,shape,overrides", USER_CASES)
def test_user_tilings_give_the_official_bits(rng, dtype, shape, overrides):
    dy, x = inputs(rng, shape, -1, dtype)
    official, _ = run(dy, x)
    assert_bitwise(official, emulate(dy, x), "official vs emulation")
    for kw in overrides:
        t = tiling.swiglu_grad(dy, x, -1, **kw)
        out, rep = run(dy, x, tiling=t)
        assert rep.tiling == t and rep.block_dim == t.block_dim
        if "core_num" in kw:
            assert t.block_dim == min(kw["core_num"], t.total_tile_num)
        if "base_col_len" in kw:
            assert (t.base_row_len, t.base_col_len) == (kw["base_row_len"], kw["base_col_len"])
        assert rep.ub_plan.buffers[0].buffer_num == t.buffer_num
        assert_bitwise(out, official, f"tiling {kw}")
    # replace(): fields edited by hand, still what the free choices give
    t0 = tiling.swiglu_grad(dy, x, -1)
    for changes in (dict(block_dim=1), dict(block_dim=min(5, t0.total_tile_num)),
                    dict(is_double_buffer=1 - t0.is_double_buffer),
                    dict(base_row_len=1, block_dim=min(48, shape[0] * t0.col_tile_num))):
        out, rep = run(dy, x, tiling=replace(t0, **changes))
        assert rep.block_dim == changes.get("block_dim", t0.block_dim)
        assert_bitwise(out, official, f"replace {changes}")
    # more cores than tiles: no core_num gives it (the tiling takes min(core_num, total_tile_num))
    with pytest.raises(tilesim.AclnnError) as e:
        run(dy, x, tiling=replace(t0, block_dim=t0.total_tile_num + 1))
    assert e.value.status == 561002 and "tiling.block_dim" in str(e.value)


def test_user_tiling_that_overflows_ub_writes_nothing(rng):
    dy, x = inputs(rng, (16, 2 * 4096), -1, "float32")
    t = tiling.swiglu_grad(dy, x, -1, base_row_len=8, base_col_len=4096)
    sentinel = np.full(x.shape, 7.0, np.float32)
    out = sentinel.copy()
    with tilesim.capture() as runs, pytest.raises(tilesim.UbOverflowError) as e:
        swiglu_grad(dy, x, tiling=t, out=out)
    assert isinstance(e.value, tilesim.AclnnError) and e.value.status == 561002
    assert "196608" in e.value.message
    assert runs == []
    assert_bitwise(out, sentinel, "out after a failed call")
    # the same with checked mode on, and for b16 (five fp32 temporaries)
    with pytest.raises(tilesim.AclnnError) as e:
        swiglu_grad(dy, x, tiling=t, out=out, checks=True)
    assert e.value.status == 561002
    assert_bitwise(out, sentinel, "out after a failed checked call")
    dy16, x16 = inputs(rng, (4, 2 * 4096), -1, "bfloat16")
    t16 = tiling.swiglu_grad(dy16, x16, -1, base_row_len=2, base_col_len=4096)
    with pytest.raises(tilesim.AclnnError) as e:
        swiglu_grad(dy16, x16, tiling=t16)
    assert e.value.status == 561002


def test_user_tilings_that_break_the_rules(rng):
    dy, x = inputs(rng, (8, 2 * 4096), -1, "float32")
    t = tiling.swiglu_grad(dy, x, -1)
    for changes in (dict(base_col_len=1001), dict(base_col_len=0), dict(base_col_len=4104), dict(base_row_len=0),
                    dict(block_dim=0), dict(block_dim=49), dict(col_len=4095), dict(row_len=9),
                    dict(is_32b_aligned=0), dict(tiling_key=1)):
        out = np.zeros_like(x)
        with pytest.raises(tilesim.AclnnError) as e:
            swiglu_grad(dy, x, tiling=replace(t, **changes), out=out)
        assert e.value.status == 561002, changes
        assert not out.any()


CHECKED_CASES = [
    ("float32", (37, 2 * 4096), -1, {}),
    ("float32", (37, 2 * 4913), -1, {}),
    ("float16", (37, 2 * 17), -1, {}),
    ("bfloat16", (1, 2 * 4095), -1, {}),
    ("bfloat16", (3, 4, 10, 7), 2, {}),
    ("float16", (6, 5, 8), 0, {}),
    ("float32", (48, 2 * 5000), -1, {}),
    ("float16", (37, 2 * 4913), -1, dict(base_row_len=5, base_col_len=777)),
    ("float32", (37, 2 * 4096), -1, dict(base_row_len=3, base_col_len=1000, core_num=7)),
    ("bfloat16", (30, 2 * 17), -1, dict(base_row_len=7, base_col_len=1)),
]


@pytest.mark.parametrize("dtype,shape,dim,overrides", CHECKED_CASES)
def test_checked_mode_is_clean_and_bitwise_the_same(rng, dtype, shape, dim, overrides):
    dy, x = inputs(rng, shape, dim, dtype)
    t = tiling.swiglu_grad(dy, x, dim, **overrides) if overrides else None
    fast = swiglu_grad(dy, x, dim, tiling=t)
    checked, rep = run(dy, x, dim, tiling=t, checks=True)
    assert rep.checks
    assert_bitwise(checked, fast, "checked vs fast")


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_is_written_and_inputs_untouched(rng, dtype):
    dy, x = inputs(rng, (5, 6, 2 * 33), -1, dtype)
    dy0, x0 = dy.copy(), x.copy()
    expect = swiglu_grad(dy, x)
    for checks in (False, True):
        out = np.full(x.shape, 3.0, DT[dtype])
        res = swiglu_grad(dy, x, out=out, checks=checks)
        assert res is out
        assert_bitwise(out, expect, "out=")
    assert_bitwise(dy, dy0, "y_grad")
    assert_bitwise(x, x0, "x")
    with pytest.raises(tilesim.AclnnError) as e:
        swiglu_grad(dy, x, out=np.zeros(x.shape, np.float64 if dtype == "float32" else np.float32))
    assert e.value.status == 161002
    with pytest.raises(tilesim.AclnnError) as e:
        swiglu_grad(dy, x, out=np.zeros(x.shape[:-1] + (33,), DT[dtype]))
    assert e.value.status == 161002


def test_non_contiguous_inputs(rng):
    dy, x = inputs(rng, (40, 2 * 24), -1, "float16")
    xf, dyf = np.asfortranarray(x), np.asfortranarray(dy)
    xs = np.repeat(x, 2, axis=1)[:, ::2]  # a strided view equal to x
    assert not xf.flags.c_contiguous and not xs.flags.c_contiguous
    expect = swiglu_grad(dy, x)
    assert_bitwise(swiglu_grad(dyf, xf), expect, "Fortran-ordered inputs")
    assert_bitwise(swiglu_grad(dy, xs), expect, "strided x")


# --------------------------------------------------------------------------------------------------------------
# the run report


REPORT_CASES = [
    ("float32", (37, 2 * 4096), {}),
    ("float32", (37, 2 * 4913), {}),
    ("float16", (37, 2 * 4913), {}),
    ("bfloat16", (37, 2 * 4095), {}),
    ("float16", (1, 2 * 17), {}),
    ("bfloat16", (37, 2 * 15), {}),
    ("float32", (48, 2 * 5000), {}),
    ("float16", (37, 2 * 4913), dict(base_row_len=5, base_col_len=777, core_num=7)),
    ("float32", (37, 2 * 4913), dict(base_row_len=4, base_col_len=1024)),  # unaligned colLen, aligned tiles
]


@pytest.mark.parametrize("dtype,shape,overrides", REPORT_CASES)
def test_run_report_counts(rng, dtype, shape, overrides):
    dy, x = inputs(rng, shape, -1, dtype)
    t = tiling.swiglu_grad(dy, x, -1, **overrides)
    out, rep = run(dy, x, tiling=t if overrides else None)
    assert rep.op == "swiglu_grad" and rep.soc == "Ascend910B1" and rep.tiling == t
    assert rep.block_dim == t.block_dim and rep.counters.shape[0] == t.block_dim
    assert rep.workspace_size == t.workspace_size == 16 * 1024 * 1024
    assert rep.total("mte2_bytes") == x.nbytes + dy.nbytes
    assert rep.total("mte3_bytes") == out.nbytes
    isz = ISZ[dtype]
    per_block = 32 // isz
    all_tiles = tiles(t)

    def pad(tile_ids):
        return 3 * sum(all_tiles[i][0] * (align_up(all_tiles[i][1] * isz, 32) - all_tiles[i][1] * isz)
                       for i in tile_ids)

    def reps(tile_ids):
        cal = [all_tiles[i][0] * (all_tiles[i][1] if t.is_32b_aligned else align_up(all_tiles[i][1], per_block))
               for i in tile_ids]
        return sum(ceil_div(n * 4, 256) for n in cal)

    every = range(len(all_tiles))
    if t.is_32b_aligned:
        assert rep.total("mte2_pad_bytes") == 0
    else:  # some tile's width is unaligned, else colLen would be aligned
        assert rep.total("mte2_pad_bytes") == pad(every) > 0
    assert rep.total("mte2_transfers") == 3 * len(all_tiles)
    assert rep.total("mte3_transfers") == 2 * len(all_tiles)
    r = reps(every)
    b16 = dtype != "float32"
    expected = dict(vec_div=r, vec_unary=r, vec_dup=r, vec_binary=7 * r, vec_scalar=5 * r,
                    vec_cast=5 * r if b16 else 0, atomic_bytes=0)
    assert {k: rep.total(k) for k in expected} == expected
    for c in range(t.block_dim):  # tile c, c + blockDim, ... on core c
        mine = t.tiles_of_core(c)
        assert rep.counter("vec_div")[c] == reps(mine)
        assert rep.counter("mte2_pad_bytes")[c] == (pad(mine) if not t.is_32b_aligned else 0)
        assert rep.counter("mte3_bytes")[c] == 2 * isz * sum(all_tiles[i][0] * all_tiles[i][1] for i in mine)
    assert "swiglu_grad" in str(rep)


# --------------------------------------------------------------------------------------------------------------
# host threads


def test_bit_identical_across_host_thread_counts(rng):
    cases = [inputs(rng, (37, 2 * 4913), -1, "float32"), inputs(rng, (64, 2 * 4096), -1, "float16"),
             inputs(rng, (37, 2 * 4095), -1, "bfloat16")]
    before = numba.get_num_threads()
    results = {}
    try:
        for n in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(n)
            results[n] = [swiglu_grad(dy, x) for dy, x in cases]
    finally:
        numba.set_num_threads(before)
    assert numba.get_num_threads() == before
    first = results[1]
    for outs in results.values():
        for a, b in zip(outs, first, strict=True):
            assert_bitwise(a, b, "thread counts")
