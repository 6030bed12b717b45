"""A layer-norm backward built on the LayerNormGrad and LayerNormGradBeta APIs, multi-core, on tilesim's
programming model (the design and its choices: ``tiling/layer_norm_grad.py``). There is no Huawei op of this
design: the kernel is tilesim's, the APIs in it are asc-devkit's (:mod:`tilesim.machine.normalization`).

Init: a TPipe with the VECIN queues of dy and x (a tile of ``ub_rows`` rows ``h_align`` wide, fp32-sized: half
lands in the upper half and is widened in place), the VECOUT queue of pd_x, the resForGamma TBuf, the VECIN
queues of variance and mean, the gamma TBuf and, with ``tmp="shared"``, the tmp TBuf (the APIs'
sharedTmpBuffer). With ``tmp="framework"`` the APIs' PopStackBuffer hands out the UB left free, and the kernel
puts the tile's [H] sums after the Beta's temporaries there too (PopStackBuffer of its own). gamma is copied in
once (DataCopyPad, then a MTE2_V flag, widened for half). Per UB tile of whole rows:

- CopyIn (DataCopyPad, EnQue): dy with zero padding to h_align; x one DataCopyPad per row padded with the row's
  mean (read from GM by GetValue), so that x − μ is 0 past H and the API's Σ(x − μ) over the stored H is exact
  (one DataCopyPad for the tile when H is aligned); variance and mean.
- Compute: DeQue, widen (half, CAST_NONE); ``LayerNormGrad<float, isReuseSource>`` into pd_x and resForGamma,
  then ``LayerNormGradBeta<float, isReuseSource>`` on the same rows into the tile's [H] sums (with isReuseSource
  LayerNormGrad computed in dy: it comes from GM again first, FreeTensor, AllocTensor, DataCopyPad, EnQue,
  DeQue); pd_x rounded to half in place (CAST_RINT); EnQue pd_x; a V_MTE3 flag, the sums atomic-added in fp32
  (SetAtomicAdd<float>) into the core's own workspace rows (zeroed by InitOutput first), a MTE3_V flag before
  the next tile's APIs write the temporaries again.
- CopyOut (DataCopyPad) of pd_x's H real columns.

SyncAll, then TPipe.Reset and 64-column tasks round-robin over the cores: each adds the cores' fp32 rows in core
order (a VECIN tensor of block_dim rows, a VECOUT sum) and writes pd_gamma or pd_beta in T: deterministic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba.extending import overload
from tilesim.tiling.common import dtype_name, shape_of
from tilesim.tiling.layer_norm_grad import LANES, LayerNormGradOpTiling, check_tiling
from tilesim.tiling.layer_norm_grad import layer_norm_grad as make_tiling

from tilesim import machine as asc  # AscendC::
from tilesim.interop import accepts_torch
from tilesim.jit import OVERLOAD_OPTIONS, njit
from tilesim.machine.normalization import layer_norm_grad as lng_api
from tilesim.machine.normalization import layer_norm_grad_beta as beta_api
from tilesim.machine.normalization import tmp_buffer
from tilesim.runtime.host_threads import workspace
from tilesim.runtime.launcher import kernel, launch
from tilesim.runtime.report import RunReport
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc

from .common import outputs, to_float

GM_NAMES = ["dy", "x", "variance", "mean", "gamma", "pd_x", "pd_gamma", "pd_beta"]


def _land(buf, n, dtype):  # type: ignore[no-untyped-def]
    """Where T data bound for an fp32 buffer of ``align_up(n, 16)`` elements lands, as a tensor of T: the buffer
    itself for float, for half its upper half (32 B aligned, as DataCopyPad needs)."""


@overload(_land, jit_options=OVERLOAD_OPTIONS)
def _land_typed(buf, n, dtype):  # type: ignore[no-untyped-def]
    if dtype.dt.size == 4:
        return lambda buf, n, dtype: buf.reinterpret_cast(dtype)
    return lambda buf, n, dtype: buf.reinterpret_cast(dtype)[(n + 15) // 16 * 16]


def _widen(buf, n, dtype):  # type: ignore[no-untyped-def]
    """Half: the ``n`` elements landed in ``buf``'s upper half cast to fp32 in place (CAST_NONE: exact)."""


@overload(_widen, jit_options=OVERLOAD_OPTIONS)
def _widen_typed(buf, n, dtype):  # type: ignore[no-untyped-def]
    if dtype.dt.size == 4:
        return lambda buf, n, dtype: None
    return lambda buf, n, dtype: asc.cast(buf, _land(buf, n, dtype), asc.CAST_NONE, n)


@njit(cache=True)
def _copy_in_rows(buf, src, rows, h):
    """DataCopyPad of ``rows`` rows of H into an fp32 buffer, padded with zeros to h_align (isPad, right padding:
    the APIs sum over the stored H, and their doc asks for zeros there; without padding the row's end would hold
    DataCopyPad's dummy bytes)."""
    sz = asc.size_of(src.dtype)
    hp = (h * sz + 31) // 32 * 32 // sz
    asc.data_copy_pad(_land(buf, rows * hp, src.dtype), src, asc.DataCopyExtParams(rows, h * sz, 0, 0),
                      asc.DataCopyPadExtParams(True, 0, hp - h, 0))


def _narrow(buf, n, dtype):  # type: ignore[no-untyped-def]
    """Half: ``n`` fp32 values rounded to half in place (CAST_RINT: to nearest even)."""


@overload(_narrow, jit_options=OVERLOAD_OPTIONS)
def _narrow_typed(buf, n, dtype):  # type: ignore[no-untyped-def]
    if dtype.dt.size == 4:
        return lambda buf, n, dtype: None
    return lambda buf, n, dtype: asc.cast(buf.reinterpret_cast(dtype), buf, asc.CAST_RINT, n)


@njit(cache=True)
def _copy_in(t, dy_que, x_que, var_que, mean_que, dy, x, variance, mean, r0, n):
    """CopyIn: dy, x (each row padded with its mean), variance and mean of rows [r0, r0 + n)."""
    h, hp = t.h, t.h_align
    d = dy_que.alloc_tensor(asc.float32)
    _copy_in_rows(d, dy[r0 * h], n, h)
    dy_que.enque(d)
    xl = x_que.alloc_tensor(asc.float32)
    if h == hp:
        _copy_in_rows(xl, x[r0 * h], n, h)
    else:  # the padding value: the row's mean (a T, exact in x's type)
        sz = asc.size_of(x.dtype)
        for i in range(n):
            pad = asc.DataCopyPadExtParams(True, 0, hp - h, to_float(mean.dtype, mean.get_value(r0 + i)))
            row = asc.DataCopyExtParams(1, h * sz, 0, 0)
            asc.data_copy_pad(_land(xl, n * hp, x.dtype)[i * hp], x[(r0 + i) * h], row, pad)
    x_que.enque(xl)
    v = var_que.alloc_tensor(asc.float32)
    _copy_in_rows(v, variance[r0], 1, n)
    var_que.enque(v)
    m = mean_que.alloc_tensor(asc.float32)
    _copy_in_rows(m, mean[r0], 1, n)
    mean_que.enque(m)


@njit(cache=True)
def _compute(ctx, t, lt, bt, dy_que, x_que, var_que, mean_que, pd_x_que, res, gamma, tmp, dy, r0, n, reuse):
    """Compute: the two float APIs on the tile; returns the tile's [H] sums (pd_gamma, pd_beta) in the
    temporaries' region."""
    h, hp = t.h, t.h_align
    e = n * hp
    d = dy_que.deque(asc.float32)
    xl = x_que.deque(asc.float32)
    v = var_que.deque(asc.float32)
    m = mean_que.deque(asc.float32)
    dt = dy.dtype
    _widen(d, e, dt)
    _widen(xl, e, dt)
    _widen(v, n, dt)
    _widen(m, n, dt)
    pdx = pd_x_que.alloc_tensor(asc.float32)
    lng_api(ctx, pdx, res, d, xl, v, m, gamma, tmp, t.epsilon, lt, reuse)
    x_que.free_tensor(xl)
    var_que.free_tensor(v)
    mean_que.free_tensor(m)
    if reuse:  # LayerNormGrad computed in dy: the Beta needs it again
        dy_que.free_tensor(d)
        d = dy_que.alloc_tensor(asc.float32)
        asc.data_copy_pad(d, dy[r0 * h], asc.DataCopyExtParams(n, h * 4, 0, 0))
        dy_que.enque(d)
        d = dy_que.deque(asc.float32)
    region = tmp_buffer(ctx, tmp)  # the tmp TBuf, or PopStackBuffer's UB
    pg = region[t.pd_gamma_off].reinterpret_cast(asc.float32)
    pb = region[t.pd_beta_off].reinterpret_cast(asc.float32)
    beta_api(ctx, pg, pb, res, d, tmp, bt, reuse)
    dy_que.free_tensor(d)
    _narrow(pdx, e, dt)
    pd_x_que.enque(pdx)
    return pg, pb


@njit(cache=True)
def _tile_sums_out(ctx, pipe, t, pg, pb, ws):
    """The tile's fp32 [H] sums atomic-added into the core's workspace rows (V_MTE3 before, MTE3_V after: the
    next tile's APIs write the same UB; the ids FetchEventID's, beside the queues' own)."""
    hp = t.h_align
    c = asc.get_block_idx(ctx)
    ev = pipe.fetch_event_id(asc.HardEvent.V_MTE3)
    asc.set_flag(ctx, asc.HardEvent.V_MTE3, ev)
    asc.wait_flag(ctx, asc.HardEvent.V_MTE3, ev)
    asc.set_atomic_add(ctx, asc.float32)
    asc.data_copy_pad(ws[2 * c * hp], pg, asc.DataCopyExtParams(1, hp * 4, 0, 0))
    asc.data_copy_pad(ws[(2 * c + 1) * hp], pb, asc.DataCopyExtParams(1, hp * 4, 0, 0))
    asc.set_atomic_none(ctx)
    ev = pipe.fetch_event_id(asc.HardEvent.MTE3_V)
    asc.set_flag(ctx, asc.HardEvent.MTE3_V, ev)
    asc.wait_flag(ctx, asc.HardEvent.MTE3_V, ev)


@njit(cache=True)
def _copy_out(t, pd_x_que, pd_x, r0, n, sz):
    """CopyOut: the H real columns of each row of pd_x."""
    p = pd_x_que.deque(pd_x.dtype)
    asc.data_copy_pad(pd_x[r0 * t.h], p, asc.DataCopyExtParams(n, t.h * sz, 0, 0))
    pd_x_que.free_tensor(p)


@njit(cache=True)
def _final(ctx, pipe, t, ws, pd_gamma, pd_beta):
    """After the SyncAll: 64-column tasks round-robin over the cores add the cores' fp32 rows in core order, cast,
    write."""
    h, hp, bd = t.h, t.h_align, t.block_dim
    pipe.reset()
    rows_que = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, bd * LANES * 4)
    acc_que = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, LANES * 4)
    sz = asc.size_of(pd_gamma.dtype)
    for task in range(asc.get_block_idx(ctx), 2 * ((h + LANES - 1) // LANES), bd):
        which = task % 2  # 0 pd_gamma, 1 pd_beta
        col0 = (task // 2) * LANES
        w = min(LANES, h - col0)
        rows = rows_que.alloc_tensor(asc.float32)
        asc.data_copy_pad(rows, ws[which * hp + col0], asc.DataCopyExtParams(bd, w * 4, (2 * hp - w) * 4, 0))
        rows_que.enque(rows)
        rows = rows_que.deque(asc.float32)
        pitch = (w * 4 + 31) // 32 * 32 // 4
        acc = acc_que.alloc_tensor(asc.float32)
        asc.duplicate(acc, 0.0, pitch)
        for b in range(bd):
            asc.add(acc, acc, rows[b * pitch], pitch)
        rows_que.free_tensor(rows)
        _narrow(acc, pitch, pd_gamma.dtype)
        acc_que.enque(acc)
        acc = acc_que.deque(pd_gamma.dtype)
        out = pd_gamma if which == 0 else pd_beta
        asc.data_copy_pad(out[col0], acc, asc.DataCopyExtParams(1, w * sz, 0, 0))
        acc_que.free_tensor(acc)


@njit(cache=True)
def _init(ctx, t):
    """Init: the TPipe and the buffers of a tile (all fp32-sized), before the temporaries."""
    rows, hp = t.ub_rows, t.h_align
    stat = (rows + 15) // 16 * 16 * 4  # room for half to land in the upper half, 32 B aligned
    pipe = asc.TPipe(ctx)
    dy_que = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, rows * hp * 4)
    x_que = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, rows * hp * 4)
    pd_x_que = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, rows * hp * 4)
    res_for_gamma = pipe.init_buffer(asc.TBuf(asc.VECCALC), rows * hp * 4)
    var_que = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, stat)
    mean_que = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, stat)
    gamma_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), hp * 4)
    return pipe, dy_que, x_que, pd_x_que, res_for_gamma.get(asc.float32), var_que, mean_que, gamma_buf.get(asc.float32)


@njit(cache=True)
def _process(ctx, t, queues, tmp, dy, x, variance, mean, gamma, pd_x):
    """The core's part before the SyncAll: its workspace rows zeroed, gamma, then its rows tile by tile."""
    pipe, dy_que, x_que, pd_x_que, res, var_que, mean_que, g = queues
    reuse = t.is_reuse_source != 0
    h, hp, rows = t.h, t.h_align, t.ub_rows
    ws = asc.get_user_workspace(ctx).reinterpret_cast(asc.float32)
    c = asc.get_block_idx(ctx)
    asc.init_output(ws[2 * c * hp], 2 * hp, 0.0)
    _copy_in_rows(g, gamma, 1, h)
    ev = pipe.fetch_event_id(asc.HardEvent.MTE2_V)
    asc.set_flag(ctx, asc.HardEvent.MTE2_V, ev)
    asc.wait_flag(ctx, asc.HardEvent.MTE2_V, ev)
    _widen(g, hp, gamma.dtype)
    n_rows = t.tail_rows if c == t.block_dim - 1 else t.block_factor
    r0 = c * t.block_factor
    sz = asc.size_of(x.dtype)
    for done in range(0, n_rows, rows):
        n = min(rows, n_rows - done)
        k = 0 if n == rows else (1 if c < t.block_dim - 1 else 2)  # a full tile, a full core's last, the tail's
        _copy_in(t, dy_que, x_que, var_que, mean_que, dy, x, variance, mean, r0 + done, n)
        pg, pb = _compute(ctx, t, t.lng[k], t.beta[k], dy_que, x_que, var_que, mean_que, pd_x_que, res, g, tmp, dy,
                          r0 + done, n, reuse)
        _tile_sums_out(ctx, pipe, t, pg, pb, ws)
        _copy_out(t, pd_x_que, pd_x, r0 + done, n, sz)
    return ws


@kernel
def layer_norm_grad_kernel(ctx, t, dy, x, variance, mean, gamma, pd_x, pd_gamma, pd_beta):
    """``tmp="shared"``: Init with the tmp TBuf last, the tiles, SyncAll, the final sums."""
    queues = _init(ctx, t)
    tmp_buf = queues[0].init_buffer(asc.TBuf(asc.VECCALC), t.region_bytes)
    ws = _process(ctx, t, queues, tmp_buf.get(asc.uint8), dy, x, variance, mean, gamma, pd_x)
    asc.sync_all(ctx)
    _final(ctx, queues[0], t, ws, pd_gamma, pd_beta)


@kernel
def layer_norm_grad_framework_kernel(ctx, t, dy, x, variance, mean, gamma, pd_x, pd_gamma, pd_beta):
    """``tmp="framework"``: the APIs without a sharedTmpBuffer (their PopStackBuffer: the UB Init left free)."""
    queues = _init(ctx, t)
    ws = _process(ctx, t, queues, None, dy, x, variance, mean, gamma, pd_x)
    asc.sync_all(ctx)
    _final(ctx, queues[0], t, ws, pd_gamma, pd_beta)


def run(t: LayerNormGradOpTiling, spec: SocSpec, dy: np.ndarray, x: np.ndarray, variance: np.ndarray,
        mean: np.ndarray, gamma: np.ndarray, pd_x: np.ndarray, pd_gamma: np.ndarray, pd_beta: np.ndarray,
        ws: np.ndarray | None, checks: bool | None = None, auto_sync: bool | None = None) -> RunReport:
    """Launch the kernel on validated arrays (the device part of the op); ``auto_sync`` is BiSheng's
    ``--cce-auto-sync`` for checked mode."""
    k = layer_norm_grad_kernel if t.tmp_mode == 0 else layer_norm_grad_framework_kernel
    return launch(k, t, *(np.ascontiguousarray(a) for a in (dy, x, variance, mean, gamma)),
                  pd_x, pd_gamma, pd_beta, block_dim=t.block_dim, outputs=3, soc=spec, checks=checks, workspace=ws,
                  op="layer_norm_grad", gm_names=GM_NAMES, auto_sync=auto_sync)


@accepts_torch(arrays=("dy", "x", "variance", "mean", "gamma"))
def layer_norm_grad(dy: Any, x: Any, variance: Any, mean: Any, gamma: Any, *, epsilon: float = 1e-5,
                    soc: str | SocSpec = DEFAULT_SOC, tmp: str = "shared", is_reuse_source: bool = False,
                    tiling: LayerNormGradOpTiling | None = None, checks: bool | None = None,
                    out: tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None] | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Layer-norm backward over the last axis: ``(pd_x, pd_gamma, pd_beta)`` in x's dtype (float32 or float16)
    from dy and x [..., H], the forward's variance and mean [...] and gamma [H], with rstd = (variance +
    epsilon)^−1/2, computed by a multi-core kernel built on the LayerNormGrad and LayerNormGradBeta APIs.

    ``tmp`` chooses the APIs' temporaries (a sharedTmpBuffer of the plan, or the framework's: all UB left free);
    ``is_reuse_source`` lets the APIs compute in their sources (float only); ``tiling`` runs a tiling made with
    ``tiling.layer_norm_grad(..., core_num=..., ub_rows=...)``. Errors raise :class:`tilesim.AclnnError`;
    nothing is written on error.
    """
    spec = get_soc(soc)
    args = (dy, x, variance, mean, gamma)
    kw = {"epsilon": epsilon, "soc": spec, "tmp": tmp, "is_reuse_source": is_reuse_source}
    t = make_tiling(*args, **kw) if tiling is None else check_tiling(tiling, *args, **kw)
    dt = dtype_name(x)
    pd_x, pd_gamma, pd_beta = outputs(out, ("pd_x", shape_of(x), dt), ("pd_gamma", (t.h,), dt),
                                      ("pd_beta", (t.h,), dt))
    run(t, spec, dy, x, variance, mean, gamma, pd_x, pd_gamma, pd_beta, workspace(t.workspace_size), checks)
    return pd_x, pd_gamma, pd_beta
