"""The two-phase aclnn form: ``<op>_get_workspace_size(...)`` returns ``(status, workspace_size, executor)``,
then ``<op>(workspace, workspace_size, executor, stream)`` returns a status, as ``aclnn<Op>GetWorkspaceSize``
and ``aclnn<Op>`` do, so host code prototyped here maps line by line to aclnn. Errors never raise: the status
says what failed and :func:`get_recent_err_msg` (``aclGetRecentErrMsg``) says why. Tensors and outputs may be
numpy arrays or torch CPU tensors (:mod:`tilesim.interop`: the outputs are written through views of their memory),
the workspace a uint8 array or tensor.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from tilesim.tiling.common import FP32, dtype_name, require, shape_of
from tilesim.tiling.group_norm_backward import check_args as group_norm_backward_check_args
from tilesim.tiling.group_norm_backward import group_norm_backward as group_norm_backward_tiling
from tilesim.tiling.layer_norm_grad import layer_norm_grad as layer_norm_grad_tiling
from tilesim.tiling.nsa_compress_grad import nsa_compress_grad as nsa_compress_grad_tiling
from tilesim.tiling.rms_norm import check_args as rms_norm_check_args
from tilesim.tiling.rms_norm import out_shapes as rms_norm_out_shapes
from tilesim.tiling.rms_norm import rms_norm as rms_norm_tiling
from tilesim.tiling.rms_norm import ub_plan as rms_norm_ub_plan
from tilesim.tiling.rms_norm_grad import rms_norm_grad as rms_norm_grad_tiling
from tilesim.tiling.rms_norm_grad import ub_plan as rms_norm_grad_ub_plan
from tilesim.tiling.softmax import check_args as softmax_check_args
from tilesim.tiling.softmax import softmax as softmax_tiling
from tilesim.tiling.swiglu import check_args as swiglu_check_args
from tilesim.tiling.swiglu import out_shape as swiglu_out_shape
from tilesim.tiling.swiglu import swiglu as swiglu_tiling
from tilesim.tiling.swiglu_grad import swiglu_grad as swiglu_grad_tiling
from tilesim.tiling.swiglu_grad import ub_plan as swiglu_grad_ub_plan

from tilesim.errors import (
    ACLNN_ERR_PARAM_INVALID,
    ACLNN_ERR_PARAM_NULLPTR,
    ACLNN_SUCCESS,
    AclnnError,
    invalid,
    null_error,
    tiling_error,
)
from tilesim.interop import accepts_torch
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc

from . import group_norm_backward as _group_norm_backward
from . import layer_norm_grad as _layer_norm_grad
from . import nsa_compress_grad as _nsa_compress_grad
from . import rms_norm as _rms_norm
from . import rms_norm_grad as _rms_norm_grad
from . import softmax as _softmax
from . import swiglu as _swiglu
from . import swiglu_grad as _swiglu_grad
from .common import distinct

_recent = [""]


@dataclass
class Executor:
    """aclOpExecutor: the validated call, ready to run on a workspace."""

    op: str
    workspace_size: int
    run: Callable[[np.ndarray | None], None]
    tiling: Any


def get_recent_err_msg() -> str:
    """aclGetRecentErrMsg: the message of the last failed call ("" when none failed)."""
    return _recent[0]


def _fail(e: AclnnError) -> int:
    _recent[0] = e.message
    return e.status


F = TypeVar("F", bound=Callable[..., Any])


def _tensors_as_arrays(*arrays: str) -> Callable[[F], F]:
    """A ``<op>_get_workspace_size`` taking torch CPU tensors (:func:`tilesim.interop.accepts_torch`), and
    array-likes for its input tensors ``arrays``; what they refuse (a tensor off the CPU, a ragged list) is a
    status, as every error of this form is."""
    def wrap(get_workspace_size: F) -> F:
        with_tensors = accepts_torch(get_workspace_size, arrays=arrays)

        @functools.wraps(get_workspace_size)
        def call(*args: Any, **kwargs: Any) -> tuple[int, int, Executor | None]:
            try:
                return with_tensors(*args, **kwargs)
            except AclnnError as e:
                return _fail(e), 0, None

        return call  # type: ignore[return-value]

    return wrap


def _check_output(name: str, o: Any, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if o is None:
        raise null_error(name)
    if not isinstance(o, np.ndarray):
        raise invalid(name, f"must be a C-contiguous, writeable numpy array (or torch tensor), got {type(o).__name__}")
    if dtype_name(o) != dtype:
        raise invalid(name, f"dtype {dtype_name(o)} must be {dtype}")
    if shape_of(o) != shape:
        raise tiling_error(name, f"shape {list(shape_of(o))} must be {list(shape)}")
    if not o.flags.c_contiguous or not o.flags.writeable:
        raise invalid(name, "must be a C-contiguous, writeable numpy array")
    return o


@_tensors_as_arrays("dy", "x", "rstd", "gamma")
def rms_norm_grad_get_workspace_size(dy: Any, x: Any, rstd: Any, gamma: Any, dx_out: Any, dgamma_out: Any, *,
                                     soc: str | SocSpec = DEFAULT_SOC,
                                     deterministic: bool = False) -> tuple[int, int, Executor | None]:
    """aclnnRmsNormGradGetWorkspaceSize: ``(status, workspace_size, executor)``."""
    try:
        spec = get_soc(soc)
        t = rms_norm_grad_tiling(dy, x, rstd, gamma, soc=spec, deterministic=deterministic)
        dx = _check_output("dxOut", dx_out, shape_of(dy), dtype_name(dy))
        dgamma = _check_output("dgammaOut", dgamma_out, shape_of(gamma), FP32)
        distinct([("dxOut", dx), ("dgammaOut", dgamma)])
        _rms_norm_grad.check_supported(t)
        rms_norm_grad_ub_plan(t, spec).check()
    except AclnnError as e:
        return _fail(e), 0, None

    def run(ws: np.ndarray | None) -> None:
        _rms_norm_grad.run(t, spec, dy, x, rstd, gamma, dx, dgamma, ws)

    _recent[0] = ""
    return ACLNN_SUCCESS, t.workspace_size, Executor("rms_norm_grad", t.workspace_size, run, t)


def _execute(op: str, workspace: Any, workspace_size: int, executor: Executor | None) -> int:
    if executor is None:
        return _fail(null_error("executor"))
    if not isinstance(executor, Executor):
        return _fail(invalid("executor", f"must be the executor of {op}_get_workspace_size, got "
                                         f"{type(executor).__name__}"))
    if executor.op != op:
        return _fail(invalid("executor", f"made for {executor.op}, not {op}"))
    if isinstance(workspace_size, bool) or not isinstance(workspace_size, int | np.integer):
        return _fail(invalid("workspaceSize", f"must be an integer, got {type(workspace_size).__name__}"))
    need = executor.workspace_size
    if need:
        if workspace is None:
            return _fail(null_error("workspace"))
        try:
            ws = np.asarray(workspace)
        except (ValueError, TypeError):  # a ragged list, an object numpy cannot read
            ws = np.asarray(None)
        if ws.dtype != np.uint8 or ws.ndim != 1 or workspace_size < need or ws.size < need:
            return _fail(AclnnError(ACLNN_ERR_PARAM_INVALID, f"workspace: needs a 1-D uint8 array of at least {need} "
                                                             f"B (workspaceSize {workspace_size}, array "
                                                             f"{ws.dtype} {ws.shape})"))
    else:
        ws = None
    try:
        executor.run(ws)
    except AclnnError as e:
        return _fail(e)
    _recent[0] = ""
    return ACLNN_SUCCESS


def rms_norm_grad(workspace: Any, workspace_size: int, executor: Executor | None, stream: Any = None) -> int:
    """aclnnRmsNormGrad: runs the executor on ``workspace``; returns the status."""
    return _execute("rms_norm_grad", workspace, workspace_size, executor)


@_tensors_as_arrays("x", "gamma")
def rms_norm_get_workspace_size(x: Any, gamma: Any, epsilon: float, y_out: Any, rstd_out: Any, *,
                                soc: str | SocSpec = DEFAULT_SOC) -> tuple[int, int, Executor | None]:
    """aclnnRmsNormGetWorkspaceSize: ``(status, workspace_size, executor)``; the workspace is the tiling's 256 B +
    16 MiB, which the kernels do not touch. An empty x succeeds with workspace 0 and an executor that computes
    nothing."""
    try:
        require(x=x, gamma=gamma, yOut=y_out, rstdOut=rstd_out)
        spec = get_soc(soc)
        rows, _ = rms_norm_check_args(x, gamma, epsilon, spec)
        y_shape, rstd_shape = rms_norm_out_shapes(x, gamma)
        y = _check_output("yOut", y_out, y_shape, dtype_name(x))
        r = _check_output("rstdOut", rstd_out, rstd_shape, FP32)
        distinct([("yOut", y), ("rstdOut", r)])
        t = None
        if rows:
            t = rms_norm_tiling(x, gamma, float(epsilon), soc=spec)
            rms_norm_ub_plan(t, spec).check()
    except AclnnError as e:
        return _fail(e), 0, None

    def run(ws: np.ndarray | None) -> None:
        if t is not None:
            _rms_norm.run(t, spec, x, gamma, y, r, ws)

    size = 0 if t is None else t.workspace_size
    _recent[0] = ""
    return ACLNN_SUCCESS, size, Executor("rms_norm", size, run, t)


def rms_norm(workspace: Any, workspace_size: int, executor: Executor | None, stream: Any = None) -> int:
    """aclnnRmsNorm: runs the executor on ``workspace``; returns the status."""
    return _execute("rms_norm", workspace, workspace_size, executor)


@_tensors_as_arrays("grad_out", "input", "mean", "rstd", "gamma")
def group_norm_backward_get_workspace_size(grad_out: Any, input: Any, mean: Any, rstd: Any, gamma: Any, N: int,  # noqa: N803
                                           C: int, HxW: int, group: int, output_mask: Any, grad_input: Any,  # noqa: N803
                                           grad_gamma_out: Any, grad_beta_out: Any, *,
                                           soc: str | SocSpec = DEFAULT_SOC) -> tuple[int, int, Executor | None]:
    """aclnnGroupNormBackwardGetWorkspaceSize: ``(status, workspace_size, executor)``. Outputs whose mask bit is
    false may be None. Empty inputs succeed with workspace 0 and an executor that computes nothing; on SoCs
    that decompose the op the workspace the l0 ops use is not modelled (0)."""
    outputs = (grad_input, grad_gamma_out, grad_beta_out)
    try:
        spec = get_soc(soc)
        group_norm_backward_check_args(grad_out, input, mean, rstd, gamma, N, C, HxW, group, output_mask, outputs,
                                       spec)
        mask = tuple(bool(m) for m in output_mask)
        names = ("gradInput", "gradGammaOut", "gradBetaOut")
        res = [_check_output(names[i], outputs[i], shape_of(outputs[i]), dtype_name(grad_out)) if mask[i] else None
               for i in range(3)]
        distinct([(n, r) for n, r in zip(names, res, strict=True) if r is not None])
        t = None
        if N * C * HxW and spec.arch == 220:
            t = group_norm_backward_tiling(grad_out, input, mean, rstd, gamma, N, C, HxW, group, mask, soc=spec)
    except AclnnError as e:
        return _fail(e), 0, None

    def run(ws: np.ndarray | None) -> None:
        if N * C * HxW:
            _group_norm_backward.execute(t, spec, grad_out, input, mean, rstd, gamma, N, C, HxW, group, mask, res, ws)

    size = t.workspace_size if t is not None else 0
    _recent[0] = ""
    return ACLNN_SUCCESS, size, Executor("group_norm_backward", size, run, t)


def group_norm_backward(workspace: Any, workspace_size: int, executor: Executor | None, stream: Any = None) -> int:
    """aclnnGroupNormBackward: runs the executor on ``workspace``; returns the status."""
    return _execute("group_norm_backward", workspace, workspace_size, executor)


@_tensors_as_arrays("y_grad", "x")
def swi_glu_grad_get_workspace_size(y_grad: Any, x: Any, dim: int, out: Any, *,
                                    soc: str | SocSpec = DEFAULT_SOC) -> tuple[int, int, Executor | None]:
    """aclnnSwiGluGradGetWorkspaceSize: ``(status, workspace_size, executor)``; the workspace is the tiling's
    16 MiB, which the kernel does not touch."""
    try:
        spec = get_soc(soc)
        t = swiglu_grad_tiling(y_grad, x, dim, soc=spec)
        res = _check_output("out", out, shape_of(x), dtype_name(x))
        swiglu_grad_ub_plan(t, spec).check()
    except AclnnError as e:
        return _fail(e), 0, None

    def run(ws: np.ndarray | None) -> None:
        _swiglu_grad.run(t, spec, y_grad, x, res, ws)

    _recent[0] = ""
    return ACLNN_SUCCESS, t.workspace_size, Executor("swi_glu_grad", t.workspace_size, run, t)


def swi_glu_grad(workspace: Any, workspace_size: int, executor: Executor | None, stream: Any = None) -> int:
    """aclnnSwiGluGrad: runs the executor on ``workspace``; returns the status."""
    return _execute("swi_glu_grad", workspace, workspace_size, executor)


@_tensors_as_arrays("x")
def swi_glu_get_workspace_size(x: Any, dim: int, out: Any, *,
                               soc: str | SocSpec = DEFAULT_SOC) -> tuple[int, int, Executor | None]:
    """aclnnSwiGluGetWorkspaceSize: ``(status, workspace_size, executor)``; the workspace is the tiling's 16 MiB,
    which the kernel does not touch. An empty x (910B, 910_93) succeeds with workspace 0 and an executor that
    computes nothing."""
    try:
        spec = get_soc(soc)
        rows, cols = swiglu_check_args(x, dim, spec)
        res = _check_output("out", out, swiglu_out_shape(x, dim), dtype_name(x))
        t = swiglu_tiling(x, dim, soc=spec) if rows * cols else None
    except AclnnError as e:
        return _fail(e), 0, None

    def run(ws: np.ndarray | None) -> None:
        if t is not None:
            _swiglu.run(t, spec, x, res, ws)

    size = 0 if t is None else t.workspace_size
    _recent[0] = ""
    return ACLNN_SUCCESS, size, Executor("swi_glu", size, run, t)


def swi_glu(workspace: Any, workspace_size: int, executor: Executor | None, stream: Any = None) -> int:
    """aclnnSwiGlu: runs the executor on ``workspace``; returns the status."""
    return _execute("swi_glu", workspace, workspace_size, executor)


@_tensors_as_arrays("x")
def softmax_get_workspace_size(x: Any, dim: int, out: Any, *,
                               soc: str | SocSpec = DEFAULT_SOC) -> tuple[int, int, Executor | None]:
    """aclnnSoftmaxGetWorkspaceSize (``self`` is ``x``): ``(status, workspace_size, executor)``, checked in
    aclnnSoftmax's order (None first; an empty x then succeeds with workspace 0 and an executor that computes
    nothing); the workspace is the tiling's 16 MiB, which the kernel does not touch. float64 (the AI CPU's, computed
    on the host: :func:`kernels.softmax.ai_cpu_softmax`) has no tiling and asks for no workspace."""
    try:
        require(x=x, out=out)
        spec = get_soc(soc)
        rows, cols = softmax_check_args(x, dim, out, spec)
        t = None
        host = False
        if rows * cols:
            res = _check_output("out", out, shape_of(x), dtype_name(x))
            host = dtype_name(x) == "float64"
            if not host:
                t = softmax_tiling(x, dim, soc=spec)
    except AclnnError as e:
        return _fail(e), 0, None

    def run(ws: np.ndarray | None) -> None:
        if host:
            res[...] = _softmax.ai_cpu_softmax(x, int(dim))
        elif t is not None:
            _softmax.run(t, spec, x, res, ws)

    size = 0 if t is None else t.workspace_size
    _recent[0] = ""
    return ACLNN_SUCCESS, size, Executor("softmax", size, run, t)


def softmax(workspace: Any, workspace_size: int, executor: Executor | None, stream: Any = None) -> int:
    """aclnnSoftmax: runs the executor on ``workspace``; returns the status."""
    return _execute("softmax", workspace, workspace_size, executor)


@_tensors_as_arrays("dy", "x", "variance", "mean", "gamma")
def layer_norm_grad_get_workspace_size(dy: Any, x: Any, variance: Any, mean: Any, gamma: Any, epsilon: float,
                                      pd_x: Any, pd_gamma: Any, pd_beta: Any, *, soc: str | SocSpec = DEFAULT_SOC,
                                      tmp: str = "shared",
                                      is_reuse_source: bool = False) -> tuple[int, int, Executor | None]:
    """The two-phase form of ``kernels.layer_norm_grad`` (tilesim's op on the LayerNormGrad APIs; there is no
    aclnn op of this design): ``(status, workspace_size, executor)``."""
    try:
        spec = get_soc(soc)
        t = layer_norm_grad_tiling(dy, x, variance, mean, gamma, epsilon=epsilon, soc=spec, tmp=tmp,
                                   is_reuse_source=is_reuse_source)
        dt = dtype_name(x)
        outs = (_check_output("pd_x", pd_x, shape_of(x), dt), _check_output("pd_gamma", pd_gamma, (t.h,), dt),
                _check_output("pd_beta", pd_beta, (t.h,), dt))
        distinct(list(zip(("pd_x", "pd_gamma", "pd_beta"), outs, strict=True)))
    except AclnnError as e:
        return _fail(e), 0, None

    def run(ws: np.ndarray | None) -> None:
        _layer_norm_grad.run(t, spec, dy, x, variance, mean, gamma, *outs, ws)

    _recent[0] = ""
    return ACLNN_SUCCESS, t.workspace_size, Executor("layer_norm_grad", t.workspace_size, run, t)


def layer_norm_grad(workspace: Any, workspace_size: int, executor: Executor | None, stream: Any = None) -> int:
    """Runs a layer_norm_grad executor on ``workspace``; returns the status."""
    return _execute("layer_norm_grad", workspace, workspace_size, executor)


@_tensors_as_arrays("output_grad", "input", "weight")
def nsa_compress_grad_get_workspace_size(output_grad: Any, input: Any, weight: Any,  # noqa: A002
                                        act_seq_len: Any, compress_block_size: int, compress_stride: int,
                                        act_seq_len_type: int, layout: str, input_grad: Any, weight_grad: Any, *,
                                        soc: str | SocSpec = DEFAULT_SOC) -> tuple[int, int, Executor | None]:
    """aclnnNsaCompressGradGetWorkspaceSize: ``(status, workspace_size, executor)``."""
    try:
        require(inputGrad=input_grad, weightGrad=weight_grad)
        spec = get_soc(soc)
        t = nsa_compress_grad_tiling(output_grad, input, weight, act_seq_len, compress_block_size,
                                     compress_stride, act_seq_len_type, layout, soc=spec)
        dt = dtype_name(input)
        dx = _check_output("inputGrad", input_grad, shape_of(input), dt)
        dw = _check_output("weightGrad", weight_grad, shape_of(weight), dt)
        distinct([("inputGrad", dx), ("weightGrad", dw)])
    except AclnnError as e:
        return _fail(e), 0, None

    def run(ws: np.ndarray | None) -> None:
        _nsa_compress_grad.run(t, spec, output_grad, input, weight, act_seq_len, dx, dw, ws)

    _recent[0] = ""
    return ACLNN_SUCCESS, t.workspace_size, Executor("nsa_compress_grad", t.workspace_size, run, t)


def nsa_compress_grad(workspace: Any, workspace_size: int, executor: Executor | None, stream: Any = None) -> int:
    """aclnnNsaCompressGrad: runs the executor on ``workspace``; returns the status."""
    return _execute("nsa_compress_grad", workspace, workspace_size, executor)


__all__ = ["ACLNN_ERR_PARAM_NULLPTR", "Executor", "get_recent_err_msg", "group_norm_backward",
           "group_norm_backward_get_workspace_size", "layer_norm_grad", "layer_norm_grad_get_workspace_size",
           "nsa_compress_grad", "nsa_compress_grad_get_workspace_size",
           "rms_norm", "rms_norm_get_workspace_size", "rms_norm_grad", "rms_norm_grad_get_workspace_size",
           "softmax", "softmax_get_workspace_size",
           "swi_glu", "swi_glu_get_workspace_size", "swi_glu_grad", "swi_glu_grad_get_workspace_size"]
