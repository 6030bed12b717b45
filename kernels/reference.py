"""Untiled float64 math of each op: the oracle the tiled kernels are checked against."""

from __future__ import annotations

from typing import Any

import numpy as np


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def rms_norm_grad(dy: Any, x: Any, rstd: Any, gamma: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(dx, dgamma)`` in float64: xh = x * rstd, dx = rstd * (dy * g - xh * mean_D(dy * g * xh)),
    dgamma = sum_rows(dy * xh). Rows are the leading axes of x not covered by gamma."""
    g = _f64(gamma)
    d = g.size
    dy2, x2 = _f64(dy).reshape(-1, d), _f64(x).reshape(-1, d)
    r = _f64(rstd).reshape(-1, 1)
    g2 = g.reshape(1, d)
    xh = x2 * r
    m = np.mean(dy2 * g2 * xh, axis=1, keepdims=True)
    dx = r * (dy2 * g2 - xh * m)
    dgamma = np.sum(dy2 * xh, axis=0)
    return dx.reshape(np.shape(x)), dgamma.reshape(np.shape(gamma))
