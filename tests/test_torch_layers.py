"""The layers of :mod:`tilesim.torch`: forward and backward through the emulated kernels, judged by Ascend's
precision standard against the float64 math of :mod:`tilesim.kernels.reference` (and torch's own forward where the
layer uses it), on the SoC chosen; what the kernels refuse is refused in the forward."""

from __future__ import annotations

import pytest
import torch
from tilesim.kernels import reference

import tilesim
import tilesim.torch as tt

SOC = "Ascend910B3"


def leaf(*shape: int, dtype: torch.dtype, lo: float = -2.0, hi: float = 2.0) -> torch.Tensor:
    return torch.empty(shape).uniform_(lo, hi).to(dtype).requires_grad_()


def ops_of(runs: list) -> set[str]:
    return {r.op for r in runs}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_rms_norm(dtype: torch.dtype, ascend_close) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    layer = tt.RMSNorm(80, soc=SOC, dtype=dtype)
    with torch.no_grad():
        layer.weight.uniform_(0.5, 1.5)
    x = leaf(3, 5, 80, dtype=dtype)
    dy = torch.randn(3, 5, 80).to(dtype)
    with tilesim.capture() as runs:
        y = layer(x)
        y.backward(dy)
    assert ops_of(runs) == {"rms_norm", "rms_norm_grad"} and {r.soc for r in runs} == {SOC}
    want_y, rstd = reference.rms_norm(x.detach(), layer.weight.detach(), 1e-6)
    want_dx, want_dw = reference.rms_norm_grad(dy, x.detach(), rstd, layer.weight.detach())
    assert y.dtype == dtype and layer.weight.grad.dtype == dtype
    ascend_close((y.detach(), x.grad, layer.weight.grad), (want_y, want_dx, want_dw), what=("y", "dx", "dweight"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_swiglu(dtype: torch.dtype, ascend_close) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    x = leaf(4, 6, 2, 64, dtype=dtype, lo=-3, hi=3)
    layer = tt.SwiGLU(dim=2, soc=SOC)
    dy = torch.randn(4, 6, 1, 64).to(dtype)
    with tilesim.capture() as runs:
        y = layer(x)
        y.backward(dy)
    assert ops_of(runs) == {"swiglu", "swiglu_grad"} and y.shape == (4, 6, 1, 64)
    ascend_close((y.detach(), x.grad), (reference.swiglu(x.detach(), 2), reference.swiglu_grad(dy, x.detach(), 2)),
                 what=("y", "dx"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_layer_norm_backward(dtype: torch.dtype, ascend_close) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    layer = tt.LayerNorm(72, soc=SOC, dtype=dtype)
    with torch.no_grad():
        layer.weight.uniform_(0.5, 1.5)
        layer.bias.uniform_(-1, 1)
    x = leaf(6, 7, 72, dtype=dtype)
    dy = torch.randn(6, 7, 72).to(dtype)
    with tilesim.capture() as runs:
        y = layer(x)
        y.backward(dy)
    assert ops_of(runs) == {"layer_norm_grad"}
    assert torch.equal(y, torch.nn.functional.layer_norm(x, (72,), layer.weight, layer.bias, 1e-5))
    x32 = x.detach().float()
    var, mean = (t.to(dtype) for t in torch.var_mean(x32, dim=-1, correction=0))
    want = reference.layer_norm_grad(dy, x.detach(), var, mean, layer.weight.detach(), 1e-5)
    ascend_close((x.grad, layer.weight.grad, layer.bias.grad), want, what=("dx", "dweight", "dbias"))


def test_layer_norm_over_two_axes_without_bias_follows_torch() -> None:
    torch.manual_seed(0)
    layer = tt.LayerNorm((4, 24), bias=False, soc=SOC)
    ref = torch.nn.LayerNorm((4, 24), bias=False)
    with torch.no_grad():
        layer.weight.uniform_(0.5, 1.5)
        ref.weight.copy_(layer.weight)
    x = leaf(5, 4, 24, dtype=torch.float32)
    x_ref = x.detach().clone().requires_grad_()
    dy = torch.randn(5, 4, 24)
    layer(x).backward(dy)
    ref(x_ref).backward(dy)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(layer.weight.grad, ref.weight.grad, rtol=1e-5, atol=1e-6)


def test_layer_norm_refuses_bf16_in_the_forward() -> None:
    layer = tt.LayerNorm(64, soc=SOC, dtype=torch.bfloat16)
    with pytest.raises(tilesim.AclnnError, match="LayerNormGrad takes float32 or float16") as e:
        layer(torch.randn(4, 64).to(torch.bfloat16))
    assert e.value.status == tilesim.ACLNN_ERR_PARAM_INVALID


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_group_norm_backward(dtype: torch.dtype, ascend_close) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    layer = tt.GroupNorm(4, 16, soc=SOC, dtype=dtype)
    with torch.no_grad():
        layer.weight.uniform_(0.5, 1.5)
    x = leaf(3, 16, 5, 6, dtype=dtype)
    dy = torch.randn(3, 16, 5, 6).to(dtype)
    with tilesim.capture() as runs:
        y = layer(x)
        y.backward(dy)
    assert ops_of(runs) == {"group_norm_backward"}
    assert torch.equal(y, torch.nn.functional.group_norm(x, 4, layer.weight, layer.bias, 1e-5))
    _, mean, rstd = torch.native_group_norm(x.detach(), None, None, 3, 16, 30, 4, 1e-5)
    want = reference.group_norm_backward(dy, x.detach(), mean.to(dtype), rstd.to(dtype), layer.weight.detach(), 3,
                                         16, 30, 4)
    ascend_close((x.grad, layer.weight.grad, layer.bias.grad), want, what=("dx", "dweight", "dbias"))


def test_group_norm_without_affine_gives_dx_only(ascend_close) -> None:  # type: ignore[no-untyped-def]
    layer = tt.GroupNorm(2, 8, affine=False, soc=SOC)
    x = leaf(2, 8, 12, dtype=torch.float32)
    dy = torch.randn(2, 8, 12)
    layer(x).backward(dy)
    _, mean, rstd = torch.native_group_norm(x.detach(), None, None, 2, 8, 12, 2, 1e-5)
    ascend_close(x.grad, reference.group_norm_backward(dy, x.detach(), mean, rstd, None, 2, 8, 12, 2)[0])


def test_checked_layers_run_checked() -> None:
    layer = tt.RMSNorm(64, soc=SOC, checks=True)
    x = leaf(4, 64, dtype=torch.float32)
    with tilesim.capture() as runs:
        layer(x).sum().backward()
    assert [r.checks for r in runs] == [True, True]


def test_the_soc_decides() -> None:
    """SwiGLU runs on 310P's build and core count (fp16); RMSNorm's A2-only kernels refuse 310P, named."""
    x = leaf(4, 128, dtype=torch.float16)
    with tilesim.capture() as runs:
        tt.SwiGLU(soc="Ascend310P3")(x).sum().backward()
    assert [r.soc for r in runs] == ["Ascend310P3"] * 2
    with pytest.raises(tilesim.AclnnError, match="soc: tilesim emulates the A2 build of RmsNorm") as e:
        tt.RMSNorm(64, soc="Ascend310P3")(torch.randn(4, 64))
    assert e.value.status == 561003
