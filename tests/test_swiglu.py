"""aclnnSwiGlu on the emulated AI Core, a kernel on tilesim's programming model: the tiled kernel against untiled
float64 math, torch's silu(A)·B and a float32 numpy statement of the ops-nn kernels' instruction order (bit for
bit), over every dtype, split axis, aligned and unaligned colLen, one row and many, several SoCs, single and
double buffering, saturating and non-finite inputs, hand-made tilings; the tiling against figures worked out by
hand from ``swi_glu_tiling.cpp``; the syncs and instructions each tile issues; checked mode in both auto-sync
settings; the explorer's candidates.

The statement of the kernels' order takes exp from ``tilesim.numerics.expf.exp_values``, the emulated Exp instruction's
own values (numpy's float32 exp differs from the C library's expf by up to 2 ulp).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from bitwise import assert_bitwise, bits
from tilesim.kernels import reference as ref
from tilesim.kernels import swiglu
from tilesim.kernels.op_specs import OPS
from tilesim.kernels.swiglu import run as run_kernel
from tilesim.tiling.common import align_up, replace
from tilesim.tiling.swiglu import max_tile_len, ub_plan
from tilesim.tiling.swiglu import swiglu as make_tiling

import tilesim
from tilesim import machine as asc
from tilesim.numerics.expf import exp_values
from tilesim.precision import Expected, compare, judge

DT = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
ISZ = {"float32": 4, "float16": 2, "bfloat16": 2}
DTYPES = list(DT)
SOC = tilesim.get_soc("Ascend910B1")

# --------------------------------------------------------------------------------------------------------------
# helpers


def make_x(rng, shape, dtype="float32", scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(DT[dtype])


def emulate(x, dim=-1):
    """The kernels in float32 numpy, instruction by instruction: e = exp(A·(−1)) + 1; fp32 (SwigluVector):
    y = ((1 / e)·A)·B; fp16/bf16 (SwigluVectorBF16): y = round((A / e)·B), round to nearest even."""
    f = np.float32
    a, b = np.split(x.astype(f), 2, axis=dim)
    with np.errstate(over="ignore", invalid="ignore"):
        e = exp_values(np.ascontiguousarray(a * f(-1.0))) + f(1.0)
        if x.dtype == np.float32:
            return ((f(1.0) / e) * a) * b
        return ((a / e) * b).astype(x.dtype)


def torch_swiglu(x, dim=-1):
    """float64 torch: silu of the first half times the second (torch.chunk, as ops-nn's golden.py does)."""
    a, b = torch.from_numpy(x.astype(np.float64)).chunk(2, dim)
    return (torch.nn.functional.silu(a) * b).numpy()


def assert_precise(out, golden, what):
    p = compare(out, golden)
    assert p.ok, f"{what}: {p}"


def run(x, dim=-1, **kw):
    """The op under capture: (output, its single RunReport)."""
    with tilesim.capture() as runs:
        out = swiglu(x, dim, **kw)
    assert len(runs) == 1
    return out, runs[0]


def check_all(x, dim=-1, **kw):
    out, rep = run(x, dim, **kw)
    assert out.dtype == x.dtype
    assert_precise(out, ref.swiglu(x, dim), "vs reference")
    assert_precise(out, torch_swiglu(x, dim), "vs torch")
    assert_bitwise(out, emulate(x, dim), "vs the kernels' instruction order")
    return out, rep


# --------------------------------------------------------------------------------------------------------------
# numerics


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("col", [1, 15, 16, 17, 1000, 4913])
@pytest.mark.parametrize("rows", [1, 37])
def test_against_untiled_math_torch_and_instruction_order(rng, dtype, col, rows):
    x = make_x(rng, (rows, 2 * col), dtype)
    out, rep = check_all(x)
    assert out.shape == (rows, col)
    t = make_tiling(x)
    assert rep.tiling == t and rep.op == "swiglu" and rep.block_dim == t.block_dim
    assert t.is_32b_aligned == int((col * ISZ[dtype]) % 32 == 0)
    assert (t.row_len, t.col_len) == (rows, col)


DIM_CASES = [((6, 5, 8), 0), ((6, 4, 10), 1), ((6, 4, 10), -2), ((3, 4, 10, 7), 2), ((2, 3, 4, 34), 3),
             ((5, 2, 3, 3), 1), ((18,), 0), ((8194,), -1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", DIM_CASES)
def test_split_axes_and_ranks(rng, dtype, shape, dim):
    x = make_x(rng, shape, dtype)
    d = dim % len(shape)
    out, rep = check_all(x, dim)
    assert out.shape == shape[:d] + (shape[d] // 2,) + shape[d + 1:]
    assert (rep.tiling.row_len, rep.tiling.col_len) == (int(np.prod(shape[:d])), int(np.prod(shape[d:])) // 2)


def test_the_instruction_order_statement_can_fail(rng):
    """The bitwise comparisons can fail: fp32 in the b16 kernel's order ((A / e)·B) differs from the kernel."""
    x = make_x(rng, (37, 2 * 4096))
    out = swiglu(x)
    f = np.float32
    a, b = np.split(x, 2, axis=-1)
    e = exp_values(np.ascontiguousarray(a * f(-1.0))) + f(1.0)
    assert np.any(bits(out) != bits((a / e) * b))
    assert_bitwise(out, emulate(x))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the float64 golden and the checks overflow where y does
@pytest.mark.parametrize("dtype", DTYPES)
def test_saturated_exp_and_non_finite_inputs(rng, dtype):
    big = {"float32": 3.0e38, "float16": 65504.0, "bfloat16": 3.0e38}[dtype]
    avals = np.array([s * v for v in (100.0, 88.5, 89.0, 104.0, 20.0, big) for s in (1.0, -1.0)]
                     + [0.0, -0.0, 1.0, np.inf, -np.inf, np.nan])
    col = avals.size * 2
    a = np.resize(avals, (9, col))
    b = rng.standard_normal((9, col))
    b[0, :3] = [np.inf, -np.inf, np.nan]
    x = np.concatenate([a, b], axis=-1).astype(DT[dtype])
    out = swiglu(x)
    assert_bitwise(out, emulate(x), "vs the kernels' instruction order")
    a32, b32, y = x[:, :col].astype(np.float32), x[:, col:].astype(np.float32), out.astype(np.float32)
    fin = np.isfinite(a32) & np.isfinite(b32)
    golden = ref.swiglu(x)
    assert_precise(np.where(fin, y, 0).astype(x.dtype), np.where(fin, golden, 0), "finite entries vs reference")
    neg, pos = fin & (a32 <= -100), fin & (a32 >= 100) & (np.abs(a32 * b32) < 1e30)
    assert neg.any() and pos.any()
    assert np.all(y[neg] == 0)  # σ = 0
    np.testing.assert_array_equal(y[pos], (a32 * b32).astype(x.dtype).astype(np.float32)[pos])  # σ = 1
    assert np.isnan(y[np.isnan(a32) | np.isnan(b32)]).all()


# --------------------------------------------------------------------------------------------------------------
# the tiling


def test_largest_tile_is_the_official_formula():
    """CalcUbMaxTileLen: alignDown(UB / (bufferNum·3·sizeof(T) + nTbuf·4), 32 B), nTbuf 1 (fp32) or 2 (b16)."""
    per_elem = {("float32", 2): 28, ("float32", 1): 16, ("float16", 2): 20, ("float16", 1): 14,
                ("bfloat16", 2): 20, ("bfloat16", 1): 14}
    for ub in (196608, 262144):
        for (d, nb), n in per_elem.items():
            m = 32 // ISZ[d]
            assert max_tile_len(ub, d, nb) == ub // n // m * m
    assert max_tile_len(196608, "float32", 2) == 7016 and max_tile_len(196608, "float16", 2) == 9824


# Worked by hand from CalcOptBaseShape and CalcTiling on Ascend910B1 (48 cores, 196608 B):
# - fp32 colLen 8192, 48 rows: double-buffered the best is 4 x 1664 (60 tiles, 2 a core), so the single-buffered
#   search runs (max tile 12288) and 2 x 6144 gives 48 tiles on 48 cores: one tile a core, single buffer.
# - fp16 colLen 4096, 64 rows: 2 x 3840 (64 tiles on 48 cores); single-buffered no shape gives 48 tiles, so it
#   stays double-buffered.
# - fp16 colLen 40001: unaligned, and rows of x are (80002 − baseCol)·2 B apart, more than DataCopy's 65535:
#   one row a tile, baseCol alignDown(min(40001, 9824, 65535 / 2), 256) = 9728, five tiles a row.
HAND = [
    ("float32", (48, 2 * 8192), dict(is_double_buffer=0, base_row_len=2, base_col_len=6144, block_dim=48,
                                     is_32b_aligned=1, tiling_key=0)),
    ("float16", (64, 2 * 4096), dict(is_double_buffer=1, base_row_len=2, base_col_len=3840, block_dim=48,
                                     is_32b_aligned=1, tiling_key=1)),
    ("bfloat16", (4, 2 * 40001), dict(is_double_buffer=1, base_row_len=1, base_col_len=9728, block_dim=20,
                                      is_32b_aligned=0, tiling_key=27)),
]


@pytest.mark.parametrize("dtype,shape,want", HAND, ids=[h[0] for h in HAND])
def test_official_tiling_matches_hand_worked_figures(rng, dtype, shape, want):
    t = make_tiling(np.empty(shape, DT[dtype]))
    assert {k: getattr(t, k) for k in want} == want
    assert t.workspace_size == 16 * 1024 * 1024 and t.round_mode == asc.CAST_RINT
    if dtype == "float32":
        check_all(make_x(rng, shape, dtype))


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend910B3", "Ascend910_9391", "Ascend310P3"])
@pytest.mark.parametrize("dtype,shape,dim", [("float32", (300, 2 * 1024), -1), ("float16", (7, 2 * 4096, 3), 1),
                                             ("float16", (3000, 64), -1), ("float32", (2, 2 * 40000), -1),
                                             ("float16", (5, 2 * 70000), -1)])
def test_tiles_cover_the_problem_and_the_plan_fits(soc, dtype, shape, dim):
    """Every element of y in exactly one tile; the tiles within DataCopy's limits; the plan within the UB."""
    spec = tilesim.get_soc(soc)
    x = np.empty(shape, DT[dtype])
    m = 32 // ISZ[dtype]
    d = dim % len(shape)
    col = int(np.prod(shape[d:])) // 2
    if spec.arch == 200 and col * ISZ[dtype] % 64:  # 310P: colLen a multiple of 64 B, else CalcTiling fails
        with pytest.raises(tilesim.AclnnError) as e:
            make_tiling(x, dim, soc=spec)
        assert e.value.status == 561002 and "64 B" in e.value.message
        return
    t = make_tiling(x, dim, soc=spec)
    assert 1 <= t.block_dim <= spec.core_num_aiv and t.block_dim == min(t.total_tile_num, spec.core_num_aiv)
    covered = np.zeros((t.row_len, t.col_len), np.int8)
    for tile in range(t.total_tile_num):
        r, c = divmod(tile, t.col_tile_num)
        covered[r * t.base_row_len:(r + 1) * t.base_row_len, c * t.base_col_len:(c + 1) * t.base_col_len] += 1
    assert (covered == 1).all()
    assert sorted(k for c in range(t.block_dim) for k in t.tiles_of_core(c)) == list(range(t.total_tile_num))
    assert t.base_row_len <= 4095
    gap = 2 * t.col_len - t.base_col_len
    assert t.base_row_len == 1 or (gap // m if t.is_32b_aligned else gap * ISZ[dtype]) <= 65535
    assert ub_plan(t, spec).check().used <= spec.ub_size
    assert t.round_mode == (asc.CAST_RINT if spec.arch == 220 else asc.CAST_NONE)


@pytest.mark.parametrize("dtype,shape", [("float32", (48, 2 * 8192)), ("float16", (37, 2 * 100)),
                                         ("bfloat16", (64, 2 * 4096))])
def test_the_kernel_places_the_host_plan(rng, dtype, shape):
    """What the kernel's InitBuffer calls placed is the host's ub_plan, buffer for buffer, offsets included."""
    x = make_x(rng, shape, dtype)
    _, rep = run(x)
    host = ub_plan(rep.tiling, SOC)
    assert [(b.name, b.nbytes, b.buffer_num, b.offset) for b in rep.ub_plan.buffers] == \
        [(b.name, b.nbytes, b.buffer_num, b.offset) for b in host.buffers]
    names = ["in_queue_a", "in_queue_b", "out_queue_c"]
    names += ["tmp_queue"] if dtype == "float32" else ["input_temp_buffer", "output_temp_buffer"]
    assert host.names() == names
    n = rep.tiling.tile_length
    assert [b.nbytes for b in host.buffers] == [align_up(n * ISZ[dtype], 32)] * 3 + [n * 4] * (len(names) - 3)


# --------------------------------------------------------------------------------------------------------------
# what each tile issues


@pytest.mark.parametrize("dtype,shape", [("float32", (50, 2 * 4096)), ("float32", (37, 2 * 100)),
                                         ("bfloat16", (50, 2 * 4096)), ("float16", (4, 2 * 40001))])
def test_each_tile_issues_the_kernels_syncs_and_instructions(rng, dtype, shape):
    """Per tile, as ops-nn writes it: fp32 9 PipeBarrier<PIPE_V>, b16 8; 6 SetFlags (EnQue of A, B and y, their
    FreeTensors) and 3 DeQue waits; fp32: Muls, Adds (scalar), Exp, Div, 2 Mul, the ones' Duplicate once per core;
    b16: 3 Casts, Muls, Adds, Exp, Div, 1 Mul; the bytes of x in and of y out, nothing more."""
    x = make_x(rng, shape, dtype)
    _, rep = run(x)
    t = rep.tiling
    tiles = np.array([len(t.tiles_of_core(c)) for c in range(t.block_dim)])
    np.testing.assert_array_equal(rep.counter("pipe_barriers"), tiles * (9 if dtype == "float32" else 8))
    np.testing.assert_array_equal(rep.counter("set_flags"), tiles * 6)
    assert rep.total("wait_flags") >= 3 * t.total_tile_num
    unary = rep.counter("vec_unary")  # Exp: one per tile, its repeats
    assert (unary > 0).all()
    np.testing.assert_array_equal(rep.counter("vec_div"), unary)
    np.testing.assert_array_equal(rep.counter("vec_scalar"), 2 * unary)
    np.testing.assert_array_equal(rep.counter("vec_binary"), (2 if dtype == "float32" else 1) * unary)
    if dtype == "float32":
        assert (rep.counter("vec_dup") == t.tile_length * 4 // 256 + (t.tile_length * 4 % 256 > 0)).all()
        assert rep.total("vec_cast") == 0
    else:
        np.testing.assert_array_equal(rep.counter("vec_cast"), 3 * unary)
        assert rep.total("vec_dup") == 0
    assert rep.total("mte2_bytes") == x.nbytes and rep.total("mte3_bytes") == x.nbytes // 2
    assert rep.total("mte2_transfers") == 2 * t.total_tile_num and rep.total("mte3_transfers") == t.total_tile_num


# --------------------------------------------------------------------------------------------------------------
# SoCs, buffering, hand-made tilings


@pytest.mark.parametrize("dtype,col", [("float32", 1024), ("bfloat16", 1000), ("float16", 777)])
def test_910_socs_agree_bitwise(rng, dtype, col):
    x = make_x(rng, (600, 2 * col), dtype)
    outs, dims = [], []
    for soc in ("Ascend910B1", "Ascend910B3", "Ascend910_9391"):
        out, rep = run(x, soc=soc)
        assert rep.soc == soc and rep.tiling == make_tiling(x, soc=soc)
        outs.append(out)
        dims.append(rep.block_dim)
    assert dims == [48, 40, 48]
    assert_bitwise(outs[0], emulate(x))
    for o in outs[1:]:
        assert_bitwise(o, outs[0], "across 910 SoCs")


@pytest.mark.parametrize("dtype,col", [("float32", 1024), ("float16", 1024), ("float32", 16), ("float16", 32)])
def test_310p(rng, dtype, col):
    """fp32 and fp16 with colLen a multiple of 64 B, the b16 result rounded with CAST_NONE (nearest even too)."""
    x = make_x(rng, (50, 2 * col), dtype)
    out, rep = run(x, soc="Ascend310P3")
    assert rep.soc == "Ascend310P3" and rep.ub_plan.capacity == 262144
    assert rep.tiling.round_mode == asc.CAST_NONE
    assert_precise(out, ref.swiglu(x), "vs reference")
    assert_bitwise(out, emulate(x))
    assert_bitwise(out, swiglu(x, soc="Ascend910B1"), "310P vs 910B")


USER_CASES = [
    ("float32", (37, 2 * 4096), [dict(core_num=1), dict(core_num=7), dict(buffer_num=1),
                                 dict(base_row_len=3, base_col_len=1000), dict(base_row_len=1, base_col_len=8),
                                 dict(base_row_len=4, base_col_len=1024, core_num=2)]),
    ("float16", (37, 2 * 4913), [dict(core_num=5), dict(buffer_num=1), dict(base_row_len=5, base_col_len=777),
                                 dict(base_row_len=1, base_col_len=4913, buffer_num=1),
                                 dict(base_row_len=3, base_col_len=16, core_num=5)]),
    ("bfloat16", (9, 2 * 300), [dict(buffer_num=1), dict(base_row_len=2, base_col_len=48), dict(base_col_len=100)]),
]


@pytest.mark.parametrize("dtype,shape,overrides", USER_CASES, ids=[c[0] for c in USER_CASES])
def test_hand_made_tilings_give_the_same_bits(rng, dtype, shape, overrides):
    x = make_x(rng, shape, dtype)
    want = swiglu(x)
    assert_bitwise(want, emulate(x))
    for kw in overrides:
        t = make_tiling(x, **kw)
        assert t != make_tiling(x), kw
        out, rep = run(x, tiling=t)
        assert rep.tiling == t and rep.block_dim == t.block_dim
        assert_bitwise(out, want, f"tiling {kw}")


def test_out_is_written_and_returned(rng):
    x = make_x(rng, (10, 2 * 40), "bfloat16")
    out = np.full((10, 40), 7, x.dtype)
    res = swiglu(x, out=out)
    assert res is out
    assert_bitwise(out, emulate(x))


def test_non_contiguous_x_is_read_as_its_values(rng):
    base = make_x(rng, (12, 2 * 64))
    x = base[::2]
    assert not x.flags.c_contiguous
    assert_bitwise(swiglu(x), emulate(np.ascontiguousarray(x)))
    xt = make_x(rng, (2 * 24, 10)).T  # the split axis is x.T's last: strided
    assert_bitwise(swiglu(xt), emulate(np.ascontiguousarray(xt)))


def test_empty_x_gives_an_empty_y_without_a_launch():
    for shape, dim in (((0, 64), -1), ((4, 0), -1), ((4, 0, 8), 0)):
        x = np.empty(shape, np.float16)
        with tilesim.capture() as runs:
            y = swiglu(x, dim)
        assert runs == [] and y.dtype == x.dtype
        d = dim % len(shape)
        assert y.shape == shape[:d] + (shape[d] // 2,) + shape[d + 1:]


# --------------------------------------------------------------------------------------------------------------
# checked mode: BiSheng's auto-sync on and off


@pytest.mark.parametrize("dtype,shape", [("float32", (50, 2 * 4096)), ("float32", (37, 2 * 100)),
                                         ("float16", (50, 2 * 1000)), ("bfloat16", (4, 2 * 40001)),
                                         ("bfloat16", (96, 2 * 64))])
def test_checked_clean_with_and_without_auto_sync(rng, dtype, shape):
    """The kernel writes every V-V barrier itself (ops-nn's PipeBarrier<PIPE_V>s) and has no scalar access, so it
    is clean with the compiler's auto-sync off as well as on; checked results are the fast bits."""
    x = make_x(rng, shape, dtype)
    fast = swiglu(x)
    t = make_tiling(x)
    for auto_sync in (True, False):
        y = np.full(fast.shape, 7, x.dtype)
        rep = run_kernel(t, SOC, x, y, None, True, auto_sync=auto_sync)
        assert rep.checks
        assert_bitwise(y, fast, f"checked, auto_sync={auto_sync}")
    assert_bitwise(swiglu(x, checks=True), fast)
    t1 = make_tiling(x, buffer_num=1, core_num=3)  # several tiles a core through one buffer: AllocTensor waits
    y = np.empty_like(fast)
    run_kernel(t1, SOC, x, y, None, True, auto_sync=False)
    assert_bitwise(y, fast, "single-buffered, 3 cores, auto_sync off")


# --------------------------------------------------------------------------------------------------------------
# the explorer's view


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_every_candidate_passes_within_its_rounding_bound(dtype):
    """kernels.op_specs' SwiGlu spec at a small shape with tails (colLen 100: DataCopyPad rows): the official tiling
    first and once, params uniform, several core counts and tiles, every candidate within the standard and the
    op's rounding bound."""
    spec = OPS["swiglu"]
    inputs = spec.make_inputs((26, 200), dtype, 0)
    cands = spec.candidates(inputs, SOC)
    assert cands[0].official and sum(c.official for c in cands) == 1
    assert len({c.tiling for c in cands}) == len(cands)
    assert len({c.params["block_dim"] for c in cands}) >= 2 and len({c.params["tile"] for c in cands}) >= 2
    assert all(set(c.params) == {"block_dim", "buffer_num", "tile"} for c in cands)
    (golden,), (bound,) = spec.reference(inputs), spec.bounds(inputs)
    for c in cands:
        (out,) = spec.run(inputs, c.tiling, SOC)
        j = judge(out, Expected.of(golden, np.dtype(out.dtype).name, bound))
        assert j.verdict == "pass" and j.excess < 1, f"{c.params}: {j}"
    big = spec.candidates(spec.make_inputs(spec.default_shape, dtype, 0), SOC)
    assert 5 <= len(big) <= 90


def test_a_tiling_from_another_problem_is_refused(rng):
    x = make_x(rng, (8, 2 * 64))
    t = replace(make_tiling(x), row_len=9)
    with pytest.raises(tilesim.AclnnError) as e:
        swiglu(x, tiling=t)
    assert e.value.status == 561002 and "tiling.row_len" in e.value.message
